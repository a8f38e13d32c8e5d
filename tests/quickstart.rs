//! The PostgreSQL → ClickHouse walkthrough (docs/QUICKSTART-CLICKHOUSE.md)
//! as a new user runs it: `examples/postgres-to-clickhouse.sh`, word for
//! word, against a throwaway PostgreSQL and ClickHouse, with the capture
//! role and grants the page gives; and the page shows that very script.

mod common;

use common::pg::{self, lit, url_encode};
use common::sqlite::{bin, CAPTURE};
use std::process::Command;

const CAP_PASSWORD: &str = "change me";

#[test]
fn the_postgres_to_clickhouse_walkthrough_runs_as_written() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let script = root.join("examples/postgres-to-clickhouse.sh");
    let text = std::fs::read_to_string(&script).unwrap();
    let page = std::fs::read_to_string(root.join("docs/QUICKSTART-CLICKHOUSE.md")).unwrap();
    assert!(
        page.contains(&format!("```sh\n{text}```")),
        "docs/QUICKSTART-CLICKHOUSE.md does not show examples/postgres-to-clickhouse.sh as it is"
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
