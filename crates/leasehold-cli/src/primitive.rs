//! What a command's KEY names: a lock, a counting semaphore (`--permits N`) or one side of a
//! read-write lock (`--read`, `--write`), and what `run`, `acquire`, `extend` and `release` do
//! with it. Which backend has which primitive: [`leasehold::Backend::has`]; asking another
//! is a usage error naming the backend.

use std::time::Duration;

use leasehold::{Lock, LockGuard, LockOptions, LockToken, Lockable, Locker, Result, TryAcquire};

use crate::cli::PrimitiveArgs;
use crate::exit::Usage;

/// The primitive a command works on: a plain (or `--fair`) lock, one permit of a counting
/// semaphore, or a side of a read-write lock, through the library's one dispatch
/// ([`Lockable`]).
pub(crate) struct Primitive {
    taken: Box<dyn Lockable>,
    /// The plain lock, when that is what it is (its release may hand it on: `--fair`).
    lock: Option<Lock>,
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
        let taken: Box<dyn Lockable> = match (args.permits, args.read, args.write) {
            (Some(n), _, _) => Box::new(usage(locker.semaphore(key, n), "--permits")?),
            (None, true, _) => Box::new(usage(locker.rwlock(key), "--read")?.read_side()),
            (None, false, true) => Box::new(usage(locker.rwlock(key), "--write")?.write_side()),
            (None, false, false) => {
                let lock = locker.lock(key);
                return Ok(Primitive {
                    taken: Box::new(lock.clone()),
                    lock: Some(lock),
                });
            }
        };
        Ok(Primitive { taken, lock: None })
    }

    /// One attempt, without waiting.
    pub(crate) async fn try_acquire(&self, options: &LockOptions) -> Result<TryAcquire> {
        self.taken.try_acquire(options).await
    }

    /// Waits as `options` say.
    pub(crate) async fn acquire(&self, options: &LockOptions) -> Result<LockGuard> {
        self.taken.acquire(options).await
    }

    /// Releases what `token` holds (`fair`: a lock taken with `--fair`, handed to the next
    /// waiter).
    pub(crate) async fn release(&self, token: &LockToken, fair: bool) -> Result<()> {
        match (&self.lock, fair) {
            (Some(lock), true) => lock.release_fair(token).await,
            _ => self.taken.release(token).await,
        }
    }

    /// Resets what `token` holds to `ttl` from now.
    pub(crate) async fn extend(&self, token: &LockToken, ttl: Duration) -> Result<()> {
        self.taken.extend(token, ttl).await
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
