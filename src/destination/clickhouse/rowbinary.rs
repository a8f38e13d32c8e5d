//! RowBinary: values written and read bit-exactly, and each table's column
//! layout (types, nullability, the row encoder).

use super::*;

pub(super) fn leb128(out: &mut Vec<u8>, mut n: u64) {
    loop {
        let b = (n & 0x7f) as u8;
        n >>= 7;
        if n == 0 {
            out.push(b);
            return;
        }
        out.push(b | 0x80);
    }
}

/// Parse a decimal text into a scaled integer with exactly `scale` digits.
pub(super) fn decimal_scaled(
    s: &str,
    precision: u8,
    scale: u8,
) -> std::result::Result<i128, String> {
    let (neg, digits) = match s.strip_prefix('-') {
        Some(d) => (true, d),
        None => (false, s),
    };
    let (int, frac) = digits.split_once('.').unwrap_or((digits, ""));
    if int.is_empty()
        || !int.bytes().all(|b| b.is_ascii_digit())
        || !frac.bytes().all(|b| b.is_ascii_digit())
    {
        return Err(format!("{s:?} is not a decimal number"));
    }
    if frac.len() > scale as usize {
        return Err(format!("{s:?} has more than {scale} decimals"));
    }
    let mut all = String::from(int.trim_start_matches('0'));
    all.push_str(frac);
    all.extend(std::iter::repeat_n('0', scale as usize - frac.len()));
    let all = all.trim_start_matches('0');
    if all.len() > precision as usize {
        return Err(format!("{s:?} has more than {precision} digits"));
    }
    let v: i128 = if all.is_empty() {
        0
    } else {
        all.parse().map_err(|_| format!("{s:?} is out of range"))?
    };
    Ok(if neg { -v } else { v })
}

pub(super) fn format_decimal(v: i128, scale: u8) -> String {
    let neg = v < 0;
    let digits = v.unsigned_abs().to_string();
    let s = scale as usize;
    let body = if s == 0 {
        digits
    } else if digits.len() > s {
        format!(
            "{}.{}",
            &digits[..digits.len() - s],
            &digits[digits.len() - s..]
        )
    } else {
        format!("0.{}{}", "0".repeat(s - digits.len()), digits)
    };
    if neg {
        format!("-{body}")
    } else {
        body
    }
}

/// Append one value in RowBinary for its column.
pub(super) fn encode_value(
    out: &mut Vec<u8>,
    ty: ChType,
    nullable: bool,
    v: &Value,
) -> std::result::Result<(), String> {
    if nullable {
        if v.is_null() {
            out.push(1);
            return Ok(());
        }
        out.push(0);
    } else if v.is_null() {
        return Err("NULL in a key column".into());
    }
    let class = v.class_name();
    let wrong = || format!("a {class} value does not fit a {} column", ty.sql());
    match (ty, v) {
        (ChType::Int64, Value::Integer(i)) => out.extend(i.to_le_bytes()),
        (ChType::Int32, Value::Integer(i)) => out.extend(
            i32::try_from(*i)
                .map_err(|_| format!("{i} does not fit Int32"))?
                .to_le_bytes(),
        ),
        (ChType::Int16, Value::Integer(i)) => out.extend(
            i16::try_from(*i)
                .map_err(|_| format!("{i} does not fit Int16"))?
                .to_le_bytes(),
        ),
        (ChType::UInt32, Value::Integer(i)) => out.extend(
            u32::try_from(*i)
                .map_err(|_| format!("{i} does not fit UInt32"))?
                .to_le_bytes(),
        ),
        (ChType::Bool, Value::Integer(i)) if *i == 0 || *i == 1 => out.push(*i as u8),
        (ChType::Float64, Value::Real(x)) => out.extend(x.to_bits().to_le_bytes()),
        (ChType::Float32, Value::Real(x)) => {
            let f = *x as f32;
            if f as f64 != *x {
                return Err(format!("REAL {x:e} is not exactly a Float32"));
            }
            out.extend(f.to_bits().to_le_bytes())
        }
        (ChType::Decimal(p, s), Value::Text(t)) => {
            // Decimal32, Decimal64 or Decimal128 by precision.
            let v = decimal_scaled(t, p, s)?;
            match p {
                0..=9 => out.extend((v as i32).to_le_bytes()),
                10..=18 => out.extend((v as i64).to_le_bytes()),
                _ => out.extend(v.to_le_bytes()),
            }
        }
        (ChType::Text, Value::Text(t)) => {
            leb128(out, t.len() as u64);
            out.extend_from_slice(t.as_bytes());
        }
        (ChType::Blob, Value::Blob(b)) => {
            leb128(out, b.len() as u64);
            out.extend_from_slice(b);
        }
        (ChType::Any, v) => {
            let mut w = Vec::new();
            write_value(&mut w, v);
            leb128(out, w.len() as u64);
            out.extend_from_slice(&w);
        }
        _ => return Err(wrong()),
    }
    Ok(())
}

/// Read one value of a column back from RowBinary.
pub(super) fn decode_value(r: &mut dyn Read, ty: ChType, nullable: bool) -> Result<Value> {
    let bad = |e: std::io::Error| Error::io("cannot read a ClickHouse row", e);
    let mut b1 = [0u8; 1];
    if nullable {
        r.read_exact(&mut b1).map_err(bad)?;
        if b1[0] == 1 {
            return Ok(Value::Null);
        }
    }
    macro_rules! le {
        ($t:ty, $n:expr) => {{
            let mut b = [0u8; $n];
            r.read_exact(&mut b).map_err(bad)?;
            <$t>::from_le_bytes(b)
        }};
    }
    let string = |r: &mut dyn Read| -> Result<Vec<u8>> {
        let mut n = 0u64;
        let mut shift = 0;
        loop {
            let mut b = [0u8; 1];
            r.read_exact(&mut b).map_err(bad)?;
            n |= ((b[0] & 0x7f) as u64) << shift;
            if b[0] & 0x80 == 0 {
                break;
            }
            shift += 7;
            if shift > 63 {
                return Err(Error::data("bad string length in a ClickHouse row"));
            }
        }
        let mut v = Vec::new();
        r.take(n).read_to_end(&mut v).map_err(bad)?;
        if v.len() as u64 != n {
            return Err(Error::data("a ClickHouse row ends inside a string"));
        }
        Ok(v)
    };
    Ok(match ty {
        ChType::Int64 => Value::Integer(le!(i64, 8)),
        ChType::Int32 => Value::Integer(le!(i32, 4) as i64),
        ChType::Int16 => Value::Integer(le!(i16, 2) as i64),
        ChType::UInt32 => Value::Integer(le!(u32, 4) as i64),
        ChType::Bool => Value::Integer(le!(u8, 1) as i64),
        ChType::Float64 => Value::Real(f64::from_bits(le!(u64, 8))),
        ChType::Float32 => Value::Real(f32::from_bits(le!(u32, 4)) as f64),
        ChType::Decimal(p, s) => Value::Text(format_decimal(
            match p {
                0..=9 => le!(i32, 4) as i128,
                10..=18 => le!(i64, 8) as i128,
                _ => le!(i128, 16),
            },
            s,
        )),
        ChType::Text => Value::Text(
            String::from_utf8(string(r)?)
                .map_err(|_| Error::data("a ClickHouse String is not UTF-8"))?,
        ),
        ChType::Blob => Value::Blob(string(r)?),
        ChType::Any => {
            let text = string(r)?;
            serde_json::from_slice::<Value>(&text)
                .map_err(|e| Error::data(format!("a stored wire value does not decode: {e}")))?
        }
    })
}

/// One target table's layout.
#[derive(Clone)]
pub(super) struct Layout {
    pub(super) schema: Schema,
    pub(super) name: String,
    pub(super) types: Vec<ChType>,
    pub(super) key: Vec<usize>,
    pub(super) kind: SourceKind,
}

impl Layout {
    pub(super) fn new(schema: &Schema, kind: SourceKind) -> Layout {
        Layout {
            name: table_name(&schema.table),
            types: schema
                .columns
                .iter()
                .map(|c| column_type(c, kind))
                .collect(),
            key: schema.key_indices(),
            schema: schema.clone(),
            kind,
        }
    }

    pub(super) fn nullable(&self, i: usize) -> bool {
        !self.key.contains(&i)
    }

    /// Each data column's (name, ClickHouse type) as the table must have it.
    pub(super) fn expected_columns(&self) -> Vec<(String, String)> {
        self.schema
            .columns
            .iter()
            .enumerate()
            .map(|(i, c)| {
                let t = self.types[i].sql();
                (
                    c.name.clone(),
                    if self.nullable(i) {
                        format!("Nullable({t})")
                    } else {
                        t
                    },
                )
            })
            .collect()
    }

    pub(super) fn column_defs(&self) -> Vec<String> {
        self.schema
            .columns
            .iter()
            .enumerate()
            .map(|(i, c)| {
                let t = self.types[i].sql();
                format!(
                    "{} {}",
                    qi(&c.name),
                    if self.nullable(i) {
                        format!("Nullable({t})")
                    } else {
                        t
                    }
                )
            })
            .collect()
    }

    pub(super) fn encode_row(
        &self,
        out: &mut Vec<u8>,
        row: &Row,
        seq: Option<Sequence>,
    ) -> Result<()> {
        for (i, v) in row.iter().enumerate() {
            encode_value(out, self.types[i], self.nullable(i), v).map_err(|e| {
                let at = seq.map_or("snapshot row".to_string(), |s| format!("event {s}"));
                Error::data(format!(
                    "{at}, table {:?}, column {:?}: {e}",
                    self.schema.table, self.schema.columns[i].name
                ))
            })?;
        }
        Ok(())
    }
}
