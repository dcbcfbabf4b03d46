//! What an acquisition attempt and an inspection tell, for every backend: [`TryAcquire`],
//! [`LockState`]; and the largest fencing number a Redis or Valkey lock issues.

use std::time::Duration;

use crate::core::error::{Error, Result};
use crate::core::guard::LockGuard;
use crate::core::owner::Owner;

/// The outcome of one acquisition attempt.
#[derive(Debug)]
#[must_use = "dropping an acquired guard releases the lock in the background"]
pub enum TryAcquire {
    /// The lock is ours.
    Acquired(LockGuard),
    /// Someone else holds it. A normal outcome, not an error.
    Busy {
        /// How long the holder's lease still runs, when the server told us (waiting
        /// acquisitions and fencing acquisitions ask for it; a plain `SET NX` does not say).
        /// `None` also when the key has no TTL at all (it was not set by a lock).
        remaining: Option<Duration>,
    },
}

impl TryAcquire {
    /// The guard, if acquired.
    pub fn acquired(self) -> Option<LockGuard> {
        match self {
            TryAcquire::Acquired(g) => Some(g),
            TryAcquire::Busy { .. } => None,
        }
    }

    /// True if the lock was acquired.
    pub fn is_acquired(&self) -> bool {
        matches!(self, TryAcquire::Acquired(_))
    }
}

/// What a lock key holds right now, as [`Locker::inspect`](crate::Locker::inspect) reads it.
///
/// [`Locker::inspect`]: crate::Locker::inspect
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockState {
    /// The lock key.
    pub key: String,
    /// The holder's token, if the lock is held. This is the holder's capability: show it only to
    /// whoever may release the lock.
    pub holder: Option<String>,
    /// The remaining TTL, if the key exists and has one.
    pub ttl: Option<Duration>,
    /// The last fencing number issued for this key, if fencing was ever used on it.
    pub fencing_counter: Option<u64>,
    /// Who holds it, as the holder described itself with [`LockOptions::owner`], read from the
    /// holder's stored value; `None` if the lock is free or was taken without an owner.
    /// (PostgreSQL session locks: the owner the holder's token carries, as elsewhere.)
    ///
    /// [`LockOptions::owner`]: crate::LockOptions::owner
    pub owner: Option<Owner>,
}

impl LockState {
    /// A key's state; its owner is parsed from `holder`.
    pub(crate) fn new(
        key: impl Into<String>,
        holder: Option<String>,
        ttl: Option<Duration>,
        fencing_counter: Option<u64>,
    ) -> Self {
        // A lock kept for its minimum hold shows the holder that released it.
        let holder = holder.map(
            |h| match h.strip_prefix(crate::core::listing::KEPT_PREFIX) {
                Some(value) => value.to_string(),
                None => h,
            },
        );
        LockState {
            key: key.into(),
            owner: holder.as_deref().and_then(Owner::from_stored_value),
            holder,
            ttl,
            fencing_counter,
        }
    }
}

/// The largest fencing number a Redis or Valkey lock issues exactly: 2^53. The scripts that
/// issue numbers hold them as Lua numbers (doubles), so [`Locker::raise_fencing_counter`](crate::Locker::raise_fencing_counter)
/// refuses to raise a counter to this or beyond, and an acquisition with fencing whose counter
/// is already there (set from outside) fails with [`Error::FencingExhausted`] without taking
/// the lock. Counting one acquisition per microsecond, a counter takes 285 years to get here.
///
/// [`Locker::raise_fencing_counter`]: crate::Locker::raise_fencing_counter
/// [`Error::FencingExhausted`]: crate::Error::FencingExhausted
pub const MAX_FENCING_NUMBER: u64 = 1 << 53;

/// How an acquisition ended, for the metrics.
impl crate::core::metrics::Outcome {
    /// A `try_acquire`'s outcome.
    pub(crate) fn of_try(result: &Result<TryAcquire>) -> Self {
        match result {
            Ok(TryAcquire::Acquired(_)) => crate::core::metrics::Outcome::Acquired,
            Ok(TryAcquire::Busy { .. }) => crate::core::metrics::Outcome::Busy,
            Err(_) => crate::core::metrics::Outcome::Error,
        }
    }

    /// An `acquire`'s outcome: `NotAcquired` is a wait that timed out (or, without a wait, a
    /// busy lock).
    pub(crate) fn of_acquire(result: &Result<LockGuard>) -> Self {
        match result {
            Ok(_) => crate::core::metrics::Outcome::Acquired,
            Err(Error::NotAcquired {
                attempts: 1,
                waited,
                ..
            }) if waited.is_zero() => crate::core::metrics::Outcome::Busy,
            Err(Error::NotAcquired { .. }) => crate::core::metrics::Outcome::TimedOut,
            Err(_) => crate::core::metrics::Outcome::Error,
        }
    }
}

impl crate::core::trace::Traced for TryAcquire {
    fn outcome(&self) -> (&'static str, Option<u64>) {
        match self {
            TryAcquire::Acquired(g) => ("acquired", g.fencing_token()),
            TryAcquire::Busy { .. } => ("busy", None),
        }
    }
}

impl crate::core::trace::Traced for LockState {
    fn outcome(&self) -> (&'static str, Option<u64>) {
        match self.holder {
            Some(_) => ("held", self.fencing_counter),
            None => ("free", self.fencing_counter),
        }
    }
}
