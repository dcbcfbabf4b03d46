//! `--topology cluster`: the lock on a Redis Cluster of 3 masters with 1 replica each (the
//! harness' [`Cluster`]), and its faults: `failover` (the master that owns the lock key's slot
//! dies while it holds a lock its replica never got; the replica takes over), `migrate` (the
//! slot moves to another master, step by step, while the workers run) and `migrate-held` (the
//! same, with the slot held in `MIGRATING`/`IMPORTING` past the fair queue's lifetime).
//!
//! The workers get one `redis-cluster://` URL naming every node as a seed; it never changes:
//! the client follows the topology (`MOVED`, `ASK`, a refreshed slot map after a failover).

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::Context;
use leasehold_harness::{Cluster, ClusterOptions, HarnessError, ServerBinary};

use super::faults::{LOCK_KEY, Rng};
use super::hazard;
use super::standalone::remove_persistence;

/// How long a takeover may take to be seen by the cluster's first live node.
const TAKEOVER_BOUND: Duration = Duration::from_secs(30);

/// Attempts at finishing a migration whose source still holds keys (a key created there
/// between the last `MIGRATE` and `SETSLOT NODE`).
const FINISH_ATTEMPTS: usize = 5;

/// How long `migrate-held` keeps the slot in `MIGRATING`/`IMPORTING`: past twice the fair
/// queue's entry lifetime plus a TTL, so every queue entry written before the migration has
/// expired while its waiter was refused (`TRYAGAIN`), and holders renewed meanwhile.
fn held_migration(ttl: Duration) -> Duration {
    2 * leasehold::internal::queue_entry_ttl(ttl) + ttl
}

/// A cluster holding the lock.
pub(crate) struct ClusterLock {
    cluster: Cluster,
    /// The lock key's hash slot.
    slot: u16,
    /// The file the workers read the URL from.
    pub(crate) urls_file: PathBuf,
}

impl ClusterLock {
    /// Starts 3 masters with a replica each (waiting until the cluster is stable) and
    /// publishes its `redis-cluster://` URL.
    pub(crate) fn start(bin: &ServerBinary, urls_file: PathBuf) -> anyhow::Result<Self> {
        let cluster = Cluster::start(
            bin,
            &ClusterOptions::new().masters(3).replicas_per_master(1),
        )
        .context("cannot start the lock cluster")?;
        let slot = cluster.keyslot(LOCK_KEY)?;
        let seeds: Vec<String> = cluster
            .nodes()
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port()))
            .collect();
        let url = format!("redis-cluster://{}", seeds.join(","));
        super::servers::publish_urls(&urls_file, &[url])?;
        Ok(ClusterLock {
            cluster,
            slot,
            urls_file,
        })
    }

    /// The lock key's token on the master of its slot.
    pub(crate) fn holder_token(&self) -> Option<String> {
        let master = self.cluster.master_index_for_slot(self.slot).ok()?;
        hazard::token_on(self.cluster.node(master).ok()?)
    }

    /// Injects `failover`, `migrate` or `migrate-held`; returns the kind and the nodes it involved (the old
    /// and the new owner of the slot).
    pub(crate) async fn inject(
        &mut self,
        kind: &str,
        ttl: Duration,
        rng: &mut Rng,
    ) -> anyhow::Result<(String, Vec<usize>)> {
        let nodes = match kind {
            "migrate" => self.migrate(ttl, ttl, rng).await?,
            "migrate-held" => self.migrate(ttl, held_migration(ttl), rng).await?,
            _ => self.failover(ttl).await?,
        };
        Ok((kind.to_string(), nodes))
    }

    /// The master of the lock's slot dies while it holds a lock that its replica never got
    /// ([`hazard::cut_replica_and_wait`]); the replica takes over (`CLUSTER FAILOVER
    /// TAKEOVER`, no waiting for an election) once the master is dead, and the cluster agrees.
    /// Then the old master is restarted (empty, with its `nodes.conf`): it finds its slots
    /// taken and rejoins as the new master's replica, so the next failover of the slot has a
    /// replica to promote. Returns `[old master, new master]`.
    async fn failover(&mut self, ttl: Duration) -> anyhow::Result<Vec<usize>> {
        let master = self.cluster.master_index_for_slot(self.slot)?;
        let replica = *self.cluster.replicas_of(master)?.first().with_context(|| {
            format!(
                "master {master} of the lock's slot has no live replica\n{}",
                self.cluster.describe()
            )
        })?;
        hazard::cut_replica_and_wait(self.cluster.node(master)?, self.cluster.node(replica)?, ttl)
            .await?;
        // Kill first: a resumed replica would reconnect and fetch the lock.
        self.cluster.node_mut(master)?.kill();
        let promoted = self.cluster.node(replica)?;
        promoted.resume()?;
        let reply = promoted.command(&["CLUSTER", "FAILOVER", "TAKEOVER"])?;
        anyhow::ensure!(reply.is_ok(), "CLUSTER FAILOVER TAKEOVER: {reply}");
        self.wait_for_owner(replica).await?;
        self.cluster.wait_until_stable()?;

        // The old master rejoins as the new master's replica.
        let old = self.cluster.node_mut(master)?;
        remove_persistence(old.dir());
        old.restart()?;
        self.cluster.wait_until_stable()?;
        if !self.cluster.replicas_of(replica)?.contains(&master) {
            let id = self.cluster.node_id(replica)?.to_owned();
            let reply = self
                .cluster
                .node(master)?
                .command(&["CLUSTER", "REPLICATE", &id])?;
            anyhow::ensure!(reply.is_ok(), "CLUSTER REPLICATE on node {master}: {reply}");
            self.cluster.wait_until_stable()?;
        }
        Ok(vec![master, replica])
    }

    /// Waits until the cluster's first live node says `owner` owns the lock's slot.
    async fn wait_for_owner(&self, owner: usize) -> anyhow::Result<()> {
        let deadline = Instant::now() + TAKEOVER_BOUND;
        loop {
            if self.cluster.master_index_for_slot(self.slot).ok() == Some(owner) {
                return Ok(());
            }
            anyhow::ensure!(
                Instant::now() < deadline,
                "node {owner} did not take the lock's slot over within {TAKEOVER_BOUND:?}\n{}",
                self.cluster.describe()
            );
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }

    /// Moves the lock's slot to another master, picked at random: `MIGRATING`/`IMPORTING`,
    /// `hold` of workers being redirected (`ASK`, `TRYAGAIN` for a script whose keys are
    /// split: every acquisition of a free lock, every fair script), `MIGRATE` of the slot's keys
    /// (the lock, its fencing counter, the fair queue), a TTL, then the slot's new owner
    /// everywhere. Returns `[from, to]`.
    async fn migrate(
        &mut self,
        ttl: Duration,
        hold: Duration,
        rng: &mut Rng,
    ) -> anyhow::Result<Vec<usize>> {
        let from = self.cluster.master_index_for_slot(self.slot)?;
        let others: Vec<usize> = self
            .cluster
            .master_indices()?
            .into_iter()
            .filter(|&m| m != from)
            .collect();
        anyhow::ensure!(
            !others.is_empty(),
            "no other master to migrate the lock's slot to"
        );
        let to = others[rng.below(others.len())];
        self.cluster.begin_migration(self.slot, from, to)?;
        tokio::time::sleep(hold).await;
        self.cluster.migrate_keys(self.slot, from, to)?;
        tokio::time::sleep(ttl).await;
        for attempt in 1..=FINISH_ATTEMPTS {
            // Anything created on the source meanwhile goes too.
            self.cluster.migrate_keys(self.slot, from, to)?;
            match self.cluster.finish_migration(self.slot, to) {
                Ok(()) => break,
                Err(HarnessError::InvalidArgument(_)) if attempt < FINISH_ATTEMPTS => continue,
                Err(e) => return Err(e.into()),
            }
        }
        Ok(vec![from, to])
    }
}
