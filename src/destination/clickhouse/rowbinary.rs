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
    let (neg, all) = scaled_digits(s, precision, scale)?;
    let v: i128 = if all.is_empty() {
        0
    } else {
        all.parse().map_err(|_| format!("{s:?} is out of range"))?
    };
    Ok(if neg { -v } else { v })
}

/// The digits of a decimal text scaled to exactly `scale` decimals, with
/// its sign, checked as [`decimal_scaled`] checks them.
fn scaled_digits(s: &str, precision: u8, scale: u8) -> std::result::Result<(bool, String), String> {
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
    let all = all.trim_start_matches('0').to_string();
    if all.len() > precision as usize {
        return Err(format!("{s:?} has more than {precision} digits"));
    }
    Ok((neg, all))
}

/// A decimal text as a `Decimal256` of `scale` decimals: 32 bytes,
/// little-endian two's complement (at most 76 digits, below 2^255).
pub(super) fn decimal256_scaled(
    s: &str,
    precision: u8,
    scale: u8,
) -> std::result::Result<[u8; 32], String> {
    let (neg, digits) = scaled_digits(s, precision, scale)?;
    // Four 64-bit limbs, least significant first.
    let mut limbs = [0u64; 4];
    for d in digits.bytes() {
        let mut carry = (d - b'0') as u128;
        for l in limbs.iter_mut() {
            let v = *l as u128 * 10 + carry;
            *l = v as u64;
            carry = v >> 64;
        }
    }
    if neg {
        // Two's complement: invert, add one.
        let mut carry = 1u128;
        for l in limbs.iter_mut() {
            let v = (!*l) as u128 + carry;
            *l = v as u64;
            carry = v >> 64;
        }
    }
    let mut out = [0u8; 32];
    for (k, l) in limbs.iter().enumerate() {
        out[k * 8..k * 8 + 8].copy_from_slice(&l.to_le_bytes());
    }
    Ok(out)
}

/// A `Decimal256`'s text with `scale` decimals.
pub(super) fn format_decimal256(b: [u8; 32], scale: u8) -> String {
    let mut limbs = [0u64; 4];
    for (k, l) in limbs.iter_mut().enumerate() {
        *l = u64::from_le_bytes(b[k * 8..k * 8 + 8].try_into().expect("8 bytes"));
    }
    let neg = limbs[3] >> 63 == 1;
    if neg {
        let mut carry = 1u128;
        for l in limbs.iter_mut() {
            let v = (!*l) as u128 + carry;
            *l = v as u64;
            carry = v >> 64;
        }
    }
    // Divide by 10^19 repeatedly: 19 digits a step.
    const STEP: u128 = 10_000_000_000_000_000_000;
    let mut parts = Vec::new();
    while limbs.iter().any(|&l| l != 0) {
        let mut rem = 0u128;
        for l in limbs.iter_mut().rev() {
            let v = (rem << 64) | *l as u128;
            *l = (v / STEP) as u64;
            rem = v % STEP;
        }
        parts.push(rem as u64);
    }
    let mut digits = match parts.pop() {
        None => "0".to_string(),
        Some(top) => top.to_string(),
    };
    for p in parts.iter().rev() {
        digits.push_str(&format!("{p:019}"));
    }
    with_point(neg, digits, scale)
}

pub(super) fn format_decimal(v: i128, scale: u8) -> String {
    with_point(v < 0, v.unsigned_abs().to_string(), scale)
}

/// A decimal's text from its sign and its digits scaled by `scale`.
fn with_point(neg: bool, digits: String, scale: u8) -> String {
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
        return Err(match ty {
            ChType::Array(_) => "NULL in an Array column (ClickHouse has no Nullable(Array); the column was NOT NULL at the source when the table was made, or the target URL had arrays=empty-for-null, which holds a NULL as [])".into(),
            _ => "NULL in a key column".into(),
        });
    }
    if v.is_unchanged() {
        return Err(
            "an unchanged value has no value to store (it must be filled from the stored row first)"
                .into(),
        );
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
        (ChType::Decimal(p, s), Value::Text(t)) if p > 38 => {
            // Decimal256: 32 bytes, little-endian two's complement.
            out.extend(decimal256_scaled(t, p, s)?)
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
        (ChType::BoolNative, Value::Integer(i)) if *i == 0 || *i == 1 => out.push(*i as u8),
        (ChType::DateTime64 { zoned, .. }, Value::Text(t)) => {
            out.extend(pgtext::parse_timestamp(t, zoned)?.to_le_bytes())
        }
        (ChType::Date32, Value::Text(t)) => out.extend(pgtext::parse_date(t)?.to_le_bytes()),
        (ChType::Uuid, Value::Text(t)) => {
            // Two 64-bit halves, each little-endian.
            let b = pgtext::parse_uuid(t)?;
            out.extend(b[..8].iter().rev());
            out.extend(b[8..].iter().rev());
        }
        (ChType::Array(e), Value::Text(t)) => {
            let elements = pgtext::parse_array(t)?;
            leb128(out, elements.len() as u64);
            for el in &elements {
                match el {
                    None => out.push(1),
                    Some(s) => {
                        out.push(0);
                        encode_element(out, e, s)
                            .map_err(|why| format!("array element {s:?}: {why}"))?;
                    }
                }
            }
        }
        _ => return Err(wrong()),
    }
    Ok(())
}

/// One array element, from its PostgreSQL text.
fn encode_element(out: &mut Vec<u8>, e: Elem, s: &str) -> std::result::Result<(), String> {
    let v = match e {
        Elem::Int16 | Elem::Int32 | Elem::Int64 => Value::Integer(
            s.parse()
                .map_err(|_| format!("{s:?} is not a 64-bit integer"))?,
        ),
        Elem::Float32 | Elem::Float64 => {
            let x = if e == Elem::Float32 {
                s.parse::<f32>().map(f64::from)
            } else {
                s.parse::<f64>()
            }
            .map_err(|_| format!("{s:?} is not a number"))?;
            if !x.is_finite() {
                return Err(format!(
                    "{s} cannot be carried (only finite floats can, as for REAL values)"
                ));
            }
            Value::Real(x)
        }
        Elem::Bool => match s {
            "t" => Value::Integer(1),
            "f" => Value::Integer(0),
            _ => return Err(format!("{s:?} is not a boolean")),
        },
        _ => Value::Text(s.to_string()),
    };
    encode_value(out, e.scalar(), false, &v)
}

/// An unsigned LEB128 number (a string's or an array's length).
pub(super) fn read_leb128(r: &mut dyn Read) -> Result<u64> {
    let mut n = 0u64;
    let mut shift = 0;
    loop {
        let mut b = [0u8; 1];
        r.read_exact(&mut b)
            .map_err(|e| Error::io("cannot read a ClickHouse row", e))?;
        n |= ((b[0] & 0x7f) as u64) << shift;
        if b[0] & 0x80 == 0 {
            return Ok(n);
        }
        shift += 7;
        if shift > 63 {
            return Err(Error::data("bad length in a ClickHouse row"));
        }
    }
}

/// A key value's RowBinary, with a REAL zero's sign dropped: ClickHouse
/// finds and merges `-0` and `+0` as one key, and so does every map of
/// keys here (the old rows read for changes by key alone).
pub(super) fn encode_key_value(
    out: &mut Vec<u8>,
    ty: ChType,
    v: &Value,
) -> std::result::Result<(), String> {
    match v {
        Value::Real(x) if *x == 0.0 => encode_value(out, ty, false, &Value::Real(0.0)),
        _ => encode_value(out, ty, false, v),
    }
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
        let n = read_leb128(r)?;
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
        ChType::Decimal(p, s) if p > 38 => {
            let mut b = [0u8; 32];
            r.read_exact(&mut b).map_err(bad)?;
            Value::Text(format_decimal256(b, s))
        }
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
        ChType::BoolNative => Value::Integer(le!(u8, 1) as i64),
        ChType::DateTime64 { zoned, .. } => {
            Value::Text(pgtext::format_timestamp(le!(i64, 8), zoned))
        }
        ChType::Date32 => Value::Text(pgtext::format_date(le!(i32, 4))),
        ChType::Uuid => {
            let mut b = [0u8; 16];
            r.read_exact(&mut b).map_err(bad)?;
            b[..8].reverse();
            b[8..].reverse();
            Value::Text(pgtext::format_uuid(&b))
        }
        ChType::Array(e) => {
            let n = read_leb128(r)?;
            let mut elements = Vec::new();
            for _ in 0..n {
                elements.push(match decode_value(r, e.scalar(), true)? {
                    Value::Null => None,
                    Value::Integer(i) if e == Elem::Bool => {
                        Some(if i == 1 { "t" } else { "f" }.to_string())
                    }
                    Value::Integer(i) => Some(i.to_string()),
                    Value::Real(x) => Some(pgtext::format_float(x, e == Elem::Float32)),
                    Value::Text(t) => Some(t),
                    Value::Blob(_) | Value::Unchanged => {
                        return Err(Error::data("a bytes array element"))
                    }
                });
            }
            Value::Text(pgtext::format_array(&elements))
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
    /// `arrays=empty-for-null`: a NULL in an `Array` column is written as
    /// `[]` ([`Layout::arrays_for_nullable`]).
    pub(super) empty_for_null: bool,
}

impl Layout {
    /// The layout a schema gets with or without the typed mappings
    /// (`native`: `ClickHouse::native_types`), before any table
    /// is looked at ([`Layout::keep_earlier_types`]). A key column is never
    /// an array (arrays stay `String` there, as keys sort as their text).
    pub(super) fn with_typing(schema: &Schema, kind: SourceKind, native: bool) -> Layout {
        let key = schema.key_indices();
        Layout {
            name: table_name(&schema.table),
            types: schema
                .columns
                .iter()
                .enumerate()
                .map(|(i, c)| match column_type_with(c, kind, native) {
                    ChType::Array(_) if key.contains(&i) => ChType::Text,
                    t => t,
                })
                .collect(),
            key,
            schema: schema.clone(),
            kind,
            empty_for_null: false,
        }
    }

    /// `arrays=empty-for-null` (with the typed mappings): an array column
    /// that may be NULL gets the `Array` a NOT NULL one gets (and
    /// [`Layout::empty_for_null`], set apart, writes a NULL into it as
    /// `[]`: the one place a NULL and an empty array meet; docs/CLICKHOUSE.md,
    /// Types). Key columns stay as they are.
    pub(super) fn arrays_for_nullable(&mut self) {
        for (i, c) in self.schema.columns.iter().enumerate() {
            if !c.nullable || self.key.contains(&i) || self.types[i] != ChType::Text {
                continue;
            }
            let mut not_null = c.clone();
            not_null.nullable = false;
            if let a @ ChType::Array(_) = column_type_with(&not_null, self.kind, true) {
                self.types[i] = a;
            }
        }
    }

    /// With `types=text` on a server that has the types: the columns a
    /// table already has typed (`native`, as a URL without the option
    /// makes them) keep their types; text written into them would not read.
    pub(super) fn keep_typed_columns(&mut self, native: &[ChType], have: &[(String, String)]) {
        for (i, c) in self.schema.columns.iter().enumerate() {
            if native[i] != self.types[i]
                && stored_bare(have, &c.name).is_some_and(|b| b == native[i].sql())
            {
                self.types[i] = native[i];
            }
        }
    }

    /// A column that the table (`have`: its columns and types) holds with
    /// the type servers without the typed mappings give it (`String`, or
    /// `UInt8` for a boolean: a table made by an earlier MoonCDC, or by
    /// hand to keep a column as text) keeps that type; a timestamp column
    /// keeps its time zone. Nothing is converted behind the user's back
    /// (docs/CLICKHOUSE.md, Types).
    pub(super) fn keep_earlier_types(&mut self, have: &[(String, String)]) {
        self.keep_text_decimals(have);
        for (i, c) in self.schema.columns.iter().enumerate() {
            let Some(bare) = stored_bare(have, &c.name) else {
                continue;
            };
            if self.types[i] == ChType::Text && !self.key.contains(&i) {
                // An array column whose NOT NULL the source dropped stays an
                // Array (the same one were it still NOT NULL): ClickHouse
                // cannot make its values text that reads as the source's,
                // and a NULL then fails naming the column.
                let mut not_null = c.clone();
                not_null.nullable = false;
                let array = column_type_with(&not_null, self.kind, true);
                if matches!(array, ChType::Array(_)) && bare == array.sql() {
                    self.types[i] = array;
                }
                continue;
            }
            // Only a typed mapping has an earlier type (a `Decimal256` too:
            // wide decimals were `String` before).
            if self.types[i] == column_type(c, self.kind) {
                continue;
            }
            let earlier = column_type(c, self.kind);
            if bare == earlier.sql() {
                self.types[i] = earlier;
            } else if let ChType::DateTime64 { zoned, .. } = self.types[i] {
                for utc in [false, true] {
                    if bare == (ChType::DateTime64 { zoned, utc }).sql() {
                        self.types[i] = ChType::DateTime64 { zoned, utc };
                    }
                }
            }
        }
    }

    /// A decimal column (not a key's) that the table holds as `String`,
    /// made so by hand to carry the `NaN` a `Decimal` cannot hold, keeps
    /// holding the source's text (docs/CLICKHOUSE.md, Types).
    pub(super) fn keep_text_decimals(&mut self, have: &[(String, String)]) {
        for (i, c) in self.schema.columns.iter().enumerate() {
            if matches!(self.types[i], ChType::Decimal(..))
                && !self.key.contains(&i)
                && stored_bare(have, &c.name) == Some("String")
            {
                self.types[i] = ChType::Text;
            }
        }
    }

    /// [`Layout::keep_earlier_types`] from the layout before a schema
    /// change (columns followed through renames).
    pub(super) fn keep_types_of(&mut self, old: &Layout, c: &SchemaChange) {
        let have: Vec<(String, String)> = c
            .sources(&old.schema)
            .iter()
            .enumerate()
            .filter_map(|(j, src)| {
                src.map(|i| (self.schema.columns[j].name.clone(), old.types[i].sql()))
            })
            .collect();
        self.keep_earlier_types(&have);
    }

    /// Whether column `i` is `Nullable`: every column but the key's and
    /// arrays (ClickHouse has no `Nullable(Array(…))`; only columns the
    /// source declares NOT NULL are arrays, unless `arrays=empty-for-null`).
    pub(super) fn nullable(&self, i: usize) -> bool {
        !self.key.contains(&i) && !matches!(self.types[i], ChType::Array(_))
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
            if self.empty_for_null && v.is_null() && matches!(self.types[i], ChType::Array(_)) {
                // An empty array: its length, 0.
                out.push(0);
                continue;
            }
            encode_value(out, self.types[i], self.nullable(i), v).map_err(|e| {
                let at = seq.map_or("snapshot row".to_string(), |s| format!("event {s}"));
                // A typed column refuses what its type cannot hold; text
                // columns take every value.
                let way_out = match self.types[i] {
                    t if t.is_native() => format!(
                        "; nothing of it was written and the cursor did not move: to carry such values, keep the column as text (make the table again from a new snapshot with types=text in the target URL, or create ClickHouse table {} yourself with a String column there first: docs/CLICKHOUSE.md, Types)",
                        self.name
                    ),
                    // Every server and `types=text` make these `Decimal`:
                    // only a column made by hand holds a NaN.
                    ChType::Decimal(..) => format!(
                        "; nothing of it was written and the cursor did not move: a ClickHouse Decimal holds no NaN and no more digits than its type; to carry such values, create ClickHouse table {} yourself with a String column there and give the table a new snapshot or a backfill (docs/CLICKHOUSE.md, Types)",
                        self.name
                    ),
                    _ => String::new(),
                };
                Error::data(format!(
                    "{at}, table {:?}, column {:?} ({}): {e}{way_out}",
                    self.schema.table,
                    self.schema.columns[i].name,
                    self.types[i].sql()
                ))
            })?;
        }
        Ok(())
    }
}

/// The type a table stores column `name` in, without `Nullable(…)`.
fn stored_bare<'a>(have: &'a [(String, String)], name: &str) -> Option<&'a str> {
    let (_, t) = have.iter().find(|(n, _)| n == name)?;
    Some(
        t.strip_prefix("Nullable(")
            .and_then(|r| r.strip_suffix(')'))
            .unwrap_or(t),
    )
}
