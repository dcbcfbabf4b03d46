//! Auto-extension: many leases on one client kept alive together, and a loss reported at once.
//!
//! **What it guarantees.** While a lease is registered, the renewer sends the token-checked
//! extend (see `src/redis/strategy`) every `interval` (default TTL/3). A lease is declared
//! **lost** (its [`Lease::lost`] future resolves, its [`Lease::lost_token`] is cancelled, and
//! [`Lease::is_held`] turns false) as soon as
//! - a renewal finds the key gone or holding another token (or of another type), or
//! - its validity deadline passes without a successful renewal (server unreachable, stalled,
//!   or too slow): the validity is measured from *before* the last successful renewal was sent,
//!   minus [`clock_drift`], so when it runs out the server may already have
//!   expired the key and handed it to someone else. A renewal is recorded when it is sent, and
//!   only its success reply raises the validity, never past the bound of an extend sent after
//!   it (an explicit [`LockGuard::extend`](crate::LockGuard::extend) racing the renewer): see
//!   the rule on the lease's validity in `guard.rs`.
//!
//! So a holder that keeps watching `lost()` never believes it holds a lock that the server could
//! have given away, provided its process is not paused (a paused process cannot watch anything:
//! that is what fencing is for) and the server's clock does not run more than 1% fast.
//!
//! **Cost.** One task per client; every tick sends one pipeline carrying every lease that is due
//! (a lease due within a quarter of its interval rides along early), so 10 000 leases cost a few
//! round trips per renewal period, not 10 000. On a Redis Cluster a pipeline must not cross
//! masters, so a tick sends one pipeline *per master*, grouped by the slot owners the renewer
//! learned from `CLUSTER SLOTS`; a lease whose slot moved meanwhile (`MOVED`/`ASK`, or its master
//! unreachable) is renewed on its own through the routed connection, which follows the
//! redirection, and the slot owners are read again before the next tick.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use futures_util::future::join_all;
use redis::Value;
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::SingleNodeRoutingInfo;
use tokio::sync::mpsc;

use crate::core::error::LossReason;
use crate::core::guard::{Lease, SentExtend, valid_until};
use crate::redis::connection::ClientConnection;
use crate::redis::scripts::{MULTI_EXTEND_SCRIPT, PERMIT_EXTEND_SCRIPT};
use crate::redis::strategy::{EXTEND_SCRIPT, ExtendStrategy, extend_cmd};

/// Counters of one client's renewer, for monitoring and benchmarks.
#[derive(Debug, Default)]
pub struct RenewalStats {
    rounds: AtomicU64,
    renewals: AtomicU64,
    lost: AtomicU64,
}

impl RenewalStats {
    /// Pipelines sent (round trips).
    pub fn rounds(&self) -> u64 {
        self.rounds.load(Ordering::Relaxed)
    }

    /// Successful renewals.
    pub fn renewals(&self) -> u64 {
        self.renewals.load(Ordering::Relaxed)
    }

    /// Leases declared lost.
    pub fn lost(&self) -> u64 {
        self.lost.load(Ordering::Relaxed)
    }
}

pub(crate) struct Registration {
    pub(crate) lease: Lease,
    pub(crate) ttl: Duration,
    pub(crate) interval: Duration,
    pub(crate) stop_at: Option<Instant>,
    pub(crate) target: RenewTarget,
}

/// What a renewal extends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum RenewTarget {
    /// The lock key (the lease's key) with the token-checked extend of `src/redis/strategy`.
    Lock,
    /// A semaphore permit: the token's entry in this sorted set (`src/redis/semaphore`).
    Permit(String),
    /// A multi-key lock whose keys share one hash slot: all of them, in one script, or none
    /// (`src/redis/multi`).
    Keys(Vec<String>),
}

/// The handle a client keeps; the task ends when the client (all clones) and every registered
/// lease are gone.
pub(crate) struct Renewer {
    tx: mpsc::UnboundedSender<Registration>,
}

impl Renewer {
    /// Starts the renewal task, counting into `stats` (the client's, so a handle taken before
    /// the first auto-extended lease counts too).
    pub(crate) fn spawn(
        conn: ClientConnection,
        strategy: ExtendStrategy,
        stats: Arc<RenewalStats>,
    ) -> Renewer {
        let (tx, rx) = mpsc::unbounded_channel();
        tokio::spawn(run(conn, strategy, rx, stats));
        Renewer { tx }
    }

    pub(crate) fn register(&self, registration: Registration) {
        // The task only stops after this sender is dropped, so sending cannot fail.
        let _ = self.tx.send(registration);
    }
}

struct Entry {
    lease: Lease,
    target: RenewTarget,
    ttl: Duration,
    ttl_ms: u64,
    interval: Duration,
    due: Instant,
    stop_at: Option<Instant>,
    in_flight: bool,
    /// The renewal in flight, recorded on the lease (dropped unconfirmed: see `SentExtend`).
    sent: Option<SentExtend>,
}

enum Outcome {
    Renewed,
    NotHeld,
    Retry,
    /// `NOSCRIPT`: load the extend script, then retry (only inside a batch).
    Reload,
    /// `MOVED`/`ASK`/`TRYAGAIN`/`CLUSTERDOWN`: the slot is elsewhere or moving (only inside a
    /// cluster batch).
    Redirected,
}

impl Outcome {
    /// What the renewer loop acts on.
    fn settled(self) -> Outcome {
        match self {
            Outcome::Reload | Outcome::Redirected => Outcome::Retry,
            other => other,
        }
    }
}

/// What one extend reply says about its lease.
fn outcome_of(key: &str, reply: Value) -> Outcome {
    match reply {
        Value::Okay | Value::Int(1) => Outcome::Renewed,
        Value::SimpleString(s) if s == "OK" => Outcome::Renewed,
        Value::Nil | Value::Int(0) => Outcome::NotHeld,
        Value::ServerError(e) if e.code() == "NOSCRIPT" => Outcome::Reload,
        Value::ServerError(e)
            if matches!(e.code(), "MOVED" | "ASK" | "TRYAGAIN" | "CLUSTERDOWN") =>
        {
            Outcome::Redirected
        }
        // The server cannot take writes right now (a failover demoted it, it is loading, its
        // primary is down): not an answer about the key. Retry; the Sentinel connection moves
        // to the new primary, and the validity deadline bounds the retries.
        Value::ServerError(e) if matches!(e.code(), "READONLY" | "LOADING" | "MASTERDOWN") => {
            tracing::debug!(key, error = %e.code(), "renewal not possible on this server now; retrying");
            Outcome::Retry
        }
        // WRONGTYPE and the like: the key is not our lock any more.
        Value::ServerError(e) => {
            crate::core::throttle::warn_throttled!(key, error = %e.details().unwrap_or(e.code()), "renewal refused by the server");
            Outcome::NotHeld
        }
        other => {
            crate::core::throttle::warn_throttled!(key, reply = ?other, "unexpected renewal reply");
            Outcome::Retry
        }
    }
}

async fn run(
    conn: ClientConnection,
    strategy: ExtendStrategy,
    mut registrations: mpsc::UnboundedReceiver<Registration>,
    stats: Arc<RenewalStats>,
) {
    let (done_tx, mut done_rx) = mpsc::unbounded_channel::<(Instant, Vec<(u64, Outcome)>)>();
    let mut entries: HashMap<u64, Entry> = HashMap::new();
    let owners = SlotOwners::default();
    let mut next_id = 0u64;
    let mut open = true;
    // When the next scan is needed. Events only pull it earlier; the O(n) scan runs at timer
    // wake-ups only, a few per renewal interval, never once per registration.
    let mut wake: Option<Instant> = None;
    let earlier = |wake: &mut Option<Instant>, at: Instant| {
        *wake = Some(wake.map_or(at, |w| w.min(at)));
    };
    loop {
        let sleep = async {
            match wake {
                Some(at) => tokio::time::sleep_until(at.into()).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            biased;
            Some((started, outcomes)) = done_rx.recv() => {
                for (id, outcome) in outcomes {
                    let Some(e) = entries.get_mut(&id) else { continue };
                    e.in_flight = false;
                    match outcome {
                        Outcome::Renewed => {
                            stats.renewals.fetch_add(1, Ordering::Relaxed);
                            crate::core::metrics::renewed();
                            let bound = valid_until(started, e.ttl);
                            if let Some(sent) = e.sent.take() {
                                sent.confirm(bound);
                            }
                            e.due = started + e.interval;
                        }
                        Outcome::NotHeld => {
                            if e.lease.mark_lost(LossReason::NotHeld) {
                                stats.lost.fetch_add(1, Ordering::Relaxed);
                            }
                            // Lost for good: stop renewing it (kept, it would be resent at
                            // every scan until its validity ran out).
                            entries.remove(&id);
                            continue;
                        }
                        // Try again soon; the validity deadline still bounds the wait.
                        // The renewal is settled unconfirmed (kept pending until its bound).
                        Outcome::Retry | Outcome::Reload | Outcome::Redirected => {
                            e.sent = None;
                            e.due = Instant::now() + (e.interval / 8).max(Duration::from_millis(5));
                        }
                    }
                    earlier(&mut wake, e.due);
                }
                continue;
            }
            registration = registrations.recv(), if open => {
                let mut next = registration;
                loop {
                    let Some(r) = next else {
                        open = false;
                        break;
                    };
                    let due = Instant::now() + r.interval;
                    earlier(&mut wake, due.min(r.lease.valid_until()));
                    entries.insert(next_id, Entry {
                        ttl_ms: r.ttl.as_millis() as u64,
                        due,
                        lease: r.lease,
                        target: r.target,
                        ttl: r.ttl,
                        interval: r.interval,
                        stop_at: r.stop_at,
                        in_flight: false,
                        sent: None,
                    });
                    next_id += 1;
                    match registrations.try_recv() {
                        Ok(r) => next = Some(r),
                        Err(mpsc::error::TryRecvError::Empty) => break,
                        Err(mpsc::error::TryRecvError::Disconnected) => next = None,
                    }
                }
                if open || !entries.is_empty() {
                    continue;
                }
            }
            _ = sleep => {}
        }

        // The scan: drop released leases, declare overdue ones lost, renew what is due.
        let now = Instant::now();
        entries.retain(|_, e| {
            if e.lease.is_ended() || e.lease.loss_reason().is_some() {
                return false;
            }
            if now >= e.lease.valid_until() {
                if e.lease.mark_lost(LossReason::Expired) {
                    stats.lost.fetch_add(1, Ordering::Relaxed);
                }
                return false;
            }
            true
        });
        if !open && entries.is_empty() {
            return;
        }
        let mut batch = Vec::new();
        wake = None;
        for (id, e) in entries.iter_mut() {
            let renewing = e.stop_at.is_none_or(|s| now < s);
            if !e.in_flight && renewing && e.due <= now + e.interval / 4 {
                e.in_flight = true;
                // Recorded as sent now (before it leaves): until its reply says it succeeded,
                // the validity is at most this extend's bound.
                e.sent = Some(e.lease.extend_sent(now, valid_until(now, e.ttl)));
                let key = match &e.target {
                    RenewTarget::Lock => e.lease.key().to_string(),
                    RenewTarget::Permit(set) => set.clone(),
                    RenewTarget::Keys(keys) => keys.first().cloned().unwrap_or_default(),
                };
                batch.push((
                    *id,
                    key,
                    e.lease.token().expose().to_string(),
                    e.ttl_ms,
                    e.target.clone(),
                ));
            }
            earlier(&mut wake, e.lease.valid_until());
            if !e.in_flight && renewing {
                earlier(&mut wake, e.due);
            }
        }
        if batch.is_empty() {
            continue;
        }
        let mut conn = conn.clone();
        let done = done_tx.clone();
        let stats = stats.clone();
        let owners = owners.clone();
        let started = now;
        tokio::spawn(async move {
            let outcomes = match &mut conn {
                ClientConnection::Cluster(cluster) => {
                    renew_cluster_batch(cluster, &owners, strategy, &batch, &stats).await
                }
                single => {
                    stats.rounds.fetch_add(1, Ordering::Relaxed);
                    renew_batch(single, strategy, &batch).await
                }
            };
            let _ = done.send((started, outcomes));
        });
    }
}

/// Leases due: id, the key to send the renewal to (for routing), token, TTL, and what to renew.
type Batch = [(u64, String, String, u64, RenewTarget)];

/// The extend command of one lease (the native one, or `EVALSHA` of the extend script; for a
/// semaphore permit, its extend script).
fn renewal_cmd(
    strategy: ExtendStrategy,
    key: &str,
    token: &str,
    ttl_ms: u64,
    target: &RenewTarget,
) -> redis::Cmd {
    match target {
        RenewTarget::Permit(_) => {
            return permit_extend_cmd(key, token, ttl_ms);
        }
        RenewTarget::Keys(keys) => return keys_extend_cmd(keys, token, ttl_ms),
        RenewTarget::Lock => {}
    }
    extend_cmd(strategy, key, token, ttl_ms).unwrap_or_else(|| {
        let mut c = redis::cmd("EVALSHA");
        c.arg(EXTEND_SCRIPT.get_hash())
            .arg(1)
            .arg(key)
            .arg(token)
            .arg(ttl_ms);
        c
    })
}

fn renewal_pipeline<'a>(
    strategy: ExtendStrategy,
    leases: impl Iterator<Item = &'a (u64, String, String, u64, RenewTarget)>,
) -> redis::Pipeline {
    let mut pipe = redis::pipe();
    pipe.ignore_errors();
    for (_, key, token, ttl_ms, target) in leases {
        pipe.add_command(renewal_cmd(strategy, key, token, *ttl_ms, target));
    }
    pipe
}

/// One pipeline for the whole batch; each reply decides its lease.
async fn renew_batch(
    conn: &mut ClientConnection,
    strategy: ExtendStrategy,
    batch: &Batch,
) -> Vec<(u64, Outcome)> {
    let pipe = renewal_pipeline(strategy, batch.iter());
    let replies: Vec<Value> = match pipe.query_async(conn).await {
        Ok(r) => r,
        Err(e) => {
            tracing::debug!(error = %e, leases = batch.len(), "renewal round failed; retrying");
            return batch.iter().map(|(id, ..)| (*id, Outcome::Retry)).collect();
        }
    };
    let mut reload = false;
    let outcomes = batch
        .iter()
        .zip(replies)
        .map(|((id, key, ..), reply)| {
            let outcome = outcome_of(key, reply);
            reload |= matches!(outcome, Outcome::Reload);
            (*id, outcome.settled())
        })
        .collect();
    if reload {
        load_scripts(conn).await;
    }
    outcomes
}

/// The renewer's view of which master owns each slot, from `CLUSTER SLOTS`; cleared when a reply
/// shows it is out of date.
#[derive(Clone, Default)]
struct SlotOwners(Arc<std::sync::Mutex<Option<OwnerMap>>>);

/// The master (`host`, `port`) of every slot, where known.
type OwnerMap = Arc<Vec<Option<(String, u16)>>>;

impl SlotOwners {
    fn get(&self) -> Option<OwnerMap> {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    fn set(&self, map: Option<OwnerMap>) {
        *self.0.lock().unwrap_or_else(|p| p.into_inner()) = map;
    }

    async fn fetch(conn: &mut ClusterConnection) -> Option<OwnerMap> {
        let reply: Value = redis::cmd("CLUSTER")
            .arg("SLOTS")
            .query_async(conn)
            .await
            .ok()?;
        let mut owners = vec![None; crate::redis::slot::SLOTS as usize];
        let Value::Array(ranges) = reply else {
            return None;
        };
        for range in ranges {
            let Value::Array(fields) = range else {
                continue;
            };
            let (Some(Value::Int(start)), Some(Value::Int(end)), Some(Value::Array(master))) =
                (fields.first(), fields.get(1), fields.get(2))
            else {
                continue;
            };
            let host = match master.first() {
                Some(Value::BulkString(h)) => String::from_utf8_lossy(h).into_owned(),
                Some(Value::SimpleString(h)) => h.clone(),
                _ => continue,
            };
            let Some(Value::Int(port)) = master.get(1) else {
                continue;
            };
            if host.is_empty() {
                continue;
            }
            for slot in (*start).max(0)..=(*end).min(crate::redis::slot::SLOTS as i64 - 1) {
                owners[slot as usize] = Some((host.clone(), *port as u16));
            }
        }
        Some(Arc::new(owners))
    }
}

/// A cluster tick: one pipeline per master (sent side by side), then the leases whose slot was
/// elsewhere one by one through the routed connection (which follows `MOVED`/`ASK`).
async fn renew_cluster_batch(
    conn: &mut ClusterConnection,
    owners: &SlotOwners,
    strategy: ExtendStrategy,
    batch: &Batch,
    stats: &RenewalStats,
) -> Vec<(u64, Outcome)> {
    let map = match owners.get() {
        Some(m) => Some(m),
        None => {
            let fetched = SlotOwners::fetch(conn).await;
            owners.set(fetched.clone());
            fetched
        }
    };
    let mut groups: HashMap<Option<(String, u16)>, Vec<usize>> = HashMap::new();
    for (i, (_, key, ..)) in batch.iter().enumerate() {
        let owner = map
            .as_ref()
            .and_then(|m| m[crate::redis::slot::key_slot(key) as usize].clone());
        groups.entry(owner).or_default().push(i);
    }
    let mut outcomes: Vec<Option<Outcome>> = (0..batch.len()).map(|_| None).collect();
    let mut unrouted = groups.remove(&None).unwrap_or_default();
    let sends = groups.into_iter().map(|(owner, members)| {
        let mut conn = conn.clone();
        let (host, port) = owner.expect("the unrouted group was taken out");
        let pipe = renewal_pipeline(strategy, members.iter().map(|&i| &batch[i]));
        async move {
            let route = SingleNodeRoutingInfo::ByAddress { host, port };
            let replies = conn.route_pipeline(pipe, 0, members.len(), route).await;
            (members, replies)
        }
    });
    let mut reload = false;
    let mut stale = false;
    for (members, replies) in join_all(sends).await {
        stats.rounds.fetch_add(1, Ordering::Relaxed);
        match replies {
            Ok(replies) if replies.len() == members.len() => {
                for (i, reply) in members.into_iter().zip(replies) {
                    match outcome_of(&batch[i].1, reply) {
                        Outcome::Redirected => {
                            stale = true;
                            unrouted.push(i);
                        }
                        Outcome::Reload => {
                            reload = true;
                            outcomes[i] = Some(Outcome::Retry);
                        }
                        o => outcomes[i] = Some(o),
                    }
                }
            }
            // The master is unreachable or answered oddly: its leases go one by one, routed
            // afresh (a promoted replica may own them now).
            other => {
                if let Err(e) = other {
                    tracing::debug!(error = %e, "cluster renewal pipeline failed; renewing one by one");
                }
                stale = true;
                unrouted.extend(members);
            }
        }
    }
    if stale || map.is_none() {
        owners.set(None);
    }
    // Routed one by one: the cluster connection follows MOVED/ASK and refreshes its own map.
    let singles = unrouted.into_iter().map(|i| {
        let mut conn = conn.clone();
        let (_, key, token, ttl_ms, target) = &batch[i];
        let cmd = renewal_cmd(strategy, key, token, *ttl_ms, target);
        async move {
            let reply: redis::RedisResult<Value> = cmd.query_async(&mut conn).await;
            (i, reply)
        }
    });
    for (i, reply) in join_all(singles).await {
        stats.rounds.fetch_add(1, Ordering::Relaxed);
        let key = &batch[i].1;
        outcomes[i] = Some(match reply {
            Ok(v) => outcome_of(key, v).settled(),
            Err(e) if e.code() == Some("NOSCRIPT") => {
                reload = true;
                Outcome::Retry
            }
            // The key holds something else than a lock: not ours any more.
            Err(e) if e.code() == Some("WRONGTYPE") => {
                crate::core::throttle::warn_throttled!(key, error = %e, "renewal refused by the server");
                Outcome::NotHeld
            }
            // Unreachable, redirected too often, or the slot is migrating: try again; the
            // validity deadline bounds the retries.
            Err(_) => Outcome::Retry,
        });
    }
    if reload {
        load_scripts(conn).await;
    }
    batch
        .iter()
        .zip(outcomes)
        .map(|((id, ..), o)| (*id, o.unwrap_or(Outcome::Retry)))
        .collect()
}

/// Loads the renewal scripts after a `NOSCRIPT` (a restart, a failover, a new shard).
async fn load_scripts<C: redis::aio::ConnectionLike>(conn: &mut C) {
    let _ = EXTEND_SCRIPT.prepare_invoke().load_async(conn).await;
    let _ = load_permit_scripts(conn).await;
    let _ = load_keys_scripts(conn).await;
}

/// The renewer's command for a permit (`EVALSHA` of the extend script).
fn permit_extend_cmd(permits_key: &str, token: &str, ttl_ms: u64) -> redis::Cmd {
    let mut c = redis::cmd("EVALSHA");
    c.arg(PERMIT_EXTEND_SCRIPT.get_hash())
        .arg(2)
        .arg(permits_key)
        .arg(crate::redis::slot::permits_limit_key(permits_key))
        .arg(token)
        .arg(ttl_ms);
    c
}

/// Loads the permit extend script (the renewer's, after a `NOSCRIPT`).
async fn load_permit_scripts<C: redis::aio::ConnectionLike>(
    conn: &mut C,
) -> redis::RedisResult<String> {
    PERMIT_EXTEND_SCRIPT.prepare_invoke().load_async(conn).await
}

/// The renewer's command for a one-slot multi-lock.
fn keys_extend_cmd(keys: &[String], token: &str, ttl_ms: u64) -> redis::Cmd {
    let mut c = redis::cmd("EVALSHA");
    c.arg(MULTI_EXTEND_SCRIPT.get_hash()).arg(keys.len());
    for k in keys {
        c.arg(k);
    }
    c.arg(token).arg(ttl_ms);
    c
}

/// Loads the extend script (the renewer's, after a `NOSCRIPT`).
async fn load_keys_scripts<C: redis::aio::ConnectionLike>(
    conn: &mut C,
) -> redis::RedisResult<String> {
    MULTI_EXTEND_SCRIPT.prepare_invoke().load_async(conn).await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn error(line: &str) -> Value {
        // Parse a real RESP error line, as the server would send it.
        let parsed: Value =
            redis::parse_redis_value(format!("-{line}\r\n").as_bytes()).expect("a RESP error");
        match parsed {
            Value::ServerError(e) => Value::ServerError(e),
            other => panic!("not an error: {other:?}"),
        }
    }

    #[test]
    fn only_an_answer_about_the_key_loses_a_lease() {
        assert!(matches!(outcome_of("k", Value::Okay), Outcome::Renewed));
        assert!(matches!(outcome_of("k", Value::Int(1)), Outcome::Renewed));
        assert!(matches!(outcome_of("k", Value::Nil), Outcome::NotHeld));
        assert!(matches!(outcome_of("k", Value::Int(0)), Outcome::NotHeld));
        assert!(matches!(
            outcome_of("k", error("WRONGTYPE Operation against a key")),
            Outcome::NotHeld
        ));
        // A demoted primary (a Sentinel failover), a loading or cut-off server: retry.
        for line in [
            "READONLY You can't write against a read only replica.",
            "LOADING Redis is loading the dataset in memory",
            "MASTERDOWN Link with MASTER is down",
        ] {
            assert!(
                matches!(outcome_of("k", error(line)), Outcome::Retry),
                "{line}"
            );
        }
        assert!(matches!(
            outcome_of("k", error("MOVED 3999 127.0.0.1:6381")),
            Outcome::Redirected
        ));
        assert!(matches!(
            outcome_of("k", error("NOSCRIPT No matching script")),
            Outcome::Reload
        ));
    }
}
