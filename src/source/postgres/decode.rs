//! The read path's state machine: pgoutput messages in, a batch stream out.
//!
//! [`Reader`] holds what a read knows between messages (the transaction
//! being read, the tables as the stream described them, the streamed
//! transactions waiting in their spools, the backfills, the batch being
//! written) and has one handler per message: `begin`, `commit`,
//! `relation`, `logical_message`, `row_change` (Insert, Update, Delete),
//! `truncate`, and `keepalive`. Stream Start, Stop, Commit and Abort are
//! taken by [`Streams`] before the handlers see anything: a committed
//! streamed transaction comes back from its spool as Begin, its messages,
//! Commit, as protocol 1 sends it.
//!
//! The reader does no I/O of its own beyond writing the batch stream: what
//! it must ask the server (a column type's name, a table's key and NOT NULL
//! columns, where backfill messages were seen) goes through [`Catalogue`],
//! which the connection (`stream.rs`) implements with a SQL session and
//! the model test with a table in memory.

use super::backfill::Backfills;
use super::batch_out::BatchOut;
use super::catalog::Catalog;
use super::ddl_state::{relation_message, DdlState};
use super::pgoutput::Message;
use super::streamed::{Budget, Streams};
use super::{io_out, lsn_text, sequence};
use crate::error::{Error, Result};
use crate::source::ReadLimits;
use crate::wire::{Event, LogicalMessage, Operation, Schema, Sequence};
use std::time::{Duration, Instant};

/// What the read path asks the server while decoding.
pub(super) trait Catalogue {
    /// A column type's name, as `format_type(oid, typmod)` gives it.
    async fn type_name(&self, oid: u32, typmod: i32) -> Result<String>;
    /// Table `schema.table` as the catalog has it now: its key and which
    /// columns may be NULL (`named`: the columns the Relation message
    /// carries, generated ones among them where published).
    async fn table(&self, schema: &str, table: &str, named: &[String]) -> Result<Schema>;
    /// Note, durably, where the backfill messages of the transaction
    /// committed at `commit` are, before its batch is written.
    async fn note_backfills(&self, bf: &mut Backfills, commit: u64) -> Result<()>;
}

/// What the read does after a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Flow {
    /// Go on reading.
    Go,
    /// Caught up (a read that does not follow): end the batch and stop.
    CaughtUp,
    /// A limit ended the batch: stop, nothing more to write.
    Ended,
}

/// The settings of one read that the state machine follows.
#[derive(Debug, Clone, Copy)]
pub(super) struct ReadSettings {
    /// Following: one batch per transaction, never caught up.
    pub(super) follow: bool,
    /// Where a read that does not follow stops: the WAL it saw at its start.
    pub(super) wal_end: u64,
    pub(super) limits: ReadLimits,
    /// How often a quiet follower writes an empty batch to move its cursor.
    pub(super) idle_batch: Option<Duration>,
}

/// A read between two messages.
pub(super) struct Reader<'w> {
    pub(super) settings: ReadSettings,
    /// Events at or before it were written before (a transaction sent again
    /// after a reconnect, or a cursor inside one).
    pub(super) start: Sequence,
    /// The transaction being read: (commit LSN, ordinal of its last change).
    pub(super) txn: Option<(u64, u64)>,
    /// Its id (backfill windows keep changes by the transaction's id).
    xid: u32,
    pub(super) catalog: Catalog,
    pub(super) ddl: DdlState,
    pub(super) bf: Backfills,
    pub(super) streams: Streams,
    pub(super) w: BatchOut<'w>,
    /// Events written, and their bytes.
    pub(super) total: u64,
    bytes: u64,
    last_idle_batch: Instant,
}

impl<'w> Reader<'w> {
    pub(super) fn new(
        settings: ReadSettings,
        start: Sequence,
        catalog: Catalog,
        bf: Backfills,
        budget: Budget,
        w: BatchOut<'w>,
    ) -> Self {
        Reader {
            settings,
            start,
            txn: None,
            xid: 0,
            catalog,
            ddl: DdlState::default(),
            bf,
            streams: Streams::new(budget),
            w,
            total: 0,
            bytes: 0,
            last_idle_batch: Instant::now(),
        }
    }

    /// A new session after a reconnect resends from the last position
    /// written: what was in flight comes again from its start.
    pub(super) fn resumed(&mut self) {
        self.start = self.w.position;
        self.txn = None;
        self.streams.clear();
    }

    /// End the batch being written where it stands (a stop asked for).
    pub(super) fn end_open_batch(&mut self) -> Result<()> {
        if self.w.open {
            let at = self.w.position;
            self.w.finish_batch(at)?;
        }
        Ok(())
    }

    /// A read that does not follow is caught up: its batch ends at the WAL
    /// position seen at its start (unless inside a transaction cut by a
    /// limit, or already past it: a message past the stop point ended the
    /// read with its own batch).
    pub(super) fn caught_up(&mut self, high_water: Sequence) -> Result<()> {
        if self.w.open || self.w.position <= high_water {
            let end = self.w.position.max(high_water);
            self.w.finish_batch(end)?;
        }
        Ok(())
    }

    /// A replication message (XLogData's payload).
    pub(super) async fn data(&mut self, data: Vec<u8>, db: &impl Catalogue) -> Result<Flow> {
        // A logical message outside a stream block, perhaps a large one:
        // its content taken from the buffer, not copied.
        if data.first() == Some(&b'M') && !self.streams.in_block() {
            let msg = super::pgoutput::decode_owned(data).map_err(|e| {
                Error::data("the replication stream sent a message this version cannot read")
                    .with_source(e)
            })?;
            return self.message(msg, db).await;
        }
        // A message as it came, or a streamed transaction that committed,
        // read back whole.
        let mut feed = self.streams.take(&data)?;
        drop(data);
        crate::metrics::streamed(self.streams.open_count(), self.streams.held());
        while let Some(msg) = feed.next()? {
            let flow = self.message(msg, db).await?;
            if flow != Flow::Go {
                return Ok(flow);
            }
        }
        Ok(Flow::Go)
    }

    /// One pgoutput message, to its handler.
    async fn message(&mut self, msg: Message, db: &impl Catalogue) -> Result<Flow> {
        match msg {
            Message::Begin { final_lsn, xid, .. } => Ok(self.begin(final_lsn, xid)),
            Message::Commit {
                commit_lsn,
                timestamp,
                ..
            } => self.commit(commit_lsn, timestamp, db).await,
            Message::Relation(rel) => {
                // Before the resume point, the stream only catches up with
                // what was written: the table's shape there.
                let replaying = self
                    .txn
                    .is_some_and(|(c, o)| sequence(c, o + 1) <= self.start);
                relation_message(
                    &mut self.catalog,
                    db,
                    rel,
                    replaying,
                    &mut self.ddl,
                    &mut self.w,
                )
                .await?;
                Ok(Flow::Go)
            }
            Message::Message {
                flags,
                prefix,
                content,
                lsn,
            } => self.logical_message(flags & 1 == 1, prefix, content, lsn),
            Message::Truncate { options, relations } => self.truncate(options, relations),
            m @ (Message::Insert { .. } | Message::Update { .. } | Message::Delete { .. }) => {
                self.row_change(m)
            }
            Message::Type { .. } | Message::Origin { .. } => Ok(Flow::Go),
            Message::StreamStart { .. }
            | Message::StreamStop
            | Message::StreamCommit { .. }
            | Message::StreamAbort { .. } => Err(Error::data(
                "a streaming control message inside a transaction read back",
            )),
        }
    }

    /// Begin: a transaction committed at `final_lsn` follows. A read that
    /// does not follow stops before one at or past its stop point.
    fn begin(&mut self, final_lsn: u64, xid: u32) -> Flow {
        let s = self.settings;
        if !s.follow && final_lsn >= s.wal_end {
            return Flow::CaughtUp;
        }
        self.txn = Some((final_lsn, 0));
        self.xid = xid;
        if s.follow {
            self.w.high_water = self.w.high_water.max(sequence(final_lsn + 1, 0));
        }
        Flow::Go
    }

    /// Commit: backfill messages noted, then (following) the transaction's
    /// batch ends just after its commit position.
    async fn commit(
        &mut self,
        commit_lsn: u64,
        timestamp: i64,
        db: &impl Catalogue,
    ) -> Result<Flow> {
        self.bf.committed(commit_lsn, self.xid);
        db.note_backfills(&mut self.bf, commit_lsn).await?;
        // Microseconds since 2000-01-01 -> ms since 1970.
        crate::metrics::commit_time_ms(timestamp / 1000 + 946_684_800_000);
        crate::metrics::position(commit_lsn);
        self.txn = None;
        if self.settings.follow {
            let end = sequence(commit_lsn + 1, 0);
            if end > self.w.position {
                self.w.high_water = self.w.high_water.max(end);
                self.w.finish_batch(end)?;
                self.w.out.flush().map_err(io_out)?;
            }
        }
        Ok(Flow::Go)
    }

    /// The ordinal of the next change of the transaction being read.
    fn next_sequence(&mut self, what: &str) -> Result<Sequence> {
        let Some((commit, ordinal)) = self.txn.as_mut() else {
            return Err(Error::data(format!("{what} outside a transaction")));
        };
        *ordinal += 1;
        Ok(sequence(*commit, *ordinal))
    }

    /// Insert, Update or Delete: an event, passed by the backfills.
    fn row_change(&mut self, msg: Message) -> Result<Flow> {
        let seq = self.next_sequence("row change")?;
        let events = vec![self.catalog.event(seq, msg)?];
        self.changes(events)
    }

    /// A TRUNCATE of several tables is one event per table, each with its
    /// own ordinal.
    fn truncate(&mut self, options: u8, relations: Vec<u32>) -> Result<Flow> {
        let op = Operation::Truncate {
            cascade: options & 1 != 0,
            restart_identity: options & 2 != 0,
        };
        let mut events = Vec::with_capacity(relations.len());
        for r in relations {
            let seq = self.next_sequence("row change")?;
            events.push(self.catalog.truncate_event(seq, r, op)?);
        }
        self.changes(events)
    }

    /// Tables being backfilled: their changes pass as far as their chunks
    /// have reached.
    fn changes(&mut self, events: Vec<Event>) -> Result<Flow> {
        let events = self.bf.pass_all(events, &self.catalog)?;
        self.write_events(events)
    }

    /// Write events of the transaction being read (those at or before the
    /// start were written before: a transaction sent again), within the
    /// read's limits.
    fn write_events(&mut self, events: Vec<Event>) -> Result<Flow> {
        let limits = self.settings.limits;
        for e in events {
            if e.sequence <= self.start {
                continue;
            }
            let len = self.w.encoded_len(&e) as u64;
            limits.check_line(&self.w.line, &e)?;
            // Like SQLite reads: stop before the bytes written would exceed
            // the limit (one event at least).
            if self.total > 0 && limits.max_bytes.is_some_and(|m| self.bytes + len > m) {
                let at = self.w.position;
                self.w.finish_batch(at)?;
                return Ok(Flow::Ended);
            }
            self.w.write_encoded(e.sequence)?;
            crate::metrics::event(len);
            self.total += 1;
            self.bytes += len;
            if limits.max_events.is_some_and(|m| self.total >= m) {
                let at = self.w.position;
                self.w.finish_batch(at)?;
                return Ok(Flow::Ended);
            }
        }
        Ok(Flow::Go)
    }

    /// A logical message: the capture's own (the DDL trigger's, the
    /// backfills') or the application's.
    fn logical_message(
        &mut self,
        transactional: bool,
        prefix: String,
        content: Vec<u8>,
        lsn: u64,
    ) -> Result<Flow> {
        if prefix == super::ddl_trigger::PREFIX {
            // Not from a transaction written whole before the start (read
            // again for a backfill's window): the stream said it already.
            if self
                .txn
                .is_none_or(|(c, _)| sequence(c + 1, 0) > self.start)
            {
                self.ddl.take(lsn, &content)?;
            }
            return Ok(Flow::Go);
        }
        if prefix == super::backfill::PREFIX && transactional {
            return self.backfill_message(&content);
        }
        // Anything else of the capture's own (heartbeats) is never written
        // and takes no ordinal.
        if prefix.starts_with("mooncdc") {
            return Ok(Flow::Go);
        }
        let shown = self.settings.limits.messages.contains(&prefix);
        if transactional {
            self.transactional_message(shown, prefix, content, lsn)
        } else {
            self.loose_message(shown, prefix, content, lsn)
        }
    }

    /// A backfill's message: the chunk rows (or request, or end) it stands
    /// for, in its transaction.
    fn backfill_message(&mut self, content: &[u8]) -> Result<Flow> {
        let Some((commit, ordinal)) = self.txn.as_mut() else {
            return Err(Error::data("a backfill message outside a transaction"));
        };
        // A transaction written whole before the read's start, read again
        // for a backfill's window: what its messages did is where the read
        // began (Backfills::load).
        if sequence(*commit + 1, 0) <= self.start {
            return Ok(Flow::Go);
        }
        let (described, events) = self.bf.message(content, *commit, ordinal)?;
        if let Some((s, classes)) = described {
            super::backfill::describe(&mut self.w, &mut self.catalog, s, classes)?;
        }
        self.write_events(events)
    }

    /// A transactional message takes the next ordinal of its transaction
    /// whether it is written or not, so no event's sequence depends on
    /// `--messages`.
    fn transactional_message(
        &mut self,
        shown: bool,
        prefix: String,
        content: Vec<u8>,
        lsn: u64,
    ) -> Result<Flow> {
        let seq = self.next_sequence("a transactional logical message")?;
        if shown && seq > self.start {
            let m = LogicalMessage::new(seq, prefix, content, true);
            self.settings.limits.check_message(&m, lsn)?;
            self.w.write_message(&m)?;
        }
        Ok(Flow::Go)
    }

    /// A non-transactional message comes outside any transaction: the
    /// server sends it when it decodes its record. Its LSN `L` is where its
    /// record ends, which is where the next record (perhaps the COMMIT of
    /// the transaction that emitted it) starts: it is a batch of its own
    /// just before that point, the message at (L−1)/1 and the batch ending
    /// at L/0, so a transaction committing at L comes after it and one
    /// before L before it (docs/POSTGRES.md, "Logical messages"). A read
    /// that does not follow and meets one ending past its stop point writes
    /// it and ends there: the server would not send it again from a cursor
    /// past its start.
    fn loose_message(
        &mut self,
        shown: bool,
        prefix: String,
        content: Vec<u8>,
        lsn: u64,
    ) -> Result<Flow> {
        if self.txn.is_some() {
            return Err(Error::data(format!(
                "a non-transactional logical message (prefix {prefix:?}, LSN {}) inside a transaction: the replication stream is not in the order the server sends",
                lsn_text(lsn)
            )));
        }
        let beyond = !self.settings.follow && lsn > self.settings.wal_end;
        let seq = sequence(lsn.saturating_sub(1), 1);
        if shown && seq > self.start && seq > self.w.position {
            let end = sequence(lsn, 0);
            let m = LogicalMessage::new(seq, prefix, content, false);
            self.settings.limits.check_message(&m, lsn)?;
            self.end_open_batch()?;
            self.w.high_water = self.w.high_water.max(end);
            self.w.write_message(&m)?;
            self.w.finish_batch(end)?;
            self.w.out.flush().map_err(io_out)?;
        }
        Ok(if beyond { Flow::CaughtUp } else { Flow::Go })
    }

    /// A keepalive: the server has decoded its WAL up to `wal_end` and sent
    /// every transaction that commits before it. A read that does not
    /// follow is caught up there; a quiet follower with nothing in flight
    /// may write an empty batch that carries its cursor there (the target
    /// stores it, the acknowledgement follows it, the slot releases its
    /// WAL): when the server asks for a reply, or every idle-batch period.
    pub(super) fn keepalive(&mut self, wal_end: u64, reply: bool) -> Result<Flow> {
        crate::metrics::server_wal(wal_end);
        crate::metrics::progress();
        let s = self.settings;
        if !s.follow && self.txn.is_none() && wal_end >= s.wal_end {
            return Ok(Flow::CaughtUp);
        }
        let end = sequence(wal_end, 0);
        if let Some(every) = s.idle_batch {
            if self.txn.is_none()
                && !self.w.open
                && end > self.w.position
                && (reply || self.last_idle_batch.elapsed() >= every)
            {
                self.w.high_water = self.w.high_water.max(end);
                self.w.finish_batch(end)?;
                self.w.out.flush().map_err(io_out)?;
                self.last_idle_batch = Instant::now();
            }
        }
        Ok(Flow::Go)
    }
}
