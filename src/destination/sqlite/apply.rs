//! Applying batch streams and snapshots: each batch's rows and its cursor
//! in one transaction.

use super::*;
use crate::destination::BatchGate;

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

impl SqliteTarget {
    /// Apply a batch stream; each batch commits with its cursor in one
    /// transaction. Batches already held are skipped; a gap or another source fails.
    pub fn apply_stream<R: BufRead>(
        &mut self,
        input: &mut BatchStreamReader<R>,
        progress: &mut dyn FnMut(&ApplyStats),
    ) -> Result<ApplyStats> {
        let on_conflict = self.options.on_conflict;
        let mut stats = ApplyStats {
            cursor: self.cursor()?,
            ..Default::default()
        };
        self.committed = stats.clone();
        let mut tables: HashMap<String, TableSql> = HashMap::new();
        let mut gate: Option<BatchGate> = None;
        let mut parked: Vec<(String, Row, u128)> = Vec::new();
        // Schema records wait for the event they belong to.
        let mut pending: Vec<crate::wire::SchemaChange> = Vec::new();
        let mut kind = crate::wire::SourceKind::Sqlite;
        let mut in_force: Vec<Schema> = Vec::new();
        let mut ensured = false;
        // The stream's schema of each table in force, and the tables whose
        // check failed in an overlapping replay (they may already be in the
        // shape a schema record of the batch brings, a merged replay).
        let mut olds: HashMap<String, Schema> = HashMap::new();
        let mut deferred: HashMap<String, Error> = HashMap::new();
        // Inserts into one table waiting to be run (before anything else
        // touches the database).
        let mut run: Vec<Event> = Vec::with_capacity(RUN);
        // A stop asked for while the header's tables were being made: the
        // batch is rolled back, nothing of it committed.
        let mut stopped = false;
        let result = (|| -> Result<()> {
            while let Some(item) = input.next_item()? {
                match item {
                    Item::Header(h) => {
                        parked.clear();
                        pending.clear();
                        kind = crate::wire::SourceKind::of_identity(&h.start.source);
                        self.begin()?;
                        gate = Some(BatchGate::open(stored_cursor(self.db())?.as_ref(), &h)?);
                        tables.clear();
                        olds.clear();
                        deferred.clear();
                        in_force = h.schemas.clone().unwrap_or_default();
                        // A batch that overlaps the cursor describes tables
                        // as they were at its start: they are checked at its
                        // first event not yet held, with the schema changes
                        // the target already holds.
                        ensured = false;
                        if !gate.as_ref().expect("just opened").overlaps() {
                            if !ensure_in_force(
                                self.db(),
                                &mut in_force,
                                kind,
                                &mut tables,
                                &mut olds,
                                None,
                            )? {
                                stopped = true;
                                return Ok(());
                            }
                            ensured = true;
                        }
                    }
                    Item::Schema(c) => pending.push(c),
                    Item::Event(e) => {
                        if gate.as_ref().expect("validated stream").holds(e.sequence) {
                            // Held, with the schema changes before it.
                            crate::wire::put_in_force(&mut in_force, &mut pending);
                            stats.skipped += 1;
                            continue;
                        }
                        // An insert into the table of the waiting ones
                        // joins them; anything else runs them first.
                        let joins = e.operation == Operation::Insert
                            && pending.is_empty()
                            && run.len() < RUN
                            && run.first().is_none_or(|r| r.table == e.table);
                        if !joins {
                            flush_inserts(self.db(), &tables, &mut run, on_conflict, input)?;
                        }
                        if !ensured {
                            if !ensure_in_force(
                                self.db(),
                                &mut in_force,
                                kind,
                                &mut tables,
                                &mut olds,
                                Some(&mut deferred),
                            )
                            .map_err(|err| input.locate(err))?
                            {
                                stopped = true;
                                return Ok(());
                            }
                            ensured = true;
                        }
                        for c in pending.drain(..) {
                            if parked.iter().any(|(t, _, _)| *t == c.schema.table) {
                                return Err(Error::state(format!(
                                    "the schema of table {:?} changes while a row waits for its key to be freed (a key swap in progress); the target cannot carry both",
                                    c.schema.table
                                )));
                            }
                            let old = olds.get(&c.schema.table).cloned();
                            let t = super::evolve::evolve_table(self.db(), old.as_ref(), &c, kind)
                                .map_err(|err| input.locate(err))?;
                            deferred.remove(&c.schema.table);
                            olds.insert(c.schema.table.clone(), c.schema.clone());
                            tables.insert(c.schema.table.clone(), t);
                        }
                        if let Some(err) = deferred.remove(&e.table) {
                            return Err(input.locate(err));
                        }
                        if !tables.contains_key(&e.table) {
                            let t = existing_table(self.db(), &e.table)?;
                            tables.insert(e.table.clone(), t);
                        }
                        let t = &tables[&e.table];
                        // Without schemas in the header, the images were not
                        // checked against this table's width yet.
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
                            run.push(e);
                            // Counted now; nothing counts as committed
                            // before the commit, which runs it.
                            stats.applied += 1;
                            if stats.applied % 65536 == 0 {
                                progress(&stats);
                            }
                            continue;
                        }
                        if e.operation.is_truncate() {
                            // A row waiting for its key is emptied with its table.
                            parked.retain(|(table, _, _)| *table != e.table);
                        }
                        match apply_event(self.db(), t, &e, on_conflict)? {
                            Applied::Parked(row) => parked.push((e.table.clone(), row, e.sequence)),
                            Applied::Done => {
                                if !parked.is_empty() && e.operation != Operation::Insert {
                                    retry_parked(self.db(), &tables, &mut parked)?;
                                }
                            }
                        }
                        stats.applied += 1;
                        if stats.applied % 65536 == 0 {
                            progress(&stats);
                        }
                        // Freed on the reading thread, which made it.
                        input.recycle(Item::Event(e));
                    }
                    Item::Commit(c) => {
                        flush_inserts(self.db(), &tables, &mut run, on_conflict, input)?;
                        let moves = gate.take().expect("validated stream").close(&c.end)?;
                        // Schema records at the end belong to the batch's
                        // end: made when the batch moves the cursor.
                        if moves && !pending.is_empty() {
                            if !ensured {
                                if !ensure_in_force(
                                    self.db(),
                                    &mut in_force,
                                    kind,
                                    &mut tables,
                                    &mut olds,
                                    Some(&mut deferred),
                                )? {
                                    stopped = true;
                                    return Ok(());
                                }
                                ensured = true;
                            }
                            for c in pending.drain(..) {
                                let old = olds.get(&c.schema.table).cloned();
                                let t =
                                    super::evolve::evolve_table(self.db(), old.as_ref(), &c, kind)?;
                                deferred.remove(&c.schema.table);
                                olds.insert(c.schema.table.clone(), c.schema.clone());
                                tables.insert(c.schema.table.clone(), t);
                            }
                        }
                        if let Some((table, _, seq)) = parked.first() {
                            return Err(Error::state(format!(
                                "event {seq} (update on table {table:?}): its new key is still held by another row at the end of the batch; the target diverges from the source"
                            )));
                        }
                        if moves {
                            set_cursor(self.db(), &c.end)?;
                            stats.cursor = Some(c.end.clone());
                        }
                        self.commit()?;
                        stats.batches += 1;
                        self.committed = stats.clone();
                        progress(&stats);
                        // SIGTERM/SIGINT during the batch: stop after it.
                        if crate::util::stop::requested() {
                            break;
                        }
                    }
                }
            }
            Ok(())
        })();
        // A failure while inserts were waiting (a later event's check, the
        // input): the waiting inserts run first, so the error reported is
        // the first in stream order, as when each insert ran at once.
        let result = match result {
            Err(e) if !run.is_empty() => {
                flush_inserts(self.db(), &tables, &mut run, on_conflict, input).and(Err(e))
            }
            r => r,
        };
        if stopped && result.is_ok() {
            self.rollback();
            crate::destination::stopped_in_header();
        }
        self.end_batches(result)?;
        Ok(stats)
    }

    /// Load a snapshot into a target that holds no cursor yet, in one transaction.
    pub fn apply_snapshot<R: BufRead>(
        &mut self,
        input: &mut SnapshotReader<R>,
        progress: &mut dyn FnMut(&ApplyStats),
    ) -> Result<ApplyStats> {
        let TargetOptions {
            on_conflict,
            existing_rows: existing,
        } = self.options;
        let mut stats = ApplyStats::default();
        self.committed = stats.clone();
        let mut tables: HashMap<String, TableSql> = HashMap::new();
        let mut cursor: Option<Cursor> = None;
        // Rows of one table waiting to be inserted together.
        let mut run: Vec<(String, Row)> = Vec::with_capacity(RUN);
        let flush = |conn: &Connection,
                     tables: &HashMap<String, TableSql>,
                     run: &mut Vec<(String, Row)>,
                     input: &mut SnapshotReader<R>|
         -> Result<()> {
            let Some((table, _)) = run.first() else {
                return Ok(());
            };
            let t = &tables[table];
            let sql = match on_conflict {
                OnConflict::Error => &t.insert,
                OnConflict::Overwrite => &t.replace,
            };
            let done = insert_rows(conn, t, sql, run.iter().map(|(_, row)| (row, None)));
            // Emptied even on failure: nothing is run twice.
            for (table, row) in run.drain(..) {
                // Freed on the reading thread, which made it.
                input.recycle(SnapItem::Row { table, row });
            }
            done
        };
        let result = (|| -> Result<()> {
            while let Some(item) = input.next_item()? {
                match item {
                    SnapItem::Header { cursor: c, schemas } => {
                        self.begin()?;
                        crate::destination::snapshot_allowed(stored_cursor(self.db())?.as_ref())?;
                        for s in &schemas {
                            let t = ensure_table(
                                self.db(),
                                s,
                                crate::wire::SourceKind::of_identity(&c.source),
                                // A snapshot follows no stream: a table
                                // with other columns is refused as before.
                                false,
                            )?;
                            empty_or_replace(self.db(), &s.table, existing)?;
                            tables.insert(s.table.clone(), t);
                        }
                        cursor = Some(c);
                    }
                    SnapItem::Row { table, row } => {
                        let t = &tables[&table];
                        t.check_classes(&row, &|| "snapshot row".to_string())
                            .map_err(|err| input.locate(err))?;
                        if run.len() >= RUN || run.first().is_some_and(|(r, _)| *r != table) {
                            flush(self.db(), &tables, &mut run, input)?;
                        }
                        run.push((table, row));
                        stats.applied += 1;
                        if stats.applied % 65536 == 0 {
                            progress(&stats);
                        }
                    }
                    SnapItem::Commit { .. } => {
                        flush(self.db(), &tables, &mut run, input)?;
                        let c = cursor.take().expect("validated snapshot");
                        set_cursor(self.db(), &c)?;
                        self.commit()?;
                        stats.batches += 1;
                        stats.cursor = Some(c);
                        self.committed = stats.clone();
                        progress(&stats);
                    }
                }
            }
            Ok(())
        })();
        // The waiting rows first: the error reported is the first in order.
        let result = match result {
            Err(e) if !run.is_empty() => flush(self.db(), &tables, &mut run, input).and(Err(e)),
            r => r,
        };
        self.end_batches(result)?;
        Ok(stats)
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
