//! `status`: identity, slot positions, WAL retained and lag, what the
//! publication publishes, each table's replica identity, backfills.

use super::admin::slot_info;
use super::catalog::table_schema;
use super::identity::{identity_field, root_identities};
use super::publication::{publication_detail, publication_field};
use super::{lsn_text, sequence, PgSource, WAL_END};
use crate::error::{Error, Result};
use crate::pg::{pg_err, runtime};
use crate::source::SourceStatus;
use crate::source::StatusField;
use crate::wire::Cursor;
use tokio_postgres::Client;

impl PgSource {
    /// Identity, slot positions, WAL retained and lag.
    pub fn status(&self) -> Result<SourceStatus> {
        runtime()?.block_on(async {
            let c = self.client("status").await?;
            let id = self.identity().await?;
            let s = slot_info(&c, &self.slot).await?.ok_or_else(|| {
                Error::state(format!("slot {:?} does not exist (run init)", self.slot))
            })?;
            let r = c
                .query_one(
                    &format!(
                        "SELECT {WAL_END}::text, \
                         pg_wal_lsn_diff({WAL_END}, restart_lsn)::bigint, \
                         pg_wal_lsn_diff({WAL_END}, confirmed_flush_lsn)::bigint, active, \
                         coalesce(wal_status, ''), safe_wal_size \
                         FROM pg_replication_slots WHERE slot_name = $1"
                    ),
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
            let published = publication_detail(&c, &self.publication).await?;
            let via_root: bool = c
                .query_opt(
                    "SELECT pubviaroot FROM pg_publication WHERE pubname = $1",
                    &[&self.publication],
                )
                .await
                .map_err(pg_err("cannot read the publication"))?
                .is_some_and(|r| r.get(0));
            let mut all_columns = Vec::with_capacity(published.len());
            for p in &published {
                // A column list that names every column is no list.
                let full = match &p.columns {
                    None => true,
                    Some(list) => table_schema(&c, &p.schema, &p.table)
                        .await
                        .map(|(t, _)| t.columns.iter().all(|col| list.contains(&col.name)))
                        .unwrap_or(false),
                };
                all_columns.push(full);
            }
            let publication =
                publication_field(&self.publication, via_root, &published, &all_columns);
            let idents = root_identities(&c, &published).await?;
            let replica_identity = identity_field(&idents);
            let backfills = backfill_statuses(&c, &self.publication).await?;
            let standby: bool = c
                .query_one("SELECT pg_is_in_recovery()", &[])
                .await
                .map_err(pg_err("cannot ask whether the server is a standby"))?
                .get(0);
            let receiving = match standby {
                true => Some(super::standby::status_field(self, &c).await?),
                false => None,
            };
            Ok(SourceStatus {
                identity: id.clone(),
                fields: {
                    let acked = Cursor::new(id, sequence(s.confirmed, 0)).to_json();
                    let bytes = |name, n: Option<i64>| {
                        StatusField::count(name, n.unwrap_or(0).max(0) as u128)
                    };
                    vec![
                        StatusField::new(
                            "acknowledged",
                            serde_json::from_str::<serde_json::Value>(&acked)
                                .expect("a cursor is JSON"),
                        )
                        .with_text(acked),
                        StatusField::new("confirmed_flush_lsn", lsn_text(s.confirmed)),
                        StatusField::new("restart_lsn", lsn_text(s.restart)),
                        StatusField::new("wal_flush_lsn", wal),
                        bytes("wal_retained_bytes", retained),
                        bytes("lag_bytes", lag),
                        StatusField::new("slot_active", active),
                        StatusField::new("wal_status", wal_status),
                        match &s.invalidation {
                            Some(r) => StatusField::new("invalidation_reason", r.clone()),
                            None => {
                                StatusField::new("invalidation_reason", serde_json::Value::Null)
                                    .with_text("none")
                            }
                        },
                        // JSON null when nothing bounds the slot's WAL.
                        match safe {
                            Some(b) => bytes("safe_wal_size", Some(b)),
                            None => StatusField::new("safe_wal_size", serde_json::Value::Null)
                                .with_text("unlimited (max_slot_wal_keep_size = -1)"),
                        },
                        publication,
                        replica_identity,
                        crate::source::backfill::status_field(&backfills),
                    ]
                    .into_iter()
                    .chain(receiving)
                    .collect()
                },
            })
        })
    }
}

/// Each backfill request as `status` shows it.
async fn backfill_statuses(
    c: &Client,
    publication: &str,
) -> Result<Vec<crate::source::backfill::RequestStatus>> {
    Ok(super::backfill::requests(c, publication)
        .await?
        .into_iter()
        .map(|r| crate::source::backfill::RequestStatus {
            id: r.id,
            state: if r.failed.is_some() {
                "failed"
            } else if r.done {
                "done"
            } else if r.chunks > 0 {
                "in progress"
            } else {
                "requested"
            },
            table: r.table,
            resync: r.resync,
            rows: r.rows.max(0) as u64,
            estimate: r.estimate.max(0) as u64,
            requested_at: r.requested_lsn,
            done_at: r.done_lsn,
        })
        .collect())
}
