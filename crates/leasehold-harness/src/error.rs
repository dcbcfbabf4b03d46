use std::io;
use std::path::PathBuf;

/// Everything that can go wrong while running a test server.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum HarnessError {
    /// An I/O error (spawning, signalling, file or socket access).
    #[error("I/O error: {0}")]
    Io(#[from] io::Error),

    /// The server process did not come up.
    #[error(
        "failed to start {binary} on 127.0.0.1:{port}: {reason}\n\
         --- tail of the server's log ---\n{log_tail}"
    )]
    StartFailed {
        /// The binary's label, e.g. `redis 8.6.3`.
        binary: String,
        /// The port it was asked to listen on.
        port: u16,
        /// What went wrong (early exit status, timeout, ...).
        reason: String,
        /// The last lines of the server's log file and stdout/stderr.
        log_tail: String,
    },

    /// The operation needs a running server, but it was killed or stopped.
    #[error("the server is not running")]
    NotRunning,

    /// The server's reply was not valid RESP2.
    #[error("RESP protocol error: {0}")]
    Protocol(String),

    /// The server answered with an error reply where success was required.
    #[error("server replied with an error: {0}")]
    Server(String),

    /// Something did not happen in time (a reply, replication link, ...).
    #[error("timed out: {0}")]
    Timeout(String),

    /// A program the harness needs is not installed (e.g. PostgreSQL's server binaries).
    #[error("{0} (run scripts/install-servers)")]
    NotInstalled(String),

    /// Preparing a server failed before it was started (system user lookup, ownership of its
    /// directory, `initdb`).
    #[error(
        "setting up {what} failed: {reason}\n\
         --- tail of the log ---\n{log_tail}"
    )]
    Setup {
        /// What was being set up, e.g. `PostgreSQL in /tmp/leasehold-postgres-1a2b3c`.
        what: String,
        /// What went wrong.
        reason: String,
        /// The last lines of the tool's output, if any.
        log_tail: String,
    },

    /// The server binary lacks a feature the test asked for (e.g. TLS).
    #[error("{binary}: {reason}")]
    Unsupported {
        /// The binary, e.g. `redis 8.6.3 (/root/.cache/leasehold/servers/redis-8.6.3/redis-server)`.
        binary: String,
        /// What is missing.
        reason: String,
    },

    /// A harness method was called with an argument that does not fit (an index out of
    /// range, a slot above 16383, a node in the wrong role, ...).
    #[error("invalid argument: {0}")]
    InvalidArgument(String),

    /// A file is not a redis/valkey server binary the harness understands.
    #[error("{}: not a usable redis/valkey server binary ({reason})", path.display())]
    UnknownBinary {
        /// The path that was probed.
        path: PathBuf,
        /// Why it was rejected.
        reason: String,
    },
}

impl HarnessError {
    /// Maps socket read/write timeouts to [`HarnessError::Timeout`], other I/O errors to
    /// [`HarnessError::Io`].
    pub(crate) fn from_io(err: io::Error, what: &str) -> Self {
        match err.kind() {
            io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => {
                HarnessError::Timeout(format!("{what}: {err}"))
            }
            _ => HarnessError::Io(err),
        }
    }

    /// True if this is a [`HarnessError::Timeout`].
    pub fn is_timeout(&self) -> bool {
        matches!(self, HarnessError::Timeout(_))
    }
}
