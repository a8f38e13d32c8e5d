//! mooncdc-merge, run as a real binary (docs/TOOLS.md "mooncdc-merge", docs/FORMAT.md §6 and §13).

mod common;

use common::*;
use mooncdc::wire::Batch;
use serde_json::Value as J;

const MERGE: &str = "mooncdc-merge";

fn inserts(table: &str, seqs: &[u128]) -> Vec<J> {
    seqs.iter()
        .map(|&s| ins(s, table, row(s as i64, &format!("v{s}"))))
        .collect()
}

/// Three contiguous batches: 0–5, 5–12, 12–20.
fn parts() -> [Spec; 3] {
    [
        Spec::new(0, 5)
            .high_water(40)
            .schemas(vec![kv_schema("t")])
            .events(inserts("t", &[1, 2, 5])),
        Spec::new(5, 12)
            .high_water(12)
            .schemas(vec![kv_schema("t")])
            .events(inserts("t", &[6, 9, 12])),
        Spec::new(12, 20)
            .high_water(25)
            .schemas(vec![kv_schema("t")])
            .events(inserts("t", &[15])),
    ]
}

fn merged_parts() -> Batch {
    Spec::new(0, 20)
        .high_water(40)
        .schemas(vec![kv_schema("t")])
        .events(inserts("t", &[1, 2, 5, 6, 9, 12, 15]))
        .batch()
}

/// Write each spec to its own file (JSONL) and return the paths.
fn files(dir: &std::path::Path, specs: &[Spec]) -> Vec<String> {
    specs
        .iter()
        .enumerate()
        .map(|(i, s)| write(dir, &format!("part{i}.jsonl"), &s.jsonl()))
        .collect()
}

// ---------------------------------------------------------------- joining

#[test]
fn files_in_any_order_are_ordered_by_start() {
    let dir = tempdir();
    let f = files(dir.path(), &parts());
    let orders = [
        [0, 1, 2],
        [0, 2, 1],
        [1, 0, 2],
        [1, 2, 0],
        [2, 0, 1],
        [2, 1, 0],
    ];
    for order in orders {
        let args: Vec<&str> = order.iter().map(|&i| f[i].as_str()).collect();
        let r = run(MERGE, &args, None);
        r.ok();
        assert_batches(&[merged_parts()], &batches(&r.stdout));
        assert_eq!(r.stdout, merged_parts().to_jsonl(), "canonical text");
    }
}

#[test]
fn inputs_holding_several_batches_are_ordered_by_their_first_start() {
    let dir = tempdir();
    let [a, b, c] = parts();
    let first = write(dir.path(), "ab.jsonl", &stream(&[a, b]));
    let last = write(dir.path(), "c.jsonl", &c.jsonl());
    let r = run(MERGE, &[&last, &first], None);
    r.ok();
    assert_batches(&[merged_parts()], &batches(&r.stdout));
}

/// An empty batch that does not advance (start = end, as capture writes when
/// nothing changed) shares its start with the batch that follows it.
#[test]
fn an_empty_batch_at_the_start_of_the_next_may_come_in_any_order() {
    let dir = tempdir();
    let still = Spec::new(10, 10).high_water(30);
    let next = Spec::new(10, 20)
        .high_water(30)
        .events(inserts("t", &[12, 20]));
    let fs = write(dir.path(), "still.jsonl", &still.jsonl());
    let fn_ = write(dir.path(), "next.jsonl", &next.jsonl());
    let expected = Spec::new(10, 20)
        .high_water(30)
        .events(inserts("t", &[12, 20]))
        .batch();
    for args in [[&fs, &fn_], [&fn_, &fs]] {
        let r = run(MERGE, &[args[0].as_str(), args[1].as_str()], None);
        r.ok();
        assert_batches(std::slice::from_ref(&expected), &batches(&r.stdout));
    }
}

#[test]
fn empty_batches_merge() {
    let dir = tempdir();
    let specs = [
        Spec::new(3, 3).high_water(9),
        Spec::new(3, 7).high_water(9),
        Spec::new(7, 9).high_water(9).events(inserts("t", &[8])),
    ];
    let f = files(dir.path(), &specs);
    let r = run(MERGE, &[&f[0], &f[1], &f[2]], None);
    r.ok();
    let expected = Spec::new(3, 9).high_water(9).events(inserts("t", &[8]));
    assert_batches(&[expected.batch()], &batches(&r.stdout));
}

#[test]
fn gap_is_an_error() {
    let dir = tempdir();
    let [a, _, c] = parts();
    let f = files(dir.path(), &[a, c]);
    for args in [[&f[0], &f[1]], [&f[1], &f[0]]] {
        let r = run(MERGE, &[args[0].as_str(), args[1].as_str()], None);
        r.expect_code(1).stdout_empty().stderr_has("gap");
        assert!(
            r.stderr.contains(&f[1]),
            "should name the input: {}",
            r.stderr
        );
    }
}

#[test]
fn overlap_is_an_error() {
    let dir = tempdir();
    let [a, _, _] = parts();
    let overlapping = Spec::new(3, 9).high_water(9).events(inserts("t", &[4, 9]));
    let f = files(dir.path(), &[a, overlapping]);
    let r = run(MERGE, &[&f[0], &f[1]], None);
    r.expect_code(1).stdout_empty().stderr_has("overlap");
    // The same batch twice overlaps itself.
    let r = run(MERGE, &[&f[0], &f[0]], None);
    r.expect_code(1).stdout_empty().stderr_has("overlap");
}

#[test]
fn second_source_is_an_error() {
    let dir = tempdir();
    let [a, b, _] = parts();
    let b = b.source("postgres:other");
    let f = files(dir.path(), &[a.clone(), b.clone()]);
    for args in [[&f[0], &f[1]], [&f[1], &f[0]]] {
        let r = run(MERGE, &[args[0].as_str(), args[1].as_str()], None);
        r.expect_code(1).stdout_empty().stderr_has("postgres:other");
    }
    // The same within one stream on standard input.
    let r = run(MERGE, &[], Some(&format!("{}{}", a.jsonl(), b.jsonl())));
    r.expect_code(1).stdout_empty();
}

// ---------------------------------------------------------------- one batch

#[test]
fn single_input_is_reencoded_canonically() {
    let input = concat!(
        r#"{ "high_water" : "9", "start" : {"sequence":"2", "source":"s"}, "format":"mooncdc.jsonl.v1", "kind":"header" }"#,
        "\n",
        r#"{"event":{"after":[["blob","00FFaB"],["real","2","-1"],["text-utf8","6869E282AC"],["real","0.1"],["integer","-7"],["null"],["real","8","-3"],["real","-0","0"],["text","\u00e9\"x\""]],"operation":"insert","table":"t","sequence":"3"},"kind":"event"}"#,
        "\r\n",
        r#"{"count":"1","end":{"source":"s","sequence":"5"},"kind":"commit"}"#,
    );
    let expected = concat!(
        r#"{"kind":"header","format":"mooncdc.jsonl.v1","start":{"source":"s","sequence":"2"},"high_water":"9"}"#,
        "\n",
        r#"{"kind":"event","event":{"sequence":"3","table":"t","operation":"insert","after":[["blob","00ffab"],["real","1","0"],["text","hi€"],["real","3602879701896397","-55"],["integer","-7"],["null"],["real","1","0"],["real","-0","0"],["text","é\"x\""]]}}"#,
        "\n",
        r#"{"kind":"commit","end":{"source":"s","sequence":"5"},"count":"1"}"#,
        "\n",
    );
    let dir = tempdir();
    let f = write(dir.path(), "odd.jsonl", input);
    let r = run(MERGE, &[&f], None);
    r.ok();
    assert_text(expected, &r.stdout);
    let r = run(MERGE, &[], Some(input));
    r.ok();
    assert_text(expected, &r.stdout);
    // Canonical output is a fixed point.
    let r = run(MERGE, &[], Some(expected));
    r.ok();
    assert_text(expected, &r.stdout);
}

#[test]
fn single_batch_with_schemas_is_kept_whole() {
    let [a, _, _] = parts();
    let r = run(MERGE, &[], Some(&a.jsonl()));
    r.ok();
    assert_text(&a.canonical(), &r.stdout);
}

#[test]
fn single_batch_with_empty_schemas_keeps_them() {
    let input = Spec::new(0, 2).high_water(2).schemas(vec![]);
    let r = run(MERGE, &[], Some(&input.jsonl()));
    r.ok();
    assert_text(&input.canonical(), &r.stdout);
}

// ---------------------------------------------------------------- header

#[test]
fn high_water_is_the_greatest() {
    let dir = tempdir();
    for hws in [[40, 12, 25], [5, 12, 90], [20, 60, 20]] {
        let mut specs = parts();
        for (s, hw) in specs.iter_mut().zip(hws) {
            s.high_water = hw;
        }
        let f = files(dir.path(), &specs);
        let r = run(MERGE, &[&f[2], &f[0], &f[1]], None);
        r.ok();
        let got = batches(&r.stdout);
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].high_water, *hws.iter().max().unwrap(), "{hws:?}");
    }
}

#[test]
fn schemas_are_united() {
    let dir = tempdir();
    let specs = [
        Spec::new(0, 2)
            .schemas(vec![kv_schema("t")])
            .events(inserts("t", &[1, 2])),
        Spec::new(2, 4)
            .schemas(vec![kv_schema("u"), kv_schema("t")])
            .events(inserts("u", &[3, 4])),
        Spec::new(4, 6)
            .schemas(vec![kv_schema("w")])
            .events(inserts("w", &[5, 6])),
    ];
    let f = files(dir.path(), &specs);
    let r = run(MERGE, &[&f[1], &f[2], &f[0]], None);
    r.ok();
    let got = batches(&r.stdout);
    assert_eq!(got.len(), 1);
    let mut tables: Vec<String> = got[0]
        .schemas
        .as_ref()
        .expect("merged batch has schemas")
        .iter()
        .map(|s| s.table.clone())
        .collect();
    tables.sort();
    assert_eq!(tables, vec!["t", "u", "w"], "each table's schema once");
    let mut events = inserts("t", &[1, 2]);
    events.extend(inserts("u", &[3, 4]));
    events.extend(inserts("w", &[5, 6]));
    let expected = Batch {
        schemas: got[0].schemas.clone(),
        ..Spec::new(0, 6).events(events).batch()
    };
    assert_batches(&[expected], &got);
}

#[test]
fn batches_without_schemas_merge_with_batches_whose_schemas_cover_them() {
    let dir = tempdir();
    let specs = [
        Spec::new(0, 2)
            .schemas(vec![kv_schema("t")])
            .events(inserts("t", &[1, 2])),
        Spec::new(2, 4).events(inserts("t", &[3, 4])),
    ];
    let f = files(dir.path(), &specs);
    let r = run(MERGE, &[&f[0], &f[1]], None);
    r.ok();
    let expected = Spec::new(0, 4)
        .schemas(vec![kv_schema("t")])
        .events(inserts("t", &[1, 2, 3, 4]));
    assert_batches(&[expected.batch()], &batches(&r.stdout));

    // A table no schema describes cannot go into a batch that has schemas.
    let specs = [
        Spec::new(0, 2)
            .schemas(vec![kv_schema("t")])
            .events(inserts("t", &[1, 2])),
        Spec::new(2, 4).events(inserts("u", &[3, 4])),
    ];
    let f = files(dir.path(), &specs);
    let r = run(MERGE, &[&f[0], &f[1]], None);
    r.expect_code(1).stdout_empty().stderr_has("\"u\"");
}

#[test]
fn differing_schemas_of_one_table_are_an_error() {
    let dir = tempdir();
    let other_t = schema(
        "t",
        &[("id", "INTEGER", false), ("v", "BLOB", true)],
        &["id"],
    );
    let specs = [
        Spec::new(0, 2)
            .schemas(vec![kv_schema("t")])
            .events(inserts("t", &[1, 2])),
        Spec::new(2, 4)
            .schemas(vec![other_t])
            .events(inserts("t", &[3, 4])),
    ];
    let f = files(dir.path(), &specs);
    let r = run(MERGE, &[&f[0], &f[1]], None);
    r.expect_code(1).stdout_empty().stderr_has("schema");
    // Also when they come as one stream.
    let r = run(MERGE, &[], Some(&stream(&specs)));
    r.expect_code(1).stdout_empty().stderr_has("schema");
}

// ---------------------------------------------------------------- --output

#[test]
fn output_file_is_written_atomically() {
    let dir = tempdir();
    let f = files(dir.path(), &parts());
    let out = dir.path().join("merged.jsonl");
    let out_s = out.to_str().unwrap();
    for flag in ["--output", "-o"] {
        let _ = std::fs::remove_file(&out);
        let r = run(MERGE, &[flag, out_s, &f[2], &f[1], &f[0]], None);
        r.ok().stdout_empty();
        let content = std::fs::read(&out).expect("output file written");
        assert_eq!(content, merged_parts().to_jsonl());
        assert_eq!(
            list(dir.path()),
            vec!["merged.jsonl", "part0.jsonl", "part1.jsonl", "part2.jsonl"],
            "no temporary files left"
        );
    }
    // Relative to the working folder.
    let r = run_in(
        MERGE,
        &["--output", "rel.jsonl", "part0.jsonl", "part1.jsonl"],
        None,
        Some(dir.path()),
    );
    r.ok();
    let got = batches(&std::fs::read(dir.path().join("rel.jsonl")).unwrap());
    let [a, b, _] = parts();
    let mut events = a.events.clone();
    events.extend(b.events.clone());
    let expected = Spec::new(0, 12)
        .high_water(40)
        .schemas(vec![kv_schema("t")])
        .events(events);
    assert_batches(&[expected.batch()], &got);
}

#[test]
fn output_file_is_not_created_on_error() {
    let dir = tempdir();
    let [a, _, c] = parts();
    let f = files(dir.path(), &[a, c]);
    let out = dir.path().join("merged.jsonl");
    let r = run(
        MERGE,
        &["--output", out.to_str().unwrap(), &f[0], &f[1]],
        None,
    );
    r.expect_code(1).stdout_empty().stderr_has("gap");
    assert!(!out.exists(), "no output file on error");
    assert_eq!(list(dir.path()), vec!["part0.jsonl", "part1.jsonl"]);

    // An existing file is left as it was.
    std::fs::write(&out, "old").unwrap();
    let r = run(
        MERGE,
        &["--output", out.to_str().unwrap(), &f[0], &f[1]],
        None,
    );
    r.expect_code(1);
    assert_eq!(std::fs::read_to_string(&out).unwrap(), "old");
    assert_eq!(
        list(dir.path()),
        vec!["merged.jsonl", "part0.jsonl", "part1.jsonl"]
    );

    // A truncated input: nothing written either.
    let _ = std::fs::remove_file(&out);
    let [a, b, _] = parts();
    let cut = format!("{}{}{}", a.jsonl(), b.header_line(), b.event_lines());
    let r = run(MERGE, &["--output", out.to_str().unwrap()], Some(&cut));
    r.expect_code(1).stderr_has("commit");
    assert!(!out.exists());
}

#[test]
fn output_file_is_readable_by_its_owner_only() {
    let dir = tempdir();
    files(dir.path(), &parts());
    let code = run_with_umask_022(
        MERGE,
        &["--output", "m.jsonl", "part0.jsonl", "part1.jsonl"],
        dir.path(),
    );
    assert_eq!(code, Some(0));
    assert_eq!(mode(&dir.path().join("m.jsonl")), 0o600);
}

// ---------------------------------------------------------------- formats

#[test]
fn json_output_format() {
    let dir = tempdir();
    let f = files(dir.path(), &parts());
    let r = run(
        MERGE,
        &["--output-format", "json", &f[1], &f[0], &f[2]],
        None,
    );
    r.ok();
    assert_batches(&[merged_parts()], &json_batches(&r.stdout));
    assert_eq!(
        Some(r.stdout),
        merged_parts().to_json(),
        "canonical JSON text"
    );

    let out = dir.path().join("m.json");
    let r = run(
        MERGE,
        &[
            "--output-format",
            "json",
            "--output",
            out.to_str().unwrap(),
            &f[0],
            &f[1],
            &f[2],
        ],
        None,
    );
    r.ok().stdout_empty();
    let text = std::fs::read_to_string(&out).unwrap();
    assert_batches(&[merged_parts()], &[Batch::from_json(&text).unwrap()]);
}

#[test]
fn stdin_stream_of_several_batches_is_merged() {
    let r = run(MERGE, &[], Some(&stream(&parts())));
    r.ok();
    assert_batches(&[merged_parts()], &batches(&r.stdout));
    let r = run(MERGE, &["-"], Some(&stream(&parts())));
    r.ok();
    assert_batches(&[merged_parts()], &batches(&r.stdout));
}

#[test]
fn stdin_and_files_together() {
    let dir = tempdir();
    let [a, b, c] = parts();
    let f = files(dir.path(), &[a, c]);
    let r = run(MERGE, &[&f[1], "-", &f[0]], Some(&b.jsonl()));
    r.ok();
    assert_batches(&[merged_parts()], &batches(&r.stdout));
}

#[test]
fn json_batch_input_is_accepted() {
    let dir = tempdir();
    let [a, b, c] = parts();
    // All JSON, one document per file.
    let fa = write(dir.path(), "a.json", &a.json());
    let fb = write(dir.path(), "b.json", &b.json());
    let fc = write(dir.path(), "c.json", &c.json());
    let r = run(MERGE, &[&fc, &fa, &fb], None);
    r.ok();
    assert_batches(&[merged_parts()], &batches(&r.stdout));
    // JSON and JSONL mixed.
    let fb_l = write(dir.path(), "b.jsonl", &b.jsonl());
    let r = run(MERGE, &[&fb_l, &fc, &fa], None);
    r.ok();
    assert_batches(&[merged_parts()], &batches(&r.stdout));
    // Several JSON documents on standard input, one a line.
    let docs: String = [&a, &b, &c].iter().map(|s| s.json()).collect();
    let r = run(MERGE, &[], Some(&docs));
    r.ok();
    assert_batches(&[merged_parts()], &batches(&r.stdout));
}

#[test]
fn pretty_printed_json_batch_input_is_accepted() {
    let [a, b, c] = parts();
    let dir = tempdir();
    let v: J = serde_json::from_str(&a.json()).unwrap();
    let fa = write(
        dir.path(),
        "a.json",
        &serde_json::to_string_pretty(&v).unwrap(),
    );
    let r = run(MERGE, &[&fa], None);
    r.ok();
    assert_batches(&[a.batch()], &batches(&r.stdout));
    let pretty: String = [&a, &b, &c]
        .iter()
        .map(|s| {
            let v: J = serde_json::from_str(&s.json()).unwrap();
            serde_json::to_string_pretty(&v).unwrap() + "\n"
        })
        .collect();
    let r = run(MERGE, &[], Some(&pretty));
    r.ok();
    assert_batches(&[merged_parts()], &batches(&r.stdout));
}

// ---------------------------------------------------------------- bad input

#[test]
fn bad_input_names_file_and_line() {
    let dir = tempdir();
    let [a, b, _] = parts();
    // Line 3 of b: an update without a before image.
    let bad = b
        .clone()
        .events(vec![ins(6, "t", row(6, "x")), json_event_without_before(9)]);
    let fa = write(dir.path(), "a.jsonl", &a.jsonl());
    let fb = write(dir.path(), "b.jsonl", &bad.jsonl());
    let r = run(MERGE, &[&fa, &fb], None);
    r.expect_code(1).stdout_empty();
    assert!(names_line(&r.stderr, &fb, 3), "{}", r.stderr);

    // A snapshot is not a batch stream.
    let fs = write(dir.path(), "s.json", &snapshot_json(&[kv_schema("t")], 0));
    run(MERGE, &[&fs], None).expect_code(1).stdout_empty();

    // No batch at all.
    run(MERGE, &[], Some("")).expect_code(1).stdout_empty();
}

fn json_event_without_before(seq: u128) -> J {
    serde_json::json!({"sequence": seq.to_string(), "table": "t", "operation": "update", "after": row(9, "y")})
}

// ---------------------------------------------------------------- common options

#[test]
fn help_and_version() {
    check_help_and_version(MERGE);
    let help = run(MERGE, &["--help"], None).stdout_str();
    assert!(help.contains("--output"), "--help does not list --output");
}

#[test]
fn input_limits() {
    check_limits(MERGE, &[], &stream(&parts()));
}

#[test]
fn usage_errors() {
    run(MERGE, &["--bogus"], Some(&stream(&parts())))
        .expect_code(2)
        .stdout_empty();
    run(MERGE, &["--output-format", "yaml"], Some(&stream(&parts())))
        .expect_code(2)
        .stdout_empty();
}

#[test]
fn closed_downstream_pipe_ends_quietly() {
    let dir = tempdir();
    let f = write(dir.path(), "big.jsonl", &big_batch(60_000, true));
    let (code, stderr) = run_into_closed_pipe(MERGE, &[], &f);
    assert_eq!(stderr, "", "stderr should be empty");
    assert_eq!(code, Some(0), "pipeline status (merge's, with pipefail)");
}

/// `-o -` is standard output, as with other Unix tools: no file named `-`.
#[test]
fn output_dash_is_standard_output() {
    let dir = tempdir();
    let input = Spec::new(0, 2).events(inserts("t", &[1, 2]));
    let f = write(dir.path(), "in.jsonl", &input.jsonl());
    let r = run_in("mooncdc-merge", &["-o", "-", &f], None, Some(dir.path()));
    r.ok();
    assert_batches(&[input.batch()], &batches(&r.stdout));
    assert_eq!(list(dir.path()), vec!["in.jsonl"], "no file named -");
}

/// The `objects` view: one object per event, columns by name, natural JSON
/// values (exact numbers, large integers as strings, BLOB as hex), schema
/// changes as their own lines; never accepted back as input.
#[test]
fn objects_view_for_people_and_jq() {
    let s = schema(
        "t",
        &[
            ("id", "INTEGER", false),
            ("r", "REAL", true),
            ("b", "BLOB", true),
            ("t", "TEXT", true),
        ],
        &["id"],
    );
    let big = 1i64 << 60;
    let spec = Spec::new(0, 4).schemas(vec![s.clone()]).events(vec![
        ins(
            1,
            "t",
            serde_json::json!([int(7), ["real", "0.1"], ["blob", "00ff"], text("é")]),
        ),
        ins(
            2,
            "t",
            serde_json::json!([int(big), ["null"], ["null"], ["null"]]),
        ),
        del(
            3,
            "t",
            serde_json::json!([int(7), ["real", "0.1"], ["blob", "00ff"], text("é")]),
        ),
    ]);
    let r = run(MERGE, &["--output-format", "objects"], Some(&spec.jsonl()));
    r.ok();
    let lines: Vec<J> = r
        .stdout_str()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 3);
    assert_eq!(lines[0]["after"]["id"], serde_json::json!(7));
    assert_eq!(lines[0]["after"]["r"].as_f64(), Some(0.1));
    assert_eq!(lines[0]["after"]["b"], serde_json::json!("00ff"));
    assert_eq!(lines[0]["after"]["t"], serde_json::json!("é"));
    assert_eq!(
        lines[1]["after"]["id"],
        serde_json::json!(big.to_string()),
        "beyond 2^53: a string"
    );
    assert_eq!(lines[1]["after"]["r"], J::Null);
    assert_eq!(lines[2]["operation"], serde_json::json!("delete"));
    assert!(lines[2].get("after").is_none() && lines[2]["before"]["id"] == 7);
    // A view, not an input.
    let back = run(MERGE, &[], Some(&r.stdout_str()));
    back.expect_code(1);
    // jq (scripts/test.sh installs it): the first questions a user asks.
    {
        let jq = |filter: &str| {
            let out = std::process::Command::new("jq")
                .args(["-c", filter])
                .stdin(std::process::Stdio::piped())
                .stdout(std::process::Stdio::piped())
                .spawn()
                .and_then(|mut c| {
                    use std::io::Write;
                    c.stdin
                        .take()
                        .unwrap()
                        .write_all(r.stdout_str().as_bytes())?;
                    c.wait_with_output()
                })
                .unwrap();
            String::from_utf8(out.stdout).unwrap()
        };
        assert_eq!(
            jq(r#"select(.table == "t") | .sequence"#).lines().count(),
            3
        );
        assert_eq!(
            jq(r#"select(.operation == "delete") | .before.id"#).trim(),
            "7"
        );
        assert_eq!(jq(r#"select(.after.r > 0.05) | .after.id"#).trim(), "7");
    }
}

// ---------------------------------------------------------------- other spellings

/// A JSON string as Python's `json.dumps` writes it (every non-ASCII
/// character escaped, surrogate pairs beyond the BMP), with `/` escaped too.
fn ascii_str(s: &str, out: &mut String) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '/' => out.push_str("\\/"),
            c if c < ' ' || !c.is_ascii() => {
                let mut units = [0u16; 2];
                for u in c.encode_utf16(&mut units) {
                    out.push_str(&format!("\\u{u:04x}"));
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// A record as another producer spells it: members in reverse order, `", "`
/// and `": "` between tokens, strings escaped as [`ascii_str`] does.
fn respell(v: &J, out: &mut String) {
    match v {
        J::Object(m) => {
            out.push('{');
            for (i, (k, x)) in m.iter().rev().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                ascii_str(k, out);
                out.push_str(": ");
                respell(x, out);
            }
            out.push('}');
        }
        J::Array(a) => {
            out.push('[');
            for (i, x) in a.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                respell(x, out);
            }
            out.push(']');
        }
        J::String(s) => ascii_str(s, out),
        other => out.push_str(&other.to_string()),
    }
}

fn respell_stream(canonical: &str) -> String {
    let mut out = String::new();
    for line in canonical.lines() {
        respell(&serde_json::from_str(line).expect("JSON"), &mut out);
        out.push('\n');
    }
    out
}

/// A batch stream written by another producer (Python's json.dumps
/// spelling, members in another order) is read by the path that rewrites
/// event lines into the canonical spelling: merge, compact and split write
/// exactly what they write for the canonical stream, over several
/// read-ahead chunks, and a bad value in such a line is still refused with
/// the strict decoder's message at its line.
#[test]
fn other_producers_spelling_gives_the_same_output() {
    let mut events = vec![
        ins(
            1,
            "w",
            serde_json::json!([
                ["integer", "1"],
                ["text", "café 😀 a/b \"q\" \\ \u{1}"],
                ["real", "1", "-3"],
                ["blob", "00ff"],
                ["null"]
            ]),
        ),
        upd(
            2,
            "w",
            serde_json::json!([
                ["integer", "1"],
                ["text", "café 😀 a/b \"q\" \\ \u{1}"],
                ["real", "1", "-3"],
                ["blob", "00ff"],
                ["null"]
            ]),
            serde_json::json!([
                ["integer", "1"],
                ["text", "Ω"],
                ["real", "3602879701896397", "-55"],
                ["blob", ""],
                ["text", ""]
            ]),
        ),
        ins(3, "q\"é/t", row(3, "named with escapes")),
        del(4, "q\"é/t", row(3, "named with escapes")),
    ];
    events.extend((5..=3000).map(|s| ins(s, "t", row(s as i64, &format!("row {s}: Zoë/Ærø")))));
    let wide = schema(
        "w",
        &[
            ("id", "INTEGER", false),
            ("s", "TEXT", true),
            ("r", "REAL", true),
            ("b", "BLOB", true),
            ("n", "TEXT", true),
        ],
        &["id"],
    );
    let spec = Spec::new(0, 3000)
        .schemas(vec![kv_schema("t"), wide, kv_schema("q\"é/t")])
        .events(events)
        .jsonl();
    let dir = tempdir();
    // The canonical spelling: what merge writes.
    let s = write(dir.path(), "spec.jsonl", &spec);
    let canonical = run("mooncdc-merge", &[&s], None).ok().stdout_str();
    let other = respell_stream(&canonical);
    assert!(other
        .lines()
        .all(|l| l.contains("\": ") && !canonical.contains(l)));
    let c = write(dir.path(), "canonical.jsonl", &canonical);
    let o = write(dir.path(), "other.jsonl", &other);
    for (tool, args) in [
        ("mooncdc-merge", &[][..]),
        ("mooncdc-compact", &[][..]),
        ("mooncdc-split", &["--max-events", "700"][..]),
    ] {
        let want = run(tool, &[args, &[c.as_str()]].concat(), None);
        want.ok();
        let got = run(tool, &[args, &[o.as_str()]].concat(), None);
        got.ok();
        assert!(got.stdout == want.stdout, "{tool}: the output differs");
    }
    // The merged output is the canonical stream itself.
    assert!(run("mooncdc-merge", &[&o], None).stdout == canonical.as_bytes());

    // A value the strict decoder refuses, on line 1000 in the other spelling.
    let bad: String = other
        .lines()
        .enumerate()
        .map(|(i, l)| {
            if i + 1 == 1000 {
                l.replace("[\"integer\", \"999\"]", "[\"integer\", \"0999\"]") + "\n"
            } else {
                l.to_string() + "\n"
            }
        })
        .collect();
    assert!(bad != other, "line 1000 is event 999");
    let b = write(dir.path(), "bad.jsonl", &bad);
    for tool in ["mooncdc-merge", "mooncdc-compact", "mooncdc-split"] {
        let r = run(tool, &[&b], None);
        r.expect_code(1)
            .stdout_empty()
            .stderr_has("bad INTEGER: \"0999\" is not a canonical decimal integer")
            .stderr_has(" column ");
        assert!(names_line(&r.stderr, &b, 1000), "{tool}: {}", r.stderr);
    }
}
