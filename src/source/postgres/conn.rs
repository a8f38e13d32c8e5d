//! PostgreSQL connection settings: a libpq URL or `key=value` string, plus
//! the usual environment variables (`PGHOST`, `PGPORT`, `PGUSER`,
//! `PGPASSWORD`, `PGDATABASE`). TLS per `sslmode`: `disable`, `require`
//! (encrypted, certificate not checked), `verify-ca` (chain checked),
//! `verify-full` (chain and host name). The default is `verify-full`, except
//! for a loopback host or a Unix socket, where it is `disable`. Roots come
//! from `sslrootcert`, else the Mozilla bundle (webpki-roots). Passwords are
//! never printed: `Debug` and every message leave them out.
//!
//! As in libpq, `PGSSLMODE` and `PGSSLROOTCERT` stand in for `sslmode` and
//! `sslrootcert` when the string does not give them: the string wins over
//! the environment, which wins over the default above. `PGSSLMODE` takes
//! `disable`, `require`, `verify-ca` or `verify-full`; `prefer` and `allow`
//! there (`prefer` is libpq's own default, so it is often set) mean "no
//! explicit request" and leave the default in force, so a remote host still
//! gets `verify-full`. In the string itself they are refused. Any other value
//! is a usage error. A request for TLS, from either place, fails against a
//! server without TLS: it never falls back to plaintext.

use crate::error::{Error, Result};
use std::path::PathBuf;
use std::time::Duration;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SslMode {
    Disable,
    Require,
    VerifyCa,
    VerifyFull,
}

impl SslMode {
    pub fn as_str(self) -> &'static str {
        match self {
            SslMode::Disable => "disable",
            SslMode::Require => "require",
            SslMode::VerifyCa => "verify-ca",
            SslMode::VerifyFull => "verify-full",
        }
    }
}

fn bad_attrs(v: &str) -> Error {
    Error::usage(format!(
        "unknown target_session_attrs {v:?}; choose any, read-write, read-only, primary, standby or prefer-standby"
    ))
}

fn bad_balance(v: &str) -> Error {
    Error::usage(format!(
        "unknown load_balance_hosts {v:?}; choose disable or random"
    ))
}

/// Parsed connection settings.
#[derive(Clone)]
pub struct PgConn {
    pub host: String,
    /// `hostaddr` (PGHOSTADDR): the address to connect to; `host` still
    /// names the server for TLS and the password file.
    pub hostaddr: Option<String>,
    pub port: u16,
    pub user: String,
    password: Option<String>,
    /// The password file to look each host's password up in, when no
    /// password was given (libpq reads it per host of a multi-host string).
    passfile: Option<PathBuf>,
    pub dbname: String,
    pub sslmode: SslMode,
    pub sslrootcert: Option<PathBuf>,
    pub connect_timeout: Duration,
    pub keepalives_idle: Duration,
    pub application_name: String,
    /// `schema=`: a target's schema for a SQLite source's tables (a
    /// PostgreSQL source's tables keep their own).
    pub target_schema: Option<String>,
    /// Every server of a multi-host string (`host=h1,h2 port=p1,p2`, or
    /// `postgres://u@h1:p1,h2:p2/db`), in order, the first being
    /// `host`/`port`; one entry for a single host.
    pub hosts: Vec<(String, u16)>,
    /// `target_session_attrs`: which server of `hosts` a session takes.
    pub session_attrs: SessionAttrs,
    /// `load_balance_hosts=random`: try `hosts` in a random order.
    pub load_balance: bool,
}

/// libpq's `target_session_attrs`: which kind of server a session accepts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SessionAttrs {
    Any,
    ReadWrite,
    ReadOnly,
    Primary,
    Standby,
    /// A standby if one answers, else any.
    PreferStandby,
}

impl SessionAttrs {
    fn named(v: &str) -> Option<SessionAttrs> {
        Some(match v {
            "any" => SessionAttrs::Any,
            "read-write" => SessionAttrs::ReadWrite,
            "read-only" => SessionAttrs::ReadOnly,
            "primary" => SessionAttrs::Primary,
            "standby" => SessionAttrs::Standby,
            "prefer-standby" => SessionAttrs::PreferStandby,
            _ => return None,
        })
    }

    pub fn as_str(self) -> &'static str {
        match self {
            SessionAttrs::Any => "any",
            SessionAttrs::ReadWrite => "read-write",
            SessionAttrs::ReadOnly => "read-only",
            SessionAttrs::Primary => "primary",
            SessionAttrs::Standby => "standby",
            SessionAttrs::PreferStandby => "prefer-standby",
        }
    }

    /// Whether a server in recovery (`in_recovery`) whose sessions are
    /// read-only by default (`read_only`) suits; `PreferStandby`'s second
    /// pass takes any.
    pub fn accepts(self, in_recovery: bool, read_only: bool) -> bool {
        match self {
            SessionAttrs::Any => true,
            SessionAttrs::ReadWrite => !read_only && !in_recovery,
            SessionAttrs::ReadOnly => read_only || in_recovery,
            SessionAttrs::Primary => !in_recovery,
            SessionAttrs::Standby | SessionAttrs::PreferStandby => in_recovery,
        }
    }
}

impl PgConn {
    /// One single-host configuration per server to try, in the order to
    /// try them (shuffled with `load_balance_hosts=random`).
    pub fn candidates(&self) -> Vec<PgConn> {
        let mut order: Vec<usize> = (0..self.hosts.len()).collect();
        if self.load_balance && order.len() > 1 {
            // A shuffle seeded by the clock and the process: spreading
            // sessions is all it is for.
            let mut x = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos() as u64)
                .unwrap_or(1)
                ^ ((std::process::id() as u64) << 32)
                | 1;
            for i in (1..order.len()).rev() {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                order.swap(i, (x % (i as u64 + 1)) as usize);
            }
        }
        order
            .into_iter()
            .map(|i| {
                let (h, p) = &self.hosts[i];
                let mut c = self.clone();
                if i != 0 {
                    c.hostaddr = None;
                }
                c.host = h.clone();
                c.port = *p;
                c.hosts = vec![(h.clone(), *p)];
                if let Some(file) = &self.passfile {
                    c.password =
                        super::pgpass::password_from_file(file, h, *p, &self.dbname, &self.user);
                }
                c
            })
            .collect()
    }
}

impl std::fmt::Debug for PgConn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.display())
    }
}

/// Split a `key=value key='quoted value'` string.
fn key_values(s: &str) -> Result<Vec<(String, String)>> {
    let mut out = Vec::new();
    let mut chars = s.chars().peekable();
    loop {
        while chars.peek().is_some_and(|c| c.is_whitespace()) {
            chars.next();
        }
        if chars.peek().is_none() {
            return Ok(out);
        }
        let mut key = String::new();
        while let Some(&c) = chars.peek() {
            if c == '=' || c.is_whitespace() {
                break;
            }
            key.push(c);
            chars.next();
        }
        while chars.peek().is_some_and(|c| c.is_whitespace()) {
            chars.next();
        }
        if chars.next() != Some('=') {
            // After a password, the word may be the rest of a password
            // holding a space: not echoed.
            return Err(Error::usage(match out.last() {
                Some((k, _)) if k == "password" => format!(
                    "the connection string has a word without =VALUE after password=… (not shown: it may be part of the password); {KV_PASSWORD_HINT}"
                ),
                _ => format!("connection option {key:?} has no value"),
            }));
        }
        while chars.peek().is_some_and(|c| c.is_whitespace()) {
            chars.next();
        }
        let mut val = String::new();
        if chars.peek() == Some(&'\'') {
            chars.next();
            loop {
                match chars.next() {
                    None => {
                        return Err(Error::usage(
                            "unterminated quoted value in the connection string",
                        ))
                    }
                    Some('\\') => {
                        if let Some(c) = chars.next() {
                            val.push(c)
                        }
                    }
                    Some('\'') => break,
                    Some(c) => val.push(c),
                }
            }
        } else {
            while let Some(&c) = chars.peek() {
                if c.is_whitespace() {
                    break;
                }
                if c == '\\' {
                    chars.next();
                    if let Some(c) = chars.next() {
                        val.push(c);
                    }
                    continue;
                }
                val.push(c);
                chars.next();
            }
        }
        out.push((key, val));
    }
}

fn is_loopback(host: &str) -> bool {
    host.starts_with('/') || host == "localhost" || host == "::1" || host.starts_with("127.")
}

/// The mode an `sslmode` value names, if it is one of the four MoonCDC takes.
fn ssl_mode_named(v: &str) -> Option<SslMode> {
    match v {
        "disable" => Some(SslMode::Disable),
        "require" => Some(SslMode::Require),
        "verify-ca" => Some(SslMode::VerifyCa),
        "verify-full" => Some(SslMode::VerifyFull),
        _ => None,
    }
}

/// Every connection option a URL's query or a `key=value` string may hold
/// (those MoonCDC ignores included): what `PgConn::parse` takes, and what
/// makes a `key=value` string a PostgreSQL endpoint.
pub const KEYS: &[&str] = &[
    "host",
    "hostaddr",
    "port",
    "user",
    "password",
    "dbname",
    "sslmode",
    "sslrootcert",
    "connect_timeout",
    "keepalives_idle",
    "application_name",
    "schema",
    "service",
    "keepalives",
    "keepalives_interval",
    "keepalives_count",
    "options",
    "target_session_attrs",
    "load_balance_hosts",
    "sslcompression",
    "gssencmode",
    "channel_binding",
    "replication",
    "client_encoding",
];

/// The way out of a URL broken by a password's special characters.
const PASSWORD_HINT: &str = "a password holding /, ?, # or @ must be percent-encoded in a URL (/ as %2F, ? as %3F, # as %23, @ as %40, % as %25), or given by PGPASSWORD or ~/.pgpass (PGPASSFILE) instead";

/// The way out of a `key=value` string broken by a password's spaces.
const KV_PASSWORD_HINT: &str = "a value holding spaces is quoted, password='a b' (with \\' and \\\\ for a quote and a backslash in it), or the password given by PGPASSWORD or ~/.pgpass (PGPASSFILE) instead";

/// An `@` after a URL's host part that no user part before it explains: in
/// the path, or in a query option that is not one of libpq's (whose values,
/// `user=app@corp`, may hold one).
fn stray_at(path: Option<&str>, query: Option<&str>) -> bool {
    path.is_some_and(|p| p.contains('@'))
        || query.is_some_and(|q| {
            q.split('&').any(|pair| {
                let key = pair.split_once('=').map_or(pair, |(k, _)| k);
                key.contains('@') || (pair.contains('@') && !KEYS.contains(&key))
            })
        })
}

impl PgConn {
    /// Parse a libpq URL (`postgres://user:pass@host:port/db?sslmode=…`) or a
    /// `key=value` string, with the process environment filling what it leaves out.
    pub fn parse(s: &str) -> Result<PgConn> {
        Self::parse_with_env(s, &|k| std::env::var(k).ok())
    }

    /// [`parse`](Self::parse) with `env` standing in for the process
    /// environment (`PGHOST`, `PGSSLMODE`, …).
    pub fn parse_with_env(s: &str, lookup: &dyn Fn(&str) -> Option<String>) -> Result<PgConn> {
        let mut kv: Vec<(String, String)> = Vec::new();
        if let Some(rest) = s
            .strip_prefix("postgres://")
            .or_else(|| s.strip_prefix("postgresql://"))
        {
            let (main, query) = match rest.split_once('?') {
                Some((m, q)) => (m, Some(q)),
                None => (rest, None),
            };
            let (authority, path) = match main.split_once('/') {
                Some((a, p)) => (a, Some(p)),
                None => (main, None),
            };
            let (userinfo, hostport) = match authority.rsplit_once('@') {
                Some((u, h)) => (Some(u), h),
                None => (None, authority),
            };
            // A password holding an unescaped `/` or `?` ends the host part
            // early: what follows it (`…@host/db`) lands in the database
            // name or the options, and its first part in the host and port.
            // None of it is echoed: it is part of a password.
            if userinfo.is_none() && stray_at(path, query) {
                return Err(Error::usage(format!(
                    "the PostgreSQL URL is not valid: an @ comes after the host part (after :// up to the first / or ?); {PASSWORD_HINT}"
                )));
            }
            if let Some(u) = userinfo {
                match u.split_once(':') {
                    Some((user, pw)) => {
                        kv.push(("user".into(), crate::util::percent_decode(user)?));
                        kv.push(("password".into(), crate::util::percent_decode(pw)?));
                    }
                    None => kv.push(("user".into(), crate::util::percent_decode(u)?)),
                }
            }
            // Several servers: `h1:p1,h2:p2` (libpq's multi-host URL).
            let mut url_hosts: Vec<String> = Vec::new();
            let mut url_ports: Vec<String> = Vec::new();
            let many = hostport.contains(',');
            for hostport in hostport.split(',') {
                if hostport.is_empty() && !many {
                    continue;
                }
                let (h, p) = if let Some(rest) = hostport.strip_prefix('[') {
                    match rest.split_once(']') {
                        Some((h, p)) => (h.to_string(), p.strip_prefix(':').map(str::to_string)),
                        None => {
                            return Err(Error::usage(
                                "unterminated [IPv6] host in the PostgreSQL URL",
                            ))
                        }
                    }
                } else {
                    match hostport.rsplit_once(':') {
                        Some((h, p)) => (h.to_string(), Some(p.to_string())),
                        None => (hostport.to_string(), None),
                    }
                };
                if let Some(p) = &p {
                    // Without a user part, the "host:port" may be a user
                    // and the start of a password: not echoed.
                    if userinfo.is_none() && p.parse::<u16>().is_err() {
                        return Err(Error::usage(format!(
                            "the PostgreSQL URL's port (after the host's :) is not a number; {PASSWORD_HINT}"
                        )));
                    }
                }
                url_hosts.push(crate::util::percent_decode(&h)?);
                url_ports.push(p.unwrap_or_default());
            }
            if url_hosts.iter().any(|h| !h.is_empty()) {
                kv.push(("host".into(), url_hosts.join(",")));
            }
            if url_ports.iter().any(|p| !p.is_empty()) {
                kv.push(("port".into(), url_ports.join(",")));
            }
            if let Some(p) = path.filter(|p| !p.is_empty()) {
                kv.push(("dbname".into(), crate::util::percent_decode(p)?));
            }
            if let Some(q) = query {
                for pair in q.split('&').filter(|p| !p.is_empty()) {
                    let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
                    kv.push((
                        crate::util::percent_decode(k)?,
                        crate::util::percent_decode(v)?,
                    ));
                }
            }
        } else {
            kv = key_values(s)?;
        }
        let env = |k: &str| lookup(k).filter(|v| !v.is_empty());
        // A service (`service=NAME`, else PGSERVICE): its settings count as
        // if given before the string's, so the string's win over them, and
        // both over the environment (libpq's order).
        let service = kv
            .iter()
            .rev()
            .find(|(k, _)| k == "service")
            .map(|(_, v)| v.clone())
            .or_else(|| env("PGSERVICE"));
        if let Some(name) = service {
            let mut from_file = super::pgservice::settings(&name, lookup)?;
            from_file.retain(|(k, _)| k != "service");
            from_file.extend(kv);
            kv = from_file;
        }
        let mut host = env("PGHOST");
        let mut hostaddr = env("PGHOSTADDR");
        let mut port_list: String = env("PGPORT").unwrap_or_default();
        let mut session_attrs = match env("PGTARGETSESSIONATTRS") {
            None => SessionAttrs::Any,
            Some(v) => SessionAttrs::named(&v).ok_or_else(|| bad_attrs(&v))?,
        };
        let mut load_balance = match env("PGLOADBALANCEHOSTS").as_deref() {
            None | Some("disable") => false,
            Some("random") => true,
            Some(v) => return Err(bad_balance(v)),
        };
        let mut user = env("PGUSER")
            .or_else(|| env("USER"))
            .unwrap_or_else(|| "postgres".into());
        let mut password = env("PGPASSWORD");
        let mut dbname: Option<String> = env("PGDATABASE");
        let mut sslmode: Option<SslMode> = None;
        let mut sslrootcert = None;
        // 0 is libpq's "wait forever": a month here.
        let timeout_of = |n: u64| Duration::from_secs(if n == 0 { 30 * 86_400 } else { n });
        let mut connect_timeout = match env("PGCONNECT_TIMEOUT") {
            None => Duration::from_secs(10),
            Some(v) => timeout_of(v.trim().parse::<u64>().map_err(|_| {
                Error::usage(format!(
                    "PGCONNECT_TIMEOUT {v:?} is not a number of seconds"
                ))
            })?),
        };
        let mut keepalives_idle = Duration::from_secs(30);
        let mut application_name = env("PGAPPNAME").unwrap_or_else(|| "mooncdc".to_string());
        let mut target_schema = None;
        let mut after_password = false;
        for (k, v) in kv {
            let follows_password = std::mem::replace(&mut after_password, k == "password");
            match k.as_str() {
                "host" => host = Some(v),
                "hostaddr" => hostaddr = Some(v),
                "port" => port_list = v,
                "target_session_attrs" => {
                    session_attrs = SessionAttrs::named(&v).ok_or_else(|| bad_attrs(&v))?
                }
                "load_balance_hosts" => {
                    load_balance = match v.as_str() {
                        "disable" => false,
                        "random" => true,
                        _ => return Err(bad_balance(&v)),
                    }
                }
                "user" => user = v,
                "password" => password = Some(v),
                "dbname" => dbname = Some(v),
                "sslmode" => {
                    sslmode = Some(match (ssl_mode_named(&v), v.as_str()) {
                        (Some(m), _) => m,
                        (None, "allow" | "prefer") => {
                            return Err(Error::usage(format!(
                                "sslmode={v} may fall back to plaintext silently; choose disable, require, verify-ca or verify-full"
                            )))
                        }
                        (None, _) => return Err(Error::usage(format!("unknown sslmode {v:?}"))),
                    })
                }
                "sslrootcert" => sslrootcert = Some(PathBuf::from(v)),
                "connect_timeout" => {
                    let n: u64 = v
                        .parse()
                        .map_err(|_| Error::usage(format!("connect_timeout {v:?} is not a number of seconds")))?;
                    connect_timeout = timeout_of(n);
                }
                "keepalives_idle" => {
                    let n: u64 = v
                        .parse()
                        .map_err(|_| Error::usage(format!("keepalives_idle {v:?} is not a number of seconds")))?;
                    keepalives_idle = Duration::from_secs(n.max(1));
                }
                "application_name" => application_name = v,
                "schema" => target_schema = Some(v),
                "service" => {}
                // Options MoonCDC sets itself or that have no meaning here.
                "keepalives" | "keepalives_interval" | "keepalives_count" | "options"
                | "sslcompression" | "gssencmode" | "channel_binding" | "replication" | "client_encoding" => {}
                // A password holding a space and an `=` would leave its
                // rest here: not echoed.
                _ if follows_password => {
                    return Err(Error::usage(format!(
                        "unknown PostgreSQL connection option right after password=… (not shown: it may be part of the password); {KV_PASSWORD_HINT}"
                    )))
                }
                other => return Err(Error::usage(format!("unknown PostgreSQL connection option {other:?}"))),
            }
        }
        // An address alone names the server too (for TLS, that address).
        let host_list = host
            .or_else(|| hostaddr.clone())
            .unwrap_or_else(|| "localhost".into());
        let names: Vec<String> = host_list
            .split(',')
            .map(|h| {
                if h.is_empty() {
                    "localhost".to_string()
                } else {
                    h.to_string()
                }
            })
            .collect();
        let ports: Vec<&str> = port_list.split(',').collect();
        if ports.len() > 1 && ports.len() != names.len() {
            return Err(Error::usage(format!(
                "{} ports for {} hosts: give one port, or one for each host",
                ports.len(),
                names.len()
            )));
        }
        let mut hosts = Vec::with_capacity(names.len());
        for (i, h) in names.iter().enumerate() {
            let p = if ports.len() > 1 { ports[i] } else { ports[0] };
            let p: u16 = if p.is_empty() {
                5432
            } else {
                p.parse()
                    .map_err(|_| Error::usage(format!("port {p:?} is not a number")))?
            };
            hosts.push((h.clone(), p));
        }
        if hosts.len() > 1 && hostaddr.is_some() {
            return Err(Error::usage(
                "hostaddr goes with one host; with several, name them in host",
            ));
        }
        let (host, port) = hosts[0].clone();
        if let Some(a) = &hostaddr {
            a.parse::<std::net::IpAddr>()
                .map_err(|_| Error::usage(format!("hostaddr {a:?} is not a numeric IP address")))?;
        }
        let dbname = dbname.unwrap_or_else(|| user.clone());
        // libpq's order: the string, then the environment, then the default.
        // The environment is read only when the string is silent.
        if sslmode.is_none() {
            sslmode = match env("PGSSLMODE") {
                None => None,
                Some(v) => match (ssl_mode_named(&v), v.as_str()) {
                    (Some(m), _) => Some(m),
                    // libpq's default, often set explicitly: no request for TLS.
                    (None, "allow" | "prefer") => None,
                    (None, _) => {
                        return Err(Error::usage(format!(
                            "unknown PGSSLMODE {v:?} in the environment; choose disable, require, verify-ca or verify-full"
                        )))
                    }
                },
            };
        }
        // TLS is left off by default only when every server is on this
        // machine: `localhost,db.example` verifies db.example.
        let sslmode = sslmode.unwrap_or(if hosts.iter().all(|(h, _)| is_loopback(h)) {
            SslMode::Disable
        } else {
            SslMode::VerifyFull
        });
        let sslrootcert = sslrootcert.or_else(|| env("PGSSLROOTCERT").map(PathBuf::from));
        // Last, as libpq: the password file (PGPASSFILE, else ~/.pgpass),
        // looked up for each host (`candidates`).
        let mut passfile = None;
        if password.is_none() {
            passfile = env("PGPASSFILE")
                .map(PathBuf::from)
                .or_else(|| env("HOME").map(|h| PathBuf::from(h).join(".pgpass")));
            if let Some(file) = &passfile {
                password = super::pgpass::password_from_file(file, &host, port, &dbname, &user);
            }
        }
        Ok(PgConn {
            host,
            hostaddr,
            port,
            user,
            password,
            passfile,
            dbname,
            sslmode,
            sslrootcert,
            connect_timeout,
            keepalives_idle,
            application_name,
            target_schema,
            hosts,
            session_attrs,
            load_balance,
        })
    }

    /// For messages: never includes the password.
    pub fn display(&self) -> String {
        let hosts: Vec<String> = self.hosts.iter().map(|(h, p)| format!("{h}:{p}")).collect();
        format!(
            "postgres://{}@{}/{}",
            self.user,
            hosts.join(","),
            self.dbname
        )
    }

    /// Settings every session starts with, so text values come out in one form.
    pub const SESSION_OPTIONS: &'static str =
        "-c extra_float_digits=3 -c DateStyle=ISO,YMD -c TimeZone=UTC -c bytea_output=hex -c IntervalStyle=postgres -c client_encoding=UTF8";

    /// A tokio-postgres configuration.
    pub fn tokio_config(&self, role: &str) -> tokio_postgres::Config {
        let mut c = tokio_postgres::Config::new();
        if let Some(a) = self.hostaddr.as_deref().and_then(|a| a.parse().ok()) {
            c.hostaddr(a);
        }
        c.host(&self.host)
            .port(self.port)
            .user(&self.user)
            .dbname(&self.dbname)
            .connect_timeout(self.connect_timeout)
            .keepalives(true)
            .keepalives_idle(self.keepalives_idle)
            .application_name(format!("{} {role}", self.application_name))
            .options(Self::SESSION_OPTIONS);
        if let Some(p) = &self.password {
            c.password(p);
        }
        c.ssl_mode(if self.sslmode == SslMode::Disable {
            tokio_postgres::config::SslMode::Disable
        } else {
            tokio_postgres::config::SslMode::Require
        });
        c
    }

    /// The password, if one was given (URL, key=value string or PGPASSWORD).
    pub fn password(&self) -> Option<&str> {
        self.password.as_deref()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Parse with an environment of exactly `vars` (the process's is never read).
    fn parse_in(s: &str, vars: &[(&str, &str)]) -> Result<PgConn> {
        let lookup = |k: &str| {
            vars.iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.to_string())
        };
        PgConn::parse_with_env(s, &lookup)
    }

    fn parse(s: &str) -> Result<PgConn> {
        parse_in(s, &[])
    }

    #[test]
    fn every_listed_key_is_taken() {
        for k in KEYS {
            let v = match *k {
                "port" | "connect_timeout" | "keepalives_idle" => "5",
                "sslmode" => "disable",
                "service" => continue, // needs a service file: tested below
                _ => "x",
            };
            if let Err(e) = parse(&format!("{k}={v} dbname=d")) {
                assert!(
                    !e.message().contains("unknown PostgreSQL connection option"),
                    "{k}: {}",
                    e.message()
                );
            }
        }
        assert!(parse("colour=blue dbname=d")
            .unwrap_err()
            .message()
            .contains("unknown PostgreSQL connection option"));
    }

    #[test]
    fn libpq_environment_and_service_file_in_libpqs_order() {
        let c = parse_in(
            "dbname=x",
            &[
                ("PGAPPNAME", "nightly-load"),
                ("PGCONNECT_TIMEOUT", "4"),
                ("PGHOST", "name.example"),
                ("PGHOSTADDR", "10.0.0.5"),
            ],
        )
        .unwrap();
        assert_eq!(c.application_name, "nightly-load");
        assert_eq!(c.connect_timeout, Duration::from_secs(4));
        // The address to connect to; the name still names the server.
        assert_eq!(
            (c.host.as_str(), c.hostaddr.as_deref()),
            ("name.example", Some("10.0.0.5"))
        );
        let c = parse_in("hostaddr=10.0.0.6 dbname=x", &[]).unwrap();
        assert_eq!(
            (c.host.as_str(), c.hostaddr.as_deref()),
            ("10.0.0.6", Some("10.0.0.6"))
        );
        assert!(parse_in("hostaddr=db.example dbname=x", &[]).is_err());
        // 0 is "wait forever", as libpq's.
        let c = parse_in("dbname=x", &[("PGCONNECT_TIMEOUT", "0")]).unwrap();
        assert!(c.connect_timeout > Duration::from_secs(86_400));
        // The string wins over the environment.
        let c = parse_in(
            "dbname=x application_name=mine connect_timeout=2",
            &[("PGAPPNAME", "env"), ("PGCONNECT_TIMEOUT", "9")],
        )
        .unwrap();
        assert_eq!(
            (c.application_name.as_str(), c.connect_timeout),
            ("mine", Duration::from_secs(2))
        );
        // A service: its settings under the string's, over the environment's.
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("services.conf");
        std::fs::write(
            &file,
            "[shop]\nhost=svc.example\nport=6543\ndbname=shop\nuser=svcuser\n[other]\nhost=no\n",
        )
        .unwrap();
        let f = file.to_str().unwrap();
        let env = [
            ("PGSERVICEFILE", f),
            ("PGHOST", "env.example"),
            ("PGUSER", "envuser"),
        ];
        let c = parse_in("service=shop user=mine", &env).unwrap();
        assert_eq!(
            (c.host.as_str(), c.port, c.dbname.as_str(), c.user.as_str()),
            ("svc.example", 6543, "shop", "mine")
        );
        let mut with_pgservice = env.to_vec();
        with_pgservice.push(("PGSERVICE", "shop"));
        let c = parse_in("postgres:///?sslmode=disable", &with_pgservice).unwrap();
        assert_eq!(
            (c.host.as_str(), c.dbname.as_str(), c.user.as_str()),
            ("svc.example", "shop", "svcuser")
        );
        let e = parse_in("service=nope", &env).unwrap_err().to_string();
        assert!(
            e.contains("definition of service \"nope\" not found"),
            "{e}"
        );
        // The system's file, when the user's does not name the service.
        let sys = dir.path().join("sys");
        std::fs::create_dir(&sys).unwrap();
        std::fs::write(
            sys.join("pg_service.conf"),
            "[central]\nhost=central.example\n",
        )
        .unwrap();
        let c = parse_in(
            "service=central dbname=d",
            &[
                ("PGSERVICEFILE", f),
                ("PGSYSCONFDIR", sys.to_str().unwrap()),
            ],
        )
        .unwrap();
        assert_eq!(c.host, "central.example");
    }

    #[test]
    fn multi_host_strings_as_libpq_takes_them() {
        let c = parse("postgres://u@h1:5433,h2:5434,[::1]:5435/d?target_session_attrs=read-write")
            .unwrap();
        assert_eq!(
            c.hosts,
            vec![
                ("h1".into(), 5433),
                ("h2".into(), 5434),
                ("::1".into(), 5435)
            ]
        );
        assert_eq!((c.host.as_str(), c.port), ("h1", 5433));
        assert_eq!(c.session_attrs, SessionAttrs::ReadWrite);
        assert_eq!(c.display(), "postgres://u@h1:5433,h2:5434,::1:5435/d");
        let order: Vec<(String, u16)> = c
            .candidates()
            .iter()
            .map(|c| (c.host.clone(), c.port))
            .collect();
        assert_eq!(order, c.hosts, "in order without load balancing");
        // One port for every host, or one each; a host without a port.
        let k = parse("host=a,b port=6000 user=u dbname=d target_session_attrs=standby").unwrap();
        assert_eq!(k.hosts, vec![("a".into(), 6000), ("b".into(), 6000)]);
        assert_eq!(k.session_attrs, SessionAttrs::Standby);
        let k = parse("postgres://u@a,b:7000/d").unwrap();
        assert_eq!(k.hosts, vec![("a".into(), 5432), ("b".into(), 7000)]);
        assert!(parse("host=a,b,c port=1,2 user=u dbname=d").is_err());
        assert!(parse("host=a user=u dbname=d target_session_attrs=writer").is_err());
        assert!(parse("host=a,b hostaddr=10.0.0.1 user=u dbname=d").is_err());
        let lb = parse("postgres://u@a,b,c,d,e,f/d?load_balance_hosts=random").unwrap();
        assert!(lb.load_balance);
        let mut seen = std::collections::BTreeSet::new();
        for _ in 0..50 {
            let mut v: Vec<String> = lb.candidates().iter().map(|c| c.host.clone()).collect();
            seen.insert(v.clone());
            v.sort();
            assert_eq!(v, ["a", "b", "c", "d", "e", "f"], "each host once");
            std::thread::sleep(std::time::Duration::from_micros(50));
        }
        assert!(seen.len() > 1, "random order varies");
        // TLS by default unless every host is on this machine.
        assert_eq!(
            parse("postgres://u@localhost,127.0.0.1/d").unwrap().sslmode,
            SslMode::Disable
        );
        assert_eq!(
            parse("postgres://u@localhost,db.example/d")
                .unwrap()
                .sslmode,
            SslMode::VerifyFull
        );
        assert!(parse("postgres://u@a/d?load_balance_hosts=sometimes").is_err());
    }

    #[test]
    fn session_attributes_accept_the_servers_they_name() {
        use SessionAttrs::*;
        // (in recovery, read only by default)
        let primary = (false, false);
        let standby = (true, true);
        let read_only_primary = (false, true);
        for (a, accepts) in [
            (Any, [true, true, true]),
            (ReadWrite, [true, false, false]),
            (ReadOnly, [false, true, true]),
            (Primary, [true, false, true]),
            (Standby, [false, true, false]),
        ] {
            let got = [primary, standby, read_only_primary].map(|(r, o)| a.accepts(r, o));
            assert_eq!(got, accepts, "{a:?}");
        }
    }

    #[test]
    fn parses_url_and_key_values() {
        let c = parse(
            "postgres://app:s%40cret@db.example:6543/shop?sslmode=verify-ca&connect_timeout=3",
        )
        .unwrap();
        assert_eq!(
            (c.host.as_str(), c.port, c.user.as_str(), c.dbname.as_str()),
            ("db.example", 6543, "app", "shop")
        );
        assert_eq!(c.password.as_deref(), Some("s@cret"));
        assert_eq!(c.sslmode, SslMode::VerifyCa);
        assert_eq!(c.connect_timeout, Duration::from_secs(3));
        assert!(!format!("{c:?}").contains("cret"));
        let k = parse("host=127.0.0.1 port=5433 user=u password='a b\\'c' dbname=d").unwrap();
        assert_eq!(k.password.as_deref(), Some("a b'c"));
        assert_eq!(
            k.sslmode,
            SslMode::Disable,
            "loopback defaults to plaintext"
        );
        assert_eq!(
            k.connect_timeout,
            Duration::from_secs(10),
            "default connect_timeout"
        );
        let r = parse("host=db.example user=u dbname=d").unwrap();
        assert_eq!(
            r.sslmode,
            SslMode::VerifyFull,
            "remote defaults to verify-full"
        );
        assert!(parse("host=x sslmode=prefer").is_err());
        assert!(parse("host=x bogus=1").is_err());
        let v6 = parse("postgresql://u@[::1]:5000/d").unwrap();
        assert_eq!((v6.host.as_str(), v6.port), ("::1", 5000));
    }

    #[test]
    fn pgsslmode_applies_when_the_string_has_no_sslmode() {
        let loopback = "postgres://u@127.0.0.1:5432/d";
        let remote = "postgres://u@db.example:5432/d";
        for (value, mode) in [
            ("disable", SslMode::Disable),
            ("require", SslMode::Require),
            ("verify-ca", SslMode::VerifyCa),
            ("verify-full", SslMode::VerifyFull),
        ] {
            for url in [loopback, remote, "host=/run/postgresql user=u dbname=d"] {
                let c = parse_in(url, &[("PGSSLMODE", value)]).unwrap();
                assert_eq!(c.sslmode, mode, "PGSSLMODE={value} for {url}");
            }
        }
        // PGSSLMODE=require on loopback: the case that used to connect in plaintext.
        let c = parse_in(loopback, &[("PGSSLMODE", "require")]).unwrap();
        assert_eq!(c.sslmode, SslMode::Require);
    }

    #[test]
    fn sslmode_in_the_string_wins_over_pgsslmode() {
        for (url, mode) in [
            ("postgres://u@127.0.0.1/d?sslmode=disable", SslMode::Disable),
            (
                "postgres://u@db.example/d?sslmode=require",
                SslMode::Require,
            ),
            (
                "host=db.example dbname=d sslmode=verify-ca",
                SslMode::VerifyCa,
            ),
            (
                "host=127.0.0.1 dbname=d sslmode=verify-full",
                SslMode::VerifyFull,
            ),
        ] {
            for env in [
                "disable",
                "require",
                "verify-ca",
                "verify-full",
                "prefer",
                "nonsense",
            ] {
                let c = parse_in(url, &[("PGSSLMODE", env)]).unwrap();
                assert_eq!(c.sslmode, mode, "{url} with PGSSLMODE={env}");
            }
        }
        // prefer/allow in the string stay refused, whatever the environment says.
        let e = parse_in(
            "host=x dbname=d sslmode=prefer",
            &[("PGSSLMODE", "require")],
        )
        .unwrap_err();
        assert_eq!(e.kind(), crate::error::ErrorKind::Usage);
    }

    #[test]
    fn pgsslmode_prefer_allow_or_empty_leave_the_default() {
        for env in [
            &[("PGSSLMODE", "prefer")][..],
            &[("PGSSLMODE", "allow")],
            &[("PGSSLMODE", "")],
            &[],
        ] {
            let l = parse_in("postgres://u@localhost/d", env).unwrap();
            assert_eq!(l.sslmode, SslMode::Disable, "loopback with {env:?}");
            let r = parse_in("postgres://u@db.example/d", env).unwrap();
            assert_eq!(r.sslmode, SslMode::VerifyFull, "remote with {env:?}");
        }
    }

    #[test]
    fn an_unknown_pgsslmode_is_a_usage_error_naming_it() {
        for v in ["Require", "on", "verify_full"] {
            let e = parse_in("postgres://u@db.example/d", &[("PGSSLMODE", v)]).unwrap_err();
            assert_eq!(e.kind(), crate::error::ErrorKind::Usage);
            assert!(e.message().contains("PGSSLMODE"), "{}", e.message());
            assert!(e.message().contains(v), "{}", e.message());
        }
    }

    #[test]
    fn pgsslrootcert_applies_when_the_string_has_no_sslrootcert() {
        let env = [
            ("PGSSLROOTCERT", "/env/root.pem"),
            ("PGSSLMODE", "verify-ca"),
        ];
        let c = parse_in("postgres://u@db.example/d", &env).unwrap();
        assert_eq!(c.sslrootcert, Some(PathBuf::from("/env/root.pem")));
        assert_eq!(c.sslmode, SslMode::VerifyCa);
        let c = parse_in("postgres://u@db.example/d?sslrootcert=/url/root.pem", &env).unwrap();
        assert_eq!(c.sslrootcert, Some(PathBuf::from("/url/root.pem")));
        let c = parse_in("postgres://u@db.example/d", &[]).unwrap();
        assert_eq!(c.sslrootcert, None);
    }

    #[test]
    fn each_host_takes_its_own_password_from_the_password_file() {
        let dir = std::env::temp_dir().join(format!("mooncdc-pgpass-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("pgpass");
        std::fs::write(&file, "h1:5432:d:u:one\nh2:5433:d:u:two\n").unwrap();
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
        }
        let env = [("PGPASSFILE", file.to_str().unwrap())];
        let c = parse_in("postgres://u@h1:5432,h2:5433,h3:5434/d", &env).unwrap();
        let got: Vec<Option<String>> = c.candidates().iter().map(|c| c.password.clone()).collect();
        assert_eq!(got, [Some("one".into()), Some("two".into()), None]);
        // A password given in the string is every host's.
        let c = parse_in("postgres://u:pw@h1:5432,h2:5433/d", &env).unwrap();
        let got: Vec<Option<String>> = c.candidates().iter().map(|c| c.password.clone()).collect();
        assert_eq!(got, [Some("pw".into()), Some("pw".into())]);
        std::fs::remove_dir_all(&dir).ok();
    }

    #[test]
    fn the_environment_fills_what_the_string_leaves_out() {
        let env = [
            ("PGHOST", "envhost"),
            ("PGPORT", "6000"),
            ("PGUSER", "envuser"),
            ("PGPASSWORD", "envpw"),
            ("PGDATABASE", "envdb"),
        ];
        let c = parse_in("postgres://", &env).unwrap();
        assert_eq!(
            (c.host.as_str(), c.port, c.user.as_str(), c.dbname.as_str()),
            ("envhost", 6000, "envuser", "envdb")
        );
        assert_eq!(c.password.as_deref(), Some("envpw"));
        let c = parse_in("postgres://u@h:1/d", &env).unwrap();
        assert_eq!(
            (c.host.as_str(), c.port, c.user.as_str(), c.dbname.as_str()),
            ("h", 1, "u", "d")
        );
    }
}
