//! Snapshots (docs/FORMAT.md §8).
//!
//! JSONL `mooncdc.snapshot-jsonl.v1`:
//!
//! ```text
//! {"kind":"header","format":"mooncdc.snapshot-jsonl.v1","cursor":C,"schemas":[…]}
//! {"kind":"row","table":"users","row":[…]}
//! {"kind":"commit","count":"1"}
//! ```
//!
//! JSON `mooncdc.snapshot.v1`:
//! `{"format":"mooncdc.snapshot.v1","cursor":C,"tables":[{"schema":{…},"rows":[[…],…]}]}`.
//!
//! The cursor is the position the snapshot is consistent with. Errors: a row
//! for a table not in the header, a wrong width, a NULL key value, a duplicate
//! key, rows out of key order (docs/FORMAT.md §9), a table's rows not together, a
//! missing commit or a wrong count. Each table's rows come together in strictly
//! increasing key order, so the checks need only the previous row's key.

use super::batch::read_document;
use super::jsonl::{json_error, parse_record, Limits, LineReader, RawRecord, RecordKind};
use super::model::{Cursor, Row, Schema};
use super::strict::Obj;
use super::value::{key_cmp, Value};
use crate::error::{Error, Result};
use serde::Deserialize;
use std::collections::{HashMap, HashSet};
use std::io::BufRead;

pub const JSONL_FORMAT: &str = "mooncdc.snapshot-jsonl.v1";
pub const JSON_FORMAT: &str = "mooncdc.snapshot.v1";

/// One validated record of a snapshot.
#[derive(Debug, Clone, PartialEq)]
pub enum SnapItem {
    Header {
        cursor: Cursor,
        schemas: Vec<Schema>,
    },
    Row {
        table: String,
        row: Row,
    },
    Commit {
        count: u64,
    },
}

/// The snapshot rules as a state machine.
#[derive(Default)]
pub struct SnapshotValidator {
    tables: HashMap<String, (usize, Vec<usize>)>,
    header_seen: bool,
    committed: bool,
    current: Option<String>,
    last_key: Option<Vec<Value>>,
    done: HashSet<String>,
    count: u64,
}

impl SnapshotValidator {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn header(&mut self, schemas: &[Schema]) -> Result<()> {
        if self.header_seen {
            return Err(Error::data(
                "second header (a snapshot has one header, first)",
            ));
        }
        self.header_seen = true;
        for s in schemas {
            s.check().map_err(Error::data)?;
            if self
                .tables
                .insert(s.table.clone(), (s.columns.len(), s.key_indices()))
                .is_some()
            {
                return Err(Error::data(format!(
                    "schemas name table {:?} twice",
                    s.table
                )));
            }
        }
        Ok(())
    }

    pub fn row(&mut self, table: &str, row: &[Value]) -> Result<()> {
        if !self.header_seen {
            return Err(Error::data(
                "row before the header (the header must come first)",
            ));
        }
        if self.committed {
            return Err(Error::data("row after the commit (the commit is last)"));
        }
        let Some((width, key)) = self.tables.get(table) else {
            return Err(Error::data(format!(
                "row for table {table:?}, which is not in the header's schemas"
            )));
        };
        if row.len() != *width {
            return Err(Error::data(format!(
                "row has {} values but table {table:?} has {width} columns",
                row.len()
            )));
        }
        if row.iter().any(Value::is_unchanged) {
            return Err(Error::data(format!(
                "row of table {table:?} holds an unchanged value (a snapshot row is whole; only an update's after image may)"
            )));
        }
        let k: Vec<Value> = key.iter().map(|&i| row[i].clone()).collect();
        if let Some(i) = k.iter().position(Value::is_null) {
            return Err(Error::data(format!(
                "row of table {table:?} has a NULL key value (key column {})",
                i + 1
            )));
        }
        if self.current.as_deref() != Some(table) {
            if self.done.contains(table) {
                return Err(Error::data(format!(
                    "rows of table {table:?} are not together (each table's rows must be contiguous)"
                )));
            }
            if let Some(prev) = self.current.take() {
                self.done.insert(prev);
            }
            self.current = Some(table.to_string());
            self.last_key = None;
        }
        if key.is_empty() {
            // A table without a key has no order to check.
            self.count += 1;
            return Ok(());
        }
        if let Some(prev) = &self.last_key {
            match key_cmp(prev, &k) {
                std::cmp::Ordering::Less => {}
                std::cmp::Ordering::Equal => {
                    return Err(Error::data(format!(
                        "duplicate key in table {table:?} (rows must have distinct keys)"
                    )))
                }
                std::cmp::Ordering::Greater => {
                    return Err(Error::data(format!(
                        "rows of table {table:?} are not in increasing key order"
                    )))
                }
            }
        }
        self.last_key = Some(k);
        self.count += 1;
        Ok(())
    }

    pub fn commit(&mut self, count: u64) -> Result<()> {
        if !self.header_seen {
            return Err(Error::data("commit before the header"));
        }
        if self.committed {
            return Err(Error::data("second commit"));
        }
        if count != self.count {
            return Err(Error::data(format!(
                "commit count {count} does not match the {} rows of the snapshot",
                self.count
            )));
        }
        self.committed = true;
        Ok(())
    }

    pub fn finish(&self) -> Result<()> {
        if !self.header_seen {
            return Err(Error::data("input holds no snapshot header"));
        }
        if !self.committed {
            return Err(Error::data(
                "input ends before the commit record (truncated snapshot)",
            ));
        }
        Ok(())
    }
}

fn snapshot_item(rec: RawRecord) -> Result<SnapItem> {
    match rec.kind {
        RecordKind::Header => {
            rec.check_members("snapshot header", &["format", "cursor", "schemas"], &[])?;
            let format = rec.format.unwrap_or_default();
            if format != JSONL_FORMAT {
                return Err(Error::data(format!(
                    "header format {format:?} is not {JSONL_FORMAT:?}"
                )));
            }
            Ok(SnapItem::Header {
                cursor: rec.cursor.expect("checked"),
                schemas: rec.schemas.expect("checked"),
            })
        }
        RecordKind::Row => {
            rec.check_members("row", &["table", "row"], &[])?;
            Ok(SnapItem::Row {
                table: rec.table.expect("checked"),
                row: rec.row.expect("checked"),
            })
        }
        RecordKind::Commit => {
            rec.check_members("snapshot commit", &["count"], &[])?;
            Ok(SnapItem::Commit {
                count: rec.count.expect("checked").0,
            })
        }
        RecordKind::Event => Err(Error::data(
            "event records belong to batch streams, not snapshots",
        )),
        RecordKind::Schema => Err(Error::data(
            "schema records belong to batch streams, not snapshots",
        )),
        RecordKind::Message => Err(Error::data(
            "message records belong to batch streams, not snapshots",
        )),
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTable {
    schema: Schema,
    rows: Vec<Row>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSnapshotDoc {
    format: String,
    cursor: Cursor,
    tables: Vec<Obj<RawTable>>,
}

/// Reads a snapshot (JSONL or JSON), yielding only validated items; the
/// commit item comes only when the whole snapshot has passed.
pub struct SnapshotReader<R> {
    src: SnapSrc<R>,
    validator: SnapshotValidator,
    buf: Vec<u8>,
    finished: bool,
}

enum SnapSrc<R> {
    Lines(LineReader<R>),
    /// Lines read and decoded ahead on a thread of their own.
    Ahead(super::ahead::Ahead<SnapItem>),
    Doc {
        name: String,
        items: std::vec::IntoIter<SnapItem>,
    },
}

impl<R: BufRead> SnapshotReader<R> {
    pub fn jsonl(inner: R, name: impl Into<String>, limits: Limits) -> Self {
        SnapshotReader {
            src: SnapSrc::Lines(LineReader::new(inner, name, limits)),
            validator: SnapshotValidator::new(),
            buf: Vec::new(),
            finished: false,
        }
    }

    /// A JSON snapshot document, read whole (it counts as one line for the cap).
    pub fn json(mut inner: R, name: impl Into<String>, limits: Limits) -> Result<Self> {
        let name = name.into();
        let text = read_document(&mut inner, &name, limits)?;
        let Obj(doc) = serde_json::from_slice::<Obj<RawSnapshotDoc>>(&text)
            .map_err(|e| json_error(e).in_file(&format!("{name} (JSON snapshot)")))?;
        if doc.format != JSON_FORMAT {
            return Err(Error::data(format!(
                "snapshot format {:?} is not {JSON_FORMAT:?}",
                doc.format
            ))
            .in_file(&name));
        }
        let tables: Vec<RawTable> = doc.tables.into_iter().map(|Obj(t)| t).collect();
        let schemas: Vec<Schema> = tables.iter().map(|t| t.schema.clone()).collect();
        let mut items = vec![SnapItem::Header {
            cursor: doc.cursor,
            schemas,
        }];
        let mut count = 0u64;
        for t in tables {
            for row in t.rows {
                count += 1;
                items.push(SnapItem::Row {
                    table: t.schema.table.clone(),
                    row,
                });
            }
        }
        items.push(SnapItem::Commit { count });
        Ok(SnapshotReader {
            src: SnapSrc::Doc {
                name,
                items: items.into_iter(),
            },
            validator: SnapshotValidator::new(),
            buf: Vec::new(),
            finished: false,
        })
    }

    pub fn name(&self) -> &str {
        match &self.src {
            SnapSrc::Lines(l) => l.name(),
            SnapSrc::Doc { name, .. } => name,
            SnapSrc::Ahead(a) => a.name(),
        }
    }

    /// Where the reader is, for messages: the input's name and the last line read.
    pub fn locate(&self, e: Error) -> Error {
        match &self.src {
            SnapSrc::Lines(l) => l.error(e),
            SnapSrc::Ahead(a) => a.locate(e),
            SnapSrc::Doc { name, .. } => e.in_file(&format!("{name} (JSON snapshot)")),
        }
    }

    /// Read and decode ahead on a thread of its own, so that decoding
    /// overlaps the caller's work (a target's writes); items, errors and
    /// their places are the same as without (see `wire::ahead`). A JSON
    /// document is read whole anyway and is returned unchanged.
    pub fn read_ahead(self) -> Result<Self>
    where
        R: Send + 'static,
    {
        if !matches!(self.src, SnapSrc::Lines(_)) {
            return Ok(self);
        }
        let name = self.name().to_string();
        let at = match &self.src {
            SnapSrc::Lines(l) => l.line_number(),
            _ => 0,
        };
        let mut inner = self;
        let ahead = super::ahead::Ahead::spawn(name, at, move |_| {
            Ok(inner.next_item()?.map(|item| super::ahead::Step {
                line: match &inner.src {
                    SnapSrc::Lines(l) => l.line_number(),
                    _ => 0,
                },
                bytes: inner.buf.len() + 1,
                // The commit at once: a target stores its cursor then, even
                // when the input stays open after it.
                flush: matches!(item, SnapItem::Commit { .. }),
                item,
            }))
        })?;
        Ok(SnapshotReader {
            src: SnapSrc::Ahead(ahead),
            validator: SnapshotValidator::new(),
            buf: Vec::new(),
            finished: false,
        })
    }

    fn check(&mut self, item: &SnapItem) -> Result<()> {
        match item {
            SnapItem::Header { schemas, .. } => self.validator.header(schemas),
            SnapItem::Row { table, row } => self.validator.row(table, row),
            SnapItem::Commit { count } => self.validator.commit(*count),
        }
    }

    /// Hand back an item the caller is done with: when reading ahead it is
    /// dropped on the reading thread, where it was made.
    pub fn recycle(&mut self, item: SnapItem) {
        if let SnapSrc::Ahead(a) = &mut self.src {
            a.recycle(item);
        }
    }

    /// The next validated item, or `None` after the commit at a clean end.
    pub fn next_item(&mut self) -> Result<Option<SnapItem>> {
        if self.finished {
            return Ok(None);
        }
        match &mut self.src {
            // Validated on the thread that read it.
            SnapSrc::Ahead(a) => {
                let item = a.next()?;
                if item.is_none() {
                    self.finished = true;
                }
                Ok(item)
            }
            SnapSrc::Lines(lines) => {
                if !lines.next_line(&mut self.buf)? {
                    self.finished = true;
                    let name = lines.name().to_string();
                    return self
                        .validator
                        .finish()
                        .map(|_| None)
                        .map_err(|e| e.in_file(&name));
                }
                let item = match super::fast::row_line(&self.buf) {
                    Some((table, row)) => SnapItem::Row { table, row },
                    None => match parse_record(&self.buf).and_then(snapshot_item) {
                        Ok(i) => i,
                        Err(e) => return Err(lines.error(e)),
                    },
                };
                if let Err(e) = self.check(&item) {
                    let SnapSrc::Lines(lines) = &self.src else {
                        unreachable!("reading lines")
                    };
                    return Err(lines.error(e));
                }
                Ok(Some(item))
            }
            SnapSrc::Doc { name, items } => {
                let name = name.clone();
                match items.next() {
                    None => {
                        self.finished = true;
                        self.validator
                            .finish()
                            .map(|_| None)
                            .map_err(|e| e.in_file(&name))
                    }
                    Some(item) => {
                        self.check(&item)
                            .map_err(|e| e.in_file(&format!("{name} (JSON snapshot)")))?;
                        Ok(Some(item))
                    }
                }
            }
        }
    }
}

pub use super::snapshot_write::*;
