//! `schema` records (a table's schema changing inside a batch) through the
//! stream tools: split keeps each record with the event after it and gives
//! every piece the schemas in force at its start, merge joins batches whose
//! headers agree with the records between them (and refuses those that do
//! not), compact never folds across a record, and JSON output, which has no
//! place for records, is refused before anything is written.

mod common;

use common::*;
use serde_json::Value as J;

const SPLIT: &str = "mooncdc-split";
const MERGE: &str = "mooncdc-merge";
const COMPACT: &str = "mooncdc-compact";

fn s_kv() -> J {
    kv_schema("t")
}

fn s_kvw() -> J {
    schema(
        "t",
        &[
            ("id", "INTEGER", false),
            ("v", "TEXT", true),
            ("w", "INTEGER", true),
        ],
        &["id"],
    )
}

fn s_kx() -> J {
    schema(
        "t",
        &[("id", "INTEGER", false), ("x", "TEXT", true)],
        &["id"],
    )
}

fn rw3(id: i64, v: &str, w: i64) -> J {
    J::Array(vec![int(id), text(v), int(w)])
}

/// One batch: two events in the old shape, a column added, two events, the
/// column renamed and the added one dropped, one event.
fn changing() -> Spec {
    Spec::new(0, 9).schemas(vec![s_kv()]).events(vec![
        ins(1, "t", row(1, "a")),
        ins(2, "t", row(2, "b")),
        schema_rec(s_kvw(), &[]),
        ins(4, "t", rw3(3, "c", 7)),
        upd(5, "t", rw3(1, "a", 0), rw3(1, "a", 9)),
        schema_rec(s_kx(), &[("v", "x")]),
        ins(8, "t", row(4, "d")),
    ])
}

#[test]
fn split_keeps_records_with_their_event_and_headers_with_the_schemas_in_force() {
    // The update's before image must match the row: make it a valid history.
    let input = Spec::new(0, 9).schemas(vec![s_kv()]).events(vec![
        ins(1, "t", row(1, "a")),
        ins(2, "t", row(2, "b")),
        schema_rec(s_kvw(), &[]),
        ins(4, "t", rw3(3, "c", 7)),
        ins(5, "t", rw3(5, "e", 9)),
        schema_rec(s_kx(), &[("v", "x")]),
        ins(8, "t", row(4, "d")),
    ]);
    let r = run(SPLIT, &["--max-events", "1"], Some(&input.jsonl()));
    r.ok();
    let pieces = batches(&r.stdout);
    assert_eq!(pieces.len(), 5, "one event per piece");
    let schema_of = |b: &mooncdc::wire::Batch| -> Vec<String> {
        b.schemas.as_ref().unwrap()[0]
            .columns
            .iter()
            .map(|c| c.name.clone())
            .collect()
    };
    assert_eq!(schema_of(&pieces[0]), ["id", "v"]);
    assert_eq!(schema_of(&pieces[1]), ["id", "v"]);
    // The record before event 4 went with it into the third piece, whose
    // header still has the schema before it.
    assert_eq!(pieces[2].changes.len(), 1);
    assert_eq!(pieces[2].changes[0].0, 0);
    assert_eq!(schema_of(&pieces[2]), ["id", "v"]);
    assert_eq!(schema_of(&pieces[3]), ["id", "v", "w"]);
    assert_eq!(schema_of(&pieces[4]), ["id", "v", "w"]);
    assert_eq!(pieces[4].changes[0].1.renamed[0].from, "v");
    assert_eq!(pieces[4].end.sequence(), 9);
    // Merged back, the pieces are the batch again, byte for byte.
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("pieces.jsonl");
    std::fs::write(&f, &r.stdout).unwrap();
    let m = run(MERGE, &[f.to_str().unwrap()], None);
    m.ok();
    assert_eq!(m.stdout_str(), input.canonical());
}

#[test]
fn merge_refuses_a_header_that_disagrees_with_the_records_before_it() {
    let dir = tempfile::tempdir().unwrap();
    let first = Spec::new(0, 3).schemas(vec![s_kv()]).events(vec![
        ins(1, "t", row(1, "a")),
        schema_rec(s_kvw(), &[]),
        ins(3, "t", rw3(2, "b", 1)),
    ]);
    let agrees = Spec::new(3, 4)
        .schemas(vec![s_kvw()])
        .events(vec![ins(4, "t", rw3(3, "c", 2))]);
    let f1 = dir.path().join("1.jsonl");
    let f2 = dir.path().join("2.jsonl");
    std::fs::write(&f1, first.jsonl()).unwrap();
    std::fs::write(&f2, agrees.jsonl()).unwrap();
    let r = run(MERGE, &[f1.to_str().unwrap(), f2.to_str().unwrap()], None);
    r.ok();
    let b = batches(&r.stdout);
    assert_eq!(b.len(), 1);
    assert_eq!(b[0].events.len(), 3);
    assert_eq!(b[0].changes.len(), 1);
    // A second batch still in the old shape, with no record between: a
    // change merge cannot describe.
    let stale = Spec::new(3, 4)
        .schemas(vec![s_kv()])
        .events(vec![ins(4, "t", row(3, "c"))]);
    std::fs::write(&f2, stale.jsonl()).unwrap();
    let r = run(MERGE, &[f1.to_str().unwrap(), f2.to_str().unwrap()], None);
    r.expect_code(1).stdout_empty();
    assert!(
        r.stderr
            .contains("differs between batches with no schema record"),
        "{}",
        r.stderr
    );
}

#[test]
fn compact_never_folds_across_a_schema_record() {
    // An insert and an update of the same row on either side of a rename
    // whose images agree would fold, were the record not a barrier.
    let input = Spec::new(0, 5).schemas(vec![s_kv()]).events(vec![
        ins(1, "t", row(1, "a")),
        schema_rec(s_kx(), &[("v", "x")]),
        upd(3, "t", row(1, "a"), row(1, "b")),
        upd(4, "t", row(1, "b"), row(1, "c")),
    ]);
    let r = run(COMPACT, &[], Some(&input.jsonl()));
    r.ok();
    let expected = Spec::new(0, 5)
        .schemas(vec![s_kv()])
        .compacted(true)
        .events(vec![
            ins(1, "t", row(1, "a")),
            schema_rec(s_kx(), &[("v", "x")]),
            upd(4, "t", row(1, "a"), row(1, "c")),
        ]);
    assert_eq!(r.stdout_str(), expected.canonical());
    // Compacting again changes nothing.
    let again = run(COMPACT, &[], Some(&r.stdout_str()));
    again.ok();
    assert_eq!(again.stdout_str(), r.stdout_str());
}

#[test]
fn json_output_of_a_batch_with_schema_records_is_refused() {
    // A schema record deep in the batch, and one right after the header
    // (merge reads that one before it starts reading ahead).
    let first = Spec::new(0, 1).schemas(vec![s_kv()]).events(vec![
        schema_rec(s_kx(), &[("v", "x")]),
        ins(1, "t", row(1, "a")),
    ]);
    for input in [changing(), first] {
        let text = input.jsonl();
        let at = 1 + text
            .lines()
            .position(|l| l.contains(r#""kind":"schema""#))
            .expect("a schema record");
        for (tool, extra) in [
            (MERGE, vec!["--output-format", "json"]),
            (SPLIT, vec!["--output-format", "json", "--max-events", "2"]),
            (COMPACT, vec!["--output-format", "json"]),
        ] {
            let r = run(tool, &extra, Some(&text));
            r.expect_code(1).stdout_empty();
            assert!(
                r.stderr.contains("mooncdc.batch.v1 cannot hold")
                    && r.stderr.contains("--output-format jsonl")
                    && r.stderr.contains(&format!("<stdin>:{at}:")),
                "{tool}, the record on line {at}: {}",
                r.stderr
            );
        }
    }
}
