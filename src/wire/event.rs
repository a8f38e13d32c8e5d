//! Events: one row change, its operation and images (docs/FORMAT.md §4),
//! read with every rule the format gives them.

use super::model::Seq;
use super::strict::{one_of, present, Obj};
use super::value::Value;
use super::Sequence;
use serde::de::{self, Deserializer};
use serde::Deserialize;

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
