//! Acquiring: the wait in the queue (enqueue, watch the entry ahead, again), the cleanup of
//! an abandoned entry, and the guard of an entry that came first.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ec::{
    Compare, CompareOp, EventType, GetOptions, PutOptions, SortOrder, SortTarget, Txn, TxnOp,
    WatchFilterType, WatchOptions,
};
use etcd_client as ec;
use tokio_util::sync::CancellationToken;

use crate::core::error::{Error, Operation, Result};
use crate::core::guard::{Lease, LockGuard};
use crate::core::options::LockOptions;
use crate::core::token::LockToken;

use super::client::EtcdClient;
use super::error::{lease_gone, session_lost, transient};
use super::held::EtcdHeld;
use super::keys::{check_key, entry_key, queue_prefix, ttl_secs};
use super::lock;
use super::request::{header_revision, txn_get};
use super::session::{Attach, SessionRef, Tracked};

/// Deletes the entry of an acquisition whose outcome is unknown or abandoned (the future was
/// dropped, the reply was lost, the deadline passed), token-checked, in the background.
pub(super) struct Cleanup {
    client: EtcdClient,
    entry: Vec<u8>,
    token: LockToken,
    /// A lease of the entry's own, revoked too.
    lease: Option<i64>,
    armed: bool,
}

impl Cleanup {
    pub(super) fn new(
        client: &EtcdClient,
        entry: &[u8],
        token: &LockToken,
        lease: Option<i64>,
    ) -> Self {
        Cleanup {
            client: client.clone(),
            entry: entry.to_vec(),
            token: token.clone(),
            lease,
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
            Err(_) => {
                self.client
                    .remove_in_background(self.entry.clone(), self.token.clone(), self.lease)
            }
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

    pub(super) async fn acquire_queued(
        &self,
        key: &str,
        options: &LockOptions,
        secs: i64,
        wait: Duration,
    ) -> Result<LockGuard> {
        let begun = Instant::now();
        let deadline = begun + wait;
        let prefix = queue_prefix(key);
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
            let token = LockToken::random();
            let entry = entry_key(key, &token);
            let mut cleanup = Cleanup::new(self, &entry, &token, None);
            // Enqueue. Repeatable: a retry after an ambiguous failure finds the entry.
            let rev = loop {
                let txn = Txn::new()
                    .when([Compare::create_revision(entry.clone(), CompareOp::Equal, 0)])
                    .and_then([
                        TxnOp::put(
                            entry.clone(),
                            token.expose(),
                            Some(PutOptions::new().with_lease(session.0.id)),
                        ),
                        TxnOp::get(entry.clone(), None),
                    ])
                    .or_else([TxnOp::get(entry.clone(), None)]);
                match self.txn(Operation::Acquire, true, txn).await {
                    Ok(resp) => {
                        let index = if resp.succeeded() { 1 } else { 0 };
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
            // Wait until no entry is ahead of ours.
            loop {
                attempts += 1;
                let ahead = GetOptions::new()
                    .with_prefix()
                    .with_sort(SortTarget::Create, SortOrder::Descend)
                    .with_max_create_revision(rev - 1)
                    .with_limit(1)
                    .with_keys_only();
                let txn = Txn::new().and_then([
                    TxnOp::get(entry.clone(), None),
                    TxnOp::get(prefix.clone(), Some(ahead)),
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
                let Some(ahead) = txn_get(&resp, 1).into_iter().next() else {
                    break;
                };
                match self
                    .watch_deletion(ahead.key(), read_at + 1, &session.0.dead, deadline)
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
            match self.finish(key, token, (entry, rev), basis, min_hold, options) {
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

    /// Waits until `key` is deleted at or after `from` (a revision), the session ends, or the
    /// deadline passes.
    async fn watch_deletion(
        &self,
        key: &[u8],
        from: i64,
        session_dead: &CancellationToken,
        deadline: Instant,
    ) -> Watched {
        let mut watcher = self.inner.etcd.watch_client();
        let options = WatchOptions::new()
            .with_start_revision(from)
            .with_filters([WatchFilterType::NoPut]);
        let opened = tokio::select! {
            r = tokio::time::timeout(self.inner.response_timeout, watcher.watch(key.to_vec(), Some(options))) => r,
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
                        if resp.canceled()
                            || resp.events().iter().any(|e| e.event_type() == EventType::Delete)
                        {
                            return Watched::Again;
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
        min_hold: Option<i64>,
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
    pub(super) async fn grant_min_hold(&self, options: &LockOptions) -> Result<Option<i64>> {
        let Some(min_hold) = options.min_hold_bound() else {
            return Ok(None);
        };
        let secs = min_hold.as_secs() + u64::from(min_hold.subsec_nanos() > 0);
        let (id, _) = self.grant(secs as i64, Operation::Acquire).await?;
        Ok(Some(id))
    }
}
