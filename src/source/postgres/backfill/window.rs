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
mod tests;
