//! The decoders' fast path for lines already in canonical form (what every
//! MoonCDC encoder writes: fixed member order, no whitespace).
//!
//! An event or snapshot row line is scanned directly, without serde, and
//! accepted only in the one spelling the encoders write: members in their
//! order with no whitespace, integers and sequences canonical, TEXT escaped
//! exactly as serde_json escapes it, BLOB hex in lowercase, REAL in its
//! canonical pair. A canonical line decodes, by the strict decoder, to
//! exactly the value it encodes (the round trip the property tests pin
//! down), so what the fast path returns is what the strict decoder would
//! have returned; a property test checks this on canonical lines and on
//! lines one byte away from them. Anything else (another spelling,
//! `text-utf8`, a truncate, any error) gives `None`, and the strict decoder
//! reads the line with every rule and every message it has. So this path
//! makes reading faster, never more lenient.
//!
//! A caller that writes the line out again unchanged may write the input
//! bytes through: they are the canonical encoding.

use super::model::{parse_sequence, Event, Operation, Row, Sequence};
use super::value::{parse_integer, parse_real_pair, real_to_pair, Value};

/// What a canonical event line holds, its values checked but not built:
/// enough to validate it and to write the line through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EventMeta {
    pub sequence: Sequence,
    pub operation: Operation,
    /// The table name's byte range in the line (a name without escapes;
    /// empty for a name with escapes, which only [`event_spans`] accepts).
    pub table: (usize, usize),
    /// The table name's JSON string in the line, quotes included: in the
    /// canonical spelling, equal names are equal strings.
    pub table_json: (usize, usize),
    /// Values in the before and after images; `key_only` when the before
    /// image is a `before_key` (the old row's key values alone).
    pub before: Option<usize>,
    pub after: Option<usize>,
    pub key_only: bool,
    /// Whether the after image holds an unchanged value.
    pub unchanged: bool,
    /// The images' byte ranges in the line (their JSON arrays): in the
    /// canonical spelling, equal images are equal bytes.
    pub before_at: Option<(usize, usize)>,
    pub after_at: Option<(usize, usize)>,
}

struct Scan<'a> {
    s: &'a str,
    i: usize,
    /// Unchanged values read so far.
    unchanged: usize,
}

/// The hex digits the encoder writes (lowercase), as nibbles; 0xff: not one.
const NIBBLE: [u8; 256] = super::value::HEX_LOWER;

impl<'a> Scan<'a> {
    fn lit(&mut self, l: &str) -> Option<()> {
        if self.s.as_bytes()[self.i..].starts_with(l.as_bytes()) {
            self.i += l.len();
            Some(())
        } else {
            None
        }
    }

    fn peek(&self) -> Option<u8> {
        self.s.as_bytes().get(self.i).copied()
    }

    /// A JSON string with no escape and no control character: its text.
    fn plain_str(&mut self) -> Option<&'a str> {
        self.lit("\"")?;
        let rest = &self.s.as_bytes()[self.i..];
        let end = memchr::memchr2(b'"', b'\\', rest)?;
        if rest[end] != b'"' || rest[..end].iter().any(|&b| b < 0x20) {
            return None;
        }
        // Quotes are ASCII, so both ends are character boundaries.
        let text = &self.s[self.i..self.i + end];
        self.i += end + 1;
        Some(text)
    }

    /// A short JSON string of ASCII digits and signs (a number's text), read
    /// without a vectorised search.
    fn short_str(&mut self) -> Option<&'a str> {
        self.lit("\"")?;
        let b = self.s.as_bytes();
        let start = self.i;
        let mut j = start;
        while let Some(&c) = b.get(j) {
            match c {
                b'"' => {
                    self.i = j + 1;
                    return Some(&self.s[start..j]);
                }
                b'0'..=b'9' | b'-' => j += 1,
                _ => return None,
            }
        }
        None
    }

    /// A JSON string in the form the encoder writes (serde_json's escaping:
    /// `\"`, `\\`, the short escapes of \b \f \n \r \t, `\u00xx` for the
    /// other controls, nothing else escaped); its text when `build`.
    fn text(&mut self, build: bool) -> Option<Option<String>> {
        self.lit("\"")?;
        let b = self.s.as_bytes();
        let mut out = String::new();
        let mut from = self.i;
        loop {
            let at = from + memchr::memchr2(b'"', b'\\', &b[from..])?;
            if b[from..at].iter().any(|&c| c < 0x20) {
                return None;
            }
            if b[at] == b'"' {
                self.i = at + 1;
                if !build {
                    return Some(None);
                }
                if out.is_empty() {
                    return Some(Some(self.s[from..at].to_owned()));
                }
                out.push_str(&self.s[from..at]);
                return Some(Some(out));
            }
            if build {
                out.push_str(&self.s[from..at]);
            }
            let (c, len) = match *b.get(at + 1)? {
                b'"' => ('"', 2),
                b'\\' => ('\\', 2),
                b'b' => ('\u{8}', 2),
                b'f' => ('\u{c}', 2),
                b'n' => ('\n', 2),
                b'r' => ('\r', 2),
                b't' => ('\t', 2),
                b'u' => {
                    let h = b.get(at + 2..at + 6)?;
                    if &h[..2] != b"00" {
                        return None;
                    }
                    let (hi, lo) = (NIBBLE[h[2] as usize], NIBBLE[h[3] as usize]);
                    if hi > 1 || lo == 0xff {
                        return None;
                    }
                    let c = hi << 4 | lo;
                    // These have short forms, which the encoder uses.
                    if matches!(c, 0x08 | 0x09 | 0x0a | 0x0c | 0x0d) {
                        return None;
                    }
                    (char::from(c), 6)
                }
                _ => return None,
            };
            if build {
                out.push(c);
            }
            from = at + len;
        }
    }

    /// Lowercase hex of even length, decoded when `build`.
    fn hex(&mut self, build: bool) -> Option<Option<Vec<u8>>> {
        let h = self.plain_str()?.as_bytes();
        if h.len() % 2 != 0 {
            return None;
        }
        if !build {
            return h
                .iter()
                .all(|&c| NIBBLE[c as usize] != 0xff)
                .then_some(None);
        }
        let mut out = Vec::with_capacity(h.len() / 2);
        for p in h.chunks_exact(2) {
            let (hi, lo) = (NIBBLE[p[0] as usize], NIBBLE[p[1] as usize]);
            if (hi | lo) == 0xff {
                return None;
            }
            out.push(hi << 4 | lo);
        }
        Some(Some(out))
    }

    /// One value, built into `out` when given; an unchanged one counted.
    fn value(&mut self, out: Option<&mut Row>) -> Option<()> {
        self.lit("[\"")?;
        let build = out.is_some();
        let v = match self.peek()? {
            b'n' => {
                self.lit("null\"")?;
                Value::Null
            }
            b'u' => {
                self.lit("unchanged\"")?;
                self.unchanged += 1;
                Value::Unchanged
            }
            b'i' => {
                self.lit("integer\",")?;
                Value::Integer(parse_integer(self.short_str()?).ok()?)
            }
            b't' => {
                // Not `text-utf8`: the strict decoder reads that.
                self.lit("text\",")?;
                Value::Text(self.text(build)?.unwrap_or_default())
            }
            b'b' => {
                self.lit("blob\",")?;
                Value::Blob(self.hex(build)?.unwrap_or_default())
            }
            b'r' => {
                // Only the pair form is canonical, and only its one spelling:
                // the pair real_to_pair gives (both strings are canonical
                // integers once parse_real_pair accepts them, so equal
                // numbers mean equal text; "-0" only for negative zero).
                self.lit("real\",")?;
                let a = self.short_str()?;
                self.lit(",")?;
                let b = self.short_str()?;
                let x = parse_real_pair(a, b).ok()?;
                let (m, e) = real_to_pair(x);
                let same = a.parse::<i64>() == Ok(m)
                    && b.parse::<i32>() == Ok(e)
                    && a.starts_with('-') == x.is_sign_negative();
                if !same {
                    return None;
                }
                Value::Real(x)
            }
            _ => return None,
        };
        self.lit("]")?;
        if let Some(row) = out {
            row.push(v);
        }
        Some(())
    }

    /// A row; its values built when `build`; how many there are.
    fn row(&mut self, build: bool) -> Option<(usize, Option<Row>)> {
        self.lit("[")?;
        // Sized for a typical row at once, not grown value by value.
        let mut row = build.then(|| Vec::with_capacity(8));
        let mut n = 0;
        if self.peek() == Some(b']') {
            self.i += 1;
            return Some((0, row));
        }
        loop {
            self.value(row.as_mut())?;
            n += 1;
            match self.peek()? {
                b',' => self.i += 1,
                b']' => {
                    self.i += 1;
                    return Some((n, row));
                }
                _ => return None,
            }
        }
    }

    fn done(&self) -> bool {
        self.i == self.s.len()
    }
}

/// What [`scan_event`] finds.
type Scanned = (
    EventMeta,
    Operation,
    Option<Row>,
    Option<Row>,
    Option<String>,
);

/// The common part of [`event_line`], [`event_meta`] and [`event_spans`]. A
/// table name with escapes is returned decoded when building, declined
/// otherwise unless `escaped` (then only its JSON string's place is known).
fn scan_event(line: &[u8], build: bool, escaped: bool) -> Option<Scanned> {
    let s = simdutf8::basic::from_utf8(line).ok()?;
    let mut sc = Scan {
        s,
        i: 0,
        unchanged: 0,
    };
    sc.lit("{\"kind\":\"event\",\"event\":{\"sequence\":")?;
    let sequence = parse_sequence(sc.plain_str()?).ok()?;
    sc.lit(",\"table\":")?;
    let t0 = sc.i;
    let (table, name) = match sc.plain_str() {
        Some(t) => ((t0 + 1, t0 + 1 + t.len()), None),
        None if build || escaped => {
            sc.i = t0;
            ((t0, t0), sc.text(build)?)
        }
        None => return None,
    };
    let table_json = (t0, sc.i);
    sc.lit(",\"operation\":")?;
    let operation = match sc.plain_str()? {
        "insert" => Operation::Insert,
        "update" => Operation::Update,
        "delete" => Operation::Delete,
        _ => return None,
    };
    let image = |sc: &mut Scan, name: &str| {
        if sc.lit(name).is_none() {
            return Some(None);
        }
        let start = sc.i;
        let (n, row) = sc.row(build)?;
        Some(Some((n, row, (start, sc.i))))
    };
    let mut before = image(&mut sc, ",\"before\":")?;
    let key_only = before.is_none() && operation != Operation::Insert;
    if key_only {
        before = image(&mut sc, ",\"before_key\":")?;
    }
    let unchanged_before = sc.unchanged;
    let after = image(&mut sc, ",\"after\":")?;
    sc.lit("}}")?;
    let images_fit = match operation {
        Operation::Insert => before.is_none() && after.is_some(),
        Operation::Update => before.is_some() && after.is_some(),
        _ => before.is_some() && after.is_none(),
    };
    // Only an update's after image may hold an unchanged value.
    let unchanged_fit =
        unchanged_before == 0 && (sc.unchanged == 0 || operation == Operation::Update);
    if !sc.done() || !images_fit || !unchanged_fit || sequence == 0 {
        return None;
    }
    let meta = EventMeta {
        sequence,
        operation,
        table,
        table_json,
        before: before.as_ref().map(|r| r.0),
        after: after.as_ref().map(|r| r.0),
        key_only,
        unchanged: sc.unchanged > 0,
        before_at: before.as_ref().map(|r| r.2),
        after_at: after.as_ref().map(|r| r.2),
    };
    Some((
        meta,
        operation,
        before.and_then(|r| r.1),
        after.and_then(|r| r.1),
        name,
    ))
}

/// A canonical `{"kind":"event",…}` line (without its newline) as its event.
pub fn event_line(line: &[u8]) -> Option<Event> {
    let (meta, operation, before, after, name) = scan_event(line, true, false)?;
    let (before, before_key) = if meta.key_only {
        (None, before)
    } else {
        (before, None)
    };
    let table = match name {
        Some(t) => t,
        None => std::str::from_utf8(&line[meta.table.0..meta.table.1])
            .ok()?
            .to_owned(),
    };
    Some(Event {
        sequence: meta.sequence,
        table,
        operation,
        before,
        before_key,
        after,
    })
}

/// A canonical event line's position, table and image widths, every value
/// checked as [`event_line`] checks it, none built (a table name with
/// escapes: `None`).
pub fn event_meta(line: &[u8]) -> Option<EventMeta> {
    scan_event(line, false, false).map(|(m, ..)| m)
}

/// [`event_meta`] for a line known canonical, a table name with escapes
/// included (its `table` range is then empty; `table_json` holds it).
pub fn event_spans(line: &[u8]) -> Option<EventMeta> {
    scan_event(line, false, true).map(|(m, ..)| m)
}

/// The byte ranges of the values of a canonical row (an image's JSON array,
/// as [`EventMeta::before_at`] gives it) into `out`, emptied first; `None`
/// if the row is not in that spelling. In the canonical spelling equal
/// values are equal bytes, so values are compared as bytes.
pub fn value_spans(row: &[u8], out: &mut Vec<(usize, usize)>) -> Option<()> {
    out.clear();
    let at = |i: usize| row.get(i).copied();
    if at(0)? != b'[' {
        return None;
    }
    let mut i = 1;
    if at(i)? == b']' {
        return (i + 1 == row.len()).then_some(());
    }
    loop {
        // A value: `[` then strings separated by commas, then `]`.
        let start = i;
        if at(i)? != b'[' {
            return None;
        }
        i += 1;
        loop {
            if at(i)? != b'"' {
                return None;
            }
            i += 1;
            loop {
                i += memchr::memchr2(b'"', b'\\', row.get(i..)?)?;
                if row[i] == b'"' {
                    i += 1;
                    break;
                }
                i += 2;
            }
            match at(i)? {
                b',' => i += 1,
                b']' => {
                    i += 1;
                    break;
                }
                _ => return None,
            }
        }
        out.push((start, i));
        match at(i)? {
            b',' => i += 1,
            b']' => return (i + 1 == row.len()).then_some(()),
            _ => return None,
        }
    }
}

/// A canonical `{"kind":"row",…}` snapshot line (without its newline) as its
/// table and row.
pub fn row_line(line: &[u8]) -> Option<(String, Row)> {
    let s = simdutf8::basic::from_utf8(line).ok()?;
    let mut sc = Scan {
        s,
        i: 0,
        unchanged: 0,
    };
    sc.lit("{\"kind\":\"row\",\"table\":")?;
    let table = sc.text(true)?.unwrap_or_default();
    sc.lit(",\"row\":")?;
    let (_, row) = sc.row(true)?;
    sc.lit("}")?;
    // A snapshot row holds whole rows: the strict decoder refuses an
    // unchanged value with its message.
    if !sc.done() || sc.unchanged > 0 {
        return None;
    }
    Some((table, row.unwrap_or_default()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::jsonl::parse_record;

    fn strict_event(line: &[u8]) -> Option<Event> {
        let r = parse_record(line).ok()?;
        match crate::wire::batch::batch_item(r).ok()? {
            crate::wire::Item::Event(e) => Some(e),
            _ => None,
        }
    }

    #[test]
    fn canonical_lines_take_the_fast_path_and_others_do_not() {
        let line = br#"{"kind":"event","event":{"sequence":"4","table":"t","operation":"update","before":[["integer","2"],["null"]],"after":[["integer","2"],["text","c"],["real","3","-1"],["blob","00ff"]]}}"#;
        let e = event_line(line).expect("canonical");
        assert_eq!(Some(e), strict_event(line));
        let line = br#"{"kind":"event","event":{"sequence":"5","table":"t","operation":"insert","after":[["text","a\"b\\c\n\u0001"]]}}"#;
        let e = event_line(line).expect("canonical escapes");
        assert_eq!(Some(e), strict_event(line));
        let m = event_meta(line).expect("canonical escapes");
        assert_eq!((m.sequence, m.before, m.after), (5, None, Some(1)));
        assert_eq!(&line[m.table.0..m.table.1], b"t");
        for other in [
            // whitespace, member order, escapes the encoder does not write,
            // a REAL spelt otherwise, upper-case hex, leading zeros
            &br#"{"kind":"event","event":{"sequence":"4","table":"t","operation":"insert","after":[["integer","2"]]} }"#[..],
            br#"{"kind":"event","event":{"table":"t","sequence":"4","operation":"insert","after":[["integer","2"]]}}"#,
            br#"{"kind":"event","event":{"sequence":"4","table":"t","operation":"insert","after":[["text","a\/b"]]}}"#,
            br#"{"kind":"event","event":{"sequence":"4","table":"t","operation":"insert","after":[["text","\u000a"]]}}"#,
            br#"{"kind":"event","event":{"sequence":"4","table":"t","operation":"insert","after":[["real","1.5"]]}}"#,
            br#"{"kind":"event","event":{"sequence":"4","table":"t","operation":"insert","after":[["real","30","-2"]]}}"#,
            br#"{"kind":"event","event":{"sequence":"4","table":"t","operation":"insert","after":[["blob","00FF"]]}}"#,
            br#"{"kind":"event","event":{"sequence":"04","table":"t","operation":"insert","after":[["integer","2"]]}}"#,
            br#"{"kind":"event","event":{"sequence":"4","table":"t","operation":"insert","after":[["integer","02"]]}}"#,
            // wrong images for the operation, a truncate
            br#"{"kind":"event","event":{"sequence":"4","table":"t","operation":"delete","after":[["integer","2"]]}}"#,
            br#"{"kind":"event","event":{"sequence":"4","table":"t","operation":"truncate","cascade":false,"restart_identity":false}}"#,
            // a control character the encoder would escape
            b"{\"kind\":\"event\",\"event\":{\"sequence\":\"4\",\"table\":\"t\",\"operation\":\"insert\",\"after\":[[\"text\",\"a\x01\"]]}}",
        ] {
            assert_eq!(
                event_line(other),
                None,
                "{}",
                String::from_utf8_lossy(other)
            );
        }
    }

    #[test]
    fn row_lines() {
        let line = br#"{"kind":"row","table":"t","row":[["integer","-9223372036854775808"],["text","\u00e9"]]}"#;
        assert_eq!(row_line(line), None, "an escape");
        let line = "{\"kind\":\"row\",\"table\":\"t\",\"row\":[[\"integer\",\"-9223372036854775808\"],[\"text\",\"é\u{1F600}\"]]}";
        let (t, row) = row_line(line.as_bytes()).expect("canonical");
        assert_eq!(t, "t");
        assert_eq!(
            row,
            vec![
                Value::Integer(i64::MIN),
                Value::Text("é\u{1F600}".to_string())
            ]
        );
    }
}
