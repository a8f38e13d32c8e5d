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
