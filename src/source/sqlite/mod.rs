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

mod audit;
mod backfill;
mod install;
mod log;
mod snapshot;

pub use audit::{select_in_key_order, SqliteAuditRows};
pub use backfill::{
    request as request_backfill, requests as backfill_requests, write_chunk, ChunkDone,
    Request as BackfillRequest, DEFAULT_CHUNK_ROWS,
};

mod renames;
use install::*;
pub use install::{init, migrate, trigger_sql, upgrade, verify, MAX_CAPTURED_COLUMNS};
pub use log::{follow, read, read_in, ReadStats};
pub use snapshot::snapshot;

use super::ReadLimits;
use crate::error::{Error, Result};
use crate::sqlite_util::{
    db_err, open_existing, order_by_key, quote_ident, random_uuid, row_values, table_schema,
    user_tables, RESERVED_PREFIX,
};
use crate::wire::batch::{
    write_commit_line, write_event_line, write_header_line, write_schema_line,
};
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
    pub backfills: Vec<BackfillRequest>,
}

/// `status`'s `backfills`.
fn backfill_field(reqs: &[BackfillRequest]) -> crate::source::StatusField {
    let reqs: Vec<crate::source::backfill::RequestStatus> = reqs
        .iter()
        .map(|r| crate::source::backfill::RequestStatus {
            id: r.id,
            table: r.table.clone(),
            resync: r.resync,
            state: r.state(),
            rows: r.rows,
            estimate: r.estimate,
            requested_at: Some(r.requested.to_string()),
            done_at: r.done.map(|d| d.to_string()),
        })
        .collect();
    crate::source::backfill::status_field(&reqs)
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
        backfills: backfill_requests(&conn)?,
    })
}

/// Acknowledge through `through`: delete those changes and record the position.
/// Never beyond the high water; an older position than the one recorded is a
/// no-op (acknowledgement never moves backwards). Returns the position recorded.
pub fn ack(path: &Path, cursor: &Cursor) -> Result<Sequence> {
    ack_waiting(path, cursor, crate::sqlite_util::BUSY_TIMEOUT)
}

/// [`ack`], waiting at most `wait` for another connection's write lock (a
/// follower's acknowledgement must not hold its stream up).
pub fn ack_waiting(path: &Path, cursor: &Cursor, wait: std::time::Duration) -> Result<Sequence> {
    let mut conn = open_existing(path)?;
    conn.busy_timeout(wait)
        .map_err(db_err("cannot set the busy timeout"))?;
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
    backfill::prune(&tx, through)?;
    meta_set(&tx, "acknowledged", &through.to_string())?;
    tx.commit().map_err(db_err("cannot commit"))?;
    Ok(through)
}

/// A SQLite database file as a [`Source`](crate::source::Source).
#[derive(Debug, Clone)]
pub struct SqliteSource {
    pub path: std::path::PathBuf,
}

impl crate::source::Source for SqliteSource {
    fn kind(&self) -> crate::source::SourceKind {
        crate::source::SourceKind::Sqlite
    }
    fn init(&self, tables: &[String]) -> Result<(String, Vec<String>)> {
        let added = init(&self.path, tables)?;
        Ok((status(&self.path)?.identity, added))
    }
    fn verify(&self) -> Result<crate::source::Verified> {
        Ok(crate::source::Verified {
            drift: verify(&self.path)?,
            ..Default::default()
        })
    }
    fn backfill(&self, tables: &[String], all: bool, resync: bool) -> Result<Vec<String>> {
        let tables = if all {
            let conn = open_existing(&self.path)?;
            require_installed(&conn, &self.path)?;
            current_tables(&conn)?.into_keys().collect()
        } else {
            tables.to_vec()
        };
        request_backfill(&self.path, &tables, resync)
    }
    fn migrate(&self, sql: &str) -> Result<Vec<String>> {
        migrate(&self.path, sql)
    }
    fn upgrade(&self) -> Result<Vec<String>> {
        upgrade(&self.path)
    }
    fn status(&self) -> Result<crate::source::SourceStatus> {
        use crate::source::StatusField;
        let st = status(&self.path)?;
        Ok(crate::source::SourceStatus {
            identity: st.identity,
            fields: vec![
                StatusField::count("acknowledged", st.acknowledged),
                StatusField::count("high water", st.high_water),
                StatusField::count("backlog", st.backlog.into())
                    .with_text(crate::log::count(st.backlog, "change", "changes")),
                StatusField::new("tables", st.tables.clone()).with_text(st.tables.join(", ")),
                backfill_field(&st.backfills),
            ],
        })
    }
    fn ack(&self, cursor: &Cursor) -> Result<String> {
        Ok(format!("acknowledged through {}", ack(&self.path, cursor)?))
    }
    fn read(&self, after: Option<&Cursor>, limits: ReadLimits, out: &mut dyn Write) -> Result<()> {
        read(&self.path, after, limits, out).map(|_| ())
    }
    fn follow(
        &self,
        after: Option<&Cursor>,
        limits: ReadLimits,
        timing: crate::source::FollowTiming,
        held: Option<&crate::source::HeldCursor>,
        out: &mut dyn Write,
    ) -> Result<()> {
        follow(
            &self.path,
            after,
            limits,
            timing.poll,
            timing.backfill_chunk_rows,
            held,
            out,
        )
    }
    fn snapshot(
        &self,
        req: &crate::source::SnapshotRequest,
        out: &mut dyn Write,
        progress: &mut dyn crate::source::Tally,
    ) -> Result<u64> {
        snapshot(&self.path, &req.tables, req.json, out, progress)
    }
    fn audit_rows(&self, tables: &[String]) -> Result<Box<dyn crate::source::AuditRows>> {
        Ok(Box::new(SqliteAuditRows::open(&self.path, tables)?))
    }
}
