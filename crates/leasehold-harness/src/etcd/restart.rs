//! Restarting several members of an [`EtcdCluster`] at once.

use crate::HarnessError;

use super::cluster::EtcdCluster;

impl EtcdCluster {
    /// Starts every member that is not running (killed or stopped) again, all at once, with
    /// its data dir, ports and flags, and waits (at most 30 s, as
    /// [`EtcdCluster::wait_until_healthy`]) until every live member is healthy and they agree
    /// on a leader; returns the leader's index. Use it after stopping a majority (or all) of
    /// the members: [`Etcd::restart`](super::Etcd::restart) of one member waits until it
    /// serves clients, which it does only once a majority runs.
    ///
    /// # Errors
    /// A member that cannot be spawned; [`HarnessError::Timeout`] (with every member's status
    /// and log tail) if the cluster does not recover.
    pub fn restart_stopped(&mut self) -> Result<usize, HarnessError> {
        for i in 0..self.len() {
            let member = self.member_mut(i)?;
            if !member.is_running() {
                member.spawn()?;
            }
        }
        self.wait_until_healthy()
    }
}
