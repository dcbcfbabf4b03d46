//! One operation on every node concurrently, decided as soon as a majority can tell.

use std::time::Duration;

use crate::core::error::{Error, Result};
use crate::redis::client::RedisClient;

use super::Redlock;
use crate::core::report::{NodeOutcome, NodeReport, NodeReports};

/// A node's answer: yes (with a value), or no (with the holder's remaining TTL, when known).
pub(super) enum Reply<T> {
    Yes(T),
    No(Option<Duration>),
}

/// One task per node (None where nothing runs).
pub(crate) type Tasks = Vec<Option<tokio::task::JoinHandle<()>>>;

/// How long [`Redlock::fan_out`] waits.
#[derive(Clone, Copy)]
pub(super) enum Wait {
    /// Until a majority said yes, or can no longer.
    Quorum,
    /// Until every node answered or timed out.
    All,
}

impl Redlock {
    /// Runs `op` on every node concurrently, each in a task of its own bounded by the per-node
    /// timeout, and returns as soon as the outcome is decided: with [`Wait::Quorum`], once a
    /// majority said yes or a majority can no longer say yes; with [`Wait::All`], once every
    /// node answered or timed out. Operations not awaited go on in the background, so a release
    /// still reaches a slow node, after (on the same connection) anything sent to it before.
    ///
    /// On each node `op` starts only after that node's task in `prior` (if any: empty for
    /// none) has finished. A node's earlier request then has either been handed to its
    /// connection (and this one queues behind it) or been dropped unsent at its timeout: a
    /// release can never overtake the acquisition it undoes.
    pub(super) async fn fan_out<T, F, Fut>(
        &self,
        mut prior: Tasks,
        wait: Wait,
        op: F,
    ) -> (Vec<(NodeReport, Option<T>)>, Tasks)
    where
        T: Send + 'static,
        F: Fn(RedisClient) -> Fut + Clone + Send + 'static,
        Fut: std::future::Future<Output = Result<Reply<T>>> + Send + 'static,
    {
        let timeout = self.inner.options.node_timeout;
        let n = self.inner.nodes.len();
        prior.resize_with(n, || None);
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let mut tasks: Tasks = Vec::with_capacity(n);
        for (i, before) in prior.into_iter().enumerate() {
            let (inner, tx, op) = (self.inner.clone(), tx.clone(), op.clone());
            tasks.push(Some(tokio::spawn(async move {
                if let Some(before) = before {
                    let _ = before.await;
                }
                let answer = tokio::time::timeout(timeout, async move {
                    let client = inner.nodes[i].client(timeout).await?.clone();
                    op(client).await
                })
                .await;
                let _ = tx.send((i, answer));
            })));
        }
        drop(tx);
        let needed = match wait {
            Wait::Quorum => self.quorum(),
            Wait::All => n,
        };
        let mut results: Vec<(NodeOutcome, Option<T>)> =
            (0..n).map(|_| (NodeOutcome::Pending, None)).collect();
        let (mut yes, mut done) = (0, 0);
        while let Some((i, answer)) = rx.recv().await {
            done += 1;
            results[i] = match answer {
                Ok(Ok(Reply::Yes(v))) => {
                    yes += 1;
                    (NodeOutcome::Granted, Some(v))
                }
                Ok(Ok(Reply::No(remaining))) => (NodeOutcome::Busy { remaining }, None),
                Ok(Err(e)) => (NodeOutcome::Failed(e.to_string()), None),
                Err(_) => (NodeOutcome::TimedOut, None),
            };
            let decided = match wait {
                Wait::Quorum => yes >= needed || yes + (n - done) < needed,
                Wait::All => done == n,
            };
            if decided {
                break;
            }
        }
        let reports = results
            .into_iter()
            .zip(&self.inner.nodes)
            .map(|((outcome, value), node)| {
                (
                    NodeReport {
                        node: node.label.clone(),
                        outcome,
                    },
                    value,
                )
            })
            .collect();
        (reports, tasks)
    }

    /// Majority confirmed: Ok; a majority answered but did not confirm: NotHeld; else NoQuorum.
    pub(super) fn confirmed<T>(
        &self,
        key: &str,
        reports: Vec<(NodeReport, Option<T>)>,
    ) -> Result<Vec<T>> {
        let answered = reports
            .iter()
            .filter(|(r, _)| matches!(r.outcome, NodeOutcome::Granted | NodeOutcome::Busy { .. }))
            .count();
        let granted = reports.iter().filter(|(_, v)| v.is_some()).count();
        if granted >= self.quorum() {
            return Ok(reports.into_iter().filter_map(|(_, v)| v).collect());
        }
        if answered >= self.quorum() {
            return Err(Error::NotHeld {
                key: key.to_string(),
            });
        }
        Err(Error::NoQuorum {
            key: key.to_string(),
            needed: self.quorum(),
            nodes: NodeReports(reports.into_iter().map(|(r, _)| r).collect()),
        })
    }
}
