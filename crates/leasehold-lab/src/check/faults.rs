//! The faults of `leasehold-lab check`: the seeded schedule's generator, and the injector that
//! pauses or kills holders itself and hands server faults to the lock servers of the topology
//! (`servers`), remembering what it did.

use std::path::Path;
use std::time::Duration;

use nix::sys::signal::{Signal, kill};

use super::analyze::Fault;
use super::fleet::Fleet;
use super::servers::LockServers;
use super::worker::now_ms;

/// Every fault kind `--faults` takes, whatever the backend and topology (`Backend::faults`
/// and `Topology::faults` say which apply to which).
pub(crate) const FAULTS: &[&str] = &[
    "pause",
    "kill",
    "restart",
    "restart-aof",
    "restart-noaof",
    "stall",
    "failover",
    "migrate",
    "migrate-held",
    "slow-link",
    "clock-jump",
    "kill-primary",
    "member-kill",
    "member-pause",
    "leader-kill",
];

/// How long a `pause` or `kill` waits for the holder the etcd or PostgreSQL backend names to
/// show up in the holders file (redis: not at all, as always).
const HOLDER_LOG_WAIT_MS: f64 = 250.0;

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

/// Injects the faults, in turn, and remembers what it did.
pub(crate) struct Injector {
    ttl: Duration,
    /// Every fault injected so far, with when it was active.
    pub(crate) faults: Vec<Fault>,
}

impl Injector {
    pub(crate) fn new(ttl: Duration) -> Injector {
        Injector {
            ttl,
            faults: Vec::new(),
        }
    }

    /// Injects one fault of `kind` (one of the backend's or topology's faults) and records it;
    /// a `pause` or `kill` when no worker is left does nothing.
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
                let token = lock.holder_token().await;
                if !lock.is_redis()
                    && let Some(token) = &token
                {
                    // etcd's holder is the first entry of the lock's queue, which a waiter
                    // owns a few round trips (a lease grant, a guarded put) before its
                    // acquisition returns and it logs its token: give it that long.
                    let deadline = now_ms() + HOLDER_LOG_WAIT_MS;
                    while fleet.with_token(token, holders).is_none() && now_ms() < deadline {
                        tokio::time::sleep(Duration::from_millis(2)).await;
                    }
                }
                let Some((id, pid)) = fleet.holder(token, holders, rng) else {
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
            _ => (kind, nodes) = lock.inject(&kind, ttl, rng).await?,
        }
        // A server fault's member role (etcd); a pause or kill has none.
        let role = if nodes.is_empty() {
            None
        } else {
            lock.last_role().map(String::from)
        };
        self.faults.push(Fault {
            kind,
            worker,
            nodes,
            role,
            start,
            end: now_ms(),
        });
        Ok(())
    }
}
