//! Metrics and health for a long-running tool (`capture --follow`, `apply`):
//! a process-wide registry of counters and gauges that the library updates
//! as it works, and a small HTTP server (`--metrics-listen ADDR:PORT`) that
//! serves them as Prometheus text on `/metrics`, and `/livez` and `/readyz`
//! for a supervisor.
//!
//! - Labels never carry URLs, connection strings or error messages: only the
//!   tool's name, an error *kind*, and (for backfills only) the table a user
//!   named to `mooncdc-capture backfill`: few, and chosen by the user.
//! - `/livez`: 200 while the process runs (a stalled tool is still alive:
//!   restarting it would not unblock its downstream).
//! - `/readyz`: 200 while running and making progress; 503 with a plain
//!   reason when stopping, or when no progress was made for longer than the
//!   stall timeout. Progress is a batch or event written or applied, or (for
//!   a follower) a keepalive processed; a blocked write shows no progress,
//!   so a stopped consumer makes its producer unready.
//! - At most 128 clients at once; each request has 5 s to arrive and be
//!   answered. Serving metrics never acknowledges anything nor stops work.

use std::io::{Read, Write};
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

static EVENTS: AtomicU64 = AtomicU64::new(0);
static BATCHES: AtomicU64 = AtomicU64::new(0);
static BYTES: AtomicU64 = AtomicU64::new(0);
static RETRIES: AtomicU64 = AtomicU64::new(0);
static RECONNECTS: AtomicU64 = AtomicU64::new(0);
/// The last committed source position (PostgreSQL: an LSN; SQLite: the
/// change log's sequence).
static POSITION: AtomicU64 = AtomicU64::new(0);
/// The server's WAL end as last reported, and the position confirmed to it.
static SERVER_WAL: AtomicU64 = AtomicU64::new(0);
static SERVER_WAL_SEEN_MS: AtomicU64 = AtomicU64::new(0);
static CONFIRMED: AtomicU64 = AtomicU64::new(0);
/// Commit time (ms since 1970) of the last transaction seen; 0: none.
static LAST_COMMIT_MS: AtomicI64 = AtomicI64::new(0);
static LAST_PROGRESS_MS: AtomicU64 = AtomicU64::new(0);
/// The slot's retained WAL and `wal_status`, as the server reports them
/// (PostgreSQL; refreshed every few seconds while following).
static SLOT_RETAINED: AtomicI64 = AtomicI64::new(-1);
static SLOT_STATUS: AtomicUsize = AtomicUsize::new(0);
const SLOT_STATUSES: [&str; 5] = ["unknown", "reserved", "extended", "unreserved", "lost"];
/// Streamed transactions in progress (PostgreSQL) and the bytes they hold.
static STREAMED_OPEN: AtomicU64 = AtomicU64::new(0);
static STREAMED_BYTES: AtomicU64 = AtomicU64::new(0);
static STARTED: AtomicBool = AtomicBool::new(false);
/// A standby source: whether it receives its primary's WAL (1, 0); -1: the
/// source is no standby, or was not looked at.
static STANDBY_RECEIVING: AtomicI64 = AtomicI64::new(-1);
/// Backfills seen by this process: table → (rows logged, rows left by the
/// estimate).
static BACKFILLS: std::sync::Mutex<std::collections::BTreeMap<String, (u64, u64)>> =
    std::sync::Mutex::new(std::collections::BTreeMap::new());
static LAST_ERROR: AtomicUsize = AtomicUsize::new(0);

/// The kinds of error `mooncdc_last_error` reports.
const ERROR_KINDS: [&str; 8] = [
    "none", "data", "limit", "io", "database", "state", "tls", "usage",
];

/// Something was done: resets the stall clock.
pub fn progress() {
    LAST_PROGRESS_MS.store(now_ms(), Ordering::Relaxed);
}

/// A batch written or applied, with its events and bytes.
pub fn batch(events: u64, bytes: u64) {
    BATCHES.fetch_add(1, Ordering::Relaxed);
    EVENTS.fetch_add(events, Ordering::Relaxed);
    BYTES.fetch_add(bytes, Ordering::Relaxed);
    progress();
}

/// An event written or applied (between batches).
pub fn event(bytes: u64) {
    EVENTS.fetch_add(1, Ordering::Relaxed);
    BYTES.fetch_add(bytes, Ordering::Relaxed);
    progress();
}

/// Absolute totals, for a tool that counts them itself (apply).
pub fn totals(events: u64, batches: u64) {
    EVENTS.fetch_max(events, Ordering::Relaxed);
    BATCHES.fetch_max(batches, Ordering::Relaxed);
    progress();
}

/// A sequence as a position: PostgreSQL's `lsn × 2^64 + ordinal` gives the
/// LSN, others their sequence.
pub fn position_of(sequence: u128) -> u64 {
    if sequence >> 64 > 0 {
        (sequence >> 64) as u64
    } else {
        sequence as u64
    }
}

pub fn position(p: u64) {
    POSITION.store(p, Ordering::Relaxed);
}

pub fn server_wal(p: u64) {
    SERVER_WAL.fetch_max(p, Ordering::Relaxed);
    SERVER_WAL_SEEN_MS.store(now_ms(), Ordering::Relaxed);
}

pub fn confirmed(p: u64) {
    CONFIRMED.fetch_max(p, Ordering::Relaxed);
}

/// The commit time of the last transaction seen, in ms since 1970.
pub fn commit_time_ms(ms: i64) {
    LAST_COMMIT_MS.store(ms, Ordering::Relaxed);
}

/// The slot as the server reports it: retained bytes and `wal_status`.
pub fn slot(retained: i64, status: &str) {
    SLOT_RETAINED.store(retained, Ordering::Relaxed);
    let i = SLOT_STATUSES.iter().position(|s| *s == status).unwrap_or(0);
    SLOT_STATUS.store(i, Ordering::Relaxed);
}

/// Streamed transactions in progress and the bytes they hold now.
pub fn streamed(open: usize, bytes: u64) {
    STREAMED_OPEN.store(open as u64, Ordering::Relaxed);
    STREAMED_BYTES.store(bytes, Ordering::Relaxed);
}

/// A standby source receives its primary's WAL, or not.
pub fn standby_receiving(yes: bool) {
    STANDBY_RECEIVING.store(yes as i64, Ordering::Relaxed);
}

pub fn retry() {
    RETRIES.fetch_add(1, Ordering::Relaxed);
}

pub fn reconnected() {
    RECONNECTS.fetch_add(1, Ordering::Relaxed);
    progress();
}

/// A backfill's figures: rows logged so far and rows left by the estimate.
pub fn backfill(table: &str, rows: u64, remaining: u64) {
    if let Ok(mut m) = BACKFILLS.lock() {
        m.insert(table.to_string(), (rows, remaining));
    }
    progress();
}

/// A label value as Prometheus' text format writes it.
fn label_value(s: &str) -> String {
    s.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// The kind of the last error (by `ErrorKind`'s name, lower case).
pub fn error(kind: crate::ErrorKind) {
    let name = format!("{kind:?}").to_lowercase();
    if let Some(i) = ERROR_KINDS.iter().position(|k| *k == name) {
        LAST_ERROR.store(i, Ordering::Relaxed);
    }
}

/// The Prometheus text of the registry.
pub fn render(tool: &str) -> String {
    let label = format!("tool=\"{tool}\"");
    let mut out = String::new();
    let mut metric = |name: &str, kind: &str, help: &str, value: String| {
        out.push_str(&format!(
            "# HELP {name} {help}\n# TYPE {name} {kind}\n{name}{{{label}}} {value}\n"
        ));
    };
    let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
    metric(
        "mooncdc_events_total",
        "counter",
        "Events written (capture) or applied (apply).",
        get(&EVENTS).to_string(),
    );
    metric(
        "mooncdc_batches_total",
        "counter",
        "Batches written or applied.",
        get(&BATCHES).to_string(),
    );
    metric(
        "mooncdc_bytes_total",
        "counter",
        "Event bytes written or applied.",
        get(&BYTES).to_string(),
    );
    metric(
        "mooncdc_position",
        "gauge",
        "The last committed source position (PostgreSQL: the LSN as a number).",
        get(&POSITION).to_string(),
    );
    let (wal, pos) = (get(&SERVER_WAL), get(&POSITION));
    metric(
        "mooncdc_source_lag_bytes",
        "gauge",
        "Server WAL position minus the last position written (PostgreSQL).",
        wal.saturating_sub(pos).to_string(),
    );
    let seen = SERVER_WAL_SEEN_MS.load(Ordering::Relaxed);
    metric(
        "mooncdc_source_wal_age_seconds",
        "gauge",
        "Seconds since the server's WAL position was last learned (a keepalive, or the slot query every few seconds): the byte lags are as old as this (PostgreSQL; 0 before any).",
        if seen > 0 {
            format!("{:.3}", now_ms().saturating_sub(seen) as f64 / 1000.0)
        } else {
            "0".into()
        },
    );
    metric("mooncdc_slot_unconfirmed_bytes", "gauge", "Server WAL position minus the position confirmed to the slot: WAL the slot retains for this pipeline (PostgreSQL).", wal.saturating_sub(get(&CONFIRMED)).to_string());
    let commit = LAST_COMMIT_MS.load(Ordering::Relaxed);
    let lag_s = if commit > 0 {
        (now_ms() as i64 - commit).max(0) as f64 / 1000.0
    } else {
        0.0
    };
    metric(
        "mooncdc_source_lag_seconds",
        "gauge",
        "Now minus the commit time of the last transaction seen (0 before any).",
        format!("{lag_s:.3}"),
    );
    metric(
        "mooncdc_retries_total",
        "counter",
        "Reconnect attempts after transient failures.",
        get(&RETRIES).to_string(),
    );
    metric(
        "mooncdc_reconnects_total",
        "counter",
        "Reconnects that succeeded.",
        get(&RECONNECTS).to_string(),
    );
    metric(
        "mooncdc_streamed_transactions_open",
        "gauge",
        "Large transactions in progress that the server streams and capture holds until their commit (PostgreSQL).",
        get(&STREAMED_OPEN).to_string(),
    );
    metric(
        "mooncdc_streamed_spool_bytes",
        "gauge",
        "Bytes those transactions hold, in memory and spool files (PostgreSQL).",
        get(&STREAMED_BYTES).to_string(),
    );
    let since = now_ms().saturating_sub(get(&LAST_PROGRESS_MS)) as f64 / 1000.0;
    metric(
        "mooncdc_seconds_since_progress",
        "gauge",
        "Seconds since the last batch, event or keepalive processed.",
        format!("{since:.3}"),
    );
    let retained = SLOT_RETAINED.load(Ordering::Relaxed);
    if retained >= 0 {
        metric("mooncdc_slot_retained_bytes", "gauge", "WAL the server keeps for the slot (pg_replication_slots: current WAL minus restart_lsn).", retained.to_string());
        let st = SLOT_STATUS.load(Ordering::Relaxed);
        out.push_str("# HELP mooncdc_slot_wal_status The slot's wal_status (1 for the current one).\n# TYPE mooncdc_slot_wal_status gauge\n");
        for (i, s) in SLOT_STATUSES.iter().enumerate().skip(1) {
            out.push_str(&format!(
                "mooncdc_slot_wal_status{{{label},status=\"{s}\"}} {}\n",
                u8::from(i == st)
            ));
        }
    }
    if let Ok(m) = BACKFILLS.lock() {
        if !m.is_empty() {
            out.push_str("# HELP mooncdc_backfill_rows_total Rows a backfill has brought into the stream, by table.\n# TYPE mooncdc_backfill_rows_total counter\n");
            for (t, (rows, _)) in m.iter() {
                out.push_str(&format!(
                    "mooncdc_backfill_rows_total{{{label},table=\"{}\"}} {rows}\n",
                    label_value(t)
                ));
            }
            out.push_str("# HELP mooncdc_backfill_rows_remaining Rows a backfill has still to bring, by the table's row count when it was requested (0 once done).\n# TYPE mooncdc_backfill_rows_remaining gauge\n");
            for (t, (_, left)) in m.iter() {
                out.push_str(&format!(
                    "mooncdc_backfill_rows_remaining{{{label},table=\"{}\"}} {left}\n",
                    label_value(t)
                ));
            }
        }
    }
    let standby = STANDBY_RECEIVING.load(Ordering::Relaxed);
    if standby >= 0 {
        out.push_str(&format!(
            "# HELP mooncdc_standby_receiving Whether the standby this capture reads from receives its primary's WAL (1) or not (0).\n# TYPE mooncdc_standby_receiving gauge\nmooncdc_standby_receiving{{{label}}} {standby}\n"
        ));
    }
    let last = LAST_ERROR.load(Ordering::Relaxed);
    out.push_str("# HELP mooncdc_last_error The kind of the last error (1 for that kind).\n# TYPE mooncdc_last_error gauge\n");
    for (i, k) in ERROR_KINDS.iter().enumerate() {
        out.push_str(&format!(
            "mooncdc_last_error{{{label},kind=\"{k}\"}} {}\n",
            u8::from(i == last)
        ));
    }
    out
}

/// Why the tool is not ready, if it is not.
pub fn unready(stall: Duration) -> Option<String> {
    if crate::util::stop::requested() {
        return Some("stopping".into());
    }
    if !STARTED.load(Ordering::Relaxed) {
        return Some("initializing".into());
    }
    let idle = now_ms().saturating_sub(LAST_PROGRESS_MS.load(Ordering::Relaxed));
    if idle >= stall.as_millis() as u64 {
        return Some(format!(
            "stalled: no progress for {:.1} s (stall timeout {} ms)",
            idle as f64 / 1000.0,
            stall.as_millis()
        ));
    }
    None
}

/// The tool is running: readiness may be reported from now on.
pub fn started() {
    STARTED.store(true, Ordering::Relaxed);
    progress();
}

/// Serve `/metrics`, `/livez` and `/readyz` on `addr` (`127.0.0.1:9100`,
/// `[::1]:9100`) from a thread of its own. The address is bound before
/// this returns, so a bad or busy address is a clear error at start.
pub fn serve(addr: &str, tool: &'static str, stall: Duration) -> crate::Result<()> {
    let listener = std::net::TcpListener::bind(addr)
        .map_err(|e| crate::Error::io(format!("cannot listen for metrics on {addr}"), e))?;
    static CLIENTS: AtomicUsize = AtomicUsize::new(0);
    std::thread::spawn(move || {
        for conn in listener.incoming().flatten() {
            if CLIENTS.fetch_add(1, Ordering::SeqCst) >= 128 {
                CLIENTS.fetch_sub(1, Ordering::SeqCst);
                continue; // dropped: too many clients at once
            }
            std::thread::spawn(move || {
                let _ = answer(conn, tool, stall);
                CLIENTS.fetch_sub(1, Ordering::SeqCst);
            });
        }
    });
    Ok(())
}

fn answer(mut conn: std::net::TcpStream, tool: &str, stall: Duration) -> std::io::Result<()> {
    // 5 s for the whole request, however slowly it trickles in.
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    conn.set_write_timeout(Some(Duration::from_secs(5)))?;
    let mut req = Vec::new();
    let mut buf = [0u8; 1024];
    while !req.windows(4).any(|w| w == b"\r\n\r\n") && req.len() < 16 << 10 {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        if left.is_zero() {
            return Ok(());
        }
        conn.set_read_timeout(Some(left))?;
        let n = conn.read(&mut buf)?;
        if n == 0 {
            break;
        }
        req.extend_from_slice(&buf[..n]);
    }
    let line = String::from_utf8_lossy(&req);
    let mut words = line.split_whitespace();
    let (method, path) = (words.next().unwrap_or(""), words.next().unwrap_or(""));
    let (status, body) = match (method, path) {
        ("GET" | "HEAD", "/metrics") => ("200 OK", render(tool)),
        ("GET" | "HEAD", "/livez") => ("200 OK", "ok\n".to_string()),
        ("GET" | "HEAD", "/readyz") => match unready(stall) {
            None => ("200 OK", "ok\n".to_string()),
            Some(why) => ("503 Service Unavailable", format!("{why}\n")),
        },
        (_, "/metrics" | "/livez" | "/readyz") => {
            ("405 Method Not Allowed", "GET or HEAD\n".into())
        }
        _ => (
            "404 Not Found",
            "not found: /metrics, /livez, /readyz\n".into(),
        ),
    };
    let kind = if path == "/metrics" {
        "text/plain; version=0.0.4"
    } else {
        "text/plain"
    };
    let mut resp = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {kind}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    if method != "HEAD" {
        resp.push_str(&body);
    }
    conn.write_all(resp.as_bytes())
}
