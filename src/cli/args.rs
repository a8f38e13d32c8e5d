//! The command-line definitions of every tool, in one place, so that the
//! binaries, the man pages and the shell completions come from the same text.

use clap::{Args, CommandFactory, Parser, ValueEnum};
use std::path::PathBuf;

/// Batch output formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Default)]
pub enum Format {
    /// JSON lines (`mooncdc.jsonl.v1`): header, events, commit
    #[default]
    Jsonl,
    /// One JSON document per batch (`mooncdc.batch.v1`)
    Json,
}

/// Input limits, on every tool that reads JSONL.
#[derive(Debug, Clone, Args)]
pub struct LimitArgs {
    /// Refuse a line longer than N bytes (default 64 MiB; a JSON document counts as one line)
    #[arg(long, value_name = "N")]
    pub max_line_bytes: Option<u64>,
    /// Refuse more than N bytes of input in all
    #[arg(long, value_name = "N")]
    pub max_input_bytes: Option<u64>,
}

const AFTER_HELP: &str = "Input: the files given, or standard input when none (or -). \
The format (JSONL or JSON batch) is detected. \
Exit status: 0 success, 1 bad data or failed operation, 2 usage.";

/// Cut a batch stream into batches of at most N events and/or B bytes.
///
/// The pieces cover exactly the same interval as the input, contiguously. Without
/// --output-dir they are written as one batch stream to standard output; with it,
/// each piece goes to its own file, written atomically, and the paths are printed.
#[derive(Debug, Parser)]
#[command(name = "mooncdc-split", version, after_help = AFTER_HELP)]
pub struct SplitArgs {
    /// At most N events per batch
    #[arg(long, value_name = "N")]
    pub max_events: Option<u64>,
    /// At most B bytes per batch written as JSONL (a single larger event gets its own batch)
    #[arg(long, value_name = "B")]
    pub max_bytes: Option<u64>,
    /// Write one file per batch into DIR, named P-<start>-<end>.jsonl (or .json)
    #[arg(long, value_name = "DIR")]
    pub output_dir: Option<PathBuf>,
    /// File name prefix with --output-dir
    #[arg(
        long,
        value_name = "P",
        default_value = "batch",
        requires = "output_dir"
    )]
    pub prefix: String,
    /// Output format
    #[arg(long, value_enum, default_value_t = Format::Jsonl)]
    pub output_format: Format,
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
#[command(name = "mooncdc-merge", version, after_help = AFTER_HELP)]
pub struct MergeArgs {
    /// Output format
    #[arg(long, value_enum, default_value_t = Format::Jsonl)]
    pub output_format: Format,
    /// Write the merged batch to FILE (atomically) instead of standard output
    #[arg(long, short = 'o', value_name = "FILE")]
    pub output: Option<PathBuf>,
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
#[command(name = "mooncdc-compact", version, after_help = AFTER_HELP)]
pub struct CompactArgs {
    /// Schemas for tables the stream's headers do not describe: a snapshot file or a JSON array of schemas
    #[arg(long, value_name = "FILE")]
    pub schema: Option<PathBuf>,
    /// Output format
    #[arg(long, value_enum, default_value_t = Format::Jsonl)]
    pub output_format: Format,
    #[command(flatten)]
    pub limits: LimitArgs,
    /// Input files (standard input when none, or -)
    #[arg(value_name = "FILE")]
    pub files: Vec<PathBuf>,
}

/// Every tool's command definition, by binary name.
pub fn commands() -> Vec<clap::Command> {
    vec![
        SplitArgs::command(),
        MergeArgs::command(),
        CompactArgs::command(),
    ]
}
