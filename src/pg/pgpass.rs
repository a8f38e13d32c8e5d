//! Passwords from a libpq password file (`PGPASSFILE`, else `~/.pgpass`).

/// The password for a connection from a libpq password file: lines of
/// `host:port:database:user:password`, `*` matching anything, `\:` and
/// `\\` escapes, `#` comments, the first match wins. A Unix-socket host
/// matches `localhost`. A file readable by group or others is ignored with
/// a warning, as libpq does; a missing file is no error.
pub(super) fn password_from_file(
    file: &std::path::Path,
    host: &str,
    port: u16,
    dbname: &str,
    user: &str,
) -> Option<String> {
    let text = std::fs::read_to_string(file).ok()?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        if let Ok(meta) = std::fs::metadata(file) {
            if meta.permissions().mode() & 0o077 != 0 {
                crate::log::warn(
                    &format!(
                        "password file {} has group or world access and is ignored; permissions should be u=rw (0600) or less",
                        file.display()
                    ),
                    &[],
                );
                return None;
            }
        }
    }
    let host = if host.starts_with('/') {
        "localhost"
    } else {
        host
    };
    let port = port.to_string();
    let want = [host, port.as_str(), dbname, user];
    for line in text.lines() {
        if line.starts_with('#') || line.trim().is_empty() {
            continue;
        }
        let mut fields = Vec::with_capacity(5);
        let mut cur = String::new();
        let mut chars = line.chars();
        while let Some(c) = chars.next() {
            match c {
                '\\' => {
                    if let Some(n) = chars.next() {
                        cur.push(n);
                    }
                }
                ':' if fields.len() < 4 => fields.push(std::mem::take(&mut cur)),
                c => cur.push(c),
            }
        }
        fields.push(cur);
        if fields.len() == 5
            && fields[..4]
                .iter()
                .zip(want)
                .all(|(f, w)| f == "*" || f == w)
        {
            return Some(fields.pop().expect("five fields"));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn password_files_match_like_libpq() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("pgpass");
        std::fs::write(
            &f,
            "# comment\n\ndb1:5432:app:u:first\n*:*:app:u:a\\:b\\\\c\nlocalhost:5433:*:*:socket\n",
        )
        .unwrap();
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o600)).unwrap();
        let p = |h: &str, port: u16, db: &str, u: &str| password_from_file(&f, h, port, db, u);
        assert_eq!(p("db1", 5432, "app", "u").as_deref(), Some("first"));
        assert_eq!(p("db2", 6000, "app", "u").as_deref(), Some("a:b\\c"));
        assert_eq!(
            p("/var/run/postgresql", 5433, "x", "y").as_deref(),
            Some("socket")
        );
        assert_eq!(p("db2", 6000, "other", "u"), None);
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o640)).unwrap();
        assert_eq!(
            p("db1", 5432, "app", "u"),
            None,
            "a group-readable file is ignored"
        );
        assert_eq!(
            password_from_file(&dir.path().join("missing"), "h", 1, "d", "u"),
            None
        );
    }
}
