//! `leasehold-lab demo --scenario failover`: a single lock server fails over to a replica that had
//! not received the lock, and two clients hold it at once.
//!
//! Throwaway servers only (it kills and promotes them): two lock masters with a replica each, and
//! a separate server for the protected resource, which the failovers must not touch. Every value
//! printed is what a server answered or what the library returned.
//!
//! 1. Without replica acknowledgement: replication is held back, A acquires on the master, the
//!    master crashes, the replica is promoted without A's lock and without the fencing counter's
//!    last `INCR`; B acquires and gets A's number. The fenced write's tie-break (equal number,
//!    another token: rejected) keeps A's stale write out.
//! 2. With `replica_ack(1, ...)`: the same partition makes A's acquisition fail
//!    (`NotReplicated`), so the failover leaves one holder.

use std::time::Duration;

use anyhow::Context;
use leasehold::redis::{FencedStore, fence_key};
use leasehold::{FencedWrite, LockGuard, LockOptions, Locker, TryAcquire};
use leasehold_harness::{HarnessError, RespValue, Server, ServerBinary, ServerOptions};

use super::{LOCK_KEY, RESOURCE_KEY, Stop, TTL_LONG};
use crate::exit::Interrupted;

/// How long an acknowledged acquisition waits for its replica (`WAIT 1 <ms>`).
pub(super) const ACK_TIMEOUT: Duration = Duration::from_millis(500);

/// A lock server and its replica.
struct Pair {
    master: Server,
    replica: Server,
}

/// Every server of the scenario.
struct Servers {
    first: Pair,
    second: Pair,
    resource: Server,
}

impl Servers {
    fn start(bin: &ServerBinary) -> Result<Servers, HarnessError> {
        let options = ServerOptions::new();
        let pair = || -> Result<Pair, HarnessError> {
            let master = Server::start(bin, &options)?;
            let replica = master.start_replica(&options)?;
            Ok(Pair { master, replica })
        };
        Ok(Servers {
            first: pair()?,
            second: pair()?,
            resource: Server::start(bin, &options)?,
        })
    }

    fn all_mut(&mut self) -> [&mut Server; 5] {
        [
            &mut self.first.master,
            &mut self.first.replica,
            &mut self.second.master,
            &mut self.second.replica,
            &mut self.resource,
        ]
    }
}

/// Runs the scenario on throwaway servers of `bin`, and stops them whatever happens.
pub(super) async fn run(bin: ServerBinary, why: String, stop: &mut Stop) -> anyhow::Result<()> {
    let label = bin.label();
    let starting = tokio::task::spawn_blocking(move || Servers::start(&bin));
    let mut servers = tokio::select! {
        started = starting => started.context("starting the servers")?,
        () = stop.requested() => return Err(Interrupted.into()),
    }
    .with_context(|| format!("cannot start the throwaway {label} servers"))?;
    let outcome = tokio::select! {
        r = scenario(&mut servers, &label, &why) => r,
        () = stop.requested() => Err(Interrupted.into()),
    };
    let ports: Vec<String> = servers
        .all_mut()
        .iter()
        .map(|s| s.port().to_string())
        .collect();
    tokio::task::spawn_blocking(move || {
        for server in servers.all_mut() {
            server.stop();
        }
    })
    .await
    .context("stopping the throwaway servers")?;
    let said = super::write_line(format_args!(
        "# stopped the throwaway servers ({label} on 127.0.0.1 ports {})",
        ports.join(", ")
    ));
    outcome.and(said)
}

async fn scenario(servers: &mut Servers, label: &str, why: &str) -> anyhow::Result<()> {
    say!(
        "# leasehold demo --scenario failover: a lock server fails over to a replica that had \
         not received the lock"
    );
    say!(
        "# servers: {label}, throwaway processes started for this demo ({why}) and stopped at \
         the end: lock master 127.0.0.1:{} with its replica 127.0.0.1:{}; the protected resource \
         on 127.0.0.1:{}, a separate server the failover does not touch",
        servers.first.master.port(),
        servers.first.replica.port(),
        servers.resource.port()
    );
    let store = FencedStore::connect(&servers.resource.url())
        .await
        .context("connecting to the resource server")?;
    without_ack(&mut servers.first, &store).await?;
    with_ack(&mut servers.second).await
}

/// Runs a harness call (synchronous socket I/O or process control) without stalling the other
/// tasks of a multi-threaded runtime.
pub(super) fn blocking<T>(f: impl FnOnce() -> T) -> T {
    match tokio::runtime::Handle::try_current().map(|h| h.runtime_flavor()) {
        Ok(tokio::runtime::RuntimeFlavor::MultiThread) => tokio::task::block_in_place(f),
        _ => f(),
    }
}

/// One command through the harness's own connection, its reply as redis-cli would show it.
pub(super) fn reply(server: &Server, args: &[&str]) -> anyhow::Result<RespValue> {
    blocking(|| server.command(args)).with_context(|| format!("sending {}", args.join(" ")))
}

/// Freezes the replica and cuts its link on the master, narrating the real replies.
fn hold_back_replication(pair: &Pair) -> anyhow::Result<()> {
    freeze_replica(&pair.master, &pair.replica, "master")
}

/// Freezes `replica` (SIGSTOP) and cuts its link on `master` (`CLIENT KILL TYPE replica`),
/// narrating the real replies; `word` is what the narration calls the master.
pub(super) fn freeze_replica(master: &Server, replica: &Server, word: &str) -> anyhow::Result<()> {
    blocking(|| replica.pause()).context("freezing the replica")?;
    let killed = reply(master, &["CLIENT", "KILL", "TYPE", "replica"])?;
    let info = blocking(|| master.info("replication")).context("INFO replication")?;
    let connected = info
        .lines()
        .map(str::trim)
        .find(|l| l.starts_with("connected_slaves:"))
        .unwrap_or("connected_slaves: (not reported)");
    say!(
        "# the replica is frozen (SIGSTOP) and its link cut on the {word}: CLIENT KILL TYPE \
         replica -> {killed}; the {word}'s INFO now says {connected}"
    );
    Ok(())
}

/// The master crashes; the replica resumes and is promoted.
fn fail_over(pair: &mut Pair) -> anyhow::Result<()> {
    blocking(|| pair.master.kill());
    blocking(|| pair.replica.resume()).context("resuming the replica")?;
    let promoted = reply(&pair.replica, &["REPLICAOF", "NO", "ONE"])?;
    say!(
        "# the master crashes (SIGKILL); the replica resumes and is promoted: REPLICAOF NO ONE \
         -> {promoted}"
    );
    Ok(())
}

/// `GET key` and `GET <fence counter>` on `server`, as one narrated line.
pub(super) fn show_lock(server: &Server, who: &str) -> anyhow::Result<()> {
    let fence = fence_key(LOCK_KEY);
    let lock = reply(server, &["GET", LOCK_KEY])?;
    let counter = reply(server, &["GET", &fence])?;
    say!("{who}: GET {LOCK_KEY} -> {lock} | GET {fence} -> {counter}");
    Ok(())
}

/// B's acquisition on the promoted replica; prints the outcome.
async fn b_acquires(pair: &Pair) -> anyhow::Result<(Locker, Option<LockGuard>)> {
    let locks_b = Locker::connect(&pair.replica.url())
        .await
        .context("B connecting to the new master")?;
    let opts = LockOptions::new(TTL_LONG).fencing(true);
    let b = match locks_b.try_acquire(LOCK_KEY, &opts).await? {
        TryAcquire::Acquired(g) => {
            say!(
                "B acquires {LOCK_KEY} on the new master: true | fencing number: {}",
                number(&g)
            );
            Some(g)
        }
        TryAcquire::Busy { .. } => {
            say!("B acquires {LOCK_KEY} on the new master: false (busy)");
            None
        }
    };
    Ok((locks_b, b))
}

/// A's view and the lock server's side by side: A's lease (still valid as far as A can tell: its
/// TTL has not run out) and whose token the new master holds.
fn two_holders(pair: &Pair, a: Option<&LockGuard>, b: Option<&LockGuard>) -> anyhow::Result<()> {
    let a_held = a.is_some_and(LockGuard::is_held);
    let held = reply(&pair.replica, &["GET", LOCK_KEY])?;
    let b_held = b.is_some_and(|b| held.as_str() == Some(b.token().expose()));
    say!(
        "A holds a valid lease: {a_held} | the new master holds B's token: {b_held} | two \
         holders at once: {}",
        a_held && b_held
    );
    Ok(())
}

pub(super) fn number(guard: &LockGuard) -> String {
    guard
        .fencing_token()
        .map_or_else(|| "none".to_string(), |n| n.to_string())
}

pub(super) fn shown(write: FencedWrite) -> String {
    match write {
        FencedWrite::Accepted => "accepted".to_string(),
        FencedWrite::Rejected { highest } => {
            format!("rejected (the resource's highest number: {highest})")
        }
    }
}

/// B, then A (stale), write to the fenced resource with the numbers they were given; prints
/// each outcome and what the resource holds.
pub(super) async fn fenced_writes(
    store: &FencedStore,
    a: Option<&LockGuard>,
    b: Option<&LockGuard>,
) -> anyhow::Result<()> {
    let fences = (a.and_then(LockGuard::fence), b.and_then(LockGuard::fence));
    if let (Some(fence_a), Some(fence_b)) = fences {
        say!(
            "# the counter's last INCR was lost with the lock; at the resource the first writer \
             of a number owns it, and an equal number from another token is refused"
        );
        let wrote = store.write(RESOURCE_KEY, &fence_b, "B").await?;
        say!(
            "B writes to the resource with fencing number {} -> {}",
            fence_b.number(),
            shown(wrote)
        );
        let wrote = store.write(RESOURCE_KEY, &fence_a, "A (stale)").await?;
        say!(
            "A (stale) writes to the resource with fencing number {} -> {}",
            fence_a.number(),
            shown(wrote)
        );
        match store.read(RESOURCE_KEY).await? {
            Some(v) => say!(
                "resource value = {} (written with fencing number {})",
                String::from_utf8_lossy(&v.value),
                v.fence
            ),
            None => say!("resource value = (none)"),
        }
    }
    Ok(())
}

/// 1) The default: no acknowledgement; the failover makes two holders; fencing keeps A out.
async fn without_ack(pair: &mut Pair, store: &FencedStore) -> anyhow::Result<()> {
    say!("# 1) without replica acknowledgement (the default)");
    let locks_a = Locker::connect(&pair.master.url())
        .await
        .context("A connecting to the master")?;
    hold_back_replication(pair)?;
    say!(
        "# (SIGSTOP alone would not do: the master would still write the lock into the frozen \
         replica's socket buffer, and the replica would apply it when it wakes up)"
    );
    let opts = LockOptions::new(TTL_LONG).fencing(true);
    let a = locks_a.try_acquire(LOCK_KEY, &opts).await?.acquired();
    match &a {
        Some(g) => say!(
            "A acquires {LOCK_KEY} on the master: true | fencing number: {}",
            number(g)
        ),
        None => say!("A acquires {LOCK_KEY} on the master: false (busy)"),
    }
    fail_over(pair)?;
    show_lock(&pair.replica, "the new master")?;
    let (_locks_b, b) = b_acquires(pair).await?;
    two_holders(pair, a.as_ref(), b.as_ref())?;

    fenced_writes(store, a.as_ref(), b.as_ref()).await?;
    if let Some(b) = b {
        b.release().await.context("B releasing")?;
    }
    // A's server is gone: nothing to release there.
    if let Some(a) = a {
        let _ = a.detach();
    }
    Ok(())
}

/// 2) With `replica_ack(1, ...)`: the same partition makes A's acquisition fail.
async fn with_ack(pair: &mut Pair) -> anyhow::Result<()> {
    say!(
        "# 2) the same with replica_ack(1, {} ms): the acquisition counts only once 1 replica \
         acknowledged it (WAIT 1 {}); a fresh master 127.0.0.1:{} and replica 127.0.0.1:{}",
        ACK_TIMEOUT.as_millis(),
        ACK_TIMEOUT.as_millis(),
        pair.master.port(),
        pair.replica.port()
    );
    let locks_a = Locker::connect(&pair.master.url())
        .await
        .context("A connecting to the master")?;
    hold_back_replication(pair)?;
    let opts = LockOptions::new(TTL_LONG)
        .fencing(true)
        .replica_ack(1, ACK_TIMEOUT);
    let a = match locks_a.try_acquire(LOCK_KEY, &opts).await {
        Ok(TryAcquire::Acquired(g)) => {
            say!(
                "A acquires {LOCK_KEY} on the master: true | fencing number: {} (acknowledged)",
                number(&g)
            );
            Some(g)
        }
        Ok(TryAcquire::Busy { .. }) => {
            say!("A acquires {LOCK_KEY} on the master: false (busy)");
            None
        }
        Err(leasehold::Error::NotReplicated { acked, wanted, .. }) => {
            say!(
                "A acquires {LOCK_KEY} on the master: false | NotReplicated: {acked} of {wanted} \
                 replicas acknowledged within {} ms; the library released the lock again",
                ACK_TIMEOUT.as_millis()
            );
            None
        }
        Err(e) => return Err(e).context("A acquiring with replica acknowledgement"),
    };
    show_lock(&pair.master, "the master")?;
    fail_over(pair)?;
    let (_locks_b, b) = b_acquires(pair).await?;
    two_holders(pair, a.as_ref(), b.as_ref())?;
    if let Some(b) = b {
        b.release().await.context("B releasing")?;
    }
    if let Some(a) = a {
        let _ = a.detach();
    }
    Ok(())
}
