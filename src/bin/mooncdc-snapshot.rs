//! mooncdc-snapshot: write a snapshot that hands over exactly to capture.

use clap::Parser;
use mooncdc::cli::args::{SnapshotArgs, SnapshotFormat};
use mooncdc::cli::url::{self, Endpoint};
use mooncdc::cli::{self, Progress};
use mooncdc::source::postgres::PgSource;
use mooncdc::source::sqlite;
use std::process::ExitCode;
use std::time::Duration;

fn main() -> ExitCode {
    let args = SnapshotArgs::parse();
    cli::run("mooncdc-snapshot", || run(args))
}

fn run(a: SnapshotArgs) -> anyhow::Result<ExitCode> {
    let json = a.output_format == SnapshotFormat::Json;
    let mut progress = Progress::new("rows", a.quiet);
    let mut tick = |n| progress.update(n);
    let endpoint = url::parse(&a.source)?;
    let pg = match &endpoint {
        Endpoint::Postgres(u) => Some(PgSource::new(u, Some(&a.pg.slot), Some(&a.pg.publication))?),
        _ => None,
    };
    let mut write = |w: &mut dyn std::io::Write| -> mooncdc::Result<()> {
        match (&endpoint, &pg) {
            (_, Some(src)) => src
                .snapshot(
                    &a.tables,
                    json,
                    a.jobs,
                    Duration::from_secs(a.slot_timeout.max(1)),
                    w,
                    &mut tick,
                )
                .map(|_| ()),
            (e, None) => sqlite::snapshot(e.sqlite_path("source")?, &a.tables, json, w, &mut tick)
                .map(|_| ()),
        }
    };
    match &a.output {
        None => {
            let mut out = cli::stdout();
            write(&mut out)?;
            cli::finish_output(out)?;
        }
        Some(file) => cli::write_atomically(file, |w| write(w))?,
    }
    progress.done();
    Ok(ExitCode::SUCCESS)
}
