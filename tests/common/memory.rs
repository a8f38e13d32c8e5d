//! Apply's memory against the size of a batch: one large batch written
//! straight into the tool's standard input (never held by the test, never
//! on disk), and the tool's peak RSS as the kernel counts it.
//!
//! The peak comes from GNU time (`/usr/bin/time -f %M`, installed by
//! scripts/test.sh): the kernel's `ru_maxrss` of the child, taken when it
//! is reaped, so a peak in the last moments of a run (ClickHouse sends a
//! batch's rows at its commit) is counted. Polling `VmHWM` in
//! `/proc/<pid>/status` could miss those, since it is gone once the process
//! has exited.

use super::Run;
use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};

/// GNU time, which reports a child's peak RSS.
pub const GNU_TIME: &str = "/usr/bin/time";

/// The two batch sizes each target's memory test applies: what apply
/// holds must not grow from one to the other.
pub const SMALL: u64 = 200_000;
pub const LARGE: u64 = 2_000_000;

/// How far the large batch's peak may be above the small one's. Holding
/// even 8 bytes of each of the 1,800,000 changes more (a sequence, a key)
/// would be twice this.
pub const SLACK_MIB: f64 = 8.0;

/// The documented bounds of apply's peak RSS (docs/OPERATIONS.md, "Apply's
/// memory"), for the binaries the tests run (debug builds, a little larger
/// than the release ones the document measures).
pub const SQLITE_BOUND_MIB: f64 = 48.0;
/// PostgreSQL: up to 16 MiB of statements' values in flight, plus the rest.
pub const PG_BOUND_MIB: f64 = 48.0;
/// ClickHouse: 8 MiB of each table's rows held in memory (the rest in the
/// spool file), insert bodies streamed from there, plus the rest.
pub const CH_BOUND_MIB: f64 = 96.0;

/// The shape of [`write_batch`]'s batch of `n` changes (`n` a multiple of
/// 10): `n/2` inserts of keys 1.., then updates of the first `3n/10` keys,
/// then deletes of the last `n/5` inserted keys.
pub struct Shape {
    pub inserts: u64,
    pub updates: u64,
    pub deletes: u64,
}

impl Shape {
    pub fn of(n: u64) -> Shape {
        assert!(n % 10 == 0, "a batch of a multiple of 10 changes");
        Shape {
            inserts: n / 2,
            updates: n * 3 / 10,
            deletes: n / 5,
        }
    }

    /// Rows left at the end.
    pub fn rows(&self) -> u64 {
        self.inserts - self.deletes
    }

    /// The sum of column `c` over the rows left: an updated row has
    /// `c = id`, one never updated `c = 0`.
    pub fn sum_c(&self) -> u64 {
        let k = self.updates.min(self.rows());
        k * (k + 1) / 2
    }
}

/// The batch's one table: `t(id INTEGER key, a TEXT, b REAL, c INTEGER)`.
pub const TABLE: &str = "t";

/// Row `k` in version `v` (0: as inserted, 1: updated).
fn row(out: &mut Vec<u8>, k: u64, v: u64) {
    // b = (2k+1) × 2^-3: an odd significand, so the wire form is canonical.
    write!(
        out,
        r#"[["integer","{k}"],["text","row {k} version {v} of the memory test"],["real","{}","-3"],["integer","{}"]]"#,
        2 * k + 1,
        k * v
    )
    .expect("write to memory");
}

/// Write one batch of `n` changes (see [`Shape`]) of source `source` to
/// `w`, line by line (a line is never longer than one event).
pub fn write_batch(w: &mut dyn Write, source: &str, n: u64) -> std::io::Result<()> {
    let s = Shape::of(n);
    let mut line = Vec::with_capacity(512);
    writeln!(
        w,
        r#"{{"kind":"header","format":"mooncdc.jsonl.v1","start":{{"source":"{source}","sequence":"0"}},"high_water":"{n}","schemas":[{{"table":"{TABLE}","columns":[{{"name":"id","type":"INTEGER","nullable":false}},{{"name":"a","type":"TEXT","nullable":true}},{{"name":"b","type":"REAL","nullable":true}},{{"name":"c","type":"INTEGER","nullable":true}}],"key":["id"]}}]}}"#
    )?;
    let mut seq = 0u64;
    let mut event = |w: &mut dyn Write, op: &str, images: &dyn Fn(&mut Vec<u8>)| {
        seq += 1;
        line.clear();
        write!(
            line,
            r#"{{"kind":"event","event":{{"sequence":"{seq}","table":"{TABLE}","operation":"{op}","#
        )
        .expect("write to memory");
        images(&mut line);
        line.extend_from_slice(b"}}\n");
        w.write_all(&line)
    };
    for k in 1..=s.inserts {
        event(w, "insert", &|l| {
            l.extend_from_slice(br#""after":"#);
            row(l, k, 0);
        })?;
    }
    for k in 1..=s.updates {
        event(w, "update", &|l| {
            l.extend_from_slice(br#""before":"#);
            row(l, k, 0);
            l.extend_from_slice(br#","after":"#);
            row(l, k, 1);
        })?;
    }
    for i in 0..s.deletes {
        let k = s.inserts - i;
        event(w, "delete", &|l| {
            l.extend_from_slice(br#""before":"#);
            row(l, k, 0);
        })?;
    }
    writeln!(
        w,
        r#"{{"kind":"commit","end":{{"source":"{source}","sequence":"{n}"}},"count":"{n}"}}"#
    )
}

/// Run `program` with `args` under GNU time, its standard input the batch
/// of `n` changes ([`write_batch`]) written as it reads: its exit, output,
/// and peak RSS in KiB.
pub fn run_on_batch(program: &Path, args: &[&str], source: &str, n: u64) -> (Run, u64) {
    assert!(
        Path::new(GNU_TIME).exists(),
        "{GNU_TIME} is missing (Debian's `time` package; scripts/test.sh installs it)"
    );
    let dir = tempfile::tempdir().expect("temporary folder");
    let report = dir.path().join("rss");
    let mut child = Command::new(GNU_TIME)
        .args(["-f", "%M", "-o"])
        .arg(&report)
        .arg(program)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {GNU_TIME}: {e}"));
    let mut stdin = std::io::BufWriter::with_capacity(1 << 20, child.stdin.take().expect("piped"));
    let source = source.to_string();
    let writer = std::thread::spawn(move || {
        // A tool that stops reading (it failed) ends the writing: its
        // error is what the test reports.
        let _ = write_batch(&mut stdin, &source, n).and_then(|()| stdin.flush());
    });
    let out = child.wait_with_output().expect("wait for the tool");
    writer.join().expect("the batch writer");
    let text = std::fs::read_to_string(&report).expect("GNU time's report");
    // The last line: GNU time puts "Command exited with non-zero status"
    // before it.
    let kib = text
        .lines()
        .last()
        .and_then(|l| l.trim().parse().ok())
        .unwrap_or_else(|| panic!("no peak RSS in GNU time's report {text:?}"));
    (
        Run {
            code: out.status.code(),
            stdout: out.stdout,
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        },
        kib,
    )
}

/// Apply a batch of `n` changes with `mooncdc-apply --target url -q`
/// (and `extra`), which must succeed: its peak RSS in MiB, and the wall
/// time it took.
#[track_caller]
pub fn apply_peak_mib(url: &str, extra: &[&str], source: &str, n: u64) -> (f64, f64) {
    let mut args = vec!["--target", url, "-q"];
    args.extend_from_slice(extra);
    let t0 = std::time::Instant::now();
    let (r, kib) = run_on_batch(&super::sqlite::bin(super::sqlite::APPLY), &args, source, n);
    let secs = t0.elapsed().as_secs_f64();
    super::sqlite::expect(&r, 0, &format!("apply of a batch of {n} changes"));
    let mib = kib as f64 / 1024.0;
    // The scheme only: a server's URL carries its password.
    let scheme = url.split(':').next().unwrap_or_default();
    eprintln!("{n} changes into {scheme}: peak RSS {mib:.1} MiB, {secs:.1} s");
    (mib, secs)
}

/// The check every target's memory test makes: the peak of the large
/// batch is within `bound` MiB (the documented figure) and within
/// `slack` MiB of the small batch's, though the batch is `ratio` times
/// larger: what apply holds does not grow with the batch.
#[track_caller]
pub fn assert_bounded(target: &str, small: f64, large: f64, ratio: u64, bound: f64, slack: f64) {
    assert!(
        small <= bound && large <= bound,
        "{target}: apply's peak RSS {small:.1} MiB (small batch), {large:.1} MiB ({ratio}× as large) is over the documented {bound} MiB"
    );
    assert!(
        large - small <= slack,
        "{target}: apply's peak RSS grew from {small:.1} to {large:.1} MiB for a batch {ratio}× as large (allowed: {slack} MiB): it holds something of the batch in memory"
    );
}
