//! Reading changes: a replication session's messages handed to the read
//! path's state machine (`decode.rs`), once (`read`) or following, with a
//! supervisor that keeps the session alive: status updates and pings,
//! acknowledging what the target holds, heartbeats, backfill chunks,
//! the receive timeout, and reconnecting after a transient failure.

use super::backfill::Backfills;
use super::batch_out::BatchOut;
use super::catalog::Catalog;
use super::decode::{Flow, ReadSettings, Reader};
use super::publication::{partition_not_full, publication_members, publication_tables, Member};
use super::reconnect::{ack_from, before_confirmed};
use super::replication::{ReplClient, ReplError, StartOptions};
use super::standby;
use super::{
    admin::{slot_info, SlotInfo},
    io_out, is_transient, lsn_text, parse_lsn, pg_err, repl_err, runtime, sequence, server_version,
    PgSource, WAL_END,
};
use crate::error::{Cause, Error, ErrorKind, Result};
use crate::source::{FollowTiming, ReadLimits};
use crate::wire::{Cursor, Sequence};
use std::io::Write;
use std::time::{Duration, Instant};
use tokio_postgres::Client;

/// What a target durably holds, for `--ack-from-target`.
type AckTarget<'a> = &'a dyn Fn() -> Result<Option<Cursor>>;

/// A read as it opened: the slot and cursor checked, the server's WAL end.
struct Opened {
    c: Client,
    id: String,
    timeline: String,
    confirmed: u64,
    start: Sequence,
    wal_end: u64,
    standby: bool,
    members: Vec<Member>,
    opts: StartOptions,
}

/// A session with the server and the clocks of what the supervisor does
/// between messages.
struct Link<'a> {
    /// The SQL session beside the replication one.
    c: Client,
    client: Option<ReplClient>,
    id: String,
    timeline: String,
    opts: StartOptions,
    /// Where the slot is confirmed (raised only by --ack-from-target).
    acked: u64,
    standby: bool,
    members: Vec<Member>,
    timing: Option<FollowTiming>,
    ack_target: Option<AckTarget<'a>>,
    /// Ask the server for a keepalive with the next status update.
    ping: bool,
    retries: u32,
    last_received: Instant,
    last_heartbeat: Instant,
    last_slot_look: Instant,
    last_members_look: Instant,
    last_ack_check: Instant,
    /// A standby source's link to its primary.
    watch: standby::Watch,
}

impl<'a> Link<'a> {
    /// The link of a read as it opened, with its started replication session.
    /// The clocks start now, but the slot's is due at once (for the metrics).
    fn new(
        o: Opened,
        client: ReplClient,
        timing: Option<FollowTiming>,
        ack_target: Option<AckTarget<'a>>,
    ) -> Self {
        Link {
            c: o.c,
            client: Some(client),
            id: o.id,
            timeline: o.timeline,
            opts: o.opts,
            acked: o.confirmed,
            standby: o.standby,
            members: o.members,
            timing,
            ack_target,
            ping: false,
            retries: 0,
            last_received: Instant::now(),
            last_heartbeat: Instant::now(),
            last_slot_look: Instant::now() - Duration::from_secs(60),
            last_members_look: Instant::now(),
            last_ack_check: Instant::now(),
            watch: standby::Watch::default(),
        }
    }

    fn follow(&self) -> bool {
        self.timing.is_some()
    }

    /// Acknowledge what the target holds, at most every 200 ms, no further
    /// than the start of a backfill window open there (`bf`).
    fn ack_now_and_then(&mut self, bf: &mut Backfills) {
        let (Some(get), Some(client)) = (self.ack_target, self.client.as_mut()) else {
            return;
        };
        if self.last_ack_check.elapsed() > Duration::from_millis(200) {
            self.acked = ack_from(get, &self.id, client, self.acked, &mut |h| {
                bf.confirm_limit(h)
            });
            self.last_ack_check = Instant::now();
        }
    }
}

impl PgSource {
    /// Write one batch stream of the changes after `after` (default: the
    /// slot's confirmed position), up to the WAL flushed when the read began.
    pub fn read(
        &self,
        after: Option<&Cursor>,
        limits: ReadLimits,
        out: &mut dyn Write,
    ) -> Result<u64> {
        runtime()?.block_on(self.stream(after, limits, None, None, out))
    }

    /// Keep streaming, one batch per transaction; with `ack_target`,
    /// acknowledge what the target durably holds.
    pub fn follow(
        &self,
        after: Option<&Cursor>,
        limits: ReadLimits,
        timing: FollowTiming,
        ack_target: Option<AckTarget<'_>>,
        out: &mut dyn Write,
    ) -> Result<u64> {
        // A follower never stops at a count: only the line cap and what
        // streamed transactions may hold apply.
        let limits = ReadLimits {
            max_events: None,
            max_bytes: None,
            ..limits
        };
        runtime()?.block_on(self.stream(after, limits, Some(timing), ack_target, out))
    }

    pub(super) async fn stream(
        &self,
        after: Option<&Cursor>,
        limits: ReadLimits,
        timing: Option<FollowTiming>,
        ack_target: Option<AckTarget<'_>>,
        out: &mut dyn Write,
    ) -> Result<u64> {
        // A follower holds a stop from its start until its first batch is
        // written (BatchOut::owe_first_batch), so a SIGTERM while it
        // connects still ends with a batch apply can end on.
        if timing.is_some() {
            crate::util::stop::batch_begins();
        }
        let o = self.open_read(after, &limits, timing).await?;
        let catalog = Catalog::load(&o.c, &self.publication).await?;
        let mut bf = Backfills::load(&o.c, &self.publication, o.start).await?;
        // A backfill window open at the start is read again from its
        // beginning (its changes are kept, not written).
        let at = (o.start >> 64) as u64;
        let from = bf.decode_from(o.confirmed).map_or(at, |f| f.min(at));
        let client = self.replication_stream(from, o.confirmed, o.opts).await?;
        let (mut r, high_water) = new_reader(&o, limits, timing, catalog, bf, out);
        let mut l = Link::new(o, client, timing, ack_target);
        crate::metrics::confirmed(l.acked);
        crate::metrics::started();
        self.run_sessions(&mut r, &mut l, high_water).await?;
        end_stream(&mut r, &l)?;
        Ok(r.total)
    }

    /// Run replication sessions until the read ends: a read's one session,
    /// or a follower's, reconnecting after a transient failure until stopped.
    async fn run_sessions(
        &self,
        r: &mut Reader<'_>,
        l: &mut Link<'_>,
        high_water: Sequence,
    ) -> Result<()> {
        loop {
            let session = self.session(r, l).await;
            if let Some(cl) = l.client.take() {
                cl.close().await;
            }
            let Some(t) = l.timing else {
                match session? {
                    Flow::Ended => {}
                    Flow::Go | Flow::CaughtUp => r.caught_up(high_water)?,
                }
                break;
            };
            if crate::util::stop::requested() {
                // Stopping: end an open batch where it stands, exit 0.
                r.end_open_batch()?;
                break;
            }
            // A following read rides out a broken connection or a
            // restarting server (anything else, a refusal, ends it).
            let reason = match session {
                Err(e) if is_transient(&e) => {
                    crate::metrics::error(e.kind());
                    e.full_message()
                }
                Err(e) => return Err(e),
                Ok(_) => "the server ended the replication stream".to_string(),
            };
            if !self.reconnect(r, l, &t, &reason).await? {
                break;
            }
        }
        Ok(())
    }

    /// Check the slot and the cursor, and see where the server's WAL ends.
    async fn open_read(
        &self,
        after: Option<&Cursor>,
        limits: &ReadLimits,
        timing: Option<FollowTiming>,
    ) -> Result<Opened> {
        let c = self.client("read").await?;
        // The rights first, each missing one named with its GRANT: a read
        // needs the slot's (REPLICATION) and the published tables' (SELECT:
        // backfill chunks read them, and the docs' capture role has it).
        let tables = publication_tables(&c, &self.publication).await?;
        self.check_reader(&c, &tables, true, "a read").await?;
        let (id, timeline) = self.identity_and_timeline().await?;
        let slot = self.read_slot(&c).await?;
        let start = match after {
            None => sequence(slot.confirmed, 0),
            Some(cur) => {
                self.cursor_start(cur, &id, &timeline, slot.confirmed)
                    .await?
            }
        };
        let wal_end = wal_end_after(&c, start).await?;
        let standby = server_is_standby(&c, timing).await?;
        // The relations the publication publishes rows of: a partition
        // without FULL identity stops the read before anything is written;
        // one attached while following is told (its earlier rows are not in
        // the stream).
        let members = publication_members(&c, &self.publication).await?;
        if let Some(e) = partition_not_full(&members) {
            return Err(e);
        }
        let opts = start_options(limits, server_version(&c).await?);
        Ok(Opened {
            c,
            id,
            timeline,
            confirmed: slot.confirmed,
            start,
            wal_end,
            standby,
            members,
            opts,
        })
    }

    /// The slot a read streams from: it must exist, be a pgoutput slot in
    /// this database, not be invalidated, and not be in use.
    async fn read_slot(&self, c: &Client) -> Result<SlotInfo> {
        let slot = slot_info(c, &self.slot).await?.ok_or_else(|| {
            Error::state(format!(
                "slot {:?} does not exist (run mooncdc-capture init)",
                self.slot
            ))
        })?;
        if slot.plugin != "pgoutput" || slot.database != self.conn.dbname {
            return Err(Error::state(format!(
                "slot {:?} uses plugin {:?} in database {:?}; MoonCDC needs a pgoutput slot in {:?}",
                self.slot, slot.plugin, slot.database, self.conn.dbname
            )));
        }
        if slot.lost {
            return Err(slot.invalidated(&self.slot));
        }
        if slot.active {
            return Err(Error::state(format!(
                "slot {:?} is in use by another session",
                self.slot
            )));
        }
        Ok(slot)
    }

    /// Where a read after `cur` starts: a cursor of this source, not before
    /// the slot's confirmed position, not past a timeline fork.
    async fn cursor_start(
        &self,
        cur: &Cursor,
        id: &str,
        timeline: &str,
        confirmed: u64,
    ) -> Result<Sequence> {
        if cur.source != id {
            return Err(Error::state(format!(
                "cursor is for source {:?} but this source is {id:?}",
                cur.source
            )));
        }
        let lsn = (cur.sequence() >> 64) as u64;
        if lsn < confirmed {
            return Err(before_confirmed(lsn, confirmed));
        }
        self.cursor_past_a_fork(timeline, lsn, confirmed).await?;
        Ok(cur.sequence())
    }

    /// One replication session: each message to the reader, the
    /// supervisor's work between them. Ends with the reader's flow (a read
    /// caught up, a limit), `Go` when the server ended the stream, or an
    /// error.
    async fn session(&self, r: &mut Reader<'_>, l: &mut Link<'_>) -> Result<Flow> {
        loop {
            // SIGTERM/SIGINT: end the batch being written at the last event
            // written (a cursor may stop inside a transaction; reading after
            // it continues there), then stop.
            if l.follow() && crate::util::stop::requested() {
                r.end_open_batch()?;
                return Ok(Flow::Ended);
            }
            if l.follow() && r.txn.is_none() {
                self.between_transactions(r, l).await?;
            }
            // Status updates (and a ping when the stream was quiet: the
            // server answers with a keepalive saying where its WAL is, which
            // ends a read and keeps a quiet follower's readiness honest) are
            // written here, never raced against a timer.
            let client = l.client.as_mut().expect("a session is open");
            client
                .maintain(std::mem::take(&mut l.ping))
                .await
                .map_err(repl_err("replication stream failed"))?;
            let received = tokio::time::timeout(Duration::from_millis(500), client.recv()).await;
            let ev = match received {
                Ok(ev) => {
                    l.last_received = Instant::now();
                    ev.map_err(repl_err("replication stream failed"))?
                }
                Err(_) => {
                    self.quiet(r, l).await?;
                    continue;
                }
            };
            let Some(ev) = ev else {
                return Ok(Flow::Go);
            };
            // The stream delivers again: the retry budget is renewed.
            l.retries = 0;
            // Acknowledge on every kind of message, not only when the
            // stream pauses: a server waiting for a reply (shutting down)
            // sends keepalives back to back.
            l.ack_now_and_then(&mut r.bf);
            let flow = match ev {
                super::replication::ReplEvent::KeepAlive { wal_end, reply } => {
                    r.keepalive(wal_end, reply)?
                }
                super::replication::ReplEvent::XLogData { data } => r.data(data, &l.c).await?,
            };
            if flow != Flow::Go {
                return Ok(flow);
            }
        }
    }

    /// Between transactions, following: the next backfill chunk when one
    /// waits and none of ours is in flight (it comes back through the
    /// stream), and the publication's relations again on a timer of their
    /// own (a busy stream is never quiet).
    async fn between_transactions(&self, r: &mut Reader<'_>, l: &mut Link<'_>) -> Result<()> {
        // A server shutting down ends the SQL sessions first, then waits
        // for each walsender's client to confirm what it sent, which a
        // follower without --ack-from-target never does: the shutdown
        // would be held (and the walsender spin) for as long as the
        // follower runs. The SQL session's end is the sign: the
        // replication session ends too, and the follower reconnects.
        if l.c.is_closed() {
            let text =
                "the server ended the follower's SQL session (shutting down or restarting, say)";
            return Err(Error::new(ErrorKind::Database, text).with_source(Cause {
                text: text.to_string(),
                inner: std::io::Error::new(std::io::ErrorKind::NotConnected, text),
            }));
        }
        if !l.standby {
            let chunk_rows = l.timing.map_or(4096, |t| t.backfill_chunk_rows);
            r.bf.write_next(&l.c, &self.publication, chunk_rows).await?;
        }
        if l.last_members_look.elapsed() >= Duration::from_secs(5) {
            l.last_members_look = Instant::now();
            l.members = self
                .look_at_members(&l.c, std::mem::take(&mut l.members))
                .await?;
        }
        Ok(())
    }

    /// Half a second without a message. Following: nothing at all for the
    /// receive timeout (although each quiet half second asks for a
    /// keepalive) means the walsender is stalled or the network gone, so
    /// reconnect; otherwise acknowledge, look at the slot for the metrics,
    /// and write a heartbeat when one is due.
    async fn quiet(&self, r: &mut Reader<'_>, l: &mut Link<'_>) -> Result<()> {
        l.ping = true;
        let Some(t) = l.timing else { return Ok(()) };
        if let Some(limit) = t.receive_timeout {
            if l.last_received.elapsed() >= limit {
                return Err(repl_err("replication stream stalled")(ReplError::Io(
                    std::io::Error::new(
                        std::io::ErrorKind::TimedOut,
                        format!(
                            "nothing came from the server for {} ms, not even a keepalive (--receive-timeout-ms)",
                            limit.as_millis()
                        ),
                    ),
                )));
            }
        }
        if let (Some(get), Some(client)) = (l.ack_target, l.client.as_mut()) {
            l.acked = ack_from(get, &l.id, client, l.acked, &mut |h| r.bf.confirm_limit(h));
        }
        // A standby that stopped receiving its primary's WAL reads as a
        // quiet stream: say so, and stop on a fork it cannot follow.
        if l.standby {
            let limit = t.receive_timeout.unwrap_or(Duration::from_secs(60));
            l.watch.look(self, &l.c, limit).await?;
        }
        if l.last_slot_look.elapsed() >= Duration::from_secs(5) {
            l.last_slot_look = Instant::now();
            self.slot_metrics(&l.c).await;
        }
        // A heartbeat: a transactional logical message, never an event (its
        // transaction reads as an empty batch), which moves the WAL, so the
        // keepalives, idle batches and lag move too. A standby takes none.
        let due = t
            .heartbeat
            .is_some_and(|every| l.last_heartbeat.elapsed() >= every);
        if due && !l.standby {
            l.last_heartbeat = Instant::now();
            l.c.batch_execute("SELECT pg_logical_emit_message(true, 'mooncdc_heartbeat', '')")
                .await
                .map_err(pg_err("cannot write a heartbeat"))?;
        }
        Ok(())
    }

    /// The slot as the server sees it, and the server's WAL position, for
    /// the metrics (so the byte lags grow while keepalives stop).
    async fn slot_metrics(&self, c: &Client) {
        let q = format!(
            "SELECT coalesce(pg_wal_lsn_diff({WAL_END}, restart_lsn)::bigint, 0), \
             coalesce(wal_status, ''), {WAL_END}::text \
             FROM pg_replication_slots WHERE slot_name = $1"
        );
        if let Ok(row) = c.query_one(&q, &[&self.slot]).await {
            crate::metrics::slot(row.get(0), row.get::<_, String>(1).as_str());
            if let Ok(lsn) = parse_lsn(&row.get::<_, String>(2)) {
                crate::metrics::server_wal(lsn);
            }
        }
    }

    /// After a transient failure: reconnect and resume after the last
    /// position written to standard output (the batches in the pipe will
    /// be applied). A transaction cut in the middle is sent again whole,
    /// with the same commit position and ordinals, so the events already
    /// written are skipped and the open batch goes on with the rest: the
    /// stream stays valid. `false`: stopped, asked to.
    async fn reconnect(
        &self,
        r: &mut Reader<'_>,
        l: &mut Link<'_>,
        t: &FollowTiming,
        reason: &str,
    ) -> Result<bool> {
        let at = (r.w.position >> 64) as u64;
        // From the start of a backfill window open there (its changes are
        // read again, kept, not written).
        let from = r.bf.decode_from(l.acked).map_or(at, |f| f.min(at));
        while l.client.is_none() && l.retries < t.max_retries {
            l.retries += 1;
            crate::metrics::retry();
            wait_before_retry(t, l.retries, reason).await;
            if crate::util::stop::requested() {
                break;
            }
            self.try_resume(l, from).await?;
        }
        if l.client.is_none() {
            if crate::util::stop::requested() {
                r.end_open_batch()?;
                return Ok(false);
            }
            return Err(Error::new(
                ErrorKind::Database,
                format!(
                    "gave up after {} reconnects ({reason}); start the pipeline again when the server is back",
                    t.max_retries
                ),
            ));
        }
        crate::log::write(
            "info",
            &format!("reconnected; resuming after {}", lsn_text(at)),
            &[("event", "reconnected".into())],
        );
        crate::metrics::reconnected();
        // The receive timeout counts from the new session's start.
        l.last_received = Instant::now();
        r.resumed();
        // What backfills have reached there (a transaction cut off is sent
        // again, its messages with it).
        r.bf.reload(&l.c, &self.publication, r.start).await?;
        Ok(true)
    }

    /// One attempt to resume after `at`: on success `l` has the new
    /// sessions; a transient failure leaves it without one, to try again.
    async fn try_resume(&self, l: &mut Link<'_>, at: u64) -> Result<()> {
        match self.resume(&l.id, &l.timeline, at, l.acked, l.opts).await {
            Ok((sql, repl, now_timeline)) => {
                // A failover may have made the standby a primary (or
                // a multi-host URL reached another server).
                l.standby = sql
                    .query_one("SELECT pg_is_in_recovery()", &[])
                    .await
                    .map_err(pg_err("cannot ask whether the server is a standby"))?
                    .get(0);
                l.watch = standby::Watch::default();
                l.c = sql;
                l.client = Some(repl);
                l.timeline = now_timeline;
            }
            Err(e) if is_transient(&e) => {}
            Err(e) => return Err(e),
        }
        Ok(())
    }
}

/// The server's WAL end, which a read's cursor `start` must not be past.
async fn wal_end_after(c: &Client, start: Sequence) -> Result<u64> {
    let flushed: String = c
        .query_one(&format!("SELECT {WAL_END}::text"), &[])
        .await
        .map_err(pg_err("cannot read the WAL position"))?
        .get(0);
    let wal_end = parse_lsn(&flushed)?;
    if (start >> 64) as u64 > wal_end {
        return Err(Error::state(format!(
            "cursor LSN {} is beyond the server's WAL {flushed}",
            lsn_text((start >> 64) as u64)
        )));
    }
    Ok(wal_end)
}

/// Whether the server is a standby. A standby takes no writes, so a
/// follower asked for heartbeats is warned that it gets none.
async fn server_is_standby(c: &Client, timing: Option<FollowTiming>) -> Result<bool> {
    let standby: bool = c
        .query_one("SELECT pg_is_in_recovery()", &[])
        .await
        .map_err(pg_err("cannot ask whether the server is a standby"))?
        .get(0);
    if standby && timing.is_some_and(|t| t.heartbeat.is_some()) {
        crate::log::warn(
            "--heartbeat-ms: this server is a standby, which takes no writes; no heartbeats (write them on the primary)",
            &[("event", "heartbeats-off".into())],
        );
    }
    Ok(standby)
}

/// Warn of the next reconnect attempt, then wait its delay (doubled each
/// attempt, at most 30 s), or until a stop is asked for.
async fn wait_before_retry(t: &FollowTiming, retries: u32, reason: &str) {
    let delay = (t.retry_delay * 2u32.saturating_pow(retries - 1)).min(Duration::from_secs(30));
    crate::log::warn(
        &format!(
            "{reason}; reconnecting in {} ms (attempt {} of {})",
            delay.as_millis(),
            retries,
            t.max_retries
        ),
        &[
            ("event", "reconnecting".into()),
            ("attempt", retries.into()),
            ("delay_ms", (delay.as_millis() as u64).into()),
        ],
    );
    let until = Instant::now() + delay;
    while Instant::now() < until && !crate::util::stop::requested() {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The read's state machine, writing batches to `out`, and the high-water
/// mark where a read that does not follow ends (the WAL end it saw, or its start).
fn new_reader<'w>(
    o: &Opened,
    limits: ReadLimits,
    timing: Option<FollowTiming>,
    catalog: Catalog,
    bf: Backfills,
    out: &'w mut dyn Write,
) -> (Reader<'w>, Sequence) {
    let high_water = sequence(o.wal_end, 0).max(o.start);
    // Headers carry the tables as the stream has described them so far
    // (the schema at this point of the WAL, not the catalog's now).
    let w = BatchOut::new(o.id.clone(), o.start, high_water, Vec::new(), out);
    let settings = ReadSettings {
        follow: timing.is_some(),
        wal_end: o.wal_end,
        limits,
        idle_batch: timing.map(|t| t.idle_batch),
    };
    let mut r = Reader::new(settings, o.start, catalog, bf, limits.stream_budget, w);
    if timing.is_some() {
        r.w.owe_first_batch();
    }
    (r, high_water)
}

/// The end of a stream: the batch a stopped follower still owes, then
/// everything written flushed.
fn end_stream(r: &mut Reader<'_>, l: &Link<'_>) -> Result<()> {
    // A follower stopped before its first batch still writes one (empty,
    // at its start), as a SQLite follower always does: apply then ends
    // with the stream, and the pipeline with status 0.
    if l.timing.is_some() && r.w.batches == 0 && crate::util::stop::requested() {
        let at = r.w.position;
        r.w.finish_batch(at)?;
    }
    r.w.out.flush().map_err(io_out)?;
    Ok(())
}

/// Large transactions: the highest protocol the server has, with streaming
/// (docs/POSTGRES.md, "Large transactions"), unless asked for protocol 1.
/// Logical messages always (the DDL trigger's and the backfills', and the
/// application's with --messages).
fn start_options(limits: &ReadLimits, server: i32) -> StartOptions {
    let (version, streaming) = match (limits.pgoutput_v1, server) {
        (true, _) | (false, ..140_000) => (1, false),
        (false, 140_000..160_000) => (2, true),
        (false, _) => (4, true),
    };
    StartOptions {
        version,
        streaming,
        messages: true,
    }
}
