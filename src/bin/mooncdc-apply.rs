//! mooncdc-apply: apply snapshots and batch streams to a target.

use clap::Parser;
use mooncdc::cli::args::{ApplyArgs, ApplyCommand, EngineArg, ExistingRowsArg, OnConflictArg};
use mooncdc::cli::url::Endpoint;
use mooncdc::cli::{self, url, Input, Progress};
use mooncdc::destination::clickhouse::{ChConfig, ClickHouse, Engine};
use mooncdc::destination::sqlite::{read_cursor, ApplyStats, OnConflict, SqliteTarget};
use mooncdc::destination::ExistingRows;
use mooncdc::error::Error;
use std::process::ExitCode;

enum Target {
    Sqlite(SqliteTarget),
    ClickHouse(ClickHouse),
}

fn main() -> ExitCode {
    let args = ApplyArgs::parse();
    cli::run("mooncdc-apply", || run(args))
}

fn run(a: ApplyArgs) -> anyhow::Result<ExitCode> {
    if let Some(ApplyCommand::Cursor {
        target,
        source_identity,
    }) = a.command
    {
        let c = match url::parse(&target)? {
            Endpoint::ClickHouse(u) => {
                ClickHouse::connect(ChConfig::parse(&u)?, Engine::Replacing)?.cursor()?
            }
            other => {
                let path = other.sqlite_path("target")?.clone();
                if path.exists() {
                    read_cursor(&path)?
                } else {
                    None
                }
            }
        };
        return Ok(match c {
            Some(c) if source_identity.as_ref().is_none_or(|id| *id == c.source) => {
                println!("{}", c.to_json());
                ExitCode::SUCCESS
            }
            Some(c) => {
                eprintln!(
                    "mooncdc-apply: the target holds a cursor of source {:?}, not {:?}",
                    c.source,
                    source_identity.unwrap_or_default()
                );
                ExitCode::from(1)
            }
            None => {
                eprintln!("mooncdc-apply: the target holds no cursor");
                ExitCode::from(1)
            }
        });
    }
    let target = a
        .target
        .ok_or_else(|| Error::usage("--target is required (e.g. --target sqlite:proj.db)"))?;
    let endpoint = url::parse(&target)?;
    if a.engine == EngineArg::History && !matches!(endpoint, Endpoint::ClickHouse(_)) {
        return Err(Error::usage(
            "--engine history is for ClickHouse targets; a SQLite target holds the current state",
        )
        .into());
    }
    let on_conflict = match a.on_conflict {
        OnConflictArg::Error => OnConflict::Error,
        OnConflictArg::Overwrite => OnConflict::Overwrite,
    };
    let existing = match a.existing_rows {
        ExistingRowsArg::Refuse => ExistingRows::Refuse,
        ExistingRowsArg::Replace => ExistingRows::Replace,
        ExistingRowsArg::Keep => ExistingRows::Keep,
    };
    let limits = cli::limits(&a.limits)?;
    let mut t = match &endpoint {
        Endpoint::ClickHouse(u) => {
            let engine = match a.engine {
                EngineArg::Replacing => Engine::Replacing,
                EngineArg::History => Engine::History,
            };
            Target::ClickHouse(ClickHouse::connect(ChConfig::parse(u)?, engine)?)
        }
        other => Target::Sqlite(SqliteTarget::open(other.sqlite_path("target")?)?),
    };
    let mut total = ApplyStats {
        cursor: match &t {
            Target::Sqlite(s) => s.cursor()?,
            Target::ClickHouse(c) => c.cursor()?,
        },
        ..Default::default()
    };
    let mut progress = Progress::new("events", a.quiet);
    let (mut snapshots, mut rows) = (0u64, 0u64);
    let result = (|| -> anyhow::Result<()> {
        for p in cli::input_paths(&a.files) {
            let base = total.applied;
            let mut tick = |s: &ApplyStats| progress.update(base + s.applied);
            let input = cli::open_input(p, limits)?;
            let is_snapshot = matches!(input, Input::Snapshot(_));
            let r = match (input, &mut t) {
                (Input::Batches(mut r), Target::Sqlite(t)) => {
                    t.apply_stream(&mut r, on_conflict, &mut tick)
                }
                (Input::Snapshot(mut r), Target::Sqlite(t)) => {
                    t.apply_snapshot(&mut r, on_conflict, existing, &mut tick)
                }
                (Input::Batches(mut r), Target::ClickHouse(t)) => t.apply_stream(&mut r, &mut tick),
                (Input::Snapshot(mut r), Target::ClickHouse(t)) => {
                    t.apply_snapshot(&mut r, existing, &mut tick)
                }
            };
            // On failure, count what was committed before it.
            let s = match &r {
                Ok(s) => s.clone(),
                Err(_) => match &t {
                    Target::Sqlite(t) => t.committed().clone(),
                    Target::ClickHouse(t) => t.committed().clone(),
                },
            };
            if is_snapshot {
                snapshots += s.batches;
                rows += s.applied;
            } else {
                total.batches += s.batches;
                total.applied += s.applied;
                total.skipped += s.skipped;
            }
            if s.cursor.is_some() {
                total.cursor = s.cursor;
            }
            r?;
        }
        Ok(())
    })();
    progress.done();
    // The summary names the cursor the target holds now: another apply may
    // have moved it while this one skipped what was already held.
    if let Ok(Some(c)) = match &t {
        Target::Sqlite(s) => s.cursor(),
        Target::ClickHouse(c) => c.cursor(),
    } {
        total.cursor = Some(c);
    }
    let cursor = total
        .cursor
        .as_ref()
        .map_or("none".to_string(), |c| c.to_json());
    let loaded = if snapshots > 0 {
        format!("{snapshots} snapshot ({rows} rows loaded), ")
    } else {
        String::new()
    };
    eprintln!(
        "mooncdc-apply: {loaded}{} batches, {} events applied, {} skipped as already held, cursor {}",
        total.batches, total.applied, total.skipped, cursor
    );
    result?;
    Ok(ExitCode::SUCCESS)
}
