//! What the stream knows of each published table: schemas from the
//! catalog and Relation messages, and row changes turned into events.

use super::backfill::Backfills;
use super::decode::Catalogue;
use super::pgoutput::Relation;
use super::publication::{publication_detail, publish_gap, PubTable};
use super::types::{class_of, Class};
use crate::error::{Error, Result};
use crate::pg::pg_err;
use crate::wire::{Column, Schema};
use std::collections::HashMap;
use tokio_postgres::Client;

/// What a Relation message says of its table.
pub(super) enum RelChange {
    /// As the stream already knew it.
    Same(Schema),
    /// First described in this read.
    New(Schema),
    /// Changed: (before, after).
    Changed(Schema, Schema),
}

/// What the stream knows about each published table.
pub(super) struct Catalog {
    /// By relation OID, as the stream's Relation messages described them:
    /// schema, classes per column.
    pub(super) by_oid: HashMap<u32, (Schema, Vec<Class>)>,
    /// By relation OID, the replica identity its last Relation message gave.
    pub(super) identity: HashMap<u32, Identity>,
}

/// A table's replica identity as the stream reports it.
pub(super) struct Identity {
    /// FULL: every change carries its whole old row.
    pub(super) full: bool,
    /// The places of the identity's columns (the key's, under DEFAULT).
    pub(super) key: Vec<usize>,
}

impl Catalog {
    /// Check the publication's tables (each must have a key) before reading.
    pub(super) async fn load(c: &Client, publication: &str) -> Result<Catalog> {
        if let Some(msg) = publish_gap(c, publication).await? {
            return Err(Error::state(msg));
        }
        let tables = publication_detail(c, publication).await?;
        if tables.is_empty() {
            return Err(Error::state(format!(
                "publication {publication:?} has no tables (run init)"
            )));
        }
        for p in &tables {
            published_schema(c, p).await?;
        }
        Ok(Catalog::empty())
    }

    /// Knowing no table yet: the stream describes each before its first
    /// change.
    pub(super) fn empty() -> Catalog {
        Catalog {
            by_oid: HashMap::new(),
            identity: HashMap::new(),
        }
    }

    /// Take a Relation message: the table's schema at this point of the
    /// stream (the server describes a table before its first change in a
    /// session and again after its columns change).
    pub(super) async fn relation(
        &mut self,
        db: &impl Catalogue,
        rel: Relation,
    ) -> Result<RelChange> {
        let name = crate::wire::names::join(&rel.namespace, &rel.name);
        let mut columns = Vec::with_capacity(rel.columns.len());
        let mut classes = Vec::with_capacity(rel.columns.len());
        for col in &rel.columns {
            let ty = db.type_name(col.type_oid, col.type_modifier).await?;
            columns.push((col.name.clone(), ty));
            classes.push(class_of(col.type_oid));
        }
        // Nullability and key from the catalog (a Relation message does not
        // carry them; it comes again after any ALTER, SET NOT NULL and a new
        // key included, so each one is looked at).
        let (s, t) = (rel.namespace.clone(), rel.name.clone());
        // Generated columns are in the message only when published (18+).
        let named: Vec<String> = rel.columns.iter().map(|c| c.name.clone()).collect();
        let fresh = db.table(&s, &t, &named).await?;
        let schema = Schema {
            table: name.clone(),
            columns: columns
                .into_iter()
                .map(|(n, ty)| {
                    let nullable = fresh
                        .columns
                        .iter()
                        .find(|c| c.name == n)
                        .is_none_or(|c| c.nullable);
                    Column {
                        name: n,
                        decl_type: ty,
                        nullable,
                    }
                })
                .collect(),
            key: fresh.key,
        };
        self.identity.insert(
            rel.oid,
            Identity {
                full: rel.replica_identity == b'f',
                key: (rel.columns.iter().enumerate())
                    .filter(|(_, c)| c.key)
                    .map(|(i, _)| i)
                    .collect(),
            },
        );
        let before = self.by_oid.get(&rel.oid).map(|(s, _)| s.clone());
        if before.as_ref() == Some(&schema) {
            return Ok(RelChange::Same(schema));
        }
        schema.check().map_err(Error::data)?;
        self.by_oid.insert(rel.oid, (schema.clone(), classes));
        Ok(match before {
            None => RelChange::New(schema),
            Some(old) => RelChange::Changed(old, schema),
        })
    }
}

/// The read path asks the server through the read's SQL session.
impl Catalogue for Client {
    async fn type_name(&self, oid: u32, typmod: i32) -> Result<String> {
        Ok(self
            .query_one("SELECT format_type($1::oid, $2::int4)", &[&oid, &typmod])
            .await
            .map_err(pg_err("cannot name a column type"))?
            .get(0))
    }

    async fn table(&self, schema: &str, table: &str, named: &[String]) -> Result<Schema> {
        Ok(table_schema_with(self, schema, table, named).await?.0)
    }

    async fn note_backfills(&self, bf: &mut Backfills, commit: u64) -> Result<()> {
        bf.commit(self, commit).await
    }
}

/// A table's schema (types by `format_type`, key = primary key) and the wire
/// class of each column.
pub async fn table_schema(c: &Client, schema: &str, table: &str) -> Result<(Schema, Vec<Class>)> {
    table_schema_with(c, schema, table, &[]).await
}

/// [`table_schema`], with the generated columns named in `generated`
/// (those a publication publishes, PostgreSQL 18+).
async fn table_schema_with(
    c: &Client,
    schema: &str,
    table: &str,
    generated: &[String],
) -> Result<(Schema, Vec<Class>)> {
    let name = crate::wire::names::join(schema, table);
    let rel = c
        .query_opt(
            "SELECT to_regclass(format('%I.%I', $1::text, $2::text))::oid",
            &[&schema, &table],
        )
        .await
        .map_err(pg_err("cannot look up a table"))?
        .and_then(|r| r.get::<_, Option<u32>>(0))
        .ok_or_else(|| Error::state(format!("table {name:?} does not exist")))?;
    let cols = c
        .query(
            "SELECT attname::text, format_type(atttypid, atttypmod), attnotnull, atttypid::oid FROM pg_attribute \
             WHERE attrelid = $1 AND attnum > 0 AND NOT attisdropped \
             AND (attgenerated = '' OR attname::text = ANY($2)) ORDER BY attnum",
            &[&rel, &generated],
        )
        .await
        .map_err(pg_err("cannot read a table's columns"))?;
    let key = c
        .query(
            "SELECT a.attname::text FROM pg_index i CROSS JOIN LATERAL unnest(i.indkey) WITH ORDINALITY AS k(attnum, ord) \
             JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum \
             WHERE i.indrelid = $1 AND i.indisprimary ORDER BY k.ord",
            &[&rel],
        )
        .await
        .map_err(pg_err("cannot read a table's primary key"))?;
    if key.is_empty() {
        return Err(Error::state(format!(
            "table {name:?} has no primary key; MoonCDC identifies rows by their key"
        )));
    }
    let mut classes = Vec::new();
    let columns = cols
        .iter()
        .map(|r| {
            classes.push(class_of(r.get::<_, u32>(3)));
            Column {
                name: r.get(0),
                decl_type: r.get(1),
                nullable: !r.get::<_, bool>(2),
            }
        })
        .collect();
    let s = Schema {
        table: name,
        columns,
        key: key.iter().map(|r| r.get(0)).collect(),
    };
    s.check().map_err(Error::data)?;
    Ok((s, classes))
}

/// A published table's schema as its publication publishes it: only the
/// columns of its column list (PostgreSQL 15+), which must hold the key.
pub async fn published_schema(c: &Client, p: &PubTable) -> Result<(Schema, Vec<Class>)> {
    let (mut s, classes) = table_schema_with(c, &p.schema, &p.table, &p.generated).await?;
    let Some(list) = &p.columns else {
        return Ok((s, classes));
    };
    if let Some(k) = s.key.iter().find(|k| !list.contains(k)) {
        return Err(Error::state(format!(
            "the publication's column list for table {:?} leaves out key column {k:?}: targets could not tell its rows apart; add the column to the publication's column list",
            s.table
        )));
    }
    let keep: Vec<bool> = s.columns.iter().map(|c| list.contains(&c.name)).collect();
    let mut k = keep.iter();
    s.columns.retain(|_| *k.next().expect("one flag a column"));
    let classes = classes
        .into_iter()
        .zip(&keep)
        .filter(|(_, k)| **k)
        .map(|(c, _)| c)
        .collect();
    Ok((s, classes))
}
