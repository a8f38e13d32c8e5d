//! The server model of the read path's model test: what a walsender sends
//! from a given start, protocol 1 or streaming, for a history laid out as a
//! WAL.

use super::{xid, Dice, Op, Rec, Wal, PREFIX, RELID};
use std::collections::HashMap;

fn put_u32(m: &mut Vec<u8>, v: u32) {
    m.extend(v.to_be_bytes());
}
fn put_u64(m: &mut Vec<u8>, v: u64) {
    m.extend(v.to_be_bytes());
}

/// A message's tag, and the (sub)transaction inside a stream block.
fn head(tag: u8, in_block: Option<u32>) -> Vec<u8> {
    let mut m = vec![tag];
    if let Some(x) = in_block {
        put_u32(&mut m, x);
    }
    m
}

pub(super) fn columns(shape: usize) -> Vec<String> {
    let mut c = vec!["id".to_string(), "v".to_string()];
    c.extend((1..=shape).map(|n| format!("c{n}")));
    c
}

fn relation(in_block: Option<u32>, shape: usize) -> Vec<u8> {
    let mut m = head(b'R', in_block);
    put_u32(&mut m, RELID);
    m.extend(b"public\0t\0");
    m.push(b'd');
    m.extend((2 + shape as u16).to_be_bytes());
    for (i, c) in columns(shape).iter().enumerate() {
        m.push((i == 0) as u8);
        m.extend(c.as_bytes());
        m.push(0);
        put_u32(&mut m, if i == 0 { 20 } else { 25 });
        m.extend((-1i32).to_be_bytes());
    }
    m
}

/// The row of `id` with `shape` added columns, as the model has it: the
/// value of `v` says which change wrote it.
pub(super) fn row(id: i64, version: u64, shape: usize) -> Vec<Option<String>> {
    let mut r = vec![Some(id.to_string()), Some(format!("v{version}"))];
    r.extend((1..=shape).map(|n| (n % 2 == 0).then(|| format!("{id}.{n}"))));
    r
}

fn tuple(m: &mut Vec<u8>, cells: &[Option<String>]) {
    m.extend((cells.len() as u16).to_be_bytes());
    for c in cells {
        match c {
            None => m.push(b'n'),
            Some(s) => {
                m.push(b't');
                put_u32(m, s.len() as u32);
                m.extend(s.as_bytes());
            }
        }
    }
}

/// What the server sends for one change (after a Relation when due).
fn change(in_block: Option<u32>, op: &Op, version: u64, shape: usize, msg_end: u64) -> Vec<u8> {
    match op {
        Op::Insert(id) | Op::Update(id) => {
            let tag = if matches!(op, Op::Insert(_)) {
                b'I'
            } else {
                b'U'
            };
            let mut m = head(tag, in_block);
            put_u32(&mut m, RELID);
            m.push(b'N');
            tuple(&mut m, &row(*id, version, shape));
            m
        }
        Op::Delete(id) => {
            let mut m = head(b'D', in_block);
            put_u32(&mut m, RELID);
            m.push(b'K');
            let mut key = vec![Some(id.to_string())];
            key.extend(std::iter::repeat_n(None, 1 + shape));
            tuple(&mut m, &key);
            m
        }
        Op::Note(n) => message(in_block, true, msg_end, *n),
        Op::AddColumn => unreachable!("DDL sends no message of its own"),
    }
}

fn message(in_block: Option<u32>, transactional: bool, lsn: u64, n: u16) -> Vec<u8> {
    let mut m = head(b'M', in_block);
    m.push(transactional as u8);
    put_u64(&mut m, lsn);
    m.extend(PREFIX.as_bytes());
    m.push(0);
    let content = format!("note {n}");
    put_u32(&mut m, content.len() as u32);
    m.extend(content.as_bytes());
    m
}

/// What reaches the reader.
#[derive(Debug, Clone)]
pub(super) enum Sent {
    Data(Vec<u8>),
    KeepAlive(u64),
}

/// A change waiting in the server for its transaction: the message(s).
struct Pending {
    sub: u32,
    op: Op,
    shape: usize,
    end: u64,
    version: u64,
}

/// What a walsender sends from `start` with `streaming` or protocol 1.
pub(super) fn server(w: &Wal, start: u64, streaming: bool, dice: &mut Dice) -> Vec<Sent> {
    let mut ws = Walsender {
        w,
        start,
        streaming,
        out: Vec::new(),
        pending: HashMap::new(),
        streamed: HashMap::new(),
        session_shape: None,
        version: 0,
        changed_catalog: Vec::new(),
    };
    for (rs, re, rec) in &w.recs {
        let (rs, re) = (*rs, *re);
        match rec {
            Rec::Change {
                txn,
                sub,
                op,
                shape,
            } => ws.change(*txn, *sub, op, *shape, (rs, re), dice),
            Rec::SubAbort { txn, sub } => ws.sub_abort(*txn, *sub),
            Rec::Abort(txn) => ws.abort(*txn),
            Rec::Commit(txn) => ws.commit(*txn, rs, re),
            Rec::Loose(n) => {
                if rs >= start {
                    ws.out.push(Sent::Data(message(None, false, re, *n)));
                }
            }
        }
        if rs >= start && dice.chance(25) {
            ws.out.push(Sent::KeepAlive(re));
        }
    }
    ws.out.push(Sent::KeepAlive(w.end));
    ws.out
}

/// A walsender decoding the WAL from its start.
struct Walsender<'w> {
    w: &'w Wal,
    start: u64,
    streaming: bool,
    out: Vec<Sent>,
    /// Changes waiting for their transaction (its commit, or a block).
    pending: HashMap<usize, Vec<Pending>>,
    /// Streamed so far, per transaction: subtransactions that have
    /// messages out, and the shape last described in the transaction.
    streamed: HashMap<usize, (Vec<u32>, Option<usize>)>,
    /// The shape last described in the session (protocol 1).
    session_shape: Option<usize>,
    version: u64,
    /// Transactions that changed the catalog (rolled back or not): the
    /// server runs their invalidations at the end of each block, and
    /// describes their tables again in the next.
    changed_catalog: Vec<usize>,
}

impl Walsender<'_> {
    fn change(
        &mut self,
        txn: usize,
        sub: u32,
        op: &Op,
        shape: usize,
        (rs, re): (u64, u64),
        dice: &mut Dice,
    ) {
        self.version += 1;
        if matches!(op, Op::AddColumn) {
            self.changed_catalog.push(txn);
        } else {
            self.pending.entry(txn).or_default().push(Pending {
                sub,
                op: op.clone(),
                shape,
                end: re,
                version: self.version,
            });
        }
        let stream_now =
            self.streaming && self.w.txns[txn].streamed && rs >= self.start && dice.chance(50);
        if stream_now {
            block(&mut self.out, txn, &mut self.pending, &mut self.streamed);
            forget_if_changed(&mut self.streamed, &self.changed_catalog, txn);
        }
    }

    /// A savepoint rolled back: a Stream Abort if any of it was sent.
    fn sub_abort(&mut self, txn: usize, sub: u32) {
        if let Some(p) = self.pending.get_mut(&txn) {
            p.retain(|c| c.sub != sub);
        }
        if let Some((subs, _)) = self.streamed.get_mut(&txn) {
            if subs.contains(&sub) {
                self.out.push(Sent::Data(stream_abort(xid(txn), sub)));
                subs.retain(|s| *s != sub);
            }
        }
    }

    fn abort(&mut self, txn: usize) {
        self.pending.remove(&txn);
        if self.streamed.remove(&txn).is_some() {
            self.out.push(Sent::Data(stream_abort(xid(txn), xid(txn))));
        }
    }

    /// A commit at or past the start: the rest of a streamed transaction
    /// and its Stream Commit, or the whole transaction.
    fn commit(&mut self, txn: usize, rs: u64, re: u64) {
        if rs < self.start {
            self.pending.remove(&txn);
            self.streamed.remove(&txn);
            return;
        }
        if self.streamed.contains_key(&txn) {
            if self.pending.get(&txn).is_some_and(|p| !p.is_empty()) {
                block(&mut self.out, txn, &mut self.pending, &mut self.streamed);
            }
            self.streamed.remove(&txn);
            let mut m = head(b'c', None);
            put_u32(&mut m, xid(txn));
            m.push(0);
            put_u64(&mut m, rs);
            put_u64(&mut m, re);
            put_u64(&mut m, 0);
            self.out.push(Sent::Data(m));
            return;
        }
        let mut m = head(b'B', None);
        put_u64(&mut m, rs);
        put_u64(&mut m, 0);
        put_u32(&mut m, xid(txn));
        self.out.push(Sent::Data(m));
        for c in self.pending.remove(&txn).unwrap_or_default() {
            if !matches!(c.op, Op::Note(_)) && self.session_shape != Some(c.shape) {
                self.out.push(Sent::Data(relation(None, c.shape)));
                self.session_shape = Some(c.shape);
            }
            self.out
                .push(Sent::Data(change(None, &c.op, c.version, c.shape, c.end)));
        }
        let mut m = head(b'C', None);
        m.push(0);
        put_u64(&mut m, rs);
        put_u64(&mut m, re);
        put_u64(&mut m, 0);
        self.out.push(Sent::Data(m));
    }
}

fn stream_abort(xid: u32, sub: u32) -> Vec<u8> {
    let mut m = head(b'A', None);
    put_u32(&mut m, xid);
    put_u32(&mut m, sub);
    m
}

/// After a block of a transaction that changed the catalog, its tables are
/// described again before their next change.
fn forget_if_changed(
    streamed: &mut HashMap<usize, (Vec<u32>, Option<usize>)>,
    changed_catalog: &[usize],
    txn: usize,
) {
    if changed_catalog.contains(&txn) {
        if let Some((_, described)) = streamed.get_mut(&txn) {
            *described = None;
        }
    }
}

/// A stream block of transaction `txn`: every change of it not sent yet.
fn block(
    out: &mut Vec<Sent>,
    txn: usize,
    pending: &mut HashMap<usize, Vec<Pending>>,
    streamed: &mut HashMap<usize, (Vec<u32>, Option<usize>)>,
) {
    let changes = pending.remove(&txn).unwrap_or_default();
    let first = !streamed.contains_key(&txn);
    let (subs, described) = streamed.entry(txn).or_default();
    let mut m = head(b'S', None);
    put_u32(&mut m, xid(txn));
    m.push(first as u8);
    out.push(Sent::Data(m));
    for c in changes {
        // A transactional message goes under the top transaction's id.
        let tagged = if matches!(c.op, Op::Note(_)) || c.sub == 0 {
            xid(txn)
        } else {
            c.sub
        };
        if c.sub != 0 && !subs.contains(&c.sub) {
            subs.push(c.sub);
        }
        if !matches!(c.op, Op::Note(_)) && *described != Some(c.shape) {
            out.push(Sent::Data(relation(Some(tagged), c.shape)));
            *described = Some(c.shape);
        }
        out.push(Sent::Data(change(
            Some(tagged),
            &c.op,
            c.version,
            c.shape,
            c.end,
        )));
    }
    out.push(Sent::Data(vec![b'E']));
}
