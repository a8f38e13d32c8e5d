//! Logical messages (docs/FORMAT.md "Message records"): the `message`
//! record of a batch.

use super::model::{Seq, Sequence};
use super::value::Value;
use serde::de::{self, Deserializer, Visitor};
use serde::Deserialize;
use std::fmt;

/// A logical message inside a batch (a `message` record,
/// docs/FORMAT.md "Message records"): PostgreSQL's
/// `pg_logical_emit_message(transactional, prefix, content)`. It has a
/// sequence of its own among the batch's events (never one an event has),
/// is not an event (the commit's `count` leaves it out) and changes no
/// table: a target skips it.
#[derive(Debug, Clone, PartialEq)]
pub struct LogicalMessage {
    pub sequence: Sequence,
    pub prefix: String,
    /// `Value::Text` when the bytes were valid UTF-8, else `Value::Blob`.
    pub content: Value,
    pub transactional: bool,
}

/// Its members are checked here, so that a missing, unknown or doubled one
/// is named with the record's kind, as the other records' members are.
impl<'de> Deserialize<'de> for LogicalMessage {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = LogicalMessage;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a message as a JSON object")
            }
            fn visit_map<A: de::MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut sequence: Option<Seq> = None;
                let mut prefix: Option<String> = None;
                let mut content: Option<Value> = None;
                let mut transactional: Option<bool> = None;
                fn twice<E: de::Error>(k: &str) -> E {
                    E::custom(format!("message record has member {k:?} twice"))
                }
                while let Some(k) = map.next_key::<String>()? {
                    match k.as_str() {
                        "sequence" if sequence.is_none() => sequence = Some(map.next_value()?),
                        "prefix" if prefix.is_none() => prefix = Some(map.next_value()?),
                        "content" if content.is_none() => content = Some(map.next_value()?),
                        "transactional" if transactional.is_none() => {
                            transactional = Some(map.next_value()?)
                        }
                        "sequence" | "prefix" | "content" | "transactional" => {
                            return Err(twice(&k))
                        }
                        _ => {
                            return Err(de::Error::custom(format!(
                                "message record has unexpected member {:?}",
                                k.chars().take(40).collect::<String>()
                            )))
                        }
                    }
                }
                let lacks =
                    |m: &str| de::Error::custom(format!("message record lacks member {m:?}"));
                let m = LogicalMessage {
                    sequence: sequence.ok_or_else(|| lacks("sequence"))?.0,
                    prefix: prefix.ok_or_else(|| lacks("prefix"))?,
                    content: content.ok_or_else(|| lacks("content"))?,
                    transactional: transactional.ok_or_else(|| lacks("transactional"))?,
                };
                m.check().map_err(de::Error::custom)?;
                Ok(m)
            }
        }
        d.deserialize_map(V)
    }
}

impl LogicalMessage {
    /// A message of these bytes: TEXT when they are valid UTF-8, else a BLOB.
    pub fn new(sequence: Sequence, prefix: String, content: Vec<u8>, transactional: bool) -> Self {
        let content = match String::from_utf8(content) {
            Ok(s) => Value::Text(s),
            Err(e) => Value::Blob(e.into_bytes()),
        };
        LogicalMessage {
            sequence,
            prefix,
            content,
            transactional,
        }
    }

    /// A positive sequence; content TEXT or BLOB.
    pub fn check(&self) -> Result<(), String> {
        if self.sequence == 0 {
            return Err("message sequence must be positive".into());
        }
        match self.content {
            Value::Text(_) | Value::Blob(_) => Ok(()),
            ref v => Err(format!(
                "message {} content must be text or blob (has {})",
                self.sequence,
                v.class_name()
            )),
        }
    }
}
