//! An in-memory projection: the target contract without a database. It is
//! the contract double: the contract tests (`tests/contract.rs`) run the same
//! cases against it and the real targets, and the property tests use it as
//! the model of a target.

use super::{ApplyStats, AuditedTarget, ExistingRows, PullRow, StoredShape, Target, TargetOptions};
use crate::error::{Error, Result};
use crate::wire::batch::{shapes, TableShape};
use crate::wire::value::key_cmp;
use crate::wire::value::{write_row, Value};
use crate::wire::SourceKind;
use crate::wire::{
    Batch, BatchStreamReader, Cursor, DynRead, Item, Operation, Row, Schema, SnapItem,
    SnapshotReader,
};
use std::collections::{BTreeMap, HashMap};

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
                    let before = e.before.as_ref().expect("before");
                    let k = encode_key(shape, before);
                    match t.get(&k) {
                        Some(old) if same(old, before) => {}
                        _ => {
                            return Err(Error::state(format!(
                                "{} {}: before image differs from the stored row",
                                e.operation.as_str(),
                                e.sequence
                            )))
                        }
                    }
                    t.remove(&k);
                    if let Some(after) = &e.after {
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

impl Target for MemoryTarget {
    fn cursor(&self) -> Result<Option<Cursor>> {
        Ok(self.cursor.clone())
    }

    fn apply_stream(
        &mut self,
        input: &mut BatchStreamReader<DynRead>,
        progress: &mut dyn FnMut(&ApplyStats),
    ) -> Result<ApplyStats> {
        let mut stats = ApplyStats {
            cursor: self.cursor.clone(),
            ..Default::default()
        };
        self.committed = stats.clone();
        let mut open: Option<Batch> = None;
        while let Some(item) = input.next_item()? {
            match item {
                Item::Header(h) => {
                    open = Some(Batch {
                        start: h.start.clone(),
                        end: h.start,
                        high_water: h.high_water,
                        schemas: h.schemas,
                        compacted: h.compacted,
                        events: Vec::new(),
                        changes: Vec::new(),
                    })
                }
                Item::Event(e) => open.as_mut().expect("validated stream").events.push(e),
                Item::Schema(c) => {
                    let b = open.as_mut().expect("validated stream");
                    b.changes.push((b.events.len(), c));
                }
                Item::Commit(c) => {
                    let mut b = open.take().expect("validated stream");
                    b.end = c.end;
                    let gate = super::BatchGate::open(self.cursor.as_ref(), &b.header())?;
                    let n = b.events.iter().filter(|e| !gate.holds(e.sequence)).count() as u64;
                    self.apply(&b)?;
                    stats.batches += 1;
                    stats.applied += n;
                    stats.skipped += b.events.len() as u64 - n;
                    stats.cursor = self.cursor.clone();
                    self.committed = stats.clone();
                    progress(&stats);
                }
            }
        }
        Ok(stats)
    }

    fn apply_snapshot(
        &mut self,
        input: &mut SnapshotReader<DynRead>,
        progress: &mut dyn FnMut(&ApplyStats),
    ) -> Result<ApplyStats> {
        let mut stats = ApplyStats::default();
        self.committed = stats.clone();
        let mut next = self.tables.clone();
        let mut shapes_now: HashMap<String, TableShape> = HashMap::new();
        let mut cursor = None;
        while let Some(item) = input.next_item()? {
            match item {
                SnapItem::Header { cursor: c, schemas } => {
                    super::snapshot_allowed(self.cursor.as_ref())?;
                    for s in &schemas {
                        let t = next.entry(s.table.clone()).or_default();
                        match self.options.existing_rows {
                            ExistingRows::Refuse if !t.is_empty() => {
                                return Err(super::existing_rows_error(&s.table))
                            }
                            ExistingRows::Replace => t.clear(),
                            _ => {}
                        }
                    }
                    shapes_now = shapes(&schemas)?;
                    for s in schemas {
                        self.schemas.insert(s.table.clone(), s);
                    }
                    cursor = Some(c);
                }
                SnapItem::Row { table, row } => {
                    let k = encode_key(&shapes_now[&table], &row);
                    let t = next.entry(table).or_default();
                    if t.contains_key(&k) && self.options.on_conflict == super::OnConflict::Error {
                        return Err(Error::state(
                            "snapshot row of a key the target already holds",
                        ));
                    }
                    t.insert(k, row);
                    stats.applied += 1;
                }
                SnapItem::Commit { .. } => {
                    self.tables = std::mem::take(&mut next);
                    self.cursor = cursor.take();
                    stats.batches += 1;
                    stats.cursor = self.cursor.clone();
                    self.committed = stats.clone();
                    progress(&stats);
                }
            }
        }
        Ok(stats)
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
