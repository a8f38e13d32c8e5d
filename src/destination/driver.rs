//! The batch loop every database target runs (SQLite, PostgreSQL,
//! ClickHouse): the order of a batch's steps, decided once, with the
//! target's own work in [`BatchHooks`].
//!
//! For each batch: at its header the target begins a transaction and says
//! what cursor it holds; a [`BatchGate`] decides which events it already
//! holds (another source, a gap: refused). The header's tables are made or
//! checked at once, or, when the batch overlaps the cursor, at its first
//! event not yet held (the header then describes the tables as they were at
//! the batch's start, which the target may have moved past; the schema
//! records of the events it holds are put in force first). A schema record
//! is made before the event it belongs to; those at the batch's end are
//! made at the commit when the batch moves the cursor. A logical message
//! (a `message` record) changes no table: a target skips it, counted, and
//! it moves the cursor with its batch; the archive, which keeps batches,
//! writes those it does not hold. Each event not held
//! goes to the target; errors of its tables and schema changes carry the
//! input's file and line (the targets locate their events' own). At the commit the gate refuses a compacted
//! batch across the cursor and says whether the cursor moves; the target
//! commits its rows and the cursor together. A stop asked for between two
//! of a header's tables rolls the batch back; one asked for during a batch
//! takes effect after its commit. A failure rolls the batch in progress
//! back; the batches committed before it stay.
//!
//! A snapshot ([`apply_snapshot`]) loads in one transaction: its tables at
//! its header (only into a target that holds no cursor), its rows, and at
//! its commit line the cursor with them; a failure rolls it all back.

use super::{ApplyStats, BatchGate};
use crate::error::{Error, Result};
use crate::wire::{
    BatchStreamReader, Cursor, Event, Header, Item, LogicalMessage, Row, Schema, SchemaChange,
    SnapItem, SnapshotReader, SourceKind,
};
use std::io::BufRead;

/// A target's part of each step of a batch (see the module's text for
/// when each is called). Every step runs inside the batch's transaction
/// where the target has transactions; one without them (ClickHouse) holds
/// the batch's rows until `commit`.
pub(crate) trait BatchHooks {
    /// A batch begins: begin its transaction; the cursor held now.
    fn begin(&mut self) -> Result<Option<Cursor>>;
    /// The header, once the gate took it: what the target needs of it
    /// (ClickHouse: the tables' schemas).
    fn header(&mut self, _h: &Header) -> Result<()> {
        Ok(())
    }
    /// Make or check the tables in force (taken out of `in_force`).
    /// `replay`: the batch overlaps the cursor, so a table that does not
    /// match is noted, to fail at its first event unless a schema record
    /// of the batch brings it to the shape it has, and no column is
    /// dropped. `Ok(false)`: a stop was asked for between two tables.
    fn tables(
        &mut self,
        in_force: &mut Vec<Schema>,
        kind: SourceKind,
        replay: bool,
    ) -> Result<bool>;
    /// A schema record, made before the event it belongs to (what waits
    /// was written just before).
    fn schema_change<R: BufRead>(
        &mut self,
        change: SchemaChange,
        kind: SourceKind,
        input: &mut BatchStreamReader<R>,
    ) -> Result<()>;
    /// An event the target does not hold yet (written now or with the
    /// next ones, always before anything later in the stream).
    fn event<R: BufRead>(&mut self, e: Event, input: &mut BatchStreamReader<R>) -> Result<()>;
    /// Whether the target keeps logical messages (the archive); the others
    /// skip them.
    fn keeps_messages(&self) -> bool {
        false
    }
    /// A logical message the target does not hold yet, when it keeps them
    /// (its tables were made first).
    fn message<R: BufRead>(
        &mut self,
        _m: LogicalMessage,
        _input: &mut BatchStreamReader<R>,
    ) -> Result<()> {
        Ok(())
    }
    /// Write what waits (before a schema change, and at the commit).
    fn flush<R: BufRead>(&mut self, input: &mut BatchStreamReader<R>) -> Result<()>;
    /// Commit the batch, with `end` as the cursor when it moves it.
    fn commit(&mut self, end: Option<&Cursor>) -> Result<()>;
    /// Roll the batch in progress back (a stop in its header, a failure).
    fn rollback(&mut self);
    /// A failure: the error to report. Writes that wait and come before it
    /// in the stream are made first, so the error reported is the first in
    /// stream order.
    fn failed<R: BufRead>(&mut self, e: Error, _input: &mut BatchStreamReader<R>) -> Error {
        e
    }
}

/// Apply a batch stream through `t`'s hooks. `held` is the cursor the
/// target holds before (the totals' cursor until a batch moves it);
/// `committed` is what the last commit made durable, also when a later
/// batch fails.
pub(crate) fn apply_batches<T: BatchHooks, R: BufRead>(
    t: &mut T,
    input: &mut BatchStreamReader<R>,
    held: Option<Cursor>,
    committed: &mut ApplyStats,
    progress: &mut dyn FnMut(&ApplyStats),
) -> Result<ApplyStats> {
    let mut stats = ApplyStats {
        cursor: held,
        ..Default::default()
    };
    *committed = stats.clone();
    let mut gate: Option<BatchGate> = None;
    let mut pending: Vec<SchemaChange> = Vec::new();
    let mut in_force: Vec<Schema> = Vec::new();
    let mut kind = SourceKind::Sqlite;
    let mut ensured = false;
    let mut stopped = false;
    let result = (|| -> Result<()> {
        while let Some(item) = input.next_item()? {
            match item {
                Item::Header(h) => {
                    pending.clear();
                    kind = SourceKind::of_identity(&h.start.source);
                    let held = t.begin()?;
                    let g = BatchGate::open(held.as_ref(), &h)?;
                    t.header(&h)?;
                    in_force = h.schemas.clone().unwrap_or_default();
                    ensured = !g.overlaps();
                    gate = Some(g);
                    if ensured && !t.tables(&mut in_force, kind, false)? {
                        stopped = true;
                        return Ok(());
                    }
                }
                Item::Schema(c) => pending.push(c),
                Item::Message(m) => {
                    // Not an event: skipped (it moves the cursor with its
                    // batch), unless the target keeps batches whole.
                    stats.messages += 1;
                    if !t.keeps_messages()
                        || gate.as_ref().expect("validated stream").holds(m.sequence)
                    {
                        continue;
                    }
                    if !ensured {
                        if !t
                            .tables(&mut in_force, kind, true)
                            .map_err(|err| input.locate(err))?
                        {
                            stopped = true;
                            return Ok(());
                        }
                        ensured = true;
                    }
                    t.message(m, input)?;
                }
                Item::Event(e) => {
                    if gate.as_ref().expect("validated stream").holds(e.sequence) {
                        // Held, with the schema changes before it.
                        crate::wire::put_in_force(&mut in_force, &mut pending);
                        stats.skipped += 1;
                        continue;
                    }
                    if !ensured {
                        if !t
                            .tables(&mut in_force, kind, true)
                            .map_err(|err| input.locate(err))?
                        {
                            stopped = true;
                            return Ok(());
                        }
                        ensured = true;
                    }
                    if !pending.is_empty() {
                        // What waits is written before a table changes.
                        t.flush(input)?;
                        for c in pending.drain(..) {
                            t.schema_change(c, kind, input)
                                .map_err(|err| input.locate(err))?;
                        }
                    }
                    t.event(e, input)?;
                    stats.applied += 1;
                    if stats.applied % 65536 == 0 {
                        progress(&stats);
                    }
                }
                Item::Commit(c) => {
                    t.flush(input)?;
                    let moves = gate.take().expect("validated stream").close(&c.end)?;
                    // Schema records at the end belong to the batch's end:
                    // made when the batch moves the cursor.
                    if moves && !pending.is_empty() {
                        if !ensured {
                            if !t.tables(&mut in_force, kind, true)? {
                                stopped = true;
                                return Ok(());
                            }
                            ensured = true;
                        }
                        for c in pending.drain(..) {
                            t.schema_change(c, kind, input)?;
                        }
                    }
                    t.commit(moves.then_some(&c.end))?;
                    if moves {
                        stats.cursor = Some(c.end.clone());
                    }
                    stats.batches += 1;
                    *committed = stats.clone();
                    progress(&stats);
                    // SIGTERM/SIGINT during the batch: stop after it.
                    if crate::util::stop::requested() {
                        break;
                    }
                }
            }
        }
        Ok(())
    })();
    match result {
        Ok(()) if stopped => {
            t.rollback();
            super::stopped_in_header();
            Ok(stats)
        }
        Ok(()) => Ok(stats),
        Err(e) => {
            let e = t.failed(e, input);
            t.rollback();
            Err(e)
        }
    }
}

/// A target's part of loading a snapshot: one transaction where the target
/// has them (one without them holds the rows until `commit`).
pub(crate) trait SnapshotHooks {
    /// The snapshot begins: begin its transaction; the cursor held now (a
    /// snapshot loads only into a target that holds none).
    fn begin(&mut self) -> Result<Option<Cursor>>;
    /// Make or check the snapshot's tables; rows they already hold are
    /// refused, emptied or kept as `ExistingRows` says.
    fn tables(&mut self, schemas: &[Schema], kind: SourceKind) -> Result<()>;
    /// A row of `table`, at the snapshot's `cursor`.
    fn row<R: BufRead>(
        &mut self,
        table: String,
        row: Row,
        cursor: &Cursor,
        input: &mut SnapshotReader<R>,
    ) -> Result<()>;
    /// The commit line is read: write what waits, store `cursor`, commit.
    fn commit<R: BufRead>(&mut self, cursor: &Cursor, input: &mut SnapshotReader<R>) -> Result<()>;
    /// Roll the snapshot back after a failure.
    fn rollback(&mut self);
    /// A failure: the error to report (rows that wait and come before it
    /// are written first, so the error reported is the first in order).
    fn failed<R: BufRead>(&mut self, e: Error, _input: &mut SnapshotReader<R>) -> Error {
        e
    }
}

/// Load a snapshot through `t`'s hooks: the header's tables, the rows, then
/// the cursor with them.
pub(crate) fn apply_snapshot<T: SnapshotHooks, R: BufRead>(
    t: &mut T,
    input: &mut SnapshotReader<R>,
    committed: &mut ApplyStats,
    progress: &mut dyn FnMut(&ApplyStats),
) -> Result<ApplyStats> {
    let mut stats = ApplyStats::default();
    *committed = stats.clone();
    let mut cursor: Option<Cursor> = None;
    let result = (|| -> Result<()> {
        while let Some(item) = input.next_item()? {
            match item {
                SnapItem::Header { cursor: c, schemas } => {
                    let held = t.begin()?;
                    super::snapshot_allowed(held.as_ref())?;
                    t.tables(&schemas, SourceKind::of_identity(&c.source))?;
                    cursor = Some(c);
                }
                SnapItem::Row { table, row } => {
                    t.row(
                        table,
                        row,
                        cursor.as_ref().expect("validated snapshot"),
                        input,
                    )?;
                    stats.applied += 1;
                    if stats.applied % 65536 == 0 {
                        progress(&stats);
                    }
                }
                SnapItem::Commit { .. } => {
                    let c = cursor.take().expect("validated snapshot");
                    t.commit(&c, input)?;
                    stats.batches += 1;
                    stats.cursor = Some(c);
                    *committed = stats.clone();
                    progress(&stats);
                }
            }
        }
        Ok(())
    })();
    match result {
        Ok(()) => Ok(stats),
        Err(e) => {
            let e = t.failed(e, input);
            t.rollback();
            Err(e)
        }
    }
}
