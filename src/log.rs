//! Messages on standard error, as plain text (`mooncdc-x: message`) or, with
//! `--log-format json`, one JSON object per line for a supervisor or
//! journald: `{"ts":"2026-12-01T23:04:15.123Z","level":"info",
//! "tool":"mooncdc-capture","message":"…", …fields}`. The text of a message
//! is the same in both; fields carry the figures a machine wants apart.

use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

static JSON: AtomicBool = AtomicBool::new(false);
static QUIET: AtomicBool = AtomicBool::new(false);

/// `-q`: informational messages are not written (warnings and errors are).
pub fn set_quiet(quiet: bool) {
    QUIET.store(quiet, Ordering::Relaxed);
}
static TOOL: std::sync::OnceLock<String> = std::sync::OnceLock::new();

/// Name the tool (`mooncdc-capture`): every message starts with it.
pub fn init(tool: &str) {
    let _ = TOOL.set(tool.to_string());
}

/// JSON lines instead of plain text (`--log-format json`).
pub fn set_json(json: bool) {
    JSON.store(json, Ordering::Relaxed);
}

fn tool() -> &'static str {
    TOOL.get().map_or("mooncdc", String::as_str)
}

/// RFC 3339 UTC with milliseconds, from the system clock.
fn timestamp() -> String {
    let d = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    let secs = d.as_secs() as i64;
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60,
        d.subsec_millis()
    )
}

/// Write one message at `level` (`info`, `warn`, `error`) with `fields`.
pub fn write(level: &str, message: &str, fields: &[(&str, serde_json::Value)]) {
    let line = if JSON.load(Ordering::Relaxed) {
        let mut o = serde_json::Map::new();
        o.insert("ts".into(), timestamp().into());
        o.insert("level".into(), level.into());
        o.insert("tool".into(), tool().into());
        o.insert("message".into(), message.into());
        for (k, v) in fields {
            o.insert((*k).into(), v.clone());
        }
        serde_json::Value::Object(o).to_string()
    } else {
        format!("{}: {message}", tool())
    };
    let _ = writeln!(std::io::stderr(), "{line}");
}

/// `n` and its noun, singular for one: `1 batch`, `2 batches`.
pub fn count(n: u64, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// Elapsed time as people read it: `0.21 s`, `12.3 s`, `4 min 05 s`.
pub fn elapsed(d: std::time::Duration) -> String {
    let s = d.as_secs_f64();
    if s < 10.0 {
        format!("{s:.2} s")
    } else if s < 60.0 {
        format!("{s:.1} s")
    } else {
        format!("{} min {:02} s", d.as_secs() / 60, d.as_secs() % 60)
    }
}

pub fn info(message: &str) {
    if !QUIET.load(Ordering::Relaxed) {
        write("info", message, &[]);
    }
}

pub fn warn(message: &str, fields: &[(&str, serde_json::Value)]) {
    write("warn", message, fields);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_and_durations_read_as_people_write_them() {
        assert_eq!(count(1, "batch", "batches"), "1 batch");
        assert_eq!(count(0, "batch", "batches"), "0 batches");
        assert_eq!(count(2, "row", "rows"), "2 rows");
        assert_eq!(elapsed(std::time::Duration::from_millis(213)), "0.21 s");
        assert_eq!(elapsed(std::time::Duration::from_millis(12_340)), "12.3 s");
        assert_eq!(elapsed(std::time::Duration::from_secs(245)), "4 min 05 s");
    }
}
