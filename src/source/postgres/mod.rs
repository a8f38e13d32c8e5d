//! The PostgreSQL source: logical replication with the `pgoutput` plugin.
//!
//! - `init` creates (or extends) a publication, sets `REPLICA IDENTITY FULL`
//!   on its tables (full before images; unchanged TOAST values are filled from
//!   the old row and never become NULL) and creates the slot.
//! - A position is `commit_lsn × 2^64 + ordinal` (DESIGN §3): ordinals number
//!   a transaction's row changes from 1. A batch that ends at a transaction
//!   boundary ends at `(commit_lsn + 1) × 2^64`, i.e. "everything committed
//!   before commit_lsn + 1"; a read that catches up ends at the WAL flush
//!   position it saw at its start. The slot is restarted from `sequence >> 64`.
//! - `read` streams from the slot through a replication connection, never
//!   acknowledging: its standby status reports only the slot's own confirmed
//!   position. `ack` advances the slot (never backwards, never past what is given).
//! - `snapshot` creates a temporary slot with an exported snapshot, keeps that
//!   session idle, and copies each table in a REPEATABLE READ session that
//!   imports the snapshot; its cursor is the temporary slot's consistent point,
//!   so capture after it hands over exactly.
//!
//! Identity: `postgres:<system identifier>/<database>/<slot>`.

pub mod conn;
pub mod pgoutput;
pub mod types;

use crate::error::{Error, ErrorKind, Result};
use crate::wire::batch::{write_commit_line, write_event_line, write_header_line};
use crate::wire::snapshot::SnapshotWriter;
use crate::wire::{Column, Commit, Cursor, Event, Header, Operation, Row, Schema, Sequence, Value};
use conn::PgConn;
use futures_util::StreamExt;
use pgoutput::{Cell, Message, Relation};
use pgwire_replication::{IdentifySystem, Lsn, ReplicationClient, ReplicationEvent};
use std::collections::HashMap;
use std::io::Write;
use std::time::Duration;
use tokio_postgres::Client;
use types::{class_of, copy_fields, from_text, Class};

/// Default slot and publication names.
pub const DEFAULT_SLOT: &str = "mooncdc_main";
pub const DEFAULT_PUBLICATION: &str = "mooncdc_main";

/// What names a PostgreSQL source: connection, slot and publication.
#[derive(Debug, Clone)]
pub struct PgSource {
    pub conn: PgConn,
    pub slot: String,
    pub publication: String,
}

fn pg_err(what: &str) -> impl Fn(tokio_postgres::Error) -> Error + '_ {
    move |e| {
        let detail = e
            .as_db_error()
            .map(|d| d.message().to_string())
            .unwrap_or_else(|| e.to_string());
        Error::new(ErrorKind::Database, format!("{what}: {detail}"))
    }
}

fn repl_err(what: &str) -> impl Fn(pgwire_replication::PgWireError) -> Error + '_ {
    move |e| Error::new(ErrorKind::Database, format!("{what}: {e}"))
}

fn io_out(e: std::io::Error) -> Error {
    Error::io("cannot write output", e)
}

fn runtime() -> Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| Error::io("cannot start the async runtime", e))
}

/// Split `schema.table` (default schema `public`).
pub fn split_table(name: &str) -> (String, String) {
    match name.split_once('.') {
        Some((s, t)) => (s.to_string(), t.to_string()),
        None => ("public".to_string(), name.to_string()),
    }
}

fn check_slot_name(s: &str) -> Result<()> {
    if s.is_empty()
        || s.len() > 63
        || !s
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
    {
        return Err(Error::usage(format!(
            "slot name {s:?} must be 1 to 63 lowercase letters, digits and underscores"
        )));
    }
    Ok(())
}

fn quote_ident(s: &str) -> String {
    format!("\"{}\"", s.replace('"', "\"\""))
}

fn lsn_text(lsn: u64) -> String {
    format!("{:X}/{:X}", lsn >> 32, lsn & 0xffff_ffff)
}

fn parse_lsn(s: &str) -> Result<u64> {
    Lsn::parse(s)
        .map(|l| l.as_u64())
        .map_err(|_| Error::data(format!("bad LSN {s:?} from the server")))
}

/// The sequence of position `lsn` with `ordinal`.
pub fn sequence(lsn: u64, ordinal: u64) -> Sequence {
    ((lsn as u128) << 64) | ordinal as u128
}

impl PgSource {
    pub fn new(url: &str, slot: Option<&str>, publication: Option<&str>) -> Result<Self> {
        let slot = slot.unwrap_or(DEFAULT_SLOT).to_string();
        check_slot_name(&slot)?;
        Ok(PgSource {
            conn: PgConn::parse(url)?,
            slot,
            publication: publication.unwrap_or(DEFAULT_PUBLICATION).to_string(),
        })
    }

    /// Run one whole phase of connecting (TCP, TLS, startup, authentication
    /// and, on a replication session, IDENTIFY_SYSTEM or START_REPLICATION)
    /// within `connect_timeout`: a peer that accepts the connection but never
    /// answers must not hold a tool up forever. The drivers bound at most the
    /// TCP connect themselves.
    async fn connecting<T>(
        &self,
        phase: impl std::future::Future<Output = Result<T>>,
    ) -> Result<T> {
        match tokio::time::timeout(self.conn.connect_timeout, phase).await {
            Ok(r) => r,
            Err(_) => Err(Error::new(
                ErrorKind::Database,
                format!(
                    "cannot connect to {}: no answer within {} s (connect_timeout); is this a PostgreSQL server?",
                    self.conn.display(),
                    self.conn.connect_timeout.as_secs()
                ),
            )),
        }
    }

    async fn client(&self, role: &str) -> Result<Client> {
        let tls = self.conn.tls()?;
        let config = self.conn.tokio_config(role);
        let (client, connection) = self
            .connecting(async {
                config
                    .connect(tls)
                    .await
                    .map_err(|e| pg_err(&format!("cannot connect to {}", self.conn.display()))(e))
            })
            .await?;
        tokio::spawn(async move {
            let _ = connection.await;
        });
        Ok(client)
    }

    /// A replication session that has not started streaming, and its
    /// IDENTIFY_SYSTEM answer (the first thing it says, so the connect
    /// timeout covers it).
    async fn replication_session(&self) -> Result<(ReplicationClient, IdentifySystem)> {
        let cfg = self.conn.replication_config(&self.slot, &self.publication);
        self.connecting(async {
            let opening = format!(
                "cannot open a replication session to {}",
                self.conn.display()
            );
            let mut c = ReplicationClient::connect_gated(cfg)
                .await
                .map_err(repl_err(&opening))?;
            // Connecting and authenticating run in the background: their
            // errors (TLS, I/O) surface here too; only the server's own
            // refusals point at the role.
            let id = c.identify_system().await.map_err(|e| match e {
                pgwire_replication::PgWireError::Server(_) => repl_err(
                    "IDENTIFY_SYSTEM failed (does the role have the REPLICATION attribute?)",
                )(e),
                e => repl_err(&opening)(e),
            })?;
            Ok((c, id))
        })
        .await
    }

    /// A replication stream from `cfg`, once the server has accepted START_REPLICATION.
    async fn replication_stream(
        &self,
        cfg: pgwire_replication::ReplicationConfig,
    ) -> Result<ReplicationClient> {
        self.connecting(async {
            let mut client = ReplicationClient::connect(cfg)
                .await
                .map_err(repl_err("cannot open the replication stream"))?;
            client
                .wait_started()
                .await
                .map_err(repl_err("cannot start replication"))?;
            Ok(client)
        })
        .await
    }

    /// The identity, from IDENTIFY_SYSTEM on a replication session.
    async fn identity(&self) -> Result<String> {
        let (mut c, id) = self.replication_session().await?;
        c.abort();
        Ok(format!(
            "postgres:{}/{}/{}",
            id.system_id, self.conn.dbname, self.slot
        ))
    }

    /// Install capture for `tables` (`schema.table`; default: every table with a
    /// primary key in schemas other than the system ones). Returns the identity.
    pub fn init(&self, tables: &[String]) -> Result<(String, Vec<String>)> {
        runtime()?.block_on(async {
            let c = self.client("init").await?;
            let mut names: Vec<String> = if tables.is_empty() {
                let rows = c
                    .query(
                        "SELECT n.nspname || '.' || c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace \
                         WHERE c.relkind IN ('r', 'p') AND n.nspname NOT IN ('pg_catalog', 'information_schema') \
                         AND n.nspname NOT LIKE 'pg\\_%' ORDER BY 1",
                        &[],
                    )
                    .await
                    .map_err(pg_err("cannot list tables"))?;
                rows.iter().map(|r| r.get::<_, String>(0)).collect()
            } else {
                tables.to_vec()
            };
            names.dedup();
            for n in &names {
                let (s, t) = split_table(n);
                table_schema(&c, &s, &t).await?;
            }
            let pub_exists = c
                .query_opt("SELECT puballtables FROM pg_publication WHERE pubname = $1", &[&self.publication])
                .await
                .map_err(pg_err("cannot read publications"))?;
            let qualified: Vec<String> = names
                .iter()
                .map(|n| {
                    let (s, t) = split_table(n);
                    format!("{}.{}", quote_ident(&s), quote_ident(&t))
                })
                .collect();
            match pub_exists {
                None => {
                    if qualified.is_empty() {
                        return Err(Error::usage("no tables to capture (name them with --table schema.table)"));
                    }
                    c.batch_execute(&format!(
                        "CREATE PUBLICATION {} FOR TABLE {}",
                        quote_ident(&self.publication),
                        qualified.join(", ")
                    ))
                    .await
                    .map_err(pg_err("cannot create the publication"))?;
                }
                Some(r) => {
                    let all: bool = r.get(0);
                    if !all {
                        let have = publication_tables(&c, &self.publication).await?;
                        for (n, q) in names.iter().zip(&qualified) {
                            if !have.contains(n) {
                                c.batch_execute(&format!("ALTER PUBLICATION {} ADD TABLE {q}", quote_ident(&self.publication)))
                                    .await
                                    .map_err(pg_err("cannot add a table to the publication"))?;
                            }
                        }
                    }
                }
            }
            for n in publication_tables(&c, &self.publication).await? {
                let (s, t) = split_table(&n);
                c.batch_execute(&format!("ALTER TABLE {}.{} REPLICA IDENTITY FULL", quote_ident(&s), quote_ident(&t)))
                    .await
                    .map_err(pg_err("cannot set REPLICA IDENTITY FULL"))?;
            }
            let slot = c
                .query_opt("SELECT plugin, database FROM pg_replication_slots WHERE slot_name = $1", &[&self.slot])
                .await
                .map_err(pg_err("cannot read replication slots"))?;
            match slot {
                None => {
                    c.query("SELECT pg_create_logical_replication_slot($1, 'pgoutput')", &[&self.slot])
                        .await
                        .map_err(pg_err("cannot create the replication slot"))?;
                }
                Some(r) => {
                    let plugin: Option<String> = r.get(0);
                    let db: Option<String> = r.get(1);
                    if plugin.as_deref() != Some("pgoutput") || db.as_deref() != Some(self.conn.dbname.as_str()) {
                        return Err(Error::state(format!(
                            "slot {:?} exists with plugin {:?} in database {:?}; MoonCDC needs a pgoutput slot in {:?}",
                            self.slot, plugin, db, self.conn.dbname
                        )));
                    }
                }
            }
            let id = self.identity().await?;
            Ok((id, publication_tables(&c, &self.publication).await?))
        })
    }

    /// Re-apply what `init` set up, for the tables already published: replica
    /// identity FULL on each, and the slot if it is missing. Adds no table.
    pub fn upgrade(&self) -> Result<Vec<String>> {
        let tables = runtime()?.block_on(async {
            let c = self.client("upgrade").await?;
            publication_tables(&c, &self.publication).await
        })?;
        if tables.is_empty() {
            return Err(Error::state(format!(
                "publication {:?} has no tables (run init --table schema.table)",
                self.publication
            )));
        }
        Ok(self.init(&tables)?.1)
    }

    /// Differences from a working capture; empty when all is well.
    pub fn verify(&self) -> Result<Vec<String>> {
        runtime()?.block_on(async {
            let c = self.client("verify").await?;
            let mut drift = Vec::new();
            match slot_info(&c, &self.slot).await? {
                None => drift.push(format!("slot {:?} does not exist (run init)", self.slot)),
                Some(s) => {
                    if s.plugin != "pgoutput" {
                        drift.push(format!("slot {:?} uses plugin {:?}, not pgoutput", self.slot, s.plugin));
                    }
                    if s.database != self.conn.dbname {
                        drift.push(format!("slot {:?} belongs to database {:?}", self.slot, s.database));
                    }
                    if s.lost {
                        drift.push(format!("slot {:?} is invalidated (its WAL was removed); take a new snapshot", self.slot));
                    }
                }
            }
            let exists = c
                .query_opt("SELECT 1 FROM pg_publication WHERE pubname = $1", &[&self.publication])
                .await
                .map_err(pg_err("cannot read publications"))?;
            if exists.is_none() {
                drift.push(format!("publication {:?} does not exist (run init)", self.publication));
                return Ok(drift);
            }
            let tables = publication_tables(&c, &self.publication).await?;
            if tables.is_empty() {
                drift.push(format!("publication {:?} has no tables", self.publication));
            }
            for n in tables {
                let (s, t) = split_table(&n);
                let ident: Option<String> = c
                    .query_opt(
                        "SELECT relreplident::text FROM pg_class WHERE oid = to_regclass(format('%I.%I', $1::text, $2::text))",
                        &[&s, &t],
                    )
                    .await
                    .map_err(pg_err("cannot read a table's replica identity"))?
                    .map(|r| r.get(0));
                if ident.as_deref() != Some("f") {
                    drift.push(format!("table {n:?} does not have REPLICA IDENTITY FULL (run init)"));
                }
                if let Err(e) = table_schema(&c, &s, &t).await {
                    drift.push(format!("table {n:?}: {}", e.message()));
                }
            }
            Ok(drift)
        })
    }

    /// Identity, slot positions, WAL retained and lag.
    pub fn status(&self) -> Result<Vec<(String, String)>> {
        runtime()?.block_on(async {
            let c = self.client("status").await?;
            let id = self.identity().await?;
            let s = slot_info(&c, &self.slot)
                .await?
                .ok_or_else(|| Error::state(format!("slot {:?} does not exist (run init)", self.slot)))?;
            let r = c
                .query_one(
                    "SELECT pg_current_wal_flush_lsn()::text, \
                     pg_wal_lsn_diff(pg_current_wal_flush_lsn(), restart_lsn)::bigint, \
                     pg_wal_lsn_diff(pg_current_wal_flush_lsn(), confirmed_flush_lsn)::bigint, active \
                     FROM pg_replication_slots WHERE slot_name = $1",
                    &[&self.slot],
                )
                .await
                .map_err(pg_err("cannot read the slot"))?;
            let wal: String = r.get(0);
            let retained: Option<i64> = r.get(1);
            let lag: Option<i64> = r.get(2);
            let active: bool = r.get(3);
            Ok(vec![
                ("identity".into(), id.clone()),
                ("acknowledged".into(), Cursor::new(id, sequence(s.confirmed, 0)).to_json()),
                ("confirmed_flush_lsn".into(), lsn_text(s.confirmed)),
                ("restart_lsn".into(), lsn_text(s.restart)),
                ("wal_flush_lsn".into(), wal),
                ("wal_retained_bytes".into(), retained.unwrap_or(0).to_string()),
                ("lag_bytes".into(), lag.unwrap_or(0).to_string()),
                ("slot_active".into(), active.to_string()),
            ])
        })
    }

    /// Advance the slot's confirmed position to `cursor.sequence >> 64`. Never
    /// backwards (an older position is a no-op), never past the WAL flushed.
    pub fn ack(&self, cursor: &Cursor) -> Result<u64> {
        runtime()?.block_on(async {
            let id = self.identity().await?;
            if cursor.source != id {
                return Err(Error::state(format!("cursor is for source {:?} but this source is {id:?}", cursor.source)));
            }
            let c = self.client("ack").await?;
            let s = slot_info(&c, &self.slot)
                .await?
                .ok_or_else(|| Error::state(format!("slot {:?} does not exist", self.slot)))?;
            let lsn = (cursor.sequence() >> 64) as u64;
            if lsn <= s.confirmed {
                return Ok(s.confirmed);
            }
            let flushed: String = c
                .query_one("SELECT pg_current_wal_flush_lsn()::text", &[])
                .await
                .map_err(pg_err("cannot read the WAL position"))?
                .get(0);
            if lsn > parse_lsn(&flushed)? {
                return Err(Error::state(format!(
                    "cannot acknowledge through LSN {}: the server has flushed WAL only to {flushed}",
                    lsn_text(lsn)
                )));
            }
            c.query("SELECT pg_replication_slot_advance($1, $2::text::pg_lsn)", &[&self.slot, &lsn_text(lsn)])
                .await
                .map_err(pg_err("cannot advance the slot"))?;
            Ok(lsn)
        })
    }

    /// Write one batch stream of the changes after `after` (default: the
    /// slot's confirmed position), up to the WAL flushed when the read began.
    pub fn read(
        &self,
        after: Option<&Cursor>,
        limits: crate::source::ReadLimits,
        out: &mut dyn Write,
    ) -> Result<u64> {
        runtime()?.block_on(self.stream(after, limits, false, None, out))
    }

    /// Keep streaming, one batch per transaction; with `ack_target`,
    /// acknowledge what the target durably holds.
    pub fn follow(
        &self,
        after: Option<&Cursor>,
        ack_target: Option<&dyn Fn() -> Result<Option<Cursor>>>,
        out: &mut dyn Write,
    ) -> Result<u64> {
        let limits = crate::source::ReadLimits::default();
        runtime()?.block_on(self.stream(after, limits, true, ack_target, out))
    }

    async fn stream(
        &self,
        after: Option<&Cursor>,
        limits: crate::source::ReadLimits,
        follow: bool,
        ack_target: Option<&dyn Fn() -> Result<Option<Cursor>>>,
        out: &mut dyn Write,
    ) -> Result<u64> {
        let c = self.client("read").await?;
        let id = self.identity().await?;
        let slot = slot_info(&c, &self.slot).await?.ok_or_else(|| {
            Error::state(format!(
                "slot {:?} does not exist (run mooncdc-capture init)",
                self.slot
            ))
        })?;
        if slot.plugin != "pgoutput" || slot.database != self.conn.dbname {
            return Err(Error::state(format!(
                "slot {:?} uses plugin {:?} in database {:?}; MoonCDC needs a pgoutput slot in {:?}",
                self.slot, slot.plugin, slot.database, self.conn.dbname
            )));
        }
        if slot.lost {
            return Err(Error::state(format!(
                "slot {:?} is invalidated: the changes it needed are gone (take a new snapshot)",
                self.slot
            )));
        }
        if slot.active {
            return Err(Error::state(format!(
                "slot {:?} is in use by another session",
                self.slot
            )));
        }
        let start = match after {
            None => sequence(slot.confirmed, 0),
            Some(cur) => {
                if cur.source != id {
                    return Err(Error::state(format!(
                        "cursor is for source {:?} but this source is {id:?}",
                        cur.source
                    )));
                }
                if ((cur.sequence() >> 64) as u64) < slot.confirmed {
                    return Err(Error::state(format!(
                        "cursor LSN {} is before the slot's confirmed position {}: those changes are gone (take a new snapshot)",
                        lsn_text((cur.sequence() >> 64) as u64),
                        lsn_text(slot.confirmed)
                    )));
                }
                cur.sequence()
            }
        };
        let flushed: String = c
            .query_one("SELECT pg_current_wal_flush_lsn()::text", &[])
            .await
            .map_err(pg_err("cannot read the WAL position"))?
            .get(0);
        let wal_end = parse_lsn(&flushed)?;
        let start_lsn = (start >> 64) as u64;
        if (start >> 64) as u64 > wal_end {
            return Err(Error::state(format!(
                "cursor LSN {} is beyond the server's WAL {flushed}",
                lsn_text(start_lsn)
            )));
        }
        let mut catalog = Catalog::load(&c, &self.publication).await?;

        let cfg = self
            .conn
            .replication_config(&self.slot, &self.publication)
            .with_start_lsn(Lsn::from_u64(start_lsn))
            .with_ack_lsn(Lsn::from_u64(slot.confirmed));
        let cfg = if follow {
            cfg
        } else {
            cfg.with_stop_lsn(Lsn::from_u64(wal_end.max(start_lsn)))
        };
        let mut client = self.replication_stream(cfg).await?;

        let high_water = sequence(wal_end, 0).max(start);
        let mut w = BatchOut::new(id.clone(), start, high_water, catalog.schemas(), out);
        let mut txn: Option<(u64, u64)> = None; // (commit lsn, ordinal)
        let mut total = 0u64;
        let mut bytes = 0u64;
        let mut acked = slot.confirmed;
        let mut last_ack_check = std::time::Instant::now();
        let result: Result<()> = async {
            loop {
                let ev = if follow {
                    match tokio::time::timeout(Duration::from_millis(500), client.recv()).await {
                        Ok(r) => r.map_err(repl_err("replication stream failed"))?,
                        Err(_) => {
                            if let Some(get) = ack_target {
                                acked = ack_from(get, &id, &client, acked)?;
                            }
                            continue;
                        }
                    }
                } else {
                    client.recv().await.map_err(repl_err("replication stream failed"))?
                };
                let Some(ev) = ev else { break };
                match ev {
                    ReplicationEvent::Begin { final_lsn, .. } => {
                        if !follow && final_lsn.as_u64() >= wal_end {
                            break;
                        }
                        txn = Some((final_lsn.as_u64(), 0));
                        if follow {
                            w.high_water = w.high_water.max(sequence(final_lsn.as_u64() + 1, 0));
                        }
                    }
                    ReplicationEvent::Commit { lsn, .. } => {
                        let commit = lsn.as_u64();
                        txn = None;
                        if follow {
                            let end = sequence(commit + 1, 0);
                            if end > w.position {
                                w.high_water = w.high_water.max(end);
                                w.finish_batch(end)?;
                                w.out.flush().map_err(io_out)?;
                            }
                            if let Some(get) = ack_target {
                                if last_ack_check.elapsed() > Duration::from_millis(200) {
                                    acked = ack_from(get, &id, &client, acked)?;
                                    last_ack_check = std::time::Instant::now();
                                }
                            }
                        }
                    }
                    ReplicationEvent::KeepAlive { wal_end: we, .. } => {
                        if !follow && txn.is_none() && we.as_u64() >= wal_end {
                            break;
                        }
                    }
                    ReplicationEvent::StoppedAt { .. } => break,
                    ReplicationEvent::Message { .. } => {}
                    ReplicationEvent::XLogData { data, .. } => {
                        let msg = pgoutput::decode(&data).map_err(|e| Error::data(e.to_string()))?;
                        match msg {
                            Message::Relation(rel) => {
                                if catalog.relation(&c, rel).await? {
                                    // A table's shape changed: the batch ends here and
                                    // the next header carries the new schema.
                                    if w.open {
                                        let at = w.position;
                                        w.finish_batch(at)?;
                                    }
                                    w.schemas = catalog.schemas();
                                }
                            }
                            Message::Insert { .. } | Message::Update { .. } | Message::Delete { .. } => {
                                let Some((commit, ordinal)) = txn.as_mut() else {
                                    return Err(Error::data("row change outside a transaction"));
                                };
                                *ordinal += 1;
                                let seq = sequence(*commit, *ordinal);
                                if seq <= start {
                                    continue;
                                }
                                let e = catalog.event(seq, msg)?;
                                let len = w.encoded_len(&e) as u64;
                                limits.check_line(&w.line, &e)?;
                                // Like SQLite reads: stop before the bytes written
                                // would exceed the limit (one event at least).
                                if total > 0 && limits.max_bytes.is_some_and(|m| bytes + len > m) {
                                    let at = w.position;
                                    w.finish_batch(at)?;
                                    return Ok(());
                                }
                                w.write_encoded(e.sequence)?;
                                total += 1;
                                bytes += len;
                                if limits.max_events.is_some_and(|m| total >= m) {
                                    let at = w.position;
                                    w.finish_batch(at)?;
                                    return Ok(());
                                }
                            }
                            Message::Truncate { relations, .. } => {
                                let names: Vec<String> = relations.iter().map(|r| catalog.name(*r)).collect();
                                let at = txn.map(|(c, _)| lsn_text(c)).unwrap_or_default();
                                return Err(Error::data(format!(
                                    "TRUNCATE of {} in the transaction committing at LSN {at} cannot be carried by the v1 format (take a new snapshot after it)",
                                    names.join(", ")
                                )));
                            }
                            Message::Type { .. } | Message::Origin { .. } | Message::Message { .. } => {}
                            Message::Begin { .. } | Message::Commit { .. } => {}
                        }
                    }
                }
            }
            // Caught up: the batch ends at the WAL position seen at the start
            // (unless it is inside a transaction cut by a limit).
            if !follow {
                let end = w.position.max(high_water);
                w.finish_batch(end)?;
            }
            Ok(())
        }
        .await;
        client.abort();
        result?;
        w.out.flush().map_err(io_out)?;
        Ok(total)
    }

    /// Write a snapshot consistent with a cursor that hands over exactly to `read`.
    #[allow(clippy::too_many_arguments)]
    pub fn snapshot(
        &self,
        tables: &[String],
        json: bool,
        jobs: usize,
        slot_timeout: Duration,
        out: &mut dyn Write,
        progress: &mut dyn FnMut(u64),
    ) -> Result<u64> {
        runtime()?.block_on(async {
            let c = self.client("snapshot").await?;
            let main = slot_info(&c, &self.slot)
                .await?
                .ok_or_else(|| Error::state(format!("slot {:?} does not exist (run mooncdc-capture init first, so that changes after the snapshot are kept)", self.slot)))?;
            if main.plugin != "pgoutput" || main.database != self.conn.dbname || main.lost {
                return Err(Error::state(format!(
                    "slot {:?} (plugin {:?}, database {:?}{}) cannot continue from a snapshot of {:?}; capture needs a valid pgoutput slot in this database",
                    self.slot,
                    main.plugin,
                    main.database,
                    if main.lost { ", invalidated" } else { "" },
                    self.conn.dbname
                )));
            }
            let published = publication_tables(&c, &self.publication).await?;
            let chosen: Vec<String> = if tables.is_empty() {
                published.clone()
            } else {
                for t in tables {
                    let full = if t.contains('.') { t.clone() } else { format!("public.{t}") };
                    if !published.contains(&full) {
                        return Err(Error::usage(format!("table {full:?} is not in publication {:?}", self.publication)));
                    }
                }
                tables.iter().map(|t| if t.contains('.') { t.clone() } else { format!("public.{t}") }).collect()
            };
            let (mut exporter, sys) = self.replication_session().await?;
            let id = format!("postgres:{}/{}/{}", sys.system_id, self.conn.dbname, self.slot);
            let tmp = format!("mooncdc_snap_{}_{}", std::process::id(), std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.subsec_nanos()).unwrap_or(0));
            let created = tokio::time::timeout(
                slot_timeout,
                exporter.simple_query(&format!("CREATE_REPLICATION_SLOT {tmp} TEMPORARY LOGICAL pgoutput (SNAPSHOT 'export')")),
            )
            .await;
            let rows = match created {
                Err(_) => {
                    exporter.abort();
                    return Err(Error::state(format!(
                        "creating the snapshot's temporary slot waited {} s for open transactions to finish; retry when they have (or raise --slot-timeout)",
                        slot_timeout.as_secs()
                    )));
                }
                Ok(r) => r.map_err(repl_err("cannot create the snapshot's temporary slot"))?,
            };
            let row = rows.first().ok_or_else(|| Error::data("CREATE_REPLICATION_SLOT returned no row"))?;
            let text = |i: usize| -> Result<String> {
                row.get(i)
                    .and_then(|v| v.as_ref())
                    .map(|b| String::from_utf8_lossy(b).into_owned())
                    .ok_or_else(|| Error::data("CREATE_REPLICATION_SLOT returned an incomplete row"))
            };
            let consistent = parse_lsn(&text(1)?)?;
            let snapshot_name = text(2)?;
            // The main slot must still hold every change after the snapshot.
            let main_now = slot_info(&c, &self.slot).await?.unwrap_or(main);
            if main_now.confirmed > consistent {
                exporter.abort();
                return Err(Error::state(format!(
                    "slot {:?} is already acknowledged to {}, past the snapshot's point {}: changes in between would be lost",
                    self.slot,
                    lsn_text(main_now.confirmed),
                    lsn_text(consistent)
                )));
            }
            let reader = self.import_snapshot(&snapshot_name).await?;
            let mut schemas = Vec::new();
            let mut classes = Vec::new();
            for n in &chosen {
                let (s, t) = split_table(n);
                let (schema, cls) = table_schema(&reader, &s, &t).await?;
                schemas.push(schema);
                classes.push(cls);
            }
            let cursor = Cursor::new(id, sequence(consistent, 0));
            let mut w = SnapshotWriter::begin(out, json, &cursor, &schemas).map_err(io_out)?;
            let jobs = jobs.clamp(1, schemas.len().max(1));
            let mut sessions = vec![reader];
            if jobs <= 1 {
                for (schema, cls) in schemas.iter().zip(&classes) {
                    w.table(schema).map_err(io_out)?;
                    let mut rows = copy_table(&sessions[0], schema, cls).await?;
                    while let Some(row) = rows.next().await? {
                        w.row(&row).map_err(io_out)?;
                        if w.count() % 65536 == 0 {
                            progress(w.count());
                        }
                    }
                }
            } else {
                // Each worker imports the same snapshot and copies its share of
                // the tables into spools; the output then comes in table order.
                for _ in 1..jobs {
                    sessions.push(self.import_snapshot(&snapshot_name).await?);
                }
                let work = sessions.iter().enumerate().map(|(k, sess)| {
                    let mine: Vec<usize> = (k..schemas.len()).step_by(jobs).collect();
                    let (schemas, classes) = (&schemas, &classes);
                    async move {
                        let mut spools = Vec::new();
                        for i in mine {
                            let mut spool = crate::ops::spool::Spool::new(4 << 20);
                            let mut rows = copy_table(sess, &schemas[i], &classes[i]).await?;
                            let mut line = Vec::with_capacity(256);
                            while let Some(row) = rows.next().await? {
                                line.clear();
                                crate::wire::value::write_row(&mut line, &row);
                                line.push(b'\n');
                                spool.push(&line)?;
                            }
                            spools.push((i, spool));
                        }
                        Ok::<_, Error>(spools)
                    }
                });
                let results = futures_util::future::join_all(work).await;
                let mut all: Vec<(usize, crate::ops::spool::Spool)> = Vec::new();
                for r in results {
                    all.extend(r?);
                }
                all.sort_by_key(|(i, _)| *i);
                for (i, mut spool) in all {
                    w.table(&schemas[i]).map_err(io_out)?;
                    let mut rd = spool.drain()?;
                    let mut line = Vec::new();
                    loop {
                        line.clear();
                        if std::io::BufRead::read_until(&mut rd, b'\n', &mut line).map_err(|e| Error::io("cannot read a spool", e))? == 0 {
                            break;
                        }
                        w.raw_row(&line[..line.len() - 1]).map_err(io_out)?;
                        if w.count() % 65536 == 0 {
                            progress(w.count());
                        }
                    }
                }
            }
            let count = w.finish().map_err(io_out)?;
            for sess in &sessions {
                let _ = sess.batch_execute("COMMIT").await;
            }
            exporter.abort();
            progress(count);
            Ok(count)
        })
    }
}

impl PgSource {
    /// A REPEATABLE READ READ ONLY session that imports an exported snapshot.
    async fn import_snapshot(&self, name: &str) -> Result<Client> {
        let c = self.client("snapshot reader").await?;
        c.batch_execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
            .await
            .map_err(pg_err("cannot begin the snapshot transaction"))?;
        c.batch_execute(&format!(
            "SET TRANSACTION SNAPSHOT '{}'",
            name.replace('\'', "''")
        ))
        .await
        .map_err(pg_err("cannot import the exported snapshot"))?;
        Ok(c)
    }
}

/// A table's rows in key order through COPY.
async fn copy_table(c: &Client, schema: &Schema, classes: &[Class]) -> Result<CopyRows> {
    let sql = select_in_key_order(schema, classes);
    let stream = c
        .copy_out(&format!("COPY ({sql}) TO STDOUT"))
        .await
        .map_err(pg_err("cannot copy a table"))?;
    Ok(CopyRows::new(
        Box::pin(stream),
        classes.to_vec(),
        schema.table.clone(),
    ))
}

/// Acknowledge up to what the target holds, on the live stream's feedback.
fn ack_from(
    get: &dyn Fn() -> Result<Option<Cursor>>,
    id: &str,
    client: &ReplicationClient,
    acked: u64,
) -> Result<u64> {
    if let Some(held) = get()? {
        if held.source == id {
            let lsn = (held.sequence() >> 64) as u64;
            if lsn > acked {
                client.update_applied_lsn(Lsn::from_u64(lsn));
                return Ok(lsn);
            }
        }
    }
    Ok(acked)
}

/// Streams batches: a header when the first event or the end comes, events,
/// a commit at each end.
struct BatchOut<'a> {
    id: String,
    position: Sequence,
    high_water: Sequence,
    schemas: Vec<Schema>,
    out: &'a mut dyn Write,
    open: bool,
    count: u64,
    line: Vec<u8>,
}

impl<'a> BatchOut<'a> {
    fn new(
        id: String,
        start: Sequence,
        high_water: Sequence,
        schemas: Vec<Schema>,
        out: &'a mut dyn Write,
    ) -> Self {
        BatchOut {
            id,
            position: start,
            high_water,
            schemas,
            out,
            open: false,
            count: 0,
            line: Vec::with_capacity(1024),
        }
    }

    fn open_batch(&mut self) -> Result<()> {
        if !self.open {
            self.line.clear();
            write_header_line(
                &mut self.line,
                &Header {
                    start: Cursor::new(self.id.clone(), self.position),
                    high_water: self.high_water,
                    schemas: Some(self.schemas.clone()),
                    compacted: false,
                },
            );
            self.out.write_all(&self.line).map_err(io_out)?;
            self.open = true;
            self.count = 0;
        }
        Ok(())
    }

    fn encoded_len(&mut self, e: &Event) -> usize {
        self.line.clear();
        write_event_line(&mut self.line, e);
        self.line.len()
    }

    /// Write the event last given to [`encoded_len`](Self::encoded_len).
    fn write_encoded(&mut self, sequence: Sequence) -> Result<()> {
        if !self.open {
            let event = std::mem::take(&mut self.line);
            self.open_batch()?;
            self.line = event;
        }
        self.out.write_all(&self.line).map_err(io_out)?;
        self.count += 1;
        self.position = sequence;
        Ok(())
    }

    fn finish_batch(&mut self, end: Sequence) -> Result<()> {
        self.open_batch()?;
        self.line.clear();
        write_commit_line(
            &mut self.line,
            &Commit {
                end: Cursor::new(self.id.clone(), end),
                count: self.count,
            },
        );
        self.out.write_all(&self.line).map_err(io_out)?;
        self.open = false;
        self.position = end;
        Ok(())
    }
}

/// What the stream knows about each published table.
struct Catalog {
    /// By relation OID: schema, classes per column.
    by_oid: HashMap<u32, (Schema, Vec<Class>)>,
    /// By name, as loaded from the catalog at the start.
    by_name: Vec<(String, Schema, Vec<Class>)>,
}

impl Catalog {
    async fn load(c: &Client, publication: &str) -> Result<Catalog> {
        let mut by_name = Vec::new();
        for n in publication_tables(c, publication).await? {
            let (s, t) = split_table(&n);
            let (schema, cls) = table_schema(c, &s, &t).await?;
            by_name.push((n, schema, cls));
        }
        if by_name.is_empty() {
            return Err(Error::state(format!(
                "publication {publication:?} has no tables (run init)"
            )));
        }
        Ok(Catalog {
            by_oid: HashMap::new(),
            by_name,
        })
    }

    fn schemas(&self) -> Vec<Schema> {
        self.by_name.iter().map(|(_, s, _)| s.clone()).collect()
    }

    fn name(&self, oid: u32) -> String {
        self.by_oid
            .get(&oid)
            .map_or_else(|| format!("relation {oid}"), |(s, _)| s.table.clone())
    }

    /// Take a Relation message; true when the table's schema differs from the
    /// one the current header carries.
    async fn relation(&mut self, c: &Client, rel: Relation) -> Result<bool> {
        let name = format!("{}.{}", rel.namespace, rel.name);
        let mut columns = Vec::with_capacity(rel.columns.len());
        let mut classes = Vec::with_capacity(rel.columns.len());
        for col in &rel.columns {
            let ty: String = c
                .query_one(
                    "SELECT format_type($1::oid, $2::int4)",
                    &[&col.type_oid, &col.type_modifier],
                )
                .await
                .map_err(pg_err("cannot name a column type"))?
                .get(0);
            columns.push((col.name.clone(), ty));
            classes.push(class_of(col.type_oid));
        }
        let known = self.by_name.iter().position(|(n, _, _)| *n == name);
        let same = known.is_some_and(|i| {
            let s = &self.by_name[i].1;
            s.columns.len() == columns.len()
                && s.columns
                    .iter()
                    .zip(&columns)
                    .all(|(a, (n, t))| &a.name == n && &a.decl_type == t)
        });
        if same {
            let (_, s, cls) = &self.by_name[known.expect("known")];
            self.by_oid.insert(rel.oid, (s.clone(), cls.clone()));
            return Ok(false);
        }
        // New or changed: nullability and key from the catalog as it is now.
        let (s, t) = (rel.namespace.clone(), rel.name.clone());
        let (fresh, _) = table_schema(c, &s, &t).await?;
        let schema = Schema {
            table: name.clone(),
            columns: columns
                .into_iter()
                .map(|(n, ty)| {
                    let nullable = fresh
                        .columns
                        .iter()
                        .find(|c| c.name == n)
                        .is_none_or(|c| c.nullable);
                    Column {
                        name: n,
                        decl_type: ty,
                        nullable,
                    }
                })
                .collect(),
            key: fresh.key,
        };
        schema.check().map_err(Error::data)?;
        match known {
            Some(i) => self.by_name[i] = (name, schema.clone(), classes.clone()),
            None => self.by_name.push((name, schema.clone(), classes.clone())),
        }
        self.by_oid.insert(rel.oid, (schema, classes));
        Ok(true)
    }

    fn event(&self, seq: Sequence, msg: Message) -> Result<Event> {
        let (relation, op, old, new) = match msg {
            Message::Insert { relation, new } => (relation, Operation::Insert, None, Some(new)),
            Message::Update { relation, old, new } => (relation, Operation::Update, old, Some(new)),
            Message::Delete { relation, old } => (relation, Operation::Delete, Some(old), None),
            _ => unreachable!("row changes only"),
        };
        let (schema, classes) = self.by_oid.get(&relation).ok_or_else(|| {
            Error::data(format!(
                "row change for relation {relation} before its Relation message"
            ))
        })?;
        let here = |e: String| Error::data(format!("table {:?}, change {seq}: {e}", schema.table));
        let convert = |t: &[Cell], fallback: Option<&Row>| -> Result<Row> {
            if t.len() != classes.len() {
                return Err(here(format!(
                    "row has {} values, the table {}",
                    t.len(),
                    classes.len()
                )));
            }
            t.iter()
                .zip(classes)
                .enumerate()
                .map(|(i, (cell, cls))| match cell {
                    Cell::Null => Ok(Value::Null),
                    Cell::Text(b) => from_text(*cls, Some(b)).map_err(&here),
                    Cell::Binary(_) => Err(here("binary-format value (the stream must be in text format)".into())),
                    Cell::Unchanged => fallback
                        .map(|r| r[i].clone())
                        .ok_or_else(|| here("an unchanged TOAST value came without the old row (set REPLICA IDENTITY FULL)".into())),
                })
                .collect()
        };
        let before = match old {
            None if op == Operation::Update => {
                return Err(here("the update came without its old row: the table needs REPLICA IDENTITY FULL (run init)".into()))
            }
            None => None,
            Some((kind, t)) => {
                if kind != b'O' {
                    return Err(here("only the key of the old row came: the table needs REPLICA IDENTITY FULL (run init)".into()));
                }
                Some(convert(&t, None)?)
            }
        };
        let after = match new {
            None => None,
            Some(t) => Some(convert(&t, before.as_ref())?),
        };
        Ok(Event {
            sequence: seq,
            table: schema.table.clone(),
            operation: op,
            before,
            after,
        })
    }
}

struct SlotInfo {
    plugin: String,
    database: String,
    confirmed: u64,
    restart: u64,
    lost: bool,
    active: bool,
}

async fn slot_info(c: &Client, slot: &str) -> Result<Option<SlotInfo>> {
    let r = c
        .query_opt(
            "SELECT coalesce(plugin, ''), coalesce(database, ''), coalesce(confirmed_flush_lsn::text, '0/0'), \
             coalesce(restart_lsn::text, '0/0'), coalesce(wal_status = 'lost', false), active \
             FROM pg_replication_slots WHERE slot_name = $1",
            &[&slot],
        )
        .await
        .map_err(pg_err("cannot read replication slots"))?;
    let Some(r) = r else { return Ok(None) };
    Ok(Some(SlotInfo {
        plugin: r.get(0),
        database: r.get(1),
        confirmed: parse_lsn(&r.get::<_, String>(2))?,
        restart: parse_lsn(&r.get::<_, String>(3))?,
        lost: r.get(4),
        active: r.get(5),
    }))
}

/// The publication's tables as `schema.table`, sorted.
pub async fn publication_tables(c: &Client, publication: &str) -> Result<Vec<String>> {
    let rows = c
        .query(
            "SELECT schemaname || '.' || tablename FROM pg_publication_tables WHERE pubname = $1 ORDER BY 1",
            &[&publication],
        )
        .await
        .map_err(pg_err("cannot read the publication's tables"))?;
    Ok(rows.iter().map(|r| r.get(0)).collect())
}

/// A table's schema (types by `format_type`, key = primary key) and the wire
/// class of each column.
pub async fn table_schema(c: &Client, schema: &str, table: &str) -> Result<(Schema, Vec<Class>)> {
    let name = format!("{schema}.{table}");
    let rel = c
        .query_opt(
            "SELECT to_regclass(format('%I.%I', $1::text, $2::text))::oid",
            &[&schema, &table],
        )
        .await
        .map_err(pg_err("cannot look up a table"))?
        .and_then(|r| r.get::<_, Option<u32>>(0))
        .ok_or_else(|| Error::state(format!("table {name:?} does not exist")))?;
    let cols = c
        .query(
            "SELECT attname::text, format_type(atttypid, atttypmod), attnotnull, atttypid::oid FROM pg_attribute \
             WHERE attrelid = $1 AND attnum > 0 AND NOT attisdropped AND attgenerated = '' ORDER BY attnum",
            &[&rel],
        )
        .await
        .map_err(pg_err("cannot read a table's columns"))?;
    let key = c
        .query(
            "SELECT a.attname::text FROM pg_index i CROSS JOIN LATERAL unnest(i.indkey) WITH ORDINALITY AS k(attnum, ord) \
             JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum \
             WHERE i.indrelid = $1 AND i.indisprimary ORDER BY k.ord",
            &[&rel],
        )
        .await
        .map_err(pg_err("cannot read a table's primary key"))?;
    if key.is_empty() {
        return Err(Error::state(format!(
            "table {name:?} has no primary key; MoonCDC identifies rows by their key"
        )));
    }
    let mut classes = Vec::new();
    let columns = cols
        .iter()
        .map(|r| {
            classes.push(class_of(r.get::<_, u32>(3)));
            Column {
                name: r.get(0),
                decl_type: r.get(1),
                nullable: !r.get::<_, bool>(2),
            }
        })
        .collect();
    let s = Schema {
        table: name,
        columns,
        key: key.iter().map(|r| r.get(0)).collect(),
    };
    s.check().map_err(Error::data)?;
    Ok((s, classes))
}

/// `SELECT` of a table's columns in the key order of DESIGN §7: TEXT-mapped
/// keys compare as their text in the C collation (bytewise), others natively.
pub fn select_in_key_order(s: &Schema, classes: &[Class]) -> String {
    let (schema, table) = split_table(&s.table);
    let cols: Vec<String> = s.columns.iter().map(|c| quote_ident(&c.name)).collect();
    let order: Vec<String> = s
        .key
        .iter()
        .map(|k| {
            let i = s
                .columns
                .iter()
                .position(|c| &c.name == k)
                .expect("checked schema");
            match classes[i] {
                // concat() uses the type's output function, so the order is
                // that of the text on the wire (a cast to text would strip a
                // char(n)'s padding).
                Class::Text => format!("concat({}) COLLATE \"C\"", quote_ident(k)),
                _ => quote_ident(k),
            }
        })
        .collect();
    format!(
        "SELECT {} FROM {}.{} ORDER BY {}",
        cols.join(", "),
        quote_ident(&schema),
        quote_ident(&table),
        order.join(", ")
    )
}

/// Rows of a `COPY … TO STDOUT` stream, decoded to wire values.
pub struct CopyRows {
    stream: std::pin::Pin<Box<tokio_postgres::CopyOutStream>>,
    classes: Vec<Class>,
    table: String,
    buf: Vec<u8>,
    done: bool,
}

impl CopyRows {
    pub fn new(
        stream: std::pin::Pin<Box<tokio_postgres::CopyOutStream>>,
        classes: Vec<Class>,
        table: String,
    ) -> Self {
        CopyRows {
            stream,
            classes,
            table,
            buf: Vec::new(),
            done: false,
        }
    }

    pub async fn next(&mut self) -> Result<Option<Row>> {
        loop {
            if let Some(i) = self.buf.iter().position(|&b| b == b'\n') {
                let line: Vec<u8> = self.buf.drain(..=i).collect();
                let line = &line[..line.len() - 1];
                let fields = copy_fields(line)
                    .map_err(|e| Error::data(format!("table {:?}: {e}", self.table)))?;
                if fields.len() != self.classes.len() {
                    return Err(Error::data(format!(
                        "table {:?}: COPY row has {} fields",
                        self.table,
                        fields.len()
                    )));
                }
                let row = fields
                    .iter()
                    .zip(&self.classes)
                    .map(|(f, c)| from_text(*c, f.as_deref()))
                    .collect::<std::result::Result<Row, String>>()
                    .map_err(|e| Error::data(format!("table {:?}: {e}", self.table)))?;
                return Ok(Some(row));
            }
            if self.done {
                if !self.buf.is_empty() {
                    return Err(Error::data(format!(
                        "table {:?}: COPY ended inside a row",
                        self.table
                    )));
                }
                return Ok(None);
            }
            match self.stream.next().await {
                Some(chunk) => self
                    .buf
                    .extend_from_slice(&chunk.map_err(pg_err("COPY failed"))?),
                None => self.done = true,
            }
        }
    }
}

/// Rows of every table for an audit, read in one REPEATABLE READ transaction.
pub struct AuditSource {
    rt: tokio::runtime::Runtime,
    client: Client,
    pub identity: String,
    pub high_water: Sequence,
    pub tables: Vec<(Schema, Vec<Class>)>,
}

impl AuditSource {
    pub fn open(src: &PgSource, only: &[String]) -> Result<AuditSource> {
        let rt = runtime()?;
        let (client, identity, high_water, tables) = rt.block_on(async {
            let c = src.client("audit").await?;
            let id = src.identity().await?;
            c.batch_execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
                .await
                .map_err(pg_err("cannot begin the audit transaction"))?;
            let flushed: String = c
                .query_one("SELECT pg_current_wal_flush_lsn()::text", &[])
                .await
                .map_err(pg_err("cannot read the WAL position"))?
                .get(0);
            let mut names = publication_tables(&c, &src.publication).await?;
            if !only.is_empty() {
                let want: Vec<String> = only
                    .iter()
                    .map(|t| {
                        if t.contains('.') {
                            t.clone()
                        } else {
                            format!("public.{t}")
                        }
                    })
                    .collect();
                for w in &want {
                    if !names.contains(w) {
                        return Err(Error::usage(format!(
                            "table {w:?} is not in publication {:?}",
                            src.publication
                        )));
                    }
                }
                names = want;
            }
            let mut tables = Vec::new();
            for n in names {
                let (s, t) = split_table(&n);
                tables.push(table_schema(&c, &s, &t).await?);
            }
            Ok::<_, Error>((c, id, sequence(parse_lsn(&flushed)?, 0), tables))
        })?;
        Ok(AuditSource {
            rt,
            client,
            identity,
            high_water,
            tables,
        })
    }

    /// Call `f` with each row of the table in key order. Each row is fetched
    /// in its own `block_on`, so `f` runs outside the async runtime (it may
    /// itself do blocking I/O, such as reading a ClickHouse reply).
    pub fn rows(&self, i: usize, f: &mut dyn FnMut(Row) -> Result<bool>) -> Result<()> {
        let (schema, classes) = &self.tables[i];
        let mut rows = self
            .rt
            .block_on(copy_table(&self.client, schema, classes))?;
        while let Some(r) = self.rt.block_on(rows.next())? {
            if !f(r)? {
                break;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::net::TcpListener;
    use std::sync::mpsc;
    use std::time::Instant;

    /// A source at 127.0.0.1:`port` with `connect_timeout=1` and `query`
    /// appended to the URL; the process environment is not read.
    fn source(port: u16, query: &str) -> PgSource {
        let url = format!("postgres://u@127.0.0.1:{port}/db?connect_timeout=1{query}");
        PgSource {
            conn: PgConn::parse_with_env(&url, &|_| None).unwrap(),
            slot: "s".into(),
            publication: "p".into(),
        }
    }

    /// A peer that accepts connections and holds them open without a word.
    fn silent_peer() -> u16 {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        std::thread::spawn(move || {
            let mut held = Vec::new();
            for s in l.incoming().flatten() {
                held.push(s);
            }
        });
        port
    }

    /// The connecting phases, each run to its end (the stream with a stop
    /// position, as a read that does not follow).
    fn each_phase(src: &PgSource) -> Vec<(&'static str, Result<()>)> {
        let rt = runtime().unwrap();
        let stream_cfg = src
            .conn
            .replication_config(&src.slot, &src.publication)
            .with_stop_lsn(Lsn::from_u64(1));
        vec![
            ("client", rt.block_on(src.client("test")).map(drop)),
            ("identity", rt.block_on(src.identity()).map(drop)),
            (
                "replication_session",
                rt.block_on(src.replication_session()).map(drop),
            ),
            (
                "replication_stream",
                rt.block_on(src.replication_stream(stream_cfg)).map(drop),
            ),
        ]
    }

    #[test]
    fn every_connecting_phase_ends_at_connect_timeout_when_the_peer_is_silent() {
        let port = silent_peer();
        // Plaintext: stuck at startup; require: stuck at the SSLRequest.
        for query in ["", "&sslmode=require"] {
            let src = source(port, query);
            let t0 = Instant::now();
            for (phase, r) in each_phase(&src) {
                let e = r
                    .err()
                    .unwrap_or_else(|| panic!("{phase}{query}: connected to a silent peer"));
                assert_eq!(e.kind(), ErrorKind::Database, "{phase}{query}: {e}");
                assert_eq!(
                    e.message(),
                    format!(
                        "cannot connect to postgres://u@127.0.0.1:{port}/db: no answer within 1 s (connect_timeout); is this a PostgreSQL server?"
                    ),
                    "{phase}{query}"
                );
            }
            assert!(
                t0.elapsed() < Duration::from_secs(4 * 3),
                "four phases of 1 s took {:?}",
                t0.elapsed()
            );
        }
    }

    /// A server without TLS: answers the SSLRequest with `N`, then reports on
    /// `tx` whether the client sent anything more on that connection (a
    /// startup message in plaintext) before closing it.
    fn server_without_tls() -> (u16, mpsc::Receiver<Option<usize>>) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for mut s in l.incoming().flatten() {
                let mut req = [0u8; 8];
                if s.read_exact(&mut req).is_err() || req != [0, 0, 0, 8, 4, 210, 22, 47] {
                    // Not an SSLRequest: the client started in plaintext.
                    let _ = tx.send(Some(8));
                    continue;
                }
                let _ = s.write_all(b"N");
                s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
                let mut rest = [0u8; 64];
                let _ = tx.send(match s.read(&mut rest) {
                    Ok(0) | Err(_) => None,
                    Ok(n) => Some(n),
                });
            }
        });
        (port, rx)
    }

    #[test]
    fn sslmode_require_never_falls_back_to_plaintext() {
        let (port, rx) = server_without_tls();
        let src = source(port, "&sslmode=require");
        assert_eq!(src.conn.sslmode, conn::SslMode::Require);
        for (phase, r) in each_phase(&src) {
            let e = r
                .err()
                .unwrap_or_else(|| panic!("{phase}: connected without TLS"));
            assert!(
                e.message().contains("TLS") || e.message().contains("tls"),
                "{phase}: {e}"
            );
            assert!(!e.message().contains("connect_timeout"), "{phase}: {e}");
            let sent = rx
                .recv_timeout(Duration::from_secs(10))
                .expect("the server saw the connection");
            assert_eq!(
                sent, None,
                "{phase}: the client went on in plaintext after the server refused TLS"
            );
        }
    }
}
