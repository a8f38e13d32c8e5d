//! Read-ahead: a reader's items decoded on a thread of their own, handed
//! over in chunks through a bounded channel, so that decoding overlaps the
//! consumer's work (a target's writes). Items, errors and their places are
//! the same as without. At most four chunks are in memory at once: two in
//! the channel, the one being filled and the one being consumed.

use crate::error::{Error, Result};
use std::sync::mpsc::{sync_channel, Receiver};

/// Items a chunk holds at most, and input bytes.
const CHUNK_ITEMS: usize = 1024;
const CHUNK_BYTES: usize = 1 << 20;

/// One item from the producer: its line, its size in input bytes, and
/// whether the chunk should be handed over after it (a batch's commit: never
/// hold a batch back waiting for the next one's input).
pub(super) struct Step<T> {
    pub item: T,
    pub line: u64,
    pub bytes: usize,
    pub flush: bool,
}

enum Msg<T> {
    Items(Vec<(T, u64)>),
    End,
    Failed(Error),
}

pub(super) struct Ahead<T> {
    name: String,
    rx: Receiver<Msg<T>>,
    chunk: std::vec::IntoIter<(T, u64)>,
    /// The line of the last item handed out.
    pub line: u64,
    ended: bool,
    /// Whether the reader stopped on an error: it is never read as a clean
    /// end afterwards.
    failed: bool,
}

impl<T: Send + 'static> Ahead<T> {
    /// Run `next` on a thread of its own until it ends or fails.
    pub fn spawn(
        name: String,
        mut next: impl FnMut() -> Result<Option<Step<T>>> + Send + 'static,
    ) -> Result<Self> {
        let (tx, rx) = sync_channel(2);
        std::thread::Builder::new()
            .name("read-ahead".into())
            .spawn(move || {
                let mut chunk = Vec::with_capacity(256);
                let mut bytes = 0;
                loop {
                    match next() {
                        Ok(Some(step)) => {
                            bytes += step.bytes;
                            chunk.push((step.item, step.line));
                            if step.flush || chunk.len() >= CHUNK_ITEMS || bytes >= CHUNK_BYTES {
                                bytes = 0;
                                let full = std::mem::replace(&mut chunk, Vec::with_capacity(256));
                                // The consumer is gone (it stopped or failed).
                                if tx.send(Msg::Items(full)).is_err() {
                                    return;
                                }
                            }
                        }
                        Ok(None) => {
                            let _ = tx.send(Msg::Items(chunk));
                            let _ = tx.send(Msg::End);
                            return;
                        }
                        Err(e) => {
                            let _ = tx.send(Msg::Items(chunk));
                            let _ = tx.send(Msg::Failed(e));
                            return;
                        }
                    }
                }
            })
            .map_err(|e| Error::io("cannot start the read-ahead thread", e))?;
        Ok(Ahead {
            name,
            rx,
            chunk: Vec::new().into_iter(),
            line: 0,
            ended: false,
            failed: false,
        })
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// The next item, `None` at the end, or the error that stopped the reader.
    pub fn next(&mut self) -> Result<Option<T>> {
        loop {
            if let Some((item, line)) = self.chunk.next() {
                self.line = line;
                return Ok(Some(item));
            }
            if self.failed {
                return Err(Error::io(
                    "cannot read input",
                    std::io::Error::other("reading stopped at an earlier error"),
                )
                .in_file(&self.name));
            }
            if self.ended {
                return Ok(None);
            }
            match self.rx.recv() {
                Ok(Msg::Items(v)) => self.chunk = v.into_iter(),
                Ok(Msg::End) => self.ended = true,
                Ok(Msg::Failed(e)) => {
                    self.failed = true;
                    return Err(e);
                }
                // Only a thread that died without a word: never a clean end.
                Err(_) => {
                    self.failed = true;
                    return Err(Error::io(
                        "cannot read input",
                        std::io::Error::other("the read-ahead thread stopped"),
                    )
                    .in_file(&self.name));
                }
            }
        }
    }

    /// `e` at the place of the last item handed out.
    pub fn locate(&self, e: Error) -> Error {
        e.in_file(&self.name).at_line(self.line)
    }
}
