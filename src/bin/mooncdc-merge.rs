//! mooncdc-merge: join contiguous batches of one source into one batch.

use mooncdc::cli::{self, args::MergeArgs};
use std::process::ExitCode;

fn main() -> ExitCode {
    if let Some(code) = cli::print_generated("mooncdc-merge") {
        return code;
    }
    let args: MergeArgs = cli::parse_args("mooncdc-merge");
    cli::run("mooncdc-merge", || mooncdc::cmd::merge::run(args))
}
