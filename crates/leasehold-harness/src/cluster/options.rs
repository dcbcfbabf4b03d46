//! [`ClusterOptions`]: how to build a [`Cluster`].

use std::time::Duration;

#[cfg(doc)]
use super::Cluster;
use crate::ServerOptions;

/// How to build a [`Cluster`]. Builder style:
/// `ClusterOptions::new().masters(3).replicas_per_master(1)`.
#[derive(Debug, Clone)]
pub struct ClusterOptions {
    pub(super) masters: usize,
    pub(super) replicas_per_master: usize,
    pub(super) node_timeout: Duration,
    pub(super) server: ServerOptions,
}

impl Default for ClusterOptions {
    fn default() -> Self {
        ClusterOptions {
            masters: 3,
            replicas_per_master: 1,
            node_timeout: Duration::from_millis(2000),
            server: ServerOptions::new(),
        }
    }
}

impl ClusterOptions {
    /// Defaults: 3 masters, 1 replica each, `cluster-node-timeout` 2000 ms, default
    /// [`ServerOptions`].
    pub fn new() -> Self {
        Self::default()
    }

    /// The number of masters (at least 1); the slots are split evenly among them.
    pub fn masters(mut self, masters: usize) -> Self {
        self.masters = masters;
        self
    }

    /// The number of replicas of each master (0 is allowed).
    pub fn replicas_per_master(mut self, replicas: usize) -> Self {
        self.replicas_per_master = replicas;
        self
    }

    /// `--cluster-node-timeout` (rounded to whole milliseconds, at least 1): how long a node
    /// may be unreachable before it is considered failing.
    pub fn node_timeout(mut self, timeout: Duration) -> Self {
        self.node_timeout = timeout;
        self
    }

    /// The base options of every node (password, AOF, TLS, raw arguments). A password also
    /// becomes every node's `--masterauth`, since any node may become a replica.
    pub fn server(mut self, options: ServerOptions) -> Self {
        self.server = options;
        self
    }

    /// The number of masters.
    pub fn master_count(&self) -> usize {
        self.masters
    }

    /// The number of replicas per master.
    pub fn replica_count(&self) -> usize {
        self.replicas_per_master
    }

    /// The node timeout.
    pub fn node_timeout_value(&self) -> Duration {
        self.node_timeout
    }

    /// The base options of every node.
    pub fn server_options(&self) -> &ServerOptions {
        &self.server
    }

    pub(super) fn node_timeout_ms(&self) -> u128 {
        self.node_timeout.as_millis().max(1)
    }
}
