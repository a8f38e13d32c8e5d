//! Snapshots: an exported snapshot copied table by table in key order,
//! whose cursor hands over exactly to `read`.

use super::admin::{slot_info, SlotInfo};
use super::catalog::published_schema;
use super::publication::{publication_detail, refuse_hidden_rows, PubTable};
use super::replication::ReplClient;
use super::types::Class;
use super::{io_out, lsn_text, parse_lsn, repl_err, sequence, table_arg, PgSource};
use crate::error::{Error, Result};
use crate::ops::spool::Spool;
use crate::pg::{bin_of, pg_err, runtime, Bin, CopyRows};
use crate::util::quote_ident;
use crate::wire::snapshot::SnapshotWriter;
use crate::wire::{Cursor, Schema};
use std::collections::HashMap;
use std::io::Write;
use std::time::Duration;
use tokio_postgres::Client;

impl PgSource {
    /// Write a snapshot consistent with a cursor that hands over exactly to `read`.
    #[allow(clippy::too_many_arguments)]
    pub fn snapshot(
        &self,
        tables: &[String],
        json: bool,
        jobs: usize,
        slot_timeout: Duration,
        out: &mut dyn Write,
        progress: &mut dyn crate::source::Tally,
    ) -> Result<u64> {
        runtime()?.block_on(async {
            let c = self.client("snapshot").await?;
            let main = self.snapshot_slot(&c).await?;
            let chosen = self.chosen_tables(&c, tables).await?;
            self.check_readable(&c, &chosen).await?;
            self.refuse_backfilling(&c, &chosen).await?;
            let (exporter, id, consistent, snapshot_name) =
                self.export_snapshot(&c, main, slot_timeout).await?;
            let reader = self.import_snapshot(&snapshot_name).await?;
            let set = TableSet::load(&reader, &chosen).await?;
            announce_total(&reader, &chosen, progress).await;
            let cursor = Cursor::new(id, sequence(consistent, 0));
            let mut w = SnapshotWriter::begin(out, json, &cursor, &set.schemas).map_err(io_out)?;
            let units = work_units(&c, &set, &chosen, jobs).await;
            let mut sessions = vec![reader];
            if jobs.min(units.len()) <= 1 {
                copy_tables_in_turn(&sessions[0], &mut w, &set, progress).await?;
            } else {
                // Each worker imports the same snapshot and copies units of
                // work into spools, taking the next unit as it finishes one: a
                // table, or a key range of a large table. The output then
                // comes in table and key order, the same as with one job.
                for _ in 1..jobs.min(units.len()) {
                    sessions.push(self.import_snapshot(&snapshot_name).await?);
                }
                let all = spool_units(&sessions, &units, &set).await?;
                write_spools(&mut w, all, &units, &set, progress)?;
            }
            let count = w.finish().map_err(io_out)?;
            for sess in &sessions {
                let _ = sess.batch_execute("COMMIT").await;
            }
            drop(exporter);
            progress.count(count);
            Ok(count)
        })
    }

    /// The main slot, which capture continues from after the snapshot: it
    /// must exist, be a valid pgoutput slot, and be in this database.
    async fn snapshot_slot(&self, c: &Client) -> Result<SlotInfo> {
        let main = slot_info(c, &self.slot)
            .await?
            .ok_or_else(|| Error::state(format!("slot {:?} does not exist (run mooncdc-capture init first, so that changes after the snapshot are kept)", self.slot)))?;
        if main.plugin != "pgoutput" || main.database != self.conn.dbname || main.lost {
            return Err(Error::state(format!(
                "slot {:?} (plugin {:?}, database {:?}{}) cannot continue from a snapshot of {:?}; capture needs a valid pgoutput slot in this database",
                self.slot,
                main.plugin,
                main.database,
                if main.lost { ", invalidated" } else { "" },
                self.conn.dbname
            )));
        }
        Ok(main)
    }

    /// The tables to copy: the publication's, or those named with --table
    /// (each of which must be in the publication).
    async fn chosen_tables(&self, c: &Client, tables: &[String]) -> Result<Vec<PubTable>> {
        let published = publication_detail(c, &self.publication).await?;
        if tables.is_empty() {
            return Ok(published);
        }
        let mut v = Vec::new();
        for t in tables {
            let full = table_arg(t)?;
            match published.iter().find(|p| p.name == full) {
                Some(p) => v.push(p.clone()),
                None => {
                    return Err(Error::usage(format!(
                        "table {full:?} is not in publication {:?}",
                        self.publication
                    )))
                }
            }
        }
        Ok(v)
    }

    /// Refuse a role that may not read the slots or a chosen table, or from
    /// which row security hides rows of one: the copy would be partial.
    async fn check_readable(&self, c: &Client, chosen: &[PubTable]) -> Result<()> {
        let names: Vec<&str> = chosen.iter().map(|p| p.name.as_str()).collect();
        let owned: Vec<String> = names.iter().map(|n| n.to_string()).collect();
        self.check_reader(c, &owned, true, "a snapshot").await?;
        refuse_hidden_rows(c, &names, "a snapshot").await
    }

    /// Refuse a chosen table that a backfill is still working on, so the
    /// snapshot and the stream after it agree.
    async fn refuse_backfilling(&self, c: &Client, chosen: &[PubTable]) -> Result<()> {
        // A table being backfilled, or whose backfill's end no reader
        // has noted yet: the stream after the snapshot would leave out
        // changes its chunks have not reached, which the snapshot holds.
        let mut latest: HashMap<String, super::backfill::Request> = HashMap::new();
        for r in super::backfill::requests(c, &self.publication).await? {
            latest.insert(r.table.clone(), r);
        }
        if let Some(r) = latest.values().find(|r| {
            (!r.done || r.done_lsn.is_none() || r.failed.is_some())
                && chosen.iter().any(|p| p.name == r.table)
        }) {
            return Err(Error::state(format!(
                "table {:?} is being backfilled (request {}{}): a snapshot now would disagree with the stream after it; let a following capture finish the backfill (mooncdc-capture status shows it done at a position), or leave the table out with --table",
                r.table,
                r.id,
                if r.failed.is_some() {
                    ", which failed: resync it first"
                } else if r.done {
                    ", its end not yet read by a capture"
                } else {
                    ""
                }
            )));
        }
        Ok(())
    }

    /// Export a snapshot from a temporary slot, the main slot still holding every change after
    /// it: the exporting session (open until the end), the identity, the point and the name.
    async fn export_snapshot(
        &self,
        c: &Client,
        main: SlotInfo,
        slot_timeout: Duration,
    ) -> Result<(ReplClient, String, u64, String)> {
        let (mut exporter, sys) = self.replication_session().await?;
        let id = format!(
            "postgres:{}/{}/{}",
            sys.system_id, self.conn.dbname, self.slot
        );
        let tmp = format!(
            "mooncdc_snap_{}_{}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.subsec_nanos())
                .unwrap_or(0)
        );
        let created = tokio::time::timeout(
            slot_timeout,
            // The unparenthesized form: PostgreSQL 14 knows only it, later
            // versions still take it.
            exporter.simple_query(&format!(
                "CREATE_REPLICATION_SLOT {tmp} TEMPORARY LOGICAL pgoutput EXPORT_SNAPSHOT"
            )),
        )
        .await;
        let rows = match created {
            Err(_) => {
                drop(exporter);
                return Err(Error::state(format!(
                    "creating the snapshot's temporary slot waited {} s for open transactions to finish; retry when they have (or raise --slot-timeout)",
                    slot_timeout.as_secs()
                )));
            }
            Ok(r) => r.map_err(repl_err("cannot create the snapshot's temporary slot"))?,
        };
        let (consistent, snapshot_name) = exported_point(&rows)?;
        // The main slot must still hold every change after the snapshot.
        let main_now = slot_info(c, &self.slot).await?.unwrap_or(main);
        if main_now.confirmed > consistent {
            drop(exporter);
            return Err(Error::state(format!(
                "slot {:?} is already acknowledged to {}, past the snapshot's point {}: changes in between would be lost",
                self.slot,
                lsn_text(main_now.confirmed),
                lsn_text(consistent)
            )));
        }
        Ok((exporter, id, consistent, snapshot_name))
    }
}

/// The consistent point and the snapshot's name from the answer to
/// CREATE_REPLICATION_SLOT (its second and third columns).
fn exported_point(rows: &[Vec<Option<Vec<u8>>>]) -> Result<(u64, String)> {
    let row = rows
        .first()
        .ok_or_else(|| Error::data("CREATE_REPLICATION_SLOT returned no row"))?;
    let text = |i: usize| -> Result<String> {
        row.get(i)
            .and_then(|v| v.as_ref())
            .map(|b| String::from_utf8_lossy(b).into_owned())
            .ok_or_else(|| Error::data("CREATE_REPLICATION_SLOT returned an incomplete row"))
    };
    let consistent = parse_lsn(&text(1)?)?;
    let snapshot_name = text(2)?;
    Ok((consistent, snapshot_name))
}

/// The chosen tables as the snapshot sees them, by index: each one's
/// schema, its columns' classes, and how its rows are read.
struct TableSet {
    schemas: Vec<Schema>,
    classes: Vec<Vec<Class>>,
    reads: Vec<ReadAs>,
}

impl TableSet {
    /// Describe each chosen table on `reader`, inside the snapshot.
    async fn load(reader: &Client, chosen: &[PubTable]) -> Result<TableSet> {
        let mut schemas = Vec::new();
        let mut classes = Vec::new();
        let mut reads = Vec::new();
        for p in chosen {
            let (schema, cls) = published_schema(reader, p).await?;
            schemas.push(schema);
            classes.push(cls);
            reads.push(ReadAs::of(p));
        }
        Ok(TableSet {
            schemas,
            classes,
            reads,
        })
    }
}

/// Tell `progress` the rows to expect, when it wants a total.
async fn announce_total(
    reader: &Client,
    chosen: &[PubTable],
    progress: &mut dyn crate::source::Tally,
) {
    if progress.wants_total() {
        // The planner's estimate (reltuples): a count would read every table twice.
        let est = row_estimate(reader, chosen).await;
        if est > 0 {
            progress.total(est);
        }
    }
}

/// The units of work of `--jobs`, in table and key order: a table's index
/// with a key range's conditions (none: the whole table). None with one job.
async fn work_units(
    c: &Client,
    set: &TableSet,
    chosen: &[PubTable],
    jobs: usize,
) -> Vec<(usize, Vec<String>)> {
    // One table may be read by several sessions (key ranges): the
    // units of work, a table or a key range of one, come first.
    let mut units: Vec<(usize, Vec<String>)> = Vec::new();
    if jobs > 1 {
        for (i, p) in chosen.iter().enumerate() {
            let ranges = key_ranges(c, &set.schemas[i], &set.classes[i], p, jobs).await;
            if ranges.len() > 1 {
                crate::log::info(&format!(
                    "reading {} in {} key ranges at once ({})",
                    set.schemas[i].table,
                    ranges.len(),
                    ranges
                        .iter()
                        .map(|r| r.join(" AND "))
                        .collect::<Vec<_>>()
                        .join("; ")
                ));
            }
            units.extend(ranges.into_iter().map(|r| (i, r)));
        }
    }
    units
}

/// One job: each table copied in turn on the one session, straight to the
/// output.
async fn copy_tables_in_turn(
    sess: &Client,
    w: &mut SnapshotWriter<'_>,
    set: &TableSet,
    progress: &mut dyn crate::source::Tally,
) -> Result<()> {
    for ((schema, cls), read) in set.schemas.iter().zip(&set.classes).zip(&set.reads) {
        w.table(schema).map_err(io_out)?;
        let before = w.count();
        let mut rows = copy_table(sess, schema, cls, read, &[]).await?;
        while let Some(row) = rows.next().await? {
            w.row(&row).map_err(io_out)?;
            if w.count() % 65536 == 0 {
                progress.count(w.count());
            }
        }
        progress.table_done(&schema.table, w.count() - before);
    }
    Ok(())
}

/// Several jobs: every session copies units of work into spools at once.
/// The spools come back sorted by unit, so in table and key order.
async fn spool_units(
    sessions: &[Client],
    units: &[(usize, Vec<String>)],
    set: &TableSet,
) -> Result<Vec<(usize, Spool)>> {
    let next = std::cell::Cell::new(0usize);
    let work = sessions
        .iter()
        .map(|sess| spool_worker(sess, units, set, &next));
    let results = futures_util::future::join_all(work).await;
    let mut all: Vec<(usize, Spool)> = Vec::new();
    for r in results {
        all.extend(r?);
    }
    all.sort_by_key(|(u, _)| *u);
    Ok(all)
}

/// One session's share of the copy: it takes the next unit nobody has
/// taken and copies it into a spool of its own, until none is left.
async fn spool_worker(
    sess: &Client,
    units: &[(usize, Vec<String>)],
    set: &TableSet,
    next: &std::cell::Cell<usize>,
) -> Result<Vec<(usize, Spool)>> {
    let mut spools = Vec::new();
    loop {
        let u = next.get();
        let Some((i, range)) = units.get(u) else {
            break;
        };
        next.set(u + 1);
        let mut spool = Spool::new(4 << 20).holding(
            "a table's rows (or a key range's) copied by --jobs",
            "until every table has been copied (the output comes in table order)",
        );
        let mut rows = copy_table(
            sess,
            &set.schemas[*i],
            &set.classes[*i],
            &set.reads[*i],
            range,
        )
        .await?;
        let mut line = Vec::with_capacity(256);
        while let Some(row) = rows.next().await? {
            line.clear();
            crate::wire::value::write_row(&mut line, &row);
            line.push(b'\n');
            spool.push(&line)?;
        }
        spools.push((u, spool));
    }
    Ok(spools)
}

/// Several jobs: the spools written out in unit order, each table opened
/// at its first unit and counted done at its last.
fn write_spools(
    w: &mut SnapshotWriter<'_>,
    all: Vec<(usize, Spool)>,
    units: &[(usize, Vec<String>)],
    set: &TableSet,
    progress: &mut dyn crate::source::Tally,
) -> Result<()> {
    let mut before = 0;
    for (u, mut spool) in all {
        let i = units[u].0;
        if u == 0 || units[u - 1].0 != i {
            w.table(&set.schemas[i]).map_err(io_out)?;
            before = w.count();
        }
        let mut rd = spool.drain()?;
        let mut line = Vec::new();
        loop {
            line.clear();
            if std::io::BufRead::read_until(&mut rd, b'\n', &mut line)
                .map_err(|e| Error::io("cannot read a spool", e))?
                == 0
            {
                break;
            }
            w.raw_row(&line[..line.len() - 1]).map_err(io_out)?;
            if w.count() % 65536 == 0 {
                progress.count(w.count());
            }
        }
        if units.get(u + 1).is_none_or(|n| n.0 != i) {
            progress.table_done(&set.schemas[i].table, w.count() - before);
        }
    }
    Ok(())
}

/// A table's rows in key order through COPY (those that meet `range`'s
/// conditions too: a key range of [`key_ranges`]).
pub(super) async fn copy_table(
    c: &Client,
    schema: &Schema,
    classes: &[Class],
    read: &ReadAs,
    range: &[String],
) -> Result<CopyRows> {
    let mut conds: Vec<String> = read.filter.iter().map(|f| format!("({f})")).collect();
    conds.extend(range.iter().cloned());
    let sql = crate::pg::select_in_key_order_where(schema, classes, &read.from, &conds);
    // COPY's binary form when every column's type has one read here: no
    // text to parse (REAL bits as they are stored, integers, bytes).
    let binary: Option<Vec<Bin>> = schema
        .columns
        .iter()
        .map(|c| bin_of(&c.decl_type))
        .collect();
    let copy = match binary {
        Some(_) => format!("COPY ({sql}) TO STDOUT (FORMAT binary)"),
        None => format!("COPY ({sql}) TO STDOUT"),
    };
    let stream = c
        .copy_out(&copy)
        .await
        .map_err(pg_err("cannot copy a table"))?;
    let mut rows = CopyRows::new(Box::pin(stream), classes.to_vec(), schema.table.clone());
    rows.binary = binary;
    Ok(rows)
}

/// How a published table's rows are read: `FROM` what, and which rows.
pub(super) struct ReadAs {
    /// The quoted name, with `ONLY` for a table that is not partitioned
    /// (pgoutput publishes each relation's own rows, not its inheritance
    /// children's).
    from: String,
    /// The publication's row filter.
    filter: Option<String>,
}

impl ReadAs {
    pub(super) fn of(p: &PubTable) -> ReadAs {
        let name = format!("{}.{}", quote_ident(&p.schema), quote_ident(&p.table));
        ReadAs {
            from: if p.partitioned {
                name
            } else {
                format!("ONLY {name}")
            },
            filter: p.filter.clone(),
        }
    }
}

/// The planner's row estimate of the tables, summed; 0 when unknown.
async fn row_estimate(c: &Client, tables: &[PubTable]) -> u64 {
    let mut total = 0f64;
    for t in tables {
        let row = c
            .query_opt(
                "SELECT c.reltuples::float8 FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1 AND c.relname = $2",
                &[&t.schema, &t.table],
            )
            .await;
        match row {
            // -1 (never analysed, PostgreSQL 14+) or an error: no total at all.
            Ok(Some(r)) if r.get::<_, f64>(0) >= 0.0 => total += r.get::<_, f64>(0),
            _ => return 0,
        }
    }
    total as u64
}

/// Rows per key range, at least: with `--jobs N`, a table the planner
/// estimates at `k` × this many rows (k ≥ 2) is read in up to min(k, N)
/// ranges.
const RANGE_MIN_ROWS: u64 = 10_000;

/// The key ranges `--jobs N` reads a table in, each as conditions on its
/// first key column, in the snapshot's key order: one range (no condition)
/// for a table too small or not analysed, or whose first key column is
/// ordered by its text. The bounds are values of that
/// column from the planner's statistics (`pg_stats`: its histogram, else
/// its most common values), read on `stats`, outside the snapshot: any
/// values cut the key order into ranges that cover the table exactly, in
/// order, without overlap (rows of one first-column value stay in one
/// range); the statistics only make them about even.
async fn key_ranges(
    stats: &Client,
    schema: &Schema,
    classes: &[Class],
    p: &PubTable,
    jobs: usize,
) -> Vec<Vec<String>> {
    let whole = vec![Vec::new()];
    let est = row_estimate(stats, std::slice::from_ref(p)).await;
    let parts = ((est / RANGE_MIN_ROWS) as usize).min(jobs);
    let Some(first) = schema.key.first() else {
        return whole;
    };
    let Some(i) = schema.columns.iter().position(|c| &c.name == first) else {
        return whole;
    };
    // A key ordered by its text (`concat(k) COLLATE "C"`) has no index in
    // that order: each range would scan the whole table. Such a table stays
    // one range, read beside the others.
    if parts < 2 || matches!(classes[i], Class::Text) {
        return whole;
    }
    let q = format!(
        // (Named `bound`, not `b`: `ORDER BY b` would sort the text.)
        "SELECT b::text AS bound FROM pg_stats s, LATERAL unnest((COALESCE(s.histogram_bounds, s.most_common_vals)::text)::{}[]) b \
         WHERE s.schemaname = $1 AND s.tablename = $2 AND s.attname = $3 AND s.inherited = $4 ORDER BY b",
        schema.columns[i].decl_type,
    );
    // No statistics, or a type whose values do not read back: one range.
    let Ok(rows) = stats
        .query(&q, &[&p.schema, &p.table, first, &p.partitioned])
        .await
    else {
        return whole;
    };
    let values: Vec<String> = rows
        .iter()
        .filter_map(|r| r.get::<_, Option<String>>(0))
        .collect();
    let mut bounds: Vec<String> = Vec::new();
    for r in 1..parts {
        let Some(v) = values.get(r * values.len() / parts) else {
            break;
        };
        // An escaped literal whatever its text (E'' does not depend on
        // standard_conforming_strings); its type comes from the column.
        let b = format!("E'{}'", v.replace('\\', "\\\\").replace('\'', "\\'"));
        if bounds.last() != Some(&b) && r * values.len() / parts > 0 {
            bounds.push(b);
        }
    }
    let key = quote_ident(first);
    (0..=bounds.len())
        .map(|k| {
            let mut conds = Vec::new();
            if k > 0 {
                conds.push(format!("{key} >= {}", bounds[k - 1]));
            }
            if k < bounds.len() {
                conds.push(format!("{key} < {}", bounds[k]));
            }
            conds
        })
        .collect()
}
