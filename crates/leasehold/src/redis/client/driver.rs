//! The Redis client as a [`Driver`]: what a [`Locker`](crate::Locker) over Redis or Valkey
//! calls.

use std::time::Duration;

use crate::core::driver::{Driver, Kind, Primitives};
use crate::core::error::Result;
use crate::core::guard::LockGuard;
use crate::core::kind::Backend;
use crate::core::options::LockOptions;
use crate::core::outcome::{LockState, TryAcquire};
use crate::core::sync::{Election, RwLock, Semaphore};
use crate::core::token::LockToken;

use tracing::Instrument;

use crate::core::acquire::{Ask, Attempts};
use crate::core::error::{Error, Operation};
use crate::core::options::ttl_millis;
use crate::core::outcome::MAX_FENCING_NUMBER;
use crate::core::trace::shown_key;
use crate::redis::scripts::RAISE_COUNTER_SCRIPT;
use crate::redis::slot::{fence_key, validate_name};

use super::RedisClient;
use super::acquire::PlainLock;

impl Kind for RedisClient {
    fn kind(&self) -> Backend {
        Backend::Redis
    }
}

/// Each primitive's handle is built in its module (`semaphore`, `rwlock`, `election`).
impl Primitives for RedisClient {
    fn check_name(&self, name: &str) -> Result<()> {
        crate::redis::slot::validate_name(name)
    }

    fn semaphore(&self, name: &str, permits: u32) -> Result<Semaphore> {
        self.new_semaphore(name, permits)
    }

    fn rwlock(&self, name: &str) -> Result<RwLock> {
        self.new_rwlock(name)
    }

    fn election(&self, name: &str) -> Result<Election> {
        self.new_election(name)
    }
}

#[async_trait::async_trait]
impl Driver for RedisClient {
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
    async fn try_acquire(&self, key: &str, options: &LockOptions) -> Result<TryAcquire> {
        if options.fair_enabled() {
            // Boxed: inline, the fair path's larger state would be part of every plain
            // acquisition's future, copied into its box on each call.
            return Box::pin(self.fair_try_acquire(key, options)).await;
        }
        let lock = PlainLock::new(self, key, options)?;
        // The client's own span (DEBUG, inside the Locker's; also what a guard's release and
        // extend log under): the key as `set_key_in_spans` says, the outcome.
        let span = tracing::debug_span!(
            "leasehold.acquire",
            key = shown_key(key).as_deref(),
            outcome = tracing::field::Empty
        );
        // One handle on the span, read back from the instrumented future: a clone held across
        // the attempt grew every plain acquisition's boxed future past the allocator's
        // per-thread cache.
        let mut attempt = std::pin::pin!(lock.attempt(options, Ask::ONCE).instrument(span));
        let result = attempt.as_mut().await;
        attempt.span().record(
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
    /// A topology in motion ([`is_topology_in_motion`](crate::redis::is_topology_in_motion): a slot migrating, a failover)
    /// is ridden out like a busy lock until the deadline, and so is a broken connection on a
    /// cluster or through Sentinel, whose client follows the new primary meanwhile.
    ///
    /// # Errors
    /// [`Error::NotAcquired`] when the lock stayed busy until the deadline; the last failure
    /// when the topology was still in motion at the deadline; otherwise as
    /// [`Locker::try_acquire`](crate::Locker::try_acquire).
    async fn acquire(&self, key: &str, options: &LockOptions) -> Result<LockGuard> {
        if options.fair_enabled() {
            // Boxed, as in `try_acquire`.
            return Box::pin(self.fair_acquire(key, options)).await;
        }
        let lock = PlainLock::new(self, key, options)?;
        let span = tracing::debug_span!("leasehold.acquire", key = shown_key(key).as_deref());
        // Boxed too, so that this method's own box is small for both: inline, a fair
        // acquisition paid a box the plain wait's size (over 1 KiB, out of the allocator's
        // per-thread cache) around its own.
        Box::pin(crate::core::acquire::wait(&lock, options, options.wait_bound()).instrument(span))
            .await
    }

    /// Releases `key` if it still holds `token`, atomically (see `src/redis/strategy`).
    ///
    /// # Errors
    /// [`Error::NotHeld`] if the key is gone or holds another token; [`Error::Server`] with
    /// `WRONGTYPE` if the key is not a string; [`Error::Connection`].
    async fn release(&self, key: &str, token: &LockToken) -> Result<()> {
        self.release_token_checked(key, token, None).await
    }

    /// Resets the TTL of `key` to `ttl` if it still holds `token`, atomically.
    ///
    /// # Errors
    /// [`Error::NotHeld`] if the key is gone or holds another token; as [`Locker::release`](crate::Locker::release).
    async fn extend(&self, key: &str, token: &LockToken, ttl: Duration) -> Result<()> {
        validate_name(key)?;
        let ttl_ms = ttl_millis(ttl)?;
        let span = tracing::debug_span!("leasehold.extend", key = shown_key(key).as_deref(), token_hash = %token.redacted(), outcome = tracing::field::Empty);
        let extended = self
            .extend_raw(key, token.expose(), ttl_ms)
            .instrument(span.clone())
            .await;
        token_checked(&span, "extended", key, extended)
    }

    /// Reads what `key` holds, its remaining TTL and its fencing counter, in one round trip.
    ///
    /// # Errors
    /// [`Error::Server`] with `WRONGTYPE` if the key is not a string; [`Error::Connection`].
    async fn inspect(&self, key: &str) -> Result<LockState> {
        validate_name(key)?;
        let fence = fence_key(key);
        let (holder, pttl, counter): (Option<String>, i64, Option<u64>) = self
            .idempotent(Operation::Inspect, |mut conn| {
                let pipe = redis::pipe().get(key).pttl(key).get(&fence).clone();
                async move { pipe.query_async(&mut conn).await }
            })
            .await?;
        Ok(LockState::new(
            key.to_string(),
            holder,
            (pttl >= 0).then(|| Duration::from_millis(pttl as u64)),
            counter,
        ))
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
    async fn raise_fencing_counter(&self, key: &str, at_least: u64) -> Result<u64> {
        validate_name(key)?;
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
}

impl RedisClient {
    /// [`Driver::release`], with the acquisition's fencing number when the caller knows it (a
    /// guard does), for the history event a recording client's release appends.
    pub(super) async fn release_token_checked(
        &self,
        key: &str,
        token: &LockToken,
        fencing: Option<u64>,
    ) -> Result<()> {
        validate_name(key)?;
        let span = tracing::debug_span!("leasehold.release", key = shown_key(key).as_deref(), token_hash = %token.redacted(), outcome = tracing::field::Empty);
        let released = self
            .release_lock(key, token, fencing)
            .instrument(span.clone())
            .await;
        token_checked(&span, "released", key, released)
    }
}

/// A token-checked command's answer (`done`: whether it applied) as `Ok` or
/// [`Error::NotHeld`], recorded as the outcome of `span` (the client's own DEBUG span, which a
/// guard's release and extend log under, and the command ran in).
///
/// A plain function of the answer, not a wrapper future: an async wrapper around the command's
/// future held it twice over (as its argument and as what it awaited), tripling the size of
/// every release's future, which is copied into its box on each call.
fn token_checked(
    span: &tracing::Span,
    applied: &'static str,
    key: &str,
    done: Result<bool>,
) -> Result<()> {
    let done = done?;
    span.record("outcome", if done { applied } else { "not held" });
    match done {
        true => Ok(()),
        false => Err(Error::NotHeld {
            key: key.to_string(),
        }),
    }
}
