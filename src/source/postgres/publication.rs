//! Publications as they publish: each table with its row filter, column
//! list and generated columns, the relations (partitions) whose rows it
//! publishes and their replica identities, and what FULL identity cannot
//! be set on without breaking the application's writes.

use super::catalog::table_schema;
use crate::error::{Error, Result};
use crate::pg::{pg_err, server_version};
use crate::source::StatusField;
use crate::util::quote_ident;
use tokio_postgres::Client;

/// What the publication publishes, for `status`: each table with its row
/// filter and column list, and whether partitions are published through
/// their root.
pub(super) fn publication_field(
    name: &str,
    via_root: bool,
    tables: &[PubTable],
    all_columns: &[bool],
) -> StatusField {
    let mut text = format!(
        "{name} (partitions {}): ",
        if via_root {
            "through their root"
        } else {
            "as themselves"
        }
    );
    let mut json = Vec::new();
    for (i, (p, full)) in tables.iter().zip(all_columns).enumerate() {
        if i > 0 {
            text.push_str(", ");
        }
        text.push_str(&p.name);
        let columns = (!full).then(|| p.columns.clone()).flatten();
        if let Some(c) = &columns {
            text.push_str(&format!(" ({})", c.join(", ")));
        }
        if let Some(f) = &p.filter {
            text.push_str(&format!(" WHERE {f}"));
        }
        json.push(serde_json::json!({
            "table": p.name,
            "columns": columns,
            "row_filter": p.filter,
        }));
    }
    if tables.is_empty() {
        text.push_str("no tables");
    }
    StatusField::new(
        "publication",
        serde_json::json!({"name": name, "via_partition_root": via_root, "tables": json}),
    )
    .with_text(text)
}

/// Each relation whose replica identity a published table's changes use:
/// the table and, when it is partitioned, every partition below it (a
/// partition's change carries the old row its own identity logged, also
/// when published through the root). (schema, name, `relreplident`).
pub(super) async fn identity_of(c: &Client, p: &PubTable) -> Result<Vec<(String, String, String)>> {
    let rows = c
        .query(
            "WITH t AS (SELECT to_regclass(format('%I.%I', $1::text, $2::text)) AS oid) \
             SELECT n.nspname::text, cl.relname::text, cl.relreplident::text \
             FROM (SELECT oid AS relid, 0 AS level FROM t \
                   UNION SELECT relid, level FROM pg_partition_tree((SELECT oid FROM t))) pt \
             JOIN pg_class cl ON cl.oid = pt.relid JOIN pg_namespace n ON n.oid = cl.relnamespace \
             ORDER BY pt.level, 1, 2",
            &[&p.schema, &p.table],
        )
        .await
        .map_err(pg_err(
            "cannot read the replica identity of a table and its partitions",
        ))?;
    Ok(rows
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect())
}

/// Why FULL identity cannot be used on `p`: the publication's column list
/// leaves columns out, and PostgreSQL refuses UPDATE and DELETE of a table
/// whose replica identity its column list does not cover.
pub(super) async fn column_list_conflict(
    c: &Client,
    p: &PubTable,
    publication: &str,
) -> Result<Option<String>> {
    if !p.generated_unpublished.is_empty() {
        return Ok(Some(format!(
            "publication {publication:?} does not publish the generated columns {} of table {:?}: with REPLICA IDENTITY FULL, \
             which capture needs, PostgreSQL 18 would refuse every UPDATE and DELETE of the table (\"Replica identity must not \
             contain unpublished generated columns\"), so nothing was changed on it; publish them (ALTER PUBLICATION … SET \
             (publish_generated_columns = stored)), or leave the table out of the publication",
            p.generated_unpublished.iter().map(|c| format!("{c:?}")).collect::<Vec<_>>().join(", "),
            p.name
        )));
    }
    let Some(list) = &p.columns else {
        return Ok(None);
    };
    let (s, _) = table_schema(c, &p.schema, &p.table).await?;
    let left_out: Vec<&str> = s
        .columns
        .iter()
        .filter(|col| !list.contains(&col.name))
        .map(|col| col.name.as_str())
        .collect();
    if left_out.is_empty() {
        return Ok(None);
    }
    Ok(Some(format!(
        "publication {publication:?} publishes table {:?} with a column list that leaves out {}: with REPLICA IDENTITY FULL, \
         which capture needs, PostgreSQL would refuse every UPDATE and DELETE of the table (\"Column list used by the publication \
         does not cover the replica identity\"), so nothing was changed on it; capture it with its default identity \
         (init --replica-identity default, which a column list allows), publish all of its columns \
         (ALTER PUBLICATION … SET TABLE without a column list), or leave the table out of the publication",
        p.name,
        left_out.iter().map(|c| format!("{c:?}")).collect::<Vec<_>>().join(", ")
    )))
}

/// A relation whose rows a published table publishes: the table itself or a
/// partition below it.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(super) struct Member {
    /// The published table's stream name.
    pub(super) published: String,
    /// The relation's stream name.
    pub(super) name: String,
    pub(super) schema: String,
    pub(super) table: String,
    /// `relreplident`.
    pub(super) ident: String,
}

/// Every relation the publication's tables publish rows of, in one query
/// (a follower asks every few seconds).
pub(super) async fn publication_members(c: &Client, publication: &str) -> Result<Vec<Member>> {
    let rows = c
        .query(
            "SELECT pt.schemaname::text, pt.tablename::text, n.nspname::text, cl.relname::text, cl.relreplident::text \
             FROM pg_publication_tables pt \
             JOIN pg_namespace pn ON pn.nspname = pt.schemaname \
             JOIN pg_class pc ON pc.relnamespace = pn.oid AND pc.relname = pt.tablename \
             CROSS JOIN LATERAL (SELECT pc.oid AS relid UNION SELECT relid FROM pg_partition_tree(pc.oid)) m \
             JOIN pg_class cl ON cl.oid = m.relid JOIN pg_namespace n ON n.oid = cl.relnamespace \
             WHERE pt.pubname = $1 AND cl.relkind IN ('r', 'p')",
            &[&publication],
        )
        .await
        .map_err(pg_err("cannot read the publication's tables and partitions"))?;
    let mut v: Vec<Member> = rows
        .iter()
        .map(|r| {
            let (schema, table): (String, String) = (r.get(2), r.get(3));
            Member {
                published: crate::wire::names::join(&r.get::<_, String>(0), &r.get::<_, String>(1)),
                name: crate::wire::names::join(&schema, &table),
                schema,
                table,
                ident: r.get(4),
            }
        })
        .collect();
    v.sort();
    Ok(v)
}

/// A partition below a published table whose identity is not FULL: its
/// deletes and updates would come without their old values.
/// Only under a FULL root: below one of another identity, the stream
/// carries what each change has (docs/POSTGRES.md, "Replica identity").
pub(super) fn partition_not_full(members: &[Member]) -> Option<Error> {
    let root_full = |m: &Member| {
        members
            .iter()
            .any(|r| r.name == m.published && r.published == m.published && r.ident == "f")
    };
    let m = members
        .iter()
        .find(|m| m.ident != "f" && m.name != m.published && root_full(m))?;
    Some(Error::state(format!(
        "partition {:?} of published table {:?} does not have REPLICA IDENTITY FULL (attached or created after init): \
         its deletes and updates would come without their old values. Run mooncdc-capture upgrade, then start again; \
         or install the DDL trigger (init --ddl), which gives partitions FULL identity as they are attached (docs/POSTGRES.md, partitions)",
        m.name, m.published
    )))
}

/// Why the publication would leave changes out of the stream: one that
/// does not publish all of inserts, updates, deletes and truncates
/// (`publish = '…'`) drops the others without a trace, and the targets
/// would drift from the source. `None` when it publishes all four (or does
/// not exist: the callers say so themselves).
pub(super) async fn publish_gap(c: &Client, publication: &str) -> Result<Option<String>> {
    let row = c
        .query_opt(
            "SELECT pubinsert, pubupdate, pubdelete, pubtruncate FROM pg_publication WHERE pubname = $1",
            &[&publication],
        )
        .await
        .map_err(pg_err("cannot read the publication"))?;
    let Some(row) = row else { return Ok(None) };
    let missing: Vec<&str> = ["insert", "update", "delete", "truncate"]
        .into_iter()
        .enumerate()
        .filter(|(i, _)| !row.get::<_, bool>(*i))
        .map(|(_, a)| a)
        .collect();
    if missing.is_empty() {
        return Ok(None);
    }
    Ok(Some(format!(
        "publication {publication:?} does not publish {}: those changes would never reach the targets; \
         publish them all with ALTER PUBLICATION {} SET (publish = 'insert, update, delete, truncate'), then run the command again",
        missing.join(", "),
        quote_ident(publication)
    )))
}

/// The publication's tables by their stream names (docs/FORMAT.md, "Table
/// names"), sorted bytewise.
pub async fn publication_tables(c: &Client, publication: &str) -> Result<Vec<String>> {
    Ok(publication_detail(c, publication)
        .await?
        .into_iter()
        .map(|p| p.name)
        .collect())
}

/// One table as a publication publishes it.
#[derive(Clone, Debug)]
pub struct PubTable {
    /// The stream's name of the table.
    pub name: String,
    pub schema: String,
    pub table: String,
    /// A partitioned table (published through its root): read with its
    /// partitions. Any other table is read without its inheritance
    /// children (`ONLY`), as pgoutput publishes each relation's own rows.
    pub partitioned: bool,
    /// The columns published (PostgreSQL 15+: all of them without a column
    /// list); `None` on older servers.
    pub columns: Option<Vec<String>>,
    /// The publication's row filter (PostgreSQL 15+), as the server
    /// prints it.
    pub filter: Option<String>,
    /// Generated columns the publication publishes (PostgreSQL 18+:
    /// `publish_generated_columns = stored`, or named in a column list).
    pub generated: Vec<String>,
    /// Generated columns it does not publish, on PostgreSQL 18+ (where FULL
    /// identity over them makes UPDATE and DELETE fail).
    pub generated_unpublished: Vec<String>,
}

/// The publication's tables with their column lists and row filters, sorted
/// by stream name.
pub async fn publication_detail(c: &Client, publication: &str) -> Result<Vec<PubTable>> {
    let version = server_version(c).await?;
    let lists = version >= 150000;
    // Before 18, pgoutput never sends generated columns (although 15-17
    // list them in attnames); from 18 on, attnames says what is published.
    // Virtual generated columns (18) are never published, and FULL identity
    // over one makes UPDATE and DELETE fail as over an unpublished stored
    // one ("Replica identity must not contain unpublished generated
    // columns", checked on 18.6): both kinds count here.
    let generated_published = version >= 180000;
    let sql = format!(
        "SELECT pt.schemaname::text, pt.tablename::text, cl.relkind = 'p', {}, \
         ARRAY(SELECT a.attname::text FROM pg_attribute a WHERE a.attrelid = cl.oid AND a.attnum > 0 \
               AND NOT a.attisdropped AND a.attgenerated <> '') \
         FROM pg_publication_tables pt \
         JOIN pg_namespace n ON n.nspname = pt.schemaname \
         JOIN pg_class cl ON cl.relnamespace = n.oid AND cl.relname = pt.tablename \
         WHERE pt.pubname = $1",
        if lists {
            "pt.attnames::text[], pt.rowfilter::text"
        } else {
            "NULL::text[], NULL::text"
        }
    );
    let rows = c
        .query(&sql, &[&publication])
        .await
        .map_err(pg_err("cannot read the publication's tables"))?;
    let mut out: Vec<PubTable> = rows
        .iter()
        .map(|r| {
            let schema: String = r.get(0);
            let table: String = r.get(1);
            let columns: Option<Vec<String>> = r.get(3);
            let generated_here: Vec<String> = r.get(5);
            let (generated, generated_unpublished) = match &columns {
                Some(list) if generated_published => {
                    generated_here.into_iter().partition(|g| list.contains(g))
                }
                _ => (Vec::new(), Vec::new()),
            };
            PubTable {
                name: crate::wire::names::join(&schema, &table),
                schema,
                table,
                partitioned: r.get(2),
                columns,
                filter: r.get(4),
                generated,
                generated_unpublished,
            }
        })
        .collect();
    out.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(out)
}

/// Refuse to copy a table whose row-level security hides rows from this
/// session's role (no BYPASSRLS, not its owner, or FORCE ROW LEVEL
/// SECURITY): a copy, a chunk or an audit would see part of it and call it
/// whole. `what` names the copy ("a snapshot", …).
pub(super) async fn refuse_hidden_rows(c: &Client, tables: &[&str], what: &str) -> Result<()> {
    for name in tables {
        let (s, t) = super::split_table(name)?;
        let row = c
            .query_one(
                "SELECT row_security_active(format('%I.%I', $1::text, $2::text)::regclass), current_user::text",
                &[&s, &t],
            )
            .await
            .map_err(pg_err("cannot ask whether row-level security applies"))?;
        let (active, role): (bool, String) = (row.get(0), row.get(1));
        if active {
            return Err(Error::state(format!(
                "table {name:?} has row-level security that applies to role {role:?}: {what} would see only the rows its \
                 policies show and call that the whole table. Run it as a role that bypasses them (ALTER ROLE {} BYPASSRLS, \
                 or the table's owner when the table is not FORCE ROW LEVEL SECURITY), or leave the table out \
                 (docs/POSTGRES.md, \"Rights\")",
                quote_ident(&role)
            )));
        }
    }
    Ok(())
}
