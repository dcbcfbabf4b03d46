//! [`RedisClient`]: connects, detects the server once, and acquires, releases, extends and
//! inspects locks.
//!
//! - `connect`: connecting, and detecting what the server offers;
//! - `driver`: the client as the [`Locker`](crate::Locker)'s driver: the lock API;
//! - `acquire`: the plain lock's attempts, as the acquisition engine drives them;
//! - `attempt`: the acquisition as it goes out (the command, `WAIT` for replicas, and the
//!   cleanup of an attempt whose outcome was never learned);
//! - `release`: the token-checked release and extend;
//! - `history_log`: the lock history as the locker appends and reads it;

mod acquire;
pub(crate) use acquire::{ChannelAttempts, OnReleaseChannel};
pub(crate) use attempt::plain_grant;
mod attempt;
mod connect;
mod driver;
mod history_log;
mod release;

/// The bound of every future boxed on a lock's every cycle (tests: see `release`'s
/// `boxed_sizes`).
#[cfg(test)]
pub(crate) use release::boxed_sizes::CACHED as BOXED_FUTURE_BOUND;

use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use futures_util::future::BoxFuture;

use crate::core::driver::Driver;
use crate::core::error::{Error, Result};
use crate::core::guard::HeldLock;
use crate::core::guard::{Lease, LockGuard, extended_by};
use crate::core::history::HistoryOptions;
use crate::core::options::LockOptions;
use crate::core::token::LockToken;
use crate::redis::calling_thread::{CallerSockets, RoutedConnection};
use crate::redis::connection::ClientConnection;
use crate::redis::renewal::{Registration, RenewTarget, RenewalStats, Renewer};
use crate::redis::server::ServerInfo;
use crate::redis::strategy::{ExtendStrategy, ReleaseStrategy};
use crate::redis::waiting::Notifier;

pub(crate) enum Attempt {
    Acquired { fencing: Option<u64> },
    Busy { remaining: Option<Duration> },
}

impl From<Attempt> for crate::core::acquire::Grant<Option<u64>> {
    fn from(attempt: Attempt) -> Self {
        match attempt {
            Attempt::Acquired { fencing } => Self::Taken(fencing),
            Attempt::Busy { remaining } => Self::Busy { remaining },
        }
    }
}

/// A script's `{1, n}` (taken, `n` the fencing number or term) or `{0, pttl}` (busy; `pttl`
/// the holder's remaining lease in ms, negative if unknown).
pub(crate) fn script_grant((ok, n): (i64, i64)) -> crate::core::acquire::Grant<u64> {
    use crate::core::acquire::Grant;
    if ok == 1 {
        Grant::Taken(n as u64)
    } else {
        Grant::Busy {
            remaining: (n >= 0).then(|| Duration::from_millis(n as u64)),
        }
    }
}

/// A lock client bound to one Redis or Valkey server.
///
/// Cheap to clone (all clones share one multiplexed connection and the capabilities detected when
/// it connected). Every lock operation is one round trip: acquire is one `SET NX PX` (or one
/// script with fencing or waiting), release one `DELEX`/`DELIFEQ`/`EVALSHA`, extend one
/// `SET ... IFEQ`/`EVALSHA`.
#[derive(Clone)]
pub struct RedisClient {
    inner: Arc<ClientInner>,
    /// Set in a [`Locker`](crate::Locker) that records history: the plain lock's acquire and
    /// release scripts append their events themselves (see `redis::history`).
    history: Option<HistoryOptions>,
}

struct ClientInner {
    conn: ClientConnection,
    /// Where this client's calling threads open sockets of their own (a standalone server
    /// opened by URL; `redis::calling_thread`).
    caller: Option<Arc<CallerSockets>>,
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

impl std::fmt::Debug for RedisClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisClient")
            .field("server", &self.inner.server)
            .field("release", &self.inner.release)
            .field("extend", &self.inner.extend)
            .finish()
    }
}

impl RedisClient {
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

    /// The connection this client's lock operations take: the calling thread's own socket
    /// inside a [`blocking_call`](crate::blocking_call), the shared connection otherwise
    /// (`redis::calling_thread`). The thread's sockets ride along only when it is inside one
    /// now: cloning their `Arc` for every command of every other thread cost a contended
    /// count up and down (the route is still checked when the command is handed over).
    pub(crate) fn conn(&self) -> RoutedConnection {
        let caller = match crate::core::calling_thread::in_blocking_call() {
            true => self.inner.caller.clone(),
            false => None,
        };
        RoutedConnection::new(self.inner.conn.clone(), caller)
    }

    /// Whether this thread's lock commands go out on its own socket now (inside a
    /// [`blocking_call`](crate::blocking_call), on a client with per-thread sockets): there a
    /// command is written, a system call, in its future's first poll, where the shared
    /// connection only queues it.
    pub(crate) fn on_calling_thread_socket(&self) -> bool {
        self.inner.caller.is_some() && crate::core::calling_thread::in_blocking_call()
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
        let held = RedisHeld(self.clone(), options.min_hold_bound().is_some());
        self.guard_for(lease, started, options, Arc::new(held))
    }

    /// This client, its plain locks' acquire and release scripts appending their history events
    /// as `options` say (a clone sharing the connection: the [`Locker`](crate::Locker) that
    /// records history drives it).
    pub(crate) fn recording(&self, options: HistoryOptions) -> RedisClient {
        RedisClient {
            inner: self.inner.clone(),
            history: Some(options),
        }
    }

    /// How a plain lock's scripts record its history: `None` when this client does not, or for
    /// a lock taken with `min_hold` (whose events its locker appends).
    pub(crate) fn records_lock(&self, min_hold: bool) -> Option<&HistoryOptions> {
        self.history.as_ref().filter(|_| !min_hold)
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

    /// What a release script needs to tell the waiters of `name`: the release channel (empty
    /// when this client does not notify) and the command that publishes on it (`SPUBLISH` in a
    /// cluster, where a channel lives on its key's shard).
    pub(crate) fn release_notice(&self, name: &str) -> (String, &'static str) {
        let channel = match self.inner.notify_waiters {
            true => crate::redis::slot::release_channel(name),
            false => String::new(),
        };
        (channel, self.publish_command())
    }

    /// [`release_notice`](Self::release_notice) for a release that deletes the plain lock key
    /// `key`: no channel (nothing published) where waiters track their keys, as the deletion
    /// itself wakes them.
    pub(crate) fn plain_release_notice(&self, key: &str) -> (String, &'static str) {
        match self.waiters_track() {
            true => (String::new(), self.publish_command()),
            false => self.release_notice(key),
        }
    }

    /// Once this client's release of the plain lock key `key` is on the wire: where waiters
    /// track their keys (so the release publishes nothing), wakes this client's own waiters of
    /// `key` at once, instead of after the key's invalidation and the read that confirms it
    /// ([`Notifier::released_here`]). Their attempts follow the release on the connection.
    pub(crate) fn released_here(&self, key: &str) {
        if let Some(notifier) = self.inner.notifier.as_ref().filter(|n| n.tracks()) {
            notifier.released_here(key);
        }
    }

    /// Whether this client's waiters track the keys they wait for (`CLIENT TRACKING`), so the
    /// plain lock's releases publish nothing: the server's invalidation of the key wakes them
    /// (`redis::waiting`). Decided at connect, where the notifier is made.
    fn waiters_track(&self) -> bool {
        self.inner.notifier.as_ref().is_some_and(Notifier::tracks)
    }

    /// Whether the plain lock's releases publish (see [`plain_release_notice`](Self::plain_release_notice)).
    pub(crate) fn publishes_plain_releases(&self) -> bool {
        self.inner.notify_waiters && !self.waiters_track()
    }

    /// `SPUBLISH` in a cluster, `PUBLISH` elsewhere.
    pub(crate) fn publish_command(&self) -> &'static str {
        match self.inner.conn.is_cluster() {
            true => "spublish",
            false => "publish",
        }
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

    /// Whether a waiting acquisition retries after `e` (see [`Locker::acquire`](crate::Locker::acquire)).
    pub(crate) fn retries_while_waiting(&self, e: &Error) -> bool {
        crate::redis::error::is_topology_in_motion(e)
            || (matches!(e, Error::Connection { .. })
                && matches!(
                    self.inner.conn,
                    ClientConnection::Cluster(_) | ClientConnection::Sentinel(_)
                ))
    }
}

/// A lock held on one Redis server (standalone, a cluster's master, a Sentinel's primary);
/// `true` if it was taken with [`min_hold`](LockOptions::min_hold) (its release then keeps it
/// until the minimum hold is over).
#[derive(Debug)]
struct RedisHeld(RedisClient, bool);

impl HeldLock for RedisHeld {
    fn release<'a>(&'a self, lease: &'a Lease) -> BoxFuture<'a, Result<()>> {
        match self.1 {
            true => Box::pin(self.0.release_min_hold(lease.key(), lease.token())),
            false => Box::pin(self.0.release_token_checked(
                lease.key(),
                lease.token(),
                lease.fencing_token(),
            )),
        }
    }

    fn records_history(&self) -> bool {
        self.0.records_lock(self.1).is_some()
    }

    fn extend<'a>(&'a self, lease: &'a Lease, ttl: Duration) -> BoxFuture<'a, Result<Instant>> {
        Box::pin(extended_by(
            ttl,
            self.0.extend(lease.key(), lease.token(), ttl),
        ))
    }
}

#[cfg(test)]
mod tests {
    use leasehold_harness::{Server, ServerOptions};

    use super::RedisClient;

    // A release channel that this client's waiters leave idle again and again (one waiter of
    // the key per contended acquisition) lingers in one task (`redis::waiting`). A task and a
    // 2 s timer per waiter leaving cost a contended cycle about 20 us of CPU, and the
    // cross-client fair handoff 20-35 us at p50.
    leasehold_harness::server_test!(async fn a_channel_left_idle_again_and_again_lingers_in_one_task(bin) {
        let server = Server::start(&bin, &ServerOptions::new()).unwrap();
        let client = RedisClient::connect(&server.url()).await.unwrap();
        let notifier = client.notifier().expect("a standalone client has notifications");
        // The first subscription opens the subscriber connection, and its leaving starts the
        // channel's lingering task.
        drop(notifier.subscribe("linger").await.expect("subscribed"));
        let metrics = tokio::runtime::Handle::current().metrics();
        let before = metrics.num_alive_tasks();
        for _ in 0..50 {
            drop(notifier.subscribe("linger").await.expect("subscribed"));
        }
        let added = metrics.num_alive_tasks().saturating_sub(before);
        // One more at most: the first task may have unsubscribed the channel meanwhile (had
        // this loop taken longer than the linger), and the next leaving started another.
        assert!(added <= 1, "{added} more tasks after 50 waiters left the channel");
    });
}
