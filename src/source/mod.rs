//! Sources: where changes come from.
//!
//! The contract every source keeps: `read` writes one batch stream of the
//! changes after a cursor, in sequence order, and never acknowledges; a source
//! discards changes only when told (`ack`) and never beyond its high water; a
//! snapshot's cursor hands over exactly to `read`.

pub mod postgres;
pub mod sqlite;

use crate::error::{Error, Result};
use crate::wire::jsonl::DEFAULT_MAX_LINE_BYTES;
use crate::wire::Event;

/// Limits of one read, the same for every source: stop after `max_events`
/// events, or before the events written would exceed `max_bytes` (at least
/// one event is written); the batch then ends at the last event.
#[derive(Debug, Clone, Copy, Default)]
pub struct ReadLimits {
    pub max_events: Option<u64>,
    pub max_bytes: Option<u64>,
    /// The longest event line a read writes; default: the line cap every
    /// reading tool applies by default, so what capture writes, apply reads.
    pub max_line_bytes: Option<u64>,
}

impl ReadLimits {
    /// Refuse an event whose line is longer than the line cap, naming it, so
    /// a huge value stops capture with a way forward instead of a stream that
    /// no tool downstream will read.
    /// `line` is the event's JSONL line with its newline, which the readers'
    /// line cap does not count.
    pub fn check_line(&self, line: &[u8], e: &Event) -> Result<()> {
        let len = line.strip_suffix(b"\n").unwrap_or(line).len() as u64;
        let cap = self.max_line_bytes.unwrap_or(DEFAULT_MAX_LINE_BYTES);
        if len > cap {
            let which = match self.max_line_bytes {
                Some(_) => "given by --max-line-bytes",
                None => "that mooncdc-apply and the stream tools read by default",
            };
            return Err(Error::data(format!(
                "event {} ({} on table {:?}) encodes to a line of {len} bytes, over the line limit of {cap} bytes {which}; read it with --max-line-bytes N (N ≥ {len}) and give every tool that reads the stream the same --max-line-bytes N",
                e.sequence,
                e.operation.as_str(),
                e.table
            )));
        }
        Ok(())
    }
}
