//! mooncdc-apply: apply snapshots and batch streams to a target.

use clap::Parser;
use mooncdc::cli::{self, args::ApplyArgs};
use std::process::ExitCode;

fn main() -> ExitCode {
    if let Some(code) = cli::print_generated("mooncdc-apply") {
        return code;
    }
    let args = ApplyArgs::parse();
    cli::run("mooncdc-apply", || mooncdc::cmd::apply::run(args))
}
