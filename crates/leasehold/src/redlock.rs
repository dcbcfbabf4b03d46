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
//!    read that node's counter.
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
//! [`FencedStore`](crate::FencedStore) rejects lower numbers, and equal numbers from another
//! token.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::future::{BoxFuture, join_all};

use crate::backend::{HeldLock, LockBackend};
use crate::client::{LockClient, TryAcquire};
use crate::error::{Error, Result};
use crate::guard::{Lease, LockGuard, LossReason};
use crate::options::{ClientOptions, LockOptions, ttl_millis};
use crate::scripts::{
    RAISE_FENCE_SCRIPT as RAISE_FENCE, REDLOCK_ACQUIRE_SCRIPT as REDLOCK_ACQUIRE,
};
use crate::slot::fence_key;
use crate::token::{LockToken, validate_key};

#[doc(hidden)]
pub use crate::scripts::{RAISE_FENCE_LUA, REDLOCK_ACQUIRE_LUA};

/// Settings of a [`Redlock`].
#[derive(Debug, Clone, PartialEq)]
pub struct RedlockOptions {
    node_timeout: Duration,
    drift_factor: f64,
    drift_floor: Duration,
}

impl Default for RedlockOptions {
    /// A 50 ms per-node timeout, drift `ttl * 0.01 + 2 ms`.
    fn default() -> Self {
        RedlockOptions {
            node_timeout: Duration::from_millis(50),
            drift_factor: 0.01,
            drift_floor: Duration::from_millis(2),
        }
    }
}

impl RedlockOptions {
    /// The defaults.
    pub fn new() -> Self {
        Self::default()
    }

    /// Bound on each node's answer (and on connecting to a node). Keep it far below the TTL: a
    /// slow node then costs the attempt this much validity at most.
    pub fn node_timeout(mut self, timeout: Duration) -> Self {
        self.node_timeout = timeout;
        self
    }

    /// Clock drift allowance: `ttl * factor + floor`.
    pub fn drift(mut self, factor: f64, floor: Duration) -> Self {
        self.drift_factor = factor.clamp(0.0, 0.5);
        self.drift_floor = floor;
        self
    }

    /// The per-node timeout.
    pub fn node_timeout_bound(&self) -> Duration {
        self.node_timeout
    }

    /// The drift allowed for a lock of `ttl`.
    pub fn drift_for(&self, ttl: Duration) -> Duration {
        ttl.mul_f64(self.drift_factor) + self.drift_floor
    }
}

/// What one node answered.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum NodeOutcome {
    /// It granted (or, for extend and release, confirmed) the operation.
    Granted,
    /// The key held another token (or, for extend and release, not ours any more).
    Busy {
        /// The holder's remaining TTL, when known.
        remaining: Option<Duration>,
    },
    /// No answer within the per-node timeout.
    TimedOut,
    /// Not awaited: the outcome was decided before this node answered (its operation goes on
    /// in the background).
    Pending,
    /// An error: unreachable, refused, a server error.
    Failed(String),
}

impl std::fmt::Display for NodeOutcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NodeOutcome::Granted => f.write_str("granted"),
            NodeOutcome::Busy { remaining: Some(r) } => {
                write!(f, "busy (holder's lease ends in {} ms)", r.as_millis())
            }
            NodeOutcome::Busy { remaining: None } => f.write_str("busy"),
            NodeOutcome::TimedOut => f.write_str("timed out"),
            NodeOutcome::Pending => f.write_str("no answer yet"),
            NodeOutcome::Failed(e) => write!(f, "failed: {e}"),
        }
    }
}

/// One node's outcome, named.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeReport {
    /// The node (`host:port`, credentials left out).
    pub node: String,
    /// What it answered.
    pub outcome: NodeOutcome,
}

/// The per-node outcomes of one Redlock operation, for error messages.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeReports(pub Vec<NodeReport>);

impl std::fmt::Display for NodeReports {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (i, r) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str("; ")?;
            }
            write!(f, "{}: {}", r.node, r.outcome)?;
        }
        Ok(())
    }
}

struct Node {
    label: String,
    url: String,
    client: tokio::sync::OnceCell<LockClient>,
}

impl Node {
    /// The node's client, connecting on first use (a node that is down when the Redlock is
    /// created is retried at every operation).
    async fn client(&self, timeout: Duration) -> Result<&LockClient> {
        self.client
            .get_or_try_init(|| {
                // Each node has its own reconnecting connection. Release notifications are off:
                // Redlock waiters retry by backoff, and a release stays one command per node.
                let options = ClientOptions::new()
                    .connect_timeout(timeout.max(Duration::from_millis(1)))
                    .notify_waiters(false);
                LockClient::connect_with(&self.url, options)
            })
            .await
    }
}

/// A lock over N independent Redis/Valkey masters (see the module docs for what it guarantees).
///
/// ```no_run
/// # async fn f() -> Result<(), leasehold::Error> {
/// use std::time::Duration;
/// use leasehold::{LockOptions, Redlock, RedlockOptions};
/// let nodes = ["redis://10.0.0.1:6379/", "redis://10.0.0.2:6379/", "redis://10.0.0.3:6379/"];
/// let redlock = Redlock::connect(&nodes, RedlockOptions::new()).await?;
/// let opts = LockOptions::new(Duration::from_secs(10)).fencing(true).wait(Duration::from_secs(5));
/// let guard = redlock.acquire("lock:ledger", &opts).await?;
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

/// `host:port` of a URL, without scheme or credentials.
fn node_label(url: &str) -> String {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let rest = rest.rsplit_once('@').map_or(rest, |(_, r)| r);
    rest.split(['/', '?']).next().unwrap_or(rest).to_string()
}

/// A node's answer: yes (with a value), or no (with the holder's remaining TTL, when known).
enum Reply<T> {
    Yes(T),
    No(Option<Duration>),
}

/// One task per node (None where nothing runs).
pub(crate) type Tasks = Vec<Option<tokio::task::JoinHandle<()>>>;

/// How long [`Redlock::fan_out`] waits.
#[derive(Clone, Copy)]
enum Wait {
    /// Until a majority said yes, or can no longer.
    Quorum,
    /// Until every node answered or timed out.
    All,
}

/// The node URLs a `redlock://[user:password@]host:port,host:port,…[/db]` URL names (one
/// `redis://` URL per node, `rediss://` for `rediss-redlock://`; the credentials and database
/// apply to every node; the port defaults to 6379).
///
/// # Errors
/// [`Error::InvalidArgument`] for another scheme, no host, or a bad port.
pub fn node_urls(url: &str) -> Result<Vec<String>> {
    let tls = match url.split_once("://") {
        Some((s, _)) if s.eq_ignore_ascii_case("redlock") => false,
        Some((s, _)) if s.eq_ignore_ascii_case("rediss-redlock") => true,
        _ => {
            return Err(Error::invalid(
                "url",
                format!("{url:?} is not a redlock:// or rediss-redlock:// URL"),
            ));
        }
    };
    let rest = url.split_once("://").map_or("", |(_, r)| r);
    let (auth, hosts, db, _) = crate::endpoint::split_multi_host(rest);
    let hosts = crate::endpoint::parse_hosts(hosts, 6379)
        .map_err(|e| Error::invalid("url", format!("redlock URL: {e}")))?;
    let scheme = if tls { "rediss" } else { "redis" };
    let auth = auth.map(|a| format!("{a}@")).unwrap_or_default();
    let db = db.filter(|d| !d.is_empty()).unwrap_or("0");
    Ok(hosts
        .into_iter()
        .map(|h| format!("{scheme}://{auth}{h}/{db}"))
        .collect())
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

    /// One attempt on all nodes. Busy (a majority answered but did not all grant) is an outcome,
    /// as for a single node; too few answers is [`Error::NoQuorum`].
    ///
    /// # Errors
    /// [`Error::InvalidArgument`], [`Error::NoQuorum`] listing every node's outcome.
    pub async fn try_acquire(&self, key: &str, options: &LockOptions) -> Result<TryAcquire> {
        let begun = crate::metrics::start();
        let result = async {
            validate_key(key)?;
            ttl_millis(options.ttl())?;
            refuse_fair(options)?;
            self.attempt(key, options).await
        }
        .await;
        let outcome = crate::metrics::Outcome::of_try(&result);
        crate::metrics::acquisition("redlock", false, outcome, begun);
        result
    }

    /// Takes the lock, retrying with jittered backoff until `options.wait_bound()` elapses.
    ///
    /// # Errors
    /// [`Error::NotAcquired`] if the lock stayed busy; [`Error::NoQuorum`] if, at the end, too
    /// few nodes answered; [`Error::InvalidArgument`].
    pub async fn acquire(&self, key: &str, options: &LockOptions) -> Result<LockGuard> {
        let begun = crate::metrics::start();
        let result = self.acquire_waiting(key, options).await;
        let outcome = crate::metrics::Outcome::of_acquire(&result);
        crate::metrics::acquisition("redlock", false, outcome, begun);
        result
    }

    async fn acquire_waiting(&self, key: &str, options: &LockOptions) -> Result<LockGuard> {
        validate_key(key)?;
        ttl_millis(options.ttl())?;
        refuse_fair(options)?;
        let begun = Instant::now();
        let deadline = options.wait_bound().map(|w| begun + w);
        let mut attempts = 0u32;
        loop {
            attempts += 1;
            let outcome = self.attempt(key, options).await;
            let remaining = match outcome {
                Ok(TryAcquire::Acquired(guard)) => return Ok(guard),
                Ok(TryAcquire::Busy { remaining }) => Ok(remaining),
                Err(e @ Error::NoQuorum { .. }) => Err(e),
                Err(e) => return Err(e),
            };
            let now = Instant::now();
            let not_acquired = |remaining: Result<Option<Duration>>| match remaining {
                Ok(_) => Error::NotAcquired {
                    key: key.to_string(),
                    waited: now - begun,
                    attempts,
                },
                Err(e) => e,
            };
            let Some(deadline) = deadline.filter(|d| now < *d) else {
                return Err(not_acquired(remaining));
            };
            let mut delay = options.backoff_policy().delay(attempts - 1);
            if let Ok(Some(r)) = remaining {
                delay = delay.min(r + Duration::from_millis(1));
            }
            tokio::time::sleep(delay.min(deadline - now)).await;
            if Instant::now() >= deadline {
                return Err(not_acquired(remaining));
            }
        }
    }

    /// As [`LockClient::with_lock`], over the Redlock set.
    ///
    /// # Errors
    /// As [`Redlock::acquire`], and [`Error::LockLost`] / [`Error::NotHeld`] as
    /// [`LockClient::with_lock`].
    pub async fn with_lock<T, F, Fut>(&self, key: &str, options: &LockOptions, work: F) -> Result<T>
    where
        F: FnOnce(Lease) -> Fut,
        Fut: std::future::Future<Output = T>,
    {
        let guard = self.acquire(key, options).await?;
        crate::guard::run_with_lock(guard, options, work).await
    }

    /// A fair release: Redlock has no fair mode ([`Error::Unsupported`]).
    ///
    /// # Errors
    /// Always [`Error::Unsupported`].
    pub async fn release_fair(&self, _key: &str, _token: &LockToken) -> Result<()> {
        Err(fair_unsupported())
    }

    /// Deletes `key` on every node where it holds `token`.
    ///
    /// # Errors
    /// [`Error::NotHeld`] if fewer than a majority still held it (the lock was not ours any
    /// more); [`Error::NoQuorum`] if fewer than a majority answered at all.
    pub async fn release(&self, key: &str, token: &LockToken) -> Result<()> {
        self.release_after(Vec::new(), key, token).await
    }

    /// Release, each node's only after its task in `prior` (the acquisition) finished.
    pub(crate) async fn release_after(
        &self,
        prior: Tasks,
        key: &str,
        token: &LockToken,
    ) -> Result<()> {
        validate_key(key)?;
        let (key_owned, token) = (key.to_string(), token.clone());
        let (reports, _) = self
            .fan_out_after(prior, Wait::Quorum, move |client| {
                let (key, token) = (key_owned.clone(), token.clone());
                async move {
                    let deleted = client.release_raw(&key, token.expose()).await?;
                    Ok(if deleted {
                        Reply::Yes(())
                    } else {
                        Reply::No(None)
                    })
                }
            })
            .await;
        self.confirmed(key, reports).map(|_| ())
    }

    /// Resets the TTL on every node where `key` holds `token`; counts only if a majority
    /// confirms within the validity. Returns the new validity deadline.
    ///
    /// # Errors
    /// [`Error::NotHeld`] if fewer than a majority still held it, or the confirmations came too
    /// late; [`Error::NoQuorum`] if fewer than a majority answered.
    pub async fn extend(&self, key: &str, token: &LockToken, ttl: Duration) -> Result<Instant> {
        validate_key(key)?;
        let ttl_ms = ttl_millis(ttl)?;
        let started = Instant::now();
        let (key_owned, token) = (key.to_string(), token.clone());
        let (reports, _) = self
            .fan_out(Wait::Quorum, move |client| {
                let (key, token) = (key_owned.clone(), token.clone());
                async move {
                    let extended = client.extend_raw(&key, token.expose(), ttl_ms).await?;
                    Ok(if extended {
                        Reply::Yes(())
                    } else {
                        Reply::No(None)
                    })
                }
            })
            .await;
        self.confirmed(key, reports)?;
        let valid_until = started + ttl.saturating_sub(self.inner.options.drift_for(ttl));
        if Instant::now() >= valid_until {
            return Err(Error::NotHeld {
                key: key.to_string(),
            });
        }
        Ok(valid_until)
    }

    /// What each node holds for `key`.
    pub async fn inspect(&self, key: &str) -> Vec<(String, Result<crate::LockState>)> {
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

    /// Raises `key`'s fencing counter on every node to at least `at_least` (see
    /// [`LockClient::raise_fencing_counter`]) and returns the highest counter afterwards.
    ///
    /// Succeeds once a majority has raised its counter: every later acquisition's majority
    /// shares a node with it, so every later number exceeds `at_least`. Safe for the same
    /// reason as on one node: counters only move up. Otherwise `NoQuorum`, with each node's
    /// outcome.
    pub async fn raise_fencing_counter(&self, key: &str, at_least: u64) -> Result<u64> {
        crate::token::validate_key(key)?;
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

    /// Runs `op` on every node concurrently, each in a task of its own bounded by the per-node
    /// timeout, and returns as soon as the outcome is decided: with [`Wait::Quorum`], once a
    /// majority said yes or a majority can no longer say yes; with [`Wait::All`], once every
    /// node answered or timed out. Operations not awaited go on in the background, so a release
    /// still reaches a slow node, after (on the same connection) anything sent to it before.
    async fn fan_out<T, F, Fut>(&self, wait: Wait, op: F) -> (Vec<(NodeReport, Option<T>)>, Tasks)
    where
        T: Send + 'static,
        F: Fn(LockClient) -> Fut + Clone + Send + 'static,
        Fut: std::future::Future<Output = Result<Reply<T>>> + Send + 'static,
    {
        self.fan_out_after(Vec::new(), wait, op).await
    }

    /// As [`Redlock::fan_out`], but on each node only after that node's task in `prior` has
    /// finished. A node's earlier request then has either been handed to its connection (and
    /// this one queues behind it) or been dropped unsent at its timeout: a release can never
    /// overtake the acquisition it undoes.
    async fn fan_out_after<T, F, Fut>(
        &self,
        mut prior: Tasks,
        wait: Wait,
        op: F,
    ) -> (Vec<(NodeReport, Option<T>)>, Tasks)
    where
        T: Send + 'static,
        F: Fn(LockClient) -> Fut + Clone + Send + 'static,
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
    fn confirmed<T>(&self, key: &str, reports: Vec<(NodeReport, Option<T>)>) -> Result<Vec<T>> {
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

    /// One Redlock attempt (both fencing phases when asked).
    async fn attempt(&self, key: &str, options: &LockOptions) -> Result<TryAcquire> {
        let ttl = options.ttl();
        let ttl_ms = ttl_millis(ttl)?;
        let fencing = options.fencing_enabled();
        let token = LockToken::random();
        let t0 = Instant::now();
        let quorum = self.quorum();
        let drift = self.inner.options.drift_for(ttl);
        let valid_until = t0 + ttl.saturating_sub(drift);
        let (key_owned, token_owned) = (key.to_string(), token.clone());

        // Phase 1 on every node: SET NX PX (and read the counter when fencing). Decided as soon
        // as a majority granted or can no longer grant; a straggler's late grant is released
        // with the rest below or at release time.
        let (phase1, phase1_tasks) = {
            let (key, token) = (key_owned.clone(), token_owned.clone());
            self.fan_out(Wait::Quorum, move |client| {
                let (key, token) = (key.clone(), token.clone());
                async move {
                    let mut conn = client.connection();
                    let counter = fence_key(&key);
                    let mut inv = REDLOCK_ACQUIRE.key(&key);
                    if fencing {
                        inv.key(&counter);
                    }
                    inv.arg(token.expose()).arg(ttl_ms);
                    let (ok, n): (i64, i64) = inv
                        .invoke_async(&mut conn)
                        .await
                        .map_err(|e| Error::from_redis(crate::Operation::Acquire, e))?;
                    Ok(if ok == 1 {
                        Reply::Yes(n.max(0) as u64)
                    } else {
                        Reply::No((n >= 0).then(|| Duration::from_millis(n as u64)))
                    })
                }
            })
            .await
        };
        let granted: Vec<(usize, u64)> = phase1
            .iter()
            .enumerate()
            .filter_map(|(i, (_, counter))| counter.map(|c| (i, c)))
            .collect();
        let reports: Vec<NodeReport> = phase1.into_iter().map(|(r, _)| r).collect();
        let mut ok = granted.len() >= quorum;

        // Phase 2 (fencing): raise the counters of the granting nodes to max + 1, each only
        // while it still holds our token; a majority must confirm.
        let mut fence = None;
        if ok && fencing {
            let number = granted.iter().map(|(_, c)| *c).max().unwrap_or(0) + 1;
            // Sent to every node: the script raises only where the key holds our token (the
            // granting nodes, and a straggler whose late grant has landed), which is exactly
            // the condition the argument needs.
            let (key, token) = (key_owned.clone(), token_owned.clone());
            let (raised, _) = self
                .fan_out(Wait::Quorum, move |client| {
                    let (key, token) = (key.clone(), token.clone());
                    async move {
                        let mut conn = client.connection();
                        let held: i64 = RAISE_FENCE
                            .key(&key)
                            .key(fence_key(&key))
                            .arg(token.expose())
                            .arg(number)
                            .invoke_async(&mut conn)
                            .await
                            .map_err(|e| Error::from_redis(crate::Operation::Acquire, e))?;
                        Ok(if held == 1 {
                            Reply::Yes(())
                        } else {
                            Reply::No(None)
                        })
                    }
                })
                .await;
            ok = raised.iter().filter(|(_, v)| v.is_some()).count() >= quorum;
            fence = Some(number);
        }
        // Counted only if everything above finished within the validity.
        ok = ok && Instant::now() < valid_until;

        if ok {
            let lease = Lease::until(key, token, fence, valid_until);
            if options.auto_extend_enabled() {
                self.keep_alive(lease.clone(), options);
            }
            // Stragglers may still be handing their SET to a slow node: the release waits for
            // them, so it can never overtake one.
            let stragglers = Arc::new(std::sync::Mutex::new(phase1_tasks));
            return Ok(TryAcquire::Acquired(LockGuard::new(
                Arc::new(RedlockHeld(self.clone(), stragglers)),
                lease,
            )));
        }

        // Not acquired: give the token back on every node, each after its phase-1 request was
        // handed over or dropped (so the release queues behind it), and wait for them all.
        let (key, token) = (key_owned.clone(), token_owned.clone());
        let _ = self
            .fan_out_after(phase1_tasks, Wait::All, move |client| {
                let (key, token) = (key.clone(), token.clone());
                async move {
                    client
                        .release_raw(&key, token.expose())
                        .await
                        .map(Reply::Yes)
                }
            })
            .await;
        let busy: Vec<Option<Duration>> = reports
            .iter()
            .filter_map(|r| match r.outcome {
                NodeOutcome::Busy { remaining } => Some(remaining),
                _ => None,
            })
            .collect();
        // Someone else holds it (on at least one node), or enough nodes granted but too late:
        // busy, worth a retry. Only failures and silence: no quorum.
        if !busy.is_empty() || granted.len() >= quorum {
            Ok(TryAcquire::Busy {
                remaining: busy.into_iter().flatten().max(),
            })
        } else {
            Err(Error::NoQuorum {
                key: key_owned,
                needed: quorum,
                nodes: NodeReports(reports),
            })
        }
    }

    /// Renews an auto-extended Redlock lease every interval until it ends, is lost, or reaches
    /// its hold cap; one task per lease (Redlock leases are few and each renewal is N round
    /// trips anyway).
    fn keep_alive(&self, lease: Lease, options: &LockOptions) {
        let redlock = self.clone();
        let ttl = options.ttl();
        let interval = options.renew_interval();
        let stop_at = options.max_hold_bound().map(|cap| Instant::now() + cap);
        tokio::spawn(async move {
            let mut next = Instant::now() + interval;
            loop {
                tokio::time::sleep_until(next.into()).await;
                if lease.is_ended() || lease.loss_reason().is_some() {
                    return;
                }
                if stop_at.is_some_and(|s| Instant::now() >= s) {
                    // Capped: let it run out, and say so when it does.
                    tokio::time::sleep_until(lease.valid_until().into()).await;
                    lease.mark_lost(LossReason::Expired);
                    return;
                }
                let deadline = lease.valid_until();
                // The send recorded first: an outcome left unknown never raises the validity.
                let sent = Instant::now();
                let bound = sent + ttl.saturating_sub(redlock.inner.options.drift_for(ttl));
                let seq = lease.extend_sent(bound);
                match tokio::time::timeout_at(
                    deadline.into(),
                    redlock.extend(lease.key(), lease.token(), ttl),
                )
                .await
                {
                    Ok(Ok(until)) => {
                        lease.extend_confirmed(seq, until.min(bound));
                        next = Instant::now() + interval;
                    }
                    Ok(Err(Error::NotHeld { .. })) => {
                        lease.mark_lost(LossReason::NotHeld);
                        return;
                    }
                    _ if Instant::now() >= deadline => {
                        lease.mark_lost(LossReason::Expired);
                        return;
                    }
                    _ => next = Instant::now() + (interval / 8).max(Duration::from_millis(5)),
                }
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redlock_urls_name_every_node_with_the_same_credentials() {
        assert_eq!(
            node_urls("redlock://u:p@127.0.0.1:7000,[::1]:7001,h/2").unwrap(),
            [
                "redis://u:p@127.0.0.1:7000/2",
                "redis://u:p@[::1]:7001/2",
                "redis://u:p@h:6379/2"
            ]
        );
        assert_eq!(
            node_urls("rediss-redlock://a:1").unwrap(),
            ["rediss://a:1/0"]
        );
        assert!(node_urls("redlock://").is_err());
        assert!(node_urls("redis://a:1").is_err());
    }

    #[test]
    fn labels_hide_credentials() {
        assert_eq!(node_label("redis://:pw@127.0.0.1:7000/0"), "127.0.0.1:7000");
        assert_eq!(node_label("valkey://user:pw@[::1]:7001"), "[::1]:7001");
        assert_eq!(node_label("redis://h:1/"), "h:1");
    }

    #[test]
    fn drift_is_one_percent_plus_two_ms() {
        let o = RedlockOptions::new();
        assert_eq!(
            o.drift_for(Duration::from_secs(10)),
            Duration::from_millis(102)
        );
    }
}

/// A lock held on a Redlock set, and the acquisition's requests still on their way to slow
/// nodes (the release waits for each, so it never overtakes that node's acquisition).
#[derive(Debug)]
struct RedlockHeld(Redlock, Arc<std::sync::Mutex<Tasks>>);

impl HeldLock for RedlockHeld {
    fn release<'a>(&'a self, lease: &'a Lease) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move {
            let prior = std::mem::take(&mut *self.1.lock().unwrap_or_else(|p| p.into_inner()));
            self.0
                .release_after(prior, lease.key(), lease.token())
                .await
        })
    }

    fn extend<'a>(&'a self, lease: &'a Lease, ttl: Duration) -> BoxFuture<'a, Result<Instant>> {
        Box::pin(self.0.extend(lease.key(), lease.token(), ttl))
    }

    fn drift(&self, ttl: Duration) -> Duration {
        self.0.inner.options.drift_for(ttl)
    }
}

impl LockBackend for Redlock {
    fn name(&self) -> &'static str {
        "redlock"
    }

    fn try_acquire<'a>(
        &'a self,
        key: &'a str,
        options: &'a LockOptions,
    ) -> BoxFuture<'a, Result<TryAcquire>> {
        Box::pin(Redlock::try_acquire(self, key, options))
    }

    fn acquire<'a>(
        &'a self,
        key: &'a str,
        options: &'a LockOptions,
    ) -> BoxFuture<'a, Result<LockGuard>> {
        Box::pin(Redlock::acquire(self, key, options))
    }

    fn release<'a>(&'a self, key: &'a str, token: &'a LockToken) -> BoxFuture<'a, Result<()>> {
        Box::pin(Redlock::release(self, key, token))
    }

    fn release_fair<'a>(&'a self, key: &'a str, token: &'a LockToken) -> BoxFuture<'a, Result<()>> {
        Box::pin(Redlock::release_fair(self, key, token))
    }

    fn extend<'a>(
        &'a self,
        key: &'a str,
        token: &'a LockToken,
        ttl: Duration,
    ) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move { Redlock::extend(self, key, token, ttl).await.map(|_| ()) })
    }

    fn inspect<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<crate::LockState>> {
        Box::pin(self.inspect_majority(key))
    }

    fn raise_fencing_counter<'a>(
        &'a self,
        key: &'a str,
        at_least: u64,
    ) -> BoxFuture<'a, Result<u64>> {
        Box::pin(Redlock::raise_fencing_counter(self, key, at_least))
    }
}

impl Redlock {
    /// The lock as a majority sees it: the holder whose token a majority of nodes hold (with
    /// the shortest TTL among them), else none; the highest fencing counter of any node.
    ///
    /// # Errors
    /// [`Error::NoQuorum`] if fewer than a majority answered.
    pub async fn inspect_majority(&self, key: &str) -> Result<crate::LockState> {
        validate_key(key)?;
        let states = self.inspect(key).await;
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
        Ok(crate::LockState {
            key: key.to_string(),
            holder,
            ttl,
            fencing_counter: answered.iter().filter_map(|s| s.fencing_counter).max(),
        })
    }
}

fn fair_unsupported() -> Error {
    Error::Unsupported {
        backend: "redlock",
        what: "a fair lock (a queue would need a majority of its own)".into(),
    }
}

/// Redlock keeps no queue: [`LockOptions::fair`] is refused.
fn refuse_fair(options: &LockOptions) -> Result<()> {
    if options.fair_enabled() {
        return Err(fair_unsupported());
    }
    Ok(())
}
