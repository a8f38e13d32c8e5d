//! The decoders' second fast path: an event line in any other valid
//! spelling (whitespace between tokens, members in any order, any JSON
//! escapes, BLOB hex in upper case, REAL as a pair that is not reduced or
//! in the 0.1.0 decimal form, `text-utf8`), as producers other than
//! MoonCDC write it, is checked and rewritten in one pass into the one
//! canonical spelling of the same event (`fast.rs`), which a tool then
//! writes through as it does a MoonCDC line.
//!
//! Every rule the strict decoder applies to an event record is applied
//! here, with the functions it uses: the JSON syntax (what serde_json
//! takes: whitespace is space, tab, CR and LF; strings without control
//! characters; every escape, surrogates only in pairs), members allowed
//! and each at most once, none `null`, sequences and INTEGER digits
//! canonical, REAL exact, hex of even length, `text-utf8` strict UTF-8,
//! images as the operation needs, a positive sequence. TEXT and table
//! names are decoded and written as the encoder writes them (serde_json's
//! escaping), REAL as `write_real` writes it, BLOB hex in lower case.
//!
//! Anything unusual gives `None`, and the strict decoder reads the original
//! line with every rule and every message (and column) it has: a member
//! name, tag or number with an escape, a truncate, an unknown or doubled
//! member, any error. So this path makes reading faster, never more
//! lenient; the property tests and the fuzz replay compare it with the
//! strict decoder, on canonical lines, other spellings of them and lines
//! one byte away.

use super::fast::EventMeta;
use super::model::{parse_sequence, Operation};
use super::value::{
    parse_hex, parse_integer, parse_real_decimal, parse_real_pair, write_real, HEX_ANY,
};

/// Bytes that end a string's plain run: the quote, the backslash and the
/// control characters (which JSON refuses unescaped).
const STOP: [bool; 256] = {
    let mut t = [false; 256];
    let mut c = 0;
    while c < 0x20 {
        t[c] = true;
        c += 1;
    }
    t[b'"' as usize] = true;
    t[b'\\' as usize] = true;
    t
};

struct Cur<'a> {
    b: &'a [u8],
    s: &'a str,
    i: usize,
}

impl<'a> Cur<'a> {
    /// Skip JSON whitespace (what serde_json skips: space, tab, CR, LF).
    #[inline]
    fn ws(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.b.get(self.i) {
            self.i += 1;
        }
    }

    /// The next byte after whitespace.
    #[inline]
    fn next(&mut self) -> Option<u8> {
        self.ws();
        let c = *self.b.get(self.i)?;
        self.i += 1;
        Some(c)
    }

    #[inline]
    fn byte(&mut self, c: u8) -> Option<()> {
        (self.next()? == c).then_some(())
    }

    /// The length of the plain run at the cursor (no quote, backslash or
    /// control character).
    #[inline]
    fn run(&self) -> usize {
        let rest = &self.b[self.i..];
        // Eight bytes at a time: a byte equal to the quote or the backslash
        // is a zero byte of the word XORed with it; a byte below 0x20 one
        // that borrows when 0x20 is taken away. The lowest byte flagged is
        // the first stop (borrows only flag bytes above a true one).
        const ONES: u64 = 0x0101_0101_0101_0101;
        const HIGH: u64 = 0x8080_8080_8080_8080;
        let below = |v: u64, c: u64| v.wrapping_sub(ONES * c) & !v;
        let mut n = 0;
        while let Some(word) = rest.get(n..n + 8) {
            let v = u64::from_le_bytes(word.try_into().expect("eight bytes"));
            let (q, b) = (v ^ (ONES * 0x22), v ^ (ONES * 0x5c));
            let stop = (below(q, 1) | below(b, 1) | below(v, 0x20)) & HIGH;
            if stop != 0 {
                return n + (stop.trailing_zeros() / 8) as usize;
            }
            n += 8;
        }
        n + rest[n..]
            .iter()
            .position(|&c| STOP[c as usize])
            .unwrap_or(rest.len() - n)
    }

    /// A JSON string (after whitespace) with no escape and no control
    /// character: its text.
    #[inline]
    fn plain(&mut self) -> Option<&'a str> {
        self.byte(b'"')?;
        let start = self.i;
        self.i += self.run();
        if self.b.get(self.i) != Some(&b'"') {
            return None;
        }
        self.i += 1;
        // Quotes are ASCII, so both ends are character boundaries.
        Some(&self.s[start..self.i - 1])
    }

    /// Which of `names` (JSON strings, quotes included) comes next after
    /// whitespace, told by its first letter; `None` for any other string,
    /// one with escapes among them.
    #[inline]
    fn one_of(&mut self, names: &[&[u8]]) -> Option<usize> {
        self.ws();
        let rest = &self.b[self.i..];
        let first = *rest.get(1)?;
        for (k, name) in names.iter().enumerate() {
            if name[1] == first && rest.starts_with(name) {
                self.i += name.len();
                return Some(k);
            }
        }
        None
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
    /// escaped), quotes included. Whether it has an escape there.
    fn string_to(&mut self, out: &mut Vec<u8>) -> Option<bool> {
        self.byte(b'"')?;
        out.push(b'"');
        let mut escaped = false;
        loop {
            let n = self.run();
            out.extend_from_slice(&self.b[self.i..self.i + n]);
            self.i += n;
            let (c, len) = match *self.b.get(self.i)? {
                b'"' => {
                    self.i += 1;
                    out.push(b'"');
                    return Some(escaped);
                }
                b'\\' => match *self.b.get(self.i + 1)? {
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
                            // A leading surrogate: only with its trailing
                            // one (serde_json refuses a lone surrogate).
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
                },
                // A control character.
                _ => return None,
            };
            escaped |= push_char(out, c);
            self.i += len;
        }
    }

    /// A row (after whitespace), checked and written canonically; how
    /// many values it has.
    fn row_to(&mut self, out: &mut Vec<u8>) -> Option<usize> {
        self.byte(b'[')?;
        out.push(b'[');
        self.ws();
        if self.b.get(self.i) == Some(&b']') {
            self.i += 1;
            out.push(b']');
            return Some(0);
        }
        let mut n = 0;
        loop {
            self.value_to(out)?;
            n += 1;
            match self.next()? {
                b',' => out.push(b','),
                b']' => {
                    out.push(b']');
                    return Some(n);
                }
                _ => return None,
            }
        }
    }

    /// One value (after whitespace), checked as the strict decoder checks
    /// it and written canonically.
    fn value_to(&mut self, out: &mut Vec<u8>) -> Option<()> {
        self.byte(b'[')?;
        const TAGS: [&[u8]; 6] = [
            b"\"null\"",
            b"\"integer\"",
            b"\"real\"",
            b"\"text\"",
            b"\"text-utf8\"",
            b"\"blob\"",
        ];
        match self.one_of(&TAGS)? {
            0 => {
                self.byte(b']')?;
                out.extend_from_slice(b"[\"null\"]");
            }
            1 => {
                self.byte(b',')?;
                let digits = self.plain()?;
                self.byte(b']')?;
                // Canonical digits only, so they are written as they are.
                parse_integer(digits).ok()?;
                out.extend_from_slice(b"[\"integer\",\"");
                out.extend_from_slice(digits.as_bytes());
                out.extend_from_slice(b"\"]");
            }
            2 => {
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
            3 => {
                self.byte(b',')?;
                out.extend_from_slice(b"[\"text\",");
                self.string_to(out)?;
                self.byte(b']')?;
                out.push(b']');
            }
            4 => {
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
            5 => {
                self.byte(b',')?;
                let h = self.plain()?.as_bytes();
                self.byte(b']')?;
                if h.len() % 2 != 0 || h.iter().any(|&c| HEX_ANY[c as usize] == 0xff) {
                    return None;
                }
                out.extend_from_slice(b"[\"blob\",\"");
                out.extend(h.iter().map(u8::to_ascii_lowercase));
                out.extend_from_slice(b"\"]");
            }
            _ => return None,
        }
        Some(())
    }
}

/// One character of a JSON string, as serde_json writes it; whether it
/// was escaped.
fn push_char(out: &mut Vec<u8>, c: char) -> bool {
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
            return true;
        }
        c => {
            let mut b = [0u8; 4];
            out.extend_from_slice(c.encode_utf8(&mut b).as_bytes());
            return false;
        }
    };
    out.extend_from_slice(&[b'\\', short]);
    true
}

/// What every event line starts with in the canonical spelling.
const START: &[u8] = b"{\"kind\":\"event\",\"event\":{";

/// The event's members in their canonical order.
const MEMBERS: [&str; 5] = ["sequence", "table", "operation", "before", "after"];

/// An event line in another spelling, checked and rewritten.
pub struct Rewritten {
    /// What [`super::fast::event_spans`] gives for the rewritten line.
    pub meta: EventMeta,
    /// Whether the table name is written without escapes (`meta.table` is
    /// empty otherwise, as from [`super::fast::event_spans`]).
    pub plain_table: bool,
}

/// Check an event line in any spelling and rewrite it into the canonical
/// one, into `out` (emptied first). `None` if the line is not a valid
/// event record, or not in a form this path takes: the strict decoder
/// reads it then.
pub fn canonical_event(line: &[u8], out: &mut Vec<u8>) -> Option<Rewritten> {
    out.clear();
    let s = simdutf8::basic::from_utf8(line).ok()?;
    let mut c = Cur { b: line, s, i: 0 };
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
    if !kind || c.i != line.len() {
        return None;
    }
    out.extend_from_slice(b"}}");
    event
}

impl Cur<'_> {
    /// An event object's members (after whitespace), each checked and
    /// written to `out` as it is in the canonical line (`"sequence":"…"`,
    /// then `,"table":…` and so on), then put in the canonical order.
    fn event_to(&mut self, out: &mut Vec<u8>) -> Option<Rewritten> {
        // Where each member was written, by its canonical place.
        let mut at: [Option<(usize, usize)>; 5] = [None; 5];
        let mut in_order = true;
        let mut last = None;
        let mut sequence = 0;
        let mut operation = Operation::Insert;
        let mut escaped = false;
        let mut widths = [0; 2];
        let body = out.len();
        self.byte(b'{')?;
        loop {
            const NAMES: [&[u8]; 5] = [
                b"\"sequence\"",
                b"\"table\"",
                b"\"operation\"",
                b"\"before\"",
                b"\"after\"",
            ];
            let k = self.one_of(&NAMES)?;
            let name = MEMBERS[k];
            if at[k].is_some() {
                return None;
            }
            self.byte(b':')?;
            let start = out.len();
            if k > 0 {
                out.extend_from_slice(b",\"");
                out.extend_from_slice(name.as_bytes());
                out.extend_from_slice(b"\":");
            }
            match k {
                0 => {
                    let digits = self.plain()?;
                    // Canonical digits only, so they are written as they are.
                    sequence = parse_sequence(digits).ok()?;
                    out.extend_from_slice(b"\"sequence\":\"");
                    out.extend_from_slice(digits.as_bytes());
                    out.push(b'"');
                }
                1 => escaped = self.string_to(out)?,
                2 => {
                    // A truncate is left to the strict decoder.
                    let op = self.plain()?;
                    operation = match op {
                        "insert" => Operation::Insert,
                        "update" => Operation::Update,
                        "delete" => Operation::Delete,
                        _ => return None,
                    };
                    out.push(b'"');
                    out.extend_from_slice(op.as_bytes());
                    out.push(b'"');
                }
                _ => widths[k - 3] = self.row_to(out)?,
            }
            at[k] = Some((start, out.len()));
            in_order &= last.is_none_or(|l| l < k);
            last = Some(k);
            match self.next()? {
                b',' => continue,
                b'}' => break,
                _ => return None,
            }
        }
        // Sequence, table and operation are required; the images are the
        // operation's; an event's sequence is positive.
        let images_fit = match operation {
            Operation::Insert => at[3].is_none() && at[4].is_some(),
            Operation::Update => at[3].is_some() && at[4].is_some(),
            _ => at[3].is_some() && at[4].is_none(),
        };
        if !at[..3].iter().all(Option::is_some) || !images_fit || sequence == 0 {
            return None;
        }
        if !in_order {
            // Put together behind, then moved into place.
            let end = out.len();
            for &(a, b) in at.iter().flatten() {
                out.extend_from_within(a..b);
            }
            out.drain(body..end);
        }
        // Where the members are now: one after the other, in order.
        let mut place = [(0, 0); 5];
        let mut pos = body;
        for (k, span) in at.iter().enumerate() {
            if let Some((a, b)) = span {
                // After `,"name":` (the sequence's place is not needed).
                let value = pos + MEMBERS[k].len() + 4;
                pos += b - a;
                place[k] = (value, pos);
            }
        }
        let table_json = place[1];
        let image = |k: usize| at[k].map(|_| place[k]);
        Some(Rewritten {
            meta: EventMeta {
                sequence,
                operation,
                table: if escaped {
                    (table_json.0, table_json.0)
                } else {
                    (table_json.0 + 1, table_json.1 - 1)
                },
                table_json,
                before: at[3].map(|_| widths[0]),
                after: at[4].map(|_| widths[1]),
                // This path declines both (the strict decoder reads them).
                key_only: false,
                unchanged: false,
                before_at: image(3),
                after_at: image(4),
            },
            plain_table: !escaped,
        })
    }
}

#[cfg(test)]
mod tests;
