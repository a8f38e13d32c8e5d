//! Reading a table's current rows in key order, for the audit.

use super::*;

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

/// A key value as an SQL expression of its column's type, exact: integers
/// as their digits, floats from their bits, strings from their bytes, any
/// other type from its RowBinary through the `format` table function
/// (servers with typed columns have it).
fn key_literal(ty: ChType, v: &Value) -> Result<String> {
    let mut enc = Vec::new();
    encode_value(&mut enc, ty, false, v).map_err(Error::data)?;
    Ok(match (ty, v) {
        (
            ChType::Int64 | ChType::Int32 | ChType::Int16 | ChType::UInt32 | ChType::Bool,
            Value::Integer(i),
        ) => {
            format!("toInt64('{i}')")
        }
        (ChType::Float64, _) => format!("reinterpretAsFloat64({})", bytes_literal(&enc)),
        (ChType::Float32, _) => format!("reinterpretAsFloat32({})", bytes_literal(&enc)),
        (ChType::Text | ChType::Blob | ChType::Any, _) => {
            // After the length: the bytes.
            let mut r: &[u8] = &enc;
            let n = read_leb128(&mut r)? as usize;
            bytes_literal(&r[..n])
        }
        _ => format!(
            "(SELECT * FROM format(RowBinary, {}, {}))",
            bytes_literal(format!("v {}", ty.sql()).as_bytes()),
            bytes_literal(&enc)
        ),
    })
}

/// A `UInt64` of a RowBinary reply.
fn read_u64(r: &mut &[u8]) -> Result<u64> {
    if r.len() < 8 {
        return Err(Error::data("a ClickHouse reply ends inside a value"));
    }
    let (v, rest) = r.split_at(8);
    *r = rest;
    Ok(u64::from_le_bytes(v.try_into().expect("8 bytes")))
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
        let names: Vec<String> = l
            .key
            .iter()
            .map(|&i| qi(&l.schema.columns[i].name))
            .collect();
        let mut out = Vec::new();
        for chunk in keys.chunks(256) {
            let mut alternatives = Vec::new();
            for (_, vals, seq) in chunk {
                let mut eqs = Vec::new();
                for ((&i, v), n) in l.key.iter().zip(vals).zip(&names) {
                    eqs.push(format!("{n} = {}", key_literal(l.types[i], v)?));
                }
                eqs.push(match self.engine {
                    _ if !bounded => "1".to_string(),
                    Engine::Replacing => format!("`_etl_version` <= {}", version(l.kind, *seq)?),
                    Engine::History => format!(
                        "(`cdc_lsn` < {hi} OR (`cdc_lsn` = {hi} AND `cdc_tx_ordinal` <= {lo}))",
                        hi = (*seq >> 64) as u64,
                        lo = *seq as u64
                    ),
                });
                alternatives.push(format!("({})", eqs.join(" AND ")));
            }
            let (meta, order) = match self.engine {
                Engine::Replacing => ("`_etl_deleted` = 1, `_etl_version`", "`_etl_version` DESC"),
                Engine::History => (
                    "`cdc_operation` NOT IN ('insert', 'update'), `cdc_lsn`, `cdc_tx_ordinal`",
                    "`cdc_lsn` DESC, `cdc_tx_ordinal` DESC",
                ),
            };
            let sql = format!(
                "SELECT {}, {meta} FROM {db}.{} WHERE {} ORDER BY {order} LIMIT 1 BY {} FORMAT RowBinary",
                cols.join(", "),
                qi(&l.name),
                alternatives.join(" OR "),
                names.join(", ")
            );
            let reply = self.query(&sql, None, Timeout::Insert)?;
            let mut r: &[u8] = &reply;
            while !r.is_empty() {
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
                // Which asked key this row is of.
                let kb = {
                    let mut kb = Vec::new();
                    for &i in &l.key {
                        encode_value(&mut kb, l.types[i], false, &row[i]).map_err(Error::data)?;
                    }
                    kb
                };
                let bound = chunk
                    .iter()
                    .find(|(k, _, _)| *k == kb)
                    .map(|(_, _, s)| *s)
                    .ok_or_else(|| {
                        Error::data("ClickHouse answered with a key that was not asked for")
                    })?;
                let own = match self.engine {
                    Engine::Replacing => at == version(l.kind, bound)? as u128,
                    Engine::History => at == bound,
                };
                out.push(Found { row, gone, own, at });
            }
        }
        Ok(out)
    }
}
