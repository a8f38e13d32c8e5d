//! Connection strings read as libpq reads them.

use super::*;

/// Parse with an environment of exactly `vars` (the process's is never read).
fn parse_in(s: &str, vars: &[(&str, &str)]) -> Result<PgConn> {
    let lookup = |k: &str| {
        vars.iter()
            .find(|(n, _)| *n == k)
            .map(|(_, v)| v.to_string())
    };
    PgConn::parse_with_env(s, &lookup)
}

fn parse(s: &str) -> Result<PgConn> {
    parse_in(s, &[])
}

#[test]
fn every_listed_key_is_taken() {
    for k in KEYS {
        let v = match *k {
            "port" | "connect_timeout" | "keepalives_idle" => "5",
            "sslmode" => "disable",
            "service" => continue, // needs a service file: tested below
            _ => "x",
        };
        if let Err(e) = parse(&format!("{k}={v} dbname=d")) {
            assert!(
                !e.message().contains("unknown PostgreSQL connection option"),
                "{k}: {}",
                e.message()
            );
        }
    }
    assert!(parse("colour=blue dbname=d")
        .unwrap_err()
        .message()
        .contains("unknown PostgreSQL connection option"));
}

#[test]
fn libpq_environment_and_service_file_in_libpqs_order() {
    let c = parse_in(
        "dbname=x",
        &[
            ("PGAPPNAME", "nightly-load"),
            ("PGCONNECT_TIMEOUT", "4"),
            ("PGHOST", "name.example"),
            ("PGHOSTADDR", "10.0.0.5"),
        ],
    )
    .unwrap();
    assert_eq!(c.application_name, "nightly-load");
    assert_eq!(c.connect_timeout, Duration::from_secs(4));
    // The address to connect to; the name still names the server.
    assert_eq!(
        (c.host.as_str(), c.hostaddr.as_deref()),
        ("name.example", Some("10.0.0.5"))
    );
    let c = parse_in("hostaddr=10.0.0.6 dbname=x", &[]).unwrap();
    assert_eq!(
        (c.host.as_str(), c.hostaddr.as_deref()),
        ("10.0.0.6", Some("10.0.0.6"))
    );
    assert!(parse_in("hostaddr=db.example dbname=x", &[]).is_err());
    // 0 is "wait forever", as libpq's.
    let c = parse_in("dbname=x", &[("PGCONNECT_TIMEOUT", "0")]).unwrap();
    assert!(c.connect_timeout > Duration::from_secs(86_400));
    // The string wins over the environment.
    let c = parse_in(
        "dbname=x application_name=mine connect_timeout=2",
        &[("PGAPPNAME", "env"), ("PGCONNECT_TIMEOUT", "9")],
    )
    .unwrap();
    assert_eq!(
        (c.application_name.as_str(), c.connect_timeout),
        ("mine", Duration::from_secs(2))
    );
    // A service: its settings under the string's, over the environment's.
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("services.conf");
    std::fs::write(
        &file,
        "[shop]\nhost=svc.example\nport=6543\ndbname=shop\nuser=svcuser\n[other]\nhost=no\n",
    )
    .unwrap();
    let f = file.to_str().unwrap();
    let env = [
        ("PGSERVICEFILE", f),
        ("PGHOST", "env.example"),
        ("PGUSER", "envuser"),
    ];
    let c = parse_in("service=shop user=mine", &env).unwrap();
    assert_eq!(
        (c.host.as_str(), c.port, c.dbname.as_str(), c.user.as_str()),
        ("svc.example", 6543, "shop", "mine")
    );
    let mut with_pgservice = env.to_vec();
    with_pgservice.push(("PGSERVICE", "shop"));
    let c = parse_in("postgres:///?sslmode=disable", &with_pgservice).unwrap();
    assert_eq!(
        (c.host.as_str(), c.dbname.as_str(), c.user.as_str()),
        ("svc.example", "shop", "svcuser")
    );
    let e = parse_in("service=nope", &env).unwrap_err().to_string();
    assert!(
        e.contains("definition of service \"nope\" not found"),
        "{e}"
    );
    // The system's file, when the user's does not name the service.
    let sys = dir.path().join("sys");
    std::fs::create_dir(&sys).unwrap();
    std::fs::write(
        sys.join("pg_service.conf"),
        "[central]\nhost=central.example\n",
    )
    .unwrap();
    let c = parse_in(
        "service=central dbname=d",
        &[
            ("PGSERVICEFILE", f),
            ("PGSYSCONFDIR", sys.to_str().unwrap()),
        ],
    )
    .unwrap();
    assert_eq!(c.host, "central.example");
}

#[test]
fn multi_host_strings_as_libpq_takes_them() {
    let c =
        parse("postgres://u@h1:5433,h2:5434,[::1]:5435/d?target_session_attrs=read-write").unwrap();
    assert_eq!(
        c.hosts,
        vec![
            ("h1".into(), 5433),
            ("h2".into(), 5434),
            ("::1".into(), 5435)
        ]
    );
    assert_eq!((c.host.as_str(), c.port), ("h1", 5433));
    assert_eq!(c.session_attrs, SessionAttrs::ReadWrite);
    assert_eq!(c.display(), "postgres://u@h1:5433,h2:5434,::1:5435/d");
    let order: Vec<(String, u16)> = c
        .candidates()
        .iter()
        .map(|c| (c.host.clone(), c.port))
        .collect();
    assert_eq!(order, c.hosts, "in order without load balancing");
    // One port for every host, or one each; a host without a port.
    let k = parse("host=a,b port=6000 user=u dbname=d target_session_attrs=standby").unwrap();
    assert_eq!(k.hosts, vec![("a".into(), 6000), ("b".into(), 6000)]);
    assert_eq!(k.session_attrs, SessionAttrs::Standby);
    let k = parse("postgres://u@a,b:7000/d").unwrap();
    assert_eq!(k.hosts, vec![("a".into(), 5432), ("b".into(), 7000)]);
    assert!(parse("host=a,b,c port=1,2 user=u dbname=d").is_err());
    assert!(parse("host=a user=u dbname=d target_session_attrs=writer").is_err());
    assert!(parse("host=a,b hostaddr=10.0.0.1 user=u dbname=d").is_err());
    let lb = parse("postgres://u@a,b,c,d,e,f/d?load_balance_hosts=random").unwrap();
    assert!(lb.load_balance);
    // One order for every session of a process, each host once.
    let first: Vec<String> = lb.candidates().iter().map(|c| c.host.clone()).collect();
    for _ in 0..10 {
        let v: Vec<String> = lb.candidates().iter().map(|c| c.host.clone()).collect();
        assert_eq!(v, first, "one process, one order");
    }
    let mut sorted = first.clone();
    sorted.sort();
    assert_eq!(sorted, ["a", "b", "c", "d", "e", "f"], "each host once");
    // Another process (another seed), most likely another order.
    let mut seen = std::collections::BTreeSet::new();
    for seed in 0..50u64 {
        let mut v = super::balanced_order(6, seed.wrapping_mul(0x9e37_79b9_7f4a_7c15));
        seen.insert(v.clone());
        v.sort();
        assert_eq!(v, [0, 1, 2, 3, 4, 5], "each host once");
    }
    assert!(seen.len() > 10, "orders vary across processes");
    // TLS by default unless every host is on this machine.
    assert_eq!(
        parse("postgres://u@localhost,127.0.0.1/d").unwrap().sslmode,
        SslMode::Disable
    );
    assert_eq!(
        parse("postgres://u@localhost,db.example/d")
            .unwrap()
            .sslmode,
        SslMode::VerifyFull
    );
    assert!(parse("postgres://u@a/d?load_balance_hosts=sometimes").is_err());
}

#[test]
fn session_attributes_accept_the_servers_they_name() {
    use SessionAttrs::*;
    // (in recovery, read only by default)
    let primary = (false, false);
    let standby = (true, true);
    let read_only_primary = (false, true);
    for (a, accepts) in [
        (Any, [true, true, true]),
        (ReadWrite, [true, false, false]),
        (ReadOnly, [false, true, true]),
        (Primary, [true, false, true]),
        (Standby, [false, true, false]),
    ] {
        let got = [primary, standby, read_only_primary].map(|(r, o)| a.accepts(r, o));
        assert_eq!(got, accepts, "{a:?}");
    }
}

#[test]
fn parses_url_and_key_values() {
    let c =
        parse("postgres://app:s%40cret@db.example:6543/shop?sslmode=verify-ca&connect_timeout=3")
            .unwrap();
    assert_eq!(
        (c.host.as_str(), c.port, c.user.as_str(), c.dbname.as_str()),
        ("db.example", 6543, "app", "shop")
    );
    assert_eq!(c.password.as_deref(), Some("s@cret"));
    assert_eq!(c.sslmode, SslMode::VerifyCa);
    assert_eq!(c.connect_timeout, Duration::from_secs(3));
    assert!(!format!("{c:?}").contains("cret"));
    let k = parse("host=127.0.0.1 port=5433 user=u password='a b\\'c' dbname=d").unwrap();
    assert_eq!(k.password.as_deref(), Some("a b'c"));
    assert_eq!(
        k.sslmode,
        SslMode::Disable,
        "loopback defaults to plaintext"
    );
    assert_eq!(
        k.connect_timeout,
        Duration::from_secs(10),
        "default connect_timeout"
    );
    let r = parse("host=db.example user=u dbname=d").unwrap();
    assert_eq!(
        r.sslmode,
        SslMode::VerifyFull,
        "remote defaults to verify-full"
    );
    assert!(parse("host=x sslmode=prefer").is_err());
    assert!(parse("host=x bogus=1").is_err());
    let v6 = parse("postgresql://u@[::1]:5000/d").unwrap();
    assert_eq!((v6.host.as_str(), v6.port), ("::1", 5000));
}

#[test]
fn pgsslmode_applies_when_the_string_has_no_sslmode() {
    let loopback = "postgres://u@127.0.0.1:5432/d";
    let remote = "postgres://u@db.example:5432/d";
    for (value, mode) in [
        ("disable", SslMode::Disable),
        ("require", SslMode::Require),
        ("verify-ca", SslMode::VerifyCa),
        ("verify-full", SslMode::VerifyFull),
    ] {
        for url in [loopback, remote, "host=/run/postgresql user=u dbname=d"] {
            let c = parse_in(url, &[("PGSSLMODE", value)]).unwrap();
            assert_eq!(c.sslmode, mode, "PGSSLMODE={value} for {url}");
        }
    }
    // PGSSLMODE=require on loopback: the case that used to connect in plaintext.
    let c = parse_in(loopback, &[("PGSSLMODE", "require")]).unwrap();
    assert_eq!(c.sslmode, SslMode::Require);
}

#[test]
fn sslmode_in_the_string_wins_over_pgsslmode() {
    for (url, mode) in [
        ("postgres://u@127.0.0.1/d?sslmode=disable", SslMode::Disable),
        (
            "postgres://u@db.example/d?sslmode=require",
            SslMode::Require,
        ),
        (
            "host=db.example dbname=d sslmode=verify-ca",
            SslMode::VerifyCa,
        ),
        (
            "host=127.0.0.1 dbname=d sslmode=verify-full",
            SslMode::VerifyFull,
        ),
    ] {
        for env in [
            "disable",
            "require",
            "verify-ca",
            "verify-full",
            "prefer",
            "nonsense",
        ] {
            let c = parse_in(url, &[("PGSSLMODE", env)]).unwrap();
            assert_eq!(c.sslmode, mode, "{url} with PGSSLMODE={env}");
        }
    }
    // prefer/allow in the string stay refused, whatever the environment says.
    let e = parse_in(
        "host=x dbname=d sslmode=prefer",
        &[("PGSSLMODE", "require")],
    )
    .unwrap_err();
    assert_eq!(e.kind(), crate::error::ErrorKind::Usage);
}

#[test]
fn pgsslmode_prefer_allow_or_empty_leave_the_default() {
    for env in [
        &[("PGSSLMODE", "prefer")][..],
        &[("PGSSLMODE", "allow")],
        &[("PGSSLMODE", "")],
        &[],
    ] {
        let l = parse_in("postgres://u@localhost/d", env).unwrap();
        assert_eq!(l.sslmode, SslMode::Disable, "loopback with {env:?}");
        let r = parse_in("postgres://u@db.example/d", env).unwrap();
        assert_eq!(r.sslmode, SslMode::VerifyFull, "remote with {env:?}");
    }
}

#[test]
fn an_unknown_pgsslmode_is_a_usage_error_naming_it() {
    for v in ["Require", "on", "verify_full"] {
        let e = parse_in("postgres://u@db.example/d", &[("PGSSLMODE", v)]).unwrap_err();
        assert_eq!(e.kind(), crate::error::ErrorKind::Usage);
        assert!(e.message().contains("PGSSLMODE"), "{}", e.message());
        assert!(e.message().contains(v), "{}", e.message());
    }
}

#[test]
fn pgsslrootcert_applies_when_the_string_has_no_sslrootcert() {
    let env = [
        ("PGSSLROOTCERT", "/env/root.pem"),
        ("PGSSLMODE", "verify-ca"),
    ];
    let c = parse_in("postgres://u@db.example/d", &env).unwrap();
    assert_eq!(c.sslrootcert, Some(PathBuf::from("/env/root.pem")));
    assert_eq!(c.sslmode, SslMode::VerifyCa);
    let c = parse_in("postgres://u@db.example/d?sslrootcert=/url/root.pem", &env).unwrap();
    assert_eq!(c.sslrootcert, Some(PathBuf::from("/url/root.pem")));
    let c = parse_in("postgres://u@db.example/d", &[]).unwrap();
    assert_eq!(c.sslrootcert, None);
}

#[test]
fn each_host_takes_its_own_password_from_the_password_file() {
    let dir = std::env::temp_dir().join(format!("mooncdc-pgpass-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("pgpass");
    std::fs::write(&file, "h1:5432:d:u:one\nh2:5433:d:u:two\n").unwrap();
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
    }
    let env = [("PGPASSFILE", file.to_str().unwrap())];
    let c = parse_in("postgres://u@h1:5432,h2:5433,h3:5434/d", &env).unwrap();
    let got: Vec<Option<String>> = c.candidates().iter().map(|c| c.password.clone()).collect();
    assert_eq!(got, [Some("one".into()), Some("two".into()), None]);
    // A password given in the string is every host's.
    let c = parse_in("postgres://u:pw@h1:5432,h2:5433/d", &env).unwrap();
    let got: Vec<Option<String>> = c.candidates().iter().map(|c| c.password.clone()).collect();
    assert_eq!(got, [Some("pw".into()), Some("pw".into())]);
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn the_environment_fills_what_the_string_leaves_out() {
    let env = [
        ("PGHOST", "envhost"),
        ("PGPORT", "6000"),
        ("PGUSER", "envuser"),
        ("PGPASSWORD", "envpw"),
        ("PGDATABASE", "envdb"),
    ];
    let c = parse_in("postgres://", &env).unwrap();
    assert_eq!(
        (c.host.as_str(), c.port, c.user.as_str(), c.dbname.as_str()),
        ("envhost", 6000, "envuser", "envdb")
    );
    assert_eq!(c.password.as_deref(), Some("envpw"));
    let c = parse_in("postgres://u@h:1/d", &env).unwrap();
    assert_eq!(
        (c.host.as_str(), c.port, c.user.as_str(), c.dbname.as_str()),
        ("h", 1, "u", "d")
    );
}
