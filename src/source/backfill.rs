//! Backfill: a table's current rows brought into a following stream, chunk
//! by chunk in key order, while its changes keep flowing (docs/BACKFILL.md).
//!
//! While a table is backfilled, the stream carries its rows only up to a
//! boundary key: the last key its chunks have reached. A change of a key
//! beyond the boundary is left out (the row comes later, with its chunk, as
//! it is then); a change inside it passes; an update that moves a key across
//! the boundary becomes the insert or delete of the side that is inside.
//! This module is that rule, the same for every source; the sources decide
//! where chunks sit in their change order.

use crate::wire::value::key_cmp;
use crate::wire::{Event, Operation, Schema, Value};
use std::cmp::Ordering;

/// How far a backfilled table's rows have come into the stream.
#[derive(Debug, Clone, PartialEq)]
pub enum Reached {
    /// No row yet: the request's truncate passed, no chunk since.
    Nothing,
    /// Every row with a key up to and including this one.
    UpTo(Vec<Value>),
}

impl Reached {
    /// Whether a row with this key is in the stream already.
    pub fn covers(&self, key: &[Value]) -> bool {
        match self {
            Reached::Nothing => false,
            Reached::UpTo(b) => key_cmp(key, b) != Ordering::Greater,
        }
    }
}

/// Where each key column sits in a row of `schema`.
pub fn key_positions(schema: &Schema) -> Vec<usize> {
    schema
        .key
        .iter()
        .map(|k| {
            schema
                .columns
                .iter()
                .position(|c| &c.name == k)
                .expect("a schema's key names its columns")
        })
        .collect()
}

/// The key of a row.
pub fn key_of(row: &[Value], positions: &[usize]) -> Vec<Value> {
    positions.iter().map(|&i| row[i].clone()).collect()
}

/// An ordinary change of a table being backfilled, as the stream carries it
/// (`None`: left out). A truncate always passes: the table is empty on both
/// sides of the boundary after it.
///
/// A key-only old row (`before_key`) is its key. An update that moves a row
/// from outside into the reached keys with an unchanged value cannot become
/// the insert it should: the value is not in the stream. It stays the
/// update, which every target refuses (it holds no row to fill it from),
/// naming the table and key: the table needs a backfill again (docs/BACKFILL.md).
pub fn pass(e: Event, positions: &[usize], reached: &Reached) -> Option<Event> {
    pass_where(e, positions, |k| reached.covers(k))
}

/// The part of a change of a table being backfilled whose keys are beyond
/// `lower` and up to `upper` (`None`: every key beyond `lower`): what a
/// chunk read without a lock writes after its rows of the changes its
/// snapshot did not see (docs/BACKFILL.md, "How it works (PostgreSQL)").
/// The part inside `lower` passed when the change was read; the part beyond
/// `upper` is still left out. A truncate never comes here: it passes when
/// read.
pub fn pass_between(
    e: Event,
    positions: &[usize],
    lower: &Reached,
    upper: Option<&Reached>,
) -> Option<Event> {
    pass_where(e, positions, |k| {
        !lower.covers(k) && upper.is_none_or(|u| u.covers(k))
    })
}

/// Whether some part of a change (its old row's key or its new row's) is
/// beyond what `reached` covers: a part [`pass`] leaves out, which a chunk
/// read without a lock may have to write after its rows.
pub fn reaches_beyond(e: &Event, positions: &[usize], reached: &Reached) -> bool {
    let beyond = |row: &Option<Vec<Value>>| {
        row.as_ref()
            .is_some_and(|r| !reached.covers(&key_of(r, positions)))
    };
    match e.operation {
        Operation::Truncate { .. } => false,
        _ => {
            e.before_key.as_ref().is_some_and(|k| !reached.covers(k))
                || beyond(&e.before)
                || beyond(&e.after)
        }
    }
}

/// [`pass`] with the keys `inside` says are in the stream.
fn pass_where(
    mut e: Event,
    positions: &[usize],
    inside_key: impl Fn(&[Value]) -> bool,
) -> Option<Event> {
    let inside = |row: &Option<Vec<Value>>| {
        row.as_ref()
            .is_some_and(|r| inside_key(&key_of(r, positions)))
    };
    let old_inside = match &e.before_key {
        Some(k) => inside_key(k),
        None => inside(&e.before),
    };
    match e.operation {
        Operation::Truncate { .. } => Some(e),
        Operation::Insert => inside(&e.after).then_some(e),
        Operation::Delete => old_inside.then_some(e),
        Operation::Update if !old_inside && e.has_unchanged() => inside(&e.after).then_some(e),
        Operation::Update => match (old_inside, inside(&e.after)) {
            (true, true) => Some(e),
            (true, false) => {
                e.operation = Operation::Delete;
                e.after = None;
                Some(e)
            }
            (false, true) => {
                e.operation = Operation::Insert;
                e.before = None;
                e.before_key = None;
                Some(e)
            }
            (false, false) => None,
        },
    }
}

/// One request as `capture status` shows it.
#[derive(Debug, Clone)]
pub struct RequestStatus {
    pub id: i64,
    pub table: String,
    pub resync: bool,
    /// `requested`, `in progress` or `done`.
    pub state: &'static str,
    pub rows: u64,
    pub estimate: u64,
    /// The position of the request and of its end, where known.
    pub requested_at: Option<String>,
    pub done_at: Option<String>,
}

/// `status`'s `backfills`: each request, oldest first.
pub fn status_field(reqs: &[RequestStatus]) -> crate::source::StatusField {
    let kind = |r: &RequestStatus| if r.resync { "resync" } else { "backfill" };
    let value: Vec<serde_json::Value> = reqs
        .iter()
        .map(|r| {
            serde_json::json!({
                "request": r.id,
                "table": r.table,
                "kind": kind(r),
                "state": r.state,
                "requested_at": r.requested_at,
                "done_at": r.done_at,
                "rows": r.rows,
                "estimate": r.estimate,
            })
        })
        .collect();
    let text = if reqs.is_empty() {
        "none".to_string()
    } else {
        reqs.iter()
            .map(|r| match (r.state, &r.done_at) {
                ("done", Some(d)) => format!(
                    "{} ({} {}): done at {d}, {} rows",
                    r.table,
                    kind(r),
                    r.id,
                    r.rows
                ),
                _ => format!(
                    "{} ({} {}): {}, {} of about {} rows",
                    r.table,
                    kind(r),
                    r.id,
                    r.state,
                    r.rows,
                    r.estimate
                ),
            })
            .collect::<Vec<_>>()
            .join("; ")
    };
    crate::source::StatusField::new("backfills", value).with_text(text)
}

/// What a follower says of the backfills it runs: each chunk in the
/// metrics; on standard error the start and the end of each, and, when
/// standard error is a terminal, the rows, rate and time left at most once
/// a second.
pub struct Progress {
    terminal: bool,
    started: std::collections::HashMap<i64, (std::time::Instant, u64)>,
    said: Option<std::time::Instant>,
}

impl Default for Progress {
    fn default() -> Self {
        use std::io::IsTerminal;
        Progress {
            terminal: std::io::stderr().is_terminal(),
            started: Default::default(),
            said: None,
        }
    }
}

impl Progress {
    /// Request `id`'s end was read in the stream (PostgreSQL: by every
    /// follower, whichever wrote it): `rows` in all; the rate when this
    /// process saw it start.
    pub fn done(&mut self, id: i64, table: &str, rows: u64) {
        crate::metrics::backfill(table, rows, 0);
        let how = match self.started.remove(&id) {
            Some((t0, r0)) => {
                let took = t0.elapsed();
                let secs = took.as_secs_f64();
                let rate = if secs > 0.0 {
                    rows.saturating_sub(r0) as f64 / secs
                } else {
                    0.0
                };
                format!(
                    " ({} in {}, {rate:.0} rows/s)",
                    rows.saturating_sub(r0),
                    crate::log::elapsed(took)
                )
            }
            None => String::new(),
        };
        crate::log::info(&format!(
            "backfill of table {table:?} (request {id}) done: {rows} rows{how}"
        ));
    }

    /// Request `id` ended before its table was read whole, for `why`: said
    /// as a warning, never followed by done.
    pub fn failed(&mut self, id: i64, table: &str, why: &str) {
        self.started.remove(&id);
        crate::log::warn(
            &format!(
                "backfill of table {table:?} (request {id}) ended before the table was read whole: {why}; the stream keeps leaving out changes of its rows not reached until a new request for it"
            ),
            &[("event", "backfill-failed".into()), ("table", table.to_string().into())],
        );
    }

    /// A chunk of `chunk` rows of request `id` was logged: `rows` so far of
    /// about `estimate`; `done` when it found no row left.
    pub fn chunk(
        &mut self,
        id: i64,
        table: &str,
        (chunk, rows, estimate): (u64, u64, u64),
        done: bool,
    ) {
        let now = std::time::Instant::now();
        let (t0, r0) = *self.started.entry(id).or_insert_with(|| {
            let from = rows - chunk;
            crate::log::info(&format!(
                "backfill of table {table:?} (request {id}): about {estimate} rows to read{}",
                if from > 0 {
                    format!(", {from} read before")
                } else {
                    String::new()
                }
            ));
            (now, from)
        });
        let left = if done {
            0
        } else {
            estimate.saturating_sub(rows)
        };
        crate::metrics::backfill(table, rows, left);
        let secs = now.duration_since(t0).as_secs_f64();
        let rate = if secs > 0.0 {
            (rows - r0) as f64 / secs
        } else {
            0.0
        };
        if done {
            self.started.remove(&id);
            crate::log::info(&format!(
                "backfill of table {table:?} (request {id}) done: {rows} rows ({} in {}, {rate:.0} rows/s)",
                rows - r0,
                crate::log::elapsed(now.duration_since(t0))
            ));
            return;
        }
        if self.terminal
            && self
                .said
                .is_none_or(|s| now.duration_since(s).as_secs() >= 1)
        {
            self.said = Some(now);
            let eta = if rate > 0.0 {
                format!(
                    ", about {} left",
                    crate::log::elapsed(std::time::Duration::from_secs_f64(left as f64 / rate))
                )
            } else {
                String::new()
            };
            crate::log::info(&format!(
                "backfill of table {table:?}: {rows} of about {estimate} rows, {rate:.0} rows/s{eta}"
            ));
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    //! The rule against a model: a random history of one table's changes,
    //! with a backfill requested at a random point and chunks of random
    //! sizes read at random points (each chunk reads the table as it is at
    //! its place, as the SQLite source's chunks do), applied to a strict
    //! target that starts with a damaged copy, ends with exactly the table.

    use super::{key_positions, pass, Event, Operation, Reached, Schema, Value};
    use crate::wire::Column;
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    #[derive(Debug, Clone)]
    enum Step {
        Insert(i64, i64),
        Update(i64, i64, i64),
        Delete(i64),
        Chunk(usize),
    }

    /// A table `t` of columns `v` and `k`, keyed by `k` (second, so
    /// positions matter).
    pub(crate) fn schema() -> Schema {
        let col = |n: &str| Column {
            name: n.into(),
            decl_type: "INTEGER".into(),
            nullable: false,
        };
        Schema {
            table: "t".into(),
            // The key second, so positions matter.
            columns: vec![col("v"), col("k")],
            key: vec!["k".into()],
        }
    }

    pub(crate) fn row(k: i64, v: i64) -> Vec<Value> {
        vec![Value::Integer(v), Value::Integer(k)]
    }

    /// A strict target: inserts need the key absent, updates and deletes
    /// need the row as it is (also the target of the PostgreSQL window's
    /// model test).
    pub(crate) fn apply(
        target: &mut BTreeMap<i64, i64>,
        e: &Event,
    ) -> std::result::Result<(), String> {
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

    fn steps() -> impl Strategy<Value = (Vec<Step>, usize)> {
        let step = prop_oneof![
            3 => (0i64..40, any::<i64>()).prop_map(|(k, v)| Step::Insert(k, v)),
            3 => (0i64..40, 0i64..40, any::<i64>()).prop_map(|(a, b, v)| Step::Update(a, b, v)),
            2 => (0i64..40).prop_map(Step::Delete),
            2 => (1usize..8).prop_map(Step::Chunk),
        ];
        (prop::collection::vec(step, 0..200), 0usize..200)
    }

    fn ev(
        operation: Operation,
        before: Option<Vec<Value>>,
        after: Option<Vec<Value>>,
        sequence: u128,
    ) -> Event {
        Event {
            sequence,
            table: "t".into(),
            operation,
            before,
            before_key: None,
            after,
        }
    }

    /// One chunk of at most `n` rows beyond what `reached` covers, read from
    /// the table as it is, applied; the backfill's new state (`None`: done).
    fn chunk(
        source: &BTreeMap<i64, i64>,
        reached: &Reached,
        n: usize,
        target: &mut BTreeMap<i64, i64>,
        seq: &mut u128,
    ) -> Option<Reached> {
        let rows: Vec<(i64, i64)> = source
            .iter()
            .filter(|(k, _)| !reached.covers(&[Value::Integer(**k)]))
            .take(n)
            .map(|(k, v)| (*k, *v))
            .collect();
        let &(last, _) = rows.last()?;
        for (k, v) in rows {
            *seq += 1;
            apply(target, &ev(Operation::Insert, None, Some(row(k, v)), *seq)).unwrap();
        }
        Some(Reached::UpTo(vec![Value::Integer(last)]))
    }

    proptest! {
        #[test]
        fn a_backfill_interleaved_with_changes_ends_with_the_table((history, at) in steps()) {
            let s = schema();
            let pos = key_positions(&s);
            let mut source: BTreeMap<i64, i64> = BTreeMap::new();
            // The target holds something else entirely before the request.
            let mut target: BTreeMap<i64, i64> = (100..105).map(|k| (k, k)).collect();
            let mut reached: Option<Reached> = None;
            let mut seq = 0u128;
            let at = at.min(history.len());
            for (i, step) in history.iter().chain([&Step::Chunk(0)]).enumerate() {
                if i == at {
                    reached = Some(Reached::Nothing);
                    seq += 1;
                    apply(&mut target, &ev(Operation::TRUNCATE, None, None, seq)).unwrap();
                }
                seq += 1;
                let change = match *step {
                    Step::Insert(k, v) if !source.contains_key(&k) => {
                        source.insert(k, v);
                        Some(ev(Operation::Insert, None, Some(row(k, v)), seq))
                    }
                    Step::Update(a, b, v) if source.contains_key(&a) && (a == b || !source.contains_key(&b)) => {
                        let old = source.remove(&a).unwrap();
                        source.insert(b, v);
                        Some(ev(Operation::Update, Some(row(a, old)), Some(row(b, v)), seq))
                    }
                    Step::Delete(k) if source.contains_key(&k) => {
                        let old = source.remove(&k).unwrap();
                        Some(ev(Operation::Delete, Some(row(k, old)), None, seq))
                    }
                    Step::Chunk(n) if n > 0 => {
                        if let Some(r) = &reached {
                            reached = chunk(&source, r, n, &mut target, &mut seq);
                        }
                        None
                    }
                    _ => None,
                };
                let out = match (&reached, change) {
                    (_, None) => None,
                    (None, Some(e)) => Some(e),
                    (Some(r), Some(e)) => pass(e, &pos, r),
                };
                if let Some(e) = out {
                    apply(&mut target, &e).unwrap();
                }
            }
            // The backfill runs to its end.
            while let Some(r) = &reached {
                reached = chunk(&source, r, 3, &mut target, &mut seq);
            }
            prop_assert_eq!(target, source);
        }
    }

    #[test]
    fn a_key_moving_across_the_boundary_becomes_the_side_inside() {
        let s = schema();
        let pos = key_positions(&s);
        let r = Reached::UpTo(vec![Value::Integer(10)]);
        let up = |a, b| Event {
            sequence: 1,
            table: "t".into(),
            operation: Operation::Update,
            before: Some(row(a, 1)),
            before_key: None,
            after: Some(row(b, 2)),
        };
        assert_eq!(
            pass(up(5, 20), &pos, &r).unwrap().operation,
            Operation::Delete
        );
        assert_eq!(
            pass(up(20, 5), &pos, &r).unwrap().operation,
            Operation::Insert
        );
        assert_eq!(
            pass(up(5, 10), &pos, &r).unwrap().operation,
            Operation::Update
        );
        assert!(pass(up(11, 20), &pos, &r).is_none());
        assert!(pass(up(1, 2), &pos, &Reached::Nothing).is_none());
    }
}
