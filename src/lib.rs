//! MoonCDC: change data capture as Unix tools.
//!
//! Row changes leave a database as JSON lines, flow through pipes and files,
//! and land in another database with every value carried exactly. This crate
//! is the library behind the `mooncdc-*` binaries.
//!
//! | module | role |
//! | --- | --- |
//! | [`wire`] | the codec: values, cursors, events, schemas, batches, snapshots, limits |
//! | [`ops`] | split, merge and compact over batch streams |
//! | [`pg`] | PostgreSQL's client side, shared by the source and the target: connections, TLS, sessions, types, COPY |
//! | [`source`] | where changes come from: the [`source::Source`] trait; `sqlite/`, `postgres/` |
//! | [`destination`] | where they land: the [`destination::Target`] trait and the batch loop (`driver`); `sqlite/`, `postgres/`, `clickhouse/`, `dir/` (archives), `memory` (the contract double) |
//! | [`endpoint`] | a database URL parsed once, redacted, opened as a source or a target |
//! | [`audit`] | source against target, row by row in key order, over the traits |
//! | [`cmd`] | each tool's logic, one module per `mooncdc-*` binary |
//! | [`cli`] | what the tools share: arguments, inputs, outputs, progress, exit statuses |
//! | [`metrics`] | counters, gauges, `/metrics`, `/livez`, `/readyz` for long-running tools |
//! | [`log`] | messages on standard error, plain or JSON lines |
//! | [`error`] | the one error type: a kind, a message, the file and line, the cause |
//! | [`sqlite_util`], [`util`] | SQLite helpers (opening, schemas, exact values); URL decoding and identifier quoting |
//!
//! See `docs/ARCHITECTURE.md` for the map and how to add a source or a target.
//!
//! Decoding and re-encoding a batch:
//!
//! ```
//! use mooncdc::wire::{Batch, Value};
//!
//! let text = concat!(
//!     r#"{"kind":"header","format":"mooncdc.jsonl.v1","start":{"source":"s","sequence":"0"},"high_water":"1"}"#, "\n",
//!     r#"{"kind":"event","event":{"sequence":"1","table":"t","operation":"insert","after":[["real","1","-3"]]}}"#, "\n",
//!     r#"{"kind":"commit","end":{"source":"s","sequence":"1"},"count":"1"}"#, "\n",
//! );
//! let batch = Batch::from_jsonl(text).unwrap();
//! assert!(batch.events[0].after.as_ref().unwrap()[0].same(&Value::Real(0.125)));
//! assert_eq!(batch.to_jsonl(), text.as_bytes());
//! ```

pub mod audit;
pub mod cli;
pub mod cmd;
pub mod destination;
pub mod endpoint;
pub mod error;
pub mod log;
pub mod metrics;
pub mod ops;
pub mod pg;
pub mod source;
pub mod sqlite_util;
pub mod util;
pub mod wire;

pub use error::{Error, ErrorKind, Result};
