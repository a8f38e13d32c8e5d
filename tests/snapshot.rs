//! mooncdc-snapshot end to end on SQLite sources, through the real binaries
//! (docs/TOOLS.md "mooncdc-snapshot"; docs/FORMAT.md §8 snapshots, §9 key order; docs/TOOLS.md the
//! hand-over to capture): exact values, a cursor that hands over exactly to
//! `mooncdc-capture --after`, even while another connection writes all the
//! time, table selection, and refusals.

mod common;

use common::sqlite::*;
use mooncdc::wire::{Cursor, Limits, Schema, SnapItem, SnapshotReader, Value};
use rusqlite::params;
use rusqlite::types::Value as S;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// A parsed (and validated) JSONL snapshot.
struct Snap {
    cursor: Cursor,
    schemas: Vec<Schema>,
    rows: Vec<(String, Vec<Value>)>,
    count: u64,
}

#[track_caller]
fn parse_snapshot(bytes: &[u8]) -> Snap {
    let mut r = SnapshotReader::jsonl(bytes, "<snapshot>", Limits::default());
    let mut head = None;
    let mut rows = Vec::new();
    let mut count = None;
    while let Some(item) = r.next_item().unwrap_or_else(|e| {
        panic!(
            "snapshot output is not valid: {e}\n{}",
            String::from_utf8_lossy(bytes)
        )
    }) {
        match item {
            SnapItem::Header { cursor, schemas } => head = Some((cursor, schemas)),
            SnapItem::Row { table, row } => rows.push((table, row)),
            SnapItem::Commit { count: c } => count = Some(c),
        }
    }
    let (cursor, schemas) = head.expect("header");
    Snap {
        cursor,
        schemas,
        rows,
        count: count.expect("commit"),
    }
}

fn snapshot(db: &Dbs, extra: &[&str]) -> common::Run {
    let url = db.src_url();
    let mut args = vec!["--source", url.as_str()];
    args.extend_from_slice(extra);
    exec(SNAPSHOT, &args, None)
}

#[test]
fn snapshot_carries_every_value_class_and_hands_over_exactly() {
    let db = Dbs::new();
    db.src_sql(
        "CREATE TABLE v(id INTEGER PRIMARY KEY, r REAL, t TEXT, b BLOB, i INTEGER, u);
         CREATE TABLE w(k PRIMARY KEY, v) WITHOUT ROWID;",
    );
    let id = db.init(&[]);
    let mut rng = Rng::new(0x5AA9);
    {
        let mut c = db.src_conn();
        let tx = c.transaction().unwrap();
        let fixed: Vec<[S; 5]> = vec![
            [
                S::Real(-0.0),
                S::Text("\u{FEFF}x".into()),
                S::Blob(vec![]),
                S::Integer(i64::MIN),
                S::Real(-0.0),
            ],
            [
                S::Real(1e300),
                S::Text("a\0b".into()),
                S::Blob(vec![0, 0xff]),
                S::Integer(i64::MAX),
                S::Real(5e-324),
            ],
            [
                S::Real(f64::from_bits(0x000f_ffff_ffff_ffff)),
                S::Text("😀\u{10FFFF}".into()),
                S::Null,
                S::Null,
                S::Text("\u{FEFF}".into()),
            ],
        ];
        for (i, [r, t, b, n, u]) in fixed.iter().enumerate() {
            tx.execute(
                "INSERT INTO v VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                params![i as i64 + 1, r, t, b, n, u],
            )
            .unwrap();
        }
        for id in 10..700 {
            tx.execute(
                "INSERT INTO v VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                params![
                    id,
                    rng.real(),
                    rng.text(),
                    rng.blob(),
                    rng.next() as i64,
                    rng.any()
                ],
            )
            .unwrap();
        }
        // Keys of every class, in an untyped WITHOUT ROWID key.
        for (k, v) in [
            (S::Integer(1), "int"),
            (S::Real(2.5), "real"),
            (S::Integer(-3), "neg"),
            (S::Text("a".into()), "text a"),
            (S::Text("B".into()), "text B"),
            (S::Text("\u{FEFF}".into()), "bom"),
            (S::Blob(vec![0]), "blob 00"),
            (S::Blob(vec![0, 1]), "blob 0001"),
            (S::Real(1e300), "big"),
            (S::Real(-0.0), "negative zero"),
            (S::Integer(i64::MIN), "min"),
            // Where INTEGER and REAL interleave near 2^53 and 2^63.
            (S::Integer(i64::MAX), "i64 max"),
            (S::Real(9_223_372_036_854_775_808.0), "2^63 real"),
            (S::Integer(9_007_199_254_740_993), "2^53+1 int"),
            (S::Real(9_007_199_254_740_992.0), "2^53 real"),
            (S::Real(-9_223_372_036_854_777_856.0), "below i64 min"),
        ] {
            tx.execute("INSERT INTO w VALUES (?1, ?2)", params![k, v])
                .unwrap();
        }
        tx.execute("UPDATE v SET t = t || '!' WHERE id % 5 = 0", [])
            .unwrap();
        tx.execute("DELETE FROM v WHERE id % 7 = 0", []).unwrap();
        tx.commit().unwrap();
    }
    let hw = db.status().high_water;
    let r = snapshot(&db, &[]);
    expect(&r, 0, "snapshot");
    let s = parse_snapshot(&r.stdout);
    assert_eq!(
        (s.cursor.source.as_str(), s.cursor.sequence()),
        (id.as_str(), hw)
    );
    let n_src: i64 = db
        .src_conn()
        .query_row(
            "SELECT (SELECT count(*) FROM v) + (SELECT count(*) FROM w)",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!((s.rows.len() as i64, s.count as i64), (n_src, n_src));
    assert_eq!(
        s.schemas
            .iter()
            .map(|x| x.table.as_str())
            .collect::<Vec<_>>(),
        vec!["v", "w"]
    );
    // The untyped key in SQLite's order: numbers, then TEXT, then BLOB.
    let wkeys: Vec<String> = s
        .rows
        .iter()
        .filter(|(t, _)| t == "w")
        .map(|(_, r)| row_text(&r[..1]))
        .collect();
    let want: Vec<String> = [
        vr(-9_223_372_036_854_777_856.0),
        vi(i64::MIN),
        vi(-3),
        vr(0.0),
        vi(1),
        vr(2.5),
        vr(9_007_199_254_740_992.0),
        vi(9_007_199_254_740_993),
        vi(i64::MAX),
        vr(9_223_372_036_854_775_808.0),
        vr(1e300),
        vt("B"),
        vt("a"),
        vt("\u{FEFF}"),
        vb(&[0]),
        vb(&[0, 1]),
    ]
    .iter()
    .map(|v| row_text(std::slice::from_ref(v)))
    .collect();
    assert_eq!(want, wkeys);
    let text = String::from_utf8(r.stdout.clone()).unwrap();
    assert!(
        !text.contains(r#"["real","-0""#),
        "negative zero reached the wire"
    );
    let first = &s.rows[0].1;
    assert_eq!(
        row_text(first),
        row_text(&[
            vi(1),
            vr(0.0),
            vt("\u{FEFF}x"),
            vb(&[]),
            vi(i64::MIN),
            vr(0.0)
        ])
    );

    let a = db.apply_ok(&r.stdout);
    assert_eq!(a.applied as i64, n_src);
    assert_eq!(a.cursor.as_ref(), Some(&s.cursor));
    db.audit_equal();
    db.assert_same_rows(&["v", "w"]);

    // The JSON form, written to a file, gives the same projection.
    let f = db.path_str("snap.json");
    expect(
        &snapshot(&db, &["--output-format", "json", "-o", &f]),
        0,
        "snapshot -o json",
    );
    let p2 = db.path("proj2.db");
    let r2 = exec(
        APPLY,
        &["--target", &format!("sqlite:{}", p2.display()), &f],
        None,
    );
    expect(&r2, 0, "apply JSON snapshot");
    for t in ["v", "w"] {
        assert_rows_eq(t, &dump(&db.proj_conn(), t), &dump(&open(&p2), t));
    }

    // Hand-over: the changes after the cursor, exactly.
    db.src_sql("INSERT INTO v(id, t) VALUES (1000, 'after'); UPDATE w SET v = 'moved' WHERE k = 2.5; DELETE FROM v WHERE id = 1;");
    let (raw, b) = db.capture_ok(&["--after", &s.cursor.to_json()]);
    assert_events(
        &[
            e_ins("v", vec![vi(1000), VN, vt("after"), VN, VN, VN]),
            e_upd("w", vec![vr(2.5), vt("real")], vec![vr(2.5), vt("moved")]),
            e_del(
                "v",
                vec![
                    vi(1),
                    vr(0.0),
                    vt("\u{FEFF}x"),
                    vb(&[]),
                    vi(i64::MIN),
                    vr(0.0),
                ],
            ),
        ],
        &events(&b),
    );
    db.apply_ok(&raw);
    db.audit_equal();
    db.assert_same_rows(&["v", "w"]);

    // The snapshot file and the catch-up file in one apply.
    let cf = db.path_str("catchup.jsonl");
    std::fs::write(&cf, &raw).unwrap();
    let sf = db.path_str("snap.jsonl");
    std::fs::write(&sf, &r.stdout).unwrap();
    let p3 = db.path("proj3.db");
    let r3 = exec(
        APPLY,
        &["--target", &format!("sqlite:{}", p3.display()), &sf, &cf],
        None,
    );
    expect(&r3, 0, "apply snapshot and stream in one run");
    let s3 = Summary::parse(&r3.stderr);
    assert_eq!((s3.batches, s3.applied), (2, n_src as u64 + 3), "{s3:?}");
    for t in ["v", "w"] {
        assert_rows_eq(t, &dump(&db.proj_conn(), t), &dump(&open(&p3), t));
    }
}

/// SQLite lets a non-INTEGER PRIMARY KEY of a rowid table hold NULL (even
/// twice); a snapshot with a NULL or duplicate key is invalid (docs/FORMAT.md §8), so
/// the snapshot tool must refuse rather than write one.
#[test]
fn a_null_primary_key_value_is_refused_by_the_snapshot() {
    let db = Dbs::new();
    db.src_sql("CREATE TABLE t(k TEXT PRIMARY KEY, v)");
    db.init(&[]);
    let r = db.sqlite3("INSERT INTO t VALUES (NULL, 'a'), (NULL, 'b'), ('x', 'c');");
    expect(&r, 0, "sqlite3");
    let r = snapshot(&db, &[]);
    if r.code == Some(0) {
        let mut rd = SnapshotReader::jsonl(&r.stdout[..], "<snapshot>", Limits::default());
        let verdict = loop {
            match rd.next_item() {
                Ok(Some(_)) => continue,
                Ok(None) => break "is valid".to_string(),
                Err(e) => break format!("is not a valid snapshot ({e})"),
            }
        };
        panic!(
            "mooncdc-snapshot exited 0 on a NULL key; its output {verdict}:\n{}",
            r.stdout_str()
        );
    }
    expect(&r, 1, "snapshot of a NULL key");
    assert!(
        r.stderr.contains("\"t\"") && r.stderr.contains("NULL"),
        "{}",
        r.stderr
    );
}

/// Another connection's writes, like `sample_app burst`: inserts, updates,
/// deletes, key changes and upserts in transactions, one in six rolled back.
fn writer(src: std::path::PathBuf, stop: Arc<AtomicBool>, committed: Arc<AtomicU64>) {
    let mut c = open(&src);
    let mut r = Rng::new(0xB0B);
    while !stop.load(Ordering::Relaxed) {
        let tx = c
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
            .unwrap();
        for _ in 0..1 + r.below(20) {
            let max: i64 = tx
                .query_row("SELECT coalesce(max(id), 0) FROM customers", [], |x| {
                    x.get(0)
                })
                .unwrap();
            let id = 1 + r.below(max.max(1) as u64) as i64;
            match r.below(10) {
                0..=3 => {
                    tx.execute(
                        "INSERT INTO customers VALUES (?1, ?2, ?3, ?4, ?5)",
                        params![max + 1, r.text(), r.real(), r.blob(), r.any()],
                    )
                    .unwrap();
                }
                4..=6 => {
                    tx.execute(
                        "UPDATE customers SET name = ?2, balance = ?3, note = ?4 WHERE id = ?1",
                        params![id, r.text(), r.real(), r.any()],
                    )
                    .unwrap();
                }
                7 => {
                    tx.execute("DELETE FROM customers WHERE id = ?1", [id])
                        .unwrap();
                }
                8 => {
                    tx.execute(
                        "UPDATE customers SET id = ?2 WHERE id = ?1",
                        params![id, max + 1000],
                    )
                    .unwrap();
                }
                _ => {
                    tx.execute(
                        "INSERT INTO settings VALUES (?1, ?2) ON CONFLICT(key) DO UPDATE SET value = excluded.value",
                        params![format!("key-{}", r.below(15)), r.any()],
                    )
                    .unwrap();
                }
            }
        }
        if r.below(6) == 0 {
            tx.rollback().unwrap();
        } else {
            tx.commit().unwrap();
            committed.fetch_add(1, Ordering::Relaxed);
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

#[test]
fn snapshot_while_another_connection_writes_then_catch_up_is_equal() {
    let db = Dbs::new();
    db.src_sql(
        "CREATE TABLE customers(id INTEGER PRIMARY KEY, name TEXT NOT NULL, balance REAL, avatar BLOB, note);
         CREATE TABLE settings(key TEXT PRIMARY KEY, value) WITHOUT ROWID;",
    );
    {
        let mut c = db.src_conn();
        let tx = c.transaction().unwrap();
        let mut r = Rng::new(7);
        for id in 1..=3000 {
            tx.execute(
                "INSERT INTO customers VALUES (?1, ?2, ?3, ?4, ?5)",
                params![id, r.text(), r.real(), r.blob(), r.any()],
            )
            .unwrap();
        }
        tx.commit().unwrap();
    }
    db.init(&[]);
    let stop = Arc::new(AtomicBool::new(false));
    let committed = Arc::new(AtomicU64::new(0));
    let w = {
        let (src, stop, committed) = (db.src.clone(), stop.clone(), committed.clone());
        std::thread::spawn(move || writer(src, stop, committed))
    };
    wait_for(20, "the writer to commit", || {
        committed.load(Ordering::Relaxed) >= 5
    });
    let before = committed.load(Ordering::Relaxed);
    let r = snapshot(&db, &[]);
    let during = committed.load(Ordering::Relaxed);
    expect(&r, 0, "snapshot while writing");
    let s = parse_snapshot(&r.stdout);
    assert!(
        s.cursor.sequence() > 0,
        "changes were made before the snapshot"
    );
    db.apply_ok(&r.stdout);
    // Catch up twice while the writer goes on.
    for _ in 0..2 {
        std::thread::sleep(Duration::from_millis(100));
        db.catch_up();
    }
    stop.store(true, Ordering::Relaxed);
    w.join().expect("writer");
    let total = committed.load(Ordering::Relaxed);
    db.catch_up();
    let hw = db.status().high_water;
    assert!(
        hw > s.cursor.sequence() && total > during,
        "the writer should have gone on after the snapshot (snapshot at {}, high water {hw}; \
         transactions: {before} before, {during} by the end of the snapshot, {total} in all)",
        s.cursor.sequence()
    );
    assert_eq!(db.target_cursor().unwrap().sequence(), hw);
    db.audit_equal();
    db.assert_same_rows(&["customers", "settings"]);
    db.sqldiff_clean(&["customers"]);
}

#[test]
fn snapshot_selects_tables_and_refuses_what_it_cannot_carry() {
    let db = Dbs::new();
    db.src_sql(
        "CREATE TABLE a(id INTEGER PRIMARY KEY, v TEXT);
         CREATE TABLE b(id INTEGER PRIMARY KEY, v TEXT);
         CREATE TABLE c(id INTEGER PRIMARY KEY, v TEXT);",
    );
    let r = snapshot(&db, &[]);
    expect(&r, 1, "snapshot before init");
    assert!(r.stderr.contains("not installed"), "{}", r.stderr);
    db.init(&["a", "b"]);
    db.src_sql("INSERT INTO a VALUES (1, 'a'); INSERT INTO b VALUES (1, 'b'); INSERT INTO c VALUES (1, 'c');");
    let r = snapshot(&db, &["--table", "b"]);
    expect(&r, 0, "snapshot --table b");
    let s = parse_snapshot(&r.stdout);
    assert_eq!(
        s.schemas
            .iter()
            .map(|x| x.table.as_str())
            .collect::<Vec<_>>(),
        vec!["b"]
    );
    assert_eq!(s.rows, vec![("b".to_string(), vec![vi(1), vt("b")])]);
    let r = snapshot(&db, &[]);
    let s = parse_snapshot(&r.stdout);
    assert_eq!(
        s.schemas
            .iter()
            .map(|x| x.table.as_str())
            .collect::<Vec<_>>(),
        vec!["a", "b"]
    );
    let r = snapshot(&db, &["--table", "c"]);
    expect(&r, 2, "snapshot of a table not captured");
    assert!(r.stderr.contains("\"c\""), "{}", r.stderr);

    // A table changed since init: refused until upgrade; no file is left behind.
    db.src_sql("ALTER TABLE a ADD COLUMN z");
    let out = db.path("snap.jsonl");
    let r = snapshot(&db, &["-o", out.to_str().unwrap()]);
    expect(&r, 1, "snapshot of a table changed since init");
    assert!(
        r.stderr.contains("\"a\"") && r.stderr.contains("upgrade"),
        "{}",
        r.stderr
    );
    assert!(
        !out.exists(),
        "a failed snapshot must not leave its output file"
    );
    expect(&db.capture_cmd("upgrade", &[]), 0, "upgrade");
    let r = snapshot(&db, &[]);
    expect(&r, 0, "snapshot after upgrade");
    assert_eq!(parse_snapshot(&r.stdout).schemas[0].columns.len(), 3);

    // TEXT that is not UTF-8 cannot be carried.
    let r = db.sqlite3("INSERT INTO b VALUES (2, CAST(x'c3' AS TEXT));");
    expect(&r, 0, "sqlite3");
    let r = snapshot(&db, &["-o", out.to_str().unwrap()]);
    expect(&r, 1, "snapshot of invalid UTF-8");
    assert!(
        r.stderr.contains("\"b\"") && r.stderr.contains("UTF-8"),
        "{}",
        r.stderr
    );
    assert!(
        !out.exists(),
        "a failed snapshot must not leave its output file"
    );
    let r = snapshot(&db, &[]);
    expect(&r, 1, "snapshot of invalid UTF-8 to stdout");
    assert!(!String::from_utf8_lossy(&r.stdout).contains(r#""kind":"commit""#));
}

/// What a shell command shows on a terminal (util-linux `script` gives it
/// one): everything it wrote there, standard error included.
fn on_a_terminal(cmd: &str) -> String {
    let o = std::process::Command::new("script")
        .args(["-qec", cmd, "/dev/null"])
        .output()
        .expect("script (util-linux) runs");
    assert!(o.status.success(), "{cmd}: {o:?}");
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// Progress in a terminal (util-linux `script` gives the tool one): the
/// count and the exact total from the snapshot's own read, then the
/// line cleared so the shell prompt (or a summary) replaces it; `-q` and a
/// standard error that is not a terminal show nothing.
#[test]
fn progress_in_a_terminal_shows_count_and_total_then_clears() {
    let db = Dbs::new();
    db.src_sql("CREATE TABLE t(id INTEGER PRIMARY KEY, v TEXT);");
    db.init(&["t"]);
    db.src_sql(
        "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 70000)
         INSERT INTO t SELECT i, 'v' || i FROM n;",
    );
    let out = db.path("snap.jsonl");
    let in_terminal = |extra: &str| {
        on_a_terminal(&format!(
            "{} --source {} -o {} {extra}",
            bin("mooncdc-snapshot").display(),
            db.src_url(),
            out.display()
        ))
    };
    let screen = in_terminal("");
    assert!(
        screen.contains("rows: 65536 of 70000 (94%)"),
        "no count and total: {screen:?}"
    );
    // Whether a line is late enough to show a rate and the time left
    // depends on this machine's speed: the line's form is unit-tested
    // (cli::progress_tests), its count and total here.
    assert!(
        screen.trim_end().ends_with("\r\x1b[K"),
        "the progress line is not cleared at the end: {screen:?}"
    );
    assert_eq!(parse_snapshot(&std::fs::read(&out).unwrap()).count, 70000);
    let screen = in_terminal("-q");
    assert!(!screen.contains("rows:"), "-q shows progress: {screen:?}");
    let r = snapshot(&db, &["-o", out.to_str().unwrap()]);
    expect(&r, 0, "snapshot with standard error not a terminal");
    assert!(!r.stderr.contains("rows:"), "{}", r.stderr);
}

/// `-v` on every tool: the lines each one promises on standard error, in
/// words with correct plurals, and nothing on standard output changed;
/// `-q` wins over `-v`.
#[test]
fn verbose_on_every_tool() {
    let db = Dbs::new();
    db.src_sql(
        "CREATE TABLE t(id INTEGER PRIMARY KEY, v TEXT); CREATE TABLE u(id INTEGER PRIMARY KEY);",
    );
    db.init(&["t", "u"]);
    db.src_sql("INSERT INTO t VALUES (1,'a'),(2,'b'); INSERT INTO u VALUES (5);");
    let dir = db.path("v");
    std::fs::create_dir_all(&dir).unwrap();
    let f = |n: &str| dir.join(n).display().to_string();
    let run = |tool: &str, args: &[&str]| -> (String, String) {
        let o = std::process::Command::new(bin(tool))
            .args(args)
            .output()
            .expect("run the tool");
        assert!(o.status.success(), "{tool} {args:?}: {o:?}");
        (
            String::from_utf8_lossy(&o.stdout).into_owned(),
            String::from_utf8_lossy(&o.stderr).into_owned(),
        )
    };
    let src = db.src_url();
    let (_, e) = run(
        "mooncdc-snapshot",
        &["-v", "--source", &src, "-o", &f("s.jsonl")],
    );
    assert!(
        e.contains("table \"t\": 2 rows") && e.contains("table \"u\": 1 row\n"),
        "{e}"
    );
    assert!(e.contains("snapshot of 2 tables, 3 rows, in "), "{e}");
    db.src_sql("UPDATE t SET v = 'c' WHERE id = 1; DELETE FROM u;");
    let cursor = {
        let (out, _) = run(
            "mooncdc-apply",
            &["--target", &format!("sqlite:{}", f("p.db")), &f("s.jsonl")],
        );
        assert!(out.is_empty());
        run(
            "mooncdc-apply",
            &["cursor", "--target", &format!("sqlite:{}", f("p.db"))],
        )
        .0
    };
    let (batch, e) = run(
        "mooncdc-capture",
        &["-v", "--source", &src, "--after", cursor.trim()],
    );
    assert!(e.contains("batch written through 5: 2 events"), "{e}");
    let (quiet, _) = run(
        "mooncdc-capture",
        &["--source", &src, "--after", cursor.trim()],
    );
    assert_eq!(batch, quiet, "-v changes standard output");
    std::fs::write(f("b.jsonl"), &batch).unwrap();
    // The same target twice: one for -v, one for -v -q.
    std::fs::copy(f("p.db"), f("q.db")).unwrap();
    let (_, e) = run("mooncdc-split", &["-v", "--max-events", "1", &f("b.jsonl")]);
    assert!(
        e.contains("split 1 batch into 2 pieces, 2 events, in "),
        "{e}"
    );
    let (_, e) = run("mooncdc-merge", &["-v", &f("b.jsonl")]);
    assert!(e.contains("merged 1 batch into one, 2 events, in "), "{e}");
    let (_, e) = run("mooncdc-compact", &["-v", &f("b.jsonl")]);
    assert!(
        e.contains("compacted 1 batch: 2 events in, 2 events out, in "),
        "{e}"
    );
    let (_, e) = run(
        "mooncdc-apply",
        &[
            "-v",
            "--target",
            &format!("sqlite:{}", f("p.db")),
            &f("b.jsonl"),
        ],
    );
    assert!(
        e.contains("batch committed through 5: 2 events applied, in "),
        "{e}"
    );
    let (_, e) = run(
        "mooncdc-audit",
        &[
            "-v",
            "--source",
            &src,
            "--target",
            &format!("sqlite:{}", f("p.db")),
        ],
    );
    assert!(e.contains("audited 2 tables, 2 rows compared, in "), "{e}");
    let (_, e) = run("mooncdc-merge", &["-v", "-q", &f("b.jsonl")]);
    assert!(e.is_empty(), "-q does not win over -v: {e}");
    // apply keeps its summary under -q, but not the -v lines.
    let (_, e) = run(
        "mooncdc-apply",
        &[
            "-v",
            "-q",
            "--target",
            &format!("sqlite:{}", f("q.db")),
            &f("b.jsonl"),
        ],
    );
    assert!(
        !e.contains("batch committed through"),
        "-q does not win over -v: {e}"
    );
}

/// `mooncdc-capture` read in a terminal shows its place in the log against
/// the batch's high water, then clears the line; `--follow` shows none.
#[test]
fn capture_progress_in_a_terminal_shows_the_place_in_the_log() {
    let db = Dbs::new();
    db.src_sql("CREATE TABLE t(id INTEGER PRIMARY KEY, v TEXT);");
    db.init(&["t"]);
    db.src_sql(
        "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 70000)
         INSERT INTO t SELECT i, 'v' || i FROM n;",
    );
    let out = db.path("b.jsonl");
    let cmd = format!(
        "{} --source {} > {}",
        bin("mooncdc-capture").display(),
        db.src_url(),
        out.display()
    );
    let screen = on_a_terminal(&cmd);
    assert!(screen.contains("log: 1 of 70000 (0%)"), "{screen:?}");
    assert!(screen.trim_end().ends_with("\r\x1b[K"), "{screen:?}");
    // The output is the same batch as without a terminal.
    let plain = std::process::Command::new(bin("mooncdc-capture"))
        .args(["--source", &db.src_url()])
        .output()
        .unwrap();
    assert_eq!(std::fs::read(&out).unwrap(), plain.stdout);
}
