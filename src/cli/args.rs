//! The command-line definitions of every tool, in one place, so that the
//! binaries, the man pages and the shell completions come from the same text.

use clap::{Args, CommandFactory, Parser, ValueEnum};
use std::path::PathBuf;

mod pages;
pub use pages::{commands, man_sections, sub_man_sections, with_sub_help};

/// Batch output formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Default)]
pub enum Format {
    /// JSON lines (`mooncdc.jsonl.v1`): header, events, commit
    #[default]
    Jsonl,
    /// One JSON document per batch (`mooncdc.batch.v1`)
    Json,
    /// A view for people and jq, never an input: one object per event, rows
    /// as {column: value} with natural JSON values
    Objects,
}

/// Text for people, or one JSON object for programs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Default)]
pub enum TextOrJson {
    #[default]
    Text,
    Json,
}

/// Snapshot output formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Default)]
pub enum SnapshotFormat {
    /// JSON lines (`mooncdc.snapshot-jsonl.v1`): header, rows, commit
    #[default]
    Jsonl,
    /// One JSON document (`mooncdc.snapshot.v1`)
    Json,
}

/// Input limits, on every tool that reads JSONL.
#[derive(Debug, Clone, Args)]
pub struct LimitArgs {
    /// Refuse a line longer than N bytes (default 64 MiB; a JSON document counts as one line)
    #[arg(long, value_name = "N")]
    pub max_line_bytes: Option<u64>,
    /// Refuse an input (each file, or standard input) longer than N bytes
    #[arg(long, value_name = "N")]
    pub max_input_bytes: Option<u64>,
}

macro_rules! AFTER_HELP_TEXT {
    () => {
        "Input: the files given, or standard input when none (or -). \
The format (JSONL or JSON batch) is detected. \
Exit status: 0 success, 1 bad data or failed operation, 2 usage."
    };
}

/// Cut a batch stream into batches of at most N events and/or B bytes.
///
/// The pieces cover exactly the same interval as the input, contiguously. Without
/// --output-dir they are written as one batch stream to standard output; with it,
/// each piece goes to its own file, written atomically, and the paths are printed.
#[derive(Debug, Parser)]
#[command(name = "mooncdc-split", version, after_help = concat!("Example: mooncdc-split --max-events 10000 --output-dir out big.jsonl\n\n", AFTER_HELP_TEXT!()))]
pub struct SplitArgs {
    /// No messages but errors and warnings on standard error
    #[arg(long, short = 'q')]
    pub quiet: bool,
    /// What was split, on standard error at the end: batches in, pieces out, events, the time
    #[arg(long, short = 'v')]
    pub verbose: bool,
    /// At most N events per batch
    #[arg(long, value_name = "N")]
    pub max_events: Option<u64>,
    /// At most B bytes per batch written as JSONL (a single larger event gets its own batch)
    #[arg(long, value_name = "B")]
    pub max_bytes: Option<u64>,
    /// Write one file per batch into DIR, named P-<start>-<end>.jsonl (or .json)
    #[arg(long, value_name = "DIR")]
    pub output_dir: Option<PathBuf>,
    /// File name prefix with --output-dir (a name, not a path)
    #[arg(
        long,
        value_name = "P",
        default_value = "batch",
        requires = "output_dir",
        value_parser = file_name_prefix
    )]
    pub prefix: String,
    /// Output format
    #[arg(long, value_enum, default_value_t = Format::Jsonl)]
    pub output_format: Format,
    /// Hold the part of a batch past its first 8 MiB in a temporary file in DIR until the batch's commit is checked (default: TMPDIR, else /tmp; room for the largest batch)
    #[arg(long, value_name = "DIR")]
    pub spool_dir: Option<PathBuf>,
    #[command(flatten)]
    pub limits: LimitArgs,
    /// Input files (standard input when none, or -)
    #[arg(value_name = "FILE")]
    pub files: Vec<PathBuf>,
}

/// Join contiguous batches of one source into one batch.
///
/// Inputs may come in any order: they are ordered by start. A gap, an overlap or a
/// second source is an error. With one input, re-encodes it canonically.
#[derive(Debug, Parser)]
#[command(name = "mooncdc-merge", version, after_help = concat!("Example: mooncdc-merge out/*.jsonl > whole.jsonl\n\n", AFTER_HELP_TEXT!()))]
pub struct MergeArgs {
    /// No messages but errors and warnings on standard error
    #[arg(long, short = 'q')]
    pub quiet: bool,
    /// What was merged, on standard error at the end: batches in, events, the time
    #[arg(long, short = 'v')]
    pub verbose: bool,
    /// Output format
    #[arg(long, value_enum, default_value_t = Format::Jsonl)]
    pub output_format: Format,
    /// Write the merged batch to FILE (atomically) instead of standard output (- is standard output)
    #[arg(long, short = 'o', value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// Hold the part of a batch past its first 8 MiB in a temporary file in DIR until the batch's commit is checked (default: TMPDIR, else /tmp; room for the largest batch)
    #[arg(long, value_name = "DIR")]
    pub spool_dir: Option<PathBuf>,
    #[command(flatten)]
    pub limits: LimitArgs,
    /// Input files (standard input when none, or -)
    #[arg(value_name = "FILE")]
    pub files: Vec<PathBuf>,
}

/// Remove intermediate changes of the same row within each batch.
///
/// For final-state projection, never for audit history. Needs each table's key:
/// from the stream's headers, or from --schema.
#[derive(Debug, Parser)]
#[command(name = "mooncdc-compact", version, after_help = concat!("Example: mooncdc-capture --source sqlite:app.db | mooncdc-compact | mooncdc-apply --target sqlite:proj.db\n\n", AFTER_HELP_TEXT!()))]
pub struct CompactArgs {
    /// No messages but errors and warnings on standard error
    #[arg(long, short = 'q')]
    pub quiet: bool,
    /// What was compacted, on standard error at the end: batches, events in and out, the time
    #[arg(long, short = 'v')]
    pub verbose: bool,
    /// Schemas for tables the stream's headers do not describe: a snapshot file or a JSON array of schemas
    #[arg(long, value_name = "FILE")]
    pub schema: Option<PathBuf>,
    /// Output format
    #[arg(long, value_enum, default_value_t = Format::Jsonl)]
    pub output_format: Format,
    /// Hold the part of a batch past its first 8 MiB in a temporary file in DIR until the batch's commit is checked (default: TMPDIR, else /tmp; room for the largest batch)
    #[arg(long, value_name = "DIR")]
    pub spool_dir: Option<PathBuf>,
    #[command(flatten)]
    pub limits: LimitArgs,
    /// Input files (standard input when none, or -)
    #[arg(value_name = "FILE")]
    pub files: Vec<PathBuf>,
}

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
        #[command(flatten)]
        pg: PgArgs,
    },
    /// Check that capture is installed and current; exit 1 on drift
    Verify {
        /// The source database URL
        #[arg(long, value_name = "URL")]
        source: String,
        /// Output format: drift lines on standard error, or one JSON object on standard output
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

/// Write a snapshot of the captured tables, consistent with a cursor that
/// hands over exactly to mooncdc-capture.
#[derive(Debug, Parser)]
#[command(
    name = "mooncdc-snapshot",
    version,
    after_help = "Example: mooncdc-snapshot --source sqlite:app.db | mooncdc-apply --target sqlite:proj.db\n\nExit status: 0 success, 1 failure, 2 usage."
)]
pub struct SnapshotArgs {
    /// The source database URL (sqlite:PATH or postgres://…)
    #[arg(long, value_name = "URL")]
    pub source: String,
    /// Only this table (repeatable; default: every captured table)
    #[arg(long = "table", value_name = "NAME")]
    pub tables: Vec<String>,
    /// Output format
    #[arg(long, value_enum, default_value_t = SnapshotFormat::Jsonl)]
    pub output_format: SnapshotFormat,
    /// Write to FILE (atomically) instead of standard output (- is standard output)
    #[arg(long, short = 'o', value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// No progress on standard error
    #[arg(long, short = 'q')]
    pub quiet: bool,
    /// One line per table written and a summary on standard error (rows, the cursor, the time)
    #[arg(long, short = 'v')]
    pub verbose: bool,
    #[command(flatten)]
    pub pg: PgArgs,
    /// PostgreSQL: how long to wait for open transactions when creating the snapshot's slot, in seconds
    #[arg(long, value_name = "SECONDS", default_value_t = 60)]
    pub slot_timeout: u64,
    /// PostgreSQL: copy up to N tables at once, each session importing the same snapshot
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub jobs: usize,
    /// PostgreSQL with --jobs N (N > 1): hold each table's rows, past their first 4 MiB, in a temporary file in DIR until every table has been copied (default: TMPDIR, else /tmp; room for about the whole snapshot)
    #[arg(long, value_name = "DIR")]
    pub spool_dir: Option<PathBuf>,
}

/// What to do when a target's stored row contradicts an event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Default)]
pub enum OnConflictArg {
    /// Refuse the batch: the target diverges from the source
    #[default]
    Error,
    /// Make the row what the event says
    Overwrite,
}

/// Which pgoutput protocol a PostgreSQL read speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Default)]
pub enum PgoutputProtocol {
    /// The highest the server has, with streaming of large transactions
    #[default]
    Auto,
    /// Protocol 1: the server holds each transaction until it commits
    #[value(name = "1")]
    V1,
}

/// How messages on standard error are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Default)]
pub enum LogFormat {
    /// `mooncdc-x: message`
    #[default]
    Text,
    /// One JSON object a line: ts, level, tool, message, fields
    Json,
}

/// What a snapshot does with rows that target tables already hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Default)]
pub enum ExistingRowsArg {
    /// Refuse the snapshot, naming the table
    #[default]
    Refuse,
    /// Empty those tables first, in the snapshot's transaction
    Replace,
    /// Load the snapshot's rows beside them (--on-conflict decides clashes)
    Keep,
}

/// ClickHouse table engines.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Default)]
pub enum EngineArg {
    /// Current state (ReplacingMergeTree)
    #[default]
    Replacing,
    /// Append-only change history (MergeTree)
    History,
}

/// Apply snapshots and batch streams to a target.
///
/// Each batch commits with the target's cursor; batches already held are skipped,
/// a gap or another source fails. Prints a summary line on standard error.
#[derive(Debug, Parser)]
#[command(
    name = "mooncdc-apply",
    version,
    args_conflicts_with_subcommands = true,
    after_help = "Example: mooncdc-snapshot --source sqlite:app.db | mooncdc-apply --target postgres://report@replica/shop\n\n\
Input: the files given, or standard input when none (or -): snapshots or batch \
streams, JSONL or JSON (detected). Exit status: 0 success, 1 bad data or failed operation, 2 usage."
)]
pub struct ApplyArgs {
    #[command(subcommand)]
    pub command: Option<ApplyCommand>,
    /// The target URL: sqlite:PATH, postgres://…, clickhouse://user@host:8123/db, or dir:PATH (an archive of batch files)
    #[arg(long, value_name = "URL")]
    pub target: Option<String>,
    /// Table engine (ClickHouse targets; also engine= in the URL) [default: replacing]
    #[arg(long, value_enum)]
    pub engine: Option<EngineArg>,
    /// What to do when a stored row contradicts an event's image
    #[arg(long, value_enum, default_value_t = OnConflictArg::Error)]
    pub on_conflict: OnConflictArg,
    /// What a snapshot does with rows a target table already holds
    #[arg(long, value_enum, default_value_t = ExistingRowsArg::Refuse)]
    pub existing_rows: ExistingRowsArg,
    /// Messages on standard error as plain text or JSON lines (for a supervisor or journald)
    #[arg(long, value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
    /// Serve Prometheus metrics on /metrics and health on /livez and /readyz at ADDR:PORT (e.g. 127.0.0.1:9188)
    #[arg(long, value_name = "ADDR:PORT")]
    pub metrics_listen: Option<String>,
    /// With --metrics-listen: /readyz says 503 after this long without progress
    #[arg(long, value_name = "MS", default_value_t = 300_000)]
    pub stall_timeout_ms: u64,
    /// No progress on standard error
    #[arg(long, short = 'q')]
    pub quiet: bool,
    /// One line per batch committed on standard error (its end, its events, the time)
    #[arg(long, short = 'v')]
    pub verbose: bool,
    /// ClickHouse targets: hold a batch's rows past the first 8 MiB of a table in a temporary file in DIR until the batch's commit is checked (default: TMPDIR, else /tmp; room for the largest batch's rows)
    #[arg(long, value_name = "DIR")]
    pub spool_dir: Option<PathBuf>,
    #[command(flatten)]
    pub limits: LimitArgs,
    /// Input files: snapshots or batch streams (standard input when none, or -)
    #[arg(value_name = "FILE")]
    pub files: Vec<PathBuf>,
}

#[derive(Debug, clap::Subcommand)]
pub enum ApplyCommand {
    /// Print the target's stored cursor as JSON; exit 1 if it holds none
    Cursor {
        /// The target database URL
        #[arg(long, value_name = "URL")]
        target: String,
        /// Exit 1 unless the stored cursor is of this source
        #[arg(long, value_name = "ID")]
        source_identity: Option<String>,
    },
    /// ClickHouse targets: remove deleted rows from storage (the replacing engine's cleanup merge, OPTIMIZE … FINAL CLEANUP), one table at a time
    Cleanup {
        /// The ClickHouse target URL
        #[arg(long, value_name = "URL")]
        target: String,
        /// Only the table of this source table (repeatable; default: every replacing table of the database)
        #[arg(long, value_name = "TABLE")]
        table: Vec<String>,
    },
}

/// Audit output formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Default)]
pub enum AuditFormatArg {
    #[default]
    Text,
    Jsonl,
}

/// Compare a source's current rows with a target's projection, in key order.
#[derive(Debug, Parser)]
#[command(
    name = "mooncdc-audit",
    version,
    after_help = "Example: mooncdc-audit --source sqlite:app.db --target sqlite:proj.db\n\n\
Exit status (as diff): 0 equal, 1 different, 2 trouble."
)]
pub struct AuditArgs {
    /// The source database URL
    #[arg(long, value_name = "URL")]
    pub source: String,
    /// The target database URL
    #[arg(long, value_name = "URL")]
    pub target: String,
    /// Only this table (repeatable)
    #[arg(long = "table", value_name = "NAME")]
    pub tables: Vec<String>,
    /// Output format (`--output-format`, as the other tools say, is the same)
    #[arg(long, visible_alias = "output-format", value_enum, default_value_t = AuditFormatArg::Text)]
    pub format: AuditFormatArg,
    /// No progress on standard error
    #[arg(long, short = 'q')]
    pub quiet: bool,
    /// A closing line on standard error: tables, rows compared, the time (the report itself names each table)
    #[arg(long, short = 'v')]
    pub verbose: bool,
    #[command(flatten)]
    pub pg: PgArgs,
}

/// A `--prefix`: part of a file name inside `--output-dir`, so it may not
/// name another folder (`../x`, `a/b`).
fn file_name_prefix(s: &str) -> Result<String, String> {
    if s.is_empty() {
        return Err("the prefix may not be empty".into());
    }
    if s.contains(['/', '\\', '\0']) {
        return Err(
            "the prefix is part of a file name and may not hold a path separator (/ or \\)".into(),
        );
    }
    Ok(s.to_string())
}
