//! How schemas map to ClickHouse: column types, table names, versions.

use super::*;

/// How a column is stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChType {
    Int64,
    Int32,
    Int16,
    UInt32,
    Bool,
    Float64,
    Float32,
    Decimal(u8, u8),
    /// TEXT values only.
    Text,
    /// BLOB values only.
    Blob,
    /// Any class, stored as the value's wire form (JSON) in a String.
    Any,
}

impl ChType {
    pub fn sql(self) -> String {
        match self {
            ChType::Int64 => "Int64".into(),
            ChType::Int32 => "Int32".into(),
            ChType::Int16 => "Int16".into(),
            ChType::UInt32 => "UInt32".into(),
            ChType::Bool => "UInt8".into(),
            ChType::Float64 => "Float64".into(),
            ChType::Float32 => "Float32".into(),
            ChType::Decimal(p, s) => format!("Decimal({p}, {s})"),
            ChType::Text | ChType::Blob | ChType::Any => "String".into(),
        }
    }
}

/// The ClickHouse type of a schema column, by the source's kind.
pub fn column_type(c: &Column, kind: SourceKind) -> ChType {
    let t = c.decl_type.to_ascii_lowercase();
    if kind == SourceKind::Postgres {
        return match t.as_str() {
            "smallint" => ChType::Int16,
            "integer" => ChType::Int32,
            "bigint" => ChType::Int64,
            "oid" => ChType::UInt32,
            "real" => ChType::Float32,
            "double precision" => ChType::Float64,
            "boolean" => ChType::Bool,
            "bytea" => ChType::Blob,
            _ => {
                if let Some(ps) = t.strip_prefix("numeric(").and_then(|r| r.strip_suffix(')')) {
                    let mut it = ps.split(',').map(|x| x.trim().parse::<u8>());
                    if let (Some(Ok(p)), Some(Ok(s))) = (it.next(), it.next()) {
                        if (1..=38).contains(&p) && s <= p {
                            return ChType::Decimal(p, s);
                        }
                    }
                }
                ChType::Text
            }
        };
    }
    // SQLite: by declared type, as its affinity rules read it.
    use crate::sqlite_util::Affinity;
    match crate::sqlite_util::affinity(&c.decl_type) {
        Affinity::Integer => ChType::Int64,
        Affinity::Text => ChType::Text,
        // Declared BLOB: BLOB values only; no declared type: any class.
        Affinity::Blob if t.contains("blob") => ChType::Blob,
        Affinity::Real => ChType::Float64,
        Affinity::Blob | Affinity::Numeric => ChType::Any,
    }
}

/// The replacing engine's own columns, after the data columns.
pub(crate) const REPLACING_META: [&str; 2] = ["_etl_version", "_etl_deleted"];
/// The history engine's own columns, before the data columns.
pub(crate) const HISTORY_META: [&str; 3] = ["cdc_operation", "cdc_lsn", "cdc_tx_ordinal"];

/// A source column named as one of the engine's own columns cannot be
/// stored beside it: refused before anything is made, naming the way out.
pub(crate) fn refuse_meta_names(schema: &Schema, engine: Engine) -> Result<()> {
    let (meta, what, other): (&[&str], &str, &str) = match engine {
        Engine::Replacing => (&REPLACING_META, "replacing", "history"),
        Engine::History => (&HISTORY_META, "history", "replacing"),
    };
    if let Some(c) = schema
        .columns
        .iter()
        .find(|c| meta.contains(&c.name.as_str()))
    {
        return Err(Error::data(format!(
            "table {:?} has a column named {:?}, the name of a column the {what} engine adds to every ClickHouse table it makes ({}), and one table cannot hold two columns of one name: rename the column at the source, or use --engine {other}",
            schema.table,
            c.name,
            meta.join(", ")
        )));
    }
    Ok(())
}

/// The target table name for a source table.
pub fn table_name(source_table: &str) -> String {
    source_table.replace('_', "__").replace('.', "_")
}

/// The 64-bit version of a sequence, keeping order for the source's scheme.
pub fn version(kind: SourceKind, seq: Sequence) -> Result<u64> {
    if kind == SourceKind::Postgres {
        let lsn = (seq >> 64) as u64;
        let ord = seq as u64;
        if lsn >= 1 << 40 || ord >= 1 << 24 {
            return Err(Error::data(format!(
                "sequence {seq} does not fit the 64-bit version scheme (LSN below 2^40, at most 2^24 changes per transaction)"
            )));
        }
        Ok((lsn << 24) | ord)
    } else {
        u64::try_from(seq)
            .map_err(|_| Error::data(format!("sequence {seq} does not fit a 64-bit version")))
    }
}
