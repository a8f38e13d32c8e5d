//! mooncdc-capture: install, check, read and acknowledge change capture.

use clap::Parser;
use mooncdc::cli::args::{CaptureArgs, CaptureCommand, ReadArgs};
use mooncdc::cli::{self, url};
use mooncdc::error::Error;
use mooncdc::source::sqlite::{self, ReadLimits};
use mooncdc::wire::Cursor;
use std::io::Write;
use std::process::ExitCode;

fn main() -> ExitCode {
    let args = CaptureArgs::parse();
    cli::run("mooncdc-capture", || run(args))
}

fn source_path(s: &str) -> anyhow::Result<std::path::PathBuf> {
    Ok(url::parse(s)?.sqlite_path("source")?.clone())
}

fn run(a: CaptureArgs) -> anyhow::Result<ExitCode> {
    match a.command {
        None => read(a.read),
        Some(CaptureCommand::Read(r)) => read(r),
        Some(CaptureCommand::Init { source, tables }) => {
            let path = source_path(&source)?;
            let added = sqlite::init(&path, &tables)?;
            let st = sqlite::status(&path)?;
            for t in &added {
                eprintln!("mooncdc-capture: capturing table {t:?}");
            }
            println!("{}", st.identity);
            Ok(ExitCode::SUCCESS)
        }
        Some(CaptureCommand::Verify { source }) => {
            let drift = sqlite::verify(&source_path(&source)?)?;
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
        Some(CaptureCommand::Upgrade { source }) => {
            for line in sqlite::upgrade(&source_path(&source)?)? {
                eprintln!("mooncdc-capture: {line}");
            }
            Ok(ExitCode::SUCCESS)
        }
        Some(CaptureCommand::Status { source }) => {
            let st = sqlite::status(&source_path(&source)?)?;
            let mut out = cli::stdout();
            writeln!(out, "identity: {}", st.identity)?;
            writeln!(out, "acknowledged: {}", st.acknowledged)?;
            writeln!(out, "high water: {}", st.high_water)?;
            writeln!(out, "backlog: {} changes", st.backlog)?;
            writeln!(out, "tables: {}", st.tables.join(", "))?;
            cli::finish_output(out)?;
            Ok(ExitCode::SUCCESS)
        }
        Some(CaptureCommand::Ack {
            source,
            through,
            cursor_file,
            cursor,
        }) => {
            let path = source_path(&source)?;
            let c = match (through, cursor_file, cursor) {
                (Some(seq), _, _) => {
                    let n = mooncdc::wire::model::parse_sequence(&seq).map_err(Error::usage)?;
                    let st = sqlite::status(&path)?;
                    Cursor::new(st.identity, n)
                }
                (None, f, c) => cli::cursor_arg(c.as_deref(), f.as_deref())?.ok_or_else(|| {
                    Error::usage("ack needs --through, --cursor-file or --cursor")
                })?,
            };
            let at = sqlite::ack(&path, &c)?;
            eprintln!("mooncdc-capture: acknowledged through {at}");
            Ok(ExitCode::SUCCESS)
        }
    }
}

fn read(r: ReadArgs) -> anyhow::Result<ExitCode> {
    let source = r
        .source
        .ok_or_else(|| Error::usage("--source is required (e.g. --source sqlite:app.db)"))?;
    let path = source_path(&source)?;
    let after = cli::cursor_arg(r.after.after.as_deref(), r.after.after_file.as_deref())?;
    if r.max_events == Some(0) || r.max_bytes == Some(0) {
        return Err(Error::usage("--max-events and --max-bytes must be positive").into());
    }
    let limits = ReadLimits {
        max_events: r.max_events,
        max_bytes: r.max_bytes,
    };
    let mut out = cli::stdout();
    if r.follow {
        let target = match &r.ack_from_target {
            Some(t) => Some(url::parse(t)?.sqlite_path("target")?.clone()),
            None => None,
        };
        let get = |p: &std::path::Path| mooncdc::target::sqlite::read_cursor(p);
        let ack_fn;
        let ack: Option<&dyn Fn() -> mooncdc::Result<Option<Cursor>>> = match &target {
            Some(p) => {
                ack_fn = move || if p.exists() { get(p) } else { Ok(None) };
                Some(&ack_fn)
            }
            None => None,
        };
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
    cli::finish_output(out)?;
    Ok(ExitCode::SUCCESS)
}
