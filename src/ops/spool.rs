//! A holding area for a batch's encoded records until the batch is proven valid.
//!
//! Tools may not emit any part of a batch before its commit has been checked,
//! or a downstream target could apply half of a bad batch. A spool keeps the
//! records in memory up to a limit and beyond it in an unnamed temporary file
//! (deleted by the system when closed), so memory never depends on input size.

use crate::error::{Error, Result};
use std::fs::File;
use std::io::{BufRead, BufReader, BufWriter, Read, Seek, SeekFrom, Write};

/// Default in-memory part of a spool.
pub const DEFAULT_SPOOL_MEMORY: usize = 8 << 20;

pub struct Spool {
    mem: Vec<u8>,
    file: Option<BufWriter<File>>,
    mem_limit: usize,
    len: u64,
}

impl Spool {
    pub fn new(mem_limit: usize) -> Self {
        Spool {
            mem: Vec::new(),
            file: None,
            mem_limit,
            len: 0,
        }
    }

    /// Bytes held.
    pub fn len(&self) -> u64 {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn push(&mut self, bytes: &[u8]) -> Result<()> {
        self.len += bytes.len() as u64;
        if let Some(f) = &mut self.file {
            return f
                .write_all(bytes)
                .map_err(|e| Error::io("cannot write the spool file", e));
        }
        if self.mem.len() + bytes.len() <= self.mem_limit {
            self.mem.extend_from_slice(bytes);
            return Ok(());
        }
        let f = tempfile::tempfile().map_err(|e| Error::io("cannot create a spool file", e))?;
        let mut w = BufWriter::with_capacity(1 << 16, f);
        w.write_all(&self.mem)
            .and_then(|_| w.write_all(bytes))
            .map_err(|e| Error::io("cannot write the spool file", e))?;
        self.mem = Vec::new();
        self.file = Some(w);
        Ok(())
    }

    /// Everything pushed so far, from the start; the spool is left empty.
    /// The reader owns what it reads.
    pub fn drain(&mut self) -> Result<Box<dyn BufRead + Send>> {
        self.len = 0;
        match self.file.take() {
            None => {
                let mem = std::mem::take(&mut self.mem);
                Ok(Box::new(std::io::Cursor::new(mem)))
            }
            Some(w) => {
                let mut f = w
                    .into_inner()
                    .map_err(|e| Error::io("cannot write the spool file", e.into_error()))?;
                f.seek(SeekFrom::Start(0))
                    .map_err(|e| Error::io("cannot read the spool file", e))?;
                Ok(Box::new(BufReader::with_capacity(
                    1 << 16,
                    f.take(u64::MAX),
                )))
            }
        }
    }
}

/// A drained spool whose parts can be read at once from several threads
/// (ClickHouse sends two inserts at a time).
#[derive(Clone)]
pub enum Shared {
    Mem(std::sync::Arc<Vec<u8>>),
    File(std::sync::Arc<File>),
}

impl Spool {
    /// [`Spool::drain`], shared: read any part of it with [`Shared::part`].
    pub fn drain_shared(&mut self) -> Result<Shared> {
        self.len = 0;
        match self.file.take() {
            None => Ok(Shared::Mem(std::sync::Arc::new(std::mem::take(
                &mut self.mem,
            )))),
            Some(w) => {
                let f = w
                    .into_inner()
                    .map_err(|e| Error::io("cannot write the spool file", e.into_error()))?;
                Ok(Shared::File(std::sync::Arc::new(f)))
            }
        }
    }
}

impl Shared {
    /// The `len` bytes from `start`, as a reader of its own.
    pub fn part(&self, start: u64, len: u64) -> Part {
        Part {
            src: self.clone(),
            pos: start,
            end: start + len,
        }
    }
}

/// Part of a [`Shared`] spool.
pub struct Part {
    src: Shared,
    pos: u64,
    end: u64,
}

impl Read for Part {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let want = buf.len().min((self.end - self.pos) as usize);
        if want == 0 {
            return Ok(0);
        }
        let n = match &self.src {
            Shared::Mem(v) => {
                let from = &v[(self.pos as usize).min(v.len())..];
                let n = want.min(from.len());
                buf[..n].copy_from_slice(&from[..n]);
                n
            }
            Shared::File(f) => {
                use std::os::unix::fs::FileExt;
                f.read_at(&mut buf[..want], self.pos)?
            }
        };
        if n == 0 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                "the held rows ended before the part's length",
            ));
        }
        self.pos += n as u64;
        Ok(n)
    }
}
