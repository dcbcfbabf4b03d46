//! The lock servers of `leasehold check` and the faults injected into them and into the
//! workers, on a seeded schedule.

use std::path::{Path, PathBuf};
use std::time::Duration;

use leasehold_harness::{Server, ServerBinary, ServerOptions};
use nix::sys::signal::{Signal, kill};

use super::analyze::Fault;
use super::fleet::Fleet;
use super::worker::now_ms;
use crate::cli::CheckArgs;

/// The fault kinds `--faults` takes.
pub(crate) const FAULTS: &[&str] = &[
    "pause",
    "kill",
    "restart",
    "restart-aof",
    "restart-noaof",
    "stall",
    "failover",
];

/// The lock key the workers fight over.
pub(crate) const LOCK_KEY: &str = "check:lock";

/// A seeded xorshift: the same seed gives the same schedule.
pub(crate) struct Rng(u64);

impl Rng {
    /// A generator for `seed` (0 counts as 1: xorshift needs a non-zero state).
    pub(crate) fn new(seed: u64) -> Rng {
        Rng(seed.max(1))
    }

    pub(crate) fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// A number in `0..n` (`n` > 0).
    pub(crate) fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// The lock servers: one master (and, for `failover` or `--replica-ack`, its replica), or the
/// Redlock nodes.
pub(crate) struct LockServers {
    options: ServerOptions,
    pub(crate) nodes: Vec<Server>,
    replica: Option<Server>,
    /// Whether `nodes[0]` is a promoted replica (a restart brings back its `--replicaof`).
    promoted: bool,
    /// The file the workers read the URLs from.
    pub(crate) urls_file: PathBuf,
}

impl LockServers {
    pub(crate) fn start(
        args: &CheckArgs,
        bin: &ServerBinary,
        urls_file: PathBuf,
    ) -> anyhow::Result<Self> {
        // One node restarted keeps its locks only with the AOF (fsync always); Redlock nodes run
        // without persistence and are restarted late, as the Redlock algorithm requires.
        let options = ServerOptions::new().aof(args.nodes == 1);
        let nodes = (0..args.nodes)
            .map(|_| Server::start(bin, &options))
            .collect::<Result<Vec<_>, _>>()?;
        let replica = if args.faults.iter().any(|f| f == "failover") || args.replica_ack.is_some() {
            Some(nodes[0].start_replica(&options)?)
        } else {
            None
        };
        let servers = LockServers {
            options,
            nodes,
            replica,
            promoted: false,
            urls_file,
        };
        servers.publish_urls()?;
        Ok(servers)
    }

    /// Writes the current URLs for the workers (atomically: a new file renamed over the old).
    fn publish_urls(&self) -> anyhow::Result<()> {
        let tmp = self.urls_file.with_extension("tmp");
        let list: Vec<String> = self.nodes.iter().map(Server::url).collect();
        std::fs::write(&tmp, list.join("\n") + "\n")?;
        std::fs::rename(&tmp, &self.urls_file)?;
        Ok(())
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
}

/// Injects the faults, in turn, and remembers what it did.
pub(crate) struct Injector {
    ttl: Duration,
    restarts: usize,
    /// Every fault injected so far, with when it was active.
    pub(crate) faults: Vec<Fault>,
}

impl Injector {
    pub(crate) fn new(ttl: Duration) -> Injector {
        Injector {
            ttl,
            restarts: 0,
            faults: Vec::new(),
        }
    }

    /// Injects one fault of `kind` (one of [`FAULTS`]) and records it; a `pause` or `kill` when
    /// no worker is left does nothing.
    pub(crate) async fn inject(
        &mut self,
        kind: &str,
        lock: &mut LockServers,
        fleet: &mut Fleet,
        holders: &Path,
        rng: &mut Rng,
    ) -> anyhow::Result<()> {
        let ttl = self.ttl;
        let mut kind = kind.to_string();
        let mut start = now_ms();
        let mut worker = None;
        let mut nodes = Vec::new();
        match kind.as_str() {
            "pause" | "kill" => {
                let Some((id, pid)) = fleet.holder(lock, holders, rng) else {
                    return Ok(());
                };
                worker = Some(id);
                start = now_ms();
                if kind == "pause" {
                    // Longer than the TTL: the lease runs out while the holder is frozen.
                    let _ = kill(pid, Signal::SIGSTOP);
                    tokio::time::sleep(ttl * 2).await;
                    let _ = kill(pid, Signal::SIGCONT);
                } else {
                    fleet.replace(id, pid)?;
                }
            }
            "restart" | "restart-aof" | "restart-noaof" => {
                nodes = lock.minority(rng);
                if lock.nodes.len() == 1 {
                    let keep = match kind.as_str() {
                        "restart-aof" => true,
                        "restart-noaof" => false,
                        _ => self.restarts.is_multiple_of(2),
                    };
                    self.restarts += 1;
                    kind = if keep { "restart-aof" } else { "restart-noaof" }.into();
                    let node = &mut lock.nodes[0];
                    node.kill();
                    if !keep {
                        // A restart without persistence: the node comes back empty.
                        remove_persistence(node.dir());
                    }
                    node.restart()?;
                    if lock.promoted {
                        node.promote()?;
                    }
                } else {
                    // Redlock: a crashed node must stay down for a TTL before it rejoins
                    // without its data (the algorithm's "delayed restart").
                    for &i in &nodes {
                        lock.nodes[i].kill();
                    }
                    tokio::time::sleep(ttl * 2).await;
                    for &i in &nodes {
                        remove_persistence(lock.nodes[i].dir());
                        lock.nodes[i].restart()?;
                    }
                }
            }
            "stall" => {
                // The lock server(s) frozen for longer than the TTL: keys expire meanwhile.
                nodes = lock.minority(rng);
                for &i in &nodes {
                    lock.nodes[i].pause()?;
                }
                tokio::time::sleep(ttl * 2).await;
                for &i in &nodes {
                    lock.nodes[i].resume()?;
                }
            }
            _ => {
                failover(lock, ttl).await?;
                nodes = vec![0];
            }
        }
        self.faults.push(Fault {
            kind,
            worker,
            nodes,
            start,
            end: now_ms(),
        });
        Ok(())
    }
}

/// Deletes a stopped server's data files, so it restarts empty.
fn remove_persistence(dir: &Path) {
    let _ = std::fs::remove_dir_all(dir.join("appendonlydir"));
    let _ = std::fs::remove_file(dir.join("appendonly.aof"));
    let _ = std::fs::remove_file(dir.join("dump.rdb"));
}

/// The replication hazard: the link to the replica is cut (the replica is stopped and its
/// connection killed, so nothing more reaches it), a worker acquires on the master, the master
/// dies, the replica is promoted and the workers move to it, where the lock is free. The master
/// is killed only once the lock the replica knows of (the holder at the cut) has expired, so
/// that the new master's lock is free while the last holder still works: this is the failover
/// that lets two holders in. A fresh replica of the new master is started for the next one.
async fn failover(lock: &mut LockServers, ttl: Duration) -> anyhow::Result<()> {
    let Some(replica) = lock.replica.take() else {
        return Ok(());
    };
    let master = &lock.nodes[0];
    let token_now = |s: &Server| {
        s.command(&["GET", LOCK_KEY])
            .ok()
            .and_then(|v| v.as_bytes().map(<[u8]>::to_vec))
    };
    // The lock as the replica will know it: the holder at the cut, until its TTL runs out
    // (the replica's clock keeps running while it is stopped).
    let at_cut = token_now(master);
    let pttl = master
        .command(&["PTTL", LOCK_KEY])
        .ok()
        .and_then(|v| v.as_integer())
        .unwrap_or(0)
        .max(0) as f64;
    replica.pause()?;
    master.command(&["CLIENT", "KILL", "TYPE", "replica"])?;
    let replica_key_gone = now_ms() + pttl + 5.0;
    // Kill the master once the replica's copy of the lock has expired while a holder the
    // replica never heard of holds it on the master (a few TTLs at most).
    let deadline = replica_key_gone + 4.0 * ttl.as_secs_f64() * 1000.0;
    while now_ms() < deadline {
        let t = token_now(master);
        if now_ms() >= replica_key_gone && t.is_some() && t != at_cut {
            break;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    lock.nodes[0].kill();
    replica.resume()?;
    replica.promote()?;
    lock.nodes[0] = replica;
    lock.promoted = true;
    // Tell the workers first: they are failing against the dead master meanwhile.
    lock.publish_urls()?;
    lock.replica = Some(lock.nodes[0].start_replica(&lock.options)?);
    Ok(())
}
