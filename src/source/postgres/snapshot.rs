//! Snapshots: an exported snapshot copied table by table in key order,
//! whose cursor hands over exactly to `read`.

use super::*;

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
            let main = slot_info(&c, &self.slot)
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
            let published = publication_tables(&c, &self.publication).await?;
            let chosen: Vec<String> = if tables.is_empty() {
                published.clone()
            } else {
                for t in tables {
                    let full = if t.contains('.') { t.clone() } else { format!("public.{t}") };
                    if !published.contains(&full) {
                        return Err(Error::usage(format!("table {full:?} is not in publication {:?}", self.publication)));
                    }
                }
                tables.iter().map(|t| if t.contains('.') { t.clone() } else { format!("public.{t}") }).collect()
            };
            let (mut exporter, sys) = self.replication_session().await?;
            let id = format!("postgres:{}/{}/{}", sys.system_id, self.conn.dbname, self.slot);
            let tmp = format!("mooncdc_snap_{}_{}", std::process::id(), std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.subsec_nanos()).unwrap_or(0));
            let created = tokio::time::timeout(
                slot_timeout,
                exporter.simple_query(&format!("CREATE_REPLICATION_SLOT {tmp} TEMPORARY LOGICAL pgoutput (SNAPSHOT 'export')")),
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
            let row = rows.first().ok_or_else(|| Error::data("CREATE_REPLICATION_SLOT returned no row"))?;
            let text = |i: usize| -> Result<String> {
                row.get(i)
                    .and_then(|v| v.as_ref())
                    .map(|b| String::from_utf8_lossy(b).into_owned())
                    .ok_or_else(|| Error::data("CREATE_REPLICATION_SLOT returned an incomplete row"))
            };
            let consistent = parse_lsn(&text(1)?)?;
            let snapshot_name = text(2)?;
            // The main slot must still hold every change after the snapshot.
            let main_now = slot_info(&c, &self.slot).await?.unwrap_or(main);
            if main_now.confirmed > consistent {
                drop(exporter);
                return Err(Error::state(format!(
                    "slot {:?} is already acknowledged to {}, past the snapshot's point {}: changes in between would be lost",
                    self.slot,
                    lsn_text(main_now.confirmed),
                    lsn_text(consistent)
                )));
            }
            let reader = self.import_snapshot(&snapshot_name).await?;
            let mut schemas = Vec::new();
            let mut classes = Vec::new();
            for n in &chosen {
                let (s, t) = split_table(n);
                let (schema, cls) = table_schema(&reader, &s, &t).await?;
                schemas.push(schema);
                classes.push(cls);
            }
            if progress.wants_total() {
                // The planner's estimate (reltuples): a count would read every table twice.
                let names: Vec<String> = chosen.clone();
                let est = row_estimate(&reader, &names).await;
                if est > 0 {
                    progress.total(est);
                }
            }
            let cursor = Cursor::new(id, sequence(consistent, 0));
            let mut w = SnapshotWriter::begin(out, json, &cursor, &schemas).map_err(io_out)?;
            let jobs = jobs.clamp(1, schemas.len().max(1));
            let mut sessions = vec![reader];
            if jobs <= 1 {
                for (schema, cls) in schemas.iter().zip(&classes) {
                    w.table(schema).map_err(io_out)?;
                    let before = w.count();
                    let mut rows = copy_table(&sessions[0], schema, cls).await?;
                    while let Some(row) = rows.next().await? {
                        w.row(&row).map_err(io_out)?;
                        if w.count() % 65536 == 0 {
                            progress.count(w.count());
                        }
                    }
                    progress.table_done(&schema.table, w.count() - before);
                }
            } else {
                // Each worker imports the same snapshot and copies its share of
                // the tables into spools; the output then comes in table order.
                for _ in 1..jobs {
                    sessions.push(self.import_snapshot(&snapshot_name).await?);
                }
                let work = sessions.iter().enumerate().map(|(k, sess)| {
                    let mine: Vec<usize> = (k..schemas.len()).step_by(jobs).collect();
                    let (schemas, classes) = (&schemas, &classes);
                    async move {
                        let mut spools = Vec::new();
                        for i in mine {
                            let mut spool = crate::ops::spool::Spool::new(4 << 20);
                            let mut rows = copy_table(sess, &schemas[i], &classes[i]).await?;
                            let mut line = Vec::with_capacity(256);
                            while let Some(row) = rows.next().await? {
                                line.clear();
                                crate::wire::value::write_row(&mut line, &row);
                                line.push(b'\n');
                                spool.push(&line)?;
                            }
                            spools.push((i, spool));
                        }
                        Ok::<_, Error>(spools)
                    }
                });
                let results = futures_util::future::join_all(work).await;
                let mut all: Vec<(usize, crate::ops::spool::Spool)> = Vec::new();
                for r in results {
                    all.extend(r?);
                }
                all.sort_by_key(|(i, _)| *i);
                for (i, mut spool) in all {
                    w.table(&schemas[i]).map_err(io_out)?;
                    let before = w.count();
                    let mut rd = spool.drain()?;
                    let mut line = Vec::new();
                    loop {
                        line.clear();
                        if std::io::BufRead::read_until(&mut rd, b'\n', &mut line).map_err(|e| Error::io("cannot read a spool", e))? == 0 {
                            break;
                        }
                        w.raw_row(&line[..line.len() - 1]).map_err(io_out)?;
                        if w.count() % 65536 == 0 {
                            progress.count(w.count());
                        }
                    }
                    progress.table_done(&schemas[i].table, w.count() - before);
                }
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
}

/// A table's rows in key order through COPY.
pub(super) async fn copy_table(c: &Client, schema: &Schema, classes: &[Class]) -> Result<CopyRows> {
    let sql = select_in_key_order(schema, classes);
    let stream = c
        .copy_out(&format!("COPY ({sql}) TO STDOUT"))
        .await
        .map_err(pg_err("cannot copy a table"))?;
    Ok(CopyRows::new(
        Box::pin(stream),
        classes.to_vec(),
        schema.table.clone(),
    ))
}

/// `SELECT` of a table's columns in the key order of DESIGN §7: TEXT-mapped
/// keys compare as their text in the C collation (bytewise), others natively.
pub fn select_in_key_order(s: &Schema, classes: &[Class]) -> String {
    let (schema, table) = split_table(&s.table);
    let cols: Vec<String> = s.columns.iter().map(|c| quote_ident(&c.name)).collect();
    let order: Vec<String> = s
        .key
        .iter()
        .map(|k| {
            let i = s
                .columns
                .iter()
                .position(|c| &c.name == k)
                .expect("checked schema");
            match classes[i] {
                // concat() uses the type's output function, so the order is
                // that of the text on the wire (a cast to text would strip a
                // char(n)'s padding).
                Class::Text => format!("concat({}) COLLATE \"C\"", quote_ident(k)),
                _ => quote_ident(k),
            }
        })
        .collect();
    format!(
        "SELECT {} FROM {}.{} ORDER BY {}",
        cols.join(", "),
        quote_ident(&schema),
        quote_ident(&table),
        order.join(", ")
    )
}

/// Rows of a `COPY … TO STDOUT` stream, decoded to wire values.
pub struct CopyRows {
    pub(super) stream: std::pin::Pin<Box<tokio_postgres::CopyOutStream>>,
    pub(super) classes: Vec<Class>,
    pub(super) table: String,
    pub(super) buf: Vec<u8>,
    /// Where the next row starts in `buf`: rows are read in place, and what
    /// was read is dropped once per chunk, not once per row.
    pub(super) pos: usize,
    pub(super) done: bool,
}

impl CopyRows {
    pub fn new(
        stream: std::pin::Pin<Box<tokio_postgres::CopyOutStream>>,
        classes: Vec<Class>,
        table: String,
    ) -> Self {
        CopyRows {
            stream,
            classes,
            table,
            buf: Vec::new(),
            pos: 0,
            done: false,
        }
    }

    pub async fn next(&mut self) -> Result<Option<Row>> {
        loop {
            if let Some(i) = memchr::memchr(b'\n', &self.buf[self.pos..]) {
                let line = &self.buf[self.pos..self.pos + i];
                self.pos += i + 1;
                let fields = copy_fields(line)
                    .map_err(|e| Error::data(format!("table {:?}: {e}", self.table)))?;
                if fields.len() != self.classes.len() {
                    return Err(Error::data(format!(
                        "table {:?}: COPY row has {} fields",
                        self.table,
                        fields.len()
                    )));
                }
                let row = fields
                    .iter()
                    .zip(&self.classes)
                    .map(|(f, c)| from_text(*c, f.as_deref()))
                    .collect::<std::result::Result<Row, String>>()
                    .map_err(|e| Error::data(format!("table {:?}: {e}", self.table)))?;
                return Ok(Some(row));
            }
            // Everything before `pos` was read: drop it before reading more.
            self.buf.drain(..self.pos);
            self.pos = 0;
            if self.done {
                if !self.buf.is_empty() {
                    return Err(Error::data(format!(
                        "table {:?}: COPY ended inside a row",
                        self.table
                    )));
                }
                return Ok(None);
            }
            match self.stream.next().await {
                Some(chunk) => self
                    .buf
                    .extend_from_slice(&chunk.map_err(pg_err("COPY failed"))?),
                None => self.done = true,
            }
        }
    }
}

/// The planner's row estimate of the tables, summed; 0 when unknown.
async fn row_estimate(c: &Client, tables: &[String]) -> u64 {
    let mut total = 0f64;
    for t in tables {
        let (s, n) = split_table(t);
        let row = c
            .query_opt(
                "SELECT c.reltuples::float8 FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1 AND c.relname = $2",
                &[&s, &n],
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
