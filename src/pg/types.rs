//! PostgreSQL values to wire values.
//!
//! | PostgreSQL | wire | how |
//! | --- | --- | --- |
//! | `int2`, `int4`, `int8`, `oid` | INTEGER | decimal text |
//! | `float4`, `float8` | REAL | shortest exact text (`extra_float_digits=3`), parsed correctly rounded at its own width; `NaN` and `±Infinity` fail |
//! | `bool` | INTEGER | 1 or 0 |
//! | `bytea` | BLOB | `\x` hex text |
//! | everything else | TEXT | PostgreSQL's text form (ISO dates, UTC, hex bytea, `numeric` digits as stored) |
//!
//! Every session sets the text forms explicitly (see `conn::PgConn::SESSION_OPTIONS`),
//! so the same value always reads the same way.

use crate::wire::Value;

pub const BOOL: u32 = 16;
pub const BYTEA: u32 = 17;
pub const INT8: u32 = 20;
pub const INT2: u32 = 21;
pub const INT4: u32 = 23;
pub const OID: u32 = 26;
pub const FLOAT4: u32 = 700;
pub const FLOAT8: u32 = 701;

/// The wire class a column type maps to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Class {
    Integer,
    Real4,
    Real8,
    Bool,
    Blob,
    Text,
}

pub fn class_of(type_oid: u32) -> Class {
    match type_oid {
        INT2 | INT4 | INT8 | OID => Class::Integer,
        FLOAT4 => Class::Real4,
        FLOAT8 => Class::Real8,
        BOOL => Class::Bool,
        BYTEA => Class::Blob,
        _ => Class::Text,
    }
}

/// Convert one value's text form. `None` is SQL NULL.
pub fn from_text(class: Class, text: Option<&[u8]>) -> Result<Value, String> {
    let Some(b) = text else {
        return Ok(Value::Null);
    };
    let s = std::str::from_utf8(b).map_err(|_| "value is not valid UTF-8".to_string())?;
    Ok(match class {
        Class::Integer => Value::Integer(
            s.parse::<i64>()
                .map_err(|_| format!("integer value {s:?} is not a 64-bit integer"))?,
        ),
        Class::Real4 | Class::Real8 => {
            if matches!(s, "NaN" | "Infinity" | "-Infinity") {
                return Err(format!(
                    "REAL value {s} cannot be carried (only finite REAL values can)"
                ));
            }
            let x = if class == Class::Real4 {
                s.parse::<f32>()
                    .map(f64::from)
                    .map_err(|_| format!("float4 value {s:?} is not a number"))?
            } else {
                s.parse::<f64>()
                    .map_err(|_| format!("float8 value {s:?} is not a number"))?
            };
            if !x.is_finite() {
                return Err(format!(
                    "REAL value {s} cannot be carried (only finite REAL values can)"
                ));
            }
            // PostgreSQL keeps the sign of zero, and so does the stream
            // (docs/FORMAT.md, "REAL").
            Value::Real(x)
        }
        Class::Bool => match s {
            "t" => Value::Integer(1),
            "f" => Value::Integer(0),
            _ => return Err(format!("bool value {s:?} is neither t nor f")),
        },
        Class::Blob => {
            let hex = s.strip_prefix("\\x").ok_or_else(|| {
                format!(
                    "bytea value does not start with \\x (bytea_output must be hex): {:?}",
                    &s[..s.len().min(16)]
                )
            })?;
            Value::Blob(hex::decode(hex).map_err(|e| format!("bytea hex is invalid: {e}"))?)
        }
        Class::Text => Value::Text(s.to_string()),
    })
}

/// Split one line of `COPY … TO STDOUT` text format into raw fields
/// (`None` for `\N`), undoing its backslash escapes.
pub fn copy_fields(line: &[u8]) -> Result<Vec<Option<std::borrow::Cow<'_, [u8]>>>, String> {
    let mut fields = Vec::with_capacity(8);
    for raw in line.split(|&b| b == b'\t') {
        if raw == b"\\N" {
            fields.push(None);
            continue;
        }
        // Most fields hold no escape: borrowed as they are.
        if memchr::memchr(b'\\', raw).is_none() {
            fields.push(Some(std::borrow::Cow::Borrowed(raw)));
            continue;
        }
        let mut out = Vec::with_capacity(raw.len());
        let mut i = 0;
        while i < raw.len() {
            let c = raw[i];
            if c != b'\\' {
                out.push(c);
                i += 1;
                continue;
            }
            let Some(&n) = raw.get(i + 1) else {
                return Err("COPY field ends with a lone backslash".into());
            };
            i += 2;
            match n {
                b'b' => out.push(8),
                b'f' => out.push(12),
                b'n' => out.push(b'\n'),
                b'r' => out.push(b'\r'),
                b't' => out.push(b'\t'),
                b'v' => out.push(11),
                b'0'..=b'7' => {
                    let mut v = (n - b'0') as u32;
                    let mut k = 0;
                    while k < 2 && i < raw.len() && (b'0'..=b'7').contains(&raw[i]) {
                        v = v * 8 + (raw[i] - b'0') as u32;
                        i += 1;
                        k += 1;
                    }
                    out.push(v as u8);
                }
                b'x' => {
                    let mut v = 0u32;
                    let mut k = 0;
                    while k < 2 && i < raw.len() && raw[i].is_ascii_hexdigit() {
                        v = v * 16 + (raw[i] as char).to_digit(16).unwrap_or(0);
                        i += 1;
                        k += 1;
                    }
                    if k == 0 {
                        out.push(b'x');
                    } else {
                        out.push(v as u8);
                    }
                }
                other => out.push(other),
            }
        }
        fields.push(Some(std::borrow::Cow::Owned(out)));
    }
    Ok(fields)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_each_class() {
        assert_eq!(
            from_text(Class::Integer, Some(b"-9223372036854775808")).unwrap(),
            Value::Integer(i64::MIN)
        );
        assert!(from_text(Class::Real8, Some(b"0.1"))
            .unwrap()
            .same(&Value::Real(0.1)));
        assert!(from_text(Class::Real8, Some(b"-0"))
            .unwrap()
            .same(&Value::Real(-0.0)));
        assert!(from_text(Class::Real4, Some(b"0.1"))
            .unwrap()
            .same(&Value::Real(0.1f32 as f64)));
        assert!(from_text(Class::Real8, Some(b"4.9406564584124654e-324"))
            .unwrap()
            .same(&Value::Real(5e-324)));
        assert!(from_text(Class::Real8, Some(b"NaN")).is_err());
        assert!(from_text(Class::Real4, Some(b"-Infinity")).is_err());
        assert_eq!(
            from_text(Class::Bool, Some(b"t")).unwrap(),
            Value::Integer(1)
        );
        assert_eq!(
            from_text(Class::Blob, Some(b"\\x00ff")).unwrap(),
            Value::Blob(vec![0, 255])
        );
        assert_eq!(
            from_text(Class::Text, Some(b"12.3400")).unwrap(),
            Value::Text("12.3400".into())
        );
        assert_eq!(from_text(Class::Text, None).unwrap(), Value::Null);
    }

    #[test]
    fn copy_escapes() {
        let f: Vec<Option<Vec<u8>>> = copy_fields(b"1\t\\N\ta\\tb\\\\c\\n\t\\\\x00ff\t\\101")
            .unwrap()
            .into_iter()
            .map(|x| x.map(|c| c.into_owned()))
            .collect();
        assert_eq!(
            f,
            vec![
                Some(b"1".to_vec()),
                None,
                Some(b"a\tb\\c\n".to_vec()),
                Some(b"\\x00ff".to_vec()),
                Some(b"A".to_vec())
            ]
        );
    }
}
