//! `capture backfill`: the requests, recorded in one transaction.

use super::super::catalog::table_schema;
use super::super::publication::{
    identity_of, publication_detail, publication_tables, refuse_hidden_rows,
};
use super::super::{split_table, table_arg, PgSource};
use super::{described, requests, set_up, shape, Request, Shape, PREFIX, SETUP};
use crate::error::{Error, Result};
use crate::pg::{pg_err, runtime, server_version};
use crate::util::quote_ident;
use serde_json::json;
use std::time::{Duration, Instant};
use tokio_postgres::Client;

impl PgSource {
    /// `capture backfill`: one transaction records each request (a row of
    /// `mooncdc.backfill` and its message) and puts a table not yet
    /// published into the publication, with FULL identity, so none of its
    /// changes comes before its request.
    pub fn backfill(&self, tables: &[String], all: bool, resync: bool) -> Result<Vec<String>> {
        runtime()?.block_on(async {
            let c = self.client("backfill").await?;
            refuse_server(&c).await?;
            let names = self.request_names(&c, tables, all).await?;
            let published = publication_tables(&c, &self.publication).await?;
            self.refuse_all_tables(&c).await?;
            // A table it adds to the publication is altered: its owner's to do.
            let adding: Vec<String> = names
                .iter()
                .filter(|n| !published.contains(n))
                .cloned()
                .collect();
            self.check_owner(&c, &adding, false, false, "a backfill request")
                .await?;
            make_tables(&c).await?;
            self.follower_rights(&c, &names).await?;
            self.record_when_free(&c, &names, &published, resync)
                .await?;
            Ok(names)
        })
    }

    /// The tables a request names, each once, or every published one for
    /// `--all`.
    async fn request_names(&self, c: &Client, tables: &[String], all: bool) -> Result<Vec<String>> {
        let names: Vec<String> = if all {
            publication_tables(c, &self.publication).await?
        } else if tables.is_empty() {
            return Err(Error::usage(
                "backfill needs --table NAME (repeatable) or --all",
            ));
        } else {
            tables.iter().map(|t| table_arg(t)).collect::<Result<_>>()?
        };
        // A table named twice (or as `t` and `public.t`) is one request.
        let mut names = names;
        names.sort();
        names.dedup();
        Ok(names)
    }

    /// Refuse a publication that does not exist, or one of every table.
    async fn refuse_all_tables(&self, c: &Client) -> Result<()> {
        let all_tables: bool = c
            .query_opt(
                "SELECT puballtables FROM pg_publication WHERE pubname = $1",
                &[&self.publication],
            )
            .await
            .map_err(pg_err("cannot read publications"))?
            .ok_or_else(|| {
                Error::state(format!(
                    "publication {:?} does not exist (run mooncdc-capture init)",
                    self.publication
                ))
            })?
            .get(0);
        // A publication of every table would publish the backfill's own
        // tables too.
        if all_tables {
            return Err(Error::usage(format!(
                "publication {:?} is FOR ALL TABLES, which would publish the backfill's own tables (mooncdc.backfill): backfill needs a publication that names its tables (mooncdc-capture init makes one)",
                self.publication
            )));
        }
        Ok(())
    }

    /// The rights of the follower reading the slot now, if one does: a
    /// table its role may not read (a chunk needs only SELECT) is refused before
    /// anything is recorded, naming the GRANT (it would warn at every chunk
    /// instead).
    async fn follower_rights(&self, c: &Client, names: &[String]) -> Result<()> {
        let row = c
            .query_opt(
                "SELECT a.usename::text, a.usename = current_user FROM pg_replication_slots s \
                 JOIN pg_stat_activity a ON a.pid = s.active_pid WHERE s.slot_name = $1",
                &[&self.slot],
            )
            .await
            .map_err(pg_err("cannot look at the slot's reader"))?;
        let Some(role) = row.and_then(|r| {
            let (role, same): (Option<String>, bool) = (r.get(0), r.get(1));
            role.filter(|_| !same)
        }) else {
            return Ok(());
        };
        let q = quote_ident(&role);
        for n in names {
            let (s, t) = split_table(n)?;
            let table = format!("{}.{}", quote_ident(&s), quote_ident(&t));
            let ok: bool = c
                .query_one(
                    "SELECT CASE WHEN to_regclass($2::text) IS NULL THEN true ELSE \
                       has_schema_privilege($1::name, (SELECT relnamespace FROM pg_class WHERE oid = to_regclass($2::text)), 'USAGE') \
                       AND has_table_privilege($1::name, $2::text, 'SELECT') END",
                    &[&role, &table],
                )
                .await
                .map_err(pg_err("cannot check the follower's rights"))?
                .get(0);
            if !ok {
                return Err(Error::state(format!(
                    "the follower of slot {:?} runs as role {role:?}, which may not read table {n:?} (USAGE on its schema and \
                     SELECT): GRANT USAGE ON SCHEMA {} TO {q}; GRANT SELECT ON {table} TO {q}; nothing was recorded \
                     (docs/POSTGRES.md, \"Rights\")",
                    self.slot,
                    quote_ident(&s)
                )));
            }
        }
        Ok(())
    }

    /// The requests' transaction, tried again while a table it must alter
    /// is held by another session: each try waits at most
    /// [`LOCK_TIMEOUT`] for a lock, so the application's sessions never
    /// queue behind the request for longer (an ALTER TABLE that waited
    /// would hold every later reader and writer of the table behind it).
    async fn record_when_free(
        &self,
        c: &Client,
        names: &[String],
        published: &[String],
        resync: bool,
    ) -> Result<()> {
        let deadline = Instant::now() + LOCK_WAIT;
        let mut tries = 0u32;
        loop {
            c.batch_execute(&format!(
                "BEGIN ISOLATION LEVEL READ COMMITTED; SET LOCAL lock_timeout = '{}ms'",
                LOCK_TIMEOUT.as_millis()
            ))
            .await
            .map_err(pg_err("cannot begin a transaction"))?;
            // What the try has to say, said once it has committed (a try
            // rolled back for a lock says nothing of what it did).
            let mut say: Vec<Say> = Vec::new();
            let done = self.record(c, names, published, resync, &mut say).await;
            let end = if matches!(done, Ok(None)) {
                "COMMIT"
            } else {
                "ROLLBACK"
            };
            c.batch_execute(end)
                .await
                .map_err(pg_err("cannot commit"))?;
            let Some(table) = done? else {
                say.into_iter().for_each(|s| s());
                return Ok(());
            };
            if Instant::now() >= deadline {
                return Err(Error::state(format!(
                    "table {table:?} was held by other sessions for {} s (a transaction still open on it, a long query, \
                     CREATE INDEX, VACUUM): adding it takes an exclusive lock for a moment, which the request takes only when \
                     it is free, so as never to hold the application up; nothing was recorded. See who holds it \
                     (pg_locks, pg_stat_activity) and try again",
                    LOCK_WAIT.as_secs()
                )));
            }
            if tries == 0 {
                crate::log::info(&format!(
                    "table {table:?} is held by another session: waiting for a moment when it is free (each try queues \
                     the application behind it for at most {} ms; up to {} s)",
                    LOCK_TIMEOUT.as_millis(),
                    LOCK_WAIT.as_secs()
                ));
            }
            tokio::time::sleep(Duration::from_millis(100 << tries.min(3))).await;
            tries += 1;
        }
    }

    /// The requests of [`backfill`](Self::backfill), inside its
    /// transaction; `Some(table)` when a lock on `table` was not granted
    /// within the transaction's lock timeout (nothing is kept then).
    async fn record(
        &self,
        tx: &Client,
        names: &[String],
        published: &[String],
        resync: bool,
        say: &mut Vec<Say>,
    ) -> Result<Option<String>> {
        let known = requests(tx, &self.publication).await?;
        for n in names {
            let (s, t) = split_table(n)?;
            refuse_table(tx, n, &s, &t).await?;
            let added = !published.contains(n);
            if added && !self.add_to_publication(tx, &s, &t).await? {
                return Ok(Some(n.clone()));
            }
            if !self.full_identity(tx, n, added).await? {
                return Ok(Some(n.clone()));
            }
            let sh = shape(tx, &self.publication, n).await?;
            if !sh.scanned.is_empty() {
                say.push(scans_warning(n, &s, &t, &sh));
            }
            refuse_known(&known, n, resync)?;
            let estimate = row_estimate(tx, &s, &t).await?;
            let id = self.insert_request(tx, n, resync, estimate, &sh).await?;
            if added {
                let text = format!("capturing table {n:?}");
                say.push(Box::new(move || crate::log::info(&text)));
            }
            self.emit_request(tx, id, n, &sh).await?;
        }
        Ok(None)
    }

    /// Put table `s`.`t` into the publication; false when its lock was not
    /// granted within the transaction's lock timeout.
    async fn add_to_publication(&self, tx: &Client, s: &str, t: &str) -> Result<bool> {
        match tx
            .batch_execute(&format!(
                "ALTER PUBLICATION {} ADD TABLE {}.{}",
                quote_ident(&self.publication),
                quote_ident(s),
                quote_ident(t)
            ))
            .await
        {
            Err(e) if lock_timeout(&e) => Ok(false),
            r => r
                .map(|()| true)
                .map_err(pg_err("cannot add a table to the publication")),
        }
    }

    /// Give published table `n` FULL identity where it needs it; false when
    /// a lock was not granted within the transaction's lock timeout.
    async fn full_identity(&self, tx: &Client, n: &str, added: bool) -> Result<bool> {
        let p = publication_detail(tx, &self.publication)
            .await?
            .into_iter()
            .find(|p| p.name == n)
            .ok_or_else(|| Error::state(format!("table {n:?} is not published")))?;
        // A table it adds gets FULL identity, as init gives by
        // default; a published one keeps its own, unless NOTHING
        // (docs/POSTGRES.md, "Replica identity").
        for (s, t, ident) in identity_of(tx, &p).await? {
            if ident == "n" || (added && ident != "f") {
                match tx
                    .batch_execute(&format!(
                        "ALTER TABLE {}.{} REPLICA IDENTITY FULL",
                        quote_ident(&s),
                        quote_ident(&t)
                    ))
                    .await
                {
                    Err(e) if lock_timeout(&e) => return Ok(false),
                    r => r.map_err(pg_err("cannot set REPLICA IDENTITY FULL"))?,
                }
            }
        }
        Ok(true)
    }

    /// Record request `n` as a row of `mooncdc.backfill`, with the table as
    /// its chunks will read it: the request's id.
    async fn insert_request(
        &self,
        tx: &Client,
        n: &str,
        resync: bool,
        estimate: i64,
        sh: &Shape,
    ) -> Result<i64> {
        let desc = described(sh).to_string();
        let id: i64 = tx
            .query_one(
                "INSERT INTO mooncdc.backfill(table_name, resync, estimate, described, publication) VALUES ($1, $2, $3, $4, $5) RETURNING id",
                &[&n, &resync, &estimate, &desc, &self.publication],
            )
            .await
            .map_err(pg_err("cannot record the backfill request"))?
            .get(0);
        Ok(id)
    }

    /// Write request `id`'s message into the WAL, in the transaction that
    /// records it, so every follower reads it in commit order.
    async fn emit_request(&self, tx: &Client, id: i64, n: &str, sh: &Shape) -> Result<()> {
        let content = json!({"kind": "request", "request": id, "table": n, "table_is": described(sh), "publication": self.publication}).to_string();
        tx.execute(
            "SELECT pg_logical_emit_message(true, $1, $2::bytea)",
            &[&PREFIX, &content.as_bytes()],
        )
        .await
        .map_err(pg_err("cannot write the backfill request"))?;
        Ok(())
    }
}

/// Refuse a server a request cannot be written on: one before
/// PostgreSQL 14, or a standby (the requests go into the WAL).
async fn refuse_server(c: &Client) -> Result<()> {
    if server_version(c).await? < 140000 {
        return Err(Error::usage("backfill needs PostgreSQL 14 or later"));
    }
    let standby: bool = c
        .query_one("SELECT pg_is_in_recovery()", &[])
        .await
        .map_err(pg_err("cannot ask whether the server is a standby"))?
        .get(0);
    if standby {
        return Err(Error::usage(
            "backfill writes its requests into the WAL: run it against the primary",
        ));
    }
    Ok(())
}

/// Make the backfill's tables, where this version's are not there yet,
/// and give the followers their rights on them.
async fn make_tables(c: &Client) -> Result<()> {
    // The tables and their grants in one transaction: a follower
    // never finds them without its rights. Tables already as this
    // version makes them are left alone (making or altering them
    // needs their owner; granting needs it too, and a grant this
    // role may not give is said, not failed).
    let setup = if set_up(c).await? { "" } else { SETUP };
    c.batch_execute(&format!("BEGIN; {setup}"))
        .await
        .map_err(pg_err("cannot create the backfill tables"))?;
    let granted = grant_followers(c).await;
    let end = if granted.is_ok() {
        "COMMIT"
    } else {
        "ROLLBACK"
    };
    c.batch_execute(end)
        .await
        .map_err(pg_err("cannot create the backfill tables"))?;
    granted
}

/// Refuse table `n` (`s`.`t`) if it does not exist, if the stream cannot
/// carry its schema, or if a policy hides some of its rows.
async fn refuse_table(tx: &Client, n: &str, s: &str, t: &str) -> Result<()> {
    let exists: bool = tx
        .query_one(
            "SELECT to_regclass(format('%I.%I', $1::text, $2::text)) IS NOT NULL",
            &[&s, &t],
        )
        .await
        .map_err(pg_err("cannot look for the table"))?
        .get(0);
    if !exists {
        return Err(Error::usage(format!("table {n:?} does not exist")));
    }
    table_schema(tx, s, t).await?;
    refuse_hidden_rows(tx, &[n], "a backfill").await?;
    Ok(())
}

/// The warning for a table whose chunks each read the table through (its
/// key is text not in byte order), naming the index that would help.
fn scans_warning(n: &str, s: &str, t: &str, sh: &Shape) -> Say {
    // Every key column, in the chunk's order: the index
    // must serve the whole ORDER BY.
    let text = format!(
        "table {n:?}: its key is text in a collation that does not order by bytes, so each chunk reads the \
         table through to find its next rows in byte order (slow on a large table); an index in that order \
         makes each chunk a range read: CREATE INDEX CONCURRENTLY ON {}.{} ({})",
        quote_ident(s),
        quote_ident(t),
        sh.order.join(", ")
    );
    let table = n.to_string();
    Box::new(move || {
        crate::log::warn(
            &text,
            &[("event", "backfill-scans".into()), ("table", table.into())],
        )
    })
}

/// Refuse table `n` if a request of it is still going, or, unless
/// `resync`, if one ever was.
fn refuse_known(known: &[Request], n: &str, resync: bool) -> Result<()> {
    if let Some(r) = known.iter().find(|r| r.table == n && !r.done) {
        return Err(Error::state(format!(
            "table {n:?} is being backfilled already (request {}); nothing was recorded",
            r.id
        )));
    }
    if !resync {
        if let Some(r) = known.iter().rev().find(|r| r.table == n) {
            return Err(Error::state(format!(
                "table {n:?} was backfilled already (request {}); to empty it in the targets and read it again, pass --resync; nothing was recorded",
                r.id
            )));
        }
    }
    Ok(())
}

/// The planner's estimate of the table's rows; a count where there is
/// none yet (a table never analyzed).
async fn row_estimate(tx: &Client, s: &str, t: &str) -> Result<i64> {
    let mut estimate: i64 = tx
        .query_one(
            "SELECT reltuples::bigint FROM pg_class WHERE oid = format('%I.%I', $1::text, $2::text)::regclass",
            &[&s, &t],
        )
        .await
        .map_err(pg_err("cannot read the table's size"))?
        .get(0);
    if estimate <= 0 {
        estimate = tx
            .query_one(
                &format!(
                    "SELECT count(*) FROM ONLY {}.{}",
                    quote_ident(s),
                    quote_ident(t)
                ),
                &[],
            )
            .await
            .map_err(pg_err("cannot count the table's rows"))?
            .get(0);
    }
    Ok(estimate)
}

/// A line to say once the requests' transaction has committed.
type Say = Box<dyn FnOnce()>;

/// How long one try of the requests' transaction waits for a lock.
const LOCK_TIMEOUT: Duration = Duration::from_millis(100);
/// How long `capture backfill` keeps trying.
const LOCK_WAIT: Duration = Duration::from_secs(120);

fn lock_timeout(e: &tokio_postgres::Error) -> bool {
    e.code() == Some(&tokio_postgres::error::SqlState::LOCK_NOT_AVAILABLE)
}

/// Every role that may read a slot (`REPLICATION`, login, not a superuser:
/// every follower's) is given what a follower needs on the backfill's own
/// tables, which this role made; such a role reads the whole WAL already,
/// so these tables add nothing it could not see. A grant this role may not
/// give is said, with the statement for their owner.
async fn grant_followers(c: &Client) -> Result<()> {
    let roles: Vec<String> = c
        .query(
            "SELECT rolname::text FROM pg_roles WHERE rolreplication AND rolcanlogin AND NOT rolsuper \
             AND rolname <> current_user",
            &[],
        )
        .await
        .map_err(pg_err("cannot list the roles that read slots"))?
        .iter()
        .map(|r| r.get(0))
        .collect();
    for role in &roles {
        let q = quote_ident(role);
        // Each in a savepoint: one that fails leaves the transaction going.
        c.batch_execute("SAVEPOINT grant_follower")
            .await
            .map_err(pg_err("cannot grant a follower its rights"))?;
        if let Err(e) = c
            .batch_execute(&format!(
                "GRANT USAGE ON SCHEMA mooncdc TO {q}; \
                 GRANT SELECT, INSERT, UPDATE ON mooncdc.backfill, mooncdc.backfill_chunks TO {q}"
            ))
            .await
        {
            c.batch_execute("ROLLBACK TO SAVEPOINT grant_follower")
                .await
                .map_err(pg_err("cannot grant a follower its rights"))?;
            crate::log::warn(
                &format!(
                    "cannot give role {role:?} its rights on the backfill's tables: {}; grant them as their owner: \
                     GRANT USAGE ON SCHEMA mooncdc TO {q}; GRANT SELECT, INSERT, UPDATE ON mooncdc.backfill, \
                     mooncdc.backfill_chunks TO {q}",
                    pg_err("GRANT")(e).full_message()
                ),
                &[("event", "backfill-rights".into())],
            );
        }
    }
    Ok(())
}
