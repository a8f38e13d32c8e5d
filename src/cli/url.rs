//! Source and target URLs.

use crate::error::{Error, Result};
use std::path::PathBuf;

/// A database named on the command line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Endpoint {
    /// `sqlite:PATH` (relative or absolute path).
    Sqlite(PathBuf),
    /// `postgres://…` or `postgresql://…` (not in this build yet).
    Postgres(String),
    /// `clickhouse://…` / `clickhouses://…` (not in this build yet).
    ClickHouse(String),
}

/// Parse a URL. Passwords are never echoed back in messages.
pub fn parse(url: &str) -> Result<Endpoint> {
    if let Some(p) = url.strip_prefix("sqlite:") {
        let p = p.strip_prefix("//").unwrap_or(p);
        if p.is_empty() {
            return Err(Error::usage("sqlite: URL needs a path, e.g. sqlite:app.db"));
        }
        return Ok(Endpoint::Sqlite(PathBuf::from(p)));
    }
    if url.starts_with("postgres://") || url.starts_with("postgresql://") || url.contains("dbname=")
    {
        return Ok(Endpoint::Postgres(url.to_string()));
    }
    if url.starts_with("clickhouse://") || url.starts_with("clickhouses://") {
        return Ok(Endpoint::ClickHouse(url.to_string()));
    }
    Err(Error::usage(format!(
        "unknown database URL {:?} (expected sqlite:PATH, postgres://… or clickhouse://…)",
        redact(url)
    )))
}

/// A URL with any password replaced by `***`.
pub fn redact(url: &str) -> String {
    if let Some((scheme, rest)) = url.split_once("://") {
        if let Some((auth, host)) = rest.split_once('@') {
            if let Some((user, _)) = auth.split_once(':') {
                return format!("{scheme}://{user}:***@{host}");
            }
        }
    }
    url.to_string()
}

impl Endpoint {
    /// The SQLite path, or a clear error for endpoints this build cannot use yet.
    pub fn sqlite_path(&self, role: &str) -> Result<&PathBuf> {
        match self {
            Endpoint::Sqlite(p) => Ok(p),
            Endpoint::Postgres(u) => Err(Error::usage(format!(
                "PostgreSQL {role}s ({}) are not supported by this build yet",
                redact(u)
            ))),
            Endpoint::ClickHouse(u) => Err(Error::usage(format!(
                "ClickHouse {role}s ({}) are not supported by this build yet",
                redact(u)
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_redacts() {
        assert_eq!(
            parse("sqlite:a.db").unwrap(),
            Endpoint::Sqlite("a.db".into())
        );
        assert_eq!(
            parse("sqlite:/x/a.db").unwrap(),
            Endpoint::Sqlite("/x/a.db".into())
        );
        assert!(parse("mysql://x").is_err());
        assert_eq!(redact("postgres://u:secret@h/db"), "postgres://u:***@h/db");
        let e = parse("postgres://u:secret@h/db")
            .unwrap()
            .sqlite_path("source")
            .unwrap_err();
        assert!(!e.to_string().contains("secret"));
    }
}
