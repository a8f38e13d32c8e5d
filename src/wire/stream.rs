//! Reading batch streams: JSONL or JSON, yielding only validated items.

use super::batch::*;

use super::jsonl::{json_error, parse_record, Limits, LineReader};
use super::model::Event;
use super::strict::Obj;
use crate::error::{Error, Result};
use std::io::BufRead;

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
    /// Where that line is: `buf`, or when reading ahead this range of the
    /// chunk's data.
    line_at: Option<(usize, usize)>,
    /// The byte range of the table name of the last lean event in its line.
    table: (usize, usize),
    /// Commits handed out, when reading ahead.
    batches: u64,
}

/// Which event lines the lean read-ahead thread leaves for the consumer to
/// scan.
#[derive(Clone, Copy)]
enum Share {
    /// Those of a chunk finished while the consumer has nothing waiting.
    WhenBusy,
    /// None (for tests: every line scanned on the reading thread).
    #[cfg(test)]
    Never,
    /// All (for tests: every line scanned on the consumer's thread).
    #[cfg(test)]
    Always,
}

/// What the read-ahead thread hands over.
enum AheadItem {
    /// An item read and checked there ([`BatchStreamReader::read_ahead`]).
    Item(Item),
    /// A line ([`BatchStreamReader::read_ahead_lean`]): its range in the
    /// chunk's data and, when that thread had the time, what it is (checked
    /// against the stream's rules by the consumer, in order).
    Line {
        at: (usize, usize),
        scanned: Option<Result<Classified>>,
    },
    /// The end of the input, after this many lines.
    End(u64),
}

/// A line read as a record, before the stream's rules are checked: the
/// item, and the line a writer may write through.
type Classified = (Lean, Through);

/// The canonical line of an event, which a writer copies instead of
/// encoding the event again.
enum Through {
    /// None: the strict decoder read the line.
    No,
    /// The line itself.
    Line,
    /// The line in another spelling, rewritten (`canon.rs`).
    Rewritten(Vec<u8>),
}

/// The fixed start of a canonical event line: such lines are the bulk of a
/// stream, and may be scanned on whichever thread has the time.
const EVENT_LINE_START: &[u8] = b"{\"kind\":\"event\",\"event\":{\"sequence\":";

/// Whether a line starts as an event record does in any spelling that
/// gives the kind first (`{"kind": "event", …`): such a line is never a
/// commit, so it too may wait for whichever thread has the time.
fn starts_as_event(line: &[u8]) -> bool {
    if line.starts_with(EVENT_LINE_START) {
        return true;
    }
    let mut rest = line;
    for token in [&b"{"[..], b"\"kind\"", b":", b"\"event\""] {
        rest = rest.trim_ascii_start();
        match rest.strip_prefix(token) {
            Some(r) => rest = r,
            None => return false,
        }
    }
    true
}

/// A canonical event line scanned (checked, not built, when `lean`).
fn fast_event(line: &[u8], lean: bool) -> Option<Lean> {
    if lean {
        if let Some(m) = super::fast::event_meta(line) {
            return Some(Lean::Event(m));
        }
    }
    super::fast::event_line(line).map(|e| Lean::Item(Item::Event(e)))
}

/// Read one line as a record: a canonical event line scanned (checked, not
/// built, when `lean`), an event line in another spelling checked and
/// rewritten into the canonical one (`canon.rs`), any other line (or one
/// both decline) decoded by the strict decoder.
fn classify(line: &[u8], lean: bool) -> Result<Classified> {
    if let Some(item) = fast_event(line, lean) {
        return Ok((item, Through::Line));
    }
    let mut canonical = Vec::with_capacity(line.len() + 64);
    if let Some(r) = super::canon::canonical_event(line, &mut canonical) {
        // Checked there: built only when asked (or to read an escaped
        // table name).
        let item = if lean && r.plain_table {
            Some(Lean::Event(r.meta))
        } else {
            super::fast::event_line(&canonical).map(|e| Lean::Item(Item::Event(e)))
        };
        if let Some(item) = item {
            return Ok((item, Through::Rewritten(canonical)));
        }
    }
    let item = parse_record(line).and_then(batch_item)?;
    Ok((Lean::Item(item), Through::No))
}

/// Check a classified line against the stream's rules, in stream order.
fn check(validator: &mut Validator, item: &Lean, line: &[u8]) -> Result<()> {
    match item {
        Lean::Event(m) => {
            // The scan checked the line's UTF-8 and the name has no escapes.
            let table = std::str::from_utf8(&line[m.table.0..m.table.1])
                .map_err(|_| Error::data("line is not valid UTF-8"))?;
            validator.event_parts(m.sequence, table, m.before, m.key_only, m.after)
        }
        Lean::Item(Item::Header(h)) => validator.header(h),
        Lean::Item(Item::Event(e)) => validator.event(e),
        Lean::Item(Item::Schema(c)) => validator.schema_change(c),
        Lean::Item(Item::Message(m)) => validator.message(m),
        Lean::Item(Item::Commit(c)) => validator.commit(c),
    }
}

/// An item as [`BatchStreamReader::next_lean`] gives it.
#[derive(Debug)]
pub enum Lean {
    /// An event on a canonical line, checked, not built: its sequence,
    /// table and images' places in the line.
    Event(super::fast::EventMeta),
    Item(Item),
}

enum Src<R> {
    Lines(LineReader<R>),
    /// Lines read and decoded ahead on a thread of their own; lean when
    /// made by [`BatchStreamReader::read_ahead_lean`].
    Ahead {
        ahead: super::ahead::Ahead<AheadItem>,
        lean: bool,
    },
    Docs {
        name: String,
        docs: std::vec::IntoIter<RawBatchDoc>,
        current: Option<(Commit, std::vec::IntoIter<Event>)>,
        doc_no: u64,
        event_no: u64,
    },
}

impl<R: BufRead> BatchStreamReader<R> {
    fn with_src(src: Src<R>, validator: Validator) -> Self {
        BatchStreamReader {
            src,
            validator,
            buf: Vec::new(),
            canonical: false,
            line_at: None,
            table: (0, 0),
            batches: 0,
        }
    }

    /// A JSONL batch stream.
    pub fn jsonl(inner: R, name: impl Into<String>, limits: Limits) -> Self {
        Self::with_src(
            Src::Lines(LineReader::new(inner, name, limits)),
            Validator::new(),
        )
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
        Ok(Self::with_src(
            Src::Docs {
                name,
                docs: docs.into_iter(),
                current: None,
                doc_no: 0,
                event_no: 0,
            },
            Validator::new(),
        ))
    }

    /// The input's name in messages.
    pub fn name(&self) -> &str {
        match &self.src {
            Src::Lines(l) => l.name(),
            Src::Docs { name, .. } => name,
            Src::Ahead { ahead, .. } => ahead.name(),
        }
    }

    /// Where the reader is, for messages: the input's name and the last line read.
    pub fn locate(&self, e: Error) -> Error {
        match &self.src {
            Src::Lines(l) => l.error(e),
            Src::Ahead { ahead, .. } => ahead.locate(e),
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
            Src::Ahead { lean: false, .. } => self.batches,
            _ => self.validator.batches(),
        }
    }

    /// Read and decode ahead on a thread of its own, so that decoding
    /// overlaps the caller's work (a target's writes). Items, errors and
    /// their places are the same as without; a chunk is handed over at each
    /// commit, so a batch is never held back waiting for the next one's
    /// input. At most five chunks (each at most 1,024 items, or 1 MB of
    /// input and one line more) are in memory at once. JSON input is read
    /// whole anyway and is returned unchanged.
    pub fn read_ahead(self) -> Result<Self>
    where
        R: Send + 'static,
    {
        self.ahead(false, Share::WhenBusy)
    }

    /// [`BatchStreamReader::read_ahead`] for a tool that reads with
    /// [`BatchStreamReader::next_lean`] and writes lines through: the
    /// scanning and checking of lines overlaps the tool's writing, and each
    /// canonical line comes across with its item.
    pub fn read_ahead_lean(self) -> Result<Self>
    where
        R: Send + 'static,
    {
        self.ahead(true, Share::WhenBusy)
    }

    fn ahead(self, lean: bool, share: Share) -> Result<Self>
    where
        R: Send + 'static,
    {
        let name = self.name().to_string();
        if !lean {
            if !matches!(self.src, Src::Lines(_)) {
                return Ok(self);
            }
            // Read and checked there: only built items come across.
            let at = match &self.src {
                Src::Lines(l) => l.line_number(),
                _ => 0,
            };
            let mut inner = self;
            let ahead = super::ahead::Ahead::spawn(name, at, move |_| {
                let item = match inner.next(false)? {
                    None => return Ok(None),
                    Some(Lean::Item(item)) => item,
                    Some(Lean::Event(_)) => unreachable!("only next_lean gives lean events"),
                };
                Ok(Some(super::ahead::Step {
                    line: match &inner.src {
                        Src::Lines(l) => l.line_number(),
                        _ => 0,
                    },
                    bytes: inner.buf.len() + 1,
                    flush: matches!(item, Item::Commit(_)),
                    item: AheadItem::Item(item),
                }))
            })?;
            return Ok(Self::with_src(Src::Ahead { ahead, lean }, Validator::new()));
        }
        // Lean: that thread reads lines and, when this one is busy, scans
        // them; this one checks the rules in order (so it keeps what was
        // read here already, a merge's first header say) and writes.
        let BatchStreamReader { src, validator, .. } = self;
        let mut lines = match src {
            Src::Lines(l) => l,
            other => return Ok(Self::with_src(other, validator)),
        };
        let mut ended = false;
        // Errors before the first item read ahead are at the line read last.
        let at = lines.line_number();
        let ahead = super::ahead::Ahead::spawn_with(
            name,
            at,
            move |data| {
                let start = data.len();
                if !lines.append_line(data)? {
                    if std::mem::replace(&mut ended, true) {
                        return Ok(None);
                    }
                    let n = lines.line_number();
                    return Ok(Some(super::ahead::Step {
                        item: AheadItem::End(n),
                        line: n,
                        bytes: 0,
                        flush: true,
                    }));
                }
                let line = &data[start..];
                // Any other line is read here at once, so that a commit is
                // handed over without waiting for more input.
                let (scanned, flush) = if starts_as_event(line) {
                    (None, false)
                } else {
                    let r = classify(line, true);
                    let commit = matches!(r, Ok((Lean::Item(Item::Commit(_)), _)));
                    (Some(r), commit)
                };
                Ok(Some(super::ahead::Step {
                    item: AheadItem::Line {
                        at: (start, data.len()),
                        scanned,
                    },
                    line: lines.line_number(),
                    bytes: data.len() - start + 1,
                    flush,
                }))
            },
            move |items, data, idle| {
                // An idle consumer scans the chunk itself, so both threads
                // scan while there is input.
                let leave = match share {
                    Share::WhenBusy => idle,
                    #[cfg(test)]
                    Share::Never => false,
                    #[cfg(test)]
                    Share::Always => true,
                };
                if leave {
                    return;
                }
                for (item, _) in items {
                    if let AheadItem::Line {
                        at,
                        scanned: s @ None,
                    } = item
                    {
                        *s = Some(classify(&data[at.0..at.1], true));
                    }
                }
            },
        )?;
        Ok(Self::with_src(Src::Ahead { ahead, lean }, validator))
    }

    /// Hand back an item the caller is done with: when reading ahead it is
    /// dropped on the reading thread, where it was made.
    pub fn recycle(&mut self, item: Item) {
        if let Src::Ahead { ahead, lean: false } = &mut self.src {
            ahead.recycle(AheadItem::Item(item));
        }
    }

    /// The line of the last item, when it was an event whose line is
    /// already canonical (what `write_event_line` would write, without the
    /// newline): a writer can copy it instead of encoding the event again.
    pub fn canonical_line(&self) -> Option<&[u8]> {
        if !self.canonical {
            return None;
        }
        match (&self.src, self.line_at) {
            (Src::Ahead { ahead, .. }, Some((a, b))) => Some(&ahead.data()[a..b]),
            _ => Some(&self.buf[..]),
        }
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
        let line = self.canonical_line().unwrap_or_default();
        line.get(self.table.0..self.table.1)
            .and_then(|t| std::str::from_utf8(t).ok())
            .unwrap_or_default()
    }

    fn next(&mut self, lean: bool) -> Result<Option<Lean>> {
        self.canonical = false;
        match &mut self.src {
            Src::Ahead { ahead, .. } => match ahead.next()? {
                None => Ok(None),
                Some(AheadItem::Item(item)) => {
                    if matches!(item, Item::Commit(_)) {
                        self.batches += 1;
                    }
                    Ok(Some(Lean::Item(item)))
                }
                Some(AheadItem::End(n)) => {
                    let name = ahead.name();
                    self.validator.finish().map(|_| None).map_err(|e| {
                        quiet_if_never_written(e.in_file(name).at_line(n + 1), name, n)
                    })
                }
                Some(AheadItem::Line { at, scanned }) => {
                    let (mut item, through) = scanned
                        .unwrap_or_else(|| classify(&ahead.data()[at.0..at.1], true))
                        .map_err(|e| ahead.locate(e))?;
                    // A rewritten line is kept here, the others are in the chunk.
                    let canonical = !matches!(through, Through::No);
                    let line_at = match through {
                        Through::Rewritten(l) => {
                            self.buf = l;
                            None
                        }
                        _ => Some(at),
                    };
                    let line = match line_at {
                        Some(at) => &ahead.data()[at.0..at.1],
                        None => &self.buf[..],
                    };
                    check(&mut self.validator, &item, line).map_err(|e| ahead.locate(e))?;
                    if let Lean::Event(m) = &item {
                        self.table = m.table;
                        if !lean {
                            // Asked for built items: build it.
                            let e = super::fast::event_line(line).ok_or_else(|| {
                                ahead.locate(Error::data("a canonical event line did not build"))
                            })?;
                            item = Lean::Item(Item::Event(e));
                        }
                    }
                    self.canonical = canonical;
                    self.line_at = line_at;
                    Ok(Some(item))
                }
            },
            Src::Lines(lines) => {
                if !lines.next_line(&mut self.buf)? {
                    // Name the line where the missing record should have been.
                    let read = lines.line_number();
                    let name = lines.name();
                    return self.validator.finish().map(|_| None).map_err(|e| {
                        quiet_if_never_written(e.in_file(name).at_line(read + 1), name, read)
                    });
                }
                let (item, through) = classify(&self.buf, lean).map_err(|e| lines.error(e))?;
                let canonical = match through {
                    Through::No => false,
                    Through::Line => true,
                    Through::Rewritten(l) => {
                        self.buf = l;
                        true
                    }
                };
                check(&mut self.validator, &item, &self.buf).map_err(|e| lines.error(e))?;
                if let Lean::Event(m) = &item {
                    self.table = m.table;
                }
                self.canonical = canonical;
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

#[cfg(test)]
mod tests;

/// The end of an input that held no batch: said, unless it is a pipe that
/// closed without a line (`read` lines), whose writer stopped or failed
/// before a first batch and said so itself; a second message would only be
/// noise (the exit status is still a failure).
fn quiet_if_never_written(e: Error, name: &str, read: u64) -> Error {
    if read == 0 && name == "<stdin>" && stdin_is_a_pipe() {
        e.silent()
    } else {
        e
    }
}

/// Whether standard input is a pipe (or FIFO).
fn stdin_is_a_pipe() -> bool {
    use std::os::unix::fs::FileTypeExt;
    std::fs::metadata("/dev/stdin").is_ok_and(|m| m.file_type().is_fifo())
}
