//! Endpoints: a database URL parsed once into a typed configuration, shown
//! redacted, and opened as a [`Source`] or a [`Target`]. The binaries and the
//! audit never look at a URL's scheme themselves.
//!
//! | URL | endpoint |
//! | --- | --- |
//! | `sqlite:PATH` (relative or absolute; `sqlite://PATH` too) | a SQLite database file |
//! | `postgres://…`, `postgresql://…`, or a libpq `key=value` string | PostgreSQL ([`PgConn`]) |
//! | `clickhouse://…` (HTTP), `clickhouses://…` (HTTPS) | ClickHouse ([`ChConfig`]) |
//! | `dir:PATH` | an archive of batch files ([`DirConfig`]), a target only |

use crate::destination::clickhouse::{ChConfig, ClickHouse, Engine};
use crate::destination::dir::{DirConfig, DirTarget};
use crate::destination::sqlite::{read_cursor, SqliteTarget};
use crate::destination::{AuditedTarget, Target, TargetOptions};
use crate::error::{Error, Result};
use crate::pg::conn::PgConn;
use crate::source::postgres::PgSource;
use crate::source::sqlite::SqliteSource;
use crate::source::{HeldCursor, Source};
use std::path::PathBuf;

/// A database named on the command line, parsed.
#[derive(Debug, Clone)]
pub enum Endpoint {
    Sqlite(PathBuf),
    Postgres(Box<PgConn>),
    ClickHouse(Box<ChConfig>),
    Dir(Box<DirConfig>),
}

/// The names a PostgreSQL source uses beside its URL.
#[derive(Debug, Clone, Default)]
pub struct PgNames {
    pub slot: Option<String>,
    pub publication: Option<String>,
}

/// A libpq `key=value` connection string (with or without `dbname=`): no
/// scheme, and its first word one of libpq's keys.
fn is_key_values(s: &str) -> bool {
    use crate::pg::conn::KEYS;
    !s.contains("://")
        && s.split_whitespace()
            .next()
            .and_then(|w| w.split_once('='))
            .is_some_and(|(k, _)| KEYS.contains(&k.trim()))
}

/// Parse a URL into its typed configuration. Passwords never appear in the
/// messages.
pub fn parse(url: &str) -> Result<Endpoint> {
    if let Some(p) = url.strip_prefix("sqlite:") {
        let p = p.strip_prefix("//").unwrap_or(p);
        if p.is_empty() {
            return Err(Error::usage("sqlite: URL needs a path, e.g. sqlite:app.db"));
        }
        return Ok(Endpoint::Sqlite(PathBuf::from(p)));
    }
    if url.starts_with("postgres://") || url.starts_with("postgresql://") || is_key_values(url) {
        return Ok(Endpoint::Postgres(Box::new(PgConn::parse(url)?)));
    }
    if url.starts_with("clickhouse://") || url.starts_with("clickhouses://") {
        return Ok(Endpoint::ClickHouse(Box::new(ChConfig::parse(url)?)));
    }
    if let Some(p) = url.strip_prefix("dir:") {
        return Ok(Endpoint::Dir(Box::new(DirConfig::parse(p)?)));
    }
    // Only the scheme is echoed: the rest may hold a password that a
    // character it does not escape keeps `redact` from finding.
    let scheme = match url.find("://") {
        Some(i) => format!(" {:?}", &url[..i + 3]),
        None => match url.split_once(':') {
            Some((s, _))
                if !s.is_empty()
                    && s.chars()
                        .all(|c| c.is_ascii_alphanumeric() || "+.-".contains(c)) =>
            {
                format!(" {:?}", format!("{s}:"))
            }
            _ => String::new(),
        },
    };
    Err(Error::usage(format!(
        "unknown kind of database URL{scheme} (expected sqlite:PATH, postgres://…, clickhouse://… or dir:PATH)"
    )))
}

impl Endpoint {
    /// For messages: never holds a password.
    pub fn display(&self) -> String {
        match self {
            Endpoint::Sqlite(p) => format!("sqlite:{}", p.display()),
            Endpoint::Postgres(c) => c.display(),
            Endpoint::ClickHouse(c) => format!("{c:?}"),
            Endpoint::Dir(c) => c.display(),
        }
    }

    /// Open as a source of changes.
    pub fn source(&self, pg: &PgNames) -> Result<Box<dyn Source>> {
        match self {
            Endpoint::Sqlite(p) => Ok(Box::new(SqliteSource { path: p.clone() })),
            Endpoint::Postgres(c) if c.target_schema.is_some() => Err(Error::usage(
                "schema= is an option of PostgreSQL targets (where a SQLite source's tables land), not of sources",
            )),
            Endpoint::Postgres(c) => Ok(Box::new(PgSource::new(
                (**c).clone(),
                pg.slot.as_deref(),
                pg.publication.as_deref(),
            )?)),
            Endpoint::ClickHouse(_) => Err(Error::usage("ClickHouse is a target, not a source")),
            Endpoint::Dir(c) => Err(Error::usage(format!(
                "{} is an archive, a target: read its files with mooncdc-merge {}/*.jsonl",
                c.display(),
                c.path.display()
            ))),
        }
    }

    /// A backend option given as a tool's flag (`--engine history`): set in
    /// the backend's own configuration, as the URL's option of that name
    /// would be. Refused where the backend has no such option, and where the
    /// URL already says otherwise.
    pub fn set_option(&mut self, key: &str, value: &str) -> Result<()> {
        match (self, key) {
            (Endpoint::ClickHouse(c), "engine") => {
                let e = Engine::named(value).ok_or_else(|| {
                    Error::usage(format!(
                        "--engine {value:?}: choose replacing (the current state) or history (every change)"
                    ))
                })?;
                match c.engine {
                    Some(u) if u != e => Err(Error::usage(format!(
                        "--engine {} but the URL says engine={}: give one of them",
                        e.as_str(),
                        u.as_str()
                    ))),
                    _ => {
                        c.engine = Some(e);
                        Ok(())
                    }
                }
            }
            // The current state is what every other target holds.
            (_, "engine") if value == "replacing" => Ok(()),
            (_, "engine") => Err(Error::usage(
                "--engine history is for ClickHouse targets; a SQLite or PostgreSQL target holds the current state",
            )),
            (_, k) => Err(Error::usage(format!("no target takes an option {k:?}"))),
        }
    }

    /// Open as a target. Nothing is created or changed until something is
    /// applied. Options of one backend (a ClickHouse target's engine) are in
    /// its own configuration: its URL, or [`set_option`](Self::set_option).
    pub fn target(&self, options: TargetOptions) -> Result<Box<dyn Target>> {
        match self {
            Endpoint::Sqlite(p) => Ok(Box::new(SqliteTarget::open(p)?.with_options(options))),
            Endpoint::ClickHouse(c) => Ok(Box::new(
                ClickHouse::connect((**c).clone(), c.engine.unwrap_or(Engine::Replacing))?
                    .with_options(options),
            )),
            Endpoint::Postgres(c) => Ok(Box::new(
                crate::destination::postgres::PgTarget::open((**c).clone())?.with_options(options),
            )),
            Endpoint::Dir(c) => Ok(Box::new(DirTarget::new((**c).clone()))),
        }
    }

    /// Open as a target to audit: read back, never changed. A SQLite target
    /// must exist (a missing file is trouble, not a target with every row
    /// missing); a target that cannot be read back is refused here.
    pub fn audited_target(&self) -> Result<Box<dyn AuditedTarget>> {
        match self {
            Endpoint::Sqlite(p) => {
                crate::sqlite_util::open_existing(p)?;
                Ok(Box::new(SqliteTarget::open(p)?))
            }
            Endpoint::ClickHouse(c) if c.engine == Some(Engine::History) => Err(Error::usage(
                "a ClickHouse target with engine=history holds every change, not the current state, and cannot be audited: audit a target made with the replacing engine",
            )),
            Endpoint::ClickHouse(c) => Ok(Box::new(ClickHouse::connect(
                (**c).clone(),
                Engine::Replacing,
            )?)),
            Endpoint::Postgres(c) => Ok(Box::new(crate::destination::postgres::PgTarget::open(
                (**c).clone(),
            )?)),
            Endpoint::Dir(c) => Err(Error::usage(format!(
                "{} is an archive of batch files and cannot be audited: replay it into a database and audit that (mooncdc-merge {}/*.jsonl | mooncdc-apply --target sqlite:check.db)",
                c.display(),
                c.path.display()
            ))),
        }
    }

    /// A reader of the cursor this target stores, for `apply cursor` and
    /// `--ack-from-target`: read-only, and a missing SQLite file holds none.
    pub fn cursor_reader(&self) -> Result<Box<HeldCursor>> {
        match self {
            Endpoint::Sqlite(p) => {
                let p = p.clone();
                Ok(Box::new(move || {
                    if p.exists() {
                        read_cursor(&p)
                    } else {
                        Ok(None)
                    }
                }))
            }
            _ => {
                // A server target's client is a blocking one with a runtime
                // of its own, which must not run (or be dropped) inside a
                // follower's async runtime: it lives on a thread of its own,
                // and each read is a request to it.
                let (ask, asked) = std::sync::mpsc::channel::<()>();
                let (tell, told) =
                    std::sync::mpsc::channel::<Result<Option<crate::wire::Cursor>>>();
                let ep = self.clone();
                std::thread::Builder::new()
                    .name("held-cursor".into())
                    .spawn(move || {
                        let t = match ep.target(TargetOptions::default()) {
                            Ok(t) => {
                                let _ = tell.send(Ok(None));
                                t
                            }
                            Err(e) => {
                                let _ = tell.send(Err(e));
                                return;
                            }
                        };
                        while asked.recv().is_ok() {
                            if tell.send(t.cursor()).is_err() {
                                return;
                            }
                        }
                    })
                    .map_err(|e| Error::io("cannot start a thread", e))?;
                told.recv()
                    .map_err(|_| Error::state("the target's cursor reader ended"))??;
                let told = std::sync::Mutex::new((ask, told));
                Ok(Box::new(move || {
                    let (ask, told) = &*told.lock().unwrap_or_else(|e| e.into_inner());
                    ask.send(())
                        .map_err(|_| Error::state("the target's cursor reader ended"))?;
                    told.recv()
                        .map_err(|_| Error::state("the target's cursor reader ended"))?
                }))
            }
        }
    }
}

/// A URL (or `key=value` connection string) with any password replaced by `***`.
pub fn redact(url: &str) -> String {
    if !url.contains("://") && url.contains('=') {
        // key=value: hide the value of password=…, quoted or not.
        let mut out = String::new();
        let mut rest = url;
        while let Some(i) = rest.find("password") {
            out.push_str(&rest[..i]);
            let after = &rest[i + "password".len()..];
            let trimmed = after.trim_start();
            if let Some(v) = trimmed.strip_prefix('=') {
                let v = v.trim_start();
                let end = if let Some(q) = v.strip_prefix('\'') {
                    q.find('\'').map_or(v.len(), |j| j + 2)
                } else {
                    v.find(char::is_whitespace).unwrap_or(v.len())
                };
                out.push_str("password=***");
                rest = &v[end.min(v.len())..];
            } else {
                out.push_str("password");
                rest = after;
            }
        }
        out.push_str(rest);
        return out;
    }
    // A password may also come as a query option (libpq: ?password=…).
    let (url, query) = match url.split_once('?') {
        Some((u, q)) => (u, Some(q)),
        None => (url, None),
    };
    let query = query.map(|q| {
        q.split('&')
            .map(|kv| match kv.split_once('=') {
                Some((k, _)) if k.eq_ignore_ascii_case("password") => format!("{k}=***"),
                _ => kv.to_string(),
            })
            .collect::<Vec<_>>()
            .join("&")
    });
    let with_query = |u: String| match &query {
        Some(q) => format!("{u}?{q}"),
        None => u,
    };
    if let Some((scheme, rest)) = url.split_once("://") {
        if let Some((auth, host)) = rest.split_once('@') {
            if let Some((user, _)) = auth.split_once(':') {
                return with_query(format!("{scheme}://{user}:***@{host}"));
            }
        }
    }
    with_query(url.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_redacts() {
        assert!(
            matches!(parse("sqlite:a.db").unwrap(), Endpoint::Sqlite(p) if p == std::path::Path::new("a.db"))
        );
        assert!(
            matches!(parse("sqlite:/x/a.db").unwrap(), Endpoint::Sqlite(p) if p == std::path::Path::new("/x/a.db"))
        );
        assert!(parse("mysql://x").is_err());
        // key=value without dbname= is a PostgreSQL connection string too.
        assert!(matches!(
            parse("host=db user=app").unwrap(),
            Endpoint::Postgres(_)
        ));
        // Any key the connection parser takes may come first.
        for first in ["schema=app", "keepalives=1", "target_session_attrs=any"] {
            assert!(
                matches!(
                    parse(&format!("{first} host=db")).unwrap(),
                    Endpoint::Postgres(_)
                ),
                "{first}"
            );
        }
        assert!(matches!(
            parse("service=shop").unwrap_err().kind(),
            crate::ErrorKind::Usage
        ));
        assert_eq!(redact("postgres://u:secret@h/db"), "postgres://u:***@h/db");
        let e = parse("postgres://u:secret@h/db").unwrap();
        assert!(!e.display().contains("secret"));
        // A PostgreSQL target opens without connecting; a refusal never
        // shows the password.
        assert!(e.target(TargetOptions::default()).is_ok());
        let err = e.clone().set_option("engine", "history").err().unwrap();
        assert!(!err.to_string().contains("secret"));
        // engine= in a ClickHouse URL, and --engine beside it.
        let mut ch = parse("clickhouse://default@localhost:8123/db?engine=history").unwrap();
        assert!(ch.set_option("engine", "history").is_ok());
        let err = ch.set_option("engine", "replacing").unwrap_err();
        assert_eq!(err.kind(), crate::ErrorKind::Usage);
        assert!(err.to_string().contains("engine=history"), "{err}");
        assert!(parse("clickhouse://default@localhost:8123/db?engine=log").is_err());
        assert!(
            matches!(parse("clickhouse://h:notaport/db"), Err(e) if e.kind() == crate::ErrorKind::Usage)
        );
    }
}
