//! The source tree in docs/ARCHITECTURE.md ("The tree") names every `.rs`
//! file under `src/` exactly once, and no file that is not there, so the map
//! a reader starts from never leaves a module out or sends them to one that
//! is gone.
//!
//! The fenced block under that heading is read line by line: a line that
//! starts at column 0 with `src/<path>/` opens a folder; a line indented by
//! two spaces whose first word ends in `.rs` names a file in the folder last
//! opened (`  fill.rs`); a file directly in `src/` is a line of its own at
//! column 0 (`src/lib.rs`). A description that wraps goes on lines indented
//! by four spaces or more, which are not read here.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

const DOC: &str = "docs/ARCHITECTURE.md";
const HEADING: &str = "## The tree";

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The lines of the fenced block under [`HEADING`], each with its line
/// number in the document (from 1).
fn tree_block(doc: &str) -> Vec<(usize, &str)> {
    let mut lines = doc.lines().enumerate().map(|(i, l)| (i + 1, l));
    if !lines.by_ref().any(|(_, l)| l.trim_end() == HEADING) {
        panic!("{DOC} has no line {HEADING:?}");
    }
    loop {
        match lines.next() {
            Some((_, l)) if l.starts_with("```") => break,
            Some((n, l)) if l.starts_with("## ") => {
                panic!("{DOC}: the section {HEADING:?} ends at line {n} without a fenced block")
            }
            Some(_) => {}
            None => panic!("{DOC}: no fenced block after {HEADING:?}"),
        }
    }
    let mut block = Vec::new();
    for (n, l) in lines {
        if l.starts_with("```") {
            return block;
        }
        block.push((n, l));
    }
    panic!("{DOC}: the fenced block after {HEADING:?} is never closed");
}

/// The files the tree names, as paths from the crate's root, each with the
/// line naming it. A file line before any folder line goes to `unread`.
fn named_files(block: &[(usize, &str)], unread: &mut Vec<String>) -> Vec<(String, usize)> {
    let mut folder: Option<&str> = None;
    let mut named = Vec::new();
    for &(n, line) in block {
        let Some(first) = line.split_whitespace().next() else {
            continue;
        };
        if !line.starts_with(char::is_whitespace) {
            if first.ends_with('/') {
                folder = Some(first);
            } else if first.ends_with(".rs") {
                named.push((first.to_string(), n));
            }
        } else if let Some(rest) = line.strip_prefix("  ") {
            if rest.starts_with(char::is_whitespace) || !first.ends_with(".rs") {
                continue; // a description's continuation, or not a file
            }
            match folder {
                Some(folder) => named.push((format!("{folder}{first}"), n)),
                None => unread.push(format!("line {n}: {first} comes before any folder line")),
            }
        }
    }
    named
}

/// Every `.rs` file under `dir`, whose path from the crate's root is `rel`,
/// as paths from the crate's root with `/` between their parts.
fn rust_files(dir: &Path, rel: &str, out: &mut BTreeSet<String>) {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) => panic!("cannot list {}: {e}", dir.display()),
    };
    for entry in entries {
        let entry = match entry {
            Ok(entry) => entry,
            Err(e) => panic!("cannot read an entry of {}: {e}", dir.display()),
        };
        let name = entry.file_name();
        let name = name.to_string_lossy();
        let path = format!("{rel}/{name}");
        let kind = match entry.file_type() {
            Ok(kind) => kind,
            Err(e) => panic!("cannot tell what {path} is: {e}"),
        };
        if kind.is_dir() {
            rust_files(&entry.path(), &path, out);
        } else if name.ends_with(".rs") {
            out.insert(path);
        }
    }
}

/// Where a file is named: `line 7`, or `lines 7, 90`.
fn place(lines: &[usize]) -> String {
    let numbers: Vec<String> = lines.iter().map(|n| n.to_string()).collect();
    let word = if lines.len() == 1 { "line" } else { "lines" };
    format!("{word} {}", numbers.join(", "))
}

#[test]
fn the_architecture_tree_names_every_source_file_and_no_other() {
    let root = root();
    let path = root.join(DOC);
    let doc = match std::fs::read_to_string(&path) {
        Ok(doc) => doc,
        Err(e) => panic!("cannot read {}: {e}", path.display()),
    };
    let mut unread = Vec::new();
    let named = named_files(&tree_block(&doc), &mut unread);
    let mut on_disk = BTreeSet::new();
    rust_files(&root.join("src"), "src", &mut on_disk);

    // Each file the tree names, with the lines naming it.
    let mut lines_of: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
    for (file, n) in &named {
        lines_of.entry(file.as_str()).or_default().push(*n);
    }
    let missing: Vec<String> = lines_of
        .iter()
        .filter(|(file, _)| !on_disk.contains(**file))
        .map(|(file, lines)| format!("{file} ({})", place(lines)))
        .collect();
    let left_out: Vec<String> = on_disk
        .iter()
        .filter(|file| !lines_of.contains_key(file.as_str()))
        .cloned()
        .collect();
    let twice: Vec<String> = lines_of
        .iter()
        .filter(|(_, lines)| lines.len() > 1)
        .map(|(file, lines)| format!("{file} ({})", place(lines)))
        .collect();

    let mut report = Vec::new();
    for (what, files) in [
        ("named in the tree but not in src/", &missing),
        ("in src/ but left out of the tree", &left_out),
        ("named in the tree more than once", &twice),
        ("lines not read", &unread),
    ] {
        if !files.is_empty() {
            report.push(format!("{what}:"));
            report.extend(files.iter().map(|file| format!("  {file}")));
        }
    }
    assert!(
        report.is_empty(),
        "{DOC}, \"The tree\", does not match src/ (list each `.rs` file once: a folder line \
         `src/<path>/` at column 0, then its files indented by two spaces; a file directly in \
         src/ at column 0):\n{}",
        report.join("\n")
    );
}
