//! mooncdc-snapshot: write a snapshot that hands over exactly to capture.

use mooncdc::cli::{self, args::SnapshotArgs};
use std::process::ExitCode;

fn main() -> ExitCode {
    if let Some(code) = cli::print_generated("mooncdc-snapshot") {
        return code;
    }
    let args: SnapshotArgs = cli::parse_args("mooncdc-snapshot");
    cli::run("mooncdc-snapshot", || mooncdc::cmd::snapshot::run(args))
}
