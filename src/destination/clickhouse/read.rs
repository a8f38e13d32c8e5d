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
