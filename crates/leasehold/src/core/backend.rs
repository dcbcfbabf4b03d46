//! The contract every lock backend meets, so [`LockGuard`](crate::LockGuard), [`Lease`],
//! `with_lock`, auto-extension and the CLI work unchanged over Redis, Redlock, etcd and
//! PostgreSQL.
//!
//! A backend is one module: a client type with inherent `try_acquire` / `acquire` / `release` /
//! `extend` / `inspect` methods, an implementation of [`LockBackend`] (what a
//! [`Locker`](crate::Locker) calls) and of [`HeldLock`] (what a guard calls to release and
//! extend the one lock it holds), and one arm in [`Locker::connect`](crate::Locker::connect)
//! for its URL scheme. docs/guarantees.md has a column per backend.
//!
//! What every backend guarantees (the conformance suite, `tests/conformance/`, checks each
//! point on every backend):
//! 1. **Mutual exclusion while valid.** A successful acquisition returns a [`Lease`] whose
//!    `valid_until` was computed from an instant taken *before* the request was sent; until
//!    then no other acquisition of the same key succeeds, unless the backend loses state (a
//!    Redis failover without the write, a PostgreSQL restart) or an outsider deletes the key.
//! 2. **Token-checked release and extend.** Releasing or extending never affects a lock that a
//!    later holder took: it is conditioned, atomically on the server, on the lock still being
//!    ours. Otherwise it returns [`Error::NotHeld`](crate::Error::NotHeld).
//! 3. **Loss is reported.** An auto-extended lease that stops being ours (renewal refused,
//!    session or keep-alive lost, validity over without a renewal) fires [`Lease::lost`].
//! 4. **Fencing numbers strictly increase** per key (on etcd: cluster-wide) with each
//!    acquisition, and are issued atomically with it, so a resource that keeps the highest
//!    number it saw rejects every earlier holder.
//! 5. **Bad keys are refused before any round trip** ([`Error::InvalidArgument`](crate::Error::InvalidArgument)).

use std::fmt::Debug;
use std::time::Duration;

use futures_util::future::BoxFuture;

use crate::core::error::Result;
use crate::core::guard::LockGuard;
use crate::core::kind::{Backend, Primitive};
use crate::core::listing::{ForceReleased, LockEntry};
use crate::core::options::LockOptions;
use crate::core::outcome::{LockState, TryAcquire};
use crate::core::sync::{Election, RwLock, Semaphore};
use crate::core::token::LockToken;

/// A connected backend, as a [`Locker`](crate::Locker) sees it. Each method has the meaning of
/// the [`RedisClient`](crate::redis::RedisClient) method of the same name.
pub(crate) trait LockBackend: Send + Sync + Debug + 'static {
    /// Which backend this is.
    fn kind(&self) -> Backend;

    /// The client itself, so that a [`Locker`](crate::Locker) can hand out the backend's own
    /// type ([`Locker::as_redis`](crate::Locker::as_redis)).
    fn as_any(&self) -> &dyn std::any::Any;

    fn try_acquire<'a>(
        &'a self,
        key: &'a str,
        options: &'a LockOptions,
    ) -> BoxFuture<'a, Result<TryAcquire>>;

    fn acquire<'a>(
        &'a self,
        key: &'a str,
        options: &'a LockOptions,
    ) -> BoxFuture<'a, Result<LockGuard>>;

    fn release<'a>(&'a self, key: &'a str, token: &'a LockToken) -> BoxFuture<'a, Result<()>>;

    fn extend<'a>(
        &'a self,
        key: &'a str,
        token: &'a LockToken,
        ttl: Duration,
    ) -> BoxFuture<'a, Result<()>>;

    fn inspect<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<LockState>>;

    fn raise_fencing_counter<'a>(
        &'a self,
        key: &'a str,
        at_least: u64,
    ) -> BoxFuture<'a, Result<u64>>;

    // The lock table (`leasehold ls`, `leasehold force-release`): backends without one keep
    // these defaults; those with one use `impl_lock_backend!(Type, Variant, lock_table)`.

    /// The held locks whose names match `pattern` (see
    /// [`glob_match`](crate::core::listing::glob_match)).
    fn list<'a>(&'a self, pattern: &'a str) -> BoxFuture<'a, Result<Vec<LockEntry>>> {
        let _ = pattern;
        let backend = self.kind().name();
        Box::pin(async move { Err(crate::core::listing::unsupported(backend, "listing locks")) })
    }

    /// Removes `key`'s lock whoever holds it, bumps its fencing counter, records why.
    fn force_release<'a>(
        &'a self,
        key: &'a str,
        reason: &'a str,
    ) -> BoxFuture<'a, Result<ForceReleased>> {
        let _ = (key, reason);
        let backend = self.kind().name();
        Box::pin(async move {
            Err(crate::core::listing::unsupported(
                backend,
                "a forced release",
            ))
        })
    }
}

/// The primitives beyond the plain lock that a backend offers through a
/// [`Locker`](crate::Locker): each method makes the primitive's handle (no round trip) or, by
/// default, refuses with [`Error::Unsupported`](crate::Error::Unsupported) naming the backend
/// and the primitive. A backend opts in by overriding the method (its client's inherent
/// `semaphore` / `rwlock` / `election`), so what it has is written in one place.
pub(crate) trait Primitives: LockBackend {
    /// A counting semaphore of `permits` on `name`.
    fn semaphore(&self, name: &str, permits: u32) -> Result<Semaphore> {
        let _ = (name, permits);
        Err(missing(self.kind(), Primitive::Semaphore))
    }

    /// A read-write lock on `name`.
    fn rwlock(&self, name: &str) -> Result<RwLock> {
        let _ = name;
        Err(missing(self.kind(), Primitive::RwLock))
    }

    /// An election on `name`.
    fn election(&self, name: &str) -> Result<Election> {
        let _ = name;
        Err(missing(self.kind(), Primitive::Election))
    }

    /// The backend's history log, keeping `options`' cap and retention; `None` for a backend
    /// that keeps no history (see [`crate::core::history`]).
    fn history_log(
        &self,
        options: &crate::core::history::HistoryOptions,
    ) -> Option<std::sync::Arc<dyn crate::core::history::HistoryLog>> {
        let _ = options;
        None
    }
}

/// The refusal of `what` by `backend`, which does not have it.
fn missing(backend: Backend, what: Primitive) -> crate::core::error::Error {
    let has = Backend::ALL
        .iter()
        .filter(|b| b.has(what))
        .map(|b| b.name())
        .collect::<Vec<_>>()
        .join(", ");
    crate::core::error::Error::Unsupported {
        backend: backend.name(),
        what: format!("{} (backends that have it: {has})", what.describe()),
    }
}

/// The error for a release or extend of `key` with `token` by a client that does not hold the
/// lock itself, on a backend where only the holder can (PostgreSQL session locks, file locks):
/// [`Error::Unsupported`](crate::Error::Unsupported) saying `what` if `state` (the key as
/// `inspect` sees it) shows the lock held with `token`, by another client or process; otherwise
/// [`Error::NotHeld`](crate::Error::NotHeld), or the error `inspect` returned.
pub(crate) fn not_held_here(
    backend: &'static str,
    what: String,
    key: &str,
    token: &LockToken,
    state: Result<LockState>,
) -> crate::core::error::Error {
    use crate::core::error::Error;
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

/// Implements [`LockBackend`] for a client type whose inherent `try_acquire`, `acquire`,
/// `release`, `extend`, `inspect` and `raise_fencing_counter` have the `RedisClient`
/// signatures: `impl_lock_backend!(Type, Variant);` with its [`Backend`] variant. The
/// `From<Type> for Locker` is in `locker.rs` (nothing below the locker imports it).
macro_rules! impl_lock_backend {
    ($client:ty, $kind:ident) => {
        $crate::core::backend::impl_lock_backend!(@impl $client, $kind, {});
    };
    // A backend with a lock table: its inherent `list` and `force_release` too.
    ($client:ty, $kind:ident, lock_table) => {
        $crate::core::backend::impl_lock_backend!(@impl $client, $kind, {
            fn list<'a>(
                &'a self,
                pattern: &'a str,
            ) -> ::futures_util::future::BoxFuture<
                'a,
                $crate::Result<::std::vec::Vec<$crate::LockEntry>>,
            > {
                Box::pin(<$client>::list(self, pattern))
            }

            fn force_release<'a>(
                &'a self,
                key: &'a str,
                reason: &'a str,
            ) -> ::futures_util::future::BoxFuture<'a, $crate::Result<$crate::ForceReleased>> {
                Box::pin(<$client>::force_release(self, key, reason))
            }
        });
    };
    (@impl $client:ty, $kind:ident, { $($lock_table:tt)* }) => {
        impl $crate::core::backend::LockBackend for $client {
            fn kind(&self) -> $crate::core::kind::Backend {
                $crate::core::kind::Backend::$kind
            }

            fn as_any(&self) -> &dyn ::std::any::Any {
                self
            }

            fn try_acquire<'a>(
                &'a self,
                key: &'a str,
                options: &'a $crate::LockOptions,
            ) -> ::futures_util::future::BoxFuture<'a, $crate::Result<$crate::TryAcquire>> {
                Box::pin(<$client>::try_acquire(self, key, options))
            }

            fn acquire<'a>(
                &'a self,
                key: &'a str,
                options: &'a $crate::LockOptions,
            ) -> ::futures_util::future::BoxFuture<'a, $crate::Result<$crate::LockGuard>> {
                Box::pin(<$client>::acquire(self, key, options))
            }

            fn release<'a>(
                &'a self,
                key: &'a str,
                token: &'a $crate::LockToken,
            ) -> ::futures_util::future::BoxFuture<'a, $crate::Result<()>> {
                Box::pin(<$client>::release(self, key, token))
            }

            fn extend<'a>(
                &'a self,
                key: &'a str,
                token: &'a $crate::LockToken,
                ttl: ::std::time::Duration,
            ) -> ::futures_util::future::BoxFuture<'a, $crate::Result<()>> {
                Box::pin(<$client>::extend(self, key, token, ttl))
            }

            fn inspect<'a>(
                &'a self,
                key: &'a str,
            ) -> ::futures_util::future::BoxFuture<'a, $crate::Result<$crate::LockState>> {
                Box::pin(<$client>::inspect(self, key))
            }

            fn raise_fencing_counter<'a>(
                &'a self,
                key: &'a str,
                at_least: u64,
            ) -> ::futures_util::future::BoxFuture<'a, $crate::Result<u64>> {
                Box::pin(<$client>::raise_fencing_counter(self, key, at_least))
            }

            $($lock_table)*
        }
    };
}
pub(crate) use impl_lock_backend;
