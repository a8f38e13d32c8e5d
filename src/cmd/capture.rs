//! `mooncdc-capture`: install, check, read and acknowledge change capture.

use crate::cli;
use crate::cli::args::{CaptureArgs, CaptureCommand, PgArgs, ReadArgs, TextOrJson};
use crate::endpoint;
use crate::error::Error;
use crate::source::{ReadLimits, Source};
use crate::wire::Cursor;
use std::io::Write;
use std::process::ExitCode;
use std::time::Duration;

fn open(url: &str, pg: &PgArgs) -> crate::error::Result<Box<dyn Source>> {
    endpoint::parse(url)?.source(&super::snapshot::pg_names(pg))
}

pub fn run(a: CaptureArgs) -> crate::error::Result<ExitCode> {
    crate::log::set_quiet(a.quiet);
    match a.command {
        None => read(a.read, a.verbose, a.quiet),
        Some(CaptureCommand::Read(r)) => read(r, a.verbose, a.quiet),
        Some(CaptureCommand::Init {
            source,
            tables,
            ddl,
            failover,
            no_slot,
            replica_identity,
            pg,
        }) => {
            let mut src = open(&source, &pg)?;
            src.set_replica_identity(&replica_identity)?;
            src.init_options(ddl, failover)?;
            let (identity, tables) = if no_slot {
                src.init_without_slot(&tables)?
            } else {
                src.init(&tables)?
            };
            for t in &tables {
                crate::log::info(&format!("capturing table {t:?}"));
            }
            if ddl {
                crate::log::info(&src.install_ddl()?);
            }
            if failover {
                crate::log::info(&src.make_failover()?);
            }
            println!("{identity}");
            Ok(ExitCode::SUCCESS)
        }
        Some(CaptureCommand::Backfill {
            source,
            tables,
            all,
            resync,
            pg,
        }) => {
            let src = open(&source, &pg)?;
            for t in src.backfill(&tables, all, resync)? {
                crate::log::info(&format!(
                    "{} of table {t:?} requested: a following capture brings its rows into the stream",
                    if resync { "resync" } else { "backfill" }
                ));
            }
            Ok(ExitCode::SUCCESS)
        }
        Some(CaptureCommand::Grants { source, role, pg }) => {
            let script = open(&source, &pg)?.grants(&role)?;
            let mut out = cli::stdout();
            write!(out, "{script}")
                .map_err(|e| crate::error::Error::io("cannot write output", e))?;
            cli::finish_output(out)?;
            Ok(ExitCode::SUCCESS)
        }
        Some(CaptureCommand::Verify {
            source,
            output_format,
            pg,
        }) => {
            // 1 is drift only; anything else that stops the check (a missing
            // database, a server that is down) is trouble, 2, as diff(1).
            let (drift, idents) = match open(&source, &pg).and_then(|s| s.verify()) {
                Ok(v) => (v.drift, v.replica_identities),
                Err(e) => {
                    cli::report_error(&e);
                    return Ok(ExitCode::from(2));
                }
            };
            if output_format == TextOrJson::Json {
                let idents: Vec<serde_json::Value> = (idents.iter())
                    .map(|(t, w, m)| serde_json::json!({"table": t, "identity": w, "meaning": m}))
                    .collect();
                let mut o = serde_json::json!({"current": drift.is_empty(), "drift": drift});
                if !idents.is_empty() {
                    o["replica_identity"] = idents.into();
                }
                println!("{o}");
            } else {
                for (t, _, m) in &idents {
                    println!("table {t}: replica identity {m}");
                }
                if drift.is_empty() {
                    println!("capture is installed and current");
                }
            }
            if output_format == TextOrJson::Text {
                for d in &drift {
                    crate::log::warn(&format!("drift: {d}"), &[]);
                }
            }
            Ok(if drift.is_empty() {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            })
        }
        Some(CaptureCommand::Upgrade { source, pg }) => {
            for line in open(&source, &pg)?.upgrade()? {
                crate::log::info(&line);
            }
            Ok(ExitCode::SUCCESS)
        }
        Some(CaptureCommand::Migrate {
            source,
            sql,
            statements,
        }) => {
            let sql = match sql {
                Some(f) => std::fs::read_to_string(&f).map_err(|e| {
                    Error::io("cannot read the migration", e).in_file(&f.display().to_string())
                })?,
                None => statements.join(" "),
            };
            if sql.trim().is_empty() {
                return Err(Error::usage(
                    "migrate needs SQL: --sql FILE, or the statements after --",
                ));
            }
            for line in endpoint::parse(&source)?
                .source(&endpoint::PgNames::default())?
                .migrate(&sql)?
            {
                crate::log::info(&line);
            }
            Ok(ExitCode::SUCCESS)
        }
        Some(CaptureCommand::Status {
            source,
            output_format,
            pg,
        }) => {
            let st = open(&source, &pg)?.status()?;
            let mut out = cli::stdout();
            let written = |r: std::io::Result<()>| {
                r.map_err(|e| crate::error::Error::io("cannot write output", e))
            };
            if output_format == TextOrJson::Json {
                // Each figure as the source typed it (counts as numbers below
                // 2^53, a cursor as an object, flags as booleans).
                let mut o = serde_json::Map::new();
                o.insert("identity".into(), st.identity.clone().into());
                for f in &st.fields {
                    o.insert(f.name.replace(' ', "_"), f.value.clone());
                }
                written(writeln!(out, "{}", serde_json::Value::Object(o)))?;
            } else {
                written(writeln!(out, "identity: {}", st.identity))?;
                for f in &st.fields {
                    written(writeln!(out, "{}: {}", f.name, f.text))?;
                }
            }
            cli::finish_output(out)?;
            Ok(ExitCode::SUCCESS)
        }
        Some(CaptureCommand::Ack {
            source,
            through,
            cursor_file,
            cursor,
            pg,
        }) => {
            let src = open(&source, &pg)?;
            let given = cli::cursor_arg(cursor.as_deref(), cursor_file.as_deref())?;
            let c = match (through, given) {
                (Some(seq), _) => {
                    let n = crate::wire::model::parse_sequence(&seq).map_err(Error::usage)?;
                    Cursor::new(src.status()?.identity, n)
                }
                (None, Some(c)) => c,
                (None, None) => {
                    return Err(Error::usage(
                        "ack needs --through, --cursor-file or --cursor",
                    ))
                }
            };
            crate::log::info(&src.ack(&c)?);
            Ok(ExitCode::SUCCESS)
        }
    }
}

fn read(r: ReadArgs, verbose: bool, quiet: bool) -> crate::error::Result<ExitCode> {
    crate::log::set_json(r.log_format == crate::cli::args::LogFormat::Json);
    let url = r
        .source
        .clone()
        .ok_or_else(|| Error::usage("--source is required (e.g. --source sqlite:app.db)"))?;
    if let Some(p) = r.messages.iter().find(|p| p.starts_with("mooncdc")) {
        return Err(Error::usage(format!(
            "--messages {p:?}: prefixes starting with \"mooncdc\" are reserved for the capture's own messages"
        )));
    }
    if !r.messages.is_empty() && matches!(endpoint::parse(&url)?, endpoint::Endpoint::Sqlite(_)) {
        return Err(Error::usage(
            "--messages: SQLite has no logical messages (they are PostgreSQL's pg_logical_emit_message)",
        ));
    }
    let src = open(&url, &r.pg)?;
    let after = cli::cursor_arg(r.after.after.as_deref(), r.after.after_file.as_deref())?;
    if r.max_events == Some(0)
        || r.max_bytes == Some(0)
        || r.max_line_bytes == Some(0)
        || r.backfill_chunk_rows == 0
    {
        return Err(Error::usage(
            "--max-events, --max-bytes, --max-line-bytes and --backfill-chunk-rows must be positive",
        ));
    }
    if r.spool_memory == 0 || r.max_spool_bytes == Some(0) {
        return Err(Error::usage(
            "--spool-memory and --max-spool-bytes must be positive",
        ));
    }
    crate::ops::spool::set_dir(r.spool_dir.as_deref())?;
    let limits = ReadLimits {
        max_events: r.max_events,
        max_bytes: r.max_bytes,
        max_line_bytes: r.max_line_bytes,
        pgoutput_v1: r.pgoutput_protocol == crate::cli::args::PgoutputProtocol::V1,
        stream_budget: crate::source::postgres::StreamBudget {
            memory: r.spool_memory,
            max_bytes: r.max_spool_bytes,
        },
        // Read once for the whole run.
        messages: Vec::leak(r.messages.clone()),
    };
    // The target whose durable cursor --follow acknowledges up to.
    let held = match &r.ack_from_target {
        None => None,
        Some(t) => Some(endpoint::parse(t)?.cursor_reader()?),
    };
    if let Some(addr) = &r.metrics_listen {
        crate::metrics::serve(
            addr,
            "capture",
            Duration::from_millis(r.stall_timeout_ms.max(1)),
        )?;
    }
    // Progress (a read that ends, standard error a terminal): the place in
    // the log against the high water. The watch sits under the buffer, so
    // a batch's -v line comes once its bytes went out, not before.
    let progress = cli::Progress::new("log", quiet || r.follow);
    let progress = progress.enabled().then_some(progress);
    let watch = cli::Watch::new(std::io::stdout().lock(), verbose && !quiet, progress);
    let mut buffered = std::io::BufWriter::with_capacity(1 << 16, watch);
    let out: &mut dyn std::io::Write = &mut buffered;
    if r.follow {
        // A stop ends the batch being written, then exits 0.
        crate::util::stop::install();
        src.follow(
            after.as_ref(),
            limits,
            crate::source::FollowTiming {
                poll: Duration::from_millis(r.poll_ms.max(1)),
                idle_batch: Duration::from_millis(r.idle_batch_ms.max(1)),
                max_retries: r.max_retries,
                retry_delay: Duration::from_millis(r.retry_delay_ms.max(1)),
                heartbeat: r.heartbeat_ms.map(|ms| Duration::from_millis(ms.max(1))),
                receive_timeout: (r.receive_timeout_ms > 0)
                    .then(|| Duration::from_millis(r.receive_timeout_ms)),
                backfill_chunk_rows: r.backfill_chunk_rows,
            },
            held.as_deref(),
            out,
        )?;
    } else {
        src.read(after.as_ref(), limits, out)?;
    }
    let mut watch = buffered
        .into_inner()
        .map_err(|e| Error::io("cannot write output", e.into_error()))?;
    watch.done();
    cli::finish_output(watch)?;
    Ok(ExitCode::SUCCESS)
}
