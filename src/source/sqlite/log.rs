//! Reading the change log into batch streams, once or following, each
//! value encoded exactly as the table held it.

use super::*;

/// What one read wrote.
#[derive(Debug, Clone, Default)]
pub struct ReadStats {
    pub batches: u64,
    pub events: u64,
    pub end: Option<Cursor>,
}

/// Write one batch stream of the changes after `after` (default: the
/// acknowledged position), in one read transaction. A batch ends where a
/// table's schema version changes (the next header carries the new schema),
/// at the last event when a limit cut the read, else at the high water.
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
    // Pass 1: batch boundaries where a table's version changes, and each batch's tables.
    let mut plan: Vec<(Vec<i64>, Option<Sequence>, u64)> = Vec::new(); // (tids, cut-after seq, events)
    let mut limited_by_events = false;
    {
        let mut st = conn
            .prepare_cached(&format!(
                "SELECT seq, tid FROM {LOG} WHERE seq > ?1 ORDER BY seq"
            ))
            .map_err(db_err("cannot read the change log"))?;
        let mut rows = st
            .query([start as i64])
            .map_err(db_err("cannot read the change log"))?;
        let mut by_name: HashMap<&str, i64> = HashMap::new();
        let mut tids: Vec<i64> = Vec::new();
        let mut count = 0u64;
        let mut total = 0u64;
        let mut last: Sequence = start;
        while let Some(r) = rows.next().map_err(db_err("cannot read the change log"))? {
            if limits.max_events.is_some_and(|m| total >= m) {
                limited_by_events = true;
                break;
            }
            let seq: i64 = r.get(0).map_err(db_err("seq"))?;
            let tid: i64 = r.get(1).map_err(db_err("tid"))?;
            let tv = versions.get(&tid).ok_or_else(|| {
                Error::data(format!(
                    "change {seq} refers to unknown table version {tid}"
                ))
            })?;
            match by_name.get(tv.schema.table.as_str()) {
                Some(&t) if t != tid => {
                    plan.push((std::mem::take(&mut tids), Some(last), count));
                    by_name.clear();
                    count = 0;
                    by_name.insert(tv.schema.table.as_str(), tid);
                    tids.push(tid);
                }
                Some(_) => {}
                None => {
                    by_name.insert(tv.schema.table.as_str(), tid);
                    tids.push(tid);
                }
            }
            count += 1;
            total += 1;
            last = seq as Sequence;
        }
        plan.push((tids, None, count));
    }
    let total: u64 = plan.iter().map(|p| p.2).sum();
    let mut stats = ReadStats::default();
    if total == 0 && !always_emit && start == hw {
        return Ok(stats);
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
    let mut batch_start = start;
    let mut bytes = 0u64;
    let nplans = plan.len();
    for (i, (tids, cut, n)) in plan.into_iter().enumerate() {
        let schemas: Vec<Schema> = tids.iter().map(|t| versions[t].schema.clone()).collect();
        let header = Header {
            start: Cursor::new(id.clone(), batch_start),
            high_water: hw,
            schemas: Some(schemas),
            compacted: false,
        };
        line.clear();
        write_header_line(&mut line, &header);
        out.write_all(&line).map_err(io_out)?;
        let mut written = 0u64;
        let mut last = batch_start;
        let mut stopped_by_bytes = false;
        while written < n {
            let Some(r) = rows.next().map_err(db_err("cannot read the change log"))? else {
                break;
            };
            let seq = r.get::<_, i64>(0).map_err(db_err("seq"))? as Sequence;
            let tid: i64 = r.get(1).map_err(db_err("tid"))?;
            let op: i64 = r.get(2).map_err(db_err("op"))?;
            let tv = &versions[&tid];
            let ncol = tv.schema.columns.len();
            let located = |e: String| {
                Error::data(format!("change {seq} of table {:?}: {e}", tv.schema.table))
            };
            let before = || row_values(r, 3, ncol).map_err(located);
            let after = || row_values(r, 3 + ncol, ncol).map_err(located);
            let (operation, before, after) = match op {
                1 => (Operation::Insert, None, Some(after()?)),
                2 => (Operation::Update, Some(before()?), Some(after()?)),
                3 => (Operation::Delete, Some(before()?), None),
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
                after,
            };
            line.clear();
            write_event_line(&mut line, &e);
            limits.check_line(&line, &e)?;
            if written > 0
                && limits
                    .max_bytes
                    .is_some_and(|m| bytes + line.len() as u64 > m)
            {
                stopped_by_bytes = true;
                break;
            }
            bytes += line.len() as u64;
            out.write_all(&line).map_err(io_out)?;
            written += 1;
            last = seq;
        }
        let end = if stopped_by_bytes || (limited_by_events && i + 1 == nplans) {
            last
        } else {
            match cut {
                Some(c) => c,
                None => hw,
            }
        };
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
        batch_start = end;
        if stopped_by_bytes {
            break;
        }
    }
    Ok(stats)
}

/// Follow the change log: emit a batch whenever changes commit, forever (until
/// the output closes). With `ack_target`, acknowledge up to what that target
/// durably holds after each poll; nothing else is ever acknowledged.
pub fn follow(
    path: &Path,
    after: Option<&Cursor>,
    limits: ReadLimits,
    poll: std::time::Duration,
    ack_target: Option<&dyn Fn() -> Result<Option<Cursor>>>,
    out: &mut dyn Write,
) -> Result<()> {
    let mut conn = open_existing(path)?;
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
                    ack(path, &held)?;
                }
            }
        }
        // A cut read continues at once; otherwise wait for new changes.
        let cut =
            limits.max_events.is_some_and(|m| stats.events >= m) || limits.max_bytes.is_some();
        if !(cut && stats.events > 0) {
            std::thread::sleep(poll);
        }
    }
}

/// Capture that no longer matches its tables (a column added, dropped or
/// renamed by an ALTER that `upgrade` or `migrate` did not make) logs
/// changes with a stale column list: reading them would carry rows without
/// the new column's values. Refuse before anything is written.
fn refuse_drift(conn: &Connection, path: &Path) -> Result<()> {
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
