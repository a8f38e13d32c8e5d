//! Small text helpers shared by the database connectors.

use crate::error::{Error, Result};

/// Decode `%XX` escapes of a URL part; the result must be UTF-8.
pub fn percent_decode(s: &str) -> Result<String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let v = s
                .get(i + 1..i + 3)
                .and_then(|h| u8::from_str_radix(h, 16).ok())
                .ok_or_else(|| Error::usage("bad percent-escape in a URL (% is followed by two hex digits; a % itself is written %25)"))?;
            out.push(v);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| Error::usage("a URL part is not UTF-8 after decoding"))
}

/// Quote an SQL identifier as SQLite and PostgreSQL read it: `"` … `"` with
/// inner quotes doubled, so any name (quotes, spaces, keywords) is one
/// identifier.
pub fn quote_ident(s: &str) -> String {
    let mut q = String::with_capacity(s.len() + 2);
    q.push('"');
    for c in s.chars() {
        if c == '"' {
            q.push('"');
        }
        q.push(c);
    }
    q.push('"');
    q
}

/// A graceful stop on SIGTERM or SIGINT: a tool that is between batches
/// exits at once with status 0; one in the middle of a batch finishes it
/// (or, for a following capture, ends it now at the last event written)
/// and then stops. The binaries install the handler ([`stop::install`]);
/// the library marks its batches and looks at [`stop::requested`] at batch
/// boundaries.
pub mod stop {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

    static REQUESTED: AtomicBool = AtomicBool::new(false);
    /// Batches in progress (a write or a transaction that must not be cut).
    static BUSY: AtomicUsize = AtomicUsize::new(0);

    /// Whether a stop was asked for.
    pub fn requested() -> bool {
        REQUESTED.load(Ordering::SeqCst)
    }

    /// A batch begins: a signal now waits for [`batch_done`].
    pub fn batch_begins() {
        BUSY.fetch_add(1, Ordering::SeqCst);
    }

    /// The batch is whole (committed or rolled back, or its commit line
    /// written and flushed). The caller then looks at [`requested`] before
    /// starting another.
    pub fn batch_done() {
        let _ = BUSY.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1));
    }

    /// Marks a batch in progress for as long as it lives.
    pub struct Busy(());

    impl Busy {
        #[allow(clippy::new_without_default)]
        pub fn new() -> Busy {
            batch_begins();
            Busy(())
        }
    }

    impl Drop for Busy {
        fn drop(&mut self) {
            batch_done();
        }
    }

    /// Install the handler: on SIGTERM or SIGINT, exit 0 at once when no
    /// batch is in progress, else ask for a stop after it. A second signal
    /// while waiting exits at once with 130 (the batch in progress is then
    /// rolled back, or left without its commit line).
    pub fn install() {
        use signal_hook::consts::{SIGINT, SIGTERM};
        let Ok(mut signals) = signal_hook::iterator::Signals::new([SIGTERM, SIGINT]) else {
            return;
        };
        std::thread::spawn(move || {
            for _ in signals.forever() {
                if REQUESTED.swap(true, Ordering::SeqCst) {
                    std::process::exit(130);
                }
                if BUSY.load(Ordering::SeqCst) == 0 {
                    std::process::exit(0);
                }
            }
        });
    }
}
