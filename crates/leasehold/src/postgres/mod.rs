//! PostgreSQL as a lock backend (`postgres://` URLs, cargo feature `postgres`): session advisory
//! locks, each on a dedicated connection, with a fencing number drawn in the same statement;
//! and [`FencedRows`], the fenced-write rule for the user's own tables.
//!
//! # How a lock is held
//! Each held lock has a connection (a *session*) of its own, taken from a small pool of idle
//! sessions or opened on demand. One statement, one round trip, takes the session-level
//! advisory lock on `hashtextextended(key, 0)` and, only if it was granted, increments the key's
//! row in the table `leasehold_locks (key, fence, holder)` and returns the new fencing number.
//! A waiting acquisition blocks in the server (`pg_advisory_lock` under `lock_timeout`):
//! PostgreSQL's lock manager queues the waiters and grants the lock to one of them when it is
//! released, so nobody polls and there is no thundering herd.
//!
//! **The TTL is the session's idle limit.** Granting the lock also sets the session's
//! `idle_session_timeout` (PostgreSQL 14+) to the TTL: a holder that sends nothing for a whole
//! TTL (paused, hung, partitioned away) has its session ended by the server, which releases the
//! lock. [`LockGuard::extend`](crate::LockGuard::extend) (and auto-extension, which extends every
//! `renew_interval`) resets that timer. So the lock behaves like a Redis lock with a TTL, and a
//! crashed holder's lock is freed when the server notices the closed connection (at once for a
//! process crash; for a vanished machine, at the TTL).
//!
//! # Guarantees, and under which assumptions
//! * **Mutual exclusion** while the session lives: advisory locks are the server's own. Two keys
//!   whose 64-bit hashes collide exclude each other (a liveness cost, never a safety one).
//! * **Validity.** [`Lease::valid_until`](crate::Lease::valid_until) is counted from before the
//!   granting (or extending) statement was sent, minus the drift allowance; the server's idle
//!   timer starts after that statement *finished*, so `idle_session_timeout` never ends the
//!   session before the lease's validity is over (assuming the server's timer does not run more
//!   than 1% fast).
//! * **The keepalive bound.** The server's TCP stack can end a session sooner: when the client
//!   is partitioned away, the server's keepalive gives up after `tcp_keepalives_idle +
//!   tcp_keepalives_interval × tcp_keepalives_count` seconds of silence, and
//!   `tcp_user_timeout` (when set) after that many ms of unacknowledged data. Each session reads
//!   these settings in its first statement (on TCP the server reports the socket's actual
//!   values; 0 is taken as Linux's defaults, 7200 s, 75 s and 9), and a lease's lifetime is
//!   `min(ttl, idle + interval × count, tcp_user_timeout)`: the validity never outlasts the
//!   earliest moment the server could end the session. Auto-extension renews within a third of
//!   that lifetime. (The settings are read, not overridden: a lease never claims more than the
//!   server's own configuration allows, whatever it is.)
//! * **No pooler in between** that hands server sessions from client to client (a transaction
//!   pooler): see below; such a pooler is detected and session locks are refused.
//! * **Loss is a lost session.** When the connection ends (server restart, session terminated,
//!   idle limit reached, network failure) the lease is reported lost at once
//!   ([`crate::LossReason::NotHeld`]): the lock died with the session.
//! * **Fencing numbers strictly increase per key**, and are drawn in the statement that took
//!   the lock, while it was held; the increment is committed before the reply. A server restart
//!   keeps them (the row is durable), unlike an advisory lock.
//! * **Token-checked release**: only the session that holds the lock can release it, so a
//!   release can never free a later holder's lock. A release or extend with a token this client
//!   does not hold is refused ([`Error::NotHeld`], or [`Error::Unsupported`] when another
//!   process's session holds it: that lock ends with that session).
//!
//! # Through a connection pooler
//! A session lock lives in the server session. A transaction pooler (PgBouncer's
//! `pool_mode=transaction` or `statement`, the default of many managed PostgreSQL services)
//! gives a server session to another client between two transactions of ours: that client
//! would be granted our lock too (advisory locks are reentrant), and our release would run on
//! another session. So session locks are refused with [`Error::Topology`] (whose message says to
//! use `?lock=lease`, or a direct connection or session-mode pool) when:
//! * connecting, two connections open at once are served by the same server process (each
//!   session's first statement reads `pg_backend_pid()`; two sessions of a direct connection or a
//!   session pool never share one; on a quiet transaction pool they do, as PgBouncer hands out
//!   the server it got back last);
//! * preparing a statement finds its name taken or unknown (another client's prepared
//!   statements, on a session that is not ours);
//! * the acquiring statement runs on another server process than the session started on, or on
//!   a server session that already holds the key (one handed over with another client's lock,
//!   also by a session pool whose `server_reset_query` does not release advisory locks): it then
//!   does not ask for the lock, in the same statement, so nothing is granted twice.
//!
//! A busy transaction pool can hide the first sign; the last one still keeps a second client from
//! being granted a lock a session already holds. Lease rows (`?lock=lease`,
//! [`PostgresLeaseClient`]) keep no session state and work through any pooler. A session pool
//! (`pool_mode=session`, with its default `server_reset_query` `DISCARD ALL`, which releases
//! advisory locks when a client leaves) gives each connection its own server session and is fine.
//!
//! # When a lease row is the better choice
//! A session lock cannot outlive its process: `leasehold acquire` (take now, release from
//! another process later) has no meaning here, and every held lock costs a server connection.
//! For thousands of concurrent locks, or locks handed between processes, a row with a token and
//! an expiry (what the Redis backend does with a key) fits better; the session lock is the right
//! tool when the protected data lives in the same database and the lock should die with the
//! worker's connection.

mod lease;

pub use lease::PostgresLeaseClient;

use std::collections::HashMap;
use std::str::FromStr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_util::future::BoxFuture;
use tokio_postgres::error::SqlState;
use tokio_postgres::types::Type;
use tokio_postgres::{NoTls, Statement};
use tokio_util::sync::CancellationToken;

use crate::backend::HeldLock;
use crate::client::{LockState, TryAcquire};
use crate::error::{Error, Operation, Result};
use crate::fencing::{Fence, FencedWrite};
use crate::guard::{Lease, LockGuard, LossReason, clock_drift};
use crate::options::{ClientOptions, LockOptions, ttl_millis};
use crate::token::{LockToken, validate_key};

/// Longest key the PostgreSQL backend accepts, in bytes: the key is the table's primary key,
/// and a B-tree entry must fit in a third of a page (about 2.7 kB).
pub const MAX_PG_KEY_LEN: usize = 2048;

/// Idle sessions kept for later acquisitions.
const MAX_IDLE: usize = 16;

/// The table of fencing counters (created on connect if missing).
const CREATE_TABLE: &str = "CREATE TABLE IF NOT EXISTS leasehold_locks (
    key text PRIMARY KEY,
    fence bigint NOT NULL,
    holder text
)";

/// Whether this session's server process is still the one the session started on (`$4`, its
/// `pg_backend_pid()` then; a pooler may have moved the connection), and whether it already
/// holds the key (a session handed over by a pooler with another client's lock): either one
/// and the lock is not asked for. Advisory locks are reentrant, so the server would grant it.
const CHECK: &str = "\
c AS (SELECT pg_backend_pid() <> $4 AS moved, EXISTS (
    SELECT 1 FROM pg_locks
     WHERE locktype = 'advisory' AND granted AND objsubid = 1 AND pid = pg_backend_pid()
       AND classid::bigint = ((hashtextextended($1, 0) >> 32) & 4294967295)
       AND objid::bigint = (hashtextextended($1, 0) & 4294967295)) AS mine)";

/// After `c` and `l` (`got`): only if granted, the idle limit and the fence increment. One row:
/// `moved`, `mine`, and the new fencing number (NULL: busy, or not asked for).
const GRANTED: &str = "\
s AS (SELECT CASE WHEN l.got THEN set_config('idle_session_timeout', $3, false) END AS t FROM l),
i AS (INSERT INTO leasehold_locks AS t (key, fence, holder)
      SELECT $1, 1, $2 FROM l, s WHERE l.got
      ON CONFLICT (key) DO UPDATE SET fence = t.fence + 1, holder = EXCLUDED.holder
      RETURNING fence)
SELECT c.moved, c.mine, (SELECT fence FROM i) FROM c";

/// One attempt: [`CHECK`], then the advisory lock, and only if granted, [`GRANTED`].
fn try_acquire_sql() -> String {
    format!(
        "WITH {CHECK},\nl AS (SELECT CASE WHEN c.moved OR c.mine THEN false \
         ELSE pg_try_advisory_lock(hashtextextended($1, 0)) END AS got FROM c),\n{GRANTED}"
    )
}

/// A waiting attempt: as [`try_acquire_sql`], but blocks in the server until granted or
/// `lock_timeout` (55P03). The lock is taken inside the `CASE` (evaluated only when reached).
fn wait_acquire_sql() -> String {
    format!(
        "WITH {CHECK},\nl AS (SELECT CASE WHEN c.moved OR c.mine THEN false \
         ELSE (SELECT true FROM (SELECT pg_advisory_lock(hashtextextended($1, 0))) AS w) END AS got \
         FROM c),\n{GRANTED}"
    )
}

/// The first statement of every session (an unnamed statement: nothing is prepared before it
/// is known whether a pooler relays the connection): the server process serving it, and the
/// server's TCP settings that bound how long a silent session can live (see
/// [`silence_bound`]).
const PROBE: &str = "\
SELECT pg_backend_pid(),
       current_setting('tcp_keepalives_idle')::int,
       current_setting('tcp_keepalives_interval')::int,
       current_setting('tcp_keepalives_count')::int,
       coalesce(current_setting('tcp_user_timeout', true), '0')::int";

/// Releases the key on a session whose acquiring statement failed after the advisory lock may
/// have been granted (a `lock_timeout` in the fence row's lock wait).
const UNLOCK: &str = "SELECT pg_advisory_unlock(hashtextextended($1, 0))";

/// Sets `lock_timeout` for the next statement (pipelined with it).
const SET_LOCK_TIMEOUT: &str = "SELECT set_config('lock_timeout', $1, false)";

/// Release: true if this session held the lock; the idle limit is lifted for the pool.
const RELEASE: &str = "\
SELECT pg_advisory_unlock(hashtextextended($1, 0)), set_config('idle_session_timeout', '0', false)";

/// Extend: resets the idle timer (any statement does) to the new TTL, and says whether this
/// session still holds the lock.
const EXTEND: &str = "\
SELECT set_config('idle_session_timeout', $2, false), EXISTS (
    SELECT 1 FROM pg_locks
     WHERE locktype = 'advisory' AND granted AND objsubid = 1 AND pid = pg_backend_pid()
       AND classid::bigint = ((hashtextextended($1, 0) >> 32) & 4294967295)
       AND objid::bigint = (hashtextextended($1, 0) & 4294967295))";

/// The holder's session (if any), the counter and the last holder's token.
const INSPECT: &str = "\
SELECT (SELECT pid FROM pg_locks
         WHERE locktype = 'advisory' AND granted AND objsubid = 1
           AND classid::bigint = ((hashtextextended($1, 0) >> 32) & 4294967295)
           AND objid::bigint = (hashtextextended($1, 0) & 4294967295)
         LIMIT 1),
       (SELECT fence FROM leasehold_locks WHERE key = $1),
       (SELECT holder FROM leasehold_locks WHERE key = $1)";

/// Raises the counter to at least `$2`.
const RAISE: &str = "\
INSERT INTO leasehold_locks AS t (key, fence) VALUES ($1, $2)
ON CONFLICT (key) DO UPDATE SET fence = GREATEST(t.fence, EXCLUDED.fence)
RETURNING fence";

/// A client for locks on one PostgreSQL server. Cheap to clone (clones share the pool).
#[derive(Clone)]
pub struct PostgresClient {
    inner: Arc<Inner>,
}

struct Inner {
    config: tokio_postgres::Config,
    options: ClientOptions,
    idle: Mutex<Vec<Session>>,
    /// Locks held through this client, by (key, token): what `release`/`extend` by token find.
    held: Mutex<HashMap<(String, LockToken), Arc<PgHeld>>>,
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
struct Session {
    client: tokio_postgres::Client,
    /// Cancelled when the connection ends (for whatever reason).
    closed: CancellationToken,
    /// The server process serving it (`pg_backend_pid()` at its first statement).
    pid: i32,
    /// How long the server may keep the session when the client goes silent (see
    /// [`silence_bound`]).
    silence: Duration,
    try_acquire: Statement,
    wait_acquire: Statement,
    set_lock_timeout: Statement,
    release: Statement,
    extend: Statement,
}

impl Session {
    fn is_closed(&self) -> bool {
        self.closed.is_cancelled() || self.client.is_closed()
    }
}

/// A connection whose first statement ([`PROBE`]) ran; nothing is prepared on it yet.
struct Opened {
    client: tokio_postgres::Client,
    closed: CancellationToken,
    pid: i32,
    silence: Duration,
}

/// Linux's defaults for a socket's keepalive, which PostgreSQL uses where its settings are 0
/// (`tcp_keepalives_idle` 7200 s, `tcp_keepalives_interval` 75 s, `tcp_keepalives_count` 9).
/// On a TCP connection the server reports the socket's actual values, so these apply only to
/// connections without TCP keepalive (a Unix socket, where nothing can be partitioned).
const OS_KEEPALIVE: (u64, u64, u64) = (7200, 75, 9);

/// The earliest the server's TCP stack can end a session whose client went silent (a
/// partition), counted from when the server last received from it, which is after the client
/// sent its last statement:
///
/// `min(idle + interval × count, tcp_user_timeout)`, where `idle`, `interval` (s) and `count`
/// are the server's `tcp_keepalives_*` (0: [`OS_KEEPALIVE`]) and `tcp_user_timeout` (ms) counts
/// only when set (0: the kernel's retransmission limits, many minutes). PostgreSQL turns
/// keepalive on for every TCP connection; the keepalive probes start after `idle` seconds
/// without traffic and the connection is dropped after `count` unanswered probes, `interval`
/// apart; with `tcp_user_timeout` set, Linux drops a connection whose data or probes stay
/// unacknowledged that long. The minimum of the two is a lower bound for both.
pub(crate) fn silence_bound(
    idle_s: i32,
    interval_s: i32,
    count: i32,
    user_timeout_ms: i32,
) -> Duration {
    let or = |v: i32, default: u64| u64::try_from(v).ok().filter(|v| *v > 0).unwrap_or(default);
    let keepalive = Duration::from_secs(
        or(idle_s, OS_KEEPALIVE.0) + or(interval_s, OS_KEEPALIVE.1) * or(count, OS_KEEPALIVE.2),
    );
    match u64::try_from(user_timeout_ms) {
        Ok(ms) if ms > 0 => keepalive.min(Duration::from_millis(ms)),
        _ => keepalive,
    }
}

/// The lifetime a lease of `ttl` can count on, on a session the server may end after `silence`
/// without traffic: the shorter one.
fn lease_lifetime(ttl: Duration, silence: Duration) -> Duration {
    ttl.min(silence)
}

/// The validity of a lease whose statement was sent at `sent`: `sent + lifetime - drift`.
fn validity_from(sent: Instant, ttl: Duration, silence: Duration) -> Instant {
    let life = lease_lifetime(ttl, silence);
    sent + life.saturating_sub(clock_drift(life))
}

/// Session locks refused: the URL reaches a pooler that does not give this connection a
/// server session of its own. `found`: what showed it.
fn pooler_error(found: &str) -> Error {
    Error::Topology {
        reason: format!(
            "postgres: {found}, so the URL reaches a connection pooler that hands server \
             sessions from client to client (PgBouncer's pool_mode=transaction or statement, \
             the default of many managed PostgreSQL services; or a session pool that does not \
             release advisory locks when a client leaves). A session lock lives in the server \
             session, so another client could be granted it too: session locks are refused. \
             Use lease rows (add ?lock=lease to the URL), or connect to PostgreSQL directly or \
             through a session-mode pool (pool_mode=session, server_reset_query DISCARD ALL)"
        ),
    }
}

/// A prepare that fails because the statement name is taken or unknown cannot happen on a
/// server session of our own: a pooler moved the connection to another client's session.
fn prepare_error(e: tokio_postgres::Error) -> Error {
    let code = e.code();
    if code == Some(&SqlState::DUPLICATE_PSTATEMENT)
        || code == Some(&SqlState::INVALID_SQL_STATEMENT_NAME)
    {
        return pooler_error(&format!("preparing a statement failed ({e})"));
    }
    pg_error(Operation::Connect, true, e)
}

/// Classifies a PostgreSQL client error. `sent`: the statement may have reached the server.
pub(crate) fn pg_error(op: Operation, sent: bool, e: tokio_postgres::Error) -> Error {
    if let Some(db) = e.as_db_error() {
        let code = db.code();
        if *code == SqlState::INVALID_PASSWORD
            || *code == SqlState::INVALID_AUTHORIZATION_SPECIFICATION
        {
            return Error::Authentication { source: e.into() };
        }
        if *code == SqlState::INSUFFICIENT_PRIVILEGE {
            return Error::PermissionDenied {
                op,
                source: e.into(),
            };
        }
        if *code == SqlState::ADMIN_SHUTDOWN
            || *code == SqlState::CRASH_SHUTDOWN
            || *code == SqlState::CANNOT_CONNECT_NOW
            || code.code() == "57P05"
        // idle_session_timeout
        {
            return Error::Connection {
                op,
                ambiguous: sent && op != Operation::Connect,
                source: e.into(),
            };
        }
        return Error::Server {
            op,
            source: e.into(),
        };
    }
    Error::Connection {
        op,
        ambiguous: sent && op != Operation::Connect,
        source: e.into(),
    }
}

pub(crate) fn timeout_error(op: Operation, sent: bool) -> Error {
    Error::Connection {
        op,
        ambiguous: sent,
        source: std::io::Error::new(std::io::ErrorKind::TimedOut, "no reply in time").into(),
    }
}

pub(crate) fn validate_pg_key(key: &str) -> Result<()> {
    validate_key(key)?;
    if key.len() > MAX_PG_KEY_LEN {
        return Err(Error::invalid(
            "key",
            format!(
                "{} bytes is longer than PostgreSQL's limit of {MAX_PG_KEY_LEN} (the key is a \
                 primary key)",
                key.len()
            ),
        ));
    }
    if key.contains('\0') {
        return Err(Error::invalid(
            "key",
            "PostgreSQL text cannot hold a NUL byte",
        ));
    }
    Ok(())
}

/// `url` without its `lock=…` query parameter (leasehold's, not PostgreSQL's: `lock=lease`
/// picks [`PostgresLeaseClient`], `lock=session` the default [`PostgresClient`]).
pub(crate) fn without_lock_param(url: &str) -> String {
    let Some((base, query)) = url.split_once('?') else {
        return url.to_string();
    };
    let rest: Vec<&str> = query
        .split('&')
        .filter(|p| !p.is_empty() && p.split('=').next() != Some("lock"))
        .collect();
    if rest.is_empty() {
        base.to_string()
    } else {
        format!("{base}?{}", rest.join("&"))
    }
}

/// Whether a `postgres://` URL asks for lease rows (`lock=lease`), or for session locks.
///
/// # Errors
/// [`Error::InvalidArgument`] for another `lock=` value.
pub(crate) fn wants_lease_rows(url: &str) -> Result<bool> {
    let query = url.split_once('?').map_or("", |(_, q)| q);
    match query.split('&').find_map(|p| p.strip_prefix("lock=")) {
        None | Some("session") => Ok(false),
        Some("lease") => Ok(true),
        Some(other) => Err(Error::invalid(
            "url",
            format!("lock={other:?}: use lock=session (the default) or lock=lease"),
        )),
    }
}

pub(crate) fn millis_text(d: Duration) -> String {
    // 0 would mean "no limit" to PostgreSQL: never below 1 ms.
    d.as_millis().clamp(1, i32::MAX as u128).to_string()
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
    /// credentials, and creates the table `leasehold_locks` if it is missing. TLS is not
    /// offered yet (`sslmode=require` is refused).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a malformed URL; [`Error::Connection`] if the server
    /// cannot be reached within the connect timeout; [`Error::Authentication`] for refused
    /// credentials; [`Error::PermissionDenied`] if the table cannot be created.
    pub async fn connect_with(url: &str, options: ClientOptions) -> Result<Self> {
        let url = without_lock_param(url);
        let mut config = tokio_postgres::Config::from_str(&url)
            .map_err(|e| Error::invalid("url", format!("{e} in a PostgreSQL URL")))?;
        config.connect_timeout(options.connect_timeout);
        config.keepalives(true);
        config.keepalives_idle(Duration::from_secs(5));
        if config.get_application_name().is_none() {
            config.application_name("leasehold");
        }
        let client = PostgresClient {
            inner: Arc::new(Inner {
                config,
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

    async fn timed<T>(
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
        let connected = tokio::time::timeout(bound, self.inner.config.connect(NoTls)).await;
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
            closed,
            pid,
            silence,
        })
    }

    /// Prepares a connection's statements (creating the table first if it is missing).
    async fn prepare(&self, opened: Opened) -> Result<Session> {
        let Opened {
            client,
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
    async fn take_session(&self) -> Result<Session> {
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

    fn put_back(&self, session: Session) {
        if session.is_closed() {
            return;
        }
        let mut idle = self.inner.idle.lock().unwrap_or_else(|p| p.into_inner());
        if idle.len() < MAX_IDLE {
            idle.push(session);
        }
    }

    /// One attempt to take `key`, without waiting: `pg_try_advisory_lock` and the fencing
    /// number in one statement.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a bad key or TTL, or for options PostgreSQL has no
    /// counterpart for ([`LockOptions::replica_ack`]: [`Error::Unsupported`]); connection and
    /// server errors.
    pub async fn try_acquire(&self, key: &str, options: &LockOptions) -> Result<TryAcquire> {
        self.check(key, options)?;
        match self.attempt(key, options, None).await? {
            Some(guard) => Ok(TryAcquire::Acquired(guard)),
            None => Ok(TryAcquire::Busy { remaining: None }),
        }
    }

    /// Takes `key`, waiting in the server's lock queue until `options.wait_bound()` (one
    /// attempt if none was set). Waiters are granted the lock by the server when it is
    /// released: no polling, no thundering herd.
    ///
    /// # Errors
    /// [`Error::NotAcquired`] when the lock stayed busy until the deadline; as
    /// [`PostgresClient::try_acquire`] otherwise.
    pub async fn acquire(&self, key: &str, options: &LockOptions) -> Result<LockGuard> {
        self.check(key, options)?;
        let begun = Instant::now();
        let deadline = options.wait_bound().map(|w| begun + w);
        let mut attempts = 0;
        loop {
            attempts += 1;
            let wait = deadline.map(|d| d.saturating_duration_since(Instant::now()));
            match self.attempt(key, options, wait).await {
                Ok(Some(guard)) => return Ok(guard),
                Ok(None) => {
                    return Err(Error::NotAcquired {
                        key: key.to_string(),
                        waited: begun.elapsed(),
                        attempts,
                    });
                }
                // A session that died under us (a server restart, a dropped connection): the
                // attempt's session was closed, which frees anything it was granted, so a new
                // session may try again while the deadline allows.
                Err(e @ Error::Connection { .. }) => {
                    let Some(deadline) = deadline.filter(|d| Instant::now() < *d) else {
                        return Err(e);
                    };
                    tracing::debug!(key, error = %e, "PostgreSQL session lost while waiting; retrying");
                    let delay = options.backoff_policy().delay(attempts - 1);
                    tokio::time::sleep(
                        delay.min(deadline.saturating_duration_since(Instant::now())),
                    )
                    .await;
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Waits for `key`, runs `work`, and releases whatever happens (see
    /// [`LockClient::with_lock`](crate::LockClient::with_lock)).
    ///
    /// # Errors
    /// As [`LockClient::with_lock`](crate::LockClient::with_lock).
    pub async fn with_lock<T, F, Fut>(&self, key: &str, options: &LockOptions, work: F) -> Result<T>
    where
        F: FnOnce(Lease) -> Fut,
        Fut: std::future::Future<Output = T>,
    {
        let guard = self.acquire(key, options).await?;
        crate::guard::run_with_lock(guard, options, work).await
    }

    fn check(&self, key: &str, options: &LockOptions) -> Result<()> {
        validate_pg_key(key)?;
        ttl_millis(options.ttl())?;
        if options.ttl() > Duration::from_millis(i32::MAX as u64) {
            return Err(Error::invalid(
                "ttl",
                "PostgreSQL's idle_session_timeout holds at most 24.8 days",
            ));
        }
        if options.replica_ack_required().is_some() {
            return Err(Error::Unsupported {
                backend: "postgres",
                what: "replica acknowledgement (replica_ack)".into(),
            });
        }
        Ok(())
    }

    /// One acquisition on a session of its own; `wait`: block in the server up to that long.
    async fn attempt(
        &self,
        key: &str,
        options: &LockOptions,
        wait: Option<Duration>,
    ) -> Result<Option<LockGuard>> {
        let session = self.take_session().await?;
        let token = LockToken::random();
        let ttl = options.ttl();
        let ttl_text = millis_text(ttl);
        let started = Instant::now();
        // If this future is dropped mid-statement, the server may grant the lock to a session
        // nobody owns: the armed cleanup closes that session, which releases whatever it holds.
        let mut cleanup = AbandonedSession(Some(session));
        let s = cleanup.0.as_ref().expect("armed");
        let pid = s.pid;
        let params: [&(dyn tokio_postgres::types::ToSql + Sync); 4] =
            [&key, &token.expose(), &ttl_text, &pid];
        let reply = match wait {
            None => tokio::time::timeout(
                self.inner.options.response_timeout,
                s.client.query_one(&s.try_acquire, &params),
            )
            .await
            .map_err(|_| timeout_error(Operation::Acquire, true))?,
            Some(wait) => {
                // Pipelined: one round trip for the timeout and the blocking acquisition. The
                // reply may take up to `wait`; the response timeout counts after that.
                let wait_text = millis_text(wait);
                let set_params: [&(dyn tokio_postgres::types::ToSql + Sync); 1] = [&wait_text];
                let set = s.client.query_one(&s.set_lock_timeout, &set_params);
                let acquire = s.client.query_one(&s.wait_acquire, &params);
                let both = async { tokio::join!(set, acquire) };
                let bound = wait + self.inner.options.response_timeout;
                match tokio::time::timeout(bound, both).await {
                    Err(_) => return Err(timeout_error(Operation::Acquire, true)),
                    Ok((Err(e), _)) => return Err(pg_error(Operation::Acquire, true, e)),
                    Ok((Ok(_), Err(e))) if e.code() == Some(&SqlState::LOCK_NOT_AVAILABLE) => {
                        // Timed out in a lock queue: the advisory lock's, or, after the advisory
                        // lock was granted, the fence row's (held by someone's open
                        // transaction). The lock survives the statement's rollback: release it
                        // before the session goes back to the pool (or close the session).
                        let session = cleanup.disarm();
                        self.unlock_or_discard(session, key).await;
                        return Ok(None);
                    }
                    Ok((Ok(_), r)) => r,
                }
            }
        };
        let row = reply.map_err(|e| pg_error(Operation::Acquire, true, e))?;
        let bad = |e: tokio_postgres::Error| Error::UnexpectedReply {
            op: Operation::Acquire,
            detail: e.to_string(),
        };
        let moved: bool = row.try_get(0).map_err(bad)?;
        let mine: bool = row.try_get(1).map_err(bad)?;
        let fence: Option<i64> = row.try_get(2).map_err(bad)?;
        if moved {
            // Dropped armed: the connection is closed.
            return Err(pooler_error(&format!(
                "the server process serving this connection changed between two statements \
                 (pid {pid}, then another)"
            )));
        }
        if mine {
            return Err(pooler_error(&format!(
                "this connection's server session already held the lock {key:?} before asking \
                 for it (advisory locks are reentrant: it would have been granted twice)"
            )));
        }
        let Some(fence) = fence else {
            let session = cleanup.disarm();
            self.put_back(session);
            return Ok(None);
        };
        let session = cleanup.disarm();
        let silence = session.silence;
        let valid_until = validity_from(started, ttl, silence);
        if Instant::now() >= valid_until {
            // Granted too late to be a lease (see LockClient::try_acquire): give it back.
            let held = PgHeld::new(self.clone(), key, &token, session);
            let _ = held.release_session().await;
            if wait.is_some() {
                return Box::pin(self.attempt(
                    key,
                    options,
                    wait.map(|w| w.saturating_sub(started.elapsed())),
                ))
                .await;
            }
            return Err(Error::ExpiredOnArrival {
                key: key.to_string(),
                elapsed: started.elapsed(),
                ttl: lease_lifetime(ttl, silence),
            });
        }
        let fencing = options.fencing_enabled().then_some(fence as u64);
        let lease = Lease::until(key, token.clone(), fencing, valid_until);
        let held = Arc::new(PgHeld::new(self.clone(), key, &token, session));
        self.inner
            .held
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert((key.to_string(), token), held.clone());
        held.watch(lease.clone(), options);
        Ok(Some(LockGuard::new(held, lease)))
    }

    /// After a failed acquiring statement that may have been granted the advisory lock: the
    /// session unlocks `key` and goes back to the pool, or, if that fails, is closed (which
    /// ends whatever it holds).
    async fn unlock_or_discard(&self, session: Session, key: &str) {
        let params: [(&(dyn tokio_postgres::types::ToSql + Sync), Type); 1] = [(&key, Type::TEXT)];
        let unlock = session.client.query_typed_one(UNLOCK, &params);
        match tokio::time::timeout(self.inner.options.response_timeout, unlock).await {
            Ok(Ok(_)) => self.put_back(session),
            // Dropped: the connection closes, the server ends the session and its locks.
            _ => drop(session),
        }
    }

    fn find_held(&self, key: &str, token: &LockToken) -> Option<Arc<PgHeld>> {
        self.inner
            .held
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&(key.to_string(), token.clone()))
            .cloned()
    }

    /// The same as [`release`](Self::release): the server's lock queue and its session locks already hand the lock to the
    /// longest waiter, so a fair lock needs nothing more.
    ///
    /// # Errors
    /// As [`release`](Self::release).
    pub async fn release_fair(&self, key: &str, token: &LockToken) -> Result<()> {
        self.release(key, token).await
    }

    /// Releases `key` if this client holds it with `token`.
    ///
    /// # Errors
    /// [`Error::NotHeld`] if it does not; [`Error::Unsupported`] if another process's session
    /// holds it with that token (only that session can release it; the lock ends with it).
    pub async fn release(&self, key: &str, token: &LockToken) -> Result<()> {
        validate_pg_key(key)?;
        match self.find_held(key, token) {
            Some(held) => held.release_session().await,
            None => Err(self.not_ours(key, token, "releasing").await),
        }
    }

    /// Extends `key` to `ttl` from now if this client holds it with `token`.
    ///
    /// # Errors
    /// As [`PostgresClient::release`].
    pub async fn extend(&self, key: &str, token: &LockToken, ttl: Duration) -> Result<()> {
        validate_pg_key(key)?;
        ttl_millis(ttl)?;
        match self.find_held(key, token) {
            Some(held) => held.extend_session(ttl).await.map(|_| ()),
            None => Err(self.not_ours(key, token, "extending").await),
        }
    }

    async fn not_ours(&self, key: &str, token: &LockToken, what: &str) -> Error {
        match self.inspect(key).await {
            Ok(state) if state.holder.as_deref() == Some(token.expose()) => Error::Unsupported {
                backend: "postgres",
                what: format!(
                    "{what} a session lock held by another connection (it ends with that session)"
                ),
            },
            Ok(_) => Error::NotHeld {
                key: key.to_string(),
            },
            Err(e) => e,
        }
    }

    /// Who holds `key` (the token of the session holding the advisory lock), and its fencing
    /// counter. `ttl` is `None`: a session lock has no expiry of its own (see the module docs).
    ///
    /// # Errors
    /// Connection and server errors.
    pub async fn inspect(&self, key: &str) -> Result<LockState> {
        validate_pg_key(key)?;
        let session = self.take_session().await?;
        let row = self
            .timed(
                Operation::Inspect,
                session.client.query_one(INSPECT, &[&key]),
            )
            .await?;
        self.put_back(session);
        let bad = |e: tokio_postgres::Error| Error::UnexpectedReply {
            op: Operation::Inspect,
            detail: e.to_string(),
        };
        let pid: Option<i32> = row.try_get(0).map_err(bad)?;
        let fence: Option<i64> = row.try_get(1).map_err(bad)?;
        let holder: Option<String> = row.try_get(2).map_err(bad)?;
        Ok(LockState {
            key: key.to_string(),
            holder: pid.and(holder),
            ttl: None,
            fencing_counter: fence.map(|f| f as u64),
        })
    }

    /// Raises `key`'s fencing counter to at least `at_least` and returns it.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] above `i64::MAX`; connection and server errors.
    pub async fn raise_fencing_counter(&self, key: &str, at_least: u64) -> Result<u64> {
        validate_pg_key(key)?;
        let n = i64::try_from(at_least)
            .map_err(|_| Error::invalid("fencing number", "above PostgreSQL's bigint"))?;
        let session = self.take_session().await?;
        let row = self
            .timed(
                Operation::RaiseFencingCounter,
                session.client.query_one(RAISE, &[&key, &n]),
            )
            .await?;
        self.put_back(session);
        let fence: i64 = row.try_get(0).map_err(|e| Error::UnexpectedReply {
            op: Operation::RaiseFencingCounter,
            detail: e.to_string(),
        })?;
        Ok(fence as u64)
    }
}

/// A session whose acquisition is in flight: dropped armed, it closes the connection (which
/// releases anything the server granted it).
struct AbandonedSession(Option<Session>);

impl AbandonedSession {
    fn disarm(&mut self) -> Session {
        self.0.take().expect("disarmed once")
    }
}

impl Drop for AbandonedSession {
    fn drop(&mut self) {
        if let Some(session) = self.0.take() {
            // A cancel request stops a statement blocked in the lock queue at once; closing the
            // connection then ends the session (and any lock it got meanwhile).
            let cancel = session.client.cancel_token();
            drop(session);
            if let Ok(handle) = tokio::runtime::Handle::try_current() {
                handle.spawn(async move {
                    let _ = cancel.cancel_query(NoTls).await;
                });
            }
        }
    }
}

/// A lock held by one session.
struct PgHeld {
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
    fn new(client: PostgresClient, key: &str, token: &LockToken, session: Session) -> Self {
        PgHeld {
            client,
            key: key.to_string(),
            token: token.clone(),
            closed: session.closed.clone(),
            silence: session.silence,
            session: tokio::sync::Mutex::new(Some(session)),
            stop: CancellationToken::new(),
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
    fn watch(self: &Arc<Self>, lease: Lease, options: &LockOptions) {
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
                let seq = lease.extend_sent(bound);
                match held.extend_session(ttl).await {
                    Ok(until) => lease.extend_confirmed(seq, until.min(bound)),
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

    async fn release_session(&self) -> Result<()> {
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
        let row = match self
            .client
            .timed(
                Operation::Release,
                session.client.query_one(&session.release, &[&self.key]),
            )
            .await
        {
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

    async fn extend_session(&self, ttl: Duration) -> Result<Instant> {
        let guard = self.session.lock().await;
        let Some(session) = guard.as_ref().filter(|s| !s.is_closed()) else {
            return Err(Error::NotHeld {
                key: self.key.clone(),
            });
        };
        let started = Instant::now();
        let row = self
            .client
            .timed(
                Operation::Extend,
                session
                    .client
                    .query_one(&session.extend, &[&self.key, &millis_text(ttl)]),
            )
            .await?;
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

crate::backend::impl_lock_backend!(PostgresClient, "postgres");

/// The fenced-write rule for rows of the user's own tables: a write carries the writer's
/// [`Fence`] and is applied only if
///
/// ```sql
/// fence < $n OR (fence = $n AND holder = sha256($token))
/// ```
///
/// so a holder whose number is lower than one the row has already seen is refused, and an
/// equal number is accepted only from the holder that claimed it first (two holders can get
/// the same number only if a lock's counter lost an increment, e.g. in a failover). The row
/// keeps the number and a SHA-256 of the token (never the token itself). The same rule as
/// [`FencedStore`](crate::FencedStore) on Redis and the checker's register.
///
/// The table needs two extra columns, `fence bigint NOT NULL DEFAULT 0` and
/// `holder text NOT NULL DEFAULT ''` (names configurable); [`FencedRows::add_columns_sql`]
/// returns the `ALTER TABLE` that adds them.
///
/// ```no_run
/// # async fn demo(pg: &tokio_postgres::Client, guard: &leasehold::LockGuard) -> leasehold::Result<()> {
/// use leasehold::postgres::FencedRows;
/// let accounts = FencedRows::new("accounts", "id");
/// let fence = guard.fence().expect("acquired with fencing on");
/// // UPDATE accounts SET balance = $3, fence = .., holder = .. WHERE id = $4 AND <the rule>
/// let applied = accounts
///     .update(pg, &fence, "balance = $3", &[&42_i64, &"alice"])
///     .await?;
/// assert!(applied.is_accepted());
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct FencedRows {
    table: String,
    key_column: String,
    fence_column: String,
    holder_column: String,
}

/// Quotes an SQL identifier (`"name"`, with inner quotes doubled).
fn quote_ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

impl FencedRows {
    /// Rows of `table`, identified by `key_column`, with the columns `fence` and `holder`.
    pub fn new(table: impl Into<String>, key_column: impl Into<String>) -> Self {
        FencedRows {
            table: table.into(),
            key_column: key_column.into(),
            fence_column: "fence".into(),
            holder_column: "holder".into(),
        }
    }

    /// Other names for the fence and holder columns.
    pub fn columns(mut self, fence: impl Into<String>, holder: impl Into<String>) -> Self {
        self.fence_column = fence.into();
        self.holder_column = holder.into();
        self
    }

    /// `ALTER TABLE … ADD COLUMN IF NOT EXISTS` for the two columns.
    pub fn add_columns_sql(&self) -> String {
        format!(
            "ALTER TABLE {t} ADD COLUMN IF NOT EXISTS {f} bigint NOT NULL DEFAULT 0, \
             ADD COLUMN IF NOT EXISTS {h} text NOT NULL DEFAULT ''",
            t = quote_ident(&self.table),
            f = quote_ident(&self.fence_column),
            h = quote_ident(&self.holder_column),
        )
    }

    /// The condition, for statements of your own: `$n` is the fencing number's parameter and
    /// `$t` the token's (both 1-based positions).
    pub fn condition_sql(&self, n: usize, t: usize) -> String {
        format!(
            "({f} < ${n} OR ({f} = ${n} AND {h} = encode(sha256(convert_to(${t}::text, 'UTF8')), 'hex')))",
            f = quote_ident(&self.fence_column),
            h = quote_ident(&self.holder_column),
        )
    }

    /// `UPDATE table SET <set>, fence = $1, holder = sha256($2) WHERE key = $<last> AND
    /// <the rule>`: `params` are the parameters of `set` from `$3` on, followed by the row's
    /// key (the last parameter). Returns whether the row was updated ([`FencedWrite::Rejected`]
    /// carries the number the row holds, or 0 if there is no such row).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a fencing number above `i64::MAX` or no key parameter;
    /// [`Error::Server`] / [`Error::Connection`] from PostgreSQL.
    pub async fn update(
        &self,
        client: &impl tokio_postgres::GenericClient,
        fence: &Fence,
        set: &str,
        params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
    ) -> Result<FencedWrite> {
        if params.is_empty() {
            return Err(Error::invalid(
                "params",
                "the last parameter must be the row's key",
            ));
        }
        let n = i64::try_from(fence.number())
            .map_err(|_| Error::invalid("fencing number", "above PostgreSQL's bigint"))?;
        let key_param = params.len() + 2;
        let sql = format!(
            "UPDATE {t} SET {set}, {f} = $1, {h} = encode(sha256(convert_to($2::text, 'UTF8')), 'hex') \
             WHERE {k} = ${key_param} AND {cond}",
            t = quote_ident(&self.table),
            f = quote_ident(&self.fence_column),
            h = quote_ident(&self.holder_column),
            k = quote_ident(&self.key_column),
            cond = self.condition_sql(1, 2),
        );
        let token = fence.token().expose();
        let mut all: Vec<&(dyn tokio_postgres::types::ToSql + Sync)> = vec![&n, &token];
        all.extend_from_slice(params);
        let rows = client
            .execute(sql.as_str(), &all)
            .await
            .map_err(|e| pg_error(Operation::FencedWrite, true, e))?;
        if rows > 0 {
            return Ok(FencedWrite::Accepted);
        }
        let seen = format!(
            "SELECT {f} FROM {t} WHERE {k} = $1",
            f = quote_ident(&self.fence_column),
            t = quote_ident(&self.table),
            k = quote_ident(&self.key_column),
        );
        let key = *params.last().expect("checked above");
        let highest: Option<i64> = client
            .query_opt(seen.as_str(), &[key])
            .await
            .map_err(|e| pg_error(Operation::FencedWrite, true, e))?
            .map(|r| r.get(0));
        Ok(FencedWrite::Rejected {
            highest: highest.unwrap_or(0) as u64,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_silence_bound_is_the_earlier_of_keepalive_and_user_timeout() {
        let s = Duration::from_secs;
        // Unset (0): Linux's defaults, 7200 + 75 x 9 s.
        assert_eq!(silence_bound(0, 0, 0, 0), s(7875));
        assert_eq!(silence_bound(3, 1, 2, 0), s(5));
        assert_eq!(silence_bound(3, 1, 2, 4000), s(4));
        assert_eq!(silence_bound(3, 1, 2, 60_000), s(5));
        assert_eq!(silence_bound(-1, 10, 0, -5), s(7200 + 90));
        assert_eq!(lease_lifetime(s(60), s(5)), s(5));
        assert_eq!(lease_lifetime(s(2), s(5)), s(2));
        let now = Instant::now();
        assert!(validity_from(now, s(60), s(5)) <= now + s(5));
    }

    #[test]
    fn the_acquiring_statements_check_before_they_lock() {
        for sql in [try_acquire_sql(), wait_acquire_sql()] {
            let check = sql.find("AS mine").unwrap();
            let lock = sql.find("advisory_lock(").unwrap();
            assert!(check < lock, "{sql}");
            assert!(sql.contains("WHEN c.moved OR c.mine THEN false"));
        }
    }
}
