//! [`Driver`]: the one trait a backend implements, so that [`Locker`](crate::Locker), the
//! guards, `with_lock`, auto-extension, history and the CLI work unchanged over Redis, Redlock,
//! etcd, PostgreSQL, `memory://` and `file://`.
//!
//! A backend is one module: a client type that implements [`Driver`] (what a `Locker` calls)
//! and [`HeldLock`](crate::core::guard::HeldLock) for what it hands out (what a guard calls to
//! release and extend the one lock it holds), and one entry in the locker's list of drivers for
//! its URL schemes. The client's public API keeps only its `connect` functions and what that
//! backend alone has; the lock API is the `Locker`'s, so it behaves the same (spans, metrics,
//! history) whatever the backend. docs/guarantees.md has a column per backend.
//!
//! What every driver guarantees (the conformance suite, `tests/conformance/`, checks each point
//! on every backend):
//! 1. **Mutual exclusion while valid.** A successful acquisition returns a
//!    [`Lease`](crate::Lease) whose `valid_until` was computed from an instant taken *before*
//!    the request was sent; until then no other acquisition of the same key succeeds, unless
//!    the backend loses state (a Redis failover without the write, a PostgreSQL restart) or an
//!    outsider deletes the key.
//! 2. **Token-checked release and extend.** Releasing or extending never affects a lock that a
//!    later holder took: it is conditioned, atomically on the server, on the lock still being
//!    ours. Otherwise it returns [`Error::NotHeld`](crate::Error::NotHeld).
//! 3. **Loss is reported.** An auto-extended lease that stops being ours (renewal refused,
//!    session or keep-alive lost, validity over without a renewal) fires
//!    [`Lease::lost`](crate::Lease::lost).
//! 4. **Fencing numbers strictly increase** per key (on etcd: cluster-wide) with each
//!    acquisition, and are issued atomically with it, so a resource that keeps the highest
//!    number it saw rejects every earlier holder.
//! 5. **Bad keys are refused before any round trip** ([`Error::InvalidArgument`](crate::Error::InvalidArgument)).

use std::any::Any;
use std::fmt::Debug;
use std::sync::Arc;
use std::time::Duration;

use crate::core::error::{Error, Result};
use crate::core::guard::LockGuard;
use crate::core::history::{HistoryLog, HistoryOptions};
use crate::core::kind::{Backend, Primitive};
use crate::core::listing::{ForceReleased, LockEntry};
use crate::core::options::LockOptions;
use crate::core::outcome::{LockState, TryAcquire};
use crate::core::sync::{Election, RwLock, Semaphore};
use crate::core::token::LockToken;

/// A connected backend, as a [`Locker`](crate::Locker) drives it. Each method has the meaning
/// of the `Locker` method of the same name, which documents it; the `Locker` adds the spans,
/// the metrics and the history around it, once for every backend.
///
/// Its parts beyond the lock ([`Primitives`], [`LockTable`]) are implemented where their bodies
/// live; what a backend does not have keeps the part's default, which refuses with
/// [`Error::Unsupported`] naming the backend (and, for a primitive, the backends that have it:
/// [`Backend::has`] is the one table of who has what).
///
/// A driver is [`Any`], so that a `Locker` can hand out the backend's own type for what only
/// it has ([`Locker::as_redis`](crate::Locker::as_redis)).
#[async_trait::async_trait]
pub(crate) trait Driver: Kind + Primitives + LockTable + Any + Send + Sync + Debug {
    async fn try_acquire(&self, key: &str, options: &LockOptions) -> Result<TryAcquire>;

    async fn acquire(&self, key: &str, options: &LockOptions) -> Result<LockGuard>;

    async fn release(&self, key: &str, token: &LockToken) -> Result<()>;

    async fn extend(&self, key: &str, token: &LockToken, ttl: Duration) -> Result<()>;

    async fn inspect(&self, key: &str) -> Result<LockState>;

    async fn raise_fencing_counter(&self, key: &str, at_least: u64) -> Result<u64>;
}

/// Which backend a driver is: what its refusals name, and what the option table reads.
pub(crate) trait Kind {
    /// Which backend this is.
    fn kind(&self) -> Backend;
}

/// The primitives beyond the plain lock, each where the backend has it ([`Backend::has`]); the
/// defaults refuse, naming the backends that have it. Implemented beside the primitives'
/// providers (a backend's `sync` module). The [`Locker`](crate::Locker) checked the name (and
/// the number of permits) first, as every backend needs; a backend adds only its own limits.
pub(crate) trait Primitives: Kind {
    /// Refuses a name this backend cannot keep a primitive under, beyond `validate_key` (which
    /// the Locker checked): a backend's own limits, checked once before any handle is made.
    fn check_name(&self, name: &str) -> Result<()> {
        let _ = name;
        Ok(())
    }

    /// A counting semaphore of `permits` on `name` (no round trip).
    fn semaphore(&self, name: &str, permits: u32) -> Result<Semaphore> {
        let _ = (name, permits);
        Err(missing(self.kind(), Primitive::Semaphore))
    }

    /// A read-write lock on `name` (no round trip).
    fn rwlock(&self, name: &str) -> Result<RwLock> {
        let _ = name;
        Err(missing(self.kind(), Primitive::RwLock))
    }

    /// An election on `name` (no round trip).
    fn election(&self, name: &str) -> Result<Election> {
        let _ = name;
        Err(missing(self.kind(), Primitive::Election))
    }
}

/// The lock table (listing, forced release, history), where the backend keeps one; the
/// defaults refuse, naming the backend. Implemented in a backend's `table` module.
#[async_trait::async_trait]
pub(crate) trait LockTable: Kind + Send + Sync {
    /// The held locks whose names match `pattern` (see
    /// [`glob_match`](crate::core::listing::glob_match)).
    async fn list(&self, pattern: &str) -> Result<Vec<LockEntry>> {
        let _ = pattern;
        Err(crate::core::listing::unsupported(
            self.kind().name(),
            "listing locks",
        ))
    }

    /// Removes `key`'s lock whoever holds it, bumps its fencing counter, records why.
    async fn force_release(&self, key: &str, reason: &str) -> Result<ForceReleased> {
        let _ = (key, reason);
        Err(crate::core::listing::unsupported(
            self.kind().name(),
            "a forced release",
        ))
    }

    /// The backend's history log, keeping `options`' cap and retention; `None` for a backend
    /// that keeps no history (see [`crate::core::history`]).
    fn history_log(&self, options: &HistoryOptions) -> Option<Arc<dyn HistoryLog>> {
        let _ = options;
        None
    }

    /// This driver, its lock operations appending their own history events (as `options` say)
    /// in the same step on the server, where the backend can; `None` where the
    /// [`Locker`](crate::Locker) appends them.
    fn recording(&self, options: &HistoryOptions) -> Option<Arc<dyn Driver>> {
        let _ = options;
        None
    }

    /// Whether a release by token ([`Driver::release`]) appends its own history event (see
    /// [`LockTable::recording`]).
    fn records_releases(&self) -> bool {
        false
    }
}

/// The refusal of `what` by `backend`, which does not have it.
fn missing(backend: Backend, what: Primitive) -> Error {
    let has = Backend::ALL
        .iter()
        .filter(|b| b.has(what))
        .map(|b| b.name())
        .collect::<Vec<_>>()
        .join(", ");
    Error::Unsupported {
        backend: backend.name(),
        what: format!("{} (backends that have it: {has})", what.describe()),
    }
}

/// The error for a release or extend of `key` with `token` by a client that does not hold the
/// lock itself, on a backend where only the holder can (PostgreSQL session locks, file locks):
/// [`Error::Unsupported`] saying `what` if `state` (the key as `inspect` sees it) shows the lock
/// held with `token`, by another client or process; otherwise [`Error::NotHeld`], or the error
/// `inspect` returned.
pub(crate) fn not_held_here(
    backend: &'static str,
    what: String,
    key: &str,
    token: &LockToken,
    state: Result<LockState>,
) -> Error {
    match state {
        Ok(state) if state.holder.as_deref() == Some(token.expose()) => {
            Error::Unsupported { backend, what }
        }
        Ok(_) => Error::NotHeld {
            key: key.to_string(),
        },
        Err(e) => e,
    }
}

/// What the backends' unit tests share.
#[cfg(test)]
pub(crate) mod testing {
    use super::*;

    /// A long lease (600 s) with fencing: it does not end during a test.
    pub(crate) fn long() -> LockOptions {
        LockOptions::new(Duration::from_secs(600)).fencing(true)
    }

    /// `key`, taken at once by `driver`: the test knows it is free.
    pub(crate) async fn take(driver: &impl Driver, key: &str, options: &LockOptions) -> LockGuard {
        let taken = driver.try_acquire(key, options).await.unwrap();
        taken.acquired().expect("free")
    }
}
