//! Backfill for the SQLite source (docs/BACKFILL.md): requests and chunks are
//! rows of the change log itself, so its order is the stream's order and
//! every reader, at any position, derives the same stream.
//!
//! - `capture backfill` logs a request marker (`op` 5) for the table's
//!   current version; it reads as the table's truncate.
//! - A follower logs one chunk at a time: the next rows in key order, copied
//!   into the log as backfill rows (`op` 6, after image only) in one short
//!   write transaction, so a chunk is the table exactly as it is at its
//!   place in the log; they read as inserts.
//! - The chunk that finds no row left logs a done marker (`op` 7), which
//!   reads as nothing: from there on the table's changes all pass.
//!
//! What the stream has reached at a position (docs/BACKFILL.md,
//! "Resuming") is read back from `_mooncdc_backfill` (the requests) and
//! `_mooncdc_backfill_chunks` (each chunk's last key and place), kept beside
//! the log: a reader starting anywhere knows which keys are in.

use super::log::refuse_drift;
use super::*;
use crate::source::backfill::{key_positions, Reached};
use crate::sqlite_util::{table_exists, Bind};
use crate::wire::value::write_row;
use crate::wire::Value;

pub(super) const REQUEST_OP: i64 = 5;
pub(super) const ROW_OP: i64 = 6;
pub(super) const DONE_OP: i64 = 7;

const REQUESTS: &str = "_mooncdc_backfill";
const CHUNKS: &str = "_mooncdc_backfill_chunks";

/// The default rows a chunk copies (`--backfill-chunk-rows`).
pub const DEFAULT_CHUNK_ROWS: u64 = 4096;

/// One request, as `status` and progress report it.
#[derive(Debug, Clone)]
pub struct Request {
    pub id: i64,
    pub table: String,
    pub resync: bool,
    /// The request marker's place in the log.
    pub requested: Sequence,
    /// The done marker's place, once the last chunk is logged.
    pub done: Option<Sequence>,
    /// Rows logged so far.
    pub rows: u64,
    /// Rows the table held when it was requested.
    pub estimate: u64,
    /// Whether a chunk has been logged.
    pub started: bool,
}

impl Request {
    pub fn state(&self) -> &'static str {
        match (self.done, self.started) {
            (Some(_), _) => "done",
            (None, true) => "in progress",
            (None, false) => "requested",
        }
    }
}

fn ensure_tables(conn: &Connection) -> Result<()> {
    conn.execute_batch(&format!(
        "CREATE TABLE IF NOT EXISTS {REQUESTS}(id INTEGER PRIMARY KEY, name TEXT NOT NULL, resync INTEGER NOT NULL, requested INTEGER NOT NULL, done INTEGER, rows INTEGER NOT NULL DEFAULT 0, estimate INTEGER NOT NULL, started INTEGER NOT NULL DEFAULT 0);
         CREATE TABLE IF NOT EXISTS {CHUNKS}(request INTEGER NOT NULL, seq INTEGER NOT NULL, key TEXT NOT NULL, PRIMARY KEY(request, seq));"
    ))
    .map_err(db_err("cannot create the backfill tables"))
}

fn has_tables(conn: &Connection) -> Result<bool> {
    table_exists(conn, REQUESTS)
}

fn request_from(r: &rusqlite::Row<'_>) -> rusqlite::Result<Request> {
    Ok(Request {
        id: r.get(0)?,
        table: r.get(1)?,
        resync: r.get(2)?,
        requested: r.get::<_, i64>(3)? as Sequence,
        done: r.get::<_, Option<i64>>(4)?.map(|s| s as Sequence),
        rows: r.get::<_, i64>(5)? as u64,
        estimate: r.get::<_, i64>(6)? as u64,
        started: r.get(7)?,
    })
}

const REQUEST_COLUMNS: &str = "id, name, resync, requested, done, rows, estimate, started";

/// Every request, oldest first.
pub fn requests(conn: &Connection) -> Result<Vec<Request>> {
    if !has_tables(conn)? {
        return Ok(Vec::new());
    }
    let mut st = conn
        .prepare(&format!(
            "SELECT {REQUEST_COLUMNS} FROM {REQUESTS} ORDER BY id"
        ))
        .map_err(db_err("cannot read backfill requests"))?;
    let out = st
        .query_map([], request_from)
        .map_err(db_err("cannot read backfill requests"))?
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(db_err("cannot read backfill requests"))?;
    Ok(out)
}

/// Record a backfill of each table named (`--resync`: of a table the
/// targets hold already). A table not captured yet is captured in the same
/// transaction, so none of its changes comes before its request. A table
/// with a request not yet done is refused; so, without `resync`, is one
/// backfilled before. Returns the tables.
pub fn request(path: &Path, tables: &[String], resync: bool) -> Result<Vec<String>> {
    let mut conn = open_existing(path)?;
    require_installed(&conn, path)?;
    if tables.is_empty() {
        return Err(Error::usage(
            "backfill needs --table NAME (repeatable) or --all (with --all: no table is captured)",
        ));
    }
    // A table named twice is one request.
    let mut once: Vec<String> = Vec::new();
    for t in tables {
        if !once.contains(t) {
            once.push(t.clone());
        }
    }
    let tables = &once[..];
    // The estimates first, outside the write transaction.
    let mut estimates = Vec::new();
    for t in tables {
        if t.starts_with(RESERVED_PREFIX) || !table_exists(&conn, t)? {
            return Err(Error::usage(format!(
                "table {t:?} is not a table of {}",
                path.display()
            )));
        }
        key_collations_binary(&conn, t)?;
        let n: i64 = conn
            .query_row(
                &format!("SELECT count(*) FROM {}", quote_ident(t)),
                [],
                |r| r.get(0),
            )
            .map_err(db_err("cannot count the table's rows"))?;
        estimates.push(n);
    }
    let tx = conn
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .map_err(db_err("cannot begin a transaction"))?;
    refuse_drift(&tx, path)?;
    ensure_tables(&tx)?;
    let known = requests(&tx)?;
    for t in super::install::init_in(&tx, tables)? {
        crate::log::info(&format!("capturing table {t:?}"));
    }
    let captured = current_tables(&tx)?;
    for (t, n) in tables.iter().zip(estimates) {
        if let Some(r) = known.iter().find(|r| &r.table == t && r.done.is_none()) {
            return Err(Error::state(format!(
                "table {t:?} is being backfilled already (request {}, {}); nothing was recorded",
                r.id,
                r.state()
            )));
        }
        if !resync {
            if let Some(r) = known.iter().rev().find(|r| &r.table == t) {
                return Err(Error::state(format!(
                    "table {t:?} was backfilled already (request {}, done at {}); to empty it in the targets and read it again, pass --resync; nothing was recorded",
                    r.id,
                    r.done.unwrap_or_default()
                )));
            }
        }
        let tv = &captured[t];
        tx.execute(
            &format!("INSERT INTO {LOG}(tid, op) VALUES (?1, {REQUEST_OP})"),
            [tv.tid],
        )
        .map_err(db_err("cannot log the backfill request"))?;
        let seq = tx.last_insert_rowid();
        tx.execute(
            &format!(
                "INSERT INTO {REQUESTS}(name, resync, requested, estimate) VALUES (?1, ?2, ?3, ?4)"
            ),
            params![t, resync, seq, n],
        )
        .map_err(db_err("cannot record the backfill request"))?;
    }
    tx.commit().map_err(db_err("cannot commit"))?;
    Ok(tables.to_vec())
}

/// Refuse a table whose key columns compare in another collation than
/// BINARY: chunks are read in the key's index order, which must be the key
/// order of docs/FORMAT.md §9 that the stream's filter compares in.
fn key_collations_binary(conn: &Connection, table: &str) -> Result<()> {
    let err = db_err("cannot read the table's key index");
    let index: Option<String> = conn
        .query_row(
            "SELECT name FROM pragma_index_list(?1) WHERE origin = 'pk'",
            [table],
            |r| r.get(0),
        )
        .optional()
        .map_err(&err)?;
    // None: an INTEGER PRIMARY KEY, the rowid, which has no collation.
    let Some(index) = index else { return Ok(()) };
    let mut st = conn
        .prepare("SELECT name, coll FROM pragma_index_xinfo(?1) WHERE key = 1 AND cid >= 0")
        .map_err(&err)?;
    let cols: Vec<(String, String)> = st
        .query_map([&index], |r| Ok((r.get(0)?, r.get(1)?)))
        .map_err(&err)?
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(&err)?;
    if let Some((col, coll)) = cols.iter().find(|(_, c)| !c.eq_ignore_ascii_case("BINARY")) {
        return Err(Error::usage(format!(
            "table {table:?} cannot be backfilled: its key column {col:?} compares with COLLATE {coll}, and backfill reads keys in SQLite's BINARY order (docs/BACKFILL.md, Limits); take a new snapshot instead"
        )));
    }
    Ok(())
}

fn key_text(key: &[Value]) -> String {
    let mut out = Vec::new();
    write_row(&mut out, key);
    String::from_utf8(out).expect("JSON is UTF-8")
}

fn key_from_text(text: &str) -> Result<Vec<Value>> {
    serde_json::from_str(text)
        .map_err(|e| Error::data(format!("a backfill chunk's key is unreadable: {e}")))
}

/// What each table being backfilled at `start` has reached: the requests
/// logged at or before `start` and not done there, each with the key of the
/// last backfill row at or before `start`.
pub(super) fn reached_at(
    conn: &Connection,
    start: Sequence,
    versions: &BTreeMap<i64, TableVersion>,
) -> Result<HashMap<String, Reached>> {
    let mut out = HashMap::new();
    if !has_tables(conn)? {
        return Ok(out);
    }
    let start = start as i64;
    let mut st = conn
        .prepare_cached(&format!(
            "SELECT {REQUEST_COLUMNS} FROM {REQUESTS} WHERE requested <= ?1 AND (done IS NULL OR done > ?1)"
        ))
        .map_err(db_err("cannot read backfill requests"))?;
    let active = st
        .query_map([start], request_from)
        .map_err(db_err("cannot read backfill requests"))?
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(db_err("cannot read backfill requests"))?;
    if active.is_empty() {
        return Ok(out);
    }
    // A position inside a chunk (a read cut by a limit): the row there.
    let here: Option<(i64, i64)> = conn
        .query_row(
            &format!("SELECT tid, op FROM {LOG} WHERE seq = ?1"),
            [start],
            |row| Ok((row.get(0)?, row.get(1)?)),
        )
        .optional()
        .map_err(db_err("cannot read the change log"))?;
    for r in active {
        let inside = here.and_then(|(tid, op)| {
            versions
                .get(&tid)
                .filter(|tv| op == ROW_OP && tv.schema.table == r.table)
        });
        let reached = if let Some(tv) = inside {
            let n = tv.schema.columns.len();
            let cols: Vec<String> = (n..2 * n).map(|i| format!("v{i}")).collect();
            let row = conn
                .query_row(
                    &format!("SELECT {} FROM {LOG} WHERE seq = ?1", cols.join(", ")),
                    [start],
                    |row| Ok(row_values(row, 0, n)),
                )
                .map_err(db_err("cannot read the change log"))?
                .map_err(Error::data)?;
            Reached::UpTo(crate::source::backfill::key_of(
                &row,
                &key_positions(&tv.schema),
            ))
        } else {
            let key: Option<String> = conn
                .query_row(
                    &format!(
                        "SELECT key FROM {CHUNKS} WHERE request = ?1 AND seq <= ?2 ORDER BY seq DESC LIMIT 1"
                    ),
                    [r.id, start],
                    |row| row.get(0),
                )
                .optional()
                .map_err(db_err("cannot read backfill chunks"))?;
            match key {
                Some(k) => Reached::UpTo(key_from_text(&k)?),
                None => Reached::Nothing,
            }
        };
        out.insert(r.table, reached);
    }
    Ok(out)
}

/// What one call of [`write_chunk`] did.
#[derive(Debug, Clone)]
pub struct ChunkDone {
    pub request: Request,
    /// Rows this chunk logged (0: the request is done).
    pub rows: u64,
}

/// How long a chunk waits for the database's write lock at one try.
const CHUNK_LOCK_WAIT: std::time::Duration = std::time::Duration::from_millis(100);

/// Say (at most every 30 s) that a chunk of `table` waits for the write lock.
fn chunk_waits(table: &str) {
    static SAID: std::sync::Mutex<Option<std::time::Instant>> = std::sync::Mutex::new(None);
    let mut said = SAID.lock().unwrap_or_else(|e| e.into_inner());
    if said.is_some_and(|t| t.elapsed() < std::time::Duration::from_secs(30)) {
        return;
    }
    *said = Some(std::time::Instant::now());
    crate::log::warn(
        &format!(
            "a backfill chunk of table {table:?} waits: another connection holds the database's write lock (a write \
             transaction still open); the stream goes on meanwhile, and the chunk is tried again at each poll"
        ),
        &[("event", "backfill-waits".into()), ("table", table.to_string().into())],
    );
}

/// Log the next chunk of the oldest request not done, in one write
/// transaction (`None`: no request is waiting, or the write lock is held
/// by another connection for now).
pub fn write_chunk(conn: &mut Connection, max_rows: u64) -> Result<Option<ChunkDone>> {
    // A plain read first: with no request waiting (the usual case, every
    // poll) the follower takes no write lock.
    let waiting: Option<String> = if has_tables(conn)? {
        conn.query_row(
            &format!("SELECT name FROM {REQUESTS} WHERE done IS NULL ORDER BY id LIMIT 1"),
            [],
            |r| r.get(0),
        )
        .optional()
        .map_err(db_err("cannot read backfill requests"))?
    } else {
        None
    };
    let Some(waiting) = waiting else {
        return Ok(None);
    };
    // The write lock, waited for briefly: while the application holds a
    // write transaction, the chunk waits for it without holding the stream
    // up (reads go on beside a writer in WAL mode), and is tried again at
    // the next poll, said every 30 s.
    conn.busy_timeout(CHUNK_LOCK_WAIT)
        .map_err(db_err("cannot set the busy timeout"))?;
    let failed = {
        let begun = conn.transaction_with_behavior(TransactionBehavior::Immediate);
        match begun {
            Ok(tx) => {
                tx.busy_timeout(crate::sqlite_util::BUSY_TIMEOUT)
                    .map_err(db_err("cannot set the busy timeout"))?;
                return chunk_in(tx, max_rows);
            }
            Err(e) => e,
        }
    };
    conn.busy_timeout(crate::sqlite_util::BUSY_TIMEOUT)
        .map_err(db_err("cannot set the busy timeout"))?;
    if let rusqlite::Error::SqliteFailure(f, _) = &failed {
        if f.code == rusqlite::ErrorCode::DatabaseBusy {
            chunk_waits(&waiting);
            return Ok(None);
        }
    }
    Err(db_err("cannot begin a transaction")(failed))
}

/// The chunk of [`write_chunk`] in its write transaction.
fn chunk_in(tx: rusqlite::Transaction<'_>, max_rows: u64) -> Result<Option<ChunkDone>> {
    let req: Option<Request> = tx
        .query_row(
            &format!(
                "SELECT {REQUEST_COLUMNS} FROM {REQUESTS} WHERE done IS NULL ORDER BY id LIMIT 1"
            ),
            [],
            request_from,
        )
        .optional()
        .map_err(db_err("cannot read backfill requests"))?;
    let Some(mut req) = req else {
        return Ok(None);
    };
    let Some(tv) = current_tables(&tx)?.remove(&req.table) else {
        // The table is no longer captured (dropped, or left by upgrade): its
        // rows can never come, and its changes no longer do. The request
        // ends here, said where it was.
        let tid = table_versions(&tx)?
            .into_values()
            .rev()
            .find(|v| v.schema.table == req.table)
            .map(|v| v.tid);
        let seq = match tid {
            Some(tid) => {
                tx.execute(
                    &format!("INSERT INTO {LOG}(tid, op) VALUES (?1, {DONE_OP})"),
                    [tid],
                )
                .map_err(db_err("cannot log the end of a backfill"))?;
                tx.last_insert_rowid()
            }
            None => high_water(&tx)? as i64,
        };
        tx.execute(
            &format!("UPDATE {REQUESTS} SET done = ?1 WHERE id = ?2"),
            [seq, req.id],
        )
        .map_err(db_err("cannot record the end of a backfill"))?;
        tx.commit().map_err(db_err("cannot commit"))?;
        crate::log::warn(
            &format!(
                "backfill of table {:?} (request {}) ended: the table is no longer captured",
                req.table, req.id
            ),
            &[],
        );
        req.done = Some(seq as Sequence);
        return Ok(Some(ChunkDone {
            request: req,
            rows: 0,
        }));
    };
    let last: Option<String> = tx
        .query_row(
            &format!("SELECT key FROM {CHUNKS} WHERE request = ?1 ORDER BY seq DESC LIMIT 1"),
            [req.id],
            |r| r.get(0),
        )
        .optional()
        .map_err(db_err("cannot read backfill chunks"))?;
    let n = tv.schema.columns.len();
    let targets: Vec<String> = (n..2 * n).map(|i| format!("v{i}")).collect();
    let cols: Vec<String> = tv
        .schema
        .columns
        .iter()
        .map(|c| quote_ident(&c.name))
        .collect();
    // Plain columns: the key's collation is BINARY (checked at the request),
    // and so the key's index serves the range and the order (a COLLATE here
    // would make SQLite scan the index from its start for every chunk).
    let key_cols: Vec<String> = tv.schema.key.iter().map(|k| quote_ident(k)).collect();
    let after_key = match &last {
        None => Vec::new(),
        Some(k) => key_from_text(k)?,
    };
    let filter = if after_key.is_empty() {
        String::new()
    } else {
        let marks: Vec<String> = (1..=after_key.len()).map(|i| format!("?{i}")).collect();
        format!("WHERE ({}) > ({})", key_cols.join(", "), marks.join(", "))
    };
    let sql = format!(
        "INSERT INTO {LOG}(tid, op, {}) SELECT {}, {ROW_OP}, {} FROM {} {filter} ORDER BY {} LIMIT {max_rows}",
        targets.join(", "),
        tv.tid,
        cols.join(", "),
        quote_ident(&req.table),
        key_cols.join(", "),
    );
    let binds: Vec<Bind<'_>> = after_key.iter().map(Bind).collect();
    let rows = tx
        .execute(&sql, rusqlite::params_from_iter(binds))
        .map_err(db_err("cannot log a backfill chunk"))? as u64;
    if rows == 0 {
        tx.execute(
            &format!("INSERT INTO {LOG}(tid, op) VALUES (?1, {DONE_OP})"),
            [tv.tid],
        )
        .map_err(db_err("cannot log the end of a backfill"))?;
        let seq = tx.last_insert_rowid();
        tx.execute(
            &format!("UPDATE {REQUESTS} SET done = ?1, started = 1 WHERE id = ?2"),
            [seq, req.id],
        )
        .map_err(db_err("cannot record the end of a backfill"))?;
        req.done = Some(seq as Sequence);
    } else {
        let seq = tx.last_insert_rowid();
        // The rows came in the key index's order; it must be the stream's
        // key order (a column may compare otherwise than its index), or the
        // chunk is not logged.
        {
            let positions = key_positions(&tv.schema);
            let cols: Vec<String> = positions.iter().map(|i| format!("v{}", n + i)).collect();
            let mut st = tx
                .prepare(&format!(
                    "SELECT {} FROM {LOG} WHERE seq > ?1 ORDER BY seq",
                    cols.join(", ")
                ))
                .map_err(db_err("cannot read the change log"))?;
            let mut rows = st
                .query([seq - rows as i64])
                .map_err(db_err("cannot read the change log"))?;
            let mut prev = after_key.clone();
            while let Some(r) = rows.next().map_err(db_err("cannot read the change log"))? {
                let key = row_values(r, 0, cols.len()).map_err(Error::data)?;
                if !prev.is_empty()
                    && crate::wire::value::key_cmp(&key, &prev) != std::cmp::Ordering::Greater
                {
                    return Err(Error::state(format!(
                        "table {:?} cannot be backfilled: its key does not read in SQLite's BINARY order (a key column declared with another collation); nothing was logged; take a new snapshot instead",
                        req.table
                    )));
                }
                prev = key;
            }
        }
        let row = tx
            .query_row(
                &format!("SELECT {} FROM {LOG} WHERE seq = ?1", targets.join(", ")),
                [seq],
                |r| Ok(row_values(r, 0, n)),
            )
            .map_err(db_err("cannot read the change log"))?
            .map_err(|e| {
                Error::data(format!(
                    "a row of table {:?} cannot be carried: {e}",
                    req.table
                ))
            })?;
        let key = crate::source::backfill::key_of(&row, &key_positions(&tv.schema));
        tx.execute(
            &format!("INSERT INTO {CHUNKS}(request, seq, key) VALUES (?1, ?2, ?3)"),
            params![req.id, seq, key_text(&key)],
        )
        .map_err(db_err("cannot record a backfill chunk"))?;
        tx.execute(
            &format!("UPDATE {REQUESTS} SET rows = rows + ?1, started = 1 WHERE id = ?2"),
            [rows as i64, req.id],
        )
        .map_err(db_err("cannot record a backfill chunk"))?;
        req.rows += rows;
    }
    req.started = true;
    tx.commit().map_err(db_err("cannot commit"))?;
    Ok(Some(ChunkDone { request: req, rows }))
}

/// Forget chunk records no reader at or after `through` needs: all but the
/// last at or before it of each request, and those of requests done by then.
pub(super) fn prune(conn: &Connection, through: Sequence) -> Result<()> {
    if !has_tables(conn)? {
        return Ok(());
    }
    let t = through as i64;
    conn.execute(
        &format!(
            "DELETE FROM {CHUNKS} WHERE seq <= ?1 AND (
               EXISTS (SELECT 1 FROM {CHUNKS} c WHERE c.request = {CHUNKS}.request AND c.seq > {CHUNKS}.seq AND c.seq <= ?1)
               OR request IN (SELECT id FROM {REQUESTS} WHERE done <= ?1))"
        ),
        [t],
    )
    .map_err(db_err("cannot prune backfill chunks"))?;
    Ok(())
}
