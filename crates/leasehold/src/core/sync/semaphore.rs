//! [`Semaphore`]: `permits` holders of a name at once, on any backend that has it.

use std::fmt::Debug;
use std::sync::Arc;
use std::time::Duration;

use crate::core::error::{Error, Result};
use crate::core::guard::{Lease, LockGuard};
use crate::core::kind::{Backend, Taking};
use crate::core::options::LockOptions;
use crate::core::outcome::TryAcquire;
use crate::core::token::{LockToken, validate_key};

/// The most permits a semaphore may have.
pub const MAX_PERMITS: u32 = 1_000_000;

/// What a backend implements to offer [`Semaphore`]s: the semaphore's protocol, for the one
/// name and number of permits it was made for. Each method has the meaning of the
/// [`Semaphore`] method of the same name. Guarantees every provider keeps (docs/guarantees.md
/// §3): while their leases are valid, at most `permits` tokens hold a permit; release and
/// extend are token-checked on the server; an auto-extended permit that stops being held is
/// reported lost.
#[async_trait::async_trait]
pub(crate) trait SemaphoreProvider: Send + Sync + Debug + 'static {
    /// One attempt, without waiting.
    async fn try_acquire(&self, options: &LockOptions) -> Result<TryAcquire>;
    /// Waits as `options` say.
    async fn acquire(&self, options: &LockOptions) -> Result<LockGuard>;
    /// Releases the permit `token` holds.
    async fn release(&self, token: &LockToken) -> Result<()>;
    /// Resets the permit `token` holds to `ttl` from now.
    async fn extend(&self, token: &LockToken, ttl: Duration) -> Result<()>;
    /// How many permits are held now.
    async fn holders(&self) -> Result<u32>;
}

/// A counting semaphore: at most `permits` holders of `name` at once, across every process.
/// Cheap to clone; made by [`Locker::semaphore`](crate::Locker::semaphore) (or a backend's own
/// client, such as [`Locker::semaphore`](crate::Locker::semaphore)).
///
/// ```no_run
/// use std::time::Duration;
/// use leasehold::{LockOptions, Locker};
///
/// # async fn example(locks: Locker) -> Result<(), leasehold::Error> {
/// let uploads = locks.semaphore("uploads", 4)?; // at most 4 at once, across every process
/// let opts = LockOptions::new(Duration::from_secs(30))
///     .auto_extend(true)
///     .wait(Duration::from_secs(60));
/// uploads
///     .with_permit(&opts, |permit| async move {
///         // one of at most 4 holders while `permit.is_held()`
///     })
///     .await?;
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct Semaphore {
    label: super::Label,
    permits: u32,
    provider: Arc<dyn SemaphoreProvider>,
}

impl Semaphore {
    /// Checks `name` and `permits` (the checks every backend shares).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for an empty or over-long name, or `permits` outside
    /// 1 ..= [`MAX_PERMITS`].
    pub(crate) fn check(name: &str, permits: u32) -> Result<()> {
        validate_key(name)?;
        if permits == 0 {
            return Err(Error::invalid(
                "permits",
                "a semaphore needs at least one permit",
            ));
        }
        if permits > MAX_PERMITS {
            return Err(Error::invalid(
                "permits",
                format!("{permits} is more than the limit of {MAX_PERMITS}"),
            ));
        }
        Ok(())
    }

    /// The handle over `provider`, made for `name` and `permits` (checked by
    /// [`Semaphore::check`] before the provider was made).
    pub(crate) fn new(
        backend: Backend,
        name: &str,
        permits: u32,
        provider: impl SemaphoreProvider,
    ) -> Semaphore {
        Semaphore {
            label: super::Label::new(backend, name),
            permits,
            provider: Arc::new(provider),
        }
    }

    /// The semaphore's name.
    pub fn name(&self) -> &str {
        &self.label.name
    }

    /// How many holders it admits at once.
    pub fn permits(&self) -> u32 {
        self.permits
    }

    /// One attempt to take a permit, without waiting. Busy (all held) is an outcome, with the
    /// time until the first held permit expires where the backend knows it.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a bad TTL; [`Error::Unsupported`] for options the
    /// backend's semaphore does not have (fair mode, `replica_ack`, fencing on Redis);
    /// [`Error::Conflict`] when the name's holders use another number of permits (on every
    /// backend that records the number; PostgreSQL session locks cannot tell: their permits
    /// are slots, see the `postgres` module);
    /// [`Error::ExpiredOnArrival`]; connection and server errors.
    pub async fn try_acquire(&self, options: &LockOptions) -> Result<TryAcquire> {
        let span = "leasehold.semaphore.try_acquire";
        let taking = self.provider.try_acquire(options);
        self.label.take(options, Taking::Permit, span, taking).await
    }

    /// Takes a permit, retrying until `options.wait_bound()` (one attempt without one).
    ///
    /// # Errors
    /// [`Error::NotAcquired`] if every permit stayed held until the deadline; otherwise as
    /// [`Semaphore::try_acquire`].
    pub async fn acquire(&self, options: &LockOptions) -> Result<LockGuard> {
        let span = "leasehold.semaphore.acquire";
        let taking = self.provider.acquire(options);
        self.label.take(options, Taking::Permit, span, taking).await
    }

    /// Waits for a permit (as [`Semaphore::acquire`]), runs `work`, and releases the permit
    /// whatever happens, like [`Locker::with_lock`](crate::Locker::with_lock): `work` is
    /// dropped at once if the permit is lost meanwhile ([`Error::LockLost`]).
    ///
    /// # Errors
    /// As [`Semaphore::acquire`]; [`Error::LockLost`]; [`Error::NotHeld`] if the permit had
    /// expired by the release.
    pub async fn with_permit<T, F, Fut>(&self, options: &LockOptions, work: F) -> Result<T>
    where
        F: FnOnce(Lease) -> Fut,
        Fut: std::future::Future<Output = T>,
    {
        let guard = self.acquire(options).await?;
        crate::core::guard::run_with_lock(guard, options, work).await
    }

    /// Releases the permit that `token` holds (a guard does this by itself; this is for a token
    /// received from elsewhere).
    ///
    /// # Errors
    /// [`Error::NotHeld`] if `token` holds no unexpired permit of this semaphore;
    /// [`Error::Unsupported`] on a backend where only the holding client can release.
    pub async fn release(&self, token: &LockToken) -> Result<()> {
        self.label
            .traced("leasehold.semaphore.release", self.provider.release(token))
            .await
    }

    /// Resets the permit that `token` holds to `ttl` from now.
    ///
    /// # Errors
    /// [`Error::NotHeld`] if `token` holds no unexpired permit; [`Error::InvalidArgument`] for
    /// a bad TTL.
    pub async fn extend(&self, token: &LockToken, ttl: Duration) -> Result<()> {
        self.label
            .traced(
                "leasehold.semaphore.extend",
                self.provider.extend(token, ttl),
            )
            .await
    }

    /// How many permits are held (unexpired) right now.
    ///
    /// # Errors
    /// Connection and server errors.
    pub async fn holders(&self) -> Result<u32> {
        self.label
            .traced("leasehold.semaphore.holders", self.provider.holders())
            .await
    }
}
