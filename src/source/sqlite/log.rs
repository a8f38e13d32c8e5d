//! Reading the change log into batch streams, once or following, each
//! value encoded exactly as the table held it.

use super::backfill::{DONE_OP, REQUEST_OP, ROW_OP};
use super::*;
use crate::source::backfill::Reached;

/// What one read wrote.
#[derive(Debug, Clone, Default)]
pub struct ReadStats {
    pub batches: u64,
    pub events: u64,
    pub end: Option<Cursor>,
}

/// Write one batch of the changes after `after` (default: the acknowledged
/// position), in one read transaction. A table's new schema version is a
/// schema record before its first event. The batch ends at the last event
/// when a limit cut the read, else at the high water. A schema change the
/// stream cannot describe exactly fails the read, naming it, before the
/// batch's commit line (downstream applies none of it).
pub fn read(
    path: &Path,
    after: Option<&Cursor>,
    limits: ReadLimits,
    out: &mut dyn Write,
) -> Result<ReadStats> {
    let mut conn = open_existing(path)?;
    require_installed(&conn, path)?;
    let tx = conn
        .transaction_with_behavior(TransactionBehavior::Deferred)
        .map_err(db_err("cannot begin a read transaction"))?;
    refuse_drift(&tx, path)?;
    let stats = read_in(&tx, after, limits, out, true)?;
    tx.commit()
        .map_err(db_err("cannot end the read transaction"))?;
    Ok(stats)
}

/// Like [`read`], on an open connection inside a transaction. With
/// `always_emit` false, nothing is written when there is nothing new.
pub fn read_in(
    conn: &Connection,
    after: Option<&Cursor>,
    limits: ReadLimits,
    out: &mut dyn Write,
    always_emit: bool,
) -> Result<ReadStats> {
    let id = identity(conn)?;
    let acked = acknowledged(conn)?;
    let hw = high_water(conn)?;
    let start = match after {
        None => acked,
        Some(c) => {
            if c.source != id {
                return Err(Error::state(format!(
                    "cursor is for source {:?} but this database is {id:?}",
                    c.source
                )));
            }
            if c.sequence() < acked {
                return Err(Error::state(format!(
                    "cursor {} is before the acknowledged position {acked}: those changes have been deleted (take a new snapshot)",
                    c.sequence()
                )));
            }
            if c.sequence() > hw {
                return Err(Error::state(format!(
                    "cursor {} is beyond the high water {hw} of this database",
                    c.sequence()
                )));
            }
            c.sequence()
        }
    };
    let versions = table_versions(conn)?;
    let since = takeovers(conn, &versions)?;
    // Tables being backfilled, and the keys their rows have reached.
    let mut reached = super::backfill::reached_at(conn, start, &versions)?;
    // Pass 1: how many events, and the tables they touch.
    let mut touched: Vec<i64> = Vec::new();
    let mut n = 0u64;
    {
        let mut st = conn
            .prepare_cached(&format!(
                "SELECT seq, tid FROM {LOG} WHERE seq > ?1 AND op NOT IN ({MARKER_OP}, {DONE_OP}) ORDER BY seq"
            ))
            .map_err(db_err("cannot read the change log"))?;
        let mut rows = st
            .query([start as i64])
            .map_err(db_err("cannot read the change log"))?;
        let mut seen: HashMap<&str, ()> = HashMap::new();
        while let Some(r) = rows.next().map_err(db_err("cannot read the change log"))? {
            if limits.max_events.is_some_and(|m| n >= m) {
                break;
            }
            let seq: i64 = r.get(0).map_err(db_err("seq"))?;
            let tid: i64 = r.get(1).map_err(db_err("tid"))?;
            let tv = versions.get(&tid).ok_or_else(|| {
                Error::data(format!(
                    "change {seq} refers to unknown table version {tid}"
                ))
            })?;
            if seen.insert(tv.schema.table.as_str(), ()).is_none() {
                touched.push(tid);
            }
            n += 1;
        }
    }
    let mut stats = ReadStats::default();
    if n == 0 && !always_emit && start == hw {
        return Ok(stats);
    }

    // The header: every captured table as a target holding `start` has it:
    // the version that took over at or before it (a version made by a
    // release that did not note its takeover counts from the table's start
    // when it is the table's first).
    let mut in_force: BTreeMap<String, i64> = BTreeMap::new();
    // Only tables still captured or changed in this read: a table dropped
    // (or renamed) at the source is no longer described.
    let live: std::collections::HashSet<&str> = versions
        .values()
        .filter(|v| v.current)
        .map(|v| v.schema.table.as_str())
        .chain(touched.iter().map(|t| versions[t].schema.table.as_str()))
        .collect();
    for tv in versions
        .values()
        .filter(|v| live.contains(v.schema.table.as_str()))
    {
        match since.get(&tv.tid) {
            Some(&s) if s <= start => {
                in_force.insert(tv.schema.table.clone(), tv.tid);
            }
            Some(_) => {}
            None => {
                in_force.entry(tv.schema.table.clone()).or_insert(tv.tid);
            }
        }
    }
    for &t in &touched {
        let name = &versions[&t].schema.table;
        if !in_force.contains_key(name) && !since.contains_key(&t) {
            in_force.insert(name.clone(), t);
        }
    }
    // Pass 2: stream the events.
    let width = log_width(conn)?;
    let cols: Vec<String> = (0..width).map(|i| format!("v{i}")).collect();
    let sql = if cols.is_empty() {
        format!("SELECT seq, tid, op FROM {LOG} WHERE seq > ?1 ORDER BY seq")
    } else {
        format!(
            "SELECT seq, tid, op, {} FROM {LOG} WHERE seq > ?1 ORDER BY seq",
            cols.join(", ")
        )
    };
    let mut st = conn
        .prepare(&sql)
        .map_err(db_err("cannot read the change log"))?;
    let mut rows = st
        .query([start as i64])
        .map_err(db_err("cannot read the change log"))?;
    let mut line = Vec::with_capacity(1024);
    let mut bytes = 0u64;
    let header = Header {
        start: Cursor::new(id.clone(), start),
        high_water: hw,
        schemas: Some(
            in_force
                .values()
                .map(|t| versions[t].schema.clone())
                .collect(),
        ),
        compacted: false,
    };
    line.clear();
    write_header_line(&mut line, &header);
    out.write_all(&line).map_err(io_out)?;
    let fix = "Run schema changes with mooncdc-capture migrate, or upgrade right after an ALTER TABLE while capture's triggers are in place (docs/OPERATIONS.md, schema changes)";
    // The records that take a table from its version in force to `tid`.
    let change_to =
        |in_force: &mut BTreeMap<String, i64>, tid: i64, out: &mut Vec<u8>| -> Result<()> {
            let tv = &versions[&tid];
            let old = in_force.insert(tv.schema.table.clone(), tid);
            match old {
                Some(o) if o == tid => {}
                Some(o) => {
                    let known = super::renames::stored(conn, tid)?;
                    for c in crate::source::schema_change::classify(
                        &versions[&o].schema,
                        &tv.schema,
                        known.as_deref(),
                        fix,
                    )? {
                        write_schema_line(out, &c);
                    }
                }
                None => write_schema_line(
                    out,
                    &crate::wire::SchemaChange {
                        schema: tv.schema.clone(),
                        renamed: Vec::new(),
                    },
                ),
            }
            Ok(())
        };
    let mut written = 0u64;
    let mut last = start;
    let mut stopped = false;
    // Schema-change markers read since the last event: their records go
    // before the next event (whatever its table), so a target holding a
    // position past a marker also holds the change.
    let mut markers: Vec<(Sequence, i64)> = Vec::new();
    while let Some(r) = rows.next().map_err(db_err("cannot read the change log"))? {
        let seq = r.get::<_, i64>(0).map_err(db_err("seq"))? as Sequence;
        let tid: i64 = r.get(1).map_err(db_err("tid"))?;
        let op: i64 = r.get(2).map_err(db_err("op"))?;
        if !versions.contains_key(&tid) {
            return Err(Error::data(format!(
                "change {seq} refers to unknown table version {tid}"
            )));
        }
        if op == MARKER_OP {
            markers.push((seq, tid));
            continue;
        }
        let tv = &versions[&tid];
        if op == DONE_OP {
            // The table's last chunk is in: its changes all pass from here.
            reached.remove(&tv.schema.table);
            continue;
        }
        // At the limit, stop before the next change (one the backfill would
        // leave out included: the batch ends at the last event either way).
        if limits.max_events.is_some_and(|m| written >= m) {
            stopped = true;
            break;
        }
        let ncol = tv.schema.columns.len();
        let located =
            |e: String| Error::data(format!("change {seq} of table {:?}: {e}", tv.schema.table));
        let before = || row_values(r, 3, ncol).map_err(located);
        let after = || row_values(r, 3 + ncol, ncol).map_err(located);
        let (operation, before, after) = match op {
            1 => (Operation::Insert, None, Some(after()?)),
            2 => (Operation::Update, Some(before()?), Some(after()?)),
            3 => (Operation::Delete, Some(before()?), None),
            REQUEST_OP => (Operation::TRUNCATE, None, None),
            ROW_OP => (Operation::Insert, None, Some(after()?)),
            other => {
                return Err(Error::data(format!(
                    "change {seq} has unknown operation code {other}"
                )))
            }
        };
        for img in [&before, &after].into_iter().flatten() {
            null_key(&tv.schema, img).map_err(located)?;
        }
        let e = Event {
            sequence: seq,
            table: tv.schema.table.clone(),
            operation,
            before,
            before_key: None,
            after,
        };
        // A backfill's own records set what its table has reached; the
        // table's changes pass only as far as that (docs/BACKFILL.md).
        let positions = || crate::source::backfill::key_positions(&tv.schema);
        let (e, reaches) = match op {
            REQUEST_OP => (e, Some(Reached::Nothing)),
            ROW_OP => {
                let key = crate::source::backfill::key_of(
                    e.after.as_deref().unwrap_or(&[]),
                    &positions(),
                );
                match reached.get(&tv.schema.table) {
                    Some(Reached::UpTo(b)) if crate::wire::value::key_cmp(&key, b) != std::cmp::Ordering::Greater => {
                        return Err(Error::data(format!(
                            "change {seq}: a backfill row of table {:?} is not beyond the rows before it (the change log is damaged)",
                            tv.schema.table
                        )))
                    }
                    Some(_) => {}
                    None => {
                        return Err(Error::data(format!(
                            "change {seq}: a backfill row of table {:?}, which no backfill request covers (the change log is damaged)",
                            tv.schema.table
                        )))
                    }
                }
                (e, Some(Reached::UpTo(key)))
            }
            _ => match reached.get(&tv.schema.table) {
                None => (e, None),
                Some(r) => match crate::source::backfill::pass(e, &positions(), r) {
                    Some(e) => (e, None),
                    None => continue,
                },
            },
        };
        // Schema changes before this change: the markers passed, and the
        // event's own version (where no marker says when it took over).
        // One that cannot be described exactly fails the read before the
        // batch's commit line, so downstream applies none of it.
        line.clear();
        // (Most events change nothing: their table's version is in force and
        // no marker waits. Those skip the copy of the versions in force.)
        let forced = if markers.is_empty() && in_force.get(&tv.schema.table) == Some(&tid) {
            None
        } else {
            let mut forced = in_force.clone();
            for &(_, t) in &markers {
                change_to(&mut forced, t, &mut line)?;
            }
            change_to(&mut forced, tid, &mut line)?;
            Some(forced)
        };
        let record_bytes = line.len();
        write_event_line(&mut line, &e);
        limits.check_line(&line[record_bytes..], &e)?;
        if written > 0
            && limits
                .max_bytes
                .is_some_and(|m| bytes + line.len() as u64 > m)
        {
            stopped = true;
            break;
        }
        bytes += line.len() as u64;
        out.write_all(&line).map_err(io_out)?;
        if let Some(f) = forced {
            in_force = f;
        }
        markers.clear();
        if let Some(r) = reaches {
            reached.insert(e.table, r);
        }
        written += 1;
        last = seq;
    }
    // Markers with no change after them: their records end the batch (they
    // belong to its end).
    let end = if stopped { last } else { hw };
    if !stopped && !markers.is_empty() {
        line.clear();
        let mut forced = in_force.clone();
        for &(_, t) in &markers {
            change_to(&mut forced, t, &mut line)?;
        }
        out.write_all(&line).map_err(io_out)?;
    }
    let commit = Commit {
        end: Cursor::new(id.clone(), end),
        count: written,
    };
    line.clear();
    write_commit_line(&mut line, &commit);
    out.write_all(&line).map_err(io_out)?;
    stats.batches += 1;
    stats.events += written;
    stats.end = Some(commit.end.clone());
    Ok(stats)
}

/// Where each table version took over (`since:<tid>`): changes logged after
/// that position are its. Versions made by releases that did not note it are
/// absent.
fn takeovers(
    conn: &Connection,
    versions: &BTreeMap<i64, TableVersion>,
) -> Result<BTreeMap<i64, Sequence>> {
    let mut out = BTreeMap::new();
    for tid in versions.keys() {
        if let Some(s) = meta_get(conn, &format!("since:{tid}"))? {
            let s: Sequence = s.parse().map_err(|_| {
                Error::data(format!("capture metadata since:{tid} is not a position"))
            })?;
            out.insert(*tid, s);
        }
    }
    Ok(out)
}

/// Follow the change log: emit a batch whenever changes commit, forever (until
/// the output closes). With `ack_target`, acknowledge up to what that target
/// durably holds after each poll; nothing else is ever acknowledged.
pub fn follow(
    path: &Path,
    after: Option<&Cursor>,
    limits: ReadLimits,
    poll: std::time::Duration,
    chunk_rows: u64,
    ack_target: Option<&dyn Fn() -> Result<Option<Cursor>>>,
    out: &mut dyn Write,
) -> Result<()> {
    let mut conn = open_existing(path)?;
    let mut progress = crate::source::backfill::Progress::default();
    require_installed(&conn, path)?;
    let mut position = after.cloned();
    let mut first = true;
    // The schema cookie and capture version last found free of drift: the
    // full check (every table's columns, every trigger's SQL) runs again
    // only when one of them changed, not on every poll.
    let mut checked: Option<(i64, Option<String>)> = None;
    crate::metrics::started();
    loop {
        let busy = crate::util::stop::Busy::new();
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Deferred)
            .map_err(db_err("cannot begin a read transaction"))?;
        let key = (
            tx.query_row("PRAGMA schema_version", [], |r| r.get::<_, i64>(0))
                .map_err(db_err("cannot read the schema version"))?,
            meta_get(&tx, "version")?,
        );
        if checked.as_ref() != Some(&key) {
            refuse_drift(&tx, path)?;
            checked = Some(key);
        }
        let stats = read_in(&tx, position.as_ref(), limits, out, first)?;
        tx.commit()
            .map_err(db_err("cannot end the read transaction"))?;
        out.flush().map_err(io_out)?;
        drop(busy);
        crate::metrics::batch(stats.events, 0);
        if let Some(end) = &stats.end {
            crate::metrics::position(end.sequence() as u64);
        }
        // SIGTERM/SIGINT while that batch was written: stop after it.
        if crate::util::stop::requested() {
            return Ok(());
        }
        first = false;
        if let Some(end) = stats.end {
            position = Some(end);
        }
        if let Some(get) = ack_target {
            if let Some(held) = get()? {
                let id = identity(&conn)?;
                if held.source == id {
                    // The application holding the write lock past the busy
                    // timeout delays the acknowledgement, never the stream.
                    match super::ack_waiting(path, &held, std::time::Duration::from_millis(100)) {
                        Err(e) if crate::sqlite_util::is_busy(&e) => crate::log::warn(
                            "cannot acknowledge the target's position now: another connection holds the database's write lock; trying again after the next read",
                            &[("event", "ack-waits".into())],
                        ),
                        r => {
                            r?;
                        }
                    }
                }
            }
        }
        // A backfill waiting: log its next chunk, and read it at once.
        let chunk = super::backfill::write_chunk(&mut conn, chunk_rows)?;
        if let Some(c) = &chunk {
            let r = &c.request;
            progress.chunk(
                r.id,
                &r.table,
                (c.rows, r.rows, r.estimate),
                r.done.is_some(),
            );
        }
        // A cut read continues at once; otherwise wait for new changes.
        let cut =
            limits.max_events.is_some_and(|m| stats.events >= m) || limits.max_bytes.is_some();
        if !(cut && stats.events > 0) && chunk.is_none() {
            std::thread::sleep(poll);
        }
    }
}

/// Capture that no longer matches its tables (a column added, dropped or
/// renamed by an ALTER that `upgrade` or `migrate` did not make) logs
/// changes with a stale column list: reading them would carry rows without
/// the new column's values. Refuse before anything is written.
pub(super) fn refuse_drift(conn: &Connection, path: &Path) -> Result<()> {
    let drift = drift_in(conn)?;
    if drift.is_empty() {
        return Ok(());
    }
    Err(Error::state(format!(
        "capture has drifted from the tables ({}); nothing was read. Run `mooncdc-capture upgrade --source sqlite:{}` (it rebuilds capture and logs the current values of added columns for every row, so targets converge), then read again",
        drift.join("; "),
        path.display()
    )))
}
