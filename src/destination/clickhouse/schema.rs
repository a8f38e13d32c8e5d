//! Tables: what exists, and creating or extending them from a stream's
//! schemas (checked before anything is written).

use super::*;

impl ClickHouse {
    /// Whether a table holds any row (deleted-row markers included).
    pub(super) fn holds_rows(&self, table: &str) -> Result<bool> {
        let v = self.query(
            &format!(
                "SELECT count() FROM {}.{} FORMAT TabSeparated",
                qi(&self.cfg.database),
                qi(table)
            ),
            None,
            Timeout::Schema,
        )?;
        Ok(String::from_utf8_lossy(&v).trim() != "0")
    }

    /// A table's columns as (name, type), in order; empty when it does not exist.
    pub(super) fn columns_typed(&self, table: &str) -> Result<Vec<(String, String)>> {
        let v = self.query(
            &format!(
                "SELECT name, type FROM system.columns WHERE database = {} AND table = {} FORMAT TabSeparated",
                sql_string(&self.cfg.database),
                sql_string(table)
            ),
            None,
            Timeout::Schema,
        )?;
        String::from_utf8_lossy(&v)
            .lines()
            .map(|l| {
                let (n, t) = l
                    .split_once('\t')
                    .ok_or_else(|| Error::data("a system.columns row is malformed"))?;
                Ok((tsv_unescape(n), tsv_unescape(t)))
            })
            .collect()
    }

    pub(super) fn columns_of(&self, table: &str) -> Result<Vec<String>> {
        Ok(self
            .columns_typed(table)?
            .into_iter()
            .map(|(n, _)| n)
            .collect())
    }

    /// The engine of an existing table (`None` when it does not exist).
    pub(super) fn engine_of(&self, table: &str) -> Result<Option<String>> {
        let v = self.query(
            &format!(
                "SELECT engine FROM system.tables WHERE database = {} AND name = {} FORMAT TabSeparated",
                sql_string(&self.cfg.database),
                sql_string(table)
            ),
            None,
            Timeout::Schema,
        )?;
        Ok(String::from_utf8_lossy(&v).lines().next().map(tsv_unescape))
    }

    /// Create the table (and view) if missing; add nullable columns the stream
    /// has and the table lacks; refuse any other difference (names, types,
    /// engine), before anything is written.
    pub(super) fn ensure(&self, l: &Layout) -> Result<()> {
        let db = qi(&self.cfg.database);
        if l.key.is_empty() && self.engine == Engine::Replacing {
            return Err(Error::data(format!(
                "table {:?} has no key: the replacing engine needs one (--engine history keeps tables without keys)",
                l.schema.table
            )));
        }
        if self.engine == Engine::Replacing && l.name.ends_with("__current") {
            return Err(Error::data(format!(
                "table {:?} maps to {}, the name of another table's current-state view; rename the source table",
                l.schema.table, l.name
            )));
        }
        let have = self.columns_typed(&l.name)?;
        let mut added = false;
        if have.is_empty() {
            let keys: Vec<String> = l.schema.key.iter().map(|k| qi(k)).collect();
            let sql = match self.engine {
                Engine::Replacing => format!(
                    "CREATE TABLE IF NOT EXISTS {db}.{} ({}, `_etl_version` UInt64, `_etl_deleted` UInt8) ENGINE = ReplacingMergeTree(`_etl_version`) ORDER BY ({})",
                    qi(&l.name),
                    l.column_defs().join(", "),
                    keys.join(", ")
                ),
                Engine::History => format!(
                    "CREATE TABLE IF NOT EXISTS {db}.{} (`cdc_operation` String, `cdc_lsn` UInt64, `cdc_tx_ordinal` UInt64, {}) ENGINE = MergeTree ORDER BY (`cdc_lsn`, `cdc_tx_ordinal`)",
                    qi(&l.name),
                    l.column_defs().join(", ")
                ),
            };
            self.query(&sql, None, Timeout::Ddl)?;
        } else {
            let engine = self.engine_of(&l.name)?.unwrap_or_default();
            let (expected_engine, meta): (&str, &[(&str, &str)]) = match self.engine {
                Engine::Replacing => (
                    "ReplacingMergeTree",
                    &[("_etl_version", "UInt64"), ("_etl_deleted", "UInt8")],
                ),
                Engine::History => (
                    "MergeTree",
                    &[
                        ("cdc_operation", "String"),
                        ("cdc_lsn", "UInt64"),
                        ("cdc_tx_ordinal", "UInt64"),
                    ],
                ),
            };
            let meta_ok = meta
                .iter()
                .all(|(n, t)| have.iter().any(|(hn, ht)| hn == n && ht == t));
            if engine != expected_engine || !meta_ok {
                return Err(Error::state(format!(
                    "ClickHouse table {} (engine {engine}) was made with the other engine or not by MoonCDC, not for --engine {}; use the engine it was made with, or another table",
                    l.name,
                    match self.engine {
                        Engine::Replacing => "replacing",
                        Engine::History => "history",
                    }
                )));
            }
            let data: Vec<&(String, String)> = have
                .iter()
                .filter(|(n, _)| !meta.iter().any(|(m, _)| m == n))
                .collect();
            let expected = l.expected_columns();
            // The history engine keeps columns a schema change dropped
            // (nullable, anywhere); the stream's columns must then be there
            // with their types, or missing and added. Otherwise the table's
            // columns are the stream's first ones.
            let fits = match self.engine {
                Engine::Replacing => {
                    data.len() <= expected.len()
                        && data
                            .iter()
                            .zip(&expected)
                            .all(|(h, e)| h.0 == e.0 && h.1 == e.1)
                }
                Engine::History => data.iter().all(|(n, t)| {
                    expected
                        .iter()
                        .find(|(e, _)| e == n)
                        .map_or(t.starts_with("Nullable("), |(_, et)| et == t)
                }),
            };
            if !fits {
                return Err(Error::state(format!(
                    "ClickHouse table {} has columns {:?}, but the stream's schema needs {:?} (names and types); the stream does not say how one became the other (a column renamed, dropped or moved while no capture was reading, say): change the table the same way and apply again, or give it a new snapshot (docs/OPERATIONS.md, schema changes)",
                    l.name,
                    data.iter().map(|(n, t)| format!("{n} {t}")).collect::<Vec<_>>(),
                    expected.iter().map(|(n, t)| format!("{n} {t}")).collect::<Vec<_>>()
                )));
            }
            let missing: Vec<usize> = match self.engine {
                Engine::Replacing => (data.len()..l.schema.columns.len()).collect(),
                Engine::History => (0..l.schema.columns.len())
                    .filter(|&i| !data.iter().any(|(n, _)| *n == l.schema.columns[i].name))
                    .collect(),
            };
            for (i, c) in missing.into_iter().map(|i| (i, &l.schema.columns[i])) {
                if !l.nullable(i) {
                    return Err(Error::state(format!(
                        "cannot add key column {:?} to ClickHouse table {}",
                        c.name, l.name
                    )));
                }
                self.query(
                    &format!(
                        "ALTER TABLE {db}.{} ADD COLUMN {} Nullable({})",
                        qi(&l.name),
                        qi(&c.name),
                        l.types[i].sql()
                    ),
                    None,
                    Timeout::Ddl,
                )?;
                added = true;
            }
        }
        if self.engine == Engine::Replacing {
            let cols: Vec<String> = l.schema.columns.iter().map(|c| qi(&c.name)).collect();
            let view = format!("{}__current", l.name);
            if added {
                // The view names its columns: recreate it with the new ones.
                self.query(
                    &format!("DROP TABLE IF EXISTS {db}.{}", qi(&view)),
                    None,
                    Timeout::Ddl,
                )?;
            }
            self.query(
                &format!(
                    "CREATE VIEW IF NOT EXISTS {db}.{} AS SELECT {} FROM {db}.{} FINAL WHERE `_etl_deleted` = 0",
                    qi(&view),
                    cols.join(", "),
                    qi(&l.name)
                ),
                None,
                Timeout::Ddl,
            )?;
        }
        Ok(())
    }
}
