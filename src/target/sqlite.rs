//! The SQLite projection target: the embedded default.
//!
//! Each source table becomes a table named exactly as the event's `table`
//! (one quoted identifier). Column types: a SQLite source's declared types
//! are copied (so affinity treats values as the source did); for any other
//! source every column is declared without a type, which in SQLite means no
//! affinity, so no value ever changes class (the TEXT `'12.3400'` of a
//! PostgreSQL `numeric` stays TEXT). The cursor lives in `_mooncdc_cursor` and
//! is written in the same transaction as the batch's rows: a crash at any
//! point loses nothing and duplicates nothing.

use super::ExistingRows;
use crate::error::{Error, Result};
use crate::sqlite_util::{
    db_err, open_or_create, quote_ident, row_values, table_exists, table_schema, Bind,
    RESERVED_PREFIX,
};
use crate::wire::{
    BatchStreamReader, Cursor, Event, Item, Operation, Row, Schema, SnapItem, SnapshotReader, Value,
};
use rusqlite::{params, params_from_iter, Connection, OptionalExtension};
use std::collections::HashMap;
use std::io::BufRead;
use std::path::{Path, PathBuf};

const CURSOR: &str = "_mooncdc_cursor";

/// What to do when an image check fails.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OnConflict {
    /// Refuse the batch: the target diverges from the source.
    #[default]
    Error,
    /// Make the row what the event says, whatever was stored.
    Overwrite,
}

/// Totals of one apply.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ApplyStats {
    pub batches: u64,
    pub applied: u64,
    pub skipped: u64,
    pub cursor: Option<Cursor>,
}

pub struct SqliteTarget {
    /// Opened at the first batch or snapshot header, so input that is not
    /// even a stream never creates or changes a database.
    conn: Option<Connection>,
    path: PathBuf,
    committed: ApplyStats,
    /// Whether the database holds MoonCDC's cursor table already; one that
    /// does not is changed only by a successful first apply.
    projection: bool,
    /// Whether this apply created the database file (removed again when
    /// nothing was ever committed to it).
    created: bool,
}

struct TableSql {
    schema: Schema,
    /// The target columns' affinities, by position.
    affinity: Vec<Affinity>,
    key: Vec<usize>,
    insert: String,
    replace: String,
    select: String,
    update: String,
    delete: String,
}

impl TableSql {
    fn new(schema: Schema, affinity: Vec<Affinity>) -> Self {
        let t = quote_ident(&schema.table);
        let cols: Vec<String> = schema
            .columns
            .iter()
            .map(|c| quote_ident(&c.name))
            .collect();
        let n = cols.len();
        let key = schema.key_indices();
        let marks: Vec<String> = (1..=n).map(|i| format!("?{i}")).collect();
        let key_where = |first: usize| {
            key.iter()
                .enumerate()
                .map(|(j, &i)| format!("{} = ?{}", cols[i], first + j))
                .collect::<Vec<_>>()
                .join(" AND ")
        };
        let sets: Vec<String> = cols
            .iter()
            .enumerate()
            .map(|(i, c)| format!("{c} = ?{}", i + 1))
            .collect();
        TableSql {
            insert: format!(
                "INSERT INTO {t}({}) VALUES ({})",
                cols.join(", "),
                marks.join(", ")
            ),
            replace: format!(
                "INSERT OR REPLACE INTO {t}({}) VALUES ({})",
                cols.join(", "),
                marks.join(", ")
            ),
            select: format!("SELECT {} FROM {t} WHERE {}", cols.join(", "), key_where(1)),
            update: format!(
                "UPDATE {t} SET {} WHERE {}",
                sets.join(", "),
                key_where(n + 1)
            ),
            delete: format!("DELETE FROM {t} WHERE {}", key_where(1)),
            key,
            schema,
            affinity,
        }
    }

    /// Refuse a row whose values the target columns' affinities would turn
    /// into another class (a TEXT `'123'` under NUMERIC affinity, say): the
    /// projection would differ from the source without a word.
    fn check_classes(&self, row: &[Value], at: &dyn Fn() -> String) -> Result<()> {
        for (i, v) in row.iter().enumerate() {
            let a = self.affinity.get(i).copied().unwrap_or(Affinity::Blob);
            if !keeps_class(a, v) {
                return Err(Error::data(format!(
                    "{}: table {:?} column {:?} has {} affinity in the target, which would store this {} value as another class; recreate that target table with the column declared without a type",
                    at(),
                    self.schema.table,
                    self.schema.columns[i].name,
                    format!("{a:?}").to_uppercase(),
                    v.class_name()
                )));
            }
        }
        Ok(())
    }

    fn key_of<'a>(&self, row: &'a [Value]) -> Vec<&'a Value> {
        self.key.iter().map(|&i| &row[i]).collect()
    }
}

fn same_row(a: &[Value], b: &[Value]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.same_normalized(y))
}

fn is_constraint(e: &rusqlite::Error) -> bool {
    matches!(e, rusqlite::Error::SqliteFailure(f, _) if f.code == rusqlite::ErrorCode::ConstraintViolation)
}

impl SqliteTarget {
    /// A projection database at `path`. Nothing is created or changed here:
    /// a missing file is created, and MoonCDC's table added, inside the
    /// first batch's or snapshot's transaction.
    pub fn open(path: &Path) -> Result<Self> {
        let mut t = SqliteTarget {
            conn: None,
            path: path.to_path_buf(),
            committed: ApplyStats::default(),
            projection: false,
            created: false,
        };
        if path.exists() {
            let conn = crate::sqlite_util::open_existing(path)?;
            t.projection = table_exists(&conn, CURSOR)?;
            t.conn = Some(conn);
        }
        Ok(t)
    }

    /// What the last apply committed, also when it then failed.
    pub fn committed(&self) -> &ApplyStats {
        &self.committed
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The stored cursor, if any.
    pub fn cursor(&self) -> Result<Option<Cursor>> {
        match &self.conn {
            Some(c) if self.projection => stored_cursor(c),
            _ => Ok(None),
        }
    }

    /// The open connection; only called once [`Self::begin`] has opened it.
    fn db(&self) -> &Connection {
        self.conn.as_ref().expect("opened at the first header")
    }

    /// Open the database if needed and begin a batch's transaction, with
    /// the cursor table in it for a database that is not a projection yet.
    fn begin(&mut self) -> Result<()> {
        if self.conn.is_none() {
            self.conn = Some(open_or_create(&self.path)?);
            self.created = true;
        }
        let conn = self.db();
        conn.set_prepared_statement_cache_capacity(256);
        conn.execute_batch("BEGIN IMMEDIATE")
            .map_err(db_err("cannot begin a transaction"))?;
        if !self.projection {
            conn.execute_batch(&format!(
                "CREATE TABLE IF NOT EXISTS {CURSOR}(source TEXT PRIMARY KEY, sequence TEXT NOT NULL)"
            ))
            .map_err(|e| {
                Error::database("cannot prepare the target database", e)
                    .in_file(&self.path.display().to_string())
            })?;
        }
        Ok(())
    }

    /// Commit a batch's transaction. The first commit makes the database a
    /// projection, which then runs in WAL mode (readers never block apply).
    fn commit(&mut self) -> Result<()> {
        self.db()
            .execute_batch("COMMIT")
            .map_err(db_err("cannot commit"))?;
        if !self.projection {
            self.projection = true;
            self.db()
                .execute_batch("PRAGMA journal_mode = WAL")
                .map_err(db_err("cannot switch the target database to WAL"))?;
        }
        Ok(())
    }

    /// Roll back a failed batch; a database file this apply created and
    /// never committed to is removed, so a failed first apply leaves nothing.
    fn rollback(&mut self) {
        if let Some(c) = &self.conn {
            let _ = c.execute_batch("ROLLBACK");
        }
        if self.created && !self.projection {
            self.conn = None;
            let _ = std::fs::remove_file(&self.path);
            for ext in ["-wal", "-shm", "-journal"] {
                let mut p = self.path.clone().into_os_string();
                p.push(ext);
                let _ = std::fs::remove_file(p);
            }
            self.created = false;
        }
    }

    /// Apply a batch stream; each batch commits with its cursor in one
    /// transaction. Batches already held are skipped; a gap or another source fails.
    pub fn apply_stream<R: BufRead>(
        &mut self,
        input: &mut BatchStreamReader<R>,
        on_conflict: OnConflict,
        progress: &mut dyn FnMut(&ApplyStats),
    ) -> Result<ApplyStats> {
        let mut stats = ApplyStats {
            cursor: self.cursor()?,
            ..Default::default()
        };
        self.committed = stats.clone();
        let mut tables: HashMap<String, TableSql> = HashMap::new();
        let mut skip_through: u128 = 0;
        let mut start: Option<(Cursor, bool)> = None;
        let mut open = false;
        let mut parked: Vec<(String, Row, u128)> = Vec::new();
        let result = (|| -> Result<()> {
            while let Some(item) = input.next_item()? {
                match item {
                    Item::Header(h) => {
                        parked.clear();
                        self.begin()?;
                        open = true;
                        let stored = stored_cursor(self.db())?;
                        skip_through = super::skip_through(stored.as_ref(), &h.start)?;
                        start = Some((h.start.clone(), h.compacted));
                        tables.clear();
                        if let Some(schemas) = &h.schemas {
                            for s in schemas {
                                let t = ensure_table(self.db(), s, &h.start.source)?;
                                tables.insert(s.table.clone(), t);
                            }
                        }
                    }
                    Item::Event(e) => {
                        if e.sequence <= skip_through {
                            stats.skipped += 1;
                            continue;
                        }
                        if !tables.contains_key(&e.table) {
                            let t = existing_table(self.db(), &e.table)?;
                            tables.insert(e.table.clone(), t);
                        }
                        let t = &tables[&e.table];
                        // Without schemas in the header, the images were not
                        // checked against this table's width yet.
                        for img in [&e.before, &e.after].into_iter().flatten() {
                            if img.len() != t.schema.columns.len() {
                                return Err(input.locate(Error::data(format!(
                                    "event {} has {} values but table {:?} has {} columns",
                                    e.sequence,
                                    img.len(),
                                    e.table,
                                    t.schema.columns.len()
                                ))));
                            }
                            t.check_classes(img, &|| format!("event {}", e.sequence))
                                .map_err(|err| input.locate(err))?;
                        }
                        match apply_event(self.db(), t, &e, on_conflict)? {
                            Applied::Parked(row) => parked.push((e.table.clone(), row, e.sequence)),
                            Applied::Done => {
                                if !parked.is_empty() && e.operation != Operation::Insert {
                                    retry_parked(self.db(), &tables, &mut parked)?;
                                }
                            }
                        }
                        stats.applied += 1;
                        if stats.applied % 65536 == 0 {
                            progress(&stats);
                        }
                    }
                    Item::Commit(c) => {
                        let (s, compacted) = start.take().expect("validated stream");
                        super::check_compacted(&s, compacted, skip_through, &c.end)?;
                        if let Some((table, _, seq)) = parked.first() {
                            return Err(Error::state(format!(
                                "event {seq} (update on table {table:?}): its new key is still held by another row at the end of the batch; the target diverges from the source"
                            )));
                        }
                        if c.end.sequence() > skip_through || stored_cursor(self.db())?.is_none() {
                            set_cursor(self.db(), &c.end)?;
                            stats.cursor = Some(c.end.clone());
                        }
                        self.commit()?;
                        open = false;
                        stats.batches += 1;
                        self.committed = stats.clone();
                        progress(&stats);
                    }
                }
            }
            Ok(())
        })();
        if let Err(e) = result {
            if open {
                self.rollback();
            }
            return Err(e);
        }
        Ok(stats)
    }

    /// Load a snapshot into a target that holds no cursor yet, in one transaction.
    pub fn apply_snapshot<R: BufRead>(
        &mut self,
        input: &mut SnapshotReader<R>,
        on_conflict: OnConflict,
        existing: ExistingRows,
        progress: &mut dyn FnMut(&ApplyStats),
    ) -> Result<ApplyStats> {
        let mut stats = ApplyStats::default();
        self.committed = stats.clone();
        let mut tables: HashMap<String, TableSql> = HashMap::new();
        let mut cursor: Option<Cursor> = None;
        let mut open = false;
        let result = (|| -> Result<()> {
            while let Some(item) = input.next_item()? {
                match item {
                    SnapItem::Header { cursor: c, schemas } => {
                        self.begin()?;
                        open = true;
                        if let Some(held) = stored_cursor(self.db())? {
                            return Err(Error::state(format!(
                                "the target already holds source {:?} at {}; a snapshot loads only into a target without a cursor (use a new target database)",
                                held.source,
                                held.sequence()
                            )));
                        }
                        for s in &schemas {
                            let t = ensure_table(self.db(), s, &c.source)?;
                            empty_or_replace(self.db(), &s.table, existing)?;
                            tables.insert(s.table.clone(), t);
                        }
                        cursor = Some(c);
                    }
                    SnapItem::Row { table, row } => {
                        let t = &tables[&table];
                        t.check_classes(&row, &|| "snapshot row".to_string())
                            .map_err(|err| input.locate(err))?;
                        let sql = match on_conflict {
                            OnConflict::Error => &t.insert,
                            OnConflict::Overwrite => &t.replace,
                        };
                        insert_row(self.db(), t, sql, &row, None)?;
                        stats.applied += 1;
                        if stats.applied % 65536 == 0 {
                            progress(&stats);
                        }
                    }
                    SnapItem::Commit { .. } => {
                        let c = cursor.take().expect("validated snapshot");
                        set_cursor(self.db(), &c)?;
                        self.commit()?;
                        open = false;
                        stats.batches += 1;
                        stats.cursor = Some(c);
                        self.committed = stats.clone();
                        progress(&stats);
                    }
                }
            }
            Ok(())
        })();
        if let Err(e) = result {
            if open {
                self.rollback();
            }
            return Err(e);
        }
        Ok(stats)
    }
}

/// The cursor stored in a target database (one source per target).
pub fn stored_cursor(conn: &Connection) -> Result<Option<Cursor>> {
    let mut st = conn
        .prepare_cached(&format!("SELECT source, sequence FROM {CURSOR}"))
        .map_err(db_err("cannot read the target's cursor"))?;
    let rows: Vec<(String, String)> = st
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .map_err(db_err("cannot read the target's cursor"))?
        .collect::<std::result::Result<_, _>>()
        .map_err(db_err("cannot read the target's cursor"))?;
    match rows.len() {
        0 => Ok(None),
        1 => {
            let (source, seq) = &rows[0];
            let seq = crate::wire::model::parse_sequence(seq).map_err(Error::data)?;
            Ok(Some(Cursor::new(source.clone(), seq)))
        }
        _ => Err(Error::state("the target holds cursors of several sources")),
    }
}

/// The cursor of a target database file, without creating anything.
pub fn read_cursor(path: &Path) -> Result<Option<Cursor>> {
    let conn = crate::sqlite_util::open_existing(path)?;
    if !table_exists(&conn, CURSOR)? {
        return Ok(None);
    }
    stored_cursor(&conn)
}

fn set_cursor(conn: &Connection, c: &Cursor) -> Result<()> {
    conn.execute(&format!("DELETE FROM {CURSOR}"), [])
        .map_err(db_err("cannot write the target's cursor"))?;
    conn.execute(
        &format!("INSERT INTO {CURSOR}(source, sequence) VALUES (?1, ?2)"),
        params![c.source, c.sequence().to_string()],
    )
    .map_err(db_err("cannot write the target's cursor"))?;
    Ok(())
}

/// SQLite's column affinity, chosen from a declared type by SQLite's rules
/// (datatype3.html, 3.1): the first of these substrings found decides.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Affinity {
    Integer,
    Text,
    /// No affinity: values are stored as given.
    Blob,
    Real,
    Numeric,
}

pub fn affinity(decl: &str) -> Affinity {
    let t = decl.to_ascii_uppercase();
    if t.contains("INT") {
        Affinity::Integer
    } else if t.contains("CHAR") || t.contains("CLOB") || t.contains("TEXT") {
        Affinity::Text
    } else if t.contains("BLOB") || t.trim().is_empty() {
        Affinity::Blob
    } else if t.contains("REAL") || t.contains("FLOA") || t.contains("DOUB") {
        Affinity::Real
    } else {
        Affinity::Numeric
    }
}

/// Words that begin a column constraint: never part of a declared type that
/// SQLite reports, so a stream whose type holds one is not pasted as is.
const CONSTRAINT_WORDS: &[&str] = &[
    "CONSTRAINT",
    "PRIMARY",
    "KEY",
    "NOT",
    "NULL",
    "UNIQUE",
    "CHECK",
    "DEFAULT",
    "COLLATE",
    "REFERENCES",
    "GENERATED",
    "AS",
    "ON",
    "AUTOINCREMENT",
];

/// Whether a declared type is a plain SQLite type name: words, then at most
/// `(n)` or `(n, m)`, e.g. `VARCHAR(10)`, `DOUBLE PRECISION`, `DECIMAL(10,2)`.
/// Anything else (quotes, punctuation, constraint words) is never pasted into
/// SQL text.
fn plain_type_name(decl: &str) -> bool {
    let (words, args) = match decl.split_once('(') {
        Some((w, rest)) => match rest.strip_suffix(')') {
            Some(a) => (w, Some(a)),
            None => return false,
        },
        None => (decl, None),
    };
    let word_ok = |w: &str| {
        let mut b = w.bytes();
        b.next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == b'_')
            && b.all(|c| c.is_ascii_alphanumeric() || c == b'_')
            && !CONSTRAINT_WORDS.iter().any(|k| k.eq_ignore_ascii_case(w))
    };
    let mut n = 0;
    for w in words.split_ascii_whitespace() {
        if !word_ok(w) {
            return false;
        }
        n += 1;
    }
    let number = |s: &str| {
        let s = s.trim();
        let s = s.strip_prefix(['+', '-']).unwrap_or(s);
        let (i, f) = s.split_once('.').unwrap_or((s, "0"));
        !i.is_empty()
            && !f.is_empty()
            && i.bytes().all(|c| c.is_ascii_digit())
            && f.bytes().all(|c| c.is_ascii_digit())
    };
    n > 0
        && args.is_none_or(|a| {
            let parts: Vec<&str> = a.split(',').collect();
            parts.len() <= 2 && parts.iter().all(|p| number(p))
        })
}

/// The declared type a projection column gets. Every choice keeps each value
/// in its class (DESIGN §9): a SQLite source's declared type is copied when it
/// is a plain type name (its affinity is the one the source already applied,
/// and applying an affinity twice changes nothing), else the type named after
/// its affinity; `ANY` (no affinity in a STRICT table, NUMERIC elsewhere) and
/// every column of other sources get no type, which means no affinity.
fn column_type(decl: &str, source: &str) -> String {
    let decl = decl.trim();
    if !source.starts_with("sqlite:") || decl.eq_ignore_ascii_case("ANY") {
        return String::new();
    }
    if plain_type_name(decl) {
        return decl.to_string();
    }
    match affinity(decl) {
        Affinity::Integer => "INTEGER",
        Affinity::Text => "TEXT",
        Affinity::Blob => "",
        Affinity::Real => "REAL",
        Affinity::Numeric => "NUMERIC",
    }
    .to_string()
}

/// Whether SQLite would read TEXT `s` as a number when applying a numeric
/// affinity (sqlite3AtoF accepting the whole string): optional white space,
/// a sign, digits with at most one point, an exponent with digits, white space.
pub fn looks_numeric(s: &str) -> bool {
    let space = |c: &u8| matches!(c, b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r');
    let b = s.as_bytes();
    let mut i = 0;
    while i < b.len() && space(&b[i]) {
        i += 1;
    }
    if i < b.len() && (b[i] == b'+' || b[i] == b'-') {
        i += 1;
    }
    let mut digits = 0;
    while i < b.len() && b[i].is_ascii_digit() {
        i += 1;
        digits += 1;
    }
    if i < b.len() && b[i] == b'.' {
        i += 1;
        while i < b.len() && b[i].is_ascii_digit() {
            i += 1;
            digits += 1;
        }
    }
    if i < b.len() && (b[i] == b'e' || b[i] == b'E') {
        i += 1;
        if i < b.len() && (b[i] == b'+' || b[i] == b'-') {
            i += 1;
        }
        let mut exp = 0;
        while i < b.len() && b[i].is_ascii_digit() {
            i += 1;
            exp += 1;
        }
        if exp == 0 {
            return false;
        }
    }
    while i < b.len() && space(&b[i]) {
        i += 1;
    }
    i == b.len() && digits > 0
}

/// Whether storing `v` in a column of affinity `a` keeps its class.
pub fn keeps_class(a: Affinity, v: &Value) -> bool {
    match (a, v) {
        (Affinity::Blob, _) | (_, Value::Null | Value::Blob(_)) => true,
        (Affinity::Text, Value::Text(_)) => true,
        (Affinity::Text, _) => false,
        (Affinity::Integer | Affinity::Numeric | Affinity::Real, Value::Text(s)) => {
            !looks_numeric(s)
        }
        (Affinity::Integer | Affinity::Numeric, Value::Integer(_)) => true,
        // An integral REAL becomes an INTEGER (sqlite3VdbeIntegerAffinity).
        (Affinity::Integer | Affinity::Numeric, Value::Real(r)) => {
            !(r.fract() == 0.0 && *r > i64::MIN as f64 && *r < i64::MAX as f64)
        }
        (Affinity::Real, Value::Real(_)) => true,
        (Affinity::Real, Value::Integer(_)) => false,
    }
}

/// Create the table if missing; add trailing columns the stream has and the
/// table lacks; refuse any other difference. Returns the table's SQL for the
/// stream's schema, with the target columns' affinities.
fn ensure_table(conn: &Connection, s: &Schema, source: &str) -> Result<TableSql> {
    if s.key.is_empty() {
        return Err(Error::data(format!(
            "table {:?} has no key; a SQLite projection identifies rows by their key",
            s.table
        )));
    }
    if s.table.starts_with(RESERVED_PREFIX) {
        return Err(Error::data(format!(
            "table name {:?} is reserved for MoonCDC",
            s.table
        )));
    }
    if !table_exists(conn, &s.table)? {
        let mut defs: Vec<String> = s
            .columns
            .iter()
            .map(|c| {
                let ty = column_type(&c.decl_type, source);
                let mut d = quote_ident(&c.name);
                if !ty.is_empty() {
                    d.push(' ');
                    d.push_str(&ty);
                }
                if !c.nullable {
                    d.push_str(" NOT NULL");
                }
                d
            })
            .collect();
        defs.push(format!(
            "PRIMARY KEY ({})",
            s.key
                .iter()
                .map(|k| quote_ident(k))
                .collect::<Vec<_>>()
                .join(", ")
        ));
        conn.execute_batch(&format!(
            "CREATE TABLE {} ({})",
            quote_ident(&s.table),
            defs.join(", ")
        ))
        .map_err(db_err("cannot create a target table"))?;
        let affinity = s
            .columns
            .iter()
            .map(|c| affinity(&column_type(&c.decl_type, source)))
            .collect();
        return Ok(TableSql::new(s.clone(), affinity));
    }
    let have = table_schema(conn, &s.table)?;
    let names = |sc: &Schema| {
        sc.columns
            .iter()
            .map(|c| c.name.clone())
            .collect::<Vec<_>>()
    };
    let (hn, sn) = (names(&have), names(s));
    if have.key != s.key || hn.len() > sn.len() || hn[..] != sn[..hn.len()] {
        return Err(Error::state(format!(
            "target table {:?} has columns {:?} and key {:?}, but the stream's schema has columns {:?} and key {:?}",
            s.table, hn, have.key, sn, s.key
        )));
    }
    let mut affinities: Vec<Affinity> = have
        .columns
        .iter()
        .map(|c| affinity(&c.decl_type))
        .collect();
    for c in &s.columns[hn.len()..] {
        let ty = column_type(&c.decl_type, source);
        conn.execute_batch(&format!(
            "ALTER TABLE {} ADD COLUMN {} {}",
            quote_ident(&s.table),
            quote_ident(&c.name),
            ty
        ))
        .map_err(db_err("cannot add a column to a target table"))?;
        affinities.push(affinity(&ty));
    }
    Ok(TableSql::new(s.clone(), affinities))
}

/// Apply the existing-rows policy to a table a snapshot is about to load.
fn empty_or_replace(conn: &Connection, table: &str, existing: ExistingRows) -> Result<()> {
    let q = quote_ident(table);
    match existing {
        ExistingRows::Keep => {}
        ExistingRows::Replace => {
            conn.execute(&format!("DELETE FROM {q}"), [])
                .map_err(db_err("cannot empty a target table"))?;
        }
        ExistingRows::Refuse => {
            let held: bool = conn
                .query_row(&format!("SELECT EXISTS (SELECT 1 FROM {q})"), [], |r| {
                    r.get(0)
                })
                .map_err(db_err("cannot read a target table"))?;
            if held {
                return Err(super::existing_rows_error(table));
            }
        }
    }
    Ok(())
}

fn existing_table(conn: &Connection, table: &str) -> Result<TableSql> {
    if !table_exists(conn, table)? {
        return Err(Error::data(format!(
            "table {table:?} is not in the target and the stream carries no schema for it"
        )));
    }
    let s = table_schema(conn, table)?;
    let affinity = s.columns.iter().map(|c| affinity(&c.decl_type)).collect();
    Ok(TableSql::new(s, affinity))
}

fn insert_row(
    conn: &Connection,
    t: &TableSql,
    sql: &str,
    row: &Row,
    seq: Option<u128>,
) -> Result<()> {
    let mut st = conn
        .prepare_cached(sql)
        .map_err(db_err("cannot prepare an insert"))?;
    st.execute(params_from_iter(row.iter().map(Bind))).map_err(|e| {
        let at = match seq {
            Some(s) => format!("event {s}"),
            None => "snapshot row".to_string(),
        };
        if is_constraint(&e) {
            Error::state(format!(
                "{at}: insert into table {:?} of a key the target already holds, or a value its constraints refuse; the target diverges from the source (--on-conflict overwrite forces it)",
                t.schema.table
            ))
            .with_source(e)
        } else {
            Error::database(format!("{at}: cannot insert into table {:?}", t.schema.table), e)
        }
    })?;
    Ok(())
}

fn stored_row(conn: &Connection, t: &TableSql, key: &[&Value]) -> Result<Option<Row>> {
    let mut st = conn
        .prepare_cached(&t.select)
        .map_err(db_err("cannot prepare a lookup"))?;
    let n = t.schema.columns.len();
    st.query_row(params_from_iter(key.iter().map(|v| Bind(v))), |r| {
        Ok(row_values(r, 0, n))
    })
    .optional()
    .map_err(db_err("cannot look up a row"))?
    .transpose()
    .map_err(|e| Error::data(format!("stored row of table {:?}: {e}", t.schema.table)))
}

/// What applying an event did.
enum Applied {
    Done,
    /// A key-changing update whose new key another row still holds (legal
    /// mid-transaction under a deferred key, e.g. a swap): the old row is gone
    /// and the new one waits until its key is free.
    Parked(Row),
}

fn apply_event(
    conn: &Connection,
    t: &TableSql,
    e: &Event,
    on_conflict: OnConflict,
) -> Result<Applied> {
    let diverge = |what: &str| {
        Error::state(format!(
            "event {} ({} on table {:?}): {what}; the target diverges from the source (--on-conflict overwrite forces it)",
            e.sequence,
            e.operation.as_str(),
            e.table
        ))
    };
    match (e.operation, on_conflict) {
        (Operation::Insert, OnConflict::Error) => insert_row(
            conn,
            t,
            &t.insert,
            e.after.as_ref().expect("insert"),
            Some(e.sequence),
        )
        .map(|_| Applied::Done),
        (Operation::Insert, OnConflict::Overwrite) => insert_row(
            conn,
            t,
            &t.replace,
            e.after.as_ref().expect("insert"),
            Some(e.sequence),
        )
        .map(|_| Applied::Done),
        (Operation::Update | Operation::Delete, OnConflict::Error) => {
            let before = e.before.as_ref().expect("before image");
            let key = t.key_of(before);
            match stored_row(conn, t, &key)? {
                None => return Err(diverge("no stored row has the before image's key")),
                Some(row) if !same_row(&row, before) => {
                    return Err(diverge("the stored row differs from the before image"))
                }
                Some(_) => {}
            }
            match &e.after {
                None => {
                    let mut st = conn
                        .prepare_cached(&t.delete)
                        .map_err(db_err("cannot prepare a delete"))?;
                    st.execute(params_from_iter(key.iter().map(|v| Bind(v))))
                        .map_err(db_err("cannot delete a row"))?;
                }
                Some(after) => {
                    let key_changes = t.key_of(after).iter().zip(&key).any(|(a, b)| !a.same(b));
                    let mut st = conn
                        .prepare_cached(&t.update)
                        .map_err(db_err("cannot prepare an update"))?;
                    let binds = after.iter().chain(key.iter().copied()).map(Bind);
                    match st.execute(params_from_iter(binds)) {
                        Ok(_) => {}
                        Err(err)
                            if is_constraint(&err)
                                && key_changes
                                && stored_row(conn, t, &t.key_of(after))?.is_some() =>
                        {
                            let mut del = conn
                                .prepare_cached(&t.delete)
                                .map_err(db_err("cannot prepare a delete"))?;
                            del.execute(params_from_iter(key.iter().map(|v| Bind(v))))
                                .map_err(db_err("cannot delete a row"))?;
                            return Ok(Applied::Parked(after.clone()));
                        }
                        Err(err) if is_constraint(&err) => {
                            return Err(diverge("a constraint refuses the new row").with_source(err))
                        }
                        Err(err) => return Err(Error::database("cannot update a row", err)),
                    }
                }
            }
            Ok(Applied::Done)
        }
        (Operation::Update | Operation::Delete, OnConflict::Overwrite) => {
            let before = e.before.as_ref().expect("before image");
            let key = t.key_of(before);
            let mut st = conn
                .prepare_cached(&t.delete)
                .map_err(db_err("cannot prepare a delete"))?;
            st.execute(params_from_iter(key.iter().map(|v| Bind(v))))
                .map_err(db_err("cannot delete a row"))?;
            if let Some(after) = &e.after {
                insert_row(conn, t, &t.replace, after, Some(e.sequence))?;
            }
            Ok(Applied::Done)
        }
    }
}

/// Insert parked rows whose keys are free now; keep the others.
fn retry_parked(
    conn: &Connection,
    tables: &HashMap<String, TableSql>,
    parked: &mut Vec<(String, Row, u128)>,
) -> Result<()> {
    let mut i = 0;
    while i < parked.len() {
        let (table, row, _) = &parked[i];
        let t = &tables[table];
        if stored_row(conn, t, &t.key_of(row))?.is_none() {
            insert_row(conn, t, &t.insert, row, Some(parked[i].2))?;
            parked.swap_remove(i);
        } else {
            i += 1;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// What SQLite itself stores for `v` in a column declared `decl`.
    fn stored_class(conn: &Connection, decl: &str, v: &Value) -> String {
        conn.execute_batch(&format!("DROP TABLE IF EXISTS a; CREATE TABLE a(x {decl})"))
            .unwrap();
        conn.execute("INSERT INTO a VALUES (?1)", [Bind(v)])
            .unwrap();
        conn.query_row("SELECT typeof(x) FROM a", [], |r| r.get(0))
            .unwrap()
    }

    fn class_of(v: &Value) -> &'static str {
        match v {
            Value::Null => "null",
            Value::Integer(_) => "integer",
            Value::Real(_) => "real",
            Value::Text(_) => "text",
            Value::Blob(_) => "blob",
        }
    }

    const DECLS: &[&str] = &["INTEGER", "TEXT", "", "REAL", "NUMERIC", "ANY", "BOOLEAN"];

    fn value() -> impl Strategy<Value = Value> {
        prop_oneof![
            Just(Value::Null),
            any::<i64>().prop_map(Value::Integer),
            any::<f64>()
                .prop_filter("finite", |x| x.is_finite())
                .prop_map(Value::Real),
            (-1e6f64..1e6).prop_map(|x| Value::Real(x.round())),
            "[ \t\n\u{b}\u{c}\r+\\-.eE0-9x]{0,8}".prop_map(Value::Text),
            ".{0,6}".prop_map(Value::Text),
            proptest::collection::vec(any::<u8>(), 0..4).prop_map(Value::Blob),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

        /// `keeps_class` agrees with SQLite on every affinity.
        #[test]
        fn keeps_class_agrees_with_sqlite(v in value(), d in 0..DECLS.len()) {
            let conn = Connection::open_in_memory().unwrap();
            let decl = DECLS[d];
            let kept = stored_class(&conn, decl, &v) == class_of(&v);
            prop_assert_eq!(keeps_class(affinity(decl), &v), kept, "{:?} in {}", v, decl);
        }
    }

    #[test]
    fn edge_values_agree_with_sqlite() {
        let conn = Connection::open_in_memory().unwrap();
        let texts = [
            "123",
            "1.50",
            " 7",
            "7 ",
            "\t7\n",
            "1e5",
            "1e",
            "1e+",
            ".5",
            "5.",
            ".",
            "-",
            "+1",
            "- 1",
            "0x10",
            "1e400",
            "--1",
            "1.2.3",
            "",
            " ",
            "\u{a0}1",
            "1\u{0}",
            "9223372036854775808",
            "inf",
            "NaN",
        ];
        let reals = [
            0.0,
            -0.0,
            2.0,
            -2.0,
            0.5,
            9.223372036854776e18,
            -9.223372036854776e18,
            9.223372036854775e18,
            1e300,
        ];
        let mut values: Vec<Value> = texts.iter().map(|t| Value::Text(t.to_string())).collect();
        values.extend(reals.iter().map(|&r| Value::Real(r)));
        values.extend([i64::MIN, -1, 0, i64::MAX].map(Value::Integer));
        for decl in DECLS {
            for v in &values {
                let kept = stored_class(&conn, decl, v) == class_of(v);
                assert_eq!(keeps_class(affinity(decl), v), kept, "{v:?} in {decl:?}");
            }
        }
    }

    #[test]
    fn declared_types_are_copied_only_when_plain() {
        let s = "sqlite:x";
        for plain in [
            "INTEGER",
            "VARCHAR(10)",
            "DOUBLE PRECISION",
            "DECIMAL(10, 2)",
            "decimal(-1.5,+2)",
            "UNSIGNED BIG INT",
            "DATETIME",
        ] {
            assert_eq!(column_type(plain, s), plain);
        }
        for (odd, mapped) in [
            ("INTEGER); DROP TABLE users; --", "INTEGER"),
            ("TEXT, evil INTEGER DEFAULT 666", "INTEGER"),
            ("'it''s text'", "TEXT"),
            ("INTEGER PRIMARY KEY", "INTEGER"),
            ("TEXT COLLATE NOCASE", "TEXT"),
            ("\"quoted\"", "NUMERIC"),
            ("VARCHAR(10", "TEXT"),
            ("REAL(1,2,3)", "REAL"),
            ("[odd] BLOB", ""),
            ("ANY", ""),
            ("any", ""),
        ] {
            assert_eq!(column_type(odd, s), mapped, "{odd:?}");
        }
        assert_eq!(column_type("INTEGER", "postgres:1/db/slot"), "");
    }
}
