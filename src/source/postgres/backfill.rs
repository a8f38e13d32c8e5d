//! Backfill for the PostgreSQL source (docs/BACKFILL.md, "PostgreSQL").
//!
//! Requests, chunks and ends are transactional logical messages (prefix
//! `mooncdc_backfill`), so they reach every follower in commit order, and a
//! chunk's rows travel in its message: any reader, at any position, derives
//! the same stream. A chunk is one short transaction of a follower: it takes
//! a SHARE lock on the table (so no writer of it is in flight, and none
//! starts before its commit), reads the next rows in key order with a plain
//! query, and writes them into the WAL as its message. Its rows are then the
//! table exactly as it is at the chunk's commit, its place in the stream.
//!
//! `mooncdc.backfill` keeps each request; `mooncdc.backfill_chunks` each
//! chunk's last key; both note, once a reader has decoded it, the commit
//! position of the message, so a reader starting at any cursor knows what
//! the stream has reached there.

use super::*;
use crate::source::backfill::{key_of, key_positions, Reached};
use serde_json::json;

pub(super) const PREFIX: &str = "mooncdc_backfill";

const SETUP: &str = "CREATE SCHEMA IF NOT EXISTS mooncdc;
CREATE TABLE IF NOT EXISTS mooncdc.backfill (
    id bigserial PRIMARY KEY,
    table_name text NOT NULL,
    resync boolean NOT NULL,
    estimate bigint NOT NULL,
    rows bigint NOT NULL DEFAULT 0,
    chunks integer NOT NULL DEFAULT 0,
    upper_key text,
    done boolean NOT NULL DEFAULT false,
    requested_lsn pg_lsn,
    done_lsn pg_lsn,
    failed text,
    described text);
ALTER TABLE mooncdc.backfill ADD COLUMN IF NOT EXISTS failed text, ADD COLUMN IF NOT EXISTS described text;
CREATE TABLE IF NOT EXISTS mooncdc.backfill_chunks (
    request bigint NOT NULL,
    chunk integer NOT NULL,
    upper_key text NOT NULL,
    lsn pg_lsn,
    PRIMARY KEY (request, chunk));";

/// Key column types whose `ORDER BY` is the stream's key order
/// (docs/FORMAT.md §9) for their wire values; text types only in the "C"
/// order (added to the query), and only where the key's index is in it.
const ORDERED_KEY_TYPES: &[&str] = &[
    "smallint", "integer", "bigint", "oid", "boolean", "bytea", "uuid",
];
const TEXT_KEY_TYPES: &[&str] = &["text", "character varying"];

/// One request as `status` shows it.
#[derive(Debug, Clone)]
pub struct Request {
    pub id: i64,
    pub table: String,
    pub resync: bool,
    pub estimate: i64,
    pub rows: i64,
    pub chunks: i32,
    pub done: bool,
    pub requested_lsn: Option<String>,
    pub done_lsn: Option<String>,
    /// Why the backfill ended before its table was read whole.
    pub failed: Option<String>,
    /// The table as its last chunk described it (`TableIs` JSON).
    pub described: Option<String>,
}

/// Whether `mooncdc.backfill` exists (read from the catalog, which needs no
/// right on the schema: the DDL trigger's `mooncdc` schema may be there
/// without any backfill, and without a right of capture's role on it).
pub(super) async fn installed(c: &Client) -> Result<bool> {
    Ok(c.query_one(
        "SELECT EXISTS (SELECT 1 FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace \
             WHERE n.nspname = 'mooncdc' AND c.relname = 'backfill')",
        &[],
    )
    .await
    .map_err(pg_err("cannot look for the backfill table"))?
    .get(0))
}

pub(super) async fn requests(c: &Client) -> Result<Vec<Request>> {
    if !installed(c).await? {
        return Ok(Vec::new());
    }
    let rows = c
        .query(
            "SELECT id, table_name, resync, estimate, rows, chunks, done, requested_lsn::text, done_lsn::text, failed, described \
             FROM mooncdc.backfill ORDER BY id",
            &[],
        )
        .await
        .map_err(pg_err("cannot read backfill requests"))?;
    Ok(rows
        .iter()
        .map(|r| Request {
            id: r.get(0),
            table: r.get(1),
            resync: r.get(2),
            estimate: r.get(3),
            rows: r.get(4),
            chunks: r.get(5),
            done: r.get(6),
            requested_lsn: r.get(7),
            done_lsn: r.get(8),
            failed: r.get(9),
            described: r.get(10),
        })
        .collect())
}

/// A table as chunks read it: its published schema, classes and the SQL
/// that orders its key.
pub(super) struct Shape {
    pub schema: Schema,
    pub classes: Vec<Class>,
    pub qualified: String,
    /// `k1 [COLLATE "C"], …`
    pub order: Vec<String>,
    /// Each key column's type, for literals.
    pub key_types: Vec<String>,
}

/// The shape of a published table, or why it cannot be backfilled.
pub(super) async fn shape(c: &Client, publication: &str, name: &str) -> Result<Shape> {
    let pubs = publication_detail(c, publication).await?;
    let p = pubs.iter().find(|p| p.name == name).ok_or_else(|| {
        Error::state(format!(
            "table {name:?} is not in publication {publication:?}"
        ))
    })?;
    let refuse = |why: String| {
        Error::usage(format!(
            "table {name:?} cannot be backfilled: {why} (docs/BACKFILL.md, Limits); take a new snapshot instead"
        ))
    };
    if p.filter.is_some() {
        return Err(refuse(
            "the publication filters its rows (a row filter)".into(),
        ));
    }
    if p.partitioned {
        return Err(refuse("it is partitioned".into()));
    }
    let (schema, classes) = published_schema(c, p).await?;
    let mut order = Vec::new();
    let mut key_types = Vec::new();
    for k in &schema.key {
        let row = c
            .query_one(
                "SELECT format_type(a.atttypid, NULL), coalesce(co.collname, '')::text, \
                        (SELECT datcollate FROM pg_database WHERE datname = current_database())::text \
                 FROM pg_attribute a LEFT JOIN pg_collation co ON co.oid = a.attcollation \
                 WHERE a.attrelid = format('%I.%I', $1::text, $2::text)::regclass AND a.attname = $3",
                &[&p.schema, &p.table, k],
            )
            .await
            .map_err(pg_err("cannot read the key's types"))?;
        let ty: String = row.get(0);
        let coll: String = row.get(1);
        let db: String = row.get(2);
        let q = quote_ident(k);
        if ORDERED_KEY_TYPES.contains(&ty.as_str()) {
            order.push(q);
        } else if TEXT_KEY_TYPES.contains(&ty.as_str()) {
            let c_order = matches!(coll.as_str(), "C" | "POSIX")
                || (coll == "default" && matches!(db.as_str(), "C" | "POSIX"));
            if !c_order {
                return Err(refuse(format!(
                    "its key column {k:?} is text in collation {:?}, whose order is not the byte order the stream compares keys in (a key in COLLATE \"C\" can be)",
                    if coll == "default" { db.as_str() } else { coll.as_str() }
                )));
            }
            order.push(format!("{q} COLLATE \"C\""));
        } else {
            return Err(refuse(format!(
                "its key column {k:?} is of type {ty}, whose order is not the order of its text (keys of integers, booleans, bytea, uuid and C-collated text can be)"
            )));
        }
        key_types.push(ty);
    }
    Ok(Shape {
        schema,
        classes,
        qualified: format!("ONLY {}.{}", quote_ident(&p.schema), quote_ident(&p.table)),
        order,
        key_types,
    })
}

/// A value class as a message names it.
fn class_name(c: Class) -> &'static str {
    match c {
        Class::Integer => "integer",
        Class::Real4 => "real4",
        Class::Real8 => "real8",
        Class::Bool => "bool",
        Class::Blob => "blob",
        Class::Text => "text",
    }
}

fn class_from_name(s: &str) -> Result<Class> {
    Ok(match s {
        "integer" => Class::Integer,
        "real4" => Class::Real4,
        "real8" => Class::Real8,
        "bool" => Class::Bool,
        "blob" => Class::Blob,
        "text" => Class::Text,
        other => {
            return Err(Error::data(format!(
                "a backfill message names value class {other:?} (a newer MoonCDC wrote it; upgrade this one)"
            )))
        }
    })
}

/// The table as a message describes it: its schema and each column's value
/// class, as they are in the transaction that writes the message (a chunk
/// holds the table's lock, so no schema change is in between).
fn described(sh: &Shape) -> serde_json::Value {
    let mut schema = Vec::new();
    crate::wire::model::write_schema(&mut schema, &sh.schema);
    json!({
        "schema": serde_json::from_slice::<serde_json::Value>(&schema).expect("a schema is JSON"),
        "classes": sh.classes.iter().map(|c| class_name(*c)).collect::<Vec<_>>(),
    })
}

/// Whether `now` is `was` with columns added at the end only (the key and
/// every earlier column as they were).
fn appended_only(was: &Schema, now: &Schema) -> bool {
    was.key == now.key
        && now.columns.len() >= was.columns.len()
        && was
            .columns
            .iter()
            .zip(&now.columns)
            .all(|(a, b)| a.name == b.name && a.decl_type == b.decl_type)
}

/// `was` without the columns `now` lacks or has with another type: the
/// drops that take a table from `was` to `now`, before the additions (the
/// key must stay).
pub(super) fn kept_columns(was: &Schema, now: &Schema) -> Result<Schema> {
    if was.key != now.key {
        return Err(Error::data(format!(
            "the key of table {:?} changed ({:?} to {:?}) where a backfill describes it: resync it after the change",
            now.table, was.key, now.key
        )));
    }
    Ok(Schema {
        table: was.table.clone(),
        columns: was
            .columns
            .iter()
            .filter(|c| {
                now.columns
                    .iter()
                    .any(|n| n.name == c.name && n.decl_type == c.decl_type)
            })
            .cloned()
            .collect(),
        key: was.key.clone(),
    })
}

/// A value as an SQL literal of its type (the text is the type's output,
/// which its input reads back).
fn literal(text: &str, ty: &str) -> String {
    format!("'{}'::{ty}", text.replace('\'', "''"))
}

impl PgSource {
    /// `capture backfill`: one transaction records each request (a row of
    /// `mooncdc.backfill` and its message) and puts a table not yet
    /// published into the publication, with FULL identity, so none of its
    /// changes comes before its request.
    pub fn backfill(&self, tables: &[String], all: bool, resync: bool) -> Result<Vec<String>> {
        runtime()?.block_on(async {
            let c = self.client("backfill").await?;
            if server_version(&c).await? < 140000 {
                return Err(Error::usage("backfill needs PostgreSQL 14 or later"));
            }
            let standby: bool = c
                .query_one("SELECT pg_is_in_recovery()", &[])
                .await
                .map_err(pg_err("cannot ask whether the server is a standby"))?
                .get(0);
            if standby {
                return Err(Error::usage(
                    "backfill writes its requests into the WAL: run it against the primary",
                ));
            }
            let names: Vec<String> = if all {
                publication_tables(&c, &self.publication).await?
            } else if tables.is_empty() {
                return Err(Error::usage(
                    "backfill needs --table NAME (repeatable) or --all",
                ));
            } else {
                tables.iter().map(|t| table_arg(t)).collect::<Result<_>>()?
            };
            // A table named twice (or as `t` and `public.t`) is one request.
            let mut names = names;
            names.sort();
            names.dedup();
            let published = publication_tables(&c, &self.publication).await?;
            let all_tables: bool = c
                .query_opt(
                    "SELECT puballtables FROM pg_publication WHERE pubname = $1",
                    &[&self.publication],
                )
                .await
                .map_err(pg_err("cannot read publications"))?
                .ok_or_else(|| {
                    Error::state(format!(
                        "publication {:?} does not exist (run mooncdc-capture init)",
                        self.publication
                    ))
                })?
                .get(0);
            // A publication of every table would publish the backfill's own
            // tables too.
            if all_tables {
                return Err(Error::usage(format!(
                    "publication {:?} is FOR ALL TABLES, which would publish the backfill's own tables (mooncdc.backfill): backfill needs a publication that names its tables (mooncdc-capture init makes one)",
                    self.publication
                )));
            }
            c.batch_execute(SETUP)
                .await
                .map_err(pg_err("cannot create the backfill tables"))?;
            c.batch_execute("BEGIN")
                .await
                .map_err(pg_err("cannot begin a transaction"))?;
            let done = self
                .record(&c, &names, &published, resync)
                .await;
            let end = if done.is_ok() { "COMMIT" } else { "ROLLBACK" };
            c.batch_execute(end)
                .await
                .map_err(pg_err("cannot commit"))?;
            done?;
            Ok(names)
        })
    }

    /// The requests of [`backfill`](Self::backfill), inside its transaction.
    async fn record(
        &self,
        tx: &Client,
        names: &[String],
        published: &[String],
        resync: bool,
    ) -> Result<()> {
        {
            let known = requests(tx).await?;
            for n in names {
                let (s, t) = split_table(n)?;
                let exists: bool = tx
                    .query_one(
                        "SELECT to_regclass(format('%I.%I', $1::text, $2::text)) IS NOT NULL",
                        &[&s, &t],
                    )
                    .await
                    .map_err(pg_err("cannot look for the table"))?
                    .get(0);
                if !exists {
                    return Err(Error::usage(format!("table {n:?} does not exist")));
                }
                table_schema(tx, &s, &t).await?;
                let added = !published.contains(n);
                if added {
                    tx.batch_execute(&format!(
                        "ALTER PUBLICATION {} ADD TABLE {}.{}",
                        quote_ident(&self.publication),
                        quote_ident(&s),
                        quote_ident(&t)
                    ))
                    .await
                    .map_err(pg_err("cannot add a table to the publication"))?;
                }
                let p = publication_detail(tx, &self.publication)
                    .await?
                    .into_iter()
                    .find(|p| &p.name == n)
                    .ok_or_else(|| Error::state(format!("table {n:?} is not published")))?;
                for (s, t, ident) in identity_of(tx, &p).await? {
                    if ident != "f" {
                        tx.batch_execute(&format!(
                            "ALTER TABLE {}.{} REPLICA IDENTITY FULL",
                            quote_ident(&s),
                            quote_ident(&t)
                        ))
                        .await
                        .map_err(pg_err("cannot set REPLICA IDENTITY FULL"))?;
                    }
                }
                let sh = shape(tx, &self.publication, n).await?;
                if let Some(r) = known.iter().find(|r| &r.table == n && !r.done) {
                    return Err(Error::state(format!(
                        "table {n:?} is being backfilled already (request {}); nothing was recorded",
                        r.id
                    )));
                }
                if !resync {
                    if let Some(r) = known.iter().rev().find(|r| &r.table == n) {
                        return Err(Error::state(format!(
                            "table {n:?} was backfilled already (request {}); to empty it in the targets and read it again, pass --resync; nothing was recorded",
                            r.id
                        )));
                    }
                }
                // The planner's estimate; a count where there is none yet
                // (a table never analyzed).
                let mut estimate: i64 = tx
                    .query_one(
                        "SELECT reltuples::bigint FROM pg_class WHERE oid = format('%I.%I', $1::text, $2::text)::regclass",
                        &[&s, &t],
                    )
                    .await
                    .map_err(pg_err("cannot read the table's size"))?
                    .get(0);
                if estimate <= 0 {
                    estimate = tx
                        .query_one(
                            &format!(
                                "SELECT count(*) FROM ONLY {}.{}",
                                quote_ident(&s),
                                quote_ident(&t)
                            ),
                            &[],
                        )
                        .await
                        .map_err(pg_err("cannot count the table's rows"))?
                        .get(0);
                }
                let desc = described(&sh).to_string();
                let id: i64 = tx
                    .query_one(
                        "INSERT INTO mooncdc.backfill(table_name, resync, estimate, described) VALUES ($1, $2, $3, $4) RETURNING id",
                        &[n, &resync, &estimate, &desc],
                    )
                    .await
                    .map_err(pg_err("cannot record the backfill request"))?
                    .get(0);
                if added {
                    crate::log::info(&format!("capturing table {n:?}"));
                }
                let content = json!({"kind": "request", "request": id, "table": n, "table_is": described(&sh)}).to_string();
                tx.execute(
                    "SELECT pg_logical_emit_message(true, $1, $2)",
                    &[&PREFIX, &content],
                )
                .await
                .map_err(pg_err("cannot write the backfill request"))?;
            }
            Ok(())
        }
    }
}

/// What one chunk write did.
pub(super) enum Wrote {
    /// No request is waiting.
    Nothing,
    /// The table is locked by a writer now; try again later.
    Busy,
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
pub(super) async fn write_chunk(c: &Client, publication: &str, max_rows: u64) -> Result<Wrote> {
    c.batch_execute("BEGIN")
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

async fn chunk_in(tx: &Client, publication: &str, max_rows: u64) -> Result<Wrote> {
    tx.batch_execute("SET LOCAL lock_timeout = '1s'; SET LOCAL standard_conforming_strings = on")
        .await
        .map_err(pg_err("cannot set up a backfill chunk"))?;
    let busy = |e: &tokio_postgres::Error| {
        e.code() == Some(&tokio_postgres::error::SqlState::LOCK_NOT_AVAILABLE)
    };
    let row = match tx
        .query_opt(
            "SELECT id, table_name, upper_key, chunks, rows, estimate, described FROM mooncdc.backfill \
             WHERE NOT done ORDER BY id LIMIT 1 FOR UPDATE",
            &[],
        )
        .await
    {
        Ok(r) => r,
        Err(e) if busy(&e) => return Ok(Wrote::Busy),
        Err(e) => return Err(pg_err("cannot read backfill requests")(e)),
    };
    let Some(row) = row else {
        return Ok(Wrote::Nothing);
    };
    let (id, table, upper, chunks, total, estimate): (i64, String, Option<String>, i32, i64, i64) = (
        row.get(0),
        row.get(1),
        row.get(2),
        row.get(3),
        row.get(4),
        row.get(5),
    );
    let before: Option<String> = row.get(6);
    // The lock first, then the table's shape: a schema change cannot come
    // between what the chunk reads and the columns it names.
    let (sch, tbl) = split_table(&table)?;
    tx.batch_execute("SAVEPOINT bf_lock")
        .await
        .map_err(pg_err("cannot set up a backfill chunk"))?;
    let gone = match tx
        .batch_execute(&format!(
            "LOCK TABLE ONLY {}.{} IN SHARE MODE",
            quote_ident(&sch),
            quote_ident(&tbl)
        ))
        .await
    {
        Ok(()) => None,
        Err(e) if busy(&e) => return Ok(Wrote::Busy),
        Err(e) if e.code() == Some(&tokio_postgres::error::SqlState::UNDEFINED_TABLE) => {
            tx.batch_execute("ROLLBACK TO SAVEPOINT bf_lock")
                .await
                .map_err(pg_err("cannot set up a backfill chunk"))?;
            Some("the table no longer exists".to_string())
        }
        Err(e) => return Err(pg_err("cannot lock the table for a backfill chunk")(e)),
    };
    // The table as it is now; one that can no longer be backfilled (no
    // longer published, dropped, given a row filter) or whose columns
    // changed other than by columns added at the end ends the backfill
    // here, its table held at the rows it reached (docs/BACKFILL.md).
    let (sh, why) = match gone {
        Some(why) => (None, Some(why)),
        None => match shape(tx, publication, &table).await {
        Err(e) => (None, Some(e.full_message())),
        Ok(sh) => match before.as_deref().map(serde_json::from_str::<TableIs>) {
            Some(Ok(was)) if !appended_only(&was.schema, &sh.schema) => (None, Some(format!(
                "its columns or key changed during the backfill (a rename, a drop, a new type or key): resync it (mooncdc-capture backfill --table {table} --resync)"
            ))),
            _ => {
                tx.execute(
                    "UPDATE mooncdc.backfill SET described = $2 WHERE id = $1",
                    &[&id, &described(&sh).to_string()],
                )
                .await
                .map_err(pg_err("cannot record a backfill chunk"))?;
                (Some(sh), None)
            }
        },
        },
    };
    let Some(sh) = sh else {
        let why = why.unwrap_or_default();
        end(tx, id, &table, Some(&why)).await?;
        crate::log::warn(
            &format!(
                "backfill of table {table:?} (request {id}) ended before the table was read whole: {why}; the stream keeps leaving out changes of its rows not reached until a new request for it"
            ),
            &[("event", "backfill-failed".into()), ("table", table.clone().into())],
        );
        return Ok(Wrote::Chunk {
            request: id,
            chunk: chunks + 1,
            table,
            rows: 0,
            total,
            estimate,
            done: true,
        });
    };
    let cols: Vec<String> = sh
        .schema
        .columns
        .iter()
        .map(|c| quote_ident(&c.name))
        .collect();
    let filter = match &upper {
        None => String::new(),
        Some(u) => {
            let key: Vec<Option<String>> = serde_json::from_str(u).map_err(|e| {
                Error::data(format!(
                    "backfill request {id}: its last key is unreadable: {e}"
                ))
            })?;
            let lits: Vec<String> = key
                .iter()
                .zip(&sh.key_types)
                .map(|(v, ty)| literal(v.as_deref().unwrap_or_default(), ty))
                .collect();
            format!("WHERE ({}) > ({})", sh.order.join(", "), lits.join(", "))
        }
    };
    // The simple protocol: values in their text form, as pgoutput sends them.
    let sql = format!(
        "SELECT {} FROM {} {filter} ORDER BY {} LIMIT {max_rows}",
        cols.join(", "),
        sh.qualified,
        sh.order.join(", ")
    );
    let mut rows: Vec<Vec<Option<String>>> = Vec::new();
    for m in tx
        .simple_query(&sql)
        .await
        .map_err(pg_err("cannot read a backfill chunk"))?
    {
        if let tokio_postgres::SimpleQueryMessage::Row(r) = m {
            rows.push(
                (0..cols.len())
                    .map(|i| r.get(i).map(str::to_string))
                    .collect(),
            );
        }
    }
    let positions = key_positions(&sh.schema);
    let n = rows.len() as u64;
    let chunk = chunks + 1;
    if rows.is_empty() {
        end(tx, id, &table, None).await?;
    } else {
        let last = rows.last().expect("rows");
        let key: Vec<Option<String>> = positions.iter().map(|&i| last[i].clone()).collect();
        let key_text = serde_json::to_string(&key).expect("JSON");
        let content = json!({
            "kind": "chunk", "request": id, "chunk": chunk, "table": table,
            "table_is": described(&sh), "lower": upper, "rows": rows,
        })
        .to_string();
        tx.execute(
            "SELECT pg_logical_emit_message(true, $1, $2)",
            &[&PREFIX, &content],
        )
        .await
        .map_err(pg_err("cannot write a backfill chunk"))?;
        tx.execute(
            "UPDATE mooncdc.backfill SET upper_key = $2, chunks = $3, rows = rows + $4 WHERE id = $1",
            &[&id, &key_text, &chunk, &(n as i64)],
        )
        .await
        .map_err(pg_err("cannot record a backfill chunk"))?;
        tx.execute(
            "INSERT INTO mooncdc.backfill_chunks(request, chunk, upper_key) VALUES ($1, $2, $3)",
            &[&id, &chunk, &key_text],
        )
        .await
        .map_err(pg_err("cannot record a backfill chunk"))?;
    }
    Ok(Wrote::Chunk {
        request: id,
        chunk,
        table,
        rows: n,
        total: total + n as i64,
        estimate,
        done: n == 0,
    })
}

/// A table as a message describes it: its schema and value classes.
pub(super) type Described = (Schema, Vec<Class>);

/// End request `id` in the chunk's transaction: a `done` message, or with
/// `failed` a `failed` one saying why.
async fn end(tx: &Client, id: i64, table: &str, failed: Option<&str>) -> Result<()> {
    let content = match failed {
        None => json!({"kind": "done", "request": id, "table": table}),
        Some(why) => json!({"kind": "failed", "request": id, "table": table, "why": why}),
    }
    .to_string();
    tx.execute(
        "SELECT pg_logical_emit_message(true, $1, $2)",
        &[&PREFIX, &content],
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

/// A message of ours, as the stream reads it.
#[derive(Debug, serde::Deserialize)]
struct Note {
    kind: String,
    request: i64,
    #[serde(default)]
    chunk: i32,
    table: String,
    /// The table's schema and value classes (requests and chunks).
    #[serde(default)]
    table_is: Option<TableIs>,
    #[serde(default)]
    lower: Option<String>,
    #[serde(default)]
    rows: Vec<Vec<Option<String>>>,
}

#[derive(Debug, serde::Deserialize)]
struct TableIs {
    schema: Schema,
    classes: Vec<String>,
}

/// Where a request, chunk or end was decoded: noted in the backfill tables
/// (once) before the batch that holds it is written.
enum Seen {
    Request(i64),
    Chunk(i64, i32),
    Done(i64),
}

/// What a read knows of backfills: the tables being backfilled and how far
/// each has come at the read's position, and (following) the chunk this
/// follower wrote and waits to see.
#[derive(Default)]
pub(super) struct Backfills {
    /// Each table being backfilled: what it has reached, and its key's
    /// columns by name (a change's key is taken by these names from the
    /// schema it was decoded with).
    pub(super) reached: HashMap<String, (Reached, Vec<String>)>,
    seen: Vec<Seen>,
    /// A chunk written and not decoded yet: (request, chunk).
    pub(super) in_flight: Option<(i64, i32)>,
    /// Whether a request may be waiting for a chunk.
    pub(super) work: bool,
    pub(super) retry_at: Option<std::time::Instant>,
    /// When the follower last said a chunk waits for the table's lock.
    pub(super) busy_said: Option<std::time::Instant>,
    pub(super) progress: crate::source::backfill::Progress,
}

/// Whether a message at commit `lsn` is held by a reader at `start`.
fn held(lsn: &str, start: Sequence) -> Result<bool> {
    Ok(sequence(parse_lsn(lsn)? + 1, 0) <= start)
}

impl Backfills {
    /// The backfills in force at `start`: requests a reader decoded at or
    /// before it and not ended there, each at the last key of its last
    /// chunk at or before it.
    pub(super) async fn load(c: &Client, start: Sequence) -> Result<Backfills> {
        let mut b = Backfills::default();
        for r in requests(c).await? {
            if !r.done {
                b.work = true;
            }
            let Some(at) = &r.requested_lsn else { continue };
            if !held(at, start)? {
                continue;
            }
            if let Some(d) = &r.done_lsn {
                // A backfill that failed keeps its table where it stopped.
                if held(d, start)? && r.failed.is_none() {
                    b.reached.remove(&r.table);
                    continue;
                }
            }
            // The table as the backfill last described it (it may be gone
            // from the catalog since).
            let Some(sh) = r
                .described
                .as_deref()
                .and_then(|d| serde_json::from_str::<TableIs>(d).ok())
            else {
                return Err(Error::data(format!(
                    "backfill request {} of table {:?} does not describe its table",
                    r.id, r.table
                )));
            };
            let classes = sh
                .classes
                .iter()
                .map(|c| class_from_name(c))
                .collect::<Result<Vec<_>>>()?;
            let chunks = c
                .query(
                    "SELECT upper_key, lsn::text FROM mooncdc.backfill_chunks WHERE request = $1 AND lsn IS NOT NULL ORDER BY chunk",
                    &[&r.id],
                )
                .await
                .map_err(pg_err("cannot read backfill chunks"))?;
            let mut reached = Reached::Nothing;
            for ch in &chunks {
                if held(ch.get::<_, &str>(1), start)? {
                    reached = Reached::UpTo(key_values(&sh.schema, &classes, ch.get(0))?);
                }
            }
            b.reached.insert(r.table, (reached, sh.schema.key.clone()));
        }
        Ok(b)
    }

    /// Again after a reconnect, at the position written so far; the chunk
    /// in flight, the work to do and the progress stay.
    pub(super) async fn reload(&mut self, c: &Client, start: Sequence) -> Result<()> {
        let fresh = Backfills::load(c, start).await?;
        self.reached = fresh.reached;
        self.seen.clear();
        self.work |= fresh.work;
        Ok(())
    }

    /// A message of ours in the transaction at `commit` (`ordinal` its
    /// events so far): the events it stands for, with their table's schema
    /// at that point (for the batch to describe, where it has not yet, or
    /// differently).
    pub(super) fn message(
        &mut self,
        content: &[u8],
        commit: u64,
        ordinal: &mut u64,
    ) -> Result<(Option<Described>, Vec<Event>)> {
        let note: Note = serde_json::from_slice(content).map_err(|e| {
            Error::data(format!(
                "a backfill message at {} is unreadable: {e}",
                lsn_text(commit)
            ))
        })?;
        let table = note.table.clone();
        let (schema, classes) = match &note.table_is {
            Some(t) => {
                t.schema.check().map_err(Error::data)?;
                let classes = t
                    .classes
                    .iter()
                    .map(|c| class_from_name(c))
                    .collect::<Result<Vec<_>>>()?;
                if classes.len() != t.schema.columns.len() || t.schema.table != table {
                    return Err(Error::data(format!(
                        "a backfill message at {} describes its table inconsistently",
                        lsn_text(commit)
                    )));
                }
                (Some(t.schema.clone()), classes)
            }
            None if note.kind == "done" || note.kind == "failed" => (None, Vec::new()),
            None => {
                return Err(Error::data(format!(
                    "a backfill message at {} does not describe its table",
                    lsn_text(commit)
                )))
            }
        };
        let described = schema.clone().map(|s| (s, classes.clone()));
        let mut events = Vec::new();
        match note.kind.as_str() {
            "request" => {
                *ordinal += 1;
                events.push(Event::truncate(
                    sequence(commit, *ordinal),
                    table.clone(),
                    Operation::TRUNCATE,
                ));
                let schema = schema.as_ref().expect("described");
                self.reached
                    .insert(table, (Reached::Nothing, schema.key.clone()));
                self.seen.push(Seen::Request(note.request));
                self.work = true;
            }
            "chunk" => {
                let Some((reached, key)) = self.reached.get_mut(&table) else {
                    return Err(Error::data(format!(
                        "a backfill chunk of table {table:?} at {} belongs to no request this read has seen",
                        lsn_text(commit)
                    )));
                };
                let schema = schema.as_ref().expect("described");
                if &schema.key != key {
                    return Err(Error::data(format!(
                        "backfill chunk {} of table {table:?} at {} has another key than its request",
                        note.chunk,
                        lsn_text(commit)
                    )));
                }
                let positions = key_positions(schema);
                let lower = match &note.lower {
                    None => Reached::Nothing,
                    Some(k) => Reached::UpTo(key_values(schema, &classes, k)?),
                };
                if &lower != reached {
                    return Err(Error::data(format!(
                        "backfill chunk {} of table {table:?} at {} does not start where the one before it ended",
                        note.chunk,
                        lsn_text(commit)
                    )));
                }
                for r in &note.rows {
                    if r.len() != classes.len() {
                        return Err(Error::data(format!(
                            "a backfill row of table {table:?} has {} values, the table {}",
                            r.len(),
                            classes.len()
                        )));
                    }
                    let row: Row = r
                        .iter()
                        .zip(&classes)
                        .map(|(v, cls)| from_text(*cls, v.as_deref().map(str::as_bytes)))
                        .collect::<std::result::Result<_, _>>()
                        .map_err(|e| Error::data(format!("table {table:?}, backfill row: {e}")))?;
                    let key = key_of(&row, &positions);
                    if reached.covers(&key) {
                        return Err(Error::data(format!(
                            "a backfill row of table {table:?} at {} is not beyond the rows before it",
                            lsn_text(commit)
                        )));
                    }
                    *reached = Reached::UpTo(key);
                    *ordinal += 1;
                    events.push(Event {
                        sequence: sequence(commit, *ordinal),
                        table: table.clone(),
                        operation: Operation::Insert,
                        before: None,
                        after: Some(row),
                    });
                }
                self.seen.push(Seen::Chunk(note.request, note.chunk));
                if self.in_flight == Some((note.request, note.chunk)) {
                    self.in_flight = None;
                }
            }
            "failed" => {
                // The table stays where its chunks reached: its rows beyond
                // are left out until a new request for it.
                self.seen.push(Seen::Done(note.request));
                if self.in_flight.is_some_and(|(r, _)| r == note.request) {
                    self.in_flight = None;
                }
            }
            "done" => {
                self.reached.remove(&table);
                self.seen.push(Seen::Done(note.request));
                if self.in_flight.is_some_and(|(r, _)| r == note.request) {
                    self.in_flight = None;
                }
            }
            other => {
                return Err(Error::data(format!(
                "a backfill message of kind {other:?} (a newer MoonCDC wrote it; upgrade this one)"
            )))
            }
        }
        Ok((described, events))
    }

    /// An ordinary change of a table being backfilled, as the stream
    /// carries it (`None`: left out).
    /// `schema`: the table's, as the change was decoded with it.
    pub(super) fn pass(&self, e: Event, schema: &Schema) -> Result<Option<Event>> {
        match self.reached.get(&e.table) {
            None => Ok(Some(e)),
            Some((r, key)) => {
                if &schema.key != key {
                    return Err(Error::data(format!(
                        "the key of table {:?} changed during its backfill (change {}): resync it (mooncdc-capture backfill --table {} --resync)",
                        e.table, e.sequence, e.table
                    )));
                }
                Ok(crate::source::backfill::pass(e, &key_positions(schema), r))
            }
        }
    }

    /// Note where the messages of the transaction committed at `commit` are,
    /// before its batch is written (a target holding it implies the note).
    pub(super) async fn commit(&mut self, c: &Client, commit: u64) -> Result<()> {
        if self.seen.is_empty() {
            return Ok(());
        }
        let at = lsn_text(commit);
        // Durable before the batch is written, whatever the server's or the
        // role's synchronous_commit.
        c.batch_execute("BEGIN; SET LOCAL synchronous_commit = on")
            .await
            .map_err(pg_err("cannot note where a backfill message is"))?;
        for s in std::mem::take(&mut self.seen) {
            let (sql, id, chunk) = match s {
                Seen::Request(id) => (
                    "UPDATE mooncdc.backfill SET requested_lsn = $1::text::pg_lsn WHERE id = $2 AND requested_lsn IS NULL AND $3::int4 = 0",
                    id,
                    0,
                ),
                Seen::Chunk(id, n) => (
                    "UPDATE mooncdc.backfill_chunks SET lsn = $1::text::pg_lsn WHERE request = $2 AND chunk = $3 AND lsn IS NULL",
                    id,
                    n,
                ),
                Seen::Done(id) => (
                    "UPDATE mooncdc.backfill SET done_lsn = $1::text::pg_lsn WHERE id = $2 AND done_lsn IS NULL AND $3::int4 = 0",
                    id,
                    0,
                ),
            };
            c.execute(sql, &[&at, &id, &chunk])
                .await
                .map_err(pg_err("cannot note where a backfill message is (a backfill needs capture against the primary)"))?;
        }
        c.batch_execute("COMMIT")
            .await
            .map_err(pg_err("cannot note where a backfill message is"))?;
        Ok(())
    }
}

/// A key's text values (as `mooncdc.backfill` keeps them) as wire values.
fn key_values(schema: &Schema, classes: &[Class], text: &str) -> Result<Vec<Value>> {
    let key: Vec<Option<String>> = serde_json::from_str(text)
        .map_err(|e| Error::data(format!("a backfill key is unreadable: {e}")))?;
    let positions = key_positions(schema);
    if key.len() != positions.len() {
        return Err(Error::data("a backfill key does not match the table's key"));
    }
    key.iter()
        .zip(positions)
        .map(|(v, i)| from_text(classes[i], v.as_deref().map(str::as_bytes)).map_err(Error::data))
        .collect()
}
