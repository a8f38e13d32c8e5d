//! `mooncdc-compact`: remove intermediate changes of the same row in each batch.

use crate::cli::{self, args::CompactArgs};
use crate::ops::compact::compact;
use crate::ops::WriteSink;
use std::process::ExitCode;

pub fn run(a: CompactArgs) -> anyhow::Result<ExitCode> {
    crate::log::set_quiet(a.quiet);
    let limits = cli::limits(&a.limits)?;
    let format = cli::output_format(a.output_format);
    let extra = match &a.schema {
        Some(p) => cli::load_schemas(p, limits)?,
        None => Vec::new(),
    };
    let mut out = cli::stdout();
    for path in cli::input_paths(&a.files) {
        let mut input = cli::open_batches(path, limits, "mooncdc-compact")?;
        compact(
            &mut input,
            &extra,
            &mut WriteSink {
                out: &mut out,
                format,
            },
        )?;
    }
    cli::finish_output(out)?;
    Ok(ExitCode::SUCCESS)
}
