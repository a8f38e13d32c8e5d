//! Stream operations over batch streams: split, merge, compact.
//!
//! Each reads validated items from a [`BatchStreamReader`](crate::wire::BatchStreamReader),
//! holds a batch's output in a [`Spool`](spool::Spool) until the batch's commit has
//! been checked, and only then hands complete batches to a [`BatchSink`].

pub mod compact;
pub mod merge;
pub mod objects;
pub mod split;
pub mod spool;

use crate::error::{Error, Result};
use crate::wire::batch::{
    write_commit_line, write_header_line, write_json_open, EVENT_LINE_PREFIX, EVENT_LINE_SUFFIX,
    MESSAGE_LINE_PREFIX, SCHEMA_LINE_PREFIX,
};
use crate::wire::{Commit, Header};
use std::io::{BufRead, Write};

/// How batches are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OutputFormat {
    #[default]
    Jsonl,
    Json,
    /// The jq-friendly view (see [`objects`]).
    Objects,
}

/// Where complete, valid batches go.
pub trait BatchSink {
    /// One batch: its header, its event records (JSONL event lines), its commit.
    fn batch(&mut self, header: &Header, events: &mut dyn BufRead, commit: &Commit) -> Result<()>;

    /// Whether it can write `schema` and `message` records (JSONL can; a
    /// `mooncdc.batch.v1` document has no place for them).
    fn takes_schema_records(&self) -> bool {
        true
    }
}

/// The error for a schema record bound for JSON output.
pub fn no_json_for_schema_records() -> Error {
    Error::data(
        "this batch changes a table's schema (a schema record), which the JSON form mooncdc.batch.v1 cannot hold; write JSONL (--output-format jsonl)",
    )
}

/// The error for a message record bound for JSON output.
pub fn no_json_for_message_records() -> Error {
    Error::data(
        "this batch holds a logical message (a message record), which the JSON form mooncdc.batch.v1 cannot hold; write JSONL (--output-format jsonl)",
    )
}

/// Writes batches to a stream (standard output or a file) in one format.
pub struct WriteSink<W: Write> {
    pub out: W,
    pub format: OutputFormat,
}

impl<W: Write> BatchSink for WriteSink<W> {
    fn batch(&mut self, header: &Header, events: &mut dyn BufRead, commit: &Commit) -> Result<()> {
        // Flushed at each batch: a follower's batches reach the next
        // process as they come (`capture --follow | split … | jq`).
        write_batch(&mut self.out, self.format, header, events, commit)
            .and_then(|()| self.out.flush())
            .map_err(|e| Error::io("cannot write output", e))
    }

    fn takes_schema_records(&self) -> bool {
        self.format != OutputFormat::Json
    }
}

/// Write one batch whose events are given as JSONL event lines.
pub fn write_batch(
    out: &mut dyn Write,
    format: OutputFormat,
    header: &Header,
    events: &mut dyn BufRead,
    commit: &Commit,
) -> std::io::Result<()> {
    let mut buf = Vec::with_capacity(256);
    match format {
        OutputFormat::Jsonl => {
            write_header_line(&mut buf, header);
            out.write_all(&buf)?;
            std::io::copy(events, out)?;
            buf.clear();
            write_commit_line(&mut buf, commit);
            out.write_all(&buf)?;
        }
        OutputFormat::Objects => objects::write(out, header, events)?,
        OutputFormat::Json => {
            write_json_open(&mut buf, header, &commit.end);
            out.write_all(&buf)?;
            let mut line = Vec::new();
            let mut first = true;
            loop {
                line.clear();
                if events.read_until(b'\n', &mut line)? == 0 {
                    break;
                }
                if line.starts_with(SCHEMA_LINE_PREFIX) {
                    return Err(std::io::Error::other(
                        no_json_for_schema_records().message(),
                    ));
                }
                if line.starts_with(MESSAGE_LINE_PREFIX) {
                    return Err(std::io::Error::other(
                        no_json_for_message_records().message(),
                    ));
                }
                let body = line
                    .strip_prefix(EVENT_LINE_PREFIX)
                    .and_then(|l| l.strip_suffix(EVENT_LINE_SUFFIX))
                    .ok_or_else(|| std::io::Error::other("spooled record is not an event line"))?;
                if !first {
                    out.write_all(b",")?;
                }
                first = false;
                out.write_all(body)?;
            }
            out.write_all(b"]}\n")?;
        }
    }
    Ok(())
}
