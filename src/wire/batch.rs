//! Batches and batch streams (DESIGN §5).
//!
//! JSONL `mooncdc.jsonl.v1`, one record a line:
//!
//! ```text
//! {"kind":"header","format":"mooncdc.jsonl.v1","start":C,"high_water":"n","schemas":[…]}
//! {"kind":"event","event":{…}}
//! {"kind":"commit","end":C,"count":"2"}
//! ```
//!
//! JSON `mooncdc.batch.v1`:
//! `{"format":"mooncdc.batch.v1","start":C,"end":C,"high_water":"n","schemas":[…],"events":[…]}`
//! (`schemas` optional in both).
//!
//! Rules, each an error naming the line: header first and once; commit
//! mandatory and last; `count` equals the number of events; start and end have
//! the same source; `start ≤ end ≤ high_water`; event sequences strictly
//! increase inside `(start, end]`; images match the operation; with schemas,
//! every event's table has one and every image has its width. An empty batch
//! is valid. A *batch stream* is batches back to back, each `start` equal to
//! the previous `end`; a commit line is the unit a target applies atomically.

use super::jsonl::{json_error, parse_record, Limits, LineReader, RawRecord, RecordKind};
use super::model::{
    write_cursor, write_event, write_schemas, write_seq, Cursor, Event, Schema, Seq, Sequence,
};
use super::strict::{present, Obj};
use crate::error::{Error, Result};
use serde::Deserialize;
use std::collections::HashMap;
use std::io::{BufRead, Read};

pub const JSONL_FORMAT: &str = "mooncdc.jsonl.v1";
pub const JSON_FORMAT: &str = "mooncdc.batch.v1";

/// What a batch's header says.
#[derive(Debug, Clone, PartialEq)]
pub struct Header {
    pub start: Cursor,
    pub high_water: Sequence,
    pub schemas: Option<Vec<Schema>>,
    /// `"compacted":true`: `mooncdc-compact` folded some events of this batch
    /// into later ones, so only a target holding none of the interval, or all
    /// of it, may apply it (DESIGN §8). Written only when true.
    pub compacted: bool,
}

/// What a batch's commit says.
#[derive(Debug, Clone, PartialEq)]
pub struct Commit {
    pub end: Cursor,
    pub count: u64,
}

/// One validated record of a batch stream.
#[derive(Debug, Clone, PartialEq)]
pub enum Item {
    Header(Header),
    Event(Event),
    Commit(Commit),
}

/// A whole batch in memory.
#[derive(Debug, Clone, PartialEq)]
pub struct Batch {
    pub start: Cursor,
    pub end: Cursor,
    pub high_water: Sequence,
    pub schemas: Option<Vec<Schema>>,
    /// See [`Header::compacted`].
    pub compacted: bool,
    pub events: Vec<Event>,
}

/// Width and key positions of a table, from its schema.
#[derive(Debug, Clone)]
pub struct TableShape {
    pub width: usize,
    pub key: Vec<usize>,
}

/// Index schemas by table, refusing duplicates and bad schemas.
pub fn shapes(schemas: &[Schema]) -> Result<HashMap<String, TableShape>> {
    let mut map = HashMap::with_capacity(schemas.len());
    for s in schemas {
        s.check().map_err(Error::data)?;
        let shape = TableShape {
            width: s.columns.len(),
            key: s.key_indices(),
        };
        if map.insert(s.table.clone(), shape).is_some() {
            return Err(Error::data(format!(
                "schemas name table {:?} twice",
                s.table
            )));
        }
    }
    Ok(map)
}

/// The batch rules as a state machine over records, shared by every decoder.
#[derive(Default)]
pub struct Validator {
    /// Refuse anything after the first commit (the strict single-batch decoder).
    single: bool,
    prev_end: Option<Cursor>,
    open: Option<Open>,
    batches: u64,
}

struct Open {
    start: Cursor,
    high_water: Sequence,
    shapes: Option<HashMap<String, TableShape>>,
    /// Without schemas: each table's width as its first image gave it.
    widths: HashMap<String, usize>,
    last: Sequence,
    count: u64,
}

impl Validator {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn single_batch() -> Self {
        Validator {
            single: true,
            ..Self::default()
        }
    }

    /// Whether a batch is open (header seen, commit not yet).
    pub fn in_batch(&self) -> bool {
        self.open.is_some()
    }

    pub fn batches(&self) -> u64 {
        self.batches
    }

    pub fn header(&mut self, h: &Header) -> Result<()> {
        if self.open.is_some() {
            return Err(Error::data(
                "second header inside a batch (header must come once, before its events)",
            ));
        }
        if self.single && self.batches > 0 {
            return Err(Error::data(
                "record after the commit (a batch ends at its commit)",
            ));
        }
        if let Some(prev) = &self.prev_end {
            if prev.source != h.start.source {
                return Err(Error::data(format!(
                    "batch starts in source {:?} but the previous batch ended in source {:?}",
                    h.start.source, prev.source
                )));
            }
            if prev.sequence() != h.start.sequence() {
                return Err(Error::data(format!(
                    "batch starts at sequence {} but the previous batch ended at {} (each batch must start where the last ended)",
                    h.start.sequence(),
                    prev.sequence()
                )));
            }
        }
        if h.start.sequence() > h.high_water {
            return Err(Error::data(format!(
                "start sequence {} is greater than high_water {}",
                h.start.sequence(),
                h.high_water
            )));
        }
        let shapes = match &h.schemas {
            Some(s) => Some(shapes(s)?),
            None => None,
        };
        self.open = Some(Open {
            start: h.start.clone(),
            high_water: h.high_water,
            shapes,
            widths: HashMap::new(),
            last: h.start.sequence(),
            count: 0,
        });
        Ok(())
    }

    pub fn event(&mut self, e: &Event) -> Result<()> {
        let Some(open) = self.open.as_mut() else {
            return Err(Error::data(if self.batches == 0 {
                "event before the header (the header must come first)"
            } else {
                "event after the commit (a batch ends at its commit; a new batch needs a header)"
            }));
        };
        if e.sequence <= open.last {
            return Err(Error::data(if open.count == 0 {
                format!(
                    "event sequence {} is not after the batch start {}",
                    e.sequence, open.last
                )
            } else {
                format!(
                    "event sequence {} does not increase (previous event {})",
                    e.sequence, open.last
                )
            }));
        }
        if e.sequence > open.high_water {
            return Err(Error::data(format!(
                "event sequence {} is beyond high_water {}",
                e.sequence, open.high_water
            )));
        }
        if let Some(shapes) = &open.shapes {
            let Some(shape) = shapes.get(&e.table) else {
                return Err(Error::data(format!(
                    "event {} is for table {:?}, which has no schema in the header",
                    e.sequence, e.table
                )));
            };
            for (name, img) in [("before", &e.before), ("after", &e.after)] {
                if let Some(row) = img {
                    if row.len() != shape.width {
                        return Err(Error::data(format!(
                            "event {} {} image has {} values but table {:?} has {} columns",
                            e.sequence,
                            name,
                            row.len(),
                            e.table,
                            shape.width
                        )));
                    }
                }
            }
        }
        if open.shapes.is_none() {
            for (name, img) in [("before", &e.before), ("after", &e.after)] {
                if let Some(row) = img {
                    let w = match open.widths.get(&e.table) {
                        Some(&w) => w,
                        None => {
                            open.widths.insert(e.table.clone(), row.len());
                            row.len()
                        }
                    };
                    if row.len() != w {
                        return Err(Error::data(format!(
                            "event {} {} image has {} values but earlier images of table {:?} have {}",
                            e.sequence,
                            name,
                            row.len(),
                            e.table,
                            w
                        )));
                    }
                }
            }
        }
        open.last = e.sequence;
        open.count += 1;
        Ok(())
    }

    pub fn commit(&mut self, c: &Commit) -> Result<()> {
        let Some(open) = self.open.take() else {
            return Err(Error::data(if self.batches == 0 {
                "commit before the header (the header must come first)"
            } else {
                "second commit (a batch has one commit, and it is last)"
            }));
        };
        if c.end.source != open.start.source {
            return Err(Error::data(format!(
                "commit ends in source {:?} but the batch started in source {:?}",
                c.end.source, open.start.source
            )));
        }
        if c.end.sequence() < open.start.sequence() {
            return Err(Error::data(format!(
                "end sequence {} is before start sequence {}",
                c.end.sequence(),
                open.start.sequence()
            )));
        }
        if c.end.sequence() > open.high_water {
            return Err(Error::data(format!(
                "end sequence {} is beyond high_water {}",
                c.end.sequence(),
                open.high_water
            )));
        }
        if open.last > c.end.sequence() {
            return Err(Error::data(format!(
                "event sequence {} is beyond the batch end {}",
                open.last,
                c.end.sequence()
            )));
        }
        if c.count != open.count {
            return Err(Error::data(format!(
                "commit count {} does not match the {} events of the batch",
                c.count, open.count
            )));
        }
        self.prev_end = Some(c.end.clone());
        self.batches += 1;
        Ok(())
    }

    /// At the end of input: a batch left open has no commit (truncated).
    pub fn finish(&self) -> Result<()> {
        if self.open.is_some() {
            return Err(Error::data(
                "input ends inside a batch: the commit record is missing (truncated stream)",
            ));
        }
        if self.batches == 0 {
            return Err(Error::data(
                "input holds no batch (a batch needs a header and a commit)",
            ));
        }
        Ok(())
    }
}

/// Turn a raw JSONL record into a batch item, checking its members.
pub fn batch_item(rec: RawRecord) -> Result<Item> {
    match rec.kind {
        RecordKind::Header => {
            if rec.format.as_deref() == Some(super::snapshot::JSONL_FORMAT) {
                return Err(Error::data("this is a snapshot, not a batch stream"));
            }
            rec.check_members(
                "header",
                &["format", "start", "high_water"],
                &["schemas", "compacted"],
            )?;
            let format = rec.format.unwrap_or_default();
            if format != JSONL_FORMAT {
                return Err(Error::data(if format == super::snapshot::JSONL_FORMAT {
                    "this is a snapshot, not a batch stream".to_string()
                } else {
                    format!("header format {format:?} is not {JSONL_FORMAT:?}")
                }));
            }
            Ok(Item::Header(Header {
                start: rec.start.expect("checked"),
                high_water: rec.high_water.expect("checked").0,
                schemas: rec.schemas,
                compacted: rec.compacted.unwrap_or(false),
            }))
        }
        RecordKind::Event => {
            rec.check_members("event", &["event"], &[])?;
            Ok(Item::Event(rec.event.expect("checked")))
        }
        RecordKind::Commit => {
            rec.check_members("commit", &["end", "count"], &[])?;
            Ok(Item::Commit(Commit {
                end: rec.end.expect("checked"),
                count: rec.count.expect("checked").0,
            }))
        }
        RecordKind::Row => Err(Error::data(
            "row records belong to snapshots, not batch streams",
        )),
    }
}

/// A JSON `mooncdc.batch.v1` document as parsed.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawBatchDoc {
    format: String,
    start: Cursor,
    end: Cursor,
    high_water: Seq,
    #[serde(default, deserialize_with = "present")]
    schemas: Option<Vec<Schema>>,
    #[serde(default, deserialize_with = "present")]
    compacted: Option<bool>,
    events: Vec<Event>,
}

impl RawBatchDoc {
    fn into_batch(self) -> Result<Batch> {
        if self.format != JSON_FORMAT {
            return Err(Error::data(format!(
                "batch format {:?} is not {JSON_FORMAT:?}",
                self.format
            )));
        }
        Ok(Batch {
            start: self.start,
            end: self.end,
            high_water: self.high_water.0,
            schemas: self.schemas,
            compacted: self.compacted.unwrap_or(false),
            events: self.events,
        })
    }
}

impl Batch {
    /// Check every rule of a single batch.
    pub fn validate(&self) -> Result<()> {
        let mut v = Validator::single_batch();
        v.header(&self.header())?;
        for (i, e) in self.events.iter().enumerate() {
            v.event(e)
                .map_err(|err| Error::data(format!("event #{}: {}", i + 1, err.message())))?;
        }
        v.commit(&self.commit())
    }

    pub fn header(&self) -> Header {
        Header {
            start: self.start.clone(),
            high_water: self.high_water,
            schemas: self.schemas.clone(),
            compacted: self.compacted,
        }
    }

    pub fn commit(&self) -> Commit {
        Commit {
            end: self.end.clone(),
            count: self.events.len() as u64,
        }
    }

    /// Decode and validate one JSON batch document.
    pub fn from_json(text: &str) -> Result<Batch> {
        let Obj(doc) = serde_json::from_str::<Obj<RawBatchDoc>>(text).map_err(json_error)?;
        let b = doc.into_batch()?;
        b.validate()?;
        Ok(b)
    }

    /// Decode and validate one JSONL batch (strictly one).
    pub fn from_jsonl(text: &str) -> Result<Batch> {
        let mut d = BatchDecoder::new(Limits::default())?;
        d.push(text)?;
        d.finish()
    }

    pub fn to_json(&self) -> Vec<u8> {
        let mut out = Vec::new();
        write_json_open(&mut out, &self.header(), &self.end);
        for (i, e) in self.events.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            write_event(&mut out, e);
        }
        out.extend_from_slice(b"]}\n");
        out
    }

    pub fn to_jsonl(&self) -> Vec<u8> {
        let mut out = Vec::new();
        write_header_line(&mut out, &self.header());
        for e in &self.events {
            write_event_line(&mut out, e);
        }
        write_commit_line(&mut out, &self.commit());
        out
    }
}

// ---------------------------------------------------------------- writers

pub fn write_header_line(out: &mut Vec<u8>, h: &Header) {
    out.extend_from_slice(b"{\"kind\":\"header\",\"format\":\"");
    out.extend_from_slice(JSONL_FORMAT.as_bytes());
    out.extend_from_slice(b"\",\"start\":");
    write_cursor(out, &h.start);
    out.extend_from_slice(b",\"high_water\":");
    write_seq(out, h.high_water);
    if h.compacted {
        out.extend_from_slice(b",\"compacted\":true");
    }
    if let Some(s) = &h.schemas {
        out.extend_from_slice(b",\"schemas\":");
        write_schemas(out, s);
    }
    out.extend_from_slice(b"}\n");
}

/// The fixed text around an event object in its JSONL record.
pub const EVENT_LINE_PREFIX: &[u8] = b"{\"kind\":\"event\",\"event\":";
pub const EVENT_LINE_SUFFIX: &[u8] = b"}\n";

pub fn write_event_line(out: &mut Vec<u8>, e: &Event) {
    out.extend_from_slice(EVENT_LINE_PREFIX);
    write_event(out, e);
    out.extend_from_slice(EVENT_LINE_SUFFIX);
}

pub fn write_commit_line(out: &mut Vec<u8>, c: &Commit) {
    out.extend_from_slice(b"{\"kind\":\"commit\",\"end\":");
    write_cursor(out, &c.end);
    out.extend_from_slice(b",\"count\":\"");
    out.extend_from_slice(itoa::Buffer::new().format(c.count).as_bytes());
    out.extend_from_slice(b"\"}\n");
}

/// The JSON batch document up to the opening of its `events` array.
pub fn write_json_open(out: &mut Vec<u8>, h: &Header, end: &Cursor) {
    out.extend_from_slice(b"{\"format\":\"");
    out.extend_from_slice(JSON_FORMAT.as_bytes());
    out.extend_from_slice(b"\",\"start\":");
    write_cursor(out, &h.start);
    out.extend_from_slice(b",\"end\":");
    write_cursor(out, end);
    out.extend_from_slice(b",\"high_water\":");
    write_seq(out, h.high_water);
    if h.compacted {
        out.extend_from_slice(b",\"compacted\":true");
    }
    if let Some(s) = &h.schemas {
        out.extend_from_slice(b",\"schemas\":");
        write_schemas(out, s);
    }
    out.extend_from_slice(b",\"events\":[");
}

// ---------------------------------------------------------------- readers

/// Reads a batch stream, JSONL or JSON, yielding only validated items.
///
/// An [`Item::Commit`] is returned only once its whole batch has passed every
/// rule, so a consumer that acts at commits never acts on a bad batch. JSON
/// documents are read whole and count as one line for the line cap.
pub struct BatchStreamReader<R> {
    src: Src<R>,
    validator: Validator,
    buf: Vec<u8>,
}

enum Src<R> {
    Lines(LineReader<R>),
    Docs {
        name: String,
        docs: std::vec::IntoIter<RawBatchDoc>,
        current: Option<(Commit, std::vec::IntoIter<Event>)>,
        doc_no: u64,
        event_no: u64,
    },
}

impl<R: BufRead> BatchStreamReader<R> {
    /// A JSONL batch stream.
    pub fn jsonl(inner: R, name: impl Into<String>, limits: Limits) -> Self {
        BatchStreamReader {
            src: Src::Lines(LineReader::new(inner, name, limits)),
            validator: Validator::new(),
            buf: Vec::new(),
        }
    }

    /// One or more JSON batch documents (whitespace between them), read whole.
    pub fn json(mut inner: R, name: impl Into<String>, limits: Limits) -> Result<Self> {
        let name = name.into();
        let text = read_document(&mut inner, &name, limits)?;
        let mut docs = Vec::new();
        let stream = serde_json::Deserializer::from_slice(&text).into_iter::<Obj<RawBatchDoc>>();
        for (i, d) in stream.enumerate() {
            let Obj(d) =
                d.map_err(|e| json_error(e).in_file(&format!("{name} (JSON batch {})", i + 1)))?;
            docs.push(d);
        }
        Ok(BatchStreamReader {
            src: Src::Docs {
                name,
                docs: docs.into_iter(),
                current: None,
                doc_no: 0,
                event_no: 0,
            },
            validator: Validator::new(),
            buf: Vec::new(),
        })
    }

    /// The input's name in messages.
    pub fn name(&self) -> &str {
        match &self.src {
            Src::Lines(l) => l.name(),
            Src::Docs { name, .. } => name,
        }
    }

    /// Where the reader is, for messages: the input's name and the last line read.
    pub fn locate(&self, e: Error) -> Error {
        match &self.src {
            Src::Lines(l) => l.error(e),
            Src::Docs {
                name,
                doc_no,
                event_no,
                ..
            } => e.in_file(&if *event_no == 0 {
                format!("{name} (JSON batch {doc_no})")
            } else {
                format!("{name} (JSON batch {doc_no}, event {event_no})")
            }),
        }
    }

    /// Batches fully read so far.
    pub fn batches(&self) -> u64 {
        self.validator.batches()
    }

    /// The next validated item, or `None` at a clean end of input.
    pub fn next_item(&mut self) -> Result<Option<Item>> {
        match &mut self.src {
            Src::Lines(lines) => {
                if !lines.next_line(&mut self.buf)? {
                    // Name the line where the missing record should have been.
                    let at = lines.line_number() + 1;
                    return self
                        .validator
                        .finish()
                        .map(|_| None)
                        .map_err(|e| e.in_file(lines.name()).at_line(at));
                }
                let item = parse_record(&self.buf)
                    .and_then(batch_item)
                    .and_then(|item| {
                        match &item {
                            Item::Header(h) => self.validator.header(h)?,
                            Item::Event(e) => self.validator.event(e)?,
                            Item::Commit(c) => self.validator.commit(c)?,
                        }
                        Ok(item)
                    })
                    .map_err(|e| lines.error(e))?;
                Ok(Some(item))
            }
            Src::Docs {
                name,
                docs,
                current,
                doc_no,
                event_no,
            } => {
                let loc = |d: u64, ev: u64| {
                    if ev == 0 {
                        format!("{name} (JSON batch {d})")
                    } else {
                        format!("{name} (JSON batch {d}, event {ev})")
                    }
                };
                if let Some((commit, events)) = current {
                    if let Some(e) = events.next() {
                        *event_no += 1;
                        self.validator
                            .event(&e)
                            .map_err(|err| err.in_file(&loc(*doc_no, *event_no)))?;
                        return Ok(Some(Item::Event(e)));
                    }
                    let c = commit.clone();
                    *current = None;
                    self.validator
                        .commit(&c)
                        .map_err(|err| err.in_file(&loc(*doc_no, 0)))?;
                    return Ok(Some(Item::Commit(c)));
                }
                let Some(doc) = docs.next() else {
                    return self
                        .validator
                        .finish()
                        .map(|_| None)
                        .map_err(|e| e.in_file(name));
                };
                *doc_no += 1;
                *event_no = 0;
                let b = doc.into_batch().map_err(|e| e.in_file(&loc(*doc_no, 0)))?;
                let h = b.header();
                self.validator
                    .header(&h)
                    .map_err(|e| e.in_file(&loc(*doc_no, 0)))?;
                let commit = b.commit();
                *current = Some((commit, b.events.into_iter()));
                Ok(Some(Item::Header(h)))
            }
        }
    }
}

/// Read a whole JSON document input, refusing more than the line cap.
pub fn read_document<R: std::io::Read>(inner: R, name: &str, limits: Limits) -> Result<Vec<u8>> {
    let cap = match limits.max_input_bytes {
        Some(t) => t.min(limits.max_line_bytes),
        None => limits.max_line_bytes,
    };
    let mut text = Vec::new();
    inner
        .take(cap + 1)
        .read_to_end(&mut text)
        .map_err(|e| Error::io("cannot read input", e).in_file(name))?;
    if text.len() as u64 > cap {
        return Err(Error::limit(format!(
            "JSON document is longer than {cap} bytes (a JSON document counts as one line: raise --max-line-bytes, or use JSONL)"
        ))
        .in_file(name));
    }
    if let Err(e) = std::str::from_utf8(&text) {
        return Err(Error::data(format!(
            "input is not valid UTF-8 (invalid byte at offset {})",
            e.valid_up_to()
        ))
        .in_file(name));
    }
    Ok(text)
}

/// The strict single-batch decoder of the seeds: accepts text in chunks,
/// enforces the line and total caps in UTF-8 bytes, and becomes unusable after
/// a failure or after `finish`.
pub struct BatchDecoder {
    limits: Limits,
    partial: Vec<u8>,
    total: u64,
    line: u64,
    validator: Validator,
    header: Option<Header>,
    events: Vec<Event>,
    commit: Option<Commit>,
    state: DecoderState,
}

#[derive(PartialEq)]
enum DecoderState {
    Open,
    Failed,
    Finished,
}

impl BatchDecoder {
    pub fn new(limits: Limits) -> Result<Self> {
        if limits.max_line_bytes == 0 {
            return Err(Error::usage("the line limit must be positive"));
        }
        if let Some(t) = limits.max_input_bytes {
            if limits.max_line_bytes > t {
                return Err(Error::usage(
                    "the line limit must not exceed the total limit",
                ));
            }
        }
        Ok(BatchDecoder {
            limits,
            partial: Vec::new(),
            total: 0,
            line: 0,
            validator: Validator::single_batch(),
            header: None,
            events: Vec::new(),
            commit: None,
            state: DecoderState::Open,
        })
    }

    fn usable(&self) -> Result<()> {
        match self.state {
            DecoderState::Open => Ok(()),
            DecoderState::Failed => Err(Error::state(
                "the decoder failed earlier and cannot be used again",
            )),
            DecoderState::Finished => Err(Error::state(
                "the decoder has finished and cannot be used again",
            )),
        }
    }

    /// Feed the next chunk of text.
    pub fn push(&mut self, chunk: &str) -> Result<()> {
        self.usable()?;
        let r = self.push_inner(chunk.as_bytes());
        if r.is_err() {
            self.state = DecoderState::Failed;
        }
        r
    }

    fn push_inner(&mut self, mut bytes: &[u8]) -> Result<()> {
        self.total += bytes.len() as u64;
        if let Some(t) = self.limits.max_input_bytes {
            if self.total > t {
                return Err(Error::limit(format!(
                    "input is longer than the input limit of {t} bytes"
                ))
                .at_line(self.line + 1));
            }
        }
        while let Some(i) = bytes.iter().position(|&b| b == b'\n') {
            self.partial.extend_from_slice(&bytes[..i]);
            bytes = &bytes[i + 1..];
            self.check_cap()?;
            let line = std::mem::take(&mut self.partial);
            self.line_done(&line)?;
        }
        self.partial.extend_from_slice(bytes);
        self.check_cap()
    }

    fn check_cap(&self) -> Result<()> {
        if self.partial.len() as u64 > self.limits.max_line_bytes {
            return Err(Error::limit(format!(
                "line is longer than the line limit of {} bytes",
                self.limits.max_line_bytes
            ))
            .at_line(self.line + 1));
        }
        Ok(())
    }

    fn line_done(&mut self, line: &[u8]) -> Result<()> {
        self.line += 1;
        let at = self.line;
        let item = parse_record(line)
            .and_then(batch_item)
            .map_err(|e| e.at_line(at))?;
        match item {
            Item::Header(h) => {
                self.validator.header(&h).map_err(|e| e.at_line(at))?;
                self.header = Some(h);
            }
            Item::Event(e) => {
                self.validator.event(&e).map_err(|err| err.at_line(at))?;
                self.events.push(e);
            }
            Item::Commit(c) => {
                self.validator.commit(&c).map_err(|e| e.at_line(at))?;
                self.commit = Some(c);
            }
        }
        Ok(())
    }

    /// End of input: the batch, if complete and valid.
    pub fn finish(&mut self) -> Result<Batch> {
        self.usable()?;
        let r = self.finish_inner();
        self.state = if r.is_ok() {
            DecoderState::Finished
        } else {
            DecoderState::Failed
        };
        r
    }

    fn finish_inner(&mut self) -> Result<Batch> {
        if !self.partial.is_empty() {
            let line = std::mem::take(&mut self.partial);
            self.line_done(&line)?;
        }
        self.validator.finish()?;
        let h = self.header.take().expect("validated");
        let c = self.commit.take().expect("validated");
        Ok(Batch {
            start: h.start,
            end: c.end,
            high_water: h.high_water,
            schemas: h.schemas,
            compacted: h.compacted,
            events: std::mem::take(&mut self.events),
        })
    }
}
