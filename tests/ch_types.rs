//! ClickHouse as analysts query it (docs/CLICKHOUSE.md, Types and "Deleted
//! rows and cleanup"): PostgreSQL's timestamps, dates, UUIDs, booleans and
//! arrays in ClickHouse's own types where the server has them, values
//! compared with the source's by independent queries on both sides; values
//! a type cannot hold refused with the cursor unchanged; tables made with
//! `String` columns kept so; the engine that knows deleted rows, `FINAL`
//! counts and the cleanup merge.
//!
//! Every test runs on the server `tests/common/ch.rs` starts: Debian's
//! ClickHouse 18.16 (no typed mappings, no deleted-row engine: the tests
//! check that nothing changes there), or a modern engine with
//! `MOONCDC_CLICKHOUSE_ENGINE=chdb`.

mod common;

use common::ch::{self, ChDb};
use common::pg::{PgDb, Session};
use common::sqlite::{exec, expect, pipeline, shell_quote, APPLY, AUDIT};
use common::Run;

/// Whether the test server has the typed mappings and the deleted-row
/// engine (23.2 and later; 18.16 has neither).
fn modern(db: &ChDb) -> bool {
    let v = db.query("SELECT version()");
    let major: u32 = v.trim().split('.').next().unwrap().parse().unwrap();
    major >= 23
}

/// A ClickHouse table's columns as `name type`, in the table's order.
fn column_types(db: &ChDb, table: &str) -> Vec<String> {
    db.rows(&format!(
        "SELECT name, type FROM system.columns WHERE database = '{}' AND table = '{table}'",
        db.name
    ))
    .into_iter()
    .map(|r| tsv_unescape(&format!("{} {}", r[0], r[1])))
    .collect()
}

/// The type of one column of a ClickHouse table.
fn column_type(db: &ChDb, table: &str, column: &str) -> String {
    let prefix = format!("{column} ");
    column_types(db, table)
        .into_iter()
        .find_map(|c| c.strip_prefix(&prefix).map(str::to_string))
        .unwrap_or_else(|| panic!("{table} has no column {column}"))
}

/// A ClickHouse table's engine with its parameters.
fn engine_full(db: &ChDb, table: &str) -> String {
    db.query(&format!(
        "SELECT engine_full FROM system.tables WHERE database = '{}' AND name = '{table}'",
        db.name
    ))
    .trim()
    .to_string()
}

/// `capture --after "$(apply cursor)" | [compact |] apply`.
fn catch_up(src: &str, slot: &str, url: &str, compact: bool) -> Run {
    pipeline(&format!(
        "{{capture}} --source {src} --slot {slot} --after \"$({{apply}} cursor --target {url})\" {} | {{apply}} --target {url}",
        if compact { "| {compact}" } else { "" },
        src = shell_quote(src),
        url = shell_quote(url)
    ))
}

#[track_caller]
fn audit_equal(src: &str, slot: &str, url: &str) {
    let r = exec(
        AUDIT,
        &["--source", src, "--slot", slot, "--target", url],
        None,
    );
    expect(&r, 0, "audit");
    assert!(
        r.stdout_str().trim_end().ends_with("equal"),
        "{}",
        r.stdout_str()
    );
}

fn cursor_of(url: &str) -> String {
    exec(APPLY, &["cursor", "--target", url], None).stdout_str()
}

/// A source session whose text forms are UTC's.
fn utc_session(pgdb: &PgDb) -> Session {
    let s = pgdb.session();
    s.exec("SET TimeZone = 'UTC'");
    s.exec("SET DateStyle = 'ISO, YMD'");
    s
}

/// A TabSeparated field as text (`\N` stays as it is).
fn tsv_unescape(v: &str) -> String {
    if v == "\\N" {
        return v.to_string();
    }
    let mut out = String::new();
    let mut it = v.chars();
    while let Some(c) = it.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match it.next() {
            Some('t') => out.push('\t'),
            Some('n') => out.push('\n'),
            Some('0') => out.push('\0'),
            Some(o) => out.push(o),
            None => out.push('\\'),
        }
    }
    out
}

/// Source rows (text, in key order) of `sql` against ClickHouse's rows of
/// `ch_sql`: each side formats its own values.
#[track_caller]
fn same_rows(what: &str, s: &Session, sql: &str, db: &ChDb, ch_sql: &str) -> usize {
    let want: Vec<Vec<String>> = s
        .query(sql)
        .into_iter()
        .map(|r| {
            r.into_iter()
                .map(|v| v.unwrap_or_else(|| "\\N".into()))
                .collect()
        })
        .collect();
    let got: Vec<Vec<String>> = db
        .rows(ch_sql)
        .into_iter()
        .map(|r| r.into_iter().map(|v| tsv_unescape(&v)).collect())
        .collect();
    assert_eq!(got, want, "{what}: ClickHouse's rows against the source's");
    want.len()
}

const TYPED_TABLE: &str = "CREATE TABLE public.typed (
    id bigint PRIMARY KEY,
    ts timestamp, ts3 timestamp(3), tz timestamptz, d date, u uuid,
    b boolean, j jsonb, js json, t time, wide numeric(38,10), huge numeric(76,20), anull integer[],
    ai integer[] NOT NULL DEFAULT '{}', at text[] NOT NULL DEFAULT '{}',
    an numeric(10,2)[] NOT NULL DEFAULT '{}', af double precision[] NOT NULL DEFAULT '{}',
    a4 real[] NOT NULL DEFAULT '{}', atz timestamptz[] NOT NULL DEFAULT '{}',
    ad date[] NOT NULL DEFAULT '{}', au uuid[] NOT NULL DEFAULT '{}', ab boolean[] NOT NULL DEFAULT '{}')";

const TYPED_ROWS: &str = "INSERT INTO public.typed VALUES
 (1, '2024-03-10 02:30:00.123456', '2024-03-10 02:30:00.123', '2024-03-31 01:30:00.000001+01',
  '2024-02-29', 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', true, '{\"b\": 1, \"a\": [1, 2.50]}',
  '{\"b\":1,  \"a\" : 2}', '23:59:59.999999', -9999999999999999999999999999.9999999999,
  -99999999999999999999999999999999999999999999999999999999.99999999999999999999, '{1,NULL}',
  '{1,NULL,-2147483648}', '{\"a b\",NULL,\"\",\"NULL\",\"x\\\"y\\\\z\",é😀,\"{}\"}', '{1.50,NULL,-0.01}',
  '{1.5,-0,1e-300,NULL,1.7976931348623157e308}', '{0.1,3.4028235e38}',
  '{\"2024-11-03 01:30:00.5+00\",NULL}', '{1969-12-31,2299-12-31}',
  '{00000000-0000-0000-0000-000000000000,ffffffff-ffff-ffff-ffff-ffffffffffff}', '{t,f,NULL}'),
 (2, '1969-07-20 20:17:40.000001', '1900-01-01 00:00:00', '1900-01-01 00:00:00+00', '1900-01-01',
  '00000000-0000-0000-0000-000000000001', false, '[]', 'null', '00:00:00', 0.0000000001,
  12345678901234567890123456789012345678901234567890.00000000000000000001, '{}',
  '{}', '{}', '{}', '{}', '{}', '{}', '{}', '{}', '{}'),
 (3, '2299-12-31 23:59:59.999999', NULL, '2299-12-31 23:59:59.999999+00', '2299-12-31',
  NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, '{NULL}', '{NULL}', '{NULL}', '{NULL}', '{NULL}', '{NULL}', '{NULL}', '{NULL}', '{NULL}'),
 (4, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, DEFAULT, DEFAULT, DEFAULT, DEFAULT, DEFAULT, DEFAULT, DEFAULT, DEFAULT, DEFAULT)";

/// Every typed column compared by independent queries: timestamps as
/// microseconds since 1970, the rest as text both sides agree on.
fn compare_typed(s: &Session, db: &ChDb) {
    let t = "public_typed";
    let n = same_rows(
        "scalars",
        s,
        "SELECT id, (extract(epoch FROM ts) * 1000000)::bigint, (extract(epoch FROM ts3) * 1000000)::bigint, \
         (extract(epoch FROM tz) * 1000000)::bigint, d::text, u::text, b::int::text, j::text, js::text, t::text, \
         md5(wide::text), huge::text FROM public.typed ORDER BY id",
        db,
        &format!(
            "SELECT id, toUnixTimestamp64Micro(ts), toUnixTimestamp64Micro(ts3), toUnixTimestamp64Micro(tz), \
             toString(d), toString(u), toString(toUInt8(b)), j, js, t, \
             lower(hex(MD5(toString(wide)))), toDecimalString(huge, 20) FROM {t}__current ORDER BY id"
        ),
    );
    assert_eq!(n, 4);
    // Array elements, one row each (position 1 up).
    for (col, pg, chx) in [
        ("ai", "e::text", "toString(e)"),
        ("at", "e", "e"),
        ("an", "e::text", "toDecimalString(e, 2)"),
        // Floats by their bits (big-endian hex on both sides).
        (
            "af",
            "encode(float8send(e), 'hex')",
            "lower(hex(reverse(reinterpretAsString(assumeNotNull(e)))))",
        ),
        (
            "a4",
            "encode(float4send(e), 'hex')",
            "lower(hex(reverse(reinterpretAsString(assumeNotNull(e)))))",
        ),
        (
            "atz",
            "(extract(epoch FROM e) * 1000000)::bigint::text",
            "toString(toUnixTimestamp64Micro(e))",
        ),
        ("ad", "e::text", "toString(e)"),
        ("au", "e::text", "toString(e)"),
        ("ab", "e::int::text", "toString(toUInt8(e))"),
    ] {
        same_rows(
            col,
            s,
            &format!(
                "SELECT id, i, CASE WHEN e IS NULL THEN '<null>' ELSE 'v:' || {pg} END FROM public.typed, \
                 LATERAL (SELECT i, {col}[i] AS e FROM generate_subscripts({col}, 1) i) x ORDER BY id, i"
            ),
            db,
            &format!(
                "SELECT id, i, if(isNull(e), '<null>', concat('v:', assumeNotNull({chx}))) FROM (SELECT id, i, {col}[i] AS e \
                 FROM {t}__current ARRAY JOIN arrayEnumerate({col}) AS i) ORDER BY id, i"
            ),
        );
    }
}

#[test]
fn postgres_types_land_as_clickhouse_types_exactly_through_snapshot_and_changes() {
    let pgdb = common::pg::db("ch_typed");
    let (src, slot) = (pgdb.url(), "s_ch_typed");
    let s = utc_session(&pgdb);
    s.exec(TYPED_TABLE);
    s.exec(TYPED_ROWS);
    common::pg::init_capture(&src, slot, &["public.typed"]);
    let db = ch::db("typed");
    let url = db.url();
    let r = common::pg::snapshot_into(&src, slot, &url);
    expect(&r, 0, "snapshot | apply");
    let shown = [
        "id", "ts", "tz", "d", "u", "b", "j", "t", "ai", "at", "an", "atz", "wide", "huge", "anull",
    ];
    let mut got: Vec<String> = column_types(&db, "public_typed")
        .into_iter()
        .filter(|c| shown.contains(&c.split(' ').next().unwrap()))
        .collect();
    got.sort();
    let want: &[&str] = if modern(&db) {
        &[
            "ai Array(Nullable(Int32))",
            "an Array(Nullable(Decimal(10, 2)))",
            "anull Nullable(String)",
            "at Array(Nullable(String))",
            "atz Array(Nullable(DateTime64(6, 'UTC')))",
            "b Nullable(Bool)",
            "d Nullable(Date32)",
            "huge Nullable(Decimal(76, 20))",
            "id Int64",
            "j Nullable(String)",
            "t Nullable(String)",
            "ts Nullable(DateTime64(6, 'UTC'))",
            "tz Nullable(DateTime64(6, 'UTC'))",
            "u Nullable(UUID)",
            "wide Nullable(Decimal(38, 10))",
        ]
    } else {
        // 18.16: text, as before (no DateTime64, Date32 nor Bool).
        &[
            "ai Nullable(String)",
            "an Nullable(String)",
            "anull Nullable(String)",
            "at Nullable(String)",
            "atz Nullable(String)",
            "b Nullable(UInt8)",
            "d Nullable(String)",
            "huge Nullable(String)",
            "id Int64",
            "j Nullable(String)",
            "t Nullable(String)",
            "ts Nullable(String)",
            "tz Nullable(String)",
            "u Nullable(String)",
            "wide Nullable(Decimal(38, 10))",
        ]
    };
    assert_eq!(got, want);
    audit_equal(&src, slot, &url);
    if modern(&db) {
        compare_typed(&s, &db);
        // Analysts' queries need no cast.
        assert_eq!(
            db.query("SELECT count() FROM public_typed FINAL WHERE ts < toDateTime64('1970-01-01 00:00:00', 6)")
                .trim(),
            "1"
        );
    }
    // Changes: updates of typed values, a key move, a delete, an insert
    // and update of one row in one transaction; through compact, then not.
    s.exec("BEGIN");
    s.exec("UPDATE public.typed SET ts = ts + interval '1 microsecond', atz = array_append(atz, '1970-01-01 00:00:00+00'), ab = '{}' WHERE id = 1");
    s.exec("UPDATE public.typed SET id = 20 WHERE id = 2");
    s.exec("DELETE FROM public.typed WHERE id = 4");
    s.exec("INSERT INTO public.typed (id, ts, u, ai) VALUES (5, '2000-01-01 00:00:00', '11111111-2222-3333-4444-555555555555', '{7}')");
    s.exec("UPDATE public.typed SET d = '2000-02-29', ai = '{7,NULL,8}' WHERE id = 5");
    s.exec("COMMIT");
    expect(
        &catch_up(&src, slot, &url, true),
        0,
        "capture | compact | apply",
    );
    s.exec("UPDATE public.typed SET tz = '1969-12-31 23:59:59.999999+00', at = '{\"}\",\",\"}' WHERE id = 5");
    expect(&catch_up(&src, slot, &url, false), 0, "capture | apply");
    audit_equal(&src, slot, &url);
    if modern(&db) {
        compare_typed(&s, &db);
    }
    // The view holds the source's rows; FINAL, on the modern engine, too.
    let live = s.value("SELECT count(*) FROM public.typed");
    assert_eq!(
        db.query("SELECT count() FROM public_typed__current").trim(),
        live
    );
    if modern(&db) {
        assert_eq!(
            db.query("SELECT count() FROM public_typed FINAL").trim(),
            live
        );
    }
    // An array column whose NOT NULL is dropped stays an Array (its values
    // cannot become text that reads as the source's); a NULL in it then
    // fails naming it, the cursor unchanged.
    s.exec("ALTER TABLE public.typed ALTER COLUMN ai DROP NOT NULL");
    s.exec("UPDATE public.typed SET ai = '{9}' WHERE id = 5");
    expect(
        &catch_up(&src, slot, &url, false),
        0,
        "capture | apply after DROP NOT NULL",
    );
    audit_equal(&src, slot, &url);
    let ai_type = column_type(&db, "public_typed", "ai");
    if modern(&db) {
        assert_eq!(ai_type.as_str(), "Array(Nullable(Int32))");
        let before = cursor_of(&url);
        s.exec("UPDATE public.typed SET ai = NULL WHERE id = 5");
        let r = catch_up(&src, slot, &url, false);
        expect(&r, 1, "a NULL array");
        assert!(
            r.stderr.contains("column \"ai\"") && r.stderr.contains("NULL in an Array column"),
            "{}",
            r.stderr
        );
        assert_eq!(cursor_of(&url), before);
    } else {
        assert_eq!(ai_type.as_str(), "Nullable(String)");
    }
}

#[test]
fn values_a_typed_column_cannot_hold_fail_naming_the_column_with_the_cursor_unchanged() {
    // A source table of one row, captured and loaded into a new target.
    let source = |name: &str, options: &str| {
        let pgdb = common::pg::db(name);
        let slot = format!("s_{name}");
        let s = utc_session(&pgdb);
        s.exec("CREATE TABLE public.r (id int PRIMARY KEY, ts timestamp, d date, a int[] NOT NULL DEFAULT '{}')");
        s.exec("INSERT INTO public.r VALUES (1, '2024-01-01 00:00:00', '2024-01-01', '{1}')");
        common::pg::init_capture(&pgdb.url(), &slot, &["public.r"]);
        let db = ch::db(name);
        let url = db.url_with(options);
        expect(
            &common::pg::snapshot_into(&pgdb.url(), &slot, &url),
            0,
            "snapshot | apply",
        );
        (pgdb, s, slot, db, url)
    };
    let bad = "(2, 'infinity', '1899-12-31', '{{1,2},{3,4}}')";
    let (pgdb, s, slot, db, url) = source("ch_refused", "");
    if !modern(&db) {
        // 18.16 keeps these as text: every value is carried.
        s.exec(&format!("INSERT INTO public.r VALUES {bad}"));
        expect(
            &catch_up(&pgdb.url(), &slot, &url, false),
            0,
            "text columns take anything",
        );
        audit_equal(&pgdb.url(), &slot, &url);
        return;
    }
    drop((pgdb, s, db));
    let cases = [
        (
            "(2, 'infinity', NULL, '{}')",
            "column \"ts\" (DateTime64(6, 'UTC'))",
        ),
        (
            "(2, '2300-01-01 00:00:00', NULL, '{}')",
            "outside the range of DateTime64",
        ),
        (
            "(2, NULL, '1899-12-31', '{}')",
            "outside the range of Date32",
        ),
        ("(2, NULL, '-infinity', '{}')", "no Date32 value"),
        (
            "(2, NULL, NULL, '{{1,2},{3,4}}')",
            "more than one dimension",
        ),
        ("(2, NULL, NULL, '[0:1]={1,2}')", "explicit bounds"),
    ];
    for (k, (value, says)) in cases.iter().enumerate() {
        let (pgdb, s, slot, db, url) = source(&format!("ch_refused_{k}"), "");
        let before = cursor_of(&url);
        s.exec(&format!("INSERT INTO public.r VALUES {value}"));
        let r = catch_up(&pgdb.url(), &slot, &url, false);
        expect(&r, 1, &format!("a value the column cannot hold: {value}"));
        assert!(r.stderr.contains(says), "{value}: {}", r.stderr);
        assert!(
            r.stderr.contains("table \"public.r\"")
                && r.stderr.contains("the cursor did not move")
                && r.stderr.contains("types=text"),
            "{}",
            r.stderr
        );
        assert_eq!(cursor_of(&url), before, "the cursor moved");
        assert_eq!(
            db.query("SELECT count() FROM public_r WHERE id = 2").trim(),
            "0"
        );
        // Again: the same, nothing half-done.
        expect(&catch_up(&pgdb.url(), &slot, &url, false), 1, "again");
        assert_eq!(cursor_of(&url), before, "the cursor moved");
    }
    // The way out the message names: text columns carry every one.
    let (pgdb, s, slot, text, turl) = source("ch_refused_text", "types=text");
    assert_eq!(column_type(&text, "public_r", "ts"), "Nullable(String)");
    s.exec(&format!("INSERT INTO public.r VALUES {bad}"));
    expect(
        &catch_up(&pgdb.url(), &slot, &turl, false),
        0,
        "types=text carries them",
    );
    audit_equal(&pgdb.url(), &slot, &turl);
}

#[test]
fn tables_made_with_text_columns_and_the_old_engine_keep_them() {
    let pgdb = common::pg::db("ch_kept");
    let (src, slot) = (pgdb.url(), "s_ch_kept");
    let s = utc_session(&pgdb);
    s.exec("CREATE TABLE public.k (id int PRIMARY KEY, ts timestamptz, u uuid, b boolean, w numeric(50,2))");
    s.exec("INSERT INTO public.k VALUES (1, '2024-01-01 00:00:00.5+00', 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', true, 1.50), (2, NULL, NULL, false, -123456789012345678901234567890123456789012345678.99)");
    common::pg::init_capture(&src, slot, &["public.k"]);
    let db = ch::db("kept");
    // As an earlier MoonCDC made it: text columns, no deleted-row column
    // named to the engine.
    db.query(
        "CREATE TABLE public_k (id Int32, ts Nullable(String), u Nullable(String), b Nullable(UInt8), w Nullable(String), \
         _etl_version UInt64, _etl_deleted UInt8) ENGINE = ReplacingMergeTree(_etl_version) ORDER BY (id)",
    );
    let url = db.url();
    let r = pipeline(&format!(
        "{{snapshot}} -q --source {} --slot {slot} | {{apply}} --target {} -q --existing-rows keep",
        shell_quote(&src),
        shell_quote(&url)
    ));
    expect(&r, 0, "snapshot | apply into the earlier table");
    s.exec("UPDATE public.k SET ts = '1999-12-31 23:59:59+00' WHERE id = 2");
    s.exec("DELETE FROM public.k WHERE id = 1");
    s.exec("ALTER TABLE public.k ADD COLUMN d date");
    s.exec("INSERT INTO public.k VALUES (3, NULL, NULL, NULL, 0.01, '2024-02-29')");
    expect(&catch_up(&src, slot, &url, false), 0, "capture | apply");
    audit_equal(&src, slot, &url);
    let cols = column_types(&db, "public_k");
    // The earlier columns stay text; the column added now is typed where
    // the server has the type.
    let d = if modern(&db) { "Date32" } else { "String" };
    assert_eq!(
        cols,
        [
            "id Int32".to_string(),
            "ts Nullable(String)".into(),
            "u Nullable(String)".into(),
            "b Nullable(UInt8)".into(),
            "w Nullable(String)".into(),
            "_etl_version UInt64".into(),
            "_etl_deleted UInt8".into(),
            format!("d Nullable({d})"),
        ]
    );
    assert_eq!(
        db.rows("SELECT id, ts FROM public_k__current ORDER BY id"),
        [["2", "1999-12-31 23:59:59+00"], ["3", "\\N"]]
    );
    // The engine is the one it was made with; cleanup leaves it alone.
    let engine = engine_full(&db, "public_k");
    assert!(
        engine.starts_with("ReplacingMergeTree(_etl_version)"),
        "{engine}"
    );
    if modern(&db) {
        let r = exec(APPLY, &["cleanup", "--target", &url], None);
        expect(&r, 0, "cleanup");
        assert!(
            r.stdout_str()
                .contains("skipped public_k: made without the deleted-row column"),
            "{}",
            r.stdout_str()
        );
    }
}

#[test]
fn final_returns_the_live_rows_and_cleanup_removes_deleted_ones() {
    let pgdb = common::pg::db("ch_final");
    let (src, slot) = (pgdb.url(), "s_ch_final");
    let s = pgdb.session();
    s.exec("CREATE TABLE public.f (id int PRIMARY KEY, v text)");
    s.exec("INSERT INTO public.f SELECT g, 'v' || g FROM generate_series(1, 100) g");
    s.exec("CREATE TABLE public.g (id int PRIMARY KEY, v text)");
    s.exec("INSERT INTO public.g SELECT g, 'w' || g FROM generate_series(1, 10) g");
    common::pg::init_capture(&src, slot, &["public.f", "public.g"]);
    let db = ch::db("final");
    let url = db.url();
    expect(
        &common::pg::snapshot_into(&src, slot, &url),
        0,
        "snapshot | apply",
    );
    // Deletes, key moves (a deleted-row marker for the old key), a row
    // deleted and inserted again, a TRUNCATE with rows after it.
    s.exec("DELETE FROM public.f WHERE id % 3 = 0");
    s.exec("UPDATE public.f SET id = id + 1000 WHERE id % 5 = 0");
    s.exec("DELETE FROM public.f WHERE id = 1");
    s.exec("INSERT INTO public.f VALUES (1, 'again')");
    s.exec("BEGIN; TRUNCATE public.g; INSERT INTO public.g VALUES (7, 'after'); COMMIT");
    expect(&catch_up(&src, slot, &url, false), 0, "capture | apply");
    audit_equal(&src, slot, &url);
    let live_f = s.value("SELECT count(*) FROM public.f");
    let view = |t: &str| db.rows(&format!("SELECT * FROM public_{t}__current ORDER BY id"));
    let (view_f, view_g) = (view("f"), view("g"));
    assert_eq!(view_f.len().to_string(), live_f);
    assert_eq!(view_g, [["7", "after"]]);
    let count = |sql: &str| db.query(sql).trim().to_string();
    if !modern(&db) {
        // 18.16: FINAL still returns deleted rows (use the view); no cleanup.
        let n: u64 = count("SELECT count() FROM public_f FINAL").parse().unwrap();
        assert!(n > live_f.parse().unwrap());
        eprintln!("SKIPPED the FINAL and cleanup checks: ClickHouse 18.16 has no deleted-row engine (23.2 and later)");
        return;
    }
    let engine = engine_full(&db, "public_f");
    assert!(
        engine.starts_with("ReplacingMergeTree(_etl_version, _etl_deleted)"),
        "{engine}"
    );
    // FINAL alone gives the source's rows.
    assert_eq!(count("SELECT count() FROM public_f FINAL"), live_f);
    assert_eq!(count("SELECT count() FROM public_g FINAL"), "1");
    assert_eq!(
        db.rows("SELECT id, v FROM public_f FINAL ORDER BY id"),
        view_f
    );
    let stored_before: u64 = count("SELECT count() FROM public_f").parse().unwrap();
    assert!(stored_before > live_f.parse().unwrap());
    // A replay of what was applied changes nothing (the batches are held).
    expect(
        &catch_up(&src, slot, &url, false),
        0,
        "capture | apply again",
    );
    // Cleanup: deleted rows leave storage; the view and FINAL are unchanged.
    let r = exec(
        APPLY,
        &["cleanup", "--target", &url, "--table", "public.f"],
        None,
    );
    expect(&r, 0, "cleanup of public.f");
    assert!(
        r.stdout_str()
            .contains(&format!("cleaned public_f: {stored_before} rows ("))
            && r.stdout_str()
                .contains(&format!("{live_f} rows (0 deleted) after")),
        "{}",
        r.stdout_str()
    );
    assert_eq!(count("SELECT countIf(_etl_deleted = 1) FROM public_f"), "0");
    assert_eq!(count("SELECT count() FROM public_f"), live_f);
    assert_eq!(view("f"), view_f);
    // Every table; then changes go on as before.
    let r = exec(APPLY, &["cleanup", "--target", &url], None);
    expect(&r, 0, "cleanup of every table");
    assert!(
        r.stdout_str().contains("cleaned public_g"),
        "{}",
        r.stdout_str()
    );
    assert_eq!(count("SELECT count() FROM public_g"), "1");
    s.exec("DELETE FROM public.f WHERE id = 2");
    s.exec("UPDATE public.g SET id = 8 WHERE id = 7");
    expect(
        &catch_up(&src, slot, &url, false),
        0,
        "capture | apply after cleanup",
    );
    audit_equal(&src, slot, &url);
    assert_eq!(count("SELECT count() FROM public_g FINAL"), "1");
    // Usage: cleanup is for ClickHouse, a table it knows, not history.
    let r = exec(
        APPLY,
        &["cleanup", "--target", &url, "--table", "public.nope"],
        None,
    );
    expect(&r, 2, "cleanup of an unknown table");
    let r = exec(APPLY, &["cleanup", "--target", "sqlite:/tmp/x.db"], None);
    expect(&r, 2, "cleanup of a SQLite target");
}

/// A table made with typed columns, then written through a URL with
/// `types=text` (say, a second pipeline's, or a URL edited later): its
/// columns keep their types and take the rows, as a table made with text
/// keeps text the other way round; the audit through either URL is equal.
#[test]
fn a_typed_table_written_through_a_types_text_url_keeps_its_types() {
    let db = ch::db("typed_then_text");
    if !modern(&db) {
        eprintln!(
            "SKIPPED a_typed_table_written_through_a_types_text_url_keeps_its_types: this server has no typed columns (the chdb engine runs it)"
        );
        return;
    }
    let pgdb = common::pg::db("ch_typed_text");
    let (src, slot) = (pgdb.url(), "s_ch_typed_text");
    let s = utc_session(&pgdb);
    s.exec("CREATE TABLE public.t (id int PRIMARY KEY, ts timestamptz, u uuid, b boolean)");
    s.exec("INSERT INTO public.t VALUES (1, '2024-01-01 00:00:00.5+00', 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', true)");
    common::pg::init_capture(&src, slot, &["public.t"]);
    let url = db.url();
    let r = pipeline(&format!(
        "{{snapshot}} -q --source {} --slot {slot} | {{apply}} --target {} -q",
        shell_quote(&src),
        shell_quote(&url)
    ));
    expect(&r, 0, "snapshot | apply");
    let typed = column_type(&db, "public_t", "ts");
    assert!(typed.contains("DateTime64"), "{typed}");
    s.exec("INSERT INTO public.t VALUES (2, '1999-12-31 23:59:59+00', NULL, false)");
    s.exec("UPDATE public.t SET ts = '2030-06-01 12:00:00+00' WHERE id = 1");
    let text = db.url_with("types=text");
    expect(
        &catch_up(&src, slot, &text, false),
        0,
        "changes through a types=text URL",
    );
    assert_eq!(column_type(&db, "public_t", "ts"), typed);
    audit_equal(&src, slot, &text);
    audit_equal(&src, slot, &url);
}

/// `arrays=empty-for-null`: array columns that may be NULL become
/// `Array(Nullable(T))` and hold a NULL as `[]`; the audit compares under
/// that rule (and still finds a changed element). Without the option they
/// stay `String`, NULL apart from `{}`; a table made with the option and
/// then written without it keeps its Arrays and refuses a NULL, naming the
/// option; a table made without it keeps its String columns with it.
#[test]
fn arrays_empty_for_null_gives_nullable_arrays_array_columns() {
    let db = ch::db("arrays_empty");
    if !modern(&db) {
        eprintln!(
            "SKIPPED arrays_empty_for_null_gives_nullable_arrays_array_columns: this server has no typed columns (the chdb engine runs it)"
        );
        return;
    }
    let exact = ch::db("arrays_exact");
    let pgdb = common::pg::db("ch_arrays");
    let (src, slot) = (pgdb.url(), "s_ch_arrays");
    let s = utc_session(&pgdb);
    s.exec("CREATE TABLE public.a (id int PRIMARY KEY, ints integer[], tags text[])");
    s.exec("INSERT INTO public.a VALUES (1, NULL, '{x,NULL}'), (2, '{}', NULL), (3, '{1,NULL,3}', '{}')");
    common::pg::init_capture(&src, slot, &["public.a"]);
    let url = db.url_with("arrays=empty-for-null");
    for t in [&url, &exact.url()] {
        expect(
            &common::pg::snapshot_into(&src, slot, t),
            0,
            "snapshot | apply",
        );
    }
    assert_eq!(
        column_type(&db, "public_a", "ints"),
        "Array(Nullable(Int32))"
    );
    assert_eq!(
        column_type(&db, "public_a", "tags"),
        "Array(Nullable(String))"
    );
    assert_eq!(column_type(&exact, "public_a", "ints"), "Nullable(String)");
    s.exec("INSERT INTO public.a VALUES (4, NULL, NULL)");
    s.exec("UPDATE public.a SET ints = NULL, tags = '{y}' WHERE id = 3");
    s.exec("UPDATE public.a SET ints = '{7}' WHERE id = 1");
    for t in [&url, &exact.url()] {
        expect(&catch_up(&src, slot, t, false), 0, "capture | apply");
        audit_equal(&src, slot, t);
    }
    assert_eq!(
        db.rows("SELECT id, toString(ints), toString(tags) FROM public_a__current ORDER BY id")
            .into_iter()
            .map(|r| r.iter().map(|v| tsv_unescape(v)).collect::<Vec<_>>())
            .collect::<Vec<_>>(),
        [
            ["1", "[7]", "['x',NULL]"],
            ["2", "[]", "[]"],
            ["3", "[]", "['y']"],
            ["4", "[]", "[]"],
        ]
        .map(|r| r.map(String::from).to_vec())
        .to_vec()
    );
    assert_eq!(
        exact.rows("SELECT id, ints FROM public_a__current WHERE ints IS NULL ORDER BY id"),
        [["3", "\\N"], ["4", "\\N"]]
            .map(|r| r.map(String::from).to_vec())
            .to_vec()
    );
    // The audit still compares the arrays: an element changed by hand.
    db.query("ALTER TABLE public_a UPDATE tags = ['z'] WHERE id = 3 SETTINGS mutations_sync = 1");
    let r = exec(
        AUDIT,
        &["--source", &src, "--slot", slot, "--target", &url],
        None,
    );
    expect(&r, 1, "audit of a changed array");
    db.query("ALTER TABLE public_a UPDATE tags = ['y'] WHERE id = 3 SETTINGS mutations_sync = 1");
    // Written without the option, the table keeps its Arrays, and a NULL
    // is refused naming the option; with it, a table of String keeps them.
    s.exec("UPDATE public.a SET ints = NULL WHERE id = 1");
    let r = catch_up(&src, slot, &db.url(), false);
    expect(&r, 1, "a NULL into an Array without the option");
    assert!(r.stderr.contains("arrays=empty-for-null"), "{}", r.stderr);
    let r = catch_up(&src, slot, &db.url_with("types=text"), false);
    expect(&r, 1, "a NULL into an Array through types=text");
    assert!(r.stderr.contains("arrays=empty-for-null"), "{}", r.stderr);
    expect(
        &catch_up(&src, slot, &url, false),
        0,
        "the NULL through the option",
    );
    audit_equal(&src, slot, &url);
    let r = catch_up(&src, slot, &exact.url_with("arrays=empty-for-null"), false);
    expect(&r, 0, "a table of String columns through the option");
    assert_eq!(column_type(&exact, "public_a", "ints"), "Nullable(String)");
    audit_equal(&src, slot, &exact.url());
}
