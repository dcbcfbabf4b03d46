//! The lease rows' shared connection: their statements prepared once when the connection is
//! the server session's own, sent unnamed when a pooler may be in between.
//!
//! An unnamed statement is parsed and planned by the server every time it is sent (for the
//! acquiring statement about 0.17 ms against 0.075 prepared, more with its history CTEs:
//! `bench/results/issue32-target7-backend-floors.md`). A named one is not, but it lives in the
//! server session: through a transaction pooler the next transaction may land on another
//! client's server session, where the name is unknown or, worse, names another client's
//! statement (PgBouncer before 1.21, or with `max_prepared_statements = 0`). So a connection
//! prepares only when its startup announced the server process that serves it
//! ([`announced_pid`], as session locks check at connect): a pooler announces a key of its own,
//! and its connections send every statement unnamed, as before.

use std::collections::HashMap;
use std::ops::Deref;
use std::sync::Mutex;

use tokio_postgres::types::{ToSql, Type};
use tokio_postgres::{Client, Row, Statement};

use super::pooler::announced_pid;
use super::sql::PROBE;

/// A statement's parameters with their types (the types name the statement's parameters when
/// it is prepared, or go with it unnamed).
pub(super) type Typed<'a> = [(&'a (dyn ToSql + Sync), Type)];

/// The lease rows' shared connection. Derefs to its [`Client`] for statements sent rarely
/// (unnamed).
pub(super) struct LeaseConn {
    client: Client,
    /// The statements prepared so far, by the address and length of their SQL text (each a
    /// `'static` string, always sent with the same parameter types: no hashing of the text);
    /// `None`: the connection may go through a pooler, nothing is prepared on it.
    prepared: Option<Mutex<HashMap<(usize, usize), Statement>>>,
}

impl LeaseConn {
    /// `client`, whose connection prepares its statements if its server session is its own:
    /// the process serving it is the one its startup announced. Errors: the probe's.
    pub(super) async fn new(client: Client) -> Result<LeaseConn, tokio_postgres::Error> {
        let pid: i32 = client.query_typed_one(PROBE, &[]).await?.try_get(0)?;
        // Unknown (the cancel request could not be read back): as a pooler, nothing prepared.
        let own = announced_pid(&client).await.is_ok_and(|a| a == pid);
        if !own {
            tracing::debug!(
                "PostgreSQL: the connection's server process is not the one its startup \
                 announced (a pooler): lease-row statements go unnamed"
            );
        }
        Ok(LeaseConn {
            client,
            prepared: own.then(Mutex::default),
        })
    }

    /// Whether this connection prepares its statements (its server session is its own).
    #[cfg(test)]
    pub(super) fn prepares(&self) -> bool {
        self.prepared.is_some()
    }

    /// Runs `sql` (a `'static` text, always with the same parameter types) with `params`:
    /// prepared if this connection prepares, else unnamed.
    pub(super) async fn query(
        &self,
        sql: &'static str,
        params: &Typed<'_>,
    ) -> Result<Vec<Row>, tokio_postgres::Error> {
        self.run(
            sql,
            params,
            async |s| self.client.query(&s, &values(params)).await,
            || self.client.query_typed(sql, params),
        )
        .await
    }

    /// As [`LeaseConn::query`]: at most one row.
    pub(super) async fn query_opt(
        &self,
        sql: &'static str,
        params: &Typed<'_>,
    ) -> Result<Option<Row>, tokio_postgres::Error> {
        self.run(
            sql,
            params,
            async |s| self.client.query_opt(&s, &values(params)).await,
            || self.client.query_typed_opt(sql, params),
        )
        .await
    }

    /// As [`LeaseConn::query`]: exactly one row.
    pub(super) async fn query_one(
        &self,
        sql: &'static str,
        params: &Typed<'_>,
    ) -> Result<Row, tokio_postgres::Error> {
        self.run(
            sql,
            params,
            async |s| self.client.query_one(&s, &values(params)).await,
            || self.client.query_typed_one(sql, params),
        )
        .await
    }

    /// As [`LeaseConn::query`]: the number of rows the statement changed.
    pub(super) async fn execute(
        &self,
        sql: &'static str,
        params: &Typed<'_>,
    ) -> Result<u64, tokio_postgres::Error> {
        self.run(
            sql,
            params,
            async |s| self.client.execute(&s, &values(params)).await,
            || self.client.execute_typed(sql, params),
        )
        .await
    }

    /// Runs `sql`: `prepared` with its statement if this connection has prepared it, else
    /// `unnamed`. On its first use on a connection that prepares, it runs unnamed while the
    /// statement is prepared beside it, pipelined in the same round trip: every use is one
    /// round trip, as unnamed statements were (a reply that does not come in time leaves the
    /// statement's outcome unknown exactly as before), and the next use is prepared. A
    /// preparation that fails (a table missing or refused: the statement fails alike) is tried
    /// again on the next use.
    async fn run<T, Prepared, Unnamed>(
        &self,
        sql: &'static str,
        params: &Typed<'_>,
        prepared: impl FnOnce(Statement) -> Prepared,
        unnamed: impl FnOnce() -> Unnamed,
    ) -> Result<T, tokio_postgres::Error>
    where
        Prepared: Future<Output = Result<T, tokio_postgres::Error>>,
        Unnamed: Future<Output = Result<T, tokio_postgres::Error>>,
    {
        let Some(cache) = &self.prepared else {
            return unnamed().await;
        };
        let id = (sql.as_ptr() as usize, sql.len());
        let known = cache
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&id)
            .cloned();
        if let Some(statement) = known {
            return prepared(statement).await;
        }
        let types: Vec<Type> = params.iter().map(|(_, t)| t.clone()).collect();
        // Biased: the preparation is polled first, so its messages are queued first.
        let (statement, reply) =
            tokio::join!(biased; self.client.prepare_typed(sql, &types), unnamed());
        if let Ok(statement) = statement {
            cache
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert(id, statement);
        }
        reply
    }
}

/// The values of `params`, as a prepared statement takes them.
fn values<'a>(params: &Typed<'a>) -> Vec<&'a (dyn ToSql + Sync)> {
    params.iter().map(|(v, _)| *v).collect()
}

impl Deref for LeaseConn {
    type Target = Client;

    fn deref(&self) -> &Client {
        &self.client
    }
}
