//! `leasehold-lab demo --scenario failover-sentinel`: the failover hazard with real sentinels. The
//! clients connect through the sentinels (`redis-sentinel://…#leasehold`), the sentinels promote
//! a replica that had not received the lock, and the same clients, never rebuilt, follow them to
//! the new primary, where a second holder gets the lock with the same fencing number.
//!
//! Throwaway servers only (it kills and promotes them): two Sentinel sets (a primary, its
//! replica, three sentinels each), and a separate server for the protected resource, which the
//! failovers must not touch. Every value printed is what a server answered or what the library
//! returned.
//!
//! 1. Without replica acknowledgement: replication is held back (the replica frozen and its link
//!    cut), A takes an auto-extended, fenced lock, the primary crashes, the sentinels promote the
//!    replica; B's client follows them and B acquires: two holders, one number. The fenced
//!    write's tie-break refuses A's write, and A's next renewal, through A's client (which
//!    follows the sentinels too), finds B's token: A's lease is reported lost, and A's
//!    token-checked release leaves B's lock alone.
//! 2. With `replica_ack(1, ...)`: the same partition makes A's acquisition fail
//!    (`NotReplicated`), so the failover leaves one holder.

use std::thread::ScopedJoinHandle;
use std::time::{Duration, Instant};

use anyhow::Context;
use leasehold::redis::{ClientConnection, FencedStore};
use leasehold::{Error, LockGuard, LockOptions, Locker, TryAcquire};
use leasehold_harness::{
    HarnessError, SentinelOptions, SentinelSet, Server, ServerBinary, ServerOptions,
};

use super::failover::{
    ACK_TIMEOUT, blocking, fenced_writes, freeze_replica, number, reply, show_lock,
};
use super::{LOCK_KEY, Stop, TTL_LONG};
use crate::exit::Interrupted;

/// How often A's auto-extended lease is renewed: TTL/2, so that the first renewal comes well
/// after the promotion (about 2 s here; several on a loaded machine) and B's acquisition.
const RENEW_EVERY: Duration = Duration::from_secs(15);
/// How long the demo waits for the sentinels to promote the replica (the harness allows
/// down-after + 4 x failover-timeout + 30 s for its own failovers; this is in the same range).
const PROMOTION_BOUND: Duration = Duration::from_secs(60);
/// How long B's client may take to reach the new primary once the sentinels name it.
const FOLLOW_BOUND: Duration = Duration::from_secs(30);
/// Pause between two looks at the sentinels, or two attempts of B's.
const POLL: Duration = Duration::from_millis(50);

/// Every server of the scenario.
struct Servers {
    first: SentinelSet,
    second: SentinelSet,
    resource: Server,
}

impl Servers {
    /// Starts both Sentinel sets (in parallel: each waits for its sentinels to find each
    /// other) and the resource server.
    fn start(bin: &ServerBinary) -> Result<Servers, HarnessError> {
        let options = SentinelOptions::new();
        std::thread::scope(|scope| {
            let first = scope.spawn(|| SentinelSet::start(bin, &options));
            let second = scope.spawn(|| SentinelSet::start(bin, &options));
            let resource = Server::start(bin, &ServerOptions::new());
            let join = |h: ScopedJoinHandle<'_, Result<SentinelSet, HarnessError>>| {
                h.join().unwrap_or_else(|_| {
                    Err(HarnessError::Protocol(
                        "a Sentinel set's start thread panicked".into(),
                    ))
                })
            };
            let (first, second) = (join(first), join(second));
            Ok(Servers {
                first: first?,
                second: second?,
                resource: resource?,
            })
        })
    }

    /// Every port, for the closing line.
    fn ports(&self) -> Vec<u16> {
        let mut ports = Vec::new();
        for set in [&self.first, &self.second] {
            ports.extend(set.data_nodes().iter().map(Server::port));
            ports.extend(set.sentinels().iter().map(Server::port));
        }
        ports.push(self.resource.port());
        ports
    }

    /// Stops the sentinels first (so that stopping a primary starts no failover), then the
    /// data nodes and the resource server.
    fn stop(&mut self) {
        for set in [&mut self.first, &mut self.second] {
            for i in 0..set.sentinels().len() {
                if let Ok(s) = set.sentinel_mut(i) {
                    s.stop();
                }
            }
            for i in 0..set.data_nodes().len() {
                if let Ok(n) = set.data_node_mut(i) {
                    n.stop();
                }
            }
        }
        self.resource.stop();
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
    let ports: Vec<String> = servers.ports().iter().map(u16::to_string).collect();
    tokio::task::spawn_blocking(move || servers.stop())
        .await
        .context("stopping the throwaway servers")?;
    let said = super::write_line(format_args!(
        "# stopped the throwaway servers ({label} on 127.0.0.1 ports {})",
        ports.join(", ")
    ));
    outcome.and(said)
}

/// The primary and the replica of a set, by data node index, as the sentinels see them now.
#[derive(Clone, Copy)]
struct Roles {
    primary: usize,
    replica: usize,
}

impl Roles {
    fn of(set: &SentinelSet) -> anyhow::Result<Roles> {
        let primary = blocking(|| set.primary_index()).context("asking the sentinels")?;
        let replica = (0..set.data_nodes().len())
            .find(|i| *i != primary)
            .context("the Sentinel set has no replica")?;
        Ok(Roles { primary, replica })
    }
}

fn node(set: &SentinelSet, i: usize) -> anyhow::Result<&Server> {
    set.data_node(i).context("no such data node")
}

/// What a sentinel answers when asked for the primary.
fn ask_sentinel(set: &SentinelSet) -> anyhow::Result<String> {
    let sentinel = set.sentinel(0).context("no sentinel")?;
    let answer = reply(
        sentinel,
        &["SENTINEL", "GET-MASTER-ADDR-BY-NAME", set.master_name()],
    )?;
    Ok(format!(
        "SENTINEL GET-MASTER-ADDR-BY-NAME {} -> {answer}",
        set.master_name()
    ))
}

/// The primary a client's connection talks to now (it moves only when the sentinels name
/// another one after a failed request).
fn talks_to(client: &Locker) -> String {
    match client.as_redis().map(|redis| redis.connection()) {
        Some(ClientConnection::Sentinel(c)) => c.primary_addr(),
        Some(other) => format!("(not a Sentinel connection: {other:?})"),
        None => format!("(not a Redis client: {})", client.backend()),
    }
}

/// A's and B's clients, each connected through the sentinels before anything happens; they are
/// never rebuilt.
async fn connect_clients(set: &SentinelSet) -> anyhow::Result<(Locker, Locker)> {
    let url = set.lock_url("redis-sentinel");
    let locks_a = Locker::connect(&url)
        .await
        .context("A connecting through the sentinels")?;
    let locks_b = Locker::connect(&url)
        .await
        .context("B connecting through the sentinels")?;
    say!(
        "# A and B connect through the sentinels, a client each: {url}; a sentinel answers {}; \
         A's client talks to {}, B's to {}",
        ask_sentinel(set)?,
        talks_to(&locks_a),
        talks_to(&locks_b)
    );
    Ok((locks_a, locks_b))
}

/// The primary crashes; the replica resumes; the sentinels notice and promote it. Polls the
/// sentinels until they name the replica and it reports `role:master`.
async fn fail_over(set: &mut SentinelSet, roles: Roles) -> anyhow::Result<()> {
    let crashed = Instant::now();
    blocking(|| set.data_node_mut(roles.primary).map(Server::kill)).context("the primary")?;
    blocking(|| {
        node(set, roles.replica)?
            .resume()
            .context("resuming the replica")
    })?;
    say!(
        "# the primary crashes (SIGKILL); the replica resumes; nobody promotes it by hand: the \
         sentinels notice the crash (down-after {} ms), agree and promote it",
        set.options().down_after_value().as_millis()
    );
    let new = node(set, roles.replica)?.addr();
    loop {
        let named = blocking(|| set.primary_addr()).ok();
        let master = blocking(|| -> anyhow::Result<String> {
            Ok(node(set, roles.replica)?.info("replication")?)
        })
        .is_ok_and(|info| info.lines().any(|l| l.trim() == "role:master"));
        if named == Some(new) && master {
            break;
        }
        if crashed.elapsed() > PROMOTION_BOUND {
            anyhow::bail!(
                "the sentinels did not promote the replica within {PROMOTION_BOUND:?}:\n{}",
                blocking(|| set.describe())
            );
        }
        tokio::time::sleep(POLL).await;
    }
    say!(
        "# promoted {:.1} s after the crash: a sentinel answers {}; the replica's INFO says \
         role:master",
        crashed.elapsed().as_secs_f64(),
        ask_sentinel(set)?
    );
    Ok(())
}

/// B's acquisition through B's client, which last talked to the crashed primary: its first
/// request may fail there, after which the client asks the sentinels again. Prints how it went.
async fn b_acquires(locks_b: &Locker) -> anyhow::Result<Option<LockGuard>> {
    let opts = LockOptions::new(TTL_LONG).fencing(true);
    let before = talks_to(locks_b);
    let deadline = Instant::now() + FOLLOW_BOUND;
    // The distinct errors of the failed attempts, and how many there were.
    let mut failed: Vec<String> = Vec::new();
    let mut attempts = 0usize;
    let outcome = loop {
        match locks_b.try_acquire(LOCK_KEY, &opts).await {
            Ok(outcome) => break outcome,
            Err(e @ Error::Connection { .. }) if Instant::now() < deadline => {
                attempts += 1;
                let e = e.to_string();
                if !failed.contains(&e) {
                    failed.push(e);
                }
                tokio::time::sleep(POLL).await;
            }
            Err(e) => return Err(e).context("B acquiring on the new primary"),
        }
    };
    let after = talks_to(locks_b);
    match attempts {
        0 => say!(
            "# B's client (the same one, not rebuilt) had talked to {before} and now talks to \
             {after}"
        ),
        n => say!(
            "# B's client (the same one, not rebuilt) had talked to {before}: {n} attempt{} failed \
             ({}); it asked the sentinels again and now talks to {after}",
            if n == 1 { "" } else { "s" },
            failed.join(" / "),
        ),
    }
    let b = match outcome {
        TryAcquire::Acquired(g) => {
            say!(
                "B acquires {LOCK_KEY} on the new primary: true | fencing number: {}",
                number(&g)
            );
            Some(g)
        }
        TryAcquire::Busy { .. } => {
            say!("B acquires {LOCK_KEY} on the new primary: false (busy)");
            None
        }
    };
    Ok(b)
}

/// A's view and the new primary's side by side.
fn two_holders(
    primary: &Server,
    a: Option<&LockGuard>,
    b: Option<&LockGuard>,
) -> anyhow::Result<()> {
    let a_held = a.is_some_and(LockGuard::is_held);
    let held = reply(primary, &["GET", LOCK_KEY])?;
    let b_held = b.is_some_and(|b| held.as_str() == Some(b.token().expose()));
    say!(
        "A holds a valid lease: {a_held} | the new primary holds B's token: {b_held} | two \
         holders at once: {}",
        a_held && b_held
    );
    Ok(())
}

async fn scenario(servers: &mut Servers, label: &str, why: &str) -> anyhow::Result<()> {
    say!(
        "# leasehold demo --scenario failover-sentinel: the sentinels promote a replica that had \
         not received the lock"
    );
    let set = &servers.first;
    let roles = Roles::of(set)?;
    let sentinels: Vec<String> = set
        .sentinels()
        .iter()
        .map(|s| s.port().to_string())
        .collect();
    say!(
        "# servers: {label}, throwaway processes started for this demo ({why}) and stopped at \
         the end: primary 127.0.0.1:{} with its replica 127.0.0.1:{}, watched by {} sentinels \
         (127.0.0.1 ports {}) as master {:?}; the protected resource on 127.0.0.1:{}, a separate \
         server the failover does not touch",
        node(set, roles.primary)?.port(),
        node(set, roles.replica)?.port(),
        sentinels.len(),
        sentinels.join(", "),
        set.master_name(),
        servers.resource.port()
    );
    let store = FencedStore::connect(&servers.resource.url())
        .await
        .context("connecting to the resource server")?;
    without_ack(&mut servers.first, &store).await?;
    with_ack(&mut servers.second).await
}

/// Part 1, the default: no acknowledgement; the failover makes two holders; fencing keeps A
/// out and A's renewal reports the loss.
async fn without_ack(set: &mut SentinelSet, store: &FencedStore) -> anyhow::Result<()> {
    say!("# 1) without replica acknowledgement (the default)");
    let roles = Roles::of(set)?;
    let (locks_a, locks_b) = connect_clients(set).await?;
    freeze_replica(
        node(set, roles.primary)?,
        node(set, roles.replica)?,
        "primary",
    )?;
    say!(
        "# (SIGSTOP alone would not do: the primary would still write the lock into the frozen \
         replica's socket buffer, and the replica would apply it when it wakes up)"
    );
    let opts = LockOptions::new(TTL_LONG)
        .fencing(true)
        .auto_extend(true)
        .renew_every(RENEW_EVERY);
    let a = locks_a.try_acquire(LOCK_KEY, &opts).await?.acquired();
    match &a {
        Some(g) => say!(
            "A acquires {LOCK_KEY} on the primary: true | fencing number: {} | auto-extended: \
             TTL {} s, renewed every {} s",
            number(g),
            TTL_LONG.as_secs(),
            RENEW_EVERY.as_secs()
        ),
        None => say!("A acquires {LOCK_KEY} on the primary: false (busy)"),
    }
    fail_over(set, roles).await?;
    show_lock(node(set, roles.replica)?, "the new primary")?;
    let b = b_acquires(&locks_b).await?;
    two_holders(node(set, roles.replica)?, a.as_ref(), b.as_ref())?;
    fenced_writes(store, a.as_ref(), b.as_ref()).await?;

    if let Some(a) = a {
        say!(
            "# A's lease is auto-extended: its next renewal (due {} s after the acquisition) goes \
             through A's client, which has not talked to the servers since the crash and was not \
             rebuilt either; waiting for lost()",
            RENEW_EVERY.as_secs()
        );
        let reported = tokio::time::timeout(TTL_LONG + FOLLOW_BOUND, a.lost())
            .await
            .is_ok();
        say!(
            "A's lease reported lost: {reported} | reason: {} | A's client now talks to {} | A \
             holds a valid lease: {}",
            a.loss_reason()
                .map_or_else(|| "none".to_string(), |r| r.to_string()),
            talks_to(&locks_a),
            a.is_held()
        );
        // The release is token-checked: it cannot delete B's lock. (Releasing, rather than
        // detaching, also takes the lost lease off the renewer at once.)
        let released = match a.release().await {
            Ok(()) => "Ok".to_string(),
            Err(e @ Error::NotHeld { .. }) => format!("NotHeld ({e})"),
            Err(e) => return Err(e).context("A releasing"),
        };
        say!(
            "A releases: {released} | the new primary still holds B's token: {}",
            {
                let held = reply(node(set, roles.replica)?, &["GET", LOCK_KEY])?;
                b.as_ref()
                    .is_some_and(|b| held.as_str() == Some(b.token().expose()))
            }
        );
    }
    if let Some(b) = b {
        b.release().await.context("B releasing")?;
    }
    Ok(())
}

/// Part 2, with `replica_ack(1, ...)`: the same partition makes A's acquisition fail.
async fn with_ack(set: &mut SentinelSet) -> anyhow::Result<()> {
    let roles = Roles::of(set)?;
    let sentinels: Vec<String> = set
        .sentinels()
        .iter()
        .map(|s| s.port().to_string())
        .collect();
    say!(
        "# 2) the same with replica_ack(1, {} ms): the acquisition counts only once 1 replica \
         acknowledged it (WAIT 1 {}); a fresh primary 127.0.0.1:{} and replica 127.0.0.1:{} \
         with sentinels on ports {}",
        ACK_TIMEOUT.as_millis(),
        ACK_TIMEOUT.as_millis(),
        node(set, roles.primary)?.port(),
        node(set, roles.replica)?.port(),
        sentinels.join(", ")
    );
    let (locks_a, locks_b) = connect_clients(set).await?;
    freeze_replica(
        node(set, roles.primary)?,
        node(set, roles.replica)?,
        "primary",
    )?;
    let opts = LockOptions::new(TTL_LONG)
        .fencing(true)
        .replica_ack(1, ACK_TIMEOUT);
    let a = match locks_a.try_acquire(LOCK_KEY, &opts).await {
        Ok(TryAcquire::Acquired(g)) => {
            say!(
                "A acquires {LOCK_KEY} on the primary: true | fencing number: {} (acknowledged)",
                number(&g)
            );
            Some(g)
        }
        Ok(TryAcquire::Busy { .. }) => {
            say!("A acquires {LOCK_KEY} on the primary: false (busy)");
            None
        }
        Err(Error::NotReplicated { acked, wanted, .. }) => {
            say!(
                "A acquires {LOCK_KEY} on the primary: false | NotReplicated: {acked} of {wanted} \
                 replicas acknowledged within {} ms; the library released the lock again",
                ACK_TIMEOUT.as_millis()
            );
            None
        }
        Err(e) => return Err(e).context("A acquiring with replica acknowledgement"),
    };
    show_lock(node(set, roles.primary)?, "the primary")?;
    fail_over(set, roles).await?;
    let b = b_acquires(&locks_b).await?;
    two_holders(node(set, roles.replica)?, a.as_ref(), b.as_ref())?;
    if let Some(b) = b {
        b.release().await.context("B releasing")?;
    }
    if let Some(a) = a {
        let _ = a.detach();
    }
    Ok(())
}
