//! Session locks refused behind a connection pooler that hands server sessions around.

use tokio_postgres::error::SqlState;

use super::error::pg_error;
use crate::core::error::{Error, Operation};

/// Session locks refused: the URL reaches a pooler that does not give this connection a
/// server session of its own. `found`: what showed it.
pub(super) fn pooler_error(found: &str) -> Error {
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
pub(super) fn prepare_error(e: tokio_postgres::Error) -> Error {
    let code = e.code();
    if code == Some(&SqlState::DUPLICATE_PSTATEMENT)
        || code == Some(&SqlState::INVALID_SQL_STATEMENT_NAME)
    {
        return pooler_error(&format!("preparing a statement failed ({e})"));
    }
    pg_error(Operation::Connect, true, e)
}
