//! Schema changes carried in the stream (`schema` records).
//!
//! ClickHouse has no transactions, so a change is made to converge: from
//! whatever state between the schema before the change and the one after it
//! the table is in (a killed apply may have made some of the steps), the
//! missing steps are made — drop, rename, add, widen a type — and the view
//! is recreated. The batch's schema record is read again on the replay that
//! follows a crash (the cursor has not moved), so it is the record of the
//! intent: nothing else needs writing before the change. A table in any
//! other state is refused before anything is changed.
//!
//! The `history` engine keeps dropped columns (later rows have them NULL):
//! dropping one would lose the history of its values.

use super::*;

impl ClickHouse {
    /// Bring the table from `old` to `new` (the change's layout). With
    /// `dry`, only check that it can be done from the table's state now.
    pub(super) fn evolve(
        &self,
        old: &Layout,
        c: &SchemaChange,
        new: &Layout,
        allowed: &[(String, String)],
        dry: bool,
    ) -> Result<()> {
        let db = qi(&self.cfg.database);
        // On a cluster, the replicated tables change on every node; the
        // Distributed table is made again over them by `ensure`.
        let stored = self.stored(&new.name);
        let t = format!("{}{}", qi(&stored), self.on_cluster());
        let table = &new.schema.table;
        let refuse = |what: String| {
            Error::state(format!(
                "schema change of table {table:?} (ClickHouse table {}): {what}",
                new.name
            ))
        };
        let meta = |n: &str| n.starts_with("_etl_") || n.starts_with("cdc_");
        let have: Vec<(String, String)> = self
            .columns_typed(&stored)?
            .into_iter()
            .filter(|(n, _)| !meta(n))
            .collect();
        let (was, will) = (old.expected_columns(), new.expected_columns());
        let type_of = |cols: &[(String, String)], n: &str| {
            cols.iter().find(|(c, _)| c == n).map(|(_, t)| t.clone())
        };
        // Every column the table has must be one the batch's schemas have
        // (the history engine also keeps columns dropped earlier).
        for (n, ty) in &have {
            let known = allowed.iter().any(|(an, at)| an == n && at == ty)
                || (self.engine == Engine::History && super::schema::not_key(ty));
            if !known {
                return Err(refuse(format!(
                    "the table has column {n} {ty}, which is in none of the schemas the stream gives it around this change; the target diverges from the source (give it a new snapshot)"
                )));
            }
        }
        let old_key: Vec<Option<&str>> = old.schema.key.iter().map(|k| c.new_name(k)).collect();
        if old_key
            .iter()
            .map(|k| k.unwrap_or(""))
            .ne(new.schema.key.iter().map(String::as_str))
        {
            return Err(refuse(format!(
                "the key changes from {:?} to {:?}, which a ClickHouse table (ordered by its key) cannot follow; give it a new snapshot",
                old.schema.key, new.schema.key
            )));
        }
        let has = |n: &str| have.iter().any(|(c, _)| c == n);
        let mut steps: Vec<String> = Vec::new();
        for r in &c.renamed {
            if old.schema.columns.iter().any(|oc| oc.name == r.to) {
                return Err(refuse(format!(
                    "column {:?} is renamed to {:?}, a name the table had before; ClickHouse cannot swap names in place (give it a new snapshot)",
                    r.from, r.to
                )));
            }
            if has(&r.from) && !has(&r.to) {
                if self.version < (20, 4) {
                    return Err(refuse(format!(
                        "column {:?} is renamed to {:?}, but this ClickHouse server ({}.{}) has no RENAME COLUMN (20.4 and later do); nothing was changed: upgrade the server, or rename it yourself (ALTER TABLE … ADD COLUMN {}, then copy the values) and apply again, or give the table a new snapshot",
                        r.from, r.to, self.version.0, self.version.1, qi(&r.to)
                    )));
                }
                steps.push(format!(
                    "ALTER TABLE {db}.{t} RENAME COLUMN {} TO {}",
                    qi(&r.from),
                    qi(&r.to)
                ));
            }
        }
        // Only the steps of this change, and only forward: a table a killed
        // apply left further along is not taken back.
        if self.engine == Engine::Replacing {
            for oc in &old.schema.columns {
                if c.new_name(&oc.name).is_none() && has(&oc.name) {
                    steps.push(format!("ALTER TABLE {db}.{t} DROP COLUMN {}", qi(&oc.name)));
                }
            }
        }
        let from = c.sources(&old.schema);
        for (j, (n, ty)) in will.iter().enumerate() {
            match from[j] {
                // Added by this change.
                None if !has(n) => {
                    steps.push(format!("ALTER TABLE {db}.{t} ADD COLUMN {} {ty}", qi(n)))
                }
                None => {}
                // Kept (perhaps renamed): its type changes only from the old
                // one.
                Some(i) => {
                    if &was[i].1 != ty && new.schema.key.contains(n) {
                        return Err(refuse(format!(
                            "the type of key column {n:?} changes from {} to {ty}; ClickHouse cannot change a key column's type in place: give the table a new snapshot",
                            was[i].1
                        )));
                    }
                    let now =
                        type_of(&have, n).or_else(|| type_of(&have, &old.schema.columns[i].name));
                    if now.as_ref() == Some(&was[i].1) && &was[i].1 != ty {
                        steps.push(format!("ALTER TABLE {db}.{t} MODIFY COLUMN {} {ty}", qi(n)));
                    }
                }
            }
        }
        if dry {
            return Ok(());
        }
        // The table changes: what `ensure` knew of it no longer holds.
        self.ensured.borrow_mut().remove(table);
        for sql in &steps {
            self.query(sql, None, Timeout::Ddl)?;
        }
        // A table now in the new shape: checked, and its view recreated. One
        // further along (a later change of the batch was made before a
        // kill) is finished by that change.
        let now: Vec<(String, String)> = self
            .columns_typed(&stored)?
            .into_iter()
            .filter(|(n, _)| !meta(n))
            .collect();
        if will.iter().any(|w| !now.contains(w)) {
            return Ok(());
        }
        if self.engine == Engine::Replacing {
            let view = format!("{}__current", new.name);
            self.query(
                &format!(
                    "DROP TABLE IF EXISTS {db}.{}{}",
                    qi(&view),
                    self.on_cluster()
                ),
                None,
                Timeout::Ddl,
            )?;
        }
        self.ensure(new)
    }
}
