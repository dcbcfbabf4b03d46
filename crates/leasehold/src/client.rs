//! [`LockClient`]: connects, detects the server once, and acquires, releases, extends and
//! inspects locks.

use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use futures_util::future::BoxFuture;
use redis::Value;
use tracing::Instrument;

use crate::backend::HeldLock;
use crate::connection::ClientConnection;
use crate::endpoint::Endpoint;
use crate::error::{Error, Operation, Result};
use crate::guard::{Lease, LockGuard, clock_drift};
use crate::options::{ClientOptions, LockOptions, ttl_millis};
use crate::renewal::{Registration, RenewTarget, RenewalStats, Renewer};
use crate::scripts::{
    ACQUIRE_LUA, ACQUIRE_SCRIPT, EXTEND_SCRIPT, RAISE_COUNTER_SCRIPT, RELEASE_NOTIFY_SCRIPT,
    RELEASE_SCRIPT, RELEASE_SNOTIFY_SCRIPT,
};
use crate::server::ServerInfo;
use crate::slot::{fence_key, release_channel};
use crate::strategy::{ExtendStrategy, ReleaseStrategy, extend_cmd, release_cmd};
use crate::token::{LockToken, validate_key};
use crate::waiting::Notifier;

/// The outcome of one acquisition attempt.
#[derive(Debug)]
#[must_use = "dropping an acquired guard releases the lock in the background"]
pub enum TryAcquire {
    /// The lock is ours.
    Acquired(LockGuard),
    /// Someone else holds it. A normal outcome, not an error.
    Busy {
        /// How long the holder's lease still runs, when the server told us (waiting
        /// acquisitions and fencing acquisitions ask for it; a plain `SET NX` does not say).
        /// `None` also when the key has no TTL at all (it was not set by a lock).
        remaining: Option<Duration>,
    },
}

impl TryAcquire {
    /// The guard, if acquired.
    pub fn acquired(self) -> Option<LockGuard> {
        match self {
            TryAcquire::Acquired(g) => Some(g),
            TryAcquire::Busy { .. } => None,
        }
    }

    /// True if the lock was acquired.
    pub fn is_acquired(&self) -> bool {
        matches!(self, TryAcquire::Acquired(_))
    }
}

/// What a lock key holds right now, as [`LockClient::inspect`] reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockState {
    /// The lock key.
    pub key: String,
    /// The holder's token, if the lock is held. This is the holder's capability: show it only to
    /// whoever may release the lock.
    pub holder: Option<String>,
    /// The remaining TTL, if the key exists and has one.
    pub ttl: Option<Duration>,
    /// The last fencing number issued for this key, if fencing was ever used on it.
    pub fencing_counter: Option<u64>,
}

pub(crate) enum Attempt {
    Acquired { fencing: Option<u64> },
    Busy { remaining: Option<Duration> },
}

/// A lock client bound to one Redis or Valkey server.
///
/// Cheap to clone (all clones share one multiplexed connection and the capabilities detected when
/// it connected). Every lock operation is one round trip: acquire is one `SET NX PX` (or one
/// script with fencing or waiting), release one `DELEX`/`DELIFEQ`/`EVALSHA`, extend one
/// `SET ... IFEQ`/`EVALSHA`.
#[derive(Clone)]
pub struct LockClient {
    inner: Arc<ClientInner>,
}

struct ClientInner {
    conn: ClientConnection,
    server: ServerInfo,
    release: ReleaseStrategy,
    extend: ExtendStrategy,
    /// Started on the first auto-extended lease.
    renewer: OnceLock<Renewer>,
    /// The renewer's counters, from the start (a handle taken early must see its counts).
    renewal_stats: Arc<RenewalStats>,
    notify_waiters: bool,
    /// The subscriber for release notifications; needs a URL to open its own connection.
    notifier: Option<Notifier>,
}

impl std::fmt::Debug for LockClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LockClient")
            .field("server", &self.inner.server)
            .field("release", &self.inner.release)
            .field("extend", &self.inner.extend)
            .finish()
    }
}

fn timeout_error(op: Operation, what: &str) -> Error {
    Error::Connection {
        op,
        ambiguous: false,
        source: std::io::Error::new(std::io::ErrorKind::TimedOut, what.to_string()).into(),
    }
}

/// The largest fencing number a Redis or Valkey lock issues exactly: 2^53. The scripts that
/// issue numbers hold them as Lua numbers (doubles), so [`LockClient::raise_fencing_counter`]
/// refuses to raise a counter to this or beyond, and an acquisition with fencing whose counter
/// is already there (set from outside) fails with [`Error::FencingExhausted`] without taking
/// the lock. Counting one acquisition per microsecond, a counter takes 285 years to get here.
pub const MAX_FENCING_NUMBER: u64 = 1 << 53;

impl LockClient {
    /// Connects to `url` with default [`ClientOptions`]. Any form [`Endpoint::parse`] accepts:
    /// `redis://[user:password@]host:port/db` (also `valkey://`, and `rediss://` for TLS) for
    /// one server, `redis-cluster://host:port[,host:port…]` for a Redis Cluster,
    /// `redis-sentinel://host:port[,host:port…]#master` for a Sentinel-monitored primary.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a malformed URL, [`Error::Authentication`] for refused
    /// credentials, [`Error::Topology`] when the server is not what the URL says (a cluster
    /// URL to a server without cluster support, a plain URL to a cluster node, an unknown
    /// Sentinel master name), [`Error::Connection`] if no server can be reached or none answers
    /// within the connect timeout (5 s by default).
    pub async fn connect(url: &str) -> Result<Self> {
        Self::connect_with(url, ClientOptions::default()).await
    }

    /// Connects to `url` with the given options.
    ///
    /// # Errors
    /// As [`LockClient::connect`]; also [`Error::InvalidArgument`] when a forced strategy is not
    /// offered by the server.
    pub async fn connect_with(url: &str, options: ClientOptions) -> Result<Self> {
        Self::connect_to(&Endpoint::parse(url)?, options).await
    }

    /// Connects to a Redis Cluster through one or more of its nodes (`redis://host:port/`).
    /// Every key a lock operation touches lives in the lock key's slot (see [`crate::slot`]).
    ///
    /// # Errors
    /// As [`LockClient::connect`].
    pub async fn connect_cluster<S: AsRef<str>>(
        seeds: &[S],
        options: ClientOptions,
    ) -> Result<Self> {
        let seeds = seeds.iter().map(|s| s.as_ref().to_string());
        Self::connect_to(&Endpoint::cluster(seeds), options).await
    }

    /// Connects to the primary that the sentinels (`redis://host:port/`) name `master`, and
    /// follows it through failovers.
    ///
    /// # Errors
    /// As [`LockClient::connect`].
    pub async fn connect_sentinel<S: AsRef<str>>(
        sentinels: &[S],
        master: &str,
        options: ClientOptions,
    ) -> Result<Self> {
        let sentinels = sentinels.iter().map(|s| s.as_ref().to_string());
        Self::connect_to(&Endpoint::sentinel(sentinels, master), options).await
    }

    /// Connects to `endpoint`.
    ///
    /// # Errors
    /// As [`LockClient::connect`].
    pub async fn connect_to(endpoint: &Endpoint, options: ClientOptions) -> Result<Self> {
        let bound = options.connect_timeout;
        let root_cert = crate::topology::read_ca_file(options.tls_ca_file.as_deref())?;
        // Boxed: the connection futures of every topology nest deep enough to overflow the
        // compiler's layout depth limit in callers that embed this one.
        let connect = Box::pin(async {
            let (conn, source) = crate::topology::open(endpoint, &options, root_cert).await?;
            let notifier = options
                .notify_waiters
                .then(|| Notifier::new(source, options.connect_timeout));
            Self::build(conn, options, notifier).await
        });
        // The client's own timeouts bound each step; this bounds them all together.
        tokio::time::timeout(bound, connect).await.map_err(|_| {
            timeout_error(Operation::Connect, "no answer within the connect timeout")
        })?
    }

    /// Wraps a connection the caller already has (a [`redis::aio::ConnectionManager`] or
    /// [`redis::aio::MultiplexedConnection`]), detecting the server's capabilities once.
    ///
    /// ```no_run
    /// # async fn f() -> Result<(), Box<dyn std::error::Error>> {
    /// let client = redis::Client::open("redis://127.0.0.1:6379/")?;
    /// let manager = client.get_connection_manager().await?;
    /// let locks = leasehold::LockClient::from_connection(manager).await?;
    /// # Ok(()) }
    /// ```
    ///
    /// Releases still publish notifications (unless turned off), but this client's own waiters
    /// poll: waking them needs a subscriber connection, which only [`LockClient::connect`] can
    /// open (it knows the URL).
    ///
    /// # Errors
    /// [`Error::Connection`] or [`Error::Authentication`] if detection fails.
    pub async fn from_connection(conn: impl Into<ClientConnection>) -> Result<Self> {
        Self::with_connection(conn, ClientOptions::default()).await
    }

    /// As [`LockClient::from_connection`], with options (forced strategies; the timeouts are
    /// the connection's own).
    ///
    /// # Errors
    /// As [`LockClient::from_connection`]; [`Error::InvalidArgument`] when a forced strategy is
    /// not offered by the server.
    pub async fn with_connection(
        conn: impl Into<ClientConnection>,
        options: ClientOptions,
    ) -> Result<Self> {
        Self::build(conn.into(), options, None).await
    }

    async fn build(
        mut conn: ClientConnection,
        options: ClientOptions,
        notifier: Option<Notifier>,
    ) -> Result<Self> {
        let server = ServerInfo::detect(&mut conn).await?;
        if server.cluster_enabled && !conn.is_cluster() {
            return Err(Error::Topology {
                reason: format!(
                    "the server ({server}) is a Redis Cluster node: connect with \
                     redis-cluster://host:port (the CLI: --cluster), or keys of other slots \
                     would be refused with MOVED"
                ),
            });
        }
        let release = server.release_strategy(options.release)?;
        let extend = server.extend_strategy(options.extend)?;
        let notify_waiters = options.notify_waiters && server.can_publish;
        if options.notify_waiters && !server.can_publish {
            tracing::info!("PUBLISH not allowed on leasehold's channels (ACL): waiters will poll");
        }
        let notifier = notifier.filter(|_| notify_waiters);
        tracing::debug!(%server, %release, %extend, "leasehold connected");
        Ok(LockClient {
            inner: Arc::new(ClientInner {
                conn,
                server,
                release,
                extend,
                renewer: OnceLock::new(),
                renewal_stats: Arc::default(),
                notify_waiters,
                notifier,
            }),
        })
    }

    /// The server and what it offers, as detected when connecting.
    pub fn server(&self) -> &ServerInfo {
        &self.inner.server
    }

    /// The release strategy in use.
    pub fn release_strategy(&self) -> ReleaseStrategy {
        self.inner.release
    }

    /// The extend strategy in use.
    pub fn extend_strategy(&self) -> ExtendStrategy {
        self.inner.extend
    }

    /// A handle on the underlying connection, for the caller's own commands.
    pub fn connection(&self) -> ClientConnection {
        self.inner.conn.clone()
    }

    /// One attempt to take `key` for `options.ttl()`, without waiting.
    ///
    /// Sends `SET key token NX PX ttl` with a fresh random token (or the acquire script when
    /// fencing is on, which also issues the fencing number in the same round trip).
    ///
    /// **Cancellation.** If this future is dropped after the command was sent but before its
    /// reply was read, the server may have granted the lock to a token nobody holds. The library
    /// then sends a token-checked release of that token in the background; because it travels on
    /// the same connection it reaches the server after the `SET`, so the lock is freed at once
    /// instead of after its TTL. The same cleanup runs when the reply is lost to a timeout.
    /// Only if the connection itself breaks in between does the abandoned lock stay until its
    /// TTL runs out.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for an empty key or a TTL outside 1 ms ..= 7 days;
    /// [`Error::Connection`] (ambiguous once the command was sent), [`Error::Server`].
    pub async fn try_acquire(&self, key: &str, options: &LockOptions) -> Result<TryAcquire> {
        let begun = crate::metrics::start();
        let result: Result<TryAcquire> = async {
            if options.fair_enabled() {
                return self.fair_try_acquire(key, options).await;
            }
            validate_key(key)?;
            let ttl_ms = ttl_millis(options.ttl())?;
            let span =
                tracing::debug_span!("leasehold.acquire", key, outcome = tracing::field::Empty);
            async {
                let token = LockToken::random();
                let started = Instant::now();
                let result = self.attempt_with(key, &token, ttl_ms, options, false).await;
                let span = tracing::Span::current();
                match result? {
                    Attempt::Acquired { .. }
                        if self.expired_on_arrival(key, &token, started, options).await =>
                    {
                        span.record("outcome", "expired on arrival");
                        Err(Error::ExpiredOnArrival {
                            key: key.to_string(),
                            elapsed: started.elapsed(),
                            ttl: options.ttl(),
                        })
                    }
                    Attempt::Acquired { fencing } => {
                        span.record("outcome", "acquired");
                        Ok(TryAcquire::Acquired(
                            self.guard(key, token, fencing, started, options),
                        ))
                    }
                    Attempt::Busy { remaining } => {
                        span.record("outcome", "busy");
                        Ok(TryAcquire::Busy { remaining })
                    }
                }
            }
            .instrument(span)
            .await
        }
        .await;
        crate::metrics::acquisition(
            "redis",
            options.fair_enabled(),
            crate::metrics::Outcome::of_try(&result),
            begun,
        );
        result
    }

    /// Takes `key`, retrying a busy lock until `options.wait_bound()` elapses (one attempt if
    /// none was set).
    ///
    /// Between attempts it sleeps until the lock is released (a notification, see
    /// [`crate::waiting`]) or for the [`Backoff`](crate::Backoff) delay (exponential, with
    /// jitter, so waiters do not retry in lock step), never longer than the holder's remaining
    /// lease as the server reported it, nor past the deadline. No attempt is made at or after
    /// the deadline. Each attempt uses a fresh token, so a cleanup of an abandoned attempt can never
    /// release a later, successful one. Cancellation: see [`LockClient::try_acquire`].
    ///
    /// A topology in motion ([`Error::is_topology_in_motion`]: a slot migrating, a failover)
    /// is ridden out like a busy lock until the deadline, and so is a broken connection on a
    /// cluster or through Sentinel, whose client follows the new primary meanwhile.
    ///
    /// # Errors
    /// [`Error::NotAcquired`] when the lock stayed busy until the deadline; the last failure
    /// when the topology was still in motion at the deadline; otherwise as
    /// [`LockClient::try_acquire`].
    pub async fn acquire(&self, key: &str, options: &LockOptions) -> Result<LockGuard> {
        let begun = crate::metrics::start();
        let result: Result<LockGuard> = async {
            if options.fair_enabled() {
                return self.fair_acquire(key, options).await;
            }
            validate_key(key)?;
            let ttl_ms = ttl_millis(options.ttl())?;
            let span = tracing::debug_span!(
                "leasehold.acquire",
                key,
                outcome = tracing::field::Empty,
                attempts = tracing::field::Empty
            );
            async {
                let begun = Instant::now();
                let deadline = options.wait_bound().map(|w| begun + w);
                // The first attempt goes out at once: a free lock costs one round trip, as
                // with `try_acquire`. Only a busy lock makes the waiter subscribe to the
                // release channel, and the attempt that follows the server's confirmation
                // closes the gap: a release before the subscription took effect is seen by
                // that attempt (the key is free), one after it is delivered. So no release is
                // missed, without a SUBSCRIBE/UNSUBSCRIBE pair on every uncontended call.
                let mut subscription: Option<crate::waiting::Subscription> = None;
                let mut may_subscribe = self.inner.notifier.is_some() && deadline.is_some();
                let mut attempts: u32 = 0;
                // Pauses so far: the backoff's exponent (the retry after subscribing is none).
                let mut pauses: u32 = 0;
                loop {
                    let token = LockToken::random();
                    let started = Instant::now();
                    attempts += 1;
                    if let Some(s) = subscription.as_mut() {
                        s.mark_seen();
                    }
                    // The holder's remaining lease (the acquire script) bounds the pause: a
                    // waiter that will subscribe first sends a plain `SET NX PX`, and asks for it
                    // from the attempt after subscribing on.
                    let want_remaining = deadline.is_some() && !may_subscribe;
                    let (attempt, failure) = match self
                        .attempt_with(key, &token, ttl_ms, options, want_remaining)
                        .await
                    {
                        Ok(attempt) => (attempt, None),
                        // While the deadline allows, ride out a topology in motion (a slot
                        // migrating, a failover): the request was refused, so it is retried as if
                        // busy, with backoff. On a cluster or through Sentinel a broken connection
                        // is part of a failover too (the client follows the new topology); an
                        // ambiguous attempt's token was given back by its cleanup, and the next
                        // attempt has a new token. At the deadline the last failure is returned.
                        Err(e) if deadline.is_some() && self.retries_while_waiting(&e) => {
                            tracing::debug!(key, error = %e, "topology in motion; retrying");
                            (Attempt::Busy { remaining: None }, Some(e))
                        }
                        Err(e) => return Err(e),
                    };
                    let span = tracing::Span::current();
                    span.record("attempts", attempts);
                    let remaining = match attempt {
                        // Granted, but too late to be a lease: released; try again (no wait).
                        Attempt::Acquired { .. }
                            if self.expired_on_arrival(key, &token, started, options).await =>
                        {
                            Some(Duration::ZERO)
                        }
                        Attempt::Acquired { fencing } => {
                            span.record("outcome", "acquired");
                            return Ok(self.guard(key, token, fencing, started, options));
                        }
                        Attempt::Busy { remaining } => remaining,
                    };
                    let not_acquired = |now: Instant, failure: Option<Error>| {
                        failure.unwrap_or_else(|| Error::NotAcquired {
                            key: key.to_string(),
                            waited: now - begun,
                            attempts,
                        })
                    };
                    let now = Instant::now();
                    let Some(deadline) = deadline.filter(|d| now < *d) else {
                        span.record("outcome", "busy");
                        return Err(not_acquired(now, failure));
                    };
                    if std::mem::take(&mut may_subscribe) {
                        if let Some(notifier) = &self.inner.notifier {
                            subscription = notifier.subscribe_one(release_channel(key)).await;
                        }
                        // Subscribed (or not: the waiter then polls): attempt again at once,
                        // this time learning the holder's remaining lease if it is still busy;
                        // but no attempt at or past the deadline.
                        let now = Instant::now();
                        if now >= deadline {
                            span.record("outcome", "busy");
                            return Err(not_acquired(now, failure));
                        }
                        continue;
                    }
                    crate::waiting::pause_between_attempts(
                        subscription.as_mut(),
                        options.backoff_policy(),
                        pauses,
                        remaining,
                        deadline - now,
                    )
                    .await;
                    pauses += 1;
                    // No attempt at or past the deadline: the wait bound is a promise to the caller.
                    let now = Instant::now();
                    if now >= deadline {
                        span.record("outcome", "busy");
                        return Err(not_acquired(now, failure));
                    }
                }
            }
            .instrument(span)
            .await
        }
        .await;
        crate::metrics::acquisition(
            "redis",
            options.fair_enabled(),
            crate::metrics::Outcome::of_acquire(&result),
            begun,
        );
        result
    }

    /// Waits for `key` (as [`LockClient::acquire`]), runs `work`, and releases the lock
    /// whatever happens: when `work` returns, when it panics (the panic is resumed after the
    /// release), and when the returned future is dropped (the guard then releases in the
    /// background).
    ///
    /// `work` receives a [`Lease`]: the key, token, fencing token, validity and loss signal of
    /// the lock. The work runs against [`Lease::lost`]: if the lease is lost meanwhile (a renewal
    /// of an [`auto_extend`](LockOptions::auto_extend)ed lock failed, or the validity ran out),
    /// the work's future is dropped at once and [`Error::LockLost`] returned; with
    /// [`OnLoss::Notify`](crate::OnLoss::Notify) the work finishes and the error is returned after it.
    ///
    /// # Errors
    /// As [`LockClient::acquire`] if the lock was not taken (then `work` did not run);
    /// [`Error::LockLost`] as above; [`Error::NotHeld`] if the release found the lock gone
    /// (without the loss having been noticed first): the work was not protected for its whole
    /// duration, so its output is dropped.
    pub async fn with_lock<T, F, Fut>(&self, key: &str, options: &LockOptions, work: F) -> Result<T>
    where
        F: FnOnce(Lease) -> Fut,
        Fut: std::future::Future<Output = T>,
    {
        let guard = self.acquire(key, options).await?;
        crate::guard::run_with_lock(guard, options, work).await
    }

    /// Releases `key` if it still holds `token`, atomically (see [`crate::strategy`]).
    ///
    /// # Errors
    /// [`Error::NotHeld`] if the key is gone or holds another token; [`Error::Server`] with
    /// `WRONGTYPE` if the key is not a string; [`Error::Connection`].
    pub async fn release(&self, key: &str, token: &LockToken) -> Result<()> {
        validate_key(key)?;
        let span = tracing::debug_span!("leasehold.release", key, token_hash = %token.redacted(), outcome = tracing::field::Empty);
        async {
            let deleted = self.release_raw(key, token.expose()).await?;
            tracing::Span::current()
                .record("outcome", if deleted { "released" } else { "not held" });
            if deleted {
                Ok(())
            } else {
                Err(Error::NotHeld {
                    key: key.to_string(),
                })
            }
        }
        .instrument(span)
        .await
    }

    /// Resets the TTL of `key` to `ttl` if it still holds `token`, atomically.
    ///
    /// # Errors
    /// [`Error::NotHeld`] if the key is gone or holds another token; as [`LockClient::release`].
    pub async fn extend(&self, key: &str, token: &LockToken, ttl: Duration) -> Result<()> {
        validate_key(key)?;
        let ttl_ms = ttl_millis(ttl)?;
        let span = tracing::debug_span!("leasehold.extend", key, token_hash = %token.redacted(), outcome = tracing::field::Empty);
        async {
            let extended = self.extend_raw(key, token.expose(), ttl_ms).await?;
            tracing::Span::current()
                .record("outcome", if extended { "extended" } else { "not held" });
            if extended {
                Ok(())
            } else {
                Err(Error::NotHeld {
                    key: key.to_string(),
                })
            }
        }
        .instrument(span)
        .await
    }

    /// Reads what `key` holds, its remaining TTL and its fencing counter, in one round trip.
    ///
    /// # Errors
    /// [`Error::Server`] with `WRONGTYPE` if the key is not a string; [`Error::Connection`].
    pub async fn inspect(&self, key: &str) -> Result<LockState> {
        validate_key(key)?;
        let fence = fence_key(key);
        let (holder, pttl, counter): (Option<String>, i64, Option<u64>) = self
            .idempotent(Operation::Inspect, |mut conn| {
                let pipe = redis::pipe().get(key).pttl(key).get(&fence).clone();
                async move { pipe.query_async(&mut conn).await }
            })
            .await?;
        Ok(LockState {
            key: key.to_string(),
            holder,
            ttl: (pttl >= 0).then(|| Duration::from_millis(pttl as u64)),
            fencing_counter: counter,
        })
    }

    /// Raises `key`'s fencing counter to at least `at_least` (it never lowers it) and returns
    /// the counter's value afterwards.
    ///
    /// For the holder whose number the protected resource refused at first contact
    /// ([`FencedRead::Rejected`](crate::FencedRead::Rejected) with `highest` above the number it
    /// was given): the counter went back, through a restart without persistence or a failover to
    /// a replica that missed the last increments. Until it climbs past `highest` again, every
    /// holder is refused; raising it to `highest` makes the next acquisition draw `highest + 1`.
    ///
    /// **Safe** because the counter only moves up: every number issued afterwards is still
    /// greater than every number issued before, which is all fencing needs. It touches no lock.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] (`what: "fencing counter"`) for `at_least` of
    /// [`MAX_FENCING_NUMBER`] or more: the scripts that issue numbers carry them as Lua numbers
    /// (doubles), which are exact only up to 2^53, and above it two holders could be handed the
    /// same number.
    pub async fn raise_fencing_counter(&self, key: &str, at_least: u64) -> Result<u64> {
        validate_key(key)?;
        if at_least >= MAX_FENCING_NUMBER {
            return Err(Error::InvalidArgument {
                what: "fencing counter",
                reason: format!(
                    "{at_least} is not below {MAX_FENCING_NUMBER} (2^53), the largest number \
                     the server's scripts issue exactly"
                ),
            });
        }
        let counter = fence_key(key);
        let value: String = self
            .idempotent(Operation::RaiseFencingCounter, |mut conn| {
                let mut inv = RAISE_COUNTER_SCRIPT.key(&counter);
                inv.arg(at_least);
                async move { inv.invoke_async(&mut conn).await }
            })
            .await?;
        value.parse().map_err(|_| Error::UnexpectedReply {
            op: Operation::RaiseFencingCounter,
            detail: format!("the fencing counter {counter:?} holds {value:?}, not a number"),
        })
    }

    pub(crate) fn guard(
        &self,
        key: &str,
        token: LockToken,
        fencing: Option<u64>,
        started: Instant,
        options: &LockOptions,
    ) -> LockGuard {
        let lease = Lease::new(key, token, fencing, started, options.ttl());
        self.guard_for(lease, started, options, Arc::new(RedisHeld(self.clone())))
    }

    /// A guard for `lease` (acquired by a request sent at `started`) that releases through
    /// `held`; registered for renewal if `options` ask for it.
    pub(crate) fn guard_for(
        &self,
        lease: Lease,
        started: Instant,
        options: &LockOptions,
        held: Arc<dyn HeldLock>,
    ) -> LockGuard {
        self.guard_renewing(lease, started, options, held, RenewTarget::Lock)
    }

    /// [`guard_for`](Self::guard_for), renewing `target` (a semaphore permit's entry).
    pub(crate) fn guard_renewing(
        &self,
        lease: Lease,
        started: Instant,
        options: &LockOptions,
        held: Arc<dyn HeldLock>,
        target: RenewTarget,
    ) -> LockGuard {
        if options.auto_extend_enabled() {
            self.renewer().register(Registration {
                lease: lease.clone(),
                ttl: options.ttl(),
                interval: options.renew_interval(),
                stop_at: options.max_hold_bound().map(|cap| started + cap),
                target,
            });
        }
        LockGuard::new(held, lease)
    }

    /// The subscriber for release notifications, if this client has one.
    pub(crate) fn notifier(&self) -> Option<&Notifier> {
        self.inner.notifier.as_ref()
    }

    /// Whether releases publish a notification.
    pub(crate) fn notifies_waiters(&self) -> bool {
        self.inner.notify_waiters
    }

    fn renewer(&self) -> &Renewer {
        self.inner.renewer.get_or_init(|| {
            Renewer::spawn(
                self.inner.conn.clone(),
                self.inner.extend,
                self.inner.renewal_stats.clone(),
            )
        })
    }

    /// Counters of this client's renewer (all zero until a lease is auto-extended). The handle
    /// is live: taken before the first auto-extended lease, it still counts every renewal.
    pub fn renewal_stats(&self) -> Arc<RenewalStats> {
        self.inner.renewal_stats.clone()
    }

    /// Whether a waiting acquisition retries after `e` (see [`LockClient::acquire`]).
    pub(crate) fn retries_while_waiting(&self, e: &Error) -> bool {
        e.is_topology_in_motion()
            || (matches!(e, Error::Connection { .. })
                && matches!(
                    self.inner.conn,
                    ClientConnection::Cluster(_) | ClientConnection::Sentinel(_)
                ))
    }

    /// Whether a granted attempt's reply came after the lease's validity was over (the
    /// validity a [`Lease`] would compute: TTL minus the drift allowance, from `started`, when
    /// the request was sent). If so the lock is released again, token-checked (harmless if the
    /// key already expired): the server may have freed it already, so it is not a lock.
    ///
    /// Without this, a reply delayed past the TTL (a stalled server that had already processed
    /// the `SET`, a long GC pause of ours) would hand out a guard that was never valid for a
    /// moment, while another client may already hold the key. `leasehold-lab check --faults stall`
    /// found it.
    async fn expired_on_arrival(
        &self,
        key: &str,
        token: &LockToken,
        started: Instant,
        options: &LockOptions,
    ) -> bool {
        let ttl = options.ttl();
        if started.elapsed() < ttl.saturating_sub(clock_drift(ttl)) {
            return false;
        }
        tracing::warn!(
            key,
            elapsed_ms = started.elapsed().as_millis() as u64,
            "lock granted after its validity ended; releasing"
        );
        let _ = self.release_raw(key, token.expose()).await;
        true
    }

    /// One acquisition as `options` ask: the attempt, and with
    /// [`LockOptions::replica_ack`] the replicas' acknowledgement.
    async fn attempt_with(
        &self,
        key: &str,
        token: &LockToken,
        ttl_ms: u64,
        options: &LockOptions,
        want_remaining: bool,
    ) -> Result<Attempt> {
        let fencing = options.fencing_enabled();
        match options.replica_ack_required() {
            None => {
                self.attempt(key, token, ttl_ms, fencing, want_remaining)
                    .await
            }
            Some(ack) => {
                self.attempt_replicated(key, token, ttl_ms, fencing, want_remaining, ack)
                    .await
            }
        }
    }

    /// An acquisition confirmed by `wanted` replicas: the acquisition and `WAIT` in one
    /// pipeline, on one connection, to the key's master.
    ///
    /// Guarantee: a lock is granted only if `WAIT` counted the write that took it. `WAIT` counts
    /// the writes of the connection it arrives on, so it must never reach a server apart from its
    /// acquisition. Sent separately, a cluster client that lost the master during `WAIT` retried
    /// the `WAIT` alone on the promoted replica's fresh connection, which acknowledged at once a
    /// write it never had (`leasehold-lab check --topology cluster --replica-ack 1` found two
    /// overlaps). As one pipeline, a retry repeats both: the acquisition runs again on the new
    /// master (busy if our key reached it, so not granted twice) and `WAIT` counts that write.
    async fn attempt_replicated(
        &self,
        key: &str,
        token: &LockToken,
        ttl_ms: u64,
        fencing: bool,
        want_remaining: bool,
        (wanted, timeout): (u32, Duration),
    ) -> Result<Attempt> {
        let scripted = fencing || want_remaining;
        // Ours until confirmed: if this future is dropped, or the reply is lost, give it back.
        let mut cleanup = AbandonedAttempt::arm(self, key, token);
        let mut conn = self.inner.conn.clone();
        let mut by_body = false;
        let replies = loop {
            let mut pipe = redis::pipe();
            pipe.ignore_errors()
                .add_command(acquire_cmd(key, token, ttl_ms, fencing, scripted, by_body))
                .cmd("WAIT")
                .arg(wanted)
                .arg(timeout.as_millis() as u64);
            let replies = conn.pipeline_on_key_master(key, pipe).await;
            match &replies {
                // The script is not cached on this node (a restart, a failover, a new shard):
                // nothing was written; send its body.
                Ok(r)
                    if !by_body
                        && matches!(r.first(), Some(Value::ServerError(e)) if e.code() == "NOSCRIPT") =>
                {
                    by_body = true;
                }
                _ => break replies,
            }
        };
        let parsed = replies.and_then(|mut r| {
            let wait = r.pop().unwrap_or(Value::Nil);
            let acquire = r.pop().unwrap_or(Value::Nil);
            let attempt = parse_acquire(acquire, fencing)?;
            let acked = match wait {
                Value::ServerError(e) => return Err(redis::RedisError::from(e)),
                v => redis::from_redis_value::<i64>(v).map_err(redis::RedisError::from)?,
            };
            Ok((attempt, acked.max(0) as u32))
        });
        let (attempt, acked) = match parsed {
            Ok(ok) => ok,
            Err(e) => {
                let err = Error::from_redis(Operation::Acquire, e);
                if !err.is_ambiguous() {
                    cleanup.disarm();
                    // The acquisition may have succeeded before the error (a refused WAIT, a
                    // script refused half-way): token-checked, harmless if nothing was set.
                    let _ = self.release_raw(key, token.expose()).await;
                }
                return Err(err);
            }
        };
        cleanup.disarm();
        if matches!(attempt, Attempt::Busy { .. }) || acked >= wanted {
            return Ok(attempt);
        }
        tracing::warn!(
            key,
            acked,
            wanted,
            "acquisition not acknowledged by enough replicas; releasing"
        );
        let _ = self.release_raw(key, token.expose()).await;
        Err(Error::NotReplicated {
            key: key.to_string(),
            acked,
            wanted,
        })
    }

    /// Sends one acquisition. `want_remaining` asks for the holder's PTTL on busy (the script).
    pub(crate) async fn attempt(
        &self,
        key: &str,
        token: &LockToken,
        ttl_ms: u64,
        fencing: bool,
        want_remaining: bool,
    ) -> Result<Attempt> {
        let mut cleanup = AbandonedAttempt::arm(self, key, token);
        let mut conn = self.inner.conn.clone();
        let scripted = fencing || want_remaining;
        let result = if scripted {
            let mut inv = ACQUIRE_SCRIPT.key(key);
            if fencing {
                inv.key(fence_key(key));
            }
            inv.arg(token.expose()).arg(ttl_ms);
            inv.invoke_async::<(i64, i64)>(&mut conn)
                .await
                .map(|(ok, n)| {
                    if ok == 1 {
                        Attempt::Acquired {
                            fencing: fencing.then_some(n as u64),
                        }
                    } else {
                        Attempt::Busy {
                            remaining: (n >= 0).then(|| Duration::from_millis(n as u64)),
                        }
                    }
                })
        } else {
            crate::strategy::sized_cmd("SET", 5, key.len() + token.expose().len() + 2 + 2 + 20)
                .arg(key)
                .arg(token.expose())
                .arg("NX")
                .arg("PX")
                .arg(ttl_ms)
                .query_async::<Option<String>>(&mut conn)
                .await
                .map(|ok| match ok {
                    Some(_) => Attempt::Acquired { fencing: None },
                    None => Attempt::Busy { remaining: None },
                })
        };
        match result {
            Ok(attempt) => {
                cleanup.disarm();
                Ok(attempt)
            }
            Err(e) => {
                let err = Error::from_redis(Operation::Acquire, e);
                if !err.is_ambiguous() {
                    cleanup.disarm();
                }
                // A script that failed part-way (an ACL refusing its INCR, say) has already
                // done its SET: scripts do not roll back. Give the token back at once, so the
                // failure leaves no orphaned lock (token-checked: harmless if nothing was set).
                if scripted && matches!(err, Error::Server { .. } | Error::PermissionDenied { .. })
                {
                    let _ = self.release_raw(key, token.expose()).await;
                }
                // An ambiguous failure keeps the cleanup armed: it fires on drop below.
                Err(err)
            }
        }
    }

    pub(crate) async fn release_raw(&self, key: &str, token: &str) -> Result<bool> {
        let notify = self.inner.notify_waiters;
        let channel = notify.then(|| release_channel(key));
        let sharded = self.inner.conn.is_cluster();
        let deleted: i64 = self
            .idempotent(Operation::Release, |mut conn| {
                let channel = channel.as_deref();
                async move {
                    match (release_cmd(self.inner.release, key, token), channel) {
                        // One round trip: the conditional delete and the wake-up, pipelined. A
                        // wake-up after a release that deleted nothing only makes waiters retry.
                        (Some(cmd), Some(channel)) => {
                            let mut publish = crate::strategy::sized_cmd(
                                if sharded { "SPUBLISH" } else { "PUBLISH" },
                                2,
                                channel.len() + key.len(),
                            );
                            publish.arg(channel).arg(key);
                            let mut pipe = redis::Pipeline::with_capacity(2);
                            pipe.add_command(cmd).add_command(publish);
                            // The release's own reply decides; a refused notification is
                            // ignored (it must never turn a completed release into an error).
                            // The replies are read as they come (server errors in place), not
                            // through `Pipeline::query_async`, which copies them twice.
                            let mut replies = redis::aio::ConnectionLike::req_packed_commands(
                                &mut conn, &pipe, 0, 2,
                            )
                            .await?;
                            match replies.drain(..).next() {
                                Some(Value::ServerError(e)) => Err(redis::RedisError::from(e)),
                                Some(reply) => redis::from_redis_value::<i64>(reply)
                                    .map_err(redis::RedisError::from),
                                None => Err(redis::RedisError::from((
                                    redis::ErrorKind::UnexpectedReturnType,
                                    "no reply to the release",
                                ))),
                            }
                        }
                        (Some(cmd), None) => cmd.query_async(&mut conn).await,
                        (None, Some(channel)) => {
                            let script = if sharded {
                                &*RELEASE_SNOTIFY_SCRIPT
                            } else {
                                &*RELEASE_NOTIFY_SCRIPT
                            };
                            script
                                .key(key)
                                .arg(token)
                                .arg(channel)
                                .invoke_async(&mut conn)
                                .await
                        }
                        (None, None) => {
                            RELEASE_SCRIPT
                                .key(key)
                                .arg(token)
                                .invoke_async(&mut conn)
                                .await
                        }
                    }
                }
            })
            .await?;
        Ok(deleted == 1)
    }

    pub(crate) async fn extend_raw(&self, key: &str, token: &str, ttl_ms: u64) -> Result<bool> {
        self.idempotent(Operation::Extend, |mut conn| async move {
            match extend_cmd(self.inner.extend, key, token, ttl_ms) {
                Some(cmd) => cmd.query_async::<Value>(&mut conn).await.map(|v| {
                    matches!(v, Value::Okay) || matches!(&v, Value::SimpleString(s) if s == "OK")
                }),
                None => EXTEND_SCRIPT
                    .key(key)
                    .arg(token)
                    .arg(ttl_ms)
                    .invoke_async::<i64>(&mut conn)
                    .await
                    .map(|n| n == 1),
            }
        })
        .await
    }

    /// Runs a token-checked (hence safely repeatable) operation, once more if the connection
    /// had dropped: the reconnecting connection then carries the retry to the (possibly
    /// restarted) server. Repeating is safe because the operation only acts while the key holds
    /// our token; at worst a release whose first reply was lost reports "not held", which is
    /// true by then. Timeouts are not retried: the bound the caller set would double.
    pub(crate) async fn idempotent<T, F, Fut>(&self, op: Operation, mut run: F) -> Result<T>
    where
        F: FnMut(ClientConnection) -> Fut,
        Fut: std::future::Future<Output = redis::RedisResult<T>>,
    {
        match run(self.inner.conn.clone()).await {
            // READONLY: a failover demoted the server we spoke to; a Sentinel connection has
            // switched to the new primary meanwhile.
            Err(e)
                if e.is_connection_dropped()
                    || e.is_connection_refusal()
                    || e.code() == Some("READONLY") =>
            {
                tracing::debug!(%op, error = %e, "connection dropped; retrying once");
                run(self.inner.conn.clone()).await
            }
            other => other,
        }
        .map_err(|e| Error::from_redis(op, e))
    }
}

/// The acquisition as one command: `SET key token NX PX ttl`, or (`scripted`: with fencing, or
/// asking the holder's PTTL on busy) the acquire script, by its hash or (`by_body`) its body.
fn acquire_cmd(
    key: &str,
    token: &LockToken,
    ttl_ms: u64,
    fencing: bool,
    scripted: bool,
    by_body: bool,
) -> redis::Cmd {
    if !scripted {
        let mut c = crate::strategy::sized_cmd("SET", 5, key.len() + token.expose().len() + 24);
        c.arg(key)
            .arg(token.expose())
            .arg("NX")
            .arg("PX")
            .arg(ttl_ms);
        return c;
    }
    let mut c = if by_body {
        let mut c = redis::cmd("EVAL");
        c.arg(ACQUIRE_LUA);
        c
    } else {
        let mut c = redis::cmd("EVALSHA");
        c.arg(ACQUIRE_SCRIPT.get_hash());
        c
    };
    if fencing {
        c.arg(2).arg(key).arg(fence_key(key));
    } else {
        c.arg(1).arg(key);
    }
    c.arg(token.expose()).arg(ttl_ms);
    c
}

/// The reply of [`acquire_cmd`]: `OK`/nil of `SET NX`, or the script's `{ok, n}`.
fn parse_acquire(reply: Value, fencing: bool) -> redis::RedisResult<Attempt> {
    match reply {
        Value::ServerError(e) => Err(redis::RedisError::from(e)),
        Value::Nil => Ok(Attempt::Busy { remaining: None }),
        Value::Okay => Ok(Attempt::Acquired { fencing: None }),
        Value::SimpleString(s) if s == "OK" => Ok(Attempt::Acquired { fencing: None }),
        other => {
            let (ok, n): (i64, i64) = redis::from_redis_value(other)?;
            Ok(if ok == 1 {
                Attempt::Acquired {
                    fencing: fencing.then_some(n as u64),
                }
            } else {
                Attempt::Busy {
                    remaining: (n >= 0).then(|| Duration::from_millis(n as u64)),
                }
            })
        }
    }
}

/// Releases the token of an acquisition whose outcome we never learned (the future was dropped,
/// or the reply was lost), so an orphaned lock does not block everyone for a whole TTL.
struct AbandonedAttempt<'a> {
    client: &'a LockClient,
    key: &'a str,
    token: &'a LockToken,
    armed: bool,
}

impl<'a> AbandonedAttempt<'a> {
    fn arm(client: &'a LockClient, key: &'a str, token: &'a LockToken) -> Self {
        AbandonedAttempt {
            client,
            key,
            token,
            armed: true,
        }
    }

    fn disarm(&mut self) {
        self.armed = false;
    }
}

impl Drop for AbandonedAttempt<'_> {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let Ok(handle) = tokio::runtime::Handle::try_current() else {
            tracing::warn!(
                key = self.key,
                "acquisition abandoned outside a runtime; the lock, if granted, expires with its TTL"
            );
            return;
        };
        let client = self.client.clone();
        let key = self.key.to_string();
        let token = self.token.clone();
        tracing::debug!(key, token_hash = %token.redacted(), "acquisition abandoned; releasing its token in the background");
        handle.spawn(async move {
            if let Ok(true) = client.release_raw(&key, token.expose()).await {
                tracing::debug!(key, "abandoned acquisition had taken the lock; released");
            }
        });
    }
}

/// A lock held on one Redis server (standalone, a cluster's master, a Sentinel's primary).
#[derive(Debug)]
struct RedisHeld(LockClient);

impl HeldLock for RedisHeld {
    fn release<'a>(&'a self, lease: &'a Lease) -> BoxFuture<'a, Result<()>> {
        Box::pin(self.0.release(lease.key(), lease.token()))
    }

    fn extend<'a>(&'a self, lease: &'a Lease, ttl: Duration) -> BoxFuture<'a, Result<Instant>> {
        Box::pin(async move {
            let started = Instant::now();
            self.0.extend(lease.key(), lease.token(), ttl).await?;
            Ok(started + ttl.saturating_sub(clock_drift(ttl)))
        })
    }
}

crate::backend::impl_lock_backend!(LockClient, "redis");
