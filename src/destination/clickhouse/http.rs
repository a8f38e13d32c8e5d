//! Requests to the server: URLs with settings and timeouts, error texts,
//! SQL quoting. Statements travel in the request body, never in the URL
//! (a URL has a length limit: a wide table's statements exceed it, and the
//! server then answers a bare `400 Bad Request`); an insert's data follows
//! its statement after a newline, where the server reads it as is.

use super::*;

impl ClickHouse {
    pub(super) fn url(&self, timeout: &Timeout, read: bool) -> String {
        let mut u = format!(
            "{}?database={}",
            self.cfg.base,
            pct_encode(&self.cfg.database),
        );
        if read {
            // An HTTP interface parameter on every version (not a setting).
            u.push_str("&wait_end_of_query=1");
        }
        let secs = match timeout {
            Timeout::Connect => Some(self.cfg.connectivity_timeout),
            Timeout::Schema => Some(self.cfg.schema_timeout),
            Timeout::Ddl => Some(self.cfg.ddl_timeout),
            Timeout::Insert | Timeout::Merge => None,
        };
        if let (Some(t), true) = (secs, self.settings.contains("max_execution_time")) {
            u.push_str(&format!("&max_execution_time={}", t.as_secs().max(1)));
        }
        if let Some(c) = &self.cluster {
            // Inserts through the Distributed table reach every shard before
            // they return, each acknowledged by `quorum` replicas of it;
            // reads see only what a quorum holds, or fail.
            u.push_str(&format!(
                "&insert_distributed_sync=1&insert_quorum={}&select_sequential_consistency=1",
                c.quorum
            ));
            let ms = self.cfg.insert_timeout.as_millis();
            if self.settings.contains("insert_quorum_timeout") {
                u.push_str(&format!("&insert_quorum_timeout={ms}"));
            }
            if self.settings.contains("insert_distributed_timeout") {
                u.push_str(&format!(
                    "&insert_distributed_timeout={}",
                    self.cfg.insert_timeout.as_secs().max(1)
                ));
            }
            if self.settings.contains("distributed_ddl_task_timeout") {
                // A cleanup merge ON CLUSTER waits for every node's merge.
                let t = match timeout {
                    Timeout::Merge => Duration::from_secs(86_400),
                    _ => self.cfg.ddl_timeout,
                };
                u.push_str(&format!(
                    "&distributed_ddl_task_timeout={}",
                    t.as_secs().max(1)
                ));
            }
        }
        u
    }

    pub(super) fn budget(&self, t: &Timeout) -> Duration {
        let eps = Duration::from_millis(4000);
        eps + match t {
            Timeout::Connect => self.cfg.connectivity_timeout,
            Timeout::Schema => self.cfg.schema_timeout,
            Timeout::Ddl => self.cfg.ddl_timeout,
            Timeout::Insert => self.cfg.insert_timeout,
            // The client waits as long as the server merges (a day at most).
            Timeout::Merge => Duration::from_secs(86_400),
        }
    }

    pub(super) fn send(
        &self,
        sql: &str,
        data: Option<Vec<u8>>,
        timeout: Timeout,
    ) -> Result<reqwest::blocking::Response> {
        let read = data.is_none();
        let body = || match &data {
            None => reqwest::blocking::Body::from(sql.to_string()),
            Some(d) => {
                let mut b = statement_then_data(sql);
                b.extend_from_slice(d);
                reqwest::blocking::Body::from(b)
            }
        };
        if read && self.cluster.is_some() {
            // A replica that has not yet fetched a part a quorum holds
            // refuses the read (code 289) rather than answer stale; it
            // catches up in moments, so the read is tried again for a while.
            let until = std::time::Instant::now() + self.cfg.schema_timeout;
            loop {
                let r = post(
                    &self.http,
                    &self.cfg,
                    self.url(&timeout, read),
                    self.budget(&timeout),
                    body(),
                );
                match r {
                    Err(e)
                        if e.to_string().contains("Code: 289")
                            && std::time::Instant::now() < until =>
                    {
                        std::thread::sleep(Duration::from_millis(200))
                    }
                    r => return r,
                }
            }
        }
        post(
            &self.http,
            &self.cfg,
            self.url(&timeout, read),
            self.budget(&timeout),
            body(),
        )
    }

    /// Run a statement; the whole reply (small replies only).
    pub(super) fn query(
        &self,
        sql: &str,
        data: Option<Vec<u8>>,
        timeout: Timeout,
    ) -> Result<Vec<u8>> {
        reply(self.send(sql, data, timeout)?)
    }
}

/// The start of an insert's body: its statement (`… FORMAT RowBinary`) and
/// the newline after which the server reads the data byte for byte.
pub(super) fn statement_then_data(sql: &str) -> Vec<u8> {
    let mut b = Vec::with_capacity(sql.len() + 1);
    b.extend_from_slice(sql.as_bytes());
    b.push(b'\n');
    b
}

/// One request to the server, with the credentials in headers, within a
/// time budget; an error reply is an error with the server's own words.
/// A free function, so that two inserts can be sent at once.
pub(super) fn post(
    http: &reqwest::blocking::Client,
    cfg: &ChConfig,
    url: String,
    budget: Duration,
    body: reqwest::blocking::Body,
) -> Result<reqwest::blocking::Response> {
    let req = http
        .post(url)
        .header("X-ClickHouse-User", &cfg.user)
        .header("X-ClickHouse-Key", &cfg.password)
        .timeout(budget)
        .body(body);
    let resp = req.send().map_err(|e| {
        let what = if e.is_timeout() {
            "timed out"
        } else if e.is_connect() {
            "cannot connect"
        } else {
            "request failed"
        };
        let cause = crate::error::root_cause(&e);
        let hint = if cause == "connection refused" {
            " (is ClickHouse's HTTP interface listening there? it is port 8123 by default; 9000 is the native protocol, which MoonCDC does not speak)"
        } else if cause.contains("invalid HTTP version") {
            " (is that ClickHouse's HTTP port? 9000 is the native protocol; HTTP is 8123 by default)"
        } else {
            ""
        };
        // The driver's error is kept as the cause, in plain words.
        Error::new(
            ErrorKind::Database,
            format!("ClickHouse at {}: {what}", cfg.base),
        )
        .with_source(crate::error::Cause {
            text: format!("{cause}{hint}"),
            inner: e,
        })
    })?;
    if !resp.status().is_success() {
        let status = resp.status();
        let text = resp.text().unwrap_or_default();
        let why = if text.trim().is_empty() {
            "(the server gave no reason)".to_string()
        } else {
            error_text(&text)
        };
        return Err(Error::new(
            ErrorKind::Database,
            format!(
                "ClickHouse error (HTTP {status}): {why}{}",
                if cfg.cluster.is_some() {
                    cluster_hint(&text)
                } else {
                    ""
                }
            ),
        ));
    }
    Ok(resp)
}

/// The whole reply (small replies only); an error the server appended to a
/// 200 reply after output started is an error.
pub(super) fn reply(mut resp: reqwest::blocking::Response) -> Result<Vec<u8>> {
    let mut v = Vec::new();
    resp.read_to_end(&mut v)
        .map_err(|e| Error::io("cannot read the ClickHouse reply", e))?;
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

/// What a cluster's error means for the user, where it is known.
fn cluster_hint(text: &str) -> &'static str {
    let code =
        |n: u32| text.contains(&format!("Code: {n},")) || text.contains(&format!("Code: {n}."));
    if text.contains("Coordination::Exception")
        || code(242)
        || text.contains("Table is in readonly mode")
    {
        " (the cluster's ZooKeeper is unreachable, or this node lost its session with it: nothing more was acknowledged and the cursor did not move; apply again once ZooKeeper answers)"
    } else if code(285) || code(286) {
        " (fewer replicas of a shard answered than the insert quorum needs: a replica is down or lagging; the cursor did not move; apply again once it is back, or lower insert_quorum)"
    } else if code(319) {
        " (the server cannot tell whether the insert reached its quorum: apply again, which rewrites the batch idempotently, once every replica answers)"
    } else if code(279) {
        " (no replica of a shard answered: a shard of the cluster is down; the cursor did not move; apply again once it is back)"
    } else {
        ""
    }
}
