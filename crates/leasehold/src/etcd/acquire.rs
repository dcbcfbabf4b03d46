//! Acquiring: the one attempt and the wait in a queue (enqueue, watch the entries ahead,
//! again) as a provider of the acquisition engine, the cleanup of an abandoned entry, and the
//! guard of an entry whose turn came. Every primitive is a [`Queue`] (the plain lock, a
//! semaphore, each side of a read-write lock, an election), so the wait (etcd's `waitDeletes`)
//! lives here once.

use std::collections::HashSet;
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use ec::{
    Compare, CompareOp, EventType, GetOptions, PutOptions, SortOrder, SortTarget, Txn, TxnOp,
    WatchFilterType, WatchOptions,
};
use etcd_client as ec;
use tokio_util::sync::CancellationToken;

use crate::core::acquire::{Ask, Attempts};
use crate::core::error::{Error, Operation, Result};
use crate::core::guard::{Lease, LockGuard, clock_drift};
use crate::core::history::{HistoryEvent, HistoryKind};
use crate::core::kind::{Backend, Taking};
use crate::core::options::LockOptions;
use crate::core::outcome::TryAcquire;
use crate::core::token::LockToken;

use super::client::EtcdClient;
use super::error::{lease_gone, session_lost, transient};
use super::held::{EtcdHeld, MinHold};
use super::history::{EtcdHistory, Rider};
use super::keys::{check_key, queue_prefix, ttl_secs};
use super::lock;
use super::request::{header_revision, txn_get};
use super::session::{Attach, Session, SessionRef, Tracked};
use super::spare::OwnLease;

/// A queue of entries, each storing its token on a lease: the entries under `blockers` with a
/// lower create revision than ours hold us back while `allowed` or more of them remain (etcd's
/// `waitDeletes` recipe, with a count). The plain lock, a semaphore of `N` (`allowed = N`),
/// each side of a read-write lock (a reader is held back by earlier writers, a writer by
/// every earlier entry) and an election are queues.
pub(super) struct Queue<'a> {
    /// What errors and the guard name: the lock key, or the primitive's name.
    pub(super) name: &'a str,
    /// The entry of a token.
    pub(super) entry: &'a EntryOf<'a>,
    /// Every entry of the primitive: the first one is checked by `check_first`.
    pub(super) all: Vec<u8>,
    /// The prefix of the entries that hold us back.
    pub(super) blockers: Vec<u8>,
    /// How many earlier blockers may remain when we hold (1 or more).
    pub(super) allowed: usize,
    /// Checks the key of the first entry under `all` when ours is written (a semaphore
    /// refuses another number of permits): an error gives our entry back.
    pub(super) check_first: Option<&'a CheckFirst<'a>>,
    /// The plain lock: a recording client's transactions put its history events.
    pub(super) records: bool,
}

/// The entry key of a token.
pub(super) type EntryOf<'a> = dyn Fn(&LockToken) -> Vec<u8> + Sync + 'a;

/// A check of the first entry's key.
pub(super) type CheckFirst<'a> = dyn Fn(&[u8]) -> Result<()> + Sync + 'a;

impl Queue<'_> {
    /// The plain lock `key`'s queue (`K\0token`, held by the first entry).
    pub(super) fn lock<'a>(key: &'a str, entry: &'a EntryOf<'a>) -> Queue<'a> {
        Queue {
            name: key,
            entry,
            all: queue_prefix(key),
            blockers: queue_prefix(key),
            allowed: 1,
            check_first: None,
            records: true,
        }
    }

    /// A read of the first entry under `all` (keys only), if there is a check.
    fn first_op(&self) -> Option<TxnOp> {
        self.check_first.map(|_| {
            let first = GetOptions::new()
                .with_prefix()
                .with_sort(SortTarget::Create, SortOrder::Ascend)
                .with_limit(1)
                .with_keys_only();
            TxnOp::get(self.all.clone(), Some(first))
        })
    }

    /// Runs the check on the first entry `resp`'s get at `index` found, if any.
    fn check(&self, resp: &ec::TxnResponse, index: usize) -> Result<()> {
        match (self.check_first, txn_get(resp, index).first()) {
            (Some(check), Some(first)) => check(first.key()),
            _ => Ok(()),
        }
    }
}

/// Deletes the entry of an acquisition whose outcome is unknown or abandoned (the future was
/// dropped, the reply was lost, the deadline passed), token-checked, in the background.
pub(super) struct Cleanup {
    client: EtcdClient,
    entry: Vec<u8>,
    token: LockToken,
    /// A lease of the entry's own, revoked too.
    lease: Option<i64>,
    /// The session whose lease the entry was put on (if it was): it deletes the entry at its
    /// next renewals if etcd does not confirm the cleanup's delete.
    session: Option<Weak<Session>>,
    armed: bool,
}

impl Cleanup {
    pub(super) fn new(
        client: &EtcdClient,
        entry: &[u8],
        token: &LockToken,
        lease: Option<i64>,
        session: Option<&Arc<Session>>,
    ) -> Self {
        Cleanup {
            client: client.clone(),
            entry: entry.to_vec(),
            token: token.clone(),
            lease,
            session: session.map(Arc::downgrade),
            armed: true,
        }
    }

    pub(super) fn disarm(&mut self) {
        self.armed = false;
    }

    /// Deletes the entry now (falling back to the background on failure).
    async fn run(&mut self) {
        self.armed = false;
        let txn = Txn::new()
            .when([Compare::value(
                self.entry.clone(),
                CompareOp::Equal,
                self.token.expose(),
            )])
            .and_then([TxnOp::delete(self.entry.clone(), None)]);
        match self.client.txn(Operation::Release, true, txn).await {
            Ok(_) => {
                if let Some(id) = self.lease {
                    self.client.revoke_in_background(id);
                }
            }
            Err(_) => self.in_background(),
        }
    }

    /// Deletes the entry in the background; the session it may ride on takes it as an orphan
    /// if etcd does not confirm that.
    fn in_background(&mut self) {
        let (entry, token) = (std::mem::take(&mut self.entry), self.token.clone());
        let sessions = self.session.iter().cloned().collect();
        self.client
            .remove_in_background(entry, token, self.lease, sessions);
    }
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        if self.armed {
            self.in_background();
        }
    }
}

/// Where the entry of a new acquisition lives, and so how its validity is computed.
pub(super) enum Basis {
    /// On a session's lease (auto-extended).
    Session(SessionRef),
    /// On a lease of its own (asked for `secs`).
    Dedicated { lease: OwnLease, secs: i64 },
}

/// A queue as the acquisition engine ([`wait`](crate::core::acquire::wait)) drives it. An
/// attempt without a wait (or with a zero one) is [`EtcdClient::try_queue`]; one with a wait
/// waits in a [`Place`] until its turn comes (a watch of the entries ahead, no polling) and hands
/// the engine its [`Step`]. The engine does the rest: the backoff between attempts (a requeue
/// never spins), no attempt at or past the deadline, [`Error::NotAcquired`], and the retry of a
/// grant that came too late.
struct Waiter<'q, 'a> {
    client: &'q EtcdClient,
    queue: &'q Queue<'a>,
    secs: i64,
    /// The place the last attempt kept: the next one goes on in it, and
    /// [`EtcdClient::acquire_in`] gives it back if the wait ends first.
    place: Mutex<Option<Place>>,
}

/// Our entry in a queue, on the session lease of its TTL.
struct Place {
    session: SessionRef,
    token: LockToken,
    entry: Vec<u8>,
    /// The entry's create revision (its position, and the fencing number), once etcd confirmed
    /// the put.
    rev: Option<i64>,
    /// Deletes the entry (token-checked) however the wait ends without the lock.
    cleanup: Cleanup,
}

/// How a wait in a [`Place`] ends short of the lock.
enum Step {
    /// The place is lost (our entry vanished, or its session ended): what is left of the entry
    /// goes in the background, and the engine queues again after its backoff (busy).
    Requeue,
    /// A connection error while the session lives: the place is kept, and the engine's next
    /// attempt, after its backoff, goes on in it at the same position.
    Retry(Error),
    /// The deadline passed: the place is kept, for `acquire_in` to give back.
    Deadline,
    /// Our entry is given back now, and the engine queues again if it rides the error out
    /// ([`Waiter::retries`], a grant that came too late), or returns it.
    Fail(Error),
}

/// Any other error of a step fails it.
impl From<Error> for Step {
    fn from(e: Error) -> Step {
        Step::Fail(e)
    }
}

impl Place {
    /// The step a failed request of a waiter leads to: a connection error is retried in the
    /// place while its session lives, and loses the place with the session; any other fails.
    fn step(&self, e: Error) -> Step {
        if !transient(&e) {
            Step::Fail(e)
        } else if self.session.0.dead.is_cancelled() {
            Step::Requeue
        } else {
            Step::Retry(e)
        }
    }
}

impl Attempts for Waiter<'_, '_> {
    fn name(&self) -> &str {
        self.queue.name
    }

    async fn attempt(&self, options: &LockOptions, ask: Ask) -> Result<TryAcquire> {
        let Some(wait) = ask.wait.filter(|w| !w.is_zero()) else {
            return self.client.try_queue(self.queue, options, self.secs).await;
        };
        let deadline = Instant::now() + wait;
        let kept = lock(&self.place).take();
        let mut place = match kept {
            Some(place) => place,
            None => self.enter(options).await?,
        };
        match self.turn(&mut place, options, deadline).await {
            Ok(guard) => {
                place.cleanup.disarm();
                Ok(TryAcquire::Acquired(guard))
            }
            Err(Step::Requeue) => Ok(TryAcquire::Busy { remaining: None }),
            Err(Step::Retry(e)) => {
                *lock(&self.place) = Some(place);
                Err(e)
            }
            Err(Step::Deadline) => {
                *lock(&self.place) = Some(place);
                Ok(TryAcquire::Busy { remaining: None })
            }
            Err(Step::Fail(e)) => {
                place.cleanup.run().await;
                Err(e)
            }
        }
    }

    /// A connection error (the place kept, or lost with its session), and a write etcd refused
    /// because the session's lease died before its keep-alive said so (nothing was written):
    /// queued again, on a live session.
    fn retries(&self, e: &Error) -> bool {
        transient(e) || lease_gone(e)
    }
}

impl Waiter<'_, '_> {
    /// A new place, on the session of our TTL (not written yet).
    async fn enter(&self, options: &LockOptions) -> Result<Place> {
        let client = self.client;
        let session = client.checkout(self.secs, options.renew_interval()).await?;
        let token = options.new_token();
        let entry = (self.queue.entry)(&token);
        let cleanup = Cleanup::new(client, &entry, &token, None, Some(&session.0));
        Ok(Place {
            session,
            token,
            entry,
            rev: None,
            cleanup,
        })
    }

    /// Waits in `place` until fewer than `allowed` blockers are ahead of our entry (written
    /// first, unless etcd confirmed it already), and makes the guard.
    async fn turn(
        &self,
        place: &mut Place,
        options: &LockOptions,
        deadline: Instant,
    ) -> Result<LockGuard, Step> {
        let (client, queue) = (self.client, self.queue);
        let rev = match place.rev {
            Some(rev) => rev,
            None => {
                let rev = self.enqueue(place).await?;
                *place.rev.insert(rev)
            }
        };
        let ahead = GetOptions::new()
            .with_prefix()
            .with_sort(SortTarget::Create, SortOrder::Descend)
            .with_max_create_revision(rev - 1)
            .with_keys_only();
        // One blocker allowed: the nearest one is enough (watched alone, it goes after the ones
        // ahead of it are gone, or is replaced by one of them).
        let ahead = if queue.allowed == 1 {
            ahead.with_limit(1)
        } else {
            ahead
        };
        loop {
            let txn = Txn::new().and_then([
                TxnOp::get(place.entry.clone(), None),
                TxnOp::get(queue.blockers.clone(), Some(ahead.clone())),
            ]);
            let read = client.txn(Operation::Acquire, false, txn).await;
            let resp = read.map_err(|e| place.step(e))?;
            let read_at = header_revision(&resp)?;
            let ours = txn_get(&resp, 0).first().map(|kv| kv.create_revision()) == Some(rev);
            if !ours {
                // Our entry is gone (its lease expired, or someone deleted it).
                let key = queue.name;
                tracing::debug!(
                    key,
                    "our queue entry vanished while waiting; queueing again"
                );
                return Err(Step::Requeue);
            }
            let ahead = txn_get(&resp, 1);
            if ahead.len() < queue.allowed {
                break;
            }
            let watch = if queue.allowed == 1 {
                // Exactly the entry just ahead: a release wakes only the next waiter.
                Deletions::of_key(ahead[0].key())
            } else {
                // Any `len - allowed + 1` of them, whichever holders release first: the
                // prefix is watched and the deletions counted here, so a waiter reads
                // again only once its turn may have come.
                Deletions::among(&queue.blockers, &ahead, queue.allowed)
            };
            let dead = &place.session.0.dead;
            client
                .watch_deletions(watch, read_at + 1, dead, deadline)
                .await?;
        }
        // Ours. An auto-extended lock stays on the session; any other moves onto a lease of its
        // own.
        let (basis, recorded) = if options.auto_extend_enabled() {
            (Basis::Session(SessionRef::pin(&place.session.0)), false)
        } else {
            self.own_lease(place, rev, options).await?
        };
        let min_hold = client.grant_min_hold(options).await?;
        let (token, entry) = (place.token.clone(), (place.entry.clone(), rev));
        let basis = (basis, recorded);
        Ok(client.finish(queue.name, token, entry, basis, min_hold, options)?)
    }

    /// Writes our entry on the session's lease, `If(CreateRevision(entry) == 0)` (so a retry
    /// after an ambiguous failure finds it), and answers its create revision.
    async fn enqueue(&self, place: &Place) -> Result<i64, Step> {
        let (queue, entry) = (self.queue, &place.entry);
        let first: Vec<TxnOp> = queue.first_op().into_iter().collect();
        let on_session = PutOptions::new().with_lease(place.session.0.id);
        let put = TxnOp::put(entry.clone(), place.token.expose(), Some(on_session));
        let get = TxnOp::get(entry.clone(), None);
        let txn = Txn::new()
            .when([Compare::create_revision(entry.clone(), CompareOp::Equal, 0)])
            .and_then([vec![put, get.clone()], first.clone()].concat())
            .or_else([vec![get], first].concat());
        let written = self.client.txn(Operation::Acquire, true, txn).await;
        let resp = written.map_err(|e| place.step(e))?;
        let index = usize::from(resp.succeeded());
        queue.check(&resp, index + 1)?;
        // No entry: the session's lease died under it.
        let rev = txn_get(&resp, index).first().map(|kv| kv.create_revision());
        rev.ok_or(Step::Requeue)
    }

    /// Moves our entry (at `rev`) onto a lease of its own, guarded by our create revision (a
    /// put keeps it); with a recording client, the move puts the acquisition's history event
    /// (whose fencing number is `rev`).
    async fn own_lease(
        &self,
        place: &mut Place,
        rev: i64,
        options: &LockOptions,
    ) -> Result<(Basis, bool), Step> {
        let lease = (self.client)
            .own_lease(self.secs, Operation::Acquire, true)
            .await?;
        place.cleanup.lease = Some(lease.id);
        let (entry, token) = (place.entry.clone(), place.token.expose());
        let ours = Compare::create_revision(entry.clone(), CompareOp::Equal, rev);
        let put = TxnOp::put(entry, token, Some(PutOptions::new().with_lease(lease.id)));
        let fencing = options.fencing_enabled().then_some(rev as u64);
        let event = self
            .client
            .acquisition_event(self.queue, &place.token, fencing, options)
            .await;
        let (moved, recorded) = self
            .client
            .txn_with_event(Operation::Acquire, ours, vec![put], event)
            .await?;
        if !moved.succeeded() {
            // Our entry is gone.
            return Err(Step::Requeue);
        }
        let basis = Basis::Dedicated {
            lease,
            secs: self.secs,
        };
        Ok((basis, recorded))
    }
}

/// The deletions a waiter waits for: `needed` of the entries `ahead` (read at the revision the
/// watch starts after), watched as one key or as the prefix they are under.
struct Deletions {
    key: Vec<u8>,
    prefix: bool,
    ahead: HashSet<Vec<u8>>,
    needed: usize,
}

impl Deletions {
    /// The deletion of `key` alone.
    fn of_key(key: &[u8]) -> Self {
        Deletions {
            key: key.to_vec(),
            prefix: false,
            ahead: HashSet::from([key.to_vec()]),
            needed: 1,
        }
    }

    /// Enough deletions among `ahead` (entries under `prefix`) that fewer than `allowed`
    /// remain.
    fn among(prefix: &[u8], ahead: &[ec::KeyValue], allowed: usize) -> Self {
        Deletions {
            key: prefix.to_vec(),
            prefix: true,
            ahead: ahead.iter().map(|kv| kv.key().to_vec()).collect(),
            needed: ahead.len() + 1 - allowed,
        }
    }

    /// Counts the deletion of `key` (if it was ahead); true once enough have happened.
    fn deleted(&mut self, key: &[u8]) -> bool {
        if self.ahead.remove(key) {
            self.needed = self.needed.saturating_sub(1);
        }
        self.needed == 0
    }
}

impl EtcdClient {
    pub(super) fn check_request(&self, key: &str, options: &LockOptions) -> Result<i64> {
        check_key(key)?;
        // The one option table: etcd commits every write to a majority, so replica_ack is
        // refused there; the primitives' handles checked their own taking before.
        options.check_for(Backend::Etcd, Taking::Lock)?;
        ttl_secs(options.ttl())
    }

    /// One attempt to hold a place of `queue`, without waiting (see
    /// [`Locker::try_acquire`](crate::Locker::try_acquire)): with `allowed == 1`, one transaction that writes our entry
    /// only if no blocker exists (nothing to clean up when busy); with more, one transaction
    /// that counts the blockers and writes our entry, then a second that deletes it if there
    /// were `allowed` or more (or the first entry's check refused it).
    pub(super) async fn try_queue(
        &self,
        queue: &Queue<'_>,
        options: &LockOptions,
        secs: i64,
    ) -> Result<TryAcquire> {
        match self.try_queue_on(queue, options, secs, true).await {
            // A spare lease etcd no longer knows (revoked from outside): etcd applied nothing,
            // so the attempt is made again, on a new lease (`etcd::spare`).
            Err(e) if lease_gone(&e) && !options.auto_extend_enabled() => {
                self.try_queue_on(queue, options, secs, false).await
            }
            attempt => attempt,
        }
    }

    /// [`EtcdClient::try_queue`] once; `reuse`: on a spare lease, if there is one.
    async fn try_queue_on(
        &self,
        queue: &Queue<'_>,
        options: &LockOptions,
        secs: i64,
        reuse: bool,
    ) -> Result<TryAcquire> {
        let token = options.new_token();
        let entry = (queue.entry)(&token);
        let basis = if options.auto_extend_enabled() {
            Basis::Session(self.checkout(secs, options.renew_interval()).await?)
        } else {
            let lease = self.own_lease(secs, Operation::Acquire, reuse).await?;
            Basis::Dedicated { lease, secs }
        };
        let (lease_id, own_lease, session) = match &basis {
            Basis::Session(s) => (s.0.id, None, Some(&s.0)),
            Basis::Dedicated { lease, .. } => (lease.id, Some(lease.id), None),
        };
        let mut cleanup = Cleanup::new(self, &entry, &token, own_lease, session);
        let put = TxnOp::put(
            entry.clone(),
            token.expose(),
            Some(PutOptions::new().with_lease(lease_id)),
        );
        // The first entry is read before our put: the check is against the others.
        let first: Vec<TxnOp> = queue.first_op().into_iter().collect();
        // Its fencing number is the transaction's revision, known from the reply only.
        let event = self.acquisition_event(queue, &token, None, options).await;
        let riding = event.is_some() && queue.allowed == 1;
        let build = |extra: &[TxnOp]| {
            if queue.allowed == 1 {
                Txn::new()
                    .when([
                        Compare::create_revision(queue.blockers.clone(), CompareOp::Equal, 0)
                            .with_prefix(),
                    ])
                    .and_then([first.clone(), vec![put.clone()], extra.to_vec()].concat())
                    .or_else(first.clone())
            } else {
                let blockers = GetOptions::new().with_prefix().with_keys_only();
                Txn::new().and_then(
                    [
                        first.clone(),
                        vec![
                            TxnOp::get(queue.blockers.clone(), Some(blockers)),
                            put.clone(),
                        ],
                    ]
                    .concat(),
                )
            }
        };
        let event = event.filter(|_| riding);
        let count_at = first.len() + 2;
        let (resp, recorded) = self
            .txn_riding(Operation::Acquire, build, count_at, event)
            .await?;
        let refused = queue.check(&resp, 0);
        let busy = !resp.succeeded()
            || (queue.allowed > 1 && txn_get(&resp, first.len()).len() >= queue.allowed);
        if refused.is_err() || busy {
            if resp.succeeded() {
                // Our entry was written: it goes (token-checked), with a lease of its own.
                cleanup.run().await;
            } else {
                // Nothing was written: a lease of our own is left for the next lock.
                cleanup.disarm();
                if let Basis::Dedicated { lease, secs } = basis {
                    self.spare_lease(secs, lease);
                }
            }
            refused?;
            return Ok(TryAcquire::Busy { remaining: None });
        }
        let rev = header_revision(&resp)?;
        let min_hold = self.grant_min_hold(options).await?;
        let basis = (basis, recorded);
        let guard = self.finish(queue.name, token, (entry, rev), basis, min_hold, options)?;
        cleanup.disarm();
        Ok(TryAcquire::Acquired(guard))
    }

    /// A place of `queue`, waiting until `wait` (one attempt without one, or if it is zero),
    /// through the acquisition engine (see [`Waiter`]).
    pub(super) async fn acquire_in(
        &self,
        queue: &Queue<'_>,
        options: &LockOptions,
        secs: i64,
        wait: Option<Duration>,
    ) -> Result<LockGuard> {
        let waiter = Waiter {
            client: self,
            queue,
            secs,
            place: Mutex::new(None),
        };
        let result = crate::core::acquire::wait(&waiter, options, wait).await;
        // A place still kept (the deadline passed, or a connection error outlasted it): our
        // entry goes now.
        let kept = waiter.place.into_inner().unwrap_or_else(|p| p.into_inner());
        if let Some(mut place) = kept {
            place.cleanup.run().await;
        }
        result
    }

    /// Waits until the deletions `watch` counts have happened at or after `from` (a
    /// revision): `Ok` to look again; [`Step::Requeue`] when the session ends,
    /// [`Step::Deadline`] when the deadline passes.
    async fn watch_deletions(
        &self,
        mut watch: Deletions,
        from: i64,
        session_dead: &CancellationToken,
        deadline: Instant,
    ) -> Result<(), Step> {
        let released = async {
            let mut options = WatchOptions::new()
                .with_start_revision(from)
                .with_filters([WatchFilterType::NoPut]);
            if watch.prefix {
                options = options.with_prefix();
            }
            let mut watcher = self.inner.etcd.watch_client();
            let opening = watcher.watch(watch.key.clone(), Some(options));
            if let Ok(Ok(mut stream)) =
                tokio::time::timeout(self.inner.response_timeout, opening).await
            {
                while let Ok(Some(resp)) = stream.message().await {
                    let events = resp.events().iter();
                    let mut deletions = events.filter(|e| e.event_type() == EventType::Delete);
                    let deleted = |e: &ec::Event| e.kv().is_some_and(|kv| watch.deleted(kv.key()));
                    if resp.canceled() || deletions.any(deleted) {
                        return;
                    }
                }
            }
            // The watch could not be opened, or broke: look again after a pause (the read that
            // follows bounds a broken etcd).
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        tokio::select! {
            _ = released => Ok(()),
            _ = session_dead.cancelled() => Err(Step::Requeue),
            _ = tokio::time::sleep_until(deadline.into()) => Err(Step::Deadline),
        }
    }

    /// The guard of an acquisition whose entry is first, at revision `rev`.
    pub(super) fn finish(
        &self,
        key: &str,
        token: LockToken,
        (entry, rev): (Vec<u8>, i64),
        (basis, recorded): (Basis, bool),
        min_hold: Option<MinHold>,
        options: &LockOptions,
    ) -> Result<LockGuard> {
        let fencing = options.fencing_enabled().then_some(rev as u64);
        let own = match &basis {
            Basis::Dedicated { lease, secs } => Some((*secs, *lease)),
            Basis::Session(_) => None,
        };
        // What the validity is counted from: the grant, or the session's last renewal.
        let since = match &basis {
            Basis::Session(session) => session.0.state().renewed_at,
            Basis::Dedicated { lease, .. } => lease.started,
        };
        let (lease, attach) = match basis {
            Basis::Session(session) => {
                let lease = Lease::new(key, token, fencing, Instant::now(), options.ttl());
                let attach = Arc::new(Mutex::new(Attach::Session(Arc::downgrade(&session.0))));
                let tracked = Tracked {
                    entry: entry.clone(),
                    lease: lease.clone(),
                    secs: ttl_secs(options.ttl())?,
                    stop_at: options.max_hold_bound().map(|cap| Instant::now() + cap),
                    ceiling: None,
                    attach: attach.clone(),
                };
                if session.0.register(rev, tracked).is_none() {
                    return Err(session_lost(Operation::Acquire));
                }
                (lease, attach)
            }
            Basis::Dedicated { lease: own, .. } => (
                Lease::new(key, token, fencing, own.started, own.granted),
                Arc::new(Mutex::new(Attach::Dedicated(own.id))),
            ),
        };
        if Instant::now() >= lease.valid_until() {
            if let Attach::Session(session) = &*lock(&attach)
                && let Some(session) = session.upgrade()
            {
                session.unregister(rev);
            }
            crate::core::throttle::warn_throttled!(
                key,
                "lock granted after its validity ended; releasing"
            );
            return Err(Error::ExpiredOnArrival {
                key: key.to_string(),
                elapsed: since.elapsed(),
                ttl: options.ttl(),
            });
        }
        let held = EtcdHeld {
            client: self.clone(),
            entry,
            rev,
            attach,
            min_hold,
            recorded,
            own,
        };
        Ok(LockGuard::new(Arc::new(held), lease))
    }

    /// The history event of `queue`'s acquisition by `token`, to put in the acquiring
    /// transaction, if this client records it: `fencing` when known, otherwise (fencing on)
    /// the event's create revision, which is the transaction's. `None` also when the event
    /// could not be prepared (its lease not granted): the locker appends it then.
    async fn acquisition_event(
        &self,
        queue: &Queue<'_>,
        token: &LockToken,
        fencing: Option<u64>,
        options: &LockOptions,
    ) -> Option<(&EtcdHistory, Rider)> {
        let log = self.records_lock(options).filter(|_| queue.records)?;
        let event = HistoryEvent {
            fencing,
            ..HistoryEvent::of_holder(HistoryKind::Acquired, token)
        };
        let at_create = fencing.is_none() && options.fencing_enabled();
        match log.rider(queue.name, &event, at_create).await {
            Ok(rider) => Some((&**log, rider)),
            Err(e) => {
                tracing::debug!(key = queue.name, error = %e, "no history lease; the event is appended after");
                None
            }
        }
    }

    /// With [`min_hold`](LockOptions::min_hold), the lease a release will move the entry onto,
    /// granted now, after the lock was: `min_hold` rounded up to whole seconds (etcd may raise
    /// it to its minimum TTL), so it ends no sooner than `min_hold` after the lock's grant, by
    /// etcd's clock. An error leaves the caller's cleanup to delete the entry.
    pub(super) async fn grant_min_hold(&self, options: &LockOptions) -> Result<Option<MinHold>> {
        let Some(min_hold) = options.min_hold_bound() else {
            return Ok(None);
        };
        let secs = min_hold.as_secs() + u64::from(min_hold.subsec_nanos() > 0);
        let (id, granted) = self.grant(secs as i64, Operation::Acquire).await?;
        // The grant's reply came after etcd started the lease: it ends before this.
        let over_by = Instant::now() + granted + clock_drift(granted);
        Ok(Some(MinHold { id, over_by }))
    }
}
