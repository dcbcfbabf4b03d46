//! `--topology sentinel`: the lock on a primary with one replica, watched by 3 sentinels (the
//! harness' [`SentinelSet`]), and its faults: `failover` (a graceful `SENTINEL FAILOVER`) and
//! `kill-primary` (the primary dies while it holds a lock its replica never got; the sentinels
//! promote the replica).
//!
//! The workers get one `redis-sentinel://` URL naming the sentinels; it never changes: the
//! client asks the sentinels where the primary is.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::Context;
use leasehold_harness::{SentinelOptions, SentinelSet, ServerBinary};

use super::hazard;
use super::standalone::remove_persistence;

/// How long the sentinels may take to promote the replica after the primary was killed (they
/// need down-after, 1 s, an election, and may abort a first attempt).
const PROMOTION_BOUND: Duration = Duration::from_secs(60);

/// A Sentinel set holding the lock.
pub(crate) struct SentinelLock {
    set: SentinelSet,
    /// The file the workers read the URL from.
    pub(crate) urls_file: PathBuf,
}

impl SentinelLock {
    /// Starts the primary, its replica and 3 sentinels (waiting until they know each other)
    /// and publishes the `redis-sentinel://` URL.
    pub(crate) fn start(bin: &ServerBinary, urls_file: PathBuf) -> anyhow::Result<Self> {
        let set = SentinelSet::start(bin, &SentinelOptions::new().replicas(1).sentinels(3))
            .context("cannot start the lock's Sentinel set")?;
        let sentinels: Vec<String> = set.sentinel_addrs().iter().map(|a| a.to_string()).collect();
        let url = format!(
            "redis-sentinel://{}#{}",
            sentinels.join(","),
            set.master_name()
        );
        super::servers::publish_urls(&urls_file, &[url])?;
        Ok(SentinelLock { set, urls_file })
    }

    /// The lock key's token on the primary the sentinels name.
    pub(crate) fn holder_token(&self) -> Option<String> {
        hazard::token_on(self.set.primary().ok()?)
    }

    /// Injects `failover` or `kill-primary`; returns the kind and `[old primary, new
    /// primary]` (data node indexes).
    pub(crate) async fn inject(
        &mut self,
        kind: &str,
        ttl: Duration,
    ) -> anyhow::Result<(String, Vec<usize>)> {
        let nodes = match kind {
            "kill-primary" => self.kill_primary(ttl).await?,
            _ => {
                let old = self.set.primary_index()?;
                self.set.failover()?;
                vec![old, self.set.primary_index()?]
            }
        };
        Ok((kind.to_string(), nodes))
    }

    /// The primary dies while it holds a lock that its replica never got
    /// ([`hazard::cut_replica_and_wait`]); the replica is resumed once the primary is dead, and
    /// the sentinels promote it. Then the killed node is restarted empty and made a replica of
    /// the new primary (`REPLICAOF`), so that later faults still have a replica.
    async fn kill_primary(&mut self, ttl: Duration) -> anyhow::Result<Vec<usize>> {
        let primary = self.set.primary_index()?;
        let replica = (0..self.set.data_nodes().len())
            .find(|&i| i != primary && self.set.data_nodes()[i].is_live())
            .with_context(|| format!("the primary has no live replica\n{}", self.set.describe()))?;
        let old = self.set.data_node(primary)?.addr();
        hazard::cut_replica_and_wait(
            self.set.data_node(primary)?,
            self.set.data_node(replica)?,
            ttl,
        )
        .await?;
        // Kill first: a resumed replica would reconnect and fetch the lock.
        self.set.data_node_mut(primary)?.kill();
        self.set.data_node(replica)?.resume()?;
        let deadline = Instant::now() + PROMOTION_BOUND;
        while !self.set.primary_addr().is_ok_and(|a| a != old) {
            anyhow::ensure!(
                Instant::now() < deadline,
                "the sentinels did not promote the replica within {PROMOTION_BOUND:?}\n{}",
                self.set.describe()
            );
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        self.set.wait_until_ready()?;

        // The killed node comes back as the new primary's replica.
        let new_port = self.set.primary()?.port().to_string();
        let node = self.set.data_node_mut(primary)?;
        remove_persistence(node.dir());
        node.restart()?;
        // A node started as a replica comes back with its `--replicaof`, which may name the
        // new primary already ("OK Already connected to specified master").
        let reply = node.command(&["REPLICAOF", "127.0.0.1", &new_port])?;
        anyhow::ensure!(
            reply.as_str().is_some_and(|s| s.starts_with("OK")),
            "REPLICAOF on data node {primary}: {reply}"
        );
        self.set.wait_until_ready()?;
        Ok(vec![primary, replica])
    }
}
