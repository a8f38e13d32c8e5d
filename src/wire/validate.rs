//! The batch rules (docs/FORMAT.md §6, "The rules") as a state machine over
//! a stream's records, shared by every decoder: each broken rule is an error
//! the reader names with its line.

use super::batch::{shapes, Commit, Header, TableShape};
use super::model::{Cursor, Event, LogicalMessage, Schema, SchemaChange, Sequence};
use crate::error::{Error, Result};
use std::collections::HashMap;

/// The batch rules as a state machine over records, shared by every decoder.
#[derive(Default)]
pub struct Validator {
    /// Refuse anything after the first commit (the strict single-batch decoder).
    single: bool,
    prev_end: Option<Cursor>,
    open: Option<Box<Open>>,
    batches: u64,
}

struct Open {
    start: Cursor,
    high_water: Sequence,
    shapes: Option<HashMap<String, TableShape>>,
    /// With schemas: each table's schema in force (changed by schema records).
    schemas: HashMap<String, Schema>,
    /// Without schemas: each table's width as its first image gave it.
    widths: HashMap<String, usize>,
    last: Sequence,
    /// What had the sequence `last`: nothing yet (the start), an event or
    /// a message.
    last_kind: Last,
    count: u64,
}

#[derive(Clone, Copy, PartialEq)]
enum Last {
    Start,
    Event,
    Message,
}

impl Last {
    fn name(self) -> &'static str {
        match self {
            Last::Message => "message",
            _ => "event",
        }
    }
}

impl Open {
    /// Check the sequence of the next event or message (`what`) against
    /// the one before it and `high_water`.
    fn place(&self, what: &str, sequence: Sequence) -> Result<()> {
        if sequence <= self.last {
            return Err(Error::data(if self.last_kind == Last::Start {
                format!(
                    "{what} sequence {} is not after the batch start {}",
                    sequence, self.last
                )
            } else {
                format!(
                    "{what} sequence {} does not increase (previous {} {})",
                    sequence,
                    self.last_kind.name(),
                    self.last
                )
            }));
        }
        if sequence > self.high_water {
            return Err(Error::data(format!(
                "{what} sequence {} is beyond high_water {}",
                sequence, self.high_water
            )));
        }
        Ok(())
    }
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
        let schemas = h
            .schemas
            .iter()
            .flatten()
            .map(|s| (s.table.clone(), s.clone()))
            .collect();
        self.open = Some(Box::new(Open {
            start: h.start.clone(),
            high_water: h.high_water,
            shapes,
            schemas,
            widths: HashMap::new(),
            last: h.start.sequence(),
            last_kind: Last::Start,
            count: 0,
        }));
        Ok(())
    }

    pub fn event(&mut self, e: &Event) -> Result<()> {
        self.event_parts(
            e.sequence,
            &e.table,
            e.before.as_ref().or(e.before_key.as_ref()).map(Vec::len),
            e.before_key.is_some(),
            e.after.as_ref().map(Vec::len),
        )
    }

    /// [`Validator::event`] from an event's parts: its sequence, table and
    /// image widths (what the rules look at); `key_only` when the before
    /// image is a `before_key`, whose width is the key's.
    pub fn event_parts(
        &mut self,
        sequence: Sequence,
        table: &str,
        before: Option<usize>,
        key_only: bool,
        after: Option<usize>,
    ) -> Result<()> {
        let Some(open) = self.open.as_mut() else {
            return Err(Error::data(if self.batches == 0 {
                "event before the header (the header must come first)"
            } else {
                "event after the commit (a batch ends at its commit; a new batch needs a header)"
            }));
        };
        open.place("event", sequence)?;
        if let Some(shapes) = &open.shapes {
            let Some(shape) = shapes.get(table) else {
                return Err(Error::data(format!(
                    "event {} is for table {:?}, which has no schema in the header",
                    sequence, table
                )));
            };
            if let (Some(len), true) = (before, key_only) {
                if len != shape.key.len() {
                    return Err(Error::data(format!(
                        "event {} before_key has {} values but table {:?} has {} key columns",
                        sequence,
                        len,
                        table,
                        shape.key.len()
                    )));
                }
            }
            let before = if key_only { None } else { before };
            for (name, img) in [("before", before), ("after", after)] {
                if let Some(len) = img {
                    if len != shape.width {
                        return Err(Error::data(format!(
                            "event {} {} image has {} values but table {:?} has {} columns",
                            sequence, name, len, table, shape.width
                        )));
                    }
                }
            }
        }
        if open.shapes.is_none() {
            let before = if key_only { None } else { before };
            for (name, img) in [("before", before), ("after", after)] {
                if let Some(len) = img {
                    let w = match open.widths.get(table) {
                        Some(&w) => w,
                        None => {
                            open.widths.insert(table.to_string(), len);
                            len
                        }
                    };
                    if len != w {
                        return Err(Error::data(format!(
                            "event {} {} image has {} values but earlier images of table {:?} have {}",
                            sequence,
                            name,
                            len,
                            table,
                            w
                        )));
                    }
                }
            }
        }
        open.last = sequence;
        open.last_kind = Last::Event;
        open.count += 1;
        Ok(())
    }

    /// A `message` record: inside a batch, its sequence inside the batch's
    /// interval and after the event or message before it (it is not an
    /// event: the commit's count leaves it out).
    pub fn message(&mut self, m: &LogicalMessage) -> Result<()> {
        let Some(open) = self.open.as_mut() else {
            return Err(Error::data(if self.batches == 0 {
                "message record before the header (the header must come first)"
            } else {
                "message record after the commit (a message belongs inside a batch; a new batch needs a header)"
            }));
        };
        m.check().map_err(Error::data)?;
        open.place("message", m.sequence)?;
        open.last = m.sequence;
        open.last_kind = Last::Message;
        Ok(())
    }

    /// A `schema` record: checked against the schema in force, which it
    /// replaces for the events after it.
    pub fn schema_change(&mut self, c: &SchemaChange) -> Result<()> {
        let Some(open) = self.open.as_mut() else {
            return Err(Error::data(if self.batches == 0 {
                "schema record before the header (the header must come first)"
            } else {
                "schema record after the commit (a schema change belongs inside a batch, before the event it precedes)"
            }));
        };
        let Some(shapes) = open.shapes.as_mut() else {
            return Err(Error::data(
                "schema record in a batch whose header has no schemas (a schema change needs the schemas it changes)",
            ));
        };
        c.check(open.schemas.get(&c.schema.table))
            .map_err(Error::data)?;
        shapes.insert(
            c.schema.table.clone(),
            TableShape {
                width: c.schema.columns.len(),
                key: c.schema.key_indices(),
            },
        );
        open.schemas
            .insert(c.schema.table.clone(), c.schema.clone());
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
                "{} sequence {} is beyond the batch end {}",
                open.last_kind.name(),
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
