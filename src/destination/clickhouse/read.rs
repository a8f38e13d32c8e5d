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
/// as their digits, floats from their bits, strings from their bytes; a
/// type without such a spelling gives `None` (its key is read through
/// `format`).
fn key_literal(ty: ChType, v: &Value) -> Result<Option<String>> {
    let mut enc = Vec::new();
    encode_value(&mut enc, ty, false, v).map_err(Error::data)?;
    Ok(match (ty, v) {
        (
            ChType::Int64 | ChType::Int32 | ChType::Int16 | ChType::UInt32 | ChType::Bool,
            Value::Integer(i),
        ) => Some(format!("toInt64('{i}')")),
        (ChType::Float64, _) => Some(format!("reinterpretAsFloat64({})", bytes_literal(&enc))),
        (ChType::Float32, _) => Some(format!("reinterpretAsFloat32({})", bytes_literal(&enc))),
        (ChType::Text | ChType::Blob | ChType::Any, _) => {
            // After the length: the bytes.
            let mut r: &[u8] = &enc;
            let n = read_leb128(&mut r)? as usize;
            Some(bytes_literal(&r[..n]))
        }
        _ => None,
    })
}

impl ClickHouse {
    /// The current rows of a table at the given keys (each with its values
    /// in key order), for filling what changes by key alone did not carry:
    /// the `__current` view's rows (replacing), or each key's newest row
    /// unless it is a delete or truncate (history). A key without a row is
    /// left out.
    pub(super) fn rows_at_keys(
        &self,
        l: &Layout,
        keys: &[(Vec<u8>, Vec<Value>)],
    ) -> Result<Vec<Row>> {
        let db = qi(&self.cfg.database);
        let cols: Vec<String> = l.schema.columns.iter().map(|c| qi(&c.name)).collect();
        let names: Vec<String> = l
            .key
            .iter()
            .map(|&i| qi(&l.schema.columns[i].name))
            .collect();
        let tuple = if names.len() == 1 {
            names[0].clone()
        } else {
            format!("({})", names.join(", "))
        };
        let mut out = Vec::new();
        for chunk in keys.chunks(256) {
            let mut alternatives = Vec::new();
            let mut typed = false;
            for (_, vals) in chunk {
                let mut eqs = Vec::new();
                for ((&i, v), n) in l.key.iter().zip(vals).zip(&names) {
                    match key_literal(l.types[i], v)? {
                        Some(lit) => eqs.push(format!("{n} = {lit}")),
                        None => typed = true,
                    }
                }
                alternatives.push(format!("({})", eqs.join(" AND ")));
            }
            let pred = if typed {
                // Typed key columns (servers with typed columns, which have
                // `format`): the keys as RowBinary, read by the server.
                let structure: Vec<String> = (l.key.iter().zip(&names))
                    .map(|(&i, n)| format!("{n} {}", l.types[i].sql()))
                    .collect();
                let data: Vec<u8> = chunk
                    .iter()
                    .flat_map(|(kb, _)| kb.iter().copied())
                    .collect();
                format!(
                    "{tuple} IN (SELECT * FROM format(RowBinary, {}, {}))",
                    bytes_literal(structure.join(", ").as_bytes()),
                    bytes_literal(&data)
                )
            } else {
                alternatives.join(" OR ")
            };
            let sql = match self.engine {
                Engine::Replacing => format!(
                    "SELECT {} FROM {db}.{} WHERE {pred} FORMAT RowBinary",
                    cols.join(", "),
                    qi(&format!("{}__current", l.name))
                ),
                Engine::History => format!(
                    "SELECT {}, `cdc_operation` FROM {db}.{} WHERE {pred} ORDER BY `cdc_lsn` DESC, `cdc_tx_ordinal` DESC LIMIT 1 BY {} FORMAT RowBinary",
                    cols.join(", "),
                    qi(&l.name),
                    names.join(", ")
                ),
            };
            let reply = self.query(&sql, None, Timeout::Insert)?;
            let mut r: &[u8] = &reply;
            while !r.is_empty() {
                let mut row = Vec::with_capacity(l.types.len());
                for (i, ty) in l.types.iter().enumerate() {
                    row.push(decode_value(&mut r, *ty, l.nullable(i))?);
                }
                if self.engine == Engine::History {
                    let op = decode_value(&mut r, ChType::Text, false)?;
                    if !matches!(&op, Value::Text(s) if s == "insert" || s == "update") {
                        continue;
                    }
                }
                out.push(row);
            }
        }
        Ok(out)
    }
}
