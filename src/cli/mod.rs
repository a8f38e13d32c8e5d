//! What the binaries share: argument definitions, opening inputs with format
//! detection, output files written atomically, and error printing with exit
//! statuses (0 success, 1 bad data or failed operation, 2 usage).

pub mod args;

use crate::error::{Error, ErrorKind, Result};
use crate::ops::OutputFormat;
use crate::wire::{detect, BatchStreamReader, InputFormat, Limits, SnapshotReader};
use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

pub use crate::wire::DynRead;

/// One opened input, of the kind detected.
pub enum Input {
    Batches(BatchStreamReader<DynRead>),
    Snapshot(SnapshotReader<DynRead>),
}

/// The name used in messages for an input path (`-` is standard input).
pub fn input_name(path: Option<&Path>) -> String {
    match path {
        None => "<stdin>".to_string(),
        Some(p) if p == Path::new("-") => "<stdin>".to_string(),
        Some(p) => p.display().to_string(),
    }
}

/// Open a file (or standard input for `None` / `-`) and detect its format.
pub fn open_input(path: Option<&Path>, limits: Limits) -> Result<Input> {
    let name = input_name(path);
    let raw: Box<dyn std::io::Read + Send> = match path {
        Some(p) if p != Path::new("-") => Box::new(
            std::fs::File::open(p).map_err(|e| Error::io("cannot open input", e).in_file(&name))?,
        ),
        _ => Box::new(std::io::stdin()),
    };
    let (format, reader) =
        detect(raw).map_err(|e| Error::io("cannot read input", e).in_file(&name))?;
    Ok(match format {
        InputFormat::BatchJsonl => Input::Batches(BatchStreamReader::jsonl(reader, name, limits)),
        InputFormat::BatchJson => Input::Batches(BatchStreamReader::json(reader, name, limits)?),
        InputFormat::SnapshotJsonl => Input::Snapshot(SnapshotReader::jsonl(reader, name, limits)),
        InputFormat::SnapshotJson => Input::Snapshot(SnapshotReader::json(reader, name, limits)?),
    })
}

/// Open an input that must be a batch stream.
pub fn open_batches(
    path: Option<&Path>,
    limits: Limits,
    tool: &str,
) -> Result<BatchStreamReader<DynRead>> {
    match open_input(path, limits)? {
        Input::Batches(b) => Ok(b),
        Input::Snapshot(s) => Err(Error::data(format!(
            "this is a snapshot; {tool} reads batch streams"
        ))
        .in_file(s.name())),
    }
}

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

/// The tool's arguments. A usage error is written in the tools' one style,
/// `mooncdc-x: what is wrong`, with clap's tip and usage after it, and the
/// tool exits 2; `--help` and `--version` print and exit 0.
pub fn parse_args<T: clap::Parser>(tool: &str) -> T {
    let mut cmd = args::with_sub_help(T::command());
    let parsed = cmd
        .try_get_matches_from_mut(std::env::args_os())
        .and_then(|mut m| T::from_arg_matches_mut(&mut m))
        .map_err(|e| e.format(&mut cmd));
    match parsed {
        Ok(a) => a,
        Err(e) => {
            use clap::error::ErrorKind as K;
            if matches!(
                e.kind(),
                K::DisplayHelp | K::DisplayVersion | K::DisplayHelpOnMissingArgumentOrSubcommand
            ) {
                e.exit();
            }
            let text = e.render().to_string();
            let text = text.strip_prefix("error: ").unwrap_or(&text);
            let _ = write!(std::io::stderr(), "{tool}: {text}");
            std::process::exit(2);
        }
    }
}

/// Run a tool's body: print an error once with its cause chain, choose the
/// exit status, and treat a closed downstream pipe as a quiet success.
pub fn run(tool: &str, body: impl FnOnce() -> anyhow::Result<ExitCode>) -> ExitCode {
    run_with(tool, 1, body)
}

/// Like [`run`], with the status for a failed operation chosen by the tool
/// (`mooncdc-audit` uses 2, since 1 means "different").
pub fn run_with(
    tool: &str,
    failure: u8,
    body: impl FnOnce() -> anyhow::Result<ExitCode>,
) -> ExitCode {
    crate::log::init(tool);
    match body() {
        Ok(code) => code,
        Err(err) => {
            if is_broken_pipe(&err) {
                return ExitCode::SUCCESS;
            }
            let usage = err
                .chain()
                .find_map(|e| e.downcast_ref::<Error>())
                .is_some_and(|e| e.kind() == ErrorKind::Usage);
            report_error(&err);
            if usage {
                ExitCode::from(2)
            } else {
                ExitCode::from(failure)
            }
        }
    }
}

/// Write an error once, with its causes in plain words (no ` (os error N)`)
/// and its kind as a field, in the tools' one style.
pub fn report_error(err: &anyhow::Error) {
    let mut msg = err.to_string();
    let mut source = err.source();
    // anyhow's chain() includes the error itself first; print the causes.
    while let Some(s) = source {
        msg.push_str(&format!(
            ": {}",
            crate::error::strip_os_error(&s.to_string())
        ));
        source = s.source();
    }
    let kind = err
        .chain()
        .find_map(|e| e.downcast_ref::<Error>())
        .map_or("other".to_string(), |e| {
            format!("{:?}", e.kind()).to_lowercase()
        });
    crate::log::write("error", &msg, &[("kind", kind.into())]);
}

fn is_broken_pipe(err: &anyhow::Error) -> bool {
    err.chain().any(|e| {
        e.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
            || e.downcast_ref::<Error>().is_some_and(Error::is_broken_pipe)
    })
}

/// Limits from the common options.
pub fn limits(a: &args::LimitArgs) -> Result<Limits> {
    Limits::new(a.max_line_bytes, a.max_input_bytes)
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

impl<'a, W: Write> DirSink<'a, W> {
    pub fn new(dir: &Path, prefix: &str, format: OutputFormat, paths: &'a mut W) -> Result<Self> {
        let made: Vec<PathBuf> = dir
            .ancestors()
            .take_while(|d| !d.as_os_str().is_empty() && !d.exists())
            .map(Path::to_path_buf)
            .collect();
        // Folders made here are the owner's only (0700, less the umask), as
        // the pieces in them are.
        std::os::unix::fs::DirBuilderExt::mode(std::fs::DirBuilder::new().recursive(true), 0o700)
            .create(dir)
            .map_err(|e| {
                Error::io("cannot create the output folder", e).in_file(&dir.display().to_string())
            })?;
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
        for d in &self.made {
            sync_folder(folder_of(d))?;
        }
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

/// Schemas from a file: a snapshot (its header's schemas) or a JSON array of schemas.
pub fn load_schemas(path: &Path, limits: Limits) -> Result<Vec<crate::wire::Schema>> {
    let name = path.display().to_string();
    let text = std::fs::read(path)
        .map_err(|e| Error::io("cannot read the schema file", e).in_file(&name))?;
    let first = text.iter().find(|b| !b.is_ascii_whitespace());
    if first == Some(&b'[') {
        let schemas: Vec<crate::wire::Schema> = serde_json::from_slice(&text)
            .map_err(|e| crate::wire::jsonl::json_error(e).in_file(&name))?;
        crate::wire::batch::shapes(&schemas).map_err(|e| e.in_file(&name))?;
        return Ok(schemas);
    }
    match open_input(Some(path), limits)? {
        Input::Snapshot(mut s) => match s.next_item()? {
            Some(crate::wire::SnapItem::Header { schemas, .. }) => Ok(schemas),
            _ => Err(Error::data("snapshot has no header").in_file(&name)),
        },
        Input::Batches(mut b) => match b.next_item()? {
            Some(crate::wire::Item::Header(h)) => h.schemas.ok_or_else(|| {
                Error::data("this batch's header carries no schemas").in_file(&name)
            }),
            _ => Err(Error::data("batch has no header").in_file(&name)),
        },
    }
}

/// Progress on standard error, only when it is a terminal and not silenced.
pub struct Progress {
    label: &'static str,
    enabled: bool,
    started: std::time::Instant,
    /// When the line was last written; the first update is written at once.
    last: Option<std::time::Instant>,
    shown: bool,
    total: Option<u64>,
}

/// The progress line: the count, the total and the time left when the total
/// is known, and the rate.
pub fn progress_line(
    label: &str,
    n: u64,
    total: Option<u64>,
    elapsed: std::time::Duration,
) -> String {
    let secs = elapsed.as_secs_f64();
    // A rate (and a time left) only once there is time enough to tell one.
    if secs < 0.2 {
        return match total {
            Some(t) if t > 0 => format!(
                "{label}: {n} of {t} ({:.0}%)",
                (n as f64 / t as f64 * 100.0).min(100.0)
            ),
            _ => format!("{label}: {n}"),
        };
    }
    let rate = n as f64 / secs;
    let rate_text = if rate >= 10_000.0 {
        format!("{:.0}k/s", rate / 1000.0)
    } else {
        format!("{rate:.0}/s")
    };
    match total {
        Some(t) if t > 0 => {
            let pct = (n as f64 / t as f64 * 100.0).min(100.0);
            let left = if rate > 0.0 && t > n {
                format!(
                    ", {} left",
                    crate::log::elapsed(std::time::Duration::from_secs_f64((t - n) as f64 / rate))
                )
            } else {
                String::new()
            };
            format!("{label}: {n} of {t} ({pct:.0}%), {rate_text}{left}")
        }
        _ => format!("{label}: {n}, {rate_text}"),
    }
}

impl Progress {
    pub fn new(label: &'static str, quiet: bool) -> Self {
        use std::io::IsTerminal;
        Progress {
            label,
            enabled: !quiet && std::io::stderr().is_terminal(),
            started: std::time::Instant::now(),
            last: None,
            shown: false,
            total: None,
        }
    }

    /// A new kind of count (a snapshot's rows, then batches' events): the
    /// line shown so far is cleared and the rate starts again.
    pub fn relabel(&mut self, label: &'static str) {
        if label != self.label {
            self.done();
            self.label = label;
            self.started = std::time::Instant::now();
            self.last = None;
            self.total = None;
        }
    }

    /// Whether anything is shown (standard error a terminal, not silenced).
    pub fn enabled(&self) -> bool {
        self.enabled
    }

    /// What the count will reach, where it is known.
    pub fn set_total(&mut self, total: u64) {
        self.total = Some(total);
    }

    pub fn update(&mut self, n: u64) {
        let due = self
            .last
            .is_none_or(|t| t.elapsed() >= std::time::Duration::from_millis(250));
        if self.enabled && due {
            self.last = Some(std::time::Instant::now());
            self.shown = true;
            let line = progress_line(self.label, n, self.total, self.started.elapsed());
            // Rewritten in place; the rest of an older, longer line cleared.
            let _ = write!(std::io::stderr(), "\r{line}\x1b[K");
        }
    }

    /// Clear the line, so the summary that follows replaces it.
    pub fn done(&mut self) {
        if self.shown {
            let _ = write!(std::io::stderr(), "\r\x1b[K");
            self.shown = false;
        }
    }
}

impl crate::source::Tally for Progress {
    fn wants_total(&self) -> bool {
        self.enabled
    }
    fn total(&mut self, rows: u64) {
        self.set_total(rows);
    }
    fn count(&mut self, rows: u64) {
        self.update(rows);
    }
}

/// What `mooncdc-capture` read sees of its own output: with `-v`, a line on
/// standard error for each batch, told by its commit line
/// (`{"kind":"commit","end":…,"count":…}`, as the encoders write it); with
/// progress, the place reached in the log against the batch's high water
/// (from its header). JSON output has no such lines and gets neither.
pub struct Watch<W: Write> {
    inner: W,
    line: Vec<u8>,
    /// Whether the current line may still be one of interest.
    maybe: bool,
    verbose: bool,
    progress: Option<Progress>,
    /// The batch's start and high water, from its header, and the shift
    /// that makes positions of them.
    span: Option<(u128, u128, u32)>,
}

/// How far `seq` is past `start`, in the source's units.
fn place(seq: u128, start: u128, shift: u32) -> u64 {
    u64::try_from((seq >> shift).saturating_sub(start >> shift)).unwrap_or(u64::MAX)
}

/// A header line's start and high water, read from its beginning: the
/// encoders write both before the schemas, so a prefix of the line is
/// enough (a `"` inside the source's name is escaped, so the keys cannot be
/// mistaken).
fn header_span(line: &[u8]) -> Option<(u128, u128)> {
    let after = |key: &[u8]| -> Option<u128> {
        let i = memchr::memmem::find(line, key)? + key.len();
        let digits = &line[i..];
        let end = digits.iter().position(|b| !b.is_ascii_digit())?;
        std::str::from_utf8(&digits[..end]).ok()?.parse().ok()
    };
    Some((after(b"\"sequence\":\"")?, after(b",\"high_water\":\"")?))
}

const COMMIT_PREFIX: &[u8] = b"{\"kind\":\"commit\",";
const HEADER_PREFIX: &[u8] = b"{\"kind\":\"header\",";
const EVENT_PREFIX: &[u8] = b"{\"kind\":\"event\",\"event\":{\"sequence\":\"";

impl<W: Write> Watch<W> {
    pub fn new(inner: W, verbose: bool, progress: Option<Progress>) -> Self {
        Watch {
            inner,
            line: Vec::new(),
            maybe: true,
            verbose,
            progress,
            span: None,
        }
    }

    /// Clear the progress line, so what follows replaces it.
    pub fn done(&mut self) {
        if let Some(p) = &mut self.progress {
            p.done();
        }
    }

    fn line_done(&mut self) {
        let line = &self.line;
        if line.starts_with(EVENT_PREFIX) {
            let digits = &line[EVENT_PREFIX.len()..];
            let end = digits.iter().position(|b| !b.is_ascii_digit()).unwrap_or(0);
            let seq = std::str::from_utf8(&digits[..end])
                .ok()
                .and_then(|d| d.parse::<u128>().ok());
            if let (Some(seq), Some((start, _, shift)), Some(p)) =
                (seq, self.span, &mut self.progress)
            {
                p.update(place(seq, start, shift));
            }
        } else if line.starts_with(HEADER_PREFIX) {
            if let Some((start, hw)) = header_span(line) {
                // PostgreSQL's sequences are (LSN << 64) | ordinal: measured
                // in WAL bytes. SQLite's are the log's own numbers.
                let shift = if hw >> 64 != 0 { 64 } else { 0 };
                self.span = Some((start, hw, shift));
                if let Some(p) = &mut self.progress {
                    p.set_total(place(hw, start, shift));
                }
            }
        } else if line.starts_with(COMMIT_PREFIX) && self.verbose {
            let Ok(v) = serde_json::from_slice::<serde_json::Value>(line) else {
                return;
            };
            let end = v["end"]["sequence"].as_str().unwrap_or("?").to_string();
            let n = v["count"]
                .as_str()
                .and_then(|c| c.parse::<u64>().ok())
                .unwrap_or(0);
            if let Some(p) = &mut self.progress {
                p.done();
            }
            crate::log::write(
                "info",
                &format!(
                    "batch written through {end}: {}",
                    crate::log::count(n, "event", "events")
                ),
                &[
                    ("event", "batch".into()),
                    ("end", end.into()),
                    ("events", n.into()),
                ],
            );
        }
    }
}

impl<W: Write> Write for Watch<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if !self.verbose && self.progress.is_none() {
            return self.inner.write(buf);
        }
        let n = self.inner.write(buf)?;
        let mut i = 0;
        while i < n {
            // Past what a line can tell, straight to the next line.
            if !self.maybe {
                match memchr::memchr(b'\n', &buf[i..n]) {
                    Some(j) => i += j,
                    None => break,
                }
            }
            let b = buf[i];
            i += 1;
            if b == b'\n' {
                if self.maybe {
                    self.line_done();
                }
                self.line.clear();
                self.maybe = true;
            } else if self.maybe {
                self.line.push(b);
                let k = self.line.len();
                // An event line is wanted only up to its sequence; a header
                // or commit line whole (they are short).
                let wanted = [EVENT_PREFIX, HEADER_PREFIX, COMMIT_PREFIX]
                    .iter()
                    .any(|p| self.line[..k.min(p.len())] == p[..k.min(p.len())]);
                let event_seq_read = self.line.starts_with(EVENT_PREFIX)
                    && k > EVENT_PREFIX.len()
                    && !b.is_ascii_digit();
                // A header is read from its first 64 KiB (start and high
                // water come before the schemas); a commit line is short.
                let header_read = k >= 64 << 10 && self.line.starts_with(HEADER_PREFIX);
                if !wanted || k > 64 << 10 {
                    self.maybe = false;
                    self.line.clear();
                } else if event_seq_read || header_read {
                    // The sequence is complete: act now, skip the rest.
                    self.line_done();
                    self.maybe = false;
                    self.line.clear();
                }
            }
        }
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

/// A cursor from `--after` JSON text or `--after-file`.
pub fn cursor_arg(text: Option<&str>, file: Option<&Path>) -> Result<Option<crate::wire::Cursor>> {
    if let Some(t) = text {
        if t.trim().is_empty() {
            // Typically `--after "$(mooncdc-apply cursor …)"` on a target
            // that holds no cursor yet.
            return Err(Error::usage(
                "--after is empty: give a cursor as JSON, {\"source\":…,\"sequence\":…} (what mooncdc-apply cursor prints; a target without a cursor needs a snapshot first)",
            ));
        }
        return crate::wire::Cursor::parse_json(t.trim())
            .map(Some)
            .map_err(Error::usage);
    }
    if let Some(f) = file {
        let name = f.display().to_string();
        let t = std::fs::read_to_string(f)
            .map_err(|e| Error::io("cannot read the cursor file", e).in_file(&name))?;
        return crate::wire::Cursor::parse_json(t.trim())
            .map(Some)
            .map_err(|e| Error::data(e).in_file(&name));
    }
    Ok(None)
}

/// A tool's completion script for `shell`, as committed in `completions/`.
///
/// clap_complete names a hyphenated binary's subcommand states two ways in
/// bash (`mooncdc__capture__subcmd__status` while walking the words,
/// `mooncdc__subcmd__capture__subcmd__status` in the case arms), so
/// `mooncdc-capture status --<TAB>` offered nothing; one name is used.
pub fn completion(shell: clap_complete::Shell, tool: &str) -> Vec<u8> {
    let mut cmd = args::commands()
        .into_iter()
        .find(|c| c.get_name() == tool)
        .expect("one of the seven tools");
    let mut out = Vec::new();
    clap_complete::generate(shell, &mut cmd, tool, &mut out);
    if shell == clap_complete::Shell::Bash {
        if let Some((base, rest)) = tool.split_once('-') {
            let text = String::from_utf8(out).expect("clap_complete writes UTF-8");
            let wrong = format!("{base}__subcmd__{}", rest.replace('-', "__subcmd__"));
            let right = format!("{base}__{}", rest.replace('-', "__"));
            out = text.replace(&wrong, &right).into_bytes();
        }
    }
    out
}

/// A tool's own man page (section 1), with EXAMPLES, ENVIRONMENT, EXIT
/// STATUS and SEE ALSO after what the definitions give.
pub fn man_page(tool: &str) -> Vec<u8> {
    let mut cmd = args::commands()
        .into_iter()
        .find(|c| c.get_name() == tool)
        .expect("one of the seven tools")
        .disable_help_subcommand(true);
    cmd.build();
    render_man(cmd, args::man_sections(tool))
}

/// A subcommand's man page (`<tool>-<sub>.1`, the page its tool's
/// SUBCOMMANDS section refers to), with EXAMPLES, EXIT STATUS and SEE ALSO
/// as the tools' pages have them.
pub fn sub_man_page(tool: &str, sub: &str) -> Vec<u8> {
    let mut cmd = args::commands()
        .into_iter()
        .find(|c| c.get_name() == tool)
        .expect("one of the seven tools")
        .disable_help_subcommand(true);
    // Built, so the subcommand knows its parent's name (`mooncdc-capture init`).
    cmd.build();
    let sub_cmd = cmd
        .find_subcommand(sub)
        .unwrap_or_else(|| panic!("{tool} has no subcommand {sub}"))
        .clone();
    render_man(sub_cmd, args::sub_man_sections(tool, sub))
}

fn render_man(cmd: clap::Command, sections: Vec<(&str, String)>) -> Vec<u8> {
    let mut out = Vec::new();
    clap_mangen::Man::new(cmd)
        .render(&mut out)
        .expect("rendering into memory cannot fail");
    for (title, text) in sections {
        out.extend_from_slice(format!(".SH \"{title}\"\n").as_bytes());
        for line in text.lines() {
            let roff = line.replace('\\', "\\e").replace('-', "\\-");
            let roff = if roff.starts_with('.') || roff.starts_with('\'') {
                format!("\\&{roff}")
            } else {
                roff
            };
            if line.starts_with("$ ") {
                out.extend_from_slice(format!(".nf\n{roff}\n.fi\n").as_bytes());
            } else {
                out.extend_from_slice(format!("{roff}\n").as_bytes());
            }
        }
    }
    out
}

/// `TOOL --generate-completions bash|zsh|fish` and `TOOL --generate-man`
/// (alone on the command line): print what `completions/` and `man/` hold
/// for the tool, so installing them is one command. `None`: neither asked.
pub fn print_generated(tool: &str) -> Option<ExitCode> {
    let a: Vec<String> = std::env::args().skip(1).collect();
    let text = match a.iter().map(String::as_str).collect::<Vec<_>>()[..] {
        ["--generate-man"] => man_page(tool),
        ["--generate-completions", shell] => {
            let shell = match shell {
                "bash" => clap_complete::Shell::Bash,
                "zsh" => clap_complete::Shell::Zsh,
                "fish" => clap_complete::Shell::Fish,
                other => {
                    eprintln!(
                        "{tool}: --generate-completions takes bash, zsh or fish, not {other:?}"
                    );
                    return Some(ExitCode::from(2));
                }
            };
            completion(shell, tool)
        }
        _ => return None,
    };
    use std::io::Write as _;
    let mut o = std::io::stdout().lock();
    Some(if o.write_all(&text).and_then(|_| o.flush()).is_ok() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

#[cfg(test)]
mod progress_tests {
    use super::{header_span, place, progress_line};

    #[test]
    fn capture_progress_reads_the_header_and_measures_wal_bytes_for_postgresql() {
        let h = br#"{"kind":"header","format":"mooncdc.jsonl.v1","start":{"source":"a\"sequence\":\"9","sequence":"12"},"high_water":"340","schemas":[]}"#;
        assert_eq!(header_span(h), Some((12, 340)));
        assert_eq!(place(100, 12, 0), 88);
        // PostgreSQL: (LSN << 64) | ordinal, measured in WAL bytes.
        let (start, hw, at) = (1000u128 << 64, (5000u128 << 64) | 3, (2000u128 << 64) | 7);
        assert_eq!(place(hw, start, 64), 4000);
        assert_eq!(place(at, start, 64), 1000);
    }
    use std::time::Duration;

    #[test]
    fn the_line_has_count_rate_and_with_a_total_the_time_left() {
        assert_eq!(
            progress_line("events", 50_000, None, Duration::from_secs(2)),
            "events: 50000, 25k/s"
        );
        assert_eq!(
            progress_line("rows", 250, Some(1000), Duration::from_secs(1)),
            "rows: 250 of 1000 (25%), 250/s, 3.00 s left"
        );
        // Too soon for a rate: none, and no time left from it.
        assert_eq!(
            progress_line("log", 1, Some(300_000), Duration::from_millis(1)),
            "log: 1 of 300000 (0%)"
        );
    }
}
