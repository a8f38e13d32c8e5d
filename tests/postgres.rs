//! The PostgreSQL source end to end, through the real binaries, against one
//! throwaway cluster per run of this file (tests/common/pg.rs); each test has
//! its own database and slot, so the tests run in parallel.
//!
//! docs/FORMAT.md §3 (a sequence; docs/POSTGRES.md: `commit_lsn × 2^64 + ordinal`), §4–§8 (events,
//! schemas, batches, snapshots), §9 (the SQLite projection), §10
//! (acknowledgement), §11 (errors: exit 1, nothing appliable). Outputs are
//! parsed with `mooncdc::wire::BatchStreamReader` and compared as values;
//! REAL values are compared by their bits, end to end into the projection.
//! The differential test decodes the same WAL with wal2json through
//! `pg_recvlogical` and compares change for change.
//!
//! Every tool run also checks that the role's password (which needs
//! percent-encoding in the URL) appears nowhere in its output.

mod common;

use common::pg::{self, lit, lsn_text, parse_lsn, PgDb, Session, PASSWORD_MARK};
use common::sqlite::{
    bin, describe, dump, e_del, e_ins, e_upd, events, exec, expect, open, pipeline, seed,
    shell_quote, vb, vi, vr, vt, wait_for_every, Cell, Rng, Summary, APPLY, AUDIT, CAPTURE,
    COMPACT, SNAPSHOT, SPLIT, VN,
};
use common::{batches, http_get, Run};
use mooncdc::wire::{Batch, Cursor, Event, Limits, Operation, SnapItem, SnapshotReader, Value};
use serde_json::Value as J;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

// ---------------------------------------------------------------- positions

fn lsn_of(seq: u128) -> u64 {
    (seq >> 64) as u64
}

fn ordinal(seq: u128) -> u64 {
    seq as u64
}

fn seq_at(lsn: u64, ordinal: u64) -> u128 {
    ((lsn as u128) << 64) | ordinal as u128
}

// ---------------------------------------------------------------- running tools

/// Run a tool; its output must never contain the password.
fn run(name: &str, args: &[&str], stdin: Option<&[u8]>) -> Run {
    let r = exec(name, args, stdin);
    assert_no_secret(&r, name);
    r
}

#[track_caller]
fn assert_no_secret(r: &Run, what: &str) {
    assert!(
        !r.stderr.contains(PASSWORD_MARK),
        "{what} printed the password on standard error:\n{}",
        r.stderr
    );
    assert!(
        !String::from_utf8_lossy(&r.stdout).contains(PASSWORD_MARK),
        "{what} printed the password on standard output"
    );
}

/// Whether a tool's output holds a commit line (something a target could apply).
fn has_commit_line(out: &[u8]) -> bool {
    String::from_utf8_lossy(out).lines().any(|l| {
        serde_json::from_str::<J>(l)
            .map(|v| v["kind"] == "commit")
            .unwrap_or(false)
    })
}

/// A failure as docs/FORMAT.md §13 wants it: exit 1, a message containing each of
/// `needles`, and no commit line on standard output.
#[track_caller]
fn assert_refused(r: &Run, what: &str, needles: &[&str]) {
    expect(r, 1, what);
    for n in needles {
        assert!(
            r.stderr.contains(n),
            "{what}: the message should mention {n:?}, got:\n{}",
            r.stderr
        );
    }
    assert!(
        !has_commit_line(&r.stdout),
        "{what}: a failed run must write nothing a target could apply, got:\n{}",
        String::from_utf8_lossy(&r.stdout)
    );
}

/// One test's source (database, slot, publication) and a folder for its projection.
struct Src {
    db: PgDb,
    /// `None`: the tools' default slot name (only one test may use it).
    slot: Option<String>,
    dir: tempfile::TempDir,
}

impl Src {
    /// Database `t_<name>`, slot `s_<name>`, the default publication.
    fn new(name: &str) -> Src {
        Src {
            db: pg::db(name),
            slot: Some(format!("s_{name}")),
            dir: tempfile::tempdir().expect("temporary folder"),
        }
    }

    fn url(&self) -> String {
        self.db.url()
    }

    fn slot_name(&self) -> &str {
        self.slot.as_deref().unwrap_or("mooncdc_main")
    }

    fn session(&self) -> Session {
        self.db.session()
    }

    fn proj(&self) -> PathBuf {
        self.dir.path().join("proj.db")
    }

    fn proj_url(&self) -> String {
        format!("sqlite:{}", self.proj().display())
    }

    /// `--source URL [--slot S]`.
    fn source_args(&self) -> Vec<String> {
        let mut v = vec!["--source".to_string(), self.url()];
        if let Some(s) = &self.slot {
            v.push("--slot".into());
            v.push(s.clone());
        }
        v
    }

    fn tool(&self, name: &str, pre: &[&str], extra: &[&str]) -> Run {
        let src = self.source_args();
        let mut args: Vec<&str> = pre.to_vec();
        args.extend(src.iter().map(String::as_str));
        args.extend_from_slice(extra);
        run(name, &args, None)
    }

    /// `mooncdc-capture` (read).
    fn capture(&self, extra: &[&str]) -> Run {
        self.tool(CAPTURE, &[], extra)
    }

    /// A read that must succeed, parsed.
    #[track_caller]
    fn capture_ok(&self, extra: &[&str]) -> (Vec<u8>, Vec<Batch>) {
        let r = self.capture(extra);
        expect(&r, 0, "capture read");
        let b = batches(&r.stdout);
        (r.stdout, b)
    }

    /// A capture subcommand (`init`, `verify`, `status`, `ack` …).
    fn cmd(&self, sub: &str, extra: &[&str]) -> Run {
        self.tool(CAPTURE, &[sub], extra)
    }

    /// `init` of the named tables; returns the identity it prints.
    #[track_caller]
    fn init(&self, tables: &[&str]) -> String {
        let mut extra = Vec::new();
        for t in tables {
            extra.push("--table");
            extra.push(t);
        }
        let r = self.cmd("init", &extra);
        expect(&r, 0, "capture init");
        let id = r.stdout_str().trim().to_string();
        assert_eq!(
            id,
            self.identity(),
            "init prints the identity postgres:<system id>/<db>/<slot>"
        );
        id
    }

    /// The identity the design names: `postgres:<system identifier>/<db>/<slot>`.
    fn identity(&self) -> String {
        let sysid = self
            .db
            .cluster
            .admin("SELECT system_identifier FROM pg_control_system()");
        format!(
            "postgres:{}/{}/{}",
            sysid.trim(),
            self.db.dbname,
            self.slot_name()
        )
    }

    /// `status`, as key → value.
    #[track_caller]
    fn status(&self) -> BTreeMap<String, String> {
        let r = self.cmd("status", &[]);
        expect(&r, 0, "capture status");
        r.stdout_str()
            .lines()
            .filter_map(|l| l.split_once(": "))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    /// The slot's confirmed position, from `status`.
    fn confirmed(&self) -> u64 {
        parse_lsn(&self.status()["confirmed_flush_lsn"])
    }

    fn cursor(&self, seq: u128) -> String {
        Cursor::new(self.identity(), seq).to_json()
    }

    fn apply(&self, input: &[u8]) -> Run {
        let t = self.proj_url();
        run(APPLY, &["--target", &t, "-q"], Some(input))
    }

    #[track_caller]
    fn apply_ok(&self, input: &[u8]) -> Summary {
        let r = self.apply(input);
        expect(&r, 0, "apply");
        Summary::parse(&r.stderr)
    }

    /// Wait until the target's cursor is at or past `lsn` (any cursor for
    /// 0), at most `secs` seconds.
    #[track_caller]
    fn wait_target_at(&self, lsn: u64, secs: u64, what: &str) {
        let deadline = Instant::now() + Duration::from_secs(secs);
        while self
            .target_cursor()
            .is_none_or(|c| lsn_of(c.sequence()) < lsn)
        {
            assert!(Instant::now() < deadline, "{what}");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn target_cursor(&self) -> Option<Cursor> {
        if !self.proj().exists() {
            return None;
        }
        let t = self.proj_url();
        let r = run(APPLY, &["cursor", "--target", &t], None);
        match r.code {
            Some(0) => Some(Cursor::parse_json(r.stdout_str().trim()).expect("cursor JSON")),
            Some(1) => None,
            other => panic!("apply cursor exited {other:?}: {}", r.stderr),
        }
    }

    fn audit(&self) -> Run {
        let t = self.proj_url();
        self.tool(AUDIT, &[], &["--target", &t, "-q"])
    }

    #[track_caller]
    fn audit_equal(&self) {
        let r = self.audit();
        expect(&r, 0, "audit should find source and projection equal");
        assert!(
            r.stdout_str().trim_end().ends_with("equal"),
            "audit should end with the verdict equal:\n{}",
            r.stdout_str()
        );
    }

    /// Wait until no session holds the slot (a killed reader's walsender
    /// notices the closed connection and exits).
    fn wait_slot_inactive(&self) {
        let s = self.session();
        let q = format!(
            "SELECT active FROM pg_replication_slots WHERE slot_name = {}",
            lit(self.slot_name())
        );
        let deadline = Instant::now() + Duration::from_secs(20);
        while s.value(&q) != "f" {
            assert!(
                Instant::now() < deadline,
                "slot {} stayed active 20 s after its reader ended",
                self.slot_name()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Rows of a projection table, exactly.
    fn proj_rows(&self, table: &str) -> Vec<Vec<Cell>> {
        dump(&open(&self.proj()), table)
    }

    fn proj_count(&self, table: &str) -> i64 {
        open(&self.proj())
            .query_row(
                &format!("SELECT count(*) FROM \"{}\"", table.replace('"', "\"\"")),
                [],
                |r| r.get(0),
            )
            .expect("count projection rows")
    }

    /// A pipeline through bash with this source's URL and slot as `$SRC`, and
    /// the projection as `$PROJ` (`{capture}` and the like are the binaries).
    fn pipeline(&self, script: &str) -> Run {
        let full = format!(
            "SRC={}; SLOT={}; PROJ={}; {script}",
            shell_quote(&self.url()),
            shell_quote(self.slot_name()),
            shell_quote(&self.proj_url()),
        );
        let r = pipeline(&full);
        assert_no_secret(&r, "pipeline");
        r
    }
}

/// All events of a stream, checked: sequences strictly increase, batches are
/// contiguous, each event inside its batch's interval.
#[track_caller]
fn checked_events(b: &[Batch]) -> Vec<Event> {
    for w in b.windows(2) {
        assert_eq!(w[0].end, w[1].start, "batches are contiguous");
    }
    let mut last = 0u128;
    for batch in b {
        for e in &batch.events {
            assert!(e.sequence > batch.start.sequence() && e.sequence <= batch.end.sequence());
            assert!(e.sequence > last, "sequences strictly increase");
            last = e.sequence;
        }
    }
    events(b)
}

/// Events grouped by commit LSN (`sequence >> 64`), checking that the
/// ordinals of each transaction run 1, 2, 3 … (docs/FORMAT.md §3).
#[track_caller]
fn by_transaction(ev: &[Event]) -> Vec<(u64, Vec<Event>)> {
    let mut out: Vec<(u64, Vec<Event>)> = Vec::new();
    for e in ev {
        let lsn = lsn_of(e.sequence);
        match out.last_mut() {
            Some((l, v)) if *l == lsn => v.push(e.clone()),
            _ => out.push((lsn, vec![e.clone()])),
        }
    }
    for (lsn, v) in &out {
        let ords: Vec<u64> = v.iter().map(|e| ordinal(e.sequence)).collect();
        let want: Vec<u64> = (1..=v.len() as u64).collect();
        assert_eq!(
            ords,
            want,
            "ordinals of the transaction committed at {} restart at 1",
            lsn_text(*lsn)
        );
    }
    out
}

#[track_caller]
fn assert_described(expected: &[String], got: &[Event]) {
    let got: Vec<String> = got.iter().map(describe).collect();
    if expected != got.as_slice() {
        panic!(
            "events differ\n=== expected ===\n{}\n=== got ===\n{}",
            expected.join("\n"),
            got.join("\n")
        );
    }
}

fn same_row(a: &[Value], b: &[Value]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.same(y))
}

fn cell(v: &Value) -> Cell {
    match v {
        Value::Null => Cell::Null,
        Value::Integer(n) => Cell::Int(*n),
        Value::Real(x) => Cell::Real(x.to_bits()),
        Value::Text(s) => Cell::Text(s.as_bytes().to_vec()),
        Value::Blob(b) => Cell::Blob(b.clone()),
        Value::Unchanged => panic!("an unchanged value where a whole row belongs"),
    }
}

/// Parse a JSONL snapshot into (cursor, table → rows).
fn parse_snapshot(bytes: &[u8]) -> (Cursor, BTreeMap<String, Vec<Vec<Value>>>) {
    let mut r = SnapshotReader::jsonl(bytes, "<snapshot>", Limits::default());
    let mut cursor = None;
    let mut rows: BTreeMap<String, Vec<Vec<Value>>> = BTreeMap::new();
    while let Some(item) = r
        .next_item()
        .unwrap_or_else(|e| panic!("snapshot is not valid: {e}"))
    {
        match item {
            SnapItem::Header { cursor: c, schemas } => {
                for s in schemas {
                    rows.entry(s.table).or_default();
                }
                cursor = Some(c);
            }
            SnapItem::Row { table, row } => rows.entry(table).or_default().push(row),
            SnapItem::Commit { .. } => {}
        }
    }
    (cursor.expect("snapshot header"), rows)
}

// ---------------------------------------------------------------- init, verify, status

#[test]
fn init_creates_publication_slot_and_full_identity_then_verify_and_status() {
    let src = Src {
        db: pg::db("init"),
        slot: None,
        dir: tempfile::tempdir().unwrap(),
    };
    let s = src.session();
    s.exec("CREATE TABLE a (id int PRIMARY KEY, v text)");
    s.exec("CREATE TABLE b (k text, n int8, PRIMARY KEY (k, n))");
    s.exec("CREATE TABLE nokey (x int)");

    // The tools' defaults: slot and publication mooncdc_main.
    let id = src.init(&["public.a", "public.b"]);
    assert_eq!(id, src.identity());
    assert!(id.ends_with(&format!("/{}/mooncdc_main", src.db.dbname)));
    assert_eq!(
        s.query(
            "SELECT schemaname || '.' || tablename FROM pg_publication_tables \
             WHERE pubname = 'mooncdc_main' ORDER BY 1"
        ),
        vec![vec![Some("public.a".into())], vec![Some("public.b".into())]]
    );
    assert_eq!(
        s.query("SELECT relname, relreplident FROM pg_class WHERE relname IN ('a', 'b', 'nokey') ORDER BY 1"),
        vec![
            vec![Some("a".into()), Some("f".into())],
            vec![Some("b".into()), Some("f".into())],
            vec![Some("nokey".into()), Some("d".into())],
        ],
        "init sets REPLICA IDENTITY FULL on the captured tables only"
    );
    assert_eq!(
        s.query(
            "SELECT plugin, database, slot_type, temporary::text FROM pg_replication_slots \
             WHERE slot_name = 'mooncdc_main'"
        ),
        vec![vec![
            Some("pgoutput".into()),
            Some(src.db.dbname.clone()),
            Some("logical".into()),
            Some("false".into())
        ]]
    );

    let r = src.cmd("verify", &[]);
    expect(&r, 0, "verify after init");
    assert!(r.stdout_str().contains("installed and current"));

    let st = src.status();
    assert_eq!(st["identity"], id);
    let acked = Cursor::parse_json(&st["acknowledged"]).expect("acknowledged is a cursor");
    assert_eq!(acked.source, id);
    let confirmed = parse_lsn(&st["confirmed_flush_lsn"]);
    assert_eq!(acked.sequence(), seq_at(confirmed, 0));
    assert_eq!(st["slot_active"], "false");
    // Slot safety, visible: the test cluster leaves max_slot_wal_keep_size
    // at -1, so nothing bounds the slot's WAL.
    assert_eq!(st["wal_status"], "reserved", "{st:?}");
    assert!(st["safe_wal_size"].starts_with("unlimited"), "{st:?}");
    // The same figures typed for programs.
    let r = src.cmd("status", &["--output-format", "json"]);
    expect(&r, 0, "status as JSON");
    let j: serde_json::Value = serde_json::from_str(r.stdout_str().trim()).unwrap();
    assert_eq!(j["acknowledged"]["source"], serde_json::json!(id), "{j}");
    assert_eq!(j["slot_active"], serde_json::json!(false), "{j}");
    assert!(
        j["wal_retained_bytes"].is_u64() && j["lag_bytes"].is_u64(),
        "{j}"
    );
    assert!(j["safe_wal_size"].is_null(), "{j}");
    assert_eq!(j["wal_status"], serde_json::json!("reserved"), "{j}");
    // What the publication publishes, and that the slot is not invalidated.
    assert!(j["invalidation_reason"].is_null(), "{j}");
    assert_eq!(st["invalidation_reason"], "none", "{st:?}");
    assert_eq!(
        st["publication"], "mooncdc_main (partitions as themselves): public.a, public.b",
        "{st:?}"
    );
    assert_eq!(
        j["publication"]["tables"][0]["table"],
        serde_json::json!("public.a"),
        "{j}"
    );
    assert_eq!(
        j["publication"]["via_partition_root"],
        serde_json::json!(false),
        "{j}"
    );
    for k in [
        "restart_lsn",
        "wal_flush_lsn",
        "wal_retained_bytes",
        "lag_bytes",
    ] {
        assert!(st.contains_key(k), "status lacks {k}: {st:?}");
    }

    // init again changes nothing and prints the same identity.
    assert_eq!(src.init(&["public.a", "public.b"]), id);

    // Each table's identity, said; drift: a table whose identity capture
    // cannot use (NOTHING); init restores FULL.
    let r = src.cmd("verify", &[]);
    assert!(
        r.stdout_str().contains(
            "table public.a: replica identity FULL: updates and deletes carry the whole old row"
        ),
        "{}",
        r.stdout_str()
    );
    s.exec("ALTER TABLE a REPLICA IDENTITY NOTHING");
    let r = src.cmd("verify", &[]);
    expect(&r, 1, "verify with drift");
    assert!(
        r.stderr.contains("public.a") && r.stderr.contains("REPLICA IDENTITY NOTHING"),
        "verify names the table and the identity it cannot use:\n{}",
        r.stderr
    );
    assert_eq!(src.init(&["public.a"]), id);
    expect(&src.cmd("verify", &[]), 0, "verify after init again");

    // Tables that cannot be captured are refused by name.
    let r = src.cmd("init", &["--table", "public.nokey"]);
    expect(&r, 1, "init of a table without a primary key");
    assert!(
        r.stderr.contains("public.nokey") && r.stderr.contains("primary key"),
        "{}",
        r.stderr
    );
    let r = src.cmd("init", &["--table", "public.missing"]);
    expect(&r, 1, "init of a missing table");
    assert!(r.stderr.contains("public.missing") && r.stderr.contains("does not exist"));
}

#[test]
fn upgrade_keeps_the_captured_tables() {
    let src = Src::new("upgrade");
    let s = src.session();
    s.exec("CREATE TABLE a (id int PRIMARY KEY)");
    s.exec("CREATE TABLE c (id int PRIMARY KEY)");
    s.exec("CREATE TABLE d (id int PRIMARY KEY)");
    src.init(&["public.a"]);
    expect(
        &src.cmd(
            "init",
            &["--table", "public.d", "--replica-identity", "default"],
        ),
        0,
        "init of d at DEFAULT",
    );
    s.exec("ALTER TABLE a REPLICA IDENTITY NOTHING");
    expect(&src.cmd("verify", &[]), 1, "verify with drift");
    expect(&src.cmd("upgrade", &[]), 0, "upgrade");
    expect(&src.cmd("verify", &[]), 0, "verify after upgrade");
    assert_eq!(
        s.query("SELECT relname::text, relreplident::text FROM pg_class WHERE relname IN ('a', 'd') ORDER BY 1"),
        vec![
            vec![Some("a".into()), Some("f".into())],
            vec![Some("d".into()), Some("d".into())]
        ],
        "upgrade sets FULL where it was NOTHING and keeps DEFAULT"
    );
    assert_eq!(
        s.query("SELECT tablename::text FROM pg_publication_tables WHERE pubname = 'mooncdc_main' ORDER BY 1"),
        vec![vec![Some("a".to_string())], vec![Some("d".to_string())]],
        "upgrade captures the same tables as before"
    );
    assert_eq!(
        s.value("SELECT relreplident FROM pg_class WHERE relname = 'c'"),
        "d"
    );
}

#[test]
fn upgrade_ignores_uncaptured_tables_without_a_key() {
    let src = Src::new("upgrade_nokey");
    let s = src.session();
    s.exec("CREATE TABLE a (id int PRIMARY KEY)");
    s.exec("CREATE TABLE nokey (x int)");
    src.init(&["public.a"]);
    s.exec("ALTER TABLE a REPLICA IDENTITY DEFAULT");
    expect(&src.cmd("upgrade", &[]), 0, "upgrade");
    expect(&src.cmd("verify", &[]), 0, "verify after upgrade");
}

#[test]
fn snapshot_refuses_a_slot_capture_cannot_read() {
    let src = Src::new("snapslot");
    let s = src.session();
    s.exec("CREATE TABLE a (id int PRIMARY KEY)");
    src.init(&["public.a"]);
    s.exec("INSERT INTO a VALUES (1)");
    s.exec("SELECT pg_drop_replication_slot('s_snapslot')");
    s.exec("SELECT pg_create_logical_replication_slot('s_snapslot', 'test_decoding')");
    let r = src.capture(&[]);
    assert_refused(&r, "read from a test_decoding slot", &["test_decoding"]);
    let r = src.tool(SNAPSHOT, &[], &["-q"]);
    assert_refused(&r, "snapshot over a test_decoding slot", &["test_decoding"]);

    let other = pg::db("snapslot_other");
    other.exec("SELECT pg_create_logical_replication_slot('s_snapslot_other', 'pgoutput')");
    let src2 = Src {
        db: src.db.clone(),
        slot: Some("s_snapslot_other".into()),
        dir: tempfile::tempdir().unwrap(),
    };
    let r = src2.tool(SNAPSHOT, &[], &["-q"]);
    assert_refused(
        &r,
        "snapshot over another database's slot",
        &["t_snapslot_other"],
    );
}

/// A snapshot without its header line (whose cursor differs between two
/// snapshots of the same rows: each makes its own temporary slot).
fn snapshot_body(b: &[u8]) -> &[u8] {
    b.splitn(2, |&c| c == b'\n').nth(1).unwrap_or_default()
}

/// `--jobs N` copies tables in parallel sessions that import one snapshot;
/// the output is the same rows, in the same order, as with one job (the
/// cursors differ only because each run makes its own temporary slot).
#[test]
fn snapshot_with_jobs_gives_the_same_rows_as_one_job() {
    let src = Src::new("snapjobs");
    let s = src.session();
    s.exec("CREATE TABLE a (id int PRIMARY KEY, t text)");
    s.exec("CREATE TABLE b (k text PRIMARY KEY, n numeric(10,2))");
    s.exec("CREATE TABLE c (id bigint PRIMARY KEY, f float8, d bytea)");
    src.init(&["public.a", "public.b", "public.c"]);
    s.exec("INSERT INTO a SELECT g, md5(g::text) FROM generate_series(1, 3000) g");
    s.exec("INSERT INTO b SELECT 'k' || g, g / 7.0 FROM generate_series(1, 2000) g");
    s.exec("INSERT INTO c SELECT g, g * 0.1, decode(md5(g::text), 'hex') FROM generate_series(1, 1000) g");
    let one = src.tool(SNAPSHOT, &[], &["-q"]);
    expect(&one, 0, "snapshot --jobs 1");
    for jobs in ["2", "3"] {
        let many = src.tool(SNAPSHOT, &[], &["-q", "--jobs", jobs]);
        expect(&many, 0, "snapshot --jobs N");
        assert!(
            snapshot_body(&one.stdout) == snapshot_body(&many.stdout),
            "--jobs {jobs} wrote other rows or another order than --jobs 1"
        );
        let (_, rows) = parse_snapshot(&many.stdout);
        assert_eq!(
            rows["public.a"].len() + rows["public.b"].len() + rows["public.c"].len(),
            6000
        );
    }
    let json = src.tool(
        SNAPSHOT,
        &[],
        &["-q", "--jobs", "2", "--output-format", "json"],
    );
    expect(&json, 0, "snapshot --jobs 2 --output-format json");
    let mut r =
        SnapshotReader::json(&json.stdout[..], "<json>", Limits::default()).expect("JSON snapshot");
    let mut rows = 0;
    while let Some(item) = r.next_item().expect("valid JSON snapshot") {
        if matches!(item, SnapItem::Row { .. }) {
            rows += 1;
        }
    }
    assert_eq!(rows, 6000);
}

/// `--jobs N` reads a large table in key ranges on several sessions (cut
/// on the first key column at values from the planner's statistics; rows
/// in key order within each, a text second key column bytewise), and the
/// output is still byte for byte that of one job. A table whose first key
/// column is ordered by its text stays one range (no index has that order).
#[test]
fn snapshot_jobs_read_large_tables_in_key_ranges_with_the_same_output() {
    let src = Src::new("snapranges");
    let s = src.session();
    s.exec("CREATE TABLE big (n int, k text, v text, PRIMARY KEY (n, k))");
    s.exec("CREATE TABLE t (k text PRIMARY KEY)");
    s.exec("CREATE TABLE i (id int8 PRIMARY KEY, f float8)");
    s.exec("CREATE TABLE small (id int PRIMARY KEY)");
    src.init(&["public.big", "public.i", "public.small", "public.t"]);
    // Keys whose order differs between collations, with quotes and
    // backslashes that the bounds must carry as literals.
    s.exec(
        "INSERT INTO big SELECT g, k, md5(g::text) FROM unnest(ARRAY['a', 'B', 'b', E'\\\\x', 'O''Brien', 'a b', 'Ä', 'z', '\u{1F600}']) k, generate_series(1, 5000) g",
    );
    s.exec("INSERT INTO i SELECT g * 7919 % 25013, g * 0.5 FROM generate_series(1, 25000) g");
    s.exec("INSERT INTO small SELECT g FROM generate_series(1, 100) g");
    s.exec("INSERT INTO t SELECT md5(g::text) FROM generate_series(1, 30000) g");
    s.exec("ANALYZE big; ANALYZE i; ANALYZE small; ANALYZE t");
    let one = src.tool(SNAPSHOT, &[], &["-q"]);
    expect(&one, 0, "snapshot --jobs 1");
    let many = src.tool(SNAPSHOT, &[], &["--jobs", "3"]);
    expect(&many, 0, "snapshot --jobs 3");
    assert!(
        many.stderr.contains("reading public.big in 3 key ranges")
            && many.stderr.contains("reading public.i in 2 key ranges")
            && !many.stderr.contains("reading public.small")
            && !many.stderr.contains("reading public.t "),
        "{}",
        many.stderr
    );
    // The bounds ascend in the key's order (they were once sorted as text:
    // 2503 before 402, ranges that overlapped).
    let line = many
        .stderr
        .lines()
        .find(|l| l.contains("reading public.big in"))
        .unwrap();
    let bounds: Vec<i64> = line
        .split("< E'")
        .skip(1)
        .map(|p| p.split('\'').next().unwrap().parse().unwrap())
        .collect();
    assert!(
        bounds.len() == 2 && bounds[0] < bounds[1],
        "bounds out of order: {line}"
    );
    let (a, b) = (snapshot_body(&one.stdout), snapshot_body(&many.stdout));
    if a != b {
        let la: Vec<&[u8]> = a.split(|&c| c == b'\n').collect();
        let lb: Vec<&[u8]> = b.split(|&c| c == b'\n').collect();
        let at = la.iter().zip(&lb).position(|(x, y)| x != y);
        panic!(
            "--jobs 3 wrote other rows or another order than --jobs 1 ({}): {} and {} lines, first difference at line {at:?}: {:?} against {:?}",
            many.stderr.trim(),
            la.len(),
            lb.len(),
            at.map(|i| String::from_utf8_lossy(la[i]).into_owned()),
            at.map(|i| String::from_utf8_lossy(lb[i]).into_owned()),
        );
    }
    let (_, rows) = parse_snapshot(&many.stdout);
    assert_eq!(rows["public.big"].len(), 45000);
    assert_eq!(rows["public.i"].len(), 25000);
    assert_eq!(rows["public.t"].len(), 30000);
}

/// `--jobs N` holds every table's rows, past 4 MiB each, in spool files
/// until every table has been copied. When that folder is full, the error
/// names it, what chose it and the way out (it used to say only `cannot
/// write the spool file: No space left on device`); `-o FILE` is not
/// created. `--spool-dir` with room is the way out.
#[test]
fn snapshot_jobs_with_a_full_spool_folder_names_it() {
    let src = Src::new("snapspool");
    let s = src.session();
    s.exec("CREATE TABLE a (id int PRIMARY KEY, t text)");
    s.exec("CREATE TABLE b (id int PRIMARY KEY, t text)");
    src.init(&["public.a", "public.b"]);
    // About 9.6 MiB of rows in table a.
    s.exec("INSERT INTO a SELECT g, repeat(md5(g::text), 100) FROM generate_series(1, 3000) g");
    s.exec("INSERT INTO b SELECT g, 'x' FROM generate_series(1, 10) g");
    let small = common::SmallFolder::new();
    let small_dir = small.path().to_str().unwrap().to_string();
    let dir = common::tempdir();
    let out = dir.path().join("snap.jsonl");
    let out_s = out.to_str().unwrap();
    let r = src.tool(
        SNAPSHOT,
        &[],
        &["-q", "--jobs", "2", "--spool-dir", &small_dir, "-o", out_s],
    );
    expect(&r, 1, "snapshot --jobs 2 with a full --spool-dir");
    for needle in [
        format!("spool file in {small_dir} (--spool-dir)"),
        "No space left on device".to_string(),
        "copied by --jobs".to_string(),
        "--spool-dir DIR (or TMPDIR=DIR)".to_string(),
    ] {
        assert!(
            r.stderr.contains(&needle),
            "the error should say {needle:?}:\n{}",
            r.stderr
        );
    }
    assert!(!out.exists(), "a failed snapshot leaves no file");
    let roomy = common::tempdir();
    let r = src.tool(
        SNAPSHOT,
        &[],
        &[
            "-q",
            "--jobs",
            "2",
            "--spool-dir",
            roomy.path().to_str().unwrap(),
        ],
    );
    expect(&r, 0, "snapshot --jobs 2 with room");
    let (_, rows) = parse_snapshot(&r.stdout);
    assert_eq!(rows["public.a"].len() + rows["public.b"].len(), 3010);
}

// ---------------------------------------------------------------- transactions

#[test]
fn multi_table_transactions_rollbacks_and_savepoints() {
    let src = Src::new("txn");
    let s = src.session();
    s.exec("CREATE TABLE a (id int PRIMARY KEY, v text)");
    s.exec("CREATE TABLE b (k text PRIMARY KEY, n int8 NOT NULL)");
    src.init(&["public.a", "public.b"]);
    let start = src.confirmed();

    for q in [
        "BEGIN",
        "INSERT INTO a VALUES (1, 'one')",
        "INSERT INTO b VALUES ('x', 10)",
        "UPDATE a SET v = 'uno' WHERE id = 1",
        "INSERT INTO a VALUES (2, 'two')",
        "DELETE FROM b WHERE k = 'x'",
        "COMMIT",
        // Rolled back: never appears.
        "BEGIN",
        "INSERT INTO a VALUES (3, 'rolled back')",
        "INSERT INTO b VALUES ('y', 1)",
        "ROLLBACK",
        // Savepoints: what was rolled back to never appears.
        "BEGIN",
        "INSERT INTO a VALUES (4, 'four')",
        "SAVEPOINT s1",
        "INSERT INTO a VALUES (5, 'gone')",
        "UPDATE a SET v = 'gone too' WHERE id = 4",
        "ROLLBACK TO SAVEPOINT s1",
        "INSERT INTO a VALUES (6, 'six')",
        "SAVEPOINT s2",
        "UPDATE a SET v = 'seis' WHERE id = 6",
        "RELEASE SAVEPOINT s2",
        "SAVEPOINT s3",
        "DELETE FROM a WHERE id = 2",
        "INSERT INTO b VALUES ('z', 3)",
        "ROLLBACK TO SAVEPOINT s3",
        "COMMIT",
        // A transaction whose only changes were rolled back to a savepoint.
        "BEGIN",
        "SAVEPOINT sp_only",
        "INSERT INTO a VALUES (7, 'never')",
        "ROLLBACK TO SAVEPOINT sp_only",
        "COMMIT",
        "UPDATE a SET v = v || '!' WHERE id = 2",
    ] {
        s.exec(q);
    }

    let (bytes, b) = src.capture_ok(&[]);
    assert_eq!(b.len(), 1, "one read, one batch");
    let batch = &b[0];
    assert_eq!(batch.start, Cursor::new(src.identity(), seq_at(start, 0)));
    assert!(batch.end.sequence() >= batch.events.last().unwrap().sequence);
    assert_eq!(batch.high_water, batch.end.sequence());
    let ev = checked_events(&b);
    let t = |n: i64, v: &str| vec![vi(n), vt(v)];
    let u = |k: &str, n: i64| vec![vt(k), vi(n)];
    assert_described(
        &[
            e_ins("public.a", t(1, "one")),
            e_ins("public.b", u("x", 10)),
            e_upd("public.a", t(1, "one"), t(1, "uno")),
            e_ins("public.a", t(2, "two")),
            e_del("public.b", u("x", 10)),
            e_ins("public.a", t(4, "four")),
            e_ins("public.a", t(6, "six")),
            e_upd("public.a", t(6, "six"), t(6, "seis")),
            e_upd("public.a", t(2, "two"), t(2, "two!")),
        ],
        &ev,
    );
    let txns = by_transaction(&ev);
    assert_eq!(
        txns.iter().map(|(_, v)| v.len()).collect::<Vec<_>>(),
        vec![5, 3, 1],
        "three transactions, in commit order"
    );

    // Schemas: PostgreSQL names and types, key from the primary key.
    let schemas = batch.schemas.as_ref().expect("capture writes schemas");
    let a = schemas.iter().find(|s| s.table == "public.a").unwrap();
    assert_eq!(a.key, vec!["id"]);
    let cols: Vec<(&str, &str, bool)> = a
        .columns
        .iter()
        .map(|c| (c.name.as_str(), c.decl_type.as_str(), c.nullable))
        .collect();
    assert_eq!(cols, vec![("id", "integer", false), ("v", "text", true)]);

    // A cursor between transactions resumes with the next one.
    let after_first = seq_at(txns[0].0 + 1, 0);
    let (_, b2) = src.capture_ok(&["--after", &src.cursor(after_first)]);
    assert_eq!(events(&b2), ev[5..].to_vec());

    src.apply_ok(&bytes);
    assert_eq!(
        src.proj_rows("public.a"),
        vec![
            vec![Cell::Int(1), Cell::Text(b"uno".to_vec())],
            vec![Cell::Int(2), Cell::Text(b"two!".to_vec())],
            vec![Cell::Int(4), Cell::Text(b"four".to_vec())],
            vec![Cell::Int(6), Cell::Text(b"seis".to_vec())],
        ]
    );
    assert_eq!(src.proj_count("public.b"), 0);
    src.audit_equal();
}

#[test]
fn interleaved_transactions_come_in_commit_order() {
    let src = Src::new("interleave");
    let s1 = src.session();
    s1.exec("CREATE TABLE a (id int PRIMARY KEY, who text)");
    src.init(&["public.a"]);
    let s2 = src.session();
    let observer = src.session();

    s1.exec("BEGIN");
    s1.exec("INSERT INTO a VALUES (1, 's1')");
    s2.exec("BEGIN");
    s2.exec("INSERT INTO a VALUES (2, 's2')");
    s1.exec("INSERT INTO a VALUES (3, 's1')");
    s2.exec("INSERT INTO a VALUES (4, 's2')");
    s2.exec("UPDATE a SET who = 's2!' WHERE id = 2");
    // The commit record is written after `before` and starts before `after`.
    let before2 = observer.insert_lsn();
    s2.exec("COMMIT");
    let after2 = observer.insert_lsn();
    s1.exec("INSERT INTO a VALUES (5, 's1')");
    let before1 = observer.insert_lsn();
    s1.exec("COMMIT");
    let after1 = observer.insert_lsn();

    let (_, b) = src.capture_ok(&[]);
    let ev = checked_events(&b);
    let r = |n: i64, w: &str| vec![vi(n), vt(w)];
    assert_described(
        &[
            e_ins("public.a", r(2, "s2")),
            e_ins("public.a", r(4, "s2")),
            e_upd("public.a", r(2, "s2"), r(2, "s2!")),
            e_ins("public.a", r(1, "s1")),
            e_ins("public.a", r(3, "s1")),
            e_ins("public.a", r(5, "s1")),
        ],
        &ev,
    );
    let txns = by_transaction(&ev);
    assert_eq!(txns.len(), 2);
    let (l2, l1) = (txns[0].0, txns[1].0);
    assert!(
        before2 <= l2 && l2 < after2,
        "the first transaction's sequence >> 64 ({}) is its commit LSN, between {} and {}",
        lsn_text(l2),
        lsn_text(before2),
        lsn_text(after2)
    );
    assert!(
        before1 <= l1 && l1 < after1,
        "the second transaction's sequence >> 64 ({}) is its commit LSN, between {} and {}",
        lsn_text(l1),
        lsn_text(before1),
        lsn_text(after1)
    );

    // Resuming inside the first transaction gives the rest of it, then the second.
    let (_, b) = src.capture_ok(&["--after", &src.cursor(seq_at(l2, 2))]);
    assert_eq!(events(&b), ev[2..].to_vec());

    // Random interleavings of four sessions: each transaction's changes come
    // together, in statement order, transactions in commit order.
    let mut rng = Rng::new(seed("interleaved_transactions_come_in_commit_order"));
    let sessions: Vec<Session> = (0..4).map(|_| src.session()).collect();
    let mut open: Vec<Vec<i64>> = vec![Vec::new(); 4];
    let mut committed: Vec<Vec<i64>> = Vec::new();
    let mut next = 100;
    let mut steps = 0;
    while steps < 60 || open.iter().any(|o| !o.is_empty()) {
        steps += 1;
        let i = rng.below(4) as usize;
        let finish = steps >= 60 || (!open[i].is_empty() && rng.below(4) == 0);
        if finish {
            if !open[i].is_empty() {
                sessions[i].exec("COMMIT");
                committed.push(std::mem::take(&mut open[i]));
            }
            continue;
        }
        if open[i].is_empty() {
            sessions[i].exec("BEGIN");
        }
        sessions[i].exec(&format!("INSERT INTO a VALUES ({next}, 'x{i}')"));
        open[i].push(next);
        next += 1;
    }
    let (_, b) = src.capture_ok(&["--after", &src.cursor(b[0].end.sequence())]);
    let ev = checked_events(&b);
    let got: Vec<Vec<i64>> = by_transaction(&ev)
        .into_iter()
        .map(|(_, v)| {
            v.iter()
                .map(|e| match &e.after.as_ref().unwrap()[0] {
                    Value::Integer(n) => *n,
                    other => panic!("id {other:?}"),
                })
                .collect()
        })
        .collect();
    assert_eq!(got, committed, "transactions in commit order, whole");
}

// ---------------------------------------------------------------- key changes

#[test]
fn key_changes_and_their_projection() {
    let src = Src::new("keys");
    let s = src.session();
    s.exec("CREATE TABLE k (id int PRIMARY KEY, v text)");
    s.exec("CREATE TABLE ck (a int, b text, v int, PRIMARY KEY (a, b))");
    src.init(&["public.k", "public.ck"]);

    for q in [
        "INSERT INTO k VALUES (1, 'a'), (2, 'b')",
        "UPDATE k SET id = 10 WHERE id = 1",
        "UPDATE k SET id = id + 100, v = v || '+' WHERE id = 2",
        "INSERT INTO ck VALUES (1, 'x', 0), (1, 'y', 1)",
        "UPDATE ck SET b = 'z', v = 5 WHERE a = 1 AND b = 'x'",
        "UPDATE ck SET a = 2 WHERE b = 'y'",
        "BEGIN",
        "UPDATE k SET id = 20 WHERE id = 10",
        "UPDATE k SET id = 30 WHERE id = 20",
        "INSERT INTO k VALUES (10, 'reused')",
        "COMMIT",
        "DELETE FROM k WHERE id = 102",
    ] {
        s.exec(q);
    }
    let (bytes, b) = src.capture_ok(&[]);
    let ev = checked_events(&b);
    let r = |n: i64, v: &str| vec![vi(n), vt(v)];
    let c = |a: i64, b: &str, v: i64| vec![vi(a), vt(b), vi(v)];
    assert_described(
        &[
            e_ins("public.k", r(1, "a")),
            e_ins("public.k", r(2, "b")),
            e_upd("public.k", r(1, "a"), r(10, "a")),
            e_upd("public.k", r(2, "b"), r(102, "b+")),
            e_ins("public.ck", c(1, "x", 0)),
            e_ins("public.ck", c(1, "y", 1)),
            e_upd("public.ck", c(1, "x", 0), c(1, "z", 5)),
            e_upd("public.ck", c(1, "y", 1), c(2, "y", 1)),
            e_upd("public.k", r(10, "a"), r(20, "a")),
            e_upd("public.k", r(20, "a"), r(30, "a")),
            e_ins("public.k", r(10, "reused")),
            e_del("public.k", r(102, "b+")),
        ],
        &ev,
    );

    // Straight into a projection, and through compact (which must treat a key
    // change as the end of a run): the same rows.
    src.apply_ok(&bytes);
    let k = vec![
        vec![Cell::Int(10), Cell::Text(b"reused".to_vec())],
        vec![Cell::Int(30), Cell::Text(b"a".to_vec())],
    ];
    let ck = vec![
        vec![Cell::Int(1), Cell::Text(b"z".to_vec()), Cell::Int(5)],
        vec![Cell::Int(2), Cell::Text(b"y".to_vec()), Cell::Int(1)],
    ];
    assert_eq!(src.proj_rows("public.k"), k);
    assert_eq!(src.proj_rows("public.ck"), ck);
    src.audit_equal();

    let compacted = run(COMPACT, &[], Some(&bytes));
    expect(&compacted, 0, "compact");
    std::fs::remove_file(src.proj()).unwrap();
    src.apply_ok(&compacted.stdout);
    assert_eq!(src.proj_rows("public.k"), k);
    assert_eq!(src.proj_rows("public.ck"), ck);
    src.audit_equal();
}

#[test]
fn key_swap_under_a_deferred_key_reaches_the_projection() {
    let src = Src::new("keyswap");
    let s = src.session();
    s.exec("CREATE TABLE d (id int PRIMARY KEY DEFERRABLE INITIALLY DEFERRED, v text)");
    src.init(&["public.d"]);
    s.exec("INSERT INTO d VALUES (1, 'one'), (2, 'two')");
    s.exec("UPDATE d SET id = 3 - id");
    let (bytes, b) = src.capture_ok(&[]);
    let ev = checked_events(&b);
    let mut swaps: Vec<String> = ev[2..].iter().map(describe).collect();
    swaps.sort();
    let mut want = vec![
        e_upd("public.d", vec![vi(1), vt("one")], vec![vi(2), vt("one")]),
        e_upd("public.d", vec![vi(2), vt("two")], vec![vi(1), vt("two")]),
    ];
    want.sort();
    assert_eq!(swaps, want, "the swap is two updates");
    let r = src.apply(&bytes);
    expect(&r, 0, "apply of a key swap");
    assert_eq!(
        src.proj_rows("public.d"),
        vec![
            vec![Cell::Int(1), Cell::Text(b"two".to_vec())],
            vec![Cell::Int(2), Cell::Text(b"one".to_vec())],
        ]
    );
    src.audit_equal();
}

// ---------------------------------------------------------------- TOAST

/// Incompressible text of `n` ASCII letters and digits.
fn random_text(rng: &mut Rng, n: usize) -> String {
    const A: &[u8] = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    (0..n)
        .map(|_| A[rng.below(A.len() as u64) as usize] as char)
        .collect()
}

#[test]
fn unchanged_toast_values_keep_their_full_value() {
    let src = Src::new("toast");
    let s = src.session();
    s.exec("CREATE TABLE tt (id int PRIMARY KEY, big text, n int, big2 text, blob bytea)");
    // EXTERNAL: out of line, uncompressed; big2 and blob use the defaults.
    s.exec("ALTER TABLE tt ALTER COLUMN big SET STORAGE EXTERNAL");
    src.init(&["public.tt"]);
    let mut rng = Rng::new(seed("unchanged_toast_values_keep_their_full_value"));
    let big = random_text(&mut rng, 200_000);
    let big2 = random_text(&mut rng, 30_000);
    let blob: Vec<u8> = (0..20_000).map(|_| rng.next() as u8).collect();
    let big_b = random_text(&mut rng, 9_000);
    s.exec(&format!(
        "INSERT INTO tt VALUES (1, {}, 0, {}, '\\x{}')",
        lit(&big),
        lit(&big2),
        hex::encode(&blob)
    ));
    assert_eq!(
        s.value("SELECT pg_relation_size(reltoastrelid) > 0 FROM pg_class WHERE relname = 'tt'"),
        "t",
        "the values are stored out of line"
    );
    s.exec("UPDATE tt SET n = 1 WHERE id = 1");
    s.exec("BEGIN");
    s.exec("UPDATE tt SET n = 2 WHERE id = 1");
    s.exec("UPDATE tt SET big2 = 'small now' WHERE id = 1");
    s.exec("COMMIT");
    s.exec("BEGIN");
    s.exec(&format!(
        "INSERT INTO tt VALUES (2, {}, 0, NULL, NULL)",
        lit(&big_b)
    ));
    s.exec("UPDATE tt SET n = 5 WHERE id = 2");
    s.exec("COMMIT");
    s.exec("UPDATE tt SET id = 3 WHERE id = 2");
    s.exec("DELETE FROM tt WHERE id = 1");

    let (bytes, b) = src.capture_ok(&[]);
    let ev = checked_events(&b);
    let row1 = |n: i64, b2: &str| vec![vi(1), vt(&big), vi(n), vt(b2), vb(&blob)];
    let row2 = |id: i64, n: i64| vec![vi(id), vt(&big_b), vi(n), VN, VN];
    let want = [
        e_ins("public.tt", row1(0, &big2)),
        e_upd("public.tt", row1(0, &big2), row1(1, &big2)),
        e_upd("public.tt", row1(1, &big2), row1(2, &big2)),
        e_upd("public.tt", row1(2, &big2), row1(2, "small now")),
        e_ins("public.tt", row2(2, 0)),
        e_upd("public.tt", row2(2, 0), row2(2, 5)),
        e_upd("public.tt", row2(2, 5), row2(3, 5)),
        e_del("public.tt", row1(2, "small now")),
    ];
    let got: Vec<String> = ev.iter().map(describe).collect();
    for (i, (w, g)) in want.iter().zip(&got).enumerate() {
        if w != g {
            let e = &ev[i];
            let nulls: Vec<usize> = e
                .after
                .iter()
                .chain(e.before.iter())
                .flat_map(|r| {
                    r.iter()
                        .enumerate()
                        .filter(|(_, v)| v.is_null())
                        .map(|(i, _)| i)
                })
                .collect();
            panic!(
                "event {i} ({} {}) differs from the source row (columns that are NULL: {nulls:?})",
                e.table,
                e.operation.as_str()
            );
        }
    }
    assert_eq!(got.len(), want.len());

    src.apply_ok(&bytes);
    let rows = src.proj_rows("public.tt");
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0][1], Cell::Text(big_b.as_bytes().to_vec()));
    src.audit_equal();
}

// ---------------------------------------------------------------- types

#[test]
fn every_mapped_type_with_edge_values() {
    let src = Src::new("types");
    let s = src.session();
    s.exec(
        "CREATE TABLE ty (id int4 PRIMARY KEY, i2 int2, i4 int4, i8 int8, o oid, \
         f8 float8, f4 float4, num numeric, num4 numeric(10,4), ts timestamp, tstz timestamptz, \
         d date, tm time, iv interval, arr int4[], tarr text[], f8arr float8[], j jsonb, js json, \
         t text, vc varchar(10), ch char(3), b bytea, bo bool, u uuid)",
    );
    s.exec("CREATE TABLE fl (id int4 PRIMARY KEY, f8 float8, f4 float4)");
    src.init(&["public.ty", "public.fl"]);

    let text =
        "\u{FEFF}BOM first, astral 😀 \u{10FFFF} 𝄞, CJK 李, O'Brien, back\\slash, tab\t, nl\n";
    s.exec(&format!(
        "INSERT INTO ty VALUES (1, -32768, -2147483648, -9223372036854775808, 0, \
         '4.9406564584124654e-324', '1.4e-45', '12.3400', 12.34, '2024-02-29 23:59:59.123456', \
         '2024-02-29 23:59:59.5+05:30', '2024-02-29', '23:59:59.999999', '1 day 02:03:04.5', \
         '{{1,NULL,-3}}', ARRAY['a b', 'c\"d', NULL, '', 'é'], ARRAY[0.1, 1e300, 5e-324]::float8[], \
         '{{\"b\": 1, \"a\": [1, 2.50], \"c\": \"\\u00e9\"}}', '{{\"b\" : 1, \"a\":[]}}', {}, 'ab', 'x', \
         '\\x00ff10', true, 'A0EEBC99-9C0B-4EF8-BB6D-6BB9BD380A11')",
        lit(text)
    ));
    s.exec(
        "INSERT INTO ty VALUES (2, 32767, 2147483647, 9223372036854775807, 4294967295, \
         '1.7976931348623157e308', '3.4028235e38', '-0.000000000000000000001000', '-999999.9999', \
         'infinity', '-infinity', '0044-03-15 BC', '00:00:00', '-1 years -2 mons +3 days -04:05:06', \
         '{}', '{}', '{-0}', '[]', '[1,2]', '', '', '', ''::bytea, false, \
         '00000000-0000-0000-0000-000000000000')",
    );
    s.exec("INSERT INTO ty (id) VALUES (3)");
    s.exec(&format!(
        "INSERT INTO ty (id, i8, f8, f4, num) VALUES (4, -1, '-0', '-0', 'NaN'), \
         (5, 1, '{:e}', '{:e}', '1e-20'), (6, 2, '{:e}', '{:e}', '100')",
        f64::from_bits(0x000F_FFFF_FFFF_FFFF),
        f32::MIN_POSITIVE,
        f64::MIN_POSITIVE,
        f32::from_bits(0x007F_FFFF),
    ));
    s.exec("UPDATE ty SET i2 = 0 WHERE id = 2");

    // Random bit patterns: every exponent, both signs, subnormals.
    let mut rng = Rng::new(seed("every_mapped_type_with_edge_values"));
    let mut floats = Vec::new();
    for id in 0..400 {
        let x = rng.real();
        let y = loop {
            let y = f32::from_bits(rng.next() as u32);
            if y.is_finite() {
                break y;
            }
        };
        floats.push((id, x, y));
    }
    let values: Vec<String> = floats
        .iter()
        .map(|(id, x, y)| format!("({id}, '{x:e}', '{y:e}')"))
        .collect();
    s.exec(&format!("INSERT INTO fl VALUES {}", values.join(", ")));

    let row1 = vec![
        vi(1),
        vi(-32768),
        vi(-2147483648),
        vi(i64::MIN),
        vi(0),
        vr(5e-324),
        vr(f32::from_bits(1) as f64),
        vt("12.3400"),
        vt("12.3400"),
        vt("2024-02-29 23:59:59.123456"),
        vt("2024-02-29 18:29:59.5+00"),
        vt("2024-02-29"),
        vt("23:59:59.999999"),
        vt("1 day 02:03:04.5"),
        vt("{1,NULL,-3}"),
        vt("{\"a b\",\"c\\\"d\",NULL,\"\",é}"),
        vt("{0.1,1e+300,5e-324}"),
        vt("{\"a\": [1, 2.50], \"b\": 1, \"c\": \"é\"}"),
        vt("{\"b\" : 1, \"a\":[]}"),
        vt(text),
        vt("ab"),
        vt("x  "),
        vb(&[0, 255, 16]),
        vi(1),
        vt("a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"),
    ];
    let row2 = |i2: i64| {
        vec![
            vi(2),
            vi(i2),
            vi(2147483647),
            vi(i64::MAX),
            vi(4294967295),
            vr(f64::MAX),
            vr(f32::MAX as f64),
            vt("-0.000000000000000000001000"),
            vt("-999999.9999"),
            vt("infinity"),
            vt("-infinity"),
            vt("0044-03-15 BC"),
            vt("00:00:00"),
            vt("-1 years -2 mons +3 days -04:05:06"),
            vt("{}"),
            vt("{}"),
            vt("{-0}"),
            vt("[]"),
            vt("[1,2]"),
            vt(""),
            vt(""),
            vt("   "),
            vb(&[]),
            vi(0),
            vt("00000000-0000-0000-0000-000000000000"),
        ]
    };
    let mut row3 = vec![VN; 25];
    row3[0] = vi(3);
    let sparse = |id: i64, i8: i64, f8: f64, f4: f64, num: &str| {
        let mut r = vec![VN; 25];
        r[0] = vi(id);
        r[3] = vi(i8);
        r[5] = vr(f8);
        r[6] = vr(f4);
        r[7] = vt(num);
        r
    };
    let row4 = sparse(4, -1, -0.0, -0.0, "NaN");
    let row5 = sparse(
        5,
        1,
        f64::from_bits(0x000F_FFFF_FFFF_FFFF),
        f32::MIN_POSITIVE as f64,
        "1e-20",
    );
    let row5 = {
        // numeric keeps the digits it stores: '1e-20' is stored as 0.00000000000000000001.
        let mut r = row5;
        r[7] = vt("0.00000000000000000001");
        r
    };
    let row6 = sparse(
        6,
        2,
        f64::MIN_POSITIVE,
        f32::from_bits(0x007F_FFFF) as f64,
        "100",
    );

    let (bytes, b) = src.capture_ok(&[]);
    let ev = checked_events(&b);
    let expected = [
        e_ins("public.ty", row1.clone()),
        e_ins("public.ty", row2(32767)),
        e_ins("public.ty", row3.clone()),
        e_ins("public.ty", row4.clone()),
        e_ins("public.ty", row5.clone()),
        e_ins("public.ty", row6.clone()),
        e_upd("public.ty", row2(32767), row2(0)),
    ];
    let got: Vec<String> = ev[..7].iter().map(describe).collect();
    for (w, g) in expected.iter().zip(&got) {
        assert_eq!(w, g, "\nexpected {w}\n     got {g}");
    }
    // -0 keeps its sign on the wire (PostgreSQL keeps it).
    let line4 = String::from_utf8_lossy(&bytes)
        .lines()
        .find(|l| l.contains("\"public.ty\"") && l.contains("\"after\":[[\"integer\",\"4\"]"))
        .unwrap()
        .to_string();
    assert!(
        line4.contains(r#"["real","-0","0"]"#) && !line4.contains(r#"["real","0","0"]"#),
        "{line4}"
    );

    // The declared types, as format_type writes them.
    let schema = b[0]
        .schemas
        .as_ref()
        .unwrap()
        .iter()
        .find(|s| s.table == "public.ty")
        .unwrap()
        .clone();
    let types: Vec<&str> = schema
        .columns
        .iter()
        .map(|c| c.decl_type.as_str())
        .collect();
    assert_eq!(
        types,
        vec![
            "integer",
            "smallint",
            "integer",
            "bigint",
            "oid",
            "double precision",
            "real",
            "numeric",
            "numeric(10,4)",
            "timestamp without time zone",
            "timestamp with time zone",
            "date",
            "time without time zone",
            "interval",
            "integer[]",
            "text[]",
            "double precision[]",
            "jsonb",
            "json",
            "text",
            "character varying(10)",
            "character(3)",
            "bytea",
            "boolean",
            "uuid"
        ]
    );

    // Random floats: bit-exact in the events.
    let fl: Vec<&Event> = ev.iter().filter(|e| e.table == "public.fl").collect();
    assert_eq!(fl.len(), floats.len());
    for (e, (id, x, y)) in fl.iter().zip(&floats) {
        let a = e.after.as_ref().unwrap();
        assert!(a[0].same(&vi(*id)));
        assert!(
            a[1].same(&vr(*x)),
            "float8 {x:e} (bits {:016x}) came as {:?}",
            x.to_bits(),
            a[1]
        );
        assert!(a[2].same(&vr(*y as f64)), "float4 {y:e} came as {:?}", a[2]);
    }

    // Into the projection: each value keeps its class and bits.
    src.apply_ok(&bytes);
    let want_ty: Vec<Vec<Cell>> = [&row1, &row2(0), &row3, &row4, &row5, &row6]
        .iter()
        .map(|r| r.iter().map(cell).collect())
        .collect();
    assert_eq!(src.proj_rows("public.ty"), want_ty);
    let conn = open(&src.proj());
    let (ty, num): (String, String) = conn
        .query_row(
            "SELECT typeof(num), num FROM \"public.ty\" WHERE id = 1",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap();
    assert_eq!((ty.as_str(), num.as_str()), ("text", "12.3400"));
    let (ty, bo): (String, i64) = conn
        .query_row(
            "SELECT typeof(bo), bo FROM \"public.ty\" WHERE id = 1",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap();
    assert_eq!((ty.as_str(), bo), ("integer", 1));
    let want_fl: Vec<Vec<Cell>> = floats
        .iter()
        .map(|(id, x, y)| {
            vec![
                Cell::Int(*id),
                Cell::Real(if *x == 0.0 { 0 } else { x.to_bits() }),
                Cell::Real(if *y == 0.0 { 0 } else { (*y as f64).to_bits() }),
            ]
        })
        .collect();
    assert_eq!(src.proj_rows("public.fl"), want_fl);
    src.audit_equal();

    // A snapshot reads the same values through COPY.
    let r = src.tool(SNAPSHOT, &[], &["-q"]);
    expect(&r, 0, "snapshot");
    let (_, rows) = parse_snapshot(&r.stdout);
    let snap_ty = &rows["public.ty"];
    assert_eq!(snap_ty.len(), 6);
    for (got, want) in snap_ty
        .iter()
        .zip([&row1, &row2(0), &row3, &row4, &row5, &row6])
    {
        assert!(
            same_row(got, want),
            "snapshot row differs\nexpected {want:?}\n     got {got:?}"
        );
    }
    let snap_fl = &rows["public.fl"];
    for (got, (id, x, y)) in snap_fl.iter().zip(&floats) {
        assert!(same_row(got, &[vi(*id), vr(*x), vr(*y as f64)]));
    }
}

#[test]
fn nan_and_infinity_fail_with_a_message_naming_the_value() {
    let src = Src::new("nonfinite");
    let s = src.session();
    s.exec("CREATE TABLE nf (id int PRIMARY KEY, f8 float8, f4 float4)");
    src.init(&["public.nf"]);
    let target = src.proj_url();
    for (i, (col, value)) in [
        ("f8", "NaN"),
        ("f8", "Infinity"),
        ("f8", "-Infinity"),
        ("f4", "NaN"),
        ("f4", "Infinity"),
        ("f4", "-Infinity"),
    ]
    .iter()
    .enumerate()
    {
        let i = i as i64;
        s.exec(&format!(
            "INSERT INTO nf (id, f8) VALUES ({}, 1.5)",
            100 + i
        ));
        s.exec(&format!(
            "INSERT INTO nf (id, {col}) VALUES ({i}, '{value}')"
        ));
        let r = src.capture(&[]);
        assert_refused(
            &r,
            &format!("capture of {col} {value}"),
            &[value, "public.nf"],
        );
        // What was written cannot be applied.
        let a = run(APPLY, &["--target", &target, "-q"], Some(&r.stdout));
        assert_ne!(a.code, Some(0), "apply of a failed capture's output");
        assert!(src.target_cursor().is_none());
        // Step over it: acknowledge through the WAL flushed now.
        let through = seq_at(s.flush_lsn(), 0).to_string();
        expect(
            &src.cmd("ack", &["--through", &through]),
            0,
            "ack past the value",
        );
        s.exec(&format!("DELETE FROM nf WHERE id = {i}"));
        let through = seq_at(s.flush_lsn(), 0).to_string();
        expect(
            &src.cmd("ack", &["--through", &through]),
            0,
            "ack past the delete",
        );
    }
    let (_, b) = src.capture_ok(&[]);
    assert!(events(&b).is_empty());

    // A snapshot meeting one fails the same way, with no commit line.
    s.exec("INSERT INTO nf (id, f8) VALUES (1000, 'NaN')");
    let r = src.tool(SNAPSHOT, &[], &["-q"]);
    assert_refused(&r, "snapshot with NaN", &["NaN", "public.nf"]);
}

// ---------------------------------------------------------------- snapshot and catch-up

#[test]
fn snapshot_under_concurrent_writes_then_catch_up_and_audit() {
    let src = Src::new("snapw");
    let s = src.session();
    s.exec("CREATE TABLE w (id int8 PRIMARY KEY, v int8 NOT NULL, s text, f float8)");
    s.exec("INSERT INTO w SELECT g, g, md5(g::text), g * 0.1 FROM generate_series(1, 20000) g");
    src.init(&["public.w"]);

    let stop = Arc::new(AtomicBool::new(false));
    let ops = Arc::new(AtomicU64::new(0));
    let writer = {
        let (stop, ops) = (stop.clone(), ops.clone());
        let db = src.db.clone();
        let mut rng = Rng::new(seed("snapshot_under_concurrent_writes"));
        std::thread::spawn(move || {
            let w = db.session();
            let mut next = 20001i64;
            while !stop.load(Ordering::Relaxed) {
                let multi = rng.below(3) == 0;
                if multi {
                    w.exec("BEGIN");
                }
                for _ in 0..if multi { 1 + rng.below(5) } else { 1 } {
                    let id = 1 + rng.below(next as u64 - 1) as i64;
                    match rng.below(10) {
                        0..=3 => {
                            w.exec(&format!(
                                "INSERT INTO w VALUES ({next}, 0, {}, '{:e}')",
                                lit(&format!("new {next}")),
                                rng.real()
                            ));
                            next += 1;
                        }
                        4..=7 => w.exec(&format!(
                            "UPDATE w SET v = v + 1, f = '{:e}' WHERE id = {id}",
                            rng.real()
                        )),
                        8 => w.exec(&format!("DELETE FROM w WHERE id = {id}")),
                        _ => {
                            w.exec(&format!("UPDATE w SET id = {next} WHERE id = {id}"));
                            next += 1;
                        }
                    }
                    ops.fetch_add(1, Ordering::Relaxed);
                }
                if multi {
                    w.exec("COMMIT");
                }
            }
        })
    };
    std::thread::sleep(Duration::from_millis(200));
    let before = ops.load(Ordering::Relaxed);
    let r = src.pipeline(
        "{snapshot} --source \"$SRC\" --slot \"$SLOT\" -q | {apply} --target \"$PROJ\" -q",
    );
    let during = ops.load(Ordering::Relaxed) - before;
    expect(&r, 0, "snapshot | apply");
    std::thread::sleep(Duration::from_millis(300));
    stop.store(true, Ordering::Relaxed);
    writer.join().expect("writer thread");
    assert!(during > 0, "the writer wrote while the snapshot ran");
    let snap_cursor = src.target_cursor().expect("the snapshot left a cursor");
    assert_eq!(snap_cursor.source, src.identity());

    let r = src.pipeline(
        "{capture} --source \"$SRC\" --slot \"$SLOT\" --after \"$({apply} cursor --target \"$PROJ\")\" \
         | {compact} | {apply} --target \"$PROJ\"",
    );
    expect(&r, 0, "capture | compact | apply");
    let sum = Summary::parse(&r.stderr);
    assert!(
        sum.applied > 0,
        "the catch-up applied the writes made meanwhile"
    );
    src.audit_equal();
    let n: i64 = s.value("SELECT count(*) FROM w").parse().unwrap();
    assert_eq!(src.proj_count("public.w"), n);
}

// ---------------------------------------------------------------- crashes

/// Kill a child if it is still running; returns its output.
fn finish(mut c: Child, kill: bool) -> (Option<i32>, String) {
    if kill {
        let _ = c.kill();
    }
    let out = c.wait_with_output().expect("wait");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `mooncdc-capture ARGS | mooncdc-apply --target PROJ -q`, both running.
fn follow_pipeline(args: &[String], proj: &str) -> (Child, Child) {
    let mut capture = Command::new(bin(CAPTURE))
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start capture --follow");
    let apply = Command::new(bin(APPLY))
        .args(["--target", proj, "-q"])
        .stdin(Stdio::from(capture.stdout.take().unwrap()))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start apply");
    (capture, apply)
}

/// [`follow_pipeline`] with both tools' standard error appended to `log`.
fn follow_pipeline_logged(args: &[String], proj: &str, log: &std::path::Path) -> (Child, Child) {
    let file = || {
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
            .expect("log file")
    };
    let mut capture = Command::new(bin(CAPTURE))
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::from(file()))
        .spawn()
        .expect("start capture --follow");
    let apply = Command::new(bin(APPLY))
        .args(["--target", proj, "-q"])
        .stdin(Stdio::from(capture.stdout.take().unwrap()))
        .stdout(Stdio::null())
        .stderr(Stdio::from(file()))
        .spawn()
        .expect("start apply");
    (capture, apply)
}

fn wait_until_exit(c: &mut Child, limit: Duration) -> bool {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if c.try_wait().expect("try_wait").is_some() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    false
}

#[test]
fn sigkill_of_capture_or_apply_then_resume_loses_and_duplicates_nothing() {
    let src = Src::new("kill");
    let s = src.session();
    s.exec("CREATE TABLE k (id int8 PRIMARY KEY, v int8 NOT NULL, s text)");
    src.init(&["public.k"]);
    let mut rng = Rng::new(seed("sigkill_of_capture_or_apply"));
    let initial_confirmed = src.confirmed();
    let mut next = 1i64;
    let mut kills = Vec::new();
    for round in 0..7 {
        // Some work: a bulk insert, many small updates, deletes, key changes.
        s.exec(&format!(
            "INSERT INTO k SELECT g, g, md5(g::text) FROM generate_series({next}, {}) g",
            next + 3999
        ));
        next += 4000;
        for j in 0..40 {
            s.exec(&format!(
                "UPDATE k SET v = v + 1, s = md5(s) WHERE id % 40 = {j} AND id > {}",
                next - 8000
            ));
        }
        s.exec(&format!("DELETE FROM k WHERE id % 53 = {}", round));
        s.exec(&format!(
            "UPDATE k SET id = id + 1000000 WHERE id % 101 = {round} AND id < 1000000"
        ));

        let after = src.target_cursor().map(|c| c.to_json());
        let follow = rng.below(2) == 0;
        let proj = src.proj_url();
        let mut cargs = src.source_args();
        if let Some(a) = &after {
            cargs.push("--after".into());
            cargs.push(a.clone());
        }
        if follow {
            cargs.extend(["--follow".into(), "--ack-from-target".into(), proj.clone()]);
        }
        let mut capture = Command::new(bin(CAPTURE))
            .args(&cargs)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start capture");
        let cap_out = capture.stdout.take().unwrap();
        // Plain reads are one batch: split them so apply commits along the way.
        let (middle, apply_in) = if follow {
            (None, Stdio::from(cap_out))
        } else {
            let mut split = Command::new(bin(SPLIT))
                .args(["--max-events", "250"])
                .stdin(Stdio::from(cap_out))
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("start split");
            let out = split.stdout.take().unwrap();
            (Some(split), Stdio::from(out))
        };
        let apply = Command::new(bin(APPLY))
            .args(["--target", &proj, "-q"])
            .stdin(apply_in)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start apply");
        let delay = Duration::from_millis(30 + rng.below(600));
        std::thread::sleep(delay);
        let victim = if rng.below(2) == 0 {
            "capture"
        } else {
            "apply"
        };
        let mut apply = apply;
        if victim == "capture" {
            let _ = capture.kill();
        } else {
            let _ = apply.kill();
        }
        // The others end by themselves (end of input, closed pipe) or, a
        // follower with nothing to write, are killed too.
        for c in [&mut capture, &mut apply] {
            wait_until_exit(c, Duration::from_millis(1500));
        }
        let (ccode, cerr) = finish(capture, true);
        let (acode, aerr) = finish(apply, true);
        if let Some(sp) = middle {
            finish(sp, true);
        }
        kills.push(format!(
            "round {round}: {} after {delay:?} killed {victim}: capture {ccode:?}, apply {acode:?}, \
             target at {}",
            if follow { "follow" } else { "read" },
            src.target_cursor().map_or("nothing".to_string(), |c| format!(
                "{} ({} rows)",
                c,
                src.proj_count("public.k")
            )),
        ));
        for e in [&cerr, &aerr] {
            assert!(!e.contains(PASSWORD_MARK));
            assert!(!e.contains("panicked"), "a tool panicked:\n{e}");
        }
        src.wait_slot_inactive();
        // The slot never runs ahead of what the target durably holds.
        let confirmed = src.confirmed();
        match src.target_cursor() {
            Some(c) => assert!(
                confirmed <= lsn_of(c.sequence()).max(initial_confirmed),
                "slot confirmed {} beyond the target's cursor {}",
                lsn_text(confirmed),
                c
            ),
            None => assert_eq!(confirmed, initial_confirmed),
        }
    }
    eprintln!("{}", kills.join("\n"));

    // Resume to the end without interruption.
    let after = src.target_cursor().map(|c| c.to_json());
    let (bytes, _) = match &after {
        Some(a) => src.capture_ok(&["--after", a]),
        None => src.capture_ok(&[]),
    };
    src.apply_ok(&bytes);
    src.audit_equal();
    let n: i64 = s.value("SELECT count(*) FROM k").parse().unwrap();
    assert_eq!(src.proj_count("public.k"), n, "{}", kills.join("\n"));
}

// ---------------------------------------------------------------- acknowledgement

#[test]
fn ack_advances_the_slot_never_backwards_and_old_cursors_are_refused() {
    let src = Src::new("ack");
    let s = src.session();
    s.exec("CREATE TABLE a (id int PRIMARY KEY, v text)");
    let id = src.init(&["public.a"]);
    let c0 = src.confirmed();
    s.exec("INSERT INTO a VALUES (1, 'one')");
    s.exec("BEGIN");
    s.exec("INSERT INTO a VALUES (2, 'two')");
    s.exec("INSERT INTO a VALUES (22, 'twenty-two')");
    s.exec("COMMIT");
    s.exec("INSERT INTO a VALUES (3, 'three')");
    let (_, b) = src.capture_ok(&[]);
    let ev = checked_events(&b);
    let txns = by_transaction(&ev);
    let (l1, l2, l3) = (txns[0].0, txns[1].0, txns[2].0);
    assert!(c0 < l1);

    // Through the end of the first transaction.
    let r = src.cmd("ack", &["--cursor", &src.cursor(seq_at(l1 + 1, 0))]);
    expect(&r, 0, "ack");
    assert_eq!(src.confirmed(), l1 + 1);
    let st = src.status();
    assert_eq!(
        Cursor::parse_json(&st["acknowledged"]).unwrap(),
        Cursor::new(id.clone(), seq_at(l1 + 1, 0))
    );
    // Never backwards.
    expect(
        &src.cmd("ack", &["--cursor", &src.cursor(seq_at(c0, 0))]),
        0,
        "older ack",
    );
    assert_eq!(
        src.confirmed(),
        l1 + 1,
        "an older cursor does not move the slot back"
    );
    // Into the second transaction: the slot keeps that transaction.
    let mid2 = seq_at(l2, 1).to_string();
    expect(&src.cmd("ack", &["--through", &mid2]), 0, "ack --through");
    assert_eq!(src.confirmed(), l2);
    let (_, b) = src.capture_ok(&[]);
    assert_eq!(b[0].start, Cursor::new(id.clone(), seq_at(l2, 0)));
    assert_eq!(
        events(&b),
        ev[1..].to_vec(),
        "reading from the acknowledged position"
    );

    // Cursors before the confirmed position are refused: those changes are gone.
    for (what, c) in [
        ("a cursor inside the first transaction", seq_at(l1, 1)),
        ("the start cursor", seq_at(c0, 0)),
    ] {
        let r = src.capture(&["--after", &src.cursor(c)]);
        assert_refused(&r, what, &["confirmed position"]);
        assert!(r.stdout.is_empty(), "{what}: nothing written");
    }
    // Still fine: a cursor at or after it.
    let (_, b) = src.capture_ok(&["--after", &src.cursor(seq_at(l2, 2))]);
    assert_eq!(events(&b), ev[3..].to_vec());

    // Beyond the WAL the server has flushed: refused, slot unchanged.
    let far = seq_at(s.flush_lsn() + (1 << 40), 0).to_string();
    let r = src.cmd("ack", &["--through", &far]);
    expect(&r, 1, "ack beyond the flushed WAL");
    assert!(r.stderr.contains("flushed"), "{}", r.stderr);
    assert_eq!(src.confirmed(), l2);
    // Another source's cursor: refused.
    let other = Cursor::new("postgres:1/other/s", seq_at(l3 + 1, 0)).to_json();
    let r = src.cmd("ack", &["--cursor", &other]);
    expect(&r, 1, "ack with another source's cursor");
    assert!(r.stderr.contains("postgres:1/other/s"), "{}", r.stderr);
    assert_eq!(src.confirmed(), l2);
    expect(&src.cmd("ack", &["--through", "-5"]), 2, "ack --through -5");

    // Through everything read: the slot is at the read's end.
    let end = b.last().unwrap().end.clone();
    expect(
        &src.cmd("ack", &["--cursor", &end.to_json()]),
        0,
        "ack to the end",
    );
    assert_eq!(src.confirmed(), lsn_of(end.sequence()));
    let (_, b) = src.capture_ok(&[]);
    assert!(events(&b).is_empty());
    s.exec("INSERT INTO a VALUES (4, 'four')");
    let (_, b) = src.capture_ok(&[]);
    assert_described(&[e_ins("public.a", vec![vi(4), vt("four")])], &events(&b));
}

// ---------------------------------------------------------------- safety errors

#[test]
fn missing_slot_is_refused() {
    let src = Src::new("noslot");
    let s = src.session();
    s.exec("CREATE TABLE a (id int PRIMARY KEY)");
    src.init(&["public.a"]);
    s.exec("INSERT INTO a VALUES (1)");
    s.exec("SELECT pg_drop_replication_slot('s_noslot')");
    let r = src.capture(&[]);
    assert_refused(&r, "read without the slot", &["s_noslot", "does not exist"]);
    let r = src.capture(&["--after", &src.cursor(1)]);
    assert_refused(
        &r,
        "read with a cursor, without the slot",
        &["does not exist"],
    );
    let r = src.cmd("verify", &[]);
    expect(&r, 1, "verify without the slot");
    assert!(r.stderr.contains("s_noslot") && r.stderr.contains("does not exist"));
    let r = src.tool(SNAPSHOT, &[], &["-q"]);
    assert_refused(&r, "snapshot without the slot", &["does not exist"]);
    expect(&src.cmd("status", &[]), 1, "status without the slot");
    let r = src.cmd("ack", &["--cursor", &src.cursor(1)]);
    expect(&r, 1, "ack without the slot");
}

#[test]
fn slot_of_another_plugin_or_database_is_refused() {
    let src = Src::new("plugin");
    let s = src.session();
    s.exec("CREATE TABLE a (id int PRIMARY KEY)");
    s.exec("SELECT pg_create_logical_replication_slot('s_plugin', 'test_decoding')");
    let r = src.cmd("init", &["--table", "public.a"]);
    expect(&r, 1, "init over a test_decoding slot");
    assert!(r.stderr.contains("test_decoding"), "{}", r.stderr);
    s.exec("INSERT INTO a VALUES (1)");
    let r = src.capture(&[]);
    assert_refused(
        &r,
        "read from a test_decoding slot",
        &["s_plugin", "test_decoding"],
    );
    let r = src.cmd("verify", &[]);
    expect(&r, 1, "verify with a test_decoding slot");
    assert!(r.stderr.contains("test_decoding"));

    // A pgoutput slot of another database.
    let other = pg::db("plugin_other");
    other.exec("SELECT pg_create_logical_replication_slot('s_plugin_other', 'pgoutput')");
    let src2 = Src {
        db: src.db.clone(),
        slot: Some("s_plugin_other".into()),
        dir: tempfile::tempdir().unwrap(),
    };
    let r = src2.capture(&[]);
    assert_refused(&r, "read from another database's slot", &["t_plugin_other"]);
    let r = src2.cmd("verify", &[]);
    expect(&r, 1, "verify with another database's slot");
    assert!(r.stderr.contains("t_plugin_other"), "{}", r.stderr);
}

#[test]
fn cursor_of_another_source_is_refused() {
    let src = Src::new("foreign");
    let s = src.session();
    s.exec("CREATE TABLE a (id int PRIMARY KEY)");
    src.init(&["public.a"]);
    s.exec("INSERT INTO a VALUES (1)");
    let lsn = src.confirmed();
    let sysid = src.identity().split('/').next().unwrap().to_string();
    for other in [
        "postgres:1/other/s".to_string(),
        "sqlite:0b7f7a8e-5f7e-4d0a-9d59-2d4a3a1b9c11".to_string(),
        // Same server and database, another slot; and another database.
        format!("{sysid}/{}/another_slot", src.db.dbname),
        format!("{sysid}/t_other/s_foreign"),
    ] {
        let c = Cursor::new(other.clone(), seq_at(lsn, 0)).to_json();
        let r = src.capture(&["--after", &c]);
        assert_refused(&r, &format!("read after a cursor of {other}"), &[&other]);
    }
    // And apply refuses this source's stream into a target of another source.
    let (bytes, _) = src.capture_ok(&[]);
    let t = src.proj_url();
    let foreign = common::Spec::new(0, 1)
        .source("sqlite:someone-else")
        .schemas(vec![common::kv_schema("t")])
        .event(common::ins(1, "t", common::row(1, "x")))
        .jsonl();
    expect(
        &run(APPLY, &["--target", &t, "-q"], Some(foreign.as_bytes())),
        0,
        "seed target",
    );
    let r = run(APPLY, &["--target", &t, "-q"], Some(&bytes));
    expect(&r, 1, "apply of another source's stream");
}

#[test]
fn publication_without_the_table_fails_verify_and_read() {
    let src = Src::new("nopub");
    let s = src.session();
    s.exec("CREATE TABLE a (id int PRIMARY KEY)");
    src.init(&["public.a"]);
    expect(&src.cmd("verify", &[]), 0, "verify after init");
    s.exec("ALTER PUBLICATION mooncdc_main DROP TABLE a");
    let r = src.cmd("verify", &[]);
    expect(&r, 1, "verify of a publication without the table");
    assert!(
        r.stderr.contains("mooncdc_main") && r.stderr.contains("no tables"),
        "{}",
        r.stderr
    );
    s.exec("INSERT INTO a VALUES (1)");
    let r = src.capture(&[]);
    assert_refused(&r, "read of a publication without tables", &["no tables"]);
    let r = src.tool(CAPTURE, &["verify"], &["--publication", "nosuch"]);
    expect(&r, 1, "verify of a missing publication");
    assert!(
        r.stderr.contains("nosuch") && r.stderr.contains("does not exist"),
        "{}",
        r.stderr
    );
    let r = src.tool(CAPTURE, &[], &["--publication", "nosuch"]);
    assert_refused(&r, "read of a missing publication", &["nosuch"]);
}

#[test]
fn truncate_is_carried_in_its_transaction_and_applied_in_order() {
    let src = Src::new("trunc");
    let s = src.session();
    s.exec("CREATE TABLE tr (id int PRIMARY KEY, v text)");
    s.exec("CREATE TABLE kid (id int PRIMARY KEY, tr_id int REFERENCES tr)");
    s.exec("CREATE TABLE other (id int PRIMARY KEY)");
    src.init(&["public.tr", "public.kid", "public.other"]);
    s.exec("INSERT INTO other VALUES (1)");
    s.exec("INSERT INTO tr VALUES (1, 'a'), (2, 'b')");
    s.exec("INSERT INTO kid VALUES (1, 1)");
    // Inserts before and after the TRUNCATE in one transaction; CASCADE
    // reaches `kid` through its foreign key.
    s.exec(
        "BEGIN; INSERT INTO tr VALUES (3, 'c'); TRUNCATE tr CASCADE; \
         INSERT INTO tr VALUES (1, 'new'); INSERT INTO other VALUES (2); COMMIT",
    );
    let (raw, b) = src.capture_ok(&[]);
    let evs = checked_events(&b);
    let truncs: Vec<(&str, bool)> = evs
        .iter()
        .filter_map(|e| match e.operation {
            Operation::Truncate { cascade, .. } => Some((e.table.as_str(), cascade)),
            _ => None,
        })
        .collect();
    let mut tables: Vec<&str> = truncs.iter().map(|t| t.0).collect();
    tables.sort();
    assert_eq!(
        tables,
        ["public.kid", "public.tr"],
        "one truncate per table"
    );
    assert!(
        truncs.iter().all(|t| t.1),
        "CASCADE is recorded: {truncs:?}"
    );
    // The transaction stays one batch: its rows and truncates commit together.
    let txn = b
        .iter()
        .find(|b| b.events.iter().any(|e| e.operation.is_truncate()))
        .unwrap();
    let t0 = txn
        .events
        .iter()
        .find(|e| e.operation.is_truncate())
        .unwrap();
    let same_txn = txn
        .events
        .iter()
        .filter(|e| lsn_of(e.sequence) == lsn_of(t0.sequence))
        .count();
    assert_eq!(same_txn, 5, "insert, 2 truncates, 2 inserts in one batch");
    src.apply_ok(&raw);
    let q = |sql: &str| -> Vec<String> {
        let c = open(&src.proj());
        let mut st = c.prepare(sql).unwrap();
        let rows = st
            .query_map([], |r| r.get::<_, String>(0))
            .unwrap()
            .map(|r| r.unwrap())
            .collect();
        rows
    };
    assert_eq!(
        q("SELECT id || ':' || v FROM \"public.tr\" ORDER BY id"),
        ["1:new"]
    );
    assert_eq!(src.proj_count("public.kid"), 0);
    assert_eq!(
        q("SELECT CAST(id AS TEXT) FROM \"public.other\" ORDER BY id"),
        ["1", "2"]
    );
    src.audit_equal();
    // A replay changes nothing.
    let again = src.apply_ok(&raw);
    assert_eq!(again.applied, 0, "a replay applies nothing");
    src.audit_equal();
    // Compaction drops what a truncate empties, and the result is the same.
    let out = run(COMPACT, &[], Some(&raw));
    expect(&out, 0, "compact");
    let cb = batches(&out.stdout);
    let cevs = checked_events(&cb);
    assert!(
        !cevs.iter().any(|e| e.table == "public.tr"
            && e.operation == Operation::Insert
            && e.after.as_ref().unwrap()[0] == Value::Integer(3)),
        "the insert of 3 before the truncate is compacted away"
    );
    std::fs::remove_file(src.proj()).unwrap();
    src.apply_ok(&out.stdout);
    assert_eq!(
        q("SELECT id || ':' || v FROM \"public.tr\" ORDER BY id"),
        ["1:new"]
    );
    src.audit_equal();
}

// ---------------------------------------------------------------- follow

#[test]
fn follow_writes_a_batch_per_transaction_and_acknowledges_what_the_target_holds() {
    let src = Src::new("follow");
    let s = src.session();
    s.exec("CREATE TABLE a (id int PRIMARY KEY, v text)");
    src.init(&["public.a"]);
    let c0 = src.confirmed();
    let proj = src.proj_url();
    let mut args = src.source_args();
    args.extend(["--follow".into(), "--ack-from-target".into(), proj]);
    let mut child = Command::new(bin(CAPTURE))
        .args(&args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start capture --follow");
    let out = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel::<String>();
    std::thread::spawn(move || {
        use std::io::BufRead;
        for line in std::io::BufReader::new(out).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    // Lines until `n` commit lines have come.
    let read_batches = |n: usize| -> String {
        let mut text = String::new();
        let mut commits = 0;
        while commits < n {
            let line = rx
                .recv_timeout(Duration::from_secs(20))
                .expect("capture --follow wrote the transaction within 20 s");
            if line.starts_with("{\"kind\":\"commit\"") {
                commits += 1;
            }
            text.push_str(&line);
            text.push('\n');
        }
        text
    };
    s.exec("INSERT INTO a VALUES (1, 'one')");
    s.exec("BEGIN");
    s.exec("INSERT INTO a VALUES (2, 'two')");
    s.exec("INSERT INTO a VALUES (3, 'three')");
    s.exec("COMMIT");
    let first = read_batches(2);
    s.exec("UPDATE a SET v = 'uno' WHERE id = 1");
    let second = read_batches(1);
    let b = batches(format!("{first}{second}").as_bytes());
    assert_eq!(
        b.iter().map(|b| b.events.len()).collect::<Vec<_>>(),
        vec![1, 2, 1],
        "one batch per transaction"
    );
    assert_eq!(b[0].start.sequence(), seq_at(c0, 0));
    for batch in &b {
        let last = batch.events.last().unwrap().sequence;
        assert_eq!(
            batch.end.sequence(),
            seq_at(lsn_of(last) + 1, 0),
            "a transaction's batch ends just after its commit LSN"
        );
    }
    checked_events(&b);

    // Nothing is acknowledged on the strength of having been written to a pipe.
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(src.confirmed(), c0);
    let wait_confirmed = |want: u64| {
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            let c = src.confirmed();
            assert!(
                c <= want,
                "slot confirmed {} beyond the target's {}",
                lsn_text(c),
                lsn_text(want)
            );
            if c == want {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "the slot never reached the target's cursor"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    };
    // The target durably holds two transactions: the slot follows.
    src.apply_ok(first.as_bytes());
    wait_confirmed(lsn_of(b[1].end.sequence()));
    src.apply_ok(second.as_bytes());
    wait_confirmed(lsn_of(b[2].end.sequence()));
    src.audit_equal();
    let (code, err) = finish(child, true);
    assert_eq!(code, None, "capture --follow ran until killed: {err}");
    assert!(!err.contains(PASSWORD_MARK));
    src.wait_slot_inactive();
}

#[test]
fn server_fast_shutdown_is_not_held_up_by_capture_follow() {
    let cluster = pg::private_cluster();
    let src = Src {
        db: cluster.create_db("shutdown"),
        slot: Some("s_shutdown".into()),
        dir: tempfile::tempdir().unwrap(),
    };
    let s = src.session();
    s.exec("CREATE TABLE a (id int PRIMARY KEY)");
    src.init(&["public.a"]);
    let proj = src.proj_url();
    let mut args = src.source_args();
    args.extend(
        [
            "--follow",
            "--ack-from-target",
            &proj,
            "--retry-delay-ms",
            "200",
            "--max-retries",
            "30",
        ]
        .map(String::from),
    );
    let (capture, apply) = follow_pipeline(&args, &proj);
    s.exec("INSERT INTO a VALUES (1)");
    src.wait_target_at(0, 20, "the follower never applied the insert");
    let held = lsn_of(src.target_cursor().unwrap().sequence());
    let deadline = Instant::now() + Duration::from_secs(20);
    while src.confirmed() < held {
        assert!(
            Instant::now() < deadline,
            "the slot never caught up with the target"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    drop(s);
    let t0 = Instant::now();
    let stopped = cluster.stop_fast(Duration::from_secs(15));
    let took = t0.elapsed();
    if !stopped {
        let (code, err) = finish(capture, true);
        finish(apply, true);
        panic!(
            "pg_ctl stop -m fast did not finish in 15 s while capture --follow was connected and \
             caught up (capture then: {code:?} {err})"
        );
    }
    eprintln!("fast shutdown with a follower connected took {took:?}");
    // The server comes back: the follower reconnects and goes on.
    cluster.start_again();
    let s = src.session();
    s.exec("INSERT INTO a VALUES (2)");
    let last = s.insert_lsn();
    src.wait_target_at(
        last,
        30,
        "the pipeline did not go on after the server started again",
    );
    let (_, err) = finish(capture, true);
    finish(apply, true);
    assert!(err.contains("reconnected"), "{err}");
    src.audit_equal();
}

/// A fast shutdown while a follower without `--ack-from-target` is
/// connected: the server ends the SQL sessions, then waits for each
/// walsender's client to confirm what it sent, which such a follower never
/// does (it confirms only what a target holds, or `capture ack`). The
/// follower takes the end of its SQL session as the sign and ends its
/// replication session too, so the shutdown completes within seconds
/// instead of being held (with the walsender spinning at 86–97% of a core)
/// for as long as the follower runs; the follower then reconnects when the
/// server is back and goes on.
#[test]
fn a_follower_without_ack_does_not_hold_a_fast_shutdown() {
    let cluster = pg::private_cluster();
    let src = Src {
        db: cluster.create_db("held"),
        slot: Some("s_held".into()),
        dir: tempfile::tempdir().unwrap(),
    };
    let s = src.session();
    s.exec("CREATE TABLE a (id int PRIMARY KEY)");
    src.init(&["public.a"]);
    let proj = src.proj_url();
    let mut args = src.source_args();
    args.extend(["--follow", "--retry-delay-ms", "200", "--max-retries", "30"].map(String::from));
    let (capture, apply) = follow_pipeline(&args, &proj);
    s.exec("INSERT INTO a VALUES (1)");
    src.wait_target_at(0, 20, "the follower never applied the insert");
    drop(s);
    let t0 = Instant::now();
    let stopped = cluster.stop_fast(Duration::from_secs(20));
    let took = t0.elapsed();
    if !stopped {
        let (code, err) = finish(capture, true);
        finish(apply, true);
        panic!(
            "pg_ctl stop -m fast did not finish in 20 s with a follower without --ack-from-target \
             connected (capture then: {code:?} {err})"
        );
    }
    eprintln!("fast shutdown with a follower without --ack-from-target took {took:?}");
    cluster.start_again();
    let s = src.session();
    s.exec("INSERT INTO a VALUES (2)");
    let last = s.insert_lsn();
    src.wait_target_at(
        last,
        30,
        "the pipeline did not go on after the server started again",
    );
    let (_, err) = finish(capture, true);
    finish(apply, true);
    assert!(
        err.contains("SQL session") && err.contains("reconnected"),
        "{err}"
    );
    src.audit_equal();
}

/// Captured tables stay idle while another table writes about 70 MB of WAL:
/// the follower's empty batches carry the target's cursor, and with
/// `--ack-from-target` the slot's confirmed position, along, so the WAL the
/// slot retains stays bounded by the idle interval, not by the writes.
#[test]
fn idle_captured_tables_do_not_make_the_slot_hold_wal() {
    let src = Src::new("idle");
    let s = src.session();
    s.exec("CREATE TABLE a (id int PRIMARY KEY)");
    src.init(&["public.a"]);
    // Not published: its writes reach the follower only as keepalives.
    s.exec("CREATE TABLE other (id int PRIMARY KEY, pad text)");
    let proj = src.proj_url();
    let mut args = src.source_args();
    args.extend([
        "--follow".into(),
        "--idle-batch-ms".into(),
        "200".into(),
        "--ack-from-target".into(),
        proj.clone(),
    ]);
    let (capture, apply) = follow_pipeline(&args, &proj);
    s.exec("INSERT INTO a VALUES (1)");
    src.wait_target_at(0, 20, "the follower never applied the insert");
    let before = s.insert_lsn();
    s.exec("INSERT INTO other SELECT g, md5(g::text) || md5((g + 1)::text) FROM generate_series(1, 500000) g");
    let end = s.insert_lsn();
    assert!(
        end - before >= 64 << 20,
        "only {} bytes of WAL written",
        end - before
    );
    // Within seconds the slot confirms a position past the writes: what it
    // retains no longer depends on them.
    let deadline = Instant::now() + Duration::from_secs(30);
    while src.confirmed() < end {
        assert!(
            Instant::now() < deadline,
            "the slot stayed at {} while the WAL reached {} ({} bytes retained)",
            lsn_text(src.confirmed()),
            lsn_text(end),
            s.insert_lsn() - src.confirmed()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let held = src.target_cursor().unwrap();
    assert!(
        lsn_of(held.sequence()) >= end,
        "the target's cursor stayed behind"
    );
    eprintln!(
        "{} bytes of WAL written to an unpublished table; {} bytes unconfirmed by the slot after it",
        end - before,
        s.insert_lsn().saturating_sub(src.confirmed())
    );
    let (_, err) = finish(capture, true);
    finish(apply, true);
    // The empty batches changed nothing: the projection holds the one row.
    let _ = err;
    src.audit_equal();
}

/// A following pipeline survives the server crashing and restarting
/// (`pg_ctl restart -m immediate`) in the middle of a stream: capture
/// reconnects and resumes after what it wrote, nothing is lost or
/// duplicated (every key once, sequences strictly increasing in the target's
/// history of batches), and the audit says equal. A wrong password is not
/// retried: exit 1 at once.
#[test]
fn a_follower_rides_out_a_server_crash_and_restart() {
    let cluster: &'static pg::Cluster = Box::leak(Box::new(pg::Cluster::start()));
    let src = Src {
        db: cluster.create_db("restart"),
        slot: Some("s_restart".into()),
        dir: tempfile::tempdir().unwrap(),
    };
    let s = src.session();
    s.exec("CREATE TABLE a (id int PRIMARY KEY, v text)");
    src.init(&["public.a"]);
    let proj = src.proj_url();
    let stream_file = src.dir.path().join("stream.jsonl");
    let mut args = src.source_args();
    args.extend(
        [
            "--follow",
            "--ack-from-target",
            &proj,
            "--retry-delay-ms",
            "200",
            "--max-retries",
            "30",
        ]
        .map(String::from),
    );
    let mut capture = Command::new(bin(CAPTURE))
        .args(&args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start capture --follow");
    // tee: the stream as written, to check it afterwards.
    let tee = Command::new("tee")
        .arg(&stream_file)
        .stdin(Stdio::from(capture.stdout.take().unwrap()))
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start tee");
    let mut tee = tee;
    let apply = Command::new(bin(APPLY))
        .args(["--target", &proj, "-q"])
        .stdin(Stdio::from(tee.stdout.take().unwrap()))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start apply");
    let wait_rows = |n: usize, what: &str| {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let have = src
                .target_cursor()
                .map(|_| {
                    let c = rusqlite::Connection::open(src.dir.path().join("proj.db")).unwrap();
                    c.query_row("SELECT count(*) FROM \"public.a\"", [], |r| {
                        r.get::<_, i64>(0)
                    })
                    .unwrap_or(0) as usize
                })
                .unwrap_or(0);
            if have >= n {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{what}: {have} of {n} rows applied"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    };
    for i in 0..10 {
        s.exec(&format!(
            "INSERT INTO a SELECT g, 'before ' || g FROM generate_series({}, {}) g",
            i * 10 + 1,
            i * 10 + 10
        ));
    }
    wait_rows(100, "before the restart");
    // The crash: an immediate stop (no shutdown checkpoint), then recovery.
    drop(s);
    cluster.restart("immediate");
    let s = src.session();
    for i in 10..20 {
        s.exec(&format!(
            "INSERT INTO a SELECT g, 'after ' || g FROM generate_series({}, {}) g",
            i * 10 + 1,
            i * 10 + 10
        ));
    }
    s.exec("UPDATE a SET v = v || ' updated' WHERE id % 7 = 0");
    s.exec("DELETE FROM a WHERE id % 11 = 0");
    let last = s.insert_lsn();
    src.wait_target_at(last, 60, "the pipeline never caught up after the restart");
    let (_, capture_err) = finish(capture, true);
    let _ = tee.wait();
    finish(apply, true);
    assert!(
        capture_err.contains("reconnecting") && capture_err.contains("reconnected"),
        "capture should say it reconnected:\n{capture_err}"
    );
    src.audit_equal();
    // The stream as written: valid batches back to back, every sequence once.
    let written = std::fs::read(&stream_file).unwrap();
    let complete = &written[..written
        .iter()
        .rposition(|b| *b == b'\n')
        .map_or(0, |i| i + 1)];
    let text = String::from_utf8_lossy(complete);
    let upto = text.rfind("{\"kind\":\"commit\"").unwrap();
    let upto = upto + text[upto..].find('\n').unwrap() + 1;
    let b = batches(text[..upto].as_bytes());
    let seqs: Vec<u128> = b
        .iter()
        .flat_map(|b| b.events.iter().map(|e| e.sequence))
        .collect();
    assert!(
        seqs.windows(2).all(|w| w[0] < w[1]),
        "sequences repeat or go back"
    );
    assert_eq!(
        seqs.len(),
        200 + 28 + 18,
        "every change once: 200 inserts, 28 updates, 18 deletes"
    );

    // A refusal is not retried: a wrong password fails at once.
    let url = src.db.url().replace(pg::PASSWORD_MARK, "wrong");
    let t0 = Instant::now();
    let out = assert_cmd::Command::new(bin(CAPTURE))
        .args(["--source", &url, "--follow", "--slot", "s_restart"])
        .env_remove("PGSSLMODE")
        .timeout(Duration::from_secs(30))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(
        t0.elapsed() < Duration::from_secs(10),
        "a wrong password was retried"
    );
}

/// `capture --follow | apply` from PostgreSQL stopped with SIGTERM to its
/// process group while transactions flow: both exit 0, and a catch-up from
/// the target's cursor (possibly inside a transaction) makes the audit equal.
#[test]
fn sigterm_to_a_following_postgres_pipeline_stops_both_cleanly() {
    use std::os::unix::process::CommandExt;
    let src = Src::new("sigterm");
    let s = src.session();
    s.exec("CREATE TABLE a (id int PRIMARY KEY, v text)");
    src.init(&["public.a"]);
    let proj = src.proj_url();
    let mut args = src.source_args();
    args.extend(["--follow", "--ack-from-target", &proj].map(String::from));
    let mut capture = Command::new(bin(CAPTURE))
        .args(&args)
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
    let stop = std::sync::Arc::new(AtomicBool::new(false));
    let writer = {
        let stop = stop.clone();
        let w = src.session();
        std::thread::spawn(move || {
            let mut i = 0;
            while !stop.load(Ordering::SeqCst) {
                w.exec(&format!(
                    "INSERT INTO a SELECT g, 'v' || g FROM generate_series({}, {}) g",
                    i * 50 + 1,
                    i * 50 + 50
                ));
                i += 1;
            }
            i
        })
    };
    std::thread::sleep(Duration::from_millis(1500));
    let t0 = Instant::now();
    assert!(Command::new("kill")
        .args(["-TERM", "--", &format!("-{pgid}")])
        .status()
        .unwrap()
        .success());
    let out_c = capture.wait_with_output().unwrap();
    let out_a = apply.wait_with_output().unwrap();
    let took = t0.elapsed();
    stop.store(true, Ordering::SeqCst);
    assert!(writer.join().unwrap() > 2);
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
    // Catch up from wherever the target stopped.
    let after = src
        .target_cursor()
        .expect("the target holds a cursor")
        .to_json();
    let (bytes, _) = src.capture_ok(&["--after", &after]);
    let r = exec(APPLY, &["--target", &proj], Some(&bytes));
    expect(&r, 0, "catch-up apply");
    src.audit_equal();
}

/// Metrics and health of a following capture, scraped over HTTP: the event
/// counter and the position move when writes arrive; /livez and /readyz say
/// 200; with apply stopped (SIGSTOP) and writes filling the pipe, capture's
/// writes block and /readyz says 503 once the stall timeout passes, then
/// 200 again after SIGCONT.
#[test]
fn metrics_and_health_of_a_following_capture() {
    let src = Src::new("metrics");
    let s = src.session();
    s.exec("CREATE TABLE a (id int PRIMARY KEY, v text)");
    src.init(&["public.a"]);
    let proj = src.proj_url();
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let addr = format!("127.0.0.1:{port}");
    let mut args = src.source_args();
    args.extend(
        [
            "--follow",
            "--ack-from-target",
            &proj,
            "--metrics-listen",
            &addr,
            "--stall-timeout-ms",
            "1500",
            "--idle-batch-ms",
            "200",
        ]
        .map(String::from),
    );
    let (capture, apply) = follow_pipeline(&args, &proj);
    let _ = rustls::crypto::ring::default_provider().install_default();
    let get = |path: &str| -> (u16, String) {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            match reqwest::blocking::get(format!("http://{addr}{path}")) {
                Ok(r) => return (r.status().as_u16(), r.text().unwrap_or_default()),
                Err(e) if Instant::now() < deadline => {
                    let _ = e;
                    std::thread::sleep(Duration::from_millis(100));
                }
                Err(e) => panic!("GET {path}: {e}"),
            }
        }
    };
    let metric = |text: &str, name: &str| -> f64 {
        text.lines()
            .find(|l| l.starts_with(&format!("{name}{{")))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no metric {name} in:\n{text}"))
    };
    let wait_for = |what: &str, cond: &dyn Fn() -> bool| {
        let deadline = Instant::now() + Duration::from_secs(20);
        while !cond() {
            assert!(Instant::now() < deadline, "{what}");
            std::thread::sleep(Duration::from_millis(100));
        }
    };
    let (code, before) = get("/metrics");
    assert_eq!(code, 200);
    assert!(!before.contains("public.a") && !before.contains(pg::PASSWORD_MARK));
    assert_eq!(get("/livez").0, 200);
    wait_for("readyz 200 at start", &|| get("/readyz").0 == 200);
    s.exec("INSERT INTO a SELECT g, 'x' FROM generate_series(1, 10) g");
    wait_for("the event counter never moved", &|| {
        metric(&get("/metrics").1, "mooncdc_events_total") >= 10.0
    });
    let after = get("/metrics").1;
    assert!(metric(&after, "mooncdc_position") > metric(&before, "mooncdc_position"));
    assert!(metric(&after, "mooncdc_batches_total") >= 1.0);
    // The lag gauge moved: a commit has been seen.
    assert_eq!(metric(&before, "mooncdc_source_lag_seconds"), 0.0);
    assert!(metric(&after, "mooncdc_source_lag_seconds") > 0.0);
    wait_for("the slot's wal_status never showed", &|| {
        get("/metrics").1.lines().any(|l| {
            l.starts_with("mooncdc_slot_wal_status{")
                && l.contains("status=\"reserved\"")
                && l.ends_with(" 1")
        })
    });
    // Quiet and caught up (the idle batches carry the cursor to the server's
    // WAL end and the slot is acknowledged there), the follower stays ready:
    // the server then sends no keepalive by itself for wal_sender_timeout/2
    // (30 s here), so it is capture's own ping that shows it progressing.
    wait_for("the slot was never acknowledged to the WAL end", &|| {
        let q = format!(
            "SELECT confirmed_flush_lsn FROM pg_replication_slots WHERE slot_name = {}",
            lit(src.slot_name())
        );
        parse_lsn(&s.value(&q)) >= s.flush_lsn()
    });
    let quiet = Instant::now();
    while quiet.elapsed() < Duration::from_secs(4) {
        let (code, body) = get("/readyz");
        assert_eq!(code, 200, "a quiet, caught-up follower is ready: {body}");
        std::thread::sleep(Duration::from_millis(100));
    }
    // Apply stops; enough changes to fill the pipe block capture's writes.
    let pid = apply.id().to_string();
    assert!(Command::new("kill")
        .args(["-STOP", &pid])
        .status()
        .unwrap()
        .success());
    for i in 0..20 {
        s.exec(&format!(
            "INSERT INTO a SELECT g, repeat('y', 500) FROM generate_series({}, {}) g",
            1000 + i * 500,
            1000 + i * 500 + 499
        ));
    }
    wait_for("readyz never said 503 with apply stopped", &|| {
        let (code, body) = get("/readyz");
        code == 503 && body.contains("stalled")
    });
    assert_eq!(get("/livez").0, 200, "a stalled capture is still alive");
    assert!(Command::new("kill")
        .args(["-CONT", &pid])
        .status()
        .unwrap()
        .success());
    wait_for("readyz never recovered after SIGCONT", &|| {
        get("/readyz").0 == 200
    });
    finish(capture, true);
    finish(apply, true);
}

/// A database with no writes at all: `--heartbeat-ms` writes transactional
/// logical messages, never events, so the slot's confirmed position keeps
/// moving and the target holds no row it should not.
#[test]
fn heartbeats_move_an_idle_slot_and_are_never_events() {
    let src = Src::new("heartbeat");
    let s = src.session();
    s.exec("CREATE TABLE a (id int PRIMARY KEY)");
    src.init(&["public.a"]);
    s.exec("INSERT INTO a VALUES (1)");
    let proj = src.proj_url();
    let mut args = src.source_args();
    args.extend(
        [
            "--follow",
            "--ack-from-target",
            &proj,
            "--heartbeat-ms",
            "200",
            "--idle-batch-ms",
            "200",
        ]
        .map(String::from),
    );
    let (capture, apply) = follow_pipeline(&args, &proj);
    src.wait_target_at(0, 20, "the follower never applied the insert");
    let first = src.confirmed();
    let deadline = Instant::now() + Duration::from_secs(20);
    // No writes from here on: only the heartbeats move the WAL.
    while src.confirmed() <= first + 1 {
        assert!(
            Instant::now() < deadline,
            "the slot stayed at {} without writes",
            lsn_text(first)
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let (_, err) = finish(capture, true);
    finish(apply, true);
    assert!(!err.contains("error"), "{err}");
    // The heartbeats are not events: the projection holds the one row.
    src.audit_equal();
}

/// A read on a quiet server whose slot is acknowledged to the end of the
/// flushed WAL ends at once with an empty batch. (Here the server's first
/// keepalive comes before capture's first status update, so this does not
/// depend on capture's ping; `metrics_and_health_of_a_following_capture`
/// shows the silence the ping breaks.)
#[test]
fn a_read_on_a_quiet_fully_acknowledged_slot_ends() {
    let src = Src::new("quiet");
    let s = src.session();
    s.exec("CREATE TABLE a (id int PRIMARY KEY)");
    src.init(&["public.a"]);
    s.exec("INSERT INTO a VALUES (1)");
    let (_, b) = src.capture_ok(&[]);
    // Acknowledge to the flushed end of the WAL, not only to the batch's end
    // (while records after the commit are unconfirmed, the server sends a
    // keepalive by itself).
    let mut end = b.last().unwrap().end.clone();
    let flushed = s.flush_lsn();
    end.set_sequence((flushed as u128) << 64);
    expect(&src.cmd("ack", &["--cursor", &end.to_json()]), 0, "ack");
    assert_eq!(
        parse_lsn(&s.value(&format!(
            "SELECT confirmed_flush_lsn FROM pg_replication_slots WHERE slot_name = {}",
            lit(src.slot_name())
        ))),
        flushed
    );
    let t0 = Instant::now();
    let out = assert_cmd::Command::new(bin(CAPTURE))
        .args(src.source_args())
        .env_remove("PGSSLMODE")
        .timeout(Duration::from_secs(30))
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        t0.elapsed() < Duration::from_secs(10),
        "the read took {:?}",
        t0.elapsed()
    );
    let b = batches(&out.stdout);
    assert_eq!(b.len(), 1);
    assert!(b[0].events.is_empty());
}

/// The password may come from a libpq password file (PGPASSFILE, else
/// ~/.pgpass) instead of the command line, as psql reads it: `\:` escapes
/// the password's colon, `*` matches any field, and a file others can read
/// is ignored with a warning.
#[test]
fn the_password_comes_from_a_libpq_password_file() {
    use std::os::unix::fs::PermissionsExt;
    let src = Src::new("pgpass");
    let s = src.session();
    s.exec("CREATE TABLE a (id int PRIMARY KEY)");
    src.init(&["public.a"]);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("pgpass");
    let escaped = pg::PASSWORD.replace('\\', "\\\\").replace(':', "\\:");
    std::fs::write(
        &file,
        format!(
            "# a comment\nother.example:5432:*:*:wrong\n127.0.0.1:{}:*:{}:{escaped}\n",
            src.db.cluster.port,
            pg::ROLE
        ),
    )
    .unwrap();
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
    let url = format!(
        "postgres://{}@127.0.0.1:{}/{}",
        pg::ROLE,
        src.db.cluster.port,
        src.db.dbname
    );
    let run = |file: &std::path::Path| {
        assert_cmd::Command::new(bin(CAPTURE))
            .args(["status", "--source", &url, "--slot", "s_pgpass"])
            .env_remove("PGPASSWORD")
            .env_remove("PGSSLMODE")
            .env("PGPASSFILE", file)
            .timeout(Duration::from_secs(30))
            .output()
            .unwrap()
    };
    let out = run(&file);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
    let out = run(&file);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("group or world access"), "{err}");
    assert!(!err.contains(pg::PASSWORD_MARK));
}

// ---------------------------------------------------------------- schema changes

/// The schema in force for `table` at the end of a stream (last header,
/// then its schema records).
fn final_schema(b: &[Batch], table: &str) -> mooncdc::wire::Schema {
    let last = b.last().expect("a batch");
    last.changes
        .iter()
        .rev()
        .map(|(_, c)| &c.schema)
        .chain(last.schemas.iter().flatten())
        .find(|s| s.table == table)
        .unwrap_or_else(|| panic!("no schema for {table}"))
        .clone()
}

#[test]
fn schema_changes_are_carried_inside_their_transaction() {
    let src = Src::new("ddl");
    let s = src.session();
    s.exec("CREATE TABLE a (id int PRIMARY KEY, v text, gone text, w int)");
    src.init(&["public.a"]);
    s.exec("INSERT INTO a VALUES (1, 'x', 'g1', 1)");
    // One transaction: a row in the old shape, a column added, one dropped,
    // a type widened, each followed by a row in its new shape.
    s.exec(
        "BEGIN; INSERT INTO a VALUES (2, 'y', 'g2', 2); \
         ALTER TABLE a ADD COLUMN n int8; INSERT INTO a VALUES (3, 'z', 'g3', 3, 5); \
         ALTER TABLE a DROP COLUMN gone; UPDATE a SET n = 7 WHERE id = 1; \
         ALTER TABLE a ALTER COLUMN w TYPE bigint; INSERT INTO a VALUES (4, 'q', 4, 6); COMMIT",
    );
    let (bytes, b) = src.capture_ok(&[]);
    let ev = checked_events(&b);
    assert_described(
        &[
            e_ins("public.a", vec![vi(1), vt("x"), vt("g1"), vi(1)]),
            e_ins("public.a", vec![vi(2), vt("y"), vt("g2"), vi(2)]),
            e_ins("public.a", vec![vi(3), vt("z"), vt("g3"), vi(3), vi(5)]),
            e_upd(
                "public.a",
                vec![vi(1), vt("x"), vi(1), VN],
                vec![vi(1), vt("x"), vi(1), vi(7)],
            ),
            e_ins("public.a", vec![vi(4), vt("q"), vi(4), vi(6)]),
        ],
        &ev,
    );
    // The whole transaction is in one batch, each change a record right
    // before the first event in its shape.
    let txn = b
        .iter()
        .find(|b| !b.changes.is_empty())
        .expect("a batch with schema records");
    assert_eq!(txn.changes.len(), 3, "{:?}", txn.changes);
    // The key of the row each first event changes (column 0 of its image).
    let first_after = |k: usize| {
        let e = &txn.events[txn.changes[k].0];
        let image = match e.operation {
            Operation::Insert => e.after.as_ref(),
            _ => e.before.as_ref(),
        };
        image.unwrap()[0].clone()
    };
    assert_eq!(first_after(0), Value::Integer(3));
    assert_eq!(first_after(1), Value::Integer(1));
    assert_eq!(first_after(2), Value::Integer(4));
    assert!(
        txn.events
            .iter()
            .any(|e| e.after.as_ref().is_some_and(|a| a[0] == Value::Integer(2))),
        "the row in the old shape is in the same batch"
    );
    let cols: Vec<(&str, &str)> = txn.changes[2]
        .1
        .schema
        .columns
        .iter()
        .map(|c| (c.name.as_str(), c.decl_type.as_str()))
        .collect();
    assert_eq!(
        cols,
        [
            ("id", "integer"),
            ("v", "text"),
            ("w", "bigint"),
            ("n", "bigint")
        ]
    );
    src.apply_ok(&bytes);
    src.audit_equal();
    let proj = open(&src.proj());
    let names: Vec<String> = proj
        .prepare("SELECT name FROM pragma_table_info('public.a') ORDER BY cid")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .map(|r| r.unwrap())
        .collect();
    assert_eq!(names, ["id", "v", "w", "n"], "the projection followed");
    // Replayed, nothing changes.
    let again = src.apply_ok(&bytes);
    assert_eq!(again.applied, 0);
    src.audit_equal();
}

/// Without the DDL trigger, a column dropped while the follower was down: the
/// restarted read's first batch has the new shape in its header and no
/// schema record. A pure drop is unambiguous, so the SQLite projection and a
/// PostgreSQL target drop the column as a running follower's schema record
/// would have them (docs/FORMAT.md, "Schema records"); a column added at the
/// end the same way is added.
#[test]
fn a_drop_read_first_by_a_restarted_follower_is_carried() {
    let src = Src::new("drop_restart");
    let s = src.session();
    s.exec("CREATE TABLE a (id int PRIMARY KEY, v text, gone text, w int)");
    src.init(&["public.a"]);
    s.exec("INSERT INTO a VALUES (1, 'x', 'g1', 1), (2, 'y', 'g2', 2)");
    let tgt = pg::db("drop_restart_tgt");
    let pg_url = tgt.url();
    let apply_pg = |bytes: &[u8]| {
        let r = run(APPLY, &["--target", &pg_url, "-q"], Some(bytes));
        expect(&r, 0, "apply to PostgreSQL");
    };
    let (bytes, _) = src.capture_ok(&[]);
    src.apply_ok(&bytes);
    apply_pg(&bytes);
    let names = |src: &Src| -> Vec<String> {
        open(&src.proj())
            .prepare("SELECT name FROM pragma_table_info('public.a') ORDER BY cid")
            .unwrap()
            .query_map([], |r| r.get(0))
            .unwrap()
            .map(|r| r.unwrap())
            .collect()
    };
    assert_eq!(names(&src), ["id", "v", "gone", "w"]);
    // The follower is down: a column dropped, rows written in the new shape.
    s.exec("ALTER TABLE a DROP COLUMN gone");
    s.exec("INSERT INTO a VALUES (3, 'z', 3); UPDATE a SET v = 'x2' WHERE id = 1");
    let cur = src.target_cursor().unwrap().to_json();
    let (rest, b) = src.capture_ok(&["--after", &cur]);
    assert!(
        b.iter().all(|b| b.changes.is_empty()),
        "the restarted read has no schema record: the header has the new shape"
    );
    src.apply_ok(&rest);
    apply_pg(&rest);
    assert_eq!(names(&src), ["id", "v", "w"], "the projection dropped it");
    src.audit_equal();
    let audit_pg = |what: &str| {
        let mut args: Vec<String> = src.source_args();
        args.extend(["--target".into(), pg_url.clone(), "-q".into()]);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let r = run(AUDIT, &args, None);
        expect(&r, 0, what);
        assert!(
            r.stdout_str().trim_end().ends_with("equal"),
            "{}",
            r.stdout_str()
        );
    };
    audit_pg("audit of the PostgreSQL target after the drop");
    assert_eq!(
        tgt.session()
            .value("SELECT string_agg(attname, ',' ORDER BY attnum) FROM pg_attribute WHERE attrelid = 'public.a'::regclass AND attnum > 0 AND NOT attisdropped"),
        "id,v,w"
    );
    // A column added at the end while the follower is down: added alike.
    s.exec("ALTER TABLE a ADD COLUMN more text");
    s.exec("INSERT INTO a VALUES (4, 'q', 4, 'm')");
    let cur = src.target_cursor().unwrap().to_json();
    let (rest, _) = src.capture_ok(&["--after", &cur]);
    src.apply_ok(&rest);
    apply_pg(&rest);
    assert_eq!(names(&src), ["id", "v", "w", "more"]);
    src.audit_equal();
    audit_pg("audit of the PostgreSQL target after the add");
}

#[test]
fn with_the_ddl_trigger_renames_are_carried() {
    let src = Src::new("ddl_trig");
    let s = src.session();
    s.exec("CREATE TABLE a (id int PRIMARY KEY, v text, w int)");
    src.init(&["public.a"]);
    // The test role may not create event triggers: refused, nothing
    // installed, the reason named.
    let r = src.cmd("init", &["--ddl"]);
    expect(
        &r,
        1,
        "init --ddl without the right to create event triggers",
    );
    assert!(r.stderr.contains("event triggers"), "{}", r.stderr);
    assert_eq!(s.value("SELECT count(*) FROM pg_event_trigger"), "0");
    let su = src.db.superuser_url();
    let r = run(
        CAPTURE,
        &["init", "--ddl", "--source", &su, "--slot", src.slot_name()],
        None,
    );
    expect(&r, 0, "init --ddl as a superuser");
    assert!(r.stderr.contains("DDL trigger installed"), "{}", r.stderr);
    s.exec("INSERT INTO a VALUES (1, 'x', 1)");
    s.exec("ALTER TABLE a RENAME COLUMN v TO v2");
    s.exec("INSERT INTO a VALUES (2, 'y', 2)");
    // A swap of two names through a third, then a drop and an add together.
    s.exec(
        "BEGIN; ALTER TABLE a RENAME COLUMN v2 TO tmp; ALTER TABLE a RENAME COLUMN w TO v2; \
         ALTER TABLE a RENAME COLUMN tmp TO w; UPDATE a SET w = 'z' WHERE id = 1; COMMIT",
    );
    s.exec("ALTER TABLE a DROP COLUMN v2, ADD COLUMN extra int");
    s.exec("INSERT INTO a VALUES (3, 'q', 9)");
    let (bytes, b) = src.capture_ok(&[]);
    let changes: Vec<Vec<(String, String)>> = b
        .iter()
        .flat_map(|b| b.changes.iter())
        .map(|(_, c)| {
            c.renamed
                .iter()
                .map(|r| (r.from.clone(), r.to.clone()))
                .collect()
        })
        .collect();
    let pairs = |v: &[(&str, &str)]| -> Vec<(String, String)> {
        v.iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect()
    };
    assert_eq!(
        changes,
        vec![
            pairs(&[("v", "v2")]),
            pairs(&[("v2", "w"), ("w", "v2")]),
            pairs(&[])
        ],
        "renames said, the drop and add as such"
    );
    src.apply_ok(&bytes);
    src.audit_equal();
    let proj = open(&src.proj());
    let names: Vec<String> = proj
        .prepare("SELECT name FROM pragma_table_info('public.a') ORDER BY cid")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .map(|r| r.unwrap())
        .collect();
    assert_eq!(names, ["id", "w", "extra"]);
    let w1: String = proj
        .query_row("SELECT w FROM \"public.a\" WHERE id = 1", [], |r| r.get(0))
        .unwrap();
    assert_eq!(w1, "z", "the renamed column kept its values");
    // A read that starts after the target's cursor, whose first description
    // of the table comes after a rename: the trigger's message says what the
    // table was, so the rename is still carried.
    s.exec("ALTER TABLE a RENAME COLUMN extra TO more; INSERT INTO a VALUES (4, 'r', 10)");
    let cur = src.target_cursor().unwrap().to_json();
    let (rest, b) = src.capture_ok(&["--after", &cur]);
    let renamed: Vec<(String, String)> = b
        .iter()
        .flat_map(|b| b.changes.iter())
        .flat_map(|(_, c)| c.renamed.iter().map(|r| (r.from.clone(), r.to.clone())))
        .collect();
    assert_eq!(renamed, pairs(&[("extra", "more")]));
    src.apply_ok(&rest);
    src.audit_equal();
    // The last column dropped and added again under its name and type: the
    // replication stream shows nothing new, the trigger's column numbers do;
    // the old values (10 in row 4) must not survive in the target.
    s.exec("ALTER TABLE a DROP COLUMN more; ALTER TABLE a ADD COLUMN more int; INSERT INTO a VALUES (5, 's', NULL)");
    let cur = src.target_cursor().unwrap().to_json();
    let (rest, _) = src.capture_ok(&["--after", &cur]);
    src.apply_ok(&rest);
    src.audit_equal();
    let more: Option<i64> = open(&src.proj())
        .query_row("SELECT more FROM \"public.a\" WHERE id = 4", [], |r| {
            r.get(0)
        })
        .unwrap();
    assert_eq!(more, None);
}

/// Schema changes while a pipeline follows: each transaction's batch carries
/// its change, the projection follows without a restart, the audit is equal.
#[test]
fn schema_changes_while_following() {
    let src = Src::new("ddl_follow");
    let s = src.session();
    s.exec("CREATE TABLE f (id int PRIMARY KEY, v text, gone text, w int)");
    src.init(&["public.f"]);
    let su = src.db.superuser_url();
    expect(
        &run(
            CAPTURE,
            &["init", "--ddl", "--source", &su, "--slot", src.slot_name()],
            None,
        ),
        0,
        "init --ddl",
    );
    let proj = src.proj_url();
    let mut args = src.source_args();
    args.extend(
        [
            "--follow",
            "--ack-from-target",
            &proj,
            "--idle-batch-ms",
            "200",
        ]
        .map(String::from),
    );
    let (capture, apply) = follow_pipeline(&args, &proj);
    s.exec("INSERT INTO f VALUES (1, 'a', 'g', 1)");
    src.wait_target_at(s.insert_lsn(), 20, "the first insert");
    s.exec("ALTER TABLE f ADD COLUMN n int; INSERT INTO f VALUES (2, 'b', 'g', 2, 20)");
    s.exec("ALTER TABLE f DROP COLUMN gone; UPDATE f SET n = 10 WHERE id = 1");
    s.exec("ALTER TABLE f RENAME COLUMN v TO label; INSERT INTO f VALUES (3, 'c', 3, 30)");
    s.exec("ALTER TABLE f ALTER COLUMN w TYPE bigint; UPDATE f SET w = 9000000000 WHERE id = 2");
    s.exec("BEGIN; INSERT INTO f VALUES (4, 'd', 4, 40); TRUNCATE f; INSERT INTO f VALUES (5, 'e', 5, 50); COMMIT");
    src.wait_target_at(s.insert_lsn(), 30, "the schema changes");
    finish(capture, true);
    finish(apply, true);
    src.audit_equal();
    let proj = open(&src.proj());
    let names: Vec<String> = proj
        .prepare("SELECT name FROM pragma_table_info('public.f') ORDER BY cid")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .map(|r| r.unwrap())
        .collect();
    assert_eq!(names, ["id", "label", "w", "n"]);
    assert_eq!(src.proj_count("public.f"), 1);
}

#[test]
fn a_table_added_to_the_publication_is_created_in_the_target() {
    let src = Src::new("ddl_pub");
    let s = src.session();
    s.exec("CREATE TABLE a (id int PRIMARY KEY)");
    s.exec("CREATE TABLE later (id int PRIMARY KEY, v text)");
    src.init(&["public.a"]);
    s.exec("INSERT INTO a VALUES (1)");
    let (first, _) = src.capture_ok(&[]);
    src.apply_ok(&first);
    // Added to the publication (by init, which also sets its replica
    // identity) while empty, then written to.
    let r = src.cmd("init", &["--table", "public.later"]);
    expect(&r, 0, "init --table later");
    s.exec("INSERT INTO later VALUES (1, 'one'); INSERT INTO a VALUES (2)");
    let cur = src.target_cursor().unwrap().to_json();
    let (rest, b) = src.capture_ok(&["--after", &cur]);
    assert!(
        b.iter().any(|b| b
            .changes
            .iter()
            .any(|(_, c)| c.schema.table == "public.later"))
            || b.iter().any(|b| b
                .schemas
                .iter()
                .flatten()
                .any(|s| s.table == "public.later")),
        "the new table is described"
    );
    src.apply_ok(&rest);
    assert_eq!(src.proj_count("public.later"), 1);
    src.audit_equal();
}

#[test]
fn ambiguous_and_incompatible_schema_changes_fail_closed() {
    let src = Src::new("ddl_bad");
    let s = src.session();
    s.exec("CREATE TABLE a (id int PRIMARY KEY, v text, w int)");
    src.init(&["public.a"]);
    // A rename within one read: the stream cannot tell it from a drop and
    // an add.
    s.exec("INSERT INTO a VALUES (1, 'x', 1)");
    s.exec("ALTER TABLE a RENAME COLUMN v TO v2; INSERT INTO a VALUES (2, 'y', 2)");
    let r = src.capture(&[]);
    assert_refused(
        &r,
        "read over a rename",
        &["\"public.a\"", "may be a rename", "--ddl"],
    );
    let a = src.apply(&r.stdout);
    assert_ne!(a.code, Some(0), "the partial output is refused downstream");
    assert_eq!(src.target_cursor(), None, "nothing applied");
    // A narrowing type change, on another table of a fresh source.
    let src2 = Src::new("ddl_type");
    let s2 = src2.session();
    s2.exec("CREATE TABLE b (id int PRIMARY KEY, n bigint)");
    src2.init(&["public.b"]);
    s2.exec("INSERT INTO b VALUES (1, 1)");
    s2.exec("ALTER TABLE b ALTER COLUMN n TYPE text; INSERT INTO b VALUES (2, 'two')");
    let r = src2.capture(&[]);
    assert_refused(
        &r,
        "read over a type change",
        &["\"n\"", "from bigint to text"],
    );
    assert_eq!(src2.target_cursor(), None);
}

#[test]
fn snapshot_orders_char_n_keys_by_their_padded_value() {
    let src = Src::new("charkey");
    let s = src.session();
    s.exec("CREATE TABLE chk (k char(3) PRIMARY KEY)");
    src.init(&["public.chk"]);
    s.exec("INSERT INTO chk VALUES ('a'), (E'a\\t'), ('a!')");
    let r = src.tool(SNAPSHOT, &[], &["-q"]);
    expect(&r, 0, "snapshot");
    let (_, rows) = parse_snapshot(&r.stdout);
    assert_eq!(
        rows["public.chk"],
        vec![vec![vt("a\t ")], vec![vt("a  ")], vec![vt("a! ")]]
    );
    src.apply_ok(&r.stdout);
    src.audit_equal();
}

#[test]
fn connection_errors_never_show_the_password() {
    let src = Src::new("conn");
    let s = src.session();
    s.exec("CREATE TABLE a (id int PRIMARY KEY)");
    src.init(&["public.a"]);
    let port = src.db.cluster.port;
    let wrong = format!(
        "postgres://{}:{}WRONG@127.0.0.1:{port}/{}",
        pg::ROLE,
        pg::url_encode(pg::PASSWORD),
        src.db.dbname
    );
    for args in [
        vec!["--source", wrong.as_str(), "--slot", "s_conn"],
        vec!["status", "--source", wrong.as_str(), "--slot", "s_conn"],
    ] {
        let r = run(CAPTURE, &args, None);
        assert_refused(&r, "a wrong password", &[&src.db.dbname]);
    }
    let r = run(
        SNAPSHOT,
        &["--source", &wrong, "--slot", "s_conn", "-q"],
        None,
    );
    assert_refused(&r, "snapshot with a wrong password", &[]);
    let r = run(
        AUDIT,
        &[
            "--source",
            &wrong,
            "--slot",
            "s_conn",
            "--target",
            &src.proj_url(),
        ],
        None,
    );
    assert_eq!(r.code, Some(2), "audit trouble: {}", r.stderr);
    // TLS required of a server without it: refused, no fallback to plaintext.
    let tls = format!("{}?sslmode=require", src.url());
    let r = run(CAPTURE, &["--source", &tls, "--slot", "s_conn"], None);
    assert_refused(&r, "sslmode=require without TLS on the server", &[]);
    // The password from PGPASSWORD when the URL has none.
    let bare = format!("postgres://{}@127.0.0.1:{port}/{}", pg::ROLE, src.db.dbname);
    let out = Command::new(bin(CAPTURE))
        .args(["status", "--source", &bare, "--slot", "s_conn"])
        .env("PGPASSWORD", pg::PASSWORD)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!String::from_utf8_lossy(&out.stdout).contains(PASSWORD_MARK));
}

/// A peer that accepts TCP connections and holds them open without ever
/// writing a byte (no cluster needed).
fn silent_peer() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
    let port = l.local_addr().expect("local address").port();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for s in l.incoming().flatten() {
            held.push(s);
        }
    });
    port
}

#[test]
fn connect_timeout_ends_a_connection_to_a_server_that_never_answers() {
    let port = silent_peer();
    let url = format!("postgres://u@127.0.0.1:{port}/db?connect_timeout=2");
    for (tool, args) in [
        (SNAPSHOT, vec!["--source", url.as_str(), "-q"]),
        (CAPTURE, vec!["--source", url.as_str()]),
        (CAPTURE, vec!["status", "--source", url.as_str()]),
    ] {
        let what = format!("{tool} {}", args.join(" "));
        let t0 = Instant::now();
        let out = assert_cmd::Command::new(bin(tool))
            .args(&args)
            .env_remove("PGSSLMODE")
            .timeout(Duration::from_secs(30))
            .output()
            .unwrap_or_else(|e| panic!("cannot run {what}: {e}"));
        let took = t0.elapsed();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(
            out.status.code(),
            Some(1),
            "{what}: exit status after {took:?}, stderr:\n{stderr}"
        );
        assert!(
            took < Duration::from_secs(10),
            "{what}: took {took:?} with connect_timeout=2"
        );
        assert!(
            stderr.contains(&format!(
                "cannot connect to postgres://u@127.0.0.1:{port}/db: no answer within 2 s (connect_timeout)"
            )),
            "{what}: the message should name the timeout, got:\n{stderr}"
        );
        assert!(out.stdout.is_empty(), "{what}: wrote output");
    }
}

#[test]
fn pgsslmode_is_honoured_and_the_url_sslmode_wins() {
    let src = Src::new("sslenv");
    let s = src.session();
    s.exec("CREATE TABLE a (id int PRIMARY KEY)");
    src.init(&["public.a"]);
    let port = src.db.cluster.port;
    // Loopback, no sslmode in the URL: the default would be plaintext.
    let bare = format!("postgres://{}@127.0.0.1:{port}/{}", pg::ROLE, src.db.dbname);
    let with = |url: &str, env: Option<&str>| -> Run {
        let mut cmd = assert_cmd::Command::new(bin(CAPTURE));
        cmd.args(["status", "--source", url, "--slot", "s_sslenv"])
            .env("PGPASSWORD", pg::PASSWORD)
            .env_remove("PGSSLROOTCERT")
            .timeout(Duration::from_secs(60));
        match env {
            Some(v) => cmd.env("PGSSLMODE", v),
            None => cmd.env_remove("PGSSLMODE"),
        };
        let out = cmd.output().expect("run mooncdc-capture status");
        let r = Run {
            code: out.status.code(),
            stdout: out.stdout,
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        };
        assert_no_secret(&r, "mooncdc-capture status");
        r
    };
    // The cluster has no TLS: a request for it from the environment is refused.
    let r = with(&bare, Some("require"));
    assert_refused(
        &r,
        "PGSSLMODE=require against a server without TLS",
        &["TLS"],
    );
    for (url, env) in [
        (bare.clone(), None),
        (bare.clone(), Some("disable")),
        // libpq's default: no explicit request, so loopback stays plaintext.
        (bare.clone(), Some("prefer")),
        (bare.clone(), Some("allow")),
        // The URL's sslmode wins over the environment.
        (format!("{bare}?sslmode=disable"), Some("require")),
        (format!("{bare}?sslmode=disable"), Some("bogus")),
    ] {
        let r = with(&url, env);
        expect(&r, 0, &format!("status with {url} and PGSSLMODE={env:?}"));
    }
    let r = with(&format!("{bare}?sslmode=require"), Some("disable"));
    assert_refused(
        &r,
        "sslmode=require in the URL with PGSSLMODE=disable",
        &["TLS"],
    );
    let r = with(&bare, Some("bogus"));
    expect(&r, 2, "an unknown PGSSLMODE");
    assert!(r.stderr.contains("PGSSLMODE"), "{}", r.stderr);
}

// ---------------------------------------------------------------- limits

#[test]
fn max_events_cuts_inside_a_transaction_and_resumes_exactly() {
    let src = Src::new("cut");
    let s = src.session();
    s.exec("CREATE TABLE c (id int PRIMARY KEY, v text)");
    src.init(&["public.c"]);
    s.exec("INSERT INTO c SELECT g, 'v' || g FROM generate_series(1, 10) g");
    s.exec("UPDATE c SET v = v || '!' WHERE id <= 3");
    s.exec("DELETE FROM c WHERE id > 8");
    let (_, full) = src.capture_ok(&[]);
    let all = checked_events(&full);
    assert_eq!(all.len(), 15);
    let txns = by_transaction(&all);
    assert_eq!(txns.len(), 3);

    // Cut after 4 events: inside the first transaction.
    let (_, b) = src.capture_ok(&["--max-events", "4"]);
    assert_eq!(b.len(), 1);
    assert_eq!(b[0].events, all[..4].to_vec());
    assert_eq!(
        b[0].end.sequence(),
        all[3].sequence,
        "a cut batch ends at its last event"
    );
    let (_, rest) = src.capture_ok(&["--after", &b[0].end.to_json()]);
    assert_eq!(events(&rest), all[4..].to_vec(), "the rest, nothing twice");
    assert_eq!(rest[0].start, b[0].end);

    // Cut exactly at the transaction's end, then go on.
    let (_, b) = src.capture_ok(&["--max-events", "10"]);
    assert_eq!(b[0].end.sequence(), seq_at(txns[0].0, 10));
    let (_, rest) = src.capture_ok(&["--after", &b[0].end.to_json(), "--max-events", "1"]);
    assert_eq!(events(&rest), all[10..11].to_vec());

    // Pieces of 3 from the start, applied in turn, cover the stream exactly;
    // applying a piece again is a no-op.
    let mut after: Option<String> = None;
    let mut got = Vec::new();
    let mut pieces = 0;
    loop {
        let mut args = vec!["--max-events", "3"];
        if let Some(a) = &after {
            args.extend(["--after", a.as_str()]);
        }
        let (bytes, b) = src.capture_ok(&args);
        let ev = events(&b);
        let s1 = src.apply_ok(&bytes);
        assert_eq!(s1.applied as usize, ev.len());
        let s2 = src.apply_ok(&bytes);
        assert_eq!(s2.applied, 0, "a piece applied twice is a no-op");
        pieces += 1;
        let done = ev.len() < 3;
        got.extend(ev);
        after = Some(b.last().unwrap().end.to_json());
        if done {
            break;
        }
        assert!(pieces < 20);
    }
    assert_eq!(got, all);
    assert!(src.target_cursor().unwrap().sequence() >= full[0].end.sequence());
    src.audit_equal();
}

#[test]
fn max_bytes_stops_before_exceeding_the_limit() {
    let src = Src::new("maxbytes");
    let s = src.session();
    s.exec("CREATE TABLE c (id int PRIMARY KEY, v text)");
    src.init(&["public.c"]);
    s.exec("INSERT INTO c SELECT g, repeat('x', 100) FROM generate_series(1, 5) g");
    let (bytes, _) = src.capture_ok(&[]);
    let lens: Vec<usize> = String::from_utf8_lossy(&bytes)
        .lines()
        .filter(|l| l.starts_with("{\"kind\":\"event\""))
        .map(|l| l.len() + 1)
        .collect();
    assert_eq!(lens.len(), 5);
    // One byte short of two events: one event.
    let limit = (lens[0] + lens[1] - 1).to_string();
    let (_, b) = src.capture_ok(&["--max-bytes", &limit]);
    assert_eq!(
        events(&b).len(),
        1,
        "--max-bytes {limit} with events of {lens:?} bytes"
    );
    // Exactly two events: two.
    let limit = (lens[0] + lens[1]).to_string();
    let (_, b) = src.capture_ok(&["--max-bytes", &limit]);
    assert_eq!(events(&b).len(), 2);
    // Smaller than one event: still one (at least one is written).
    let (_, b) = src.capture_ok(&["--max-bytes", "1"]);
    assert_eq!(events(&b).len(), 1);
}

// ---------------------------------------------------------------- differential oracle

/// Turn every JSON number token into `{"$num":"<token>"}` so its exact text
/// survives parsing (serde_json would round floats and drop numeric's
/// trailing zeros).
fn quote_numbers(json: &str) -> String {
    let b = json.as_bytes();
    let mut out = String::with_capacity(json.len() + 64);
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if c == b'"' {
            let start = i;
            i += 1;
            while i < b.len() {
                match b[i] {
                    b'\\' => i += 2,
                    b'"' => {
                        i += 1;
                        break;
                    }
                    _ => i += 1,
                }
            }
            out.push_str(&json[start..i]);
        } else if c == b'-' || c.is_ascii_digit() {
            let start = i;
            while i < b.len() && (b[i].is_ascii_digit() || b"+-.eE".contains(&b[i])) {
                i += 1;
            }
            out.push_str(&format!("{{\"$num\":\"{}\"}}", &json[start..i]));
        } else {
            // Outside strings JSON is ASCII.
            out.push(c as char);
            i += 1;
        }
    }
    out
}

/// A wal2json value as the wire value MoonCDC's mapping gives (docs/FORMAT.md §2,
/// src/pg/types.rs): integers exact, floats parsed at their own
/// width (bits compared), booleans 1/0, bytea bytes, numeric its digits as
/// text, everything else its text.
fn norm_wal2json(ty: &str, v: &J) -> Value {
    if v.is_null() {
        return Value::Null;
    }
    let num = || -> String {
        v.get("$num")
            .and_then(J::as_str)
            .unwrap_or_else(|| panic!("wal2json {ty} value is not a number: {v}"))
            .to_string()
    };
    // Zeros keep their sign, as PostgreSQL's and MoonCDC's (docs/FORMAT.md).
    match ty {
        "smallint" | "integer" | "bigint" | "oid" => {
            Value::Integer(num().parse().expect("integer value"))
        }
        "double precision" => Value::Real(num().parse::<f64>().expect("float8")),
        "real" => Value::Real(num().parse::<f32>().expect("float4") as f64),
        "numeric" => Value::Text(num()),
        "boolean" => Value::Integer(v.as_bool().expect("boolean") as i64),
        "bytea" => {
            let s = v.as_str().expect("bytea text");
            Value::Blob(hex::decode(s.strip_prefix("\\x").unwrap_or(s)).expect("bytea hex"))
        }
        _ => Value::Text(
            v.as_str()
                .unwrap_or_else(|| panic!("wal2json {ty} value is not a string: {v}"))
                .to_string(),
        ),
    }
}

/// Decode wal2json (format 2) output into transactions: (commit LSN, changes
/// in the form `describe` gives), skipping transactions without changes.
/// Columns wal2json leaves out of an update's new image (unchanged TOAST)
/// are taken from its old image (REPLICA IDENTITY FULL).
fn wal2json_transactions(
    text: &str,
    columns: &BTreeMap<String, Vec<String>>,
) -> Vec<(u64, Vec<String>)> {
    let mut out = Vec::new();
    let mut cur: Option<(u64, Vec<String>)> = None;
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let rec: J = serde_json::from_str(&quote_numbers(line))
            .unwrap_or_else(|e| panic!("wal2json line is not JSON: {e}\n{line}"));
        let action = rec["action"].as_str().expect("action");
        match action {
            "B" => {
                assert!(cur.is_none(), "B inside a transaction");
                cur = Some((parse_lsn(rec["lsn"].as_str().expect("B lsn")), Vec::new()));
            }
            "C" => {
                let (lsn, changes) = cur.take().expect("C without B");
                assert_eq!(parse_lsn(rec["lsn"].as_str().expect("C lsn")), lsn);
                if !changes.is_empty() {
                    out.push((lsn, changes));
                }
            }
            "I" | "U" | "D" => {
                let table = format!(
                    "{}.{}",
                    rec["schema"].as_str().unwrap(),
                    rec["table"].as_str().unwrap()
                );
                let names = &columns[&table];
                let image = |member: &str, fallback: Option<&J>| -> Vec<Value> {
                    let find = |arr: Option<&J>, n: &str| -> Option<(String, J)> {
                        arr?.as_array()?
                            .iter()
                            .find(|c| c["name"] == n)
                            .map(|c| (c["type"].as_str().unwrap().to_string(), c["value"].clone()))
                    };
                    names
                        .iter()
                        .map(|n| {
                            let (ty, v) = find(rec.get(member), n)
                                .or_else(|| find(fallback, n))
                                .unwrap_or_else(|| {
                                    panic!("wal2json {action} lacks column {n}: {line}")
                                });
                            norm_wal2json(&ty, &v)
                        })
                        .collect()
                };
                let (op, before, after) = match action {
                    "I" => (Operation::Insert, None, Some(image("columns", None))),
                    "U" => (
                        Operation::Update,
                        Some(image("identity", None)),
                        Some(image("columns", rec.get("identity"))),
                    ),
                    _ => (Operation::Delete, Some(image("identity", None)), None),
                };
                let e = Event {
                    sequence: 1,
                    table,
                    operation: op,
                    before,
                    before_key: None,
                    after,
                };
                cur.as_mut()
                    .expect("change outside B/C")
                    .1
                    .push(describe(&e));
            }
            other => panic!("unexpected wal2json action {other}: {line}"),
        }
    }
    assert!(cur.is_none(), "wal2json output ends inside a transaction");
    out
}

/// Random SQL literals for the oracle's workload.
struct Lits(Rng);

impl Lits {
    fn null(&mut self) -> bool {
        self.0.below(10) == 0
    }
    fn int(&mut self, bits: u32) -> String {
        if self.null() {
            return "NULL".into();
        }
        let x = self.0.next() as i64;
        match bits {
            16 => (x as i16).to_string(),
            _ => (x as i32).to_string(),
        }
    }
    fn f8(&mut self) -> String {
        if self.null() {
            return "NULL".into();
        }
        match self.0.below(8) {
            0 => "'-0'".into(),
            1 => format!("'{:e}'", f64::from_bits(1 + self.0.below(1 << 52))),
            _ => format!("'{:e}'", self.0.real()),
        }
    }
    fn f4(&mut self) -> String {
        if self.null() {
            return "NULL".into();
        }
        loop {
            let y = f32::from_bits(self.0.next() as u32);
            if y.is_finite() {
                return format!("'{y:e}'");
            }
        }
    }
    fn num(&mut self) -> String {
        if self.null() {
            return "NULL".into();
        }
        let sign = if self.0.below(2) == 0 { "-" } else { "" };
        let int = self.0.below(1_000_000_000_000);
        let frac_len = self.0.below(12) as usize;
        let mut frac: String = (0..frac_len)
            .map(|_| char::from(b'0' + self.0.below(10) as u8))
            .collect();
        if self.0.below(2) == 0 {
            frac.push_str("00");
        }
        if frac.is_empty() {
            format!("'{sign}{int}'")
        } else {
            format!("'{sign}{int}.{frac}'")
        }
    }
    fn text(&mut self) -> String {
        if self.null() {
            return "NULL".into();
        }
        lit(&self.0.text().replace('\0', ""))
    }
    fn bytea(&mut self) -> String {
        if self.null() {
            return "NULL".into();
        }
        format!("'\\x{}'::bytea", hex::encode(self.0.blob()))
    }
    fn bool(&mut self) -> String {
        if self.null() {
            return "NULL".into();
        }
        (self.0.below(2) == 0).to_string()
    }
    fn jsonb(&mut self) -> String {
        if self.null() {
            return "NULL".into();
        }
        let doc = serde_json::json!({
            "k": self.0.next() as i32,
            "s": self.0.text().replace('\0', ""),
            "a": [1.5, null, true],
        });
        format!("{}::jsonb", lit(&doc.to_string()))
    }
    fn tz(&mut self) -> String {
        if self.null() {
            return "NULL".into();
        }
        let micros = self.0.below(6_000_000_000_000_000) as i64 - 2_000_000_000_000_000;
        format!("'epoch'::timestamptz + interval '{micros} microseconds'")
    }
    fn arr(&mut self) -> String {
        if self.null() {
            return "NULL".into();
        }
        let n = self.0.below(4);
        let items: Vec<String> = (0..n)
            .map(|_| {
                if self.0.below(5) == 0 {
                    "NULL".into()
                } else {
                    (self.0.next() as i32).to_string()
                }
            })
            .collect();
        format!("ARRAY[{}]::int4[]", items.join(", "))
    }
    /// Values for the columns of `o` after `id`.
    fn o_row(&mut self) -> String {
        let big = if self.0.below(8) == 0 {
            lit(&random_text(&mut self.0, 12_000))
        } else {
            "NULL".into()
        };
        format!(
            "{}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}",
            self.int(16),
            self.int(32),
            self.f8(),
            self.f4(),
            self.num(),
            self.text(),
            self.bytea(),
            self.bool(),
            self.jsonb(),
            self.tz(),
            self.arr(),
            big
        )
    }
    /// `SET …` of one to three random columns of `o` (never `big`).
    fn o_set(&mut self) -> String {
        let mut sets = Vec::new();
        let mut used = Vec::new();
        for _ in 0..1 + self.0.below(3) {
            let col = self.0.below(11);
            if used.contains(&col) {
                continue;
            }
            used.push(col);
            sets.push(match col {
                0 => format!("i2 = {}", self.int(16)),
                1 => format!("i4 = {}", self.int(32)),
                2 => format!("f8 = {}", self.f8()),
                3 => format!("f4 = {}", self.f4()),
                4 => format!("num = {}", self.num()),
                5 => format!("t = {}", self.text()),
                6 => format!("b = {}", self.bytea()),
                7 => format!("bo = {}", self.bool()),
                8 => format!("j = {}", self.jsonb()),
                9 => format!("tz = {}", self.tz()),
                _ => format!("arr = {}", self.arr()),
            });
        }
        sets.join(", ")
    }
}

#[test]
fn differential_oracle_against_wal2json() {
    if !pg::has_wal2json() {
        // The matrix's server builds have no wal2json; Debian's 15 runs it.
        eprintln!(
            "SKIPPED differential_oracle_against_wal2json: PostgreSQL {} here has no wal2json (the run on Debian's 15 checks it)",
            pg::major_version()
        );
        return;
    }
    let src = Src::new("oracle");
    let s = src.session();
    s.exec(
        "CREATE TABLE o (id int8 PRIMARY KEY, i2 int2, i4 int4, f8 float8, f4 float4, \
         num numeric, t text, b bytea, bo bool, j jsonb, tz timestamptz, arr int4[], big text)",
    );
    s.exec("CREATE TABLE o2 (k text PRIMARY KEY, v int8)");
    src.init(&["public.o", "public.o2"]);
    // The oracle's slot, created after init's DDL and before the workload.
    s.exec("SELECT pg_create_logical_replication_slot('w_oracle', 'wal2json')");

    let mut lits = Lits(Rng::new(seed("differential_oracle_against_wal2json")));
    let sessions: Vec<Session> = (0..3).map(|_| src.session()).collect();
    let mut open = [false; 3];
    let mut next = [0i64; 3];
    let mut statements = 0;
    while statements < 350 || open.iter().any(|o| *o) {
        let i = lits.0.below(3) as usize;
        let db = &sessions[i];
        if statements >= 350 {
            if open[i] {
                db.exec("COMMIT");
                open[i] = false;
            }
            continue;
        }
        statements += 1;
        if open[i] && lits.0.below(6) == 0 {
            db.exec(if lits.0.below(8) == 0 {
                "ROLLBACK"
            } else {
                "COMMIT"
            });
            open[i] = false;
            continue;
        }
        if !open[i] && lits.0.below(4) != 0 {
            db.exec("BEGIN");
            open[i] = true;
        }
        // Each session keeps to its own rows (ids ≡ i mod 3, keys "s<i>-…"),
        // so open transactions never wait for one another.
        let pick = db
            .query(&format!(
                "SELECT id FROM o WHERE id % 3 = {i} ORDER BY random() LIMIT 1"
            ))
            .first()
            .and_then(|r| r[0].clone());
        let mut new_id = || {
            next[i] += 1;
            next[i] * 3 + i as i64
        };
        let sql = match (lits.0.below(12), pick) {
            (0..=3, _) | (_, None) => {
                format!("INSERT INTO o VALUES ({}, {})", new_id(), lits.o_row())
            }
            (4..=6, Some(id)) => format!("UPDATE o SET {} WHERE id = {id}", lits.o_set()),
            (7, Some(id)) => format!(
                "UPDATE o SET id = {}, {} WHERE id = {id}",
                new_id(),
                lits.o_set()
            ),
            (8, Some(id)) => format!("DELETE FROM o WHERE id = {id}"),
            (9, _) => format!(
                "UPDATE o SET i4 = coalesce(i4, 0) / 2 WHERE id % 3 = {i} AND id % 4 = {}",
                lits.0.below(4)
            ),
            (10, _) => {
                let n = new_id();
                format!(
                    "INSERT INTO o2 VALUES ({}, {}) ON CONFLICT (k) DO UPDATE SET v = o2.v + 1",
                    lit(&format!("s{i}-{}é", n % 17)),
                    n
                )
            }
            _ => format!(
                "DELETE FROM o2 WHERE k = {}",
                lit(&format!("s{i}-{}é", lits.0.below(17)))
            ),
        };
        if open[i] && lits.0.below(8) == 0 {
            db.exec("SAVEPOINT sp");
            db.exec(&sql);
            db.exec(if lits.0.below(2) == 0 {
                "ROLLBACK TO SAVEPOINT sp"
            } else {
                "RELEASE SAVEPOINT sp"
            });
        } else {
            db.exec(&sql);
        }
    }
    let endpos = s.flush_lsn();

    // wal2json through pg_recvlogical, with the same text settings MoonCDC uses.
    let mut child = src
        .db
        .client_cmd("pg_recvlogical")
        .args(["-d", &src.db.dbname, "--slot", "w_oracle", "--start", "--no-loop", "-f", "-"])
        .args(["-o", "format-version=2", "-o", "include-lsn=true"])
        .args(["-o", "add-tables=public.o,public.o2"])
        .arg(format!("--endpos={}", lsn_text(endpos)))
        .env(
            "PGOPTIONS",
            "-c extra_float_digits=3 -c DateStyle=ISO,YMD -c TimeZone=UTC -c bytea_output=hex -c IntervalStyle=postgres",
        )
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start pg_recvlogical");
    let mut out = child.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        std::io::Read::read_to_string(&mut out, &mut s).expect("read pg_recvlogical output");
        s
    });
    if !wait_until_exit(&mut child, Duration::from_secs(60)) {
        let _ = child.kill();
        panic!("pg_recvlogical did not reach --endpos in 60 s");
    }
    let (code, err) = finish(child, false);
    assert_eq!(code, Some(0), "pg_recvlogical failed: {err}");
    let w2j = reader.join().unwrap();

    let (_, b) = src.capture_ok(&[]);
    let ours = by_transaction(&checked_events(&b));
    let schemas: Vec<mooncdc::wire::Schema> = b[0]
        .schemas
        .iter()
        .flatten()
        .map(|s| final_schema(&b, &s.table))
        .chain(
            b[0].changes
                .iter()
                .map(|(_, c)| final_schema(&b, &c.schema.table)),
        )
        .collect();
    let columns: BTreeMap<String, Vec<String>> = schemas
        .iter()
        .map(|s| {
            (
                s.table.clone(),
                s.columns.iter().map(|c| c.name.clone()).collect(),
            )
        })
        .collect();
    let theirs = wal2json_transactions(&w2j, &columns);
    let ours: Vec<(u64, Vec<String>)> = ours
        .into_iter()
        .map(|(l, v)| (l, v.iter().map(describe).collect()))
        .collect();
    let n_changes: usize = ours.iter().map(|(_, v)| v.len()).sum();
    assert!(
        ours.len() > 20 && n_changes > 150,
        "the workload is substantial"
    );
    if ours != theirs {
        let show = |t: &[(u64, Vec<String>)]| -> Vec<String> {
            t.iter()
                .flat_map(|(l, v)| v.iter().map(move |c| format!("{} {c}", lsn_text(*l))))
                .collect()
        };
        let (a, b) = (show(&ours), show(&theirs));
        let first = a
            .iter()
            .zip(&b)
            .position(|(x, y)| x != y)
            .unwrap_or(a.len().min(b.len()));
        panic!(
            "MoonCDC and wal2json disagree ({} vs {} changes, {} vs {} transactions); first difference at change {first}:\n  ours:     {}\n  wal2json: {}",
            a.len(),
            b.len(),
            ours.len(),
            theirs.len(),
            a.get(first).map_or("-", String::as_str),
            b.get(first).map_or("-", String::as_str),
        );
    }
    // And the projection of it all equals the source.
    let (bytes, _) = src.capture_ok(&[]);
    src.apply_ok(&bytes);
    src.audit_equal();
}

/// A TLS misconfiguration is not a usage error: a `sslrootcert` that holds
/// no certificate fails with status 1 and says so, before any connection.
#[test]
fn a_bad_sslrootcert_is_a_tls_error_not_a_usage_error() {
    let dir = tempfile::tempdir().unwrap();
    let pem = dir.path().join("root.pem");
    std::fs::write(
        &pem,
        "-----BEGIN CERTIFICATE-----\nnot base64 at all\n-----END CERTIFICATE-----\n",
    )
    .unwrap();
    let url = format!(
        "postgres://u@127.0.0.1:1/db?sslmode=verify-ca&sslrootcert={}",
        pem.display()
    );
    let out = assert_cmd::Command::new(bin(CAPTURE))
        .args(["status", "--source", &url])
        .env_remove("PGSSLMODE")
        .timeout(Duration::from_secs(30))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("sslrootcert"), "{stderr}");
}

/// libpq's service file and environment, through the real binary: a
/// `service=` string (no `dbname=`) finds the server, database and role in
/// PGSERVICEFILE; PGAPPNAME names the session.
#[test]
fn a_service_file_and_pgappname_are_honoured() {
    let src = Src::new("service");
    let s = src.session();
    s.exec("CREATE TABLE a (id int PRIMARY KEY)");
    src.init(&["public.a"]);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("services.conf");
    std::fs::write(
        &file,
        format!(
            "# a test service\n[moon]\nhost=127.0.0.1\nport={}\ndbname={}\nuser={}\npassword={}\n",
            src.db.cluster.port,
            src.db.dbname,
            pg::ROLE,
            pg::PASSWORD
        ),
    )
    .unwrap();
    let out = Command::new(bin(CAPTURE))
        .args([
            "status",
            "--source",
            "service=moon",
            "--slot",
            src.slot_name(),
        ])
        .env("PGSERVICEFILE", &file)
        .env_remove("PGPASSWORD")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(String::from_utf8_lossy(&out.stdout).contains(&src.identity()));
    // PGAPPNAME: the name the server sees (an audit holds its session long
    // enough to look).
    let mut child = Command::new(bin(CAPTURE))
        .args([
            "--source",
            "service=moon",
            "--slot",
            src.slot_name(),
            "--follow",
        ])
        .env("PGSERVICEFILE", &file)
        .env("PGAPPNAME", "moon-nightly")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let n = s.value(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name LIKE 'moon-nightly%'",
        );
        if n != "0" {
            break;
        }
        assert!(Instant::now() < deadline, "no session named by PGAPPNAME");
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = child.kill();
    let _ = child.wait();
    let out = Command::new(bin(CAPTURE))
        .args(["status", "--source", "service=nope"])
        .env("PGSERVICEFILE", &file)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("definition of service \"nope\" not found")
    );
}

/// A table whose columns all have a binary COPY form read by MoonCDC
/// (integers of every width, real, double precision, boolean, bytea, text,
/// varchar) is snapshotted through binary COPY; one with any other column
/// through the text form. Both give the same values: the same table
/// snapshotted before and after a `numeric` column is added (which moves it
/// to the text form) has the same rows, value for value, on random values
/// and the edges (REAL bits of every kind but the non-finite, -0, integer
/// extremes, empty and awkward TEXT and BLOBs).
#[test]
fn binary_and_text_copy_give_the_same_values() {
    let src = Src::new("bincopy");
    let s = src.session();
    s.exec(
        "CREATE TABLE bc (id int8 PRIMARY KEY, i2 smallint, i4 integer, f4 real, f8 double precision, \
         b boolean, y bytea, t text, v varchar(12))",
    );
    let mut rng = Rng::new(0xb1c0_c0de);
    let mut sql = String::from("INSERT INTO bc VALUES \
        (1, 32767, 2147483647, '-0', '-0', true, '\\x', '', ''), \
        (2, -32768, -2147483648, '1.4e-45', '5e-324', false, '\\x00ff', E'\\uFEFFa\\U0001F600\"\\\\', 'é'), \
        (3, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL)");
    for id in 4..400i64 {
        let f8 = loop {
            let x = f64::from_bits(rng.next());
            if x.is_finite() {
                break x;
            }
        };
        let f4 = loop {
            let x = f32::from_bits(rng.next() as u32);
            if x.is_finite() {
                break x;
            }
        };
        let bytes: Vec<u8> = (0..(rng.next() % 9)).map(|_| rng.next() as u8).collect();
        sql.push_str(&format!(
            ", ({id}, {}, {}, '{:e}'::real, '{:e}'::float8, {}, '\\x{}', 't{id}\t', 'v{}')",
            rng.next() as i16,
            rng.next() as i32,
            f4,
            f8,
            rng.next() % 2 == 0,
            hex::encode(&bytes),
            id % 1000
        ));
    }
    s.exec(&sql);
    // The statements the snapshots send, in the server's log: which form
    // each COPY asked for.
    pg::cluster().admin("ALTER DATABASE t_bincopy SET log_statement = 'all'");
    src.init(&["public.bc"]);
    let r = src.tool(SNAPSHOT, &[], &["-q"]);
    expect(&r, 0, "snapshot (binary COPY)");
    let copies = |binary: bool| {
        pg::cluster()
            .log()
            .lines()
            .filter(|l| l.contains("COPY (SELECT") && l.contains("\"bc\""))
            .filter(|l| l.contains("(FORMAT binary)") == binary)
            .count()
    };
    assert_eq!(copies(true), 1, "one binary COPY of bc");
    assert_eq!(copies(false), 0, "no text COPY of bc yet");
    let (_, binary) = parse_snapshot(&r.stdout);
    s.exec("ALTER TABLE bc ADD COLUMN n numeric");
    let r = src.tool(SNAPSHOT, &[], &["-q"]);
    expect(&r, 0, "snapshot (text COPY)");
    assert_eq!(copies(false), 1, "the numeric column makes bc read as text");
    let (_, text) = parse_snapshot(&r.stdout);
    let binary = &binary["public.bc"];
    let text: Vec<Vec<Value>> = text["public.bc"]
        .iter()
        .map(|r| r[..r.len() - 1].to_vec())
        .collect();
    assert_eq!(binary.len(), 399);
    assert_eq!(binary.len(), text.len());
    for (a, b) in binary.iter().zip(&text) {
        assert!(
            a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.same(y)),
            "binary {a:?}\ntext   {b:?}"
        );
    }
    // An array of varchar is not text in binary form: its table reads text.
    s.exec("CREATE TABLE va (id int8 PRIMARY KEY, a varchar(8)[])");
    s.exec("INSERT INTO va VALUES (1, '{x,y}'), (2, NULL)");
    s.exec("ALTER PUBLICATION mooncdc_main ADD TABLE va");
    let r = src.tool(SNAPSHOT, &[], &["-q", "--table", "public.va"]);
    expect(&r, 0, "snapshot of a varchar array");
    let (_, va) = parse_snapshot(&r.stdout);
    assert!(
        va["public.va"][0][1].same(&Value::Text("{x,y}".into())),
        "{:?}",
        va["public.va"]
    );
}

// ---------------------------------------------------------------- table shapes and names

fn ci(n: i64) -> Cell {
    Cell::Int(n)
}

fn ct(s: &str) -> Cell {
    Cell::Text(s.as_bytes().to_vec())
}

/// A capture whose standard error goes to a file (read while it runs),
/// piped into `apply` of the source's projection.
fn follow_logged(src: &Src, extra: &[&str]) -> (Child, Child, PathBuf) {
    let log = src.dir.path().join("capture.log");
    let mut args = src.source_args();
    args.push("--follow".into());
    args.extend(extra.iter().map(|s| s.to_string()));
    let mut capture = Command::new(bin(CAPTURE))
        .args(&args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(&log).expect("capture log"))
        .spawn()
        .expect("start capture --follow");
    let apply = Command::new(bin(APPLY))
        .args(["--target", &src.proj_url(), "-q"])
        .stdin(Stdio::from(capture.stdout.take().unwrap()))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start apply");
    (capture, apply, log)
}

/// Wait until `file` holds `needle`, at most `secs` seconds.
#[track_caller]
fn wait_for_text(file: &std::path::Path, needle: &str, secs: u64) -> String {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        let text = std::fs::read_to_string(file).unwrap_or_default();
        if text.contains(needle) {
            return text;
        }
        assert!(
            Instant::now() < deadline,
            "{} did not say {needle:?} within {secs} s:\n{text}",
            file.display()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The pid of the walsender holding the slot (waits for one).
fn walsender_pid(src: &Src) -> i32 {
    let s = src.session();
    let q = format!(
        "SELECT coalesce(active_pid, 0) FROM pg_replication_slots WHERE slot_name = {}",
        lit(src.slot_name())
    );
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let pid: i32 = s.value(&q).parse().unwrap();
        if pid != 0 {
            return pid;
        }
        assert!(Instant::now() < deadline, "no walsender holds the slot");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn sigterm_and_wait(mut c: Child) -> (Option<i32>, String) {
    signal(c.id() as i32, "TERM");
    assert!(
        wait_until_exit(&mut c, Duration::from_secs(30)),
        "stops on SIGTERM"
    );
    finish(c, false)
}

fn signal(pid: i32, sig: &str) {
    let ok = Command::new("kill")
        .args([&format!("-{sig}"), &pid.to_string()])
        .status()
        .expect("run kill")
        .success();
    assert!(ok, "kill -{sig} {pid}");
}

#[test]
fn schemas_and_tables_with_dots_are_distinct_tables() {
    let src = Src::new("dots");
    let s = src.session();
    s.exec("CREATE SCHEMA \"x.y\"");
    s.exec("CREATE SCHEMA x");
    s.exec("CREATE SCHEMA \"app.v2\"");
    s.exec("CREATE TABLE \"x.y\".z (id int PRIMARY KEY, v text)");
    s.exec("CREATE TABLE x.\"y.z\" (id int PRIMARY KEY, v text)");
    s.exec("CREATE TABLE \"app.v2\".orders (id int PRIMARY KEY, v text)");
    s.exec("INSERT INTO \"x.y\".z VALUES (1, 'first schema x.y'), (2, 'only in x.y')");
    s.exec("INSERT INTO x.\"y.z\" VALUES (1, 'second table y.z')");
    s.exec("INSERT INTO \"app.v2\".orders VALUES (7, 'order')");
    // Every table of the database: all three.
    let r = src.cmd("init", &[]);
    expect(&r, 0, "init of every table");
    let status = src.cmd("verify", &[]);
    expect(&status, 0, "verify");
    let r = src.pipeline(
        "{snapshot} --source \"$SRC\" --slot \"$SLOT\" -q | {apply} --target \"$PROJ\" -q",
    );
    expect(&r, 0, "snapshot | apply");
    assert_eq!(
        src.proj_rows("\"x.y\".z"),
        vec![
            vec![ci(1), ct("first schema x.y")],
            vec![ci(2), ct("only in x.y")]
        ]
    );
    assert_eq!(
        src.proj_rows("x.\"y.z\""),
        vec![vec![ci(1), ct("second table y.z")]]
    );
    assert_eq!(
        src.proj_rows("\"app.v2\".orders"),
        vec![vec![ci(7), ct("order")]]
    );
    s.exec("UPDATE \"x.y\".z SET v = 'changed in x.y' WHERE id = 1");
    s.exec("DELETE FROM x.\"y.z\" WHERE id = 1");
    s.exec("INSERT INTO x.\"y.z\" VALUES (3, 'new in y.z')");
    s.exec("INSERT INTO \"app.v2\".orders VALUES (8, 'second order')");
    let r = src.pipeline(
        "{capture} --source \"$SRC\" --slot \"$SLOT\" --after \"$({apply} cursor --target \"$PROJ\")\" | {apply} --target \"$PROJ\" -q",
    );
    expect(&r, 0, "capture | apply");
    assert_eq!(
        src.proj_rows("\"x.y\".z"),
        vec![
            vec![ci(1), ct("changed in x.y")],
            vec![ci(2), ct("only in x.y")]
        ]
    );
    assert_eq!(
        src.proj_rows("x.\"y.z\""),
        vec![vec![ci(3), ct("new in y.z")]]
    );
    assert_eq!(src.proj_rows("\"app.v2\".orders").len(), 2);
    src.audit_equal();
    // A `--table` argument quotes a part the same way.
    let r = src.tool(
        AUDIT,
        &[],
        &[
            "--target",
            &src.proj_url(),
            "-q",
            "--table",
            "\"app.v2\".orders",
        ],
    );
    expect(&r, 0, "audit of one quoted table");
}

#[test]
fn inheritance_children_are_tables_of_their_own() {
    let src = Src::new("inherit");
    let s = src.session();
    s.exec("CREATE TABLE par (id int PRIMARY KEY, v text)");
    s.exec("CREATE TABLE chi (PRIMARY KEY (id)) INHERITS (par)");
    // The same key in parent and child: two tables' rows, no duplicate.
    s.exec("INSERT INTO par VALUES (1, 'parent'), (2, 'parent two')");
    s.exec("INSERT INTO chi VALUES (1, 'child')");
    src.init(&["public.par", "public.chi"]);
    let r = src.pipeline(
        "{snapshot} --source \"$SRC\" --slot \"$SLOT\" -q | {apply} --target \"$PROJ\" -q",
    );
    expect(&r, 0, "snapshot | apply");
    assert_eq!(
        src.proj_rows("public.par"),
        vec![vec![ci(1), ct("parent")], vec![ci(2), ct("parent two")]],
        "the parent's own rows only"
    );
    assert_eq!(src.proj_rows("public.chi"), vec![vec![ci(1), ct("child")]]);
    s.exec("UPDATE chi SET v = 'child changed' WHERE id = 1");
    s.exec("DELETE FROM ONLY par WHERE id = 2");
    let r = src.pipeline(
        "{capture} --source \"$SRC\" --slot \"$SLOT\" --after \"$({apply} cursor --target \"$PROJ\")\" | {apply} --target \"$PROJ\" -q",
    );
    expect(&r, 0, "capture | apply");
    assert_eq!(src.proj_rows("public.par"), vec![vec![ci(1), ct("parent")]]);
    assert_eq!(
        src.proj_rows("public.chi"),
        vec![vec![ci(1), ct("child changed")]]
    );
    src.audit_equal();
}

#[test]
fn row_filters_and_column_lists_of_a_publication_are_honoured() {
    if pg::major_version() < 15 {
        eprintln!(
            "SKIPPED row_filters_and_column_lists_of_a_publication_are_honoured: PostgreSQL {} has no row filters or column lists",
            pg::major_version()
        );
        return;
    }
    let src = Src::new("pubfilter");
    let s = src.session();
    s.exec("CREATE TABLE f (id int PRIMARY KEY, active bool NOT NULL, v text)");
    s.exec("INSERT INTO f SELECT g, g % 2 = 0, 'row ' || g FROM generate_series(1, 10) g");
    s.exec("CREATE TABLE g (id int PRIMARY KEY, name text, password_hash text)");
    s.exec("INSERT INTO g VALUES (1, 'ada', 'secret-hash-1'), (2, 'bob', 'secret-hash-2')");
    s.exec("CREATE PUBLICATION mooncdc_main FOR TABLE f WHERE (active), g (id, name)");
    // init refuses FULL identity under g's column list (it would break the
    // application's updates) and changes nothing.
    let r = src.cmd("init", &["--table", "public.f", "--table", "public.g"]);
    assert_refused(
        &r,
        "init under a column list",
        &["column list", "password_hash", "UPDATE and DELETE"],
    );
    assert_eq!(
        s.value("SELECT relreplident FROM pg_class WHERE relname = 'g'"),
        "d"
    );
    s.exec("UPDATE g SET name = 'ada l' WHERE id = 1");
    // The row-filtered table alone is captured (FULL covers the filter).
    s.exec("ALTER PUBLICATION mooncdc_main DROP TABLE g");
    src.init(&["public.f"]);
    let r = src.pipeline(
        "{snapshot} --source \"$SRC\" --slot \"$SLOT\" -q | {apply} --target \"$PROJ\" -q",
    );
    expect(&r, 0, "snapshot | apply");
    let ids: Vec<Cell> = src
        .proj_rows("public.f")
        .into_iter()
        .map(|r| r[0].clone())
        .collect();
    assert_eq!(
        ids,
        [2, 4, 6, 8, 10].map(ci).to_vec(),
        "the filter's rows only"
    );
    // Into the filter (an insert), out of it (a delete), inside it.
    s.exec("UPDATE f SET active = true WHERE id = 3");
    s.exec("UPDATE f SET active = false WHERE id = 4");
    s.exec("UPDATE f SET v = 'changed' WHERE id = 6");
    s.exec("UPDATE f SET v = 'unseen' WHERE id = 5");
    let r = src.pipeline(
        "{capture} --source \"$SRC\" --slot \"$SLOT\" --after \"$({apply} cursor --target \"$PROJ\")\" | {apply} --target \"$PROJ\" -q",
    );
    expect(&r, 0, "capture | apply");
    let ids: Vec<Cell> = src
        .proj_rows("public.f")
        .into_iter()
        .map(|r| r[0].clone())
        .collect();
    assert_eq!(ids, [2, 3, 6, 8, 10].map(ci).to_vec());
    src.audit_equal();

    // A column list (slot made by hand; FULL is not set): the snapshot and
    // the audit read the listed columns only.
    let src2 = Src::new("collist");
    let s2 = src2.session();
    s2.exec("CREATE TABLE g (id int PRIMARY KEY, name text, password_hash text)");
    s2.exec("INSERT INTO g VALUES (1, 'ada', 'secret-hash-1'), (2, 'bob', 'secret-hash-2')");
    s2.exec("CREATE PUBLICATION mooncdc_main FOR TABLE g (id, name)");
    s2.exec(&format!(
        "SELECT pg_create_logical_replication_slot({}, 'pgoutput')",
        lit(src2.slot_name())
    ));
    let snap_file = src2.dir.path().join("snap.jsonl");
    let r = src2.pipeline(&format!(
        "{{snapshot}} --source \"$SRC\" --slot \"$SLOT\" | tee {} | {{apply}} --target \"$PROJ\" -q",
        shell_quote(&snap_file.display().to_string())
    ));
    expect(&r, 0, "snapshot | apply under a column list");
    let snap = std::fs::read_to_string(&snap_file).unwrap();
    assert!(
        !snap.contains("password_hash") && !snap.contains("secret-hash"),
        "{snap}"
    );
    assert_eq!(
        src2.proj_rows("public.g"),
        vec![vec![ci(1), ct("ada")], vec![ci(2), ct("bob")]]
    );
    s2.exec("INSERT INTO g VALUES (3, 'cy', 'secret-hash-3')");
    let r = src2.pipeline(
        "{capture} --source \"$SRC\" --slot \"$SLOT\" --after \"$({apply} cursor --target \"$PROJ\")\" | {apply} --target \"$PROJ\" -q",
    );
    expect(&r, 0, "capture | apply under a column list");
    src2.audit_equal();
}

#[test]
fn partitions_get_full_identity_and_a_partition_without_it_stops_the_read() {
    let src = Src::new("parts");
    let s = src.session();
    s.exec("CREATE TABLE p (id int PRIMARY KEY, v text) PARTITION BY RANGE (id)");
    s.exec("CREATE TABLE p1 PARTITION OF p FOR VALUES FROM (0) TO (100)");
    s.exec("CREATE TABLE p2 PARTITION OF p FOR VALUES FROM (100) TO (200)");
    s.exec("INSERT INTO p VALUES (1, 'precious'), (150, 'kept')");
    s.exec("CREATE PUBLICATION mooncdc_main FOR TABLE p WITH (publish_via_partition_root = true)");
    src.init(&["public.p"]);
    for t in ["p", "p1", "p2"] {
        assert_eq!(
            s.value(&format!(
                "SELECT relreplident FROM pg_class WHERE relname = '{t}'"
            )),
            "f",
            "{t} has FULL identity"
        );
    }
    let r = src.pipeline(
        "{snapshot} --source \"$SRC\" --slot \"$SLOT\" -q | {apply} --target \"$PROJ\" -q",
    );
    expect(&r, 0, "snapshot | apply");
    s.exec("DELETE FROM p WHERE id = 1");
    s.exec("UPDATE p SET v = 'changed' WHERE id = 150");
    let r = src.pipeline(
        "{capture} --source \"$SRC\" --slot \"$SLOT\" --after \"$({apply} cursor --target \"$PROJ\")\" | {apply} --target \"$PROJ\" -q",
    );
    expect(&r, 0, "capture | apply of a delete in a partition");
    src.audit_equal();

    // A partition attached later without FULL identity: verify names it,
    // a read stops before writing anything, upgrade mends it.
    s.exec("CREATE TABLE p3 (id int PRIMARY KEY, v text)");
    s.exec("ALTER TABLE p ATTACH PARTITION p3 FOR VALUES FROM (200) TO (300)");
    let r = src.cmd("verify", &[]);
    assert_refused(
        &r,
        "verify",
        &["partition \"public.p3\"", "REPLICA IDENTITY FULL"],
    );
    s.exec("INSERT INTO p VALUES (250, 'in p3')");
    let after = src.target_cursor().unwrap().to_json();
    let r = src.capture(&["--after", &after]);
    assert_refused(&r, "read", &["partition \"public.p3\"", "upgrade"]);
    assert!(r.stdout.is_empty(), "nothing written");
    let r = src.cmd("upgrade", &[]);
    expect(&r, 0, "upgrade");
    assert_eq!(
        s.value("SELECT relreplident FROM pg_class WHERE relname = 'p3'"),
        "f"
    );
    let r = src.pipeline(
        "{capture} --source \"$SRC\" --slot \"$SLOT\" --after \"$({apply} cursor --target \"$PROJ\")\" | {apply} --target \"$PROJ\" -q",
    );
    expect(&r, 0, "capture | apply after upgrade");
    src.audit_equal();

    // With the DDL trigger, a partition gets FULL identity as it is attached.
    let su = src.db.superuser_url();
    let r = run(
        CAPTURE,
        &["init", "--ddl", "--source", &su, "--slot", src.slot_name()],
        None,
    );
    expect(&r, 0, "init --ddl");
    s.exec("CREATE TABLE p4 (id int PRIMARY KEY, v text)");
    s.exec("ALTER TABLE p ATTACH PARTITION p4 FOR VALUES FROM (300) TO (400)");
    s.exec("CREATE TABLE p5 PARTITION OF p FOR VALUES FROM (400) TO (500)");
    for t in ["p4", "p5"] {
        assert_eq!(
            s.value(&format!(
                "SELECT relreplident FROM pg_class WHERE relname = '{t}'"
            )),
            "f",
            "{t} got FULL identity from the DDL trigger"
        );
    }
    s.exec("INSERT INTO p VALUES (350, 'in p4'), (450, 'in p5')");
    s.exec("DELETE FROM p WHERE id IN (250, 350)");
    let r = src.pipeline(
        "{capture} --source \"$SRC\" --slot \"$SLOT\" --after \"$({apply} cursor --target \"$PROJ\")\" | {apply} --target \"$PROJ\" -q",
    );
    expect(
        &r,
        0,
        "capture | apply with partitions attached under the DDL trigger",
    );
    src.audit_equal();
}

#[test]
fn a_partition_attached_with_rows_while_following_is_told() {
    let src = Src::new("attachrows");
    let s = src.session();
    s.exec("CREATE TABLE p (id int PRIMARY KEY, v text) PARTITION BY RANGE (id)");
    s.exec("CREATE TABLE p1 PARTITION OF p FOR VALUES FROM (0) TO (100)");
    s.exec("CREATE PUBLICATION mooncdc_main FOR TABLE p WITH (publish_via_partition_root = true)");
    src.init(&["public.p"]);
    let r = src.pipeline(
        "{snapshot} --source \"$SRC\" --slot \"$SLOT\" -q | {apply} --target \"$PROJ\" -q",
    );
    expect(&r, 0, "snapshot | apply");
    let (capture, apply, log) =
        follow_logged(&src, &["--after", &src.target_cursor().unwrap().to_json()]);
    s.exec("INSERT INTO p VALUES (1, 'streamed')");
    // The follower is running (it has looked at the publication) once the
    // row is in.
    wait_for_every(30, 50, "the first row arrives", || {
        src.proj_count("public.p") >= 1
    });
    s.exec("CREATE TABLE p2 (id int PRIMARY KEY, v text)");
    s.exec("ALTER TABLE p2 REPLICA IDENTITY FULL");
    s.exec("INSERT INTO p2 VALUES (150, 'held before attach')");
    s.exec("ALTER TABLE p ATTACH PARTITION p2 FOR VALUES FROM (100) TO (200)");
    let text = wait_for_text(&log, "partition \"public.p2\" was attached", 30);
    assert!(text.contains("not in the stream"), "{text}");
    // Detached: its rows stay in targets, with no delete streamed.
    s.exec("ALTER TABLE p DETACH PARTITION p2");
    let text = wait_for_text(&log, "partition \"public.p2\" was detached", 30);
    assert!(text.contains("targets keep them"), "{text}");
    let (code, _) = sigterm_and_wait(capture);
    assert_eq!(code, Some(0));
    let (acode, aerr) = finish(apply, false);
    assert_eq!(acode, Some(0), "{aerr}");
}

#[test]
fn a_reconnect_after_the_slot_moved_past_the_read_stops() {
    let src = Src::new("slotmoved");
    let s = src.session();
    s.exec("CREATE TABLE a (id int PRIMARY KEY, v text)");
    src.init(&["public.a"]);
    s.exec("INSERT INTO a VALUES (1, 'one')");
    let (mut capture, apply, log) = follow_logged(&src, &["--retry-delay-ms", "1500"]);
    wait_for_every(30, 50, "the first row arrives", || {
        src.target_cursor().is_some() && src.proj_count("public.a") >= 1
    });
    // The connection breaks; meanwhile rows commit and the slot is
    // confirmed past them by somebody else.
    let pid = walsender_pid(&src);
    s.exec(&format!("SELECT pg_terminate_backend({pid})"));
    src.wait_slot_inactive();
    s.exec("INSERT INTO a VALUES (2, 'two'), (3, 'three')");
    s.exec(&format!(
        "SELECT pg_replication_slot_advance({}, pg_current_wal_lsn())",
        lit(src.slot_name())
    ));
    assert!(
        wait_until_exit(&mut capture, Duration::from_secs(30)),
        "capture stops by itself"
    );
    let (code, _) = finish(capture, false);
    let text = std::fs::read_to_string(&log).unwrap();
    assert_eq!(code, Some(1), "{text}");
    assert!(
        text.contains("before the slot's confirmed position"),
        "{text}"
    );
    let _ = finish(apply, false);
    assert_eq!(
        src.proj_count("public.a"),
        1,
        "nothing after the gap applied"
    );
}

#[test]
fn a_stalled_walsender_is_noticed_and_the_follower_reconnects() {
    let src = Src::new("stalled");
    let s = src.session();
    s.exec("CREATE TABLE a (id int PRIMARY KEY, v text)");
    src.init(&["public.a"]);
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let listen = format!("127.0.0.1:{port}");
    let (capture, apply, log) = follow_logged(
        &src,
        &[
            "--receive-timeout-ms",
            "2000",
            "--retry-delay-ms",
            "200",
            "--max-retries",
            "100",
            "--metrics-listen",
            &listen,
        ],
    );
    s.exec("INSERT INTO a VALUES (1, 'one')");
    wait_for_every(30, 50, "the first row arrives", || {
        src.target_cursor().is_some() && src.proj_count("public.a") >= 1
    });
    let pid = walsender_pid(&src);
    struct Cont(i32);
    impl Drop for Cont {
        fn drop(&mut self) {
            signal(self.0, "CONT");
        }
    }
    signal(pid, "STOP");
    let cont = Cont(pid);
    s.exec("INSERT INTO a SELECT g, repeat('x', 1000) FROM generate_series(2, 2000) g");
    let text = wait_for_text(&log, "reconnecting", 30);
    assert!(text.contains("receive-timeout-ms"), "{text}");
    // The byte lag grows from the server's own WAL position while keepalives
    // have stopped, and says how old that position is.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let m = http_get(&listen, "/metrics");
        let lag: u64 = metric_value(&m, "mooncdc_source_lag_bytes") as u64;
        if lag > 1_000_000 {
            assert!(m.contains("mooncdc_source_wal_age_seconds"), "{m}");
            break;
        }
        assert!(Instant::now() < deadline, "lag bytes stayed at {lag}:\n{m}");
        std::thread::sleep(Duration::from_millis(200));
    }
    drop(cont);
    wait_for_every(60, 100, "the rows arrive after the reconnect", || {
        src.proj_count("public.a") >= 2000
    });
    let (code, err) = sigterm_and_wait(capture);
    assert_eq!(code, Some(0), "{err}");
    let _ = finish(apply, false);
    src.audit_equal();
}

fn metric_value(text: &str, name: &str) -> f64 {
    text.lines()
        .find(|l| l.starts_with(name) && l[name.len()..].starts_with([' ', '{']))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no metric {name} in:\n{text}"))
}

/// A table set to its default identity after `init` has its later changes
/// carried as they were logged: key-only, exactly (docs/POSTGRES.md, "An
/// identity changed after init"); `init` sets FULL again.
#[test]
fn an_identity_changed_after_init_is_carried_as_the_change_logged_it() {
    let src = Src::new("identback");
    let s = src.session();
    s.exec("CREATE TABLE a (id int PRIMARY KEY, v text NOT NULL)");
    s.exec("INSERT INTO a VALUES (1, 'one'), (2, 'two')");
    src.init(&["public.a"]);
    expect(
        &pg::snapshot_into(&src.url(), src.slot_name(), &src.proj_url()),
        0,
        "snapshot | apply",
    );
    s.exec("ALTER TABLE a REPLICA IDENTITY DEFAULT");
    s.exec("UPDATE a SET v = 'uno' WHERE id = 1");
    s.exec("DELETE FROM a WHERE id = 2");
    let after = src.target_cursor().unwrap().to_json();
    let (out, b) = src.capture_ok(&["--after", &after]);
    let e = events(&b);
    assert_eq!(e.len(), 2, "{}", String::from_utf8_lossy(&out));
    assert_eq!(e[0].before, None);
    assert_eq!(e[0].before_key, Some(vec![Value::Integer(1)]));
    assert_eq!(
        e[0].after,
        Some(vec![Value::Integer(1), Value::Text("uno".into())])
    );
    assert_eq!(
        (e[1].operation, &e[1].before_key),
        (Operation::Delete, &Some(vec![Value::Integer(2)]))
    );
    src.apply_ok(&out);
    src.audit_equal();
    // Not drift: verify says what the identity means.
    let r = src.cmd("verify", &[]);
    expect(&r, 0, "verify");
    assert!(
        r.stdout_str()
            .contains("table public.a: replica identity DEFAULT"),
        "{}",
        r.stdout_str()
    );
    // init sets FULL again: whole old rows from then on.
    src.init(&["public.a"]);
    s.exec("UPDATE a SET v = 'one' WHERE id = 1");
    let after = src.target_cursor().unwrap().to_json();
    let (_, b) = src.capture_ok(&["--after", &after]);
    let e = events(&b);
    assert_eq!(
        e[0].before,
        Some(vec![Value::Integer(1), Value::Text("uno".into())])
    );
}

#[test]
fn status_names_row_filters_and_column_lists() {
    if pg::major_version() < 15 {
        eprintln!("SKIPPED status_names_row_filters_and_column_lists: PostgreSQL 14 has neither");
        return;
    }
    let src = Src::new("pubstatus");
    let s = src.session();
    s.exec("CREATE TABLE f (id int PRIMARY KEY, active bool NOT NULL, v text)");
    s.exec("CREATE TABLE g (id int PRIMARY KEY, name text, password_hash text)");
    s.exec("CREATE PUBLICATION mooncdc_main FOR TABLE f WHERE (active), g (id, name) WITH (publish_via_partition_root = true)");
    s.exec(&format!(
        "SELECT pg_create_logical_replication_slot({}, 'pgoutput')",
        lit(src.slot_name())
    ));
    let st = src.status();
    assert_eq!(
        st["publication"],
        "mooncdc_main (partitions through their root): public.f WHERE active, public.g (id, name)",
        "{st:?}"
    );
}

#[test]
fn an_invalidated_slot_is_named_with_its_reason_and_the_way_back() {
    let cluster: &'static pg::Cluster = pg::private_cluster();
    let src = Src {
        db: cluster.create_db("lost"),
        slot: Some("s_lost".into()),
        dir: tempfile::tempdir().unwrap(),
    };
    let s = src.session();
    s.exec("CREATE TABLE a (id int PRIMARY KEY, v text)");
    src.init(&["public.a"]);
    cluster.admin("ALTER SYSTEM SET max_slot_wal_keep_size = '1MB'");
    cluster.admin("SELECT pg_reload_conf()");
    // WAL beyond what the slot may keep, then checkpoints: the slot is lost.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        s.exec("INSERT INTO a SELECT g, repeat('x', 200) FROM generate_series(1, 20000) g ON CONFLICT (id) DO UPDATE SET v = excluded.v || 'y'");
        cluster.admin("SELECT pg_switch_wal()");
        cluster.admin("CHECKPOINT");
        if src.status()["wal_status"] == "lost" {
            break;
        }
        assert!(Instant::now() < deadline, "the slot was never invalidated");
    }
    let st = src.status();
    if pg::major_version() >= 17 {
        assert_eq!(st["invalidation_reason"], "wal_removed", "{st:?}");
    }
    let r = src.cmd("verify", &[]);
    assert_refused(
        &r,
        "verify",
        &["is invalidated", "pg_drop_replication_slot", "new snapshot"],
    );
    let r = src.capture(&[]);
    assert_refused(
        &r,
        "read",
        &[
            "is invalidated",
            "WAL it needed was removed",
            "Starting over",
        ],
    );
}

#[test]
fn generated_columns_are_carried_only_when_the_publication_publishes_them() {
    let cases: &[(&str, &str)] = if pg::major_version() >= 18 {
        &[
            ("gennone", ""),
            ("genstored", " WITH (publish_generated_columns = stored)"),
        ]
    } else {
        eprintln!("SKIPPED the publish_generated_columns half of generated_columns_are_carried_only_when_the_publication_publishes_them: PostgreSQL 18 has it");
        &[("gennone", "")]
    };
    for (name, with) in cases {
        let src = Src::new(name);
        let s = src.session();
        s.exec(
            "CREATE TABLE t (id int PRIMARY KEY, a int, b int GENERATED ALWAYS AS (a * 2) STORED)",
        );
        s.exec("INSERT INTO t (id, a) VALUES (1, 10), (2, 20)");
        s.exec(&format!(
            "CREATE PUBLICATION mooncdc_main FOR TABLE t{with}"
        ));
        if with.is_empty() && pg::major_version() >= 18 {
            // FULL identity over an unpublished generated column makes 18
            // refuse the application's updates: init refuses instead.
            let r = src.cmd("init", &["--table", "public.t"]);
            assert_refused(
                &r,
                "init",
                &["generated columns \"b\"", "publish_generated_columns"],
            );
            assert_eq!(
                s.value("SELECT relreplident FROM pg_class WHERE relname = 't'"),
                "d"
            );
            s.exec("UPDATE t SET a = 12 WHERE id = 1");
            continue;
        }
        src.init(&["public.t"]);
        let r = src.pipeline(
            "{snapshot} --source \"$SRC\" --slot \"$SLOT\" -q | {apply} --target \"$PROJ\" -q",
        );
        expect(&r, 0, "snapshot | apply");
        s.exec("INSERT INTO t (id, a) VALUES (3, 30)");
        s.exec("UPDATE t SET a = 11 WHERE id = 1");
        let r = src.pipeline(
            "{capture} --source \"$SRC\" --slot \"$SLOT\" --after \"$({apply} cursor --target \"$PROJ\")\" | {apply} --target \"$PROJ\" -q",
        );
        expect(&r, 0, "capture | apply");
        let rows = src.proj_rows("public.t");
        if with.is_empty() {
            assert_eq!(
                rows,
                vec![
                    vec![ci(1), ci(11)],
                    vec![ci(2), ci(20)],
                    vec![ci(3), ci(30)]
                ],
                "{name}"
            );
        } else {
            assert_eq!(
                rows,
                vec![
                    vec![ci(1), ci(11), ci(22)],
                    vec![ci(2), ci(20), ci(40)],
                    vec![ci(3), ci(30), ci(60)]
                ],
                "{name}"
            );
        }
        src.audit_equal();
    }
}

/// The rows of `public.a` in a projection: (count, sum of ids).
fn count_sum(proj: &std::path::Path) -> (i64, i64) {
    let c = rusqlite::Connection::open(proj).unwrap();
    c.query_row(
        "SELECT count(*), coalesce(sum(id), 0) FROM \"public.a\"",
        [],
        |r| Ok((r.get(0)?, r.get(1)?)),
    )
    .unwrap_or((0, 0))
}

/// Wait (90 s at most) until the projection's `public.a` has `want`'s count
/// and sum; else fail with `what` and the follower's log.
#[track_caller]
fn wait_for_count_sum(proj: &std::path::Path, want: (i64, i64), what: &str, log: &std::path::Path) {
    let deadline = Instant::now() + Duration::from_secs(90);
    while count_sum(proj) != want {
        assert!(
            Instant::now() < deadline,
            "{what}: {:?} of {want:?}\n{}",
            count_sum(proj),
            std::fs::read_to_string(log).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn a_failover_slot_survives_the_primary_loss_and_the_standby_promotion() {
    if pg::major_version() < 17 {
        eprintln!(
            "SKIPPED a_failover_slot_survives_the_primary_loss_and_the_standby_promotion: PostgreSQL {} has no failover slots (the matrix runs it on 17 and 18)",
            pg::major_version()
        );
        return;
    }
    let primary: &'static pg::Cluster = pg::private_cluster();
    let db = primary.create_db("failover");
    let s = db.session();
    s.exec("CREATE TABLE a (id int8 PRIMARY KEY, v text)");
    s.exec("INSERT INTO a SELECT g, 'before' FROM generate_series(1, 50) g");
    let standby = primary.standby(
        "phys1",
        "sync_replication_slots = on\nhot_standby_feedback = on",
    );
    // Without synchronized_standby_slots, init --failover says what is
    // missing (a reader could get ahead of the standby).
    let r = run(
        CAPTURE,
        &[
            "init",
            "--source",
            &db.url(),
            "--slot",
            "s_unguarded",
            "--table",
            "public.a",
            "--failover",
        ],
        None,
    );
    expect(&r, 0, "init --failover without synchronized_standby_slots");
    assert!(
        r.stderr.contains("synchronized_standby_slots is not set"),
        "{}",
        r.stderr
    );
    s.exec("SELECT pg_drop_replication_slot('s_unguarded')");
    // Set after the base backup: the promoted standby has no phys1 to wait for.
    primary.admin("ALTER SYSTEM SET synchronized_standby_slots = 'phys1'");
    primary.admin("SELECT pg_reload_conf()");
    let url = format!(
        "postgres://{}:{}@127.0.0.1:{},127.0.0.1:{}/{}?target_session_attrs=read-write",
        pg::ROLE,
        pg::url_encode(pg::PASSWORD),
        primary.port,
        standby.port,
        db.dbname
    );
    let dir = tempfile::tempdir().unwrap();
    let proj = dir.path().join("proj.db");
    let proj2 = dir.path().join("proj2.db");
    let t = format!("sqlite:{}", proj.display());
    let t2 = format!("sqlite:{}", proj2.display());
    let proj3 = dir.path().join("proj3.db");
    let t3 = format!("sqlite:{}", proj3.display());
    // One failover slot, one plain slot for the same tables.
    let r = run(
        CAPTURE,
        &[
            "init",
            "--source",
            &url,
            "--slot",
            "s_fo",
            "--table",
            "public.a",
            "--failover",
        ],
        None,
    );
    expect(&r, 0, "init --failover");
    assert!(r.stderr.contains("is a failover slot"), "{}", r.stderr);
    assert!(
        !r.stderr.contains("synchronized_standby_slots is not set"),
        "{}",
        r.stderr
    );
    // A second failover slot, read now and then without --follow.
    let r = run(
        CAPTURE,
        &[
            "init",
            "--source",
            &url,
            "--slot",
            "s_fo2",
            "--table",
            "public.a",
            "--failover",
        ],
        None,
    );
    expect(&r, 0, "init --failover of a second slot");
    assert_eq!(
        s.value("SELECT failover FROM pg_replication_slots WHERE slot_name = 's_fo'"),
        "t"
    );
    let r = run(
        CAPTURE,
        &[
            "init", "--source", &url, "--slot", "s_plain", "--table", "public.a",
        ],
        None,
    );
    expect(&r, 0, "init of a plain slot");
    for (slot, target) in [("s_fo", &t), ("s_plain", &t2), ("s_fo2", &t3)] {
        let r = pipeline(&format!(
            "{{snapshot}} --source {u} --slot {slot} -q | {{apply}} --target {t} -q",
            u = shell_quote(&url),
            t = shell_quote(target)
        ));
        expect(&r, 0, "snapshot | apply");
    }
    let follow = |slot: &str, target: &str, log: &std::path::Path| {
        let after = run(APPLY, &["cursor", "--target", target], None)
            .stdout_str()
            .trim()
            .to_string();
        let mut capture = Command::new(bin(CAPTURE))
            .args([
                "--source",
                &url,
                "--slot",
                slot,
                "--after",
                &after,
                "--follow",
                "--ack-from-target",
                target,
            ])
            .args([
                "--retry-delay-ms",
                "200",
                "--max-retries",
                "200",
                "--receive-timeout-ms",
                "5000",
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(log).unwrap())
            .spawn()
            .expect("start capture --follow");
        let apply = Command::new(bin(APPLY))
            .args(["--target", target, "-q"])
            .stdin(Stdio::from(capture.stdout.take().unwrap()))
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start apply");
        (capture, apply)
    };
    let log = dir.path().join("fo.log");
    let log2 = dir.path().join("plain.log");
    let (capture, apply) = follow("s_fo", &t, &log);
    let (mut capture2, apply2) = follow("s_plain", &t2, &log2);
    let log3 = dir.path().join("fo2.log");
    let (capture3, apply3) = follow("s_fo2", &t3, &log3);
    let wait_count = |p: &std::path::Path, n: i64, what: &str| {
        let deadline = Instant::now() + Duration::from_secs(90);
        while count_sum(p).0 < n {
            assert!(
                Instant::now() < deadline,
                "{what}: {} rows of {n}\n{}",
                count_sum(p).0,
                std::fs::read_to_string(&log).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    };
    for i in 51..=150 {
        s.exec(&format!(
            "INSERT INTO a VALUES ({i}, 'on the first primary')"
        ));
    }
    wait_count(&proj, 150, "the first primary's rows");
    wait_count(&proj2, 150, "the first primary's rows (plain slot)");
    wait_count(
        &proj3,
        150,
        "the first primary's rows (second failover slot)",
    );
    let cursor_of = |target: &str| {
        run(APPLY, &["cursor", "--target", target], None)
            .stdout_str()
            .trim()
            .to_string()
    };
    // After the failover, s_fo2 is read now and then without --follow.
    let read_fo2 = || {
        pipeline(&format!(
            "{{capture}} --source {u} --slot s_fo2 --after \"$({{apply}} cursor --target {t})\" | {{apply}} --target {t} -q",
            u = shell_quote(&url),
            t = shell_quote(&t3)
        ))
    };
    let ack_fo2 = || {
        let cursor = cursor_of(&t3);
        run(
            CAPTURE,
            &[
                "ack", "--source", &url, "--slot", "s_fo2", "--cursor", &cursor,
            ],
            None,
        )
    };
    // The standby has synchronized the failover slot past the snapshot.
    let sb = pg::Session::connect(standby.port, &db.dbname);
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let synced = sb.value(
            "SELECT count(*) = 2 FROM pg_replication_slots WHERE slot_name IN ('s_fo', 's_fo2') AND synced AND NOT temporary AND confirmed_flush_lsn > '0/0'",
        );
        if synced == "t" {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the standby never synchronized the failover slots: standby {:?}, primary {:?}",
            sb.query("SELECT slot_name::text, synced::text, temporary::text, restart_lsn::text, confirmed_flush_lsn::text, catalog_xmin::text FROM pg_replication_slots"),
            db.session().query("SELECT slot_name::text, failover::text, restart_lsn::text, confirmed_flush_lsn::text, catalog_xmin::text FROM pg_replication_slots")
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    drop(sb);
    // s_fo2's follower stops before the failover.
    let (code, err) = sigterm_and_wait(capture3);
    assert_eq!(code, Some(0), "{err}");
    let (acode, aerr) = finish(apply3, false);
    assert_eq!(acode, Some(0), "{aerr}");
    // Lose the primary in the middle of a stream of writes (each its own
    // transaction; those the standby never received are not the new
    // primary's, and must not reach the target either); promote the
    // standby; write on the new primary.
    drop(s);
    let port = primary.port;
    let dbname = db.dbname.clone();
    let writer = std::thread::spawn(move || {
        let w = pg::Session::connect(port, &dbname);
        let mut i = 1000;
        while w
            .try_exec(&format!(
                "INSERT INTO a VALUES ({i}, 'while the primary is lost')"
            ))
            .is_ok()
        {
            i += 1;
        }
        i - 1000
    });
    std::thread::sleep(Duration::from_millis(300));
    primary.stop_immediate();
    let written = writer.join().unwrap();
    assert!(written > 0, "writes were running when the primary was lost");
    standby.promote();
    let s2 = pg::Session::connect(standby.port, &db.dbname);
    for i in 151..=200 {
        s2.exec(&format!("INSERT INTO a VALUES ({i}, 'on the new primary')"));
    }
    let src_now = || -> (i64, i64) {
        let c = s2.value("SELECT count(*) || ' ' || sum(id) FROM a");
        let (a, b) = c.split_once(' ').unwrap();
        (a.parse().unwrap(), b.parse().unwrap())
    };
    let want = src_now();
    eprintln!(
        "failover: {written} writes while the primary was lost, {} of them on the new primary",
        want.0 - 200
    );
    wait_for_count_sum(
        &proj,
        want,
        "the new primary's rows, through the failover slot",
        &log,
    );
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(text.contains("timeline changed"), "{text}");
    let (code, err) = sigterm_and_wait(capture);
    assert_eq!(code, Some(0), "{err}");
    let (acode, aerr) = finish(apply, false);
    assert_eq!(acode, Some(0), "{aerr}");
    // Every key once: count and sum against the new primary's.
    assert_eq!(count_sum(&proj), src_now());
    let r = run(
        AUDIT,
        &["--source", &url, "--slot", "s_fo", "--target", &t, "-q"],
        None,
    );
    expect(&r, 0, "audit against the new primary");
    // s_fo2 after the failover: a read (which never acknowledges) takes the
    // new primary's rows, so its target's cursor is past the fork and the
    // slot's confirmed position before it. A fresh start from there cannot
    // tell these changes from an old primary's that the standby never had
    // (the new primary's own would then be skipped): refused, naming the
    // fork. Acknowledged (they were read here), the start goes on.
    expect(&read_fo2(), 0, "read of s_fo2 from the new primary");
    assert_eq!(count_sum(&proj3), want);
    s2.exec("INSERT INTO a VALUES (201, 'later')");
    let r = read_fo2();
    expect(
        &r,
        1,
        "a start from past the fork on a slot confirmed before it",
    );
    assert!(
        r.stderr.contains("forked from timeline") && r.stderr.contains("new snapshot"),
        "{}",
        r.stderr
    );
    assert_eq!(count_sum(&proj3), want, "nothing applied");
    expect(&ack_fo2(), 0, "ack of s_fo2");
    expect(&read_fo2(), 0, "the read once acknowledged");
    assert_eq!(count_sum(&proj3), src_now());
    let r = run(
        AUDIT,
        &["--source", &url, "--slot", "s_fo2", "--target", &t3, "-q"],
        None,
    );
    expect(&r, 0, "audit of s_fo2's target against the new primary");
    // The plain slot is not on the new primary: its follower stops, naming
    // --failover, with nothing wrong applied.
    assert!(
        wait_until_exit(&mut capture2, Duration::from_secs(90)),
        "the plain slot's follower stops"
    );
    let (code2, _) = finish(capture2, false);
    let text2 = std::fs::read_to_string(&log2).unwrap();
    assert_eq!(code2, Some(1), "{text2}");
    assert!(
        text2.contains("--failover") && text2.contains("new snapshot"),
        "{text2}"
    );
    let _ = finish(apply2, false);
    let from_new_primary: i64 = rusqlite::Connection::open(&proj2)
        .unwrap()
        .query_row(
            "SELECT count(*) FROM \"public.a\" WHERE id BETWEEN 151 AND 200",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(
        from_new_primary, 0,
        "nothing after the failover reached the plain slot's target"
    );
}

#[test]
fn capture_from_a_standby_snapshot_then_follow() {
    if pg::major_version() < 16 {
        eprintln!(
            "SKIPPED capture_from_a_standby_snapshot_then_follow: PostgreSQL {} has no logical decoding on a standby (the matrix runs it on 16, 17 and 18)",
            pg::major_version()
        );
        return;
    }
    let primary: &'static pg::Cluster = pg::private_cluster();
    let db = primary.create_db("onstandby");
    let s = db.session();
    s.exec("CREATE TABLE a (id int8 PRIMARY KEY, v text)");
    s.exec("INSERT INTO a SELECT g, 'first' FROM generate_series(1, 100) g");
    let standby = primary.standby("phys_sb", "hot_standby_feedback = on");
    let primary_url = db.url();
    let url = format!(
        "postgres://{}:{}@127.0.0.1:{}/{}",
        pg::ROLE,
        pg::url_encode(pg::PASSWORD),
        standby.port,
        db.dbname
    );
    // A slot on a standby waits for the primary's next running-transactions
    // record: log one often while the test runs.
    let stop = Arc::new(AtomicBool::new(false));
    let logger = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                primary.admin("SELECT pg_log_standby_snapshot()");
                std::thread::sleep(Duration::from_millis(300));
            }
        })
    };
    // The primary gets the publication and identity, no slot; a standby
    // refuses --no-slot, then takes the slot.
    let r = run(
        CAPTURE,
        &[
            "init",
            "--no-slot",
            "--source",
            &primary_url,
            "--slot",
            "s_sb",
            "--table",
            "public.a",
        ],
        None,
    );
    expect(&r, 0, "init --no-slot on the primary");
    assert_eq!(
        s.value("SELECT count(*) FROM pg_replication_slots WHERE slot_name = 's_sb'"),
        "0"
    );
    // The standby replays the publication before init there looks for it.
    let made = s.flush_lsn();
    let sb = pg::Session::connect(standby.port, &db.dbname);
    wait_for_every(60, 50, "the standby to replay init", || {
        pg::parse_lsn(&sb.value("SELECT pg_last_wal_replay_lsn()")) >= made
    });
    drop(sb);
    let r = run(
        CAPTURE,
        &[
            "init",
            "--no-slot",
            "--source",
            &url,
            "--slot",
            "s_sb",
            "--table",
            "public.a",
        ],
        None,
    );
    expect(&r, 2, "init --no-slot on the standby");
    assert!(r.stderr.contains("standby"), "{}", r.stderr);
    let r = run(
        CAPTURE,
        &[
            "init", "--source", &url, "--slot", "s_sb", "--table", "public.a",
        ],
        None,
    );
    expect(&r, 0, "init on the standby");
    let dir = tempfile::tempdir().unwrap();
    let proj = dir.path().join("proj.db");
    let t = format!("sqlite:{}", proj.display());
    let r = pipeline(&format!(
        "{{snapshot}} --source {u} --slot s_sb -q | {{apply}} --target {t} -q",
        u = shell_quote(&url),
        t = shell_quote(&t)
    ));
    expect(&r, 0, "snapshot from the standby | apply");
    assert_eq!(count_sum(&proj).0, 100);
    let after = run(APPLY, &["cursor", "--target", &t], None)
        .stdout_str()
        .trim()
        .to_string();
    let log = dir.path().join("capture.log");
    let mut capture = Command::new(bin(CAPTURE))
        .args([
            "--source",
            &url,
            "--slot",
            "s_sb",
            "--after",
            &after,
            "--follow",
            "--ack-from-target",
            &t,
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .expect("start capture --follow");
    let apply = Command::new(bin(APPLY))
        .args(["--target", &t, "-q"])
        .stdin(Stdio::from(capture.stdout.take().unwrap()))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start apply");
    s.exec("INSERT INTO a SELECT g, 'second' FROM generate_series(101, 200) g");
    s.exec("UPDATE a SET v = 'changed' WHERE id % 7 = 0");
    s.exec("DELETE FROM a WHERE id % 10 = 3");
    let want: (i64, i64) = {
        let c = s.value("SELECT count(*) || ' ' || sum(id) FROM a");
        let (a, b) = c.split_once(' ').unwrap();
        (a.parse().unwrap(), b.parse().unwrap())
    };
    wait_for_count_sum(
        &proj,
        want,
        "the primary's changes arrive through the standby",
        &log,
    );
    let (code, err) = sigterm_and_wait(capture);
    assert_eq!(code, Some(0), "{err}");
    let _ = finish(apply, false);
    stop.store(true, Ordering::Relaxed);
    logger.join().unwrap();
    let r = run(
        AUDIT,
        &["--source", &url, "--slot", "s_sb", "--target", &t, "-q"],
        None,
    );
    expect(&r, 0, "audit against the standby");
    let r = run(
        AUDIT,
        &[
            "--source",
            &primary_url,
            "--slot",
            "s_sb",
            "--target",
            &t,
            "-q",
        ],
        None,
    );
    expect(&r, 0, "audit against the primary");
}

#[test]
fn partitions_published_as_themselves_are_tables_of_their_own() {
    let src = Src::new("leaves");
    let s = src.session();
    s.exec("CREATE TABLE p (id int PRIMARY KEY, v text) PARTITION BY RANGE (id)");
    s.exec("CREATE TABLE p1 PARTITION OF p FOR VALUES FROM (0) TO (100)");
    s.exec("CREATE TABLE p2 PARTITION OF p FOR VALUES FROM (100) TO (200)");
    s.exec("INSERT INTO p VALUES (1, 'one'), (150, 'one fifty')");
    // publish_via_partition_root = false (the default): leaves are tables.
    src.init(&["public.p"]);
    let r = src.pipeline(
        "{snapshot} --source \"$SRC\" --slot \"$SLOT\" -q | {apply} --target \"$PROJ\" -q",
    );
    expect(&r, 0, "snapshot | apply");
    assert_eq!(src.proj_rows("public.p1"), vec![vec![ci(1), ct("one")]]);
    assert_eq!(
        src.proj_rows("public.p2"),
        vec![vec![ci(150), ct("one fifty")]]
    );
    let (capture, apply, log) =
        follow_logged(&src, &["--after", &src.target_cursor().unwrap().to_json()]);
    s.exec("INSERT INTO p VALUES (2, 'two')");
    wait_for_every(30, 50, "the first row arrives", || {
        src.proj_count("public.p1") >= 2
    });
    // A partition attached with rows: a table of its own from its first
    // change on, its earlier rows told about.
    s.exec("CREATE TABLE p3 (id int PRIMARY KEY, v text)");
    s.exec("ALTER TABLE p3 REPLICA IDENTITY FULL");
    s.exec("INSERT INTO p3 VALUES (250, 'held before attach')");
    s.exec("ALTER TABLE p ATTACH PARTITION p3 FOR VALUES FROM (200) TO (300)");
    // Published as itself, it joins the publication as a table.
    let text = wait_for_text(&log, "\"public.p3\" was added to the publication", 30);
    assert!(text.contains("holding rows"), "{text}");
    s.exec("INSERT INTO p VALUES (260, 'after attach')");
    s.exec("DELETE FROM p WHERE id = 150");
    wait_for_every(30, 50, "the delete arrives", || {
        src.proj_count("public.p2") == 0
    });
    let (code, err) = sigterm_and_wait(capture);
    assert_eq!(code, Some(0), "{err}");
    let _ = finish(apply, false);
    assert_eq!(
        src.proj_rows("public.p3"),
        vec![vec![ci(260), ct("after attach")]]
    );
}

#[test]
fn a_publication_a_dba_made_is_used_as_it_is() {
    let src = Src::new("dbapub");
    let s = src.session();
    s.exec("CREATE TABLE a (id int PRIMARY KEY, v text)");
    s.exec("CREATE TABLE b (id int PRIMARY KEY, v text)");
    s.exec("INSERT INTO a VALUES (1, 'a'); INSERT INTO b VALUES (1, 'b')");
    s.exec("CREATE PUBLICATION dba_pub FOR TABLE a");
    let r = src.cmd("init", &["--publication", "dba_pub"]);
    expect(&r, 0, "init on the DBA's publication");
    assert_eq!(
        s.value("SELECT string_agg(tablename, ',') FROM pg_publication_tables WHERE pubname = 'dba_pub'"),
        "a",
        "init added no table to it"
    );
    let r = src.pipeline(
        "{snapshot} --source \"$SRC\" --slot \"$SLOT\" --publication dba_pub -q | {apply} --target \"$PROJ\" -q",
    );
    expect(&r, 0, "snapshot | apply");
    assert_eq!(src.proj_rows("public.a"), vec![vec![ci(1), ct("a")]]);
    let r = src.tool(
        AUDIT,
        &[],
        &[
            "--publication",
            "dba_pub",
            "--target",
            &src.proj_url(),
            "-q",
        ],
    );
    expect(&r, 0, "audit of what the publication publishes");
}

/// A publication that leaves an action out (`publish = 'insert, update'`)
/// would drop every DELETE and TRUNCATE without a trace: init, capture and
/// verify refuse it, naming what is missing and the ALTER PUBLICATION that
/// mends it.
#[test]
fn a_publication_that_leaves_actions_out_is_refused() {
    let src = Src::new("pubacts");
    let s = src.session();
    s.exec("CREATE TABLE a (id int PRIMARY KEY, v text)");
    s.exec("CREATE PUBLICATION part_pub FOR TABLE a WITH (publish = 'insert, update')");
    let r = src.cmd("init", &["--publication", "part_pub"]);
    expect(&r, 1, "init on a publication without deletes and truncates");
    assert!(
        r.stderr.contains("delete, truncate") && r.stderr.contains("ALTER PUBLICATION"),
        "init names what is missing and the way out:\n{}",
        r.stderr
    );
    s.exec("ALTER PUBLICATION part_pub SET (publish = 'insert, update, delete, truncate')");
    expect(
        &src.cmd("init", &["--publication", "part_pub"]),
        0,
        "init once all is published",
    );
    expect(
        &src.cmd("verify", &["--publication", "part_pub"]),
        0,
        "verify",
    );
    // A DBA narrows it afterwards: verify says so, capture stops.
    s.exec("ALTER PUBLICATION part_pub SET (publish = 'insert')");
    s.exec("INSERT INTO a VALUES (1, 'x'); DELETE FROM a");
    let r = src.cmd("verify", &["--publication", "part_pub"]);
    expect(&r, 1, "verify of the narrowed publication");
    assert!(
        r.stderr.contains("update, delete, truncate"),
        "{}",
        r.stderr
    );
    let r = src.capture(&["--publication", "part_pub"]);
    expect(&r, 1, "capture from the narrowed publication");
    assert!(
        r.stderr
            .contains("does not publish update, delete, truncate"),
        "{}",
        r.stderr
    );
    assert!(r.stdout.is_empty(), "nothing written");
}

/// A multi-host URL none of whose servers suits its `target_session_attrs`
/// fails at once, naming each host and what it said: a primary asked for a
/// standby, and hosts that do not answer.
#[test]
fn multi_host_urls_name_each_host_when_none_suits() {
    let db = pg::db("multihost");
    let url = format!("{}?target_session_attrs=standby", db.url());
    let r = run(CAPTURE, &["status", "--source", &url], None);
    expect(&r, 1, "a primary asked for a standby");
    assert!(
        r.stderr.contains("no server of") && r.stderr.contains("is not standby"),
        "{}",
        r.stderr
    );
    let port = db.cluster.port;
    let url = format!(
        "postgres://{}:{}@127.0.0.1:1,127.0.0.1:{port}/{}?target_session_attrs=standby&connect_timeout=5",
        pg::ROLE,
        pg::url_encode(pg::PASSWORD),
        db.dbname
    );
    let r = run(CAPTURE, &["status", "--source", &url], None);
    expect(&r, 1, "one host down, the other a primary");
    assert!(
        r.stderr.contains("127.0.0.1:1: ")
            && r.stderr
                .contains(&format!("127.0.0.1:{port} is not standby")),
        "{}",
        r.stderr
    );
    assert!(!r.stderr.contains(pg::PASSWORD_MARK), "{}", r.stderr);
}

/// A PostgreSQL follower archiving into `dir:` (grouped by age, so the idle
/// batches of a quiet database do not make a file each), acknowledging what
/// the archive holds; the archive replayed into a projection is the source.
#[test]
fn a_following_capture_archives_into_a_folder_that_replays_to_the_source() {
    let src = Src::new("archive");
    let s = src.session();
    s.exec("CREATE TABLE a (id int8 PRIMARY KEY, v text, b bytea)");
    src.init(&["public.a"]);
    let arch = src.dir.path().join("archive");
    let url = format!("dir:{}?max-age=0.2", arch.display());
    let mut args = src.source_args();
    args.extend(["--follow".into(), "--ack-from-target".into(), url.clone()]);
    let (capture, apply) = follow_pipeline(&args, &url);
    for i in 0..50 {
        s.exec(&format!(
            "BEGIN; INSERT INTO a VALUES ({i}, 'v{i} \u{1F600}', '\\x00ff'); UPDATE a SET v = v || '!' WHERE id = {}; DELETE FROM a WHERE id = {}; COMMIT",
            i / 2,
            i - 7
        ));
    }
    // The slot follows the archive's cursor once the last write is in a file.
    let want = s.insert_lsn();
    let deadline = Instant::now() + Duration::from_secs(30);
    while src.confirmed() < want {
        assert!(
            Instant::now() < deadline,
            "the slot never reached {} (confirmed {})",
            lsn_text(want),
            lsn_text(src.confirmed())
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let (_, err) = finish(capture, true);
    assert!(!err.contains(PASSWORD_MARK));
    let (_, err) = finish(apply, true);
    assert!(!err.contains(PASSWORD_MARK), "{err}");
    src.wait_slot_inactive();
    let files = common::archive_files(&arch);
    assert!(
        !files.is_empty() && files.len() < 50,
        "{} files",
        files.len()
    );
    let merge = bin("mooncdc-merge");
    let mut cmd = Command::new("bash");
    cmd.arg("-c").arg(format!(
        "set -o pipefail; {} {}/*.jsonl | {} --target {}",
        shell_quote(&merge.display().to_string()),
        shell_quote(&arch.display().to_string()),
        shell_quote(&bin(APPLY).display().to_string()),
        shell_quote(&src.proj_url())
    ));
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    src.audit_equal();
}

// ---------------------------------------------------------------- backfill

/// `capture status --output-format json`.
fn status_json(src: &Src) -> J {
    let r = src.cmd("status", &["--output-format", "json"]);
    expect(&r, 0, "capture status");
    serde_json::from_slice(&r.stdout).expect("status JSON")
}

/// Every backfill done and the target at the server's WAL position.
#[track_caller]
fn wait_backfills_done_and_synced(src: &Src, secs: u64) {
    wait_for_every(secs, 200, "every backfill ended", || {
        status_json(src)["backfills"]
            .as_array()
            .unwrap()
            .iter()
            .all(|r| r["state"] == "done" || r["state"] == "failed")
    });
    let lsn = src.session().flush_lsn();
    src.wait_target_at(lsn, secs, "the target to reach the WAL after the backfill");
}

/// A source with `a` (500 rows, captured, snapshotted into the projection)
/// and `b` (`b_rows` rows with even keys, not captured yet).
fn backfill_source(name: &str, b_rows: u64) -> (Src, Session) {
    let src = Src::new(name);
    let s = src.session();
    s.exec(&format!(
        "CREATE TABLE a(id int PRIMARY KEY, v text);
         INSERT INTO a SELECT i, 'v' || i FROM generate_series(0, 499) i;
         CREATE TABLE b(id bigint PRIMARY KEY, n int, t text);
         INSERT INTO b SELECT i * 2, i, repeat('x', i % 40) FROM generate_series(0, {}) i;",
        b_rows - 1
    ));
    src.init(&["public.a"]);
    let snap = src.tool(SNAPSHOT, &[], &[]);
    expect(&snap, 0, "snapshot");
    src.apply_ok(&snap.stdout);
    (src, s)
}

/// `--source … --follow --after <the target's cursor>` and `extra`.
fn follow_args(src: &Src, extra: &[&str]) -> Vec<String> {
    let after = src.target_cursor().unwrap().to_json();
    let mut args = src.source_args();
    args.extend(["--follow", "--after", &after].map(String::from));
    args.extend(extra.iter().map(|a| a.to_string()));
    args
}

/// Writers on `a` and `b` until stopped: inserts, updates, deletes and
/// key moves (across the whole key range, both ways), in small transactions.
fn pg_writers(src: &Src, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<u64> {
    let s = src.session();
    std::thread::spawn(move || {
        let mut rng = Rng::new(17);
        let mut n = 0;
        while !stop.load(Ordering::Relaxed) {
            let k = rng.below(400_000) as i64;
            let m = rng.below(400_000) as i64;
            s.exec(&format!(
                "BEGIN;
                 UPDATE b SET n = n + 1 WHERE id = {k};
                 DELETE FROM b WHERE id = {m} AND {m} % 3 = 0;
                 INSERT INTO b VALUES ({k} + 1000000, 0, 'new') ON CONFLICT DO NOTHING;
                 UPDATE b SET id = {m} + 2000000 WHERE id = {k} AND NOT EXISTS (SELECT 1 FROM b WHERE id = {m} + 2000000);
                 UPDATE b SET id = {k} % 1000 + 3000000 WHERE id = {m} + 1000000 AND NOT EXISTS (SELECT 1 FROM b WHERE id = {k} % 1000 + 3000000);
                 UPDATE a SET v = v || '+' WHERE id = {k} % 500;
                 COMMIT;"
            ));
            n += 1;
            std::thread::sleep(Duration::from_millis(3));
        }
        n
    })
}

/// A table of 200,000 rows added to a following pipeline by backfill while
/// writers change it and an older table: the audit says equal, and no
/// transaction of capture's sessions lived longer than a few seconds.
#[test]
fn backfill_adds_a_table_to_a_following_pipeline_with_only_short_transactions() {
    let (src, s) = backfill_source("bf_add", 200_000);
    let args = follow_args(&src, &[]);
    let (cap, app) = follow_pipeline_logged(&args, &src.proj_url(), &src.dir.path().join("err"));
    let stop = Arc::new(AtomicBool::new(false));
    let w = pg_writers(&src, stop.clone());
    // The oldest transaction of capture's sessions, sampled.
    let oldest = Arc::new(AtomicU64::new(0));
    let sampler = {
        let (s, stop, oldest) = (src.session(), stop.clone(), oldest.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let ms: u64 = s
                    .value(
                        "SELECT coalesce(max(extract(epoch FROM clock_timestamp() - xact_start) * 1000), 0)::bigint \
                         FROM pg_stat_activity WHERE application_name LIKE 'mooncdc%' AND xact_start IS NOT NULL",
                    )
                    .parse()
                    .unwrap();
                oldest.fetch_max(ms, Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(20));
            }
        })
    };
    std::thread::sleep(Duration::from_millis(300));
    let r = src.cmd("backfill", &["--table", "public.b"]);
    expect(&r, 0, "capture backfill");
    // A column added in the middle: chunks after it carry it, and the
    // stream describes it before them.
    std::thread::sleep(Duration::from_millis(400));
    s.exec("ALTER TABLE b ADD COLUMN extra int");
    s.exec("UPDATE b SET extra = id % 5 WHERE id % 1000 = 0");
    let t0 = Instant::now();
    while status_json(&src)["backfills"][0]["state"] != "done" {
        assert!(
            t0.elapsed() < Duration::from_secs(120),
            "the backfill of b did not end in 120 s: {}\n{}",
            status_json(&src)["backfills"],
            std::fs::read_to_string(src.dir.path().join("err")).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    stop.store(true, Ordering::Relaxed);
    assert!(w.join().unwrap() > 0);
    sampler.join().unwrap();
    wait_backfills_done_and_synced(&src, 60);
    finish(cap, true);
    finish(app, true);
    src.audit_equal();
    let st = status_json(&src);
    assert_eq!(st["backfills"][0]["table"], "public.b");
    assert!(st["backfills"][0]["rows"].as_u64().unwrap() >= 190_000);
    let ms = oldest.load(Ordering::Relaxed);
    assert!(
        ms < 5_000,
        "a capture transaction lived {ms} ms during the backfill"
    );
    // The table joined the publication with FULL identity, in the request's
    // transaction.
    assert_eq!(
        s.value("SELECT relreplident FROM pg_class WHERE oid = 'b'::regclass"),
        "f"
    );
}

/// SIGKILL of the pipeline at several moments of a backfill, each time
/// restarted from the target's cursor: audit equal, and no chunk logged
/// twice. Then `--resync` of the table with damaged target rows.
#[test]
fn a_killed_backfill_resumes_from_the_targets_cursor_and_resync_repairs() {
    let (src, s) = backfill_source("bf_kill", 100_000);
    let r = src.cmd("backfill", &["--table", "public.b"]);
    expect(&r, 0, "capture backfill");
    let stop = Arc::new(AtomicBool::new(false));
    let w = pg_writers(&src, stop.clone());
    let mut logged = Vec::new();
    // Kills until the backfill is done (at most 12).
    for i in 0..12u64 {
        // Every other follower acknowledges what the target holds: the
        // slot then moves, but never past a window a restart reads again.
        let proj = src.proj_url();
        let mut extra = vec!["--backfill-chunk-rows", "200"];
        if i % 2 == 1 {
            extra.extend(["--ack-from-target", &proj]);
        }
        let args = follow_args(&src, &extra);
        let (cap, app) = follow_pipeline(&args, &proj);
        std::thread::sleep(Duration::from_millis(300 + 70 * (i % 4)));
        finish(cap, true);
        finish(app, true);
        src.wait_slot_inactive();
        let st = status_json(&src);
        logged.push(st["backfills"][0]["rows"].as_u64().unwrap());
        if st["backfills"][0]["state"] == "done" {
            break;
        }
    }
    stop.store(true, Ordering::Relaxed);
    w.join().unwrap();
    let args = follow_args(&src, &[]);
    let (cap, app) = follow_pipeline(&args, &src.proj_url());
    wait_backfills_done_and_synced(&src, 120);
    src.audit_equal();
    let rows = status_json(&src)["backfills"][0]["rows"].as_u64().unwrap();
    let added: u64 = s
        .value("SELECT count(*) FROM b WHERE id >= 1000000")
        .parse()
        .unwrap();
    eprintln!("rows logged at each kill: {logged:?}, at the end {rows}");
    assert!(
        rows <= 100_000 + added,
        "rows logged {rows}, more than 100,000 + {added} moved or inserted: a chunk was logged twice"
    );
    assert!(
        logged.iter().filter(|&&n| n > 0 && n < rows).count() >= 3,
        "too few kills inside the backfill: {logged:?} of {rows}"
    );
    // The target's copy damaged; resync repairs it while following.
    let p = open(&src.proj());
    p.execute_batch(
        "UPDATE \"public.b\" SET n = -1 WHERE id % 10 = 0; DELETE FROM \"public.b\" WHERE id % 7 = 0;",
    )
    .unwrap();
    drop(p);
    let again = src.cmd("backfill", &["--table", "public.b"]);
    expect(&again, 1, "a second backfill without --resync");
    assert!(again.stderr.contains("pass --resync"), "{}", again.stderr);
    let r = src.cmd("backfill", &["--table", "public.b", "--resync"]);
    expect(&r, 0, "capture backfill --resync");
    s.exec("UPDATE a SET v = 'during' WHERE id < 10; DELETE FROM b WHERE id < 100;");
    wait_backfills_done_and_synced(&src, 60);
    finish(cap, true);
    finish(app, true);
    src.audit_equal();
    // What cannot be backfilled is refused before anything is recorded.
    s.exec("CREATE TABLE ts(k timestamp PRIMARY KEY, v int)");
    let r = src.cmd("backfill", &["--table", "public.ts"]);
    expect(&r, 2, "backfill of a timestamp key");
    assert!(r.stderr.contains("of type timestamp"), "{}", r.stderr);
    assert_eq!(status_json(&src)["backfills"].as_array().unwrap().len(), 2);
}

/// A column renamed in the middle of a backfill: the next chunk cannot
/// carry the table as the stream describes it, so the backfill ends as
/// failed, naming why, and the stream keeps the table where its chunks
/// reached (strict: nothing beyond it); a resync brings it whole.
#[test]
fn a_rename_during_a_backfill_fails_it_clearly_and_a_resync_repairs() {
    let src = Src::new("bf_rename");
    let s = src.session();
    s.exec(
        "CREATE TABLE a(id int PRIMARY KEY, v text);
         INSERT INTO a VALUES (1, 'one');
         CREATE TABLE b(id bigint PRIMARY KEY, n int, t text);
         INSERT INTO b SELECT i, i, 'r' || i FROM generate_series(1, 100000) i;",
    );
    src.init(&["public.a"]);
    let snap = src.tool(SNAPSHOT, &[], &[]);
    src.apply_ok(&snap.stdout);
    let args = follow_args(&src, &["--backfill-chunk-rows", "200"]);
    let log = src.dir.path().join("err");
    let (cap, app) = follow_pipeline_logged(&args, &src.proj_url(), &log);
    let r = src.cmd("backfill", &["--table", "public.b"]);
    expect(&r, 0, "capture backfill");
    wait_for_every(60, 50, "the backfill to start", || {
        status_json(&src)["backfills"][0]["rows"].as_u64().unwrap() > 0
    });
    s.exec("ALTER TABLE b RENAME COLUMN t TO title");
    let t0 = Instant::now();
    while status_json(&src)["backfills"][0]["state"] != "failed" {
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "the backfill did not fail: {}\n{}",
            status_json(&src)["backfills"],
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let lsn = s.flush_lsn();
    src.wait_target_at(lsn, 60, "the target to take the failed backfill");
    let err = std::fs::read_to_string(&log).unwrap();
    assert!(
        err.contains("ended before the table was read whole") && err.contains("--resync"),
        "{err}"
    );
    // The target holds b up to where the chunks reached, no more.
    let held = src.proj_count("public.b");
    assert!(held > 0 && held < 100_000, "held {held}");
    // A snapshot now is refused; a resync repairs (the follower that
    // described the table before the rename says it as a drop and an add,
    // before the resync's truncate).
    let snap = src.tool(SNAPSHOT, &[], &[]);
    expect(&snap, 1, "a snapshot while a backfill failed");
    assert!(
        snap.stderr.contains("which failed: resync it first"),
        "{}",
        snap.stderr
    );
    let r = src.cmd("backfill", &["--table", "public.b", "--resync"]);
    expect(&r, 0, "capture backfill --resync");
    let t0 = Instant::now();
    while status_json(&src)["backfills"][1]["state"] != "done" {
        assert!(
            t0.elapsed() < Duration::from_secs(120),
            "the resync did not end: {}\n{}",
            status_json(&src)["backfills"],
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    wait_backfills_done_and_synced(&src, 120);
    finish(cap, true);
    finish(app, true);
    assert_eq!(status_json(&src)["backfills"][1]["state"], "done");
    src.audit_equal();
}

// ---------------------------------------------------------------- large transactions

/// A database whose walsenders stream any transaction past 64 kB of decoded
/// changes, with `big` and `side` captured on the test's slot.
fn streaming_source(name: &str) -> Src {
    let src = Src::new(name);
    pg::streaming_tables(&src.db);
    src.init(&["public.big", "public.side"]);
    src
}

/// A streamed transaction whose spool fills `--spool-dir`: the read stops
/// with one error naming the folder and both ways out (a folder with room,
/// or `--pgoutput-protocol 1`, where the server holds the transaction until
/// its commit), writes nothing of it, and the same read with room works.
#[test]
fn a_streamed_transaction_that_fills_the_spool_folder_is_said_once_with_both_ways_out() {
    let src = streaming_source("streamed_full");
    src.session().exec("INSERT INTO side VALUES (0, 'start')");
    let snap = src.tool(SNAPSHOT, &[], &[]);
    expect(&snap, 0, "snapshot");
    src.apply_ok(&snap.stdout);
    let cursor = run(APPLY, &["cursor", "--target", &src.proj_url()], None);
    let cursor = cursor.stdout_str().trim().to_string();
    // About 4 MB of changes in one transaction: streamed past 64 kB.
    src.session().exec(
        "INSERT INTO big SELECT g, repeat(md5(g::text), 4), g FROM generate_series(1, 30000) g",
    );
    let small = common::SmallFolder::new();
    let small_dir = small.path().to_str().unwrap().to_string();
    let r = src.capture(&[
        "--after",
        &cursor,
        "--spool-memory",
        "100000",
        "--spool-dir",
        &small_dir,
    ]);
    expect(&r, 1, "a read whose spool fills its folder");
    assert_eq!(
        r.stderr.matches("No space left on device").count(),
        1,
        "said once:\n{}",
        r.stderr
    );
    for needle in [small_dir.as_str(), "--pgoutput-protocol 1", "--spool-dir"] {
        assert!(r.stderr.contains(needle), "{needle:?} in:\n{}", r.stderr);
    }
    assert!(
        !r.stdout_str().contains("public.big"),
        "nothing of the transaction written"
    );
    // A follower stops the same way, once (it does not retry what a
    // folder without room cannot hold).
    let mut args = follow_args(
        &src,
        &["--spool-memory", "100000", "--spool-dir", &small_dir],
    );
    args.extend(["-q".to_string()]);
    let mut f = Command::new(bin(CAPTURE))
        .args(&args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the follower");
    let deadline = Instant::now() + Duration::from_secs(30);
    while f.try_wait().expect("wait").is_none() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    let running = f.try_wait().expect("wait").is_none();
    let (code, err) = finish(f, running);
    assert!(!running, "the follower should stop:\n{err}");
    assert_eq!(code, Some(1), "{err}");
    assert_eq!(
        err.matches("No space left on device").count(),
        1,
        "said once:\n{err}"
    );
    assert!(err.contains("--pgoutput-protocol 1"), "{err}");
    let (_, b) = src.capture_ok(&["--after", &cursor, "--spool-memory", "100000"]);
    assert_eq!(b.iter().map(|b| b.events.len()).sum::<usize>(), 30_000);
}

/// The slot's decoding figures: (spill_bytes, stream_txns, stream_bytes),
/// once the walsender has reported them (`want` says when they are in).
fn slot_stats(src: &Src, slot: &str, want: impl Fn((i64, i64, i64)) -> bool) -> (i64, i64, i64) {
    let s = src.session();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let r = s.query(&format!(
            "SELECT spill_bytes, stream_txns, stream_bytes FROM pg_stat_replication_slots WHERE slot_name = {}",
            lit(slot)
        ));
        let get = |i: usize| -> i64 {
            r.first()
                .and_then(|row| row[i].as_deref())
                .unwrap_or("0")
                .parse()
                .unwrap()
        };
        let v = (get(0), get(1), get(2));
        if want(v) || Instant::now() > deadline {
            return v;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Two large transactions interleaved (one rolled back, one with a
/// subtransaction rolled back), a small one committed while both are open,
/// then a 500,000-change transaction: streamed by the server, held by
/// capture in spool files past a 1 MB memory budget, written whole at each
/// commit in commit order; the same events as protocol 1 reads, which the
/// server spills instead of streaming.
#[test]
fn large_transactions_are_streamed_held_in_spool_files_and_written_whole() {
    let src = streaming_source("streamed");
    // A second slot, read later with protocol 1.
    let r = run(
        CAPTURE,
        &[
            "init",
            "--source",
            &src.url(),
            "--slot",
            "s_streamed_v1",
            "--table",
            "public.big",
            "--table",
            "public.side",
        ],
        None,
    );
    expect(&r, 0, "init of a second slot");
    src.session().exec("INSERT INTO side VALUES (0, 'start')");
    let snap = src.tool(SNAPSHOT, &[], &[]);
    expect(&snap, 0, "snapshot");
    src.apply_ok(&snap.stdout);
    let proj = src.proj_url();
    let log = src.dir.path().join("follow.log");
    let spool = tempfile::tempdir().unwrap();
    let mut args = follow_args(&src, &["--ack-from-target", &proj]);
    args.extend(
        [
            "--spool-memory",
            "1000000",
            "--spool-dir",
            spool.path().to_str().unwrap(),
        ]
        .map(String::from),
    );
    let (cap, app) = follow_pipeline_logged(&args, &proj, &log);

    let last = pg::large_transactions(&src.db, 20_000, 250_000);
    src.wait_target_at(last, 300, "the pipeline never caught up");
    let rss = std::fs::read_to_string(format!("/proc/{}/status", cap.id()))
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .map(|v| v.trim().trim_end_matches(" kB").parse::<u64>().unwrap() * 1024)
        .unwrap();
    let (_, cerr) = finish(cap, true);
    finish(app, true);
    let logged = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(
        !cerr.contains("panicked") && !logged.contains("panicked"),
        "{cerr}\n{logged}"
    );
    src.audit_equal();
    assert_eq!(src.proj_count("public.big"), 350_000);
    let p = open(&src.proj());
    let count = |sql: &str| -> i64 { p.query_row(sql, [], |r| r.get(0)).unwrap() };
    assert_eq!(
        count("SELECT count(*) FROM \"public.big\" WHERE id >= 2000000"),
        0
    );
    assert_eq!(
        count("SELECT count(*) FROM \"public.big\" WHERE v = 'rolled back'"),
        0
    );
    assert_eq!(count("SELECT count(*) FROM \"public.side\""), 2);
    // The spool files are unnamed: nothing is left in the folder.
    assert_eq!(std::fs::read_dir(spool.path()).unwrap().count(), 0);

    // The server streamed (and spilled nothing) for this slot.
    let (spill, txns, streamed) = slot_stats(&src, src.slot_name(), |(_, t, _)| t >= 2);
    assert!(
        txns >= 2 && streamed > 0 && spill == 0,
        "streamed slot: spill_bytes {spill}, stream_txns {txns}, stream_bytes {streamed}"
    );
    // Memory stays within the budget, not the transaction: the transaction
    // held more than twice what the capture process ever had resident.
    assert!(
        rss < 96 << 20 && (streamed as u64) > 2 * rss,
        "capture's peak RSS {rss} bytes against {streamed} bytes streamed"
    );

    // Protocol 1 on the other slot: the server spills the same transactions
    // and sends them at their commit; the events are the same.
    let v1_args = ["--slot", "s_streamed_v1", "--pgoutput-protocol", "1"];
    let r = run(
        CAPTURE,
        &[&["--source", &src.url()][..], &v1_args[..]].concat(),
        None,
    );
    expect(&r, 0, "capture read with protocol 1");
    let (spill1, txns1, streamed1) = slot_stats(&src, "s_streamed_v1", |(sp, _, _)| sp > 0);
    assert!(
        spill1 > 0 && txns1 == 0 && streamed1 == 0,
        "protocol 1 slot: spill_bytes {spill1}, stream_txns {txns1}, stream_bytes {streamed1}"
    );
    let streamed_read = run(
        CAPTURE,
        &["--source", &src.url(), "--slot", "s_streamed_v1"],
        None,
    );
    expect(&streamed_read, 0, "capture read with streaming");
    let v1 = checked_events(&batches(&r.stdout));
    let v2 = checked_events(&batches(&streamed_read.stdout));
    let thirds: usize = src
        .session()
        .value("SELECT count(*) FROM big WHERE id BETWEEN 1000000 AND 1099999 AND id % 3 = 0")
        .parse()
        .unwrap();
    // The two rows of side, a's inserts and updates, the large one.
    assert_eq!(v1.len(), 2 + 100_000 + thirds + 500_000);
    assert!(v1 == v2, "protocol 1 and streaming read different events");
}

/// Wait until the follower serving metrics at `addr` holds a streamed
/// transaction in progress (some of its blocks came, its commit not yet).
#[track_caller]
fn wait_holding_a_streamed_transaction(addr: &str, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let held = std::net::TcpStream::connect(addr)
            .ok()
            .map(|_| metric_value(&http_get(addr, "/metrics"), "mooncdc_streamed_spool_bytes"))
            .unwrap_or(0.0);
        if held > 0.0 {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{what}: never held a streamed transaction"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// A follower killed (SIGKILL) while it holds part of a streamed
/// transaction, then one whose server restarts (immediate) mid-stream: the
/// transaction comes again whole, nothing of it twice. The stream written
/// across the restart equals a plain read of the same range.
#[test]
fn a_follower_killed_or_a_server_restarted_mid_stream_loses_and_repeats_nothing() {
    let cluster: &'static pg::Cluster = Box::leak(Box::new(pg::Cluster::start()));
    let src = Src {
        db: cluster.create_db("streamkill"),
        slot: Some("s_streamkill".into()),
        dir: tempfile::tempdir().unwrap(),
    };
    pg::streaming_tables(&src.db);
    src.init(&["public.big", "public.side"]);
    let s = src.session();
    let snap = src.tool(SNAPSHOT, &[], &[]);
    expect(&snap, 0, "snapshot");
    src.apply_ok(&snap.stdout);
    // Large transactions committed while nothing reads.
    s.exec(
        "BEGIN;
         INSERT INTO big SELECT g, md5(g::text), g FROM generate_series(1, 200000) g;
         UPDATE big SET n = n + 1;
         COMMIT",
    );
    s.exec("INSERT INTO side VALUES (1, 'small')");
    s.exec(
        "BEGIN;
         INSERT INTO big SELECT g, md5(g::text), g FROM generate_series(500001, 650000) g;
         DELETE FROM big WHERE id % 5 = 0;
         COMMIT",
    );
    let last = s.insert_lsn();
    drop(s);
    let proj = src.proj_url();
    let addr = |port: u16| format!("127.0.0.1:{port}");
    let _ = rustls::crypto::ring::default_provider().install_default();

    // 1. SIGKILL while holding a streamed transaction.
    let port = common::ch::free_port();
    let args = follow_args(
        &src,
        &["--ack-from-target", &proj, "--metrics-listen", &addr(port)],
    );
    let (cap, app) = follow_pipeline(&args, &proj);
    wait_holding_a_streamed_transaction(&addr(port), "the first follower");
    let (_, cerr) = finish(cap, true);
    let (_, aerr) = finish(app, false);
    assert!(
        !cerr.contains("panicked") && !aerr.contains("panicked"),
        "{cerr}\n{aerr}"
    );
    src.wait_slot_inactive();
    let cut = src.target_cursor().unwrap();

    // 2. The server restarts while the next follower holds one.
    let port = common::ch::free_port();
    let stream_file = src.dir.path().join("stream.jsonl");
    let mut args = follow_args(&src, &["--metrics-listen", &addr(port)]);
    args.extend(["--retry-delay-ms", "200", "--max-retries", "30"].map(String::from));
    let mut capture = Command::new(bin(CAPTURE))
        .args(&args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start capture --follow");
    let mut tee = Command::new("tee")
        .arg(&stream_file)
        .stdin(Stdio::from(capture.stdout.take().unwrap()))
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start tee");
    let apply = Command::new(bin(APPLY))
        .args(["--target", &proj, "-q"])
        .stdin(Stdio::from(tee.stdout.take().unwrap()))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start apply");
    wait_holding_a_streamed_transaction(&addr(port), "the second follower");
    cluster.restart("immediate");
    src.wait_target_at(last, 180, "the pipeline never caught up after the restart");
    let (_, cerr) = finish(capture, true);
    let _ = tee.wait();
    let (_, aerr) = finish(apply, true);
    assert!(
        cerr.contains("reconnected") && !cerr.contains("panicked") && !aerr.contains("panicked"),
        "capture should say it reconnected:\n{cerr}\n{aerr}"
    );
    src.audit_equal();

    // What was written across the restart is exactly a plain read of the
    // same range: each change once, none lost.
    let written = std::fs::read(&stream_file).unwrap();
    let text = String::from_utf8_lossy(&written);
    let upto = text.rfind("{\"kind\":\"commit\"").unwrap();
    let upto = upto + text[upto..].find('\n').unwrap() + 1;
    let followed = checked_events(&batches(text[..upto].as_bytes()));
    let (_, plain) = src.capture_ok(&["--after", &cut.to_json()]);
    let plain = checked_events(&plain);
    assert!(
        !plain.is_empty(),
        "the first follower applied everything before its kill"
    );
    assert_eq!(followed.len(), plain.len());
    assert!(
        followed == plain,
        "the followed stream differs from a plain read"
    );
}

/// The messages of a stream as (prefix, content, transactional, sequence).
fn messages_of(b: &[Batch]) -> Vec<(String, Value, bool, u128)> {
    b.iter()
        .flat_map(|b| b.messages.iter())
        .map(|(_, m)| {
            (
                m.prefix.clone(),
                m.content.clone(),
                m.transactional,
                m.sequence,
            )
        })
        .collect()
}

fn event_sequences(b: &[Batch]) -> Vec<u128> {
    b.iter()
        .flat_map(|b| b.events.iter().map(|e| e.sequence))
        .collect()
}

/// `pg_logical_emit_message`: transactional messages of committed
/// transactions appear in place with their transaction's next ordinal
/// (rolled back ones never), a non-transactional one is a batch of its own
/// (even when its transaction rolled back), binary content is exact, only
/// the prefixes asked for are written, and no event's sequence depends on
/// --messages. The stream then goes through split, merge, compact and
/// apply, which counts the messages it skipped.
#[test]
fn logical_messages_are_written_as_message_records() {
    let src = Src::new("messages");
    let s = src.session();
    s.exec("CREATE TABLE m (id int PRIMARY KEY, v text)");
    src.init(&["public.m"]);
    s.exec(
        "BEGIN; INSERT INTO m VALUES (1, 'a'); \
         SELECT pg_logical_emit_message(true, 'outbox', '{\"order\":42}'); \
         INSERT INTO m VALUES (2, 'b'); \
         SELECT pg_logical_emit_message(true, 'other', 'x'); \
         INSERT INTO m VALUES (3, 'c'); COMMIT",
    );
    s.exec(
        "BEGIN; INSERT INTO m VALUES (9, 'z'); \
         SELECT pg_logical_emit_message(true, 'outbox', 'rolled back'); \
         SELECT pg_logical_emit_message(false, 'outbox', 'survives'); ROLLBACK",
    );
    s.exec(
        "BEGIN; SELECT pg_logical_emit_message(true, 'outbox', '\\x00ff80'::bytea); \
         UPDATE m SET v = 'B' WHERE id = 2; COMMIT",
    );
    s.exec("SELECT pg_logical_emit_message(true, 'mooncdc_heartbeat', '')");

    let (all_raw, all) = src.capture_ok(&["--messages", "outbox", "--messages", "other"]);
    let (_, outbox) = src.capture_ok(&["--messages", "outbox"]);
    let (_, none) = src.capture_ok(&[]);

    // No event's sequence depends on --messages.
    let seqs = event_sequences(&none);
    assert_eq!(seqs.len(), 4);
    assert_eq!(event_sequences(&all), seqs);
    assert_eq!(event_sequences(&outbox), seqs);
    assert!(messages_of(&none).is_empty());
    // The first transaction: its events at ordinals 1, 3 and 5, the
    // messages between them at 2 and 4.
    let ord = |s: u128| s & u64::MAX as u128;
    assert_eq!(
        seqs[..3].iter().map(|&s| ord(s)).collect::<Vec<_>>(),
        [1, 3, 5]
    );
    assert_eq!(
        ord(seqs[3]),
        2,
        "the update after its transaction's message"
    );

    let got = messages_of(&all);
    let shown: Vec<(&str, &Value, bool)> =
        got.iter().map(|(p, c, t, _)| (p.as_str(), c, *t)).collect();
    assert_eq!(
        shown,
        vec![
            ("outbox", &Value::Text("{\"order\":42}".into()), true),
            ("other", &Value::Text("x".into()), true),
            ("outbox", &Value::Text("survives".into()), false),
            ("outbox", &Value::Blob(vec![0, 0xff, 0x80]), true),
        ],
        "rolled back transactional messages never appear; the capture's own never do"
    );
    assert_eq!(got[0].3, seqs[0] + 1);
    assert_eq!(got[1].3, seqs[1] + 1);
    assert_eq!(got[3].3, seqs[3] - 1);
    // The non-transactional one: a batch of its own, (…, L+1/0] with the
    // message at L/1.
    let lone = all
        .iter()
        .find(|b| b.messages.iter().any(|(_, m)| !m.transactional))
        .expect("a batch with the non-transactional message");
    assert!(lone.events.is_empty());
    assert_eq!(lone.messages.len(), 1);
    let at = lone.messages[0].1.sequence;
    assert_eq!(ord(at), 1);
    assert_eq!(lone.end.sequence(), ((at >> 64) + 1) << 64);
    // Only the prefixes asked for.
    let only: Vec<String> = messages_of(&outbox).into_iter().map(|m| m.0).collect();
    assert_eq!(only, vec!["outbox"; 3]);

    // Through split, merge and compact, then applied: the messages skipped
    // and counted, the projection equal to the source.
    let split = run(SPLIT, &["--max-events", "1"], Some(&all_raw));
    expect(&split, 0, "split");
    assert_eq!(messages_of(&batches(&split.stdout)), got);
    let merged = run("mooncdc-merge", &[], Some(&split.stdout));
    expect(&merged, 0, "merge");
    assert_eq!(messages_of(&batches(&merged.stdout)), got);
    let compacted = run(COMPACT, &[], Some(&merged.stdout));
    expect(&compacted, 0, "compact");
    assert_eq!(messages_of(&batches(&compacted.stdout)), got);
    let t = src.proj_url();
    let r = run(APPLY, &["--target", &t], Some(&compacted.stdout));
    expect(&r, 0, "apply");
    assert!(r.stderr.contains("4 messages skipped"), "{}", r.stderr);
    src.audit_equal();

    // Usage errors: a reserved prefix, a SQLite source.
    let r = src.capture(&["--messages", "mooncdc_ddl"]);
    expect(&r, 2, "a reserved prefix");
    assert!(r.stderr.contains("reserved"), "{}", r.stderr);
    let r = run(
        CAPTURE,
        &["--source", "sqlite:/nonexistent.db", "--messages", "outbox"],
        None,
    );
    expect(&r, 2, "--messages with SQLite");
    assert!(
        r.stderr.contains("SQLite has no logical messages"),
        "{}",
        r.stderr
    );
}

/// Messages inside a large transaction the server streams (protocol 2 or
/// 4, replayed from capture's spool at its commit) read as protocol 1
/// reads them: the same events and messages at the same sequences, a
/// message of a rolled back subtransaction (after a row change of it) in
/// neither. (One before the subtransaction's first row change is a known
/// limit of streaming: docs/POSTGRES.md, "Logical messages".)
#[test]
fn messages_of_streamed_transactions_read_as_protocol_1_reads_them() {
    let src = streaming_source("streamed_messages");
    let s = src.session();
    s.exec(
        "BEGIN;
         INSERT INTO big SELECT g, md5(g::text), g FROM generate_series(1, 3000) g;
         SELECT pg_logical_emit_message(true, 'outbox', 'first half');
         INSERT INTO big SELECT g, md5(g::text), g FROM generate_series(3001, 6000) g;
         SAVEPOINT sp;
         INSERT INTO big SELECT g, md5(g::text), g FROM generate_series(6001, 9000) g;
         SELECT pg_logical_emit_message(true, 'outbox', 'rolled back');
         ROLLBACK TO sp;
         SELECT pg_logical_emit_message(true, 'outbox', '\\xfe'::bytea);
         UPDATE big SET n = -n WHERE id <= 10;
         COMMIT",
    );
    let (_, streamed) = src.capture_ok(&["--messages", "outbox"]);
    let (_, v1) = src.capture_ok(&["--messages", "outbox", "--pgoutput-protocol", "1"]);
    let (_, plain) = src.capture_ok(&[]);
    let m = messages_of(&streamed);
    assert_eq!(
        m.iter().map(|x| x.1.clone()).collect::<Vec<_>>(),
        vec![Value::Text("first half".into()), Value::Blob(vec![0xfe])]
    );
    assert_eq!(
        m,
        messages_of(&v1),
        "the same messages at the same sequences"
    );
    let seqs = event_sequences(&streamed);
    assert_eq!(seqs.len(), 6010);
    assert_eq!(seqs, event_sequences(&v1));
    assert_eq!(
        seqs,
        event_sequences(&plain),
        "events independent of --messages"
    );
    // The first message right after the 3,000th insert.
    assert_eq!(m[0].3, seqs[2999] + 1);
    assert_eq!(m[1].3, seqs[6000] - 1);
    let stats = slot_stats(&src, "s_streamed_messages", |v| v.1 > 0);
    assert!(
        stats.1 > 0,
        "the server streamed the transaction: {stats:?}"
    );
}

/// A follower with --messages: each transaction its batch with its
/// messages in place, each non-transactional message a batch of its own
/// (also one whose transaction rolled back); the stream is valid, and
/// applied it moves the cursor past every message.
#[test]
fn a_follower_writes_messages_in_their_batches() {
    let src = Src::new("follow_messages");
    let s = src.session();
    s.exec("CREATE TABLE f (id int PRIMARY KEY, v text)");
    src.init(&["public.f"]);
    let out_path = src.dir.path().join("follow.jsonl");
    let mut args = src.source_args();
    args.extend(["--follow", "--messages", "outbox", "-q"].map(String::from));
    let capture = Command::new(bin(CAPTURE))
        .args(&args)
        .stdin(Stdio::null())
        .stdout(Stdio::from(std::fs::File::create(&out_path).unwrap()))
        .stderr(Stdio::piped())
        .spawn()
        .expect("start capture --follow");
    s.exec(
        "BEGIN; INSERT INTO f VALUES (1, 'a'); \
         SELECT pg_logical_emit_message(true, 'outbox', 'with 1'); COMMIT",
    );
    s.exec("SELECT pg_logical_emit_message(false, 'outbox', 'alone')");
    s.exec(
        "BEGIN; INSERT INTO f VALUES (2, 'gone'); \
         SELECT pg_logical_emit_message(false, 'outbox', 'outlives its transaction'); ROLLBACK",
    );
    s.exec("SELECT pg_logical_emit_message(true, 'other', 'not asked for')");
    s.exec("INSERT INTO f VALUES (3, 'c')");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let text = std::fs::read_to_string(&out_path).unwrap();
        if text.contains("[\"integer\",\"3\"]") && text.ends_with("}\n") {
            let last = text.lines().last().unwrap();
            if last.starts_with("{\"kind\":\"commit\"") {
                break;
            }
        }
        assert!(Instant::now() < deadline, "the follower never wrote id 3");
        std::thread::sleep(Duration::from_millis(50));
    }
    let (code, stderr) = sigterm_and_wait(capture);
    assert_eq!(code, Some(0), "{stderr}");
    let bytes = std::fs::read(&out_path).unwrap();
    let stream = batches(&bytes);
    let got: Vec<(String, bool)> = messages_of(&stream)
        .into_iter()
        .map(|(_, c, t, _)| match c {
            Value::Text(s) => (s, t),
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(
        got,
        vec![
            ("with 1".to_string(), true),
            ("alone".to_string(), false),
            ("outlives its transaction".to_string(), false),
        ]
    );
    for b in stream
        .iter()
        .filter(|b| b.messages.iter().any(|(_, m)| !m.transactional))
    {
        assert!(b.events.is_empty() && b.messages.len() == 1, "{b:?}");
        let at = b.messages[0].1.sequence;
        assert_eq!(b.end.sequence(), ((at >> 64) + 1) << 64);
    }
    let t = src.proj_url();
    let r = run(APPLY, &["--target", &t], Some(&bytes));
    expect(&r, 0, "apply");
    assert!(r.stderr.contains("3 messages skipped"), "{}", r.stderr);
    assert_eq!(
        src.target_cursor().unwrap().sequence(),
        stream.last().unwrap().end.sequence()
    );
    src.audit_equal();
}
