//! The lock servers of `leasehold check`, whatever the topology (`--topology`): one
//! standalone server or Redlock nodes ([`Standalone`]), a Redis Cluster ([`ClusterLock`]), or a
//! Sentinel-monitored primary ([`SentinelLock`]). Each publishes the URL(s) the workers connect
//! to and injects the server faults that make sense for it; this module only dispatches.

use std::path::{Path, PathBuf};
use std::time::Duration;

use leasehold_harness::ServerBinary;

use super::cluster::ClusterLock;
use super::faults::Rng;
use super::sentinel::SentinelLock;
use super::standalone::Standalone;
use crate::cli::CheckArgs;

/// Where the lock lives (`--topology`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Topology {
    /// One server (with a replica for `failover` or `--replica-ack`), or Redlock nodes.
    Standalone,
    /// A Redis Cluster: 3 masters with 1 replica each.
    Cluster,
    /// A primary, its replica and 3 sentinels.
    Sentinel,
}

impl Topology {
    /// The topology `--topology` names (clap only lets the three names through; anything else
    /// is standalone).
    pub(crate) fn of(args: &CheckArgs) -> Topology {
        match args.topology.as_str() {
            "cluster" => Topology::Cluster,
            "sentinel" => Topology::Sentinel,
            _ => Topology::Standalone,
        }
    }

    /// Its `--topology` name.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Topology::Standalone => "standalone",
            Topology::Cluster => "cluster",
            Topology::Sentinel => "sentinel",
        }
    }

    /// The fault kinds `--faults` takes with this topology.
    pub(crate) fn faults(self) -> &'static [&'static str] {
        match self {
            Topology::Standalone => &[
                "pause",
                "kill",
                "restart",
                "restart-aof",
                "restart-noaof",
                "stall",
                "failover",
            ],
            Topology::Cluster => &["pause", "kill", "failover", "migrate"],
            Topology::Sentinel => &["pause", "kill", "failover", "kill-primary"],
        }
    }
}

/// The lock servers of one run.
pub(crate) enum LockServers {
    /// One server or Redlock nodes.
    Standalone(Box<Standalone>),
    /// A Redis Cluster.
    Cluster(ClusterLock),
    /// A Sentinel set.
    Sentinel(SentinelLock),
}

impl LockServers {
    /// Starts the servers `args` ask for (`--topology`, `--nodes`, and whether a replica is
    /// needed) and writes the URL(s) the workers connect to into `urls_file`.
    pub(crate) fn start(
        args: &CheckArgs,
        bin: &ServerBinary,
        urls_file: PathBuf,
    ) -> anyhow::Result<Self> {
        Ok(match Topology::of(args) {
            Topology::Standalone => {
                LockServers::Standalone(Box::new(Standalone::start(args, bin, urls_file)?))
            }
            Topology::Cluster => LockServers::Cluster(ClusterLock::start(bin, urls_file)?),
            Topology::Sentinel => LockServers::Sentinel(SentinelLock::start(bin, urls_file)?),
        })
    }

    /// The file the workers read the lock URL(s) from.
    pub(crate) fn urls_file(&self) -> &Path {
        match self {
            LockServers::Standalone(s) => &s.urls_file,
            LockServers::Cluster(c) => &c.urls_file,
            LockServers::Sentinel(s) => &s.urls_file,
        }
    }

    /// The lock key's token right now, where the lock lives (`None`: free, or the server
    /// did not answer within 200 ms).
    pub(crate) fn holder_token(&self) -> Option<String> {
        match self {
            LockServers::Standalone(s) => s.holder_token(),
            LockServers::Cluster(c) => c.holder_token(),
            LockServers::Sentinel(s) => s.holder_token(),
        }
    }

    /// Injects the server fault `kind` (one of [`Topology::faults`] other than `pause` and
    /// `kill`); returns the kind to record (a `restart` says which one it was) and the nodes
    /// it hit.
    pub(crate) async fn inject(
        &mut self,
        kind: &str,
        ttl: Duration,
        rng: &mut Rng,
    ) -> anyhow::Result<(String, Vec<usize>)> {
        match self {
            LockServers::Standalone(s) => s.inject(kind, ttl, rng).await,
            LockServers::Cluster(c) => c.inject(kind, ttl, rng).await,
            LockServers::Sentinel(s) => s.inject(kind, ttl).await,
        }
    }
}

/// Writes `urls` for the workers, one a line, atomically (a new file renamed over the old: a
/// worker never reads half a list).
pub(crate) fn publish_urls(path: &Path, urls: &[String]) -> anyhow::Result<()> {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, urls.join("\n") + "\n")?;
    std::fs::rename(&tmp, path)?;
    Ok(())
}
