//! A row change's tuples into an event: each cell by its column's class,
//! the old row whole (REPLICA IDENTITY FULL) or by its key (the default
//! identity), unchanged TOAST values filled from the old row or marked
//! unchanged. The table is as the stream last described it
//! ([`Catalog`]); what cannot be carried exactly fails, naming the table
//! and the change.

use super::catalog::{Catalog, Identity};
use super::pgoutput::{Cell, Message};
use super::types::{from_text, Class};
use crate::error::{Error, Result};
use crate::wire::{Event, Operation, Row, Schema, Sequence, Value};

/// What helps when an old row is missing under FULL: the WAL already holds
/// this change without it, so setting the identity again carries only later
/// changes.
const NOT_FULL: &str = "the table's REPLICA IDENTITY was not FULL when this change was made (changed after init, or a \
     partition attached later). `mooncdc-capture upgrade` sets it again for later changes, but this change is in the WAL \
     without its old values and cannot be carried exactly: after upgrade, take a new snapshot into a new target and \
     follow from its cursor (docs/OPERATIONS.md, \"Starting over\")";

/// One change's table as the stream described it.
struct Described<'a> {
    seq: Sequence,
    schema: &'a Schema,
    classes: &'a [Class],
    identity: Option<&'a Identity>,
}

impl Described<'_> {
    /// An error about this change.
    fn here(&self, e: String) -> Error {
        Error::data(format!(
            "table {:?}, change {}: {e}",
            self.schema.table, self.seq
        ))
    }

    /// FULL (or not described: the stream always describes first).
    fn full(&self) -> bool {
        self.identity.is_none_or(|i| i.full)
    }

    /// A tuple as a row; an unchanged (TOASTed) value is taken from
    /// `fallback`, the whole old row, or marked unchanged without one.
    fn row(&self, t: &[Cell], fallback: Option<&Row>) -> Result<Row> {
        if t.len() != self.classes.len() {
            return Err(self.here(format!(
                "row has {} values, the table {}",
                t.len(),
                self.classes.len()
            )));
        }
        t.iter()
            .zip(self.classes)
            .enumerate()
            .map(|(i, (cell, cls))| match cell {
                Cell::Null => Ok(Value::Null),
                Cell::Text(b) => from_text(*cls, Some(b)).map_err(|e| self.here(e)),
                Cell::Binary(_) => {
                    Err(self.here("binary-format value (the stream must be in text format)".into()))
                }
                Cell::Unchanged => Ok(fallback.map_or(Value::Unchanged, |r| r[i].clone())),
            })
            .collect()
    }

    /// Under the default identity (or one by an index on the key columns)
    /// the old row is known by its key: the key of the old tuple the server
    /// sent ('K'), else, when the key did not change and nothing was sent,
    /// the new row's.
    fn key_only(&self, t: Option<&[Cell]>, new: Option<&Row>) -> Result<Row> {
        self.identity_is_the_key()?;
        let schema = self.schema;
        schema
            .key_indices()
            .into_iter()
            .map(|i| {
                let name = &schema.columns[i].name;
                let v = match (t, new) {
                    (Some(t), _) => match t.get(i) {
                        Some(Cell::Text(b)) => {
                            from_text(self.classes[i], Some(b)).map_err(|e| self.here(e))?
                        }
                        _ => {
                            return Err(self.here(format!(
                                "the old key came without a value for key column {name:?}"
                            )))
                        }
                    },
                    (None, Some(row)) => row[i].clone(),
                    (None, None) => unreachable!("a delete always has an old key"),
                };
                if matches!(v, Value::Null | Value::Unchanged) {
                    return Err(self.here(format!(
                        "key column {name:?} has no value in the change (a NULL or unsent key cannot identify the row)"
                    )));
                }
                Ok(v)
            })
            .collect()
    }

    /// Rows are identified by the primary key: an identity by an index on
    /// other columns cannot say which row changed.
    fn identity_is_the_key(&self) -> Result<()> {
        let ident = self.identity.expect("not full, so described");
        let (pk, columns) = (&self.schema.key, &self.schema.columns);
        let same = ident.key.len() == pk.len()
            && ident
                .key
                .iter()
                .all(|&i| pk.iter().any(|k| *k == columns[i].name));
        if same {
            return Ok(());
        }
        // The WAL keeps the change as it was logged: an ALTER now serves
        // only later changes.
        Err(self.here(format!(
            "the table's replica identity was an index whose columns are not its primary key ({pk:?}) when this \
             change was made, so it names the row without its key, and the targets find rows by the key. Set \
             REPLICA IDENTITY DEFAULT (or FULL, or USING INDEX on an index of exactly the key columns) so that \
             later changes carry it; this change is already logged as it was made, and no read of this slot can \
             carry it: after the ALTER, start again from a new slot and a snapshot into a new target \
             (mooncdc-capture init --slot NEW …, then mooncdc-snapshot --slot NEW | mooncdc-apply), and drop this \
             slot (docs/POSTGRES.md, \"Replica identity\")"
        )))
    }

    /// The old row as it came: whole (`before`), by its key (`before_key`),
    /// or not at all.
    fn old_image(
        &self,
        op: Operation,
        old: Option<(u8, Vec<Cell>)>,
    ) -> Result<(Option<Row>, Option<Row>)> {
        match old {
            None if op == Operation::Update && self.full() => {
                Err(self.here(format!("the update came without its old row: {NOT_FULL}")))
            }
            None => Ok((None, None)),
            Some((kind, _)) if kind != b'O' && self.full() => {
                Err(self.here(format!("only the key of the old row came: {NOT_FULL}")))
            }
            Some((kind, t)) if kind != b'O' => Ok((None, Some(self.key_only(Some(&t), None)?))),
            Some((_, t)) => {
                let row = self.row(&t, None)?;
                // A partition whose identity is not FULL, published through
                // its root, sends NULL for the columns it did not log, under
                // the root's FULL mark: a NULL where none can be is that.
                if let Some((c, _)) = (self.schema.columns.iter().zip(&row))
                    .find(|(c, v)| !c.nullable && matches!(v, Value::Null))
                {
                    return Err(self.here(format!(
                        "the old row came with NULL in NOT NULL column {:?}: only its key was logged; {NOT_FULL}",
                        c.name
                    )));
                }
                Ok((Some(row), None))
            }
        }
    }
}

impl Catalog {
    /// A truncate of one relation.
    pub(super) fn truncate_event(
        &self,
        seq: Sequence,
        relation: u32,
        op: Operation,
    ) -> Result<Event> {
        let (schema, _) = self.by_oid.get(&relation).ok_or_else(|| {
            Error::data(format!(
                "truncate of relation {relation} before its Relation message"
            ))
        })?;
        Ok(Event::truncate(seq, schema.table.clone(), op))
    }

    /// An Insert, Update or Delete as an event at `seq`.
    pub(super) fn event(&self, seq: Sequence, msg: Message) -> Result<Event> {
        let (relation, op, old, new) = match msg {
            Message::Insert { relation, new } => (relation, Operation::Insert, None, Some(new)),
            Message::Update { relation, old, new } => (relation, Operation::Update, old, Some(new)),
            Message::Delete { relation, old } => (relation, Operation::Delete, Some(old), None),
            _ => unreachable!("row changes only"),
        };
        let (schema, classes) = self.by_oid.get(&relation).ok_or_else(|| {
            Error::data(format!(
                "row change for relation {relation} before its Relation message"
            ))
        })?;
        let d = Described {
            seq,
            schema,
            classes,
            identity: self.identity.get(&relation),
        };
        let (before, mut before_key) = d.old_image(op, old)?;
        let mut after = new.map(|t| d.row(&t, before.as_ref())).transpose()?;
        // A key value stored out of line comes unchanged in the new row;
        // the server then sends the old key, which is that value.
        if let (Some(a), Some(k)) = (after.as_mut(), before_key.as_ref()) {
            for (&i, v) in schema.key_indices().iter().zip(k) {
                if a[i].is_unchanged() {
                    a[i] = v.clone();
                }
            }
        }
        if op == Operation::Update && before.is_none() && before_key.is_none() {
            before_key = Some(d.key_only(None, after.as_ref())?);
        }
        Ok(Event {
            sequence: seq,
            table: schema.table.clone(),
            operation: op,
            before,
            before_key,
            after,
        })
    }
}
