//! mooncdc-compact, run as a real binary (docs/TOOLS.md "mooncdc-compact", docs/FORMAT.md §6 and §13).

mod common;

use common::*;
use mooncdc::wire::{Event, Operation, Value};
use serde_json::{json, Value as J};
use std::collections::HashMap;

const COMPACT: &str = "mooncdc-compact";

fn rw(id: i64, v: &str) -> J {
    row(id, v)
}

/// A batch 0–100 (high water 120) of tables `t` and `u` with schemas.
fn tb(events: Vec<J>) -> Spec {
    Spec::new(0, 100)
        .high_water(120)
        .schemas(vec![kv_schema("t"), kv_schema("u")])
        .events(events)
}

/// Compact `input` as one batch and compare with `expected` exactly.
#[track_caller]
fn check(input: Vec<J>, expected: Vec<J>) {
    // Folding always removes events, and a batch with folded events is marked.
    let folded = expected.len() < input.len();
    let r = run(COMPACT, &[], Some(&tb(input).jsonl()));
    r.ok();
    assert_batches(
        &[tb(expected).compacted(folded).batch()],
        &batches(&r.stdout),
    );
}

// ---------------------------------------------------------------- fold rules

#[test]
fn insert_then_update_is_an_insert_of_the_new_image() {
    check(
        vec![ins(3, "t", rw(1, "a")), upd(7, "t", rw(1, "a"), rw(1, "b"))],
        vec![ins(7, "t", rw(1, "b"))],
    );
}

#[test]
fn insert_then_delete_vanishes_and_keeps_the_interval() {
    let input = tb(vec![ins(3, "t", rw(1, "a")), del(7, "t", rw(1, "a"))]);
    let r = run(COMPACT, &[], Some(&input.jsonl()));
    r.ok();
    let got = batches(&r.stdout);
    assert_batches(&[tb(vec![]).compacted(true).batch()], &got);
    assert_eq!(
        (got[0].start.sequence(), got[0].end.sequence()),
        (0, 100),
        "interval kept"
    );
    assert!(
        r.stdout_str().contains(r#""count":"0""#),
        "count updated: {}",
        r.stdout_str()
    );
}

#[test]
fn update_then_update_is_one_update() {
    check(
        vec![
            upd(3, "t", rw(1, "a"), rw(1, "b")),
            upd(7, "t", rw(1, "b"), rw(1, "c")),
        ],
        vec![upd(7, "t", rw(1, "a"), rw(1, "c"))],
    );
}

#[test]
fn update_then_delete_is_a_delete_of_the_first_image() {
    check(
        vec![upd(3, "t", rw(1, "a"), rw(1, "b")), del(7, "t", rw(1, "b"))],
        vec![del(7, "t", rw(1, "a"))],
    );
}

#[test]
fn delete_then_insert_is_an_update() {
    check(
        vec![del(3, "t", rw(1, "a")), ins(7, "t", rw(1, "b"))],
        vec![upd(7, "t", rw(1, "a"), rw(1, "b"))],
    );
}

#[test]
fn longer_runs_fold_to_one_event_with_the_last_sequence() {
    check(
        vec![
            ins(1, "t", rw(1, "a")),
            upd(2, "t", rw(1, "a"), rw(1, "b")),
            upd(5, "t", rw(1, "b"), rw(1, "c")),
        ],
        vec![ins(5, "t", rw(1, "c"))],
    );
    check(
        vec![
            del(1, "t", rw(1, "a")),
            ins(2, "t", rw(1, "b")),
            upd(3, "t", rw(1, "b"), rw(1, "c")),
            del(9, "t", rw(1, "c")),
        ],
        vec![del(9, "t", rw(1, "a"))],
    );
    check(
        vec![
            ins(1, "t", rw(1, "a")),
            upd(2, "t", rw(1, "a"), rw(1, "b")),
            del(3, "t", rw(1, "b")),
        ],
        vec![],
    );
    check(
        vec![
            del(10, "t", rw(1, "a")),
            ins(20, "t", rw(1, "b")),
            del(30, "t", rw(1, "b")),
            ins(40, "t", rw(1, "c")),
        ],
        vec![upd(40, "t", rw(1, "a"), rw(1, "c"))],
    );
}

#[test]
fn separate_runs_fold_separately() {
    check(
        vec![
            ins(1, "t", rw(1, "a")),
            upd(2, "t", rw(1, "a"), rw(1, "b")),
            ins(3, "t", rw(2, "x")),
            upd(4, "t", rw(2, "x"), rw(2, "y")),
            upd(5, "u", rw(2, "p"), rw(2, "q")),
            del(6, "u", rw(2, "q")),
        ],
        vec![
            ins(2, "t", rw(1, "b")),
            ins(4, "t", rw(2, "y")),
            del(6, "u", rw(2, "p")),
        ],
    );
}

// ---------------------------------------------------------------- what ends a run

#[test]
fn events_on_other_rows_end_runs() {
    let unchanged = |events: Vec<J>| check(events.clone(), events);
    unchanged(vec![
        ins(1, "t", rw(1, "a")),
        ins(2, "t", rw(2, "x")),
        upd(3, "t", rw(1, "a"), rw(1, "b")),
    ]);
    unchanged(vec![
        upd(1, "t", rw(1, "a"), rw(1, "b")),
        upd(2, "t", rw(2, "x"), rw(2, "y")),
        upd(3, "t", rw(1, "b"), rw(1, "c")),
    ]);
    unchanged(vec![
        upd(1, "t", rw(1, "a"), rw(1, "b")),
        del(2, "t", rw(3, "z")),
        del(3, "t", rw(1, "b")),
    ]);
    // Same key values in another table are another row.
    unchanged(vec![
        ins(1, "t", rw(1, "a")),
        ins(2, "u", rw(1, "a")),
        upd(3, "t", rw(1, "a"), rw(1, "b")),
    ]);
    unchanged(vec![ins(1, "t", rw(1, "a")), del(2, "u", rw(1, "a"))]);
}

#[test]
fn key_changing_updates_end_runs() {
    let unchanged = |events: Vec<J>| check(events.clone(), events);
    unchanged(vec![
        ins(1, "t", rw(1, "a")),
        upd(2, "t", rw(1, "a"), rw(2, "a")),
        upd(3, "t", rw(2, "a"), rw(2, "b")),
    ]);
    unchanged(vec![
        upd(1, "t", rw(1, "a"), rw(1, "b")),
        upd(2, "t", rw(1, "b"), rw(5, "b")),
        del(3, "t", rw(5, "b")),
    ]);
    unchanged(vec![
        upd(1, "t", rw(1, "a"), rw(5, "a")),
        upd(2, "t", rw(5, "a"), rw(1, "a")),
    ]);
    unchanged(vec![
        del(1, "t", rw(1, "a")),
        ins(2, "t", rw(2, "b")),
        upd(3, "t", rw(2, "b"), rw(1, "b")),
        del(4, "t", rw(1, "b")),
    ]);
}

/// The key is the schema's key, wherever its columns are in the row.
#[test]
fn the_key_comes_from_the_schema() {
    let sch = schema(
        "k",
        &[("id", "INTEGER", false), ("code", "TEXT", false)],
        &["code"],
    );
    let b = |events: Vec<J>| Spec::new(0, 10).schemas(vec![sch.clone()]).events(events);
    // Changing `id` is not a key change: the updates fold.
    let input = b(vec![
        ins(1, "k", rw(1, "A")),
        upd(2, "k", rw(1, "A"), rw(2, "A")),
    ]);
    let out = run(COMPACT, &[], Some(&input.jsonl()));
    out.ok();
    assert_batches(
        &[b(vec![ins(2, "k", rw(2, "A"))]).compacted(true).batch()],
        &batches(&out.stdout),
    );
    // Changing `code` is: nothing folds.
    let events = vec![
        ins(1, "k", rw(1, "A")),
        upd(2, "k", rw(1, "A"), rw(1, "B")),
        del(3, "k", rw(1, "B")),
    ];
    let out = run(COMPACT, &[], Some(&b(events.clone()).jsonl()));
    out.ok();
    assert_batches(&[b(events).batch()], &batches(&out.stdout));
    // Rows 1 and 2 with the same code are the same row.
    let out = run(
        COMPACT,
        &[],
        Some(&b(vec![ins(1, "k", rw(1, "A")), del(2, "k", rw(1, "A"))]).jsonl()),
    );
    out.ok();
    assert_batches(&[b(vec![]).compacted(true).batch()], &batches(&out.stdout));
}

#[test]
fn no_fold_when_the_before_image_differs_from_the_previous_after_image() {
    let unchanged = |events: Vec<J>| check(events.clone(), events);
    unchanged(vec![
        ins(1, "t", rw(1, "a")),
        upd(2, "t", rw(1, "z"), rw(1, "b")),
    ]);
    unchanged(vec![ins(1, "t", rw(1, "a")), del(2, "t", rw(1, "z"))]);
    unchanged(vec![
        upd(1, "t", rw(1, "a"), rw(1, "b")),
        upd(2, "t", rw(1, "a"), rw(1, "c")),
    ]);
    unchanged(vec![
        upd(1, "t", rw(1, "a"), rw(1, "b")),
        del(2, "t", rw(1, "c")),
    ]);
    // Values compare exactly: INTEGER 5 is not TEXT "5", nor REAL 5.
    unchanged(vec![
        ins(1, "t", json!([int(1), int(5)])),
        upd(2, "t", json!([int(1), text("5")]), rw(1, "b")),
    ]);
    unchanged(vec![
        ins(1, "t", json!([int(1), int(5)])),
        del(2, "t", json!([int(1), ["real", "5", "0"]])),
    ]);
    // An insert of an existing row is not folded with the insert before it.
    unchanged(vec![ins(1, "t", rw(1, "a")), ins(2, "t", rw(1, "b"))]);
    unchanged(vec![del(1, "t", rw(1, "a")), del(2, "t", rw(1, "a"))]);
    unchanged(vec![
        upd(1, "t", rw(1, "a"), rw(1, "b")),
        ins(2, "t", rw(1, "c")),
    ]);
}

#[test]
fn equal_values_spelled_differently_still_fold() {
    // ["real","2","-1"] and ["real","1","0"] are both 1.0.
    check(
        vec![
            ins(1, "t", json!([int(1), ["real", "2", "-1"]])),
            del(2, "t", json!([int(1), ["real", "1", "0"]])),
        ],
        vec![],
    );
    check(
        vec![
            ins(1, "t", json!([int(1), ["text-utf8", "6869"]])),
            upd(2, "t", json!([int(1), text("hi")]), rw(1, "b")),
        ],
        vec![ins(2, "t", rw(1, "b"))],
    );
}

#[test]
fn runs_do_not_cross_batches() {
    let specs = [
        Spec::new(0, 5)
            .schemas(vec![kv_schema("t")])
            .events(vec![ins(1, "t", rw(1, "a"))]),
        Spec::new(5, 9).schemas(vec![kv_schema("t")]).events(vec![
            upd(6, "t", rw(1, "a"), rw(1, "b")),
            del(8, "t", rw(1, "b")),
        ]),
        Spec::new(9, 9).schemas(vec![kv_schema("t")]),
    ];
    let r = run(COMPACT, &[], Some(&stream(&specs)));
    r.ok();
    let expected = [
        specs[0].batch(),
        Spec::new(5, 9)
            .schemas(vec![kv_schema("t")])
            .events(vec![del(8, "t", rw(1, "a"))])
            .compacted(true)
            .batch(),
        specs[2].batch(),
    ];
    assert_batches(&expected, &batches(&r.stdout));
}

// ---------------------------------------------------------------- properties

/// A small deterministic generator (xorshift).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// A valid history over a few rows of tables `t` and `u`, starting from
/// `initial` (rows that exist before the batch).
fn history(seed: u64, len: usize, with_truncates: bool) -> (Vec<(String, i64, String)>, Vec<J>) {
    let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
    let mut state: HashMap<(String, i64), String> = HashMap::new();
    let mut initial = Vec::new();
    for table in ["t", "u"] {
        for id in 1..=2 {
            let v = format!("init-{table}{id}");
            state.insert((table.to_string(), id), v.clone());
            initial.push((table.to_string(), id, v));
        }
    }
    let mut events = Vec::new();
    let mut seq: u128 = 0;
    let mut n = 0;
    while events.len() < len {
        seq += 1 + rng.below(3) as u128;
        n += 1;
        let table = if rng.below(4) == 0 { "u" } else { "t" };
        let id = 1 + rng.below(4) as i64;
        let key = (table.to_string(), id);
        let new_v = format!("v{n}");
        if with_truncates && rng.below(25) == 0 {
            state.retain(|(t, _), _| t != table);
            events.push(trunc(seq, table));
            continue;
        }
        match state.get(&key).cloned() {
            None => {
                state.insert(key, new_v.clone());
                events.push(ins(seq, table, rw(id, &new_v)));
            }
            Some(old) => match rng.below(5) {
                0 | 1 => {
                    state.insert(key, new_v.clone());
                    events.push(upd(seq, table, rw(id, &old), rw(id, &new_v)));
                }
                2 => {
                    state.remove(&key);
                    events.push(del(seq, table, rw(id, &old)));
                }
                _ => {
                    // Move the row to a free key, else update it in place.
                    let to = 1 + rng.below(4) as i64;
                    let to_key = (table.to_string(), to);
                    if to != id && !state.contains_key(&to_key) {
                        state.remove(&key);
                        state.insert(to_key, old.clone());
                        events.push(upd(seq, table, rw(id, &old), rw(to, &old)));
                    } else {
                        state.insert(key, new_v.clone());
                        events.push(upd(seq, table, rw(id, &old), rw(id, &new_v)));
                    }
                }
            },
        }
    }
    (initial, events)
}

fn key_of(row: &[Value]) -> String {
    format!("{:?}", row[0])
}

/// Apply events with a target's image checks; panics on any divergence.
fn apply(state: &mut HashMap<(String, String), Vec<Value>>, events: &[Event], what: &str) {
    for e in events {
        match e.operation {
            Operation::Truncate { .. } => state.retain(|(t, _), _| *t != e.table),
            Operation::Insert => {
                let a = e.after.clone().unwrap();
                let k = (e.table.clone(), key_of(&a));
                assert!(
                    !state.contains_key(&k),
                    "{what}: insert {} of an existing row",
                    e.sequence
                );
                state.insert(k, a);
            }
            Operation::Update | Operation::Delete => {
                let b = e.before.clone().unwrap();
                let k = (e.table.clone(), key_of(&b));
                let held = state
                    .remove(&k)
                    .unwrap_or_else(|| panic!("{what}: event {} on a missing row", e.sequence));
                assert!(
                    held.len() == b.len() && held.iter().zip(&b).all(|(x, y)| x.same(y)),
                    "{what}: event {} before image differs from the row held",
                    e.sequence
                );
                if let Some(a) = e.after.clone() {
                    let k = (e.table.clone(), key_of(&a));
                    assert!(
                        !state.contains_key(&k),
                        "{what}: update {} onto an existing row",
                        e.sequence
                    );
                    state.insert(k, a);
                }
            }
        }
    }
}

fn initial_state(initial: &[(String, i64, String)]) -> HashMap<(String, String), Vec<Value>> {
    initial
        .iter()
        .map(|(t, id, v)| {
            let row = vec![Value::Integer(*id), Value::Text(v.clone())];
            ((t.clone(), key_of(&row)), row)
        })
        .collect()
}

#[test]
fn compaction_keeps_the_final_state_and_is_idempotent() {
    let (mut total_in, mut total_out) = (0, 0);
    for seed in 1..=50u64 {
        // Every other history has truncates (barriers that also discard
        // the earlier events of their table).
        let (initial, events) = history(seed, 80, seed % 2 == 0);
        let input = Spec::new(0, 1000)
            .high_water(1000)
            .schemas(vec![kv_schema("t"), kv_schema("u")])
            .events(events);
        let once = run(COMPACT, &[], Some(&input.jsonl()));
        once.ok();
        let got = batches(&once.stdout);
        assert_eq!(got.len(), 1);
        let out = &got[0];
        assert_eq!(
            (out.start.clone(), out.end.clone(), out.high_water),
            (input.batch().start, input.batch().end, 1000),
            "seed {seed}: interval and high water kept"
        );
        assert_eq!(
            out.schemas,
            input.batch().schemas,
            "seed {seed}: schemas kept"
        );
        assert!(out.events.len() <= input.events.len());
        total_in += input.events.len();
        total_out += out.events.len();

        // The compacted batch applies cleanly with image checks and leaves
        // the same rows as the original.
        let mut want = initial_state(&initial);
        apply(&mut want, &input.batch().events, "original");
        let mut have = initial_state(&initial);
        apply(&mut have, &out.events, &format!("seed {seed}: compacted"));
        let mut w: Vec<_> = want.into_iter().collect();
        let mut h: Vec<_> = have.into_iter().collect();
        w.sort_by(|a, b| a.0.cmp(&b.0));
        h.sort_by(|a, b| a.0.cmp(&b.0));
        assert_eq!(w, h, "seed {seed}: final state differs");

        // Compacting the output again changes nothing, byte for byte.
        let twice = run(COMPACT, &[], Some(&once.stdout_str()));
        twice.ok();
        assert_text(&once.stdout_str(), &twice.stdout);
    }
    assert!(
        total_out * 10 < total_in * 9,
        "the generated histories should give compaction work: {total_in} events in, {total_out} out"
    );
}

// ---------------------------------------------------------------- schemas

fn no_schema_batch() -> (Spec, Spec) {
    let input = Spec::new(0, 10).high_water(10).events(vec![
        ins(1, "t", rw(1, "a")),
        upd(2, "t", rw(1, "a"), rw(1, "b")),
        ins(3, "orders", rw(7, "x")),
        del(4, "orders", rw(7, "x")),
    ]);
    let expected = Spec::new(0, 10)
        .high_water(10)
        .compacted(true)
        .events(vec![ins(2, "t", rw(1, "b"))]);
    (input, expected)
}

/// The compacted batch, allowing the tool to add the schemas it was given.
#[track_caller]
fn assert_compacted_without_header_schemas(expected: &Spec, out: &[u8]) {
    let mut got = batches(out);
    for b in &mut got {
        if let Some(s) = &b.schemas {
            for sch in s {
                assert!(["t", "orders"].contains(&sch.table.as_str()), "{sch:?}");
            }
            b.schemas = None;
        }
    }
    assert_batches(&[expected.batch()], &got);
}

#[test]
fn schema_option_with_a_json_array() {
    let dir = tempdir();
    let (input, expected) = no_schema_batch();
    let arr = serde_json::to_string(&vec![kv_schema("t"), kv_schema("orders")]).unwrap();
    let sf = write(dir.path(), "schemas.json", &arr);
    let fi = write(dir.path(), "in.jsonl", &input.jsonl());
    let r = run(COMPACT, &["--schema", &sf, &fi], None);
    r.ok();
    assert_compacted_without_header_schemas(&expected, &r.stdout);
    // Pretty-printed array, and input on standard input.
    let pretty = serde_json::to_string_pretty(&vec![kv_schema("orders"), kv_schema("t")]).unwrap();
    let sf2 = write(dir.path(), "pretty.json", &pretty);
    let r = run(COMPACT, &["--schema", &sf2], Some(&input.jsonl()));
    r.ok();
    assert_compacted_without_header_schemas(&expected, &r.stdout);
}

#[test]
fn schema_option_with_a_json_snapshot() {
    let dir = tempdir();
    let (input, expected) = no_schema_batch();
    let sf = write(
        dir.path(),
        "snap.json",
        &snapshot_json(&[kv_schema("t"), kv_schema("orders")], 0),
    );
    let r = run(COMPACT, &["--schema", &sf], Some(&input.jsonl()));
    r.ok();
    assert_compacted_without_header_schemas(&expected, &r.stdout);
}

#[test]
fn schema_option_with_a_jsonl_snapshot() {
    let dir = tempdir();
    let (input, expected) = no_schema_batch();
    let sf = write(
        dir.path(),
        "snap.jsonl",
        &snapshot_jsonl(&[kv_schema("t"), kv_schema("orders")], 0),
    );
    let r = run(COMPACT, &["--schema", &sf], Some(&input.jsonl()));
    r.ok();
    assert_compacted_without_header_schemas(&expected, &r.stdout);
}

#[test]
fn stream_schemas_are_used_without_the_option() {
    let (input, expected) = no_schema_batch();
    let with = input
        .clone()
        .schemas(vec![kv_schema("t"), kv_schema("orders")]);
    let r = run(COMPACT, &[], Some(&with.jsonl()));
    r.ok();
    let expected = expected.schemas(vec![kv_schema("t"), kv_schema("orders")]);
    assert_batches(&[expected.batch()], &batches(&r.stdout));
}

#[test]
fn missing_schema_is_an_error_naming_the_table() {
    let dir = tempdir();
    let (input, _) = no_schema_batch();
    let r = run(COMPACT, &[], Some(&input.jsonl()));
    r.expect_code(1).stdout_empty().stderr_has("\"t\"");
    // A schema file that lacks one of the tables.
    let sf = write(
        dir.path(),
        "t.json",
        &serde_json::to_string(&vec![kv_schema("t")]).unwrap(),
    );
    let r = run(COMPACT, &["--schema", &sf], Some(&input.jsonl()));
    r.expect_code(1).stdout_empty().stderr_has("\"orders\"");
}

#[test]
fn missing_schema_error_names_file_and_line() {
    let dir = tempdir();
    let (input, _) = no_schema_batch();
    let f = write(dir.path(), "in.jsonl", &input.jsonl());
    let r = run(COMPACT, &[&f], None);
    r.expect_code(1).stdout_empty();
    assert!(
        names_line(&r.stderr, &f, 2),
        "should name {f}:2: {}",
        r.stderr
    );
}

#[test]
fn bad_schema_files_are_errors() {
    let dir = tempdir();
    let (input, _) = no_schema_batch();
    let missing = dir.path().join("missing.json");
    let r = run(
        COMPACT,
        &["--schema", missing.to_str().unwrap()],
        Some(&input.jsonl()),
    );
    r.expect_code(1).stdout_empty().stderr_has("missing.json");
    let bad = write(dir.path(), "bad.json", "[{\"table\":\"t\"}]");
    let r = run(COMPACT, &["--schema", &bad], Some(&input.jsonl()));
    r.expect_code(1).stdout_empty().stderr_has("bad.json");
    let key = write(
        dir.path(),
        "key.json",
        &serde_json::to_string(&vec![schema("t", &[("id", "INTEGER", false)], &["nope"])]).unwrap(),
    );
    let r = run(COMPACT, &["--schema", &key], Some(&input.jsonl()));
    r.expect_code(1).stdout_empty();
}

// ---------------------------------------------------------------- formats and inputs

#[test]
fn json_output_format() {
    let input = tb(vec![
        ins(3, "t", rw(1, "a")),
        upd(7, "t", rw(1, "a"), rw(1, "b")),
        ins(9, "u", rw(4, "q")),
    ]);
    let r = run(COMPACT, &["--output-format", "json"], Some(&input.jsonl()));
    r.ok();
    let expected = tb(vec![ins(7, "t", rw(1, "b")), ins(9, "u", rw(4, "q"))]).compacted(true);
    assert_batches(&[expected.batch()], &json_batches(&r.stdout));
    assert_eq!(Some(r.stdout), expected.batch().to_json());
}

#[test]
fn json_input_files_and_dash() {
    let dir = tempdir();
    let a = Spec::new(0, 5)
        .schemas(vec![kv_schema("t")])
        .events(vec![ins(1, "t", rw(1, "a")), del(2, "t", rw(1, "a"))]);
    let b = Spec::new(5, 9)
        .schemas(vec![kv_schema("t")])
        .events(vec![del(6, "t", rw(2, "a")), ins(7, "t", rw(2, "b"))]);
    let fa = write(dir.path(), "a.json", &a.json());
    let fb = write(dir.path(), "b.jsonl", &b.jsonl());
    let expected = [
        Spec::new(0, 5)
            .schemas(vec![kv_schema("t")])
            .compacted(true)
            .batch(),
        Spec::new(5, 9)
            .schemas(vec![kv_schema("t")])
            .events(vec![upd(7, "t", rw(2, "a"), rw(2, "b"))])
            .compacted(true)
            .batch(),
    ];
    let r = run(COMPACT, &[&fa, &fb], None);
    r.ok();
    assert_batches(&expected, &batches(&r.stdout));
    let r = run(COMPACT, &[&fa, "-"], Some(&b.jsonl()));
    r.ok();
    assert_batches(&expected, &batches(&r.stdout));
}

#[test]
fn bad_second_batch_emits_only_the_first_batch() {
    let dir = tempdir();
    let first = tb(vec![
        ins(3, "t", rw(1, "a")),
        upd(7, "t", rw(1, "a"), rw(1, "b")),
    ]);
    let second = Spec::new(100, 110)
        .high_water(120)
        .schemas(vec![kv_schema("t"), kv_schema("u")])
        .events(vec![
            ins(101, "t", rw(2, "a")),
            ins(102, "t", json!([int(3)])), // line 7: wrong width
        ]);
    let f = write(dir.path(), "bad.jsonl", &stream(&[first, second]));
    let r = run(COMPACT, &[&f], None);
    r.expect_code(1);
    assert!(names_line(&r.stderr, &f, 7), "{}", r.stderr);
    assert_batches(
        &[tb(vec![ins(7, "t", rw(1, "b"))]).compacted(true).batch()],
        &batches(&r.stdout),
    );
    // Truncated: the second batch has no commit.
    let first = tb(vec![ins(3, "t", rw(1, "a"))]);
    let second = Spec::new(100, 110)
        .high_water(120)
        .schemas(vec![kv_schema("t"), kv_schema("u")])
        .events(vec![ins(101, "t", rw(2, "a"))]);
    let text = format!(
        "{}{}{}",
        first.jsonl(),
        second.header_line(),
        second.event_lines()
    );
    let r = run(COMPACT, &[], Some(&text));
    r.expect_code(1).stderr_has("commit");
    assert_batches(&[first.batch()], &batches(&r.stdout));
}

// ---------------------------------------------------------------- common options

#[test]
fn help_and_version() {
    check_help_and_version(COMPACT);
    let help = run(COMPACT, &["--help"], None).stdout_str();
    assert!(help.contains("--schema"), "--help does not list --schema");
}

#[test]
fn input_limits() {
    let text = stream(&[
        tb(vec![
            ins(3, "t", rw(1, "a")),
            upd(7, "t", rw(1, "a"), rw(1, "b")),
        ]),
        Spec::new(100, 110)
            .high_water(120)
            .schemas(vec![kv_schema("t")])
            .events(vec![ins(101, "t", rw(2, "a"))]),
    ]);
    check_limits(COMPACT, &[], &text);
}

#[test]
fn usage_errors() {
    let text = tb(vec![]).jsonl();
    run(COMPACT, &["--bogus"], Some(&text))
        .expect_code(2)
        .stdout_empty();
    run(COMPACT, &["--schema"], Some(&text))
        .expect_code(2)
        .stdout_empty();
    run(COMPACT, &["--output-format", "csv"], Some(&text))
        .expect_code(2)
        .stdout_empty();
}

#[test]
fn closed_downstream_pipe_ends_quietly() {
    let dir = tempdir();
    let f = write(dir.path(), "big.jsonl", &big_batch(60_000, true));
    let (code, stderr) = run_into_closed_pipe(COMPACT, &[], &f);
    assert_eq!(stderr, "", "stderr should be empty");
    assert_eq!(code, Some(0), "pipeline status (compact's, with pipefail)");
}

#[test]
fn compacting_a_batch_without_events_changes_nothing() {
    let input = tb(vec![]);
    let r = run(COMPACT, &[], Some(&input.jsonl()));
    r.ok();
    assert_text(&input.canonical(), &r.stdout);
}

// ---------------------------------------------------------------- truncate

#[test]
fn a_truncate_is_a_barrier_that_discards_its_tables_earlier_events() {
    let schemas = vec![kv_schema("t"), kv_schema("u")];
    let input = Spec::new(0, 9).schemas(schemas.clone()).events(vec![
        ins(1, "t", rw(1, "a")),
        ins(2, "u", rw(1, "x")),
        upd(3, "t", rw(1, "a"), rw(1, "b")),
        trunc(4, "t"),
        ins(5, "t", rw(1, "c")),
        upd(6, "t", rw(1, "c"), rw(1, "d")),
        upd(7, "u", rw(1, "x"), rw(1, "y")),
    ]);
    let r = run(COMPACT, &[], Some(&input.jsonl()));
    r.ok();
    // t's insert and update before the truncate are gone, t's events after
    // it fold among themselves, u's events stay.
    let expected = Spec::new(0, 9)
        .schemas(schemas.clone())
        .compacted(true)
        .events(vec![
            ins(2, "u", rw(1, "x")),
            trunc(4, "t"),
            ins(6, "t", rw(1, "d")),
            upd(7, "u", rw(1, "x"), rw(1, "y")),
        ]);
    assert_batches(&[expected.batch()], &batches(&r.stdout));
    // A truncate with nothing before it to drop leaves the batch unmarked.
    let alone = Spec::new(0, 9).schemas(schemas).events(vec![
        ins(1, "u", rw(1, "x")),
        trunc(2, "t"),
        ins(3, "t", rw(1, "a")),
    ]);
    let r = run(COMPACT, &[], Some(&alone.jsonl()));
    r.ok();
    assert_batches(&[alone.batch()], &batches(&r.stdout));
}
