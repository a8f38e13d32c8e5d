//! Helpers for the end-to-end tests over SQLite databases: a temporary folder
//! with a source and a projection, runners for the real binaries (and for the
//! `sqlite3` shell and `sqldiff`), exact dumps of tables read with rusqlite
//! (storage class, REAL bits, TEXT and BLOB bytes), a deterministic random
//! generator for values, and parsers of the tools' text output.

use super::{batches, Run};
use mooncdc::wire::{Batch, Cursor, Event, Operation, Value};
use rusqlite::types::ValueRef;
use rusqlite::Connection;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

pub const CAPTURE: &str = "mooncdc-capture";
pub const SNAPSHOT: &str = "mooncdc-snapshot";
pub const APPLY: &str = "mooncdc-apply";
pub const AUDIT: &str = "mooncdc-audit";
pub const COMPACT: &str = "mooncdc-compact";
pub const SPLIT: &str = "mooncdc-split";

// ---------------------------------------------------------------- running tools

/// The path of any of the package's binaries.
pub fn bin(name: &str) -> PathBuf {
    PathBuf::from(match name {
        "mooncdc-capture" => env!("CARGO_BIN_EXE_mooncdc-capture"),
        "mooncdc-snapshot" => env!("CARGO_BIN_EXE_mooncdc-snapshot"),
        "mooncdc-apply" => env!("CARGO_BIN_EXE_mooncdc-apply"),
        "mooncdc-audit" => env!("CARGO_BIN_EXE_mooncdc-audit"),
        "mooncdc-compact" => env!("CARGO_BIN_EXE_mooncdc-compact"),
        "mooncdc-split" => env!("CARGO_BIN_EXE_mooncdc-split"),
        "mooncdc-merge" => env!("CARGO_BIN_EXE_mooncdc-merge"),
        other => panic!("unknown tool {other}"),
    })
}

/// Run a program with arguments and bytes on standard input (empty when `None`).
pub fn exec_program(program: &Path, args: &[&str], stdin: Option<&[u8]>) -> Run {
    let mut cmd = assert_cmd::Command::new(program);
    cmd.args(args);
    cmd.write_stdin(stdin.unwrap_or(b"").to_vec());
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", program.display()));
    Run {
        code: out.status.code(),
        stdout: out.stdout,
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// Run one of the package's tools.
pub fn exec(name: &str, args: &[&str], stdin: Option<&[u8]>) -> Run {
    exec_program(&bin(name), args, stdin)
}

/// Run a shell pipeline with `set -o pipefail`; `{capture}` and the like in
/// `script` are replaced by the binaries' quoted paths.
pub fn pipeline(script: &str) -> Run {
    let mut s = script.to_string();
    for (k, name) in [
        ("{capture}", CAPTURE),
        ("{snapshot}", SNAPSHOT),
        ("{apply}", APPLY),
        ("{audit}", AUDIT),
        ("{compact}", COMPACT),
        ("{split}", SPLIT),
        ("{merge}", "mooncdc-merge"),
    ] {
        s = s.replace(k, &shell_quote(&bin(name).display().to_string()));
    }
    exec_program(
        Path::new("bash"),
        &["-c", &format!("set -euo pipefail; {s}")],
        None,
    )
}

/// Quote a word for bash.
pub fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// Panic with the run's output unless it exited with `code`.
#[track_caller]
pub fn expect(r: &Run, code: i32, what: &str) {
    if r.code != Some(code) {
        panic!(
            "{what}: expected exit status {code}, got {:?}\n--- stderr ---\n{}\n--- stdout ---\n{}",
            r.code,
            r.stderr,
            String::from_utf8_lossy(&r.stdout)
        );
    }
}

// ---------------------------------------------------------------- a source and a projection

/// A temporary folder holding `src.db` (the source) and `proj.db` (the projection).
pub struct Dbs {
    pub dir: tempfile::TempDir,
    pub src: PathBuf,
    pub proj: PathBuf,
}

impl Default for Dbs {
    fn default() -> Self {
        Self::new()
    }
}

impl Dbs {
    /// A new folder with an empty source database in WAL mode (no projection yet).
    pub fn new() -> Dbs {
        let dir = tempfile::tempdir().expect("temporary folder");
        let src = dir.path().join("src.db");
        let proj = dir.path().join("proj.db");
        let c = Connection::open(&src).expect("create source");
        c.query_row("PRAGMA journal_mode = WAL", [], |_| Ok(()))
            .expect("WAL mode");
        Dbs { dir, src, proj }
    }

    /// A path in the folder.
    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// A path in the folder, as a string.
    pub fn path_str(&self, name: &str) -> String {
        self.path(name).to_str().expect("UTF-8 path").to_string()
    }

    pub fn src_url(&self) -> String {
        format!("sqlite:{}", self.src.display())
    }

    pub fn proj_url(&self) -> String {
        format!("sqlite:{}", self.proj.display())
    }

    /// A connection to the source (waits for locks).
    pub fn src_conn(&self) -> Connection {
        open(&self.src)
    }

    /// A connection to the projection (waits for locks).
    pub fn proj_conn(&self) -> Connection {
        open(&self.proj)
    }

    /// Run SQL on the source.
    #[track_caller]
    pub fn src_sql(&self, sql: &str) {
        self.src_conn()
            .execute_batch(sql)
            .unwrap_or_else(|e| panic!("source SQL failed: {e}\n{sql}"));
    }

    /// Run SQL on the projection.
    #[track_caller]
    pub fn proj_sql(&self, sql: &str) {
        self.proj_conn()
            .execute_batch(sql)
            .unwrap_or_else(|e| panic!("projection SQL failed: {e}\n{sql}"));
    }

    /// `mooncdc-capture init` (every table when `tables` is empty); returns the identity.
    #[track_caller]
    pub fn init(&self, tables: &[&str]) -> String {
        let url = self.src_url();
        let mut args = vec!["init", "--source", &url];
        for t in tables {
            args.push("--table");
            args.push(t);
        }
        let r = exec(CAPTURE, &args, None);
        expect(&r, 0, "capture init");
        let id = r.stdout_str().trim().to_string();
        assert!(
            id.starts_with("sqlite:"),
            "init should print the identity sqlite:<uuid>, got {id:?}"
        );
        id
    }

    /// `mooncdc-capture` (read) with extra arguments.
    pub fn capture(&self, extra: &[&str]) -> Run {
        let url = self.src_url();
        let mut args = vec!["--source", &url];
        args.extend_from_slice(extra);
        exec(CAPTURE, &args, None)
    }

    /// A capture read that must succeed, parsed into batches.
    #[track_caller]
    pub fn capture_ok(&self, extra: &[&str]) -> (Vec<u8>, Vec<Batch>) {
        let r = self.capture(extra);
        expect(&r, 0, "capture read");
        let b = batches(&r.stdout);
        (r.stdout, b)
    }

    /// A capture subcommand (`verify`, `upgrade`, `status`, `ack` …) on the source.
    pub fn capture_cmd(&self, sub: &str, extra: &[&str]) -> Run {
        let url = self.src_url();
        let mut args = vec![sub, "--source", &url];
        args.extend_from_slice(extra);
        exec(CAPTURE, &args, None)
    }

    /// `mooncdc-capture status`, parsed.
    #[track_caller]
    pub fn status(&self) -> Status {
        let r = self.capture_cmd("status", &[]);
        expect(&r, 0, "capture status");
        Status::parse(&r.stdout_str())
    }

    /// `mooncdc-apply --target proj` with input on standard input.
    pub fn apply(&self, input: &[u8], extra: &[&str]) -> Run {
        let url = self.proj_url();
        let mut args = vec!["--target", &url];
        args.extend_from_slice(extra);
        exec(APPLY, &args, Some(input))
    }

    /// An apply that must succeed; returns its summary.
    #[track_caller]
    pub fn apply_ok(&self, input: &[u8]) -> Summary {
        let r = self.apply(input, &[]);
        expect(&r, 0, "apply");
        Summary::parse(&r.stderr)
    }

    /// Snapshot the source into the projection; both must succeed.
    #[track_caller]
    pub fn snapshot_apply(&self) -> Summary {
        let snap = exec(SNAPSHOT, &["--source", &self.src_url()], None);
        expect(&snap, 0, "snapshot");
        self.apply_ok(&snap.stdout)
    }

    /// `mooncdc-audit --source src --target proj` with extra arguments.
    pub fn audit(&self, extra: &[&str]) -> Run {
        let (s, t) = (self.src_url(), self.proj_url());
        let mut args = vec!["--source", &s, "--target", &t];
        args.extend_from_slice(extra);
        exec(AUDIT, &args, None)
    }

    /// An audit that must say equal (exit 0).
    #[track_caller]
    pub fn audit_equal(&self) {
        let r = self.audit(&[]);
        expect(&r, 0, "audit should say equal");
        assert!(
            r.stdout_str().trim_end().ends_with("equal"),
            "audit text should end with the verdict \"equal\":\n{}",
            r.stdout_str()
        );
    }

    /// The projection's stored cursor, through `mooncdc-apply cursor`.
    pub fn target_cursor(&self) -> Option<Cursor> {
        let url = self.proj_url();
        let r = exec(APPLY, &["cursor", "--target", &url], None);
        match r.code {
            Some(0) => Some(
                Cursor::parse_json(r.stdout_str().trim())
                    .unwrap_or_else(|e| panic!("apply cursor printed bad JSON: {e}")),
            ),
            Some(1) => None,
            other => panic!("apply cursor exited {other:?}: {}", r.stderr),
        }
    }

    /// Capture everything after the projection's cursor (or the acknowledged
    /// position) and apply it; returns the capture's bytes and the apply summary.
    #[track_caller]
    pub fn catch_up(&self) -> (Vec<u8>, Summary) {
        let after = self.target_cursor().map(|c| c.to_json());
        let (bytes, _) = match &after {
            Some(a) => self.capture_ok(&["--after", a]),
            None => self.capture_ok(&[]),
        };
        let s = self.apply_ok(&bytes);
        (bytes, s)
    }

    /// Run SQL through the `sqlite3` shell on the source.
    pub fn sqlite3(&self, sql: &str) -> Run {
        sqlite3(&self.src, sql)
    }

    /// `sqldiff --table T src proj` must report nothing.
    #[track_caller]
    pub fn sqldiff_clean(&self, tables: &[&str]) {
        for t in tables {
            let diff = sqldiff(&self.src, &self.proj, t);
            assert!(
                diff.trim().is_empty(),
                "sqldiff reports differences in table {t:?} between source and projection:\n{diff}"
            );
        }
    }

    /// Both databases hold the same rows, bit for bit, in these tables (the
    /// source's REAL -0 is +0 in the projection).
    #[track_caller]
    pub fn assert_same_rows(&self, tables: &[&str]) {
        let (s, p) = (self.src_conn(), self.proj_conn());
        for t in tables {
            let expected: Vec<Vec<Cell>> = dump(&s, t)
                .into_iter()
                .map(|r| r.into_iter().map(Cell::normalized).collect())
                .collect();
            let got = dump(&p, t);
            assert_rows_eq(t, &expected, &got);
        }
    }
}

/// Open a database with a generous busy timeout.
pub fn open(path: &Path) -> Connection {
    let c =
        Connection::open(path).unwrap_or_else(|e| panic!("cannot open {}: {e}", path.display()));
    c.busy_timeout(std::time::Duration::from_secs(30))
        .expect("busy timeout");
    c
}

/// Run SQL through the `sqlite3` shell (input on standard input).
pub fn sqlite3(db: &Path, sql: &str) -> Run {
    exec_program(
        Path::new("sqlite3"),
        &[db.to_str().expect("UTF-8 path")],
        Some(sql.as_bytes()),
    )
}

/// `sqldiff --table TABLE a b`: the SQL that would turn `a`'s table into `b`'s.
pub fn sqldiff(a: &Path, b: &Path, table: &str) -> String {
    let r = exec_program(
        Path::new("sqldiff"),
        &[
            "--table",
            table,
            a.to_str().expect("UTF-8 path"),
            b.to_str().expect("UTF-8 path"),
        ],
        None,
    );
    expect(&r, 0, "sqldiff");
    r.stdout_str()
}

// ---------------------------------------------------------------- parsed outputs

/// `mooncdc-capture status`, parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Status {
    pub identity: String,
    pub acknowledged: u128,
    pub high_water: u128,
    pub backlog: u64,
    pub tables: String,
}

impl Status {
    pub fn parse(text: &str) -> Status {
        let field = |name: &str| -> String {
            text.lines()
                .find_map(|l| l.strip_prefix(&format!("{name}: ")))
                .unwrap_or_else(|| panic!("status has no {name:?} line:\n{text}"))
                .trim()
                .to_string()
        };
        let num = |name: &str| -> u128 {
            let v = field(name);
            v.split_whitespace()
                .next()
                .and_then(|n| n.parse().ok())
                .unwrap_or_else(|| panic!("status {name:?} is not a number: {v:?}\n{text}"))
        };
        Status {
            identity: field("identity"),
            acknowledged: num("acknowledged"),
            high_water: num("high water"),
            backlog: num("backlog") as u64,
            tables: field("tables"),
        }
    }
}

/// The summary line `mooncdc-apply` prints on standard error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Summary {
    pub batches: u64,
    pub applied: u64,
    pub skipped: u64,
    pub cursor: Option<Cursor>,
}

impl Summary {
    pub fn parse(stderr: &str) -> Summary {
        let line = stderr
            .lines()
            .rev()
            .find(|l| l.contains(" applied, ") && l.contains(" skipped as already held"))
            .unwrap_or_else(|| panic!("apply printed no summary line:\n{stderr}"));
        // The number before the first of `words` found (singular or plural).
        let num_before = |words: &[&str]| -> Option<u64> {
            let i = words.iter().find_map(|w| line.find(w))?;
            line[..i]
                .trim_end()
                .rsplit(|c: char| !c.is_ascii_digit())
                .next()
                .and_then(|n| n.parse().ok())
        };
        let need = |words: &[&str]| {
            num_before(words).unwrap_or_else(|| panic!("summary lacks {words:?}: {line}"))
        };
        let cursor_text = line
            .split_once(", cursor ")
            .map(|(_, c)| c.trim())
            .unwrap_or_else(|| panic!("summary lacks the cursor: {line}"));
        assert!(
            line.contains(" s, cursor "),
            "the summary says how long it took: {line}"
        );
        Summary {
            // A snapshot counts as a batch here ("1 snapshot (N rows loaded)").
            batches: need(&[" batches,", " batch,"])
                + num_before(&[" snapshots (", " snapshot ("]).unwrap_or(0),
            // A snapshot's rows count as applied here ("N rows loaded").
            applied: need(&[" events applied", " event applied"])
                + num_before(&[" rows loaded", " row loaded"]).unwrap_or(0),
            skipped: need(&[" skipped"]),
            cursor: if cursor_text == "none" {
                None
            } else {
                Some(Cursor::parse_json(cursor_text).expect("summary cursor JSON"))
            },
        }
    }
}

pub fn events(batches: &[Batch]) -> Vec<Event> {
    batches.iter().flat_map(|b| b.events.clone()).collect()
}

/// A short description of an event for messages and comparisons:
/// `(table, operation, before, after)` in wire form.
pub fn describe(e: &Event) -> String {
    let row = |r: &Option<Vec<Value>>| match r {
        None => "-".to_string(),
        Some(r) => {
            let mut b = Vec::new();
            mooncdc::wire::value::write_row(&mut b, r);
            String::from_utf8(b).expect("UTF-8")
        }
    };
    format!(
        "{} {} {} {}",
        e.table,
        e.operation.as_str(),
        row(&e.before),
        row(&e.after)
    )
}

/// Check that the events (ignoring sequences) are exactly `expected`
/// (each `describe`d); print both on failure.
#[track_caller]
pub fn assert_events(expected: &[String], got: &[Event]) {
    let got: Vec<String> = got.iter().map(describe).collect();
    if expected != got.as_slice() {
        panic!(
            "events differ\n=== expected ===\n{}\n=== got ===\n{}",
            expected.join("\n"),
            got.join("\n")
        );
    }
}

/// Check that batches are contiguous and of one source.
#[track_caller]
pub fn assert_contiguous(batches: &[Batch]) {
    for w in batches.windows(2) {
        assert_eq!(
            w[0].end, w[1].start,
            "batch stream is not contiguous: one batch ends at {} and the next starts at {}",
            w[0].end, w[1].start
        );
    }
}

/// The state a projection should hold after applying `events` (keyed by the
/// key values' wire text, rows in wire text), table by table.
pub fn model(
    events: &[Event],
    keys: &BTreeMap<String, Vec<usize>>,
) -> BTreeMap<String, BTreeMap<String, String>> {
    let text = |r: &[Value]| {
        let mut b = Vec::new();
        mooncdc::wire::value::write_row(&mut b, r);
        String::from_utf8(b).expect("UTF-8")
    };
    let mut m: BTreeMap<String, BTreeMap<String, String>> = BTreeMap::new();
    for e in events {
        let k = &keys[&e.table];
        let key_of = |r: &[Value]| text(&k.iter().map(|&i| r[i].clone()).collect::<Vec<_>>());
        let t = m.entry(e.table.clone()).or_default();
        if let Some(b) = &e.before {
            t.remove(&key_of(b));
        }
        if let Some(a) = &e.after {
            t.insert(key_of(a), text(a));
        }
    }
    m
}

// ---------------------------------------------------------------- exact table dumps

/// One stored value, exactly: storage class and bits or bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Cell {
    Null,
    Int(i64),
    /// The IEEE-754 bits.
    Real(u64),
    Text(Vec<u8>),
    Blob(Vec<u8>),
}

impl Cell {
    /// REAL zero becomes +0 (the database boundary's normalization).
    pub fn normalized(self) -> Cell {
        match self {
            Cell::Real(b) if f64::from_bits(b) == 0.0 => Cell::Real(0),
            c => c,
        }
    }
}

/// Every row of a table in key order, each column read as `typeof(c)`,
/// `hex(c)` and the value itself, cross-checked.
pub fn dump(conn: &Connection, table: &str) -> Vec<Vec<Cell>> {
    let q = |s: &str| format!("\"{}\"", s.replace('"', "\"\""));
    let cols: Vec<(String, i64)> = {
        let mut st = conn
            .prepare("SELECT name, pk FROM pragma_table_info(?1) ORDER BY cid")
            .expect("table info");
        let v = st
            .query_map([table], |r| Ok((r.get(0)?, r.get(1)?)))
            .expect("table info")
            .collect::<Result<Vec<(String, i64)>, _>>()
            .expect("table info");
        v
    };
    assert!(!cols.is_empty(), "table {table:?} does not exist");
    let mut keys: Vec<&(String, i64)> = cols.iter().filter(|c| c.1 > 0).collect();
    keys.sort_by_key(|c| c.1);
    let order: Vec<String> = keys
        .iter()
        .map(|c| format!("{} COLLATE BINARY", q(&c.0)))
        .collect();
    let select: Vec<String> = cols
        .iter()
        .map(|(c, _)| format!("typeof({0}), hex({0}), {0}", q(c)))
        .collect();
    let sql = format!(
        "SELECT {} FROM {} ORDER BY {}",
        select.join(", "),
        q(table),
        if order.is_empty() {
            "rowid".to_string()
        } else {
            order.join(", ")
        }
    );
    let mut st = conn.prepare(&sql).expect("select rows");
    let mut rows = st.query([]).expect("select rows");
    let mut out = Vec::new();
    while let Some(r) = rows.next().expect("read row") {
        let mut row = Vec::new();
        for i in 0..cols.len() {
            let ty: String = r.get(3 * i).expect("typeof");
            let hx: String = r.get(3 * i + 1).expect("hex");
            let v = r.get_ref(3 * i + 2).expect("value");
            let cell = match (ty.as_str(), v) {
                ("null", ValueRef::Null) => Cell::Null,
                ("integer", ValueRef::Integer(n)) => Cell::Int(n),
                ("real", ValueRef::Real(x)) => Cell::Real(x.to_bits()),
                ("text", ValueRef::Text(b)) => {
                    assert_eq!(hex::decode(&hx).expect("hex"), b, "hex() of TEXT");
                    Cell::Text(b.to_vec())
                }
                ("blob", ValueRef::Blob(b)) => {
                    assert_eq!(hex::decode(&hx).expect("hex"), b, "hex() of BLOB");
                    Cell::Blob(b.to_vec())
                }
                (t, v) => panic!("typeof() says {t} but the value is {v:?}"),
            };
            row.push(cell);
        }
        out.push(row);
    }
    out
}

/// Compare two dumps; print the first differences on failure.
#[track_caller]
pub fn assert_rows_eq(table: &str, expected: &[Vec<Cell>], got: &[Vec<Cell>]) {
    if expected == got {
        return;
    }
    let mut msg = format!(
        "table {table:?}: projection differs from source ({} rows expected, {} got)\n",
        expected.len(),
        got.len()
    );
    let n = expected.len().max(got.len());
    let mut shown = 0;
    for i in 0..n {
        let (e, g) = (expected.get(i), got.get(i));
        if e != g {
            msg.push_str(&format!("row {i}:\n  expected {e:?}\n  got      {g:?}\n"));
            shown += 1;
            if shown == 10 {
                break;
            }
        }
    }
    panic!("{msg}");
}

// ---------------------------------------------------------------- random values

/// xorshift64*: deterministic values for tests.
pub struct Rng(pub u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed | 1)
    }

    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    /// A finite REAL from random bits (every exponent, both signs, subnormals).
    pub fn real(&mut self) -> f64 {
        loop {
            let x = f64::from_bits(self.next());
            if x.is_finite() {
                return x;
            }
        }
    }

    /// Text with the awkward parts: BOM first, NUL, astral characters, quotes.
    pub fn text(&mut self) -> String {
        const PARTS: &[&str] = &[
            "ann",
            "Björk",
            "李",
            "😀",
            "\u{0}",
            "O'Brien",
            "\"q\"",
            "\\",
            " ",
            "é",
            "\u{10FFFF}",
            "\t",
            "\n",
            "\u{FEFF}",
        ];
        let mut s = String::new();
        if self.below(4) == 0 {
            s.push('\u{FEFF}');
        }
        for _ in 0..self.below(5) {
            s.push_str(PARTS[self.below(PARTS.len() as u64) as usize]);
        }
        s
    }

    pub fn blob(&mut self) -> Vec<u8> {
        (0..self.below(16)).map(|_| self.next() as u8).collect()
    }

    /// A value of any class.
    pub fn any(&mut self) -> rusqlite::types::Value {
        use rusqlite::types::Value as V;
        match self.below(5) {
            0 => V::Null,
            1 => V::Integer(self.next() as i64),
            2 => V::Real(self.real()),
            3 => V::Text(self.text()),
            _ => V::Blob(self.blob()),
        }
    }
}

/// A seed from `MOONCDC_TEST_SEED`, or from the clock; printed so a failure can be replayed.
pub fn seed(test: &str) -> u64 {
    let s = std::env::var("MOONCDC_TEST_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .expect("clock")
                .as_nanos() as u64
        });
    eprintln!("{test}: seed {s} (set MOONCDC_TEST_SEED={s} to replay)");
    s
}

/// Wait until `cond` holds, polling; panic with `what` after `secs` seconds.
#[track_caller]
pub fn wait_for(secs: u64, what: &str, cond: impl FnMut() -> bool) {
    wait_for_every(secs, 20, what, cond)
}

/// [`wait_for`], asking `cond` every `poll_ms` milliseconds (for a costly
/// question, such as running a tool).
#[track_caller]
pub fn wait_for_every(secs: u64, poll_ms: u64, what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(secs);
    while !cond() {
        if std::time::Instant::now() > deadline {
            panic!("timed out after {secs} s waiting for {what}");
        }
        std::thread::sleep(std::time::Duration::from_millis(poll_ms));
    }
}

// ---------------------------------------------------------------- expected events

pub fn vi(n: i64) -> Value {
    Value::Integer(n)
}

pub fn vr(x: f64) -> Value {
    Value::Real(x)
}

pub fn vt(s: &str) -> Value {
    Value::Text(s.to_string())
}

pub fn vb(b: &[u8]) -> Value {
    Value::Blob(b.to_vec())
}

pub const VN: Value = Value::Null;

fn expected_event(
    table: &str,
    operation: Operation,
    before: Option<Vec<Value>>,
    after: Option<Vec<Value>>,
) -> String {
    describe(&Event {
        sequence: 1,
        table: table.to_string(),
        operation,
        before,
        before_key: None,
        after,
    })
}

/// An expected insert, in the form [`describe`] gives.
pub fn e_ins(table: &str, after: Vec<Value>) -> String {
    expected_event(table, Operation::Insert, None, Some(after))
}

/// An expected update, in the form [`describe`] gives.
pub fn e_upd(table: &str, before: Vec<Value>, after: Vec<Value>) -> String {
    expected_event(table, Operation::Update, Some(before), Some(after))
}

/// An expected delete, in the form [`describe`] gives.
pub fn e_del(table: &str, before: Vec<Value>) -> String {
    expected_event(table, Operation::Delete, Some(before), None)
}

/// A row in wire text.
pub fn row_text(r: &[Value]) -> String {
    let mut b = Vec::new();
    mooncdc::wire::value::write_row(&mut b, r);
    String::from_utf8(b).expect("UTF-8")
}

/// A table's rows read through the library's value conversion, keyed by the
/// key columns' wire text (for comparison with [`model`]).
pub fn rows_by_key(conn: &Connection, table: &str, key: &[usize]) -> BTreeMap<String, String> {
    let sql = format!("SELECT * FROM \"{}\"", table.replace('"', "\"\""));
    let mut st = conn.prepare(&sql).expect("select");
    let n = st.column_count();
    let mut rows = st.query([]).expect("select");
    let mut out = BTreeMap::new();
    while let Some(r) = rows.next().expect("row") {
        let row = mooncdc::sqlite_util::row_values(r, 0, n).expect("stored values");
        let k: Vec<Value> = key.iter().map(|&i| row[i].clone()).collect();
        out.insert(row_text(&k), row_text(&row));
    }
    out
}

/// Follow the source into `target` (`capture --follow | apply`, from the
/// target's cursor) until every backfill of the source is done and the
/// target holds the high water, at most `secs` seconds; both tools are then
/// stopped. Either one stopping early fails, with its messages.
#[track_caller]
pub fn follow_until_backfilled(db: &Dbs, target: &str, secs: u64) {
    use std::process::{Command, Stdio};
    let url = db.src_url();
    let after = exec(APPLY, &["cursor", "--target", target], None);
    let mut args = vec!["--source", &url, "--follow", "--poll-ms", "50"];
    let held = after.stdout_str().trim().to_string();
    if after.code == Some(0) {
        args.extend(["--after", &held]);
    }
    let err = db.path("follow.err");
    let log = || {
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&err)
            .unwrap()
    };
    let mut capture = Command::new(bin(CAPTURE))
        .args(&args)
        .stdout(Stdio::piped())
        .stderr(Stdio::from(log()))
        .spawn()
        .unwrap();
    let mut apply = Command::new(bin(APPLY))
        .args(["--target", target, "-q"])
        .stdin(Stdio::from(capture.stdout.take().unwrap()))
        .stderr(Stdio::from(log()))
        .spawn()
        .unwrap();
    let t0 = std::time::Instant::now();
    loop {
        for c in [&mut capture, &mut apply] {
            if let Some(st) = c.try_wait().unwrap() {
                panic!(
                    "the follower stopped ({st}): {}",
                    std::fs::read_to_string(&err).unwrap_or_default()
                );
            }
        }
        let st = db.capture_cmd("status", &["--output-format", "json"]);
        let st: serde_json::Value = serde_json::from_slice(&st.stdout).unwrap();
        let done = st["backfills"]
            .as_array()
            .unwrap()
            .iter()
            .all(|r| r["state"] == "done");
        let hw = st["high_water"].as_u64().unwrap().to_string();
        let at = exec(APPLY, &["cursor", "--target", target], None);
        let at: serde_json::Value = serde_json::from_slice(&at.stdout).unwrap_or_default();
        if done && at["sequence"] == serde_json::Value::String(hw) {
            break;
        }
        assert!(
            t0.elapsed() < std::time::Duration::from_secs(secs),
            "not backfilled after {secs} s: {st}\n{}",
            std::fs::read_to_string(&err).unwrap_or_default()
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    for c in [&mut capture, &mut apply] {
        let _ = c.kill();
        let _ = c.wait();
    }
}
