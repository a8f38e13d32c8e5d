//! The ClickHouse target, over HTTP(S).
//!
//! - URL `clickhouse://user[:password]@host:8123/db` (HTTP) or `clickhouses://…`
//!   (HTTPS, checked against the system's trust store). The password may come
//!   from `CLICKHOUSE_PASSWORD`. Credentials travel in the
//!   `X-ClickHouse-User`/`X-ClickHouse-Key` headers, never in URLs or messages.
//!   Optional query parameters: `connectivity_timeout_ms` (8000),
//!   `schema_timeout_ms` (16000), `ddl_timeout_ms` (128000),
//!   `insert_timeout_ms` (256000), `max_insert_bytes` (64 MiB).
//! - Names: source `_` is doubled, then `.` becomes `_` (`public.my_table` →
//!   `public_my__table`).
//! - `replacing` engine (default): `ReplacingMergeTree(_etl_version)` ordered by
//!   the key, with `_etl_deleted`, and a `<table>__current` view (`FINAL`, not
//!   deleted). A delete writes a tombstone; an update that changes the key
//!   writes a tombstone for the old key before the new row. Each row's version
//!   derives from its event's sequence, so replays after a crash are idempotent.
//! - `history` engine: `MergeTree` with `cdc_operation`, `cdc_lsn`,
//!   `cdc_tx_ordinal` (the sequence's high and low 64 bits) and the row.
//! - Values are written in RowBinary (bit-exact); types come from the schemas
//!   (see `docs/CLICKHOUSE.md`); a value that does not fit its column fails,
//!   naming table, column and sequence, and nothing is truncated or wrapped.
//! - A batch's rows are held (memory, then a temporary file) until its commit
//!   has been checked, then sent in inserts of at most `max_insert_bytes`;
//!   the cursor lives in `_mooncdc_cursor`, written after them. ClickHouse has
//!   no transactions: a crash between inserts leaves rows without the cursor,
//!   and the replay rewrites them with the same versions.

use super::ExistingRows;
use crate::error::{Error, ErrorKind, Result};
use crate::wire::value::write_value;
use crate::wire::{
    BatchStreamReader, Column, Cursor, Event, Item, Operation, Row, Schema, Sequence, SnapItem,
    SnapshotReader, Value,
};
use std::collections::{HashMap, HashSet};
use std::io::{BufRead, Read};
use std::time::Duration;

/// Table engines.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Engine {
    Replacing,
    History,
}

/// Connection settings.
#[derive(Clone)]
pub struct ChConfig {
    base: String,
    user: String,
    password: String,
    pub database: String,
    pub connectivity_timeout: Duration,
    pub schema_timeout: Duration,
    pub ddl_timeout: Duration,
    pub insert_timeout: Duration,
    pub max_insert_bytes: usize,
}

impl std::fmt::Debug for ChConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}{} as {}", self.base, self.database, self.user)
    }
}

fn pct_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len() * 3);
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

impl ChConfig {
    pub fn parse(url: &str) -> Result<ChConfig> {
        let (scheme, rest) = if let Some(r) = url.strip_prefix("clickhouses://") {
            ("https", r)
        } else if let Some(r) = url.strip_prefix("clickhouse://") {
            ("http", r)
        } else {
            return Err(Error::usage(
                "a ClickHouse URL starts with clickhouse:// or clickhouses://",
            ));
        };
        let (main, query) = rest.split_once('?').unwrap_or((rest, ""));
        let (authority, db) = main.split_once('/').unwrap_or((main, ""));
        let (userinfo, hostport) = match authority.rsplit_once('@') {
            Some((u, h)) => (Some(u), h),
            None => (None, authority),
        };
        let (user, password) = match userinfo {
            Some(u) => match u.split_once(':') {
                Some((a, b)) => (
                    crate::util::percent_decode(a)?,
                    Some(crate::util::percent_decode(b)?),
                ),
                None => (crate::util::percent_decode(u)?, None),
            },
            None => ("default".to_string(), None),
        };
        let password = password
            .or_else(|| std::env::var("CLICKHOUSE_PASSWORD").ok())
            .unwrap_or_default();
        if hostport.is_empty() {
            return Err(Error::usage("the ClickHouse URL needs a host"));
        }
        let hostport = if hostport.contains(':') && !hostport.ends_with(']') {
            hostport.to_string()
        } else {
            format!("{hostport}:{}", if scheme == "https" { 8443 } else { 8123 })
        };
        let base = format!("{scheme}://{hostport}/");
        // A bad host or port is the user's typing, not a failed request.
        reqwest::Url::parse(&base).map_err(|e| {
            Error::usage(format!(
                "the ClickHouse URL's host and port {hostport:?} are not valid ({e}); write clickhouse://user@host:8123/db"
            ))
        })?;
        let mut c = ChConfig {
            base,
            user,
            password,
            database: if db.is_empty() {
                "default".into()
            } else {
                crate::util::percent_decode(db)?
            },
            connectivity_timeout: Duration::from_millis(8000),
            schema_timeout: Duration::from_millis(16000),
            ddl_timeout: Duration::from_millis(128000),
            insert_timeout: Duration::from_millis(256000),
            max_insert_bytes: 64 << 20,
        };
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            let n: u64 = v
                .parse()
                .map_err(|_| Error::usage(format!("ClickHouse URL option {k} needs a number")))?;
            match k {
                "connectivity_timeout_ms" => {
                    c.connectivity_timeout = Duration::from_millis(n.max(1))
                }
                "schema_timeout_ms" => c.schema_timeout = Duration::from_millis(n.max(1)),
                "ddl_timeout_ms" => c.ddl_timeout = Duration::from_millis(n.max(1)),
                "insert_timeout_ms" => c.insert_timeout = Duration::from_millis(n.max(1)),
                "max_insert_bytes" => c.max_insert_bytes = (n as usize).max(1),
                other => {
                    return Err(Error::usage(format!(
                        "unknown ClickHouse URL option {other:?}"
                    )))
                }
            }
        }
        Ok(c)
    }
}

/// How a column is stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChType {
    Int64,
    Int32,
    Int16,
    UInt32,
    Bool,
    Float64,
    Float32,
    Decimal(u8, u8),
    /// TEXT values only.
    Text,
    /// BLOB values only.
    Blob,
    /// Any class, stored as the value's wire form (JSON) in a String.
    Any,
}

impl ChType {
    pub fn sql(self) -> String {
        match self {
            ChType::Int64 => "Int64".into(),
            ChType::Int32 => "Int32".into(),
            ChType::Int16 => "Int16".into(),
            ChType::UInt32 => "UInt32".into(),
            ChType::Bool => "UInt8".into(),
            ChType::Float64 => "Float64".into(),
            ChType::Float32 => "Float32".into(),
            ChType::Decimal(p, s) => format!("Decimal({p}, {s})"),
            ChType::Text | ChType::Blob | ChType::Any => "String".into(),
        }
    }
}

/// The ClickHouse type of a schema column, by the source's kind.
pub fn column_type(c: &Column, source: &str) -> ChType {
    let t = c.decl_type.to_ascii_lowercase();
    if source.starts_with("postgres:") {
        return match t.as_str() {
            "smallint" => ChType::Int16,
            "integer" => ChType::Int32,
            "bigint" => ChType::Int64,
            "oid" => ChType::UInt32,
            "real" => ChType::Float32,
            "double precision" => ChType::Float64,
            "boolean" => ChType::Bool,
            "bytea" => ChType::Blob,
            _ => {
                if let Some(ps) = t.strip_prefix("numeric(").and_then(|r| r.strip_suffix(')')) {
                    let mut it = ps.split(',').map(|x| x.trim().parse::<u8>());
                    if let (Some(Ok(p)), Some(Ok(s))) = (it.next(), it.next()) {
                        if (1..=38).contains(&p) && s <= p {
                            return ChType::Decimal(p, s);
                        }
                    }
                }
                ChType::Text
            }
        };
    }
    // SQLite: by declared type, as its affinity rules read it.
    if t.contains("int") {
        ChType::Int64
    } else if t.contains("char") || t.contains("clob") || t.contains("text") {
        ChType::Text
    } else if t.contains("blob") {
        ChType::Blob
    } else if t.contains("real") || t.contains("floa") || t.contains("doub") {
        ChType::Float64
    } else {
        ChType::Any
    }
}

/// The target table name for a source table.
pub fn table_name(source_table: &str) -> String {
    source_table.replace('_', "__").replace('.', "_")
}

fn qi(s: &str) -> String {
    format!("`{}`", s.replace('\\', "\\\\").replace('`', "\\`"))
}

/// The 64-bit version of a sequence, keeping order for the source's scheme.
pub fn version(source: &str, seq: Sequence) -> Result<u64> {
    if source.starts_with("postgres:") {
        let lsn = (seq >> 64) as u64;
        let ord = seq as u64;
        if lsn >= 1 << 40 || ord >= 1 << 24 {
            return Err(Error::data(format!(
                "sequence {seq} does not fit the 64-bit version scheme (LSN below 2^40, at most 2^24 changes per transaction)"
            )));
        }
        Ok((lsn << 24) | ord)
    } else {
        u64::try_from(seq)
            .map_err(|_| Error::data(format!("sequence {seq} does not fit a 64-bit version")))
    }
}

fn leb128(out: &mut Vec<u8>, mut n: u64) {
    loop {
        let b = (n & 0x7f) as u8;
        n >>= 7;
        if n == 0 {
            out.push(b);
            return;
        }
        out.push(b | 0x80);
    }
}

/// Parse a decimal text into a scaled integer with exactly `scale` digits.
fn decimal_scaled(s: &str, precision: u8, scale: u8) -> std::result::Result<i128, String> {
    let (neg, digits) = match s.strip_prefix('-') {
        Some(d) => (true, d),
        None => (false, s),
    };
    let (int, frac) = digits.split_once('.').unwrap_or((digits, ""));
    if int.is_empty()
        || !int.bytes().all(|b| b.is_ascii_digit())
        || !frac.bytes().all(|b| b.is_ascii_digit())
    {
        return Err(format!("{s:?} is not a decimal number"));
    }
    if frac.len() > scale as usize {
        return Err(format!("{s:?} has more than {scale} decimals"));
    }
    let mut all = String::from(int.trim_start_matches('0'));
    all.push_str(frac);
    all.extend(std::iter::repeat_n('0', scale as usize - frac.len()));
    let all = all.trim_start_matches('0');
    if all.len() > precision as usize {
        return Err(format!("{s:?} has more than {precision} digits"));
    }
    let v: i128 = if all.is_empty() {
        0
    } else {
        all.parse().map_err(|_| format!("{s:?} is out of range"))?
    };
    Ok(if neg { -v } else { v })
}

fn format_decimal(v: i128, scale: u8) -> String {
    let neg = v < 0;
    let digits = v.unsigned_abs().to_string();
    let s = scale as usize;
    let body = if s == 0 {
        digits
    } else if digits.len() > s {
        format!(
            "{}.{}",
            &digits[..digits.len() - s],
            &digits[digits.len() - s..]
        )
    } else {
        format!("0.{}{}", "0".repeat(s - digits.len()), digits)
    };
    if neg {
        format!("-{body}")
    } else {
        body
    }
}

/// Append one value in RowBinary for its column.
fn encode_value(
    out: &mut Vec<u8>,
    ty: ChType,
    nullable: bool,
    v: &Value,
) -> std::result::Result<(), String> {
    if nullable {
        if v.is_null() {
            out.push(1);
            return Ok(());
        }
        out.push(0);
    } else if v.is_null() {
        return Err("NULL in a key column".into());
    }
    let class = v.class_name();
    let wrong = || format!("a {class} value does not fit a {} column", ty.sql());
    match (ty, v) {
        (ChType::Int64, Value::Integer(i)) => out.extend(i.to_le_bytes()),
        (ChType::Int32, Value::Integer(i)) => out.extend(
            i32::try_from(*i)
                .map_err(|_| format!("{i} does not fit Int32"))?
                .to_le_bytes(),
        ),
        (ChType::Int16, Value::Integer(i)) => out.extend(
            i16::try_from(*i)
                .map_err(|_| format!("{i} does not fit Int16"))?
                .to_le_bytes(),
        ),
        (ChType::UInt32, Value::Integer(i)) => out.extend(
            u32::try_from(*i)
                .map_err(|_| format!("{i} does not fit UInt32"))?
                .to_le_bytes(),
        ),
        (ChType::Bool, Value::Integer(i)) if *i == 0 || *i == 1 => out.push(*i as u8),
        (ChType::Float64, Value::Real(x)) => out.extend(x.to_bits().to_le_bytes()),
        (ChType::Float32, Value::Real(x)) => {
            let f = *x as f32;
            if f as f64 != *x {
                return Err(format!("REAL {x:e} is not exactly a Float32"));
            }
            out.extend(f.to_bits().to_le_bytes())
        }
        (ChType::Decimal(p, s), Value::Text(t)) => {
            // Decimal32, Decimal64 or Decimal128 by precision.
            let v = decimal_scaled(t, p, s)?;
            match p {
                0..=9 => out.extend((v as i32).to_le_bytes()),
                10..=18 => out.extend((v as i64).to_le_bytes()),
                _ => out.extend(v.to_le_bytes()),
            }
        }
        (ChType::Text, Value::Text(t)) => {
            leb128(out, t.len() as u64);
            out.extend_from_slice(t.as_bytes());
        }
        (ChType::Blob, Value::Blob(b)) => {
            leb128(out, b.len() as u64);
            out.extend_from_slice(b);
        }
        (ChType::Any, v) => {
            let mut w = Vec::new();
            write_value(&mut w, v);
            leb128(out, w.len() as u64);
            out.extend_from_slice(&w);
        }
        _ => return Err(wrong()),
    }
    Ok(())
}

/// Read one value of a column back from RowBinary.
fn decode_value(r: &mut dyn Read, ty: ChType, nullable: bool) -> Result<Value> {
    let bad = |e: std::io::Error| Error::io("cannot read a ClickHouse row", e);
    let mut b1 = [0u8; 1];
    if nullable {
        r.read_exact(&mut b1).map_err(bad)?;
        if b1[0] == 1 {
            return Ok(Value::Null);
        }
    }
    macro_rules! le {
        ($t:ty, $n:expr) => {{
            let mut b = [0u8; $n];
            r.read_exact(&mut b).map_err(bad)?;
            <$t>::from_le_bytes(b)
        }};
    }
    let string = |r: &mut dyn Read| -> Result<Vec<u8>> {
        let mut n = 0u64;
        let mut shift = 0;
        loop {
            let mut b = [0u8; 1];
            r.read_exact(&mut b).map_err(bad)?;
            n |= ((b[0] & 0x7f) as u64) << shift;
            if b[0] & 0x80 == 0 {
                break;
            }
            shift += 7;
            if shift > 63 {
                return Err(Error::data("bad string length in a ClickHouse row"));
            }
        }
        let mut v = Vec::new();
        r.take(n).read_to_end(&mut v).map_err(bad)?;
        if v.len() as u64 != n {
            return Err(Error::data("a ClickHouse row ends inside a string"));
        }
        Ok(v)
    };
    Ok(match ty {
        ChType::Int64 => Value::Integer(le!(i64, 8)),
        ChType::Int32 => Value::Integer(le!(i32, 4) as i64),
        ChType::Int16 => Value::Integer(le!(i16, 2) as i64),
        ChType::UInt32 => Value::Integer(le!(u32, 4) as i64),
        ChType::Bool => Value::Integer(le!(u8, 1) as i64),
        ChType::Float64 => Value::Real(f64::from_bits(le!(u64, 8))),
        ChType::Float32 => Value::Real(f32::from_bits(le!(u32, 4)) as f64),
        ChType::Decimal(p, s) => Value::Text(format_decimal(
            match p {
                0..=9 => le!(i32, 4) as i128,
                10..=18 => le!(i64, 8) as i128,
                _ => le!(i128, 16),
            },
            s,
        )),
        ChType::Text => Value::Text(
            String::from_utf8(string(r)?)
                .map_err(|_| Error::data("a ClickHouse String is not UTF-8"))?,
        ),
        ChType::Blob => Value::Blob(string(r)?),
        ChType::Any => {
            let text = string(r)?;
            serde_json::from_slice::<Value>(&text)
                .map_err(|e| Error::data(format!("a stored wire value does not decode: {e}")))?
        }
    })
}

/// One target table's layout.
struct Layout {
    schema: Schema,
    name: String,
    types: Vec<ChType>,
    key: Vec<usize>,
    source: String,
}

impl Layout {
    fn new(schema: &Schema, source: &str) -> Layout {
        Layout {
            name: table_name(&schema.table),
            types: schema
                .columns
                .iter()
                .map(|c| column_type(c, source))
                .collect(),
            key: schema.key_indices(),
            schema: schema.clone(),
            source: source.to_string(),
        }
    }

    fn nullable(&self, i: usize) -> bool {
        !self.key.contains(&i)
    }

    fn column_defs(&self) -> Vec<String> {
        self.schema
            .columns
            .iter()
            .enumerate()
            .map(|(i, c)| {
                let t = self.types[i].sql();
                format!(
                    "{} {}",
                    qi(&c.name),
                    if self.nullable(i) {
                        format!("Nullable({t})")
                    } else {
                        t
                    }
                )
            })
            .collect()
    }

    fn encode_row(&self, out: &mut Vec<u8>, row: &Row, seq: Option<Sequence>) -> Result<()> {
        for (i, v) in row.iter().enumerate() {
            encode_value(out, self.types[i], self.nullable(i), v).map_err(|e| {
                let at = seq.map_or("snapshot row".to_string(), |s| format!("event {s}"));
                Error::data(format!(
                    "{at}, table {:?}, column {:?}: {e}",
                    self.schema.table, self.schema.columns[i].name
                ))
            })?;
        }
        Ok(())
    }
}

pub use super::sqlite::ApplyStats;

/// A table's encoded rows of one batch, held (memory, then a temporary file)
/// until the batch's commit has been checked, so that nothing of a bad batch
/// reaches ClickHouse; `bounds` cuts it into inserts of at most about
/// `max_insert_bytes`, at row boundaries.
struct Held {
    spool: crate::ops::spool::Spool,
    bounds: Vec<u64>,
    since: usize,
    row: Vec<u8>,
}

impl Held {
    fn new() -> Self {
        Held {
            spool: crate::ops::spool::Spool::new(crate::ops::spool::DEFAULT_SPOOL_MEMORY),
            bounds: Vec::new(),
            since: 0,
            row: Vec::with_capacity(256),
        }
    }

    /// Move the rows encoded in `self.row` into the spool.
    fn take_row(&mut self, max: usize) -> Result<()> {
        self.spool.push(&self.row)?;
        self.since += self.row.len();
        self.row.clear();
        if self.since >= max {
            self.bounds.push(self.spool.len());
            self.since = 0;
        }
        Ok(())
    }
}

/// A ClickHouse database as a target.
pub struct ClickHouse {
    cfg: ChConfig,
    http: reqwest::blocking::Client,
    pub server_version: String,
    settings: HashSet<String>,
    engine: Engine,
    committed: ApplyStats,
}

enum Timeout {
    Connect,
    Schema,
    Ddl,
    Insert,
}

impl ClickHouse {
    /// Connect: ping, read the version and the settings the server knows.
    pub fn connect(cfg: ChConfig, engine: Engine) -> Result<ClickHouse> {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let http = reqwest::blocking::Client::builder()
            .connect_timeout(cfg.connectivity_timeout)
            .build()
            .map_err(|e| Error::new(ErrorKind::Database, format!("cannot set up HTTP: {e}")))?;
        let mut ch = ClickHouse {
            cfg,
            http,
            server_version: String::new(),
            settings: HashSet::new(),
            engine,
            committed: ApplyStats::default(),
        };
        let v = ch.query("SELECT version()", None, Timeout::Connect)?;
        ch.server_version = String::from_utf8_lossy(&v).trim().to_string();
        let s = ch.query(
            "SELECT name FROM system.settings WHERE name IN ('max_execution_time', 'wait_end_of_query', 'max_insert_block_size')",
            None,
            Timeout::Schema,
        )?;
        ch.settings = String::from_utf8_lossy(&s)
            .lines()
            .map(str::to_string)
            .collect();
        ch.query(
            &format!(
                "CREATE TABLE IF NOT EXISTS {}.`_mooncdc_cursor` (source String, sequence String, seq_hi UInt64, seq_lo UInt64) ENGINE = MergeTree ORDER BY (source, seq_hi, seq_lo)",
                qi(&ch.cfg.database)
            ),
            None,
            Timeout::Ddl,
        )?;
        Ok(ch)
    }

    fn url(&self, sql: &str, timeout: &Timeout, read: bool) -> String {
        let mut u = format!(
            "{}?database={}&query={}",
            self.cfg.base,
            pct_encode(&self.cfg.database),
            pct_encode(sql)
        );
        if read {
            // An HTTP interface parameter on every version (not a setting).
            u.push_str("&wait_end_of_query=1");
        }
        let secs = match timeout {
            Timeout::Connect => Some(self.cfg.connectivity_timeout),
            Timeout::Schema => Some(self.cfg.schema_timeout),
            Timeout::Ddl => Some(self.cfg.ddl_timeout),
            Timeout::Insert => None,
        };
        if let (Some(t), true) = (secs, self.settings.contains("max_execution_time")) {
            u.push_str(&format!("&max_execution_time={}", t.as_secs().max(1)));
        }
        u
    }

    fn budget(&self, t: &Timeout) -> Duration {
        let eps = Duration::from_millis(4000);
        eps + match t {
            Timeout::Connect => self.cfg.connectivity_timeout,
            Timeout::Schema => self.cfg.schema_timeout,
            Timeout::Ddl => self.cfg.ddl_timeout,
            Timeout::Insert => self.cfg.insert_timeout,
        }
    }

    fn send(
        &self,
        sql: &str,
        body: Option<Vec<u8>>,
        timeout: Timeout,
    ) -> Result<reqwest::blocking::Response> {
        let read = body.is_none();
        let req = self
            .http
            .post(self.url(sql, &timeout, read))
            .header("X-ClickHouse-User", &self.cfg.user)
            .header("X-ClickHouse-Key", &self.cfg.password)
            .timeout(self.budget(&timeout))
            .body(body.unwrap_or_default());
        let resp = req.send().map_err(|e| {
            let what = if e.is_timeout() {
                "timed out"
            } else if e.is_connect() {
                "cannot connect"
            } else {
                "request failed"
            };
            Error::new(
                ErrorKind::Database,
                format!(
                    "ClickHouse at {}: {what}: {}",
                    self.cfg.base,
                    e.without_url()
                ),
            )
        })?;
        if !resp.status().is_success() {
            let status = resp.status();
            let text = resp.text().unwrap_or_default();
            return Err(Error::new(
                ErrorKind::Database,
                format!("ClickHouse error (HTTP {status}): {}", error_text(&text)),
            ));
        }
        Ok(resp)
    }

    /// Run a statement; the whole reply (small replies only).
    fn query(&self, sql: &str, body: Option<Vec<u8>>, timeout: Timeout) -> Result<Vec<u8>> {
        let mut resp = self.send(sql, body, timeout)?;
        let mut v = Vec::new();
        resp.read_to_end(&mut v)
            .map_err(|e| Error::io("cannot read the ClickHouse reply", e))?;
        // An error after output started comes appended to a 200 reply.
        if let Some(i) = find(&v, b"Code: ") {
            if find(&v[i..], b"DB::Exception").is_some() {
                return Err(Error::new(
                    ErrorKind::Database,
                    format!(
                        "ClickHouse error: {}",
                        error_text(&String::from_utf8_lossy(&v[i..]))
                    ),
                ));
            }
        }
        Ok(v)
    }

    /// What the last apply committed (rows and cursor written), also when it then failed.
    pub fn committed(&self) -> &ApplyStats {
        &self.committed
    }

    /// The stored cursor, if any.
    pub fn cursor(&self) -> Result<Option<Cursor>> {
        let v = self.query(
            &format!(
                "SELECT source, sequence FROM {}.`_mooncdc_cursor` ORDER BY seq_hi DESC, seq_lo DESC LIMIT 1 FORMAT TabSeparated",
                qi(&self.cfg.database)
            ),
            None,
            Timeout::Schema,
        )?;
        let text = String::from_utf8_lossy(&v);
        let Some(line) = text.lines().next() else {
            return Ok(None);
        };
        let (src, seq) = line
            .split_once('\t')
            .ok_or_else(|| Error::data("the stored cursor row is malformed"))?;
        let seq = crate::wire::model::parse_sequence(seq).map_err(Error::data)?;
        Ok(Some(Cursor::new(tsv_unescape(src), seq)))
    }

    fn set_cursor(&self, c: &Cursor) -> Result<()> {
        let mut body = Vec::new();
        for s in [c.source.as_bytes(), c.sequence().to_string().as_bytes()] {
            leb128(&mut body, s.len() as u64);
            body.extend_from_slice(s);
        }
        body.extend(((c.sequence() >> 64) as u64).to_le_bytes());
        body.extend((c.sequence() as u64).to_le_bytes());
        self.query(
            &format!("INSERT INTO {}.`_mooncdc_cursor` (source, sequence, seq_hi, seq_lo) FORMAT RowBinary", qi(&self.cfg.database)),
            Some(body),
            Timeout::Insert,
        )?;
        Ok(())
    }

    /// Whether a table holds any row (deleted-row markers included).
    fn holds_rows(&self, table: &str) -> Result<bool> {
        let v = self.query(
            &format!(
                "SELECT count() FROM {}.{} FORMAT TabSeparated",
                qi(&self.cfg.database),
                qi(table)
            ),
            None,
            Timeout::Schema,
        )?;
        Ok(String::from_utf8_lossy(&v).trim() != "0")
    }

    /// A table's columns as (name, type), in order; empty when it does not exist.
    fn columns_typed(&self, table: &str) -> Result<Vec<(String, String)>> {
        let v = self.query(
            &format!(
                "SELECT name, type FROM system.columns WHERE database = {} AND table = {} FORMAT TabSeparated",
                sql_string(&self.cfg.database),
                sql_string(table)
            ),
            None,
            Timeout::Schema,
        )?;
        String::from_utf8_lossy(&v)
            .lines()
            .map(|l| {
                let (n, t) = l
                    .split_once('\t')
                    .ok_or_else(|| Error::data("a system.columns row is malformed"))?;
                Ok((tsv_unescape(n), tsv_unescape(t)))
            })
            .collect()
    }

    fn columns_of(&self, table: &str) -> Result<Vec<String>> {
        Ok(self
            .columns_typed(table)?
            .into_iter()
            .map(|(n, _)| n)
            .collect())
    }

    /// The engine of an existing table (`None` when it does not exist).
    fn engine_of(&self, table: &str) -> Result<Option<String>> {
        let v = self.query(
            &format!(
                "SELECT engine FROM system.tables WHERE database = {} AND name = {} FORMAT TabSeparated",
                sql_string(&self.cfg.database),
                sql_string(table)
            ),
            None,
            Timeout::Schema,
        )?;
        Ok(String::from_utf8_lossy(&v).lines().next().map(tsv_unescape))
    }

    /// Create the table (and view) if missing; add nullable columns the stream
    /// has and the table lacks; refuse any other difference (names, types,
    /// engine), before anything is written.
    fn ensure(&self, l: &Layout) -> Result<()> {
        let db = qi(&self.cfg.database);
        if l.key.is_empty() && self.engine == Engine::Replacing {
            return Err(Error::data(format!(
                "table {:?} has no key: the replacing engine needs one (--engine history keeps tables without keys)",
                l.schema.table
            )));
        }
        if self.engine == Engine::Replacing && l.name.ends_with("__current") {
            return Err(Error::data(format!(
                "table {:?} maps to {}, the name of another table's current-state view; rename the source table",
                l.schema.table, l.name
            )));
        }
        let have = self.columns_typed(&l.name)?;
        let mut added = false;
        if have.is_empty() {
            let keys: Vec<String> = l.schema.key.iter().map(|k| qi(k)).collect();
            let sql = match self.engine {
                Engine::Replacing => format!(
                    "CREATE TABLE IF NOT EXISTS {db}.{} ({}, `_etl_version` UInt64, `_etl_deleted` UInt8) ENGINE = ReplacingMergeTree(`_etl_version`) ORDER BY ({})",
                    qi(&l.name),
                    l.column_defs().join(", "),
                    keys.join(", ")
                ),
                Engine::History => format!(
                    "CREATE TABLE IF NOT EXISTS {db}.{} (`cdc_operation` String, `cdc_lsn` UInt64, `cdc_tx_ordinal` UInt64, {}) ENGINE = MergeTree ORDER BY (`cdc_lsn`, `cdc_tx_ordinal`)",
                    qi(&l.name),
                    l.column_defs().join(", ")
                ),
            };
            self.query(&sql, None, Timeout::Ddl)?;
        } else {
            let engine = self.engine_of(&l.name)?.unwrap_or_default();
            let (expected_engine, meta): (&str, &[(&str, &str)]) = match self.engine {
                Engine::Replacing => (
                    "ReplacingMergeTree",
                    &[("_etl_version", "UInt64"), ("_etl_deleted", "UInt8")],
                ),
                Engine::History => (
                    "MergeTree",
                    &[
                        ("cdc_operation", "String"),
                        ("cdc_lsn", "UInt64"),
                        ("cdc_tx_ordinal", "UInt64"),
                    ],
                ),
            };
            let meta_ok = meta
                .iter()
                .all(|(n, t)| have.iter().any(|(hn, ht)| hn == n && ht == t));
            if engine != expected_engine || !meta_ok {
                return Err(Error::state(format!(
                    "ClickHouse table {} (engine {engine}) was made with the other engine or not by MoonCDC, not for --engine {}; use the engine it was made with, or another table",
                    l.name,
                    match self.engine {
                        Engine::Replacing => "replacing",
                        Engine::History => "history",
                    }
                )));
            }
            let data: Vec<&(String, String)> = have
                .iter()
                .filter(|(n, _)| !meta.iter().any(|(m, _)| m == n))
                .collect();
            let expected: Vec<(String, String)> = l
                .schema
                .columns
                .iter()
                .enumerate()
                .map(|(i, c)| {
                    let t = l.types[i].sql();
                    (
                        c.name.clone(),
                        if l.nullable(i) {
                            format!("Nullable({t})")
                        } else {
                            t
                        },
                    )
                })
                .collect();
            let fits = data.len() <= expected.len()
                && data
                    .iter()
                    .zip(&expected)
                    .all(|(h, e)| h.0 == e.0 && h.1 == e.1);
            if !fits {
                return Err(Error::state(format!(
                    "ClickHouse table {} has columns {:?}, but the stream's schema needs {:?} (names and types)",
                    l.name,
                    data.iter().map(|(n, t)| format!("{n} {t}")).collect::<Vec<_>>(),
                    expected.iter().map(|(n, t)| format!("{n} {t}")).collect::<Vec<_>>()
                )));
            }
            for (i, c) in l.schema.columns.iter().enumerate().skip(data.len()) {
                if !l.nullable(i) {
                    return Err(Error::state(format!(
                        "cannot add key column {:?} to ClickHouse table {}",
                        c.name, l.name
                    )));
                }
                self.query(
                    &format!(
                        "ALTER TABLE {db}.{} ADD COLUMN {} Nullable({})",
                        qi(&l.name),
                        qi(&c.name),
                        l.types[i].sql()
                    ),
                    None,
                    Timeout::Ddl,
                )?;
                added = true;
            }
        }
        if self.engine == Engine::Replacing {
            let cols: Vec<String> = l.schema.columns.iter().map(|c| qi(&c.name)).collect();
            let view = format!("{}__current", l.name);
            if added {
                // The view names its columns: recreate it with the new ones.
                self.query(
                    &format!("DROP TABLE IF EXISTS {db}.{}", qi(&view)),
                    None,
                    Timeout::Ddl,
                )?;
            }
            self.query(
                &format!(
                    "CREATE VIEW IF NOT EXISTS {db}.{} AS SELECT {} FROM {db}.{} FINAL WHERE `_etl_deleted` = 0",
                    qi(&view),
                    cols.join(", "),
                    qi(&l.name)
                ),
                None,
                Timeout::Ddl,
            )?;
        }
        Ok(())
    }

    /// Send a table's held rows, in inserts cut at the recorded bounds.
    fn flush(&self, l: &Layout, held: &mut Held) -> Result<()> {
        let total = held.spool.len();
        if total == 0 {
            return Ok(());
        }
        let cols: Vec<String> = l.schema.columns.iter().map(|c| qi(&c.name)).collect();
        let cols = match self.engine {
            Engine::Replacing => format!("{}, `_etl_version`, `_etl_deleted`", cols.join(", ")),
            Engine::History => format!(
                "`cdc_operation`, `cdc_lsn`, `cdc_tx_ordinal`, {}",
                cols.join(", ")
            ),
        };
        let sql = format!(
            "INSERT INTO {}.{} ({cols}) FORMAT RowBinary",
            qi(&self.cfg.database),
            qi(&l.name)
        );
        let mut bounds = std::mem::take(&mut held.bounds);
        if bounds.last() != Some(&total) {
            bounds.push(total);
        }
        held.since = 0;
        let mut rd = held.spool.drain()?;
        let mut at = 0u64;
        for b in bounds {
            let mut body = Vec::with_capacity((b - at) as usize);
            (&mut rd)
                .take(b - at)
                .read_to_end(&mut body)
                .map_err(|e| Error::io("cannot read held rows", e))?;
            at = b;
            self.query(&sql, Some(body), Timeout::Insert)?;
        }
        Ok(())
    }

    /// Encode one image as a row for the engine.
    /// `op` is the history row's operation; a `delete` is a tombstone in the replacing engine.
    fn encode(
        &self,
        l: &Layout,
        out: &mut Vec<u8>,
        op: &str,
        row: &Row,
        seq: Sequence,
        snapshot: bool,
    ) -> Result<()> {
        let deleted = op == "delete";
        match self.engine {
            Engine::Replacing => {
                l.encode_row(out, row, (!snapshot).then_some(seq))?;
                out.extend(version(&l.source, seq)?.to_le_bytes());
                out.push(deleted as u8);
            }
            Engine::History => {
                leb128(out, op.len() as u64);
                out.extend_from_slice(op.as_bytes());
                out.extend(((seq >> 64) as u64).to_le_bytes());
                out.extend((seq as u64).to_le_bytes());
                l.encode_row(out, row, (!snapshot).then_some(seq))?;
            }
        }
        Ok(())
    }

    fn encode_event(&self, l: &Layout, out: &mut Vec<u8>, e: &Event) -> Result<()> {
        match e.operation {
            Operation::Insert => self.encode(
                l,
                out,
                "insert",
                e.after.as_ref().expect("insert"),
                e.sequence,
                false,
            ),
            Operation::Delete => self.encode(
                l,
                out,
                "delete",
                e.before.as_ref().expect("delete"),
                e.sequence,
                false,
            ),
            Operation::Update => {
                let before = e.before.as_ref().expect("update");
                let after = e.after.as_ref().expect("update");
                let key_changed = l.key.iter().any(|&i| !before[i].same(&after[i]));
                if key_changed {
                    self.encode(l, out, "delete", before, e.sequence, false)?;
                }
                self.encode(l, out, "update", after, e.sequence, false)
            }
        }
    }

    /// Apply a batch stream. Batches before the stored cursor are skipped; a
    /// gap or another source fails before anything of that batch is written.
    pub fn apply_stream<R: BufRead>(
        &mut self,
        input: &mut BatchStreamReader<R>,
        progress: &mut dyn FnMut(&ApplyStats),
    ) -> Result<ApplyStats> {
        let mut stats = ApplyStats {
            cursor: self.cursor()?,
            ..Default::default()
        };
        self.committed = stats.clone();
        let mut layouts: HashMap<String, Layout> = HashMap::new();
        let mut bufs: HashMap<String, Held> = HashMap::new();
        let mut skip_through = 0u128;
        let mut stored: Option<Cursor> = None;
        let mut start: Option<(Cursor, bool)> = None;
        while let Some(item) = input.next_item()? {
            match item {
                Item::Header(h) => {
                    stored = self.cursor()?;
                    skip_through = super::skip_through(stored.as_ref(), &h.start)?;
                    start = Some((h.start.clone(), h.compacted));
                    let schemas = h.schemas.as_ref().ok_or_else(|| {
                        Error::data(
                            "a ClickHouse target needs the tables' schemas in the batch header",
                        )
                    })?;
                    layouts.clear();
                    bufs.clear();
                    for s in schemas {
                        let l = Layout::new(s, &h.start.source);
                        self.ensure(&l)?;
                        layouts.insert(s.table.clone(), l);
                    }
                }
                Item::Event(e) => {
                    if e.sequence <= skip_through {
                        stats.skipped += 1;
                        continue;
                    }
                    let l = &layouts[&e.table];
                    let held = bufs.entry(e.table.clone()).or_insert_with(Held::new);
                    self.encode_event(l, &mut held.row, &e)?;
                    held.take_row(self.cfg.max_insert_bytes)?;
                    stats.applied += 1;
                    if stats.applied % 65536 == 0 {
                        progress(&stats);
                    }
                }
                Item::Commit(c) => {
                    let (s, compacted) = start.take().expect("validated stream");
                    super::check_compacted(&s, compacted, skip_through, &c.end)?;
                    // The batch is valid: now its rows go out.
                    for (t, held) in bufs.iter_mut() {
                        self.flush(&layouts[t], held)?;
                    }
                    bufs.clear();
                    if c.end.sequence() > skip_through || stored.is_none() {
                        self.set_cursor(&c.end)?;
                        stats.cursor = Some(c.end.clone());
                    }
                    stats.batches += 1;
                    self.committed = stats.clone();
                    progress(&stats);
                }
            }
        }
        Ok(stats)
    }

    /// Load a snapshot into a target holding no cursor; rows take the version
    /// of the snapshot's cursor, so every later change supersedes them.
    pub fn apply_snapshot<R: BufRead>(
        &mut self,
        input: &mut SnapshotReader<R>,
        existing: ExistingRows,
        progress: &mut dyn FnMut(&ApplyStats),
    ) -> Result<ApplyStats> {
        let mut stats = ApplyStats::default();
        self.committed = stats.clone();
        let mut layouts: HashMap<String, Layout> = HashMap::new();
        let mut bufs: HashMap<String, Held> = HashMap::new();
        let mut cursor: Option<Cursor> = None;
        while let Some(item) = input.next_item()? {
            match item {
                SnapItem::Header { cursor: c, schemas } => {
                    if let Some(held) = self.cursor()? {
                        return Err(Error::state(format!(
                            "the target already holds source {:?} at {}; a snapshot loads only into a target without a cursor",
                            held.source,
                            held.sequence()
                        )));
                    }
                    for s in &schemas {
                        let l = Layout::new(s, &c.source);
                        self.ensure(&l)?;
                        if existing == ExistingRows::Refuse && self.holds_rows(&l.name)? {
                            return Err(super::existing_rows_error(&s.table));
                        }
                        layouts.insert(s.table.clone(), l);
                    }
                    cursor = Some(c);
                }
                SnapItem::Row { table, row } => {
                    let c = cursor.as_ref().expect("validated snapshot");
                    let l = &layouts[&table];
                    let held = bufs.entry(table.clone()).or_insert_with(Held::new);
                    self.encode(l, &mut held.row, "insert", &row, c.sequence(), true)?;
                    held.take_row(self.cfg.max_insert_bytes)?;
                    stats.applied += 1;
                    if stats.applied % 65536 == 0 {
                        progress(&stats);
                    }
                }
                SnapItem::Commit { .. } => {
                    // Emptied only now that the snapshot is known to be
                    // whole: a bad one leaves the tables as they were. No
                    // cursor is stored yet, so a crash from here on is
                    // mended by loading the snapshot again.
                    if existing == ExistingRows::Replace {
                        for l in layouts.values() {
                            self.query(
                                &format!(
                                    "TRUNCATE TABLE {}.{}",
                                    qi(&self.cfg.database),
                                    qi(&l.name)
                                ),
                                None,
                                Timeout::Ddl,
                            )?;
                        }
                    }
                    for (t, held) in bufs.iter_mut() {
                        self.flush(&layouts[t], held)?;
                    }
                    bufs.clear();
                    let c = cursor.take().expect("validated snapshot");
                    self.set_cursor(&c)?;
                    stats.batches += 1;
                    stats.cursor = Some(c);
                    self.committed = stats.clone();
                    progress(&stats);
                }
            }
        }
        Ok(stats)
    }

    /// The data columns of the table a schema maps to; `None` when it does not exist.
    pub fn table_columns(&self, schema: &Schema) -> Result<Option<Vec<String>>> {
        let have = self.columns_of(&table_name(&schema.table))?;
        if have.is_empty() {
            return Ok(None);
        }
        Ok(Some(
            have.into_iter()
                .filter(|c| !c.starts_with("_etl_") && !c.starts_with("cdc_"))
                .collect(),
        ))
    }

    /// Rows of a table's current state in key order, for an audit; `None`
    /// when the table does not exist.
    pub fn current_rows(&self, schema: &Schema, source: &str) -> Result<Option<ChRows>> {
        let l = Layout::new(schema, source);
        let have = self.columns_of(&l.name)?;
        if have.is_empty() {
            return Ok(None);
        }
        if !have.iter().any(|c| c == "_etl_version") {
            return Err(Error::usage(
                "an audit compares current state: audit tables made with --engine replacing",
            ));
        }
        if let Some(&i) = l.key.iter().find(|&&i| l.types[i] == ChType::Any) {
            return Err(Error::state(format!(
                "table {:?} cannot be audited in key order: its key column {:?} has no type, so ClickHouse holds it as text that sorts differently (give key columns a type)",
                schema.table, schema.columns[i].name
            )));
        }
        let cols: Vec<String> = schema.columns.iter().map(|c| qi(&c.name)).collect();
        let keys: Vec<String> = schema.key.iter().map(|k| qi(k)).collect();
        let view = format!(
            "{}.{}",
            qi(&self.cfg.database),
            qi(&format!("{}__current", l.name))
        );
        let resp = self.send(
            &format!(
                "SELECT {} FROM {view} ORDER BY {} FORMAT RowBinary",
                cols.join(", "),
                keys.join(", ")
            ),
            None,
            Timeout::Insert,
        )?;
        Ok(Some(ChRows {
            r: std::io::BufReader::with_capacity(1 << 16, resp),
            layout: l,
        }))
    }
}

/// A table's rows streamed from a RowBinary reply.
pub struct ChRows {
    r: std::io::BufReader<reqwest::blocking::Response>,
    layout: Layout,
}

impl ChRows {
    pub fn next_row(&mut self) -> Result<Option<Row>> {
        if self
            .r
            .fill_buf()
            .map_err(|e| Error::io("cannot read the ClickHouse reply", e))?
            .is_empty()
        {
            return Ok(None);
        }
        let mut row = Vec::with_capacity(self.layout.types.len());
        for (i, ty) in self.layout.types.iter().enumerate() {
            row.push(decode_value(&mut self.r, *ty, self.layout.nullable(i))?);
        }
        Ok(Some(row))
    }
}

/// A ClickHouse string literal.
fn sql_string(s: &str) -> String {
    format!("'{}'", s.replace('\\', "\\\\").replace('\'', "\\'"))
}

/// Undo TabSeparated escaping.
fn tsv_unescape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut it = s.chars();
    while let Some(c) = it.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match it.next() {
            Some('t') => out.push('\t'),
            Some('n') => out.push('\n'),
            Some('r') => out.push('\r'),
            Some('b') => out.push('\u{8}'),
            Some('f') => out.push('\u{c}'),
            Some('0') => out.push('\0'),
            Some(other) => out.push(other),
            None => out.push('\\'),
        }
    }
    out
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// The useful part of a ClickHouse error body.
fn error_text(body: &str) -> String {
    let t = body.trim();
    let t = t.split(", e.what()").next().unwrap_or(t);
    let t = t.replace("e.displayText() = ", "");
    t.chars().take(1000).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_versions() {
        assert_eq!(table_name("public.my_table"), "public_my__table");
        assert_eq!(version("sqlite:x", 5).unwrap(), 5);
        assert!(
            version("postgres:x", (1u128 << 64) | 2).unwrap()
                > version("postgres:x", 1u128 << 64).unwrap()
        );
        assert!(version("postgres:x", 1u128 << 64 | (1 << 24)).is_err());
    }

    #[test]
    fn decimals_are_exact() {
        assert_eq!(decimal_scaled("12.34", 10, 4).unwrap(), 123400);
        assert_eq!(format_decimal(123400, 4), "12.3400");
        assert_eq!(format_decimal(-5, 2), "-0.05");
        assert!(decimal_scaled("1.234", 10, 2).is_err());
        assert!(decimal_scaled("123456789012", 10, 2).is_err());
        assert!(decimal_scaled("1e5", 10, 2).is_err());
    }

    #[test]
    fn rowbinary_round_trips() {
        let cases = [
            (ChType::Int64, Value::Integer(i64::MIN)),
            (ChType::Float64, Value::Real(5e-324)),
            (ChType::Float32, Value::Real(0.1f32 as f64)),
            (ChType::Text, Value::Text("\u{feff}a\u{0}😀".into())),
            (ChType::Blob, Value::Blob(vec![0, 255])),
            (ChType::Any, Value::Real(-1.5)),
            (ChType::Decimal(10, 2), Value::Text("-12.30".into())),
            (ChType::Bool, Value::Integer(1)),
            (ChType::Int64, Value::Null),
        ];
        for (ty, v) in cases {
            let mut b = Vec::new();
            encode_value(&mut b, ty, true, &v).unwrap();
            let back = decode_value(&mut &b[..], ty, true).unwrap();
            assert!(back.same(&v), "{ty:?} {v:?} came back as {back:?}");
        }
        let mut b = Vec::new();
        assert!(encode_value(&mut b, ChType::Int32, true, &Value::Integer(1 << 40)).is_err());
        assert!(encode_value(&mut b, ChType::Float32, true, &Value::Real(0.1)).is_err());
        assert!(encode_value(&mut b, ChType::Text, true, &Value::Blob(vec![])).is_err());
        assert!(encode_value(&mut b, ChType::Int64, false, &Value::Null).is_err());
    }
}
