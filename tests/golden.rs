//! Frozen v1 golden fixtures (`tests/data/v1/`, described in its README.md).
//!
//! - `valid/`: every batch input is run through the real `mooncdc-merge`, whose
//!   output must equal `NAME.canonical.jsonl` byte for byte; merging the
//!   canonical file must reproduce it. Snapshot inputs (`snapshot-*`) are
//!   re-encoded through the library's snapshot writers instead.
//! - `invalid/`: every batch input must make `mooncdc-merge` exit 1 with
//!   nothing on standard output and a message that names the file (and the
//!   line, per `NAME.line`) and contains the substring in `NAME.rule`.
//!   `single-*` inputs are valid batch streams that the strict single-batch
//!   decoder (`Batch::from_jsonl`) must refuse.
//! - `invalid-snapshot/`: every snapshot must be refused by `SnapshotReader`.
//!
//! To write the canonical output of a new valid fixture (never to rewrite an
//! existing one: v1 fixtures are frozen), run
//! `MOONCDC_GOLDEN_BLESS=1 cargo test --test golden`: it writes only the
//! `NAME.canonical.jsonl` files that are missing.

use assert_cmd::Command;
use mooncdc::wire::snapshot::{
    write_snapshot_commit_line, write_snapshot_header_line, write_snapshot_row_line,
};
use mooncdc::wire::{Batch, Limits, SnapItem, SnapshotReader};
use std::fs;
use std::path::PathBuf;

/// Fixture counts that must not shrink: fixtures may be added (then raise
/// these), never dropped.
const MIN_VALID_BATCH: usize = 30;
const MIN_VALID_SNAPSHOT: usize = 5;
const MIN_INVALID_BATCH: usize = 232;
const MIN_INVALID_SINGLE: usize = 3;
const MIN_INVALID_SNAPSHOT: usize = 49;

const CANONICAL_SUFFIX: &str = ".canonical.jsonl";
const SIDECARS: &[&str] = &["rule", "line", "args"];

fn manifest_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The path of a fixture relative to the crate root, as given to the tools
/// (and so as it appears in their messages).
fn rel(dir: &str, file: &str) -> String {
    format!("tests/data/v1/{dir}/{file}")
}

fn abs(rel: &str) -> PathBuf {
    manifest_dir().join(rel)
}

/// One input fixture and its sidecar files.
struct Fixture {
    /// File name, e.g. `seq-equal.jsonl`.
    file: String,
    /// Path relative to the crate root.
    path: String,
    /// File name without its extension.
    stem: String,
    dir: &'static str,
}

impl Fixture {
    fn sidecar(&self, ext: &str) -> PathBuf {
        abs(&rel(self.dir, &format!("{}.{ext}", self.stem)))
    }

    fn canonical(&self) -> PathBuf {
        abs(&rel(self.dir, &format!("{}{CANONICAL_SUFFIX}", self.stem)))
    }

    fn read_sidecar(&self, ext: &str) -> Option<String> {
        fs::read_to_string(self.sidecar(ext)).ok()
    }

    /// Extra command-line arguments from `NAME.args`.
    fn args(&self) -> Vec<String> {
        self.read_sidecar("args")
            .map(|s| s.split_whitespace().map(String::from).collect())
            .unwrap_or_default()
    }

    /// The substring the error message must contain (`NAME.rule`, without its final newline).
    fn rule(&self) -> Result<String, String> {
        let r = self
            .read_sidecar("rule")
            .ok_or_else(|| format!("{}: missing {}.rule", self.path, self.stem))?;
        let r = r.strip_suffix('\n').unwrap_or(&r).to_string();
        if r.is_empty() {
            return Err(format!("{}: {}.rule is empty", self.path, self.stem));
        }
        Ok(r)
    }

    /// The line the error must name (`NAME.line`: a number, or `none` for an
    /// error about the whole input). Required for JSONL inputs.
    fn line(&self) -> Result<Option<Option<u64>>, String> {
        let Some(text) = self.read_sidecar("line") else {
            return if self.file.ends_with(".jsonl") {
                Err(format!("{}: missing {}.line", self.path, self.stem))
            } else {
                Ok(None)
            };
        };
        match text.trim() {
            "none" => Ok(Some(None)),
            n => n
                .parse::<u64>()
                .map(|n| Some(Some(n)))
                .map_err(|_| format!("{}: bad {}.line {:?}", self.path, self.stem, n)),
        }
    }

    fn is_snapshot(&self) -> bool {
        self.file.starts_with("snapshot-")
    }

    fn is_json(&self) -> bool {
        self.file.ends_with(".json")
    }
}

/// The input fixtures of a folder, sorted; fails on stray files (a sidecar or
/// canonical output whose input is gone, or an unknown extension).
fn fixtures(dir: &'static str) -> Vec<Fixture> {
    let mut names: Vec<String> = fs::read_dir(abs(&format!("tests/data/v1/{dir}")))
        .unwrap_or_else(|e| panic!("cannot read tests/data/v1/{dir}: {e}"))
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    let stem_of = |n: &str| -> Option<String> {
        if n.ends_with(CANONICAL_SUFFIX) {
            return None;
        }
        n.strip_suffix(".jsonl")
            .or_else(|| n.strip_suffix(".json"))
            .map(String::from)
    };
    let inputs: Vec<Fixture> = names
        .iter()
        .filter_map(|n| {
            stem_of(n).map(|stem| Fixture {
                file: n.clone(),
                path: rel(dir, n),
                stem,
                dir,
            })
        })
        .collect();
    let mut stray = Vec::new();
    for n in &names {
        if stem_of(n).is_some() {
            continue;
        }
        let owner = match n.strip_suffix(CANONICAL_SUFFIX) {
            Some(s) => Some(s),
            None => SIDECARS
                .iter()
                .find_map(|ext| n.strip_suffix(&format!(".{ext}"))),
        };
        let owned = owner.is_some_and(|s| inputs.iter().any(|f| f.stem == s));
        if !owned && n != "README.md" {
            stray.push(n.clone());
        }
    }
    assert!(
        stray.is_empty(),
        "tests/data/v1/{dir}: files that belong to no input fixture: {stray:?}"
    );
    let stems: std::collections::HashSet<&str> = inputs.iter().map(|f| f.stem.as_str()).collect();
    assert_eq!(
        stems.len(),
        inputs.len(),
        "tests/data/v1/{dir}: two inputs share a name (NAME.jsonl and NAME.json)"
    );
    inputs
}

/// With `MOONCDC_GOLDEN_VERBOSE=1` (and `--nocapture`), print every refusal.
fn verbose(path: &str, message: &str) {
    if std::env::var_os("MOONCDC_GOLDEN_VERBOSE").is_some_and(|v| v == "1") {
        eprintln!("{path}: {}", message.trim_end());
    }
}

fn bless() -> bool {
    std::env::var_os("MOONCDC_GOLDEN_BLESS").is_some_and(|v| v == "1")
}

fn merge_cmd(args: &[String], path: &str) -> std::process::Output {
    Command::cargo_bin("mooncdc-merge")
        .expect("the mooncdc-merge binary")
        .current_dir(manifest_dir())
        .args(args)
        .arg(path)
        .output()
        .expect("run mooncdc-merge")
}

fn show(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// A readable account of two outputs that should be equal.
fn mismatch(what: &str, expected: &[u8], got: &[u8]) -> String {
    let (e, g) = (show(expected), show(got));
    let first = e
        .lines()
        .zip(g.lines())
        .position(|(a, b)| a != b)
        .map(|i| i + 1)
        .unwrap_or(e.lines().count().min(g.lines().count()) + 1);
    format!("{what}: output differs (first at line {first})\n--- expected\n{e}--- got\n{g}---")
}

/// Re-encode a snapshot through the library's JSONL snapshot writers.
fn reencode_snapshot(path: &str) -> mooncdc::Result<Vec<u8>> {
    let file = fs::File::open(abs(path)).unwrap_or_else(|e| panic!("{path}: {e}"));
    let input = std::io::BufReader::new(file);
    let mut reader = if path.ends_with(".json") {
        SnapshotReader::json(input, path, Limits::default())?
    } else {
        SnapshotReader::jsonl(input, path, Limits::default())
    };
    let mut out = Vec::new();
    while let Some(item) = reader.next_item()? {
        match item {
            SnapItem::Header { cursor, schemas } => {
                write_snapshot_header_line(&mut out, &cursor, &schemas)
            }
            SnapItem::Row { table, row } => write_snapshot_row_line(&mut out, &table, &row),
            SnapItem::Commit { count } => write_snapshot_commit_line(&mut out, count),
        }
    }
    Ok(out)
}

/// Compare an output with the fixture's canonical file (writing it first when
/// blessing and it is missing).
fn check_canonical(f: &Fixture, got: &[u8], failures: &mut Vec<String>) -> bool {
    let canonical = f.canonical();
    if !canonical.exists() && bless() {
        fs::write(&canonical, got).unwrap();
        eprintln!("blessed {}", canonical.display());
    }
    match fs::read(&canonical) {
        Err(e) => {
            failures.push(format!(
                "{}: cannot read {}: {e}",
                f.path,
                canonical.display()
            ));
            false
        }
        Ok(expected) if expected != got => {
            failures.push(mismatch(&f.path, &expected, got));
            false
        }
        Ok(_) => true,
    }
}

fn report(what: &str, failures: Vec<String>) {
    assert!(
        failures.is_empty(),
        "{} {what} fixture failure(s):\n\n{}",
        failures.len(),
        failures.join("\n\n")
    );
}

/// Where an error must be located: `PATH:LINE: ` or `PATH: ` (whole input).
fn location_problem(f: &Fixture, message: &str) -> Result<Option<String>, String> {
    Ok(match f.line()? {
        None => (!message.contains(&f.path))
            .then(|| format!("message does not name the file {}", f.path)),
        Some(Some(n)) => {
            let at = format!("{}:{n}: ", f.path);
            (!message.contains(&at)).then(|| format!("message does not name {at:?}"))
        }
        Some(None) => {
            let at = format!("{}: ", f.path);
            (!message.contains(&at))
                .then(|| format!("message does not name {at:?} (an error about the whole input)"))
        }
    })
}

#[test]
fn valid_batches_merge_to_their_canonical_form() {
    let all = fixtures("valid");
    let batches: Vec<&Fixture> = all.iter().filter(|f| !f.is_snapshot()).collect();
    assert!(
        batches.len() >= MIN_VALID_BATCH,
        "only {} valid batch fixtures, expected at least {MIN_VALID_BATCH}",
        batches.len()
    );
    let mut failures = Vec::new();
    for f in batches {
        let out = merge_cmd(&f.args(), &f.path);
        if !out.status.success() {
            failures.push(format!(
                "{}: mooncdc-merge failed ({}): {}",
                f.path,
                out.status,
                show(&out.stderr)
            ));
            continue;
        }
        if !check_canonical(f, &out.stdout, &mut failures) {
            continue;
        }
        // The canonical form is a fixed point of merge...
        let canonical = rel(f.dir, &format!("{}{CANONICAL_SUFFIX}", f.stem));
        let again = merge_cmd(&[], &canonical);
        if !again.status.success() {
            failures.push(format!(
                "{canonical}: merging the canonical output failed: {}",
                show(&again.stderr)
            ));
        } else if again.stdout != out.stdout {
            failures.push(mismatch(
                &format!("{canonical} (round trip)"),
                &out.stdout,
                &again.stdout,
            ));
        }
        // ...and one batch that the strict single-batch decoder accepts and
        // writes back unchanged.
        match Batch::from_jsonl(&show(&out.stdout)) {
            Ok(b) if b.to_jsonl() == out.stdout => {}
            Ok(b) => failures.push(mismatch(
                &format!("{canonical} (Batch::to_jsonl)"),
                &out.stdout,
                &b.to_jsonl(),
            )),
            Err(e) => failures.push(format!("{canonical}: Batch::from_jsonl refused it: {e}")),
        }
    }
    report("valid batch", failures);
}

#[test]
fn valid_snapshots_reencode_to_their_canonical_form() {
    let all = fixtures("valid");
    let snaps: Vec<&Fixture> = all.iter().filter(|f| f.is_snapshot()).collect();
    assert!(
        snaps.len() >= MIN_VALID_SNAPSHOT,
        "only {} valid snapshot fixtures, expected at least {MIN_VALID_SNAPSHOT}",
        snaps.len()
    );
    let mut failures = Vec::new();
    for f in snaps {
        let got = match reencode_snapshot(&f.path) {
            Ok(g) => g,
            Err(e) => {
                failures.push(format!("{}: refused: {e}", f.path));
                continue;
            }
        };
        if !check_canonical(f, &got, &mut failures) {
            continue;
        }
        let canonical = rel(f.dir, &format!("{}{CANONICAL_SUFFIX}", f.stem));
        match reencode_snapshot(&canonical) {
            Ok(again) if again == got => {}
            Ok(again) => {
                failures.push(mismatch(&format!("{canonical} (round trip)"), &got, &again))
            }
            Err(e) => failures.push(format!("{canonical}: refused: {e}")),
        }
    }
    report("valid snapshot", failures);
}

#[test]
fn invalid_batches_are_refused_by_merge() {
    let all = fixtures("invalid");
    let batches: Vec<&Fixture> = all
        .iter()
        .filter(|f| !f.file.starts_with("single-"))
        .collect();
    assert!(
        batches.len() >= MIN_INVALID_BATCH,
        "only {} invalid batch fixtures, expected at least {MIN_INVALID_BATCH}",
        batches.len()
    );
    let mut failures = Vec::new();
    for f in batches {
        let mut problems = Vec::new();
        let rule = match f.rule() {
            Ok(r) => r,
            Err(e) => {
                failures.push(e);
                continue;
            }
        };
        let out = merge_cmd(&f.args(), &f.path);
        let stderr = show(&out.stderr);
        verbose(&f.path, &stderr);
        if out.status.code() != Some(1) {
            problems.push(format!("exit status {} (expected 1)", out.status));
        }
        if !out.stdout.is_empty() {
            problems.push(format!(
                "standard output is not empty: {:?}",
                show(&out.stdout)
            ));
        }
        if !stderr.contains(&rule) {
            problems.push(format!("message lacks the rule {rule:?}"));
        }
        match location_problem(f, &stderr) {
            Ok(Some(p)) => problems.push(p),
            Ok(None) => {}
            Err(e) => problems.push(e),
        }
        if !problems.is_empty() {
            failures.push(format!(
                "{}: {}\n  stderr: {}",
                f.path,
                problems.join("; "),
                stderr.trim_end()
            ));
        }
    }
    report("invalid batch", failures);
}

#[test]
fn single_batch_decoder_refuses_more_than_one_batch() {
    let all = fixtures("invalid");
    let singles: Vec<&Fixture> = all
        .iter()
        .filter(|f| f.file.starts_with("single-"))
        .collect();
    assert!(
        singles.len() >= MIN_INVALID_SINGLE,
        "only {} single-batch fixtures, expected at least {MIN_INVALID_SINGLE}",
        singles.len()
    );
    let mut failures = Vec::new();
    for f in singles {
        let rule = match f.rule() {
            Ok(r) => r,
            Err(e) => {
                failures.push(e);
                continue;
            }
        };
        let text = fs::read_to_string(abs(&f.path)).unwrap();
        match Batch::from_jsonl(&text) {
            Ok(_) => failures.push(format!("{}: Batch::from_jsonl accepted it", f.path)),
            Err(e) => {
                let msg = e.to_string();
                verbose(&f.path, &msg);
                if !msg.contains(&rule) {
                    failures.push(format!(
                        "{}: message lacks the rule {rule:?}: {msg}",
                        f.path
                    ));
                }
                match f.line() {
                    Ok(Some(want)) if e.line() != want => failures.push(format!(
                        "{}: error at line {:?}, expected {want:?}: {msg}",
                        f.path,
                        e.line()
                    )),
                    Ok(_) => {}
                    Err(p) => failures.push(p),
                }
            }
        }
    }
    report("single-batch", failures);
}

#[test]
fn invalid_snapshots_are_refused() {
    let all = fixtures("invalid-snapshot");
    assert!(
        all.len() >= MIN_INVALID_SNAPSHOT,
        "only {} invalid snapshot fixtures, expected at least {MIN_INVALID_SNAPSHOT}",
        all.len()
    );
    let mut failures = Vec::new();
    for f in &all {
        let rule = match f.rule() {
            Ok(r) => r,
            Err(e) => {
                failures.push(e);
                continue;
            }
        };
        match reencode_snapshot(&f.path) {
            Ok(_) => failures.push(format!("{}: SnapshotReader accepted it", f.path)),
            Err(e) => {
                let msg = e.to_string();
                verbose(&f.path, &msg);
                let mut problems = Vec::new();
                if !msg.contains(&rule) {
                    problems.push(format!("message lacks the rule {rule:?}"));
                }
                if f.is_json() {
                    if !msg.contains(&f.path) {
                        problems.push(format!("message does not name the file {}", f.path));
                    }
                } else {
                    match location_problem(f, &msg) {
                        Ok(Some(p)) => problems.push(p),
                        Ok(None) => {}
                        Err(p) => problems.push(p),
                    }
                }
                if !problems.is_empty() {
                    failures.push(format!(
                        "{}: {}\n  error: {msg}",
                        f.path,
                        problems.join("; ")
                    ));
                }
            }
        }
    }
    report("invalid snapshot", failures);
}
