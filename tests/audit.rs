//! mooncdc-audit end to end, through the real binaries (docs/TOOLS.md
//! "mooncdc-audit"; docs/FORMAT.md §13): exit 0 equal, 1 different, 2 trouble;
//! missing, extra and different rows reported with their keys in text and
//! JSONL; exact comparison (class, REAL bits, TEXT bytes) after the database
//! boundary's normalization; the warning when the target is behind.

mod common;

use common::sqlite::*;
use serde_json::{json, Value as J};

/// A source with `t(id, v TEXT, u)` (rows 1..=8) and `o(id, x)` (2 rows),
/// captured and applied to the projection.
fn synced() -> Dbs {
    let db = Dbs::new();
    db.src_sql(
        "CREATE TABLE t(id INTEGER PRIMARY KEY, v TEXT, u);
         CREATE TABLE o(id INTEGER PRIMARY KEY, x);",
    );
    db.init(&[]);
    db.src_sql(
        "INSERT INTO t VALUES (1, 'a', NULL), (2, 'b', x'00'), (3, 'c', 'c'), (4, 'd', 1),
                              (5, 'e', 0.1), (6, 'f', 'f'), (7, 'g', 0.0), (8, 'h', 1e300);
         INSERT INTO o VALUES (1, 'one'), (2, 'two');",
    );
    db.catch_up();
    db
}

/// Every line of a JSONL audit, parsed.
#[track_caller]
fn jsonl(out: &[u8]) -> Vec<J> {
    String::from_utf8(out.to_vec())
        .unwrap()
        .lines()
        .map(|l| {
            serde_json::from_str(l).unwrap_or_else(|e| panic!("audit line is not JSON: {e}\n{l}"))
        })
        .collect()
}

fn kind(l: &J) -> &str {
    l["kind"]
        .as_str()
        .unwrap_or_else(|| panic!("line without kind: {l}"))
}

#[test]
fn equal_is_exit_0_in_both_formats() {
    let db = synced();
    let cur = db.target_cursor().unwrap();
    let r = db.audit(&[]);
    expect(&r, 0, "audit of equal databases");
    let text = r.stdout_str();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(
        lines,
        vec![
            "table \"o\": 2 rows compared, 0 missing, 0 extra, 0 different",
            "table \"t\": 8 rows compared, 0 missing, 0 extra, 0 different",
            &format!("source cursor: {}", cur.to_json()),
            &format!("target cursor: {}", cur.to_json()),
            "equal",
        ],
        "audit text:\n{text}"
    );
    let r = db.audit(&["--format", "jsonl"]);
    expect(&r, 0, "audit --format jsonl of equal databases");
    let l = jsonl(&r.stdout);
    let cj: J = serde_json::from_str(&cur.to_json()).unwrap();
    assert_eq!(
        l,
        vec![
            json!({"kind":"table","table":"o","compared":2,"missing":0,"extra":0,"different":0,"columns_differ":false}),
            json!({"kind":"table","table":"t","compared":8,"missing":0,"extra":0,"different":0,"columns_differ":false}),
            json!({"kind":"verdict","equal":true,"source_cursor":cj,"target_cursor":cj,"target_behind":false}),
        ]
    );
}

#[test]
fn a_tampered_target_is_reported_with_keys_in_text_and_jsonl() {
    let db = synced();
    db.proj_sql(
        "UPDATE t SET v = 'x' WHERE id = 2;
         DELETE FROM t WHERE id = 3;
         INSERT INTO t VALUES (9, 'extra', NULL);
         UPDATE t SET u = 1.0 WHERE id = 4;
         UPDATE t SET u = 0.10000000000000002 WHERE id = 5;
         UPDATE t SET v = char(65279) || v WHERE id = 6;
         UPDATE t SET u = -0.0 WHERE id = 7;",
    );
    // Precondition: the projection holds what was written (REAL 1, the next REAL after 0.1, -0).
    let (c4, b5, b7): (String, f64, f64) = db
        .proj_conn()
        .query_row(
            "SELECT (SELECT typeof(u) FROM t WHERE id = 4), (SELECT u FROM t WHERE id = 5), (SELECT u FROM t WHERE id = 7)",
            [],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )
        .unwrap();
    assert_eq!(c4, "real");
    assert_eq!(b5.to_bits(), 0.1f64.to_bits() + 1);
    assert_eq!(b7.to_bits(), (-0.0f64).to_bits());

    let r = db.audit(&[]);
    expect(&r, 1, "audit of a tampered target");
    let text = r.stdout_str();
    let k = |n: i64| format!("key [[\"integer\",\"{n}\"]]");
    for want in [
        format!("different: table \"t\" {}\n  source: [[\"integer\",\"2\"],[\"text\",\"b\"],[\"blob\",\"00\"]]\n  target: [[\"integer\",\"2\"],[\"text\",\"x\"],[\"blob\",\"00\"]]\n", k(2)),
        format!("missing in target: table \"t\" {}\n  source: [[\"integer\",\"3\"],[\"text\",\"c\"],[\"text\",\"c\"]]\n", k(3)),
        format!("different: table \"t\" {}\n", k(4)),
        format!("different: table \"t\" {}\n", k(5)),
        format!("different: table \"t\" {}\n", k(6)),
        format!("extra in target: table \"t\" {}\n  target: [[\"integer\",\"9\"],[\"text\",\"extra\"],[\"null\"]]\n", k(9)),
        "table \"o\": 2 rows compared, 0 missing, 0 extra, 0 different\n".to_string(),
        "table \"t\": 8 rows compared, 1 missing, 1 extra, 4 different\n".to_string(),
    ] {
        assert!(text.contains(&want), "audit text lacks\n{want}\n=== got ===\n{text}");
    }
    assert!(
        !text.contains(&k(7)),
        "-0 and +0 are equal at the boundary:\n{text}"
    );
    assert_eq!(text.lines().last(), Some("different"));

    let r = db.audit(&["--format", "jsonl"]);
    expect(&r, 1, "audit --format jsonl of a tampered target");
    let l = jsonl(&r.stdout);
    let findings: Vec<(String, String, J)> = l
        .iter()
        .filter(|x| matches!(kind(x), "missing" | "extra" | "different"))
        .map(|x| {
            (
                kind(x).to_string(),
                x["table"].as_str().unwrap().to_string(),
                x["key"].clone(),
            )
        })
        .collect();
    let key = |n: i64| json!([["integer", n.to_string()]]);
    let f = |k: &str, n: i64| (k.to_string(), "t".to_string(), key(n));
    assert_eq!(
        findings,
        vec![
            f("different", 2),
            f("missing", 3),
            f("different", 4),
            f("different", 5),
            f("different", 6),
            f("extra", 9),
        ],
        "findings in key order"
    );
    let by_key = |n: i64| l.iter().find(|x| x["key"] == key(n)).unwrap();
    assert_eq!(
        by_key(2)["source"],
        json!([["integer", "2"], ["text", "b"], ["blob", "00"]])
    );
    assert_eq!(
        by_key(2)["target"],
        json!([["integer", "2"], ["text", "x"], ["blob", "00"]])
    );
    assert_eq!(by_key(3)["source"][1], json!(["text", "c"]));
    assert!(by_key(3).get("target").is_none());
    assert!(by_key(9).get("source").is_none());
    assert_eq!(by_key(9)["target"][1], json!(["text", "extra"]));
    assert_eq!(
        (
            by_key(4)["source"][2].clone(),
            by_key(4)["target"][2].clone()
        ),
        (json!(["integer", "1"]), json!(["real", "1", "0"]))
    );
    assert_eq!(by_key(6)["target"][1], json!(["text", "\u{FEFF}f"]));
    let t = l
        .iter()
        .find(|x| kind(x) == "table" && x["table"] == "t")
        .unwrap();
    assert_eq!(
        (&t["compared"], &t["missing"], &t["extra"], &t["different"]),
        (&json!(8), &json!(1), &json!(1), &json!(4))
    );
    let v = l.last().unwrap();
    assert_eq!((kind(v), &v["equal"]), ("verdict", &json!(false)));

    // Only the untouched table: equal.
    expect(&db.audit(&["--table", "o"]), 0, "audit --table o");
    expect(&db.audit(&["--table", "t"]), 1, "audit --table t");
    expect(
        &db.audit(&["--table", "nope"]),
        2,
        "audit --table of an unknown table",
    );
}

#[test]
fn trouble_is_exit_2() {
    let db = synced();
    let src = db.src_url();
    let run = |target: &str| exec(AUDIT, &["--source", &src, "--target", target], None);
    let missing = db.path("missing.db");
    let r = run(&format!("sqlite:{}", missing.display()));
    expect(&r, 2, "audit of a target that does not exist");
    assert!(r.stderr.contains("missing.db"), "{}", r.stderr);
    assert!(!missing.exists(), "audit must not create the target");
    let garbage = db.path_str("garbage.db");
    std::fs::write(
        &garbage,
        "this is not a database, not at all; just text\n".repeat(100),
    )
    .unwrap();
    expect(
        &run(&format!("sqlite:{garbage}")),
        2,
        "audit of a file that is not a database",
    );
    expect(
        &run(&format!("sqlite:{}", db.dir.path().display())),
        2,
        "audit of a folder",
    );
    let r = exec(
        AUDIT,
        &[
            "--source",
            &format!("sqlite:{}", missing.display()),
            "--target",
            &db.proj_url(),
        ],
        None,
    );
    expect(&r, 2, "audit of a source that does not exist");
    expect(
        &exec(AUDIT, &["--source", &src], None),
        2,
        "audit without --target",
    );
    // The good pair still audits equal.
    db.audit_equal();
}

#[test]
fn a_target_behind_the_high_water_is_warned_about() {
    let db = synced();
    const WARNING: &str = "warning: the target is behind";
    let r = db.audit(&[]);
    assert!(!r.stdout_str().contains(WARNING));

    // Changes not yet applied: different, with the warning.
    db.src_sql("INSERT INTO t VALUES (100, 'new', NULL)");
    let r = db.audit(&[]);
    expect(&r, 1, "audit of a target behind");
    let text = r.stdout_str();
    assert!(text.contains(WARNING), "{text}");
    assert!(
        text.contains("missing in target: table \"t\" key [[\"integer\",\"100\"]]"),
        "{text}"
    );
    let r = db.audit(&["--format", "jsonl"]);
    let l = jsonl(&r.stdout);
    let v = l.last().unwrap();
    assert_eq!(
        (&v["equal"], &v["target_behind"]),
        (&json!(false), &json!(true)),
        "{v}"
    );
    assert_eq!(v["target_cursor"]["sequence"], json!("10"));
    assert_eq!(v["source_cursor"]["sequence"], json!("11"));

    // Caught up: no warning.
    db.catch_up();
    let r = db.audit(&[]);
    expect(&r, 0, "audit after catch-up");
    assert!(!r.stdout_str().contains(WARNING));

    // Changes that cancel out: equal, but still behind. The text says
    // nothing of it (a warning would only cast doubt on "equal"; a
    // PostgreSQL server's own WAL puts every caught-up target "behind");
    // the JSON verdict still tells.
    db.src_sql("INSERT INTO o VALUES (3, 'three'); DELETE FROM o WHERE id = 3;");
    let r = db.audit(&[]);
    expect(&r, 0, "audit of an equal target behind");
    assert!(!r.stdout_str().contains(WARNING), "{}", r.stdout_str());
    let r = db.audit(&["--format", "jsonl"]);
    let v = jsonl(&r.stdout).pop().unwrap();
    assert_eq!(
        (&v["equal"], &v["target_behind"]),
        (&json!(true), &json!(true))
    );
}

/// A table whose columns differ between source and target (here: a column
/// added to the source and captured by `upgrade`, not yet applied) is a
/// difference, exit 1, reported in both formats; its rows are not compared.
#[test]
fn columns_that_differ_are_a_difference() {
    let db = synced();
    db.src_sql("ALTER TABLE o ADD COLUMN y TEXT DEFAULT 'new'");
    let up = exec(CAPTURE, &["upgrade", "--source", &db.src_url()], None);
    expect(&up, 0, "upgrade");
    let r = db.audit(&[]);
    expect(&r, 1, "audit with a column the target lacks");
    let text = String::from_utf8_lossy(&r.stdout);
    assert!(text.contains("schema differs: table \"o\""), "{text}");
    assert!(text.contains("missing in the target: [\"y\"]"), "{text}");
    assert!(text.lines().any(|l| l == "different"), "{text}");
    let r = db.audit(&["--format", "jsonl"]);
    expect(&r, 1, "audit --format jsonl with a column the target lacks");
    let l = jsonl(&r.stdout);
    assert!(
        l.iter().any(|x| kind(x) == "schema" && x["table"] == "o"),
        "{l:?}"
    );
    assert!(
        l.iter()
            .any(|x| kind(x) == "verdict" && x["equal"] == false),
        "{l:?}"
    );
    // Once the change is applied, the projection has the column and the values.
    db.catch_up();
    db.audit_equal();
    // A column renamed in the target only: named as such, apart from rows.
    db.proj_sql("ALTER TABLE o RENAME COLUMN y TO z");
    let r = db.audit(&[]);
    expect(&r, 1, "audit of a renamed target column");
    let text = String::from_utf8_lossy(&r.stdout);
    assert!(
        text.contains("missing in the target: [\"y\"]")
            && text.contains("only in the target: [\"z\"]")
            && text.contains("perhaps column \"z\" was renamed to \"y\""),
        "{text}"
    );
}

/// One flag vocabulary: `--output-format` works for audit as for the other
/// tools, and counts in JSON are numbers jq can compare.
#[test]
fn audit_takes_output_format_and_counts_are_numbers() {
    let db = synced();
    let r = db.audit(&["--output-format", "jsonl"]);
    expect(&r, 0, "audit --output-format jsonl");
    let l = jsonl(&r.stdout);
    let t = l.iter().find(|x| kind(x) == "table").unwrap();
    assert!(t["compared"].is_u64() && t["missing"].is_u64(), "{t}");
}
