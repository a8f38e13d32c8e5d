//! The PostgreSQL target (`mooncdc-apply --target postgres://…`): SQLite →
//! PostgreSQL and PostgreSQL → PostgreSQL through the real tools, each ending
//! with `mooncdc-audit` and an independent oracle in SQL (`float8send`,
//! `convert_to`, `encode`) against the source's own values; replays; values
//! the target cannot hold refused with the cursor unchanged; SIGKILL during
//! a large apply; key swaps and composite keys; connection errors.

mod common;

use common::pg::{self, PgDb};
use common::sqlite::{exec, expect, pipeline, seed, shell_quote, Dbs, Rng, Summary, APPLY, AUDIT};
use rusqlite::params;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn target(name: &str) -> PgDb {
    pg::db(name)
}

#[track_caller]
fn apply_ok(url: &str, input: &[u8]) -> Summary {
    let r = exec(APPLY, &["--target", url, "-q"], Some(input));
    expect(&r, 0, "apply to PostgreSQL");
    Summary::parse(&r.stderr)
}

#[track_caller]
fn audit_equal(src: &str, tgt: &str, extra: &[&str]) {
    let mut args = vec!["--source", src, "--target", tgt];
    args.extend_from_slice(extra);
    let r = exec(AUDIT, &args, None);
    expect(&r, 0, "audit should say equal");
    assert!(
        r.stdout_str().trim_end().ends_with("equal"),
        "{}",
        r.stdout_str()
    );
}

fn cursor_of(url: &str) -> String {
    exec(APPLY, &["cursor", "--target", url], None)
        .stdout_str()
        .trim()
        .to_string()
}

/// Every value of a SQLite table, exactly: REAL as its bits, TEXT and BLOB
/// as hex of their bytes.
fn sqlite_oracle(db: &Dbs, table: &str) -> Vec<String> {
    let c = db.src_conn();
    let mut st = c
        .prepare(&format!(
            "SELECT id, i, r, hex(CAST(t AS BLOB)), hex(b), typeof(r) FROM {table} ORDER BY id"
        ))
        .unwrap();
    st.query_map([], |r| {
        let real: Option<f64> = r.get(2)?;
        Ok(format!(
            "{}|{}|{}|{}|{}",
            r.get::<_, i64>(0)?,
            r.get::<_, Option<i64>>(1)?
                .map_or("null".into(), |v| v.to_string()),
            real.map_or("null".into(), |x| format!("{:016x}", x.to_bits())),
            r.get::<_, Option<String>>(3)?
                .map_or("null".into(), |v| v.to_lowercase()),
            r.get::<_, Option<String>>(4)?
                .map_or("null".into(), |v| v.to_lowercase()),
        ))
    })
    .unwrap()
    .map(|r| r.unwrap())
    .collect()
}

/// The same from PostgreSQL, independently of MoonCDC's reading.
fn pg_oracle(db: &PgDb, table: &str) -> Vec<String> {
    db.session()
        .query(&format!(
            "SELECT id, i, encode(float8send(r), 'hex'), encode(convert_to(t, 'UTF8'), 'hex'), encode(b, 'hex') FROM {table} ORDER BY id"
        ))
        .into_iter()
        .map(|r| {
            let f = |i: usize| r[i].clone().unwrap_or_else(|| "null".into());
            let real = r[2].as_ref().map_or("null".to_string(), |h| {
                // -0 is normalised at every database boundary.
                if h == "8000000000000000" {
                    "0000000000000000".to_string()
                } else {
                    h.clone()
                }
            });
            format!("{}|{}|{}|{}|{}", f(0), f(1), real, f(3), f(4))
        })
        .collect()
}

fn no_nul(rng: &mut Rng) -> String {
    rng.text().replace('\0', "")
}

#[test]
fn sqlite_to_postgres_every_value_exact_replays_and_refusals() {
    let db = Dbs::new();
    db.src_sql(
        "CREATE TABLE v(id INTEGER PRIMARY KEY, i INTEGER, r REAL, t TEXT, b BLOB); \
         CREATE TABLE pair(a INTEGER NOT NULL, b TEXT NOT NULL, x TEXT, PRIMARY KEY (a, b))",
    );
    db.init(&[]);
    let mut rng = Rng::new(seed("sqlite_to_postgres"));
    {
        let c = db.src_conn();
        for id in 1..=300i64 {
            let i = match id {
                1 => Some(i64::MIN),
                2 => Some(i64::MAX),
                3 => None,
                _ => Some(rng.next() as i64),
            };
            let r = match id {
                4 => Some(-0.0),
                5 => Some(f64::from_bits(1)),
                6 => None,
                _ => Some(rng.real()),
            };
            c.execute(
                "INSERT INTO v VALUES (?1, ?2, ?3, ?4, ?5)",
                params![id, i, r, no_nul(&mut rng), rng.blob()],
            )
            .unwrap();
        }
        c.execute_batch("INSERT INTO pair VALUES (1, 'a', 'x'), (1, 'b', 'y'), (2, 'a', 'z')")
            .unwrap();
    }
    let tgt = target("from_sqlite");
    let url = tgt.url();
    let r = pipeline(&format!(
        "{{snapshot}} -q --source {} | {{apply}} --target {} -q",
        shell_quote(&db.src_url()),
        shell_quote(&url)
    ));
    expect(&r, 0, "snapshot | apply");
    // Changes: updates with random values, deletes, a key swap through a
    // free key and a composite key change, all in one source transaction.
    {
        let c = db.src_conn();
        c.execute_batch("BEGIN").unwrap();
        for id in (10..300i64).step_by(7) {
            c.execute(
                "UPDATE v SET r = ?2, t = ?3, b = ?4 WHERE id = ?1",
                params![id, rng.real(), no_nul(&mut rng), rng.blob()],
            )
            .unwrap();
        }
        c.execute_batch(
            "DELETE FROM v WHERE id % 11 = 0; \
             UPDATE v SET id = 1000 WHERE id = 1; UPDATE v SET id = 1 WHERE id = 2; UPDATE v SET id = 2 WHERE id = 1000; \
             UPDATE pair SET b = 'c' WHERE a = 1 AND b = 'a'; COMMIT",
        )
        .unwrap();
    }
    let step = format!(
        "{{capture}} --source {src} --after \"$({{apply}} cursor --target {url})\" | {{compact}} | {{apply}} --target {url}",
        src = shell_quote(&db.src_url()),
        url = shell_quote(&url)
    );
    let r = pipeline(&step);
    expect(&r, 0, "capture | compact | apply");
    audit_equal(&db.src_url(), &url, &[]);
    assert_eq!(
        sqlite_oracle(&db, "v"),
        pg_oracle(&tgt, "v"),
        "every value, exactly"
    );
    let pairs = tgt
        .session()
        .query("SELECT a, b, x FROM pair ORDER BY a, b");
    assert_eq!(pairs.len(), 3);
    // Replayed twice: nothing applied, nothing changed.
    let (all, _) = db.capture_ok(&[
        "--after",
        &format!(
            "{{\"source\":\"{}\",\"sequence\":\"0\"}}",
            db.status().identity
        ),
    ]);
    for _ in 0..2 {
        let s = apply_ok(&url, &all);
        assert_eq!(s.applied, 0, "a replay applies nothing");
    }
    audit_equal(&db.src_url(), &url, &[]);

    // TEXT with NUL, and a value whose class does not fit its column: each
    // refused naming table, column and sequence; nothing applied.
    let held = cursor_of(&url);
    db.src_sql("INSERT INTO v VALUES (5000, 1, 1.5, 'a' || char(0) || 'b', NULL)");
    let (raw, _) = db.capture_ok(&["--after", &held]);
    let r = exec(APPLY, &["--target", &url], Some(&raw));
    expect(&r, 1, "TEXT with NUL");
    assert!(
        r.stderr.contains("NUL") && r.stderr.contains("\"t\"") && r.stderr.contains("event"),
        "{}",
        r.stderr
    );
    assert_eq!(cursor_of(&url), held, "cursor unchanged");
    // (Compacted, the NUL row's insert and delete vanish.)
    db.src_sql("DELETE FROM v WHERE id = 5000; INSERT INTO v VALUES (5001, 'not a number', 1.5, 't', NULL)");
    let (raw, _) = db.capture_ok(&["--after", &held]);
    let compacted = exec(common::sqlite::COMPACT, &[], Some(&raw));
    expect(&compacted, 0, "compact");
    let r = exec(APPLY, &["--target", &url], Some(&compacted.stdout));
    expect(&r, 1, "a TEXT value in an INTEGER column");
    assert!(
        r.stderr.contains("\"i\"") && r.stderr.contains("bigint"),
        "{}",
        r.stderr
    );
    assert_eq!(cursor_of(&url), held, "cursor unchanged");
    assert_eq!(
        tgt.session()
            .value("SELECT count(*) FROM v WHERE id >= 5000"),
        "0"
    );
}

#[test]
fn postgres_to_postgres_snapshot_changes_truncate_and_schema_change() {
    let src = pg::db("pgpg_src");
    let s = src.session();
    s.exec(
        "CREATE TYPE mood AS ENUM ('sad', 'ok', 'happy'); \
         CREATE TABLE public.items (id bigint PRIMARY KEY, qty integer, price numeric(10,2), f8 double precision, \
         f4 real, ok boolean, data bytea, name text, at timestamptz, doc jsonb, tags text[], m mood); \
         CREATE TABLE public.kv (k1 int, k2 text, v text, PRIMARY KEY (k1, k2))",
    );
    s.exec(
        "INSERT INTO items VALUES \
         (1, 2147483647, 12.30, 5e-324, 1.4e-45, true, '\\x00ff', E'\\uFEFFa😀', '2024-01-02 03:04:05+00', '{\"a\": [1, 2.50]}', '{x,\"y z\"}', 'ok'), \
         (2, -2147483648, -0.05, -1.7976931348623157e308, 3.4028235e38, false, '', '', 'infinity', 'null', '{}', 'sad'), \
         (3, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL); \
         INSERT INTO kv VALUES (1, 'a', 'x'), (1, 'b', 'y')",
    );
    let slot = "s_pgpg";
    pg::init_capture(&src.url(), slot, &["public.items", "public.kv"]);
    let tgt = target("pgpg_tgt");
    let url = tgt.url();
    let r = pg::snapshot_into(&src.url(), slot, &url);
    expect(&r, 0, "snapshot | apply");
    // Types kept; the enum the target lacks became text.
    let types = tgt.session().query(
        "SELECT column_name, data_type FROM information_schema.columns WHERE table_name = 'items' ORDER BY ordinal_position",
    );
    let ty = |c: &str| {
        types.iter().find(|r| r[0].as_deref() == Some(c)).unwrap()[1]
            .clone()
            .unwrap()
    };
    assert_eq!(ty("price"), "numeric");
    assert_eq!(ty("at"), "timestamp with time zone");
    assert_eq!(ty("doc"), "jsonb");
    assert_eq!(ty("tags"), "ARRAY");
    assert_eq!(ty("m"), "text");
    s.exec(
        "BEGIN; UPDATE items SET qty = qty - 1, f8 = -2.2250738585072014e-308, doc = '{\"b\": 1}' WHERE id = 1; \
         UPDATE items SET id = 20 WHERE id = 2; DELETE FROM items WHERE id = 3; \
         INSERT INTO items (id, name, m) VALUES (4, 'four', 'happy'); \
         UPDATE kv SET k2 = 'c' WHERE k1 = 1 AND k2 = 'a'; UPDATE kv SET k2 = 'a' WHERE k1 = 1 AND k2 = 'b'; \
         UPDATE kv SET k2 = 'b' WHERE k1 = 1 AND k2 = 'c'; COMMIT",
    );
    s.exec("BEGIN; INSERT INTO kv VALUES (2, 'x', 'gone'); TRUNCATE kv; INSERT INTO kv VALUES (3, 'z', 'after'); COMMIT");
    s.exec("ALTER TABLE items ADD COLUMN extra text; UPDATE items SET extra = 'e' WHERE id = 1");
    s.exec("ALTER TABLE items DROP COLUMN f4; ALTER TABLE items ALTER COLUMN qty TYPE bigint; UPDATE items SET qty = 5000000000 WHERE id = 4");
    let r = pipeline(&format!(
        "{{capture}} --source {src} --slot {slot} --after \"$({{apply}} cursor --target {url})\" | {{compact}} | {{apply}} --target {url}",
        src = shell_quote(&src.url()),
        url = shell_quote(&url)
    ));
    expect(&r, 0, "capture | compact | apply");
    audit_equal(&src.url(), &url, &["--slot", slot]);
    // The oracle: every value's text form on both sides.
    let dump = |d: &PgDb, q: &str| d.session().query(q);
    for q in [
        "SELECT id::text, qty::text, price::text, encode(float8send(f8), 'hex'), ok::text, encode(data, 'hex'), \
         encode(convert_to(name, 'UTF8'), 'hex'), at::text, doc::text, tags::text, m::text, extra FROM items ORDER BY id",
        "SELECT k1::text, k2, v FROM kv ORDER BY k1, k2",
    ] {
        assert_eq!(dump(&src, q), dump(&tgt, q), "{q}");
    }
    assert_eq!(tgt.session().value("SELECT count(*) FROM kv"), "1");
}

#[test]
fn sigkill_during_a_large_apply_then_rerun_loses_and_duplicates_nothing() {
    let db = Dbs::new();
    db.src_sql("CREATE TABLE big(id INTEGER PRIMARY KEY, v TEXT, n INTEGER)");
    db.init(&[]);
    {
        let c = db.src_conn();
        c.execute_batch("BEGIN").unwrap();
        for i in 0..60_000i64 {
            c.execute(
                "INSERT INTO big VALUES (?1, ?2, ?3)",
                params![i, format!("row {i}"), i * 7],
            )
            .unwrap();
        }
        c.execute_batch(
            "UPDATE big SET n = n + 1 WHERE id % 3 = 0; DELETE FROM big WHERE id % 5 = 0; COMMIT",
        )
        .unwrap();
    }
    let tgt = target("killed");
    let url = tgt.url();
    let (raw, _) = db.capture_ok(&["--max-events", "20000"]);
    let (rest, _) = {
        let after = common::batches(&raw).last().unwrap().end.to_json();
        db.capture_ok(&["--after", &after])
    };
    let mut stream = raw.clone();
    stream.extend_from_slice(&rest);
    let file = db.path("stream.jsonl");
    std::fs::write(&file, &stream).unwrap();
    // Killed at several moments; each re-run goes on from the cursor.
    for delay in [150u64, 400, 900] {
        let mut child = Command::new(common::sqlite::bin(APPLY))
            .args(["--target", &url, "-q", file.to_str().unwrap()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(delay));
        let _ = child.kill();
        let _ = child.wait();
    }
    let t0 = Instant::now();
    let r = exec(APPLY, &["--target", &url, file.to_str().unwrap()], None);
    expect(&r, 0, "apply after the kills");
    eprintln!("final apply took {:?}", t0.elapsed());
    let want: i64 = db
        .src_conn()
        .query_row("SELECT count(*) FROM big", [], |r| r.get(0))
        .unwrap();
    assert_eq!(
        tgt.session().value("SELECT count(*) FROM big"),
        want.to_string()
    );
    audit_equal(&db.src_url(), &url, &[]);
}

/// Apply holds a batch in bounded memory (docs/OPERATIONS.md, "Apply's
/// memory"): the PostgreSQL target sends a batch's statements as they
/// come, at most 512 or 16 MiB of values in flight, in the batch's one
/// transaction, so a batch ten times as large takes no more memory.
/// Measured on the debug binary the tests run, through GNU time
/// (tests/common/memory.rs).
#[test]
fn a_large_batch_is_applied_in_bounded_memory() {
    use common::memory::{self, Shape};
    let mut peaks = Vec::new();
    for n in [memory::SMALL, memory::LARGE] {
        let tgt = target(&format!("memory_{n}"));
        let url = tgt.url();
        let (mib, _) = memory::apply_peak_mib(&url, &[], common::SRC, n);
        peaks.push(mib);
        let s = Shape::of(n);
        assert_eq!(
            tgt.session()
                .value("SELECT count(*) || ' ' || sum(c) FROM t"),
            format!("{} {}", s.rows(), s.sum_c()),
            "{n} changes"
        );
        assert_eq!(
            cursor_of(&url),
            format!(r#"{{"source":"{}","sequence":"{n}"}}"#, common::SRC)
        );
    }
    memory::assert_bounded(
        "PostgreSQL",
        peaks[0],
        peaks[1],
        memory::LARGE / memory::SMALL,
        memory::PG_BOUND_MIB,
        memory::SLACK_MIB,
    );
}

#[test]
fn wrong_password_and_unreachable_server_are_clear_errors() {
    let tgt = target("conn_errors");
    let bad = tgt
        .url()
        .replacen(&pg::url_encode(pg::PASSWORD), "wrong", 1);
    assert_ne!(bad, tgt.url());
    let r = exec(APPLY, &["cursor", "--target", &bad], None);
    assert_ne!(r.code, Some(0));
    assert!(
        r.stderr.contains("password authentication failed"),
        "{}",
        r.stderr
    );
    assert!(
        !r.stderr.contains("wrong"),
        "no password in messages: {}",
        r.stderr
    );
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let r = exec(
        APPLY,
        &[
            "cursor",
            "--target",
            &format!("postgres://u:p@127.0.0.1:{port}/x"),
        ],
        None,
    );
    assert_ne!(r.code, Some(0));
    assert!(
        r.stderr.contains("cannot connect")
            && r.stderr
                .contains("connection refused: is the server running"),
        "{}",
        r.stderr
    );
    assert!(!r.stderr.contains("os error"), "{}", r.stderr);
}

/// A snapshot cut short, or with a value the target cannot hold halfway
/// through, loads nothing: no table, no rows, no cursor.
#[test]
fn a_bad_snapshot_loads_nothing() {
    let db = Dbs::new();
    db.src_sql("CREATE TABLE s(id INTEGER PRIMARY KEY, t TEXT)");
    {
        let c = db.src_conn();
        for i in 0..5000i64 {
            c.execute(
                "INSERT INTO s VALUES (?1, ?2)",
                params![i, format!("row {i}")],
            )
            .unwrap();
        }
    }
    db.init(&[]);
    let snap = exec(SNAPSHOT_BIN, &["--source", &db.src_url(), "-q"], None);
    expect(&snap, 0, "snapshot");
    let text = snap.stdout_str().to_string();
    let tgt = target("bad_snapshot");
    let url = tgt.url();
    let cut: String = text.lines().take(4000).map(|l| format!("{l}\n")).collect();
    let r = exec(APPLY, &["--target", &url], Some(cut.as_bytes()));
    expect(&r, 1, "a snapshot cut short");
    let nul = text.replacen("\"row 4000\"", "\"row\\u0000 4000\"", 1);
    assert_ne!(nul, text);
    let r = exec(APPLY, &["--target", &url], Some(nul.as_bytes()));
    expect(&r, 1, "a snapshot with NUL in TEXT");
    assert!(r.stderr.contains("NUL"), "{}", r.stderr);
    assert_eq!(
        tgt.session()
            .value("SELECT count(*) FROM pg_tables WHERE tablename = 's'"),
        "0"
    );
    assert_eq!(cursor_of(&url), "");
    // The whole snapshot loads.
    apply_ok(&url, text.as_bytes());
    assert_eq!(tgt.session().value("SELECT count(*) FROM s"), "5000");
    audit_equal(&db.src_url(), &url, &[]);
}

const SNAPSHOT_BIN: &str = "mooncdc-snapshot";

fn apply_with(url: &str, input: &str, extra: &[&str]) -> common::Run {
    let mut args = vec!["--target", url, "-q"];
    args.extend_from_slice(extra);
    exec(APPLY, &args, Some(input.as_bytes()))
}

/// Keys moved straight through each other, as a source with a deferrable key
/// writes a swap: applied as such, with and without `--on-conflict
/// overwrite`, also for a table that is only its key, and with a TRUNCATE
/// later in the same batch.
#[test]
fn direct_key_swaps_apply_with_and_without_overwrite() {
    use common::{ins, kv_schema, row, schema, trunc, upd, Spec};
    use serde_json::json;
    for (name, extra) in [
        ("swap", &[][..]),
        ("swap_over", &["--on-conflict", "overwrite"][..]),
    ] {
        let tgt = target(name);
        let url = tgt.url();
        let b1 = Spec::new(0, 2)
            .schemas(vec![
                kv_schema("t"),
                schema("k", &[("id", "INTEGER", false)], &["id"]),
            ])
            .events(vec![
                ins(1, "t", row(1, "a")),
                ins(2, "t", row(2, "b")),
                ins(3, "k", json!([["integer", "1"]])),
                ins(4, "k", json!([["integer", "2"]])),
            ])
            .high_water(4);
        let b1 = Spec { end: 4, ..b1 };
        expect(&apply_with(&url, &b1.jsonl(), extra), 0, "rows");
        let b2 = Spec::new(4, 9)
            .schemas(vec![
                kv_schema("t"),
                schema("k", &[("id", "INTEGER", false)], &["id"]),
            ])
            .events(vec![
                upd(5, "t", row(1, "a"), row(2, "a")),
                upd(6, "t", row(2, "b"), row(1, "b")),
                upd(7, "k", json!([["integer", "1"]]), json!([["integer", "2"]])),
                upd(8, "k", json!([["integer", "2"]]), json!([["integer", "1"]])),
                trunc(9, "k"),
            ]);
        let r = apply_with(&url, &b2.jsonl(), extra);
        expect(&r, 0, &format!("{name}: a direct swap"));
        let rows = tgt.session().query("SELECT id::text, v FROM t ORDER BY id");
        assert_eq!(
            rows,
            vec![
                vec![Some("1".to_string()), Some("b".to_string())],
                vec![Some("2".to_string()), Some("a".to_string())]
            ],
            "{name}"
        );
        assert_eq!(tgt.session().value("SELECT count(*) FROM k"), "0", "{name}");
    }
}

/// A key-only update (default identity) with an unchanged value, of a row
/// the target does not hold: refused, with and without `--on-conflict
/// overwrite`; under overwrite the message says why overwrite cannot force
/// it (there is no stored row to fill the value from), not that it would.
#[test]
fn a_key_only_change_of_a_missing_row_is_refused_with_the_right_words() {
    use common::{kv_schema, Spec};
    use serde_json::json;
    for (name, extra) in [
        ("keyonly", &[][..]),
        ("keyonly_over", &["--on-conflict", "overwrite"][..]),
    ] {
        let tgt = target(name);
        let url = tgt.url();
        let b = Spec::new(0, 1)
            .schemas(vec![kv_schema("t")])
            .events(vec![json!({
                "sequence": "1", "table": "t", "operation": "update",
                "before_key": [["integer", "7"]],
                "after": [["integer", "7"], ["unchanged"]]
            })]);
        let r = apply_with(&url, &b.jsonl(), extra);
        expect(
            &r,
            1,
            &format!("{name}: a key-only update of a missing row"),
        );
        if !extra.is_empty() {
            assert!(
                !r.stderr.contains("forces it") && r.stderr.contains("cannot be filled"),
                "{}",
                r.stderr
            );
        }
    }
}

/// A column added NOT NULL with a default at the source: the target adds it
/// to a table holding rows (NULL there until their next change), not refused.
#[test]
fn an_added_not_null_column_reaches_a_table_with_rows() {
    use common::{ins, kv_schema, row, schema, schema_rec, Spec};
    use serde_json::json;
    let tgt = target("add_not_null");
    let url = tgt.url();
    let b1 = Spec::new(0, 1)
        .schemas(vec![kv_schema("t")])
        .events(vec![ins(1, "t", row(1, "a"))]);
    expect(&apply_with(&url, &b1.jsonl(), &[]), 0, "rows");
    let s2 = schema(
        "t",
        &[
            ("id", "INTEGER", false),
            ("v", "TEXT", true),
            ("q", "INTEGER", false),
        ],
        &["id"],
    );
    let b2 = Spec::new(1, 2).schemas(vec![kv_schema("t")]).events(vec![
        schema_rec(s2, &[]),
        ins(
            2,
            "t",
            json!([["integer", "2"], ["text", "b"], ["integer", "0"]]),
        ),
    ]);
    let r = apply_with(&url, &b2.jsonl(), &[]);
    expect(&r, 0, "ADD COLUMN NOT NULL");
    assert_eq!(tgt.session().value("SELECT count(*) FROM t"), "2");
}

/// A PostgreSQL table of `integer` and `smallint` columns goes into the
/// target straight by binary COPY at the columns' own width (no staging
/// table): the extremes arrive exactly, NULLs stay NULL, and the audit says
/// equal.
#[test]
fn integer_and_smallint_columns_load_straight_and_exactly() {
    let src = pg::db("narrow_src");
    let s = src.session();
    s.exec("CREATE TABLE public.n (id bigint PRIMARY KEY, i integer, s smallint, t text)");
    s.exec(
        "INSERT INTO n VALUES (1, 2147483647, 32767, 'a'), (2, -2147483648, -32768, 'b'), (3, NULL, NULL, NULL)",
    );
    let slot = "s_narrow";
    pg::init_capture(&src.url(), slot, &["public.n"]);
    let tgt = target("narrow_tgt");
    let url = tgt.url();
    let r = pg::snapshot_into(&src.url(), slot, &url);
    expect(&r, 0, "snapshot | apply");
    let q = "SELECT id::text, i::text, s::text, t FROM n ORDER BY id";
    assert_eq!(src.session().query(q), tgt.session().query(q));
    let types = tgt.session().query(
        "SELECT data_type FROM information_schema.columns WHERE table_name = 'n' ORDER BY ordinal_position",
    );
    let types: Vec<String> = types.into_iter().map(|r| r[0].clone().unwrap()).collect();
    assert_eq!(types, ["bigint", "integer", "smallint", "text"]);
    audit_equal(&src.url(), &url, &["--slot", slot]);
}

/// A follower applies batch after batch of the same table: its columns are
/// read from the catalog once per schema, not at every batch (counted in
/// the server's statement log of the test's own databases).
#[test]
fn tables_are_checked_once_per_schema_not_per_batch() {
    use common::{ins, kv_schema, Spec};
    let batches = |n: u128| -> String {
        (0..n)
            .map(|i| {
                Spec::new(i, i + 1)
                    .schemas(vec![kv_schema("t")])
                    .events(vec![ins(i + 1, "t", common::row(i as i64 + 1, "v"))])
                    .jsonl()
            })
            .collect()
    };
    let lookups = |name: &str, input: &str| {
        let db = target(name);
        db.cluster.admin(&format!(
            "ALTER DATABASE {} SET log_statement = 'all'",
            db.dbname
        ));
        let before = db.cluster.log().matches("format_type(a.atttypid").count();
        apply_ok(&db.url(), input.as_bytes());
        db.cluster.log().matches("format_type(a.atttypid").count() - before
    };
    let one = lookups("checked_once_1", &batches(1));
    let many = lookups("checked_once_8", &batches(8));
    assert!(one > 0, "the table is read at least once");
    assert_eq!(many, one, "eight batches read the table as often as one");
}

/// Types a PostgreSQL target used to stumble on: `numeric(5,-2)` (a negative
/// scale, valid since PostgreSQL 15) lands as itself; `reg*` values (names
/// of the source's own catalog objects, which the target need not have)
/// land as text, exactly as the source wrote them, instead of failing with
/// `relation … does not exist` naming no table or column. Snapshot and
/// changes, audited equal.
#[test]
fn negative_scale_numerics_and_reg_types_reach_a_postgres_target() {
    if pg::major_version() < 15 {
        eprintln!(
            "SKIPPED negative_scale_numerics_and_reg_types_reach_a_postgres_target: PostgreSQL {} has no negative numeric scales (the run on 15 checks it)",
            pg::major_version()
        );
        return;
    }
    let src = pg::db("regs_src");
    let s = src.session();
    s.exec(
        "CREATE TABLE public.t_int8 (id bigint PRIMARY KEY); \
         CREATE TABLE public.r (id int PRIMARY KEY, n numeric(5,-2), c regclass, ty regtype, f regproc, ns regnamespace)",
    );
    s.exec("INSERT INTO r VALUES (1, 12345, 't_int8', 'integer', 'now', 'public'), (2, NULL, NULL, NULL, NULL, NULL)");
    let slot = "s_regs";
    pg::init_capture(&src.url(), slot, &["public.r"]);
    let tgt = target("regs_tgt");
    let url = tgt.url();
    let r = pg::snapshot_into(&src.url(), slot, &url);
    expect(&r, 0, "snapshot | apply");
    s.exec("INSERT INTO r VALUES (3, -99949, 'r', 'text[]', 'pg_backend_pid', 'pg_catalog'); UPDATE r SET c = 'pg_class' WHERE id = 1");
    let r = pipeline(&format!(
        "{{capture}} --source {src} --slot {slot} --after \"$({{apply}} cursor --target {url})\" | {{apply}} --target {url} -q",
        src = shell_quote(&src.url()),
        url = shell_quote(&url)
    ));
    expect(&r, 0, "capture | apply");
    audit_equal(&src.url(), &url, &["--slot", slot]);
    let types = tgt.session().query(
        "SELECT format_type(atttypid, atttypmod) FROM pg_attribute WHERE attrelid = 'public.r'::regclass AND attnum > 0 ORDER BY attnum",
    );
    let types: Vec<String> = types.into_iter().map(|r| r[0].clone().unwrap()).collect();
    assert_eq!(
        types,
        ["integer", "numeric(5,-2)", "text", "text", "text", "text"]
    );
    let q = "SELECT id::text, n::text, c::text, ty::text, f::text, ns::text FROM r ORDER BY id";
    assert_eq!(src.session().query(q), tgt.session().query(q));
}

/// A hand-made stream declaring `INTEGER`, `VARCHAR(5)` or `NUMERIC(10,2)`
/// (not the spelling PostgreSQL's `format_type` gives) from a PostgreSQL
/// source identity, and one from another source: the table is made and then
/// taken again by a later apply, never made and then refused.
#[test]
fn hand_made_type_spellings_make_a_table_a_later_apply_accepts() {
    use common::{schema, Spec};
    use serde_json::json;
    let cols = [
        ("id", "INTEGER", false),
        ("s", "VARCHAR(5)", true),
        ("n", "NUMERIC(10,2)", true),
        ("b", "int8", true),
    ];
    for (name, source) in [
        ("spell_pg", "postgres:1/db/slot"),
        ("spell_other", "hand:made"),
    ] {
        let tgt = target(name);
        let url = tgt.url();
        // Another source's NUMERIC (affinity) is refused before anything is
        // made: its values may be of any class.
        let cols: Vec<_> = cols
            .iter()
            .filter(|c| source.starts_with("postgres:") || c.0 != "n")
            .copied()
            .collect();
        let row = |id: i64| {
            let mut r = vec![json!(["integer", id.to_string()]), json!(["text", "abc"])];
            if source.starts_with("postgres:") {
                r.push(json!(["text", "1.50"]));
            }
            r.push(json!(["integer", "7"]));
            serde_json::Value::Array(r)
        };
        let b1 = Spec::new(0, 1)
            .source(source)
            .schemas(vec![schema("t", &cols, &["id"])])
            .events(vec![common::ins(1, "t", row(1))]);
        let r = apply_with(&url, &b1.jsonl(), &[]);
        expect(&r, 0, &format!("{name}: first apply"));
        // Another process: the table is checked against the catalog again.
        let b2 = Spec::new(1, 2)
            .source(source)
            .schemas(vec![schema("t", &cols, &["id"])])
            .events(vec![common::ins(2, "t", row(2))]);
        let r = apply_with(&url, &b2.jsonl(), &[]);
        expect(
            &r,
            0,
            &format!("{name}: a later apply takes the table it made"),
        );
        assert_eq!(tgt.session().value("SELECT count(*) FROM t"), "2", "{name}");
    }
}

/// A SIGTERM while a batch header makes hundreds of tables in a
/// PostgreSQL target: apply stops between two tables, rolls the batch back
/// (no table of it, the cursor unmoved), exits 0; the re-run applies it.
#[test]
fn sigterm_while_a_header_makes_many_tables_rolls_the_batch_back() {
    use common::{ins, kv_schema, row, Spec};
    let tgt = target("stop_header");
    let url = tgt.url();
    let b1 = Spec::new(0, 1)
        .schemas(vec![kv_schema("t")])
        .events(vec![ins(1, "t", row(1, "a"))]);
    expect(&apply_with(&url, &b1.jsonl(), &[]), 0, "first batch");
    // Each table costs tens of milliseconds here (made, read back, its
    // statements prepared): a few hundred keep the batch going for seconds.
    let n = 400;
    let schemas: Vec<serde_json::Value> = (0..n).map(|i| kv_schema(&format!("n{i}"))).collect();
    let b2 = Spec::new(1, 2)
        .schemas(schemas)
        .events(vec![ins(2, "n0", row(1, "b"))]);
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("many.jsonl");
    std::fs::write(&input, b2.jsonl()).unwrap();
    let tables = || {
        tgt.session().value(
            "SELECT count(*) FROM pg_tables WHERE schemaname = 'public' AND tablename LIKE 'n%'",
        )
    };
    // In the batch: the apply's session has a transaction open.
    let q = "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND xact_start IS NOT NULL AND pid <> pg_backend_pid()";
    let took = common::sigterm_apply_in_header(&url, &input, Duration::from_millis(300), || {
        tgt.session().value(q) != "0"
    });
    let cursor = || -> serde_json::Value { serde_json::from_str(&cursor_of(&url)).unwrap() };
    assert_eq!(
        cursor(),
        common::cursor(common::SRC, 1),
        "the cursor did not move"
    );
    assert_eq!(tables(), "0", "no table of the stopped batch");
    let r = exec(
        APPLY,
        &["--target", &url, "-q", input.to_str().unwrap()],
        None,
    );
    expect(&r, 0, "the re-run");
    assert_eq!(tables(), n.to_string());
    assert_eq!(cursor(), common::cursor(common::SRC, 2));
    eprintln!("stopped {took:?} after SIGTERM, with {n} tables in the header");
}

/// A snapshot value the target's own type refuses when the staged rows are
/// cast into the table (here an enum of the same name without the label):
/// the error names the table, and nothing is loaded.
#[test]
fn a_staged_value_the_target_type_refuses_names_the_table() {
    let src = pg::db("staged_src");
    let s = src.session();
    s.exec(
        "CREATE TYPE mood AS ENUM ('sad', 'ok'); \
         CREATE TABLE public.d (id int PRIMARY KEY, p mood); INSERT INTO d VALUES (1, 'ok')",
    );
    let slot = "s_staged";
    pg::init_capture(&src.url(), slot, &["public.d"]);
    let tgt = target("staged_tgt");
    tgt.session().exec("CREATE TYPE mood AS ENUM ('sad')");
    let url = tgt.url();
    let r = pg::snapshot_into(&src.url(), slot, &url);
    expect(&r, 1, "a value the target's domain refuses");
    assert!(
        r.stderr.contains("snapshot rows of table \"public.d\""),
        "{}",
        r.stderr
    );
    assert!(r.stderr.contains("mood"), "{}", r.stderr);
    assert_eq!(cursor_of(&url), "");
    assert_eq!(
        tgt.session()
            .value("SELECT count(*) FROM pg_tables WHERE tablename = 'd'"),
        "0"
    );
}

/// Stream names of a PostgreSQL source land in the schema and table their
/// parts name (`"x.y".z` in schema `x.y`, `x."y.z"` in schema `x`), and two
/// stream tables never land in one target table: `t` beside `public.t`, or
/// a name in no canonical spelling (`a.b.c`, which could be either of the
/// two above), are refused with nothing of the batch written.
#[test]
fn stream_table_names_land_one_to_one() {
    use common::{ins, row, schema, Spec};
    const PG: &str = "postgres:7301000000000000001/app/mooncdc_main";
    let kv_schema = |t: &str| schema(t, &[("id", "bigint", false), ("v", "text", true)], &["id"]);
    let tgt = target("names_one_to_one");
    let url = tgt.url();
    let b = Spec::new(0, 2)
        .source(PG)
        .schemas(vec![kv_schema("\"x.y\".z"), kv_schema("x.\"y.z\"")])
        .events(vec![
            ins(1, "\"x.y\".z", row(1, "in schema x.y")),
            ins(2, "x.\"y.z\"", row(1, "in schema x")),
        ]);
    expect(&apply_with(&url, &b.jsonl(), &[]), 0, "dotted parts");
    let s = tgt.session();
    assert_eq!(s.value("SELECT v FROM \"x.y\".z"), "in schema x.y");
    assert_eq!(s.value("SELECT v FROM x.\"y.z\""), "in schema x");
    for (name, says) in [
        ("a.b.c", "more than two dot-separated parts"),
        ("\"a\".b", "not spelled as docs/FORMAT.md spells it"),
    ] {
        let bad = Spec::new(2, 3)
            .source(PG)
            .schemas(vec![kv_schema(name)])
            .event(ins(3, name, row(1, "where?")));
        let r = apply_with(&url, &bad.jsonl(), &[]);
        expect(&r, 1, &format!("stream name {name}"));
        assert!(r.stderr.contains(says), "{name}: {}", r.stderr);
    }
    // `t` and `public.t`: one table, two stream names.
    let both = Spec::new(2, 4)
        .source(PG)
        .schemas(vec![kv_schema("public.t"), kv_schema("t")])
        .events(vec![
            ins(3, "public.t", row(1, "of public.t")),
            ins(4, "t", row(1, "of t")),
        ]);
    let r = apply_with(&url, &both.jsonl(), &[]);
    expect(&r, 1, "t beside public.t");
    assert!(
        r.stderr.contains("\"public.t\"") && r.stderr.contains("\"t\""),
        "{}",
        r.stderr
    );
    assert_eq!(
        s.value("SELECT count(*) FROM pg_tables WHERE schemaname = 'public' AND tablename = 't'"),
        "0",
        "a refused batch made its table"
    );
    assert!(cursor_of(&url).contains("\"2\""), "{}", cursor_of(&url));
}

/// A table added by backfill to a pipeline into PostgreSQL, its rows
/// changed, deleted and moved after the request (changes the stream leaves
/// out until the chunks reach their keys): the truncate and the chunk
/// inserts land like any batch, and the audit is equal.
#[test]
fn a_backfill_lands_in_a_postgres_target() {
    let db = Dbs::new();
    let tgt = target("bf_target");
    let url = tgt.url();
    db.src_sql(
        "CREATE TABLE a(id INTEGER PRIMARY KEY, v TEXT);
         CREATE TABLE b(k TEXT PRIMARY KEY, n INTEGER, r REAL, x BLOB);
         INSERT INTO a VALUES (1, 'one'), (2, 'two');
         WITH RECURSIVE c(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM c WHERE i < 4999)
           INSERT INTO b SELECT printf('k%05d', i), i, i / 3.0, randomblob(i % 9) FROM c;",
    );
    db.init(&["a"]);
    let snap = exec(common::sqlite::SNAPSHOT, &["--source", &db.src_url()], None);
    apply_ok(&url, &snap.stdout);
    let r = db.capture_cmd("backfill", &["--table", "b"]);
    expect(&r, 0, "capture backfill");
    db.src_sql(
        "UPDATE b SET n = -n WHERE n % 7 = 0; DELETE FROM b WHERE n % 11 = 0;
         UPDATE b SET k = k || 'z' WHERE n % 13 = 0; UPDATE a SET v = 'uno' WHERE id = 1;",
    );
    common::sqlite::follow_until_backfilled(&db, &url, 120);
    audit_equal(&db.src_url(), &url, &[]);
}

/// Large transactions streamed by the server (docs/POSTGRES.md, "Large
/// transactions"), followed into the PostgreSQL target: two interleaved
/// (one rolled back, one with a subtransaction rolled back) and one of
/// 200,000 changes, each one target transaction; the rolled-back rows
/// nowhere, every value as the source's.
#[test]
fn large_streamed_transactions_from_postgres_arrive_whole() {
    let src = pg::db("streamed_src");
    pg::streaming_tables(&src);
    let slot = "s_streamed_pg";
    pg::init_capture(&src.url(), slot, &["public.big", "public.side"]);
    let tgt = target("streamed_tgt");
    expect(
        &pg::snapshot_into(&src.url(), slot, &tgt.url()),
        0,
        "snapshot | apply",
    );
    let last = pg::large_transactions(&src, 10_000, 100_000);
    pg::follow_into_until(
        &src.url(),
        slot,
        &tgt.url(),
        &["--spool-memory", "1000000"],
        last,
    );
    audit_equal(&src.url(), &tgt.url(), &["--slot", slot]);
    let t = tgt.session();
    assert_eq!(
        t.value("SELECT count(*) FROM big WHERE id >= 2000000 OR v = 'rolled back'"),
        "0"
    );
    assert_eq!(t.value("SELECT count(*) FROM side"), "1");
    let q = "SELECT md5(string_agg(id || ':' || v || ':' || coalesce(n::text, '-'), ',' ORDER BY id)) FROM big";
    assert_eq!(src.session().value(q), t.value(q));
    assert_eq!(t.value("SELECT count(*) FROM big"), "150000");
}

/// Logical messages (`message` records) change nothing in a PostgreSQL
/// target, are counted in the summary, and move the cursor with their
/// batch, also a batch that holds only a message; replayed, nothing
/// changes.
#[test]
fn messages_are_skipped_and_move_the_cursor() {
    use common::{ins, kv_schema, msg_rec, row, text, Spec};
    let tgt = target("messages");
    let url = tgt.url();
    let b1 = Spec::new(0, 4).schemas(vec![kv_schema("t")]).events(vec![
        ins(1, "t", row(1, "a")),
        msg_rec(2, "outbox", text("x"), true),
        ins(3, "t", row(2, "b")),
    ]);
    let b2 = Spec::new(4, 6)
        .schemas(vec![kv_schema("t")])
        .events(vec![msg_rec(5, "outbox", text("alone"), false)]);
    let input = format!("{}{}", b1.jsonl(), b2.jsonl());
    let r = exec(APPLY, &["--target", &url], Some(input.as_bytes()));
    expect(&r, 0, "apply");
    assert!(r.stderr.contains("2 events applied"), "{}", r.stderr);
    assert!(r.stderr.contains("2 messages skipped"), "{}", r.stderr);
    assert!(cursor_of(&url).contains("\"sequence\":\"6\""));
    assert_eq!(tgt.session().value("SELECT count(*) FROM t"), "2");
    let again = apply_ok(&url, input.as_bytes());
    assert_eq!((again.applied, again.skipped), (0, 2));
    assert_eq!(tgt.session().value("SELECT count(*) FROM t"), "2");
}
