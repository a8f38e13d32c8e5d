//! mooncdc-split: cut a batch stream into smaller batches.

use mooncdc::cli::{self, args::SplitArgs};
use std::process::ExitCode;

fn main() -> ExitCode {
    if let Some(code) = cli::print_generated("mooncdc-split") {
        return code;
    }
    let args: SplitArgs = cli::parse_args("mooncdc-split");
    cli::run("mooncdc-split", || mooncdc::cmd::split::run(args))
}
