//! `mooncdc-merge`: join contiguous batches of one source into one batch.

use crate::cli::{self, args::MergeArgs};
use crate::ops::merge::merge;
use crate::ops::WriteSink;
use std::process::ExitCode;

pub fn run(a: MergeArgs) -> anyhow::Result<ExitCode> {
    crate::log::set_quiet(a.quiet);
    let limits = cli::limits(&a.limits)?;
    let format = cli::output_format(a.output_format);
    let mut inputs = Vec::new();
    for path in cli::input_paths(&a.files) {
        inputs.push(cli::open_batches(path, limits, "mooncdc-merge")?);
    }
    match cli::output_path(&a.output) {
        None => {
            let mut out = cli::stdout();
            merge(
                inputs,
                &mut WriteSink {
                    out: &mut out,
                    format,
                },
            )?;
            cli::finish_output(out)?;
        }
        Some(path) => cli::write_atomically(path, |w| {
            merge(inputs, &mut WriteSink { out: w, format }).map(|_| ())
        })?,
    }
    Ok(ExitCode::SUCCESS)
}
