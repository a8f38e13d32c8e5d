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
            let published = publication_detail(&c, &self.publication).await?;
            let chosen: Vec<PubTable> = if tables.is_empty() {
                published
            } else {
                let mut v = Vec::new();
                for t in tables {
                    let full = table_arg(t)?;
                    match published.iter().find(|p| p.name == full) {
                        Some(p) => v.push(p.clone()),
                        None => {
                            return Err(Error::usage(format!("table {full:?} is not in publication {:?}", self.publication)))
                        }
                    }
                }
                v
            };
            let (mut exporter, sys) = self.replication_session().await?;
            let id = format!("postgres:{}/{}/{}", sys.system_id, self.conn.dbname, self.slot);
            let tmp = format!("mooncdc_snap_{}_{}", std::process::id(), std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.subsec_nanos()).unwrap_or(0));
            let created = tokio::time::timeout(
                slot_timeout,
                // The unparenthesized form: PostgreSQL 14 knows only it, later
                // versions still take it.
                exporter.simple_query(&format!("CREATE_REPLICATION_SLOT {tmp} TEMPORARY LOGICAL pgoutput EXPORT_SNAPSHOT")),
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
            let mut reads = Vec::new();
            for p in &chosen {
                let (schema, cls) = published_schema(&reader, p).await?;
                schemas.push(schema);
                classes.push(cls);
                reads.push(ReadAs::of(p));
            }
            if progress.wants_total() {
                // The planner's estimate (reltuples): a count would read every table twice.
                let est = row_estimate(&reader, &chosen).await;
                if est > 0 {
                    progress.total(est);
                }
            }
            let cursor = Cursor::new(id, sequence(consistent, 0));
            let mut w = SnapshotWriter::begin(out, json, &cursor, &schemas).map_err(io_out)?;
            let jobs = jobs.clamp(1, schemas.len().max(1));
            let mut sessions = vec![reader];
            if jobs <= 1 {
                for ((schema, cls), read) in schemas.iter().zip(&classes).zip(&reads) {
                    w.table(schema).map_err(io_out)?;
                    let before = w.count();
                    let mut rows = copy_table(&sessions[0], schema, cls, read).await?;
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
                    let (schemas, classes, reads) = (&schemas, &classes, &reads);
                    async move {
                        let mut spools = Vec::new();
                        for i in mine {
                            let mut spool = crate::ops::spool::Spool::new(4 << 20)
                                .holding(
                                    "a table's rows copied by --jobs",
                                    "until every table has been copied (the output comes in table order)",
                                );
                            let mut rows = copy_table(sess, &schemas[i], &classes[i], &reads[i]).await?;
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
pub(super) async fn copy_table(
    c: &Client,
    schema: &Schema,
    classes: &[Class],
    read: &ReadAs,
) -> Result<CopyRows> {
    let sql = select_in_key_order(schema, classes, &read.from, read.filter.as_deref());
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

/// A column's binary COPY form, for the types read in it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Bin {
    /// int2, int4, int8 (told apart by their length).
    Int,
    Float4,
    Float8,
    Bool,
    Bytea,
    /// text and varchar: the UTF-8 bytes.
    Text,
}

/// The binary form of a declared type (`format_type`'s text), if read here.
fn bin_of(decl: &str) -> Option<Bin> {
    Some(match decl {
        "bigint" | "integer" | "smallint" => Bin::Int,
        "real" => Bin::Float4,
        "double precision" => Bin::Float8,
        "boolean" => Bin::Bool,
        "bytea" => Bin::Bytea,
        "text" => Bin::Text,
        // `character varying(20)[]` is an array: its binary form is not text.
        d if d == "character varying"
            || d.strip_prefix("character varying(")
                .and_then(|r| r.strip_suffix(')'))
                .is_some_and(|n| !n.is_empty() && n.bytes().all(|c| c.is_ascii_digit())) =>
        {
            Bin::Text
        }
        _ => return None,
    })
}

/// One value of binary COPY, as the text path would give it.
fn from_binary(b: Bin, v: &[u8]) -> std::result::Result<Value, String> {
    let real = |x: f64| {
        if x.is_finite() {
            Ok(Value::Real(crate::wire::value::normalize_zero(x)))
        } else {
            // Named as PostgreSQL writes it, as the text form's message does.
            let name = if x.is_nan() {
                "NaN"
            } else if x > 0.0 {
                "Infinity"
            } else {
                "-Infinity"
            };
            Err(format!(
                "REAL value {name} cannot be carried (only finite REAL values can)"
            ))
        }
    };
    Ok(match (b, v.len()) {
        (Bin::Int, 2) => Value::Integer(i16::from_be_bytes([v[0], v[1]]).into()),
        (Bin::Int, 4) => Value::Integer(i32::from_be_bytes(v.try_into().expect("4 bytes")).into()),
        (Bin::Int, 8) => Value::Integer(i64::from_be_bytes(v.try_into().expect("8 bytes"))),
        (Bin::Float4, 4) => real(f32::from_be_bytes(v.try_into().expect("4 bytes")).into())?,
        (Bin::Float8, 8) => real(f64::from_be_bytes(v.try_into().expect("8 bytes")))?,
        (Bin::Bool, 1) => Value::Integer(i64::from(v[0] != 0)),
        (Bin::Bytea, _) => Value::Blob(v.to_vec()),
        (Bin::Text, _) => Value::Text(
            std::str::from_utf8(v)
                .map_err(|_| "value is not valid UTF-8".to_string())?
                .to_string(),
        ),
        (b, n) => return Err(format!("binary COPY gave {n} bytes for a {b:?} value")),
    })
}

/// What the start of a binary COPY buffer holds.
#[derive(Debug, PartialEq)]
enum BinStep {
    /// Not all of the next item yet.
    More,
    /// The header, of so many bytes.
    Header(usize),
    /// A row, of so many bytes.
    Row(usize, Row),
    /// The trailer (2 bytes).
    Trailer(usize),
}

/// Read the next item of binary COPY at the start of `b`: the header first,
/// then rows with one field per column (`kinds`), then the trailer.
fn binary_step(b: &[u8], header_read: bool, kinds: &[Bin]) -> std::result::Result<BinStep, String> {
    if !header_read {
        const SIGNATURE: &[u8] = b"PGCOPY\n\xff\r\n\0";
        if b.len() < SIGNATURE.len() + 8 {
            return Ok(BinStep::More);
        }
        if &b[..SIGNATURE.len()] != SIGNATURE {
            return Err("has no signature".into());
        }
        let at = SIGNATURE.len();
        let flags = u32::from_be_bytes(b[at..at + 4].try_into().expect("4 bytes"));
        // Bits 16-31 are critical: a reader that does not know one must stop
        // (bit 16: OIDs included).
        if flags >> 16 != 0 {
            return Err(format!(
                "has header flags {flags:#x} this reader does not know"
            ));
        }
        let ext = u32::from_be_bytes(b[at + 4..at + 8].try_into().expect("4 bytes")) as usize;
        if b.len() < at + 8 + ext {
            return Ok(BinStep::More);
        }
        return Ok(BinStep::Header(at + 8 + ext));
    }
    if b.len() < 2 {
        return Ok(BinStep::More);
    }
    let n = i16::from_be_bytes([b[0], b[1]]);
    if n == -1 {
        return Ok(BinStep::Trailer(2));
    }
    if n < 0 || n as usize != kinds.len() {
        return Err(format!("row has {n} fields, not {}", kinds.len()));
    }
    let mut at = 2;
    let mut row = Vec::with_capacity(kinds.len());
    for &k in kinds {
        if b.len() < at + 4 {
            return Ok(BinStep::More);
        }
        let len = i32::from_be_bytes(b[at..at + 4].try_into().expect("4 bytes"));
        at += 4;
        if len == -1 {
            row.push(Value::Null);
            continue;
        }
        if len < 0 {
            return Err(format!("gave a field of length {len}"));
        }
        let len = len as usize;
        if b.len() < at + len {
            return Ok(BinStep::More);
        }
        row.push(from_binary(k, &b[at..at + len])?);
        at += len;
    }
    Ok(BinStep::Row(at, row))
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

/// `SELECT` of a table's columns in the key order of docs/FORMAT.md
/// (snapshots): TEXT-mapped keys compare as their text in the C collation
/// (bytewise), others natively. `from` is the quoted relation (with `ONLY`
/// where it applies), `filter` a row filter.
pub fn select_in_key_order(
    s: &Schema,
    classes: &[Class],
    from: &str,
    filter: Option<&str>,
) -> String {
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
    let filter = filter.map(|f| format!(" WHERE ({f})")).unwrap_or_default();
    format!(
        "SELECT {} FROM {from}{filter} ORDER BY {}",
        cols.join(", "),
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
    /// COPY's binary form, with each column's reading; `None`: text form.
    pub(super) binary: Option<Vec<Bin>>,
    /// Whether the binary form's header was read.
    pub(super) header_read: bool,
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
            binary: None,
            header_read: false,
        }
    }

    /// The next row of binary COPY in `buf`, if it is all there:
    /// `Some(None)` at the trailer.
    fn binary_row(&mut self) -> Result<Option<Option<Row>>> {
        let kinds = self.binary.as_ref().expect("binary form");
        loop {
            let step = binary_step(&self.buf[self.pos..], self.header_read, kinds)
                .map_err(|e| Error::data(format!("table {:?}: binary COPY {e}", self.table)))?;
            match step {
                BinStep::More => return Ok(None),
                BinStep::Header(n) => {
                    self.pos += n;
                    self.header_read = true;
                }
                BinStep::Row(n, row) => {
                    self.pos += n;
                    return Ok(Some(Some(row)));
                }
                BinStep::Trailer(n) => {
                    self.pos += n;
                    return Ok(Some(None));
                }
            }
        }
    }

    pub async fn next(&mut self) -> Result<Option<Row>> {
        loop {
            if self.binary.is_some() {
                match self.binary_row()? {
                    Some(Some(row)) => return Ok(Some(row)),
                    // The trailer: nothing may follow it.
                    Some(None) => {
                        self.done = true;
                        self.binary = None;
                        self.buf.drain(..self.pos);
                        self.pos = 0;
                        while let Some(chunk) = self.stream.next().await {
                            self.buf
                                .extend_from_slice(&chunk.map_err(pg_err("COPY failed"))?);
                        }
                        if !self.buf.is_empty() {
                            return Err(Error::data(format!(
                                "table {:?}: binary COPY goes on after its trailer",
                                self.table
                            )));
                        }
                        return Ok(None);
                    }
                    None => {}
                }
            } else if let Some(i) = memchr::memchr(b'\n', &self.buf[self.pos..]) {
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
                if self.binary.is_some() {
                    return Err(Error::data(format!(
                        "table {:?}: binary COPY ended without its trailer",
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

#[cfg(test)]
mod binary_tests {
    use super::{bin_of, binary_step, from_binary, Bin, BinStep};
    use crate::wire::Value;

    /// A binary COPY stream: header (with an extension area), rows, trailer.
    fn copy_bytes(rows: &[Vec<Option<Vec<u8>>>], flags: u32) -> Vec<u8> {
        let mut b = b"PGCOPY\n\xff\r\n\0".to_vec();
        b.extend(flags.to_be_bytes());
        b.extend(3u32.to_be_bytes());
        b.extend([9, 9, 9]);
        for r in rows {
            b.extend((r.len() as i16).to_be_bytes());
            for f in r {
                match f {
                    None => b.extend((-1i32).to_be_bytes()),
                    Some(v) => {
                        b.extend((v.len() as i32).to_be_bytes());
                        b.extend(v);
                    }
                }
            }
        }
        b.extend((-1i16).to_be_bytes());
        b
    }

    /// Read a stream that arrives `chunk` bytes at a time, as `CopyRows` does.
    fn read_all(bytes: &[u8], kinds: &[Bin], chunk: usize) -> Result<Vec<Vec<Value>>, String> {
        let (mut buf, mut fed, mut pos, mut header, mut rows) = (Vec::new(), 0, 0, false, vec![]);
        loop {
            match binary_step(&buf[pos..], header, kinds)? {
                BinStep::More => {
                    assert!(fed < bytes.len(), "more asked for at the end");
                    let n = chunk.min(bytes.len() - fed);
                    buf.extend_from_slice(&bytes[fed..fed + n]);
                    fed += n;
                }
                BinStep::Header(n) => {
                    pos += n;
                    header = true;
                }
                BinStep::Row(n, r) => {
                    pos += n;
                    rows.push(r);
                }
                BinStep::Trailer(n) => {
                    assert_eq!(pos + n, buf.len(), "the trailer ends what was fed");
                    return Ok(rows);
                }
            }
        }
    }

    #[test]
    fn binary_copy_read_in_any_pieces() {
        let kinds = [Bin::Int, Bin::Text, Bin::Float8, Bin::Bytea];
        let rows = vec![
            vec![
                Some(7i64.to_be_bytes().to_vec()),
                Some("é\u{1F600}".as_bytes().to_vec()),
                Some(0.1f64.to_be_bytes().to_vec()),
                Some(vec![]),
            ],
            vec![Some(i64::MIN.to_be_bytes().to_vec()), None, None, None],
        ];
        let bytes = copy_bytes(&rows, 0);
        let want = vec![
            vec![
                Value::Integer(7),
                Value::Text("é\u{1F600}".into()),
                Value::Real(0.1),
                Value::Blob(vec![]),
            ],
            vec![
                Value::Integer(i64::MIN),
                Value::Null,
                Value::Null,
                Value::Null,
            ],
        ];
        for chunk in [1, 2, 3, 7, 19, bytes.len()] {
            let got = read_all(&bytes, &kinds, chunk).unwrap();
            assert_eq!(got.len(), want.len());
            for (g, w) in got.iter().zip(&want) {
                assert!(g.iter().zip(w).all(|(a, b)| a.same(b)), "{g:?} {w:?}");
            }
        }
        // Refused: OIDs (a critical header flag), a row of the wrong width, a
        // negative length other than -1 (NULL).
        let e = read_all(&copy_bytes(&rows, 1 << 16), &kinds, 5).unwrap_err();
        assert!(e.contains("header flags"), "{e}");
        let e = read_all(&copy_bytes(&rows[1..], 0), &kinds[..3], 5).unwrap_err();
        assert!(e.contains("4 fields, not 3"), "{e}");
        let mut bad = copy_bytes(&rows[1..], 0);
        let at = 19 + 3 + 2 + 4 + 8;
        bad[at..at + 4].copy_from_slice(&(-2i32).to_be_bytes());
        let e = read_all(&bad, &kinds, 64).unwrap_err();
        assert!(e.contains("length -2"), "{e}");
        // Not a binary COPY at all.
        assert!(binary_step(b"id\tname\n1\ta\n\\.\n........", false, &kinds).is_err());
    }

    #[test]
    fn binary_values_read_as_the_text_form_gives_them() {
        assert_eq!(bin_of("integer"), Some(Bin::Int));
        assert_eq!(bin_of("character varying(20)"), Some(Bin::Text));
        assert_eq!(bin_of("numeric(10,2)"), None);
        assert_eq!(bin_of("integer[]"), None);
        assert_eq!(bin_of("character varying(20)[]"), None);
        assert_eq!(bin_of("character varying[]"), None);
        assert_eq!(bin_of("character varying"), Some(Bin::Text));
        assert_eq!(bin_of("text[]"), None);
        assert_eq!(
            from_binary(Bin::Int, &(-2i16).to_be_bytes()),
            Ok(Value::Integer(-2))
        );
        assert_eq!(
            from_binary(Bin::Int, &i32::MIN.to_be_bytes()),
            Ok(Value::Integer(i32::MIN.into()))
        );
        assert_eq!(
            from_binary(Bin::Int, &i64::MAX.to_be_bytes()),
            Ok(Value::Integer(i64::MAX))
        );
        let x = f64::from_bits(0x0000_0000_0000_0001);
        assert_eq!(
            from_binary(Bin::Float8, &x.to_be_bytes()),
            Ok(Value::Real(x))
        );
        assert_eq!(
            from_binary(Bin::Float8, &(-0.0f64).to_be_bytes()),
            Ok(Value::Real(0.0))
        );
        assert_eq!(
            from_binary(Bin::Float4, &1.1f32.to_be_bytes()),
            Ok(Value::Real(f64::from(1.1f32)))
        );
        assert_eq!(from_binary(Bin::Bool, &[1]), Ok(Value::Integer(1)));
        assert_eq!(
            from_binary(Bin::Bytea, &[0, 255]),
            Ok(Value::Blob(vec![0, 255]))
        );
        assert_eq!(
            from_binary(Bin::Text, "é\u{1F600}".as_bytes()),
            Ok(Value::Text("é\u{1F600}".into()))
        );
        assert!(from_binary(Bin::Text, &[0xc3])
            .unwrap_err()
            .contains("UTF-8"));
        assert!(from_binary(Bin::Float8, &f64::INFINITY.to_be_bytes())
            .unwrap_err()
            .contains("Infinity"));
        assert!(from_binary(Bin::Float4, &f32::NAN.to_be_bytes())
            .unwrap_err()
            .contains("NaN"));
        assert!(from_binary(Bin::Int, &[1, 2, 3]).is_err());
    }
}
