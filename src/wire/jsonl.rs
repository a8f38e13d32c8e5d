//! JSON-lines framing and input limits.
//!
//! One record a line, `\n`-terminated (a final line may lack it; a `\r` before
//! the `\n` is JSON whitespace and accepted). A blank line is an error, as is a
//! line that is not valid UTF-8: it is reported as such, not as bad JSON.
//! Limits count UTF-8 bytes: a line cap (default 64 MiB, not counting the
//! terminator) and an optional cap on all bytes read. A line over the cap is
//! refused as soon as the cap is passed, so memory never holds more than the
//! cap, whatever the input.

use super::model::{Count, Cursor, Event, LogicalMessage, Rename, Row, Schema, Seq};
use super::strict::{one_of, present, Obj};
use crate::error::{Error, Result};
use serde::Deserialize;
use std::io::BufRead;

/// Default line cap: every line the seeds' defaults allow still fits.
pub const DEFAULT_MAX_LINE_BYTES: u64 = 64 * 1024 * 1024;

/// Caps on what a decoder reads, in UTF-8 bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    pub max_line_bytes: u64,
    pub max_input_bytes: Option<u64>,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_line_bytes: DEFAULT_MAX_LINE_BYTES,
            max_input_bytes: None,
        }
    }
}

impl Limits {
    /// Build limits from the options a user gave. An explicit line cap must be
    /// positive and no greater than the total cap; with only a total cap, the
    /// implicit line cap shrinks to it.
    pub fn new(max_line_bytes: Option<u64>, max_input_bytes: Option<u64>) -> Result<Limits> {
        if max_input_bytes == Some(0) {
            return Err(Error::usage("--max-input-bytes must be positive"));
        }
        let line = match max_line_bytes {
            Some(0) => return Err(Error::usage("--max-line-bytes must be positive")),
            Some(n) => {
                if let Some(t) = max_input_bytes {
                    if n > t {
                        return Err(Error::usage(format!(
                            "--max-line-bytes {n} is greater than --max-input-bytes {t}"
                        )));
                    }
                }
                n
            }
            None => {
                max_input_bytes.map_or(DEFAULT_MAX_LINE_BYTES, |t| t.min(DEFAULT_MAX_LINE_BYTES))
            }
        };
        Ok(Limits {
            max_line_bytes: line,
            max_input_bytes,
        })
    }
}

/// Reads `\n`-terminated lines under [`Limits`], counting line numbers.
pub struct LineReader<R> {
    inner: R,
    name: String,
    line: u64,
    total: u64,
    limits: Limits,
    at_eof: bool,
}

impl<R: BufRead> LineReader<R> {
    pub fn new(inner: R, name: impl Into<String>, limits: Limits) -> Self {
        LineReader {
            inner,
            name: name.into(),
            line: 0,
            total: 0,
            limits,
            at_eof: false,
        }
    }

    /// The input's name in messages (a path, or `<stdin>`).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The number of the line last returned (1-based).
    pub fn line_number(&self) -> u64 {
        self.line
    }

    /// An error located at the current line of this input.
    pub fn error(&self, e: Error) -> Error {
        e.in_file(&self.name).at_line(self.line)
    }

    /// Read the next line into `buf` (without its `\n`). `Ok(false)` at the end.
    pub fn next_line(&mut self, buf: &mut Vec<u8>) -> Result<bool> {
        buf.clear();
        self.append_line(buf)
    }

    /// Append the next line to `buf` (without its `\n`); `buf` keeps what
    /// it held. `Ok(false)` at the end.
    pub fn append_line(&mut self, buf: &mut Vec<u8>) -> Result<bool> {
        let start = buf.len();
        if self.at_eof {
            return Ok(false);
        }
        let cap = self.limits.max_line_bytes;
        let mut terminated = false;
        loop {
            let chunk = match self.inner.fill_buf() {
                Ok(c) => c,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    return Err(Error::io("cannot read input", e)
                        .in_file(&self.name)
                        .at_line(self.line + 1))
                }
            };
            if chunk.is_empty() {
                self.at_eof = true;
                break;
            }
            let (take, found) = match memchr(chunk) {
                Some(i) => (i + 1, true),
                None => (chunk.len(), false),
            };
            let content = if found { take - 1 } else { take };
            if (buf.len() - start + content) as u64 > cap {
                self.line += 1;
                return Err(Error::limit(format!(
                    "line is longer than the line limit of {cap} bytes (--max-line-bytes)"
                ))
                .in_file(&self.name)
                .at_line(self.line));
            }
            buf.extend_from_slice(&chunk[..content]);
            self.inner.consume(take);
            self.total += take as u64;
            if let Some(max) = self.limits.max_input_bytes {
                if self.total > max {
                    return Err(Error::limit(format!(
                        "input is longer than the input limit of {max} bytes (--max-input-bytes)"
                    ))
                    .in_file(&self.name)
                    .at_line(self.line + 1));
                }
            }
            if found {
                terminated = true;
                break;
            }
        }
        if !terminated && buf.len() == start {
            return Ok(false);
        }
        self.line += 1;
        Ok(true)
    }
}

fn memchr(b: &[u8]) -> Option<usize> {
    memchr::memchr(b'\n', b)
}

/// What kind of record a line holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecordKind {
    Header,
    Event,
    Commit,
    Row,
    Schema,
    Message,
}

impl<'de> Deserialize<'de> for RecordKind {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        one_of(
            d,
            "record kind",
            &["header", "event", "commit", "row", "schema", "message"],
            &[
                RecordKind::Header,
                RecordKind::Event,
                RecordKind::Commit,
                RecordKind::Row,
                RecordKind::Schema,
                RecordKind::Message,
            ],
        )
    }
}

/// Every member any record may have; which ones a kind allows is checked after.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawRecord {
    pub kind: RecordKind,
    #[serde(default, deserialize_with = "present")]
    pub format: Option<String>,
    #[serde(default, deserialize_with = "present")]
    pub start: Option<Cursor>,
    #[serde(default, deserialize_with = "present")]
    pub high_water: Option<Seq>,
    #[serde(default, deserialize_with = "present")]
    pub schemas: Option<Vec<Schema>>,
    #[serde(default, deserialize_with = "present")]
    pub compacted: Option<bool>,
    #[serde(default, deserialize_with = "present")]
    pub event: Option<Event>,
    #[serde(default, deserialize_with = "present")]
    pub end: Option<Cursor>,
    #[serde(default, deserialize_with = "present")]
    pub count: Option<Count>,
    #[serde(default, deserialize_with = "present")]
    pub cursor: Option<Cursor>,
    #[serde(default, deserialize_with = "present")]
    pub table: Option<String>,
    #[serde(default, deserialize_with = "present")]
    pub row: Option<Row>,
    #[serde(default, deserialize_with = "present")]
    pub schema: Option<Schema>,
    #[serde(default, deserialize_with = "present")]
    pub renamed: Option<Vec<Rename>>,
    #[serde(default, deserialize_with = "present")]
    pub message: Option<LogicalMessage>,
}

impl RawRecord {
    /// The members present, for checking a kind's allowed set.
    pub fn present(&self) -> Vec<&'static str> {
        let mut v = Vec::new();
        macro_rules! p {
            ($f:ident) => {
                if self.$f.is_some() {
                    v.push(stringify!($f));
                }
            };
        }
        p!(format);
        p!(start);
        p!(high_water);
        p!(schemas);
        p!(compacted);
        p!(event);
        p!(end);
        p!(count);
        p!(cursor);
        p!(table);
        p!(row);
        p!(schema);
        p!(renamed);
        p!(message);
        v
    }

    /// Fail unless the members present are exactly `required` plus some of `optional`.
    pub fn check_members(&self, what: &str, required: &[&str], optional: &[&str]) -> Result<()> {
        let present = self.present();
        for r in required {
            if !present.contains(r) {
                return Err(Error::data(format!("{what} record lacks member \"{r}\"")));
            }
        }
        for p in &present {
            if !required.contains(p) && !optional.contains(p) {
                return Err(Error::data(format!(
                    "{what} record has unexpected member \"{p}\""
                )));
            }
        }
        Ok(())
    }
}

/// Parse one line as a record: UTF-8 first (its own message), then JSON.
pub fn parse_record(line: &[u8]) -> Result<RawRecord> {
    if line.iter().all(|b| b.is_ascii_whitespace()) {
        return Err(Error::data("blank line (every line must hold one record)"));
    }
    let text = std::str::from_utf8(line).map_err(|e| {
        Error::data(format!(
            "line is not valid UTF-8 (invalid byte at offset {})",
            e.valid_up_to()
        ))
    })?;
    serde_json::from_str::<Obj<RawRecord>>(text)
        .map(|Obj(r)| r)
        .map_err(json_error)
}

/// A serde_json error as a data error whose message keeps the column.
pub fn json_error(e: serde_json::Error) -> Error {
    let msg = e.to_string();
    let rule = match e.classify() {
        serde_json::error::Category::Eof => format!("truncated or incomplete JSON: {msg}"),
        serde_json::error::Category::Syntax => format!("invalid JSON: {msg}"),
        serde_json::error::Category::Data => msg,
        serde_json::error::Category::Io => format!("cannot read input: {msg}"),
    };
    Error::data(rule)
}

/// Read a whole JSON document input, refusing more than the line cap.
pub fn read_document<R: std::io::Read>(inner: R, name: &str, limits: Limits) -> Result<Vec<u8>> {
    use std::io::Read;
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
