//! Chunks read without a lock: the window of changes a chunk's snapshot did
//! not see (docs/BACKFILL.md, "How it works (PostgreSQL)" and "Why the
//! stream is correct").
//!
//! A chunk reads its rows in a REPEATABLE READ transaction and carries that
//! transaction's snapshot. Its rows are the table as the snapshot sees it,
//! and its place in the stream is its commit. Between the two, transactions
//! the snapshot does not see may commit (or have committed in the WAL while
//! not yet visible: a commit waiting for a synchronous standby). Their
//! changes of keys beyond what the stream has reached were left out when
//! they were read, and the chunk's rows do not show them. So a reader keeps,
//! for each table being backfilled, the left-out changes of every
//! transaction committed since the table's last backfill message (its
//! window), and at the chunk writes, after the chunk's rows, the changes of
//! those the snapshot does not see within the chunk's key range, in commit
//! order. Row locks make that order right: a transaction that waited on a
//! row of one the snapshot does not see could only go on once that one was
//! visible, so it is not seen either and commits after it.
//!
//! A transaction committed before the window opened that the snapshot still
//! does not see (its commit held by a standby) is in neither. The
//! follower's messages commit once every synchronous standby applied them
//! (`remote_apply`), which releases every commit before them; and before
//! it writes a chunk, the follower looks at the transactions its snapshot
//! does not see that had committed when it read (`pg_xact_status`): one
//! its own read saw commit before the window opened makes it write a mark
//! instead (a new window, after which that commit is visible). Every
//! reader then carries every chunk the same way, from the WAL alone. A
//! commit its read never saw changed no published table, or was before
//! where the read began: the rule's limit (docs/BACKFILL.md, "Limits").

use crate::error::{Error, Result};
use crate::source::backfill::{pass_between, Reached};
use crate::wire::Event;
use std::collections::{HashMap, VecDeque};

/// The longest window (bytes of WAL since the table's last backfill
/// message) a follower reads a chunk at: past it, it first writes a mark
/// that opens a new window.
pub(crate) const WRITE_WINDOW: u64 = 16 << 20;

/// The longest window a reader keeps changes for: past it, it keeps
/// nothing, and a chunk at its end is discarded. Four times the writer's,
/// so only WAL written while a chunk reads can take a window past it.
pub(crate) const READ_WINDOW: u64 = 4 * WRITE_WINDOW;

/// A snapshot, as `pg_current_snapshot()` gives it, in the 32-bit
/// transaction ids the replication stream names transactions by.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Snap {
    xmin: u32,
    xmax: u32,
    xip: Vec<u32>,
}

/// Whether transaction id `a` comes before `b` (modulo 2^32, as the server
/// compares them).
fn precedes(a: u32, b: u32) -> bool {
    (a.wrapping_sub(b) as i32) < 0
}

/// A 64-bit transaction id (`xid8`) as the 32-bit id the stream names.
fn xid32(text: &str) -> std::result::Result<u32, String> {
    text.trim()
        .parse::<u64>()
        .map(|x| x as u32)
        .map_err(|_| format!("{text:?} is not a transaction id"))
}

impl Snap {
    /// `xmin:xmax:xip,…`, the text form of `pg_snapshot`.
    pub(crate) fn parse(text: &str) -> std::result::Result<Snap, String> {
        let mut parts = text.split(':');
        let (Some(xmin), Some(xmax), Some(xip), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(format!("{text:?} is not a snapshot"));
        };
        Ok(Snap {
            xmin: xid32(xmin)?,
            xmax: xid32(xmax)?,
            xip: xip
                .split(',')
                .filter(|x| !x.is_empty())
                .map(xid32)
                .collect::<std::result::Result<_, _>>()?,
        })
    }

    /// Whether the snapshot sees (the commit of) transaction `xid`, one the
    /// stream says committed.
    pub(crate) fn sees(&self, xid: u32) -> bool {
        precedes(xid, self.xmin) || (precedes(xid, self.xmax) && !self.xip.contains(&xid))
    }
}

/// The transactions a read has seen commit, by id, since the oldest window
/// it keeps opened: where each committed.
#[derive(Default)]
pub(crate) struct Commits {
    at: HashMap<u32, u64>,
    order: VecDeque<(u64, u32)>,
}

impl Commits {
    pub(crate) fn push(&mut self, commit: u64, xid: u32) {
        self.at.insert(xid, commit);
        self.order.push_back((commit, xid));
    }

    /// Forget the transactions committed at or before `lsn`.
    pub(crate) fn trim(&mut self, lsn: u64) {
        while let Some(&(c, x)) = self.order.front() {
            if c > lsn {
                break;
            }
            self.order.pop_front();
            if self.at.get(&x) == Some(&c) {
                self.at.remove(&x);
            }
        }
    }

    pub(crate) fn clear(&mut self) {
        self.at.clear();
        self.order.clear();
    }

    /// Whether transaction `xid` committed after `lo` and at or before `hi`.
    fn committed_between(&self, xid: u32, lo: u64, hi: u64) -> bool {
        self.at.get(&xid).is_some_and(|&c| c > lo && c <= hi)
    }
}

/// One table's window: the left-out changes of the transactions committed
/// since its last backfill message, in commit order.
#[derive(Debug)]
pub(crate) struct Window {
    /// Where the message that opened it committed.
    pub(crate) start: u64,
    kept: Vec<(u32, Vec<Event>)>,
    /// Longer than READ_WINDOW: nothing kept, its chunk is discarded.
    overflowed: bool,
    /// Opened before where this read could begin (the slot was confirmed
    /// past it): what it holds is not all there was.
    incomplete: bool,
}

/// What a chunk (or a done) at the end of its window comes to.
#[derive(Debug)]
pub(crate) enum Verdict {
    /// Carried: its rows, then these changes (the parts within its key
    /// range of the window's transactions its snapshot does not see).
    Carry(Vec<Event>),
    /// Discarded, for this reason: its range is read again.
    Discard(String),
}

impl Window {
    /// The window a message committed at `start` opens.
    pub(crate) fn new(start: u64) -> Window {
        Window {
            start,
            kept: Vec::new(),
            overflowed: false,
            incomplete: false,
        }
    }

    /// A window a read cannot have kept whole: opened before the position
    /// it could begin reading at.
    pub(crate) fn incomplete(start: u64) -> Window {
        Window {
            incomplete: true,
            ..Window::new(start)
        }
    }

    /// Whether its changes still matter (a reader must read from its start).
    pub(crate) fn keeping(&self) -> bool {
        !self.overflowed && !self.incomplete
    }

    /// Transaction `xid` committed at `commit` in the window, with these
    /// left-out changes of the table.
    pub(crate) fn committed(&mut self, commit: u64, xid: u32, left_out: Vec<Event>) {
        if self.overflow(commit) || left_out.is_empty() {
            return;
        }
        self.kept.push((xid, left_out));
    }

    /// Whether the window is past READ_WINDOW at `lsn` (it then drops what
    /// it kept).
    fn overflow(&mut self, lsn: u64) -> bool {
        if !self.overflowed && lsn.saturating_sub(self.start) > READ_WINDOW {
            self.overflowed = true;
            self.kept = Vec::new();
        }
        self.overflowed
    }

    /// A chunk committed at `at` read with `snap` the keys beyond `lower` up
    /// to `upper` (`None`: every key, its end). The window ends here.
    pub(crate) fn close(
        &mut self,
        at: u64,
        snap: &Snap,
        positions: &[usize],
        (lower, upper): (&Reached, Option<&Reached>),
    ) -> Verdict {
        if self.incomplete {
            return Verdict::Discard("its window began before where this read could begin".into());
        }
        if self.overflow(at) {
            return Verdict::Discard(format!(
                "its window is longer than {} MB of WAL",
                READ_WINDOW >> 20
            ));
        }
        let mut after = Vec::new();
        for (xid, events) in std::mem::take(&mut self.kept) {
            if snap.sees(xid) {
                continue;
            }
            after.extend(
                events
                    .into_iter()
                    .filter_map(|e| pass_between(e, positions, lower, upper)),
            );
        }
        Verdict::Carry(after)
    }
}

/// A chunk's snapshot, as its message has it.
pub(crate) fn read_snapshot(snapshot: &str, at: &str) -> Result<Snap> {
    Snap::parse(snapshot).map_err(|e| Error::data(format!("a backfill chunk at {at}: {e}")))
}

/// Of the transactions a chunk's snapshot does not see that had committed
/// when it read (64-bit ids, `committed`), one this read saw commit at or
/// before `start`, where the chunk's window opened: the chunk would miss
/// its changes, so the follower writes a mark instead.
pub(crate) fn committed_before<S: AsRef<str>>(
    committed: &[S],
    commits: &Commits,
    start: u64,
) -> Option<u32> {
    committed
        .iter()
        .filter_map(|x| xid32(x.as_ref()).ok())
        .find(|&x| commits.committed_between(x, 0, start))
}

#[cfg(test)]
mod tests {
    //! The placement rule of chunks read without a lock, against a model of
    //! the server: transactions hold their rows' locks from their first
    //! change until they are visible; they commit (into the WAL, in commit
    //! order) and become visible later, in any order their locks allow (a
    //! commit held by a standby); a chunk reads the rows its snapshot sees,
    //! and commits after transactions it did not see may have committed.
    //! A reader with the real rule, applying to a strict target that
    //! starts with something else, ends with exactly the table.

    use super::*;
    use crate::source::backfill::{key_positions, pass, reaches_beyond};
    use crate::wire::{Column, Operation, Schema, Value};
    use proptest::prelude::*;
    use std::collections::{BTreeMap, BTreeSet};

    fn schema() -> Schema {
        let col = |n: &str| Column {
            name: n.into(),
            decl_type: "INTEGER".into(),
            nullable: false,
        };
        Schema {
            table: "t".into(),
            columns: vec![col("v"), col("k")],
            key: vec!["k".into()],
        }
    }

    fn row(k: i64, v: i64) -> Vec<Value> {
        vec![Value::Integer(v), Value::Integer(k)]
    }

    fn ev(operation: Operation, before: Option<(i64, i64)>, after: Option<(i64, i64)>) -> Event {
        Event {
            sequence: 0,
            table: "t".into(),
            operation,
            before: before.map(|(k, v)| row(k, v)),
            before_key: None,
            after: after.map(|(k, v)| row(k, v)),
        }
    }

    /// A strict target, as in `source::backfill`'s test.
    fn apply(target: &mut BTreeMap<i64, i64>, e: &Event) -> std::result::Result<(), String> {
        let kv = |r: &Option<Vec<Value>>| match r.as_deref() {
            Some([Value::Integer(v), Value::Integer(k)]) => (*k, *v),
            other => panic!("bad row {other:?}"),
        };
        match e.operation {
            Operation::Truncate { .. } => target.clear(),
            Operation::Insert => {
                let (k, v) = kv(&e.after);
                if target.insert(k, v).is_some() {
                    return Err(format!("insert of held key {k}"));
                }
            }
            Operation::Delete => {
                let (k, v) = kv(&e.before);
                if target.remove(&k) != Some(v) {
                    return Err(format!("delete of {k}={v}, not held"));
                }
            }
            Operation::Update => {
                let (k, v) = kv(&e.before);
                if target.remove(&k) != Some(v) {
                    return Err(format!("update of {k}={v}, not held"));
                }
                let (k, v) = kv(&e.after);
                if target.insert(k, v).is_some() {
                    return Err(format!("update onto held key {k}"));
                }
            }
        }
        Ok(())
    }

    #[derive(Debug, Clone)]
    enum Step {
        /// A transaction starts and locks up to three keys (`pick`s).
        Open(Vec<u8>),
        /// An open transaction (`pick`) commits: changes of its keys.
        Commit(u8, Vec<u8>),
        /// A committed transaction (`pick`) becomes visible.
        Visible(u8),
        /// The follower reads a chunk of at most `n` rows (0: a mark),
        /// or commits the one it read.
        Chunk(usize),
    }

    fn steps() -> impl Strategy<Value = (Vec<Step>, usize)> {
        let step = prop_oneof![
            3 => prop::collection::vec(any::<u8>(), 1..4).prop_map(Step::Open),
            3 => (any::<u8>(), prop::collection::vec(any::<u8>(), 1..4)).prop_map(|(p, c)| Step::Commit(p, c)),
            3 => any::<u8>().prop_map(Step::Visible),
            2 => (0usize..6).prop_map(Step::Chunk),
        ];
        (prop::collection::vec(step, 0..250), 0usize..60)
    }

    /// A transaction of the model.
    struct Txn {
        xid: u32,
        /// It changes only tables not published: the stream never carries it.
        unpublished: bool,
        keys: BTreeSet<i64>,
        /// Its changes once committed.
        changes: Vec<Event>,
    }

    /// A chunk's read: its snapshot, its lower bound and rows (none: its
    /// end).
    type ChunkRead = (Snap, Reached, Vec<(i64, i64)>);

    /// What the WAL carries, in commit order.
    enum Wal {
        /// A transaction the stream does not carry.
        Nothing,
        Request,
        Txn(u32, Vec<Event>),
        /// A chunk, or a mark.
        Chunk(Option<ChunkRead>),
    }

    /// The server: the table as the WAL has it and as snapshots see it.
    #[derive(Default)]
    struct Server {
        wal_state: BTreeMap<i64, i64>,
        visible_state: BTreeMap<i64, i64>,
        next_xid: u32,
        open: Vec<Txn>,
        /// Committed, not yet visible, in commit order.
        held: Vec<Txn>,
    }

    impl Server {
        fn locked(&self, k: i64) -> bool {
            self.open
                .iter()
                .chain(&self.held)
                .any(|t| t.keys.contains(&k))
        }

        fn snapshot(&self) -> (Snap, Vec<u32>) {
            let xip: Vec<u32> = self.open.iter().chain(&self.held).map(|t| t.xid).collect();
            // The oldest, as the server orders ids (they wrap here).
            let xmin = xip
                .iter()
                .copied()
                .find(|&x| xip.iter().all(|&y| !precedes(y, x)))
                .unwrap_or(self.next_xid);
            let committed = self.held.iter().map(|t| t.xid).collect();
            (
                Snap {
                    xmin,
                    xmax: self.next_xid,
                    xip,
                },
                committed,
            )
        }

        /// Transaction `t` commits its changes: each key of it inserted,
        /// changed, moved to another of its keys, or deleted.
        fn commit(&mut self, mut t: Txn, picks: &[u8]) -> Wal {
            let keys: Vec<i64> = t.keys.iter().copied().collect();
            for (i, &p) in picks.iter().enumerate().filter(|_| !keys.is_empty()) {
                let k = keys[i % keys.len()];
                let v = i64::from(p);
                let e = match (self.wal_state.get(&k).copied(), p % 4) {
                    (None, _) => {
                        self.wal_state.insert(k, v);
                        ev(Operation::Insert, None, Some((k, v)))
                    }
                    (Some(old), 0) => {
                        self.wal_state.remove(&k);
                        ev(Operation::Delete, Some((k, old)), None)
                    }
                    (Some(old), 1) => match keys.iter().find(|o| !self.wal_state.contains_key(o)) {
                        Some(&to) => {
                            self.wal_state.remove(&k);
                            self.wal_state.insert(to, v);
                            ev(Operation::Update, Some((k, old)), Some((to, v)))
                        }
                        None => continue,
                    },
                    (Some(old), _) => {
                        self.wal_state.insert(k, v);
                        ev(Operation::Update, Some((k, old)), Some((k, v)))
                    }
                };
                t.changes.push(e);
            }
            let wal = if t.unpublished {
                Wal::Nothing
            } else {
                Wal::Txn(t.xid, t.changes.clone())
            };
            self.held.push(t);
            wal
        }

        /// A committed transaction becomes visible: its changes in the
        /// state snapshots see (its keys were its own until now).
        fn visible(&mut self, i: usize) {
            let t = self.held.remove(i);
            for e in &t.changes {
                apply(&mut self.visible_state, e).expect("the visible state");
            }
        }
    }

    /// A reader with the real rule: changes passed or kept, chunks carried
    /// or discarded.
    struct Reader {
        pos: Vec<usize>,
        /// `None`: not backfilled (before the request, after the end).
        reached: Option<Reached>,
        window: Window,
        commits: Commits,
        lsn: u64,
        target: BTreeMap<i64, i64>,
        discarded: usize,
        /// Marks the follower wrote instead of a chunk.
        instead: usize,
    }

    impl Reader {
        fn read(&mut self, w: Wal) -> std::result::Result<(), String> {
            self.lsn += 1;
            match w {
                Wal::Nothing => self.lsn -= 1,
                Wal::Request => {
                    apply(&mut self.target, &ev(Operation::TRUNCATE, None, None))?;
                    self.reached = Some(Reached::Nothing);
                    self.window = Window::new(self.lsn);
                    self.commits.clear();
                }
                Wal::Txn(xid, events) => {
                    self.commits.push(self.lsn, xid);
                    let mut kept = Vec::new();
                    for e in events {
                        let Some(r) = &self.reached else {
                            apply(&mut self.target, &e)?;
                            continue;
                        };
                        if reaches_beyond(&e, &self.pos, r) {
                            kept.push(e.clone());
                        }
                        if let Some(e) = pass(e, &self.pos, r) {
                            apply(&mut self.target, &e)?;
                        }
                    }
                    self.window.committed(self.lsn, xid, kept);
                }
                Wal::Chunk(None) => self.window = Window::new(self.lsn),
                Wal::Chunk(Some((snap, lower, rows))) => {
                    let r = self.reached.clone().expect("a chunk of a backfill");
                    if lower != r {
                        return Err("a chunk does not start where the stream is".into());
                    }
                    let upper = rows
                        .last()
                        .map(|(k, _)| Reached::UpTo(vec![Value::Integer(*k)]));
                    let verdict =
                        self.window
                            .close(self.lsn, &snap, &self.pos, (&r, upper.as_ref()));
                    self.window = Window::new(self.lsn);
                    match verdict {
                        Verdict::Discard(_) => self.discarded += 1,
                        Verdict::Carry(after) => {
                            for (k, v) in rows {
                                apply(
                                    &mut self.target,
                                    &ev(Operation::Insert, None, Some((k, v))),
                                )?;
                            }
                            for e in &after {
                                apply(&mut self.target, e)?;
                            }
                            self.reached = upper;
                        }
                    }
                }
            }
            Ok(())
        }
    }

    /// The follower's chunk: the rows its snapshot sees beyond `lower`; or
    /// a mark when its snapshot misses a commit its read (`r`) saw before
    /// the window opened.
    fn read_chunk(s: &Server, r: &mut Reader, lower: &Reached, n: usize) -> Wal {
        let (snap, committed) = s.snapshot();
        let ids: Vec<String> = committed.iter().map(|x| x.to_string()).collect();
        if committed_before(&ids, &r.commits, r.window.start).is_some() {
            r.instead += 1;
            return Wal::Chunk(None);
        }
        let rows = s
            .visible_state
            .iter()
            .filter(|(k, _)| !lower.covers(&[Value::Integer(**k)]))
            .take(n)
            .map(|(k, v)| (*k, *v))
            .collect();
        Wal::Chunk(Some((snap, lower.clone(), rows)))
    }

    /// Run a history with a request before step `at`. `released`: a
    /// follower's message commits once every synchronous standby applied it
    /// (`remote_apply`), which releases the commits before it, as the
    /// server does; without it, a commit can stay invisible across windows.
    fn run(
        history: &[Step],
        at: usize,
        released: bool,
    ) -> std::result::Result<(BTreeMap<i64, i64>, Reader), String> {
        let mut s = Server {
            next_xid: u32::MAX - 40,
            ..Server::default()
        };
        let mut r = Reader {
            pos: key_positions(&schema()),
            reached: None,
            window: Window::new(0),
            commits: Commits::default(),
            lsn: 0,
            target: (100..104).map(|k| (k, k)).collect(),
            discarded: 0,
            instead: 0,
        };
        // A chunk read, not yet committed.
        let mut reading: Option<Wal> = None;
        let mut requested = false;
        // A follower's message, read at once; the first of a request is a
        // mark (its window then opens after a remote_apply commit).
        let mut marked = false;
        let message = |w: Wal, s: &mut Server, r: &mut Reader| {
            r.read(w)?;
            while released && !s.held.is_empty() {
                s.visible(0);
            }
            std::result::Result::<(), String>::Ok(())
        };
        for (i, step) in history.iter().enumerate() {
            if i == at {
                r.read(Wal::Request)?;
                requested = true;
            }
            match step {
                Step::Open(picks) => {
                    let unpublished = picks[0] % 5 == 0;
                    let keys: BTreeSet<i64> = picks
                        .iter()
                        .map(|p| i64::from(p % 16))
                        .filter(|&k| !s.locked(k) && !unpublished)
                        .collect();
                    if !keys.is_empty() || unpublished {
                        let xid = s.next_xid;
                        s.next_xid = s.next_xid.wrapping_add(1);
                        s.open.push(Txn {
                            xid,
                            unpublished,
                            keys,
                            changes: Vec::new(),
                        });
                    }
                }
                Step::Commit(p, changes) if !s.open.is_empty() => {
                    let t = s.open.remove(usize::from(*p) % s.open.len());
                    let w = s.commit(t, changes);
                    r.read(w)?;
                }
                Step::Visible(p) if !s.held.is_empty() => s.visible(usize::from(*p) % s.held.len()),
                Step::Chunk(n) if requested && r.reached.is_some() => match reading.take() {
                    Some(w) => message(w, &mut s, &mut r)?,
                    None if *n == 0 || !marked => {
                        marked = true;
                        message(Wal::Chunk(None), &mut s, &mut r)?
                    }
                    None => {
                        let lower = r.reached.clone().unwrap();
                        reading = Some(read_chunk(&s, &mut r, &lower, *n));
                    }
                },
                _ => {}
            }
        }
        if !requested {
            r.read(Wal::Request)?;
        }
        if let Some(w) = reading.take() {
            message(w, &mut s, &mut r)?;
        }
        // Everything commits and becomes visible; the backfill runs to its end.
        while !s.open.is_empty() {
            let t = s.open.remove(0);
            let w = s.commit(t, &[2, 3]);
            r.read(w)?;
        }
        while !s.held.is_empty() {
            s.visible(0);
        }
        let mut tries = 0;
        while let Some(lower) = r.reached.clone() {
            tries += 1;
            if tries > 100 {
                return Err("the backfill never ends".into());
            }
            if !marked {
                marked = true;
                message(Wal::Chunk(None), &mut s, &mut r)?;
            }
            let w = read_chunk(&s, &mut r, &lower, 3);
            r.read(w)?;
        }
        Ok((s.wal_state, r))
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]
        #[test]
        fn chunks_read_without_a_lock_end_with_the_table((history, at) in steps()) {
            let (table, r) = run(&history, at, true).map_err(TestCaseError::fail)?;
            prop_assert_eq!(r.target, table);
        }
    }

    /// Without the window, a transaction the chunk's snapshot does not see
    /// is lost: the model catches a rule that skips it.
    #[test]
    fn a_change_the_snapshot_did_not_see_is_written_after_the_rows() {
        use Step::*;
        // A request; a transaction opens on key 1 (key 1 absent), a chunk
        // reads (sees nothing of it), the transaction commits inserting key
        // 1, the chunk commits: key 1 must come from the window.
        let history = vec![
            Open(vec![1]),
            // The request's first message: a mark.
            Chunk(0),
            Chunk(5),
            Commit(0, vec![7]),
            Chunk(5),
        ];
        let (table, r) = run(&history, 0, true).unwrap();
        assert_eq!(r.target, table);
        assert_eq!(table.get(&1), Some(&7));
    }

    /// A transaction committed before the chunk's window and still not
    /// visible to its snapshot makes the follower write a mark instead.
    #[test]
    fn a_commit_held_from_before_the_window_makes_the_follower_write_a_mark() {
        use Step::*;
        let history = vec![
            Open(vec![1]),
            Commit(0, vec![7]),
            // A mark opens a window after the held commit.
            Chunk(0),
            Chunk(5),
            Chunk(5),
        ];
        // Commits not released by the follower's messages (as if the
        // standby never applied them).
        let (table, r) = run(&history, 0, false).unwrap();
        assert_eq!(r.target, table);
        assert_eq!(r.instead, 1);
        assert_eq!(r.discarded, 0);
    }

    #[test]
    fn snapshots_read_and_see_as_the_server_does() {
        let s = Snap::parse("4294967300:4294967310:4294967302,4294967305").unwrap();
        // 2^32 + 4 .. : the low 32 bits.
        assert!(s.sees(3));
        assert!(s.sees(4));
        assert!(!s.sees(6));
        assert!(s.sees(7));
        assert!(!s.sees(14));
        assert!(Snap::parse("1:2").is_err());
        let wrapped = Snap {
            xmin: u32::MAX - 1,
            xmax: 2,
            xip: vec![u32::MAX],
        };
        assert!(wrapped.sees(u32::MAX - 2));
        assert!(!wrapped.sees(u32::MAX));
        assert!(wrapped.sees(0));
        assert!(!wrapped.sees(2));
    }
}
