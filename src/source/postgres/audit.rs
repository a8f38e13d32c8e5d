//! A source's rows for the audit, table by table in key order, in one
//! REPEATABLE READ transaction.

use super::catalog::published_schema;
use super::publication::{publication_detail, refuse_hidden_rows};
use super::snapshot::{copy_table, ReadAs};
use super::types::Class;
use super::{parse_lsn, sequence, table_arg, PgSource, WAL_END};
use crate::error::{Error, Result};
use crate::pg::{pg_err, runtime};
use crate::source::AuditRows;
use crate::wire::{Cursor, Row, Schema, Sequence};
use tokio_postgres::Client;

/// Rows of every table for an audit, read in one REPEATABLE READ transaction.
pub struct AuditSource {
    pub(super) rt: tokio::runtime::Runtime,
    pub(super) client: Client,
    pub identity: String,
    pub high_water: Sequence,
    pub(super) tables: Vec<(Schema, Vec<Class>, ReadAs)>,
}

impl AuditSource {
    pub fn open(src: &PgSource, only: &[String]) -> Result<AuditSource> {
        let rt = runtime()?;
        let (client, identity, high_water, tables) = rt.block_on(async {
            let c = src.client("audit").await?;
            let id = src.identity().await?;
            c.batch_execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
                .await
                .map_err(pg_err("cannot begin the audit transaction"))?;
            let flushed: String = c
                .query_one(&format!("SELECT {WAL_END}::text"), &[])
                .await
                .map_err(pg_err("cannot read the WAL position"))?
                .get(0);
            let mut published = publication_detail(&c, &src.publication).await?;
            if !only.is_empty() {
                let mut want = Vec::new();
                for t in only {
                    let full = table_arg(t)?;
                    match published.iter().find(|p| p.name == full) {
                        Some(p) => want.push(p.clone()),
                        None => {
                            return Err(Error::usage(format!(
                                "table {full:?} is not in publication {:?}",
                                src.publication
                            )))
                        }
                    }
                }
                published = want;
            }
            let names: Vec<&str> = published.iter().map(|p| p.name.as_str()).collect();
            let owned: Vec<String> = names.iter().map(|n| n.to_string()).collect();
            src.check_reader(&c, &owned, false, "an audit").await?;
            refuse_hidden_rows(&c, &names, "an audit").await?;
            // Each table as the publication publishes it: its own rows
            // (not an inheritance child's), its row filter's rows and its
            // column list's columns.
            let mut tables = Vec::new();
            for p in &published {
                let (s, cls) = published_schema(&c, p).await?;
                tables.push((s, cls, ReadAs::of(p)));
            }
            Ok::<_, Error>((c, id, sequence(parse_lsn(&flushed)?, 0), tables))
        })?;
        Ok(AuditSource {
            rt,
            client,
            identity,
            high_water,
            tables,
        })
    }
}

impl AuditRows for AuditSource {
    fn cursor(&self) -> Option<Cursor> {
        Some(Cursor::new(self.identity.clone(), self.high_water))
    }

    fn schemas(&self) -> Vec<Schema> {
        self.tables.iter().map(|(s, _, _)| s.clone()).collect()
    }

    /// Each row is fetched in its own `block_on`, so `f` runs outside the
    /// async runtime (it may itself do blocking I/O, such as reading a
    /// ClickHouse reply).
    fn rows(&mut self, i: usize, f: &mut dyn FnMut(Row) -> Result<bool>) -> Result<()> {
        let (schema, classes, read) = &self.tables[i];
        let mut rows = self
            .rt
            .block_on(copy_table(&self.client, schema, classes, read, &[]))?;
        while let Some(r) = self.rt.block_on(rows.next())? {
            if !f(r)? {
                break;
            }
        }
        Ok(())
    }
}
