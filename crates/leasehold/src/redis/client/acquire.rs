//! Taking a lock: one attempt, or attempts until the wait bound, sleeping in between.

use crate::core::acquire::{Ask, Attempts, Wakeup, granted};
use crate::core::error::{Error, Result};
use crate::core::kind::{Backend, Taking};
use crate::core::options::LockOptions;
use crate::core::outcome::TryAcquire;
use crate::redis::slot::validate_name;

use super::RedisClient;

impl RedisClient {}

/// The plain lock on one key, as the acquisition engine drives it.
pub(super) struct PlainLock<'a> {
    client: &'a RedisClient,
    key: &'a str,
    ttl_ms: u64,
}

impl<'a> PlainLock<'a> {
    /// Checks the name and TTL (before any round trip).
    pub(super) fn new(
        client: &'a RedisClient,
        key: &'a str,
        options: &LockOptions,
    ) -> Result<Self> {
        validate_name(key)?;
        let ttl_ms = options.check_for(Backend::Redis, Taking::Lock)?;
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
            // Boxed: only a grant that came back expired gives its token back.
            async |token| {
                let _ = Box::pin(client.release_lock(key, token, None)).await;
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
        let subscription = notifier.subscribe_one(self.key).await?;
        Some(Box::new(subscription) as Box<dyn Wakeup>)
    }

    fn retries(&self, e: &Error) -> bool {
        self.client.retries_while_waiting(e)
    }
}

/// A Redis primitive's attempts (a semaphore's permits, a read-write lock's sides, an
/// election's terms), as [`OnReleaseChannel`] hands them to the acquisition engine: the
/// attempts, and the client whose release channel of [`Attempts::name`] wakes them.
pub(crate) trait ChannelAttempts: Attempts {
    /// The client the attempts go through.
    fn client(&self) -> &RedisClient;
}

/// A Redis primitive's wait: woken by every release on its name's channel (only one can take a
/// plain lock, which wakes one waiter per release instead; several can take permits or read),
/// riding out a topology in motion as the plain lock does.
pub(crate) struct OnReleaseChannel<P>(pub(crate) P);

impl<P: ChannelAttempts> Attempts for OnReleaseChannel<P> {
    fn name(&self) -> &str {
        Attempts::name(&self.0)
    }

    fn attempt(
        &self,
        options: &LockOptions,
        ask: Ask,
    ) -> impl Future<Output = Result<TryAcquire>> + Send {
        Attempts::attempt(&self.0, options, ask)
    }

    fn wakes(&self) -> bool {
        self.0.client().notifier().is_some()
    }

    async fn wakeups(&self) -> Option<Box<dyn Wakeup>> {
        let notifier = self.0.client().notifier()?;
        let subscription = notifier.subscribe(Attempts::name(&self.0)).await?;
        Some(Box::new(subscription) as Box<dyn Wakeup>)
    }

    fn retries(&self, e: &Error) -> bool {
        self.0.client().retries_while_waiting(e)
    }
}
