//! The man pages' own sections (EXAMPLES, ENVIRONMENT, EXIT STATUS, SEE
//! ALSO) for each tool and subcommand, the rest coming from the definitions,
//! and the definitions as the binaries parse with them.

use super::*;

/// Every tool's command definition, by binary name, as the binaries parse
/// with it (each subcommand's `--help` ending with an example: [`with_sub_help`]).
pub fn commands() -> Vec<clap::Command> {
    definitions().into_iter().map(with_sub_help).collect()
}

/// A tool's definition with each subcommand's `--help` ending, as the
/// tools' own do, with an example and the exit statuses, from
/// [`sub_man_sections`].
pub fn with_sub_help(mut cmd: clap::Command) -> clap::Command {
    let tool = cmd.get_name().to_string();
    let subs: Vec<String> = cmd
        .get_subcommands()
        .map(|s| s.get_name().to_string())
        .collect();
    for sub in subs {
        let sections = sub_man_sections(&tool, &sub);
        let section = |title: &str| {
            sections
                .iter()
                .find(|(t, _)| *t == title)
                .map(|(_, text)| text.clone())
                .unwrap_or_default()
        };
        let Some(example) = section("EXAMPLES")
            .lines()
            .next()
            .map(|l| l.trim_start_matches("$ ").to_string())
        else {
            continue;
        };
        let text = format!(
            "Example: {example}\n\nExit status: {}",
            section("EXIT STATUS")
        );
        cmd = cmd.mut_subcommand(&sub, |s| s.after_help(text));
    }
    cmd
}

/// The clap definitions as derived.
fn definitions() -> Vec<clap::Command> {
    vec![
        CaptureArgs::command(),
        SnapshotArgs::command(),
        SplitArgs::command(),
        MergeArgs::command(),
        CompactArgs::command(),
        ApplyArgs::command(),
        AuditArgs::command(),
    ]
}

/// The sections a subcommand's man page (`<tool>-<sub>.1`) has beyond what
/// the definitions give: EXAMPLES, ENVIRONMENT (where it opens a database),
/// EXIT STATUS and SEE ALSO, as [`man_sections`] gives them for a tool.
pub fn sub_man_sections(tool: &str, sub: &str) -> Vec<(&'static str, String)> {
    let examples: &[&str] = match (tool, sub) {
        ("mooncdc-capture", "init") => &[
            "$ mooncdc-capture init --source sqlite:app.db",
            "$ mooncdc-capture init --source postgres://app@db/shop --table public.orders --ddl",
        ],
        ("mooncdc-capture", "verify") => &[
            "$ mooncdc-capture verify --source sqlite:app.db",
            "$ mooncdc-capture verify --source postgres://app@db/shop --output-format json",
        ],
        ("mooncdc-capture", "upgrade") => &["$ mooncdc-capture upgrade --source sqlite:app.db"],
        ("mooncdc-capture", "migrate") => &[
            "$ mooncdc-capture migrate --source sqlite:app.db -- \"ALTER TABLE items DROP COLUMN stock\"",
            "$ mooncdc-capture migrate --source sqlite:app.db --sql migrations/0042.sql",
        ],
        ("mooncdc-capture", "backfill") => &[
            "$ mooncdc-capture backfill --source sqlite:app.db --table orders",
            "$ mooncdc-capture backfill --source postgres://app@db/shop --table public.orders --resync",
        ],
        ("mooncdc-capture", "grants") => &[
            "$ mooncdc-capture grants --source postgres://app_owner@db/shop --role mooncdc_capture",
            "$ mooncdc-capture grants --source postgres://app_owner@db/shop --role mooncdc_capture | psql postgres://postgres@db/shop",
        ],
        ("mooncdc-capture", "status") => &[
            "$ mooncdc-capture status --source sqlite:app.db",
            "$ mooncdc-capture status --source postgres://app@db/shop --output-format json",
        ],
        ("mooncdc-capture", "ack") => &[
            "$ mooncdc-capture ack --source sqlite:app.db --cursor \"$(mooncdc-apply cursor --target sqlite:proj.db)\"",
            "$ mooncdc-capture ack --source sqlite:app.db --through 1",
        ],
        ("mooncdc-capture", "read") => &[
            "$ mooncdc-capture read --source sqlite:app.db --after \"$(mooncdc-apply cursor --target sqlite:proj.db)\" | mooncdc-apply --target sqlite:proj.db",
            "$ mooncdc-capture read --source postgres://app@db/shop --follow --ack-from-target sqlite:proj.db | mooncdc-apply --target sqlite:proj.db",
            "$ mooncdc-capture read --source postgres://app@db/shop --messages outbox --follow | mooncdc-split --output-format objects | jq --unbuffered -c 'select(.kind == \"message\")'",
        ],
        ("mooncdc-apply", "cursor") => &[
            "$ mooncdc-apply cursor --target sqlite:proj.db",
            "$ mooncdc-apply cursor --target sqlite:proj.db --position",
            "$ mooncdc-apply cursor --target clickhouse://default@localhost:8123/shop --source-identity sqlite:725cfa4f-3f24-4b2e-b4c7-747a3e92fb4a",
        ],
        ("mooncdc-apply", "cleanup") => &[
            "$ mooncdc-apply cleanup --target clickhouse://default@localhost:8123/shop",
            "$ mooncdc-apply cleanup --target clickhouse://default@localhost:8123/shop --table public.orders",
        ],
        _ => &[],
    };
    let exit = match (tool, sub) {
        ("mooncdc-capture", "verify") => "0 capture is installed and current; 1 drift, and only drift (one drift: line each on standard error, or \"current\":false with --output-format json); 2 trouble: a missing database, a server that is down, a bad option.",
        ("mooncdc-capture", "ack") => "0 acknowledged (also: a position at or before the one recorded, which changes nothing); 1 a cursor of another source, a position beyond the high water or the flushed WAL, or a failed operation; 2 usage.",
        ("mooncdc-capture", "migrate") => "0 migrated and capture rebuilt; 1 a migration that fails or changes rows (nothing of it is kept), or a failed operation; 2 usage.",
        ("mooncdc-capture", "backfill") => "0 every request recorded (a following capture carries them out); 1 a table being backfilled already, or backfilled before without --resync, or a failed operation (nothing recorded); 2 usage, a table that does not exist.",
        ("mooncdc-apply", "cursor") => "0 the cursor printed; 1 the target holds no cursor, or one of another source than --source-identity, or a failed operation; 2 usage.",
        ("mooncdc-apply", "cleanup") => "0 every table cleaned or skipped (a line each on standard output); 1 a failed operation (the tables before it were cleaned); 2 usage: not a ClickHouse target, the history engine, a table the database does not hold.",
        _ => "0 success; 1 bad data or a failed operation; 2 usage.",
    };
    let env = "PGHOST, PGHOSTADDR, PGPORT, PGUSER, PGPASSWORD, PGDATABASE, PGSERVICE, PGSERVICEFILE, PGSYSCONFDIR, PGPASSFILE, PGSSLMODE, PGSSLROOTCERT, PGAPPNAME, PGCONNECT_TIMEOUT: as libpq, for postgres:// URLs (the URL wins, then a service, then the environment).";
    let env = if tool == "mooncdc-apply" {
        format!("{env} CLICKHOUSE_PASSWORD: the password of a clickhouse:// URL that has none.")
    } else {
        env.to_string()
    };
    let mut see_also = vec![format!("{tool}(1)")];
    if let Some(cmd) = definitions().into_iter().find(|c| c.get_name() == tool) {
        see_also.extend(
            cmd.get_subcommands()
                .filter(|s| !s.is_hide_set() && s.get_name() != sub && s.get_name() != "help")
                .map(|s| format!("{tool}-{}(1)", s.get_name())),
        );
    }
    vec![
        ("EXAMPLES", examples.join("\n")),
        ("ENVIRONMENT", env),
        ("EXIT STATUS", exit.to_string()),
        ("SEE ALSO", see_also.join(", ")),
    ]
}

/// The sections a man page has beyond what the definitions give: EXAMPLES,
/// ENVIRONMENT, EXIT STATUS, FILES and SEE ALSO, as (title, text) pairs; the
/// text's lines starting with `$ ` are commands.
pub fn man_sections(tool: &str) -> Vec<(&'static str, String)> {
    let examples: &[&str] = match tool {
        "mooncdc-capture" => &[
            "$ mooncdc-capture init --source sqlite:app.db",
            "$ mooncdc-capture --source sqlite:app.db --after \"$(mooncdc-apply cursor --target sqlite:proj.db)\" | mooncdc-apply --target sqlite:proj.db",
            "$ mooncdc-capture --source postgres://app@db/shop --follow --ack-from-target sqlite:proj.db | mooncdc-apply --target sqlite:proj.db",
            "$ mooncdc-capture migrate --source sqlite:app.db -- \"ALTER TABLE items DROP COLUMN stock\"",
        ],
        "mooncdc-snapshot" => &[
            "$ mooncdc-snapshot --source sqlite:app.db | mooncdc-apply --target sqlite:proj.db",
            "$ mooncdc-snapshot --source postgres://app@db/shop --jobs 2 > shop.snapshot.jsonl",
        ],
        "mooncdc-split" => &["$ mooncdc-split --max-events 10000 --output-dir out big.jsonl"],
        "mooncdc-merge" => &[
            "$ mooncdc-merge out/*.jsonl > whole.jsonl",
            "$ mooncdc-capture --source sqlite:app.db | mooncdc-merge --output-format objects | jq -c 'select(.table == \"orders\")'",
        ],
        "mooncdc-compact" => &["$ mooncdc-capture --source sqlite:app.db | mooncdc-compact | mooncdc-apply --target sqlite:proj.db"],
        "mooncdc-apply" => &[
            "$ mooncdc-apply --target sqlite:proj.db changes.jsonl",
            "$ mooncdc-apply --target postgres://report@replica/shop snapshot.jsonl",
            "$ mooncdc-apply cursor --target clickhouse://default@localhost:8123/shop",
        ],
        "mooncdc-audit" => &["$ mooncdc-audit --source sqlite:app.db --target sqlite:proj.db --output-format jsonl | jq 'select(.missing > 0)'"],
        _ => &[],
    };
    let exit = match tool {
        "mooncdc-audit" => "0 equal; 1 different (rows or columns); 2 trouble (any error, usage included).",
        "mooncdc-capture" => "0 success; 1 bad data or a failed operation (verify: drift, and only drift); 2 usage (verify: also any trouble: a missing database, a server that is down).",
        "mooncdc-apply" => "0 success; 1 bad data or a refused batch (apply cursor: no cursor); 2 usage.",
        _ => "0 success; 1 bad data or a failed operation; 2 usage.",
    };
    let env = "PGHOST, PGHOSTADDR, PGPORT, PGUSER, PGPASSWORD, PGDATABASE, PGSERVICE, PGSERVICEFILE, PGSYSCONFDIR, PGPASSFILE, PGSSLMODE, PGSSLROOTCERT, PGAPPNAME, PGCONNECT_TIMEOUT: as libpq, for postgres:// URLs (the URL wins, then a service, then the environment). CLICKHOUSE_PASSWORD: the password of a clickhouse:// URL that has none.";
    let env = match tool {
        "mooncdc-split" | "mooncdc-merge" | "mooncdc-compact" | "mooncdc-apply"
        | "mooncdc-snapshot" | "mooncdc-capture" => format!(
            "{env} TMPDIR: the folder for spool files when --spool-dir names none (else /tmp)."
        ),
        _ => env.to_string(),
    };
    let spool = "A batch larger than 8 MiB is held, past its first 8 MiB, in an unnamed spool file until its commit is checked: in --spool-dir DIR, else TMPDIR, else /tmp (where /tmp is a tmpfs, that is memory). It needs room for about the largest batch; without it the tool fails with exit 1 naming the folder, before anything of the batch is written.";
    let pg_files = "~/.pgpass (or PGPASSFILE): passwords for postgres:// URLs, ignored with a warning when group or others can read it. ~/.pg_service.conf (or PGSERVICEFILE), then pg_service.conf in PGSYSCONFDIR (else /etc/postgresql-common): connection services for service=NAME.";
    let files = match tool {
        "mooncdc-capture" => format!("A SQLite source: capture keeps its change log, triggers and state in tables named _mooncdc_* inside the database itself; init, migrate and upgrade change them in the database's own transactions. A PostgreSQL source: the slot and publication named by --slot and --publication (mooncdc_main by default), and with init --ddl an event trigger; large transactions in progress that the server streams wait until their commit, past --spool-memory (4 MiB) in memory, in unnamed spool files in --spool-dir DIR, else TMPDIR, else /tmp (room for about the largest open transactions; without it the read fails with exit 1 naming the folder, nothing of them written). {pg_files}"),
        "mooncdc-snapshot" => format!("-o FILE is written to a temporary file beside it and renamed into place when whole; a failed snapshot leaves no file. A new file is created mode 0600 (less the umask); a file written over keeps its mode. PostgreSQL with --jobs N (N > 1): each table's rows wait, past 4 MiB each, in unnamed spool files in --spool-dir DIR, else TMPDIR, else /tmp, until every table has been copied: room for about the whole snapshot. {pg_files}"),
        "mooncdc-split" => format!("--output-dir DIR: one file per piece, DIR/PREFIX-START-END.jsonl (or .json, .objects.jsonl), each written to a temporary file and renamed into place when whole; the paths written are printed on standard output. New pieces are created mode 0600 and folders made for them 0700 (less the umask); a piece written over keeps its mode. {spool}"),
        "mooncdc-merge" | "mooncdc-compact" => format!("-o FILE (merge) is written to a temporary file beside it and renamed into place when whole; a new file is created mode 0600 (less the umask), a file written over keeps its mode. {spool}"),
        "mooncdc-apply" => format!("A SQLite target: the projection database file (created mode 0600 less the umask at the first batch or snapshot, removed again if nothing was ever committed to it; an existing file keeps its mode), its -wal and -shm files (with the database file's mode), and the cursor table _mooncdc_cursor in it. A PostgreSQL target: the table mooncdc.cursors. A ClickHouse target: the table _mooncdc_cursor, and a batch's rows past 8 MiB per table held in an unnamed spool file until its commit is checked, in --spool-dir DIR, else TMPDIR, else /tmp (room for about the largest batch's rows; without it the batch fails with exit 1 naming the folder, before anything of it is sent). {pg_files}"),
        "mooncdc-audit" => format!("Reads only; it never creates a database, a table or a file. {pg_files}"),
        _ => String::new(),
    };
    let others: Vec<&str> = [
        "mooncdc-capture",
        "mooncdc-snapshot",
        "mooncdc-split",
        "mooncdc-merge",
        "mooncdc-compact",
        "mooncdc-apply",
        "mooncdc-audit",
    ]
    .into_iter()
    .filter(|t| *t != tool)
    .collect();
    vec![
        ("EXAMPLES", examples.join("\n")),
        ("ENVIRONMENT", env),
        ("EXIT STATUS", exit.to_string()),
        ("FILES", files),
        (
            "SEE ALSO",
            others
                .iter()
                .map(|t| format!("{t}(1)"))
                .collect::<Vec<_>>()
                .join(", "),
        ),
    ]
}
