//! Destinations: where batches and snapshots land. One [`Target`] trait
//! (the CLI's word is `--target`) and [`AuditedTarget`] for those that can
//! be read back, one folder per backend, and the rules every backend shares
//! ([`BatchGate`], [`HeaderShape`], [`ExistingRows`]).

pub mod clickhouse;
pub mod dir;
mod driver;
pub mod memory;
pub mod postgres;
pub mod sqlite;

use crate::error::{Error, Result};
use crate::wire::SourceKind;
use crate::wire::{BatchStreamReader, Cursor, DynRead, Row, Schema, Sequence, SnapshotReader};

/// Totals of one apply.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ApplyStats {
    pub batches: u64,
    pub applied: u64,
    pub skipped: u64,
    /// Logical messages read (docs/FORMAT.md "Message records"): no target
    /// applies one; each moves the cursor with its batch.
    pub messages: u64,
    pub cursor: Option<Cursor>,
}

/// What to do when an image check fails.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OnConflict {
    /// Refuse the batch: the target diverges from the source.
    #[default]
    Error,
    /// Make the row what the event says, whatever was stored.
    Overwrite,
}

/// How a target applies what it is given.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TargetOptions {
    /// Image checks (targets that check images).
    pub on_conflict: OnConflict,
    /// Snapshots into tables that hold rows.
    pub existing_rows: ExistingRows,
}

/// The shape a target's table has: its columns in order, and its key where
/// the target records one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredShape {
    pub columns: Vec<String>,
    pub key: Option<Vec<String>>,
    /// Columns whose NULL the target holds as an empty array (ClickHouse's
    /// `arrays=empty-for-null`): the audit compares them under that rule.
    pub empty_for_null: Vec<usize>,
}

/// A puller of rows in key order: `Ok(None)` at the end.
pub type PullRow<'a> = dyn FnMut() -> Result<Option<Row>> + 'a;

/// A database that holds a projection (or a history) of one source.
///
/// The contract every target keeps (docs/TOOLS.md (apply)):
/// - **One cursor, of one source**, stored next to the data. A batch of
///   another source fails.
/// - **Replay.** With no cursor it accepts a batch from any start (and a
///   snapshot); a batch whose interval it already holds is a no-op; one that
///   overlaps applies only the events after the cursor; one that starts after
///   it is a gap and fails; a compacted batch that starts before the cursor
///   and ends after it fails ([`check_compacted`]).
/// - **Durability.** When `apply_stream` returns from a batch's commit, that
///   batch and its cursor are durable: transactional targets commit both in
///   one transaction; others write the rows, then the cursor, so a crash in
///   between is mended by replaying (same rows, same versions). A failed
///   batch changes nothing (transactional) or nothing visible through the
///   cursor (others); nothing of a batch is written before its commit line
///   has been checked.
/// - **Images.** Targets that can (SQLite) refuse an insert of a held key, or
///   an update or delete whose before image differs from the stored row,
///   unless [`OnConflict::Overwrite`].
/// - **Snapshots** load only into a target without a cursor, and into tables
///   without rows unless [`ExistingRows`] says otherwise.
/// - **Read-only**: `cursor` (and [`AuditedTarget`]'s reads) create and
///   change nothing, so `apply cursor`, `audit` and `--ack-from-target` never
///   write.
pub trait Target {
    /// The stored cursor, if any.
    fn cursor(&self) -> Result<Option<Cursor>>;
    /// Apply a batch stream, batch by batch.
    fn apply_stream(
        &mut self,
        input: &mut BatchStreamReader<DynRead>,
        progress: &mut dyn FnMut(&ApplyStats),
    ) -> Result<ApplyStats>;
    /// Load a snapshot.
    fn apply_snapshot(
        &mut self,
        input: &mut SnapshotReader<DynRead>,
        progress: &mut dyn FnMut(&ApplyStats),
    ) -> Result<ApplyStats>;
    /// What the last apply committed, also when it then failed.
    fn committed(&self) -> ApplyStats;
}

/// A target whose tables can be read back, for `mooncdc-audit`: a target
/// that only writes (an archive of files) implements [`Target`] alone, and
/// the audit refuses it when it opens it (`Endpoint::audited_target`).
pub trait AuditedTarget: Target {
    /// Begin a consistent view for an audit (a read transaction where the
    /// target has them).
    fn begin_audit(&mut self) -> Result<()> {
        Ok(())
    }
    /// Whether the target keeps the sign of a REAL zero (PostgreSQL and
    /// ClickHouse do, SQLite does not): an audit then compares it.
    fn keeps_zero_sign(&self) -> bool {
        false
    }
    /// The shape of the table `schema` maps to; `None` when it is missing.
    fn table_shape(&self, schema: &Schema, kind: SourceKind) -> Result<Option<StoredShape>>;
    /// Call `f` with a puller of the rows of the table `schema` maps to, in
    /// key order (docs/FORMAT.md §9); a missing table has no rows. `kind` says how
    /// the schema's declared types read.
    fn with_rows(
        &self,
        schema: &Schema,
        kind: SourceKind,
        f: &mut dyn FnMut(&mut PullRow<'_>) -> Result<()>,
    ) -> Result<()>;
}

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

/// A snapshot loads only into a target that holds no cursor.
pub fn snapshot_allowed(stored: Option<&Cursor>) -> Result<()> {
    match stored {
        None => Ok(()),
        Some(held) => Err(Error::state(format!(
            "the target already holds source {:?} at {}; a snapshot loads only into a target without a cursor (use a new target database)",
            held.source,
            held.sequence()
        ))),
    }
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

/// Where what a target does not hold of a batch starting at `start` begins:
/// at the cursor `held` when the batch overlaps it, else at its start (for a
/// target that keeps the batch's events themselves: the archive, the double).
pub(crate) fn resume_point(held: Option<&Cursor>, start: &Cursor) -> Cursor {
    match held {
        Some(c) if c.sequence() > start.sequence() => c.clone(),
        _ => start.clone(),
    }
}

/// What every target decides at a batch's header and commit, in one place:
/// which events it already holds, and whether the commit moves its cursor.
#[derive(Debug, Clone)]
pub struct BatchGate {
    start: Cursor,
    compacted: bool,
    /// Events up to this sequence are already held.
    held: Sequence,
    had_cursor: bool,
}

impl BatchGate {
    /// At a header: a batch of another source, or one after a gap, fails.
    pub fn open(stored: Option<&Cursor>, header: &crate::wire::Header) -> Result<BatchGate> {
        Ok(BatchGate {
            held: skip_through(stored, &header.start)?,
            start: header.start.clone(),
            compacted: header.compacted,
            had_cursor: stored.is_some(),
        })
    }

    /// Whether the target already holds part of the batch's interval (a
    /// replay that overlaps its cursor): the header's schemas are then those
    /// at the batch's start, which the target may have moved past.
    pub fn overlaps(&self) -> bool {
        self.held > self.start.sequence()
    }

    /// Whether the event at `sequence` is already held (skip it).
    pub fn holds(&self, sequence: Sequence) -> bool {
        sequence <= self.held
    }

    /// At the commit, before anything of the batch is made durable: refuses
    /// a compacted batch across the cursor; says whether `end` becomes the
    /// stored cursor (it does unless the target already held all of it).
    pub fn close(&self, end: &Cursor) -> Result<bool> {
        check_compacted(&self.start, self.compacted, self.held, end)?;
        Ok(end.sequence() > self.held || !self.had_cursor)
    }
}

/// How a table a target holds becomes the schema a batch header gives for
/// it, when no schema record says (a follower started after the change, or
/// a capture without the source's record of it): the same; columns added at
/// the end; columns dropped, the rest in order with the same key; or
/// anything else, which the header alone cannot tell apart (a rename, a
/// move, a drop and an add) and a target refuses. A pure add and a pure drop
/// are carried whichever way a target meets them, header or schema record
/// (docs/FORMAT.md, "Schema records").
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HeaderShape {
    Same,
    /// The table's columns are the header's first ones; the rest are new.
    Added,
    /// The header's columns are the table's without these (their positions
    /// in the table), in the same order, with the same key.
    Dropped(Vec<usize>),
    /// Anything else.
    Unknown,
}

impl HeaderShape {
    /// `have`: the table's column names in order; `have_key`: its key where
    /// the target records one (`None`: not recorded, not compared).
    pub fn of(have: &[&str], have_key: Option<&[String]>, want: &Schema) -> HeaderShape {
        if have_key.is_some_and(|k| k != want.key.as_slice()) {
            return HeaderShape::Unknown;
        }
        let want: Vec<&str> = want.columns.iter().map(|c| c.name.as_str()).collect();
        if have == want.as_slice() {
            return HeaderShape::Same;
        }
        if have.len() < want.len() && want[..have.len()] == *have {
            return HeaderShape::Added;
        }
        if have.len() > want.len() {
            let mut dropped = Vec::new();
            let mut j = 0;
            for (i, h) in have.iter().enumerate() {
                if want.get(j) == Some(h) {
                    j += 1;
                } else {
                    dropped.push(i);
                }
            }
            // Every header column found in order, and no name twice (a
            // column dropped and another of its name kept is not a drop).
            let unique = dropped.iter().all(|&i| !want.contains(&have[i]));
            if j == want.len() && unique {
                return HeaderShape::Dropped(dropped);
            }
        }
        HeaderShape::Unknown
    }
}

/// Said when a stop (SIGTERM, SIGINT) came while a batch header's tables
/// were being made or checked: the batch was rolled back (or, where the
/// target has no transactions, left without its rows and cursor), so the
/// cursor has not moved and running the same command again applies it
/// (docs/OPERATIONS.md, stopping).
pub fn stopped_in_header() {
    crate::log::write(
        "info",
        "stopped while making the tables of a batch's header: nothing of that batch was committed and the cursor did not move; run the same command again to apply it",
        &[("event", "stopped".into())],
    );
}

/// A compacted batch (`"compacted":true` in its header) had events folded into
/// later ones, so a target holding only part of its interval would miss the
/// changes folded into events it already has (docs/TOOLS.md (split, merge, compact)). Such a target
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

#[cfg(test)]
mod tests {
    use super::HeaderShape;
    use crate::wire::Schema;

    fn schema(cols: &[&str], key: &[&str]) -> Schema {
        let columns: Vec<serde_json::Value> = cols
            .iter()
            .map(|c| serde_json::json!({"name": c, "type": "", "nullable": true}))
            .collect();
        serde_json::from_value(serde_json::json!({"table": "t", "columns": columns, "key": key}))
            .unwrap()
    }

    #[test]
    fn only_pure_adds_and_pure_drops_are_carried() {
        let key = vec!["id".to_string()];
        let of = |have: &[&str], want: &[&str]| {
            HeaderShape::of(have, Some(&key), &schema(want, &["id"]))
        };
        assert_eq!(of(&["id", "a"], &["id", "a"]), HeaderShape::Same);
        assert_eq!(of(&["id", "a"], &["id", "a", "b"]), HeaderShape::Added);
        assert_eq!(
            of(&["id", "a", "b", "c"], &["id", "c"]),
            HeaderShape::Dropped(vec![1, 2])
        );
        assert_eq!(
            of(&["id", "a", "b"], &["id", "a"]),
            HeaderShape::Dropped(vec![2])
        );
        // A rename (or a drop and an add), a move, a drop with an add.
        assert_eq!(of(&["id", "a"], &["id", "b"]), HeaderShape::Unknown);
        assert_eq!(
            of(&["id", "a", "b"], &["id", "b", "a"]),
            HeaderShape::Unknown
        );
        assert_eq!(of(&["id", "a", "b"], &["id", "c"]), HeaderShape::Unknown);
        assert_eq!(
            of(&["id", "a", "b"], &["id", "b", "c"]),
            HeaderShape::Unknown
        );
        // Another key, whatever the columns.
        let other = HeaderShape::of(&["id", "a"], Some(&key), &schema(&["a"], &["a"]));
        assert_eq!(other, HeaderShape::Unknown);
        // A target that records no key: the columns decide.
        let s = schema(&["id"], &["id"]);
        assert_eq!(
            HeaderShape::of(&["id", "a"], None, &s),
            HeaderShape::Dropped(vec![1])
        );
    }
}
