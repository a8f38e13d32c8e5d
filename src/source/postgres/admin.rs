//! Installing, checking and acknowledging capture: publication, replica
//! identity, slot (status is in status.rs).

use super::catalog::{published_schema, table_schema};
use super::identity::{identities, index_is_key, set_identity, word, IdentityChoice, IdentityMode};
use super::publication::{
    column_list_conflict, identity_of, publication_detail, publication_tables, publish_gap,
    PubTable,
};
use super::{lsn_text, parse_lsn, repl_err, split_table, sqlstate, table_arg, PgSource, WAL_END};
use crate::error::{Error, Result};
use crate::pg::{pg_err, runtime, server_version};
use crate::source::Verified;
use crate::util::quote_ident;
use crate::wire::Cursor;
use tokio_postgres::{Client, Row};

impl PgSource {
    /// Install capture for `tables` (`schema.table`; default: every table with a
    /// primary key in schemas other than the system ones). Returns the identity.
    pub fn init(&self, tables: &[String]) -> Result<(String, Vec<String>)> {
        self.init_with(tables, true)
    }

    /// [`init`](Self::init); without `make_slot`, the publication and the
    /// identities only (for capture from a standby, whose slot is made
    /// there). On a standby (PostgreSQL 16+), which takes no writes: checks
    /// that the primary's init made the publication and identities, and
    /// makes the slot on the standby.
    pub fn init_with(&self, tables: &[String], make_slot: bool) -> Result<(String, Vec<String>)> {
        runtime()?.block_on(async {
            let c = self.client("init").await?;
            if is_standby(&c).await? {
                return self.init_on_standby(&c, tables, make_slot).await;
            }
            let names = self.tables_to_capture(&c, tables).await?;
            let pub_exists = c
                .query_opt(
                    "SELECT puballtables FROM pg_publication WHERE pubname = $1",
                    &[&self.publication],
                )
                .await
                .map_err(pg_err("cannot read publications"))?;
            self.check_owner(&c, &names, pub_exists.is_none(), make_slot, "init")
                .await?;
            check_tables(&c, &names).await?;
            let qualified = quoted_names(&names)?;
            self.publish_tables(&c, pub_exists, &names, &qualified)
                .await?;
            if let Some(msg) = publish_gap(&c, &self.publication).await? {
                return Err(Error::state(msg));
            }
            let published = publication_detail(&c, &self.publication).await?;
            self.set_identities(&c, &published, tables, &names).await?;
            if make_slot {
                self.ensure_slot(&c).await?;
            }
            let id = self.identity().await?;
            Ok((id, publication_tables(&c, &self.publication).await?))
        })
    }

    /// Whether the publication exists (init and a standby's init both ask).
    async fn publication_exists(&self, c: &Client) -> Result<bool> {
        Ok(c.query_opt(
            "SELECT 1 FROM pg_publication WHERE pubname = $1",
            &[&self.publication],
        )
        .await
        .map_err(pg_err("cannot read publications"))?
        .is_some())
    }

    /// The tables init captures, by their stream names: those `tables`
    /// names, else an existing publication's, else every user table.
    async fn tables_to_capture(&self, c: &Client, tables: &[String]) -> Result<Vec<String>> {
        let existing = self.publication_exists(c).await?;
        let mut names: Vec<String> = if tables.is_empty() && existing {
            // A publication that exists is used as it is: its tables
            // (add others with --table).
            publication_tables(c, &self.publication).await?
        } else if tables.is_empty() {
            user_tables(c).await?
        } else {
            tables.iter().map(|t| table_arg(t)).collect::<Result<_>>()?
        };
        names.dedup();
        Ok(names)
    }

    /// Make the publication with the `qualified` tables when there is none
    /// (`existing` is its `puballtables` row), else add those it lacks.
    async fn publish_tables(
        &self,
        c: &Client,
        existing: Option<Row>,
        names: &[String],
        qualified: &[String],
    ) -> Result<()> {
        match existing {
            None => {
                if qualified.is_empty() {
                    return Err(Error::usage(
                        "no tables to capture (name them with --table schema.table)",
                    ));
                }
                c.batch_execute(&format!(
                    "CREATE PUBLICATION {} FOR TABLE {}",
                    quote_ident(&self.publication),
                    qualified.join(", ")
                ))
                .await
                .map_err(pg_err("cannot create the publication"))?;
            }
            Some(r) => {
                let all: bool = r.get(0);
                if !all {
                    let have = publication_tables(c, &self.publication).await?;
                    for (n, q) in names.iter().zip(qualified) {
                        if !have.contains(n) {
                            c.batch_execute(&format!(
                                "ALTER PUBLICATION {} ADD TABLE {q}",
                                quote_ident(&self.publication)
                            ))
                            .await
                            .map_err(pg_err("cannot add a table to the publication"))?;
                        }
                    }
                }
            }
        }
        Ok(())
    }

    /// Set the replica identity on the `published` tables init names, after
    /// checking that no FULL identity would make the application's writes fail.
    async fn set_identities(
        &self,
        c: &Client,
        published: &[PubTable],
        tables: &[String],
        names: &[String],
    ) -> Result<()> {
        // The identity is set on the tables this init names (all the
        // publication's when it names none), as --replica-identity
        // says (FULL unless it says otherwise); others keep theirs.
        let named = |p: &PubTable| tables.is_empty() || names.contains(&p.name);
        let choice = &self.replica_identity;
        // Never a change that makes the application's own writes fail:
        // under a column list that leaves columns out, FULL identity
        // makes PostgreSQL refuse every UPDATE and DELETE of the table.
        for p in published {
            let full = if named(p) {
                choice.mode_for(&p.name) == IdentityMode::Full
            } else {
                identity_of(c, p).await?.first().is_some_and(|r| r.2 == "f")
            };
            if full {
                if let Some(msg) = column_list_conflict(c, p, &self.publication).await? {
                    return Err(Error::state(msg));
                }
            }
        }
        for p in published.iter().filter(|p| named(p)) {
            set_identity(c, p, choice.mode_for(&p.name)).await?;
        }
        Ok(())
    }

    /// On a standby: the publication and identities must be there (made on
    /// the primary: a standby takes no writes); the slot is made here.
    async fn init_on_standby(
        &self,
        c: &Client,
        tables: &[String],
        make_slot: bool,
    ) -> Result<(String, Vec<String>)> {
        check_standby(c, make_slot).await?;
        let published = self.standby_publication(c, tables).await?;
        self.check_standby_identities(c, tables, &published).await?;
        self.make_standby_slot(c).await?;
        let id = self.identity().await?;
        Ok((id, published.into_iter().map(|p| p.name).collect()))
    }

    /// On a standby: the publication must exist, publish every kind of
    /// change and hold each table named. Returns its tables.
    async fn standby_publication(&self, c: &Client, tables: &[String]) -> Result<Vec<PubTable>> {
        if !self.publication_exists(c).await? {
            return Err(Error::state(format!(
                "this server is a standby and publication {:?} does not exist here (if init --no-slot just made it on the primary, the standby has not replayed it yet: run init here again in a moment): {FIRST_ON_PRIMARY}",
                self.publication
            )));
        }
        if let Some(msg) = publish_gap(c, &self.publication).await? {
            return Err(Error::state(msg));
        }
        let published = publication_detail(c, &self.publication).await?;
        for t in tables {
            let full = table_arg(t)?;
            if !published.iter().any(|p| p.name == full) {
                return Err(Error::state(format!(
                    "this server is a standby and table {full:?} is not in publication {:?}: {FIRST_ON_PRIMARY}",
                    self.publication
                )));
            }
        }
        Ok(published)
    }

    /// On a standby: each published table (and partition) must have a
    /// usable schema and the replica identity capture needs, as it cannot be set here.
    async fn check_standby_identities(
        &self,
        c: &Client,
        tables: &[String],
        published: &[PubTable],
    ) -> Result<()> {
        for p in published {
            published_schema(c, p).await?;
            let rels = identity_of(c, p).await?;
            let want = self.standby_identity_wanted(tables, p);
            for (s, t, ident) in rels {
                let ok = match want {
                    Some(w) => ident == w,
                    None => {
                        ident == "f"
                            || ident == "d"
                            || (ident == "i" && index_is_key(c, &s, &t).await?)
                    }
                };
                if !ok {
                    return Err(Error::state(format!(
                        "this server is a standby and {:?} does not have the replica identity capture needs (it has {}): {FIRST_ON_PRIMARY}",
                        crate::wire::names::join(&s, &t),
                        word(&ident)
                    )));
                }
            }
        }
        Ok(())
    }

    /// The identity a standby's table must have: FULL (`"f"`) when this init
    /// names it (or names none) and wants FULL; `None` when any usable one will do.
    fn standby_identity_wanted(&self, tables: &[String], p: &PubTable) -> Option<&'static str> {
        match (
            tables.is_empty()
                || tables
                    .iter()
                    .any(|t| table_arg(t).is_ok_and(|t| t == p.name)),
            self.replica_identity.mode_for(&p.name),
        ) {
            (true, IdentityMode::Full) => Some("f"),
            _ => None,
        }
    }

    /// Make the slot on a standby, under a 60 s statement timeout, and say
    /// how to hurry the primary when it runs out.
    async fn make_standby_slot(&self, c: &Client) -> Result<()> {
        // The slot waits for the primary's next running-transactions record,
        // which an idle primary may not write for long: bounded, with the
        // way to hurry it.
        c.batch_execute("SET statement_timeout = '60s'")
            .await
            .map_err(pg_err("cannot set a statement timeout"))?;
        let made = self.ensure_slot(c).await;
        let _ = c.batch_execute("RESET statement_timeout").await;
        if let Err(e) = made {
            // 57014: query_canceled, here by the statement timeout.
            if sqlstate(&e).as_deref() == Some("57014") {
                return Err(Error::state(format!(
                    "making slot {:?} on this standby waited 60 s for a running-transactions record from the primary: \
                     run SELECT pg_log_standby_snapshot() on the primary (or write anything there), then init here again",
                    self.slot
                )));
            }
            return Err(e);
        }
        Ok(())
    }

    /// The slot, made when missing (on a standby this waits for the
    /// primary's next running-transactions record, up to ~15 s); an existing
    /// one must be a pgoutput slot of this database.
    async fn ensure_slot(&self, c: &Client) -> Result<()> {
        {
            let slot = c
                .query_opt(
                    "SELECT plugin, database FROM pg_replication_slots WHERE slot_name = $1",
                    &[&self.slot],
                )
                .await
                .map_err(pg_err("cannot read replication slots"))?;
            match slot {
                None => {
                    c.query(
                        "SELECT pg_create_logical_replication_slot($1, 'pgoutput')",
                        &[&self.slot],
                    )
                    .await
                    .map_err(pg_err("cannot create the replication slot"))?;
                }
                Some(r) => {
                    let plugin: Option<String> = r.get(0);
                    let db: Option<String> = r.get(1);
                    if plugin.as_deref() != Some("pgoutput")
                        || db.as_deref() != Some(self.conn.dbname.as_str())
                    {
                        return Err(Error::state(format!(
                            "slot {:?} exists with plugin {:?} in database {:?}; MoonCDC needs a pgoutput slot in {:?}",
                            self.slot, plugin, db, self.conn.dbname
                        )));
                    }
                }
            }
        }
        Ok(())
    }

    /// Make the slot a failover slot (PostgreSQL 17+): `ALTER_REPLICATION_SLOT
    /// … (FAILOVER true)` on a replication session, which a new slot and an
    /// existing one alike take.
    pub fn make_failover(&self) -> Result<String> {
        runtime()?.block_on(async {
            let c = self.client("init --failover").await?;
            let v = server_version(&c).await?;
            if v < 170000 {
                return Err(Error::state(format!(
                    "failover slots need PostgreSQL 17 or later; the server runs {}: after a failover the slot is not on the new primary, and the way back is a new snapshot (docs/POSTGRES.md, \"Versions and topologies\")",
                    v / 10000
                )));
            }
            let (mut r, _) = self.replication_session().await?;
            r.simple_query(&format!(
                "ALTER_REPLICATION_SLOT {} (FAILOVER true)",
                quote_ident(&self.slot)
            ))
            .await
            .map_err(repl_err("cannot make the slot a failover slot"))?;
            r.close().await;
            // Without it a reader may be sent changes a standby does not have
            // yet; promoted, that standby lacks them, and a follower whose
            // target holds them has to start over.
            let waits_for: String = c
                .query_one("SHOW synchronized_standby_slots", &[])
                .await
                .map_err(pg_err("cannot read synchronized_standby_slots"))?
                .get(0);
            if waits_for.trim().is_empty() {
                crate::log::warn(
                    "synchronized_standby_slots is not set on this server: changes may reach the targets before the standby has them, \
                     and after a failover to that standby the follower stops and asks for a new snapshot; list the standby's \
                     physical slot there (ALTER SYSTEM SET synchronized_standby_slots = '…'; SELECT pg_reload_conf())",
                    &[("event", "failover-unprotected".into())],
                );
            }
            Ok(format!(
                "slot {:?} is a failover slot: a standby with sync_replication_slots = on, hot_standby_feedback = on and a \
                 primary_slot_name listed in the primary's synchronized_standby_slots keeps it, so capture goes on after its promotion",
                self.slot
            ))
        })
    }

    /// Re-apply what `init` set up, for the tables already published: each
    /// table's replica identity (FULL, or DEFAULT where init set that or
    /// an index on the key's columns; FULL where it is NOTHING) on it and
    /// its partitions, and the slot if it is missing. Adds no table.
    pub fn upgrade(&self) -> Result<Vec<String>> {
        let (tables, kept) = runtime()?.block_on(async {
            let c = self.client("upgrade").await?;
            let mut kept = IdentityChoice::default();
            for p in publication_detail(&c, &self.publication).await? {
                let root = identity_of(&c, &p).await?.first().map(|r| r.2.clone());
                let mode = match root.as_deref() {
                    Some("d" | "i") => IdentityMode::Default,
                    _ => IdentityMode::Full,
                };
                kept.tables.push((p.name, mode));
            }
            Ok::<_, Error>((publication_tables(&c, &self.publication).await?, kept))
        })?;
        if tables.is_empty() {
            return Err(Error::state(format!(
                "publication {:?} has no tables (run init --table schema.table)",
                self.publication
            )));
        }
        let again = PgSource {
            conn: self.conn.clone(),
            slot: self.slot.clone(),
            publication: self.publication.clone(),
            replica_identity: kept,
        };
        Ok(again.init(&tables)?.1)
    }

    /// Differences from a working capture (empty when all is well), and
    /// each published table's replica identity with its meaning.
    pub fn verify(&self) -> Result<crate::source::Verified> {
        runtime()?.block_on(async {
            let c = self.client("verify").await?;
            let mut drift = Vec::new();
            match slot_info(&c, &self.slot).await? {
                None => drift.push(format!("slot {:?} does not exist (run init)", self.slot)),
                Some(s) => {
                    if s.plugin != "pgoutput" {
                        drift.push(format!(
                            "slot {:?} uses plugin {:?}, not pgoutput",
                            self.slot, s.plugin
                        ));
                    }
                    if s.database != self.conn.dbname {
                        drift.push(format!(
                            "slot {:?} belongs to database {:?}",
                            self.slot, s.database
                        ));
                    }
                    if s.lost {
                        drift.push(s.invalidated(&self.slot).full_message());
                    }
                }
            }
            let exists = c
                .query_opt(
                    "SELECT 1 FROM pg_publication WHERE pubname = $1",
                    &[&self.publication],
                )
                .await
                .map_err(pg_err("cannot read publications"))?;
            if exists.is_none() {
                drift.push(format!(
                    "publication {:?} does not exist (run init)",
                    self.publication
                ));
                return Ok(Verified {
                    drift,
                    ..Default::default()
                });
            }
            if let Some(msg) = publish_gap(&c, &self.publication).await? {
                drift.push(msg);
            }
            let tables = publication_detail(&c, &self.publication).await?;
            if tables.is_empty() {
                drift.push(format!("publication {:?} has no tables", self.publication));
            }
            let replica_identities = (identities(&c, &tables, &mut drift).await?.into_iter())
                .map(|(t, w, m)| (t, w.to_string(), m.to_string()))
                .collect();
            for p in tables {
                let n = &p.name;
                let full = identity_of(&c, &p)
                    .await?
                    .first()
                    .is_some_and(|r| r.2 == "f");
                if full {
                    if let Some(msg) = column_list_conflict(&c, &p, &self.publication).await? {
                        drift.push(msg);
                    }
                }
                if let Err(e) = published_schema(&c, &p).await {
                    drift.push(format!("table {n:?}: {}", e.full_message()));
                }
            }
            Ok(Verified {
                drift,
                replica_identities,
            })
        })
    }

    /// Advance the slot's confirmed position to `cursor.sequence >> 64`. Never
    /// backwards (an older position is a no-op), never past the WAL flushed.
    pub fn ack(&self, cursor: &Cursor) -> Result<u64> {
        runtime()?.block_on(async {
            let id = self.identity().await?;
            if cursor.source != id {
                return Err(Error::state(format!("cursor is for source {:?} but this source is {id:?}", cursor.source)));
            }
            let c = self.client("ack").await?;
            let s = slot_info(&c, &self.slot)
                .await?
                .ok_or_else(|| Error::state(format!("slot {:?} does not exist", self.slot)))?;
            let lsn = (cursor.sequence() >> 64) as u64;
            if lsn <= s.confirmed {
                return Ok(s.confirmed);
            }
            let flushed: String = c
                .query_one(&format!("SELECT {WAL_END}::text"), &[])
                .await
                .map_err(pg_err("cannot read the WAL position"))?
                .get(0);
            if lsn > parse_lsn(&flushed)? {
                return Err(Error::state(format!(
                    "cannot acknowledge through LSN {}: the server has flushed WAL only to {flushed}",
                    lsn_text(lsn)
                )));
            }
            c.query("SELECT pg_replication_slot_advance($1, $2::text::pg_lsn)", &[&self.slot, &lsn_text(lsn)])
                .await
                .map_err(pg_err("cannot advance the slot"))?;
            Ok(lsn)
        })
    }
}

/// The way out when a standby lacks what the primary's init makes.
const FIRST_ON_PRIMARY: &str =
    "make them on the primary first: mooncdc-capture init --no-slot --source PRIMARY (with the same --table and --publication), then run init here again";

/// Whether the server is a standby (in recovery): init then takes the
/// standby's way.
async fn is_standby(c: &Client) -> Result<bool> {
    let standby: bool = c
        .query_one("SELECT pg_is_in_recovery()", &[])
        .await
        .map_err(pg_err("cannot ask whether the server is a standby"))?
        .get(0);
    Ok(standby)
}

/// Every table outside the system schemas, by stream name, sorted: what
/// init captures when it is given no table and no publication exists.
async fn user_tables(c: &Client) -> Result<Vec<String>> {
    // Partitions come with their partitioned table.
    let rows = c
        .query(
            "SELECT n.nspname::text, c.relname::text FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace \
             WHERE c.relkind IN ('r', 'p') AND NOT c.relispartition \
             AND n.nspname NOT IN ('pg_catalog', 'information_schema') \
             AND n.nspname NOT LIKE 'pg\\_%'",
            &[],
        )
        .await
        .map_err(pg_err("cannot list tables"))?;
    let mut v: Vec<String> = rows
        .iter()
        .map(|r| crate::wire::names::join(&r.get::<_, String>(0), &r.get::<_, String>(1)))
        .collect();
    v.sort();
    Ok(v)
}

/// Read each table's schema, so that init refuses a table capture cannot
/// read before it changes anything.
async fn check_tables(c: &Client, names: &[String]) -> Result<()> {
    for n in names {
        let (s, t) = split_table(n)?;
        table_schema(c, &s, &t).await?;
    }
    Ok(())
}

/// The tables as quoted SQL names (`"schema"."table"`), for the
/// publication's DDL.
fn quoted_names(names: &[String]) -> Result<Vec<String>> {
    names
        .iter()
        .map(|n| {
            let (s, t) = split_table(n)?;
            Ok(format!("{}.{}", quote_ident(&s), quote_ident(&t)))
        })
        .collect()
}

/// Whether init can make a slot on this standby: PostgreSQL 16+, a slot
/// asked for, and hot_standby_feedback on (else the slot gets invalidated).
async fn check_standby(c: &Client, make_slot: bool) -> Result<()> {
    let v = server_version(c).await?;
    if v < 160000 {
        return Err(Error::state(format!(
            "this server is a standby running PostgreSQL {}: capture from a standby needs PostgreSQL 16 or later; point --source at the primary",
            v / 10000
        )));
    }
    if !make_slot {
        return Err(Error::usage(
            "this server is a standby, which takes no writes: run init --no-slot against the primary (it makes the publication and identities), then init here (it makes the slot)",
        ));
    }
    let feedback: String = c
        .query_one("SHOW hot_standby_feedback", &[])
        .await
        .map_err(pg_err("cannot read hot_standby_feedback"))?
        .get(0);
    if feedback != "on" {
        return Err(Error::state(
            "this standby has hot_standby_feedback = off: the primary would remove catalog rows the standby's slot needs and invalidate it; set hot_standby_feedback = on on the standby (and reload), then run init again",
        ));
    }
    Ok(())
}

pub(super) struct SlotInfo {
    pub(super) plugin: String,
    pub(super) database: String,
    pub(super) confirmed: u64,
    pub(super) restart: u64,
    pub(super) lost: bool,
    pub(super) active: bool,
    /// PostgreSQL 17+: why the slot was invalidated (`wal_removed`,
    /// `idle_timeout`, `rows_removed`, `wal_level_insufficient`).
    pub(super) invalidation: Option<String>,
}

impl SlotInfo {
    /// The refusal for an invalidated slot, with its reason and the way back.
    pub(super) fn invalidated(&self, slot: &str) -> Error {
        let why = match self.invalidation.as_deref() {
            Some("idle_timeout") => {
                " by the server's idle_replication_slot_timeout (no reader for that long)"
                    .to_string()
            }
            Some("wal_removed") | None => {
                " (the WAL it needed was removed, e.g. past max_slot_wal_keep_size)".to_string()
            }
            Some(r) => format!(" (reason: {r})"),
        };
        Error::state(format!(
            "slot {slot:?} is invalidated{why}: the changes it needed are gone. The way back: drop the slot \
             (SELECT pg_drop_replication_slot('{slot}')), run mooncdc-capture init to make it again, and take a new snapshot \
             into a new target (docs/OPERATIONS.md, \"Starting over\")"
        ))
    }
}

pub(super) async fn slot_info(c: &Client, slot: &str) -> Result<Option<SlotInfo>> {
    let r = c
        .query_opt(
            // invalidation_reason exists from 17 on: read through jsonb, so
            // one query serves every version.
            "SELECT coalesce(plugin, ''), coalesce(database, ''), coalesce(confirmed_flush_lsn::text, '0/0'), \
             coalesce(restart_lsn::text, '0/0'), \
             coalesce(wal_status = 'lost', false) OR to_jsonb(s) ->> 'invalidation_reason' IS NOT NULL, active, \
             to_jsonb(s) ->> 'invalidation_reason' \
             FROM pg_replication_slots s WHERE slot_name = $1",
            &[&slot],
        )
        .await
        .map_err(pg_err("cannot read replication slots"))?;
    let Some(r) = r else { return Ok(None) };
    Ok(Some(SlotInfo {
        plugin: r.get(0),
        database: r.get(1),
        confirmed: parse_lsn(&r.get::<_, String>(2))?,
        restart: parse_lsn(&r.get::<_, String>(3))?,
        lost: r.get(4),
        active: r.get(5),
        invalidation: r.get(6),
    }))
}
