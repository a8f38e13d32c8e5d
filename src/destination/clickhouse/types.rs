//! How schemas map to ClickHouse: column types, table names, versions.

use super::*;

/// How a column is stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChType {
    Int64,
    Int32,
    Int16,
    UInt32,
    /// `UInt8` holding INTEGER 0 or 1 (servers without `Bool`, and tables
    /// made before it was used).
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
    /// `Bool`, INTEGER 0 or 1.
    BoolNative,
    /// `DateTime64(6)`, from a PostgreSQL timestamp's text: `zoned` is a
    /// `timestamptz` (its text has an offset); `utc` pins the column to
    /// UTC (`DateTime64(6, 'UTC')`, as MoonCDC makes them; a column made
    /// by hand without a zone is kept).
    DateTime64 {
        zoned: bool,
        utc: bool,
    },
    /// `Date32`, from a PostgreSQL `date`'s text.
    Date32,
    /// `UUID`, from a PostgreSQL `uuid`'s text.
    Uuid,
    /// `Array(Nullable(T))`, from a one-dimensional PostgreSQL array's text.
    Array(Elem),
}

/// An array's element type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Elem {
    Int16,
    Int32,
    Int64,
    Float32,
    Float64,
    Bool,
    Text,
    Decimal(u8, u8),
    Uuid,
    Date32,
    DateTime64 { zoned: bool, utc: bool },
}

impl Elem {
    /// The scalar column type of one element.
    pub fn scalar(self) -> ChType {
        match self {
            Elem::Int16 => ChType::Int16,
            Elem::Int32 => ChType::Int32,
            Elem::Int64 => ChType::Int64,
            Elem::Float32 => ChType::Float32,
            Elem::Float64 => ChType::Float64,
            Elem::Bool => ChType::BoolNative,
            Elem::Text => ChType::Text,
            Elem::Decimal(p, s) => ChType::Decimal(p, s),
            Elem::Uuid => ChType::Uuid,
            Elem::Date32 => ChType::Date32,
            Elem::DateTime64 { zoned, utc } => ChType::DateTime64 { zoned, utc },
        }
    }
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
            ChType::BoolNative => "Bool".into(),
            ChType::DateTime64 { utc: true, .. } => "DateTime64(6, 'UTC')".into(),
            ChType::DateTime64 { utc: false, .. } => "DateTime64(6)".into(),
            ChType::Date32 => "Date32".into(),
            ChType::Uuid => "UUID".into(),
            ChType::Array(e) => format!("Array(Nullable({}))", e.scalar().sql()),
        }
    }

    /// Whether the type is one of the typed mappings (`column_type_with`).
    pub fn is_native(self) -> bool {
        match self {
            ChType::BoolNative
            | ChType::DateTime64 { .. }
            | ChType::Date32
            | ChType::Uuid
            | ChType::Array(_) => true,
            ChType::Decimal(p, _) => p > 38,
            _ => false,
        }
    }
}

/// The ClickHouse type of a schema column, by the source's kind, as
/// servers without the typed mappings (and `types=text`) store it.
pub fn column_type(c: &Column, kind: SourceKind) -> ChType {
    column_type_with(c, kind, false)
}

/// The ClickHouse type of a schema column; `native`: with the typed
/// mappings (PostgreSQL timestamps, dates, UUIDs, booleans, wide decimals
/// and arrays in ClickHouse's own types: docs/CLICKHOUSE.md, Types), as
/// `ClickHouse::native_types` says.
pub fn column_type_with(c: &Column, kind: SourceKind, native: bool) -> ChType {
    let t = c.decl_type.to_ascii_lowercase();
    if kind == SourceKind::Postgres {
        if native {
            if let Some(elem) = t.strip_suffix("[]") {
                // ClickHouse has no `Nullable(Array(…))`: only a column that
                // cannot be NULL keeps NULL apart from `{}` as an Array.
                return match pg_elem(elem) {
                    Some(e) if !c.nullable => ChType::Array(e),
                    _ => ChType::Text,
                };
            }
            if let Some(e) = pg_elem(&t) {
                return e.scalar();
            }
        }
        return match t.as_str() {
            "smallint" => ChType::Int16,
            "integer" => ChType::Int32,
            "bigint" => ChType::Int64,
            "oid" => ChType::UInt32,
            "real" => ChType::Float32,
            "double precision" => ChType::Float64,
            "boolean" => ChType::Bool,
            "bytea" => ChType::Blob,
            _ => match decimal(&t, 38) {
                Some((p, s)) => ChType::Decimal(p, s),
                None => ChType::Text,
            },
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

/// `numeric(p,s)` with a precision a `Decimal` holds (`Decimal128`, or
/// `Decimal256` up to 76 digits with the typed mappings).
fn decimal(t: &str, max: u8) -> Option<(u8, u8)> {
    let ps = t.strip_prefix("numeric(")?.strip_suffix(')')?;
    let mut it = ps.split(',').map(|x| x.trim().parse::<u8>());
    match (it.next(), it.next(), it.next()) {
        (Some(Ok(p)), Some(Ok(s)), None) if (1..=max).contains(&p) && s <= p => Some((p, s)),
        _ => None,
    }
}

/// The typed mapping of a PostgreSQL type (`format_type`'s spelling), as a
/// column's own type or an array's element; `None` where it has none.
fn pg_elem(t: &str) -> Option<Elem> {
    // Every timestamp column is pinned to UTC, a naive one too: without a
    // zone of its own, ClickHouse shows it in the server's or the session's
    // zone, shifted from the source's wall-clock text.
    let timestamp = |zoned: bool| Elem::DateTime64 { zoned, utc: true };
    Some(match t {
        "smallint" => Elem::Int16,
        "integer" => Elem::Int32,
        "bigint" => Elem::Int64,
        "real" => Elem::Float32,
        "double precision" => Elem::Float64,
        "boolean" => Elem::Bool,
        "text" => Elem::Text,
        "uuid" => Elem::Uuid,
        "date" => Elem::Date32,
        "timestamp without time zone" => timestamp(false),
        "timestamp with time zone" => timestamp(true),
        _ => {
            if let Some((p, s)) = decimal(t, 76) {
                Elem::Decimal(p, s)
            } else if t.starts_with("character varying") || t.starts_with("character(") {
                Elem::Text
            } else if let Some(r) = t.strip_prefix("timestamp(") {
                match r.split_once(") ")?.1 {
                    "without time zone" => timestamp(false),
                    "with time zone" => timestamp(true),
                    _ => return None,
                }
            } else {
                return None;
            }
        }
    })
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
