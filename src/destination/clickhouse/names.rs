//! Which source table each ClickHouse table holds.
//!
//! The name mapping (`types::table_name`) is not one-to-one: `s_.b` and
//! `s._b` both become `s___b`, and a table starting with `_` meets a schema
//! ending in one. Changing the mapping would move the tables of every
//! existing target, so instead each ClickHouse table's source table is
//! recorded in `_mooncdc_tables` (name, source_table) before the table is
//! first written, and a second source table that maps to a recorded name is
//! refused before anything of its batch is written. A table made before
//! the record existed is recorded for the first source table applied to it.

use super::*;

/// The table of records.
pub(super) const NAMES_TABLE: &str = "_mooncdc_tables";

impl ClickHouse {
    /// The recorded source table of every ClickHouse table (read once; empty
    /// when the table of records does not exist, which a read never makes).
    fn recorded(&self) -> Result<std::cell::RefMut<'_, HashMap<String, String>>> {
        if self.names.borrow().is_none() {
            let mut map = HashMap::new();
            if self.engine_of(NAMES_TABLE)?.is_some() {
                let v = self.query(
                    &format!(
                        "SELECT name, source_table FROM {}.{} FORMAT TabSeparated",
                        qi(&self.cfg.database),
                        qi(NAMES_TABLE)
                    ),
                    None,
                    Timeout::Schema,
                )?;
                for l in String::from_utf8_lossy(&v).lines() {
                    let (n, s) = l
                        .split_once('\t')
                        .ok_or_else(|| Error::data(format!("a {NAMES_TABLE} row is malformed")))?;
                    map.insert(tsv_unescape(n), tsv_unescape(s));
                }
            }
            *self.names.borrow_mut() = Some(map);
        }
        Ok(std::cell::RefMut::map(self.names.borrow_mut(), |m| {
            m.as_mut().expect("just read")
        }))
    }

    /// Refuse, before anything is written, source tables that would share
    /// a ClickHouse table: two of `tables` with one name, or one whose
    /// name is recorded for another source table.
    pub(super) fn check_names<'a>(
        &self,
        tables: impl IntoIterator<Item = &'a Layout>,
    ) -> Result<()> {
        let mut here: HashMap<&str, &str> = HashMap::new();
        let recorded = self.recorded()?;
        for l in tables {
            let (name, source) = (l.name.as_str(), l.schema.table.as_str());
            let other = match recorded.get(name).filter(|o| *o != source) {
                Some(o) => Some((o.clone(), true)),
                None => here
                    .insert(name, source)
                    .filter(|o| *o != source)
                    .map(|o| (o.to_string(), false)),
            };
            if let Some((other, is_recorded)) = other {
                return Err(Error::data(format!(
                    "source tables {other:?} and {source:?} both map to ClickHouse table {name} (source `_` doubled, then `.` made `_`){}, and one ClickHouse table cannot hold two source tables: nothing of this batch was written; rename one of them at the source, or capture only one of them for this database (mooncdc-capture init --table …) and the other for a database of its own",
                    if is_recorded {
                        format!(", which holds {other:?} (recorded in {NAMES_TABLE})")
                    } else {
                        String::new()
                    }
                )));
            }
        }
        Ok(())
    }

    /// Record a table's source table before the table is first made or
    /// written (checked by `check_names` first).
    pub(super) fn record_name(&self, l: &Layout) -> Result<()> {
        self.check_names([l])?;
        if self.recorded()?.contains_key(&l.name) {
            return Ok(());
        }
        self.prepare_names_table()?;
        // A quorum insert on a cluster: not sent when it could only wait.
        self.replicas_answer()?;
        let mut body = Vec::new();
        for s in [l.name.as_bytes(), l.schema.table.as_bytes()] {
            leb128(&mut body, s.len() as u64);
            body.extend_from_slice(s);
        }
        self.query(
            &format!(
                "INSERT INTO {}.{} (name, source_table) FORMAT RowBinary",
                qi(&self.cfg.database),
                qi(NAMES_TABLE)
            ),
            Some(body),
            Timeout::Insert,
        )?;
        self.recorded()?
            .insert(l.name.clone(), l.schema.table.clone());
        Ok(())
    }

    /// For the audit: a table recorded for another source table is not
    /// this one's.
    pub(super) fn check_recorded(&self, schema: &Schema) -> Result<()> {
        let name = table_name(&schema.table);
        match self.recorded()?.get(&name) {
            Some(other) if *other != schema.table => Err(Error::state(format!(
                "source table {:?} maps to ClickHouse table {name}, which holds source table {other:?} (recorded in {NAMES_TABLE}): it cannot be audited against this one",
                schema.table
            ))),
            _ => Ok(()),
        }
    }

    /// Create `_mooncdc_tables` when missing (on a cluster: replicated on
    /// every node, as the cursor table).
    fn prepare_names_table(&self) -> Result<()> {
        if self.engine_of(NAMES_TABLE)?.is_some() {
            return Ok(());
        }
        let engine = match &self.cluster {
            Some(_) => format!(
                "ReplicatedMergeTree({}, '{{shard}}-{{replica}}')",
                sql_string(&format!(
                    "{}/all/{}/{NAMES_TABLE}",
                    self.cfg.zookeeper_path, self.cfg.database
                ))
            ),
            None => "MergeTree".to_string(),
        };
        self.query(
            &format!(
                "CREATE TABLE IF NOT EXISTS {}.{}{} (name String, source_table String) ENGINE = {engine} ORDER BY name",
                qi(&self.cfg.database),
                qi(NAMES_TABLE),
                self.on_cluster()
            ),
            None,
            Timeout::Ddl,
        )?;
        Ok(())
    }
}
