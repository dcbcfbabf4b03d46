//! [`PostgresClient`]: connecting, the pool of sessions, and the session that holds a lock
//! (renewed, and reported lost when it ends).

use std::collections::HashMap;
use std::str::FromStr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_util::future::BoxFuture;
use tokio_postgres::Statement;
use tokio_postgres::error::SqlState;
use tokio_util::sync::CancellationToken;

use super::error::{pg_error, timeout_error};
use super::lifetime::{lease_lifetime, silence_bound, validity_from};
use super::params::millis_text;
use super::pooler::{pooler_error, prepare_error};
use super::sql::{
    CREATE_TABLE, EXTEND, INSPECT, PROBE, RAISE, RELEASE, SET_LOCK_TIMEOUT, try_acquire_sql,
    wait_acquire_sql,
};
use super::sync::AdvisoryLock;
use super::tls::{PgTls, connector, take_tls_params};
use super::url::without_lock_param;
use crate::core::error::LossReason;
use crate::core::error::{Error, Operation, Result};
use crate::core::guard::HeldLock;
use crate::core::guard::Lease;
use crate::core::options::{ClientOptions, LockOptions, ttl_millis};
use crate::core::token::LockToken;

/// Idle sessions kept for later acquisitions.
const MAX_IDLE: usize = 16;

/// A client for locks on one PostgreSQL server. Cheap to clone (clones share the pool).
#[derive(Clone)]
pub struct PostgresClient {
    pub(super) inner: Arc<Inner>,
}

pub(super) struct Inner {
    config: tokio_postgres::Config,
    /// The TLS connector the URL's `sslmode` asks for.
    pub(super) tls: PgTls,
    pub(super) options: ClientOptions,
    idle: Mutex<Vec<Session>>,
    /// Locks held through this client, by (key, token): what `release`/`extend` by token find.
    pub(super) held: Mutex<HashMap<(String, LockToken), Arc<PgHeld>>>,
}

impl std::fmt::Debug for PostgresClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let c = &self.inner.config;
        f.debug_struct("PostgresClient")
            .field("hosts", &c.get_hosts())
            .field("ports", &c.get_ports())
            .field("user", &c.get_user())
            .field("dbname", &c.get_dbname())
            .finish_non_exhaustive()
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
    /// How long the server may keep the session when the client goes silent (see
    /// [`silence_bound`]).
    pub(super) silence: Duration,
    pub(super) try_acquire: Statement,
    pub(super) wait_acquire: Statement,
    pub(super) set_lock_timeout: Statement,
    pub(super) release: Statement,
    pub(super) extend: Statement,
}

impl Session {
    pub(super) fn is_closed(&self) -> bool {
        self.closed.is_cancelled() || self.client.is_closed()
    }
}

/// A connection whose first statement ([`PROBE`]) ran; nothing is prepared on it yet.
struct Opened {
    client: tokio_postgres::Client,
    tls: PgTls,
    closed: CancellationToken,
    pid: i32,
    silence: Duration,
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
        let (url, tls_params) = take_tls_params(&without_lock_param(url))?;
        let mut config = tokio_postgres::Config::from_str(&url)
            .map_err(|e| Error::invalid("url", format!("{e} in a PostgreSQL URL")))?;
        let (ssl_mode, tls) = connector(&tls_params, &options)?;
        config.ssl_mode(ssl_mode);
        config.connect_timeout(options.connect_timeout);
        config.keepalives(true);
        config.keepalives_idle(Duration::from_secs(5));
        if config.get_application_name().is_none() {
            config.application_name("leasehold");
        }
        let client = PostgresClient {
            inner: Arc::new(Inner {
                config,
                tls,
                options,
                idle: Mutex::new(Vec::new()),
                held: Mutex::new(HashMap::new()),
            }),
        };
        // Two connections at once: served by one server process, they share server sessions,
        // which only a transaction (or statement) pooler does. On a quiet pool it always
        // shows (PgBouncer hands out the server it got back last); where it does not, the
        // acquiring statement's own checks refuse (see `attempt`).
        let first = client.open_raw().await?;
        let second = client.open_raw().await?;
        if first.pid == second.pid {
            return Err(pooler_error(&format!(
                "two connections at once were served by the same server process (pid {})",
                first.pid
            )));
        }
        let session = client.prepare(first).await?;
        let spare = client.prepare(second).await?;
        match client
            .timed(
                Operation::Connect,
                session.client.batch_execute(CREATE_TABLE),
            )
            .await
        {
            Ok(()) => {}
            // Two clients creating the table at once: one of them loses a race in the
            // catalog; the table is there either way.
            Err(Error::Server { source, .. })
                if source
                    .downcast_ref::<tokio_postgres::Error>()
                    .and_then(|e| e.code())
                    .is_some_and(|c| {
                        *c == SqlState::UNIQUE_VIOLATION || *c == SqlState::DUPLICATE_TABLE
                    }) => {}
            Err(e) => return Err(e),
        }
        client.put_back(spare);
        client.put_back(session);
        Ok(client)
    }

    pub(super) async fn timed<T>(
        &self,
        op: Operation,
        fut: impl std::future::Future<Output = std::result::Result<T, tokio_postgres::Error>>,
    ) -> Result<T> {
        match tokio::time::timeout(self.inner.options.response_timeout, fut).await {
            Ok(r) => r.map_err(|e| pg_error(op, true, e)),
            Err(_) => Err(timeout_error(op, true)),
        }
    }

    /// A new connection and its first statement ([`PROBE`]).
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
        let row = tokio::time::timeout(bound, client.query_typed_one(PROBE, &[]))
            .await
            .map_err(|_| timeout_error(Operation::Connect, true))?
            .map_err(|e| pg_error(Operation::Connect, true, e))?;
        let bad = |e: tokio_postgres::Error| Error::UnexpectedReply {
            op: Operation::Connect,
            detail: e.to_string(),
        };
        let pid: i32 = row.try_get(0).map_err(bad)?;
        let setting = |i: usize| row.try_get::<_, i32>(i).map_err(bad);
        let silence = silence_bound(setting(1)?, setting(2)?, setting(3)?, setting(4)?);
        Ok(Opened {
            client,
            tls: self.inner.tls.clone(),
            closed,
            pid,
            silence,
        })
    }

    /// Prepares a connection's statements (creating the table first if it is missing).
    async fn prepare(&self, opened: Opened) -> Result<Session> {
        let Opened {
            client,
            tls,
            closed,
            pid,
            silence,
        } = opened;
        let bound = self.inner.options.connect_timeout;
        // The first statement creates the table on a fresh database: prepare after it.
        let prepare = async {
            let ok = |r: std::result::Result<Statement, tokio_postgres::Error>| r;
            // Prepared concurrently: tokio-postgres pipelines them in one round trip.
            let (a, b, c, d, e) = tokio::join!(
                client.prepare(SET_LOCK_TIMEOUT),
                client.prepare(RELEASE),
                client.prepare(EXTEND),
                client.prepare(INSPECT),
                client.prepare(RAISE),
            );
            let _ = (d.map(drop), e.map(drop));
            Ok::<_, tokio_postgres::Error>((ok(a)?, ok(b)?, ok(c)?))
        };
        let (set_lock_timeout, release, extend) = tokio::time::timeout(bound, prepare)
            .await
            .map_err(|_| timeout_error(Operation::Connect, true))?
            .map_err(prepare_error)?;
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
        let (try_sql, wait_sql) = (try_acquire_sql(), wait_acquire_sql());
        let (t, w) = tokio::join!(client.prepare(&try_sql), client.prepare(&wait_sql));
        let try_acquire = t.map_err(prepare_error)?;
        let wait_acquire = w.map_err(prepare_error)?;
        Ok(Session {
            client,
            tls,
            closed,
            pid,
            silence,
            try_acquire,
            wait_acquire,
            set_lock_timeout,
            release,
            extend,
        })
    }

    async fn open_session(&self) -> Result<Session> {
        let opened = self.open_raw().await?;
        self.prepare(opened).await
    }

    /// An idle session, or a new one.
    pub(super) async fn take_session(&self) -> Result<Session> {
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
    /// How long the server may keep the session without traffic ([`silence_bound`]).
    silence: Duration,
    /// Stops the watcher (on release).
    stop: CancellationToken,
    /// The advisory lock held, when it is not the plain lock on `key` (a reader, a permit's
    /// slot, a writer or leader: see `sync`); released and checked by unnamed statements.
    pub(super) lock: Option<AdvisoryLock>,
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
    pub(super) fn new(
        client: PostgresClient,
        key: &str,
        token: &LockToken,
        session: Session,
    ) -> Self {
        PgHeld {
            client,
            key: key.to_string(),
            token: token.clone(),
            closed: session.closed.clone(),
            silence: session.silence,
            session: tokio::sync::Mutex::new(Some(session)),
            stop: CancellationToken::new(),
            lock: None,
        }
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
    /// auto-extension is on (until `max_hold`).
    pub(super) fn watch(self: &Arc<Self>, lease: Lease, options: &LockOptions) {
        let this = Arc::downgrade(self);
        let closed = self.closed.clone();
        let stop = self.stop.clone();
        let ttl = options.ttl();
        let silence = self.silence;
        // Every statement resets the server's keepalive timer too: renewing within a third of
        // the shorter lifetime keeps both.
        let renew = options.auto_extend_enabled().then(|| {
            options
                .renew_interval()
                .min(lease_lifetime(ttl, silence) / 3)
        });
        let stop_at = options.max_hold_bound().map(|cap| Instant::now() + cap);
        tokio::spawn(async move {
            let mut next = renew.map(|every| Instant::now() + every);
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
                let bound = validity_from(sent, ttl, silence);
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
                next = renew.map(|every| Instant::now() + every);
            }
        });
    }

    pub(super) async fn release_session(&self) -> Result<()> {
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
        let params: [&(dyn tokio_postgres::types::ToSql + Sync); 1] = [&self.key];
        let release: BoxFuture<'_, std::result::Result<_, tokio_postgres::Error>> = match &self.lock
        {
            None => Box::pin(session.client.query_one(&session.release, &params)),
            Some(lock) => Box::pin(lock.release(&session.client, &self.key)),
        };
        let row = match self.client.timed(Operation::Release, release).await {
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

    pub(super) async fn extend_session(&self, ttl: Duration) -> Result<Instant> {
        let guard = self.session.lock().await;
        let Some(session) = guard.as_ref().filter(|s| !s.is_closed()) else {
            return Err(Error::NotHeld {
                key: self.key.clone(),
            });
        };
        let started = Instant::now();
        let ttl_text = millis_text(ttl);
        let row = match &self.lock {
            None => {
                let params: [&(dyn tokio_postgres::types::ToSql + Sync); 2] =
                    [&self.key, &ttl_text];
                let extend = session.client.query_one(&session.extend, &params);
                self.client.timed(Operation::Extend, extend).await?
            }
            Some(lock) => {
                let extend = lock.extend(&session.client, &self.key, &ttl_text);
                self.client.timed(Operation::Extend, extend).await?
            }
        };
        let held: bool = row.try_get(1).unwrap_or(false);
        if !held {
            return Err(Error::NotHeld {
                key: self.key.clone(),
            });
        }
        Ok(validity_from(started, ttl, self.silence))
    }
}

impl HeldLock for PgHeld {
    fn release<'a>(&'a self, _lease: &'a Lease) -> BoxFuture<'a, Result<()>> {
        Box::pin(self.release_session())
    }

    fn extend<'a>(&'a self, _lease: &'a Lease, ttl: Duration) -> BoxFuture<'a, Result<Instant>> {
        Box::pin(async move {
            ttl_millis(ttl)?;
            self.extend_session(ttl).await
        })
    }
}
