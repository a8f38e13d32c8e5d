//! An in-memory projection: the target contract without a database, for unit
//! and property tests of the stream operations.

use crate::error::{Error, Result};
use crate::wire::batch::{shapes, TableShape};
use crate::wire::value::{write_row, Value};
use crate::wire::{Batch, Cursor, Operation, Row};
use std::collections::{BTreeMap, HashMap};

#[derive(Debug, Default, Clone, PartialEq)]
pub struct MemoryTarget {
    pub cursor: Option<Cursor>,
    /// table → encoded key → row
    pub tables: BTreeMap<String, BTreeMap<Vec<u8>, Row>>,
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
        let shapes: HashMap<String, TableShape> = shapes(schemas)?;
        let from = super::skip_through(self.cursor.as_ref(), &batch.start)?;
        super::check_compacted(&batch.start, batch.compacted, from, &batch.end)?;
        if self.cursor.is_some() && batch.end.sequence() <= from {
            return Ok(()); // already held
        }
        let mut next = self.tables.clone();
        for e in batch.events.iter().filter(|e| e.sequence > from) {
            let shape = &shapes[&e.table];
            let t = next.entry(e.table.clone()).or_default();
            let same =
                |a: &Row, b: &Row| a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.same(y));
            match e.operation {
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
        self.cursor = Some(batch.end.clone());
        Ok(())
    }
}
