//! Locks in this process's memory (`memory://`, `memory://NAME`): for the unit tests of code
//! written against [`Locker`](crate::Locker), and for tasks of one process. Always compiled (no
//! dependency).
//!
//! # What it is
//! A process-wide table per *namespace* (`memory://` is the unnamed one; `memory://NAME` a
//! separate one, so that tests running in parallel do not share locks) maps each key to its
//! holder's token and expiry and to its fencing counter, behind one mutex. Every operation is
//! one step under that mutex, so it is atomic by construction.
//!
//! # Guarantees
//! * **One process only.** Two processes never see each other's memory locks: the CLI refuses
//!   `memory://` for that reason. Within the process every [`MemoryClient`] of a namespace shares
//!   the table.
//! * **Mutual exclusion while valid**, and **the validity is exact**: the lock's expiry and the
//!   lease's [`valid_until`](crate::Lease::valid_until) are the same [`Instant`] of the one
//!   clock, so no drift allowance is subtracted; a lock is free from the instant its lease stops
//!   being valid (a lock past its TTL is free: its holder's release or extend is then `NotHeld`).
//! * **Token-checked release and extend**, from any client of the namespace.
//! * **Fencing numbers strictly increase per key**: a counter per key, never reset (kept after
//!   release, for the life of the process: a key once locked with fencing costs a table entry
//!   until the process ends), raised by `raise_fencing_counter`.
//! * **Waiting is FIFO and without polling** ([`Fairness::Always`](crate::Fairness::Always)):
//!   waiters queue per key; a release, an expiry or a waiter leaving wakes them, and only the
//!   longest waiter may take the freed lock (a `try_acquire` finds it busy meanwhile).
//! * **Semaphores, read-write locks and elections** share the key's table entry and queue: a
//!   key's holders are one exclusive holder (a lock, a writer, a leader), or readers, or up to
//!   N permits; waiting stays FIFO for all of them, so a waiting writer keeps later readers out.
//!   An election's term is the key's fencing number, drawn with the leadership.
//! * **Loss is reported**: an auto-extended lease whose lock is gone fires
//!   [`Lease::lost`](crate::Lease::lost) at its next renewal.
//!
//! * **[`min_hold`](LockOptions::min_hold)**: a release before it moves the holder's expiry to
//!   the end of the hold (the same monotonic clock), by the guard or by token.
//!
//! Tested by the conformance suite (`tests/conformance/memory.rs`) and `tests/local.rs`.

mod history;
mod store;
mod sync;
mod table;

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::future::BoxFuture;

use crate::core::acquire::{Ask, Attempts};
use crate::core::driver::{Driver, Kind, LockTable};
use crate::core::error::{Error, Result};
use crate::core::guard::{HeldLock, Lease, LockGuard};
use crate::core::history::{HistoryLog, HistoryOptions};
use crate::core::kind::{Backend, Taking};
use crate::core::listing::{ForceReleased, LockEntry};
use crate::core::options::{LockOptions, ttl_millis};
use crate::core::outcome::{LockState, TryAcquire};
use crate::core::token::{LockToken, validate_key};

use store::{Attempt, Namespace, Want};

/// A client for locks in this process's memory (see the [module docs](self)). Cheap to clone.
#[derive(Clone, Debug)]
pub struct MemoryClient {
    ns: Arc<Namespace>,
}

impl MemoryClient {
    /// A client of the namespace `url` names: `memory://` (the unnamed one) or `memory://NAME`.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for another scheme, or a name with `/`, `?` or `#`.
    pub fn connect(url: &str) -> Result<Self> {
        let name = url
            .split_once("://")
            .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("memory"))
            .map(|(_, name)| name)
            .ok_or_else(|| Error::invalid("url", format!("{url:?} is not a memory:// URL")))?;
        if name.contains(['/', '?', '#']) {
            return Err(Error::invalid(
                "url",
                format!("{url:?}: a memory:// URL is memory:// or memory://NAME, nothing after"),
            ));
        }
        Ok(MemoryClient {
            ns: store::namespace(name),
        })
    }

    fn check(key: &str, options: &LockOptions) -> Result<()> {
        validate_key(key)?;
        options.check_for(Backend::Memory, Taking::Lock).map(drop)
    }

    /// One attempt to hold `key` as `want` asks.
    fn try_as(&self, key: &str, options: &LockOptions, want: Want<'_>) -> Result<TryAcquire> {
        Self::check(key, options)?;
        match self.ns.attempt(key, options, None, want)? {
            Attempt::Taken(lease) => Ok(TryAcquire::Acquired(self.guard(lease, options))),
            Attempt::Busy { remaining, .. } => Ok(TryAcquire::Busy { remaining }),
        }
    }

    /// Holds `key` as `want` asks, waiting in the key's queue as
    /// [`Locker::acquire`](crate::Locker::acquire), through the acquisition engine: the queue is
    /// this backend's own, so each attempt waits inside it ([`Queued`]).
    async fn acquire_as(
        &self,
        key: &str,
        options: &LockOptions,
        want: Want<'_>,
    ) -> Result<LockGuard> {
        Self::check(key, options)?;
        let wait = options.wait_bound();
        let queued = Queued {
            client: self,
            key,
            want,
            // Our place in the queue, left (and the next waiter woken) however the wait ends.
            ticket: wait.map(|_| self.ns.ticket(key)),
        };
        crate::core::acquire::wait(&queued, options, wait).await
    }

    fn guard(&self, lease: Lease, options: &LockOptions) -> LockGuard {
        let held: Arc<dyn HeldLock> = Arc::new(self.clone());
        if options.auto_extend_enabled() {
            crate::core::renew::keep_alive(held.clone(), lease.clone(), options);
        }
        LockGuard::new(held, lease)
    }
}

/// A wait in a key's FIFO queue, as the acquisition engine drives it. The ticket keeps our place
/// for the whole wait, so nobody who came later barges in; an attempt waits inside the queue
/// (woken when the waiter ahead leaves or the holder releases, or when the holder's lease ends)
/// up to [`Ask::wait`]: nothing polls.
struct Queued<'a> {
    client: &'a MemoryClient,
    key: &'a str,
    want: Want<'a>,
    ticket: Option<store::Ticket>,
}

impl Attempts for Queued<'_> {
    fn name(&self) -> &str {
        self.key
    }

    async fn attempt(&self, options: &LockOptions, ask: Ask) -> Result<TryAcquire> {
        let deadline = ask.wait.map(|w| Instant::now() + w);
        loop {
            let attempt =
                self.client
                    .ns
                    .attempt(self.key, options, self.ticket.as_ref(), self.want)?;
            let (woken, remaining) = match attempt {
                Attempt::Taken(lease) => {
                    return Ok(TryAcquire::Acquired(self.client.guard(lease, options)));
                }
                Attempt::Busy { woken, remaining } => (woken, remaining),
            };
            let now = Instant::now();
            let Some(deadline) = deadline.filter(|d| now < *d) else {
                return Ok(TryAcquire::Busy { remaining });
            };
            // The holder's expiry frees the lock without a release: wake for it too.
            let wake = remaining.map_or(deadline, |r| deadline.min(now + r));
            tokio::select! {
                _ = woken => {}
                _ = tokio::time::sleep_until(wake.into()) => {}
            }
        }
    }
}

impl HeldLock for MemoryClient {
    fn release<'a>(&'a self, lease: &'a Lease) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move { self.ns.release(lease.key(), lease.token(), None) })
    }

    fn extend<'a>(&'a self, lease: &'a Lease, ttl: Duration) -> BoxFuture<'a, Result<Instant>> {
        Box::pin(async move {
            ttl_millis(ttl)?;
            self.ns.extend(lease.key(), lease.token(), None, ttl)
        })
    }

    /// One clock: the lease's validity is the lock's expiry itself.
    fn drift(&self, _ttl: Duration) -> Duration {
        Duration::ZERO
    }
}

#[async_trait::async_trait]
impl Driver for MemoryClient {
    /// Busy while others wait for it: FIFO.
    async fn try_acquire(&self, key: &str, options: &LockOptions) -> Result<TryAcquire> {
        self.try_as(key, options, Want::Exclusive)
    }

    /// Waits in the key's FIFO queue: woken by a release, by the holder's expiry, or by a
    /// waiter ahead leaving; never polling.
    async fn acquire(&self, key: &str, options: &LockOptions) -> Result<LockGuard> {
        self.acquire_as(key, options, Want::Exclusive).await
    }

    async fn release(&self, key: &str, token: &LockToken) -> Result<()> {
        validate_key(key)?;
        self.ns.release(key, token, None)
    }

    async fn extend(&self, key: &str, token: &LockToken, ttl: Duration) -> Result<()> {
        validate_key(key)?;
        ttl_millis(ttl)?;
        self.ns.extend(key, token, None, ttl).map(drop)
    }

    async fn inspect(&self, key: &str) -> Result<LockState> {
        validate_key(key)?;
        Ok(self.ns.inspect(key))
    }

    async fn raise_fencing_counter(&self, key: &str, at_least: u64) -> Result<u64> {
        validate_key(key)?;
        Ok(self.ns.raise(key, at_least))
    }
}

#[async_trait::async_trait]
impl LockTable for MemoryClient {
    /// An atomic snapshot (the table is read under its mutex). Kind: always a lock; waiters:
    /// the waiting acquisitions.
    async fn list(&self, pattern: &str) -> Result<Vec<LockEntry>> {
        Ok(self.ns.list(pattern))
    }

    /// Takes the holder away and bumps the fencing counter in one step. The record of who and
    /// why is the warn log line of [`Locker::force_release`](crate::Locker::force_release) (a
    /// memory table has no place that outlives the process).
    async fn force_release(&self, key: &str, reason: &str) -> Result<ForceReleased> {
        self.force(key, reason)
    }

    fn history_log(&self, options: &HistoryOptions) -> Option<Arc<dyn HistoryLog>> {
        Some(history::log(self, options))
    }
}

/// Test hooks (`leasehold::internal`): what an outsider would do to a server's lock.
#[doc(hidden)]
pub mod hooks {
    /// Clears `key`'s holder in the namespace `name` (its fencing counter stays), as deleting
    /// a Redis key would; true if it had one.
    pub fn take_away(name: &str, key: &str) -> bool {
        super::store::namespace(name).take_away(key)
    }

    /// How many acquisition attempts of `key` found it busy, in the namespace `name`.
    pub fn refusals(name: &str, key: &str) -> u64 {
        super::store::namespace(name).refusals(key)
    }
}

#[cfg(test)]
mod tests;

impl Kind for MemoryClient {
    fn kind(&self) -> Backend {
        Backend::Memory
    }
}
