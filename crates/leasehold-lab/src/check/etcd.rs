//! `--backend etcd`: the lock on a 3-member etcd cluster (the harness' [`EtcdCluster`]), and
//! its faults: `member-kill` (a follower crashes and comes back 2 TTLs later), `member-pause`
//! (a member, perhaps the leader, frozen for 2 TTLs) and `leader-kill` (the leader crashes: an
//! election, then it comes back 2 TTLs later as a follower) and `restart` (every member
//! crashes while a worker holds the lock, so its release meets a cluster that is down; all
//! come back 2 TTLs later with their data).
//!
//! The workers get one `etcd://` URL naming every member; it never changes: the client
//! balances over the members and rides out the ones that are down. The fencing numbers are
//! etcd revisions (large, strictly increasing cluster-wide, not consecutive per key).

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use leasehold::Locker;
use leasehold_harness::EtcdCluster;

use super::faults::Rng;
use super::servers::{inspect_holder, publish_urls};

/// Members of the lock's cluster: the smallest that survives the loss of one.
pub(crate) const MEMBERS: usize = 3;

/// An etcd cluster holding the lock, and a client of it for the coordinator's lookups.
pub(crate) struct EtcdLock {
    cluster: EtcdCluster,
    /// Asks who holds the lock (`inspect`), for the `pause` and `kill` faults.
    locker: Locker,
    /// The file the workers read the URL from.
    pub(crate) urls_file: PathBuf,
    /// The role of the member the last fault hit (`leader`, `follower`; `None`: unknown).
    pub(crate) last_role: Option<&'static str>,
}

impl EtcdLock {
    /// Starts the members (waiting until each serves clients), connects to them and publishes
    /// the `etcd://` URL.
    pub(crate) async fn start(urls_file: PathBuf) -> anyhow::Result<Self> {
        let cluster = tokio::task::block_in_place(|| EtcdCluster::start(MEMBERS))
            .context("cannot start the lock's etcd cluster (run scripts/install-servers)")?;
        let hosts: Vec<String> = cluster
            .members()
            .iter()
            .map(|m| m.addr().to_string())
            .collect();
        let url = format!("etcd://{}", hosts.join(","));
        let locker = Locker::connect(&url)
            .await
            .with_context(|| format!("cannot connect to the lock's etcd cluster at {url}"))?;
        publish_urls(&urls_file, &[url])?;
        Ok(EtcdLock {
            cluster,
            locker,
            urls_file,
            last_role: None,
        })
    }

    /// The token of the lock's holder (the first entry of its queue).
    pub(crate) async fn holder_token(&self) -> Option<String> {
        inspect_holder(&self.locker).await
    }

    /// Injects `member-kill`, `member-pause`, `leader-kill` or `restart`; returns the kind and
    /// the member(s) it hit (their indices).
    pub(crate) async fn inject(
        &mut self,
        kind: &str,
        ttl: Duration,
        rng: &mut Rng,
    ) -> anyhow::Result<(String, Vec<usize>)> {
        if kind == "restart" {
            self.restart_all(ttl).await?;
            return Ok((kind.to_string(), (0..MEMBERS).collect()));
        }
        let member = match kind {
            "member-pause" => {
                // Any member, the leader too: a frozen leader is replaced by an election, and
                // steps down when it is resumed.
                let i = rng.below(MEMBERS);
                let leader = tokio::task::block_in_place(|| self.cluster.leader_index());
                self.last_role = leader.map(|l| if l == i { "leader" } else { "follower" });
                self.cluster.member(i)?.pause()?;
                tokio::time::sleep(ttl * 2).await;
                self.cluster.member(i)?.resume()?;
                i
            }
            "leader-kill" => {
                let leader = self.leader()?;
                self.last_role = Some("leader");
                self.crash_and_restart(leader, ttl).await?;
                leader
            }
            _ => {
                let leader = self.leader()?;
                let followers: Vec<usize> = (0..MEMBERS).filter(|&i| i != leader).collect();
                let i = followers[rng.below(followers.len())];
                self.last_role = Some("follower");
                self.crash_and_restart(i, ttl).await?;
                i
            }
        };
        Ok((kind.to_string(), vec![member]))
    }

    /// The leader's index, once every live member is healthy and they agree on one (at most
    /// 30 s: the cluster recovers from the previous fault first).
    fn leader(&self) -> anyhow::Result<usize> {
        tokio::task::block_in_place(|| self.cluster.wait_until_healthy())
            .context("the lock's etcd cluster has no leader")
    }

    /// `restart`: waits (at most 4 TTLs) until a worker holds the lock, then every member
    /// crashes (SIGKILL) at once: the holder's release (its work is short) meets a cluster that
    /// is down for [`restart_downtime`], longer than the release's retries last. All come back
    /// with their data dirs (leases and entries kept; the new leader renews every lease for a
    /// full TTL).
    async fn restart_all(&mut self, ttl: Duration) -> anyhow::Result<()> {
        self.last_role = None;
        let deadline = super::worker::now_ms() + 4.0 * ttl.as_secs_f64() * 1000.0;
        while self.holder_token().await.is_none() && super::worker::now_ms() < deadline {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        for i in 0..MEMBERS {
            self.cluster.member_mut(i)?.kill();
        }
        tokio::time::sleep(restart_downtime(ttl)).await;
        let cluster = &mut self.cluster;
        tokio::task::block_in_place(|| cluster.restart_stopped())
            .context("the lock's etcd cluster did not come back after a restart of every member")?;
        Ok(())
    }

    /// Member `i` crashes (SIGKILL), stays down for 2 TTLs, and restarts with its data (it
    /// rejoins as a follower and catches up).
    async fn crash_and_restart(&mut self, i: usize, ttl: Duration) -> anyhow::Result<()> {
        self.cluster.member_mut(i)?.kill();
        tokio::time::sleep(ttl * 2).await;
        let member = self.cluster.member_mut(i)?;
        tokio::task::block_in_place(|| member.restart())
            .with_context(|| format!("cannot restart etcd member {i}"))?;
        Ok(())
    }
}

/// How long `restart` keeps every member down: 2/3 of the TTL, at least 2 s (longer than a
/// failed release's retries, about 1.5 s against refused connections). With `--ttl 3s` or
/// more the workers' leases outlive the outage: their sessions survive it, and whatever a
/// failed release left behind rides on a lease that is kept alive; with shorter TTLs the
/// sessions are lost and their entries expire with them.
fn restart_downtime(ttl: Duration) -> Duration {
    (ttl * 2 / 3).max(Duration::from_secs(2))
}
