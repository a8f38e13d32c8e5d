//! A cluster target (`cluster=NAME`, docs/CLICKHOUSE.md "Cluster"): what
//! the server must have, and every shard answering before a batch's
//! inserts.

use super::*;

/// A cluster target, read from the server's `system.clusters`.
#[derive(Debug, Clone)]
pub(crate) struct Cluster {
    pub(super) name: String,
    /// Replicas of each shard acknowledging an insert.
    pub(super) quorum: u64,
    /// Every replica: (shard number, host, native port), as
    /// `system.clusters` lists them.
    pub(super) replicas: Vec<(u32, String, u16)>,
    /// When every shard last had a quorum of replicas answering.
    pub(super) checked: std::cell::Cell<Option<std::time::Instant>>,
}

impl ClickHouse {
    /// Check a cluster target: the cluster is defined on the server, the
    /// server has the `shard` and `replica` macros the replicated tables
    /// need and the settings that make writes durable; the quorum fits.
    pub(super) fn cluster_of(&self, name: &str) -> Result<Cluster> {
        for needed in [
            "insert_quorum",
            "insert_distributed_sync",
            "select_sequential_consistency",
        ] {
            if !self.settings.contains(needed) {
                return Err(Error::state(format!(
                    "the ClickHouse server at {} has no setting {needed}, which a cluster target needs",
                    self.cfg.base
                )));
            }
        }
        let v = self.query(
            &format!(
                "SELECT shard_num, count() FROM system.clusters WHERE cluster = {} GROUP BY shard_num ORDER BY shard_num FORMAT TabSeparated",
                sql_string(name)
            ),
            None,
            Timeout::Schema,
        )?;
        let replicas: Vec<u64> = String::from_utf8_lossy(&v)
            .lines()
            .filter_map(|l| l.split_once('\t')?.1.parse().ok())
            .collect();
        if replicas.is_empty() {
            let v = self.query(
                "SELECT DISTINCT cluster FROM system.clusters ORDER BY cluster FORMAT TabSeparated",
                None,
                Timeout::Schema,
            )?;
            let known: Vec<String> = String::from_utf8_lossy(&v)
                .lines()
                .map(tsv_unescape)
                .collect();
            return Err(Error::usage(format!(
                "ClickHouse cluster {name:?} is not defined on the server at {} (it knows {known:?}); define it under <remote_servers> in the server's configuration, or name one of those",
                self.cfg.base
            )));
        }
        let v = self.query(
            "SELECT macro FROM system.macros WHERE macro IN ('shard', 'replica') FORMAT TabSeparated",
            None,
            Timeout::Schema,
        )?;
        let macros = String::from_utf8_lossy(&v);
        for m in ["shard", "replica"] {
            if !macros.lines().any(|l| l == m) {
                return Err(Error::state(format!(
                    "the ClickHouse server at {} has no {{{m}}} macro; a cluster target's replicated tables need <macros> with <shard> and <replica> on every node (docs/CLICKHOUSE.md, Cluster)",
                    self.cfg.base
                )));
            }
        }
        let fewest = *replicas.iter().min().expect("not empty");
        let quorum = self.cfg.insert_quorum.unwrap_or(fewest);
        if quorum > fewest {
            return Err(Error::usage(format!(
                "insert_quorum={quorum}, but a shard of cluster {name:?} has {fewest} replica(s): no insert could be acknowledged"
            )));
        }
        let v = self.query(
            &format!(
                "SELECT shard_num, host_name, port FROM system.clusters WHERE cluster = {} ORDER BY shard_num, replica_num FORMAT TabSeparated",
                sql_string(name)
            ),
            None,
            Timeout::Schema,
        )?;
        let addresses = String::from_utf8_lossy(&v)
            .lines()
            .filter_map(|l| {
                let mut f = l.split('\t');
                Some((
                    f.next()?.parse().ok()?,
                    tsv_unescape(f.next()?),
                    f.next()?.parse().ok()?,
                ))
            })
            .collect();
        Ok(Cluster {
            name: name.to_string(),
            quorum,
            replicas: addresses,
            checked: Default::default(),
        })
    }

    /// Before a batch's inserts on a cluster: every shard has at least
    /// `quorum` replicas that answer. A replica that crashed still counts
    /// as active in ZooKeeper until its session times out, and a quorum
    /// insert then waits the whole `insert_timeout_ms` for it; asked
    /// first, through the node in the URL (`remote()` to each replica's
    /// native port), a refused connection fails the batch in moments,
    /// before anything of it is sent. An answer that is neither (the
    /// replica refuses `remote()`'s user, say) counts as answering: the
    /// server's own quorum wait still guards the insert. Checked at most
    /// once a second.
    pub(super) fn replicas_answer(&self) -> Result<()> {
        let Some(c) = &self.cluster else {
            return Ok(());
        };
        if c.checked
            .get()
            .is_some_and(|t| t.elapsed() < Duration::from_secs(1))
        {
            return Ok(());
        }
        let mut down: HashMap<u32, Vec<String>> = HashMap::new();
        for (shard, host, port) in &c.replicas {
            let addr = if host.contains(':') {
                format!("[{host}]:{port}")
            } else {
                format!("{host}:{port}")
            };
            let mut url = self.url(&Timeout::Connect, true);
            if self.settings.contains("connect_timeout") {
                url.push_str(&format!(
                    "&connect_timeout={}",
                    self.cfg.connectivity_timeout.as_secs().max(1)
                ));
            }
            let sql = format!(
                "SELECT dummy FROM remote({}, system.one) FORMAT TabSeparated",
                sql_string(&addr)
            );
            let r = http::post(
                &self.http,
                &self.cfg,
                url,
                self.budget(&Timeout::Connect),
                reqwest::blocking::Body::from(sql),
            )
            .and_then(http::reply);
            if let Err(e) = r {
                let m = e.message();
                if ["Code: 210", "Code: 209", "Code: 279"]
                    .iter()
                    .any(|c| m.contains(c))
                {
                    down.entry(*shard).or_default().push(addr);
                } else if m.contains("ClickHouse at ") {
                    // The node in the URL itself: its own error says it.
                    return Err(e);
                }
            }
        }
        let mut shards: Vec<&u32> = down.keys().collect();
        shards.sort();
        for shard in shards {
            let all = c.replicas.iter().filter(|r| r.0 == *shard).count();
            let gone = &down[shard];
            let answering = all - gone.len();
            if (answering as u64) < c.quorum {
                return Err(Error::new(
                    ErrorKind::Database,
                    format!(
                        "replica {} of shard {shard} of ClickHouse cluster {:?} does not answer: {answering} of the shard's {all} replicas answer, fewer than the insert quorum of {}{}; nothing of this batch was sent and the cursor did not move (an insert would wait insert_timeout_ms for a quorum that cannot come): start it again and apply again (it catches up from its peers), or, knowingly, lower insert_quorum",
                        gone.join(", "),
                        c.name,
                        c.quorum,
                        if answering == 0 {
                            " (a shard of the cluster is down)"
                        } else {
                            ""
                        }
                    ),
                ));
            }
        }
        c.checked.set(Some(std::time::Instant::now()));
        Ok(())
    }
}
