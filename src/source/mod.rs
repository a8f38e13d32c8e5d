//! Sources: where changes come from. One [`Source`] trait, one folder per
//! backend (`sqlite/`, `postgres/`).

pub mod backfill;
pub mod postgres;
pub mod schema_change;
pub mod sqlite;

use crate::error::{Error, Result};
use crate::wire::jsonl::DEFAULT_MAX_LINE_BYTES;
use crate::wire::{Cursor, Event, Row, Schema};
use std::io::Write;
use std::time::Duration;

pub use crate::wire::SourceKind;

/// What `status` reports: the identity, then the source's own figures, in
/// order.
#[derive(Debug, Clone, PartialEq)]
pub struct SourceStatus {
    pub identity: String,
    pub fields: Vec<StatusField>,
}

/// What `verify` found.
#[derive(Debug, Default)]
pub struct Verified {
    /// What differs from a working capture (empty: current).
    pub drift: Vec<String>,
    /// PostgreSQL: each published table's replica identity and what it
    /// means for the stream, as (table, identity, meaning).
    pub replica_identities: Vec<(String, String, String)>,
}

/// One figure of `status`: its value for programs (`--output-format json`)
/// and its text for people.
#[derive(Debug, Clone, PartialEq)]
pub struct StatusField {
    pub name: &'static str,
    pub value: serde_json::Value,
    pub text: String,
}

impl StatusField {
    /// A figure whose text is its value (a string as it is).
    pub fn new(name: &'static str, value: impl Into<serde_json::Value>) -> Self {
        let value = value.into();
        let text = match &value {
            serde_json::Value::String(s) => s.clone(),
            v => v.to_string(),
        };
        StatusField { name, value, text }
    }

    /// A count or position: a JSON number below 2^53 (beyond, a string, as
    /// sequences are in the format).
    pub fn count(name: &'static str, n: u128) -> Self {
        if n < 1 << 53 {
            Self::new(name, n as u64)
        } else {
            Self::new(name, n.to_string())
        }
    }

    /// The same value, said otherwise to people (`2 changes`).
    pub fn with_text(mut self, text: impl Into<String>) -> Self {
        self.text = text.into();
        self
    }
}

/// What `snapshot` is asked for.
#[derive(Debug, Clone, Default)]
pub struct SnapshotRequest {
    /// The tables (default: every captured one).
    pub tables: Vec<String>,
    /// A JSON document instead of JSONL.
    pub json: bool,
    /// Tables copied at once, where the source can (PostgreSQL).
    pub jobs: usize,
    /// How long to wait for a consistent point, where the source must.
    pub slot_timeout: Duration,
}

/// How a following read paces itself.
#[derive(Debug, Clone, Copy)]
pub struct FollowTiming {
    /// How often to look for new changes, where the source is polled (SQLite).
    pub poll: Duration,
    /// While nothing is in flight and the source's position moves on without
    /// changes for us (other tables write), write an empty batch to that
    /// position at most this often, so targets, and the acknowledgement that
    /// follows them, keep up (PostgreSQL: the slot's retained WAL stays
    /// bounded). A server that asks for a reply gets one at once.
    pub idle_batch: Duration,
    /// Reconnects after a transient failure (a broken connection, a server
    /// restarting), before the read fails; each waits `retry_delay`, doubled
    /// per attempt up to 30 s, and a session that starts streaming again
    /// renews the budget.
    pub max_retries: u32,
    pub retry_delay: Duration,
    /// Write a transactional heartbeat into the source this often
    /// (PostgreSQL: `pg_logical_emit_message`), so a database with no
    /// writes at all still moves its slot and lag figures on. Heartbeats are
    /// never events.
    pub heartbeat: Option<Duration>,
    /// PostgreSQL: with nothing at all from the server (no change, no
    /// keepalive, although asked for one) for this long, the connection is
    /// taken for broken and a reconnect follows (as the server's own
    /// `wal_receiver_timeout`). `None`: wait forever.
    pub receive_timeout: Option<Duration>,
    /// Rows one backfill chunk reads (`--backfill-chunk-rows`).
    pub backfill_chunk_rows: u64,
}

/// A function that says which cursor a target durably holds: what
/// `--follow --ack-from-target` acknowledges up to.
pub type HeldCursor = dyn Fn() -> Result<Option<Cursor>>;

/// A source's tables for an audit, read in one consistent view.
pub trait AuditRows {
    /// The source's identity and high water at the view, when capture is
    /// installed.
    fn cursor(&self) -> Option<Cursor>;
    /// The tables, in the order they are audited.
    fn schemas(&self) -> Vec<Schema>;
    /// Call `f` with each row of table `i` in key order (docs/FORMAT.md §9), until it
    /// returns false.
    fn rows(&mut self, i: usize, f: &mut dyn FnMut(Row) -> Result<bool>) -> Result<()>;
}

/// The schemas to audit or snapshot: all, or the named ones, in the order
/// named.
pub fn choose_tables(schemas: Vec<Schema>, tables: &[String]) -> Result<Vec<Schema>> {
    if tables.is_empty() {
        return Ok(schemas);
    }
    tables
        .iter()
        .map(|t| {
            schemas
                .iter()
                .find(|s| &s.table == t)
                .cloned()
                .ok_or_else(|| Error::usage(format!("table {t:?} is not in the source")))
        })
        .collect()
}

/// A database whose changes MoonCDC captures.
///
/// The contract every source keeps:
/// - **Ordering.** `read` writes one batch stream of the changes after a
///   cursor (default: the acknowledged position) in sequence order, up to the
///   high water it saw when it began; `follow` keeps writing batches as
///   changes commit. A batch never splits a source transaction unless a limit
///   forces it.
/// - **Cursors.** A cursor is the position after which the next change comes;
///   a cursor of another source, before the acknowledged position (changes
///   gone) or beyond the high water is refused before anything is written.
/// - **Acknowledgement.** Reading never acknowledges. Changes are discarded
///   only by `ack` (or `follow` with a target whose stored cursor it reads),
///   never beyond the high water, never backwards.
/// - **Snapshots** are consistent with a cursor that hands over exactly to
///   `read --after` it.
/// - **Read-only**: `verify`, `status`, `read`, `snapshot` and `audit_rows`
///   change nothing in the source (a PostgreSQL snapshot's temporary slot
///   disappears with its session).
pub trait Source {
    fn kind(&self) -> SourceKind;
    /// Install capture for the tables named (default: every table with a
    /// key). Returns the identity and the tables newly captured.
    fn init(&self, tables: &[String]) -> Result<(String, Vec<String>)>;
    /// Refuse, before anything is installed, the options of `init` this
    /// source does not take (`--ddl`, `--failover`: PostgreSQL's).
    fn init_options(&self, ddl: bool, failover: bool) -> Result<()> {
        if ddl {
            self.install_ddl()?;
        }
        if failover {
            self.make_failover()?;
        }
        Ok(())
    }
    /// `init --replica-identity`: PostgreSQL's; refused elsewhere.
    fn set_replica_identity(&mut self, args: &[String]) -> Result<()> {
        if args.is_empty() {
            return Ok(());
        }
        Err(Error::usage(
            "--replica-identity is for PostgreSQL sources (a SQLite source's triggers log whole rows)",
        ))
    }
    /// Run a migration (`capture migrate`): SQLite sources only, whose
    /// schema changes go through it; returns what it did.
    fn migrate(&self, _sql: &str) -> Result<Vec<String>> {
        Err(Error::usage(
            "migrate is for SQLite sources (a PostgreSQL source's schema changes reach capture through its publication)",
        ))
    }
    /// Install what describes schema changes in the stream exactly
    /// (`init --ddl`); returns what it did.
    fn install_ddl(&self) -> Result<String> {
        Err(Error::usage(
            "--ddl is for PostgreSQL sources (a SQLite source's schema changes go through mooncdc-capture migrate)",
        ))
    }
    /// `init --no-slot`: install capture but make no slot (PostgreSQL: the
    /// publication and identities on a primary whose standby will hold the
    /// slot).
    fn init_without_slot(&self, _tables: &[String]) -> Result<(String, Vec<String>)> {
        Err(Error::usage(
            "--no-slot is for PostgreSQL sources (capture from a standby: the primary gets the publication, the standby the slot)",
        ))
    }
    /// Make the slot survive a failover to a standby that synchronizes
    /// slots (`init --failover`); returns what it did.
    fn make_failover(&self) -> Result<String> {
        Err(Error::usage(
            "--failover is for PostgreSQL sources (17 or later, with a standby that synchronizes slots)",
        ))
    }
    /// `capture grants --role ROLE`: the SQL that gives a capture role what
    /// it needs (PostgreSQL; docs/POSTGRES.md, "Rights").
    fn grants(&self, _role: &str) -> Result<String> {
        Err(Error::usage(
            "grants is for PostgreSQL sources (a SQLite source has no roles: whoever may open the file may capture)",
        ))
    }
    /// Ask the capture that follows this source to bring the tables' current
    /// rows into the stream (`all`: every captured table); returns the
    /// tables once the requests are recorded (docs/BACKFILL.md).
    fn backfill(&self, tables: &[String], all: bool, resync: bool) -> Result<Vec<String>>;
    /// What differs from what this version would install (empty: current),
    /// and what the source says of its tables.
    fn verify(&self) -> Result<Verified>;
    /// Bring capture up to date; returns what it did, one line each.
    fn upgrade(&self) -> Result<Vec<String>>;
    fn status(&self) -> Result<SourceStatus>;
    /// Discard changes through `cursor`; returns where the source now stands.
    fn ack(&self, cursor: &Cursor) -> Result<String>;
    fn read(&self, after: Option<&Cursor>, limits: ReadLimits, out: &mut dyn Write) -> Result<()>;
    fn follow(
        &self,
        after: Option<&Cursor>,
        limits: ReadLimits,
        timing: FollowTiming,
        held: Option<&HeldCursor>,
        out: &mut dyn Write,
    ) -> Result<()>;
    /// Write a snapshot; returns the rows written.
    fn snapshot(
        &self,
        req: &SnapshotRequest,
        out: &mut dyn Write,
        progress: &mut dyn Tally,
    ) -> Result<u64>;
    /// The tables for an audit (all, or the ones named).
    fn audit_rows(&self, tables: &[String]) -> Result<Box<dyn AuditRows>>;
}

/// What a long read reports as it goes: the rows so far and, where the
/// source can say cheaply, how many there will be.
pub trait Tally {
    /// Whether anybody looks: a total is worth its query only then.
    fn wants_total(&self) -> bool {
        false
    }
    /// The rows there will be (exact or the catalog's estimate).
    fn total(&mut self, _rows: u64) {}
    /// The rows so far.
    fn count(&mut self, rows: u64);
    /// A table written whole, with its rows.
    fn table_done(&mut self, _table: &str, _rows: u64) {}
}

/// A tally nobody watches.
pub struct NoTally;

impl Tally for NoTally {
    fn count(&mut self, _rows: u64) {}
}

/// Limits of one read, the same for every source: stop after `max_events`
/// events, or before the events written would exceed `max_bytes` (at least
/// one event is written); the batch then ends at the last event.
#[derive(Debug, Clone, Copy, Default)]
pub struct ReadLimits {
    pub max_events: Option<u64>,
    pub max_bytes: Option<u64>,
    /// The longest event line a read writes; default: the line cap every
    /// reading tool applies by default, so what capture writes, apply reads.
    pub max_line_bytes: Option<u64>,
    /// PostgreSQL: read with pgoutput protocol 1 (the server holds a large
    /// transaction until it commits) instead of the highest the server has
    /// with streaming (`--pgoutput-protocol 1`).
    pub pgoutput_v1: bool,
    /// PostgreSQL: what streamed transactions in progress may hold
    /// (`--spool-memory`, `--max-spool-bytes`).
    pub stream_budget: postgres::StreamBudget,
    /// PostgreSQL: the prefixes of the logical messages written as
    /// `message` records (`--messages`, docs/FORMAT.md "Message records");
    /// none by default.
    pub messages: &'static [String],
}

impl ReadLimits {
    /// The longest line a read writes, and where that limit comes from.
    fn line_cap(&self) -> (u64, &'static str) {
        match self.max_line_bytes {
            Some(cap) => (cap, "given by --max-line-bytes"),
            None => (
                DEFAULT_MAX_LINE_BYTES,
                "that mooncdc-apply and the stream tools read by default",
            ),
        }
    }

    /// Refuse an event whose line is longer than the line cap, naming it, so
    /// a huge value stops capture with a way forward instead of a stream that
    /// no tool downstream will read.
    /// `line` is the event's JSONL line with its newline, which the readers'
    /// line cap does not count.
    pub fn check_line(&self, line: &[u8], e: &Event) -> Result<()> {
        let len = line.strip_suffix(b"\n").unwrap_or(line).len() as u64;
        let (cap, which) = self.line_cap();
        if len > cap {
            return Err(Error::data(format!(
                "event {} ({} on table {:?}) encodes to a line of {len} bytes, over the line limit of {cap} bytes {which}; read it with --max-line-bytes N (N ≥ {len}) and give every tool that reads the stream the same --max-line-bytes N",
                e.sequence,
                e.operation.as_str(),
                e.table
            )));
        }
        Ok(())
    }

    /// Refuse a logical message whose `message` record would be longer than
    /// the line cap, naming its prefix and LSN, before anything of it is
    /// written (the cursor stays before it).
    pub fn check_message(&self, m: &crate::wire::LogicalMessage, lsn: u64) -> Result<()> {
        let len = crate::wire::batch::message_line_len(m) - 1;
        let (cap, which) = self.line_cap();
        if len > cap {
            return Err(Error::data(format!(
                "the logical message with prefix {:?} at LSN {:X}/{:X} ({} bytes of content) encodes to a line of {len} bytes, over the line limit of {cap} bytes {which}; nothing of it was written and the cursor stays before it: read it with --max-line-bytes N (N ≥ {len}) and give every tool that reads the stream the same --max-line-bytes N, or leave its prefix out of --messages",
                m.prefix,
                lsn >> 32,
                lsn & 0xffff_ffff,
                match &m.content {
                    crate::wire::Value::Text(s) => s.len(),
                    crate::wire::Value::Blob(b) => b.len(),
                    _ => 0,
                },
            )));
        }
        Ok(())
    }
}
