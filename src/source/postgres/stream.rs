//! Reading changes: the replication stream decoded into batch streams,
//! once (`read`) or following, acknowledging what the target holds.

use super::*;

impl PgSource {
    /// Write one batch stream of the changes after `after` (default: the
    /// slot's confirmed position), up to the WAL flushed when the read began.
    pub fn read(
        &self,
        after: Option<&Cursor>,
        limits: crate::source::ReadLimits,
        out: &mut dyn Write,
    ) -> Result<u64> {
        runtime()?.block_on(self.stream(after, limits, None, None, out))
    }

    /// Keep streaming, one batch per transaction; with `ack_target`,
    /// acknowledge what the target durably holds.
    pub fn follow(
        &self,
        after: Option<&Cursor>,
        limits: crate::source::ReadLimits,
        timing: crate::source::FollowTiming,
        ack_target: Option<&dyn Fn() -> Result<Option<Cursor>>>,
        out: &mut dyn Write,
    ) -> Result<u64> {
        // A follower never stops at a count: only the line cap and what
        // streamed transactions may hold apply.
        let limits = crate::source::ReadLimits {
            max_events: None,
            max_bytes: None,
            ..limits
        };
        runtime()?.block_on(self.stream(after, limits, Some(timing), ack_target, out))
    }

    pub(super) async fn stream(
        &self,
        after: Option<&Cursor>,
        limits: crate::source::ReadLimits,
        timing: Option<crate::source::FollowTiming>,
        ack_target: Option<&dyn Fn() -> Result<Option<Cursor>>>,
        out: &mut dyn Write,
    ) -> Result<u64> {
        let follow = timing.is_some();
        let idle_batch = timing.map(|t| t.idle_batch);
        let heartbeat = timing.and_then(|t| t.heartbeat);
        let receive_timeout = timing.and_then(|t| t.receive_timeout);
        let mut last_received = std::time::Instant::now();
        let mut last_heartbeat = std::time::Instant::now();
        let mut last_slot_look = std::time::Instant::now() - Duration::from_secs(60);
        let mut last_members_look = std::time::Instant::now();
        let mut c = self.client("read").await?;
        let (id, mut timeline) = self.identity_and_timeline().await?;
        let slot = slot_info(&c, &self.slot).await?.ok_or_else(|| {
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
        let mut start = match after {
            None => sequence(slot.confirmed, 0),
            Some(cur) => {
                if cur.source != id {
                    return Err(Error::state(format!(
                        "cursor is for source {:?} but this source is {id:?}",
                        cur.source
                    )));
                }
                if ((cur.sequence() >> 64) as u64) < slot.confirmed {
                    return Err(before_confirmed(
                        (cur.sequence() >> 64) as u64,
                        slot.confirmed,
                    ));
                }
                self.cursor_past_a_fork(&timeline, (cur.sequence() >> 64) as u64, slot.confirmed)
                    .await?;
                cur.sequence()
            }
        };
        let flushed: String = c
            .query_one(&format!("SELECT {WAL_END}::text"), &[])
            .await
            .map_err(pg_err("cannot read the WAL position"))?
            .get(0);
        let wal_end = parse_lsn(&flushed)?;
        let start_lsn = (start >> 64) as u64;
        if (start >> 64) as u64 > wal_end {
            return Err(Error::state(format!(
                "cursor LSN {} is beyond the server's WAL {flushed}",
                lsn_text(start_lsn)
            )));
        }
        let mut catalog = Catalog::load(&c, &self.publication).await?;
        // A standby takes no writes: no heartbeats there.
        let standby: bool = c
            .query_one("SELECT pg_is_in_recovery()", &[])
            .await
            .map_err(pg_err("cannot ask whether the server is a standby"))?
            .get(0);
        let heartbeat = if standby && heartbeat.is_some() {
            crate::log::warn(
                "--heartbeat-ms: this server is a standby, which takes no writes; no heartbeats (write them on the primary)",
                &[("event", "heartbeats-off".into())],
            );
            None
        } else {
            heartbeat
        };
        // The relations the publication publishes rows of: a partition
        // without FULL identity stops the read before anything is written;
        // one attached while following is told (its earlier rows are not in
        // the stream).
        let mut members = publication_members(&c, &self.publication).await?;
        if let Some(e) = partition_not_full(&members) {
            return Err(e);
        }

        // Reads never acknowledge: the status updates report the slot's own
        // confirmed position (raised only by --ack-from-target).
        // With the DDL trigger installed, its logical messages say which
        // columns a change renamed.
        // Logical messages (PostgreSQL 14+, which capture needs): the DDL
        // trigger's and the backfills' (docs/BACKFILL.md).
        // Large transactions: the highest protocol the server has, with
        // streaming (docs/POSTGRES.md, "Large transactions"), unless asked
        // for protocol 1.
        let server = server_version(&c).await?;
        let opts = match (limits.pgoutput_v1, server) {
            (true, _) | (false, ..140_000) => (1, false),
            (false, 140_000..160_000) => (2, true),
            (false, _) => (4, true),
        };
        let opts = StartOptions {
            version: opts.0,
            streaming: opts.1,
            messages: true,
        };
        let mut streams = super::streamed::Streams::new(limits.stream_budget);
        let mut ddl = DdlState::default();
        let mut bf = super::backfill::Backfills::load(&c, start).await?;
        let chunk_rows = timing.map(|t| t.backfill_chunk_rows).unwrap_or(4096);
        let mut client = Some(
            self.replication_stream(start_lsn, slot.confirmed, opts)
                .await?,
        );

        let high_water = sequence(wal_end, 0).max(start);
        // Headers carry the tables as the stream has described them so far
        // (the schema at this point of the WAL, not the catalog's now).
        let mut w = BatchOut::new(id.clone(), start, high_water, Vec::new(), out);
        let mut txn: Option<(u64, u64)> = None; // (commit lsn, ordinal)
        let mut total = 0u64;
        let mut bytes = 0u64;
        let mut acked = slot.confirmed;
        let mut last_ack_check = std::time::Instant::now();
        let mut last_idle_batch = std::time::Instant::now();
        let mut retries = 0u32;
        let mut ping = false;
        crate::metrics::confirmed(acked);
        crate::metrics::started();
        // Write events of the transaction being read (those at or before
        // the start were written before: a transaction sent again).
        macro_rules! write_events {
            ($events:expr) => {
                for e in $events {
                    if e.sequence <= start {
                        continue;
                    }
                    let len = w.encoded_len(&e) as u64;
                    limits.check_line(&w.line, &e)?;
                    // Like SQLite reads: stop before the bytes written
                    // would exceed the limit (one event at least).
                    if total > 0 && limits.max_bytes.is_some_and(|m| bytes + len > m) {
                        let at = w.position;
                        w.finish_batch(at)?;
                        return Ok(());
                    }
                    w.write_encoded(e.sequence)?;
                    crate::metrics::event(len);
                    total += 1;
                    bytes += len;
                    if limits.max_events.is_some_and(|m| total >= m) {
                        let at = w.position;
                        w.finish_batch(at)?;
                        return Ok(());
                    }
                }
            };
        }
        let result: Result<()> = loop {
            let session: Result<()> = async {
            let client = client.as_mut().expect("a session is open");
            'recv: loop {
                // SIGTERM/SIGINT: end the batch being written at the last
                // event written (a cursor may stop inside a transaction;
                // reading after it continues there), then stop.
                if follow && crate::util::stop::requested() {
                    if w.open {
                        let at = w.position;
                        w.finish_batch(at)?;
                    }
                    return Ok(());
                }
                // A backfill waiting and no chunk of ours in flight: write
                // the next chunk (it comes back through the stream).
                if follow && !standby && txn.is_none() {
                    bf.write_next(&c, &self.publication, chunk_rows).await?;
                }
                // The publication's relations again, between transactions
                // on a timer of their own (a busy stream is never quiet).
                if follow && txn.is_none() && last_members_look.elapsed() >= Duration::from_secs(5) {
                    last_members_look = std::time::Instant::now();
                    members = self.look_at_members(&c, std::mem::take(&mut members)).await?;
                }
                // Status updates (and a ping when the stream was quiet: the
                // server answers with a keepalive saying where its WAL is,
                // which ends a read and keeps a quiet follower's readiness
                // honest) are written here, never raced against a timer.
                client
                    .maintain(std::mem::take(&mut ping))
                    .await
                    .map_err(repl_err("replication stream failed"))?;
                let ev = {
                    match tokio::time::timeout(Duration::from_millis(500), client.recv()).await {
                        Ok(r) => {
                            last_received = std::time::Instant::now();
                            r.map_err(repl_err("replication stream failed"))?
                        }
                        Err(_) => {
                            ping = true;
                            if !follow {
                                continue;
                            }
                            // Nothing at all, although each quiet half
                            // second asks for a keepalive: the walsender
                            // is stalled or the network gone. Reconnect.
                            if let Some(limit) = receive_timeout {
                                if last_received.elapsed() >= limit {
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
                            if let Some(get) = ack_target {
                                acked = ack_from(get, &id, client, acked);
                            }
                            // The slot as the server sees it, for the metrics.
                            if last_slot_look.elapsed() >= Duration::from_secs(5) {
                                last_slot_look = std::time::Instant::now();
                                // Also the server's WAL position, so the
                                // byte lags grow while keepalives stop.
                                if let Ok(row) = c
                                    .query_one(
                                        &format!(
                                            "SELECT coalesce(pg_wal_lsn_diff({WAL_END}, restart_lsn)::bigint, 0), \
                                             coalesce(wal_status, ''), {WAL_END}::text \
                                             FROM pg_replication_slots WHERE slot_name = $1"
                                        ),
                                        &[&self.slot],
                                    )
                                    .await
                                {
                                    crate::metrics::slot(row.get(0), row.get::<_, String>(1).as_str());
                                    if let Ok(lsn) = parse_lsn(&row.get::<_, String>(2)) {
                                        crate::metrics::server_wal(lsn);
                                    }
                                }
                            }
                            // A heartbeat: a transactional logical message,
                            // never an event (its transaction reads as an
                            // empty batch), which moves the WAL, so the
                            // keepalives, idle batches and lag move too.
                            if heartbeat.is_some_and(|every| last_heartbeat.elapsed() >= every) {
                                last_heartbeat = std::time::Instant::now();
                                c.batch_execute(
                                    "SELECT pg_logical_emit_message(true, 'mooncdc_heartbeat', '')",
                                )
                                .await
                                .map_err(pg_err("cannot write a heartbeat"))?;
                            }
                            continue;
                        }
                    }
                };
                let Some(ev) = ev else { break };
                // The stream delivers again: the retry budget is renewed.
                retries = 0;
                // Acknowledge what the target holds on every kind of event,
                // not only when the stream pauses: a server waiting for a
                // reply (shutting down) sends keepalives back to back.
                if let Some(get) = ack_target {
                    if last_ack_check.elapsed() > Duration::from_millis(200) {
                        acked = ack_from(get, &id, client, acked);
                        last_ack_check = std::time::Instant::now();
                    }
                }
                match ev {
                    ReplEvent::KeepAlive { wal_end: we, reply } => {
                        crate::metrics::server_wal(we);
                        crate::metrics::progress();
                        if !follow && txn.is_none() && we >= wal_end {
                            break;
                        }
                        // Idle progress: the server has decoded its WAL up to
                        // `we` and sent every transaction that commits before
                        // it; with none in flight, nothing we still owe lies
                        // before it, so an empty batch may carry the cursor
                        // there (the target stores it, the acknowledgement
                        // follows it, the slot releases its WAL).
                        let end = sequence(we, 0);
                        if let Some(every) = idle_batch {
                            if txn.is_none()
                                && !w.open
                                && end > w.position
                                && (reply || last_idle_batch.elapsed() >= every)
                            {
                                w.high_water = w.high_water.max(end);
                                w.finish_batch(end)?;
                                w.out.flush().map_err(io_out)?;
                                last_idle_batch = std::time::Instant::now();
                            }
                        }
                    }
                    ReplEvent::XLogData { data, .. } => {
                        // A message as it came, or a streamed transaction
                        // that committed, read back whole.
                        let mut feed = streams.take(&data)?;
                        crate::metrics::streamed(streams.open_count(), streams.held());
                        while let Some(msg) = feed.next()? {
                        match msg {
                            Message::Begin { final_lsn, .. } => {
                                if !follow && final_lsn >= wal_end {
                                    break 'recv;
                                }
                                txn = Some((final_lsn, 0));
                                if follow {
                                    w.high_water = w.high_water.max(sequence(final_lsn + 1, 0));
                                }
                            }
                            Message::Commit {
                                commit_lsn, timestamp, ..
                            } => {
                                // Where backfill messages are, noted before
                                // their batch is written.
                                bf.commit(&c, commit_lsn).await?;
                                // Microseconds since 2000-01-01 -> ms since 1970.
                                crate::metrics::commit_time_ms(timestamp / 1000 + 946_684_800_000);
                                crate::metrics::position(commit_lsn);
                                txn = None;
                                if follow {
                                    let end = sequence(commit_lsn + 1, 0);
                                    if end > w.position {
                                        w.high_water = w.high_water.max(end);
                                        w.finish_batch(end)?;
                                        w.out.flush().map_err(io_out)?;
                                    }
                                }
                            }
                            Message::Relation(rel) => {
                                // Before the resume point (a transaction sent
                                // again after a reconnect, or a cursor inside
                                // one), the stream only catches up with what
                                // was written: the table's shape there.
                                let replaying = txn.is_some_and(|(c, o)| sequence(c, o + 1) <= start);
                                relation_message(&mut catalog, &c, rel, replaying, &mut ddl, &mut w).await?;
                            }
                            Message::Message { prefix, content, lsn, .. } if prefix == super::ddl_trigger::PREFIX => {
                                ddl.take(lsn, &content)?;
                            }
                            Message::Message { flags, prefix, content, .. }
                                if prefix == super::backfill::PREFIX && flags & 1 == 1 =>
                            {
                                let Some((commit, ordinal)) = txn.as_mut() else {
                                    return Err(Error::data("a backfill message outside a transaction"));
                                };
                                let (described, events) = bf.message(&content, *commit, ordinal)?;
                                if let Some((s, classes)) = described {
                                    super::backfill::describe(&mut w, &mut catalog, s, classes)?;
                                }
                                write_events!(events);
                            }
                            // The application's logical messages: a
                            // transactional one takes the next ordinal of
                            // its transaction whether it is written or not
                            // (so no event's sequence depends on
                            // --messages). The capture's own prefixes
                            // (mooncdc…) are above or ignored below.
                            Message::Message { flags, prefix, content, lsn }
                                if !prefix.starts_with("mooncdc") =>
                            {
                                let shown = limits.messages.contains(&prefix);
                                if flags & 1 == 1 {
                                    let Some((commit, ordinal)) = txn.as_mut() else {
                                        return Err(Error::data("a transactional logical message outside a transaction"));
                                    };
                                    *ordinal += 1;
                                    let seq = sequence(*commit, *ordinal);
                                    if shown && seq > start {
                                        let m = LogicalMessage::new(seq, prefix, content, true);
                                        limits.check_message(&m, lsn)?;
                                        w.write_message(&m)?;
                                    }
                                    continue;
                                }
                                // A non-transactional one comes outside any
                                // transaction: the server sends it when it
                                // decodes its record, never inside another
                                // transaction's messages.
                                if txn.is_some() {
                                    return Err(Error::data(format!(
                                        "a non-transactional logical message (prefix {prefix:?}, LSN {}) inside a transaction: the replication stream is not in the order the server sends",
                                        lsn_text(lsn)
                                    )));
                                }
                                // Its LSN is where its record ends (where the
                                // next record, perhaps the COMMIT of the
                                // transaction that emitted it, starts): it is
                                // a batch of its own just before that point,
                                // the message at (L−1)/1 and the batch ending
                                // at L/0, so a transaction committing at L
                                // comes after it and one before L before it
                                // (docs/POSTGRES.md, "Logical messages").
                                // A read that does not follow and meets one
                                // ending past its stop point writes it and
                                // ends there: the server would not send it
                                // again from a cursor past its start.
                                let beyond = !follow && lsn > wal_end;
                                if shown {
                                    let seq = sequence(lsn.saturating_sub(1), 1);
                                    let end = sequence(lsn, 0);
                                    if seq > start && seq > w.position {
                                        let m = LogicalMessage::new(seq, prefix, content, false);
                                        limits.check_message(&m, lsn)?;
                                        if w.open {
                                            let at = w.position;
                                            w.finish_batch(at)?;
                                        }
                                        w.high_water = w.high_water.max(end);
                                        w.write_message(&m)?;
                                        w.finish_batch(end)?;
                                        w.out.flush().map_err(io_out)?;
                                    }
                                }
                                if beyond {
                                    break 'recv;
                                }
                            }
                            Message::Insert { .. }
                            | Message::Update { .. }
                            | Message::Delete { .. }
                            | Message::Truncate { .. } => {
                                let Some((commit, ordinal)) = txn.as_mut() else {
                                    return Err(Error::data("row change outside a transaction"));
                                };
                                // A TRUNCATE of several tables is one event per
                                // table, each with its own ordinal.
                                let events = match msg {
                                    Message::Truncate { options, relations } => {
                                        let op = Operation::Truncate {
                                            cascade: options & 1 != 0,
                                            restart_identity: options & 2 != 0,
                                        };
                                        let mut v = Vec::with_capacity(relations.len());
                                        for r in relations {
                                            *ordinal += 1;
                                            v.push(catalog.truncate_event(sequence(*commit, *ordinal), r, op)?);
                                        }
                                        v
                                    }
                                    msg => {
                                        *ordinal += 1;
                                        vec![catalog.event(sequence(*commit, *ordinal), msg)?]
                                    }
                                };
                                // Tables being backfilled: their changes pass
                                // as far as their chunks have reached.
                                let events = bf.pass_all(events, &catalog)?;
                                write_events!(events);
                            }
                            Message::Type { .. } | Message::Origin { .. } | Message::Message { .. } => {}
                            Message::StreamStart { .. }
                            | Message::StreamStop
                            | Message::StreamCommit { .. }
                            | Message::StreamAbort { .. } => {
                                return Err(Error::data("a streaming control message inside a transaction read back"));
                            }
                        }
                        }
                    }
                }
            }
            // Caught up: the batch ends at the WAL position seen at the start
            // (unless it is inside a transaction cut by a limit).
            // A message past the stop point ended the read with its own
            // batch: nothing is left to end.
            if !follow && (w.open || w.position <= high_water) {
                let end = w.position.max(high_water);
                w.finish_batch(end)?;
            }
            Ok(())
        }
        .await;
            if let Some(cl) = client.take() {
                cl.close().await;
            }
            // A following read rides out a broken connection or a restarting
            // server: it reconnects and resumes after the last position written
            // to standard output (the batches in the pipe will be applied). A
            // transaction cut in the middle is sent again whole, with the same
            // commit position and ordinals, so the events already written are
            // skipped and the open batch goes on with the rest: the stream stays
            // valid. Anything else (a refusal) ends the read.
            let Some(t) = timing else { break session };
            if crate::util::stop::requested() {
                // Stopping: end an open batch where it stands, exit 0.
                if w.open {
                    let at = w.position;
                    if let Err(e) = w.finish_batch(at) {
                        break Err(e);
                    }
                }
                break Ok(());
            }
            let reason = match session {
                Err(e) if is_transient(&e) => {
                    crate::metrics::error(e.kind());
                    e.full_message()
                }
                Err(e) => break Err(e),
                Ok(()) => "the server ended the replication stream".to_string(),
            };
            loop {
                if retries >= t.max_retries {
                    break;
                }
                retries += 1;
                crate::metrics::retry();
                let delay =
                    (t.retry_delay * 2u32.saturating_pow(retries - 1)).min(Duration::from_secs(30));
                crate::log::warn(
                    &format!(
                        "{reason}; reconnecting in {} ms (attempt {retries} of {})",
                        delay.as_millis(),
                        t.max_retries
                    ),
                    &[
                        ("event", "reconnecting".into()),
                        ("attempt", retries.into()),
                        ("delay_ms", (delay.as_millis() as u64).into()),
                    ],
                );
                let until = std::time::Instant::now() + delay;
                while std::time::Instant::now() < until && !crate::util::stop::requested() {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                if crate::util::stop::requested() {
                    break;
                }
                match self
                    .resume(&id, &timeline, (w.position >> 64) as u64, acked, opts)
                    .await
                {
                    Ok((sql, repl, now_timeline)) => {
                        c = sql;
                        client = Some(repl);
                        timeline = now_timeline;
                        break;
                    }
                    Err(e) if is_transient(&e) => {}
                    Err(e) => return Err(e),
                }
            }
            if client.is_none() && crate::util::stop::requested() {
                if w.open {
                    let at = w.position;
                    if let Err(e) = w.finish_batch(at) {
                        break Err(e);
                    }
                }
                break Ok(());
            }
            if client.is_none() {
                break Err(Error::new(
                ErrorKind::Database,
                format!(
                    "gave up after {} reconnects ({reason}); start the pipeline again when the server is back",
                    t.max_retries
                ),
            ));
            }
            crate::log::write(
                "info",
                &format!(
                    "reconnected; resuming after {}",
                    lsn_text((w.position >> 64) as u64)
                ),
                &[("event", "reconnected".into())],
            );
            crate::metrics::reconnected();
            // The receive timeout counts from the new session's start.
            last_received = std::time::Instant::now();
            start = w.position;
            txn = None;
            // Streamed transactions in progress come again from their start.
            streams.clear();
            // What backfills have reached there (a transaction cut off is
            // sent again, its messages with it).
            if let Err(e) = bf.reload(&c, start).await {
                break Err(e);
            }
        };
        result?;
        w.out.flush().map_err(io_out)?;
        Ok(total)
    }
}
