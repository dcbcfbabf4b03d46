//! [`PostgresClient`]: connecting, the pool of sessions, and the session that holds a lock
//! (renewed, and reported lost when it ends).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use futures_util::future::BoxFuture;
use tokio_postgres::Statement;
use tokio_postgres::error::SqlState;
use tokio_util::sync::CancellationToken;

use super::error::{is_create_race, pg_error, timeout_error};
use super::history::{EventParams, Rider};
use super::lifetime::{lease_lifetime, silence_in, validity_from};
use super::params::millis_text;
use super::pooler::{announced_pid, pooler_error, pooler_sign};
use super::sql::{
    CREATE_TABLE, INSPECT, PROBE, RAISE, RELEASE, SET_LOCK_TIMEOUT, extend_sql, try_acquire_sql,
    wait_acquire_sql,
};
use super::sync::AdvisoryLock;
use super::tls::PgTls;
use super::url::{config, debug_config};
use crate::core::error::LossReason;
use crate::core::error::{Error, Operation, Result};
use crate::core::guard::HeldLock;
use crate::core::guard::{Lease, LockGuard};
use crate::core::history::HistoryOptions;
use crate::core::options::{ClientOptions, LockOptions, ttl_millis};
use crate::core::token::LockToken;
use crate::postgres::Timed;
use crate::postgres::unexpected;

/// Idle sessions kept for later acquisitions.
const MAX_IDLE: usize = 16;

/// Rounds of the connect check after each connection's first statement: one more transaction
/// on each of the two connections, one after the other, per round (see
/// [`PostgresClient::check_own_sessions`]).
const CHECK_ROUNDS: usize = 3;

/// A client for locks on one PostgreSQL server. Cheap to clone (clones share the pool).
#[derive(Clone)]
pub struct PostgresClient {
    pub(super) inner: Arc<Inner>,
    /// Set in a [`Locker`](crate::Locker) that records history: a plain lock's acquiring and
    /// releasing statements append their events.
    pub(super) history: Option<Rider>,
}

pub(super) struct Inner {
    config: tokio_postgres::Config,
    /// The TLS connector the URL's `sslmode` asks for.
    pub(super) tls: PgTls,
    pub(super) options: ClientOptions,
    idle: Mutex<Vec<Session>>,
    /// Locks held through this client, by (key, token): what `release`/`extend` by token find.
    pub(super) held: Mutex<HashMap<(String, LockToken), Arc<PgHeld>>>,
    /// The first sign of a pooler that hands server sessions around, once one was seen: from
    /// then on every acquisition is refused (see [`PostgresClient::pooler_seen`]).
    pooler: OnceLock<String>,
}

impl std::fmt::Debug for PostgresClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        debug_config(f, "PostgresClient", &self.inner.config)
    }
}

/// One server connection and its prepared statements.
pub(super) struct Session {
    pub(super) client: tokio_postgres::Client,
    /// Cancelled when the connection ends (for whatever reason).
    pub(super) closed: CancellationToken,
    /// What a cancel request connects with (as the session did).
    pub(super) tls: PgTls,
    /// The server process serving it (`pg_backend_pid()` at its first statement).
    pub(super) pid: i32,
    pub(super) try_acquire: Statement,
    pub(super) wait_acquire: Statement,
    pub(super) set_lock_timeout: Statement,
    pub(super) release: Statement,
    pub(super) extend: Statement,
    /// The statements that append their history events, prepared when a recording client
    /// first uses the session.
    pub(super) recording: Option<Recording>,
}

/// A session's statements that append their history events (`postgres::history`).
pub(super) struct Recording {
    pub(super) try_acquire: Statement,
    pub(super) wait_acquire: Statement,
    pub(super) release: Statement,
}

impl Session {
    pub(super) fn is_closed(&self) -> bool {
        self.closed.is_cancelled() || self.client.is_closed()
    }

    /// Whether `e`, a statement's failure, says the session is over: the connection closed,
    /// or the server ended the session (its idle limit, a terminate, a shutdown).
    fn ended_by(&self, e: &tokio_postgres::Error) -> bool {
        let ended_by_server = e.code().is_some_and(super::error::ends_the_session);
        e.is_closed() || ended_by_server || self.is_closed()
    }
}

/// A connection whose first statement ([`PROBE`]) ran; nothing is prepared on it yet.
struct Opened {
    client: tokio_postgres::Client,
    tls: PgTls,
    closed: CancellationToken,
    pid: i32,
}

impl PostgresClient {
    /// Connects with default [`ClientOptions`].
    ///
    /// # Errors
    /// See [`PostgresClient::connect_with`].
    pub async fn connect(url: &str) -> Result<Self> {
        Self::connect_with(url, ClientOptions::default()).await
    }

    /// Connects to the server `url` names (`postgres://user:password@host:port/dbname`, or any
    /// form `tokio_postgres::Config` parses), opens one session to check the server and
    /// credentials, and creates the table `leasehold_locks` if it is missing.
    ///
    /// TLS as libpq does it, on rustls: `sslmode=disable`, `prefer` (the default: TLS if the
    /// server offers it, the certificate unchecked), `require` (TLS; the chain is checked only
    /// if a CA is named), `verify-ca` (the chain) or `verify-full` (the chain and the host
    /// name); `sslrootcert=PATH` (else [`ClientOptions::tls_ca_file`], else the system's
    /// roots; `sslrootcert=system`: the system's, with `verify-full` only) and
    /// `sslcert=PATH&sslkey=PATH` (else [`ClientOptions::tls_cert_file`] and
    /// [`ClientOptions::tls_key_file`]) for a client certificate. `sslmode=allow` and SCRAM
    /// channel binding are not offered.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a malformed URL or unreadable TLS files;
    /// [`Error::Connection`] if the server cannot be reached within the connect timeout, does
    /// not offer TLS that `sslmode` requires, or its certificate fails the check (the message
    /// names the certificate problem); [`Error::Authentication`] for refused credentials (also
    /// a `pg_hba.conf` that refuses the connection, e.g. without TLS or without a client
    /// certificate); [`Error::PermissionDenied`] if the table cannot be created.
    pub async fn connect_with(url: &str, options: ClientOptions) -> Result<Self> {
        let (mut config, tls) = config(url, &options)?;
        config.keepalives(true);
        config.keepalives_idle(Duration::from_secs(5));
        let client = PostgresClient {
            inner: Arc::new(Inner {
                config,
                tls,
                options,
                idle: Mutex::new(Vec::new()),
                held: Mutex::new(HashMap::new()),
                pooler: OnceLock::new(),
            }),
            history: None,
        };
        let first = client.open_raw().await?;
        let second = client.open_raw().await?;
        client.check_own_sessions(&first, &second).await?;
        let session = client.prepare(first).await?;
        let spare = client.prepare(second).await?;
        match client
            .timed(
                Operation::Connect,
                session.client.batch_execute(CREATE_TABLE),
            )
            .await
        {
            // Two clients creating the table at once: one of them loses a race in the
            // catalog; the table is there either way.
            Err(e) if !is_create_race(&e) => return Err(e),
            _ => {}
        }
        client.put_back(spare);
        client.put_back(session);
        Ok(client)
    }

    /// The connect check: two connections open at once, each served by a server process of its
    /// own for all its transactions. Each runs [`CHECK_ROUNDS`] more transactions, the two
    /// alternating, so that every transaction of one has another transaction between it and the
    /// next of the same connection. A direct connection or a session pool keeps a connection on
    /// one server process; a transaction pooler hands each transaction the server session free
    /// at that moment: on a quiet pool the one the other connection just gave back (PgBouncer
    /// reuses the last one returned), on a busy pool whichever another client gave back. Any
    /// change of process, or one process for both, refuses ([`Error::Topology`]).
    ///
    /// A second line: every connection was already checked for a pooler's own announced key
    /// ([`PostgresClient::open_raw`]), which refuses any pooler however its transactions land;
    /// this one alone could be passed by chance (each transaction handed the same server session
    /// as the last one of its connection, never the other's: one grant in 1 198 in a CI run).
    async fn check_own_sessions(&self, first: &Opened, second: &Opened) -> Result<()> {
        if first.pid == second.pid {
            return Err(pooler_error(&format!(
                "two connections at once were served by the same server process (pid {})",
                first.pid
            )));
        }
        for _ in 0..CHECK_ROUNDS {
            for opened in [first, second] {
                let pid = self.backend_pid(&opened.client).await?;
                if pid != opened.pid {
                    return Err(pooler_error(&format!(
                        "one connection's transactions were served by two server processes \
                         (pid {}, then {pid})",
                        opened.pid
                    )));
                }
            }
        }
        Ok(())
    }

    /// The server process serving `client`'s next transaction ([`PROBE`], unnamed).
    async fn backend_pid(&self, client: &tokio_postgres::Client) -> Result<i32> {
        let bound = self.inner.options.connect_timeout;
        let row = tokio::time::timeout(bound, client.query_typed_one(PROBE, &[]))
            .await
            .map_err(|_| timeout_error(Operation::Connect, true))?
            .map_err(|e| pg_error(Operation::Connect, true, e))?;
        row.try_get(0).map_err(|e| Error::UnexpectedReply {
            op: Operation::Connect,
            detail: e.to_string(),
        })
    }

    /// Latches the client into refusing session locks: a pooler's sign was seen (`found`, in
    /// the error). Every later acquisition through this client and its clones (and every other
    /// request that takes a pooled session: inspect, list, history) is refused with
    /// [`Error::Topology`] before any round trip, as at connect: one sign is enough to know that
    /// server sessions are handed around, even if most statements happen to land well. Locks
    /// already held keep their sessions: their extends check that they still hold the lock on
    /// their own server process, and report the loss otherwise.
    /// Returns that refusal (naming the first sign seen).
    pub(super) fn pooler_seen(&self, found: &str) -> Error {
        let first = self.inner.pooler.get_or_init(|| {
            tracing::warn!(
                found,
                "PostgreSQL pooler detected; session locks refused from now on"
            );
            found.to_string()
        });
        pooler_error(first)
    }

    /// A failed statement's error for `op`: a pooler's sign (a prepared statement taken or
    /// unknown) latches the refusal ([`PostgresClient::pooler_seen`]).
    pub(super) fn statement_error(&self, op: Operation, e: tokio_postgres::Error) -> Error {
        match pooler_sign(&e) {
            Some(found) => self.pooler_seen(&found),
            None => pg_error(op, true, e),
        }
    }

    /// A new connection and its first statement ([`PROBE`]), which must find the server process
    /// the startup announced ([`announced_pid`]): a pooler announces a key of its own, so a
    /// connection through one is refused ([`Error::Topology`], latched) before anything is
    /// prepared on it.
    async fn open_raw(&self) -> Result<Opened> {
        let bound = self.inner.options.connect_timeout;
        let connected =
            tokio::time::timeout(bound, self.inner.config.connect(self.inner.tls.clone())).await;
        let (client, connection) = match connected {
            Ok(r) => r.map_err(|e| pg_error(Operation::Connect, false, e))?,
            Err(_) => return Err(timeout_error(Operation::Connect, false)),
        };
        let closed = CancellationToken::new();
        let on_close = closed.clone();
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                tracing::debug!(error = %e, "PostgreSQL session ended");
            }
            on_close.cancel();
        });
        let pid = self.backend_pid(&client).await?;
        let announced = announced_pid(&client)
            .await
            .map_err(|e| Error::UnexpectedReply {
                op: Operation::Connect,
                detail: format!("the connection's announced server process: {e}"),
            })?;
        if announced != pid {
            return Err(self.pooler_seen(&format!(
                "the connection's startup announced server process {announced} \
                 (BackendKeyData), but server process {pid} serves it (pg_backend_pid())"
            )));
        }
        Ok(Opened {
            client,
            tls: self.inner.tls.clone(),
            closed,
            pid,
        })
    }

    /// Prepares a connection's statements (creating the table first if it is missing).
    async fn prepare(&self, opened: Opened) -> Result<Session> {
        let Opened {
            client,
            tls,
            closed,
            pid,
        } = opened;
        let bound = self.inner.options.connect_timeout;
        // The first statement creates the table on a fresh database: prepare after it.
        let prepare = async {
            let ok = |r: std::result::Result<Statement, tokio_postgres::Error>| r;
            // Prepared concurrently: tokio-postgres pipelines them in one round trip.
            let extend = extend_sql();
            let (a, b, c, d, e) = tokio::join!(
                client.prepare(SET_LOCK_TIMEOUT),
                client.prepare(RELEASE),
                client.prepare(&extend),
                client.prepare(INSPECT),
                client.prepare(RAISE),
            );
            let _ = (d.map(drop), e.map(drop));
            Ok::<_, tokio_postgres::Error>((ok(a)?, ok(b)?, ok(c)?))
        };
        let (set_lock_timeout, release, extend) = tokio::time::timeout(bound, prepare)
            .await
            .map_err(|_| timeout_error(Operation::Connect, true))?
            .map_err(|e| self.statement_error(Operation::Connect, e))?;
        // The acquire statements name the table, which may not exist before connect created it.
        client
            .batch_execute(CREATE_TABLE)
            .await
            .or_else(|e| {
                if e.code() == Some(&SqlState::UNIQUE_VIOLATION)
                    || e.code() == Some(&SqlState::DUPLICATE_TABLE)
                {
                    Ok(())
                } else {
                    Err(e)
                }
            })
            .map_err(|e| pg_error(Operation::Connect, true, e))?;
        let (try_sql, wait_sql) = (try_acquire_sql(false), wait_acquire_sql(false));
        let (t, w) = tokio::join!(client.prepare(&try_sql), client.prepare(&wait_sql));
        let try_acquire = t.map_err(|e| self.statement_error(Operation::Connect, e))?;
        let wait_acquire = w.map_err(|e| self.statement_error(Operation::Connect, e))?;
        Ok(Session {
            client,
            tls,
            closed,
            pid,
            try_acquire,
            wait_acquire,
            set_lock_timeout,
            release,
            extend,
            recording: None,
        })
    }

    /// This client, its plain locks' acquiring and releasing statements appending their
    /// history events as `options` say (a clone sharing the pool: the
    /// [`Locker`](crate::Locker) that records history drives it).
    pub(super) fn recording(&self, options: &HistoryOptions) -> PostgresClient {
        PostgresClient {
            inner: self.inner.clone(),
            history: Some(super::history::rider(self, options)),
        }
    }

    async fn open_session(&self) -> Result<Session> {
        let opened = self.open_raw().await?;
        self.prepare(opened).await
    }

    /// An idle session, or a new one; refused once a pooler's sign was seen
    /// ([`PostgresClient::pooler_seen`]).
    pub(super) async fn take_session(&self) -> Result<Session> {
        if let Some(found) = self.inner.pooler.get() {
            return Err(pooler_error(found));
        }
        loop {
            let next = self
                .inner
                .idle
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .pop();
            match next {
                Some(s) if s.is_closed() => continue,
                Some(s) => return Ok(s),
                None => return self.open_session().await,
            }
        }
    }

    pub(super) fn put_back(&self, session: Session) {
        if session.is_closed() {
            return;
        }
        let mut idle = self.inner.idle.lock().unwrap_or_else(|p| p.into_inner());
        if idle.len() < MAX_IDLE {
            idle.push(session);
        }
    }
}

/// A lock held by one session.
pub(super) struct PgHeld {
    client: PostgresClient,
    key: String,
    token: LockToken,
    session: tokio::sync::Mutex<Option<Session>>,
    /// The session's closed signal (readable without the mutex).
    closed: CancellationToken,
    /// How long the server may keep the session without traffic (ms; see
    /// [`silence_bound`](super::lifetime::silence_bound)), as the last granting or extending
    /// statement read it.
    silence_ms: AtomicU64,
    /// The lease, once handed out: every extend's reply lowers it to that reply's validity (a
    /// reload may have shortened the silence bound; see [`PgHeld::extend_session`]).
    lease: OnceLock<Lease>,
    /// Stops the watcher (on release).
    stop: CancellationToken,
    /// The advisory lock held, when it is not the plain lock on `key` (a reader, a permit's
    /// slot, a writer or leader: see `sync`); released and checked by unnamed statements.
    pub(super) lock: Option<AdvisoryLock>,
    /// Its acquiring statement appended its history event: its release appends one too.
    pub(super) recorded: bool,
}

impl PostgresClient {
    /// The guard of `held`, a grant whose statement was sent at `started` (with `fence`, the
    /// counter it drew): its session is watched, and the client finds it by key and token.
    ///
    /// # Errors
    /// [`Error::ExpiredOnArrival`] for a grant that came too late even for the extend on its
    /// session: it is given back, and the engine retries after its backoff while the deadline
    /// allows (a call to itself here nested one more future per grant: with a TTL that always
    /// expires on arrival, a stack overflow).
    pub(super) async fn guard_of_grant(
        &self,
        held: PgHeld,
        started: Instant,
        fence: Option<i64>,
        options: &LockOptions,
    ) -> Result<LockGuard> {
        let valid_until = held
            .validity_of_grant(started, options.ttl(), held.silence())
            .await?;
        let fencing = fence
            .filter(|_| options.fencing_enabled())
            .map(|f| f as u64);
        let (key, token) = (held.key.clone(), held.token.clone());
        let lease = Lease::until(&key, token.clone(), fencing, valid_until);
        let held = Arc::new(held);
        self.inner
            .held
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert((key, token), held.clone());
        held.watch(lease.clone(), options);
        Ok(LockGuard::new(held, lease))
    }
}

impl std::fmt::Debug for PgHeld {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgHeld")
            .field("key", &self.key)
            .field("token", &self.token)
            .finish_non_exhaustive()
    }
}

impl PgHeld {
    /// A lock `session` was granted; `silence`: the bound the granting statement read.
    pub(super) fn new(
        client: PostgresClient,
        key: &str,
        token: &LockToken,
        session: Session,
        silence: Duration,
    ) -> Self {
        PgHeld {
            client,
            key: key.to_string(),
            token: token.clone(),
            closed: session.closed.clone(),
            silence_ms: AtomicU64::new(millis(silence)),
            lease: OnceLock::new(),
            session: tokio::sync::Mutex::new(Some(session)),
            stop: CancellationToken::new(),
            lock: None,
            recorded: false,
        }
    }

    /// The silence bound the last granting or extending statement read.
    fn silence(&self) -> Duration {
        Duration::from_millis(self.silence_ms.load(Ordering::Acquire))
    }

    /// The validity of a lock granted by a statement sent at `started` (`silence`: what it
    /// read). A grant that comes after its lease lifetime (the statement waited in the server's
    /// queue for longer) is not lost: a session lock cannot lapse while its session lives, so
    /// the same session sends an extend, which checks that it holds the lock and resets the
    /// idle limit, and the lease counts from that extend's send. Only if that extend fails, or
    /// its own reply comes too late, is the lock given back ([`Error::ExpiredOnArrival`]; the
    /// caller's wait retries after its backoff). So a waiter keeps its place in the server's
    /// queue (arrival order) however long it waited.
    pub(super) async fn validity_of_grant(
        &self,
        started: Instant,
        ttl: Duration,
        silence: Duration,
    ) -> Result<Instant> {
        let valid_until = validity_from(started, ttl, silence);
        if Instant::now() < valid_until {
            return Ok(valid_until);
        }
        if let Ok(until) = self.extend_session(ttl).await
            && Instant::now() < until
        {
            return Ok(until);
        }
        let _ = self.release_session().await;
        Err(Error::ExpiredOnArrival {
            key: self.key.clone(),
            elapsed: started.elapsed(),
            ttl: lease_lifetime(ttl, self.silence()),
        })
    }

    fn forget(&self) {
        self.client
            .inner
            .held
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&(self.key.clone(), self.token.clone()));
    }

    /// Reports the loss the moment the session ends, and extends every `renew_interval` when
    /// auto-extension is on (until `max_hold`), within a third of the lease lifetime as the
    /// last statement read it.
    pub(super) fn watch(self: &Arc<Self>, lease: Lease, options: &LockOptions) {
        let _ = self.lease.set(lease.clone());
        let this = Arc::downgrade(self);
        let closed = self.closed.clone();
        let stop = self.stop.clone();
        let ttl = options.ttl();
        // Every statement resets the server's keepalive timer too: renewing within a third of
        // the shorter lifetime keeps both.
        let every = options
            .auto_extend_enabled()
            .then(|| options.renew_interval());
        let renew = move |silence: Duration| {
            every.map(|every| Instant::now() + every.min(lease_lifetime(ttl, silence) / 3))
        };
        let stop_at = options.max_hold_bound().map(|cap| Instant::now() + cap);
        let mut next = renew(self.silence());
        tokio::spawn(async move {
            loop {
                let tick = async {
                    match next {
                        Some(at) => tokio::time::sleep_until(at.into()).await,
                        None => std::future::pending().await,
                    }
                };
                tokio::select! {
                    _ = stop.cancelled() => return,
                    _ = closed.cancelled() => {
                        if !stop.is_cancelled() {
                            lease.mark_lost(LossReason::NotHeld);
                        }
                        return;
                    }
                    _ = tick => {}
                }
                let Some(held) = this.upgrade() else { return };
                if lease.is_ended() || stop_at.is_some_and(|s| Instant::now() >= s) {
                    next = None;
                    continue;
                }
                // Recorded as sent first: only a success raises the validity (guard.rs).
                let sent = Instant::now();
                let bound = validity_from(sent, ttl, held.silence());
                let sent_extend = lease.extend_sent(sent, bound);
                match held.extend_session(ttl).await {
                    Ok(until) => sent_extend.confirm(until.min(bound)),
                    Err(Error::NotHeld { .. }) => {
                        lease.mark_lost(LossReason::NotHeld);
                        return;
                    }
                    // Retried at the next tick; the validity runs out meanwhile if it must
                    // (Lease::lost reports that).
                    Err(e) => tracing::debug!(key = lease.key(), error = %e, "renewal failed"),
                }
                next = renew(held.silence());
            }
        });
    }

    /// Releases the lock (its history event, if any, with its fencing number).
    pub(super) async fn release_session(&self) -> Result<()> {
        self.release_with(true).await
    }

    /// Releases the lock for a release by token, whose history event has no fencing number on
    /// any backend (the token alone does not name the acquisition).
    pub(super) async fn release_by_token(&self) -> Result<()> {
        self.release_with(false).await
    }

    async fn release_with(&self, fencing: bool) -> Result<()> {
        self.stop.cancel();
        self.forget();
        let Some(session) = self.session.lock().await.take() else {
            return Err(Error::NotHeld {
                key: self.key.clone(),
            });
        };
        if session.is_closed() {
            return Err(Error::NotHeld {
                key: self.key.clone(),
            });
        }
        let row = match self.release_statement(&session, fencing).await {
            Ok(row) => row,
            // Dropping the session ends it, which releases the lock anyway.
            Err(e) => return Err(e),
        };
        let unlocked: bool = row.try_get(0).unwrap_or(false);
        self.client.put_back(session);
        if unlocked {
            Ok(())
        } else {
            Err(Error::NotHeld {
                key: self.key.clone(),
            })
        }
    }

    /// The release's statement on `session`: with its history event (with the fencing number if
    /// `fencing`) if the acquisition appended one (sent again without it if the server refused
    /// the history table).
    async fn release_statement(
        &self,
        session: &Session,
        fencing: bool,
    ) -> Result<tokio_postgres::Row> {
        type Param<'a> = &'a (dyn tokio_postgres::types::ToSql + Sync);
        let plain = async || {
            let params: [Param<'_>; 1] = [&self.key];
            let release: BoxFuture<'_, std::result::Result<_, tokio_postgres::Error>> =
                match &self.lock {
                    None => Box::pin(session.client.query_one(&session.release, &params)),
                    Some(lock) => Box::pin(lock.release(&session.client, &self.key)),
                };
            self.client.timed(Operation::Release, release).await
        };
        let known = self.lease.get().and_then(Lease::fencing_token);
        let fencing = known.filter(|_| fencing).map(|n| n as i64);
        let send = async |event: Option<&EventParams>| match (event, &session.recording) {
            (Some(event), Some(statements)) => {
                let mut params: Vec<Param<'_>> = vec![&self.key];
                params.extend(event.values());
                params.push(&fencing);
                let release = session.client.query_one(&statements.release, &params);
                self.client.timed(Operation::Release, release).await
            }
            _ => plain().await,
        };
        let rider =
            (self.client.history.as_ref()).filter(|_| self.recorded && session.recording.is_some());
        let event = Rider::event(rider, &self.token);
        Rider::ride(rider, &event, send, async {}).await.0
    }

    /// Resets the session's idle limit to `ttl` and checks it still holds the lock, on the
    /// server process it started on. The validity, `sent + min(ttl, silence) - drift`, uses the
    /// silence bound this statement read (a `pg_reload_conf()` may have lowered it since the
    /// lock was granted), and the lease's validity is lowered to it at once: the server's TCP
    /// settings apply to a live session when they change, whatever it was told before.
    ///
    /// A server process other than the session's (a pooler moved the connection), or a
    /// statement this connection prepared found unknown, latches the pooler refusal
    /// ([`PostgresClient::pooler_seen`]) and reports the lock not held.
    pub(super) async fn extend_session(&self, ttl: Duration) -> Result<Instant> {
        let guard = self.session.lock().await;
        let Some(session) = guard.as_ref().filter(|s| !s.is_closed()) else {
            return Err(Error::NotHeld {
                key: self.key.clone(),
            });
        };
        let not_held = || Error::NotHeld {
            key: self.key.clone(),
        };
        let started = Instant::now();
        let ttl_text = millis_text(ttl);
        let params: [&(dyn tokio_postgres::types::ToSql + Sync); 2] = [&self.key, &ttl_text];
        let extend: BoxFuture<'_, std::result::Result<_, tokio_postgres::Error>> = match &self.lock
        {
            None => Box::pin(session.client.query_one(&session.extend, &params)),
            Some(lock) => Box::pin(lock.extend(&session.client, &self.key, &ttl_text)),
        };
        let row =
            match tokio::time::timeout(self.client.inner.options.response_timeout, extend).await {
                Err(_) => return Err(timeout_error(Operation::Extend, true)),
                // The session ended while the statement was on its way (the server's idle
                // limit ran out, its process was terminated, the connection dropped): a session
                // lock does not outlive its session, and this one can never be extended again,
                // so not held, as for a session already found closed above. Seen in the Node
                // suite: the next holder's grant came back before this client read the close.
                // Recorded as the connection's own close is, so that a release after it does
                // not send on the ended session either.
                Ok(Err(e)) if session.ended_by(&e) => {
                    session.closed.cancel();
                    return Err(not_held());
                }
                Ok(Err(e)) => {
                    return Err(match self.client.statement_error(Operation::Extend, e) {
                        Error::Topology { .. } => not_held(),
                        e => e,
                    });
                }
                Ok(Ok(row)) => row,
            };
        let bad = unexpected(Operation::Extend);
        let held: bool = row.try_get(1).map_err(&bad)?;
        let pid: i32 = row.try_get(2).map_err(&bad)?;
        let silence = silence_in(&row, 3, Operation::Extend)?;
        if pid != session.pid {
            self.client.pooler_seen(&format!(
                "the server process serving a session changed between two statements (pid {}, \
                 then {pid})",
                session.pid
            ));
            return Err(not_held());
        }
        if !held {
            return Err(not_held());
        }
        self.silence_ms.store(millis(silence), Ordering::Release);
        let until = validity_from(started, ttl, silence);
        if let Some(lease) = self.lease.get() {
            lease.lower_valid_until(until);
        }
        Ok(until)
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

impl HeldLock for PgHeld {
    fn release<'a>(&'a self, _lease: &'a Lease) -> BoxFuture<'a, Result<()>> {
        Box::pin(self.release_session())
    }

    fn records_history(&self) -> bool {
        self.recorded
    }

    fn extend<'a>(&'a self, _lease: &'a Lease, ttl: Duration) -> BoxFuture<'a, Result<Instant>> {
        Box::pin(async move {
            ttl_millis(ttl)?;
            self.extend_session(ttl).await
        })
    }
}

impl Timed for PostgresClient {
    fn response_timeout(&self) -> Duration {
        self.inner.options.response_timeout
    }
}
