//! Positions, events and schemas (docs/FORMAT.md §3–§5).
//!
//! A cursor is `{"source":"<identity>","sequence":"<n>"}`: one source's stream
//! and the position after which the next change comes. Sequences are canonical
//! decimal strings of unsigned integers below 2^128, compared numerically;
//! event sequences are positive. An event is
//! `{"sequence":"17","table":"users","operation":"update","before":[…],"after":[…]}`:
//! `insert` has only `after`, `delete` only `before`, `update` both. A schema is
//! `{"table":"users","columns":[{"name":"id","type":"INTEGER","nullable":false}],"key":["id"]}`.
//! Unknown members are errors everywhere.

use super::strict::{one_of, present, Obj};
use super::value::Value;
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
}

impl fmt::Display for Cursor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_json())
    }
}

/// The change an event records.
///
/// `Truncate` empties the whole table (one event per table, no images); its
/// flags record PostgreSQL's `CASCADE` and `RESTART IDENTITY`. It is an
/// addition to `mooncdc.jsonl.v1`: readers that predate it refuse the event
/// (`unknown operation "truncate"`), the safe failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operation {
    Insert,
    Update,
    Delete,
    Truncate {
        cascade: bool,
        restart_identity: bool,
    },
}

/// The operation's name alone, as the wire spells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum OpName {
    Insert,
    Update,
    Delete,
    Truncate,
}

impl<'de> Deserialize<'de> for OpName {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        one_of(
            d,
            "operation",
            &["insert", "update", "delete", "truncate"],
            &[
                OpName::Insert,
                OpName::Update,
                OpName::Delete,
                OpName::Truncate,
            ],
        )
    }
}

impl Operation {
    pub fn as_str(self) -> &'static str {
        match self {
            Operation::Insert => "insert",
            Operation::Update => "update",
            Operation::Delete => "delete",
            Operation::Truncate { .. } => "truncate",
        }
    }

    /// A plain `TRUNCATE` (neither `CASCADE` nor `RESTART IDENTITY`).
    pub const TRUNCATE: Operation = Operation::Truncate {
        cascade: false,
        restart_identity: false,
    };

    pub fn is_truncate(self) -> bool {
        matches!(self, Operation::Truncate { .. })
    }
}

pub type Row = Vec<Value>;

/// One row change.
#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    pub sequence: Sequence,
    pub table: String,
    pub operation: Operation,
    pub before: Option<Row>,
    /// The row before the change known only by its key: the key values in
    /// the schema's key order, in place of a whole `before` image
    /// (docs/FORMAT.md, "Key-only before images").
    pub before_key: Option<Row>,
    pub after: Option<Row>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawEvent {
    sequence: Seq,
    table: String,
    operation: OpName,
    #[serde(default, deserialize_with = "present")]
    before: Option<Row>,
    #[serde(default, deserialize_with = "present")]
    before_key: Option<Row>,
    #[serde(default, deserialize_with = "present")]
    after: Option<Row>,
    #[serde(default, deserialize_with = "present")]
    cascade: Option<bool>,
    #[serde(default, deserialize_with = "present")]
    restart_identity: Option<bool>,
}

impl<'de> Deserialize<'de> for Event {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let Obj(r) = Obj::<RawEvent>::deserialize(d)?;
        let operation = match r.operation {
            OpName::Insert => Operation::Insert,
            OpName::Update => Operation::Update,
            OpName::Delete => Operation::Delete,
            OpName::Truncate => Operation::Truncate {
                cascade: r.cascade.unwrap_or(false),
                restart_identity: r.restart_identity.unwrap_or(false),
            },
        };
        if r.operation != OpName::Truncate {
            let flag = if r.cascade.is_some() {
                Some("cascade")
            } else if r.restart_identity.is_some() {
                Some("restart_identity")
            } else {
                None
            };
            if let Some(flag) = flag {
                return Err(de::Error::custom(format!(
                    "{} event {} has member {flag:?}, which only truncate events have",
                    operation.as_str(),
                    r.sequence.0
                )));
            }
        }
        let e = Event {
            sequence: r.sequence.0,
            table: r.table,
            operation,
            before: r.before,
            before_key: r.before_key,
            after: r.after,
        };
        e.check_images().map_err(de::Error::custom)?;
        Ok(e)
    }
}

impl Event {
    /// Images must match the operation; event sequences are positive; an
    /// unchanged value only in an update's after image.
    pub fn check_images(&self) -> Result<(), String> {
        if self.sequence == 0 {
            return Err("event sequence must be positive".into());
        }
        let (b, k, a) = (
            self.before.is_some(),
            self.before_key.is_some(),
            self.after.is_some(),
        );
        if b && k {
            return Err(format!(
                "{} event {} has both a before image and a before_key (the old row is either whole or known by its key)",
                self.operation.as_str(),
                self.sequence
            ));
        }
        if k && !matches!(self.operation, Operation::Update | Operation::Delete) {
            return Err(format!(
                "{} event {} has a before_key, which only update and delete events have",
                self.operation.as_str(),
                self.sequence
            ));
        }
        let b = b || k;
        let ok = match self.operation {
            Operation::Insert => !b && a,
            Operation::Update => b && a,
            Operation::Delete => b && !a,
            Operation::Truncate { .. } => !b && !a,
        };
        if !ok {
            return Err(format!(
                "{} event {} must have {} (has before: {}, after: {})",
                self.operation.as_str(),
                self.sequence,
                match self.operation {
                    Operation::Insert => "only an after image",
                    Operation::Update => "both before and after images",
                    Operation::Delete => "only a before image",
                    Operation::Truncate { .. } => "no images",
                },
                b,
                a
            ));
        }
        let images = [
            ("before image", &self.before),
            ("before_key", &self.before_key),
            ("after image", &self.after),
        ];
        for (name, img) in images {
            let allowed = name == "after image" && self.operation == Operation::Update;
            if !allowed && img.iter().flatten().any(Value::is_unchanged) {
                return Err(format!(
                    "{} event {} {name} holds an unchanged value (only an update's after image may)",
                    self.operation.as_str(),
                    self.sequence
                ));
            }
        }
        Ok(())
    }

    /// The old row's key values in key order (`key` gives the key columns'
    /// places in a whole row): from the `before_key`, else from the whole
    /// `before` image; `None` for an insert or a truncate.
    pub fn old_key<'a>(&'a self, key: &[usize]) -> Option<Vec<&'a Value>> {
        if let Some(k) = &self.before_key {
            return Some(k.iter().collect());
        }
        let b = self.before.as_ref()?;
        key.iter().map(|&i| b.get(i)).collect()
    }

    /// What only the table's key (its columns' places) can check: a
    /// `before_key` holds one value per key column, and a key column of the
    /// after image holds a value, never an unchanged mark.
    pub fn check_key(&self, key: &[usize]) -> Result<(), String> {
        if let Some(k) = &self.before_key {
            if k.len() != key.len() {
                return Err(format!(
                    "event {} before_key has {} values but table {:?} has {} key columns",
                    self.sequence,
                    k.len(),
                    self.table,
                    key.len()
                ));
            }
        }
        if let Some(a) = &self.after {
            if let Some(&i) = key
                .iter()
                .find(|&&i| a.get(i).is_some_and(Value::is_unchanged))
            {
                return Err(format!(
                    "event {} after image has an unchanged value in key column {} of table {:?} (a key is always sent)",
                    self.sequence,
                    i + 1,
                    self.table
                ));
            }
        }
        Ok(())
    }

    /// Whether the after image holds an unchanged value.
    pub fn has_unchanged(&self) -> bool {
        self.after.iter().flatten().any(Value::is_unchanged)
    }

    /// A `truncate` event of `table`.
    pub fn truncate(sequence: Sequence, table: String, operation: Operation) -> Event {
        debug_assert!(operation.is_truncate());
        Event {
            sequence,
            table,
            operation,
            before: None,
            before_key: None,
            after: None,
        }
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

pub use super::message::LogicalMessage;
