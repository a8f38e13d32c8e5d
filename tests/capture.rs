//! mooncdc-capture end to end on SQLite sources, through the real binaries
//! (docs/TOOLS.md "mooncdc-capture"; docs/FORMAT.md §2 values, §3 positions, §4–§5 events and
//! schemas, §10 acknowledgement, §11 errors). Each test has its own folder
//! with a source `src.db` and a projection `proj.db`; what capture writes is
//! parsed with `mooncdc::wire::BatchStreamReader` and checked as structures,
//! and projections are compared with the source bit for bit through rusqlite.

mod common;

use common::sqlite::*;
use mooncdc::wire::{Operation, Value};
use rusqlite::params;
use rusqlite::types::Value as S;
use std::process::{Command, Stdio};
use std::time::Duration;

// ---------------------------------------------------------------- values

/// Insert the rows `(id, r, t, b, i, u)` into table `v`.
fn insert_v(db: &Dbs, rows: &[(i64, [S; 5])]) {
    let mut c = db.src_conn();
    let tx = c.transaction().unwrap();
    for (id, [r, t, b, i, u]) in rows {
        tx.execute(
            "INSERT INTO v VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            params![id, r, t, b, i, u],
        )
        .unwrap();
    }
    tx.commit().unwrap();
}

#[test]
fn every_value_class_survives_capture_apply_audit_bit_exactly() {
    let db = Dbs::new();
    db.src_sql("CREATE TABLE v(id INTEGER PRIMARY KEY, r REAL, t TEXT, b BLOB, i INTEGER, u)");
    db.init(&[]);
    let mut rng = Rng::new(0x5EED_0001);
    let max_sub = f64::from_bits(0x000f_ffff_ffff_ffff);
    let random_blob: Vec<u8> = (0..64).map(|_| rng.next() as u8).collect();
    let fixed: Vec<(i64, [S; 5])> = vec![
        (
            1,
            [
                S::Real(0.0),
                S::Text(String::new()),
                S::Blob(vec![]),
                S::Integer(0),
                S::Real(-0.0),
            ],
        ),
        (
            2,
            [
                S::Real(-0.0),
                S::Text("\u{FEFF}x".into()),
                S::Blob(vec![0x00, 0xff]),
                S::Integer(i64::MAX),
                S::Real(1e300),
            ],
        ),
        (
            3,
            [
                S::Real(1e300),
                S::Text("a\0b".into()),
                S::Blob(random_blob.clone()),
                S::Integer(i64::MIN),
                S::Real(5e-324),
            ],
        ),
        (
            4,
            [
                S::Real(5e-324),
                S::Text("😀𝄞\u{10FFFF}".into()),
                S::Null,
                S::Integer(-1),
                S::Real(max_sub),
            ],
        ),
        (
            5,
            [
                S::Real(f64::MAX),
                S::Text("\u{FEFF}".into()),
                S::Blob(vec![0]),
                S::Null,
                S::Integer(i64::MIN),
            ],
        ),
        (
            6,
            [
                S::Real(-f64::MIN_POSITIVE),
                S::Text("\0".into()),
                S::Blob(vec![0xef, 0xbb, 0xbf]),
                S::Integer(i64::MAX),
                S::Text("\u{FEFF}\0😀".into()),
            ],
        ),
        (
            7,
            [
                S::Real(-1e-310),
                S::Text("O'Brien \"q\" \\".into()),
                S::Blob(vec![]),
                S::Real(1.0),
                S::Blob(vec![]),
            ],
        ),
        (
            8,
            [
                S::Real(-9_223_372_036_854_775_808.0),
                S::Null,
                S::Text("text in a BLOB column".into()),
                S::Text("12".into()),
                S::Text(String::new()),
            ],
        ),
        (
            9,
            [
                S::Real(9_223_372_036_854_775_808.0),
                S::Integer(5),
                S::Integer(7),
                S::Real(2.5),
                S::Null,
            ],
        ),
        (
            10,
            [
                S::Real(0.1),
                S::Real(0.5),
                S::Real(-0.0),
                S::Integer(i64::MIN),
                S::Real(1.0),
            ],
        ),
    ];
    insert_v(&db, &fixed);
    // Many REALs from random bit patterns (every exponent, subnormals, both
    // signs), random TEXT and BLOBs, and mixed classes in the untyped column.
    let random: Vec<(i64, [S; 5])> = (100..1100)
        .map(|id| {
            (
                id,
                [
                    S::Real(rng.real()),
                    S::Text(rng.text()),
                    S::Blob(rng.blob()),
                    S::Integer(rng.next() as i64),
                    if id % 2 == 0 {
                        S::Real(rng.real())
                    } else {
                        rng.any()
                    },
                ],
            )
        })
        .collect();
    insert_v(&db, &random);
    let mut changes = 0;
    {
        let mut c = db.src_conn();
        let tx = c.transaction().unwrap();
        for _ in 0..300 {
            let id = 100 + rng.below(1000) as i64;
            tx.execute(
                "UPDATE v SET r = ?2, t = ?3, b = ?4, i = ?5, u = ?6 WHERE id = ?1",
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
        for _ in 0..100 {
            let id = 100 + rng.below(1000) as i64;
            changes += tx.execute("DELETE FROM v WHERE id = ?1", [id]).unwrap();
        }
        // Before images holding -0, subnormals and BOM text must match the projection.
        changes += tx
            .execute("UPDATE v SET u = -0.0 WHERE id = 3", [])
            .unwrap();
        changes += tx
            .execute(
                "UPDATE v SET t = t || 'y', u = u WHERE id IN (1, 2, 4, 6)",
                [],
            )
            .unwrap();
        changes += tx.execute("DELETE FROM v WHERE id = 7", []).unwrap();
        tx.commit().unwrap();
    }
    // Precondition: the source really holds a negative zero in the untyped column.
    let bits: i64 = db
        .src_conn()
        .query_row("SELECT u FROM v WHERE id = 1", [], |r| r.get::<_, f64>(0))
        .map(|x| x.to_bits() as i64)
        .unwrap();
    assert_eq!(
        bits as u64,
        (-0.0f64).to_bits(),
        "the source should hold -0.0"
    );

    let (raw, b) = db.capture_ok(&[]);
    let text = String::from_utf8(raw.clone()).unwrap();
    assert_eq!(b.len(), 1, "one batch expected");
    let schema = &b[0].schemas.as_ref().expect("capture writes schemas")[0];
    let cols: Vec<(&str, &str, bool)> = schema
        .columns
        .iter()
        .map(|c| (c.name.as_str(), c.decl_type.as_str(), c.nullable))
        .collect();
    assert_eq!(
        cols,
        vec![
            ("id", "INTEGER", false),
            ("r", "REAL", true),
            ("t", "TEXT", true),
            ("b", "BLOB", true),
            ("i", "INTEGER", true),
            ("u", "", true)
        ]
    );
    assert_eq!(schema.key, vec!["id".to_string()]);
    let ev = events(&b);
    assert_eq!(ev.len(), 10 + 1000 + 300 + changes);
    // REAL zero is +0 on the wire: the insert of row 1 (u = -0.0) and of row 2 (r = -0.0).
    let first = &ev[0];
    assert_eq!(first.operation, Operation::Insert);
    let after = first.after.as_ref().unwrap();
    assert!(
        matches!(after[5], Value::Real(x) if x.to_bits() == 0),
        "-0.0 should be captured as +0, got {:?}",
        after[5]
    );
    let line1 = text
        .lines()
        .find(|l| l.contains(r#""sequence":"1","#))
        .unwrap();
    assert!(
        line1.ends_with(r#"["real","0","0"]]}}"#),
        "the wire should show [\"real\",\"0\",\"0\"] for -0.0:\n{line1}"
    );
    assert!(
        !text.contains(r#"["real","-0""#),
        "negative zero must not reach the wire:\n{text}"
    );
    let line2 = text
        .lines()
        .find(|l| l.contains(r#""sequence":"2","#))
        .unwrap();
    assert!(
        line2.contains(r#"["text","\ufeffx"]"#) || line2.contains("[\"text\",\"\u{FEFF}x\"]"),
        "BOM text: {line2}"
    );
    assert!(
        line2.contains(r#"["real","1681218273811815","946"]"#),
        "1e300 on the wire: {line2}"
    );
    assert!(
        line2.contains(r#"["integer","9223372036854775807"]"#),
        "i64::MAX: {line2}"
    );
    let line3 = text
        .lines()
        .find(|l| l.contains(r#""sequence":"3","#))
        .unwrap();
    assert!(line3.contains(r#"["real","1","-1074"]"#), "5e-324: {line3}");
    assert!(line3.contains(r#"["integer","-9223372036854775808"]"#));
    assert!(line3.contains(&format!(r#"["blob","{}"]"#, hex::encode(&random_blob))));
    // Every inserted REAL of the random rows is carried bit for bit.
    for (e, (id, vals)) in ev[10..1010].iter().zip(&random) {
        let a = e.after.as_ref().unwrap();
        assert_eq!(a[0], vi(*id));
        if let (S::Real(x), Value::Real(y)) = (&vals[0], &a[1]) {
            let want = if *x == 0.0 { 0 } else { x.to_bits() };
            assert_eq!(
                want,
                y.to_bits(),
                "REAL of row {id}: {x:e} came back as {y:e}"
            );
        }
    }

    let s = db.apply_ok(&raw);
    assert_eq!(s.applied, ev.len() as u64);
    db.audit_equal();
    db.assert_same_rows(&["v"]);
    db.sqldiff_clean(&["v"]);
}

// ---------------------------------------------------------------- the sqlite3 shell

#[test]
fn writes_made_by_the_sqlite3_shell_are_captured() {
    let db = Dbs::new();
    db.src_sql("CREATE TABLE s(id INTEGER PRIMARY KEY, t TEXT, b BLOB, r REAL, u)");
    db.init(&[]);
    let r = db.sqlite3(
        "INSERT INTO s VALUES (1, char(65279)||'x', x'00ff', -0.0, -0.0);
         INSERT INTO s VALUES (2, 'a'||char(0)||'b', x'', 1e308, 1e308);
         INSERT INTO s VALUES (3, '😀', NULL, 5e-324, 9223372036854775807);
         UPDATE s SET u = char(65279)||'x', r = -1e-310 WHERE id = 3;
         DELETE FROM s WHERE id = 2;
         INSERT INTO s(id, t) VALUES (4, char(65279));",
    );
    expect(&r, 0, "sqlite3");
    let (raw, b) = db.capture_ok(&[]);
    let bom_x = "\u{FEFF}x";
    assert_events(
        &[
            e_ins(
                "s",
                vec![vi(1), vt(bom_x), vb(&[0, 0xff]), vr(0.0), vr(0.0)],
            ),
            e_ins("s", vec![vi(2), vt("a\0b"), vb(&[]), vr(1e308), vr(1e308)]),
            e_ins("s", vec![vi(3), vt("😀"), VN, vr(5e-324), vi(i64::MAX)]),
            e_upd(
                "s",
                vec![vi(3), vt("😀"), VN, vr(5e-324), vi(i64::MAX)],
                vec![vi(3), vt("😀"), VN, vr(-1e-310), vt(bom_x)],
            ),
            e_del("s", vec![vi(2), vt("a\0b"), vb(&[]), vr(1e308), vr(1e308)]),
            e_ins("s", vec![vi(4), vt("\u{FEFF}"), VN, VN, VN]),
        ],
        &events(&b),
    );
    let text = String::from_utf8(raw.clone()).unwrap();
    let first = text.lines().nth(1).unwrap();
    assert!(
        first.contains(r#"["real","0","0"],["real","0","0"]]"#),
        "-0.0 written by the shell should be [\"real\",\"0\",\"0\"] on the wire:\n{first}"
    );
    db.apply_ok(&raw);
    db.audit_equal();
    db.assert_same_rows(&["s"]);
    // The BOM survives into the projection byte for byte.
    let h: String = db
        .proj_conn()
        .query_row("SELECT hex(t) FROM s WHERE id = 1", [], |r| r.get(0))
        .unwrap();
    assert_eq!(h, "EFBBBF78");
}

// ---------------------------------------------------------------- rollbacks

#[test]
fn rolled_back_changes_never_appear() {
    let db = Dbs::new();
    db.src_sql("CREATE TABLE t(id INTEGER PRIMARY KEY, v TEXT)");
    db.init(&[]);
    {
        let c = db.src_conn();
        c.execute_batch(
            "INSERT INTO t VALUES (1, 'keep1');
             BEGIN; INSERT INTO t VALUES (2, 'gone'); UPDATE t SET v = 'gone' WHERE id = 1; ROLLBACK;
             BEGIN;
               INSERT INTO t VALUES (3, 'keep3');
               SAVEPOINT sp;
                 INSERT INTO t VALUES (4, 'gone');
                 UPDATE t SET v = 'gone' WHERE id = 3;
                 DELETE FROM t WHERE id = 1;
               ROLLBACK TO sp;
               RELEASE sp;
               INSERT INTO t VALUES (5, 'keep5');
             COMMIT;
             SAVEPOINT outer_sp;
               INSERT INTO t VALUES (6, 'keep6');
               SAVEPOINT inner_sp;
                 INSERT INTO t VALUES (7, 'gone');
               ROLLBACK TO inner_sp;
             RELEASE outer_sp;",
        )
        .unwrap();
        // A transaction left open when the connection closes rolls back.
        c.execute_batch("BEGIN; INSERT INTO t VALUES (8, 'gone');")
            .unwrap();
    }
    // The shell: a failing statement inside a committed transaction is undone
    // (row 11 went in before the duplicate key failed), and a ROLLBACK.
    let r = db.sqlite3(
        "BEGIN;
         INSERT INTO t VALUES (10, 'keep10');
         INSERT INTO t VALUES (11, 'gone'), (10, 'gone');
         COMMIT;
         BEGIN; INSERT INTO t VALUES (12, 'gone'); DELETE FROM t WHERE id = 1; ROLLBACK;",
    );
    assert!(
        r.stderr.contains("UNIQUE"),
        "the shell should report the failed statement: {}",
        r.stderr
    );
    let (raw, b) = db.capture_ok(&[]);
    assert_events(
        &[
            e_ins("t", vec![vi(1), vt("keep1")]),
            e_ins("t", vec![vi(3), vt("keep3")]),
            e_ins("t", vec![vi(5), vt("keep5")]),
            e_ins("t", vec![vi(6), vt("keep6")]),
            e_ins("t", vec![vi(10), vt("keep10")]),
        ],
        &events(&b),
    );
    assert!(
        !String::from_utf8_lossy(&raw).contains("gone"),
        "a rolled-back change reached the capture output"
    );
    db.apply_ok(&raw);
    db.audit_equal();
    db.assert_same_rows(&["t"]);
}

/// `INSERT OR REPLACE`, `REPLACE INTO` and `UPDATE OR REPLACE` delete the
/// conflicting rows. SQLite fires delete triggers for those deletions only
/// when the writing connection has `PRAGMA recursive_triggers = ON`
/// (docs/SQLITE.md, "Known limits"); with it, every deletion is captured.
#[test]
fn rows_deleted_by_replace_are_captured_with_recursive_triggers() {
    let db = Dbs::new();
    db.src_sql(
        "CREATE TABLE t(id INTEGER PRIMARY KEY, v TEXT);
         CREATE TABLE u(id INTEGER PRIMARY KEY, email TEXT UNIQUE);",
    );
    db.init(&[]);
    db.src_sql(
        "INSERT INTO t VALUES (1, 'a'), (2, 'b'), (3, 'c'), (4, 'd');
         INSERT INTO u VALUES (1, 'a@x'), (2, 'b@x');",
    );
    db.catch_up();
    let r = db.sqlite3(
        "PRAGMA recursive_triggers = ON;
         INSERT OR REPLACE INTO t VALUES (1, 'a2');
         REPLACE INTO t VALUES (2, 'b2');
         UPDATE OR REPLACE t SET id = 4 WHERE id = 3;
         INSERT OR REPLACE INTO u VALUES (5, 'a@x');",
    );
    expect(&r, 0, "sqlite3 REPLACE statements");
    let after = db.target_cursor().unwrap().to_json();
    let (raw, b) = db.capture_ok(&["--after", &after]);
    let r = db.apply(&raw, &[]);
    if r.code != Some(0) {
        panic!(
            "the captured REPLACE changes do not apply to the projection:\n{}\n=== captured events ===\n{}",
            r.stderr,
            events(&b).iter().map(describe).collect::<Vec<_>>().join("\n")
        );
    }
    let a = db.audit(&[]);
    expect(&a, 0, "audit after REPLACE statements");
}

/// Without recursive triggers, a REPLACE over a primary key reaches the
/// target as an insert of a key it holds: apply refuses it (exit 1) and
/// applies nothing of the batch; a REPLACE through another UNIQUE column is
/// not refused by apply, but the audit finds the difference. Never silent.
#[test]
fn replace_without_recursive_triggers_is_refused_or_found_by_audit() {
    let db = Dbs::new();
    db.src_sql("CREATE TABLE t(id INTEGER PRIMARY KEY, v TEXT);");
    db.init(&[]);
    db.src_sql("INSERT INTO t VALUES (1, 'a');");
    db.catch_up();
    let before = db.target_cursor().unwrap();
    expect(
        &db.sqlite3("INSERT OR REPLACE INTO t VALUES (1, 'a2');"),
        0,
        "sqlite3 REPLACE",
    );
    let (raw, _) = db.capture_ok(&["--after", &before.to_json()]);
    let r = db.apply(&raw, &[]);
    assert_eq!(r.code, Some(1), "apply must refuse: {}", r.stderr);
    assert!(r.stderr.contains("already holds"), "message: {}", r.stderr);
    assert_eq!(db.target_cursor().unwrap(), before, "cursor must not move");

    let db = Dbs::new();
    db.src_sql("CREATE TABLE u(id INTEGER PRIMARY KEY, email TEXT UNIQUE);");
    db.init(&[]);
    db.src_sql("INSERT INTO u VALUES (1, 'a@x');");
    db.catch_up();
    expect(
        &db.sqlite3("INSERT OR REPLACE INTO u VALUES (5, 'a@x');"),
        0,
        "sqlite3 REPLACE",
    );
    db.catch_up();
    let a = db.audit(&[]);
    assert_eq!(
        a.code,
        Some(1),
        "audit must find the row REPLACE deleted: {}",
        String::from_utf8_lossy(&a.stdout)
    );
}

// ---------------------------------------------------------------- keys and identifiers

const WEIRD: &str = "we\"ird 'tbl' ü 😀";

#[test]
fn key_changes_composite_keys_without_rowid_and_odd_identifiers() {
    let db = Dbs::new();
    db.src_sql(
        "CREATE TABLE k(id INTEGER PRIMARY KEY, v TEXT);
         CREATE TABLE c(a TEXT, b INTEGER, v, PRIMARY KEY (b, a));
         CREATE TABLE w(k PRIMARY KEY, v) WITHOUT ROWID;
         CREATE TABLE \"we\"\"ird 'tbl' ü 😀\"(\"col \"\"1\"\"\" TEXT, \"spa ce\" INTEGER, \"ключ\" TEXT, \"a.b\", PRIMARY KEY (\"ключ\", \"spa ce\"));",
    );
    db.init(&[]);
    let v = db.capture_cmd("verify", &[]);
    expect(&v, 0, "verify with odd identifiers");
    db.src_sql(
        "INSERT INTO k VALUES (1, 'one'), (2, 'two'), (3, 'three');
         INSERT INTO c VALUES ('x', 1, 'c1'), ('y', 1, 'c2'), ('x', 2, 'c3');
         INSERT INTO w VALUES (1, 'int'), (2.5, 'real'), ('a', 'text'), (x'00', 'blob'), (-3, 'neg');
         INSERT INTO \"we\"\"ird 'tbl' ü 😀\" VALUES ('q\"1', 1, 'ä', 1.5), ('q2', 2, 'ä', x'ff');",
    );
    // Key changes.
    db.src_sql(
        "UPDATE k SET id = 100 WHERE id = 1;
         UPDATE k SET id = id + 1000 WHERE id IN (2, 3);
         UPDATE c SET b = 3 WHERE a = 'x' AND b = 1;
         UPDATE c SET a = 'z', v = 'moved' WHERE a = 'y';
         UPDATE w SET k = x'01' WHERE k = 'a';
         UPDATE w SET k = 'from int' WHERE k = 1;
         DELETE FROM w WHERE k = 2.5;
         UPDATE \"we\"\"ird 'tbl' ü 😀\" SET \"ключ\" = '🔑', \"a.b\" = NULL WHERE \"spa ce\" = 1;
         DELETE FROM \"we\"\"ird 'tbl' ü 😀\" WHERE \"spa ce\" = 2;",
    );
    let (raw, b) = db.capture_ok(&[]);
    let schemas = b[0].schemas.as_ref().unwrap();
    let find = |t: &str| {
        schemas
            .iter()
            .find(|s| s.table == t)
            .unwrap_or_else(|| panic!("no schema for {t:?} in {schemas:?}"))
    };
    assert_eq!(find("c").key, vec!["b", "a"]);
    assert_eq!(find("w").key, vec!["k"]);
    let ws = find(WEIRD);
    assert_eq!(
        ws.columns
            .iter()
            .map(|c| c.name.as_str())
            .collect::<Vec<_>>(),
        vec!["col \"1\"", "spa ce", "ключ", "a.b"]
    );
    assert_eq!(ws.key, vec!["ключ", "spa ce"]);
    let ev = events(&b);
    let got: Vec<String> = ev.iter().map(describe).collect();
    for want in [
        e_upd("k", vec![vi(1), vt("one")], vec![vi(100), vt("one")]),
        e_upd(
            "c",
            vec![vt("x"), vi(1), vt("c1")],
            vec![vt("x"), vi(3), vt("c1")],
        ),
        e_upd(
            "c",
            vec![vt("y"), vi(1), vt("c2")],
            vec![vt("z"), vi(1), vt("moved")],
        ),
        e_upd("w", vec![vt("a"), vt("text")], vec![vb(&[1]), vt("text")]),
        e_upd("w", vec![vi(1), vt("int")], vec![vt("from int"), vt("int")]),
        e_del("w", vec![vr(2.5), vt("real")]),
        e_upd(
            WEIRD,
            vec![vt("q\"1"), vi(1), vt("ä"), vr(1.5)],
            vec![vt("q\"1"), vi(1), vt("🔑"), VN],
        ),
        e_del(WEIRD, vec![vt("q2"), vi(2), vt("ä"), vb(&[0xff])]),
    ] {
        assert!(
            got.contains(&want),
            "expected event {want}\n=== got ===\n{}",
            got.join("\n")
        );
    }
    assert_eq!(
        ev.iter()
            .filter(|e| e.table == "k" && e.operation == Operation::Update)
            .count(),
        3
    );
    db.apply_ok(&raw);
    db.audit_equal();
    db.assert_same_rows(&["k", "c", "w", WEIRD]);
    // (sqldiff cannot compare w: the projection is not a WITHOUT ROWID table.)
    db.sqldiff_clean(&["k", "c"]);
    // A second round on top of the projection.
    db.src_sql(
        "UPDATE k SET id = 7 WHERE id = 100;
         UPDATE \"we\"\"ird 'tbl' ü 😀\" SET \"spa ce\" = 9 WHERE \"spa ce\" = 1;
         UPDATE w SET k = 2.5 WHERE k = x'01';",
    );
    let (_, s) = db.catch_up();
    assert_eq!(s.applied, 3);
    db.audit_equal();
    db.assert_same_rows(&["k", "c", "w", WEIRD]);
}

// ---------------------------------------------------------------- compaction

#[test]
fn compaction_in_the_pipe_gives_the_same_projection() {
    let db = Dbs::new();
    db.src_sql(
        "CREATE TABLE t(id INTEGER PRIMARY KEY, v TEXT, n);
         CREATE TABLE kv(k TEXT PRIMARY KEY, v) WITHOUT ROWID;",
    );
    db.init(&[]);
    let mut rng = Rng::new(0xC0);
    let churn = |rng: &mut Rng| {
        let mut c = db.src_conn();
        for _ in 0..20 {
            let tx = c.transaction().unwrap();
            for _ in 0..25 {
                let id = rng.below(30) as i64;
                match rng.below(7) {
                    0 | 1 => {
                        tx.execute(
                            "INSERT INTO t VALUES (?1, ?2, ?3) ON CONFLICT(id) DO UPDATE SET v = excluded.v, n = excluded.n",
                            params![id, rng.text(), rng.any()],
                        )
                        .unwrap();
                    }
                    2 | 3 => {
                        tx.execute(
                            "UPDATE t SET v = ?2, n = ?3 WHERE id = ?1",
                            params![id, rng.text(), rng.any()],
                        )
                        .unwrap();
                    }
                    4 => {
                        tx.execute("DELETE FROM t WHERE id = ?1", [id]).unwrap();
                    }
                    5 => {
                        // A key change, unless the new key is taken.
                        tx.execute(
                            "UPDATE OR IGNORE t SET id = ?2 WHERE id = ?1",
                            params![id, 30 + rng.below(30) as i64],
                        )
                        .unwrap();
                    }
                    _ => {
                        tx.execute(
                            "INSERT INTO kv VALUES (?1, ?2) ON CONFLICT(k) DO UPDATE SET v = excluded.v",
                            params![format!("k{}", rng.below(5)), rng.any()],
                        )
                        .unwrap();
                    }
                }
            }
            tx.commit().unwrap();
        }
    };
    let p2 = db.path("proj2.db");
    let (src, p1, p2u) = (
        shell_quote(&db.src_url()),
        shell_quote(&db.proj_url()),
        shell_quote(&format!("sqlite:{}", p2.display())),
    );
    for round in 0..2 {
        churn(&mut rng);
        let after = |p: &str| {
            if round == 0 {
                String::new()
            } else {
                format!("--after \"$({{apply}} cursor --target {p})\"")
            }
        };
        let plain = pipeline(&format!(
            "{{capture}} --source {src} {} | {{apply}} --target {p1}",
            after(&p1)
        ));
        expect(&plain, 0, "capture | apply");
        let compacted = pipeline(&format!(
            "{{capture}} --source {src} {} | {{compact}} | {{apply}} --target {p2u}",
            after(&p2u)
        ));
        expect(&compacted, 0, "capture | compact | apply");
        let (s1, s2) = (
            Summary::parse(&plain.stderr),
            Summary::parse(&compacted.stderr),
        );
        assert!(
            s2.applied < s1.applied,
            "compaction should remove events in round {round}: {s1:?} vs {s2:?}"
        );
        assert_eq!(
            s1.cursor, s2.cursor,
            "both projections end at the same cursor"
        );
        let (c1, c2) = (db.proj_conn(), open(&p2));
        for t in ["t", "kv"] {
            assert_rows_eq(t, &dump(&c1, t), &dump(&c2, t));
        }
        db.audit_equal();
        db.assert_same_rows(&["t", "kv"]);
        let a2 = exec(
            AUDIT,
            &[
                "--source",
                &db.src_url(),
                "--target",
                &format!("sqlite:{}", p2.display()),
            ],
            None,
        );
        expect(&a2, 0, "audit of the compacted projection");
    }
}

// ---------------------------------------------------------------- acknowledgement

#[test]
fn ack_discards_changes_and_guards_positions() {
    let db = Dbs::new();
    db.src_sql("CREATE TABLE t(id INTEGER PRIMARY KEY, v TEXT)");
    let id = db.init(&[]);
    for i in 1..=10 {
        db.src_sql(&format!("INSERT INTO t VALUES ({i}, 'v{i}')"));
    }
    let st = db.status();
    assert_eq!(
        (st.acknowledged, st.high_water, st.backlog),
        (0, 10, 10),
        "{st:?}"
    );
    assert_eq!(st.identity, id);
    assert_eq!(st.tables, "t");

    let r = db.capture_cmd("ack", &["--through", "4"]);
    expect(&r, 0, "ack --through 4");
    let st = db.status();
    assert_eq!(
        (st.acknowledged, st.high_water, st.backlog),
        (4, 10, 6),
        "{st:?}"
    );
    let (lo, n): (i64, i64) = db
        .src_conn()
        .query_row("SELECT min(seq), count(*) FROM _mooncdc_log", [], |r| {
            Ok((r.get(0)?, r.get(1)?))
        })
        .unwrap();
    assert_eq!((lo, n), (5, 6), "acknowledged changes should be deleted");

    // The default start is the acknowledged position.
    let (_, b) = db.capture_ok(&[]);
    assert_eq!(b[0].start.sequence(), 4);
    assert_eq!(
        events(&b).iter().map(|e| e.sequence).collect::<Vec<_>>(),
        (5..=10).collect::<Vec<u128>>()
    );
    let (_, b) = db.capture_ok(&["--after", &format!(r#"{{"source":"{id}","sequence":"4"}}"#)]);
    assert_eq!(events(&b).len(), 6);
    let f = db.path_str("after.json");
    std::fs::write(&f, format!(r#"{{"source":"{id}","sequence":"7"}}"#)).unwrap();
    let (_, b) = db.capture_ok(&["--after-file", &f]);
    assert_eq!((b[0].start.sequence(), events(&b).len()), (7, 3));

    // A stale cursor is refused: those changes are gone.
    let r = db.capture(&["--after", &format!(r#"{{"source":"{id}","sequence":"2"}}"#)]);
    expect(&r, 1, "read with a stale cursor");
    assert!(
        r.stderr.contains("acknowledged") && r.stderr.contains('4'),
        "the message should say the cursor is before the acknowledged position: {}",
        r.stderr
    );
    assert!(!String::from_utf8_lossy(&r.stdout).contains("\"commit\""));

    // Beyond the high water: refused, nothing changes.
    let r = db.capture_cmd("ack", &["--through", "11"]);
    expect(&r, 1, "ack beyond the high water");
    assert!(r.stderr.contains("high water"), "{}", r.stderr);
    let r = db.capture(&[
        "--after",
        &format!(r#"{{"source":"{id}","sequence":"11"}}"#),
    ]);
    expect(&r, 1, "read beyond the high water");
    assert_eq!(db.status().acknowledged, 4);

    // Backwards: a no-op.
    let r = db.capture_cmd("ack", &["--through", "2"]);
    expect(&r, 0, "ack backwards");
    let st = db.status();
    assert_eq!((st.acknowledged, st.backlog), (4, 6), "{st:?}");

    // Another source's cursor: refused by ack and by read.
    let other = r#"{"source":"sqlite:00000000-0000-4000-8000-000000000000","sequence":"5"}"#;
    let r = db.capture_cmd("ack", &["--cursor", other]);
    expect(&r, 1, "ack of another source's cursor");
    assert!(r.stderr.contains("source"), "{}", r.stderr);
    let r = db.capture(&["--after", other]);
    expect(&r, 1, "read after another source's cursor");
    assert!(r.stderr.contains("source"), "{}", r.stderr);
    assert!(
        r.stdout.is_empty(),
        "nothing may be written: {:?}",
        r.stdout_str()
    );
    assert_eq!(db.status().acknowledged, 4);

    // What the projection durably holds can be acknowledged (cursor file, cursor JSON).
    db.catch_up();
    let cur = db.target_cursor().unwrap();
    assert_eq!(cur.sequence(), 10);
    let f = db.path_str("cursor.json");
    std::fs::write(&f, cur.to_json()).unwrap();
    let r = db.capture_cmd("ack", &["--cursor-file", &f]);
    expect(&r, 0, "ack --cursor-file");
    let st = db.status();
    assert_eq!((st.acknowledged, st.backlog), (10, 0), "{st:?}");
    let r = db.capture_cmd("ack", &["--cursor", &cur.to_json()]);
    expect(&r, 0, "ack again (no-op)");
    let (_, b) = db.capture_ok(&[]);
    assert_eq!(
        (
            b[0].start.sequence(),
            b[0].end.sequence(),
            b[0].events.len()
        ),
        (10, 10, 0)
    );
    // Usage: a position is required.
    let r = db.capture_cmd("ack", &[]);
    expect(&r, 2, "ack without a position");
}

// ---------------------------------------------------------------- schema drift

#[test]
fn add_column_is_drift_and_upgrade_keeps_old_changes_readable() {
    let db = Dbs::new();
    db.src_sql(
        "CREATE TABLE t(id INTEGER PRIMARY KEY, a TEXT); CREATE TABLE o(id INTEGER PRIMARY KEY)",
    );
    db.init(&[]);
    db.src_sql("INSERT INTO t VALUES (1, 'a1'); INSERT INTO t VALUES (2, 'a2');");
    db.catch_up();
    expect(&db.capture_cmd("ack", &["--through", "1"]), 0, "ack");
    db.src_sql("UPDATE t SET a = 'a2x' WHERE id = 2; INSERT INTO o VALUES (1);");
    db.src_sql("ALTER TABLE t ADD COLUMN b TEXT");
    let r = db.capture_cmd("verify", &[]);
    expect(&r, 1, "verify after ALTER TABLE ADD COLUMN");
    assert!(
        r.stderr.contains("\"t\""),
        "verify should name table t: {}",
        r.stderr
    );
    assert!(
        !r.stderr.contains("\"o\""),
        "table o did not change: {}",
        r.stderr
    );
    let r = db.capture_cmd("upgrade", &[]);
    expect(&r, 0, "upgrade");
    let r = db.capture_cmd("verify", &[]);
    expect(&r, 0, "verify after upgrade");
    db.src_sql(
        "INSERT INTO t VALUES (3, 'a3', 'b3');
         UPDATE t SET b = 'b1' WHERE id = 1;
         INSERT INTO o VALUES (2);",
    );
    // The stream across the upgrade: one batch, the old-width changes under
    // the header's schema, then a schema record with the new column before
    // the first change in the new shape.
    let (raw, b) = db.capture_ok(&[]);
    assert_eq!(b.len(), 1, "{}", String::from_utf8_lossy(&raw));
    assert_eq!(b[0].start.sequence(), 1);
    assert_eq!(b[0].end.sequence(), db.status().high_water);
    let width = b[0]
        .schemas
        .as_ref()
        .unwrap()
        .iter()
        .find(|s| s.table == "t")
        .map(|s| s.columns.len());
    assert_eq!(width, Some(2));
    assert_eq!(b[0].changes.len(), 1);
    let (at, change) = &b[0].changes[0];
    assert_eq!(*at, 3, "before the first change in the new shape");
    assert_eq!(change.schema.columns.len(), 3);
    assert!(change.renamed.is_empty());
    assert_events(
        &[
            e_ins("t", vec![vi(2), vt("a2")]),
            e_upd("t", vec![vi(2), vt("a2")], vec![vi(2), vt("a2x")]),
            e_ins("o", vec![vi(1)]),
            e_ins("t", vec![vi(3), vt("a3"), vt("b3")]),
            e_upd(
                "t",
                vec![vi(1), vt("a1"), VN],
                vec![vi(1), vt("a1"), vt("b1")],
            ),
            e_ins("o", vec![vi(2)]),
        ],
        &b[0].events,
    );
    // The projection (holding 1..2 with two columns) takes the rest and the new column.
    let s = db.apply_ok(&raw);
    assert_eq!((s.applied, s.skipped), (5, 1), "{s:?}");
    let cols: Vec<String> = db
        .proj_conn()
        .prepare("SELECT name FROM pragma_table_info('t')")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(cols, vec!["id", "a", "b"]);
    db.audit_equal();
    db.assert_same_rows(&["t", "o"]);
}

/// A column added with a DEFAULT gives every existing row a value without any
/// row change; after `upgrade` and apply, the projection must hold it too.
#[test]
fn add_column_with_a_default_reaches_the_projection() {
    let db = Dbs::new();
    db.src_sql("CREATE TABLE t(id INTEGER PRIMARY KEY, a TEXT)");
    db.init(&[]);
    db.src_sql("INSERT INTO t VALUES (1, 'a1'), (2, 'a2');");
    db.catch_up();
    db.src_sql("ALTER TABLE t ADD COLUMN b TEXT NOT NULL DEFAULT 'dflt'");
    expect(&db.capture_cmd("upgrade", &[]), 0, "upgrade");
    db.src_sql("INSERT INTO t VALUES (3, 'a3', 'b3');");
    db.catch_up();
    let r = db.audit(&[]);
    expect(
        &r,
        0,
        "audit after ADD COLUMN ... DEFAULT, upgrade and apply",
    );
    db.assert_same_rows(&["t"]);
}

/// `verify` reports a dropped table and says "run upgrade"; upgrade must then
/// stop capturing it, keeping its earlier changes readable.
#[test]
fn a_dropped_table_is_retired_by_upgrade() {
    let db = Dbs::new();
    db.src_sql(
        "CREATE TABLE t(id INTEGER PRIMARY KEY, v TEXT); CREATE TABLE u(id INTEGER PRIMARY KEY)",
    );
    db.init(&[]);
    db.src_sql("INSERT INTO t VALUES (1, 'a'); INSERT INTO u VALUES (1);");
    db.src_sql("DROP TABLE t");
    let r = db.capture_cmd("verify", &[]);
    expect(&r, 1, "verify after DROP TABLE");
    assert!(r.stderr.contains("\"t\""), "{}", r.stderr);
    let r = db.capture_cmd("upgrade", &[]);
    expect(&r, 0, "upgrade after DROP TABLE");
    expect(&db.capture_cmd("verify", &[]), 0, "verify after upgrade");
    expect(
        &exec(SNAPSHOT, &["--source", &db.src_url()], None),
        0,
        "snapshot after upgrade",
    );
    let (_, b) = db.capture_ok(&[]);
    assert_events(
        &[e_ins("t", vec![vi(1), vt("a")]), e_ins("u", vec![vi(1)])],
        &events(&b),
    );
}

#[test]
fn a_tampered_trigger_is_drift_and_upgrade_repairs_it() {
    let db = Dbs::new();
    db.src_sql("CREATE TABLE t(id INTEGER PRIMARY KEY, v TEXT)");
    db.init(&[]);
    expect(&db.capture_cmd("verify", &[]), 0, "verify after init");
    let trig = |op: &str| -> String {
        db.src_conn()
            .query_row(
                "SELECT name FROM sqlite_schema WHERE type = 'trigger' AND name LIKE '\\_mooncdc\\_%' ESCAPE '\\' AND name LIKE ?1",
                [format!("%{op}")],
                |r| r.get(0),
            )
            .unwrap()
    };
    let upd = trig("upd");
    let r = db.sqlite3(&format!("DROP TRIGGER \"{upd}\";"));
    expect(&r, 0, "drop trigger");
    let r = db.capture_cmd("verify", &[]);
    expect(&r, 1, "verify with a dropped trigger");
    assert!(
        r.stderr.contains(&upd),
        "verify should name the trigger: {}",
        r.stderr
    );
    expect(&db.capture_cmd("upgrade", &[]), 0, "upgrade");
    expect(&db.capture_cmd("verify", &[]), 0, "verify after upgrade");

    // A trigger replaced by one that does something else.
    let ins = trig("ins");
    let r = db.sqlite3(&format!(
        "DROP TRIGGER \"{ins}\"; CREATE TRIGGER \"{ins}\" AFTER INSERT ON t BEGIN SELECT 1; END;"
    ));
    expect(&r, 0, "replace trigger");
    let r = db.capture_cmd("verify", &[]);
    expect(&r, 1, "verify with an altered trigger");
    assert!(r.stderr.contains(&ins), "{}", r.stderr);
    expect(&db.capture_cmd("upgrade", &[]), 0, "upgrade");
    expect(&db.capture_cmd("verify", &[]), 0, "verify after upgrade");

    // Capture works again for every operation.
    db.src_sql("INSERT INTO t VALUES (1, 'x'); UPDATE t SET v = 'y'; DELETE FROM t;");
    let (_, b) = db.capture_ok(&[]);
    assert_events(
        &[
            e_ins("t", vec![vi(1), vt("x")]),
            e_upd("t", vec![vi(1), vt("x")], vec![vi(1), vt("y")]),
            e_del("t", vec![vi(1), vt("y")]),
        ],
        &events(&b),
    );
}

// ---------------------------------------------------------------- init

#[test]
fn init_refuses_tables_without_a_key_and_table_selects() {
    let db = Dbs::new();
    db.src_sql(
        "CREATE TABLE a(id INTEGER PRIMARY KEY, v TEXT);
         CREATE TABLE nokey(x, y);
         CREATE TABLE c(id INTEGER PRIMARY KEY, v TEXT);",
    );
    let url = db.src_url();
    let r = exec(CAPTURE, &["init", "--source", &url], None);
    expect(&r, 1, "init with a table without a primary key");
    assert!(
        r.stderr.contains("nokey") && r.stderr.contains("primary key"),
        "the message should name the table and the missing primary key: {}",
        r.stderr
    );
    // Nothing was installed.
    let r = db.capture_cmd("status", &[]);
    expect(&r, 1, "status after a failed init");
    assert!(r.stderr.contains("not installed"), "{}", r.stderr);
    let r = exec(
        CAPTURE,
        &["init", "--source", &url, "--table", "nokey"],
        None,
    );
    expect(&r, 1, "init --table nokey");
    assert!(r.stderr.contains("primary key"), "{}", r.stderr);
    let r = exec(
        CAPTURE,
        &["init", "--source", &url, "--table", "missing"],
        None,
    );
    expect(&r, 1, "init of a table that does not exist");
    assert!(r.stderr.contains("missing"), "{}", r.stderr);
    let r = exec(
        CAPTURE,
        &["init", "--source", &url, "--table", "_mooncdc_log"],
        None,
    );
    expect(&r, 2, "init of a MoonCDC table");

    let id = db.init(&["a"]);
    assert_eq!(db.status().tables, "a");
    db.src_sql("INSERT INTO a VALUES (1, 'a'); INSERT INTO c VALUES (1, 'c'); INSERT INTO nokey VALUES (1, 2);");
    let (_, b) = db.capture_ok(&[]);
    assert_events(&[e_ins("a", vec![vi(1), vt("a")])], &events(&b));
    // Adding a table later keeps the identity.
    assert_eq!(db.init(&["c"]), id);
    assert_eq!(db.status().tables, "a, c");
    db.src_sql("INSERT INTO c VALUES (2, 'c2');");
    let (_, b) = db.capture_ok(&[]);
    assert_events(
        &[
            e_ins("a", vec![vi(1), vt("a")]),
            e_ins("c", vec![vi(2), vt("c2")]),
        ],
        &events(&b),
    );
    // The read starts before c was captured: the header has a, and c comes
    // as a table new to the batch, right before its first change.
    let names: Vec<String> = b[0]
        .schemas
        .as_ref()
        .unwrap()
        .iter()
        .map(|s| s.table.clone())
        .collect();
    assert_eq!(names, vec!["a"]);
    assert_eq!(b[0].changes.len(), 1);
    assert_eq!(b[0].changes[0].1.schema.table, "c");
    assert_eq!(b[0].changes[0].0, 1);
}

// ---------------------------------------------------------------- values capture cannot carry

#[test]
fn text_that_is_not_utf8_fails_the_read_without_a_commit() {
    let db = Dbs::new();
    db.src_sql("CREATE TABLE t(id INTEGER PRIMARY KEY, v TEXT)");
    db.init(&[]);
    db.src_sql("INSERT INTO t VALUES (1, 'ok')");
    let r = db.sqlite3("INSERT INTO t VALUES (2, CAST(x'ff' AS TEXT));");
    expect(&r, 0, "sqlite3 insert of invalid UTF-8");
    let r = db.capture(&[]);
    expect(&r, 1, "read of invalid UTF-8 TEXT");
    assert!(
        r.stderr.contains("\"t\"") && r.stderr.contains("change 2") && r.stderr.contains("UTF-8"),
        "the message should name the table, the sequence and the rule: {}",
        r.stderr
    );
    let out = String::from_utf8_lossy(&r.stdout);
    assert!(
        !out.lines().any(|l| l.contains(r#""kind":"commit""#)),
        "a failed read must not write a commit line:\n{out}"
    );
    // The valid change before it can still be read up to it.
    let (_, b) = db.capture_ok(&["--max-events", "1"]);
    assert_eq!(b[0].end.sequence(), 1);
    assert_events(&[e_ins("t", vec![vi(1), vt("ok")])], &events(&b));
}

#[test]
fn an_infinite_real_fails_the_read_clearly() {
    let db = Dbs::new();
    db.src_sql("CREATE TABLE t(id INTEGER PRIMARY KEY, v)");
    db.init(&[]);
    let r = db.sqlite3("INSERT INTO t VALUES (1, 1e999);");
    expect(&r, 0, "sqlite3 insert of Inf");
    let r = db.capture(&[]);
    expect(&r, 1, "read of an infinite REAL");
    assert!(
        r.stderr.contains("REAL") && r.stderr.contains("\"t\""),
        "the message should name the table and the rule: {}",
        r.stderr
    );
    assert!(!String::from_utf8_lossy(&r.stdout).contains(r#""kind":"commit""#));
}

/// The way out of a value capture cannot carry, as docs/OPERATIONS.md §8 gives
/// it (after the row is fixed): a new target from a new snapshot, caught up,
/// its cursor acknowledged, put in place of the old one.
const NEW_SNAPSHOT_WAY_OUT: &str = r#"mooncdc-snapshot --source sqlite:app.db | mooncdc-apply --target sqlite:proj.new.db
mooncdc-capture --source sqlite:app.db --after "$(mooncdc-apply cursor --target sqlite:proj.new.db)" \
  | mooncdc-apply --target sqlite:proj.new.db
mooncdc-capture ack --source sqlite:app.db --cursor "$(mooncdc-apply cursor --target sqlite:proj.new.db)"
# stop every program that uses proj.db, then:
rm -f proj.db-wal proj.db-shm && mv proj.new.db proj.db
"#;

/// Run documented shell commands in the test's folder, with the built tools
/// on `PATH` and `app.db` standing for the source `src.db`.
fn run_documented(db: &Dbs, script: &str) -> common::Run {
    let tools = bin(CAPTURE)
        .parent()
        .expect("the tools' folder")
        .display()
        .to_string();
    let dir = db.dir.path().display().to_string();
    exec_program(
        std::path::Path::new("bash"),
        &[
            "-c",
            &format!(
                "set -euo pipefail; cd {}; PATH={}:\"$PATH\"\n{}",
                shell_quote(&dir),
                shell_quote(&tools),
                script.replace("app.db", "src.db")
            ),
        ],
        None,
    )
}

/// Whether a batch stream holds a commit line.
fn has_commit(out: &[u8]) -> bool {
    String::from_utf8_lossy(out)
        .lines()
        .any(|l| l.starts_with(r#"{"kind":"commit""#))
}

/// A cursor of `source` at `seq`, as JSON.
fn cursor_json(source: &str, seq: u128) -> String {
    format!(r#"{{"source":"{source}","sequence":"{seq}"}}"#)
}

/// A row holding a value the wire cannot carry (written by the sqlite3 shell
/// with `bad`) stops every read at its change; fixing the row (`fix`) is
/// logged as an update whose before image holds the value, so reads keep
/// failing. The documented way out (docs/OPERATIONS.md §8) must end in a
/// target that is equal to the source and a pipeline that runs again.
fn a_value_capture_cannot_carry_is_recovered_with_a_new_snapshot(bad: &str, fix: &str, rule: &str) {
    let db = Dbs::new();
    db.src_sql("CREATE TABLE items(id INTEGER PRIMARY KEY, name TEXT, price REAL)");
    let id = db.init(&[]);
    db.src_sql("INSERT INTO items VALUES (1, 'tea', 2.5)");
    let r = pipeline(&format!(
        "{{snapshot}} --source {} | {{apply}} --target {}",
        shell_quote(&db.src_url()),
        shell_quote(&db.proj_url())
    ));
    expect(&r, 0, "bootstrap of the target");
    let old = db.target_cursor().expect("the target holds a cursor");
    assert_eq!(old.sequence(), 1);
    let old = old.to_json();

    // Change 2 holds the bad value, change 3 is a good one after it.
    expect(&db.sqlite3(bad), 0, "sqlite3 writes the bad row");
    db.src_sql("INSERT INTO items VALUES (3, 'jam', 4.0)");
    let refused = |after: &str, change: u128, what: &str| {
        let r = db.capture(&["--after", after]);
        expect(&r, 1, what);
        let at = format!("change {change} of table \"items\"");
        assert!(
            r.stderr.contains(&at) && r.stderr.contains(rule),
            "{what}: the message should name {at:?} and say {rule:?}: {}",
            r.stderr
        );
        assert!(
            !has_commit(&r.stdout),
            "{what}: a failed read must not write a commit line:\n{}",
            String::from_utf8_lossy(&r.stdout)
        );
    };
    refused(&old, 2, "read over the bad change");
    // In the pipeline apply gets a batch without its commit line and applies nothing.
    let r = pipeline(&format!(
        "{{capture}} --source {s} --after \"$({{apply}} cursor --target {t})\" \
         | {{apply}} --target {t}",
        s = shell_quote(&db.src_url()),
        t = shell_quote(&db.proj_url())
    ));
    expect(&r, 1, "the catch-up pipeline over the bad change");
    assert!(r.stderr.contains(rule), "{}", r.stderr);
    assert!(r.stderr.contains("truncated stream"), "{}", r.stderr);
    assert_eq!(db.target_cursor().unwrap().sequence(), 1);
    // A snapshot refuses the row as well, naming the table.
    let r = exec(SNAPSHOT, &["--source", &db.src_url()], None);
    expect(&r, 1, "snapshot of the bad row");
    assert!(
        r.stderr.contains("\"items\"") && r.stderr.contains(rule),
        "{}",
        r.stderr
    );

    // The application fixes the row (change 4): reads still fail, at the bad
    // insert, and from after it at the fix, whose before image holds the value.
    db.src_sql(fix);
    assert_eq!(db.status().high_water, 4);
    refused(&old, 2, "read over the bad change after the fix");
    refused(
        &cursor_json(&id, 3),
        4,
        "read of the fix (its before image holds the bad value)",
    );

    // The documented way out, run as written.
    let r = run_documented(&db, NEW_SNAPSHOT_WAY_OUT);
    expect(
        &r,
        0,
        "the documented way out (new snapshot, catch up, ack, swap)",
    );
    assert!(
        !db.path("proj.new.db").exists(),
        "the new target was moved into place"
    );
    let new = db.target_cursor().expect("the new target holds a cursor");
    assert_eq!(new.source, id);
    assert_eq!(new.sequence(), 4, "the new snapshot is taken after the fix");
    let st = db.status();
    assert_eq!((st.acknowledged, st.backlog), (4, 0), "{st:?}");
    // Acknowledging the new cursor (again) succeeds.
    expect(
        &db.capture_cmd("ack", &["--cursor", &new.to_json()]),
        0,
        "ack of the new target's cursor",
    );
    // Capture after the new cursor succeeds and applies; the target is equal.
    let (raw, b) = db.capture_ok(&["--after", &new.to_json()]);
    assert_eq!((b.len(), events(&b).len()), (1, 0));
    let s = db.apply_ok(&raw);
    assert_eq!(s.cursor.map(|c| c.sequence()), Some(4));
    db.audit_equal();
    db.assert_same_rows(&["items"]);
    db.sqldiff_clean(&["items"]);
    // The old target's cursor can no longer be fed: its changes are gone.
    let r = db.capture(&["--after", &old]);
    expect(&r, 1, "read after the old target's cursor");
    assert!(r.stderr.contains("acknowledged position 4"), "{}", r.stderr);
    // The pipeline runs on as before.
    db.src_sql("UPDATE items SET price = 5.0 WHERE id = 2; DELETE FROM items WHERE id = 3;");
    let (_, s) = db.catch_up();
    assert_eq!((s.applied, s.cursor.map(|c| c.sequence())), (2, Some(6)));
    db.audit_equal();
    db.assert_same_rows(&["items"]);
}

#[test]
fn an_infinite_real_is_recovered_with_a_new_snapshot_after_the_fix() {
    a_value_capture_cannot_carry_is_recovered_with_a_new_snapshot(
        "INSERT INTO items VALUES (2, 'cake', 1e999);",
        "UPDATE items SET price = 3.75 WHERE id = 2",
        "REAL inf cannot be carried",
    );
}

#[test]
fn text_that_is_not_utf8_is_recovered_with_a_new_snapshot_after_the_fix() {
    a_value_capture_cannot_carry_is_recovered_with_a_new_snapshot(
        "INSERT INTO items VALUES (2, CAST(x'ff' AS TEXT), 3.75);",
        "UPDATE items SET name = 'cake' WHERE id = 2",
        "TEXT is not valid UTF-8",
    );
}

// ---------------------------------------------------------------- events over the line cap

#[test]
fn an_event_over_max_line_bytes_fails_the_read_without_a_commit() {
    let db = Dbs::new();
    db.src_sql("CREATE TABLE t(id INTEGER PRIMARY KEY, b BLOB)");
    db.init(&[]);
    let mut rng = Rng::new(0x0112_ECA9);
    let big: Vec<u8> = (0..2000).map(|_| rng.next() as u8).collect();
    {
        let c = db.src_conn();
        c.execute("INSERT INTO t VALUES (1, x'00')", []).unwrap();
        c.execute("INSERT INTO t VALUES (2, ?1)", [&big]).unwrap();
        c.execute("INSERT INTO t VALUES (3, x'01')", []).unwrap();
    }
    // Event 2 is about 4 KB on the wire.
    let r = db.capture(&["--max-line-bytes", "1000"]);
    expect(&r, 1, "read of an event over --max-line-bytes 1000");
    for needle in [
        "event 2",
        "table \"t\"",
        "limit of 1000 bytes",
        "--max-line-bytes",
    ] {
        assert!(
            r.stderr.contains(needle),
            "the message should name {needle:?}: {}",
            r.stderr
        );
    }
    // The header and event 1 may be written, but neither event 2 nor a commit
    // line: nothing of the batch can be applied.
    assert!(
        !has_commit(&r.stdout),
        "a refused read must not write a commit line:\n{}",
        String::from_utf8_lossy(&r.stdout)
    );
    assert!(
        !String::from_utf8_lossy(&r.stdout).contains(&hex::encode(&big)),
        "the refused event must not be written"
    );
    let a = db.apply(&r.stdout, &[]);
    expect(&a, 1, "apply of the refused read's output");
    assert!(a.stderr.contains("truncated stream"), "{}", a.stderr);
    assert!(db.target_cursor().is_none(), "nothing may be applied");
    // The cap is per event: the event before it reads under the same cap.
    let (_, b) = db.capture_ok(&["--max-line-bytes", "1000", "--max-events", "1"]);
    assert_events(&[e_ins("t", vec![vi(1), vb(&[0])])], &events(&b));

    // Under a cap it fits, capture writes it and apply reads it with the same cap.
    let (raw, b) = db.capture_ok(&["--max-line-bytes", "100000"]);
    assert_events(
        &[
            e_ins("t", vec![vi(1), vb(&[0])]),
            e_ins("t", vec![vi(2), vb(&big)]),
            e_ins("t", vec![vi(3), vb(&[1])]),
        ],
        &events(&b),
    );
    let a = db.apply(&raw, &["--max-line-bytes", "100000"]);
    expect(&a, 0, "apply --max-line-bytes 100000");
    assert_eq!(Summary::parse(&a.stderr).applied, 3);
    db.audit_equal();
    db.assert_same_rows(&["t"]);

    // The N the message asks for works for capture and for apply alike.
    let n: String = r
        .stderr
        .split_once("N ≥ ")
        .map(|(_, rest)| rest.chars().take_while(char::is_ascii_digit).collect())
        .unwrap_or_default();
    assert!(!n.is_empty(), "the message should name N: {}", r.stderr);
    let (raw_n, _) = db.capture_ok(&["--max-line-bytes", &n]);
    assert_eq!(raw_n, raw);
    let other = format!("sqlite:{}", db.path_str("other.db"));
    let a = exec(
        APPLY,
        &["--target", &other, "--max-line-bytes", &n],
        Some(&raw_n),
    );
    expect(&a, 0, "apply with the N the message names");
}

#[test]
fn capture_refuses_by_default_an_event_line_that_apply_refuses_by_default() {
    // 33 MiB of BLOB is 66 MiB of hex: over the 64 MiB (67108864 bytes) line
    // cap that readers apply by default.
    const BLOB: usize = 33 * 1024 * 1024;
    const CAP: u64 = 64 * 1024 * 1024;
    let db = Dbs::new();
    db.src_sql("CREATE TABLE files(id INTEGER PRIMARY KEY, data BLOB)");
    db.init(&[]);
    db.src_sql(&format!(
        "INSERT INTO files VALUES (1, x'00'); INSERT INTO files VALUES (2, randomblob({BLOB}));"
    ));
    let r = db.capture(&[]);
    expect(&r, 1, "read with default options of an event over 64 MiB");
    for needle in [
        "event 2",
        "table \"files\"",
        "limit of 67108864 bytes",
        "--max-line-bytes",
    ] {
        assert!(
            r.stderr.contains(needle),
            "the message should name {needle:?}: {}",
            r.stderr
        );
    }
    assert!(
        !has_commit(&r.stdout),
        "a refused read must not write a commit line"
    );
    assert!(
        r.stdout.len() < 1 << 20,
        "the refused event must not be written ({} bytes written)",
        r.stdout.len()
    );

    // With the cap raised on capture and on apply, the pipeline works.
    let f = db.path_str("big.jsonl");
    let r = pipeline(&format!(
        "{{capture}} --source {} --max-line-bytes 200000000 | tee {} \
         | {{apply}} --max-line-bytes 200000000 --target {}",
        shell_quote(&db.src_url()),
        shell_quote(&f),
        shell_quote(&db.proj_url())
    ));
    expect(
        &r,
        0,
        "capture | apply, both with --max-line-bytes 200000000",
    );
    let s = Summary::parse(&r.stderr);
    assert_eq!((s.applied, s.cursor.map(|c| c.sequence())), (2, Some(2)));
    assert!(
        std::fs::metadata(&f).unwrap().len() > CAP,
        "the stream should hold a line over 64 MiB"
    );
    db.audit_equal();
    db.sqldiff_clean(&["files"]);
    // apply with its default cap refuses that stream, at the same limit.
    let other = format!("sqlite:{}", db.path_str("other.db"));
    let a = exec(APPLY, &["--target", &other, &f], None);
    expect(&a, 1, "apply with default options of a line over 64 MiB");
    assert!(
        a.stderr.contains("67108864") && a.stderr.contains("--max-line-bytes"),
        "{}",
        a.stderr
    );
}

// ---------------------------------------------------------------- wide tables

/// `CREATE TABLE wide(id INTEGER PRIMARY KEY, c1, …)` with `n` columns in
/// all, declared INTEGER, REAL, TEXT, BLOB and without a type in turn.
fn wide_table_sql(n: usize) -> String {
    const TYPES: [&str; 5] = [" INTEGER", " REAL", " TEXT", " BLOB", ""];
    let mut cols = vec!["id INTEGER PRIMARY KEY".to_string()];
    cols.extend((1..n).map(|i| format!("c{i}{}", TYPES[i % 5])));
    format!("CREATE TABLE wide({})", cols.join(", "))
}

/// A row of [`wide_table_sql`]`(n)`: a value of each column's class, NULLs
/// and REALs in the untyped columns.
fn wide_row_sql(id: i64, n: usize) -> String {
    let mut v = vec![id.to_string()];
    v.extend((1..n).map(|i| match i % 5 {
        0 => (id * 100_000 + i as i64).to_string(),
        1 => format!("{i}.{id}"),
        2 => format!("'r{id} c{i} é'"),
        3 => format!("x'{i:04x}{id:02x}'"),
        _ if i % 2 == 0 => "NULL".to_string(),
        _ => format!("-{i}.25e-300"),
    }));
    format!("INSERT INTO wide VALUES ({})", v.join(", "))
}

/// The number of columns of the change log.
fn log_columns(db: &Dbs) -> i64 {
    db.src_conn()
        .query_row(
            "SELECT count(*) FROM pragma_table_info('_mooncdc_log')",
            [],
            |r| r.get(0),
        )
        .unwrap()
}

/// Every row of `wide` in key order, exactly (class, REAL bits, bytes); the
/// shared `dump` reads three values a column, over SQLite's 2000.
fn wide_rows(conn: &rusqlite::Connection) -> Vec<Vec<Cell>> {
    use rusqlite::types::ValueRef;
    let mut st = conn.prepare("SELECT * FROM wide ORDER BY id").unwrap();
    let n = st.column_count();
    let mut rows = st.query([]).unwrap();
    let mut out = Vec::new();
    while let Some(r) = rows.next().unwrap() {
        out.push(
            (0..n)
                .map(|i| match r.get_ref(i).unwrap() {
                    ValueRef::Null => Cell::Null,
                    ValueRef::Integer(n) => Cell::Int(n),
                    ValueRef::Real(x) => Cell::Real(x.to_bits()),
                    ValueRef::Text(b) => Cell::Text(b.to_vec()),
                    ValueRef::Blob(b) => Cell::Blob(b.to_vec()),
                })
                .collect(),
        );
    }
    out
}

/// Every schema object of MoonCDC in the source (tables, triggers, indexes), with its SQL.
fn mooncdc_objects(db: &Dbs) -> Vec<String> {
    let c = db.src_conn();
    let mut st = c
        .prepare(
            "SELECT type || ' ' || name || ' ' || ifnull(sql, '') FROM sqlite_schema
             WHERE substr(name, 1, 9) = '_mooncdc_' OR substr(tbl_name, 1, 9) = '_mooncdc_'
             ORDER BY 1",
        )
        .unwrap();
    let v = st
        .query_map([], |r| r.get(0))
        .unwrap()
        .collect::<Result<Vec<String>, _>>()
        .unwrap();
    v
}

#[test]
fn a_table_over_998_columns_is_refused_by_name_and_nothing_is_installed() {
    let db = Dbs::new();
    db.src_sql(&wide_table_sql(999));
    db.src_sql("CREATE TABLE small(id INTEGER PRIMARY KEY, v TEXT)");
    let url = db.src_url();
    let refused = |args: &[&str], what: &str| {
        let r = exec(CAPTURE, args, None);
        expect(&r, 1, what);
        assert!(
            r.stderr.contains("table \"wide\" has 999 columns") && r.stderr.contains("998"),
            "{what}: the message should name the table and the limit of 998 columns: {}",
            r.stderr
        );
        assert!(r.stdout.is_empty(), "{what}: {}", r.stdout_str());
    };
    refused(&["init", "--source", &url], "init of every table");
    // Nothing was installed: no capture table, no trigger.
    assert_eq!(mooncdc_objects(&db), Vec::<String>::new());
    let r = db.capture_cmd("status", &[]);
    expect(&r, 1, "status after a refused init");
    assert!(r.stderr.contains("not installed"), "{}", r.stderr);
    refused(
        &["init", "--source", &url, "--table", "wide"],
        "init --table wide",
    );
    assert_eq!(mooncdc_objects(&db), Vec::<String>::new());

    // Installed for another table, a refused init changes nothing either.
    let id = db.init(&["small"]);
    let installed = mooncdc_objects(&db);
    assert!(
        installed.iter().any(|o| o.starts_with("trigger _mooncdc_")),
        "{installed:?}"
    );
    assert_eq!(log_columns(&db), 3 + 2 * 2);
    refused(
        &["init", "--source", &url, "--table", "wide"],
        "init --table wide on an installed capture",
    );
    refused(
        &["init", "--source", &url],
        "init of every table on an installed capture",
    );
    assert_eq!(mooncdc_objects(&db), installed);
    assert_eq!(log_columns(&db), 3 + 2 * 2);
    expect(&db.capture_cmd("verify", &[]), 0, "verify");
    let st = db.status();
    assert_eq!((st.identity, st.tables), (id, "small".to_string()));
    db.src_sql(&wide_row_sql(1, 999));
    db.src_sql("INSERT INTO small VALUES (1, 'a')");
    let (_, b) = db.capture_ok(&[]);
    assert_events(&[e_ins("small", vec![vi(1), vt("a")])], &events(&b));
}

#[test]
fn a_table_of_998_columns_is_captured_and_upgrade_refuses_a_999th() {
    const N: usize = 998;
    let db = Dbs::new();
    db.src_sql(&wide_table_sql(N));
    db.init(&[]);
    // seq, tid, op and two values a column: one column under SQLite's 2000.
    assert_eq!(log_columns(&db), 3 + 2 * N as i64);
    db.src_sql(&wide_row_sql(1, N));
    let r = pipeline(&format!(
        "{{snapshot}} --source {} | {{apply}} --target {}",
        shell_quote(&db.src_url()),
        shell_quote(&db.proj_url())
    ));
    expect(&r, 0, "bootstrap of the target");
    db.src_sql(&wide_row_sql(2, N));
    db.src_sql(&wide_row_sql(3, N));
    db.src_sql(
        "UPDATE wide SET c1 = 7, c996 = -0.5, c997 = 'last' WHERE id = 2;
         DELETE FROM wide WHERE id = 3;",
    );
    let (raw, s) = db.catch_up();
    let b = common::batches(&raw);
    let ev = events(&b);
    assert_eq!(
        ev.iter().map(|e| e.operation).collect::<Vec<_>>(),
        vec![
            Operation::Insert,
            Operation::Insert,
            Operation::Update,
            Operation::Delete
        ]
    );
    for e in &ev {
        for img in [&e.before, &e.after].into_iter().flatten() {
            assert_eq!(img.len(), N, "every image holds the {N} columns");
        }
    }
    let after = ev[2].after.as_ref().unwrap();
    assert_eq!(
        (&after[1], &after[996], &after[997]),
        (&vr(7.0), &vr(-0.5), &vt("last"))
    );
    assert_eq!((s.applied, s.cursor.map(|c| c.sequence())), (4, Some(5)));
    db.audit_equal();
    let rows = wide_rows(&db.src_conn());
    assert_eq!(rows.len(), 2);
    assert_rows_eq("wide", &rows, &wide_rows(&db.proj_conn()));
    db.sqldiff_clean(&["wide"]);

    // A 999th column: upgrade refuses the table by name and changes nothing.
    db.src_sql("ALTER TABLE wide ADD COLUMN c998");
    let before = mooncdc_objects(&db);
    let r = db.capture_cmd("upgrade", &[]);
    expect(&r, 1, "upgrade of a table grown to 999 columns");
    assert!(
        r.stderr.contains("table \"wide\" has 999 columns") && r.stderr.contains("998"),
        "the message should name the table and the limit of 998 columns: {}",
        r.stderr
    );
    assert_eq!(mooncdc_objects(&db), before);
    assert_eq!(log_columns(&db), 3 + 2 * N as i64);
    let r = db.capture_cmd("verify", &[]);
    expect(&r, 1, "verify after the refused upgrade");
    assert!(r.stderr.contains("\"wide\""), "{}", r.stderr);
    // Capture has drifted from the table: a read refuses rather than carry
    // rows without the new column, and writes nothing.
    db.src_sql("UPDATE wide SET c2 = 'after the alter' WHERE id = 1");
    let r = db.capture(&["--after", &db.target_cursor().unwrap().to_json()]);
    expect(&r, 1, "read while capture has drifted");
    assert!(
        r.stderr.contains("drifted") && r.stderr.contains("\"wide\""),
        "{}",
        r.stderr
    );
    assert!(r.stdout.is_empty());
}

// ---------------------------------------------------------------- follow

/// The complete batches at the start of `bytes` (up to the last commit line).
fn complete_prefix(bytes: &[u8]) -> &[u8] {
    let mut end = 0;
    let mut pos = 0;
    for line in bytes.split_inclusive(|&b| b == b'\n') {
        pos += line.len();
        if line.starts_with(br#"{"kind":"commit""#) && line.ends_with(b"\n") {
            end = pos;
        }
    }
    &bytes[..end]
}

struct Kill(std::process::Child);

impl Drop for Kill {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn follow_writes_complete_batches_that_apply() {
    let db = Dbs::new();
    db.src_sql("CREATE TABLE t(id INTEGER PRIMARY KEY, v TEXT)");
    db.init(&[]);
    db.src_sql("INSERT INTO t VALUES (1, 'before follow')");
    let out = db.path("follow.jsonl");
    let child = Command::new(bin(CAPTURE))
        .args(["--source", &db.src_url(), "--follow", "--poll-ms", "50"])
        .stdout(Stdio::from(std::fs::File::create(&out).unwrap()))
        .stderr(Stdio::from(
            std::fs::File::create(db.path("follow.err")).unwrap(),
        ))
        .spawn()
        .unwrap();
    let mut follow = Kill(child);
    let mut expected = 1;
    for round in 0..5 {
        let mut c = db.src_conn();
        let tx = c.transaction().unwrap();
        for i in 0..20 {
            let id = 10 + round * 100 + i;
            tx.execute(
                "INSERT INTO t VALUES (?1, ?2)",
                params![id, format!("r{round}")],
            )
            .unwrap();
        }
        tx.execute("UPDATE t SET v = v || '!' WHERE id % 7 = 0", [])
            .unwrap();
        expected += 20 + tx.changes() as usize;
        tx.commit().unwrap();
        std::thread::sleep(Duration::from_millis(80));
    }
    wait_for(20, "follow to write every change", || {
        let bytes = std::fs::read(&out).unwrap();
        common::parse_stream(complete_prefix(&bytes))
            .map(|b| events(&b).len() == expected)
            .unwrap_or(false)
    });
    assert!(
        follow.0.try_wait().unwrap().is_none(),
        "follow should keep running"
    );
    let _ = follow.0.kill();
    let _ = follow.0.wait();
    let bytes = std::fs::read(&out).unwrap();
    let b = common::batches(&bytes);
    assert!(
        b.len() >= 2,
        "follow should write several batches, got {}",
        b.len()
    );
    assert_contiguous(&b);
    assert_eq!(b[0].start.sequence(), 0);
    assert_eq!(b.last().unwrap().end.sequence(), db.status().high_water);
    let s = db.apply_ok(&bytes);
    assert_eq!(s.applied as usize, expected);
    db.audit_equal();
    // Reading, even following, never acknowledges.
    assert_eq!(db.status().acknowledged, 0);
}

/// An unmanaged ALTER while following: the changes before it are written,
/// then the follower stops with status 1 and says to run upgrade; nothing
/// logged after the ALTER is written with the stale column list.
#[test]
fn follow_stops_at_drift_that_appears_while_it_runs() {
    let db = Dbs::new();
    db.src_sql("CREATE TABLE t(id INTEGER PRIMARY KEY, v TEXT)");
    db.init(&[]);
    db.src_sql("INSERT INTO t VALUES (1, 'before')");
    let out = db.path("follow.jsonl");
    let err = db.path("follow.err");
    let child = Command::new(bin(CAPTURE))
        .args(["--source", &db.src_url(), "--follow", "--poll-ms", "50"])
        .stdout(Stdio::from(std::fs::File::create(&out).unwrap()))
        .stderr(Stdio::from(std::fs::File::create(&err).unwrap()))
        .spawn()
        .unwrap();
    let mut follow = Kill(child);
    wait_for(20, "follow to write the first change", || {
        let bytes = std::fs::read(&out).unwrap();
        common::parse_stream(complete_prefix(&bytes))
            .map(|b| events(&b).len() == 1)
            .unwrap_or(false)
    });
    db.src_sql("ALTER TABLE t ADD COLUMN c INT; INSERT INTO t VALUES (2, 'after', 7);");
    wait_for(20, "follow to stop at the drift", || {
        follow.0.try_wait().unwrap().is_some()
    });
    assert_eq!(follow.0.wait().unwrap().code(), Some(1));
    let msg = std::fs::read_to_string(&err).unwrap();
    assert!(msg.contains("drifted") && msg.contains("upgrade"), "{msg}");
    let b = common::batches(&std::fs::read(&out).unwrap());
    assert_eq!(events(&b).len(), 1, "only the change before the ALTER");
}

/// The sequence of the projection's cursor, read directly (0 when none yet).
fn proj_sequence(db: &Dbs) -> u128 {
    if !db.proj.exists() {
        return 0;
    }
    let c = open(&db.proj);
    c.query_row("SELECT sequence FROM _mooncdc_cursor", [], |r| {
        r.get::<_, String>(0)
    })
    .map(|s| s.parse().unwrap())
    .unwrap_or(0)
}

#[test]
fn follow_acknowledges_only_what_the_target_durably_holds() {
    let db = Dbs::new();
    db.src_sql("CREATE TABLE t(id INTEGER PRIMARY KEY, v TEXT)");
    db.init(&[]);
    let mut cap = Command::new(bin(CAPTURE))
        .args([
            "--source",
            &db.src_url(),
            "--follow",
            "--poll-ms",
            "50",
            "--ack-from-target",
            &db.proj_url(),
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::from(
            std::fs::File::create(db.path("cap.err")).unwrap(),
        ))
        .spawn()
        .unwrap();
    let pipe = cap.stdout.take().unwrap();
    let cap = Kill(cap);
    let apply = Kill(
        Command::new(bin(APPLY))
            .args(["--target", &db.proj_url()])
            .stdin(Stdio::from(pipe))
            .stderr(Stdio::from(
                std::fs::File::create(db.path("apply.err")).unwrap(),
            ))
            .spawn()
            .unwrap(),
    );
    let check = |db: &Dbs| -> (u128, u128) {
        let acked = db.status().acknowledged;
        let held = proj_sequence(db);
        assert!(
            acked <= held,
            "acknowledged {acked} is beyond what the target holds ({held})"
        );
        (acked, held)
    };
    let mut advanced = Vec::new();
    for round in 0..4 {
        db.src_sql(&format!(
            "INSERT INTO t VALUES ({0}, 'a'), ({1}, 'b'); UPDATE t SET v = 'c' WHERE id = {0};",
            round * 10,
            round * 10 + 1
        ));
        let hw = db.status().high_water;
        wait_for(
            20,
            "the target to take the changes and follow to acknowledge them",
            || {
                let (acked, held) = check(&db);
                acked == hw && held == hw
            },
        );
        advanced.push(hw);
    }
    assert_eq!(advanced, vec![3, 6, 9, 12]);
    assert_eq!(db.status().backlog, 0);
    // With the consumer gone nothing more is acknowledged.
    drop(apply);
    db.src_sql("INSERT INTO t VALUES (100, 'unconsumed');");
    std::thread::sleep(Duration::from_millis(300));
    let (acked, held) = check(&db);
    assert_eq!((acked, held), (12, 12));
    assert_eq!(db.status().high_water, 13);
    drop(cap);
    let st = db.status();
    assert_eq!((st.acknowledged, st.backlog), (12, 1), "{st:?}");
    // The change not consumed is still there to read.
    let (_, s) = db.catch_up();
    assert_eq!(s.applied, 1);
    db.audit_equal();
}

/// capture's `--max-line-bytes` counts a line as the readers do (without its
/// newline): a line of exactly N bytes passes both, one byte more fails both;
/// and a limit of 0 is a usage error, as on the other tools.
#[test]
fn capture_and_apply_agree_on_the_line_cap_boundary() {
    let db = Dbs::new();
    db.src_sql("CREATE TABLE t(id INTEGER PRIMARY KEY, b BLOB)");
    db.init(&[]);
    db.src_sql("INSERT INTO t VALUES (1, zeroblob(1500))");
    let (raw, _) = db.capture_ok(&[]);
    let text = String::from_utf8(raw).unwrap();
    let event = text.lines().find(|l| l.contains("\"event\"")).unwrap();
    let n = event.len().to_string();
    let less = (event.len() - 1).to_string();
    let (ok, _) = db.capture_ok(&["--max-line-bytes", &n]);
    expect(
        &db.apply(&ok, &["--max-line-bytes", &n]),
        0,
        "apply at exactly N",
    );
    expect(
        &exec(
            APPLY,
            &[
                "--target",
                &format!("sqlite:{}", db.path_str("x.db")),
                "--max-line-bytes",
                &less,
            ],
            Some(&ok),
        ),
        1,
        "apply under N",
    );
    let r = db.capture(&["--max-line-bytes", &less]);
    expect(&r, 1, "capture under N");
    assert!(
        r.stderr.contains("given by --max-line-bytes"),
        "{}",
        r.stderr
    );
    expect(
        &db.capture(&["--max-line-bytes", "0"]),
        2,
        "capture --max-line-bytes 0",
    );
}

/// `capture --follow | apply` stopped with SIGTERM to its process group
/// while changes flow: both exit 0 (capture ends the batch it was writing,
/// apply commits what it has), and a catch-up from the target's cursor then
/// brings the projection to the source's state: nothing lost, nothing twice.
#[test]
fn sigterm_to_a_following_pipeline_stops_both_cleanly() {
    use std::os::unix::process::CommandExt;
    let db = Dbs::new();
    db.src_sql("CREATE TABLE t(id INTEGER PRIMARY KEY, v TEXT)");
    db.init(&[]);
    db.snapshot_apply();
    let proj = db.proj_url();
    let after = db.target_cursor().unwrap().to_json();
    let mut capture = Command::new(bin(CAPTURE))
        .args([
            "--source",
            &db.src_url(),
            "--after",
            &after,
            "--follow",
            "--poll-ms",
            "20",
            "--ack-from-target",
            &proj,
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()
        .expect("start capture --follow");
    let pgid = capture.id() as i32;
    let apply = Command::new(bin(APPLY))
        .args(["--target", &proj, "-q"])
        .stdin(Stdio::from(capture.stdout.take().unwrap()))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .process_group(pgid)
        .spawn()
        .expect("start apply");
    // Changes flow while the signal comes.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = {
        let stop = stop.clone();
        let conn = db.src_conn();
        std::thread::spawn(move || {
            let mut i = 0i64;
            while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                i += 1;
                conn.execute_batch(&format!(
                    "BEGIN; INSERT INTO t VALUES ({i}, 'v{i}'); UPDATE t SET v = v || '!' WHERE id = {}; COMMIT;",
                    (i + 1) / 2
                ))
                .unwrap();
            }
            i
        })
    };
    std::thread::sleep(Duration::from_millis(800));
    let t0 = std::time::Instant::now();
    let killed = Command::new("kill")
        .args(["-TERM", "--", &format!("-{pgid}")])
        .status()
        .unwrap();
    assert!(killed.success());
    let out_c = capture.wait_with_output().unwrap();
    let out_a = apply.wait_with_output().unwrap();
    let took = t0.elapsed();
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let written = writer.join().unwrap();
    assert!(written > 10, "only {written} transactions were written");
    assert_eq!(
        out_c.status.code(),
        Some(0),
        "capture: {}",
        String::from_utf8_lossy(&out_c.stderr)
    );
    assert_eq!(
        out_a.status.code(),
        Some(0),
        "apply: {}",
        String::from_utf8_lossy(&out_a.stderr)
    );
    assert!(took < Duration::from_secs(10), "stopping took {took:?}");
    // Nothing lost, nothing twice: catch up from the target's cursor.
    db.catch_up();
    db.audit_equal();
    db.assert_same_rows(&["t"]);
}

/// The issue's silent-loss sequence: after `init`, the application adds a
/// column and writes a row using it. `read` refuses (nothing written) until
/// `upgrade`, which logs the current values of the added column, and then
/// the projection holds the value 7: nothing is lost.
#[test]
fn an_unmanaged_add_column_is_never_read_with_a_stale_column_list() {
    let db = Dbs::new();
    db.src_sql("CREATE TABLE t(id INTEGER PRIMARY KEY, v TEXT); INSERT INTO t VALUES (1, 'p');");
    db.init(&[]);
    db.snapshot_apply();
    db.src_sql("ALTER TABLE t ADD COLUMN c INT; INSERT INTO t VALUES (2, 'q', 7);");
    let after = db.target_cursor().unwrap().to_json();
    let r = db.capture(&["--after", &after]);
    expect(&r, 1, "read after an unmanaged ALTER");
    assert!(r.stdout.is_empty(), "nothing may be written");
    assert!(r.stderr.contains("upgrade"), "{}", r.stderr);
    // Following refuses the same way.
    let r = db.capture(&["--after", &after, "--follow"]);
    expect(&r, 1, "follow after an unmanaged ALTER");
    assert!(r.stdout.is_empty());
    expect(&db.capture_cmd("upgrade", &[]), 0, "upgrade");
    db.catch_up();
    db.audit_equal();
    db.assert_same_rows(&["t"]);
}

/// `capture migrate` runs the application's schema change and rebuilds
/// capture in one transaction: DROP COLUMN works (it fails under capture's
/// triggers otherwise), the change after it is captured with the new
/// columns, the projection converges; a migration that changes rows is
/// refused and nothing of it is kept.
#[test]
fn migrate_runs_schema_changes_with_capture_rebuilt() {
    let db = Dbs::new();
    db.src_sql(
        "CREATE TABLE t(id INTEGER PRIMARY KEY, a TEXT, b INT); INSERT INTO t VALUES (1, 'x', 5);",
    );
    db.init(&[]);
    db.snapshot_apply();
    // Without migrate, SQLite itself refuses: capture's triggers name b.
    let r = db.sqlite3("ALTER TABLE t DROP COLUMN b");
    assert_ne!(
        r.code,
        Some(0),
        "DROP COLUMN should fail under capture's triggers"
    );
    // A migration that changes rows is refused whole.
    let r = db.capture_cmd(
        "migrate",
        &["--", "ALTER TABLE t ADD COLUMN c INT; UPDATE t SET c = 1"],
    );
    expect(&r, 1, "migrate with a data change");
    assert!(r.stderr.contains("changed 1 rows"), "{}", r.stderr);
    let cols: i64 = db
        .src_conn()
        .query_row("SELECT count(*) FROM pragma_table_info('t')", [], |r| {
            r.get(0)
        })
        .unwrap();
    assert_eq!(cols, 3, "nothing of the refused migration was kept");
    expect(
        &db.capture_cmd("verify", &[]),
        0,
        "capture intact after the refusal",
    );
    // DROP COLUMN through migrate; capture goes on with the new columns.
    let r = db.capture_cmd("migrate", &["--", "ALTER TABLE t DROP COLUMN b"]);
    expect(&r, 0, "migrate DROP COLUMN");
    expect(
        &db.capture_cmd("verify", &[]),
        0,
        "capture current after migrate",
    );
    db.src_sql("INSERT INTO t VALUES (2, 'y'); UPDATE t SET a = 'z' WHERE id = 1;");
    let (raw, b) = db.capture_ok(&["--after", &db.target_cursor().unwrap().to_json()]);
    // The read starts before the migration: its header has the old columns
    // and a schema record drops b before the first change after it.
    let header_cols: Vec<String> = b[0].schemas.as_ref().unwrap()[0]
        .columns
        .iter()
        .map(|c| c.name.clone())
        .collect();
    assert_eq!(header_cols, ["id", "a", "b"]);
    assert_eq!(b[0].changes.len(), 1);
    assert_eq!(b[0].changes[0].0, 0);
    assert!(
        events(&b)
            .iter()
            .all(|e| e.after.as_ref().is_none_or(|r| r.len() == 2)),
        "events after the migration carry the new columns"
    );
    // The projection follows by itself.
    let r = db.apply(&raw, &[]);
    expect(&r, 0, "apply after the migration");
    let cols: Vec<String> = db
        .proj_conn()
        .prepare("SELECT name FROM pragma_table_info('t') ORDER BY cid")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .map(|r| r.unwrap())
        .collect();
    assert_eq!(cols, ["id", "a"]);
    db.audit_equal();
}

/// Renamed columns reach the stream as renames, never as a drop and an
/// add: through `migrate` (one statement at a time, a swap through a third
/// name included) and through `upgrade` after an unmanaged `RENAME COLUMN`
/// (the triggers SQLite rewrote name the new column). The projection renames
/// its columns and keeps their values; the audit is equal.
#[test]
fn renamed_columns_are_carried_as_renames() {
    let db = Dbs::new();
    db.src_sql(
        "CREATE TABLE t(id INTEGER PRIMARY KEY, a TEXT, b INT); INSERT INTO t VALUES (1, 'x', 5);",
    );
    db.init(&[]);
    db.snapshot_apply();
    let r = db.capture_cmd(
        "migrate",
        &[
            "--",
            "ALTER TABLE t RENAME COLUMN a TO tmp; ALTER TABLE t RENAME COLUMN b TO a; \
             ALTER TABLE t RENAME COLUMN tmp TO b; ALTER TABLE t ADD COLUMN c TEXT",
        ],
    );
    expect(&r, 0, "migrate with renames");
    db.src_sql("INSERT INTO t VALUES (2, 7, 'y', 'c2');");
    let (raw, b) = db.capture_ok(&["--after", &db.target_cursor().unwrap().to_json()]);
    let renamed: Vec<(String, String)> = b[0].changes[0]
        .1
        .renamed
        .iter()
        .map(|r| (r.from.clone(), r.to.clone()))
        .collect();
    assert_eq!(
        renamed,
        [
            ("a".to_string(), "b".to_string()),
            ("b".to_string(), "a".to_string())
        ]
    );
    expect(&db.apply(&raw, &[]), 0, "apply the swap");
    db.audit_equal();
    db.assert_same_rows(&["t"]);
    // An unmanaged rename: SQLite rewrites capture's triggers, upgrade reads
    // the new name from them.
    db.src_sql("ALTER TABLE t RENAME COLUMN c TO d; UPDATE t SET d = 'd1' WHERE id = 1;");
    let r = db.capture_cmd("upgrade", &[]);
    expect(&r, 0, "upgrade after a rename");
    assert!(
        r.stderr.contains("column \"c\" renamed to \"d\""),
        "{}",
        r.stderr
    );
    db.catch_up();
    db.audit_equal();
    db.assert_same_rows(&["t"]);
}

/// `--after ''` (what `$(mooncdc-apply cursor …)` gives for a target without
/// a cursor) is a usage error that says what to give, not a JSON parser's.
#[test]
fn an_empty_after_is_a_clear_usage_error() {
    let db = Dbs::new();
    db.src_sql("CREATE TABLE t(id INTEGER PRIMARY KEY)");
    db.init(&[]);
    let r = db.capture(&["--after", ""]);
    expect(&r, 2, "capture --after ''");
    assert!(
        r.stderr.contains("--after is empty") && !r.stderr.contains("EOF while parsing"),
        "{}",
        r.stderr
    );
    assert!(r.stdout.is_empty());
}

/// A schema record that ended a batch the target applied, merged with the
/// next batch and applied again (a replay overlapping the cursor): the
/// target, already in the new shape, applies the rest and changes nothing
/// twice.
#[test]
fn a_merged_replay_of_a_schema_change_the_target_holds_applies_once() {
    let db = Dbs::new();
    db.src_sql("CREATE TABLE t(id INTEGER PRIMARY KEY, a TEXT); INSERT INTO t VALUES (1, 'x');");
    db.init(&[]);
    db.snapshot_apply();
    let c0 = db.target_cursor().unwrap().to_json();
    expect(
        &db.capture_cmd("migrate", &["--", "ALTER TABLE t ADD COLUMN w INTEGER"]),
        0,
        "migrate",
    );
    let (b1, parsed) = db.capture_ok(&["--after", &c0]);
    assert!(
        parsed[0].events.is_empty() && parsed[0].changes.len() == 1,
        "a batch of one trailing record"
    );
    expect(&db.apply(&b1, &[]), 0, "apply the schema change");
    let c1 = db.target_cursor().unwrap().to_json();
    db.src_sql("INSERT INTO t VALUES (2, 'y', 5); UPDATE t SET w = 1 WHERE id = 1;");
    let (b2, _) = db.capture_ok(&["--after", &c1]);
    let f1 = db.path("b1.jsonl");
    let f2 = db.path("b2.jsonl");
    std::fs::write(&f1, &b1).unwrap();
    std::fs::write(&f2, &b2).unwrap();
    let m = exec(
        "mooncdc-merge",
        &[f1.to_str().unwrap(), f2.to_str().unwrap()],
        None,
    );
    expect(&m, 0, "merge");
    let r = db.apply(&m.stdout, &[]);
    expect(&r, 0, "apply the merged replay");
    db.audit_equal();
    db.assert_same_rows(&["t"]);
}

/// A migration that drops a column and adds it again under its name would
/// look like no change to capture (targets would keep the old values): it is
/// refused whole.
#[test]
fn a_migration_that_drops_and_adds_a_column_again_is_refused() {
    let db = Dbs::new();
    db.src_sql("CREATE TABLE t(id INTEGER PRIMARY KEY, a TEXT, b TEXT); INSERT INTO t VALUES (1, 'x', 'y');");
    db.init(&[]);
    let r = db.capture_cmd(
        "migrate",
        &[
            "--",
            "ALTER TABLE t DROP COLUMN b; ALTER TABLE t ADD COLUMN b TEXT",
        ],
    );
    expect(&r, 1, "drop and add again");
    assert!(
        r.stderr.contains("adds it again") && r.stderr.contains("two migrations"),
        "{}",
        r.stderr
    );
    let b: String = db
        .src_conn()
        .query_row("SELECT b FROM t WHERE id = 1", [], |r| r.get(0))
        .unwrap();
    assert_eq!(b, "y", "nothing of it was kept");
}

/// `verify` says 1 for drift only: a database that is not there, or a
/// server that does not answer, is trouble (2), as for `mooncdc-audit`.
#[test]
fn verify_exit_statuses_tell_drift_from_trouble() {
    let r = exec(
        CAPTURE,
        &["verify", "--source", "sqlite:/nonexistent/app.db"],
        None,
    );
    expect(&r, 2, "verify of a missing database");
    assert!(r.stderr.contains("does not exist"), "{}", r.stderr);
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let r = exec(
        CAPTURE,
        &[
            "verify",
            "--source",
            &format!("postgres://u:p@127.0.0.1:{port}/db"),
        ],
        None,
    );
    expect(&r, 2, "verify against a server that is down");
    assert!(r.stderr.contains("connection refused"), "{}", r.stderr);
    let db = Dbs::new();
    db.src_sql("CREATE TABLE t(id INTEGER PRIMARY KEY, a TEXT)");
    db.init(&[]);
    db.src_sql("ALTER TABLE t ADD COLUMN b TEXT");
    expect(&db.capture_cmd("verify", &[]), 1, "verify with drift");
}

/// `-q` everywhere: capture's subcommands say nothing but errors and
/// warnings; the stream tools accept it too.
#[test]
fn quiet_is_accepted_by_every_tool() {
    let db = Dbs::new();
    db.src_sql("CREATE TABLE t(id INTEGER PRIMARY KEY)");
    let r = exec(CAPTURE, &["init", "-q", "--source", &db.src_url()], None);
    expect(&r, 0, "init -q");
    assert!(r.stderr.is_empty(), "{}", r.stderr);
    assert!(r.stdout_str().starts_with("sqlite:"));
    let (raw, _) = db.capture_ok(&["-q"]);
    for tool in ["mooncdc-split", "mooncdc-merge", "mooncdc-compact"] {
        let r = exec(tool, &["-q"], Some(&raw));
        expect(&r, 0, tool);
        assert!(r.stderr.is_empty(), "{tool}: {}", r.stderr);
    }
}

/// `status` and `verify` speak JSON for programs: numbers as numbers, drift
/// as a list, the same exit statuses.
#[test]
fn status_and_verify_as_json() {
    let db = Dbs::new();
    db.src_sql("CREATE TABLE t(id INTEGER PRIMARY KEY); ");
    db.init(&[]);
    db.src_sql("INSERT INTO t VALUES (1), (2)");
    let r = db.capture_cmd("status", &["--output-format", "json"]);
    expect(&r, 0, "status json");
    let o: serde_json::Value = serde_json::from_str(r.stdout_str().trim()).unwrap();
    assert_eq!(o["high_water"], serde_json::json!(2));
    assert_eq!(o["backlog"], serde_json::json!(2));
    assert!(o["identity"].as_str().unwrap().starts_with("sqlite:"));
    let r = db.capture_cmd("verify", &["--output-format", "json"]);
    expect(&r, 0, "verify json");
    assert_eq!(r.stdout_str().trim(), r#"{"current":true,"drift":[]}"#);
    db.src_sql("ALTER TABLE t ADD COLUMN b TEXT");
    let r = db.capture_cmd("verify", &["--output-format", "json"]);
    expect(&r, 1, "verify json with drift");
    let o: serde_json::Value = serde_json::from_str(r.stdout_str().trim()).unwrap();
    assert_eq!(o["current"], serde_json::json!(false));
    assert!(o["drift"][0].as_str().unwrap().contains("\"t\""));
}

/// `mooncdc-apply -v`: one line per batch committed.
#[test]
fn apply_verbose_says_each_batch() {
    let db = Dbs::new();
    db.src_sql("CREATE TABLE t(id INTEGER PRIMARY KEY)");
    db.init(&[]);
    db.src_sql("INSERT INTO t VALUES (1), (2), (3)");
    let (raw, _) = db.capture_ok(&[]);
    let pieces = exec("mooncdc-split", &["--max-events", "1"], Some(&raw));
    expect(&pieces, 0, "split");
    let r = db.apply(&pieces.stdout, &["-v"]);
    expect(&r, 0, "apply -v");
    let lines: Vec<&str> = r
        .stderr
        .lines()
        .filter(|l| l.contains("batch committed through"))
        .collect();
    assert_eq!(lines.len(), 3, "{}", r.stderr);
    assert!(
        lines[0].contains("through 1: 1 event applied, in "),
        "{}",
        lines[0]
    );
    assert!(
        r.stderr.contains("3 batches, 3 events applied"),
        "{}",
        r.stderr
    );
}

/// The options of one kind of source are refused for the other, by name and
/// before anything is installed: `--ddl`, `--failover` and `--no-slot` are
/// PostgreSQL's, `migrate` is SQLite's.
#[test]
fn options_of_the_other_kind_of_source_are_refused_before_anything_is_done() {
    let db = Dbs::new();
    db.src_sql("CREATE TABLE a(id INTEGER PRIMARY KEY, v TEXT)");
    let url = db.src_url();
    for (flag, says) in [
        ("--ddl", "--ddl is for PostgreSQL sources"),
        ("--failover", "--failover is for PostgreSQL sources"),
        ("--no-slot", "--no-slot is for PostgreSQL sources"),
    ] {
        let r = exec(CAPTURE, &["init", "--source", &url, flag], None);
        expect(&r, 2, flag);
        assert!(r.stderr.contains(says), "{flag}: {}", r.stderr);
        let r = db.capture_cmd("status", &[]);
        expect(&r, 1, "status after a refused init");
        assert!(r.stderr.contains("not installed"), "{flag}: {}", r.stderr);
    }
    // migrate against a PostgreSQL URL: refused without connecting.
    let r = exec(
        CAPTURE,
        &[
            "migrate",
            "--source",
            "postgres://app@127.0.0.1:1/shop",
            "--",
            "ALTER TABLE a ADD COLUMN w TEXT",
        ],
        None,
    );
    expect(&r, 2, "migrate of a PostgreSQL source");
    assert!(
        r.stderr.contains("migrate is for SQLite sources"),
        "{}",
        r.stderr
    );
}
