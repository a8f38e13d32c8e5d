//! Backfill through the binaries (docs/BACKFILL.md), SQLite source: a
//! following pipeline bootstrapped by backfill, a table added to it while
//! writers change it, SIGKILL at several moments of a backfill and a
//! restart from the target's cursor, and `--resync` of a damaged table.
//! Every case ends with an audit that says equal.

mod common;

use common::sqlite::{bin, exec, expect, Dbs, Rng, APPLY, CAPTURE};
use rusqlite::params;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// `capture --follow | apply` as two processes joined by a pipe, started
/// from the target's cursor; dropped (or killed) with SIGKILL.
struct Pipeline {
    capture: Child,
    apply: Child,
}

impl Pipeline {
    fn start(db: &Dbs, extra: &[&str]) -> Pipeline {
        let url = db.src_url();
        let after = db.target_cursor().map(|c| c.to_json());
        let mut args = vec!["--source", &url, "--follow", "--poll-ms", "50"];
        if let Some(a) = &after {
            args.extend(["--after", a]);
        }
        args.extend_from_slice(extra);
        let log = |n: &str| {
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(db.path(n))
                .unwrap()
        };
        let mut capture = Command::new(bin(CAPTURE))
            .args(&args)
            .stdout(Stdio::piped())
            .stderr(Stdio::from(log("capture.err")))
            .spawn()
            .unwrap();
        let apply = Command::new(bin(APPLY))
            .args(["--target", &db.proj_url()])
            .stdin(Stdio::from(capture.stdout.take().unwrap()))
            .stderr(Stdio::from(log("apply.err")))
            .spawn()
            .unwrap();
        Pipeline { capture, apply }
    }

    /// Both still running (a failed apply or capture is a test failure,
    /// with its messages).
    fn assert_running(&mut self, db: &Dbs) {
        for (name, c) in [("capture", &mut self.capture), ("apply", &mut self.apply)] {
            if let Some(st) = c.try_wait().unwrap() {
                panic!(
                    "{name} stopped ({st}):\ncapture: {}\napply: {}",
                    std::fs::read_to_string(db.path("capture.err")).unwrap_or_default(),
                    std::fs::read_to_string(db.path("apply.err")).unwrap_or_default()
                );
            }
        }
    }
}

impl Drop for Pipeline {
    fn drop(&mut self) {
        for c in [&mut self.capture, &mut self.apply] {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// `capture status --output-format json`.
fn status(db: &Dbs) -> serde_json::Value {
    let r = db.capture_cmd("status", &["--output-format", "json"]);
    expect(&r, 0, "capture status");
    serde_json::from_slice(&r.stdout).unwrap()
}

/// Wait until every backfill is done and the target holds the high water.
fn wait_synced(db: &Dbs, p: &mut Pipeline, secs: u64) {
    let t0 = Instant::now();
    loop {
        p.assert_running(db);
        let st = status(db);
        let done = st["backfills"]
            .as_array()
            .unwrap()
            .iter()
            .all(|r| r["state"] == "done");
        let hw = st["high_water"].as_u64().unwrap() as u128;
        if done && db.target_cursor().map(|c| c.sequence()) == Some(hw) {
            return;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(secs),
            "not synced after {secs} s: {st}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Writers on the source until stopped: inserts, updates, deletes and key
/// moves in `a` (integer keys) and `b` (text keys), in small transactions.
fn writers(
    db: &Dbs,
    seed: u64,
    moves: bool,
    stop: Arc<AtomicBool>,
) -> std::thread::JoinHandle<u64> {
    let path = db.src.clone();
    std::thread::spawn(move || {
        let mut c = common::sqlite::open(&path);
        let mut rng = Rng::new(seed);
        let mut n = 0u64;
        while !stop.load(Ordering::Relaxed) {
            let tx = c.transaction().unwrap();
            for _ in 0..20 {
                let k = rng.below(250_000) as i64;
                let key = format!("k{k:06}");
                let r = match rng.below(if moves { 8 } else { 6 }) {
                    0 => tx.execute(
                        "INSERT OR IGNORE INTO a VALUES (?1, ?2)",
                        params![k + 1_000_000, "new"],
                    ),
                    1 => tx.execute("UPDATE a SET v = v || '+' WHERE id = ?1", [k % 5000]),
                    2 => tx.execute(
                        "INSERT OR IGNORE INTO b VALUES (?1, ?2, 'w')",
                        params![format!("n{k:06}"), k],
                    ),
                    3 => tx.execute("UPDATE b SET n = n + 1 WHERE k = ?1", [&key]),
                    4 => tx.execute("DELETE FROM b WHERE k = ?1", [&key]),
                    5 => tx.execute("DELETE FROM a WHERE id = ?1", [k % 5000]),
                    // Moves across the whole key range, both ways.
                    6 => tx.execute(
                        "UPDATE OR IGNORE b SET k = ?2 WHERE k = ?1",
                        params![key, format!("k{:06}", rng.below(250_000))],
                    ),
                    _ => tx.execute(
                        "UPDATE OR IGNORE a SET id = ?2 WHERE id = ?1",
                        params![k % 5000, 2_000_000 + k],
                    ),
                };
                r.unwrap();
            }
            tx.commit().unwrap();
            n += 1;
            std::thread::sleep(Duration::from_millis(5));
        }
        n
    })
}

fn fill(db: &Dbs, a_rows: i64, b_rows: i64) {
    db.src_sql(&format!(
        "CREATE TABLE a(id INTEGER PRIMARY KEY, v TEXT);
         CREATE TABLE b(k TEXT PRIMARY KEY, n INTEGER, pad TEXT);
         WITH RECURSIVE c(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM c WHERE i + 1 < {a_rows})
           INSERT INTO a SELECT i, 'v' || i FROM c;
         WITH RECURSIVE c(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM c WHERE i + 1 < {b_rows})
           INSERT INTO b SELECT printf('k%06d', i), i, printf('%.*c', i % 50, 'x') FROM c;"
    ));
}

fn backfill(db: &Dbs, args: &[&str]) {
    let r = db.capture_cmd("backfill", args);
    expect(&r, 0, "capture backfill");
}

/// A new pipeline starts by backfill instead of a snapshot; then a table of
/// 200,000 rows is added to it and backfilled while writers insert, update,
/// delete and move keys in it and in the older table.
#[test]
fn a_pipeline_bootstrapped_by_backfill_takes_a_new_table_while_writers_run() {
    let db = Dbs::new();
    fill(&db, 5000, 200_000);
    db.init(&["a"]);
    let listen = format!("127.0.0.1:{}", common::ch::free_port());
    let mut p = Pipeline::start(&db, &["--metrics-listen", &listen]);
    backfill(&db, &["--all"]);
    let stop = Arc::new(AtomicBool::new(false));
    let w = writers(&db, 7, true, stop.clone());
    std::thread::sleep(Duration::from_millis(300));
    // `b` is not captured yet: backfill captures it and requests it at once.
    backfill(&db, &["--table", "b"]);
    let t0 = Instant::now();
    while status(&db)["backfills"][1]["state"] != "done" {
        p.assert_running(&db);
        assert!(
            t0.elapsed() < Duration::from_secs(120),
            "backfill of b never ends"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    stop.store(true, Ordering::Relaxed);
    let txs = w.join().unwrap();
    assert!(txs > 0);
    wait_synced(&db, &mut p, 60);
    // The follower's metrics name the tables it backfilled.
    let metrics = common::http_get(&listen, "/metrics");
    let rows = status(&db)["backfills"][1]["rows"].as_u64().unwrap();
    assert!(
        metrics.contains(&format!(
            "mooncdc_backfill_rows_total{{tool=\"capture\",table=\"b\"}} {rows}\n"
        )) && metrics.contains("mooncdc_backfill_rows_remaining{tool=\"capture\",table=\"b\"} 0\n"),
        "metrics:\n{metrics}"
    );
    db.audit_equal();
    let st = status(&db);
    assert_eq!(st["tables"], serde_json::json!(["a", "b"]));
    assert_eq!(st["backfills"][1]["table"], "b");
    // The count when requested: the 200,000 rows and what the writers had
    // inserted by then.
    assert!(st["backfills"][1]["estimate"].as_u64().unwrap() >= 200_000);
}

/// SIGKILL of the whole pipeline at several moments of a backfill (and
/// batches cut inside chunks by --max-events), each time restarted from the
/// target's cursor: the backfill goes on where the target stands, never
/// from its first row, and ends equal.
#[test]
fn a_killed_pipeline_resumes_the_backfill_from_the_targets_cursor() {
    let db = Dbs::new();
    fill(&db, 5000, 60_000);
    db.init(&["a"]);
    db.snapshot_apply();
    backfill(&db, &["--table", "b"]);
    let stop = Arc::new(AtomicBool::new(false));
    let w = writers(&db, 11, false, stop.clone());
    let extra = ["--backfill-chunk-rows", "100", "--max-events", "150"];
    let mut logged = Vec::new();
    for i in 0..6u64 {
        let p = Pipeline::start(&db, &extra);
        std::thread::sleep(Duration::from_millis(60 + 40 * i));
        drop(p);
        logged.push(status(&db)["backfills"][0]["rows"].as_u64().unwrap());
    }
    stop.store(true, Ordering::Relaxed);
    w.join().unwrap();
    let mut p = Pipeline::start(&db, &extra);
    wait_synced(&db, &mut p, 120);
    drop(p);
    db.audit_equal();
    // Chunks are logged once: the rows logged never exceed the table's
    // first rows and the writers' inserts (they delete only first rows and
    // move no key here), whatever the kills.
    let inserted: i64 = db
        .src_conn()
        .query_row("SELECT count(*) FROM b WHERE k LIKE 'n%'", [], |r| r.get(0))
        .unwrap();
    let rows = status(&db)["backfills"][0]["rows"].as_u64().unwrap();
    assert!(
        rows <= 60_000 + inserted as u64,
        "rows logged {rows}, more than 60,000 + {inserted}: some chunk was logged twice"
    );
    eprintln!("rows logged at each kill: {logged:?}, at the end {rows}");
    assert!(
        logged.windows(2).all(|w| w[0] <= w[1]) && logged[0] > 0,
        "progress across restarts: {logged:?}"
    );
    // The kills fell inside the backfill, not after it.
    assert!(
        logged.iter().filter(|&&n| n > 0 && n < rows).count() >= 3,
        "too few kills inside the backfill: {logged:?} of {rows}"
    );
}

/// An audit finds a damaged table; `backfill --resync` repairs it while
/// the other table keeps flowing. A second backfill of a table needs
/// --resync, and a table being backfilled cannot be requested again.
#[test]
fn resync_repairs_a_damaged_table() {
    let db = Dbs::new();
    fill(&db, 2000, 10_000);
    db.init(&[]);
    db.snapshot_apply();
    db.proj_sql(
        "UPDATE b SET n = -1 WHERE n % 100 = 0; DELETE FROM b WHERE n % 77 = 0; INSERT INTO b VALUES ('zzz', 0, 'stray');",
    );
    let r = db.audit(&[]);
    expect(&r, 1, "audit of the damaged target");
    backfill(&db, &["--table", "b", "--resync"]);
    // A snapshot while the table is being backfilled would disagree with
    // the stream after it: refused, naming the table.
    let snap = exec(common::sqlite::SNAPSHOT, &["--source", &db.src_url()], None);
    expect(&snap, 1, "a snapshot during a backfill");
    assert!(
        snap.stderr.contains("\"b\" is being backfilled"),
        "{}",
        snap.stderr
    );
    let again = db.capture_cmd("backfill", &["--table", "b", "--resync"]);
    expect(&again, 1, "a second request while one runs");
    assert!(
        again.stderr.contains("being backfilled already"),
        "{}",
        again.stderr
    );
    let mut p = Pipeline::start(&db, &["--backfill-chunk-rows", "700"]);
    db.src_sql("UPDATE a SET v = 'during' WHERE id < 10; DELETE FROM b WHERE n < 5;");
    wait_synced(&db, &mut p, 60);
    drop(p);
    db.audit_equal();
    let plain = db.capture_cmd("backfill", &["--table", "b"]);
    expect(&plain, 1, "a second backfill without --resync");
    assert!(plain.stderr.contains("pass --resync"), "{}", plain.stderr);
    let unknown = db.capture_cmd("backfill", &["--table", "nope"]);
    expect(&unknown, 2, "backfill of a table that does not exist");
    let r = exec(CAPTURE, &["backfill", "--source", &db.src_url()], None);
    expect(&r, 2, "backfill without --table or --all");
    // A key in another collation than BINARY would be read in another order
    // than the stream compares keys in: refused, nothing recorded.
    db.src_sql("CREATE TABLE n(k TEXT COLLATE NOCASE PRIMARY KEY, v)");
    let r = db.capture_cmd("backfill", &["--table", "n"]);
    expect(&r, 2, "backfill of a NOCASE key");
    assert!(r.stderr.contains("COLLATE NOCASE"), "{}", r.stderr);
    assert_eq!(status(&db)["tables"], serde_json::json!(["a", "b"]));
}

/// An application write transaction held longer than the busy timeout
/// (30 s) while a backfill is pending: the follower waits for it, says so
/// naming the table, never exits, and carries the backfill out once the
/// transaction ends.
#[test]
fn a_long_application_write_transaction_makes_the_backfill_wait_not_fail() {
    let db = Dbs::new();
    fill(&db, 100, 2000);
    db.init(&["a"]);
    let mut p = Pipeline::start(&db, &[]);
    backfill(&db, &["--all"]);
    wait_synced(&db, &mut p, 60);
    let app = rusqlite::Connection::open(db.path("src.db")).unwrap();
    app.execute_batch("BEGIN IMMEDIATE; UPDATE a SET v = 'held' WHERE id = 1")
        .unwrap();
    // The request waits for the write lock too: made before the hold.
    let url = db.src_url();
    let request = std::thread::spawn(move || {
        exec(
            CAPTURE,
            &["backfill", "--source", &url, "--table", "b"],
            None,
        )
    });
    std::thread::sleep(Duration::from_millis(200));
    app.execute_batch("COMMIT").unwrap();
    expect(&request.join().unwrap(), 0, "capture backfill");
    app.execute_batch("BEGIN IMMEDIATE; UPDATE a SET v = 'held again' WHERE id = 2")
        .unwrap();
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_secs(32) {
        p.assert_running(&db);
        std::thread::sleep(Duration::from_millis(500));
    }
    assert_ne!(status(&db)["backfills"][1]["state"], "done");
    let err = std::fs::read_to_string(db.path("capture.err")).unwrap();
    assert!(
        err.contains("a backfill chunk of table \"b\" waits"),
        "{err}"
    );
    app.execute_batch("COMMIT").unwrap();
    wait_synced(&db, &mut p, 60);
    db.audit_equal();
}
