//! mooncdc-apply end to end on a SQLite projection, through the real binaries
//! (docs/TOOLS.md "mooncdc-apply"; docs/TOOLS.md "mooncdc-apply", docs/FORMAT.md §13 errors): replays are
//! no-ops, gaps and other sources are refused, divergence fails the whole
//! batch, the stored cursor, snapshots only into targets without a cursor,
//! exact TEXT binding, and SIGKILL at random points losing and duplicating
//! nothing (checked against a model, `mooncdc-audit` and `sqldiff`).

mod common;

use common::sqlite::*;
use common::{batches, int, kv_schema, row, Spec};
use mooncdc::wire::Event;
use rusqlite::params;
use serde_json::json;
use std::collections::BTreeMap;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// A source with table `t(id INTEGER PRIMARY KEY, v TEXT)` under capture.
fn kv_source() -> (Dbs, String) {
    let db = Dbs::new();
    db.src_sql("CREATE TABLE t(id INTEGER PRIMARY KEY, v TEXT)");
    let id = db.init(&[]);
    (db, id)
}

fn cursor_json(source: &str, seq: u128) -> String {
    format!(r#"{{"source":"{source}","sequence":"{seq}"}}"#)
}

#[test]
fn replaying_a_stream_is_a_no_op_and_an_overlap_applies_only_the_rest() {
    let (db, id) = kv_source();
    for i in 1..=30 {
        db.src_sql(&format!("INSERT INTO t VALUES ({i}, 'v{i}')"));
        if i % 3 == 0 {
            db.src_sql(&format!("UPDATE t SET v = 'u{i}' WHERE id = {}", i / 3));
        }
    }
    let (raw, _) = db.capture_ok(&[]);
    let split = exec(SPLIT, &["--max-events", "7"], Some(&raw));
    expect(&split, 0, "split");
    let b = batches(&split.stdout);
    assert!(b.len() > 3);
    let n = events(&b).len() as u64;
    assert_eq!(n, 40);
    let file = db.path_str("stream.jsonl");
    std::fs::write(&file, &split.stdout).unwrap();

    let r = exec(APPLY, &["--target", &db.proj_url(), &file], None);
    expect(&r, 0, "first apply");
    let s1 = Summary::parse(&r.stderr);
    assert_eq!(
        (s1.batches, s1.applied, s1.skipped),
        (b.len() as u64, n, 0),
        "{s1:?}"
    );
    let held = dump(&db.proj_conn(), "t");
    let cur = db.target_cursor().unwrap();
    assert_eq!(cur.sequence(), 40);

    // The same stream again: nothing applied, every event skipped.
    let r = exec(APPLY, &["--target", &db.proj_url(), &file], None);
    expect(&r, 0, "replay");
    let s2 = Summary::parse(&r.stderr);
    assert_eq!(
        (s2.applied, s2.skipped),
        (0, n),
        "replay should skip every event: {s2:?}"
    );
    assert_eq!(s2.cursor.as_ref(), Some(&cur));
    assert_rows_eq("t", &held, &dump(&db.proj_conn(), "t"));
    assert_eq!(db.target_cursor().unwrap(), cur);

    // An overlapping batch (from 25, past the held 40) applies only what is new.
    db.src_sql("INSERT INTO t VALUES (100, 'new'); UPDATE t SET v = 'newer' WHERE id = 1;");
    let (raw, b) = db.capture_ok(&["--after", &cursor_json(&id, 25)]);
    assert_eq!(events(&b).len(), 17);
    let s3 = db.apply_ok(&raw);
    assert_eq!((s3.applied, s3.skipped), (2, 15), "{s3:?}");
    assert_eq!(db.target_cursor().unwrap().sequence(), 42);
    db.audit_equal();
    db.assert_same_rows(&["t"]);
}

#[test]
fn a_gap_is_refused_and_the_cursor_is_unchanged() {
    let (db, id) = kv_source();
    db.src_sql("INSERT INTO t VALUES (1, 'a'), (2, 'b'), (3, 'c')");
    db.catch_up();
    let held = dump(&db.proj_conn(), "t");
    db.src_sql("INSERT INTO t VALUES (4, 'd'), (5, 'e'), (6, 'f')");
    let (raw, _) = db.capture_ok(&["--after", &cursor_json(&id, 4)]);
    let r = db.apply(&raw, &[]);
    expect(&r, 1, "apply of a batch starting after the target's cursor");
    assert!(
        r.stderr.contains("gap") && r.stderr.contains('4') && r.stderr.contains('3'),
        "the message should say gap, with both positions: {}",
        r.stderr
    );
    assert_eq!(db.target_cursor().unwrap().sequence(), 3);
    assert_rows_eq("t", &held, &dump(&db.proj_conn(), "t"));
    // From the held cursor it applies.
    db.catch_up();
    db.audit_equal();
}

#[test]
fn a_batch_of_another_source_is_refused() {
    let (db, _) = kv_source();
    db.src_sql("INSERT INTO t VALUES (1, 'a')");
    db.catch_up();
    let cur = db.target_cursor().unwrap();
    let held = dump(&db.proj_conn(), "t");
    // A second database with the same table has its own identity.
    let other = db.path("other.db");
    let c = open(&other);
    c.execute_batch("CREATE TABLE t(id INTEGER PRIMARY KEY, v TEXT)")
        .unwrap();
    let ou = format!("sqlite:{}", other.display());
    expect(
        &exec(CAPTURE, &["init", "--source", &ou], None),
        0,
        "init other",
    );
    c.execute_batch("INSERT INTO t VALUES (2, 'other')")
        .unwrap();
    let r = exec(CAPTURE, &["--source", &ou], None);
    expect(&r, 0, "capture other");
    let r = db.apply(&r.stdout, &[]);
    expect(&r, 1, "apply of another source's batch");
    assert!(
        r.stderr.contains(&cur.source),
        "the message should name the sources: {}",
        r.stderr
    );
    assert_eq!(db.target_cursor().unwrap(), cur);
    assert_rows_eq("t", &held, &dump(&db.proj_conn(), "t"));
}

#[test]
fn divergence_fails_the_whole_batch_and_overwrite_forces_it() {
    let (db, _) = kv_source();
    db.src_sql("INSERT INTO t VALUES (1, 'a'), (2, 'b'), (3, 'c')");
    db.catch_up();
    db.proj_sql("UPDATE t SET v = 'tampered' WHERE id = 2");
    let held = dump(&db.proj_conn(), "t");
    // One source transaction, one batch: insert 4, update 2 (before image "b"), insert 5.
    db.src_sql(
        "BEGIN; INSERT INTO t VALUES (4, 'd'); UPDATE t SET v = 'b2' WHERE id = 2; INSERT INTO t VALUES (5, 'e'); COMMIT;",
    );
    let after = db.target_cursor().unwrap().to_json();
    let (raw, b) = db.capture_ok(&["--after", &after]);
    assert_eq!((b.len(), b[0].events.len()), (1, 3));
    let r = db.apply(&raw, &[]);
    expect(&r, 1, "apply of an update whose before image differs");
    assert!(
        r.stderr.contains("event 5") && r.stderr.contains("diverges") && r.stderr.contains("\"t\""),
        "the message should name the event, the table and the divergence: {}",
        r.stderr
    );
    assert_eq!(
        db.target_cursor().unwrap().sequence(),
        3,
        "cursor must not move"
    );
    assert_rows_eq("t", &held, &dump(&db.proj_conn(), "t"));

    let r = db.apply(&raw, &["--on-conflict", "overwrite"]);
    expect(&r, 0, "apply --on-conflict overwrite");
    assert_eq!(db.target_cursor().unwrap().sequence(), 6);
    db.audit_equal();
    db.assert_same_rows(&["t"]);

    // A delete of a row the projection lost.
    db.proj_sql("DELETE FROM t WHERE id = 3");
    let held = dump(&db.proj_conn(), "t");
    db.src_sql("BEGIN; INSERT INTO t VALUES (7, 'g'); DELETE FROM t WHERE id = 3; COMMIT;");
    let (raw, _) = db.capture_ok(&["--after", &db.target_cursor().unwrap().to_json()]);
    let r = db.apply(&raw, &[]);
    expect(&r, 1, "apply of a delete of a missing row");
    assert!(r.stderr.contains("event 8"), "{}", r.stderr);
    assert_eq!(db.target_cursor().unwrap().sequence(), 6);
    assert_rows_eq("t", &held, &dump(&db.proj_conn(), "t"));
    expect(
        &db.apply(&raw, &["--on-conflict", "overwrite"]),
        0,
        "overwrite",
    );
    db.audit_equal();

    // An insert of a key the projection already holds.
    db.proj_sql("INSERT INTO t VALUES (9, 'extra')");
    let held = dump(&db.proj_conn(), "t");
    db.src_sql("INSERT INTO t VALUES (9, 'nine')");
    let (raw, _) = db.capture_ok(&["--after", &db.target_cursor().unwrap().to_json()]);
    let r = db.apply(&raw, &[]);
    expect(&r, 1, "apply of an insert of a held key");
    assert!(
        r.stderr.contains("event 9") && r.stderr.contains("already holds"),
        "{}",
        r.stderr
    );
    assert_eq!(db.target_cursor().unwrap().sequence(), 8);
    assert_rows_eq("t", &held, &dump(&db.proj_conn(), "t"));
    expect(
        &db.apply(&raw, &["--on-conflict", "overwrite"]),
        0,
        "overwrite",
    );
    db.audit_equal();
    db.assert_same_rows(&["t"]);
}

#[test]
fn cursor_prints_the_stored_cursor_and_exits_1_when_none() {
    let (db, id) = kv_source();
    let url = db.proj_url();
    let r = exec(APPLY, &["cursor", "--target", &url], None);
    expect(&r, 1, "cursor of a target that does not exist");
    assert!(r.stdout.is_empty());
    assert!(r.stderr.contains("no cursor"), "{}", r.stderr);
    assert!(
        !db.proj.exists(),
        "asking for the cursor must not create the database"
    );
    // A database without a cursor.
    open(&db.proj).execute_batch("CREATE TABLE x(a)").unwrap();
    expect(
        &exec(APPLY, &["cursor", "--target", &url], None),
        1,
        "cursor of a plain database",
    );

    db.src_sql("INSERT INTO t VALUES (1, 'a')");
    let (_, s) = db.catch_up();
    let r = exec(APPLY, &["cursor", "--target", &url], None);
    expect(&r, 0, "cursor");
    let printed = r.stdout_str();
    let c = mooncdc::wire::Cursor::parse_json(printed.trim()).unwrap();
    assert_eq!(Some(&c), s.cursor.as_ref());
    assert_eq!((c.source.as_str(), c.sequence()), (id.as_str(), 1));
    assert_eq!(printed, format!("{}\n", cursor_json(&id, 1)));
    let r = exec(
        APPLY,
        &["cursor", "--target", &url, "--source-identity", &id],
        None,
    );
    expect(&r, 0, "cursor --source-identity (same)");
    let r = exec(
        APPLY,
        &[
            "cursor",
            "--target",
            &url,
            "--source-identity",
            "sqlite:someone-else",
        ],
        None,
    );
    expect(&r, 1, "cursor --source-identity (other)");
    expect(
        &exec(APPLY, &["cursor"], None),
        2,
        "cursor without --target",
    );
}

#[test]
fn a_snapshot_into_a_target_with_a_cursor_is_refused() {
    let (db, _) = kv_source();
    db.src_sql("INSERT INTO t VALUES (1, 'a'), (2, 'b')");
    let snap = exec(SNAPSHOT, &["--source", &db.src_url()], None);
    expect(&snap, 0, "snapshot");
    let s = db.apply_ok(&snap.stdout);
    assert_eq!(s.applied, 2);
    let cur = db.target_cursor().unwrap();
    db.src_sql("INSERT INTO t VALUES (3, 'c')");
    let held = dump(&db.proj_conn(), "t");
    for input in [
        snap.stdout.clone(),
        exec(SNAPSHOT, &["--source", &db.src_url()], None).stdout,
    ] {
        let r = db.apply(&input, &[]);
        expect(&r, 1, "snapshot into a target with a cursor");
        assert!(r.stderr.contains("already holds"), "{}", r.stderr);
        assert_eq!(db.target_cursor().unwrap(), cur);
        assert_rows_eq("t", &held, &dump(&db.proj_conn(), "t"));
    }
    // Even with --on-conflict overwrite.
    let r = db.apply(&snap.stdout, &["--on-conflict", "overwrite"]);
    expect(&r, 1, "snapshot with overwrite into a target with a cursor");
    db.catch_up();
    db.audit_equal();
}

#[test]
fn text_is_bound_so_a_leading_bom_survives() {
    let dir = tempfile::tempdir().unwrap();
    let proj = dir.path().join("p.db");
    let url = format!("sqlite:{}", proj.display());
    let spec = Spec::new(0, 4).schemas(vec![kv_schema("t")]).events(vec![
        common::ins(1, "t", row(1, "\u{FEFF}x")),
        common::ins(2, "t", json!([int(2), ["text-utf8", "efbbbf79"]])),
        common::ins(3, "t", row(3, "\u{FEFF}")),
        common::upd(4, "t", row(1, "\u{FEFF}x"), row(1, "\u{FEFF}\u{FEFF}z")),
    ]);
    let r = exec(APPLY, &["--target", &url], Some(spec.jsonl().as_bytes()));
    expect(&r, 0, "apply");
    // The escaped form, in a JSON batch document.
    let doc = format!(
        r#"{{"format":"mooncdc.batch.v1","start":{0},"end":{1},"high_water":"5","events":[{{"sequence":"5","table":"t","operation":"insert","after":[["integer","4"],["text","\ufeffw"]]}}]}}"#,
        cursor_json(common::SRC, 4),
        cursor_json(common::SRC, 5)
    );
    let r = exec(APPLY, &["--target", &url], Some(doc.as_bytes()));
    expect(&r, 0, "apply JSON");
    let got: Vec<(i64, String, String)> = open(&proj)
        .prepare("SELECT id, typeof(v), hex(v) FROM t ORDER BY id")
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    let want: Vec<(i64, String, String)> = [
        (1, "EFBBBFEFBBBF7A"),
        (2, "EFBBBF79"),
        (3, "EFBBBF"),
        (4, "EFBBBF77"),
    ]
    .iter()
    .map(|(i, h)| (*i, "text".to_string(), h.to_string()))
    .collect();
    assert_eq!(want, got);
}

// ---------------------------------------------------------------- SIGKILL

/// Make at least `n` changes on `items` and `tags` in transactions of up to
/// 500 statements; returns how many.
fn churn(db: &Dbs, n: usize, rng: &mut Rng) -> usize {
    let mut c = db.src_conn();
    let mut next_id: i64 = 1;
    let mut done = 0;
    while done < n {
        let tx = c.transaction().unwrap();
        for _ in 0..500 {
            let live = next_id.max(2) as u64;
            done += match rng.below(10) {
                0..=4 => {
                    next_id += 1;
                    tx.execute(
                        "INSERT INTO items VALUES (?1, ?2, ?3, ?4, ?5)",
                        params![next_id, rng.text(), rng.real(), rng.blob(), rng.any()],
                    )
                    .unwrap()
                }
                5 | 6 => tx
                    .execute(
                        "UPDATE items SET name = ?2, price = ?3, note = ?4 WHERE id = ?1",
                        params![1 + rng.below(live) as i64, rng.text(), rng.real(), rng.any()],
                    )
                    .unwrap(),
                7 => tx
                    .execute("DELETE FROM items WHERE id = ?1", [1 + rng.below(live) as i64])
                    .unwrap(),
                8 => tx
                    .execute(
                        "INSERT INTO tags VALUES (?1, ?2, ?3) ON CONFLICT(item, tag) DO UPDATE SET n = excluded.n",
                        params![rng.below(300) as i64, format!("tag{}", rng.below(5)), rng.any()],
                    )
                    .unwrap(),
                _ => tx
                    .execute("DELETE FROM tags WHERE item = ?1", [rng.below(300) as i64])
                    .unwrap(),
            };
            if done >= n {
                break;
            }
        }
        tx.commit().unwrap();
    }
    done
}

/// The cursor sequence stored in a projection, if any (read directly).
fn stored_sequence(path: &std::path::Path) -> Option<u128> {
    if !path.exists() {
        return None;
    }
    let c = open(path);
    c.query_row("SELECT sequence FROM _mooncdc_cursor", [], |r| {
        r.get::<_, String>(0)
    })
    .ok()
    .map(|s| s.parse().unwrap())
}

/// The projection holds exactly the state after the events through `through`.
#[track_caller]
fn assert_state_at(
    proj: &std::path::Path,
    evs: &[Event],
    keys: &BTreeMap<String, Vec<usize>>,
    through: u128,
) {
    let held: Vec<Event> = evs
        .iter()
        .filter(|e| e.sequence <= through)
        .cloned()
        .collect();
    let want = model(&held, keys);
    let c = open(proj);
    for (table, key) in keys {
        let exists: bool = c
            .query_row(
                "SELECT count(*) FROM sqlite_schema WHERE type = 'table' AND name = ?1",
                [table],
                |r| r.get::<_, i64>(0),
            )
            .map(|n| n > 0)
            .unwrap_or(false);
        let got = if exists {
            rows_by_key(&c, table, key)
        } else {
            BTreeMap::new()
        };
        let empty = BTreeMap::new();
        let w = want.get(table).unwrap_or(&empty);
        if &got != w {
            let missing = w.keys().filter(|k| !got.contains_key(*k)).count();
            let extra = got.keys().filter(|k| !w.contains_key(*k)).count();
            let differ = w
                .iter()
                .filter(|(k, v)| got.get(*k).is_some_and(|g| g != *v))
                .count();
            panic!(
                "after a kill at cursor {through}, table {table:?} is not the state through {through}: \
                 {missing} rows missing, {extra} extra, {differ} different ({} expected, {} held)",
                w.len(),
                got.len()
            );
        }
    }
}

#[test]
fn sigkill_at_random_points_loses_and_duplicates_nothing() {
    let db = Dbs::new();
    db.src_sql(
        "CREATE TABLE items(id INTEGER PRIMARY KEY, name TEXT, price REAL, data BLOB, note);
         CREATE TABLE tags(item INTEGER, tag TEXT, n, PRIMARY KEY (item, tag));",
    );
    db.init(&[]);
    let total = churn(&db, 50_000, &mut Rng::new(0x5164_1111));
    let (raw, _) = db.capture_ok(&[]);
    let split = exec(SPLIT, &["--max-events", "500"], Some(&raw));
    expect(&split, 0, "split");
    let stream = db.path_str("stream.jsonl");
    std::fs::write(&stream, &split.stdout).unwrap();
    let b = batches(&split.stdout);
    let evs = events(&b);
    assert_eq!(evs.len(), total);
    let ends: Vec<u128> = b.iter().map(|x| x.end.sequence()).collect();
    let last = *ends.last().unwrap();
    let mut keys = BTreeMap::new();
    keys.insert("items".to_string(), vec![0]);
    keys.insert("tags".to_string(), vec![0, 1]);

    let spawn_with = |proj: &std::path::Path, input: &str| {
        Command::new(bin(APPLY))
            .args(["--target", &format!("sqlite:{}", proj.display()), input])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    let spawn = |proj: &std::path::Path| spawn_with(proj, &stream);
    // A full run first, to know how long an apply takes.
    let t0 = Instant::now();
    let full = spawn(&db.proj).wait_with_output().unwrap();
    let full_time = t0.elapsed();
    assert!(
        full.status.success(),
        "{}",
        String::from_utf8_lossy(&full.stderr)
    );
    db.audit_equal();

    let mut rng = Rng::new(seed("sigkill"));
    let check_killed = |proj: &std::path::Path, what: &str| -> u128 {
        let held = stored_sequence(proj);
        if let Some(h) = held {
            assert!(
                h == 0 || ends.contains(&h),
                "{what}: the cursor {h} is not at a batch boundary"
            );
        }
        let h = held.unwrap_or(0);
        assert_state_at(proj, &evs, &keys, h);
        h
    };
    let finish = |proj: &std::path::Path, held: u128| {
        let out = spawn(proj).wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "re-run after a kill failed: {stderr}");
        let s = Summary::parse(&stderr);
        let before = evs.iter().filter(|e| e.sequence <= held).count() as u64;
        assert_eq!(
            (s.skipped, s.applied),
            (before, total as u64 - before),
            "the re-run should skip exactly what was held at {held} and apply the rest"
        );
        assert_eq!(stored_sequence(proj), Some(last));
    };
    let mut outcomes = Vec::new();
    for i in 0..4 {
        let proj = db.path(&format!("proj{i}.db"));
        let frac = (5 + rng.below(90)) as f64 / 100.0;
        let delay = full_time.mul_f64(frac);
        let mut child = spawn(&proj);
        std::thread::sleep(delay);
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
        let held = check_killed(&proj, &format!("kill after {delay:?}"));
        outcomes.push((delay, held));
        finish(&proj, held);
        let a = exec(
            AUDIT,
            &[
                "--source",
                &db.src_url(),
                "--target",
                &format!("sqlite:{}", proj.display()),
            ],
            None,
        );
        expect(&a, 0, "audit after kill and re-run");
        for t in ["items", "tags"] {
            let d = sqldiff(&db.src, &proj, t);
            assert!(
                d.trim().is_empty(),
                "sqldiff {t} after kill at {held}:\n{d}"
            );
        }
    }
    // Several kills of the same target, each at a later point, then a complete run.
    let proj = db.path("chain.db");
    let mut prev = 0;
    for k in 1..=3 {
        let mut child = spawn(&proj);
        std::thread::sleep(full_time.mul_f64(0.15 + 0.05 * rng.below(4) as f64));
        child.kill().unwrap();
        child.wait().unwrap();
        let held = check_killed(&proj, &format!("chained kill {k}"));
        assert!(
            held >= prev,
            "the cursor went backwards: {prev} then {held}"
        );
        outcomes.push((Duration::ZERO, held));
        prev = held;
    }
    finish(&proj, prev);
    let a = exec(
        AUDIT,
        &[
            "--source",
            &db.src_url(),
            "--target",
            &format!("sqlite:{}", proj.display()),
        ],
        None,
    );
    expect(&a, 0, "audit after chained kills");
    for t in ["items", "tags"] {
        let d = sqldiff(&db.src, &proj, t);
        assert!(d.trim().is_empty(), "sqldiff {t} after chained kills:\n{d}");
    }

    // A snapshot loads in one transaction: killed anywhere, all of it or nothing.
    let snap = db.path_str("snap.jsonl");
    expect(
        &exec(SNAPSHOT, &["--source", &db.src_url(), "-o", &snap], None),
        0,
        "snapshot",
    );
    let proj = db.path("snapproj.db");
    let t0 = Instant::now();
    let mut child = spawn_with(&proj, &snap);
    std::thread::sleep(full_time.mul_f64((5 + rng.below(40)) as f64 / 100.0));
    child.kill().unwrap();
    let killed_after = t0.elapsed();
    child.wait().unwrap();
    let held = stored_sequence(&proj);
    assert!(
        held.is_none() || held == Some(last),
        "a killed snapshot load left cursor {held:?}"
    );
    assert_state_at(&proj, &evs, &keys, held.unwrap_or(0));
    if held.is_none() {
        let out = spawn_with(&proj, &snap).wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let a = exec(
        AUDIT,
        &[
            "--source",
            &db.src_url(),
            "--target",
            &format!("sqlite:{}", proj.display()),
        ],
        None,
    );
    expect(&a, 0, "audit after a killed snapshot load");
    eprintln!(
        "full apply {full_time:?}; kills (delay, held cursor): {outcomes:?}; snapshot load killed after {killed_after:?} holding {held:?}"
    );
}

/// Without schemas in the header, an image is checked against the target
/// table's width: a short image is bad data (exit 1), not a crash.
#[test]
fn an_image_narrower_than_the_table_is_refused_without_schemas() {
    let (db, _) = kv_source();
    db.src_sql("INSERT INTO t VALUES (1, 'a')");
    db.catch_up();
    let cur = db.target_cursor().unwrap();
    let s = cur.sequence();
    let batch = format!(
        "{{\"kind\":\"header\",\"format\":\"mooncdc.jsonl.v1\",\"start\":{c},\"high_water\":\"{s}\"}}\n\
         {{\"kind\":\"event\",\"event\":{{\"sequence\":\"{s1}\",\"table\":\"t\",\"operation\":\"delete\",\"before\":[]}}}}\n\
         {{\"kind\":\"commit\",\"end\":{e},\"count\":\"1\"}}\n",
        c = cur.to_json(),
        s = s + 1,
        s1 = s + 1,
        e = mooncdc::wire::Cursor::new(cur.source.clone(), s + 1).to_json()
    );
    let r = db.apply(batch.as_bytes(), &[]);
    expect(&r, 1, "apply of a too-narrow image");
    assert!(r.stderr.contains("values but table"), "{}", r.stderr);
    assert_eq!(db.target_cursor().unwrap(), cur);
}

// ---------------------------------------------------------------- streams are not trusted

/// The declared types of the target table `t`, by column.
fn declared_types(conn: &rusqlite::Connection, table: &str) -> Vec<(String, String)> {
    let mut st = conn
        .prepare("SELECT name, type FROM pragma_table_info(?1) ORDER BY cid")
        .unwrap();
    let v = st
        .query_map([table], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .collect::<Result<Vec<(String, String)>, _>>()
        .unwrap();
    v
}

fn table_names(conn: &rusqlite::Connection) -> Vec<String> {
    let mut st = conn
        .prepare("SELECT name FROM sqlite_schema WHERE type = 'table' ORDER BY name")
        .unwrap();
    let v = st
        .query_map([], |r| r.get(0))
        .unwrap()
        .collect::<Result<Vec<String>, _>>()
        .unwrap();
    v
}

/// Nothing in a stream's declared types becomes SQL text: a type that tries
/// to end the column list, add a column or a constraint is replaced by the
/// name of its affinity, and the application's own tables are untouched.
#[test]
fn declared_types_in_a_stream_never_become_sql() {
    let db = Dbs::new();
    db.proj_sql("CREATE TABLE users(id INTEGER PRIMARY KEY); INSERT INTO users VALUES (1);");
    let cols = [
        ("id", "INTEGER"),
        ("a", "INTEGER); DROP TABLE users; --"),
        ("b", "TEXT, evil INTEGER DEFAULT 666"),
        ("c", "'it''s text'"),
        ("d", "INTEGER PRIMARY KEY"),
        ("e", "TEXT COLLATE NOCASE"),
        ("f", "VARCHAR(10)"),
    ];
    let sch = json!({
        "table": "t",
        "columns": cols.iter().map(|(n, t)| json!({"name": n, "type": t, "nullable": *n != "id"})).collect::<Vec<_>>(),
        "key": ["id"],
    });
    let values = json!([
        int(1),
        int(5),
        int(6),
        common::text("x"),
        int(7),
        common::text("Z"),
        common::text("v")
    ]);
    let batch = Spec::new(0, 1)
        .schemas(vec![sch])
        .events(vec![common::ins(1, "t", values)]);
    let r = db.apply(batch.jsonl().as_bytes(), &[]);
    expect(&r, 0, "apply");
    let conn = db.proj_conn();
    assert_eq!(table_names(&conn), ["_mooncdc_cursor", "t", "users"]);
    let n: i64 = conn
        .query_row("SELECT count(*) FROM users", [], |r| r.get(0))
        .unwrap();
    assert_eq!(n, 1, "the application's table is untouched");
    let got = declared_types(&conn, "t");
    let want: Vec<(String, String)> = [
        ("id", "INTEGER"),
        ("a", "INTEGER"),
        ("b", "INTEGER"),
        ("c", "TEXT"),
        ("d", "INTEGER"),
        ("e", "TEXT"),
        ("f", "VARCHAR(10)"),
    ]
    .iter()
    .map(|(a, b)| (a.to_string(), b.to_string()))
    .collect();
    assert_eq!(got, want);
    // "e" holds its value as given, compared without NOCASE.
    let z: i64 = conn
        .query_row("SELECT count(*) FROM t WHERE e = 'z'", [], |r| r.get(0))
        .unwrap();
    assert_eq!(z, 0, "no collation was smuggled in");
}

/// Every declared-type family of SQLite, STRICT tables included, keeps every
/// value's class in the projection: snapshot, then changes, compared cell by
/// cell (class and bits) with the source, and by the audit.
#[test]
fn every_declared_type_family_keeps_each_value_class() {
    let db = Dbs::new();
    db.src_sql(
        "CREATE TABLE loose(id INTEGER PRIMARY KEY, a, b ANY, c NUMERIC, d VARCHAR(10), e DOUBLE PRECISION,
                            f BOOLEAN, g DATETIME, h 'it''s text', i DECIMAL(10,2), j BLOB, k REAL, l INT);
         CREATE TABLE tight(id INTEGER PRIMARY KEY, v ANY, i INT, r REAL, t TEXT, b BLOB) STRICT;",
    );
    db.init(&[]);
    let values = [
        "NULL",
        "42",
        "-7",
        "1.5",
        "2.0",
        "-0.0",
        "1e300",
        "'123'",
        "'1.50'",
        "' 7'",
        "'abc'",
        "'1e5'",
        "x'00ff'",
        "9223372036854775807",
        "'9223372036854775808'",
        "''",
    ];
    let n = values.len();
    let fill = |shift: usize| {
        let mut sql = String::new();
        for (i, _) in values.iter().enumerate() {
            let v = values[(i + shift) % n];
            sql.push_str(&if shift == 0 {
                format!("INSERT INTO loose VALUES ({i}, {v}, {v}, {v}, {v}, {v}, {v}, {v}, {v}, {v}, {v}, {v}, {v});\n")
            } else {
                format!("UPDATE loose SET a = {v}, b = {v}, c = {v}, d = {v}, e = {v}, f = {v}, g = {v}, h = {v}, i = {v}, j = {v}, k = {v}, l = {v} WHERE id = {i};\n")
            });
        }
        sql
    };
    db.src_sql(&format!("BEGIN; {} COMMIT;", fill(0)));
    // STRICT: ANY keeps every class; typed columns only their own.
    db.src_sql(
        "INSERT INTO tight VALUES (1, '123', 1, 1.5, 'a', x'01'), (2, '1.50', 2, 2.0, '7', x''),
                                  (3, ' 7', NULL, NULL, NULL, NULL), (4, 2.0, -5, -0.0, ' 8', x'ff'),
                                  (5, x'00', 9, 1e-300, '', NULL), (6, 12, 0, 3.0, 'z', x'aa')",
    );
    let snap = exec(SNAPSHOT, &["--source", &db.src_url()], None);
    expect(&snap, 0, "snapshot");
    db.apply_ok(&snap.stdout);
    db.assert_same_rows(&["loose", "tight"]);
    db.audit_equal();
    let proj = db.proj_conn();
    let types: Vec<String> = declared_types(&proj, "loose")
        .into_iter()
        .map(|(_, t)| t)
        .collect();
    assert_eq!(
        types,
        [
            "INTEGER",
            "",
            "",
            "NUMERIC",
            "VARCHAR(10)",
            "DOUBLE PRECISION",
            "BOOLEAN",
            "DATETIME",
            "TEXT",
            "DECIMAL(10,2)",
            "BLOB",
            "REAL",
            "INT"
        ]
    );
    drop(proj);
    // Changes of every row, then of the STRICT table's ANY column.
    db.src_sql(&format!("BEGIN; {} COMMIT;", fill(5)));
    db.src_sql("UPDATE tight SET v = CASE id WHEN 1 THEN '4.0' WHEN 2 THEN 3 ELSE ' 9 ' END");
    db.src_sql("UPDATE tight SET v = v || '' WHERE id = 2");
    db.catch_up();
    db.assert_same_rows(&["loose", "tight"]);
    db.audit_equal();
    db.sqldiff_clean(&["loose", "tight"]);
}

/// A value that the target column's affinity would turn into another class
/// is refused, naming the table, column and event; nothing is applied.
#[test]
fn a_value_the_target_column_would_change_is_refused() {
    let sch = common::schema(
        "t",
        &[
            ("id", "INTEGER", false),
            ("n", "INTEGER", true),
            ("m", "NUMERIC", true),
        ],
        &["id"],
    );
    let cases = [
        (json!([int(1), common::text("12"), int(1)]), "\"n\""),
        (json!([int(1), int(3), json!(["real", "1", "1"])]), "\"m\""),
        (json!([int(1), json!(["real", "3", "0"]), int(1)]), "\"n\""),
    ];
    for (values, column) in cases {
        let db = Dbs::new();
        let ok = Spec::new(0, 1)
            .schemas(vec![sch.clone()])
            .events(vec![common::ins(1, "t", json!([int(9), int(9), int(9)]))]);
        db.apply_ok(ok.jsonl().as_bytes());
        let bad = Spec::new(1, 2)
            .schemas(vec![sch.clone()])
            .events(vec![common::ins(2, "t", values)]);
        let r = db.apply(bad.jsonl().as_bytes(), &[]);
        expect(&r, 1, "apply of a value the column would change");
        assert!(
            r.stderr.contains(column)
                && r.stderr.contains("event 2")
                && r.stderr.contains("affinity"),
            "{}",
            r.stderr
        );
        assert_eq!(db.target_cursor().unwrap().sequence(), 1);
        let n: i64 = db
            .proj_conn()
            .query_row("SELECT count(*) FROM t", [], |r| r.get(0))
            .unwrap();
        assert_eq!(n, 1);
    }
}

/// Input that is not a good stream never changes a database that is not a
/// projection yet: no MoonCDC table, no journal-mode switch, no new file.
#[test]
fn a_failed_first_apply_leaves_the_database_as_it_was() {
    let db = Dbs::new();
    {
        let c = db.proj_conn();
        c.query_row("PRAGMA journal_mode = DELETE", [], |_| Ok(()))
            .unwrap();
        c.execute_batch("CREATE TABLE app(x); INSERT INTO app VALUES (1);")
            .unwrap();
    }
    let sch = kv_schema("t");
    let bad_event = format!(
        "{}{}\n{}",
        Spec::new(0, 1).schemas(vec![sch.clone()]).header_line(),
        json!({"kind": "event", "event": common::ins(1, "t", json!([int(1)]))}),
        Spec::new(0, 1).commit_line()
    );
    let no_commit = Spec::new(0, 1)
        .schemas(vec![sch.clone()])
        .events(vec![common::ins(1, "t", row(1, "a"))]);
    let no_commit = format!("{}{}", no_commit.header_line(), no_commit.event_lines());
    for input in [
        "garbage\n".to_string(),
        bad_event.clone(),
        no_commit.clone(),
    ] {
        let r = db.apply(input.as_bytes(), &[]);
        expect(&r, 1, "apply of bad input");
        let c = db.proj_conn();
        assert_eq!(table_names(&c), ["app"], "after {input:?}");
        let mode: String = c
            .query_row("PRAGMA journal_mode", [], |r| r.get(0))
            .unwrap();
        assert_eq!(mode, "delete");
    }
    // A target that does not exist yet is not created by a failed apply.
    let fresh = db.path_str("fresh.db");
    for input in ["garbage\n", &bad_event, &no_commit] {
        let r = exec(
            APPLY,
            &["--target", &format!("sqlite:{fresh}")],
            Some(input.as_bytes()),
        );
        expect(&r, 1, "apply of bad input to a new file");
        assert!(
            !std::path::Path::new(&fresh).exists(),
            "{fresh} was created"
        );
        assert!(!std::path::Path::new(&format!("{fresh}-journal")).exists());
    }
    // A good first batch makes it a projection, in WAL mode.
    let good = Spec::new(0, 1)
        .schemas(vec![sch])
        .events(vec![common::ins(1, "t", row(1, "a"))]);
    db.apply_ok(good.jsonl().as_bytes());
    let c = db.proj_conn();
    assert_eq!(table_names(&c), ["_mooncdc_cursor", "app", "t"]);
    let mode: String = c
        .query_row("PRAGMA journal_mode", [], |r| r.get(0))
        .unwrap();
    assert_eq!(mode, "wal");
}

/// A snapshot refuses a target table that already holds rows unless told to
/// replace or keep them.
#[test]
fn a_snapshot_into_a_table_that_holds_rows_is_refused_unless_told() {
    let setup = || {
        let (db, _) = kv_source();
        db.src_sql("INSERT INTO t VALUES (1, 'a'), (2, 'b')");
        db.proj_sql(
            "CREATE TABLE t(id INTEGER PRIMARY KEY, v TEXT); INSERT INTO t VALUES (99, 'stale');",
        );
        let snap = exec(SNAPSHOT, &["--source", &db.src_url()], None);
        expect(&snap, 0, "snapshot");
        (db, snap.stdout)
    };
    let ids = |db: &Dbs| -> Vec<i64> {
        let c = db.proj_conn();
        let mut st = c.prepare("SELECT id FROM t ORDER BY id").unwrap();
        let v = st
            .query_map([], |r| r.get(0))
            .unwrap()
            .collect::<Result<Vec<i64>, _>>()
            .unwrap();
        v
    };
    let (db, snap) = setup();
    let r = db.apply(&snap, &[]);
    expect(&r, 1, "snapshot into a table with rows");
    assert!(
        r.stderr.contains("\"t\"") && r.stderr.contains("--existing-rows"),
        "{}",
        r.stderr
    );
    assert_eq!(ids(&db), [99]);
    assert!(db.target_cursor().is_none());

    let r = db.apply(&snap, &["--existing-rows", "replace"]);
    expect(&r, 0, "snapshot replacing rows");
    assert_eq!(ids(&db), [1, 2]);
    db.audit_equal();

    let (db, snap) = setup();
    let r = db.apply(&snap, &["--existing-rows", "keep"]);
    expect(&r, 0, "snapshot keeping rows");
    assert_eq!(ids(&db), [1, 2, 99]);
    expect(&db.audit(&[]), 1, "audit finds the kept row");
}

/// The summary names the cursor the target holds at the end, also when
/// another apply moved it while this one ran.
#[test]
fn the_summary_names_the_cursor_held_at_the_end() {
    let (db, _) = kv_source();
    db.src_sql("INSERT INTO t VALUES (1, 'a')");
    let (first, _) = db.capture_ok(&[]);
    db.apply_ok(&first);
    db.src_sql("INSERT INTO t VALUES (2, 'b')");
    let (all, _) = db.capture_ok(&[]);
    // This apply opens the target and reads its cursor (1) before any input…
    let mut slow = Command::new(bin(APPLY))
        .args(["--target", &db.proj_url()])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    // …another one moves it to 2…
    let s = db.apply_ok(&all);
    assert_eq!(s.cursor.unwrap().sequence(), 2);
    // …and the first is given what is already held.
    use std::io::Write;
    slow.stdin.take().unwrap().write_all(&first).unwrap();
    let out = slow.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    let s = Summary::parse(&String::from_utf8_lossy(&out.stderr));
    assert_eq!(s.applied, 0);
    assert_eq!(
        s.cursor.unwrap().sequence(),
        2,
        "stale cursor in the summary"
    );
}

/// A compacted batch that starts before the target's cursor and ends after
/// it is refused: the target would keep a row the source deleted.
#[test]
fn a_compacted_batch_across_the_cursor_is_refused() {
    let db = Dbs::new();
    let sch = kv_schema("t");
    let events = vec![
        common::ins(1, "t", row(1, "a")),
        common::del(2, "t", row(1, "a")),
        common::ins(3, "t", row(2, "b")),
        common::upd(4, "t", row(2, "b"), row(2, "c")),
    ];
    let first = Spec::new(0, 1)
        .schemas(vec![sch.clone()])
        .events(events[..1].to_vec());
    db.apply_ok(first.jsonl().as_bytes());
    let whole = Spec::new(0, 4)
        .schemas(vec![sch.clone()])
        .events(events.clone());
    let compacted = exec(COMPACT, &[], Some(whole.jsonl().as_bytes()));
    expect(&compacted, 0, "compact");
    let r = db.apply(&compacted.stdout, &[]);
    expect(&r, 1, "compacted batch across the cursor");
    assert!(r.stderr.contains("compacted"), "{}", r.stderr);
    assert_eq!(db.target_cursor().unwrap().sequence(), 1);
    assert_eq!(rows_by_key(&db.proj_conn(), "t", &[0]).len(), 1);
    // The uncompacted rest applies, and so does the compacted batch on a
    // target that holds none of it.
    let rest = Spec::new(1, 4)
        .schemas(vec![sch])
        .events(events[1..].to_vec());
    db.apply_ok(rest.jsonl().as_bytes());
    let fresh = Dbs::new();
    fresh.apply_ok(&compacted.stdout);
    assert_eq!(
        rows_by_key(&db.proj_conn(), "t", &[0]),
        rows_by_key(&fresh.proj_conn(), "t", &[0])
    );
    assert_eq!(rows_by_key(&db.proj_conn(), "t", &[0]).len(), 1);
}

/// `--log-format json`: one JSON object per line on standard error, with a
/// timestamp, level, tool, message and fields (the summary's counts as
/// numbers); errors carry their kind.
#[test]
fn json_logs_are_one_object_per_line() {
    let db = Dbs::new();
    let b = Spec::new(0, 1)
        .schemas(vec![kv_schema("t")])
        .events(vec![common::ins(1, "t", row(1, "a"))]);
    let r = db.apply(b.jsonl().as_bytes(), &["--log-format", "json"]);
    expect(&r, 0, "apply");
    let lines: Vec<serde_json::Value> = r
        .stderr
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    let summary = lines
        .iter()
        .find(|o| o["event"] == "summary")
        .expect("a summary line");
    assert_eq!(summary["level"], "info");
    assert_eq!(summary["tool"], "mooncdc-apply");
    // Counts are JSON numbers; the cursor is the cursor's own JSON.
    assert_eq!(summary["events_applied"], 1);
    assert_eq!(summary["batches"], 1);
    assert_eq!(summary["events_skipped"], 0);
    assert_eq!(summary["rows_loaded"], 0);
    assert!(summary["elapsed_s"].as_f64().is_some(), "{summary}");
    assert_eq!(summary["cursor"]["sequence"], "1", "{summary}");
    assert!(summary["message"]
        .as_str()
        .unwrap()
        .contains("1 event applied"));
    let ts = summary["ts"].as_str().unwrap();
    assert!(
        ts.len() == 24 && ts.ends_with('Z') && ts.as_bytes()[10] == b'T',
        "{ts}"
    );
    let r = db.apply(b"garbage\n", &["--log-format", "json"]);
    expect(&r, 1, "apply of garbage");
    let last: serde_json::Value = serde_json::from_str(r.stderr.lines().last().unwrap()).unwrap();
    assert_eq!(last["level"], "error");
    assert_eq!(last["kind"], "data");
}

/// Inserts into one table wait and run together; a failure after them (a
/// bad line further on) still reports the first failing event in stream
/// order, and nothing of the batch is kept.
#[test]
fn a_refused_insert_is_reported_before_a_later_failure() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("p.db");
    let target = format!("sqlite:{}", db.display());
    let first = Spec::new(0, 1)
        .schemas(vec![kv_schema("t")])
        .events(vec![common::ins(1, "t", row(1, "a"))]);
    let r = exec(
        APPLY,
        &["--target", &target],
        Some(first.jsonl().as_bytes()),
    );
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    // Event 3 inserts a key the projection holds; event 5's line is bad.
    let second = Spec::new(1, 5).schemas(vec![kv_schema("t")]).events(vec![
        common::ins(2, "t", row(2, "b")),
        common::ins(3, "t", row(1, "again")),
        common::ins(4, "t", row(4, "d")),
        common::ins(
            5,
            "t",
            json!([int(5), common::text("e"), common::text("extra")]),
        ),
    ]);
    let r = exec(
        APPLY,
        &["--target", &target],
        Some(second.jsonl().as_bytes()),
    );
    assert_eq!(r.code, Some(1), "{}", r.stderr);
    assert!(
        r.stderr.contains("event 3") && r.stderr.contains("already holds"),
        "{}",
        r.stderr
    );
    let conn = rusqlite::Connection::open(&db).unwrap();
    let n: i64 = conn
        .query_row("SELECT count(*) FROM t", [], |r| r.get(0))
        .unwrap();
    assert_eq!(n, 1, "nothing of the refused batch is kept");
}

/// A password holding an unescaped `/`, `?` or `#` breaks a URL's host part
/// off early (and one holding an unquoted space, a `key=value` string). No part of it may reach the error (it used to: `port "s3cr"
/// is not a number`, `host and port "app:s3cr" are not valid`); the error
/// says to percent-encode it or where else a password can come from. Every
/// URL parser the tools reach: PostgreSQL (source and target), ClickHouse,
/// and a URL of no known kind. No server is needed: each fails while
/// parsing, with exit 2.
#[test]
fn a_password_that_breaks_a_url_is_never_echoed() {
    let secret = "s3crXq";
    let cases: Vec<(&str, Vec<String>, &[&str])> = vec![
        // (tool, arguments, where else the password may come from)
        (
            "mooncdc-capture",
            vec![
                "status".into(),
                "--source".into(),
                format!("postgres://app:{secret}/tail@db.example/shop"),
            ],
            &["percent-encoded", "PGPASSWORD"],
        ),
        (
            "mooncdc-capture",
            vec![
                "status".into(),
                "--source".into(),
                format!("postgresql://app:{secret}?tail@db.example/shop"),
            ],
            &["percent-encoded", "PGPASSWORD"],
        ),
        (
            "mooncdc-capture",
            vec![
                "status".into(),
                "--source".into(),
                format!("postgres://app:{secret}?x=tail@db.example/shop"),
            ],
            &["percent-encoded", "PGPASSWORD"],
        ),
        (
            "mooncdc-apply",
            vec![
                "cursor".into(),
                "--target".into(),
                format!("postgres://app:5432{secret}#/tail@db.example/shop"),
            ],
            &["percent-encoded", "PGPASSWORD"],
        ),
        (
            "mooncdc-apply",
            vec![
                "cursor".into(),
                "--target".into(),
                format!("clickhouse://app:{secret}/tail@127.0.0.1:8123/db"),
            ],
            &["percent-encoded", "CLICKHOUSE_PASSWORD"],
        ),
        (
            "mooncdc-apply",
            vec![
                "cursor".into(),
                "--target".into(),
                format!("clickhouse://app:{secret}?tail@127.0.0.1:8123/db"),
            ],
            &["percent-encoded", "CLICKHOUSE_PASSWORD"],
        ),
        (
            "mooncdc-apply",
            vec![
                "cursor".into(),
                "--target".into(),
                format!("clickhouses://app:8123{secret}/tail@127.0.0.1/db"),
            ],
            &["percent-encoded", "CLICKHOUSE_PASSWORD"],
        ),
        (
            "mooncdc-audit",
            vec![
                "--source".into(),
                "sqlite:nowhere.db".into(),
                "--target".into(),
                format!("mysql://app:{secret}?tail@db.example/shop"),
            ],
            &["\"mysql://\""],
        ),
        // A key=value string whose password holds an unquoted space.
        (
            "mooncdc-capture",
            vec![
                "status".into(),
                "--source".into(),
                format!("host=db.example password={secret} tail dbname=shop"),
            ],
            &["quoted", "PGPASSWORD"],
        ),
        (
            "mooncdc-capture",
            vec![
                "status".into(),
                "--source".into(),
                format!("host=db.example password={secret} tail=x dbname=shop"),
            ],
            &["quoted", "PGPASSWORD"],
        ),
    ];
    for (tool, args, way_out) in cases {
        let argv: Vec<&str> = args.iter().map(String::as_str).collect();
        let r = exec(tool, &argv, None);
        let what = format!("{tool} {}", argv.join(" "));
        expect(&r, 2, &what);
        assert!(
            !r.stderr.contains(secret) && !r.stderr.contains("tail"),
            "{what}: the error echoes part of the password:\n{}",
            r.stderr
        );
        for needle in way_out {
            assert!(
                r.stderr.contains(needle),
                "{what}: the error should say {needle:?} (the way out):\n{}",
                r.stderr
            );
        }
        assert!(
            r.stdout.is_empty(),
            "{what}: {}",
            String::from_utf8_lossy(&r.stdout)
        );
    }
    // A legitimate `@` in a libpq option's value is no stray one: this URL
    // gets past parsing (to a refused connection, exit 1, not 2).
    let r = exec(
        "mooncdc-capture",
        &[
            "status",
            "--source",
            "postgres://127.0.0.1:1/shop?user=app@corp&sslmode=disable&connect_timeout=2",
        ],
        None,
    );
    expect(&r, 1, "a user=app@corp option");
}

/// Output files and a new projection hold a copy of the database: under the
/// usual umask (022) they used to be created 0644, readable by every user.
/// `snapshot -o`, `merge -o`, `split --output-dir`'s pieces (and the folder
/// it makes) and a SQLite projection with its -wal and -shm are the owner's
/// only; a file replaced keeps the mode its owner gave it.
#[test]
fn output_files_and_the_projection_are_readable_by_their_owner_only() {
    let (db, _) = kv_source();
    db.src_sql("INSERT INTO t VALUES (1, 'private'), (2, 'also private')");
    let dir = db.dir.path();
    let merge = shell_quote(&bin("mooncdc-merge").display().to_string());
    let r = pipeline(&format!(
        "umask 022; cd {}; \
         {{snapshot}} --source sqlite:src.db -o snap.jsonl; \
         {{capture}} --source sqlite:src.db > changes.jsonl; \
         {merge} -o merged.jsonl changes.jsonl; \
         {{split}} --max-events 1 --output-dir pieces/new changes.jsonl > /dev/null; \
         {{apply}} --target sqlite:proj.db snap.jsonl",
        shell_quote(dir.to_str().unwrap())
    ));
    expect(&r, 0, "snapshot -o, merge -o, split --output-dir, apply");
    for f in ["snap.jsonl", "merged.jsonl", "proj.db"] {
        assert_eq!(common::mode(&dir.join(f)), 0o600, "{f} should be 0600");
    }
    let pieces: Vec<_> = std::fs::read_dir(dir.join("pieces/new"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(pieces.len(), 2, "{pieces:?}");
    for p in &pieces {
        assert_eq!(common::mode(p), 0o600, "{} should be 0600", p.display());
    }
    for d in ["pieces", "pieces/new"] {
        assert_eq!(
            common::mode(&dir.join(d)),
            0o700,
            "folder {d} should be 0700"
        );
    }
    // The projection's -wal and -shm, while a reader holds them open.
    let reader = db.proj_conn();
    let n: i64 = reader
        .query_row("SELECT count(*) FROM t", [], |r| r.get(0))
        .unwrap();
    assert_eq!(n, 2);
    for f in ["proj.db-wal", "proj.db-shm"] {
        assert_eq!(common::mode(&dir.join(f)), 0o600, "{f} should be 0600");
    }
    drop(reader);
    // A file written over keeps the mode its owner chose.
    std::fs::set_permissions(
        dir.join("snap.jsonl"),
        std::os::unix::fs::PermissionsExt::from_mode(0o640),
    )
    .unwrap();
    let r = pipeline(&format!(
        "umask 022; cd {}; {{snapshot}} --source sqlite:src.db -o snap.jsonl",
        shell_quote(dir.to_str().unwrap())
    ));
    expect(&r, 0, "snapshot -o over an existing file");
    assert_eq!(common::mode(&dir.join("snap.jsonl")), 0o640);
}

/// A batch whose header makes thousands of tables: a SIGTERM while they are
/// being made stops between two tables (it does not wait for the rest),
/// rolls the batch back (no table of it, the cursor unmoved) and exits 0;
/// the same command again applies it whole.
#[test]
fn sigterm_while_a_header_makes_thousands_of_tables_stops_between_tables() {
    let dir = tempfile::tempdir().unwrap();
    let proj = dir.path().join("proj.db");
    let url = format!("sqlite:{}", proj.display());
    // A projection holding one batch first, so the stopped batch is not its
    // first (whose rollback removes the file) but one after a cursor.
    let b1 = Spec::new(0, 1)
        .schemas(vec![kv_schema("t")])
        .events(vec![common::ins(1, "t", row(1, "a"))]);
    expect(
        &exec(
            APPLY,
            &["--target", &url, "-q"],
            Some(b1.jsonl().as_bytes()),
        ),
        0,
        "first batch",
    );
    let n = 4000;
    let schemas: Vec<serde_json::Value> = (0..n).map(|i| kv_schema(&format!("n{i}"))).collect();
    let b2 = Spec::new(1, 2)
        .schemas(schemas)
        .events(vec![common::ins(2, "n0", row(1, "b"))]);
    let input = dir.path().join("many.jsonl");
    std::fs::write(&input, b2.jsonl()).unwrap();
    let tables = |what: &str| -> i64 {
        rusqlite::Connection::open(&proj)
            .unwrap()
            .query_row(
                "SELECT count(*) FROM sqlite_schema WHERE type = 'table' AND name LIKE 'n%'",
                [],
                |r| r.get(0),
            )
            .unwrap_or_else(|e| panic!("{what}: {e}"))
    };
    // In the batch: its write transaction holds the database's write lock
    // (a projection is in WAL mode, so readers still see the last commit).
    let locked = || {
        let c = rusqlite::Connection::open(&proj).unwrap();
        c.busy_timeout(Duration::ZERO).unwrap();
        c.execute_batch("BEGIN IMMEDIATE; ROLLBACK").is_err()
    };
    let took = common::sigterm_apply_in_header(&url, &input, Duration::from_millis(300), locked);
    let cursor = || -> serde_json::Value {
        serde_json::from_str(
            exec(APPLY, &["cursor", "--target", &url], None)
                .stdout_str()
                .trim(),
        )
        .unwrap()
    };
    assert_eq!(
        cursor(),
        common::cursor(common::SRC, 1),
        "the cursor did not move"
    );
    assert_eq!(tables("after the stop"), 0, "no table of the stopped batch");
    // The same command again: the whole batch.
    let r = exec(
        APPLY,
        &["--target", &url, "-q", input.to_str().unwrap()],
        None,
    );
    expect(&r, 0, "the re-run");
    assert_eq!(tables("after the re-run"), n as i64);
    assert_eq!(cursor(), common::cursor(common::SRC, 2));
    eprintln!("stopped {took:?} after SIGTERM, with {n} tables in the header");
}

/// Apply holds a batch in bounded memory (docs/OPERATIONS.md, "Apply's
/// memory"): a SQLite projection takes a batch's rows in its transaction
/// as they come (its page cache spills to the `-wal` file), so a batch ten
/// times as large takes no more memory. Measured on the debug binary the
/// tests run, through GNU time (tests/common/memory.rs).
#[test]
fn a_large_batch_is_applied_in_bounded_memory() {
    use common::memory::{self, Shape};
    let dbs = Dbs::new();
    let mut peaks = Vec::new();
    for n in [memory::SMALL, memory::LARGE] {
        let path = dbs.path(&format!("mem{n}.db"));
        let url = format!("sqlite:{}", path.display());
        let (mib, _) = memory::apply_peak_mib(&url, &[], common::SRC, n);
        peaks.push(mib);
        // The batch is all there, through one commit with its cursor.
        let c = open(&path);
        let s = Shape::of(n);
        let (rows, sum): (u64, u64) = c
            .query_row("SELECT count(*), sum(c) FROM t", [], |r| {
                Ok((r.get(0)?, r.get(1)?))
            })
            .unwrap();
        assert_eq!((rows, sum), (s.rows(), s.sum_c()), "{n} changes");
        let r = exec(APPLY, &["cursor", "--target", &url], None);
        expect(&r, 0, "cursor");
        assert_eq!(r.stdout_str().trim(), cursor_json(common::SRC, n.into()));
    }
    memory::assert_bounded(
        "SQLite",
        peaks[0],
        peaks[1],
        memory::LARGE / memory::SMALL,
        memory::SQLITE_BOUND_MIB,
        memory::SLACK_MIB,
    );
}
