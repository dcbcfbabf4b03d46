//! The lock table on PostgreSQL: `list` and `force_release` of lease rows
//! ([`PostgresLeaseClient`]) and session advisory locks ([`PostgresClient`]).
//!
//! **Lease rows** are the table itself: listing reads the live rows; forcing empties the row's
//! token and bumps its `fence` in one `UPDATE`.
//!
//! **Session locks** have no value of their own: what the server knows is `pg_locks` (which
//! backend holds which advisory lock, who waits) and `pg_stat_activity` (that backend's client
//! address and `application_name`). Listing joins them with `leasehold_locks`, where each
//! acquisition stored its key, fencing number and holder token (with the owner record) in the
//! same statement; a session lock whose row says another holder (taken by a client that is
//! not leasehold) is listed with the server's view only. Forcing terminates the holder's
//! backend (`pg_terminate_backend`), which ends its session and so its lock; the server allows
//! that only to superusers, members of `pg_signal_backend` and the backend's own role
//! (otherwise [`Error::PermissionDenied`]), and the counter is bumped in the same statement.
//! It waits (up to 5 s) for the backend to end, so the lock is free when it returns.

use std::sync::Arc;
use std::time::Duration;

use tokio_postgres::types::Type;

use crate::core::driver::{Driver, LockTable};
use crate::core::error::{Error, Operation, Result};
use crate::core::history::{HistoryLog, HistoryOptions};
use crate::core::listing::{
    ForceReleased, LockEntry, LockHolder, LockKind, check_reason, glob_match,
};
use crate::core::owner::Owner;
use crate::postgres::Timed;

use super::params::validate_pg_key;
use super::{PostgresClient, PostgresLeaseClient, unexpected};

const LIST_LEASES: &str = "\
SELECT key, token, fence, (extract(epoch FROM expires_at - clock_timestamp()) * 1000)::bigint
  FROM leasehold_leases WHERE token IS NOT NULL AND expires_at > clock_timestamp()";

/// Empties a live row's token and bumps its counter; the old token and the counter after.
/// Announced as a release is, if a waiter marked the row (`postgres::lease::marking`): its
/// waiters (an election's watchers) hear it at once.
const FORCE_LEASE: &str = "\
WITH old AS (
  SELECT key, token FROM leasehold_leases
   WHERE key = $1 AND token IS NOT NULL AND expires_at > clock_timestamp() FOR UPDATE),
u AS (
  UPDATE leasehold_leases t SET token = NULL, fence = t.fence + 1
    FROM old WHERE t.key = old.key
  RETURNING old.token, t.fence, t.key, t.wait_until > clock_timestamp() AS waited)
SELECT token, fence, CASE WHEN waited THEN pg_notify('leasehold_release', key) END FROM u";

/// The advisory locks of `leasehold_locks`' keys as `pg_locks` shows them: key, fencing
/// counter, stored holder, the holder backend's pid, client address and application name, and
/// how many backends wait for it.
const LIST_SESSIONS: &str = "\
WITH k AS (
  SELECT key, fence, holder,
         ((hashtextextended(key, 0) >> 32) & 4294967295) AS hi,
         (hashtextextended(key, 0) & 4294967295) AS lo
    FROM leasehold_locks)
SELECT k.key, k.fence, k.holder, p.pid, host(a.client_addr), a.application_name,
       (SELECT count(*) FROM pg_locks w
         WHERE w.locktype = 'advisory' AND NOT w.granted AND w.objsubid = 1
           AND w.classid::bigint = k.hi AND w.objid::bigint = k.lo)
  FROM k
  JOIN pg_locks p ON p.locktype = 'advisory' AND p.granted AND p.objsubid = 1
                 AND p.classid::bigint = k.hi AND p.objid::bigint = k.lo
  LEFT JOIN pg_stat_activity a ON a.pid = p.pid";

/// Terminates the backends holding `$1`'s advisory lock (one holder, or every reader of a
/// read-write lock) and bumps its counter, in one statement: one row (none if no backend
/// holds it) with the stored holder, the counter after, and whether every backend ended (the
/// server waits up to 5 s for each, PostgreSQL 14 and later: so the lock is free on return).
const FORCE_SESSION: &str = "\
WITH p AS (
  SELECT pid FROM pg_locks
   WHERE locktype = 'advisory' AND granted AND objsubid = 1
     AND classid::bigint = ((hashtextextended($1, 0) >> 32) & 4294967295)
     AND objid::bigint = (hashtextextended($1, 0) & 4294967295)),
u AS (
  UPDATE leasehold_locks SET fence = fence + 1
   WHERE key = $1 AND EXISTS (SELECT 1 FROM p)
  RETURNING holder, fence)
SELECT (SELECT holder FROM u), (SELECT fence FROM u), bool_and(pg_terminate_backend(p.pid, 5000))
  FROM p HAVING count(*) > 0";

#[async_trait::async_trait]
impl LockTable for PostgresLeaseClient {
    /// The live lease rows whose keys match `pattern`: holder and owner, TTL by the server's
    /// clock, fencing counter. One statement: a consistent snapshot.
    ///
    /// # Errors
    /// Connection and server errors.
    async fn list(&self, pattern: &str) -> Result<Vec<LockEntry>> {
        let conn = self.conn().await?;
        let rows = self
            .timed(Operation::Inspect, conn.query(LIST_LEASES, &[]))
            .await?;
        listed(rows, pattern, |key, row, bad| {
            let token: String = row.try_get(1).map_err(bad)?;
            let fence: i64 = row.try_get(2).map_err(bad)?;
            let ms: i64 = row.try_get(3).map_err(bad)?;
            let ttl = Some(Duration::from_millis(ms.max(0) as u64));
            let holders = LockHolder::from_value(&token, ttl).into_iter().collect();
            let mut entry = LockEntry::new(key, LockKind::Lock, holders);
            entry.fencing_counter = Some(fence as u64);
            Ok(Some(entry))
        })
    }

    /// Empties `key`'s row whatever its token and bumps its fencing counter, in one `UPDATE`:
    /// the old holder's release and extend find another token ([`Error::NotHeld`]), and the
    /// next acquisition draws the counter returned + 1. Who and why: the warn log line.
    ///
    /// # Errors
    /// [`Error::NotHeld`] if no live row holds it; [`Error::InvalidArgument`] for a bad key or
    /// reason; connection and server errors.
    async fn force_release(&self, key: &str, reason: &str) -> Result<ForceReleased> {
        check_forcing(key, reason)?;
        let conn = self.conn().await?;
        let row = self
            .timed(
                Operation::Release,
                conn.query_typed_opt(FORCE_LEASE, &[(&key, Type::TEXT)]),
            )
            .await?;
        let row = held(key, row)?;
        let bad = unexpected(Operation::Release);
        let token: String = row.try_get(0).map_err(&bad)?;
        let fence: i64 = row.try_get(1).map_err(&bad)?;
        forced(key, &token, Some(fence as u64), reason)
    }

    fn history_log(&self, options: &HistoryOptions) -> Option<Arc<dyn HistoryLog>> {
        Some(super::history::log(self, options))
    }

    /// A lock's acquiring and releasing statements append the events (`postgres::history`).
    fn recording(&self, options: &HistoryOptions) -> Option<Arc<dyn Driver>> {
        Some(Arc::new(PostgresLeaseClient::recording(self, options)))
    }

    fn records_releases(&self) -> bool {
        self.records_releases()
    }
}

#[async_trait::async_trait]
impl LockTable for PostgresClient {
    /// The session advisory locks held on keys leasehold knows (`leasehold_locks`), as
    /// `pg_locks` shows them (see the module docs): holder (the stored token and owner when
    /// the row's holder is still the one holding it; otherwise the backend's pid, client
    /// address and application name as its owner), fencing counter, waiting backends. No TTL:
    /// a session lock lasts as long as its session.
    ///
    /// # Errors
    /// Connection and server errors.
    async fn list(&self, pattern: &str) -> Result<Vec<LockEntry>> {
        let session = self.take_session().await?;
        let rows = self
            .timed(Operation::Inspect, session.client.query(LIST_SESSIONS, &[]))
            .await?;
        self.put_back(session);
        listed(rows, pattern, |key, row, bad| {
            let fence: i64 = row.try_get(1).map_err(bad)?;
            let stored: Option<String> = row.try_get(2).map_err(bad)?;
            let pid: i32 = row.try_get(3).map_err(bad)?;
            let addr: Option<String> = row.try_get(4).map_err(bad)?;
            let app: Option<String> = row.try_get(5).map_err(bad)?;
            let waiting: i64 = row.try_get(6).map_err(bad)?;
            let server_view = || {
                let label = format!("backend {pid}");
                let owner = Owner::new(
                    addr.as_deref().unwrap_or("local"),
                    pid as u32,
                    app.as_deref().unwrap_or(""),
                )
                .and_then(|o| o.label(label));
                owner.ok()
            };
            let Some(mut holder) = stored
                .as_deref()
                .and_then(|s| LockHolder::from_value(s, None))
            else {
                return Ok(None);
            };
            if holder.owner.is_none() {
                holder.owner = server_view();
            }
            let mut entry = LockEntry::new(key, LockKind::Lock, vec![holder]);
            entry.fencing_counter = Some(fence as u64);
            entry.waiters = Some(waiting as u64);
            Ok(Some(entry))
        })
    }

    /// Ends `key`'s session lock by terminating the holder's backend, and bumps the counter in
    /// the same statement (see the module docs): the old holder's session is gone, so its
    /// release and extend fail, and the next acquisition draws the counter returned + 1.
    ///
    /// # Errors
    /// [`Error::NotHeld`] if no backend holds it; [`Error::PermissionDenied`] when the server
    /// refuses to terminate that backend (not a superuser, not in `pg_signal_backend`);
    /// [`Error::InvalidArgument`] for a bad key or reason; connection and server errors.
    async fn force_release(&self, key: &str, reason: &str) -> Result<ForceReleased> {
        check_forcing(key, reason)?;
        let session = self.take_session().await?;
        let row = self
            .timed(
                Operation::Release,
                session
                    .client
                    .query_typed_opt(FORCE_SESSION, &[(&key, Type::TEXT)]),
            )
            .await;
        self.put_back(session);
        let row = held(key, row?)?;
        let bad = unexpected(Operation::Release);
        let holder: Option<String> = row.try_get(0).map_err(&bad)?;
        let fence: Option<i64> = row.try_get(1).map_err(&bad)?;
        let terminated: bool = row.try_get(2).map_err(&bad)?;
        if !terminated {
            return Err(Error::UnexpectedReply {
                op: Operation::Release,
                detail: format!(
                    "the backend holding {key:?} was told to end but was still running 5 s later"
                ),
            });
        }
        forced(
            key,
            holder.as_deref().unwrap_or("-"),
            fence.map(|f| f as u64),
            reason,
        )
    }

    fn history_log(&self, options: &HistoryOptions) -> Option<Arc<dyn HistoryLog>> {
        Some(super::history::log(self, options))
    }

    /// A lock's acquiring and releasing statements append the events (`postgres::history`).
    fn recording(&self, options: &HistoryOptions) -> Option<Arc<dyn Driver>> {
        Some(Arc::new(PostgresClient::recording(self, options)))
    }

    fn records_releases(&self) -> bool {
        self.history
            .as_ref()
            .is_some_and(super::history::Rider::riding)
    }
}

/// The entries `entry` makes of the rows whose key (column 0) matches `pattern` (`None`: the
/// row is left out); `entry` reads the other columns with the given error for an unreadable one.
fn listed(
    rows: Vec<tokio_postgres::Row>,
    pattern: &str,
    entry: impl Fn(
        String,
        &tokio_postgres::Row,
        &dyn Fn(tokio_postgres::Error) -> Error,
    ) -> Result<Option<LockEntry>>,
) -> Result<Vec<LockEntry>> {
    let bad = unexpected(Operation::Inspect);
    let mut entries = Vec::new();
    for row in rows {
        let key: String = row.try_get(0).map_err(&bad)?;
        if glob_match(pattern, &key)
            && let Some(e) = entry(key, &row, &bad)?
        {
            entries.push(e);
        }
    }
    Ok(entries)
}

/// A forced release's arguments, checked before any round trip.
fn check_forcing(key: &str, reason: &str) -> Result<()> {
    validate_pg_key(key)?;
    check_reason(reason)
}

/// The row a forcing statement returned: none is [`Error::NotHeld`] (nobody held `key`).
fn held(key: &str, row: Option<tokio_postgres::Row>) -> Result<tokio_postgres::Row> {
    row.ok_or_else(|| Error::NotHeld {
        key: key.to_string(),
    })
}

fn forced(key: &str, value: &str, counter: Option<u64>, reason: &str) -> Result<ForceReleased> {
    let previous = LockHolder::from_value(value, None).ok_or_else(|| Error::UnexpectedReply {
        op: Operation::Release,
        detail: format!("{key:?}'s holder is empty"),
    })?;
    Ok(ForceReleased {
        key: key.to_string(),
        previous,
        fencing_counter: counter,
        forced_by: Owner::this_process(),
        reason: reason.to_string(),
    })
}
