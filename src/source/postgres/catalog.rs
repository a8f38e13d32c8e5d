//! What the stream knows of each published table: schemas from the
//! catalog and Relation messages, and row changes turned into events.

use super::backfill::Backfills;
use super::decode::Catalogue;
use super::*;

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
    identity: HashMap<u32, Identity>,
}

/// A table's replica identity as the stream reports it.
struct Identity {
    /// FULL: every change carries its whole old row.
    full: bool,
    /// The places of the identity's columns (the key's, under DEFAULT).
    key: Vec<usize>,
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

    /// A truncate of one relation.
    pub(super) fn truncate_event(
        &self,
        seq: Sequence,
        relation: u32,
        op: Operation,
    ) -> Result<Event> {
        let (schema, _) = self.by_oid.get(&relation).ok_or_else(|| {
            Error::data(format!(
                "truncate of relation {relation} before its Relation message"
            ))
        })?;
        Ok(Event::truncate(seq, schema.table.clone(), op))
    }

    pub(super) fn event(&self, seq: Sequence, msg: Message) -> Result<Event> {
        let (relation, op, old, new) = match msg {
            Message::Insert { relation, new } => (relation, Operation::Insert, None, Some(new)),
            Message::Update { relation, old, new } => (relation, Operation::Update, old, Some(new)),
            Message::Delete { relation, old } => (relation, Operation::Delete, Some(old), None),
            _ => unreachable!("row changes only"),
        };
        let (schema, classes) = self.by_oid.get(&relation).ok_or_else(|| {
            Error::data(format!(
                "row change for relation {relation} before its Relation message"
            ))
        })?;
        let here = |e: String| Error::data(format!("table {:?}, change {seq}: {e}", schema.table));
        let convert = |t: &[Cell], fallback: Option<&Row>| -> Result<Row> {
            if t.len() != classes.len() {
                return Err(here(format!(
                    "row has {} values, the table {}",
                    t.len(),
                    classes.len()
                )));
            }
            t.iter()
                .zip(classes)
                .enumerate()
                .map(|(i, (cell, cls))| match cell {
                    Cell::Null => Ok(Value::Null),
                    Cell::Text(b) => from_text(*cls, Some(b)).map_err(&here),
                    Cell::Binary(_) => Err(here(
                        "binary-format value (the stream must be in text format)".into(),
                    )),
                    // Filled from a whole old row; marked unchanged without one.
                    Cell::Unchanged => Ok(fallback.map_or(Value::Unchanged, |r| r[i].clone())),
                })
                .collect()
        };
        // What helps when an old row is missing under FULL: the WAL already
        // holds this change without it, so setting the identity again
        // carries only later changes.
        const NOT_FULL: &str = "the table's REPLICA IDENTITY was not FULL when this change was made (changed after init, or a \
             partition attached later). `mooncdc-capture upgrade` sets it again for later changes, but this change is in the WAL \
             without its old values and cannot be carried exactly: after upgrade, take a new snapshot into a new target and \
             follow from its cursor (docs/OPERATIONS.md, \"Starting over\")";
        let ident = self.identity.get(&relation);
        let full = ident.is_none_or(|i| i.full);
        // Under the default identity (or one by an index on the key
        // columns) the old row is known by its key: the key of the old
        // tuple the server sent ('K'), else, when the key did not change
        // and nothing was sent, the new row's.
        let key_only = |t: Option<&[Cell]>, new: Option<&Row>| -> Result<Row> {
            let ident = ident.expect("not full, so described");
            let pk = &schema.key;
            if ident.key.len() != pk.len()
                || ident
                    .key
                    .iter()
                    .any(|&i| !pk.iter().any(|k| *k == schema.columns[i].name))
            {
                return Err(here(format!(
                    "the table's replica identity is an index whose columns are not its primary key ({:?}); \
                     rows are identified by the primary key, so set REPLICA IDENTITY DEFAULT (or USING INDEX on an index \
                     of exactly the key columns, or FULL)",
                    pk
                )));
            }
            schema
                .key_indices()
                .into_iter()
                .map(|i| {
                    let v = match (t, new) {
                        (Some(t), _) => match t.get(i) {
                            Some(Cell::Text(b)) => from_text(classes[i], Some(b)).map_err(&here)?,
                            _ => return Err(here(format!("the old key came without a value for key column {:?}", schema.columns[i].name))),
                        },
                        (None, Some(row)) => row[i].clone(),
                        (None, None) => unreachable!("a delete always has an old key"),
                    };
                    if matches!(v, Value::Null | Value::Unchanged) {
                        return Err(here(format!(
                            "key column {:?} has no value in the change (a NULL or unsent key cannot identify the row)",
                            schema.columns[i].name
                        )));
                    }
                    Ok(v)
                })
                .collect()
        };
        let mut before = None;
        let mut before_key = None;
        match old {
            None if op == Operation::Update && full => {
                return Err(here(format!(
                    "the update came without its old row: {NOT_FULL}"
                )))
            }
            None => {}
            Some((kind, t)) if kind != b'O' => {
                if full {
                    return Err(here(format!(
                        "only the key of the old row came: {NOT_FULL}"
                    )));
                }
                before_key = Some(key_only(Some(&t), None)?);
            }
            Some((_, t)) => {
                let row = convert(&t, None)?;
                // A partition whose identity is not FULL, published through
                // its root, sends NULL for the columns it did not log, under
                // the root's FULL mark: a NULL where none can be is that.
                if let Some((c, _)) = schema
                    .columns
                    .iter()
                    .zip(&row)
                    .find(|(c, v)| !c.nullable && matches!(v, Value::Null))
                {
                    return Err(here(format!(
                        "the old row came with NULL in NOT NULL column {:?}: only its key was logged; {NOT_FULL}",
                        c.name
                    )));
                }
                before = Some(row);
            }
        };
        let mut after = match new {
            None => None,
            Some(t) => Some(convert(&t, before.as_ref())?),
        };
        // A key value stored out of line comes unchanged in the new row;
        // the server then sends the old key, which is that value.
        if let (Some(a), Some(k)) = (after.as_mut(), before_key.as_ref()) {
            for (&i, v) in schema.key_indices().iter().zip(k) {
                if a[i].is_unchanged() {
                    a[i] = v.clone();
                }
            }
        }
        if op == Operation::Update && before.is_none() && before_key.is_none() {
            before_key = Some(key_only(None, after.as_ref())?);
        }
        Ok(Event {
            sequence: seq,
            table: schema.table.clone(),
            operation: op,
            before,
            before_key,
            after,
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
