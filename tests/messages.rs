//! `message` records (logical messages, docs/FORMAT.md "Message records"):
//! the strict single-batch decoder refuses each broken rule as the stream
//! reader does (the golden fixtures `tests/data/v1/invalid/message-*` give
//! the stream reader's), and the stream tools carry them: split keeps each
//! in the piece of its sequence, merge passes them through in order,
//! compact folds nothing across one, the objects view shows them, JSON
//! output refuses them, and targets skip them, counted.

mod common;

use common::*;
use mooncdc::wire::{Batch, LogicalMessage, Value};
use serde_json::Value as J;
use std::path::PathBuf;

const SPLIT: &str = "mooncdc-split";
const MERGE: &str = "mooncdc-merge";
const COMPACT: &str = "mooncdc-compact";
const APPLY: &str = "mooncdc-apply";

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/v1")
}

#[test]
fn the_strict_decoder_refuses_each_broken_rule_as_the_stream_reader_does() {
    let dir = fixtures().join("invalid");
    let mut n = 0;
    for f in std::fs::read_dir(&dir).unwrap() {
        let p = f.unwrap().path();
        let name = p.file_name().unwrap().to_str().unwrap().to_string();
        if !(name.starts_with("message-") || name.starts_with("event-shares-message"))
            || !name.ends_with(".jsonl")
        {
            continue;
        }
        let text = std::fs::read_to_string(&p).unwrap();
        let rule = std::fs::read_to_string(p.with_extension("rule")).unwrap();
        let line: u64 = std::fs::read_to_string(p.with_extension("line"))
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        let err = Batch::from_jsonl(&text).expect_err(&name);
        assert!(
            err.to_string().contains(rule.trim()),
            "{name}: {err} lacks {rule:?}"
        );
        assert!(
            err.to_string().contains(&format!("line {line}")),
            "{name}: {err} names no line {line}"
        );
        n += 1;
    }
    assert!(n >= 19, "{n} message fixtures");
}

/// A batch whose messages sit at the start, between events, after a
/// schema record and at the end.
fn with_messages() -> Spec {
    Spec::new(0, 9).schemas(vec![kv_schema("t")]).events(vec![
        msg_rec(1, "outbox", text("{\"order\":42}"), true),
        ins(2, "t", row(1, "a")),
        msg_rec(3, "bin", json_blob("00ff80"), false),
        ins(4, "t", row(2, "b")),
        msg_rec(5, "outbox", text(""), true),
        ins(6, "t", row(3, "c")),
        msg_rec(8, "outbox", text("end"), true),
    ])
}

fn json_blob(hex: &str) -> J {
    serde_json::json!(["blob", hex])
}

#[test]
fn the_strict_decoder_keeps_messages_in_place_and_out_of_the_count() {
    let b = with_messages().batch();
    assert_eq!(b.events.len(), 3);
    assert_eq!(b.messages.len(), 4);
    assert_eq!(
        b.messages[1].1,
        LogicalMessage {
            sequence: 3,
            prefix: "bin".into(),
            content: Value::Blob(vec![0, 0xff, 0x80]),
            transactional: false,
        }
    );
    assert_eq!(b.commit().count, 3, "messages are not events");
    // Written back in place, canonical; no JSON form.
    let again = Batch::from_jsonl(std::str::from_utf8(&b.to_jsonl()).unwrap()).unwrap();
    assert_eq!(again, b);
    assert_eq!(b.to_jsonl(), with_messages().canonical().into_bytes());
    assert!(b.to_json().is_none(), "the JSON form cannot hold messages");
    // A message after a schema record stays after it, and one before before.
    let golden = fixtures().join("valid/batch-messages.canonical.jsonl");
    let text = std::fs::read_to_string(golden).unwrap();
    let b = Batch::from_jsonl(&text).unwrap();
    assert_eq!(String::from_utf8(b.to_jsonl()).unwrap(), text);
}

#[test]
fn content_is_text_when_utf8_and_a_blob_otherwise() {
    let m = LogicalMessage::new(1, "p".into(), b"caf\xc3\xa9".to_vec(), true);
    assert_eq!(m.content, Value::Text("café".into()));
    let m = LogicalMessage::new(1, "p".into(), vec![0xff, 0], false);
    assert_eq!(m.content, Value::Blob(vec![0xff, 0]));
}

#[test]
fn older_readers_refusal_names_the_kind_and_snapshots_refuse_it() {
    let r = run(MERGE, &[], Some("{\"kind\":\"marker\"}\n"));
    r.expect_code(1).stderr_has(
        "unknown record kind \"marker\" (expected one of header, event, commit, row, schema, message)",
    );
}

#[test]
fn split_keeps_each_message_in_the_piece_of_its_sequence() {
    let input = with_messages().jsonl();
    for n in ["1", "2", "3"] {
        let r = run(SPLIT, &["--max-events", n], Some(&input));
        r.ok();
        let pieces = batches(&r.stdout);
        let mut seen = Vec::new();
        for p in &pieces {
            for (_, m) in &p.messages {
                assert!(
                    m.sequence > p.start.sequence() && m.sequence <= p.end.sequence(),
                    "message {} outside piece {}..{}",
                    m.sequence,
                    p.start.sequence(),
                    p.end.sequence()
                );
                seen.push(m.sequence);
            }
        }
        assert_eq!(seen, vec![1, 3, 5, 8], "--max-events {n}");
        // Merged back: the batch as it was.
        let dir = tempdir();
        let f = write(dir.path(), "pieces.jsonl", &r.stdout_str());
        let m = run(MERGE, &[&f], None);
        m.ok();
        assert_text(&with_messages().canonical(), &m.stdout);
    }
}

#[test]
fn merge_passes_messages_through_in_order() {
    let a = Spec::new(0, 4).schemas(vec![kv_schema("t")]).events(vec![
        ins(1, "t", row(1, "a")),
        msg_rec(2, "outbox", text("x"), true),
    ]);
    let b = Spec::new(4, 8).schemas(vec![kv_schema("t")]).events(vec![
        msg_rec(5, "outbox", text("y"), false),
        ins(6, "t", row(2, "b")),
    ]);
    let r = run(MERGE, &[], Some(&stream(&[a, b])));
    r.ok();
    let got = batches(&r.stdout);
    assert_eq!(got.len(), 1);
    let seqs: Vec<u128> = got[0].messages.iter().map(|(_, m)| m.sequence).collect();
    assert_eq!(seqs, vec![2, 5]);
    assert_eq!(got[0].commit().count, 2);
}

#[test]
fn compact_folds_nothing_across_a_message() {
    let input = Spec::new(0, 9).schemas(vec![kv_schema("t")]).events(vec![
        ins(1, "t", row(1, "a")),
        msg_rec(2, "outbox", text("between"), true),
        del(3, "t", row(1, "a")),
        ins(4, "t", row(2, "b")),
        upd(5, "t", row(2, "b"), row(2, "c")),
    ]);
    let r = run(COMPACT, &[], Some(&input.jsonl()));
    r.ok();
    let got = batches(&r.stdout);
    assert_eq!(got.len(), 1);
    let seqs: Vec<u128> = got[0].events.iter().map(|e| e.sequence).collect();
    // 1 and 3 stay apart; 4 and 5 (after the message) fold.
    assert_eq!(seqs, vec![1, 3, 5]);
    assert_eq!(got[0].messages.len(), 1);
    assert_eq!(got[0].messages[0].1.sequence, 2);
    assert_eq!(got[0].messages[0].0, 0);
    // In place: the message's line between the insert and the delete.
    let out = r.stdout_str();
    let lines: Vec<&str> = out.lines().collect();
    assert!(lines[1].contains("\"sequence\":\"1\""), "{out}");
    assert!(lines[2].starts_with("{\"kind\":\"message\""), "{out}");
    assert!(lines[3].contains("\"sequence\":\"3\""), "{out}");
}

#[test]
fn the_objects_view_shows_messages() {
    let r = run(
        MERGE,
        &["--output-format", "objects"],
        Some(&with_messages().jsonl()),
    );
    r.ok();
    let objs: Vec<J> = r
        .stdout_str()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let msgs: Vec<&J> = objs.iter().filter(|o| o["kind"] == "message").collect();
    assert_eq!(msgs.len(), 4);
    assert_eq!(
        *msgs[0],
        serde_json::json!({"kind":"message","sequence":"1","prefix":"outbox","content":"{\"order\":42}","transactional":true})
    );
    assert_eq!(msgs[1]["content"], "00ff80");
    assert_eq!(msgs[1]["transactional"], false);
}

#[test]
fn json_output_is_refused_before_anything_is_written() {
    let input = with_messages().jsonl();
    for tool in [SPLIT, MERGE, COMPACT] {
        let r = run(tool, &["--output-format", "json"], Some(&input));
        r.expect_code(1)
            .stdout_empty()
            .stderr_has("a logical message (a message record), which the JSON form mooncdc.batch.v1 cannot hold");
    }
}

#[test]
fn targets_skip_messages_counted_and_the_archive_keeps_them() {
    let dir = tempdir();
    let input = write(dir.path(), "in.jsonl", &with_messages().jsonl());
    let db = dir.path().join("t.db");
    let target = format!("sqlite:{}", db.display());
    let r = run(APPLY, &["--target", &target, &input], None);
    r.ok()
        .stderr_has("3 events applied")
        .stderr_has("4 messages skipped");
    let c = run(APPLY, &["cursor", "--target", &target], None);
    c.ok();
    assert!(
        c.stdout_str().contains("\"sequence\":\"9\""),
        "{}",
        c.stdout_str()
    );
    // The archive keeps whole batches.
    let arch = dir.path().join("arch");
    let target = format!("dir:{}", arch.display());
    run(APPLY, &["--target", &target, &input], None).ok();
    let files: Vec<String> = list(&arch)
        .into_iter()
        .filter(|f| f.ends_with(".jsonl"))
        .collect();
    assert_eq!(files.len(), 1, "{files:?}");
    let kept = std::fs::read_to_string(arch.join(&files[0])).unwrap();
    assert_eq!(kept, with_messages().canonical());
}
