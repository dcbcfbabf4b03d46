//! The history log on PostgreSQL, for both clients: the table `leasehold_history`, created on
//! the first append (a locker that does not record history creates nothing), one row per event.
//!
//! **Append** is one statement: the insert, and in the same statement the deletion of the key's
//! events beyond the cap and past the retention. Statements are sent unnamed (nothing prepared
//! outlives them), so the log works through a transaction pooler as the lease rows do.
//!
//! **Guarantees.** After an append commits, the key has at most `cap` events, plus one for each
//! append running concurrently (each statement sees the rows committed before it began). The
//! retention is applied per key, at each append of that key: a key no longer locked keeps its
//! last events until it is recorded again. An event's time is the server's
//! (`clock_timestamp()`); events read back in insertion order (the `id` sequence), newest first.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use futures_util::future::BoxFuture;
use tokio_postgres::error::SqlState;
use tokio_postgres::types::{ToSql, Type};

use super::{PostgresClient, PostgresLeaseClient};
use crate::core::error::{Error, Operation, Result};
use crate::core::history::{
    HistoryEvent, HistoryKind, HistoryLog, HistoryOptions, from_unix_millis,
};
use crate::core::token::validate_key;
use crate::postgres::Timed;
use crate::postgres::unexpected;

const CREATE_TABLE: &str = "\
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
CREATE INDEX IF NOT EXISTS leasehold_history_key_id ON leasehold_history (key, id)";

/// The insert, and the trim to the cap (the rows it sees are those before the insert: keep the
/// `cap - 1` newest) and to the retention.
const APPEND: &str = "\
WITH added AS (
  INSERT INTO leasehold_history (key, kind, fencing, holder, owner, detail)
  VALUES ($1, $2, $3, $4, $5, $6))
DELETE FROM leasehold_history
 WHERE key = $1
   AND (at < clock_timestamp() - $7::bigint * interval '1 millisecond'
        OR id <= (SELECT id FROM leasehold_history WHERE key = $1
                   ORDER BY id DESC OFFSET $8::bigint - 1 LIMIT 1))";

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
    Arc::new(PgHistory {
        source: source.into().0,
        options: *options,
        created: AtomicBool::new(false),
    })
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
}

impl PgHistory {
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
            APPEND,
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
