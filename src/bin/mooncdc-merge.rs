//! mooncdc-merge: join contiguous batches of one source into one batch.

use clap::Parser;
use mooncdc::cli::{self, args::MergeArgs};
use mooncdc::ops::merge::merge;
use mooncdc::ops::WriteSink;
use std::process::ExitCode;

fn main() -> ExitCode {
    let args = MergeArgs::parse();
    cli::run("mooncdc-merge", || run(args))
}

fn run(a: MergeArgs) -> anyhow::Result<ExitCode> {
    let limits = cli::limits(&a.limits)?;
    let format = cli::output_format(a.output_format);
    let mut inputs = Vec::new();
    for path in cli::input_paths(&a.files) {
        inputs.push(cli::open_batches(path, limits, "mooncdc-merge")?);
    }
    match &a.output {
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
