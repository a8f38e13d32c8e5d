//! The SQLite projection target: the embedded default.
//!
//! Each source table becomes a table named exactly as the event's `table`
//! (one quoted identifier). Column types: a SQLite source's declared types
//! are copied (so affinity treats values as the source did); for any other
//! source every column is declared without a type, which in SQLite means no
//! affinity, so no value ever changes class (the TEXT `'12.3400'` of a
//! PostgreSQL `numeric` stays TEXT). The cursor lives in `_mooncdc_cursor` and
//! is written in the same transaction as the batch's rows: a crash at any
//! point loses nothing and duplicates nothing.

mod apply;
mod evolve;
mod table;
mod types;

pub use crate::sqlite_util::{affinity, keeps_class, looks_numeric, Affinity};
use table::*;
use types::*;

use super::{ExistingRows, TargetOptions};
use crate::error::{Error, Result};
use crate::sqlite_util::{
    db_err, open_or_create, quote_ident, row_values, table_exists, table_schema, Bind,
    RESERVED_PREFIX,
};
use crate::wire::{
    BatchStreamReader, Cursor, Event, Item, Operation, Row, Schema, SnapItem, SnapshotReader, Value,
};
use rusqlite::{params, params_from_iter, Connection, OptionalExtension};
use std::collections::HashMap;
use std::io::BufRead;
use std::path::{Path, PathBuf};

const CURSOR: &str = "_mooncdc_cursor";

pub use super::{ApplyStats, OnConflict};

pub struct SqliteTarget {
    /// Opened at the first batch or snapshot header, so input that is not
    /// even a stream never creates or changes a database.
    pub(super) conn: Option<Connection>,
    pub(super) path: PathBuf,
    pub(super) committed: ApplyStats,
    /// Whether the database holds MoonCDC's cursor table already; one that
    /// does not is changed only by a successful first apply.
    pub(super) projection: bool,
    /// Whether this apply created the database file (removed again when
    /// nothing was ever committed to it).
    pub(super) created: bool,
    pub(super) options: TargetOptions,
    /// Whether a batch's transaction is open.
    pub(super) in_tx: bool,
}

impl SqliteTarget {
    /// A projection database at `path`. Nothing is created or changed here:
    /// a missing file is created, and MoonCDC's table added, inside the
    /// first batch's or snapshot's transaction.
    pub fn open(path: &Path) -> Result<Self> {
        let mut t = SqliteTarget {
            conn: None,
            path: path.to_path_buf(),
            committed: ApplyStats::default(),
            projection: false,
            created: false,
            options: TargetOptions::default(),
            in_tx: false,
        };
        if path.exists() {
            let conn = crate::sqlite_util::open_existing(path)?;
            t.projection = table_exists(&conn, CURSOR)?;
            t.conn = Some(conn);
        }
        Ok(t)
    }

    /// What the last apply committed, also when it then failed.
    pub fn committed(&self) -> &ApplyStats {
        &self.committed
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The stored cursor, if any.
    pub fn cursor(&self) -> Result<Option<Cursor>> {
        match &self.conn {
            Some(c) if self.projection => stored_cursor(c),
            _ => Ok(None),
        }
    }

    /// The open connection; only called once [`Self::begin`] has opened it.
    pub(super) fn db(&self) -> &Connection {
        self.conn.as_ref().expect("opened at the first header")
    }

    /// Open the database if needed and begin a batch's transaction, with
    /// the cursor table in it for a database that is not a projection yet.
    pub(super) fn begin(&mut self) -> Result<()> {
        if self.conn.is_none() {
            // Removed again on a rollback only if this apply made it.
            self.created = create_private(&self.path)?;
            self.conn = Some(open_or_create(&self.path)?);
        }
        let conn = self.db();
        conn.set_prepared_statement_cache_capacity(256);
        conn.execute_batch("BEGIN IMMEDIATE")
            .map_err(db_err("cannot begin a transaction"))?;
        self.in_tx = true;
        crate::util::stop::batch_begins();
        if !self.projection {
            self.db()
                .execute_batch(&format!(
                    "CREATE TABLE IF NOT EXISTS {CURSOR}(source TEXT PRIMARY KEY, sequence TEXT NOT NULL)"
                ))
                .map_err(|e| {
                    Error::database("cannot prepare the target database", e)
                        .in_file(&self.path.display().to_string())
                })?;
        }
        Ok(())
    }

    /// Commit a batch's transaction. The first commit makes the database a
    /// projection, which then runs in WAL mode (readers never block apply).
    pub(super) fn commit(&mut self) -> Result<()> {
        self.db()
            .execute_batch("COMMIT")
            .map_err(db_err("cannot commit"))?;
        self.in_tx = false;
        crate::util::stop::batch_done();
        if !self.projection {
            self.projection = true;
            self.db()
                .execute_batch("PRAGMA journal_mode = WAL")
                .map_err(db_err("cannot switch the target database to WAL"))?;
        }
        Ok(())
    }

    /// Roll back a failed batch; a database file this apply created and
    /// never committed to is removed, so a failed first apply leaves nothing.
    pub(super) fn rollback(&mut self) {
        if let Some(c) = &self.conn {
            let _ = c.execute_batch("ROLLBACK");
        }
        if self.in_tx {
            crate::util::stop::batch_done();
        }
        self.in_tx = false;
        if self.created && !self.projection {
            self.conn = None;
            let _ = std::fs::remove_file(&self.path);
            for ext in ["-wal", "-shm", "-journal"] {
                let mut p = self.path.clone().into_os_string();
                p.push(ext);
                let _ = std::fs::remove_file(p);
            }
            self.created = false;
        }
    }
}

/// Create a new projection's database file, empty (SQLite takes an empty
/// file as an empty database), readable by its owner only: 0600 less the
/// umask. SQLite gives its -wal, -shm and -journal files the database
/// file's mode. A file that appeared meanwhile is left as it is: false.
fn create_private(path: &Path) -> Result<bool> {
    use std::os::unix::fs::OpenOptionsExt;
    match std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(PROJECTION_MODE)
        .open(path)
    {
        Ok(_) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(false),
        Err(e) => {
            Err(Error::io("cannot create the target database", e)
                .in_file(&path.display().to_string()))
        }
    }
}

/// The mode of a new projection database file, less the umask;
/// docs/SQLITE.md.
pub const PROJECTION_MODE: u32 = 0o600;

/// The cursor stored in a target database (one source per target).
pub fn stored_cursor(conn: &Connection) -> Result<Option<Cursor>> {
    let mut st = conn
        .prepare_cached(&format!("SELECT source, sequence FROM {CURSOR}"))
        .map_err(db_err("cannot read the target's cursor"))?;
    let rows: Vec<(String, String)> = st
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .map_err(db_err("cannot read the target's cursor"))?
        .collect::<std::result::Result<_, _>>()
        .map_err(db_err("cannot read the target's cursor"))?;
    match rows.len() {
        0 => Ok(None),
        1 => {
            let (source, seq) = &rows[0];
            let seq = crate::wire::model::parse_sequence(seq).map_err(Error::data)?;
            Ok(Some(Cursor::new(source.clone(), seq)))
        }
        _ => Err(Error::state("the target holds cursors of several sources")),
    }
}

/// The cursor of a target database file, without creating anything.
pub fn read_cursor(path: &Path) -> Result<Option<Cursor>> {
    let conn = crate::sqlite_util::open_existing(path)?;
    if !table_exists(&conn, CURSOR)? {
        return Ok(None);
    }
    stored_cursor(&conn)
}

fn set_cursor(conn: &Connection, c: &Cursor) -> Result<()> {
    conn.execute(&format!("DELETE FROM {CURSOR}"), [])
        .map_err(db_err("cannot write the target's cursor"))?;
    conn.execute(
        &format!("INSERT INTO {CURSOR}(source, sequence) VALUES (?1, ?2)"),
        params![c.source, c.sequence().to_string()],
    )
    .map_err(db_err("cannot write the target's cursor"))?;
    Ok(())
}

impl SqliteTarget {
    /// How batches and snapshots are applied.
    pub fn with_options(mut self, options: TargetOptions) -> Self {
        self.options = options;
        self
    }

    /// A read transaction over the whole audit, when the database exists.
    fn begin_read(&mut self) -> Result<()> {
        if let Some(c) = &self.conn {
            c.execute_batch("BEGIN")
                .map_err(db_err("cannot begin a read transaction"))?;
        }
        Ok(())
    }
}

impl super::Target for SqliteTarget {
    fn cursor(&self) -> Result<Option<Cursor>> {
        SqliteTarget::cursor(self)
    }
    fn apply_stream(
        &mut self,
        input: &mut BatchStreamReader<crate::wire::DynRead>,
        progress: &mut dyn FnMut(&ApplyStats),
    ) -> Result<ApplyStats> {
        SqliteTarget::apply_stream(self, input, progress)
    }
    fn apply_snapshot(
        &mut self,
        input: &mut SnapshotReader<crate::wire::DynRead>,
        progress: &mut dyn FnMut(&ApplyStats),
    ) -> Result<ApplyStats> {
        SqliteTarget::apply_snapshot(self, input, progress)
    }
    fn committed(&self) -> ApplyStats {
        self.committed.clone()
    }
}

impl super::AuditedTarget for SqliteTarget {
    fn begin_audit(&mut self) -> Result<()> {
        self.begin_read()
    }
    fn table_shape(
        &self,
        schema: &Schema,
        _kind: crate::wire::SourceKind,
    ) -> Result<Option<super::StoredShape>> {
        let Some(c) = &self.conn else { return Ok(None) };
        if !table_exists(c, &schema.table)? {
            return Ok(None);
        }
        let ts = table_schema(c, &schema.table)?;
        Ok(Some(super::StoredShape {
            columns: ts.columns.iter().map(|c| c.name.clone()).collect(),
            key: Some(ts.key),
            empty_for_null: Vec::new(),
        }))
    }
    fn with_rows(
        &self,
        schema: &Schema,
        _kind: crate::wire::SourceKind,
        f: &mut dyn FnMut(&mut super::PullRow<'_>) -> Result<()>,
    ) -> Result<()> {
        let c = match &self.conn {
            Some(c) if table_exists(c, &schema.table)? => c,
            _ => return f(&mut || Ok(None)),
        };
        let sql = crate::sqlite_util::select_in_key_order(schema);
        let mut st = c
            .prepare(&sql)
            .map_err(db_err("cannot read a target table"))?;
        let mut rows = st.query([]).map_err(db_err("cannot read a target table"))?;
        let width = schema.columns.len();
        f(&mut || {
            let Some(r) = rows.next().map_err(db_err("cannot read a target table"))? else {
                return Ok(None);
            };
            row_values(r, 0, width)
                .map(Some)
                .map_err(|e| Error::data(format!("table {:?}: {e}", schema.table)))
        })
    }
}
