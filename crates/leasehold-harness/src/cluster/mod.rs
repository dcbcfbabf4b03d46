//! A Redis Cluster of real server processes, built without `redis-cli`.

mod failover;
mod migration;
mod options;
mod start;
mod topology;
mod view;
mod wait;

#[cfg(test)]
mod tests;

pub use options::ClusterOptions;

use std::fmt;
use std::time::Duration;

use crate::{HarnessError, RespValue, Server};

/// The number of hash slots of a Redis Cluster (`0..=16383`).
pub const CLUSTER_SLOTS: u16 = 16384;

/// Sleep between two looks at the cluster's state.
const POLL_INTERVAL: Duration = Duration::from_millis(25);
/// Socket timeout of the harness' own queries to live nodes.
const QUERY_TIMEOUT: Duration = Duration::from_secs(5);
/// Minimum bound of [`Cluster::wait_until_stable`] and the other waits.
const MIN_STABLE_TIMEOUT: Duration = Duration::from_secs(60);
/// Keys moved per `MIGRATE` in [`Cluster::migrate_keys`].
const MIGRATE_BATCH: usize = 100;
/// Timeout argument of `MIGRATE`, in milliseconds.
const MIGRATE_TIMEOUT_MS: &str = "10000";

/// A Redis Cluster on `127.0.0.1`: `masters` masters with `replicas_per_master` replicas
/// each, every node a [`Server`] with its own directory, port and cluster-bus port.
///
/// Node indices are fixed at start: `0..masters` are the nodes started as masters, master
/// `m`'s replicas follow as `masters + m * replicas_per_master + r`. Roles change with
/// failovers; methods that talk about the *current* topology ([`Cluster::masters`],
/// [`Cluster::master_index_for_slot`], [`Cluster::replicas_of`], ...) ask the nodes.
///
/// Each node runs with `--cluster-enabled yes --cluster-config-file <dir>/nodes.conf
/// --cluster-port <free port> --cluster-node-timeout <ms> --cluster-allow-replica-migration
/// no` (plus `--masterauth` if a password is set), then the options' raw arguments, which
/// may override these. Full slot coverage is required (the server's default).
///
/// Dropping the cluster kills every node.
pub struct Cluster {
    nodes: Vec<Server>,
    ids: Vec<String>,
    options: ClusterOptions,
}

impl fmt::Debug for Cluster {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Cluster")
            .field("masters", &self.options.masters)
            .field("replicas_per_master", &self.options.replicas_per_master)
            .field(
                "nodes",
                &self
                    .nodes
                    .iter()
                    .zip(&self.ids)
                    .map(|(n, id)| (n.port(), id.as_str()))
                    .collect::<Vec<_>>(),
            )
            .finish()
    }
}

fn expect_ok(node: &Server, args: &[&str]) -> Result<(), HarnessError> {
    match node.command_timeout(args, QUERY_TIMEOUT)? {
        reply if reply.is_ok() => Ok(()),
        reply => Err(HarnessError::Server(format!(
            "{} on port {}: {reply}",
            args.join(" "),
            node.port()
        ))),
    }
}

fn text_reply<'a>(reply: &'a RespValue, what: &str) -> Result<&'a str, HarnessError> {
    match reply {
        RespValue::Error(e) => Err(HarnessError::Server(format!("{what}: {e}"))),
        other => other
            .as_str()
            .ok_or_else(|| HarnessError::Protocol(format!("{what}: unexpected reply {other}"))),
    }
}
