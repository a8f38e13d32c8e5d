//! Positions, events and schemas (docs/FORMAT.md §3–§5); events themselves
//! are in `event.rs`.
//!
//! A cursor is `{"source":"<identity>","sequence":"<n>"}`: one source's stream
//! and the position after which the next change comes. Sequences are canonical
//! decimal strings of unsigned integers below 2^128, compared numerically;
//! event sequences are positive. An event is
//! `{"sequence":"17","table":"users","operation":"update","before":[…],"after":[…]}`:
//! `insert` has only `after`, `delete` only `before`, `update` both. A schema is
//! `{"table":"users","columns":[{"name":"id","type":"INTEGER","nullable":false}],"key":["id"]}`.
//! Unknown members are errors everywhere.

use super::strict::Obj;
use serde::de::{self, Deserializer, Visitor};
use serde::Deserialize;
use std::fmt;

/// A position in one source's stream.
pub type Sequence = u128;

/// Parse a canonical unsigned decimal below 2^128.
pub fn parse_sequence(s: &str) -> Result<Sequence, String> {
    let ok = !s.is_empty()
        && s.len() <= 39
        && s.bytes().all(|b| b.is_ascii_digit())
        && (s == "0" || !s.starts_with('0'));
    if !ok {
        return Err(format!(
            "sequence {:?} is not a canonical unsigned decimal (0|[1-9][0-9]*) below 2^128",
            truncate(s)
        ));
    }
    s.parse::<u128>()
        .map_err(|_| format!("sequence {:?} is not below 2^128", truncate(s)))
}

fn truncate(s: &str) -> String {
    s.chars().take(48).collect()
}

/// `Sequence` as a JSON string, decoded without allocation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Seq(pub Sequence);

impl<'de> Deserialize<'de> for Seq {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Seq;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a decimal string sequence")
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<Seq, E> {
                parse_sequence(s).map(Seq).map_err(E::custom)
            }
        }
        d.deserialize_str(V)
    }
}

/// A count (`"count":"2"`): canonical decimal within u64.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Count(pub u64);

impl<'de> Deserialize<'de> for Count {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Count;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a decimal string count")
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<Count, E> {
                let ok = !s.is_empty()
                    && s.bytes().all(|b| b.is_ascii_digit())
                    && (s == "0" || !s.starts_with('0'));
                match s.parse::<u64>() {
                    Ok(n) if ok => Ok(Count(n)),
                    _ => Err(E::custom(format!(
                        "count {:?} is not a canonical unsigned decimal (0|[1-9][0-9]*) within 64 bits",
                        truncate(s)
                    ))),
                }
            }
        }
        d.deserialize_str(V)
    }
}

/// One source's stream position.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Cursor {
    pub source: String,
    seq: Seq,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawCursor {
    source: String,
    sequence: Seq,
}

impl<'de> Deserialize<'de> for Cursor {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let Obj(r) = Obj::<RawCursor>::deserialize(d)?;
        Ok(Cursor {
            source: r.source,
            seq: r.sequence,
        })
    }
}

impl Cursor {
    pub fn new(source: impl Into<String>, sequence: Sequence) -> Self {
        Cursor {
            source: source.into(),
            seq: Seq(sequence),
        }
    }

    pub fn sequence(&self) -> Sequence {
        self.seq.0
    }

    pub fn set_sequence(&mut self, s: Sequence) {
        self.seq = Seq(s);
    }

    /// Parse cursor JSON text, e.g. from `--after`.
    pub fn parse_json(text: &str) -> Result<Cursor, String> {
        serde_json::from_str(text).map_err(|e| format!("bad cursor JSON: {e}"))
    }

    pub fn to_json(&self) -> String {
        let mut out = Vec::new();
        write_cursor(&mut out, self);
        String::from_utf8(out).expect("JSON output is UTF-8")
    }

    /// The position in the source's own terms (docs/FORMAT.md, "Cursors"):
    /// a PostgreSQL sequence is its LSN times 2^64 plus the event's ordinal
    /// in its transaction, shown as `LSN 0/3032AC9` (`, event 5` inside a
    /// transaction), the form `capture status` and the server use; other
    /// sources' sequences are their own position already (`None`).
    pub fn position(&self) -> Option<String> {
        if !self.source.starts_with("postgres:") {
            return None;
        }
        let seq = self.sequence();
        let lsn = (seq >> 64) as u64;
        let ordinal = seq as u64;
        let mut s = format!("LSN {:X}/{:X}", lsn >> 32, lsn & 0xFFFF_FFFF);
        if ordinal > 0 {
            s.push_str(&format!(", event {ordinal}"));
        }
        Some(s)
    }
}

impl fmt::Display for Cursor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_json())
    }
}

/// One column of a table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Column {
    pub name: String,
    pub decl_type: String,
    pub nullable: bool,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawColumn {
    name: String,
    #[serde(rename = "type")]
    decl_type: String,
    nullable: bool,
}

impl<'de> Deserialize<'de> for Column {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let Obj(r) = Obj::<RawColumn>::deserialize(d)?;
        Ok(Column {
            name: r.name,
            decl_type: r.decl_type,
            nullable: r.nullable,
        })
    }
}

/// The schemas in force after schema records (drained from `records`):
/// each replaces its table's schema, or adds the table. A target uses it
/// for records before an event it already holds (it made those changes when
/// it applied them); a source, for what its next header describes.
pub fn put_in_force(in_force: &mut Vec<Schema>, records: &mut Vec<SchemaChange>) {
    for ch in records.drain(..) {
        match in_force.iter_mut().find(|s| s.table == ch.schema.table) {
            Some(s) => *s = ch.schema,
            None => in_force.push(ch.schema),
        }
    }
}

/// A table's shape: columns in row order and the key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Schema {
    pub table: String,
    pub columns: Vec<Column>,
    pub key: Vec<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSchema {
    table: String,
    columns: Vec<Column>,
    key: Vec<String>,
}

impl<'de> Deserialize<'de> for Schema {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let Obj(r) = Obj::<RawSchema>::deserialize(d)?;
        Ok(Schema {
            table: r.table,
            columns: r.columns,
            key: r.key,
        })
    }
}

impl Schema {
    /// Column names unique, key columns exist and are unique. An empty key
    /// is a table without a primary key: valid on the wire, refused by the
    /// targets and tools that need a key to identify rows.
    pub fn check(&self) -> Result<(), String> {
        let mut seen = std::collections::HashSet::new();
        for c in &self.columns {
            if !seen.insert(c.name.as_str()) {
                return Err(format!(
                    "schema of table {:?} names column {:?} twice",
                    self.table, c.name
                ));
            }
        }
        let mut keys = std::collections::HashSet::new();
        for k in &self.key {
            if !seen.contains(k.as_str()) {
                return Err(format!(
                    "schema of table {:?} has key column {:?} that is not among its columns",
                    self.table, k
                ));
            }
            if !keys.insert(k.as_str()) {
                return Err(format!(
                    "schema of table {:?} names key column {:?} twice",
                    self.table, k
                ));
            }
        }
        Ok(())
    }

    /// Row positions of the key columns, in key order.
    pub fn key_indices(&self) -> Vec<usize> {
        self.key
            .iter()
            .map(|k| {
                self.columns
                    .iter()
                    .position(|c| &c.name == k)
                    .expect("checked schema")
            })
            .collect()
    }
}

/// A table's schema changing inside a batch (a `schema` record): from this
/// position on, the table's events have `schema`'s columns. `renamed` names
/// the columns the change renamed (old name → new name); every other column
/// of the old schema missing from the new one was dropped, every other new
/// column was added. A target applies the change together with the event
/// after it, and skips it when it already holds that event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SchemaChange {
    pub schema: Schema,
    pub renamed: Vec<Rename>,
}

/// One renamed column.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rename {
    pub from: String,
    pub to: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRename {
    from: String,
    to: String,
}

impl<'de> Deserialize<'de> for Rename {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let Obj(r) = Obj::<RawRename>::deserialize(d)?;
        Ok(Rename {
            from: r.from,
            to: r.to,
        })
    }
}

impl SchemaChange {
    /// Check the change against the schema in force before it (`None`: the
    /// table is new to the batch).
    pub fn check(&self, old: Option<&Schema>) -> Result<(), String> {
        self.schema.check()?;
        let t = &self.schema.table;
        let mut froms = std::collections::HashSet::new();
        let mut tos = std::collections::HashSet::new();
        for r in &self.renamed {
            let Some(old) = old else {
                return Err(format!(
                    "schema change of table {t:?} renames column {:?}, but the table has no schema before it",
                    r.from
                ));
            };
            if !old.columns.iter().any(|c| c.name == r.from) {
                return Err(format!(
                    "schema change of table {t:?} renames column {:?}, which the table did not have",
                    r.from
                ));
            }
            if !self.schema.columns.iter().any(|c| c.name == r.to) {
                return Err(format!(
                    "schema change of table {t:?} renames column {:?} to {:?}, which is not among its new columns",
                    r.from, r.to
                ));
            }
            if !froms.insert(r.from.as_str()) || !tos.insert(r.to.as_str()) {
                return Err(format!(
                    "schema change of table {t:?} names a column in two renames ({:?} to {:?})",
                    r.from, r.to
                ));
            }
        }
        Ok(())
    }

    /// For each new column, the position in `old` its values come from
    /// (`None`: an added column).
    pub fn sources(&self, old: &Schema) -> Vec<Option<usize>> {
        let mut from = vec![None; self.schema.columns.len()];
        for (i, c) in old.columns.iter().enumerate() {
            if let Some(n) = self.new_name(&c.name) {
                if let Some(j) = self.schema.columns.iter().position(|c| c.name == n) {
                    from[j] = Some(i);
                }
            }
        }
        from
    }

    /// The new name of each old column (`None`: dropped).
    pub fn new_name<'a>(&'a self, old: &'a str) -> Option<&'a str> {
        if let Some(r) = self.renamed.iter().find(|r| r.from == old) {
            return Some(&r.to);
        }
        let renamed_to = self.renamed.iter().any(|r| r.to == old);
        let kept = self.schema.columns.iter().any(|c| c.name == old);
        (kept && !renamed_to).then_some(old)
    }
}

/// The kind of a source. It decides how a stream's declared types read
/// (SQLite declared types and affinities, PostgreSQL `format_type` names)
/// and how its sequences map to other positions (a ClickHouse version).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SourceKind {
    Sqlite,
    Postgres,
    /// A stream made by anything else (a test, a hand-written file): its
    /// declared types are not trusted to mean anything.
    Other,
}

impl SourceKind {
    /// The kind a stream's source identity names (`sqlite:<uuid>`,
    /// `postgres:<sysid>/<db>/<slot>`): the one place that reads it, since
    /// the wire carries nothing else.
    pub fn of_identity(identity: &str) -> SourceKind {
        if identity.starts_with("sqlite:") {
            SourceKind::Sqlite
        } else if identity.starts_with("postgres:") {
            SourceKind::Postgres
        } else {
            SourceKind::Other
        }
    }
}

pub use super::lines::{
    write_cursor, write_event, write_message_line, write_schema, write_schema_change_line,
    write_schemas, write_seq,
};

pub use super::event::{Event, Operation, Row};
pub use super::message::LogicalMessage;
