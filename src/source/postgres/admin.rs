//! Installing, checking and acknowledging capture: publication, replica
//! identity, slot; status.

use super::*;
use crate::source::StatusField;

impl PgSource {
    /// Install capture for `tables` (`schema.table`; default: every table with a
    /// primary key in schemas other than the system ones). Returns the identity.
    pub fn init(&self, tables: &[String]) -> Result<(String, Vec<String>)> {
        runtime()?.block_on(async {
            let c = self.client("init").await?;
            let mut names: Vec<String> = if tables.is_empty() {
                let rows = c
                    .query(
                        "SELECT n.nspname || '.' || c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace \
                         WHERE c.relkind IN ('r', 'p') AND n.nspname NOT IN ('pg_catalog', 'information_schema') \
                         AND n.nspname NOT LIKE 'pg\\_%' ORDER BY 1",
                        &[],
                    )
                    .await
                    .map_err(pg_err("cannot list tables"))?;
                rows.iter().map(|r| r.get::<_, String>(0)).collect()
            } else {
                tables.to_vec()
            };
            names.dedup();
            for n in &names {
                let (s, t) = split_table(n);
                table_schema(&c, &s, &t).await?;
            }
            let pub_exists = c
                .query_opt("SELECT puballtables FROM pg_publication WHERE pubname = $1", &[&self.publication])
                .await
                .map_err(pg_err("cannot read publications"))?;
            let qualified: Vec<String> = names
                .iter()
                .map(|n| {
                    let (s, t) = split_table(n);
                    format!("{}.{}", quote_ident(&s), quote_ident(&t))
                })
                .collect();
            match pub_exists {
                None => {
                    if qualified.is_empty() {
                        return Err(Error::usage("no tables to capture (name them with --table schema.table)"));
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
                        let have = publication_tables(&c, &self.publication).await?;
                        for (n, q) in names.iter().zip(&qualified) {
                            if !have.contains(n) {
                                c.batch_execute(&format!("ALTER PUBLICATION {} ADD TABLE {q}", quote_ident(&self.publication)))
                                    .await
                                    .map_err(pg_err("cannot add a table to the publication"))?;
                            }
                        }
                    }
                }
            }
            for n in publication_tables(&c, &self.publication).await? {
                let (s, t) = split_table(&n);
                c.batch_execute(&format!("ALTER TABLE {}.{} REPLICA IDENTITY FULL", quote_ident(&s), quote_ident(&t)))
                    .await
                    .map_err(pg_err("cannot set REPLICA IDENTITY FULL"))?;
            }
            let slot = c
                .query_opt("SELECT plugin, database FROM pg_replication_slots WHERE slot_name = $1", &[&self.slot])
                .await
                .map_err(pg_err("cannot read replication slots"))?;
            match slot {
                None => {
                    c.query("SELECT pg_create_logical_replication_slot($1, 'pgoutput')", &[&self.slot])
                        .await
                        .map_err(pg_err("cannot create the replication slot"))?;
                }
                Some(r) => {
                    let plugin: Option<String> = r.get(0);
                    let db: Option<String> = r.get(1);
                    if plugin.as_deref() != Some("pgoutput") || db.as_deref() != Some(self.conn.dbname.as_str()) {
                        return Err(Error::state(format!(
                            "slot {:?} exists with plugin {:?} in database {:?}; MoonCDC needs a pgoutput slot in {:?}",
                            self.slot, plugin, db, self.conn.dbname
                        )));
                    }
                }
            }
            let id = self.identity().await?;
            Ok((id, publication_tables(&c, &self.publication).await?))
        })
    }

    /// Re-apply what `init` set up, for the tables already published: replica
    /// identity FULL on each, and the slot if it is missing. Adds no table.
    pub fn upgrade(&self) -> Result<Vec<String>> {
        let tables = runtime()?.block_on(async {
            let c = self.client("upgrade").await?;
            publication_tables(&c, &self.publication).await
        })?;
        if tables.is_empty() {
            return Err(Error::state(format!(
                "publication {:?} has no tables (run init --table schema.table)",
                self.publication
            )));
        }
        Ok(self.init(&tables)?.1)
    }

    /// Differences from a working capture; empty when all is well.
    pub fn verify(&self) -> Result<Vec<String>> {
        runtime()?.block_on(async {
            let c = self.client("verify").await?;
            let mut drift = Vec::new();
            match slot_info(&c, &self.slot).await? {
                None => drift.push(format!("slot {:?} does not exist (run init)", self.slot)),
                Some(s) => {
                    if s.plugin != "pgoutput" {
                        drift.push(format!("slot {:?} uses plugin {:?}, not pgoutput", self.slot, s.plugin));
                    }
                    if s.database != self.conn.dbname {
                        drift.push(format!("slot {:?} belongs to database {:?}", self.slot, s.database));
                    }
                    if s.lost {
                        drift.push(format!("slot {:?} is invalidated (its WAL was removed); take a new snapshot", self.slot));
                    }
                }
            }
            let exists = c
                .query_opt("SELECT 1 FROM pg_publication WHERE pubname = $1", &[&self.publication])
                .await
                .map_err(pg_err("cannot read publications"))?;
            if exists.is_none() {
                drift.push(format!("publication {:?} does not exist (run init)", self.publication));
                return Ok(drift);
            }
            let tables = publication_tables(&c, &self.publication).await?;
            if tables.is_empty() {
                drift.push(format!("publication {:?} has no tables", self.publication));
            }
            for n in tables {
                let (s, t) = split_table(&n);
                let ident: Option<String> = c
                    .query_opt(
                        "SELECT relreplident::text FROM pg_class WHERE oid = to_regclass(format('%I.%I', $1::text, $2::text))",
                        &[&s, &t],
                    )
                    .await
                    .map_err(pg_err("cannot read a table's replica identity"))?
                    .map(|r| r.get(0));
                if ident.as_deref() != Some("f") {
                    drift.push(format!("table {n:?} does not have REPLICA IDENTITY FULL (run init)"));
                }
                if let Err(e) = table_schema(&c, &s, &t).await {
                    drift.push(format!("table {n:?}: {}", e.full_message()));
                }
            }
            Ok(drift)
        })
    }

    /// Identity, slot positions, WAL retained and lag.
    pub fn status(&self) -> Result<SourceStatus> {
        runtime()?.block_on(async {
            let c = self.client("status").await?;
            let id = self.identity().await?;
            let s = slot_info(&c, &self.slot)
                .await?
                .ok_or_else(|| Error::state(format!("slot {:?} does not exist (run init)", self.slot)))?;
            let r = c
                .query_one(
                    "SELECT pg_current_wal_flush_lsn()::text, \
                     pg_wal_lsn_diff(pg_current_wal_flush_lsn(), restart_lsn)::bigint, \
                     pg_wal_lsn_diff(pg_current_wal_flush_lsn(), confirmed_flush_lsn)::bigint, active, \
                     coalesce(wal_status, ''), safe_wal_size \
                     FROM pg_replication_slots WHERE slot_name = $1",
                    &[&self.slot],
                )
                .await
                .map_err(pg_err("cannot read the slot"))?;
            let wal: String = r.get(0);
            let retained: Option<i64> = r.get(1);
            let lag: Option<i64> = r.get(2);
            let active: bool = r.get(3);
            let wal_status: String = r.get(4);
            // NULL when max_slot_wal_keep_size is -1: nothing bounds it.
            let safe: Option<i64> = r.get(5);
            Ok(SourceStatus {
                identity: id.clone(),
                fields: {
                    let acked = Cursor::new(id, sequence(s.confirmed, 0)).to_json();
                    let bytes = |name, n: Option<i64>| StatusField::count(name, n.unwrap_or(0).max(0) as u128);
                    vec![
                        StatusField::new(
                            "acknowledged",
                            serde_json::from_str::<serde_json::Value>(&acked).expect("a cursor is JSON"),
                        )
                        .with_text(acked),
                        StatusField::new("confirmed_flush_lsn", lsn_text(s.confirmed)),
                        StatusField::new("restart_lsn", lsn_text(s.restart)),
                        StatusField::new("wal_flush_lsn", wal),
                        bytes("wal_retained_bytes", retained),
                        bytes("lag_bytes", lag),
                        StatusField::new("slot_active", active),
                        StatusField::new("wal_status", wal_status),
                        // JSON null when nothing bounds the slot's WAL.
                        match safe {
                            Some(b) => bytes("safe_wal_size", Some(b)),
                            None => StatusField::new("safe_wal_size", serde_json::Value::Null)
                                .with_text("unlimited (max_slot_wal_keep_size = -1)"),
                        },
                    ]
                },
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
                .query_one("SELECT pg_current_wal_flush_lsn()::text", &[])
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

pub(super) struct SlotInfo {
    pub(super) plugin: String,
    pub(super) database: String,
    pub(super) confirmed: u64,
    pub(super) restart: u64,
    pub(super) lost: bool,
    pub(super) active: bool,
}

pub(super) async fn slot_info(c: &Client, slot: &str) -> Result<Option<SlotInfo>> {
    let r = c
        .query_opt(
            "SELECT coalesce(plugin, ''), coalesce(database, ''), coalesce(confirmed_flush_lsn::text, '0/0'), \
             coalesce(restart_lsn::text, '0/0'), coalesce(wal_status = 'lost', false), active \
             FROM pg_replication_slots WHERE slot_name = $1",
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
    }))
}

/// The publication's tables as `schema.table`, sorted.
pub async fn publication_tables(c: &Client, publication: &str) -> Result<Vec<String>> {
    let rows = c
        .query(
            "SELECT schemaname || '.' || tablename FROM pg_publication_tables WHERE pubname = $1 ORDER BY 1",
            &[&publication],
        )
        .await
        .map_err(pg_err("cannot read the publication's tables"))?;
    Ok(rows.iter().map(|r| r.get(0)).collect())
}
