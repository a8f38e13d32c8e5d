//! What the DDL trigger's messages said of each table since its last
//! Relation message: renames, the columns before, columns dropped and added
//! again.

use super::*;

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
