//! SQLite helpers shared by the SQLite source, target and audit: opening,
//! identifier quoting, table schemas, and exact value conversion.

use crate::error::{Error, Result};
use crate::wire::value::normalize_zero;
use crate::wire::{Column, Schema, Value};
use rusqlite::types::{ToSqlOutput, ValueRef};
use rusqlite::{Connection, OpenFlags};
use std::path::Path;

mod affinity;
pub use affinity::{affinity, keeps_class, looks_numeric, Affinity};

/// Names that belong to MoonCDC inside a database.
pub const RESERVED_PREFIX: &str = "_mooncdc";

/// Open an existing database file (never create one by accident).
pub fn open_existing(path: &Path) -> Result<Connection> {
    if !path.exists() {
        return Err(Error::state(format!(
            "database file {} does not exist",
            path.display()
        )));
    }
    open_with(
        path,
        OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_URI,
    )
}

/// Open a database file, creating it when missing (targets).
pub fn open_or_create(path: &Path) -> Result<Connection> {
    open_with(
        path,
        OpenFlags::SQLITE_OPEN_READ_WRITE
            | OpenFlags::SQLITE_OPEN_CREATE
            | OpenFlags::SQLITE_OPEN_URI,
    )
}

/// How long a connection waits for another's write lock before SQLite
/// says the database is locked.
pub const BUSY_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

fn open_with(path: &Path, flags: OpenFlags) -> Result<Connection> {
    let name = path.display().to_string();
    // A rusqlite Connection is never used by two threads at once (it is not
    // Sync), so SQLite's per-connection mutexes only cost time: a tenth of
    // an apply's, measured.
    let flags = flags | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let conn = Connection::open_with_flags(path, flags)
        .map_err(|e| Error::database("cannot open the database", e).in_file(&name))?;
    conn.busy_timeout(BUSY_TIMEOUT)
        .map_err(|e| Error::database("cannot set the busy timeout", e).in_file(&name))?;
    let enc: String = conn
        .query_row("PRAGMA encoding", [], |r| r.get(0))
        .map_err(|e| Error::database("cannot read the database", e).in_file(&name))?;
    if enc != "UTF-8" {
        return Err(Error::state(format!(
            "database encoding is {enc}; MoonCDC needs UTF-8 databases"
        ))
        .in_file(&name));
    }
    Ok(conn)
}

pub use crate::util::quote_ident;

pub fn db_err(what: &str) -> impl Fn(rusqlite::Error) -> Error + '_ {
    move |e| Error::database(what.to_string(), e)
}

/// Whether `e` is SQLite's "database is locked": another connection held
/// the write lock past the busy timeout.
pub fn is_busy(e: &Error) -> bool {
    std::error::Error::source(e)
        .and_then(|s| s.downcast_ref::<rusqlite::Error>())
        .is_some_and(|r| {
            matches!(r, rusqlite::Error::SqliteFailure(f, _) if f.code == rusqlite::ErrorCode::DatabaseBusy)
        })
}

/// User tables (not SQLite's, not MoonCDC's), in name order.
pub fn user_tables(conn: &Connection) -> Result<Vec<String>> {
    let mut st = conn
        .prepare(
            "SELECT name FROM sqlite_schema WHERE type = 'table' AND name NOT LIKE 'sqlite\\_%' ESCAPE '\\' \
             AND name NOT LIKE '\\_mooncdc%' ESCAPE '\\' ORDER BY name",
        )
        .map_err(db_err("cannot list tables"))?;
    let rows = st
        .query_map([], |r| r.get::<_, String>(0))
        .map_err(db_err("cannot list tables"))?;
    rows.collect::<std::result::Result<Vec<_>, _>>()
        .map_err(db_err("cannot list tables"))
}

pub fn table_exists(conn: &Connection, name: &str) -> Result<bool> {
    conn.query_row(
        "SELECT count(*) FROM sqlite_schema WHERE type = 'table' AND name = ?1",
        [name],
        |r| r.get::<_, i64>(0),
    )
    .map(|n| n > 0)
    .map_err(db_err("cannot read the schema"))
}

/// The table's schema from `PRAGMA table_xinfo`: declared types, NOT NULL, the
/// primary key in key order. Generated columns are left out (they are derived).
pub fn table_schema(conn: &Connection, name: &str) -> Result<Schema> {
    if !table_exists(conn, name)? {
        return Err(Error::state(format!("table {name:?} does not exist")));
    }
    let mut st = conn
        .prepare(
            "SELECT name, type, \"notnull\", pk, hidden FROM pragma_table_xinfo(?1) ORDER BY cid",
        )
        .map_err(db_err("cannot read the table's columns"))?;
    let mut rows = st
        .query([name])
        .map_err(db_err("cannot read the table's columns"))?;
    let mut columns = Vec::new();
    let mut pk: Vec<(i64, String)> = Vec::new();
    while let Some(r) = rows
        .next()
        .map_err(db_err("cannot read the table's columns"))?
    {
        let col: String = r.get(0).map_err(db_err("column name"))?;
        let decl: String = r
            .get::<_, Option<String>>(1)
            .map_err(db_err("column type"))?
            .unwrap_or_default();
        let notnull: i64 = r.get(2).map_err(db_err("column notnull"))?;
        let pkpos: i64 = r.get(3).map_err(db_err("column pk"))?;
        let hidden: i64 = r.get(4).map_err(db_err("column hidden"))?;
        if hidden != 0 {
            continue;
        }
        if pkpos > 0 {
            pk.push((pkpos, col.clone()));
        }
        columns.push(Column {
            name: col,
            decl_type: decl,
            nullable: notnull == 0 && pkpos == 0,
        });
    }
    if pk.is_empty() {
        return Err(Error::state(format!(
            "table {name:?} has no primary key; MoonCDC identifies rows by their key (add a PRIMARY KEY, or leave the table out with --table)"
        )));
    }
    pk.sort();
    Ok(Schema {
        table: name.to_string(),
        columns,
        key: pk.into_iter().map(|(_, c)| c).collect(),
    })
}

/// `SELECT` of a table's columns ordered by its key (docs/FORMAT.md §9).
pub fn select_in_key_order(s: &Schema) -> String {
    let cols: Vec<String> = s.columns.iter().map(|c| quote_ident(&c.name)).collect();
    format!(
        "SELECT {} FROM {} ORDER BY {}",
        cols.join(", "),
        quote_ident(&s.table),
        order_by_key(s)
    )
}

/// `ORDER BY` text that yields the key order of docs/FORMAT.md §9 (binary collation).
pub fn order_by_key(schema: &Schema) -> String {
    schema
        .key
        .iter()
        .map(|k| format!("{} COLLATE BINARY", quote_ident(k)))
        .collect::<Vec<_>>()
        .join(", ")
}

/// A stored value as a wire value: TEXT must be strict UTF-8, REAL finite and
/// with zero normalized to +0.
fn value_from_ref(v: ValueRef<'_>) -> std::result::Result<Value, String> {
    Ok(match v {
        ValueRef::Null => Value::Null,
        ValueRef::Integer(i) => Value::Integer(i),
        ValueRef::Real(x) => {
            if !x.is_finite() {
                return Err(format!("REAL {x} cannot be carried (only finite REAL values can)"));
            }
            Value::Real(normalize_zero(x))
        }
        ValueRef::Text(b) => Value::Text(
            String::from_utf8(b.to_vec())
                .map_err(|e| format!("TEXT is not valid UTF-8 (invalid byte at offset {}); arbitrary bytes belong in a BLOB", e.utf8_error().valid_up_to()))?,
        ),
        ValueRef::Blob(b) => Value::Blob(b.to_vec()),
    })
}

/// A wire value as a bound parameter, class for class (TEXT bound as UTF-8);
/// an unchanged value is not a value and is refused.
fn to_sql(v: &Value) -> rusqlite::Result<ToSqlOutput<'_>> {
    Ok(match v {
        Value::Null => ToSqlOutput::Borrowed(ValueRef::Null),
        Value::Integer(i) => ToSqlOutput::Borrowed(ValueRef::Integer(*i)),
        Value::Real(x) => ToSqlOutput::Borrowed(ValueRef::Real(*x)),
        Value::Text(s) => ToSqlOutput::Borrowed(ValueRef::Text(s.as_bytes())),
        Value::Blob(b) => ToSqlOutput::Borrowed(ValueRef::Blob(b)),
        Value::Unchanged => {
            return Err(rusqlite::Error::ToSqlConversionFailure(
                "an unchanged value has no value to store (it must be filled from the stored row first)".into(),
            ))
        }
    })
}

/// A value wrapper that binds with [`to_sql`].
pub struct Bind<'a>(pub &'a Value);

impl rusqlite::ToSql for Bind<'_> {
    fn to_sql(&self) -> rusqlite::Result<ToSqlOutput<'_>> {
        to_sql(self.0)
    }
}

/// Read `n` columns starting at `from` of a result row as wire values.
pub fn row_values(
    r: &rusqlite::Row<'_>,
    from: usize,
    n: usize,
) -> std::result::Result<Vec<Value>, String> {
    (from..from + n)
        .map(|i| {
            let v = r.get_ref(i).map_err(|e| e.to_string())?;
            value_from_ref(v)
        })
        .collect()
}

/// A random UUID (version 4) from the system's random source.
pub fn random_uuid() -> Result<String> {
    use std::io::Read;
    let mut b = [0u8; 16];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut b))
        .map_err(|e| Error::io("cannot read /dev/urandom", e))?;
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    let h = hex::encode(b);
    Ok(format!(
        "{}-{}-{}-{}-{}",
        &h[0..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..32]
    ))
}
