//! mooncdc-apply: apply snapshots and batch streams to a target.

use mooncdc::cli::{self, args::ApplyArgs};
use std::process::ExitCode;

/// mimalloc for apply only: with read-ahead, values made on one thread are
/// freed on another, which glibc's malloc does under locks (a tenth of an
/// apply's time, measured); mimalloc frees them without. The stream tools
/// keep glibc's: mimalloc tripled their peak RSS (11 MB to 37 MB) for no
/// speed.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    if let Some(code) = cli::print_generated("mooncdc-apply") {
        return code;
    }
    let args: ApplyArgs = cli::parse_args("mooncdc-apply");
    cli::run("mooncdc-apply", || mooncdc::cmd::apply::run(args))
}
