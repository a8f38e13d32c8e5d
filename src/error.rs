//! The library's one error type.
//!
//! Every error has a kind (which decides the exit status), a sentence-case
//! message that states the rule that was broken, and where known the file and
//! line it was found at. Lower-level errors are kept as the source, never
//! flattened into the message: the tools print the whole chain (`cli::report_error`).

use std::fmt;

/// What went wrong, at the level a caller acts on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// The input broke a rule of the wire format or of a batch stream.
    Data,
    /// A configured limit (line or total bytes) was exceeded.
    Limit,
    /// Reading or writing a file or pipe failed.
    Io,
    /// A database refused or failed an operation.
    Database,
    /// The target or source state forbids the operation (gap, other source, divergence).
    State,
    /// TLS could not be set up (certificates, keys) or was refused.
    Tls,
    /// The command line was wrong.
    Usage,
}

/// A MoonCDC error: kind, message, optional file and line, optional cause.
#[derive(Debug)]
pub struct Error {
    kind: ErrorKind,
    message: String,
    file: Option<String>,
    line: Option<u64>,
    source: Option<Box<dyn std::error::Error + Send + Sync + 'static>>,
    /// The tool exits with its failure status without writing it: what
    /// stopped it was said already, by another process.
    silent: bool,
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Error {
            kind,
            message: message.into(),
            file: None,
            line: None,
            source: None,
            silent: false,
        }
    }

    /// Exit with the failure status, saying nothing (see `silent`).
    pub fn silent(mut self) -> Self {
        self.silent = true;
        self
    }

    pub fn is_silent(&self) -> bool {
        self.silent
    }

    /// A broken wire-format or stream rule.
    pub fn data(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Data, message)
    }

    pub fn limit(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Limit, message)
    }

    pub fn state(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::State, message)
    }

    pub fn usage(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Usage, message)
    }

    pub fn io(message: impl Into<String>, source: std::io::Error) -> Self {
        Self::new(ErrorKind::Io, message).with_source(source)
    }

    pub fn database(message: impl Into<String>, source: rusqlite::Error) -> Self {
        Self::new(ErrorKind::Database, message).with_source(source)
    }

    pub fn with_source(mut self, source: impl std::error::Error + Send + Sync + 'static) -> Self {
        self.source = Some(Box::new(source));
        self
    }

    /// Attach a file name unless one is already known.
    pub fn in_file(mut self, file: &str) -> Self {
        if self.file.is_none() {
            self.file = Some(file.to_string());
        }
        self
    }

    /// Attach a line number unless one is already known.
    pub fn at_line(mut self, line: u64) -> Self {
        if self.line.is_none() {
            self.line = Some(line);
        }
        self
    }

    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    pub fn message(&self) -> &str {
        &self.message
    }

    /// The message followed by its causes, `: `-separated, as the tools
    /// print it (without file and line).
    pub fn full_message(&self) -> String {
        let mut out = self.message.clone();
        let mut source = std::error::Error::source(self);
        while let Some(s) = source {
            let text = s.to_string();
            if !out.ends_with(&text) {
                out.push_str(": ");
                out.push_str(&text);
            }
            source = s.source();
        }
        out
    }

    pub fn file(&self) -> Option<&str> {
        self.file.as_deref()
    }

    pub fn line(&self) -> Option<u64> {
        self.line
    }

    /// True when the cause is a closed downstream pipe.
    pub fn is_broken_pipe(&self) -> bool {
        self.source
            .as_ref()
            .and_then(|s| s.downcast_ref::<std::io::Error>())
            .is_some_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe)
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (&self.file, self.line) {
            (Some(file), Some(line)) => write!(f, "{file}:{line}: ")?,
            (Some(file), None) => write!(f, "{file}: ")?,
            (None, Some(line)) => write!(f, "line {line}: ")?,
            (None, None) => {}
        }
        f.write_str(&self.message)
    }
}

/// A lower-level error kept as the cause, shown by the text chosen for it.
///
/// Some drivers' errors print their own causes inside their message (and
/// again as their `source`), or print a category ("db error") before what a
/// user needs: the text here is the part worth printing, and [`Cause::inner`]
/// keeps the error itself for callers that inspect it (an SQLSTATE, an I/O
/// error kind).
#[derive(Debug)]
pub struct Cause<E> {
    pub text: String,
    pub inner: E,
}

impl<E: fmt::Debug> fmt::Display for Cause<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl<E: fmt::Debug> std::error::Error for Cause<E> {}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source
            .as_deref()
            .map(|s| s as &(dyn std::error::Error + 'static))
    }
}

/// The innermost cause of an error, in plain words: an I/O error's kind said
/// as a person would (no `(os error 111)`), else the innermost message.
pub fn root_cause(e: &(dyn std::error::Error + 'static)) -> String {
    let mut inner: &(dyn std::error::Error + 'static) = e;
    while let Some(s) = inner.source() {
        inner = s;
    }
    if let Some(io) = inner.downcast_ref::<std::io::Error>() {
        use std::io::ErrorKind as K;
        return match io.kind() {
            K::ConnectionRefused => "connection refused".to_string(),
            K::ConnectionReset => "the connection was reset by the peer".to_string(),
            K::ConnectionAborted => "the connection was aborted".to_string(),
            K::TimedOut => "timed out".to_string(),
            K::NotFound => "not found".to_string(),
            K::PermissionDenied => "permission denied".to_string(),
            K::AddrNotAvailable => "the address is not available".to_string(),
            K::UnexpectedEof => "the server closed the connection".to_string(),
            _ => strip_os_error(&io.to_string()),
        };
    }
    strip_os_error(&inner.to_string())
}

/// A system error's text without Rust's ` (os error N)` tail.
pub fn strip_os_error(s: &str) -> String {
    match s.find(" (os error ") {
        Some(i) => s[..i].to_string(),
        None => s.to_string(),
    }
}
