//! Auto-extension: many leases on one client kept alive together, and a loss reported at once.
//!
//! **What it guarantees.** While a lease is registered, the renewer sends the token-checked
//! extend (see [`crate::strategy`]) every `interval` (default TTL/3). A lease is declared
//! **lost** (its [`Lease::lost`] future resolves, its [`Lease::lost_token`] is cancelled, and
//! [`Lease::is_held`] turns false) as soon as
//! - a renewal finds the key gone or holding another token (or of another type), or
//! - its validity deadline passes without a successful renewal (server unreachable, stalled,
//!   or too slow): the validity is measured from *before* the last successful renewal was sent,
//!   minus [`clock_drift`](crate::clock_drift), so when it runs out the server may already have
//!   expired the key and handed it to someone else.
//!
//! So a holder that keeps watching `lost()` never believes it holds a lock that the server could
//! have given away, provided its process is not paused (a paused process cannot watch anything:
//! that is what fencing is for) and the server's clock does not run more than 1% fast.
//!
//! **Cost.** One task per client; every tick sends one pipeline carrying every lease that is due
//! (a lease due within a quarter of its interval rides along early), so 10 000 leases cost a few
//! round trips per renewal period, not 10 000.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use redis::Value;
use tokio::sync::mpsc;

use crate::connection::ClientConnection;
use crate::guard::{Lease, LossReason};
use crate::strategy::{EXTEND_SCRIPT, ExtendStrategy, extend_cmd};

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
}

/// The handle a client keeps; the task ends when the client (all clones) and every registered
/// lease are gone.
pub(crate) struct Renewer {
    tx: mpsc::UnboundedSender<Registration>,
    pub(crate) stats: Arc<RenewalStats>,
}

impl Renewer {
    pub(crate) fn spawn(conn: ClientConnection, strategy: ExtendStrategy) -> Renewer {
        let (tx, rx) = mpsc::unbounded_channel();
        let stats = Arc::new(RenewalStats::default());
        tokio::spawn(run(conn, strategy, rx, stats.clone()));
        Renewer { tx, stats }
    }

    pub(crate) fn register(&self, registration: Registration) {
        // The task only stops after this sender is dropped, so sending cannot fail.
        let _ = self.tx.send(registration);
    }
}

struct Entry {
    lease: Lease,
    ttl: Duration,
    ttl_ms: u64,
    interval: Duration,
    due: Instant,
    stop_at: Option<Instant>,
    in_flight: bool,
}

enum Outcome {
    Renewed,
    NotHeld,
    Retry,
}

async fn run(
    conn: ClientConnection,
    strategy: ExtendStrategy,
    mut registrations: mpsc::UnboundedReceiver<Registration>,
    stats: Arc<RenewalStats>,
) {
    let (done_tx, mut done_rx) = mpsc::unbounded_channel::<(Instant, Vec<(u64, Outcome)>)>();
    let mut entries: HashMap<u64, Entry> = HashMap::new();
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
                            e.lease.renewed(started, e.ttl);
                            e.due = started + e.interval;
                        }
                        Outcome::NotHeld => {
                            if e.lease.mark_lost(LossReason::NotHeld) {
                                stats.lost.fetch_add(1, Ordering::Relaxed);
                            }
                        }
                        // Try again soon; the validity deadline still bounds the wait.
                        Outcome::Retry => {
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
                        ttl: r.ttl,
                        interval: r.interval,
                        stop_at: r.stop_at,
                        in_flight: false,
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
            if e.lease.is_ended() {
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
                batch.push((
                    *id,
                    e.lease.key().to_string(),
                    e.lease.token().expose().to_string(),
                    e.ttl_ms,
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
        stats.rounds.fetch_add(1, Ordering::Relaxed);
        let mut conn = conn.clone();
        let done = done_tx.clone();
        tokio::spawn(async move {
            let started = Instant::now();
            let outcomes = renew_batch(&mut conn, strategy, &batch).await;
            let _ = done.send((started, outcomes));
        });
    }
}

/// One pipeline for the whole batch; each reply decides its lease.
async fn renew_batch(
    conn: &mut ClientConnection,
    strategy: ExtendStrategy,
    batch: &[(u64, String, String, u64)],
) -> Vec<(u64, Outcome)> {
    let mut pipe = redis::pipe();
    pipe.ignore_errors();
    for (_, key, token, ttl_ms) in batch {
        match extend_cmd(strategy, key, token, *ttl_ms) {
            Some(cmd) => pipe.add_command(cmd),
            None => pipe
                .cmd("EVALSHA")
                .arg(EXTEND_SCRIPT.get_hash())
                .arg(1)
                .arg(key)
                .arg(token)
                .arg(*ttl_ms),
        };
    }
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
            let outcome = match reply {
                Value::Okay | Value::Int(1) => Outcome::Renewed,
                Value::SimpleString(s) if s == "OK" => Outcome::Renewed,
                Value::Nil | Value::Int(0) => Outcome::NotHeld,
                Value::ServerError(e) if e.code() == "NOSCRIPT" => {
                    reload = true;
                    Outcome::Retry
                }
                // WRONGTYPE and the like: the key is not our lock any more.
                Value::ServerError(e) => {
                    tracing::warn!(key, error = %e.details().unwrap_or(e.code()), "renewal refused by the server");
                    Outcome::NotHeld
                }
                other => {
                    tracing::warn!(key, reply = ?other, "unexpected renewal reply");
                    Outcome::Retry
                }
            };
            (*id, outcome)
        })
        .collect();
    if reload {
        let _ = EXTEND_SCRIPT.prepare_invoke().load_async(conn).await;
    }
    outcomes
}
