//! Tables: what exists, and creating or extending them from a stream's
//! schemas (checked before anything is written).

use super::{
    column_type, qi, refuse_meta_names, sql_string, tsv_unescape, ChType, ClickHouse, Engine,
    Layout, Timeout,
};
use crate::error::{Error, Result};
use crate::wire::{Schema, SourceKind};

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

    /// Whether a target table was made by the replacing engine (`None`
    /// when it does not exist): read from the engine of the table that
    /// stores its rows, not from column names a source could share.
    pub(super) fn replacing_table(&self, table: &str) -> Result<Option<bool>> {
        Ok(self
            .engine_of(&self.stored(table))?
            .map(|e| e.contains("ReplacingMergeTree")))
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
        match self.ensure_or_mismatch(l, false)? {
            None => Ok(()),
            Some(mismatch) => Err(mismatch),
        }
    }

    /// [`ClickHouse::ensure`], with a table whose columns the stream's
    /// schema does not describe given back as `Some(error)`, nothing changed:
    /// a replay that overlaps the cursor may bring a schema the table has
    /// already moved past, and decides only at its first event not yet held.
    /// With `drop`, the replacing engine drops the columns a table has and
    /// the stream's schema lacks when that is all that differs (a pure
    /// drop, [`crate::destination::HeaderShape`]); the history engine keeps
    /// them, as for a schema record.
    pub(super) fn ensure_or_mismatch(&self, l: &Layout, drop: bool) -> Result<Option<Error>> {
        // Made or checked for this very schema already by this process:
        // nothing to ask the server again (a follower ensures its tables at
        // every batch; on a cluster that is several requests each).
        if self
            .ensured
            .borrow()
            .get(&l.schema.table)
            .is_some_and(|(s, t)| *s == l.schema && *t == l.types)
        {
            return Ok(None);
        }
        let r = self.ensure_on_server(l, drop)?;
        if r.is_none() {
            self.ensured
                .borrow_mut()
                .insert(l.schema.table.clone(), (l.schema.clone(), l.types.clone()));
        }
        Ok(r)
    }

    /// The layout a table of this schema is written and read with: the
    /// target's typing, with the types the table already has for columns
    /// an earlier MoonCDC (or its user) made `String`
    /// ([`Layout::keep_earlier_types`]), or typed under `types=text`, or a
    /// decimal made `String` by hand. The server is asked only when the
    /// schema has a column of a typed mapping, an array or a decimal, and
    /// this process has not checked the table for this very schema.
    pub(super) fn layout(&self, schema: &Schema, kind: SourceKind) -> Result<Layout> {
        let mut l = self.typing(schema, kind);
        self.say_text_columns(schema, kind, &l);
        let arrays = schema.columns.iter().any(|c| c.decl_type.ends_with("[]"));
        let typed = (schema.columns.iter().zip(&l.types)).any(|(c, t)| *t != column_type(c, kind));
        // A decimal column may have been made `String` by hand, to carry a
        // `NaN` ([`Layout::keep_text_decimals`]).
        let decimals = (l.types.iter().enumerate())
            .any(|(i, t)| matches!(t, ChType::Decimal(..)) && !l.key.contains(&i));
        // `types=text` on a server that has the types: a table made typed
        // before (by a URL without the option) keeps its types, as a table
        // made with text keeps text the other way round; text written into
        // a DateTime64 or UUID column would not read.
        let native = (!self.native_types()
            && self.version >= (22, 8)
            && self.cfg.types == super::config::Types::Text)
            .then(|| {
                // Arrays of columns that may be NULL too: a table made with
                // `arrays=empty-for-null` keeps them (a NULL then fails,
                // naming the option).
                let mut n = Layout::with_typing(schema, kind, true);
                n.arrays_for_nullable();
                n
            })
            .filter(|n| n.types != l.types);
        let ask = match self.native_types() {
            true => arrays || typed || decimals,
            false => native.is_some() || decimals,
        };
        if !ask {
            return Ok(l);
        }
        if let Some((s, t)) = self.ensured.borrow().get(&schema.table) {
            if s == schema {
                l.types = t.clone();
                return Ok(l);
            }
        }
        let have = self.columns_typed(&self.stored(&l.name))?;
        if self.native_types() {
            l.keep_earlier_types(&have);
        } else {
            if let Some(n) = native {
                l.keep_typed_columns(&n.types, &have);
            }
            l.keep_text_decimals(&have);
        }
        Ok(l)
    }

    /// The layout the target's typing gives a schema, before any table is
    /// looked at: `types=` and `arrays=` (docs/CLICKHOUSE.md, Types).
    pub(super) fn typing(&self, schema: &Schema, kind: SourceKind) -> Layout {
        let mut l = Layout::with_typing(schema, kind, self.native_types());
        if self.native_types() && self.cfg.empty_arrays_for_null {
            l.arrays_for_nullable();
            l.empty_for_null = true;
        }
        l
    }

    /// Once a process: a server too old for typed columns (before 22.8)
    /// holds PostgreSQL's timestamps, dates, UUIDs, booleans and arrays as
    /// text, which apply says rather than leave to be found.
    fn say_text_columns(&self, schema: &Schema, kind: SourceKind, l: &Layout) {
        static SAID: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
        if self.version >= (22, 8)
            || self.cfg.types == super::config::Types::Text
            || SAID.load(std::sync::atomic::Ordering::Relaxed)
            || Layout::with_typing(schema, kind, true).types == l.types
        {
            return;
        }
        SAID.store(true, std::sync::atomic::Ordering::Relaxed);
        crate::log::info(&format!(
            "ClickHouse {}.{} has no typed columns for PostgreSQL's timestamps, dates, UUIDs, booleans and arrays \
             (22.8 and later have them): table {:?} and the others get String columns, holding the values' text \
             exactly (docs/CLICKHOUSE.md, \"Types\")",
            self.version.0, self.version.1, schema.table
        ));
    }

    fn ensure_on_server(&self, l: &Layout, drop: bool) -> Result<Option<Error>> {
        let db = qi(&self.cfg.database);
        refuse_meta_names(&l.schema, self.engine)?;
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
        if l.name.starts_with("_mooncdc_") {
            return Err(Error::data(format!(
                "table {:?} maps to {}, a name MoonCDC keeps for its own tables (_mooncdc_…); rename the source table",
                l.schema.table, l.name
            )));
        }
        let stored = self.stored(&l.name);
        let on = self.on_cluster();
        if self.cluster.is_some() && l.name.contains(['{', '}']) {
            return Err(Error::data(format!(
                "table {:?}: a cluster target's table names cannot hold {{ or }} (ClickHouse would read them as macros in the ZooKeeper path); rename the source table",
                l.schema.table
            )));
        }
        if self.cluster.is_some() && l.name.ends_with("_local") {
            return Err(Error::data(format!(
                "table {:?} maps to {}, a name a cluster target gives another table's replicated rows (<table>_local); rename the source table",
                l.schema.table, l.name
            )));
        }
        if self.cluster.is_some() {
            if let Some(e) = self.engine_of(&l.name)? {
                if e != "Distributed" {
                    return Err(Error::state(format!(
                        "ClickHouse table {} (engine {e}) was made for a single server, not for a cluster target; use another database for the cluster, or drop it",
                        l.name
                    )));
                }
            }
        }
        // Recorded before the table is made or written: from then on no
        // other source table can land in it.
        self.record_name(l)?;
        let have = self.columns_typed(&stored)?;
        let mut added = false;
        if have.is_empty() {
            let keys: Vec<String> = l.schema.key.iter().map(|k| qi(k)).collect();
            // On a cluster: replicated, with the shard's ZooKeeper path.
            let (replicated, zk) = match self.cluster {
                Some(_) => (
                    "Replicated",
                    format!(
                        "{}, '{{replica}}'",
                        sql_string(&format!(
                            "{}/{{shard}}/{}/{stored}",
                            self.cfg.zookeeper_path, self.cfg.database
                        ))
                    ),
                ),
                None => ("", String::new()),
            };
            let sep = if zk.is_empty() { "" } else { ", " };
            let sql = match self.engine {
                // Where the server has it, the engine knows which rows are
                // deleted: `FINAL` leaves them out, and a cleanup merge
                // removes them (docs/CLICKHOUSE.md, Tables).
                Engine::Replacing => format!(
                    "CREATE TABLE IF NOT EXISTS {db}.{}{on} ({}, `_etl_version` UInt64, `_etl_deleted` UInt8) ENGINE = {replicated}ReplacingMergeTree({zk}{sep}`_etl_version`{}) ORDER BY ({})",
                    qi(&stored),
                    l.column_defs().join(", "),
                    if self.is_deleted() { ", `_etl_deleted`" } else { "" },
                    keys.join(", ")
                ),
                Engine::History => format!(
                    "CREATE TABLE IF NOT EXISTS {db}.{}{on} (`cdc_operation` String, `cdc_lsn` UInt64, `cdc_tx_ordinal` UInt64, {}) ENGINE = {replicated}MergeTree({zk}) ORDER BY (`cdc_lsn`, `cdc_tx_ordinal`)",
                    qi(&stored),
                    l.column_defs().join(", ")
                ),
            };
            self.query(&sql, None, Timeout::Ddl)?;
        } else {
            let engine = self.engine_of(&stored)?.unwrap_or_default();
            let engine = match self.cluster {
                Some(_) => engine
                    .strip_prefix("Replicated")
                    .unwrap_or("(not replicated)")
                    .to_string(),
                None => engine,
            };
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
                    stored,
                    match self.engine {
                        Engine::Replacing => "replacing",
                        Engine::History => "history",
                    }
                )));
            }
            let mut data: Vec<&(String, String)> = have
                .iter()
                .filter(|(n, _)| !meta.iter().any(|(m, _)| m == n))
                .collect();
            let expected = l.expected_columns();
            if drop && self.engine == Engine::Replacing {
                let names: Vec<&str> = data.iter().map(|(n, _)| n.as_str()).collect();
                if let crate::destination::HeaderShape::Dropped(gone) =
                    crate::destination::HeaderShape::of(&names, None, &l.schema)
                {
                    // Kept columns with their types, dropped ones not of the
                    // key (key columns are the only ones not Nullable).
                    let kept: Vec<&&(String, String)> = data
                        .iter()
                        .enumerate()
                        .filter(|(i, _)| !gone.contains(i))
                        .map(|(_, c)| c)
                        .collect();
                    let same = kept.len() == expected.len()
                        && kept.iter().zip(&expected).all(|(h, e)| h.1 == e.1);
                    // Rows past the cursor are an earlier try's of this very
                    // batch, which made its schema changes as it went: a
                    // column the header lacks was then added by the batch
                    // (it comes again at that change), and the rows the try
                    // wrote after it hold their values there. Kept: the
                    // table is checked against the batch's states at the
                    // commit instead.
                    if same
                        && gone.iter().all(|&i| not_key(&data[i].1))
                        && !self.rows_past_cursor(&stored, false)?
                    {
                        for &i in &gone {
                            self.query(
                                &format!(
                                    "ALTER TABLE {db}.{}{on} DROP COLUMN {}",
                                    qi(&stored),
                                    qi(&data[i].0)
                                ),
                                None,
                                Timeout::Ddl,
                            )?;
                        }
                        // The view names its columns: made again below.
                        added = true;
                        let mut i = 0;
                        data.retain(|_| {
                            i += 1;
                            !gone.contains(&(i - 1))
                        });
                    }
                }
            }
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
                        .map_or(not_key(t), |(_, et)| et == t)
                }),
            };
            if !fits {
                return Ok(Some(Error::state(format!(
                    "ClickHouse table {} has columns {:?}, but the stream's schema needs {:?} (names and types); the stream does not say how one became the other (a column renamed or moved, or one dropped and another added, while no capture was reading, say): change the table the same way and apply again, or give it a new snapshot (docs/OPERATIONS.md, schema changes)",
                    stored,
                    data.iter().map(|(n, t)| format!("{n} {t}")).collect::<Vec<_>>(),
                    expected.iter().map(|(n, t)| format!("{n} {t}")).collect::<Vec<_>>()
                ))));
            }
            let missing: Vec<usize> = match self.engine {
                Engine::Replacing => (data.len()..l.schema.columns.len()).collect(),
                Engine::History => (0..l.schema.columns.len())
                    .filter(|&i| !data.iter().any(|(n, _)| *n == l.schema.columns[i].name))
                    .collect(),
            };
            for (i, c) in missing.into_iter().map(|i| (i, &l.schema.columns[i])) {
                if l.key.contains(&i) {
                    return Err(Error::state(format!(
                        "cannot add key column {:?} to ClickHouse table {}",
                        c.name, l.name
                    )));
                }
                self.query(
                    &format!(
                        "ALTER TABLE {db}.{}{on} ADD COLUMN {} {}",
                        qi(&stored),
                        qi(&c.name),
                        expected[i].1
                    ),
                    None,
                    Timeout::Ddl,
                )?;
                added = true;
            }
        }
        if self.cluster.is_some() && self.distribute(l)? {
            added = true;
        }
        if self.engine == Engine::Replacing {
            let cols: Vec<String> = l.schema.columns.iter().map(|c| qi(&c.name)).collect();
            let view = format!("{}__current", l.name);
            // The view names its columns and keeps their types: made again
            // when they changed (here, before a kill that came between a
            // change and the view, or a column's type by hand, as
            // docs/CLICKHOUSE.md's conversions do).
            let now = self.columns_typed(&view)?;
            let want = l.expected_columns();
            if added || (!now.is_empty() && now != want) {
                self.query(
                    &format!("DROP TABLE IF EXISTS {db}.{}{on}", qi(&view)),
                    None,
                    Timeout::Ddl,
                )?;
            } else if !now.is_empty() {
                // There already (DDL on a cluster waits for every node).
                return Ok(None);
            }
            self.query(
                &format!(
                    "CREATE VIEW IF NOT EXISTS {db}.{}{on} AS SELECT {} FROM {db}.{} FINAL WHERE `_etl_deleted` = 0",
                    qi(&view),
                    cols.join(", "),
                    qi(&l.name)
                ),
                None,
                Timeout::Ddl,
            )?;
        }
        Ok(None)
    }

    /// A cluster target's `Distributed` table over `<table>_local`, made or
    /// made again (on every node) when its columns are not the local
    /// table's: 18.16 cannot ALTER a Distributed table on a cluster whose
    /// shards replicate, and inserts are synchronous, so it holds nothing
    /// of its own. Sharded by a hash of the key, so that a key's rows are
    /// always on one shard (`FINAL` per shard is exact). True when made.
    fn distribute(&self, l: &Layout) -> Result<bool> {
        let (db, on) = (qi(&self.cfg.database), self.on_cluster());
        let stored = self.stored(&l.name);
        let local = self.columns_typed(&stored)?;
        if self.columns_typed(&l.name)? == local {
            return Ok(false);
        }
        let keys: Vec<String> = if l.schema.key.is_empty() {
            vec!["`cdc_lsn`".into(), "`cdc_tx_ordinal`".into()]
        } else {
            l.schema.key.iter().map(|k| qi(k)).collect()
        };
        let cluster = &self.cluster.as_ref().expect("a cluster target").name;
        self.query(
            &format!("DROP TABLE IF EXISTS {db}.{}{on}", qi(&l.name)),
            None,
            Timeout::Ddl,
        )?;
        self.query(
            &format!(
                "CREATE TABLE IF NOT EXISTS {db}.{}{on} AS {db}.{} ENGINE = Distributed({}, {}, {}, cityHash64({}))",
                qi(&l.name),
                qi(&stored),
                sql_string(cluster),
                sql_string(&self.cfg.database),
                sql_string(&stored),
                keys.join(", ")
            ),
            None,
            Timeout::Ddl,
        )?;
        Ok(true)
    }
}

/// Whether a column of this ClickHouse type can be a data column only (key
/// columns are neither `Nullable` nor arrays).
pub(super) fn not_key(ty: &str) -> bool {
    ty.starts_with("Nullable(") || ty.starts_with("Array(")
}
