//! The PostgreSQL target: a projection in a PostgreSQL database.
//!
//! - **Where.** A PostgreSQL source's `schema.table` lands in that schema and
//!   table (the schema is created when missing); a SQLite source's tables in
//!   the URL's `schema=` (default `public`).
//! - **Types.** A PostgreSQL source's columns keep their `format_type` (a type
//!   the target lacks, such as an enum, becomes `text`: the values are its
//!   text forms); a SQLite source's by declared affinity: INTEGER → `bigint`,
//!   REAL → `double precision`, TEXT → `text`, BLOB or none → `bytea`
//!   (NUMERIC is refused). Every value is checked against its column's class:
//!   one that does not fit, or TEXT holding NUL (which PostgreSQL text cannot
//!   hold), fails naming table, column and sequence.
//! - **Exactly once.** A batch's rows and its cursor commit in one
//!   transaction; the cursor is in `mooncdc.cursors`, keyed by source. The
//!   key is `DEFERRABLE INITIALLY DEFERRED`, so a batch that moves keys
//!   through each other (a swap) applies as its source transaction did.
//! - **Images.** An insert of a held key, an update or delete whose before
//!   image differs from the stored row: refused naming table and sequence,
//!   unless `--on-conflict overwrite`.
//! - **Exact values.** INTEGER, REAL, BLOB and TEXT go as binary parameters
//!   of `bigint`, `double precision`, `bytea` and `text`; other types as their
//!   own text forms, which the column's type parses.
//! - **Fast.** Statements are prepared per table and sent pipelined, many in
//!   flight; snapshots load with `COPY … FROM STDIN (FORMAT binary)`.

mod apply;
mod copy_in;
mod statements;
mod table;

use super::{
    ApplyStats, AuditedTarget, ExistingRows, OnConflict, PullRow, StoredShape, Target,
    TargetOptions,
};
use crate::error::{Error, Result};
use crate::pg::conn::PgConn;
use crate::pg::types::{class_of, Class};
use crate::pg::{connect_client, pg_err, runtime};
use crate::sqlite_util::Affinity;
use crate::util::quote_ident;
use crate::wire::SourceKind;
use crate::wire::{
    BatchStreamReader, Column, Cursor, DynRead, Operation, Row, Schema, SnapshotReader, Value,
};
use copy_in::*;
use statements::*;
use std::collections::HashMap;
use table::*;
use tokio_postgres::types::{ToSql, Type};
use tokio_postgres::{Client, Statement};

/// A PostgreSQL database as a target.
pub struct PgTarget {
    conn: PgConn,
    rt: tokio::runtime::Runtime,
    client: Option<Client>,
    options: TargetOptions,
    committed: ApplyStats,
    /// Where a SQLite source's tables land.
    schema: String,
    /// Tables made or checked in this session, by stream table name, for
    /// the schema each was checked for: a follower's next batch of the same
    /// tables asks the catalog nothing. Forgotten when an apply fails (its
    /// transaction may have made them).
    known: std::cell::RefCell<HashMap<String, Table>>,
    /// A PostgreSQL source's declared types as the target spells them (or
    /// `text`), asked once per process (three round trips each).
    spellings: std::cell::RefCell<HashMap<String, String>>,
    /// The stream table each target table took in this session: a second
    /// stream name for one table (`t` and `public.t`) is refused.
    claimed: std::cell::RefCell<HashMap<(String, String), String>>,
}

const CURSORS: &str = "mooncdc.cursors";

impl PgTarget {
    /// Note that stream table `stream` lands in `ns`.`name`; refused when
    /// another stream table of this session landed there.
    pub(super) fn claim(&self, ns: &str, name: &str, stream: &str) -> Result<()> {
        let mut claimed = self.claimed.borrow_mut();
        let key = (ns.to_string(), name.to_string());
        match claimed.get(&key) {
            Some(other) if other != stream => Err(Error::data(format!(
                "stream tables {other:?} and {stream:?} both land in PostgreSQL table {}.{}, and one table cannot hold two stream tables: refused before this batch was written; name the table one way in every stream (with its schema)",
                quote_ident(ns),
                quote_ident(name)
            ))),
            Some(_) => Ok(()),
            None => {
                claimed.insert(key, stream.to_string());
                Ok(())
            }
        }
    }
}

impl PgTarget {
    /// Nothing is connected or created until it is used.
    pub fn open(conn: PgConn) -> Result<PgTarget> {
        let schema = conn
            .target_schema
            .clone()
            .unwrap_or_else(|| "public".to_string());
        Ok(PgTarget {
            conn,
            rt: runtime()?,
            client: None,
            options: TargetOptions::default(),
            committed: ApplyStats::default(),
            schema,
            known: Default::default(),
            spellings: Default::default(),
            claimed: Default::default(),
        })
    }

    pub fn with_options(mut self, options: TargetOptions) -> Self {
        self.options = options;
        self
    }

    fn client(&mut self) -> Result<&Client> {
        if self.client.is_none() {
            let c = self.rt.block_on(connect_client(&self.conn, "apply"))?;
            self.client = Some(c);
        }
        Ok(self.client.as_ref().expect("connected"))
    }

    /// A session for a read-only use (a new one: `&self`).
    /// The session to read through: the open one (an audit's snapshot, or
    /// an apply's), else one of its own for this read.
    fn reader(&self) -> Result<Reader<'_>> {
        Ok(match &self.client {
            Some(c) => Reader::Open(c),
            None => Reader::Own(self.rt.block_on(connect_client(&self.conn, "read"))?),
        })
    }
}

/// A session borrowed from the target, or opened for one read.
enum Reader<'a> {
    Open(&'a Client),
    Own(Client),
}

impl std::ops::Deref for Reader<'_> {
    type Target = Client;
    fn deref(&self) -> &Client {
        match self {
            Reader::Open(c) => c,
            Reader::Own(c) => c,
        }
    }
}

/// The stored cursor (`None` without the table or a row). A target holds
/// the cursor of one source.
async fn stored_cursor(c: &Client) -> Result<Option<Cursor>> {
    let exists: bool = c
        .query_one("SELECT to_regclass('mooncdc.cursors') IS NOT NULL", &[])
        .await
        .map_err(pg_err("cannot look for the cursor table"))?
        .get(0);
    if !exists {
        return Ok(None);
    }
    read_cursor(c).await
}

/// The stored cursor, from a cursor table known to exist.
async fn read_cursor(c: &Client) -> Result<Option<Cursor>> {
    let rows = c
        .query(
            "SELECT source, sequence FROM mooncdc.cursors ORDER BY source",
            &[],
        )
        .await
        .map_err(pg_err("cannot read the cursor"))?;
    match &rows[..] {
        [] => Ok(None),
        [r] => {
            let seq: String = r.get(1);
            let seq = crate::wire::model::parse_sequence(&seq)
                .map_err(|e| Error::data(format!("the stored cursor is damaged: {e}")))?;
            Ok(Some(Cursor::new(r.get::<_, String>(0), seq)))
        }
        _ => Err(Error::state(format!(
            "{CURSORS} holds the cursors of {} sources; a PostgreSQL target holds one source's",
            rows.len()
        ))),
    }
}

/// Check a value against its column's class: one that does not fit, or
/// TEXT holding NUL, is refused naming table, column and `at`.
fn check_value(col: &Col, v: &Value, table: &str, at: &dyn Fn() -> String) -> Result<()> {
    let fits = matches!(
        (col.param, v),
        (_, Value::Null)
            | (Param::Int8, Value::Integer(_))
            | (Param::Float8, Value::Real(_))
            | (Param::Bool, Value::Integer(0 | 1))
            | (Param::Bytea, Value::Blob(_))
            | (Param::Text, Value::Text(_))
    );
    if !fits {
        return Err(Error::data(format!(
            "{}: table {table:?} column {:?} is {} in the target, which cannot hold this {} value exactly",
            at(),
            col.name,
            col.sql_type,
            v.class_name()
        )));
    }
    if let Value::Text(s) = v {
        if s.contains('\0') {
            return Err(Error::data(format!(
                "{}: table {table:?} column {:?}: TEXT with a NUL character, which PostgreSQL text cannot hold; nothing of the batch was applied",
                at(),
                col.name
            )));
        }
    }
    Ok(())
}

/// A value as a parameter of its column, once [`check_value`] took it.
fn param(col: &Col, v: &Value) -> Box<dyn ToSql + Sync + Send> {
    match (col.param, v) {
        (Param::Int8, Value::Null) => Box::new(None::<i64>),
        (Param::Float8, Value::Null) => Box::new(None::<f64>),
        (Param::Bool, Value::Null) => Box::new(None::<bool>),
        (Param::Bytea, Value::Null) => Box::new(None::<Vec<u8>>),
        (Param::Text, Value::Null) => Box::new(None::<String>),
        (Param::Int8, Value::Integer(i)) => Box::new(*i),
        (Param::Float8, Value::Real(x)) => Box::new(*x),
        (Param::Bool, Value::Integer(i)) => Box::new(*i == 1),
        (Param::Bytea, Value::Blob(b)) => Box::new(b.clone()),
        (Param::Text, Value::Text(s)) => Box::new(s.clone()),
        _ => unreachable!("checked"),
    }
}

impl Target for PgTarget {
    fn cursor(&self) -> Result<Option<Cursor>> {
        let c = self.reader()?;
        self.rt.block_on(stored_cursor(&c))
    }

    fn apply_stream(
        &mut self,
        input: &mut BatchStreamReader<DynRead>,
        progress: &mut dyn FnMut(&ApplyStats),
    ) -> Result<ApplyStats> {
        PgTarget::apply_stream(self, input, progress)
    }

    fn apply_snapshot(
        &mut self,
        input: &mut SnapshotReader<DynRead>,
        progress: &mut dyn FnMut(&ApplyStats),
    ) -> Result<ApplyStats> {
        PgTarget::apply_snapshot(self, input, progress)
    }

    fn committed(&self) -> ApplyStats {
        self.committed.clone()
    }
}

impl AuditedTarget for PgTarget {
    fn keeps_zero_sign(&self) -> bool {
        true
    }

    fn begin_audit(&mut self) -> Result<()> {
        let rt = &self.rt;
        if self.client.is_none() {
            self.client = Some(rt.block_on(connect_client(&self.conn, "audit"))?);
        }
        let c = self.client.as_ref().expect("connected");
        rt.block_on(c.batch_execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY"))
            .map_err(pg_err("cannot begin the audit transaction"))
    }

    fn table_shape(&self, schema: &Schema, kind: SourceKind) -> Result<Option<StoredShape>> {
        let (ns, name) = target_name(&schema.table, kind, &self.schema)?;
        let c = self.reader()?;
        let found = self.rt.block_on(read_columns(&c, &ns, &name))?;
        Ok(found.map(|(cols, key)| StoredShape {
            columns: cols.into_iter().map(|c| c.name).collect(),
            key: Some(key),
            empty_for_null: Vec::new(),
        }))
    }

    fn with_rows(
        &self,
        schema: &Schema,
        kind: SourceKind,
        f: &mut dyn FnMut(&mut PullRow<'_>) -> Result<()>,
    ) -> Result<()> {
        let (ns, name) = target_name(&schema.table, kind, &self.schema)?;
        let c = self.reader()?;
        let Some((cols, _)) = self.rt.block_on(read_columns(&c, &ns, &name))? else {
            return f(&mut || Ok(None));
        };
        // The source's own order and text forms (docs/FORMAT.md §9), as a
        // PostgreSQL source reads its rows.
        let classes: Vec<Class> = cols.iter().map(|c| c.class).collect();
        let local = Schema {
            table: crate::wire::names::join(&ns, &name),
            columns: schema.columns.clone(),
            key: schema.key.clone(),
        };
        let from = format!("{}.{}", quote_ident(&ns), quote_ident(&name));
        let select = crate::pg::select_in_key_order(&local, &classes, &from, None);
        let stream = self
            .rt
            .block_on(c.copy_out(&format!("COPY ({select}) TO STDOUT")))
            .map_err(pg_err("cannot read a target table"))?;
        let mut rows = crate::pg::CopyRows::new(Box::pin(stream), classes, local.table.clone());
        let rt = &self.rt;
        f(&mut || rt.block_on(rows.next()))
    }
}
