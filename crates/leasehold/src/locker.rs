//! [`Locker`]: one lock API over every backend, chosen by the URL's scheme.

use std::any::Any;
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::BoxFuture;

use crate::core::driver::Driver;
use crate::core::error::{Error, Result};
use crate::core::guard::{Lease, LockGuard};
use crate::core::history::{HistoryEvent, HistoryKind, HistoryLog, HistoryOptions};
use crate::core::kind::{Backend, Fairness};
use crate::core::options::{ClientOptions, LockOptions};
use crate::core::outcome::{LockState, TryAcquire};
use crate::core::sync::{Election, RwLock, Semaphore};
use crate::core::token::LockToken;
use crate::core::trace;
use crate::redis::client::RedisClient;
use crate::redlock::{Redlock, RedlockOptions};

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

/// How a registered backend connects: to `url`, with `options`.
type Connect = for<'a> fn(&'a str, ClientOptions) -> BoxFuture<'a, Result<Locker>>;

/// A backend's registration (in the manner of sqlx's drivers): its name, the URL schemes it
/// serves, the cargo feature it needs, and how it connects (`None`: not compiled in).
/// [`Locker::connect`] walks [`DRIVERS`]; nothing else in the workspace keeps a table of
/// schemes ([`Locker::backend_of`] answers for the CLI and the bindings).
struct Registration {
    name: &'static str,
    schemes: &'static [&'static str],
    feature: Option<&'static str>,
    connect: Option<Connect>,
}

/// Every backend, in the order messages list their schemes.
const DRIVERS: &[Registration] = &[
    Registration {
        name: "redis",
        schemes: &[
            "redis",
            "rediss",
            "valkey",
            "valkeys",
            "redis+unix",
            "unix",
            "redis-cluster",
            "rediss-cluster",
            "valkey-cluster",
            "valkeys-cluster",
            "redis-sentinel",
            "rediss-sentinel",
            "valkey-sentinel",
            "valkeys-sentinel",
        ],
        feature: None,
        connect: Some(|url, options| {
            Box::pin(async move { Ok(Locker::of(RedisClient::connect_with(url, options).await?)) })
        }),
    },
    Registration {
        name: "redlock",
        schemes: &["redlock", "rediss-redlock"],
        feature: None,
        connect: Some(|url, _| {
            Box::pin(async move {
                let nodes = crate::redlock::node_urls(url)?;
                let nodes: Vec<&str> = nodes.iter().map(String::as_str).collect();
                Ok(Locker::of(
                    Redlock::connect(&nodes, RedlockOptions::default()).await?,
                ))
            })
        }),
    },
    Registration {
        name: "etcd",
        schemes: &["etcd", "etcds"],
        feature: Some("etcd"),
        #[cfg(feature = "etcd")]
        connect: Some(|url, options| {
            Box::pin(async move {
                Ok(Locker::of(
                    crate::etcd::EtcdClient::connect_with(url, options).await?,
                ))
            })
        }),
        #[cfg(not(feature = "etcd"))]
        connect: None,
    },
    Registration {
        name: "postgres",
        schemes: &["postgres", "postgresql"],
        feature: Some("postgres"),
        #[cfg(feature = "postgres")]
        connect: Some(|url, options| {
            Box::pin(async move {
                use crate::postgres::{PostgresClient, PostgresLeaseClient, wants_lease_rows};
                Ok(match wants_lease_rows(url)? {
                    true => Locker::of(PostgresLeaseClient::connect_with(url, options).await?),
                    false => Locker::of(PostgresClient::connect_with(url, options).await?),
                })
            })
        }),
        #[cfg(not(feature = "postgres"))]
        connect: None,
    },
    Registration {
        name: "memory",
        schemes: &["memory"],
        feature: None,
        connect: Some(|url, _| {
            Box::pin(async move { Ok(Locker::of(crate::memory::MemoryClient::connect(url)?)) })
        }),
    },
    Registration {
        name: "file",
        schemes: &["file"],
        feature: None,
        #[cfg(unix)]
        connect: Some(|url, _| {
            Box::pin(async move { Ok(Locker::of(crate::file::FileClient::connect(url)?)) })
        }),
        #[cfg(not(unix))]
        connect: None,
    },
];

/// The registration serving `url`'s scheme.
///
/// # Errors
/// [`Error::InvalidArgument`] for a URL without a scheme or with one no backend serves.
fn registration(url: &str) -> Result<&'static Registration> {
    let known = || {
        DRIVERS
            .iter()
            .flat_map(|d| d.schemes.iter().copied())
            .collect::<Vec<_>>()
            .join(", ")
    };
    let redacted = crate::core::url::redact(url);
    let Some((scheme, _)) = url.split_once("://") else {
        let reason = format!("{redacted:?} has no scheme (expected one of: {})", known());
        return Err(Error::invalid("url", reason));
    };
    let scheme = scheme.to_ascii_lowercase();
    DRIVERS
        .iter()
        .find(|d| d.schemes.contains(&scheme.as_str()))
        .ok_or_else(|| {
            let reason = format!(
                "unknown scheme {scheme:?} in {redacted:?} (expected one of: {})",
                known()
            );
            Error::invalid("url", reason)
        })
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
        self.backend.semaphore(name, permits)
    }

    /// A read-write lock on `name` (no round trip).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for an empty or over-long name; [`Error::Unsupported`] on a
    /// backend without read-write locks ([`Backend::has`]).
    pub fn rwlock(&self, name: &str) -> Result<RwLock> {
        crate::core::token::validate_key(name)?;
        self.backend.rwlock(name)
    }

    /// A leader election on `name` (no round trip).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for an empty or over-long name; [`Error::Unsupported`] on a
    /// backend without elections ([`Backend::has`]).
    pub fn election(&self, name: &str) -> Result<Election> {
        crate::core::token::validate_key(name)?;
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
        self.record_by_token(key, token, HistoryKind::Released)
            .await;
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

/// A plain lock on one key, as a handle like the [`Semaphore`] and the [`RwLock`]: made by
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

impl Locker {
    fn of(backend: impl Driver) -> Locker {
        Locker {
            backend: Arc::new(backend),
            history: None,
        }
    }
}

/// The lock history (see [`HistoryOptions`]): recording when on, and reading.
impl Locker {
    /// Up to `limit` of `key`'s newest history events, newest first (none if nothing was
    /// recorded). Works whether this locker records history or not.
    ///
    /// # Errors
    /// [`Error::Unsupported`] on a backend without a history log (Redlock, `file://`);
    /// [`Error::InvalidArgument`] for a bad key; connection and server errors.
    pub async fn history(&self, key: &str, limit: usize) -> Result<Vec<HistoryEvent>> {
        crate::core::token::validate_key(key)?;
        let log = match &self.history {
            Some(log) => log.clone(),
            None => self.history_log(&HistoryOptions::default())?,
        };
        log.read(key, limit).await
    }

    /// Whether this locker records lock history ([`ClientOptions::history`]).
    pub fn records_history(&self) -> bool {
        self.history.is_some()
    }

    /// The backend's history log, or the refusal naming the backend.
    fn history_log(&self, options: &HistoryOptions) -> Result<Arc<dyn HistoryLog>> {
        self.backend
            .history_log(options)
            .ok_or_else(|| Error::Unsupported {
                backend: self.backend(),
                what: "a lock history (backends that keep one: redis, etcd, postgres, \
                       postgres-lease, memory)"
                    .into(),
            })
    }

    /// This locker, recording history as `options` say: what [`ClientOptions::history`] does
    /// when connecting, for a locker made from a client (`Locker::from(RedisClient)`). Clones
    /// made before keep their setting.
    ///
    /// # Errors
    /// [`Error::Unsupported`] on a backend without a history log (Redlock, `file://`), at once
    /// rather than at the first lock; [`Error::InvalidArgument`] for a cap or retention out of
    /// bounds.
    pub fn with_history(mut self, options: HistoryOptions) -> Result<Self> {
        options.validate()?;
        self.history = Some(self.history_log(&options)?);
        Ok(self)
    }

    /// Hands `guard` the log for its acquisition, release and loss (appended in the
    /// background: see `LockGuard::record_history`), and waits a bounded time for the
    /// acquisition's event (`LockGuard::acquisition_recorded`).
    async fn record_acquired(&self, guard: &mut LockGuard) {
        if let Some(log) = &self.history {
            guard.record_history(log.clone());
            guard.acquisition_recorded().await;
        }
    }

    /// Records a release (or handover) by token, whose fencing number is not known here.
    async fn record_by_token(&self, key: &str, token: &LockToken, kind: HistoryKind) {
        if let Some(log) = &self.history {
            let event = HistoryEvent::of_holder(kind, token);
            crate::core::history::record(&**log, key, event).await;
        }
    }

    /// Records that an operator forced `key` free (`force-release`): the holder removed, the
    /// fencing number the counter was raised to, the reason and who forced it; a no-op when
    /// this locker does not record.
    async fn record_forced(&self, forced: &crate::ForceReleased) {
        if let Some(log) = &self.history {
            let event = HistoryEvent {
                fencing: forced.fencing_counter,
                detail: Some(format!(
                    "{} (forced by {})",
                    forced.reason, forced.forced_by
                )),
                ..HistoryEvent::of_holder(HistoryKind::Forced, &forced.previous.token)
            };
            crate::core::history::record(&**log, &forced.key, event).await;
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs where the features are off: `cargo test -p leasehold --lib` (scripts/test does).
    #[cfg(not(all(feature = "etcd", feature = "postgres")))]
    #[tokio::test]
    async fn a_backend_not_compiled_in_names_its_feature() {
        for (url, feature, on) in [
            ("etcd://127.0.0.1:2379", "etcd", cfg!(feature = "etcd")),
            (
                "postgres://u@127.0.0.1/db",
                "postgres",
                cfg!(feature = "postgres"),
            ),
            (
                "postgresql://u@127.0.0.1/db",
                "postgres",
                cfg!(feature = "postgres"),
            ),
        ] {
            if on {
                continue;
            }
            let err = Locker::connect(url).await.unwrap_err();
            assert!(
                matches!(err, Error::BackendNotCompiled { feature: f, .. } if f == feature),
                "{url}: {err}"
            );
            assert!(
                err.to_string().contains(&format!("feature \"{feature}\"")),
                "{err}"
            );
        }
    }

    #[test]
    fn every_registered_scheme_names_its_backend() {
        assert_eq!(Locker::backend_of("rediss-cluster://h:1").unwrap(), "redis");
        assert_eq!(
            Locker::backend_of("REDLOCK://h:1,h:2,h:3").unwrap(),
            "redlock"
        );
        assert_eq!(Locker::backend_of("etcds://h:1").unwrap(), "etcd");
        assert_eq!(
            Locker::backend_of("postgresql://u@h/db").unwrap(),
            "postgres"
        );
        assert_eq!(Locker::backend_of("file:///tmp").unwrap(), "file");
        assert_eq!(Locker::backend_of("memory://").unwrap(), "memory");
        for url in ["mysql://h", "h:6379"] {
            assert!(matches!(
                Locker::backend_of(url),
                Err(Error::InvalidArgument { what: "url", .. })
            ));
        }
        let mut schemes: Vec<_> = DRIVERS.iter().flat_map(|d| d.schemes).collect();
        let all = schemes.len();
        schemes.sort();
        schemes.dedup();
        assert_eq!(schemes.len(), all, "a scheme registered twice");
    }

    #[tokio::test]
    async fn unknown_and_missing_schemes_are_refused_before_any_connection() {
        for url in ["mysql://127.0.0.1:1/", "127.0.0.1:6379", "zk://h:2181"] {
            let err = Locker::connect(url).await.unwrap_err();
            assert!(
                matches!(err, Error::InvalidArgument { what: "url", .. }),
                "{url}: {err}"
            );
            for scheme in [
                "redis-sentinel",
                "redlock",
                "etcds",
                "postgresql",
                "memory",
                "file",
            ] {
                assert!(err.to_string().contains(scheme), "{err}");
            }
        }
    }

    /// A history log whose appends wait until the test opens the gate.
    #[derive(Debug)]
    struct GatedLog {
        gate: tokio::sync::Semaphore,
        appended: std::sync::Mutex<Vec<HistoryKind>>,
    }

    impl HistoryLog for GatedLog {
        fn append<'a>(
            &'a self,
            _key: &'a str,
            event: &'a HistoryEvent,
        ) -> futures_util::future::BoxFuture<'a, Result<()>> {
            Box::pin(async move {
                let _permit = self.gate.acquire().await.expect("open");
                self.appended.lock().unwrap().push(event.kind);
                Ok(())
            })
        }

        fn read<'a>(
            &'a self,
            _key: &'a str,
            _limit: usize,
        ) -> futures_util::future::BoxFuture<'a, Result<Vec<HistoryEvent>>> {
            Box::pin(async { Ok(Vec::new()) })
        }
    }

    // Finding M10 of the 2026-12-02 review: the acquisition waited for its history append,
    // which may last a response timeout, out of a short lease. The holder now gets its guard
    // after at most a tenth of the validity, and the log still keeps the order.
    #[tokio::test]
    async fn a_slow_history_write_costs_the_holder_at_most_a_tenth_of_its_lease() {
        let log = Arc::new(GatedLog {
            gate: tokio::sync::Semaphore::new(0),
            appended: Default::default(),
        });
        let mut locker = Locker::connect("memory://").await.unwrap();
        locker.history = Some(log.clone());
        let ttl = Duration::from_secs(3);
        let guard =
            tokio::time::timeout(ttl, locker.acquire("slow-history", &LockOptions::new(ttl)))
                .await
                .expect("the guard comes before the stuck history write")
                .unwrap();
        assert!(guard.is_held());
        assert!(log.appended.lock().unwrap().is_empty(), "the gate is shut");
        log.gate.add_permits(10);
        guard.release().await.unwrap();
        assert_eq!(
            *log.appended.lock().unwrap(),
            vec![HistoryKind::Acquired, HistoryKind::Released]
        );
    }
}
