//! Session locks: acquiring, releasing, extending and inspecting through [`PostgresClient`].

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio_postgres::types::Type;

use super::client::{PgHeld, PostgresClient, Recording, Session};
use super::history::{EventParams, Rider};
use super::lifetime::silence_in;
use super::params::{millis_text, validate_pg_key};
use super::sql::{
    INSPECT, RAISE, UNLOCK, release_recording_sql, try_acquire_sql, wait_acquire_sql,
};
use super::sync::{AdvisoryAsk, acquiring_reply};
use crate::core::acquire::{Ask, Attempts};
use crate::core::driver::{Driver, Kind, not_held_here};
use crate::core::error::{Error, Operation, Result};
use crate::core::guard::LockGuard;
use crate::core::kind::{Backend, Taking};
use crate::core::options::{LockOptions, ttl_millis};
use crate::core::outcome::{LockState, TryAcquire};
use crate::core::token::LockToken;
use crate::postgres::Timed;
use crate::postgres::unexpected;

impl PostgresClient {
    /// The rider of this client's lock statements if they append their events now, with
    /// `session`'s statements that do prepared (once per session). `None` also when they
    /// cannot be prepared: the locker appends the events then.
    pub(super) async fn rider_on(&self, session: &mut Session) -> Option<&Rider> {
        let rider = self.history.as_ref()?;
        if !rider.rides().await {
            return None;
        }
        if session.recording.is_none() {
            let (t, w, r) = (
                try_acquire_sql(true),
                wait_acquire_sql(true),
                release_recording_sql(),
            );
            let c = &session.client;
            let prepared = self
                .timed(Operation::Acquire, async {
                    let (t, w, r) = tokio::join!(c.prepare(&t), c.prepare(&w), c.prepare(&r));
                    Ok::<_, tokio_postgres::Error>((t?, w?, r?))
                })
                .await;
            match prepared {
                Ok((try_acquire, wait_acquire, release)) => {
                    session.recording = Some(Recording {
                        try_acquire,
                        wait_acquire,
                        release,
                    })
                }
                Err(e) => {
                    rider.refused(&e);
                    return None;
                }
            }
        }
        Some(rider)
    }

    fn check(&self, key: &str, options: &LockOptions) -> Result<()> {
        validate_pg_key(key)?;
        options.check_for(Backend::Postgres, Taking::Lock)?;
        if options.ttl() > Duration::from_millis(i32::MAX as u64) {
            return Err(Error::invalid(
                "ttl",
                "PostgreSQL's idle_session_timeout holds at most 24.8 days",
            ));
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
        let (mut cleanup, token, ttl_text, started) =
            AbandonedSession::start(self, options).await?;
        let rider = self.rider_on(cleanup.session_mut()).await;
        let s = cleanup.session();
        let pid = s.pid;
        let (token_text, fencing) = (token.expose(), options.fencing_enabled());
        let params: [&(dyn tokio_postgres::types::ToSql + Sync); 4] =
            [&key, &token_text, &ttl_text, &pid];
        let send = async |event: Option<&EventParams>| {
            type Params<'a> = &'a [&'a (dyn tokio_postgres::types::ToSql + Sync)];
            let with_event;
            let (statement, params): (_, Params<'_>) = match (event, &s.recording) {
                (Some(event), Some(statements)) => {
                    let mut all = params.to_vec();
                    all.extend(event.values());
                    all.push(&fencing);
                    with_event = all;
                    let statement = match wait {
                        Some(_) => &statements.wait_acquire,
                        None => &statements.try_acquire,
                    };
                    (statement, &with_event)
                }
                _ => {
                    let statement = match wait {
                        Some(_) => &s.wait_acquire,
                        None => &s.try_acquire,
                    };
                    (statement, &params)
                }
            };
            // Not awaited here: `acquiring_reply` sends the wait's lock_timeout before it.
            let acquire = s.client.query_one(statement, params);
            acquiring_reply(self, s, wait, acquire).await
        };
        // Refused before it ran (privileges are checked first): nothing is held, but the
        // unlock makes sure before the statement is sent again without the event.
        let unlock = async {
            let unlock: [(&(dyn tokio_postgres::types::ToSql + Sync), Type); 1] =
                [(&key, Type::TEXT)];
            let unlock = s.client.query_typed_one(UNLOCK, &unlock);
            let _ = self.timed(Operation::Acquire, unlock).await;
        };
        let rider = rider.filter(|_| s.recording.is_some());
        let event = Rider::event(rider, &token);
        let (reply, recorded) = Rider::ride(rider, &event, send, unlock).await;
        let Some(row) = reply? else {
            // Timed out in a lock queue: the advisory lock's, or, after the advisory lock was
            // granted, the fence row's (held by someone's open transaction). The lock survives
            // the statement's rollback: release it before the session goes back to the pool
            // (or close the session).
            let session = cleanup.disarm();
            self.unlock_or_discard(session, key).await;
            return Ok(None);
        };
        let bad = unexpected(Operation::Acquire);
        // Dropped armed on a refusal: the connection is closed.
        self.refuse_handed_over(
            &row,
            pid,
            &format!(
                "this connection's server session already held the lock {key:?} before asking \
                 for it (advisory locks are reentrant: it would have been granted twice)"
            ),
        )?;
        let fence: Option<i64> = row.try_get(2).map_err(&bad)?;
        let Some(fence) = fence else {
            let session = cleanup.disarm();
            self.put_back(session);
            return Ok(None);
        };
        let silence = silence_in(&row, 3, Operation::Acquire)?;
        let mut held = PgHeld::new(self.clone(), key, &token, cleanup.disarm(), silence);
        held.recorded = recorded;
        let guard = self
            .guard_of_grant(held, started, Some(fence), options)
            .await?;
        Ok(Some(guard))
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

    async fn not_ours(&self, key: &str, token: &LockToken, what: &str) -> Error {
        let what =
            format!("{what} a session lock held by another connection (it ends with that session)");
        not_held_here("postgres", what, key, token, self.inspect(key).await)
    }
}

/// A session lock, or another advisory lock on a session of its own (a reader's, a writer's, a
/// leader's), as the acquisition engine drives it: each attempt waits in the server's lock queue
/// (`lock_timeout`) for the time left, so waiters are granted in the server's arrival order.
pub(super) struct SessionWait<'a> {
    pub(super) client: &'a PostgresClient,
    pub(super) name: &'a str,
    /// `None`: the plain lock.
    pub(super) advisory: Option<AdvisoryAsk<'a>>,
}

impl Attempts for SessionWait<'_> {
    fn name(&self) -> &str {
        self.name
    }

    /// One acquisition on a session of its own, waiting in the server's queue up to
    /// `ask.wait` (at most PostgreSQL's longest `lock_timeout`, 24.8 days); the wait running
    /// out is busy, and the engine asks again while its deadline allows.
    async fn attempt(&self, options: &LockOptions, ask: Ask) -> Result<TryAcquire> {
        let guard = match self.advisory {
            None => self.client.attempt(self.name, options, ask.wait).await?,
            Some(advisory) => {
                self.client
                    .advisory_attempt(self.name, advisory, options, ask.wait)
                    .await?
            }
        };
        Ok(granted_or_busy(guard))
    }

    /// A session that died: it was closed, which ended anything it was granted.
    fn retries(&self, e: &Error) -> bool {
        matches!(e, Error::Connection { .. })
    }
}

/// A session whose acquisition is in flight: dropped armed, it closes the connection (which
/// releases anything the server granted it).
pub(super) struct AbandonedSession(pub(super) Option<Session>);

impl AbandonedSession {
    /// An acquisition about to be sent on a session of its own: the session, armed (if the
    /// future is dropped mid-statement, the server may grant the lock to a session nobody owns:
    /// closing it releases whatever it holds); a fresh token; the TTL as the statement's text;
    /// and the instant the lease counts from.
    pub(super) async fn start(
        client: &PostgresClient,
        options: &LockOptions,
    ) -> Result<(AbandonedSession, LockToken, String, Instant)> {
        let session = client.take_session().await?;
        let token = options.new_token();
        let ttl_text = millis_text(options.ttl());
        Ok((
            AbandonedSession(Some(session)),
            token,
            ttl_text,
            Instant::now(),
        ))
    }

    /// The session, while armed.
    pub(super) fn session(&self) -> &Session {
        self.0.as_ref().expect("armed")
    }

    /// The same, to prepare statements on.
    pub(super) fn session_mut(&mut self) -> &mut Session {
        self.0.as_mut().expect("armed")
    }

    pub(super) fn disarm(&mut self) -> Session {
        self.0.take().expect("disarmed once")
    }
}

impl Drop for AbandonedSession {
    fn drop(&mut self) {
        if let Some(session) = self.0.take() {
            crate::core::acquire::spawn_cleanup("an acquisition's session", end_abandoned(session));
        }
    }
}

/// How long an abandoned session's unlock may take before the session is simply closed.
const ABANDONED_UNLOCK_BOUND: Duration = Duration::from_secs(5);

/// Ends a session whose acquisition was abandoned mid-statement, so that nothing it was granted
/// stays held once this returns (a counted clean-up: `cleanups_settled` waits for it).
///
/// A cancel request stops a statement blocked in the lock queue at once. The server runs a
/// session's statements in order, so once an unlock of every advisory lock sent after it
/// answers, the abandoned statement is over and whatever it was granted is released. (Closing
/// the connection alone releases it too, but only when the server process notices the close,
/// after this returned: a caller that waited for the clean-ups could still find the lock taken.)
/// If the cancel lands on the unlock instead, the unlock is sent once more. An unlock that
/// fails or does not answer in time leaves the close to end the session.
async fn end_abandoned(session: Session) {
    let cancel = session.client.cancel_token();
    let _ = cancel.cancel_query(session.tls.clone()).await;
    for _ in 0..2 {
        let unlock = session
            .client
            .simple_query("SELECT pg_advisory_unlock_all()");
        match tokio::time::timeout(ABANDONED_UNLOCK_BOUND, unlock).await {
            Ok(Ok(_)) | Err(_) => break,
            Ok(Err(e)) => tracing::debug!(error = %e, "abandoned session: unlock refused"),
        }
    }
    drop(session);
}

#[async_trait::async_trait]
impl Driver for PostgresClient {
    /// One attempt to take `key`, without waiting: `pg_try_advisory_lock` and the fencing
    /// number in one statement.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a bad key or TTL, or for options PostgreSQL has no
    /// counterpart for ([`LockOptions::replica_ack`]: [`Error::Unsupported`]); connection and
    /// server errors.
    async fn try_acquire(&self, key: &str, options: &LockOptions) -> Result<TryAcquire> {
        self.check(key, options)?;
        Ok(granted_or_busy(self.attempt(key, options, None).await?))
    }

    /// Takes `key`, waiting in the server's lock queue until `options.wait_bound()` (one
    /// attempt if none was set), through the acquisition engine (`core::acquire`). Waiters are
    /// granted the lock by the server when it is released: no polling, no thundering herd.
    ///
    /// A session that died under us (a server restart, a dropped connection) is ridden out
    /// while the deadline allows: the attempt's session was closed, which frees anything it was
    /// granted, and a new session tries again after the backoff. So is a grant that came too
    /// late to be a lease and was given back.
    ///
    /// # Errors
    /// [`Error::NotAcquired`] when the lock stayed busy until the deadline; at the deadline, the
    /// last attempt's [`Error::Connection`] or [`Error::ExpiredOnArrival`]; as
    /// [`Locker::try_acquire`](crate::Locker::try_acquire) otherwise.
    async fn acquire(&self, key: &str, options: &LockOptions) -> Result<LockGuard> {
        self.check(key, options)?;
        let lock = SessionWait {
            client: self,
            name: key,
            advisory: None,
        };
        crate::core::acquire::wait(&lock, options, options.wait_bound()).await
    }

    /// Releases `key` if this client holds it with `token`.
    ///
    /// # Errors
    /// [`Error::NotHeld`] if it does not; [`Error::Unsupported`] if another process's session
    /// holds it with that token (only that session can release it; the lock ends with it).
    async fn release(&self, key: &str, token: &LockToken) -> Result<()> {
        validate_pg_key(key)?;
        match self.find_held(key, token) {
            Some(held) => held.release_by_token().await,
            None => Err(self.not_ours(key, token, "releasing").await),
        }
    }

    /// Extends `key` to `ttl` from now if this client holds it with `token`.
    ///
    /// # Errors
    /// As [`Locker::release`](crate::Locker::release).
    async fn extend(&self, key: &str, token: &LockToken, ttl: Duration) -> Result<()> {
        validate_pg_key(key)?;
        ttl_millis(ttl)?;
        match self.find_held(key, token) {
            Some(held) => held.extend_session(ttl).await.map(|_| ()),
            None => Err(self.not_ours(key, token, "extending").await),
        }
    }

    /// Who holds `key` (the token of the session holding the advisory lock), and its fencing
    /// counter. `ttl` is `None`: a session lock has no expiry of its own (see the module docs).
    ///
    /// # Errors
    /// Connection and server errors.
    async fn inspect(&self, key: &str) -> Result<LockState> {
        validate_pg_key(key)?;
        let session = self.take_session().await?;
        let row = self
            .timed(
                Operation::Inspect,
                session.client.query_one(INSPECT, &[&key]),
            )
            .await?;
        self.put_back(session);
        let bad = unexpected(Operation::Inspect);
        let pid: Option<i32> = row.try_get(0).map_err(&bad)?;
        let fence: Option<i64> = row.try_get(1).map_err(&bad)?;
        let holder: Option<String> = row.try_get(2).map_err(&bad)?;
        Ok(LockState::new(
            key.to_string(),
            pid.and(holder),
            None,
            fence.map(|f| f as u64),
        ))
    }

    /// Raises `key`'s fencing counter to at least `at_least` and returns it.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] above `i64::MAX`; connection and server errors.
    async fn raise_fencing_counter(&self, key: &str, at_least: u64) -> Result<u64> {
        let n = super::params::raised_fencing_number(key, at_least)?;
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

/// An attempt's outcome as a lock: `None` (busy, or the wait in the server's queue ran out) is
/// busy, with no remaining lease known.
pub(super) fn granted_or_busy(guard: Option<LockGuard>) -> TryAcquire {
    match guard {
        Some(guard) => TryAcquire::Acquired(guard),
        None => TryAcquire::Busy { remaining: None },
    }
}

impl Kind for PostgresClient {
    fn kind(&self) -> Backend {
        Backend::Postgres
    }
}
