//! `status`: identity, slot positions, WAL retained and lag, what the
//! publication publishes, each table's replica identity, backfills.

use super::admin::{slot_info, SlotInfo};
use super::catalog::table_schema;
use super::identity::{identity_field, root_identities};
use super::publication::{publication_detail, publication_field, PubTable};
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
            let w = self.slot_wal(&c).await?;
            let (published, publication) = self.publication_status(&c).await?;
            let idents = root_identities(&c, &published).await?;
            let replica_identity = identity_field(&idents);
            let backfills = backfill_statuses(&c, &self.publication).await?;
            let receiving = self.receiving_field(&c).await?;
            Ok(SourceStatus {
                identity: id.clone(),
                fields: slot_fields(id, &s, w)
                    .into_iter()
                    .chain([
                        publication,
                        replica_identity,
                        crate::source::backfill::status_field(&backfills),
                    ])
                    .chain(receiving)
                    .collect(),
            })
        })
    }

    /// The slot's WAL figures against the server's WAL end, which
    /// [`slot_info`] does not read: bytes retained, lag, and what bounds it.
    async fn slot_wal(&self, c: &Client) -> Result<SlotWal> {
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
        Ok(SlotWal {
            wal: r.get(0),
            retained: r.get(1),
            lag: r.get(2),
            active: r.get(3),
            wal_status: r.get(4),
            // NULL when max_slot_wal_keep_size is -1: nothing bounds it.
            safe: r.get(5),
        })
    }

    /// The publication's status figure (its tables, row filters, column
    /// lists, partitions' route), and its tables, which the identities need.
    async fn publication_status(&self, c: &Client) -> Result<(Vec<PubTable>, StatusField)> {
        let published = publication_detail(c, &self.publication).await?;
        let via_root: bool = c
            .query_opt(
                "SELECT pubviaroot FROM pg_publication WHERE pubname = $1",
                &[&self.publication],
            )
            .await
            .map_err(pg_err("cannot read the publication"))?
            .is_some_and(|r| r.get(0));
        let all_columns = all_columns_published(c, &published).await;
        let publication = publication_field(&self.publication, via_root, &published, &all_columns);
        Ok((published, publication))
    }

    /// On a standby, whether it receives its primary's WAL; `None` on a
    /// primary, which shows no such figure.
    async fn receiving_field(&self, c: &Client) -> Result<Option<StatusField>> {
        let standby: bool = c
            .query_one("SELECT pg_is_in_recovery()", &[])
            .await
            .map_err(pg_err("cannot ask whether the server is a standby"))?
            .get(0);
        let receiving = match standby {
            true => Some(super::standby::status_field(self, c).await?),
            false => None,
        };
        Ok(receiving)
    }
}

/// What [`PgSource::slot_wal`] reads of the slot against the server's WAL end.
struct SlotWal {
    wal: String,
    retained: Option<i64>,
    lag: Option<i64>,
    active: bool,
    wal_status: String,
    safe: Option<i64>,
}

/// The slot's status figures, in the order `status` prints them: the
/// cursor acknowledged, the slot's positions, its WAL and what bounds it.
fn slot_fields(id: String, s: &SlotInfo, w: SlotWal) -> Vec<StatusField> {
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
        StatusField::new("wal_flush_lsn", w.wal),
        bytes("wal_retained_bytes", w.retained),
        bytes("lag_bytes", w.lag),
        StatusField::new("slot_active", w.active),
        StatusField::new("wal_status", w.wal_status),
        match &s.invalidation {
            Some(r) => StatusField::new("invalidation_reason", r.clone()),
            None => {
                StatusField::new("invalidation_reason", serde_json::Value::Null).with_text("none")
            }
        },
        // JSON null when nothing bounds the slot's WAL.
        match w.safe {
            Some(b) => bytes("safe_wal_size", Some(b)),
            None => StatusField::new("safe_wal_size", serde_json::Value::Null)
                .with_text("unlimited (max_slot_wal_keep_size = -1)"),
        },
    ]
}

/// For each published table, whether all its columns are published (a
/// table whose schema cannot be read counts as not).
async fn all_columns_published(c: &Client, published: &[PubTable]) -> Vec<bool> {
    let mut all_columns = Vec::with_capacity(published.len());
    for p in published {
        // A column list that names every column is no list.
        let full = match &p.columns {
            None => true,
            Some(list) => table_schema(c, &p.schema, &p.table)
                .await
                .map(|(t, _)| t.columns.iter().all(|col| list.contains(&col.name)))
                .unwrap_or(false),
        };
        all_columns.push(full);
    }
    all_columns
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
