//! [`RwLock`]: many readers or one writer of a name, on any backend that has it.

use std::fmt::Debug;
use std::sync::Arc;
use std::time::Duration;

use crate::core::error::Result;
use crate::core::guard::{Lease, LockGuard};
use crate::core::kind::{Backend, Taking};
use crate::core::options::LockOptions;
use crate::core::outcome::TryAcquire;
use crate::core::token::LockToken;

/// What a backend implements to offer [`RwLock`]s, for the one name it was made for. Each
/// method has the meaning of the [`RwLock`] method of the same name. Guarantees every provider
/// keeps (docs/guarantees.md §4): while leases are valid, a writer holds alone (no reader, no
/// other writer); a waiting writer is not starved by a stream of readers; release and extend
/// are token-checked on the server.
#[async_trait::async_trait]
pub(crate) trait RwLockProvider: Send + Sync + Debug + 'static {
    async fn try_read(&self, options: &LockOptions) -> Result<TryAcquire>;
    async fn read(&self, options: &LockOptions) -> Result<LockGuard>;
    async fn try_write(&self, options: &LockOptions) -> Result<TryAcquire>;
    async fn write(&self, options: &LockOptions) -> Result<LockGuard>;
    async fn release_read(&self, token: &LockToken) -> Result<()>;
    async fn release_write(&self, token: &LockToken) -> Result<()>;
    async fn extend_read(&self, token: &LockToken, ttl: Duration) -> Result<()>;
    async fn extend_write(&self, token: &LockToken, ttl: Duration) -> Result<()>;
    async fn readers(&self) -> Result<u32>;
}

/// A read-write lock: any number of readers, or one writer, of `name`. Cheap to clone; made by
/// [`Locker::rwlock`](crate::Locker::rwlock) (or a backend's own client, such as
/// [`Locker::rwlock`](crate::Locker::rwlock)). A waiting writer keeps new readers out,
/// so the current ones drain and a stream of readers cannot starve it.
///
/// ```no_run
/// use std::time::Duration;
/// use leasehold::{LockOptions, Locker};
///
/// # async fn example(locks: Locker) -> Result<(), leasehold::Error> {
/// let config = locks.rwlock("config")?;
/// let opts = LockOptions::new(Duration::from_secs(10)).wait(Duration::from_secs(5));
/// let reading = config.read(&opts).await?; // shared with other readers
/// reading.release().await?;
/// let writing = config.write(&opts).await?; // alone
/// writing.release().await?;
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct RwLock {
    label: super::Label,
    provider: Arc<dyn RwLockProvider>,
}

impl RwLock {
    /// The handle over `provider`, made for `name` (checked with `validate_key` before).
    pub(crate) fn new(backend: Backend, name: &str, provider: impl RwLockProvider) -> RwLock {
        RwLock {
            label: super::Label::new(backend, name),
            provider: Arc::new(provider),
        }
    }

    /// The lock's name.
    pub fn name(&self) -> &str {
        &self.label.name
    }

    /// One attempt to read: succeeds while no writer holds or waits for the lock.
    ///
    /// # Errors
    /// [`Error::Unsupported`](crate::Error::Unsupported) for options the backend's read side
    /// does not have (fencing, fair mode, `replica_ack`); as
    /// [`Locker::try_acquire`](crate::Locker::try_acquire).
    pub async fn try_read(&self, options: &LockOptions) -> Result<TryAcquire> {
        self.label.check(options, Taking::Read)?;
        self.label
            .traced("leasehold.rwlock.try_read", self.provider.try_read(options))
            .await
    }

    /// Waits to read until `options.wait_bound()`.
    ///
    /// # Errors
    /// [`Error::NotAcquired`](crate::Error::NotAcquired) at the deadline; as
    /// [`RwLock::try_read`].
    pub async fn read(&self, options: &LockOptions) -> Result<LockGuard> {
        self.label.check(options, Taking::Read)?;
        self.label
            .traced("leasehold.rwlock.read", self.provider.read(options))
            .await
    }

    /// One attempt to write: succeeds with no writer, no waiting writer before us, and no
    /// reader left. With fencing, the writer gets the next fencing number of `name`.
    ///
    /// # Errors
    /// [`Error::Unsupported`](crate::Error::Unsupported) for options the backend does not
    /// have; as [`Locker::try_acquire`](crate::Locker::try_acquire).
    pub async fn try_write(&self, options: &LockOptions) -> Result<TryAcquire> {
        self.label.check(options, Taking::Write)?;
        self.label
            .traced(
                "leasehold.rwlock.try_write",
                self.provider.try_write(options),
            )
            .await
    }

    /// Waits to write until `options.wait_bound()`. While it waits, new readers are kept out.
    ///
    /// # Errors
    /// [`Error::NotAcquired`](crate::Error::NotAcquired) at the deadline; as
    /// [`RwLock::try_write`].
    pub async fn write(&self, options: &LockOptions) -> Result<LockGuard> {
        self.label.check(options, Taking::Write)?;
        self.label
            .traced("leasehold.rwlock.write", self.provider.write(options))
            .await
    }

    /// [`RwLock::read`], run `work`, release whatever happens (as
    /// [`Locker::with_lock`](crate::Locker::with_lock)).
    ///
    /// # Errors
    /// As [`RwLock::read`]; [`Error::LockLost`](crate::Error::LockLost);
    /// [`Error::NotHeld`](crate::Error::NotHeld).
    pub async fn with_read<T, F, Fut>(&self, options: &LockOptions, work: F) -> Result<T>
    where
        F: FnOnce(Lease) -> Fut,
        Fut: std::future::Future<Output = T>,
    {
        let guard = self.read(options).await?;
        crate::core::guard::run_with_lock(guard, options, work).await
    }

    /// [`RwLock::write`], run `work`, release whatever happens (as
    /// [`Locker::with_lock`](crate::Locker::with_lock)).
    ///
    /// # Errors
    /// As [`RwLock::write`]; [`Error::LockLost`](crate::Error::LockLost);
    /// [`Error::NotHeld`](crate::Error::NotHeld).
    pub async fn with_write<T, F, Fut>(&self, options: &LockOptions, work: F) -> Result<T>
    where
        F: FnOnce(Lease) -> Fut,
        Fut: std::future::Future<Output = T>,
    {
        let guard = self.write(options).await?;
        crate::core::guard::run_with_lock(guard, options, work).await
    }

    /// Releases the read lease that `token` holds (a guard does this by itself).
    ///
    /// # Errors
    /// [`Error::NotHeld`](crate::Error::NotHeld) if `token` holds no unexpired read lease.
    pub async fn release_read(&self, token: &LockToken) -> Result<()> {
        self.label
            .traced(
                "leasehold.rwlock.release_read",
                self.provider.release_read(token),
            )
            .await
    }

    /// Releases the write lease that `token` holds.
    ///
    /// # Errors
    /// [`Error::NotHeld`](crate::Error::NotHeld) if it does not hold it.
    pub async fn release_write(&self, token: &LockToken) -> Result<()> {
        self.label
            .traced(
                "leasehold.rwlock.release_write",
                self.provider.release_write(token),
            )
            .await
    }

    /// Resets the read lease that `token` holds to `ttl` from now (a guard's renewal does this
    /// by itself; this is for a token received from elsewhere, like the CLI's `extend --read`).
    ///
    /// # Errors
    /// [`Error::NotHeld`](crate::Error::NotHeld) if `token` holds no unexpired read lease;
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) for a bad TTL.
    pub async fn extend_read(&self, token: &LockToken, ttl: Duration) -> Result<()> {
        self.label
            .traced(
                "leasehold.rwlock.extend_read",
                self.provider.extend_read(token, ttl),
            )
            .await
    }

    /// Resets the write lease that `token` holds to `ttl` from now.
    ///
    /// # Errors
    /// [`Error::NotHeld`](crate::Error::NotHeld) if it does not hold it.
    pub async fn extend_write(&self, token: &LockToken, ttl: Duration) -> Result<()> {
        self.label
            .traced(
                "leasehold.rwlock.extend_write",
                self.provider.extend_write(token, ttl),
            )
            .await
    }

    /// How many readers hold the lock (unexpired) right now.
    ///
    /// # Errors
    /// Connection and server errors.
    pub async fn readers(&self) -> Result<u32> {
        self.label
            .traced("leasehold.rwlock.readers", self.provider.readers())
            .await
    }
}
