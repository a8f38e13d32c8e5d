//! SQL sessions: the first server of a multi-host string that suits its
//! `target_session_attrs`, every phase of connecting bounded by
//! `connect_timeout`, servers older than the oldest supported refused.

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
    first_suitable(
        conn,
        async |cand: &PgConn| connect_one(cand, role).await,
        async |c: &mut Client| {
            let row = c
                .query_one(
                    "SELECT pg_is_in_recovery(), current_setting('transaction_read_only') = 'on'",
                    &[],
                )
                .await
                .map_err(pg_err("cannot ask a server whether it is a standby"))?;
            Ok((row.get(0), row.get(1)))
        },
        async |_: Client| {},
        Error::full_message,
        |tried| no_server(conn, tried),
    )
    .await
}

/// The first server of `conn` (its hosts in libpq's order, in `passes`)
/// that `connect` reaches and that suits its `target_session_attrs`, as
/// `probe` answers (in recovery, read-only by default); a server that does
/// not suit is handed to `reject`, and one that fails, connecting or
/// answering, is one more host tried (`describe` says its error). When none
/// suits: `none` of what each one tried said, or, for one host that could
/// not be reached, its own error, as a single host's would be.
pub(crate) async fn first_suitable<C, E>(
    conn: &PgConn,
    mut connect: impl AsyncFnMut(&PgConn) -> std::result::Result<C, E>,
    mut probe: impl AsyncFnMut(&mut C) -> std::result::Result<(bool, bool), E>,
    mut reject: impl AsyncFnMut(C),
    describe: impl Fn(&E) -> String,
    none: impl FnOnce(&[String]) -> E,
) -> std::result::Result<C, E> {
    let mut tried = Vec::new();
    let mut last = None;
    for attrs in passes(conn.session_attrs) {
        for cand in conn.candidates() {
            let answered = match connect(&cand).await {
                Ok(c) if attrs == SessionAttrs::Any => return Ok(c),
                Ok(mut c) => probe(&mut c).await.map(|flags| (c, flags)),
                Err(e) => Err(e),
            };
            match answered {
                Ok((c, (in_recovery, read_only))) if attrs.accepts(in_recovery, read_only) => {
                    return Ok(c)
                }
                Ok((c, _)) => {
                    reject(c).await;
                    tried.push(format!(
                        "{}:{} is not {}",
                        cand.host,
                        cand.port,
                        attrs.as_str()
                    ));
                }
                Err(e) => {
                    tried.push(format!("{}:{}: {}", cand.host, cand.port, describe(&e)));
                    last = Some(e);
                }
            }
        }
    }
    match last {
        Some(e) if conn.hosts.len() == 1 && tried.len() == 1 => Err(e),
        _ => Err(none(&tried)),
    }
}

/// The passes over the hosts: `prefer-standby` looks for a standby first.
pub(crate) fn passes(attrs: SessionAttrs) -> Vec<SessionAttrs> {
    match attrs {
        SessionAttrs::PreferStandby => vec![SessionAttrs::Standby, SessionAttrs::Any],
        a => vec![a],
    }
}

/// No server suited: worth retrying (a standby being promoted, a primary
/// restarting), so it is a transient failure.
pub(crate) fn no_server(conn: &PgConn, tried: &[String]) -> Error {
    let text = format!(
        "no server of {} took the session (target_session_attrs={}): {}",
        conn.display(),
        conn.session_attrs.as_str(),
        tried.join("; ")
    );
    // The cause says only what kind of failure it is (a retry may find a
    // server): the message says the rest, once.
    Error::new(ErrorKind::Database, text).with_source(Cause {
        text: "no suitable server".to_string(),
        inner: std::io::Error::new(std::io::ErrorKind::NotConnected, "no suitable server"),
    })
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
    let version = super::server_version(&client).await?;
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
pub(crate) async fn within_connect_timeout<T>(
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
