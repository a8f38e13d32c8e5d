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

// mooncdc-capture's options and subcommands (after AFTER_HELP_TEXT, which
// they use).
mod capture;
pub use capture::*;

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
        /// Print the position in the source's own terms instead of the JSON (PostgreSQL: the LSN as capture status shows it, with the event inside its transaction; SQLite: the log sequence)
        #[arg(long)]
        position: bool,
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
