//! A throwaway ClickHouse server for the ClickHouse tests.
//!
//! One server per test binary, started lazily on first use ([`server`]):
//! Debian's `clickhouse-server` (18.16) with a configuration whose paths all
//! live in one temporary folder, listening on 127.0.0.1 only, HTTP and native
//! ports found free by binding port 0, no interserver port. A watchdog
//! process started before the server stops it (by its pid, checked against
//! its command line) and removes the folder as soon as the test process is
//! gone, whatever way it ends, so no server is ever left running.
//!
//! HTTPS too, on [`Server::https_port`], with a certificate for 127.0.0.1
//! signed by a CA made for the server (`openssl`), whose certificate is
//! [`Server::ca_file`]: no system trust store knows it.
//!
//! Users: `default` (no password, 127.0.0.1 only; only the harness uses it)
//! and [`USER`] with [`PASSWORD`], which needs percent-encoding in a URL; tests
//! can check it never appears in any output ([`PASSWORD_MARK`]).
//!
//! Each test gets its own database `t_<name>` ([`db`]).
//!
//! Environment: `MOONCDC_CLICKHOUSE_SERVER` (default `/usr/sbin/clickhouse-server`).
//!
//! A modern engine instead: with `MOONCDC_CLICKHOUSE_ENGINE=chdb`, the server
//! is `tests/common/chdb_front.py`, ClickHouse's HTTP interface over PyPI's
//! `chdb` (the current engine in one process), run by `python3` in the same
//! kind of folder under the same watchdog, with the same two users. It has an
//! HTTP port only: no native port and no HTTPS ([`Server::tcp_port`] and
//! [`Server::https_port`] are `None`), so tests that need either say
//! `SKIPPED` there ([`skip_on_chdb`]); what else the front does not do is in
//! its own header.

use super::shq;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// The user the tools connect as.
pub const USER: &str = "app";
/// Its password: `/`, `@`, `:` and `%` must be percent-encoded in a URL.
pub const PASSWORD: &str = "chS3cr3t/@:%pw";
/// A part of the password no tool output may ever contain.
pub const PASSWORD_MARK: &str = "chS3cr3t";

/// Whether the tests run against the chdb front (a current engine) rather
/// than Debian's clickhouse-server 18.16: `MOONCDC_CLICKHOUSE_ENGINE=chdb`.
pub fn engine_is_chdb() -> bool {
    match std::env::var("MOONCDC_CLICKHOUSE_ENGINE").as_deref() {
        Ok("chdb") => true,
        Ok("") | Ok("clickhouse-server") | Err(_) => false,
        Ok(other) => panic!(
            "MOONCDC_CLICKHOUSE_ENGINE={other}: the engines are clickhouse-server (the default) and chdb"
        ),
    }
}

/// On the chdb front, say that `test` is skipped and why (a `SKIPPED` line)
/// and return true: for what only a real server has (the native port,
/// HTTPS, its logs and tables of its own).
pub fn skip_on_chdb(test: &str, why: &str) -> bool {
    if engine_is_chdb() {
        eprintln!("SKIPPED {test}: {why} (MOONCDC_CLICKHOUSE_ENGINE=chdb)");
        true
    } else {
        false
    }
}

/// The chdb front (a ClickHouse HTTP interface over PyPI's chdb).
pub fn chdb_front() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/common/chdb_front.py")
}

/// The server program.
pub fn server_bin() -> PathBuf {
    PathBuf::from(
        std::env::var("MOONCDC_CLICKHOUSE_SERVER")
            .unwrap_or_else(|_| "/usr/sbin/clickhouse-server".to_string()),
    )
}

/// The server program, or the suite skipped (or failed) without it
/// ([`super::need_server`]).
pub fn need_server_bin() {
    super::need_server(
        "ClickHouse",
        server_bin().exists(),
        &format!(
            "no {}; MOONCDC_CLICKHOUSE_SERVER names the server program",
            server_bin().display()
        ),
    );
}

/// A running throwaway server.
#[derive(Debug)]
pub struct Server {
    /// The HTTP port on 127.0.0.1.
    pub http_port: u16,
    /// The native-protocol port on 127.0.0.1 (none on the chdb front).
    pub tcp_port: Option<u16>,
    /// The HTTPS port on 127.0.0.1 (certificate signed by [`Server::ca_file`];
    /// none on the chdb front).
    pub https_port: Option<u16>,
    /// The temporary folder: configuration, data, logs.
    pub dir: PathBuf,
    /// The server's process id.
    pub pid: u32,
    http: reqwest::blocking::Client,
}

static SERVER: OnceLock<Server> = OnceLock::new();

/// The server of this test binary, started on first use.
pub fn server() -> &'static Server {
    SERVER.get_or_init(Server::start)
}

/// A new database `t_<name>` in the server.
pub fn db(name: &str) -> ChDb {
    let s = server();
    let name = format!("t_{name}");
    s.admin(&format!("CREATE DATABASE {}", quote_ident(&name)));
    ChDb { name }
}

/// A free TCP port on 127.0.0.1 (bound to port 0, then released).
pub fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind a free port");
    l.local_addr().expect("local address").port()
}

/// Percent-encode a URL component (everything but unreserved characters).
pub fn url_encode(s: &str) -> String {
    let mut out = String::new();
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// A ClickHouse identifier in backquotes.
pub fn quote_ident(s: &str) -> String {
    format!("`{}`", s.replace('\\', "\\\\").replace('`', "\\`"))
}

/// A ClickHouse string literal.
pub fn lit(s: &str) -> String {
    format!("'{}'", s.replace('\\', "\\\\").replace('\'', "\\'"))
}

fn xml_escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

impl Server {
    // The watchdog and the server are deliberately never waited for: the
    // watchdog outlives this process, and the server is its to stop.
    #[allow(clippy::zombie_processes)]
    fn start() -> Server {
        let _ = rustls::crypto::ring::default_provider().install_default();
        if engine_is_chdb() {
            super::need_server(
                "ClickHouse (chdb)",
                chdb_importable(),
                "python3 cannot import chdb: pip install chdb",
            );
            return Server::start_chdb();
        }
        need_server_bin();
        let dir = tempfile::Builder::new()
            .prefix("mooncdc-ch-")
            .tempdir()
            .expect("temporary folder for the ClickHouse server")
            .keep();
        let d = |p: &str| dir.join(p).display().to_string();
        // The watchdog first: from now on, whatever happens to this process,
        // the server is stopped and the folder removed once it is gone. The
        // pid comes from the file this process writes right after spawning
        // the server, else from the server's own `<data>/status`; it is
        // killed only while its command line names this folder (a zombie,
        // whose command line is empty, counts as gone).
        let script = watchdog_script(&dir, Some(&d("data/status")));
        super::spawn_watchdog(&script, "the ClickHouse test server");
        for sub in ["data", "tmp", "user_files", "format_schemas", "log"] {
            std::fs::create_dir_all(dir.join(sub)).expect("create the server's folders");
        }
        make_certificates(&dir);
        std::fs::write(
            dir.join("users.xml"),
            format!(
                "<yandex>\n\
                 <profiles><default></default></profiles>\n\
                 <users>\n\
                 <default><password></password><networks><ip>127.0.0.1</ip></networks><profile>default</profile><quota>default</quota></default>\n\
                 <{USER}><password>{}</password><networks><ip>127.0.0.1</ip></networks><profile>default</profile><quota>default</quota></{USER}>\n\
                 </users>\n\
                 <quotas><default></default></quotas>\n\
                 </yandex>\n",
                xml_escape(PASSWORD)
            ),
        )
        .expect("write users.xml");
        let http = reqwest::blocking::Client::builder()
            .connect_timeout(Duration::from_secs(5))
            .timeout(Duration::from_secs(120))
            .build()
            .expect("HTTP client");
        for attempt in 0..5 {
            let http_port = free_port();
            let mut tcp_port = free_port();
            while tcp_port == http_port {
                tcp_port = free_port();
            }
            let mut https_port = free_port();
            while https_port == http_port || https_port == tcp_port {
                https_port = free_port();
            }
            std::fs::write(
                dir.join("config.xml"),
                format!(
                    "<yandex>\n\
                     <logger><level>warning</level><log>{log}</log><errorlog>{err}</errorlog><console>0</console></logger>\n\
                     <http_port>{http_port}</http_port>\n\
                     <tcp_port>{tcp_port}</tcp_port>\n\
                     <https_port>{https_port}</https_port>\n\
                     <openSSL><server><certificateFile>{cert}</certificateFile><privateKeyFile>{key}</privateKeyFile>\
                     <verificationMode>none</verificationMode><loadDefaultCAFile>false</loadDefaultCAFile>\
                     <disableProtocols>sslv2,sslv3</disableProtocols></server></openSSL>\n\
                     <listen_host>127.0.0.1</listen_host>\n\
                     <path>{data}/</path>\n\
                     <tmp_path>{tmp}/</tmp_path>\n\
                     <user_files_path>{uf}/</user_files_path>\n\
                     <format_schema_path>{fs}/</format_schema_path>\n\
                     <users_config>{users}</users_config>\n\
                     <default_profile>default</default_profile>\n\
                     <default_database>default</default_database>\n\
                     <mark_cache_size>5368709</mark_cache_size>\n\
                     </yandex>\n",
                    log = xml_escape(&d("log/server.log")),
                    err = xml_escape(&d("log/err.log")),
                    data = xml_escape(&d("data")),
                    tmp = xml_escape(&d("tmp")),
                    uf = xml_escape(&d("user_files")),
                    fs = xml_escape(&d("format_schemas")),
                    users = xml_escape(&d("users.xml")),
                    cert = xml_escape(&d("server.pem")),
                    key = xml_escape(&d("server.key")),
                ),
            )
            .expect("write config.xml");
            let out =
                std::fs::File::create(dir.join("log/stdout.log")).expect("server output file");
            let mut child = Command::new(server_bin())
                .arg(format!("--config-file={}", d("config.xml")))
                .current_dir(&dir)
                .stdin(Stdio::null())
                .stdout(out.try_clone().expect("dup"))
                .stderr(out)
                .spawn()
                .unwrap_or_else(|e| {
                    panic!(
                        "cannot run {} (install Debian's clickhouse-server): {e}",
                        server_bin().display()
                    )
                });
            std::fs::write(dir.join("server.pid"), child.id().to_string())
                .expect("write server.pid");
            let s = Server {
                http_port,
                tcp_port: Some(tcp_port),
                https_port: Some(https_port),
                dir: dir.clone(),
                pid: child.id(),
                http: http.clone(),
            };
            let deadline = Instant::now() + Duration::from_secs(60);
            loop {
                if s.ping() {
                    return s;
                }
                if let Ok(Some(status)) = child.try_wait() {
                    let log = s.log();
                    if attempt < 4 && log.contains("already in use") {
                        break;
                    }
                    panic!("the ClickHouse test server exited ({status}):\n{log}");
                }
                if Instant::now() > deadline {
                    let _ = child.kill();
                    panic!(
                        "the ClickHouse test server did not answer /ping within 60 s:\n{}",
                        s.log()
                    );
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        unreachable!("the loop returns or panics")
    }

    /// The chdb front in a temporary folder (data in `data/`, output in
    /// `log/stdout.log`), under the same watchdog as the real server: it is
    /// stopped (SIGTERM, then SIGKILL after 15 s) and the folder removed
    /// once this process is gone.
    #[allow(clippy::zombie_processes)]
    fn start_chdb() -> Server {
        let dir = tempfile::Builder::new()
            .prefix("mooncdc-chdb-")
            .tempdir()
            .expect("temporary folder for the chdb front")
            .keep();
        let d = |p: &str| dir.join(p).display().to_string();
        let script = watchdog_script(&dir, None);
        super::spawn_watchdog(&script, "the chdb front");
        std::fs::create_dir_all(dir.join("log")).expect("create the front's folders");
        let http = reqwest::blocking::Client::builder()
            .connect_timeout(Duration::from_secs(5))
            .timeout(Duration::from_secs(120))
            .build()
            .expect("HTTP client");
        let out = std::fs::File::create(dir.join("log/stdout.log")).expect("front output file");
        let mut child = Command::new("python3")
            .arg(chdb_front())
            .args(["--dir", &d("data"), "--port-file", &d("port")])
            .args([
                "--user",
                "default:",
                "--user",
                &format!("{USER}:{PASSWORD}"),
            ])
            .current_dir(&dir)
            .stdin(Stdio::null())
            .stdout(out.try_clone().expect("dup"))
            .stderr(out)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run python3 for the chdb front: {e}"));
        std::fs::write(dir.join("server.pid"), child.id().to_string()).expect("write server.pid");
        let mut s = Server {
            http_port: 0,
            tcp_port: None,
            https_port: None,
            dir: dir.clone(),
            pid: child.id(),
            http,
        };
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Ok(Some(status)) = child.try_wait() {
                panic!(
                    "the chdb front exited ({status}; MOONCDC_CLICKHOUSE_ENGINE=chdb needs python3 with PyPI's chdb):\n{}",
                    s.log()
                );
            }
            if s.http_port == 0 {
                if let Ok(t) = std::fs::read_to_string(dir.join("port")) {
                    s.http_port = t.trim().parse().unwrap_or(0);
                }
            }
            if s.http_port != 0 && s.ping() {
                return s;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                panic!(
                    "the chdb front did not answer /ping within 60 s:\n{}",
                    s.log()
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn ping(&self) -> bool {
        matches!(
            self.http
                .get(format!("http://127.0.0.1:{}/ping", self.http_port))
                .timeout(Duration::from_secs(2))
                .send()
                .and_then(|r| r.text()),
            Ok(t) if t == "Ok.\n"
        )
    }

    /// The server's logs (for failure messages).
    pub fn log(&self) -> String {
        let mut s = String::new();
        for f in ["log/stdout.log", "log/err.log"] {
            if let Ok(t) = std::fs::read_to_string(self.dir.join(f)) {
                s.push_str(&format!("--- {f} ---\n{t}"));
            }
        }
        s
    }

    /// The CA certificate (PEM) that signed the HTTPS port's certificate.
    pub fn ca_file(&self) -> PathBuf {
        self.dir.join("ca.pem")
    }

    /// The base HTTP URL.
    pub fn http_base(&self) -> String {
        format!("http://127.0.0.1:{}/", self.http_port)
    }

    /// Run a statement over HTTP: `sql` in the URL when `body` carries data,
    /// else as the body. Returns the reply or the server's error text.
    pub fn request(
        &self,
        user: &str,
        password: &str,
        database: Option<&str>,
        sql: &str,
        body: Option<Vec<u8>>,
    ) -> Result<Vec<u8>, String> {
        let mut url = format!("{}?", self.http_base());
        if let Some(db) = database {
            url.push_str(&format!("database={}&", url_encode(db)));
        }
        let body = match body {
            Some(b) => {
                url.push_str(&format!("query={}", url_encode(sql)));
                b
            }
            None => sql.as_bytes().to_vec(),
        };
        let resp = self
            .http
            .post(url)
            .header("X-ClickHouse-User", user)
            .header("X-ClickHouse-Key", password)
            .body(body)
            .send()
            .map_err(|e| format!("HTTP request failed: {e}"))?;
        let ok = resp.status().is_success();
        let bytes = resp
            .bytes()
            .map_err(|e| format!("cannot read the reply: {e}"))?
            .to_vec();
        if ok {
            Ok(bytes)
        } else {
            Err(String::from_utf8_lossy(&bytes).into_owned())
        }
    }

    /// Run a statement as `default`; panic on error.
    #[track_caller]
    pub fn admin(&self, sql: &str) -> String {
        match self.request("default", "", None, sql, None) {
            Ok(b) => String::from_utf8_lossy(&b).into_owned(),
            Err(e) => panic!("ClickHouse statement failed: {e}\n{sql}"),
        }
    }
}

/// A test's own database.
#[derive(Debug, Clone)]
pub struct ChDb {
    pub name: String,
}

impl ChDb {
    /// The target URL the tools take: user and password percent-encoded.
    pub fn url(&self) -> String {
        format!(
            "clickhouse://{}:{}@127.0.0.1:{}/{}",
            USER,
            url_encode(PASSWORD),
            server().http_port,
            url_encode(&self.name)
        )
    }

    /// The target URL with query options (`max_insert_bytes=4096`, …).
    pub fn url_with(&self, options: &str) -> String {
        format!("{}?{options}", self.url())
    }

    /// Run a statement in this database as [`USER`].
    pub fn try_query_bytes(&self, sql: &str) -> Result<Vec<u8>, String> {
        server().request(USER, PASSWORD, Some(&self.name), sql, None)
    }

    /// Run a statement; panic on error; the reply's bytes.
    #[track_caller]
    pub fn query_bytes(&self, sql: &str) -> Vec<u8> {
        self.try_query_bytes(sql)
            .unwrap_or_else(|e| panic!("ClickHouse statement failed: {e}\n{sql}"))
    }

    /// Run a statement; panic on error; the reply as text.
    #[track_caller]
    pub fn query(&self, sql: &str) -> String {
        String::from_utf8_lossy(&self.query_bytes(sql)).into_owned()
    }

    /// Run a statement; the reply as text or the error text.
    pub fn try_query(&self, sql: &str) -> Result<String, String> {
        self.try_query_bytes(sql)
            .map(|b| String::from_utf8_lossy(&b).into_owned())
    }

    /// A `FORMAT TabSeparated` query's rows, fields split on tabs (not unescaped).
    #[track_caller]
    pub fn rows(&self, sql: &str) -> Vec<Vec<String>> {
        self.query(&format!("{sql} FORMAT TabSeparated"))
            .lines()
            .map(|l| l.split('\t').map(str::to_string).collect())
            .collect()
    }

    /// Insert data: `sql` is `INSERT … FORMAT F`, `data` its rows.
    #[track_caller]
    pub fn insert(&self, sql: &str, data: &[u8]) {
        if let Err(e) = server().request(USER, PASSWORD, Some(&self.name), sql, Some(data.to_vec()))
        {
            panic!("ClickHouse insert failed: {e}\n{sql}");
        }
    }

    /// Whether a table (or view) exists.
    pub fn exists(&self, table: &str) -> bool {
        self.query(&format!(
            "EXISTS TABLE {}.{}",
            quote_ident(&self.name),
            quote_ident(table)
        ))
        .trim()
            == "1"
    }
}

/// The watchdog's script for a server in `dir` (ClickHouse or the chdb
/// front): once this test process is gone, the server is stopped (by the
/// pid in `dir/server.pid`, else from `status`, the server's own status
/// file; SIGTERM, then SIGKILL after 15 s) and the folder removed. It is
/// killed only while its command line names the folder (a zombie, whose
/// command line is empty, counts as gone).
fn watchdog_script(dir: &Path, status: Option<&str>) -> String {
    let from_status = match status {
        Some(f) => format!(
            "[ -n \"$pid\" ] || pid=$(sed -n 's/^PID: *//p' {} 2>/dev/null); ",
            shq(f)
        ),
        None => String::new(),
    };
    format!(
        "while kill -0 {testpid} 2>/dev/null; do sleep 0.5; done; \
         pid=$(cat {pidfile} 2>/dev/null); {from_status}\
         ours() {{ tr '\\0' ' ' </proc/$pid/cmdline 2>/dev/null | grep -qF -- {dir}; }}; \
         if [ -n \"$pid\" ] && ours; then \
           kill $pid; i=0; \
           while ours && [ $i -lt 150 ]; do sleep 0.1; i=$((i+1)); done; \
           ours && kill -9 $pid; \
         fi; rm -rf {dir}",
        testpid = std::process::id(),
        pidfile = shq(&dir.join("server.pid").display().to_string()),
        dir = shq(&dir.display().to_string()),
    )
}

/// A CA (`ca.pem`) and a certificate for 127.0.0.1 signed by it
/// (`server.pem`, `server.key`) in `dir`, made with `openssl`.
fn make_certificates(dir: &Path) {
    let openssl = |args: &[&str]| {
        let out = Command::new("openssl")
            .args(args)
            .current_dir(dir)
            .output()
            .expect("openssl runs (the test server's HTTPS certificate)");
        assert!(
            out.status.success(),
            "openssl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    openssl(&[
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        "ca.key",
        "-out",
        "ca.pem",
        "-days",
        "2",
        "-subj",
        "/CN=mooncdc test CA",
    ]);
    openssl(&[
        "req",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        "server.key",
        "-out",
        "server.csr",
        "-subj",
        "/CN=127.0.0.1",
    ]);
    std::fs::write(
        dir.join("server.ext"),
        "subjectAltName=IP:127.0.0.1,DNS:localhost\n",
    )
    .expect("write server.ext");
    openssl(&[
        "x509",
        "-req",
        "-in",
        "server.csr",
        "-CA",
        "ca.pem",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-out",
        "server.pem",
        "-days",
        "2",
        "-extfile",
        "server.ext",
    ]);
}

/// The folder of the server, for messages.
pub fn server_dir() -> &'static Path {
    &server().dir
}

/// Whether python3 can import PyPI's `chdb`.
fn chdb_importable() -> bool {
    Command::new("python3")
        .args(["-c", "import chdb"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .map(|s| s.success())
        .unwrap_or(false)
}

/// Whether python3 can import PyPI's `chdb` (a modern ClickHouse engine in
/// one process); when not, says which check is skipped and why.
pub fn chdb_or_skip(test: &str, what: &str) -> bool {
    let ok = chdb_importable();
    if !ok {
        eprintln!(
            "SKIPPED {test}: python3 cannot import chdb (pip install chdb) — {what} not checked on a modern engine"
        );
    }
    ok
}
