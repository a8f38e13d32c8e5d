//! Writing the canonical lines (docs/FORMAT.md): sequences, cursors,
//! events, schemas, and a batch's header, event, schema and commit lines,
//! byte for byte as every tool writes them.

use super::batch::{Commit, Header, JSONL_FORMAT, JSON_FORMAT};
use super::model::*;
use super::value::{write_json_str, write_row, Value};

pub fn write_seq(out: &mut Vec<u8>, s: Sequence) {
    out.push(b'"');
    out.extend_from_slice(itoa::Buffer::new().format(s).as_bytes());
    out.push(b'"');
}

pub fn write_cursor(out: &mut Vec<u8>, c: &Cursor) {
    out.extend_from_slice(b"{\"source\":");
    write_json_str(out, &c.source);
    out.extend_from_slice(b",\"sequence\":");
    write_seq(out, c.sequence());
    out.push(b'}');
}

pub fn write_event(out: &mut Vec<u8>, e: &Event) {
    out.extend_from_slice(b"{\"sequence\":");
    write_seq(out, e.sequence);
    out.extend_from_slice(b",\"table\":");
    write_json_str(out, &e.table);
    out.extend_from_slice(b",\"operation\":\"");
    out.extend_from_slice(e.operation.as_str().as_bytes());
    out.push(b'"');
    if let Some(b) = &e.before {
        out.extend_from_slice(b",\"before\":");
        write_row(out, b);
    }
    if let Some(k) = &e.before_key {
        out.extend_from_slice(b",\"before_key\":");
        write_row(out, k);
    }
    if let Some(a) = &e.after {
        out.extend_from_slice(b",\"after\":");
        write_row(out, a);
    }
    if let Operation::Truncate {
        cascade,
        restart_identity,
    } = e.operation
    {
        out.extend_from_slice(if cascade {
            b",\"cascade\":true"
        } else {
            b",\"cascade\":false"
        });
        out.extend_from_slice(if restart_identity {
            b",\"restart_identity\":true"
        } else {
            b",\"restart_identity\":false"
        });
    }
    out.push(b'}');
}

pub fn write_schema(out: &mut Vec<u8>, s: &Schema) {
    out.extend_from_slice(b"{\"table\":");
    write_json_str(out, &s.table);
    out.extend_from_slice(b",\"columns\":[");
    for (i, c) in s.columns.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        out.extend_from_slice(b"{\"name\":");
        write_json_str(out, &c.name);
        out.extend_from_slice(b",\"type\":");
        write_json_str(out, &c.decl_type);
        out.extend_from_slice(if c.nullable {
            b",\"nullable\":true}"
        } else {
            b",\"nullable\":false}"
        });
    }
    out.extend_from_slice(b"],\"key\":[");
    for (i, k) in s.key.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        write_json_str(out, k);
    }
    out.extend_from_slice(b"]}");
}

/// A `schema` record's line (with its newline).
pub fn write_schema_change_line(out: &mut Vec<u8>, c: &SchemaChange) {
    out.extend_from_slice(b"{\"kind\":\"schema\",\"schema\":");
    write_schema(out, &c.schema);
    if !c.renamed.is_empty() {
        out.extend_from_slice(b",\"renamed\":[");
        for (i, r) in c.renamed.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            out.extend_from_slice(b"{\"from\":");
            write_json_str(out, &r.from);
            out.extend_from_slice(b",\"to\":");
            write_json_str(out, &r.to);
            out.push(b'}');
        }
        out.push(b']');
    }
    out.extend_from_slice(b"}\n");
}

/// A `message` record's line (with its newline).
pub fn write_message_line(out: &mut Vec<u8>, m: &LogicalMessage) {
    out.extend_from_slice(MESSAGE_LINE_PREFIX);
    out.extend_from_slice(b"{\"sequence\":");
    write_seq(out, m.sequence);
    out.extend_from_slice(b",\"prefix\":");
    write_json_str(out, &m.prefix);
    out.extend_from_slice(b",\"content\":");
    super::value::write_value(out, &m.content);
    out.extend_from_slice(if m.transactional {
        b",\"transactional\":true}}\n"
    } else {
        b",\"transactional\":false}}\n"
    });
}

/// A `message` record's line up to its content, and after it.
fn message_line_ends(m: &LogicalMessage) -> (Vec<u8>, &'static [u8]) {
    let mut head = Vec::with_capacity(96 + m.prefix.len());
    head.extend_from_slice(MESSAGE_LINE_PREFIX);
    head.extend_from_slice(b"{\"sequence\":");
    write_seq(&mut head, m.sequence);
    head.extend_from_slice(b",\"prefix\":");
    write_json_str(&mut head, &m.prefix);
    head.extend_from_slice(b",\"content\":");
    let tail: &'static [u8] = if m.transactional {
        b",\"transactional\":true}}\n"
    } else {
        b",\"transactional\":false}}\n"
    };
    (head, tail)
}

/// The length of a JSON string literal of `s` as [`write_json_str`] writes
/// it, quotes included.
fn json_str_len(s: &str) -> u64 {
    2 + s
        .bytes()
        .map(|b| match b {
            b'"' | b'\\' | 0x08 | 0x0c | b'\n' | b'\r' | b'\t' => 2,
            0..=0x1f => 6,
            _ => 1,
        })
        .sum::<u64>()
}

/// The length of a `message` record's line, newline included, without
/// encoding its content: a read checks it against the line cap before
/// writing (or holding) the line.
pub fn message_line_len(m: &LogicalMessage) -> u64 {
    let (head, tail) = message_line_ends(m);
    let content = match &m.content {
        Value::Text(s) => b"[\"text\",]".len() as u64 + json_str_len(s),
        Value::Blob(b) => b"[\"blob\",\"\"]".len() as u64 + 2 * b.len() as u64,
        v => {
            let mut x = Vec::new();
            super::value::write_value(&mut x, v);
            x.len() as u64
        }
    };
    head.len() as u64 + content + tail.len() as u64
}

/// Write a `message` record's line to `out` as [`write_message_line`]
/// makes it, the content encoded piece by piece: a large message never
/// stands in memory a second time as its line.
pub fn write_message_line_to(
    out: &mut dyn std::io::Write,
    m: &LogicalMessage,
) -> std::io::Result<()> {
    let (head, tail) = message_line_ends(m);
    out.write_all(&head)?;
    match &m.content {
        Value::Text(s) => {
            out.write_all(b"[\"text\",")?;
            serde_json::to_writer(&mut *out, s.as_str()).map_err(std::io::Error::other)?;
            out.write_all(b"]")?;
        }
        Value::Blob(b) => {
            out.write_all(b"[\"blob\",\"")?;
            let mut hexed = vec![0u8; 2 * b.len().min(32 << 10)];
            for piece in b.chunks(32 << 10) {
                let n = 2 * piece.len();
                // Cannot fail: the slice is exactly twice as long.
                let _ = hex::encode_to_slice(piece, &mut hexed[..n]);
                out.write_all(&hexed[..n])?;
            }
            out.write_all(b"\"]")?;
        }
        v => {
            let mut x = Vec::new();
            super::value::write_value(&mut x, v);
            out.write_all(&x)?;
        }
    }
    out.write_all(tail)
}

/// The fixed start of a `message` record's line.
pub const MESSAGE_LINE_PREFIX: &[u8] = b"{\"kind\":\"message\",\"message\":";

pub fn write_schemas(out: &mut Vec<u8>, schemas: &[Schema]) {
    out.push(b'[');
    for (i, s) in schemas.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        write_schema(out, s);
    }
    out.push(b']');
}

pub fn write_header_line(out: &mut Vec<u8>, h: &Header) {
    out.extend_from_slice(b"{\"kind\":\"header\",\"format\":\"");
    out.extend_from_slice(JSONL_FORMAT.as_bytes());
    out.extend_from_slice(b"\",\"start\":");
    write_cursor(out, &h.start);
    out.extend_from_slice(b",\"high_water\":");
    write_seq(out, h.high_water);
    if h.compacted {
        out.extend_from_slice(b",\"compacted\":true");
    }
    if let Some(s) = &h.schemas {
        out.extend_from_slice(b",\"schemas\":");
        write_schemas(out, s);
    }
    out.extend_from_slice(b"}\n");
}

/// The fixed text around an event object in its JSONL record.
pub const EVENT_LINE_PREFIX: &[u8] = b"{\"kind\":\"event\",\"event\":";
pub const EVENT_LINE_SUFFIX: &[u8] = b"}\n";

pub fn write_event_line(out: &mut Vec<u8>, e: &Event) {
    out.extend_from_slice(EVENT_LINE_PREFIX);
    write_event(out, e);
    out.extend_from_slice(EVENT_LINE_SUFFIX);
}

/// The fixed start of a `schema` record's line.
pub const SCHEMA_LINE_PREFIX: &[u8] = b"{\"kind\":\"schema\",";

pub fn write_commit_line(out: &mut Vec<u8>, c: &Commit) {
    out.extend_from_slice(b"{\"kind\":\"commit\",\"end\":");
    write_cursor(out, &c.end);
    out.extend_from_slice(b",\"count\":\"");
    out.extend_from_slice(itoa::Buffer::new().format(c.count).as_bytes());
    out.extend_from_slice(b"\"}\n");
}

/// The JSON batch document up to the opening of its `events` array.
pub fn write_json_open(out: &mut Vec<u8>, h: &Header, end: &Cursor) {
    out.extend_from_slice(b"{\"format\":\"");
    out.extend_from_slice(JSON_FORMAT.as_bytes());
    out.extend_from_slice(b"\",\"start\":");
    write_cursor(out, &h.start);
    out.extend_from_slice(b",\"end\":");
    write_cursor(out, end);
    out.extend_from_slice(b",\"high_water\":");
    write_seq(out, h.high_water);
    if h.compacted {
        out.extend_from_slice(b",\"compacted\":true");
    }
    if let Some(s) = &h.schemas {
        out.extend_from_slice(b",\"schemas\":");
        write_schemas(out, s);
    }
    out.extend_from_slice(b",\"events\":[");
}

#[cfg(test)]
mod tests {
    use super::{message_line_len, write_message_line, write_message_line_to, LogicalMessage};
    use proptest::prelude::{any, prop, prop_assert_eq, proptest};

    fn message(content: Vec<u8>, transactional: bool, prefix: String) -> LogicalMessage {
        LogicalMessage::new((7u128 << 64) | 3, prefix, content, transactional)
    }

    proptest! {
        /// The streamed line and the counted length agree with the line
        /// made whole, for any content (text with every escape, and bytes
        /// that are not UTF-8).
        #[test]
        fn a_message_line_written_in_pieces_is_the_line_made_whole(
            content in prop::collection::vec(any::<u8>(), 0..300_000),
            text in "(?s).{0,200}",
            prefix in "[\u{0}-\u{7f}é😀]{0,20}",
            transactional in any::<bool>(),
        ) {
            for bytes in [content, text.into_bytes()] {
                let m = message(bytes, transactional, prefix.clone());
                let mut whole = Vec::new();
                write_message_line(&mut whole, &m);
                let mut pieces = Vec::new();
                write_message_line_to(&mut pieces, &m).unwrap();
                prop_assert_eq!(&pieces, &whole);
                prop_assert_eq!(message_line_len(&m), whole.len() as u64);
            }
        }
    }
}
