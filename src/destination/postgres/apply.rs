//! Applying batch streams (one transaction per batch, statements pipelined:
//! `statements.rs`) and snapshots (binary COPY: `copy_in.rs`), and schema
//! changes in the batch's transaction.

use super::*;
use crate::destination::driver::{apply_batches, BatchHooks, SnapshotHooks};
use crate::wire::SchemaChange;

impl PgTarget {
    /// Apply a batch stream: each batch in one transaction with its cursor.
    pub fn apply_stream(
        &mut self,
        input: &mut BatchStreamReader<DynRead>,
        progress: &mut dyn FnMut(&ApplyStats),
    ) -> Result<ApplyStats> {
        self.run_apply(|t, committed| t.apply_stream_in(input, progress, committed))
    }

    /// One apply: connected first; what was committed is kept for the
    /// summary (a failure rolls back through the driver's `rollback`).
    fn run_apply(
        &mut self,
        body: impl FnOnce(&Self, &mut ApplyStats) -> Result<ApplyStats>,
    ) -> Result<ApplyStats> {
        self.client()?;
        let mut committed = ApplyStats::default();
        let result = body(self, &mut committed);
        self.committed = committed;
        result
    }

    /// Roll the open transaction back and forget the tables known in it
    /// (they may have been made in it).
    fn roll_back(&self, c: &Client) {
        let _ = self.rt.block_on(c.batch_execute("ROLLBACK"));
        self.known.borrow_mut().clear();
        self.spellings.borrow_mut().clear();
    }

    fn apply_stream_in(
        &self,
        input: &mut BatchStreamReader<DynRead>,
        progress: &mut dyn FnMut(&ApplyStats),
        committed: &mut ApplyStats,
    ) -> Result<ApplyStats> {
        let c = self.client.as_ref().expect("connected");
        let held = self.rt.block_on(stored_cursor(c))?;
        let mut batches = Batches {
            target: self,
            c,
            on_conflict: self.options.on_conflict,
            tables: HashMap::new(),
            olds: HashMap::new(),
            deferred: HashMap::new(),
            ops: Vec::new(),
            ops_bytes: 0,
            busy: None,
        };
        apply_batches(&mut batches, input, held, committed, progress)
    }

    /// Load a snapshot into a target holding no cursor, in one transaction,
    /// with its cursor.
    pub fn apply_snapshot(
        &mut self,
        input: &mut SnapshotReader<DynRead>,
        progress: &mut dyn FnMut(&ApplyStats),
    ) -> Result<ApplyStats> {
        self.run_apply(|t, committed| t.apply_snapshot_in(input, progress, committed))
    }

    fn apply_snapshot_in(
        &self,
        input: &mut SnapshotReader<DynRead>,
        progress: &mut dyn FnMut(&ApplyStats),
        committed: &mut ApplyStats,
    ) -> Result<ApplyStats> {
        let mut load = Load {
            target: self,
            c: self.client.as_ref().expect("connected"),
            tables: HashMap::new(),
            copy: None,
        };
        crate::destination::driver::apply_snapshot(&mut load, input, committed, progress)
    }

    /// Check or create the tables in force; with `deferred`, a table that
    /// does not match is noted instead of failing (see the SQLite target).
    /// `Ok(false)`: a stop was asked for between two tables (see the SQLite
    /// target); the caller rolls the batch back.
    fn ensure_in_force(
        &self,
        c: &Client,
        in_force: &mut Vec<Schema>,
        kind: SourceKind,
        tables: &mut HashMap<String, Table>,
        olds: &mut HashMap<String, Schema>,
        mut deferred: Option<&mut HashMap<String, Error>>,
    ) -> Result<bool> {
        // A replay overlapping the cursor (`deferred`) changes no table's
        // columns: its header is their shape at its start, which the
        // target may have moved past.
        let reshape = deferred.is_none();
        for s in in_force.drain(..) {
            if crate::util::stop::requested() {
                return Ok(false);
            }
            olds.insert(s.table.clone(), s.clone());
            let known = self
                .known
                .borrow()
                .get(&s.table)
                .filter(|t| t.schema == s)
                .cloned();
            if let Some(t) = known {
                tables.insert(s.table.clone(), t);
                continue;
            }
            match self.rt.block_on(self.ensure(c, &s, kind, reshape)) {
                Ok(t) => {
                    self.known.borrow_mut().insert(s.table.clone(), t.clone());
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

    /// A schema record in the batch's transaction: the table must be as the
    /// stream says it was before the change (or already after it).
    async fn evolve(
        &self,
        c: &Client,
        old: Option<&Schema>,
        ch: &SchemaChange,
        kind: SourceKind,
    ) -> Result<Table> {
        let new = &ch.schema;
        // The table changes: what was known of it no longer holds.
        self.known.borrow_mut().remove(&new.table);
        let Some(old) = old else {
            return self.ensure(c, new, kind, false).await;
        };
        let (ns, name) = target_name(&new.table, kind, &self.schema)?;
        let q = format!("{}.{}", quote_ident(&ns), quote_ident(&name));
        let (have, key) = read_columns(c, &ns, &name)
            .await?
            .ok_or_else(|| Error::state(format!("target table {q} is gone")))?;
        let names: Vec<&str> = have.iter().map(|c| c.name.as_str()).collect();
        let new_names: Vec<&str> = new.columns.iter().map(|c| c.name.as_str()).collect();
        if names == new_names && key == new.key {
            return self.ensure(c, new, kind, false).await;
        }
        let old_names: Vec<&str> = old.columns.iter().map(|c| c.name.as_str()).collect();
        if names != old_names || key != old.key {
            return Err(Error::state(format!(
                "schema change of table {:?}: the target table has columns {names:?} and key {key:?}, but the stream's schema before the change has columns {old_names:?} and key {:?}; the target diverges from the source (give it a new snapshot)",
                new.table, old.key
            )));
        }
        let mapped: Vec<&str> = old
            .key
            .iter()
            .map(|k| ch.new_name(k).unwrap_or(""))
            .collect();
        if mapped
            .iter()
            .copied()
            .ne(new.key.iter().map(String::as_str))
        {
            return Err(Error::state(format!(
                "schema change of table {:?}: the key changes from {:?} to {:?}, which a PostgreSQL target does not follow in place; give it a new snapshot of the table",
                new.table, old.key, new.key
            )));
        }
        let mut steps: Vec<String> = Vec::new();
        for oc in &old.columns {
            if ch.new_name(&oc.name).is_none() {
                steps.push(format!(
                    "ALTER TABLE {q} DROP COLUMN {}",
                    quote_ident(&oc.name)
                ));
            }
        }
        let temp = |i: usize| format!("_mooncdc_rename_{i}");
        for (i, r) in ch.renamed.iter().enumerate() {
            steps.push(format!(
                "ALTER TABLE {q} RENAME COLUMN {} TO {}",
                quote_ident(&r.from),
                quote_ident(&temp(i))
            ));
        }
        for (i, r) in ch.renamed.iter().enumerate() {
            steps.push(format!(
                "ALTER TABLE {q} RENAME COLUMN {} TO {}",
                quote_ident(&temp(i)),
                quote_ident(&r.to)
            ));
        }
        let from = ch.sources(old);
        for (j, nc) in new.columns.iter().enumerate() {
            match from[j] {
                None => {
                    let ty = self.column_type(c, nc, kind, &new.table).await?;
                    // Without NOT NULL: the rows the table holds get NULL
                    // (the stream does not say the source's default).
                    steps.push(format!(
                        "ALTER TABLE {q} ADD COLUMN {} {ty}",
                        quote_ident(&nc.name)
                    ));
                }
                Some(i) => {
                    let oc = &old.columns[i];
                    if kind == SourceKind::Postgres && oc.decl_type != nc.decl_type {
                        let ty = self.column_type(c, nc, kind, &new.table).await?;
                        steps.push(format!(
                            "ALTER TABLE {q} ALTER COLUMN {n} TYPE {ty} USING {n}::{ty}",
                            n = quote_ident(&nc.name)
                        ));
                    }
                    if have[i].not_null && nc.nullable && !new.key.contains(&nc.name) {
                        steps.push(format!(
                            "ALTER TABLE {q} ALTER COLUMN {} DROP NOT NULL",
                            quote_ident(&nc.name)
                        ));
                    }
                }
            }
        }
        if !steps.is_empty() {
            // ALTER TABLE refuses a table with deferred checks pending.
            steps.insert(
                0,
                "SET CONSTRAINTS ALL IMMEDIATE; SET CONSTRAINTS ALL DEFERRED".into(),
            );
        }
        for sql in steps {
            c.batch_execute(&sql)
                .await
                .map_err(pg_err("cannot change a target table's schema"))?;
        }
        self.ensure(c, new, kind, false).await
    }
}

/// One apply's state between the driver's steps (`destination/driver.rs`):
/// as for the SQLite target, the batch's tables, the stream's schema of
/// each, the tables whose check failed in an overlapping replay (a merged
/// stream may bring a change the target already made); and the statements
/// in flight, checked in order when run.
struct Batches<'a> {
    target: &'a PgTarget,
    c: &'a Client,
    on_conflict: OnConflict,
    tables: HashMap<String, Table>,
    olds: HashMap<String, Schema>,
    deferred: HashMap<String, Error>,
    ops: Vec<Op>,
    ops_bytes: usize,
    /// From a batch's header to its commit: a stop waits for the commit.
    busy: Option<crate::util::stop::Busy>,
}

impl BatchHooks for Batches<'_> {
    fn begin(&mut self) -> Result<Option<Cursor>> {
        drop(self.busy.replace(crate::util::stop::Busy::new()));
        let rt = &self.target.rt;
        rt.block_on(begin_with_cursor_table(self.c))
            .map_err(pg_err("cannot begin a batch"))?;
        let held = rt.block_on(read_cursor(self.c))?;
        self.tables.clear();
        self.olds.clear();
        self.deferred.clear();
        Ok(held)
    }

    fn tables(
        &mut self,
        in_force: &mut Vec<Schema>,
        kind: SourceKind,
        replay: bool,
    ) -> Result<bool> {
        self.target.ensure_in_force(
            self.c,
            in_force,
            kind,
            &mut self.tables,
            &mut self.olds,
            replay.then_some(&mut self.deferred),
        )
    }

    fn schema_change<R: std::io::BufRead>(
        &mut self,
        ch: SchemaChange,
        kind: SourceKind,
        _input: &mut BatchStreamReader<R>,
    ) -> Result<()> {
        let t = self.target.rt.block_on(self.target.evolve(
            self.c,
            self.olds.get(&ch.schema.table),
            &ch,
            kind,
        ))?;
        self.deferred.remove(&ch.schema.table);
        self.olds.insert(ch.schema.table.clone(), ch.schema.clone());
        self.tables.insert(ch.schema.table.clone(), t);
        Ok(())
    }

    fn event<R: std::io::BufRead>(
        &mut self,
        e: crate::wire::Event,
        input: &mut BatchStreamReader<R>,
    ) -> Result<()> {
        if let Some(err) = self.deferred.remove(&e.table) {
            return Err(input.locate(err));
        }
        let Some(t) = self.tables.get(&e.table) else {
            return Err(input.locate(Error::data(format!(
                "event {} is for table {:?}, which the stream gives no schema for (a PostgreSQL target needs the schemas in the batch header)",
                e.sequence, e.table
            ))));
        };
        let rt = &self.target.rt;
        if e.operation.is_truncate() {
            rt.block_on(run(self.c, &mut self.ops))?;
            // Deferred key checks queued by the batch are made now
            // (TRUNCATE refuses a table with pending ones).
            rt.block_on(self.c.batch_execute(&format!(
                "SET CONSTRAINTS ALL IMMEDIATE; SET CONSTRAINTS ALL DEFERRED; TRUNCATE {}",
                t.qname
            )))
            .map_err(pg_err("cannot truncate a target table"))?;
        } else {
            self.ops_bytes += event_bytes(&e);
            self.ops
                .extend(event_ops(t, &e, self.on_conflict).map_err(|err| input.locate(err))?);
            if self.ops.len() >= PIPELINE || self.ops_bytes >= PIPELINE_BYTES {
                self.ops_bytes = 0;
                rt.block_on(run(self.c, &mut self.ops))?;
            }
        }
        Ok(())
    }

    fn flush<R: std::io::BufRead>(&mut self, _input: &mut BatchStreamReader<R>) -> Result<()> {
        self.ops_bytes = 0;
        self.target.rt.block_on(run(self.c, &mut self.ops))
    }

    fn commit(&mut self, end: Option<&Cursor>) -> Result<()> {
        let rt = &self.target.rt;
        if let Some(end) = end {
            let seq = end.sequence().to_string();
            rt.block_on(self.c.execute(
                "INSERT INTO mooncdc.cursors (source, sequence) VALUES ($1, $2) \
                 ON CONFLICT (source) DO UPDATE SET sequence = EXCLUDED.sequence",
                &[&end.source, &seq],
            ))
            .map_err(pg_err("cannot store the cursor"))?;
        }
        rt.block_on(self.c.batch_execute("COMMIT"))
            .map_err(commit_error)?;
        drop(self.busy.take());
        Ok(())
    }

    fn rollback(&mut self) {
        self.target.roll_back(self.c);
        self.ops.clear();
        drop(self.busy.take());
    }
}

/// One snapshot load's state between the driver's steps: its tables, and
/// the COPY of the table whose rows are coming.
struct Load<'a> {
    target: &'a PgTarget,
    c: &'a Client,
    tables: HashMap<String, Table>,
    copy: Option<(String, Loader)>,
}

impl Load<'_> {
    /// End the COPY in progress, its rows all written.
    fn end_copy(&mut self) -> Result<()> {
        if let Some((t, mut l)) = self.copy.take() {
            let rt = &self.target.rt;
            rt.block_on(l.write_held(&self.tables[&t]))?;
            rt.block_on(l.finish(self.c))?;
        }
        Ok(())
    }
}

impl SnapshotHooks for Load<'_> {
    fn begin(&mut self) -> Result<Option<Cursor>> {
        let rt = &self.target.rt;
        rt.block_on(begin_with_cursor_table(self.c))
            .map_err(pg_err("cannot begin the snapshot"))?;
        rt.block_on(read_cursor(self.c))
    }

    fn tables(&mut self, schemas: &[Schema], kind: SourceKind) -> Result<()> {
        let rt = &self.target.rt;
        for s in schemas {
            let t = rt.block_on(self.target.ensure(self.c, s, kind, false))?;
            let held: bool = rt
                .block_on(
                    self.c
                        .query_one(&format!("SELECT EXISTS (SELECT 1 FROM {})", t.qname), &[]),
                )
                .map_err(pg_err("cannot read a target table"))?
                .get(0);
            if held {
                match self.target.options.existing_rows {
                    ExistingRows::Refuse => {
                        return Err(crate::destination::existing_rows_error(&s.table))
                    }
                    // In the snapshot's transaction: a bad snapshot leaves
                    // the rows as they were.
                    ExistingRows::Replace => rt
                        .block_on(self.c.batch_execute(&format!("TRUNCATE {}", t.qname)))
                        .map_err(pg_err("cannot empty a target table"))?,
                    ExistingRows::Keep => {}
                }
            }
            self.tables.insert(s.table.clone(), t);
        }
        Ok(())
    }

    fn row<R: std::io::BufRead>(
        &mut self,
        table: String,
        row: Row,
        _cursor: &Cursor,
        _input: &mut SnapshotReader<R>,
    ) -> Result<()> {
        let rt = &self.target.rt;
        if self.copy.as_ref().is_none_or(|(t, _)| *t != table) {
            self.end_copy()?;
            let t = &self.tables[&table];
            self.copy = Some((table.clone(), rt.block_on(Loader::start(self.c, t))?));
        }
        let t = &self.tables[&table];
        let (_, l) = self.copy.as_mut().expect("started");
        check_row(t, &row, None)?;
        l.rows.push(row);
        if l.rows.len() >= COPY_CHUNK {
            rt.block_on(l.write_held(t))?;
        }
        Ok(())
    }

    fn commit<R: std::io::BufRead>(
        &mut self,
        cursor: &Cursor,
        _input: &mut SnapshotReader<R>,
    ) -> Result<()> {
        self.end_copy()?;
        let rt = &self.target.rt;
        let busy = crate::util::stop::Busy::new();
        rt.block_on(self.c.execute(
            "INSERT INTO mooncdc.cursors (source, sequence) VALUES ($1, $2)",
            &[&cursor.source, &cursor.sequence().to_string()],
        ))
        .map_err(pg_err("cannot store the cursor"))?;
        rt.block_on(self.c.batch_execute("COMMIT"))
            .map_err(commit_error)?;
        drop(busy);
        Ok(())
    }

    fn rollback(&mut self) {
        self.copy = None;
        self.target.roll_back(self.c);
    }
}
