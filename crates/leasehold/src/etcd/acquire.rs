//! Acquiring: the one attempt and the wait in a queue (enqueue, watch the entries ahead,
//! again), the cleanup of an abandoned entry, and the guard of an entry whose turn came. Every
//! primitive is a [`Queue`] (the plain lock, a semaphore, each side of a read-write lock, an
//! election), so the wait (etcd's `waitDeletes`) lives here once.

use std::collections::HashSet;
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use ec::{
    Compare, CompareOp, EventType, GetOptions, PutOptions, SortOrder, SortTarget, Txn, TxnOp,
    WatchFilterType, WatchOptions,
};
use etcd_client as ec;
use tokio_util::sync::CancellationToken;

use crate::core::error::{Error, Operation, Result};
use crate::core::guard::{Lease, LockGuard, clock_drift};
use crate::core::options::LockOptions;
use crate::core::outcome::TryAcquire;
use crate::core::token::LockToken;

use super::client::EtcdClient;
use super::error::{lease_gone, session_lost, transient};
use super::held::{EtcdHeld, MinHold};
use super::keys::{check_key, queue_prefix, ttl_secs};
use super::lock;
use super::request::{header_revision, txn_get};
use super::session::{Attach, Session, SessionRef, Tracked};

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

    /// The sessions an orphan of this entry goes to.
    fn sessions(&self) -> Vec<Weak<Session>> {
        self.session.iter().cloned().collect()
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
            Err(_) => self.client.remove_in_background(
                self.entry.clone(),
                self.token.clone(),
                self.lease,
                self.sessions(),
            ),
        }
    }
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        if self.armed {
            self.client.remove_in_background(
                std::mem::take(&mut self.entry),
                self.token.clone(),
                self.lease,
                self.sessions(),
            );
        }
    }
}

/// Where the entry of a new acquisition lives, and so how its validity is computed.
pub(super) enum Basis {
    /// On a session's lease (auto-extended).
    Session(SessionRef),
    /// On its own lease, granted with `granted` by a request sent at `started`.
    Dedicated {
        id: i64,
        started: Instant,
        granted: Duration,
    },
}

enum Watched {
    /// The watched entry was deleted (or the watch ended): look again.
    Again,
    SessionEnded,
    Deadline,
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
        options.validate()?;
        let secs = ttl_secs(options.ttl())?;
        if options.replica_ack_required().is_some() {
            return Err(Error::Unsupported {
                backend: "etcd",
                what: "replica acknowledgement (etcd commits every write to a majority)".into(),
            });
        }
        Ok(secs)
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
        let token = options.new_token();
        let entry = (queue.entry)(&token);
        let basis = if options.auto_extend_enabled() {
            Basis::Session(self.checkout(secs, options.renew_interval()).await?)
        } else {
            let started = Instant::now();
            let (id, granted) = self.grant(secs, Operation::Acquire).await?;
            Basis::Dedicated {
                id,
                started,
                granted,
            }
        };
        let lease_id = match &basis {
            Basis::Session(s) => s.0.id,
            Basis::Dedicated { id, .. } => *id,
        };
        let (own_lease, session) = match &basis {
            Basis::Session(s) => (None, Some(&s.0)),
            Basis::Dedicated { id, .. } => (Some(*id), None),
        };
        let mut cleanup = Cleanup::new(self, &entry, &token, own_lease, session);
        let put = TxnOp::put(
            entry.clone(),
            token.expose(),
            Some(PutOptions::new().with_lease(lease_id)),
        );
        // The first entry is read before our put: the check is against the others.
        let first: Vec<TxnOp> = queue.first_op().into_iter().collect();
        let txn = if queue.allowed == 1 {
            Txn::new()
                .when([
                    Compare::create_revision(queue.blockers.clone(), CompareOp::Equal, 0)
                        .with_prefix(),
                ])
                .and_then([first.clone(), vec![put]].concat())
                .or_else(first.clone())
        } else {
            let blockers = GetOptions::new().with_prefix().with_keys_only();
            Txn::new().and_then(
                [
                    first.clone(),
                    vec![TxnOp::get(queue.blockers.clone(), Some(blockers)), put],
                ]
                .concat(),
            )
        };
        let resp = self.txn(Operation::Acquire, true, txn).await?;
        let busy = if let Err(e) = queue.check(&resp, 0) {
            Some(Err(e))
        } else if !resp.succeeded()
            || (queue.allowed > 1 && txn_get(&resp, first.len()).len() >= queue.allowed)
        {
            Some(Ok(TryAcquire::Busy { remaining: None }))
        } else {
            None
        };
        if let Some(outcome) = busy {
            if resp.succeeded() {
                // Our entry was written: it goes (token-checked), with a lease of its own.
                cleanup.run().await;
            } else {
                // Nothing was written: only a lease of our own needs giving back.
                cleanup.disarm();
                if let Basis::Dedicated { id, .. } = basis {
                    self.revoke_in_background(id);
                }
            }
            return outcome;
        }
        let rev = header_revision(&resp)?;
        let min_hold = self.grant_min_hold(options).await?;
        let guard = self.finish(queue.name, token, (entry, rev), basis, min_hold, options)?;
        cleanup.disarm();
        Ok(TryAcquire::Acquired(guard))
    }

    /// A place of `queue`, waiting until `wait` (one attempt without one, or if it is zero).
    pub(super) async fn acquire_in(
        &self,
        queue: &Queue<'_>,
        options: &LockOptions,
        secs: i64,
        wait: Option<Duration>,
    ) -> Result<LockGuard> {
        if let Some(wait) = wait.filter(|w| !w.is_zero()) {
            return self.acquire_queued(queue, options, secs, wait).await;
        }
        let begun = Instant::now();
        match self.try_queue(queue, options, secs).await? {
            TryAcquire::Acquired(guard) => Ok(guard),
            TryAcquire::Busy { .. } => Err(Error::NotAcquired {
                key: queue.name.to_string(),
                waited: begun.elapsed(),
                attempts: 1,
            }),
        }
    }

    /// Waits for a place of `queue` (see [`Locker::acquire`](crate::Locker::acquire)) until `wait` has passed.
    async fn acquire_queued(
        &self,
        queue: &Queue<'_>,
        options: &LockOptions,
        secs: i64,
        wait: Duration,
    ) -> Result<LockGuard> {
        let key = queue.name;
        let begun = Instant::now();
        let deadline = begun + wait;
        let mut attempts: u32 = 0;
        let mut failures: u32 = 0;
        let not_acquired = |attempts: u32| Error::NotAcquired {
            key: key.to_string(),
            waited: begun.elapsed(),
            attempts,
        };
        // Rides out a transient error: sleeps the backoff (never past the deadline) and says
        // whether to go on.
        let backoff = |failures: &mut u32| {
            let delay = options.backoff_policy().delay(*failures);
            *failures += 1;
            let until = (Instant::now() + delay).min(deadline);
            async move {
                tokio::time::sleep_until(until.into()).await;
                Instant::now() < deadline
            }
        };
        'session: loop {
            if Instant::now() >= deadline {
                return Err(not_acquired(attempts));
            }
            let session = match self.checkout(secs, options.renew_interval()).await {
                Ok(s) => s,
                Err(e) if transient(&e) => {
                    if backoff(&mut failures).await {
                        continue 'session;
                    }
                    return Err(e);
                }
                Err(e) => return Err(e),
            };
            let token = options.new_token();
            let entry = (queue.entry)(&token);
            let mut cleanup = Cleanup::new(self, &entry, &token, None, Some(&session.0));
            // Enqueue. Repeatable: a retry after an ambiguous failure finds the entry.
            let first: Vec<TxnOp> = queue.first_op().into_iter().collect();
            let rev = loop {
                let put = TxnOp::put(
                    entry.clone(),
                    token.expose(),
                    Some(PutOptions::new().with_lease(session.0.id)),
                );
                let txn = Txn::new()
                    .when([Compare::create_revision(entry.clone(), CompareOp::Equal, 0)])
                    .and_then([vec![put, TxnOp::get(entry.clone(), None)], first.clone()].concat())
                    .or_else([vec![TxnOp::get(entry.clone(), None)], first.clone()].concat());
                match self.txn(Operation::Acquire, true, txn).await {
                    Ok(resp) => {
                        let index = if resp.succeeded() { 1 } else { 0 };
                        if let Err(e) = queue.check(&resp, index + 1) {
                            cleanup.run().await;
                            return Err(e);
                        }
                        match txn_get(&resp, index).first() {
                            Some(kv) => break kv.create_revision(),
                            None => {
                                // Queue again after the backoff: whatever the server answers, no spin.
                                if !backoff(&mut failures).await {
                                    cleanup.run().await;
                                    return Err(not_acquired(attempts));
                                }
                                continue 'session;
                            }
                        }
                    }
                    // The session's lease died (etcd: "requested lease not found") before its
                    // keep-alive said so: nothing was written; queue again on a live session.
                    Err(e) if lease_gone(&e) => {
                        if backoff(&mut failures).await {
                            continue 'session;
                        }
                        return Err(e);
                    }
                    Err(e) if transient(&e) => {
                        if session.0.dead.is_cancelled() {
                            // Queue again after the backoff: whatever the server answers, no spin.
                            if !backoff(&mut failures).await {
                                cleanup.run().await;
                                return Err(not_acquired(attempts));
                            }
                            continue 'session;
                        }
                        if !backoff(&mut failures).await {
                            cleanup.run().await;
                            return Err(e);
                        }
                    }
                    Err(e) => return Err(e),
                }
            };
            // Wait until fewer than `allowed` blockers are ahead of ours.
            loop {
                attempts += 1;
                let ahead = GetOptions::new()
                    .with_prefix()
                    .with_sort(SortTarget::Create, SortOrder::Descend)
                    .with_max_create_revision(rev - 1)
                    .with_keys_only();
                // One blocker allowed: the nearest one is enough (watched alone, it goes
                // after the ones ahead of it are gone, or is replaced by one of them).
                let ahead = if queue.allowed == 1 {
                    ahead.with_limit(1)
                } else {
                    ahead
                };
                let txn = Txn::new().and_then([
                    TxnOp::get(entry.clone(), None),
                    TxnOp::get(queue.blockers.clone(), Some(ahead)),
                ]);
                let resp = match self.txn(Operation::Acquire, false, txn).await {
                    Ok(resp) => resp,
                    Err(e) if transient(&e) => {
                        if session.0.dead.is_cancelled() {
                            // Queue again after the backoff: whatever the server answers, no spin.
                            if !backoff(&mut failures).await {
                                cleanup.run().await;
                                return Err(not_acquired(attempts));
                            }
                            continue 'session;
                        }
                        if !backoff(&mut failures).await {
                            cleanup.run().await;
                            return Err(e);
                        }
                        continue;
                    }
                    Err(e) => return Err(e),
                };
                let read_at = header_revision(&resp)?;
                let ours = txn_get(&resp, 0)
                    .first()
                    .is_some_and(|kv| kv.create_revision() == rev);
                if !ours {
                    // Our entry is gone (its lease expired, or someone deleted it): queue again.
                    tracing::debug!(
                        key,
                        "our queue entry vanished while waiting; queueing again"
                    );
                    // Queue again after the backoff: whatever the server answers, no spin.
                    if !backoff(&mut failures).await {
                        cleanup.run().await;
                        return Err(not_acquired(attempts));
                    }
                    continue 'session;
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
                match self
                    .watch_deletions(watch, read_at + 1, &session.0.dead, deadline)
                    .await
                {
                    Watched::Again => {}
                    Watched::SessionEnded => {
                        // Queue again after the backoff: whatever the server answers, no spin.
                        if !backoff(&mut failures).await {
                            cleanup.run().await;
                            return Err(not_acquired(attempts));
                        }
                        continue 'session;
                    }
                    Watched::Deadline => {
                        cleanup.run().await;
                        return Err(not_acquired(attempts));
                    }
                }
            }
            // Ours. An auto-extended lock stays on the session; any other moves onto a lease
            // of its own, guarded by our create revision (a put keeps it).
            let basis = if options.auto_extend_enabled() {
                Basis::Session(session)
            } else {
                let started = Instant::now();
                let (id, granted) = match self.grant(secs, Operation::Acquire).await {
                    Ok(g) => g,
                    Err(e) if transient(&e) => {
                        if backoff(&mut failures).await {
                            cleanup.run().await;
                            continue 'session;
                        }
                        cleanup.run().await;
                        return Err(e);
                    }
                    Err(e) => return Err(e),
                };
                cleanup.lease = Some(id);
                let txn = Txn::new()
                    .when([Compare::create_revision(
                        entry.clone(),
                        CompareOp::Equal,
                        rev,
                    )])
                    .and_then([TxnOp::put(
                        entry.clone(),
                        token.expose(),
                        Some(PutOptions::new().with_lease(id)),
                    )]);
                match self.txn(Operation::Acquire, true, txn).await {
                    Ok(resp) if resp.succeeded() => Basis::Dedicated {
                        id,
                        started,
                        granted,
                    },
                    Ok(_) => {
                        // Queue again after the backoff: whatever the server answers, no spin.
                        if !backoff(&mut failures).await {
                            cleanup.run().await;
                            return Err(not_acquired(attempts));
                        }
                        continue 'session;
                    }
                    Err(e) if transient(&e) => {
                        cleanup.run().await;
                        if backoff(&mut failures).await {
                            continue 'session;
                        }
                        return Err(e);
                    }
                    Err(e) => return Err(e),
                }
            };
            let min_hold = self.grant_min_hold(options).await?;
            match self.finish(queue.name, token, (entry, rev), basis, min_hold, options) {
                Ok(guard) => {
                    cleanup.disarm();
                    return Ok(guard);
                }
                // Granted too late to be a lease: given back, and queued again after the
                // backoff (a TTL that keeps expiring on arrival must not spin); at the deadline,
                // the reason.
                Err(e @ Error::ExpiredOnArrival { .. }) => {
                    cleanup.run().await;
                    if backoff(&mut failures).await {
                        continue 'session;
                    }
                    return Err(e);
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Waits until the deletions `watch` counts have happened at or after `from` (a
    /// revision), the session ends, or the deadline passes.
    async fn watch_deletions(
        &self,
        mut watch: Deletions,
        from: i64,
        session_dead: &CancellationToken,
        deadline: Instant,
    ) -> Watched {
        let mut watcher = self.inner.etcd.watch_client();
        let mut options = WatchOptions::new()
            .with_start_revision(from)
            .with_filters([WatchFilterType::NoPut]);
        if watch.prefix {
            options = options.with_prefix();
        }
        let opened = tokio::select! {
            r = tokio::time::timeout(self.inner.response_timeout, watcher.watch(watch.key.clone(), Some(options))) => r,
            _ = session_dead.cancelled() => return Watched::SessionEnded,
            _ = tokio::time::sleep_until(deadline.into()) => return Watched::Deadline,
        };
        let mut stream = match opened {
            Ok(Ok(stream)) => stream,
            _ => {
                // Look again after a pause (the read that follows bounds a broken etcd).
                tokio::time::sleep(Duration::from_millis(50)).await;
                return Watched::Again;
            }
        };
        loop {
            tokio::select! {
                message = stream.message() => match message {
                    Ok(Some(resp)) => {
                        if resp.canceled() {
                            return Watched::Again;
                        }
                        for event in resp.events() {
                            if event.event_type() == EventType::Delete
                                && let Some(kv) = event.kv()
                                && watch.deleted(kv.key())
                            {
                                return Watched::Again;
                            }
                        }
                    }
                    _ => {
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        return Watched::Again;
                    }
                },
                _ = session_dead.cancelled() => return Watched::SessionEnded,
                _ = tokio::time::sleep_until(deadline.into()) => return Watched::Deadline,
            }
        }
    }

    /// The guard of an acquisition whose entry is first, at revision `rev`.
    pub(super) fn finish(
        &self,
        key: &str,
        token: LockToken,
        (entry, rev): (Vec<u8>, i64),
        basis: Basis,
        min_hold: Option<MinHold>,
        options: &LockOptions,
    ) -> Result<LockGuard> {
        let fencing = options.fencing_enabled().then_some(rev as u64);
        // What the validity is counted from: the grant, or the session's last renewal.
        let since = match &basis {
            Basis::Session(session) => session.0.state().renewed_at,
            Basis::Dedicated { started, .. } => *started,
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
            Basis::Dedicated {
                id,
                started,
                granted,
            } => (
                Lease::new(key, token, fencing, started, granted),
                Arc::new(Mutex::new(Attach::Dedicated(id))),
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
        };
        Ok(LockGuard::new(Arc::new(held), lease))
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
