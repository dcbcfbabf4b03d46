//! Session advisory locks beyond the plain one: a reader's shared lock, a writer's or leader's
//! exclusive lock, a semaphore's slot. Each is held, like a plain lock, by a session of its
//! own ([`PgHeld`], renewed and reported lost when the session ends); this file has their SQL,
//! the acquiring attempt, and release and extend by token.

use std::time::Duration;

use tokio_postgres::error::SqlState;
use tokio_postgres::types::{ToSql, Type};

use crate::core::driver::not_held_here;
use crate::core::error::{Error, Operation, Result};
use crate::core::guard::LockGuard;
use crate::core::options::LockOptions;
use crate::core::outcome::LockState;
use crate::core::token::LockToken;
use crate::postgres::Timed;
use crate::postgres::client::{PgHeld, PostgresClient, Session};
use crate::postgres::error::{pg_error, timeout_error};
use crate::postgres::lifetime::silence_in;
use crate::postgres::params::millis_text;
use crate::postgres::session::{AbandonedSession, SessionWait};
use crate::postgres::sql::SILENCE;
use crate::postgres::unexpected;

/// The advisory key of `$1`'s lock number `seed` (an SQL expression): seed 0 is the plain
/// lock's key (so a writer or leader excludes a plain lock of the same name and the reverse),
/// seeds 1 ..= N a semaphore's slots.
fn advisory_key(seed: &str) -> String {
    format!("hashtextextended($1, {seed})")
}

/// A granted advisory lock of `$1`'s key `$2` in `pg_locks` (`l`), as the plain lock's SQL
/// splits a 64-bit key into `classid` and `objid`.
fn key_matches(seed: &str) -> String {
    format!(
        "l.locktype = 'advisory' AND l.granted AND l.objsubid = 1
       AND l.classid::bigint = ((hashtextextended($1, {seed}) >> 32) & 4294967295)
       AND l.objid::bigint = (hashtextextended($1, {seed}) & 4294967295)"
    )
}

/// The mark a holding session carries in its `application_name`, so that a release by token
/// from another process can tell a lock held elsewhere from no lock at all: `~` and the first
/// 32 hex digits of the token's SHA-256 (never the token), then the name it had. Visible in
/// `pg_stat_activity` to every user; gone with the session.
fn mark_of(token_param: &str) -> String {
    format!("'~' || left(encode(sha256(convert_to({token_param}, 'UTF8')), 'hex'), 32)")
}

/// The advisory lock a [`PgHeld`] holds when it is not a plain lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(in crate::postgres) struct AdvisoryLock {
    /// Its key's seed (see [`advisory_key`]).
    pub(super) seed: i64,
    /// A reader's shared lock.
    pub(super) shared: bool,
}

/// Releases the lock, lifts the idle limit and removes the holder's mark (one row: whether the
/// session held it).
const RELEASE: &str = "\
SELECT CASE WHEN $3 THEN pg_advisory_unlock_shared(hashtextextended($1, $2::bigint))
            ELSE pg_advisory_unlock(hashtextextended($1, $2::bigint)) END,
       set_config('idle_session_timeout', '0', false),
       set_config('application_name',
                  regexp_replace(current_setting('application_name'), '^~[0-9a-f]{32} ', ''), false)";

/// Extends: the new idle limit, whether this session still holds the lock, the server
/// process, and [`SILENCE`] (the columns of the plain lock's extend, read by
/// `PgHeld::extend_session`).
fn extend_sql() -> String {
    format!(
        "SELECT set_config('idle_session_timeout', $3, false), EXISTS (
    SELECT 1 FROM pg_locks l WHERE l.pid = pg_backend_pid() AND {}),
       pg_backend_pid(), {SILENCE}",
        key_matches("$2::bigint")
    )
}

impl AdvisoryLock {
    /// Releases it on `client`'s session.
    pub(in crate::postgres) async fn release(
        self,
        client: &tokio_postgres::Client,
        key: &str,
    ) -> std::result::Result<tokio_postgres::Row, tokio_postgres::Error> {
        let params: [(&(dyn ToSql + Sync), Type); 3] = [
            (&key, Type::TEXT),
            (&self.seed, Type::INT8),
            (&self.shared, Type::BOOL),
        ];
        client.query_typed_one(RELEASE, &params).await
    }

    /// Resets the session's idle limit to `ttl_text` ms and checks it still holds the lock
    /// (the row's second column).
    pub(in crate::postgres) async fn extend(
        self,
        client: &tokio_postgres::Client,
        key: &str,
        ttl_text: &str,
    ) -> std::result::Result<tokio_postgres::Row, tokio_postgres::Error> {
        let params: [(&(dyn ToSql + Sync), Type); 3] = [
            (&key, Type::TEXT),
            (&self.seed, Type::INT8),
            (&ttl_text, Type::TEXT),
        ];
        client.query_typed_one(&extend_sql(), &params).await
    }
}

/// The reply of an acquiring statement sent on `session`: at once (`wait` `None`), or after
/// `lock_timeout` is set to `wait` in the same round trip (pipelined) and the statement waited
/// in a lock queue up to that long. `Ok(None)`: the wait ran out (55P03); the session may hold
/// what it was granted before it timed out, for the caller to give back.
pub(in crate::postgres) async fn acquiring_reply(
    client: &PostgresClient,
    session: &Session,
    wait: Option<Duration>,
    acquire: impl std::future::Future<
        Output = std::result::Result<tokio_postgres::Row, tokio_postgres::Error>,
    >,
) -> Result<Option<tokio_postgres::Row>> {
    let response = client.inner.options.response_timeout;
    let reply = match wait {
        None => tokio::time::timeout(response, acquire)
            .await
            .map_err(|_| timeout_error(Operation::Acquire, true))?,
        Some(wait) => {
            let wait_text = millis_text(wait);
            let set_params: [&(dyn ToSql + Sync); 1] = [&wait_text];
            let set = session
                .client
                .query_one(&session.set_lock_timeout, &set_params);
            let both = async { tokio::join!(set, acquire) };
            // The reply may take up to `wait`; the response timeout counts after that.
            match tokio::time::timeout(wait + response, both).await {
                Err(_) => return Err(timeout_error(Operation::Acquire, true)),
                Ok((Err(e), _)) => return Err(pg_error(Operation::Acquire, true, e)),
                Ok((Ok(_), r)) => r,
            }
        }
    };
    match reply {
        Err(e) if e.code() == Some(&SqlState::LOCK_NOT_AVAILABLE) => Ok(None),
        r => r
            .map(Some)
            .map_err(|e| client.statement_error(Operation::Acquire, e)),
    }
}

impl PostgresClient {
    /// The pooler checks of an acquiring statement's reply (its first two columns, `moved`
    /// and `mine`: see `sql.rs`): a session a pooler moved or handed over is refused, and the
    /// refusal latched ([`PostgresClient::pooler_seen`]); `mine` says what the second one
    /// means.
    pub(in crate::postgres) fn refuse_handed_over(
        &self,
        row: &tokio_postgres::Row,
        pid: i32,
        mine: &str,
    ) -> Result<()> {
        let flag = |i: usize| {
            row.try_get::<_, bool>(i)
                .map_err(|e| Error::UnexpectedReply {
                    op: Operation::Acquire,
                    detail: e.to_string(),
                })
        };
        if flag(0)? {
            return Err(self.pooler_seen(&format!(
                "the server process serving this connection changed between two statements \
                 (pid {pid}, then another)"
            )));
        }
        if flag(1)? {
            return Err(self.pooler_seen(mine));
        }
        Ok(())
    }
}

/// What an attempt asks for.
#[derive(Debug, Clone, Copy)]
pub(in crate::postgres) enum Ask<'a> {
    /// A reader's shared lock on the name's key.
    Read,
    /// A writer's exclusive lock on the name's key, with the next fencing number.
    Write,
    /// As [`Ask::Write`], and the term row: the fencing number and the leader's id.
    Lead(&'a str),
    /// Any free slot of `1 ..= permits`, trying each once (never waits).
    AnySlot(u32),
    /// Slot `n` (waiting in its queue).
    Slot(u32),
}

impl Ask<'_> {
    /// The advisory function call, and the seed it locks (as SQL); `None`: the any-slot scan.
    fn lock_call(self, wait: bool) -> Option<(String, &'static str)> {
        let seed = match self {
            Ask::AnySlot(_) => return None,
            Ask::Slot(_) => "$5::bigint",
            Ask::Read | Ask::Write | Ask::Lead(_) => "0::bigint",
        };
        let f = match (self, wait) {
            (Ask::Read, false) => "pg_try_advisory_lock_shared",
            (Ask::Read, true) => "pg_advisory_lock_shared",
            (_, false) => "pg_try_advisory_lock",
            (_, true) => "pg_advisory_lock",
        };
        Some((format!("{f}({})", advisory_key(seed)), seed))
    }

    /// `$5` of the statement: the slot, the number of permits or the leader's id.
    fn extra(self) -> String {
        match self {
            Ask::Read | Ask::Write => "0".into(),
            Ask::Lead(id) => id.to_string(),
            Ask::AnySlot(n) | Ask::Slot(n) => n.to_string(),
        }
    }

    fn fenced(self) -> bool {
        matches!(self, Ask::Write | Ask::Lead(_))
    }

    /// The acquiring statement. Parameters: `$1` name, `$2` token, `$3` TTL (ms, as text),
    /// `$4` the session's server process, `$5` [`Ask::extra`]. One row: `moved`, `mine` (the
    /// pooler checks of the plain lock, see `sql.rs`: either one and nothing is asked for),
    /// the seed granted (NULL: busy), the new fencing number (writer, leader).
    ///
    /// `mine` here is any advisory lock of the session: a session of ours holds one lock at a
    /// time and none while pooled, so any lock it holds came with a session a pooler handed
    /// over.
    fn sql(self, wait: bool) -> String {
        let grant = match self.lock_call(wait) {
            // The scan stops at the first slot granted (a plain function scan under LIMIT 1,
            // no sort: the filter runs row by row and the limit ends it).
            None => format!(
                "SELECT g::bigint FROM generate_series(1, $5::int) AS g
                  WHERE pg_try_advisory_lock({}) LIMIT 1",
                advisory_key("g::bigint")
            ),
            Some((call, seed)) if wait => format!("SELECT {seed} FROM (SELECT {call}) AS w"),
            Some((call, seed)) => format!("SELECT CASE WHEN {call} THEN {seed} END"),
        };
        let fence = if self.fenced() {
            ",
i AS (INSERT INTO leasehold_locks AS t (key, fence, holder)
      SELECT $1, 1, $2 FROM l, s WHERE l.slot IS NOT NULL
      ON CONFLICT (key) DO UPDATE SET fence = t.fence + 1, holder = EXCLUDED.holder
      RETURNING fence)"
        } else {
            ",
i AS (SELECT NULL::bigint AS fence)"
        };
        let term = if matches!(self, Ask::Lead(_)) {
            ",
e AS (INSERT INTO leasehold_terms AS t (key, term, leader_id)
      SELECT $1, fence, $5 FROM i
      ON CONFLICT (key) DO UPDATE SET term = EXCLUDED.term, leader_id = EXCLUDED.leader_id
      RETURNING term)"
        } else {
            ",
e AS (SELECT 1 AS term WHERE false)"
        };
        format!(
            "WITH c AS (SELECT pg_backend_pid() <> $4::int AS moved, EXISTS (
    SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid()) AS mine),
l AS (SELECT CASE WHEN c.moved OR c.mine THEN NULL ELSE ({grant}) END AS slot FROM c),
s AS (SELECT set_config('idle_session_timeout', $3, false) AS t,
             set_config('application_name',
                        {mark} || ' ' || current_setting('application_name'), false) AS a
        FROM l WHERE l.slot IS NOT NULL){fence}{term}
SELECT c.moved, c.mine, l.slot, (SELECT fence FROM i), (SELECT count(*) FROM s),
       (SELECT count(*) FROM e), {SILENCE}
  FROM c, l",
            mark = mark_of("$2"),
        )
    }
}

/// Whether a session carrying `$1`'s mark holds an advisory lock.
fn marked_sql() -> String {
    format!(
        "SELECT EXISTS (SELECT 1 FROM pg_stat_activity a JOIN pg_locks l ON l.pid = a.pid
                 WHERE l.locktype = 'advisory' AND l.granted
                   AND a.application_name LIKE {} || ' %')",
        mark_of("$1")
    )
}

/// Granted advisory locks of `$1`'s key `$2` in `mode` (`ShareLock` readers, `ExclusiveLock`
/// writers).
pub(super) fn count_sql(mode: &str) -> String {
    format!(
        "SELECT count(*) FROM pg_locks l WHERE l.mode = '{mode}' AND {}",
        key_matches("$2::bigint")
    )
}

/// Granted slots `1 ..= $2` of `$1`'s semaphore.
pub(super) fn slots_held_sql() -> String {
    format!(
        "SELECT count(*) FROM generate_series(1, $2::int) AS g JOIN pg_locks l ON {}",
        key_matches("g::bigint")
    )
}

impl PostgresClient {
    /// One acquisition of `ask` on a session of its own; `wait`: block in the server's queue
    /// up to that long. `Ok(None)`: busy (or the wait ran out).
    pub(in crate::postgres) async fn advisory_attempt(
        &self,
        name: &str,
        ask: Ask<'_>,
        options: &LockOptions,
        wait: Option<Duration>,
    ) -> Result<Option<LockGuard>> {
        let (mut cleanup, token, ttl_text, started) =
            AbandonedSession::start(self, options).await?;
        let s = cleanup.session();
        let pid = s.pid;
        let (token_text, extra) = (token.expose(), ask.extra());
        let sql = ask.sql(wait.is_some());
        let params: [(&(dyn ToSql + Sync), Type); 5] = [
            (&name, Type::TEXT),
            (&token_text, Type::TEXT),
            (&ttl_text, Type::TEXT),
            (&pid, Type::INT4),
            (&extra, Type::TEXT),
        ];
        let acquire = s.client.query_typed_one(&sql, &params);
        let Some(row) = acquiring_reply(self, s, wait, acquire).await? else {
            // Timed out in a queue: the advisory lock's, or, once granted, the fence row's. A
            // session lock outlives the statement's rollback.
            let session = cleanup.disarm();
            self.unlock_all_or_discard(session).await;
            return Ok(None);
        };
        let bad = unexpected(Operation::Acquire);
        self.refuse_handed_over(
            &row,
            pid,
            "this connection's server session already held an advisory lock before asking for \
             one (a session handed over with another client's lock)",
        )?;
        let slot: Option<i64> = row.try_get(2).map_err(&bad)?;
        let fence: Option<i64> = row.try_get(3).map_err(&bad)?;
        let silence = silence_in(&row, 6, Operation::Acquire)?;
        let session = cleanup.disarm();
        let Some(seed) = slot else {
            self.put_back(session);
            return Ok(None);
        };
        let mut held = PgHeld::new(self.clone(), name, &token, session, silence);
        held.lock = Some(AdvisoryLock {
            seed,
            shared: matches!(ask, Ask::Read),
        });
        let guard = self.guard_of_grant(held, started, fence, options).await?;
        Ok(Some(guard))
    }

    /// After a waiting attempt timed out: the session drops every advisory lock (it should
    /// hold none) and goes back to the pool, or, if that fails, is closed.
    async fn unlock_all_or_discard(&self, session: Session) {
        let unlock = session
            .client
            .query_typed_one("SELECT pg_advisory_unlock_all()", &[]);
        match tokio::time::timeout(self.inner.options.response_timeout, unlock).await {
            Ok(Ok(_)) => self.put_back(session),
            _ => drop(session),
        }
    }

    /// Waits in the server's queue for `ask` (a read, write or lead) up to `wait` (`None`:
    /// one attempt; `FOREVER`: for ever), through the acquisition engine, as the plain lock
    /// waits ([`Locker::acquire`](crate::Locker::acquire)): a session that dies under us, or a grant that came
    /// too late, is tried again after the backoff.
    pub(super) async fn advisory_wait(
        &self,
        name: &str,
        ask: Ask<'_>,
        options: &LockOptions,
        wait: Option<Duration>,
    ) -> Result<LockGuard> {
        let lock = SessionWait {
            client: self,
            name,
            advisory: Some(ask),
        };
        crate::core::acquire::wait(&lock, options, wait).await
    }

    /// The lock `token` holds on `name` through this client, if it is one `is_role` accepts;
    /// [`Error::NotHeld`] if it holds another kind (a writer's token is no reader's), or the
    /// answer of [`PostgresClient::held_elsewhere`] if this client does not hold it.
    async fn held_advisory(
        &self,
        name: &str,
        token: &LockToken,
        is_role: impl Fn(AdvisoryLock) -> bool,
        what: &str,
    ) -> Result<std::sync::Arc<PgHeld>> {
        let found = self
            .inner
            .held
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&(name.to_string(), token.clone()))
            .cloned();
        match found {
            Some(held) if held.lock.is_some_and(is_role) => Ok(held),
            Some(_) => Err(Error::NotHeld {
                key: name.to_string(),
            }),
            None => Err(self.held_elsewhere(name, token, what).await),
        }
    }

    /// Releases what `token` holds on `name` through this client, if `is_role` accepts it.
    ///
    /// Errors: [`Error::NotHeld`]; [`Error::Unsupported`] when another session holds a lock
    /// with `token` (only that session can release it; it ends with that session).
    pub(super) async fn release_advisory(
        &self,
        name: &str,
        token: &LockToken,
        is_role: impl Fn(AdvisoryLock) -> bool,
    ) -> Result<()> {
        let held = self
            .held_advisory(name, token, is_role, "releasing")
            .await?;
        held.release_session().await
    }

    /// Extends what `token` holds on `name` through this client (as
    /// [`PostgresClient::release_advisory`]).
    pub(super) async fn extend_advisory(
        &self,
        name: &str,
        token: &LockToken,
        ttl: Duration,
        is_role: impl Fn(AdvisoryLock) -> bool,
    ) -> Result<()> {
        crate::core::options::ttl_millis(ttl)?;
        let held = self
            .held_advisory(name, token, is_role, "extending")
            .await?;
        held.extend_session(ttl).await.map(drop)
    }

    /// The error for a token this client does not hold: whether a session carrying its mark
    /// holds an advisory lock tells "held by another process" from "not held".
    async fn held_elsewhere(&self, name: &str, token: &LockToken, what: &str) -> Error {
        let what = format!(
            "{what} a lock held by another connection's session (it ends with that session)"
        );
        let found = self
            .query_pooled(Operation::Inspect, &marked_sql(), &[token.expose()])
            .await
            .and_then(|row| {
                row.try_get::<_, bool>(0)
                    .map_err(|e| Error::UnexpectedReply {
                        op: Operation::Inspect,
                        detail: e.to_string(),
                    })
            });
        let state = found.map(|held| LockState {
            key: name.to_string(),
            holder: held.then(|| token.expose().to_string()),
            ttl: None,
            fencing_counter: None,
            owner: None,
        });
        not_held_here("postgres", what, name, token, state)
    }

    /// One statement (its parameters all text) on a pooled session; one row.
    pub(super) async fn query_pooled(
        &self,
        op: Operation,
        sql: &str,
        params: &[&str],
    ) -> Result<tokio_postgres::Row> {
        let session = self.take_session().await?;
        let typed: Vec<(&(dyn ToSql + Sync), Type)> = params
            .iter()
            .map(|p| (p as &(dyn ToSql + Sync), Type::TEXT))
            .collect();
        let row = self
            .timed(op, session.client.query_typed_one(sql, &typed))
            .await?;
        self.put_back(session);
        Ok(row)
    }
}

#[cfg(test)]
mod tests {
    use super::Ask;

    #[test]
    fn every_acquiring_statement_checks_before_it_locks() {
        for ask in [
            Ask::Read,
            Ask::Write,
            Ask::Lead("a"),
            Ask::AnySlot(3),
            Ask::Slot(2),
        ] {
            for wait in [false, true] {
                let sql = ask.sql(wait);
                let check = sql.find("AS mine").unwrap();
                let lock = sql.find("advisory_lock").unwrap();
                assert!(check < lock, "{sql}");
                assert!(sql.contains("WHEN c.moved OR c.mine THEN NULL"), "{sql}");
            }
        }
    }
}
