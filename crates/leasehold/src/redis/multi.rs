//! Multi-resource locks: all of several keys, or none ([`RedisClient::multi_lock`]).
//!
//! Each key is held as a plain lock (`key = token`, with a TTL), all with one token, so every
//! key's state reads like a lock's (`inspect`, the CLI) and a plain lock on any of them excludes
//! the multi-lock.
//!
//! - **One slot** (every key on a single server, or keys sharing one hash slot on a cluster,
//!   e.g. under one hash tag): one script checks that no key exists and sets them all, or
//!   sets none. Release, extend and auto-extension are one script over all the keys.
//! - **Several slots** (a cluster): the keys are grouped by slot and the groups are taken in a
//!   global order (by slot, then key), each group atomically; if a group is busy, the groups
//!   already taken are released (token-checked) and the attempt reports busy.
//!
//! **Safety claim.** The multi-lock holds every key or, after a failed attempt, none of them: a
//! group is taken atomically, and a failed attempt gives back what it took before returning.
//! Each key is then a plain lock (docs/guarantees.md §1): no other holder gets it while the
//! lease is valid. **No deadlock**: an attempt never waits while it holds anything (it takes,
//! or rolls back and waits with nothing held), so two callers taking `{a, b}` and `{b, a}`
//! cannot wait on each other; the common order makes them contend on the same first group, and
//! the jittered backoff breaks ties. Limits: fencing is refused (several keys, one number would
//! mean nothing per key), and auto-extension needs the keys in one slot (otherwise refused:
//! renewing several groups could not extend them all or none).

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::future::BoxFuture;

use crate::core::acquire::{Ask, Attempts, Grant, OnAbandon, Wakeup, granted};
use crate::core::error::{Error, Operation, Result};
use crate::core::guard::HeldLock;
use crate::core::guard::{Lease, LockGuard, extended_by};
use crate::core::kind::{Backend, Taking};
use crate::core::options::{LockOptions, ttl_millis};
use crate::core::outcome::TryAcquire;
use crate::core::token::LockToken;
use crate::redis::client::RedisClient;
use crate::redis::renewal::RenewTarget;
use crate::redis::scripts::{
    MULTI_ACQUIRE_SCRIPT as ACQUIRE, MULTI_EXTEND_SCRIPT as EXTEND, MULTI_RELEASE_SCRIPT as RELEASE,
};
use crate::redis::slot::validate_name;
use crate::redis::slot::{key_slot, release_channel};
use crate::redis::waiting::Subscription;

/// The most keys one multi-lock may take.
pub const MAX_KEYS: usize = 1000;

/// A lock over several keys at once; made by [`RedisClient::multi_lock`], cheap to clone.
///
/// ```no_run
/// use std::time::Duration;
/// use leasehold::{LockOptions, Locker};
///
/// # async fn example(locks: Locker) -> Result<(), leasehold::Error> {
/// // Both accounts or neither; another caller taking [to, from] cannot deadlock with us.
/// let redis = locks.as_redis().expect("multi-key locks are Redis's");
/// let transfer = redis.multi_lock(&["account:17", "account:42"])?;
/// let opts = LockOptions::new(Duration::from_secs(10)).wait(Duration::from_secs(5));
/// transfer.with_lock(&opts, |_lease| async { /* move the money */ }).await?;
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct MultiLock {
    client: RedisClient,
    name: String,
    keys: Vec<String>,
    /// The keys by hash slot, in the global order (one group off a cluster).
    groups: Vec<Vec<String>>,
}

impl RedisClient {
    /// A lock over all of `keys` (no round trip). Their order does not matter: they are taken
    /// in one global order.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for no keys, more than [`MAX_MULTI_KEYS`](crate::redis::MAX_MULTI_KEYS), a bad key, or a key
    /// named twice.
    pub fn multi_lock<S: AsRef<str>>(&self, keys: &[S]) -> Result<MultiLock> {
        if keys.is_empty() {
            return Err(Error::invalid(
                "keys",
                "a multi-lock needs at least one key",
            ));
        }
        if keys.len() > MAX_KEYS {
            return Err(Error::invalid(
                "keys",
                format!("{} keys is more than the limit of {MAX_KEYS}", keys.len()),
            ));
        }
        let mut sorted: Vec<(u16, String)> = Vec::with_capacity(keys.len());
        for k in keys {
            validate_name(k.as_ref())?;
            sorted.push((key_slot(k.as_ref()), k.as_ref().to_string()));
        }
        sorted.sort();
        if let Some(w) = sorted.windows(2).find(|w| w[0].1 == w[1].1) {
            return Err(Error::invalid(
                "keys",
                format!("{:?} is named twice", w[0].1),
            ));
        }
        let cluster = self.connection().is_cluster();
        let mut groups: Vec<Vec<String>> = Vec::new();
        let mut last_slot = None;
        for (slot, key) in &sorted {
            match groups.last_mut() {
                Some(g) if !cluster || last_slot == Some(*slot) => g.push(key.clone()),
                _ => groups.push(vec![key.clone()]),
            }
            last_slot = Some(*slot);
        }
        let keys: Vec<String> = sorted.into_iter().map(|(_, k)| k).collect();
        Ok(MultiLock {
            client: self.clone(),
            name: keys.join(","),
            keys,
            groups,
        })
    }
}

impl MultiLock {
    /// The keys, in the order they are taken.
    pub fn keys(&self) -> &[String] {
        &self.keys
    }

    fn check(&self, options: &LockOptions) -> Result<u64> {
        let ttl_ms = options.check_for(Backend::Redis, Taking::Keys)?;
        if options.auto_extend_enabled() && self.groups.len() > 1 {
            return Err(Error::Unsupported {
                backend: "redis",
                what: "auto-extension on a multi-key lock with keys in several hash slots (put \
                       them under one hash tag)"
                    .into(),
            });
        }
        Ok(ttl_ms)
    }

    async fn release_groups(&self, groups: &[Vec<String>], token: &str) -> Result<usize> {
        // No command, no notice: this client does not notify waiters.
        let publish = match self.client.notifies_waiters() {
            true => self.client.publish_command(),
            false => "",
        };
        let mut released = 0;
        for group in groups {
            let n: i64 = self
                .client
                .idempotent(Operation::Release, |mut conn| {
                    let mut inv = RELEASE.prepare_invoke();
                    for k in group {
                        inv.key(k);
                    }
                    inv.arg(token).arg(publish);
                    for k in group {
                        inv.arg(release_channel(k));
                    }
                    async move { inv.invoke_async(&mut conn).await }
                })
                .await?;
            released += n as usize;
        }
        Ok(released)
    }

    async fn attempt(&self, token: &LockToken, ttl_ms: u64) -> Result<Grant<()>> {
        // If this future is dropped mid-way, give back whatever the token may hold.
        let mut cleanup = OnAbandon::new("multi-lock attempt", || {
            let (lock, token) = (self.clone(), token.clone());
            async move {
                let _ = lock.release_groups(&lock.groups, token.expose()).await;
            }
        });
        let outcome = self.attempt_groups(token, ttl_ms).await;
        cleanup.disarm();
        outcome
    }

    async fn attempt_groups(&self, token: &LockToken, ttl_ms: u64) -> Result<Grant<()>> {
        for (i, group) in self.groups.iter().enumerate() {
            let mut inv = ACQUIRE.prepare_invoke();
            for k in group {
                inv.key(k);
            }
            inv.arg(token.expose()).arg(ttl_ms);
            let mut conn = self.client.conn();
            let reply = inv
                .invoke_async(&mut conn)
                .await
                .and_then(crate::redis::error::int_array::<3>);
            match reply {
                Ok([1, _, _]) => {}
                Ok([_, _, pttl]) => {
                    // Give back what this attempt took: nothing is held while we wait.
                    self.release_groups(&self.groups[..i], token.expose())
                        .await?;
                    return Ok(Grant::Busy {
                        remaining: (pttl >= 0).then(|| Duration::from_millis(pttl as u64)),
                    });
                }
                Err(e) => {
                    // This group may have been taken (an ambiguous failure) and earlier ones
                    // were: give back everything the token may hold.
                    let _ = self
                        .release_groups(&self.groups[..=i], token.expose())
                        .await;
                    return Err(Error::from_redis(Operation::Acquire, e));
                }
            }
        }
        Ok(Grant::Taken(()))
    }

    fn guard(&self, token: LockToken, started: Instant, options: &LockOptions) -> LockGuard {
        let lease = Lease::new(&self.name, token, None, started, options.ttl());
        let target = RenewTarget::Keys(self.groups.first().cloned().unwrap_or_default());
        self.client.guard_renewing(
            lease,
            started,
            options,
            Arc::new(MultiHeld(self.clone())),
            target,
        )
    }

    /// One attempt to take every key; busy (with the busy key's remaining TTL) if any is held.
    /// The guard's key is the keys joined with `,`.
    ///
    /// # Errors
    /// [`Error::Unsupported`] with fencing, fair mode, `replica_ack`, or auto-extension over
    /// several hash slots; as [`Locker::try_acquire`](crate::Locker::try_acquire).
    pub async fn try_acquire(&self, options: &LockOptions) -> Result<TryAcquire> {
        let ttl_ms = self.check(options)?;
        KeysAttempts {
            multi: self,
            ttl_ms,
        }
        .attempt(options, Ask::ONCE)
        .await
    }

    /// Takes every key through the acquisition engine, retrying until `options.wait_bound()`:
    /// woken by a release of any of them, when the busy key's lease runs out, or after the
    /// jittered backoff. Nothing is held between attempts.
    ///
    /// # Errors
    /// [`Error::NotAcquired`] at the deadline; as [`MultiLock::try_acquire`].
    pub async fn acquire(&self, options: &LockOptions) -> Result<LockGuard> {
        let ttl_ms = self.check(options)?;
        let keys = KeysAttempts {
            multi: self,
            ttl_ms,
        };
        crate::core::acquire::wait(&keys, options, options.wait_bound()).await
    }

    /// [`MultiLock::acquire`], run `work`, release every key whatever happens (as
    /// [`Locker::with_lock`](crate::Locker::with_lock)).
    ///
    /// # Errors
    /// As [`MultiLock::acquire`]; [`Error::LockLost`]; [`Error::NotHeld`].
    pub async fn with_lock<T, F, Fut>(&self, options: &LockOptions, work: F) -> Result<T>
    where
        F: FnOnce(Lease) -> Fut,
        Fut: std::future::Future<Output = T>,
    {
        let guard = self.acquire(options).await?;
        crate::core::guard::run_with_lock(guard, options, work).await
    }

    /// Releases every key that `token` holds.
    ///
    /// # Errors
    /// [`Error::NotHeld`] if any key no longer held it (the others are released all the same).
    pub async fn release(&self, token: &LockToken) -> Result<()> {
        let released = self.release_groups(&self.groups, token.expose()).await?;
        if released == self.keys.len() {
            Ok(())
        } else {
            Err(Error::NotHeld {
                key: self.name.clone(),
            })
        }
    }

    /// Resets every key to `ttl` if `token` holds them all (per hash slot: one script each).
    ///
    /// # Errors
    /// [`Error::NotHeld`] if a key no longer holds `token`.
    pub async fn extend(&self, token: &LockToken, ttl: Duration) -> Result<()> {
        let ttl_ms = ttl_millis(ttl)?;
        for group in &self.groups {
            let extended: i64 = self
                .client
                .idempotent(Operation::Extend, |mut conn| {
                    let mut inv = EXTEND.prepare_invoke();
                    for k in group {
                        inv.key(k);
                    }
                    inv.arg(token.expose()).arg(ttl_ms);
                    async move { inv.invoke_async(&mut conn).await }
                })
                .await?;
            if extended != 1 {
                return Err(Error::NotHeld {
                    key: self.name.clone(),
                });
            }
        }
        Ok(())
    }
}

/// A held multi-lock, as its guard sees it.
#[derive(Debug)]
struct MultiHeld(MultiLock);

impl HeldLock for MultiHeld {
    fn release<'a>(&'a self, lease: &'a Lease) -> BoxFuture<'a, Result<()>> {
        Box::pin(self.0.release(lease.token()))
    }

    fn extend<'a>(&'a self, lease: &'a Lease, ttl: Duration) -> BoxFuture<'a, Result<Instant>> {
        Box::pin(extended_by(ttl, self.0.extend(lease.token(), ttl)))
    }
}

/// A multi-lock's attempts, for the acquisition engine.
struct KeysAttempts<'a> {
    multi: &'a MultiLock,
    ttl_ms: u64,
}

impl Attempts for KeysAttempts<'_> {
    fn name(&self) -> &str {
        &self.multi.name
    }

    /// Every key with a fresh token (all or none); a grant that came too late is given back,
    /// every key ([`granted`]).
    async fn attempt(&self, options: &LockOptions, _: Ask) -> Result<TryAcquire> {
        let (multi, ttl_ms) = (self.multi, self.ttl_ms);
        granted(
            &multi.name,
            options,
            options.new_token(),
            async move |token| multi.attempt(token, ttl_ms).await,
            async |token| {
                let _ = multi.release_groups(&multi.groups, token.expose()).await;
            },
            |token, (), started| multi.guard(token, started, options),
        )
        .await
    }

    fn wakes(&self) -> bool {
        self.multi.client.notifier().is_some()
    }

    /// Every key's release channel: a release of any of them wakes the waiter.
    async fn wakeups(&self) -> Option<Box<dyn Wakeup>> {
        let notifier = self.multi.client.notifier()?;
        let mut subscriptions = Vec::new();
        for k in &self.multi.keys {
            if let Some(s) = notifier.subscribe(k).await {
                subscriptions.push(s);
            }
        }
        (!subscriptions.is_empty()).then(|| Box::new(AnyKey(subscriptions)) as Box<dyn Wakeup>)
    }

    fn retries(&self, e: &Error) -> bool {
        self.multi.client.retries_while_waiting(e)
    }
}

/// The release channels of a multi-lock's keys, as one wake-up source.
struct AnyKey(Vec<Subscription>);

impl Wakeup for AnyKey {
    fn mark_seen(&mut self) {
        self.0.iter_mut().for_each(Subscription::mark_seen);
    }

    fn released(&mut self) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            futures_util::future::select_all(self.0.iter_mut().map(|s| Box::pin(s.released())))
                .await;
        })
    }
}

#[async_trait::async_trait]
impl crate::core::sync::Lockable for MultiLock {
    /// The multi-lock's name (its keys, as spans and errors show them).
    fn name(&self) -> &str {
        &self.name
    }

    async fn try_acquire(&self, options: &LockOptions) -> Result<TryAcquire> {
        MultiLock::try_acquire(self, options).await
    }

    async fn acquire(&self, options: &LockOptions) -> Result<LockGuard> {
        MultiLock::acquire(self, options).await
    }

    async fn release(&self, token: &LockToken) -> Result<()> {
        MultiLock::release(self, token).await
    }

    async fn extend(&self, token: &LockToken, ttl: Duration) -> Result<()> {
        MultiLock::extend(self, token, ttl).await
    }
}
