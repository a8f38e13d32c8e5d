//! The PostgreSQL source: logical replication with the `pgoutput` plugin.
//!
//! - `init` creates (or extends) a publication, sets `REPLICA IDENTITY FULL`
//!   on its tables (full before images; unchanged TOAST values are filled from
//!   the old row and never become NULL) and creates the slot.
//! - A position is `commit_lsn × 2^64 + ordinal` (docs/FORMAT.md §3): ordinals number
//!   a transaction's row changes from 1. A batch that ends at a transaction
//!   boundary ends at `(commit_lsn + 1) × 2^64`, i.e. "everything committed
//!   before commit_lsn + 1"; a read that catches up ends at the WAL flush
//!   position it saw at its start. The slot is restarted from `sequence >> 64`.
//! - Large transactions: pgoutput 2 (14–15) or 4 (16+) with streaming; a
//!   transaction in progress waits in a spool until its commit
//!   (`streamed.rs`, docs/POSTGRES.md "Large transactions").
//! - `read` streams from the slot through a replication connection, never
//!   acknowledging: its standby status reports only the slot's own confirmed
//!   position. `ack` advances the slot (never backwards, never past what is given).
//! - `snapshot` creates a temporary slot with an exported snapshot, keeps that
//!   session idle, and copies each table in a REPEATABLE READ session that
//!   imports the snapshot; its cursor is the temporary slot's consistent point,
//!   so capture after it hands over exactly.
//!
//! Identity: `postgres:<system identifier>/<database>/<slot>`.

mod admin;
mod audit;
mod backfill;
mod batch_out;
mod catalog;
mod ddl_state;
mod ddl_trigger;
mod decode;
mod identity;
#[cfg(test)]
mod model_test;
pub mod pgoutput;
mod publication;
mod reconnect;
mod replication;
mod rights;
mod session;
mod snapshot;
mod standby;
mod status;
mod stream;
mod streamed;
mod tuple;
pub use streamed::{Budget as StreamBudget, DEFAULT_MEMORY as DEFAULT_STREAM_MEMORY};

pub use crate::pg::{conn, types};
pub use crate::pg::{connect_client, pg_err, runtime, select_in_key_order, CopyRows};
use crate::pg::{server_version, tls};
pub use audit::AuditSource;
pub use catalog::table_schema;
pub use identity::{IdentityChoice, IdentityMode};
pub use publication::{publication_detail, publication_tables, PubTable};

use crate::error::{Cause, Error, ErrorKind, Result};
use crate::source::{
    AuditRows, FollowTiming, HeldCursor, ReadLimits, SnapshotRequest, Source, SourceKind,
    SourceStatus,
};
use crate::wire::{Cursor, Sequence};
use conn::PgConn;
use replication::ReplError;
use std::io::Write;

/// Default slot and publication names.
pub const DEFAULT_SLOT: &str = "mooncdc_main";
pub const DEFAULT_PUBLICATION: &str = "mooncdc_main";

/// What names a PostgreSQL source: connection, slot and publication.
#[derive(Debug, Clone)]
pub struct PgSource {
    pub conn: PgConn,
    pub slot: String,
    pub publication: String,
    /// What `init` sets (`--replica-identity`).
    pub replica_identity: IdentityChoice,
}

fn repl_err(what: &str) -> impl Fn(ReplError) -> Error + '_ {
    move |e| {
        let text = e.to_string();
        Error::new(ErrorKind::Database, what).with_source(Cause { text, inner: e })
    }
}

/// Whether a following read should reconnect after `e`: the connection
/// broke, timed out, or the server is shutting down or starting up
/// (SQLSTATE 57P01, 57P02, 57P03), or the slot is still held by the
/// session that broke (55006, until the server notices). Refusals
/// (authentication, a missing or invalidated slot, a changed system, a
/// protocol error) are not retried.
pub(super) fn is_transient(e: &Error) -> bool {
    const RESTARTING: [&str; 4] = ["57P01", "57P02", "57P03", "55006"];
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        if let Some(c) = s.downcast_ref::<Cause<ReplError>>() {
            return match &c.inner {
                ReplError::Io(_) => true,
                ReplError::Server { code, .. } => RESTARTING.contains(&code.as_str()),
                ReplError::Tls(_) | ReplError::Protocol(_) => false,
            };
        }
        if let Some(c) = s.downcast_ref::<Cause<tokio_postgres::Error>>() {
            let pe = &c.inner;
            return match pe.as_db_error() {
                Some(db) => RESTARTING.contains(&db.code().code()),
                None => {
                    pe.is_closed()
                        || std::error::Error::source(pe)
                            .is_some_and(|s| s.downcast_ref::<std::io::Error>().is_some())
                }
            };
        }
        // A phase of connecting that timed out, or no server of a
        // multi-host string that suits (a standby being promoted).
        if let Some(c) = s.downcast_ref::<Cause<std::io::Error>>() {
            return matches!(
                c.inner.kind(),
                std::io::ErrorKind::TimedOut | std::io::ErrorKind::NotConnected
            );
        }
        source = s.source();
    }
    false
}

/// The SQLSTATE of the server error behind `e`, if a server error is.
pub(super) fn sqlstate(e: &Error) -> Option<String> {
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        if let Some(c) = s.downcast_ref::<Cause<tokio_postgres::Error>>() {
            return c.inner.as_db_error().map(|d| d.code().code().to_string());
        }
        source = s.source();
    }
    None
}

fn io_out(e: std::io::Error) -> Error {
    Error::io("cannot write output", e)
}

/// The end of the WAL a reader can have: the flushed WAL on a primary, the
/// replayed WAL on a standby (where capture may run, PostgreSQL 16+).
pub(super) const WAL_END: &str =
    "(CASE WHEN pg_is_in_recovery() THEN pg_last_wal_replay_lsn() ELSE pg_current_wal_flush_lsn() END)";

/// Split a stream table name or a `--table` argument into (schema, table):
/// `schema.table`, a part quoted when it holds a dot or a quote
/// (docs/FORMAT.md, "Table names"); no schema means `public`.
pub fn split_table(name: &str) -> Result<(String, String)> {
    match crate::wire::names::split(name) {
        Ok((s, t)) => Ok((s.unwrap_or_else(|| "public".to_string()), t)),
        Err(e) => Err(Error::data(e)),
    }
}

/// The stream name of a `--table` argument (`t` is `public.t`).
pub fn table_arg(name: &str) -> Result<String> {
    let (s, t) = split_table(name)?;
    Ok(crate::wire::names::join(&s, &t))
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

fn lsn_text(lsn: u64) -> String {
    format!("{:X}/{:X}", lsn >> 32, lsn & 0xffff_ffff)
}

fn parse_lsn(s: &str) -> Result<u64> {
    let bad = || Error::data(format!("bad LSN {s:?} from the server"));
    let (hi, lo) = s.split_once('/').ok_or_else(bad)?;
    let hi = u32::from_str_radix(hi, 16).map_err(|_| bad())?;
    let lo = u32::from_str_radix(lo, 16).map_err(|_| bad())?;
    Ok(((hi as u64) << 32) | lo as u64)
}

/// The sequence of position `lsn` with `ordinal`.
pub fn sequence(lsn: u64, ordinal: u64) -> Sequence {
    ((lsn as u128) << 64) | ordinal as u128
}

impl PgSource {
    /// A source over parsed connection settings, with its slot and
    /// publication (default `mooncdc_main` both).
    pub fn new(conn: PgConn, slot: Option<&str>, publication: Option<&str>) -> Result<Self> {
        let slot = slot.unwrap_or(DEFAULT_SLOT).to_string();
        check_slot_name(&slot)?;
        Ok(PgSource {
            conn,
            slot,
            publication: publication.unwrap_or(DEFAULT_PUBLICATION).to_string(),
            replica_identity: IdentityChoice::default(),
        })
    }
}

impl Source for PgSource {
    fn kind(&self) -> SourceKind {
        SourceKind::Postgres
    }
    fn init(&self, tables: &[String]) -> Result<(String, Vec<String>)> {
        PgSource::init(self, tables)
    }
    fn install_ddl(&self) -> Result<String> {
        PgSource::install_ddl(self)
    }
    fn make_failover(&self) -> Result<String> {
        PgSource::make_failover(self)
    }
    fn init_options(&self, _ddl: bool, _failover: bool) -> Result<()> {
        Ok(())
    }
    fn set_replica_identity(&mut self, args: &[String]) -> Result<()> {
        self.replica_identity = IdentityChoice::parse(args)?;
        Ok(())
    }
    fn init_without_slot(&self, tables: &[String]) -> Result<(String, Vec<String>)> {
        PgSource::init_with(self, tables, false)
    }
    fn verify(&self) -> Result<crate::source::Verified> {
        PgSource::verify(self)
    }
    fn backfill(&self, tables: &[String], all: bool, resync: bool) -> Result<Vec<String>> {
        PgSource::backfill(self, tables, all, resync)
    }
    fn grants(&self, role: &str) -> Result<String> {
        PgSource::grants(self, role)
    }
    fn upgrade(&self) -> Result<Vec<String>> {
        // Replica identity and the slot, for the tables already published;
        // no table is added.
        let tables = PgSource::upgrade(self)?;
        Ok(vec![format!(
            "replica identity and slot checked for {}",
            tables.join(", ")
        )])
    }
    fn status(&self) -> Result<SourceStatus> {
        PgSource::status(self)
    }
    fn ack(&self, cursor: &Cursor) -> Result<String> {
        let lsn = PgSource::ack(self, cursor)?;
        Ok(format!("slot confirmed through LSN {}", lsn_text(lsn)))
    }
    fn read(&self, after: Option<&Cursor>, limits: ReadLimits, out: &mut dyn Write) -> Result<()> {
        PgSource::read(self, after, limits, out).map(|_| ())
    }
    fn follow(
        &self,
        after: Option<&Cursor>,
        limits: ReadLimits,
        timing: FollowTiming,
        held: Option<&HeldCursor>,
        out: &mut dyn Write,
    ) -> Result<()> {
        PgSource::follow(self, after, limits, timing, held, out).map(|_| ())
    }
    fn snapshot(
        &self,
        req: &SnapshotRequest,
        out: &mut dyn Write,
        progress: &mut dyn crate::source::Tally,
    ) -> Result<u64> {
        PgSource::snapshot(
            self,
            &req.tables,
            req.json,
            req.jobs,
            req.slot_timeout,
            out,
            progress,
        )
    }
    fn audit_rows(&self, tables: &[String]) -> Result<Box<dyn AuditRows>> {
        Ok(Box::new(AuditSource::open(self, tables)?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use replication::StartOptions;
    use std::io::{Read, Write};
    use std::net::TcpListener;
    use std::sync::mpsc;
    use std::time::{Duration, Instant};

    /// A source at 127.0.0.1:`port` with `connect_timeout=1` and `query`
    /// appended to the URL; the process environment is not read.
    fn source(port: u16, query: &str) -> PgSource {
        let url = format!("postgres://u@127.0.0.1:{port}/db?connect_timeout=1{query}");
        PgSource {
            conn: PgConn::parse_with_env(&url, &|_| None).unwrap(),
            slot: "s".into(),
            publication: "p".into(),
            replica_identity: IdentityChoice::default(),
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
        vec![
            ("client", rt.block_on(src.client("test")).map(drop)),
            ("identity", rt.block_on(src.identity()).map(drop)),
            (
                "replication_session",
                rt.block_on(src.replication_session()).map(drop),
            ),
            (
                "replication_stream",
                rt.block_on(src.replication_stream(
                    1,
                    1,
                    StartOptions {
                        version: 1,
                        streaming: false,
                        messages: false,
                    },
                ))
                .map(drop),
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
                    e.full_message(),
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

    /// A peer that accepts connections, holds them open without a word, and
    /// counts them.
    fn counting_silent_peer() -> (u16, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let seen = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let count = seen.clone();
        std::thread::spawn(move || {
            let mut held = Vec::new();
            for s in l.incoming().flatten() {
                count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                held.push(s);
            }
        });
        (port, seen)
    }

    /// Each host of a multi-host string has its own connect timeout, as in
    /// libpq: a first host that accepts and never answers does not use up
    /// the second's, and the error names what each host did.
    #[test]
    fn each_host_has_its_own_connect_timeout_and_its_own_error() {
        let (first, seen_first) = counting_silent_peer();
        let (second, seen_second) = counting_silent_peer();
        let url = format!("postgres://u@127.0.0.1:{first},127.0.0.1:{second}/db?connect_timeout=1");
        let src = PgSource {
            conn: PgConn::parse_with_env(&url, &|_| None).unwrap(),
            slot: "s".into(),
            publication: "p".into(),
            replica_identity: IdentityChoice::default(),
        };
        let rt = runtime().unwrap();
        let t0 = Instant::now();
        let e = rt
            .block_on(src.replication_session())
            .map(drop)
            .expect_err("two silent peers");
        let took = t0.elapsed();
        assert_eq!(seen_first.load(std::sync::atomic::Ordering::SeqCst), 1);
        assert_eq!(
            seen_second.load(std::sync::atomic::Ordering::SeqCst),
            1,
            "the second host was tried: {e}"
        );
        let text = e.full_message();
        for port in [first, second] {
            assert!(
                text.contains(&format!("127.0.0.1:{port}: no answer within 1 s")),
                "{text}"
            );
        }
        assert!(
            took >= Duration::from_secs(2) && took < Duration::from_secs(6),
            "{took:?}"
        );
        assert!(is_transient(&e), "a follower retries: {text}");
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
                e.full_message().contains("TLS") || e.full_message().contains("tls"),
                "{phase}: {e}"
            );
            assert!(
                !e.full_message().contains("connect_timeout"),
                "{phase}: {e}"
            );
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
