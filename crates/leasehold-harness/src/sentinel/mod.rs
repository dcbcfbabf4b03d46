//! A primary, its replicas and Redis Sentinels watching them, all real processes.

mod failover;
mod nodes;
mod options;
mod start;
mod wait;

#[cfg(test)]
mod tests;

pub use options::SentinelOptions;

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use crate::Server;

/// The default master name the sentinels monitor.
pub const DEFAULT_MASTER_NAME: &str = "leasehold";

/// Sleep between two looks at the sentinels' state.
const POLL_INTERVAL: Duration = Duration::from_millis(25);
/// Socket timeout of the harness' own queries.
const QUERY_TIMEOUT: Duration = Duration::from_secs(5);
/// Lines of each sentinel's log in timeout errors.
const LOG_TAIL_LINES: usize = 25;
/// Extra time on top of the computed bounds of the waits.
const MARGIN: Duration = Duration::from_secs(30);
/// How long a replica may take to link to the primary at start.
const REPLICATION_TIMEOUT: Duration = Duration::from_secs(15);

/// A primary with replicas and sentinels monitoring it, all on `127.0.0.1` with free ports
/// and their own directories.
///
/// Data nodes are numbered at start: `0` is the initial primary, `1..=replicas` its
/// replicas; failovers change which one is the primary ([`SentinelSet::primary`] asks the
/// sentinels). Sentinels are the same server binary run with `<dir>/sentinel.conf
/// --sentinel`; they are [`Server`]s too (kill, pause, resume, `command`).
///
/// Every sentinel gets `SENTINEL DEBUG publish-period 250 info-period 1000 tilt-period
/// 5000` at start, so discovery and failovers take fractions of a second to a few seconds
/// instead of the production intervals.
///
/// Dropping the set kills every process.
pub struct SentinelSet {
    data: Vec<Server>,
    sentinels: Vec<Server>,
    options: SentinelOptions,
}

impl fmt::Debug for SentinelSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SentinelSet")
            .field("master_name", &self.options.master_name)
            .field(
                "data_ports",
                &self.data.iter().map(Server::port).collect::<Vec<_>>(),
            )
            .field(
                "sentinel_ports",
                &self.sentinels.iter().map(Server::port).collect::<Vec<_>>(),
            )
            .finish()
    }
}

/// One entry of `SENTINEL MASTER` / `SENTINEL REPLICAS`: field name to value.
type Fields = BTreeMap<String, String>;

/// The port the sentinels know a data node by: its TLS port if it has one (then it
/// replicates over TLS and announces that port), else its plain port.
fn announced_port(node: &Server) -> u16 {
    node.tls_port().unwrap_or_else(|| node.port())
}
