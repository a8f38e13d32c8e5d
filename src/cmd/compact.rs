//! `mooncdc-compact`: remove intermediate changes of the same row in each batch.

use crate::cli::{self, args::CompactArgs};
use crate::ops::compact::compact;
use crate::ops::WriteSink;
use std::process::ExitCode;

pub fn run(a: CompactArgs) -> crate::error::Result<ExitCode> {
    crate::log::set_quiet(a.quiet);
    crate::ops::spool::set_dir(a.spool_dir.as_deref())?;
    let limits = cli::limits(&a.limits)?;
    let format = cli::output_format(a.output_format);
    let extra = match &a.schema {
        Some(p) => cli::load_schemas(p, limits)?,
        None => Vec::new(),
    };
    let began = std::time::Instant::now();
    let (mut batches, mut events_in, mut events_out) = (0u64, 0u64, 0u64);
    let mut out = cli::stdout();
    for path in cli::input_paths(&a.files) {
        // Lines are read (and, while this thread is busy, scanned) on a
        // thread of their own; this one checks them in order and compacts.
        let mut input = cli::open_batches(path, limits, "mooncdc-compact")?.read_ahead_lean()?;
        let s = compact(
            &mut input,
            &extra,
            &mut WriteSink {
                out: &mut out,
                format,
            },
        )?;
        batches += s.batches;
        events_in += s.events_in;
        events_out += s.events_out;
    }
    cli::finish_output(out)?;
    if a.verbose {
        use crate::log::count;
        crate::log::info(&format!(
            "compacted {}: {} in, {} out, in {}",
            count(batches, "batch", "batches"),
            count(events_in, "event", "events"),
            count(events_out, "event", "events"),
            crate::log::elapsed(began.elapsed())
        ));
    }
    Ok(ExitCode::SUCCESS)
}
