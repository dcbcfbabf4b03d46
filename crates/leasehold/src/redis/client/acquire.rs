//! Taking a lock: one attempt, or attempts until the wait bound, sleeping in between.

use tracing::Instrument;

use crate::core::acquire::{Ask, Attempts, Wakeup, granted};
use crate::core::error::{Error, Result};
use crate::core::guard::LockGuard;
use crate::core::options::LockOptions;
use crate::core::outcome::TryAcquire;
use crate::core::trace::shown_key;
use crate::redis::slot::release_channel;
use crate::redis::slot::validate_name;

use super::RedisClient;

impl RedisClient {
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
    pub(crate) async fn try_acquire(&self, key: &str, options: &LockOptions) -> Result<TryAcquire> {
        let begun = crate::core::metrics::start();
        let result: Result<TryAcquire> = async {
            if options.fair_enabled() {
                return self.fair_try_acquire(key, options).await;
            }
            let lock = PlainLock::new(self, key, options)?;
            // The client's own span (DEBUG, inside the Locker's): the key as
            // `set_key_in_spans` says, the outcome.
            let span = tracing::debug_span!(
                "leasehold.acquire",
                key = shown_key(key).as_deref(),
                outcome = tracing::field::Empty
            );
            let result = lock
                .attempt(options, Ask::ONCE)
                .instrument(span.clone())
                .await;
            span.record(
                "outcome",
                match &result {
                    Ok(TryAcquire::Acquired(_)) => "acquired",
                    Ok(TryAcquire::Busy { .. }) => "busy",
                    Err(Error::ExpiredOnArrival { .. }) => "expired on arrival",
                    Err(_) => "failed",
                },
            );
            result
        }
        .await;
        crate::core::metrics::acquisition(
            crate::core::kind::Backend::Redis,
            options.fair_enabled(),
            crate::core::metrics::Outcome::of_try(&result),
            begun,
        );
        result
    }

    /// Takes `key`, retrying a busy lock until `options.wait_bound()` elapses (one attempt if
    /// none was set), through the acquisition engine (`core::acquire`).
    ///
    /// Between attempts it sleeps until the lock is released (a notification, see
    /// `src/redis/waiting`; each release wakes one waiter of this client) or for the
    /// [`Backoff`](crate::Backoff) delay (exponential, with jitter, so waiters do not retry in
    /// lock step), never longer than the holder's remaining lease as the server reported it,
    /// nor past the deadline. No attempt is made at or after the deadline. Each attempt uses a
    /// fresh token, so a cleanup of an abandoned attempt can never release a later, successful
    /// one. Cancellation: see [`Locker::try_acquire`](crate::Locker::try_acquire).
    ///
    /// A topology in motion ([`Error::is_topology_in_motion`]: a slot migrating, a failover)
    /// is ridden out like a busy lock until the deadline, and so is a broken connection on a
    /// cluster or through Sentinel, whose client follows the new primary meanwhile.
    ///
    /// # Errors
    /// [`Error::NotAcquired`] when the lock stayed busy until the deadline; the last failure
    /// when the topology was still in motion at the deadline; otherwise as
    /// [`Locker::try_acquire`](crate::Locker::try_acquire).
    pub(crate) async fn acquire(&self, key: &str, options: &LockOptions) -> Result<LockGuard> {
        let begun = crate::core::metrics::start();
        let result: Result<LockGuard> = async {
            if options.fair_enabled() {
                return self.fair_acquire(key, options).await;
            }
            let lock = PlainLock::new(self, key, options)?;
            let span = tracing::debug_span!("leasehold.acquire", key = shown_key(key).as_deref());
            crate::core::acquire::wait(&lock, options, options.wait_bound())
                .instrument(span)
                .await
        }
        .await;
        crate::core::metrics::acquisition(
            crate::core::kind::Backend::Redis,
            options.fair_enabled(),
            crate::core::metrics::Outcome::of_acquire(&result),
            begun,
        );
        result
    }
}

/// The plain lock on one key, as the acquisition engine drives it.
struct PlainLock<'a> {
    client: &'a RedisClient,
    key: &'a str,
    ttl_ms: u64,
}

impl<'a> PlainLock<'a> {
    /// Checks the name and TTL (before any round trip).
    fn new(client: &'a RedisClient, key: &'a str, options: &LockOptions) -> Result<Self> {
        validate_name(key)?;
        let ttl_ms = options.ttl_millis()?;
        Ok(PlainLock {
            client,
            key,
            ttl_ms,
        })
    }
}

impl Attempts for PlainLock<'_> {
    fn name(&self) -> &str {
        self.key
    }

    /// `SET NX PX` (or the acquire script: fencing, `min_hold`, or a waiter asking for the
    /// holder's remaining lease). A granted attempt whose reply came after the lease's validity
    /// is released again, token-checked ([`granted`]): the server may have freed it already, so it
    /// is not a lock. Without this, a reply delayed past the TTL (a stalled server that had
    /// already processed the `SET`, a long GC pause of ours) would hand out a guard that was
    /// never valid for a moment, while another client may already hold the key.
    /// `leasehold-lab check --faults stall` found it.
    async fn attempt(&self, options: &LockOptions, ask: Ask) -> Result<TryAcquire> {
        let (client, key, ttl_ms, remaining) = (self.client, self.key, self.ttl_ms, ask.remaining);
        granted(
            key,
            options,
            options.new_token(),
            async move |token| {
                let attempt = client
                    .attempt_with(key, token, ttl_ms, options, remaining)
                    .await?;
                Ok(attempt.into())
            },
            async |token| {
                let _ = client.release_raw(key, token.expose()).await;
            },
            |token, fencing, started| client.guard(key, token, fencing, started, options),
        )
        .await
    }

    fn wakes(&self) -> bool {
        self.client.inner.notifier.is_some()
    }

    /// The key's release channel, as one of the plain-lock waiters: each release wakes one.
    async fn wakeups(&self) -> Option<Box<dyn Wakeup>> {
        let notifier = self.client.inner.notifier.as_ref()?;
        let subscription = notifier.subscribe_one(release_channel(self.key)).await?;
        Some(Box::new(subscription) as Box<dyn Wakeup>)
    }

    fn retries(&self, e: &Error) -> bool {
        self.client.retries_while_waiting(e)
    }
}

/// A Redis primitive's attempts (a semaphore's permits, a read-write lock's sides, an
/// election's terms), as [`OnReleaseChannel`] hands them to the acquisition engine.
pub(crate) trait ChannelAttempts: Sync {
    /// The client the attempts go through.
    fn client(&self) -> &RedisClient;
    /// The primitive's name (its release channel is [`release_channel`] of it).
    fn name(&self) -> &str;
    /// One attempt, as [`Attempts::attempt`].
    fn attempt(
        &self,
        options: &LockOptions,
        ask: Ask,
    ) -> impl Future<Output = Result<TryAcquire>> + Send;
}

/// A Redis primitive's wait: woken by every release on its name's channel (only one can take a
/// plain lock, which wakes one waiter per release instead; several can take permits or read),
/// riding out a topology in motion as the plain lock does.
pub(crate) struct OnReleaseChannel<P>(pub(crate) P);

impl<P: ChannelAttempts> Attempts for OnReleaseChannel<P> {
    fn name(&self) -> &str {
        self.0.name()
    }

    fn attempt(
        &self,
        options: &LockOptions,
        ask: Ask,
    ) -> impl Future<Output = Result<TryAcquire>> + Send {
        self.0.attempt(options, ask)
    }

    fn wakes(&self) -> bool {
        self.0.client().notifier().is_some()
    }

    async fn wakeups(&self) -> Option<Box<dyn Wakeup>> {
        let notifier = self.0.client().notifier()?;
        let subscription = notifier.subscribe(release_channel(self.0.name())).await?;
        Some(Box::new(subscription) as Box<dyn Wakeup>)
    }

    fn retries(&self, e: &Error) -> bool {
        self.0.client().retries_while_waiting(e)
    }
}
