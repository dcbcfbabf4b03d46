//! What a command's KEY names: a lock, a counting semaphore (`--permits N`) or one side of a
//! read-write lock (`--read`, `--write`), and what `run`, `acquire`, `extend` and `release` do
//! with it. Semaphores and read-write locks are Redis and Valkey only.

use std::time::Duration;

use leasehold::{LockGuard, LockOptions, LockToken, Result, RwLock, Semaphore, TryAcquire};

use crate::cli::PrimitiveArgs;
use crate::locks::Locks;

/// The primitive a command works on.
pub(crate) enum Primitive {
    /// A plain (or `--fair`) lock.
    Lock,
    /// One permit of a counting semaphore.
    Permit(Semaphore),
    /// A reader of a read-write lock.
    Reader(RwLock),
    /// The writer of a read-write lock.
    Writer(RwLock),
}

impl Primitive {
    /// The primitive `key` names under these flags (clap keeps them exclusive).
    pub(crate) fn of(locks: &Locks, key: &str, args: &PrimitiveArgs) -> Result<Primitive> {
        Ok(match (args.permits, args.read, args.write) {
            (Some(n), _, _) => Primitive::Permit(locks.semaphore(key, n)?),
            (None, true, _) => Primitive::Reader(locks.rwlock(key)?),
            (None, false, true) => Primitive::Writer(locks.rwlock(key)?),
            (None, false, false) => Primitive::Lock,
        })
    }

    /// One attempt, without waiting.
    pub(crate) async fn try_acquire(
        &self,
        locks: &Locks,
        key: &str,
        options: &LockOptions,
    ) -> Result<TryAcquire> {
        match self {
            Primitive::Lock => locks.try_acquire(key, options).await,
            Primitive::Permit(s) => s.try_acquire(options).await,
            Primitive::Reader(rw) => rw.try_read(options).await,
            Primitive::Writer(rw) => rw.try_write(options).await,
        }
    }

    /// Waits as `options` say.
    pub(crate) async fn acquire(
        &self,
        locks: &Locks,
        key: &str,
        options: &LockOptions,
    ) -> Result<LockGuard> {
        match self {
            Primitive::Lock => locks.acquire(key, options).await,
            Primitive::Permit(s) => s.acquire(options).await,
            Primitive::Reader(rw) => rw.read(options).await,
            Primitive::Writer(rw) => rw.write(options).await,
        }
    }

    /// Releases what `token` holds (`fair`: a lock taken with `--fair`, handed to the next
    /// waiter).
    pub(crate) async fn release(
        &self,
        locks: &Locks,
        key: &str,
        token: &LockToken,
        fair: bool,
    ) -> Result<()> {
        match self {
            Primitive::Lock if fair => locks.release_fair(key, token).await,
            Primitive::Lock => locks.release(key, token).await,
            Primitive::Permit(s) => s.release(token).await,
            Primitive::Reader(rw) => rw.release_read(token).await,
            Primitive::Writer(rw) => rw.release_write(token).await,
        }
    }

    /// Resets what `token` holds to `ttl` from now.
    pub(crate) async fn extend(
        &self,
        locks: &Locks,
        key: &str,
        token: &LockToken,
        ttl: Duration,
    ) -> Result<()> {
        match self {
            Primitive::Lock => locks.extend(key, token, ttl).await,
            Primitive::Permit(s) => s.extend(token, ttl).await,
            Primitive::Reader(rw) => rw.extend_read(token, ttl).await,
            Primitive::Writer(rw) => rw.extend_write(token, ttl).await,
        }
    }
}
