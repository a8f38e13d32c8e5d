//! Sending a batch's held rows: truncates, then bounded RowBinary inserts
//! for each table segment, encoded from the events as their layout says.

use super::*;

impl ClickHouse {
    /// Send a table's held rows, in inserts cut at the recorded bounds.
    pub(super) fn flush(&self, l: &Layout, held: &mut Held) -> Result<()> {
        self.send_rows(l, held)?;
        let truncates = std::mem::take(&mut held.truncates);
        if !truncates.is_empty() {
            self.truncate(l, &truncates)?;
        }
        Ok(())
    }

    /// Carry a batch's truncates of one table, after its rows were sent.
    ///
    /// `replacing`: every key whose newest row is live and older than the
    /// last truncate gets a deleted-row marker at the truncate's version, so
    /// `__current` shows the table empty at that point, rows of later events
    /// (newer versions) stay, and a replay of older rows can never win over
    /// the markers. Computed in the server (GROUP BY the key, then HAVING:
    /// exact whatever parts are merged), and idempotent: a key already
    /// marked is not marked again.
    /// `history`: one `truncate` row per truncate, data columns at their
    /// defaults; every earlier row stays.
    pub(super) fn truncate(&self, l: &Layout, truncates: &[Sequence]) -> Result<()> {
        let db = qi(&self.cfg.database);
        let t = qi(&l.name);
        match self.engine {
            Engine::Replacing => {
                let last = *truncates.last().expect("not empty");
                let v = version(l.kind, last)?;
                let keys: Vec<String> = l.schema.key.iter().map(|k| qi(k)).collect();
                let keys = keys.join(", ");
                self.query(
                    &format!(
                        "INSERT INTO {db}.{t} ({keys}, `_etl_version`, `_etl_deleted`) SELECT {keys}, toUInt64({v}), toUInt8(1) FROM {db}.{t} GROUP BY {keys} HAVING max(`_etl_version`) < {v} AND argMax(`_etl_deleted`, `_etl_version`) = 0"
                    ),
                    None,
                    Timeout::Insert,
                )?;
            }
            Engine::History => {
                let rows: Vec<String> = truncates
                    .iter()
                    .map(|&s| format!("('truncate', {}, {})", (s >> 64) as u64, s as u64))
                    .collect();
                self.query(
                    &format!(
                        "INSERT INTO {db}.{t} (`cdc_operation`, `cdc_lsn`, `cdc_tx_ordinal`) VALUES {}",
                        rows.join(", ")
                    ),
                    None,
                    Timeout::Insert,
                )?;
            }
        }
        Ok(())
    }

    /// Send a table's held rows.
    pub(super) fn send_rows(&self, l: &Layout, held: &mut Held) -> Result<()> {
        let total = held.spool.len();
        if total == 0 {
            return Ok(());
        }
        let cols: Vec<String> = l.schema.columns.iter().map(|c| qi(&c.name)).collect();
        let cols = match self.engine {
            Engine::Replacing => format!("{}, `_etl_version`, `_etl_deleted`", cols.join(", ")),
            Engine::History => format!(
                "`cdc_operation`, `cdc_lsn`, `cdc_tx_ordinal`, {}",
                cols.join(", ")
            ),
        };
        let sql = format!(
            "INSERT INTO {}.{} ({cols}) FORMAT RowBinary",
            qi(&self.cfg.database),
            qi(&l.name)
        );
        let mut bounds = std::mem::take(&mut held.bounds);
        if bounds.last() != Some(&total) {
            bounds.push(total);
        }
        held.since = 0;
        // A cluster sends one insert at a time (below): there, each may be
        // as large as allowed, since every one waits for its quorum.
        let senders = if self.cluster.is_some() { 1 } else { 2 };
        let parts = inserts(&bounds, self.cfg.max_insert_bytes as u64, senders);
        // Each insert's body streams from the spool (an insert is never held
        // in memory whole), and two are sent at once: the server takes them
        // in parallel, while this process has nothing else to do. The first
        // error stops the other sender before its next insert.
        let shared = held.spool.drain_shared()?;
        let url = self.url(&Timeout::Insert, false);
        let head = super::http::statement_then_data(&sql);
        let budget = self.budget(&Timeout::Insert);
        let (http, cfg) = (&self.http, &self.cfg);
        let next = std::sync::atomic::AtomicUsize::new(0);
        let failed = std::sync::atomic::AtomicBool::new(false);
        let send = || -> Result<()> {
            use std::sync::atomic::Ordering::SeqCst;
            while !failed.load(SeqCst) {
                let Some(&(start, len)) = parts.get(next.fetch_add(1, SeqCst)) else {
                    return Ok(());
                };
                let body = reqwest::blocking::Body::sized(
                    std::io::Cursor::new(head.clone()).chain(shared.part(start, len)),
                    head.len() as u64 + len,
                );
                if let Err(e) = super::http::post(http, cfg, url.clone(), budget, body)
                    .and_then(super::http::reply)
                {
                    failed.store(true, SeqCst);
                    return Err(e);
                }
            }
            Ok(())
        };
        std::thread::scope(|scope| {
            // A cluster's quorum inserts into one shard are linearized by
            // the server (a second one fails while the first is waiting for
            // its quorum): one at a time there.
            let other = (parts.len() > 1 && self.cluster.is_none()).then(|| scope.spawn(send));
            let mine = send();
            let theirs = match other {
                Some(h) => h.join().unwrap_or_else(|_| {
                    Err(Error::io(
                        "cannot send an insert",
                        std::io::Error::other("a sender thread failed"),
                    ))
                }),
                None => Ok(()),
            };
            mine.and(theirs)
        })
    }

    /// Encode one image as a row for the engine.
    /// `op` is the history row's operation; a `delete` is a tombstone in the replacing engine.
    pub(super) fn encode(
        &self,
        l: &Layout,
        out: &mut Vec<u8>,
        op: &str,
        row: &Row,
        seq: Sequence,
        snapshot: bool,
    ) -> Result<()> {
        let deleted = op == "delete";
        match self.engine {
            Engine::Replacing => {
                l.encode_row(out, row, (!snapshot).then_some(seq))?;
                out.extend(version(l.kind, seq)?.to_le_bytes());
                out.push(deleted as u8);
            }
            Engine::History => {
                leb128(out, op.len() as u64);
                out.extend_from_slice(op.as_bytes());
                out.extend(((seq >> 64) as u64).to_le_bytes());
                out.extend((seq as u64).to_le_bytes());
                l.encode_row(out, row, (!snapshot).then_some(seq))?;
            }
        }
        Ok(())
    }

    pub(super) fn encode_event(&self, l: &Layout, out: &mut Vec<u8>, e: &Event) -> Result<()> {
        match e.operation {
            Operation::Truncate { .. } => unreachable!("truncates are held apart"),
            Operation::Insert => self.encode(
                l,
                out,
                "insert",
                e.after.as_ref().expect("insert"),
                e.sequence,
                false,
            ),
            Operation::Delete => self.encode(
                l,
                out,
                "delete",
                e.before.as_ref().expect("delete"),
                e.sequence,
                false,
            ),
            Operation::Update => {
                let before = e.before.as_ref().expect("update");
                let after = e.after.as_ref().expect("update");
                // A key whose REAL zero changed sign only is the same key
                // in ClickHouse: one new version, no tombstone.
                let key_changed = (l.key.iter()).any(|&i| !before[i].same_normalized(&after[i]));
                if key_changed {
                    self.encode(l, out, "delete", before, e.sequence, false)?;
                }
                self.encode(l, out, "update", after, e.sequence, false)
            }
        }
    }
}

/// The inserts to send: `bounds` are row boundaries (every 8 MiB at most,
/// and the end); consecutive pieces are joined into inserts of at most
/// `max` bytes, and of about the total divided by the `senders` when that
/// is smaller, so that they share the work.
fn inserts(bounds: &[u64], max: u64, senders: u64) -> Vec<(u64, u64)> {
    let total = bounds.last().copied().unwrap_or(0);
    let target = max.min(total.div_ceil(senders.max(1))).max(1);
    let mut parts = Vec::new();
    let mut start = 0u64;
    let mut prev = 0u64;
    for &b in bounds {
        if b - start > target && prev > start {
            parts.push((start, prev - start));
            start = prev;
        }
        prev = b;
    }
    if prev > start {
        parts.push((start, prev - start));
    }
    parts
}

#[cfg(test)]
mod insert_tests;
