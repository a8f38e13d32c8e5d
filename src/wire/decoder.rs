//! The strict single-batch decoder of the seeds.

use super::batch::*;

use super::jsonl::{parse_record, Limits};
use super::model::Event;
use crate::error::{Error, Result};

/// The strict single-batch decoder of the seeds: accepts text in chunks,
/// enforces the line and total caps in UTF-8 bytes, and becomes unusable after
/// a failure or after `finish`.
pub struct BatchDecoder {
    limits: Limits,
    partial: Vec<u8>,
    total: u64,
    line: u64,
    validator: Validator,
    header: Option<Header>,
    events: Vec<Event>,
    changes: Vec<(usize, super::model::SchemaChange)>,
    messages: Vec<(usize, super::model::LogicalMessage)>,
    commit: Option<Commit>,
    state: DecoderState,
}

#[derive(PartialEq)]
enum DecoderState {
    Open,
    Failed,
    Finished,
}

impl BatchDecoder {
    pub fn new(limits: Limits) -> Result<Self> {
        if limits.max_line_bytes == 0 {
            return Err(Error::usage("the line limit must be positive"));
        }
        if let Some(t) = limits.max_input_bytes {
            if limits.max_line_bytes > t {
                return Err(Error::usage(
                    "the line limit must not exceed the total limit",
                ));
            }
        }
        Ok(BatchDecoder {
            limits,
            partial: Vec::new(),
            total: 0,
            line: 0,
            validator: Validator::single_batch(),
            header: None,
            events: Vec::new(),
            changes: Vec::new(),
            messages: Vec::new(),
            commit: None,
            state: DecoderState::Open,
        })
    }

    fn usable(&self) -> Result<()> {
        match self.state {
            DecoderState::Open => Ok(()),
            DecoderState::Failed => Err(Error::state(
                "the decoder failed earlier and cannot be used again",
            )),
            DecoderState::Finished => Err(Error::state(
                "the decoder has finished and cannot be used again",
            )),
        }
    }

    /// Feed the next chunk of text.
    pub fn push(&mut self, chunk: &str) -> Result<()> {
        self.usable()?;
        let r = self.push_inner(chunk.as_bytes());
        if r.is_err() {
            self.state = DecoderState::Failed;
        }
        r
    }

    fn push_inner(&mut self, mut bytes: &[u8]) -> Result<()> {
        self.total += bytes.len() as u64;
        if let Some(t) = self.limits.max_input_bytes {
            if self.total > t {
                return Err(Error::limit(format!(
                    "input is longer than the input limit of {t} bytes"
                ))
                .at_line(self.line + 1));
            }
        }
        while let Some(i) = bytes.iter().position(|&b| b == b'\n') {
            self.partial.extend_from_slice(&bytes[..i]);
            bytes = &bytes[i + 1..];
            self.check_cap()?;
            let line = std::mem::take(&mut self.partial);
            self.line_done(&line)?;
        }
        self.partial.extend_from_slice(bytes);
        self.check_cap()
    }

    fn check_cap(&self) -> Result<()> {
        if self.partial.len() as u64 > self.limits.max_line_bytes {
            return Err(Error::limit(format!(
                "line is longer than the line limit of {} bytes",
                self.limits.max_line_bytes
            ))
            .at_line(self.line + 1));
        }
        Ok(())
    }

    fn line_done(&mut self, line: &[u8]) -> Result<()> {
        self.line += 1;
        let at = self.line;
        let item = parse_record(line)
            .and_then(batch_item)
            .map_err(|e| e.at_line(at))?;
        match item {
            Item::Header(h) => {
                self.validator.header(&h).map_err(|e| e.at_line(at))?;
                self.header = Some(h);
            }
            Item::Event(e) => {
                self.validator.event(&e).map_err(|err| err.at_line(at))?;
                self.events.push(e);
            }
            Item::Schema(c) => {
                self.validator
                    .schema_change(&c)
                    .map_err(|e| e.at_line(at))?;
                self.changes.push((self.events.len(), c));
            }
            Item::Message(m) => {
                self.validator.message(&m).map_err(|e| e.at_line(at))?;
                self.messages.push((self.changes.len(), m));
            }
            Item::Commit(c) => {
                self.validator.commit(&c).map_err(|e| e.at_line(at))?;
                self.commit = Some(c);
            }
        }
        Ok(())
    }

    /// End of input: the batch, if complete and valid.
    pub fn finish(&mut self) -> Result<Batch> {
        self.usable()?;
        let r = self.finish_inner();
        self.state = if r.is_ok() {
            DecoderState::Finished
        } else {
            DecoderState::Failed
        };
        r
    }

    fn finish_inner(&mut self) -> Result<Batch> {
        if !self.partial.is_empty() {
            let line = std::mem::take(&mut self.partial);
            self.line_done(&line)?;
        }
        self.validator.finish()?;
        let h = self.header.take().expect("validated");
        let c = self.commit.take().expect("validated");
        Ok(Batch {
            start: h.start,
            end: c.end,
            high_water: h.high_water,
            schemas: h.schemas,
            compacted: h.compacted,
            events: std::mem::take(&mut self.events),
            changes: std::mem::take(&mut self.changes),
            messages: std::mem::take(&mut self.messages),
        })
    }
}
