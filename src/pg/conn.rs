//! PostgreSQL connection settings: a libpq URL or `key=value` string, plus
//! the usual environment variables (`PGHOST`, `PGPORT`, `PGUSER`,
//! `PGPASSWORD`, `PGDATABASE`). TLS per `sslmode`: `disable`, `require`
//! (encrypted, certificate not checked), `verify-ca` (chain checked),
//! `verify-full` (chain and host name). The default is `verify-full`, except
//! when every host is a loopback host or a Unix socket, where it is
//! `disable`. Parsing is in `conn/parse.rs`. Roots come
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
    /// try them (shuffled with `load_balance_hosts=random`, once a process:
    /// every session of one command reaches the same server while it
    /// answers, and commands spread).
    pub fn candidates(&self) -> Vec<PgConn> {
        static SEED: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
        let order = match self.load_balance {
            true => balanced_order(
                self.hosts.len(),
                *SEED.get_or_init(|| {
                    std::time::SystemTime::now()
                        .duration_since(std::time::UNIX_EPOCH)
                        .map(|d| d.as_nanos() as u64)
                        .unwrap_or(1)
                        ^ ((std::process::id() as u64) << 32)
                }),
            ),
            false => (0..self.hosts.len()).collect(),
        };
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

/// `0..n` shuffled by `seed` (spreading sessions is all it is for).
fn balanced_order(n: usize, seed: u64) -> Vec<usize> {
    let mut order: Vec<usize> = (0..n).collect();
    let mut x = seed | 1;
    for i in (1..n).rev() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        order.swap(i, (x % (i as u64 + 1)) as usize);
    }
    order
}

impl std::fmt::Debug for PgConn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.display())
    }
}

mod parse;
pub use parse::KEYS;
#[cfg(test)]
mod tests;

impl PgConn {
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
