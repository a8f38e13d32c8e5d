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
//! | [`target`] | where batches land (an in-memory projection for tests and contracts) |
//! | [`cli`] | what the binaries share: arguments, inputs, outputs, exit statuses |
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
pub mod ops;
pub mod source;
pub mod sqlite_util;
pub mod util;
pub mod wire;

pub use error::{Error, ErrorKind, Result};
