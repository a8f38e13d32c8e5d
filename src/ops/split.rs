//! Split: cut each batch into batches of at most N events and/or B bytes.
//!
//! The pieces cover exactly the input batch's interval, contiguously: the
//! first starts at the batch's start, each later one at the previous end, a
//! cut piece ends at its last event and the final piece at the batch's end.
//! Every piece keeps the batch's high water; its header carries the schemas
//! in force at its start (a `schema` record goes with the event after it, so
//! a piece that starts after one carries the changed schema). B counts the
//! bytes of a piece written as JSONL (header, records and commit lines); one event that
//! alone exceeds B becomes a piece of its own. A piece's end is not known
//! while its events are gathered (the last piece ends at the batch's end), so
//! its commit line is sized with the high water, which no end exceeds. An empty batch gives one empty
//! piece.

use super::spool::{Spool, DEFAULT_SPOOL_MEMORY};
use super::BatchSink;
use crate::error::{Error, Result};
use crate::wire::batch::{
    write_commit_line, write_header_line, write_message_line, write_schema_line, Lean,
};
use crate::wire::{
    BatchStreamReader, Commit, Cursor, Header, Item, Schema, SchemaChange, Sequence,
};
use std::io::{BufRead, Read};

#[derive(Debug, Clone, Copy, Default)]
pub struct SplitOptions {
    pub max_events: Option<u64>,
    pub max_bytes: Option<u64>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SplitStats {
    pub batches_in: u64,
    pub batches_out: u64,
    pub events: u64,
}

impl SplitStats {
    /// Add another input's figures.
    pub fn add(&mut self, o: SplitStats) {
        self.batches_in += o.batches_in;
        self.batches_out += o.batches_out;
        self.events += o.events;
    }
}

/// A piece decided while reading: its last event, event count and record
/// bytes, and the schemas in force at its start (its header's).
struct Cut {
    end: Sequence,
    count: u64,
    bytes: u64,
    schemas: Option<Vec<Schema>>,
}

/// Split every batch of `input` and hand the pieces to `sink`.
pub fn split<R: BufRead>(
    input: &mut BatchStreamReader<R>,
    opts: SplitOptions,
    sink: &mut dyn BatchSink,
) -> Result<SplitStats> {
    if opts.max_events == Some(0) {
        return Err(Error::usage("--max-events must be positive"));
    }
    if opts.max_bytes == Some(0) {
        return Err(Error::usage("--max-bytes must be positive"));
    }
    let mut stats = SplitStats::default();
    let mut spool = Spool::new(DEFAULT_SPOOL_MEMORY);
    let mut header: Option<Header> = None;
    let mut cuts: Vec<Cut> = Vec::new();
    // The open piece: its start, events, event bytes, and fixed header size.
    let mut count = 0u64;
    let mut bytes = 0u64;
    let mut last: Sequence = 0;
    let mut header_len = 0u64;
    let mut commit_base = 0u64;
    let mut line = Vec::with_capacity(1024);
    let mut scratch = Vec::with_capacity(256);
    // Schemas in force at the open piece's start, and now.
    let mut piece_schemas: Option<Vec<Schema>> = None;
    let mut current: Option<Vec<Schema>> = None;
    // Schema records seen since the last event: they go into the piece of
    // the event after them, so a cut never separates them from it.
    let mut pending: Vec<SchemaChange> = Vec::new();
    let mut pending_lines: Vec<u8> = Vec::new();

    while let Some(lean) = input.next_lean()? {
        // An event on a canonical line is written through, never built.
        let (item, event) = match lean {
            Lean::Event(m) => (None, Some((m.sequence, None))),
            Lean::Item(Item::Event(e)) => (None, Some((e.sequence, Some(e)))),
            Lean::Item(i) => (Some(i), None),
        };
        if let Some((sequence, built)) = event {
            let h = header.as_ref().expect("validated stream");
            line.clear();
            line.extend_from_slice(&pending_lines);
            input.push_event_line(&mut line, built.as_ref());
            let len = line.len() as u64;
            if count > 0 {
                let over_events = opts.max_events.is_some_and(|n| count + 1 > n);
                let over_bytes = opts.max_bytes.is_some_and(|b| {
                    header_len
                        + bytes
                        + len
                        + commit_base
                        + itoa::Buffer::new().format(count + 1).len() as u64
                        > b
                });
                if over_events || over_bytes {
                    cuts.push(Cut {
                        end: last,
                        count,
                        bytes,
                        schemas: std::mem::replace(&mut piece_schemas, current.clone()),
                    });
                    count = 0;
                    bytes = 0;
                    header_len = header_size(h, last, &piece_schemas, &mut scratch);
                }
            }
            for c in pending.drain(..) {
                let list = current
                    .as_mut()
                    .expect("validated: schema records need schemas");
                match list.iter_mut().find(|s| s.table == c.schema.table) {
                    Some(s) => *s = c.schema,
                    None => list.push(c.schema),
                }
            }
            pending_lines.clear();
            spool.push(&line)?;
            count += 1;
            bytes += len;
            last = sequence;
            stats.events += 1;
            continue;
        }
        match item.expect("an item when not an event") {
            Item::Header(h) => {
                count = 0;
                bytes = 0;
                cuts.clear();
                header_len = header_size(&h, h.start.sequence(), &h.schemas, &mut scratch);
                // A piece's commit line differs only in its count's digits.
                commit_base = commit_size(&h.start.source, h.high_water, 0, &mut scratch) - 1;
                piece_schemas = h.schemas.clone();
                current = h.schemas.clone();
                header = Some(h);
            }
            Item::Schema(c) => {
                if !sink.takes_schema_records() {
                    return Err(input.locate(super::no_json_for_schema_records()));
                }
                write_schema_line(&mut pending_lines, &c);
                pending.push(c);
            }
            Item::Message(m) => {
                if !sink.takes_schema_records() {
                    return Err(input.locate(super::no_json_for_message_records()));
                }
                // Like a schema record, it goes into the piece of the event
                // after it (a cut falls only before an event, so that
                // piece's interval holds its sequence), or the last piece.
                write_message_line(&mut pending_lines, &m);
            }
            Item::Event(_) => unreachable!("events are handled above"),
            Item::Commit(c) => {
                // Schema records at the end belong to the batch's end: they
                // go into the last piece.
                if !pending_lines.is_empty() {
                    spool.push(&pending_lines)?;
                    bytes += pending_lines.len() as u64;
                    pending_lines.clear();
                    pending.clear();
                }
                let h = header.take().expect("validated stream");
                stats.batches_in += 1;
                let mut events = spool.drain()?;
                let mut start = h.start.clone();
                for cut in cuts.drain(..) {
                    let end = Cursor::new(h.start.source.clone(), cut.end);
                    let piece = Piece {
                        start: &start,
                        schemas: cut.schemas,
                        bytes: cut.bytes,
                        count: cut.count,
                    };
                    emit(sink, &h, piece, &mut events, &end)?;
                    start = end;
                    stats.batches_out += 1;
                }
                let piece = Piece {
                    start: &start,
                    schemas: piece_schemas.take(),
                    bytes,
                    count,
                };
                emit(sink, &h, piece, &mut events, &c.end)?;
                stats.batches_out += 1;
                drop(events);
                count = 0;
                bytes = 0;
            }
        }
    }
    Ok(stats)
}

/// One piece to write: where it starts, its header's schemas, its records.
struct Piece<'a> {
    start: &'a Cursor,
    schemas: Option<Vec<Schema>>,
    bytes: u64,
    count: u64,
}

fn emit(
    sink: &mut dyn BatchSink,
    h: &Header,
    p: Piece<'_>,
    events: &mut dyn BufRead,
    end: &Cursor,
) -> Result<()> {
    let header = Header {
        start: p.start.clone(),
        high_water: h.high_water,
        schemas: p.schemas,
        compacted: h.compacted,
    };
    let count = p.count;
    let mut piece = (&mut *events).take(p.bytes);
    sink.batch(
        &header,
        &mut piece,
        &Commit {
            end: end.clone(),
            count,
        },
    )
}

fn header_size(
    h: &Header,
    start: Sequence,
    schemas: &Option<Vec<Schema>>,
    scratch: &mut Vec<u8>,
) -> u64 {
    scratch.clear();
    let mut hh = h.clone();
    hh.start.set_sequence(start);
    hh.schemas = schemas.clone();
    write_header_line(scratch, &hh);
    scratch.len() as u64
}

fn commit_size(source: &str, end: Sequence, count: u64, scratch: &mut Vec<u8>) -> u64 {
    scratch.clear();
    write_commit_line(
        scratch,
        &Commit {
            end: Cursor::new(source, end),
            count,
        },
    );
    scratch.len() as u64
}
