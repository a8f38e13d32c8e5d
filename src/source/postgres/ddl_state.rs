//! Schema changes in the stream: what the DDL trigger's messages said of
//! each table since its last Relation message (renames, the columns before,
//! columns dropped and added again), and each Relation message turned into
//! the header's tables or schema records.

use super::batch_out::BatchOut;
use super::catalog::{Catalog, RelChange};
use super::pgoutput::Relation;
use crate::error::{Error, Result};
use crate::wire::{Column, Schema, SchemaChange};
use std::collections::HashMap;

/// `s` without the columns named (dropped, before they are added again).
pub(super) fn without(s: &Schema, names: &[String]) -> Schema {
    let mut m = s.clone();
    m.columns.retain(|c| !names.contains(&c.name));
    m.key.retain(|k| !names.contains(k));
    m
}

/// What the DDL trigger's messages said since each table's last Relation
/// message: the columns renamed (`None`: unknown, as after a crash emptied
/// the trigger's table).
#[derive(Default)]
pub(super) struct DdlState {
    pub(super) renamed: HashMap<String, Option<Vec<crate::wire::Rename>>>,
    /// The table's columns before the first of those messages.
    pub(super) before: HashMap<String, Vec<Column>>,
    /// Columns dropped and added again under their names since: said by a
    /// message (one command), or gone from one message's `before` to the
    /// next (two commands), to be matched with the table's columns then.
    readded: HashMap<String, Vec<String>>,
    /// Each table's last message: its `before` names and its renames.
    last: HashMap<String, (Vec<String>, Vec<crate::wire::Rename>)>,
    /// The last message taken: a transaction sent again after a reconnect
    /// sends its messages again, taken once.
    last_lsn: u64,
}

impl DdlState {
    /// Forget what was said of `table` (its Relation message has come).
    pub(super) fn forget(&mut self, table: &str) {
        self.renamed.remove(table);
        self.before.remove(table);
        self.readded.remove(table);
        self.last.remove(table);
    }

    /// The schema records of `new`'s change from `old`, from what was said
    /// of the table (then forgotten): columns dropped and added again leave
    /// first (a schema without them), then the change as classified.
    pub(super) fn changes(&mut self, old: Schema, new: &Schema) -> Result<Vec<SchemaChange>> {
        let told = self.renamed.remove(&new.table).flatten();
        let readded = self.readded_in(new);
        self.forget(&new.table);
        let mut out = Vec::new();
        let old = if readded.is_empty() {
            old
        } else {
            let mid = without(&old, &readded);
            out.push(SchemaChange {
                schema: mid.clone(),
                renamed: Vec::new(),
            });
            mid
        };
        let fix = "To carry such changes, install the DDL trigger before them (mooncdc-capture init --ddl)";
        out.extend(crate::source::schema_change::classify(
            &old,
            new,
            told.as_deref(),
            fix,
        )?);
        Ok(out)
    }

    /// The columns of `s` that were dropped and added again.
    pub(super) fn readded_in(&self, s: &Schema) -> Vec<String> {
        let mut v: Vec<String> = self
            .readded
            .get(&s.table)
            .into_iter()
            .flatten()
            .filter(|n| s.columns.iter().any(|c| &c.name == *n))
            .cloned()
            .collect();
        v.sort();
        v.dedup();
        v
    }

    pub(super) fn take(&mut self, lsn: u64, content: &[u8]) -> Result<()> {
        if lsn != 0 && lsn <= self.last_lsn {
            return Ok(());
        }
        self.last_lsn = lsn;
        #[derive(serde::Deserialize)]
        struct Msg {
            table: String,
            #[serde(default)]
            schema: Option<String>,
            #[serde(default)]
            name: Option<String>,
            renamed: Option<Vec<crate::wire::Rename>>,
            #[serde(default)]
            before: Option<Vec<Column>>,
            #[serde(default)]
            readded: Option<Vec<String>>,
        }
        let mut m: Msg = serde_json::from_slice(content).map_err(|e| {
            Error::data(format!("a DDL trigger message is not understood ({e}); run mooncdc-capture init --ddl again to update the trigger"))
        })?;
        // The trigger names the table's parts apart; one installed before
        // it did names it `schema.table`, right unless a part holds a dot.
        if let (Some(s), Some(t)) = (&m.schema, &m.name) {
            m.table = crate::wire::names::join(s, t);
        }
        if let Some(r) = m.readded.filter(|r| !r.is_empty()) {
            self.readded.entry(m.table.clone()).or_default().extend(r);
        }
        if let Some(before) = &m.before {
            let names: Vec<String> = before.iter().map(|c| c.name.clone()).collect();
            if let Some((prev, prev_renamed)) = self.last.get(&m.table) {
                // Gone between two commands and not renamed: dropped (added
                // again if the table has it once more).
                let gone: Vec<String> = prev
                    .iter()
                    .filter(|n| !names.contains(n) && !prev_renamed.iter().any(|r| &r.from == *n))
                    .cloned()
                    .collect();
                self.readded
                    .entry(m.table.clone())
                    .or_default()
                    .extend(gone);
            }
            let renamed = m.renamed.clone().unwrap_or_default();
            self.last.insert(m.table.clone(), (names, renamed));
        }
        if !self.renamed.contains_key(&m.table) {
            if let Some(b) = m.before {
                self.before.insert(m.table.clone(), b);
            }
        }
        let entry = self
            .renamed
            .entry(m.table)
            .or_insert_with(|| Some(Vec::new()));
        match (entry.as_mut(), m.renamed) {
            (Some(list), Some(new)) => {
                // Compose with the renames already seen: a→b then b→c is a→c.
                for r in new {
                    match list.iter_mut().find(|x| x.to == r.from) {
                        Some(x) => x.to = r.to,
                        None => list.push(r),
                    }
                }
                list.retain(|r| r.from != r.to);
            }
            _ => *entry = None,
        }
        Ok(())
    }
}

/// A Relation message: the table's shape at this point of the stream, as
/// a table new to the header, schema records (with the DDL trigger's
/// renames and drop-and-add), or nothing when the read is catching up
/// (`replaying`: before the resume point, inside a batch already open).
pub(super) async fn relation_message(
    catalog: &mut Catalog,
    c: &impl super::decode::Catalogue,
    rel: Relation,
    replaying: bool,
    ddl: &mut DdlState,
    w: &mut BatchOut<'_>,
) -> Result<()> {
    match catalog.relation(c, rel).await? {
        // The same columns, but the DDL trigger saw one
        // dropped and added again (its values gone).
        RelChange::Same(s) => {
            let readded = ddl.readded_in(&s);
            ddl.forget(&s.table);
            if !(readded.is_empty() || replaying && w.open) {
                w.pending.push(SchemaChange {
                    schema: without(&s, &readded),
                    renamed: Vec::new(),
                });
                w.pending.push(SchemaChange {
                    schema: s,
                    renamed: Vec::new(),
                });
            }
        }
        // First described after a change the DDL trigger
        // recorded in this read: the table as it was
        // before it, then the change.
        RelChange::New(s) if !replaying && ddl.before.contains_key(&s.table) => {
            let before = ddl.before.remove(&s.table).expect("checked");
            let old = Schema {
                table: s.table.clone(),
                columns: before,
                key: s.key.clone(),
            };
            old.check().map_err(Error::data)?;
            w.add_table(old.clone());
            let changes = ddl.changes(old, &s)?;
            w.pending.extend(changes);
        }
        // Catching up inside a batch already open (a
        // transaction sent again after a reconnect):
        // what was written already says it all.
        RelChange::New(s) | RelChange::Changed(_, s) if replaying && w.open => {
            ddl.forget(&s.table);
        }
        RelChange::New(s) => {
            ddl.forget(&s.table);
            w.add_table(s);
        }
        // A read that starts inside a transaction: the
        // header describes the table at its start.
        RelChange::Changed(_, new) if replaying => {
            ddl.forget(&new.table);
            w.add_table(new);
        }
        // A schema change: schema records, written with
        // the next event, inside its transaction's batch.
        RelChange::Changed(old, new) => {
            if old.table != new.table {
                return Err(Error::state(format!(
                        "table {:?} was renamed to {:?}; a target cannot follow a table rename by itself: rename the target's table (and keep the publication's) or give it a new snapshot (docs/OPERATIONS.md, schema changes)",
                        old.table, new.table
                    )));
            }
            let changes = ddl.changes(old, &new)?;
            w.pending.extend(changes);
        }
    }
    Ok(())
}
