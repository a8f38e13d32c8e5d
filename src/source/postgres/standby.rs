//! A standby source's link to its primary. A capture on a standby reads
//! only what the standby has received: when the standby stops receiving
//! (its primary gone, or failed over to a server it cannot follow), the
//! stream goes quiet while the primary's history moves on. The follower
//! looks at the standby's WAL receiver while the stream is quiet, says when
//! it has received nothing for the receive timeout (a warning, `status`,
//! the `mooncdc_standby_receiving` metric), and stops when the standby
//! holds the history of a newer timeline that forked before its own
//! position: a promoted server with less WAL, which the standby can never
//! follow (docs/POSTGRES.md, "Capture on a standby").

use super::{lsn_text, parse_lsn, pg_err, PgSource};
use crate::error::{Error, Result};
use crate::source::StatusField;
use std::time::{Duration, Instant};
use tokio_postgres::Client;

/// What a standby says of its WAL receiver.
pub(super) struct Receiver {
    /// A WAL receiver process runs (it restarts every few seconds while it
    /// cannot connect, and lives only a moment then).
    pub(super) running: bool,
    /// Whether it streams, and seconds since it last heard from the
    /// upstream: only with the rights to see them (`pg_read_all_stats`,
    /// which `pg_monitor` has); `None` without.
    pub(super) streaming: Option<bool>,
    pub(super) quiet_for: Option<f64>,
    /// The WAL the standby has replayed.
    pub(super) replay: u64,
}

impl Receiver {
    /// Receiving, as far as can be seen: streaming and heard from within
    /// `limit`, or (without the rights to see that) a receiver seen
    /// within `limit` (`seen`).
    fn receiving(&self, limit: Duration, seen: Option<Instant>) -> bool {
        match self.streaming {
            Some(streaming) => streaming && self.quiet_for.is_none_or(|q| q < limit.as_secs_f64()),
            None => seen.is_some_and(|t| t.elapsed() < limit),
        }
    }
}

/// The standby's WAL receiver now.
pub(super) async fn receiver(c: &Client) -> Result<Receiver> {
    let row = c
        .query_one(
            "SELECT count(*) > 0, bool_or(status = 'streaming'), \
             max(extract(epoch FROM now() - last_msg_receipt_time))::float8, \
             (SELECT coalesce(pg_last_wal_replay_lsn(), '0/0')::text) \
             FROM pg_stat_wal_receiver",
            &[],
        )
        .await
        .map_err(pg_err("cannot ask the standby about its WAL receiver"))?;
    Ok(Receiver {
        running: row.get(0),
        streaming: row.get(1),
        quiet_for: row.get(2),
        replay: parse_lsn(&row.get::<_, String>(3))?,
    })
}

/// A newer timeline the standby knows of (its WAL receiver fetched the
/// history from the upstream) that forked from the standby's `timeline`
/// before `replay`: (that timeline, where it forked).
pub(super) async fn fork_behind(src: &PgSource, timeline: &str, replay: u64) -> Option<(u32, u64)> {
    let next = timeline.parse::<u32>().ok()? + 1;
    // No history of the next timeline: no fork the standby knows of.
    let history = src.history(&next.to_string()).await.ok()?;
    history
        .into_iter()
        .find(|(t, _)| t == timeline)
        .filter(|(_, at)| *at < replay)
        .map(|(_, at)| (next, at))
}

/// The follower stops: the standby cannot follow its new primary.
fn cannot_follow(timeline: &str, next: u32, at: u64, replay: u64) -> Error {
    Error::state(format!(
        "this standby cannot follow its primary: timeline {next} (a promoted server) forked from the standby's timeline \
         {timeline} at LSN {}, before the standby's position {}, so the standby holds changes the new primary never had, \
         and the new primary's changes never reach it. The target may hold those changes too. Re-point the standby at a \
         server it can follow, or rebuild it from the new primary; then make a new slot and take a new snapshot into a \
         new target (docs/OPERATIONS.md, \"Starting over\")",
        lsn_text(at),
        lsn_text(replay)
    ))
}

/// How long a standby has not been receiving, as the follower saw it.
#[derive(Default)]
pub(super) struct Watch {
    /// Not receiving since.
    since: Option<Instant>,
    warned: bool,
    last_look: Option<Instant>,
    /// A WAL receiver last seen running.
    seen: Option<Instant>,
    /// The replay position, and since when it has not moved.
    replay: u64,
    still_since: Option<Instant>,
    last_fork_look: Option<Instant>,
    /// The first look: a receiver never seen counts from there.
    first_look: Option<Instant>,
}

impl Watch {
    /// Look at the standby (at most every second or half the limit): say
    /// when it has received nothing for `limit`, and again when it
    /// receives; fail when it holds a fork it cannot follow.
    pub(super) async fn look(
        &mut self,
        src: &PgSource,
        c: &Client,
        timeline: &str,
        limit: Duration,
    ) -> Result<()> {
        let every = (limit / 2).clamp(Duration::from_millis(200), Duration::from_secs(1));
        if self.last_look.is_some_and(|t| t.elapsed() < every) {
            return Ok(());
        }
        self.last_look = Some(Instant::now());
        let Ok(r) = receiver(c).await else {
            return Ok(());
        };
        let now = Instant::now();
        self.first_look.get_or_insert(now);
        if r.running {
            self.seen = Some(now);
        }
        if r.replay != self.replay || self.still_since.is_none() {
            self.replay = r.replay;
            self.still_since = Some(now);
        }
        // Its position still for the limit: a newer timeline that forked
        // before it (looked for every few seconds: a replication session).
        let still = self.still_since.is_some_and(|t| t.elapsed() >= limit);
        let fork_due = self
            .last_fork_look
            .is_none_or(|t| t.elapsed() >= Duration::from_secs(5));
        if still && fork_due {
            self.last_fork_look = Some(now);
            if let Some((next, at)) = fork_behind(src, timeline, r.replay).await {
                return Err(cannot_follow(timeline, next, at, r.replay));
            }
        }
        let receiving = r.receiving(limit, self.seen.or(self.first_look));
        crate::metrics::standby_receiving(receiving);
        if receiving {
            if self.warned {
                crate::log::write(
                    "info",
                    "the standby receives its primary's WAL again",
                    &[("event", "standby-receiving".into())],
                );
            }
            self.since = None;
            self.warned = false;
            return Ok(());
        }
        let since = *self.since.get_or_insert(now);
        if !self.warned && since.elapsed() >= limit {
            self.warned = true;
            crate::log::warn(
                &format!(
                    "this source is a standby that has received no WAL from its primary for {} s (no WAL receiver \
                     streaming): changes made on the primary since do not reach the stream. Is the primary up, and \
                     the standby's primary_conninfo right? After a failover, re-point the standby at the new primary",
                    since.elapsed().as_secs()
                ),
                &[("event", "standby-not-receiving".into())],
            );
        }
        Ok(())
    }
}

/// `status` on a standby: whether it receives its primary's WAL.
pub(super) async fn status_field(
    src: &PgSource,
    c: &Client,
    timeline: &str,
) -> Result<StatusField> {
    let r = receiver(c).await?;
    if let Some((next, at)) = fork_behind(src, timeline, r.replay).await {
        return Ok(StatusField::new("standby_receiving", false).with_text(format!(
            "no: cannot follow timeline {next}, which forked at {} before this standby's position {}",
            lsn_text(at),
            lsn_text(r.replay)
        )));
    }
    Ok(match (r.running, r.streaming, r.quiet_for) {
        (_, Some(true), Some(q)) => StatusField::new("standby_receiving", true)
            .with_text(format!("yes (last message from the primary {q:.0} s ago)")),
        (_, Some(true), None) => StatusField::new("standby_receiving", true).with_text("yes"),
        (true, None, _) => StatusField::new("standby_receiving", serde_json::Value::Null)
            .with_text("a WAL receiver runs (grant pg_monitor to see whether it streams)"),
        _ => StatusField::new("standby_receiving", false)
            .with_text("no: no WAL receiver is streaming from the primary"),
    })
}
