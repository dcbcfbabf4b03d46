//! [`Election`]: one leader of a name at a time, with strictly increasing terms, on any backend
//! that has it. The watch loop ([`Election::watch`]) lives here once; a backend only says how
//! to read the leader and, if it can, how to learn of a change sooner than by polling.

use std::fmt::Debug;
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::BoxFuture;
use tokio::sync::watch;

use crate::core::error::{Error, Operation, Result};
use crate::core::guard::LockGuard;
use crate::core::kind::{Backend, Taking};
use crate::core::options::{FOREVER, LockOptions};

/// The longest candidate id.
pub const MAX_ID_LEN: usize = 256;

/// The current leader of an election.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Leader {
    /// The id the leader campaigned with.
    pub id: String,
    /// Its term, strictly increasing from term to term: the fencing number of its lock (Redis,
    /// PostgreSQL, memory, file), or the revision that created its entry (etcd).
    pub term: u64,
    /// How long its lease still runs on the server (renewed while it lives), where the backend
    /// knows it.
    pub ttl: Option<Duration>,
}

/// Announcements of leadership changes, from a backend that has them (a Redis release channel,
/// an etcd watch): [`Election::watch`] reads the leader again as soon as one arrives.
pub(crate) trait LeaderChanges: Send {
    /// Forgets the announcements so far: the read about to be made covers them.
    fn mark_seen(&mut self);
    /// Waits for the next announcement.
    fn changed(&mut self) -> BoxFuture<'_, ()>;
}

/// What a backend implements to offer [`Election`]s, for the one name it was made for.
/// Guarantees every provider keeps (docs/guarantees.md §6): at most one leader at a time while
/// leases are valid; terms strictly increase from leader to leader; a leader learns of its loss
/// through its guard.
#[async_trait::async_trait]
pub(crate) trait ElectionProvider: Send + Sync + Debug + 'static {
    /// Waits to lead as `id` (checked by the handle), with `options` as given by the caller
    /// (their TTL checked as renewed): the provider turns on auto-extension and fencing, and
    /// refuses what it does not have (fair mode, `replica_ack`) with `Error::Unsupported`.
    async fn campaign(&self, id: &str, options: &LockOptions) -> Result<LockGuard>;

    /// Who leads now; `None` while nobody does.
    async fn leader(&self) -> Result<Option<Leader>>;

    /// A source of change announcements, if the backend has one (`None`: the watch polls).
    async fn changes(&self) -> Option<Box<dyn LeaderChanges>> {
        None
    }
}

/// An election on `name`: one leader at a time, each with a term (its fencing number) higher
/// than every earlier leader's. Cheap to clone; made by
/// [`Locker::election`](crate::Locker::election) (or a backend's own client, such as
/// [`Locker::election`](crate::Locker::election)).
///
/// Leadership is a lock held with auto-extension: a campaign waits for it; resigning is
/// releasing the guard; a leader that crashes stops renewing and its lease expires after one
/// TTL, when a waiting candidate takes over. A resource that refuses a term below the highest
/// it has seen refuses a deposed leader, even one that was paused and does not know it.
///
/// ```no_run
/// use std::time::Duration;
/// use leasehold::{LockOptions, Locker};
///
/// # async fn example(locks: Locker) -> Result<(), leasehold::Error> {
/// let election = locks.election("scheduler")?;
/// // Waits until this process leads; renewed for as long as it lives.
/// let leadership = election.campaign("worker-7", &LockOptions::new(Duration::from_secs(5))).await?;
/// let term = leadership.fencing_token().expect("every term has a number");
/// tokio::select! {
///     _ = leadership.lost() => eprintln!("deposed during term {term}"),
///     _ = async { /* lead: stamp writes with `term` */ } => {}
/// }
/// leadership.release().await.ok(); // resign
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct Election {
    label: super::Label,
    provider: Arc<dyn ElectionProvider>,
}

impl Election {
    /// The handle over `provider`, made for `name` (checked with `validate_key` before).
    pub(crate) fn new(backend: Backend, name: &str, provider: impl ElectionProvider) -> Election {
        Election {
            label: super::Label::new(backend, name),
            provider: Arc::new(provider),
        }
    }

    /// The election's name (its lock key).
    pub fn name(&self) -> &str {
        &self.label.name
    }

    /// Waits to become leader as `id`, until `options.wait_bound()` (for ever without one),
    /// and returns the leadership: a guard whose fencing number is the term, renewed
    /// automatically (`auto_extend` and `fencing` are always on). Resign with
    /// [`LockGuard::release`]; [`LockGuard::lost`] says when the term ended without it.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for an empty or over-long id or a bad TTL;
    /// [`Error::Unsupported`] with fair mode or `replica_ack`; [`Error::NotAcquired`] at the
    /// deadline; connection and server errors.
    pub async fn campaign(&self, id: &str, options: &LockOptions) -> Result<LockGuard> {
        if id.is_empty() || id.len() > MAX_ID_LEN {
            return Err(Error::invalid(
                "id",
                format!("a candidate id needs 1 to {MAX_ID_LEN} bytes"),
            ));
        }
        // Checked as it will run: renewed, so at least MIN_RENEWED_TTL.
        options.clone().auto_extend(true).validate()?;
        self.label.check(options, Taking::Leadership)?;
        // Without a wait, a campaign lasts until it wins: decided here, once, for every
        // backend (the providers wait as the options say).
        let options = options
            .clone()
            .wait(options.wait_bound().unwrap_or(FOREVER));
        self.label
            .traced(
                "leasehold.election.campaign",
                self.provider.campaign(id, &options),
            )
            .await
    }

    /// Who leads now, and in which term; `None` while nobody does.
    ///
    /// # Errors
    /// [`Error::Conflict`] if the election's lock is held by something else than a campaign
    /// (a plain lock); connection and server errors.
    pub async fn leader(&self) -> Result<Option<Leader>> {
        self.label
            .traced("leasehold.election.leader", self.provider.leader())
            .await
    }

    /// Follows the leadership: a background task reads [`Election::leader`] when the backend
    /// announces a change (Redis: a leader elected or resigning; etcd: a change of the
    /// election's entries), when the leader's lease would run out, and at least every
    /// `every`, and publishes each change of term. The task ends with the last
    /// [`LeaderWatch`].
    pub fn watch(&self, every: Duration) -> LeaderWatch {
        let (tx, rx) = watch::channel(None);
        let provider = Arc::clone(&self.provider);
        let every = every.max(Duration::from_millis(10));
        tokio::spawn(async move {
            let mut changes = provider.changes().await;
            loop {
                if let Some(c) = changes.as_mut() {
                    c.mark_seen();
                }
                let current = provider.leader().await.unwrap_or(None);
                let next = current
                    .as_ref()
                    .and_then(|l| l.ttl)
                    .map_or(every, |t| every.min(t + Duration::from_millis(1)));
                tx.send_if_modified(|seen: &mut Option<Leader>| {
                    // A renewal changes the TTL only: not a change of leadership.
                    let changed = seen.as_ref().map(|l| l.term) != current.as_ref().map(|l| l.term);
                    if changed {
                        *seen = current;
                    }
                    changed
                });
                tokio::select! {
                    _ = tx.closed() => return,
                    _ = async {
                        match changes.as_mut() {
                            Some(c) => c.changed().await,
                            None => std::future::pending().await,
                        }
                    } => {}
                    _ = tokio::time::sleep(next) => {}
                }
            }
        });
        LeaderWatch { rx }
    }
}

/// Leadership changes of an [`Election`], from [`Election::watch`].
#[derive(Debug, Clone)]
pub struct LeaderWatch {
    rx: watch::Receiver<Option<Leader>>,
}

impl LeaderWatch {
    /// The leader as last seen (`None`: nobody, or not read yet).
    pub fn current(&self) -> Option<Leader> {
        self.rx.borrow().clone()
    }

    /// Waits for the next change of leader (a new term, or nobody) and returns it.
    ///
    /// # Errors
    /// [`Error::Connection`] if the watching task ended (its runtime shut down).
    pub async fn changed(&mut self) -> Result<Option<Leader>> {
        self.rx.changed().await.map_err(|_| Error::Connection {
            op: Operation::Inspect,
            ambiguous: false,
            source: std::io::Error::other("the election watch ended").into(),
        })?;
        Ok(self.rx.borrow_and_update().clone())
    }
}

impl crate::core::trace::Traced for Leader {
    fn outcome(&self) -> (&'static str, Option<u64>) {
        ("led", Some(self.term))
    }
}
