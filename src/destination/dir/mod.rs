//! An archive of batch files (`dir:PATH`): each batch applied, or several
//! by size and age, becomes a file `PATH/batch-<start>-<end>.jsonl` named
//! by its interval, written atomically and durably with its SHA-256 in a
//! sidecar beside it. The cursor is the end of the last file, so
//! `capture --after "$(mooncdc-apply cursor --target dir:PATH)"` resumes it
//! exactly, and `mooncdc-merge PATH/*.jsonl` replays it. Written against
//! the driver's hooks alone (docs/ARCHITECTURE.md, "Adding a target");
//! docs/TOOLS.md, "Archives", is the user's side.

mod archive;
mod group;
mod hooks;
pub mod sidecar;

use super::{driver, ApplyStats, Target};
use crate::error::{Error, Result};
use crate::wire::{BatchStreamReader, Cursor, DynRead, Schema, SnapshotReader};
use group::{CloseAfter, Group, Shared};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// A file's size and age limits when batches are grouped and only one of
/// them is given.
pub const DEFAULT_MAX_BYTES: u64 = 64 << 20;
pub const DEFAULT_MAX_AGE: Duration = Duration::from_secs(60);

/// A `dir:` URL, parsed: `dir:PATH[?max-bytes=N&max-age=SECONDS&prefix=P]`.
#[derive(Debug, Clone, PartialEq)]
pub struct DirConfig {
    pub path: PathBuf,
    /// The files' name prefix (`batch`, as `mooncdc-split --output-dir`).
    pub prefix: String,
    pub max_bytes: Option<u64>,
    pub max_age: Option<Duration>,
}

impl DirConfig {
    /// Parse what follows `dir:`.
    pub fn parse(rest: &str) -> Result<DirConfig> {
        let rest = rest.strip_prefix("//").unwrap_or(rest);
        let (path, query) = match rest.split_once('?') {
            Some((p, q)) => (p, q),
            None => (rest, ""),
        };
        if path.is_empty() {
            return Err(Error::usage(
                "dir: URL needs a folder, e.g. dir:/var/lib/archive",
            ));
        }
        let mut c = DirConfig {
            path: PathBuf::from(path),
            prefix: "batch".into(),
            max_bytes: None,
            max_age: None,
        };
        for kv in query.split('&').filter(|kv| !kv.is_empty()) {
            let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
            let bad = |what: &str| Error::usage(format!("dir: URL option {k}={v:?}: {what}"));
            match k {
                "max-bytes" => {
                    c.max_bytes = Some(
                        v.parse::<u64>()
                            .ok()
                            .filter(|&n| n > 0)
                            .ok_or_else(|| bad("a positive number of bytes"))?,
                    )
                }
                "max-age" => {
                    c.max_age = Some(
                        v.parse::<f64>()
                            .ok()
                            .and_then(|s| Duration::try_from_secs_f64(s).ok())
                            .ok_or_else(|| bad("a number of seconds, 0 or more"))?,
                    )
                }
                "prefix" => {
                    if v.is_empty() || v.contains(['/', '\\']) || v.starts_with('.') {
                        return Err(bad(
                            "a file name prefix, not empty, without / or \\, not starting with .",
                        ));
                    }
                    c.prefix = v.to_string();
                }
                _ => {
                    return Err(Error::usage(format!(
                        "unknown dir: URL option {k:?} (max-bytes, max-age, prefix); a folder's path cannot hold ?"
                    )))
                }
            }
        }
        Ok(c)
    }

    /// For messages.
    pub fn display(&self) -> String {
        format!("dir:{}", self.path.display())
    }

    fn close_after(&self) -> CloseAfter {
        match (self.max_bytes, self.max_age) {
            (None, None) => CloseAfter::EachBatch,
            (b, a) => CloseAfter::Grouped {
                bytes: b.unwrap_or(DEFAULT_MAX_BYTES),
                age: a.unwrap_or(DEFAULT_MAX_AGE),
            },
        }
    }
}

/// The archive, as a target. Nothing is made until a batch comes.
pub struct DirTarget {
    config: DirConfig,
    /// Once a batch came: the folder, locked, and the file being written.
    open: Option<Opened>,
    committed: ApplyStats,
    batch: hooks::Batch,
    /// The schemas in force at the cursor, when known.
    at_cursor: Option<Option<Vec<Schema>>>,
}

struct Opened {
    shared: Arc<Shared>,
    flusher: Option<std::thread::JoinHandle<()>>,
    /// Held (an advisory lock) while this target writes the folder.
    _lock: std::fs::File,
}

impl DirTarget {
    pub fn new(config: DirConfig) -> DirTarget {
        DirTarget {
            config,
            open: None,
            committed: ApplyStats::default(),
            batch: hooks::Batch::default(),
            at_cursor: None,
        }
    }

    /// Make and lock the folder, clear what a killed writer left (its
    /// temporary files, a sidecar whose file never came), and read the
    /// cursor from the last file, checked against its sidecar.
    fn open(&mut self) -> Result<&Shared> {
        if self.open.is_none() {
            let dir = &self.config.path;
            let name = dir.display().to_string();
            // The new folders' names are durable before a file is in them.
            crate::cli::sync_made_folders(&crate::cli::make_private_folder(dir)?)?;
            let lock = std::os::unix::fs::OpenOptionsExt::mode(
                std::fs::OpenOptions::new()
                    .create(true)
                    .truncate(false)
                    .write(true),
                0o600,
            )
            .open(dir.join(format!("{}.lock", archive::HIDDEN)))
            .map_err(|e| Error::io("cannot open the archive's lock", e).in_file(&name))?;
            use rustix::fs::{flock, FlockOperation};
            match flock(&lock, FlockOperation::NonBlockingLockExclusive) {
                Ok(()) => {}
                Err(e) if e == rustix::io::Errno::WOULDBLOCK => {
                    return Err(Error::state(format!(
                        "another mooncdc-apply is writing to the archive {}: one writer at a time",
                        self.config.display()
                    )))
                }
                Err(e) => return Err(Error::io("cannot lock the archive", e.into()).in_file(&name)),
            }
            // A killed writer leaves temporary files, and at most one sidecar
            // without its file: one that starts where the archive ends (a
            // sidecar of a file moved away on purpose is left alone).
            let entries = archive::entries(dir)?;
            let last = archive::last_of(&entries, &self.config.prefix);
            for e in &entries {
                let n = e.file_name();
                let n = n.to_string_lossy();
                let stale = (n.starts_with(archive::HIDDEN) && n.ends_with(".tmp"))
                    || n.strip_suffix(".sha256").is_some_and(|data| {
                        archive::interval(&self.config.prefix, data)
                            .is_some_and(|(start, _)| last.as_ref().is_none_or(|l| start >= l.end))
                            && !dir.join(data).exists()
                    });
                if stale {
                    std::fs::remove_file(e.path()).map_err(|err| {
                        Error::io("cannot remove a file a killed writer left", err)
                            .in_file(&e.path().display().to_string())
                    })?;
                }
            }
            let held = match last {
                Some(f) => {
                    let mut file = archive::open(&f.path)?;
                    sidecar::check(&f.path, &mut file)?;
                    Some(archive::end_of(&f, &mut file)?)
                }
                None => None,
            };
            let close_after = self.config.close_after();
            let shared = Arc::new(Shared {
                group: std::sync::Mutex::new(Group::new(
                    dir.clone(),
                    self.config.prefix.clone(),
                    close_after,
                    held,
                )),
                wake: std::sync::Condvar::new(),
            });
            let flusher = match close_after {
                CloseAfter::EachBatch => None,
                CloseAfter::Grouped { .. } => {
                    let s = shared.clone();
                    Some(
                        std::thread::Builder::new()
                            .name("archive".into())
                            .spawn(move || group::flusher(s))
                            .map_err(|e| Error::io("cannot start the archive's thread", e))?,
                    )
                }
            };
            self.open = Some(Opened {
                shared,
                flusher,
                _lock: lock,
            });
        }
        Ok(&self.open.as_ref().expect("opened above").shared)
    }

    fn shared(&self) -> &Shared {
        &self
            .open
            .as_ref()
            .expect("opened at the first batch")
            .shared
    }

    /// The schemas in force at the cursor: known from the batches this
    /// target wrote, else read from the archive's last file.
    fn schemas_at_cursor(&mut self) -> Result<Option<Vec<Schema>>> {
        if self.at_cursor.is_none() {
            self.at_cursor = Some(match archive::last_file(&self.config)? {
                Some(f) => archive::schemas_at_end(&f)?,
                None => None,
            });
        }
        Ok(self.at_cursor.clone().flatten())
    }

    /// Close what waits into a file (at the end of the input, after a
    /// failure, at a stop).
    fn close_group(&mut self) -> Result<()> {
        match &self.open {
            Some(o) => o.shared.lock().close(),
            None => Ok(()),
        }
    }
}

impl Drop for DirTarget {
    fn drop(&mut self) {
        if let Some(o) = self.open.take() {
            o.shared.lock().closed = true;
            o.shared.wake.notify_all();
            if let Some(t) = o.flusher {
                let _ = t.join();
            }
        }
    }
}

impl Target for DirTarget {
    fn cursor(&self) -> Result<Option<Cursor>> {
        match &self.open {
            Some(o) => Ok(o.shared.lock().held.clone()),
            None => archive::read_cursor(&self.config),
        }
    }

    fn apply_stream(
        &mut self,
        input: &mut BatchStreamReader<DynRead>,
        progress: &mut dyn FnMut(&ApplyStats),
    ) -> Result<ApplyStats> {
        let held = self.cursor()?;
        let mut committed = ApplyStats::default();
        let r = driver::apply_batches(self, input, held, &mut committed, progress);
        // Whole batches waiting are written also when a later one failed.
        let closed = self.close_group();
        if let Some(o) = &self.open {
            let mut g = o.shared.lock();
            g.reading = false;
            // Batches that never reached a file are not committed.
            let (batches, events) = std::mem::take(&mut g.dropped);
            committed.batches = committed.batches.saturating_sub(batches);
            committed.applied = committed.applied.saturating_sub(events);
            committed.cursor = g.held.clone();
        }
        self.committed = committed;
        match (r, closed) {
            (Err(e), Err(c)) => {
                crate::cli::report_error(&c);
                Err(e)
            }
            (Err(e), Ok(())) | (Ok(_), Err(e)) => Err(e),
            (Ok(s), Ok(())) => Ok(s),
        }
    }

    fn apply_snapshot(
        &mut self,
        input: &mut SnapshotReader<DynRead>,
        _progress: &mut dyn FnMut(&ApplyStats),
    ) -> Result<ApplyStats> {
        Err(Error::data(format!(
            "{} archives batch streams, not snapshots: keep the snapshot as a file of its own (mooncdc-snapshot -o FILE), and start the archive at its cursor (mooncdc-capture --after CURSOR | mooncdc-apply --target {})",
            self.config.display(),
            self.config.display()
        ))
        .in_file(input.name()))
    }

    fn committed(&self) -> ApplyStats {
        self.committed.clone()
    }
}
