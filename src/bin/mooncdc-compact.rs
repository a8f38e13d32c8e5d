//! mooncdc-compact: remove intermediate changes of the same row in each batch.

use mooncdc::cli::{self, args::CompactArgs};
use std::process::ExitCode;

fn main() -> ExitCode {
    if let Some(code) = cli::print_generated("mooncdc-compact") {
        return code;
    }
    let args: CompactArgs = cli::parse_args("mooncdc-compact");
    cli::run("mooncdc-compact", || mooncdc::cmd::compact::run(args))
}
