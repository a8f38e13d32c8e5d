//! `mooncdc-merge`: join contiguous batches of one source into one batch.

use crate::cli::{self, args::MergeArgs};
use crate::ops::merge::merge;
use crate::ops::WriteSink;
use std::process::ExitCode;

pub fn run(a: MergeArgs) -> crate::error::Result<ExitCode> {
    crate::log::set_quiet(a.quiet);
    crate::ops::spool::set_dir(a.spool_dir.as_deref())?;
    let limits = cli::limits(&a.limits)?;
    let format = cli::output_format(a.output_format);
    let began = std::time::Instant::now();
    let mut inputs = Vec::new();
    for path in cli::input_paths(&a.files) {
        inputs.push(cli::open_batches(path, limits, "mooncdc-merge")?);
    }
    let stats = match cli::output_path(&a.output) {
        None => {
            let mut out = cli::stdout();
            let stats = merge(
                inputs,
                &mut WriteSink {
                    out: &mut out,
                    format,
                },
            )?;
            cli::finish_output(out)?;
            stats
        }
        Some(path) => {
            let mut stats = None;
            cli::write_atomically(path, |w| {
                stats = Some(merge(inputs, &mut WriteSink { out: w, format })?);
                Ok(())
            })?;
            stats.expect("written")
        }
    };
    if a.verbose {
        use crate::log::count;
        crate::log::info(&format!(
            "merged {} into one, {}, in {}",
            count(stats.batches_in, "batch", "batches"),
            count(stats.events, "event", "events"),
            crate::log::elapsed(began.elapsed())
        ));
    }
    Ok(ExitCode::SUCCESS)
}
