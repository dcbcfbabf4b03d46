//! [`Lock`]: the plain lock on one key, as a handle.

use std::time::Duration;

use super::Locker;
use crate::core::error::Result;
use crate::core::guard::{Lease, LockGuard};
use crate::core::options::LockOptions;
use crate::core::outcome::{LockState, TryAcquire};
use crate::core::token::LockToken;

/// A plain lock on one key, as a handle like the [`Semaphore`](crate::Semaphore) and the [`RwLock`](crate::RwLock): made by
/// [`Locker::lock`] (no round trip), cheap to clone. Each method is the [`Locker`]'s keyed
/// method of the same name on this key (spans, metrics and history included), and
/// [`Lockable`](crate::Lockable) lets code take a lock, a permit or a read-write lock's side
/// through one `Box<dyn Lockable>`.
#[derive(Debug, Clone)]
pub struct Lock {
    locker: Locker,
    key: String,
}

impl Locker {
    /// The plain lock on `key`, as a handle (no round trip; the key is checked when the lock
    /// is taken).
    pub fn lock(&self, key: &str) -> Lock {
        Lock {
            locker: self.clone(),
            key: key.to_string(),
        }
    }
}

impl Lock {
    /// The key.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The locker it goes through.
    pub fn locker(&self) -> &Locker {
        &self.locker
    }

    /// See [`Locker::try_acquire`].
    ///
    /// # Errors
    /// As [`Locker::try_acquire`].
    pub async fn try_acquire(&self, options: &LockOptions) -> Result<TryAcquire> {
        self.locker.try_acquire(&self.key, options).await
    }

    /// See [`Locker::acquire`].
    ///
    /// # Errors
    /// As [`Locker::acquire`].
    pub async fn acquire(&self, options: &LockOptions) -> Result<LockGuard> {
        self.locker.acquire(&self.key, options).await
    }

    /// See [`Locker::with_lock`].
    ///
    /// # Errors
    /// As [`Locker::with_lock`].
    pub async fn with_lock<T, F, Fut>(&self, options: &LockOptions, work: F) -> Result<T>
    where
        F: FnOnce(Lease) -> Fut,
        Fut: std::future::Future<Output = T>,
    {
        self.locker.with_lock(&self.key, options, work).await
    }

    /// See [`Locker::release`].
    ///
    /// # Errors
    /// As [`Locker::release`].
    pub async fn release(&self, token: &LockToken) -> Result<()> {
        self.locker.release(&self.key, token).await
    }

    /// See [`Locker::release_fair`].
    ///
    /// # Errors
    /// As [`Locker::release_fair`].
    pub async fn release_fair(&self, token: &LockToken) -> Result<()> {
        self.locker.release_fair(&self.key, token).await
    }

    /// See [`Locker::extend`].
    ///
    /// # Errors
    /// As [`Locker::extend`].
    pub async fn extend(&self, token: &LockToken, ttl: Duration) -> Result<()> {
        self.locker.extend(&self.key, token, ttl).await
    }

    /// See [`Locker::inspect`].
    ///
    /// # Errors
    /// As [`Locker::inspect`].
    pub async fn inspect(&self) -> Result<LockState> {
        self.locker.inspect(&self.key).await
    }
}

#[async_trait::async_trait]
impl crate::core::sync::Lockable for Lock {
    fn name(&self) -> &str {
        &self.key
    }

    async fn try_acquire(&self, options: &LockOptions) -> Result<TryAcquire> {
        Lock::try_acquire(self, options).await
    }

    async fn acquire(&self, options: &LockOptions) -> Result<LockGuard> {
        Lock::acquire(self, options).await
    }

    async fn release(&self, token: &LockToken) -> Result<()> {
        Lock::release(self, token).await
    }

    async fn extend(&self, token: &LockToken, ttl: Duration) -> Result<()> {
        Lock::extend(self, token, ttl).await
    }
}
