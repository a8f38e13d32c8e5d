//! Merge: join contiguous batches of one source into one batch.
//!
//! Inputs may be given in any order; they are ordered by the start of their
//! first batch (ties keep the order given). Each batch must start exactly where
//! the previous one ended, in the same source: a gap, an overlap or a second
//! source is an error naming the input. The merged batch starts at the first
//! start, ends at the last end, has the greatest high water, and the union of
//! the schemas; `schema` and `message` records pass through in order, and a later header must agree
//! with the schemas in force where it starts (a table whose schema changes
//! between batches without a schema record cannot be merged).
//! Events are held in a spool until the last input has been checked.

use super::spool::{Spool, DEFAULT_SPOOL_MEMORY};
use super::BatchSink;
use crate::error::{Error, Result};
use crate::wire::batch::{write_message_line, write_schema_line, Lean};
use crate::wire::{BatchStreamReader, Commit, Header, Item, Schema};
use std::collections::{BTreeSet, HashMap};
use std::io::BufRead;

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MergeStats {
    pub batches_in: u64,
    pub events: u64,
}

/// Merge every batch of every input into one batch for `sink`.
pub fn merge<R: BufRead + Send + 'static>(
    inputs: Vec<BatchStreamReader<R>>,
    sink: &mut dyn BatchSink,
) -> Result<MergeStats> {
    // Read each input's first header, and the record after it, to order the
    // inputs: by start, and among equal starts an empty batch (one that ends
    // where it starts) first, since it fits only before the others.
    let mut opened = Vec::with_capacity(inputs.len());
    for mut r in inputs {
        let h = match r.next_item()? {
            Some(Item::Header(h)) => h,
            _ => unreachable!("a validated stream starts with a header"),
        };
        let next = r.next_item()?.expect("a validated batch has a commit");
        let empty = matches!(&next, Item::Commit(c) if c.end.sequence() == h.start.sequence());
        opened.push((h, next, empty, r));
    }
    opened.sort_by_key(|(h, _, empty, _)| (h.start.sequence(), !*empty));

    let mut stats = MergeStats::default();
    let mut spool = Spool::new(DEFAULT_SPOOL_MEMORY);
    let mut first: Option<Header> = None;
    let mut high_water = 0u128;
    // Union of schemas in first-seen order.
    let mut schemas: Vec<Schema> = Vec::new();
    let mut schema_index: HashMap<String, usize> = HashMap::new();
    // Each table's schema in force where the merged events have reached.
    let mut current: HashMap<String, Schema> = HashMap::new();
    let mut uncovered: BTreeSet<String> = BTreeSet::new();
    let mut current_has_schemas = false;
    let mut any_schemas = false;
    // One compacted input makes the whole merged interval compacted.
    let mut compacted = false;
    let mut end: Option<Commit> = None;
    let mut line = Vec::with_capacity(1024);

    for (h, next, _, r) in opened {
        // Read ahead only the input being merged: one thread at a time, so
        // memory does not grow with the number of inputs.
        let mut r = r.read_ahead_lean()?;
        let name = r.name().to_string();
        if let Some(prev) = &end {
            let (p, s) = (&prev.end, &h.start);
            if p.source != s.source {
                return Err(Error::data(format!(
                    "batch of source {:?} cannot be merged with batches of source {:?}",
                    s.source, p.source
                ))
                .in_file(&name));
            }
            if s.sequence() > p.sequence() {
                return Err(Error::data(format!(
                    "gap: this input starts at {} but the previous batch ended at {}",
                    s.sequence(),
                    p.sequence()
                ))
                .in_file(&name));
            }
            if s.sequence() < p.sequence() {
                return Err(Error::data(format!(
                    "overlap: this input starts at {} but the previous batch ended at {}",
                    s.sequence(),
                    p.sequence()
                ))
                .in_file(&name));
            }
        }
        let mut held = vec![next, Item::Header(h)];
        loop {
            let item = match held.pop() {
                Some(i) => i,
                None => match r.next_lean()? {
                    // An event on a canonical line is written through, never built.
                    Some(Lean::Event(_)) => {
                        if !current_has_schemas && !uncovered.contains(r.lean_table()) {
                            uncovered.insert(r.lean_table().to_string());
                        }
                        line.clear();
                        r.push_event_line(&mut line, None);
                        spool.push(&line)?;
                        stats.events += 1;
                        continue;
                    }
                    Some(Lean::Item(i)) => i,
                    None => break,
                },
            };
            match item {
                Item::Header(h) => {
                    stats.batches_in += 1;
                    high_water = high_water.max(h.high_water);
                    if let Some(list) = &h.schemas {
                        any_schemas = true;
                        for s in list {
                            if let Some(now) = current.get(&s.table) {
                                if now != s {
                                    return Err(Error::data(format!(
                                        "the schema of table {:?} differs between batches with no schema record between them; merge cannot join them (keep them as separate batches)",
                                        s.table
                                    ))
                                    .in_file(&name));
                                }
                            } else {
                                schema_index.insert(s.table.clone(), schemas.len());
                                schemas.push(s.clone());
                                current.insert(s.table.clone(), s.clone());
                            }
                        }
                    }
                    current_has_schemas = h.schemas.is_some();
                    compacted |= h.compacted;
                    if first.is_none() {
                        first = Some(h);
                    }
                }
                Item::Event(e) => {
                    if !current_has_schemas {
                        uncovered.insert(e.table.clone());
                    }
                    line.clear();
                    // A canonical line is written through; others are encoded.
                    r.push_event_line(&mut line, Some(&e));
                    spool.push(&line)?;
                    stats.events += 1;
                }
                Item::Schema(c) => {
                    if !sink.takes_schema_records() {
                        return Err(r.locate(super::no_json_for_schema_records()));
                    }
                    line.clear();
                    write_schema_line(&mut line, &c);
                    spool.push(&line)?;
                    current.insert(c.schema.table.clone(), c.schema);
                }
                Item::Message(m) => {
                    if !sink.takes_schema_records() {
                        return Err(r.locate(super::no_json_for_message_records()));
                    }
                    line.clear();
                    write_message_line(&mut line, &m);
                    spool.push(&line)?;
                }
                Item::Commit(c) => end = Some(c),
            }
        }
    }
    let first = first.expect("at least one batch");
    let end = end.expect("at least one batch");
    let merged_schemas = if !any_schemas {
        None
    } else {
        if let Some(t) = uncovered.iter().find(|t| !schema_index.contains_key(*t)) {
            return Err(Error::data(format!(
                "some batches carry schemas and some do not, and no schema is known for table {t:?}; merge cannot write a valid batch"
            )));
        }
        Some(schemas)
    };
    let header = Header {
        start: first.start,
        high_water,
        schemas: merged_schemas,
        compacted,
    };
    let commit = Commit {
        end: end.end,
        count: stats.events,
    };
    let mut events = spool.drain()?;
    sink.batch(&header, &mut events, &commit)?;
    Ok(stats)
}
