//! mooncdc-audit: compare a source with a target; exit 0 equal, 1 different, 2 trouble.

use clap::Parser;
use mooncdc::audit::{audit, write_summary, AuditFormat, AuditSource, AuditTarget};
use mooncdc::cli::args::{AuditArgs, AuditFormatArg};
use mooncdc::cli::url::{self, Endpoint};
use mooncdc::cli::{self, Progress};
use mooncdc::destination::clickhouse::{ChConfig, ClickHouse, Engine};
use mooncdc::source::postgres::PgSource;
use std::process::ExitCode;

fn main() -> ExitCode {
    let args = AuditArgs::parse();
    cli::run_with("mooncdc-audit", 2, || run(args))
}

fn run(a: AuditArgs) -> anyhow::Result<ExitCode> {
    let source = url::parse(&a.source)?;
    let pg = match &source {
        Endpoint::Postgres(u) => Some(PgSource::new(u, Some(&a.pg.slot), Some(&a.pg.publication))?),
        _ => None,
    };
    let source = match &pg {
        Some(p) => AuditSource::Postgres(p),
        None => AuditSource::Sqlite(source.sqlite_path("source")?),
    };
    let target_endpoint = url::parse(&a.target)?;
    let ch = match &target_endpoint {
        Endpoint::ClickHouse(u) => {
            Some(ClickHouse::connect(ChConfig::parse(u)?, Engine::Replacing)?)
        }
        _ => None,
    };
    let target = match &ch {
        Some(c) => AuditTarget::ClickHouse(c),
        None => AuditTarget::Sqlite(target_endpoint.sqlite_path("target")?),
    };
    let format = match a.format {
        AuditFormatArg::Text => AuditFormat::Text,
        AuditFormatArg::Jsonl => AuditFormat::Jsonl,
    };
    let mut out = cli::stdout();
    let mut progress = Progress::new("rows", a.quiet);
    let report = audit(source, target, &a.tables, format, &mut out, &mut |n| {
        progress.update(n)
    })?;
    progress.done();
    write_summary(&report, format, &mut out)?;
    cli::finish_output(out)?;
    Ok(if report.equal() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}
