//! Failovers of a [`SentinelSet`]: forced, or after the primary was killed.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use super::{MARGIN, QUERY_TIMEOUT, SentinelSet, announced_port};
use crate::server::{info_role, master_link_up};
use crate::{HarnessError, RespValue};

impl SentinelSet {
    /// Forces a failover with `SENTINEL FAILOVER <name>` (retried while the sentinel finds
    /// no suitable replica yet), then waits until every live sentinel reports the same new
    /// primary address, that server reports `role:master`, and every other live data node
    /// replicates it with its link up. Returns the new primary's (plain) address, as
    /// [`SentinelSet::primary_addr`].
    ///
    /// A forced failover that the sentinel aborts (it is not retried by sentinel itself) is
    /// requested again after 2 × failover-timeout, within the overall bound of
    /// down-after + 4 × failover-timeout + 30 s.
    pub fn failover(&self) -> Result<SocketAddr, HarnessError> {
        let old = self.primary_addr()?;
        if !self.data.iter().any(|n| n.is_live() && n.addr() != old) {
            return Err(HarnessError::InvalidArgument(
                "the primary has no live replica to promote".into(),
            ));
        }
        let deadline = Instant::now() + self.failover_bound();
        loop {
            self.request_failover(deadline)?;
            let attempt = Instant::now()
                + self
                    .options
                    .failover_timeout
                    .saturating_mul(2)
                    .saturating_add(Duration::from_secs(5));
            match self.wait_for_new_primary(old, attempt.min(deadline)) {
                Err(e) if e.is_timeout() && Instant::now() < deadline => {
                    // Only ask again if the sentinels still name the old primary.
                    if self.primary_addr()? != old {
                        return Err(e);
                    }
                }
                other => return other,
            }
        }
    }

    /// Sends `SENTINEL FAILOVER <name>` to the first live sentinel until it accepts (or
    /// says a failover is in progress).
    fn request_failover(&self, deadline: Instant) -> Result<(), HarnessError> {
        let name = self.options.master_name.clone();
        self.wait_for("SENTINEL FAILOVER to be accepted", deadline, |s| {
            let (i, sentinel) = s.live_sentinels().next().ok_or_else(|| {
                HarnessError::InvalidArgument("no sentinel is live (all killed or paused)".into())
            })?;
            match sentinel.command_timeout(&["SENTINEL", "FAILOVER", &name], QUERY_TIMEOUT)? {
                reply if reply.is_ok() => Ok(None),
                // A failover is already running: wait for it instead.
                RespValue::Error(e) if e.starts_with("INPROG") => Ok(None),
                RespValue::Error(e) if e.starts_with("NOGOODSLAVE") => {
                    Ok(Some(format!("sentinel {i}: {e}")))
                }
                reply => Err(HarnessError::Server(format!(
                    "SENTINEL FAILOVER {name} on sentinel {i}: {reply}"
                ))),
            }
        })
    }

    /// Kills the current primary with SIGKILL and waits until the sentinels have elected
    /// and promoted a replica (bounded by down-after + 4 × failover-timeout + 30 s), as in
    /// [`SentinelSet::failover`]. Returns the new primary's (plain) address.
    pub fn kill_primary_and_wait(&mut self) -> Result<SocketAddr, HarnessError> {
        let old = self.primary_addr()?;
        let index = self.data_index(old)?;
        if !self
            .data
            .iter()
            .enumerate()
            .any(|(i, n)| i != index && n.is_live())
        {
            return Err(HarnessError::InvalidArgument(
                "the primary has no live replica to promote".into(),
            ));
        }
        self.data[index].kill();
        let deadline = Instant::now() + self.failover_bound();
        self.wait_for_new_primary(old, deadline)
    }

    /// Waits until all live sentinels agree on a primary other than `old` that calls itself
    /// master, and every other live data node replicates it.
    fn wait_for_new_primary(
        &self,
        old: SocketAddr,
        deadline: Instant,
    ) -> Result<SocketAddr, HarnessError> {
        let mut new = None;
        self.wait_for("the sentinels to agree on a new primary", deadline, |s| {
            let mut agreed = None;
            for (i, sentinel) in s.live_sentinels() {
                let addr = s.addr_from(sentinel)?;
                if addr == old {
                    return Ok(Some(format!("sentinel {i} still reports {old}")));
                }
                match agreed {
                    None => agreed = Some(addr),
                    Some(a) if a == addr => {}
                    Some(a) => {
                        return Ok(Some(format!(
                            "sentinels disagree: {a} and {addr} (sentinel {i})"
                        )));
                    }
                }
            }
            let addr = agreed.ok_or_else(|| {
                HarnessError::InvalidArgument("no sentinel is live (all killed or paused)".into())
            })?;
            let node = &s.data[s.data_index(addr)?];
            let info = node.info_timeout("replication", QUERY_TIMEOUT)?;
            if info_role(&info) != Some("master") {
                return Ok(Some(format!("{addr} does not report role:master yet")));
            }
            new = Some(addr);
            Ok(None)
        })?;
        let new = new.ok_or_else(|| HarnessError::Protocol("no new primary".into()))?;
        self.wait_for(
            "the other data nodes to replicate the new primary",
            deadline,
            |s| s.replication_problem(new),
        )?;
        Ok(new)
    }

    /// Why the live data nodes other than `primary` are not (yet) its linked replicas.
    fn replication_problem(&self, primary: SocketAddr) -> Result<Option<String>, HarnessError> {
        // Replicas follow the port the sentinels know: the TLS one with TLS data nodes.
        let followed = announced_port(&self.data[self.data_index(primary)?]);
        let port = format!("master_port:{followed}");
        for (i, node) in self.data.iter().enumerate() {
            if !node.is_live() || node.port() == primary.port() {
                continue;
            }
            let info = node.info_timeout("replication", QUERY_TIMEOUT)?;
            let follows = info
                .lines()
                .any(|l| l.trim() == port || l.trim() == format!("primary_port:{followed}"));
            if info_role(&info) != Some("slave") || !follows || !master_link_up(&info) {
                return Ok(Some(format!(
                    "data node {i} (port {}) is not a linked replica of {primary} yet",
                    node.port()
                )));
            }
        }
        Ok(None)
    }

    /// How long the waits may take: down-after + 4 × failover-timeout + 30 s.
    pub(super) fn failover_bound(&self) -> Duration {
        self.options
            .down_after
            .saturating_add(self.options.failover_timeout.saturating_mul(4))
            .saturating_add(MARGIN)
    }
}
