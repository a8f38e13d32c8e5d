//! Writing a chunk: one short transaction of a follower under a SHARE lock
//! on the table, taken only when no other session holds a lock that
//! conflicts with it (docs/BACKFILL.md, "How it works (PostgreSQL)").

use super::super::publication::refuse_hidden_rows;
use super::super::split_table;
use super::read::Backfills;
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
    /// Another session holds a lock on the table that conflicts with the
    /// chunk's (an open write, CREATE INDEX CONCURRENTLY, VACUUM); try again
    /// later.
    Busy(String),
    /// The follower's role may not lock the table (the chunk's SHARE lock
    /// needs UPDATE, DELETE, TRUNCATE or, on 17+, MAINTAIN); the other
    /// tables keep streaming, and the chunk is tried again now and then.
    Denied(String),
    /// A chunk (or, with no row left, the end) of a request.
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

/// Write the next chunk of the oldest request not done: one transaction
/// that locks the table against writers, reads the rows after the last key
/// in key order, and writes them as a message.
///
/// READ COMMITTED whatever the server's default: each statement then sees
/// what committed before it, so the rows read after the lock is granted
/// include every write that ended before it (under REPEATABLE READ the
/// snapshot would be the first statement's, taken before the lock).
async fn write_chunk(c: &Client, publication: &str, max_rows: u64) -> Result<Wrote> {
    c.batch_execute("BEGIN ISOLATION LEVEL READ COMMITTED")
        .await
        .map_err(pg_err("cannot begin a transaction"))?;
    let wrote = chunk_in(c, publication, max_rows).await;
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

/// The chunk of [`write_chunk`] in its transaction: the oldest request not
/// done, its table locked and checked, then its next rows or its end.
async fn chunk_in(tx: &Client, publication: &str, max_rows: u64) -> Result<Wrote> {
    tx.batch_execute("SET LOCAL lock_timeout = '1s'; SET LOCAL standard_conforming_strings = on")
        .await
        .map_err(pg_err("cannot set up a backfill chunk"))?;
    let req = match oldest_request(tx, publication).await? {
        ControlFlow::Continue(req) => req,
        ControlFlow::Break(wrote) => return Ok(wrote),
    };
    // The lock first, then the table's shape: a schema change cannot come
    // between what the chunk reads and the columns it names. A lock
    // request that waits queues every later writer of the table behind it,
    // so it waits at most LOCK_WAIT: enough for the writes in flight on a
    // busy table to end (a request that never waited would never be
    // granted there), never long enough to hold the application up.
    let lock = lock_table(tx, &req.table).await?;
    // The table as it is now; one that can no longer be backfilled (no
    // longer published, dropped, given a row filter) or whose columns
    // changed other than by columns added at the end ends the backfill
    // here, its table held at the rows it reached (docs/BACKFILL.md).
    // Row-level security that applies to the follower's role (the request
    // may have been made by another) would make the chunk a part of the rows.
    let table_now = match lock {
        Lock::Held => shape_now(tx, publication, &req.table, req.before.as_deref()).await,
        Lock::Gone => Err("the table no longer exists".to_string()),
        Lock::Busy => return Ok(Wrote::Busy(req.table)),
        Lock::Denied => return Ok(Wrote::Denied(req.table)),
    };
    let sh = match table_now {
        Ok(sh) => sh,
        Err(why) => return end_failed(tx, publication, req, &why).await,
    };
    record_described(tx, req.id, &sh).await?;
    let sql = chunk_sql(&sh, req.id, req.upper.as_deref(), max_rows)?;
    let Some(rows) = read_rows(tx, &sql, sh.schema.columns.len()).await? else {
        return Ok(Wrote::Denied(req.table));
    };
    let positions = key_positions(&sh.schema);
    let n = rows.len() as u64;
    let chunk = req.chunks + 1;
    if rows.is_empty() {
        end(tx, publication, req.id, &req.table, req.total, None).await?;
    } else {
        write_rows(tx, publication, &req, &sh, chunk, &rows, &positions).await?;
    }
    Ok(Wrote::Chunk {
        request: req.id,
        chunk,
        table: req.table,
        rows: n,
        total: req.total + n as i64,
        estimate: req.estimate,
        done: n == 0,
    })
}

/// The oldest request not done, as `mooncdc.backfill` keeps it.
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
}

/// Whether `e` says a lock was not granted within the lock timeout.
fn lock_timed_out(e: &tokio_postgres::Error) -> bool {
    e.code() == Some(&tokio_postgres::error::SqlState::LOCK_NOT_AVAILABLE)
}

/// The oldest request of the pipeline not done, locked FOR UPDATE so that
/// one follower at a time writes its chunks; `Break` with what to report when
/// there is none, or when another follower holds it.
async fn oldest_request(tx: &Client, publication: &str) -> Result<ControlFlow<Wrote, Pending>> {
    let row = match tx
        .query_opt(
            "SELECT id, table_name, upper_key, chunks, rows, estimate, described FROM mooncdc.backfill b \
             WHERE NOT done AND coalesce(to_jsonb(b) ->> 'publication', $1) = $1 ORDER BY id LIMIT 1 FOR UPDATE",
            &[&publication],
        )
        .await
    {
        Ok(r) => r,
        Err(e) if lock_timed_out(&e) => return Ok(ControlFlow::Break(Wrote::Contended)),
        Err(e) => return Err(pg_err("cannot read backfill requests")(e)),
    };
    let Some(row) = row else {
        return Ok(ControlFlow::Break(Wrote::Nothing));
    };
    Ok(ControlFlow::Continue(Pending {
        id: row.get(0),
        table: row.get(1),
        upper: row.get(2),
        chunks: row.get(3),
        total: row.get(4),
        estimate: row.get(5),
        before: row.get(6),
    }))
}

/// How the chunk's lock request on its table ended.
enum Lock {
    /// Granted: no writer of the table is in flight until the chunk ends.
    Held,
    /// The table no longer exists (the transaction is back at the savepoint).
    Gone,
    /// Another session holds a lock that conflicts with the chunk's.
    Busy,
    /// The follower's role may not lock the table.
    Denied,
}

/// Take the chunk's SHARE lock on `table`, waiting at most LOCK_WAIT. It is
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
            "LOCK TABLE ONLY {}.{} IN SHARE MODE",
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
    end(tx, publication, req.id, &req.table, req.total, Some(why)).await?;
    Ok(Wrote::Chunk {
        request: req.id,
        chunk: req.chunks + 1,
        table: req.table,
        rows: 0,
        total: req.total,
        estimate: req.estimate,
        done: true,
    })
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

/// Write a chunk's rows (at least one) as its message, and record the key of
/// its last row, where the next chunk starts.
async fn write_rows(
    tx: &Client,
    publication: &str,
    req: &Pending,
    sh: &Shape,
    chunk: i32,
    rows: &Rows,
    positions: &[usize],
) -> Result<()> {
    let n = rows.len() as u64;
    let last = rows.last().expect("rows");
    let key: Vec<Option<String>> = positions.iter().map(|&i| last[i].clone()).collect();
    let key_text = serde_json::to_string(&key).expect("JSON");
    let content = json!({
        "kind": "chunk", "request": req.id, "chunk": chunk, "table": req.table,
        "table_is": described(sh), "lower": req.upper, "rows": rows, "publication": publication,
    })
    .to_string();
    tx.execute(
        "SELECT pg_logical_emit_message(true, $1, $2::bytea)",
        &[&PREFIX, &content.as_bytes()],
    )
    .await
    .map_err(pg_err("cannot write a backfill chunk"))?;
    tx.execute(
        "UPDATE mooncdc.backfill SET upper_key = $2, chunks = $3, rows = rows + $4 WHERE id = $1",
        &[&req.id, &key_text, &chunk, &(n as i64)],
    )
    .await
    .map_err(pg_err("cannot record a backfill chunk"))?;
    tx.execute(
        "INSERT INTO mooncdc.backfill_chunks(request, chunk, upper_key) VALUES ($1, $2, $3)",
        &[&req.id, &chunk, &key_text],
    )
    .await
    .map_err(pg_err("cannot record a backfill chunk"))?;
    Ok(())
}

/// End request `id` in the chunk's transaction: a `done` message, or with
/// `failed` a `failed` one saying why.
async fn end(
    tx: &Client,
    publication: &str,
    id: i64,
    table: &str,
    rows: i64,
    failed: Option<&str>,
) -> Result<()> {
    let content = match failed {
        None => json!({"kind": "done", "request": id, "table": table, "rows_total": rows, "publication": publication}),
        Some(why) => {
            json!({"kind": "failed", "request": id, "table": table, "why": why, "publication": publication})
        }
    }
    .to_string();
    tx.execute(
        "SELECT pg_logical_emit_message(true, $1, $2::bytea)",
        &[&PREFIX, &content.as_bytes()],
    )
    .await
    .map_err(pg_err("cannot write the end of a backfill"))?;
    tx.execute(
        "UPDATE mooncdc.backfill SET done = true, failed = $2 WHERE id = $1",
        &[&id, &failed],
    )
    .await
    .map_err(pg_err("cannot record the end of a backfill"))?;
    Ok(())
}

/// How long a chunk's lock request waits (and so the longest the table's
/// writers queue behind it).
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
        if !self.work || self.in_flight.is_some() || self.retry_at.is_some_and(|t| now < t) {
            return Ok(());
        }
        self.retry_at = None;
        match write_chunk(c, publication, rows).await? {
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
                self.in_flight = Some((request, chunk));
                // The end is said where it is read (Backfills::message), by
                // every follower.
                if !done {
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
                    "a backfill chunk of table {table:?} waits: another session holds a lock on it that conflicts with the chunk's \
                     SHARE lock (a write in a transaction not yet ended or prepared, CREATE INDEX CONCURRENTLY, VACUUM, ANALYZE); \
                     each try queues the table's writers for at most {} ms, then gives up and tries again later \
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
                "a backfill chunk of table {table:?} cannot run: role {role:?} may not read it or take the chunk's SHARE lock on it; \
                 the other tables keep streaming and the chunk is tried again every 30 s. Grant it: \
                 GRANT SELECT, UPDATE ON {}.{} TO {} (docs/POSTGRES.md, \"Rights\")",
                quote_ident(&s),
                quote_ident(&t),
                quote_ident(&role)
            ),
            &[("event", "backfill-denied".into()), ("table", table.into())],
        );
        Ok(())
    }
}
