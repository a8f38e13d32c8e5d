//! Compact: remove intermediate changes of the same row (docs/TOOLS.md (split, merge, compact)).
//!
//! Within a run of adjacent events on one row (same table, same key values,
//! compared exactly), pairs fold as:
//!
//! | first | then | result |
//! | --- | --- | --- |
//! | insert | update | insert of the new image |
//! | insert | delete | nothing |
//! | update | update | update from the first before to the last after |
//! | update | delete | delete of the first before image |
//! | delete | insert | update from the deleted image to the inserted one |
//!
//! A fold happens only when the second event's `before` image equals the
//! first's result exactly, so compaction never hides a divergence a target's
//! image check would have found, or when the second knows the old row only
//! by its key (`before_key`, which matched). An unchanged value in the
//! second's after image is filled from the first's after image when that
//! has the value, and stays unchanged otherwise; any other pair on one row (insert after
//! insert, say) ends the run for good. Events on other rows and updates that change the key end a run.
//! A folded event carries the sequence of the last event folded into it. When
//! a run vanishes (insert then delete) the runs on either side become adjacent,
//! which makes compaction idempotent: compacting its own output changes nothing.
//! The batch interval is kept even when events vanish.
//!
//! Events are compacted as their canonical lines, never built: in that
//! spelling equal values are equal bytes (`-0.0` and `0.0`, `1` and `1.0`
//! stay apart), so keys and images are compared as bytes, events that pass
//! through are copied, and a fold writes its line from pieces of the two
//! lines it folds. A line in another spelling is decoded strictly and
//! encoded first.
//!
//! Only a held-back stack of inserts (the rows that a later delete could still
//! make vanish) is kept in memory, capped by [`HOLD_LIMIT_BYTES`] (counted as
//! the held lines' bytes, 64 more each); beyond the cap the oldest is written
//! out, which can leave a fold for a second pass.

use super::spool::{Spool, DEFAULT_SPOOL_MEMORY};
use super::BatchSink;
use crate::error::{Error, Result};
use crate::wire::batch::{
    shapes, write_event_line, write_message_line, write_schema_line, Lean, TableShape,
    EVENT_LINE_PREFIX,
};
use crate::wire::fast::{event_spans, value_spans, EventMeta};
use crate::wire::model::write_seq;
use crate::wire::value::write_json_str;
use crate::wire::{BatchStreamReader, Commit, Event, Header, Item, Operation, Schema};
use std::collections::{HashMap, VecDeque};
use std::io::BufRead;

mod events;
mod fold;
pub use events::compact_events;
pub use fold::RawEvent;
use fold::*;

/// Memory for held-back events before the oldest is written out.
pub const HOLD_LIMIT_BYTES: usize = 8 << 20;

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CompactStats {
    pub batches: u64,
    pub events_in: u64,
    pub events_out: u64,
}

/// A held event: its line (newline included), then its key's bytes.
struct Held {
    bytes: Vec<u8>,
    line_len: usize,
    meta: EventMeta,
    /// False for an update that changes the key: it ends runs on both sides.
    foldable: bool,
}

impl Held {
    fn event(&self) -> RawEvent<'_> {
        RawEvent {
            line: &self.bytes[..self.line_len - 1],
            meta: self.meta,
        }
    }
    fn line(&self) -> &[u8] {
        &self.bytes[..self.line_len]
    }
    fn key(&self) -> &[u8] {
        &self.bytes[self.line_len..]
    }
    /// What it counts against the memory cap.
    fn size(&self) -> usize {
        64 + self.bytes.len()
    }
}

/// The compaction of one batch's events, fed one event at a time. Events
/// are their canonical lines: in that spelling equal values are equal
/// bytes, so keys and images are compared as bytes, and a fold writes its
/// line from pieces of the two it folds, never building a value.
pub struct Compactor {
    /// Oldest first; the back is the top. A deque, so writing out the oldest
    /// when over the memory cap costs O(1), not a shift of everything held.
    stack: VecDeque<Held>,
    held_bytes: usize,
    hold_limit: usize,
    /// Whether any event was folded into another or vanished since `new`.
    folded: bool,
    /// Scratch: an image's value ranges, keys, a folded line.
    values: Vec<(usize, usize)>,
    key: Vec<u8>,
    other_key: Vec<u8>,
    scratch: Vec<u8>,
}

impl Compactor {
    pub fn new(hold_limit: usize) -> Self {
        Compactor {
            stack: VecDeque::new(),
            held_bytes: 0,
            hold_limit,
            folded: false,
            values: Vec::new(),
            key: Vec::new(),
            other_key: Vec::new(),
            scratch: Vec::new(),
        }
    }

    /// The key of `row` (a canonical image) in `shape` into `out`: its key
    /// values' bytes one after another (each value's spelling ends where it
    /// ends, so equal keys are equal bytes). A `before_key` (`key_only`)
    /// holds the key values alone, in key order.
    fn key_of(
        values: &mut Vec<(usize, usize)>,
        row: &[u8],
        shape: &TableShape,
        key_only: bool,
        out: &mut Vec<u8>,
    ) -> Result<()> {
        out.clear();
        value_spans(row, values)
            .ok_or_else(|| Error::data("an event's image is not in the canonical spelling"))?;
        if key_only {
            if values.len() != shape.key.len() {
                return Err(Error::data(format!(
                    "a before_key has {} values but its schema's key has {}",
                    values.len(),
                    shape.key.len()
                )));
            }
            for &v in values.iter() {
                out.extend_from_slice(part(row, v));
            }
            return Ok(());
        }
        for &i in &shape.key {
            let Some(&v) = values.get(i) else {
                return Err(Error::data(format!(
                    "an image has {} values, fewer than its schema's key needs",
                    values.len()
                )));
            };
            if part(row, v) == fold::UNCHANGED {
                return Err(Error::data(format!(
                    "an after image has an unchanged value in key column {} (a key is always sent)",
                    i + 1
                )));
            }
            out.extend_from_slice(part(row, v));
        }
        Ok(())
    }

    /// Take one event (not a truncate); events that can no longer change
    /// are passed to `out` as their lines, newline included.
    pub fn push(
        &mut self,
        e: RawEvent<'_>,
        shape: &TableShape,
        out: &mut dyn FnMut(&[u8]) -> Result<()>,
    ) -> Result<()> {
        let image = match e.meta.operation {
            Operation::Insert => e.after(),
            _ => e.before(),
        };
        let Some(image) = image else {
            unreachable!("checked images: only a truncate has none")
        };
        let key_only = e.meta.key_only && e.meta.operation != Operation::Insert;
        Self::key_of(&mut self.values, image, shape, key_only, &mut self.key)?;
        // Without a key no two events are known to be on the same row.
        let foldable = !shape.key.is_empty()
            && match (e.meta.operation, e.after()) {
                (Operation::Update, Some(after)) => {
                    Self::key_of(&mut self.values, after, shape, false, &mut self.other_key)?;
                    self.key == self.other_key
                }
                _ => true,
            };
        let mut pending = true;
        if foldable {
            if let Some(top) = self.stack.back_mut() {
                if top.foldable && top.event().table() == e.table() && top.key() == self.key {
                    match fold(top.event(), e) {
                        Fold::Into(op) => {
                            let meta = write_folded(&mut self.scratch, op, top.event(), e);
                            let old = top.size();
                            std::mem::swap(&mut top.bytes, &mut self.scratch);
                            top.line_len = top.bytes.len();
                            top.bytes.extend_from_slice(&self.key);
                            top.meta = meta;
                            self.held_bytes = self.held_bytes - old + top.size();
                            pending = false;
                            self.folded = true;
                        }
                        Fold::Vanish => {
                            let top = self.stack.pop_back().expect("top");
                            self.held_bytes -= top.size();
                            pending = false;
                            self.folded = true;
                        }
                        // Two events on one row that do not fold (an insert
                        // over an insert, images that disagree) end the run
                        // for good: the earlier one may never fold again, even
                        // if the later one vanishes and exposes it.
                        Fold::No => top.foldable = false,
                    }
                }
            }
        }
        if pending {
            let mut bytes = Vec::with_capacity(e.line.len() + 1 + self.key.len());
            bytes.extend_from_slice(e.line);
            bytes.push(b'\n');
            bytes.extend_from_slice(&self.key);
            let held = Held {
                bytes,
                line_len: e.line.len() + 1,
                meta: e.meta,
                foldable,
            };
            self.held_bytes += held.size();
            self.stack.push_back(held);
        }
        // Only an insert can vanish and expose what lies below it; below any
        // other event nothing can change any more.
        if let Some(top) = self.stack.back() {
            if top.meta.operation != Operation::Insert || !top.foldable {
                let n = self.stack.len() - 1;
                self.flush(n, out)?;
            }
        }
        while self.held_bytes > self.hold_limit && self.stack.len() > 1 {
            self.flush(1, out)?;
        }
        Ok(())
    }

    /// Take a truncate of the table whose name is the JSON string `table`
    /// (its line `line`, newline included): a barrier. Held events of the
    /// emptied table vanish with it; everything else held can no longer
    /// fold across it.
    pub fn push_truncate(
        &mut self,
        table: &[u8],
        line: &[u8],
        out: &mut dyn FnMut(&[u8]) -> Result<()>,
    ) -> Result<()> {
        let before = self.stack.len();
        self.stack.retain(|h| h.event().table() != table);
        if self.stack.len() != before {
            self.folded = true;
            self.held_bytes = self.stack.iter().map(Held::size).sum();
        }
        let n = self.stack.len();
        self.flush(n, out)?;
        out(line)
    }

    /// Pass the oldest `n` held events to `out`.
    fn flush(&mut self, n: usize, out: &mut dyn FnMut(&[u8]) -> Result<()>) -> Result<()> {
        for h in self.stack.drain(..n) {
            self.held_bytes -= h.size();
            out(h.line())?;
        }
        Ok(())
    }

    /// A barrier (a schema change): pass everything held; no run goes on
    /// across it.
    pub fn finish_run(&mut self, out: &mut dyn FnMut(&[u8]) -> Result<()>) -> Result<()> {
        let n = self.stack.len();
        self.flush(n, out)
    }

    /// End of the batch: pass everything held. Returns whether any event was
    /// folded away, and starts afresh for the next batch.
    pub fn finish(&mut self, out: &mut dyn FnMut(&[u8]) -> Result<()>) -> Result<bool> {
        let n = self.stack.len();
        self.flush(n, out)?;
        Ok(std::mem::take(&mut self.folded))
    }
}

/// Compact every batch of `input`. Schemas come from each batch's header,
/// else from `extra` (a `--schema` file); a table with neither is an error.
pub fn compact<R: BufRead>(
    input: &mut BatchStreamReader<R>,
    extra: &[Schema],
    sink: &mut dyn BatchSink,
) -> Result<CompactStats> {
    let extra_shapes = shapes(extra)?;
    let mut stats = CompactStats::default();
    let mut spool = Spool::new(DEFAULT_SPOOL_MEMORY);
    let mut header: Option<(Header, HashMap<String, TableShape>)> = None;
    let mut compactor = Compactor::new(HOLD_LIMIT_BYTES);
    let mut line = Vec::with_capacity(1024);
    let mut name = Vec::with_capacity(64);
    let mut out_count = 0u64;
    // Per table, the index (among the batch's events written) of its last truncate.
    let mut truncated: HashMap<String, u64> = HashMap::new();
    let mut spare = Spool::new(DEFAULT_SPOOL_MEMORY);

    while let Some(lean) = input.next_lean()? {
        let mut write = |l: &[u8]| {
            out_count += 1;
            spool.push(l)
        };
        // An event on a canonical line is compacted as that line; a built
        // one is encoded first.
        let (e, table) = match lean {
            Lean::Event(meta) => {
                let l = input.canonical_line().expect("a lean event has its line");
                (RawEvent { line: l, meta }, input.lean_table())
            }
            Lean::Item(Item::Event(e)) if e.operation.is_truncate() => {
                stats.events_in += 1;
                line.clear();
                write_event_line(&mut line, &e);
                name.clear();
                write_json_str(&mut name, &e.table);
                compactor.push_truncate(&name, &line, &mut write)?;
                truncated.insert(e.table, out_count - 1);
                continue;
            }
            Lean::Item(Item::Event(e)) => {
                stats.events_in += 1;
                let raw = encoded(&mut line, &e).map_err(|err| input.locate(err))?;
                let (_, own) = header.as_ref().expect("validated stream");
                let shape = shape_for(input, own, &extra_shapes, &e.table, &raw.meta)?;
                compactor
                    .push(raw, shape, &mut write)
                    .map_err(|err| input.locate(err))?;
                continue;
            }
            Lean::Item(Item::Header(h)) => {
                let own = match &h.schemas {
                    Some(s) => shapes(s)?,
                    None => HashMap::new(),
                };
                out_count = 0;
                header = Some((h, own));
                continue;
            }
            Lean::Item(Item::Schema(c)) => {
                if !sink.takes_schema_records() {
                    return Err(input.locate(super::no_json_for_schema_records()));
                }
                // A barrier: nothing folds across a schema change.
                compactor.finish_run(&mut write)?;
                line.clear();
                write_schema_line(&mut line, &c);
                spool.push(&line)?;
                let (_, own) = header.as_mut().expect("validated stream");
                own.insert(c.schema.table.clone(), shape_of(&c.schema));
                continue;
            }
            Lean::Item(Item::Message(m)) => {
                if !sink.takes_schema_records() {
                    return Err(input.locate(super::no_json_for_message_records()));
                }
                // A barrier like a schema change: nothing folds across a
                // message, which stays in place.
                compactor.finish_run(&mut write)?;
                line.clear();
                write_message_line(&mut line, &m);
                spool.push(&line)?;
                continue;
            }
            Lean::Item(Item::Commit(c)) => {
                let mut folded = compactor.finish(&mut write)?;
                if !truncated.is_empty() {
                    // Events written out before a truncate of their table are
                    // emptied by it. Dropping them can make events adjacent
                    // that were not, so what is left is compacted again (a
                    // second pass finds no more to drop: compaction stays
                    // idempotent).
                    let (h, _) = header.as_ref().expect("validated stream");
                    let before = out_count;
                    out_count = drop_truncated(
                        &mut spool,
                        &mut spare,
                        &truncated,
                        h.schemas.as_deref().unwrap_or_default(),
                        &extra_shapes,
                    )?;
                    folded |= out_count < before;
                    std::mem::swap(&mut spool, &mut spare);
                    truncated.clear();
                }
                let (mut h, _) = header.take().expect("validated stream");
                // Mark the batch when events were folded away, so a target
                // holding part of its interval refuses it (docs/TOOLS.md (split, merge, compact)).
                h.compacted |= folded;
                stats.batches += 1;
                stats.events_out += out_count;
                let mut events = spool.drain()?;
                sink.batch(
                    &h,
                    &mut events,
                    &Commit {
                        end: c.end,
                        count: out_count,
                    },
                )?;
                continue;
            }
        };
        stats.events_in += 1;
        let (_, own) = header.as_ref().expect("validated stream");
        let shape = shape_for(input, own, &extra_shapes, table, &e.meta)?;
        // A key the after image is too narrow for (a --schema the stream's
        // images do not fit) is named at its line.
        compactor
            .push(e, shape, &mut write)
            .map_err(|err| input.locate(err))?;
    }
    Ok(stats)
}

/// The shape of an event's table: from the batch's header (and schema
/// records), else from `--schema`; an error, located, if neither has it or
/// its key does not fit the event's images.
fn shape_for<'s, R: BufRead>(
    input: &BatchStreamReader<R>,
    own: &'s HashMap<String, TableShape>,
    extra: &'s HashMap<String, TableShape>,
    table: &str,
    meta: &EventMeta,
) -> Result<&'s TableShape> {
    let Some(shape) = own.get(table).or_else(|| extra.get(table)) else {
        return Err(input.locate(Error::data(format!(
            "compaction needs the key of table {table:?}, but no schema names it (the stream's header has none; give one with --schema)"
        ))));
    };
    let width = if meta.key_only {
        meta.after.unwrap_or(usize::MAX)
    } else {
        meta.before.or(meta.after).unwrap_or_default()
    };
    if shape.key.iter().any(|&i| i >= width) {
        return Err(input.locate(Error::data(format!(
            "event {} of table {table:?} has {width} values, fewer than its schema's key needs",
            meta.sequence
        ))));
    }
    Ok(shape)
}

/// The shape given to a truncate whose table has no schema: it needs none.
static NO_SHAPE: TableShape = TableShape {
    width: 0,
    key: Vec::new(),
};

fn shape_of(s: &Schema) -> TableShape {
    TableShape {
        width: s.columns.len(),
        key: s.key_indices(),
    }
}

/// Copy `from`'s records into `to`, except events before their table's
/// last truncate (`truncated`: table → index, among events, of that
/// truncate), compacting what is left again with the batch's schemas
/// (`schemas`, then schema records as they come, else `extra`). Returns the
/// events written.
fn drop_truncated(
    from: &mut Spool,
    to: &mut Spool,
    truncated: &HashMap<String, u64>,
    schemas: &[Schema],
    extra: &HashMap<String, TableShape>,
) -> Result<u64> {
    let mut own = shapes(schemas)?;
    let mut again = Compactor::new(HOLD_LIMIT_BYTES);
    // Lines written, schema and message records included (taken off at the end).
    let mut written = 0u64;
    let mut other_records = 0u64;
    let mut write = |l: &[u8]| {
        written += 1;
        to.push(l)
    };
    let mut rd = from.drain()?;
    let mut buf = Vec::new();
    let mut name = Vec::new();
    let mut i = 0u64;
    let unreadable = |e: Error| Error::data(format!("a spooled record is unreadable: {e}"));
    loop {
        buf.clear();
        let n = rd
            .read_until(b'\n', &mut buf)
            .map_err(|e| Error::io("cannot read the spool", e))?;
        if n == 0 {
            break;
        }
        let line = buf.strip_suffix(b"\n").unwrap_or(&buf);
        if let Some(e) = raw(line) {
            let table = table_name(&e).map_err(unreadable)?;
            if truncated.get(&table).is_none_or(|&t| i >= t) {
                let shape = own
                    .get(&table)
                    .or_else(|| extra.get(&table))
                    .unwrap_or(&NO_SHAPE);
                again.push(e, shape, &mut write)?;
            }
            i += 1;
            continue;
        }
        let item = crate::wire::jsonl::parse_record(line)
            .and_then(crate::wire::batch::batch_item)
            .map_err(unreadable)?;
        match item {
            Item::Event(e) if e.operation.is_truncate() => {
                // Kept only if it is its table's last.
                if truncated.get(&e.table).is_none_or(|&t| i >= t) {
                    name.clear();
                    write_json_str(&mut name, &e.table);
                    again.push_truncate(&name, &buf, &mut write)?;
                }
                i += 1;
            }
            Item::Schema(c) => {
                again.finish_run(&mut write)?;
                own.insert(c.schema.table.clone(), shape_of(&c.schema));
                write(&buf)?;
                other_records += 1;
            }
            Item::Message(_) => {
                // A barrier, kept in place; not an event.
                again.finish_run(&mut write)?;
                write(&buf)?;
                other_records += 1;
            }
            // Every other event line was written by the compactor, canonical.
            _ => {
                return Err(unreadable(Error::data(
                    "not a canonical event, a truncate, a schema record or a message",
                )))
            }
        }
    }
    again.finish(&mut write)?;
    Ok(written - other_records)
}

#[cfg(test)]
mod tests;
