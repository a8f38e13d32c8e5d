//! The `objects` view (`--output-format objects`): for people and jq, never
//! an input to any tool. One line per event:
//!
//! ```json
//! {"sequence":"43","table":"users","operation":"update","before":{"id":7,"name":"Ada"},"after":{"id":7,"name":"Ada L."}}
//! ```
//!
//! Rows are objects keyed by column name (from the batch's schemas) with
//! natural JSON values: INTEGER a number when it is exact as one (|n| ≤
//! 2^53), else a string; REAL a number (the shortest decimal that reads back
//! as the same bits); TEXT a string; BLOB a string of hex; NULL null. A
//! schema change is a line `{"schema":{…}}`, a logical message one
//! `{"kind":"message","sequence":"44","prefix":"outbox","content":"…","transactional":true}`
//! (its content TEXT a string, a BLOB hex, as values are). Without schemas, the values
//! are keyed by position ("0", "1", …). A key-only old row is
//! `"before_key":[…]`, its key values in key order; an unchanged value of an
//! update's after image is left out of its object.

use crate::wire::jsonl::parse_record;
use crate::wire::{Event, Item, Schema, Value};
use serde_json::{json, Map, Value as J};
use std::collections::HashMap;
use std::io::{BufRead, Write};

const EXACT: i64 = 1 << 53;

/// One value, naturally.
pub fn value(v: &Value) -> J {
    match v {
        Value::Null => J::Null,
        Value::Integer(i) if (-EXACT..=EXACT).contains(i) => J::from(*i),
        Value::Integer(i) => J::String(i.to_string()),
        Value::Real(x) => serde_json::Number::from_f64(*x).map_or(J::Null, J::Number),
        Value::Text(s) => J::String(s.clone()),
        Value::Blob(b) => J::String(hex::encode(b)),
        // Rows leave an unchanged column out (see `row`).
        Value::Unchanged => J::Null,
    }
}

fn row(names: Option<&Vec<String>>, r: &[Value]) -> J {
    let mut m = Map::new();
    for (i, v) in r.iter().enumerate().filter(|(_, v)| !v.is_unchanged()) {
        let k = names
            .and_then(|n| n.get(i).cloned())
            .unwrap_or_else(|| i.to_string());
        m.insert(k, value(v));
    }
    J::Object(m)
}

/// An event as its object.
pub fn event(names: Option<&Vec<String>>, e: &Event) -> J {
    let mut o = json!({
        "sequence": e.sequence.to_string(),
        "table": e.table,
        "operation": e.operation.as_str(),
    });
    if let Some(b) = &e.before {
        o["before"] = row(names, b);
    }
    if let Some(k) = &e.before_key {
        o["before_key"] = J::Array(k.iter().map(value).collect());
    }
    if let Some(a) = &e.after {
        o["after"] = row(names, a);
    }
    o
}

/// Write one batch's spooled records as objects.
pub fn write(
    out: &mut dyn Write,
    header: &crate::wire::Header,
    records: &mut dyn BufRead,
) -> std::io::Result<()> {
    let names_of = |s: &Schema| s.columns.iter().map(|c| c.name.clone()).collect::<Vec<_>>();
    let mut names: HashMap<String, Vec<String>> = header
        .schemas
        .iter()
        .flatten()
        .map(|s| (s.table.clone(), names_of(s)))
        .collect();
    let mut line = Vec::new();
    loop {
        line.clear();
        if records.read_until(b'\n', &mut line)? == 0 {
            break;
        }
        let item = parse_record(&line)
            .and_then(crate::wire::batch::batch_item)
            .map_err(|e| std::io::Error::other(e.to_string()))?;
        let obj = match item {
            Item::Event(e) => event(names.get(&e.table), &e),
            Item::Schema(c) => {
                names.insert(c.schema.table.clone(), names_of(&c.schema));
                let mut s = Vec::new();
                crate::wire::model::write_schema(&mut s, &c.schema);
                let schema: J = serde_json::from_slice(&s).map_err(std::io::Error::other)?;
                json!({"schema": schema})
            }
            Item::Message(m) => json!({
                "kind": "message",
                "sequence": m.sequence.to_string(),
                "prefix": m.prefix,
                "content": value(&m.content),
                "transactional": m.transactional,
            }),
            _ => continue,
        };
        serde_json::to_writer(&mut *out, &obj).map_err(std::io::Error::other)?;
        out.write_all(b"\n")?;
    }
    Ok(())
}
