//! Batches and batch streams (docs/FORMAT.md §6).
//!
//! JSONL `mooncdc.jsonl.v1`, one record a line:
//!
//! ```text
//! {"kind":"header","format":"mooncdc.jsonl.v1","start":C,"high_water":"n","schemas":[…]}
//! {"kind":"event","event":{…}}
//! {"kind":"commit","end":C,"count":"2"}
//! ```
//!
//! JSON `mooncdc.batch.v1`:
//! `{"format":"mooncdc.batch.v1","start":C,"end":C,"high_water":"n","schemas":[…],"events":[…]}`
//! (`schemas` optional in both).
//!
//! Rules, each an error naming the line: header first and once; commit
//! mandatory and last; `count` equals the number of events; start and end have
//! the same source; `start ≤ end ≤ high_water`; event sequences strictly
//! increase inside `(start, end]`; images match the operation; with schemas,
//! every event's table has one and every image has its width. An empty batch
//! is valid. A *batch stream* is batches back to back, each `start` equal to
//! the previous `end`; a commit line is the unit a target applies atomically.

use super::jsonl::{json_error, Limits, RawRecord, RecordKind};
use super::model::{
    write_event, write_schema_change_line, Cursor, Event, LogicalMessage, Schema, SchemaChange,
    Seq, Sequence,
};
use super::strict::{present, Obj};
use crate::error::{Error, Result};
use serde::Deserialize;
use std::collections::HashMap;

pub const JSONL_FORMAT: &str = "mooncdc.jsonl.v1";
pub const JSON_FORMAT: &str = "mooncdc.batch.v1";

/// What a batch's header says.
#[derive(Debug, Clone, PartialEq)]
pub struct Header {
    pub start: Cursor,
    pub high_water: Sequence,
    pub schemas: Option<Vec<Schema>>,
    /// `"compacted":true`: `mooncdc-compact` folded some events of this batch
    /// into later ones, so only a target holding none of the interval, or all
    /// of it, may apply it (docs/TOOLS.md (split, merge, compact)). Written only when true.
    pub compacted: bool,
}

/// What a batch's commit says.
#[derive(Debug, Clone, PartialEq)]
pub struct Commit {
    pub end: Cursor,
    pub count: u64,
}

/// One validated record of a batch stream.
#[derive(Debug, Clone, PartialEq)]
pub enum Item {
    Header(Header),
    Event(Event),
    /// A `schema` record: the table's schema from here on.
    Schema(SchemaChange),
    /// A `message` record: a logical message, which no target applies.
    Message(LogicalMessage),
    Commit(Commit),
}

/// A whole batch in memory.
#[derive(Debug, Clone, PartialEq)]
pub struct Batch {
    pub start: Cursor,
    pub end: Cursor,
    pub high_water: Sequence,
    pub schemas: Option<Vec<Schema>>,
    /// See [`Header::compacted`].
    pub compacted: bool,
    pub events: Vec<Event>,
    /// Schema records, each with the index of the event it comes before
    /// (in order; several may share an index).
    pub changes: Vec<(usize, SchemaChange)>,
    /// Message records, in sequence order, each with the number of schema
    /// records before it: its place among the events is its sequence's,
    /// and that number places it among the schema records there.
    pub messages: Vec<(usize, LogicalMessage)>,
}

/// One record of a [`Batch`] between its header and commit, in order.
#[derive(Debug, Clone, Copy)]
pub enum Record<'a> {
    Event(&'a Event),
    Schema(&'a SchemaChange),
    Message(&'a LogicalMessage),
}

/// Width and key positions of a table, from its schema.
#[derive(Debug, Clone)]
pub struct TableShape {
    pub width: usize,
    pub key: Vec<usize>,
}

/// Index schemas by table, refusing duplicates and bad schemas.
pub fn shapes(schemas: &[Schema]) -> Result<HashMap<String, TableShape>> {
    let mut map = HashMap::with_capacity(schemas.len());
    for s in schemas {
        s.check().map_err(Error::data)?;
        let shape = TableShape {
            width: s.columns.len(),
            key: s.key_indices(),
        };
        if map.insert(s.table.clone(), shape).is_some() {
            return Err(Error::data(format!(
                "schemas name table {:?} twice",
                s.table
            )));
        }
    }
    Ok(map)
}

/// Turn a raw JSONL record into a batch item, checking its members.
pub fn batch_item(rec: RawRecord) -> Result<Item> {
    match rec.kind {
        RecordKind::Header => {
            if rec.format.as_deref() == Some(super::snapshot::JSONL_FORMAT) {
                return Err(Error::data("this is a snapshot, not a batch stream"));
            }
            rec.check_members(
                "header",
                &["format", "start", "high_water"],
                &["schemas", "compacted"],
            )?;
            let format = rec.format.unwrap_or_default();
            if format != JSONL_FORMAT {
                return Err(Error::data(if format == super::snapshot::JSONL_FORMAT {
                    "this is a snapshot, not a batch stream".to_string()
                } else {
                    format!("header format {format:?} is not {JSONL_FORMAT:?}")
                }));
            }
            Ok(Item::Header(Header {
                start: rec.start.expect("checked"),
                high_water: rec.high_water.expect("checked").0,
                schemas: rec.schemas,
                compacted: rec.compacted.unwrap_or(false),
            }))
        }
        RecordKind::Event => {
            rec.check_members("event", &["event"], &[])?;
            Ok(Item::Event(rec.event.expect("checked")))
        }
        RecordKind::Commit => {
            rec.check_members("commit", &["end", "count"], &[])?;
            Ok(Item::Commit(Commit {
                end: rec.end.expect("checked"),
                count: rec.count.expect("checked").0,
            }))
        }
        RecordKind::Schema => {
            rec.check_members("schema", &["schema"], &["renamed"])?;
            Ok(Item::Schema(SchemaChange {
                schema: rec.schema.expect("checked"),
                renamed: rec.renamed.unwrap_or_default(),
            }))
        }
        RecordKind::Message => {
            rec.check_members("message", &["message"], &[])?;
            Ok(Item::Message(rec.message.expect("checked")))
        }
        RecordKind::Row => Err(Error::data(
            "row records belong to snapshots, not batch streams",
        )),
    }
}

/// A JSON `mooncdc.batch.v1` document as parsed.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawBatchDoc {
    format: String,
    start: Cursor,
    end: Cursor,
    high_water: Seq,
    #[serde(default, deserialize_with = "present")]
    schemas: Option<Vec<Schema>>,
    #[serde(default, deserialize_with = "present")]
    compacted: Option<bool>,
    events: Vec<Event>,
}

impl RawBatchDoc {
    pub(super) fn into_batch(self) -> Result<Batch> {
        if self.format != JSON_FORMAT {
            return Err(Error::data(format!(
                "batch format {:?} is not {JSON_FORMAT:?}",
                self.format
            )));
        }
        Ok(Batch {
            start: self.start,
            end: self.end,
            high_water: self.high_water.0,
            schemas: self.schemas,
            compacted: self.compacted.unwrap_or(false),
            events: self.events,
            changes: Vec::new(),
            messages: Vec::new(),
        })
    }
}

impl Batch {
    /// Check every rule of a single batch.
    pub fn validate(&self) -> Result<()> {
        let mut v = Validator::single_batch();
        v.header(&self.header())?;
        let mut i = 0;
        for r in self.records() {
            match r {
                Record::Event(e) => {
                    i += 1;
                    v.event(e)
                        .map_err(|err| Error::data(format!("event #{}: {}", i, err.message())))?;
                }
                Record::Schema(c) => v.schema_change(c)?,
                Record::Message(m) => v.message(m)?,
            }
        }
        v.commit(&self.commit())
    }

    /// The records between the header and the commit, in order: each schema
    /// record before the event of its index, each message before the first
    /// event after its sequence, after the schema records it follows.
    pub fn records(&self) -> impl Iterator<Item = Record<'_>> {
        let (mut ei, mut ci, mut mi) = (0, 0, 0);
        std::iter::from_fn(move || {
            let event = self.events.get(ei);
            let change = self.changes.get(ci).filter(|(at, _)| *at <= ei);
            let message = self
                .messages
                .get(mi)
                .filter(|(_, m)| event.is_none_or(|e| m.sequence < e.sequence));
            match (message, change, event) {
                (Some((after, m)), _, _) if *after <= ci => {
                    mi += 1;
                    Some(Record::Message(m))
                }
                (_, Some((_, c)), _) => {
                    ci += 1;
                    Some(Record::Schema(c))
                }
                (Some((_, m)), None, _) => {
                    mi += 1;
                    Some(Record::Message(m))
                }
                (None, None, Some(e)) => {
                    ei += 1;
                    Some(Record::Event(e))
                }
                (None, None, None) => {
                    // Left over: schema records placed past the last event.
                    if let Some((_, c)) = self.changes.get(ci) {
                        ci += 1;
                        return Some(Record::Schema(c));
                    }
                    None
                }
            }
        })
    }

    pub fn header(&self) -> Header {
        Header {
            start: self.start.clone(),
            high_water: self.high_water,
            schemas: self.schemas.clone(),
            compacted: self.compacted,
        }
    }

    pub fn commit(&self) -> Commit {
        Commit {
            end: self.end.clone(),
            count: self.events.len() as u64,
        }
    }

    /// Decode and validate one JSON batch document.
    pub fn from_json(text: &str) -> Result<Batch> {
        let Obj(doc) = serde_json::from_str::<Obj<RawBatchDoc>>(text).map_err(json_error)?;
        let b = doc.into_batch()?;
        b.validate()?;
        Ok(b)
    }

    /// Decode and validate one JSONL batch (strictly one).
    pub fn from_jsonl(text: &str) -> Result<Batch> {
        let mut d = BatchDecoder::new(Limits::default())?;
        d.push(text)?;
        d.finish()
    }

    /// The JSON document; `None` for a batch with schema or message
    /// records, which `mooncdc.batch.v1` cannot hold.
    pub fn to_json(&self) -> Option<Vec<u8>> {
        if !self.changes.is_empty() || !self.messages.is_empty() {
            return None;
        }
        let mut out = Vec::new();
        write_json_open(&mut out, &self.header(), &self.end);
        for (i, e) in self.events.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            write_event(&mut out, e);
        }
        out.extend_from_slice(b"]}\n");
        Some(out)
    }

    pub fn to_jsonl(&self) -> Vec<u8> {
        let mut out = Vec::new();
        write_header_line(&mut out, &self.header());
        for r in self.records() {
            match r {
                Record::Event(e) => write_event_line(&mut out, e),
                Record::Schema(c) => write_schema_change_line(&mut out, c),
                Record::Message(m) => write_message_line(&mut out, m),
            }
        }
        write_commit_line(&mut out, &self.commit());
        out
    }
}

pub use super::decoder::BatchDecoder;
pub use super::jsonl::read_document;
pub use super::lines::write_schema_change_line as write_schema_line;
pub use super::lines::{
    message_line_len, write_commit_line, write_event_line, write_header_line, write_json_open,
    write_message_line, write_message_line_to, EVENT_LINE_PREFIX, EVENT_LINE_SUFFIX,
    MESSAGE_LINE_PREFIX, SCHEMA_LINE_PREFIX,
};
pub use super::stream::{BatchStreamReader, Lean};
pub use super::validate::Validator;
