//! A throwaway ClickHouse cluster for the cluster-target tests: one
//! ZooKeeper (Debian's `zookeeper`, started with `java`) and four
//! `clickhouse-server`s (Debian's 18.16) on 127.0.0.1, two shards of two
//! replicas, named [`CLUSTER`], every port found free by binding port 0.
//! Each node has the `shard` (`01`, `02`) and `replica` (`r1`, `r2`)
//! macros and `internal_replication` is true, the usual production layout.
//!
//! One cluster per test binary, started on first use ([`cluster`]); a
//! watchdog process stops every process it started (by pid, checked against
//! its command line naming the cluster's folder) and removes the folder once
//! the test process is gone, however it ends. Nodes and ZooKeeper can be
//! stopped and started again by the tests.
//!
//! Environment: `MOONCDC_CLICKHOUSE_SERVER` (as for the single server),
//! `MOONCDC_ZOOKEEPER_JAR` (default `/usr/share/java/zookeeper.jar`).

use super::ch::{free_port, server_bin};
use super::shq;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

/// The cluster's name in `<remote_servers>`.
pub const CLUSTER: &str = "mooncdc_test";

/// One node: its ports and folder.
#[derive(Debug, Clone)]
pub struct Node {
    pub shard: u32,
    pub replica: u32,
    pub http_port: u16,
    pub tcp_port: u16,
    pub interserver_port: u16,
    pub dir: PathBuf,
}

/// The running cluster.
#[derive(Debug)]
pub struct Cluster {
    pub dir: PathBuf,
    pub zk_port: u16,
    pub nodes: Vec<Node>,
    procs: Mutex<Procs>,
    http: reqwest::blocking::Client,
}

#[derive(Debug, Default)]
struct Procs {
    zk: Option<Child>,
    nodes: Vec<Option<Child>>,
}

static CLUSTER_: OnceLock<Cluster> = OnceLock::new();
/// Tests that stop a node or ZooKeeper must not overlap the others.
pub static SERIAL: Mutex<()> = Mutex::new(());

/// The cluster of this test binary, started on first use.
pub fn cluster() -> &'static Cluster {
    CLUSTER_.get_or_init(Cluster::start)
}

fn zk_jar() -> String {
    std::env::var("MOONCDC_ZOOKEEPER_JAR")
        .unwrap_or_else(|_| "/usr/share/java/zookeeper.jar".to_string())
}

impl Cluster {
    fn start() -> Cluster {
        super::need_server(
            "ZooKeeper",
            Path::new(&zk_jar()).exists(),
            &format!("no {}; MOONCDC_ZOOKEEPER_JAR names it", zk_jar()),
        );
        super::ch::need_server_bin();
        let _ = rustls::crypto::ring::default_provider().install_default();
        let dir = tempfile::Builder::new()
            .prefix("mooncdc-chc-")
            .tempdir()
            .expect("temporary folder for the cluster")
            .keep();
        // The watchdog: once this process is gone, every pid written in
        // `<dir>/*.pid` whose command line names the folder is stopped, then
        // the folder removed.
        let script = format!(
            "while kill -0 {testpid} 2>/dev/null; do sleep 0.5; done; \
             for f in {dir}/*.pid; do pid=$(cat \"$f\" 2>/dev/null); [ -n \"$pid\" ] || continue; \
               if tr '\\0' ' ' </proc/$pid/cmdline 2>/dev/null | grep -qF -- {dir}; then kill $pid; fi; done; \
             sleep 3; \
             for f in {dir}/*.pid; do pid=$(cat \"$f\" 2>/dev/null); [ -n \"$pid\" ] || continue; \
               if tr '\\0' ' ' </proc/$pid/cmdline 2>/dev/null | grep -qF -- {dir}; then kill -9 $pid; fi; done; \
             rm -rf {dir}",
            testpid = std::process::id(),
            dir = shq(&dir.display().to_string()),
        );
        super::spawn_watchdog(&script, "the ClickHouse cluster");
        let zk_port = free_port();
        let mut nodes = Vec::new();
        let mut used = vec![zk_port];
        let mut port = || loop {
            let p = free_port();
            if !used.contains(&p) {
                used.push(p);
                return p;
            }
        };
        for shard in 1..=2 {
            for replica in 1..=2 {
                nodes.push(Node {
                    shard,
                    replica,
                    http_port: port(),
                    tcp_port: port(),
                    interserver_port: port(),
                    dir: dir.join(format!("node{shard}{replica}")),
                });
            }
        }
        let http = reqwest::blocking::Client::builder()
            .connect_timeout(Duration::from_secs(5))
            .timeout(Duration::from_secs(120))
            .build()
            .expect("HTTP client");
        let c = Cluster {
            dir: dir.clone(),
            zk_port,
            procs: Mutex::new(Procs {
                zk: None,
                nodes: (0..nodes.len()).map(|_| None).collect(),
            }),
            nodes,
            http,
        };
        let zk = dir.join("zk");
        std::fs::create_dir_all(zk.join("data")).unwrap();
        std::fs::write(
            zk.join("zoo.cfg"),
            format!(
                "tickTime=500\ninitLimit=10\nsyncLimit=5\ndataDir={}\nclientPort={zk_port}\n\
                 clientPortAddress=127.0.0.1\nadmin.enableServer=false\n4lw.commands.whitelist=ruok,srvr\n",
                zk.join("data").display()
            ),
        )
        .unwrap();
        std::fs::write(
            dir.join("users.xml"),
            "<yandex><profiles><default><log_queries>1</log_queries></default></profiles><users><default><password></password>\
             <networks><ip>127.0.0.1</ip></networks><profile>default</profile><quota>default</quota>\
             </default></users><quotas><default></default></quotas></yandex>\n",
        )
        .unwrap();
        let replicas = |s: u32| -> String {
            c.nodes
                .iter()
                .filter(|n| n.shard == s)
                .map(|n| {
                    format!(
                        "<replica><host>127.0.0.1</host><port>{}</port></replica>",
                        n.tcp_port
                    )
                })
                .collect()
        };
        let remote = format!(
            "<remote_servers><{CLUSTER}>\
             <shard><internal_replication>true</internal_replication>{}</shard>\
             <shard><internal_replication>true</internal_replication>{}</shard>\
             </{CLUSTER}></remote_servers>",
            replicas(1),
            replicas(2)
        );
        for n in &c.nodes {
            for sub in ["data", "tmp", "log"] {
                std::fs::create_dir_all(n.dir.join(sub)).unwrap();
            }
            let d = |p: &str| n.dir.join(p).display().to_string();
            std::fs::write(
                n.dir.join("config.xml"),
                format!(
                    "<yandex>\n\
                     <logger><level>warning</level><log>{log}</log><errorlog>{err}</errorlog><console>0</console></logger>\n\
                     <http_port>{}</http_port><tcp_port>{}</tcp_port>\n\
                     <interserver_http_port>{}</interserver_http_port><interserver_http_host>127.0.0.1</interserver_http_host>\n\
                     <listen_host>127.0.0.1</listen_host>\n\
                     <path>{data}/</path><tmp_path>{tmp}/</tmp_path>\n\
                     <users_config>{users}</users_config>\n\
                     <default_profile>default</default_profile><default_database>default</default_database>\n\
                     <mark_cache_size>5368709</mark_cache_size>\n\
                     {remote}\n\
                     <zookeeper><node><host>127.0.0.1</host><port>{zk_port}</port></node><session_timeout_ms>6000</session_timeout_ms></zookeeper>\n\
                     <macros><shard>0{}</shard><replica>r{}</replica></macros>\n\
                     <distributed_ddl><path>/clickhouse/task_queue/ddl</path></distributed_ddl>\n\
                     <query_log><database>system</database><table>query_log</table><flush_interval_milliseconds>1000</flush_interval_milliseconds></query_log>\n\
                     </yandex>\n",
                    n.http_port,
                    n.tcp_port,
                    n.interserver_port,
                    n.shard,
                    n.replica,
                    log = d("log/server.log"),
                    err = d("log/err.log"),
                    data = d("data"),
                    tmp = d("tmp"),
                    users = dir.join("users.xml").display(),
                ),
            )
            .unwrap();
        }
        c.start_zookeeper();
        for i in 0..c.nodes.len() {
            c.start_node(i);
        }
        c
    }

    /// Start (again) ZooKeeper, and wait until it answers.
    pub fn start_zookeeper(&self) {
        let zk = self.dir.join("zk");
        let out = std::fs::File::create(zk.join("out.log")).unwrap();
        let child = Command::new("java")
            .args(["-Xmx256m", "-cp", &zk_jar()])
            .arg("org.apache.zookeeper.server.quorum.QuorumPeerMain")
            .arg(zk.join("zoo.cfg"))
            .stdin(Stdio::null())
            .stdout(out.try_clone().unwrap())
            .stderr(out)
            .spawn()
            .unwrap_or_else(|e| {
                panic!("cannot run java for ZooKeeper (install Debian's zookeeper): {e}")
            });
        std::fs::write(self.dir.join("zk.pid"), child.id().to_string()).unwrap();
        self.procs.lock().unwrap().zk = Some(child);
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", self.zk_port)) {
                let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
                let mut reply = String::new();
                // `srvr` names the mode only once the server takes sessions
                // (`ruok` answers before that, and a node whose handshake
                // fails then can crash on its next DDL).
                if s.write_all(b"srvr").is_ok()
                    && s.read_to_string(&mut reply).is_ok()
                    && reply.contains("Mode: standalone")
                {
                    return;
                }
            }
            assert!(
                Instant::now() < deadline,
                "ZooKeeper did not answer within 60 s:\n{}",
                std::fs::read_to_string(zk.join("out.log")).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Stop ZooKeeper (SIGTERM, then wait for it to exit).
    pub fn stop_zookeeper(&self) {
        let child = self.procs.lock().unwrap().zk.take();
        if let Some(c) = child {
            stop(c);
        }
    }

    /// Start (again) node `i`, and wait until it answers.
    pub fn start_node(&self, i: usize) {
        let n = &self.nodes[i];
        let out = std::fs::File::create(n.dir.join("log/stdout.log")).unwrap();
        let child = Command::new(server_bin())
            .arg(format!(
                "--config-file={}",
                n.dir.join("config.xml").display()
            ))
            .current_dir(&n.dir)
            .stdin(Stdio::null())
            .stdout(out.try_clone().unwrap())
            .stderr(out)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run {}: {e}", server_bin().display()));
        std::fs::write(
            self.dir.join(format!("node{i}.pid")),
            child.id().to_string(),
        )
        .unwrap();
        self.procs.lock().unwrap().nodes[i] = Some(child);
        let deadline = Instant::now() + Duration::from_secs(60);
        while !self.ping(i) {
            assert!(
                Instant::now() < deadline,
                "ClickHouse node {i} did not answer within 60 s:\n{}",
                self.log(i)
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Stop node `i` (SIGTERM, then wait for it to exit).
    pub fn stop_node(&self, i: usize) {
        let child = self.procs.lock().unwrap().nodes[i].take();
        if let Some(c) = child {
            stop(c);
        }
    }

    /// Kill node `i` (SIGKILL, as a crash or a power cut: its ZooKeeper
    /// session, and its replicas' `is_active` marks, outlive it until the
    /// session times out).
    pub fn kill_node(&self, i: usize) {
        let child = self.procs.lock().unwrap().nodes[i].take();
        if let Some(mut c) = child {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    fn ping(&self, i: usize) -> bool {
        matches!(
            self.http
                .get(format!("http://127.0.0.1:{}/ping", self.nodes[i].http_port))
                .timeout(Duration::from_secs(2))
                .send()
                .and_then(|r| r.text()),
            Ok(t) if t == "Ok.\n"
        )
    }

    /// A node's logs (for failure messages).
    pub fn log(&self, i: usize) -> String {
        let mut s = String::new();
        for f in ["log/stdout.log", "log/err.log"] {
            if let Ok(t) = std::fs::read_to_string(self.nodes[i].dir.join(f)) {
                let tail: Vec<&str> = t.lines().rev().take(40).collect();
                s.push_str(&format!("--- node {i} {f} ---\n"));
                for l in tail.into_iter().rev() {
                    s.push_str(l);
                    s.push('\n');
                }
            }
        }
        s
    }

    /// Run a statement on node `i`: the reply, or the server's error.
    pub fn try_query(&self, i: usize, sql: &str) -> Result<String, String> {
        let resp = self
            .http
            .post(format!("http://127.0.0.1:{}/", self.nodes[i].http_port))
            .body(sql.to_string())
            .send()
            .map_err(|e| format!("HTTP request failed: {e}"))?;
        let ok = resp.status().is_success();
        let t = resp
            .text()
            .map_err(|e| format!("cannot read the reply: {e}"))?;
        if ok {
            Ok(t)
        } else {
            Err(t)
        }
    }

    /// Run a statement on node `i`; panic on error.
    #[track_caller]
    pub fn query(&self, i: usize, sql: &str) -> String {
        self.try_query(i, sql)
            .unwrap_or_else(|e| panic!("statement on node {i} failed: {e}\n{sql}\n{}", self.log(i)))
    }

    /// A new database on every node; the target URL through node 0.
    pub fn database(&self, name: &str) -> String {
        self.query(0, &format!("CREATE DATABASE {name} ON CLUSTER {CLUSTER}"));
        self.url(0, name, "")
    }

    /// A cluster target URL through node `i`, with extra options.
    pub fn url(&self, i: usize, db: &str, options: &str) -> String {
        format!(
            "clickhouse://default@127.0.0.1:{}/{db}?cluster={CLUSTER}{}",
            self.nodes[i].http_port,
            if options.is_empty() {
                String::new()
            } else {
                format!("&{options}")
            }
        )
    }

    /// The folder of the cluster's files.
    pub fn path(&self) -> &Path {
        &self.dir
    }
}

/// SIGTERM, then wait (SIGKILL after 30 s).
fn stop(mut c: Child) {
    let _ = Command::new("kill").arg(c.id().to_string()).status();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Ok(Some(_)) = c.try_wait() {
            return;
        }
        if Instant::now() > deadline {
            let _ = c.kill();
            let _ = c.wait();
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}
