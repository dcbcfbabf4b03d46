//! Failovers of a [`Cluster`]: a killed master taken over by a replica, or a graceful one.

use std::time::Instant;

use super::view::NodeLine;
use super::{CLUSTER_SLOTS, Cluster, QUERY_TIMEOUT, expect_ok};
use crate::HarnessError;
use crate::server::master_link_up;

impl Cluster {
    /// Kills master `i` with SIGKILL and promotes one of its live replicas at once with
    /// `CLUSTER FAILOVER TAKEOVER` (no waiting for the node timeout and an election); then
    /// waits until all live nodes agree that the replica owns the slots, and until the
    /// cluster is stable. Returns the new master's index.
    ///
    /// Fails with [`HarnessError::InvalidArgument`] (before killing anything) if node `i` is
    /// not a master or has no live replica.
    pub fn kill_master_and_promote(&mut self, i: usize) -> Result<usize, HarnessError> {
        self.check_live(i)?;
        let view = self.view_of(i)?;
        if !view.myself().is_some_and(NodeLine::is_master) {
            return Err(HarnessError::InvalidArgument(format!(
                "node {i} is not a master\n{}",
                view.text
            )));
        }
        let slots: Vec<u16> = slots_of(&view.owners(self), i);
        let candidates = self.replicas_of(i)?;
        // Prefer a replica whose link is up (it has the data).
        let replica = candidates
            .iter()
            .copied()
            .find(|&r| {
                self.nodes[r]
                    .info_timeout("replication", QUERY_TIMEOUT)
                    .is_ok_and(|info| master_link_up(&info))
            })
            .or_else(|| candidates.first().copied())
            .ok_or_else(|| {
                HarnessError::InvalidArgument(format!("master {i} has no live replica"))
            })?;

        self.nodes[i].kill();
        expect_ok(&self.nodes[replica], &["CLUSTER", "FAILOVER", "TAKEOVER"])?;
        self.wait_for_owner(&slots, replica, "the takeover")?;
        self.wait_until_stable()?;
        Ok(replica)
    }

    /// Graceful manual failover: `CLUSTER FAILOVER` on replica `replica` (its master must be
    /// reachable); waits until the replica owns its former master's slots on every live
    /// node, and until the cluster is stable. The former master becomes its replica.
    /// Returns the index of the former master.
    pub fn failover(&mut self, replica: usize) -> Result<usize, HarnessError> {
        self.check_live(replica)?;
        let view = self.view_of(replica)?;
        let Some(me) = view.myself().filter(|m| m.is_replica()) else {
            return Err(HarnessError::InvalidArgument(format!(
                "node {replica} is not a replica\n{}",
                view.text
            )));
        };
        let master = me
            .master_id
            .as_deref()
            .and_then(|id| self.index_of_id(id))
            .ok_or_else(|| {
                HarnessError::Server(format!(
                    "node {replica} replicates an unknown node\n{}",
                    view.text
                ))
            })?;
        let slots = slots_of(&view.owners(self), master);
        expect_ok(&self.nodes[replica], &["CLUSTER", "FAILOVER"])?;
        let deadline = Instant::now() + self.stable_timeout();
        self.wait_for("the manual failover", deadline, |c| {
            let own = c.view_of(replica)?;
            match own.myself() {
                Some(me) if me.is_master() => Ok(None),
                _ => Ok(Some(format!("node {replica} is not a master yet"))),
            }
        })?;
        self.wait_for_owner(&slots, replica, "the manual failover")?;
        self.wait_until_stable()?;
        Ok(master)
    }
}

fn slots_of(owners: &[Option<usize>], node: usize) -> Vec<u16> {
    (0..CLUSTER_SLOTS)
        .filter(|&s| owners[usize::from(s)] == Some(node))
        .collect()
}
