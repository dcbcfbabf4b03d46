//! Redlock as a [`Driver`]: what a [`Locker`](crate::Locker) over `redlock://` calls.

use std::time::Duration;

use futures_util::future::join_all;

use crate::core::driver::{Driver, Kind, Primitives};
use crate::core::error::{Error, Result};
use crate::core::guard::LockGuard;
use crate::core::kind::{Backend, Taking};
use crate::core::options::LockOptions;
use crate::core::outcome::{LockState, TryAcquire};
use crate::core::report::{NodeOutcome, NodeReport, NodeReports};
use crate::core::token::LockToken;
use crate::redis::slot::validate_name;

use super::Redlock;

impl Kind for Redlock {
    fn kind(&self) -> Backend {
        Backend::Redlock
    }
}

/// No primitive beyond the plain lock on Redlock ([`Backend::has`]).
impl Primitives for Redlock {}

#[async_trait::async_trait]
impl Driver for Redlock {
    /// One attempt on all nodes. Busy (a majority answered but did not all grant) is an outcome,
    /// as for a single node; too few answers is [`Error::NoQuorum`].
    ///
    /// # Errors
    /// [`Error::InvalidArgument`], [`Error::NoQuorum`] listing every node's outcome.
    async fn try_acquire(&self, key: &str, options: &LockOptions) -> Result<TryAcquire> {
        validate_name(key)?;
        options.check_for(Backend::Redlock, Taking::Lock)?;
        self.attempt(key, options, crate::core::acquire::Ask::ONCE)
            .await
    }

    /// Takes the lock, retrying with jittered backoff until `options.wait_bound()` elapses.
    ///
    /// # Errors
    /// [`Error::NotAcquired`] if the lock stayed busy; [`Error::NoQuorum`] if, at the end, too
    /// few nodes answered; [`Error::InvalidArgument`].
    async fn acquire(&self, key: &str, options: &LockOptions) -> Result<LockGuard> {
        self.acquire_waiting(key, options).await
    }

    /// Deletes `key` on every node where it holds `token`.
    ///
    /// # Errors
    /// [`Error::NotHeld`] if fewer than a majority still held it (the lock was not ours any
    /// more); [`Error::NoQuorum`] if fewer than a majority answered at all.
    async fn release(&self, key: &str, token: &LockToken) -> Result<()> {
        self.release_after(Vec::new(), key, token, false).await
    }

    /// Raises `key`'s fencing counter on every node to at least `at_least` (see
    /// [`Locker::raise_fencing_counter`](crate::Locker::raise_fencing_counter)) and returns the highest counter afterwards.
    ///
    /// Succeeds once a majority has raised its counter: every later acquisition's majority
    /// shares a node with it, so every later number exceeds `at_least`. Safe for the same
    /// reason as on one node: counters only move up. Otherwise `NoQuorum`, with each node's
    /// outcome.
    ///
    /// [`Locker::raise_fencing_counter`]: crate::Locker::raise_fencing_counter
    async fn raise_fencing_counter(&self, key: &str, at_least: u64) -> Result<u64> {
        crate::redis::slot::validate_name(key)?;
        let timeout = self.inner.options.node_timeout;
        let results = join_all(self.inner.nodes.iter().map(|n| async move {
            let outcome = tokio::time::timeout(timeout, async {
                n.client(timeout)
                    .await?
                    .raise_fencing_counter(key, at_least)
                    .await
            })
            .await;
            (n.label.clone(), outcome)
        }))
        .await;
        let mut highest = None;
        let mut reports = Vec::new();
        for (node, outcome) in results {
            let outcome = match outcome {
                Ok(Ok(value)) => {
                    highest = highest.max(Some(value));
                    NodeOutcome::Granted
                }
                Ok(Err(e)) => NodeOutcome::Failed(e.to_string()),
                Err(_) => NodeOutcome::TimedOut,
            };
            reports.push(NodeReport { node, outcome });
        }
        let raised = reports
            .iter()
            .filter(|r| r.outcome == NodeOutcome::Granted)
            .count();
        match highest {
            Some(value) if raised >= self.quorum() => Ok(value),
            _ => Err(Error::NoQuorum {
                key: key.to_string(),
                needed: self.quorum(),
                nodes: NodeReports(reports),
            }),
        }
    }

    async fn extend(&self, key: &str, token: &LockToken, ttl: Duration) -> Result<()> {
        self.extend_nodes(key, token, ttl).await.map(drop)
    }

    /// The lock as a majority sees it.
    async fn inspect(&self, key: &str) -> Result<LockState> {
        self.inspect_majority(key).await
    }
}
