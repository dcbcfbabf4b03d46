//! The acquisition engine: the one place that waits for a lock, a permit, a side of a
//! read-write lock or a term, on every backend (etcd's `waitDeletes`, tokio's
//! `batch_semaphore`).
//!
//! A provider (one backend × primitive) implements [`Attempts`]: one attempt with a fresh token,
//! which gives back a grant that came too late to be a lease and answers
//! [`Error::ExpiredOnArrival`]; optionally a wake-up source ([`Wakeup`]: a release channel, a
//! `LISTEN`) and which errors are ridden out while waiting. A backend whose server queues
//! waiters itself (PostgreSQL's lock queue, etcd's revision queue, the Redis fair queue, the
//! memory FIFO) waits inside its attempt, up to [`Ask::wait`].
//!
//! [`wait`] owns everything else, once:
//! * the deadline from the wait bound, and waiting for ever ([`FOREVER`], the one spelling);
//! * no attempt at or past the deadline: the wait bound is a promise to the caller;
//! * the attempt count and [`Error::NotAcquired`] at the deadline (also when every grant came
//!   too late: the count says how often it was tried), or the last ridden-out failure;
//! * a grant given back as expired on arrival is retried after the backoff, as a busy lock, and
//!   the waiter is not woken by the release of its own give-back (that would be a spin);
//! * the lazy subscription: the first attempt goes out at once (a free lock costs one round
//!   trip), only a busy one subscribes, and the attempt right after subscribing closes the gap
//!   (a release before the subscription took effect is seen by it, one after is delivered);
//! * the pause: until a release is seen, the holder's remaining lease as the server reported
//!   it, or the jittered backoff, whichever comes first, never past the deadline;
//! * the attempt right after a release was seen does not ask for the holder's remaining lease:
//!   the name is likely free, so the cheaper request goes first (on the handoff's critical
//!   path: a plain Redis lock's `SET NX PX`, not its script). Should it lose the race, the next
//!   pause is the backoff's, and the attempt after that asks again.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use futures_util::future::BoxFuture;
use tokio::sync::Notify;

use crate::core::error::{Error, Result};
use crate::core::guard::{LockGuard, valid_until};
use crate::core::options::{Backoff, FOREVER, LockOptions};
use crate::core::outcome::TryAcquire;
use crate::core::token::LockToken;

mod one_wake;

pub(crate) use one_wake::{NameWakeup, OneWake};

/// What the engine asks of one attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Ask {
    /// How long a backend that queues waiters on the server may wait there for this attempt
    /// (`None`: not at all, one try). Never past the caller's deadline.
    pub(crate) wait: Option<Duration>,
    /// Whether a busy answer should carry the holder's remaining lease (it bounds the pause). A
    /// waiter's first attempt, before it subscribes, does not need it (a cheaper command), nor
    /// does its attempt right after a release was seen (the name is likely free).
    pub(crate) remaining: bool,
}

impl Ask {
    /// One try, as `try_acquire` makes it.
    pub(crate) const ONCE: Ask = Ask {
        wait: None,
        remaining: false,
    };
}

/// A wake-up source: a release of the name being waited for (a pub/sub message, a `NOTIFY`).
pub(crate) trait Wakeup: Send {
    /// Called before each attempt: only a release from now on wakes the next pause.
    fn mark_seen(&mut self);
    /// Resolves at the first release since [`Wakeup::mark_seen`] (or at once if one came).
    fn released(&mut self) -> BoxFuture<'_, ()>;
    /// Called after each attempt, with whether it took what it asked for: a source that wakes
    /// one waiter per release leaves a release seen while an attempt was out to that attempt
    /// ([`NameWakeup`]).
    fn answered(&mut self, taken: bool) {
        let _ = taken;
    }
}

/// One backend × primitive, as the engine drives it.
pub(crate) trait Attempts: Sync {
    /// The name waited for (in [`Error::NotAcquired`]).
    fn name(&self) -> &str;

    /// One attempt with a fresh token. A grant whose reply came after its lease's validity is
    /// given back (token-checked) and answered with [`Error::ExpiredOnArrival`].
    fn attempt(
        &self,
        options: &LockOptions,
        ask: Ask,
    ) -> impl Future<Output = Result<TryAcquire>> + Send;

    /// Whether this provider has a wake-up source ([`Attempts::wakeups`]); `false`, the
    /// default: the waiter polls with backoff, and asks for the holder's remaining lease from
    /// its first attempt on.
    fn wakes(&self) -> bool {
        false
    }

    /// Subscribes to the wake-up source (`None` if that failed: the waiter then polls).
    /// Called only once the name was found busy, and only if [`Attempts::wakes`].
    fn wakeups(&self) -> impl Future<Output = Option<Box<dyn Wakeup>>> + Send {
        async { None }
    }

    /// Whether `e` is ridden out while the deadline allows (a topology in motion, a session
    /// that died), like a busy answer. [`Error::ExpiredOnArrival`] always is.
    fn retries(&self, e: &Error) -> bool {
        let _ = e;
        false
    }
}

/// Takes what `attempts` offers, waiting up to `wait` (`None`: one attempt; at most
/// [`FOREVER`]) as the module docs say.
///
/// # Errors
/// [`Error::NotAcquired`] if it stayed busy (or every grant came too late) until the deadline,
/// or at the one attempt; the last ridden-out failure if the last attempt failed with one; any
/// other error of an attempt at once.
pub(crate) async fn wait<A: Attempts>(
    attempts: &A,
    options: &LockOptions,
    wait: Option<Duration>,
) -> Result<LockGuard> {
    let begun = Instant::now();
    let deadline = wait.map(|w| begun + w.min(FOREVER));
    let mut wakeup: Option<Box<dyn Wakeup>> = None;
    let mut may_subscribe = deadline.is_some() && attempts.wakes();
    let mut count: u32 = 0;
    // Pauses so far: the backoff's exponent (the attempt right after subscribing has none).
    let mut pauses: u32 = 0;
    // Whether the last pause ended on a release.
    let mut woken = false;
    loop {
        count += 1;
        if let Some(w) = wakeup.as_mut() {
            w.mark_seen();
        }
        let ask = Ask {
            wait: deadline.map(|d| d.saturating_duration_since(Instant::now())),
            remaining: deadline.is_some() && !may_subscribe && !woken,
        };
        let (remaining, gave_back, failure) = match attempts.attempt(options, ask).await {
            Ok(TryAcquire::Acquired(guard)) => {
                if let Some(w) = wakeup.as_mut() {
                    w.answered(true);
                }
                return Ok(guard);
            }
            Ok(TryAcquire::Busy { remaining }) => (remaining, false, None),
            Err(Error::ExpiredOnArrival { .. }) if deadline.is_some() => (None, true, None),
            Err(e) if deadline.is_some() && attempts.retries(&e) => {
                tracing::debug!(name = attempts.name(), error = %e, "retrying while waiting");
                (None, false, Some(e))
            }
            Err(e) => return Err(e),
        };
        if let Some(w) = wakeup.as_mut() {
            w.answered(false);
        }
        let give_up = |failure: Option<Error>| {
            failure.unwrap_or_else(|| Error::NotAcquired {
                key: attempts.name().to_string(),
                waited: begun.elapsed(),
                attempts: count,
            })
        };
        let Some(deadline) = deadline.filter(|d| Instant::now() < *d) else {
            return Err(give_up(failure));
        };
        if std::mem::take(&mut may_subscribe) {
            wakeup = attempts.wakeups().await;
            if !gave_back {
                // Subscribed (or not: the waiter then polls): attempt again at once, this time
                // learning the holder's remaining lease (see the module docs); but not at or
                // past the deadline.
                if Instant::now() >= deadline {
                    return Err(give_up(failure));
                }
                continue;
            }
        }
        woken = pause(
            wakeup.as_deref_mut().filter(|_| !gave_back),
            options.backoff_policy(),
            pauses,
            remaining,
            deadline.saturating_duration_since(Instant::now()),
        )
        .await;
        pauses += 1;
        if Instant::now() >= deadline {
            return Err(give_up(failure));
        }
    }
}

/// What one attempt's request answered: taken (with what the guard needs, e.g. the fencing
/// number) or busy (with the holder's remaining lease, where the server knows it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Grant<T> {
    Taken(T),
    Busy { remaining: Option<Duration> },
}

/// One attempt with `token`, as most providers make it: `send` the request (the instant before
/// is the lease's start); a grant that came too late ([`late`]) is given back with
/// `give_back` (token-checked) and answered with [`Error::ExpiredOnArrival`]; otherwise the
/// guard `guard` makes of it.
///
/// Not an `async fn`: one holds its arguments twice (as passed, and moved into the body's
/// locals), which made the boxed future of every plain acquisition outgrow the allocator's
/// per-thread cache. The block below uses them where they were captured.
#[expect(
    clippy::manual_async_fn,
    reason = "an async fn would hold its arguments twice"
)]
pub(crate) fn granted<'a, T>(
    name: &'a str,
    options: &'a LockOptions,
    token: LockToken,
    send: impl AsyncFnOnce(&LockToken) -> Result<Grant<T>> + 'a,
    give_back: impl AsyncFnOnce(&LockToken) + 'a,
    guard: impl FnOnce(LockToken, T, Instant) -> LockGuard + 'a,
) -> impl Future<Output = Result<TryAcquire>> + 'a {
    async move {
        let started = Instant::now();
        match send(&token).await? {
            Grant::Taken(_) if late(name, started, options.ttl()) => {
                give_back(&token).await;
                Err(Error::ExpiredOnArrival {
                    key: name.to_string(),
                    elapsed: started.elapsed(),
                    ttl: options.ttl(),
                })
            }
            Grant::Taken(taken) => Ok(TryAcquire::Acquired(guard(token, taken, started))),
            Grant::Busy { remaining } => Ok(TryAcquire::Busy { remaining }),
        }
    }
}

/// Whether a grant whose request was sent at `started` came after its lease's validity (the
/// TTL minus the drift allowance, [`clock_drift`](crate::core::guard::clock_drift), as a [`Lease`](crate::core::guard::Lease)
/// counts it): then the server may have freed it already and it is not a lock; the provider
/// gives it back and answers [`Error::ExpiredOnArrival`].
pub(crate) fn late(name: &str, started: Instant, ttl: Duration) -> bool {
    if Instant::now() < valid_until(started, ttl) {
        return false;
    }
    let key = name;
    crate::core::throttle::warn_throttled!(
        key,
        elapsed_ms = started.elapsed().as_millis() as u64,
        "lock granted after its validity ended; giving it back"
    );
    true
}

/// A clean-up that runs if an attempt or a wait is abandoned: its future dropped (a cancelled
/// wait, a timeout around it) or an error returned before the outcome was known. The one
/// abandon-on-drop guard: each provider says what to give back (a token-checked release of a
/// grant we may have been given, leaving a queue), not how to survive a drop.
///
/// Dropped while armed, it spawns `cleanup()` on the current runtime: a drop cannot await, and
/// the give-back must not wait for the caller. Outside a runtime nothing can run it; what was
/// taken then expires with its TTL, which is logged. [`OnAbandon::disarm`] once the outcome is
/// known and handed over.
pub(crate) struct OnAbandon<F, Fut>
where
    F: FnOnce() -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    what: &'static str,
    cleanup: Option<F>,
}

impl<F, Fut> OnAbandon<F, Fut>
where
    F: FnOnce() -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    /// Armed: `cleanup` runs if this is dropped before [`OnAbandon::disarm`]. `what` names the
    /// abandoned thing in the log.
    pub(crate) fn new(what: &'static str, cleanup: F) -> Self {
        OnAbandon {
            what,
            cleanup: Some(cleanup),
        }
    }

    /// The outcome is known and handed over: nothing to clean up.
    pub(crate) fn disarm(&mut self) {
        self.cleanup = None;
    }
}

impl<F, Fut> Drop for OnAbandon<F, Fut>
where
    F: FnOnce() -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    fn drop(&mut self) {
        let Some(cleanup) = self.cleanup.take() else {
            return;
        };
        spawn_cleanup(self.what, cleanup());
    }
}

/// Runs the clean-up of an abandoned operation (`what`) in the background, counted by
/// [`cleanups_settled`] until it ends: the one way such a clean-up is run ([`OnAbandon`], and
/// guards that own what they give back, as an abandoned PostgreSQL session). Outside a runtime
/// nothing can run it; what was taken then expires with its TTL, which is logged.
pub(crate) fn spawn_cleanup(
    what: &'static str,
    cleanup: impl Future<Output = ()> + Send + 'static,
) {
    match tokio::runtime::Handle::try_current() {
        Ok(handle) => {
            tracing::debug!(what, "abandoned; cleaning up in the background");
            // Counted from here, not from inside the task: `cleanups_settled` must not answer
            // "none running" between this spawn and the task's first poll.
            let running = CleanupRunning::start();
            handle.spawn(async move {
                let _running = running;
                cleanup.await
            });
        }
        Err(_) => tracing::warn!(
            what,
            "abandoned outside a runtime; what it took expires with its TTL"
        ),
    }
}

/// How many clean-ups of abandoned operations ([`OnAbandon`]) are running, in this process.
static CLEANUPS_RUNNING: AtomicUsize = AtomicUsize::new(0);

/// Woken when [`CLEANUPS_RUNNING`] falls to zero.
static CLEANUPS_SETTLED: Notify = Notify::const_new();

/// One running clean-up, counted until it ends (or its task is dropped with its runtime).
struct CleanupRunning;

impl CleanupRunning {
    fn start() -> Self {
        CLEANUPS_RUNNING.fetch_add(1, Ordering::SeqCst);
        CleanupRunning
    }
}

impl Drop for CleanupRunning {
    fn drop(&mut self) {
        if CLEANUPS_RUNNING.fetch_sub(1, Ordering::SeqCst) == 1 {
            CLEANUPS_SETTLED.notify_waiters();
        }
    }
}

/// Waits until no background clean-up of an abandoned operation is running in this process,
/// at most `within`; whether they settled.
///
/// Dropping an acquisition before it finishes (a cancelled wait, a timeout around it) leaves
/// the library to give back in the background whatever the attempt may have taken: a lock
/// granted as it was dropped, a place in a fair queue. A process that is about to exit (after a
/// signal, say) awaits this first, so that its runtime's shutdown does not cut those clean-ups
/// short. The CLI does, and the bindings offer it. The bound is part of the call: a clean-up
/// stuck on an unreachable server must not keep a process from exiting.
pub async fn cleanups_settled(within: Duration) -> bool {
    tokio::time::timeout(within, no_cleanup_running())
        .await
        .is_ok()
}

/// Resolves once [`CLEANUPS_RUNNING`] is zero.
async fn no_cleanup_running() {
    loop {
        let notified = CLEANUPS_SETTLED.notified();
        tokio::pin!(notified);
        // Registered before the count is read: a fall to zero after the read wakes it.
        notified.as_mut().enable();
        if CLEANUPS_RUNNING.load(Ordering::SeqCst) == 0 {
            return;
        }
        notified.await;
    }
}

/// Sleeps until `wakeup` sees a release, or for the backoff's pause (`attempt`: the pause's
/// number; `remaining`: the holder's lease as the server reported it), at most `left`.
/// Whether it ended on a release.
async fn pause(
    wakeup: Option<&mut (dyn Wakeup + '_)>,
    backoff: Backoff,
    attempt: u32,
    remaining: Option<Duration>,
    left: Duration,
) -> bool {
    let sleep = tokio::time::sleep(backoff.pause(attempt, remaining).min(left));
    match wakeup {
        Some(w) => tokio::select! {
            _ = w.released() => true,
            _ = sleep => false,
        },
        None => {
            sleep.await;
            false
        }
    }
}

#[cfg(test)]
mod tests;
