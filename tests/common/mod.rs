//! Shared helpers for the tool tests: batch builders that produce JSONL (or
//! JSON) text, runners for the real binaries, and parsers that turn a tool's
//! output back into `mooncdc::wire::Batch` values so tests compare structures
//! and print expected against got on failure.

#![allow(dead_code)]

pub mod ch;
pub mod cluster;
pub mod memory;
pub mod pg;
pub mod sqlite;

use assert_cmd::Command;
use mooncdc::wire::{Batch, BatchStreamReader, Item, Limits};
use serde_json::{json, Value as J};
use std::path::{Path, PathBuf};

/// A server a suite needs (`what`, found when `found`; `how`: where the
/// harness looks for it). Missing under `MOONCDC_REQUIRE_SERVERS=1`, which
/// `scripts/test.sh` sets after installing every server, the test fails
/// with the reason. Missing otherwise (a plain `cargo test` on a machine
/// without the servers), the whole suite is reported skipped, with the
/// reason, and its test program ends with success at once: the suites that
/// need no server still run and pass. The line is written to the process's
/// own standard error, past the test harness's capture of test output.
pub fn need_server(what: &str, found: bool, how: &str) {
    if found {
        return;
    }
    let required = std::env::var("MOONCDC_REQUIRE_SERVERS").is_ok_and(|v| v == "1");
    if required {
        panic!(
            "{what} is missing ({how}); MOONCDC_REQUIRE_SERVERS=1 makes a missing server a failure"
        );
    }
    let suite = std::env::args()
        .next()
        .and_then(|a| {
            Path::new(&a)
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
        })
        .map(|n| {
            n.rsplit_once('-')
                .map_or(n.clone(), |(name, _)| name.to_string())
        })
        .unwrap_or_default();
    use std::io::Write;
    let _ = writeln!(
        std::io::stderr(),
        "SKIPPED the {suite} suite: {what} is missing ({how}); bash scripts/test.sh installs every server and runs every suite"
    );
    std::process::exit(0);
}

/// The default source identity used by the builders.
pub const SRC: &str = "sqlite:test";

// ---------------------------------------------------------------- values, rows

pub fn int(n: i64) -> J {
    json!(["integer", n.to_string()])
}

pub fn vnull() -> J {
    json!(["null"])
}

pub fn text(s: &str) -> J {
    json!(["text", s])
}

/// A row of table `t`: `[id INTEGER, v TEXT]`.
pub fn row(id: i64, v: &str) -> J {
    json!([int(id), text(v)])
}

pub fn cursor(source: &str, seq: u128) -> J {
    json!({"source": source, "sequence": seq.to_string()})
}

// ---------------------------------------------------------------- schemas

/// A schema with columns given as (name, type, nullable) and its key.
pub fn schema(table: &str, columns: &[(&str, &str, bool)], key: &[&str]) -> J {
    let cols: Vec<J> = columns
        .iter()
        .map(|(n, t, nullable)| json!({"name": n, "type": t, "nullable": nullable}))
        .collect();
    json!({"table": table, "columns": cols, "key": key})
}

/// The schema of a two-column table `[id INTEGER key, v TEXT]`.
pub fn kv_schema(table: &str) -> J {
    schema(
        table,
        &[("id", "INTEGER", false), ("v", "TEXT", true)],
        &["id"],
    )
}

// ---------------------------------------------------------------- events

pub fn ins(seq: u128, table: &str, after: J) -> J {
    json!({"sequence": seq.to_string(), "table": table, "operation": "insert", "after": after})
}

pub fn upd(seq: u128, table: &str, before: J, after: J) -> J {
    json!({"sequence": seq.to_string(), "table": table, "operation": "update", "before": before, "after": after})
}

pub fn del(seq: u128, table: &str, before: J) -> J {
    json!({"sequence": seq.to_string(), "table": table, "operation": "delete", "before": before})
}

/// A schema record (for [`Spec::events`]): `schema` from here on, with
/// `renamed` as (old name, new name).
pub fn schema_rec(schema: J, renamed: &[(&str, &str)]) -> J {
    let mut r = json!({"kind": "schema", "schema": schema});
    if !renamed.is_empty() {
        r["renamed"] = renamed
            .iter()
            .map(|(f, t)| json!({"from": f, "to": t}))
            .collect();
    }
    r
}

/// A message record (for [`Spec::events`]): a logical message.
pub fn msg_rec(seq: u128, prefix: &str, content: J, transactional: bool) -> J {
    json!({"kind": "message", "message": {"sequence": seq.to_string(), "prefix": prefix, "content": content, "transactional": transactional}})
}

/// A record that is not an event (made by [`schema_rec`] or [`msg_rec`]).
fn is_schema_rec(e: &J) -> bool {
    matches!(
        e.get("kind").and_then(J::as_str),
        Some("schema") | Some("message")
    )
}

/// A truncate of `table` (neither CASCADE nor RESTART IDENTITY).
pub fn trunc(seq: u128, table: &str) -> J {
    json!({"sequence": seq.to_string(), "table": table, "operation": "truncate", "cascade": false, "restart_identity": false})
}

// ---------------------------------------------------------------- batches

/// A batch to be written as text.
#[derive(Debug, Clone)]
pub struct Spec {
    pub source: String,
    pub start: u128,
    pub end: u128,
    pub high_water: u128,
    pub schemas: Option<Vec<J>>,
    /// Whether the header says `"compacted":true`.
    pub compacted: bool,
    pub events: Vec<J>,
}

impl Spec {
    /// A batch of source [`SRC`] from `start` to `end`, high water = `end`, no schemas.
    pub fn new(start: u128, end: u128) -> Spec {
        Spec {
            source: SRC.to_string(),
            start,
            end,
            high_water: end,
            schemas: None,
            compacted: false,
            events: Vec::new(),
        }
    }

    /// Mark the batch as compacted (`mooncdc-compact` folded events of it).
    pub fn compacted(mut self, c: bool) -> Spec {
        self.compacted = c;
        self
    }

    pub fn source(mut self, s: &str) -> Spec {
        self.source = s.to_string();
        self
    }

    pub fn high_water(mut self, hw: u128) -> Spec {
        self.high_water = hw;
        self
    }

    pub fn schemas(mut self, s: Vec<J>) -> Spec {
        self.schemas = Some(s);
        self
    }

    pub fn events(mut self, e: Vec<J>) -> Spec {
        self.events = e;
        self
    }

    pub fn event(mut self, e: J) -> Spec {
        self.events.push(e);
        self
    }

    pub fn header_line(&self) -> String {
        let mut h = json!({
            "kind": "header",
            "format": "mooncdc.jsonl.v1",
            "start": cursor(&self.source, self.start),
            "high_water": self.high_water.to_string(),
        });
        if let Some(s) = &self.schemas {
            h["schemas"] = J::Array(s.clone());
        }
        if self.compacted {
            h["compacted"] = J::Bool(true);
        }
        format!("{h}\n")
    }

    /// Event lines; an element made by [`schema_rec`] is written as the
    /// schema record it is.
    pub fn event_lines(&self) -> String {
        self.events
            .iter()
            .map(|e| {
                if is_schema_rec(e) {
                    format!("{e}\n")
                } else {
                    format!("{}\n", json!({"kind": "event", "event": e}))
                }
            })
            .collect()
    }

    pub fn commit_line(&self) -> String {
        let n = self.events.iter().filter(|e| !is_schema_rec(e)).count();
        format!(
            "{}\n",
            json!({"kind": "commit", "end": cursor(&self.source, self.end), "count": n.to_string()})
        )
    }

    /// The batch as JSONL text.
    pub fn jsonl(&self) -> String {
        format!(
            "{}{}{}",
            self.header_line(),
            self.event_lines(),
            self.commit_line()
        )
    }

    /// The batch as one JSON document (`mooncdc.batch.v1`).
    pub fn json(&self) -> String {
        let mut d = json!({
            "format": "mooncdc.batch.v1",
            "start": cursor(&self.source, self.start),
            "end": cursor(&self.source, self.end),
            "high_water": self.high_water.to_string(),
            "events": self.events,
        });
        if let Some(s) = &self.schemas {
            d["schemas"] = J::Array(s.clone());
        }
        if self.compacted {
            d["compacted"] = J::Bool(true);
        }
        format!("{d}\n")
    }

    /// The batch in the tools' canonical JSONL encoding (the builders' text
    /// orders members differently, which readers must accept).
    pub fn canonical(&self) -> String {
        String::from_utf8(self.batch().to_jsonl()).expect("UTF-8")
    }

    /// The batch decoded by the library (panics if the spec is not a valid batch).
    pub fn batch(&self) -> Batch {
        Batch::from_jsonl(&self.jsonl())
            .unwrap_or_else(|e| panic!("test spec is not a valid batch: {e}\n{}", self.jsonl()))
    }
}

/// Several batches as one JSONL batch stream.
pub fn stream(specs: &[Spec]) -> String {
    specs.iter().map(Spec::jsonl).collect()
}

/// A JSONL snapshot with the given schemas and no rows.
pub fn snapshot_jsonl(schemas: &[J], cursor_seq: u128) -> String {
    format!(
        "{}\n{}\n",
        json!({"kind": "header", "format": "mooncdc.snapshot-jsonl.v1", "cursor": cursor(SRC, cursor_seq), "schemas": schemas}),
        json!({"kind": "commit", "count": "0"})
    )
}

/// A JSON snapshot with the given schemas and no rows.
pub fn snapshot_json(schemas: &[J], cursor_seq: u128) -> String {
    let tables: Vec<J> = schemas
        .iter()
        .map(|s| json!({"schema": s, "rows": []}))
        .collect();
    format!(
        "{}\n",
        json!({"format": "mooncdc.snapshot.v1", "cursor": cursor(SRC, cursor_seq), "tables": tables})
    )
}

// ---------------------------------------------------------------- parsing output

/// Parse a JSONL batch stream (validating every rule) into batches.
pub fn parse_stream(bytes: &[u8]) -> Result<Vec<Batch>, String> {
    let mut r = BatchStreamReader::jsonl(bytes, "<output>", Limits::default());
    let mut out = Vec::new();
    let mut open: Option<Batch> = None;
    loop {
        match r.next_item() {
            Ok(None) => break,
            Ok(Some(Item::Header(h))) => {
                open = Some(Batch {
                    start: h.start.clone(),
                    end: h.start,
                    high_water: h.high_water,
                    schemas: h.schemas,
                    compacted: h.compacted,
                    events: Vec::new(),
                    changes: Vec::new(),
                    messages: Vec::new(),
                })
            }
            Ok(Some(Item::Event(e))) => open.as_mut().expect("header first").events.push(e),
            Ok(Some(Item::Schema(c))) => {
                let b = open.as_mut().expect("header first");
                b.changes.push((b.events.len(), c));
            }
            Ok(Some(Item::Message(m))) => {
                let b = open.as_mut().expect("header first");
                b.messages.push((b.changes.len(), m));
            }
            Ok(Some(Item::Commit(c))) => {
                let mut b = open.take().expect("header first");
                b.end = c.end;
                out.push(b);
            }
            Err(e) => return Err(e.to_string()),
        }
    }
    Ok(out)
}

/// Parse a JSONL batch stream that must be valid.
pub fn batches(bytes: &[u8]) -> Vec<Batch> {
    parse_stream(bytes).unwrap_or_else(|e| {
        panic!(
            "tool output is not a valid batch stream: {e}\n--- output ---\n{}",
            String::from_utf8_lossy(bytes)
        )
    })
}

/// Parse output made of JSON batch documents, one per line.
pub fn json_batches(bytes: &[u8]) -> Vec<Batch> {
    let text = std::str::from_utf8(bytes).expect("output is UTF-8");
    text.lines()
        .map(|l| {
            Batch::from_json(l)
                .unwrap_or_else(|e| panic!("output line is not a JSON batch: {e}\n{l}"))
        })
        .collect()
}

/// The raw text of each batch of a JSONL stream (header through commit).
pub fn batch_chunks(bytes: &[u8]) -> Vec<String> {
    let text = std::str::from_utf8(bytes).expect("output is UTF-8");
    let mut chunks = Vec::new();
    let mut cur = String::new();
    for line in text.split_inclusive('\n') {
        cur.push_str(line);
        if line.starts_with("{\"kind\":\"commit\"") {
            chunks.push(std::mem::take(&mut cur));
        }
    }
    assert!(
        cur.is_empty(),
        "output ends with an incomplete batch:\n{cur}"
    );
    chunks
}

fn show(batches: &[Batch]) -> String {
    batches
        .iter()
        .map(|b| String::from_utf8(b.to_jsonl()).expect("UTF-8"))
        .collect::<Vec<_>>()
        .join("--\n")
}

/// Compare batches exactly (through their canonical encoding, so REAL bits and
/// value classes count); on failure print both sides.
#[track_caller]
pub fn assert_batches(expected: &[Batch], got: &[Batch]) {
    let same = expected.len() == got.len()
        && expected
            .iter()
            .zip(got)
            .all(|(e, g)| e.to_jsonl() == g.to_jsonl());
    if !same {
        panic!(
            "batches differ\n=== expected ({} batches) ===\n{}\n=== got ({} batches) ===\n{}",
            expected.len(),
            show(expected),
            got.len(),
            show(got)
        );
    }
}

/// Compare texts; on failure print both sides.
#[track_caller]
pub fn assert_text(expected: &str, got: &[u8]) {
    let got = String::from_utf8_lossy(got);
    if expected != got {
        panic!("output differs\n=== expected ===\n{expected}\n=== got ===\n{got}");
    }
}

// ---------------------------------------------------------------- throwaway servers

/// A word quoted for `sh`.
pub fn shq(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// Start a throwaway server's watchdog: `script` (run by `sh`) waits for
/// this test process to be gone, then stops what it started. It runs in a
/// process group of its own (a Ctrl-C to the test run does not reach it)
/// and is never waited for: it outlives this process by design, then init
/// reaps it.
#[allow(clippy::zombie_processes)]
pub fn spawn_watchdog(script: &str, what: &str) {
    use std::os::unix::process::CommandExt;
    std::process::Command::new("sh")
        .arg("-c")
        .arg(script)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .process_group(0)
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start the watchdog of {what}: {e}"));
}

/// Wait until `reached` says so (asked every `poll`; the test fails after
/// `limit`, or if the child ends first, with its standard error from
/// `stderr_file` when given), then SIGKILL the child and check that the
/// signal is what ended it.
pub fn sigkill_when(
    child: &mut std::process::Child,
    limit: std::time::Duration,
    poll: std::time::Duration,
    stderr_file: Option<&Path>,
    mut reached: impl FnMut() -> bool,
) {
    use std::os::unix::process::ExitStatusExt;
    let deadline = std::time::Instant::now() + limit;
    loop {
        if let Some(st) = child.try_wait().unwrap() {
            panic!(
                "the tool ended ({st}) before it could be killed:\n{}",
                stderr_file
                    .and_then(|p| std::fs::read_to_string(p).ok())
                    .unwrap_or_default()
            );
        }
        if reached() {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the tool did not get there in {limit:?}"
        );
        std::thread::sleep(poll);
    }
    child.kill().unwrap();
    let st = child.wait().unwrap();
    assert_eq!(
        st.signal(),
        Some(9),
        "the tool should have been killed: {st}"
    );
}

// ---------------------------------------------------------------- running tools

/// The real binary, built by cargo for this test run.
pub fn tool(name: &str) -> Command {
    Command::new(tool_path(name))
}

/// The path of a built binary (cargo builds the binaries before integration tests).
pub fn tool_path(name: &str) -> PathBuf {
    PathBuf::from(match name {
        "mooncdc-split" => env!("CARGO_BIN_EXE_mooncdc-split"),
        "mooncdc-merge" => env!("CARGO_BIN_EXE_mooncdc-merge"),
        "mooncdc-compact" => env!("CARGO_BIN_EXE_mooncdc-compact"),
        "mooncdc-apply" => env!("CARGO_BIN_EXE_mooncdc-apply"),
        other => panic!("unknown tool {other}"),
    })
}

/// What a run produced.
pub struct Run {
    pub code: Option<i32>,
    pub stdout: Vec<u8>,
    pub stderr: String,
}

impl Run {
    #[track_caller]
    pub fn expect_code(&self, code: i32) -> &Self {
        if self.code != Some(code) {
            panic!(
                "expected exit status {code}, got {:?}\n--- stderr ---\n{}\n--- stdout ---\n{}",
                self.code,
                self.stderr,
                String::from_utf8_lossy(&self.stdout)
            );
        }
        self
    }

    #[track_caller]
    pub fn ok(&self) -> &Self {
        self.expect_code(0)
    }

    #[track_caller]
    pub fn stderr_has(&self, needle: &str) -> &Self {
        if !self.stderr.contains(needle) {
            panic!(
                "stderr does not contain {needle:?}\n--- stderr ---\n{}",
                self.stderr
            );
        }
        self
    }

    #[track_caller]
    pub fn stdout_empty(&self) -> &Self {
        if !self.stdout.is_empty() {
            panic!(
                "stdout should be empty, got:\n{}",
                String::from_utf8_lossy(&self.stdout)
            );
        }
        self
    }

    pub fn stdout_str(&self) -> String {
        String::from_utf8(self.stdout.clone()).expect("stdout is UTF-8")
    }
}

/// Run a tool with arguments and optional standard input (empty when `None`).
pub fn run(name: &str, args: &[&str], stdin: Option<&str>) -> Run {
    run_in(name, args, stdin, None)
}

/// Like [`run`], in a working directory.
pub fn run_in(name: &str, args: &[&str], stdin: Option<&str>, dir: Option<&Path>) -> Run {
    let mut cmd = tool(name);
    cmd.args(args);
    if let Some(d) = dir {
        cmd.current_dir(d);
    }
    cmd.write_stdin(stdin.unwrap_or("").as_bytes().to_vec());
    let out = cmd.output().expect("run tool");
    Run {
        code: out.status.code(),
        stdout: out.stdout,
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// A temporary folder for a test's files.
pub fn tempdir() -> tempfile::TempDir {
    tempfile::tempdir().expect("temporary folder")
}

/// Write a file and return its path as a string.
pub fn write(dir: &Path, name: &str, content: &str) -> String {
    let p = dir.join(name);
    std::fs::write(&p, content).expect("write test file");
    p.to_str().expect("UTF-8 path").to_string()
}

/// The names in a folder, sorted.
pub fn list(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .expect("read folder")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

/// Whether stderr names `file` with a line number (`file:N:`).
pub fn names_file_and_line(stderr: &str, file: &str) -> bool {
    let needle = format!("{file}:");
    stderr.match_indices(&needle).any(|(i, _)| {
        let rest = &stderr[i + needle.len()..];
        let digits = rest.chars().take_while(|c| c.is_ascii_digit()).count();
        digits > 0 && rest[digits..].starts_with(':')
    })
}

/// Whether stderr names `file` at exactly line `line` (`file:line:`).
pub fn names_line(stderr: &str, file: &str, line: u64) -> bool {
    stderr.contains(&format!("{file}:{line}:"))
}

// ---------------------------------------------------------------- common-option checks

/// `--help` and `--version` exit 0 and print something sensible.
pub fn check_help_and_version(name: &str) {
    let r = run(name, &["--help"], None);
    r.ok();
    let out = r.stdout_str();
    assert!(
        out.contains("Usage"),
        "--help of {name} has no usage:\n{out}"
    );
    for opt in ["--max-line-bytes", "--max-input-bytes", "--output-format"] {
        assert!(
            out.contains(opt),
            "--help of {name} does not list {opt}:\n{out}"
        );
    }
    let r = run(name, &["--version"], None);
    r.ok();
    let out = r.stdout_str();
    assert!(
        out.contains(name) && out.contains(env!("CARGO_PKG_VERSION")),
        "--version of {name} should print its name and version, got {out:?}"
    );
}

/// A generated batch large enough to fill any pipe buffer many times over.
pub fn big_batch(events: u128, with_schema: bool) -> String {
    use std::fmt::Write;
    let mut s = Spec::new(0, events);
    if with_schema {
        s = s.schemas(vec![kv_schema("t")]);
    }
    let mut out = s.header_line();
    for i in 1..=events {
        writeln!(
            out,
            r#"{{"kind":"event","event":{{"sequence":"{i}","table":"t","operation":"insert","after":[["integer","{i}"],["text","some text to make the line longer {i}"]]}}}}"#
        )
        .unwrap();
    }
    writeln!(
        out,
        r#"{{"kind":"commit","end":{{"source":"{SRC}","sequence":"{events}"}},"count":"{events}"}}"#
    )
    .unwrap();
    out
}

/// Run `<tool> <args> <file> | head -c 100 >/dev/null` in bash with pipefail
/// and return (pipeline status, stderr).
pub fn run_into_closed_pipe(name: &str, args: &[&str], file: &str) -> (Option<i32>, String) {
    let bin = tool_path(name);
    let quoted: Vec<String> = args
        .iter()
        .chain(std::iter::once(&file))
        .map(|a| format!("'{}'", a.replace('\'', r"'\''")))
        .collect();
    let script = format!(
        "set -o pipefail; '{}' {} | head -c 100 >/dev/null",
        bin.display(),
        quoted.join(" ")
    );
    let out = std::process::Command::new("bash")
        .arg("-c")
        .arg(&script)
        .output()
        .expect("run bash");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Checks of the input-limit options shared by every tool that reads JSONL.
/// `input` must be a valid input for `name` with `extra` arguments.
pub fn check_limits(name: &str, extra: &[&str], input: &str) {
    let dir = tempdir();
    let f = write(dir.path(), "in.jsonl", input);
    let longest = input.lines().map(str::len).max().unwrap();
    let total = input.len();

    let with = |opts: Vec<String>| {
        let mut args: Vec<String> = extra.iter().map(|s| s.to_string()).collect();
        args.extend(opts);
        args.push(f.clone());
        let refs: Vec<&str> = args.iter().map(String::as_str).collect();
        run(name, &refs, None)
    };

    // A line cap exactly the longest line passes; one byte less fails.
    with(vec![format!("--max-line-bytes={longest}")]).ok();
    let r = with(vec![format!("--max-line-bytes={}", longest - 1)]);
    r.expect_code(1).stderr_has("line limit");
    assert!(
        names_file_and_line(&r.stderr, &f),
        "line-limit error should name file and line, got: {}",
        r.stderr
    );

    // A total cap exactly the input passes; one byte less fails.
    with(vec![format!("--max-input-bytes={total}")]).ok();
    let r = with(vec![format!("--max-input-bytes={}", total - 1)]);
    r.expect_code(1).stderr_has("input limit");

    // A line cap above the total cap is a usage error; zero caps too.
    with(vec![
        format!("--max-line-bytes={}", total + 1),
        format!("--max-input-bytes={total}"),
    ])
    .expect_code(2)
    .stdout_empty();
    with(vec!["--max-line-bytes=0".into()])
        .expect_code(2)
        .stdout_empty();
    with(vec!["--max-input-bytes=0".into()])
        .expect_code(2)
        .stdout_empty();
}

/// Run a tool under `umask 022` (through bash) in `dir`; returns the status.
pub fn run_with_umask_022(name: &str, args: &[&str], dir: &Path) -> Option<i32> {
    let quoted: Vec<String> = args
        .iter()
        .map(|a| format!("'{}'", a.replace('\'', r"'\''")))
        .collect();
    let script = format!(
        "umask 022; exec '{}' {}",
        tool_path(name).display(),
        quoted.join(" ")
    );
    std::process::Command::new("bash")
        .arg("-c")
        .arg(&script)
        .current_dir(dir)
        .stdin(std::process::Stdio::null())
        .output()
        .expect("run bash")
        .status
        .code()
}

/// The permission bits of a file.
pub fn mode(path: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path)
        .expect("file exists")
        .permissions()
        .mode()
        & 0o777
}

/// A folder with 1 MiB of room: a tmpfs of that size mounted on a new
/// temporary folder (the tests run as root), so writing past it fails with
/// "No space left on device", as a full `/tmp` does. Unmounted and removed
/// when dropped, also when the test fails.
pub struct SmallFolder {
    dir: Option<tempfile::TempDir>,
}

impl SmallFolder {
    #[track_caller]
    pub fn new() -> SmallFolder {
        let dir = tempfile::tempdir().expect("temporary folder");
        let out = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", "size=1m,mode=0700", "mooncdc-small"])
            .arg(dir.path())
            .output()
            .expect("run mount");
        assert!(
            out.status.success(),
            "cannot mount a 1 MiB tmpfs on {} (this test needs root): {}",
            dir.path().display(),
            String::from_utf8_lossy(&out.stderr)
        );
        SmallFolder { dir: Some(dir) }
    }

    pub fn path(&self) -> &Path {
        self.dir.as_ref().expect("mounted").path()
    }
}

impl Drop for SmallFolder {
    fn drop(&mut self) {
        let Some(dir) = self.dir.take() else { return };
        let umount = |lazy: bool| {
            let mut c = std::process::Command::new("umount");
            if lazy {
                c.arg("-l");
            }
            c.arg(dir.path()).status().is_ok_and(|s| s.success())
        };
        // A file still open there keeps it busy: detach it lazily then.
        if !umount(false) && !umount(true) {
            eprintln!("cannot unmount {}", dir.path().display());
            std::mem::forget(dir);
            return;
        }
        drop(dir);
    }
}

/// `mooncdc-apply --target URL -q FILE` stopped by SIGTERM while it makes a
/// batch header's tables: once `began` says the batch is under way (and
/// `settle` later), SIGTERM; it must exit 0 within 3 s, saying that nothing
/// of the batch was committed. Returns how long the stop took.
#[track_caller]
pub fn sigterm_apply_in_header(
    url: &str,
    input: &Path,
    settle: std::time::Duration,
    mut began: impl FnMut() -> bool,
) -> std::time::Duration {
    use std::time::{Duration, Instant};
    let mut child = std::process::Command::new(sqlite::bin(sqlite::APPLY))
        .args(["--target", url, "-q", input.to_str().unwrap()])
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let start = Instant::now();
    while !began() {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "apply never began the batch"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(settle);
    let asked = Instant::now();
    let killed = std::process::Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let status = child.wait().unwrap();
    let took = asked.elapsed();
    let mut stderr = String::new();
    std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut stderr).unwrap();
    assert_eq!(status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains("nothing of that batch was committed"),
        "{stderr}"
    );
    assert!(
        took < Duration::from_secs(3),
        "the stop waited {took:?} for the header's tables"
    );
    took
}

/// The batch files of an archive (`dir:` target), by the intervals their
/// names give (`batch-<start>-<end>.jsonl`); none when the folder is missing.
pub fn archive_files(dir: &Path) -> Vec<(u128, u128, PathBuf)> {
    let mut out: Vec<(u128, u128, PathBuf)> = std::fs::read_dir(dir)
        .map(|d| d.map(|e| e.unwrap().path()).collect::<Vec<_>>())
        .unwrap_or_default()
        .into_iter()
        .filter_map(|p| {
            let n = p.file_name()?.to_str()?.strip_prefix("batch-")?;
            let (s, e) = n.strip_suffix(".jsonl")?.split_once('-')?;
            Some((s.parse().ok()?, e.parse().ok()?, p))
        })
        .collect();
    out.sort();
    out
}

/// The response (status line, headers and body) of an HTTP/1.0 GET of
/// `path` on `addr`.
pub fn http_get(addr: &str, path: &str) -> String {
    use std::io::{Read, Write};
    let mut c = std::net::TcpStream::connect(addr).expect("connect to the metrics listener");
    write!(c, "GET {path} HTTP/1.0\r\nHost: x\r\n\r\n").unwrap();
    let mut s = String::new();
    c.read_to_string(&mut s).unwrap();
    s
}
