//! [`Locker::try_acquire`](crate::Locker::try_acquire) and [`Locker::acquire`](crate::Locker::acquire) of a fair lock: queue, and wait
//! for the handoff.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use crate::core::error::{Error, Result};
use crate::core::guard::{Lease, LockGuard, valid_until};
use crate::core::kind::{Backend, Taking};
use crate::core::options::LockOptions;
use crate::core::outcome::TryAcquire;
use crate::redis::client::RedisClient;
use crate::redis::handoff::{EarlyTerms, Tenure};
use crate::redis::slot::release_channel;
use crate::redis::slot::validate_name;
use crate::redis::waiting::Wake;

use super::held::FairHeld;
use super::waiter::{FairAttempt, NO_OWNER, Waiter};
use super::{handoff_window, queue_entry_ttl};

/// Attempts whose send instants a waiter remembers (a handoff naming an older one is claimed).
const REMEMBERED_ATTEMPTS: usize = 16;

impl RedisClient {
    /// [`Locker::try_acquire`](crate::Locker::try_acquire) with [`LockOptions::fair`]: takes the lock only if it is
    /// free and nobody is queued for it.
    pub(crate) async fn fair_try_acquire(
        &self,
        key: &str,
        options: &LockOptions,
    ) -> Result<TryAcquire> {
        check_fair(key, options)?;
        let waiter = Waiter::new(self, key, options);
        let mut cleanup = waiter.leave_if_abandoned();
        let started = Instant::now();
        let attempt = waiter
            .attempt(options.ttl(), false, options.fencing_enabled(), 1)
            .await;
        match attempt {
            Ok(FairAttempt::Acquired { fencing }) => {
                cleanup.disarm();
                if expired(started, options.ttl()) {
                    let _ = waiter.leave().await;
                    return Err(Error::ExpiredOnArrival {
                        key: key.to_string(),
                        elapsed: started.elapsed(),
                        ttl: options.ttl(),
                    });
                }
                let fencing = options.fencing_enabled().then_some(fencing);
                Ok(TryAcquire::Acquired(waiter.guard(
                    fencing,
                    started,
                    options.ttl(),
                    options,
                )))
            }
            Ok(FairAttempt::Busy { remaining }) => {
                cleanup.disarm();
                Ok(TryAcquire::Busy { remaining })
            }
            Err(e) => {
                // Refused outright: nothing was written. Ambiguous: the cleanup gives it back.
                if !e.is_ambiguous() {
                    cleanup.disarm();
                }
                Err(e)
            }
        }
    }

    /// [`Locker::acquire`](crate::Locker::acquire) with [`LockOptions::fair`]: queues, and waits for the handoff
    /// (see the module docs) until the deadline.
    pub(crate) async fn fair_acquire(&self, key: &str, options: &LockOptions) -> Result<LockGuard> {
        check_fair(key, options)?;
        let Some(wait) = options.wait_bound() else {
            return match self.fair_try_acquire(key, options).await? {
                TryAcquire::Acquired(g) => Ok(g),
                TryAcquire::Busy { .. } => Err(Error::NotAcquired {
                    key: key.to_string(),
                    waited: Duration::ZERO,
                    attempts: 1,
                }),
            };
        };
        let ttl = options.ttl();
        let fencing = options.fencing_enabled();
        let window = handoff_window(ttl);
        let refresh = (window / 3).max(Duration::from_millis(10));
        let begun = Instant::now();
        let deadline = begun + wait;
        let mut waiter = Waiter::new(self, key, options);
        // Registered before the first attempt: no handoff to our ticket can be missed.
        let mut subscription = match self.notifier() {
            Some(n) => {
                n.subscribe_ticket(release_channel(key), waiter.ticket.clone())
                    .await
            }
            None => None,
        };
        if subscription.is_some() {
            // A release by this client hands the lock to us by its reply, not a message.
            waiter.owner = self.notifier().map_or(NO_OWNER, |n| n.id());
        }
        // Early handoffs (module docs) carry no fencing number, and last the window.
        let early_offers = self
            .notifier()
            .filter(|_| subscription.is_some() && !fencing && window == ttl);
        let entry_ttl = queue_entry_ttl(ttl);
        let mut cleanup = waiter.leave_if_abandoned();
        let mut sent: VecDeque<(u64, Instant)> = VecDeque::with_capacity(REMEMBERED_ATTEMPTS);
        let mut attempt: u64 = 0;
        let mut left_at: u64 = 0;
        let mut failure = None;
        // Grants that came too late to be a lease and were given back.
        let mut given_back: u32 = 0;
        loop {
            attempt += 1;
            let started = Instant::now();
            if sent.len() == REMEMBERED_ATTEMPTS {
                sent.pop_front();
            }
            sent.push_back((attempt, started));
            if let Some(s) = subscription.as_mut() {
                s.mark_seen();
            }
            let remaining = match waiter.attempt(ttl, true, fencing, attempt).await {
                Ok(FairAttempt::Acquired { fencing: n }) => {
                    if expired(started, ttl) {
                        // Granted too late to be a lease: pass it on, queue again.
                        if let Some(n) = early_offers {
                            n.withdraw_early(&waiter.ticket);
                        }
                        let _ = waiter.leave().await;
                        // Whatever was handed to an attempt up to this one was given back by
                        // the leave: a delivery of it still on its way is void.
                        left_at = attempt;
                        given_back += 1;
                        None
                    } else {
                        cleanup.disarm();
                        return Ok(waiter.guard(fencing.then_some(n), started, ttl, options));
                    }
                }
                Ok(FairAttempt::Busy { remaining }) => {
                    failure = None;
                    if let Some(n) = early_offers {
                        // The entry this attempt wrote lives at least this long.
                        n.offer_early(
                            &waiter.ticket,
                            EarlyTerms {
                                key: key.to_string(),
                                token: waiter.token.clone(),
                                ttl,
                                entry_alive_until: valid_until(started, entry_ttl),
                                attempt,
                            },
                        );
                    }
                    remaining
                }
                Err(e) if self.retries_while_waiting(&e) => {
                    tracing::debug!(key, error = %e, "topology in motion; retrying");
                    failure = Some(e);
                    None
                }
                Err(e) => return Err(e),
            };
            let now = Instant::now();
            if now >= deadline {
                break;
            }
            // No backoff: only this waiter is woken by its handoff, so retries cannot herd.
            // Refresh the entry in time; retry when a crashed holder's lease runs out. After a
            // grant given back (it came too late), the backoff: a TTL that keeps expiring on
            // arrival must not make the waiter spin on the server.
            let backoff = options.backoff_policy();
            let mut delay = refresh.min(deadline - now);
            if let Some(r) = remaining {
                delay = delay.min(backoff.until_lease_ends(r));
            }
            if given_back > 0 && left_at == attempt {
                delay = backoff.delay(given_back - 1).min(deadline - now);
            }
            let sleep = tokio::time::sleep(delay);
            let woke = match subscription.as_mut() {
                Some(s) => tokio::select! {
                    w = s.next() => Some(w),
                    _ = sleep => None,
                },
                None => {
                    sleep.await;
                    None
                }
            };
            if let Some(Wake::HandedOffEarly(grant)) = woke {
                // Taken only if given on terms of the current queueing (not before a leave)
                // and with half the TTL left, like a handoff by message; otherwise the next
                // attempt claims the lock if the release did hand it to us.
                if grant.attempt > left_at && grant.lease.remaining() >= ttl / 2 {
                    cleanup.disarm();
                    return Ok(self.guard_for(
                        grant.lease,
                        Instant::now(),
                        options,
                        FairHeld::new(self, grant.tenure),
                    ));
                }
                grant.lease.end();
                continue;
            }
            if let Some(Wake::HandedOff(h)) = woke.filter(|w| match w {
                Wake::HandedOff(h) => h.attempt > left_at,
                _ => true,
            }) {
                let sent_at = sent.iter().find(|(a, _)| *a == h.attempt).map(|(_, t)| *t);
                if let Some(sent_at) = sent_at.filter(|_| window == ttl) {
                    // The release read the entry of attempt `h.attempt`, so it ran after
                    // `sent_at`; the key expires `window` after the release.
                    let lease = Lease::new(
                        key,
                        waiter.token.clone(),
                        fencing.then_some(h.fencing),
                        sent_at,
                        window,
                    );
                    if lease.remaining() >= ttl / 2 {
                        cleanup.disarm();
                        return Ok(self.guard_for(
                            lease,
                            sent_at,
                            options,
                            FairHeld::new(self, Tenure::after(h.next)),
                        ));
                    }
                }
                // Otherwise claim it: the next attempt resets the TTL (right away).
            }
            if Instant::now() >= deadline {
                break;
            }
        }
        cleanup.disarm();
        if let Some(n) = early_offers {
            n.withdraw_early(&waiter.ticket);
        }
        // Leave now rather than in the background: a lock handed to us meanwhile moves on.
        let _ = waiter.leave().await;
        Err(failure.unwrap_or_else(|| Error::NotAcquired {
            key: key.to_string(),
            waited: begun.elapsed(),
            attempts: attempt.min(u32::MAX as u64) as u32,
        }))
    }
}

/// Whether a grant whose request was sent at `started` came after its lease's validity.
fn expired(started: Instant, ttl: Duration) -> bool {
    Instant::now() >= valid_until(started, ttl)
}

fn check_fair(key: &str, options: &LockOptions) -> Result<()> {
    validate_name(key)?;
    options.check_for(Backend::Redis, Taking::Lock).map(drop)
}
