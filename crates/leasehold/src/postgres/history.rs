//! The history log on PostgreSQL, for both clients: the table `leasehold_history`, created on
//! the first append (a locker that does not record history creates nothing), one row per event.
//!
//! **Append** is one statement: the insert, and in the same statement the deletion of the key's
//! events beyond the cap and past the retention. These statements are sent unnamed (nothing
//! prepared outlives them), so the log works through a transaction pooler as the lease rows
//! do; the lock statements that carry their events are prepared where the lease rows prepare
//! theirs (`postgres::lease_conn`).
//!
//! **In the lock's own statement.** For a [`Locker`](crate::Locker) that records history, a
//! lease row's acquisition and release carry their event ([`riding`]): the insert and the trim
//! are CTEs of the statement that takes or frees the row, so the event is stored exactly when
//! the lock operation is, in its round trip. If the server refuses the table (no privilege),
//! the statement is sent again without them, and the events are appended after the operation
//! from then on ([`Rider::refused`]).
//!
//! **Guarantees.** After an append commits, the key has at most `cap` events, plus one for each
//! append running concurrently (each statement sees the rows committed before it began). The
//! retention is applied per key, at each append of that key: a key no longer locked keeps its
//! last events until it is recorded again. An event's time is the server's
//! (`clock_timestamp()`); events read back in insertion order (the `id` sequence), newest first.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, LazyLock};

use futures_util::future::BoxFuture;
use tokio_postgres::error::SqlState;
use tokio_postgres::types::{ToSql, Type};

use super::{PostgresClient, PostgresLeaseClient};
use crate::core::error::{Error, Operation, Result};
use crate::core::history::{
    HistoryEvent, HistoryKind, HistoryLog, HistoryOptions, from_unix_millis,
};
use crate::core::token::{LockToken, validate_key};
use crate::postgres::Timed;
use crate::postgres::unexpected;

/// The table and its index, created only if the table is missing: a role that may write the
/// table but does not own it (a table its DBA created) would be refused the `CREATE INDEX`
/// even with `IF NOT EXISTS`.
pub(super) const CREATE_TABLE: &str = "\
DO $$ BEGIN
  IF to_regclass('leasehold_history') IS NULL THEN
    CREATE TABLE IF NOT EXISTS leasehold_history (
        id bigserial PRIMARY KEY,
        key text NOT NULL,
        at timestamptz NOT NULL DEFAULT clock_timestamp(),
        kind text NOT NULL,
        fencing bigint,
        holder text,
        owner text,
        detail text
    );
    CREATE INDEX IF NOT EXISTS leasehold_history_key_id ON leasehold_history (key, id);
  END IF;
END $$";

/// The insert of one event ($1 the key, $2 to $6 its fields), and the trim ([`trim`], $7 and $8).
static APPEND: LazyLock<String> = LazyLock::new(|| {
    format!(
        "\
WITH added AS (
  INSERT INTO leasehold_history (key, kind, fencing, holder, owner, detail)
  VALUES ($1, $2, $3, $4, $5, $6))
{}",
        trim("", 7)
    )
});

/// The deletion of key `$1`'s events past the retention (`$p` ms) or beyond the cap (`$p+1`:
/// the rows a statement sees are those before its own insert, so it keeps the `cap - 1`
/// newest), when `only_if` (SQL ending in `AND`, or nothing) holds.
fn trim(only_if: &str, p: usize) -> String {
    let cap = p + 1;
    format!(
        "\
DELETE FROM leasehold_history
 WHERE {only_if} key = $1
   AND (at < clock_timestamp() - ${p}::bigint * interval '1 millisecond'
        OR id <= (SELECT id FROM leasehold_history WHERE key = $1
                   ORDER BY id DESC OFFSET ${cap}::bigint - 1 LIMIT 1))"
    )
}

/// The CTEs with which a lock statement appends its own event (`h`, then the trim `ht`): an
/// event of `kind` for key `$1` for each row of the CTE `source` (one when the statement took
/// or released the lock, none otherwise), whose fencing number is the SQL `fence`, whose
/// holder and owner are `$p` and `$p+1`, trimmed as [`trim`] says with `$p+2` and `$p+3`
/// ([`Rider::params`] gives these four). Atomic with the lock operation: the event is stored
/// exactly when the statement's change is.
pub(super) fn riding(source: &str, kind: HistoryKind, fence: &str, p: usize) -> String {
    let (owner, kind) = (p + 1, kind.as_str());
    format!(
        "\
h AS (INSERT INTO leasehold_history (key, kind, fencing, holder, owner)
      SELECT $1, '{kind}', {fence}, ${p}, ${owner} FROM {source} RETURNING id),
ht AS ({})",
        trim("EXISTS (SELECT 1 FROM h) AND", p + 2)
    )
}

const READ: &str = "\
SELECT (extract(epoch FROM at) * 1000)::bigint, kind, fencing, holder, owner, detail
  FROM leasehold_history WHERE key = $1 ORDER BY id DESC LIMIT $2";

/// Which client's connections the log uses.
#[derive(Debug)]
enum Source {
    Sessions(PostgresClient),
    Leases(PostgresLeaseClient),
}

/// The history log of a PostgreSQL client.
pub(super) fn log(source: impl Into<PgSource>, options: &HistoryOptions) -> Arc<dyn HistoryLog> {
    Arc::new(PgHistory::new(source.into().0, options))
}

/// A client the log can use (either kind).
pub(super) struct PgSource(Source);

impl From<&PostgresClient> for PgSource {
    fn from(c: &PostgresClient) -> Self {
        PgSource(Source::Sessions(c.clone()))
    }
}

impl From<&PostgresLeaseClient> for PgSource {
    fn from(c: &PostgresLeaseClient) -> Self {
        PgSource(Source::Leases(c.clone()))
    }
}

#[derive(Debug)]
struct PgHistory {
    source: Source,
    options: HistoryOptions,
    /// The table is known to exist.
    created: AtomicBool,
    /// The server refused the table to a [`Rider`]: lock statements no longer append.
    refused: AtomicBool,
}

/// How a recording client's lock statements append their own events ([`riding`]): atomic with
/// the lock operation and in its round trip, where the [`Locker`](crate::Locker) would append
/// after it. Shares the log's table and options.
#[derive(Debug, Clone)]
pub(super) struct Rider(Arc<PgHistory>);

/// The rider of `source`'s lock statements, keeping `options`.
pub(super) fn rider(source: impl Into<PgSource>, options: &HistoryOptions) -> Rider {
    Rider(Arc::new(PgHistory::new(source.into().0, options)))
}

impl Rider {
    /// Whether the lock statements append the events: once the table exists (created on the
    /// first call), and until the server refuses it. Otherwise the events are appended after
    /// the operation, best effort, as on the other backends: recording never makes a lock
    /// operation fail.
    pub(super) async fn rides(&self) -> bool {
        if self.0.refused.load(Ordering::Acquire) {
            return false;
        }
        match self.0.create_table().await {
            Ok(()) => true,
            Err(e) => self.refused(&e),
        }
    }

    /// Whether the server has not refused the table yet.
    pub(super) fn riding(&self) -> bool {
        !self.0.refused.load(Ordering::Acquire)
    }

    /// After a riding statement (or the table's creation) failed with `e`: whether the server
    /// refused the history table (no privilege, no table), in which case riding stops for
    /// good and the statement is to be sent again without it (it changed nothing: one
    /// statement is one transaction). Otherwise `e` is the lock statement's own error.
    pub(super) fn refused(&self, e: &Error) -> bool {
        let refused = has_code(
            e,
            &[SqlState::INSUFFICIENT_PRIVILEGE, SqlState::UNDEFINED_TABLE],
        );
        if refused && !self.0.refused.swap(true, Ordering::AcqRel) {
            tracing::warn!(error = %e, "the lock history table was refused; lock statements no longer record their events");
        }
        refused
    }

    /// The event a lock statement of `rider` carries for the holder of `token`.
    pub(super) fn event(rider: Option<&Rider>, token: &LockToken) -> Option<EventParams> {
        rider.map(|r| r.params(token))
    }

    /// Sends a lock statement, `event` (from [`Rider::event`]) riding in it if `rider` is
    /// given: `send(Some(event))`; if the server refused the history table
    /// ([`Rider::refused`]: it then applied nothing of the statement), `before_resend` and
    /// `send(None)`, so that recording never fails a lock operation. Without a rider,
    /// `send(None)`. Answers the reply and whether the event went with it (the one place for
    /// this fallback: both clients' acquisitions and releases).
    pub(super) async fn ride<'e, T, Sent>(
        rider: Option<&Rider>,
        event: &'e Option<EventParams>,
        send: impl Fn(Option<&'e EventParams>) -> Sent,
        before_resend: impl Future<Output = ()>,
    ) -> (Result<T>, bool)
    where
        Sent: Future<Output = Result<T>>,
    {
        let (Some(rider), Some(event)) = (rider, event) else {
            return (send(None).await, false);
        };
        match send(Some(event)).await {
            Err(e) if rider.refused(&e) => {
                before_resend.await;
                (send(None).await, false)
            }
            reply => (reply, true),
        }
    }

    /// The parameters [`riding`] takes, for the holder of `token`.
    pub(super) fn params(&self, token: &LockToken) -> EventParams {
        EventParams {
            holder: token.redacted(),
            owner: token.owner().map(|o| o.to_string()),
            retention: self.0.options.retention_period().as_millis() as i64,
            cap: i64::from(self.0.options.events_per_key()),
        }
    }
}

/// The four parameters of [`riding`]: the holder, the owner, the retention and the cap.
pub(super) struct EventParams {
    holder: String,
    owner: Option<String>,
    retention: i64,
    cap: i64,
}

impl EventParams {
    /// The four, in [`riding`]'s order.
    pub(super) fn values(&self) -> [&(dyn ToSql + Sync); 4] {
        [&self.holder, &self.owner, &self.retention, &self.cap]
    }

    /// Appends the four, with their types, to an unnamed statement's parameters.
    pub(super) fn push<'a>(&'a self, params: &mut Vec<(&'a (dyn ToSql + Sync), Type)>) {
        let types = [Type::TEXT, Type::TEXT, Type::INT8, Type::INT8];
        params.extend(self.values().into_iter().zip(types));
    }
}

impl PgHistory {
    fn new(source: Source, options: &HistoryOptions) -> Self {
        PgHistory {
            source,
            options: *options,
            created: AtomicBool::new(false),
            refused: AtomicBool::new(false),
        }
    }

    /// Runs `sql` with `params` on one of the client's connections, within its response timeout.
    async fn query(
        &self,
        sql: &str,
        params: &[(&(dyn ToSql + Sync), Type)],
    ) -> std::result::Result<Vec<tokio_postgres::Row>, Error> {
        let op = Operation::History;
        match &self.source {
            Source::Sessions(client) => {
                let session = client.take_session().await?;
                let rows = client
                    .timed(op, session.client.query_typed(sql, params))
                    .await;
                client.put_back(session);
                rows
            }
            Source::Leases(client) => {
                let conn = client.conn().await?;
                client.timed(op, conn.query_typed(sql, params)).await
            }
        }
    }

    async fn create_table(&self) -> Result<()> {
        if self.created.load(Ordering::Acquire) {
            return Ok(());
        }
        let op = Operation::History;
        let created = match &self.source {
            Source::Sessions(client) => {
                let session = client.take_session().await?;
                let done = client
                    .timed(op, session.client.batch_execute(CREATE_TABLE))
                    .await;
                client.put_back(session);
                done
            }
            Source::Leases(client) => {
                let conn = client.conn().await?;
                client.timed(op, conn.batch_execute(CREATE_TABLE)).await
            }
        };
        match created {
            Ok(()) => {}
            // Two clients creating the table at once: it is there either way.
            Err(e) if has_code(&e, &[SqlState::UNIQUE_VIOLATION, SqlState::DUPLICATE_TABLE]) => {}
            Err(e) => return Err(e),
        }
        self.created.store(true, Ordering::Release);
        Ok(())
    }

    async fn append(&self, key: &str, event: &HistoryEvent) -> Result<()> {
        validate_key(key)?;
        self.create_table().await?;
        let fencing = event.fencing.map(|n| n as i64);
        let retention = self.options.retention_period().as_millis() as i64;
        let cap = i64::from(self.options.events_per_key());
        self.query(
            &APPEND,
            &[
                (&key, Type::TEXT),
                (&event.kind.as_str(), Type::TEXT),
                (&fencing, Type::INT8),
                (&event.holder, Type::TEXT),
                (&event.owner, Type::TEXT),
                (&event.detail, Type::TEXT),
                (&retention, Type::INT8),
                (&cap, Type::INT8),
            ],
        )
        .await?;
        Ok(())
    }

    async fn read(&self, key: &str, limit: usize) -> Result<Vec<HistoryEvent>> {
        validate_key(key)?;
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let rows = match self
            .query(READ, &[(&key, Type::TEXT), (&limit, Type::INT8)])
            .await
        {
            Ok(rows) => rows,
            // Nothing was ever recorded on this database.
            Err(e) if has_code(&e, &[SqlState::UNDEFINED_TABLE]) => return Ok(Vec::new()),
            Err(e) => return Err(e),
        };
        rows.iter().map(event_of).collect()
    }
}

fn event_of(row: &tokio_postgres::Row) -> Result<HistoryEvent> {
    let bad = unexpected(Operation::History);
    let at: i64 = row.try_get(0).map_err(&bad)?;
    let kind: String = row.try_get(1).map_err(&bad)?;
    let fencing: Option<i64> = row.try_get(2).map_err(&bad)?;
    Ok(HistoryEvent {
        at: from_unix_millis(at.max(0) as u64),
        kind: kind.parse::<HistoryKind>()?,
        fencing: fencing.map(|n| n as u64),
        holder: row.try_get(3).map_err(&bad)?,
        owner: row.try_get(4).map_err(&bad)?,
        detail: row.try_get(5).map_err(&bad)?,
    })
}

/// Whether `e` is a server error with one of `codes`.
fn has_code(e: &Error, codes: &[SqlState]) -> bool {
    match e {
        Error::Server { source, .. } | Error::PermissionDenied { source, .. } => source
            .downcast_ref::<tokio_postgres::Error>()
            .and_then(|e| e.code())
            .is_some_and(|c| codes.contains(c)),
        _ => false,
    }
}

impl HistoryLog for PgHistory {
    fn append<'a>(&'a self, key: &'a str, event: &'a HistoryEvent) -> BoxFuture<'a, Result<()>> {
        Box::pin(PgHistory::append(self, key, event))
    }

    fn read<'a>(&'a self, key: &'a str, limit: usize) -> BoxFuture<'a, Result<Vec<HistoryEvent>>> {
        Box::pin(PgHistory::read(self, key, limit))
    }
}
