//! Backfill for the PostgreSQL source (docs/BACKFILL.md, "PostgreSQL").
//!
//! Requests, chunks and ends are transactional logical messages (prefix
//! `mooncdc_backfill`), so they reach every follower in commit order, and a
//! chunk's rows travel in its message: any reader, at any position, derives
//! the same stream. A chunk is one short REPEATABLE READ transaction of a
//! follower: it reads the next rows in key order, without blocking anyone,
//! and writes them into the WAL as its message with its snapshot; readers
//! write after them the changes of its window that the snapshot did not see
//! (window.rs), so the rows are the table as it is at the chunk's commit,
//! its place in the stream.
//!
//! `mooncdc.backfill` keeps each request; `mooncdc.backfill_chunks` each
//! chunk's last key; both note, once a reader has decoded it, the commit
//! position of the message, so a reader starting at any cursor knows what
//! the stream has reached there.

mod chunk;
mod read;
mod request;
mod window;

pub(super) use read::{describe, Backfills};

use super::catalog::published_schema;
use super::publication::{publication_detail, PubTable};
use super::types::{from_text, Class};
use crate::error::{Error, Result};
use crate::pg::pg_err;
use crate::source::backfill::key_positions;
use crate::util::quote_ident;
use crate::wire::{Schema, Value};
use serde_json::json;
use tokio_postgres::Client;

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
ALTER TABLE mooncdc.backfill ADD COLUMN IF NOT EXISTS failed text, ADD COLUMN IF NOT EXISTS described text,
    ADD COLUMN IF NOT EXISTS publication text;
CREATE TABLE IF NOT EXISTS mooncdc.backfill_chunks (
    request bigint NOT NULL,
    chunk integer NOT NULL,
    upper_key text NOT NULL,
    lsn pg_lsn,
    PRIMARY KEY (request, chunk));
ALTER TABLE mooncdc.backfill ADD COLUMN IF NOT EXISTS window_lsn pg_lsn;
ALTER TABLE mooncdc.backfill_chunks ADD COLUMN IF NOT EXISTS discarded boolean NOT NULL DEFAULT false,
    ALTER COLUMN upper_key DROP NOT NULL;";

/// Key column types whose `ORDER BY` is the stream's key order
/// (docs/FORMAT.md §9) for their wire values; text types in a byte-ordered
/// collation, or ordered in "C" in the query.
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

/// A role that may not read the backfill's tables: what to grant.
pub(super) const BACKFILL_TABLES_DENIED: &str =
    "this role may not read the backfill's tables (schema mooncdc): as their owner, GRANT USAGE ON SCHEMA mooncdc TO it and \
     GRANT SELECT, INSERT, UPDATE ON mooncdc.backfill, mooncdc.backfill_chunks TO it (a backfill request gives these to every \
     REPLICATION role that exists when it is made; mooncdc-capture grants prints them; docs/POSTGRES.md, \"Rights\")";

/// Whether the backfill's tables are there as this version makes them
/// (`SETUP` then has nothing to do, and needs no right to do it).
pub(super) async fn set_up(c: &Client) -> Result<bool> {
    Ok(c.query_one(
        "SELECT EXISTS (SELECT 1 FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid \
                        JOIN pg_namespace n ON n.oid = c.relnamespace \
                        WHERE n.nspname = 'mooncdc' AND c.relname = 'backfill' AND a.attname = 'window_lsn' \
                          AND NOT a.attisdropped) \
            AND EXISTS (SELECT 1 FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid \
                        JOIN pg_namespace n ON n.oid = c.relnamespace \
                        WHERE n.nspname = 'mooncdc' AND c.relname = 'backfill_chunks' AND a.attname = 'discarded' \
                          AND NOT a.attisdropped)",
        &[],
    )
    .await
    .map_err(pg_err("cannot look for the backfill tables"))?
    .get(0))
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

/// The requests of the pipeline of `publication`: each request belongs to
/// the publication it was made for (one recorded before requests named
/// theirs belongs to every pipeline, as then). The column is read through
/// `to_jsonb`, so a table made by an older MoonCDC, without it, reads too.
pub(super) async fn requests(c: &Client, publication: &str) -> Result<Vec<Request>> {
    if !installed(c).await? {
        return Ok(Vec::new());
    }
    let rows = c
        .query(
            "SELECT id, table_name, resync, estimate, rows, chunks, done, requested_lsn::text, done_lsn::text, failed, described \
             FROM mooncdc.backfill b WHERE coalesce(to_jsonb(b) ->> 'publication', $1) = $1 ORDER BY id",
            &[&publication],
        )
        .await
        .map_err(|e| {
            if e.code() == Some(&tokio_postgres::error::SqlState::INSUFFICIENT_PRIVILEGE) {
                Error::state(BACKFILL_TABLES_DENIED)
            } else {
                pg_err("cannot read backfill requests")(e)
            }
        })?;
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
    /// Text key columns whose collation is not byte-ordered: the chunk
    /// orders them in "C", which their own index cannot serve.
    pub scanned: Vec<String>,
}

/// The shape of a published table, or why it cannot be backfilled.
pub(super) async fn shape(c: &Client, publication: &str, name: &str) -> Result<Shape> {
    let pubs = publication_detail(c, publication).await?;
    let p = pubs.iter().find(|p| p.name == name).ok_or_else(|| {
        Error::state(format!(
            "table {name:?} is not in publication {publication:?}"
        ))
    })?;
    refuse_published_part(p, name)?;
    let (schema, classes) = published_schema(c, p).await?;
    let mut order = Vec::new();
    let mut key_types = Vec::new();
    let mut scanned = Vec::new();
    for k in &schema.key {
        let (ty, by, scans) = key_column_order(c, p, name, k).await?;
        order.push(by);
        if scans {
            scanned.push(k.clone());
        }
        key_types.push(ty);
    }
    Ok(Shape {
        schema,
        classes,
        qualified: format!("ONLY {}.{}", quote_ident(&p.schema), quote_ident(&p.table)),
        order,
        key_types,
        scanned,
    })
}

/// Why table `name` cannot be backfilled, as the error that says so.
fn refuse(name: &str, why: String) -> Error {
    Error::usage(format!(
        "table {name:?} cannot be backfilled: {why} (docs/BACKFILL.md, Limits); take a new snapshot instead"
    ))
}

/// Refuse a table the publication publishes only part of: some of its
/// rows (a row filter), or its partitions.
fn refuse_published_part(p: &PubTable, name: &str) -> Result<()> {
    if p.filter.is_some() {
        return Err(refuse(
            name,
            "the publication filters its rows (a row filter)".into(),
        ));
    }
    if p.partitioned {
        return Err(refuse(name, "it is partitioned".into()));
    }
    Ok(())
}

/// Key column `k` of table `p`: its type, its term of the chunk's
/// `ORDER BY`, and whether that term is "C" over another collation (then
/// each chunk reads the table through); or why the table cannot be
/// backfilled.
async fn key_column_order(
    c: &Client,
    p: &PubTable,
    name: &str,
    k: &str,
) -> Result<(String, String, bool)> {
    // The key column's type and collation: its own, or the database's
    // for "default" (provider: c libc, i ICU, b builtin; before
    // PostgreSQL 15 a database's is always libc).
    let row = c
        .query_one(
            "SELECT format_type(a.atttypid, NULL), coalesce(co.collname, '')::text, \
                    CASE WHEN co.collname = 'default' THEN d.provider ELSE coalesce(co.collprovider::text, '') END, \
                    CASE WHEN co.collname = 'default' THEN d.datcollate::text ELSE coalesce(co.collcollate, '')::text END \
             FROM pg_attribute a LEFT JOIN pg_collation co ON co.oid = a.attcollation, \
                  (SELECT datcollate, coalesce(to_jsonb(db) ->> 'datlocprovider', 'c') AS provider \
                   FROM pg_database db WHERE datname = current_database()) d \
             WHERE a.attrelid = format('%I.%I', $1::text, $2::text)::regclass AND a.attname = $3",
            &[&p.schema, &p.table, &k],
        )
        .await
        .map_err(pg_err("cannot read the key's types"))?;
    let ty: String = row.get(0);
    let (provider, collate): (String, String) = (row.get(2), row.get(3));
    let q = quote_ident(k);
    if ORDERED_KEY_TYPES.contains(&ty.as_str()) {
        Ok((ty, q, false))
    } else if TEXT_KEY_TYPES.contains(&ty.as_str()) {
        refuse_text_encoding(c, name, k).await?;
        if byte_ordered(&provider, &collate) {
            // Its own collation is the byte order the stream compares
            // keys in: its index serves the chunk's range.
            Ok((ty, q, false))
        } else {
            // Another order (a language's): the chunk orders in "C",
            // which an index on the key in its own collation cannot
            // serve; each chunk then reads the table through.
            Ok((ty, format!("{q} COLLATE \"C\""), true))
        }
    } else {
        Err(refuse(name, format!(
            "its key column {k:?} is of type {ty}, whose order is not the order of its text (keys of integers, booleans, bytea, uuid and text can be)"
        )))
    }
}

/// Refuse text key column `k` in a database whose encoding does not order
/// text as the stream does.
async fn refuse_text_encoding(c: &Client, name: &str, k: &str) -> Result<()> {
    // The server compares text as its encoding's bytes; those are
    // in the stream's order (UTF-8's, code points) only for UTF-8,
    // LATIN1 (one byte a code point) and SQL_ASCII (bytes as sent).
    let enc: String = c
        .query_one(
            "SELECT pg_encoding_to_char(encoding)::text FROM pg_database WHERE datname = current_database()",
            &[],
        )
        .await
        .map_err(pg_err("cannot read the database's encoding"))?
        .get(0);
    if !matches!(enc.as_str(), "UTF8" | "LATIN1" | "SQL_ASCII") {
        return Err(refuse(name, format!(
            "its key column {k:?} is text in a {enc} database, whose byte order is not the order the stream compares keys in (UTF-8's)"
        )));
    }
    Ok(())
}

/// Whether a collation orders text as its UTF-8 bytes (code points): libc's
/// C, POSIX and C.UTF-8, and every builtin one (PostgreSQL 17+).
fn byte_ordered(provider: &str, collate: &str) -> bool {
    provider == "b"
        || (provider == "c"
            && matches!(
                collate,
                "C" | "POSIX" | "C.UTF-8" | "C.utf8" | "C.UTF8" | "C.utf-8"
            ))
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

/// The table as a message describes it (`described`).
#[derive(Debug, serde::Deserialize)]
struct TableIs {
    schema: Schema,
    classes: Vec<String>,
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
