//! Reading batch streams: JSONL or JSON, yielding only validated items.

use super::batch::*;

use super::jsonl::{json_error, parse_record, Limits, LineReader};
use super::model::Event;
use super::strict::Obj;
use crate::error::{Error, Result};
use std::io::{BufRead, Read};

/// Reads a batch stream, JSONL or JSON, yielding only validated items.
///
/// An [`Item::Commit`] is returned only once its whole batch has passed every
/// rule, so a consumer that acts at commits never acts on a bad batch. JSON
/// documents are read whole and count as one line for the line cap.
pub struct BatchStreamReader<R> {
    src: Src<R>,
    validator: Validator,
    buf: Vec<u8>,
    /// Whether the last item was an event read from a canonical line.
    canonical: bool,
    /// The byte range of the table name of the last lean event in `buf`.
    table: (usize, usize),
    /// Commits handed out, when reading ahead.
    batches: u64,
}

/// An item as [`BatchStreamReader::next_lean`] gives it.
#[derive(Debug)]
pub enum Lean {
    /// An event on a canonical line, checked, not built: its sequence.
    Event(crate::wire::Sequence),
    Item(Item),
}

enum Src<R> {
    Lines(LineReader<R>),
    /// Lines read and decoded ahead on a thread of their own.
    Ahead(super::ahead::Ahead<Item>),
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
            canonical: false,
            table: (0, 0),
            batches: 0,
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
            canonical: false,
            table: (0, 0),
            batches: 0,
        })
    }

    /// The input's name in messages.
    pub fn name(&self) -> &str {
        match &self.src {
            Src::Lines(l) => l.name(),
            Src::Docs { name, .. } => name,
            Src::Ahead(a) => a.name(),
        }
    }

    /// Where the reader is, for messages: the input's name and the last line read.
    pub fn locate(&self, e: Error) -> Error {
        match &self.src {
            Src::Lines(l) => l.error(e),
            Src::Ahead(a) => a.locate(e),
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
        match &self.src {
            Src::Ahead(_) => self.batches,
            _ => self.validator.batches(),
        }
    }

    /// Read and decode ahead on a thread of its own, so that decoding
    /// overlaps the caller's work (a target's writes). Items, errors and
    /// their places are the same as without; a chunk is handed over at each
    /// commit, so a batch is never held back waiting for the next one's
    /// input. At most four chunks (each at most 1,024 items or 1 MB of
    /// input) are in memory at once. JSON input is read whole anyway and is
    /// returned unchanged.
    pub fn read_ahead(self) -> Result<Self>
    where
        R: Send + 'static,
    {
        if !matches!(self.src, Src::Lines(_)) {
            return Ok(self);
        }
        let name = self.name().to_string();
        let mut inner = self;
        let ahead = super::ahead::Ahead::spawn(name, move || {
            Ok(inner.next_item()?.map(|item| super::ahead::Step {
                line: match &inner.src {
                    Src::Lines(l) => l.line_number(),
                    _ => 0,
                },
                bytes: inner.buf.len() + 1,
                flush: matches!(item, Item::Commit(_)),
                item,
            }))
        })?;
        Ok(BatchStreamReader {
            src: Src::Ahead(ahead),
            validator: Validator::new(),
            buf: Vec::new(),
            canonical: false,
            table: (0, 0),
            batches: 0,
        })
    }

    /// The line of the last item, when it was an event whose line is
    /// already canonical (what `write_event_line` would write, without the
    /// newline): a writer can copy it instead of encoding the event again.
    pub fn canonical_line(&self) -> Option<&[u8]> {
        self.canonical.then_some(&self.buf[..])
    }

    /// Append the last event's line to `out`, newline included: its own
    /// bytes when they are canonical, else `built` encoded. A lean event
    /// (not built) always has a canonical line.
    pub fn push_event_line(&self, out: &mut Vec<u8>, built: Option<&crate::wire::Event>) {
        match (self.canonical_line(), built) {
            (Some(l), _) => {
                out.extend_from_slice(l);
                out.push(b'\n');
            }
            (None, Some(e)) => super::batch::write_event_line(out, e),
            (None, None) => unreachable!("a lean event has its canonical line"),
        }
    }

    /// The next validated item, or `None` at a clean end of input.
    pub fn next_item(&mut self) -> Result<Option<Item>> {
        Ok(self.next(false)?.map(|lean| match lean {
            Lean::Item(i) => i,
            Lean::Event(_) => unreachable!("events are built unless asked otherwise"),
        }))
    }

    /// Like [`BatchStreamReader::next_item`], for a tool that writes events
    /// through unchanged: an event on a canonical line comes back as its
    /// sequence only, every rule checked but its values not built; its line
    /// is [`BatchStreamReader::canonical_line`], its table
    /// [`BatchStreamReader::lean_table`]. Other events come back built.
    pub fn next_lean(&mut self) -> Result<Option<Lean>> {
        self.next(true)
    }

    /// The table of the event [`BatchStreamReader::next_lean`] returned last
    /// as [`Lean::Event`].
    pub fn lean_table(&self) -> &str {
        std::str::from_utf8(&self.buf[self.table.0..self.table.1]).unwrap_or_default()
    }

    fn next(&mut self, lean: bool) -> Result<Option<Lean>> {
        self.canonical = false;
        match &mut self.src {
            Src::Ahead(a) => {
                let item = a.next()?;
                if matches!(item, Some(Item::Commit(_))) {
                    self.batches += 1;
                }
                Ok(item.map(Lean::Item))
            }
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
                if lean {
                    if let Some(m) = super::fast::event_meta(&self.buf) {
                        let table = std::str::from_utf8(&self.buf[m.table.0..m.table.1])
                            .map_err(|_| lines.error(Error::data("line is not valid UTF-8")))?;
                        self.validator
                            .event_parts(m.sequence, table, m.before, m.after)
                            .map_err(|err| lines.error(err))?;
                        self.canonical = true;
                        self.table = m.table;
                        return Ok(Some(Lean::Event(m.sequence)));
                    }
                }
                if let Some(e) = super::fast::event_line(&self.buf) {
                    self.validator.event(&e).map_err(|err| lines.error(err))?;
                    self.canonical = true;
                    return Ok(Some(Lean::Item(Item::Event(e))));
                }
                let item = parse_record(&self.buf)
                    .and_then(batch_item)
                    .and_then(|item| {
                        match &item {
                            Item::Header(h) => self.validator.header(h)?,
                            Item::Event(e) => self.validator.event(e)?,
                            Item::Schema(c) => self.validator.schema_change(c)?,
                            Item::Commit(c) => self.validator.commit(c)?,
                        }
                        Ok(item)
                    })
                    .map_err(|e| lines.error(e))?;
                Ok(Some(Lean::Item(item)))
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
                        return Ok(Some(Lean::Item(Item::Event(e))));
                    }
                    let c = commit.clone();
                    *current = None;
                    self.validator
                        .commit(&c)
                        .map_err(|err| err.in_file(&loc(*doc_no, 0)))?;
                    return Ok(Some(Lean::Item(Item::Commit(c))));
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
                Ok(Some(Lean::Item(Item::Header(h))))
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
