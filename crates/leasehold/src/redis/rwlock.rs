//! Read-write locks: many readers or one writer, and writers are not starved by a stream of
//! readers ([`Locker::rwlock`](crate::Locker::rwlock)).
//!
//! **Representation** (all in `name`'s hash slot):
//! - the **writer** holds the key `name` itself, exactly like a plain lock (`SET NX PX`, its
//!   token), so the writer's release, extend, auto-extension, fencing and `inspect` are a plain
//!   lock's, and a plain lock on `name` excludes readers too;
//! - the **readers** are a sorted set, [`rwlock_readers_key`]: one member per reader (its
//!   token), scored with its expiry in the server's milliseconds, like a semaphore's permits;
//! - a **waiting writer** sets [`rwlock_writer_waiting_key`] to its token, refreshed at each
//!   of its attempts (at least every third of [`writer_wait_ttl`]).
//!
//! **Scripts.** A read attempt succeeds only if there is no writer *and no waiting writer*; it
//! drops expired readers and adds itself with expiry `now + ttl`. A write attempt succeeds only
//! if there is no writer, no other waiting writer, and no unexpired reader; otherwise, when it
//! waits, it marks itself as the waiting writer. Readers release and extend like semaphore
//! permits (only their own unexpired member); every release announces itself on `name`'s
//! release channel, which waiting readers and writers listen to.
//!
//! **Safety claim.** At every instant of the server's clock, either the writer key exists and no
//! reader's expiry is in the future, or there is no writer: a write attempt takes the key only
//! after checking (atomically) that every reader expired or left, and a read attempt joins only
//! while the key is absent. A holder's local validity is counted from before its request was
//! sent, minus the drift allowance, so no writer's valid lease overlaps another valid lease.
//! **No starvation of writers**: once a writer waits, no new reader gets in (until its mark
//! expires, if it vanished), so the readers drain within their TTL. Assumptions: those of locks
//! (docs/guarantees.md §1), and every client of `name` uses this type (a plain lock on `name`
//! counts as a writer; a plain lock holder ignores readers).

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::future::BoxFuture;

use crate::core::acquire::{Ask, Attempts, Grant, OnAbandon, granted};
use crate::core::driver::Driver;
use crate::core::error::{Error, Operation, Result};
use crate::core::guard::HeldLock;
use crate::core::guard::{Lease, LockGuard, extended_by};
use crate::core::kind::Backend;
use crate::core::options::LockOptions;
use crate::core::outcome::TryAcquire;
use crate::core::sync::RwLock;
use crate::core::sync::RwLockProvider as _;
use crate::core::sync::Side;
use crate::core::token::LockToken;
use crate::redis::client::{ChannelAttempts, OnReleaseChannel};
use crate::redis::client::{RedisClient, script_grant};
use crate::redis::renewal::RenewTarget;
use crate::redis::scripts::{
    READ_ACQUIRE_SCRIPT as READ_ACQUIRE, WRITE_ACQUIRE_SCRIPT as WRITE_ACQUIRE,
    WRITE_LEAVE_SCRIPT as WRITE_LEAVE,
};
use crate::redis::semaphore::{extend_member, release_member};
use crate::redis::slot::{fence_key, slot_name};

/// The sorted set of `name`'s readers: [`slot_name`]`(name) + ":readers"`.
pub fn rwlock_readers_key(name: &str) -> String {
    format!("{}:readers", slot_name(name))
}

/// The waiting writer's mark: [`slot_name`]`(name) + ":writer-waiting"`.
pub fn rwlock_writer_waiting_key(name: &str) -> String {
    format!("{}:writer-waiting", slot_name(name))
}

/// How long a waiting writer's mark keeps new readers out without a refresh: the TTL, within
/// 1 s ..= 10 s. A writer that vanished while waiting blocks new readers at most this long.
pub fn writer_wait_ttl(ttl: Duration) -> Duration {
    ttl.clamp(Duration::from_secs(1), Duration::from_secs(10))
}

/// The Redis protocol of an [`RwLock`] (see the module's documentation).
#[derive(Debug, Clone)]
pub(crate) struct RedisRwLock {
    client: RedisClient,
    name: String,
    readers: String,
    waiting: String,
}

impl RedisClient {
    /// A read-write lock on `name` (no round trip).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for an empty or over-long name.
    pub(crate) fn new_rwlock(&self, name: &str) -> Result<RwLock> {
        let redis = RedisRwLock {
            client: self.clone(),
            name: name.to_string(),
            readers: rwlock_readers_key(name),
            waiting: rwlock_writer_waiting_key(name),
        };
        Ok(RwLock::new(Backend::Redis, name, redis))
    }
}

impl RedisRwLock {
    async fn attempt(
        &self,
        side: Side,
        token: &LockToken,
        options: &LockOptions,
        waiting: bool,
    ) -> Result<Grant<u64>> {
        let ttl_ms = options.ttl_millis()?;
        // An outcome we never learn (dropped future, lost reply) is given back.
        let mut cleanup = OnAbandon::new("read-write lock attempt", || {
            let (lock, token) = (self.clone(), token.clone());
            async move { lock.give_back(side, &token).await }
        });
        let mut conn = self.client.conn();
        let reply = match side {
            Side::Read => {
                let mut inv = READ_ACQUIRE.key(&self.readers);
                inv.key(&self.name)
                    .key(&self.waiting)
                    .arg(token.expose())
                    .arg(ttl_ms);
                inv.invoke_async(&mut conn).await
            }
            Side::Write => {
                let mut inv = WRITE_ACQUIRE.key(&self.readers);
                inv.key(&self.name)
                    .key(&self.waiting)
                    .key(fence_key(&self.name))
                    .arg(token.expose())
                    .arg(ttl_ms)
                    .arg(writer_wait_ttl(options.ttl()).as_millis() as u64)
                    .arg(if waiting { 1 } else { 0 })
                    .arg(if options.fencing_enabled() { 1 } else { 0 });
                inv.invoke_async(&mut conn).await
            }
        };
        match reply.and_then(crate::redis::error::int_pair) {
            Ok(r) => {
                cleanup.disarm();
                Ok(script_grant(r))
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

    /// Gives back what `token` may hold: its reader entry, its writer key, its waiting mark.
    async fn give_back(&self, side: Side, token: &LockToken) {
        match side {
            Side::Read => {
                let _ =
                    release_member(&self.client, &self.readers, &self.name, token.expose()).await;
            }
            Side::Write => {
                let _ = self.leave_waiting(token).await;
                let _ = self.client.release_raw(&self.name, token.expose()).await;
            }
        }
    }

    async fn leave_waiting(&self, token: &LockToken) -> Result<i64> {
        self.client
            .idempotent(Operation::Release, |mut conn| {
                let mut inv = WRITE_LEAVE.key(&self.waiting);
                inv.arg(token.expose());
                async move { inv.invoke_async(&mut conn).await }
            })
            .await
    }

    fn guard(
        &self,
        side: Side,
        token: LockToken,
        fencing: u64,
        started: Instant,
        options: &LockOptions,
    ) -> LockGuard {
        match side {
            // The writer's lock is a plain lock on `name`.
            Side::Write => self.client.guard(
                &self.name,
                token,
                options.fencing_enabled().then_some(fencing),
                started,
                options,
            ),
            Side::Read => {
                let lease = Lease::new(&self.name, token, None, started, options.ttl());
                self.client.guard_renewing(
                    lease,
                    started,
                    options,
                    Arc::new(ReaderHeld(self.clone())),
                    RenewTarget::Permit(self.readers.clone()),
                )
            }
        }
    }

    async fn try_side(&self, side: Side, options: &LockOptions) -> Result<TryAcquire> {
        options.ttl_millis()?;
        SideAttempts {
            lock: self,
            side,
            writer: None,
        }
        .attempt(options, Ask::ONCE)
        .await
    }

    /// Waits for `side` through the acquisition engine. A waiting writer keeps one token for
    /// its whole wait (its waiting mark, which keeps new readers out, is that token), refreshes
    /// the mark in time, and takes it down when it gives up (at once at the deadline, in the
    /// background if the wait is dropped).
    async fn wait_side(&self, side: Side, options: &LockOptions) -> Result<LockGuard> {
        options.ttl_millis()?;
        let writer =
            (side == Side::Write && options.wait_bound().is_some()).then(|| options.new_token());
        // An abandoned wait (dropped future, error) takes its mark down, so readers are not kept
        // out until the mark expires.
        let mut leave = writer.as_ref().map(|token| {
            OnAbandon::new("waiting writer's mark", move || {
                let (lock, token) = (self.clone(), token.clone());
                async move {
                    let _ = lock.leave_waiting(&token).await;
                }
            })
        });
        let attempts = OnReleaseChannel(SideAttempts {
            lock: self,
            side,
            writer: writer.as_ref(),
        });
        let result = crate::core::acquire::wait(&attempts, options, options.wait_bound()).await;
        if let (Some(leave), Some(token)) = (leave.as_mut(), writer.as_ref()) {
            match &result {
                Ok(_) => leave.disarm(),
                Err(Error::NotAcquired { .. }) => {
                    leave.disarm();
                    // Now, not in the background: readers waiting behind our mark get in at
                    // once.
                    let _ = self.leave_waiting(token).await;
                }
                // Any other failure: taken down in the background, as for a dropped wait.
                Err(_) => {}
            }
        }
        result
    }
}

/// A read lease, as its guard sees it.
#[derive(Debug)]
struct ReaderHeld(RedisRwLock);

impl HeldLock for ReaderHeld {
    fn release<'a>(&'a self, lease: &'a Lease) -> BoxFuture<'a, Result<()>> {
        Box::pin(self.0.release(Side::Read, lease.token()))
    }

    fn extend<'a>(&'a self, lease: &'a Lease, ttl: Duration) -> BoxFuture<'a, Result<Instant>> {
        Box::pin(extended_by(
            ttl,
            self.0.extend(Side::Read, lease.token(), ttl),
        ))
    }
}

#[async_trait::async_trait]
impl crate::core::sync::RwLockProvider for RedisRwLock {
    /// One attempt: a reader succeeds while no writer holds or waits for the lock; a writer
    /// with no writer, no waiting writer before it, and no reader left (with fencing, it gets
    /// the next number of `name`'s counter).
    async fn try_take(&self, side: Side, options: &LockOptions) -> Result<TryAcquire> {
        self.try_side(side, options).await
    }

    /// Waits until `options.wait_bound()`: woken by releases, or when the writer's lease (or a
    /// waiting writer's mark) runs out, or after the backoff. A waiting writer keeps new
    /// readers out, so the current ones drain: a stream of readers cannot starve it.
    async fn take(&self, side: Side, options: &LockOptions) -> Result<LockGuard> {
        self.wait_side(side, options).await
    }

    /// A reader's lease is its member of the readers' set; the writer's is the plain
    /// token-checked release of `name`.
    async fn release(&self, side: Side, token: &LockToken) -> Result<()> {
        match side {
            Side::Read => {
                let done =
                    release_member(&self.client, &self.readers, &self.name, token.expose()).await?;
                self.held_or_not(done)
            }
            Side::Write => self.client.release(&self.name, token).await,
        }
    }

    /// As [`RwLockProvider::release`](crate::core::sync::RwLockProvider::release), resetting
    /// the lease to `ttl` from now.
    async fn extend(&self, side: Side, token: &LockToken, ttl: Duration) -> Result<()> {
        match side {
            Side::Read => {
                let done = extend_member(&self.client, &self.readers, token, ttl).await?;
                self.held_or_not(done)
            }
            Side::Write => self.client.extend(&self.name, token, ttl).await,
        }
    }

    /// How many readers hold the lock (unexpired) right now.
    async fn readers(&self) -> Result<u32> {
        crate::redis::semaphore::count_members(&self.client, &self.readers).await
    }
}

impl RedisRwLock {
    /// A reader's token-checked command's answer: done, or [`Error::NotHeld`].
    fn held_or_not(&self, done: bool) -> Result<()> {
        match done {
            true => Ok(()),
            false => Err(Error::NotHeld {
                key: self.name.clone(),
            }),
        }
    }
}

/// One side's attempts, for the acquisition engine.
struct SideAttempts<'a> {
    lock: &'a RedisRwLock,
    side: Side,
    /// A waiting writer's token, the same for every attempt (its waiting mark); `None`: a
    /// fresh token per attempt, and no mark.
    writer: Option<&'a LockToken>,
}

impl ChannelAttempts for SideAttempts<'_> {
    fn client(&self) -> &RedisClient {
        &self.lock.client
    }
}

impl Attempts for SideAttempts<'_> {
    fn name(&self) -> &str {
        &self.lock.name
    }

    /// The side's script; a grant that came too late is given back ([`granted`]; a writer
    /// also takes its mark down: the next attempt puts it up again). A waiting writer's busy answer
    /// is capped at a third of its mark's TTL, so that the next attempt refreshes the mark in
    /// time.
    async fn attempt(&self, options: &LockOptions, _: Ask) -> Result<TryAcquire> {
        let (lock, side, writer) = (self.lock, self.side, self.writer);
        let token = writer.cloned().unwrap_or_else(|| options.new_token());
        let attempt = granted(
            &lock.name,
            options,
            token,
            async |token| lock.attempt(side, token, options, writer.is_some()).await,
            async |token| lock.give_back(side, token).await,
            |token, fencing, started| lock.guard(side, token, fencing, started, options),
        )
        .await?;
        Ok(match attempt {
            TryAcquire::Busy { remaining } if writer.is_some() => {
                let refresh = writer_wait_ttl(options.ttl()) / 3;
                TryAcquire::Busy {
                    remaining: Some(remaining.map_or(refresh, |r| r.min(refresh))),
                }
            }
            other => other,
        })
    }
}
