//! `mooncdc-snapshot`: write a snapshot that hands over exactly to capture.

use crate::cli::args::{SnapshotArgs, SnapshotFormat};
use crate::cli::{self, Progress};
use crate::endpoint::{self, PgNames};
use crate::source::SnapshotRequest;
use std::process::ExitCode;
use std::time::Duration;

pub fn run(a: SnapshotArgs) -> crate::error::Result<ExitCode> {
    crate::ops::spool::set_dir(a.spool_dir.as_deref())?;
    let source = endpoint::parse(&a.source)?.source(&pg_names(&a.pg))?;
    let req = SnapshotRequest {
        tables: a.tables.clone(),
        json: a.output_format == SnapshotFormat::Json,
        jobs: a.jobs,
        slot_timeout: Duration::from_secs(a.slot_timeout.max(1)),
    };
    crate::log::set_quiet(a.quiet);
    let began = std::time::Instant::now();
    let mut tally = Tally {
        progress: Progress::new("rows", a.quiet),
        verbose: a.verbose,
        tables: 0,
        rows: 0,
    };
    let mut write = |w: &mut dyn std::io::Write| source.snapshot(&req, w, &mut tally).map(|_| ());
    match cli::output_path(&a.output) {
        None => {
            let mut out = cli::stdout();
            write(&mut out)?;
            cli::finish_output(out)?;
        }
        Some(file) => cli::write_atomically(file, |w| write(w))?,
    }
    tally.progress.done();
    if a.verbose {
        use crate::log::count;
        crate::log::info(&format!(
            "snapshot of {}, {}, in {}",
            count(tally.tables, "table", "tables"),
            count(tally.rows, "row", "rows"),
            crate::log::elapsed(began.elapsed())
        ));
    }
    Ok(ExitCode::SUCCESS)
}

/// Progress, and with `-v` a line per table written.
struct Tally {
    progress: Progress,
    verbose: bool,
    tables: u64,
    rows: u64,
}

impl crate::source::Tally for Tally {
    fn wants_total(&self) -> bool {
        self.progress.wants_total()
    }
    fn total(&mut self, rows: u64) {
        self.progress.total(rows);
    }
    fn count(&mut self, rows: u64) {
        self.progress.count(rows);
    }
    fn table_done(&mut self, table: &str, rows: u64) {
        self.tables += 1;
        self.rows += rows;
        if self.verbose {
            self.progress.done();
            crate::log::info(&format!(
                "table {table:?}: {}",
                crate::log::count(rows, "row", "rows")
            ));
        }
    }
}

/// The slot and publication options, for a PostgreSQL source.
pub fn pg_names(pg: &crate::cli::args::PgArgs) -> PgNames {
    PgNames {
        slot: Some(pg.slot.clone()),
        publication: Some(pg.publication.clone()),
    }
}
