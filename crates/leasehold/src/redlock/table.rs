//! The lock table of a Redlock set: [`Locker::list`](crate::Locker::list), a majority view of the nodes' tables.

use std::collections::BTreeMap;

use futures_util::future::join_all;

use crate::core::driver::LockTable;
use crate::core::error::{Error, Result};
use crate::core::listing::LockEntry;
use crate::core::report::{NodeOutcome, NodeReport, NodeReports};

use super::Redlock;

#[async_trait::async_trait]
impl LockTable for Redlock {
    /// The locks held on a majority of the nodes, with the same holder(s) there: each node is
    /// listed as [`Locker::list`](crate::Locker::list) does (within ten per-node
    /// timeouts, at least 10 s), and an entry is kept when at least [`Redlock::quorum`] nodes show the same
    /// key, kind and holder tokens. Its TTL is the shortest, its fencing counter the highest
    /// of those nodes (what a Redlock acquisition would see). A lock held on a minority only
    /// (a failed acquisition's leftovers, expiring) is not listed. Force-release is not
    /// offered on Redlock (`Unsupported`): forcing a minority would leave a lock half-held.
    ///
    /// # Errors
    /// [`Error::NoQuorum`] when fewer than a majority of the nodes answered (each node's
    /// outcome in it); [`Error::PermissionDenied`] when a majority refused the listing.
    async fn list(&self, pattern: &str) -> Result<Vec<LockEntry>> {
        let timeout = self.inner.options.node_timeout;
        let listed = join_all(self.inner.nodes.iter().map(|n| async move {
            // A listing is many commands: ten per-node timeouts, at least 10 s.
            let bound = (timeout * 10).max(std::time::Duration::from_secs(10));
            let result = tokio::time::timeout(bound, async {
                n.client(timeout).await?.list(pattern).await
            })
            .await;
            (n.label.clone(), result)
        }))
        .await;
        let quorum = self.quorum();
        let mut reports = Vec::new();
        let mut answers = Vec::new();
        let mut refusals = Vec::new();
        for (node, result) in listed {
            let outcome = match result {
                Ok(Ok(entries)) => {
                    answers.push(entries);
                    NodeOutcome::Granted
                }
                Ok(Err(e @ Error::PermissionDenied { .. })) => {
                    let text = e.to_string();
                    refusals.push(e);
                    NodeOutcome::Failed(text)
                }
                Ok(Err(e)) => NodeOutcome::Failed(e.to_string()),
                Err(_) => NodeOutcome::TimedOut,
            };
            reports.push(NodeReport { node, outcome });
        }
        if answers.len() < quorum {
            if refusals.len() >= quorum {
                return Err(refusals.remove(0));
            }
            return Err(Error::NoQuorum {
                key: pattern.to_string(),
                needed: quorum,
                nodes: NodeReports(reports),
            });
        }
        // Entries by (key, kind, holder tokens): how many nodes show each.
        let mut seen: BTreeMap<(String, &'static str, Vec<String>), Vec<LockEntry>> =
            BTreeMap::new();
        for entry in answers.into_iter().flatten() {
            let mut tokens: Vec<String> = entry
                .holders
                .iter()
                .map(|h| h.token.expose().to_string())
                .collect();
            tokens.sort();
            seen.entry((entry.key.clone(), entry.kind.name(), tokens))
                .or_default()
                .push(entry);
        }
        Ok(seen
            .into_values()
            .filter(|same| same.len() >= quorum)
            .filter_map(|same| {
                let fencing = same.iter().filter_map(|e| e.fencing_counter).max();
                let mut entry = same.into_iter().min_by_key(|e| e.ttl)?;
                entry.fencing_counter = fencing;
                Some(entry)
            })
            .collect())
    }
}
