//! Waiting until a [`Cluster`] is stable, or agrees on who owns which slots.

use std::thread;
use std::time::{Duration, Instant};

use super::view::{NodeLine, View};
use super::{Cluster, MIN_STABLE_TIMEOUT, POLL_INTERVAL, QUERY_TIMEOUT, text_reply};
use crate::server::master_link_up;
use crate::{HarnessError, RespValue};

impl Cluster {
    /// How long the waits of this cluster may take: at least 60 s, or 10 node timeouts.
    pub(super) fn stable_timeout(&self) -> Duration {
        MIN_STABLE_TIMEOUT.max(self.options.node_timeout.saturating_mul(10))
    }

    /// Waits until the cluster is stable, i.e. on every live node (started and not paused):
    ///
    /// * `CLUSTER INFO` reports `cluster_state:ok`;
    /// * `CLUSTER NODES` lists every node (no handshakes), and no live node as failing;
    /// * the slot owners are the same everywhere, and so is `CLUSTER SLOTS` (compared with
    ///   replicas in sorted order);
    /// * every node agrees with each live node on its role (master, or replica of which
    ///   master);
    /// * every live replica reports `master_link_status:up`.
    ///
    /// Bounded by 60 s (or 10 node timeouts if more); the timeout error says which condition
    /// failed last and includes every live node's `CLUSTER NODES`.
    pub fn wait_until_stable(&self) -> Result<(), HarnessError> {
        let deadline = Instant::now() + self.stable_timeout();
        self.wait_for(
            "the cluster to become stable",
            deadline,
            Cluster::instability,
        )
    }

    /// `None` if stable, else what is not (yet).
    fn instability(&self) -> Result<Option<String>, HarnessError> {
        let live: Vec<usize> = (0..self.nodes.len())
            .filter(|&i| self.nodes[i].is_live())
            .collect();
        if live.is_empty() {
            return Err(HarnessError::NotRunning);
        }
        let mut snapshots = Vec::with_capacity(live.len());
        for &i in &live {
            let node = &self.nodes[i];
            let replies = node.commands_timeout(
                &[
                    &["CLUSTER", "INFO"],
                    &["CLUSTER", "NODES"],
                    &["CLUSTER", "SLOTS"],
                    &["INFO", "replication"],
                ],
                QUERY_TIMEOUT,
            )?;
            let [info, nodes, slots, replication] = <[RespValue; 4]>::try_from(replies)
                .map_err(|_| HarnessError::Protocol("expected 4 replies".into()))?;
            let info = text_reply(&info, "CLUSTER INFO")?;
            if !info.lines().any(|l| l.trim() == "cluster_state:ok") {
                return Ok(Some(format!(
                    "node {i} (port {}) does not report cluster_state:ok",
                    node.port()
                )));
            }
            let view = View::parse(i, text_reply(&nodes, "CLUSTER NODES")?)?;
            let replication = text_reply(&replication, "INFO replication")?.to_owned();
            snapshots.push((i, view, normalize_slots(&slots)?, replication));
        }

        let (first, first_view, first_slots, _) = &snapshots[0];
        let first_owners = first_view.owners(self);
        for (i, view, slots, replication) in &snapshots {
            let known = view
                .lines
                .iter()
                .filter(|l| !l.has_flag("handshake") && !l.has_flag("noaddr"))
                .count();
            if known != self.nodes.len() {
                return Ok(Some(format!(
                    "node {i} knows {known} of {} nodes",
                    self.nodes.len()
                )));
            }
            for line in &view.lines {
                let Some(j) = self.index_of_id(&line.id) else {
                    return Ok(Some(format!("node {i} lists an unknown node {}", line.id)));
                };
                if self.nodes[j].is_live() && (line.has_flag("fail") || line.has_flag("fail?")) {
                    return Ok(Some(format!(
                        "node {i} flags live node {j} as {}",
                        line.flags.join(",")
                    )));
                }
            }
            if view.owners(self) != first_owners {
                return Ok(Some(format!(
                    "nodes {first} and {i} disagree on the slot owners"
                )));
            }
            if slots != first_slots {
                return Ok(Some(format!(
                    "nodes {first} and {i} disagree on CLUSTER SLOTS"
                )));
            }
            let Some(me) = view.myself() else {
                return Ok(Some(format!("node {i} has no `myself` line")));
            };
            let my_role = me.role();
            // Everyone agrees with this node about its role.
            for (k, other, _, _) in &snapshots {
                let theirs = other.line(&self.ids[*i]).map(NodeLine::role);
                if theirs.as_ref() != Some(&my_role) {
                    return Ok(Some(format!(
                        "node {k} sees node {i} as {theirs:?}, but it is {my_role:?}"
                    )));
                }
            }
            if me.is_replica() && !master_link_up(replication) {
                return Ok(Some(format!(
                    "replica {i} (port {}) has no master link yet",
                    self.nodes[*i].port()
                )));
            }
        }
        Ok(None)
    }

    /// Polls `check` every 25 ms until it returns `Ok(None)`; `Ok(Some(why))` means not yet.
    /// Errors of `check` are retried too (a node may be busy), until `deadline`.
    pub(super) fn wait_for(
        &self,
        what: &str,
        deadline: Instant,
        mut check: impl FnMut(&Cluster) -> Result<Option<String>, HarnessError>,
    ) -> Result<(), HarnessError> {
        loop {
            let why = match check(self) {
                Ok(None) => return Ok(()),
                Ok(Some(why)) => why,
                Err(HarnessError::NotRunning) => {
                    return Err(HarnessError::InvalidArgument(format!(
                        "waiting for {what}: no node of the cluster is live"
                    )));
                }
                Err(e) => e.to_string(),
            };
            if Instant::now() >= deadline {
                return Err(HarnessError::Timeout(format!(
                    "waiting for {what}: {why}\n{}",
                    self.describe()
                )));
            }
            thread::sleep(POLL_INTERVAL);
        }
    }

    /// `CLUSTER NODES` of every live node, for error messages.
    pub fn describe(&self) -> String {
        let mut out = String::new();
        for (i, node) in self.nodes.iter().enumerate() {
            let state = if node.pid().is_none() {
                "not running"
            } else if node.is_paused() {
                "paused"
            } else {
                "live"
            };
            out.push_str(&format!(
                "--- node {i} (port {}, {state}) CLUSTER NODES ---\n",
                node.port()
            ));
            if node.is_live() {
                match node.command_timeout(&["CLUSTER", "NODES"], QUERY_TIMEOUT) {
                    Ok(reply) => match reply.as_str() {
                        Some(text) => out.push_str(text.trim_end()),
                        None => out.push_str(&reply.to_string()),
                    },
                    Err(e) => out.push_str(&format!("({e})")),
                }
                out.push('\n');
            }
        }
        out
    }

    /// Waits until every live node says `owner` owns all of `slots`.
    pub(super) fn wait_for_owner(
        &self,
        slots: &[u16],
        owner: usize,
        after: &str,
    ) -> Result<(), HarnessError> {
        let deadline = Instant::now() + self.stable_timeout();
        self.wait_for(
            &format!("all live nodes to see node {owner} owning its slots after {after}"),
            deadline,
            |c| {
                for i in (0..c.nodes.len()).filter(|&i| c.nodes[i].is_live()) {
                    let owners = c.view_of(i)?.owners(c);
                    if let Some(slot) = slots
                        .iter()
                        .find(|&&s| owners[usize::from(s)] != Some(owner))
                    {
                        return Ok(Some(format!(
                            "node {i} says slot {slot} belongs to {:?}",
                            owners[usize::from(*slot)]
                        )));
                    }
                }
                Ok(None)
            },
        )
    }
}

/// `CLUSTER SLOTS` as comparable data: ranges sorted by start, each with its master's
/// `ip:port` and the sorted `ip:port`s of its replicas (their order differs between nodes).
type SlotsSummary = Vec<(i64, i64, String, Vec<String>)>;

pub(super) fn normalize_slots(reply: &RespValue) -> Result<SlotsSummary, HarnessError> {
    let bad = || HarnessError::Protocol(format!("CLUSTER SLOTS: unexpected reply {reply}"));
    if let RespValue::Error(e) = reply {
        return Err(HarnessError::Server(format!("CLUSTER SLOTS: {e}")));
    }
    let endpoint = |node: &RespValue| -> Option<String> {
        let parts = node.as_array()?;
        let ip = parts.first()?.as_str()?;
        let port = parts.get(1)?.as_integer()?;
        Some(format!("{ip}:{port}"))
    };
    let mut out = Vec::new();
    for range in reply.as_array().ok_or_else(bad)? {
        let parts = range.as_array().ok_or_else(bad)?;
        let start = parts
            .first()
            .and_then(RespValue::as_integer)
            .ok_or_else(bad)?;
        let end = parts
            .get(1)
            .and_then(RespValue::as_integer)
            .ok_or_else(bad)?;
        let master = parts.get(2).and_then(endpoint).ok_or_else(bad)?;
        let mut replicas = parts
            .get(3..)
            .unwrap_or_default()
            .iter()
            .map(|n| endpoint(n).ok_or_else(bad))
            .collect::<Result<Vec<_>, _>>()?;
        replicas.sort();
        out.push((start, end, master, replicas));
    }
    out.sort();
    Ok(out)
}
