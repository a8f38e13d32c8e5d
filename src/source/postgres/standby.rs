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
    /// which `pg_monitor` has); `None` without. No receiver at all is not
    /// streaming, whatever the rights.
    pub(super) streaming: Option<bool>,
    pub(super) quiet_for: Option<f64>,
    /// The WAL the standby has replayed.
    pub(super) replay: u64,
}

impl Receiver {
    /// Streaming now, as far as can be seen: without the rights to see its
    /// state, a receiver that runs. How long since it last heard from the
    /// upstream is no sign: an idle, healthy link hears a keepalive only
    /// every half `wal_sender_timeout`, and the standby itself ends a link
    /// that hears nothing for its `wal_receiver_timeout`.
    fn streams(&self) -> bool {
        self.streaming.unwrap_or(self.running)
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
    let running: bool = row.get(0);
    Ok(Receiver {
        running,
        streaming: if running { row.get(1) } else { Some(false) },
        quiet_for: row.get(2),
        replay: parse_lsn(&row.get::<_, String>(3))?,
    })
}

/// A newer timeline the standby knows of (its WAL receiver fetched the
/// history from the upstream) that forked from the standby's own timeline
/// (as it is now: a standby that followed a failover is on the new one)
/// before `replay`: (its timeline, the newer one, where it forked).
pub(super) async fn fork_behind(src: &PgSource, replay: u64) -> Option<(String, u32, u64)> {
    let (_, timeline) = src.identity_and_timeline().await.ok()?;
    let next = timeline.parse::<u32>().ok()? + 1;
    // No history of the next timeline: no fork the standby knows of.
    let history = src.history(&next.to_string()).await.ok()?;
    let at = history
        .into_iter()
        .find(|(t, _)| *t == timeline)
        .map(|(_, at)| at)
        .filter(|at| *at < replay)?;
    Some((timeline, next, at))
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

/// What the follower has seen of a standby's WAL receiver.
#[derive(Default)]
pub(super) struct Watch {
    /// Said that the standby receives nothing (and not since that it does).
    warned: bool,
    last_look: Option<Instant>,
    /// The first look; a receiver last seen streaming.
    first_look: Option<Instant>,
    seen: Option<Instant>,
    /// The replay position, and since when it has not moved.
    replay: u64,
    still_since: Option<Instant>,
    last_fork_look: Option<Instant>,
}

impl Watch {
    /// Look at the standby (at most every second, or every half `limit`):
    /// say when no receiver has streamed for `limit`, and again when one
    /// does; fail when the standby holds a fork it cannot follow.
    pub(super) async fn look(&mut self, src: &PgSource, c: &Client, limit: Duration) -> Result<()> {
        let every = (limit / 2).clamp(Duration::from_millis(200), Duration::from_secs(1));
        if self.last_look.is_some_and(|t| t.elapsed() < every) {
            return Ok(());
        }
        let now = Instant::now();
        self.last_look = Some(now);
        let Ok(r) = receiver(c).await else {
            return Ok(());
        };
        self.first_look.get_or_insert(now);
        if r.streams() {
            self.seen = Some(now);
        }
        if r.replay != self.replay || self.still_since.is_none() {
            self.replay = r.replay;
            self.still_since = Some(now);
        }
        self.fork(src, r.replay, limit).await?;
        // Not streaming for the limit (never seen streaming: since the
        // first look).
        let quiet = self
            .seen
            .or(self.first_look)
            .map_or(Duration::ZERO, |t| t.elapsed());
        let receiving = quiet < limit;
        crate::metrics::standby_receiving(receiving);
        if receiving && self.warned {
            crate::log::write(
                "info",
                "the standby receives its primary's WAL again",
                &[("event", "standby-receiving".into())],
            );
        }
        if !receiving && !self.warned {
            crate::log::warn(
                &format!(
                    "this source is a standby that has received no WAL from its primary for {} s (no WAL receiver \
                     streaming): changes made on the primary since do not reach the stream. Is the primary up, and \
                     the standby's primary_conninfo right? After a failover, re-point the standby at the new primary",
                    quiet.as_secs()
                ),
                &[("event", "standby-not-receiving".into())],
            );
        }
        self.warned = !receiving;
        Ok(())
    }

    /// The standby's position still for `limit`: a newer timeline that
    /// forked before it, looked for every few seconds (it takes a
    /// replication session or two).
    async fn fork(&mut self, src: &PgSource, replay: u64, limit: Duration) -> Result<()> {
        let still = self.still_since.is_some_and(|t| t.elapsed() >= limit);
        let due = self
            .last_fork_look
            .is_none_or(|t| t.elapsed() >= Duration::from_secs(5));
        if !(still && due) {
            return Ok(());
        }
        self.last_fork_look = Some(Instant::now());
        match fork_behind(src, replay).await {
            Some((timeline, next, at)) => Err(cannot_follow(&timeline, next, at, replay)),
            None => Ok(()),
        }
    }
}

/// `status` on a standby: whether it receives its primary's WAL.
pub(super) async fn status_field(src: &PgSource, c: &Client) -> Result<StatusField> {
    let r = receiver(c).await?;
    if let Some((_, next, at)) = fork_behind(src, r.replay).await {
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
