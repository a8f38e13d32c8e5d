//! The SQLite source: persistent pure-SQL triggers into a change log kept in
//! the database file itself, so every program that writes the database is
//! captured (the `sqlite3` shell, Python, another language).
//!
//! Design (see `docs/SQLITE.md` for the measurements behind it): each trigger
//! copies `OLD.x` / `NEW.x` natively into untyped columns of one change log,
//! with no conversion and no function calls. Untyped columns have no affinity,
//! so SQLite stores each value exactly as the table held it: storage class,
//! REAL bits, TEXT bytes, BLOB bytes. Encoding to the wire happens when
//! capture reads, where TEXT arrives as raw bytes and invalid UTF-8 is caught.
//!
//! Objects, all named `_mooncdc_*`:
//! - `_mooncdc_meta(key, value)`: identity `sqlite:<uuid>`, capture version,
//!   acknowledged sequence.
//! - `_mooncdc_tables(tid, name, schema, current)`: one row per captured table
//!   *version*; `upgrade` after a schema change adds a new version and keeps
//!   the old one so unacknowledged changes still decode with their own shape.
//! - `_mooncdc_log(seq INTEGER PRIMARY KEY, tid, op, v0, …)`:
//!   before image in `v0…v(n-1)`, after image in `vn…v(2n-1)`. Sequences are
//!   rowids (max + 1); acknowledging never deletes the newest row, so the
//!   maximum never goes back and a sequence is never reused. (Version 1 used
//!   AUTOINCREMENT for that, which costs an extra write per change; `upgrade`
//!   rebuilds a version 1 log.) The high water is the largest sequence.
//! - Triggers `_mooncdc_<tid>_ins|upd|del`, AFTER each row change.
//!
//! A change made in a transaction that rolls back never reaches the log: the
//! trigger's insert rolls back with it. SQLite has one writer at a time, so
//! sequence order is commit order and a read transaction sees a prefix.

use super::ReadLimits;
use crate::error::{Error, Result};
use crate::sqlite_util::{
    db_err, open_existing, order_by_key, quote_ident, random_uuid, row_values, table_schema,
    user_tables, RESERVED_PREFIX,
};
use crate::wire::batch::{write_commit_line, write_event_line, write_header_line};
use crate::wire::model::write_schema;
use crate::wire::snapshot::SnapshotWriter;
use crate::wire::{Commit, Cursor, Event, Header, Operation, Schema, Sequence};
use rusqlite::{params, Connection, OptionalExtension, TransactionBehavior};
use std::collections::{BTreeMap, HashMap};
use std::io::Write;
use std::path::Path;

/// Version of the trigger and log layout; `verify` reports older installs.
pub const CAPTURE_VERSION: i64 = 2;

const LOG: &str = "_mooncdc_log";
const META: &str = "_mooncdc_meta";
const TABLES: &str = "_mooncdc_tables";

/// One captured table version.
#[derive(Debug, Clone)]
pub struct TableVersion {
    pub tid: i64,
    pub schema: Schema,
    pub current: bool,
}

/// What `status` reports.
#[derive(Debug, Clone)]
pub struct Status {
    pub identity: String,
    pub acknowledged: Sequence,
    pub high_water: Sequence,
    pub backlog: u64,
    pub tables: Vec<String>,
}

fn io_out(e: std::io::Error) -> Error {
    Error::io("cannot write output", e)
}

fn is_installed(conn: &Connection) -> Result<bool> {
    crate::sqlite_util::table_exists(conn, META)
}

fn require_installed(conn: &Connection, path: &Path) -> Result<()> {
    if !is_installed(conn)? {
        return Err(Error::state(format!(
            "capture is not installed in {} (run mooncdc-capture init --source sqlite:{})",
            path.display(),
            path.display()
        )));
    }
    Ok(())
}

fn meta_get(conn: &Connection, key: &str) -> Result<Option<String>> {
    conn.query_row(
        &format!("SELECT value FROM {META} WHERE key = ?1"),
        [key],
        |r| r.get::<_, String>(0),
    )
    .optional()
    .map_err(db_err("cannot read capture metadata"))
}

fn meta_set(conn: &Connection, key: &str, value: &str) -> Result<()> {
    conn.execute(
        &format!("INSERT INTO {META}(key, value) VALUES (?1, ?2) ON CONFLICT(key) DO UPDATE SET value = excluded.value"),
        params![key, value],
    )
    .map_err(db_err("cannot write capture metadata"))?;
    Ok(())
}

pub fn identity(conn: &Connection) -> Result<String> {
    meta_get(conn, "identity")?.ok_or_else(|| Error::state("capture metadata has no identity"))
}

fn acknowledged(conn: &Connection) -> Result<Sequence> {
    let s = meta_get(conn, "acknowledged")?.unwrap_or_else(|| "0".into());
    crate::wire::model::parse_sequence(&s).map_err(Error::data)
}

/// The highest sequence ever assigned (0 before the first change): the
/// log's largest rowid, which acknowledging never deletes.
pub fn high_water(conn: &Connection) -> Result<Sequence> {
    let v: i64 = conn
        .query_row(
            &format!("SELECT coalesce(max(seq), 0) FROM {LOG}"),
            [],
            |r| r.get(0),
        )
        .map_err(db_err("cannot read the change log's high water"))?;
    // A version 1 log (AUTOINCREMENT) may have deleted its newest row.
    let old: Option<i64> = conn
        .query_row(
            "SELECT seq FROM sqlite_sequence WHERE name = ?1",
            [LOG],
            |r| r.get(0),
        )
        .optional()
        .unwrap_or(None);
    Ok(v.max(old.unwrap_or(0)).max(0) as Sequence)
}

/// Every captured table version, by tid.
pub fn table_versions(conn: &Connection) -> Result<BTreeMap<i64, TableVersion>> {
    let mut st = conn
        .prepare(&format!(
            "SELECT tid, schema, current FROM {TABLES} ORDER BY tid"
        ))
        .map_err(db_err("cannot read captured tables"))?;
    let mut rows = st
        .query([])
        .map_err(db_err("cannot read captured tables"))?;
    let mut out = BTreeMap::new();
    while let Some(r) = rows.next().map_err(db_err("cannot read captured tables"))? {
        let tid: i64 = r.get(0).map_err(db_err("tid"))?;
        let text: String = r.get(1).map_err(db_err("schema"))?;
        let current: bool = r.get(2).map_err(db_err("current"))?;
        let schema: Schema = serde_json::from_str(&text).map_err(|e| {
            Error::data(format!(
                "captured schema of table version {tid} is unreadable: {e}"
            ))
        })?;
        out.insert(
            tid,
            TableVersion {
                tid,
                schema,
                current,
            },
        );
    }
    Ok(out)
}

/// The current version of each captured table, by table name.
pub fn current_tables(conn: &Connection) -> Result<BTreeMap<String, TableVersion>> {
    Ok(table_versions(conn)?
        .into_values()
        .filter(|t| t.current)
        .map(|t| (t.schema.table.clone(), t))
        .collect())
}

fn log_width(conn: &Connection) -> Result<usize> {
    let n: i64 = conn
        .query_row(
            &format!("SELECT count(*) FROM pragma_table_info('{LOG}') WHERE name GLOB 'v[0-9]*'"),
            [],
            |r| r.get(0),
        )
        .map_err(db_err("cannot read the change log"))?;
    Ok(n as usize)
}

/// The widest table capture takes: the log holds `seq`, `tid`, `op` and two
/// values a column (old and new), within SQLite's default limit of 2000
/// columns a table.
pub const MAX_CAPTURED_COLUMNS: usize = (2000 - 3) / 2;

/// Make the log wide enough for `schema` (two values a column).
fn widen_log(conn: &Connection, schema: &Schema) -> Result<()> {
    let n = schema.columns.len();
    if n > MAX_CAPTURED_COLUMNS {
        return Err(Error::data(format!(
            "table {:?} has {n} columns; SQLite capture takes tables of at most {MAX_CAPTURED_COLUMNS} columns (its change log holds two values a column, within SQLite's limit of 2000); leave it out of capture (init --table names the tables to capture)",
            schema.table
        )));
    }
    let needed = 2 * n;
    let have = log_width(conn)?;
    for i in have..needed {
        conn.execute_batch(&format!("ALTER TABLE {LOG} ADD COLUMN v{i}"))
            .map_err(db_err("cannot widen the change log"))?;
    }
    Ok(())
}

fn schema_json(s: &Schema) -> String {
    let mut out = Vec::new();
    write_schema(&mut out, s);
    String::from_utf8(out).expect("JSON is UTF-8")
}

/// The trigger statements for one table version, exactly as `verify` expects them.
pub fn trigger_sql(tv: &TableVersion) -> [(String, String); 3] {
    let t = quote_ident(&tv.schema.table);
    let n = tv.schema.columns.len();
    let before_cols: Vec<String> = (0..n).map(|i| format!("v{i}")).collect();
    let after_cols: Vec<String> = (n..2 * n).map(|i| format!("v{i}")).collect();
    let old: Vec<String> = tv
        .schema
        .columns
        .iter()
        .map(|c| format!("OLD.{}", quote_ident(&c.name)))
        .collect();
    let new: Vec<String> = tv
        .schema
        .columns
        .iter()
        .map(|c| format!("NEW.{}", quote_ident(&c.name)))
        .collect();
    let tid = tv.tid;
    let name = |op: &str| format!("_mooncdc_{tid}_{op}");
    [
        (
            name("ins"),
            format!(
                "CREATE TRIGGER {} AFTER INSERT ON {t} BEGIN INSERT INTO {LOG}(tid, op, {}) VALUES ({tid}, 1, {}); END",
                quote_ident(&name("ins")),
                after_cols.join(", "),
                new.join(", ")
            ),
        ),
        (
            name("upd"),
            format!(
                "CREATE TRIGGER {} AFTER UPDATE ON {t} BEGIN INSERT INTO {LOG}(tid, op, {}, {}) VALUES ({tid}, 2, {}, {}); END",
                quote_ident(&name("upd")),
                before_cols.join(", "),
                after_cols.join(", "),
                old.join(", "),
                new.join(", ")
            ),
        ),
        (
            name("del"),
            format!(
                "CREATE TRIGGER {} AFTER DELETE ON {t} BEGIN INSERT INTO {LOG}(tid, op, {}) VALUES ({tid}, 3, {}); END",
                quote_ident(&name("del")),
                before_cols.join(", "),
                old.join(", ")
            ),
        ),
    ]
}

fn install_version(conn: &Connection, schema: Schema) -> Result<TableVersion> {
    conn.execute(
        &format!("INSERT INTO {TABLES}(name, schema, current) VALUES (?1, ?2, 1)"),
        params![schema.table, schema_json(&schema)],
    )
    .map_err(db_err("cannot record the captured table"))?;
    let tv = TableVersion {
        tid: conn.last_insert_rowid(),
        schema,
        current: true,
    };
    widen_log(conn, &tv.schema)?;
    for (_, sql) in trigger_sql(&tv) {
        conn.execute_batch(&sql)
            .map_err(db_err("cannot create a capture trigger"))?;
    }
    Ok(tv)
}

fn drop_triggers(conn: &Connection, tid: i64) -> Result<()> {
    for op in ["ins", "upd", "del"] {
        conn.execute_batch(&format!(
            "DROP TRIGGER IF EXISTS {}",
            quote_ident(&format!("_mooncdc_{tid}_{op}"))
        ))
        .map_err(db_err("cannot drop a capture trigger"))?;
    }
    Ok(())
}

/// Install capture (or add tables to it). With no tables named, every user
/// table not yet captured. Returns the tables newly captured.
pub fn init(path: &Path, tables: &[String]) -> Result<Vec<String>> {
    let mut conn = open_existing(path)?;
    let tx = conn
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .map_err(db_err("cannot begin a transaction"))?;
    if !is_installed(&tx)? {
        tx.execute_batch(&format!(
            "CREATE TABLE {META}(key TEXT PRIMARY KEY, value TEXT NOT NULL);
             CREATE TABLE {TABLES}(tid INTEGER PRIMARY KEY AUTOINCREMENT, name TEXT NOT NULL, schema TEXT NOT NULL, current INTEGER NOT NULL);
             CREATE TABLE {LOG}(seq INTEGER PRIMARY KEY, tid INTEGER NOT NULL, op INTEGER NOT NULL);"
        ))
        .map_err(db_err("cannot create the capture tables"))?;
        meta_set(&tx, "identity", &format!("sqlite:{}", random_uuid()?))?;
        meta_set(&tx, "version", &CAPTURE_VERSION.to_string())?;
        meta_set(&tx, "acknowledged", "0")?;
    }
    let captured = current_tables(&tx)?;
    let wanted: Vec<String> = if tables.is_empty() {
        user_tables(&tx)?
    } else {
        for t in tables {
            if t.starts_with(RESERVED_PREFIX) {
                return Err(Error::usage(format!(
                    "table {t:?} belongs to MoonCDC and cannot be captured"
                )));
            }
        }
        tables.to_vec()
    };
    let mut added = Vec::new();
    for name in wanted {
        if captured.contains_key(&name) {
            continue;
        }
        let schema = table_schema(&tx, &name)?;
        install_version(&tx, schema)?;
        added.push(name);
    }
    tx.commit().map_err(db_err("cannot commit"))?;
    Ok(added)
}

/// Differences between the installed capture and what it should be; empty when current.
pub fn verify(path: &Path) -> Result<Vec<String>> {
    let conn = open_existing(path)?;
    require_installed(&conn, path)?;
    let mut drift = Vec::new();
    let version = meta_get(&conn, "version")?.unwrap_or_default();
    if version != CAPTURE_VERSION.to_string() {
        drift.push(format!(
            "capture version is {version:?}, this build installs {CAPTURE_VERSION} (run upgrade)"
        ));
    }
    let mut st = conn
        .prepare("SELECT name, sql FROM sqlite_schema WHERE type = 'trigger' AND name LIKE '\\_mooncdc\\_%' ESCAPE '\\'")
        .map_err(db_err("cannot read triggers"))?;
    let mut installed: HashMap<String, String> = st
        .query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?)))
        .map_err(db_err("cannot read triggers"))?
        .collect::<std::result::Result<_, _>>()
        .map_err(db_err("cannot read triggers"))?;
    for (name, tv) in current_tables(&conn)? {
        if !crate::sqlite_util::table_exists(&conn, &name)? {
            drift.push(format!(
                "table {name:?} no longer exists (dropped or renamed; run upgrade to stop capturing it)"
            ));
            continue;
        }
        match table_schema(&conn, &name) {
            Ok(now) if now != tv.schema => drift.push(format!(
                "table {name:?} changed since capture was installed (columns or key differ; run upgrade)"
            )),
            Ok(_) => {}
            Err(e) => drift.push(format!("table {name:?}: {}", e.message())),
        }
        for (tname, sql) in trigger_sql(&tv) {
            match installed.remove(&tname) {
                None => drift.push(format!(
                    "trigger {tname} of table {name:?} is missing (run upgrade)"
                )),
                Some(s) if s != sql => drift.push(format!(
                    "trigger {tname} of table {name:?} was altered (run upgrade)"
                )),
                Some(_) => {}
            }
        }
    }
    for (tname, _) in installed {
        drift.push(format!(
            "trigger {tname} does not belong to the current capture (run upgrade)"
        ));
    }
    Ok(drift)
}

/// Rebuild triggers for the current schemas and version. Changed tables get a
/// new version; their unacknowledged changes keep decoding with the old one.
/// Returns a line per action taken.
pub fn upgrade(path: &Path) -> Result<Vec<String>> {
    let mut conn = open_existing(path)?;
    require_installed(&conn, path)?;
    let tx = conn
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .map_err(db_err("cannot begin a transaction"))?;
    let mut actions = Vec::new();
    // Drop every MoonCDC trigger, then install the current ones.
    let names: Vec<String> = {
        let mut st = tx
            .prepare("SELECT name FROM sqlite_schema WHERE type = 'trigger' AND name LIKE '\\_mooncdc\\_%' ESCAPE '\\'")
            .map_err(db_err("cannot read triggers"))?;
        let v = st
            .query_map([], |r| r.get::<_, String>(0))
            .map_err(db_err("cannot read triggers"))?
            .collect::<std::result::Result<Vec<_>, _>>()
            .map_err(db_err("cannot read triggers"))?;
        v
    };
    for n in names {
        tx.execute_batch(&format!("DROP TRIGGER {}", quote_ident(&n)))
            .map_err(db_err("cannot drop a trigger"))?;
    }
    // With no trigger naming it, the log can be rebuilt.
    if rebuild_v1_log(&tx)? {
        actions.push("change log rebuilt without AUTOINCREMENT (capture version 2)".into());
    }
    for (name, tv) in current_tables(&tx)? {
        if !crate::sqlite_util::table_exists(&tx, &name)? {
            // Dropped (or renamed): stop capturing it. Its logged changes
            // still decode with their version.
            tx.execute(
                &format!("UPDATE {TABLES} SET current = 0 WHERE tid = ?1"),
                [tv.tid],
            )
            .map_err(db_err("cannot retire a table version"))?;
            actions.push(format!(
                "table {name:?} no longer exists: no longer captured (capture a renamed table with init --table)"
            ));
            continue;
        }
        let now = table_schema(&tx, &name)?;
        if now == tv.schema {
            drop_triggers(&tx, tv.tid)?;
            widen_log(&tx, &tv.schema)?;
            for (_, sql) in trigger_sql(&tv) {
                tx.execute_batch(&sql)
                    .map_err(db_err("cannot create a capture trigger"))?;
            }
        } else {
            tx.execute(
                &format!("UPDATE {TABLES} SET current = 0 WHERE tid = ?1"),
                [tv.tid],
            )
            .map_err(db_err("cannot retire a table version"))?;
            let nv = install_version(&tx, now)?;
            let synced = log_added_columns(&tx, &tv.schema, &nv)?;
            actions.push(format!(
                "table {name:?}: schema changed, now captured as version {} (earlier changes keep version {}){}",
                nv.tid,
                tv.tid,
                if synced > 0 {
                    format!("; {synced} rows logged with their values in the added columns")
                } else {
                    String::new()
                }
            ));
        }
    }
    meta_set(&tx, "version", &CAPTURE_VERSION.to_string())?;
    tx.commit().map_err(db_err("cannot commit"))?;
    actions.push("triggers rebuilt".into());
    Ok(actions)
}

/// SQLite lets a non-INTEGER primary key of a rowid table hold NULL; such a
/// row cannot be identified, so it is refused where it is read.
fn null_key(s: &Schema, row: &[crate::wire::Value]) -> std::result::Result<(), String> {
    for (k, i) in s.key.iter().zip(s.key_indices()) {
        if row[i].is_null() {
            return Err(format!(
                "primary key column {k:?} is NULL (SQLite allows that in rowid tables; MoonCDC cannot identify such a row: make the column NOT NULL)"
            ));
        }
    }
    Ok(())
}

/// After columns were added to a table, log for every row whose added columns
/// are not all NULL an update from "added columns NULL" to the row as it is:
/// a projection adds the columns empty, and these updates give them the values
/// the source has (defaults, and whatever was written between the ALTER and
/// the upgrade, which the old triggers could not see). Returns the rows logged.
fn log_added_columns(conn: &Connection, old: &Schema, new: &TableVersion) -> Result<u64> {
    let names_old: Vec<&str> = old.columns.iter().map(|c| c.name.as_str()).collect();
    let cols = &new.schema.columns;
    let added: Vec<usize> = (0..cols.len())
        .filter(|&i| !names_old.contains(&cols[i].name.as_str()))
        .collect();
    // Only pure additions can be expressed this way (columns kept in place).
    let kept_in_place = cols
        .iter()
        .take(names_old.len())
        .map(|c| c.name.as_str())
        .eq(names_old.iter().copied());
    if added.is_empty() || !kept_in_place {
        return Ok(0);
    }
    let n = cols.len();
    let quoted: Vec<String> = cols.iter().map(|c| quote_ident(&c.name)).collect();
    let nonnull: Vec<String> = added
        .iter()
        .map(|&i| format!("{} IS NOT NULL", quote_ident(&cols[i].name)))
        .collect();
    let before: Vec<String> = (0..n)
        .map(|i| {
            if added.contains(&i) {
                "NULL".to_string()
            } else {
                quoted[i].clone()
            }
        })
        .collect();
    let logcols: Vec<String> = (0..2 * n).map(|i| format!("v{i}")).collect();
    let sql = format!(
        "INSERT INTO {LOG}(tid, op, {}) SELECT {}, 2, {}, {} FROM {} WHERE {}",
        logcols.join(", "),
        new.tid,
        before.join(", "),
        quoted.join(", "),
        quote_ident(&new.schema.table),
        nonnull.join(" OR ")
    );
    let rows = conn
        .execute(&sql, [])
        .map_err(db_err("cannot log the added columns' values"))?;
    Ok(rows as u64)
}

/// A version 1 log used AUTOINCREMENT; copy it into a plain rowid table,
/// keeping every row and, as its newest row, the high water (a placeholder
/// row at the high water if acknowledgement had deleted the newest one).
fn rebuild_v1_log(conn: &Connection) -> Result<bool> {
    let sql: String = conn
        .query_row(
            "SELECT sql FROM sqlite_schema WHERE type = 'table' AND name = ?1",
            [LOG],
            |r| r.get(0),
        )
        .map_err(db_err("cannot read the change log's definition"))?;
    if !sql.to_ascii_uppercase().contains("AUTOINCREMENT") {
        return Ok(false);
    }
    let hw = high_water(conn)? as i64;
    let cols: Vec<String> = (0..log_width(conn)?).map(|i| format!(", v{i}")).collect();
    let cols = cols.concat();
    conn.execute_batch(&format!(
        "CREATE TABLE _mooncdc_log_v2(seq INTEGER PRIMARY KEY, tid INTEGER NOT NULL, op INTEGER NOT NULL{cols});
         INSERT INTO _mooncdc_log_v2 SELECT * FROM {LOG};
         INSERT INTO _mooncdc_log_v2(seq, tid, op) SELECT {hw}, 0, 0 WHERE NOT EXISTS (SELECT 1 FROM _mooncdc_log_v2 WHERE seq >= {hw}) AND {hw} > 0;
         DROP TABLE {LOG};
         ALTER TABLE _mooncdc_log_v2 RENAME TO {LOG};"
    ))
    .map_err(db_err("cannot rebuild the change log"))?;
    Ok(true)
}

pub fn status(path: &Path) -> Result<Status> {
    let conn = open_existing(path)?;
    require_installed(&conn, path)?;
    let acked = acknowledged(&conn)?;
    let backlog: i64 = conn
        .query_row(
            &format!("SELECT count(*) FROM {LOG} WHERE seq > ?1"),
            [acked as i64],
            |r| r.get(0),
        )
        .map_err(db_err("cannot count the change log"))?;
    Ok(Status {
        identity: identity(&conn)?,
        acknowledged: acknowledged(&conn)?,
        high_water: high_water(&conn)?,
        backlog: backlog as u64,
        tables: current_tables(&conn)?.into_keys().collect(),
    })
}

/// Acknowledge through `through`: delete those changes and record the position.
/// Never beyond the high water; an older position than the one recorded is a
/// no-op (acknowledgement never moves backwards). Returns the position recorded.
pub fn ack(path: &Path, cursor: &Cursor) -> Result<Sequence> {
    let mut conn = open_existing(path)?;
    require_installed(&conn, path)?;
    let tx = conn
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .map_err(db_err("cannot begin a transaction"))?;
    let id = identity(&tx)?;
    if cursor.source != id {
        return Err(Error::state(format!(
            "cursor is for source {:?} but this database is {id:?}",
            cursor.source
        )));
    }
    let hw = high_water(&tx)?;
    let through = cursor.sequence();
    if through > hw {
        return Err(Error::state(format!(
            "cannot acknowledge through {through}: the high water is {hw}"
        )));
    }
    let acked = acknowledged(&tx)?;
    if through <= acked {
        return Ok(acked);
    }
    // The newest row stays (even when acknowledged): it keeps the largest
    // rowid, so no sequence is ever handed out twice.
    tx.execute(
        &format!("DELETE FROM {LOG} WHERE seq <= ?1 AND seq < (SELECT max(seq) FROM {LOG})"),
        [through as i64],
    )
    .map_err(db_err("cannot delete acknowledged changes"))?;
    meta_set(&tx, "acknowledged", &through.to_string())?;
    tx.commit().map_err(db_err("cannot commit"))?;
    Ok(through)
}

/// What one read wrote.
#[derive(Debug, Clone, Default)]
pub struct ReadStats {
    pub batches: u64,
    pub events: u64,
    pub end: Option<Cursor>,
}

/// Write one batch stream of the changes after `after` (default: the
/// acknowledged position), in one read transaction. A batch ends where a
/// table's schema version changes (the next header carries the new schema),
/// at the last event when a limit cut the read, else at the high water.
pub fn read(
    path: &Path,
    after: Option<&Cursor>,
    limits: ReadLimits,
    out: &mut dyn Write,
) -> Result<ReadStats> {
    let mut conn = open_existing(path)?;
    require_installed(&conn, path)?;
    let tx = conn
        .transaction_with_behavior(TransactionBehavior::Deferred)
        .map_err(db_err("cannot begin a read transaction"))?;
    let stats = read_in(&tx, after, limits, out, true)?;
    tx.commit()
        .map_err(db_err("cannot end the read transaction"))?;
    Ok(stats)
}

/// Like [`read`], on an open connection inside a transaction. With
/// `always_emit` false, nothing is written when there is nothing new.
pub fn read_in(
    conn: &Connection,
    after: Option<&Cursor>,
    limits: ReadLimits,
    out: &mut dyn Write,
    always_emit: bool,
) -> Result<ReadStats> {
    let id = identity(conn)?;
    let acked = acknowledged(conn)?;
    let hw = high_water(conn)?;
    let start = match after {
        None => acked,
        Some(c) => {
            if c.source != id {
                return Err(Error::state(format!(
                    "cursor is for source {:?} but this database is {id:?}",
                    c.source
                )));
            }
            if c.sequence() < acked {
                return Err(Error::state(format!(
                    "cursor {} is before the acknowledged position {acked}: those changes have been deleted (take a new snapshot)",
                    c.sequence()
                )));
            }
            if c.sequence() > hw {
                return Err(Error::state(format!(
                    "cursor {} is beyond the high water {hw} of this database",
                    c.sequence()
                )));
            }
            c.sequence()
        }
    };
    let versions = table_versions(conn)?;
    // Pass 1: batch boundaries where a table's version changes, and each batch's tables.
    let mut plan: Vec<(Vec<i64>, Option<Sequence>, u64)> = Vec::new(); // (tids, cut-after seq, events)
    let mut limited_by_events = false;
    {
        let mut st = conn
            .prepare_cached(&format!(
                "SELECT seq, tid FROM {LOG} WHERE seq > ?1 ORDER BY seq"
            ))
            .map_err(db_err("cannot read the change log"))?;
        let mut rows = st
            .query([start as i64])
            .map_err(db_err("cannot read the change log"))?;
        let mut by_name: HashMap<&str, i64> = HashMap::new();
        let mut tids: Vec<i64> = Vec::new();
        let mut count = 0u64;
        let mut total = 0u64;
        let mut last: Sequence = start;
        while let Some(r) = rows.next().map_err(db_err("cannot read the change log"))? {
            if limits.max_events.is_some_and(|m| total >= m) {
                limited_by_events = true;
                break;
            }
            let seq: i64 = r.get(0).map_err(db_err("seq"))?;
            let tid: i64 = r.get(1).map_err(db_err("tid"))?;
            let tv = versions.get(&tid).ok_or_else(|| {
                Error::data(format!(
                    "change {seq} refers to unknown table version {tid}"
                ))
            })?;
            match by_name.get(tv.schema.table.as_str()) {
                Some(&t) if t != tid => {
                    plan.push((std::mem::take(&mut tids), Some(last), count));
                    by_name.clear();
                    count = 0;
                    by_name.insert(tv.schema.table.as_str(), tid);
                    tids.push(tid);
                }
                Some(_) => {}
                None => {
                    by_name.insert(tv.schema.table.as_str(), tid);
                    tids.push(tid);
                }
            }
            count += 1;
            total += 1;
            last = seq as Sequence;
        }
        plan.push((tids, None, count));
    }
    let total: u64 = plan.iter().map(|p| p.2).sum();
    let mut stats = ReadStats::default();
    if total == 0 && !always_emit && start == hw {
        return Ok(stats);
    }

    // Pass 2: stream the events.
    let width = log_width(conn)?;
    let cols: Vec<String> = (0..width).map(|i| format!("v{i}")).collect();
    let sql = if cols.is_empty() {
        format!("SELECT seq, tid, op FROM {LOG} WHERE seq > ?1 ORDER BY seq")
    } else {
        format!(
            "SELECT seq, tid, op, {} FROM {LOG} WHERE seq > ?1 ORDER BY seq",
            cols.join(", ")
        )
    };
    let mut st = conn
        .prepare(&sql)
        .map_err(db_err("cannot read the change log"))?;
    let mut rows = st
        .query([start as i64])
        .map_err(db_err("cannot read the change log"))?;
    let mut line = Vec::with_capacity(1024);
    let mut batch_start = start;
    let mut bytes = 0u64;
    let nplans = plan.len();
    for (i, (tids, cut, n)) in plan.into_iter().enumerate() {
        let schemas: Vec<Schema> = tids.iter().map(|t| versions[t].schema.clone()).collect();
        let header = Header {
            start: Cursor::new(id.clone(), batch_start),
            high_water: hw,
            schemas: Some(schemas),
            compacted: false,
        };
        line.clear();
        write_header_line(&mut line, &header);
        out.write_all(&line).map_err(io_out)?;
        let mut written = 0u64;
        let mut last = batch_start;
        let mut stopped_by_bytes = false;
        while written < n {
            let Some(r) = rows.next().map_err(db_err("cannot read the change log"))? else {
                break;
            };
            let seq = r.get::<_, i64>(0).map_err(db_err("seq"))? as Sequence;
            let tid: i64 = r.get(1).map_err(db_err("tid"))?;
            let op: i64 = r.get(2).map_err(db_err("op"))?;
            let tv = &versions[&tid];
            let ncol = tv.schema.columns.len();
            let located = |e: String| {
                Error::data(format!("change {seq} of table {:?}: {e}", tv.schema.table))
            };
            let before = || row_values(r, 3, ncol).map_err(located);
            let after = || row_values(r, 3 + ncol, ncol).map_err(located);
            let (operation, before, after) = match op {
                1 => (Operation::Insert, None, Some(after()?)),
                2 => (Operation::Update, Some(before()?), Some(after()?)),
                3 => (Operation::Delete, Some(before()?), None),
                other => {
                    return Err(Error::data(format!(
                        "change {seq} has unknown operation code {other}"
                    )))
                }
            };
            for img in [&before, &after].into_iter().flatten() {
                null_key(&tv.schema, img).map_err(located)?;
            }
            let e = Event {
                sequence: seq,
                table: tv.schema.table.clone(),
                operation,
                before,
                after,
            };
            line.clear();
            write_event_line(&mut line, &e);
            limits.check_line(&line, &e)?;
            if written > 0
                && limits
                    .max_bytes
                    .is_some_and(|m| bytes + line.len() as u64 > m)
            {
                stopped_by_bytes = true;
                break;
            }
            bytes += line.len() as u64;
            out.write_all(&line).map_err(io_out)?;
            written += 1;
            last = seq;
        }
        let end = if stopped_by_bytes || (limited_by_events && i + 1 == nplans) {
            last
        } else {
            match cut {
                Some(c) => c,
                None => hw,
            }
        };
        let commit = Commit {
            end: Cursor::new(id.clone(), end),
            count: written,
        };
        line.clear();
        write_commit_line(&mut line, &commit);
        out.write_all(&line).map_err(io_out)?;
        stats.batches += 1;
        stats.events += written;
        stats.end = Some(commit.end.clone());
        batch_start = end;
        if stopped_by_bytes {
            break;
        }
    }
    Ok(stats)
}

/// Follow the change log: emit a batch whenever changes commit, forever (until
/// the output closes). With `ack_target`, acknowledge up to what that target
/// durably holds after each poll; nothing else is ever acknowledged.
pub fn follow(
    path: &Path,
    after: Option<&Cursor>,
    limits: ReadLimits,
    poll: std::time::Duration,
    ack_target: Option<&dyn Fn() -> Result<Option<Cursor>>>,
    out: &mut dyn Write,
) -> Result<()> {
    let mut conn = open_existing(path)?;
    require_installed(&conn, path)?;
    let mut position = after.cloned();
    let mut first = true;
    loop {
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Deferred)
            .map_err(db_err("cannot begin a read transaction"))?;
        let stats = read_in(&tx, position.as_ref(), limits, out, first)?;
        tx.commit()
            .map_err(db_err("cannot end the read transaction"))?;
        out.flush().map_err(io_out)?;
        first = false;
        if let Some(end) = stats.end {
            position = Some(end);
        }
        if let Some(get) = ack_target {
            if let Some(held) = get()? {
                let id = identity(&conn)?;
                if held.source == id {
                    ack(path, &held)?;
                }
            }
        }
        // A cut read continues at once; otherwise wait for new changes.
        let cut =
            limits.max_events.is_some_and(|m| stats.events >= m) || limits.max_bytes.is_some();
        if !(cut && stats.events > 0) {
            std::thread::sleep(poll);
        }
    }
}

/// Write a snapshot of the captured tables (or the named ones) in one read
/// transaction: the cursor is the change log's high water at that moment, so
/// capture `--after` it hands over exactly, even while writers run.
pub fn snapshot(
    path: &Path,
    tables: &[String],
    json: bool,
    out: &mut dyn Write,
    progress: &mut dyn FnMut(u64),
) -> Result<u64> {
    let mut conn = open_existing(path)?;
    require_installed(&conn, path)?;
    let tx = conn
        .transaction_with_behavior(TransactionBehavior::Deferred)
        .map_err(db_err("cannot begin a read transaction"))?;
    // The first read fixes the transaction's view; read the cursor inside it.
    let id = identity(&tx)?;
    let hw = high_water(&tx)?;
    let captured = current_tables(&tx)?;
    let chosen: Vec<TableVersion> = if tables.is_empty() {
        captured.into_values().collect()
    } else {
        tables
            .iter()
            .map(|t| {
                captured.get(t).cloned().ok_or_else(|| {
                    Error::usage(format!(
                        "table {t:?} is not captured (run mooncdc-capture init --table {t:?})"
                    ))
                })
            })
            .collect::<Result<_>>()?
    };
    for tv in &chosen {
        let now = table_schema(&tx, &tv.schema.table)?;
        if now != tv.schema {
            return Err(Error::state(format!(
                "table {:?} changed since capture was installed; run mooncdc-capture upgrade first",
                tv.schema.table
            )));
        }
    }
    let cursor = Cursor::new(id, hw);
    let schemas: Vec<Schema> = chosen.iter().map(|t| t.schema.clone()).collect();
    let mut w = SnapshotWriter::begin(out, json, &cursor, &schemas).map_err(io_out)?;
    for s in &schemas {
        let cols: Vec<String> = s.columns.iter().map(|c| quote_ident(&c.name)).collect();
        let sql = format!(
            "SELECT {} FROM {} ORDER BY {}",
            cols.join(", "),
            quote_ident(&s.table),
            order_by_key(s)
        );
        let mut st = tx.prepare(&sql).map_err(db_err("cannot read a table"))?;
        let mut rows = st.query([]).map_err(db_err("cannot read a table"))?;
        w.table(s).map_err(io_out)?;
        while let Some(r) = rows.next().map_err(db_err("cannot read a table"))? {
            let row = row_values(r, 0, s.columns.len())
                .and_then(|row| null_key(s, &row).map(|_| row))
                .map_err(|e| {
                    Error::data(format!("table {:?}, row {}: {e}", s.table, w.count() + 1))
                })?;
            w.row(&row).map_err(io_out)?;
            if w.count() % 65536 == 0 {
                progress(w.count());
            }
        }
    }
    let count = w.finish().map_err(io_out)?;
    tx.commit()
        .map_err(db_err("cannot end the read transaction"))?;
    progress(count);
    Ok(count)
}
