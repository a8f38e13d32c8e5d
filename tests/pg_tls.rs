//! TLS to PostgreSQL for every `sslmode`, against a throwaway server whose
//! certificate is signed by a CA made in the test (openssl), through the
//! real binaries: the SQL connections (`capture init`, `status`, audit) and
//! the replication connection (`capture read`, snapshots) alike
//! (docs/POSTGRES.md "TLS"). Whether a connection used TLS is read from the
//! server's own log (`log_connections`), never assumed.

mod common;

use common::pg::{self, PgDb};
use common::sqlite::expect;
use common::Run;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

/// Test certificates: a CA, the server's (for `localhost` only, so
/// `127.0.0.1` is a host name mismatch), and a CA nobody used.
struct Pki {
    dir: tempfile::TempDir,
}

impl Pki {
    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }
}

fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("openssl runs");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn make_ca(dir: &Path, name: &str) {
    openssl(
        dir,
        &[
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-days",
            "3",
            "-subj",
            &format!("/CN=MoonCDC test {name}"),
            "-addext",
            "basicConstraints=critical,CA:TRUE",
            "-addext",
            "keyUsage=critical,keyCertSign,cRLSign",
            "-keyout",
            &format!("{name}.key"),
            "-out",
            &format!("{name}.crt"),
        ],
    );
}

/// The cluster of this binary, with TLS on (started once).
fn tls_db(name: &str) -> (&'static Pki, PgDb) {
    static PKI: OnceLock<Pki> = OnceLock::new();
    let pki = PKI.get_or_init(|| {
        let pki = Pki {
            dir: tempfile::tempdir().expect("temporary folder"),
        };
        let d = pki.dir.path();
        make_ca(d, "ca");
        make_ca(d, "other-ca");
        std::fs::write(
            d.join("server.ext"),
            "subjectAltName=DNS:localhost\nbasicConstraints=CA:FALSE\n\
             keyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth\n",
        )
        .unwrap();
        openssl(
            d,
            &[
                "req",
                "-newkey",
                "ec",
                "-pkeyopt",
                "ec_paramgen_curve:prime256v1",
                "-nodes",
                "-subj",
                "/CN=localhost",
                "-keyout",
                "server.key",
                "-out",
                "server.csr",
            ],
        );
        openssl(
            d,
            &[
                "x509",
                "-req",
                "-in",
                "server.csr",
                "-CA",
                "ca.crt",
                "-CAkey",
                "ca.key",
                "-CAcreateserial",
                "-days",
                "3",
                "-extfile",
                "server.ext",
                "-out",
                "server.crt",
            ],
        );
        pg::cluster().enable_tls(&d.join("server.crt"), &d.join("server.key"));
        pki
    });
    (pki, pg::db(name))
}

/// A tool run with the password, the application name and the TLS settings
/// from the environment only as given (nothing inherited).
fn run(tool: &str, args: &[&str], app: &str, env: &[(&str, &str)]) -> Run {
    let mut cmd = assert_cmd::Command::new(common::sqlite::bin(tool));
    cmd.args(args)
        .env("PGPASSWORD", pg::PASSWORD)
        .env("PGAPPNAME", app)
        .env_remove("PGSSLMODE")
        .env_remove("PGSSLROOTCERT")
        .env_remove("PGHOST")
        .timeout(Duration::from_secs(60));
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("run the tool");
    Run {
        code: out.status.code(),
        stdout: out.stdout,
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// The server log's connection lines for this application name: how many
/// there are, and how many of them used TLS.
fn connections(app: &str) -> (usize, usize) {
    let log = pg::cluster().log();
    let lines: Vec<&str> = log
        .lines()
        .filter(|l| {
            l.contains("connection authorized") && l.contains(&format!("application_name={app}"))
        })
        .collect();
    let tls = lines.iter().filter(|l| l.contains("SSL enabled")).count();
    (lines.len(), tls)
}

fn url(db: &PgDb, host: &str, query: &str) -> String {
    format!(
        "postgres://{}@{host}:{}/{}{query}",
        pg::ROLE,
        db.cluster.port,
        db.dbname
    )
}

/// Environment variables for one run.
type Env<'a> = Vec<(&'a str, &'a str)>;

#[test]
fn every_sslmode_against_a_server_with_tls() {
    let (pki, db) = tls_db("tls_modes");
    db.exec("CREATE TABLE a (id int PRIMARY KEY, v text)");
    db.exec("INSERT INTO a VALUES (1, 'one')");
    let ca = pki.path("ca.crt").display().to_string();
    let other = pki.path("other-ca.crt").display().to_string();
    let status = |u: &str, app: &str, env: &[(&str, &str)]| {
        run(
            "mooncdc-capture",
            &["status", "--source", u, "--slot", "s_tls"],
            app,
            env,
        )
    };
    let init = run(
        "mooncdc-capture",
        &[
            "init",
            "--source",
            &url(
                &db,
                "localhost",
                &format!("?sslmode=verify-full&sslrootcert={ca}"),
            ),
            "--slot",
            "s_tls",
            "--table",
            "public.a",
        ],
        "tls_init",
        &[],
    );
    expect(&init, 0, "capture init over verify-full");
    assert_eq!(
        connections("tls_init").0,
        connections("tls_init").1,
        "a plaintext connection"
    );

    // Each mode that must connect, and whether it must be encrypted.
    let cases: Vec<(&str, String, Env, bool)> = vec![
        (
            "tls_disable",
            url(&db, "127.0.0.1", "?sslmode=disable"),
            vec![],
            false,
        ),
        (
            "tls_loopback_default",
            url(&db, "127.0.0.1", ""),
            vec![],
            false,
        ),
        (
            "tls_require",
            url(&db, "127.0.0.1", "?sslmode=require"),
            vec![],
            true,
        ),
        (
            "tls_require_env",
            url(&db, "127.0.0.1", ""),
            vec![("PGSSLMODE", "require")],
            true,
        ),
        (
            "tls_verify_ca",
            url(
                &db,
                "127.0.0.1",
                &format!("?sslmode=verify-ca&sslrootcert={ca}"),
            ),
            vec![],
            true,
        ),
        (
            "tls_verify_full",
            url(
                &db,
                "localhost",
                &format!("?sslmode=verify-full&sslrootcert={ca}"),
            ),
            vec![],
            true,
        ),
        (
            "tls_verify_full_env",
            url(&db, "localhost", ""),
            vec![("PGSSLMODE", "verify-full"), ("PGSSLROOTCERT", &ca)],
            true,
        ),
    ];
    for (app, u, env, encrypted) in &cases {
        let r = status(u, app, env);
        expect(&r, 0, &format!("status, {app}"));
        let (n, tls) = connections(app);
        assert!(n > 0, "{app}: no connection logged");
        assert_eq!(
            tls,
            if *encrypted { n } else { 0 },
            "{app}: {n} connections, {tls} with TLS"
        );
    }

    // Each mode that must refuse, with the reason in words, exit 1.
    let refusals: Vec<(&str, String, Env, &str)> = vec![
        (
            "tls_wrong_ca",
            url(
                &db,
                "localhost",
                &format!("?sslmode=verify-ca&sslrootcert={other}"),
            ),
            vec![],
            "sslrootcert=",
        ),
        (
            "tls_wrong_ca_full",
            url(
                &db,
                "localhost",
                &format!("?sslmode=verify-full&sslrootcert={other}"),
            ),
            vec![],
            "sslrootcert=",
        ),
        // Signed by a CA the Mozilla bundle does not know.
        (
            "tls_no_root",
            url(&db, "localhost", "?sslmode=verify-ca"),
            vec![],
            "sslrootcert=",
        ),
        // The certificate names localhost, not 127.0.0.1.
        (
            "tls_wrong_name",
            url(
                &db,
                "127.0.0.1",
                &format!("?sslmode=verify-full&sslrootcert={ca}"),
            ),
            vec![],
            "verify-ca",
        ),
        (
            "tls_wrong_name_env",
            url(&db, "127.0.0.1", ""),
            vec![("PGSSLMODE", "verify-full"), ("PGSSLROOTCERT", &ca)],
            "verify-ca",
        ),
    ];
    for (app, u, env, word) in &refusals {
        let r = status(u, app, env);
        expect(&r, 1, &format!("status, {app}"));
        assert!(
            r.stderr.contains(word) && r.stderr.contains("TLS"),
            "{app}: {}",
            r.stderr
        );
        assert!(
            !r.stderr.contains("os error") && !r.stderr.contains("Error {"),
            "{app}: {}",
            r.stderr
        );
        assert_eq!(
            connections(app).0,
            0,
            "{app}: the server authorized a session"
        );
    }
}

/// The replication connection (snapshot's exported snapshot, `capture
/// read`) takes the same TLS as the SQL one, and the data arrives whole.
#[test]
fn snapshot_and_capture_over_verify_full() {
    let (pki, db) = tls_db("tls_stream");
    db.exec("CREATE TABLE b (id int PRIMARY KEY, v text)");
    let ca = pki.path("ca.crt").display().to_string();
    let u = url(&db, "localhost", "");
    let env = [("PGSSLMODE", "verify-full"), ("PGSSLROOTCERT", ca.as_str())];
    let r = run(
        "mooncdc-capture",
        &[
            "init", "--source", &u, "--slot", "s_tls2", "--table", "public.b",
        ],
        "tls_stream",
        &env,
    );
    expect(&r, 0, "init");
    db.exec("INSERT INTO b SELECT g, 'v' || g FROM generate_series(1, 100) g");
    let dir = tempfile::tempdir().unwrap();
    let snap = dir.path().join("snap.jsonl");
    let r = run(
        "mooncdc-snapshot",
        &[
            "--source",
            &u,
            "--slot",
            "s_tls2",
            "-o",
            snap.to_str().unwrap(),
        ],
        "tls_stream",
        &env,
    );
    expect(&r, 0, "snapshot");
    db.exec("INSERT INTO b SELECT g, 'w' || g FROM generate_series(101, 150) g");
    let proj = dir.path().join("proj.db");
    let target = format!("sqlite:{}", proj.display());
    let applied = run(
        "mooncdc-apply",
        &["--target", &target, snap.to_str().unwrap()],
        "tls_stream",
        &[],
    );
    expect(&applied, 0, "apply the snapshot");
    let cursor = run(
        "mooncdc-apply",
        &["cursor", "--target", &target],
        "tls_stream",
        &[],
    );
    let cursor = String::from_utf8_lossy(&cursor.stdout).trim().to_string();
    let r = run(
        "mooncdc-capture",
        &[
            "read", "--source", &u, "--slot", "s_tls2", "--after", &cursor,
        ],
        "tls_stream",
        &env,
    );
    expect(&r, 0, "capture read");
    let batches = dir.path().join("b.jsonl");
    std::fs::write(&batches, &r.stdout).unwrap();
    expect(
        &run(
            "mooncdc-apply",
            &["--target", &target, batches.to_str().unwrap()],
            "tls_stream",
            &[],
        ),
        0,
        "apply the batches",
    );
    let r = run(
        "mooncdc-audit",
        &["--source", &u, "--slot", "s_tls2", "--target", &target],
        "tls_stream",
        &env,
    );
    expect(&r, 0, "audit");
    // The replication connection refuses a wrong name the same way.
    let wrong = url(&db, "127.0.0.1", "");
    let r = run(
        "mooncdc-capture",
        &[
            "read", "--source", &wrong, "--slot", "s_tls2", "--after", &cursor,
        ],
        "tls_stream_wrong",
        &env,
    );
    expect(
        &r,
        1,
        "capture read to a host the certificate does not name",
    );
    assert!(
        r.stderr.contains("does not name host") && r.stderr.contains("verify-ca"),
        "{}",
        r.stderr
    );
    let (n, tls) = connections("tls_stream");
    assert!(n >= 5, "expected SQL and replication connections, saw {n}");
    assert_eq!(tls, n, "{n} connections, only {tls} with TLS");
    let log = pg::cluster().log();
    assert!(
        log.lines()
            .any(|l| l.contains("replication connection authorized") && l.contains("SSL enabled")),
        "no replication connection with TLS in the log"
    );
}
