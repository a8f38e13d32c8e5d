//! The bodies of the fuzz targets, shared by the libFuzzer entry points
//! (`fuzz_targets/*.rs`, run by cargo-fuzz on nightly) and the stable corpus
//! runner (`src/bin/replay.rs`).
//!
//! Each target feeds arbitrary bytes to a decoder. A decoder may refuse its
//! input with an error but must never panic (STYLE habit 4). Beyond that, the
//! targets check what must hold of whatever a decoder accepts: re-encoding it
//! gives text that decodes to the same thing, tighter limits never turn a
//! refusal into an acceptance, and the two batch decoders (the stream reader
//! and the strict single-batch `BatchDecoder`) agree. A broken property is a
//! panic here, so the fuzzer reports it like a crash.

use mooncdc::wire::batch::{write_commit_line, write_event_line, write_header_line};
use mooncdc::wire::snapshot::{
    write_snapshot_commit_line, write_snapshot_header_line, write_snapshot_json_open,
    write_snapshot_json_table_open, write_snapshot_row_line,
};
use mooncdc::wire::value::{write_row, write_value};
use mooncdc::wire::{
    detect, Batch, BatchDecoder, BatchStreamReader, InputFormat, Item, Limits, SnapItem,
    SnapshotReader, Value,
};
use std::collections::HashMap;
use std::io::{Cursor, Read};

/// Every target by name, for the replay runner.
pub const TARGETS: &[(&str, fn(&[u8]))] = &[
    ("batch_jsonl", batch_jsonl),
    ("snapshot_jsonl", snapshot_jsonl),
    ("value", value),
    ("detect", detect_and_read),
];

/// Tight limits chosen by the input's first two bytes, so that the line and
/// total caps are reached with the short inputs a fuzzer makes.
fn tight_limits(data: &[u8]) -> Limits {
    let a = data.first().copied().unwrap_or(0) as u64;
    let b = data.get(1).copied().unwrap_or(0) as u64;
    let line = 1 + a * 4;
    let total = (b % 2 == 1).then_some(line + b * 16);
    Limits::new(Some(line), total).expect("line cap is positive and within the total")
}

// ---------------------------------------------------------------- batches

/// Drain a JSONL batch stream: the items, or the first error's message.
fn read_batch_stream(data: &[u8], limits: Limits) -> Result<Vec<Item>, String> {
    let mut r = BatchStreamReader::jsonl(Cursor::new(data), "fuzz", limits);
    let mut items = Vec::new();
    loop {
        match r.next_item() {
            Ok(Some(item)) => items.push(item),
            Ok(None) => return Ok(items),
            Err(e) => return Err(e.to_string()),
        }
    }
}

/// One line decoded by the strict decoder alone, if it is an event record.
fn strict_event(line: &[u8]) -> Option<mooncdc::wire::Event> {
    let rec = mooncdc::wire::jsonl::parse_record(line).ok()?;
    match mooncdc::wire::batch::batch_item(rec).ok()? {
        Item::Event(e) => Some(e),
        _ => None,
    }
}

/// Drain a JSONL batch stream as split and merge read it (lean events).
fn read_lean(data: &[u8]) -> Result<Vec<u8>, String> {
    let mut r = BatchStreamReader::jsonl(Cursor::new(data), "fuzz", Limits::default());
    let mut kinds = Vec::new();
    loop {
        match r.next_lean() {
            Ok(Some(mooncdc::wire::batch::Lean::Event(_))) => kinds.push(b'e'),
            Ok(Some(mooncdc::wire::batch::Lean::Item(_))) => kinds.push(b'i'),
            Ok(None) => return Ok(kinds),
            Err(e) => return Err(e.to_string()),
        }
    }
}

/// Compact a JSONL batch stream as `mooncdc-compact` does (lean events).
fn compact_stream(data: &[u8]) -> Result<Vec<u8>, String> {
    let mut r = BatchStreamReader::jsonl(Cursor::new(data), "fuzz", Limits::default());
    let mut sink = mooncdc::ops::WriteSink {
        out: Vec::new(),
        format: mooncdc::ops::OutputFormat::Jsonl,
    };
    mooncdc::ops::compact::compact(&mut r, &[], &mut sink).map_err(|e| e.to_string())?;
    Ok(sink.out)
}

fn encode_batch_stream(items: &[Item]) -> Vec<u8> {
    let mut out = Vec::new();
    for item in items {
        match item {
            Item::Header(h) => write_header_line(&mut out, h),
            Item::Event(e) => write_event_line(&mut out, e),
            Item::Commit(c) => write_commit_line(&mut out, c),
            Item::Schema(c) => mooncdc::wire::batch::write_schema_line(&mut out, c),
            Item::Message(m) => mooncdc::wire::batch::write_message_line(&mut out, m),
        }
    }
    out
}

fn commits(items: &[Item]) -> usize {
    items
        .iter()
        .filter(|i| matches!(i, Item::Commit(_)))
        .count()
}

/// `BatchStreamReader::jsonl` over the bytes, and `BatchDecoder` over the same
/// bytes fed in chunks cut after each occurrence of a byte the input chooses.
pub fn batch_jsonl(data: &[u8]) {
    let stream = read_batch_stream(data, Limits::default());

    if let Ok(items) = &stream {
        // What was accepted re-encodes canonically to a stream that decodes
        // to the same items, and re-encoding is then a fixed point.
        let text = encode_batch_stream(items);
        let again = read_batch_stream(&text, Limits::default())
            .unwrap_or_else(|e| panic!("re-encoded batch stream is refused: {e}"));
        assert_eq!(
            encode_batch_stream(&again),
            text,
            "re-encoded batch stream does not decode to the same items"
        );
    }

    // The fast paths for canonical lines never disagree with the strict
    // decoder, line by line and over the whole stream; nor does the path
    // that rewrites other spellings into the canonical one.
    let mut rewritten = Vec::new();
    for line in data.split(|&b| b == b'\n') {
        let strict = strict_event(line);
        if let Some(r) = mooncdc::wire::canon::canonical_event(line, &mut rewritten) {
            let e = strict
                .as_ref()
                .expect("rewriting path accepted what the strict decoder refuses");
            let mut want = Vec::new();
            write_event_line(&mut want, e);
            want.pop();
            assert_eq!(
                rewritten, want,
                "rewritten line is not the canonical line of the strict decoder's event"
            );
            assert_eq!(
                Some(r.meta),
                mooncdc::wire::fast::event_spans(&rewritten),
                "rewriting path and fast path place the members differently"
            );
        }
        if let Some(e) = mooncdc::wire::fast::event_line(line) {
            assert_eq!(
                Some(&e),
                strict.as_ref(),
                "fast path and strict decoder differ"
            );
        }
        if let Some(m) = mooncdc::wire::fast::event_meta(line) {
            let e = strict.expect("checking-only path accepted what the strict decoder refuses");
            // The images' places hold their canonical encodings.
            let image = |at: Option<(usize, usize)>| at.map(|(a, b)| line[a..b].to_vec());
            let (before, after) = (image(m.before_at), image(m.after_at));
            let encoded = |r: &Option<Vec<Value>>| {
                r.as_ref().map(|r| {
                    let mut v = Vec::new();
                    write_row(&mut v, r);
                    v
                })
            };
            // A key-only old row sits where a whole one would.
            let old = e.before.clone().or(e.before_key.clone());
            assert_eq!(
                (
                    e.sequence,
                    e.operation,
                    e.table.as_bytes(),
                    old.as_ref().map(|r| r.len()),
                    e.after.as_ref().map(|r| r.len()),
                    encoded(&old),
                    encoded(&e.after),
                    e.before_key.is_some(),
                    e.has_unchanged(),
                ),
                (
                    m.sequence,
                    m.operation,
                    &line[m.table.0..m.table.1],
                    m.before,
                    m.after,
                    before,
                    after,
                    m.key_only,
                    m.unchanged,
                ),
                "checking-only path and strict decoder differ"
            );
        }
    }

    // Compaction of an accepted stream never panics; what it writes is
    // accepted, and compacting that again changes nothing.
    if stream.is_ok() {
        if let Ok(once) = compact_stream(data) {
            let twice = compact_stream(&once)
                .unwrap_or_else(|e| panic!("compacted output is refused: {e}"));
            assert_eq!(twice, once, "compaction is not idempotent");
        }
    }
    let lean = read_lean(data);
    assert_eq!(
        lean.as_ref().map(|v| v.len()),
        stream.as_ref().map(|v| v.len()),
        "the lean reader and the item reader differ"
    );

    // Tighter limits may only refuse more, never accept differently.
    if let Ok(tight) = read_batch_stream(data, tight_limits(data)) {
        assert_eq!(
            Ok(&tight),
            stream.as_ref(),
            "accepted under tight limits but not the same under the default limits"
        );
    }

    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    // An ASCII separator keeps every chunk valid UTF-8; the separator stays in
    // its chunk, so the chunks add up to the whole text.
    let sep = (data.first().copied().unwrap_or(b'\n') & 0x7f) as char;
    let mut d = BatchDecoder::new(Limits::default()).expect("default limits are valid");
    let mut failed = false;
    for chunk in text.split_inclusive(sep) {
        if d.push(chunk).is_err() {
            failed = true;
            break;
        }
    }
    let decoded = if failed { None } else { d.finish().ok() };
    // Unusable after a failure or after finishing, whichever happened.
    assert!(
        d.push("").is_err(),
        "BatchDecoder accepts input after failing or finishing"
    );
    assert!(
        d.finish().is_err(),
        "BatchDecoder finishes twice, or after failing"
    );

    // The strict decoder accepts exactly the streams of one batch.
    let one_batch = matches!(&stream, Ok(items) if commits(items) == 1);
    match decoded {
        None => assert!(
            !one_batch,
            "BatchStreamReader accepts one batch that BatchDecoder refuses"
        ),
        Some(batch) => {
            let items = stream.as_ref().unwrap_or_else(|e| {
                panic!("BatchDecoder accepts a batch that BatchStreamReader refuses: {e}")
            });
            assert!(
                one_batch,
                "BatchDecoder accepts input holding {} batches",
                commits(items)
            );
            let jsonl = batch.to_jsonl();
            assert_eq!(
                jsonl,
                encode_batch_stream(items),
                "BatchDecoder and BatchStreamReader decode the same batch differently"
            );
            // The JSON form carries the same batch (one without schema or
            // message records: the JSON form cannot hold them, and says so).
            let Some(json) = batch.to_json() else {
                assert!(
                    items
                        .iter()
                        .any(|i| matches!(i, Item::Schema(_) | Item::Message(_))),
                    "a batch without schema or message records has no JSON form"
                );
                return;
            };
            let json_text = std::str::from_utf8(&json).expect("JSON output is UTF-8");
            let back = Batch::from_json(json_text)
                .unwrap_or_else(|e| panic!("batch re-encoded as JSON is refused: {e}"));
            assert_eq!(back.to_jsonl(), jsonl, "JSON batch does not round-trip");
        }
    }
}

// ---------------------------------------------------------------- snapshots

fn read_snapshot(data: &[u8], limits: Limits) -> Result<Vec<SnapItem>, String> {
    let mut r = SnapshotReader::jsonl(Cursor::new(data), "fuzz", limits);
    drain_snapshot(&mut r)
}

fn drain_snapshot<R: std::io::BufRead>(r: &mut SnapshotReader<R>) -> Result<Vec<SnapItem>, String> {
    let mut items = Vec::new();
    loop {
        match r.next_item() {
            Ok(Some(item)) => items.push(item),
            Ok(None) => return Ok(items),
            Err(e) => return Err(e.to_string()),
        }
    }
}

fn encode_snapshot(items: &[SnapItem]) -> Vec<u8> {
    let mut out = Vec::new();
    for item in items {
        match item {
            SnapItem::Header { cursor, schemas } => {
                write_snapshot_header_line(&mut out, cursor, schemas)
            }
            SnapItem::Row { table, row } => write_snapshot_row_line(&mut out, table, row),
            SnapItem::Commit { count } => write_snapshot_commit_line(&mut out, *count),
        }
    }
    out
}

/// The JSON form of an accepted snapshot: tables in the header's order.
fn encode_snapshot_json(items: &[SnapItem]) -> Vec<u8> {
    let Some(SnapItem::Header { cursor, schemas }) = items.first() else {
        panic!("an accepted snapshot starts with its header");
    };
    let mut rows: HashMap<&str, Vec<&[Value]>> = HashMap::new();
    for item in items {
        if let SnapItem::Row { table, row } = item {
            rows.entry(table).or_default().push(row);
        }
    }
    let mut out = Vec::new();
    write_snapshot_json_open(&mut out, cursor);
    for (i, s) in schemas.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        write_snapshot_json_table_open(&mut out, s);
        for (j, row) in rows.get(s.table.as_str()).into_iter().flatten().enumerate() {
            if j > 0 {
                out.push(b',');
            }
            write_row(&mut out, row);
        }
        out.extend_from_slice(b"]}");
    }
    out.extend_from_slice(b"]}\n");
    out
}

/// Rows grouped by table, for comparing forms that may order tables differently.
fn rows_by_table(items: &[SnapItem]) -> Vec<(String, Vec<u8>)> {
    let mut map: HashMap<String, Vec<u8>> = HashMap::new();
    for item in items {
        if let SnapItem::Row { table, row } = item {
            write_row(map.entry(table.clone()).or_default(), row);
        }
    }
    let mut v: Vec<_> = map.into_iter().collect();
    v.sort();
    v
}

/// `SnapshotReader::jsonl` over the bytes.
pub fn snapshot_jsonl(data: &[u8]) {
    let snap = read_snapshot(data, Limits::default());

    if let Ok(items) = &snap {
        let text = encode_snapshot(items);
        let again = read_snapshot(&text, Limits::default())
            .unwrap_or_else(|e| panic!("re-encoded snapshot is refused: {e}"));
        assert_eq!(
            encode_snapshot(&again),
            text,
            "re-encoded snapshot does not decode to the same items"
        );

        let json = encode_snapshot_json(items);
        let mut r = SnapshotReader::json(Cursor::new(&json[..]), "fuzz.json", Limits::default())
            .unwrap_or_else(|e| panic!("snapshot re-encoded as JSON is refused: {e}"));
        let from_json = drain_snapshot(&mut r)
            .unwrap_or_else(|e| panic!("snapshot re-encoded as JSON is refused: {e}"));
        assert_eq!(
            from_json.first(),
            items.first(),
            "JSON snapshot header differs"
        );
        assert_eq!(
            from_json.last(),
            items.last(),
            "JSON snapshot commit differs"
        );
        assert_eq!(
            rows_by_table(&from_json),
            rows_by_table(items),
            "JSON snapshot rows differ"
        );
    }

    if let Ok(tight) = read_snapshot(data, tight_limits(data)) {
        assert_eq!(
            Ok(&tight),
            snap.as_ref(),
            "accepted under tight limits but not the same under the default limits"
        );
    }
}

// ---------------------------------------------------------------- values

fn encode_value(v: &Value) -> Vec<u8> {
    let mut out = Vec::new();
    write_value(&mut out, v);
    out
}

/// One tagged value as JSON text; what decodes re-encodes to the same value.
pub fn value(data: &[u8]) {
    let Ok(v) = serde_json::from_slice::<Value>(data) else {
        return;
    };
    let text = encode_value(&v);
    let again = serde_json::from_slice::<Value>(&text).unwrap_or_else(|e| {
        panic!(
            "re-encoded value {} is refused: {e}",
            String::from_utf8_lossy(&text)
        )
    });
    assert!(
        again.same(&v),
        "value {:?} re-encoded as {} decodes to {:?}",
        v,
        String::from_utf8_lossy(&text),
        again
    );
    assert_eq!(
        encode_value(&again),
        text,
        "value encoding is not canonical"
    );
    assert_eq!(
        v.key_cmp(&again),
        std::cmp::Ordering::Equal,
        "a value does not compare equal to itself"
    );
}

// ---------------------------------------------------------------- detection

/// Format detection, then the reader the tools would open for that format
/// (`mooncdc::cli::open_input`), drained.
pub fn detect_and_read(data: &[u8]) {
    let (format, mut all) = detect(Cursor::new(data.to_vec())).expect("reading memory cannot fail");
    let mut bytes = Vec::new();
    all.read_to_end(&mut bytes)
        .expect("reading memory cannot fail");
    assert_eq!(bytes, data, "the detector's reader loses or changes bytes");

    let (again, reader) = detect(Cursor::new(data.to_vec())).expect("reading memory cannot fail");
    assert_eq!(format, again, "detection is not deterministic");
    let limits = Limits::default();
    match format {
        InputFormat::BatchJsonl | InputFormat::BatchJson => {
            let r = if format == InputFormat::BatchJsonl {
                Ok(BatchStreamReader::jsonl(reader, "fuzz", limits))
            } else {
                BatchStreamReader::json(reader, "fuzz", limits)
            };
            if let Ok(mut r) = r {
                while let Ok(Some(_)) = r.next_item() {}
            }
        }
        InputFormat::SnapshotJsonl | InputFormat::SnapshotJson => {
            let r = if format == InputFormat::SnapshotJsonl {
                Ok(SnapshotReader::jsonl(reader, "fuzz", limits))
            } else {
                SnapshotReader::json(reader, "fuzz", limits)
            };
            if let Ok(mut r) = r {
                let _ = drain_snapshot(&mut r);
            }
        }
    }
}
