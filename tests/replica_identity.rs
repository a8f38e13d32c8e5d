//! Capture without REPLICA IDENTITY FULL (docs/POSTGRES.md, "Replica
//! identity"; docs/FORMAT.md, "Key-only before images and unchanged
//! values"): a PostgreSQL table left at its default identity, with TOASTed
//! text (compressed and not) and jsonb, changed every way; its stream
//! carries key-only old rows and unchanged values; the SQLite projection,
//! the PostgreSQL target and ClickHouse (both engines, on the server
//! `tests/common/ch.rs` starts) fill them and end equal to the source, each
//! TOASTed value checked by a digest computed on both sides; a target that
//! lacks a row an update needs fails naming it with its cursor unchanged; a
//! publication with a column list works.

mod common;

use common::ch;
use common::pg::{self, Session};
use common::sqlite::{exec, expect, pipeline, shell_quote, APPLY, AUDIT, CAPTURE};
use common::Run;
use sha2::{Digest, Sha256};

/// The table: small columns, `big` (text that compresses but stays over
/// the TOAST threshold: stored compressed out of line), `raw` (storage
/// EXTERNAL: out of line, not compressed), `j` (jsonb, out of line).
fn make_table(s: &Session) {
    s.exec(
        "CREATE TABLE public.docs (id int PRIMARY KEY, n int, note text, big text, raw text, j jsonb, bin bytea)",
    );
    s.exec("ALTER TABLE public.docs ALTER COLUMN raw SET STORAGE EXTERNAL");
    // 6.4 kB of hex and 20 kB of a repeated pair: compresses, and stays
    // over the threshold after it.
    s.exec(
        "CREATE FUNCTION big_text(seed int) RETURNS text LANGUAGE sql AS \
         $$ SELECT string_agg(md5((seed * 1000 + g)::text), '') || repeat('ab', 10000) FROM generate_series(1, 200) g $$",
    );
    s.exec(
        "INSERT INTO public.docs SELECT g, g, E'\\uFEFFnote \\U0001F600 ' || g, big_text(g), \
         repeat(chr(1000 + g), 3000), jsonb_build_object('k', (SELECT string_agg(md5((g * 7 + i)::text), '') FROM generate_series(1, 130) i), 'é', repeat('é', 10), 'n', g), '\\x00ff'::bytea \
         FROM generate_series(1, 6) g",
    );
    // What the table is meant to hold: `big` compressed and `raw` not (that
    // they are out of line shows in the stream: their unchanged values).
    if pg::major_version() >= 14 {
        assert_eq!(
            s.value(
                "SELECT bool_and(pg_column_compression(big) IS NOT NULL AND pg_column_compression(raw) IS NULL) \
                 FROM public.docs"
            ),
            "t"
        );
    }
}

/// Every kind of change the default identity sends differently.
fn change_everything(s: &Session) {
    // Small columns only: the TOASTed ones come as unchanged.
    s.exec("UPDATE public.docs SET n = n + 100 WHERE id <= 3");
    // A TOASTed column changed; the others unchanged.
    s.exec("UPDATE public.docs SET big = big || 'tail', n = NULL WHERE id = 2");
    // A key change: the old key only.
    s.exec("UPDATE public.docs SET id = 40 WHERE id = 4");
    // A delete: the key only.
    s.exec("DELETE FROM public.docs WHERE id = 5");
    // Inserted and updated in one transaction, beside an update of an
    // older row; NULL is not unchanged.
    s.exec(
        "BEGIN; \
         INSERT INTO public.docs VALUES (10, 1, 'new', big_text(10), repeat('r', 4000), '{\"a\": [1, 2.50]}', NULL); \
         UPDATE public.docs SET n = 2 WHERE id = 10; \
         UPDATE public.docs SET note = NULL WHERE id = 1; \
         UPDATE public.docs SET raw = raw || '!' WHERE id = 10; \
         COMMIT",
    );
    s.exec("UPDATE public.docs SET j = j || '{\"more\": true}' WHERE id = 6");
}

/// Digests of every row's values, in key order, as the source computes
/// them (`md5` of each text, of jsonb's text), independent of MoonCDC.
fn source_digests(s: &Session) -> Vec<Vec<Option<String>>> {
    s.query("SELECT id::text, n::text, md5(note), md5(big), md5(raw), md5(j::text), encode(bin, 'hex') FROM public.docs ORDER BY docs.id")
}

fn sha256_hex(b: &[u8]) -> String {
    // No md5 crate here: the SQLite side is compared through sha256 of the
    // bytes, and the same digest computed by PostgreSQL.
    hex::encode(Sha256::digest(b))
}

/// The source's sha256 of each TOASTed value (for the SQLite projection).
fn source_sha256(s: &Session) -> Vec<Vec<Option<String>>> {
    s.query(
        "SELECT id::text, encode(sha256(convert_to(big, 'UTF8')), 'hex'), encode(sha256(convert_to(raw, 'UTF8')), 'hex'), \
         encode(sha256(convert_to(note, 'UTF8')), 'hex') FROM public.docs ORDER BY docs.id",
    )
}

fn sqlite_sha256(path: &std::path::Path) -> Vec<Vec<Option<String>>> {
    let c = rusqlite::Connection::open(path).unwrap();
    let mut st = c
        .prepare("SELECT id, big, raw, note FROM \"public.docs\" ORDER BY id")
        .unwrap();
    let rows = st
        .query_map([], |r| {
            let id: i64 = r.get(0)?;
            let mut out = vec![Some(id.to_string())];
            for i in 1..4 {
                let v: Option<String> = r.get(i)?;
                out.push(v.map(|t| sha256_hex(t.as_bytes())));
            }
            Ok(out)
        })
        .unwrap();
    rows.map(Result::unwrap).collect()
}

/// `mooncdc-capture` of what follows the cursor `after`; it must succeed.
#[track_caller]
fn read_after(src: &str, slot: &str, after: &str) -> Run {
    let r = exec(
        CAPTURE,
        &["--source", src, "--slot", slot, "--after", after],
        None,
    );
    expect(&r, 0, "capture");
    r
}

fn capture(src: &str, slot: &str, target: &str, compact: bool) -> Run {
    pipeline(&format!(
        "{{capture}} --source {src} --slot {slot} --after \"$({{apply}} cursor --target {t})\" {c} | {{apply}} --target {t} -q",
        src = shell_quote(src),
        t = shell_quote(target),
        c = if compact { "| {compact}" } else { "" }
    ))
}

#[track_caller]
fn audit_equal(src: &str, slot: &str, target: &str, what: &str) {
    let r = exec(
        AUDIT,
        &["--source", src, "--slot", slot, "--target", target],
        None,
    );
    expect(&r, 0, what);
    assert!(
        r.stdout_str().trim_end().ends_with("equal"),
        "{what}:\n{}",
        r.stdout_str()
    );
}

fn init_default(src: &str, slot: &str, extra: &[&str]) -> Run {
    let mut args = vec![
        "init",
        "--source",
        src,
        "--slot",
        slot,
        "--table",
        "public.docs",
        "--replica-identity",
        "default",
    ];
    args.extend_from_slice(extra);
    exec(CAPTURE, &args, None)
}

fn relreplident(s: &Session) -> String {
    s.value("SELECT relreplident FROM pg_class WHERE oid = 'public.docs'::regclass")
}

#[test]
fn default_identity_reaches_sqlite_and_postgres_exactly() {
    let pgdb = pg::db("ri_default");
    let (src, slot) = (pgdb.url(), "s_ri_default");
    let s = pgdb.session();
    make_table(&s);
    // FULL first (init's default), then back to the default identity.
    common::pg::init_capture(&src, slot, &["public.docs"]);
    assert_eq!(relreplident(&s), "f");
    expect(
        &init_default(&src, slot, &[]),
        0,
        "init --replica-identity default",
    );
    assert_eq!(relreplident(&s), "d", "init leaves the table at DEFAULT");
    let r = exec(CAPTURE, &["verify", "--source", &src, "--slot", slot], None);
    expect(&r, 0, "verify");
    assert!(
        r.stdout_str()
            .contains("table public.docs: replica identity DEFAULT")
            && r.stdout_str().contains("installed and current"),
        "{}",
        r.stdout_str()
    );
    let r = exec(
        CAPTURE,
        &[
            "status",
            "--source",
            &src,
            "--slot",
            slot,
            "--output-format",
            "json",
        ],
        None,
    );
    expect(&r, 0, "status");
    let j: serde_json::Value = serde_json::from_str(r.stdout_str().trim()).unwrap();
    assert_eq!(j["replica_identity"][0]["identity"], "default", "{j}");

    let dir = tempfile::tempdir().unwrap();
    let plain = format!("sqlite:{}", dir.path().join("plain.db").display());
    let compacted = format!("sqlite:{}", dir.path().join("compacted.db").display());
    let target_db = pg::db("ri_default_target");
    let pgt = target_db.url();
    for t in [&plain, &compacted, &pgt] {
        expect(
            &common::pg::snapshot_into(&src, slot, t),
            0,
            "snapshot | apply",
        );
    }
    change_everything(&s);
    assert_eq!(relreplident(&s), "d", "still DEFAULT after the changes");

    // What the stream says: key-only old rows and unchanged values.
    let after = exec(APPLY, &["cursor", "--target", &plain], None);
    let r = read_after(&src, slot, after.stdout_str().trim());
    let text = r.stdout_str();
    assert!(
        text.contains("\"before_key\":[[\"integer\",\"4\"]]"),
        "{text}"
    );
    assert!(
        text.contains("\"operation\":\"delete\",\"before_key\":[[\"integer\",\"5\"]]"),
        "{text}"
    );
    // The small-column update: big (compressed), raw (not) and j unsent.
    assert!(
        text.contains("[\"unchanged\"],[\"unchanged\"],[\"unchanged\"],[\"blob\",\"00ff\"]]"),
        "{text}"
    );
    assert!(
        !text.contains("\"before\":"),
        "no whole old row under DEFAULT: {text}"
    );

    expect(
        &capture(&src, slot, &plain, false),
        0,
        "capture | apply (SQLite)",
    );
    expect(
        &capture(&src, slot, &compacted, true),
        0,
        "capture | compact | apply (SQLite)",
    );
    expect(
        &capture(&src, slot, &pgt, false),
        0,
        "capture | apply (PostgreSQL)",
    );
    for t in [&plain, &compacted, &pgt] {
        audit_equal(&src, slot, t, "audit after the changes");
    }
    // Every TOASTed value byte for byte, by digests computed on each side.
    let want = source_sha256(&s);
    assert_eq!(want.len(), 6);
    for f in ["plain.db", "compacted.db"] {
        assert_eq!(sqlite_sha256(&dir.path().join(f)), want, "{f}");
    }
    assert_eq!(source_digests(&target_db.session()), source_digests(&s));

    // A target that lacks a row an update needs: refused, naming table,
    // key and sequence; its cursor does not move.
    let proj = dir.path().join("plain.db");
    let c = rusqlite::Connection::open(&proj).unwrap();
    c.execute("DELETE FROM \"public.docs\" WHERE id = 3", [])
        .unwrap();
    drop(c);
    let before = exec(APPLY, &["cursor", "--target", &plain], None);
    s.exec("UPDATE public.docs SET n = 0 WHERE id = 3");
    let r = capture(&src, slot, &plain, false);
    expect(&r, 1, "apply of an update the target has no row for");
    assert!(
        r.stderr.contains("public.docs")
            && r.stderr.contains("[[\"integer\",\"3\"]]")
            && r.stderr.contains("event "),
        "{}",
        r.stderr
    );
    let now = exec(APPLY, &["cursor", "--target", &plain], None);
    assert_eq!(
        now.stdout_str(),
        before.stdout_str(),
        "the cursor did not move"
    );
    // The PostgreSQL target the same way.
    target_db.exec("DELETE FROM public.docs WHERE id = 3");
    let r = capture(&src, slot, &pgt, false);
    expect(&r, 1, "PostgreSQL target without the row");
    assert!(
        r.stderr.contains("key [[\"integer\",\"3\"]]"),
        "{}",
        r.stderr
    );
}

/// The ClickHouse target, replacing and history engines: whole rows
/// written from the rows it holds, equal to the source. The table starts
/// under FULL and moves to the default identity mid-stream; one target gets
/// the changes merged into one batch (whole old rows, then key-only ones of
/// the same rows: the batch's own rows are written before they are read
/// back), the other compacted. A second table has a UUID key (a typed key
/// column on servers with typed columns).
#[test]
fn default_identity_reaches_clickhouse_exactly() {
    let pgdb = pg::db("ri_clickhouse");
    let (src, slot) = (pgdb.url(), "s_ri_clickhouse");
    let s = pgdb.session();
    make_table(&s);
    s.exec("CREATE TABLE public.ukeys (id uuid PRIMARY KEY, at timestamptz, body text)");
    s.exec(
        "INSERT INTO public.ukeys SELECT md5(g::text)::uuid, '2024-05-06 07:08:09.123456+02', big_text(g) \
         FROM generate_series(1, 3) g",
    );
    common::pg::init_capture(&src, slot, &["public.docs", "public.ukeys"]);
    let db = ch::db("ri_replacing");
    let hist = ch::db("ri_history");
    let (url, hurl) = (db.url(), hist.url_with("engine=history"));
    for t in [&url, &hurl] {
        expect(
            &common::pg::snapshot_into(&src, slot, t),
            0,
            "snapshot | apply",
        );
    }
    s.exec("UPDATE public.docs SET n = n * 2, raw = raw || 'F' WHERE id IN (1, 6)");
    common::pg::init_default_identity(&src, slot, &["public.docs", "public.ukeys"]);
    assert_eq!(relreplident(&s), "d");
    change_everything(&s);
    s.exec("UPDATE public.ukeys SET at = at + interval '1 day'");
    s.exec("DELETE FROM public.ukeys WHERE id = md5('2')::uuid");
    let r = pipeline(&format!(
        "{{capture}} --source {src} --slot {slot} --after \"$({{apply}} cursor --target {t})\" | {{merge}} | {{apply}} --target {t} -q",
        src = shell_quote(&src),
        t = shell_quote(&url)
    ));
    expect(&r, 0, "capture | merge | apply (ClickHouse)");
    expect(
        &capture(&src, slot, &hurl, true),
        0,
        "capture | compact | apply (history)",
    );
    audit_equal(&src, slot, &url, "audit of ClickHouse");
    let ch_md5 = |sql: &str| -> Vec<Vec<String>> { db.rows(sql) };
    let want: Vec<Vec<String>> = s
        .query(
            "SELECT id::text, md5(big), md5(raw), md5(j::text) FROM public.docs ORDER BY docs.id",
        )
        .into_iter()
        .map(|r| r.into_iter().map(|v| v.unwrap()).collect())
        .collect();
    assert_eq!(
        ch_md5("SELECT toString(id), lower(hex(MD5(big))), lower(hex(MD5(raw))), lower(hex(MD5(j))) FROM public_docs__current ORDER BY id"),
        want
    );
    // History: each live key's newest row is the source's, whole; each
    // deleted key's newest row is its delete, with the old row's values.
    let newest: Vec<Vec<String>> = hist.rows(
        "SELECT toString(id), lower(hex(MD5(big))), lower(hex(MD5(raw))), lower(hex(MD5(j))), cdc_operation \
         FROM public_docs WHERE cdc_operation != 'truncate' \
         ORDER BY id, cdc_lsn DESC, cdc_tx_ordinal DESC LIMIT 1 BY id",
    );
    let (live, gone): (Vec<_>, Vec<_>) = newest
        .into_iter()
        .partition(|r| want.iter().any(|w| w[0] == r[0]));
    assert_eq!(
        live.iter().map(|r| r[..4].to_vec()).collect::<Vec<_>>(),
        want
    );
    assert!(live.iter().all(|r| r[4] != "delete"), "{live:?}");
    assert_eq!(
        gone.iter()
            .map(|r| (r[0].as_str(), r[4].as_str()))
            .collect::<Vec<_>>(),
        vec![("4", "delete"), ("5", "delete")],
        "the moved key and the deleted one"
    );
    assert!(gone.iter().all(|r| r[1].len() == 32), "{gone:?}");

    // A column added and the table changed by key alone in the same
    // transaction: the old rows are read in the shape the table has until
    // the batch's commit, then carried into the new one.
    s.exec(
        "BEGIN; ALTER TABLE public.docs ADD COLUMN tag text; \
         UPDATE public.docs SET n = 5, tag = 't' WHERE id = 1; UPDATE public.docs SET n = 6 WHERE id = 2; COMMIT",
    );
    expect(
        &capture(&src, slot, &url, false),
        0,
        "capture | apply of a schema change and changes by key",
    );
    expect(
        &capture(&src, slot, &hurl, false),
        0,
        "the same into the history",
    );
    audit_equal(&src, slot, &url, "audit after the schema change");

    // A key the target does not hold: refused with its key, cursor kept.
    let before = exec(APPLY, &["cursor", "--target", &url], None);
    let r = pipeline(&format!(
        "{{capture}} --source {src} --slot {slot} --after \"$({{apply}} cursor --target {url})\" > /dev/null",
        src = shell_quote(&src),
        url = shell_quote(&url)
    ));
    expect(&r, 0, "capture");
    // The row gone from the target (every version of it).
    db.query("ALTER TABLE public_docs DELETE WHERE id = 6");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while db
        .query("SELECT count() FROM public_docs WHERE id = 6")
        .trim()
        != "0"
    {
        assert!(
            std::time::Instant::now() < deadline,
            "the mutation never ran"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    s.exec("UPDATE public.docs SET n = -1 WHERE id = 6");
    let r = capture(&src, slot, &url, false);
    expect(&r, 1, "apply of an update ClickHouse has no row for");
    assert!(
        r.stderr.contains("public.docs") && r.stderr.contains("[[\"integer\",\"6\"]]"),
        "{}",
        r.stderr
    );
    let now = exec(APPLY, &["cursor", "--target", &url], None);
    assert_eq!(
        now.stdout_str(),
        before.stdout_str(),
        "the cursor did not move"
    );
}

/// A publication with a column list, which FULL identity cannot serve
/// (PostgreSQL would refuse the table's updates): init refuses FULL and
/// takes the default identity; the published columns arrive exactly.
#[test]
fn a_column_list_publication_works_with_the_default_identity() {
    if pg::major_version() < 15 {
        eprintln!("SKIPPED a_column_list_publication_works_with_the_default_identity: PostgreSQL 14 has no column lists");
        return;
    }
    let pgdb = pg::db("ri_columns");
    let (src, slot) = (pgdb.url(), "s_ri_columns");
    let s = pgdb.session();
    s.exec("CREATE TABLE public.docs (id int PRIMARY KEY, body text, secret text)");
    s.exec("INSERT INTO public.docs SELECT g, repeat(md5(g::text), 200), 'hidden' FROM generate_series(1, 3) g");
    s.exec("CREATE PUBLICATION cols FOR TABLE public.docs (id, body)");
    let full = exec(
        CAPTURE,
        &[
            "init",
            "--source",
            &src,
            "--slot",
            slot,
            "--publication",
            "cols",
            "--table",
            "public.docs",
        ],
        None,
    );
    expect(&full, 1, "init with FULL under a column list");
    assert!(
        full.stderr.contains("--replica-identity default"),
        "{}",
        full.stderr
    );
    expect(
        &init_default(&src, slot, &["--publication", "cols"]),
        0,
        "init --replica-identity default",
    );
    assert_eq!(relreplident(&s), "d");
    // The application's writes work.
    s.exec("UPDATE public.docs SET secret = 'x', body = body || '.' WHERE id = 1");
    let dir = tempfile::tempdir().unwrap();
    let t = format!("sqlite:{}", dir.path().join("p.db").display());
    let r = pipeline(&format!(
        "{{snapshot}} --source {src} --slot {slot} --publication cols | {{apply}} --target {t} -q",
        src = shell_quote(&src),
        t = shell_quote(&t)
    ));
    expect(&r, 0, "snapshot");
    s.exec("UPDATE public.docs SET secret = 'y' WHERE id = 2");
    s.exec("UPDATE public.docs SET body = 'short' WHERE id = 3");
    s.exec("DELETE FROM public.docs WHERE id = 1");
    let r = pipeline(&format!(
        "{{capture}} --source {src} --slot {slot} --publication cols --after \"$({{apply}} cursor --target {t})\" | {{apply}} --target {t} -q",
        src = shell_quote(&src),
        t = shell_quote(&t)
    ));
    expect(&r, 0, "capture | apply");
    let r = exec(
        AUDIT,
        &[
            "--source",
            &src,
            "--slot",
            slot,
            "--publication",
            "cols",
            "--target",
            &t,
        ],
        None,
    );
    expect(&r, 0, "audit");
    let c = rusqlite::Connection::open(dir.path().join("p.db")).unwrap();
    let got: Vec<(i64, String)> = c
        .prepare("SELECT id, body FROM \"public.docs\" ORDER BY id")
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    let want: Vec<(i64, String)> = s
        .query("SELECT id::text, body FROM public.docs ORDER BY docs.id")
        .into_iter()
        .map(|r| {
            (
                r[0].as_ref().unwrap().parse().unwrap(),
                r[1].clone().unwrap(),
            )
        })
        .collect();
    assert_eq!(got, want);
}

/// ClickHouse has no transactions: an apply killed after a batch's rows and
/// before its cursor is mended by a replay. With key-only changes the
/// replay must fill from the rows as they were before each change, even
/// after the server merged the earlier try's rows over them.
#[test]
fn a_replay_after_a_lost_cursor_fills_the_same_rows() {
    let pgdb = pg::db("ri_replay");
    let (src, slot) = (pgdb.url(), "s_ri_replay");
    let s = pgdb.session();
    make_table(&s);
    expect(
        &init_default(&src, slot, &[]),
        0,
        "init --replica-identity default",
    );
    let db = ch::db("ri_replay");
    let url = db.url();
    expect(
        &common::pg::snapshot_into(&src, slot, &url),
        0,
        "snapshot | apply",
    );
    let start = exec(APPLY, &["cursor", "--target", &url], None);
    let cursor = mooncdc::wire::Cursor::parse_json(start.stdout_str().trim()).unwrap();
    s.exec(
        "BEGIN; \
         UPDATE public.docs SET n = 11 WHERE id = 1; \
         UPDATE public.docs SET big = 'short' WHERE id = 1; \
         UPDATE public.docs SET n = 12 WHERE id = 1; \
         UPDATE public.docs SET n = 21 WHERE id = 2; \
         DELETE FROM public.docs WHERE id = 3; \
         UPDATE public.docs SET n = 61 WHERE id = 6; \
         DELETE FROM public.docs WHERE id = 6; \
         COMMIT",
    );
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("batch.jsonl");
    let r = read_after(&src, slot, start.stdout_str().trim());
    std::fs::write(&file, &r.stdout).unwrap();
    let file = file.display().to_string();
    for merge in [false, true] {
        expect(
            &exec(APPLY, &["--target", &url, "-q", &file], None),
            0,
            "apply",
        );
        audit_equal(&src, slot, &url, "audit after the batch");
        // The cursor lost, as if the apply had been killed before it.
        set_cursor(&db, &cursor);
        assert_eq!(
            exec(APPLY, &["cursor", "--target", &url], None).stdout_str(),
            start.stdout_str()
        );
        if merge {
            // The earlier try's rows merged over the ones before them.
            db.query("OPTIMIZE TABLE public_docs FINAL");
        }
        let r = exec(APPLY, &["--target", &url, "-q", &file], None);
        expect(&r, 0, "the replay");
        audit_equal(&src, slot, &url, "audit after the replay");
    }
}

/// A ClickHouse target's cursor put back to `cursor`, as an apply killed
/// amid a batch leaves it: the batch's rows written, its cursor not.
fn set_cursor(db: &ch::ChDb, cursor: &mooncdc::wire::Cursor) {
    db.query("ALTER TABLE `_mooncdc_cursor` DELETE WHERE sequence != ''");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while db.query("SELECT count() FROM `_mooncdc_cursor`").trim() != "0" {
        assert!(
            std::time::Instant::now() < deadline,
            "the mutation never ran"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    db.query(&format!(
        "INSERT INTO `_mooncdc_cursor` VALUES ({}, {}, {}, {})",
        ch::lit(&cursor.source),
        ch::lit(&cursor.sequence().to_string()),
        cursor.sequence() >> 64,
        cursor.sequence() as u64
    ));
}

/// An apply killed amid a batch (every prefix of its events, as the
/// pieces `mooncdc-split` cuts: what an earlier try wrote), its cursor not
/// moved; then ClickHouse merges the rows (the background merge, forced),
/// or `apply cleanup` runs. The re-run of the whole batch takes it and the
/// audit says equal. The batch moves rows to other keys by their keys
/// alone with TOASTed values they did not change, uses a moved-from key
/// again, and deletes a row it changed.
#[test]
fn a_crash_amid_a_batch_then_a_merge_or_a_cleanup_leaves_a_batch_its_rerun_takes() {
    let pgdb = pg::db("ri_crash");
    let (src, slot) = (pgdb.url(), "s_ri_crash");
    let s = pgdb.session();
    make_table(&s);
    expect(
        &init_default(&src, slot, &[]),
        0,
        "init --replica-identity default",
    );
    let mut targets = Vec::new();
    for k in 1..=9usize {
        for mode in ["merge", "cleanup"] {
            let db = ch::db(&format!("ri_crash_{mode}_{k}"));
            expect(
                &common::pg::snapshot_into(&src, slot, &db.url()),
                0,
                "snapshot | apply",
            );
            targets.push((k, mode, db));
        }
    }
    let start = exec(APPLY, &["cursor", "--target", &targets[0].2.url()], None);
    let start = start.stdout_str().trim().to_string();
    let cursor = mooncdc::wire::Cursor::parse_json(&start).unwrap();
    s.exec(
        "BEGIN; \
         UPDATE public.docs SET n = 11 WHERE id = 1; \
         UPDATE public.docs SET id = 101 WHERE id = 1; \
         UPDATE public.docs SET n = 12 WHERE id = 101; \
         UPDATE public.docs SET id = 102 WHERE id = 2; \
         INSERT INTO public.docs (id, n, note) VALUES (2, 0, 'again'); \
         UPDATE public.docs SET n = 31 WHERE id = 3; \
         DELETE FROM public.docs WHERE id = 3; \
         UPDATE public.docs SET id = 104, n = 40 WHERE id = 4; \
         UPDATE public.docs SET n = 61 WHERE id = 6; \
         COMMIT",
    );
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("batch.jsonl");
    std::fs::write(&file, read_after(&src, slot, &start).stdout).unwrap();
    let file = file.display().to_string();
    let modern = targets[0]
        .2
        .query("SELECT version()")
        .trim()
        .split('.')
        .next()
        .unwrap()
        .parse::<u32>()
        .unwrap()
        >= 23;
    for (k, mode, db) in &targets {
        let url = db.url();
        let pieces = dir.path().join(format!("{mode}_{k}"));
        let r = exec(
            common::sqlite::SPLIT,
            &[
                "--max-events",
                &k.to_string(),
                "--output-dir",
                &pieces.display().to_string(),
                &file,
            ],
            None,
        );
        expect(&r, 0, "split");
        let first = r.stdout_str().lines().next().unwrap().to_string();
        expect(
            &exec(APPLY, &["--target", &url, "-q", &first], None),
            0,
            "the earlier try's rows",
        );
        set_cursor(db, &cursor);
        if *mode == "merge" {
            db.query("OPTIMIZE TABLE public_docs FINAL");
        } else {
            let r = exec(APPLY, &["cleanup", "--target", &url], None);
            expect(&r, 0, "cleanup amid the batch");
            if modern {
                // Every prefix but the first writes a tombstone (the move
                // of row 1): kept for the re-run.
                let kept = r
                    .stdout_str()
                    .contains("skipped public_docs: it holds deleted rows past the cursor");
                assert_eq!(kept, *k > 1, "{k}: {}", r.stdout_str());
            }
        }
        let r = exec(APPLY, &["--target", &url, "-q", &file], None);
        expect(&r, 0, &format!("the re-run after {k} events and a {mode}"));
        audit_equal(
            &src,
            slot,
            &url,
            &format!("audit after {k} events and a {mode}"),
        );
        if *mode == "cleanup" && modern {
            let r = exec(APPLY, &["cleanup", "--target", &url], None);
            expect(&r, 0, "cleanup after the batch");
            assert!(
                r.stdout_str().contains("cleaned public_docs"),
                "{}",
                r.stdout_str()
            );
            audit_equal(&src, slot, &url, "audit after the cleanup");
        }
    }
}

/// A batch whose rows outgrow what the ClickHouse target keeps for filling
/// (32 MiB): 70 rows of 1 MB updated twice by key alone in one transaction.
/// The second round's old rows are the first round's, which the target no
/// longer keeps: it sends them before it reads them back.
#[test]
fn a_batch_past_the_fill_memory_reads_its_own_rows_back() {
    let pgdb = pg::db("ri_big");
    let (src, slot) = (pgdb.url(), "s_ri_big");
    let s = pgdb.session();
    s.exec("CREATE TABLE public.docs (id int PRIMARY KEY, n int, big text)");
    s.exec(
        "INSERT INTO public.docs SELECT g, 0, (SELECT string_agg(md5((g * 100000 + i)::text), '') \
         FROM generate_series(1, 32768) i) FROM generate_series(1, 70) g",
    );
    expect(
        &init_default(&src, slot, &[]),
        0,
        "init --replica-identity default",
    );
    let db = ch::db("ri_big");
    let url = db.url();
    expect(
        &common::pg::snapshot_into(&src, slot, &url),
        0,
        "snapshot | apply",
    );
    // The first round changes the 1 MB value, the second leaves it
    // unchanged: its old rows are the first round's.
    s.exec(
        "BEGIN; UPDATE public.docs SET n = n + 1, big = big || 'x'; UPDATE public.docs SET n = n + 1; COMMIT",
    );
    expect(&capture(&src, slot, &url, false), 0, "capture | apply");
    audit_equal(
        &src,
        slot,
        &url,
        "audit after 140 key-only updates of 1 MB rows",
    );
    let want: Vec<Vec<String>> = s
        .query("SELECT id::text, n::text, md5(big) FROM public.docs ORDER BY docs.id")
        .into_iter()
        .map(|r| r.into_iter().map(Option::unwrap).collect())
        .collect();
    assert_eq!(
        db.rows("SELECT toString(id), toString(n), lower(hex(MD5(big))) FROM public_docs__current ORDER BY id"),
        want
    );
}

/// Past the fill memory, the rows kept are let go but their keys noted: a
/// later read of keys the batch did not write goes to the table with
/// nothing sent first, so it works even after a schema change in the
/// same batch (which keeps the batch's rows from going out before the
/// commit; before, any read past the memory sent them, and this batch
/// failed with "apply the batch in two").
#[test]
fn a_batch_past_the_fill_memory_after_a_schema_change_reads_what_it_did_not_write() {
    let pgdb = pg::db("ri_big_ddl");
    let (src, slot) = (pgdb.url(), "s_ri_big_ddl");
    let s = pgdb.session();
    s.exec("CREATE TABLE public.docs (id int PRIMARY KEY, n int, big text)");
    s.exec(
        "INSERT INTO public.docs SELECT g, 0, (SELECT string_agg(md5((g * 100000 + i)::text), '') \
         FROM generate_series(1, 32768) i) FROM generate_series(1, 70) g",
    );
    common::pg::init_default_identity(&src, slot, &["public.docs"]);
    let db = ch::db("ri_big_ddl");
    let url = db.url();
    expect(
        &common::pg::snapshot_into(&src, slot, &url),
        0,
        "snapshot | apply",
    );
    // An insert, an added column (the batch now holds a row from before
    // the change, so nothing can go out before the commit), then 70
    // key-only updates of 1 MB rows: they are read 16 keys at a time, past
    // 32 MiB the rows kept are let go, and the later reads find the table
    // as the snapshot left it. (A read of a key whose row was let go would
    // still need the batch's rows sent, and is refused here.)
    s.exec(
        "BEGIN; INSERT INTO public.docs SELECT 1000, 0, big FROM public.docs WHERE id = 1; ALTER TABLE public.docs ADD COLUMN c int; \
         UPDATE public.docs SET n = n + 1, c = id WHERE id <= 70; COMMIT",
    );
    expect(&capture(&src, slot, &url, false), 0, "capture | apply");
    audit_equal(
        &src,
        slot,
        &url,
        "audit after 70 key-only updates past the fill memory",
    );
    let want: Vec<Vec<String>> = s
        .query("SELECT id::text, n::text, c::text, md5(big) FROM public.docs WHERE id <= 70 ORDER BY docs.id")
        .into_iter()
        .map(|r| r.into_iter().map(Option::unwrap).collect())
        .collect();
    assert_eq!(
        db.rows("SELECT toString(id), toString(n), toString(c), lower(hex(MD5(big))) FROM public_docs__current WHERE id <= 70 ORDER BY id"),
        want
    );
}

/// A batch that adds a column and sets it on a row it changed before,
/// applied whole by an earlier try whose cursor never moved (a kill before
/// it), then merged: the re-run's header lacks the column, which the table
/// already has. The column is kept (the earlier try's rows past the cursor
/// hold its values, and stand for the merged changes), not dropped and
/// added again empty. Found by the random-history test (seed
/// 1796661337549415017).
#[test]
fn a_rerun_keeps_a_column_its_earlier_try_added_and_filled() {
    let pgdb = pg::db("ri_rerun_add");
    let (src, slot) = (pgdb.url(), "s_ri_rerun_add");
    let s = pgdb.session();
    s.exec("CREATE TABLE public.r (id int PRIMARY KEY, n int, big text)");
    s.exec(
        "INSERT INTO public.r SELECT g, g, repeat(md5(g::text), 100) FROM generate_series(1, 5) g",
    );
    common::pg::init_default_identity(&src, slot, &["public.r"]);
    let db = ch::db("ri_rerun_add");
    let url = db.url();
    expect(
        &common::pg::snapshot_into(&src, slot, &url),
        0,
        "snapshot | apply",
    );
    let start = exec(APPLY, &["cursor", "--target", &url], None);
    let start = start.stdout_str().trim().to_string();
    s.exec(
        "BEGIN; UPDATE public.r SET n = n + 1 WHERE id = 2; ALTER TABLE public.r ADD COLUMN c int; \
         UPDATE public.r SET c = 4 WHERE id = 2; UPDATE public.r SET n = 0 WHERE id = 3; COMMIT",
    );
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("batch.jsonl");
    std::fs::write(&file, read_after(&src, slot, &start).stdout).unwrap();
    let file = file.display().to_string();
    // The earlier try: every row and change sent, the cursor not moved.
    expect(
        &exec(APPLY, &["--target", &url, "-q", &file], None),
        0,
        "the earlier try",
    );
    set_cursor(&db, &mooncdc::wire::Cursor::parse_json(&start).unwrap());
    db.query("OPTIMIZE TABLE public_r FINAL");
    for again in ["the re-run", "the re-run again"] {
        expect(
            &exec(APPLY, &["--target", &url, "-q", &file], None),
            0,
            again,
        );
        audit_equal(&src, slot, &url, &format!("audit after {again}"));
    }
    assert_eq!(
        db.rows(
            "SELECT toString(id), toString(n), toString(c) FROM public_r__current WHERE id = 2"
        ),
        vec![vec!["2".to_string(), "3".to_string(), "4".to_string()]]
    );
}

/// A `numeric(p,s)` key is a Decimal column on every server, 18.16 among
/// them, which has no `format` table function: the old rows of changes by
/// key alone are read with decimal literals there, exactly (an update, a
/// key change, a delete, both engines).
#[test]
fn a_decimal_key_takes_changes_by_key_alone_on_clickhouse() {
    let pgdb = pg::db("ri_decimal");
    let (src, slot) = (pgdb.url(), "s_ri_decimal");
    let s = pgdb.session();
    s.exec("CREATE TABLE public.prices (sku numeric(12,3) PRIMARY KEY, v int, note text)");
    s.exec(
        "INSERT INTO public.prices SELECT g * 1.5 - 7.25, g, 'n' || g FROM generate_series(1, 10) g",
    );
    common::pg::init_default_identity(&src, slot, &["public.prices"]);
    let db = ch::db("ri_decimal");
    let hist = ch::db("ri_decimal_h");
    let (url, hurl) = (db.url(), hist.url_with("engine=history"));
    for t in [&url, &hurl] {
        expect(
            &common::pg::snapshot_into(&src, slot, t),
            0,
            "snapshot | apply",
        );
    }
    // Key-only old rows: the unchanged note is filled from the target.
    s.exec("UPDATE public.prices SET v = v * 10 WHERE sku < 0");
    s.exec("UPDATE public.prices SET sku = 1000.125 WHERE sku = 1.75");
    s.exec("DELETE FROM public.prices WHERE sku = 4.75");
    for t in [&url, &hurl] {
        expect(&capture(&src, slot, t, false), 0, "capture | apply");
    }
    audit_equal(&src, slot, &url, "audit of the decimal-keyed table");
    let want: Vec<Vec<String>> = s
        .query("SELECT sku::text, v::text, note FROM public.prices ORDER BY prices.sku")
        .into_iter()
        .map(|r| r.into_iter().map(|v| v.unwrap()).collect())
        .collect();
    assert_eq!(
        db.rows("SELECT toString(sku), toString(v), note FROM public_prices__current ORDER BY sku")
            .into_iter()
            .map(|r| {
                // Modern servers drop a decimal's trailing fraction zeros.
                let mut r = r;
                r[0] = format!("{:.3}", r[0].parse::<f64>().unwrap());
                r
            })
            .collect::<Vec<_>>(),
        want
    );
}

/// An identity by an index on other columns than the key names a changed
/// row without its key, which no target can find. The change logged so
/// stays refused after REPLICA IDENTITY DEFAULT (the WAL holds it as it
/// was made), so the error says so and gives what works: the ALTER for
/// later changes and, for the change already logged, a new slot and
/// snapshot. Following that advice works.
#[test]
fn an_identity_by_another_index_is_refused_with_advice_that_works() {
    let pgdb = pg::db("ri_index");
    let (src, slot) = (pgdb.url(), "s_ri_index");
    let s = pgdb.session();
    s.exec("CREATE TABLE public.people (id int PRIMARY KEY, email text NOT NULL, n int)");
    s.exec("CREATE UNIQUE INDEX people_email ON public.people (email)");
    s.exec("INSERT INTO public.people SELECT g, 'p' || g || '@x', g FROM generate_series(1, 5) g");
    let init = |slot: &str| common::pg::init_default_identity(&src, slot, &["public.people"]);
    init(slot);
    let dir = tempfile::tempdir().unwrap();
    let first = format!("sqlite:{}", dir.path().join("first.db").display());
    expect(
        &common::pg::snapshot_into(&src, slot, &first),
        0,
        "snapshot | apply",
    );
    s.exec("ALTER TABLE public.people REPLICA IDENTITY USING INDEX people_email");
    s.exec("UPDATE public.people SET email = 'new@x' WHERE id = 2");
    let refused = |what: &str| {
        let r = capture(&src, slot, &first, false);
        expect(&r, 1, what);
        for part in [
            "public.people",
            "REPLICA IDENTITY DEFAULT",
            "already logged",
            "new slot",
        ] {
            assert!(r.stderr.contains(part), "{what}: {part:?} in {}", r.stderr);
        }
    };
    refused("the change under an identity by another index");
    // The advice, step one: later changes carry the key; the change
    // already logged is still refused, as the message said.
    s.exec("ALTER TABLE public.people REPLICA IDENTITY DEFAULT");
    s.exec("UPDATE public.people SET n = 30 WHERE id = 3");
    refused("the same change after REPLICA IDENTITY DEFAULT");
    // Step two: a new slot and a snapshot into a new target; later
    // changes flow and the audit says equal.
    init("s_ri_index2");
    let second = format!("sqlite:{}", dir.path().join("second.db").display());
    expect(
        &common::pg::snapshot_into(&src, "s_ri_index2", &second),
        0,
        "snapshot from the new slot",
    );
    s.exec("UPDATE public.people SET email = 'newer@x', n = 40 WHERE id = 4");
    s.exec("DELETE FROM public.people WHERE id = 5");
    expect(
        &capture(&src, "s_ri_index2", &second, false),
        0,
        "capture | apply from the new slot",
    );
    audit_equal(&src, "s_ri_index2", &second, "audit of the new target");
    s.exec("SELECT pg_drop_replication_slot('s_ri_index')");
}

/// Random histories under the default identity (inserts, key-only updates
/// with TOASTed values left unchanged, updates of those values, moves to
/// new keys, deletes, keys used again, now and then a column added), one
/// transaction a round, into ClickHouse raw (replacing, both with crashes:
/// a random prefix of the batch written and the cursor not moved, then a
/// forced merge, a cleanup or nothing, then the whole batch, then the whole
/// batch again), ClickHouse compacted, the history engine, and the SQLite
/// projection; after every round each target's audit says equal (every
/// value compared exactly).
#[test]
fn random_histories_with_crashes_merges_and_cleanups_reach_every_target_exactly() {
    let mut rng = common::sqlite::Rng::new(common::sqlite::seed("random_histories"));
    let pgdb = pg::db("ri_random");
    let (src, slot) = (pgdb.url(), "s_ri_random");
    let s = pgdb.session();
    s.exec("CREATE TABLE public.r (id int PRIMARY KEY, n int, note text, big text)");
    s.exec("ALTER TABLE public.r ALTER COLUMN big SET STORAGE EXTERNAL");
    s.exec(
        "INSERT INTO public.r SELECT g, g, 'n' || g, repeat(md5(g::text), 100) FROM generate_series(1, 12) g",
    );
    common::pg::init_default_identity(&src, slot, &["public.r"]);
    let raw = ch::db("ri_random_raw");
    let compacted = ch::db("ri_random_compacted");
    let hist = ch::db("ri_random_history");
    let dir = tempfile::tempdir().unwrap();
    let sq = format!("sqlite:{}", dir.path().join("r.db").display());
    let hurl = hist.url_with("engine=history");
    for t in [&raw.url(), &compacted.url(), &hurl, &sq] {
        expect(
            &common::pg::snapshot_into(&src, slot, t),
            0,
            "snapshot | apply",
        );
    }
    let modern = raw
        .query("SELECT version()")
        .trim()
        .split('.')
        .next()
        .unwrap()
        .parse::<u32>()
        .unwrap()
        >= 23;
    let (mut next_id, mut added) = (1000, 0);
    for round in 0..12 {
        // The round's transaction: random changes of random rows.
        let ids: Vec<i64> = s
            .query("SELECT id::text FROM public.r ORDER BY id")
            .into_iter()
            .map(|r| r[0].clone().unwrap().parse().unwrap())
            .collect();
        let mut sql = vec!["BEGIN".to_string()];
        for _ in 0..(3 + rng.below(10)) {
            let pick = |rng: &mut common::sqlite::Rng| ids[rng.below(ids.len() as u64) as usize];
            let id = pick(&mut rng);
            sql.push(match rng.below(10) {
                0 | 1 => format!("UPDATE public.r SET n = n + 1 WHERE id = {id}"),
                2 => format!("UPDATE public.r SET big = big || 'x', n = 0 WHERE id = {id}"),
                3 | 4 => {
                    next_id += 1;
                    format!("UPDATE public.r SET id = {next_id} WHERE id = {id}")
                }
                5 => format!("DELETE FROM public.r WHERE id = {id}"),
                // A key used again (a moved-from or deleted one, or a new one).
                6 | 7 => format!(
                    "INSERT INTO public.r VALUES ({k}, 1, 'again', repeat('y', 3000)) ON CONFLICT (id) DO UPDATE SET n = -1",
                    k = 1 + rng.below(14)
                ),
                8 => format!("UPDATE public.r SET note = note || '!' WHERE id = {id}"),
                _ => {
                    next_id += 1;
                    format!("INSERT INTO public.r VALUES ({next_id}, 5, 'new', repeat('z', 3000))")
                }
            });
        }
        if rng.below(6) == 0 && added < 2 {
            added += 1;
            // A row changed after it, so that the stream describes the
            // table again (a change of shape alone is carried with the
            // table's next change).
            let at = 1 + rng.below(sql.len() as u64 - 1) as usize;
            sql.insert(at, format!("ALTER TABLE public.r ADD COLUMN c{added} int"));
            sql.insert(
                at + 1,
                format!("UPDATE public.r SET c{added} = {round} WHERE id = (SELECT min(id) FROM public.r)"),
            );
        }
        sql.push("COMMIT".into());
        s.exec(&sql.join("; "));
        let what = format!("round {round}: {}", sql.join("; "));

        let start = exec(APPLY, &["cursor", "--target", &raw.url()], None);
        let start = start.stdout_str().trim().to_string();
        let file = dir.path().join(format!("batch{round}.jsonl"));
        std::fs::write(&file, read_after(&src, slot, &start).stdout).unwrap();
        let file = file.display().to_string();
        // ClickHouse, raw: an earlier try killed amid the batch, then a
        // merge, a cleanup or nothing, then the batch, then again.
        let events = std::fs::read_to_string(&file)
            .unwrap()
            .lines()
            .filter(|l| l.contains("\"operation\""))
            .count();
        if events > 1 {
            let k = 1 + rng.below(events as u64 - 1);
            let pieces = dir.path().join(format!("pieces{round}"));
            let r = exec(
                common::sqlite::SPLIT,
                &[
                    "--max-events",
                    &k.to_string(),
                    "--output-dir",
                    &pieces.display().to_string(),
                    &file,
                ],
                None,
            );
            expect(&r, 0, "split");
            let first = r.stdout_str().lines().next().unwrap().to_string();
            expect(
                &exec(APPLY, &["--target", &raw.url(), "-q", &first], None),
                0,
                &format!("{what}: the earlier try"),
            );
            set_cursor(&raw, &mooncdc::wire::Cursor::parse_json(&start).unwrap());
            match rng.below(3) {
                0 => {
                    raw.query("OPTIMIZE TABLE public_r FINAL");
                }
                1 => expect(
                    &exec(APPLY, &["cleanup", "--target", &raw.url()], None),
                    0,
                    "cleanup",
                ),
                _ => {}
            }
        }
        for again in ["the batch", "the batch again"] {
            let r = exec(APPLY, &["--target", &raw.url(), "-q", &file], None);
            expect(&r, 0, &format!("{what}: {again}"));
        }
        // The others, each from its own cursor as the docs' pipeline
        // reads: compacted, the history engine, SQLite.
        expect(
            &capture(&src, slot, &compacted.url(), true),
            0,
            &format!("{what}: compacted"),
        );
        for t in [&hurl, &sq] {
            expect(
                &capture(&src, slot, t, false),
                0,
                &format!("{what}: into {t}"),
            );
        }
        for t in [&raw.url(), &compacted.url(), &sq] {
            audit_equal(&src, slot, t, &format!("{what}: audit of {t}"));
        }
        if modern && round % 4 == 3 {
            expect(
                &exec(APPLY, &["cleanup", "--target", &raw.url()], None),
                0,
                "cleanup between applies",
            );
        }
    }
}
