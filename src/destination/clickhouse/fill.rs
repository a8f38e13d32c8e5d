//! Filling what a change did not carry (docs/CLICKHOUSE.md, "Changes
//! without the whole old row"): an update or delete whose old row is
//! known by its key alone (`before_key`), and an update's unchanged values.
//! The replacing engine keeps whole rows, and the history engine records
//! whole rows, so the old row is taken from what the target holds: the
//! batch's own earlier rows first, else the table's current row, read in
//! batches of keys. A key the target does not hold fails the batch, naming
//! table, key and sequence; the cursor does not move.
//!
//! Per table and batch: `recent` holds the newest row of each key the batch
//! changed, once a change of the table came by key alone in this apply
//! (before that nothing is kept, so a stream with whole old rows costs
//! nothing). Events that need a row `recent` lacks wait in `pending`, with
//! every later event on their keys, until a read of their keys (bounded by
//! [`PENDING_EVENTS`], [`PENDING_BYTES`] and [`READ_BYTES`]; a schema
//! change, a truncate or the commit).
//! When the batch changed the table before its first change by key alone,
//! its rows so far are read back from the held rows into `recent`
//! ([`TableFill::recover`]). When they cannot be, the table's held rows
//! are sent before the next read, so it sees them; a table whose schema
//! changed in the batch cannot be, and fails with the way out. When
//! `recent` outgrows [`FILL_MEMORY`], its rows are let go and their keys
//! noted ([`TableFill::shed`]): only a read of a noted key sends the held
//! rows first.

use super::apply::Segment;
use super::{decode_value, encode_key_value, version, ChType, ClickHouse, Engine, Layout};
use crate::error::{Error, Result};
use crate::wire::Operation;
use crate::wire::{Event, Row, Sequence, Value};
use std::collections::{HashMap, HashSet};
use std::io::{BufRead, Read};

/// Rows `recent` holds at most, in bytes of their values, per table.
pub(super) const FILL_MEMORY: usize = 32 << 20;
/// Events waiting for a read of their keys, at most…
const PENDING_EVENTS: usize = 8192;
/// …and bytes of their values…
const PENDING_BYTES: usize = 16 << 20;
/// …and about this many bytes of the rows one read brings back (known from
/// the largest row seen; 64 keys until one is).
const READ_BYTES: usize = 16 << 20;
/// Keys whose kept rows were let go ([`TableFill::shed`]) noted at most,
/// in bytes counted as [`KEY_COST`] each beside their own: past it, any
/// key of the batch may be missing from `recent`.
const SHED_KEYS_MEMORY: usize = 16 << 20;
/// What a noted key costs beside its bytes (the set's entry and the
/// vector's header).
const KEY_COST: usize = 48;

/// What one apply keeps for filling.
#[derive(Default)]
pub(super) struct Fill {
    /// Tables a change by key alone came for in this apply.
    active: HashSet<String>,
    tables: HashMap<String, TableFill>,
}

#[derive(Default)]
struct TableFill {
    /// Key (its values' RowBinary) → the newest row of the batch, `None`
    /// when the batch deleted it.
    recent: HashMap<Vec<u8>, Option<Row>>,
    bytes: usize,
    /// Rows of the batch may be missing from `recent` (any key).
    lost: bool,
    /// Keys the batch wrote whose rows `recent` let go of: a read of one
    /// sends the batch's rows first; a read of others need not.
    shed_keys: HashSet<Vec<u8>>,
    shed_bytes: usize,
    /// `recent` outgrew [`FILL_MEMORY`]: emptied once no waiting change
    /// needs what it holds.
    over: bool,
    /// A truncate of the batch emptied the table: a key `recent` lacks has
    /// no row (unless `lost`).
    emptied: bool,
    /// The batch changed the table.
    touched: bool,
    pending: Vec<Event>,
    pending_keys: HashSet<Vec<u8>>,
    pending_bytes: usize,
    /// Waiting changes that need a read.
    pending_reads: usize,
    /// The largest row kept so far, in bytes of its values.
    row_size: usize,
    /// Keys whose rows up to a version an earlier try of this batch wrote
    /// are gone (merged into that newer row; `replacing` only): the batch's
    /// changes up to it write nothing for the key (the newer row stands
    /// for them), and after it the key holds that row.
    superseded: HashMap<Vec<u8>, Newer>,
}

/// The newest row an earlier try of the batch wrote for a key whose rows
/// before it were merged away. A tombstone keeps the deleted row's values,
/// so a move's own tombstone still gives the move its old row.
struct Newer {
    /// Its version.
    at: u64,
    gone: bool,
    row: Row,
}

impl Newer {
    /// What the key holds after it.
    fn then(self) -> Option<Row> {
        (!self.gone).then_some(self.row)
    }
}

/// What of an event is left to write once an earlier try's newer rows
/// stand for its keys' ([`TableFill::sides`]): the old key's row (a
/// delete's or a move's tombstone, or an update's new version) and a
/// move's row at its new key; a change within one key has both or neither.
struct Sides {
    old: bool,
    new: bool,
    /// The old row, when only the earlier try's tombstone has it.
    stored: Option<Row>,
}

impl Sides {
    const ALL: Sides = Sides {
        old: true,
        new: true,
        stored: None,
    };
}

fn row_bytes(r: &Row) -> usize {
    r.iter()
        .map(|v| match v {
            Value::Text(s) => 24 + s.len(),
            Value::Blob(b) => 24 + b.len(),
            _ => 24,
        })
        .sum()
}

fn event_bytes(e: &Event) -> usize {
    [&e.before, &e.before_key, &e.after]
        .into_iter()
        .flatten()
        .map(row_bytes)
        .sum::<usize>()
        + 64
}

/// A key's values (in key order) as the map's key: their RowBinary.
fn key_bytes(l: &Layout, key: &[&Value]) -> Result<Vec<u8>> {
    let mut out = Vec::new();
    for (&i, v) in l.key.iter().zip(key) {
        encode_key_value(&mut out, l.types[i], v).map_err(|e| {
            Error::data(format!(
                "table {:?}, key column {:?}: {e}",
                l.schema.table, l.schema.columns[i].name
            ))
        })?;
    }
    Ok(out)
}

/// A key as the map holds it (see [`key_bytes`]).
type KeyBytes = Vec<u8>;

/// A key to read: its bytes, its values in key order, and the sequence of
/// the first change that needs it (the read's bound).
type ToRead = (KeyBytes, Vec<Value>, Sequence);

/// The old row's key and the new row's, as the map's keys.
fn keys_of(l: &Layout, e: &Event) -> Result<(Option<KeyBytes>, Option<KeyBytes>)> {
    let old = match e.old_key(&l.key) {
        Some(k) => Some(key_bytes(l, &k)?),
        None => None,
    };
    let new = match &e.after {
        Some(a) => Some(key_bytes(
            l,
            &l.key.iter().map(|&i| &a[i]).collect::<Vec<_>>(),
        )?),
        None => None,
    };
    Ok((old, new))
}

/// An event that needs its old row filled in: its old row came by key
/// alone, or its unchanged values need one.
fn needs_fill(e: &Event) -> bool {
    e.before_key.is_some() || e.has_unchanged()
}

/// An event whose old row must be read: it came by key alone (an
/// unchanged value with a whole old row is filled from it).
fn needs_read(e: &Event) -> bool {
    e.before_key.is_some()
}

impl Fill {
    /// A batch begins: nothing of the last one is kept.
    pub(super) fn begin(&mut self) {
        self.tables.clear();
    }

    /// Whether an event goes through [`Fill::event`]: one that needs a
    /// read, or one of a table such events came for (its rows are kept).
    /// Others are only counted as changing their table.
    pub(super) fn takes(&mut self, e: &Event) -> bool {
        if needs_fill(e) || self.active.contains(&e.table) {
            return true;
        }
        if let Some(tf) = self.tables.get_mut(&e.table) {
            tf.touched = true;
        } else {
            self.tables.insert(
                e.table.clone(),
                TableFill {
                    touched: true,
                    ..TableFill::default()
                },
            );
        }
        false
    }

    /// Take one event (not a truncate) of the table in `segs`: encoded now
    /// into its held rows, or held back until its old row is read.
    pub(super) fn event(&mut self, ch: &ClickHouse, segs: &mut [Segment], e: Event) -> Result<()> {
        let tf = self.tables.entry(e.table.clone()).or_default();
        if needs_read(&e) && !self.active.contains(&e.table) {
            self.active.insert(e.table.clone());
            // What the batch changed before now was not kept: read back
            // from the rows it holds, where it can be.
            tf.lost = tf.touched && !tf.recover(ch, segs)?;
        }
        let seg = segs.last_mut().expect("a segment");
        tf.touched = true;
        if !self.active.contains(&e.table) {
            // Unchanged values with a whole old row: filled from it.
            return tf.process(ch, seg, e, None, None, false);
        }
        let (old, new) = keys_of(&seg.layout, &e)?;
        let waits = [&old, &new]
            .into_iter()
            .flatten()
            .any(|k| tf.pending_keys.contains(k))
            || (needs_read(&e) && !old.as_ref().is_some_and(|k| tf.recent.contains_key(k)));
        if !waits {
            tf.process(ch, seg, e, old, new, true)?;
            tf.shed();
            return Ok(());
        }
        tf.pending_bytes += event_bytes(&e);
        tf.pending_reads += usize::from(needs_read(&e));
        tf.pending_keys.extend(old.into_iter().chain(new));
        tf.pending.push(e);
        let reads = match tf.row_size {
            0 => 64,
            n => (READ_BYTES / n).clamp(16, PENDING_EVENTS),
        };
        if tf.pending.len() >= PENDING_EVENTS
            || tf.pending_bytes >= PENDING_BYTES
            || tf.pending_reads >= reads
        {
            let table = tf.pending[0].table.clone();
            self.resolve(ch, &table, segs)?;
        }
        Ok(())
    }

    /// A truncate of `table`: what waits is done first, then the table is
    /// empty.
    pub(super) fn truncate(
        &mut self,
        ch: &ClickHouse,
        table: &str,
        segs: &mut [Segment],
    ) -> Result<()> {
        self.resolve(ch, table, segs)?;
        // Also as the table's first change of the batch: a later read must
        // not find the rows the truncate removes (its markers go out at the
        // commit).
        let tf = self.tables.entry(table.to_string()).or_default();
        tf.forget();
        // Keys whose rows were let go before the truncate have none after
        // it (`emptied` says so): a read of one need not send anything.
        tf.shed_keys = HashSet::new();
        tf.shed_bytes = 0;
        tf.emptied = true;
        tf.touched = true;
        Ok(())
    }

    /// After a schema change of `table` from `old` to `new` (`sources`: each
    /// new column's place in the old row): the rows kept take the new shape
    /// (an added column NULL: a change after it sends its value, which is
    /// never unchanged until it is written out of line). A key that changed
    /// columns or types leaves them unusable.
    pub(super) fn after_change(
        &mut self,
        table: &str,
        old: &Layout,
        new: &Layout,
        sources: &[Option<usize>],
    ) {
        let Some(tf) = self.tables.get_mut(table) else {
            return;
        };
        if !tf.reshape(old, new, sources) {
            tf.lost |= tf.touched;
        }
    }

    /// The commit: every table's waiting events are done.
    pub(super) fn finish(
        &mut self,
        ch: &ClickHouse,
        bufs: &mut HashMap<String, Vec<Segment>>,
    ) -> Result<()> {
        let tables: Vec<String> = (self.tables.iter())
            .filter(|(_, t)| !t.pending.is_empty())
            .map(|(n, _)| n.clone())
            .collect();
        for t in tables {
            let segs = bufs.get_mut(&t).expect("a table with events has segments");
            self.resolve(ch, &t, segs)?;
        }
        Ok(())
    }

    /// Read the old rows the waiting events of `table` need, then take
    /// them in order (also before a schema change of the table: they are
    /// taken under the layout they came with).
    pub(super) fn resolve(
        &mut self,
        ch: &ClickHouse,
        table: &str,
        segs: &mut [Segment],
    ) -> Result<()> {
        let Some(tf) = self.tables.get_mut(table) else {
            return Ok(());
        };
        if tf.pending.is_empty() {
            return Ok(());
        }
        let last = segs.len() - 1;
        let want = tf.to_read(&segs[last].layout)?;
        if !want.is_empty() {
            if tf.must_send_first(&want) {
                // The batch's own rows go out first, so the read sees them.
                if last > 0 || segs[last].change.is_some() {
                    let e = &tf.pending[0];
                    return Err(Error::state(format!(
                        "event {} ({} on table {:?}) names its old row by the key alone, and this batch changed the table's schema before it: the rows it needs are not written yet, and cannot be before the change is made at the commit; apply the batch in two, split at the schema record (mooncdc-split --max-events), or capture the table with REPLICA IDENTITY FULL (docs/CLICKHOUSE.md, \"Changes without the whole old row\")",
                        e.sequence,
                        e.operation.as_str(),
                        e.table
                    )));
                }
                if ch.cluster.is_some() {
                    ch.replicas_answer()?;
                }
                let seg = &mut segs[last];
                ch.flush(&seg.layout, &mut seg.held)?;
                tf.sent();
            }
            if tf.emptied {
                for (kb, ..) in want {
                    tf.keep(kb, None);
                }
            } else {
                tf.read(ch, segs, want)?;
            }
        }
        let pending = std::mem::take(&mut tf.pending);
        tf.pending_keys.clear();
        tf.pending_bytes = 0;
        tf.pending_reads = 0;
        let seg = &mut segs[last];
        for e in pending {
            let (old, new) = keys_of(&seg.layout, &e)?;
            tf.process(ch, seg, e, old, new, true)?;
        }
        tf.shed();
        Ok(())
    }
}

/// The rows of `keys` as the table holds them now
/// ([`ClickHouse::rows_at_keys`]), in the shape of the batch's last
/// segment: the batch's schema changes are made at its commit, so the
/// table still has the shape it had before the first; rows are read in that
/// shape and carried through each change (an added column NULL, as
/// [`Fill::after_change`] does). A table not in that shape (a replay after
/// a kill amid the changes) is refused rather than read wrongly.
fn read_rows(
    ch: &ClickHouse,
    segs: &[Segment],
    keys: &[ToRead],
    bounded: bool,
) -> Result<Vec<super::read::Found>> {
    let first = &segs[0];
    if segs.len() == 1 && first.change.is_none() {
        // A read that fails on a table not in the stream's shape (changed
        // by hand, or while no capture read) says so, as the table check
        // does for whole rows, rather than with the server's words for a
        // column it does not know. The happy path asks nothing more.
        return ch.rows_at_keys(&first.layout, keys, bounded).map_err(|e| {
            let have = match ch.columns_typed(&first.layout.name) {
                Ok(h) => h,
                Err(_) => return e,
            };
            let want = first.layout.expected_columns();
            if want.iter().all(|c| have.contains(c)) {
                return e;
            }
            Error::state(format!(
                "ClickHouse table {} has columns {:?}, but the stream's schema needs {:?} (names and types), so the old rows of its \
                 changes by key alone cannot be read; the stream does not say how one became the other (a column renamed, or one \
                 dropped and another added, while no capture was reading, say): change the table the same way and apply again, or \
                 give it a new snapshot (docs/OPERATIONS.md, schema changes)",
                first.layout.name,
                have.iter().map(|(n, t)| format!("{n} {t}")).collect::<Vec<_>>(),
                want.iter().map(|(n, t)| format!("{n} {t}")).collect::<Vec<_>>()
            ))
        });
    }
    let now = match &first.change {
        Some((old, _)) => old,
        None => &first.layout,
    };
    let have = ch.columns_typed(&now.name)?;
    if let Some((name, _)) = now
        .expected_columns()
        .into_iter()
        .find(|c| !have.contains(c))
    {
        return Err(Error::state(format!(
            "table {:?} is not in the shape this batch starts from (column {name:?} differs), so the old rows of its changes by key alone cannot be read: a replay after an apply stopped amid the batch's schema changes; take a new snapshot of the table, or backfill it (docs/CLICKHOUSE.md, \"Changes without the whole old row\")",
            now.schema.table
        )));
    }
    let mut found = ch.rows_at_keys(now, keys, bounded)?;
    for seg in segs {
        if let Some((old, change)) = &seg.change {
            let sources = change.sources(&old.schema);
            for f in &mut found {
                f.row = (sources.iter())
                    .map(|s| s.map_or(Value::Null, |i| f.row[i].clone()))
                    .collect();
            }
        }
    }
    Ok(found)
}

/// One held row as [`ClickHouse::encode`] wrote it, and whether it is a
/// deleted row (a tombstone, or a history row of a delete).
fn held_row(engine: Engine, l: &Layout, r: &mut dyn Read) -> Result<(Row, bool)> {
    fn skip(r: &mut dyn Read, n: usize) -> Result<()> {
        let mut b = [0u8; 16];
        r.read_exact(&mut b[..n])
            .map_err(|e| Error::io("cannot read a batch's held rows back", e))
    }
    // A history row: its operation, then its position (two UInt64).
    let op = match engine {
        Engine::Replacing => None,
        Engine::History => {
            let op = decode_value(r, ChType::Text, false)?;
            skip(r, 16)?;
            Some(op)
        }
    };
    let row = (l.types.iter().enumerate())
        .map(|(i, ty)| decode_value(r, *ty, l.nullable(i)))
        .collect::<Result<Row>>()?;
    let gone = match op {
        Some(op) => op == Value::Text("delete".into()),
        None => {
            // A replacing row: its version (UInt64), then `_etl_deleted`.
            skip(r, 8)?;
            decode_value(r, ChType::Bool, false)? == Value::Integer(1)
        }
    };
    Ok((row, gone))
}

impl TableFill {
    /// The keys the waiting changes need read, each once, bounded by the
    /// first change that needs it.
    fn to_read(&self, l: &Layout) -> Result<Vec<ToRead>> {
        let mut want = Vec::new();
        let mut seen = HashSet::new();
        for e in &self.pending {
            if !needs_read(e) {
                continue;
            }
            let key = e.old_key(&l.key).expect("an update or delete");
            let kb = key_bytes(l, &key)?;
            if !self.recent.contains_key(&kb) && seen.insert(kb.clone()) {
                want.push((kb, key.into_iter().cloned().collect(), e.sequence));
            }
        }
        Ok(want)
    }

    /// Read the rows `want` needs from the table and keep them.
    fn read(&mut self, ch: &ClickHouse, segs: &[Segment], want: Vec<ToRead>) -> Result<()> {
        let l = &segs[segs.len() - 1].layout;
        let kb_of = |row: &Row| key_bytes(l, &l.key.iter().map(|&i| &row[i]).collect::<Vec<_>>());
        let mut got: HashMap<Vec<u8>, Option<Row>> = HashMap::new();
        for f in read_rows(ch, segs, &want, true)? {
            // A deleted row is no row, unless it is the change's own (a
            // delete an earlier try wrote, with the old row).
            got.insert(kb_of(&f.row)?, (!f.gone || f.own).then_some(f.row));
        }
        // A key with no row up to its change: after a crash, the rows
        // before it may have been merged into a newer one an earlier try of
        // this batch wrote, which stands for them.
        let missed: Vec<ToRead> = (want.iter())
            .filter(|(kb, ..)| !got.contains_key(kb))
            .cloned()
            .collect();
        if !missed.is_empty() && ch.engine == Engine::Replacing {
            for f in read_rows(ch, segs, &missed, false)? {
                let kb = kb_of(&f.row)?;
                let newer = Newer {
                    at: f.at as u64,
                    gone: f.gone,
                    row: f.row,
                };
                self.superseded.insert(kb, newer);
            }
            self.read_moved(ch, segs)?;
        }
        for (kb, ..) in want {
            if !self.superseded.contains_key(&kb) {
                let row = got.remove(&kb).flatten();
                self.keep(kb, row);
            }
        }
        Ok(())
    }

    /// A move whose old key's rows were merged into a newer row of an
    /// earlier try, and which needs its old row for unchanged values: where
    /// that try also wrote the move's row at the new key (a row there at the
    /// move's version or later), the new key's newest row is kept as
    /// superseding it. Where it did not (two inserts go at once, and a kill
    /// can land between them), [`TableFill::process`] refuses the move,
    /// naming it.
    fn read_moved(&mut self, ch: &ClickHouse, segs: &[Segment]) -> Result<()> {
        let l = &segs[segs.len() - 1].layout;
        let mut want: Vec<ToRead> = Vec::new();
        for e in &self.pending {
            if e.operation != Operation::Update || !needs_read(e) || !e.has_unchanged() {
                continue;
            }
            let (Some(k1), Some(k2)) = keys_of(l, e)? else {
                continue;
            };
            let v = version(l.kind, e.sequence)?;
            if k1 == k2
                || self.superseded.get(&k1).is_none_or(|n| n.at <= v)
                || self.superseded.contains_key(&k2)
            {
                continue;
            }
            let after = e.after.as_ref().expect("an update");
            want.push((
                k2,
                l.key.iter().map(|&i| after[i].clone()).collect(),
                e.sequence,
            ));
        }
        if want.is_empty() {
            return Ok(());
        }
        let from: HashMap<&[u8], u64> = (want.iter())
            .map(|(kb, _, seq)| Ok((kb.as_slice(), version(l.kind, *seq)?)))
            .collect::<Result<_>>()?;
        for f in read_rows(ch, segs, &want, false)? {
            let kb = key_bytes(l, &l.key.iter().map(|&i| &f.row[i]).collect::<Vec<_>>())?;
            if from.get(kb.as_slice()).is_some_and(|&v| f.at as u64 >= v) {
                let newer = Newer {
                    at: f.at as u64,
                    gone: f.gone,
                    row: f.row,
                };
                self.superseded.insert(kb, newer);
            }
        }
        Ok(())
    }

    /// What of `e` is left to write where an earlier try's newer rows
    /// stand for its keys' rows; a key reaching its newer row's version
    /// takes that row from there.
    fn sides(
        &mut self,
        l: &Layout,
        e: &Event,
        old: &Option<Vec<u8>>,
        new: &Option<Vec<u8>>,
    ) -> Result<Sides> {
        let v = version(l.kind, e.sequence)?;
        for kb in [old, new].into_iter().flatten() {
            if self.superseded.get(kb).is_some_and(|n| v > n.at) {
                let n = self.superseded.remove(kb).expect("just seen");
                self.keep(kb.clone(), n.then());
            }
        }
        // Whether the key's newer row stands for this change's row there;
        // at that row's own change, the key takes it (and its values).
        let mut covered = |kb: &Vec<u8>| -> Option<Newer> {
            let at = self.superseded.get(kb)?.at;
            if at > v {
                return Some(Newer {
                    at,
                    gone: false,
                    row: Row::new(),
                });
            }
            let n = self.superseded.remove(kb).expect("just seen");
            let stored = Newer {
                at,
                gone: n.gone,
                row: n.row.clone(),
            };
            self.keep(kb.clone(), n.then());
            Some(stored)
        };
        let moved = e.operation == Operation::Update && old != new;
        if !moved {
            let covered = [old, new]
                .into_iter()
                .flatten()
                .any(|kb| covered(kb).is_some());
            return Ok(if covered {
                Sides {
                    old: false,
                    new: false,
                    stored: None,
                }
            } else {
                Sides::ALL
            });
        }
        let (k1, k2) = (old.as_ref(), new.as_ref());
        let mut sides = Sides::ALL;
        if let Some(n) = k1.and_then(&mut covered) {
            sides.old = false;
            // The move's own tombstone holds its old row.
            if n.at == v && n.gone {
                sides.stored = Some(n.row);
            }
        }
        if k2.and_then(&mut covered).is_some() {
            sides.new = false;
        }
        Ok(sides)
    }

    /// Encode one event with its old row and unchanged values filled, and
    /// keep its new row.
    fn process(
        &mut self,
        ch: &ClickHouse,
        seg: &mut Segment,
        mut e: Event,
        old: Option<Vec<u8>>,
        new: Option<Vec<u8>>,
        track: bool,
    ) -> Result<()> {
        let l = &seg.layout;
        let mut sides = Sides::ALL;
        if track && !self.superseded.is_empty() {
            sides = self.sides(l, &e, &old, &new)?;
            if !sides.old && !sides.new {
                return Ok(());
            }
        }
        if needs_fill(&e) {
            let stored = match e.before.take().or(sides.stored.take()) {
                Some(b) => b,
                None if !sides.old => {
                    // A move whose old rows were merged into an earlier
                    // try's newer row: only its new row is written, and it
                    // needs them only for unchanged values.
                    if e.has_unchanged() {
                        return Err(Error::state(format!(
                            "event {} (update on table {:?}) moves a row to another key by its key alone, with values it did not change, \
                             and the rows it needs were merged away after an earlier try of this batch, which did not write the \
                             moved row: backfill the table, or give it a new snapshot (docs/CLICKHOUSE.md, \"Changes without the whole old row\")",
                            e.sequence, e.table
                        )));
                    }
                    e.after.clone().expect("an update")
                }
                None => {
                    let kb = old.as_ref().expect("an update or delete");
                    match self.recent.get(kb) {
                        Some(Some(row)) => row.clone(),
                        _ => {
                            let key: Vec<&Value> = e.old_key(&l.key).expect("an update or delete");
                            let mut shown = Vec::new();
                            crate::wire::value::write_row(
                                &mut shown,
                                &key.into_iter().cloned().collect::<Vec<_>>(),
                            );
                            return Err(Error::state(format!(
                                "event {} ({} on table {:?}): the target holds no row with key {}, which the change names by its key alone, so its old values cannot be filled; the target diverges from the source (take a new snapshot, or backfill the table: docs/CLICKHOUSE.md, \"Changes without the whole old row\")",
                                e.sequence,
                                e.operation.as_str(),
                                e.table,
                                String::from_utf8_lossy(&shown)
                            )));
                        }
                    }
                }
            };
            if let Some(a) = e.after.as_mut() {
                for (v, s) in a.iter_mut().zip(&stored) {
                    if v.is_unchanged() {
                        *v = s.clone();
                    }
                }
            }
            e.before = Some(stored);
            e.before_key = None;
        }
        let out = &mut seg.held.row;
        match (sides.old, sides.new) {
            (true, true) => ch.encode_event(&seg.layout, out, &e)?,
            // One side of a move.
            (false, _) => {
                let after = e.after.as_ref().expect("an update");
                ch.encode(&seg.layout, out, "update", after, e.sequence, false)?
            }
            (_, false) => {
                let before = e.before.as_ref().expect("filled");
                ch.encode(&seg.layout, out, "delete", before, e.sequence, false)?
            }
        }
        seg.held.take_row(ch.cfg.max_insert_bytes)?;
        if self.lost || !track {
            return Ok(());
        }
        match e.operation {
            Operation::Delete => self.keep(old.expect("a delete has an old key"), None),
            Operation::Update if old != new && sides.old => {
                self.keep(old.expect("an update has an old key"), None)
            }
            _ => {}
        }
        if let (Some(kb), Some(a), true) = (new, e.after, sides.new) {
            self.keep(kb, Some(a));
        }
        Ok(())
    }

    /// The kept rows in the shape a schema change from `old` to `new`
    /// gives them (`sources`: each new column's place in the old row; an
    /// added column NULL). False, with nothing kept, when the key changed
    /// columns or types.
    fn reshape(&mut self, old: &Layout, new: &Layout, sources: &[Option<usize>]) -> bool {
        let same_key =
            old.key.len() == new.key.len()
                && old.key.iter().zip(&new.key).all(|(&o, &n)| {
                    sources.get(n) == Some(&Some(o)) && old.types[o] == new.types[n]
                });
        if !same_key {
            self.forget();
            return false;
        }
        let shaped = |row: &Row| -> Row {
            (sources.iter())
                .map(|s| s.map_or(Value::Null, |i| row[i].clone()))
                .collect()
        };
        // Reshaped rows change size (an added column counts too): count
        // them again, or a later `keep` would take off more than it added.
        self.bytes = 0;
        for (kb, row) in self.recent.iter_mut() {
            if let Some(row) = row {
                *row = shaped(row);
                self.row_size = self.row_size.max(row_bytes(row));
            }
            self.bytes += kb.len() + row.as_ref().map_or(0, row_bytes);
        }
        // An earlier try's newer rows become the keys' rows later in the
        // batch: in the shape the batch has by then.
        for n in self.superseded.values_mut() {
            n.row = shaped(&n.row);
        }
        self.over |= self.bytes > FILL_MEMORY;
        true
    }

    /// The rows the batch wrote for the table before its first change by
    /// key alone, read back from the segments' held rows (nothing is sent
    /// before the commit but by [`Fill::resolve`]) into `recent`: each
    /// key's newest, carried through the batch's schema changes. The batch's
    /// own rows are then known without being sent, which a schema change
    /// in the batch would forbid. False, with nothing kept, when they
    /// cannot be: after a truncate in the batch, a key that changed
    /// columns, or more than [`FILL_MEMORY`] of rows.
    fn recover(&mut self, ch: &ClickHouse, segs: &mut [Segment]) -> Result<bool> {
        if self.emptied {
            return Ok(false);
        }
        for seg in segs.iter_mut() {
            if let Some((old, change)) = &seg.change {
                let sources = change.sources(&old.schema);
                if !self.reshape(old, &seg.layout, &sources) {
                    return Ok(false);
                }
                if self.over {
                    self.forget();
                    return Ok(false);
                }
            }
            let Segment {
                layout: l, held, ..
            } = seg;
            let mut r = std::io::BufReader::new(held.spool.read_back()?);
            let bad = |e: std::io::Error| Error::io("cannot read a batch's held rows back", e);
            while !r.fill_buf().map_err(bad)?.is_empty() {
                let (row, gone) = held_row(ch.engine, l, &mut r)?;
                let kb = key_bytes(l, &l.key.iter().map(|&i| &row[i]).collect::<Vec<_>>())?;
                self.keep(kb, (!gone).then_some(row));
                if self.over {
                    self.forget();
                    return Ok(false);
                }
            }
        }
        Ok(true)
    }

    /// Keep a key's newest row, counted against [`FILL_MEMORY`].
    fn keep(&mut self, kb: Vec<u8>, row: Option<Row>) {
        let key_len = kb.len();
        let size = row.as_ref().map_or(0, row_bytes);
        self.row_size = self.row_size.max(size);
        self.bytes += key_len + size;
        if let Some(old) = self.recent.insert(kb, row) {
            self.bytes -= key_len + old.as_ref().map_or(0, row_bytes);
        }
        self.over |= self.bytes > FILL_MEMORY;
    }

    /// When `recent` outgrew its memory and no waiting change needs what it
    /// holds: empty it, noting the keys it held (up to
    /// [`SHED_KEYS_MEMORY`]; past it, all may be missing). A key noted is
    /// read back from the target after the batch's rows are sent; a key
    /// the batch did not write is read as it is, with nothing sent.
    fn shed(&mut self) {
        if !self.over || !self.pending.is_empty() {
            return;
        }
        if !self.lost {
            for kb in std::mem::take(&mut self.recent).into_keys() {
                if self.shed_bytes > SHED_KEYS_MEMORY {
                    self.lost = true;
                    break;
                }
                self.shed_bytes += kb.len() + KEY_COST;
                self.shed_keys.insert(kb);
            }
        }
        self.forget();
    }

    /// Whether a read of `want` must send the batch's rows first, so it
    /// sees them: some key's row of this batch may be missing from
    /// `recent`.
    fn must_send_first(&self, want: &[ToRead]) -> bool {
        self.lost || want.iter().any(|(kb, ..)| self.shed_keys.contains(kb))
    }

    /// The batch's rows were sent: the target holds each key's newest.
    fn sent(&mut self) {
        self.lost = false;
        self.emptied = false;
        self.shed_keys = HashSet::new();
        self.shed_bytes = 0;
    }

    /// Nothing kept.
    fn forget(&mut self) {
        self.recent.clear();
        self.bytes = 0;
        self.over = false;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::{Schema, SourceKind};

    fn layout(cols: &[&str]) -> Layout {
        let columns: Vec<serde_json::Value> = cols
            .iter()
            .map(|c| serde_json::json!({"name": c, "type": "INTEGER", "nullable": true}))
            .collect();
        let schema: Schema = serde_json::from_value(
            serde_json::json!({"table": "t", "columns": columns, "key": ["id"]}),
        )
        .unwrap();
        Layout::with_typing(&schema, SourceKind::Sqlite, false)
    }

    /// The memory count follows the rows a schema change reshaped: a key's
    /// reshaped row replaced afterwards takes off what it weighs now (the
    /// count once went below zero there, and the batch stopped).
    #[test]
    fn kept_rows_are_counted_again_after_a_schema_change() {
        let mut tf = TableFill::default();
        let key = b"k".to_vec();
        tf.keep(key.clone(), Some(vec![Value::Integer(1)]));
        assert!(tf.reshape(&layout(&["id"]), &layout(&["id", "c"]), &[Some(0), None]));
        assert_eq!(tf.bytes, key.len() + 2 * 24);
        tf.keep(key.clone(), None);
        assert_eq!(tf.bytes, key.len());
        tf.keep(
            key.clone(),
            Some(vec![Value::Integer(1), Value::Text("ab".into())]),
        );
        assert_eq!(tf.bytes, key.len() + 24 + 26);
    }

    /// A newer row an earlier try wrote (after a crash) takes the batch's
    /// schema changes too, or it would later fill a change's values by the
    /// old columns' places.
    #[test]
    fn an_earlier_try_s_newer_rows_take_the_batch_s_schema_changes() {
        let mut tf = TableFill::default();
        let newer = Newer {
            at: 7,
            gone: false,
            row: vec![Value::Integer(1), Value::Integer(2), Value::Integer(3)],
        };
        tf.superseded.insert(b"k".to_vec(), newer);
        // The middle column dropped, one added at the end.
        let sources = [Some(0), Some(2), None];
        assert!(tf.reshape(
            &layout(&["id", "a", "b"]),
            &layout(&["id", "b", "c"]),
            &sources
        ));
        assert_eq!(
            tf.superseded[b"k".as_slice()].row,
            vec![Value::Integer(1), Value::Integer(3), Value::Null]
        );
    }
}
