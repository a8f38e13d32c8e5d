//! Snapshot rows loaded through binary COPY, a table at a time, in chunks.

use super::*;
use crate::wire::Sequence;
use tokio_postgres::binary_copy::BinaryCopyInWriter;

/// A table's snapshot rows going into the target: straight into it with
/// binary COPY when every column is one of the native types, else into a
/// staging table of native types whose rows are then cast into it.
pub(super) struct Loader {
    writer: std::pin::Pin<Box<BinaryCopyInWriter>>,
    /// The INSERT … SELECT from staging, when staged.
    staged: Option<String>,
    /// Rows checked and waiting to be written (up to [`COPY_CHUNK`]), so the
    /// runtime is entered once per chunk, not per row.
    pub(super) rows: Vec<Row>,
    /// The stream's table and the target table, for messages.
    table: String,
    qname: String,
}

/// Snapshot rows written to the COPY in one go.
pub(super) const COPY_CHUNK: usize = 1024;

/// A value as a COPY field, borrowed (its class was checked by
/// [`check_row`]): no copy of text or bytes.
#[derive(Debug)]
pub(super) struct Field<'a>(&'a Value, Param);

impl ToSql for Field<'_> {
    fn to_sql(
        &self,
        ty: &Type,
        out: &mut bytes::BytesMut,
    ) -> std::result::Result<tokio_postgres::types::IsNull, Box<dyn std::error::Error + Sync + Send>>
    {
        match (self.0, self.1) {
            (Value::Null, _) => Ok(tokio_postgres::types::IsNull::Yes),
            (Value::Integer(i), Param::Bool) => (*i == 1).to_sql(ty, out),
            // Straight into an integer or smallint column: its own width,
            // refused out of range as the cast would be.
            (Value::Integer(i), _) if *ty == Type::INT4 => i32::try_from(*i)
                .map_err(|_| format!("integer {i} out of range for type integer"))?
                .to_sql(ty, out),
            (Value::Integer(i), _) if *ty == Type::INT2 => i16::try_from(*i)
                .map_err(|_| format!("integer {i} out of range for type smallint"))?
                .to_sql(ty, out),
            (Value::Integer(i), _) => i.to_sql(ty, out),
            (Value::Real(x), _) => x.to_sql(ty, out),
            (Value::Blob(b), _) => b.as_slice().to_sql(ty, out),
            (Value::Text(s), _) => s.as_str().to_sql(ty, out),
            (Value::Unchanged, _) => {
                Err("an unchanged value has no value to store (it must be filled from the stored row first)".into())
            }
        }
    }

    fn accepts(_: &Type) -> bool {
        true
    }

    tokio_postgres::types::to_sql_checked!();
}

/// Check a row's values against the table's columns (as [`params`] does).
pub(super) fn check_row(t: &Table, row: &Row, seq: Option<Sequence>) -> Result<()> {
    if row.len() != t.cols.len() {
        return Err(Error::data(format!(
            "a row of {} values for table {:?} of {} columns",
            row.len(),
            t.schema.table,
            t.cols.len()
        )));
    }
    let at = || seq.map_or("snapshot row".to_string(), |s| format!("event {s}"));
    for (c, v) in t.cols.iter().zip(row) {
        check_value(c, v, &t.schema.table, &at)?;
    }
    Ok(())
}

impl Loader {
    pub(super) async fn start(c: &Client, t: &Table) -> Result<Loader> {
        // The binary type a column takes straight from COPY, if it is one
        // whose wire form the values have (integers in their own width).
        let native = |col: &Col| match (col.param, col.sql_type.as_str()) {
            (Param::Int8, "bigint") => Some(Type::INT8),
            (Param::Int8, "integer") => Some(Type::INT4),
            (Param::Int8, "smallint") => Some(Type::INT2),
            (Param::Float8, "double precision") => Some(Type::FLOAT8),
            (Param::Bool, "boolean") => Some(Type::BOOL),
            (Param::Bytea, "bytea") => Some(Type::BYTEA),
            (Param::Text, "text") => Some(Type::TEXT),
            _ => None,
        };
        let direct: Option<Vec<Type>> = t.cols.iter().map(native).collect();
        let names: Vec<String> = t.cols.iter().map(|c| quote_ident(&c.name)).collect();
        let types: Vec<Type> = match &direct {
            Some(types) => types.clone(),
            None => t.cols.iter().map(|c| c.param.pg_type()).collect(),
        };
        let (into, staged) = if direct.is_some() {
            (format!("{} ({})", t.qname, names.join(", ")), None)
        } else {
            let defs: Vec<String> = t
                .cols
                .iter()
                .zip(&names)
                .map(|(c, n)| format!("{n} {}", c.param.pg_type().name()))
                .collect();
            c.batch_execute(&format!(
                "CREATE TEMP TABLE IF NOT EXISTS _mooncdc_staging ({}) ON COMMIT DROP; TRUNCATE _mooncdc_staging",
                defs.join(", ")
            ))
            .await
            .map_err(pg_err("cannot create a staging table"))?;
            let casts: Vec<String> = t
                .cols
                .iter()
                .zip(&names)
                .map(|(c, n)| format!("{n}::{}", c.sql_type))
                .collect();
            (
                "_mooncdc_staging".to_string(),
                Some(format!(
                    "INSERT INTO {} ({}) SELECT {} FROM _mooncdc_staging; DROP TABLE _mooncdc_staging",
                    t.qname,
                    names.join(", "),
                    casts.join(", ")
                )),
            )
        };
        let sink = c
            .copy_in(&format!("COPY {into} FROM STDIN (FORMAT binary)"))
            .await
            .map_err(pg_err("cannot start a COPY"))?;
        Ok(Loader {
            writer: Box::pin(BinaryCopyInWriter::new(sink, &types)),
            staged,
            rows: Vec::with_capacity(COPY_CHUNK),
            table: t.schema.table.clone(),
            qname: t.qname.clone(),
        })
    }

    /// Write the rows held.
    pub(super) async fn write_held(&mut self, t: &Table) -> Result<()> {
        for row in self.rows.drain(..) {
            let fields: Vec<Field<'_>> = row
                .iter()
                .zip(&t.cols)
                .map(|(v, c)| Field(v, c.param))
                .collect();
            let refs: Vec<&(dyn ToSql + Sync)> =
                fields.iter().map(|f| f as &(dyn ToSql + Sync)).collect();
            self.writer
                .as_mut()
                .write(&refs)
                .await
                .map_err(pg_err(&format!(
                    "COPY into table {:?} failed",
                    t.schema.table
                )))?;
        }
        Ok(())
    }

    pub(super) async fn finish(self, c: &Client) -> Result<()> {
        let mut w = self.writer;
        w.as_mut().finish().await.map_err(pg_err(&format!(
            "COPY of table {:?} into {} failed",
            self.table, self.qname
        )))?;
        if let Some(sql) = self.staged {
            c.batch_execute(&sql).await.map_err(pg_err(&format!(
                "snapshot rows of table {:?}: a value does not cast into its column's type in {}",
                self.table, self.qname
            )))?;
        }
        Ok(())
    }
}
