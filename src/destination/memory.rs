//! An in-memory projection: the target contract without a database. It is
//! the contract double: the contract tests (`tests/contract.rs`) run the same
//! cases against it and the real targets, through the same driver
//! (`apply_stream`), and the property tests use its per-batch model
//! ([`MemoryTarget::apply`], which checks the cursor rules itself) as the
//! model of a target.

use super::driver::{BatchHooks, SnapshotHooks};
use super::{ApplyStats, AuditedTarget, ExistingRows, PullRow, StoredShape, Target, TargetOptions};
use crate::error::{Error, Result};
use crate::wire::batch::{shapes, TableShape};
use crate::wire::value::key_cmp;
use crate::wire::value::{write_row, Value};
use crate::wire::SourceKind;
use crate::wire::{
    Batch, BatchStreamReader, Cursor, DynRead, Operation, Row, Schema, SnapshotReader,
};
use crate::wire::{Event, Header, SchemaChange};
use std::collections::{BTreeMap, HashMap};
use std::io::BufRead;

#[derive(Debug, Default, Clone, PartialEq)]
pub struct MemoryTarget {
    pub cursor: Option<Cursor>,
    /// table → encoded key → row
    pub tables: BTreeMap<String, BTreeMap<Vec<u8>, Row>>,
    /// The schemas of the tables it was given.
    pub schemas: BTreeMap<String, Schema>,
    pub committed: ApplyStats,
    pub options: TargetOptions,
}

fn encode_key(shape: &TableShape, row: &[Value]) -> Vec<u8> {
    let key: Vec<Value> = shape.key.iter().map(|&i| row[i].clone()).collect();
    let mut out = Vec::new();
    write_row(&mut out, &key);
    out
}

impl MemoryTarget {
    pub fn new() -> Self {
        Self::default()
    }

    /// Apply one batch under the target contract; on error nothing changes.
    pub fn apply(&mut self, batch: &Batch) -> Result<()> {
        let schemas = batch
            .schemas
            .as_deref()
            .ok_or_else(|| Error::data("the memory target needs schemas"))?;
        shapes(schemas)?;
        let gate = super::BatchGate::open(self.cursor.as_ref(), &batch.header())?;
        if !gate.close(&batch.end)? {
            return Ok(()); // already held
        }
        // A batch overlapping the cursor describes tables as they were at its
        // start; the target's own schemas (with the changes it holds) win.
        let mut next_schemas = self.schemas.clone();
        let mut next = self.tables.clone();
        for s in schemas {
            if gate.overlaps() && next_schemas.contains_key(&s.table) {
                continue;
            }
            // Like the database targets: a table the header gives another
            // shape follows it only when the shape says how (columns added
            // at the end, or dropped and nothing else).
            if let Some(old) = next_schemas.get(&s.table) {
                let have: Vec<&str> = old.columns.iter().map(|c| c.name.as_str()).collect();
                let keep: Vec<Option<usize>> = match super::HeaderShape::of(&have, Some(&old.key), s)
                {
                    super::HeaderShape::Same => (0..have.len()).map(Some).collect(),
                    super::HeaderShape::Added => (0..s.columns.len())
                        .map(|j| (j < have.len()).then_some(j))
                        .collect(),
                    super::HeaderShape::Dropped(gone) => (0..have.len())
                        .filter(|i| !gone.contains(i))
                        .map(Some)
                        .collect(),
                    super::HeaderShape::Unknown => {
                        return Err(Error::state(format!(
                            "table {:?} has columns {have:?} and key {:?}, but the stream's schema has columns {:?} and key {:?}; the stream does not say how one became the other",
                            s.table,
                            old.key,
                            s.columns.iter().map(|c| &c.name).collect::<Vec<_>>(),
                            s.key
                        )))
                    }
                };
                if let Some(rows) = next.get_mut(&s.table) {
                    for row in rows.values_mut() {
                        *row = keep
                            .iter()
                            .map(|k| k.map_or(Value::Null, |i| row[i].clone()))
                            .collect();
                    }
                }
            }
            next_schemas.insert(s.table.clone(), s.clone());
        }
        let mut shapes: HashMap<String, TableShape> = next_schemas
            .values()
            .map(|s| {
                (
                    s.table.clone(),
                    TableShape {
                        width: s.columns.len(),
                        key: s.key_indices(),
                    },
                )
            })
            .collect();
        let mut changes = batch.changes.iter().peekable();
        for i in 0..=batch.events.len() {
            // A schema change goes with the event after it (at the end, with
            // the batch's end, which moves the cursor), and is made once.
            let e = batch.events.get(i);
            while let Some((_, c)) = changes.next_if(|(at, _)| *at == i) {
                if e.is_some_and(|e| gate.holds(e.sequence))
                    || next_schemas.get(&c.schema.table) == Some(&c.schema)
                {
                    continue;
                }
                let shape = TableShape {
                    width: c.schema.columns.len(),
                    key: c.schema.key_indices(),
                };
                if let Some(old) = next_schemas.get(&c.schema.table) {
                    // Like the database targets: a new key is not followed.
                    let key: Vec<&str> = old
                        .key
                        .iter()
                        .map(|k| c.new_name(k).unwrap_or(""))
                        .collect();
                    if key.iter().ne(c.schema.key.iter()) {
                        return Err(Error::state(format!(
                            "schema change of table {:?}: the key changes from {:?} to {:?}",
                            c.schema.table, old.key, c.schema.key
                        )));
                    }
                    let from = c.sources(old);
                    let rows = next.remove(&c.schema.table).unwrap_or_default();
                    let t = next.entry(c.schema.table.clone()).or_default();
                    for row in rows.into_values() {
                        let row: Row = from
                            .iter()
                            .map(|f| f.map_or(Value::Null, |j| row[j].clone()))
                            .collect();
                        t.insert(encode_key(&shape, &row), row);
                    }
                }
                next_schemas.insert(c.schema.table.clone(), c.schema.clone());
                shapes.insert(c.schema.table.clone(), shape);
            }
            let Some(e) = e else { break };
            if gate.holds(e.sequence) {
                continue;
            }
            let shape = &shapes[&e.table];
            let t = next.entry(e.table.clone()).or_default();
            let same =
                |a: &Row, b: &Row| a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.same(y));
            match e.operation {
                Operation::Truncate { .. } => t.clear(),
                Operation::Insert => {
                    let after = e.after.as_ref().expect("insert");
                    let k = encode_key(shape, after);
                    if t.contains_key(&k) {
                        return Err(Error::state(format!(
                            "insert {} of an existing key",
                            e.sequence
                        )));
                    }
                    t.insert(k, after.clone());
                }
                Operation::Update | Operation::Delete => {
                    e.check_key(&shape.key).map_err(Error::data)?;
                    let k = match (&e.before, &e.before_key) {
                        (Some(before), _) => encode_key(shape, before),
                        (None, Some(key)) => {
                            let mut out = Vec::new();
                            write_row(&mut out, key);
                            out
                        }
                        (None, None) => unreachable!("checked images"),
                    };
                    // A key-only old row: the stored row is the old row,
                    // and fills the after image's unchanged values.
                    let stored = match t.get(&k) {
                        Some(old) if e.before.as_ref().is_none_or(|b| same(old, b)) => old.clone(),
                        _ => {
                            return Err(Error::state(format!(
                                "{} {}: before image differs from the stored row",
                                e.operation.as_str(),
                                e.sequence
                            )))
                        }
                    };
                    t.remove(&k);
                    if let Some(after) = &e.after {
                        let after: Row = (after.iter().zip(&stored))
                            .map(|(v, s)| {
                                if v.is_unchanged() {
                                    s.clone()
                                } else {
                                    v.clone()
                                }
                            })
                            .collect();
                        let after = &after;
                        let k2 = encode_key(shape, after);
                        if t.contains_key(&k2) {
                            return Err(Error::state(format!(
                                "update {} onto an existing key",
                                e.sequence
                            )));
                        }
                        t.insert(k2, after.clone());
                    }
                }
            }
        }
        next.retain(|_, t| !t.is_empty());
        self.tables = next;
        self.schemas = next_schemas;
        self.cursor = Some(batch.end.clone());
        Ok(())
    }
}

/// The double's part of the driver's batch loop: what the driver hands it
/// of a batch (the events it does not hold, with the schemas in force where
/// they start) is gathered into a batch of its own, which the model,
/// [`MemoryTarget::apply`], applies whole at the commit.
struct Staged<'a> {
    t: &'a mut MemoryTarget,
    /// The cursor held at the batch's start.
    held: Option<Cursor>,
    piece: Option<Batch>,
}

impl BatchHooks for Staged<'_> {
    fn begin(&mut self) -> Result<Option<Cursor>> {
        self.held = self.t.cursor.clone();
        self.piece = None;
        Ok(self.held.clone())
    }

    fn header(&mut self, h: &Header) -> Result<()> {
        let start = super::resume_point(self.held.as_ref(), &h.start);
        self.piece = Some(Batch {
            end: start.clone(),
            start,
            high_water: h.high_water,
            // Until `tables` says which are in force where the piece starts.
            schemas: None,
            compacted: h.compacted,
            events: Vec::new(),
            changes: Vec::new(),
            // A target skips messages (docs/FORMAT.md "Message records").
            messages: Vec::new(),
        });
        Ok(())
    }

    fn tables(
        &mut self,
        in_force: &mut Vec<Schema>,
        _kind: SourceKind,
        _replay: bool,
    ) -> Result<bool> {
        self.piece.as_mut().expect("a header came").schemas = Some(in_force.clone());
        Ok(true)
    }

    fn schema_change<R: BufRead>(
        &mut self,
        change: SchemaChange,
        _kind: SourceKind,
        _input: &mut BatchStreamReader<R>,
    ) -> Result<()> {
        let b = self.piece.as_mut().expect("a header came");
        b.changes.push((b.events.len(), change));
        Ok(())
    }

    fn event<R: BufRead>(&mut self, e: Event, _input: &mut BatchStreamReader<R>) -> Result<()> {
        self.piece.as_mut().expect("a header came").events.push(e);
        Ok(())
    }

    fn flush<R: BufRead>(&mut self, _input: &mut BatchStreamReader<R>) -> Result<()> {
        Ok(())
    }

    fn commit(&mut self, end: Option<&Cursor>) -> Result<()> {
        let mut b = self.piece.take().expect("a header came");
        let Some(end) = end else {
            return Ok(());
        };
        b.end = end.clone();
        if b.schemas.is_none() {
            // Every event held: the schemas the model holds are in force.
            b.schemas = Some(self.t.schemas.values().cloned().collect());
        }
        self.t.apply(&b)
    }

    fn rollback(&mut self) {
        self.piece = None;
    }
}

/// The double's part of loading a snapshot: the rows go into a copy of
/// its tables, which replaces them at the commit.
struct StagedSnapshot<'a> {
    t: &'a mut MemoryTarget,
    next: BTreeMap<String, BTreeMap<Vec<u8>, Row>>,
    shapes: HashMap<String, TableShape>,
    schemas: Vec<Schema>,
}

impl SnapshotHooks for StagedSnapshot<'_> {
    fn begin(&mut self) -> Result<Option<Cursor>> {
        Ok(self.t.cursor.clone())
    }

    fn tables(&mut self, schemas: &[Schema], _kind: SourceKind) -> Result<()> {
        for s in schemas {
            let t = self.next.entry(s.table.clone()).or_default();
            match self.t.options.existing_rows {
                ExistingRows::Refuse if !t.is_empty() => {
                    return Err(super::existing_rows_error(&s.table))
                }
                ExistingRows::Replace => t.clear(),
                _ => {}
            }
        }
        self.shapes = shapes(schemas)?;
        self.schemas = schemas.to_vec();
        Ok(())
    }

    fn row<R: BufRead>(
        &mut self,
        table: String,
        row: Row,
        _cursor: &Cursor,
        _input: &mut SnapshotReader<R>,
    ) -> Result<()> {
        let k = encode_key(&self.shapes[&table], &row);
        let t = self.next.entry(table).or_default();
        if t.contains_key(&k) && self.t.options.on_conflict == super::OnConflict::Error {
            return Err(Error::state(
                "snapshot row of a key the target already holds",
            ));
        }
        t.insert(k, row);
        Ok(())
    }

    fn commit<R: BufRead>(
        &mut self,
        cursor: &Cursor,
        _input: &mut SnapshotReader<R>,
    ) -> Result<()> {
        self.t.tables = std::mem::take(&mut self.next);
        for s in self.schemas.drain(..) {
            self.t.schemas.insert(s.table.clone(), s);
        }
        self.t.cursor = Some(cursor.clone());
        Ok(())
    }

    fn rollback(&mut self) {}
}

impl Target for MemoryTarget {
    fn cursor(&self) -> Result<Option<Cursor>> {
        Ok(self.cursor.clone())
    }

    fn apply_stream(
        &mut self,
        input: &mut BatchStreamReader<DynRead>,
        progress: &mut dyn FnMut(&ApplyStats),
    ) -> Result<ApplyStats> {
        let held = self.cursor.clone();
        let mut committed = ApplyStats::default();
        let mut hooks = Staged {
            t: self,
            held: None,
            piece: None,
        };
        let r = super::driver::apply_batches(&mut hooks, input, held, &mut committed, progress);
        self.committed = committed;
        r
    }

    fn apply_snapshot(
        &mut self,
        input: &mut SnapshotReader<DynRead>,
        progress: &mut dyn FnMut(&ApplyStats),
    ) -> Result<ApplyStats> {
        let mut committed = ApplyStats::default();
        let mut hooks = StagedSnapshot {
            next: self.tables.clone(),
            t: self,
            shapes: HashMap::new(),
            schemas: Vec::new(),
        };
        let r = super::driver::apply_snapshot(&mut hooks, input, &mut committed, progress);
        self.committed = committed;
        r
    }

    fn committed(&self) -> ApplyStats {
        self.committed.clone()
    }
}

impl AuditedTarget for MemoryTarget {
    fn table_shape(&self, schema: &Schema, _kind: SourceKind) -> Result<Option<StoredShape>> {
        Ok(self.schemas.get(&schema.table).map(|s| StoredShape {
            columns: s.columns.iter().map(|c| c.name.clone()).collect(),
            key: Some(s.key.clone()),
            empty_for_null: Vec::new(),
        }))
    }

    fn with_rows(
        &self,
        schema: &Schema,
        _kind: SourceKind,
        f: &mut dyn FnMut(&mut PullRow<'_>) -> Result<()>,
    ) -> Result<()> {
        let key = schema.key_indices();
        let mut rows: Vec<Row> = self
            .tables
            .get(&schema.table)
            .map(|t| t.values().cloned().collect())
            .unwrap_or_default();
        let key_of = |r: &Row| key.iter().map(|&i| r[i].clone()).collect::<Vec<_>>();
        rows.sort_by(|a, b| key_cmp(&key_of(a), &key_of(b)));
        let mut it = rows.into_iter();
        f(&mut || Ok(it.next()))
    }
}
