//! The ClickHouse target, over HTTP(S).
//!
//! - URL `clickhouse://user[:password]@host:8123/db` (HTTP) or `clickhouses://…`
//!   (HTTPS, checked against the system's trust store). The password may come
//!   from `CLICKHOUSE_PASSWORD`. Credentials travel in the
//!   `X-ClickHouse-User`/`X-ClickHouse-Key` headers, never in URLs or messages.
//!   Optional query parameters: `connectivity_timeout_ms` (8000),
//!   `schema_timeout_ms` (16000), `ddl_timeout_ms` (128000),
//!   `insert_timeout_ms` (256000), `max_insert_bytes` (64 MiB), `sslrootcert`
//!   (a PEM file of CAs trusted instead of the system's). Statements travel in
//!   the request body, never in the URL.
//! - Names: source `_` is doubled, then `.` becomes `_` (`public.my_table` →
//!   `public_my__table`); not one-to-one, so each table's source table is
//!   recorded in `_mooncdc_tables` and a second one refused (`names`).
//! - `replacing` engine (default): `ReplacingMergeTree(_etl_version)` ordered by
//!   the key, with `_etl_deleted`, and a `<table>__current` view (`FINAL`, not
//!   deleted). A delete writes a tombstone; an update that changes the key
//!   writes a tombstone for the old key before the new row. Each row's version
//!   derives from its event's sequence, so replays after a crash are idempotent.
//! - `history` engine: `MergeTree` with `cdc_operation`, `cdc_lsn`,
//!   `cdc_tx_ordinal` (the sequence's high and low 64 bits) and the row.
//! - Values are written in RowBinary (bit-exact); types come from the schemas
//!   (see `docs/CLICKHOUSE.md`); a value that does not fit its column fails,
//!   naming table, column and sequence, and nothing is truncated or wrapped.
//! - A batch's rows are held (memory, then a temporary file) until its commit
//!   has been checked, then sent in inserts of at most `max_insert_bytes`;
//!   the cursor lives in `_mooncdc_cursor`, written after them. ClickHouse has
//!   no transactions: a crash between inserts leaves rows without the cursor,
//!   and the replay rewrites them with the same versions.
//! - A cluster target (`cluster=NAME`, docs/CLICKHOUSE.md "Cluster"): the
//!   rows live in `<table>_local` (Replicated engines, made `ON CLUSTER`)
//!   behind a `Distributed` table named as the table, sharded by a hash of
//!   the key; inserts are synchronous and acknowledged by `insert_quorum`
//!   replicas of each shard; reads ask for sequential consistency; the
//!   cursor table is replicated on every node.

mod apply;
mod cleanup;
mod cluster;
mod config;
mod cursor;
mod evolve;
mod fill;
mod http;
mod names;
mod pgtext;
mod read;
mod rowbinary;
mod schema;
mod send;
mod sql;
mod types;

pub use cleanup::Cleaned;
use cluster::Cluster;
use config::pct_encode;
pub use config::{ChConfig, Engine, Types};
pub use read::ChRows;
use rowbinary::*;
use sql::*;
pub use types::{column_type, column_type_with, table_name, version, ChType, Elem};
use types::{refuse_meta_names, HISTORY_META, REPLACING_META};

use super::{ExistingRows, TargetOptions};
use crate::error::{Error, ErrorKind, Result};
use crate::wire::value::write_value;
use crate::wire::SourceKind;
use crate::wire::{
    BatchStreamReader, Column, Cursor, Event, Item, Operation, Row, Schema, SchemaChange, Sequence,
    SnapItem, SnapshotReader, Value,
};
use std::collections::{HashMap, HashSet};
use std::io::{BufRead, Read};
use std::time::Duration;

pub use super::sqlite::ApplyStats;

/// A table's encoded rows of one batch, held (memory, then a temporary file)
/// until the batch's commit has been checked, so that nothing of a bad batch
/// reaches ClickHouse; `bounds` cuts it into inserts of at most about
/// `max_insert_bytes`, at row boundaries.
pub(super) struct Held {
    pub(super) spool: crate::ops::spool::Spool,
    pub(super) bounds: Vec<u64>,
    pub(super) since: usize,
    pub(super) row: Vec<u8>,
    /// The batch's truncates of this table, in order.
    pub(super) truncates: Vec<Sequence>,
}

impl Held {
    fn new() -> Self {
        Held {
            spool: crate::ops::spool::Spool::new(crate::ops::spool::DEFAULT_SPOOL_MEMORY).holding(
                "a table's rows of a batch",
                "until the batch's commit is checked",
            ),
            bounds: Vec::new(),
            since: 0,
            row: Vec::with_capacity(256),
            truncates: Vec::new(),
        }
    }

    /// Move the rows encoded in `self.row` into the spool.
    fn take_row(&mut self, max: usize) -> Result<()> {
        self.spool.push(&self.row)?;
        self.since += self.row.len();
        self.row.clear();
        // A row boundary every 8 MiB at most: inserts are joined from these
        // pieces at send time (see `inserts`).
        if self.since >= max.min(8 << 20) {
            self.bounds.push(self.spool.len());
            self.since = 0;
        }
        Ok(())
    }
}

/// A ClickHouse database as a target.
pub struct ClickHouse {
    pub(super) cfg: ChConfig,
    pub(super) http: reqwest::blocking::Client,
    pub(super) settings: HashSet<String>,
    pub(super) engine: Engine,
    pub(super) committed: ApplyStats,
    pub(super) options: TargetOptions,
    /// Whether `_mooncdc_cursor` is known to exist: created before the first
    /// write, never by a read-only command.
    pub(super) cursor_table: std::cell::Cell<bool>,
    /// The server's version (major, minor), for what its SQL can do.
    pub(super) version: (u32, u32),
    /// A cluster target: the cluster and the quorum of each insert.
    pub(super) cluster: Option<Cluster>,
    /// The schema each table was last made or checked for by `ensure`, and
    /// the column types it was found with.
    pub(super) ensured: std::cell::RefCell<HashMap<String, (Schema, Vec<ChType>)>>,
    /// The source table each ClickHouse table holds (`_mooncdc_tables`),
    /// read once.
    pub(super) names: std::cell::RefCell<Option<HashMap<String, String>>>,
}

pub(super) enum Timeout {
    Connect,
    Schema,
    Ddl,
    Insert,
    /// A cleanup merge: it rewrites a whole table, which may take hours.
    Merge,
}

impl ClickHouse {
    /// Connect: ping, read the version and the settings the server knows.
    /// Nothing is created or changed on the server.
    pub fn connect(cfg: ChConfig, engine: Engine) -> Result<ClickHouse> {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let mut builder =
            reqwest::blocking::Client::builder().connect_timeout(cfg.connectivity_timeout);
        if let Some(path) = &cfg.sslrootcert {
            builder = builder.tls_certs_only(root_certificates(path)?);
        }
        let http = builder
            .build()
            .map_err(|e| Error::new(ErrorKind::Tls, "cannot set up HTTP(S)").with_source(e))?;
        let mut ch = ClickHouse {
            cfg,
            http,
            settings: HashSet::new(),
            engine,
            committed: ApplyStats::default(),
            options: TargetOptions::default(),
            cursor_table: std::cell::Cell::new(false),
            version: (0, 0),
            cluster: None,
            ensured: Default::default(),
            names: Default::default(),
        };
        // Reachable, and the credentials work.
        let v = ch.query("SELECT version()", None, Timeout::Connect)?;
        let v = String::from_utf8_lossy(&v);
        let mut parts = v.trim().split('.').map(|p| p.parse::<u32>().unwrap_or(0));
        ch.version = (parts.next().unwrap_or(0), parts.next().unwrap_or(0));
        let s = ch.query(
            "SELECT name FROM system.settings WHERE name IN ('max_execution_time', 'wait_end_of_query', 'max_insert_block_size', 'insert_quorum', 'insert_quorum_timeout', 'insert_distributed_sync', 'insert_distributed_timeout', 'select_sequential_consistency', 'distributed_ddl_task_timeout', 'connect_timeout')",
            None,
            Timeout::Schema,
        )?;
        ch.settings = String::from_utf8_lossy(&s)
            .lines()
            .map(str::to_string)
            .collect();
        if let Some(name) = ch.cfg.cluster.clone() {
            ch.cluster = Some(ch.cluster_of(&name)?);
        }
        Ok(ch)
    }

    /// Whether new columns get ClickHouse's own types for PostgreSQL's
    /// timestamps, dates, UUIDs, booleans, wide decimals and arrays: where
    /// the server has them all over 1900-2299 (DateTime64 and Date32 held
    /// only 1925 to 2283 before 22.8, clamping the rest), unless the URL
    /// asks for text.
    pub(super) fn native_types(&self) -> bool {
        self.version >= (22, 8) && self.cfg.types != Types::Text
    }

    /// Whether new replacing tables name `_etl_deleted` to the engine
    /// (`ReplacingMergeTree(_etl_version, _etl_deleted)`, 23.2 and later).
    pub(super) fn is_deleted(&self) -> bool {
        self.version >= (23, 2)
    }

    /// ` ON CLUSTER name` for DDL on a cluster target; empty otherwise.
    pub(super) fn on_cluster(&self) -> String {
        match &self.cluster {
            Some(c) => format!(" ON CLUSTER {}", qi(&c.name)),
            None => String::new(),
        }
    }

    /// The table that stores a target table's rows: `<table>_local` on a
    /// cluster target (the target table is then the `Distributed` table
    /// over them), the table itself otherwise.
    pub(super) fn stored(&self, table: &str) -> String {
        match self.cluster {
            Some(_) => format!("{table}_local"),
            None => table.to_string(),
        }
    }

    /// How batches and snapshots are applied.
    pub fn with_options(mut self, options: TargetOptions) -> Self {
        self.options = options;
        self
    }

    /// Whether `_mooncdc_cursor` exists (then remembered), checked to be of
    /// this target's kind: a cursor kept by one node only would be lost
    /// with it, and one made for a cluster is not a single server's either.
    pub(super) fn cursor_table_found(&self) -> Result<bool> {
        let Some(engine) = self.engine_of("_mooncdc_cursor")? else {
            return Ok(false);
        };
        if engine.starts_with("Replicated") != self.cluster.is_some() {
            return Err(Error::state(format!(
                "database {} holds a cursor table ({engine}) made for {}; use a database of its own for this target",
                self.cfg.database,
                if self.cluster.is_some() {
                    "a single server, not a cluster"
                } else {
                    "a cluster: add cluster=NAME to the URL"
                }
            )));
        }
        self.cursor_table.set(true);
        Ok(true)
    }

    /// Create `_mooncdc_cursor` before the first write.
    pub(super) fn prepare_writes(&mut self) -> Result<()> {
        // Looked up before it is created: DDL on a cluster waits for every
        // node, so none is sent when nothing needs making.
        if !self.cursor_table.get() && self.cursor_table_found()? {
            return Ok(());
        }
        if !self.cursor_table.get() {
            let db = qi(&self.cfg.database);
            // On a cluster the cursor is kept by every node (one replicated
            // table whose replicas are all the cluster's nodes), so any node
            // answers `apply cursor`.
            let engine = match &self.cluster {
                Some(_) => {
                    format!(
                        "ReplicatedMergeTree({}, '{{shard}}-{{replica}}')",
                        sql_string(&format!(
                            "{}/all/{}/_mooncdc_cursor",
                            self.cfg.zookeeper_path, self.cfg.database
                        ))
                    )
                }
                None => "MergeTree".to_string(),
            };
            self.query(
                &format!(
                    "CREATE TABLE IF NOT EXISTS {db}.`_mooncdc_cursor`{} (source String, sequence String, seq_hi UInt64, seq_lo UInt64) ENGINE = {engine} ORDER BY (source, seq_hi, seq_lo)",
                    self.on_cluster()
                ),
                None,
                Timeout::Ddl,
            )?;
            self.cursor_table.set(true);
        }
        Ok(())
    }
}

/// The CA certificates of `sslrootcert=FILE`, every one in the PEM file.
fn root_certificates(path: &std::path::Path) -> Result<Vec<reqwest::Certificate>> {
    let pem = std::fs::read(path).map_err(|e| {
        Error::io(
            format!(
                "cannot read the ClickHouse URL's sslrootcert file {}",
                path.display()
            ),
            e,
        )
    })?;
    let certs = reqwest::Certificate::from_pem_bundle(&pem).map_err(|e| {
        Error::new(
            ErrorKind::Tls,
            format!(
                "the ClickHouse URL's sslrootcert file {} is not PEM certificates",
                path.display()
            ),
        )
        .with_source(e)
    })?;
    if certs.is_empty() {
        return Err(Error::new(
            ErrorKind::Tls,
            format!(
                "the ClickHouse URL's sslrootcert file {} holds no certificate (it needs the CA's, in PEM)",
                path.display()
            ),
        ));
    }
    Ok(certs)
}

impl super::Target for ClickHouse {
    fn cursor(&self) -> Result<Option<Cursor>> {
        ClickHouse::cursor(self)
    }
    fn apply_stream(
        &mut self,
        input: &mut BatchStreamReader<crate::wire::DynRead>,
        progress: &mut dyn FnMut(&ApplyStats),
    ) -> Result<ApplyStats> {
        ClickHouse::apply_stream(self, input, progress)
    }
    fn apply_snapshot(
        &mut self,
        input: &mut SnapshotReader<crate::wire::DynRead>,
        progress: &mut dyn FnMut(&ApplyStats),
    ) -> Result<ApplyStats> {
        ClickHouse::apply_snapshot(self, input, progress)
    }
    fn committed(&self) -> ApplyStats {
        self.committed.clone()
    }
}

impl super::AuditedTarget for ClickHouse {
    /// Float columns hold every bit, and REAL is never text here.
    fn keeps_zero_sign(&self) -> bool {
        true
    }

    fn table_shape(&self, schema: &Schema, kind: SourceKind) -> Result<Option<super::StoredShape>> {
        let Some(columns) = self.table_columns(schema)? else {
            return Ok(None);
        };
        // A column the source may leave NULL that the table holds as an
        // Array: only `arrays=empty-for-null` writes one, a NULL as [].
        let l = self.layout(schema, kind)?;
        let empty_for_null = (0..l.types.len())
            .filter(|&i| matches!(l.types[i], ChType::Array(_)) && schema.columns[i].nullable)
            .collect();
        Ok(Some(super::StoredShape {
            columns,
            key: None,
            empty_for_null,
        }))
    }
    fn with_rows(
        &self,
        schema: &Schema,
        kind: SourceKind,
        f: &mut dyn FnMut(&mut super::PullRow<'_>) -> Result<()>,
    ) -> Result<()> {
        match self.current_rows(schema, kind)? {
            None => f(&mut || Ok(None)),
            Some(mut rows) => f(&mut || rows.next_row()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_versions() {
        assert_eq!(table_name("public.my_table"), "public_my__table");
        assert_eq!(version(SourceKind::Sqlite, 5).unwrap(), 5);
        assert!(
            version(SourceKind::Postgres, (1u128 << 64) | 2).unwrap()
                > version(SourceKind::Postgres, 1u128 << 64).unwrap()
        );
        assert!(version(SourceKind::Postgres, 1u128 << 64 | (1 << 24)).is_err());
    }

    #[test]
    fn decimals_are_exact() {
        assert_eq!(decimal_scaled("12.34", 10, 4).unwrap(), 123400);
        assert_eq!(format_decimal(123400, 4), "12.3400");
        assert_eq!(format_decimal(-5, 2), "-0.05");
        assert!(decimal_scaled("1.234", 10, 2).is_err());
        assert!(decimal_scaled("123456789012", 10, 2).is_err());
        assert!(decimal_scaled("1e5", 10, 2).is_err());
    }

    #[test]
    fn rowbinary_round_trips() {
        let cases = [
            (ChType::Int64, Value::Integer(i64::MIN)),
            (ChType::Float64, Value::Real(5e-324)),
            (ChType::Float32, Value::Real(0.1f32 as f64)),
            (ChType::Text, Value::Text("\u{feff}a\u{0}😀".into())),
            (ChType::Blob, Value::Blob(vec![0, 255])),
            (ChType::Any, Value::Real(-1.5)),
            (ChType::Decimal(10, 2), Value::Text("-12.30".into())),
            (ChType::Bool, Value::Integer(1)),
            (ChType::Int64, Value::Null),
            (ChType::BoolNative, Value::Integer(0)),
            (
                ChType::DateTime64 {
                    zoned: true,
                    utc: true,
                },
                Value::Text("1969-12-31 23:59:59.999999+00".into()),
            ),
            (
                ChType::DateTime64 {
                    zoned: false,
                    utc: false,
                },
                Value::Text("2024-03-10 02:30:00.5".into()),
            ),
            (ChType::Date32, Value::Text("1900-01-01".into())),
            (
                ChType::Uuid,
                Value::Text("61f0c404-5cb3-11e7-907b-a6006ad3dba0".into()),
            ),
            (
                ChType::Array(Elem::Text),
                Value::Text(r#"{"a b",NULL,"","NULL"}"#.into()),
            ),
            (
                ChType::Array(Elem::Float64),
                Value::Text("{1.5,-0,1e-300,NULL}".into()),
            ),
            (ChType::Array(Elem::Bool), Value::Text("{t,f,NULL}".into())),
            (
                ChType::Array(Elem::Decimal(10, 2)),
                Value::Text("{1.50,-0.01}".into()),
            ),
            (ChType::Array(Elem::Int32), Value::Text("{}".into())),
            (
                ChType::Decimal(76, 20),
                Value::Text(
                    "-99999999999999999999999999999999999999999999999999999999.99999999999999999999"
                        .into(),
                ),
            ),
            (ChType::Decimal(50, 0), Value::Text("0".into())),
            (ChType::Decimal(40, 39), Value::Text("-0.000000000000000000000000000000000000001".into())),
        ];
        for (ty, v) in cases {
            let mut b = Vec::new();
            encode_value(&mut b, ty, true, &v).unwrap();
            let back = decode_value(&mut &b[..], ty, true).unwrap();
            assert!(back.same(&v), "{ty:?} {v:?} came back as {back:?}");
        }
        let mut b = Vec::new();
        assert!(encode_value(&mut b, ChType::Int32, true, &Value::Integer(1 << 40)).is_err());
        assert!(encode_value(&mut b, ChType::Float32, true, &Value::Real(0.1)).is_err());
        assert!(encode_value(&mut b, ChType::Text, true, &Value::Blob(vec![])).is_err());
        assert!(encode_value(&mut b, ChType::Int64, false, &Value::Null).is_err());
        // ClickHouse's UUID bytes: each 64-bit half little-endian (checked
        // against a modern server's RowBinary of this very UUID).
        let mut b = Vec::new();
        encode_value(
            &mut b,
            ChType::Uuid,
            false,
            &Value::Text("61f0c404-5cb3-11e7-907b-a6006ad3dba0".into()),
        )
        .unwrap();
        assert_eq!(hex::encode(&b), "e711b35c04c4f061a0dbd36a00a67b90");
        // Decimal256: -1 is all ones; 10^19 crosses a limb.
        assert_eq!(decimal256_scaled("-1", 40, 0).unwrap(), [0xff; 32]);
        let mut ten19 = [0u8; 32];
        ten19[..8].copy_from_slice(&10_000_000_000_000_000_000u64.to_le_bytes());
        assert_eq!(
            decimal256_scaled("1000000000000000000.0", 40, 1).unwrap(),
            ten19
        );
        assert_eq!(format_decimal256(ten19, 1), "1000000000000000000.0");
        assert!(decimal256_scaled(&"9".repeat(77), 76, 0).is_err());
        for (ty, text) in [
            (ChType::Date32, "1899-12-31"),
            (ChType::Array(Elem::Int32), "{{1},{2}}"),
            (ChType::Array(Elem::Int16), "{40000}"),
            (ChType::Array(Elem::Float64), "{NaN}"),
            (ChType::Uuid, "not a uuid"),
        ] {
            let mut b = Vec::new();
            assert!(
                encode_value(&mut b, ty, true, &Value::Text(text.into())).is_err(),
                "{text}"
            );
        }
    }
}
