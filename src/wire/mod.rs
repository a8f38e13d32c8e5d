//! The MoonCDC wire codec: values, positions, events, schemas, batches,
//! snapshots, JSON-lines framing and limits. Each submodule specifies its part
//! of the format in its own docs; `docs/FORMAT.md` is the user's version.

mod ahead;
pub mod batch;
pub mod canon;
mod decoder;
pub mod detect;
pub mod event;
pub mod fast;
pub mod jsonl;
mod lines;
pub mod message;
pub mod model;
pub mod names;
mod real;
pub mod snapshot;
mod snapshot_write;
mod stream;
pub mod strict;
mod validate;
pub mod value;

pub use batch::{Batch, BatchDecoder, BatchStreamReader, Commit, Header, Item};
pub use detect::{detect, InputFormat};
pub use jsonl::Limits;
pub use model::{
    put_in_force, Column, Cursor, Event, LogicalMessage, Operation, Rename, Row, Schema,
    SchemaChange, Sequence, SourceKind,
};
pub use snapshot::{SnapItem, SnapshotReader};
pub use value::Value;

/// Any buffered input, as the tools open it (a file or standard input).
pub type DynRead = Box<dyn std::io::BufRead + Send>;
