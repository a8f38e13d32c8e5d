//! Replica identity: what a captured table's updates and deletes carry of
//! the old row (docs/POSTGRES.md, "Replica identity").
//!
//! - `FULL` (init's default): the whole old row, and every value of the
//!   new one. Costs WAL: PostgreSQL writes the old row's TOASTed values
//!   out in full.
//! - `DEFAULT`, or `USING INDEX` on an index of exactly the primary key's
//!   columns: the old row's key only (a `before_key`), and an unchanged
//!   TOASTed value of the new row as `unchanged`; the targets fill both
//!   from the rows they hold.
//! - `USING INDEX` on other columns, or `NOTHING`: refused (the first
//!   names rows by columns the targets do not key on; PostgreSQL refuses
//!   the updates and deletes of the second while it is published).

use super::publication::{identity_of, PubTable};
use super::table_arg;
use crate::error::{Error, Result};
use crate::pg::pg_err;
use crate::source::StatusField;
use crate::util::quote_ident;
use tokio_postgres::Client;

/// An identity `init` sets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IdentityMode {
    Full,
    Default,
}

impl IdentityMode {
    fn parse(s: &str) -> Option<Self> {
        match s {
            "full" => Some(IdentityMode::Full),
            "default" => Some(IdentityMode::Default),
            _ => None,
        }
    }
}

/// `init --replica-identity`: a mode for every table init sets up, and
/// modes for named tables (the later of two for one table wins).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct IdentityChoice {
    pub all: Option<IdentityMode>,
    pub tables: Vec<(String, IdentityMode)>,
}

impl IdentityChoice {
    /// From the arguments: `full`, `default`, or `TABLE=full|default`.
    pub fn parse(args: &[String]) -> Result<Self> {
        let mut c = IdentityChoice::default();
        for a in args {
            if let Some(m) = IdentityMode::parse(a) {
                c.all = Some(m);
                continue;
            }
            let bad = || {
                Error::usage(format!(
                    "--replica-identity {a:?}: give full, default, or TABLE=full|default (TABLE as schema.table)"
                ))
            };
            let (t, m) = a.rsplit_once('=').ok_or_else(bad)?;
            let m = IdentityMode::parse(m).ok_or_else(bad)?;
            c.tables.push((table_arg(t)?, m));
        }
        Ok(c)
    }

    /// The mode for `table` (a stream name): its own, else the one for
    /// all, else FULL.
    pub(super) fn mode_for(&self, table: &str) -> IdentityMode {
        (self.tables.iter().rev())
            .find(|(t, _)| t == table)
            .map(|(_, m)| *m)
            .or(self.all)
            .unwrap_or(IdentityMode::Full)
    }
}

/// Whether the index a relation's `USING INDEX` identity names has
/// exactly the primary key's columns.
pub(super) async fn index_is_key(c: &Client, schema: &str, table: &str) -> Result<bool> {
    let r = c
        .query_one(
            "WITH t AS (SELECT to_regclass(format('%I.%I', $1::text, $2::text)) AS oid) \
             SELECT coalesce( \
               (SELECT array(SELECT x FROM unnest(i.indkey::int2[]) x ORDER BY x) FROM pg_index i, t \
                WHERE i.indrelid = t.oid AND i.indisreplident) = \
               (SELECT array(SELECT x FROM unnest(i.indkey::int2[]) x ORDER BY x) FROM pg_index i, t \
                WHERE i.indrelid = t.oid AND i.indisprimary), false)",
            &[&schema, &table],
        )
        .await
        .map_err(pg_err("cannot read a table's replica identity index"))?;
    Ok(r.get(0))
}

/// What a relation's identity (`relreplident`) gives the stream, in words;
/// `Err` with the words when capture cannot use it.
pub(super) fn meaning(
    ident: &str,
    key_index: bool,
) -> std::result::Result<&'static str, &'static str> {
    match (ident, key_index) {
        ("f", _) => Ok("FULL: updates and deletes carry the whole old row"),
        ("d", _) => Ok("DEFAULT: updates and deletes carry the old row's key only, and an unchanged TOASTed value comes as \
                        unchanged; the targets fill both from the rows they hold"),
        ("i", true) => Ok("USING INDEX on the primary key's columns: as DEFAULT"),
        ("i", false) => Err("USING INDEX on columns that are not the primary key's: the targets find rows by the primary key, \
                             which these changes would not carry; set REPLICA IDENTITY DEFAULT or FULL \
                             (mooncdc-capture init --replica-identity default|full)"),
        _ => Err("NOTHING: PostgreSQL refuses the table's updates and deletes while it is published; set REPLICA IDENTITY \
                  DEFAULT or FULL (mooncdc-capture init --replica-identity default|full)"),
    }
}

/// The word for a `relreplident`.
pub(super) fn word(ident: &str) -> &'static str {
    match ident {
        "f" => "full",
        "d" => "default",
        "i" => "index",
        _ => "nothing",
    }
}

/// Each published table's identity and what it means (`verify`, `status`):
/// (table, word, meaning); `problems` gets what capture cannot use,
/// partitions included (under a FULL root, a partition must be FULL too:
/// its changes come under the root's mark).
pub(super) async fn identities(
    c: &Client,
    tables: &[PubTable],
    problems: &mut Vec<String>,
) -> Result<Vec<(String, &'static str, &'static str)>> {
    let mut out = Vec::new();
    for p in tables {
        let rels = identity_of(c, p).await?;
        let root = rels.first().map(|r| r.2.clone()).unwrap_or_default();
        for (s, t, ident) in &rels {
            let this = crate::wire::names::join(s, t);
            let key = ident == "i" && index_is_key(c, s, t).await?;
            let is_root = this == p.name;
            match meaning(ident, key) {
                Ok(m) if is_root => out.push((this, word(ident), m)),
                Ok(_) if root == "f" && ident != "f" => problems.push(format!(
                    "partition {this:?} of table {:?} does not have REPLICA IDENTITY FULL, as its table has: its deletes and updates \
                     would come without their old values (run mooncdc-capture upgrade)",
                    p.name
                )),
                Ok(_) => {}
                Err(why) if is_root => {
                    out.push((this.clone(), word(ident), why));
                    problems.push(format!("table {this:?} has REPLICA IDENTITY {why}"));
                }
                Err(why) => problems.push(format!(
                    "partition {this:?} of table {:?} has REPLICA IDENTITY {why}",
                    p.name
                )),
            }
        }
    }
    Ok(out)
}

/// Each published table's own identity and what it means, from the
/// catalog alone: no lock on any table, so `status`, which operators and
/// tests poll while the tables change, never waits behind an `ALTER TABLE`
/// nor makes one wait (partitions are `verify`'s business).
pub(super) async fn root_identities(
    c: &Client,
    tables: &[PubTable],
) -> Result<Vec<(String, &'static str, &'static str)>> {
    let mut out = Vec::new();
    for p in tables {
        let ident: String = c
            .query_one(
                "SELECT coalesce((SELECT relreplident::text FROM pg_class \
                 WHERE oid = to_regclass(format('%I.%I', $1::text, $2::text))), '')",
                &[&p.schema, &p.table],
            )
            .await
            .map_err(pg_err("cannot read a table's replica identity"))?
            .get(0);
        let key = ident == "i" && index_is_key(c, &p.schema, &p.table).await?;
        let m = meaning(&ident, key).unwrap_or_else(|why| why);
        out.push((p.name.clone(), word(&ident), m));
    }
    Ok(out)
}

/// The `status` figure: each table's identity and what it means.
pub(super) fn identity_field(idents: &[(String, &'static str, &'static str)]) -> StatusField {
    let text = (idents.iter())
        .map(|(t, w, _)| format!("{t} {w}"))
        .collect::<Vec<_>>()
        .join(", ");
    let json: Vec<serde_json::Value> = (idents.iter())
        .map(|(t, w, m)| serde_json::json!({"table": t, "identity": w, "meaning": m}))
        .collect();
    StatusField::new("replica_identity", serde_json::Value::Array(json)).with_text(
        if text.is_empty() {
            "no tables".into()
        } else {
            text
        },
    )
}

/// Set the identity `mode` on a published table and its partitions:
/// FULL where it is not; DEFAULT where it is FULL or NOTHING (an index on
/// the key's columns is kept, one on other columns refused).
pub(super) async fn set_identity(c: &Client, p: &PubTable, mode: IdentityMode) -> Result<()> {
    for (s, t, ident) in identity_of(c, p).await? {
        let q = format!("{}.{}", quote_ident(&s), quote_ident(&t));
        let to = match (mode, ident.as_str()) {
            (IdentityMode::Full, "f") => None,
            (IdentityMode::Full, _) => Some("FULL"),
            (IdentityMode::Default, "d") => None,
            (IdentityMode::Default, "i") => {
                if !index_is_key(c, &s, &t).await? {
                    return Err(Error::state(format!(
                        "table {:?} has REPLICA IDENTITY USING INDEX on columns that are not its primary key's: the targets \
                         find rows by the primary key; set REPLICA IDENTITY DEFAULT on it (ALTER TABLE {q} REPLICA IDENTITY \
                         DEFAULT), or capture it with --replica-identity full",
                        crate::wire::names::join(&s, &t)
                    )));
                }
                None
            }
            (IdentityMode::Default, _) => Some("DEFAULT"),
        };
        if let Some(to) = to {
            c.batch_execute(&format!("ALTER TABLE {q} REPLICA IDENTITY {to}"))
                .await
                .map_err(pg_err(&format!("cannot set REPLICA IDENTITY {to}")))?;
        }
    }
    Ok(())
}
