//! mooncdc-split: cut a batch stream into smaller batches.

use clap::Parser;
use mooncdc::cli::{self, args::SplitArgs};
use std::process::ExitCode;

fn main() -> ExitCode {
    let args = SplitArgs::parse();
    cli::run("mooncdc-split", || mooncdc::cmd::split::run(args))
}
