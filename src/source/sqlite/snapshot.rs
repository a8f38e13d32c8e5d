//! Snapshots: every captured table in one read transaction, whose cursor
//! (the log's high water) hands over exactly to `read`.

use super::*;

/// Write a snapshot of the captured tables (or the named ones) in one read
/// transaction: the cursor is the change log's high water at that moment, so
/// capture `--after` it hands over exactly, even while writers run.
pub fn snapshot(
    path: &Path,
    tables: &[String],
    json: bool,
    out: &mut dyn Write,
    progress: &mut dyn crate::source::Tally,
) -> Result<u64> {
    let mut conn = open_existing(path)?;
    require_installed(&conn, path)?;
    let tx = conn
        .transaction_with_behavior(TransactionBehavior::Deferred)
        .map_err(db_err("cannot begin a read transaction"))?;
    // The first read fixes the transaction's view; read the cursor inside it.
    let id = identity(&tx)?;
    let hw = high_water(&tx)?;
    let captured = current_tables(&tx)?;
    let chosen: Vec<TableVersion> = if tables.is_empty() {
        captured.into_values().collect()
    } else {
        tables
            .iter()
            .map(|t| {
                captured.get(t).cloned().ok_or_else(|| {
                    Error::usage(format!(
                        "table {t:?} is not captured (run mooncdc-capture init --table {t:?})"
                    ))
                })
            })
            .collect::<Result<_>>()?
    };
    for tv in &chosen {
        let now = table_schema(&tx, &tv.schema.table)?;
        if now != tv.schema {
            return Err(Error::state(format!(
                "table {:?} changed since capture was installed; run mooncdc-capture upgrade first",
                tv.schema.table
            )));
        }
    }
    // A table being backfilled: the stream after this cursor leaves out
    // changes of the keys its chunks have not reached, which a snapshot
    // holds; the two would disagree.
    if let Some(r) = super::backfill::requests(&tx)?
        .into_iter()
        .find(|r| r.done.is_none() && chosen.iter().any(|t| t.schema.table == r.table))
    {
        return Err(Error::state(format!(
            "table {:?} is being backfilled (request {}, {}): a snapshot now would disagree with the stream after it; let a following capture finish the backfill (mooncdc-capture status shows it done), or leave the table out with --table",
            r.table,
            r.id,
            r.state()
        )));
    }
    let cursor = Cursor::new(id, hw);
    let schemas: Vec<Schema> = chosen.iter().map(|t| t.schema.clone()).collect();
    if progress.wants_total() {
        // Exact: counted in the snapshot's own read transaction.
        let mut total = 0u64;
        for s in &schemas {
            let n: i64 = tx
                .query_row(
                    &format!("SELECT count(*) FROM {}", quote_ident(&s.table)),
                    [],
                    |r| r.get(0),
                )
                .map_err(db_err("cannot count a table's rows"))?;
            total += n.max(0) as u64;
        }
        progress.total(total);
    }
    let mut w = SnapshotWriter::begin(out, json, &cursor, &schemas).map_err(io_out)?;
    for s in &schemas {
        let cols: Vec<String> = s.columns.iter().map(|c| quote_ident(&c.name)).collect();
        let sql = format!(
            "SELECT {} FROM {} ORDER BY {}",
            cols.join(", "),
            quote_ident(&s.table),
            order_by_key(s)
        );
        let mut st = tx.prepare(&sql).map_err(db_err("cannot read a table"))?;
        let mut rows = st.query([]).map_err(db_err("cannot read a table"))?;
        w.table(s).map_err(io_out)?;
        let before = w.count();
        while let Some(r) = rows.next().map_err(db_err("cannot read a table"))? {
            let row = row_values(r, 0, s.columns.len())
                .and_then(|row| null_key(s, &row).map(|_| row))
                .map_err(|e| {
                    Error::data(format!("table {:?}, row {}: {e}", s.table, w.count() + 1))
                })?;
            w.row(&row).map_err(io_out)?;
            if w.count() % 65536 == 0 {
                progress.count(w.count());
            }
        }
        progress.table_done(&s.table, w.count() - before);
    }
    let count = w.finish().map_err(io_out)?;
    tx.commit()
        .map_err(db_err("cannot end the read transaction"))?;
    progress.count(count);
    Ok(count)
}
