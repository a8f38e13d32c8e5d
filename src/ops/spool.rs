//! A holding area for a batch's encoded records until the batch is proven valid.
//!
//! Tools may not emit any part of a batch before its commit has been checked,
//! or a downstream target could apply half of a bad batch. A spool keeps the
//! records in memory up to a limit and beyond it in an unnamed temporary file
//! (deleted by the system when closed), so memory never depends on input size.
//!
//! The file goes in the folder `--spool-dir` names ([`set_dir`]), else in
//! `TMPDIR`, else `/tmp`; a failure to create or write it names that folder,
//! where its name came from, what was held, and the way out (docs/TOOLS.md
//! "Spool files").

use crate::error::{Error, ErrorKind, Result};
use std::fs::File;
use std::io::{BufRead, BufReader, BufWriter, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

/// Default in-memory part of a spool.
pub const DEFAULT_SPOOL_MEMORY: usize = 8 << 20;

/// The folder `--spool-dir` named, for every spool of this process.
static DIR: std::sync::RwLock<Option<PathBuf>> = std::sync::RwLock::new(None);

/// Put this process's spool files in `dir` (`--spool-dir`) instead of
/// `TMPDIR`. It must be an existing folder: a usage error otherwise, at the
/// start rather than at the first large batch.
pub fn set_dir(dir: Option<&Path>) -> Result<()> {
    if let Some(d) = dir {
        if !d.is_dir() {
            return Err(Error::usage(format!(
                "--spool-dir {}: {}",
                d.display(),
                if d.exists() {
                    "not a folder"
                } else {
                    "no such folder"
                }
            )));
        }
    }
    *DIR.write().unwrap_or_else(|e| e.into_inner()) = dir.map(Path::to_path_buf);
    Ok(())
}

/// Where spool files go now, and what chose that folder.
pub fn dir() -> (PathBuf, &'static str) {
    if let Some(d) = DIR.read().unwrap_or_else(|e| e.into_inner()).clone() {
        return (d, "--spool-dir");
    }
    let from = match std::env::var_os("TMPDIR") {
        Some(v) if !v.is_empty() => "TMPDIR",
        _ => "the default: TMPDIR is not set",
    };
    (std::env::temp_dir(), from)
}

/// A spool file that could not be created, written or read back: in which
/// folder, chosen by what, how much was held, and how to get room.
fn spool_error(what: &str, held: u64, spool: &Spool, e: std::io::Error) -> Error {
    let (dir, from) = dir();
    let mib = |n: u64| format!("{:.1} MiB", n as f64 / (1 << 20) as f64);
    Error::new(
        ErrorKind::Io,
        format!(
            "cannot {what} the spool file in {} ({from}): {}; {} waits there, past its first {} in memory, {} ({} held when this failed): give a folder with room for the largest with --spool-dir DIR (or TMPDIR=DIR){}",
            dir.display(),
            crate::error::strip_os_error(&e.to_string()),
            spool.holds.0,
            mib(spool.mem_limit as u64),
            spool.holds.1,
            mib(held),
            spool.advice.map(|a| format!(", {a}")).unwrap_or_default(),
        ),
    )
}

pub struct Spool {
    mem: Vec<u8>,
    file: Option<BufWriter<File>>,
    mem_limit: usize,
    len: u64,
    /// What waits in the spool, and until when, for messages.
    holds: (&'static str, &'static str),
    /// Another way out, said after the folder's.
    advice: Option<&'static str>,
}

impl Spool {
    pub fn new(mem_limit: usize) -> Self {
        Spool {
            mem: Vec::new(),
            file: None,
            mem_limit,
            len: 0,
            holds: ("a batch", "until its commit is checked"),
            advice: None,
        }
    }

    /// Say what waits in the spool, and until when, for its messages
    /// (default: "a batch", "until its commit is checked").
    pub fn holding(mut self, what: &'static str, until: &'static str) -> Self {
        self.holds = (what, until);
        self
    }

    /// Another way out than room, for the message when the file fails.
    pub fn advising(mut self, advice: &'static str) -> Self {
        self.advice = Some(advice);
        self
    }

    /// Bytes held.
    pub fn len(&self) -> u64 {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    fn error(&self, what: &str, e: std::io::Error) -> Error {
        spool_error(what, self.len, self, e)
    }

    /// Bytes held in memory (the rest is in the file).
    pub fn in_memory(&self) -> usize {
        self.mem.len()
    }

    /// Move what is held in memory to the file now (a budget shared by
    /// several spools decides when, not each spool's own limit); later
    /// pushes go to the file too.
    pub fn spill(&mut self) -> Result<()> {
        if self.file.is_some() {
            return Ok(());
        }
        let f = tempfile::tempfile_in(dir().0).map_err(|e| self.error("create", e))?;
        let mut w = BufWriter::with_capacity(1 << 16, f);
        w.write_all(&self.mem).map_err(|e| self.error("write", e))?;
        self.mem = Vec::new();
        self.file = Some(w);
        Ok(())
    }

    /// Forget everything after the first `len` bytes (a rolled-back part
    /// of what was held); later pushes follow them.
    pub fn truncate(&mut self, len: u64) -> Result<()> {
        if len >= self.len {
            return Ok(());
        }
        match &mut self.file {
            None => self.mem.truncate(len as usize),
            Some(w) => {
                let r = w.flush().and_then(|_| {
                    let f = w.get_mut();
                    f.set_len(len)?;
                    f.seek(SeekFrom::Start(len)).map(|_| ())
                });
                if let Err(e) = r {
                    return Err(self.error("write", e));
                }
            }
        }
        self.len = len;
        Ok(())
    }

    pub fn push(&mut self, bytes: &[u8]) -> Result<()> {
        self.len += bytes.len() as u64;
        if let Some(f) = &mut self.file {
            return match f.write_all(bytes) {
                Ok(()) => Ok(()),
                Err(e) => Err(self.error("write", e)),
            };
        }
        if self.mem.len() + bytes.len() <= self.mem_limit {
            self.mem.extend_from_slice(bytes);
            return Ok(());
        }
        self.spill()?;
        let w = self.file.as_mut().expect("spilled to a file");
        match w.write_all(bytes) {
            Ok(()) => Ok(()),
            Err(e) => Err(self.error("write", e)),
        }
    }

    /// Everything pushed so far, from the start; the spool is left empty.
    /// The reader owns what it reads.
    pub fn drain(&mut self) -> Result<Box<dyn BufRead + Send>> {
        let held = std::mem::take(&mut self.len);
        match self.file.take() {
            None => {
                let mem = std::mem::take(&mut self.mem);
                Ok(Box::new(std::io::Cursor::new(mem)))
            }
            Some(w) => {
                let mut f = w
                    .into_inner()
                    .map_err(|e| spool_error("write", held, self, e.into_error()))?;
                f.seek(SeekFrom::Start(0))
                    .map_err(|e| spool_error("read", held, self, e))?;
                Ok(Box::new(BufReader::with_capacity(
                    1 << 16,
                    f.take(u64::MAX),
                )))
            }
        }
    }
}

impl Spool {
    /// Everything pushed so far, read from the start without taking it
    /// (later pushes go on after it).
    pub fn read_back(&mut self) -> Result<Box<dyn Read + '_>> {
        let len = self.len;
        let flushed = self.file.as_mut().map(|w| w.flush());
        match flushed {
            None => Ok(Box::new(&self.mem[..])),
            Some(Err(e)) => Err(self.error("write", e)),
            Some(Ok(())) => {
                let f = self.file.as_ref().expect("a file").get_ref();
                Ok(Box::new(BufReader::with_capacity(
                    1 << 16,
                    Behind {
                        f,
                        pos: 0,
                        end: len,
                    },
                )))
            }
        }
    }
}

/// A spool's file read from `pos` to `end` at those offsets, leaving the
/// file's own position (where pushes write) alone.
struct Behind<'a> {
    f: &'a File,
    pos: u64,
    end: u64,
}

impl Read for Behind<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        use std::os::unix::fs::FileExt;
        let want = buf.len().min((self.end - self.pos) as usize);
        if want == 0 {
            return Ok(0);
        }
        let n = self.f.read_at(&mut buf[..want], self.pos)?;
        self.pos += n as u64;
        Ok(n)
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
        let held = std::mem::take(&mut self.len);
        match self.file.take() {
            None => Ok(Shared::Mem(std::sync::Arc::new(std::mem::take(
                &mut self.mem,
            )))),
            Some(w) => {
                let f = w
                    .into_inner()
                    .map_err(|e| spool_error("write", held, self, e.into_error()))?;
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

#[cfg(test)]
mod tests {
    use super::*;

    fn read_all(s: &mut Spool) -> Vec<u8> {
        let mut v = Vec::new();
        s.drain().unwrap().read_to_end(&mut v).unwrap();
        v
    }

    #[test]
    fn read_back_gives_what_was_pushed_and_pushes_go_on_after_it() {
        // In memory, and in a file after a spill.
        for limit in [1 << 20, 4] {
            let mut s = Spool::new(limit);
            s.push(b"abc").unwrap();
            s.push(b"defgh").unwrap();
            let mut v = Vec::new();
            s.read_back().unwrap().read_to_end(&mut v).unwrap();
            assert_eq!(v, b"abcdefgh");
            s.push(b"ij").unwrap();
            assert_eq!(read_all(&mut s), b"abcdefghij");
        }
    }

    #[test]
    fn truncate_and_spill_keep_exactly_the_bytes_before_the_cut() {
        // In memory, in a file after a spill, and across the spill.
        for spill_at in [None, Some(0usize), Some(2), Some(3)] {
            let mut s = Spool::new(1 << 20);
            let mut want = Vec::new();
            for (i, piece) in [&b"abc"[..], b"defg", b"hij", b"klmno"].iter().enumerate() {
                if spill_at == Some(i) {
                    s.spill().unwrap();
                    assert_eq!(s.in_memory(), 0);
                }
                s.push(piece).unwrap();
                want.extend_from_slice(piece);
                if i == 2 {
                    s.truncate(5).unwrap();
                    want.truncate(5);
                    s.truncate(9).unwrap(); // beyond the end: nothing
                }
            }
            assert_eq!(s.len(), want.len() as u64);
            assert_eq!(read_all(&mut s), want, "spill at {spill_at:?}");
        }
    }
}
