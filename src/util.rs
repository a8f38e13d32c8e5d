//! Small text helpers shared by the database connectors.

use crate::error::{Error, Result};

/// Decode `%XX` escapes of a URL part; the result must be UTF-8.
pub fn percent_decode(s: &str) -> Result<String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let v = s
                .get(i + 1..i + 3)
                .and_then(|h| u8::from_str_radix(h, 16).ok())
                .ok_or_else(|| Error::usage("bad percent-escape in a URL"))?;
            out.push(v);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| Error::usage("a URL part is not UTF-8 after decoding"))
}

/// Quote an SQL identifier as SQLite and PostgreSQL read it: `"` … `"` with
/// inner quotes doubled, so any name (quotes, spaces, keywords) is one
/// identifier.
pub fn quote_ident(s: &str) -> String {
    let mut q = String::with_capacity(s.len() + 2);
    q.push('"');
    for c in s.chars() {
        if c == '"' {
            q.push('"');
        }
        q.push(c);
    }
    q.push('"');
    q
}
