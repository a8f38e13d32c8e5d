//! Connecting: SQL sessions, replication sessions and streams, each
//! phase bounded by `connect_timeout`, and snapshot-importing sessions.

use super::*;

/// A SQL session (`role` names it in `application_name`), every phase of
/// connecting bounded by `connect_timeout`, with the first server of a
/// multi-host string that suits its `target_session_attrs` (libpq's order:
/// hosts in turn, each within the connect timeout; `prefer-standby` takes
/// any server when no standby answers).
pub async fn connect_client(conn: &PgConn, role: &str) -> Result<Client> {
    if conn.hosts.len() <= 1 && conn.session_attrs == SessionAttrs::Any {
        return connect_one(conn, role).await;
    }
    let mut tried = Vec::new();
    let mut last = None;
    for attrs in passes(conn.session_attrs) {
        for cand in conn.candidates() {
            match connect_one(&cand, role).await {
                Ok(c) => {
                    if attrs == SessionAttrs::Any {
                        return Ok(c);
                    }
                    // A server that dies between the connect and the
                    // question is one more host that did not suit.
                    let row = match c
                        .query_one(
                            "SELECT pg_is_in_recovery(), current_setting('transaction_read_only') = 'on'",
                            &[],
                        )
                        .await
                        .map_err(pg_err("cannot ask a server whether it is a standby"))
                    {
                        Ok(row) => row,
                        Err(e) => {
                            tried.push(format!("{}:{}: {}", cand.host, cand.port, e.full_message()));
                            last = Some(e);
                            continue;
                        }
                    };
                    if attrs.accepts(row.get(0), row.get(1)) {
                        return Ok(c);
                    }
                    tried.push(format!(
                        "{}:{} is not {}",
                        cand.host,
                        cand.port,
                        attrs.as_str()
                    ));
                }
                Err(e) => {
                    tried.push(format!("{}:{}: {}", cand.host, cand.port, e.full_message()));
                    last = Some(e);
                }
            }
        }
    }
    // One server that cannot be reached: its own error, as a single host.
    if conn.hosts.len() == 1 && tried.len() == 1 {
        if let Some(e) = last {
            return Err(e);
        }
    }
    Err(no_server(conn, &tried))
}

/// The passes over the hosts: `prefer-standby` looks for a standby first.
fn passes(attrs: SessionAttrs) -> Vec<SessionAttrs> {
    match attrs {
        SessionAttrs::PreferStandby => vec![SessionAttrs::Standby, SessionAttrs::Any],
        a => vec![a],
    }
}

/// No server suited: worth retrying (a standby being promoted, a primary
/// restarting), so it is a transient failure.
fn no_server(conn: &PgConn, tried: &[String]) -> Error {
    let text = format!(
        "no server of {} took a {} session ({})",
        conn.display(),
        conn.session_attrs.as_str(),
        tried.join("; ")
    );
    Error::new(ErrorKind::Database, text.clone()).with_source(Cause {
        text,
        inner: ReplError::Io(std::io::Error::new(
            std::io::ErrorKind::NotConnected,
            "no suitable server",
        )),
    })
}

/// A replication connection to the first server of `conn` that suits its
/// `target_session_attrs`, as [`connect_client`] chooses.
pub(super) async fn repl_connect(
    conn: &PgConn,
    app: &str,
) -> std::result::Result<ReplClient, ReplError> {
    if conn.hosts.len() <= 1 && conn.session_attrs == SessionAttrs::Any {
        return ReplClient::connect(conn, app).await;
    }
    let mut tried = Vec::new();
    let mut last = None;
    for attrs in passes(conn.session_attrs) {
        for cand in conn.candidates() {
            match ReplClient::connect(&cand, app).await {
                Ok(mut c) => {
                    if attrs == SessionAttrs::Any {
                        return Ok(c);
                    }
                    let rows = match c
                        .simple_query("SELECT pg_is_in_recovery(), current_setting('transaction_read_only') = 'on'")
                        .await
                    {
                        Ok(rows) => rows,
                        Err(e) => {
                            tried.push(format!("{}:{}: {e}", cand.host, cand.port));
                            last = Some(e);
                            continue;
                        }
                    };
                    let flag = |i: usize| {
                        rows.first()
                            .and_then(|r| r.get(i))
                            .and_then(|v| v.as_deref())
                            == Some(b"t".as_slice())
                    };
                    if attrs.accepts(flag(0), flag(1)) {
                        return Ok(c);
                    }
                    c.close().await;
                    tried.push(format!(
                        "{}:{} is not {}",
                        cand.host,
                        cand.port,
                        attrs.as_str()
                    ));
                }
                Err(e) => {
                    tried.push(format!("{}:{}: {e}", cand.host, cand.port));
                    last = Some(e);
                }
            }
        }
    }
    if conn.hosts.len() == 1 && tried.len() == 1 {
        if let Some(e) = last {
            return Err(e);
        }
    }
    Err(ReplError::Io(std::io::Error::new(
        std::io::ErrorKind::NotConnected,
        format!(
            "no server of {} took a {} replication session ({})",
            conn.display(),
            conn.session_attrs.as_str(),
            tried.join("; ")
        ),
    )))
}

/// One server's SQL session.
async fn connect_one(conn: &PgConn, role: &str) -> Result<Client> {
    let tls = conn.tls()?;
    let config = conn.tokio_config(role);
    let connecting = async {
        config.connect(tls).await.map_err(|e| {
            let what = format!("cannot connect to {}", conn.display());
            match super::tls::explain(&e, conn) {
                Some(text) => {
                    Error::new(ErrorKind::Tls, what).with_source(Cause { text, inner: e })
                }
                None => pg_err(&what)(e),
            }
        })
    };
    let (client, connection) = within_connect_timeout(conn, connecting).await?;
    tokio::spawn(async move {
        let _ = connection.await;
    });
    let version = super::publication::server_version(&client).await?;
    check_version(version)?;
    Ok(client)
}

/// The oldest PostgreSQL the tools work with (docs/POSTGRES.md, "Versions
/// and topologies"), as `server_version_num`.
pub const OLDEST_VERSION: i32 = 140000;

/// A server older than [`OLDEST_VERSION`] is refused by name, before any
/// command it would not understand.
pub fn check_version(num: i32) -> Result<()> {
    if num >= OLDEST_VERSION {
        return Ok(());
    }
    let name = if num >= 100000 {
        format!("{}", num / 10000)
    } else {
        format!("{}.{}", num / 10000, num / 100 % 100)
    };
    Err(Error::state(format!(
        "the server runs PostgreSQL {name}; MoonCDC needs PostgreSQL {} or later",
        OLDEST_VERSION / 10000
    )))
}

/// One phase of connecting within `connect_timeout`, or an error that says
/// the peer did not answer.
async fn within_connect_timeout<T>(
    conn: &PgConn,
    phase: impl std::future::Future<Output = Result<T>>,
) -> Result<T> {
    match tokio::time::timeout(conn.connect_timeout, phase).await {
        Ok(r) => r,
        Err(_) => Err(Error::new(
            ErrorKind::Database,
            format!("cannot connect to {}", conn.display()),
        )
        .with_source(Cause {
            text: format!(
                "no answer within {} s (connect_timeout); is this a PostgreSQL server?",
                conn.connect_timeout.as_secs()
            ),
            inner: std::io::Error::from(std::io::ErrorKind::TimedOut),
        })),
    }
}

impl PgSource {
    /// Run one whole phase of connecting (TCP, TLS, startup, authentication
    /// and, on a replication session, IDENTIFY_SYSTEM or START_REPLICATION)
    /// within `connect_timeout`: a peer that accepts the connection but never
    /// answers must not hold a tool up forever. The drivers bound at most the
    /// TCP connect themselves.
    pub(super) async fn connecting<T>(
        &self,
        phase: impl std::future::Future<Output = Result<T>>,
    ) -> Result<T> {
        within_connect_timeout(&self.conn, phase).await
    }

    pub(super) async fn client(&self, role: &str) -> Result<Client> {
        connect_client(&self.conn, role).await
    }

    /// A replication session that has not started streaming, and its
    /// IDENTIFY_SYSTEM answer (the first thing it says, so the connect
    /// timeout covers it).
    pub(super) async fn replication_session(&self) -> Result<(ReplClient, IdentifySystem)> {
        self.connecting(async {
            let opening = format!(
                "cannot open a replication session to {}",
                self.conn.display()
            );
            let app = format!("{} stream", self.conn.application_name);
            let mut c = repl_connect(&self.conn, &app).await.map_err(|e| match e {
                // A role without REPLICATION is refused at startup.
                ReplError::Server { ref code, .. } if code == "42501" => repl_err(&format!(
                    "{opening} (does the role have the REPLICATION attribute?)"
                ))(e),
                e => repl_err(&opening)(e),
            })?;
            let id = c.identify_system().await.map_err(repl_err(
                "IDENTIFY_SYSTEM failed (does the role have the REPLICATION attribute?)",
            ))?;
            Ok((c, id))
        })
        .await
    }

    /// A replication stream from `start`, once the server has accepted
    /// START_REPLICATION; its status updates report `confirmed`.
    pub(super) async fn replication_stream(
        &self,
        start: u64,
        confirmed: u64,
        messages: bool,
    ) -> Result<ReplClient> {
        self.connecting(async {
            let app = format!("{} stream", self.conn.application_name);
            let mut client = repl_connect(&self.conn, &app)
                .await
                .map_err(repl_err("cannot open the replication stream"))?;
            client
                .start(&self.slot, &self.publication, start, confirmed, messages)
                .await
                .map_err(repl_err("cannot start replication"))?;
            Ok(client)
        })
        .await
    }

    /// The identity, from IDENTIFY_SYSTEM on a replication session.
    pub(super) async fn identity(&self) -> Result<String> {
        Ok(self.identity_and_timeline().await?.0)
    }

    /// The identity and the server's current timeline.
    pub(super) async fn identity_and_timeline(&self) -> Result<(String, String)> {
        let (c, id) = self.replication_session().await?;
        drop(c);
        Ok((
            format!(
                "postgres:{}/{}/{}",
                id.system_id, self.conn.dbname, self.slot
            ),
            id.timeline,
        ))
    }
    /// A REPEATABLE READ READ ONLY session that imports an exported snapshot.
    pub(super) async fn import_snapshot(&self, name: &str) -> Result<Client> {
        let c = self.client("snapshot reader").await?;
        c.batch_execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
            .await
            .map_err(pg_err("cannot begin the snapshot transaction"))?;
        c.batch_execute(&format!(
            "SET TRANSACTION SNAPSHOT '{}'",
            name.replace('\'', "''")
        ))
        .await
        .map_err(pg_err("cannot import the exported snapshot"))?;
        Ok(c)
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn versions_older_than_the_oldest_are_named() {
        assert!(super::check_version(140000).is_ok());
        assert!(super::check_version(180006).is_ok());
        let e = super::check_version(130021).unwrap_err().full_message();
        assert!(
            e.contains("PostgreSQL 13;") && e.contains("PostgreSQL 14 or later"),
            "{e}"
        );
        let e = super::check_version(90624).unwrap_err().full_message();
        assert!(e.contains("PostgreSQL 9.6;"), "{e}");
    }
}
