//! Taking a lock: one attempt, or attempts until the wait bound, sleeping in between.

use std::time::Instant;

use tracing::Instrument;

use crate::core::error::{Error, Result};
use crate::core::guard::{Lease, LockGuard, clock_drift};
use crate::core::options::LockOptions;
use crate::core::outcome::TryAcquire;
use crate::core::token::LockToken;
use crate::redis::slot::release_channel;
use crate::redis::slot::validate_name;

use super::{Attempt, LockClient};

impl LockClient {
    /// One attempt to take `key` for `options.ttl()`, without waiting.
    ///
    /// Sends `SET key token NX PX ttl` with a fresh random token (or the acquire script when
    /// fencing is on, which also issues the fencing number in the same round trip).
    ///
    /// **Cancellation.** If this future is dropped after the command was sent but before its
    /// reply was read, the server may have granted the lock to a token nobody holds. The library
    /// then sends a token-checked release of that token in the background; because it travels on
    /// the same connection it reaches the server after the `SET`, so the lock is freed at once
    /// instead of after its TTL. The same cleanup runs when the reply is lost to a timeout.
    /// Only if the connection itself breaks in between does the abandoned lock stay until its
    /// TTL runs out.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for an empty key or a TTL outside 1 ms ..= 7 days;
    /// [`Error::Connection`] (ambiguous once the command was sent), [`Error::Server`].
    pub async fn try_acquire(&self, key: &str, options: &LockOptions) -> Result<TryAcquire> {
        let begun = crate::core::metrics::start();
        let result: Result<TryAcquire> = async {
            if options.fair_enabled() {
                return self.fair_try_acquire(key, options).await;
            }
            validate_name(key)?;
            let ttl_ms = options.ttl_millis()?;
            let span =
                tracing::debug_span!("leasehold.acquire", key, outcome = tracing::field::Empty);
            async {
                let token = options.new_token();
                let started = Instant::now();
                let result = self.attempt_with(key, &token, ttl_ms, options, false).await;
                let span = tracing::Span::current();
                match result? {
                    Attempt::Acquired { .. }
                        if self.expired_on_arrival(key, &token, started, options).await =>
                    {
                        span.record("outcome", "expired on arrival");
                        Err(Error::ExpiredOnArrival {
                            key: key.to_string(),
                            elapsed: started.elapsed(),
                            ttl: options.ttl(),
                        })
                    }
                    Attempt::Acquired { fencing } => {
                        span.record("outcome", "acquired");
                        Ok(TryAcquire::Acquired(
                            self.guard(key, token, fencing, started, options),
                        ))
                    }
                    Attempt::Busy { remaining } => {
                        span.record("outcome", "busy");
                        Ok(TryAcquire::Busy { remaining })
                    }
                }
            }
            .instrument(span)
            .await
        }
        .await;
        crate::core::metrics::acquisition(
            crate::core::kind::Backend::Redis,
            options.fair_enabled(),
            crate::core::metrics::Outcome::of_try(&result),
            begun,
        );
        result
    }

    /// Takes `key`, retrying a busy lock until `options.wait_bound()` elapses (one attempt if
    /// none was set).
    ///
    /// Between attempts it sleeps until the lock is released (a notification, see
    /// `src/redis/waiting`) or for the [`Backoff`](crate::Backoff) delay (exponential, with
    /// jitter, so waiters do not retry in lock step), never longer than the holder's remaining
    /// lease as the server reported it, nor past the deadline. No attempt is made at or after
    /// the deadline. Each attempt uses a fresh token, so a cleanup of an abandoned attempt can never
    /// release a later, successful one. Cancellation: see [`LockClient::try_acquire`].
    ///
    /// A topology in motion ([`Error::is_topology_in_motion`]: a slot migrating, a failover)
    /// is ridden out like a busy lock until the deadline, and so is a broken connection on a
    /// cluster or through Sentinel, whose client follows the new primary meanwhile.
    ///
    /// # Errors
    /// [`Error::NotAcquired`] when the lock stayed busy until the deadline; the last failure
    /// when the topology was still in motion at the deadline; otherwise as
    /// [`LockClient::try_acquire`].
    pub async fn acquire(&self, key: &str, options: &LockOptions) -> Result<LockGuard> {
        let begun = crate::core::metrics::start();
        let result: Result<LockGuard> = async {
            if options.fair_enabled() {
                return self.fair_acquire(key, options).await;
            }
            validate_name(key)?;
            let ttl_ms = options.ttl_millis()?;
            let span = tracing::debug_span!(
                "leasehold.acquire",
                key,
                outcome = tracing::field::Empty,
                attempts = tracing::field::Empty
            );
            async {
                let begun = Instant::now();
                let deadline = options.wait_bound().map(|w| begun + w);
                // The first attempt goes out at once: a free lock costs one round trip, as
                // with `try_acquire`. Only a busy lock makes the waiter subscribe to the
                // release channel, and the attempt that follows the server's confirmation
                // closes the gap: a release before the subscription took effect is seen by
                // that attempt (the key is free), one after it is delivered. So no release is
                // missed, without a SUBSCRIBE/UNSUBSCRIBE pair on every uncontended call.
                let mut subscription: Option<crate::redis::waiting::Subscription> = None;
                let mut may_subscribe = self.inner.notifier.is_some() && deadline.is_some();
                let mut attempts: u32 = 0;
                // Pauses so far: the backoff's exponent (the retry after subscribing is none).
                let mut pauses: u32 = 0;
                loop {
                    let token = options.new_token();
                    let started = Instant::now();
                    attempts += 1;
                    if let Some(s) = subscription.as_mut() {
                        s.mark_seen();
                    }
                    // The holder's remaining lease (the acquire script) bounds the pause: a
                    // waiter that will subscribe first sends a plain `SET NX PX`, and asks for it
                    // from the attempt after subscribing on.
                    let want_remaining = deadline.is_some() && !may_subscribe;
                    let (attempt, failure) = match self
                        .attempt_with(key, &token, ttl_ms, options, want_remaining)
                        .await
                    {
                        Ok(attempt) => (attempt, None),
                        // While the deadline allows, ride out a topology in motion (a slot
                        // migrating, a failover): the request was refused, so it is retried as if
                        // busy, with backoff. On a cluster or through Sentinel a broken connection
                        // is part of a failover too (the client follows the new topology); an
                        // ambiguous attempt's token was given back by its cleanup, and the next
                        // attempt has a new token. At the deadline the last failure is returned.
                        Err(e) if deadline.is_some() && self.retries_while_waiting(&e) => {
                            tracing::debug!(key, error = %e, "topology in motion; retrying");
                            (Attempt::Busy { remaining: None }, Some(e))
                        }
                        Err(e) => return Err(e),
                    };
                    let span = tracing::Span::current();
                    span.record("attempts", attempts);
                    let mut gave_back = false;
                    let remaining = match attempt {
                        // Granted, but too late to be a lease: released; try again after the
                        // backoff, as for a busy lock (a TTL that keeps expiring on arrival must
                        // not make the waiter spin on the server).
                        Attempt::Acquired { .. }
                            if self.expired_on_arrival(key, &token, started, options).await =>
                        {
                            gave_back = true;
                            None
                        }
                        Attempt::Acquired { fencing } => {
                            span.record("outcome", "acquired");
                            return Ok(self.guard(key, token, fencing, started, options));
                        }
                        Attempt::Busy { remaining } => remaining,
                    };
                    let not_acquired = |now: Instant, failure: Option<Error>| {
                        failure.unwrap_or_else(|| Error::NotAcquired {
                            key: key.to_string(),
                            waited: now - begun,
                            attempts,
                        })
                    };
                    let now = Instant::now();
                    let Some(deadline) = deadline.filter(|d| now < *d) else {
                        span.record("outcome", "busy");
                        return Err(not_acquired(now, failure));
                    };
                    if std::mem::take(&mut may_subscribe) {
                        if let Some(notifier) = &self.inner.notifier {
                            subscription = notifier.subscribe_one(release_channel(key)).await;
                        }
                        // Subscribed (or not: the waiter then polls): attempt again at once,
                        // this time learning the holder's remaining lease if it is still busy;
                        // but no attempt at or past the deadline.
                        let now = Instant::now();
                        if now >= deadline {
                            span.record("outcome", "busy");
                            return Err(not_acquired(now, failure));
                        }
                        continue;
                    }
                    // Not woken by the release of the grant given back: that would be a spin.
                    crate::redis::waiting::pause_between_attempts(
                        subscription.as_mut().filter(|_| !gave_back),
                        options.backoff_policy(),
                        pauses,
                        remaining,
                        deadline - now,
                    )
                    .await;
                    pauses += 1;
                    // No attempt at or past the deadline: the wait bound is a promise to the caller.
                    let now = Instant::now();
                    if now >= deadline {
                        span.record("outcome", "busy");
                        return Err(not_acquired(now, failure));
                    }
                }
            }
            .instrument(span)
            .await
        }
        .await;
        crate::core::metrics::acquisition(
            crate::core::kind::Backend::Redis,
            options.fair_enabled(),
            crate::core::metrics::Outcome::of_acquire(&result),
            begun,
        );
        result
    }

    /// Waits for `key` (as [`LockClient::acquire`]), runs `work`, and releases the lock
    /// whatever happens: when `work` returns, when it panics (the panic is resumed after the
    /// release), and when the returned future is dropped (the guard then releases in the
    /// background).
    ///
    /// `work` receives a [`Lease`]: the key, token, fencing token, validity and loss signal of
    /// the lock. The work runs against [`Lease::lost`]: if the lease is lost meanwhile (a renewal
    /// of an [`auto_extend`](LockOptions::auto_extend)ed lock failed, or the validity ran out),
    /// the work's future is dropped at once and [`Error::LockLost`] returned; with
    /// [`OnLoss::Notify`](crate::OnLoss::Notify) the work finishes and the error is returned after it.
    ///
    /// # Errors
    /// As [`LockClient::acquire`] if the lock was not taken (then `work` did not run);
    /// [`Error::LockLost`] as above; [`Error::NotHeld`] if the release found the lock gone
    /// (without the loss having been noticed first): the work was not protected for its whole
    /// duration, so its output is dropped.
    pub async fn with_lock<T, F, Fut>(&self, key: &str, options: &LockOptions, work: F) -> Result<T>
    where
        F: FnOnce(Lease) -> Fut,
        Fut: std::future::Future<Output = T>,
    {
        let guard = self.acquire(key, options).await?;
        crate::core::guard::run_with_lock(guard, options, work).await
    }

    /// Whether a granted attempt's reply came after the lease's validity was over (the
    /// validity a [`Lease`] would compute: TTL minus the drift allowance, from `started`, when
    /// the request was sent). If so the lock is released again, token-checked (harmless if the
    /// key already expired): the server may have freed it already, so it is not a lock.
    ///
    /// Without this, a reply delayed past the TTL (a stalled server that had already processed
    /// the `SET`, a long GC pause of ours) would hand out a guard that was never valid for a
    /// moment, while another client may already hold the key. `leasehold-lab check --faults stall`
    /// found it.
    async fn expired_on_arrival(
        &self,
        key: &str,
        token: &LockToken,
        started: Instant,
        options: &LockOptions,
    ) -> bool {
        let ttl = options.ttl();
        if started.elapsed() < ttl.saturating_sub(clock_drift(ttl)) {
            return false;
        }
        crate::core::throttle::warn_throttled!(
            key,
            elapsed_ms = started.elapsed().as_millis() as u64,
            "lock granted after its validity ended; releasing"
        );
        let _ = self.release_raw(key, token.expose()).await;
        true
    }
}
