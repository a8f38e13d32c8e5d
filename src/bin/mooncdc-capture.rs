//! mooncdc-capture: install, check, read and acknowledge change capture.

use clap::Parser;
use mooncdc::cli::args::{CaptureArgs, CaptureCommand, PgArgs, ReadArgs};
use mooncdc::cli::url::{self, Endpoint};
use mooncdc::cli::{self};
use mooncdc::error::Error;
use mooncdc::source::postgres::PgSource;
use mooncdc::source::sqlite;
use mooncdc::source::ReadLimits;
use mooncdc::wire::Cursor;
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

fn main() -> ExitCode {
    let args = CaptureArgs::parse();
    cli::run("mooncdc-capture", || run(args))
}

/// A source named on the command line.
enum Source {
    Sqlite(PathBuf),
    Postgres(Box<PgSource>),
}

fn source(url: &str, pg: &PgArgs) -> anyhow::Result<Source> {
    Ok(match url::parse(url)? {
        Endpoint::Sqlite(p) => Source::Sqlite(p),
        Endpoint::Postgres(u) => Source::Postgres(Box::new(PgSource::new(
            &u,
            Some(&pg.slot),
            Some(&pg.publication),
        )?)),
        Endpoint::ClickHouse(_) => {
            return Err(Error::usage("ClickHouse is a target, not a source").into())
        }
    })
}

fn run(a: CaptureArgs) -> anyhow::Result<ExitCode> {
    match a.command {
        None => read(a.read),
        Some(CaptureCommand::Read(r)) => read(r),
        Some(CaptureCommand::Init {
            source: s,
            tables,
            pg,
        }) => {
            let (identity, tables) = match source(&s, &pg)? {
                Source::Sqlite(path) => {
                    let added = sqlite::init(&path, &tables)?;
                    (sqlite::status(&path)?.identity, added)
                }
                Source::Postgres(src) => src.init(&tables)?,
            };
            for t in &tables {
                eprintln!("mooncdc-capture: capturing table {t:?}");
            }
            println!("{identity}");
            Ok(ExitCode::SUCCESS)
        }
        Some(CaptureCommand::Verify { source: s, pg }) => {
            let drift = match source(&s, &pg)? {
                Source::Sqlite(path) => sqlite::verify(&path)?,
                Source::Postgres(src) => src.verify()?,
            };
            if drift.is_empty() {
                println!("capture is installed and current");
                Ok(ExitCode::SUCCESS)
            } else {
                for d in &drift {
                    eprintln!("mooncdc-capture: drift: {d}");
                }
                Ok(ExitCode::from(1))
            }
        }
        Some(CaptureCommand::Upgrade { source: s, pg }) => {
            match source(&s, &pg)? {
                Source::Sqlite(path) => {
                    for line in sqlite::upgrade(&path)? {
                        eprintln!("mooncdc-capture: {line}");
                    }
                }
                Source::Postgres(src) => {
                    // Replica identity and the slot, for the tables already
                    // published; no table is added.
                    let tables = src.upgrade()?;
                    eprintln!(
                        "mooncdc-capture: replica identity and slot checked for {}",
                        tables.join(", ")
                    );
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        Some(CaptureCommand::Status { source: s, pg }) => {
            let mut out = cli::stdout();
            match source(&s, &pg)? {
                Source::Sqlite(path) => {
                    let st = sqlite::status(&path)?;
                    writeln!(out, "identity: {}", st.identity)?;
                    writeln!(out, "acknowledged: {}", st.acknowledged)?;
                    writeln!(out, "high water: {}", st.high_water)?;
                    writeln!(out, "backlog: {} changes", st.backlog)?;
                    writeln!(out, "tables: {}", st.tables.join(", "))?;
                }
                Source::Postgres(src) => {
                    for (k, v) in src.status()? {
                        writeln!(out, "{k}: {v}")?;
                    }
                }
            }
            cli::finish_output(out)?;
            Ok(ExitCode::SUCCESS)
        }
        Some(CaptureCommand::Ack {
            source: s,
            through,
            cursor_file,
            cursor,
            pg,
        }) => {
            let src = source(&s, &pg)?;
            let given = cli::cursor_arg(cursor.as_deref(), cursor_file.as_deref())?;
            let through = match &through {
                Some(seq) => Some(mooncdc::wire::model::parse_sequence(seq).map_err(Error::usage)?),
                None => None,
            };
            if given.is_none() && through.is_none() {
                return Err(Error::usage("ack needs --through, --cursor-file or --cursor").into());
            }
            match src {
                Source::Sqlite(path) => {
                    let c = match (through, given) {
                        (Some(n), _) => Cursor::new(sqlite::status(&path)?.identity, n),
                        (None, Some(c)) => c,
                        _ => unreachable!("checked"),
                    };
                    let at = sqlite::ack(&path, &c)?;
                    eprintln!("mooncdc-capture: acknowledged through {at}");
                }
                Source::Postgres(src) => {
                    let c = match (through, given) {
                        (Some(n), _) => Cursor::new(
                            src.status()?
                                .into_iter()
                                .find(|(k, _)| k == "identity")
                                .map(|(_, v)| v)
                                .unwrap_or_default(),
                            n,
                        ),
                        (None, Some(c)) => c,
                        _ => unreachable!("checked"),
                    };
                    let lsn = src.ack(&c)?;
                    eprintln!(
                        "mooncdc-capture: slot confirmed through LSN {:X}/{:X}",
                        lsn >> 32,
                        lsn & 0xffff_ffff
                    );
                }
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}

fn read(r: ReadArgs) -> anyhow::Result<ExitCode> {
    let url = r
        .source
        .clone()
        .ok_or_else(|| Error::usage("--source is required (e.g. --source sqlite:app.db)"))?;
    let src = source(&url, &r.pg)?;
    let after = cli::cursor_arg(r.after.after.as_deref(), r.after.after_file.as_deref())?;
    if r.max_events == Some(0) || r.max_bytes == Some(0) || r.max_line_bytes == Some(0) {
        return Err(Error::usage(
            "--max-events, --max-bytes and --max-line-bytes must be positive",
        )
        .into());
    }
    let limits = ReadLimits {
        max_events: r.max_events,
        max_bytes: r.max_bytes,
        max_line_bytes: r.max_line_bytes,
    };
    // The target whose durable cursor --follow acknowledges up to.
    let held: Option<Box<dyn Fn() -> mooncdc::Result<Option<Cursor>>>> = match &r.ack_from_target {
        None => None,
        Some(t) => match url::parse(t)? {
            Endpoint::ClickHouse(u) => {
                let ch = mooncdc::destination::clickhouse::ClickHouse::connect(
                    mooncdc::destination::clickhouse::ChConfig::parse(&u)?,
                    mooncdc::destination::clickhouse::Engine::Replacing,
                )?;
                Some(Box::new(move || ch.cursor()))
            }
            other => {
                let p = other.sqlite_path("target")?.clone();
                Some(Box::new(move || {
                    if p.exists() {
                        mooncdc::destination::sqlite::read_cursor(&p)
                    } else {
                        Ok(None)
                    }
                }))
            }
        },
    };
    let ack = held.as_deref();
    let mut out = cli::stdout();
    match src {
        Source::Sqlite(path) => {
            if r.follow {
                sqlite::follow(
                    &path,
                    after.as_ref(),
                    limits,
                    std::time::Duration::from_millis(r.poll_ms.max(1)),
                    ack,
                    &mut out,
                )?;
            } else {
                sqlite::read(&path, after.as_ref(), limits, &mut out)?;
            }
        }
        Source::Postgres(src) => {
            if r.follow {
                src.follow(after.as_ref(), ack, &mut out)?;
            } else {
                src.read(after.as_ref(), limits, &mut out)?;
            }
        }
    }
    cli::finish_output(out)?;
    Ok(ExitCode::SUCCESS)
}
