//! Lease rows on PostgreSQL: [`PostgresLeaseClient`], a lock that is a row with a token and an
//! expiry (`postgres://…?lock=lease`), for locks that must outlive a connection.
//!
//! # How a lock is held
//! The table `leasehold_leases (key, token, expires_at, fence, hold_until, wait_until)` has a
//! row per key. Acquiring is one statement: an upsert that takes the row only if it has no
//! token or its expiry has passed (by the server's `clock_timestamp()`), sets our token and
//! `expires_at = now + ttl`, increments `fence` and returns it (a waiter's statement, found
//! busy, returns the holder's remaining lease instead, which bounds its pause). Release and
//! extend are
//! `UPDATE … WHERE token = $token AND expires_at > clock_timestamp()`: token-checked, atomic,
//! and never on an expired lease.
//! Waiters `LISTEN` on one connection per client and retry when their key is released (or
//! after a backoff with jitter, never longer than the holder's remaining lease); a release
//! wakes one of the client's lock waiters of the key ([`NameWakeup`], through [`Listening`]), since
//! only one can take it, and every waiter of a semaphore or an election; a client's own release
//! of a lock also wakes one of its waiters at once, so that the waiter's attempt follows the
//! release on the connection ([`PostgresLeaseClient::released_here`]). A waiter's
//! attempt that finds the row busy marks it (`wait_until`), and a release of a marked row sends
//! `NOTIFY leasehold_release` with the key, in the same statement. An unmarked release sends
//! nothing: PostgreSQL serializes every notifying commit server-wide ([`marking`]). With
//! [`min_hold`](LockOptions::min_hold) the acquisition also sets `hold_until = now + min_hold`
//! from the same `clock_timestamp()` reading, and a release before it keeps the row (token and
//! all) until then, marked released (`hold_until = '-infinity'`): no extend, renewal or second
//! release matches a kept row, so a renewal that reaches the server after the release cannot
//! keep the key for another TTL (docs/guarantees.md §18).
//!
//! # Guarantees, and under which assumptions
//! * **Mutual exclusion while valid.** The upsert's `WHERE` is evaluated on the row's latest
//!   version under the row lock (`ON CONFLICT DO UPDATE`), so two acquisitions never both take
//!   an unexpired row. `expires_at` is set by the server when the statement runs, after the
//!   request was sent; the lease's local validity counts from before the send, minus the drift
//!   allowance, so it ends first (assuming the server's clock does not run more than 1% fast
//!   and does not jump, and that committed rows survive: a failover to an asynchronous
//!   streaming replica loses the acquisitions and fence increments it had not replayed, so a
//!   key can be granted twice and a number repeat).
//! * **Token-checked release and extend**, as above: a later holder's token differs.
//! * **Fencing numbers strictly increase per key**, committed with the acquisition (durable,
//!   unlike the session lock's advisory lock).
//! * **Loss is reported**: an auto-extension whose `UPDATE` matches no row (expired, taken,
//!   released from elsewhere) declares the lease lost; so does the validity running out.
//! * Unlike a session lock, a lease row survives its process (the CLI's `acquire` / `release`
//!   from another process work) and costs no connection while held; a crashed holder's lock is
//!   free after its TTL, not at once.
//!
//! # Through a connection pooler
//! Lease rows keep no lock state in the server session: every statement is one transaction,
//! so they work through a transaction pooler (PgBouncer's `pool_mode=transaction`) as well as
//! directly. Their statements are prepared once on a connection whose server session is its
//! own (the startup announced the process that serves it), and sent unnamed through a pooler
//! (which announces a key of its own), where a named statement could land on another
//! client's server session ([`LeaseConn`]). One thing does not work through it: `LISTEN` is
//! session state, and a transaction pooler gives the listening connection's server session to
//! others, so release notifications may not arrive; waiters then retry after their backoff
//! (never later than the holder's remaining lease), which is slower, never unsafe.

mod sql;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_util::future::BoxFuture;
use tokio::sync::broadcast;
use tokio_postgres::AsyncMessage;
use tokio_postgres::types::Type;

/// Parameter types, given with every statement: they name a prepared statement's parameters,
/// or go with an unnamed one (parsed, bound and run in one message sequence) through a
/// transaction pooler, where a connection's next transaction may run on another client's
/// server session ([`LeaseConn`]).
const TEXT: Type = Type::TEXT;
const INT8: Type = Type::INT8;

use self::sql::{
    ACQUIRE, ACQUIRE_RECORDING, ACQUIRE_RECORDING_WAITING, ACQUIRE_WAITING, ADD_COLUMNS, BUSY_FOR,
    CREATE_TABLE, EXTEND, GIVE_BACK, INSPECT, RAISE, RELEASE, RELEASE_RECORDING,
};
pub(in crate::postgres) use self::sql::{REMAINING, Remark, add_columns, marking, marking_ms};
use super::history::{EventParams, Rider};
use super::lease_conn::LeaseConn;
use super::tls::{PgTls, PgTlsStream};
use super::{is_create_race, pg_error, timeout_error, unexpected, validate_pg_key};
use crate::core::acquire::{Ask, Attempts, Grant, NameWakeup, OnAbandon, OneWake, Wakeup, granted};
use crate::core::driver::{Driver, Kind};
use crate::core::error::{Error, Operation, Result};
use crate::core::guard::HeldLock;
use crate::core::guard::{Lease, LockGuard, extended_by};
use crate::core::history::HistoryOptions;
use crate::core::kind::{Backend, Taking};
use crate::core::options::{ClientOptions, LockOptions, ttl_millis};
use crate::core::outcome::{LockState, TryAcquire};
use crate::core::queued::queued_then;
use crate::core::token::LockToken;
use crate::postgres::Timed;

/// Locks as lease rows on one PostgreSQL server. Cheap to clone.
#[derive(Clone)]
pub struct PostgresLeaseClient {
    inner: Arc<Inner>,
    /// Set in a [`Locker`](crate::Locker) that records history: a lock's acquiring and
    /// releasing statements append their events.
    history: Option<Rider>,
}

struct Inner {
    config: tokio_postgres::Config,
    /// The TLS connector the URL's `sslmode` asks for.
    tls: PgTls,
    options: ClientOptions,
    /// The shared connection (requests are pipelined on it); replaced when it closes.
    conn: tokio::sync::Mutex<Option<Arc<LeaseConn>>>,
    /// Released keys, from the LISTEN connection (opened by the first waiter; held while it
    /// opens, so that waiters starting together open one).
    releases: tokio::sync::Mutex<Option<Arc<Listening>>>,
}

/// Where the LISTEN connection's notifications go: every release to each broadcast receiver
/// (a semaphore's and an election's waiters, a leader's watch), and to *one* of the client's
/// lock waiters of the released name ([`NameWakeup`]), since only one of them can take it.
struct Listening {
    released: broadcast::Sender<String>,
    /// The lock waiters' shared wake-up of each name, with how many waiters share it.
    locks: Mutex<HashMap<String, (Arc<NameWakeup>, usize)>>,
}

impl Listening {
    /// A release of `key` was announced.
    fn deliver(&self, key: &str) {
        if self.released.receiver_count() > 0 {
            let _ = self.released.send(key.to_string());
        }
        if let Some(waiters) = self.lock_waiters(key) {
            waiters.released();
        }
    }

    /// The shared wake-up of the client's lock waiters of `key`, if any wait.
    fn lock_waiters(&self, key: &str) -> Option<Arc<NameWakeup>> {
        let locks = self.locks.lock().unwrap_or_else(|p| p.into_inner());
        locks.get(key).map(|(one, _)| one.clone())
    }
}

impl std::fmt::Debug for PostgresLeaseClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        super::url::debug_config(f, "PostgresLeaseClient", &self.inner.config)
    }
}

impl PostgresLeaseClient {
    /// Connects with default [`ClientOptions`].
    ///
    /// # Errors
    /// See [`PostgresLeaseClient::connect_with`].
    pub async fn connect(url: &str) -> Result<Self> {
        Self::connect_with(url, ClientOptions::default()).await
    }

    /// Connects to the server `url` names (a `postgres://` URL; a `lock=lease` parameter is
    /// accepted and ignored) and creates the table `leasehold_leases` if it is missing.
    ///
    /// # Errors
    /// As [`PostgresClient::connect_with`](super::PostgresClient::connect_with).
    pub async fn connect_with(url: &str, options: ClientOptions) -> Result<Self> {
        let (config, tls) = super::url::config(url, &options)?;
        let client = PostgresLeaseClient {
            inner: Arc::new(Inner {
                config,
                tls,
                options,
                conn: tokio::sync::Mutex::new(None),
                releases: tokio::sync::Mutex::new(None),
            }),
            history: None,
        };
        let conn = client.conn().await?;
        let created = client
            .timed(Operation::Connect, conn.batch_execute(CREATE_TABLE))
            .await;
        // Two clients creating the table at once: the table is there either way.
        match created {
            Err(e) if !is_create_race(&e) => return Err(e),
            _ => {}
        }
        client
            .timed(Operation::Connect, conn.batch_execute(&ADD_COLUMNS))
            .await?;
        Ok(client)
    }

    async fn connect_raw(
        &self,
    ) -> Result<(
        tokio_postgres::Client,
        tokio_postgres::Connection<tokio_postgres::Socket, PgTlsStream<tokio_postgres::Socket>>,
    )> {
        let bound = self.inner.options.connect_timeout;
        match tokio::time::timeout(bound, self.inner.config.connect(self.inner.tls.clone())).await {
            Ok(r) => r.map_err(|e| pg_error(Operation::Connect, false, e)),
            Err(_) => Err(timeout_error(Operation::Connect, false)),
        }
    }

    /// The shared connection, (re)opened if needed: its statements prepared if its server
    /// session is its own ([`LeaseConn`]).
    pub(super) async fn conn(&self) -> Result<Arc<LeaseConn>> {
        let mut slot = self.inner.conn.lock().await;
        if let Some(c) = slot.as_ref().filter(|c| !c.is_closed()) {
            return Ok(c.clone());
        }
        let (client, connection) = self.connect_raw().await?;
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                tracing::debug!(error = %e, "PostgreSQL connection ended");
            }
        });
        let bound = self.inner.options.connect_timeout;
        let client = match tokio::time::timeout(bound, LeaseConn::new(client)).await {
            Ok(r) => Arc::new(r.map_err(|e| pg_error(Operation::Connect, true, e))?),
            Err(_) => return Err(timeout_error(Operation::Connect, true)),
        };
        *slot = Some(client.clone());
        Ok(client)
    }

    /// The LISTEN connection's notifications, opened on first use.
    async fn listening(&self) -> Result<Arc<Listening>> {
        let mut current = self.inner.releases.lock().await;
        if let Some(listening) = current.as_ref() {
            return Ok(listening.clone());
        }
        let (client, mut connection) = self.connect_raw().await?;
        let client = Arc::new(client);
        let listening = Arc::new(Listening {
            released: broadcast::channel(1024).0,
            locks: Mutex::default(),
        });
        let to = listening.clone();
        let inner = Arc::downgrade(&self.inner);
        // The client lives as long as the task reads the connection's notifications.
        let keep = client.clone();
        let task = tokio::spawn(async move {
            let _client = keep;
            let mut messages = futures_util::stream::poll_fn(move |cx| connection.poll_message(cx));
            use futures_util::StreamExt;
            while let Some(message) = messages.next().await {
                match message {
                    Ok(AsyncMessage::Notification(n)) => to.deliver(n.payload()),
                    Ok(_) => {}
                    Err(_) => break,
                }
            }
            // The connection ended: the next waiter opens a new one.
            if let Some(inner) = inner.upgrade() {
                let mut current = inner.releases.lock().await;
                if current.as_ref().is_some_and(|l| Arc::ptr_eq(l, &to)) {
                    *current = None;
                }
            }
        });
        // Bounded: the waiters of this client wait for it (they then poll).
        let bound = self.inner.options.connect_timeout;
        let listened =
            match tokio::time::timeout(bound, client.batch_execute("LISTEN leasehold_release"))
                .await
            {
                Ok(r) => r.map_err(|e| pg_error(Operation::Acquire, true, e)),
                Err(_) => Err(timeout_error(Operation::Acquire, true)),
            };
        if let Err(e) = listened {
            task.abort(); // closes the connection
            return Err(e);
        }
        *current = Some(listening.clone());
        Ok(listening)
    }

    /// The releases of `name` (`None` if the LISTEN connection could not be opened).
    pub(super) async fn releases_of(&self, name: &str) -> Option<NameReleases> {
        let listening = self.listening().await.ok()?;
        Some(NameReleases {
            released: listening.released.subscribe(),
            name: name.to_string(),
        })
    }

    /// [`Attempts::wakeups`] of a waiter for `name` that every release wakes (a permit's, a
    /// candidate's): its releases, or (`None`) polling.
    pub(super) async fn wakeups(&self, name: &str) -> Option<Box<dyn Wakeup>> {
        let releases = self.releases_of(name).await?;
        Some(Box::new(releases) as Box<dyn Wakeup>)
    }

    /// [`Attempts::wakeups`] of a lock's waiter for `name`: one of the client's lock waiters of
    /// `name` is woken per release ([`OneWake`]), or (`None`) polling.
    async fn lock_wakeups(&self, name: &str) -> Option<Box<dyn Wakeup>> {
        let listening = self.listening().await.ok()?;
        let one = {
            let mut locks = listening.locks.lock().unwrap_or_else(|p| p.into_inner());
            let (one, refs) = locks.entry(name.to_string()).or_default();
            *refs += 1;
            OneWake::new(one.clone())
        };
        Some(Box::new(LockReleases {
            listening,
            name: name.to_string(),
            one,
        }) as Box<dyn Wakeup>)
    }

    pub(super) fn check(&self, key: &str, options: &LockOptions) -> Result<()> {
        validate_pg_key(key)?;
        options
            .check_for(Backend::PostgresLease, Taking::Lock)
            .map(drop)
    }

    /// This client, its locks' acquiring and releasing statements appending their history
    /// events as `options` say (a clone sharing the connection: the [`Locker`](crate::Locker)
    /// that records history drives it).
    pub(super) fn recording(&self, options: &HistoryOptions) -> PostgresLeaseClient {
        PostgresLeaseClient {
            inner: self.inner.clone(),
            history: Some(super::history::rider(self, options)),
        }
    }

    /// Whether a release by token appends its own event (unless the server refused the table
    /// since).
    pub(super) fn records_releases(&self) -> bool {
        self.history.as_ref().is_some_and(Rider::riding)
    }

    /// The rider of this client's lock statements, if they append their events now.
    async fn rider(&self) -> Option<&Rider> {
        match &self.history {
            Some(rider) if rider.rides().await => Some(rider),
            _ => None,
        }
    }

    /// One acquiring statement, whose answer to a busy row carries its holder's remaining
    /// lease (a one-try attempt's asks for it in a second, [`ACQUIRE`]); `waiting`: a waiter's
    /// attempt, which marks a busy row so that its release is announced ([`marking`]).
    async fn attempt(&self, key: &str, options: &LockOptions, waiting: bool) -> Result<TryAcquire> {
        let conn = self.conn().await?;
        let ttl_ms = options.ttl().as_millis() as i64;
        let min_hold_ms = options.min_hold_bound().map(|m| m.as_millis() as i64);
        let fencing = options.fencing_enabled();
        let mark_ms = marking_ms(options);
        let rider = self.rider().await;
        granted(
            key,
            options,
            options.new_token(),
            async |token| {
                let take = async |event: Option<&EventParams>| {
                    let (token, mut params) = (token.expose(), Vec::with_capacity(9));
                    params.extend([
                        (&key as &(dyn tokio_postgres::types::ToSql + Sync), TEXT),
                        (&token, TEXT),
                        (&ttl_ms, INT8),
                        (&min_hold_ms, INT8),
                    ]);
                    let sql = match (event, waiting) {
                        (Some(event), waiting) => {
                            event.push(&mut params);
                            params.push((&fencing, Type::BOOL));
                            match waiting {
                                true => ACQUIRE_RECORDING_WAITING.as_str(),
                                false => ACQUIRE_RECORDING.as_str(),
                            }
                        }
                        (None, true) => ACQUIRE_WAITING.as_str(),
                        (None, false) => ACQUIRE,
                    };
                    if waiting {
                        params.push((&mark_ms, INT8));
                    }
                    let sent = conn.query_opt(sql, &params);
                    self.timed(Operation::Acquire, sent).await
                };
                // Until the reply says what happened, the row may be ours: given back if we
                // never learn.
                let mut unknown = self.unknown_attempt(key, token);
                let event = Rider::event(rider, token);
                let (row, recorded) = Rider::ride(rider, &event, take, async {}).await;
                let row = row?;
                unknown.disarm();
                let bad = unexpected(Operation::Acquire);
                let ms = match row {
                    Some(row) => match row.try_get::<_, Option<i64>>(0).map_err(&bad)? {
                        Some(fence) => return Ok(Grant::Taken((fence, recorded))),
                        None => row.try_get::<_, Option<i64>>(1).map_err(&bad)?,
                    },
                    // A one-try attempt, busy: its statement does not say for how long.
                    None => self
                        .timed(
                            Operation::Acquire,
                            conn.query_opt(&BUSY_FOR, &[(&key, TEXT)]),
                        )
                        .await?
                        .map(|r| r.try_get::<_, Option<i64>>(0).map_err(&bad))
                        .transpose()?
                        .flatten(),
                };
                let remaining = ms.map(|ms| Duration::from_millis(ms.max(0) as u64));
                Ok(Grant::Busy { remaining })
            },
            async |token| {
                let _ = self.give_back(key, token).await;
            },
            |token, (fence, recorded), started| {
                let fencing = fencing.then_some(fence as u64);
                let lease = Lease::new(key, token, fencing, started, options.ttl());
                self.guard(lease, options, recorded)
            },
        )
        .await
    }

    /// The guard of a lease row, renewed if `options` say so; `recorded`: its acquisition
    /// appended its history event, and its release will too.
    pub(super) fn guard(&self, lease: Lease, options: &LockOptions, recorded: bool) -> LockGuard {
        let held: Arc<dyn HeldLock> = Arc::new(LeaseRowHeld {
            client: self.clone(),
            recorded,
        });
        if options.auto_extend_enabled() {
            crate::core::renew::keep_alive(held.clone(), lease.clone(), options);
        }
        LockGuard::new(held, lease)
    }

    /// Releases `key` if `token` holds it ([`RELEASE`]), appending the event (with `fencing`)
    /// when `rider` is given.
    async fn release_row(
        &self,
        key: &str,
        token: &LockToken,
        fencing: Option<u64>,
        rider: Option<&Rider>,
    ) -> Result<()> {
        let conn = self.conn().await?;
        let fencing = fencing.map(|n| n as i64);
        let free = async |event: Option<&EventParams>| {
            let (token, mut params) = (token.expose(), Vec::with_capacity(7));
            params.extend([
                (&key as &(dyn tokio_postgres::types::ToSql + Sync), TEXT),
                (&token, TEXT),
            ]);
            let sql = match event {
                Some(event) => {
                    event.push(&mut params);
                    params.push((&fencing, INT8));
                    RELEASE_RECORDING.as_str()
                }
                None => RELEASE.as_str(),
            };
            let call = std::pin::pin!(self.timed(Operation::Release, conn.query(sql, &params)));
            queued_then(call, || self.released_here(key)).await.0
        };
        let event = Rider::event(rider, token);
        let (rows, _) = Rider::ride(rider, &event, free, async {}).await;
        if rows?.is_empty() {
            return Err(Error::NotHeld {
                key: key.to_string(),
            });
        }
        Ok(())
    }

    /// This client's release of `key` is on its connection: one of the client's lock waiters of
    /// `key` (if any) is woken at once, and its attempt follows the release on the connection
    /// ([`queued_then`]), so that the handoff takes one round trip, not the release's, the
    /// notification's and the attempt's. Only a hint, like the notification: a release that
    /// fails, or keeps the row for its `min_hold`, costs the woken waiter one attempt that finds
    /// the row busy (it marks it and pauses again); the release's `NOTIFY` still comes, and is
    /// left to the woken waiter's attempt if that is still out ([`NameWakeup`]: it wakes
    /// another waiter only if that attempt loses), else wakes one waiter as any other does.
    fn released_here(&self, key: &str) {
        if let Ok(current) = self.inner.releases.try_lock()
            && let Some(listening) = current.as_ref()
            && let Some(waiters) = listening.lock_waiters(key)
        {
            waiters.releasing();
        }
    }

    /// Frees `key`'s row if `token` holds it, whatever its hold says ([`GIVE_BACK`]): for a grant
    /// that is not used.
    pub(super) async fn give_back(&self, key: &str, token: &LockToken) -> Result<()> {
        let conn = self.conn().await?;
        self.timed(
            Operation::Release,
            conn.query(GIVE_BACK, &[(&key, TEXT), (&token.expose(), TEXT)]),
        )
        .await
        .map(drop)
    }

    /// The cleanup of an acquiring statement of `key` with `token`, whose reply has not come
    /// (yet): disarmed once it came. Dropped armed (the reply was
    /// lost to a timeout or a broken connection, or the caller's future was dropped), it gives the
    /// row back in the background ([`GIVE_BACK`], token-checked: it frees the row only if the
    /// statement took it), so an acquisition with an unknown outcome does not leave the key held by
    /// a token nobody knows for a whole TTL.
    ///
    /// The give-back goes on the client's connection: on the same one as the statement (a timeout),
    /// the server runs it after the statement. On a new one (the old one broke), it may run before
    /// a statement the old server session is still executing, and then frees nothing: that row
    /// stays taken until its TTL, the bound that remains. One try: if it fails, the same.
    pub(super) fn unknown_attempt(
        &self,
        key: &str,
        token: &LockToken,
    ) -> OnAbandon<impl FnOnce() -> BoxFuture<'static, ()> + use<>, BoxFuture<'static, ()>> {
        let (client, key, token) = (self.clone(), key.to_string(), token.clone());
        OnAbandon::new(
            "lease row acquisition",
            move || -> BoxFuture<'static, ()> {
                Box::pin(async move {
                    if let Err(e) = client.give_back(&key, &token).await {
                        tracing::debug!(key, error = %e, "giving back an attempt with an unknown outcome failed");
                    }
                })
            },
        )
    }
}

/// A lease row, as the acquisition engine drives it.
struct LeaseRow<'a> {
    client: &'a PostgresLeaseClient,
    key: &'a str,
}

impl Attempts for LeaseRow<'_> {
    fn name(&self) -> &str {
        self.key
    }

    async fn attempt(&self, options: &LockOptions, ask: Ask) -> Result<TryAcquire> {
        let waiting = ask.wait.is_some();
        self.client.attempt(self.key, options, waiting).await
    }

    fn wakes(&self) -> bool {
        true
    }

    async fn wakeups(&self) -> Option<Box<dyn Wakeup>> {
        self.client.lock_wakeups(self.key).await
    }
}

/// The releases of one name on the lease rows' channel (`NOTIFY leasehold_release`): a waiter's
/// wake-up, an election's announcements (a win is announced there too).
pub(super) struct NameReleases {
    released: broadcast::Receiver<String>,
    name: String,
}

impl NameReleases {
    /// Forgets what was received so far: only a release from now on counts.
    pub(super) fn mark_seen(&mut self) {
        while !matches!(
            self.released.try_recv(),
            Err(broadcast::error::TryRecvError::Empty | broadcast::error::TryRecvError::Closed)
        ) {}
    }

    /// The next release of the name, or a lag (it may be among the messages missed). Never,
    /// once the listening connection ended: the waiter's backoff (the watch's poll) takes over.
    pub(super) async fn next(&mut self) {
        loop {
            match self.released.recv().await {
                Ok(k) if k == self.name => return,
                Err(broadcast::error::RecvError::Lagged(_)) => return,
                Ok(_) => {}
                Err(broadcast::error::RecvError::Closed) => std::future::pending().await,
            }
        }
    }
}

impl Wakeup for NameReleases {
    fn mark_seen(&mut self) {
        NameReleases::mark_seen(self);
    }

    fn released(&mut self) -> BoxFuture<'_, ()> {
        Box::pin(self.next())
    }
}

/// A lock waiter's registration for its name's releases: one lock waiter of the client is
/// woken per release ([`Listening`]).
struct LockReleases {
    listening: Arc<Listening>,
    name: String,
    one: OneWake,
}

impl Wakeup for LockReleases {
    fn mark_seen(&mut self) {
        self.one.mark_seen();
    }

    fn released(&mut self) -> BoxFuture<'_, ()> {
        Box::pin(self.one.released())
    }

    fn answered(&mut self, taken: bool) {
        self.one.answered(taken);
    }
}

impl Drop for LockReleases {
    fn drop(&mut self) {
        // The last waiter of the name takes its wake-up with it (a permit left there is
        // nobody's); `one` hands a wake-up it did not answer on to the others, if any.
        let mut locks = self
            .listening
            .locks
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        if let Some((_, refs)) = locks.get_mut(&self.name) {
            *refs -= 1;
            if *refs == 0 {
                locks.remove(&self.name);
            }
        }
    }
}

/// A lock held as a lease row.
#[derive(Debug)]
struct LeaseRowHeld {
    client: PostgresLeaseClient,
    /// Its acquisition appended its history event: its release appends one too.
    recorded: bool,
}

impl HeldLock for LeaseRowHeld {
    fn release<'a>(&'a self, lease: &'a Lease) -> BoxFuture<'a, Result<()>> {
        let rider = self.client.history.as_ref().filter(|_| self.recorded);
        let (key, token) = (lease.key(), lease.token());
        Box::pin(
            self.client
                .release_row(key, token, lease.fencing_token(), rider),
        )
    }

    fn records_history(&self) -> bool {
        self.recorded
    }

    fn extend<'a>(&'a self, lease: &'a Lease, ttl: Duration) -> BoxFuture<'a, Result<Instant>> {
        Box::pin(extended_by(
            ttl,
            self.client.extend(lease.key(), lease.token(), ttl),
        ))
    }
}

#[async_trait::async_trait]
impl Driver for PostgresLeaseClient {
    /// One attempt to take `key`: one statement, and one more when busy (the holder's remaining
    /// lease).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a bad key or TTL; [`Error::Unsupported`] for
    /// `replica_ack`; connection and server errors.
    async fn try_acquire(&self, key: &str, options: &LockOptions) -> Result<TryAcquire> {
        self.check(key, options)?;
        self.attempt(key, options, false).await
    }

    /// Takes `key`, waiting until `options.wait_bound()`, through the acquisition engine
    /// (`core::acquire`): between attempts it sleeps until the key is released (`LISTEN`,
    /// subscribed once the key was found busy) or for the backoff delay, never past the
    /// holder's remaining lease nor the deadline. A grant that came too late to be a lease is
    /// given back and tried again after the backoff.
    ///
    /// # Errors
    /// [`Error::NotAcquired`] at the deadline (or [`Error::ExpiredOnArrival`] if the last
    /// attempt was a grant given back); as [`Locker::try_acquire`](crate::Locker::try_acquire).
    async fn acquire(&self, key: &str, options: &LockOptions) -> Result<LockGuard> {
        self.check(key, options)?;
        let row = LeaseRow { client: self, key };
        crate::core::acquire::wait(&row, options, options.wait_bound()).await
    }

    /// Releases `key` if `token` holds it (from any process), and wakes its waiters.
    ///
    /// # Errors
    /// [`Error::NotHeld`] if it does not (expired, released, or another token's).
    async fn release(&self, key: &str, token: &LockToken) -> Result<()> {
        validate_pg_key(key)?;
        let rider = self.rider().await;
        self.release_row(key, token, None, rider).await
    }

    /// Extends `key` to `ttl` from now if `token` holds it (from any process).
    ///
    /// # Errors
    /// [`Error::NotHeld`] if it does not.
    async fn extend(&self, key: &str, token: &LockToken, ttl: Duration) -> Result<()> {
        validate_pg_key(key)?;
        let ttl_ms = ttl_millis(ttl)? as i64;
        let conn = self.conn().await?;
        let n = self
            .timed(
                Operation::Extend,
                conn.execute(
                    EXTEND,
                    &[(&key, TEXT), (&token.expose(), TEXT), (&ttl_ms, INT8)],
                ),
            )
            .await?;
        if n == 0 {
            return Err(Error::NotHeld {
                key: key.to_string(),
            });
        }
        Ok(())
    }

    /// The holder's token, its remaining lease and the fencing counter.
    ///
    /// # Errors
    /// Connection and server errors.
    async fn inspect(&self, key: &str) -> Result<LockState> {
        validate_pg_key(key)?;
        let conn = self.conn().await?;
        let row = self
            .timed(
                Operation::Inspect,
                conn.query_typed_opt(INSPECT, &[(&key, TEXT)]),
            )
            .await?;
        let bad = unexpected(Operation::Inspect);
        let Some(row) = row else {
            return Ok(LockState::new(key.to_string(), None, None, None));
        };
        let holder: Option<String> = row.try_get(0).map_err(&bad)?;
        let ttl: Option<i64> = row.try_get(1).map_err(&bad)?;
        let fence: i64 = row.try_get(2).map_err(&bad)?;
        Ok(LockState::new(
            key.to_string(),
            holder,
            ttl.map(|ms| Duration::from_millis(ms.max(0) as u64)),
            Some(fence as u64),
        ))
    }

    /// Raises `key`'s fencing counter to at least `at_least`.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] above `i64::MAX`; connection and server errors.
    async fn raise_fencing_counter(&self, key: &str, at_least: u64) -> Result<u64> {
        let n = super::params::raised_fencing_number(key, at_least)?;
        let conn = self.conn().await?;
        let row = self
            .timed(
                Operation::RaiseFencingCounter,
                conn.query_typed_one(RAISE, &[(&key, TEXT), (&n, INT8)]),
            )
            .await?;
        let fence: i64 = row
            .try_get(0)
            .map_err(unexpected(Operation::RaiseFencingCounter))?;
        Ok(fence as u64)
    }
}

impl Timed for PostgresLeaseClient {
    fn response_timeout(&self) -> Duration {
        self.inner.options.response_timeout
    }
}

impl Kind for PostgresLeaseClient {
    fn kind(&self) -> Backend {
        Backend::PostgresLease
    }
}
