//! The archive's part of each step of a batch (the driver's
//! [`BatchHooks`]): the batch's events not held yet are written as a batch
//! of their own (a piece), from the cursor held or the batch's start, with
//! the schemas in force there; its commit line makes it whole, and the file
//! holding it is closed after it or, grouped, by size and age.

use super::DirTarget;
use crate::destination::driver::BatchHooks;
use crate::error::Result;
use crate::wire::batch::{
    write_commit_line, write_header_line, write_message_line, write_schema_line,
};
use crate::wire::{
    BatchStreamReader, Commit, Cursor, Event, Header, LogicalMessage, Schema, SchemaChange,
    SourceKind,
};
use std::io::BufRead;

/// The batch in progress.
#[derive(Default)]
pub(super) struct Batch {
    /// The cursor held at its start.
    held: Option<Cursor>,
    header: Option<Header>,
    /// Where its piece starts: the cursor held, when the batch overlaps it.
    start: Option<Cursor>,
    /// Its header line is written, with these schemas (now in force).
    open: Option<Option<Vec<Schema>>>,
    count: u64,
    line: Vec<u8>,
    busy: Option<crate::util::stop::Busy>,
}

impl DirTarget {
    fn write_line(&mut self) -> Result<()> {
        let line = std::mem::take(&mut self.batch.line);
        let r = self.shared().lock().write(&line);
        self.batch.line = line;
        r
    }

    /// The piece's header line, from its start, with `schemas`.
    fn open_piece(&mut self, schemas: Option<Vec<Schema>>) -> Result<()> {
        let h = self.batch.header.as_ref().expect("a header came");
        let header = Header {
            start: self.batch.start.clone().expect("set with the header"),
            high_water: h.high_water,
            schemas,
            compacted: h.compacted,
        };
        self.batch.line.clear();
        write_header_line(&mut self.batch.line, &header);
        self.write_line()?;
        self.batch.open = Some(header.schemas);
        Ok(())
    }

    fn end_batch(&mut self) {
        self.shared().lock().in_batch = false;
        self.shared().wake.notify_all();
        self.batch.busy = None;
    }
}

impl BatchHooks for DirTarget {
    fn begin(&mut self) -> Result<Option<Cursor>> {
        let busy = crate::util::stop::Busy::new();
        let mut g = self.open()?.lock();
        g.in_batch = true;
        g.reading = false;
        let held = g.cursor();
        drop(g);
        self.batch = Batch {
            held: held.clone(),
            line: std::mem::take(&mut self.batch.line),
            busy: Some(busy),
            ..Batch::default()
        };
        Ok(held)
    }

    fn header(&mut self, h: &Header) -> Result<()> {
        self.batch.start = Some(crate::destination::resume_point(
            self.batch.held.as_ref(),
            &h.start,
        ));
        self.batch.header = Some(h.clone());
        Ok(())
    }

    fn tables(
        &mut self,
        in_force: &mut Vec<Schema>,
        _kind: SourceKind,
        _replay: bool,
    ) -> Result<bool> {
        // What is in force where the piece starts (the header's, with the
        // schema records of the events held before it).
        let had = self
            .batch
            .header
            .as_ref()
            .is_some_and(|h| h.schemas.is_some());
        self.open_piece(had.then(|| in_force.clone()))?;
        Ok(true)
    }

    fn schema_change<R: BufRead>(
        &mut self,
        change: SchemaChange,
        _kind: SourceKind,
        _input: &mut BatchStreamReader<R>,
    ) -> Result<()> {
        self.batch.line.clear();
        write_schema_line(&mut self.batch.line, &change);
        self.write_line()?;
        if let Some(Some(s)) = self.batch.open.as_mut() {
            crate::wire::put_in_force(s, &mut vec![change]);
        }
        Ok(())
    }

    fn event<R: BufRead>(&mut self, e: Event, input: &mut BatchStreamReader<R>) -> Result<()> {
        self.batch.line.clear();
        input.push_event_line(&mut self.batch.line, Some(&e));
        self.write_line()?;
        self.batch.count += 1;
        Ok(())
    }

    /// The archive keeps batches whole: their messages too.
    fn keeps_messages(&self) -> bool {
        true
    }

    fn message<R: BufRead>(
        &mut self,
        m: LogicalMessage,
        _input: &mut BatchStreamReader<R>,
    ) -> Result<()> {
        self.batch.line.clear();
        write_message_line(&mut self.batch.line, &m);
        self.write_line()
    }

    fn flush<R: BufRead>(&mut self, _input: &mut BatchStreamReader<R>) -> Result<()> {
        Ok(())
    }

    fn commit(&mut self, end: Option<&Cursor>) -> Result<()> {
        let Some(end) = end else {
            // Held whole: nothing of it is kept.
            self.rollback();
            return Ok(());
        };
        if self.batch.open.is_none() {
            // Every event was held, but the batch moves the cursor: an
            // empty piece, with the schemas in force at the cursor.
            let schemas = self.schemas_at_cursor()?;
            self.open_piece(schemas)?;
        }
        self.batch.line.clear();
        write_commit_line(
            &mut self.batch.line,
            &Commit {
                end: end.clone(),
                count: self.batch.count,
            },
        );
        self.write_line()?;
        let start = self.batch.start.clone().expect("set with the header");
        let mut g = self.shared().lock();
        g.piece_done(&start, end.clone(), self.batch.count);
        let closed = if g.due() { g.close() } else { Ok(()) };
        if closed.is_err() {
            // This batch fails: the driver does not count it.
            g.dropped.0 -= 1;
            g.dropped.1 -= self.batch.count;
        }
        g.reading = closed.is_ok();
        drop(g);
        let at_end = self.batch.open.take();
        // What is in force at the cursor held now (unknown when the file
        // could not be closed: the cursor is then the last file's).
        self.at_cursor = if closed.is_ok() { at_end } else { None };
        self.end_batch();
        closed
    }

    fn rollback(&mut self) {
        if self.open.is_some() {
            let mut g = self.shared().lock();
            g.reading = false;
            let cut = g.discard_piece();
            drop(g);
            if !cut {
                // The batches waiting were dropped with the piece.
                self.at_cursor = None;
            }
            self.end_batch();
        }
        self.batch.open = None;
    }
}
