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
                .holding("a streamed transaction in progress", "until it commits")
                .advising(
                    "or read with --pgoutput-protocol 1, so the server holds large transactions until they commit",
                ),
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
                let begin = Message::Begin {
                    final_lsn: commit_lsn,
                    timestamp,
                    xid,
                };
                let commit = Message::Commit {
                    flags,
                    commit_lsn,
                    end_lsn,
                    timestamp,
                };
                self.replay(xid, begin, commit)
            }
            m => Ok(Feed::Now(Some(m))),
        }
    }

    /// The transaction `xid` committed: its spool, read back between the
    /// Begin and the Commit protocol 1 would have sent around it.
    fn replay(&mut self, xid: u32, begin: Message, commit: Message) -> Result<Feed> {
        let mut open = self.open.remove(&xid).ok_or_else(|| {
            protocol(format!(
                "Stream Commit of transaction {xid}, whose blocks never came"
            ))
        })?;
        self.forget(&open);
        Ok(Feed::Replay(Replay {
            begin: Some(begin),
            reader: open.spool.drain()?,
            commit: Some(commit),
            buf: Vec::new(),
        }))
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
mod tests;
