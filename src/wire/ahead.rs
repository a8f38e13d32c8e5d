//! Read-ahead: a reader's items decoded on a thread of their own, handed
//! over in chunks through a bounded channel, so that decoding overlaps the
//! consumer's work (a target's writes, a stream tool's output). Items,
//! errors and their places are the same as without. A chunk may carry bytes
//! beside its items (the lines a stream tool writes through); the consumer
//! hands each emptied chunk back for reuse, so a long input does not fault
//! in fresh memory chunk by chunk, and with it the items it is done with
//! (`recycle`), which are then dropped on the thread that made them. At
//! most five chunks exist at once (each at most 1,024 items, or 1 MB of
//! input and one line more): two in the channel, one being filled or sent,
//! the one being consumed and one spare.

use crate::error::{Error, Result};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::sync::Arc;

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

/// A chunk: its items with their lines (in reverse order once received, so
/// that they are taken with `pop`), and the bytes they refer to.
struct Chunk<T> {
    items: Vec<(T, u64)>,
    data: Vec<u8>,
    /// Items the consumer is done with, dropped on the producer's thread
    /// when the chunk comes back (where they were allocated).
    trash: Vec<T>,
}

impl<T> Chunk<T> {
    /// Holding no memory.
    fn empty() -> Self {
        Chunk {
            items: Vec::new(),
            data: Vec::new(),
            trash: Vec::new(),
        }
    }

    fn with_capacity() -> Self {
        Chunk {
            items: Vec::with_capacity(256),
            data: Vec::new(),
            trash: Vec::new(),
        }
    }
}

enum Msg<T> {
    Items(Chunk<T>),
    End,
    Failed(Error),
}

pub(super) struct Ahead<T> {
    name: String,
    rx: Receiver<Msg<T>>,
    /// Emptied chunks going back to the producer.
    spare: SyncSender<Chunk<T>>,
    /// Chunks sent and not yet taken by the consumer.
    queued: Arc<AtomicUsize>,
    chunk: Chunk<T>,
    /// The line of the last item handed out.
    line: u64,
    ended: bool,
    /// Whether the reader stopped on an error: it is never read as a clean
    /// end afterwards.
    failed: bool,
}

impl<T: Send + 'static> Ahead<T> {
    /// Run `next` on a thread of its own until it ends or fails. `next` may
    /// append bytes to the chunk's data (its argument) for its item to refer
    /// to; [`Ahead::data`] gives them back beside the item. `line` is the
    /// line read last before (where an error is placed until an item comes).
    pub fn spawn(
        name: String,
        line: u64,
        next: impl FnMut(&mut Vec<u8>) -> Result<Option<Step<T>>> + Send + 'static,
    ) -> Result<Self> {
        Self::spawn_with(name, line, next, |_, _, _| {})
    }

    /// [`Ahead::spawn`], with `ready` called on each full chunk before it is
    /// handed over: its items, its data, and whether the consumer has
    /// nothing else waiting (it is idle, or busy with its last chunk), so
    /// that work the consumer could do itself is better left to it.
    pub fn spawn_with(
        name: String,
        line: u64,
        mut next: impl FnMut(&mut Vec<u8>) -> Result<Option<Step<T>>> + Send + 'static,
        mut ready: impl FnMut(&mut [(T, u64)], &[u8], bool) + Send + 'static,
    ) -> Result<Self> {
        let (tx, rx) = sync_channel(2);
        let (spare, spares) = sync_channel::<Chunk<T>>(1);
        let queued = Arc::new(AtomicUsize::new(0));
        let sent = queued.clone();
        std::thread::Builder::new()
            .name("read-ahead".into())
            .spawn(move || {
                let mut chunk = Chunk::with_capacity();
                let mut bytes = 0;
                // Hand a chunk over; false when the consumer is gone (it
                // stopped or failed).
                let mut send = |mut chunk: Chunk<T>| {
                    let idle = sent.load(Ordering::Acquire) == 0;
                    ready(&mut chunk.items, &chunk.data, idle);
                    sent.fetch_add(1, Ordering::AcqRel);
                    tx.send(Msg::Items(chunk)).is_ok()
                };
                let end = loop {
                    match next(&mut chunk.data) {
                        Ok(Some(step)) => {
                            bytes += step.bytes;
                            chunk.items.push((step.item, step.line));
                            if step.flush
                                || chunk.items.len() >= CHUNK_ITEMS
                                || bytes >= CHUNK_BYTES
                            {
                                bytes = 0;
                                let full = std::mem::replace(&mut chunk, Chunk::empty());
                                if !send(full) {
                                    return;
                                }
                                chunk = match spares.try_recv() {
                                    Ok(mut c) => {
                                        c.trash.clear();
                                        c
                                    }
                                    Err(_) => Chunk::with_capacity(),
                                };
                            }
                        }
                        Ok(None) => break Msg::End,
                        Err(e) => break Msg::Failed(e),
                    }
                };
                if send(chunk) {
                    let _ = tx.send(end);
                }
            })
            .map_err(|e| Error::io("cannot start the read-ahead thread", e))?;
        Ok(Ahead {
            name,
            rx,
            spare,
            queued,
            chunk: Chunk::empty(),
            line,
            ended: false,
            failed: false,
        })
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// Hand back an item the consumer is done with: it is dropped on the
    /// producer's thread, where it was made (cheaper for the allocator than
    /// freeing it here).
    pub fn recycle(&mut self, item: T) {
        self.chunk.trash.push(item);
    }

    /// The bytes the producer stored beside the current chunk's items.
    pub fn data(&self) -> &[u8] {
        &self.chunk.data
    }

    /// The next item, `None` at the end, or the error that stopped the reader.
    pub fn next(&mut self) -> Result<Option<T>> {
        loop {
            if let Some((item, line)) = self.chunk.items.pop() {
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
                Ok(Msg::Items(mut c)) => {
                    self.queued.fetch_sub(1, Ordering::AcqRel);
                    c.items.reverse();
                    let mut done = std::mem::replace(&mut self.chunk, c);
                    done.data.clear();
                    // Not kept grown by a long line.
                    if done.data.capacity() > 2 * CHUNK_BYTES {
                        done.data = Vec::new();
                    }
                    // A full return channel or a finished producer: dropped.
                    let _ = self.spare.try_send(done);
                }
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
