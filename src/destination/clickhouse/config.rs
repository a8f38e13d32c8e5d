//! A ClickHouse URL parsed once into its settings: host, credentials,
//! database, timeouts and the insert size.

use super::*;

/// Table engines.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Engine {
    Replacing,
    History,
}

impl Engine {
    /// The engine an `engine=` option or `--engine` names.
    pub fn named(v: &str) -> Option<Engine> {
        match v {
            "replacing" => Some(Engine::Replacing),
            "history" => Some(Engine::History),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Engine::Replacing => "replacing",
            Engine::History => "history",
        }
    }
}

/// Which column types PostgreSQL's timestamps, dates, UUIDs, booleans and
/// arrays get (`types=`; docs/CLICKHOUSE.md, Types).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Types {
    /// ClickHouse's own, where the server has them (22.8 and later).
    #[default]
    Native,
    /// `String` (`UInt8` for booleans), as on servers without them.
    Text,
}

/// Connection settings.
#[derive(Clone)]
pub struct ChConfig {
    pub(super) base: String,
    pub(super) user: String,
    pub(super) password: String,
    pub database: String,
    pub connectivity_timeout: Duration,
    pub schema_timeout: Duration,
    pub ddl_timeout: Duration,
    pub insert_timeout: Duration,
    pub max_insert_bytes: usize,
    /// `cluster=NAME`: a cluster target (docs/CLICKHOUSE.md, "Cluster").
    pub cluster: Option<String>,
    /// `insert_quorum=N`: replicas of a shard that acknowledge each insert
    /// (default: the smallest shard's replica count).
    pub insert_quorum: Option<u64>,
    /// `zookeeper_path=/PREFIX`: where replicated tables keep their state.
    pub zookeeper_path: String,
    /// `sslrootcert=FILE` (HTTPS only): the CA certificates (PEM) trusted
    /// instead of the system's, as PostgreSQL's option of that name.
    pub sslrootcert: Option<std::path::PathBuf>,
    /// `engine=replacing|history`: the table engine (also `--engine`).
    pub engine: Option<Engine>,
    /// `types=native|text`: the column types of new columns.
    pub types: Types,
    /// `arrays=empty-for-null`: a PostgreSQL array column that may be NULL
    /// gets an `Array` too, holding a NULL as `[]` (docs/CLICKHOUSE.md,
    /// Types); by default (`arrays=exact`) such a column stays `String`.
    pub empty_arrays_for_null: bool,
}

/// The URL options a ClickHouse target takes (docs/CLICKHOUSE.md).
const KNOWN_OPTIONS: [&str; 12] = [
    "engine",
    "types",
    "arrays",
    "connectivity_timeout_ms",
    "schema_timeout_ms",
    "ddl_timeout_ms",
    "insert_timeout_ms",
    "max_insert_bytes",
    "sslrootcert",
    "cluster",
    "insert_quorum",
    "zookeeper_path",
];

impl std::fmt::Debug for ChConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}{} as {}", self.base, self.database, self.user)
    }
}

pub(super) fn pct_encode(s: &str) -> String {
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

/// The way out of a URL broken by a password's special characters.
const CH_PASSWORD_HINT: &str = "a password holding /, ?, # or @ must be percent-encoded in a URL (/ as %2F, ? as %3F, # as %23, @ as %40, % as %25), or given by CLICKHOUSE_PASSWORD instead";

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
        // A password holding an unescaped `/` or `?` ends the host part
        // early (`user:pa` / `ss@host…`): nothing of it is echoed.
        if userinfo.is_none() && (db.contains('@') || query.contains('@')) {
            return Err(Error::usage(format!(
                "the ClickHouse URL is not valid: an @ comes after the host part (after :// up to the first / or ?); {CH_PASSWORD_HINT}"
            )));
        }
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
            // Without a user part, "host:port" may be a user and the start
            // of a password: not echoed.
            let named = if userinfo.is_some() {
                format!(" {hostport:?}")
            } else {
                String::new()
            };
            Error::usage(format!(
                "the ClickHouse URL's host and port{named} are not valid ({e}); write clickhouse://user@host:8123/db; {CH_PASSWORD_HINT}"
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
            cluster: None,
            insert_quorum: None,
            zookeeper_path: "/clickhouse/tables".into(),
            sslrootcert: None,
            engine: None,
            types: Types::Native,
            empty_arrays_for_null: false,
        };
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            match k {
                "engine" => {
                    c.engine = Some(Engine::named(v).ok_or_else(|| {
                        Error::usage(format!(
                            "ClickHouse URL option engine={v:?}: choose replacing (the current state) or history (every change)"
                        ))
                    })?);
                }
                "types" => {
                    c.types = match v {
                        "native" => Types::Native,
                        "text" => Types::Text,
                        _ => {
                            return Err(Error::usage(format!(
                                "ClickHouse URL option types={v:?}: choose native (ClickHouse's own types for PostgreSQL's timestamps, dates, UUIDs, booleans and arrays, where the server has them) or text (String, as on older servers)"
                            )))
                        }
                    };
                }
                "arrays" => {
                    c.empty_arrays_for_null = match v {
                        "exact" => false,
                        "empty-for-null" => true,
                        _ => {
                            return Err(Error::usage(format!(
                                "ClickHouse URL option arrays={v:?}: choose exact (an array column that may be NULL stays String, keeping NULL apart from {{}}) or empty-for-null (an Array holding a NULL as [])"
                            )))
                        }
                    };
                }
                "cluster" => {
                    let v = crate::util::percent_decode(v)?;
                    if v.is_empty() {
                        return Err(Error::usage(
                            "ClickHouse URL option cluster needs the cluster's name (as in system.clusters)",
                        ));
                    }
                    c.cluster = Some(v);
                }
                "zookeeper_path" => {
                    let v = crate::util::percent_decode(v)?;
                    let v = v.trim_end_matches('/');
                    if !v.starts_with('/') || v.contains('\'') || v.contains('\\') {
                        return Err(Error::usage(
                            "ClickHouse URL option zookeeper_path needs an absolute ZooKeeper path such as /clickhouse/tables",
                        ));
                    }
                    c.zookeeper_path = v.to_string();
                }
                "sslrootcert" => {
                    let v = crate::util::percent_decode(v)?;
                    if v.is_empty() {
                        return Err(Error::usage(
                            "ClickHouse URL option sslrootcert needs the path of a PEM file of the CA certificates to trust",
                        ));
                    }
                    if scheme != "https" {
                        return Err(Error::usage(
                            "ClickHouse URL option sslrootcert is for HTTPS: write clickhouses://",
                        ));
                    }
                    c.sslrootcert = Some(std::path::PathBuf::from(v));
                }
                "connectivity_timeout_ms"
                | "schema_timeout_ms"
                | "ddl_timeout_ms"
                | "insert_timeout_ms"
                | "max_insert_bytes"
                | "insert_quorum" => {
                    let n: u64 = v.parse().map_err(|_| {
                        Error::usage(format!("ClickHouse URL option {k} needs a number"))
                    })?;
                    match k {
                        "connectivity_timeout_ms" => {
                            c.connectivity_timeout = Duration::from_millis(n.max(1))
                        }
                        "schema_timeout_ms" => c.schema_timeout = Duration::from_millis(n.max(1)),
                        "ddl_timeout_ms" => c.ddl_timeout = Duration::from_millis(n.max(1)),
                        "insert_timeout_ms" => c.insert_timeout = Duration::from_millis(n.max(1)),
                        "max_insert_bytes" => c.max_insert_bytes = (n as usize).max(1),
                        _ if n == 0 => {
                            return Err(Error::usage(
                                "ClickHouse URL option insert_quorum needs at least 1 (replicas of a shard that acknowledge each insert)",
                            ))
                        }
                        _ => c.insert_quorum = Some(n),
                    }
                }
                other => {
                    return Err(Error::usage(format!(
                        "unknown ClickHouse URL option {other:?} (known: {})",
                        KNOWN_OPTIONS.join(", ")
                    )))
                }
            }
        }
        if c.cluster.is_none() && (c.insert_quorum.is_some() || query.contains("zookeeper_path=")) {
            return Err(Error::usage(
                "ClickHouse URL options insert_quorum and zookeeper_path are for a cluster target: add cluster=NAME",
            ));
        }
        // Names become parts of ZooKeeper paths, where ClickHouse expands
        // `{…}` as macros.
        if c.cluster.is_some() && c.database.contains(['{', '}']) {
            return Err(Error::usage(format!(
                "database {:?}: a cluster target's database name cannot hold {{ or }} (ClickHouse would read them as macros in the ZooKeeper path)",
                c.database
            )));
        }
        Ok(c)
    }
}

#[cfg(test)]
mod tests {
    use super::ChConfig;
    use crate::ErrorKind;

    #[test]
    fn cluster_options_are_checked() {
        let c = ChConfig::parse(
            "clickhouse://h/shop?cluster=an%20alytics&insert_quorum=2&zookeeper_path=/ch/t/",
        )
        .unwrap();
        assert_eq!(c.cluster.as_deref(), Some("an alytics"));
        assert_eq!(c.insert_quorum, Some(2));
        assert_eq!(c.zookeeper_path, "/ch/t");
        let c = ChConfig::parse("clickhouse://h/shop?cluster=c").unwrap();
        assert_eq!(
            (c.insert_quorum, c.zookeeper_path.as_str()),
            (None, "/clickhouse/tables")
        );
        for (url, says) in [
            ("clickhouse://h/shop?cluster=", "needs the cluster's name"),
            (
                "clickhouse://h/shop?cluster=c&insert_quorum=0",
                "at least 1",
            ),
            (
                "clickhouse://h/shop?cluster=c&insert_quorum=two",
                "needs a number",
            ),
            (
                "clickhouse://h/shop?cluster=c&zookeeper_path=ch/t",
                "absolute ZooKeeper path",
            ),
            (
                "clickhouse://h/shop?cluster=c&zookeeper_path=/a'b",
                "absolute ZooKeeper path",
            ),
            (
                "clickhouse://h/shop?cluster=c&zookeeper_path=/",
                "absolute ZooKeeper path",
            ),
            ("clickhouse://h/shop?insert_quorum=2", "add cluster=NAME"),
            (
                "clickhouse://h/shop?sslrootcrt=/x",
                "unknown ClickHouse URL option",
            ),
            ("clickhouse://h/shop?sslrootcert=/x", "is for HTTPS"),
            ("clickhouses://h/shop?sslrootcert=", "needs the path"),
            ("clickhouse://h/shop?zookeeper_path=/x", "add cluster=NAME"),
            (
                "clickhouse://h/a%7Bshard%7D?cluster=c",
                "cannot hold { or }",
            ),
        ] {
            let e = ChConfig::parse(url)
                .err()
                .unwrap_or_else(|| panic!("{url} accepted"));
            assert_eq!(e.kind(), ErrorKind::Usage, "{url}");
            assert!(e.message().contains(says), "{url}: {}", e.message());
        }
        // Without cluster=, braces in a database name are fine (no ZooKeeper path).
        assert!(ChConfig::parse("clickhouse://h/a%7Bb%7D").is_ok());
    }
}
