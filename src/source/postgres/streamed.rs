//! Streamed transactions (pgoutput protocol 2 and later, `streaming`):
//! the server sends a large transaction in progress in blocks instead of
//! holding it in its memory and spill files until the commit. Each open
//! transaction's messages wait here, in a spool of their own (memory up to
//! a budget shared by all of them, the rest in unnamed files), until its
//! Stream Commit; then they are read back as one transaction, with the
//! commit's position, exactly as protocol 1 would have sent it: the same
//! messages in the same order, so the same sequences (docs/POSTGRES.md,
//! "Large transactions").
//!
//! A Stream Abort of the transaction forgets it; one of a subtransaction
//! cuts the spool at the subtransaction's first message (everything after
//! it belongs to that subtransaction or to one inside it: a session's
//! statements run one after another, and the server sends each block's
//! changes in WAL order).
//!
//! A Relation message cut off that way may still be needed: the server
//! describes a table once per streamed transaction, so a change after the
//! cut may come without one. But it may also describe the table as a
//! rolled-back `ALTER TABLE` left it. So it is put back only right before
//! the table's next change, and not at all when the server describes the
//! table again first. It does so in every block after one in which the
//! transaction changed the catalog (it runs the transaction's invalidations
//! at the end of each block), so after a rolled-back `ALTER TABLE` the
//! table comes described as the rollback left it; without DDL the
//! description put back is the one the table still has. Type messages cut
//! off are not put back: the read uses none.

use super::pgoutput::{self, Message};
use crate::error::{Error, Result};
use crate::ops::spool::Spool;
use std::collections::HashMap;
use std::io::BufRead;

/// How much streamed transactions may hold.
#[derive(Debug, Clone, Copy)]
pub struct Budget {
    /// Bytes held in memory across every open transaction; beyond, the
    /// largest moves to its file.
    pub memory: usize,
    /// Bytes held in all (memory and files); beyond, the read fails.
    pub max_bytes: Option<u64>,
}

/// Default in-memory part of the open transactions (`--spool-memory`).
pub const DEFAULT_MEMORY: usize = 4 << 20;

impl Default for Budget {
    fn default() -> Self {
        Budget {
            memory: DEFAULT_MEMORY,
            max_bytes: None,
        }
    }
}

/// One open streamed transaction.
struct Open {
    spool: Spool,
    /// Each subtransaction's first message, in the order they began: where
    /// a rollback of it cuts.
    subxacts: Vec<(u32, u64)>,
    /// Where each subtransaction is in `subxacts`: a transaction may have
    /// hundreds of thousands (a PL/pgSQL loop with an EXCEPTION block), and
    /// each message asks whether its subtransaction is known.
    subxact_at: HashMap<u32, usize>,
    /// Relation messages in the spool: where, of which table, the message.
    described: Vec<(u64, u32, Vec<u8>)>,
    /// Tables whose one description was cut: the description to put back
    /// before the table's next change, unless another comes first.
    undescribed: HashMap<u32, Vec<u8>>,
}

impl Open {
    fn new(memory: usize) -> Self {
        Open {
            spool: Spool::new(memory)
                .holding("a streamed transaction in progress", "until it commits"),
            subxacts: Vec::new(),
            subxact_at: HashMap::new(),
            described: Vec::new(),
            undescribed: HashMap::new(),
        }
    }
}

/// The tables a plain (protocol 1 shaped) message names: a Relation's or a
/// row change's one, a Truncate's each; none for anything else.
fn relids(plain: &[u8]) -> Vec<u32> {
    let u32_at = |i: usize| {
        plain
            .get(i..i + 4)
            .map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    };
    match plain.first() {
        Some(b'R' | b'I' | b'U' | b'D') => u32_at(1).into_iter().collect(),
        Some(b'T') => {
            let n = u32_at(1).unwrap_or(0) as usize;
            (0..n).map_while(|k| u32_at(6 + 4 * k)).collect()
        }
        _ => Vec::new(),
    }
}

/// Every open streamed transaction of a replication session.
pub(super) struct Streams {
    open: HashMap<u32, Open>,
    /// The transaction whose block is being received.
    block: Option<u32>,
    budget: Budget,
    /// Bytes held in all spools, and in their memory parts.
    held: u64,
    in_memory: usize,
    /// Largest `held` seen, for the log.
    pub(super) peak: u64,
}

/// What a replication message asks of the stream loop.
pub(super) enum Feed {
    /// Messages to handle now, in order: one as it came, or a committed
    /// streamed transaction as Begin, its messages, Commit.
    Now(Option<Message>),
    Replay(Replay),
}

impl Feed {
    pub(super) fn next(&mut self) -> Result<Option<Message>> {
        match self {
            Feed::Now(m) => Ok(m.take()),
            Feed::Replay(r) => r.next(),
        }
    }
}

/// A committed streamed transaction, read back from its spool.
pub(super) struct Replay {
    begin: Option<Message>,
    reader: Box<dyn BufRead + Send>,
    commit: Option<Message>,
    buf: Vec<u8>,
}

impl Replay {
    fn next(&mut self) -> Result<Option<Message>> {
        if let Some(b) = self.begin.take() {
            return Ok(Some(b));
        }
        let read_back = |e: std::io::Error| {
            Error::io(
                "cannot read a streamed transaction back from its spool file",
                e,
            )
        };
        // The spool holds whole messages: its end is the transaction's.
        if self.reader.fill_buf().map_err(read_back)?.is_empty() {
            return Ok(self.commit.take());
        }
        let mut len = [0u8; 4];
        self.reader.read_exact(&mut len).map_err(read_back)?;
        self.buf.resize(u32::from_be_bytes(len) as usize, 0);
        self.reader.read_exact(&mut self.buf).map_err(read_back)?;
        decode(&self.buf).map(Some)
    }
}

pub(super) fn decode(data: &[u8]) -> Result<Message> {
    pgoutput::decode(data).map_err(|e| {
        Error::data("the replication stream sent a message this version cannot read").with_source(e)
    })
}

fn protocol(what: impl Into<String>) -> Error {
    Error::data(format!(
        "the replication stream broke the streaming protocol: {}",
        what.into()
    ))
}

impl Streams {
    pub(super) fn new(budget: Budget) -> Self {
        Streams {
            open: HashMap::new(),
            block: None,
            budget,
            held: 0,
            in_memory: 0,
            peak: 0,
        }
    }

    /// Forget every open transaction (a new session sends them again from
    /// their start).
    pub(super) fn clear(&mut self) {
        self.open.clear();
        self.block = None;
        self.held = 0;
        self.in_memory = 0;
    }

    /// Transactions open now.
    pub(super) fn open_count(&self) -> usize {
        self.open.len()
    }

    /// A stream block is being received: its messages go to a spool.
    pub(super) fn in_block(&self) -> bool {
        self.block.is_some()
    }

    /// Bytes held now.
    pub(super) fn held(&self) -> u64 {
        self.held
    }

    /// Take one replication message.
    pub(super) fn take(&mut self, data: &[u8]) -> Result<Feed> {
        if let Some(top) = self.block {
            if let Some((xid, plain)) = pgoutput::in_stream(data).map_err(|e| {
                Error::data("the replication stream sent a message this version cannot read")
                    .with_source(e)
            })? {
                self.hold(top, xid, plain)?;
                return Ok(Feed::Now(None));
            }
        }
        let msg = decode(data)?;
        match msg {
            Message::StreamStart { xid, first_segment } => {
                if let Some(b) = self.block {
                    return Err(protocol(format!(
                        "Stream Start of transaction {xid} inside the block of transaction {b}"
                    )));
                }
                if first_segment {
                    if let Some(old) = self.open.remove(&xid) {
                        self.forget(&old);
                    }
                    self.open.insert(xid, Open::new(self.budget.memory));
                } else if !self.open.contains_key(&xid) {
                    return Err(protocol(format!(
                        "a later block of transaction {xid}, whose first block never came"
                    )));
                }
                self.block = Some(xid);
                Ok(Feed::Now(None))
            }
            Message::StreamStop => {
                if self.block.take().is_none() {
                    return Err(protocol("Stream Stop outside a block"));
                }
                Ok(Feed::Now(None))
            }
            Message::StreamAbort { xid, subxid } => {
                if self.block.is_some() {
                    return Err(protocol("Stream Abort inside a block"));
                }
                if xid == subxid {
                    if let Some(old) = self.open.remove(&xid) {
                        self.forget(&old);
                    }
                } else {
                    self.cut(xid, subxid)?;
                }
                Ok(Feed::Now(None))
            }
            Message::StreamCommit {
                xid,
                flags,
                commit_lsn,
                end_lsn,
                timestamp,
            } => {
                if self.block.is_some() {
                    return Err(protocol("Stream Commit inside a block"));
                }
                let mut open = self.open.remove(&xid).ok_or_else(|| {
                    protocol(format!(
                        "Stream Commit of transaction {xid}, whose blocks never came"
                    ))
                })?;
                self.forget(&open);
                Ok(Feed::Replay(Replay {
                    begin: Some(Message::Begin {
                        final_lsn: commit_lsn,
                        timestamp,
                        xid,
                    }),
                    reader: open.spool.drain()?,
                    commit: Some(Message::Commit {
                        flags,
                        commit_lsn,
                        end_lsn,
                        timestamp,
                    }),
                    buf: Vec::new(),
                }))
            }
            m => Ok(Feed::Now(Some(m))),
        }
    }

    /// A transaction's figures leave the totals.
    fn forget(&mut self, open: &Open) {
        self.held -= open.spool.len();
        self.in_memory -= open.spool.in_memory();
    }

    fn hold(&mut self, top: u32, xid: u32, plain: Vec<u8>) -> Result<()> {
        let open = self
            .open
            .get_mut(&top)
            .ok_or_else(|| protocol(format!("a block of transaction {top}, which is not open")))?;
        let at = open.spool.len();
        if xid != top && !open.subxact_at.contains_key(&xid) {
            open.subxact_at.insert(xid, open.subxacts.len());
            open.subxacts.push((xid, at));
        }
        if plain.first() == Some(&b'R') {
            if let Some(&relid) = relids(&plain).first() {
                open.undescribed.remove(&relid);
                open.described.push((at, relid, plain.clone()));
            }
        } else if !open.undescribed.is_empty() {
            // A change of a table whose description was cut: put it back.
            for relid in relids(&plain) {
                let open = self.open.get_mut(&top).expect("an open transaction");
                if let Some(m) = open.undescribed.remove(&relid) {
                    let at = open.spool.len();
                    open.described.push((at, relid, m.clone()));
                    self.push(top, &m)?;
                }
            }
        }
        self.push(top, &plain)
    }

    /// Add one message to a transaction's spool, within the budget.
    fn push(&mut self, top: u32, plain: &[u8]) -> Result<()> {
        let open = self.open.get_mut(&top).expect("an open transaction");
        let mem_before = open.spool.in_memory();
        let len_before = open.spool.len();
        open.spool.push(&(plain.len() as u32).to_be_bytes())?;
        open.spool.push(plain)?;
        self.held += open.spool.len() - len_before;
        self.in_memory = self.in_memory + open.spool.in_memory() - mem_before;
        self.peak = self.peak.max(self.held);
        if let Some(max) = self.budget.max_bytes {
            if self.held > max {
                return Err(Error::limit(format!(
                    "streamed transactions in progress hold {} bytes ({} open, transaction {top} the latest), over --max-spool-bytes {max}; nothing of them was written, so the cursor stays where it was: give more (--max-spool-bytes N, with room for it in --spool-dir), or read with --pgoutput-protocol 1 so the server holds large transactions until they commit",
                    self.held,
                    self.open.len()
                )));
            }
        }
        // Over the memory budget: the transaction holding most in memory
        // moves to its file.
        while self.in_memory > self.budget.memory {
            let Some((_, largest)) = self
                .open
                .iter_mut()
                .filter(|(_, o)| o.spool.in_memory() > 0)
                .max_by_key(|(_, o)| o.spool.in_memory())
            else {
                break;
            };
            let n = largest.spool.in_memory();
            largest.spool.spill()?;
            self.in_memory -= n;
        }
        Ok(())
    }

    /// A subtransaction rolled back: cut its transaction's spool at the
    /// subtransaction's first message.
    fn cut(&mut self, top: u32, subxid: u32) -> Result<()> {
        let Some(open) = self.open.get_mut(&top) else {
            // Nothing of it was streamed.
            return Ok(());
        };
        let Some(&i) = open.subxact_at.get(&subxid) else {
            return Ok(());
        };
        let at = open.subxacts[i].1;
        // Those that began after it are inside it: statements run one
        // after another.
        for (x, _) in open.subxacts.drain(i..) {
            open.subxact_at.remove(&x);
        }
        let kept = open.described.partition_point(|(o, _, _)| *o < at);
        for (_, relid, m) in open.described.split_off(kept) {
            // The first description cut is the nearest to the table's
            // shape before the subtransaction.
            open.undescribed.entry(relid).or_insert(m);
        }
        let (len_before, mem_before) = (open.spool.len(), open.spool.in_memory());
        open.spool.truncate(at)?;
        self.held -= len_before - open.spool.len();
        self.in_memory -= mem_before - open.spool.in_memory();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Messages as a protocol 2 server sends them in a stream block.
    fn start(xid: u32, first: bool) -> Vec<u8> {
        let mut m = vec![b'S'];
        m.extend(xid.to_be_bytes());
        m.push(first as u8);
        m
    }

    /// A Relation of table `relid` named `name` with columns `cols`.
    fn relation(xid: u32, relid: u32, cols: &[&str]) -> Vec<u8> {
        let mut m = vec![b'R'];
        m.extend(xid.to_be_bytes());
        m.extend(relid.to_be_bytes());
        m.extend(b"public\0t\0");
        m.push(b'f');
        m.extend((cols.len() as u16).to_be_bytes());
        for (i, c) in cols.iter().enumerate() {
            m.push((i == 0) as u8);
            m.extend(c.as_bytes());
            m.push(0);
            m.extend(20u32.to_be_bytes());
            m.extend((-1i32).to_be_bytes());
        }
        m
    }

    fn insert(xid: u32, relid: u32, id: u64) -> Vec<u8> {
        let mut m = vec![b'I'];
        m.extend(xid.to_be_bytes());
        m.extend(relid.to_be_bytes());
        m.push(b'N');
        m.extend(1u16.to_be_bytes());
        let v = id.to_string();
        m.push(b't');
        m.extend((v.len() as u32).to_be_bytes());
        m.extend(v.as_bytes());
        m
    }

    fn abort(xid: u32, subxid: u32) -> Vec<u8> {
        let mut m = vec![b'A'];
        m.extend(xid.to_be_bytes());
        m.extend(subxid.to_be_bytes());
        m
    }

    fn commit(xid: u32) -> Vec<u8> {
        let mut m = vec![b'c'];
        m.extend(xid.to_be_bytes());
        m.push(0);
        m.extend(0x100u64.to_be_bytes());
        m.extend(0x108u64.to_be_bytes());
        m.extend(0i64.to_be_bytes());
        m
    }

    /// Feed `blocks` (each a block's messages after its Stream Start),
    /// with `between` after each block, then commit: what is read back,
    /// as (kind, table, columns or row id).
    fn replay(sends: Vec<Vec<u8>>) -> Vec<String> {
        let mut streams = Streams::new(Budget::default());
        let mut out = Vec::new();
        for data in sends {
            let mut feed = streams.take(&data).unwrap();
            while let Some(m) = feed.next().unwrap() {
                out.push(match m {
                    Message::Relation(r) => format!(
                        "R {} {}",
                        r.oid,
                        r.columns
                            .iter()
                            .map(|c| c.name.as_str())
                            .collect::<Vec<_>>()
                            .join(",")
                    ),
                    Message::Insert { relation, new } => format!("I {relation} {new:?}"),
                    Message::Begin { .. } => "B".into(),
                    Message::Commit { .. } => "C".into(),
                    other => format!("{other:?}"),
                });
            }
        }
        out
    }

    fn row(relid: u32, id: u64) -> String {
        format!("I {relid} [Text({:?})]", id.to_string().into_bytes())
    }

    const STOP: &[u8] = b"E";

    /// A savepoint whose `ALTER TABLE` was rolled back: the server
    /// describes the table again after the rollback, and the description
    /// the rolled-back part had is never put back.
    #[test]
    fn a_rolled_back_description_never_comes_back() {
        let (top, sub) = (700, 701);
        // Described before the savepoint.
        let got = replay(vec![
            start(top, true),
            relation(top, 5, &["id"]),
            insert(top, 5, 1),
            STOP.to_vec(),
            start(top, false),
            relation(sub, 5, &["id", "extra"]),
            insert(sub, 5, 2),
            STOP.to_vec(),
            abort(top, sub),
            start(top, false),
            relation(top, 5, &["id"]),
            insert(top, 5, 3),
            STOP.to_vec(),
            commit(top),
        ]);
        assert_eq!(
            got,
            ["B", "R 5 id", &row(5, 1), "R 5 id", &row(5, 3), "C"],
            "described before the savepoint"
        );
        // First described inside the savepoint, described again after.
        let got = replay(vec![
            start(top, true),
            relation(sub, 5, &["id", "extra"]),
            insert(sub, 5, 2),
            STOP.to_vec(),
            abort(top, sub),
            start(top, false),
            relation(top, 5, &["id"]),
            insert(top, 5, 3),
            STOP.to_vec(),
            commit(top),
        ]);
        assert_eq!(got, ["B", "R 5 id", &row(5, 3), "C"], "described again");
        // Cut with no DDL: the server does not describe it again, and the
        // cut description comes back before the next change, once.
        let got = replay(vec![
            start(top, true),
            insert(top, 6, 0),
            relation(sub, 5, &["id"]),
            insert(sub, 5, 2),
            STOP.to_vec(),
            abort(top, sub),
            start(top, false),
            insert(top, 6, 1),
            insert(top, 5, 3),
            insert(top, 5, 4),
            STOP.to_vec(),
            commit(top),
        ]);
        assert_eq!(
            got,
            [
                "B",
                &row(6, 0),
                &row(6, 1),
                "R 5 id",
                &row(5, 3),
                &row(5, 4),
                "C"
            ],
            "put back where needed"
        );
        // Put back, then cut again with a later savepoint, then needed.
        let got = replay(vec![
            start(top, true),
            relation(sub, 5, &["id"]),
            insert(sub, 5, 2),
            STOP.to_vec(),
            abort(top, sub),
            start(top, false),
            insert(702, 5, 3),
            STOP.to_vec(),
            abort(top, 702),
            start(top, false),
            insert(top, 5, 4),
            STOP.to_vec(),
            commit(top),
        ]);
        assert_eq!(got, ["B", "R 5 id", &row(5, 4), "C"], "cut twice");
    }

    /// A streamed transaction with a subtransaction per row (a PL/pgSQL
    /// loop with an EXCEPTION block) is held in time linear in its
    /// subtransactions, and a rollback of the last one still cuts right.
    #[test]
    fn subtransactions_cost_linear_time() {
        let top = 1;
        let n = 200_000u32;
        let mut streams = Streams::new(Budget::default());
        let t0 = std::time::Instant::now();
        let _ = streams.take(&start(top, true)).unwrap();
        let _ = streams.take(&relation(top, 5, &["id"])).unwrap();
        for k in 0..n {
            let _ = streams.take(&insert(top + 1 + k, 5, k as u64)).unwrap();
        }
        let _ = streams.take(STOP).unwrap();
        let _ = streams.take(&abort(top, top + n)).unwrap();
        let mut feed = streams.take(&commit(top)).unwrap();
        let mut rows = 0;
        while let Some(m) = feed.next().unwrap() {
            rows += matches!(m, Message::Insert { .. }) as u32;
        }
        assert_eq!(rows, n - 1, "the last subtransaction's row is cut");
        // Linear: well under a second in a release build; a scan per
        // message (quadratic) takes minutes here.
        assert!(
            t0.elapsed() < std::time::Duration::from_secs(20),
            "{n} subtransactions took {:?}",
            t0.elapsed()
        );
    }
}
