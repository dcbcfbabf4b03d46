//! Failovers of a [`Cluster`]: a killed master taken over by a replica, or a graceful one.

use std::time::Instant;

use super::view::NodeLine;
use super::{CLUSTER_SLOTS, Cluster, QUERY_TIMEOUT, expect_ok, text_reply};
use crate::HarnessError;
use crate::server::master_link_up;

impl Cluster {
    /// Kills master `i` with SIGKILL and promotes one of its live replicas at once with
    /// `CLUSTER FAILOVER TAKEOVER` (no waiting for the node timeout and an election); then
    /// drives the live nodes until they all agree that the replica owns the slots (see
    /// `Cluster::drive_takeover`), and waits until the cluster is stable. Returns the new
    /// master's index.
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
        self.drive_takeover(&slots, replica)?;
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

impl Cluster {
    /// Waits until every live node says `new_master` owns `slots` after its `CLUSTER FAILOVER
    /// TAKEOVER`, and makes sure that moment comes.
    ///
    /// A takeover claims the slots without consensus, with the replica's own config epoch:
    /// raised to one above the greatest it knows, *unless its own is already that greatest*,
    /// in which case it is kept. Another node may hold that same epoch (the old master: they
    /// collided while both were masters, or bumped at once), and a node gives a slot to a
    /// claimant only for a config epoch *greater* than its current owner's. With the old
    /// master dead, nothing resolves such a tie (collisions are resolved between two live
    /// masters), so the nodes would never agree, however long we waited. So while waiting,
    /// each round looks for a live node whose view has one of the slots with a node of an
    /// epoch at least the new master's, and then raises the new master's epoch with
    /// `CLUSTER BUMPEPOCH`. The first bump answered `STILL` (its epoch is already the greatest
    /// it knows) is followed by a bump of another live node, whose higher current epoch
    /// reaches the new master by gossip, so that a later round's bump goes above. Otherwise
    /// the new master's claim wins everywhere at its next ping (every node pings every other
    /// at least every half node timeout). `Cluster::start` gives every node its own epoch,
    /// which makes such a tie rare; this makes it harmless.
    fn drive_takeover(&self, slots: &[u16], new_master: usize) -> Result<(), HarnessError> {
        let deadline = Instant::now() + self.stable_timeout();
        let what =
            format!("all live nodes to see node {new_master} owning its slots after the takeover");
        // Whether another node was bumped already (once: each bump raises the current epoch).
        let mut helped = false;
        self.wait_for(&what, deadline, |c| {
            let id = &c.ids[new_master];
            let epoch = c
                .view_of(new_master)?
                .myself()
                .filter(|me| me.is_master())
                .map(|me| me.config_epoch)
                .ok_or_else(|| {
                    HarnessError::Server(format!(
                        "node {new_master} is not a master after its takeover"
                    ))
                })?;
            for i in (0..c.nodes.len()).filter(|&i| c.nodes[i].is_live()) {
                let view = c.view_of(i)?;
                if let Some((slot, owner)) = view.outranks(slots, id, epoch) {
                    let (owner_epoch, owner) = (owner.config_epoch, owner.id.clone());
                    if !c.bump_epoch(new_master)? && !helped {
                        helped = c.bump_another(new_master)?;
                    }
                    return Ok(Some(format!(
                        "node {i} has slot {slot} on {owner} with config epoch {owner_epoch}, \
                         not below node {new_master}'s {epoch}: raising it"
                    )));
                }
                let owners = view.owners(c);
                if let Some(slot) = slots
                    .iter()
                    .find(|&&s| owners[usize::from(s)] != Some(new_master))
                {
                    return Ok(Some(format!(
                        "node {i} says slot {slot} belongs to {:?}",
                        owners[usize::from(*slot)]
                    )));
                }
            }
            Ok(None)
        })
    }

    /// `CLUSTER BUMPEPOCH` on the first live node other than `i` that bumps, so that `i`
    /// learns a greater current epoch; whether one did.
    fn bump_another(&self, i: usize) -> Result<bool, HarnessError> {
        for other in (0..self.nodes.len()).filter(|&o| o != i && self.nodes[o].is_live()) {
            if self.bump_epoch(other)? {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// `CLUSTER BUMPEPOCH` on node `i`: whether it raised its config epoch (`BUMPED`) or
    /// kept it (`STILL`).
    fn bump_epoch(&self, i: usize) -> Result<bool, HarnessError> {
        let reply = self.nodes[i].command_timeout(&["CLUSTER", "BUMPEPOCH"], QUERY_TIMEOUT)?;
        match text_reply(&reply, "CLUSTER BUMPEPOCH")? {
            r if r.starts_with("BUMPED") => Ok(true),
            r if r.starts_with("STILL") => Ok(false),
            r => Err(HarnessError::Protocol(format!(
                "CLUSTER BUMPEPOCH on node {i}: {r}"
            ))),
        }
    }
}

fn slots_of(owners: &[Option<usize>], node: usize) -> Vec<u16> {
    (0..CLUSTER_SLOTS)
        .filter(|&s| owners[usize::from(s)] == Some(node))
        .collect()
}
