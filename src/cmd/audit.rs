//! `mooncdc-audit`: compare a source with a target; exit 0 equal, 1
//! different, 2 trouble.

use crate::audit::{audit, write_summary, AuditFormat};
use crate::cli::args::{AuditArgs, AuditFormatArg};
use crate::cli::{self, Progress};
use crate::endpoint;
use std::process::ExitCode;

pub fn run(a: AuditArgs) -> crate::error::Result<ExitCode> {
    let source = endpoint::parse(&a.source)?.source(&super::snapshot::pg_names(&a.pg))?;
    let mut target = endpoint::parse(&a.target)?.audited_target()?;
    let format = match a.format {
        AuditFormatArg::Text => AuditFormat::Text,
        AuditFormatArg::Jsonl => AuditFormat::Jsonl,
    };
    crate::log::set_quiet(a.quiet);
    let began = std::time::Instant::now();
    let mut out = cli::stdout();
    let mut progress = Progress::new("rows", a.quiet);
    let report = audit(
        &*source,
        &mut *target,
        &a.tables,
        format,
        &mut out,
        &mut |n| progress.update(n),
    )?;
    progress.done();
    if a.verbose {
        use crate::log::count;
        crate::log::info(&format!(
            "audited {}, {} compared, in {}",
            count(report.tables.len() as u64, "table", "tables"),
            count(
                report.tables.iter().map(|t| t.compared).sum(),
                "row",
                "rows"
            ),
            crate::log::elapsed(began.elapsed())
        ));
    }
    write_summary(&report, format, &mut out)?;
    cli::finish_output(out)?;
    Ok(if report.equal() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}
