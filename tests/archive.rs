//! The archive target (`dir:PATH`, docs/TOOLS.md "Archives") as a user
//! runs it: the real binaries over a SQLite source, resumed from
//! `apply cursor`, killed mid-stream, grouped by size and age, damaged in
//! storage, and replayed with `mooncdc-merge DIR/*.jsonl | mooncdc-apply`
//! into a projection that the audit must find equal to the source.

mod common;

use common::sqlite::{bin, exec, expect, pipeline, shell_quote, Dbs, APPLY, AUDIT, CAPTURE};
use common::{ins, kv_schema, row, Spec};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const MERGE: &str = "mooncdc-merge";

use common::archive_files as files;

/// Every file has a sidecar that `sha256sum -c` accepts, no temporary
/// file is left, and the files cover one interval without gap or overlap.
#[track_caller]
fn assert_whole(dir: &Path) {
    let f = files(dir);
    assert!(!f.is_empty(), "no archive files in {}", dir.display());
    for w in f.windows(2) {
        assert_eq!(
            w[0].1, w[1].0,
            "files {:?} and {:?} do not meet",
            w[0].2, w[1].2
        );
    }
    for (_, _, p) in &f {
        let side = format!("{}.sha256", p.display());
        let r = exec_sh(&format!(
            "cd {} && sha256sum -c {}",
            shell_quote(&dir.display().to_string()),
            shell_quote(Path::new(&side).file_name().unwrap().to_str().unwrap())
        ));
        expect(&r, 0, "sha256sum -c");
    }
    for e in std::fs::read_dir(dir).unwrap() {
        let n = e.unwrap().file_name().to_string_lossy().into_owned();
        assert!(!n.ends_with(".tmp"), "a temporary file was left: {n}");
    }
}

/// `mooncdc-apply --target URL ARGS…` reading a pipe this test writes.
fn spawn_apply(url: &str, args: &[&str]) -> (std::process::Child, std::process::ChildStdin) {
    let mut child = Command::new(bin(APPLY))
        .args(["--target", url])
        .args(args)
        .stdin(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let w = child.stdin.take().unwrap();
    (child, w)
}

fn exec_sh(script: &str) -> common::Run {
    common::sqlite::exec_program(Path::new("bash"), &["-c", script], None)
}

/// `mooncdc-merge DIR/*.jsonl | mooncdc-apply --target URL`.
fn replay(dir: &Path, target: &str) -> common::Run {
    pipeline(&format!(
        "{} {}/*.jsonl | {{apply}} --target {}",
        shell_quote(&bin(MERGE).display().to_string()),
        shell_quote(&dir.display().to_string()),
        shell_quote(target)
    ))
}

fn archive_cursor(url: &str) -> Option<String> {
    let r = exec(APPLY, &["cursor", "--target", url], None);
    match r.code {
        Some(0) => Some(r.stdout_str().trim().to_string()),
        Some(1) => None,
        other => panic!("apply cursor exited {other:?}: {}", r.stderr),
    }
}

/// Writes of every kind, with awkward values, on the source.
fn write_some(db: &Dbs, from: i64, n: i64) {
    let c = db.src_conn();
    for i in from..from + n {
        c.execute(
            "INSERT INTO t VALUES (?1, ?2, ?3, ?4)",
            rusqlite::params![
                i,
                format!("\u{feff}v{i}\u{1F600}\0end"),
                f64::from_bits(0x3ff0_0000_0000_0001 + i as u64),
                vec![0u8, 255, i as u8],
            ],
        )
        .unwrap();
        if i % 3 == 0 {
            c.execute("UPDATE t SET v = v || '!' WHERE id = ?1", [i / 2])
                .unwrap();
        }
        if i % 7 == 0 {
            c.execute("DELETE FROM t WHERE id = ?1", [i - 5]).unwrap();
        }
    }
}

/// An archive started at the source's beginning, extended from its own
/// cursor, then by a follower killed with SIGKILL while changes flow and
/// resumed: its files meet end to end, each matches its sidecar, and
/// replaying them gives the source's rows exactly (nothing lost, nothing
/// twice: merge refuses an overlap, the audit a missing change).
#[test]
fn an_archive_resumes_exactly_once_and_replays_to_the_source() {
    resumes_exactly_once("");
}

/// The same with batches grouped into files by size and age: a kill loses
/// the batches waiting in the open file from the archive, never from the
/// stream (they are read again).
#[test]
fn a_grouped_archive_resumes_exactly_once_and_replays_to_the_source() {
    resumes_exactly_once("?max-bytes=20000&max-age=0.2");
}

fn resumes_exactly_once(options: &str) {
    let db = Dbs::new();
    db.src_sql("CREATE TABLE t(id INTEGER PRIMARY KEY, v TEXT, r REAL, b BLOB)");
    db.init(&[]);
    let dir = db.path("archive");
    let url = format!("dir:{}{options}", dir.display());
    // A new archive holds no cursor, and asking makes nothing.
    assert_eq!(archive_cursor(&url), None);
    assert!(!dir.exists(), "apply cursor made the folder");

    write_some(&db, 1, 120);
    let r = pipeline(&format!(
        "{{capture}} --source {} --max-events 50 | {{apply}} --target {}",
        shell_quote(&db.src_url()),
        shell_quote(&url)
    ));
    expect(&r, 0, "first capture into the archive");
    let first = archive_cursor(&url).expect("a cursor");
    assert_eq!(files(&dir).len(), 1);
    // Resumed from the archive's cursor, twice: the second finds nothing
    // new, an empty batch that ends at the cursor, and writes no file.
    let mut seen = (0, String::new());
    for round in 0..2 {
        write_some(&db, 1000 + round * 100, 60 * (1 - round));
        let r = pipeline(&format!(
            "{{capture}} --source {src} --after \"$({{apply}} cursor --target {u})\" | {{apply}} --target {u}",
            src = shell_quote(&db.src_url()),
            u = shell_quote(&url)
        ));
        expect(&r, 0, "capture after the archive's cursor");
        let now = (files(&dir).len(), archive_cursor(&url).unwrap());
        if round == 1 {
            assert_eq!(now, seen, "nothing new made a file or moved the cursor");
        }
        seen = now;
    }
    assert_ne!(seen.1, first);

    // A follower, killed while changes flow.
    let after = archive_cursor(&url).unwrap();
    let mut capture = Command::new(bin(CAPTURE))
        .args([
            "--source",
            &db.src_url(),
            "--after",
            &after,
            "--follow",
            "--poll-ms",
            "10",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut apply = Command::new(bin(APPLY))
        .args(["--target", &url, "-q"])
        .stdin(Stdio::from(capture.stdout.take().unwrap()))
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let before = files(&dir).len();
    let mut i = 5000;
    let deadline = Instant::now() + Duration::from_secs(30);
    while files(&dir).len() < before + 5 {
        assert!(Instant::now() < deadline, "the follower wrote no files");
        write_some(&db, i, 3);
        i += 3;
        std::thread::sleep(Duration::from_millis(15));
    }
    write_some(&db, i, 30);
    apply.kill().unwrap();
    apply.wait().unwrap();
    capture.kill().unwrap();
    capture.wait().unwrap();
    write_some(&db, 9000, 40);

    // Resumed after the kill: what the killed apply had not made a file
    // is read again, once.
    let r = pipeline(&format!(
        "{{capture}} --source {src} --after \"$({{apply}} cursor --target {u})\" | {{apply}} --target {u}",
        src = shell_quote(&db.src_url()),
        u = shell_quote(&url)
    ));
    expect(&r, 0, "resume after SIGKILL");
    assert_whole(&dir);

    let r = replay(&dir, &db.proj_url());
    expect(&r, 0, "merge DIR/*.jsonl | apply");
    db.audit_equal();
    db.assert_same_rows(&["t"]);
}

/// One byte changed in an archive file: merge names the file and its
/// sidecar and writes nothing; apply refuses to read it, and an archive
/// whose last file is damaged refuses to go on from it.
#[test]
fn a_damaged_archive_file_is_named_instead_of_replayed() {
    let dir = tempfile::tempdir().unwrap();
    let arch = dir.path().join("a");
    let url = format!("dir:{}", arch.display());
    let schemas = vec![kv_schema("t")];
    for (s, e) in [(0u128, 2u128), (2, 4), (4, 6)] {
        let b = Spec::new(s, e).schemas(schemas.clone()).events(vec![
            ins(s + 1, "t", row(s as i64, "x")),
            ins(e, "t", row(e as i64, "y")),
        ]);
        let r = exec(APPLY, &["--target", &url, "-q"], Some(b.jsonl().as_bytes()));
        expect(&r, 0, "apply to the archive");
    }
    assert_whole(&arch);
    let f = files(&arch);
    let damage = |p: &Path| {
        let mut bytes = std::fs::read(p).unwrap();
        let i = bytes.len() / 2;
        bytes[i] ^= 0x20;
        std::fs::write(p, bytes).unwrap();
    };
    damage(&f[1].2);
    let r = pipeline(&format!(
        "{} {}/*.jsonl",
        shell_quote(&bin(MERGE).display().to_string()),
        shell_quote(&arch.display().to_string())
    ));
    expect(&r, 1, "merge of a damaged archive");
    assert!(r.stdout.is_empty(), "merge wrote {:?}", r.stdout_str());
    let name = f[1].2.display().to_string();
    assert!(
        r.stderr.contains(&name) && r.stderr.contains("SHA-256"),
        "{}",
        r.stderr
    );
    let target = format!("sqlite:{}", dir.path().join("p.db").display());
    let r = exec(APPLY, &["--target", &target, &name], None);
    expect(&r, 1, "apply of a damaged file");
    assert!(r.stderr.contains("sidecar"), "{}", r.stderr);
    // A damaged last file: the archive does not go on from it.
    damage(&f[2].2);
    let next = Spec::new(6, 7)
        .schemas(schemas)
        .events(vec![ins(7, "t", row(7, "z"))]);
    let r = exec(APPLY, &["--target", &url], Some(next.jsonl().as_bytes()));
    expect(&r, 1, "apply onto a damaged last file");
    assert!(
        r.stderr.contains(&f[2].2.display().to_string()),
        "{}",
        r.stderr
    );
    assert_eq!(files(&arch).len(), 3, "nothing was written");
}

/// What every target refuses, the archive refuses too (a gap, another
/// source, a compacted batch across its cursor, a batch cut short), with
/// no file written; the audit and a snapshot are refused with the way on;
/// bad URL options are usage errors; two writers never share a folder.
#[test]
fn an_archive_refuses_what_every_target_refuses() {
    let dir = tempfile::tempdir().unwrap();
    let arch = dir.path().join("a");
    let url = format!("dir:{}", arch.display());
    let schemas = vec![kv_schema("t")];
    let batch = |s: u128, e: u128| {
        Spec::new(s, e)
            .schemas(schemas.clone())
            .events(vec![ins(e, "t", row(e as i64, "x"))])
    };
    let r = exec(
        APPLY,
        &["--target", &url],
        Some(batch(0, 3).jsonl().as_bytes()),
    );
    expect(&r, 0, "first batch");
    let cut = format!("{}{}", batch(3, 4).header_line(), batch(3, 4).event_lines());
    for (what, input, word) in [
        ("gap", batch(5, 6).jsonl(), "gap"),
        (
            "other source",
            batch(3, 4).source("sqlite:other").jsonl(),
            "source",
        ),
        (
            "compacted",
            batch(1, 5).compacted(true).jsonl(),
            "compacted",
        ),
        ("cut short", cut, "commit"),
    ] {
        let r = exec(APPLY, &["--target", &url], Some(input.as_bytes()));
        expect(&r, 1, what);
        assert!(r.stderr.contains(word), "{what}: {}", r.stderr);
        assert_eq!(files(&arch).len(), 1, "{what}: a file was written");
    }
    assert_whole(&arch);
    // A replay of what it holds writes nothing; a batch from its cursor does.
    let r = exec(
        APPLY,
        &["--target", &url],
        Some(batch(0, 3).jsonl().as_bytes()),
    );
    expect(&r, 0, "replay");
    assert_eq!(files(&arch).len(), 1);
    let r = exec(
        APPLY,
        &["--target", &url],
        Some(batch(3, 4).jsonl().as_bytes()),
    );
    expect(&r, 0, "next");
    assert_eq!(
        files(&arch).iter().map(|f| (f.0, f.1)).collect::<Vec<_>>(),
        [(0, 3), (3, 4)]
    );

    let db = Dbs::new();
    db.src_sql("CREATE TABLE t(id INTEGER PRIMARY KEY, v TEXT)");
    db.init(&[]);
    let r = exec(AUDIT, &["--source", &db.src_url(), "--target", &url], None);
    expect(&r, 2, "audit of an archive");
    assert!(r.stderr.contains("cannot be audited"), "{}", r.stderr);
    let snap = common::snapshot_jsonl(&schemas, 3);
    let r = exec(
        APPLY,
        &[
            "--target",
            &format!("dir:{}", dir.path().join("s").display()),
        ],
        Some(snap.as_bytes()),
    );
    expect(&r, 1, "snapshot into an archive");
    assert!(r.stderr.contains("not snapshots"), "{}", r.stderr);
    for bad in [
        "dir:",
        "dir:x?max-bytes=0",
        "dir:x?max-age=-1",
        "dir:x?prefix=a/b",
        "dir:x?colour=red",
    ] {
        let r = exec(APPLY, &["cursor", "--target", bad], None);
        expect(&r, 2, bad);
    }

    // A second writer while one holds a folder (waiting on its pipe).
    let held = dir.path().join("held");
    let held_url = format!("dir:{}", held.display());
    let (mut first, mut w) = spawn_apply(&held_url, &["-q"]);
    use std::io::Write;
    w.write_all(batch(0, 1).jsonl().as_bytes()).unwrap();
    w.flush().unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while files(&held).is_empty() {
        assert!(Instant::now() < deadline, "the first writer wrote nothing");
        std::thread::sleep(Duration::from_millis(20));
    }
    let r = exec(
        APPLY,
        &["--target", &held_url],
        Some(batch(1, 2).jsonl().as_bytes()),
    );
    expect(&r, 1, "a second writer");
    assert!(r.stderr.contains("another mooncdc-apply"), "{}", r.stderr);
    assert_eq!(files(&held).len(), 1);
    first.kill().unwrap();
    first.wait().unwrap();
    drop(w);
}

/// Several batches to a file: by size (files close once they hold
/// max-bytes), and by age while the input is quiet (a file appears with no
/// further batch to close it); a SIGTERM between batches writes what waits
/// and exits 0.
#[test]
fn batches_are_grouped_into_files_by_size_and_age() {
    let dir = tempfile::tempdir().unwrap();
    let schemas = vec![kv_schema("t")];
    let batch = |s: u128| {
        Spec::new(s, s + 1)
            .schemas(schemas.clone())
            .events(vec![ins(s + 1, "t", row(s as i64, "some text"))])
    };
    let stream: String = (0..40).map(|s| batch(s).jsonl()).collect();
    let by_size = dir.path().join("size");
    let url = format!("dir:{}?max-bytes=2000", by_size.display());
    let r = exec(APPLY, &["--target", &url], Some(stream.as_bytes()));
    expect(&r, 0, "grouped by size");
    assert_whole(&by_size);
    let f = files(&by_size);
    assert!(f.len() > 2 && f.len() < 40, "{} files", f.len());
    assert_eq!((f[0].0, f.last().unwrap().1), (0, 40));
    for (_, _, p) in &f[..f.len() - 1] {
        let len = std::fs::metadata(p).unwrap().len();
        assert!((2000..2600).contains(&len), "{}: {len} bytes", p.display());
    }
    assert_eq!(
        archive_cursor(&url).map(|c| c.contains("\"40\"")),
        Some(true)
    );

    // By age: two batches, then a quiet input.
    let by_age = dir.path().join("age");
    let url = format!("dir:{}?max-age=0.3", by_age.display());
    let (mut apply, mut w) = spawn_apply(&url, &["-q"]);
    use std::io::Write;
    w.write_all(format!("{}{}", batch(0).jsonl(), batch(1).jsonl()).as_bytes())
        .unwrap();
    w.flush().unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while files(&by_age).is_empty() {
        assert!(Instant::now() < deadline, "no file after max-age");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(
        files(&by_age)
            .iter()
            .map(|f| (f.0, f.1))
            .collect::<Vec<_>>(),
        [(0, 2)]
    );
    assert!(apply.try_wait().unwrap().is_none(), "apply ended");
    drop(w);
    let out = apply.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert_whole(&by_age);
}

/// A SIGTERM while grouped batches wait for their file (the input quiet,
/// the file far from its size and age): they are written, exit 0.
#[test]
fn a_stop_writes_the_batches_waiting_for_their_file() {
    use std::io::{BufRead, Write};
    let dir = tempfile::tempdir().unwrap();
    let schemas = vec![kv_schema("t")];
    let arch = dir.path().join("a");
    let url = format!("dir:{}?max-age=600", arch.display());
    let (mut apply, mut w) = spawn_apply(&url, &["-v"]);
    for s in 0..3u128 {
        let b = Spec::new(s, s + 1)
            .schemas(schemas.clone())
            .events(vec![ins(s + 1, "t", row(s as i64, "x"))]);
        w.write_all(b.jsonl().as_bytes()).unwrap();
    }
    w.flush().unwrap();
    // Wait until the third batch is committed (it waits in the open file).
    let mut err = std::io::BufReader::new(apply.stderr.take().unwrap());
    let mut seen = 0;
    let mut line = String::new();
    while seen < 3 {
        line.clear();
        assert!(err.read_line(&mut line).unwrap() > 0, "apply ended");
        seen += line.contains("batch committed") as usize;
    }
    assert!(files(&arch).is_empty(), "a file before its size or age");
    let st = Command::new("kill")
        .args(["-TERM", &apply.id().to_string()])
        .status()
        .unwrap();
    assert!(st.success());
    let status = apply.wait().unwrap();
    assert_eq!(status.code(), Some(0));
    drop(w);
    assert_eq!(
        files(&arch).iter().map(|f| (f.0, f.1)).collect::<Vec<_>>(),
        [(0, 3)]
    );
    assert_whole(&arch);
}

/// Grouped batches, then one refused or cut short in the same input: the
/// batches before it are written whole (the refused one cut out of their
/// file), the cursor is their end, and replaying gives their rows. A batch
/// the archive holds whole (one that ends at its cursor) changes nothing.
#[test]
fn a_failed_batch_leaves_the_grouped_batches_before_it_whole() {
    let dir = tempfile::tempdir().unwrap();
    let schemas = vec![kv_schema("t")];
    let b = |s: u128, e: u128| {
        Spec::new(s, e).schemas(schemas.clone()).events(
            (s + 1..=e)
                .map(|i| ins(i, "t", row(i as i64, "x")))
                .collect(),
        )
    };
    let good: String = [b(0, 1), b(1, 2), b(2, 2), b(2, 3)]
        .iter()
        .map(|b| b.jsonl())
        .collect();
    let cut = format!("{}{}", b(3, 5).header_line(), b(3, 5).event_lines());
    for (case, tail, word) in [
        ("cut", cut, "commit"),
        ("gap", b(4, 5).jsonl(), "gap"),
        ("compacted", b(2, 5).compacted(true).jsonl(), "compacted"),
    ] {
        let arch = dir.path().join(case);
        let url = format!("dir:{}?max-bytes=100000&max-age=600", arch.display());
        // Two inputs: the second is a stream of its own, checked against
        // the archive's cursor (in one stream, the reader refuses a gap).
        let (g, t) = (dir.path().join("good.jsonl"), dir.path().join("tail.jsonl"));
        std::fs::write(&g, &good).unwrap();
        std::fs::write(&t, &tail).unwrap();
        let (g, t) = (g.to_str().unwrap(), t.to_str().unwrap());
        // A batch cut short fails inside the first input, with the good
        // batches waiting in the open file.
        let r = if case == "cut" {
            let input = format!("{good}{tail}");
            exec(APPLY, &["--target", &url], Some(input.as_bytes()))
        } else {
            exec(APPLY, &["--target", &url, g, t], None)
        };
        expect(&r, 1, case);
        assert!(r.stderr.contains(word), "{case}: {}", r.stderr);
        assert!(
            r.stderr.contains("4 batches, 3 events applied"),
            "{case}: {}",
            r.stderr
        );
        assert_eq!(
            files(&arch).iter().map(|f| (f.0, f.1)).collect::<Vec<_>>(),
            [(0, 3)],
            "{case}"
        );
        assert_whole(&arch);
        assert!(archive_cursor(&url).unwrap().contains("\"3\""));
        let p = dir.path().join(format!("{case}.db"));
        let r = replay(&arch, &format!("sqlite:{}", p.display()));
        expect(&r, 0, "replay");
        let n: i64 = rusqlite::Connection::open(&p)
            .unwrap()
            .query_row("SELECT count(*) FROM t", [], |r| r.get(0))
            .unwrap();
        assert_eq!(n, 3, "{case}");
    }
}

/// An archive `mooncdc-split --output-dir` made is one the archive target
/// goes on from (its files carry no sidecars; the new ones do).
#[test]
fn an_archive_split_made_is_continued() {
    let dir = tempfile::tempdir().unwrap();
    let arch = dir.path().join("a");
    let schemas = vec![kv_schema("t")];
    let b = Spec::new(0, 6)
        .schemas(schemas.clone())
        .events((1..=6).map(|i| ins(i, "t", row(i as i64, "x"))).collect());
    let input = dir.path().join("in.jsonl");
    std::fs::write(&input, b.jsonl()).unwrap();
    let r = exec(
        common::sqlite::SPLIT,
        &[
            "--max-events",
            "2",
            "--output-dir",
            arch.to_str().unwrap(),
            input.to_str().unwrap(),
        ],
        None,
    );
    expect(&r, 0, "split --output-dir");
    let url = format!("dir:{}", arch.display());
    assert!(archive_cursor(&url).unwrap().contains("\"6\""));
    let next = Spec::new(6, 8)
        .schemas(schemas)
        .events(vec![ins(8, "t", row(8, "y"))]);
    let r = exec(APPLY, &["--target", &url], Some(next.jsonl().as_bytes()));
    expect(&r, 0, "apply after split's pieces");
    assert_eq!(files(&arch).last().map(|f| (f.0, f.1)), Some((6, 8)));
    let p = dir.path().join("p.db");
    let r = replay(&arch, &format!("sqlite:{}", p.display()));
    expect(&r, 0, "replay");
    let n: i64 = rusqlite::Connection::open(&p)
        .unwrap()
        .query_row("SELECT count(*) FROM t", [], |r| r.get(0))
        .unwrap();
    assert_eq!(n, 7);
}
