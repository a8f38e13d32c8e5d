//! The file being written: whole batches (pieces) that wait to be closed
//! into an archive file, and the piece in progress after them. Closing
//! syncs the data, writes the sidecar into place, then renames the data
//! into place: a file in the archive always has its sidecar, and the
//! archive's cursor (the end of its last file) only ever names batches
//! that are whole on disk.

use super::archive::{self, HIDDEN};
use super::sidecar;
use crate::error::{Error, Result};
use crate::util::stop::Busy;
use crate::wire::Cursor;
use std::io::{BufWriter, Seek, SeekFrom, Write};
use std::path::PathBuf;
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// When a file is closed: after every batch, or once it holds `bytes` or
/// its first batch is `age` old.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum CloseAfter {
    EachBatch,
    Grouped { bytes: u64, age: Duration },
}

pub(super) struct Group {
    dir: PathBuf,
    prefix: String,
    close_after: CloseAfter,
    file: Option<BufWriter<tempfile::NamedTempFile>>,
    /// The first whole piece's start and the last one's end.
    start: Option<Cursor>,
    end: Option<Cursor>,
    /// Bytes of the whole pieces, and written in all.
    whole: u64,
    written: u64,
    /// When the first whole piece was done.
    since: Option<Instant>,
    /// A batch is in progress (the flusher leaves the file alone).
    pub in_batch: bool,
    /// The apply is between two batches, reading (only then may a stop
    /// end the process from the flusher: not after a failure, whose error
    /// the apply reports).
    pub reading: bool,
    /// Whole pieces waiting, and their events.
    pieces: u64,
    events: u64,
    /// Pieces (and events) that were whole but never reached a file (a
    /// close that failed): the apply's totals do not count them.
    pub dropped: (u64, u64),
    /// The end of the archive's last file.
    pub held: Option<Cursor>,
    /// While whole pieces wait, a stop waits for them to be closed.
    waiting: Option<Busy>,
    /// The target is gone: the flusher ends.
    pub closed: bool,
}

/// The group and what wakes its flusher.
pub(super) struct Shared {
    pub group: Mutex<Group>,
    pub wake: Condvar,
}

impl Shared {
    pub fn lock(&self) -> MutexGuard<'_, Group> {
        // A panic elsewhere leaves the group as it was between two writes.
        self.group.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Group {
    pub fn new(
        dir: PathBuf,
        prefix: String,
        close_after: CloseAfter,
        held: Option<Cursor>,
    ) -> Group {
        Group {
            dir,
            prefix,
            close_after,
            file: None,
            start: None,
            end: None,
            whole: 0,
            written: 0,
            since: None,
            in_batch: false,
            reading: false,
            pieces: 0,
            events: 0,
            dropped: (0, 0),
            held,
            waiting: None,
            closed: false,
        }
    }

    /// The cursor held, counting the whole pieces not yet closed.
    pub fn cursor(&self) -> Option<Cursor> {
        self.end.clone().or_else(|| self.held.clone())
    }

    fn name(&self) -> String {
        self.dir.display().to_string()
    }

    /// A temporary file in the archive (0600, less the umask), named so the
    /// next writer knows a killed one left it.
    fn temporary(&self) -> std::io::Result<tempfile::NamedTempFile> {
        tempfile::Builder::new()
            .prefix(&format!("{HIDDEN}-"))
            .suffix(".tmp")
            .permissions(std::os::unix::fs::PermissionsExt::from_mode(
                crate::cli::OUTPUT_MODE,
            ))
            .tempfile_in(&self.dir)
    }

    /// Write a line of the piece in progress. Its bytes count as written
    /// before the write, so a write that fails part-way is cut back too.
    pub fn write(&mut self, bytes: &[u8]) -> Result<()> {
        if self.file.is_none() {
            let tmp = self.temporary().map_err(|e| {
                Error::io("cannot create a file in the archive", e).in_file(&self.name())
            })?;
            self.file = Some(BufWriter::with_capacity(1 << 16, tmp));
        }
        let name = self.name();
        self.written += bytes.len() as u64;
        self.file
            .as_mut()
            .expect("opened above")
            .write_all(bytes)
            .map_err(|e| Error::io("cannot write to the archive", e).in_file(&name))
    }

    /// The piece in progress is whole: it ends at `end`, with `events`.
    pub fn piece_done(&mut self, start: &Cursor, end: Cursor, events: u64) {
        self.whole = self.written;
        self.pieces += 1;
        self.events += events;
        if self.start.is_none() {
            self.start = Some(start.clone());
            self.since = Some(Instant::now());
            self.waiting = Some(Busy::new());
        }
        self.end = Some(end);
    }

    /// Forget the piece in progress: the file is cut back to its whole
    /// pieces. One that cannot be cut is dropped whole (its pieces never
    /// reached the archive's cursor, so they are read again): `false`.
    pub fn discard_piece(&mut self) -> bool {
        if self.written == self.whole {
            return true;
        }
        let whole = self.whole;
        // What the buffer holds goes to the file first: the whole pieces
        // may still be in it.
        let cut = self.file.take().and_then(|mut w| {
            let ok = w.flush().is_ok()
                && w.get_ref().as_file().set_len(whole).is_ok()
                && w.get_mut().seek(SeekFrom::Start(whole)).is_ok();
            ok.then_some(w)
        });
        match cut {
            Some(w) => {
                self.file = Some(w);
                self.written = whole;
                true
            }
            None => {
                crate::log::warn(
                    &format!(
                        "cannot cut a rolled-back batch out of the file being written in {}: the batches waiting in it are dropped and will be read again",
                        self.name()
                    ),
                    &[],
                );
                self.reset();
                false
            }
        }
    }

    fn reset(&mut self) {
        self.dropped.0 += self.pieces;
        self.dropped.1 += self.events;
        self.pieces = 0;
        self.events = 0;
        self.file = None;
        self.start = None;
        self.end = None;
        self.whole = 0;
        self.written = 0;
        self.since = None;
        self.waiting = None;
    }

    /// Whether the whole pieces waiting should be closed into a file now.
    pub fn due(&self) -> bool {
        match (self.close_after, self.since) {
            (_, None) => false,
            (CloseAfter::EachBatch, Some(_)) => true,
            (CloseAfter::Grouped { bytes, age }, Some(t)) => {
                self.whole >= bytes || t.elapsed() >= age
            }
        }
    }

    /// Close the whole pieces waiting into an archive file, durably. Only
    /// between batches. On failure nothing of them is in the archive and
    /// its cursor has not moved.
    pub fn close(&mut self) -> Result<()> {
        debug_assert!(self.written == self.whole, "only between batches");
        let (Some(start), Some(end)) = (self.start.clone(), self.end.clone()) else {
            // An empty file (a batch rolled back) is deleted.
            self.file = None;
            return Ok(());
        };
        let w = self.file.take().expect("whole pieces are in a file");
        let r = self.place(w, &start, &end);
        if r.is_ok() {
            self.pieces = 0;
            self.events = 0;
            self.held = Some(end);
        }
        self.reset();
        r
    }

    fn place(
        &self,
        w: BufWriter<tempfile::NamedTempFile>,
        start: &Cursor,
        end: &Cursor,
    ) -> Result<()> {
        let name = archive::name(&self.prefix, start.sequence(), end.sequence());
        let path = self.dir.join(&name);
        let shown = path.display().to_string();
        let io = |what: &'static str| {
            let shown = shown.clone();
            move |e| Error::io(what, e).in_file(&shown)
        };
        let mut tmp = w
            .into_inner()
            .map_err(|e| e.into_error())
            .map_err(io("cannot write"))?;
        tmp.as_file().sync_all().map_err(io("cannot sync"))?;
        tmp.seek(SeekFrom::Start(0))
            .map_err(io("cannot read back"))?;
        let hex = sidecar::digest(&mut tmp).map_err(io("cannot read back"))?;
        // The sidecar first: a file in place always has one.
        let mut side = self
            .temporary()
            .map_err(io("cannot create a file in the archive"))?;
        side.write_all(sidecar::line(&hex, &name).as_bytes())
            .and_then(|_| side.as_file().sync_all())
            .map_err(io("cannot write the sidecar"))?;
        side.persist(sidecar::path_of(&path))
            .map_err(|e| e.error)
            .map_err(io("cannot rename the sidecar into place"))?;
        crate::cli::sync_folder(&self.dir)?;
        tmp.persist(&path)
            .map_err(|e| e.error)
            .map_err(io("cannot rename into place"))?;
        crate::cli::sync_folder(&self.dir)
    }
}

/// Close files that are due while the input is quiet (no batch comes to
/// close them), and on a stop asked for while the apply waits for its next
/// batch: write what waits, then exit 0 as the stop handler would have (it
/// did not: the batches waiting hold it off).
pub(super) fn flusher(shared: std::sync::Arc<Shared>) {
    let mut g = shared.lock();
    loop {
        g = shared
            .wake
            .wait_timeout(g, Duration::from_millis(100))
            .unwrap_or_else(|p| p.into_inner())
            .0;
        if g.closed {
            return;
        }
        if g.in_batch {
            continue;
        }
        let stop = crate::util::stop::requested();
        if stop || g.due() {
            if let Err(e) = g.close() {
                // Nobody else would hear of it while the input is quiet.
                crate::cli::report_error(&e);
                std::process::exit(1);
            }
        }
        if stop && g.reading {
            std::process::exit(0);
        }
    }
}
