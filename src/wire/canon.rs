//! The decoders' second fast path: an event line in any other valid
//! spelling (whitespace between tokens, members in any order, any JSON
//! escapes, BLOB hex in upper case, REAL in a pair that is not reduced or
//! in the 0.1.0 decimal form, `text-utf8`), as other producers write it,
//! rewritten into the one canonical spelling of the same event; the fast
//! path of `fast.rs` then reads the rewritten line as it reads a MoonCDC
//! line, and a tool writes the rewritten line through.
//!
//! The rewriting checks only what it needs to keep the meaning: the JSON
//! syntax, that every member is one an event record may have (each at most
//! once, none `null`), and each value's shape. The rules on the contents
//! (canonical sequences and integers, REAL exactness, hex digits, images
//! for the operation, a positive sequence) are the fast path's, applied to
//! the rewritten line. The rewriting keeps sequences and integer digits as
//! they are, so a bad one stays bad; it decodes a REAL, TEXT or `text-utf8`
//! with the functions the strict decoder uses and writes the result in its
//! canonical form, and lower-cases the letters of BLOB hex (anything else
//! in it is kept, so bad hex stays bad). A line that is valid therefore
//! becomes the canonical line of the event the strict decoder gives, and a
//! line that is not either is declined here or becomes a line the fast
//! path declines.
//!
//! Anything unusual gives `None`, and the strict decoder reads the original
//! line with every rule and every message (and column) it has: a member
//! name or tag or number with an escape, a truncate, an unknown or doubled
//! member, a lone surrogate. So this path makes reading faster, never more
//! lenient; the property tests and the fuzz replay compare it with the
//! strict decoder.

use super::value::{parse_hex, parse_real_decimal, parse_real_pair, write_real, HEX_ANY};

struct Cur<'a> {
    b: &'a [u8],
    s: &'a str,
    i: usize,
}

impl<'a> Cur<'a> {
    /// Skip JSON whitespace (what serde_json skips: space, tab, CR, LF).
    fn ws(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.b.get(self.i) {
            self.i += 1;
        }
    }

    /// The next byte after whitespace.
    fn next(&mut self) -> Option<u8> {
        self.ws();
        let c = *self.b.get(self.i)?;
        self.i += 1;
        Some(c)
    }

    fn byte(&mut self, c: u8) -> Option<()> {
        (self.next()? == c).then_some(())
    }

    /// A JSON string (after whitespace) with no escape and no control
    /// character: its text.
    fn plain(&mut self) -> Option<&'a str> {
        self.byte(b'"')?;
        let rest = &self.b[self.i..];
        let end = memchr::memchr2(b'"', b'\\', rest)?;
        if rest[end] != b'"' || rest[..end].iter().any(|&c| c < 0x20) {
            return None;
        }
        // Quotes are ASCII, so both ends are character boundaries.
        let text = &self.s[self.i..self.i + end];
        self.i += end + 1;
        Some(text)
    }

    /// Four hex digits of a `\u` escape at `at`, either case.
    fn hex4(&self, at: usize) -> Option<u32> {
        let h = self.b.get(at..at + 4)?;
        let mut n = 0u32;
        for &c in h {
            let d = HEX_ANY[c as usize];
            if d == 0xff {
                return None;
            }
            n = n << 4 | u32::from(d);
        }
        Some(n)
    }

    /// Any JSON string (after whitespace), written to `out` in the spelling
    /// the encoders use (serde_json's: `\"`, `\\`, the short escapes of
    /// \b \f \n \r \t, `\u00xx` for the other controls, nothing else
    /// escaped), quotes included.
    fn string_to(&mut self, out: &mut Vec<u8>) -> Option<()> {
        self.byte(b'"')?;
        out.push(b'"');
        loop {
            let rest = &self.b[self.i..];
            let at = memchr::memchr2(b'"', b'\\', rest)?;
            let run = &rest[..at];
            if run.iter().any(|&c| c < 0x20) {
                return None;
            }
            out.extend_from_slice(run);
            self.i += at;
            if self.b[self.i] == b'"' {
                self.i += 1;
                out.push(b'"');
                return Some(());
            }
            let (c, len) = match *self.b.get(self.i + 1)? {
                b'"' => ('"', 2),
                b'\\' => ('\\', 2),
                b'/' => ('/', 2),
                b'b' => ('\u{8}', 2),
                b'f' => ('\u{c}', 2),
                b'n' => ('\n', 2),
                b'r' => ('\r', 2),
                b't' => ('\t', 2),
                b'u' => {
                    let n = self.hex4(self.i + 2)?;
                    if (0xD800..0xDC00).contains(&n) {
                        // A leading surrogate: only with its trailing one
                        // (serde_json refuses a lone surrogate in a string).
                        if self.b.get(self.i + 6..self.i + 8)? != b"\\u" {
                            return None;
                        }
                        let lo = self.hex4(self.i + 8)?;
                        if !(0xDC00..0xE000).contains(&lo) {
                            return None;
                        }
                        let c = char::from_u32(0x10000 + ((n - 0xD800) << 10) + (lo - 0xDC00))?;
                        (c, 12)
                    } else {
                        // None for a lone trailing surrogate.
                        (char::from_u32(n)?, 6)
                    }
                }
                _ => return None,
            };
            push_char(out, c);
            self.i += len;
        }
    }

    /// A row (after whitespace), written canonically.
    fn row_to(&mut self, out: &mut Vec<u8>) -> Option<()> {
        self.byte(b'[')?;
        out.push(b'[');
        self.ws();
        if self.b.get(self.i) == Some(&b']') {
            self.i += 1;
            out.push(b']');
            return Some(());
        }
        loop {
            self.value_to(out)?;
            match self.next()? {
                b',' => out.push(b','),
                b']' => {
                    out.push(b']');
                    return Some(());
                }
                _ => return None,
            }
        }
    }

    /// One value (after whitespace), written canonically.
    fn value_to(&mut self, out: &mut Vec<u8>) -> Option<()> {
        self.byte(b'[')?;
        match self.plain()? {
            "null" => {
                self.byte(b']')?;
                out.extend_from_slice(b"[\"null\"]");
            }
            "integer" => {
                self.byte(b',')?;
                // Kept as it is: the fast path checks it.
                let digits = self.plain()?;
                self.byte(b']')?;
                out.extend_from_slice(b"[\"integer\",\"");
                out.extend_from_slice(digits.as_bytes());
                out.extend_from_slice(b"\"]");
            }
            "real" => {
                self.byte(b',')?;
                let a = self.plain()?;
                // As the strict decoder reads it: a pair, or the decimal form.
                let x = match self.next()? {
                    b',' => {
                        let b = self.plain()?;
                        self.byte(b']')?;
                        parse_real_pair(a, b).ok()?
                    }
                    b']' => parse_real_decimal(a).ok()?,
                    _ => return None,
                };
                write_real(out, x);
            }
            "text" => {
                self.byte(b',')?;
                out.extend_from_slice(b"[\"text\",");
                self.string_to(out)?;
                self.byte(b']')?;
                out.push(b']');
            }
            "text-utf8" => {
                self.byte(b',')?;
                let h = self.plain()?;
                self.byte(b']')?;
                let text = String::from_utf8(parse_hex(h).ok()?).ok()?;
                out.extend_from_slice(b"[\"text\",\"");
                for c in text.chars() {
                    push_char(out, c);
                }
                out.extend_from_slice(b"\"]");
            }
            "blob" => {
                self.byte(b',')?;
                let h = self.plain()?;
                self.byte(b']')?;
                out.extend_from_slice(b"[\"blob\",\"");
                // Only the letters change: bad hex stays bad.
                out.extend(h.bytes().map(|c| c.to_ascii_lowercase()));
                out.extend_from_slice(b"\"]");
            }
            _ => return None,
        }
        Some(())
    }
}

/// One character of a JSON string, as serde_json writes it.
fn push_char(out: &mut Vec<u8>, c: char) {
    let short = match c {
        '"' => b'"',
        '\\' => b'\\',
        '\u{8}' => b'b',
        '\u{c}' => b'f',
        '\n' => b'n',
        '\r' => b'r',
        '\t' => b't',
        c if (c as u32) < 0x20 => {
            const HEX: &[u8; 16] = b"0123456789abcdef";
            let n = c as usize;
            out.extend_from_slice(&[b'\\', b'u', b'0', b'0', HEX[n >> 4], HEX[n & 15]]);
            return;
        }
        c => {
            let mut b = [0u8; 4];
            out.extend_from_slice(c.encode_utf8(&mut b).as_bytes());
            return;
        }
    };
    out.extend_from_slice(&[b'\\', short]);
}

/// Where the members of an event were written, in `out`.
#[derive(Default)]
struct Parts<'a> {
    sequence: Option<&'a str>,
    table: Option<(usize, usize)>,
    operation: Option<&'static str>,
    before: Option<(usize, usize)>,
    after: Option<(usize, usize)>,
}

/// What every event line starts with in the canonical spelling.
const START: &[u8] = b"{\"kind\":\"event\",\"event\":{\"sequence\":\"";

/// Rewrite an event line in any spelling into the canonical one, into
/// `out` (emptied first). `None` if the line is not an event record, or
/// not in a form this path takes: the strict decoder reads it then. The
/// result is meant for [`super::fast::event_line`] and
/// [`super::fast::event_meta`], which check the rules on its contents.
pub fn canonical_event(line: &[u8], out: &mut Vec<u8>) -> Option<()> {
    out.clear();
    let s = simdutf8::basic::from_utf8(line).ok()?;
    let mut c = Cur { b: line, s, i: 0 };
    // The members' values go after the fixed start, in the order they
    // come; the canonical line is put together behind them.
    out.extend_from_slice(START);
    let mut kind = false;
    let mut event = None;
    c.byte(b'{')?;
    loop {
        match c.plain()? {
            "kind" if !kind => {
                c.byte(b':')?;
                if c.plain()? != "event" {
                    return None;
                }
                kind = true;
            }
            "event" if event.is_none() => {
                c.byte(b':')?;
                event = Some(c.event_to(out)?);
            }
            _ => return None,
        }
        match c.next()? {
            b',' => continue,
            b'}' => break,
            _ => return None,
        }
    }
    c.ws();
    let p = event?;
    if !kind || c.i != line.len() {
        return None;
    }
    let body = out.len();
    out.extend_from_slice(p.sequence?.as_bytes());
    out.extend_from_slice(b"\",\"table\":");
    let (a, b) = p.table?;
    out.extend_from_within(a..b);
    out.extend_from_slice(b",\"operation\":\"");
    out.extend_from_slice(p.operation?.as_bytes());
    out.push(b'"');
    if let Some((a, b)) = p.before {
        out.extend_from_slice(b",\"before\":");
        out.extend_from_within(a..b);
    }
    if let Some((a, b)) = p.after {
        out.extend_from_slice(b",\"after\":");
        out.extend_from_within(a..b);
    }
    out.extend_from_slice(b"}}");
    out.drain(START.len()..body);
    Some(())
}

impl<'a> Cur<'a> {
    /// An event object's members (after whitespace), their values written
    /// to `out` where [`Parts`] says.
    fn event_to(&mut self, out: &mut Vec<u8>) -> Option<Parts<'a>> {
        let mut p = Parts::default();
        self.byte(b'{')?;
        loop {
            let name = self.plain()?;
            self.byte(b':')?;
            let start = out.len();
            match name {
                "sequence" if p.sequence.is_none() => p.sequence = Some(self.plain()?),
                "table" if p.table.is_none() => {
                    self.string_to(out)?;
                    p.table = Some((start, out.len()));
                }
                "operation" if p.operation.is_none() => {
                    // A truncate is left to the strict decoder.
                    p.operation = Some(match self.plain()? {
                        "insert" => "insert",
                        "update" => "update",
                        "delete" => "delete",
                        _ => return None,
                    });
                }
                "before" if p.before.is_none() => {
                    self.row_to(out)?;
                    p.before = Some((start, out.len()));
                }
                "after" if p.after.is_none() => {
                    self.row_to(out)?;
                    p.after = Some((start, out.len()));
                }
                _ => return None,
            }
            match self.next()? {
                b',' => continue,
                b'}' => return Some(p),
                _ => return None,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn canon(line: &str) -> Option<String> {
        let mut out = Vec::new();
        canonical_event(line.as_bytes(), &mut out)?;
        Some(String::from_utf8(out).expect("UTF-8"))
    }

    #[test]
    fn other_spellings_become_the_canonical_line() {
        let want = r#"{"kind":"event","event":{"sequence":"7","table":"t\"é","operation":"update","before":[["integer","1"],["null"]],"after":[["integer","1"],["text","é😀/\n\u0001"],["real","1","-1"],["blob","00ff"],["text","a"]]}}"#;
        assert_eq!(canon(want).as_deref(), Some(want), "canonical stays");
        for other in [
            // Python's json.dumps: ", " and ": ", non-ASCII escaped
            r#"{"kind": "event", "event": {"sequence": "7", "table": "t\"\u00e9", "operation": "update", "before": [["integer", "1"], ["null"]], "after": [["integer", "1"], ["text", "\u00e9\ud83d\ude00\/\n\u0001"], ["real", "0.5"], ["blob", "00FF"], ["text-utf8", "61"]]}}"#,
            // members in another order, whitespace everywhere, a CR
            " {\t\"event\" : { \"after\" :[ [ \"integer\" , \"1\" ] ,[\"text\",\"\u{e9}\\uD83D\\uDE00/\\n\\u0001\"],[\"real\",\"2\",\"-2\"],[\"blob\",\"00Ff\"],[\"text\",\"\\u0061\"] ] , \"operation\":\"update\",\"before\":[[\"integer\",\"1\"],[ \"null\" ]],\"table\":\"t\\u0022\u{e9}\",\"sequence\":\"7\"},\"kind\":\"event\" }\r",
        ] {
            assert_eq!(canon(other).as_deref(), Some(want), "{other}");
        }
        for declined in [
            // an unknown, doubled or null member; a truncate; escapes in a
            // member name; a lone surrogate; bad JSON; another record
            r#"{"kind":"event","event":{"sequence":"7","table":"t","operation":"insert","after":[],"x":1}}"#,
            r#"{"kind":"event","kind":"event","event":{"sequence":"7","table":"t","operation":"insert","after":[]}}"#,
            r#"{"kind":"event","event":{"sequence":"7","table":"t","operation":"insert","after":[],"after":[]}}"#,
            r#"{"kind":"event","event":{"sequence":"7","table":"t","operation":"insert","before":null,"after":[]}}"#,
            r#"{"kind":"event","event":{"sequence":"7","table":"t","operation":"truncate"}}"#,
            r#"{"kind":"event","event":{"sequence":"7","t\u0061ble":"t","operation":"insert","after":[]}}"#,
            r#"{"kind":"event","event":{"sequence":"7","table":"\ud800","operation":"insert","after":[]}}"#,
            r#"{"kind":"event","event":{"sequence":"7","table":"\udc00","operation":"insert","after":[]}}"#,
            r#"{"kind":"event","event":{"sequence":"7","table":"t","operation":"insert","after":[["null"],]}}"#,
            r#"{"kind":"event","event":{"sequence":"7","table":"t","operation":"insert","after":[]}} x"#,
            r#"{"kind":"commit","end":{"source":"s","sequence":"7"},"count":"1"}"#,
        ] {
            assert_eq!(canon(declined), None, "{declined}");
        }
        // Bad contents are kept bad, for the fast path to decline.
        let kept = canon(
            r#"{"kind": "event", "event": {"sequence": "07", "table": "t", "operation": "insert", "after": [["integer", "01"], ["blob", "0G"]]}}"#,
        );
        assert_eq!(
            kept.as_deref(),
            Some(
                r#"{"kind":"event","event":{"sequence":"07","table":"t","operation":"insert","after":[["integer","01"],["blob","0g"]]}}"#
            )
        );
    }
}
