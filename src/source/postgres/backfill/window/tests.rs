//! The placement rule of chunks read without a lock, against a model of
//! the server: transactions hold their rows' locks from their first
//! change until they are visible; they commit (into the WAL, in commit
//! order) and become visible later, in any order their locks allow (a
//! commit held by a standby); a chunk reads the rows its snapshot sees,
//! and commits after transactions it did not see may have committed.
//! A reader with the real rule, applying to a strict target that
//! starts with something else, ends with exactly the table.

use super::{committed_before, precedes, Commits, Snap, Verdict, Window};
use crate::source::backfill::tests::{apply, row, schema};
use crate::source::backfill::{key_positions, pass, reaches_beyond, Reached};
use crate::wire::Event;
use crate::wire::{Operation, Value};
use proptest::prelude::*;
use std::collections::{BTreeMap, BTreeSet};

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

    /// A transaction starts and locks the keys `picks` name that no other
    /// holds (one in five changes only unpublished tables: no key).
    fn open(&mut self, picks: &[u8]) {
        let unpublished = picks[0] % 5 == 0;
        let keys: BTreeSet<i64> = picks
            .iter()
            .map(|p| i64::from(p % 16))
            .filter(|&k| !self.locked(k) && !unpublished)
            .collect();
        if !keys.is_empty() || unpublished {
            let xid = self.next_xid;
            self.next_xid = self.next_xid.wrapping_add(1);
            self.open.push(Txn {
                xid,
                unpublished,
                keys,
                changes: Vec::new(),
            });
        }
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
                let verdict = self
                    .window
                    .close(self.lsn, &snap, &self.pos, (&r, upper.as_ref()));
                self.window = Window::new(self.lsn);
                match verdict {
                    Verdict::Discard(_) => self.discarded += 1,
                    Verdict::Carry(after) => {
                        for (k, v) in rows {
                            apply(&mut self.target, &ev(Operation::Insert, None, Some((k, v))))?;
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

/// A follower's message, read at once: with `released`, the commits before
/// it become visible (remote_apply).
fn follower_message(
    w: Wal,
    s: &mut Server,
    r: &mut Reader,
    released: bool,
) -> std::result::Result<(), String> {
    r.read(w)?;
    while released && !s.held.is_empty() {
        s.visible(0);
    }
    Ok(())
}

/// Everything commits and becomes visible; the backfill runs to its end
/// (`marked`: the request's first message, a mark, was written).
fn to_the_end(
    s: &mut Server,
    r: &mut Reader,
    mut marked: bool,
    released: bool,
) -> std::result::Result<(), String> {
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
            follower_message(Wal::Chunk(None), s, r, released)?;
        }
        let w = read_chunk(s, r, &lower, 3);
        r.read(w)?;
    }
    Ok(())
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
    // The first message of a request is a mark (its window then opens
    // after a remote_apply commit).
    let mut marked = false;
    let message = |w: Wal, s: &mut Server, r: &mut Reader| follower_message(w, s, r, released);
    for (i, step) in history.iter().enumerate() {
        if i == at {
            r.read(Wal::Request)?;
            requested = true;
        }
        match step {
            Step::Open(picks) => s.open(picks),
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
    to_the_end(&mut s, &mut r, marked, released)?;
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
