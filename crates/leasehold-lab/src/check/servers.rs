//! The lock servers of `leasehold-lab check`, whatever the backend (`--backend`) and topology
//! (`--topology`): one standalone server or Redlock nodes ([`Standalone`]), a Redis Cluster
//! ([`ClusterLock`]), a Sentinel-monitored primary ([`SentinelLock`]), a 3-member etcd cluster
//! ([`EtcdLock`]) or a PostgreSQL server ([`PgLock`]). Each publishes the URL(s) the workers
//! connect to and injects the server faults that make sense for it; this module only
//! dispatches.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;
use leasehold_harness::ServerBinary;

use super::cluster::ClusterLock;
use super::etcd::EtcdLock;
use super::faults::Rng;
use super::postgres::PgLock;
use super::sentinel::SentinelLock;
use super::standalone::Standalone;
use crate::cli::CheckArgs;

/// The lock's backend (`--backend`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Backend {
    /// Redis/valkey, in the shape `--topology` and `--nodes` give.
    Redis,
    /// A 3-member etcd cluster.
    Etcd,
    /// A PostgreSQL server.
    Postgres,
}

impl Backend {
    /// The backend `--backend` names (clap only lets the three names through; anything else
    /// is redis).
    pub(crate) fn of(args: &CheckArgs) -> Backend {
        match args.backend.as_str() {
            "etcd" => Backend::Etcd,
            "postgres" => Backend::Postgres,
            _ => Backend::Redis,
        }
    }

    /// Its `--backend` name.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Backend::Redis => "redis",
            Backend::Etcd => "etcd",
            Backend::Postgres => "postgres",
        }
    }

    /// The fault kinds `--faults` takes with this backend (for redis: see
    /// [`Topology::faults`]).
    pub(crate) fn faults(self, topology: Topology) -> &'static [&'static str] {
        match self {
            Backend::Redis => topology.faults(),
            Backend::Etcd => &[
                "pause",
                "kill",
                "member-kill",
                "member-pause",
                "leader-kill",
                "restart",
            ],
            Backend::Postgres => &["pause", "kill", "restart"],
        }
    }

    /// How many lock servers it runs (the range of a fault's `nodes`); for redis, `--nodes`.
    pub(crate) fn lock_nodes(self, args: &CheckArgs) -> usize {
        match self {
            Backend::Redis => args.nodes,
            Backend::Etcd => super::etcd::MEMBERS,
            Backend::Postgres => 1,
        }
    }
}

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
        match args.topology_name() {
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
                "slow-link",
                "clock-jump",
            ],
            Topology::Cluster => &["pause", "kill", "failover", "migrate", "migrate-held"],
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
    /// An etcd cluster.
    Etcd(EtcdLock),
    /// A PostgreSQL server.
    Postgres(PgLock),
}

impl LockServers {
    /// Starts the servers `args` ask for (`--backend`; for redis `--topology`, `--nodes`, and
    /// whether a replica is needed) and writes the URL(s) the workers connect to into
    /// `urls_file`. `bin` is the redis/valkey server (needed by the redis backend only).
    pub(crate) async fn start(
        args: &CheckArgs,
        bin: Option<&ServerBinary>,
        urls_file: PathBuf,
    ) -> anyhow::Result<Self> {
        let redis_bin = || bin.context("the redis backend needs a redis/valkey server");
        Ok(match (Backend::of(args), Topology::of(args)) {
            (Backend::Etcd, _) => LockServers::Etcd(EtcdLock::start(urls_file).await?),
            (Backend::Postgres, _) => LockServers::Postgres(PgLock::start(urls_file, args).await?),
            (Backend::Redis, Topology::Standalone) => {
                LockServers::Standalone(Box::new(Standalone::start(args, redis_bin()?, urls_file)?))
            }
            (Backend::Redis, Topology::Cluster) => {
                LockServers::Cluster(ClusterLock::start(redis_bin()?, urls_file)?)
            }
            (Backend::Redis, Topology::Sentinel) => {
                LockServers::Sentinel(SentinelLock::start(redis_bin()?, urls_file)?)
            }
        })
    }

    /// The role of the member the last server fault hit, where the backend has roles that
    /// change (etcd: `leader` or `follower`).
    pub(crate) fn last_role(&self) -> Option<&'static str> {
        match self {
            LockServers::Etcd(e) => e.last_role,
            _ => None,
        }
    }

    /// Whether the lock lives on redis/valkey servers (`--backend redis`).
    pub(crate) fn is_redis(&self) -> bool {
        !matches!(self, LockServers::Etcd(_) | LockServers::Postgres(_))
    }

    /// The file the workers read the lock URL(s) from.
    pub(crate) fn urls_file(&self) -> &Path {
        match self {
            LockServers::Standalone(s) => &s.urls_file,
            LockServers::Cluster(c) => &c.urls_file,
            LockServers::Sentinel(s) => &s.urls_file,
            LockServers::Etcd(e) => &e.urls_file,
            LockServers::Postgres(p) => &p.urls_file,
        }
    }

    /// The lock key's token right now, where the lock lives (`None`: free, or the server
    /// did not answer within 200 ms).
    pub(crate) async fn holder_token(&self) -> Option<String> {
        match self {
            LockServers::Standalone(s) => s.holder_token(),
            LockServers::Cluster(c) => c.holder_token(),
            LockServers::Sentinel(s) => s.holder_token(),
            LockServers::Etcd(e) => e.holder_token().await,
            LockServers::Postgres(p) => p.holder_token().await,
        }
    }

    /// Injects the server fault `kind` (one of [`Backend::faults`] other than `pause` and
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
            LockServers::Etcd(e) => e.inject(kind, ttl, rng).await,
            LockServers::Postgres(p) => p.inject(kind, ttl).await,
        }
    }
}

/// The lock key's holder token as `locker` sees it (`locker.inspect`), bounded by 200 ms like
/// the redis lookups: `None` when the lock is free or the backend did not answer in time.
pub(crate) async fn inspect_holder(locker: &leasehold::Locker) -> Option<String> {
    tokio::time::timeout(
        Duration::from_millis(200),
        locker.inspect(super::faults::LOCK_KEY),
    )
    .await
    .ok()?
    .ok()?
    .holder
}

/// Writes `urls` for the workers, one a line, atomically (a new file renamed over the old: a
/// worker never reads half a list).
pub(crate) fn publish_urls(path: &Path, urls: &[String]) -> anyhow::Result<()> {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, urls.join("\n") + "\n")?;
    std::fs::rename(&tmp, path)?;
    Ok(())
}
