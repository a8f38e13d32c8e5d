//! Targets: where batches and snapshots land.
//!
//! The contract every target keeps (DESIGN §9): it stores its cursor next to the
//! data; with no cursor for the source it accepts a batch from any start; a batch
//! whose interval it already holds is a no-op; one that overlaps applies only the
//! events after the stored cursor; one that starts after it is a gap and fails; a
//! batch of another source fails. By default it checks images: inserting an
//! existing key, or an update/delete whose `before` differs from the stored row,
//! fails. A failed batch changes nothing.

pub mod clickhouse;
pub mod memory;
pub mod sqlite;

use crate::error::{Error, Result};
use crate::wire::{Cursor, Sequence};

/// Where a batch starting at `start` begins to change a target holding
/// `stored`: events up to the returned sequence are already held. A batch of
/// another source, or one that starts after the stored cursor (a gap), fails.
pub fn skip_through(stored: Option<&Cursor>, start: &Cursor) -> Result<Sequence> {
    match stored {
        None => Ok(start.sequence()),
        Some(c) if c.source != start.source => Err(Error::state(format!(
            "the target holds source {:?}; this batch is from source {:?}",
            c.source, start.source
        ))),
        Some(c) if start.sequence() > c.sequence() => Err(Error::state(format!(
            "gap: the batch starts at {} but the target holds changes only up to {}",
            start.sequence(),
            c.sequence()
        ))),
        Some(c) => Ok(c.sequence()),
    }
}
