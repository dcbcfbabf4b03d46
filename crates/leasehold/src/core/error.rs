//! The library's error type.

use std::time::Duration;

/// What the library was doing when an error happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Operation {
    /// Connecting and detecting the server's capabilities.
    Connect,
    /// Acquiring a lock (`SET NX PX`, or the fencing script).
    Acquire,
    /// Releasing a lock.
    Release,
    /// Extending a lock's TTL.
    Extend,
    /// Reading a lock's state.
    Inspect,
    /// A fenced write or read at the protected resource.
    FencedWrite,
    /// Raising a fencing counter.
    RaiseFencingCounter,
    /// Appending to or reading a lock's history.
    History,
}

impl Operation {
    /// Whether the operation may change the server's state.
    fn writes(self) -> bool {
        !matches!(self, Operation::Connect | Operation::Inspect)
    }
}

impl std::fmt::Display for Operation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Operation::Connect => "connect",
            Operation::Acquire => "acquire",
            Operation::Release => "release",
            Operation::Extend => "extend",
            Operation::Inspect => "inspect",
            Operation::FencedWrite => "fenced write",
            Operation::RaiseFencingCounter => "raise fencing counter",
            Operation::History => "history",
        })
    }
}

/// Everything that can go wrong in `leasehold`.
///
/// A busy lock is *not* an error for [`try_acquire`](crate::Locker::try_acquire): it is the
/// [`TryAcquire::Busy`](crate::TryAcquire::Busy) outcome. It becomes [`Error::NotAcquired`] only
/// when a waiting acquisition reaches its deadline.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// An argument was rejected before anything was sent to the server.
    #[error("invalid {what}: {reason}")]
    InvalidArgument {
        /// Which argument.
        what: &'static str,
        /// Why it was rejected.
        reason: String,
    },

    /// The server could not be reached, the connection broke, or no reply came in time.
    ///
    /// When `ambiguous` is true the command may have been executed by the server even though we
    /// never saw the reply: an acquisition whose reply was lost may hold the lock until its TTL
    /// runs out, and a release whose reply was lost may have released it.
    #[error("{op}: connection error{}: {source}", if *.ambiguous { " (outcome unknown: the command may have been applied)" } else { "" })]
    Connection {
        /// What we were doing.
        op: Operation,
        /// Whether the server may have applied the command.
        ambiguous: bool,
        /// The underlying client error (a `redis::RedisError` on Redis, see
        /// [`redis::server_error`](crate::redis::server_error)).
        #[source]
        source: BoxError,
    },

    /// The server does not let our user do what a lock needs: Redis's ACL (`NOPERM`; docs/acl.md
    /// lists the least-privilege rule leasehold needs), etcd's RBAC, PostgreSQL's privileges.
    #[error(
        "{op}: permission denied by the server: {source} (see docs/acl.md for the rights leasehold needs)"
    )]
    PermissionDenied {
        /// The operation that was refused.
        op: Operation,
        /// The server's error.
        #[source]
        source: BoxError,
    },

    /// The server is not the topology the endpoint names: a cluster endpoint that reaches a
    /// server without cluster support, a standalone endpoint that reaches a cluster node, or a
    /// Sentinel master name the sentinels do not know; or a PostgreSQL URL for session locks
    /// that reaches a connection pooler, in any pool mode (use `?lock=lease`, or a direct
    /// connection).
    #[error("{reason}")]
    Topology {
        /// What was expected and what was found.
        reason: String,
    },

    /// The server refused our credentials (wrong password, unknown ACL user, or none given).
    #[error("authentication refused by the server: {source}")]
    Authentication {
        /// The underlying client error.
        #[source]
        source: BoxError,
    },

    /// The server answered with an error: `WRONGTYPE` (the key holds something that is not a
    /// lock), `READONLY` (we talk to a replica), `NOPERM` (ACL), an out-of-memory refusal, ...
    #[error("{op}: the server replied with an error: {source}")]
    Server {
        /// What we were doing.
        op: Operation,
        /// The underlying client error, carrying the server's message.
        #[source]
        source: BoxError,
    },

    /// The lock's fencing counter is at [`MAX_FENCING_NUMBER`](crate::MAX_FENCING_NUMBER) (2^53)
    /// or beyond, where the server's scripts (whose numbers are doubles) would hand out rounded,
    /// possibly repeated numbers: none was issued, and the lock was not taken. Only a counter
    /// set from outside gets there (at one acquisition per microsecond it takes 285 years).
    #[error(
        "{op}: the fencing counter is at 2^53 or beyond, past the numbers issued exactly; \
         no fencing number was issued and the lock was not taken"
    )]
    FencingExhausted {
        /// What we were doing.
        op: Operation,
    },

    /// The lock is no longer ours: its key is gone (expired, deleted, the server restarted
    /// without persistence) or now holds another holder's token.
    #[error(
        "lock {key:?} is not held by this token (expired, released, or taken by another holder)"
    )]
    NotHeld {
        /// The lock key.
        key: String,
    },

    /// A waiting acquisition reached its deadline while the lock stayed busy.
    #[error("lock {key:?} still busy after waiting {} ms ({attempts} attempts)", waited.as_millis())]
    NotAcquired {
        /// The lock key.
        key: String,
        /// How long we waited.
        waited: Duration,
        /// How many acquisition attempts were sent.
        attempts: u32,
    },

    /// The server granted the lock, but its reply came so late that the lease's validity
    /// (TTL minus the drift allowance, counted from when the request was sent) was already
    /// over: the key may be gone on the server, or about to be, and someone else may hold it.
    /// Not a lock: it was released (token-checked) again. A waiting `acquire` retries instead.
    #[error(
        "lock {key:?} granted, but the reply took {} ms, past the lease's validity (TTL {} ms); released",
        elapsed.as_millis(),
        ttl.as_millis()
    )]
    ExpiredOnArrival {
        /// The lock key.
        key: String,
        /// From sending the request to its reply (and the replicas' acknowledgement, if asked).
        elapsed: Duration,
        /// The TTL asked for.
        ttl: Duration,
    },

    /// The lock was granted but fewer replicas than required acknowledged it in time (see
    /// [`LockOptions::replica_ack`](crate::LockOptions::replica_ack)); it was released again.
    #[error(
        "lock {key:?} acquired but only {acked} of {wanted} replicas acknowledged it in time; released"
    )]
    NotReplicated {
        /// The lock key.
        key: String,
        /// Replicas that acknowledged.
        acked: u32,
        /// Replicas required.
        wanted: u32,
    },

    /// Too few Redlock nodes answered for a majority (unreachable, timed out, or failing).
    #[error(
        "no quorum {}: {needed} nodes needed; {nodes}",
        if key.is_empty() { "to connect".to_string() } else { format!("for lock {key:?}") }
    )]
    NoQuorum {
        /// The lock key (empty when connecting).
        key: String,
        /// The majority needed.
        needed: usize,
        /// Every node's outcome.
        nodes: crate::core::report::NodeReports,
    },

    /// The lease was lost while it was held: a renewal found the key gone or taken over, or no
    /// renewal succeeded before the validity ran out. Whatever ran under it may have overlapped
    /// with another holder.
    #[error("lock {key:?} was lost while held: {reason}")]
    LockLost {
        /// The lock key.
        key: String,
        /// Why.
        reason: LossReason,
    },

    /// The backend cannot do this: an operation or option it has no counterpart for (raising a
    /// fencing counter on etcd, whose fencing numbers are its revisions; replica acknowledgement
    /// outside Redis; ...).
    #[error("{backend}: {what} is not supported by this backend")]
    Unsupported {
        /// The backend (`redis`, `redlock`, `etcd`, `postgres`, `memory`, `file`).
        backend: &'static str,
        /// What was asked for.
        what: String,
    },

    /// The name is in use by the same primitive with other settings (a semaphore asked for with
    /// another number of permits than its current holders use), or by another primitive.
    #[error("{key:?}: {detail}")]
    Conflict {
        /// The name (lock key, semaphore name).
        key: String,
        /// What is in the way.
        detail: String,
    },

    /// The URL names a backend this build of the library was compiled without.
    #[error(
        "the {scheme}:// backend is not compiled in: enable leasehold's cargo feature \"{feature}\""
    )]
    BackendNotCompiled {
        /// The URL's scheme.
        scheme: String,
        /// The cargo feature that provides it.
        feature: &'static str,
    },

    /// The server answered something the library did not expect (a protocol or version mismatch).
    #[error("{op}: unexpected reply from the server: {detail}")]
    UnexpectedReply {
        /// What we were doing.
        op: Operation,
        /// What came back.
        detail: String,
    },
}

impl Error {
    /// True if the server may have applied the command although its reply was lost: a
    /// connection error after the command was sent, or a reply to a write (acquire, release,
    /// extend, a fenced write, raising a counter) that is not the command's own (the server
    /// received the command; what it did is unknown).
    pub fn is_ambiguous(&self) -> bool {
        match self {
            Error::Connection { ambiguous, .. } => *ambiguous,
            Error::UnexpectedReply { op, .. } => op.writes(),
            _ => false,
        }
    }

    /// True if the error means the lock was not (or no longer) held by the caller.
    pub fn is_not_held(&self) -> bool {
        matches!(self, Error::NotHeld { .. })
    }

    /// The variant's name (`NotHeld`, `Connection`, ...): OpenTelemetry's `error.type` in
    /// spans, and a stable label for logs and metrics.
    pub fn variant_name(&self) -> &'static str {
        match self {
            Error::InvalidArgument { .. } => "InvalidArgument",
            Error::Connection { .. } => "Connection",
            Error::PermissionDenied { .. } => "PermissionDenied",
            Error::Topology { .. } => "Topology",
            Error::Authentication { .. } => "Authentication",
            Error::Server { .. } => "Server",
            Error::FencingExhausted { .. } => "FencingExhausted",
            Error::NotHeld { .. } => "NotHeld",
            Error::NotAcquired { .. } => "NotAcquired",
            Error::ExpiredOnArrival { .. } => "ExpiredOnArrival",
            Error::NotReplicated { .. } => "NotReplicated",
            Error::NoQuorum { .. } => "NoQuorum",
            Error::LockLost { .. } => "LockLost",
            Error::Unsupported { .. } => "Unsupported",
            Error::Conflict { .. } => "Conflict",
            Error::BackendNotCompiled { .. } => "BackendNotCompiled",
            Error::UnexpectedReply { .. } => "UnexpectedReply",
        }
    }

    pub(crate) fn invalid(what: &'static str, reason: impl Into<String>) -> Self {
        Error::InvalidArgument {
            what,
            reason: reason.into(),
        }
    }
}

/// Why a lease was lost.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum LossReason {
    /// The key was gone or held another holder's token (expired, deleted or overwritten from
    /// outside, or lost by the server).
    NotHeld,
    /// The validity deadline passed without a successful renewal (server unreachable or too
    /// slow, or renewal was not enabled or had stopped at its cap).
    Expired,
}

impl std::fmt::Display for LossReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            LossReason::NotHeld => "the key no longer holds our token",
            LossReason::Expired => "the lease ran out before a renewal succeeded",
        })
    }
}

/// The boxed error behind [`Error::Connection`], [`Error::Server`], [`Error::PermissionDenied`]
/// and [`Error::Authentication`]: the backend client's own error (`redis::RedisError`,
/// `etcd_client::Error`, `tokio_postgres::Error`).
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// The library's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;
