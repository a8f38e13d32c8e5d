//! The PostgreSQL read path where transactions, streamed transactions and
//! logical messages meet, through the real binaries against a throwaway
//! cluster (tests/common/pg.rs): a non-transactional message never shares
//! a sequence with a transaction nor ends a batch past one it did not
//! write; a read that does not follow writes every message below its end;
//! a rolled-back savepoint leaves a streamed transaction's tables in the
//! shape they had; a message over the line cap is refused at capture, and a
//! large one costs capture at most twice its size; each host of a
//! multi-host URL has its own connect timeout; a standby that cannot follow
//! its new primary stops the follower; a backfill request decoded before it
//! is visible is carried out (docs/POSTGRES.md, "Logical messages", "Large
//! transactions", "Multi-host URLs", "Capture from a standby";
//! docs/BACKFILL.md §4).

mod common;

use common::pg::{self, lit, PgDb, Session};
use common::sqlite::{exec, expect, APPLY, AUDIT, CAPTURE};
use common::{batches, Run};
use mooncdc::wire::{Batch, Cursor, Value};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// One test's source database and slot, and a SQLite projection.
struct Pipe {
    db: PgDb,
    slot: String,
    dir: tempfile::TempDir,
}

impl Pipe {
    fn new(name: &str) -> Pipe {
        Pipe {
            db: pg::db(name),
            slot: format!("s_{name}"),
            dir: tempfile::tempdir().expect("temporary folder"),
        }
    }

    fn session(&self) -> Session {
        self.db.session()
    }

    fn init(&self, tables: &[&str]) {
        pg::init_capture(&self.db.url(), &self.slot, tables);
    }

    fn target(&self) -> String {
        format!("sqlite:{}", self.dir.path().join("proj.db").display())
    }

    fn capture(&self, extra: &[&str]) -> Run {
        let url = self.db.url();
        let mut args = vec!["--source", &url, "--slot", &self.slot];
        args.extend_from_slice(extra);
        exec(CAPTURE, &args, None)
    }

    #[track_caller]
    fn capture_ok(&self, extra: &[&str]) -> (Vec<u8>, Vec<Batch>) {
        let r = self.capture(extra);
        expect(&r, 0, "capture");
        let b = batches(&r.stdout);
        (r.stdout, b)
    }

    #[track_caller]
    fn apply_ok(&self, input: &[u8]) {
        let t = self.target();
        expect(
            &exec(APPLY, &["--target", &t, "-q"], Some(input)),
            0,
            "apply",
        );
    }

    fn cursor(&self) -> Cursor {
        let t = self.target();
        let r = exec(APPLY, &["cursor", "--target", &t], None);
        expect(&r, 0, "apply cursor");
        Cursor::parse_json(r.stdout_str().trim()).expect("cursor JSON")
    }

    #[track_caller]
    fn audit_equal(&self) {
        let (url, t) = (self.db.url(), self.target());
        let r = exec(
            AUDIT,
            &["--source", &url, "--slot", &self.slot, "--target", &t],
            None,
        );
        expect(&r, 0, "audit");
        assert!(
            r.stdout_str().trim_end().ends_with("equal"),
            "{}",
            r.stdout_str()
        );
    }

    /// Wait until the server has flushed all the WAL it has written, so
    /// the last record is below the flush position a read starts with.
    fn wait_flushed(&self) {
        let s = self.session();
        let deadline = Instant::now() + Duration::from_secs(10);
        while s.flush_lsn() < s.insert_lsn() {
            assert!(Instant::now() < deadline, "the WAL was not flushed");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// The messages of a stream: (content, transactional, sequence, the end of
/// its batch).
fn messages(b: &[Batch]) -> Vec<(Value, bool, u128, u128)> {
    b.iter()
        .flat_map(|b| {
            b.messages.iter().map(|(_, m)| {
                (
                    m.content.clone(),
                    m.transactional,
                    m.sequence,
                    b.end.sequence(),
                )
            })
        })
        .collect()
}

fn text(s: &str) -> Value {
    Value::Text(s.into())
}

/// The stream's lines up to and including the commit line of the batch
/// that holds message `content`.
fn through_batch_of(stream: &[u8], content: &str) -> Vec<u8> {
    let text = String::from_utf8_lossy(stream);
    let needle = serde_json::to_string(content).unwrap();
    let mut out = String::new();
    let mut seen = false;
    for line in text.split_inclusive('\n') {
        out.push_str(line);
        seen |= line.starts_with("{\"kind\":\"message\"") && line.contains(&needle);
        if seen && line.starts_with("{\"kind\":\"commit\"") {
            return out.into_bytes();
        }
    }
    panic!("no batch holds message {content:?}:\n{text}");
}

/// `BEGIN; INSERT; pg_logical_emit_message(false, …); COMMIT`: the
/// message's record ends where the COMMIT's starts. It is placed just
/// before the transaction, its batch ending where the transaction's
/// changes begin, so the stream applies and a capture resumed from the
/// target's cursor after that batch still has the transaction.
#[test]
fn a_non_transactional_message_just_before_commit_keeps_its_transaction() {
    let p = Pipe::new("msg_before_commit");
    let s = p.session();
    s.exec("CREATE TABLE t (id int PRIMARY KEY, v text)");
    p.init(&["public.t"]);
    s.exec("INSERT INTO t VALUES (1, 'before')");
    s.exec(
        "BEGIN; INSERT INTO t VALUES (2, 'with the message'); \
         SELECT pg_logical_emit_message(false, 'outbox', 'just before commit'); COMMIT",
    );
    s.exec("INSERT INTO t VALUES (3, 'after')");
    let (raw, stream) = p.capture_ok(&["--messages", "outbox"]);
    let m = messages(&stream);
    assert_eq!(m.len(), 1, "{m:?}");
    let (_, _, at, end) = m[0].clone();
    let events: Vec<(i64, u128)> = stream
        .iter()
        .flat_map(|b| b.events.iter())
        .map(|e| match &e.after.as_ref().unwrap()[0] {
            Value::Integer(i) => (*i, e.sequence),
            v => panic!("{v:?}"),
        })
        .collect();
    let of = |id: i64| events.iter().find(|e| e.0 == id).unwrap().1;
    assert!(of(1) < at, "the message after the transaction before it");
    assert!(at < of(2), "the message before its transaction's changes");
    assert!(
        end < of(2),
        "its batch ends before the transaction's changes: end {end}, change {}",
        of(2)
    );
    // The whole stream applies.
    p.apply_ok(&raw);
    p.audit_equal();

    // Applied only through the message's batch, then resumed from the
    // target's cursor as the docs say: nothing skipped.
    std::fs::remove_file(p.dir.path().join("proj.db")).unwrap();
    p.apply_ok(&through_batch_of(&raw, "just before commit"));
    let after = p.cursor().to_json();
    let (rest_raw, rest) = p.capture_ok(&["--messages", "outbox", "--after", &after]);
    assert!(messages(&rest).is_empty(), "the message is not repeated");
    let ids: Vec<i64> = rest
        .iter()
        .flat_map(|b| b.events.iter())
        .map(|e| match &e.after.as_ref().unwrap()[0] {
            Value::Integer(i) => *i,
            v => panic!("{v:?}"),
        })
        .collect();
    assert_eq!(ids, [2, 3], "the transaction after the message is read");
    p.apply_ok(&rest_raw);
    p.audit_equal();
}

/// The same placement for a follower, with its batches acknowledged from
/// the target: the stream it writes applies whole.
#[test]
fn a_follower_places_a_message_before_the_commit_that_follows_it() {
    let p = Pipe::new("msg_before_commit_follow");
    let s = p.session();
    s.exec("CREATE TABLE t (id int PRIMARY KEY, v text)");
    p.init(&["public.t"]);
    let out = p.dir.path().join("follow.jsonl");
    let url = p.db.url();
    let mut capture = Command::new(common::sqlite::bin(CAPTURE))
        .args(["--source", &url, "--slot", &p.slot, "--follow"])
        .args(["--messages", "outbox", "-q"])
        .stdin(Stdio::null())
        .stdout(Stdio::from(std::fs::File::create(&out).unwrap()))
        .stderr(Stdio::piped())
        .spawn()
        .expect("start capture --follow");
    for i in 1..=3 {
        s.exec(&format!(
            "BEGIN; INSERT INTO t VALUES ({i}, 'row'); \
             SELECT pg_logical_emit_message(false, 'outbox', 'm{i}'); COMMIT"
        ));
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let text = std::fs::read_to_string(&out).unwrap();
        let done = text.contains("[\"integer\",\"3\"]")
            && text
                .lines()
                .last()
                .is_some_and(|l| l.starts_with("{\"kind\":\"commit\""));
        if done {
            break;
        }
        assert!(Instant::now() < deadline, "the follower never wrote id 3");
        std::thread::sleep(Duration::from_millis(50));
    }
    let killed = Command::new("kill")
        .args(["-TERM", &capture.id().to_string()])
        .status()
        .expect("run kill");
    assert!(killed.success());
    let status = capture.wait().unwrap();
    assert_eq!(status.code(), Some(0));
    let bytes = std::fs::read(&out).unwrap();
    let stream = batches(&bytes);
    let m = messages(&stream);
    assert_eq!(m.len(), 3);
    let seqs: Vec<u128> = stream
        .iter()
        .flat_map(|b| b.events.iter().map(|e| e.sequence))
        .collect();
    for (i, (_, _, at, end)) in m.iter().enumerate() {
        assert!(
            *at < seqs[i] && *end < seqs[i],
            "message {i} before its commit"
        );
    }
    p.apply_ok(&bytes);
    p.audit_equal();
}

/// A non-transactional message as the last record of the WAL: its record
/// ends at the flush position a read takes at its start. The read writes
/// it, and a read after its end does not repeat it.
#[test]
fn a_read_that_does_not_follow_writes_every_message_below_its_end() {
    let p = Pipe::new("msg_at_read_end");
    let s = p.session();
    s.exec("CREATE TABLE t (id int PRIMARY KEY)");
    p.init(&["public.t"]);
    let mut seen = Vec::new();
    let mut after: Option<String> = None;
    for i in 0..3 {
        s.exec(&format!("INSERT INTO t VALUES ({i})"));
        s.exec(&format!(
            "SELECT pg_logical_emit_message(false, 'outbox', 'last {i}')"
        ));
        p.wait_flushed();
        let mut args = vec!["--messages", "outbox"];
        if let Some(a) = &after {
            args.extend(["--after", a.as_str()]);
        }
        let (raw, stream) = p.capture_ok(&args);
        seen.extend(messages(&stream).into_iter().map(|m| m.0));
        p.apply_ok(&raw);
        after = Some(p.cursor().to_json());
    }
    let (_, rest) = p.capture_ok(&["--messages", "outbox", "--after", after.as_deref().unwrap()]);
    seen.extend(messages(&rest).into_iter().map(|m| m.0));
    assert_eq!(seen, [text("last 0"), text("last 1"), text("last 2")]);
    p.audit_equal();
}

/// A message whose record is longer than the line cap stops capture,
/// naming its prefix, its LSN and the option, with nothing of its batch
/// committed; with a cap that fits, it is written.
#[test]
fn a_message_over_the_line_cap_is_refused_at_capture() {
    let p = Pipe::new("msg_line_cap");
    let s = p.session();
    s.exec("CREATE TABLE t (id int PRIMARY KEY)");
    p.init(&["public.t"]);
    s.exec("BEGIN; INSERT INTO t VALUES (1); SELECT pg_logical_emit_message(true, 'outbox', repeat('x', 3000)); COMMIT");
    s.exec("SELECT pg_logical_emit_message(false, 'outbox', decode(repeat('ff', 3000), 'hex'))");
    p.wait_flushed();
    for what in ["transactional", "non-transactional"] {
        let r = if what == "transactional" {
            p.capture(&["--messages", "outbox", "--max-line-bytes", "2000"])
        } else {
            // Past the first (which fits 7000): the binary one is 6,000
            // hex digits.
            p.capture(&["--messages", "outbox", "--max-line-bytes", "5000"])
        };
        expect(&r, 1, what);
        for needle in ["prefix \"outbox\"", "at LSN ", "--max-line-bytes"] {
            assert!(r.stderr.contains(needle), "{what}: {needle}: {}", r.stderr);
        }
        let out = r.stdout_str();
        assert!(
            !out.contains("\"kind\":\"commit\"") && !out.contains("ffff"),
            "{what}: nothing committed: {out}"
        );
    }
    let (raw, stream) = p.capture_ok(&["--messages", "outbox", "--max-line-bytes", "7000"]);
    assert_eq!(messages(&stream).len(), 2);
    assert!(raw.split(|&b| b == b'\n').all(|l| l.len() <= 7000));
    // Without the prefix, the read goes past them.
    p.capture_ok(&["--max-line-bytes", "2000"]);
}

/// A streamed transaction (the server sends it in blocks while it runs)
/// whose savepoint ran DDL and wrote rows, then was rolled back: the
/// stream reads as protocol 1 reads it, with no schema record of the
/// rolled-back DDL, and applies to a projection equal to the source. Each
/// DDL both where the table was described before the savepoint and where
/// it is first described inside it.
#[test]
fn a_rolled_back_savepoint_leaves_a_streamed_transaction_s_tables_as_they_were() {
    let p = Pipe::new("savepoint_ddl");
    pg::streaming_tables(&p.db);
    p.init(&["public.big", "public.side"]);
    let s = p.session();
    let rows = |lo: i64| {
        format!(
            "INSERT INTO big (id, v, n) SELECT g, md5(g::text), g FROM generate_series({lo}, {}) g;",
            lo + 1999
        )
    };
    let mut lo = 1;
    for ddl in [
        "ALTER TABLE big ADD COLUMN extra int DEFAULT 7",
        "ALTER TABLE big DROP COLUMN n",
        "ALTER TABLE big RENAME COLUMN v TO w",
    ] {
        for described_before in [true, false] {
            let before = if described_before {
                rows(lo)
            } else {
                "INSERT INTO side SELECT g, md5(g::text) FROM generate_series(1, 2000) g; \
                 DELETE FROM side;"
                    .to_string()
            };
            let inside = if ddl.contains("DROP") {
                format!(
                    "INSERT INTO big (id, v) SELECT g, md5(g::text) FROM generate_series({}, {}) g;",
                    lo + 2000,
                    lo + 3999
                )
            } else if ddl.contains("RENAME") {
                format!(
                    "INSERT INTO big (id, w, n) SELECT g, md5(g::text), g FROM generate_series({}, {}) g;",
                    lo + 2000,
                    lo + 3999
                )
            } else {
                rows(lo + 2000)
            };
            s.exec(&format!(
                "BEGIN; {before} SAVEPOINT sp; {ddl}; {inside} ROLLBACK TO sp; {} \
                 UPDATE big SET v = 'after ' || id WHERE id % 500 = 0; COMMIT",
                rows(lo + 4000)
            ));
            lo += 10_000;
        }
    }
    let (raw, streamed) = p.capture_ok(&[]);
    let (_, v1) = p.capture_ok(&["--pgoutput-protocol", "1"]);
    let changes = |b: &[Batch]| -> Vec<String> {
        b.iter()
            .flat_map(|b| b.changes.iter().map(|(_, c)| format!("{:?}", c.schema)))
            .collect()
    };
    // `side` is described when first met, inside the batch: not a change.
    let big_changes: Vec<String> = changes(&streamed)
        .into_iter()
        .filter(|c| c.contains("public.big"))
        .collect();
    assert!(
        big_changes.is_empty(),
        "no schema record for DDL that was rolled back: {big_changes:?}"
    );
    assert_eq!(changes(&v1), changes(&streamed));
    let events = |b: &[Batch]| -> Vec<String> {
        b.iter()
            .flat_map(|b| b.events.iter().map(|e| format!("{e:?}")))
            .collect()
    };
    assert_eq!(events(&streamed), events(&v1), "the same events");
    assert!(events(&streamed).len() > 6 * 4000);
    // The server streamed them (its statistics come a little later).
    let q = format!(
        "SELECT coalesce(stream_txns, 0) FROM pg_stat_replication_slots WHERE slot_name = {}",
        lit(&p.slot)
    );
    let deadline = Instant::now() + Duration::from_secs(20);
    while s.value(&q).parse::<i64>().unwrap_or(0) == 0 {
        assert!(Instant::now() < deadline, "the server streamed nothing");
        std::thread::sleep(Duration::from_millis(200));
    }
    p.apply_ok(&raw);
    p.audit_equal();
}

/// A multi-host URL whose first host accepts connections and never
/// answers (a stopped old primary): each host has its own connect timeout,
/// so the second is reached for every session, replication ones included,
/// and a read goes through.
#[test]
fn a_hung_first_host_does_not_keep_the_second_from_being_tried() {
    let p = Pipe::new("hung_first_host");
    let s = p.session();
    s.exec("CREATE TABLE t (id int PRIMARY KEY)");
    p.init(&["public.t"]);
    s.exec("INSERT INTO t VALUES (1)");
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = silent.local_addr().unwrap().port();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for c in silent.incoming().flatten() {
            held.push(c);
        }
    });
    let real = format!("127.0.0.1:{}", p.db.cluster.port);
    let url =
        p.db.url()
            .replace(&real, &format!("127.0.0.1:{port},{real}"))
            + "?connect_timeout=2";
    let t0 = Instant::now();
    let r = exec(
        CAPTURE,
        &["--source", &url, "--slot", &p.slot, "--max-events", "1"],
        None,
    );
    expect(&r, 0, "a read through the second host");
    assert_eq!(
        batches(&r.stdout)
            .iter()
            .map(|b| b.events.len())
            .sum::<usize>(),
        1
    );
    // A few sessions, each waiting 2 s on the first host: not one
    // timeout for all of them.
    assert!(t0.elapsed() < Duration::from_secs(40), "{:?}", t0.elapsed());
}

/// Capture on a standby (PostgreSQL 16+) whose primary is lost and then
/// replaced by a promoted standby that had less WAL: the follower says,
/// within the receive timeout, that the standby receives nothing (a
/// warning and `status`), and once the standby is pointed at the new
/// primary, whose history forked before the standby's position, it stops
/// with the way out instead of following a history that is no longer the
/// primary's.
#[test]
fn a_standby_that_cannot_follow_its_new_primary_stops_the_follower() {
    if pg::major_version() < 16 {
        eprintln!(
            "SKIPPED a_standby_that_cannot_follow_its_new_primary_stops_the_follower: PostgreSQL {} has no logical decoding on a standby (the matrix runs it on 16, 17 and 18)",
            pg::major_version()
        );
        return;
    }
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    let primary: &'static pg::Cluster = pg::private_cluster();
    let db = primary.create_db("standby_fork");
    let s = db.session();
    s.exec("CREATE TABLE a (id int8 PRIMARY KEY, v text)");
    s.exec("INSERT INTO a SELECT g, 'first' FROM generate_series(1, 10) g");
    // To see whether the standby's WAL receiver streams (docs/POSTGRES.md).
    primary.admin(&format!("GRANT pg_monitor TO {}", pg::ROLE));
    let capture_sb = primary.standby("fork_sb1", "hot_standby_feedback = on");
    let behind: &'static pg::Cluster = Box::leak(Box::new(primary.standby("fork_sb2", "")));
    let url_on = |port: u16| {
        format!(
            "postgres://{}:{}@127.0.0.1:{port}/{}",
            pg::ROLE,
            pg::url_encode(pg::PASSWORD),
            db.dbname
        )
    };
    let url = url_on(capture_sb.port);
    // A slot on a standby waits for the primary's next running-transactions
    // record: log one often until the slot is made.
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
    let r = exec(
        CAPTURE,
        &[
            "init",
            "--no-slot",
            "--source",
            &db.url(),
            "--slot",
            "s_fork",
            "--table",
            "public.a",
        ],
        None,
    );
    expect(&r, 0, "init --no-slot on the primary");
    let made = s.flush_lsn();
    let on_sb = Session::connect(capture_sb.port, &db.dbname);
    common::sqlite::wait_for_every(60, 50, "the standby to replay init", || {
        pg::parse_lsn(&on_sb.value("SELECT pg_last_wal_replay_lsn()")) >= made
    });
    let r = exec(
        CAPTURE,
        &[
            "init", "--source", &url, "--slot", "s_fork", "--table", "public.a",
        ],
        None,
    );
    expect(&r, 0, "init on the standby");
    stop.store(true, Ordering::Relaxed);
    logger.join().unwrap();

    let dir = tempfile::tempdir().unwrap();
    let (out, log) = (dir.path().join("out.jsonl"), dir.path().join("capture.log"));
    let mut capture = Command::new(common::sqlite::bin(CAPTURE))
        .args(["--source", &url, "--slot", "s_fork", "--follow"])
        .args(["--receive-timeout-ms", "3000", "--idle-batch-ms", "200"])
        .stdin(Stdio::null())
        .stdout(Stdio::from(std::fs::File::create(&out).unwrap()))
        .stderr(Stdio::from(std::fs::File::create(&log).unwrap()))
        .spawn()
        .expect("start capture --follow on the standby");
    // The second standby stops; the primary writes 20 rows that only the
    // capture's standby receives, and the follower writes them.
    assert!(
        behind.stop_fast(Duration::from_secs(30)),
        "the second standby stops"
    );
    s.exec("INSERT INTO a SELECT g, 'only the old primary' FROM generate_series(11, 30) g");
    common::sqlite::wait_for_every(60, 100, "the follower to write the 20 rows", || {
        std::fs::read_to_string(&out)
            .unwrap_or_default()
            .contains("[\"integer\",\"30\"]")
    });
    // An idle, healthy link for more than twice the receive timeout: no
    // word of it.
    std::thread::sleep(Duration::from_secs(7));
    let said = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(!said.contains("received no WAL"), "{said}");
    // The primary is lost: the standby receives nothing, and says so.
    primary.stop_immediate();
    common::sqlite::wait_for_every(
        30,
        100,
        "a warning that the standby receives nothing",
        || {
            std::fs::read_to_string(&log)
                .unwrap_or_default()
                .contains("has received no WAL from its primary")
        },
    );
    let r = exec(
        CAPTURE,
        &["status", "--source", &url, "--slot", "s_fork"],
        None,
    );
    expect(&r, 0, "status on the standby");
    assert!(
        r.stdout_str().contains("standby_receiving: no"),
        "{}",
        r.stdout_str()
    );
    // The standby with less WAL is promoted and the capture's standby is
    // pointed at it: its history forked before the standby's position.
    behind.start_again();
    behind.promote();
    capture_sb.admin(&format!(
        "ALTER SYSTEM SET primary_conninfo = 'host=127.0.0.1 port={} user=postgres password={} dbname=postgres'",
        behind.port,
        pg::SUPERUSER_PASSWORD
    ));
    capture_sb.admin("ALTER SYSTEM SET primary_slot_name = ''");
    capture_sb.admin("SELECT pg_reload_conf()");
    let deadline = Instant::now() + Duration::from_secs(90);
    let status = loop {
        if let Some(st) = capture.try_wait().unwrap() {
            break st;
        }
        if Instant::now() > deadline {
            let _ = capture.kill();
            panic!(
                "the follower did not stop:\n{}",
                std::fs::read_to_string(&log).unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    let said = std::fs::read_to_string(&log).unwrap();
    assert_eq!(status.code(), Some(1), "{said}");
    for needle in [
        "cannot follow its primary",
        "timeline 2",
        "new slot",
        "Starting over",
    ] {
        assert!(said.contains(needle), "{needle}: {said}");
    }
    let r = exec(
        CAPTURE,
        &["status", "--source", &url, "--slot", "s_fork"],
        None,
    );
    expect(&r, 0, "status on the standby after the fork");
    assert!(
        r.stdout_str().contains("cannot follow timeline 2"),
        "{}",
        r.stdout_str()
    );
    // What was written before is a valid stream.
    batches(&std::fs::read(&out).unwrap());
}

/// Peak resident memory of a tool run, in bytes (GNU time).
fn peak_rss(args: &[&str]) -> (u64, Vec<u8>) {
    let dir = tempfile::tempdir().unwrap();
    let report = dir.path().join("rss");
    let out = Command::new("/usr/bin/time")
        .arg("-o")
        .arg(&report)
        .args(["-f", "%M"])
        .arg(common::sqlite::bin(CAPTURE))
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run capture under /usr/bin/time");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let kib: u64 = std::fs::read_to_string(&report)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    (kib * 1024, out.stdout)
}

/// A 24 MiB logical message costs capture at most twice its size in
/// memory: it is not copied from buffer to buffer, and its line (twice as
/// long, in hex) is written in pieces.
#[test]
fn a_large_message_costs_capture_at_most_twice_its_size() {
    let p = Pipe::new("msg_memory");
    let s = p.session();
    s.exec("CREATE TABLE t (id int PRIMARY KEY)");
    p.init(&["public.t"]);
    const SIZE: u64 = 24 << 20;
    s.exec(&format!(
        "BEGIN; INSERT INTO t VALUES (1); \
         SELECT pg_logical_emit_message(true, 'outbox', decode(repeat('ab', {SIZE}), 'hex')); COMMIT"
    ));
    let url = p.db.url();
    let args = [
        "--source",
        &url,
        "--slot",
        &p.slot,
        "--messages",
        "outbox",
        "--max-line-bytes",
        "100000000",
    ];
    let (peak, out) = peak_rss(&args);
    let stream = batches(&out);
    let m = messages(&stream);
    assert_eq!(m.len(), 1);
    assert!(
        matches!(&m[0].0, Value::Blob(b) if b.len() as u64 == SIZE && b.iter().all(|&x| x == 0xab))
    );
    // The same tool reading nothing: what it costs without the message.
    let end = Cursor::new(
        stream[0].start.source.clone(),
        stream.last().unwrap().end.sequence(),
    );
    let end = end.to_json();
    let mut quiet = args.to_vec();
    quiet.extend(["--after", &end]);
    let (base, _) = peak_rss(&quiet);
    assert!(
        peak.saturating_sub(base) <= 2 * SIZE,
        "a {SIZE}-byte message cost {} bytes over a read of nothing ({base})",
        peak - base
    );
}

/// A backfill request whose commit waits for a synchronous standby
/// (`synchronous_commit = remote_apply`, the standby applying 3 s late):
/// the follower decodes the request before the request is visible to its
/// session, waits for it, and carries it out.
#[test]
fn a_request_decoded_before_it_is_visible_is_carried_out() {
    let primary: &'static pg::Cluster = pg::private_cluster();
    let db = primary.create_db("bf_sync");
    let s = db.session();
    s.exec("CREATE TABLE a (id int PRIMARY KEY, v text); INSERT INTO a VALUES (1, 'a')");
    s.exec("CREATE TABLE b (id int PRIMARY KEY, v text)");
    s.exec("INSERT INTO b SELECT g, 'b' || g FROM generate_series(1, 1000) g");
    let _standby = primary.standby("bf_sync_sb", "recovery_min_apply_delay = '3s'");
    primary.admin("ALTER SYSTEM SET synchronous_standby_names = '*'");
    primary.admin("ALTER SYSTEM SET synchronous_commit = 'remote_apply'");
    primary.admin("SELECT pg_reload_conf()");
    let (url, slot) = (db.url(), "s_bf_sync");
    pg::init_capture(&url, slot, &["public.a"]);
    let dir = tempfile::tempdir().unwrap();
    let target = format!("sqlite:{}", dir.path().join("proj.db").display());
    let r = pg::snapshot_into(&url, slot, &target);
    expect(&r, 0, "snapshot | apply");
    let after = exec(APPLY, &["cursor", "--target", &target], None)
        .stdout_str()
        .trim()
        .to_string();
    let log = dir.path().join("capture.log");
    let mut capture = Command::new(common::sqlite::bin(CAPTURE))
        .args([
            "--source", &url, "--slot", slot, "--follow", "--after", &after,
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::from(std::fs::File::create(&log).unwrap()))
        .spawn()
        .expect("start capture --follow");
    let mut apply = Command::new(common::sqlite::bin(APPLY))
        .args(["--target", &target, "-q"])
        .stdin(Stdio::from(capture.stdout.take().unwrap()))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start apply");
    let r = exec(
        CAPTURE,
        &[
            "backfill", "--source", &url, "--slot", slot, "--table", "public.b",
        ],
        None,
    );
    expect(&r, 0, "capture backfill");
    let status = || {
        let r = exec(
            CAPTURE,
            &[
                "status",
                "--source",
                &url,
                "--slot",
                slot,
                "--output-format",
                "json",
            ],
            None,
        );
        expect(&r, 0, "status");
        serde_json::from_str::<serde_json::Value>(r.stdout_str().trim()).expect("status JSON")
    };
    let t0 = Instant::now();
    while status()["backfills"][0]["state"] != "done" {
        assert!(
            t0.elapsed() < Duration::from_secs(90),
            "the backfill did not end: {}\n{}",
            status()["backfills"],
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(300));
    }
    // Everything through the backfill's end is in the target.
    s.exec("INSERT INTO a VALUES (2, 'after')");
    let end = s.insert_lsn();
    common::sqlite::wait_for_every(60, 200, "the target to catch up", || {
        let r = exec(APPLY, &["cursor", "--target", &target], None);
        Cursor::parse_json(r.stdout_str().trim()).is_ok_and(|c| (c.sequence() >> 64) as u64 >= end)
    });
    for c in [&mut capture, &mut apply] {
        let _ = Command::new("kill")
            .args(["-TERM", &c.id().to_string()])
            .status();
        let _ = c.wait();
    }
    let r = exec(
        AUDIT,
        &["--source", &url, "--slot", slot, "--target", &target],
        None,
    );
    expect(&r, 0, "audit");
    assert!(r.stdout_str().contains("public.b"), "{}", r.stdout_str());
    assert!(
        r.stdout_str().trim_end().ends_with("equal"),
        "{}",
        r.stdout_str()
    );
    primary.admin("ALTER SYSTEM RESET synchronous_standby_names");
    primary.admin("SELECT pg_reload_conf()");
}
