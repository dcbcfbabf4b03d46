//! One real server process per [`Server`].

mod commands;
mod fake_clock;
mod launch;
mod lifecycle;
mod logs;
mod options;
mod ports;
mod spawn;

#[cfg(test)]
mod tests;

pub use fake_clock::{FakeClock, find_libfaketime};
pub use options::ServerOptions;

pub(crate) use commands::{info_role, master_link_up};
pub(crate) use logs::log_files_tail;
pub(crate) use ports::{free_port, release_port};
pub(crate) use spawn::conf_quote;

use std::fmt;
use std::time::Duration;

use tempfile::TempDir;

use crate::ServerBinary;
use crate::process::Process;
use ports::Ports;

/// How long a server may take to answer after being spawned.
const READY_TIMEOUT: Duration = Duration::from_secs(15);
/// How long a replica may take to report `master_link_status:up`.
const REPLICATION_TIMEOUT: Duration = Duration::from_secs(15);
/// Sleep between readiness probes.
const POLL_INTERVAL: Duration = Duration::from_millis(10);
/// How long [`Server::stop`] waits after SIGTERM before it sends SIGKILL.
const STOP_GRACE: Duration = Duration::from_secs(5);
/// Socket timeout of [`Server::command`].
const COMMAND_TIMEOUT: Duration = Duration::from_secs(10);
/// Socket timeout of one readiness probe.
const PROBE_TIMEOUT: Duration = Duration::from_millis(500);
/// Attempts (each on a fresh port) before [`Server::start`] gives up.
const START_ATTEMPTS: usize = 5;
/// Lines of log included in start errors.
const LOG_TAIL_LINES: usize = 30;

const SERVER_LOG: &str = "server.log";
const STDIO_LOG: &str = "stdio.log";
/// The configuration file of a sentinel, in its directory.
const SENTINEL_CONF: &str = "sentinel.conf";
/// The cluster state file of a cluster node, in its directory.
const NODES_CONF: &str = "nodes.conf";

/// What kind of process a [`Server`] is; decides the extra ports and arguments.
#[derive(Clone, PartialEq, Eq)]
pub(crate) enum Mode {
    /// A plain data server.
    Standalone,
    /// A cluster node: `--cluster-enabled yes --cluster-config-file <dir>/nodes.conf
    /// --cluster-port <bus port>` (the bus port is a second free port).
    ClusterNode,
    /// A sentinel: `<dir>/sentinel.conf --sentinel`. The file is written from the port,
    /// the directory and these lines (the `sentinel ...` directives) on a fresh start, and
    /// kept on restart (sentinel rewrites it with its state). With [`ServerOptions::tls`]
    /// the sentinel also listens with TLS and speaks TLS to the instances it monitors (data
    /// nodes and other sentinels): `tls-port`, the certificate files and
    /// `tls-replication yes`; clients still reach it on the plain port.
    Sentinel {
        /// Configuration lines after the harness' own (`port`, `bind`, `dir`, `logfile`).
        config: String,
    },
}

/// Without the sentinel configuration, which may contain a password.
impl fmt::Debug for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Mode::Standalone => "Standalone",
            Mode::ClusterNode => "ClusterNode",
            Mode::Sentinel { .. } => "Sentinel",
        })
    }
}

/// A running redis/valkey server process on `127.0.0.1`, with its own temporary directory.
///
/// Dropping it sends SIGKILL and reaps the process (this also happens when a test panics);
/// the directory is removed afterwards.
pub struct Server {
    binary: ServerBinary,
    options: ServerOptions,
    /// Arguments the harness adds on top of `options` (replication), kept for restarts.
    extra_args: Vec<String>,
    mode: Mode,
    ports: Ports,
    dir: TempDir,
    process: Process,
}

impl fmt::Debug for Server {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Server")
            .field("binary", &self.binary.label())
            .field("port", &self.ports.port)
            .field("tls_port", &self.ports.tls)
            .field("mode", &self.mode)
            .field("pid", &self.pid())
            .field("dir", &self.dir.path())
            .finish()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill();
        self.ports.release();
    }
}
