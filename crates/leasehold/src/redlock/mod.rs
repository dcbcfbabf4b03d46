//! Redlock over N independent masters, with fencing tokens that stay strictly increasing although
//! every acquisition is granted by a different majority.
//!
//! # The lock
//! An attempt sends `SET key token NX PX ttl` to every node **concurrently**, each bounded by a
//! per-node timeout far below the TTL, after noting a monotonic instant `t0`, and stops waiting
//! as soon as the outcome is decided (a majority granted, or can no longer): a frozen minority
//! costs nothing; the requests to it go on in the background and are released later. It holds the lock
//! if and only if at least `N/2 + 1` nodes granted it and the validity
//! `ttl - (now - t0) - drift` is positive (`drift = ttl * drift_factor + drift_floor`, by default
//! `ttl / 100 + 2 ms`). The guard's validity deadline is `t0 + ttl - drift`: every granting node's
//! key was set after `t0`, so it outlives that deadline as long as no node's clock runs more than
//! `drift_factor` fast. Any failed attempt releases the token on **all** nodes (also those that
//! timed out: their `SET` may still land, and the token-checked release, sent on the same
//! connection, lands after it). Extending counts only if a majority confirms within the
//! validity; releasing deletes on all nodes.
//!
//! **Safety claim** (the Redlock paper's): two holders' majorities intersect in at least one
//! node, and that node grants a key to one holder at a time, so their validity intervals cannot
//! overlap. **Assumptions**: bounded clock drift between the nodes and the client (no clock
//! jumps), a node that restarts comes back with its keys (AOF with `appendfsync always`) or stays
//! away for longer than the maximum TTL, and a holder that is not paused past its validity.
//! Redlock does **not** protect against process pauses (GC, SIGSTOP, a stalled VM): a paused
//! holder wakes up after its validity, believing it holds the lock (Kleppmann, "How to do
//! distributed locking"). That is what the fencing tokens below are for.
//!
//! # Fencing tokens over many nodes
//! Each node keeps a counter (`fence_key(key)`); no single counter sees every acquisition, since
//! different majorities grant different acquisitions. The design:
//! 1. **Phase 1**, on each node, one script: `SET key token NX PX ttl` and, only if it was set,
//!    read that node's counter. (Without fencing, `min_hold` or a waiter's need of the
//!    holder's remaining TTL, phase 1 is the plain `SET NX PX` alone, a command instead of a
//!    script, and there is no phase 2.)
//! 2. The token is `max(counters of the granting nodes) + 1`.
//! 3. **Phase 2**, one script sent to every node: *if the key still holds our token*, raise
//!    the counter to the token ("set if greater"). It acts on the granting nodes (and on a node
//!    whose grant arrived late), and nowhere else.
//! 4. The lock counts as acquired only if phase 2 was confirmed by a majority within the validity.
//!
//! **Claim**: if holder H1 (token t1) holds the lock before holder H2 (t2), then t2 > t1.
//! **Argument**: H1's phase-2 majority W and H2's phase-1 majority R intersect in a node n. On n,
//! H1's raise ran while n's key held H1's token (step 3 checks it atomically), and H2's read ran
//! atomically with the `SET NX` that gave H2 the key; n holds one token at a time, so one of the
//! two key intervals on n ended before the other began. If H1's ended first, H2 read n's counter
//! after H1 raised it: t2 >= t1 + 1. If H2's ended first, H2's key on n (and so, by the clock
//! assumption, H2's validity) ended before H1 was granted n, hence before H1 acquired: then H2
//! held the lock before H1, a contradiction.
//!
//! **A flaw in the unconditioned design, fixed here**: if phase 2 raised counters without
//! checking the key, a raise could be applied on a node where H1's key had meanwhile vanished
//! (restarted without persistence, deleted by hand) and where H2 already read the counter:
//! H1 would count that node towards its majority although it contributed nothing to H2's read.
//! Conditioning the raise on H1's token makes "counted in W" imply "applied while H1 held n".
//!
//! **Assumption specific to fencing**: counters survive restarts (AOF with `appendfsync
//! always`, or a restarted node kept out for longer than the maximum TTL); a counter that comes
//! back lower can let a later holder read a smaller maximum. The resource side is unchanged:
//! [`FencedStore`](crate::redis::FencedStore) rejects lower numbers, and equal numbers from another
//! token.

// By part: `options` and `report` (the public settings and per-node outcomes), `nodes` (the
// node connections and URLs), `fan_out` (one operation on every node, decided by a majority),
// `acquire` (the two phases of an acquisition, and waiting), `held` (release, extend and the
// renewal of a held lock), `inspect` (reading the nodes, raising their counters).
mod acquire;
mod driver;
mod fan_out;
mod held;
mod inspect;
mod nodes;
mod options;
mod table;
#[cfg(test)]
mod tests;

use std::sync::Arc;
use std::time::Duration;

use futures_util::future::join_all;

use crate::core::error::{Error, Result};
use crate::core::report::{NodeOutcome, NodeReport, NodeReports};

use nodes::{Node, node_label};

pub use nodes::node_urls;
pub use options::RedlockOptions;

/// A lock over N independent Redis/Valkey masters (see the module docs for what it guarantees).
///
/// ```no_run
/// # async fn f() -> Result<(), leasehold::Error> {
/// use std::time::Duration;
/// use leasehold::redlock::{Redlock, RedlockOptions};
/// use leasehold::{LockOptions, Locker};
/// let nodes = ["redis://10.0.0.1:6379/", "redis://10.0.0.2:6379/", "redis://10.0.0.3:6379/"];
/// // Or `Locker::connect("redlock://10.0.0.1:6379,10.0.0.2:6379,10.0.0.3:6379")`.
/// let redlock = Redlock::connect(&nodes, RedlockOptions::new()).await?;
/// let locks = Locker::from(redlock);
/// let opts = LockOptions::new(Duration::from_secs(10)).fencing(true).wait(Duration::from_secs(5));
/// let guard = locks.acquire("lock:ledger", &opts).await?;
/// let fence = guard.fence().expect("fencing on"); // strictly increasing across all holders
/// guard.release().await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Redlock {
    inner: Arc<RedlockInner>,
}

struct RedlockInner {
    nodes: Vec<Node>,
    options: RedlockOptions,
}

impl std::fmt::Debug for Redlock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Redlock")
            .field("nodes", &self.nodes())
            .field("options", &self.inner.options)
            .finish()
    }
}

impl Redlock {
    /// A Redlock over the servers at `urls` (independent masters, not replicas of each other).
    /// Nodes are connected concurrently; a node that cannot be reached now is retried at every
    /// operation, but at least a majority must answer now.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for no URL or a malformed one; [`Error::NoQuorum`] if fewer
    /// than a majority of nodes can be reached.
    pub async fn connect(urls: &[&str], options: RedlockOptions) -> Result<Self> {
        if urls.is_empty() {
            return Err(Error::invalid("nodes", "Redlock needs at least one node"));
        }
        let mut nodes = Vec::with_capacity(urls.len());
        for url in urls {
            redis::Client::open(*url).map_err(|e| Error::invalid("url", e.to_string()))?;
            nodes.push(Node {
                label: node_label(url),
                url: url.to_string(),
                client: tokio::sync::OnceCell::new(),
            });
        }
        let redlock = Redlock {
            inner: Arc::new(RedlockInner { nodes, options }),
        };
        // Connect with a connect-sized bound (not the per-node operation timeout).
        let bound = Duration::from_secs(5);
        let reports: Vec<NodeReport> = join_all(redlock.inner.nodes.iter().map(|n| async move {
            let outcome = match tokio::time::timeout(bound, n.client(bound)).await {
                Ok(Ok(_)) => NodeOutcome::Granted,
                Ok(Err(e @ Error::Authentication { .. })) => return Err(e),
                Ok(Err(e)) => NodeOutcome::Failed(e.to_string()),
                Err(_) => NodeOutcome::TimedOut,
            };
            Ok(NodeReport {
                node: n.label.clone(),
                outcome,
            })
        }))
        .await
        .into_iter()
        .collect::<Result<_>>()?;
        let up = reports
            .iter()
            .filter(|r| r.outcome == NodeOutcome::Granted)
            .count();
        if up < redlock.quorum() {
            return Err(Error::NoQuorum {
                key: String::new(),
                needed: redlock.quorum(),
                nodes: NodeReports(reports),
            });
        }
        Ok(redlock)
    }

    /// The nodes, as `host:port`.
    pub fn nodes(&self) -> Vec<String> {
        self.inner.nodes.iter().map(|n| n.label.clone()).collect()
    }

    /// How many nodes must agree: `N/2 + 1`.
    pub fn quorum(&self) -> usize {
        self.inner.nodes.len() / 2 + 1
    }
}
