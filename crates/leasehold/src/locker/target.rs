//! [`LockTarget`]: a lockable thing named by its kind, for callers that choose it at run time
//! (the Python and Node.js bindings): the one place that maps a kind to its handle.

use super::Locker;
use crate::core::error::{Error, Result};
use crate::core::sync::Lockable;

/// What to take, named by its kind, as the bindings receive it; [`Locker::lockable`] makes its
/// handle. (An election's campaign is not a [`Lockable`]: see [`Locker::election`].)
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum LockTarget {
    /// The plain lock `key` ([`Locker::lock`]).
    Lock(String),
    /// One of `permits` permits of the semaphore `name` ([`Locker::semaphore`]).
    Semaphore {
        /// The semaphore's name.
        name: String,
        /// How many holders it admits at once.
        permits: u32,
    },
    /// The read side of the read-write lock `name` ([`Locker::rwlock`]).
    Read(String),
    /// The write side of the read-write lock `name`.
    Write(String),
    /// Every key at once or none (Redis only: `RedisClient::multi_lock`).
    Multi(Vec<String>),
}

impl LockTarget {
    /// Its name as the bindings show it: the key, or the primitive's name (the keys of a
    /// multi-lock, joined by commas).
    pub fn name(&self) -> String {
        match self {
            LockTarget::Lock(k)
            | LockTarget::Semaphore { name: k, .. }
            | LockTarget::Read(k)
            | LockTarget::Write(k) => k.clone(),
            LockTarget::Multi(keys) => keys.join(","),
        }
    }
}

impl Locker {
    /// The handle that takes `what` (no round trip).
    ///
    /// # Errors
    /// As the primitive's own constructor ([`Locker::semaphore`], [`Locker::rwlock`], ...);
    /// [`Error::Unsupported`] for a multi-lock on a backend other than Redis.
    pub fn lockable(&self, what: &LockTarget) -> Result<Box<dyn Lockable>> {
        Ok(match what {
            LockTarget::Lock(key) => Box::new(self.lock(key)),
            LockTarget::Semaphore { name, permits } => Box::new(self.semaphore(name, *permits)?),
            LockTarget::Read(name) => Box::new(self.rwlock(name)?.read_side()),
            LockTarget::Write(name) => Box::new(self.rwlock(name)?.write_side()),
            LockTarget::Multi(keys) => match self.as_redis() {
                Some(client) => Box::new(client.multi_lock(keys)?),
                None => {
                    return Err(Error::Unsupported {
                        backend: self.backend(),
                        what: "multi-locks (one lock over several keys; redis:// only)".into(),
                    });
                }
            },
        })
    }
}
