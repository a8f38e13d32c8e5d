//! `mooncdc-snapshot`: write a snapshot that hands over exactly to capture.

use crate::cli::args::{SnapshotArgs, SnapshotFormat};
use crate::cli::{self, Progress};
use crate::endpoint::{self, PgNames};
use crate::source::SnapshotRequest;
use std::process::ExitCode;
use std::time::Duration;

pub fn run(a: SnapshotArgs) -> anyhow::Result<ExitCode> {
    let source = endpoint::parse(&a.source)?.source(&pg_names(&a.pg))?;
    let req = SnapshotRequest {
        tables: a.tables.clone(),
        json: a.output_format == SnapshotFormat::Json,
        jobs: a.jobs,
        slot_timeout: Duration::from_secs(a.slot_timeout.max(1)),
    };
    let mut progress = Progress::new("rows", a.quiet);
    let mut write =
        |w: &mut dyn std::io::Write| source.snapshot(&req, w, &mut progress).map(|_| ());
    match cli::output_path(&a.output) {
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

/// The slot and publication options, for a PostgreSQL source.
pub fn pg_names(pg: &crate::cli::args::PgArgs) -> PgNames {
    PgNames {
        slot: Some(pg.slot.clone()),
        publication: Some(pg.publication.clone()),
    }
}
