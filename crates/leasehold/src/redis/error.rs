//! Redis client errors mapped to the library's [`Error`].

use crate::core::error::{Error, Operation};

impl Error {
    /// Classifies a client error. `sent` says whether the command may have reached the
    /// server: a failure before sending (connection refused) is never ambiguous.
    pub(crate) fn from_redis(op: Operation, err: redis::RedisError) -> Self {
        use redis::{ErrorKind, ServerErrorKind};
        let kind = err.kind();
        if kind == ErrorKind::AuthenticationFailed
            || matches!(err.code(), Some("WRONGPASS") | Some("NOAUTH"))
        {
            return Error::Authentication { source: err.into() };
        }
        if err.code() == Some(crate::redis::strategy::FENCING_EXHAUSTED) {
            return Error::FencingExhausted { op };
        }
        if is_acl_refusal(&err) {
            return Error::PermissionDenied {
                op,
                source: err.into(),
            };
        }
        if err.is_io_error()
            || err.is_timeout()
            || err.is_connection_dropped()
            || kind == ErrorKind::Io
        {
            // A refused connection never carried our command; anything else (timeout, reset
            // after sending) may have been applied.
            let ambiguous = !err.is_connection_refusal() && op != Operation::Connect;
            return Error::Connection {
                op,
                ambiguous,
                source: err.into(),
            };
        }
        match kind {
            ErrorKind::Server(ServerErrorKind::BusyLoading)
            | ErrorKind::Server(ServerErrorKind::MasterDown) => Error::Connection {
                op,
                ambiguous: false,
                source: err.into(),
            },
            ErrorKind::UnexpectedReturnType | ErrorKind::Parse => Error::UnexpectedReply {
                op,
                detail: err.to_string(),
            },
            _ => Error::Server {
                op,
                source: err.into(),
            },
        }
    }
}

/// `NOPERM`, or a refusal inside one of our scripts, which the server reports as a plain `ERR`
/// ("ACL failure in script: ..." on Redis 8 and Valkey, "The user executing the script can't
/// ..." on Redis 7).
fn is_acl_refusal(err: &redis::RedisError) -> bool {
    if err.code() == Some("NOPERM") {
        return true;
    }
    let text = err.detail().unwrap_or_default();
    text.contains("ACL failure in script") || text.contains("The user executing the script can't")
}

/// A reply of a shape its command never returns, as the redis crate's error for it (which
/// becomes [`Error::UnexpectedReply`]): never read as a verdict.
pub(crate) fn unexpected_reply(what: &'static str, reply: &redis::Value) -> redis::RedisError {
    redis::RedisError::from((
        redis::ErrorKind::UnexpectedReturnType,
        what,
        format!("{reply:?}"),
    ))
}

/// The `{ok, n}` of leasehold's acquire scripts: an array of exactly two integers, as the
/// server sends a Lua table of two numbers. Read as `(i64, i64)`, the redis crate also took a
/// bulk `"1"`, so a reply that is no grant took a permit or a lock.
pub(crate) fn int_pair(reply: redis::Value) -> redis::RedisResult<(i64, i64)> {
    int_array(reply).map(|[ok, n]| (ok, n))
}

/// A script's reply of exactly `N` integers (see [`int_pair`]); server errors pass through.
pub(crate) fn int_array<const N: usize>(reply: redis::Value) -> redis::RedisResult<[i64; N]> {
    use redis::Value::{Array, Int, ServerError};
    let what = "not a script's array of integers";
    match reply {
        Array(items) => {
            let ints: Option<Vec<i64>> = items
                .iter()
                .map(|v| match v {
                    Int(n) => Some(*n),
                    _ => None,
                })
                .collect();
            ints.and_then(|v| <[i64; N]>::try_from(v).ok())
                .ok_or_else(|| unexpected_reply(what, &Array(items)))
        }
        ServerError(e) => Err(e.into()),
        other => Err(unexpected_reply(what, &other)),
    }
}

/// True if `error` says the Redis server is moving: a slot being migrated (`TRYAGAIN`, or a
/// `MOVED`/`ASK` redirection still pending after the cluster client's own retries), a cluster
/// or a Sentinel set in the middle of a failover (`CLUSTERDOWN`, `MASTERDOWN`, `READONLY` from
/// a demoted primary), a server loading its data set (`LOADING`). The command was refused, not
/// applied, and the same request succeeds once the topology settles: a waiting
/// [`acquire`](crate::Locker::acquire) retries these until its deadline.
pub fn is_topology_in_motion(error: &Error) -> bool {
    if error.is_ambiguous() {
        return false;
    }
    matches!(
        server_error(error).and_then(redis::RedisError::code),
        Some("TRYAGAIN" | "ASK" | "MOVED" | "CLUSTERDOWN" | "MASTERDOWN" | "READONLY" | "LOADING")
    )
}

/// The Redis client's error behind `error` (a connection, server, ACL or authentication
/// error), if the backend is Redis: the server's error code is
/// `server_error(e).and_then(|e| e.code())`.
pub fn server_error(error: &Error) -> Option<&redis::RedisError> {
    match error {
        Error::Connection { source, .. }
        | Error::Server { source, .. }
        | Error::PermissionDenied { source, .. }
        | Error::Authentication { source } => source.downcast_ref(),
        _ => None,
    }
}
