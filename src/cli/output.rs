//! Outputs: standard output, files written atomically and durably with
//! owner-only permissions, and `--output-dir` pieces (one file a batch).

use super::*;
use crate::error::{Error, Result};
use crate::ops::OutputFormat;
use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};

/// An output option: `None` or `-` is standard output.
pub fn output_path(o: &Option<PathBuf>) -> Option<&Path> {
    o.as_deref().filter(|p| *p != Path::new("-"))
}

/// The paths to read: the files given, or standard input when none.
pub fn input_paths(files: &[PathBuf]) -> Vec<Option<&Path>> {
    if files.is_empty() {
        vec![None]
    } else {
        files.iter().map(|p| Some(p.as_path())).collect()
    }
}

/// Standard output, buffered; a closed pipe is reported as such and ends quietly.
pub fn stdout() -> std::io::BufWriter<std::io::StdoutLock<'static>> {
    std::io::BufWriter::with_capacity(1 << 16, std::io::stdout().lock())
}

/// Flush an output, mapping failure to an I/O error.
pub fn finish_output<W: Write>(mut w: W) -> Result<()> {
    w.flush().map_err(|e| Error::io("cannot write output", e))
}

/// The folder a path's file is in (`.` for a bare name).
fn folder_of(path: &Path) -> &Path {
    match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    }
}

/// Make a folder's entries durable (a rename into it, a file made in it).
/// A file system that cannot sync folders (some network and FUSE ones), or
/// a folder that cannot be opened for reading, gets a warning: the files
/// are in place, only their names' durability is not known.
pub fn sync_folder(dir: &Path) -> Result<()> {
    use std::io::ErrorKind as K;
    match std::fs::File::open(dir).and_then(|d| d.sync_all()) {
        Ok(()) => Ok(()),
        Err(e)
            if matches!(
                e.kind(),
                K::Unsupported | K::PermissionDenied | K::InvalidInput
            ) =>
        {
            crate::log::warn(
                &format!(
                    "cannot sync folder {} ({}): the files in it are whole, but a crash could lose their names",
                    dir.display(),
                    crate::error::root_cause(&e)
                ),
                &[],
            );
            Ok(())
        }
        Err(e) => Err(Error::io("cannot sync the folder", e).in_file(&dir.display().to_string())),
    }
}

/// The mode of a new output file (`-o FILE`, `--output-dir` pieces), less
/// the umask; docs/TOOLS.md "Inputs and outputs".
pub const OUTPUT_MODE: u32 = 0o600;

/// Write a file atomically: a temporary file in the same folder, synced,
/// renamed into place, and the folder synced, so that once this returns the
/// file is there whole after a crash too.
pub fn write_atomically(
    path: &Path,
    write: impl FnOnce(&mut dyn Write) -> Result<()>,
) -> Result<()> {
    write_atomically_unsynced(path, write)?;
    sync_folder(folder_of(path))
}

/// [`write_atomically`] but for the folder's sync, which the caller makes
/// (once for many files) before it reports success.
fn write_atomically_unsynced(
    path: &Path,
    write: impl FnOnce(&mut dyn Write) -> Result<()>,
) -> Result<()> {
    let tmp = write_temporary(path, write)?;
    sync_into_place(tmp, path)
}

/// A temporary file beside `path`, written by `write` and not yet synced
/// (deleted if dropped).
fn write_temporary(
    path: &Path,
    write: impl FnOnce(&mut dyn Write) -> Result<()>,
) -> Result<tempfile::NamedTempFile> {
    let dir = folder_of(path);
    let name = path.display().to_string();
    // The file holds a copy of the database's rows: readable by its owner
    // only (0600, less the umask), as pg_dump's output is. A file it
    // replaces keeps the mode its owner gave it, as writing over it would.
    let tmp = tempfile::Builder::new()
        .prefix(".mooncdc-")
        .suffix(".tmp")
        .permissions(std::os::unix::fs::PermissionsExt::from_mode(OUTPUT_MODE))
        .tempfile_in(dir)
        .map_err(|e| Error::io("cannot create a temporary file", e).in_file(&name))?;
    if let Ok(existing) = std::fs::metadata(path) {
        if existing.is_file() {
            tmp.as_file()
                .set_permissions(existing.permissions())
                .map_err(|e| {
                    Error::io("cannot give the new file the existing one's mode", e).in_file(&name)
                })?;
        }
    }
    let mut w = std::io::BufWriter::with_capacity(1 << 16, tmp);
    write(&mut w)?;
    w.into_inner()
        .map_err(|e| Error::io("cannot write", e.into_error()).in_file(&name))
}

/// Sync a written temporary file and rename it to `path`: after a crash the
/// file is there whole or not at all.
fn sync_into_place(tmp: tempfile::NamedTempFile, path: &Path) -> Result<()> {
    let name = path.display().to_string();
    tmp.as_file()
        .sync_all()
        .map_err(|e| Error::io("cannot sync", e).in_file(&name))?;
    tmp.persist(path)
        .map_err(|e| Error::io("cannot rename into place", e.error).in_file(&name))?;
    Ok(())
}

pub fn output_format(s: args::Format) -> OutputFormat {
    match s {
        args::Format::Jsonl => OutputFormat::Jsonl,
        args::Format::Json => OutputFormat::Json,
        args::Format::Objects => OutputFormat::Objects,
    }
}

/// Writes each batch to its own file `DIR/P-<start>-<end>.jsonl` (or `.json`),
/// atomically, and prints each path written.
pub struct DirSink<'a, W: Write> {
    dir: PathBuf,
    /// Folders `new` made (the output folder and any new parents), whose
    /// parents' entries must be synced too.
    made: Vec<PathBuf>,
    prefix: String,
    format: OutputFormat,
    paths: &'a mut W,
    syncer: Syncer,
}

/// Pieces written, synced and renamed into place on a thread of their own,
/// in order, so that one piece's sync overlaps the writing of the next. At
/// most two wait. After a failure no later piece is renamed into place (its
/// temporary file is deleted): the pieces in place are always the first
/// ones, with no gap.
struct Syncer {
    tx: Option<std::sync::mpsc::SyncSender<(tempfile::NamedTempFile, PathBuf)>>,
    /// Each piece in place, in order, or the failure that stopped them.
    done: std::sync::mpsc::Receiver<Result<PathBuf>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Syncer {
    fn start() -> Result<Syncer> {
        let (tx, rx) = std::sync::mpsc::sync_channel::<(tempfile::NamedTempFile, PathBuf)>(2);
        let (done_tx, done) = std::sync::mpsc::channel();
        let thread = std::thread::Builder::new()
            .name("sync".into())
            .spawn(move || {
                let mut failed = false;
                for (tmp, path) in rx {
                    if failed {
                        continue;
                    }
                    let r = sync_into_place(tmp, &path).map(|_| path);
                    failed = r.is_err();
                    if done_tx.send(r).is_err() {
                        return;
                    }
                }
            })
            .map_err(|e| Error::io("cannot start the sync thread", e))?;
        Ok(Syncer {
            tx: Some(tx),
            done,
            thread: Some(thread),
        })
    }
}

/// Make `dir` and any missing parents, the owner's only (0700, less the
/// umask), as the files that go in them are. Returns the folders made,
/// whose parents' entries must be synced ([`sync_folder`] of each one's
/// parent) before a file in them counts as durable.
pub fn make_private_folder(dir: &Path) -> Result<Vec<PathBuf>> {
    let made: Vec<PathBuf> = dir
        .ancestors()
        .take_while(|d| !d.as_os_str().is_empty() && !d.exists())
        .map(Path::to_path_buf)
        .collect();
    std::os::unix::fs::DirBuilderExt::mode(std::fs::DirBuilder::new().recursive(true), 0o700)
        .create(dir)
        .map_err(|e| {
            Error::io("cannot create the output folder", e).in_file(&dir.display().to_string())
        })?;
    Ok(made)
}

/// Sync the parent of each folder [`make_private_folder`] made.
pub fn sync_made_folders(made: &[PathBuf]) -> Result<()> {
    for d in made {
        sync_folder(folder_of(d))?;
    }
    Ok(())
}

impl<'a, W: Write> DirSink<'a, W> {
    pub fn new(dir: &Path, prefix: &str, format: OutputFormat, paths: &'a mut W) -> Result<Self> {
        let made = make_private_folder(dir)?;
        Ok(DirSink {
            dir: dir.to_path_buf(),
            made,
            prefix: prefix.to_string(),
            format,
            paths,
            syncer: Syncer::start()?,
        })
    }

    /// Name the pieces now in place, in order (a piece's path is printed
    /// only once it is there); the failure that stopped them, if any.
    fn report(&mut self, wait: bool) -> Result<()> {
        loop {
            let next = if wait {
                self.syncer.done.recv().ok()
            } else {
                self.syncer.done.try_recv().ok()
            };
            let Some(r) = next else {
                return Ok(());
            };
            let path = r?;
            writeln!(self.paths, "{}", path.display())
                .map_err(|e| Error::io("cannot write output", e))?;
        }
    }

    /// Wait for the pieces handed over to be in place, then make their
    /// names durable: the folder synced once, after the last piece (each
    /// piece's data was synced before its rename), and the parent of each
    /// folder `new` made. Called also when the split failed, for the pieces
    /// written before the failure.
    pub fn finish(&mut self) -> Result<()> {
        drop(self.syncer.tx.take());
        let stopped = match self.syncer.thread.take() {
            Some(t) => t.join().is_err(),
            None => false,
        };
        let mut placed = self.report(true);
        if stopped && placed.is_ok() {
            placed = Err(Error::io(
                "cannot sync",
                std::io::Error::other("the sync thread stopped"),
            ));
        }
        sync_folder(&self.dir)?;
        sync_made_folders(&self.made)?;
        placed
    }
}

impl<W: Write> crate::ops::BatchSink for DirSink<'_, W> {
    fn batch(
        &mut self,
        header: &crate::wire::Header,
        events: &mut dyn BufRead,
        commit: &crate::wire::Commit,
    ) -> Result<()> {
        let ext = match self.format {
            OutputFormat::Jsonl => "jsonl",
            OutputFormat::Json => "json",
            OutputFormat::Objects => "objects.jsonl",
        };
        let path = self.dir.join(format!(
            "{}-{}-{}.{ext}",
            self.prefix,
            header.start.sequence(),
            commit.end.sequence()
        ));
        let format = self.format;
        let tmp = write_temporary(&path, |w| {
            crate::ops::write_batch(w, format, header, events, commit)
                .map_err(|e| Error::io("cannot write", e).in_file(&path.display().to_string()))
        })?;
        let sent = match &self.syncer.tx {
            Some(tx) => tx.send((tmp, path)).is_ok(),
            None => false,
        };
        if !sent {
            // The sync thread stopped: its failure, if it said one.
            self.report(true)?;
            return Err(Error::io(
                "cannot sync",
                std::io::Error::other("the sync thread stopped"),
            ));
        }
        self.report(false)
    }

    fn takes_schema_records(&self) -> bool {
        self.format != OutputFormat::Json
    }
}
