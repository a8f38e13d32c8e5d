//! The batch stream a read writes: a header when the first event or the
//! end comes, events encoded once, a commit at each end.

use super::io_out;
use crate::error::Result;
use crate::wire::batch::{
    write_commit_line, write_event_line, write_header_line, write_schema_line,
};
use crate::wire::{Commit, Cursor, Event, Header, Schema, SchemaChange, Sequence};
use std::io::Write;

/// Streams batches: a header when the first event or the end comes, events,
/// a commit at each end.
pub(super) struct BatchOut<'a> {
    pub(super) id: String,
    pub(super) position: Sequence,
    /// Batches written (committed) so far.
    pub(super) batches: u64,
    /// A stop waits for the first batch ([`owe_first_batch`]).
    owes_first: bool,
    pub(super) high_water: Sequence,
    pub(super) schemas: Vec<Schema>,
    pub(super) out: &'a mut dyn Write,
    pub(super) open: bool,
    pub(super) count: u64,
    pub(super) line: Vec<u8>,
    /// Schema records waiting for the next event (they belong to it).
    pub(super) pending: Vec<SchemaChange>,
}

impl<'a> BatchOut<'a> {
    pub(super) fn new(
        id: String,
        start: Sequence,
        high_water: Sequence,
        schemas: Vec<Schema>,
        out: &'a mut dyn Write,
    ) -> Self {
        BatchOut {
            id,
            position: start,
            batches: 0,
            owes_first: false,
            high_water,
            schemas,
            out,
            open: false,
            count: 0,
            line: Vec::with_capacity(1024),
            pending: Vec::new(),
        }
    }

    /// Write the schema records waiting, which then are in force.
    fn write_pending(&mut self) -> Result<()> {
        if !self.pending.is_empty() {
            let mut rec = Vec::new();
            for c in &self.pending {
                write_schema_line(&mut rec, c);
            }
            crate::wire::put_in_force(&mut self.schemas, &mut self.pending);
            self.out.write_all(&rec).map_err(io_out)?;
        }
        Ok(())
    }

    /// A table first described now: in the next header when no batch is
    /// open, else a schema record (a table new to the batch).
    /// The table's schema in force: the last record waiting, else the
    /// header's.
    pub(super) fn in_force(&self, table: &str) -> Option<&Schema> {
        self.pending
            .iter()
            .rev()
            .map(|c| &c.schema)
            .chain(self.schemas.iter())
            .find(|x| x.table == table)
    }

    pub(super) fn add_table(&mut self, s: Schema) {
        if self.in_force(&s.table) == Some(&s) {
            return;
        }
        if !self.open && self.pending.is_empty() {
            match self.schemas.iter_mut().find(|x| x.table == s.table) {
                Some(x) => *x = s,
                None => self.schemas.push(s),
            }
        } else {
            self.pending.push(SchemaChange {
                schema: s,
                renamed: Vec::new(),
            });
        }
    }

    pub(super) fn open_batch(&mut self) -> Result<()> {
        if !self.open {
            crate::util::stop::batch_begins();
            self.line.clear();
            write_header_line(
                &mut self.line,
                &Header {
                    start: Cursor::new(self.id.clone(), self.position),
                    high_water: self.high_water,
                    schemas: Some(self.schemas.clone()),
                    compacted: false,
                },
            );
            self.out.write_all(&self.line).map_err(io_out)?;
            self.open = true;
            self.count = 0;
        }
        Ok(())
    }

    pub(super) fn encoded_len(&mut self, e: &Event) -> usize {
        self.line.clear();
        write_event_line(&mut self.line, e);
        self.line.len()
    }

    /// Write the event last given to [`encoded_len`](Self::encoded_len).
    pub(super) fn write_encoded(&mut self, sequence: Sequence) -> Result<()> {
        if !self.open {
            let event = std::mem::take(&mut self.line);
            self.open_batch()?;
            self.line = event;
        }
        self.write_pending()?;
        self.out.write_all(&self.line).map_err(io_out)?;
        self.count += 1;
        self.position = sequence;
        Ok(())
    }

    /// Write a logical message (a `message` record), opening the batch if
    /// none is open. Schema records waiting stay for the event they
    /// belong to. It is not an event: the count leaves it out.
    pub(super) fn write_message(&mut self, m: &crate::wire::LogicalMessage) -> Result<()> {
        self.open_batch()?;
        crate::wire::batch::write_message_line_to(&mut *self.out, m).map_err(io_out)?;
        self.position = m.sequence;
        Ok(())
    }

    /// A follower: the stop hold it took at its start is released with the
    /// first batch, so a stop asked for before it waits for it (the
    /// follower then writes it empty): apply always gets a stream, and the
    /// pipeline ends 0.
    pub(super) fn owe_first_batch(&mut self) {
        self.owes_first = true;
    }

    pub(super) fn finish_batch(&mut self, end: Sequence) -> Result<()> {
        self.open_batch()?;
        // Schema changes with no event after them yet belong to the batch's
        // end: a target past it has them.
        self.write_pending()?;
        self.line.clear();
        write_commit_line(
            &mut self.line,
            &Commit {
                end: Cursor::new(self.id.clone(), end),
                count: self.count,
            },
        );
        self.out.write_all(&self.line).map_err(io_out)?;
        self.out.flush().map_err(io_out)?;
        self.open = false;
        self.position = end;
        self.batches += 1;
        crate::util::stop::batch_done();
        if std::mem::take(&mut self.owes_first) {
            crate::util::stop::batch_done();
        }
        crate::metrics::batch(0, 0);
        crate::metrics::position(crate::metrics::position_of(end));
        Ok(())
    }
}
