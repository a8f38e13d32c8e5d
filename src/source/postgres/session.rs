//! Connecting: SQL sessions, replication sessions and streams, each
//! phase bounded by `connect_timeout`, and snapshot-importing sessions.

use super::conn::{PgConn, SessionAttrs};
use super::replication::{IdentifySystem, ReplClient, ReplError, StartOptions};
use super::{repl_err, PgSource};
use crate::error::Result;
use crate::pg::{connect_client, first_suitable, pg_err, within_connect_timeout};
use tokio_postgres::Client;

/// Whether `conn` names one server to take as it is (no host to choose).
fn one_server(conn: &PgConn) -> bool {
    conn.hosts.len() <= 1 && conn.session_attrs == SessionAttrs::Any
}

/// One host's part of connecting within `connect_timeout`, as libpq
/// bounds each host: a host that accepts and never answers (a stopped
/// server) costs its own timeout, and the next host is tried.
async fn within_host_timeout<T>(
    conn: &PgConn,
    phase: impl std::future::Future<Output = std::result::Result<T, ReplError>>,
) -> std::result::Result<T, ReplError> {
    match tokio::time::timeout(conn.connect_timeout, phase).await {
        Ok(r) => r,
        Err(_) => Err(ReplError::Io(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            format!(
                "no answer within {} s (connect_timeout)",
                conn.connect_timeout.as_secs()
            ),
        ))),
    }
}

/// A replication connection to the first server of `conn` that suits its
/// `target_session_attrs`, as [`connect_client`] chooses: each host within
/// its own `connect_timeout`, each host's failure named.
pub(super) async fn repl_connect(
    conn: &PgConn,
    app: &str,
) -> std::result::Result<ReplClient, ReplError> {
    if one_server(conn) {
        return ReplClient::connect(conn, app).await;
    }
    first_suitable(
        conn,
        async |cand: &PgConn| within_host_timeout(cand, ReplClient::connect(cand, app)).await,
        async |c: &mut ReplClient| {
            let asking = c.simple_query(
                "SELECT pg_is_in_recovery(), current_setting('transaction_read_only') = 'on'",
            );
            let rows = within_host_timeout(conn, asking).await?;
            let flag = |i: usize| {
                rows.first()
                    .and_then(|r| r.get(i))
                    .and_then(|v| v.as_deref())
                    == Some(b"t".as_slice())
            };
            Ok((flag(0), flag(1)))
        },
        async |c: ReplClient| c.close().await,
        ReplError::to_string,
        |tried| {
            ReplError::Io(std::io::Error::new(
                std::io::ErrorKind::NotConnected,
                format!(
                    "no server of {} took the replication session (target_session_attrs={}): {}",
                    conn.display(),
                    conn.session_attrs.as_str(),
                    tried.join("; ")
                ),
            ))
        },
    )
    .await
}

impl PgSource {
    /// Run one whole phase of connecting (TCP, TLS, startup, authentication
    /// and, on a replication session, IDENTIFY_SYSTEM or START_REPLICATION)
    /// within `connect_timeout`: a peer that accepts the connection but never
    /// answers must not hold a tool up forever. The drivers bound at most the
    /// TCP connect themselves. With several hosts to choose from, each host
    /// has its own `connect_timeout` (`repl_connect`), and the phase as a
    /// whole one more than all of them.
    pub(super) async fn connecting<T>(
        &self,
        phase: impl std::future::Future<Output = Result<T>>,
    ) -> Result<T> {
        if one_server(&self.conn) {
            return within_connect_timeout(&self.conn, phase).await;
        }
        // Each try: connecting, then asking whether the server suits.
        let tries = self.conn.hosts.len() * crate::pg::passes(self.conn.session_attrs).len();
        let mut whole = self.conn.clone();
        whole.connect_timeout = (self.conn.connect_timeout)
            .saturating_mul(u32::try_from(2 * tries + 1).unwrap_or(u32::MAX));
        within_connect_timeout(&whole, phase).await
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
        opts: StartOptions,
    ) -> Result<ReplClient> {
        self.connecting(async {
            let app = format!("{} stream", self.conn.application_name);
            let mut client = repl_connect(&self.conn, &app)
                .await
                .map_err(repl_err("cannot open the replication stream"))?;
            client
                .start(&self.slot, &self.publication, start, confirmed, opts)
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
