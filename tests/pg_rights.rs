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
