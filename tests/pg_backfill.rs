//! PostgreSQL backfill under the conditions of a production database,
//! through the real binaries against a throwaway cluster
//! (tests/common/pg.rs): a write transaction held open on the table never
//! queues the application's writers behind a chunk; adding a table never
//! queues the application behind its ALTER; any default isolation level;
//! a LATIN1 database; text keys in collations that do not order by bytes;
//! row-level security that hides rows is refused by snapshot, backfill and
//! audit (docs/BACKFILL.md, "How it works (PostgreSQL)", "Limits";
//! docs/POSTGRES.md, "Rights").

mod common;

use common::pg::{self, PgDb, Session};
use common::sqlite::{bin, exec, expect, pipeline, shell_quote, APPLY, AUDIT, CAPTURE};
use common::Run;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// One pipeline: a source database, its slot and publication, a SQLite
/// projection, and the follower's log.
struct Bf {
    db: PgDb,
    slot: String,
    publication: String,
    dir: tempfile::TempDir,
}

impl Bf {
    fn new(db: PgDb) -> Bf {
        let slot = format!("s_{}", db.dbname);
        Bf::pipeline(db, &slot, "mooncdc_main")
    }

    fn pipeline(db: PgDb, slot: &str, publication: &str) -> Bf {
        Bf {
            db,
            slot: slot.into(),
            publication: publication.into(),
            dir: tempfile::tempdir().expect("temporary folder"),
        }
    }

    /// `--source URL --slot S --publication P`.
    fn source_args(&self) -> Vec<String> {
        [
            "--source",
            &self.db.url(),
            "--slot",
            &self.slot,
            "--publication",
            &self.publication,
        ]
        .map(String::from)
        .to_vec()
    }

    fn session(&self) -> Session {
        self.db.session()
    }

    fn target(&self) -> String {
        format!("sqlite:{}", self.dir.path().join("proj.db").display())
    }

    fn log(&self) -> PathBuf {
        self.dir.path().join("capture.log")
    }

    fn log_text(&self) -> String {
        std::fs::read_to_string(self.log()).unwrap_or_default()
    }

    fn capture(&self, cmd: &str, extra: &[&str]) -> Run {
        let src = self.source_args();
        let mut args = vec![cmd];
        args.extend(src.iter().map(String::as_str));
        args.extend_from_slice(extra);
        exec(CAPTURE, &args, None)
    }

    /// `init` of `tables`, then a snapshot into the projection.
    fn start(&self, tables: &[&str]) {
        let mut args = Vec::new();
        for t in tables {
            args.extend(["--table", t]);
        }
        expect(&self.capture("init", &args), 0, "capture init");
        let src: Vec<String> = self.source_args().iter().map(|a| shell_quote(a)).collect();
        let r = pipeline(&format!(
            "{{snapshot}} -q {} | {{apply}} --target {} -q",
            src.join(" "),
            shell_quote(&self.target())
        ));
        expect(&r, 0, "snapshot | apply");
    }

    /// `capture --follow` from the target's cursor into `apply`.
    fn follow(&self) -> (Child, Child) {
        self.follow_with(&[])
    }

    /// [`follow`](Self::follow) with more capture options.
    fn follow_with(&self, extra: &[&str]) -> (Child, Child) {
        let t = self.target();
        let after = exec(APPLY, &["cursor", "--target", &t], None)
            .stdout_str()
            .trim()
            .to_string();
        let mut capture = Command::new(bin(CAPTURE))
            .args(self.source_args())
            .args(["--follow", "--after", &after])
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(std::fs::File::create(self.log()).unwrap()))
            .spawn()
            .expect("start capture --follow");
        let apply = Command::new(bin(APPLY))
            .args(["--target", &t, "-q"])
            .stdin(Stdio::from(capture.stdout.take().unwrap()))
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start apply");
        (capture, apply)
    }

    fn state(&self, i: usize) -> serde_json::Value {
        let r = self.capture("status", &["--output-format", "json"]);
        expect(&r, 0, "status");
        let v: serde_json::Value =
            serde_json::from_str(r.stdout_str().trim()).expect("status JSON");
        v["backfills"][i]["state"].clone()
    }

    /// Wait until backfill `i` is done, then until the target holds every
    /// change written so far; then stop the pipeline (SIGTERM).
    #[track_caller]
    fn finish(&self, i: usize, pipeline: (Child, Child)) {
        let t0 = Instant::now();
        while self.state(i) != "done" {
            assert!(
                t0.elapsed() < Duration::from_secs(90),
                "backfill {i} did not end: {}\n{}",
                self.state(i),
                self.log_text()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
        let s = self.session();
        s.exec("SELECT pg_logical_emit_message(true, 'mooncdc_heartbeat', '')");
        let end = s.insert_lsn();
        let t = self.target();
        common::sqlite::wait_for_every(60, 200, "the target to catch up", || {
            let r = exec(APPLY, &["cursor", "--target", &t], None);
            mooncdc::wire::Cursor::parse_json(r.stdout_str().trim())
                .is_ok_and(|c| (c.sequence() >> 64) as u64 >= end)
        });
        let (mut capture, mut apply) = pipeline;
        for c in [&mut capture, &mut apply] {
            let _ = Command::new("kill")
                .args(["-TERM", &c.id().to_string()])
                .status();
            let _ = c.wait();
        }
    }

    fn audit(&self) -> Run {
        let mut args = self.source_args();
        args.extend(["--target".into(), self.target()]);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        exec(AUDIT, &args, None)
    }

    #[track_caller]
    fn audit_equal(&self, table: &str) {
        let r = self.audit();
        expect(&r, 0, "audit");
        let out = r.stdout_str();
        assert!(out.contains(table), "{out}");
        assert!(out.trim_end().ends_with("equal"), "{out}");
    }

    /// One value of the projection.
    fn target_value(&self, sql: &str) -> String {
        let c = rusqlite::Connection::open(self.dir.path().join("proj.db")).unwrap();
        c.query_row(sql, [], |r| r.get::<_, String>(0)).unwrap()
    }
}

/// Run `sql` in a new session of `db` `n` times, one statement a
/// transaction; the longest took.
fn slowest(db: &PgDb, sql: &str, n: usize) -> Duration {
    let s = db.session();
    let mut worst = Duration::ZERO;
    for i in 0..n {
        let t = Instant::now();
        s.exec(&sql.replace("{i}", &i.to_string()));
        worst = worst.max(t.elapsed());
        std::thread::sleep(Duration::from_millis(20));
    }
    worst
}

/// A transaction that wrote the table and stays open, and CREATE INDEX
/// CONCURRENTLY waiting on it: the chunks read without a lock, so the
/// backfill ends while both are open, the application's other writers go at
/// their own pace, and the held change reaches the target once committed.
#[test]
fn a_backfill_ends_while_a_write_transaction_is_open_and_holds_no_writer() {
    let bf = Bf::new(pg::db("bf_held"));
    let s = bf.session();
    s.exec("CREATE TABLE a (id int PRIMARY KEY, v text); INSERT INTO a VALUES (1, 'a')");
    s.exec("CREATE TABLE b (id int PRIMARY KEY, v text)");
    s.exec("INSERT INTO b SELECT g, 'b' || g FROM generate_series(1, 20000) g");
    // b is captured already (no ALTER in the request), and read again.
    bf.start(&["public.a", "public.b"]);
    let pipeline = bf.follow_with(&["--backfill-chunk-rows", "500"]);
    let held = bf.session();
    held.exec("BEGIN");
    held.exec("UPDATE b SET v = 'held' WHERE id = 19999");
    // An index built meanwhile waits for the open transaction (its SHARE
    // UPDATE EXCLUSIVE lock is held the whole time).
    let db = bf.db.clone();
    let index = std::thread::spawn(move || db.exec("CREATE INDEX CONCURRENTLY b_v ON b (v)"));
    let r = bf.capture("backfill", &["--table", "public.b", "--resync"]);
    expect(&r, 0, "capture backfill");
    // Other writers of the table go at their own pace meanwhile.
    let worst = slowest(
        &bf.db,
        "UPDATE b SET v = 'probe {i}' WHERE id = 1 + {i} * 400",
        40,
    );
    assert!(
        worst < Duration::from_millis(200),
        "a writer waited {worst:?} during the backfill\n{}",
        bf.log_text()
    );
    let t0 = Instant::now();
    while bf.state(0) != "done" {
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "the backfill did not end while the transaction was open: {}\n{}",
            bf.state(0),
            bf.log_text()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(
        !index.is_finished(),
        "the index waits for the open transaction"
    );
    assert!(!bf.log_text().contains("waits"), "{}", bf.log_text());
    held.exec("COMMIT");
    index.join().unwrap();
    bf.finish(0, pipeline);
    bf.audit_equal("public.b");
    assert_eq!(
        bf.target_value("SELECT v FROM \"public.b\" WHERE id = 19999"),
        "held"
    );
}

/// Adding a table takes its ALTER only when no session holds the table:
/// behind a report reading it, the application's reads of it do not wait,
/// and the request is recorded once the report ends.
#[test]
fn adding_a_table_never_queues_the_application_behind_its_alter() {
    let bf = Bf::new(pg::db("bf_alter"));
    let s = bf.session();
    s.exec("CREATE TABLE a (id int PRIMARY KEY, v text); INSERT INTO a VALUES (1, 'a')");
    s.exec("CREATE TABLE b (id int PRIMARY KEY, v text)");
    s.exec("INSERT INTO b SELECT g, 'b' || g FROM generate_series(1, 500) g");
    bf.start(&["public.a"]);
    let report = bf.session();
    report.exec("BEGIN");
    report.exec("SELECT count(*) FROM b");
    let url = bf.db.url();
    let slot = bf.slot.clone();
    let request = std::thread::spawn(move || {
        exec(
            CAPTURE,
            &[
                "backfill", "--source", &url, "--slot", &slot, "--table", "public.b",
            ],
            None,
        )
    });
    std::thread::sleep(Duration::from_millis(500));
    let worst = slowest(&bf.db, "SELECT v FROM b WHERE id = 1 + {i}", 30);
    assert!(
        worst < Duration::from_millis(400),
        "a read of the table waited {worst:?} behind the request's ALTER"
    );
    assert!(!request.is_finished(), "the request waits for the report");
    report.exec("COMMIT");
    let r = request.join().unwrap();
    expect(&r, 0, "capture backfill once the report ended");
    assert!(
        r.stderr.contains("is held by another session"),
        "{}",
        r.stderr
    );
    let pipeline = bf.follow();
    bf.finish(0, pipeline);
    bf.audit_equal("public.b");
}

/// A database whose default isolation is SERIALIZABLE, with writers
/// changing the table all through the backfill: the chunks read what is
/// committed when they read it, and the target ends equal.
#[test]
fn a_backfill_is_exact_whatever_the_default_isolation() {
    let bf = Bf::new(pg::db("bf_iso"));
    let s = bf.session();
    s.exec("CREATE TABLE a (id int PRIMARY KEY, v text); INSERT INTO a VALUES (1, 'a')");
    s.exec("CREATE TABLE b (id int PRIMARY KEY, v int)");
    s.exec("INSERT INTO b SELECT g, 0 FROM generate_series(1, 20000) g");
    bf.start(&["public.a"]);
    bf.db.cluster.admin(&format!(
        "ALTER DATABASE {} SET default_transaction_isolation = 'serializable'",
        bf.db.dbname
    ));
    let pipeline = bf.follow_with(&["--backfill-chunk-rows", "500"]);
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = {
        let (db, stop) = (bf.db.clone(), stop.clone());
        std::thread::spawn(move || {
            let w = db.session();
            let mut n = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let k = (n * 7919) % 20000 + 1;
                // A serialization failure is the application's to retry.
                let _ = w.try_exec(&format!("UPDATE b SET v = v + 1 WHERE id = {k}"));
                n += 1;
                std::thread::sleep(Duration::from_millis(2));
            }
            n
        })
    };
    let r = bf.capture("backfill", &["--table", "public.b"]);
    expect(&r, 0, "capture backfill");
    let t0 = Instant::now();
    while bf.state(0) != "done" && t0.elapsed() < Duration::from_secs(90) {
        std::thread::sleep(Duration::from_millis(200));
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    assert!(writer.join().unwrap() > 0);
    bf.finish(0, pipeline);
    bf.audit_equal("public.b");
}

/// A LATIN1 database: chunk rows reach the target as the same text as the
/// stream's changes (UTF-8), accents and all.
#[test]
fn a_latin1_database_is_backfilled_with_its_text_intact() {
    let cluster = pg::cluster();
    cluster.admin(&format!(
        "CREATE DATABASE t_bf_latin1 OWNER {} ENCODING 'LATIN1' LC_COLLATE 'C' LC_CTYPE 'C' TEMPLATE template0",
        pg::ROLE
    ));
    let bf = Bf::new(PgDb {
        cluster,
        dbname: "t_bf_latin1".into(),
    });
    let s = bf.session();
    s.exec("CREATE TABLE a (id int PRIMARY KEY, v text); INSERT INTO a VALUES (1, 'a')");
    s.exec("CREATE TABLE b (k text PRIMARY KEY, v text)");
    s.exec("INSERT INTO b VALUES ('café', 'ÿ ñ ß é'), ('zèbre', 'Ærø'), ('abc', 'plain')");
    bf.start(&["public.a"]);
    let pipeline = bf.follow();
    let r = bf.capture("backfill", &["--table", "public.b"]);
    expect(&r, 0, "capture backfill");
    bf.finish(0, pipeline);
    assert_eq!(
        bf.target_value("SELECT v FROM \"public.b\" WHERE k = 'café'"),
        "ÿ ñ ß é"
    );
    bf.audit_equal("public.b");
}

/// Text keys in the database's default collation, in C.UTF-8 and, where
/// the server has one, in a language's collation (which orders 'a' before
/// 'B'): each is backfilled in the stream's byte order, exactly.
#[test]
fn text_keys_in_any_collation_are_backfilled() {
    let bf = Bf::new(pg::db("bf_coll"));
    let s = bf.session();
    s.exec("CREATE TABLE a (id int PRIMARY KEY, v text); INSERT INTO a VALUES (1, 'a')");
    let available = |name: &str| {
        s.value(&format!(
            "SELECT count(*) FROM pg_collation WHERE collname = '{name}' AND collencoding IN (-1, 6)"
        )) != "0"
    };
    let mut tables = vec![("plain", String::new())];
    for c in ["C.utf8", "C.UTF-8"] {
        if available(c) {
            tables.push(("cutf8", format!(" COLLATE \"{c}\"")));
            break;
        }
    }
    match ["und-x-icu", "en_US.utf8", "en_US"]
        .into_iter()
        .find(|c| available(c))
    {
        Some(c) => tables.push(("lang", format!(" COLLATE \"{c}\""))),
        None => eprintln!("no language collation on this server: the language case is left out"),
    }
    let keys = [
        "a", "B", "b", "A", "é", "e", "Z", "z", "ä", "0", "😀", "中文", "ab", "aB", "Ab",
    ];
    let mut names = Vec::new();
    for (t, coll) in &tables {
        s.exec(&format!(
            "CREATE TABLE {t} (k text{coll} PRIMARY KEY, n int)"
        ));
        for (i, k) in keys.iter().enumerate() {
            for j in 0..40 {
                s.exec(&format!(
                    "INSERT INTO {t} VALUES ({}, {i})",
                    pg::lit(&format!("{k}{j}"))
                ));
            }
        }
        names.push(format!("public.{t}"));
    }
    bf.start(&["public.a"]);
    let pipeline = bf.follow();
    let mut args = Vec::new();
    for n in &names {
        args.extend(["--table", n.as_str()]);
    }
    let r = bf.capture("backfill", &args);
    expect(&r, 0, "capture backfill");
    if tables.iter().any(|(t, _)| *t == "lang") {
        assert!(
            r.stderr.contains("CREATE INDEX CONCURRENTLY"),
            "{}",
            r.stderr
        );
    }
    // Rows move while the chunks run, in both directions of each order.
    for (t, _) in &tables {
        s.exec(&format!(
            "UPDATE {t} SET k = k || '~' WHERE k IN ('a1', 'B2', 'é3', 'Z4')"
        ));
        s.exec(&format!("DELETE FROM {t} WHERE k IN ('b5', 'A6')"));
    }
    let t0 = Instant::now();
    for i in 0..tables.len() {
        while bf.state(i) != "done" {
            assert!(t0.elapsed() < Duration::from_secs(90), "{}", bf.log_text());
            std::thread::sleep(Duration::from_millis(200));
        }
    }
    bf.finish(0, pipeline);
    let r = bf.audit();
    expect(&r, 0, "audit");
    for n in &names {
        assert!(r.stdout_str().contains(n.as_str()), "{}", r.stdout_str());
    }
    assert!(
        r.stdout_str().trim_end().ends_with("equal"),
        "{}",
        r.stdout_str()
    );
}

/// A table whose row-level security hides rows from the capture role is
/// refused by snapshot, backfill and audit, naming the way out, before
/// anything is copied; once the role sees every row, all three go on.
#[test]
fn row_level_security_that_hides_rows_is_refused_before_copying() {
    let bf = Bf::new(pg::db("bf_rls"));
    let s = bf.session();
    s.exec("CREATE TABLE a (id int PRIMARY KEY, v text); INSERT INTO a VALUES (1, 'a')");
    s.exec("CREATE TABLE c (id int PRIMARY KEY, v text)");
    s.exec("INSERT INTO c SELECT g, 'c' || g FROM generate_series(1, 100) g");
    s.exec("ALTER TABLE c ENABLE ROW LEVEL SECURITY");
    s.exec("ALTER TABLE c FORCE ROW LEVEL SECURITY");
    s.exec("CREATE POLICY even ON c USING (id % 2 = 0)");
    bf.start(&["public.a"]);
    let r = bf.capture("backfill", &["--table", "public.c"]);
    expect(&r, 1, "backfill of a table whose policies hide rows");
    assert!(
        r.stderr.contains("row-level security") && r.stderr.contains("BYPASSRLS"),
        "{}",
        r.stderr
    );
    assert_eq!(
        s.value("SELECT count(*) FROM pg_publication_tables WHERE tablename = 'c'"),
        "0",
        "nothing was recorded"
    );
    pg::init_capture(&bf.db.url(), "s_bf_rls2", &["public.c"]);
    let t2 = format!("sqlite:{}", bf.dir.path().join("proj2.db").display());
    let r = pg::snapshot_into(&bf.db.url(), "s_bf_rls2", &t2);
    expect(&r, 1, "snapshot of a table whose policies hide rows");
    assert!(r.stderr.contains("row-level security"), "{}", r.stderr);
    assert!(
        !bf.dir.path().join("proj2.db").exists() || {
            let c = rusqlite::Connection::open(bf.dir.path().join("proj2.db")).unwrap();
            c.query_row(
                "SELECT count(*) FROM sqlite_master WHERE name = 'public.c'",
                [],
                |r| r.get::<_, i64>(0),
            )
            .unwrap()
                == 0
        }
    );
    // The owner sees every row once the policies are not forced on it.
    s.exec("ALTER TABLE c NO FORCE ROW LEVEL SECURITY");
    let r = pg::snapshot_into(&bf.db.url(), "s_bf_rls2", &t2);
    expect(&r, 0, "snapshot once the role sees every row");
    let c = rusqlite::Connection::open(bf.dir.path().join("proj2.db")).unwrap();
    let n: i64 = c
        .query_row("SELECT count(*) FROM \"public.c\"", [], |r| r.get(0))
        .unwrap();
    assert_eq!(n, 100);
    let audit = || {
        exec(
            AUDIT,
            &[
                "--source",
                &bf.db.url(),
                "--slot",
                "s_bf_rls2",
                "--target",
                &t2,
            ],
            None,
        )
    };
    expect(&audit(), 0, "audit once the role sees every row");
    s.exec("ALTER TABLE c FORCE ROW LEVEL SECURITY");
    let r = audit();
    expect(&r, 2, "audit of a table whose policies hide rows (trouble)");
    assert!(r.stderr.contains("row-level security"), "{}", r.stderr);
}

/// Two pipelines on one database (their own slots and publications): a
/// backfill requested for one is carried out by it alone; the other's
/// follower, status and target never see it; the audit gives no verdict
/// against a target filled from another slot, nor for a publication with no
/// table.
#[test]
fn one_pipelines_backfill_is_never_anothers() {
    let db = pg::db("bf_two");
    let s = db.session();
    s.exec("CREATE TABLE a (id int PRIMARY KEY, v text); INSERT INTO a VALUES (1, 'a')");
    s.exec("CREATE TABLE t (id int PRIMARY KEY, v text)");
    s.exec("INSERT INTO t SELECT g, 't' || g FROM generate_series(1, 3000) g");
    let pa = Bf::pipeline(db.clone(), "s_bf_a", "pub_a");
    let pb = Bf::pipeline(db.clone(), "s_bf_b", "pub_b");
    pa.start(&["public.a"]);
    pb.start(&["public.a"]);
    let (fa, fb) = (pa.follow(), pb.follow());
    // B adds t; A adds it later, for itself.
    let r = pb.capture("backfill", &["--table", "public.t"]);
    expect(&r, 0, "backfill for pipeline B");
    pb.finish(0, fb);
    let st = pa.capture("status", &["--output-format", "json"]);
    let st: serde_json::Value = serde_json::from_str(st.stdout_str().trim()).unwrap();
    assert_eq!(st["backfills"].as_array().map(Vec::len), Some(0), "{st}");
    pb.audit_equal("public.t");
    s.exec("UPDATE t SET v = 'later' WHERE id <= 10");
    let r = pa.capture("backfill", &["--table", "public.t"]);
    expect(&r, 0, "backfill for pipeline A");
    pa.finish(0, fa);
    pa.audit_equal("public.t");
    let a_log = pa.log_text();
    assert!(
        !a_log.contains("request 1)"),
        "A carried out B's request\n{a_log}"
    );
    // A target filled from slot A, audited through slot B: no verdict.
    let mut args = pb.source_args();
    args.extend(["--target".into(), pa.target()]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let r = exec(AUDIT, &args, None);
    expect(&r, 2, "audit of A's target through B's slot");
    assert!(r.stderr.contains("was filled from source"), "{}", r.stderr);
    // An empty publication: nothing to compare, no verdict.
    s.exec("CREATE PUBLICATION empty_pub");
    let (url, ta) = (db.url(), pa.target());
    let r = exec(
        AUDIT,
        &[
            "--source",
            &url,
            "--slot",
            "s_bf_a",
            "--publication",
            "empty_pub",
            "--target",
            &ta,
        ],
        None,
    );
    expect(&r, 2, "audit of an empty publication");
    assert!(r.stderr.contains("no table to compare"), "{}", r.stderr);
}
