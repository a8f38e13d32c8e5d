//! A follower's reconnects: the checks before resuming (same system, the
//! slot there and not confirmed past the read, a new timeline's fork), the
//! publication's relations looked at again, and acknowledging what the
//! target holds.

use super::admin::slot_info;
use super::publication::{partition_not_full, publication_members, Member};
use super::replication::{ReplClient, StartOptions};
use super::{lsn_text, parse_lsn, repl_err, PgSource};
use crate::error::{Error, Result};
use crate::util::quote_ident;
use crate::wire::Cursor;
use tokio_postgres::Client;

impl PgSource {
    /// The publication's relations again: a new partition or table holding
    /// rows is told (the rows it held are not in the stream), a partition
    /// without FULL identity stops the read.
    pub(super) async fn look_at_members(
        &self,
        c: &Client,
        before: Vec<Member>,
    ) -> Result<Vec<Member>> {
        let Ok(now) = publication_members(c, &self.publication).await else {
            return Ok(before);
        };
        for m in now
            .iter()
            .filter(|m| !before.iter().any(|b| b.name == m.name))
        {
            let holds = c
                .query_opt(
                    &format!(
                        "SELECT 1 FROM ONLY {}.{} LIMIT 1",
                        quote_ident(&m.schema),
                        quote_ident(&m.table)
                    ),
                    &[],
                )
                .await
                .map(|r| r.is_some())
                .unwrap_or(false);
            // A table added by `capture backfill` gets its rows that way.
            let backfilled = super::backfill::requests(c, &self.publication)
                .await
                .map(|r| r.iter().any(|r| r.table == m.name))
                .unwrap_or(false);
            if holds && !backfilled {
                let what = if m.name == m.published {
                    format!("table {:?} was added to the publication", m.name)
                } else {
                    format!(
                        "partition {:?} was attached to published table {:?}",
                        m.name, m.published
                    )
                };
                crate::log::warn(
                    &format!(
                        "{what} while following, holding rows: the rows it held then are not in the stream and will not reach targets \
                         (changes after it are); bring them with a new snapshot (docs/OPERATIONS.md, \"Starting over\"). To add a table \
                         to a running pipeline, `mooncdc-capture backfill --table NAME` instead of init brings its rows too (docs/BACKFILL.md)"
                    ),
                    &[("event", "rows-not-streamed".into()), ("table", m.name.clone().into())],
                );
            }
        }
        for m in before
            .iter()
            .filter(|b| !now.iter().any(|n| n.name == b.name))
        {
            let what = if m.name == m.published {
                format!("table {:?} left the publication (or was dropped)", m.name)
            } else {
                format!(
                    "partition {:?} was detached from published table {:?} (or dropped)",
                    m.name, m.published
                )
            };
            crate::log::warn(
                &format!(
                    "{what} while following: no delete is streamed for the rows it held, so targets keep them although the \
                     source no longer publishes them; remove them from targets, or take a new snapshot (docs/OPERATIONS.md, \"Starting over\")"
                ),
                &[("event", "rows-left-in-targets".into()), ("table", m.name.clone().into())],
            );
        }
        if let Some(e) = partition_not_full(&now) {
            return Err(e);
        }
        Ok(now)
    }

    /// After a broken connection: a new SQL session and a replication stream
    /// from `lsn`, on the same system (a changed system identifier is a
    /// different source and is never followed).
    pub(super) async fn resume(
        &self,
        id: &str,
        timeline: &str,
        lsn: u64,
        acked: u64,
        opts: StartOptions,
    ) -> Result<(Client, ReplClient, String)> {
        let (now, now_timeline) = self.identity_and_timeline().await?;
        if now != id {
            return Err(Error::state(format!(
                "the server is now source {now:?}, not {id:?} (restored from a backup, or another server): take a new snapshot"
            )));
        }
        // The slot first: after a failover to a server without it, that is
        // what to fix (a fork past the read is then beside the point).
        let c = self.client("read").await?;
        let slot = slot_info(&c, &self.slot).await?.ok_or_else(|| {
            Error::state(format!(
                "slot {:?} is not on this server: after a failover, only a slot made with `mooncdc-capture init --failover` \
                 (PostgreSQL 17+, with a standby that synchronizes slots) is on the new primary. Take a new snapshot into a new \
                 target (docs/OPERATIONS.md, \"Starting over\"), and make the slot with init --failover to survive the next one",
                self.slot
            ))
        })?;
        if now_timeline != timeline {
            // A promotion (a failover) or a point-in-time recovery: the new
            // timeline's history says where the old one ended; what was
            // read up to there is the new server's history too.
            let fork = self.fork_point(timeline, &now_timeline).await?;
            if lsn > fork {
                return Err(Error::state(format!(
                    "the server's timeline changed from {timeline} to {now_timeline} at LSN {}, before the position read ({}): \
                     changes read after the fork are not in this server's history; take a new snapshot (docs/OPERATIONS.md, \"Starting over\")",
                    lsn_text(fork),
                    lsn_text(lsn)
                )));
            }
            crate::log::warn(
                &format!(
                    "the server's timeline changed from {timeline} to {now_timeline} (a failover or a recovery) at LSN {}; \
                     everything read (up to {}) is in its history: going on",
                    lsn_text(fork),
                    lsn_text(lsn)
                ),
                &[("event", "timeline-changed".into())],
            );
        }
        if slot.lost {
            return Err(slot.invalidated(&self.slot));
        }
        // As at a start: a slot confirmed past where the read stands (acked
        // by hand ahead of the target, a second reader, a restore) would
        // start the stream after changes never read.
        if lsn < slot.confirmed {
            return Err(before_confirmed(lsn, slot.confirmed));
        }
        let repl = self
            .replication_stream(lsn, acked.max(slot.confirmed), opts)
            .await?;
        Ok((c, repl, now_timeline))
    }

    /// Where timeline `old` ended in the history of timeline `new`.
    pub(super) async fn fork_point(&self, old: &str, new: &str) -> Result<u64> {
        match self.history(new).await?.into_iter().find(|(t, _)| t == old) {
            Some((_, at)) => Ok(at),
            None => Err(Error::state(format!(
                "the server is on timeline {new}, whose history does not pass through timeline {old} that was read: take a new snapshot"
            ))),
        }
    }

    /// The timelines timeline `tl` forked from, each with the LSN it ended
    /// at (`TIMELINE_HISTORY`: `tli<TAB>switchpoint<TAB>reason` lines);
    /// empty for timeline 1.
    pub(super) async fn history(&self, tl: &str) -> Result<Vec<(String, u64)>> {
        if tl.parse::<u32>().is_ok_and(|n| n <= 1) {
            return Ok(Vec::new());
        }
        let (mut c, _) = self.replication_session().await?;
        let rows = c
            .simple_query(&format!("TIMELINE_HISTORY {tl}"))
            .await
            .map_err(repl_err("cannot read the timeline's history"))?;
        c.close().await;
        let content = rows
            .first()
            .and_then(|r| r.get(1))
            .and_then(|v| v.as_deref())
            .map(|b| String::from_utf8_lossy(b).into_owned())
            .unwrap_or_default();
        let mut out = Vec::new();
        for line in content.lines() {
            let mut f = line.split('\t');
            if let (Some(t), Some(at)) = (f.next(), f.next()) {
                if let Ok(at) = parse_lsn(at.trim()) {
                    out.push((t.trim().to_string(), at));
                }
            }
        }
        Ok(out)
    }

    /// At a start from a cursor: a fork of this server's timeline between
    /// the slot's confirmed position and the cursor means the target may
    /// hold changes of the old primary that never reached this server
    /// (promoted from an asynchronous standby), and this server's own
    /// changes up to the cursor's position would be skipped. The slot
    /// confirmed past a fork shows it was read here after the fork.
    pub(super) async fn cursor_past_a_fork(
        &self,
        timeline: &str,
        lsn: u64,
        confirmed: u64,
    ) -> Result<()> {
        for (old, at) in self.history(timeline).await? {
            if confirmed <= at && at < lsn {
                return Err(Error::state(format!(
                    "the cursor (LSN {}) is past LSN {}, where this server's timeline {timeline} forked from timeline {old} \
                     (a failover or a recovery), and the slot was confirmed only up to {}: the target may hold changes \
                     the old primary had and this server never did, and this server's own changes up to the cursor would \
                     be skipped. Take a new snapshot into a new target (docs/OPERATIONS.md, \"Starting over\"). Only if the \
                     target read those changes from this server after the fork, acknowledge them (mooncdc-capture ack \
                     --cursor …) and start again",
                    lsn_text(lsn),
                    lsn_text(at),
                    lsn_text(confirmed)
                )));
            }
        }
        Ok(())
    }
}

/// A read that would start at `lsn`, before the slot's confirmed position:
/// the server would start at the slot's position, silently past changes.
pub(super) fn before_confirmed(lsn: u64, confirmed: u64) -> Error {
    Error::state(format!(
        "cursor LSN {} is before the slot's confirmed position {}: those changes are gone (take a new snapshot)",
        lsn_text(lsn),
        lsn_text(confirmed)
    ))
}

/// Acknowledge up to what the target holds, on the live stream's feedback.
pub(super) fn ack_from(
    get: &dyn Fn() -> Result<Option<Cursor>>,
    id: &str,
    client: &mut ReplClient,
    acked: u64,
    limit: &mut dyn FnMut(u64) -> Option<u64>,
) -> u64 {
    // Reading the target's cursor can fail for a while (a target restarting,
    // a busy database): acknowledging is then only late, never wrong, so the
    // follower says so and goes on.
    match get() {
        Ok(Some(held)) if held.source == id => {
            let held = (held.sequence() >> 64) as u64;
            // Not past a backfill window a read from `held` must read
            // again (docs/BACKFILL.md, "Resuming").
            let lsn = limit(held).map_or(held, |l| l.min(held));
            if lsn > acked {
                client.confirm(lsn);
                crate::metrics::confirmed(lsn);
                return lsn;
            }
        }
        Ok(_) => {}
        Err(e) => crate::log::warn(
            &format!(
                "cannot read the target's cursor to acknowledge ({}); will try again",
                e.full_message()
            ),
            &[("event", "ack-failed".into())],
        ),
    }
    acked
}
