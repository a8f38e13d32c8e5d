//! Progress on standard error: the line `-v` and terminals show, and the
//! counts `mooncdc-capture` read takes from its own output.

use std::io::Write;

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
