//! Applying batch streams and snapshots: each batch's rows and its cursor
//! in one transaction.

use super::*;
use crate::destination::driver::{apply_batches, BatchHooks, SnapshotHooks};

/// Consecutive inserts into one table are run together, with one look-up
/// of their prepared statement (the look-up by SQL text cost about a tenth
/// of the writing thread's time when made per row); at most this many wait.
const RUN: usize = 256;

/// Run the inserts waiting in `run` (all into one table, in order), then
/// hand their events back to the reader.
fn flush_inserts<R: BufRead>(
    conn: &Connection,
    tables: &HashMap<String, TableSql>,
    run: &mut Vec<Event>,
    on_conflict: OnConflict,
    input: &mut BatchStreamReader<R>,
) -> Result<()> {
    let Some(first) = run.first() else {
        return Ok(());
    };
    let t = &tables[&first.table];
    let sql = match on_conflict {
        OnConflict::Error => &t.insert,
        OnConflict::Overwrite => &t.replace,
    };
    let done = insert_rows(
        conn,
        t,
        sql,
        run.iter()
            .map(|e| (e.after.as_ref().expect("an insert"), Some(e.sequence))),
    );
    // Emptied even on failure: the batch fails, and nothing is run twice.
    for e in run.drain(..) {
        // Freed on the reading thread, which made it.
        input.recycle(Item::Event(e));
    }
    done
}

/// One apply's state between the driver's steps (`destination/driver.rs`):
/// the batch's tables, the stream's schema of each, the tables whose check
/// failed in an overlapping replay (they may already be in the shape a
/// schema record of the batch brings, a merged replay), rows waiting for
/// their key to be freed (a key swap in progress), and inserts into one
/// table waiting to be run together.
struct Batches<'a> {
    target: &'a mut SqliteTarget,
    on_conflict: OnConflict,
    tables: HashMap<String, TableSql>,
    olds: HashMap<String, Schema>,
    deferred: HashMap<String, Error>,
    parked: Vec<(String, Row, u128)>,
    run: Vec<Event>,
}

impl BatchHooks for Batches<'_> {
    fn begin(&mut self) -> Result<Option<Cursor>> {
        self.parked.clear();
        self.target.begin()?;
        self.tables.clear();
        self.olds.clear();
        self.deferred.clear();
        stored_cursor(self.target.db())
    }

    fn tables(
        &mut self,
        in_force: &mut Vec<Schema>,
        kind: crate::wire::SourceKind,
        replay: bool,
    ) -> Result<bool> {
        ensure_in_force(
            self.target.db(),
            in_force,
            kind,
            &mut self.tables,
            &mut self.olds,
            replay.then_some(&mut self.deferred),
        )
    }

    fn schema_change<R: BufRead>(
        &mut self,
        c: crate::wire::SchemaChange,
        kind: crate::wire::SourceKind,
        _input: &mut BatchStreamReader<R>,
    ) -> Result<()> {
        if self.parked.iter().any(|(t, _, _)| *t == c.schema.table) {
            return Err(Error::state(format!(
                "the schema of table {:?} changes while a row waits for its key to be freed (a key swap in progress); the target cannot carry both",
                c.schema.table
            )));
        }
        let old = self.olds.get(&c.schema.table).cloned();
        let t = super::evolve::evolve_table(self.target.db(), old.as_ref(), &c, kind)?;
        self.deferred.remove(&c.schema.table);
        self.olds.insert(c.schema.table.clone(), c.schema.clone());
        self.tables.insert(c.schema.table.clone(), t);
        Ok(())
    }

    // Inlined into the driver's loop: the event is not moved again.
    #[inline(always)]
    fn event<R: BufRead>(&mut self, e: Event, input: &mut BatchStreamReader<R>) -> Result<()> {
        // An insert into the table of the waiting ones joins them; anything
        // else runs them first.
        let joins = e.operation == Operation::Insert
            && self.run.len() < RUN
            && self.run.first().is_none_or(|r| r.table == e.table);
        if !joins {
            self.flush(input)?;
        }
        if let Some(err) = self.deferred.remove(&e.table) {
            return Err(input.locate(err));
        }
        if !self.tables.contains_key(&e.table) {
            let t = existing_table(self.target.db(), &e.table)?;
            self.tables.insert(e.table.clone(), t);
        }
        let t = &self.tables[&e.table];
        // Without schemas in the header, the images were not checked
        // against this table's width yet.
        e.check_key(&t.key)
            .map_err(|err| input.locate(Error::data(err)))?;
        for img in [&e.before, &e.after].into_iter().flatten() {
            if img.len() != t.schema.columns.len() {
                return Err(input.locate(Error::data(format!(
                    "event {} has {} values but table {:?} has {} columns",
                    e.sequence,
                    img.len(),
                    e.table,
                    t.schema.columns.len()
                ))));
            }
            t.check_classes(img, &|| format!("event {}", e.sequence))
                .map_err(|err| input.locate(err))?;
        }
        if e.operation == Operation::Insert {
            // Run with the next ones, before anything else touches the
            // database; nothing counts as committed before the commit.
            self.run.push(e);
            return Ok(());
        }
        if e.operation.is_truncate() {
            // A row waiting for its key is emptied with its table.
            self.parked.retain(|(table, _, _)| *table != e.table);
        }
        match apply_event(self.target.db(), t, &e, self.on_conflict)? {
            Applied::Parked(row) => self.parked.push((e.table.clone(), row, e.sequence)),
            Applied::Done => {
                if !self.parked.is_empty() && e.operation != Operation::Insert {
                    retry_parked(self.target.db(), &self.tables, &mut self.parked)?;
                }
            }
        }
        // Freed on the reading thread, which made it.
        input.recycle(Item::Event(e));
        Ok(())
    }

    fn flush<R: BufRead>(&mut self, input: &mut BatchStreamReader<R>) -> Result<()> {
        flush_inserts(
            self.target.db(),
            &self.tables,
            &mut self.run,
            self.on_conflict,
            input,
        )
    }

    fn commit(&mut self, end: Option<&Cursor>) -> Result<()> {
        if let Some((table, _, seq)) = self.parked.first() {
            return Err(Error::state(format!(
                "event {seq} (update on table {table:?}): its new key is still held by another row at the end of the batch; the target diverges from the source"
            )));
        }
        if let Some(end) = end {
            set_cursor(self.target.db(), end)?;
        }
        self.target.commit()
    }

    fn rollback(&mut self) {
        if self.target.in_tx {
            self.target.rollback();
        }
    }

    fn failed<R: BufRead>(&mut self, e: Error, input: &mut BatchStreamReader<R>) -> Error {
        // A failure while inserts were waiting (a later event's check, the
        // input): the waiting inserts run first, so the error reported is
        // the first in stream order, as when each insert ran at once.
        if self.run.is_empty() {
            return e;
        }
        match self.flush(input) {
            Err(first) => first,
            Ok(()) => e,
        }
    }
}

impl SqliteTarget {
    /// Apply a batch stream; each batch commits with its cursor in one
    /// transaction. Batches already held are skipped; a gap or another
    /// source fails (`destination/driver.rs`).
    pub fn apply_stream<R: BufRead>(
        &mut self,
        input: &mut BatchStreamReader<R>,
        progress: &mut dyn FnMut(&ApplyStats),
    ) -> Result<ApplyStats> {
        let held = self.cursor()?;
        let mut committed = ApplyStats::default();
        let mut batches = Batches {
            on_conflict: self.options.on_conflict,
            target: self,
            tables: HashMap::new(),
            olds: HashMap::new(),
            deferred: HashMap::new(),
            parked: Vec::new(),
            run: Vec::with_capacity(RUN),
        };
        let result = apply_batches(&mut batches, input, held, &mut committed, progress);
        self.committed = committed;
        result
    }

    /// Load a snapshot into a target that holds no cursor yet, in one
    /// transaction (`destination/driver.rs`).
    pub fn apply_snapshot<R: BufRead>(
        &mut self,
        input: &mut SnapshotReader<R>,
        progress: &mut dyn FnMut(&ApplyStats),
    ) -> Result<ApplyStats> {
        let mut committed = ApplyStats::default();
        let mut load = Load {
            on_conflict: self.options.on_conflict,
            existing: self.options.existing_rows,
            target: self,
            tables: HashMap::new(),
            run: Vec::with_capacity(RUN),
        };
        let result =
            crate::destination::driver::apply_snapshot(&mut load, input, &mut committed, progress);
        self.committed = committed;
        result
    }
}

/// One snapshot load's state between the driver's steps: its tables, and
/// rows of one table waiting to be inserted together.
struct Load<'a> {
    target: &'a mut SqliteTarget,
    on_conflict: OnConflict,
    existing: ExistingRows,
    tables: HashMap<String, TableSql>,
    run: Vec<(String, Row)>,
}

impl Load<'_> {
    /// Insert the waiting rows (all of one table, in order), then hand them
    /// back to the reader.
    fn flush<R: BufRead>(&mut self, input: &mut SnapshotReader<R>) -> Result<()> {
        let Some((table, _)) = self.run.first() else {
            return Ok(());
        };
        let t = &self.tables[table];
        let sql = match self.on_conflict {
            OnConflict::Error => &t.insert,
            OnConflict::Overwrite => &t.replace,
        };
        let done = insert_rows(
            self.target.db(),
            t,
            sql,
            self.run.iter().map(|(_, row)| (row, None)),
        );
        // Emptied even on failure: nothing is run twice.
        for (table, row) in self.run.drain(..) {
            // Freed on the reading thread, which made it.
            input.recycle(SnapItem::Row { table, row });
        }
        done
    }
}

impl SnapshotHooks for Load<'_> {
    fn begin(&mut self) -> Result<Option<Cursor>> {
        self.target.begin()?;
        stored_cursor(self.target.db())
    }

    fn tables(&mut self, schemas: &[Schema], kind: crate::wire::SourceKind) -> Result<()> {
        for s in schemas {
            // A snapshot follows no stream: a table with other columns is
            // refused as before.
            let t = ensure_table(self.target.db(), s, kind, false)?;
            empty_or_replace(self.target.db(), &s.table, self.existing)?;
            self.tables.insert(s.table.clone(), t);
        }
        Ok(())
    }

    fn row<R: BufRead>(
        &mut self,
        table: String,
        row: Row,
        _cursor: &Cursor,
        input: &mut SnapshotReader<R>,
    ) -> Result<()> {
        let t = &self.tables[&table];
        t.check_classes(&row, &|| "snapshot row".to_string())
            .map_err(|err| input.locate(err))?;
        if self.run.len() >= RUN || self.run.first().is_some_and(|(r, _)| *r != table) {
            self.flush(input)?;
        }
        self.run.push((table, row));
        Ok(())
    }

    fn commit<R: BufRead>(&mut self, cursor: &Cursor, input: &mut SnapshotReader<R>) -> Result<()> {
        self.flush(input)?;
        set_cursor(self.target.db(), cursor)?;
        self.target.commit()
    }

    fn rollback(&mut self) {
        if self.target.in_tx {
            self.target.rollback();
        }
    }

    fn failed<R: BufRead>(&mut self, e: Error, input: &mut SnapshotReader<R>) -> Error {
        // The waiting rows first: the error reported is the first in order.
        if self.run.is_empty() {
            return e;
        }
        match self.flush(input) {
            Err(first) => first,
            Ok(()) => e,
        }
    }
}

/// Check or create the tables in force. With `deferred`, a table that does
/// not match is noted with its error instead of failing: in a replay that
/// overlaps the cursor it may already have the shape a schema record of the
/// batch brings (a merged stream); an event of that table before such a
/// record fails with the error.
///
/// A stop asked for (SIGTERM) between two tables ends it early with
/// `Ok(false)`: a header may make thousands of tables, and a stop should not
/// wait for all of them; the caller rolls the batch back.
fn ensure_in_force(
    conn: &rusqlite::Connection,
    in_force: &mut Vec<Schema>,
    kind: crate::wire::SourceKind,
    tables: &mut HashMap<String, TableSql>,
    olds: &mut HashMap<String, Schema>,
    mut deferred: Option<&mut HashMap<String, Error>>,
) -> Result<bool> {
    // A replay overlapping the cursor (`deferred`) drops nothing: its
    // header is the tables' shape at its start, which the target may have
    // moved past.
    let drop = deferred.is_none();
    for s in in_force.drain(..) {
        if crate::util::stop::requested() {
            return Ok(false);
        }
        olds.insert(s.table.clone(), s.clone());
        match ensure_table(conn, &s, kind, drop) {
            Ok(t) => {
                tables.insert(s.table.clone(), t);
            }
            Err(e) if e.kind() == crate::error::ErrorKind::State && deferred.is_some() => {
                deferred
                    .as_deref_mut()
                    .expect("checked")
                    .insert(s.table.clone(), e);
            }
            Err(e) => return Err(e),
        }
    }
    Ok(true)
}
