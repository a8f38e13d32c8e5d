//! What a role may do, checked before a command starts so that a missing
//! right is named with its GRANT instead of the server's bare "permission
//! denied" halfway through; and `capture grants`, the script that gives a
//! capture role what it needs (docs/POSTGRES.md, "Rights").

use super::publication::publication_detail;
use super::{split_table, PgSource};
use crate::error::{Error, Result};
use crate::pg::{pg_err, runtime};
use crate::util::quote_ident;
use tokio_postgres::Client;

/// The role of this session: its name, and whether it may read slots
/// (`REPLICATION` or a superuser).
async fn this_role(c: &Client) -> Result<(String, bool)> {
    let r = c
        .query_one(
            "SELECT current_user::text, rolreplication OR rolsuper FROM pg_roles WHERE rolname = current_user",
            &[],
        )
        .await
        .map_err(pg_err("cannot read this session's role"))?;
    Ok((r.get(0), r.get(1)))
}

/// The GRANTs `role` lacks to read `tables` (USAGE on their schemas, SELECT
/// on them), one statement each; one query for them all.
async fn missing_reads(c: &Client, role: &str, tables: &[String]) -> Result<Vec<String>> {
    let q = quote_ident(role);
    let mut schemas = Vec::new();
    let mut names = Vec::new();
    for name in tables {
        let (s, t) = split_table(name)?;
        schemas.push(s);
        names.push(t);
    }
    let rows = c
        .query(
            "SELECT t.s, t.r, has_schema_privilege($1::name, n.oid, 'USAGE'), has_table_privilege($1::name, c.oid, 'SELECT') \
             FROM unnest($2::text[], $3::text[]) WITH ORDINALITY AS t(s, r, i) \
             JOIN pg_namespace n ON n.nspname = t.s JOIN pg_class c ON c.relnamespace = n.oid AND c.relname = t.r \
             ORDER BY t.i",
            &[&role, &schemas, &names],
        )
        .await
        .map_err(pg_err("cannot read the tables' rights"))?;
    let mut missing = Vec::new();
    for r in &rows {
        let (s, t, usage, select): (String, String, bool, bool) =
            (r.get(0), r.get(1), r.get(2), r.get(3));
        let schema_grant = format!("GRANT USAGE ON SCHEMA {} TO {q}", quote_ident(&s));
        if !usage && !missing.contains(&schema_grant) {
            missing.push(schema_grant);
        }
        if !select {
            missing.push(format!(
                "GRANT SELECT ON {}.{} TO {q}",
                quote_ident(&s),
                quote_ident(&t)
            ));
        }
    }
    Ok(missing)
}

/// The GRANTs `role` lacks on the backfill's own tables, when they exist
/// (every read looks at the requests there).
async fn missing_backfill(c: &Client, role: &str) -> Result<Vec<String>> {
    if !super::backfill::installed(c).await? {
        return Ok(Vec::new());
    }
    let r = c
        .query_one(
            "SELECT has_schema_privilege($1::name, 'mooncdc', 'USAGE'), \
                    (SELECT bool_and(has_table_privilege($1::name, t, p)) \
                     FROM unnest(ARRAY['mooncdc.backfill', 'mooncdc.backfill_chunks']) t, \
                          unnest(ARRAY['SELECT', 'INSERT', 'UPDATE']) p)",
            &[&role],
        )
        .await
        .map_err(pg_err("cannot read the backfill tables' rights"))?;
    let (usage, tables): (bool, bool) = (r.get(0), r.get(1));
    let q = quote_ident(role);
    let mut missing = Vec::new();
    if !usage {
        missing.push(format!("GRANT USAGE ON SCHEMA mooncdc TO {q}"));
    }
    if !tables {
        missing.push(format!(
            "GRANT SELECT, INSERT, UPDATE ON mooncdc.backfill, mooncdc.backfill_chunks TO {q}"
        ));
    }
    Ok(missing)
}

impl PgSource {
    /// Before `what` (a snapshot, an audit) reads the publication's tables
    /// (`tables`, or all of them): this role may read slots (when `slots`)
    /// and each table, or the error names every GRANT missing.
    pub(super) async fn check_reader(
        &self,
        c: &Client,
        tables: &[String],
        slots: bool,
        what: &str,
    ) -> Result<()> {
        let (role, replication) = this_role(c).await?;
        let q = quote_ident(&role);
        let mut missing = Vec::new();
        if slots && !replication {
            missing.push(format!("ALTER ROLE {q} REPLICATION"));
        }
        missing.extend(missing_reads(c, &role, tables).await?);
        missing.extend(missing_backfill(c, &role).await?);
        if missing.is_empty() {
            return Ok(());
        }
        Err(Error::state(format!(
            "role {role:?} may not run {what} on publication {:?}: it needs {}; (mooncdc-capture grants --role {role} \
             prints the whole script; docs/POSTGRES.md, \"Rights\")",
            self.publication,
            missing.join("; ")
        )))
    }

    /// Before `init` or a backfill request alters `tables`: this role owns
    /// each (or is a member of its owner), may create the publication when
    /// `publication` is to be made, and may make the slot when `slot`.
    pub(super) async fn check_owner(
        &self,
        c: &Client,
        tables: &[String],
        publication: bool,
        slot: bool,
        what: &str,
    ) -> Result<()> {
        let (role, replication) = this_role(c).await?;
        let mut missing = Vec::new();
        if slot && !replication {
            missing.push(format!(
                "the REPLICATION attribute, to make the slot (ALTER ROLE {} REPLICATION, as a superuser)",
                quote_ident(&role)
            ));
        }
        if publication {
            let create: bool = c
                .query_one(
                    "SELECT has_database_privilege(current_database(), 'CREATE')",
                    &[],
                )
                .await
                .map_err(pg_err("cannot read the database's rights"))?
                .get(0);
            if !create {
                missing.push(format!(
                    "CREATE on the database, to make the publication (GRANT CREATE ON DATABASE {} TO {})",
                    quote_ident(&self.conn.dbname),
                    quote_ident(&role)
                ));
            }
        }
        for name in tables {
            let (s, t) = split_table(name)?;
            let owner: Option<(bool, String)> = c
                .query_opt(
                    "SELECT pg_has_role(c.relowner, 'USAGE'), pg_get_userbyid(c.relowner)::text \
                     FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1 AND c.relname = $2",
                    &[&s, &t],
                )
                .await
                .map_err(pg_err("cannot read a table's owner"))?
                .map(|r| (r.get(0), r.get(1)));
            if let Some((false, owner)) = owner {
                missing.push(format!(
                    "the ownership of table {name:?} (its replica identity and publication are its owner's to change: run {what} \
                     as {owner:?}, or a member of it, or a superuser)"
                ));
            }
        }
        if missing.is_empty() {
            return Ok(());
        }
        Err(Error::state(format!(
            "role {role:?} may not run {what}: it needs {} (docs/POSTGRES.md, \"Rights\"); nothing was changed",
            missing.join("; ")
        )))
    }

    /// `capture grants --role ROLE`: the SQL that gives a capture role what
    /// snapshot, reads, status, audit and backfill chunks need on this
    /// publication's tables, for a superuser and the tables' owner to run.
    pub fn grants(&self, role: &str) -> Result<String> {
        runtime()?.block_on(async {
            let c = self.client("grants").await?;
            let published = publication_detail(&c, &self.publication).await?;
            if published.is_empty() {
                return Err(Error::state(format!(
                    "publication {:?} has no table (run mooncdc-capture init first)",
                    self.publication
                )));
            }
            let q = quote_ident(role);
            let exists: Option<bool> = c
                .query_opt(
                    "SELECT rolreplication OR rolsuper FROM pg_roles WHERE rolname = $1",
                    &[&role],
                )
                .await
                .map_err(pg_err("cannot read roles"))?
                .map(|r| r.get(0));
            let mut out = format!(
                "-- What role {role:?} needs to snapshot, follow, audit and backfill publication {:?}\n\
                 -- (docs/POSTGRES.md, \"Rights\"). As a superuser:\n",
                self.publication
            );
            match exists {
                None => out.push_str(&format!(
                    "CREATE ROLE {q} LOGIN REPLICATION PASSWORD 'change me';\n"
                )),
                Some(false) => out.push_str(&format!("ALTER ROLE {q} REPLICATION;\n")),
                Some(true) => out.push_str("-- (the role exists and may read slots)\n"),
            }
            let mut schemas: Vec<String> = published.iter().map(|p| quote_ident(&p.schema)).collect();
            schemas.sort();
            schemas.dedup();
            let tables: Vec<String> = published
                .iter()
                .map(|p| format!("{}.{}", quote_ident(&p.schema), quote_ident(&p.table)))
                .collect();
            out.push_str(&format!(
                "-- As the owner of the database, of the schemas and of the tables (or a superuser):\n\
                 GRANT CONNECT ON DATABASE {} TO {q};\n\
                 GRANT USAGE ON SCHEMA {} TO {q};\n\
                 GRANT SELECT ON {} TO {q};\n\
                 -- Tables made later, when they will be published (each schema; as their maker):\n",
                quote_ident(&self.conn.dbname),
                schemas.join(", "),
                tables.join(", ")
            ));
            for s in &schemas {
                out.push_str(&format!(
                    "ALTER DEFAULT PRIVILEGES IN SCHEMA {s} GRANT SELECT ON TABLES TO {q};\n"
                ));
            }
            if super::backfill::installed(&c).await? {
                out.push_str(&format!(
                    "-- As the owner of the backfill's tables (made by the first backfill request):\n\
                     GRANT USAGE ON SCHEMA mooncdc TO {q};\n\
                     GRANT SELECT, INSERT, UPDATE ON mooncdc.backfill, mooncdc.backfill_chunks TO {q};\n"
                ));
            }
            Ok(out)
        })
    }
}
