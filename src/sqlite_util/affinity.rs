//! SQLite's column affinities, as SQLite chooses them from a declared type,
//! and which values keep their class under each: shared by the SQLite
//! target (no value changes class), the PostgreSQL and ClickHouse targets
//! (a SQLite source's columns typed by affinity).

use crate::wire::Value;

/// SQLite's column affinity, chosen from a declared type by SQLite's rules
/// (datatype3.html, 3.1): the first of these substrings found decides.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Affinity {
    Integer,
    Text,
    /// No affinity: values are stored as given.
    Blob,
    Real,
    Numeric,
}

pub fn affinity(decl: &str) -> Affinity {
    let t = decl.to_ascii_uppercase();
    if t.contains("INT") {
        Affinity::Integer
    } else if t.contains("CHAR") || t.contains("CLOB") || t.contains("TEXT") {
        Affinity::Text
    } else if t.contains("BLOB") || t.trim().is_empty() {
        Affinity::Blob
    } else if t.contains("REAL") || t.contains("FLOA") || t.contains("DOUB") {
        Affinity::Real
    } else {
        Affinity::Numeric
    }
}

/// Whether SQLite would read TEXT `s` as a number when applying a numeric
/// affinity (sqlite3AtoF accepting the whole string): optional white space,
/// a sign, digits with at most one point, an exponent with digits, white space.
pub fn looks_numeric(s: &str) -> bool {
    let space = |c: &u8| matches!(c, b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r');
    let b = s.as_bytes();
    let mut i = 0;
    while i < b.len() && space(&b[i]) {
        i += 1;
    }
    if i < b.len() && (b[i] == b'+' || b[i] == b'-') {
        i += 1;
    }
    let mut digits = 0;
    while i < b.len() && b[i].is_ascii_digit() {
        i += 1;
        digits += 1;
    }
    if i < b.len() && b[i] == b'.' {
        i += 1;
        while i < b.len() && b[i].is_ascii_digit() {
            i += 1;
            digits += 1;
        }
    }
    if i < b.len() && (b[i] == b'e' || b[i] == b'E') {
        i += 1;
        if i < b.len() && (b[i] == b'+' || b[i] == b'-') {
            i += 1;
        }
        let mut exp = 0;
        while i < b.len() && b[i].is_ascii_digit() {
            i += 1;
            exp += 1;
        }
        if exp == 0 {
            return false;
        }
    }
    while i < b.len() && space(&b[i]) {
        i += 1;
    }
    i == b.len() && digits > 0
}

/// Whether storing `v` in a column of affinity `a` keeps its class.
pub fn keeps_class(a: Affinity, v: &Value) -> bool {
    match (a, v) {
        (Affinity::Blob, _) | (_, Value::Null | Value::Blob(_) | Value::Unchanged) => true,
        (Affinity::Text, Value::Text(_)) => true,
        (Affinity::Text, _) => false,
        (Affinity::Integer | Affinity::Numeric | Affinity::Real, Value::Text(s)) => {
            !looks_numeric(s)
        }
        (Affinity::Integer | Affinity::Numeric, Value::Integer(_)) => true,
        // An integral REAL becomes an INTEGER (sqlite3VdbeIntegerAffinity).
        (Affinity::Integer | Affinity::Numeric, Value::Real(r)) => {
            !(r.fract() == 0.0 && *r > i64::MIN as f64 && *r < i64::MAX as f64)
        }
        (Affinity::Real, Value::Real(_)) => true,
        (Affinity::Real, Value::Integer(_)) => false,
    }
}
