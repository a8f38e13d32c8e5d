//! Reading a connection string: a libpq URL or `key=value` string, a
//! service file's entry, the environment and the password file, as libpq
//! reads them.

use super::*;

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
            let mut from_file = super::super::pgservice::settings(&name, lookup)?;
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
                password =
                    super::super::pgpass::password_from_file(file, &host, port, &dbname, &user);
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
}
