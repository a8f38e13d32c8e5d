//! mooncdc-apply: apply snapshots and batch streams to a target.

use mooncdc::cli::{self, args::ApplyArgs};
use std::process::ExitCode;

/// mimalloc for apply only: with read-ahead, values made on one thread were
/// freed on another, which glibc's malloc does under locks (a tenth of an
/// apply's time, measured). Rows now go back to the reading thread to be
/// freed, and glibc's would do as well for SQLite (at less than half the
/// peak RSS), but ClickHouse apply was slower with it (0.77 s against
/// 0.725 s, median of six). The stream tools keep glibc's: mimalloc
/// tripled their peak RSS (11 MB to 37 MB) for no speed.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    if let Some(code) = cli::print_generated("mooncdc-apply") {
        return code;
    }
    let args: ApplyArgs = cli::parse_args("mooncdc-apply");
    cli::run("mooncdc-apply", || mooncdc::cmd::apply::run(args))
}
