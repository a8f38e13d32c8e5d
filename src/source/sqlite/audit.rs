//! A SQLite source's rows for the audit, in key order, in one read
//! transaction. Works on any SQLite database: without capture installed, its
//! user tables with a key are audited and there is no source cursor.

use super::*;
use crate::source::AuditRows;
pub use crate::sqlite_util::select_in_key_order;
use crate::sqlite_util::{table_schema, user_tables};
use crate::wire::Row;

pub struct SqliteAuditRows {
    conn: Connection,
    cursor: Option<Cursor>,
    schemas: Vec<Schema>,
}

impl SqliteAuditRows {
    pub fn open(path: &Path, only: &[String]) -> Result<SqliteAuditRows> {
        let conn = open_existing(path).map_err(|e| e.in_file(&path.display().to_string()))?;
        conn.execute_batch("BEGIN")
            .map_err(db_err("cannot begin a read transaction"))?;
        let (cursor, schemas): (Option<Cursor>, Vec<Schema>) = if is_installed(&conn)? {
            (
                Some(Cursor::new(identity(&conn)?, high_water(&conn)?)),
                current_tables(&conn)?
                    .into_values()
                    .map(|t| t.schema)
                    .collect(),
            )
        } else {
            (
                None,
                user_tables(&conn)?
                    .iter()
                    .filter_map(|t| table_schema(&conn, t).ok())
                    .collect(),
            )
        };
        Ok(SqliteAuditRows {
            conn,
            cursor,
            schemas: crate::source::choose_tables(schemas, only)?,
        })
    }
}

impl AuditRows for SqliteAuditRows {
    fn cursor(&self) -> Option<Cursor> {
        self.cursor.clone()
    }

    fn schemas(&self) -> Vec<Schema> {
        self.schemas.clone()
    }

    fn rows(&mut self, i: usize, f: &mut dyn FnMut(Row) -> Result<bool>) -> Result<()> {
        let s = &self.schemas[i];
        let mut st = self
            .conn
            .prepare(&select_in_key_order(s))
            .map_err(db_err("cannot read a source table"))?;
        let mut rows = st.query([]).map_err(db_err("cannot read a source table"))?;
        while let Some(r) = rows.next().map_err(db_err("cannot read a source table"))? {
            let row = row_values(r, 0, s.columns.len())
                .map_err(|e| Error::data(format!("table {:?}: {e}", s.table)))?;
            if !f(row)? {
                break;
            }
        }
        Ok(())
    }
}
