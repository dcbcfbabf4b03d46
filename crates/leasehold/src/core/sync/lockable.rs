//! [`Lockable`]: what a plain lock, a semaphore's permit, a read-write lock's side and a
//! multi-key lock have in common, so that code working on any of them (the CLI, the Python
//! binding, the lab's checker) dispatches once, through `Box<dyn Lockable>`, as
//! DistributedLock's `IDistributedLock` lets callers hold any of its locks.

use std::fmt::Debug;
use std::time::Duration;

use crate::core::error::Result;
use crate::core::guard::LockGuard;
use crate::core::options::LockOptions;
use crate::core::outcome::TryAcquire;
use crate::core::token::LockToken;

use super::RwLock;
use super::rwlock::Side;

/// Something taken with a [`LockGuard`]: a plain lock
/// ([`Locker::lock`](crate::Locker::lock)), a [`Semaphore`](crate::Semaphore)'s permit, a
/// [`RwLock`]'s read or write side ([`RwLock::read_side`], [`RwLock::write_side`]), or a
/// multi-key lock (`redis::MultiLock`). Each method has the meaning of the handle's own method
/// of the same name (a read side's `release` is [`RwLock::release_read`], ...).
#[async_trait::async_trait]
pub trait Lockable: Send + Sync + Debug {
    /// The name it is taken under (a lock's key, a semaphore's or read-write lock's name).
    fn name(&self) -> &str;

    /// One attempt, without waiting: [`TryAcquire::Busy`] when it is held.
    async fn try_acquire(&self, options: &LockOptions) -> Result<TryAcquire>;

    /// Takes it, waiting as `options` say.
    async fn acquire(&self, options: &LockOptions) -> Result<LockGuard>;

    /// Releases what `token` holds (a guard does this by itself; this is for a token received
    /// from elsewhere, such as the CLI's `release`).
    async fn release(&self, token: &LockToken) -> Result<()>;

    /// Resets what `token` holds to `ttl` from now.
    async fn extend(&self, token: &LockToken, ttl: Duration) -> Result<()>;
}

/// One side of a [`RwLock`], as a [`Lockable`]: made by [`RwLock::read_side`] or
/// [`RwLock::write_side`].
#[derive(Debug, Clone)]
pub struct RwLockSide {
    lock: RwLock,
    side: Side,
}

impl RwLock {
    /// Its read side, as a [`Lockable`] (shared with other readers).
    pub fn read_side(&self) -> RwLockSide {
        RwLockSide {
            lock: self.clone(),
            side: Side::Read,
        }
    }

    /// Its write side, as a [`Lockable`] (alone).
    pub fn write_side(&self) -> RwLockSide {
        RwLockSide {
            lock: self.clone(),
            side: Side::Write,
        }
    }
}

impl RwLockSide {
    /// Whether this is the write side.
    pub fn is_write(&self) -> bool {
        self.side == Side::Write
    }
}

#[async_trait::async_trait]
impl Lockable for RwLockSide {
    fn name(&self) -> &str {
        self.lock.name()
    }

    async fn try_acquire(&self, options: &LockOptions) -> Result<TryAcquire> {
        self.lock.try_take(self.side, options).await
    }

    async fn acquire(&self, options: &LockOptions) -> Result<LockGuard> {
        self.lock.take(self.side, options).await
    }

    async fn release(&self, token: &LockToken) -> Result<()> {
        self.lock.release(self.side, token).await
    }

    async fn extend(&self, token: &LockToken, ttl: Duration) -> Result<()> {
        self.lock.extend(self.side, token, ttl).await
    }
}

#[async_trait::async_trait]
impl Lockable for super::Semaphore {
    fn name(&self) -> &str {
        super::Semaphore::name(self)
    }

    async fn try_acquire(&self, options: &LockOptions) -> Result<TryAcquire> {
        super::Semaphore::try_acquire(self, options).await
    }

    async fn acquire(&self, options: &LockOptions) -> Result<LockGuard> {
        super::Semaphore::acquire(self, options).await
    }

    async fn release(&self, token: &LockToken) -> Result<()> {
        super::Semaphore::release(self, token).await
    }

    async fn extend(&self, token: &LockToken, ttl: Duration) -> Result<()> {
        super::Semaphore::extend(self, token, ttl).await
    }
}
