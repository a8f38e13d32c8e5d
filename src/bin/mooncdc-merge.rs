//! mooncdc-merge: join contiguous batches of one source into one batch.

use clap::Parser;
use mooncdc::cli::{self, args::MergeArgs};
use std::process::ExitCode;

fn main() -> ExitCode {
    if let Some(code) = cli::print_generated("mooncdc-merge") {
        return code;
    }
    let args = MergeArgs::parse();
    cli::run("mooncdc-merge", || mooncdc::cmd::merge::run(args))
}
