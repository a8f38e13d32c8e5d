//! Tagged values: the five SQLite storage classes, carried exactly.
//!
//! | class | wire | rule |
//! | --- | --- | --- |
//! | NULL | `["null"]` | |
//! | INTEGER | `["integer","-42"]` | canonical decimal `-?(0\|[1-9][0-9]*)` within i64 |
//! | REAL | `["real","<significand>","<exponent>"]` | value = significand × 2^exponent, exactly |
//! | REAL (read only) | `["real","0.1"]` | 0.1.0 decimal form, parsed correctly rounded, never written |
//! | TEXT | `["text","…"]` | any Unicode string; JSON escapes carry NUL and U+FEFF |
//! | TEXT (raw bytes) | `["text-utf8","efbbbf"]` | hex of strict UTF-8 bytes; decodes to TEXT |
//! | BLOB | `["blob","00ff"]` | hex, either case in, lowercase out, even length |
//!
//! The REAL encoder takes the IEEE-754 bits and strips trailing binary zeros
//! from the significand, so a nonzero written significand is odd: 0.125 is
//! `["real","1","-3"]`, 1e300 is `["real","1681218273811815","946"]` and the
//! smallest subnormal is `["real","1","-1074"]`. Zero is `["real","0","0"]` and
//! negative zero `["real","-0","0"]`. The decoder accepts any spelling whose
//! value is exactly a finite binary64 and refuses everything else: it never
//! rounds (except the legacy decimal form, which is by definition rounded).
//!
//! Text that is not valid UTF-8 cannot be TEXT: `text-utf8` with an invalid
//! sequence is an error, never replaced; arbitrary bytes belong in BLOB.

use serde::de::{self, DeserializeSeed, IgnoredAny, SeqAccess, Visitor};
use serde::Deserializer;
use std::cmp::Ordering;
use std::fmt;

/// Longest digit string accepted in an INTEGER or REAL component.
pub const MAX_NUMBER_DIGITS: usize = 400;

/// One value in one of the five storage classes.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Null,
    Integer(i64),
    /// Always finite. Compared bitwise by `PartialEq` via [`Value::same`]; the
    /// derived `PartialEq` uses float equality, so prefer `same` for identity.
    Real(f64),
    Text(String),
    Blob(Vec<u8>),
    /// Not a value: the source did not send this column because the change
    /// did not touch it (a PostgreSQL TOASTed value under the default
    /// replica identity). Only an update's `after` image may hold it, and
    /// never in a key column (docs/FORMAT.md, "Unchanged values").
    Unchanged,
}

impl Value {
    /// Exact identity: same class and same bits or bytes (`-0.0` differs from `0.0`).
    pub fn same(&self, other: &Value) -> bool {
        match (self, other) {
            (Value::Real(a), Value::Real(b)) => a.to_bits() == b.to_bits(),
            _ => self == other,
        }
    }

    /// Identity after the database-boundary normalization (REAL zero is +0).
    pub fn same_normalized(&self, other: &Value) -> bool {
        match (self, other) {
            (Value::Real(a), Value::Real(b)) => {
                normalize_zero(*a).to_bits() == normalize_zero(*b).to_bits()
            }
            _ => self == other,
        }
    }

    pub fn is_null(&self) -> bool {
        matches!(self, Value::Null)
    }

    pub fn is_unchanged(&self) -> bool {
        matches!(self, Value::Unchanged)
    }

    pub fn class_name(&self) -> &'static str {
        match self {
            Value::Null => "NULL",
            Value::Integer(_) => "INTEGER",
            Value::Real(_) => "REAL",
            Value::Text(_) => "TEXT",
            Value::Blob(_) => "BLOB",
            Value::Unchanged => "unchanged",
        }
    }

    /// Compare as SQLite's `ORDER BY` does (docs/FORMAT.md §9): NULL < numbers < TEXT < BLOB;
    /// INTEGER and REAL numerically (so 1 and 1.0 compare equal); TEXT and BLOB bytewise.
    pub fn key_cmp(&self, other: &Value) -> Ordering {
        fn rank(v: &Value) -> u8 {
            match v {
                Value::Null => 0,
                Value::Integer(_) | Value::Real(_) => 1,
                Value::Text(_) => 2,
                Value::Blob(_) => 3,
                Value::Unchanged => 4,
            }
        }
        match (self, other) {
            (Value::Integer(a), Value::Integer(b)) => a.cmp(b),
            (Value::Real(a), Value::Real(b)) => a.partial_cmp(b).unwrap_or(Ordering::Equal),
            (Value::Integer(a), Value::Real(b)) => cmp_int_real(*a, *b),
            (Value::Real(a), Value::Integer(b)) => cmp_int_real(*b, *a).reverse(),
            (Value::Text(a), Value::Text(b)) => a.as_bytes().cmp(b.as_bytes()),
            (Value::Blob(a), Value::Blob(b)) => a.cmp(b),
            _ => rank(self).cmp(&rank(other)),
        }
    }
}

/// Compare keys column by column with [`Value::key_cmp`].
pub fn key_cmp(a: &[Value], b: &[Value]) -> Ordering {
    for (x, y) in a.iter().zip(b) {
        match x.key_cmp(y) {
            Ordering::Equal => continue,
            o => return o,
        }
    }
    a.len().cmp(&b.len())
}

/// Exact comparison of an i64 with a finite f64, without rounding either.
fn cmp_int_real(i: i64, r: f64) -> Ordering {
    const TWO63: f64 = 9_223_372_036_854_775_808.0;
    if r >= TWO63 {
        return Ordering::Less;
    }
    if r < -TWO63 {
        return Ordering::Greater;
    }
    let t = r.trunc();
    // |t| < 2^63 here, so the conversion is exact.
    let ti = t as i64;
    match i.cmp(&ti) {
        Ordering::Equal => {
            let frac = r - t;
            if frac > 0.0 {
                Ordering::Less
            } else if frac < 0.0 {
                Ordering::Greater
            } else {
                Ordering::Equal
            }
        }
        o => o,
    }
}

/// REAL zero is +0 at the database boundary.
pub fn normalize_zero(x: f64) -> f64 {
    if x == 0.0 {
        0.0
    } else {
        x
    }
}

// ---------------------------------------------------------------- INTEGER

/// Parse a canonical decimal i64: `-?(0|[1-9][0-9]*)`, no `-0`, no `+`, no leading zeros.
pub fn parse_integer(s: &str) -> Result<i64, String> {
    check_canonical_integer(s)?;
    s.parse::<i64>()
        .map_err(|_| format!("INTEGER {} is outside the 64-bit range", quote(s)))
}

pub(super) fn check_canonical_integer(s: &str) -> Result<(), String> {
    let digits = s.strip_prefix('-').unwrap_or(s);
    if digits.len() > MAX_NUMBER_DIGITS {
        return Err(format!(
            "integer string of {} digits is longer than {} digits",
            digits.len(),
            MAX_NUMBER_DIGITS
        ));
    }
    let ok = !digits.is_empty()
        && digits.bytes().all(|b| b.is_ascii_digit())
        && (digits == "0" || !digits.starts_with('0'))
        && s != "-0";
    if ok {
        Ok(())
    } else {
        Err(format!(
            "{} is not a canonical decimal integer (-?(0|[1-9][0-9]*))",
            quote(s)
        ))
    }
}

pub(super) fn quote(s: &str) -> String {
    let mut q = String::with_capacity(s.len().min(40) + 2);
    q.push('"');
    for (n, c) in s.chars().enumerate() {
        if n == 32 {
            q.push('…');
            break;
        }
        q.extend(c.escape_debug());
    }
    q.push('"');
    q
}

pub use super::real::{parse_real_decimal, parse_real_pair, real_to_pair, write_real};

// ---------------------------------------------------------------- hex

/// Hex digits as nibbles, 0xff for anything else; upper case too when asked.
const fn nibbles(upper: bool) -> [u8; 256] {
    let mut t = [0xffu8; 256];
    let mut c = 0;
    while c < 10 {
        t[b'0' as usize + c] = c as u8;
        c += 1;
    }
    let mut c = 0;
    while c < 6 {
        t[b'a' as usize + c] = 10 + c as u8;
        if upper {
            t[b'A' as usize + c] = 10 + c as u8;
        }
        c += 1;
    }
    t
}

/// The hex digits the encoders write (lower case), as nibbles.
pub(super) const HEX_LOWER: [u8; 256] = nibbles(false);
/// Hex digits of either case, as the decoders take them.
pub(super) const HEX_ANY: [u8; 256] = nibbles(true);

/// Decode hex of either case; odd length or a non-hex digit is an error.
pub fn parse_hex(s: &str) -> Result<Vec<u8>, String> {
    if s.len() % 2 != 0 {
        return Err(format!("hex string has odd length {}", s.len()));
    }
    const NIBBLE: [u8; 256] = HEX_ANY;
    let nibble = |c: u8| Some(NIBBLE[c as usize]).filter(|&n| n != 0xff);
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len() / 2);
    for (i, pair) in b.chunks_exact(2).enumerate() {
        let (h, l) = (NIBBLE[pair[0] as usize], NIBBLE[pair[1] as usize]);
        match (h, l) {
            (0..=15, 0..=15) => out.push(h << 4 | l),
            _ => {
                return Err(format!(
                    "invalid hex string {}: not a hex digit at position {}",
                    quote(s),
                    2 * i + usize::from(nibble(pair[0]).is_some())
                ))
            }
        }
    }
    Ok(out)
}

// ---------------------------------------------------------------- encoding

/// Append the canonical wire form of a value.
pub fn write_value(out: &mut Vec<u8>, v: &Value) {
    match v {
        Value::Null => out.extend_from_slice(b"[\"null\"]"),
        Value::Integer(i) => {
            out.extend_from_slice(b"[\"integer\",\"");
            out.extend_from_slice(itoa::Buffer::new().format(*i).as_bytes());
            out.extend_from_slice(b"\"]");
        }
        Value::Real(x) => write_real(out, *x),
        Value::Text(s) => {
            out.extend_from_slice(b"[\"text\",");
            write_json_str(out, s);
            out.push(b']');
        }
        Value::Blob(b) => {
            out.extend_from_slice(b"[\"blob\",\"");
            let start = out.len();
            out.resize(start + b.len() * 2, 0);
            // hex::encode_to_slice cannot fail: the slice is exactly twice as long.
            let _ = hex::encode_to_slice(b, &mut out[start..]);
            out.extend_from_slice(b"\"]");
        }
        Value::Unchanged => out.extend_from_slice(b"[\"unchanged\"]"),
    }
}

/// Append a row: a JSON array of values.
pub fn write_row(out: &mut Vec<u8>, row: &[Value]) {
    out.push(b'[');
    for (i, v) in row.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        write_value(out, v);
    }
    out.push(b']');
}

/// Append a JSON string literal (escapes as serde_json does: `"`, `\`, controls).
pub fn write_json_str(out: &mut Vec<u8>, s: &str) {
    // serde_json's escaping is correct and fast; writing to a Vec cannot fail.
    let _ = serde_json::to_writer(&mut *out, s);
}

// ---------------------------------------------------------------- decoding

/// Deserializes one tagged value.
impl<'de> de::Deserialize<'de> for Value {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_seq(ValueVisitor)
    }
}

struct ValueVisitor;

#[derive(Clone, Copy)]
enum Tag {
    Null,
    Integer,
    Real,
    Text,
    TextUtf8,
    Blob,
    Unchanged,
}

struct TagVisitor;

impl<'de> Visitor<'de> for TagVisitor {
    type Value = Tag;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a value tag (null, integer, real, text, text-utf8, blob, unchanged)")
    }
    fn visit_str<E: de::Error>(self, s: &str) -> Result<Tag, E> {
        Ok(match s {
            "null" => Tag::Null,
            "integer" => Tag::Integer,
            "real" => Tag::Real,
            "text" => Tag::Text,
            "text-utf8" => Tag::TextUtf8,
            "blob" => Tag::Blob,
            "unchanged" => Tag::Unchanged,
            other => {
                return Err(E::custom(format!(
                    "unknown value tag {} (expected null, integer, real, text, text-utf8, blob or unchanged)",
                    quote(other)
                )))
            }
        })
    }
}

impl<'de> de::Deserialize<'de> for Tag {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_str(TagVisitor)
    }
}

/// A string element parsed on the spot by a function, without allocating.
struct Parsed<F>(F);

impl<'de, T, F: FnOnce(&str) -> Result<T, String>> DeserializeSeed<'de> for Parsed<F> {
    type Value = T;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<T, D::Error> {
        struct V<F>(F);
        impl<'de, T, F: FnOnce(&str) -> Result<T, String>> Visitor<'de> for V<F> {
            type Value = T;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<T, E> {
                (self.0)(s).map_err(E::custom)
            }
        }
        d.deserialize_str(V(self.0))
    }
}

/// Two borrowed-or-copied strings of a REAL pair, parsed together.
struct StrElem;
impl<'de> DeserializeSeed<'de> for StrElem {
    type Value = StrOwned<'de>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<StrOwned<'de>, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = StrOwned<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_str<E: de::Error>(self, s: &'de str) -> Result<StrOwned<'de>, E> {
                Ok(StrOwned::Borrowed(s))
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<StrOwned<'de>, E> {
                if s.trim_start_matches('-').len() > MAX_NUMBER_DIGITS {
                    return Err(E::custom(format!(
                        "number string of {} characters is longer than {} digits",
                        s.len(),
                        MAX_NUMBER_DIGITS
                    )));
                }
                Ok(StrOwned::Owned(s.to_owned()))
            }
        }
        d.deserialize_str(V)
    }
}

enum StrOwned<'a> {
    Borrowed(&'a str),
    Owned(String),
}

impl StrOwned<'_> {
    fn as_str(&self) -> &str {
        match self {
            StrOwned::Borrowed(s) => s,
            StrOwned::Owned(s) => s,
        }
    }
}

fn need<'de, A: SeqAccess<'de>, T>(x: Option<T>, what: &str) -> Result<T, A::Error> {
    x.ok_or_else(|| de::Error::custom(format!("value is missing its {what}")))
}

impl<'de> Visitor<'de> for ValueVisitor {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a tagged value array such as [\"integer\",\"1\"]")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let tag: Tag = match seq.next_element()? {
            Some(t) => t,
            None => return Err(de::Error::custom("empty value array has no tag")),
        };
        let value = match tag {
            Tag::Null => Value::Null,
            Tag::Unchanged => Value::Unchanged,
            Tag::Integer => {
                let s = seq.next_element_seed(Parsed(|s: &str| {
                    parse_integer(s).map_err(|e| format!("bad INTEGER: {e}"))
                }))?;
                Value::Integer(need::<A, _>(s, "INTEGER digits")?)
            }
            Tag::Real => {
                let a = need::<A, _>(seq.next_element_seed(StrElem)?, "REAL significand")?;
                match seq.next_element_seed(StrElem)? {
                    Some(b) => Value::Real(
                        parse_real_pair(a.as_str(), b.as_str())
                            .map_err(|e| de::Error::custom(format!("bad REAL: {e}")))?,
                    ),
                    None => Value::Real(
                        parse_real_decimal(a.as_str())
                            .map_err(|e| de::Error::custom(format!("bad REAL: {e}")))?,
                    ),
                }
            }
            Tag::Text => Value::Text(need::<A, _>(seq.next_element::<String>()?, "TEXT string")?),
            Tag::TextUtf8 => {
                let s = seq.next_element_seed(Parsed(|s: &str| {
                    let bytes = parse_hex(s).map_err(|e| format!("bad text-utf8: {e}"))?;
                    String::from_utf8(bytes).map_err(|e| {
                        format!(
                            "bad text-utf8: bytes are not valid UTF-8 (invalid sequence at byte {})",
                            e.utf8_error().valid_up_to()
                        )
                    })
                }))?;
                Value::Text(need::<A, _>(s, "text-utf8 hex")?)
            }
            Tag::Blob => {
                let s = seq.next_element_seed(Parsed(|s: &str| {
                    parse_hex(s).map_err(|e| format!("bad BLOB: {e}"))
                }))?;
                Value::Blob(need::<A, _>(s, "BLOB hex")?)
            }
        };
        if seq.next_element::<IgnoredAny>()?.is_some() {
            return Err(de::Error::custom(format!(
                "{} value has too many elements",
                value.class_name()
            )));
        }
        Ok(value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dec(s: &str) -> Result<Value, String> {
        serde_json::from_str::<Value>(s).map_err(|e| e.to_string())
    }

    fn enc(v: &Value) -> String {
        let mut out = Vec::new();
        write_value(&mut out, v);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn real_examples_from_the_contract() {
        assert_eq!(enc(&Value::Real(0.125)), r#"["real","1","-3"]"#);
        assert_eq!(
            enc(&Value::Real(1e300)),
            r#"["real","1681218273811815","946"]"#
        );
        assert_eq!(enc(&Value::Real(5e-324)), r#"["real","1","-1074"]"#);
        assert_eq!(enc(&Value::Real(0.0)), r#"["real","0","0"]"#);
        assert_eq!(enc(&Value::Real(-0.0)), r#"["real","-0","0"]"#);
        assert!(dec(r#"["real","2","-1"]"#).unwrap().same(&Value::Real(1.0)));
        assert!(dec(r#"["real","0.1"]"#).unwrap().same(&Value::Real(0.1)));
        assert!(dec(r#"["real","-0","0"]"#)
            .unwrap()
            .same(&Value::Real(-0.0)));
    }

    #[test]
    fn real_refusals() {
        for bad in [
            r#"["real","9007199254740993","0"]"#, // 54 bits
            r#"["real","1","1024"]"#,             // overflow
            r#"["real","3","-1075"]"#,            // needs subnormal rounding
            r#"["real","01","0"]"#,
            r#"["real","1","+3"]"#,
            r#"["real","1","-0"]"#,
            r#"["real","NaN"]"#,
            r#"["real","1e999"]"#,
            r#"["real","inf"]"#,
            r#"["real",".5"]"#,
            r#"["real"]"#,
            r#"["real","1","2","3"]"#,
        ] {
            assert!(dec(bad).is_err(), "{bad} should be refused");
        }
        // 2^1023 written with a long significand and a negative exponent is exact.
        let big = "8".to_string() + &"0".repeat(0);
        assert!(dec(&format!(r#"["real","{big}","1020"]"#))
            .unwrap()
            .same(&Value::Real(2f64.powi(1023))));
        assert!(dec(r#"["real","1","-1074"]"#)
            .unwrap()
            .same(&Value::Real(5e-324)));
        assert!(dec(r#"["real","2","-1075"]"#)
            .unwrap()
            .same(&Value::Real(5e-324)));
    }

    #[test]
    fn integer_rules() {
        assert_eq!(
            dec(r#"["integer","-9223372036854775808"]"#).unwrap(),
            Value::Integer(i64::MIN)
        );
        for bad in ["-0", "+1", "01", "", "9223372036854775808", "1.0", " 1"] {
            assert!(dec(&format!(r#"["integer","{bad}"]"#)).is_err(), "{bad}");
        }
        assert!(dec(r#"["integer",1]"#).is_err());
    }

    #[test]
    fn text_and_blob() {
        assert_eq!(
            dec(r#"["text-utf8","EFBBBF74"]"#).unwrap(),
            Value::Text("\u{feff}t".into())
        );
        assert!(dec(r#"["text-utf8","ff"]"#).is_err());
        assert!(dec(r#"["blob","0"]"#).is_err());
        assert!(dec(r#"["blob","zz"]"#).is_err());
        assert_eq!(enc(&Value::Blob(vec![0, 255])), r#"["blob","00ff"]"#);
        assert_eq!(
            enc(&Value::Text("a\u{0}\"".into())),
            r#"["text","a\u0000\""]"#
        );
        assert!(dec(r#"["bool","1"]"#).is_err());
        assert!(dec(r#"["null","x"]"#).is_err());
    }

    #[test]
    fn key_order_mixes_classes_like_sqlite() {
        use Ordering::*;
        assert_eq!(Value::Integer(1).key_cmp(&Value::Real(1.0)), Equal);
        assert_eq!(Value::Integer(1).key_cmp(&Value::Real(1.5)), Less);
        assert_eq!(Value::Integer(i64::MAX).key_cmp(&Value::Real(9.3e18)), Less);
        assert_eq!(Value::Integer(-3).key_cmp(&Value::Real(-2.5)), Less);
        assert_eq!(Value::Null.key_cmp(&Value::Integer(i64::MIN)), Less);
        assert_eq!(Value::Text("z".into()).key_cmp(&Value::Blob(vec![])), Less);
        assert_eq!(
            Value::Real(1e300).key_cmp(&Value::Text(String::new())),
            Less
        );
    }
}
