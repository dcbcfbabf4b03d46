//! PostgreSQL client errors as leasehold's errors.

use tokio_postgres::error::SqlState;

use crate::core::error::{Error, Operation, Result};

/// Whether the server ended the session with `code`: its idle limit
/// (`idle_session_timeout`), a terminate, a shutdown.
pub(crate) fn ends_the_session(code: &SqlState) -> bool {
    *code == SqlState::IDLE_SESSION_TIMEOUT
        || *code == SqlState::ADMIN_SHUTDOWN
        || *code == SqlState::CRASH_SHUTDOWN
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
        if ends_the_session(code) || *code == SqlState::CANNOT_CONNECT_NOW {
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
    if crate::core::tls::refused_client_certificate(&e) {
        return crate::core::tls::refused_certificate_error(e);
    }
    if crate::core::tls::untrusted_server_certificate(&e) {
        // tokio-postgres's own words ("error performing TLS handshake") hide the cause.
        let cause = std::iter::successors(Some(&e as &(dyn std::error::Error + 'static)), |e| {
            e.source()
        })
        .map(ToString::to_string)
        .find(|t| t.contains("invalid peer certificate"))
        .unwrap_or_default();
        return Error::Connection {
            op,
            ambiguous: false,
            source: format!(
                "the server's TLS certificate is not trusted ({cause}): sslmode=verify-ca, \
                 verify-full, and require with a CA check it against sslrootcert (else the CA \
                 file of the options, else the system's roots)"
            )
            .into(),
        };
    }
    Error::Connection {
        op,
        ambiguous: sent && op != Operation::Connect,
        source: e.into(),
    }
}

/// A client whose statements are bounded by its response timeout (both PostgreSQL clients).
pub(crate) trait Timed {
    /// How long a statement's reply may take.
    fn response_timeout(&self) -> std::time::Duration;

    /// `statement`, sent, with its reply bounded by the response timeout: a timeout or a
    /// failure is ambiguous for `op` (the server may have run it).
    async fn timed<T>(
        &self,
        op: Operation,
        statement: impl Future<Output = std::result::Result<T, tokio_postgres::Error>>,
    ) -> Result<T> {
        match tokio::time::timeout(self.response_timeout(), statement).await {
            Ok(r) => r.map_err(|e| pg_error(op, true, e)),
            Err(_) => Err(timeout_error(op, true)),
        }
    }
}

pub(crate) fn timeout_error(op: Operation, sent: bool) -> Error {
    Error::Connection {
        op,
        ambiguous: sent,
        source: std::io::Error::new(std::io::ErrorKind::TimedOut, "no reply in time").into(),
    }
}

/// A column that does not read as its type: [`Error::UnexpectedReply`] for `op`.
pub(crate) fn unexpected(op: Operation) -> impl Fn(tokio_postgres::Error) -> Error {
    move |e| Error::UnexpectedReply {
        op,
        detail: e.to_string(),
    }
}

/// A `CREATE TABLE IF NOT EXISTS` that lost a race with another client's: the table is there.
pub(crate) fn is_create_race(e: &Error) -> bool {
    matches!(e, Error::Server { source, .. }
        if source
            .downcast_ref::<tokio_postgres::Error>()
            .and_then(|e| e.code())
            .is_some_and(|c| *c == SqlState::UNIQUE_VIOLATION || *c == SqlState::DUPLICATE_TABLE))
}
