//! `mooncdc-split`: cut a batch stream into smaller batches.

use crate::cli::{self, args::SplitArgs};
use crate::ops::split::{split, SplitOptions};
use crate::ops::WriteSink;
use std::process::ExitCode;

pub fn run(a: SplitArgs) -> crate::error::Result<ExitCode> {
    crate::log::set_quiet(a.quiet);
    crate::ops::spool::set_dir(a.spool_dir.as_deref())?;
    let limits = cli::limits(&a.limits)?;
    let opts = SplitOptions {
        max_events: a.max_events,
        max_bytes: a.max_bytes,
    };
    let format = cli::output_format(a.output_format);
    let began = std::time::Instant::now();
    let mut total = crate::ops::split::SplitStats::default();
    let mut out = cli::stdout();
    for path in cli::input_paths(&a.files) {
        // Lines are read (and, while this thread is busy, scanned) on a
        // thread of their own; this one checks them in order and writes.
        let mut input = cli::open_batches(path, limits, "mooncdc-split")?.read_ahead_lean()?;
        match &a.output_dir {
            None => {
                let mut sink = WriteSink {
                    out: &mut out,
                    format,
                };
                total.add(split(&mut input, opts, &mut sink)?);
            }
            Some(dir) => {
                let mut sink = cli::DirSink::new(dir, &a.prefix, format, &mut out)?;
                // The pieces written before a failure are synced too. A
                // piece that could not be synced or renamed is the first
                // failure (the split may have gone on reading meanwhile).
                let r = split(&mut input, opts, &mut sink);
                sink.finish()?;
                total.add(r?);
            }
        }
    }
    cli::finish_output(out)?;
    if a.verbose {
        use crate::log::count;
        crate::log::info(&format!(
            "split {} into {}, {}, in {}",
            count(total.batches_in, "batch", "batches"),
            count(total.batches_out, "piece", "pieces"),
            count(total.events, "event", "events"),
            crate::log::elapsed(began.elapsed())
        ));
    }
    Ok(ExitCode::SUCCESS)
}
