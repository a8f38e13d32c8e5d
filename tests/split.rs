//! mooncdc-split, run as a real binary (docs/TOOLS.md "mooncdc-split", docs/FORMAT.md §6 and §13).

mod common;

use common::*;
use mooncdc::wire::Batch;
use serde_json::Value as J;
use std::path::Path;

const SPLIT: &str = "mooncdc-split";

/// Inserts into table `t` at the given sequences, with text of `len` bytes.
fn inserts(seqs: &[u128], len: usize) -> Vec<J> {
    seqs.iter()
        .map(|&s| ins(s, "t", row(s as i64, &"x".repeat(len))))
        .collect()
}

/// Inserts whose text lengths vary, so byte limits fall at many places.
fn varied_inserts(seqs: &[u128]) -> Vec<J> {
    seqs.iter()
        .enumerate()
        .map(|(i, &s)| ins(s, "t", row(s as i64, &"y".repeat(5 + (i * 37) % 90))))
        .collect()
}

/// Check that the JSONL output `out` is a valid split of the input batches:
/// every input batch becomes consecutive pieces that start at its start, each
/// at the previous end, the last at its end; pieces keep high water and
/// schemas, hold the same events in order, respect the limits, and none is
/// empty unless its input batch was. Returns the pieces.
#[track_caller]
fn check_split(
    inputs: &[Batch],
    out: &[u8],
    max_events: Option<usize>,
    max_bytes: Option<usize>,
) -> Vec<Batch> {
    let pieces = batches(out);
    let chunks = batch_chunks(out);
    assert_eq!(pieces.len(), chunks.len());
    let mut i = 0;
    for input in inputs {
        let first = i;
        let mut events = Vec::new();
        let mut start = input.start.clone();
        loop {
            let Some(p) = pieces.get(i) else {
                panic!(
                    "output ends before input batch {}..{} is covered\n{}",
                    input.start,
                    input.end,
                    String::from_utf8_lossy(out)
                );
            };
            assert_eq!(
                p.start, start,
                "piece {i} does not start where the previous piece ended (or at the batch start)"
            );
            assert_eq!(
                p.high_water, input.high_water,
                "piece {i} lost the high water"
            );
            assert_eq!(p.schemas, input.schemas, "piece {i} lost the schemas");
            if !input.events.is_empty() {
                assert!(!p.events.is_empty(), "piece {i} is empty");
            }
            if let Some(n) = max_events {
                assert!(
                    p.events.len() <= n,
                    "piece {i} has {} events, more than {n}",
                    p.events.len()
                );
            }
            if let Some(b) = max_bytes {
                assert!(
                    chunks[i].len() <= b || p.events.len() <= 1,
                    "piece {i} is {} bytes (> {b}) with {} events:\n{}",
                    chunks[i].len(),
                    p.events.len(),
                    chunks[i]
                );
            }
            events.extend(p.events.iter().cloned());
            start = p.end.clone();
            i += 1;
            if p.end == input.end && events.len() >= input.events.len() {
                break;
            }
            assert!(
                p.end.sequence() < input.end.sequence(),
                "piece {i} ends beyond its batch"
            );
        }
        let rebuilt = Batch {
            start: input.start.clone(),
            end: input.end.clone(),
            high_water: input.high_water,
            schemas: input.schemas.clone(),
            compacted: input.compacted,
            events,
            changes: Vec::new(),
            messages: Vec::new(),
        };
        assert_batches(std::slice::from_ref(input), &[rebuilt]);
        assert!(i > first);
    }
    assert_eq!(
        i,
        pieces.len(),
        "output has pieces beyond the input's batches"
    );
    pieces
}

fn batch_with_schema(seqs: &[u128], end: u128, hw: u128) -> Spec {
    Spec::new(0, end)
        .high_water(hw)
        .schemas(vec![kv_schema("t")])
        .events(inserts(seqs, 3))
}

// ---------------------------------------------------------------- --max-events

#[test]
fn max_events_cuts_exact_pieces() {
    let seqs: Vec<u128> = (0..10).map(|i| 2 * i + 1).collect(); // 1, 3, …, 19
    let input = batch_with_schema(&seqs, 20, 25);
    let r = run(SPLIT, &["--max-events", "3"], Some(&input.jsonl()));
    r.ok();
    let piece = |start, end, s: &[u128]| {
        Spec {
            start,
            ..batch_with_schema(s, end, 25)
        }
        .batch()
    };
    let expected = vec![
        piece(0, 5, &[1, 3, 5]),
        piece(5, 11, &[7, 9, 11]),
        piece(11, 17, &[13, 15, 17]),
        piece(17, 20, &[19]),
    ];
    assert_batches(&expected, &batches(&r.stdout));
    check_split(&[input.batch()], &r.stdout, Some(3), None);
}

#[test]
fn max_events_at_or_above_count_keeps_the_batch_whole() {
    let input = batch_with_schema(&[1, 2, 3, 4], 9, 12);
    for n in ["4", "5", "1000"] {
        let r = run(SPLIT, &["--max-events", n], Some(&input.jsonl()));
        r.ok();
        assert_batches(&[input.batch()], &batches(&r.stdout));
    }
}

#[test]
fn max_events_one_gives_one_piece_per_event() {
    let input = batch_with_schema(&[2, 4, 6], 10, 10);
    let r = run(SPLIT, &["--max-events", "1"], Some(&input.jsonl()));
    r.ok();
    let pieces = check_split(&[input.batch()], &r.stdout, Some(1), None);
    let bounds: Vec<(u128, u128)> = pieces
        .iter()
        .map(|p| (p.start.sequence(), p.end.sequence()))
        .collect();
    assert_eq!(bounds, vec![(0, 2), (2, 4), (4, 10)]);
}

#[test]
fn without_limits_the_batch_is_passed_whole() {
    let input = batch_with_schema(&[1, 5, 7], 8, 9);
    let r = run(SPLIT, &[], Some(&input.jsonl()));
    r.ok();
    assert_text(&input.canonical(), &r.stdout);
}

// ---------------------------------------------------------------- --max-bytes

#[test]
fn max_bytes_bounds_every_piece() {
    let seqs: Vec<u128> = (1..=25).collect();
    let input = Spec::new(0, 25)
        .high_water(40)
        .schemas(vec![kv_schema("t")])
        .events(varied_inserts(&seqs));
    let whole = input.jsonl().len();
    let mut limits: Vec<usize> = (300..1200).step_by(23).collect();
    limits.extend([whole - 1, whole, whole + 1]);
    for b in limits {
        let r = run(
            SPLIT,
            &["--max-bytes", &b.to_string()],
            Some(&input.jsonl()),
        );
        r.ok();
        let pieces = check_split(&[input.batch()], &r.stdout, None, Some(b));
        if b >= whole {
            assert_eq!(pieces.len(), 1, "B={b} fits the whole batch");
        } else {
            assert!(pieces.len() > 1, "B={b} is below the batch size {whole}");
        }
    }
}

#[test]
fn max_bytes_gives_an_oversized_event_a_piece_of_its_own() {
    let mut events = inserts(&[1, 2, 3], 5);
    events.push(ins(4, "t", row(4, &"H".repeat(3000))));
    events.extend(inserts(&[5, 6, 7], 5));
    let input = Spec::new(0, 7).events(events);
    let r = run(SPLIT, &["--max-bytes", "600"], Some(&input.jsonl()));
    r.ok();
    let pieces = check_split(&[input.batch()], &r.stdout, None, Some(600));
    let big = pieces
        .iter()
        .find(|p| p.events.iter().any(|e| e.sequence == 4))
        .unwrap();
    assert_eq!(big.events.len(), 1, "the oversized event should be alone");
    assert_eq!((big.start.sequence(), big.end.sequence()), (3, 4));
}

/// The final piece ends at the batch's end, not at its last event; its commit
/// line is then longer than the one the cut was sized with.
#[test]
fn max_bytes_bounds_the_last_piece_when_the_end_is_beyond_the_last_event() {
    let seqs: Vec<u128> = (1..=9).collect();
    let input = Spec::new(0, 1_000_000)
        .high_water(1_000_000)
        .schemas(vec![kv_schema("t")])
        .events(inserts(&seqs, 1));
    for b in 300..1100 {
        let r = run(
            SPLIT,
            &["--max-bytes", &b.to_string()],
            Some(&input.jsonl()),
        );
        r.ok();
        check_split(&[input.batch()], &r.stdout, None, Some(b));
    }
}

#[test]
fn max_events_and_max_bytes_together() {
    let seqs: Vec<u128> = (1..=30).map(|i| i * 3).collect();
    let input = Spec::new(0, 90)
        .high_water(100)
        .schemas(vec![kv_schema("t")])
        .events(varied_inserts(&seqs));
    for (n, b) in [(3, 500), (3, 100_000), (10, 600), (1, 100_000), (7, 900)] {
        let r = run(
            SPLIT,
            &[
                "--max-events",
                &n.to_string(),
                "--max-bytes",
                &b.to_string(),
            ],
            Some(&input.jsonl()),
        );
        r.ok();
        let pieces = check_split(&[input.batch()], &r.stdout, Some(n), Some(b));
        if b == 100_000 {
            // Only the event limit binds: pieces are exactly those of --max-events.
            let alone = run(
                SPLIT,
                &["--max-events", &n.to_string()],
                Some(&input.jsonl()),
            );
            alone.ok();
            assert_batches(&batches(&alone.stdout), &pieces);
        }
    }
}

// ---------------------------------------------------------------- batches and streams

#[test]
fn empty_batch_gives_one_empty_piece() {
    let input = Spec::new(7, 12)
        .high_water(20)
        .schemas(vec![kv_schema("t")]);
    for args in [
        vec!["--max-events", "1"],
        vec!["--max-bytes", "1"],
        vec!["--max-events", "1", "--max-bytes", "1"],
    ] {
        let r = run(SPLIT, &args, Some(&input.jsonl()));
        r.ok();
        assert_batches(&[input.batch()], &batches(&r.stdout));
    }
    // Also an empty batch that does not advance (start = end).
    let still = Spec::new(12, 12).high_water(20);
    let r = run(SPLIT, &["--max-events", "1"], Some(&still.jsonl()));
    r.ok();
    assert_batches(&[still.batch()], &batches(&r.stdout));
}

fn three_batch_stream() -> Vec<Spec> {
    vec![
        Spec::new(0, 10)
            .high_water(50)
            .schemas(vec![kv_schema("t")])
            .events(varied_inserts(&[1, 2, 3, 4, 5, 6, 7])),
        Spec::new(10, 10).high_water(50),
        Spec::new(10, 30)
            .high_water(30)
            .events(varied_inserts(&[11, 13, 17, 19, 23])),
    ]
}

#[test]
fn multi_batch_stream_is_split_batch_by_batch() {
    let specs = three_batch_stream();
    let inputs: Vec<Batch> = specs.iter().map(Spec::batch).collect();
    let text = stream(&specs);
    for args in [
        vec!["--max-events", "2"],
        vec!["--max-bytes", "450"],
        vec!["--max-events", "3", "--max-bytes", "600"],
    ] {
        let r = run(SPLIT, &args, Some(&text));
        r.ok();
        check_split(&inputs, &r.stdout, None, None);
    }
    let r = run(SPLIT, &["--max-events", "2"], Some(&text));
    let pieces = check_split(&inputs, &r.stdout, Some(2), None);
    assert_eq!(pieces.len(), 4 + 1 + 3);
}

#[test]
fn json_batch_input_is_accepted() {
    let input = batch_with_schema(&[1, 2, 3, 4, 5], 6, 6);
    let r = run(SPLIT, &["--max-events", "2"], Some(&input.json()));
    r.ok();
    check_split(&[input.batch()], &r.stdout, Some(2), None);
}

// ---------------------------------------------------------------- inputs

#[test]
fn stdin_dash_and_several_files() {
    let dir = tempdir();
    let a = Spec::new(0, 6).events(inserts(&[1, 2, 3, 4, 5], 2));
    let b = Spec::new(6, 9).events(inserts(&[7, 8, 9], 2));
    let fa = write(dir.path(), "a.jsonl", &a.jsonl());
    let fb = write(dir.path(), "b.jsonl", &b.jsonl());
    let inputs = [a.batch(), b.batch()];

    let from_stdin = run(
        SPLIT,
        &["--max-events", "2"],
        Some(&stream(&[a.clone(), b.clone()])),
    );
    from_stdin.ok();
    check_split(&inputs, &from_stdin.stdout, Some(2), None);

    let dash = run(
        SPLIT,
        &["--max-events", "2", "-"],
        Some(&stream(&[a.clone(), b.clone()])),
    );
    dash.ok();
    assert_text(&from_stdin.stdout_str(), &dash.stdout);

    let files = run(SPLIT, &["--max-events", "2", &fa, &fb], None);
    files.ok();
    assert_text(&from_stdin.stdout_str(), &files.stdout);

    let mixed = run(SPLIT, &["--max-events", "2", &fa, "-"], Some(&b.jsonl()));
    mixed.ok();
    assert_text(&from_stdin.stdout_str(), &mixed.stdout);
}

// ---------------------------------------------------------------- --output-dir

/// Run split into `dir/out` and check the printed paths, the folder's files and
/// their contents against the pieces written to standard output.
fn check_output_dir(prefix: Option<&str>, format: &str) {
    let dir = tempdir();
    let specs = three_batch_stream();
    let text = stream(&specs);
    let out = dir.path().join("nested").join("out");
    let out_s = out.to_str().unwrap();
    let mut args = vec![
        "--max-events",
        "3",
        "--output-format",
        format,
        "--output-dir",
        out_s,
    ];
    if let Some(p) = prefix {
        args.extend(["--prefix", p]);
    }
    let r = run(SPLIT, &args, Some(&text));
    r.ok();

    let reference = run(SPLIT, &["--max-events", "3"], Some(&text));
    reference.ok();
    let pieces = batches(&reference.stdout);
    let chunks = batch_chunks(&reference.stdout);
    let ext = if format == "json" { "json" } else { "jsonl" };
    let p = prefix.unwrap_or("batch");
    let names: Vec<String> = pieces
        .iter()
        .map(|b| format!("{p}-{}-{}.{ext}", b.start.sequence(), b.end.sequence()))
        .collect();

    let printed: Vec<String> = r.stdout_str().lines().map(str::to_string).collect();
    let expected_paths: Vec<String> = names
        .iter()
        .map(|n| out.join(n).display().to_string())
        .collect();
    assert_eq!(printed, expected_paths, "paths printed on stdout");

    let mut sorted = names.clone();
    sorted.sort();
    sorted.dedup();
    assert_eq!(
        list(&out),
        sorted,
        "files in the output folder (no temporary files)"
    );

    for (i, name) in names.iter().enumerate() {
        let content = std::fs::read_to_string(out.join(name)).unwrap();
        let got = if format == "json" {
            Batch::from_json(&content)
                .unwrap_or_else(|e| panic!("{name} is not one JSON batch: {e}\n{content}"))
        } else {
            assert_eq!(content, chunks[i], "{name} should hold exactly its piece");
            Batch::from_jsonl(&content)
                .unwrap_or_else(|e| panic!("{name} is not one JSONL batch: {e}\n{content}"))
        };
        assert_batches(std::slice::from_ref(&pieces[i]), &[got]);
    }
}

#[test]
fn output_dir_with_default_prefix() {
    check_output_dir(None, "jsonl");
}

#[test]
fn output_dir_with_prefix() {
    check_output_dir(Some("part"), "jsonl");
}

#[test]
fn output_dir_with_json_format() {
    check_output_dir(Some("doc"), "json");
}

#[test]
fn output_dir_relative_path() {
    let dir = tempdir();
    let input = Spec::new(0, 4).events(inserts(&[1, 2, 3, 4], 1));
    let r = run_in(
        SPLIT,
        &["--max-events", "2", "--output-dir", "out", "--prefix", "P"],
        Some(&input.jsonl()),
        Some(dir.path()),
    );
    r.ok();
    assert_eq!(
        r.stdout_str(),
        format!(
            "{}\n{}\n",
            Path::new("out").join("P-0-2.jsonl").display(),
            Path::new("out").join("P-2-4.jsonl").display()
        )
    );
    assert_eq!(
        list(&dir.path().join("out")),
        vec!["P-0-2.jsonl", "P-2-4.jsonl"]
    );
}

/// The pieces hold a copy of the database's rows: the owner's only (0600),
/// not 0644 under the usual umask; the folder made for them 0700.
#[test]
fn output_dir_files_are_readable_by_their_owner_only() {
    let dir = tempdir();
    write(
        dir.path(),
        "in.jsonl",
        &Spec::new(0, 2).events(inserts(&[1, 2], 1)).jsonl(),
    );
    let code = run_with_umask_022(
        SPLIT,
        &["--max-events", "1", "--output-dir", "out", "in.jsonl"],
        dir.path(),
    );
    assert_eq!(code, Some(0));
    for name in ["batch-0-1.jsonl", "batch-1-2.jsonl"] {
        assert_eq!(mode(&dir.path().join("out").join(name)), 0o600, "{name}");
    }
    assert_eq!(mode(&dir.path().join("out")), 0o700);
}

// ---------------------------------------------------------------- --output-format json

#[test]
fn json_output_writes_one_document_per_piece() {
    let specs = three_batch_stream();
    let text = stream(&specs);
    let jsonl = run(SPLIT, &["--max-events", "3"], Some(&text));
    jsonl.ok();
    let json = run(
        SPLIT,
        &["--max-events", "3", "--output-format", "json"],
        Some(&text),
    );
    json.ok();
    assert_batches(&batches(&jsonl.stdout), &json_batches(&json.stdout));
    // Explicit jsonl is the default.
    let explicit = run(
        SPLIT,
        &["--max-events", "3", "--output-format", "jsonl"],
        Some(&text),
    );
    explicit.ok();
    assert_text(&jsonl.stdout_str(), &explicit.stdout);
}

// ---------------------------------------------------------------- usage errors

#[test]
fn zero_limits_are_usage_errors() {
    let input = Spec::new(0, 1).events(inserts(&[1], 1)).jsonl();
    for args in [
        vec!["--max-events", "0"],
        vec!["--max-bytes", "0"],
        vec!["--max-events", "0", "--max-bytes", "10"],
    ] {
        run(SPLIT, &args, Some(&input))
            .expect_code(2)
            .stdout_empty();
    }
}

#[test]
fn other_usage_errors() {
    let dir = tempdir();
    let f = write(
        dir.path(),
        "in.jsonl",
        &Spec::new(0, 1).events(inserts(&[1], 1)).jsonl(),
    );
    for args in [
        vec!["--prefix", "p", f.as_str()],
        vec!["--no-such-option", f.as_str()],
        vec!["--max-events", "many", f.as_str()],
        vec!["--max-bytes", "-5", f.as_str()],
        vec!["--output-format", "xml", f.as_str()],
    ] {
        run(SPLIT, &args, None).expect_code(2).stdout_empty();
    }
    assert_eq!(list(dir.path()), vec!["in.jsonl"]);
}

// ---------------------------------------------------------------- bad input

fn good_first_batch() -> Spec {
    Spec::new(0, 6)
        .high_water(20)
        .events(inserts(&[1, 2, 3, 4, 5, 6], 2))
}

/// A second batch whose commit count is wrong: the commit line (line 15) breaks a rule.
fn bad_count_stream() -> (String, u64) {
    let first = good_first_batch();
    let second = Spec::new(6, 12)
        .high_water(20)
        .events(inserts(&[7, 8, 9, 10, 11], 2));
    let mut text = first.jsonl();
    text.push_str(&second.header_line());
    text.push_str(&second.event_lines());
    text.push_str(
        &second
            .commit_line()
            .replace(r#""count":"5""#, r#""count":"4""#),
    );
    (text, 8 + 7)
}

/// A second batch that has no commit (a truncated stream).
fn truncated_stream() -> String {
    let first = good_first_batch();
    let second = Spec::new(6, 12)
        .high_water(20)
        .events(inserts(&[7, 8, 9, 10, 11], 2));
    format!(
        "{}{}{}",
        first.jsonl(),
        second.header_line(),
        second.event_lines()
    )
}

/// Standard output holds only the first batch's pieces, complete.
#[track_caller]
fn only_first_batch(out: &[u8]) {
    let first = good_first_batch();
    let reference = run(SPLIT, &["--max-events", "4"], Some(&first.jsonl()));
    reference.ok();
    let got = parse_stream(out).unwrap_or_else(|e| {
        panic!(
            "stdout is not a stream of complete batches: {e}\n{}",
            String::from_utf8_lossy(out)
        )
    });
    assert_batches(&batches(&reference.stdout), &got);
    let text = String::from_utf8_lossy(out);
    for seq in 7..=11 {
        assert!(
            !text.contains(&format!(r#""sequence":"{seq}","table""#)),
            "an event of the bad batch was written:\n{text}"
        );
    }
}

#[test]
fn bad_second_batch_emits_only_the_first_batch() {
    let dir = tempdir();
    let (text, line) = bad_count_stream();
    let f = write(dir.path(), "bad.jsonl", &text);
    let r = run(SPLIT, &["--max-events", "4", &f], None);
    r.expect_code(1).stderr_has("count");
    assert!(
        names_line(&r.stderr, &f, line),
        "stderr should name {f}:{line}: got {}",
        r.stderr
    );
    assert!(r.stderr.starts_with("mooncdc-split"), "{}", r.stderr);
    only_first_batch(&r.stdout);
}

#[test]
fn truncated_second_batch_emits_only_the_first_batch() {
    let dir = tempdir();
    let f = write(dir.path(), "cut.jsonl", &truncated_stream());
    let r = run(SPLIT, &["--max-events", "4", &f], None);
    r.expect_code(1).stderr_has(&f).stderr_has("commit");
    only_first_batch(&r.stdout);
}

#[test]
fn truncated_stream_error_names_file_and_line() {
    let dir = tempdir();
    let f = write(dir.path(), "cut.jsonl", &truncated_stream());
    let r = run(SPLIT, &["--max-events", "4", &f], None);
    r.expect_code(1);
    assert!(
        names_file_and_line(&r.stderr, &f),
        "stderr should name {f}:<line>: got {}",
        r.stderr
    );
}

#[test]
fn bad_event_names_file_and_line() {
    let dir = tempdir();
    // Line 4: sequence goes backwards.
    let text = Spec::new(0, 9).events(inserts(&[1, 5, 3, 9], 1)).jsonl();
    let f = write(dir.path(), "back.jsonl", &text);
    let r = run(SPLIT, &["--max-events", "1", &f], None);
    r.expect_code(1).stdout_empty();
    assert!(names_line(&r.stderr, &f, 4), "{}", r.stderr);

    // Not JSON at all, on line 2 of standard input.
    let text = format!("{}not json\n", Spec::new(0, 9).header_line());
    let r = run(SPLIT, &["--max-events", "1"], Some(&text));
    r.expect_code(1).stdout_empty();
    assert!(names_line(&r.stderr, "<stdin>", 2), "{}", r.stderr);

    // A (JSON) snapshot is not a batch stream.
    let r = run(SPLIT, &[], Some(&snapshot_json(&[kv_schema("t")], 3)));
    r.expect_code(1).stdout_empty().stderr_has("snapshot");
    // Nor is a JSONL snapshot (its message is checked in the test below).
    let r = run(SPLIT, &[], Some(&snapshot_jsonl(&[kv_schema("t")], 3)));
    r.expect_code(1).stdout_empty();

    // A missing file.
    let missing = dir.path().join("missing.jsonl");
    let r = run(SPLIT, &[missing.to_str().unwrap()], None);
    r.expect_code(1).stdout_empty().stderr_has("missing.jsonl");
}

#[test]
fn jsonl_snapshot_input_is_refused_as_a_snapshot() {
    let r = run(SPLIT, &[], Some(&snapshot_jsonl(&[kv_schema("t")], 3)));
    r.expect_code(1).stdout_empty().stderr_has("snapshot");
}

#[test]
fn output_dir_with_a_bad_batch_writes_no_file_for_it() {
    for (label, text) in [
        ("count", bad_count_stream().0),
        ("truncated", truncated_stream()),
    ] {
        let dir = tempdir();
        let out = dir.path().join("out");
        let r = run(
            SPLIT,
            &[
                "--max-events",
                "4",
                "--output-dir",
                out.to_str().unwrap(),
                "--prefix",
                "p",
            ],
            Some(&text),
        );
        r.expect_code(1);
        assert_eq!(
            list(&out),
            vec!["p-0-4.jsonl", "p-4-6.jsonl"],
            "{label}: only the first batch's files, no temporary files"
        );
        assert_eq!(
            r.stdout_str(),
            format!(
                "{}\n{}\n",
                out.join("p-0-4.jsonl").display(),
                out.join("p-4-6.jsonl").display()
            ),
            "{label}: paths printed"
        );
    }
    // A bad first batch leaves the folder empty.
    let dir = tempdir();
    let out = dir.path().join("out");
    let text = Spec::new(0, 9).events(inserts(&[1, 5, 3], 1)).jsonl();
    let r = run(
        SPLIT,
        &["--max-events", "1", "--output-dir", out.to_str().unwrap()],
        Some(&text),
    );
    r.expect_code(1).stdout_empty();
    assert!(list(&out).is_empty(), "{:?}", list(&out));
}

// ---------------------------------------------------------------- common options

#[test]
fn help_and_version() {
    check_help_and_version(SPLIT);
    let help = run(SPLIT, &["--help"], None).stdout_str();
    for opt in ["--max-events", "--max-bytes", "--output-dir", "--prefix"] {
        assert!(help.contains(opt), "--help does not list {opt}");
    }
}

#[test]
fn input_limits() {
    let input = stream(&three_batch_stream());
    check_limits(SPLIT, &["--max-events", "2"], &input);
}

#[test]
fn line_limit_error_names_line() {
    let mut events = inserts(&[1, 2], 1);
    events.push(ins(3, "t", row(3, &"L".repeat(500))));
    let text = Spec::new(0, 3).events(events).jsonl();
    let r = run(SPLIT, &["--max-line-bytes", "300"], Some(&text));
    r.expect_code(1).stdout_empty().stderr_has("line limit");
    assert!(names_line(&r.stderr, "<stdin>", 4), "{}", r.stderr);
}

#[test]
fn closed_downstream_pipe_ends_quietly() {
    let dir = tempdir();
    let f = write(dir.path(), "big.jsonl", &big_batch(60_000, true));
    for args in [vec!["--max-events", "10"], vec![]] {
        let (code, stderr) = run_into_closed_pipe(SPLIT, &args, &f);
        assert_eq!(stderr, "", "stderr should be empty");
        assert_eq!(code, Some(0), "pipeline status (split's, with pipefail)");
    }
}

/// `--prefix` is part of a file name: one that names another folder is a
/// usage error, and nothing is written or created anywhere.
#[test]
fn a_prefix_with_a_path_separator_is_a_usage_error() {
    let input = Spec::new(0, 4).events(inserts(&[1, 2, 3, 4], 1));
    for prefix in ["../escaped", "a/b", "/abs", "a\\b", ""] {
        let dir = tempdir();
        std::fs::create_dir(dir.path().join("work")).unwrap();
        let r = run_in(
            SPLIT,
            &[
                "--max-events",
                "2",
                "--output-dir",
                "out",
                "--prefix",
                prefix,
            ],
            Some(&input.jsonl()),
            Some(&dir.path().join("work")),
        );
        r.expect_code(2).stdout_empty();
        assert!(r.stderr.contains("prefix"), "{}", r.stderr);
        assert_eq!(list(dir.path()), vec!["work"], "prefix {prefix:?}");
        assert!(
            list(&dir.path().join("work")).is_empty(),
            "prefix {prefix:?}"
        );
    }
}

/// What a run of a tool under `strace` did to files: each traced call's
/// line (`openat`, `fsync`, renames), in order. The tool must exit `code`.
fn traced(tool: &str, args: &[&str], dir: &Path, code: i32) -> Vec<String> {
    let trace = dir.join("trace.txt");
    let out = std::process::Command::new("strace")
        .args([
            "-f",
            "-e",
            "trace=openat,fsync,rename,renameat,renameat2",
            "-o",
        ])
        .arg(&trace)
        .arg(tool_path(tool))
        .args(args)
        .current_dir(dir)
        .output()
        .expect("run strace (Debian's strace; scripts/test.sh installs it)");
    assert_eq!(
        out.status.code(),
        Some(code),
        "{tool} under strace: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    // A call that another thread's event interrupted is written in two
    // parts (`fsync(4 <unfinished ...>`, then `<... fsync resumed>) = 0`):
    // joined again, in the place where it finished.
    let mut open: std::collections::HashMap<String, String> = Default::default();
    let mut calls = Vec::new();
    for l in std::fs::read_to_string(&trace).unwrap().lines() {
        let pid = l.split_whitespace().next().unwrap_or_default().to_string();
        if let Some(start) = l.strip_suffix(" <unfinished ...>") {
            open.insert(pid, start.to_string());
        } else if let Some(at) = l.find(" resumed>") {
            let start = open.remove(&pid).unwrap_or_default();
            calls.push(format!("{start}{}", &l[at + " resumed>".len()..]));
        } else {
            calls.push(l.to_string());
        }
    }
    calls
}

/// Whether, after the last rename into `folder`, the folder itself was
/// opened and synced: without that, a crash can lose the renamed files.
fn folder_synced_after_renames(calls: &[String], folder: &str) -> bool {
    let Some(last_rename) = calls
        .iter()
        .rposition(|l| l.contains("rename") && l.contains(&format!("\"{folder}/")))
    else {
        return false;
    };
    synced_from(calls, last_rename, folder)
}

/// Whether `folder` was opened and synced at or after call `from`.
fn synced_from(calls: &[String], from: usize, folder: &str) -> bool {
    calls[from..].iter().enumerate().any(|(i, l)| {
        let opened = format!("openat(AT_FDCWD, \"{folder}\", O_RDONLY");
        l.contains(&opened)
            && l.rsplit("= ")
                .next()
                .and_then(|fd| fd.trim().parse::<u32>().ok())
                .is_some_and(|fd| {
                    calls[from + i..]
                        .iter()
                        .any(|m| m.contains(&format!("fsync({fd})")) && m.ends_with("= 0"))
                })
    })
}

#[test]
fn files_written_are_durable_before_the_tool_succeeds() {
    let strace = std::process::Command::new("strace")
        .args(["-o", "/dev/null", "true"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !strace {
        eprintln!(
            "SKIPPED files_written_are_durable_before_the_tool_succeeds: strace is missing or cannot trace here (scripts/test.sh installs it)"
        );
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.jsonl");
    let batch = Spec::new(0, 3).schemas(vec![kv_schema("t")]).events(vec![
        ins(1, "t", row(1, "a")),
        ins(2, "t", row(2, "b")),
        ins(3, "t", row(3, "c")),
    ]);
    std::fs::write(&input, batch.jsonl()).unwrap();
    // split --output-dir: every piece synced, renamed, then the folder once.
    let calls = traced(
        "mooncdc-split",
        &["--max-events", "1", "--output-dir", "out", "in.jsonl"],
        dir.path(),
        0,
    );
    let renames = calls
        .iter()
        .filter(|l| l.contains("rename") && l.contains("\"out/"))
        .count();
    assert!(renames >= 2, "pieces renamed into place: {calls:#?}");
    assert!(folder_synced_after_renames(&calls, "out"), "{calls:#?}");
    // Into new folders two levels deep: each new folder's parent is synced.
    let calls = traced(
        "mooncdc-split",
        &[
            "--max-events",
            "1",
            "--output-dir",
            "new/deeper/out",
            "in.jsonl",
        ],
        dir.path(),
        0,
    );
    assert!(
        folder_synced_after_renames(&calls, "new/deeper/out"),
        "{calls:#?}"
    );
    let last = calls.iter().rposition(|l| l.contains("rename")).unwrap();
    for parent in ["new/deeper", "new", "."] {
        assert!(
            synced_from(&calls, last, parent),
            "{parent} not synced: {calls:#?}"
        );
    }
    // A split that fails midway (a bad second batch) still syncs the
    // pieces it wrote.
    let bad = dir.path().join("bad.jsonl");
    let second = Spec::new(3, 5)
        .schemas(vec![kv_schema("t")])
        .events(vec![ins(4, "t", row(4, "d"))]);
    // The second batch without its commit line: truncated.
    let truncated: String = second
        .jsonl()
        .lines()
        .filter(|l| !l.contains("\"commit\""))
        .map(|l| format!("{l}\n"))
        .collect();
    std::fs::write(&bad, format!("{}{truncated}", batch.jsonl())).unwrap();
    let calls = traced(
        "mooncdc-split",
        &["--max-events", "1", "--output-dir", "bad-out", "bad.jsonl"],
        dir.path(),
        1,
    );
    assert!(folder_synced_after_renames(&calls, "bad-out"), "{calls:#?}");
    // merge -o: the file, then its folder.
    std::fs::create_dir(dir.path().join("m")).unwrap();
    let calls = traced(
        "mooncdc-merge",
        &["-o", "m/merged.jsonl", "in.jsonl"],
        dir.path(),
        0,
    );
    assert!(folder_synced_after_renames(&calls, "m"), "{calls:#?}");
}

/// A piece that cannot be put in place (its name is taken by a folder)
/// stops the split: the pieces before it are in place and named, no later
/// piece is put in place although it was written, no temporary file is
/// left, and the error names the piece.
#[test]
fn a_piece_that_cannot_be_put_in_place_stops_the_later_ones() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    std::fs::create_dir_all(out.join("batch-1-2.jsonl/taken")).unwrap();
    let input = Spec::new(0, 4)
        .schemas(vec![kv_schema("t")])
        .events((1..=4).map(|i| ins(i, "t", row(i as i64, "v"))).collect());
    let out_s = out.display().to_string();
    let r = run(
        SPLIT,
        &["--max-events", "1", "--output-dir", &out_s],
        Some(&input.jsonl()),
    );
    r.expect_code(1);
    assert!(r.stderr.contains("batch-1-2.jsonl"), "{}", r.stderr);
    assert_eq!(
        r.stdout_str(),
        format!("{}\n", out.join("batch-0-1.jsonl").display()),
        "only the piece in place is named"
    );
    assert_eq!(
        list(&out),
        vec!["batch-0-1.jsonl", "batch-1-2.jsonl"],
        "no later piece, no temporary file"
    );
}

// ---------------------------------------------------------------- spool files

/// split, merge and compact hold what goes past a batch's first 8 MiB in a
/// spool file until its commit is checked. When its folder is full, the
/// error names the folder, what chose it (TMPDIR or --spool-dir) and the
/// way out; it used to say only `cannot write the spool file: No space
/// left on device`. `--spool-dir` with room is that way out. Nothing of the
/// batch is written before it fails.
#[test]
fn a_full_spool_folder_is_named_with_the_way_out() {
    let small = SmallFolder::new();
    let roomy = tempdir();
    let dir = tempdir();
    // One batch of about 12 MiB of event lines.
    let seqs: Vec<u128> = (1..=1200).collect();
    let text = Spec::new(0, 1200)
        .schemas(vec![kv_schema("t")])
        .events(inserts(&seqs, 10_000))
        .jsonl();
    let big = write(dir.path(), "big.jsonl", &text);
    let small_dir = small.path().to_str().unwrap().to_string();
    let roomy_dir = roomy.path().to_str().unwrap().to_string();
    for (name, args) in [
        ("mooncdc-split", vec!["--max-events", "100"]),
        ("mooncdc-merge", vec![]),
        ("mooncdc-compact", vec![]),
    ] {
        let run = |tmpdir: &str, spool_dir: Option<&str>| {
            let mut cmd = tool(name);
            cmd.env("TMPDIR", tmpdir).args(&args);
            if let Some(d) = spool_dir {
                cmd.args(["--spool-dir", d]);
            }
            let out = cmd.arg(&big).output().expect("run tool");
            (
                out.status.code(),
                out.stdout,
                String::from_utf8_lossy(&out.stderr).into_owned(),
            )
        };
        // TMPDIR full.
        let (code, stdout, stderr) = run(&small_dir, None);
        assert_eq!(code, Some(1), "{name} with TMPDIR full: {stderr}");
        for needle in [
            format!("spool file in {small_dir} (TMPDIR)"),
            "No space left on device".to_string(),
            "--spool-dir DIR (or TMPDIR=DIR)".to_string(),
            "held when this failed".to_string(),
        ] {
            assert!(
                stderr.contains(&needle),
                "{name} with TMPDIR full: the error should say {needle:?}:\n{stderr}"
            );
        }
        assert!(
            stdout.is_empty(),
            "{name}: nothing of the batch before its commit is checked"
        );
        // --spool-dir full, TMPDIR with room: --spool-dir wins, and is named.
        let (code, stdout, stderr) = run(&roomy_dir, Some(&small_dir));
        assert_eq!(code, Some(1), "{name} with --spool-dir full: {stderr}");
        assert!(
            stderr.contains(&format!("spool file in {small_dir} (--spool-dir)")),
            "{name} with --spool-dir full:\n{stderr}"
        );
        assert!(stdout.is_empty());
        // The way out: --spool-dir with room, TMPDIR still full.
        let (code, stdout, stderr) = run(&small_dir, Some(&roomy_dir));
        assert_eq!(code, Some(0), "{name} with --spool-dir with room: {stderr}");
        let (_, plain, _) = run(&roomy_dir, None);
        assert!(
            stdout.len() > 10 << 20 && stdout == plain,
            "{name}: the same output"
        );
    }
    // A --spool-dir that is no folder is a usage error at the start.
    let r = run(SPLIT, &["--spool-dir", "/nonexistent/spool", &big], None);
    r.expect_code(2)
        .stderr_has("--spool-dir /nonexistent/spool: no such folder");
}
