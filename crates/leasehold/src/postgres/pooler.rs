//! Session locks refused behind a connection pooler that hands server sessions around.

use tokio_postgres::error::SqlState;

use crate::core::error::Error;

/// Session locks refused: the URL reaches a pooler that does not give this connection a
/// server session of its own. `found`: what showed it. The message also says what a session
/// pool needs (see the module docs of `postgres`).
pub(super) fn pooler_error(found: &str) -> Error {
    Error::Topology {
        reason: format!(
            "postgres: {found}, so the URL reaches a connection pooler that hands server \
             sessions from client to client (PgBouncer's pool_mode=transaction or statement, \
             the default of many managed PostgreSQL services; or a session pool that does not \
             release advisory locks when a client leaves). A session lock lives in the server \
             session, so another client could be granted it too: session locks are refused. \
             Use lease rows (add ?lock=lease to the URL), or connect to PostgreSQL directly or \
             through a session-mode pool (pool_mode=session, server_reset_query DISCARD ALL, \
             client_idle_timeout 0)"
        ),
    }
}

/// A statement name taken or unknown (preparing, or running a statement this connection
/// prepared) cannot happen on a server session of our own, which never deallocates what it
/// prepared: a pooler moved the connection to another client's server session.
fn is_pooler_sign(e: &tokio_postgres::Error) -> bool {
    let code = e.code();
    code == Some(&SqlState::DUPLICATE_PSTATEMENT)
        || code == Some(&SqlState::INVALID_SQL_STATEMENT_NAME)
}

/// What [`is_pooler_sign`] saw, for [`pooler_error`]; `None`: another error.
pub(super) fn pooler_sign(e: &tokio_postgres::Error) -> Option<String> {
    is_pooler_sign(e).then(|| format!("a prepared statement was taken or unknown ({e})"))
}
