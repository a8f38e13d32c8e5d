//! `mooncdc-capture`: its options, subcommands and `read`'s options.

use super::*;

/// A cursor given on the command line: JSON text or a file holding it.
#[derive(Debug, Clone, Args)]
pub struct AfterArgs {
    /// Start after this cursor (JSON: {"source":"…","sequence":"…"}); default: the acknowledged position
    #[arg(long, value_name = "CURSOR", conflicts_with = "after_file")]
    pub after: Option<String>,
    /// Start after the cursor in this file
    #[arg(long, value_name = "FILE")]
    pub after_file: Option<PathBuf>,
}

/// PostgreSQL source options.
#[derive(Debug, Clone, Args)]
pub struct PgArgs {
    /// PostgreSQL: the replication slot
    #[arg(long, value_name = "NAME", default_value = "mooncdc_main")]
    pub slot: String,
    /// PostgreSQL: the publication
    #[arg(long, value_name = "NAME", default_value = "mooncdc_main")]
    pub publication: String,
}

/// Options of `read`, the default subcommand.
#[derive(Debug, Clone, Args)]
pub struct ReadArgs {
    /// The source database URL (sqlite:PATH or postgres://…)
    #[arg(long, value_name = "URL")]
    pub source: Option<String>,
    #[command(flatten)]
    pub after: AfterArgs,
    /// Stop after N events (the batch then ends at the last event written)
    #[arg(long, value_name = "N")]
    pub max_events: Option<u64>,
    /// Stop before the events written exceed B bytes (at least one event is written)
    #[arg(long, value_name = "B")]
    pub max_bytes: Option<u64>,
    /// Refuse an event whose line is longer than N bytes (default 64 MiB, the line cap readers apply by default)
    #[arg(long, value_name = "N")]
    pub max_line_bytes: Option<u64>,
    /// Keep writing batches as changes commit
    #[arg(long)]
    pub follow: bool,
    /// With --follow: how often to look for new changes, in milliseconds
    #[arg(long, value_name = "N", default_value_t = 1000, requires = "follow")]
    pub poll_ms: u64,
    /// With --follow: while the captured tables are idle but the source moves on, write an empty batch advancing the cursor at most every N milliseconds (PostgreSQL; keeps the slot's retained WAL bounded)
    #[arg(long, value_name = "N", default_value_t = 10_000, requires = "follow")]
    pub idle_batch_ms: u64,
    /// With --follow: write a transactional heartbeat into the source every N milliseconds (PostgreSQL: pg_logical_emit_message; never an event), so an idle database keeps its slot and lag figures moving
    #[arg(long, value_name = "N", requires = "follow")]
    pub heartbeat_ms: Option<u64>,
    /// With --follow: reconnect after a broken connection or a restarting server at most N times in a row (PostgreSQL)
    #[arg(long, value_name = "N", default_value_t = 10, requires = "follow")]
    pub max_retries: u32,
    /// With --follow: wait this long before the first reconnect, doubled each time up to 30 s
    #[arg(long, value_name = "MS", default_value_t = 1000, requires = "follow")]
    pub retry_delay_ms: u64,
    /// With --follow: reconnect when nothing (no change, no keepalive) came from the server for this long, in milliseconds; 0: never (PostgreSQL)
    #[arg(long, value_name = "MS", default_value_t = 60_000, requires = "follow")]
    pub receive_timeout_ms: u64,
    /// Messages on standard error as plain text or JSON lines (for a supervisor or journald)
    #[arg(long, value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
    /// With --follow: serve Prometheus metrics on /metrics and health on /livez and /readyz at ADDR:PORT (e.g. 127.0.0.1:9187)
    #[arg(long, value_name = "ADDR:PORT", requires = "follow")]
    pub metrics_listen: Option<String>,
    /// With --metrics-listen: /readyz says 503 after this long without progress
    #[arg(long, value_name = "MS", default_value_t = 300_000)]
    pub stall_timeout_ms: u64,
    /// With --follow: rows each backfill chunk reads (mooncdc-capture backfill)
    #[arg(long, value_name = "N", default_value_t = 4096, requires = "follow")]
    pub backfill_chunk_rows: u64,
    /// With --follow: acknowledge up to the cursor this target (sqlite: or clickhouse:) durably holds
    #[arg(long, value_name = "URL", requires = "follow")]
    pub ack_from_target: Option<String>,
    /// PostgreSQL: the pgoutput protocol: auto, the highest the server has with large transactions sent as they happen (2 on 14 and 15, 4 on 16+), or 1, where the server holds each transaction until it commits
    #[arg(long, value_enum, value_name = "V", default_value_t = PgoutputProtocol::Auto)]
    pub pgoutput_protocol: PgoutputProtocol,
    /// PostgreSQL: bytes that large transactions in progress hold in memory, all together, until they commit; the rest waits in spool files
    #[arg(long, value_name = "B", default_value_t = crate::source::postgres::DEFAULT_STREAM_MEMORY)]
    pub spool_memory: usize,
    /// PostgreSQL: fail when large transactions in progress hold more than B bytes in all (memory and spool files); default: as much as the spool folder has room for
    #[arg(long, value_name = "B")]
    pub max_spool_bytes: Option<u64>,
    /// PostgreSQL: the folder for the spool files of large transactions in progress (default: TMPDIR, else /tmp)
    #[arg(long, value_name = "DIR")]
    pub spool_dir: Option<PathBuf>,
    /// PostgreSQL: write the logical messages (pg_logical_emit_message) of this prefix as message records; repeatable (prefixes starting with mooncdc are the capture's own)
    #[arg(long = "messages", value_name = "PREFIX")]
    pub messages: Vec<String>,
    #[command(flatten)]
    pub pg: PgArgs,
}

/// Install, check and read change capture.
///
/// Without a subcommand, reads: writes one batch stream of the changes after the
/// cursor to standard output. Reading never acknowledges.
#[derive(Debug, Parser)]
#[command(
    name = "mooncdc-capture",
    version,
    args_conflicts_with_subcommands = true,
    after_help = "Example: mooncdc-capture --source sqlite:app.db --after \"$(mooncdc-apply cursor --target sqlite:proj.db)\" | mooncdc-apply --target sqlite:proj.db\n\n\
Exit status: 0 success, 1 failure (verify: drift only), 2 usage (verify: also trouble)."
)]
pub struct CaptureArgs {
    /// No messages but errors and warnings on standard error (every subcommand)
    #[arg(long, short = 'q', global = true)]
    pub quiet: bool,
    /// read/follow: one line per batch written on standard error (its end, its events)
    #[arg(long, short = 'v', global = true)]
    pub verbose: bool,
    #[command(subcommand)]
    pub command: Option<CaptureCommand>,
    #[command(flatten)]
    pub read: ReadArgs,
}

// `Read` holds every read option: parsed once per run, its size is no cost.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, clap::Subcommand)]
pub enum CaptureCommand {
    /// Install capture: change log, metadata and triggers (default: every user table)
    Init {
        /// The source database URL (sqlite:PATH or postgres://…)
        #[arg(long, value_name = "URL")]
        source: String,
        /// Capture only this table (repeatable; PostgreSQL: schema.table)
        #[arg(long = "table", value_name = "NAME")]
        tables: Vec<String>,
        /// PostgreSQL: also install the DDL trigger, so renamed columns are
        /// carried (needs the right to create event triggers)
        #[arg(long)]
        ddl: bool,
        /// PostgreSQL 17+: make the slot a failover slot, which a standby
        /// with sync_replication_slots keeps, so capture goes on after the
        /// standby is promoted (an existing slot is altered)
        #[arg(long)]
        failover: bool,
        /// PostgreSQL: make the publication and replica identities but no
        /// slot (on a primary whose standby will hold the slot: run init
        /// against the standby next)
        #[arg(long, conflicts_with = "failover")]
        no_slot: bool,
        /// PostgreSQL: the replica identity to set, `full` (the default:
        /// updates and deletes carry the whole old row) or `default` (the
        /// key only, and unchanged TOASTed values unsent: far less WAL; the
        /// targets fill them); for every table this init sets up, or one
        /// table as TABLE=MODE (repeatable)
        #[arg(long, value_name = "MODE")]
        replica_identity: Vec<String>,
        #[command(flatten)]
        pg: PgArgs,
    },
    /// Check that capture is installed and current; exit 1 on drift
    Verify {
        /// The source database URL
        #[arg(long, value_name = "URL")]
        source: String,
        /// Output format: each table's replica identity (PostgreSQL) and the
        /// verdict on standard output, drift lines on standard error; or one
        /// JSON object on standard output
        #[arg(long, value_enum, default_value_t = TextOrJson::Text)]
        output_format: TextOrJson,
        #[command(flatten)]
        pg: PgArgs,
    },
    /// Rebuild capture for the current version and schema, keeping unacknowledged changes
    Upgrade {
        /// The source database URL
        #[arg(long, value_name = "URL")]
        source: String,
        #[command(flatten)]
        pg: PgArgs,
    },
    /// SQLite: run the application's schema change and rebuild capture in one transaction (so DROP COLUMN works and no change is logged with a stale column list)
    Migrate {
        /// The source database URL (sqlite:PATH)
        #[arg(long, value_name = "URL")]
        source: String,
        /// The SQL to run, from a file
        #[arg(long, value_name = "FILE", conflicts_with = "statements")]
        sql: Option<PathBuf>,
        /// The SQL to run, given after `--`
        #[arg(last = true, value_name = "SQL")]
        statements: Vec<String>,
    },
    /// Bring tables' current rows into the stream, chunk by chunk, through the capture that follows this source
    Backfill {
        /// The source database URL (sqlite:PATH or postgres://…)
        #[arg(long, value_name = "URL")]
        source: String,
        /// Backfill this table (repeatable; PostgreSQL: schema.table)
        #[arg(long = "table", value_name = "NAME", required_unless_present = "all")]
        tables: Vec<String>,
        /// Backfill every captured table (a new pipeline's initial load)
        #[arg(long, conflicts_with = "tables")]
        all: bool,
        /// Re-read a table the targets hold already (the repair for what an audit found)
        #[arg(long)]
        resync: bool,
        #[command(flatten)]
        pg: PgArgs,
    },
    /// PostgreSQL: print the SQL that gives a capture role what snapshot, follow, audit and backfill need on this publication's tables
    Grants {
        /// The source database URL
        #[arg(long, value_name = "URL")]
        source: String,
        /// The capture role the script is for
        #[arg(long, value_name = "ROLE")]
        role: String,
        #[command(flatten)]
        pg: PgArgs,
    },
    /// Print identity, acknowledged position, high water and backlog
    Status {
        /// The source database URL
        #[arg(long, value_name = "URL")]
        source: String,
        /// Output format: `key: value` lines, or one JSON object (numbers as numbers)
        #[arg(long, value_enum, default_value_t = TextOrJson::Text)]
        output_format: TextOrJson,
        #[command(flatten)]
        pg: PgArgs,
    },
    /// Acknowledge (and discard) changes through a position
    Ack {
        /// The source database URL
        #[arg(long, value_name = "URL")]
        source: String,
        /// Acknowledge through this sequence
        #[arg(long, value_name = "SEQ", group = "position")]
        through: Option<String>,
        /// Acknowledge through the cursor in this file
        #[arg(long, value_name = "FILE", group = "position")]
        cursor_file: Option<PathBuf>,
        /// Acknowledge through this cursor (JSON)
        #[arg(long, value_name = "JSON", group = "position")]
        cursor: Option<String>,
        #[command(flatten)]
        pg: PgArgs,
    },
    /// Write one batch stream of the changes after a cursor (the default)
    Read(ReadArgs),
}
