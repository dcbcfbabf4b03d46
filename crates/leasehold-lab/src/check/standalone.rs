//! `--topology standalone`: one lock server (with a replica for `failover` and
//! `--replica-ack`), or the independent masters of Redlock (`--nodes`), and their faults:
//! restarts with and without the AOF, stalls, the failover to a replica that never got the
//! lock, and `slow-link`: the workers reach the one server through a [`SlowLink`] that holds
//! its replies back past their response timeout for a while, so acquisitions, renewals and
//! releases end in doubt (the server applied them; the worker timed out).

use std::path::{Path, PathBuf};
use std::time::Duration;

use leasehold_harness::{FakeClock, Server, ServerBinary, ServerOptions, SlowLink};

use super::faults::Rng;
use super::hazard;
use crate::cli::CheckArgs;

/// One master (and, for `failover` or `--replica-ack`, its replica), or the Redlock nodes.
pub(crate) struct Standalone {
    options: ServerOptions,
    nodes: Vec<Server>,
    replica: Option<Server>,
    /// Whether `nodes[0]` is a promoted replica (a restart brings back its `--replicaof`).
    promoted: bool,
    /// Restarts so far (`restart` alternates with and without the AOF).
    restarts: usize,
    /// For `clock-jump`: each node's wall clock (`nodes[i]` runs on `clocks[i]`).
    clocks: Vec<FakeClock>,
    /// For `slow-link`: the relay in front of the one node, which the workers connect to.
    link: Option<SlowLink>,
    /// The file the workers read the URLs from.
    pub(crate) urls_file: PathBuf,
}

impl Standalone {
    /// Starts `--nodes` servers (and a replica of the first if a fault or `--replica-ack`
    /// needs one) and publishes their URLs.
    pub(crate) fn start(
        args: &CheckArgs,
        bin: &ServerBinary,
        urls_file: PathBuf,
    ) -> anyhow::Result<Self> {
        // One node restarted keeps its locks only with the AOF (fsync always); Redlock nodes run
        // without persistence and are restarted late, as the Redlock algorithm requires.
        let options = ServerOptions::new().aof(args.nodes == 1);
        // `clock-jump`: every node on a clock of its own, which the fault may move.
        let clocks = if args.faults.iter().any(|f| f == "clock-jump") {
            let dir = urls_file.parent().unwrap_or(Path::new("."));
            (0..args.nodes)
                .map(|i| super::clock::node_clock(dir, i))
                .collect::<anyhow::Result<Vec<_>>>()?
        } else {
            Vec::new()
        };
        let nodes = (0..args.nodes)
            .map(|i| match clocks.get(i) {
                Some(clock) => Server::start(bin, &options.clone().fake_clock(clock)),
                None => Server::start(bin, &options),
            })
            .collect::<Result<Vec<_>, _>>()?;
        let replica = if args.faults.iter().any(|f| f == "failover") || args.replica_ack.is_some() {
            Some(nodes[0].start_replica(&options)?)
        } else {
            None
        };
        let link = if args.faults.iter().any(|f| f == "slow-link") {
            Some(SlowLink::start(nodes[0].addr())?)
        } else {
            None
        };
        let servers = Standalone {
            options,
            nodes,
            replica,
            promoted: false,
            restarts: 0,
            clocks,
            link,
            urls_file,
        };
        servers.publish_urls()?;
        Ok(servers)
    }

    /// Writes the current URLs for the workers (atomically: a new file renamed over the old);
    /// with `slow-link`, the relay's (`--nodes 1`, no `failover`: the node never changes).
    fn publish_urls(&self) -> anyhow::Result<()> {
        let list: Vec<String> = match &self.link {
            Some(link) => vec![link.url()],
            None => self.nodes.iter().map(Server::url).collect(),
        };
        super::servers::publish_urls(&self.urls_file, &list)
    }

    /// The lock key's token on the first node that answers.
    pub(crate) fn holder_token(&self) -> Option<String> {
        self.nodes.iter().find_map(hazard::token_on)
    }

    /// A random minority of the nodes (at least one, for a single node: that node).
    fn minority(&self, rng: &mut Rng) -> Vec<usize> {
        let n = self.nodes.len();
        let count = ((n - 1) / 2).max(1).min(n);
        let mut picked: Vec<usize> = Vec::new();
        while picked.len() < count {
            let i = rng.below(n);
            if !picked.contains(&i) {
                picked.push(i);
            }
        }
        picked.sort_unstable();
        picked
    }

    /// Injects `restart` (`restart-aof`, `restart-noaof`), `stall`, `slow-link`, `clock-jump`
    /// or `failover`; returns the kind to record and the nodes it hit.
    pub(crate) async fn inject(
        &mut self,
        kind: &str,
        ttl: Duration,
        rng: &mut Rng,
    ) -> anyhow::Result<(String, Vec<usize>)> {
        let mut kind = kind.to_string();
        let nodes;
        match kind.as_str() {
            "restart" | "restart-aof" | "restart-noaof" => {
                nodes = self.minority(rng);
                if self.nodes.len() == 1 {
                    let keep = match kind.as_str() {
                        "restart-aof" => true,
                        "restart-noaof" => false,
                        _ => self.restarts.is_multiple_of(2),
                    };
                    self.restarts += 1;
                    kind = if keep { "restart-aof" } else { "restart-noaof" }.into();
                    let node = &mut self.nodes[0];
                    node.kill();
                    if !keep {
                        // A restart without persistence: the node comes back empty.
                        remove_persistence(node.dir());
                    }
                    node.restart()?;
                    if self.promoted {
                        node.promote()?;
                    }
                } else {
                    // Redlock: a crashed node must stay down for a TTL before it rejoins
                    // without its data (the algorithm's "delayed restart").
                    for &i in &nodes {
                        self.nodes[i].kill();
                    }
                    tokio::time::sleep(ttl * 2).await;
                    for &i in &nodes {
                        remove_persistence(self.nodes[i].dir());
                        self.nodes[i].restart()?;
                    }
                }
            }
            "stall" => {
                // The lock server(s) frozen for longer than the TTL: keys expire meanwhile.
                nodes = self.minority(rng);
                for &i in &nodes {
                    self.nodes[i].pause()?;
                }
                tokio::time::sleep(ttl * 2).await;
                for &i in &nodes {
                    self.nodes[i].resume()?;
                }
            }
            "slow-link" => {
                // Every reply held back a TTL, twice the workers' response timeout
                // ([`slow_link_timeout`]), for two TTLs: renewals, releases and acquisitions
                // time out after the server applied them. The delays of a connection's replies
                // add up, so the last ones come through a TTL or so after the delay is lifted.
                nodes = vec![0];
                if let Some(link) = &self.link {
                    link.set_reply_delay(ttl);
                    tokio::time::sleep(ttl * 2).await;
                    link.set_reply_delay(Duration::ZERO);
                }
            }
            "clock-jump" => {
                nodes =
                    super::clock::clock_jump(&mut self.nodes, &mut self.clocks, ttl, rng).await?;
            }
            _ => {
                self.failover(ttl).await?;
                nodes = vec![0];
            }
        }
        Ok((kind, nodes))
    }

    /// The replication hazard ([`hazard::cut_replica_and_wait`]), then the master dies, the
    /// replica is promoted and the workers move to it, where the lock is free. A fresh replica
    /// of the new master is started for the next failover.
    async fn failover(&mut self, ttl: Duration) -> anyhow::Result<()> {
        let Some(replica) = self.replica.take() else {
            return Ok(());
        };
        hazard::cut_replica_and_wait(&self.nodes[0], &replica, ttl).await?;
        self.nodes[0].kill();
        replica.resume()?;
        replica.promote()?;
        self.nodes[0] = replica;
        self.promoted = true;
        // Tell the workers first: they are failing against the dead master meanwhile.
        self.publish_urls()?;
        self.replica = Some(self.nodes[0].start_replica(&self.options)?);
        Ok(())
    }
}

/// The workers' response timeout with `slow-link`: half the TTL, so a renewal (every third of
/// it) that times out still leaves the lease time to run out on its own, and the fault's
/// delay (a TTL) is well past it.
pub(crate) fn slow_link_timeout(ttl: Duration) -> Duration {
    ttl / 2
}

/// Deletes a stopped server's data files (not a cluster node's `nodes.conf`), so it restarts
/// empty.
pub(crate) fn remove_persistence(dir: &Path) {
    let _ = std::fs::remove_dir_all(dir.join("appendonlydir"));
    let _ = std::fs::remove_file(dir.join("appendonly.aof"));
    let _ = std::fs::remove_file(dir.join("dump.rdb"));
}
