//! What a command's KEY names: a lock, a counting semaphore (`--permits N`) or one side of a
//! read-write lock (`--read`, `--write`), and what `run`, `acquire`, `extend` and `release` do
//! with it. Which backend has which primitive: [`leasehold::Backend::has`]; asking another
//! is a usage error naming the backend.

use std::time::Duration;

use leasehold::{LockGuard, LockOptions, LockToken, Locker, Result, RwLock, Semaphore, TryAcquire};

use crate::cli::PrimitiveArgs;
use crate::exit::Usage;

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
    ///
    /// # Errors
    /// [`Usage`] when the flags name a primitive the URL's backend does not have.
    pub(crate) fn of(
        locker: &Locker,
        key: &str,
        args: &PrimitiveArgs,
    ) -> anyhow::Result<Primitive> {
        Ok(match (args.permits, args.read, args.write) {
            (Some(n), _, _) => Primitive::Permit(usage(locker.semaphore(key, n), "--permits")?),
            (None, true, _) => Primitive::Reader(usage(locker.rwlock(key), "--read")?),
            (None, false, true) => Primitive::Writer(usage(locker.rwlock(key), "--write")?),
            (None, false, false) => Primitive::Lock,
        })
    }

    /// One attempt, without waiting.
    pub(crate) async fn try_acquire(
        &self,
        locker: &Locker,
        key: &str,
        options: &LockOptions,
    ) -> Result<TryAcquire> {
        match self {
            Primitive::Lock => locker.try_acquire(key, options).await,
            Primitive::Permit(s) => s.try_acquire(options).await,
            Primitive::Reader(rw) => rw.try_read(options).await,
            Primitive::Writer(rw) => rw.try_write(options).await,
        }
    }

    /// Waits as `options` say.
    pub(crate) async fn acquire(
        &self,
        locker: &Locker,
        key: &str,
        options: &LockOptions,
    ) -> Result<LockGuard> {
        match self {
            Primitive::Lock => locker.acquire(key, options).await,
            Primitive::Permit(s) => s.acquire(options).await,
            Primitive::Reader(rw) => rw.read(options).await,
            Primitive::Writer(rw) => rw.write(options).await,
        }
    }

    /// Releases what `token` holds (`fair`: a lock taken with `--fair`, handed to the next
    /// waiter).
    pub(crate) async fn release(
        &self,
        locker: &Locker,
        key: &str,
        token: &LockToken,
        fair: bool,
    ) -> Result<()> {
        match self {
            Primitive::Lock if fair => locker.release_fair(key, token).await,
            Primitive::Lock => locker.release(key, token).await,
            Primitive::Permit(s) => s.release(token).await,
            Primitive::Reader(rw) => rw.release_read(token).await,
            Primitive::Writer(rw) => rw.release_write(token).await,
        }
    }

    /// Resets what `token` holds to `ttl` from now.
    pub(crate) async fn extend(
        &self,
        locker: &Locker,
        key: &str,
        token: &LockToken,
        ttl: Duration,
    ) -> Result<()> {
        match self {
            Primitive::Lock => locker.extend(key, token, ttl).await,
            Primitive::Permit(s) => s.extend(token, ttl).await,
            Primitive::Reader(rw) => rw.extend_read(token, ttl).await,
            Primitive::Writer(rw) => rw.extend_write(token, ttl).await,
        }
    }
}

/// `made`, with a backend's refusal of the primitive (`Error::Unsupported`) turned into a
/// [`Usage`] error naming the flag that asked for it.
///
/// # Errors
/// [`Usage`] for a primitive the backend does not have; the other errors as they are.
pub(crate) fn usage<T>(made: Result<T>, flag: &str) -> anyhow::Result<T> {
    match made {
        Err(leasehold::Error::Unsupported { backend, what }) => {
            Err(Usage(format!("{flag}: the {backend} backend has no {what}")).into())
        }
        other => Ok(other?),
    }
}
