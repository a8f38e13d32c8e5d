//! Applying batch streams (one transaction per batch, statements pipelined)
//! and snapshots (binary COPY), and schema changes in the batch's
//! transaction.

use super::*;
use crate::destination::BatchGate;
use crate::wire::{SchemaChange, Sequence};
use tokio_postgres::binary_copy::BinaryCopyInWriter;

/// Statements in flight at most before their results are checked…
const PIPELINE: usize = 512;
/// …and the bytes of their values at most (memory bounded by this, not by
/// the size of a batch or of its values).
const PIPELINE_BYTES: usize = 16 << 20;

fn event_bytes(e: &crate::wire::Event) -> usize {
    let row = |r: &Option<Row>| {
        r.iter()
            .flatten()
            .map(|v| match v {
                Value::Text(s) => 32 + s.len(),
                Value::Blob(b) => 32 + b.len(),
                _ => 32,
            })
            .sum::<usize>()
    };
    2 * (row(&e.before) + row(&e.after))
}

/// One statement waiting to be sent, and what its result must be.
struct Op {
    stmt: Statement,
    params: Vec<Box<dyn ToSql + Sync + Send>>,
    /// Rows it must change (`None`: any number).
    expect: Option<u64>,
    sequence: Sequence,
    what: &'static str,
    table: String,
    key: String,
}

async fn run(c: &Client, ops: &mut Vec<Op>) -> Result<()> {
    let results = futures_util::future::join_all(ops.iter().map(|op| async move {
        let params: Vec<&(dyn ToSql + Sync)> = op
            .params
            .iter()
            .map(|p| &**p as &(dyn ToSql + Sync))
            .collect();
        c.execute(&op.stmt, &params).await
    }))
    .await;
    for (op, r) in ops.iter().zip(results) {
        match r {
            Ok(n) if op.expect.is_none_or(|e| e == n) => {}
            Ok(_) => {
                return Err(Error::state(format!(
                    "event {} ({} on table {:?}, key {}): {}; the target diverges from the source (--on-conflict overwrite forces it)",
                    op.sequence,
                    op.what,
                    op.table,
                    op.key,
                    match op.what {
                        "insert" => "the target already holds a row with this key",
                        _ => "no stored row has this key and the before image",
                    }
                )))
            }
            Err(e) => {
                return Err(pg_err(&format!(
                    "event {} ({} on table {:?}, key {}) failed",
                    op.sequence, op.what, op.table, op.key
                ))(e))
            }
        }
    }
    ops.clear();
    Ok(())
}

fn key_text(t: &Table, row: &Row) -> String {
    let key: Vec<Value> = t.key.iter().map(|&i| row[i].clone()).collect();
    let mut out = Vec::new();
    crate::wire::value::write_row(&mut out, &key);
    String::from_utf8(out).unwrap_or_default()
}

fn params(
    t: &Table,
    row: &Row,
    seq: Option<Sequence>,
) -> Result<Vec<Box<dyn ToSql + Sync + Send>>> {
    if row.len() != t.cols.len() {
        return Err(Error::data(format!(
            "a row of {} values for table {:?} of {} columns",
            row.len(),
            t.schema.table,
            t.cols.len()
        )));
    }
    let at = || seq.map_or("snapshot row".to_string(), |s| format!("event {s}"));
    t.cols
        .iter()
        .zip(row)
        .map(|(c, v)| param(c, v, &t.schema.table, &at))
        .collect()
}

/// The statements for one event.
fn event_ops(t: &Table, e: &crate::wire::Event, on_conflict: OnConflict) -> Result<Vec<Op>> {
    let op = |stmt: &Statement, p, expect, key: String| Op {
        stmt: stmt.clone(),
        params: p,
        expect,
        sequence: e.sequence,
        what: e.operation.as_str(),
        table: e.table.clone(),
        key,
    };
    let s = Some(e.sequence);
    let overwrite = on_conflict == OnConflict::Overwrite;
    Ok(match (e.operation, &e.before, &e.after) {
        (Operation::Insert, _, Some(a)) => {
            let k = key_text(t, a);
            if overwrite {
                let mut p = params(t, a, s)?;
                p.extend(params(t, a, s)?);
                vec![op(&t.upsert, p, None, k)]
            } else {
                vec![op(&t.insert, params(t, a, s)?, Some(1), k)]
            }
        }
        (Operation::Update, Some(b), Some(a)) => {
            let k = key_text(t, b);
            let mut p = params(t, b, s)?;
            p.extend(params(t, a, s)?);
            if overwrite {
                vec![op(&t.upsert, p, None, k)]
            } else {
                vec![op(&t.update, p, Some(1), k)]
            }
        }
        (Operation::Delete, Some(b), _) => {
            let k = key_text(t, b);
            if overwrite {
                vec![op(&t.delete_any, params(t, b, s)?, None, k)]
            } else {
                vec![op(&t.delete, params(t, b, s)?, Some(1), k)]
            }
        }
        _ => unreachable!("checked images"),
    })
}

/// BEGIN, and the cursor table when it is missing (only then: a role given
/// rights on a `mooncdc` schema made by its DBA need not create anything).
async fn begin_with_cursor_table(c: &Client) -> std::result::Result<(), tokio_postgres::Error> {
    c.batch_execute("BEGIN").await?;
    let exists: bool = c
        .query_one("SELECT to_regclass('mooncdc.cursors') IS NOT NULL", &[])
        .await?
        .get(0);
    if !exists {
        c.batch_execute(
            "CREATE SCHEMA IF NOT EXISTS mooncdc; \
             CREATE TABLE IF NOT EXISTS mooncdc.cursors (source text PRIMARY KEY, sequence text NOT NULL)",
        )
        .await?;
    }
    Ok(())
}

/// A deferred key check failing at the commit: which table and key.
fn commit_error(e: tokio_postgres::Error) -> Error {
    if let Some(d) = e.as_db_error() {
        if d.code() == &tokio_postgres::error::SqlState::UNIQUE_VIOLATION {
            return Error::state(format!(
                "at the batch's commit, table {}.{} holds a key twice ({}): the batch inserts or moves a row onto a key the target holds; the target diverges from the source (--on-conflict overwrite forces it); nothing of the batch was applied",
                d.schema().unwrap_or("?"),
                d.table().unwrap_or("?"),
                d.detail().unwrap_or("")
            ));
        }
    }
    pg_err("cannot commit the batch")(e)
}

impl PgTarget {
    /// Apply a batch stream: each batch in one transaction with its cursor.
    pub fn apply_stream(
        &mut self,
        input: &mut BatchStreamReader<DynRead>,
        progress: &mut dyn FnMut(&ApplyStats),
    ) -> Result<ApplyStats> {
        self.run_apply(|t, committed| t.apply_stream_in(input, progress, committed))
    }

    /// One apply: connected first; on failure the open transaction is rolled
    /// back; what was committed is kept for the summary.
    fn run_apply(
        &mut self,
        body: impl FnOnce(&Self, &mut ApplyStats) -> Result<ApplyStats>,
    ) -> Result<ApplyStats> {
        self.client()?;
        let mut committed = ApplyStats::default();
        let result = body(self, &mut committed);
        if result.is_err() {
            if let Some(c) = &self.client {
                let _ = self.rt.block_on(c.batch_execute("ROLLBACK"));
            }
            self.known.borrow_mut().clear();
        }
        self.committed = committed;
        result
    }

    fn apply_stream_in(
        &self,
        input: &mut BatchStreamReader<DynRead>,
        progress: &mut dyn FnMut(&ApplyStats),
        committed: &mut ApplyStats,
    ) -> Result<ApplyStats> {
        let rt = &self.rt;
        let c = self.client.as_ref().expect("connected");
        let on_conflict = self.options.on_conflict;
        let mut stats = ApplyStats {
            cursor: rt.block_on(stored_cursor(c))?,
            ..Default::default()
        };
        *committed = stats.clone();
        let mut tables: HashMap<String, Table> = HashMap::new();
        let mut gate: Option<BatchGate> = None;
        let mut pending: Vec<SchemaChange> = Vec::new();
        let mut in_force: Vec<Schema> = Vec::new();
        let mut ensured = false;
        let mut kind = SourceKind::Sqlite;
        // As for the SQLite target: the stream's schemas in force, and tables
        // whose check failed in an overlapping replay (a merged stream may
        // bring a change the target already made).
        let mut olds: HashMap<String, Schema> = HashMap::new();
        let mut deferred: HashMap<String, Error> = HashMap::new();
        let mut ops: Vec<Op> = Vec::new();
        let mut ops_bytes = 0usize;
        let mut busy: Option<crate::util::stop::Busy> = None;
        while let Some(item) = input.next_item()? {
            match item {
                Item::Header(h) => {
                    drop(busy.replace(crate::util::stop::Busy::new()));
                    rt.block_on(begin_with_cursor_table(c))
                        .map_err(pg_err("cannot begin a batch"))?;
                    gate = Some(BatchGate::open(rt.block_on(read_cursor(c))?.as_ref(), &h)?);
                    kind = SourceKind::of_identity(&h.start.source);
                    tables.clear();
                    pending.clear();
                    olds.clear();
                    deferred.clear();
                    in_force = h.schemas.clone().unwrap_or_default();
                    // As for the other targets: a batch that overlaps the
                    // cursor is checked at its first event not yet held.
                    ensured = false;
                    if !gate.as_ref().expect("opened").overlaps() {
                        self.ensure_in_force(c, &mut in_force, kind, &mut tables, &mut olds, None)?;
                        ensured = true;
                    }
                }
                Item::Schema(ch) => pending.push(ch),
                Item::Event(e) => {
                    if gate.as_ref().expect("validated stream").holds(e.sequence) {
                        crate::wire::put_in_force(&mut in_force, &mut pending);
                        stats.skipped += 1;
                        continue;
                    }
                    if !ensured {
                        self.ensure_in_force(
                            c,
                            &mut in_force,
                            kind,
                            &mut tables,
                            &mut olds,
                            Some(&mut deferred),
                        )?;
                        ensured = true;
                    }
                    if !pending.is_empty() {
                        rt.block_on(run(c, &mut ops))?;
                        for ch in pending.drain(..) {
                            let t = rt
                                .block_on(self.evolve(c, olds.get(&ch.schema.table), &ch, kind))
                                .map_err(|err| input.locate(err))?;
                            deferred.remove(&ch.schema.table);
                            olds.insert(ch.schema.table.clone(), ch.schema.clone());
                            tables.insert(ch.schema.table.clone(), t);
                        }
                    }
                    if let Some(err) = deferred.remove(&e.table) {
                        return Err(input.locate(err));
                    }
                    if !tables.contains_key(&e.table) {
                        return Err(input.locate(Error::data(format!(
                            "event {} is for table {:?}, which the stream gives no schema for (a PostgreSQL target needs the schemas in the batch header)",
                            e.sequence, e.table
                        ))));
                    }
                    let t = &tables[&e.table];
                    if e.operation.is_truncate() {
                        rt.block_on(run(c, &mut ops))?;
                        // Deferred key checks queued by the batch are made
                        // now (TRUNCATE refuses a table with pending ones).
                        rt.block_on(c.batch_execute(&format!(
                            "SET CONSTRAINTS ALL IMMEDIATE; SET CONSTRAINTS ALL DEFERRED; TRUNCATE {}",
                            t.qname
                        )))
                        .map_err(pg_err("cannot truncate a target table"))?;
                    } else {
                        ops_bytes += event_bytes(&e);
                        ops.extend(event_ops(t, &e, on_conflict).map_err(|err| input.locate(err))?);
                        if ops.len() >= PIPELINE || ops_bytes >= PIPELINE_BYTES {
                            ops_bytes = 0;
                            rt.block_on(run(c, &mut ops))?;
                        }
                    }
                    stats.applied += 1;
                    if stats.applied % 65536 == 0 {
                        progress(&stats);
                    }
                }
                Item::Commit(cm) => {
                    rt.block_on(run(c, &mut ops))?;
                    let moves = gate.take().expect("validated stream").close(&cm.end)?;
                    if moves && !pending.is_empty() {
                        if !ensured {
                            self.ensure_in_force(
                                c,
                                &mut in_force,
                                kind,
                                &mut tables,
                                &mut olds,
                                Some(&mut deferred),
                            )?;
                            ensured = true;
                        }
                        for ch in pending.drain(..) {
                            let t =
                                rt.block_on(self.evolve(c, olds.get(&ch.schema.table), &ch, kind))?;
                            deferred.remove(&ch.schema.table);
                            olds.insert(ch.schema.table.clone(), ch.schema.clone());
                            tables.insert(ch.schema.table.clone(), t);
                        }
                    }
                    if moves {
                        let seq = cm.end.sequence().to_string();
                        rt.block_on(c.execute(
                            "INSERT INTO mooncdc.cursors (source, sequence) VALUES ($1, $2) \
                             ON CONFLICT (source) DO UPDATE SET sequence = EXCLUDED.sequence",
                            &[&cm.end.source, &seq],
                        ))
                        .map_err(pg_err("cannot store the cursor"))?;
                        stats.cursor = Some(cm.end.clone());
                    }
                    rt.block_on(c.batch_execute("COMMIT"))
                        .map_err(commit_error)?;
                    drop(busy.take());
                    stats.batches += 1;
                    *committed = stats.clone();
                    progress(&stats);
                    if crate::util::stop::requested() {
                        break;
                    }
                }
            }
        }
        Ok(stats)
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
        let rt = &self.rt;
        let c = self.client.as_ref().expect("connected");
        let existing = self.options.existing_rows;
        let mut stats = ApplyStats::default();
        let mut tables: HashMap<String, Table> = HashMap::new();
        let mut cursor: Option<Cursor> = None;
        let mut copy: Option<(String, Loader)> = None;
        while let Some(item) = input.next_item()? {
            match item {
                SnapItem::Header {
                    cursor: cur,
                    schemas,
                } => {
                    rt.block_on(begin_with_cursor_table(c))
                        .map_err(pg_err("cannot begin the snapshot"))?;
                    crate::destination::snapshot_allowed(rt.block_on(read_cursor(c))?.as_ref())?;
                    let kind = SourceKind::of_identity(&cur.source);
                    for s in &schemas {
                        let t = rt.block_on(self.ensure(c, s, kind))?;
                        let held: bool = rt
                            .block_on(c.query_one(
                                &format!("SELECT EXISTS (SELECT 1 FROM {})", t.qname),
                                &[],
                            ))
                            .map_err(pg_err("cannot read a target table"))?
                            .get(0);
                        if held {
                            match existing {
                                ExistingRows::Refuse => {
                                    return Err(crate::destination::existing_rows_error(&s.table))
                                }
                                // In the snapshot's transaction: a bad
                                // snapshot leaves the rows as they were.
                                ExistingRows::Replace => rt
                                    .block_on(c.batch_execute(&format!("TRUNCATE {}", t.qname)))
                                    .map_err(pg_err("cannot empty a target table"))?,
                                ExistingRows::Keep => {}
                            }
                        }
                        tables.insert(s.table.clone(), t);
                    }
                    cursor = Some(cur);
                }
                SnapItem::Row { table, row } => {
                    if copy.as_ref().is_none_or(|(t, _)| *t != table) {
                        if let Some((t, mut l)) = copy.take() {
                            rt.block_on(l.write_held(&tables[&t]))?;
                            rt.block_on(l.finish(c))?;
                        }
                        let t = &tables[&table];
                        copy = Some((table.clone(), rt.block_on(Loader::start(c, t))?));
                    }
                    let t = &tables[&table];
                    let (_, l) = copy.as_mut().expect("started");
                    check_row(t, &row, None)?;
                    l.rows.push(row);
                    if l.rows.len() >= COPY_CHUNK {
                        rt.block_on(l.write_held(t))?;
                    }
                    stats.applied += 1;
                    if stats.applied % 65536 == 0 {
                        progress(&stats);
                    }
                }
                SnapItem::Commit { .. } => {
                    if let Some((t, mut l)) = copy.take() {
                        rt.block_on(l.write_held(&tables[&t]))?;
                        rt.block_on(l.finish(c))?;
                    }
                    let cur = cursor.take().expect("validated snapshot");
                    let busy = crate::util::stop::Busy::new();
                    rt.block_on(c.execute(
                        "INSERT INTO mooncdc.cursors (source, sequence) VALUES ($1, $2)",
                        &[&cur.source, &cur.sequence().to_string()],
                    ))
                    .map_err(pg_err("cannot store the cursor"))?;
                    rt.block_on(c.batch_execute("COMMIT"))
                        .map_err(commit_error)?;
                    drop(busy);
                    stats.batches += 1;
                    stats.cursor = Some(cur);
                    *committed = stats.clone();
                    progress(&stats);
                }
            }
        }
        Ok(stats)
    }

    /// Check or create the tables in force; with `deferred`, a table that
    /// does not match is noted instead of failing (see the SQLite target).
    fn ensure_in_force(
        &self,
        c: &Client,
        in_force: &mut Vec<Schema>,
        kind: SourceKind,
        tables: &mut HashMap<String, Table>,
        olds: &mut HashMap<String, Schema>,
        mut deferred: Option<&mut HashMap<String, Error>>,
    ) -> Result<()> {
        for s in in_force.drain(..) {
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
            match self.rt.block_on(self.ensure(c, &s, kind)) {
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
        Ok(())
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
            return self.ensure(c, new, kind).await;
        };
        let (ns, name) = target_name(&new.table, kind, &self.schema)?;
        let q = format!("{}.{}", quote_ident(&ns), quote_ident(&name));
        let (have, key) = read_columns(c, &ns, &name)
            .await?
            .ok_or_else(|| Error::state(format!("target table {q} is gone")))?;
        let names: Vec<&str> = have.iter().map(|c| c.name.as_str()).collect();
        let new_names: Vec<&str> = new.columns.iter().map(|c| c.name.as_str()).collect();
        if names == new_names && key == new.key {
            return self.ensure(c, new, kind).await;
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
                    let ty = column_type(c, nc, kind, &new.table).await?;
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
                        let ty = column_type(c, nc, kind, &new.table).await?;
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
        self.ensure(c, new, kind).await
    }
}

/// A table's snapshot rows going into the target: straight into it with
/// binary COPY when every column is one of the native types, else into a
/// staging table of native types whose rows are then cast into it.
struct Loader {
    writer: std::pin::Pin<Box<BinaryCopyInWriter>>,
    /// The INSERT … SELECT from staging, when staged.
    staged: Option<String>,
    /// Rows checked and waiting to be written (up to [`COPY_CHUNK`]), so the
    /// runtime is entered once per chunk, not per row.
    rows: Vec<Row>,
}

/// Snapshot rows written to the COPY in one go.
const COPY_CHUNK: usize = 1024;

/// A value as a COPY field, borrowed (its class was checked by
/// [`check_row`]): no copy of text or bytes.
#[derive(Debug)]
struct Field<'a>(&'a Value, Param);

impl ToSql for Field<'_> {
    fn to_sql(
        &self,
        ty: &Type,
        out: &mut bytes::BytesMut,
    ) -> std::result::Result<tokio_postgres::types::IsNull, Box<dyn std::error::Error + Sync + Send>>
    {
        match (self.0, self.1) {
            (Value::Null, _) => Ok(tokio_postgres::types::IsNull::Yes),
            (Value::Integer(i), Param::Bool) => (*i == 1).to_sql(ty, out),
            // Straight into an integer or smallint column: its own width,
            // refused out of range as the cast would be.
            (Value::Integer(i), _) if *ty == Type::INT4 => i32::try_from(*i)
                .map_err(|_| format!("integer {i} out of range for type integer"))?
                .to_sql(ty, out),
            (Value::Integer(i), _) if *ty == Type::INT2 => i16::try_from(*i)
                .map_err(|_| format!("integer {i} out of range for type smallint"))?
                .to_sql(ty, out),
            (Value::Integer(i), _) => i.to_sql(ty, out),
            (Value::Real(x), _) => crate::wire::value::normalize_zero(*x).to_sql(ty, out),
            (Value::Blob(b), _) => b.as_slice().to_sql(ty, out),
            (Value::Text(s), _) => s.as_str().to_sql(ty, out),
        }
    }

    fn accepts(_: &Type) -> bool {
        true
    }

    tokio_postgres::types::to_sql_checked!();
}

/// Check a row's values against the table's columns (as [`params`] does).
fn check_row(t: &Table, row: &Row, seq: Option<Sequence>) -> Result<()> {
    if row.len() != t.cols.len() {
        return Err(Error::data(format!(
            "a row of {} values for table {:?} of {} columns",
            row.len(),
            t.schema.table,
            t.cols.len()
        )));
    }
    let at = || seq.map_or("snapshot row".to_string(), |s| format!("event {s}"));
    for (c, v) in t.cols.iter().zip(row) {
        check_value(c, v, &t.schema.table, &at)?;
    }
    Ok(())
}

impl Loader {
    async fn start(c: &Client, t: &Table) -> Result<Loader> {
        // The binary type a column takes straight from COPY, if it is one
        // whose wire form the values have (integers in their own width).
        let native = |col: &Col| match (col.param, col.sql_type.as_str()) {
            (Param::Int8, "bigint") => Some(Type::INT8),
            (Param::Int8, "integer") => Some(Type::INT4),
            (Param::Int8, "smallint") => Some(Type::INT2),
            (Param::Float8, "double precision") => Some(Type::FLOAT8),
            (Param::Bool, "boolean") => Some(Type::BOOL),
            (Param::Bytea, "bytea") => Some(Type::BYTEA),
            (Param::Text, "text") => Some(Type::TEXT),
            _ => None,
        };
        let direct: Option<Vec<Type>> = t.cols.iter().map(native).collect();
        let names: Vec<String> = t.cols.iter().map(|c| quote_ident(&c.name)).collect();
        let types: Vec<Type> = match &direct {
            Some(types) => types.clone(),
            None => t.cols.iter().map(|c| c.param.pg_type()).collect(),
        };
        let (into, staged) = if direct.is_some() {
            (format!("{} ({})", t.qname, names.join(", ")), None)
        } else {
            let defs: Vec<String> = t
                .cols
                .iter()
                .zip(&names)
                .map(|(c, n)| format!("{n} {}", c.param.pg_type().name()))
                .collect();
            c.batch_execute(&format!(
                "CREATE TEMP TABLE IF NOT EXISTS _mooncdc_staging ({}) ON COMMIT DROP; TRUNCATE _mooncdc_staging",
                defs.join(", ")
            ))
            .await
            .map_err(pg_err("cannot create a staging table"))?;
            let casts: Vec<String> = t
                .cols
                .iter()
                .zip(&names)
                .map(|(c, n)| format!("{n}::{}", c.sql_type))
                .collect();
            (
                "_mooncdc_staging".to_string(),
                Some(format!(
                    "INSERT INTO {} ({}) SELECT {} FROM _mooncdc_staging; DROP TABLE _mooncdc_staging",
                    t.qname,
                    names.join(", "),
                    casts.join(", ")
                )),
            )
        };
        let sink = c
            .copy_in(&format!("COPY {into} FROM STDIN (FORMAT binary)"))
            .await
            .map_err(pg_err("cannot start a COPY"))?;
        Ok(Loader {
            writer: Box::pin(BinaryCopyInWriter::new(sink, &types)),
            staged,
            rows: Vec::with_capacity(COPY_CHUNK),
        })
    }

    /// Write the rows held.
    async fn write_held(&mut self, t: &Table) -> Result<()> {
        for row in self.rows.drain(..) {
            let fields: Vec<Field<'_>> = row
                .iter()
                .zip(&t.cols)
                .map(|(v, c)| Field(v, c.param))
                .collect();
            let refs: Vec<&(dyn ToSql + Sync)> =
                fields.iter().map(|f| f as &(dyn ToSql + Sync)).collect();
            self.writer
                .as_mut()
                .write(&refs)
                .await
                .map_err(pg_err(&format!(
                    "COPY into table {:?} failed",
                    t.schema.table
                )))?;
        }
        Ok(())
    }

    async fn finish(self, c: &Client) -> Result<()> {
        let mut w = self.writer;
        w.as_mut().finish().await.map_err(pg_err("COPY failed"))?;
        if let Some(sql) = self.staged {
            c.batch_execute(&sql)
                .await
                .map_err(pg_err("cannot move staged rows into a target table"))?;
        }
        Ok(())
    }
}
