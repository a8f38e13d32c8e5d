//! Sources: where changes come from.
//!
//! The contract every source keeps: `read` writes one batch stream of the
//! changes after a cursor, in sequence order, and never acknowledges; a source
//! discards changes only when told (`ack`) and never beyond its high water; a
//! snapshot's cursor hands over exactly to `read`.

pub mod postgres;
pub mod sqlite;
