//! Property tests of the wire codec and the stream operations (docs/FORMAT.md, docs/TOOLS.md).
//!
//! Every property draws real random inputs from proptest strategies; case
//! counts are kept small enough for the whole file to run in seconds in the
//! dev profile. Failure persistence is off so that a failing run leaves no
//! files behind; proptest prints the minimal failing input instead.

use mooncdc::destination::memory::MemoryTarget;
use mooncdc::ops::compact::{compact, compact_events};
use mooncdc::ops::merge::merge;
use mooncdc::ops::split::{split, SplitOptions};
use mooncdc::ops::{OutputFormat, WriteSink};
use mooncdc::wire::batch::Lean;
use mooncdc::wire::model::write_event;
use mooncdc::wire::value::{
    parse_real_decimal, parse_real_pair, real_to_pair, write_row, write_value,
};
use mooncdc::wire::{
    Batch, BatchStreamReader, Column, Cursor, Event, Item, Limits, LogicalMessage, Operation, Row,
    Schema, Value,
};
use proptest::collection::vec;
use proptest::prelude::*;
use proptest::sample::Index;
use std::cmp::Ordering;
use std::collections::BTreeMap;
use std::io::Cursor as Io;

/// 2^63 exactly.
const TWO63: f64 = (1u64 << 63) as f64;

/// A final state: the cursor and each table's rows by encoded key.
type Projection = (Option<Cursor>, BTreeMap<String, BTreeMap<Vec<u8>, Vec<u8>>>);

fn config(cases: u32) -> ProptestConfig {
    ProptestConfig {
        cases,
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

// ------------------------------------------------------------------ helpers

fn enc_value(v: &Value) -> Vec<u8> {
    let mut out = Vec::new();
    write_value(&mut out, v);
    out
}

fn enc_event(e: &Event) -> Vec<u8> {
    let mut out = Vec::new();
    write_event(&mut out, e);
    out
}

fn enc_events(es: &[Event]) -> Vec<String> {
    es.iter()
        .map(|e| String::from_utf8(enc_event(e)).unwrap())
        .collect()
}

fn rows_same(a: &[Value], b: &[Value]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.same(y))
}

fn opt_rows_same(a: &Option<Row>, b: &Option<Row>) -> bool {
    match (a, b) {
        (None, None) => true,
        (Some(x), Some(y)) => rows_same(x, y),
        _ => false,
    }
}

fn events_same(a: &Event, b: &Event) -> bool {
    a.sequence == b.sequence
        && a.table == b.table
        && a.operation == b.operation
        && opt_rows_same(&a.before, &b.before)
        && opt_rows_same(&a.before_key, &b.before_key)
        && opt_rows_same(&a.after, &b.after)
}

/// Exact identity of two batches (`Value::same` for every value).
fn batch_same(a: &Batch, b: &Batch) -> bool {
    a.start == b.start
        && a.end == b.end
        && a.high_water == b.high_water
        && a.schemas == b.schemas
        && a.events.len() == b.events.len()
        && a.events
            .iter()
            .zip(&b.events)
            .all(|(x, y)| events_same(x, y))
}

/// Final state of a target, in a form with exact (bitwise) equality.
fn target_state(t: &MemoryTarget) -> Projection {
    let tables = t
        .tables
        .iter()
        .map(|(name, rows)| {
            let rows = rows
                .iter()
                .map(|(k, r)| {
                    let mut out = Vec::new();
                    write_row(&mut out, r);
                    (k.clone(), out)
                })
                .collect();
            (name.clone(), rows)
        })
        .collect();
    (t.cursor.clone(), tables)
}

fn fail(msg: impl Into<String>) -> TestCaseError {
    TestCaseError::fail(msg.into())
}

/// 2^e as an f64, for -1074 <= e <= 1023, built from its bits.
fn pow2(e: i32) -> f64 {
    assert!((-1074..=1023).contains(&e));
    if e >= -1022 {
        f64::from_bits(((e + 1023) as u64) << 52)
    } else {
        f64::from_bits(1u64 << (e + 1074))
    }
}

// ------------------------------------------------------------------ strategies

fn finite_f64() -> impl Strategy<Value = f64> {
    prop_oneof![
        4 => any::<u64>().prop_map(f64::from_bits),
        // subnormals and zeros
        1 => (any::<bool>(), 0u64..(1u64 << 52))
            .prop_map(|(s, f)| f64::from_bits(((s as u64) << 63) | f)),
        // small dyadic numbers, integers among them
        2 => (-1000i32..1000, -8i32..8).prop_map(|(m, e)| m as f64 * pow2(e)),
        1 => prop_oneof![
            Just(0.0),
            Just(-0.0),
            Just(f64::MAX),
            Just(f64::MIN),
            Just(f64::MIN_POSITIVE),
            Just(f64::from_bits(1)),
            Just(0.1),
            Just(1e300),
            Just(9007199254740993.0),
            Just(-TWO63),
        ],
    ]
    .prop_filter("finite", |x| x.is_finite())
}

/// Characters that stress an encoder: NUL, BOM, quotes, backslashes, controls,
/// line/paragraph separators, astral characters, other multi-byte ranges.
fn special_char() -> impl Strategy<Value = char> {
    prop_oneof![
        prop_oneof![
            Just('\0'),
            Just('\u{feff}'),
            Just('"'),
            Just('\\'),
            Just('/'),
            Just('\u{7f}'),
            Just('\u{2028}'),
            Just('\u{2029}'),
            Just('\u{fffd}'),
            Just('\u{ffff}'),
        ],
        (0u32..0x20).prop_map(|c| char::from_u32(c).unwrap()),
        (0x80u32..0xa0).prop_map(|c| char::from_u32(c).unwrap()),
        proptest::char::range('\u{10000}', '\u{10FFFF}'),
        proptest::char::range('\u{80}', '\u{7ff}'),
        proptest::char::range('\u{800}', '\u{d7ff}'),
        proptest::char::range('\u{e000}', '\u{ffff}'),
    ]
}

fn text_with(max: usize) -> impl Strategy<Value = String> {
    let ch = prop_oneof![
        3 => any::<char>(),
        3 => special_char(),
        2 => proptest::char::range(' ', '~'),
    ];
    (any::<bool>(), vec(ch, 0..max)).prop_map(|(bom, cs)| {
        let mut s = String::new();
        if bom {
            s.push('\u{feff}');
        }
        s.extend(cs);
        s
    })
}

fn text() -> impl Strategy<Value = String> {
    prop_oneof![3 => text_with(24), 1 => any::<String>()]
}

fn value() -> impl Strategy<Value = Value> {
    prop_oneof![
        1 => Just(Value::Null),
        2 => any::<i64>().prop_map(Value::Integer),
        1 => (-3i64..3).prop_map(Value::Integer),
        3 => finite_f64().prop_map(Value::Real),
        2 => text_with(12).prop_map(Value::Text),
        2 => vec(any::<u8>(), 0..12).prop_map(Value::Blob),
    ]
}

/// Byte strings that are not valid UTF-8: random bytes, and valid text around
/// one invalid sequence (stray continuation, overlong, surrogate, beyond
/// U+10FFFF, truncated, bytes that never occur).
fn invalid_utf8() -> impl Strategy<Value = Vec<u8>> {
    let bad = prop_oneof![
        (0x80u8..0xc0).prop_map(|b| vec![b]),
        (0xf5u8..=0xff).prop_map(|b| vec![b]),
        prop_oneof![
            Just(vec![0xc0, 0x80]),
            Just(vec![0xc1, 0xbf]),
            Just(vec![0xe0, 0x80, 0x80]),
            Just(vec![0xf0, 0x80, 0x80, 0x80]),
            Just(vec![0xed, 0xa0, 0x80]),
            Just(vec![0xed, 0xbf, 0xbf]),
            Just(vec![0xf4, 0x90, 0x80, 0x80]),
            Just(vec![0xe2, 0x82]),
            Just(vec![0xf0, 0x9f, 0x98]),
            Just(vec![0xc3]),
        ],
    ];
    prop_oneof![
        vec(any::<u8>(), 1..48).prop_filter("not UTF-8", |b| std::str::from_utf8(b).is_err()),
        (text_with(8), bad, text_with(8)).prop_map(|(a, bad, b)| {
            let mut v = a.into_bytes();
            v.extend(bad);
            v.extend(b.into_bytes());
            v
        }),
    ]
}

fn step() -> impl Strategy<Value = u128> {
    prop_oneof![
        6 => 1u128..4,
        3 => 1u128..100_000,
        1 => (1u64..=u64::MAX).prop_map(u128::from),
    ]
}

fn extra() -> impl Strategy<Value = u128> {
    prop_oneof![2 => Just(0u128), 1 => step()]
}

fn seq_base() -> impl Strategy<Value = u128> {
    prop_oneof![
        0u128..3,
        0u128..100_000,
        any::<u64>().prop_map(u128::from),
        any::<u128>().prop_map(|x| x >> 1),
    ]
}

type SchemaParts = (String, Vec<(String, String, bool)>, Vec<Index>);

fn schema_parts() -> impl Strategy<Value = SchemaParts> {
    (
        text_with(6),
        vec((text_with(6), text_with(8), any::<bool>()), 1..=4),
        vec(any::<Index>(), 0..4),
    )
}

/// A schema whose table and column names are unique: each name ends with its
/// position as one digit.
fn build_schema(i: usize, (tname, cols, key): &SchemaParts) -> Schema {
    let columns: Vec<Column> = cols
        .iter()
        .enumerate()
        .map(|(j, (n, t, nullable))| Column {
            name: format!("{n}{j}"),
            decl_type: t.clone(),
            nullable: *nullable,
        })
        .collect();
    let mut key_idx: Vec<usize> = Vec::new();
    for k in key {
        let k = k.index(columns.len());
        if !key_idx.contains(&k) {
            key_idx.push(k);
        }
    }
    Schema {
        table: format!("{tname}{i}"),
        key: key_idx.iter().map(|&k| columns[k].name.clone()).collect(),
        columns,
    }
}

type EventSpec = (Index, u8, Vec<Value>, Vec<Value>, u128);

fn event_spec() -> impl Strategy<Value = EventSpec> {
    (
        any::<Index>(),
        0u8..4,
        vec(value(), 4),
        vec(value(), 4),
        step(),
    )
}

type BatchSpec = (
    String,
    Vec<SchemaParts>,
    u8,
    u128,
    Vec<EventSpec>,
    u128,
    u128,
    bool,
    u128,
);

fn build_batch(spec: BatchSpec, empty_schemas: bool) -> Batch {
    let (source, parts, mode, base, specs, end_extra, hw_extra, top, slack) = spec;
    let tables: Vec<Schema> = parts
        .iter()
        .enumerate()
        .map(|(i, p)| build_schema(i, p))
        .collect();
    let mut seq = base;
    let mut events = Vec::new();
    for (t, op, before, after, step) in specs {
        seq += step;
        let table = &tables[t.index(tables.len())];
        let w = table.columns.len();
        let row = |v: &Vec<Value>| v[..w].to_vec();
        let (operation, before, after) = match op {
            0 => (Operation::Insert, None, Some(row(&after))),
            1 => (Operation::Update, Some(row(&before)), Some(row(&after))),
            2 => (Operation::Delete, Some(row(&before)), None),
            // Every combination of the two flags, from the values drawn.
            _ => (
                Operation::Truncate {
                    cascade: matches!(before[0], Value::Null),
                    restart_identity: matches!(after[0], Value::Null),
                },
                None,
                None,
            ),
        };
        events.push(Event {
            sequence: seq,
            table: table.table.clone(),
            operation,
            before,
            before_key: None,
            after,
        });
    }
    let end = seq + end_extra;
    let hw = end + hw_extra;
    // Sometimes push the whole interval against the top of the u128 range.
    let offset = if top { u128::MAX - slack - hw } else { 0 };
    for e in &mut events {
        e.sequence += offset;
    }
    let schemas = match mode {
        0 => None,
        3 if empty_schemas && events.is_empty() => Some(Vec::new()),
        _ => Some(tables),
    };
    Batch {
        start: Cursor::new(source.clone(), base + offset),
        end: Cursor::new(source, end + offset),
        high_water: hw + offset,
        schemas,
        compacted: false,
        events,
        changes: Vec::new(),
        messages: Vec::new(),
    }
}

/// Random valid batches of up to `max_events` events; `empty_schemas` lets an
/// empty batch carry `"schemas":[]`.
fn batch_strategy(max_events: usize, empty_schemas: bool) -> impl Strategy<Value = Batch> {
    (
        text_with(10),
        vec(schema_parts(), 1..4),
        0u8..4,
        seq_base(),
        vec(event_spec(), 0..=max_events),
        extra(),
        extra(),
        any::<bool>(),
        0u128..3,
    )
        .prop_map(move |spec| build_batch(spec, empty_schemas))
}

// ------------------------------------------------------------------ 1. REAL

fn check_real(x: f64) -> Result<(), TestCaseError> {
    prop_assert!(x.is_finite());
    let out = enc_value(&Value::Real(x));
    let text = String::from_utf8(out.clone()).unwrap();

    // write_value → serde_json → Value, bit-exact.
    let decoded: Value =
        serde_json::from_slice(&out).map_err(|e| fail(format!("{text} does not decode: {e}")))?;
    match decoded {
        Value::Real(y) => prop_assert_eq!(y.to_bits(), x.to_bits(), "{}", text),
        other => return Err(fail(format!("{text} decoded as {other:?}"))),
    }

    // The printed strings, and real_to_pair → parse_real_pair.
    let arr: Vec<String> = serde_json::from_slice(&out).unwrap();
    prop_assert_eq!(arr.len(), 3, "{}", text);
    prop_assert_eq!(arr[0].as_str(), "real");
    let (m, e) = real_to_pair(x);
    let sig = if m == 0 && x.is_sign_negative() {
        "-0".to_string()
    } else {
        m.to_string()
    };
    prop_assert_eq!(&arr[1], &sig);
    prop_assert_eq!(&arr[2], &e.to_string());
    let y = parse_real_pair(&arr[1], &arr[2]).map_err(fail)?;
    prop_assert_eq!(y.to_bits(), x.to_bits(), "{}", text);

    if x == 0.0 {
        prop_assert_eq!((m, e), (0, 0));
        prop_assert_eq!(
            text.as_str(),
            if x.is_sign_negative() {
                r#"["real","-0","0"]"#
            } else {
                r#"["real","0","0"]"#
            }
        );
    } else {
        // A nonzero written significand is odd, fits 53 bits, carries the sign,
        // and m × 2^e is exactly x.
        prop_assert!(m % 2 != 0, "even significand in {}", text);
        prop_assert!(m.unsigned_abs() < 1u64 << 53);
        prop_assert_eq!(m < 0, x < 0.0);
        prop_assert!((-1074..=1023).contains(&e), "{}", text);
        prop_assert_eq!((m as f64 * pow2(e)).to_bits(), x.to_bits());
        // Scaling the spelling by a power of two is exact or refused, never rounded:
        // m × 2^(e+1) is 2x unless that overflows; m × 2^(e-1) is x/2 unless that
        // would need subnormal rounding.
        let up = parse_real_pair(&sig, &(e + 1).to_string());
        let twice = x * 2.0;
        if twice.is_finite() {
            prop_assert_eq!(up.map_err(fail)?.to_bits(), twice.to_bits());
        } else {
            prop_assert!(up.is_err(), "overflowing {} × 2^{} accepted", sig, e + 1);
        }
        let down = parse_real_pair(&sig, &(e - 1).to_string());
        if e > -1074 {
            prop_assert_eq!(down.map_err(fail)?.to_bits(), (x / 2.0).to_bits());
        } else {
            prop_assert!(down.is_err(), "inexact {} × 2^{} accepted", sig, e - 1);
        }
    }

    // The read-only decimal form, printed shortest, parses back to the same bits.
    let dec = format!("{x:e}");
    let z = parse_real_decimal(&dec).map_err(fail)?;
    prop_assert_eq!(z.to_bits(), x.to_bits(), "decimal {}", dec);
    let v: Value =
        serde_json::from_str(&format!(r#"["real","{dec}"]"#)).map_err(|e| fail(e.to_string()))?;
    prop_assert!(v.same(&Value::Real(x)));
    Ok(())
}

proptest! {
    #![proptest_config(config(4000))]

    #[test]
    fn real_bits_roundtrip(bits in any::<u64>()) {
        let x = f64::from_bits(bits);
        prop_assume!(x.is_finite());
        check_real(x)?;
    }

    #[test]
    fn real_subnormals_and_zeros_roundtrip(sign in any::<bool>(), frac in 0u64..(1u64 << 52)) {
        let x = f64::from_bits(((sign as u64) << 63) | frac);
        check_real(x)?;
        let (m, e) = real_to_pair(x);
        if frac != 0 {
            prop_assert!(x.is_subnormal());
            prop_assert!((-1074..=-1023).contains(&e), "{} {}", m, e);
        }
    }

    #[test]
    fn real_other_spellings_decode_exactly(x in finite_f64(), k in 0u32..75) {
        // The same value written with a wider significand: (m·2^k) × 2^(e−k).
        prop_assume!(x != 0.0);
        let (m, e) = real_to_pair(x);
        let wide = (m.unsigned_abs() as u128) << k;
        let sig = if m < 0 { format!("-{wide}") } else { wide.to_string() };
        let y = parse_real_pair(&sig, &(e - k as i32).to_string()).map_err(fail)?;
        prop_assert_eq!(y.to_bits(), x.to_bits());
        let v: Value = serde_json::from_str(&format!(r#"["real","{sig}","{}"]"#, e - k as i32))
            .map_err(|err| fail(err.to_string()))?;
        prop_assert!(v.same(&Value::Real(x)));
    }
}

#[test]
fn real_signed_zeros() {
    check_real(0.0).unwrap();
    check_real(-0.0).unwrap();
    assert_eq!(
        parse_real_pair("-0", "0").unwrap().to_bits(),
        (-0.0f64).to_bits()
    );
    assert_eq!(parse_real_pair("0", "0").unwrap().to_bits(), 0);
    let v: Value = serde_json::from_str(r#"["real","-0","0"]"#).unwrap();
    assert!(v.same(&Value::Real(-0.0)));
    assert!(!v.same(&Value::Real(0.0)));
    assert!(v.same_normalized(&Value::Real(0.0)));
}

// ------------------------------------------------------------------ 2. TEXT and BLOB

fn mixed_case_hex(bytes: &[u8], mask: &[bool]) -> String {
    hex::encode(bytes)
        .chars()
        .enumerate()
        .map(|(i, c)| {
            if mask.get(i % mask.len().max(1)).copied().unwrap_or(false) {
                c.to_ascii_uppercase()
            } else {
                c
            }
        })
        .collect()
}

proptest! {
    #![proptest_config(config(1500))]

    #[test]
    fn text_roundtrips(s in text(), mask in vec(any::<bool>(), 1..8)) {
        let v = Value::Text(s.clone());
        let out = enc_value(&v);
        let back: Value = serde_json::from_slice(&out).map_err(|e| fail(e.to_string()))?;
        prop_assert_eq!(&back, &v);
        // The encoder writes "text", never "text-utf8".
        prop_assert!(out.starts_with(br#"["text","#));

        // The same string as hex of its UTF-8 bytes, lower, upper and mixed case.
        for h in [
            hex::encode(s.as_bytes()),
            hex::encode_upper(s.as_bytes()),
            mixed_case_hex(s.as_bytes(), &mask),
        ] {
            let back: Value = serde_json::from_str(&format!(r#"["text-utf8","{h}"]"#))
                .map_err(|e| fail(format!("{h}: {e}")))?;
            prop_assert_eq!(&back, &v);
        }
    }

    #[test]
    fn text_with_every_char_escaped_roundtrips(s in text()) {
        // JSON escapes are allowed: \uXXXX for every UTF-16 unit (surrogate
        // pairs for astral characters) decodes to the same string.
        let mut json = String::from(r#"["text",""#);
        for u in s.encode_utf16() {
            json.push_str(&format!("\\u{u:04X}"));
        }
        json.push_str(r#""]"#);
        let back: Value = serde_json::from_str(&json).map_err(|e| fail(format!("{json}: {e}")))?;
        prop_assert_eq!(back, Value::Text(s));
    }

    #[test]
    fn integers_only_in_canonical_form(i in any::<i64>(), zeros in 1usize..3) {
        let ok: Value = serde_json::from_str(&format!(r#"["integer","{i}"]"#))
            .map_err(|e| fail(e.to_string()))?;
        prop_assert_eq!(ok, Value::Integer(i));
        let digits = i.unsigned_abs().to_string();
        let sign = if i < 0 { "-" } else { "" };
        let zeros = "0".repeat(zeros);
        let mut bad = vec![
            format!("{sign}{zeros}{digits}"),
            format!("+{digits}"),
            format!("{i}.0"),
            format!(" {i}"),
            format!("{i}e0"),
        ];
        if i == 0 {
            bad.push("-0".into());
        }
        // One beyond the 64-bit range on either side.
        bad.push((i64::MAX as i128 + 1 + i.unsigned_abs() as i128 % 1000).to_string());
        bad.push((i64::MIN as i128 - 1 - i.unsigned_abs() as i128 % 1000).to_string());
        for b in bad {
            let r = serde_json::from_str::<Value>(&format!(r#"["integer","{b}"]"#));
            prop_assert!(r.is_err(), "INTEGER {:?} accepted as {:?}", b, r);
        }
    }

    #[test]
    fn blob_roundtrips(b in vec(any::<u8>(), 0..64), mask in vec(any::<bool>(), 1..8)) {
        let v = Value::Blob(b.clone());
        let out = enc_value(&v);
        prop_assert_eq!(&out, &format!(r#"["blob","{}"]"#, hex::encode(&b)).into_bytes());
        let back: Value = serde_json::from_slice(&out).map_err(|e| fail(e.to_string()))?;
        prop_assert_eq!(&back, &v);
        let h = mixed_case_hex(&b, &mask);
        let back: Value = serde_json::from_str(&format!(r#"["blob","{h}"]"#))
            .map_err(|e| fail(e.to_string()))?;
        prop_assert_eq!(&back, &v);
    }

    #[test]
    fn arbitrary_bytes_as_text_utf8(b in vec(any::<u8>(), 0..32)) {
        // Valid UTF-8 decodes to exactly that string, anything else is refused.
        let r = serde_json::from_str::<Value>(&format!(r#"["text-utf8","{}"]"#, hex::encode(&b)));
        match std::str::from_utf8(&b) {
            Ok(s) => prop_assert_eq!(r.map_err(|e| fail(e.to_string()))?, Value::Text(s.to_string())),
            Err(_) => prop_assert!(r.is_err(), "invalid UTF-8 {:02x?} accepted as {:?}", b, r),
        }
    }

    #[test]
    fn invalid_utf8_is_refused_as_text(b in invalid_utf8(), upper in any::<bool>()) {
        prop_assert!(std::str::from_utf8(&b).is_err());
        let h = if upper { hex::encode_upper(&b) } else { hex::encode(&b) };
        let r = serde_json::from_str::<Value>(&format!(r#"["text-utf8","{h}"]"#));
        prop_assert!(r.is_err(), "invalid UTF-8 {:02x?} accepted as {:?}", b, r);
        // The same bytes are a fine BLOB.
        let blob: Value = serde_json::from_str(&format!(r#"["blob","{h}"]"#))
            .map_err(|e| fail(e.to_string()))?;
        prop_assert_eq!(blob, Value::Blob(b));
    }

    #[test]
    fn every_value_roundtrips(v in value()) {
        let out = enc_value(&v);
        let back: Value = serde_json::from_slice(&out).map_err(|e| fail(e.to_string()))?;
        prop_assert!(back.same(&v), "{:?} came back as {:?}", v, back);
        prop_assert_eq!(enc_value(&back), out);
    }
}

// ------------------------------------------------------------------ 3. batches

proptest! {
    #![proptest_config(config(300))]

    #[test]
    fn batch_jsonl_and_json_roundtrip(b in batch_strategy(8, true)) {
        b.validate().map_err(|e| fail(format!("generator made an invalid batch: {e}")))?;

        let jl = b.to_jsonl();
        let text = String::from_utf8(jl.clone()).unwrap();
        let d = Batch::from_jsonl(&text).map_err(|e| fail(format!("{e}\n{text}")))?;
        prop_assert!(batch_same(&b, &d), "JSONL decode differs:\n{:?}\n{:?}", b, d);
        prop_assert_eq!(&d.to_jsonl(), &jl);

        let js = b.to_json().expect("no schema records");
        let text = String::from_utf8(js.clone()).unwrap();
        let d = Batch::from_json(&text).map_err(|e| fail(format!("{e}\n{text}")))?;
        prop_assert!(batch_same(&b, &d), "JSON decode differs:\n{:?}\n{:?}", b, d);
        prop_assert_eq!(&d.to_json(), &Some(js.clone()));
        prop_assert_eq!(&d.to_jsonl(), &jl);

        // The stream readers see the same items in both forms.
        let items = |mut r: BatchStreamReader<Io<Vec<u8>>>| -> Result<Vec<Item>, TestCaseError> {
            let mut v = Vec::new();
            while let Some(i) = r.next_item().map_err(|e| fail(e.to_string()))? {
                v.push(i);
            }
            Ok(v)
        };
        let a = items(BatchStreamReader::jsonl(Io::new(jl.clone()), "jsonl", Limits::default()))?;
        let j = items(
            BatchStreamReader::json(Io::new(js.clone()), "json", Limits::default())
                .map_err(|e| fail(e.to_string()))?,
        )?;
        prop_assert_eq!(a.len(), b.events.len() + 2);
        prop_assert_eq!(a.len(), j.len());
        for (x, y) in a.iter().zip(&j) {
            let same = match (x, y) {
                (Item::Event(p), Item::Event(q)) => events_same(p, q),
                _ => x == y,
            };
            prop_assert!(same, "{:?} vs {:?}", x, y);
        }
    }
}

// The decoders' fast path for canonical lines (src/wire/fast.rs) never
// disagrees with the strict decoder: on canonical lines it gives the same
// event, and on lines one byte away from canonical (mutated, deleted or
// inserted) it either gives what the strict decoder gives or declines.
proptest! {
    #![proptest_config(config(400))]

    #[test]
    fn fast_path_agrees_with_the_strict_decoder(
        b in batch_strategy(4, false),
        at in any::<Index>(),
        byte in prop_oneof![Just(b'"'), Just(b'\\'), Just(b','), Just(b']'), Just(b'0'), Just(b'9'), Just(b'-'), Just(b'e'), Just(b' '), any::<u8>()],
        how in 0u8..3,
    ) {
        let strict = |line: &[u8]| -> Option<Event> {
            let rec = mooncdc::wire::jsonl::parse_record(line).ok()?;
            match mooncdc::wire::batch::batch_item(rec).ok()? {
                Item::Event(e) => Some(e),
                _ => None,
            }
        };
        for e in &b.events {
            let mut line = Vec::new();
            mooncdc::wire::batch::write_event_line(&mut line, e);
            line.pop();
            let fast = mooncdc::wire::fast::event_line(&line);
            let meta = mooncdc::wire::fast::event_meta(&line);
            // Truncates are left to the strict decoder, and table names
            // with escapes to it when values are only checked.
            if !e.operation.is_truncate() {
                prop_assert!(fast.as_ref().is_some_and(|f| events_same(f, e)), "canonical line declined or changed: {}", String::from_utf8_lossy(&line));
                let plain_table = !e.table.bytes().any(|c| c < 0x20 || c == b'"' || c == b'\\');
                prop_assert!(meta.is_some_and(|m| m.sequence == e.sequence) || !plain_table, "canonical line declined: {}", String::from_utf8_lossy(&line));
            }
            let i = at.index(line.len());
            match how {
                0 => line[i] = byte,
                1 => { line.remove(i); }
                _ => line.insert(i, byte),
            }
            if let Some(f) = mooncdc::wire::fast::event_line(&line) {
                let s = strict(&line);
                prop_assert!(s.as_ref().is_some_and(|s| events_same(s, &f)), "fast path accepted {} as {:?}, strict: {:?}", String::from_utf8_lossy(&line), f, s);
            }
            if let Some(m) = mooncdc::wire::fast::event_meta(&line) {
                let s = strict(&line);
                let fits = s.as_ref().is_some_and(|s| {
                    s.sequence == m.sequence
                        && s.table.as_bytes() == &line[m.table.0..m.table.1]
                        && s.before.as_ref().map(Vec::len) == m.before
                        && s.after.as_ref().map(Vec::len) == m.after
                });
                prop_assert!(fits, "checking-only path accepted {} as {:?}, strict: {:?}", String::from_utf8_lossy(&line), m, s);
            }
        }
    }
}

// Reading ahead on a thread (what apply does) hands out the same items and
// stops at the same error, at the same line, as reading in place; many
// batches, some long enough to span chunks, one line possibly broken.
proptest! {
    #![proptest_config(config(60))]

    #[test]
    fn read_ahead_reads_the_same(
        batches in vec(batch_strategy(8, false), 1..4),
        long in 0usize..2600,
        at in any::<Index>(),
        byte in any::<u8>(),
        broken in any::<bool>(),
    ) {
        // One stream: the batches, each starting where the one before ended,
        // and one long batch of plain inserts in the middle.
        let mut text = Vec::new();
        let mut seq = 0u128;
        let src = "sqlite:read-ahead";
        for (n, b) in batches.iter().enumerate() {
            let events: Vec<Event> = b
                .events
                .iter()
                .enumerate()
                .map(|(i, e)| Event { sequence: seq + 1 + i as u128, ..e.clone() })
                .collect();
            let hw = seq + events.len() as u128;
            let batch = Batch {
                start: Cursor::new(src.to_string(), seq),
                high_water: hw,
                schemas: None,
                compacted: false,
                events,
                end: Cursor::new(src.to_string(), hw),
                changes: Vec::new(),
                messages: Vec::new(),
            };
            seq = hw;
            text.extend(batch.to_jsonl());
            if n == 0 {
                let events: Vec<Event> = (1..=long as u128)
                    .map(|i| Event {
                        sequence: seq + i,
                        table: "t".into(),
                        operation: Operation::Insert,
                        before: None,
                        before_key: None,
                        after: Some(vec![Value::Integer(i as i64), Value::Text("x".repeat(i as usize % 7))]),
                    })
                    .collect();
                let hw = seq + long as u128;
                let batch = Batch {
                    start: Cursor::new(src.to_string(), seq),
                    high_water: hw,
                    schemas: None,
                    compacted: false,
                    events,
                    end: Cursor::new(src.to_string(), hw),
                    changes: Vec::new(),
                    messages: Vec::new(),
                };
                seq = hw;
                text.extend(batch.to_jsonl());
            }
        }
        if broken {
            let i = at.index(text.len());
            text[i] = byte;
        }
        let read = |mut r: BatchStreamReader<Box<dyn std::io::BufRead + Send>>| {
            let mut items = Vec::new();
            loop {
                match r.next_item() {
                    Ok(Some(i)) => items.push(format!("{i:?}")),
                    Ok(None) => return (items, None, r.batches()),
                    Err(e) => return (items, Some(e.to_string()), r.batches()),
                }
            }
        };
        let open = || -> BatchStreamReader<Box<dyn std::io::BufRead + Send>> {
            BatchStreamReader::jsonl(Box::new(Io::new(text.clone())), "stream", Limits::default())
        };
        let here = read(open());
        let ahead = read(open().read_ahead().map_err(|e| fail(e.to_string()))?);
        prop_assert_eq!(&here.0.len(), &ahead.0.len());
        prop_assert!(here.0 == ahead.0, "the items differ");
        prop_assert_eq!(&here.1, &ahead.1);
        prop_assert_eq!(here.2, ahead.2);

        // Lean reading (split, merge, compact): the same items, each with
        // the same line written through and the same table, in place and
        // read ahead.
        let read_lean = |mut r: BatchStreamReader<Box<dyn std::io::BufRead + Send>>| {
            let mut items = Vec::new();
            loop {
                match r.next_lean() {
                    Ok(Some(l)) => {
                        let table = match &l {
                            Lean::Event(_) => r.lean_table().to_string(),
                            _ => String::new(),
                        };
                        let line = r.canonical_line().map(|l| l.to_vec());
                        items.push(format!("{l:?} {table:?} {line:?}"));
                    }
                    Ok(None) => return (items, None, r.batches()),
                    Err(e) => return (items, Some(e.to_string()), r.batches()),
                }
            }
        };
        let here = read_lean(open());
        let ahead = read_lean(open().read_ahead_lean().map_err(|e| fail(e.to_string()))?);
        prop_assert_eq!(&here.0.len(), &ahead.0.len());
        prop_assert!(here.0 == ahead.0, "the lean items differ");
        prop_assert_eq!(&here.1, &ahead.1);
        prop_assert_eq!(here.2, ahead.2);
    }
}

// ------------------------------------------------------------------ 4. split and merge

fn run_split(
    input: &[u8],
    opts: SplitOptions,
    format: OutputFormat,
) -> Result<Vec<u8>, TestCaseError> {
    let mut r = BatchStreamReader::jsonl(Io::new(input.to_vec()), "input", Limits::default());
    let mut sink = WriteSink {
        out: Vec::new(),
        format,
    };
    split(&mut r, opts, &mut sink).map_err(|e| fail(format!("split: {e}")))?;
    Ok(sink.out)
}

fn run_merge(inputs: Vec<Vec<u8>>) -> Result<Vec<u8>, TestCaseError> {
    let readers = inputs
        .into_iter()
        .enumerate()
        .map(|(i, b)| BatchStreamReader::jsonl(Io::new(b), format!("piece{i}"), Limits::default()))
        .collect();
    let mut sink = WriteSink {
        out: Vec::new(),
        format: OutputFormat::Jsonl,
    };
    merge(readers, &mut sink).map_err(|e| fail(format!("merge: {e}")))?;
    Ok(sink.out)
}

/// Cut a JSONL batch stream into its batches' bytes (header line to commit line).
fn stream_pieces(out: &[u8]) -> Vec<Vec<u8>> {
    let mut pieces = Vec::new();
    let mut cur = Vec::new();
    for line in out.split_inclusive(|&b| b == b'\n') {
        cur.extend_from_slice(line);
        if line.starts_with(br#"{"kind":"commit""#) {
            pieces.push(std::mem::take(&mut cur));
        }
    }
    assert!(cur.is_empty(), "trailing bytes after the last commit");
    pieces
}

/// Byte limits for split: anywhere, or right at the size of a prefix of the
/// batch (or all of it) written as one piece ending at its last event, which
/// is where cuts are decided.
type BytesChoice = Option<(u8, Index, i64)>;

fn bytes_choice() -> impl Strategy<Value = BytesChoice> {
    prop::option::of((0u8..3, any::<Index>(), -1i64..=1))
}

fn max_bytes_for(b: &Batch, choice: BytesChoice) -> Option<u64> {
    choice.map(|(mode, i, d)| {
        if mode > 0 && !b.events.is_empty() {
            let n = b.events.len();
            let k = if mode == 1 { i.index(n) + 1 } else { n };
            let prefix = Batch {
                end: Cursor::new(b.start.source.clone(), b.events[k - 1].sequence),
                events: b.events[..k].to_vec(),
                changes: Vec::new(),
                messages: Vec::new(),
                ..b.clone()
            };
            (prefix.to_jsonl().len() as i64 + d).max(1) as u64
        } else {
            i.index(b.to_jsonl().len() + 64) as u64 + 1
        }
    })
}

/// Split `b`, check the pieces, and check that merging them gives `b` back
/// byte for byte. The byte limit itself is checked only with `check_bytes`.
fn check_split_merge(
    b: &Batch,
    opts: SplitOptions,
    order: &[u32],
    check_bytes: bool,
) -> Result<(), TestCaseError> {
    let input = b.to_jsonl();
    let out = run_split(&input, opts, OutputFormat::Jsonl)?;

    // Every piece is a valid batch (within the limits); together they cover
    // the input interval contiguously with the same events.
    let pieces = stream_pieces(&out);
    prop_assert!(!pieces.is_empty());
    let mut start = b.start.clone();
    let mut events = Vec::new();
    for p in &pieces {
        let text = std::str::from_utf8(p).unwrap();
        let d = Batch::from_jsonl(text).map_err(|e| fail(format!("piece: {e}\n{text}")))?;
        prop_assert_eq!(&d.to_jsonl(), p);
        prop_assert_eq!(&d.start, &start);
        prop_assert_eq!(d.high_water, b.high_water);
        prop_assert_eq!(&d.schemas, &b.schemas);
        let n = d.events.len() as u64;
        if let Some(m) = opts.max_events {
            prop_assert!(n <= m, "piece of {} events, max {}", n, m);
        }
        if let (Some(m), true) = (opts.max_bytes, check_bytes) {
            // A single event alone may exceed the limit.
            prop_assert!(
                p.len() as u64 <= m || n <= 1,
                "piece of {} events is {} bytes, max {}:\n{}",
                n,
                p.len(),
                m,
                text
            );
        }
        if b.events.is_empty() {
            prop_assert_eq!(pieces.len(), 1);
        } else {
            prop_assert!(n >= 1, "empty piece cut from a nonempty batch");
        }
        start = d.end.clone();
        events.extend(d.events);
    }
    prop_assert_eq!(&start, &b.end);
    prop_assert_eq!(events.len(), b.events.len());
    prop_assert!(events.iter().zip(&b.events).all(|(x, y)| events_same(x, y)));

    // merge(split(x)) == x, byte for byte: as one stream...
    let merged = run_merge(vec![out.clone()])?;
    prop_assert_eq!(
        String::from_utf8(merged).unwrap(),
        String::from_utf8(input.clone()).unwrap()
    );
    // ...and as separate inputs given in any order.
    let mut shuffled: Vec<(u32, Vec<u8>)> = pieces
        .iter()
        .enumerate()
        .map(|(i, p)| (order[i % order.len()].wrapping_add(i as u32), p.clone()))
        .collect();
    shuffled.sort_by_key(|(k, _)| *k);
    let merged = run_merge(shuffled.into_iter().map(|(_, p)| p).collect())?;
    prop_assert_eq!(
        String::from_utf8(merged).unwrap(),
        String::from_utf8(input.clone()).unwrap()
    );

    // The JSON output form carries the same pieces: read back and copied
    // (split without limits) as JSONL, it is the JSONL output.
    let json = run_split(&input, opts, OutputFormat::Json)?;
    let mut r = BatchStreamReader::json(Io::new(json), "json", Limits::default())
        .map_err(|e| fail(e.to_string()))?;
    let mut sink = WriteSink {
        out: Vec::new(),
        format: OutputFormat::Jsonl,
    };
    split(&mut r, SplitOptions::default(), &mut sink).map_err(|e| fail(e.to_string()))?;
    prop_assert_eq!(
        String::from_utf8(sink.out).unwrap(),
        String::from_utf8(out).unwrap()
    );
    Ok(())
}

proptest! {
    #![proptest_config(config(500))]

    #[test]
    fn split_then_merge_is_identity(
        b in batch_strategy(10, false),
        max_events in prop::option::of(1u64..6),
        max_bytes in bytes_choice(),
        order in vec(any::<u32>(), 16),
    ) {
        let opts = SplitOptions { max_events, max_bytes: max_bytes_for(&b, max_bytes) };
        check_split_merge(&b, opts, &order, false)?;
    }
}

proptest! {
    // The byte-limit boundary is hit by a few cases in a hundred: run more.
    #![proptest_config(config(1000))]

    #[test]
    fn split_pieces_respect_max_bytes(
        b in batch_strategy(10, false),
        longer_end in any::<bool>(),
        max_events in prop::option::of(1u64..6),
        max_bytes in bytes_choice(),
        order in vec(any::<u32>(), 16),
    ) {
        let mut b = b;
        // Half the time, an end with more digits than the last event's sequence.
        if let (true, Some(last)) = (longer_end, b.events.last().map(|e| e.sequence)) {
            if let Some(end) = last.checked_mul(10).and_then(|x| x.checked_add(1)) {
                b.end.set_sequence(b.end.sequence().max(end));
                b.high_water = b.high_water.max(end);
            }
        }
        let opts = SplitOptions { max_events, max_bytes: max_bytes_for(&b, max_bytes) };
        check_split_merge(&b, opts, &order, true)?;
    }
}

proptest! {
    #![proptest_config(config(100))]

    #[test]
    fn split_then_merge_keeps_empty_schemas(
        b in batch_strategy(0, false).prop_map(|mut b| { b.schemas = Some(Vec::new()); b }),
        order in vec(any::<u32>(), 16),
    ) {
        check_split_merge(&b, SplitOptions::default(), &order, true)?;
    }
}

/// The smallest case of the byte-limit bug, spelled out: events 1 and 2, end 10,
/// and a limit equal to that piece's size were it to end at 2. Split writes one
/// piece of both events ending at 10, one byte over the limit.
#[test]
fn split_last_piece_over_max_bytes_example() {
    let schema = Schema {
        table: "t".into(),
        columns: vec![Column {
            name: "a".into(),
            decl_type: String::new(),
            nullable: true,
        }],
        key: vec![],
    };
    let ev = |s| Event {
        sequence: s,
        table: "t".into(),
        operation: Operation::Insert,
        before: None,
        before_key: None,
        after: Some(vec![Value::Null]),
    };
    let b = Batch {
        start: Cursor::new("s", 0),
        end: Cursor::new("s", 10),
        high_water: 10,
        schemas: Some(vec![schema]),
        compacted: false,
        events: vec![ev(1), ev(2)],
        changes: Vec::new(),
        messages: Vec::new(),
    };
    let at_2 = Batch {
        end: Cursor::new("s", 2),
        ..b.clone()
    };
    let max = at_2.to_jsonl().len() as u64;
    let opts = SplitOptions {
        max_events: None,
        max_bytes: Some(max),
    };
    let out = run_split(&b.to_jsonl(), opts, OutputFormat::Jsonl).unwrap();
    for p in stream_pieces(&out) {
        let d = Batch::from_jsonl(std::str::from_utf8(&p).unwrap()).unwrap();
        assert!(
            p.len() as u64 <= max || d.events.len() <= 1,
            "piece of {} events is {} bytes, max {max}",
            d.events.len(),
            p.len()
        );
    }
}

/// The smallest case of the empty-schemas bug: an empty batch with `"schemas":[]`.
#[test]
fn merge_keeps_empty_schemas_example() {
    let b = Batch {
        start: Cursor::new("s", 0),
        end: Cursor::new("s", 0),
        high_water: 0,
        schemas: Some(Vec::new()),
        compacted: false,
        events: vec![],
        changes: Vec::new(),
        messages: Vec::new(),
    };
    let input = b.to_jsonl();
    let merged = run_merge(vec![input.clone()]).unwrap();
    assert_eq!(
        String::from_utf8(merged).unwrap(),
        String::from_utf8(input).unwrap()
    );
}

// ------------------------------------------------------------------ 5. compaction

/// Values a key column draws from: distinct values that compare equal in key
/// order (1 and 1.0, 0.0 and -0.0) are different keys.
fn key_pool() -> Vec<Value> {
    vec![
        Value::Integer(1),
        Value::Real(1.0),
        Value::Text("a".into()),
        Value::Real(-0.0),
        Value::Real(0.0),
        Value::Blob(vec![0]),
        Value::Text("\u{0}".into()),
    ]
}

fn small_value() -> impl Strategy<Value = Value> {
    prop_oneof![
        3 => (0usize..4).prop_map(|i| key_pool()[i].clone()),
        1 => Just(Value::Null),
        2 => value(),
    ]
}

/// (columns, key positions in key order, size of the key pool)
type TableSpec = (usize, Vec<usize>, usize);

fn table_spec() -> impl Strategy<Value = TableSpec> {
    (1usize..=4, vec(any::<Index>(), 0..=2), 1usize..=5).prop_map(|(w, key, pool)| {
        let mut k: Vec<usize> = Vec::new();
        for i in key {
            let i = i.index(w);
            if !k.contains(&i) {
                k.push(i);
            }
        }
        (w, k, pool)
    })
}

/// (table, kind, row choice, key choice, non-key values, step)
type StepSpec = (Index, u8, Index, Index, Vec<Value>, u128);

fn step_spec() -> impl Strategy<Value = StepSpec> {
    (
        any::<Index>(),
        0u8..10,
        any::<Index>(),
        any::<Index>(),
        vec(small_value(), 4),
        prop_oneof![4 => Just(1u128), 1 => 1u128..5],
    )
}

struct History {
    schemas: Vec<Schema>,
    events: Vec<Event>,
    start: u128,
    end: u128,
    /// The model's final rows: table → encoded key → row.
    model: BTreeMap<String, BTreeMap<Vec<u8>, Row>>,
}

impl std::fmt::Debug for History {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(f, "start {} end {}", self.start, self.end)?;
        for s in &self.schemas {
            writeln!(
                f,
                "schema {} columns {} key {:?}",
                s.table,
                s.columns.len(),
                s.key
            )?;
        }
        for e in enc_events(&self.events) {
            writeln!(f, "{e}")?;
        }
        Ok(())
    }
}

fn encode_key(key: &[Value]) -> Vec<u8> {
    let mut out = Vec::new();
    write_row(&mut out, key);
    out
}

/// Interpret random choices against a model so that every event is
/// consistent: inserts of absent keys, updates and deletes of present rows
/// with their exact before images, and updates that sometimes move a row to
/// an absent key.
fn build_history(
    tables: Vec<TableSpec>,
    steps: Vec<StepSpec>,
    start: u128,
    end_extra: u128,
) -> History {
    let pool = key_pool();
    let schemas: Vec<Schema> = tables
        .iter()
        .enumerate()
        .map(|(t, (w, key, _))| Schema {
            table: format!("t{t}"),
            columns: (0..*w)
                .map(|c| Column {
                    name: format!("c{c}"),
                    decl_type: "ANY".into(),
                    nullable: true,
                })
                .collect(),
            key: key.iter().map(|c| format!("c{c}")).collect(),
        })
        .collect();
    // Every key of every table.
    let keyspaces: Vec<Vec<Vec<Value>>> = tables
        .iter()
        .map(|(_, key, n)| {
            let mut all: Vec<Vec<Value>> = vec![vec![]];
            for _ in key {
                all = all
                    .into_iter()
                    .flat_map(|k| {
                        pool[..*n].iter().map(move |v| {
                            let mut k = k.clone();
                            k.push(v.clone());
                            k
                        })
                    })
                    .collect();
            }
            all
        })
        .collect();
    let mut model: Vec<BTreeMap<Vec<u8>, Row>> = vec![BTreeMap::new(); tables.len()];
    let mut events = Vec::new();
    let mut seq = start;
    for (t, kind, row_choice, key_choice, vals, step) in steps {
        let ti = t.index(tables.len());
        let (w, key, _) = &tables[ti];
        let rows = &mut model[ti];
        let make_row = |k: &[Value], vals: &[Value]| -> Row {
            let mut r: Row = vals[..*w].to_vec();
            for (v, &c) in k.iter().zip(key) {
                r[c] = v.clone();
            }
            r
        };
        let absent: Vec<&Vec<Value>> = keyspaces[ti]
            .iter()
            .filter(|k| !rows.contains_key(&encode_key(k)))
            .collect();
        // kind: 0-3 insert, 4-7 update, 8-9 delete (falling back when impossible).
        let want = match kind {
            0..=3 => 0,
            4..=7 => 1,
            _ => 2,
        };
        let op = if rows.is_empty() {
            0
        } else if absent.is_empty() && want == 0 {
            1
        } else {
            want
        };
        if op == 0 && absent.is_empty() {
            continue;
        }
        seq += step;
        let table = schemas[ti].table.clone();
        let event = match op {
            0 => {
                let k = absent[key_choice.index(absent.len())].clone();
                let r = make_row(&k, &vals);
                rows.insert(encode_key(&k), r.clone());
                Event {
                    sequence: seq,
                    table,
                    operation: Operation::Insert,
                    before: None,
                    before_key: None,
                    after: Some(r),
                }
            }
            1 => {
                let (k, old) = rows
                    .iter()
                    .nth(row_choice.index(rows.len()))
                    .map(|(k, r)| (k.clone(), r.clone()))
                    .unwrap();
                let old_key: Vec<Value> = key.iter().map(|&c| old[c].clone()).collect();
                // A third of the time, move the row to an absent key.
                let new_key = if key_choice.index(3) == 0 && !absent.is_empty() {
                    absent[key_choice.index(absent.len())].clone()
                } else {
                    old_key
                };
                let r = make_row(&new_key, &vals);
                rows.remove(&k);
                rows.insert(encode_key(&new_key), r.clone());
                Event {
                    sequence: seq,
                    table,
                    operation: Operation::Update,
                    before: Some(old),
                    before_key: None,
                    after: Some(r),
                }
            }
            _ => {
                let (k, old) = rows
                    .iter()
                    .nth(row_choice.index(rows.len()))
                    .map(|(k, r)| (k.clone(), r.clone()))
                    .unwrap();
                rows.remove(&k);
                Event {
                    sequence: seq,
                    table,
                    operation: Operation::Delete,
                    before: Some(old),
                    before_key: None,
                    after: None,
                }
            }
        };
        events.push(event);
    }
    let model = schemas
        .iter()
        .zip(model)
        .filter(|(_, rows)| !rows.is_empty())
        .map(|(s, rows)| (s.table.clone(), rows))
        .collect();
    History {
        schemas,
        events,
        start,
        end: seq + end_extra,
        model,
    }
}

fn history_strategy(max_steps: usize) -> impl Strategy<Value = History> {
    (
        vec(table_spec(), 1..=2),
        vec(step_spec(), 0..=max_steps),
        prop_oneof![0u128..5, any::<u64>().prop_map(u128::from)],
        prop_oneof![Just(0u128), 1u128..5],
    )
        .prop_map(|(t, s, start, extra)| build_history(t, s, start, extra))
}

fn history_batch(h: &History, events: Vec<Event>, start: u128, end: u128) -> Batch {
    Batch {
        start: Cursor::new("src", start),
        end: Cursor::new("src", end),
        high_water: end,
        schemas: Some(h.schemas.clone()),
        compacted: false,
        events,
        changes: Vec::new(),
        messages: Vec::new(),
    }
}

fn apply_all(batches: &[&Batch]) -> Result<MemoryTarget, TestCaseError> {
    let mut t = MemoryTarget::new();
    for b in batches {
        t.apply(b).map_err(|e| fail(format!("apply: {e}")))?;
    }
    Ok(t)
}

fn compacted(h: &History, events: &[Event]) -> Result<Vec<Event>, TestCaseError> {
    compact_events(events.to_vec(), &h.schemas).map_err(|e| fail(format!("compact: {e}")))
}

/// Run the streaming `compact` over a JSONL stream, returning its output batches.
fn stream_compact(batches: &[&Batch]) -> Result<Vec<Batch>, TestCaseError> {
    let mut input = Vec::new();
    for b in batches {
        input.extend(b.to_jsonl());
    }
    let mut r = BatchStreamReader::jsonl(Io::new(input), "in", Limits::default());
    let mut sink = WriteSink {
        out: Vec::new(),
        format: OutputFormat::Jsonl,
    };
    compact(&mut r, &[], &mut sink).map_err(|e| fail(format!("compact: {e}")))?;
    stream_pieces(&sink.out)
        .iter()
        .map(|p| {
            Batch::from_jsonl(std::str::from_utf8(p).unwrap())
                .map_err(|e| fail(format!("compact output: {e}")))
        })
        .collect()
}

proptest! {
    #![proptest_config(config(400))]

    #[test]
    fn compaction_keeps_the_final_state(h in history_strategy(40)) {
        let full = history_batch(&h, h.events.clone(), h.start, h.end);
        let plain = apply_all(&[&full])?;
        // The generator's model agrees with the target.
        let model = MemoryTarget {
            cursor: Some(Cursor::new("src", h.end)),
            tables: h.model.clone(),
            ..Default::default()
        };
        prop_assert_eq!(target_state(&plain), target_state(&model));

        let c = compacted(&h, &h.events)?;
        let cb = history_batch(&h, c.clone(), h.start, h.end);
        cb.validate().map_err(|e| fail(format!("compacted batch invalid: {e}")))?;
        let after = apply_all(&[&cb]).map_err(|e| fail(format!("{e:?}\ncompacted:\n{}", enc_events(&c).join("\n"))))?;
        prop_assert_eq!(target_state(&after), target_state(&plain),
            "compacted:\n{}", enc_events(&c).join("\n"));
        // (d) never more events; every output sequence is an input sequence.
        prop_assert!(c.len() <= h.events.len());
        let seqs: std::collections::BTreeSet<u128> = h.events.iter().map(|e| e.sequence).collect();
        prop_assert!(c.iter().all(|e| seqs.contains(&e.sequence)));

        // The streaming tool gives the same events and keeps the interval.
        let out = stream_compact(&[&full])?;
        prop_assert_eq!(out.len(), 1);
        prop_assert_eq!(&out[0].start, &full.start);
        prop_assert_eq!(&out[0].end, &full.end);
        prop_assert_eq!(out[0].high_water, full.high_water);
        prop_assert_eq!(&out[0].schemas, &full.schemas);
        prop_assert_eq!(enc_events(&out[0].events), enc_events(&c));
    }

    /// A target that already holds part of a history is given the compacted
    /// batch of all of it: it either refuses (only when the batch is marked
    /// compacted and the target's cursor lies strictly inside it) or ends in
    /// exactly the state of the uncompacted stream. Never a silent divergence.
    #[test]
    fn a_target_holding_part_of_a_compacted_batch_refuses_it_or_ends_right(
        h in history_strategy(40),
        cut in any::<Index>(),
    ) {
        let k = cut.index(h.events.len() + 1);
        let held_to = if k == 0 { h.start } else { h.events[k - 1].sequence };
        let prefix = history_batch(&h, h.events[..k].to_vec(), h.start, held_to);
        let full = history_batch(&h, h.events.clone(), h.start, h.end);
        let plain = apply_all(&[&full])?;
        let out = stream_compact(&[&full])?;
        prop_assert_eq!(out.len(), 1);
        prop_assert_eq!(out[0].compacted, out[0].events.len() < h.events.len());
        let mut t = apply_all(&[&prefix])?;
        match t.apply(&out[0]) {
            Ok(()) => prop_assert_eq!(target_state(&t), target_state(&plain),
                "held through {}; compacted:\n{}", held_to, enc_events(&out[0].events).join("\n")),
            Err(e) => prop_assert!(
                out[0].compacted && held_to > h.start && held_to < h.end,
                "refused without cause (held through {held_to}): {e}"
            ),
        }
    }

    #[test]
    fn compaction_is_idempotent(h in history_strategy(40)) {
        let once = compacted(&h, &h.events)?;
        let twice = compacted(&h, &once)?;
        prop_assert_eq!(enc_events(&twice), enc_events(&once));
    }

    #[test]
    fn compaction_composes(h in history_strategy(40), cut in any::<Index>()) {
        let p = cut.index(h.events.len() + 1);
        let (a, b) = h.events.split_at(p);
        let mid = if p == 0 { h.start } else { a[p - 1].sequence };

        let whole = compacted(&h, &h.events)?;
        let ca = compacted(&h, a)?;
        let cb = compacted(&h, b)?;
        let mut joined = ca.clone();
        joined.extend(cb.iter().cloned());
        let again = compacted(&h, &joined)?;

        let s_whole = apply_all(&[&history_batch(&h, whole, h.start, h.end)])?;
        let s_again = apply_all(&[&history_batch(&h, again.clone(), h.start, h.end)])?;
        prop_assert_eq!(target_state(&s_again), target_state(&s_whole),
            "compact(compact(a) ++ compact(b)):\n{}", enc_events(&again).join("\n"));

        // Applying the compacted halves one after the other also agrees.
        let ba = history_batch(&h, ca, h.start, mid);
        let bb = history_batch(&h, cb, mid, h.end);
        let s_halves = apply_all(&[&ba, &bb])?;
        prop_assert_eq!(target_state(&s_halves), target_state(&s_whole));

        // The streaming tool compacts each batch of a stream on its own, keeping
        // every interval.
        let ua = history_batch(&h, a.to_vec(), h.start, mid);
        let ub = history_batch(&h, b.to_vec(), mid, h.end);
        let out = stream_compact(&[&ua, &ub])?;
        prop_assert_eq!(out.len(), 2);
        prop_assert_eq!(&out[0].start, &ua.start);
        prop_assert_eq!(&out[0].end, &ua.end);
        prop_assert_eq!(&out[1].start, &ub.start);
        prop_assert_eq!(&out[1].end, &ub.end);
        prop_assert_eq!(enc_events(&out[0].events), enc_events(&ba.events));
        prop_assert_eq!(enc_events(&out[1].events), enc_events(&bb.events));
        prop_assert!(out[0].events.len() <= a.len() && out[1].events.len() <= b.len());
    }
}

// ------------------------------------------------------------------ 5b. key-only old rows

/// The history as a source without whole old rows writes it (docs/FORMAT.md,
/// "Key-only before images and unchanged values"): where `choices` say so,
/// an update or delete of a keyed table names its old row by the key alone,
/// and such an update marks some of the values it did not change as
/// unchanged (never a key column).
fn key_only(h: &History, choices: &[Index]) -> Vec<Event> {
    let mut c = choices.iter().cycle();
    let mut pick = |n: usize| c.next().map_or(0, |i| i.index(n));
    h.events
        .iter()
        .map(|e| {
            let schema = h.schemas.iter().find(|s| s.table == e.table).unwrap();
            let key = schema.key_indices();
            let mut e = e.clone();
            if key.is_empty() || e.before.is_none() || pick(3) == 0 {
                return e;
            }
            let before = e.before.take().unwrap();
            e.before_key = Some(key.iter().map(|&i| before[i].clone()).collect());
            if let Some(after) = e.after.as_mut() {
                for (i, v) in after.iter_mut().enumerate() {
                    if !key.contains(&i) && v.same(&before[i]) && pick(2) == 0 {
                        *v = Value::Unchanged;
                    }
                }
            }
            e
        })
        .collect()
}

proptest! {
    #![proptest_config(config(300))]

    /// Key-only old rows and unchanged values: the batch reads back as it
    /// was written (strict and fast decoders alike), a target that fills
    /// them from its rows ends in the history's state, and compaction (in
    /// memory and streaming, once or twice) keeps that state.
    #[test]
    fn key_only_changes_are_carried_and_compacted(
        h in history_strategy(40),
        choices in vec(any::<Index>(), 1..64),
    ) {
        let events = key_only(&h, &choices);
        let batch = history_batch(&h, events.clone(), h.start, h.end);
        batch.validate().map_err(|e| fail(format!("invalid: {e}")))?;
        let text = String::from_utf8(batch.to_jsonl()).unwrap();
        let back = Batch::from_jsonl(&text).map_err(|e| fail(format!("decode: {e}")))?;
        prop_assert!(batch_same(&back, &batch));
        for (line, e) in text.lines().skip(1).zip(&events) {
            let fast = mooncdc::wire::fast::event_line(line.as_bytes());
            prop_assert!(fast.as_ref().is_some_and(|f| events_same(f, e)), "fast path: {line}");
        }

        let plain = apply_all(&[&history_batch(&h, h.events.clone(), h.start, h.end)])?;
        let filled = apply_all(&[&batch])?;
        prop_assert_eq!(target_state(&filled), target_state(&plain));

        let c = compacted(&h, &events)?;
        prop_assert!(c.len() <= events.len());
        let cb = history_batch(&h, c.clone(), h.start, h.end);
        cb.validate().map_err(|e| fail(format!("compacted batch invalid: {e}")))?;
        let after = apply_all(&[&cb]).map_err(|e| fail(format!("{e:?}\ncompacted:\n{}", enc_events(&c).join("\n"))))?;
        prop_assert_eq!(target_state(&after), target_state(&plain),
            "compacted:\n{}", enc_events(&c).join("\n"));
        // No unchanged value is left where an earlier image in the batch had it.
        for e in &c {
            if e.operation == Operation::Insert {
                prop_assert!(!e.has_unchanged(), "an insert keeps an unchanged mark: {}", enc_events(std::slice::from_ref(e))[0]);
            }
        }
        let out = stream_compact(&[&batch])?;
        prop_assert_eq!(enc_events(&out[0].events), enc_events(&c));
        prop_assert_eq!(enc_events(&compacted(&h, &c)?), enc_events(&c));
    }
}

// ------------------------------------------------------------------ key order

/// Exact comparison of an i64 with a finite f64, from the f64's bits.
fn exact_cmp_int_real(i: i64, r: f64) -> Ordering {
    let bits = r.to_bits();
    let neg = bits >> 63 == 1;
    let field = ((bits >> 52) & 0x7ff) as i32;
    let frac = (bits & ((1u64 << 52) - 1)) as i128;
    let (m, e) = if field == 0 {
        (frac, -1074)
    } else {
        (frac | (1i128 << 52), field - 1075)
    };
    if m == 0 {
        return i.cmp(&0);
    }
    let m = if neg { -m } else { m };
    let i = i as i128;
    if e >= 0 {
        if e > 70 {
            // |r| >= 2^70 > |i|
            return if neg {
                Ordering::Greater
            } else {
                Ordering::Less
            };
        }
        i.cmp(&(m << e))
    } else if e < -64 {
        // 0 < |r| < 2^-11
        match i.cmp(&0) {
            Ordering::Equal => {
                if neg {
                    Ordering::Greater
                } else {
                    Ordering::Less
                }
            }
            o => o,
        }
    } else {
        (i << -e).cmp(&m)
    }
}

fn int_near() -> impl Strategy<Value = i64> {
    let p53 = 1i64 << 53;
    prop_oneof![
        any::<i64>(),
        (-3i64..3),
        (-8i64..8).prop_map(move |d| p53 + d),
        (-8i64..8).prop_map(move |d| -p53 + d),
        (0i64..16).prop_map(|d| i64::MAX - d),
        (0i64..16).prop_map(|d| i64::MIN + d),
    ]
}

fn real_near() -> impl Strategy<Value = f64> {
    let around =
        |x: f64| (-6i64..6).prop_map(move |d| f64::from_bits((x.to_bits() as i64 + d) as u64));
    prop_oneof![
        finite_f64(),
        around(TWO63),
        around(-TWO63),
        around(9007199254740992.0),
        around(-9007199254740992.0),
        around(1.0),
        around(-1.0),
        (-100i64..100, 0u32..4).prop_map(|(n, q)| n as f64 / (1 << q) as f64),
    ]
    .prop_filter("finite", |x| x.is_finite())
}

fn numeric() -> impl Strategy<Value = Value> {
    prop_oneof![
        int_near().prop_map(Value::Integer),
        real_near().prop_map(Value::Real),
    ]
}

proptest! {
    #![proptest_config(config(3000))]

    #[test]
    fn key_cmp_int_real_is_exact(i in int_near(), r in real_near()) {
        let want = exact_cmp_int_real(i, r);
        prop_assert_eq!(Value::Integer(i).key_cmp(&Value::Real(r)), want, "{} vs {:e}", i, r);
        prop_assert_eq!(Value::Real(r).key_cmp(&Value::Integer(i)), want.reverse(), "{:e} vs {}", r, i);
    }

    #[test]
    fn key_cmp_int_real_near_each_other(r in real_near(), d in -3i64..=3) {
        // An integer next to the real's own integer part.
        let t = r.trunc();
        let base = if t >= TWO63 {
            i64::MAX
        } else if t < -TWO63 {
            i64::MIN
        } else {
            t as i64
        };
        let i = base.saturating_add(d);
        let want = exact_cmp_int_real(i, r);
        prop_assert_eq!(Value::Integer(i).key_cmp(&Value::Real(r)), want, "{} vs {:e}", i, r);
        prop_assert_eq!(Value::Real(r).key_cmp(&Value::Integer(i)), want.reverse());
    }

    #[test]
    fn key_cmp_is_a_total_preorder(a in numeric(), b in numeric(), c in numeric()) {
        prop_assert_eq!(a.key_cmp(&b), b.key_cmp(&a).reverse());
        prop_assert_eq!(a.key_cmp(&a), Ordering::Equal);
        if a.key_cmp(&b) != Ordering::Greater && b.key_cmp(&c) != Ordering::Greater {
            prop_assert!(a.key_cmp(&c) != Ordering::Greater, "{:?} <= {:?} <= {:?}", a, b, c);
        }
    }

    #[test]
    fn key_cmp_orders_classes(a in value(), b in value()) {
        let rank = |v: &Value| match v {
            Value::Null => 0,
            Value::Integer(_) | Value::Real(_) => 1,
            Value::Text(_) => 2,
            Value::Blob(_) => 3,
            Value::Unchanged => 4,
        };
        let o = a.key_cmp(&b);
        prop_assert_eq!(o, b.key_cmp(&a).reverse());
        if rank(&a) != rank(&b) {
            prop_assert_eq!(o, rank(&a).cmp(&rank(&b)));
        }
        match (&a, &b) {
            (Value::Text(x), Value::Text(y)) => prop_assert_eq!(o, x.as_bytes().cmp(y.as_bytes())),
            (Value::Blob(x), Value::Blob(y)) => prop_assert_eq!(o, x.cmp(y)),
            (Value::Integer(x), Value::Integer(y)) => prop_assert_eq!(o, x.cmp(y)),
            (Value::Integer(x), Value::Real(y)) => prop_assert_eq!(o, exact_cmp_int_real(*x, *y)),
            _ => {}
        }
    }
}

// ------------------------------------------------------------------ 6. SQLite apply

/// One step of a SQLite apply history: (table, key, what, text, key to move
/// to). What: an insert when the key is free, else an update, a delete or a
/// key-changing update, chosen by `what`.
type ApplyStep = (bool, i64, u8, Option<String>, i64);

fn apply_step() -> impl Strategy<Value = ApplyStep> {
    (
        any::<bool>(),
        0i64..1000,
        0u8..4,
        proptest::option::of(any::<String>()),
        0i64..1000,
    )
}

proptest! {
    #![proptest_config(config(40))]

    /// The SQLite projection, fed through the read-ahead the tool uses (runs
    /// of inserts into one table written together), ends in the in-memory
    /// double's state: same rows, same cursor, for histories of inserts,
    /// updates (some moving the key), deletes on two tables, cut into
    /// batches anywhere; keys from a few (short runs, many updates) or many
    /// (long runs of inserts, over chunk boundaries). With an insert of a
    /// key already held put in somewhere (and events after it), both refuse
    /// that event's batch, name the same event, and keep the batches before.
    #[test]
    fn sqlite_apply_ends_in_the_doubles_state(
        steps in vec(apply_step(), 1..1500),
        keys in prop_oneof![Just(8i64), Just(1000i64)],
        cuts in vec(any::<Index>(), 0..4),
        overwrite in any::<bool>(),
        dup in proptest::option::of(any::<Index>()),
    ) {
        use mooncdc::destination::{AuditedTarget, OnConflict, Target, TargetOptions};
        let schemas: Vec<Schema> = ["t", "u"]
            .iter()
            .map(|t| serde_json::from_str(&format!(
                r#"{{"table":"{t}","columns":[{{"name":"id","type":"INTEGER","nullable":false}},{{"name":"v","type":"TEXT","nullable":true}}],"key":["id"]}}"#
            )).unwrap())
            .collect();
        let mut state: BTreeMap<(bool, i64), Option<String>> = BTreeMap::new();
        let row = |k: i64, v: &Option<String>| -> Row {
            vec![Value::Integer(k), v.clone().map_or(Value::Null, Value::Text)]
        };
        let mut events = Vec::new();
        for (i, (u, k, what, v, to)) in steps.into_iter().enumerate() {
            let (k, to) = (k % keys, to % keys);
            let table = if u { "u" } else { "t" }.to_string();
            let sequence = i as u128 + 1;
            let (operation, before, after) = match state.get(&(u, k)).cloned() {
                None => {
                    state.insert((u, k), v.clone());
                    (Operation::Insert, None, Some(row(k, &v)))
                }
                Some(old) => match what {
                    0 => {
                        state.remove(&(u, k));
                        (Operation::Delete, Some(row(k, &old)), None)
                    }
                    1 if !state.contains_key(&(u, to)) => {
                        state.remove(&(u, k));
                        state.insert((u, to), v.clone());
                        (Operation::Update, Some(row(k, &old)), Some(row(to, &v)))
                    }
                    _ => {
                        state.insert((u, k), v.clone());
                        (Operation::Update, Some(row(k, &old)), Some(row(k, &v)))
                    }
                },
            };
            events.push(Event { sequence, table, operation, before, before_key: None, after });
        }
        // An insert of a key held at that point, where one is.
        let mut refused = None;
        if let (Some(d), false) = (dup, overwrite) {
            let p = d.index(events.len());
            let mut held: BTreeMap<(String, i64), ()> = BTreeMap::new();
            for e in &events[..p] {
                let key = |r: &Row| match r[0] { Value::Integer(k) => k, _ => unreachable!() };
                if let Some(b) = &e.before { held.remove(&(e.table.clone(), key(b))); }
                if let Some(a) = &e.after { held.insert((e.table.clone(), key(a)), ()); }
            }
            if let Some(((table, k), _)) = held.into_iter().next() {
                let e = Event {
                    sequence: 0,
                    table,
                    operation: Operation::Insert,
                    before: None,
                    before_key: None,
                    after: Some(row(k, &Some("dup".into()))),
                };
                events.insert(p, e);
                for (i, e) in events.iter_mut().enumerate() {
                    e.sequence = i as u128 + 1;
                }
                refused = Some(p as u128 + 1);
            }
        }
        let n = events.len();
        let mut at: Vec<usize> = cuts.iter().map(|c| c.index(n + 1)).collect();
        at.push(0);
        at.push(n);
        at.sort_unstable();
        at.dedup();
        let mut text = Vec::new();
        for w in at.windows(2) {
            let b = Batch {
                start: Cursor::new("sqlite:props".to_string(), w[0] as u128),
                high_water: n as u128,
                schemas: Some(schemas.clone()),
                compacted: false,
                events: events[w[0]..w[1]].to_vec(),
                end: Cursor::new("sqlite:props".to_string(), w[1] as u128),
                changes: Vec::new(),
                messages: Vec::new(),
            };
            text.extend(b.to_jsonl());
        }
        let options = TargetOptions {
            on_conflict: if overwrite { OnConflict::Overwrite } else { OnConflict::Error },
            ..TargetOptions::default()
        };
        let open = || {
            let r: mooncdc::wire::DynRead = Box::new(Io::new(text.clone()));
            BatchStreamReader::jsonl(r, "props", Limits::default())
        };
        let mut double = MemoryTarget { options, ..Default::default() };
        let by_double = double.apply_stream(&mut open(), &mut |_| {});
        let dir = tempfile::tempdir().unwrap();
        let mut sqlite = mooncdc::destination::sqlite::SqliteTarget::open(&dir.path().join("p.db"))
            .unwrap()
            .with_options(options);
        let mut input = open().read_ahead().map_err(|e| fail(e.to_string()))?;
        let by_sqlite = sqlite.apply_stream(&mut input, &mut |_| {});
        match refused {
            None => {
                by_double.map_err(|e| fail(format!("double: {e}")))?;
                by_sqlite.map_err(|e| fail(format!("sqlite: {e}")))?;
            }
            Some(seq) => {
                let d = by_double.err().map(|e| e.to_string()).unwrap_or_default();
                let s = by_sqlite.err().map(|e| e.to_string()).unwrap_or_default();
                prop_assert!(d.contains(&format!("insert {seq} of an existing key")), "double: {}", d);
                prop_assert!(s.contains(&format!("event {seq}: insert into table")), "sqlite: {}", s);
            }
        }
        prop_assert_eq!(
            sqlite.cursor().unwrap().map(|c| c.sequence()),
            double.cursor().unwrap().map(|c| c.sequence())
        );
        for s in &schemas {
            let read = |t: &dyn AuditedTarget| {
                let mut out = Vec::new();
                t.with_rows(s, mooncdc::source::SourceKind::Sqlite, &mut |pull| {
                    while let Some(r) = pull()? {
                        let mut e = Vec::new();
                        write_row(&mut e, &r);
                        out.push(e);
                    }
                    Ok(())
                })
                .unwrap();
                out.sort();
                out
            };
            let want = read(&double);
            prop_assert_eq!(read(&sqlite), want, "table {}", s.table);
        }
    }
}

// ------------------------------------------------------------------ other spellings

/// A stream of choices drawn by proptest, taken in turn (and again from the
/// start when used up).
struct Choices {
    v: Vec<u8>,
    i: usize,
}

impl Choices {
    fn pick(&mut self, n: usize) -> usize {
        let c = self.v[self.i % self.v.len()] as usize;
        self.i += 1;
        c % n
    }
}

/// Insignificant whitespace, as JSON allows it inside a line (none most
/// often; LF would end the line).
fn ws(ch: &mut Choices, out: &mut String) {
    for _ in 0..[0, 0, 1, 2][ch.pick(4)] {
        out.push([' ', '\t', '\r'][ch.pick(3)]);
    }
}

/// A JSON string holding `s`, each character written one of the ways JSON
/// allows: as it is, as a short escape, as `\u` escapes (upper or lower
/// case hex, a surrogate pair beyond the BMP), `\/`.
fn respell_str(ch: &mut Choices, s: &str, out: &mut String) {
    out.push('"');
    for c in s.chars() {
        let must = c < ' ' || c == '"' || c == '\\';
        let short = match c {
            '"' => Some("\\\""),
            '\\' => Some("\\\\"),
            '/' => Some("\\/"),
            '\u{8}' => Some("\\b"),
            '\u{c}' => Some("\\f"),
            '\n' => Some("\\n"),
            '\r' => Some("\\r"),
            '\t' => Some("\\t"),
            _ => None,
        };
        match (ch.pick(3), short) {
            (0, _) if !must => out.push(c),
            (1, Some(s)) => out.push_str(s),
            _ => {
                let mut units = [0u16; 2];
                for u in c.encode_utf16(&mut units) {
                    if ch.pick(2) == 0 {
                        out.push_str(&format!("\\u{u:04x}"));
                    } else {
                        out.push_str(&format!("\\u{u:04X}"));
                    }
                }
            }
        }
    }
    out.push('"');
}

/// A value in another valid spelling: whitespace, escapes, hex of either
/// case, TEXT as `text-utf8`, REAL as a pair that is not reduced or in the
/// decimal form.
fn respell_value(ch: &mut Choices, v: &Value, out: &mut String) {
    let mut items: Vec<String> = Vec::new();
    let hex = |ch: &mut Choices, b: &[u8]| -> String {
        b.iter()
            .map(|x| {
                if ch.pick(2) == 0 {
                    format!("{x:02x}")
                } else {
                    format!("{x:02X}")
                }
            })
            .collect()
    };
    match v {
        Value::Null => items.push("\"null\"".into()),
        Value::Integer(i) => {
            items.push("\"integer\"".into());
            items.push(format!("\"{i}\""));
        }
        Value::Real(x) => {
            items.push("\"real\"".into());
            let (m, e) = real_to_pair(*x);
            let sign = if m == 0 && x.is_sign_negative() {
                "-"
            } else {
                ""
            };
            match ch.pick(3) {
                // The decimal form, shortest round trip (exact: it reads back
                // as the same binary64).
                0 if x.is_sign_negative() || *x != 0.0 => {
                    items.push(format!("\"{}\"", format!("{x:e}").replace("e", "E")));
                }
                // Not reduced: twice the significand, one less exponent.
                1 if m != 0 && m.unsigned_abs() < (1 << 60) && e > -5000 => {
                    items.push(format!("\"{}\"", m * 2));
                    items.push(format!("\"{}\"", e - 1));
                }
                _ => {
                    items.push(format!("\"{sign}{m}\""));
                    items.push(format!("\"{e}\""));
                }
            }
        }
        Value::Text(s) => {
            if ch.pick(4) == 0 {
                items.push("\"text-utf8\"".into());
                items.push(format!("\"{}\"", hex(ch, s.as_bytes())));
            } else {
                items.push("\"text\"".into());
                let mut t = String::new();
                respell_str(ch, s, &mut t);
                items.push(t);
            }
        }
        Value::Blob(b) => {
            items.push("\"blob\"".into());
            items.push(format!("\"{}\"", hex(ch, b)));
        }
        Value::Unchanged => items.push("\"unchanged\"".into()),
    }
    out.push('[');
    for (i, item) in items.iter().enumerate() {
        if i > 0 {
            ws(ch, out);
            out.push(',');
        }
        ws(ch, out);
        out.push_str(item);
    }
    ws(ch, out);
    out.push(']');
}

/// An event record line in another valid spelling: members (of the record
/// and of the event) in any order, whitespace between any tokens, and
/// every string and value respelt.
fn respell_event(ch: &mut Choices, e: &Event) -> String {
    let mut members: Vec<(&str, String)> = Vec::new();
    // (A sequence with escapes is left to the strict decoder.)
    members.push(("sequence", format!("\"{}\"", e.sequence)));
    let mut table = String::new();
    respell_str(ch, &e.table, &mut table);
    members.push(("table", table));
    members.push(("operation", format!("\"{}\"", e.operation.as_str())));
    if let Operation::Truncate {
        cascade,
        restart_identity,
    } = e.operation
    {
        members.push(("cascade", cascade.to_string()));
        members.push(("restart_identity", restart_identity.to_string()));
    }
    for (name, image) in [("before", &e.before), ("after", &e.after)] {
        if let Some(row) = image {
            let mut r = String::from("[");
            for (i, v) in row.iter().enumerate() {
                if i > 0 {
                    ws(ch, &mut r);
                    r.push(',');
                }
                ws(ch, &mut r);
                respell_value(ch, v, &mut r);
            }
            ws(ch, &mut r);
            r.push(']');
            members.push((name, r));
        }
    }
    let object = |ch: &mut Choices, mut members: Vec<(&str, String)>| {
        // A random order: repeatedly take one of those left.
        let mut out = String::from("{");
        let mut first = true;
        while !members.is_empty() {
            let (name, value) = members.remove(ch.pick(members.len()));
            if !first {
                ws(ch, &mut out);
                out.push(',');
            }
            first = false;
            ws(ch, &mut out);
            out.push_str(&format!("\"{name}\""));
            ws(ch, &mut out);
            out.push(':');
            ws(ch, &mut out);
            out.push_str(&value);
        }
        ws(ch, &mut out);
        out.push('}');
        out
    };
    let event = object(ch, members);
    let mut line = String::new();
    ws(ch, &mut line);
    line.push_str(&object(
        ch,
        vec![("kind", "\"event\"".to_string()), ("event", event)],
    ));
    ws(ch, &mut line);
    line
}

/// The strict decoder alone on one line: the event, if it is one.
fn strict_event(line: &[u8]) -> Option<Event> {
    let rec = mooncdc::wire::jsonl::parse_record(line).ok()?;
    match mooncdc::wire::batch::batch_item(rec).ok()? {
        Item::Event(e) => Some(e),
        _ => None,
    }
}

/// What the rewriting path makes of a line, checked against the strict
/// decoder: if it takes the line, the strict decoder takes it too, and
/// the rewritten line is the canonical encoding of the strict decoder's
/// event, with the places the fast path finds in it.
fn rewritten_agrees(line: &[u8]) -> Result<Option<Vec<u8>>, TestCaseError> {
    let mut out = Vec::new();
    let Some(r) = mooncdc::wire::canon::canonical_event(line, &mut out) else {
        return Ok(None);
    };
    let s = strict_event(line);
    let text = String::from_utf8_lossy(line);
    let Some(s) = s else {
        return Err(fail(format!(
            "rewriting path accepted {text}, strict decoder refuses it"
        )));
    };
    let mut want = Vec::new();
    mooncdc::wire::batch::write_event_line(&mut want, &s);
    want.pop();
    prop_assert!(
        out == want,
        "{text} rewritten as {}, strict decoder: {}",
        String::from_utf8_lossy(&out),
        String::from_utf8_lossy(&want)
    );
    prop_assert_eq!(Some(r.meta), mooncdc::wire::fast::event_spans(&out));
    prop_assert_eq!(
        r.plain_table,
        mooncdc::wire::fast::event_meta(&out).is_some()
    );
    Ok(Some(out))
}

// Event lines in other valid spellings (whitespace, member order, escapes
// of every kind, hex of either case, other REAL spellings, text-utf8) are
// taken by the rewriting path (src/wire/canon.rs) and become exactly the
// canonical line; lines one byte away from them are either refused by it
// or read as the strict decoder reads them.
proptest! {
    #![proptest_config(config(400))]

    #[test]
    fn other_spellings_agree_with_the_strict_decoder(
        b in batch_strategy(4, false),
        choices in vec(any::<u8>(), 1..64),
        at in any::<Index>(),
        byte in prop_oneof![Just(b'"'), Just(b'\\'), Just(b','), Just(b']'), Just(b'}'), Just(b':'), Just(b'0'), Just(b'u'), Just(b'D'), Just(b' '), Just(b'\t'), any::<u8>()],
        how in 0u8..3,
    ) {
        let mut ch = Choices { v: choices, i: 0 };
        for e in &b.events {
            let line = respell_event(&mut ch, e);
            let strict = strict_event(line.as_bytes());
            prop_assert!(strict.as_ref().is_some_and(|s| events_same(s, e)), "the respelling {line} is not valid or not the same event");
            let got = rewritten_agrees(line.as_bytes())?;
            // Only truncates are left to the strict decoder.
            prop_assert!(got.is_some() || e.operation.is_truncate(), "declined: {line}");
            let mut line = line.into_bytes();
            let i = at.index(line.len());
            match how {
                0 => line[i] = byte,
                1 => { line.remove(i); }
                _ => line.insert(i, byte),
            }
            rewritten_agrees(&line)?;
        }
    }
}

// ------------------------------------------------------------------ message records

/// `b` with logical messages at free sequences of its interval (never an
/// event's): `picks` chooses among up to two free sequences in each gap
/// between the start, the events and the end, `contents` gives each its
/// content (TEXT or BLOB) and whether it is transactional.
fn with_messages(b: &Batch, picks: &[bool], contents: &[(Value, bool)]) -> Batch {
    let mut bounds = vec![b.start.sequence()];
    bounds.extend(b.events.iter().map(|e| e.sequence));
    let mut free = Vec::new();
    for w in bounds.windows(2) {
        for s in (w[0] + 1..w[1]).take(2) {
            free.push(s);
        }
    }
    let last = *bounds.last().unwrap();
    if let Some(next) = last.checked_add(1) {
        free.extend((next..=b.end.sequence()).take(2));
    }
    let mut out = b.clone();
    for (k, s) in free.into_iter().enumerate() {
        if !picks.get(k).copied().unwrap_or(false) {
            continue;
        }
        let (content, transactional) = contents[k % contents.len()].clone();
        out.messages.push((
            0,
            LogicalMessage {
                sequence: s,
                prefix: format!("p{k}"),
                content,
                transactional,
            },
        ));
    }
    out
}

fn message_content() -> impl Strategy<Value = (Value, bool)> {
    (
        prop_oneof![
            text().prop_map(Value::Text),
            vec(any::<u8>(), 0..8).prop_map(Value::Blob),
        ],
        any::<bool>(),
    )
}

proptest! {
    #![proptest_config(config(300))]

    /// Random batches with random messages: written and read back (strict
    /// decoder and stream reader) unchanged, and split then merged unchanged,
    /// each message in a piece whose interval holds it.
    #[test]
    fn batches_with_messages_round_trip_and_survive_split_and_merge(
        b in batch_strategy(8, false),
        picks in vec(any::<bool>(), 40),
        contents in vec(message_content(), 1..5),
        max_events in prop::option::of(1u64..4),
    ) {
        let b = with_messages(&b, &picks, &contents);
        b.validate().map_err(|e| fail(e.to_string()))?;
        let input = b.to_jsonl();
        let text = String::from_utf8(input.clone()).unwrap();
        let back = Batch::from_jsonl(&text).map_err(|e| fail(format!("{e}\n{text}")))?;
        prop_assert_eq!(&back.to_jsonl(), &input);
        prop_assert_eq!(back.messages.len(), b.messages.len());
        prop_assert!(b.messages.is_empty() || b.to_json().is_none());
        // The stream reader: the same records.
        let mut r = BatchStreamReader::jsonl(Io::new(input.clone()), "in", Limits::default());
        let mut n = 0;
        while let Some(item) = r.next_item().map_err(|e| fail(e.to_string()))? {
            if let Item::Message(m) = item {
                prop_assert_eq!(&m, &b.messages[n].1);
                n += 1;
            }
        }
        prop_assert_eq!(n, b.messages.len());

        let out = run_split(&input, SplitOptions { max_events, max_bytes: None }, OutputFormat::Jsonl)?;
        let mut seen = Vec::new();
        for p in stream_pieces(&out) {
            let t = std::str::from_utf8(&p).unwrap();
            let d = Batch::from_jsonl(t).map_err(|e| fail(format!("piece: {e}\n{t}")))?;
            for (_, m) in &d.messages {
                prop_assert!(m.sequence > d.start.sequence() && m.sequence <= d.end.sequence());
                seen.push(m.clone());
            }
        }
        let want: Vec<LogicalMessage> = b.messages.iter().map(|(_, m)| m.clone()).collect();
        prop_assert_eq!(seen, want);
        let merged = run_merge(vec![out])?;
        prop_assert_eq!(String::from_utf8(merged).unwrap(), text);
    }
}
