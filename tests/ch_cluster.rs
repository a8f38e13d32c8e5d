//! A ClickHouse cluster as the target, end to end through the real
//! binaries: a throwaway ZooKeeper and 2 shards × 2 replicas of Debian's
//! `clickhouse-server` 18.16 (`tests/common/cluster.rs`). The tests run one
//! at a time (some stop a replica or ZooKeeper).
//!
//! Covered: snapshot then batches from SQLite (with a column added and one
//! dropped) and from PostgreSQL, audit equal through the `Distributed`
//! table's `__current` view, every key on exactly one shard and on both of
//! its replicas; SIGKILL of apply mid-stream, then a re-run; a replica
//! stopped (apply fails naming the quorum, cursor unchanged; restarted,
//! applied again, equal), then a whole shard; ZooKeeper stopped (clear error, cursor unchanged;
//! back, applied again, equal); URL errors; and, where PyPI's `chdb` is
//! installed, every statement the tools sent parsed by a modern engine.

mod common;

use common::cluster::{cluster, CLUSTER, SERIAL};
use common::sqlite::{bin, exec, expect, pipeline, shell_quote, wait_for_every, Dbs, APPLY, AUDIT};
use std::collections::BTreeSet;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// The target's stored cursor, as `apply cursor` prints it.
fn cursor(url: &str) -> String {
    let r = exec(APPLY, &["cursor", "--target", url], None);
    expect(&r, 0, "apply cursor");
    r.stdout_str()
}

#[track_caller]
fn audit_equal(src: &str, url: &str) -> String {
    let r = exec(AUDIT, &["--source", src, "--target", url], None);
    expect(&r, 0, "audit");
    assert!(r.stdout_str().contains("equal"), "{}", r.stdout_str());
    r.stdout_str()
}

/// The distinct keys node `i` holds in `db.table_local`.
fn keys_on(i: usize, db: &str, table: &str) -> BTreeSet<i64> {
    cluster()
        .query(
            i,
            &format!("SELECT DISTINCT id FROM {db}.{table}_local FORMAT TabSeparated"),
        )
        .lines()
        .map(|l| l.parse().expect("an integer key"))
        .collect()
}

/// Every key of the table is on exactly one shard, and on both of that
/// shard's replicas; returns how many keys there are.
#[track_caller]
fn one_shard_per_key(db: &str, table: &str) -> usize {
    let c = cluster();
    let by_node: Vec<BTreeSet<i64>> = (0..c.nodes.len()).map(|i| keys_on(i, db, table)).collect();
    // Nodes 0, 1: shard 1; nodes 2, 3: shard 2.
    assert_eq!(by_node[0], by_node[1], "the replicas of shard 1 differ");
    assert_eq!(by_node[2], by_node[3], "the replicas of shard 2 differ");
    let both: Vec<&i64> = by_node[0].intersection(&by_node[2]).collect();
    assert!(both.is_empty(), "keys on both shards: {both:?}");
    assert!(
        !by_node[0].is_empty() && !by_node[2].is_empty(),
        "every key on one shard: the sharding does not spread ({} and {} keys)",
        by_node[0].len(),
        by_node[2].len()
    );
    by_node[0].len() + by_node[2].len()
}

/// A SQLite source with `items`, captured.
fn source(rows: u32) -> Dbs {
    let dbs = Dbs::new();
    dbs.src_sql("CREATE TABLE items (id INTEGER PRIMARY KEY, name TEXT, price REAL, data BLOB)");
    dbs.init(&[]);
    if rows == 0 {
        return dbs;
    }
    dbs.src_sql(&format!(
        "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < {rows})
         INSERT INTO items SELECT x, 'item ' || x, x * 0.37, randomblob(x % 9) FROM c"
    ));
    dbs
}

/// `mooncdc-snapshot | mooncdc-apply` into the target.
#[track_caller]
fn snapshot_into(dbs: &Dbs, url: &str) {
    let r = pipeline(&format!(
        "{{snapshot}} --source {} | {{apply}} --target {}",
        shell_quote(&dbs.src_url()),
        shell_quote(url)
    ));
    expect(&r, 0, "snapshot | apply");
}

/// A schema change of the SQLite source through `mooncdc-capture migrate`.
#[track_caller]
fn migrate(dbs: &Dbs, sql: &str) {
    let r = exec(
        "mooncdc-capture",
        &["migrate", "--source", &dbs.src_url(), "--", sql],
        None,
    );
    expect(&r, 0, "migrate");
}

fn catch_up(dbs: &Dbs, url: &str) -> common::Run {
    pipeline(&format!(
        "{{capture}} --source {src} --after \"$({{apply}} cursor --target {url})\" | {{compact}} | {{apply}} --target {url}",
        src = shell_quote(&dbs.src_url()),
        url = shell_quote(url)
    ))
}

#[test]
fn sqlite_snapshot_then_batches_land_once_per_key_and_audit_equal() {
    let _g = serial();
    let c = cluster();
    let url = c.database("from_sqlite");
    let dbs = source(2000);
    snapshot_into(&dbs, &url);
    audit_equal(&dbs.src_url(), &url);
    assert_eq!(one_shard_per_key("from_sqlite", "items"), 2000);
    // The tables are what the docs say.
    let engines = c.query(
        3,
        "SELECT name, engine FROM system.tables WHERE database = 'from_sqlite' ORDER BY name FORMAT TabSeparated",
    );
    assert_eq!(
        engines,
        "_mooncdc_cursor\tReplicatedMergeTree\n_mooncdc_tables\tReplicatedMergeTree\nitems\tDistributed\nitems__current\tView\nitems_local\tReplicatedReplacingMergeTree\n"
    );

    dbs.src_sql(
        "UPDATE items SET price = -price, name = name || ' ✓' WHERE id % 3 = 0;
         DELETE FROM items WHERE id % 7 = 0;
         UPDATE items SET id = id + 10000 WHERE id % 11 = 0;",
    );
    let r = catch_up(&dbs, &url);
    expect(&r, 0, "capture | compact | apply");
    audit_equal(&dbs.src_url(), &url);
    one_shard_per_key("from_sqlite", "items");

    // Schema changes reach every node: a column added, then one dropped.
    migrate(&dbs, "ALTER TABLE items ADD COLUMN qty INTEGER");
    dbs.src_sql("UPDATE items SET qty = id * 2 WHERE id < 500; INSERT INTO items VALUES (-1, 'neg', 0.5, x'00', 7)");
    expect(&catch_up(&dbs, &url), 0, "catch up after the added column");
    audit_equal(&dbs.src_url(), &url);
    migrate(&dbs, "ALTER TABLE items DROP COLUMN data");
    dbs.src_sql("UPDATE items SET qty = 1 WHERE id < 50");
    expect(
        &catch_up(&dbs, &url),
        0,
        "catch up after the dropped column",
    );
    audit_equal(&dbs.src_url(), &url);
    for i in 0..c.nodes.len() {
        let cols = c.query(
            i,
            "SELECT name FROM system.columns WHERE database = 'from_sqlite' AND table = 'items__current' FORMAT TabSeparated",
        );
        assert_eq!(cols, "id\nname\nprice\nqty\n", "node {i}");
    }
    one_shard_per_key("from_sqlite", "items");
    // Any node answers the cursor.
    let through_3 = cursor(&c.url(3, "from_sqlite", ""));
    assert_eq!(through_3, cursor(&url));
}

#[test]
fn sigkill_of_apply_mid_stream_then_rerun_is_equal() {
    let _g = serial();
    let c = cluster();
    let url = c.database("sigkill");
    let dbs = source(0);
    dbs.src_sql(
        "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 30000)
         INSERT INTO items SELECT x, 'row ' || x, x * 0.37, NULL FROM c;
         UPDATE items SET name = name || ' again' WHERE id % 2 = 0;
         DELETE FROM items WHERE id % 5 = 0;",
    );
    let path = dbs.path("stream.jsonl");
    let r = pipeline(&format!(
        "{{capture}} --source {} | {{split}} --max-events 1000 > {}",
        shell_quote(&dbs.src_url()),
        shell_quote(&path.display().to_string())
    ));
    expect(&r, 0, "capture | split");
    let mut child = Command::new(bin(APPLY))
        .args([
            "--target",
            &c.url(0, "sigkill", "max_insert_bytes=4096"),
            "-q",
        ])
        .arg(&path)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start apply");
    // Killed once 5000 rows are in.
    common::sigkill_when(
        &mut child,
        Duration::from_secs(120),
        Duration::from_millis(20),
        None,
        || {
            c.try_query(0, "SELECT count() FROM sigkill.items")
                .ok()
                .and_then(|s| s.trim().parse::<u64>().ok())
                .is_some_and(|n| n >= 5000)
        },
    );
    let held = cursor(&url);
    eprintln!("killed with the cursor at {held}");
    let r = exec(
        APPLY,
        &["--target", &url, &path.display().to_string()],
        None,
    );
    expect(&r, 0, "apply again");
    assert!(r.stderr.contains("skipped as already held"), "{}", r.stderr);
    audit_equal(&dbs.src_url(), &url);
    assert_eq!(one_shard_per_key("sigkill", "items"), 30000);
}

#[test]
fn a_stopped_replica_fails_the_apply_without_moving_the_cursor() {
    let _g = serial();
    let c = cluster();
    let url = c.database("replica_down");
    let dbs = source(500);
    snapshot_into(&dbs, &url);
    let before = cursor(&url);
    // Every key changes, so both shards get rows.
    dbs.src_sql("UPDATE items SET price = price + 1");
    // Shard 2's second replica goes away.
    // (Shard 2's: a shard the URL's node is not in, so the quorum is the one
    // of the Distributed table's remote insert.)
    c.stop_node(3);
    let r = catch_up(&dbs, &url);
    let stopped_run = r.code;
    c.start_node(3);
    assert_eq!(
        stopped_run,
        Some(1),
        "apply with a replica down:\n{}",
        r.stderr
    );
    assert!(
        r.stderr.contains("quorum"),
        "the error should name the quorum:\n{}",
        r.stderr
    );
    assert_eq!(
        cursor(&url),
        before,
        "the cursor moved past rows no quorum holds"
    );
    // Back: the same batches apply, and both replicas of each shard agree.
    wait_for_every(
        60,
        500,
        "apply to succeed after the replica came back",
        || catch_up(&dbs, &url).code == Some(0),
    );
    audit_equal(&dbs.src_url(), &url);
    wait_for_every(60, 200, "the restarted replica to catch up", || {
        keys_on(2, "replica_down", "items") == keys_on(3, "replica_down", "items")
    });
    assert_eq!(one_shard_per_key("replica_down", "items"), 500);

    // A whole shard away: the same, no replica of it answers.
    let before = cursor(&url);
    dbs.src_sql("UPDATE items SET name = name || '!'");
    c.stop_node(2);
    c.stop_node(3);
    let r = catch_up(&dbs, &url);
    c.start_node(2);
    c.start_node(3);
    assert_eq!(r.code, Some(1), "apply with a shard down:\n{}", r.stderr);
    assert!(
        r.stderr.contains("a shard of the cluster is down"),
        "{}",
        r.stderr
    );
    assert_eq!(cursor(&url), before, "the cursor moved with a shard down");
    wait_for_every(
        60,
        500,
        "apply to succeed after the shard came back",
        || catch_up(&dbs, &url).code == Some(0),
    );
    audit_equal(&dbs.src_url(), &url);
}

#[test]
fn zookeeper_stopped_gives_a_clear_error_and_keeps_the_cursor() {
    let _g = serial();
    let c = cluster();
    let url = c.database("zk_down");
    let dbs = source(300);
    snapshot_into(&dbs, &url);
    let before = cursor(&url);
    dbs.src_sql("UPDATE items SET name = 'changed' WHERE id < 200");
    let stream = dbs.path("changes.jsonl");
    let r = pipeline(&format!(
        "{{capture}} --source {} --after {} > {}",
        shell_quote(&dbs.src_url()),
        shell_quote(&before),
        shell_quote(&stream.display().to_string())
    ));
    expect(&r, 0, "capture to a file");
    c.stop_zookeeper();
    let r = exec(
        APPLY,
        &[
            "--target",
            &c.url(0, "zk_down", "schema_timeout_ms=3000"),
            &stream.display().to_string(),
        ],
        None,
    );
    c.start_zookeeper();
    assert_eq!(r.code, Some(1), "apply with ZooKeeper down:\n{}", r.stderr);
    assert!(
        r.stderr.contains("ZooKeeper"),
        "the error should say ZooKeeper is the trouble:\n{}",
        r.stderr
    );
    // Back: the cursor is where it was, and the same stream applies.
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let r = exec(APPLY, &["cursor", "--target", &url], None);
        let last = if r.code == Some(0) {
            assert_eq!(
                r.stdout_str(),
                before,
                "the cursor moved while ZooKeeper was down"
            );
            let r = exec(
                APPLY,
                &["--target", &url, &stream.display().to_string()],
                None,
            );
            if r.code == Some(0) {
                break;
            }
            r.stderr
        } else {
            r.stderr
        };
        assert!(
            Instant::now() < deadline,
            "still failing 90 s after ZooKeeper came back:\n{last}"
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    audit_equal(&dbs.src_url(), &url);
    one_shard_per_key("zk_down", "items");
}

#[test]
fn postgres_snapshot_then_changes_reach_the_cluster() {
    let _g = serial();
    let c = cluster();
    let url = c.database("from_postgres");
    let pgdb = common::pg::db("to_ch_cluster");
    let src = pgdb.url();
    let s = pgdb.session();
    s.exec("CREATE TABLE public.items (id bigint PRIMARY KEY, name text, price double precision, data bytea)");
    s.exec(
        "INSERT INTO public.items SELECT x, 'item ' || x, x * 0.37, '\\x00ff'::bytea FROM generate_series(1, 1500) x",
    );
    let slot = "s_to_ch_cluster";
    common::pg::init_capture(&src, slot, &["public.items"]);
    let r = common::pg::snapshot_into(&src, slot, &url);
    expect(&r, 0, "snapshot | apply");
    let audit = || {
        let r = exec(
            AUDIT,
            &["--source", &src, "--slot", slot, "--target", &url],
            None,
        );
        expect(&r, 0, "audit");
        assert!(r.stdout_str().contains("equal"), "{}", r.stdout_str());
    };
    audit();
    s.exec("BEGIN");
    s.exec("UPDATE public.items SET price = -price WHERE id % 2 = 0");
    s.exec("DELETE FROM public.items WHERE id % 9 = 0");
    s.exec("UPDATE public.items SET id = id + 100000 WHERE id % 13 = 0");
    s.exec("COMMIT");
    s.exec("INSERT INTO public.items VALUES (-5, E'\\uFEFFé', '-0.0', '')");
    let r = pipeline(&format!(
        "{{capture}} --source {src} --slot {slot} --after \"$({{apply}} cursor --target {url})\" | {{apply}} --target {url}",
        src = shell_quote(&src),
        url = shell_quote(&url)
    ));
    expect(&r, 0, "capture | apply");
    audit();
    // TRUNCATE travels: every live key is marked deleted at its position,
    // read and written through the Distributed table across both shards;
    // the rows after it stay.
    s.exec("BEGIN");
    s.exec("TRUNCATE public.items");
    s.exec("INSERT INTO public.items VALUES (7, 'after', 1.5, '\\x01'), (100007, 'after 2', 2.5, NULL)");
    s.exec("COMMIT");
    let r = pipeline(&format!(
        "{{capture}} --source {src} --slot {slot} --after \"$({{apply}} cursor --target {url})\" | {{apply}} --target {url}",
        src = shell_quote(&src),
        url = shell_quote(&url)
    ));
    expect(&r, 0, "capture | apply of a TRUNCATE");
    audit();
    assert_eq!(
        c.query(
            2,
            "SELECT count() FROM from_postgres.public_items__current FORMAT TabSeparated"
        ),
        "2\n"
    );
    let n = one_shard_per_key("from_postgres", "public_items");
    // Deleted keys stay as tombstones; a moved key leaves one behind (the
    // rows deleted earlier in the transaction were not moved); 100007 is
    // new (7 was not moved).
    let moved = (1..=1500).filter(|x| x % 13 == 0 && x % 9 != 0).count();
    assert_eq!(n, 1500 + 1 + moved + 1, "keys, old ones as tombstones");
}

#[test]
fn cluster_url_mistakes_are_named() {
    let _g = serial();
    let c = cluster();
    c.database("url_errors");
    let run = |url: &str| exec(APPLY, &["cursor", "--target", url], None);
    let port = c.nodes[0].http_port;
    let r = run(&format!(
        "clickhouse://default@127.0.0.1:{port}/url_errors?cluster=nope"
    ));
    assert_eq!(r.code, Some(2), "{}", r.stderr);
    assert!(
        r.stderr.contains("cluster \"nope\" is not defined") && r.stderr.contains(CLUSTER),
        "{}",
        r.stderr
    );
    let r = run(&c.url(0, "url_errors", "insert_quorum=3"));
    assert_eq!(r.code, Some(2), "{}", r.stderr);
    assert!(r.stderr.contains("has 2 replica(s)"), "{}", r.stderr);
    let r = run(&format!(
        "clickhouse://default@127.0.0.1:{port}/url_errors?insert_quorum=2"
    ));
    assert_eq!(r.code, Some(2), "{}", r.stderr);
    assert!(r.stderr.contains("add cluster=NAME"), "{}", r.stderr);
    let r = run(&format!(
        "clickhouse://default@127.0.0.1:{port}/a%7Bshard%7D?cluster={CLUSTER}"
    ));
    assert_eq!(r.code, Some(2), "{}", r.stderr);
    assert!(r.stderr.contains("cannot hold { or }"), "{}", r.stderr);
    // A database a single-server target wrote to (its cursor on one node
    // only) is not taken over by a cluster target.
    let dbs = source(3);
    let single = format!("clickhouse://default@127.0.0.1:{port}/url_errors");
    let r = pipeline(&format!(
        "{{snapshot}} --source {} | {{apply}} --target {}",
        shell_quote(&dbs.src_url()),
        shell_quote(&single)
    ));
    expect(&r, 0, "snapshot into one node, no cluster");
    dbs.src_sql("UPDATE items SET price = 0");
    let r = pipeline(&format!(
        "{{capture}} --source {} --after \"$({{apply}} cursor --target {single})\" | {{apply}} --target {}",
        shell_quote(&dbs.src_url()),
        shell_quote(&c.url(0, "url_errors", "")),
        single = shell_quote(&single)
    ));
    expect(&r, 1, "apply with cluster= into a single-server database");
    assert!(
        r.stderr
            .contains("holds a cursor table (MergeTree) made for a single server"),
        "{}",
        r.stderr
    );
    // And the other way round: a cluster's cursor read without cluster=.
    let clustered = c.database("url_clustered");
    snapshot_into(&dbs, &clustered);
    let r = run(&format!(
        "clickhouse://default@127.0.0.1:{port}/url_clustered"
    ));
    expect(
        &r,
        1,
        "apply cursor without cluster= on a cluster's database",
    );
    assert!(
        r.stderr.contains("made for a cluster: add cluster=NAME"),
        "{}",
        r.stderr
    );
    // A quorum of one is allowed (faster, less safe): the URL is accepted,
    // and the empty database holds no cursor yet.
    c.database("url_quorum");
    let r = run(&c.url(0, "url_quorum", "insert_quorum=1"));
    expect(&r, 1, "cursor with insert_quorum=1");
    assert!(r.stderr.contains("holds no cursor"), "{}", r.stderr);
}

/// Parses each statement with a modern ClickHouse (PyPI's `chdb`, run by
/// python3): `formatQuery` fails on anything its parser refuses. chdb is one
/// embedded server, with no ZooKeeper and no `remote_servers`, so cluster
/// statements can be parsed there, not run.
const CHDB_PARSE: &str = r#"
import json, sys
import chdb
errors = []
for sql in json.load(open(sys.argv[1])):
    try:
        chdb.query("SELECT formatQuery('" + sql.replace("\\", "\\\\").replace("'", "\\'") + "')", "TSV")
    except Exception as e:
        errors.append({"sql": sql, "error": str(e)[:1000]})
names = ["insert_quorum", "insert_quorum_timeout", "insert_distributed_sync", "insert_distributed_timeout",
         "select_sequential_consistency", "distributed_ddl_task_timeout"]
known = chdb.query("SELECT name FROM system.settings WHERE name IN (%s)" % ", ".join("'%s'" % n for n in names), "TSV").bytes().decode().split()
for n in names:
    if n not in known:
        errors.append({"setting": n, "error": "unknown to the modern engine"})
print(json.dumps(errors))
"#;

#[test]
fn cluster_statements_parse_on_a_modern_engine() {
    if !common::ch::chdb_or_skip(
        "cluster_statements_parse_on_a_modern_engine",
        "the cluster statements were",
    ) {
        return;
    }
    let _g = serial();
    let c = cluster();
    let url = c.database("modern");
    let dbs = source(50);
    snapshot_into(&dbs, &url);
    dbs.src_sql("UPDATE items SET price = 1 WHERE id < 10; DELETE FROM items WHERE id = 20");
    migrate(&dbs, "ALTER TABLE items ADD COLUMN qty INTEGER");
    dbs.src_sql("UPDATE items SET qty = 3 WHERE id < 5");
    expect(&catch_up(&dbs, &url), 0, "catch up");
    audit_equal(&dbs.src_url(), &url);
    // What the tools sent node 0 over HTTP, as its query log has it.
    c.query(0, "SYSTEM FLUSH LOGS");
    let log = c.query(
        0,
        "SELECT query FROM system.query_log WHERE type = 2 AND is_initial_query = 1 AND interface = 2 \
         AND query LIKE '%modern%' AND query NOT LIKE '%query_log%' AND query NOT LIKE 'CREATE DATABASE%' \
         ORDER BY event_time, query_start_time FORMAT JSONEachRow",
    );
    let sent: Vec<String> = log
        .lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).expect("a query log row");
            v["query"].as_str().expect("query").to_string()
        })
        .collect();
    for needed in [
        "ON CLUSTER",
        "ReplicatedReplacingMergeTree",
        "Distributed(",
        "ADD COLUMN",
        "INSERT INTO",
        "FINAL",
    ] {
        assert!(
            sent.iter().any(|q| q.contains(needed)),
            "no statement with {needed:?} in the query log: {sent:#?}"
        );
    }
    let work = tempfile::tempdir().unwrap();
    let list = work.path().join("statements.json");
    std::fs::write(&list, serde_json::to_string(&sent).unwrap()).unwrap();
    let out = Command::new("python3")
        .args(["-c", CHDB_PARSE])
        .arg(&list)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "the chdb check failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let errors = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        errors.trim(),
        "[]",
        "statements of the cluster target a modern engine refuses ({} checked)",
        sent.len()
    );
    eprintln!("{} statements parsed by a modern engine", sent.len());
}

/// A replica of the shard of the node in the URL stopped: the apply fails
/// in seconds, naming the quorum, not after the whole insert timeout (it
/// used to wait for a quorum that could not come), cursor unchanged; back,
/// the same batches apply.
#[test]
fn a_stopped_replica_of_the_urls_own_shard_fails_in_seconds() {
    let _g = serial();
    let c = cluster();
    let url = c.database("own_shard_down");
    let dbs = source(300);
    snapshot_into(&dbs, &url);
    let before = cursor(&url);
    dbs.src_sql("UPDATE items SET price = price + 1");
    // Node 1 is the second replica of shard 1, the shard of node 0 (the
    // URL's); killed, so ZooKeeper still counts it active for a while.
    c.kill_node(1);
    // A timeout short enough for the old behaviour to end, long enough
    // that waiting it out is told apart from failing at once.
    let slow = c.url(0, "own_shard_down", "insert_timeout_ms=40000");
    let t = Instant::now();
    let r = catch_up(&dbs, &slow);
    let took = t.elapsed();
    c.start_node(1);
    assert_eq!(r.code, Some(1), "apply with a replica down:\n{}", r.stderr);
    assert!(
        r.stderr.contains("quorum") && r.stderr.contains("does not answer"),
        "the error should name the quorum and the replica:\n{}",
        r.stderr
    );
    assert!(
        took < Duration::from_secs(20),
        "the apply took {took:?} to fail (the insert timeout is 40 s):\n{}",
        r.stderr
    );
    assert_eq!(cursor(&url), before, "the cursor moved");
    wait_for_every(
        60,
        500,
        "apply to succeed after the replica came back",
        || catch_up(&dbs, &url).code == Some(0),
    );
    audit_equal(&dbs.src_url(), &url);
    assert_eq!(one_shard_per_key("own_shard_down", "items"), 300);
}
