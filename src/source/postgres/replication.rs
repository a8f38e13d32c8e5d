//! A logical replication client: PostgreSQL's streaming replication protocol
//! on a connection opened with `replication=database`.
//!
//! - Transport: TCP, or a Unix socket for a host that is a folder; TLS per
//!   `sslmode` (rustls with the ring provider, the same verifiers as the SQL
//!   sessions). An explicit TLS request never ends in plaintext: a server
//!   that answers the SSLRequest with `N` is refused.
//! - Startup and authentication: cleartext, MD5 and SCRAM-SHA-256 (the
//!   message formats and the SCRAM exchange come from `postgres-protocol`,
//!   the protocol crate tokio-postgres is built on).
//! - Commands: simple queries (`IDENTIFY_SYSTEM`, `CREATE_REPLICATION_SLOT`),
//!   and `START_REPLICATION … LOGICAL` with pgoutput, whose CopyBoth stream
//!   yields XLogData and keepalives.
//! - Feedback: a standby status update at least every second and whenever
//!   the server asks, reporting as written, flushed and applied only the
//!   position set with [`ReplClient::confirm`] (the slot's own confirmed
//!   position at start): reading never acknowledges anything.
//!
//! Reads are cancel-safe (bytes go to a buffer; whole messages are taken
//! from it), so a caller may race `recv` against a timer; writes happen
//! only in `maintain`, which the caller runs between receives.

use super::conn::{PgConn, SslMode};
use bytes::{Buf, BytesMut};
use postgres_protocol::authentication::sasl::{ChannelBinding, ScramSha256, SCRAM_SHA_256};
use postgres_protocol::message::frontend;
use std::fmt;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// Why the replication connection failed.
#[derive(Debug)]
pub enum ReplError {
    Io(std::io::Error),
    /// The server refused something (an ErrorResponse).
    Server {
        code: String,
        message: String,
        detail: Option<String>,
    },
    Tls(String),
    /// The server said something this client does not expect.
    Protocol(String),
}

impl fmt::Display for ReplError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReplError::Io(e) => write!(f, "{e}"),
            ReplError::Server {
                message, detail, ..
            } => {
                f.write_str(message)?;
                if let Some(d) = detail {
                    write!(f, " ({d})")?;
                }
                Ok(())
            }
            ReplError::Tls(m) | ReplError::Protocol(m) => f.write_str(m),
        }
    }
}

impl std::error::Error for ReplError {}

impl From<std::io::Error> for ReplError {
    fn from(e: std::io::Error) -> Self {
        ReplError::Io(e)
    }
}

type R<T> = std::result::Result<T, ReplError>;

trait Io: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Io for T {}

/// What the stream delivers.
#[derive(Debug)]
pub enum ReplEvent {
    /// A pgoutput message.
    XLogData { data: Vec<u8> },
    /// The server's WAL end, while it has nothing to send; `reply`: it
    /// asks for a status update (it waits for one, e.g. to shut down).
    KeepAlive { wal_end: u64, reply: bool },
}

/// `IDENTIFY_SYSTEM`'s answer.
/// What a replication stream asks of pgoutput.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StartOptions {
    /// `proto_version`: 1, or 2 (PostgreSQL 14+) and 4 (16+) with streaming.
    pub version: u8,
    /// Large transactions in progress sent in blocks (version 2 and later).
    pub streaming: bool,
    /// Logical messages.
    pub messages: bool,
}

#[derive(Debug, Clone)]
pub struct IdentifySystem {
    pub system_id: String,
    pub timeline: String,
}

/// One replication connection.
pub struct ReplClient {
    io: Box<dyn Io>,
    rbuf: BytesMut,
    /// Reported to the server as written, flushed and applied.
    confirmed: u64,
    last_status: Instant,
    /// The server asked for a reply that is not sent yet.
    reply_due: bool,
}

/// A message this large (bytes) that arrives alone is handed over with the
/// read buffer it fills instead of copied out of it.
const LARGE: usize = 1 << 20;

/// No PostgreSQL message is longer (its allocations stop at 1 GiB).
const MAX_MESSAGE: usize = 1 << 30;

/// A server message: its tag and body (a part of the read buffer, not a
/// copy: XLogData may carry a logical message of many megabytes).
struct Msg {
    tag: u8,
    body: BytesMut,
}

fn be_u64(b: &[u8]) -> R<u64> {
    b.get(..8)
        .map(|s| u64::from_be_bytes(s.try_into().expect("8 bytes")))
        .ok_or_else(|| ReplError::Protocol("a replication message is truncated".into()))
}

fn error_response(body: &[u8]) -> ReplError {
    let (mut code, mut message, mut detail) = (String::new(), String::new(), None);
    for field in body.split(|&b| b == 0).filter(|f| !f.is_empty()) {
        let text = String::from_utf8_lossy(&field[1..]).into_owned();
        match field[0] {
            b'C' => code = text,
            b'M' => message = text,
            b'D' => detail = Some(text),
            _ => {}
        }
    }
    ReplError::Server {
        code,
        message,
        detail,
    }
}

impl ReplClient {
    /// Connect, negotiate TLS per `sslmode`, start up with
    /// `replication=database` and authenticate. The caller bounds the time.
    pub async fn connect(conn: &PgConn, application_name: &str) -> R<ReplClient> {
        let io: Box<dyn Io> = if conn.host.starts_with('/') {
            if conn.sslmode != SslMode::Disable {
                return Err(ReplError::Tls(format!(
                    "sslmode={} asks for TLS, which a Unix socket does not carry",
                    conn.sslmode.as_str()
                )));
            }
            let path = format!("{}/.s.PGSQL.{}", conn.host, conn.port);
            Box::new(tokio::net::UnixStream::connect(path).await?)
        } else {
            let to = conn.hostaddr.as_deref().unwrap_or(conn.host.as_str());
            let mut tcp = tokio::net::TcpStream::connect((to, conn.port)).await?;
            tcp.set_nodelay(true)?;
            if conn.sslmode == SslMode::Disable {
                Box::new(tcp)
            } else {
                // SSLRequest: length 8, code 80877103.
                tcp.write_all(&[0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x2f]).await?;
                let mut answer = [0u8; 1];
                tcp.read_exact(&mut answer).await?;
                if answer[0] != b'S' {
                    return Err(ReplError::Tls(format!(
                        "the server does not accept TLS, and sslmode={} asks for it",
                        conn.sslmode.as_str()
                    )));
                }
                let config = conn
                    .rustls_config()
                    .map_err(|e| ReplError::Tls(e.full_message()))?;
                let name = rustls::pki_types::ServerName::try_from(conn.host.clone())
                    .map_err(|e| ReplError::Tls(format!("host {:?}: {e}", conn.host)))?;
                let tls = tokio_rustls::TlsConnector::from(std::sync::Arc::new(config))
                    .connect(name, tcp)
                    .await
                    .map_err(|e| match e.kind() {
                        // A certificate or protocol failure is a refusal;
                        // a reset or an early end is the network's.
                        std::io::ErrorKind::InvalidData => ReplError::Tls(
                            super::tls::explain(&e, conn)
                                .unwrap_or_else(|| format!("TLS handshake failed: {e}")),
                        ),
                        _ => ReplError::Io(e),
                    })?;
                Box::new(tls)
            }
        };
        let mut c = ReplClient {
            io,
            rbuf: BytesMut::with_capacity(1 << 16),
            confirmed: 0,
            last_status: Instant::now(),
            reply_due: false,
        };
        c.startup(conn, application_name).await?;
        Ok(c)
    }

    async fn send(&mut self, buf: &[u8]) -> R<()> {
        self.io.write_all(buf).await?;
        self.io.flush().await?;
        Ok(())
    }

    /// The next whole message; cancel-safe.
    async fn next(&mut self) -> R<Msg> {
        loop {
            if self.rbuf.len() >= 5 {
                let len = u32::from_be_bytes(self.rbuf[1..5].try_into().expect("4 bytes")) as usize;
                if len < 4 {
                    return Err(ReplError::Protocol("a message length is below 4".into()));
                }
                if self.rbuf.len() > len {
                    // A large message that fills the buffer takes it whole,
                    // so its bytes become the event's without a copy.
                    let mut body = if len > LARGE && self.rbuf.len() == 1 + len {
                        std::mem::replace(&mut self.rbuf, BytesMut::with_capacity(1 << 16))
                    } else {
                        self.rbuf.split_to(1 + len)
                    };
                    let tag = body[0];
                    body.advance(5);
                    return Ok(Msg { tag, body });
                }
            }
            // Room for the whole of a large message at once, so the buffer
            // does not grow (and copy itself) step by step.
            if self.rbuf.len() >= 5 {
                let len = u32::from_be_bytes(self.rbuf[1..5].try_into().expect("4 bytes")) as usize;
                if len > MAX_MESSAGE {
                    return Err(ReplError::Protocol(format!(
                        "a message of {len} bytes, over the 1 GiB a PostgreSQL server sends (is this a PostgreSQL server?)"
                    )));
                }
                if len > LARGE {
                    self.rbuf.reserve(1 + len - self.rbuf.len());
                }
            }
            if self.io.read_buf(&mut self.rbuf).await? == 0 {
                return Err(ReplError::Io(std::io::Error::new(
                    std::io::ErrorKind::UnexpectedEof,
                    "the server closed the connection",
                )));
            }
        }
    }

    async fn startup(&mut self, conn: &PgConn, application_name: &str) -> R<()> {
        let mut buf = BytesMut::new();
        frontend::startup_message(
            [
                ("user", conn.user.as_str()),
                ("database", conn.dbname.as_str()),
                ("replication", "database"),
                ("application_name", application_name),
                ("options", PgConn::SESSION_OPTIONS),
            ],
            &mut buf,
        )?;
        self.send(&buf).await?;
        let mut scram: Option<ScramSha256> = None;
        loop {
            let m = self.next().await?;
            match m.tag {
                b'R' => self.authenticate(conn, &m.body, &mut scram).await?,
                b'E' => return Err(error_response(&m.body)),
                b'Z' => return Ok(()),
                // ParameterStatus, BackendKeyData, notices.
                _ => {}
            }
        }
    }

    /// Answer one authentication request of the startup (`body`: the
    /// message after its tag): a password in clear, MD5 or SCRAM-SHA-256,
    /// whose exchange so far `scram` holds.
    async fn authenticate(
        &mut self,
        conn: &PgConn,
        body: &[u8],
        scram: &mut Option<ScramSha256>,
    ) -> R<()> {
        let password = || {
            conn.password().ok_or_else(|| {
                ReplError::Protocol(format!(
                    "the server asks user {:?} for a password and none was given",
                    conn.user
                ))
            })
        };
        let mut buf = BytesMut::new();
        let code = body
            .get(..4)
            .map(|b| u32::from_be_bytes(b.try_into().expect("4")));
        match code {
            Some(0) => {}
            Some(3) => {
                frontend::password_message(password()?.as_bytes(), &mut buf)?;
                self.send(&buf).await?;
            }
            Some(5) => {
                let salt: [u8; 4] = body
                    .get(4..8)
                    .and_then(|s| s.try_into().ok())
                    .ok_or_else(|| ReplError::Protocol("MD5 request without a salt".into()))?;
                let hash = postgres_protocol::authentication::md5_hash(
                    conn.user.as_bytes(),
                    password()?.as_bytes(),
                    salt,
                );
                frontend::password_message(hash.as_bytes(), &mut buf)?;
                self.send(&buf).await?;
            }
            Some(10) => {
                let offered = String::from_utf8_lossy(&body[4..]).into_owned();
                if !offered.split('\0').any(|s| s == SCRAM_SHA_256) {
                    return Err(ReplError::Protocol(format!(
                        "the server offers SASL mechanisms {offered:?}, not SCRAM-SHA-256"
                    )));
                }
                let s = ScramSha256::new(password()?.as_bytes(), ChannelBinding::unsupported());
                frontend::sasl_initial_response(SCRAM_SHA_256, s.message(), &mut buf)?;
                self.send(&buf).await?;
                *scram = Some(s);
            }
            Some(11) => {
                let s = scram.as_mut().ok_or_else(|| ReplError::Protocol("SASL continue without a start".into()))?;
                s.update(&body[4..])?;
                frontend::sasl_response(s.message(), &mut buf)?;
                self.send(&buf).await?;
            }
            Some(12) => {
                let s = scram.as_mut().ok_or_else(|| ReplError::Protocol("SASL final without a start".into()))?;
                s.finish(&body[4..])?;
            }
            other => {
                return Err(ReplError::Protocol(format!(
                    "the server asks for an authentication method this client does not speak ({other:?})"
                )))
            }
        }
        Ok(())
    }

    /// Run a simple query; the rows of its result, each column as bytes.
    pub async fn simple_query(&mut self, sql: &str) -> R<Vec<Vec<Option<Vec<u8>>>>> {
        let mut buf = BytesMut::new();
        frontend::query(sql, &mut buf)?;
        self.send(&buf).await?;
        let mut rows = Vec::new();
        let mut failed = None;
        loop {
            let m = self.next().await?;
            match m.tag {
                b'D' => rows.push(data_row(&m.body)?),
                b'E' => failed = Some(error_response(&m.body)),
                b'Z' => return failed.map_or(Ok(rows), Err),
                _ => {}
            }
        }
    }

    pub async fn identify_system(&mut self) -> R<IdentifySystem> {
        let rows = self.simple_query("IDENTIFY_SYSTEM").await?;
        let col = |i: usize| {
            rows.first()
                .and_then(|r| r.get(i).cloned().flatten())
                .map(|b| String::from_utf8_lossy(&b).into_owned())
                .ok_or_else(|| ReplError::Protocol("IDENTIFY_SYSTEM answered without a row".into()))
        };
        Ok(IdentifySystem {
            system_id: col(0)?,
            timeline: col(1)?,
        })
    }

    /// `START_REPLICATION SLOT … LOGICAL start` with pgoutput for the
    /// publication; `confirmed` is what the status updates report.
    pub async fn start(
        &mut self,
        slot: &str,
        publication: &str,
        start: u64,
        confirmed: u64,
        opts: StartOptions,
    ) -> R<()> {
        let sql = format!(
            "START_REPLICATION SLOT {} LOGICAL {:X}/{:X} (proto_version '{}', publication_names '{}'{}{})",
            crate::util::quote_ident(slot),
            start >> 32,
            start & 0xffff_ffff,
            opts.version,
            crate::util::quote_ident(publication).replace('\'', "''"),
            if opts.messages { ", messages 'true'" } else { "" },
            if opts.streaming { ", streaming 'on'" } else { "" }
        );
        let mut buf = BytesMut::new();
        frontend::query(&sql, &mut buf)?;
        self.send(&buf).await?;
        loop {
            let m = self.next().await?;
            match m.tag {
                b'W' => break,
                b'E' => return Err(error_response(&m.body)),
                _ => {}
            }
        }
        self.confirmed = confirmed;
        self.send_status(false).await
    }

    /// Report `lsn` as written, flushed and applied from now on (never
    /// backwards).
    pub fn confirm(&mut self, lsn: u64) {
        self.confirmed = self.confirmed.max(lsn);
        // The next `maintain` sends it at once.
        self.reply_due = true;
    }

    async fn send_status(&mut self, reply: bool) -> R<()> {
        // Microseconds since 2000-01-01, the server's epoch.
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_micros() as i64 - 946_684_800_000_000)
            .unwrap_or(0);
        let mut msg = Vec::with_capacity(40);
        msg.push(b'd');
        msg.extend_from_slice(&(4 + 1 + 8 * 4 + 1u32).to_be_bytes());
        msg.push(b'r');
        for _ in 0..3 {
            msg.extend_from_slice(&self.confirmed.to_be_bytes());
        }
        msg.extend_from_slice(&now.to_be_bytes());
        msg.push(u8::from(reply));
        self.send(&msg).await?;
        self.last_status = Instant::now();
        Ok(())
    }

    /// Send what is due: a status update every second, at once after
    /// [`confirm`](Self::confirm) or when the server asked for a reply, and
    /// with `ping` one that asks the server to answer with a keepalive (so a
    /// quiet stream still tells where the server's WAL stands). Called
    /// between receives, never raced against a timer: a write is not
    /// cancel-safe.
    pub async fn maintain(&mut self, ping: bool) -> R<()> {
        if ping || self.reply_due || self.last_status.elapsed() >= STATUS_INTERVAL {
            self.reply_due = false;
            self.send_status(ping).await?;
        }
        Ok(())
    }

    /// The next event of the stream; `None` when the server ended it.
    /// Only reads (cancel-safe): the caller runs [`maintain`](Self::maintain)
    /// between calls.
    pub async fn recv(&mut self) -> R<Option<ReplEvent>> {
        loop {
            let m = self.next().await?;
            match m.tag {
                b'd' => match m.body.first() {
                    Some(b'w') => {
                        if m.body.len() < 25 {
                            return Err(ReplError::Protocol("XLogData is truncated".into()));
                        }
                        let mut data = Vec::from(m.body);
                        data.drain(..25);
                        return Ok(Some(ReplEvent::XLogData { data }));
                    }
                    Some(b'k') => {
                        let wal_end = be_u64(m.body.get(1..).unwrap_or_default())?;
                        let reply = m.body.get(17) == Some(&1);
                        if reply {
                            self.reply_due = true;
                        }
                        return Ok(Some(ReplEvent::KeepAlive { wal_end, reply }));
                    }
                    other => {
                        return Err(ReplError::Protocol(format!(
                            "unknown replication message {:?}",
                            other.map(|b| *b as char)
                        )))
                    }
                },
                b'c' => return Ok(None),
                b'E' => return Err(error_response(&m.body)),
                _ => {}
            }
        }
    }

    /// Close the connection (a Terminate message, best effort).
    pub async fn close(mut self) {
        let mut buf = BytesMut::new();
        frontend::terminate(&mut buf);
        let _ = tokio::time::timeout(Duration::from_secs(1), self.send(&buf)).await;
    }
}

const STATUS_INTERVAL: Duration = Duration::from_secs(1);

fn data_row(body: &[u8]) -> R<Vec<Option<Vec<u8>>>> {
    let short = || ReplError::Protocol("a DataRow is truncated".into());
    let n = u16::from_be_bytes(body.get(..2).ok_or_else(short)?.try_into().expect("2")) as usize;
    let mut at = 2;
    let mut row = Vec::with_capacity(n);
    for _ in 0..n {
        let len = i32::from_be_bytes(
            body.get(at..at + 4)
                .ok_or_else(short)?
                .try_into()
                .expect("4"),
        );
        at += 4;
        if len < 0 {
            row.push(None);
        } else {
            let end = at + len as usize;
            row.push(Some(body.get(at..end).ok_or_else(short)?.to_vec()));
            at = end;
        }
    }
    Ok(row)
}
