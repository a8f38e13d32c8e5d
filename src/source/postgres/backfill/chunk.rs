//! Writing a chunk: one short REPEATABLE READ transaction of a follower
//! that reads the table's next rows without blocking anyone and writes them
//! with the snapshot it read them in (docs/BACKFILL.md, "How it works
//! (PostgreSQL)"; window.rs says how readers place them).

use super::super::publication::refuse_hidden_rows;
use super::super::split_table;
use super::read::Backfills;
use super::window::WRITE_WINDOW;
use super::{appended_only, described, literal, shape, Shape, TableIs, PREFIX};
use crate::error::{Error, Result};
use crate::pg::pg_err;
use crate::source::backfill::key_positions;
use crate::util::quote_ident;
use serde_json::json;
use std::ops::ControlFlow;
use std::time::Duration;
use tokio_postgres::Client;

/// What one chunk write did.
enum Wrote {
    /// No request is waiting.
    Nothing,
    /// Another follower of the pipeline is writing a chunk now (their
    /// chunks are the same stream's): try again shortly, saying nothing.
    Contended,
    /// Another session holds or waits for a lock on the table that
    /// conflicts with reading it (ALTER TABLE, TRUNCATE, VACUUM FULL: an
    /// ACCESS EXCLUSIVE lock); try again later.
    Busy(String),
    /// The follower's role may not read the table (SELECT); the other
    /// tables keep streaming, and the chunk is tried again now and then.
    Denied(String),
    /// A chunk, a mark (no rows, not done) or, with no row left, the end
    /// of a request.
    Chunk {
        request: i64,
        chunk: i32,
        table: String,
        rows: u64,
        total: i64,
        estimate: i64,
        done: bool,
    },
}

/// Write the next chunk of the oldest request not done: one REPEATABLE
/// READ transaction that takes the table's ACCESS SHARE lock before its
/// snapshot (so no TRUNCATE or rewrite comes between the snapshot and the
/// read; writers never wait on it), reads the rows after the last key in
/// key order, and writes them as a message with its snapshot.
async fn write_chunk(
    c: &Client,
    publication: &str,
    max_rows: u64,
    bf: &Backfills,
) -> Result<Wrote> {
    let Some((id, table)) = oldest_request(c, publication).await? else {
        return Ok(Wrote::Nothing);
    };
    c.batch_execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
        .await
        .map_err(pg_err("cannot begin a transaction"))?;
    let wrote = match chunk_in(c, publication, id, &table, max_rows, bf).await {
        // Another follower changed the request since the snapshot.
        Err(e) if serialization_failure(&e) => Ok(Wrote::Contended),
        w => w,
    };
    let end = if matches!(wrote, Ok(Wrote::Chunk { .. })) {
        "COMMIT"
    } else {
        "ROLLBACK"
    };
    c.batch_execute(end)
        .await
        .map_err(pg_err("cannot commit a backfill chunk"))?;
    wrote
}

/// Whether `e` is the server's "could not serialize access".
fn serialization_failure(e: &Error) -> bool {
    e.full_message().contains("could not serialize access")
}

/// The chunk of [`write_chunk`] in its transaction: the table's lock, the
/// request (and with it the snapshot), the table checked, then a mark when
/// the window since the request's last message is too long, else its next
/// rows or its end.
async fn chunk_in(
    tx: &Client,
    publication: &str,
    id: i64,
    table: &str,
    max_rows: u64,
    bf: &Backfills,
) -> Result<Wrote> {
    // Durable on every synchronous standby before it returns, so every
    // commit before it is visible soon after: the next chunk's snapshot
    // then sees the transactions that committed before its window
    // (window.rs).
    tx.batch_execute(
        "SET LOCAL standard_conforming_strings = on; SET LOCAL synchronous_commit = remote_apply",
    )
    .await
    .map_err(pg_err("cannot set up a backfill chunk"))?;
    // The lock before the first query, which takes the snapshot.
    let lock = lock_table(tx, table).await?;
    match lock {
        Lock::Held | Lock::Gone => {}
        Lock::Busy => return Ok(Wrote::Busy(table.to_string())),
        Lock::Denied => return Ok(Wrote::Denied(table.to_string())),
    }
    tx.batch_execute("SET LOCAL lock_timeout = '1s'")
        .await
        .map_err(pg_err("cannot set up a backfill chunk"))?;
    let req = match pending_request(tx, id).await? {
        ControlFlow::Continue(req) => req,
        ControlFlow::Break(wrote) => return Ok(wrote),
    };
    // The table as it is now; one that can no longer be backfilled (no
    // longer published, dropped, given a row filter) or whose columns
    // changed other than by columns added at the end ends the backfill
    // here, its table held at the rows it reached (docs/BACKFILL.md).
    // Row-level security that applies to the follower's role (the request
    // may have been made by another) would make the chunk a part of the rows.
    let table_now = match lock {
        Lock::Gone => Err("the table no longer exists".to_string()),
        _ => shape_now(tx, publication, &req.table, req.before.as_deref()).await,
    };
    let sh = match table_now {
        Ok(sh) => sh,
        Err(why) => return end_failed(tx, publication, req, &why).await,
    };
    record_described(tx, req.id, &sh).await?;
    let chunk = req.chunks + 1;
    // A request's first message is a mark: it commits once every
    // synchronous standby applied it, so the commits before it are visible
    // to the first chunk's snapshot (the request's own commit waited only
    // as its session said). A window too long to keep opens anew too.
    if req.chunks == 0 || req.window > WRITE_WINDOW as i64 {
        write_message(tx, publication, &req, &sh, chunk, Part::Mark).await?;
        return Ok(req.wrote(chunk, 0, false));
    }
    let snapshot: String = tx
        .query_one("SELECT pg_current_snapshot()::text", &[])
        .await
        .map_err(pg_err("cannot read a backfill chunk's snapshot"))?
        .get(0);
    let sql = chunk_sql(&sh, req.id, req.upper.as_deref(), max_rows)?;
    let Some(rows) = read_rows(tx, &sql, sh.schema.columns.len()).await? else {
        return Ok(Wrote::Denied(req.table));
    };
    // Read after the rows: the transactions the snapshot does not see that
    // had committed by then. One this read saw commit before the window
    // opened would be in neither the rows nor the window: a mark instead,
    // after which it is visible (window.rs).
    let committed = committed_unseen(tx).await?;
    match bf.judge(&req.table, (req.id, req.chunks), &committed) {
        Ok(()) => {}
        Err(None) => return Ok(Wrote::Contended),
        Err(Some(_)) => {
            write_message(tx, publication, &req, &sh, chunk, Part::Mark).await?;
            return Ok(req.wrote(chunk, 0, false));
        }
    }
    let n = rows.len() as u64;
    let read = Read { snapshot, rows };
    if n == 0 {
        write_message(tx, publication, &req, &sh, chunk, Part::End(read)).await?;
    } else {
        let positions = key_positions(&sh.schema);
        write_message(
            tx,
            publication,
            &req,
            &sh,
            chunk,
            Part::Rows(read, &positions),
        )
        .await?;
    }
    Ok(req.wrote(chunk, n, n == 0))
}

/// The oldest request of the pipeline not done: its id and table. Read
/// outside the chunk's transaction, whose table lock must come before its
/// snapshot.
async fn oldest_request(c: &Client, publication: &str) -> Result<Option<(i64, String)>> {
    Ok(c
        .query_opt(
            "SELECT id, table_name FROM mooncdc.backfill b \
             WHERE NOT done AND coalesce(to_jsonb(b) ->> 'publication', $1) = $1 ORDER BY id LIMIT 1",
            &[&publication],
        )
        .await
        .map_err(pg_err("cannot read backfill requests"))?
        .map(|r| (r.get(0), r.get(1))))
}

/// The transactions the transaction's snapshot does not see that have
/// committed (their commits waiting for a standby, or just ending).
async fn committed_unseen(tx: &Client) -> Result<Vec<String>> {
    Ok(tx
        .query_one(
            "SELECT coalesce(array_agg(x::text), '{}') FROM pg_snapshot_xip(pg_current_snapshot()) x \
             WHERE pg_xact_status(x) = 'committed'",
            &[],
        )
        .await
        .map_err(pg_err("cannot read a backfill chunk's snapshot"))?
        .get(0))
}

/// The request a chunk is for, as `mooncdc.backfill` keeps it.
struct Pending {
    id: i64,
    table: String,
    /// The last key written, as JSON text values (none before the first chunk).
    upper: Option<String>,
    chunks: i32,
    /// The rows written so far.
    total: i64,
    estimate: i64,
    /// The table as the last chunk described it.
    before: Option<String>,
    /// Bytes of WAL since the request's last message (its window).
    window: i64,
}

impl Pending {
    /// What writing `chunk` (of `rows`) did.
    fn wrote(self, chunk: i32, rows: u64, done: bool) -> Wrote {
        Wrote::Chunk {
            request: self.id,
            chunk,
            table: self.table,
            rows,
            total: self.total + rows as i64,
            estimate: self.estimate,
            done,
        }
    }
}

/// Whether `e` says a lock was not granted within the lock timeout.
fn lock_timed_out(e: &tokio_postgres::Error) -> bool {
    e.code() == Some(&tokio_postgres::error::SqlState::LOCK_NOT_AVAILABLE)
}

/// Request `id`, locked FOR UPDATE so that one follower at a time writes
/// its chunks (this query takes the transaction's snapshot); `Break` with
/// what to report when it is done, held by another follower, or changed
/// since the snapshot.
async fn pending_request(tx: &Client, id: i64) -> Result<ControlFlow<Wrote, Pending>> {
    let row = match tx
        .query_opt(
            "SELECT id, table_name, upper_key, chunks, rows, estimate, described, \
                    coalesce((pg_current_wal_insert_lsn() - coalesce(window_lsn, requested_lsn))::bigint, 0) \
             FROM mooncdc.backfill b WHERE id = $1 AND NOT done FOR UPDATE",
            &[&id],
        )
        .await
    {
        Ok(r) => r,
        Err(e) if lock_timed_out(&e) => return Ok(ControlFlow::Break(Wrote::Contended)),
        Err(e) if e.code() == Some(&tokio_postgres::error::SqlState::T_R_SERIALIZATION_FAILURE) => {
            return Ok(ControlFlow::Break(Wrote::Contended))
        }
        Err(e) => return Err(pg_err("cannot read backfill requests")(e)),
    };
    let Some(row) = row else {
        // Done since the request was looked up.
        return Ok(ControlFlow::Break(Wrote::Contended));
    };
    Ok(ControlFlow::Continue(Pending {
        id: row.get(0),
        table: row.get(1),
        upper: row.get(2),
        chunks: row.get(3),
        total: row.get(4),
        estimate: row.get(5),
        before: row.get(6),
        window: row.get(7),
    }))
}

/// How the chunk's lock request on its table ended.
enum Lock {
    /// Granted: no schema change, TRUNCATE or rewrite of the table until
    /// the chunk ends (writers go on).
    Held,
    /// The table no longer exists (the transaction is back at the savepoint).
    Gone,
    /// Another session holds or waits for an ACCESS EXCLUSIVE lock.
    Busy,
    /// The follower's role may not read the table.
    Denied,
}

/// Take the chunk's ACCESS SHARE lock on `table` (the lock any SELECT
/// takes, taken before the snapshot), waiting at most LOCK_WAIT. It is
/// taken in a savepoint, so a dropped table leaves the transaction usable.
async fn lock_table(tx: &Client, table: &str) -> Result<Lock> {
    let (sch, tbl) = split_table(table)?;
    tx.batch_execute(&format!(
        "SAVEPOINT bf_lock; SET LOCAL lock_timeout = '{}ms'",
        LOCK_WAIT.as_millis()
    ))
    .await
    .map_err(pg_err("cannot set up a backfill chunk"))?;
    match tx
        .batch_execute(&format!(
            "LOCK TABLE ONLY {}.{} IN ACCESS SHARE MODE",
            quote_ident(&sch),
            quote_ident(&tbl)
        ))
        .await
    {
        Ok(()) => Ok(Lock::Held),
        Err(e) if lock_timed_out(&e) => Ok(Lock::Busy),
        Err(e) if e.code() == Some(&tokio_postgres::error::SqlState::INSUFFICIENT_PRIVILEGE) => {
            Ok(Lock::Denied)
        }
        Err(e) if e.code() == Some(&tokio_postgres::error::SqlState::UNDEFINED_TABLE) => {
            tx.batch_execute("ROLLBACK TO SAVEPOINT bf_lock")
                .await
                .map_err(pg_err("cannot set up a backfill chunk"))?;
            Ok(Lock::Gone)
        }
        Err(e) => Err(pg_err("cannot lock the table for a backfill chunk")(e)),
    }
}

/// The locked table's shape now, or why its backfill ends here: rows hidden
/// by row-level security, a table that can no longer be backfilled, or
/// columns changed since the last chunk (`before`) other than by additions at the end.
async fn shape_now(
    tx: &Client,
    publication: &str,
    table: &str,
    before: Option<&str>,
) -> Result<Shape, String> {
    if let Err(e) = refuse_hidden_rows(tx, &[table], "a backfill chunk").await {
        return Err(e.full_message());
    }
    let sh = shape(tx, publication, table)
        .await
        .map_err(|e| e.full_message())?;
    match before.map(serde_json::from_str::<TableIs>) {
        Some(Ok(was)) if !appended_only(&was.schema, &sh.schema) => Err(format!(
            "its columns or key changed during the backfill (a rename, a drop, a new type or key): resync it (mooncdc-capture backfill --table {table} --resync)"
        )),
        _ => Ok(sh),
    }
}

/// End request `req` as failed, saying why. The chunk is then its end, with
/// no rows.
async fn end_failed(tx: &Client, publication: &str, req: Pending, why: &str) -> Result<Wrote> {
    // Said by every follower that reads the end (Progress::failed).
    let content = json!({"kind": "failed", "request": req.id, "table": req.table, "why": why, "publication": publication});
    emit(tx, &content).await?;
    tx.execute(
        "UPDATE mooncdc.backfill SET done = true, failed = $2 WHERE id = $1",
        &[&req.id, &why],
    )
    .await
    .map_err(pg_err("cannot record the end of a backfill"))?;
    let chunk = req.chunks + 1;
    Ok(req.wrote(chunk, 0, true))
}

/// Record the table as this chunk reads it, so the next chunk can tell
/// whether its columns changed since.
async fn record_described(tx: &Client, id: i64, sh: &Shape) -> Result<()> {
    tx.execute(
        "UPDATE mooncdc.backfill SET described = $2 WHERE id = $1",
        &[&id, &described(sh).to_string()],
    )
    .await
    .map_err(pg_err("cannot record a backfill chunk"))?;
    Ok(())
}

/// The query that reads a chunk: every column of the table, in key order
/// after the last key written (`upper`, none before the first chunk).
fn chunk_sql(sh: &Shape, id: i64, upper: Option<&str>, max_rows: u64) -> Result<String> {
    let cols: Vec<String> = sh
        .schema
        .columns
        .iter()
        .map(|c| quote_ident(&c.name))
        .collect();
    let filter = match upper {
        None => String::new(),
        Some(u) => after_key(sh, id, u)?,
    };
    Ok(format!(
        "SELECT {} FROM {} {filter} ORDER BY {} LIMIT {max_rows}",
        cols.join(", "),
        sh.qualified,
        sh.order.join(", ")
    ))
}

/// The WHERE clause of a chunk after the first: rows whose key sorts after
/// `upper`, the last key written, as `mooncdc.backfill` keeps it.
fn after_key(sh: &Shape, id: i64, upper: &str) -> Result<String> {
    let key: Vec<Option<String>> = serde_json::from_str(upper).map_err(|e| {
        Error::data(format!(
            "backfill request {id}: its last key is unreadable: {e}"
        ))
    })?;
    let lits: Vec<String> = key
        .iter()
        .zip(&sh.key_types)
        .map(|(v, ty)| literal(v.as_deref().unwrap_or_default(), ty))
        .collect();
    Ok(format!(
        "WHERE ({}) > ({})",
        sh.order.join(", "),
        lits.join(", ")
    ))
}

/// A chunk's rows: each value in its text form, `None` for NULL.
type Rows = Vec<Vec<Option<String>>>;

/// Run the chunk's query and take its rows, `width` values each; `None`
/// when the follower's role may lock the table but not read it.
async fn read_rows(tx: &Client, sql: &str, width: usize) -> Result<Option<Rows>> {
    let mut rows: Rows = Vec::new();
    // The simple protocol: values in their text form, as pgoutput sends them.
    let read = match tx.simple_query(sql).await {
        // A role that may lock the table but not read it: as for the lock.
        Err(e) if e.code() == Some(&tokio_postgres::error::SqlState::INSUFFICIENT_PRIVILEGE) => {
            return Ok(None)
        }
        r => r.map_err(pg_err("cannot read a backfill chunk"))?,
    };
    for m in read {
        if let tokio_postgres::SimpleQueryMessage::Row(r) = m {
            rows.push((0..width).map(|i| r.get(i).map(str::to_string)).collect());
        }
    }
    Ok(Some(rows))
}

/// What a chunk read: its snapshot and its rows.
struct Read {
    snapshot: String,
    rows: Rows,
}

/// The message a chunk's transaction writes.
enum Part<'a> {
    /// Rows (at least one; the key columns at these positions).
    Rows(Read, &'a [usize]),
    /// No row left: the end.
    End(Read),
    /// A window too long: a mark that opens a new one.
    Mark,
}

/// Write message `chunk` of request `req` and record it: the request's last
/// key, rows and window (`window_lsn`, where the next chunk's window opens),
/// and the chunk's row, which the first reader to read it notes.
async fn write_message(
    tx: &Client,
    publication: &str,
    req: &Pending,
    sh: &Shape,
    chunk: i32,
    part: Part<'_>,
) -> Result<()> {
    let mut content = json!({
        "kind": "chunk", "request": req.id, "chunk": chunk, "table": req.table,
        "table_is": described(sh), "lower": req.upper, "publication": publication, "rows": [],
    });
    let mut upper = req.upper.clone();
    let mut n = 0i64;
    match part {
        Part::Mark => content["mark"] = json!(true),
        Part::End(read) => {
            content["kind"] = json!("done");
            content["rows_total"] = json!(req.total);
            content["snapshot"] = json!(read.snapshot);
        }
        Part::Rows(read, positions) => {
            let last = read.rows.last().expect("rows");
            let key: Vec<Option<String>> = positions.iter().map(|&i| last[i].clone()).collect();
            upper = Some(serde_json::to_string(&key).expect("JSON"));
            n = read.rows.len() as i64;
            content["snapshot"] = json!(read.snapshot);
            content["rows"] = json!(read.rows);
        }
    }
    let done = content["kind"] == "done";
    emit(tx, &content).await?;
    tx.execute(
        "UPDATE mooncdc.backfill SET upper_key = $2, chunks = $3, rows = rows + $4, done = $5, \
                window_lsn = pg_current_wal_insert_lsn() WHERE id = $1",
        &[&req.id, &upper, &chunk, &n, &done],
    )
    .await
    .map_err(pg_err("cannot record a backfill chunk"))?;
    tx.execute(
        "INSERT INTO mooncdc.backfill_chunks(request, chunk, upper_key) VALUES ($1, $2, $3)",
        &[&req.id, &chunk, &upper],
    )
    .await
    .map_err(pg_err("cannot record a backfill chunk"))?;
    Ok(())
}

/// Write `content` as a transactional message of ours, its bytes UTF-8
/// JSON whatever the database's encoding.
async fn emit(tx: &Client, content: &serde_json::Value) -> Result<()> {
    tx.execute(
        "SELECT pg_logical_emit_message(true, $1, $2::bytea)",
        &[&PREFIX, &content.to_string().as_bytes()],
    )
    .await
    .map_err(pg_err("cannot write a backfill chunk"))?;
    Ok(())
}

/// The chunks a follower writes ahead of what it has read back: the next
/// is read while the stream carries the one before (one that follows a
/// discarded chunk is discarded too, and its range read again).
const IN_FLIGHT: usize = 2;

/// How long a chunk's ACCESS SHARE lock request waits for a session that
/// holds or waits for an ACCESS EXCLUSIVE lock on the table (writers never
/// queue behind it: their lock does not conflict with it).
const LOCK_WAIT: Duration = Duration::from_millis(50);

/// How long a busy table waits before the next try: 50 ms, doubling to 1 s.
fn busy_delay(tries: u32) -> Duration {
    Duration::from_millis(50 << tries.min(5)).min(Duration::from_secs(1))
}

impl Backfills {
    /// Write the next chunk when a request may be waiting, none of this
    /// follower's chunks is in flight, and the last busy try is far enough
    /// behind (a busy table is tried again after 50 ms, then less often,
    /// at most a second apart, and said every 30 seconds).
    pub(crate) async fn write_next(
        &mut self,
        c: &Client,
        publication: &str,
        rows: u64,
    ) -> Result<()> {
        let now = std::time::Instant::now();
        if !self.work || self.in_flight.len() >= IN_FLIGHT || self.retry_at.is_some_and(|t| now < t)
        {
            return Ok(());
        }
        self.retry_at = None;
        match write_chunk(c, publication, rows, self).await? {
            Wrote::Nothing => self.work = false,
            Wrote::Contended => {
                self.retry_at = Some(std::time::Instant::now() + busy_delay(0));
            }
            Wrote::Busy(table) => self.after_busy(table, now),
            Wrote::Denied(table) => self.after_denied(c, table).await?,
            Wrote::Chunk {
                request,
                chunk,
                table,
                rows,
                total,
                estimate,
                done,
            } => {
                self.busy_tries = 0;
                self.in_flight.push_back((request, chunk));
                // The end is said where it is read (Backfills::message), by
                // every follower.
                if !done && rows > 0 {
                    self.progress.chunk(
                        request,
                        &table,
                        (rows, total.max(0) as u64, estimate.max(0) as u64),
                        false,
                    );
                }
            }
        }
        Ok(())
    }

    /// After a try that found `table` busy: the next waits longer, and the
    /// wait is said at most every 30 seconds (`now` is when the try began).
    fn after_busy(&mut self, table: String, now: std::time::Instant) {
        // From the end of the try: a try never follows one at once.
        self.retry_at = Some(std::time::Instant::now() + busy_delay(self.busy_tries));
        self.busy_tries += 1;
        if self
            .busy_said
            .is_none_or(|t| t.elapsed() >= Duration::from_secs(30))
        {
            self.busy_said = Some(now);
            crate::log::warn(
                &format!(
                    "a backfill chunk of table {table:?} waits: another session holds or waits for an ACCESS EXCLUSIVE lock on it \
                     (ALTER TABLE, TRUNCATE, VACUUM FULL, LOCK TABLE), which the chunk's read, as any query's, must wait for; \
                     each try waits at most {} ms, queuing none of the table's readers or writers, then gives up and tries again later \
                     (pg_locks shows who holds the table)",
                    LOCK_WAIT.as_millis()
                ),
                &[("event", "backfill-waits".into()), ("table", table.into())],
            );
        }
    }

    /// After a try that the follower's role may not make on `table`: try
    /// again in 30 seconds, and say the grant it needs.
    async fn after_denied(&mut self, c: &Client, table: String) -> Result<()> {
        self.retry_at = Some(std::time::Instant::now() + Duration::from_secs(30));
        let role: String = c
            .query_one("SELECT current_user::text", &[])
            .await
            .map(|r| r.get(0))
            .unwrap_or_default();
        let (s, t) = split_table(&table)?;
        crate::log::warn(
            &format!(
                "a backfill chunk of table {table:?} cannot run: role {role:?} may not read it; \
                 the other tables keep streaming and the chunk is tried again every 30 s. Grant it: \
                 GRANT SELECT ON {}.{} TO {} (docs/POSTGRES.md, \"Rights\")",
                quote_ident(&s),
                quote_ident(&t),
                quote_ident(&role)
            ),
            &[("event", "backfill-denied".into()), ("table", table.into())],
        );
        Ok(())
    }
}
