//! An etcd cluster of several members, bootstrapped together, and which of them leads.

use std::fmt;
use std::thread;
use std::time::{Duration, Instant};

use crate::HarnessError;

#[cfg(doc)]
use super::find::etcd_cluster_for_test;
use super::find::require_etcd;
use super::gateway::EtcdStatus;
use super::member::{Etcd, LaunchError, POLL_INTERVAL, PROBE_TIMEOUT, START_ATTEMPTS, new_members};

/// The number of members [`etcd_cluster_for_test`] callers usually ask for, and the smallest
/// cluster that survives the loss of one member.
pub const DEFAULT_ETCD_MEMBERS: usize = 3;

/// How long a whole cluster may take to serve clients (members elect a leader first).
const CLUSTER_READY_TIMEOUT: Duration = Duration::from_secs(60);
/// Bound of [`EtcdCluster::wait_until_healthy`].
const HEALTHY_TIMEOUT: Duration = Duration::from_secs(30);

/// An etcd cluster on `127.0.0.1`: `members` [`Etcd`] members `n0`, `n1`, ..., each with its
/// own directory, client port and peer port, bootstrapped together with a static
/// `--initial-cluster` and a token of their own.
///
/// Member indices are fixed at start. Kill, stop, pause, resume or restart a member through
/// [`EtcdCluster::member_mut`] / [`EtcdCluster::member`]; a restarted member keeps its data
/// dir, and so its identity, and rejoins. Dropping the cluster kills every member.
pub struct EtcdCluster {
    members: Vec<Etcd>,
}

impl fmt::Debug for EtcdCluster {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(&self.members).finish()
    }
}

impl EtcdCluster {
    /// Starts `members` members (1 to 15; [`DEFAULT_ETCD_MEMBERS`] is the usual choice) on
    /// free loopback ports, all at once, and waits (at most 60 s) until every one serves
    /// clients (see [`Etcd::start`] for the flags and readiness). If a member exits during
    /// start-up (e.g. another process took a port), the whole cluster is started again on
    /// new ports, up to 5 times.
    ///
    /// # Errors
    /// [`HarnessError::InvalidArgument`] for a size out of range,
    /// [`HarnessError::NotInstalled`] without etcd, [`HarnessError::StartFailed`] if a member
    /// does not come up.
    pub fn start(members: usize) -> Result<EtcdCluster, HarnessError> {
        if !(1..=15).contains(&members) {
            return Err(HarnessError::InvalidArgument(format!(
                "an etcd cluster needs 1 to 15 members, not {members}"
            )));
        }
        let binary = require_etcd()?;
        let mut last = None;
        'attempts: for _ in 0..START_ATTEMPTS {
            let mut cluster = EtcdCluster {
                members: new_members(&binary, members)?,
            };
            for member in &mut cluster.members {
                member.spawn()?;
            }
            let deadline = Instant::now() + CLUSTER_READY_TIMEOUT;
            let mut ready = vec![false; members];
            while ready.contains(&false) {
                for (i, member) in cluster.members.iter_mut().enumerate() {
                    if ready[i] {
                        continue;
                    }
                    match member.poll_ready() {
                        Ok(r) => ready[i] = r,
                        Err(LaunchError {
                            error,
                            retry_on_other_ports: true,
                        }) => {
                            last = Some(error);
                            continue 'attempts;
                        }
                        Err(LaunchError { error, .. }) => return Err(error),
                    }
                }
                if !ready.contains(&false) {
                    break;
                }
                if Instant::now() >= deadline {
                    let i = ready
                        .iter()
                        .position(|r| !r)
                        .expect("a member is not ready");
                    let reason = format!(
                        "not serving clients (GET /health) within {CLUSTER_READY_TIMEOUT:?}; \
                         the cluster:\n{}",
                        cluster.describe()
                    );
                    return Err(cluster.members[i].failed(reason, false).error);
                }
                thread::sleep(POLL_INTERVAL);
            }
            return Ok(cluster);
        }
        Err(last.unwrap_or_else(|| HarnessError::Timeout("no start attempt was made".into())))
    }

    /// All members, by index.
    pub fn members(&self) -> &[Etcd] {
        &self.members
    }

    /// The number of members.
    pub fn len(&self) -> usize {
        self.members.len()
    }

    /// Always false: a cluster has at least one member.
    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    /// Member `i`.
    pub fn member(&self, i: usize) -> Result<&Etcd, HarnessError> {
        let len = self.members.len();
        self.members.get(i).ok_or_else(|| bad_index(i, len))
    }

    /// Member `i`, mutable (to kill, stop or restart it).
    pub fn member_mut(&mut self, i: usize) -> Result<&mut Etcd, HarnessError> {
        let len = self.members.len();
        self.members.get_mut(i).ok_or_else(|| bad_index(i, len))
    }

    /// Every member's client URL (`http://127.0.0.1:PORT`), by index, also of members that
    /// are not running.
    pub fn endpoints(&self) -> Vec<String> {
        self.members.iter().map(Etcd::endpoint).collect()
    }

    /// The index of the leader, if the live members (started, not paused) agree on one: a
    /// member that reports itself as leader and is reported as leader by every live member
    /// that answers, which must be a majority of all members. `None` otherwise (during an
    /// election, without quorum, or while a member that was cut off still takes itself for
    /// the leader).
    pub fn leader_index(&self) -> Option<usize> {
        let statuses: Vec<(usize, EtcdStatus)> = self
            .members
            .iter()
            .enumerate()
            .filter(|(_, m)| m.is_live())
            .filter_map(|(i, m)| m.status_timeout(PROBE_TIMEOUT).ok().map(|s| (i, s)))
            .collect();
        let mut claims = statuses.iter().filter(|(_, s)| s.is_leader());
        let (leader, status) = claims.next()?;
        if claims.next().is_some() {
            return None;
        }
        let agree = statuses
            .iter()
            .filter(|(_, s)| s.leader == Some(status.member_id))
            .count();
        (agree == statuses.len() && agree > self.members.len() / 2).then_some(*leader)
    }

    /// Waits (at most 30 s) until every live member (started, not paused) says `GET
    /// /health` is true and [`EtcdCluster::leader_index`] names a leader; returns the
    /// leader's index. The timeout error shows every member's status and log tail.
    pub fn wait_until_healthy(&self) -> Result<usize, HarnessError> {
        let deadline = Instant::now() + HEALTHY_TIMEOUT;
        loop {
            let healthy = self
                .members
                .iter()
                .filter(|m| m.is_live())
                .all(|m| m.health_timeout(PROBE_TIMEOUT).unwrap_or(false));
            if healthy && let Some(leader) = self.leader_index() {
                return Ok(leader);
            }
            if Instant::now() >= deadline {
                return Err(HarnessError::Timeout(format!(
                    "the etcd cluster did not become healthy with one leader within \
                     {HEALTHY_TIMEOUT:?}:\n{}",
                    self.describe()
                )));
            }
            thread::sleep(POLL_INTERVAL);
        }
    }

    /// One paragraph per member: endpoint, process state, health, status and log tail; for
    /// error messages.
    pub fn describe(&self) -> String {
        let mut out = String::new();
        for (i, m) in self.members.iter().enumerate() {
            let state = match (m.pid(), m.is_paused()) {
                (None, _) => "not running".to_owned(),
                (Some(pid), true) => format!("pid {pid}, paused"),
                (Some(pid), false) => format!("pid {pid}"),
            };
            out.push_str(&format!(
                "--- member {i} ({}, {}): {state}\n",
                m.name,
                m.endpoint()
            ));
            if m.is_live() {
                match m.health_timeout(PROBE_TIMEOUT) {
                    Ok(h) => out.push_str(&format!("health: {h}\n")),
                    Err(e) => out.push_str(&format!("health: {e}\n")),
                }
                match m.status_timeout(PROBE_TIMEOUT) {
                    Ok(s) => out.push_str(&format!("{s:?}\n")),
                    Err(e) => out.push_str(&format!("status: {e}\n")),
                }
            }
            out.push_str(&m.log_tail(8));
        }
        out
    }
}

fn bad_index(i: usize, len: usize) -> HarnessError {
    HarnessError::InvalidArgument(format!(
        "member index {i} out of range (the cluster has {len})"
    ))
}
