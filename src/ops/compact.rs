//! Compact: remove intermediate changes of the same row (DESIGN §8).
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
//! image check would have found; any other pair on one row (insert after
//! insert, say) ends the run for good. Events on other rows and updates that change the key end a run.
//! A folded event carries the sequence of the last event folded into it. When
//! a run vanishes (insert then delete) the runs on either side become adjacent,
//! which makes compaction idempotent: compacting its own output changes nothing.
//! The batch interval is kept even when events vanish.
//!
//! Only a held-back stack of inserts (the rows that a later delete could still
//! make vanish) is kept in memory, capped by [`HOLD_LIMIT_BYTES`]; beyond the cap
//! the oldest is written out, which can leave a fold for a second pass.

use super::spool::{Spool, DEFAULT_SPOOL_MEMORY};
use super::BatchSink;
use crate::error::{Error, Result};
use crate::wire::batch::{shapes, write_event_line, write_schema_line, TableShape};
use crate::wire::{
    BatchStreamReader, Commit, Event, Header, Item, Operation, Schema, SchemaChange, Value,
};
use std::collections::{HashMap, VecDeque};
use std::io::BufRead;

/// Memory for held-back events before the oldest is written out.
pub const HOLD_LIMIT_BYTES: usize = 8 << 20;

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CompactStats {
    pub batches: u64,
    pub events_in: u64,
    pub events_out: u64,
}

struct Held {
    event: Event,
    key: Vec<Value>,
    /// False for an update that changes the key: it ends runs on both sides.
    foldable: bool,
    size: usize,
}

/// The compaction of one batch's events, fed one event at a time.
pub struct Compactor {
    /// Oldest first; the back is the top. A deque, so writing out the oldest
    /// when over the memory cap costs O(1), not a shift of everything held.
    stack: VecDeque<Held>,
    held_bytes: usize,
    hold_limit: usize,
    /// Whether any event was folded into another or vanished since `new`.
    folded: bool,
}

enum Fold {
    Into(Event),
    Vanish,
    No,
}

fn same_row(a: &[Value], b: &[Value]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.same(y))
}

fn fold(a: &Event, b: &Event) -> Fold {
    use Operation::*;
    let follows = |img: &Option<Vec<Value>>, prev: &Option<Vec<Value>>| match (img, prev) {
        (Some(x), Some(y)) => same_row(x, y),
        _ => false,
    };
    let ev = |op, before: &Option<Vec<Value>>, after: &Option<Vec<Value>>| Event {
        sequence: b.sequence,
        table: b.table.clone(),
        operation: op,
        before: before.clone(),
        after: after.clone(),
    };
    match (a.operation, b.operation) {
        (Insert, Update) if follows(&b.before, &a.after) => Fold::Into(ev(Insert, &None, &b.after)),
        (Insert, Delete) if follows(&b.before, &a.after) => Fold::Vanish,
        (Update, Update) if follows(&b.before, &a.after) => {
            Fold::Into(ev(Update, &a.before, &b.after))
        }
        (Update, Delete) if follows(&b.before, &a.after) => {
            Fold::Into(ev(Delete, &a.before, &None))
        }
        (Delete, Insert) => Fold::Into(ev(Update, &a.before, &b.after)),
        _ => Fold::No,
    }
}

fn event_size(e: &Event) -> usize {
    let row = |r: &Option<Vec<Value>>| {
        r.as_ref().map_or(0, |r| {
            r.iter()
                .map(|v| {
                    32 + match v {
                        Value::Text(s) => s.len(),
                        Value::Blob(b) => b.len(),
                        _ => 0,
                    }
                })
                .sum::<usize>()
        })
    };
    64 + e.table.len() + row(&e.before) + row(&e.after)
}

impl Compactor {
    pub fn new(hold_limit: usize) -> Self {
        Compactor {
            stack: VecDeque::new(),
            held_bytes: 0,
            hold_limit,
            folded: false,
        }
    }

    /// Take one event; events that can no longer change are passed to `out`.
    pub fn push(
        &mut self,
        e: Event,
        shape: &TableShape,
        out: &mut dyn FnMut(&Event) -> Result<()>,
    ) -> Result<()> {
        let key_of = |row: &[Value]| {
            shape
                .key
                .iter()
                .map(|&i| row[i].clone())
                .collect::<Vec<_>>()
        };
        if e.operation.is_truncate() {
            // A barrier: held events of the emptied table vanish with it;
            // everything else held can no longer fold across it.
            let before = self.stack.len();
            self.stack.retain(|h| h.event.table != e.table);
            if self.stack.len() != before {
                self.folded = true;
                self.held_bytes = self.stack.iter().map(|h| h.size).sum();
            }
            let n = self.stack.len();
            self.flush(n, out)?;
            return out(&e);
        }
        let Some(image) = e.key_image() else {
            unreachable!("checked images: only a truncate has none")
        };
        let key = key_of(image);
        // Without a key no two events are known to be on the same row.
        let foldable = !shape.key.is_empty()
            && match (e.operation, &e.after) {
                (Operation::Update, Some(after)) => same_row(&key, &key_of(after)),
                _ => true,
            };
        let mut e = Some(e);
        if foldable {
            if let Some(top) = self.stack.back_mut() {
                let ev = e.as_ref().expect("present");
                if top.foldable && top.event.table == ev.table && same_row(&top.key, &key) {
                    match fold(&top.event, ev) {
                        Fold::Into(new) => {
                            let size = event_size(&new);
                            self.held_bytes = self.held_bytes - top.size + size;
                            top.event = new;
                            top.size = size;
                            e = None;
                            self.folded = true;
                        }
                        Fold::Vanish => {
                            let top = self.stack.pop_back().expect("top");
                            self.held_bytes -= top.size;
                            e = None;
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
        if let Some(ev) = e {
            let size = event_size(&ev);
            self.held_bytes += size;
            self.stack.push_back(Held {
                event: ev,
                key,
                foldable,
                size,
            });
        }
        // Only an insert can vanish and expose what lies below it; below any
        // other event nothing can change any more.
        if let Some(top) = self.stack.back() {
            if top.event.operation != Operation::Insert || !top.foldable {
                let n = self.stack.len() - 1;
                self.flush(n, out)?;
            }
        }
        while self.held_bytes > self.hold_limit && self.stack.len() > 1 {
            self.flush(1, out)?;
        }
        Ok(())
    }

    /// Pass the oldest `n` held events to `out`.
    fn flush(&mut self, n: usize, out: &mut dyn FnMut(&Event) -> Result<()>) -> Result<()> {
        for h in self.stack.drain(..n) {
            self.held_bytes -= h.size;
            out(&h.event)?;
        }
        Ok(())
    }

    /// A barrier (a schema change): pass everything held; no run goes on
    /// across it.
    pub fn finish_run(&mut self, out: &mut dyn FnMut(&Event) -> Result<()>) -> Result<()> {
        let n = self.stack.len();
        self.flush(n, out)
    }

    /// End of the batch: pass everything held. Returns whether any event was
    /// folded away, and starts afresh for the next batch.
    pub fn finish(&mut self, out: &mut dyn FnMut(&Event) -> Result<()>) -> Result<bool> {
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
    let mut out_count = 0u64;
    // Per table, the index (among the batch's events written) of its last truncate.
    let mut truncated: HashMap<String, u64> = HashMap::new();
    let mut spare = Spool::new(DEFAULT_SPOOL_MEMORY);

    while let Some(item) = input.next_item()? {
        match item {
            Item::Header(h) => {
                let own = match &h.schemas {
                    Some(s) => shapes(s)?,
                    None => HashMap::new(),
                };
                out_count = 0;
                header = Some((h, own));
            }
            Item::Event(e) => {
                let (_, own) = header.as_ref().expect("validated stream");
                stats.events_in += 1;
                let shape = match own.get(&e.table).or_else(|| extra_shapes.get(&e.table)) {
                    Some(s) => s,
                    None if e.operation.is_truncate() => &NO_SHAPE,
                    None => {
                        return Err(input.locate(Error::data(format!(
                            "compaction needs the key of table {:?}, but no schema names it (the stream's header has none; give one with --schema)",
                            e.table
                        ))))
                    }
                };
                if let Some(row) = e.before.as_ref().or(e.after.as_ref()) {
                    if shape.key.iter().any(|&i| i >= row.len()) {
                        return Err(input.locate(Error::data(format!(
                            "event {} of table {:?} has {} values, fewer than its schema's key needs",
                            e.sequence,
                            e.table,
                            row.len()
                        ))));
                    }
                }
                let shape = shape.clone();
                compactor.push(e, &shape, &mut |ev| {
                    if ev.operation.is_truncate() {
                        truncated.insert(ev.table.clone(), out_count);
                    }
                    line.clear();
                    write_event_line(&mut line, ev);
                    out_count += 1;
                    spool.push(&line)
                })?;
            }
            Item::Schema(c) => {
                if !sink.takes_schema_records() {
                    return Err(input.locate(super::no_json_for_schema_records()));
                }
                // A barrier: nothing folds across a schema change.
                compactor.finish_run(&mut |ev| {
                    line.clear();
                    write_event_line(&mut line, ev);
                    out_count += 1;
                    spool.push(&line)
                })?;
                line.clear();
                write_schema_line(&mut line, &c);
                spool.push(&line)?;
                let (_, own) = header.as_mut().expect("validated stream");
                own.insert(c.schema.table.clone(), shape_of(&c.schema));
            }
            Item::Commit(c) => {
                let mut folded = compactor.finish(&mut |ev| {
                    line.clear();
                    write_event_line(&mut line, ev);
                    out_count += 1;
                    spool.push(&line)
                })?;
                if !truncated.is_empty() {
                    // Events written out before a truncate of their table are
                    // emptied by it. Dropping them can make events adjacent
                    // that were not, so what is left is compacted again (a
                    // second pass finds no more to drop: compaction stays
                    // idempotent).
                    let (h, _) = header.as_ref().expect("validated stream");
                    let mut own = match &h.schemas {
                        Some(s) => shapes(s)?,
                        None => HashMap::new(),
                    };
                    let before = out_count;
                    out_count = 0;
                    let mut again = Compactor::new(HOLD_LIMIT_BYTES);
                    let mut write = |rec: Record<'_>| {
                        line.clear();
                        match rec {
                            Record::Event(ev) => {
                                write_event_line(&mut line, ev);
                                out_count += 1;
                            }
                            Record::Schema(c) => write_schema_line(&mut line, c),
                        }
                        spare.push(&line)
                    };
                    drop_truncated(&mut spool, &truncated, &mut |item| match item {
                        Item::Event(ev) => {
                            let shape = own
                                .get(&ev.table)
                                .or_else(|| extra_shapes.get(&ev.table))
                                .unwrap_or(&NO_SHAPE);
                            again.push(ev, shape, &mut |e| write(Record::Event(e)))
                        }
                        Item::Schema(c) => {
                            again.finish_run(&mut |e| write(Record::Event(e)))?;
                            own.insert(c.schema.table.clone(), shape_of(&c.schema));
                            write(Record::Schema(&c))
                        }
                        _ => unreachable!("only events and schema records are spooled"),
                    })?;
                    folded |= again.finish(&mut |e| write(Record::Event(e)))? || out_count < before;
                    std::mem::swap(&mut spool, &mut spare);
                    truncated.clear();
                }
                let (mut h, _) = header.take().expect("validated stream");
                // Mark the batch when events were folded away, so a target
                // holding part of its interval refuses it (DESIGN §8).
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
            }
        }
    }
    Ok(stats)
}

/// The shape given to a truncate whose table has no schema: it needs none.
static NO_SHAPE: TableShape = TableShape {
    width: 0,
    key: Vec::new(),
};

/// A record for the second pass's output.
enum Record<'a> {
    Event(&'a Event),
    Schema(&'a SchemaChange),
}

fn shape_of(s: &Schema) -> TableShape {
    TableShape {
        width: s.columns.len(),
        key: s.key_indices(),
    }
}

/// Pass `from`'s records to `keep`, except events before their table's last
/// truncate (`truncated`: table → index, among events, of that truncate).
fn drop_truncated(
    from: &mut Spool,
    truncated: &HashMap<String, u64>,
    keep: &mut dyn FnMut(Item) -> Result<()>,
) -> Result<()> {
    let mut rd = from.drain()?;
    let mut buf = Vec::new();
    let mut i = 0u64;
    loop {
        buf.clear();
        let n = rd
            .read_until(b'\n', &mut buf)
            .map_err(|e| Error::io("cannot read the spool", e))?;
        if n == 0 {
            break;
        }
        let item = crate::wire::jsonl::parse_record(&buf)
            .and_then(crate::wire::batch::batch_item)
            .map_err(|e| Error::data(format!("a spooled record is unreadable: {e}")))?;
        match item {
            Item::Event(e) => {
                if truncated.get(&e.table).is_none_or(|&t| i >= t) {
                    keep(Item::Event(e))?;
                }
                i += 1;
            }
            other => keep(other)?,
        }
    }
    Ok(())
}

/// Compact a batch in memory (for tests and library users).
pub fn compact_events(events: Vec<Event>, schemas: &[Schema]) -> Result<Vec<Event>> {
    let sh = shapes(schemas)?;
    let mut c = Compactor::new(HOLD_LIMIT_BYTES);
    let mut out = Vec::new();
    // Events before their table's last truncate are emptied by it.
    let last: HashMap<&str, usize> = events
        .iter()
        .enumerate()
        .filter(|(_, e)| e.operation.is_truncate())
        .map(|(i, e)| (e.table.as_str(), i))
        .collect();
    let dropped: Vec<bool> = events
        .iter()
        .enumerate()
        .map(|(i, e)| last.get(e.table.as_str()).is_some_and(|&t| i < t))
        .collect();
    for (e, dropped) in events.into_iter().zip(dropped) {
        if dropped {
            continue;
        }
        if e.operation.is_truncate() {
            c.push(e, &NO_SHAPE, &mut |ev| {
                out.push(ev.clone());
                Ok(())
            })?;
            continue;
        }
        let shape = sh
            .get(&e.table)
            .ok_or_else(|| Error::data(format!("no schema for table {:?}", e.table)))?
            .clone();
        for img in [&e.before, &e.after].into_iter().flatten() {
            if img.len() != shape.width {
                return Err(Error::data(format!(
                    "event {} has {} values but table {:?} has {} columns",
                    e.sequence,
                    img.len(),
                    e.table,
                    shape.width
                )));
            }
        }
        c.push(e, &shape, &mut |ev| {
            out.push(ev.clone());
            Ok(())
        })?;
    }
    c.finish(&mut |ev| {
        out.push(ev.clone());
        Ok(())
    })?;
    Ok(out)
}
