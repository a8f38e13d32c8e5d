//! The connection service file (`pg_service.conf`), as libpq reads it: the
//! user's file (PGSERVICEFILE, else `~/.pg_service.conf`) first, then the
//! system's (`$PGSYSCONFDIR/pg_service.conf`); the first that names the
//! service gives all its settings. Sections are `[name]`, settings
//! `key=value`, `#` starts a comment line.

use crate::error::{Error, Result};
use std::path::PathBuf;

/// The settings of service `name`.
pub(super) fn settings(
    name: &str,
    lookup: &dyn Fn(&str) -> Option<String>,
) -> Result<Vec<(String, String)>> {
    let env = |k: &str| lookup(k).filter(|v| !v.is_empty());
    let mut files: Vec<PathBuf> = Vec::new();
    match env("PGSERVICEFILE") {
        Some(f) => files.push(PathBuf::from(f)),
        None => {
            if let Some(h) = env("HOME") {
                files.push(PathBuf::from(h).join(".pg_service.conf"));
            }
        }
    }
    // The system's file: PGSYSCONFDIR, else where Debian's libpq looks.
    files.push(
        env("PGSYSCONFDIR")
            .map_or_else(|| PathBuf::from("/etc/postgresql-common"), PathBuf::from)
            .join("pg_service.conf"),
    );
    for f in &files {
        let text = match std::fs::read_to_string(f) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => {
                return Err(
                    Error::io("cannot read the service file", e).in_file(&f.display().to_string())
                )
            }
        };
        if let Some(found) = section(&text, name, &f.display().to_string())? {
            return Ok(found);
        }
    }
    Err(Error::usage(format!(
        "definition of service {name:?} not found (looked in {})",
        if files.is_empty() {
            "no service file: set PGSERVICEFILE, HOME or PGSYSCONFDIR".to_string()
        } else {
            files
                .iter()
                .map(|f| f.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        }
    )))
}

/// The settings of section `name` in one file's text (`None`: not there).
fn section(text: &str, name: &str, file: &str) -> Result<Option<Vec<(String, String)>>> {
    let mut current: Option<String> = None;
    let mut out: Option<Vec<(String, String)>> = None;
    for (i, line) in text.lines().enumerate() {
        let l = line.trim();
        if l.is_empty() || l.starts_with('#') {
            continue;
        }
        if let Some(rest) = l.strip_prefix('[') {
            let Some(n) = rest.strip_suffix(']') else {
                return Err(Error::data(format!(
                    "syntax error in service file {file}, line {}",
                    i + 1
                )));
            };
            if out.is_some() {
                break;
            }
            current = Some(n.trim().to_string());
            if n.trim() == name {
                out = Some(Vec::new());
            }
            continue;
        }
        let Some((k, v)) = l.split_once('=') else {
            return Err(Error::data(format!(
                "syntax error in service file {file}, line {}",
                i + 1
            )));
        };
        if current.as_deref() == Some(name) {
            if let Some(o) = out.as_mut() {
                // As libpq: the first setting of a key counts.
                if !o.iter().any(|(ok, _)| ok == k.trim()) {
                    o.push((k.trim().to_string(), v.trim().to_string()));
                }
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_a_section_and_reports_a_missing_one() {
        let text =
            "# services\n[other]\nhost=x\n\n[shop]\nhost = db.example\nport=6543\ndbname=shop\n";
        let s = section(text, "shop", "f").unwrap().unwrap();
        assert_eq!(
            s,
            vec![
                ("host".to_string(), "db.example".to_string()),
                ("port".to_string(), "6543".to_string()),
                ("dbname".to_string(), "shop".to_string())
            ]
        );
        assert!(section(text, "nope", "f").unwrap().is_none());
        assert!(section("[bad\n", "x", "f").is_err());
    }
}
