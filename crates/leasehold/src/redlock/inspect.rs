//! Reading what the nodes hold for a key, and raising their fencing counters.

use futures_util::future::join_all;

use crate::core::driver::Driver;
use crate::core::error::{Error, Result};
use crate::redis::slot::validate_name;

use super::Redlock;
use crate::core::report::{NodeOutcome, NodeReport, NodeReports};

impl Redlock {
    /// What each node holds for `key` (a node that did not answer in time: its error); the
    /// lock as a majority sees it is [`Locker::inspect`](crate::Locker::inspect).
    pub async fn inspect_nodes(&self, key: &str) -> Vec<(String, Result<crate::LockState>)> {
        let timeout = self.inner.options.node_timeout;
        join_all(self.inner.nodes.iter().map(|n| async move {
            let state = match tokio::time::timeout(timeout, async {
                n.client(timeout).await?.inspect(key).await
            })
            .await
            {
                Ok(r) => r,
                Err(_) => Err(Error::NoQuorum {
                    key: key.to_string(),
                    needed: 1,
                    nodes: NodeReports(vec![NodeReport {
                        node: n.label.clone(),
                        outcome: NodeOutcome::TimedOut,
                    }]),
                }),
            };
            (n.label.clone(), state)
        }))
        .await
    }

    /// The lock as a majority sees it: the holder whose token a majority of nodes hold (with
    /// the shortest TTL among them), else none; the highest fencing counter of any node.
    ///
    /// # Errors
    /// [`Error::NoQuorum`] if fewer than a majority answered.
    pub(crate) async fn inspect_majority(&self, key: &str) -> Result<crate::LockState> {
        validate_name(key)?;
        let states = self.inspect_nodes(key).await;
        let quorum = self.quorum();
        let mut reports = Vec::new();
        let mut answered = Vec::new();
        for (node, state) in states {
            match state {
                Ok(state) => {
                    reports.push(NodeReport {
                        node,
                        outcome: NodeOutcome::Granted,
                    });
                    answered.push(state);
                }
                Err(e) => reports.push(NodeReport {
                    node,
                    outcome: NodeOutcome::Failed(e.to_string()),
                }),
            }
        }
        if answered.len() < quorum {
            return Err(Error::NoQuorum {
                key: key.to_string(),
                needed: quorum,
                nodes: NodeReports(reports),
            });
        }
        let holder = answered.iter().find_map(|s| {
            let h = s.holder.as_ref()?;
            let on = answered
                .iter()
                .filter(|o| o.holder.as_ref() == Some(h))
                .count();
            (on >= quorum).then(|| h.clone())
        });
        let ttl = holder.as_ref().and_then(|h| {
            answered
                .iter()
                .filter(|s| s.holder.as_ref() == Some(h))
                .filter_map(|s| s.ttl)
                .min()
        });
        Ok(crate::LockState::new(
            key.to_string(),
            holder,
            ttl,
            answered.iter().filter_map(|s| s.fencing_counter).max(),
        ))
    }
}
