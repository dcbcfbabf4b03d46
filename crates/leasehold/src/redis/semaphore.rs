//! Counting semaphores: at most N holders of a name at once, each holding a permit that is a
//! lease of its own ([`Locker::semaphore`](crate::Locker::semaphore)).
//!
//! **Representation.** The permits of `name` are one sorted set, [`semaphore_permits_key`]: one
//! member per held permit (its random token), scored with the permit's expiry in the server's
//! milliseconds. A second key, [`semaphore_limit_key`], records N while permits are held, so a
//! client asking for the same name with another N is refused ([`Error::Conflict`]) instead of
//! silently admitting more holders. Both live in `name`'s hash slot.
//!
//! - **Acquire** (one script): drop the members whose expiry has passed (expired permits are
//!   reclaimed by the next acquirer), and if fewer than N remain, add ours with expiry
//!   `now + ttl`; otherwise reply with the time until the first permit expires.
//! - **Release** and **extend** (one script each) act only on our token's member, and only
//!   while its expiry has not passed: a permit that ran out is not ours to release or prolong,
//!   even if nobody reclaimed it yet. Both say [`Error::NotHeld`] otherwise.
//! - **Waiting**: a release publishes on `name`'s release channel; waiters retry when they
//!   hear it, when the first permit expires, or after their jittered backoff.
//! - **Auto-extension** goes through the client's renewer, batched with its other leases.
//!
//! **Safety claim.** At every instant of the server's clock, at most N members have an expiry in
//! the future, because the acquire script counts them (after dropping the rest) before adding
//! one, atomically; a holder's local validity is counted from before its request was sent,
//! minus the drift allowance, so while [`Lease::is_held`] says true its member is still counted.
//! Assumptions: as for locks (§1 of docs/guarantees.md): unique tokens, a server clock that
//! does not run more than 1% fast, and no outside writes to the set. Like a lock, a semaphore
//! cannot stop a *paused* holder from acting after its permit expired.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::future::BoxFuture;

use crate::core::acquire::{Ask, Attempts, Grant, OnAbandon, granted};
use crate::core::error::{Error, Operation, Result};
use crate::core::guard::HeldLock;
use crate::core::guard::{Lease, LockGuard, extended_by};
use crate::core::kind::Backend;
use crate::core::options::{LockOptions, ttl_millis};
use crate::core::outcome::TryAcquire;
use crate::core::sync::Semaphore;
use crate::core::sync::SemaphoreProvider;
use crate::core::token::LockToken;
use crate::redis::client::RedisClient;
use crate::redis::client::{ChannelAttempts, OnReleaseChannel};
use crate::redis::renewal::RenewTarget;
use crate::redis::scripts::{
    PERMIT_ACQUIRE_SCRIPT as ACQUIRE, PERMIT_COUNT_SCRIPT as COUNT, PERMIT_EXTEND_SCRIPT as EXTEND,
    PERMIT_RELEASE_SCRIPT as RELEASE,
};
use crate::redis::slot::slot_name;

/// The sorted set of `name`'s held permits: [`slot_name`]`(name) + ":permits"`.
pub fn semaphore_permits_key(name: &str) -> String {
    format!("{}:permits", slot_name(name))
}

/// The key that records `name`'s number of permits while any is held:
/// [`slot_name`]`(name) + ":limit"`.
pub fn semaphore_limit_key(name: &str) -> String {
    format!("{}:limit", slot_name(name))
}

pub use crate::redis::scripts::semaphore_scripts;

/// The Redis protocol of a [`Semaphore`] (see the module's documentation).
#[derive(Debug, Clone)]
pub(crate) struct RedisSemaphore {
    client: RedisClient,
    name: String,
    permits: u32,
    permits_key: String,
    limit_key: String,
}

impl RedisClient {
    /// A semaphore of `permits` permits on `name` (no round trip). Every client of `name` must
    /// use the same number: while permits are held, another number is refused
    /// ([`Error::Conflict`]).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for an empty or over-long name, or `permits` outside
    /// 1 ..= [`MAX_PERMITS`](crate::MAX_PERMITS).
    pub(crate) fn new_semaphore(&self, name: &str, permits: u32) -> Result<Semaphore> {
        let redis = RedisSemaphore {
            client: self.clone(),
            name: name.to_string(),
            permits,
            permits_key: semaphore_permits_key(name),
            limit_key: semaphore_limit_key(name),
        };
        Ok(Semaphore::new(Backend::Redis, name, permits, redis))
    }
}

impl RedisSemaphore {
    async fn attempt(&self, token: &LockToken, ttl_ms: u64) -> Result<Grant<()>> {
        // An outcome we never learn (dropped future, lost reply) gives the permit back, so it
        // does not count against the semaphore for a whole TTL.
        let mut cleanup = OnAbandon::new("semaphore permit", || {
            let (semaphore, token) = (self.clone(), token.clone());
            async move {
                let _ = semaphore.release_raw(token.expose()).await;
            }
        });
        let mut inv = ACQUIRE.key(&self.permits_key);
        inv.key(&self.limit_key)
            .arg(token.expose())
            .arg(ttl_ms)
            .arg(self.permits);
        let mut conn = self.client.conn();
        let result = inv
            .invoke_async(&mut conn)
            .await
            .and_then(crate::redis::error::int_pair);
        match result {
            Ok((ok, n)) => {
                cleanup.disarm();
                Ok(if ok == 1 {
                    Grant::Taken(())
                } else {
                    Grant::Busy {
                        remaining: (n >= 0).then(|| Duration::from_millis(n as u64)),
                    }
                })
            }
            Err(e) if e.code() == Some("LEASEHOLD_PERMITS") => {
                cleanup.disarm();
                let theirs = e.detail().unwrap_or("another number").trim().to_string();
                Err(Error::Conflict {
                    key: self.name.clone(),
                    detail: format!(
                        "the semaphore is held with {theirs} permits; this client asked for {}",
                        self.permits
                    ),
                })
            }
            Err(e) => {
                let err = Error::from_redis(Operation::Acquire, e);
                if !err.is_ambiguous() {
                    cleanup.disarm();
                }
                Err(err)
            }
        }
    }

    fn guard(&self, token: LockToken, started: Instant, options: &LockOptions) -> LockGuard {
        let lease = Lease::new(&self.name, token, None, started, options.ttl());
        self.client.guard_renewing(
            lease,
            started,
            options,
            Arc::new(PermitHeld(self.clone())),
            RenewTarget::Permit(self.permits_key.clone()),
        )
    }

    async fn release_raw(&self, token: &str) -> Result<bool> {
        release_member(&self.client, &self.permits_key, &self.name, token).await
    }
}

/// Removes `token`'s member from the expiring set `set` (a semaphore's permits, a read-write
/// lock's readers) and announces it on `name`'s release channel. True if it was held and
/// unexpired.
pub(crate) async fn release_member(
    client: &RedisClient,
    set: &str,
    name: &str,
    token: &str,
) -> Result<bool> {
    let (channel, publish) = client.release_notice(name);
    let limit = crate::redis::slot::permits_limit_key(set);
    let released: i64 = client
        .idempotent(Operation::Release, |mut conn| {
            let mut inv = RELEASE.key(set);
            inv.key(&limit).arg(token).arg(&channel).arg(publish);
            async move { inv.invoke_async(&mut conn).await }
        })
        .await?;
    Ok(released == 1)
}

/// The unexpired members of the expiring set `set`.
pub(crate) async fn count_members(client: &RedisClient, set: &str) -> Result<u32> {
    client
        .idempotent(Operation::Inspect, |mut conn| {
            let inv = COUNT.key(set);
            async move { inv.invoke_async(&mut conn).await }
        })
        .await
}

/// Resets `token`'s member of the expiring set `set` to `ttl` from now, if it is there and
/// unexpired.
pub(crate) async fn extend_member(
    client: &RedisClient,
    set: &str,
    token: &LockToken,
    ttl: Duration,
) -> Result<bool> {
    let ttl_ms = ttl_millis(ttl)?;
    let limit = crate::redis::slot::permits_limit_key(set);
    let extended: i64 = client
        .idempotent(Operation::Extend, |mut conn| {
            let mut inv = EXTEND.key(set);
            inv.key(&limit).arg(token.expose()).arg(ttl_ms);
            async move { inv.invoke_async(&mut conn).await }
        })
        .await?;
    Ok(extended == 1)
}

/// A held permit, as its guard sees it.
#[derive(Debug)]
struct PermitHeld(RedisSemaphore);

impl HeldLock for PermitHeld {
    fn release<'a>(&'a self, lease: &'a Lease) -> BoxFuture<'a, Result<()>> {
        Box::pin(self.0.release(lease.token()))
    }

    fn extend<'a>(&'a self, lease: &'a Lease, ttl: Duration) -> BoxFuture<'a, Result<Instant>> {
        Box::pin(extended_by(ttl, self.0.extend(lease.token(), ttl)))
    }
}

#[async_trait::async_trait]
impl crate::core::sync::SemaphoreProvider for RedisSemaphore {
    /// One attempt to take a permit, without waiting. Busy (all N held) is an outcome, with
    /// the time until the first held permit expires.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a bad TTL; [`Error::Unsupported`] with fencing, fair mode
    /// or `replica_ack`; [`Error::Conflict`] when the name's holders use another number of
    /// permits; [`Error::ExpiredOnArrival`]; connection and server errors.
    async fn try_acquire(&self, options: &LockOptions) -> Result<TryAcquire> {
        let ttl_ms = options.ttl_millis()?;
        PermitAttempts {
            semaphore: self,
            ttl_ms,
        }
        .attempt(options, Ask::ONCE)
        .await
    }

    /// Takes a permit through the acquisition engine, until `options.wait_bound()` (one attempt
    /// without one): woken by a release's notification, when the first held permit expires, or
    /// after the jittered backoff, whichever comes first. Each attempt has a fresh token.
    ///
    /// # Errors
    /// [`Error::NotAcquired`] if every permit stayed held until the deadline; otherwise as
    /// [`Semaphore::try_acquire`].
    async fn acquire(&self, options: &LockOptions) -> Result<LockGuard> {
        let ttl_ms = options.ttl_millis()?;
        let permits = OnReleaseChannel(PermitAttempts {
            semaphore: self,
            ttl_ms,
        });
        crate::core::acquire::wait(&permits, options, options.wait_bound()).await
    }

    /// Releases the permit that `token` holds (a guard does this by itself; this is for a token
    /// received from elsewhere).
    ///
    /// # Errors
    /// [`Error::NotHeld`] if `token` holds no unexpired permit of this semaphore.
    async fn release(&self, token: &LockToken) -> Result<()> {
        if self.release_raw(token.expose()).await? {
            Ok(())
        } else {
            Err(Error::NotHeld {
                key: self.name.clone(),
            })
        }
    }

    /// Resets the permit that `token` holds to `ttl` from now.
    ///
    /// # Errors
    /// [`Error::NotHeld`] if `token` holds no unexpired permit; [`Error::InvalidArgument`] for
    /// a bad TTL.
    async fn extend(&self, token: &LockToken, ttl: Duration) -> Result<()> {
        if extend_member(&self.client, &self.permits_key, token, ttl).await? {
            Ok(())
        } else {
            Err(Error::NotHeld {
                key: self.name.clone(),
            })
        }
    }

    /// How many permits are held (unexpired) right now.
    ///
    /// # Errors
    /// Connection and server errors.
    async fn holders(&self) -> Result<u32> {
        count_members(&self.client, &self.permits_key).await
    }
}

/// One semaphore's attempts, for the acquisition engine.
struct PermitAttempts<'a> {
    semaphore: &'a RedisSemaphore,
    ttl_ms: u64,
}

impl ChannelAttempts for PermitAttempts<'_> {
    fn client(&self) -> &RedisClient {
        &self.semaphore.client
    }
}

impl Attempts for PermitAttempts<'_> {
    fn name(&self) -> &str {
        &self.semaphore.name
    }

    /// The acquire script with a fresh token; a permit granted too late is given back
    /// ([`granted`]).
    async fn attempt(&self, options: &LockOptions, _: Ask) -> Result<TryAcquire> {
        let (semaphore, ttl_ms) = (self.semaphore, self.ttl_ms);
        granted(
            &semaphore.name,
            options,
            options.new_token(),
            async move |token| semaphore.attempt(token, ttl_ms).await,
            async |token| {
                let _ = semaphore.release_raw(token.expose()).await;
            },
            |token, (), started| semaphore.guard(token, started, options),
        )
        .await
    }
}
