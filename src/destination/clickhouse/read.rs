//! Reading a table's current rows in key order, for the audit.

use super::{
    decimal_scaled, decode_value, encode_key_value, encode_value, format_decimal, qi, read_leb128,
    table_name, version, ChType, ClickHouse, Engine, Layout, Timeout, HISTORY_META, REPLACING_META,
};
use crate::error::{Error, Result};
use crate::wire::{Row, Schema, Sequence, SourceKind, Value};
use std::collections::HashMap;
use std::io::{BufRead, Read};

impl ClickHouse {
    /// The data columns of the table a schema maps to; `None` when it does not exist.
    pub fn table_columns(&self, schema: &Schema) -> Result<Option<Vec<String>>> {
        self.check_recorded(schema)?;
        let have = self.columns_of(&table_name(&schema.table))?;
        if have.is_empty() {
            return Ok(None);
        }
        // Only the engine's own columns are left out (a source column may
        // well be named `cdc_at` or `_etl_batch`); no source column has
        // their exact names (`types::refuse_meta_names`).
        let meta: &[&str] = if self
            .replacing_table(&table_name(&schema.table))?
            .unwrap_or(true)
        {
            &REPLACING_META
        } else {
            &HISTORY_META
        };
        Ok(Some(
            have.into_iter()
                .filter(|c| !meta.contains(&c.as_str()))
                .collect(),
        ))
    }

    /// Rows of a table's current state in key order, for an audit; `None`
    /// when the table does not exist.
    pub fn current_rows(&self, schema: &Schema, kind: SourceKind) -> Result<Option<ChRows>> {
        self.check_recorded(schema)?;
        let l = self.layout(schema, kind)?;
        let have = self.columns_of(&l.name)?;
        if have.is_empty() {
            return Ok(None);
        }
        if self.replacing_table(&l.name)? == Some(false) {
            return Err(Error::usage(
                "an audit compares current state: audit tables made with --engine replacing",
            ));
        }
        if let Some(&i) = l.key.iter().find(|&&i| l.types[i] == ChType::Any) {
            return Err(Error::state(format!(
                "table {:?} cannot be audited in key order: its key column {:?} has no type, so ClickHouse holds it as text that sorts differently (give key columns a type)",
                schema.table, schema.columns[i].name
            )));
        }
        let cols: Vec<String> = schema.columns.iter().map(|c| qi(&c.name)).collect();
        // In the source's key order (docs/FORMAT.md §9): a decimal key, which the
        // source sends as text, sorts as that text (bytewise), not as a
        // number. ClickHouse's text of a decimal is the source's, or that
        // with trailing fraction zeros dropped (modern servers), which
        // sorts the same.
        let keys: Vec<String> = l
            .key
            .iter()
            .map(|&i| match l.types[i] {
                // A UUID's text sorts as its bytes; ClickHouse orders
                // UUIDs by their two halves' numbers, which is not that.
                ChType::Decimal(..) | ChType::Uuid => {
                    format!("toString({})", qi(&schema.columns[i].name))
                }
                _ => qi(&schema.columns[i].name),
            })
            .collect();
        let view = format!(
            "{}.{}",
            qi(&self.cfg.database),
            qi(&format!("{}__current", l.name))
        );
        let resp = self.send(
            &format!(
                "SELECT {} FROM {view} ORDER BY {} FORMAT RowBinary",
                cols.join(", "),
                keys.join(", ")
            ),
            None,
            Timeout::Insert,
        )?;
        Ok(Some(ChRows {
            r: std::io::BufReader::with_capacity(1 << 16, resp),
            layout: l,
        }))
    }
}

/// A table's rows streamed from a RowBinary reply.
pub struct ChRows {
    pub(super) r: std::io::BufReader<reqwest::blocking::Response>,
    pub(super) layout: Layout,
}

impl ChRows {
    pub fn next_row(&mut self) -> Result<Option<Row>> {
        if self
            .r
            .fill_buf()
            .map_err(|e| Error::io("cannot read the ClickHouse reply", e))?
            .is_empty()
        {
            return Ok(None);
        }
        let mut row = Vec::with_capacity(self.layout.types.len());
        for (i, ty) in self.layout.types.iter().enumerate() {
            row.push(decode_value(&mut self.r, *ty, self.layout.nullable(i))?);
        }
        Ok(Some(row))
    }
}

/// A ClickHouse string literal of any bytes, each as `\xHH`.
fn bytes_literal(b: &[u8]) -> String {
    let mut s = String::with_capacity(2 + 4 * b.len());
    s.push('\'');
    for x in b {
        s.push_str(&format!("\\x{x:02x}"));
    }
    s.push('\'');
    s
}

/// Whether a key column's values have an exact literal ([`key_literal`]);
/// others are read through `format`, which servers with only these types
/// (18.16, say) lack.
fn has_literal(ty: ChType) -> bool {
    matches!(ty, ChType::Decimal(p, _) if p <= 38)
        || matches!(
            ty,
            ChType::Int64
                | ChType::Int32
                | ChType::Int16
                | ChType::UInt32
                | ChType::Bool
                | ChType::Float64
                | ChType::Float32
                | ChType::Text
                | ChType::Blob
                | ChType::Any
        )
}

/// A key value as a literal of its column's type, exact: integers as their
/// digits, floats from their bits, strings from their bytes (for the types
/// [`has_literal`] takes).
fn key_literal(ty: ChType, v: &Value) -> Result<String> {
    let mut enc = Vec::new();
    encode_value(&mut enc, ty, false, v).map_err(Error::data)?;
    let integer = matches!(
        ty,
        ChType::Int64 | ChType::Int32 | ChType::Int16 | ChType::UInt32 | ChType::Bool
    );
    Ok(match (ty, v) {
        (_, Value::Integer(i)) if integer && *i == i64::MIN => format!("toInt64('{i}')"),
        (_, Value::Integer(i)) if integer => i.to_string(),
        (ChType::Float64, _) => format!("reinterpretAsFloat64({})", bytes_literal(&enc)),
        (ChType::Float32, _) => format!("reinterpretAsFloat32({})", bytes_literal(&enc)),
        // A decimal from its digits at the column's scale: the server
        // parses them exactly (no float between).
        (ChType::Decimal(p, s), Value::Text(t)) => {
            let bits = match p {
                0..=9 => 32,
                10..=18 => 64,
                _ => 128,
            };
            let scaled = decimal_scaled(t, p, s).map_err(Error::data)?;
            format!("toDecimal{bits}('{}', {s})", format_decimal(scaled, s))
        }
        _ => {
            // A string: after the length, the bytes.
            let mut r: &[u8] = &enc;
            let n = read_leb128(&mut r)? as usize;
            bytes_literal(&r[..n])
        }
    })
}

/// A key value of any type as a scalar subquery reading its RowBinary
/// through `format` (servers with typed columns have it).
fn scalar_literal(ty: ChType, v: &Value) -> Result<String> {
    let mut enc = Vec::new();
    encode_value(&mut enc, ty, false, v).map_err(Error::data)?;
    Ok(format!(
        "(SELECT * FROM format(RowBinary, {}, {}))",
        bytes_literal(format!("v {}", ty.sql()).as_bytes()),
        bytes_literal(&enc)
    ))
}

/// A key's values as ClickHouse's `IN` must be asked for them: as they are,
/// and, where a REAL is zero, with that zero's sign turned too (`IN` tells
/// `-0` from `+0`, which the key maps and ClickHouse's merges do not).
fn signed_zeros(vals: &[Value]) -> Vec<Vec<Value>> {
    let mut out = vec![vals.to_vec()];
    if vals
        .iter()
        .any(|v| matches!(v, Value::Real(x) if *x == 0.0))
    {
        out.push(
            (vals.iter())
                .map(|v| match v {
                    Value::Real(x) if *x == 0.0 => Value::Real(-x),
                    v => v.clone(),
                })
                .collect(),
        );
    }
    out
}

/// One key as a member of an `IN` list of literals: its values (a tuple
/// for a key of several columns), and, where a REAL is zero, the same with
/// the other sign too (ClickHouse's `IN` tells -0 from +0, its merges do
/// not, and either may be held).
fn in_member(l: &Layout, vals: &[Value]) -> Result<String> {
    let mut m = String::new();
    for vals in signed_zeros(vals) {
        let lits = (l.key.iter().zip(&vals))
            .map(|(&i, v)| key_literal(l.types[i], v))
            .collect::<Result<Vec<_>>>()?;
        if !m.is_empty() {
            m.push_str(", ");
        }
        match lits.as_slice() {
            [one] => m.push_str(one),
            more => m.push_str(&format!("({})", more.join(", "))),
        }
    }
    Ok(m)
}

/// Keys of typed columns (servers with typed columns, which have
/// `format`) as a set the server reads from their RowBinary.
fn typed_key_set(
    l: &Layout,
    names: &[String],
    chunk: &[(Vec<u8>, Vec<Value>, Sequence)],
) -> Result<String> {
    let structure: Vec<String> = (l.key.iter().zip(names))
        .map(|(&i, n)| format!("{n} {}", l.types[i].sql()))
        .collect();
    let mut data: Vec<u8> = Vec::new();
    for (_, vals, _) in chunk {
        for vals in signed_zeros(vals) {
            for (&i, v) in l.key.iter().zip(&vals) {
                encode_value(&mut data, l.types[i], false, v).map_err(Error::data)?;
            }
        }
    }
    Ok(format!(
        "SELECT * FROM format(RowBinary, {}, {})",
        bytes_literal(structure.join(", ").as_bytes()),
        bytes_literal(&data)
    ))
}

/// A history's read: each key with its own bound (its rows up to the
/// change's position), one condition a key.
fn history_bounds(
    l: &Layout,
    names: &[String],
    chunk: &[(Vec<u8>, Vec<Value>, Sequence)],
) -> Result<Vec<String>> {
    let mut per_key = Vec::new();
    for (_, vals, seq) in chunk {
        let mut eqs = Vec::new();
        for ((&i, v), n) in l.key.iter().zip(vals).zip(names) {
            let lit = if has_literal(l.types[i]) {
                key_literal(l.types[i], v)?
            } else {
                scalar_literal(l.types[i], v)?
            };
            eqs.push(format!("{n} = {lit}"));
        }
        eqs.push(format!(
            "(`cdc_lsn` < {hi} OR (`cdc_lsn` = {hi} AND `cdc_tx_ordinal` <= {lo}))",
            hi = (*seq >> 64) as u64,
            lo = *seq as u64
        ));
        per_key.push(format!("({})", eqs.join(" AND ")));
    }
    Ok(per_key)
}

/// A `UInt64` of a RowBinary reply.
fn read_u64(r: &mut dyn Read) -> Result<u64> {
    let mut b = [0; 8];
    r.read_exact(&mut b).map_err(|e| {
        Error::io(
            "cannot read the ClickHouse reply (it ends inside a value)",
            e,
        )
    })?;
    Ok(u64::from_le_bytes(b))
}

/// A row read for filling: the row, and whether it is gone (a deleted-row
/// marker, a delete or a truncate) or is the change's own (its version is
/// the bound's: written by an earlier try of the same batch).
pub(super) struct Found {
    pub(super) row: Row,
    pub(super) gone: bool,
    pub(super) own: bool,
    /// Its version (`replacing`) or position (`history`).
    pub(super) at: u128,
}

impl ClickHouse {
    /// The rows of a table at the given keys (each with its values in key
    /// order) as they were up to the change at `bound` (its sequence), for
    /// filling what changes by key alone did not carry: each key's newest
    /// row at a version not after the bound (rows an earlier try of the
    /// same batch wrote after it are not the change's old row); without
    /// `bounded`, each key's newest row. A key without one is left out.
    pub(super) fn rows_at_keys(
        &self,
        l: &Layout,
        keys: &[(Vec<u8>, Vec<Value>, Sequence)],
        bounded: bool,
    ) -> Result<Vec<Found>> {
        let db = qi(&self.cfg.database);
        let cols: Vec<String> = l.schema.columns.iter().map(|c| qi(&c.name)).collect();
        let names: Vec<String> = (l.key.iter())
            .map(|&i| qi(&l.schema.columns[i].name))
            .collect();
        let tuple = match names.as_slice() {
            [one] => one.clone(),
            more => format!("({})", more.join(", ")),
        };
        let typed = l.key.iter().any(|&i| !has_literal(l.types[i]));
        // A version or position of the scheme each engine writes.
        let at_of = |seq: Sequence| -> Result<u128> {
            Ok(match self.engine {
                Engine::Replacing => u128::from(version(l.kind, seq)?),
                Engine::History => seq,
            })
        };
        let mut out = Vec::new();
        let mut rest = keys;
        while !rest.is_empty() {
            // As many keys as fit a query well under the server's
            // max_query_size (256 KiB by default).
            let mut members = Vec::new();
            let (mut size, mut n) = (0, 0);
            for (kb, vals, _) in rest {
                if n > 0 && (size > 96 << 10 || n >= 8192) {
                    break;
                }
                let m = if typed {
                    String::new()
                } else {
                    in_member(l, vals)?
                };
                // A history's read repeats each key in its bound (a typed
                // one as a subquery of its RowBinary).
                let per_key = match self.engine {
                    Engine::History => vals.len() * (96 + 4 * kb.len()),
                    Engine::Replacing => 0,
                };
                // The key's part of the query: its literals, or its
                // RowBinary as `\xHH` (both signs of a zero REAL, so
                // twice at most).
                let own = if typed { 8 * kb.len() } else { m.len() };
                size += own + 2 + per_key;
                members.push(m);
                n += 1;
            }
            let (chunk, more) = rest.split_at(n);
            rest = more;
            let set = if typed {
                typed_key_set(l, &names, chunk)?
            } else {
                members.join(", ")
            };
            let bounds: HashMap<&[u8], u128> = (chunk.iter())
                .map(|(kb, _, seq)| Ok((kb.as_slice(), at_of(*seq)?)))
                .collect::<Result<_>>()?;
            let top = bounds.values().copied().max().unwrap_or(0);
            let sql = match self.engine {
                // Every version of the keys up to the last bound (a key has
                // a few until its parts merge); each key's is picked below.
                Engine::Replacing => format!(
                    "SELECT {}, `_etl_deleted` = 1, `_etl_version` FROM {db}.{} WHERE {tuple} IN ({set}){} FORMAT RowBinary",
                    cols.join(", "),
                    qi(&l.name),
                    if bounded { format!(" AND `_etl_version` <= {top}") } else { String::new() }
                ),
                // A history keeps every row: each key's newest up to its
                // own bound, in the server.
                Engine::History => {
                    let per_key = if bounded {
                        history_bounds(l, &names, chunk)?
                    } else {
                        Vec::new()
                    };
                    format!(
                        "SELECT {}, `cdc_operation` NOT IN ('insert', 'update'), `cdc_lsn`, `cdc_tx_ordinal` FROM {db}.{} \
                         WHERE {tuple} IN ({set}){} ORDER BY `cdc_lsn` DESC, `cdc_tx_ordinal` DESC LIMIT 1 BY {} FORMAT RowBinary",
                        cols.join(", "),
                        qi(&l.name),
                        if bounded { format!(" AND ({})", per_key.join(" OR ")) } else { String::new() },
                        names.join(", ")
                    )
                }
            };
            let reply = self.send(&sql, None, Timeout::Insert)?;
            out.extend(self.newest_within(l, reply, &bounds, bounded)?);
        }
        Ok(out)
    }

    /// The rows of a read's reply: each key's newest within its bound
    /// (`bounds`, when `bounded`), with whether it is gone and whether it
    /// is the change's own.
    fn newest_within(
        &self,
        l: &Layout,
        reply: reqwest::blocking::Response,
        bounds: &HashMap<&[u8], u128>,
        bounded: bool,
    ) -> Result<Vec<Found>> {
        // Decoded as it streams in: the reply is never held whole.
        let mut r = std::io::BufReader::with_capacity(1 << 16, reply);
        // Each key's newest row within its bound.
        let mut best: HashMap<Vec<u8>, Found> = HashMap::new();
        while !r
            .fill_buf()
            .map_err(|e| Error::io("cannot read the ClickHouse reply", e))?
            .is_empty()
        {
            let mut row = Vec::with_capacity(l.types.len());
            for (i, ty) in l.types.iter().enumerate() {
                row.push(decode_value(&mut r, *ty, l.nullable(i))?);
            }
            let gone = matches!(
                decode_value(&mut r, ChType::Bool, false)?,
                Value::Integer(1)
            );
            let at: u128 = match self.engine {
                Engine::Replacing => u128::from(read_u64(&mut r)?),
                Engine::History => {
                    let hi = read_u64(&mut r)?;
                    (u128::from(hi) << 64) | u128::from(read_u64(&mut r)?)
                }
            };
            let mut kb = Vec::new();
            for &i in &l.key {
                encode_key_value(&mut kb, l.types[i], &row[i]).map_err(Error::data)?;
            }
            let bound = *bounds.get(kb.as_slice()).ok_or_else(|| {
                Error::data("ClickHouse answered with a key that was not asked for")
            })?;
            if bounded && at > bound {
                continue;
            }
            if best.get(&kb).is_none_or(|b| b.at < at) {
                let own = at == bound;
                best.insert(kb, Found { row, gone, own, at });
            }
        }
        Ok(best.into_values().collect())
    }
}
