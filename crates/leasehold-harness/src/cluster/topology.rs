//! The nodes of a [`Cluster`], and who is master of what.

use super::options::ClusterOptions;
use super::view::View;
use super::{CLUSTER_SLOTS, Cluster, QUERY_TIMEOUT, text_reply};
use crate::server::info_role;
use crate::{HarnessError, RespValue, Server};

impl Cluster {
    /// All nodes, by index (see the type's documentation for the numbering).
    pub fn nodes(&self) -> &[Server] {
        &self.nodes
    }

    /// The number of nodes.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Always false: a cluster has at least one node.
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// The options the cluster was started with.
    pub fn options(&self) -> &ClusterOptions {
        &self.options
    }

    /// Node `i`.
    pub fn node(&self, i: usize) -> Result<&Server, HarnessError> {
        let len = self.nodes.len();
        self.nodes.get(i).ok_or_else(|| bad_index(i, len))
    }

    /// Node `i`, mutable (to kill, stop or restart it; a restarted node keeps its
    /// `nodes.conf` and so its identity, and rejoins the cluster).
    pub fn node_mut(&mut self, i: usize) -> Result<&mut Server, HarnessError> {
        let len = self.nodes.len();
        self.nodes.get_mut(i).ok_or_else(|| bad_index(i, len))
    }

    /// The cluster node id (`CLUSTER MYID`) of node `i`.
    pub fn node_id(&self, i: usize) -> Result<&str, HarnessError> {
        self.ids
            .get(i)
            .map(String::as_str)
            .ok_or_else(|| bad_index(i, self.ids.len()))
    }

    /// The index of the node with this cluster node id.
    pub fn index_of_id(&self, id: &str) -> Option<usize> {
        self.ids.iter().position(|x| x == id)
    }

    /// Seed URLs `redis://127.0.0.1:PORT/` of the nodes started as masters (indices
    /// `0..masters`) that have not been killed or stopped; if all of them have, of every
    /// node still running. These are start-up seeds, not necessarily the current masters
    /// (see [`Cluster::masters`]).
    pub fn urls(&self) -> Vec<String> {
        let seeds: Vec<String> = self.nodes[..self.options.masters]
            .iter()
            .filter(|n| n.pid().is_some())
            .map(Server::url)
            .collect();
        if seeds.is_empty() {
            self.nodes
                .iter()
                .filter(|n| n.pid().is_some())
                .map(Server::url)
                .collect()
        } else {
            seeds
        }
    }

    /// The first of [`Cluster::urls`] (node 0's URL if no node is running).
    pub fn url(&self) -> String {
        self.urls()
            .into_iter()
            .next()
            .unwrap_or_else(|| self.nodes[0].url())
    }

    /// Indices of the current masters, in index order: the nodes that the first live node
    /// lists as masters (`CLUSTER NODES`), not flagged as failed, and still running.
    pub fn master_indices(&self) -> Result<Vec<usize>, HarnessError> {
        let view = self.any_view()?;
        let mut out: Vec<usize> = view
            .lines
            .iter()
            .filter(|l| l.is_master() && !l.has_flag("fail"))
            .filter_map(|l| self.index_of_id(&l.id))
            .filter(|&i| self.nodes[i].pid().is_some())
            .collect();
        out.sort_unstable();
        Ok(out)
    }

    /// The current masters (see [`Cluster::master_indices`]).
    pub fn masters(&self) -> Result<Vec<&Server>, HarnessError> {
        Ok(self
            .master_indices()?
            .into_iter()
            .map(|i| &self.nodes[i])
            .collect())
    }

    /// The live replicas (running, not paused) that the first live node lists as
    /// replicas of node `i`, in index order.
    pub fn replicas_of(&self, i: usize) -> Result<Vec<usize>, HarnessError> {
        let id = self.node_id(i)?.to_owned();
        let view = self.any_view()?;
        let mut out: Vec<usize> = view
            .lines
            .iter()
            .filter(|l| l.is_replica() && l.master_id.as_deref() == Some(id.as_str()))
            .filter_map(|l| self.index_of_id(&l.id))
            .filter(|&r| self.nodes[r].is_live())
            .collect();
        out.sort_unstable();
        Ok(out)
    }

    /// The hash slot of `key`, as the server computes it (`CLUSTER KEYSLOT`, asked of a
    /// live node).
    pub fn keyslot(&self, key: &str) -> Result<u16, HarnessError> {
        let mut last = None;
        for node in self.nodes.iter().filter(|n| n.is_live()) {
            match node.command_timeout(&["CLUSTER", "KEYSLOT", key], QUERY_TIMEOUT) {
                Ok(RespValue::Integer(slot)) => {
                    return u16::try_from(slot)
                        .ok()
                        .filter(|s| *s < CLUSTER_SLOTS)
                        .ok_or_else(|| {
                            HarnessError::Protocol(format!("CLUSTER KEYSLOT returned {slot}"))
                        });
                }
                Ok(other) => {
                    return Err(HarnessError::Server(format!("CLUSTER KEYSLOT: {other}")));
                }
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or(HarnessError::NotRunning))
    }

    /// The index of the node that currently owns `slot`, according to the first live node.
    pub fn master_index_for_slot(&self, slot: u16) -> Result<usize, HarnessError> {
        check_slot(slot)?;
        let view = self.any_view()?;
        let owners = view.owners(self);
        owners[usize::from(slot)].ok_or_else(|| {
            HarnessError::Server(format!(
                "no node owns slot {slot} (according to node {})\n{}",
                view.source, view.text
            ))
        })
    }

    /// The index of the node that currently owns `key`'s slot.
    pub fn master_index_for_key(&self, key: &str) -> Result<usize, HarnessError> {
        self.master_index_for_slot(self.keyslot(key)?)
    }

    /// The node that currently owns `key`'s slot.
    pub fn master_for_key(&self, key: &str) -> Result<&Server, HarnessError> {
        Ok(&self.nodes[self.master_index_for_key(key)?])
    }

    /// `CLUSTER NODES` of node `i`, parsed.
    pub(super) fn view_of(&self, i: usize) -> Result<View, HarnessError> {
        let reply = self.nodes[i].command_timeout(&["CLUSTER", "NODES"], QUERY_TIMEOUT)?;
        View::parse(i, text_reply(&reply, "CLUSTER NODES")?)
    }

    /// The view of the first live node that answers.
    fn any_view(&self) -> Result<View, HarnessError> {
        let mut last = None;
        for i in (0..self.nodes.len()).filter(|&i| self.nodes[i].is_live()) {
            match self.view_of(i) {
                Ok(view) => return Ok(view),
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or(HarnessError::NotRunning))
    }

    fn check_index(&self, i: usize) -> Result<(), HarnessError> {
        self.node(i).map(|_| ())
    }

    pub(super) fn check_live(&self, i: usize) -> Result<(), HarnessError> {
        if self.node(i)?.is_live() {
            Ok(())
        } else {
            Err(HarnessError::InvalidArgument(format!(
                "node {i} (port {}) is not live (killed, stopped or paused)",
                self.nodes[i].port()
            )))
        }
    }

    /// Whether node `i` currently calls itself a master (`INFO replication`).
    pub fn is_master(&self, i: usize) -> Result<bool, HarnessError> {
        self.check_index(i)?;
        let info = self.nodes[i].info_timeout("replication", QUERY_TIMEOUT)?;
        Ok(matches!(info_role(&info), Some("master")))
    }
}

fn bad_index(i: usize, len: usize) -> HarnessError {
    HarnessError::InvalidArgument(format!("no node {i}: the cluster has {len} nodes"))
}

pub(super) fn check_slot(slot: u16) -> Result<(), HarnessError> {
    if slot < CLUSTER_SLOTS {
        Ok(())
    } else {
        Err(HarnessError::InvalidArgument(format!(
            "slot {slot} is out of range (0..={})",
            CLUSTER_SLOTS - 1
        )))
    }
}
