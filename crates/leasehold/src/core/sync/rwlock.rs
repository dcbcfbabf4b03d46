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
/// A side of a read-write lock: shared with other readers, or the writer alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Side {
    Read,
    Write,
}

impl Side {
    /// What the option table calls taking this side.
    fn taking(self) -> Taking {
        match self {
            Side::Read => Taking::Read,
            Side::Write => Taking::Write,
        }
    }

    /// The span of `operation` (`try`, `take`, `release`, `extend`) on this side.
    fn span_name(self, operation: Operation) -> &'static str {
        match (operation, self) {
            (Operation::Try, Side::Read) => "leasehold.rwlock.try_read",
            (Operation::Try, Side::Write) => "leasehold.rwlock.try_write",
            (Operation::Take, Side::Read) => "leasehold.rwlock.read",
            (Operation::Take, Side::Write) => "leasehold.rwlock.write",
            (Operation::Release, Side::Read) => "leasehold.rwlock.release_read",
            (Operation::Release, Side::Write) => "leasehold.rwlock.release_write",
            (Operation::Extend, Side::Read) => "leasehold.rwlock.extend_read",
            (Operation::Extend, Side::Write) => "leasehold.rwlock.extend_write",
        }
    }
}

/// A handle operation on a side (its span's name).
#[derive(Clone, Copy)]
enum Operation {
    Try,
    Take,
    Release,
    Extend,
}

/// What a backend implements to offer [`RwLock`]s, for the one name it was made for: each
/// method is the [`RwLock`] method of that name for `side` (`try_take` is `try_read` or
/// `try_write`, `take` is `read` or `write`, ...). Guarantees every provider keeps
/// (docs/guarantees.md §4): while leases are valid, a writer holds alone (no reader, no other
/// writer); a waiting writer is not starved by a stream of readers; release and extend are
/// token-checked on the server, by side (a reader's token does not release the writer).
#[async_trait::async_trait]
pub(crate) trait RwLockProvider: Send + Sync + Debug + 'static {
    async fn try_take(&self, side: Side, options: &LockOptions) -> Result<TryAcquire>;
    async fn take(&self, side: Side, options: &LockOptions) -> Result<LockGuard>;
    async fn release(&self, side: Side, token: &LockToken) -> Result<()>;
    async fn extend(&self, side: Side, token: &LockToken, ttl: Duration) -> Result<()>;
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
        self.try_take(Side::Read, options).await
    }

    /// Waits to read until `options.wait_bound()`.
    ///
    /// # Errors
    /// [`Error::NotAcquired`](crate::Error::NotAcquired) at the deadline; as
    /// [`RwLock::try_read`].
    pub async fn read(&self, options: &LockOptions) -> Result<LockGuard> {
        self.take(Side::Read, options).await
    }

    /// One attempt to write: succeeds with no writer, no waiting writer before us, and no
    /// reader left. With fencing, the writer gets the next fencing number of `name`.
    ///
    /// # Errors
    /// [`Error::Unsupported`](crate::Error::Unsupported) for options the backend does not
    /// have; as [`Locker::try_acquire`](crate::Locker::try_acquire).
    pub async fn try_write(&self, options: &LockOptions) -> Result<TryAcquire> {
        self.try_take(Side::Write, options).await
    }

    /// Waits to write until `options.wait_bound()`. While it waits, new readers are kept out.
    ///
    /// # Errors
    /// [`Error::NotAcquired`](crate::Error::NotAcquired) at the deadline; as
    /// [`RwLock::try_write`].
    pub async fn write(&self, options: &LockOptions) -> Result<LockGuard> {
        self.take(Side::Write, options).await
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
        self.release(Side::Read, token).await
    }

    /// Releases the write lease that `token` holds.
    ///
    /// # Errors
    /// [`Error::NotHeld`](crate::Error::NotHeld) if it does not hold it.
    pub async fn release_write(&self, token: &LockToken) -> Result<()> {
        self.release(Side::Write, token).await
    }

    /// Resets the read lease that `token` holds to `ttl` from now (a guard's renewal does this
    /// by itself; this is for a token received from elsewhere, like the CLI's `extend --read`).
    ///
    /// # Errors
    /// [`Error::NotHeld`](crate::Error::NotHeld) if `token` holds no unexpired read lease;
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) for a bad TTL.
    pub async fn extend_read(&self, token: &LockToken, ttl: Duration) -> Result<()> {
        self.extend(Side::Read, token, ttl).await
    }

    /// Resets the write lease that `token` holds to `ttl` from now.
    ///
    /// # Errors
    /// [`Error::NotHeld`](crate::Error::NotHeld) if it does not hold it.
    pub async fn extend_write(&self, token: &LockToken, ttl: Duration) -> Result<()> {
        self.extend(Side::Write, token, ttl).await
    }

    /// One attempt to take `side` (the option table checked first, and traced).
    pub(crate) async fn try_take(&self, side: Side, options: &LockOptions) -> Result<TryAcquire> {
        let span = side.span_name(Operation::Try);
        let taking = self.provider.try_take(side, options);
        self.label.take(options, side.taking(), span, taking).await
    }

    /// Waits to take `side` until `options.wait_bound()`.
    pub(crate) async fn take(&self, side: Side, options: &LockOptions) -> Result<LockGuard> {
        let span = side.span_name(Operation::Take);
        let taking = self.provider.take(side, options);
        self.label.take(options, side.taking(), span, taking).await
    }

    /// Releases what `token` holds on `side`.
    pub(crate) async fn release(&self, side: Side, token: &LockToken) -> Result<()> {
        let span = side.span_name(Operation::Release);
        self.label
            .traced(span, self.provider.release(side, token))
            .await
    }

    /// Resets what `token` holds on `side` to `ttl` from now.
    pub(crate) async fn extend(&self, side: Side, token: &LockToken, ttl: Duration) -> Result<()> {
        let span = side.span_name(Operation::Extend);
        self.label
            .traced(span, self.provider.extend(side, token, ttl))
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
