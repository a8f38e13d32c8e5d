//! mooncdc-capture: install, check, read and acknowledge change capture.

use mooncdc::cli::{self, args::CaptureArgs};
use std::process::ExitCode;

fn main() -> ExitCode {
    if let Some(code) = cli::print_generated("mooncdc-capture") {
        return code;
    }
    let args: CaptureArgs = cli::parse_args("mooncdc-capture");
    cli::run("mooncdc-capture", || mooncdc::cmd::capture::run(args))
}
