//! The first hour with PostgreSQL: the PostgreSQL → ClickHouse walkthrough
//! (docs/QUICKSTART.md) as a new user runs it,
//! `examples/postgres-to-clickhouse.sh` word for word against a throwaway
//! PostgreSQL and ClickHouse, with the capture role and grants the page
//! gives (and the page shows that very script); and stops that say one
//! thing once: a capture that fails is not followed by apply's complaint
//! about an empty input, and an idle follower stopped by SIGTERM ends its
//! pipeline with status 0 (docs/OPERATIONS.md §3, §4).

mod common;

use common::pg::{self, lit, url_encode};
use common::sqlite::{bin, exec, expect, pipeline, shell_quote, APPLY, CAPTURE};
use std::process::{Command, Stdio};
use std::time::Duration;

const CAP_PASSWORD: &str = "change me";

#[test]
fn the_postgres_to_clickhouse_walkthrough_runs_as_written() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let script = root.join("examples/postgres-to-clickhouse.sh");
    let text = std::fs::read_to_string(&script).unwrap();
    let page = std::fs::read_to_string(root.join("docs/QUICKSTART.md")).unwrap();
    assert!(
        page.contains(&format!("```sh\n{text}```")),
        "docs/QUICKSTART.md does not show examples/postgres-to-clickhouse.sh as it is"
    );
    let db = pg::db("quickstart");
    // The page's roles: as a superuser, then as the owner.
    db.cluster.admin(&format!(
        "DO $$ BEGIN IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'mooncdc_capture') THEN \
         CREATE ROLE mooncdc_capture LOGIN REPLICATION PASSWORD {}; END IF; END $$",
        lit(CAP_PASSWORD)
    ));
    let owner = db.session();
    for sql in [
        format!("GRANT CONNECT ON DATABASE {} TO mooncdc_capture", db.dbname),
        "GRANT USAGE ON SCHEMA public TO mooncdc_capture".to_string(),
        "GRANT SELECT ON ALL TABLES IN SCHEMA public TO mooncdc_capture".to_string(),
        "ALTER DEFAULT PRIVILEGES IN SCHEMA public GRANT SELECT ON TABLES TO mooncdc_capture"
            .to_string(),
    ] {
        owner.exec(&sql);
    }
    let cap = format!(
        "postgres://mooncdc_capture:{}@127.0.0.1:{}/{}",
        url_encode(CAP_PASSWORD),
        db.cluster.port,
        db.dbname
    );
    let ch = common::ch::db("quickstart");
    let tools = bin(CAPTURE).parent().unwrap().to_path_buf();
    let psql = pg::pg_bin("psql").parent().unwrap().to_path_buf();
    let path = format!(
        "{}:{}:{}",
        tools.display(),
        psql.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let out = Command::new("bash")
        .arg(&script)
        .env("OWNER", db.url())
        .env("PG", &cap)
        .env("CH", ch.url())
        .env("PATH", path)
        .output()
        .expect("run the walkthrough");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "the walkthrough failed ({}):\n{stdout}\n{stderr}",
        out.status
    );
    let lines: Vec<&str> = stdout.lines().collect();
    assert!(
        lines.len() >= 2
            && lines[lines.len() - 2] == "equal"
            && lines[lines.len() - 1].starts_with("LSN "),
        "{stdout}\n{stderr}"
    );
    eprintln!("{stdout}\n{stderr}");
    // One line of cause for anything that went wrong, and nothing went.
    assert!(!stderr.contains("error"), "{stderr}");
    assert_eq!(
        ch.query("SELECT count() FROM public_orders__current FORMAT TabSeparated")
            .trim(),
        "5000"
    );
}

/// A capture that fails before its first batch, piped into apply: the
/// pipeline fails (pipefail), and the only message is capture's.
#[test]
fn a_failed_capture_is_said_once() {
    let db = pg::db("said_once");
    db.exec("CREATE TABLE a (id int PRIMARY KEY)");
    pg::init_capture(&db.url(), "s_said_once", &["public.a"]);
    let dir = tempfile::tempdir().unwrap();
    let t = format!("sqlite:{}", dir.path().join("proj.db").display());
    let r = pipeline(&format!(
        "{{capture}} --source {u} --slot no_such_slot --after '{{\"source\":\"x\",\"sequence\":\"0\"}}' | {{apply}} --target {t}",
        u = shell_quote(&db.url()),
        t = shell_quote(&t)
    ));
    expect(&r, 1, "a capture that fails, into apply");
    assert!(r.stderr.contains("mooncdc-capture:"), "{}", r.stderr);
    assert!(!r.stderr.contains("mooncdc-apply"), "{}", r.stderr);
}

/// SIGTERM to a PostgreSQL follower that has written no batch yet (nothing
/// changed since it started): it writes an empty one at its start, so apply
/// ends with the stream and both exit 0.
#[test]
fn sigterm_to_an_idle_postgres_follower_ends_its_pipeline_with_status_0() {
    let db = pg::db("idle_stop");
    db.exec("CREATE TABLE a (id int PRIMARY KEY); INSERT INTO a VALUES (1)");
    let slot = "s_idle_stop";
    pg::init_capture(&db.url(), slot, &["public.a"]);
    let dir = tempfile::tempdir().unwrap();
    let t = format!("sqlite:{}", dir.path().join("proj.db").display());
    expect(
        &pg::snapshot_into(&db.url(), slot, &t),
        0,
        "snapshot | apply",
    );
    let after = exec(APPLY, &["cursor", "--target", &t], None)
        .stdout_str()
        .trim()
        .to_string();
    let url = db.url();
    let mut capture = Command::new(bin(CAPTURE))
        .args([
            "--source", &url, "--slot", slot, "--follow", "--after", &after,
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let apply = Command::new(bin(APPLY))
        .args(["--target", &t, "-q"])
        .stdin(Stdio::from(capture.stdout.take().unwrap()))
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_secs(2));
    Command::new("kill")
        .args(["-TERM", &capture.id().to_string()])
        .status()
        .unwrap();
    let c = capture.wait_with_output().unwrap();
    let a = apply.wait_with_output().unwrap();
    assert_eq!(
        (c.status.code(), a.status.code()),
        (Some(0), Some(0)),
        "capture: {}\napply: {}",
        String::from_utf8_lossy(&c.stderr),
        String::from_utf8_lossy(&a.stderr)
    );
    let a_err = String::from_utf8_lossy(&a.stderr);
    assert!(a_err.contains("1 batch, 0 events applied"), "{a_err}");
    let r = exec(APPLY, &["cursor", "--target", &t], None);
    assert_eq!(
        r.stdout_str().trim(),
        after,
        "the cursor stays where it was"
    );
}
