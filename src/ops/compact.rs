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
//! image check would have found; any other pair on one row (insert after
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
    shapes, write_event_line, write_schema_line, Lean, TableShape, EVENT_LINE_PREFIX,
};
use crate::wire::fast::{event_spans, value_spans, EventMeta};
use crate::wire::model::write_seq;
use crate::wire::value::write_json_str;
use crate::wire::{BatchStreamReader, Commit, Event, Header, Item, Operation, Schema};
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

/// An event to compact: its canonical line (without the newline) and where
/// its parts are in it.
#[derive(Debug, Clone, Copy)]
pub struct RawEvent<'a> {
    pub line: &'a [u8],
    pub meta: EventMeta,
}

fn part(line: &[u8], (a, b): (usize, usize)) -> &[u8] {
    &line[a..b]
}

impl<'a> RawEvent<'a> {
    fn table(&self) -> &'a [u8] {
        part(self.line, self.meta.table_json)
    }
    fn before(&self) -> Option<&'a [u8]> {
        self.meta.before_at.map(|s| part(self.line, s))
    }
    fn after(&self) -> Option<&'a [u8]> {
        self.meta.after_at.map(|s| part(self.line, s))
    }
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

enum Fold {
    /// Into one event of this operation: the first's before image (if it
    /// has one) and the second's after image (if it has one).
    Into(Operation),
    Vanish,
    No,
}

fn fold(a: RawEvent<'_>, b: RawEvent<'_>) -> Fold {
    use Operation::*;
    let follows = || matches!((b.before(), a.after()), (Some(x), Some(y)) if x == y);
    match (a.meta.operation, b.meta.operation) {
        (Insert, Update) if follows() => Fold::Into(Insert),
        (Insert, Delete) if follows() => Fold::Vanish,
        (Update, Update) if follows() => Fold::Into(Update),
        (Update, Delete) if follows() => Fold::Into(Delete),
        (Delete, Insert) => Fold::Into(Update),
        _ => Fold::No,
    }
}

/// Write the line of `a` and `b` folded into one `op` event (the sequence
/// of `b`, the before image of `a`, the after image of `b`, as the
/// operation has them) into `out`, newline included; its parts' places.
/// The same bytes as `write_event_line` of that event.
fn write_folded(out: &mut Vec<u8>, op: Operation, a: RawEvent<'_>, b: RawEvent<'_>) -> EventMeta {
    out.clear();
    out.extend_from_slice(EVENT_LINE_PREFIX);
    out.extend_from_slice(b"{\"sequence\":");
    write_seq(out, b.meta.sequence);
    out.extend_from_slice(b",\"table\":");
    let t0 = out.len();
    out.extend_from_slice(b.table());
    let table_json = (t0, out.len());
    let table = if escaped(&b.meta) {
        (t0, t0)
    } else {
        (t0 + 1, out.len() - 1)
    };
    out.extend_from_slice(b",\"operation\":\"");
    out.extend_from_slice(op.as_str().as_bytes());
    out.push(b'"');
    let image = |out: &mut Vec<u8>, name: &[u8], img: Option<&[u8]>| {
        img.map(|img| {
            out.extend_from_slice(name);
            let start = out.len();
            out.extend_from_slice(img);
            (start, out.len())
        })
    };
    let (before, before_at) = match op {
        Operation::Insert => (None, None),
        _ => (a.meta.before, image(out, b",\"before\":", a.before())),
    };
    let (after, after_at) = match op {
        Operation::Delete => (None, None),
        _ => (b.meta.after, image(out, b",\"after\":", b.after())),
    };
    out.extend_from_slice(b"}}");
    let meta = EventMeta {
        sequence: b.meta.sequence,
        operation: op,
        table,
        table_json,
        before,
        after,
        before_at,
        after_at,
    };
    debug_assert_eq!(
        event_spans(out),
        Some(meta),
        "a folded line scans as written"
    );
    out.push(b'\n');
    meta
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
    /// ends, so equal keys are equal bytes).
    fn key_of(
        values: &mut Vec<(usize, usize)>,
        row: &[u8],
        shape: &TableShape,
        out: &mut Vec<u8>,
    ) -> Result<()> {
        out.clear();
        value_spans(row, values)
            .ok_or_else(|| Error::data("an event's image is not in the canonical spelling"))?;
        for &i in &shape.key {
            let Some(&v) = values.get(i) else {
                return Err(Error::data(format!(
                    "an image has {} values, fewer than its schema's key needs",
                    values.len()
                )));
            };
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
        Self::key_of(&mut self.values, image, shape, &mut self.key)?;
        // Without a key no two events are known to be on the same row.
        let foldable = !shape.key.is_empty()
            && match (e.meta.operation, e.after()) {
                (Operation::Update, Some(after)) => {
                    Self::key_of(&mut self.values, after, shape, &mut self.other_key)?;
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

/// An event line for the compactor: `line` (canonical, without its
/// newline) as a raw event, or `None` for a line the fast scan declines
/// (a truncate, another spelling).
fn raw(line: &[u8]) -> Option<RawEvent<'_>> {
    event_spans(line).map(|meta| RawEvent { line, meta })
}

/// A built event (not a truncate) encoded into `buf` as a raw event; an
/// error for an event no stream may hold (images that do not fit its
/// operation, sequence 0), which only a library caller can give.
fn encoded<'a>(buf: &'a mut Vec<u8>, e: &Event) -> Result<RawEvent<'a>> {
    e.check_images().map_err(Error::data)?;
    buf.clear();
    write_event_line(buf, e);
    buf.pop();
    Ok(raw(buf).expect("an encoded event with fitting images is canonical"))
}

/// Whether an event's table name has escapes (its `table` range is then
/// empty while its JSON string holds more than the quotes).
fn escaped(m: &EventMeta) -> bool {
    m.table.0 == m.table.1 && m.table_json.1 - m.table_json.0 > 2
}

/// The table name of a raw event.
fn table_name(e: &RawEvent<'_>) -> Result<String> {
    if !escaped(&e.meta) {
        return Ok(String::from_utf8_lossy(part(e.line, e.meta.table)).into_owned());
    }
    serde_json::from_slice(e.table())
        .map_err(|err| Error::data(format!("an event's table name is unreadable: {err}")))
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
    let width = meta.before.or(meta.after).unwrap_or_default();
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
    // Lines written, schema records included (taken off at the end).
    let mut written = 0u64;
    let mut schema_records = 0u64;
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
                schema_records += 1;
            }
            // Every other event line was written by the compactor, canonical.
            _ => {
                return Err(unreadable(Error::data(
                    "not a canonical event, a truncate or a schema record",
                )))
            }
        }
    }
    again.finish(&mut write)?;
    Ok(written - schema_records)
}

/// Compact a batch in memory (for tests and library users).
pub fn compact_events(events: Vec<Event>, schemas: &[Schema]) -> Result<Vec<Event>> {
    let sh = shapes(schemas)?;
    let mut c = Compactor::new(HOLD_LIMIT_BYTES);
    let mut lines: Vec<u8> = Vec::new();
    let mut write = |l: &[u8]| {
        lines.extend_from_slice(l);
        Ok(())
    };
    // Events before their table's last truncate are emptied by it.
    let last: HashMap<&str, usize> = events
        .iter()
        .enumerate()
        .filter(|(_, e)| e.operation.is_truncate())
        .map(|(i, e)| (e.table.as_str(), i))
        .collect();
    let mut buf = Vec::new();
    let mut name = Vec::new();
    for (i, e) in events.iter().enumerate() {
        if last.get(e.table.as_str()).is_some_and(|&t| i < t) {
            continue;
        }
        if e.operation.is_truncate() {
            buf.clear();
            write_event_line(&mut buf, e);
            name.clear();
            write_json_str(&mut name, &e.table);
            c.push_truncate(&name, &buf, &mut write)?;
            continue;
        }
        let shape = sh
            .get(&e.table)
            .ok_or_else(|| Error::data(format!("no schema for table {:?}", e.table)))?;
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
        c.push(encoded(&mut buf, e)?, shape, &mut write)?;
    }
    c.finish(&mut write)?;
    lines
        .split(|&b| b == b'\n')
        .filter(|l| !l.is_empty())
        .map(|l| {
            crate::wire::jsonl::parse_record(l)
                .and_then(crate::wire::batch::batch_item)
                .map(|item| match item {
                    Item::Event(e) => e,
                    _ => unreachable!("the compactor writes events"),
                })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::{Sequence, Value};

    /// A folded line is what the encoder writes for the folded event, for
    /// every fold, with plain and escaped table names.
    #[test]
    fn folded_lines_are_the_encoders_lines() {
        let row = |k: i64, t: &str| Some(vec![Value::Integer(k), Value::Text(t.into())]);
        for table in ["t", "a\"b\u{1}", ""] {
            let ev = |seq: Sequence, op, before, after| Event {
                sequence: seq,
                table: table.into(),
                operation: op,
                before,
                after,
            };
            use Operation::*;
            for (a, b, want) in [
                (
                    ev(1, Insert, None, row(1, "x")),
                    ev(2, Update, row(1, "x"), row(1, "y")),
                    Some(ev(2, Insert, None, row(1, "y"))),
                ),
                (
                    ev(1, Update, row(1, "w"), row(1, "x")),
                    ev(2, Update, row(1, "x"), row(1, "y")),
                    Some(ev(2, Update, row(1, "w"), row(1, "y"))),
                ),
                (
                    ev(1, Update, row(1, "w"), row(1, "x")),
                    ev(3, Delete, row(1, "x"), None),
                    Some(ev(3, Delete, row(1, "w"), None)),
                ),
                (
                    ev(1, Delete, row(1, "w"), None),
                    ev(2, Insert, None, row(1, "\n")),
                    Some(ev(2, Update, row(1, "w"), row(1, "\n"))),
                ),
                (
                    ev(1, Insert, None, row(1, "x")),
                    ev(2, Delete, row(1, "x"), None),
                    None,
                ),
                (
                    ev(1, Insert, None, row(1, "x")),
                    ev(2, Update, row(1, "z"), row(1, "y")),
                    None,
                ),
            ] {
                let (mut la, mut lb, mut want_line) = (Vec::new(), Vec::new(), Vec::new());
                let (ra, rb) = (encoded(&mut la, &a).unwrap(), encoded(&mut lb, &b).unwrap());
                match (fold(ra, rb), want) {
                    (Fold::Into(op), Some(w)) => {
                        let mut got = Vec::new();
                        write_folded(&mut got, op, ra, rb);
                        write_event_line(&mut want_line, &w);
                        assert_eq!(
                            String::from_utf8_lossy(&got),
                            String::from_utf8_lossy(&want_line)
                        );
                    }
                    (Fold::Vanish, None) if a.operation == Insert && b.operation == Delete => {}
                    (Fold::No, None) if a.operation == Insert && b.operation == Update => {}
                    (_, w) => panic!("{a:?} then {b:?}: expected {w:?}"),
                }
            }
        }
    }

    /// The library function refuses an event no stream may hold, as it did
    /// before it compacted lines (no panic).
    #[test]
    fn events_no_stream_may_hold_are_refused() {
        let schema: Schema = serde_json::from_str(
            r#"{"table":"t","columns":[{"name":"k","type":"INTEGER","nullable":false}],"key":["k"]}"#,
        )
        .unwrap();
        let bad = Event {
            sequence: 1,
            table: "t".into(),
            operation: Operation::Insert,
            before: Some(vec![Value::Integer(1)]),
            after: Some(vec![Value::Integer(1)]),
        };
        let e = compact_events(vec![bad], &[schema]).unwrap_err();
        assert!(e.to_string().contains("insert event 1 must have"), "{e}");
    }

    #[test]
    fn keys_are_compared_exactly() {
        let shape = TableShape {
            width: 2,
            key: vec![1, 0],
        };
        let mut values = Vec::new();
        let mut key = |row: Vec<Value>| {
            let e = Event {
                sequence: 1,
                table: "t".into(),
                operation: Operation::Insert,
                before: None,
                after: Some(row),
            };
            let mut buf = Vec::new();
            let raw = encoded(&mut buf, &e).unwrap();
            let mut out = Vec::new();
            Compactor::key_of(&mut values, raw.after().unwrap(), &shape, &mut out).unwrap();
            out
        };
        let k = key(vec![Value::Real(0.0), Value::Text("a,\"]b".into())]);
        assert_eq!(k, key(vec![Value::Real(0.0), Value::Text("a,\"]b".into())]));
        assert_ne!(
            k,
            key(vec![Value::Real(-0.0), Value::Text("a,\"]b".into())])
        );
        assert_ne!(
            k,
            key(vec![Value::Integer(0), Value::Text("a,\"]b".into())])
        );
        assert_ne!(
            k,
            key(vec![Value::Real(0.0), Value::Blob(b"a,\"]b".to_vec())])
        );
    }
}
