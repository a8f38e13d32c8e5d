//! Sources: where changes come from.
//!
//! The contract every source keeps: `read` writes one batch stream of the
//! changes after a cursor, in sequence order, and never acknowledges; a source
//! discards changes only when told (`ack`) and never beyond its high water; a
//! snapshot's cursor hands over exactly to `read`.

pub mod postgres;
pub mod sqlite;

/// Limits of one read, the same for every source: stop after `max_events`
/// events, or before the events written would exceed `max_bytes` (at least
/// one event is written); the batch then ends at the last event.
#[derive(Debug, Clone, Copy, Default)]
pub struct ReadLimits {
    pub max_events: Option<u64>,
    pub max_bytes: Option<u64>,
}
