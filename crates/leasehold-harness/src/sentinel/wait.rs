//! Waiting on a [`SentinelSet`], and what it looks like when a wait times out.

use std::thread;
use std::time::Instant;

use super::{LOG_TAIL_LINES, POLL_INTERVAL, QUERY_TIMEOUT, SentinelSet};
use crate::HarnessError;

impl SentinelSet {
    /// Polls `check` every 25 ms until it returns `Ok(None)`; errors are retried (a process
    /// may be busy), [`HarnessError::InvalidArgument`] ends the wait at once.
    pub(super) fn wait_for(
        &self,
        what: &str,
        deadline: Instant,
        mut check: impl FnMut(&SentinelSet) -> Result<Option<String>, HarnessError>,
    ) -> Result<(), HarnessError> {
        loop {
            let why = match check(self) {
                Ok(None) => return Ok(()),
                Ok(Some(why)) => why,
                Err(e @ HarnessError::InvalidArgument(_)) => return Err(e),
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

    /// What every live sentinel says about the master and the replicas, and the data nodes'
    /// roles, for error messages.
    pub fn describe(&self) -> String {
        let mut out = String::new();
        let name = &self.options.master_name;
        for (i, s) in self.sentinels.iter().enumerate() {
            out.push_str(&format!("--- sentinel {i} (port {}) ---\n", s.port()));
            out.push_str(&s.log_tail(LOG_TAIL_LINES));
            if !s.is_live() {
                out.push_str("(not live)\n");
                continue;
            }
            for what in ["GET-MASTER-ADDR-BY-NAME", "MASTER", "REPLICAS"] {
                match s.command_timeout(&["SENTINEL", what, name], QUERY_TIMEOUT) {
                    Ok(reply) => out.push_str(&format!("SENTINEL {what}: {reply}\n")),
                    Err(e) => out.push_str(&format!("SENTINEL {what}: ({e})\n")),
                }
            }
        }
        for (i, n) in self.data.iter().enumerate() {
            let role = if n.is_live() {
                n.info_timeout("replication", QUERY_TIMEOUT)
                    .map(|info| {
                        info.lines()
                            .filter(|l| l.starts_with("role:") || l.contains("_link_status:"))
                            .collect::<Vec<_>>()
                            .join(" ")
                    })
                    .unwrap_or_else(|e| format!("({e})"))
            } else {
                "(not live)".to_owned()
            };
            let tls = n
                .tls_port()
                .map(|p| format!(", TLS port {p}"))
                .unwrap_or_default();
            out.push_str(&format!(
                "--- data node {i} (port {}{tls}): {role}\n",
                n.port()
            ));
        }
        out
    }
}
