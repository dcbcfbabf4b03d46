//! [`Locker`]: one lock API over every backend, chosen by the URL's scheme.

mod drivers;
mod history;
mod lock;
mod target;
#[cfg(test)]
mod tests;

pub use lock::Lock;
pub use target::LockTarget;

use std::any::Any;
use std::sync::Arc;
use std::time::Duration;

use crate::core::driver::Driver;
use crate::core::error::{Error, Result};
use crate::core::guard::{Lease, LockGuard};
use crate::core::history::{HistoryKind, HistoryLog};
use crate::core::kind::{Backend, Fairness};
use crate::core::options::{ClientOptions, LockOptions};
use crate::core::outcome::{LockState, TryAcquire};
use crate::core::sync::{Election, RwLock, Semaphore};
use crate::core::token::LockToken;
use crate::core::trace;
use crate::redis::client::RedisClient;
use crate::redlock::Redlock;
use drivers::registration;

/// A connection to any lock backend; cheap to clone (clones share it).
///
/// | scheme | backend | cargo feature |
/// |---|---|---|
/// | `redis://`, `rediss://`, `valkey://`, `redis-cluster://`, `redis-sentinel://`, … | [`RedisClient`] (see [`Endpoint`](crate::redis::Endpoint)) | always |
/// | `redlock://[user:password@]host:port,host:port,…` (`rediss-redlock://`: TLS) | [`Redlock`] over independent servers | always |
/// | `etcd://[user:password@]host:port[,host:port…]` (`etcds://`: TLS) | `etcd::EtcdClient` (etcd v3) | `etcd` |
/// | `memory://`, `memory://NAME` | [`MemoryClient`](crate::memory::MemoryClient): this process only | always |
/// | `file:///path/to/folder` | `file::FileClient` (`flock`ed files): this machine only | always (Unix) |
/// | `postgres://…`, `postgresql://…` (TLS: `?sslmode=…`) | `postgres::PostgresClient` (session advisory locks); with `?lock=lease`, `postgres::PostgresLeaseClient` (rows with a token and an expiry) | `postgres` |
///
/// Every backend hands out the same [`LockGuard`] and [`Lease`], so code written against a
/// `Locker` (or against `LockGuard`) runs unchanged when the URL changes. What each backend
/// guarantees, and where they differ, is in docs/guarantees.md.
///
/// **Capabilities.** The plain lock (and `with_lock`, fencing, auto-extension) works on every
/// backend; [`Locker::semaphore`](crate::Locker::semaphore), [`Locker::rwlock`](crate::Locker::rwlock) and [`Locker::election`](crate::Locker::election) on those that
/// have them ([`Backend::has`]; the others refuse with [`Error::Unsupported`] naming the
/// backends that do). What only one backend has is reached through its own client type:
/// [`Locker::as_redis`](crate::Locker::as_redis) gives the [`RedisClient`] with its multi-key locks; [`Locker::as_redlock`](crate::Locker::as_redlock)
/// the [`Redlock`] with its per-node views. [`Backend::fairness`] says what
/// [`LockOptions::fair`] means on each.
#[derive(Clone, Debug)]
pub struct Locker {
    backend: Arc<dyn Driver>,
    /// Where lock events are recorded ([`ClientOptions::history`]); `None`: not recorded.
    history: Option<Arc<dyn HistoryLog>>,
}

impl Locker {
    /// Connects to the backend `url` names, with default [`ClientOptions`].
    ///
    /// # Errors
    /// See [`Locker::connect_with`](crate::Locker::connect_with).
    pub async fn connect(url: &str) -> Result<Self> {
        Self::connect_with(url, ClientOptions::default()).await
    }

    /// Connects to the backend `url` names (see [`Locker`] for the schemes).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for an unknown scheme or a malformed URL;
    /// [`Error::BackendNotCompiled`] for a backend whose cargo feature is off; otherwise the
    /// backend's own connect errors ([`Error::Connection`] for a server that cannot be
    /// reached, [`Error::Authentication`] for refused credentials).
    /// With [`ClientOptions::history`]: [`Error::Unsupported`] on a backend without a history
    /// log (Redlock, `file://`), [`Error::InvalidArgument`] for a cap or retention out of
    /// bounds.
    pub async fn connect_with(url: &str, options: ClientOptions) -> Result<Self> {
        let history = options.history;
        if let Some(h) = &history {
            h.validate()?;
        }
        let locker = Self::connect_backend(url, options).await?;
        match history {
            Some(history) => locker.with_history(history),
            None => Ok(locker),
        }
    }

    async fn connect_backend(url: &str, options: ClientOptions) -> Result<Self> {
        let driver = registration(url)?;
        match (driver.connect, driver.feature) {
            (Some(connect), _) => connect(url, options).await,
            (None, Some(feature)) => Err(Error::BackendNotCompiled {
                scheme: url.split_once("://").map_or("", |(s, _)| s).into(),
                feature,
            }),
            (None, None) => Err(Error::Unsupported {
                backend: driver.name,
                what: "this backend on this platform (file locks need flock: Unix only)".into(),
            }),
        }
    }

    /// The name of the backend `url` names (`redis`, `redlock`, `etcd`, `postgres`, `memory`,
    /// `file`), from its scheme alone: no connection, and also for a backend whose cargo
    /// feature is off. For the CLI and the bindings, which decide what to do with a URL before
    /// connecting, so that no table of schemes is kept outside the library.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a URL without a scheme or with one no backend serves.
    pub fn backend_of(url: &str) -> Result<&'static str> {
        Ok(registration(url)?.name)
    }

    /// The backend's name: `redis`, `redlock`, `etcd`, `postgres` (session locks),
    /// `postgres-lease` (lease rows), `memory` or `file`; [`Locker::kind`](crate::Locker::kind) as a string.
    pub fn backend(&self) -> &'static str {
        self.kind().name()
    }

    /// Which backend this is.
    pub fn kind(&self) -> Backend {
        self.backend.kind()
    }

    /// The Redis client behind this locker, if the URL named a Redis or Valkey server, cluster
    /// or Sentinel-monitored primary: the way to what only Redis has
    /// ([`RedisClient::multi_lock`], its strategies and server information).
    pub fn as_redis(&self) -> Option<&RedisClient> {
        (self.backend.as_ref() as &dyn Any).downcast_ref()
    }

    /// The Redlock set behind this locker, if the URL was a `redlock://` one.
    pub fn as_redlock(&self) -> Option<&Redlock> {
        (self.backend.as_ref() as &dyn Any).downcast_ref()
    }

    /// A counting semaphore of `permits` on `name` (no round trip): at most `permits` holders
    /// at once. Every client of `name` must use the same number.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for an empty or over-long name, or `permits` outside
    /// 1 ..= [`MAX_PERMITS`](crate::MAX_PERMITS); [`Error::Unsupported`] on a backend without
    /// semaphores ([`Backend::has`]).
    pub fn semaphore(&self, name: &str, permits: u32) -> Result<Semaphore> {
        Semaphore::check(name, permits)?;
        self.backend.check_name(name)?;
        self.backend.semaphore(name, permits)
    }

    /// A read-write lock on `name` (no round trip).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for an empty or over-long name; [`Error::Unsupported`] on a
    /// backend without read-write locks ([`Backend::has`]).
    pub fn rwlock(&self, name: &str) -> Result<RwLock> {
        crate::core::token::validate_key(name)?;
        self.backend.check_name(name)?;
        self.backend.rwlock(name)
    }

    /// A leader election on `name` (no round trip).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for an empty or over-long name; [`Error::Unsupported`] on a
    /// backend without elections ([`Backend::has`]).
    pub fn election(&self, name: &str) -> Result<Election> {
        crate::core::token::validate_key(name)?;
        self.backend.check_name(name)?;
        self.backend.election(name)
    }

    /// One attempt to take `key` for `options.ttl()`, without waiting: a busy lock is
    /// [`TryAcquire::Busy`] (with the holder's remaining lease when the backend knows it), not an
    /// error.
    ///
    /// Each attempt uses a fresh random token. On Redis it is one `SET key token NX PX ttl` (or
    /// one script, with fencing: the number is issued in the same round trip); each backend's
    /// module says what it sends.
    ///
    /// **Cancellation.** If this future is dropped after the request was sent but before its
    /// reply was read, the server may have granted the lock to a token nobody holds. The backend
    /// then releases that token in the background (token-checked; on Redis on the same
    /// connection, so it reaches the server after the `SET` and the lock is free at once); only
    /// if the connection itself breaks in between does the abandoned lock stay until its TTL.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a bad key or a TTL outside 1 ms ..= 7 days (before any
    /// round trip); [`Error::Unsupported`] for an option this backend does not have;
    /// [`Error::ExpiredOnArrival`] when the grant came back after its own validity (it was
    /// released again); [`Error::Connection`] (ambiguous once the request was sent),
    /// [`Error::Server`].
    pub async fn try_acquire(&self, key: &str, options: &LockOptions) -> Result<TryAcquire> {
        let begun = crate::core::metrics::start();
        let span = trace::span("leasehold.try_acquire", Some(self.kind()), key);
        let mut result = trace::traced(span, self.backend.try_acquire(key, options)).await;
        self.count(
            options,
            crate::core::metrics::Outcome::of_try(&result),
            begun,
        );
        if let Ok(TryAcquire::Acquired(guard)) = &mut result {
            self.record_acquired(guard).await;
        }
        result
    }

    /// Takes `key`, retrying a busy lock until `options.wait_bound()` elapses (one attempt if
    /// no wait was set; a wait over a century is a century), through the one acquisition
    /// engine every backend and primitive shares.
    ///
    /// Between attempts it sleeps until the lock is released (a notification where the backend
    /// has one: Redis pub/sub, PostgreSQL `LISTEN`, etcd watches, memory's queue) or for the
    /// [`Backoff`](crate::Backoff) delay (exponential, with jitter, so waiters do not retry in
    /// lock step), never longer than the holder's remaining lease as the server reported it,
    /// nor past the deadline. No attempt is made at or after the deadline. A grant that came
    /// back too late to be valid is given back and tried again. A Redis topology in motion
    /// ([`redis::is_topology_in_motion`](crate::redis::is_topology_in_motion): a slot migrating, a failover) is ridden out like a
    /// busy lock. Cancellation: as [`Locker::try_acquire`].
    ///
    /// # Errors
    /// [`Error::NotAcquired`] when the lock stayed busy until the deadline (with the number of
    /// attempts); the last failure when a failure the wait rides out was still there at the
    /// deadline; otherwise as [`Locker::try_acquire`].
    pub async fn acquire(&self, key: &str, options: &LockOptions) -> Result<LockGuard> {
        let begun = crate::core::metrics::start();
        let span = trace::span("leasehold.acquire", Some(self.kind()), key);
        let mut result = trace::traced(span, self.backend.acquire(key, options)).await;
        self.count(
            options,
            crate::core::metrics::Outcome::of_acquire(&result),
            begun,
        );
        if let Ok(guard) = &mut result {
            self.record_acquired(guard).await;
        }
        result
    }

    /// Counts an acquisition in the metrics: here, once for every backend.
    fn count(
        &self,
        options: &LockOptions,
        outcome: crate::core::metrics::Outcome,
        begun: Option<std::time::Instant>,
    ) {
        crate::core::metrics::acquisition(self.kind(), options.fair_enabled(), outcome, begun);
    }

    /// Waits for `key` (as [`Locker::acquire`]), runs `work`, and releases the lock whatever
    /// happens: when `work` returns, when it panics (the panic is resumed after the release),
    /// and when the returned future is dropped (the guard then releases in the background).
    ///
    /// `work` receives a [`Lease`]: the key, token, fencing number, validity and loss signal of
    /// the lock. The work runs against [`Lease::lost`]: if the lease is lost meanwhile (a renewal
    /// of an [`auto_extend`](LockOptions::auto_extend)ed lock failed, or the validity ran out),
    /// the work's future is dropped at once and [`Error::LockLost`] returned; with
    /// [`OnLoss::Notify`](crate::OnLoss::Notify) the work finishes and the error is returned
    /// after it.
    ///
    /// # Errors
    /// As [`Locker::acquire`] if the lock was not taken (then `work` did not run);
    /// [`Error::LockLost`] as above; [`Error::NotHeld`] if the release found the lock gone
    /// (without the loss having been noticed first): the work was not protected for its whole
    /// duration, so its output is dropped.
    pub async fn with_lock<T, F, Fut>(&self, key: &str, options: &LockOptions, work: F) -> Result<T>
    where
        F: FnOnce(Lease) -> Fut,
        Fut: std::future::Future<Output = T>,
    {
        let guard = self.acquire(key, options).await?;
        crate::core::guard::run_with_lock(guard, options, work).await
    }

    /// Releases `key` if `token` still holds it.
    ///
    /// # Errors
    /// [`Error::NotHeld`] if it does not; connection and server errors.
    pub async fn release(&self, key: &str, token: &LockToken) -> Result<()> {
        let span = trace::span("leasehold.release", Some(self.kind()), key);
        trace::traced(span, self.backend.release(key, token)).await?;
        if !self.backend.records_releases() {
            self.record_by_token(key, token, HistoryKind::Released)
                .await;
        }
        Ok(())
    }

    /// Releases a [fair](LockOptions::fair) lock `key` if `token` still holds it, handing it to
    /// the longest waiter (on Redis; the same as [`release`](Locker::release) on etcd and
    /// PostgreSQL session locks, whose waiting is already in arrival order).
    ///
    /// # Errors
    /// [`Error::NotHeld`] if it does not; [`Error::Unsupported`] on Redlock and PostgreSQL
    /// lease rows; connection and server errors.
    pub async fn release_fair(&self, key: &str, token: &LockToken) -> Result<()> {
        match (self.as_redis(), self.kind().fairness()) {
            (Some(client), _) => {
                let span = trace::span("leasehold.release_fair", Some(self.kind()), key);
                let handed_over =
                    trace::traced(span, client.release_fair_handed_over(key, token)).await?;
                let kind = match handed_over {
                    true => HistoryKind::HandedOver,
                    false => HistoryKind::Released,
                };
                self.record_by_token(key, token, kind).await;
                Ok(())
            }
            (None, Fairness::Always) => self.release(key, token).await,
            _ => Err(Error::Unsupported {
                backend: self.backend(),
                what: "a fair release (this backend has no fair mode)".into(),
            }),
        }
    }

    /// Resets `key`'s TTL to `ttl` if `token` still holds it.
    ///
    /// # Errors
    /// [`Error::NotHeld`] if it does not; connection and server errors.
    pub async fn extend(&self, key: &str, token: &LockToken, ttl: Duration) -> Result<()> {
        let span = trace::span("leasehold.extend", Some(self.kind()), key);
        trace::traced(span, self.backend.extend(key, token, ttl)).await
    }

    /// Who holds `key`, for how long, and its fencing counter (Redlock: as a majority sees it).
    ///
    /// # Errors
    /// Connection and server errors.
    pub async fn inspect(&self, key: &str) -> Result<LockState> {
        let span = trace::span("leasehold.inspect", Some(self.kind()), key);
        trace::traced(span, self.backend.inspect(key)).await
    }

    /// Raises `key`'s fencing counter to at least `at_least` (see
    /// [`Locker::raise_fencing_counter`](crate::Locker::raise_fencing_counter)).
    ///
    /// # Errors
    /// [`Error::Unsupported`] on etcd (its fencing numbers are its revisions, which only move
    /// up); connection and server errors.
    pub async fn raise_fencing_counter(&self, key: &str, at_least: u64) -> Result<u64> {
        let span = trace::span("leasehold.raise_fencing_counter", Some(self.kind()), key);
        trace::traced(span, self.backend.raise_fencing_counter(key, at_least)).await
    }

    /// The held locks whose names match the glob `pattern` (`*` for all; see [`glob_match`]):
    /// key, kind, holders with their owners, TTL, fencing counter, waiters. A snapshot read
    /// without blocking the server (Redis: `SCAN`, never `KEYS`, on every master of a cluster),
    /// so a lock taken or released during the listing may or may not appear.
    ///
    /// # Errors
    /// [`Error::PermissionDenied`] when the server refuses the listing (a Redis user without
    /// `SCAN`); [`Error::Unsupported`] on a backend without a lock table; connection errors.
    ///
    /// [`glob_match`]: crate::glob_match
    pub async fn list(&self, pattern: &str) -> Result<Vec<crate::LockEntry>> {
        let mut entries = self.backend.list(pattern).await?;
        entries.sort_by(|a, b| a.key.cmp(&b.key));
        Ok(entries)
    }

    /// Removes `key`'s lock whatever its token, for a stuck holder: bumps its fencing counter
    /// in the same atomic step (so a resource that keeps the highest number seen refuses the
    /// old holder once it has seen the counter or a later holder's number), and records who
    /// forced it and why (logged at warn; on Redis also a `{key}:forced` hash kept
    /// [`FORCED_RECORD_TTL`](crate::FORCED_RECORD_TTL)). The old holder's release and extend
    /// then fail with [`Error::NotHeld`].
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a bad reason, or a key that is not a leasehold lock (a
    /// string that is not a lock token, a hash, a list...): nothing is written then;
    /// [`Error::NotHeld`] when nobody holds it; [`Error::Unsupported`] on a backend without it;
    /// [`Error::PermissionDenied`]; connection errors.
    pub async fn force_release(&self, key: &str, reason: &str) -> Result<crate::ForceReleased> {
        crate::core::listing::check_reason(reason)?;
        let forced = self.backend.force_release(key, reason).await?;
        tracing::warn!(
            key,
            reason,
            forced_by = %forced.forced_by,
            previous_holder = %forced.previous.token,
            previous_owner = ?forced.previous.owner,
            fencing_counter = ?forced.fencing_counter,
            "lock released by force"
        );
        self.record_forced(&forced).await;
        Ok(forced)
    }
}

impl Locker {
    fn of(backend: impl Driver) -> Locker {
        Locker {
            backend: Arc::new(backend),
            history: None,
        }
    }
}

impl From<RedisClient> for Locker {
    fn from(client: RedisClient) -> Self {
        Locker::of(client)
    }
}

impl From<Redlock> for Locker {
    fn from(redlock: Redlock) -> Self {
        Locker::of(redlock)
    }
}

impl From<crate::memory::MemoryClient> for Locker {
    fn from(client: crate::memory::MemoryClient) -> Self {
        Locker::of(client)
    }
}

#[cfg(unix)]
impl From<crate::file::FileClient> for Locker {
    fn from(client: crate::file::FileClient) -> Self {
        Locker::of(client)
    }
}

#[cfg(feature = "etcd")]
impl From<crate::etcd::EtcdClient> for Locker {
    fn from(client: crate::etcd::EtcdClient) -> Self {
        Locker::of(client)
    }
}

#[cfg(feature = "postgres")]
impl From<crate::postgres::PostgresClient> for Locker {
    fn from(client: crate::postgres::PostgresClient) -> Self {
        Locker::of(client)
    }
}

#[cfg(feature = "postgres")]
impl From<crate::postgres::PostgresLeaseClient> for Locker {
    fn from(client: crate::postgres::PostgresLeaseClient) -> Self {
        Locker::of(client)
    }
}
