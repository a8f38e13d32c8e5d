//! mooncdc-audit: compare a source with a target; exit 0 equal, 1 different, 2 trouble.

use mooncdc::cli::{self, args::AuditArgs};
use std::process::ExitCode;

fn main() -> ExitCode {
    if let Some(code) = cli::print_generated("mooncdc-audit") {
        return code;
    }
    let args: AuditArgs = cli::parse_args("mooncdc-audit");
    cli::run_with("mooncdc-audit", 2, || mooncdc::cmd::audit::run(args))
}
