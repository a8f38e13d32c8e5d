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

/// What a snapshot does with rows a target table already holds. A snapshot
/// loads only into a target without a cursor, but such a target may still
/// hold rows (an earlier load that was never finished, rows put there by
/// hand); merging them silently would leave rows the source does not have.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ExistingRows {
    /// Refuse the snapshot, naming the first table that holds rows.
    #[default]
    Refuse,
    /// Empty each of the snapshot's tables first (in its transaction where
    /// the target has transactions).
    Replace,
    /// Load beside the rows held; the conflict policy decides clashes.
    Keep,
}

/// The error for [`ExistingRows::Refuse`].
pub fn existing_rows_error(table: &str) -> Error {
    Error::state(format!(
        "target table {table:?} already holds rows but the target holds no cursor: a snapshot would merge into rows the source may not have; use --existing-rows replace to empty it first, or --existing-rows keep to load beside them"
    ))
}

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

/// A compacted batch (`"compacted":true` in its header) had events folded into
/// later ones, so a target holding only part of its interval would miss the
/// changes folded into events it already has (DESIGN §8). Such a target
/// refuses it; one holding none of it (`held` at or before the start) or all
/// of it (at or after the end) applies it or skips it as usual. `held` is what
/// [`skip_through`] returned for the batch.
pub fn check_compacted(
    start: &Cursor,
    compacted: bool,
    held: Sequence,
    end: &Cursor,
) -> Result<()> {
    if compacted && held > start.sequence() && held < end.sequence() {
        return Err(Error::state(format!(
            "this batch ({} to {}) was compacted, and the target already holds part of it (through {held}): changes folded into events it holds would be lost; apply the uncompacted changes after the target's cursor instead (mooncdc-capture --after \"$(mooncdc-apply cursor --target …)\")",
            start.sequence(),
            end.sequence()
        )));
    }
    Ok(())
}
