//! The rights docs/POSTGRES.md ("Rights") names, through the real binaries
//! against a throwaway cluster: `init` run by the tables' owner, and
//! snapshot, reads, status and audit by a capture role that holds only the
//! documented grants, end equal.

mod common;

use common::pg::{self, lit, url_encode};
use common::sqlite::{exec, expect, pipeline, shell_quote, APPLY, AUDIT, CAPTURE};

/// The capture role of docs/POSTGRES.md, "Rights" (cluster-wide: made once).
const CAP: &str = "mooncdc_cap_docs";
const CAP_PASSWORD: &str = "cap pw docs";

#[test]
fn the_documented_grants_are_enough_for_a_capture_role() {
    let db = pg::db("rights");
    let owner = db.session();
    owner.exec("CREATE TABLE items (id int PRIMARY KEY, name text)");
    owner.exec("INSERT INTO items SELECT g, 'item ' || g FROM generate_series(1, 100) g");
    owner.exec("CREATE SCHEMA shop");
    owner.exec("CREATE TABLE shop.orders (id bigint PRIMARY KEY, item int, qty int)");
    owner.exec("INSERT INTO shop.orders VALUES (1, 1, 2), (2, 5, 1)");
    // As a superuser, once: the role.
    db.cluster.admin(&format!(
        "DO $$ BEGIN IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = '{CAP}') THEN \
         CREATE ROLE {CAP} LOGIN REPLICATION PASSWORD {}; END IF; END $$",
        lit(CAP_PASSWORD)
    ));
    // As the tables' owner: the grants, word for word as the docs give them.
    for sql in [
        format!("GRANT CONNECT ON DATABASE {} TO {CAP}", db.dbname),
        format!("GRANT USAGE ON SCHEMA public, shop TO {CAP}"),
        format!("GRANT SELECT ON ALL TABLES IN SCHEMA public, shop TO {CAP}"),
    ] {
        owner.exec(&sql);
    }
    // init as the owner (it has REPLICATION here).
    let slot = "s_rights";
    pg::init_capture(&db.url(), slot, &["public.items", "shop.orders"]);
    let cap_url = format!(
        "postgres://{CAP}:{}@127.0.0.1:{}/{}",
        url_encode(CAP_PASSWORD),
        db.cluster.port,
        db.dbname
    );
    let dir = tempfile::tempdir().unwrap();
    let target = format!("sqlite:{}", dir.path().join("proj.db").display());
    let r = pg::snapshot_into(&cap_url, slot, &target);
    expect(&r, 0, "snapshot as the capture role");
    owner.exec("UPDATE items SET name = 'renamed' WHERE id = 3");
    owner.exec("INSERT INTO shop.orders VALUES (3, 7, 9)");
    let r = pipeline(&format!(
        "{{capture}} --source {u} --slot {slot} --after \"$({{apply}} cursor --target {t})\" | {{apply}} --target {t} -q",
        u = shell_quote(&cap_url),
        t = shell_quote(&target)
    ));
    expect(&r, 0, "a read as the capture role");
    let r = exec(
        CAPTURE,
        &["status", "--source", &cap_url, "--slot", slot],
        None,
    );
    expect(&r, 0, "status as the capture role");
    let r = exec(
        AUDIT,
        &["--source", &cap_url, "--slot", slot, "--target", &target],
        None,
    );
    expect(&r, 0, "audit as the capture role");
    assert!(
        r.stdout_str().trim_end().ends_with("equal"),
        "{}",
        r.stdout_str()
    );
    let r = exec(APPLY, &["cursor", "--target", &target], None);
    expect(&r, 0, "apply cursor");
}

/// `capture grants --role` prints a script that is enough: run as printed,
/// the new role snapshots and audits. A role that lacks a right is told
/// which GRANT, before anything is read; init by a role that does not own
/// the tables is refused the same way, before anything is changed.
#[test]
fn grants_prints_a_script_that_is_enough_and_missing_rights_are_named() {
    let db = pg::db("grants");
    let owner = db.session();
    owner.exec("CREATE SCHEMA shop");
    owner.exec("CREATE TABLE shop.orders (id bigint PRIMARY KEY, qty int)");
    owner.exec("INSERT INTO shop.orders VALUES (1, 2), (2, 3)");
    let slot = "s_grants";
    pg::init_capture(&db.url(), slot, &["shop.orders"]);
    let role = "mooncdc_cap_script";
    let url_as = |role: &str, pw: &str| {
        format!(
            "postgres://{role}:{}@127.0.0.1:{}/{}",
            url_encode(pw),
            db.cluster.port,
            db.dbname
        )
    };
    let dir = tempfile::tempdir().unwrap();
    let target = format!("sqlite:{}", dir.path().join("proj.db").display());
    // A role that may read slots but no table: the snapshot names the GRANTs.
    db.cluster.admin(&format!(
        "DO $$ BEGIN IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = '{role}') THEN \
         CREATE ROLE {role} LOGIN REPLICATION PASSWORD 'change me'; END IF; END $$"
    ));
    db.cluster.admin(&format!(
        "GRANT CONNECT ON DATABASE {} TO {role}",
        db.dbname
    ));
    let r = pg::snapshot_into(&url_as(role, "change me"), slot, &target);
    expect(&r, 1, "a snapshot without the rights");
    assert!(
        r.stderr.contains("GRANT USAGE ON SCHEMA \"shop\"")
            && r.stderr.contains("GRANT SELECT ON \"shop\".\"orders\"")
            && r.stderr.contains("mooncdc-capture grants --role"),
        "{}",
        r.stderr
    );
    // A read (the follower's first step) names them too.
    let r = exec(
        CAPTURE,
        &["--source", &url_as(role, "change me"), "--slot", slot],
        None,
    );
    expect(&r, 1, "a read without the rights");
    assert!(
        r.stderr.contains("may not run a read")
            && r.stderr.contains("GRANT SELECT ON \"shop\".\"orders\""),
        "{}",
        r.stderr
    );
    // init by a role that owns none of the tables.
    let r = exec(
        CAPTURE,
        &[
            "init",
            "--source",
            &url_as(role, "change me"),
            "--slot",
            "s_grants_other",
            "--publication",
            "pub_other",
            "--table",
            "shop.orders",
        ],
        None,
    );
    expect(&r, 1, "init by a role that does not own the table");
    assert!(
        r.stderr.contains("ownership of table") && r.stderr.contains("nothing was changed"),
        "{}",
        r.stderr
    );
    assert_eq!(
        owner.value("SELECT count(*) FROM pg_publication WHERE pubname = 'pub_other'"),
        "0"
    );
    // The printed script, run as printed (here all of it as a superuser).
    let r = exec(
        CAPTURE,
        &[
            "grants",
            "--source",
            &db.url(),
            "--slot",
            slot,
            "--role",
            role,
        ],
        None,
    );
    expect(&r, 0, "capture grants");
    let script = r.stdout_str();
    assert!(
        script.contains("GRANT SELECT ON \"shop\".\"orders\""),
        "{script}"
    );
    db.cluster
        .psql_as("postgres", pg::SUPERUSER_PASSWORD, &db.dbname, &script);
    let r = pg::snapshot_into(&url_as(role, "change me"), slot, &target);
    expect(&r, 0, "a snapshot with the printed grants");
    let audit = || {
        let src = url_as(role, "change me");
        exec(
            AUDIT,
            &["--source", &src, "--slot", slot, "--target", &target],
            None,
        )
    };
    expect(&audit(), 0, "an audit with the printed grants");
    // The right taken away again: the audit names it.
    owner.exec(&format!("REVOKE SELECT ON shop.orders FROM {role}"));
    let r = audit();
    expect(&r, 2, "an audit without the rights");
    assert!(r.stderr.contains("GRANT SELECT ON"), "{}", r.stderr);
}
