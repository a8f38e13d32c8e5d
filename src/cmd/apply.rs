//! `mooncdc-apply`: apply snapshots and batch streams to a target, and
//! print the cursor it holds (`apply cursor`).

use crate::cli::args::{ApplyArgs, ApplyCommand, EngineArg, ExistingRowsArg, OnConflictArg};
use crate::cli::{self, Input, Progress};
use crate::destination::{ApplyStats, ExistingRows, OnConflict, TargetOptions};
use crate::endpoint;
use crate::error::Error;
use std::process::ExitCode;

pub fn run(a: ApplyArgs) -> crate::error::Result<ExitCode> {
    if let Some(ApplyCommand::Cursor {
        target,
        source_identity,
        position,
    }) = a.command
    {
        return cursor(&target, source_identity.as_deref(), position);
    }
    if let Some(ApplyCommand::Cleanup { target, table }) = a.command {
        return cleanup(&target, &table);
    }
    crate::log::set_json(a.log_format == crate::cli::args::LogFormat::Json);
    crate::ops::spool::set_dir(a.spool_dir.as_deref())?;
    let began = std::time::Instant::now();
    let url = a
        .target
        .ok_or_else(|| Error::usage("--target is required (e.g. --target sqlite:proj.db)"))?;
    let options = TargetOptions {
        on_conflict: match a.on_conflict {
            OnConflictArg::Error => OnConflict::Error,
            OnConflictArg::Overwrite => OnConflict::Overwrite,
        },
        existing_rows: match a.existing_rows {
            ExistingRowsArg::Refuse => ExistingRows::Refuse,
            ExistingRowsArg::Replace => ExistingRows::Replace,
            ExistingRowsArg::Keep => ExistingRows::Keep,
        },
    };
    let limits = cli::limits(&a.limits)?;
    // A stop between batches exits at once; in a batch, after its commit.
    crate::util::stop::install();
    if let Some(addr) = &a.metrics_listen {
        crate::metrics::serve(
            addr,
            "apply",
            std::time::Duration::from_millis(a.stall_timeout_ms.max(1)),
        )?;
    }
    let mut endpoint = endpoint::parse(&url)?;
    if let Some(engine) = a.engine {
        endpoint.set_option(
            "engine",
            match engine {
                EngineArg::Replacing => "replacing",
                EngineArg::History => "history",
            },
        )?;
    }
    let mut t = endpoint.target(options)?;
    let mut total = ApplyStats {
        cursor: t.cursor()?,
        ..Default::default()
    };
    crate::metrics::started();
    let mut progress = Progress::new("events", a.quiet);
    let (mut snapshots, mut rows) = (0u64, 0u64);
    let result = (|| -> crate::error::Result<()> {
        for p in cli::input_paths(&a.files) {
            let input = cli::open_input(p, limits)?;
            let is_snapshot = matches!(input, Input::Snapshot(_));
            // A snapshot loads rows, batches apply events: the line says which.
            let base = if is_snapshot { rows } else { total.applied };
            progress.relabel(if is_snapshot { "rows" } else { "events" });
            let base_batches = total.batches + snapshots;
            // `-q` wins over `-v` (docs/TOOLS.md), as for every tool.
            let verbose = a.verbose && !a.quiet;
            let (mut seen_batches, mut seen_applied, mut batch_began) =
                (0u64, 0u64, std::time::Instant::now());
            let mut tick = |s: &ApplyStats| {
                if verbose && s.batches > seen_batches {
                    let end = s
                        .cursor
                        .as_ref()
                        .map_or("none".to_string(), |c| c.sequence().to_string());
                    let what = if is_snapshot {
                        format!(
                            "snapshot loaded at {end}: {}",
                            crate::log::count(s.applied - seen_applied, "row", "rows")
                        )
                    } else {
                        format!(
                            "batch committed through {end}: {} applied",
                            crate::log::count(s.applied - seen_applied, "event", "events")
                        )
                    };
                    crate::log::write(
                        "info",
                        &format!("{what}, in {}", crate::log::elapsed(batch_began.elapsed())),
                        &[
                            (
                                "event",
                                if is_snapshot { "snapshot" } else { "batch" }.into(),
                            ),
                            ("end", end.clone().into()),
                            (
                                if is_snapshot {
                                    "rows_loaded"
                                } else {
                                    "events_applied"
                                },
                                (s.applied - seen_applied).into(),
                            ),
                        ],
                    );
                    seen_batches = s.batches;
                    seen_applied = s.applied;
                    batch_began = std::time::Instant::now();
                }
                progress.update(base + s.applied);
                crate::metrics::totals(base + s.applied, base_batches + s.batches);
                if let Some(c) = &s.cursor {
                    crate::metrics::position(crate::metrics::position_of(c.sequence()));
                }
            };
            let r = match input {
                // Decoding on a thread of its own overlaps the target's writes.
                Input::Batches(r) => r
                    .read_ahead()
                    .and_then(|mut r| t.apply_stream(&mut r, &mut tick)),
                Input::Snapshot(r) => r
                    .read_ahead()
                    .and_then(|mut r| t.apply_snapshot(&mut r, &mut tick)),
            };
            // On failure, count what was committed before it.
            let s = match &r {
                Ok(s) => s.clone(),
                Err(_) => t.committed(),
            };
            if is_snapshot {
                snapshots += s.batches;
                rows += s.applied;
            } else {
                total.batches += s.batches;
                total.applied += s.applied;
                total.skipped += s.skipped;
                total.messages += s.messages;
            }
            if s.cursor.is_some() {
                total.cursor = s.cursor;
            }
            r?;
            if crate::util::stop::requested() {
                break;
            }
        }
        Ok(())
    })();
    progress.done();
    // An input that never came (an empty pipe whose writer said why it
    // stopped): nothing to sum up either.
    if result.as_ref().is_err_and(|e| e.is_silent()) {
        return result.map(|_| ExitCode::SUCCESS);
    }
    // The summary names the cursor the target holds now: another apply may
    // have moved it while this one skipped what was already held.
    if let Ok(Some(c)) = t.cursor() {
        total.cursor = Some(c);
    }
    // A PostgreSQL cursor's LSN before it, as status shows positions (the
    // cursor's JSON stays last on the line, for whoever reads it back).
    let cursor = total
        .cursor
        .as_ref()
        .map_or("none".to_string(), |c| c.to_json());
    let at = total
        .cursor
        .as_ref()
        .and_then(|c| c.position())
        .map(|p| format!(", at {p}"))
        .unwrap_or_default();
    use crate::log::count;
    let loaded = if snapshots > 0 {
        format!(
            "{} ({} loaded), ",
            count(snapshots, "snapshot", "snapshots"),
            count(rows, "row", "rows")
        )
    } else {
        String::new()
    };
    crate::log::write(
        "info",
        &format!(
            "{loaded}{}, {} applied, {} skipped as already held{}{at}, in {}, cursor {}",
            count(total.batches, "batch", "batches"),
            count(total.applied, "event", "events"),
            total.skipped,
            if total.messages > 0 && url.starts_with("dir:") {
                // An archive keeps every record of its batches.
                format!(
                    ", {} kept in the archive",
                    count(total.messages, "message", "messages")
                )
            } else if total.messages > 0 {
                format!(
                    ", {} skipped (targets apply none)",
                    count(total.messages, "message", "messages")
                )
            } else {
                String::new()
            },
            crate::log::elapsed(began.elapsed()),
            cursor
        ),
        &[
            ("event", "summary".into()),
            ("snapshots", snapshots.into()),
            ("rows_loaded", rows.into()),
            ("batches", total.batches.into()),
            ("events_applied", total.applied.into()),
            ("events_skipped", total.skipped.into()),
            ("messages_skipped", total.messages.into()),
            ("elapsed_s", began.elapsed().as_secs_f64().into()),
            (
                "cursor",
                total
                    .cursor
                    .as_ref()
                    .and_then(|c| serde_json::from_str(&c.to_json()).ok())
                    .unwrap_or(serde_json::Value::Null),
            ),
        ],
    );
    result?;
    Ok(ExitCode::SUCCESS)
}

/// `apply cursor`: print the stored cursor; exit 1 when there is none (or
/// it is of another source than the one named).
fn cursor(
    target: &str,
    source_identity: Option<&str>,
    position: bool,
) -> crate::error::Result<ExitCode> {
    let c = endpoint::parse(target)?.cursor_reader()?()?;
    Ok(match c {
        Some(c) if source_identity.is_none_or(|id| id == c.source) => {
            if position {
                println!(
                    "{}",
                    c.position().unwrap_or_else(|| c.sequence().to_string())
                );
            } else {
                println!("{}", c.to_json());
            }
            ExitCode::SUCCESS
        }
        Some(c) => {
            crate::log::warn(
                &format!(
                    "the target holds a cursor of source {:?}, not {:?}",
                    c.source,
                    source_identity.unwrap_or_default()
                ),
                &[],
            );
            ExitCode::from(1)
        }
        None => {
            crate::log::warn("the target holds no cursor", &[]);
            ExitCode::from(1)
        }
    })
}

/// `apply cleanup`: the replacing engine's cleanup merge on a ClickHouse
/// target's tables; a line per table on standard output.
fn cleanup(target: &str, tables: &[String]) -> crate::error::Result<ExitCode> {
    let ch = match endpoint::parse(target)? {
        endpoint::Endpoint::ClickHouse(c) => {
            if c.engine == Some(crate::destination::clickhouse::Engine::History) {
                return Err(Error::usage(
                    "cleanup is for the replacing engine: a history table keeps every change",
                ));
            }
            crate::destination::clickhouse::ClickHouse::connect(
                (*c).clone(),
                crate::destination::clickhouse::Engine::Replacing,
            )?
        }
        _ => return Err(Error::usage(
            "cleanup is for ClickHouse targets: SQLite and PostgreSQL targets delete rows in place",
        )),
    };
    // A line per table as it is done: a later failure leaves them said.
    ch.cleanup(tables, &mut |c| match &c.skipped {
        Some(why) => println!("skipped {}: {why}", c.table),
        None => println!(
            "cleaned {}: {} rows ({} deleted) before, {} rows ({} deleted) after",
            c.table, c.before.0, c.before.1, c.after.0, c.after.1
        ),
    })?;
    Ok(ExitCode::SUCCESS)
}
