//! mooncdc-snapshot: write a snapshot that hands over exactly to capture.

use clap::Parser;
use mooncdc::cli::args::{Format, SnapshotArgs};
use mooncdc::cli::{self, url, Progress};
use mooncdc::source::sqlite;
use std::process::ExitCode;

fn main() -> ExitCode {
    let args = SnapshotArgs::parse();
    cli::run("mooncdc-snapshot", || run(args))
}

fn run(a: SnapshotArgs) -> anyhow::Result<ExitCode> {
    let path = url::parse(&a.source)?.sqlite_path("source")?.clone();
    let json = a.output_format == Format::Json;
    let mut progress = Progress::new("rows", a.quiet);
    let mut tick = |n| progress.update(n);
    match &a.output {
        None => {
            let mut out = cli::stdout();
            sqlite::snapshot(&path, &a.tables, json, &mut out, &mut tick)?;
            cli::finish_output(out)?;
        }
        Some(file) => cli::write_atomically(file, |w| {
            sqlite::snapshot(&path, &a.tables, json, w, &mut tick).map(|_| ())
        })?,
    }
    progress.done();
    Ok(ExitCode::SUCCESS)
}
