//! Held locks: a guard's release, and its extend, which moves the entry between leases; and
//! the token-checked release and extend of an entry by anyone who has its token.

use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use ec::{Compare, CompareOp, PutOptions, Txn, TxnOp};
use etcd_client as ec;
use futures_util::future::BoxFuture;

use crate::core::error::LossReason;
use crate::core::error::{Error, Operation, Result};
use crate::core::guard::HeldLock;
use crate::core::guard::{Lease, valid_until};
use crate::core::history::HistoryKind;
use crate::core::token::LockToken;

use super::client::EtcdClient;
use super::error::{lease_gone, session_lost, transient};
use super::history::{EtcdHistory, Rider};
use super::keys::ttl_secs;
use super::lock;
use super::session::{Attach, Session, SessionRef, Tracked};
use super::spare::OwnLease;

/// One lock held through an [`EtcdClient`], as its guard sees it.
pub(super) struct EtcdHeld {
    pub(super) client: EtcdClient,
    pub(super) entry: Vec<u8>,
    /// The entry's create revision (its fencing number).
    pub(super) rev: i64,
    pub(super) attach: Arc<Mutex<Attach>>,
    /// The lease of [`min_hold`](crate::LockOptions::min_hold), granted right after the lock
    /// was (so it ends no sooner than `min_hold` after the grant, by etcd's clock): a release
    /// moves the entry onto it instead of deleting it, while it lives.
    pub(super) min_hold: Option<MinHold>,
    /// Its acquisition put its history event in the same transaction: its release puts one too.
    pub(super) recorded: bool,
    /// The lease of its own it was put on (and the TTL asked for, in seconds), if any: left
    /// for the next lock once the release's delete is confirmed (`etcd::spare`).
    pub(super) own: Option<(i64, OwnLease)>,
}

/// The lease a [`min_hold`](crate::LockOptions::min_hold) release moves the entry onto.
#[derive(Debug, Clone, Copy)]
pub(super) struct MinHold {
    /// The etcd lease.
    pub(super) id: i64,
    /// When the hold is over by this client's clock, at the latest: the grant's reply plus the
    /// granted TTL and the drift allowance (barring an etcd restart or leader change, which
    /// only make the lease live longer, etcd has revoked it by then).
    pub(super) over_by: Instant,
}

impl std::fmt::Debug for EtcdHeld {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Not the entry: it contains the token.
        f.debug_struct("EtcdHeld")
            .field("revision", &self.rev)
            .field("attach", &*lock(&self.attach))
            .finish()
    }
}

impl HeldLock for EtcdHeld {
    fn release<'a>(&'a self, lease: &'a Lease) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move {
            let attach = lock(&self.attach).clone();
            // With min_hold, the session stays pinned until the move onto the hold's lease is
            // settled (the entry rides on its lease until then), so it does not retire and
            // revoke the lease, dropping the hold, meanwhile.
            let mut pin = None;
            if let Attach::Session(session) = &attach
                && let Some(session) = session.upgrade()
            {
                if self.min_hold.is_some() {
                    pin = Some(SessionRef::pin(&session));
                }
                session.unregister(self.rev);
            }
            let dedicated = match attach {
                Attach::Dedicated(id) => Some(id),
                Attach::Session(_) => None,
            };
            let kept = match self.min_hold {
                Some(hold) => match self.keep_for_min_hold(lease, hold.id).await {
                    Ok(kept) => kept,
                    Err(e) => {
                        // Never a delete while the hold may last: the move is repeated.
                        self.keep_in_background(lease, hold, dedicated, pin);
                        return Err(e);
                    }
                },
                None => false,
            };
            let released = if kept {
                Ok(ReleaseOutcome::Kept)
            } else {
                self.delete(lease).await
            };
            match released {
                Ok(resp) => {
                    match (dedicated, self.own) {
                        // Confirmed deleted, still on the lease it was put on: kept for reuse.
                        (Some(id), Some((secs, own)))
                            if own.id == id && matches!(resp, ReleaseOutcome::Deleted(true)) =>
                        {
                            self.client.spare_lease(secs, own)
                        }
                        (Some(id), _) => self.client.revoke_in_background(id),
                        (None, _) => {}
                    }
                    if !matches!(resp, ReleaseOutcome::Deleted(false)) {
                        Ok(())
                    } else {
                        Err(Error::NotHeld {
                            key: lease.key().to_string(),
                        })
                    }
                }
                Err(e) => {
                    // Not renewed any more; make sure it goes (its session deletes it if etcd
                    // does not confirm; on a lease of its own it dies with that lease).
                    self.client.remove_in_background(
                        self.entry.clone(),
                        lease.token().clone(),
                        dedicated,
                        attach.sessions(),
                    );
                    Err(e)
                }
            }
        })
    }

    /// Moves the entry onto the lease of `ttl` (see the [module docs](super)).
    ///
    /// **An ambiguous move** (no reply: etcd may have applied it, or may still) is resolved by
    /// sending the same transaction again until etcd answers, while the lock's validity lasts.
    /// The move is idempotent (`If(CreateRevision(entry) == rev) Then(Put(entry, lease))`
    /// keeps the revision, so applying it twice, or late, leaves the entry on the same lease):
    /// a success says the entry is on the new lease, a failed compare that the entry is gone.
    /// Guarantee, assuming nothing but this guard moves the entry and a move etcd never
    /// answered is not applied after a later move of the same entry was: **the lock is never
    /// believed held while its entry is on a lease that nobody keeps alive or that is
    /// revoked.** While
    /// unresolved, the entry rides on the old lease or the new one, we do not know which, so:
    /// * auto-extended: the lock is registered on neither session (no keep-alive raises its
    ///   validity), its validity drops to the sooner of both sessions' validities (and of the
    ///   extend's bound, which the guard set), and both sessions are pinned (neither retires
    ///   and revokes its lease while the entry may ride on it). If etcd does not answer within
    ///   the validity, or the future is dropped before the outcome is known, the lock is
    ///   declared lost and its entry deleted (token-checked, in the background);
    /// * a lease of its own: both leases expire on their own (neither is kept alive or revoked
    ///   while unresolved), and the guard's validity is at most the extend's bound, which is
    ///   within either; the move is repeated for one more response timeout at most, and if
    ///   still unresolved, the error is returned and nothing else changes.
    ///
    /// Before, an ambiguous move of an auto-extended lock put it back on the old session: if
    /// the move had been applied, the entry rode on the new session's lease, which had no lock
    /// and was revoked when that session went idle, while the old session's keep-alives kept
    /// the guard believing it held the lock (issue 22, finding 2). *Tests:* `etcd_backend.rs`:
    /// `an_ambiguous_move_never_leaves_a_deleted_lock_believed_held`,
    /// `an_unanswered_shortening_move_is_believed_no_longer_than_its_ttl`,
    /// `a_dropped_move_leaves_no_lock_believed_held`.
    fn records_history(&self) -> bool {
        self.recorded
    }

    fn extend<'a>(&'a self, lease: &'a Lease, ttl: Duration) -> BoxFuture<'a, Result<Instant>> {
        Box::pin(async move {
            let secs = ttl_secs(ttl)?;
            let not_held = || Error::NotHeld {
                key: lease.key().to_string(),
            };
            let attach = lock(&self.attach).clone();
            match attach {
                Attach::Session(old) => {
                    // Auto-extended: the lock moves to the session of the new TTL. A lock its
                    // session gave up (or that was found gone) is not revived.
                    let Some(old) = old.upgrade().filter(|o| !o.dead.is_cancelled()) else {
                        return Err(not_held());
                    };
                    if lease.loss_reason().is_some() {
                        return Err(not_held());
                    }
                    let target = self.client.checkout(secs, ttl / 3).await?;
                    if Arc::ptr_eq(&old, &target.0) {
                        let txn = Txn::new().when([
                            Compare::create_revision(
                                self.entry.clone(),
                                CompareOp::Equal,
                                self.rev,
                            ),
                            Compare::lease(self.entry.clone(), CompareOp::Equal, old.id),
                        ]);
                        let resp = self.client.txn(Operation::Extend, false, txn).await?;
                        return if resp.succeeded() {
                            Ok(old.valid_until())
                        } else {
                            Err(not_held())
                        };
                    }
                    // Pinned (before the lock leaves it, so it is never idle meanwhile) until
                    // the move is settled: the entry may ride on its lease until then.
                    let _old_pin = SessionRef::pin(&old);
                    let tracked = old.unregister(self.rev);
                    if tracked.is_none() && lease.loss_reason().is_some() {
                        // Declared lost by a check meanwhile: nothing to move.
                        return Err(not_held());
                    }
                    let stop_at = tracked.as_ref().and_then(|t| t.stop_at);
                    let txn = self.move_txn(lease, target.0.id, false);
                    // Registered on no session from here until settled: if this future is
                    // dropped meanwhile, the lock is declared lost and its entry deleted.
                    let mut unsettled = Unsettled {
                        held: self,
                        lease,
                        sessions: vec![Arc::downgrade(&old), Arc::downgrade(&target.0)],
                        armed: true,
                    };
                    let moved = match self.client.txn(Operation::Extend, true, txn.clone()).await {
                        Ok(resp) => resp.succeeded(),
                        Err(e) if e.is_ambiguous() => {
                            lease.lower_valid_until(old.valid_until().min(target.0.valid_until()));
                            match self.repeat_move(lease, Some(&target.0), None, &txn).await {
                                Some(moved) => moved,
                                None => {
                                    // `unsettled` declares it lost and deletes the entry.
                                    tracing::warn!(
                                        key = lease.key(),
                                        "an extend's lease move got no answer within the \
                                         lock's validity; the lock is lost"
                                    );
                                    return Err(e);
                                }
                            }
                        }
                        Err(e) => {
                            // Never applied: the entry is still on the old session's lease.
                            unsettled.armed = false;
                            if let Some(t) = tracked {
                                old.register(self.rev, t);
                            }
                            return Err(e);
                        }
                    };
                    unsettled.armed = false;
                    if !moved {
                        return Err(not_held());
                    }
                    *lock(&self.attach) = Attach::Session(Arc::downgrade(&target.0));
                    let t = Tracked {
                        entry: self.entry.clone(),
                        lease: lease.clone(),
                        secs,
                        stop_at,
                        ceiling: None,
                        attach: self.attach.clone(),
                    };
                    match target.0.register(self.rev, t) {
                        Some(until) => Ok(until),
                        None => {
                            // The target session ended (its keep-alives failed): its lease,
                            // and the entry with it, may be gone already.
                            lease.mark_lost(LossReason::Expired);
                            Err(session_lost(Operation::Extend))
                        }
                    }
                }
                Attach::Dedicated(old_id) => {
                    let started = Instant::now();
                    let (id, granted) = self.client.grant(secs, Operation::Extend).await?;
                    let txn = self.move_txn(lease, id, false);
                    let moved = match self.client.txn(Operation::Extend, true, txn.clone()).await {
                        Ok(resp) => resp.succeeded(),
                        // Neither lease is revoked while the entry may ride on it.
                        Err(e) if e.is_ambiguous() => {
                            // Nothing needs settling here, so the call does not wait
                            // longer than for one more reply.
                            let give_up = Instant::now() + self.client.inner.response_timeout;
                            match self.repeat_move(lease, None, Some(give_up), &txn).await {
                                Some(moved) => moved,
                                None => return Err(e),
                            }
                        }
                        Err(e) => {
                            self.client.revoke_in_background(id);
                            return Err(e);
                        }
                    };
                    if !moved {
                        self.client.revoke_in_background(id);
                        return Err(not_held());
                    }
                    *lock(&self.attach) = Attach::Dedicated(id);
                    self.client.revoke_in_background(old_id);
                    Ok(valid_until(started, granted))
                }
            }
        })
    }
}

/// Pause between the repeats of an ambiguous lease move.
const REPEAT_PAUSE: Duration = Duration::from_millis(100);

/// How a release went: the entry was moved onto the min_hold lease, or the delete's
/// compare succeeded (or not: the lock was no longer ours).
enum ReleaseOutcome {
    Kept,
    Deleted(bool),
}

impl EtcdHeld {
    /// Moves the entry onto the min_hold lease `id` (`If(CreateRevision(entry) == rev)
    /// Then(Put(entry, token, lease id))`): true if moved (the lock is kept until that lease
    /// ends), false if the lease is gone (the minimum hold is over: release as usual) or the
    /// compare failed (the delete that follows then says not held).
    async fn keep_for_min_hold(&self, lease: &Lease, id: i64) -> Result<bool> {
        match self
            .client
            .txn(Operation::Release, true, self.move_txn(lease, id, true))
            .await
        {
            Ok(resp) => Ok(resp.succeeded()),
            Err(e) if hold_is_over(&e) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// The move of the entry onto lease `id`, guarded by its create revision (a put keeps
    /// it, so the move is idempotent and never touches a later holder's entry). `kept`: the
    /// move of a `min_hold` release, which stores `KEPT_PREFIX` + token, a value no extend or
    /// release by token matches, so a renewal that comes after the release cannot move the
    /// kept entry again (finding L2 of the 2026-12-02 review).
    fn move_txn(&self, lease: &Lease, id: i64, kept: bool) -> Txn {
        let value = match kept {
            true => format!(
                "{}{}",
                crate::core::listing::KEPT_PREFIX,
                lease.token().expose()
            ),
            false => lease.token().expose().to_string(),
        };
        Txn::new()
            .when([Compare::create_revision(
                self.entry.clone(),
                CompareOp::Equal,
                self.rev,
            )])
            .and_then([TxnOp::put(
                self.entry.clone(),
                value,
                Some(PutOptions::new().with_lease(id)),
            )])
    }

    /// The release's delete, guarded by the entry's create revision, with its history event
    /// if the acquisition put one.
    async fn delete(&self, lease: &Lease) -> Result<ReleaseOutcome> {
        let ours = Compare::create_revision(self.entry.clone(), CompareOp::Equal, self.rev);
        let delete = TxnOp::delete(self.entry.clone(), None);
        let log = self.client.history.as_deref().filter(|_| self.recorded);
        let event = match log {
            Some(log) => {
                let event = crate::core::guard::lease_event(lease, HistoryKind::Released);
                log.rider(lease.key(), &event, false)
                    .await
                    .ok()
                    .map(|rider| (log, rider))
            }
            None => None,
        };
        self.client
            .txn_with_event(Operation::Release, ours, vec![delete], event)
            .await
            .map(|(r, _)| ReleaseOutcome::Deleted(r.succeeded()))
    }

    /// A `min_hold` release whose move onto the hold's lease got no answer (or an error):
    /// the move is repeated in the background until etcd answers, never replaced by a delete
    /// while the hold may last (issue 30, finding F3: the delete freed the key at once, so a
    /// second machine's run within `min_hold` ran the job again). Until the move is answered
    /// the entry stays where it was: on a lease of its own (not kept alive: it expires with
    /// it) or on its session's, which `pin` keeps from retiring. Once etcd answers: moved
    /// (the hold holds; a lease of its own is revoked), gone (nothing to do), or "lease not
    /// found" (the hold is over: deleted as by a plain release). If etcd has not answered by
    /// the time the hold is over by this client's clock ([`MinHold::over_by`]), the entry is
    /// deleted as by a plain release (an orphan of its session if etcd does not confirm).
    /// *Test:* `etcd_backend.rs`: `a_min_hold_release_etcd_did_not_answer_keeps_the_hold`.
    fn keep_in_background(
        &self,
        lease: &Lease,
        hold: MinHold,
        dedicated: Option<i64>,
        pin: Option<SessionRef>,
    ) {
        let client = self.client.clone();
        let entry = self.entry.clone();
        let token = lease.token().clone();
        let txn = self.move_txn(lease, hold.id, true);
        tokio::spawn(async move {
            let sessions: Vec<Weak<Session>> = pin.iter().map(|p| Arc::downgrade(&p.0)).collect();
            let mut attempt = 0u32;
            let hold_over = loop {
                if Instant::now() >= hold.over_by {
                    break true;
                }
                match client.txn(Operation::Release, true, txn.clone()).await {
                    // Moved (the hold holds), or the entry is gone.
                    Ok(_) => break false,
                    Err(e) if hold_is_over(&e) => break true,
                    Err(e) => {
                        tracing::debug!(error = %e, "repeating a min_hold release's lease move");
                        tokio::time::sleep(REPEAT_PAUSE * (1 << attempt.min(4))).await;
                        attempt += 1;
                    }
                }
            };
            if hold_over {
                client.remove_in_background(entry, token, dedicated, sessions);
            } else if let Some(id) = dedicated {
                client.revoke_in_background(id);
            }
            drop(pin);
        });
    }

    /// Sends `txn` (an idempotent lease move, see [`HeldLock::extend`]) again until etcd
    /// answers: `Some(true)` moved, `Some(false)` the entry is not ours any more. `None` if
    /// the lock's validity ran out (or `give_up` passed, or `target`, the session the entry
    /// moves to, ended, or etcd refused the request) first: the outcome is still unknown.
    async fn repeat_move(
        &self,
        lease: &Lease,
        target: Option<&Session>,
        give_up: Option<Instant>,
        txn: &Txn,
    ) -> Option<bool> {
        loop {
            let now = Instant::now();
            if now >= lease.valid_until()
                || give_up.is_some_and(|g| now >= g)
                || target.is_some_and(|t| t.dead.is_cancelled())
            {
                return None;
            }
            match self.client.txn(Operation::Extend, true, txn.clone()).await {
                Ok(resp) => return Some(resp.succeeded()),
                Err(e) if transient(&e) => {
                    tracing::debug!(error = %e, "repeating an ambiguous etcd lease move");
                    tokio::time::sleep(REPEAT_PAUSE).await;
                }
                // E.g. the target lease is gone: then the entry went with it if the first
                // move was applied, and is on the old lease if not.
                Err(_) => return None,
            }
        }
    }
}

/// Whether etcd refused a move onto the min_hold lease because that lease is gone: it
/// refuses a put on a lease that expired, so the minimum hold is over.
fn hold_is_over(e: &Error) -> bool {
    e.to_string().contains("lease not found")
}

/// An auto-extended lock being moved between sessions, registered on neither: unless
/// disarmed (the move settled), dropping it declares the lock lost and deletes its entry
/// (token-checked, in the background), since neither session keeps it alive any more.
struct Unsettled<'a> {
    held: &'a EtcdHeld,
    lease: &'a Lease,
    /// The two sessions the entry may ride on (it is handed to both if its delete fails).
    sessions: Vec<Weak<Session>>,
    armed: bool,
}

impl Drop for Unsettled<'_> {
    fn drop(&mut self) {
        if self.armed {
            self.lease.mark_lost(LossReason::Expired);
            self.held.client.remove_in_background(
                self.held.entry.clone(),
                self.lease.token().clone(),
                None,
                std::mem::take(&mut self.sessions),
            );
        }
    }
}

impl EtcdClient {
    /// Deletes `entry` if it stores `token`: one transaction,
    /// `If(Value(entry) == token) Then(Delete(entry))`. Needs no state from the acquiring
    /// process; `name` is what an error names.
    ///
    /// # Errors
    /// [`Error::NotHeld`] if there is no such entry; connection and server errors.
    pub(super) async fn release_entry(
        &self,
        name: &str,
        entry: Vec<u8>,
        token: &LockToken,
        event: Option<(&EtcdHistory, Rider)>,
    ) -> Result<()> {
        let ours = Compare::value(entry.clone(), CompareOp::Equal, token.expose());
        let delete = TxnOp::delete(entry, None);
        let (resp, _) = self
            .txn_with_event(Operation::Release, ours, vec![delete], event)
            .await?;
        if resp.succeeded() {
            Ok(())
        } else {
            Err(Error::NotHeld {
                key: name.to_string(),
            })
        }
    }

    /// `If(when) Then(ops)`, with `event`'s operations after `ops`: see
    /// [`EtcdClient::txn_riding`].
    pub(super) async fn txn_with_event(
        &self,
        op: Operation,
        when: Compare,
        ops: Vec<TxnOp>,
        event: Option<(&EtcdHistory, Rider)>,
    ) -> Result<(ec::TxnResponse, bool)> {
        let count_at = ops.len() + 1;
        let build = |extra: &[TxnOp]| {
            let all = [ops.clone(), extra.to_vec()].concat();
            Txn::new().when([when.clone()]).and_then(all)
        };
        self.txn_riding(op, build, count_at, event).await
    }

    /// The transaction `build` makes, given `event`'s operations to put last in its success
    /// branch (where the count's reply is at `count_at`); trimmed after, if over the cap. A
    /// refusal that may be the event's (its lease gone) sends the transaction again without
    /// it: etcd applied nothing of a refused transaction, and a lock operation never fails
    /// for its history. Answers the reply, and whether the event went with it.
    pub(super) async fn txn_riding(
        &self,
        op: Operation,
        build: impl Fn(&[TxnOp]) -> Txn,
        count_at: usize,
        event: Option<(&EtcdHistory, Rider)>,
    ) -> Result<(ec::TxnResponse, bool)> {
        let Some((log, rider)) = event else {
            return Ok((self.txn(op, true, build(&[])).await?, false));
        };
        match self.txn(op, true, build(&rider.ops)).await {
            Ok(resp) => {
                if resp.succeeded() {
                    rider.after(log, &resp, count_at);
                }
                Ok((resp, true))
            }
            Err(e) if lease_gone(&e) => {
                log.forget_lease();
                Ok((self.txn(op, true, build(&[])).await?, false))
            }
            Err(e) => Err(e),
        }
    }

    /// Moves `entry`, if it stores `token`, onto a fresh lease of `ttl` (rounded up to whole
    /// seconds): a lease grant, then `If(Value(entry) == token) Then(Put(entry, lease))`. The
    /// entry keeps its create revision (fencing number and place). The old lease is left to
    /// expire (it may be a session lease other entries share).
    ///
    /// # Errors
    /// [`Error::NotHeld`] if there is no such entry; [`Error::InvalidArgument`] for a bad TTL;
    /// connection and server errors.
    pub(super) async fn extend_entry(
        &self,
        name: &str,
        entry: Vec<u8>,
        token: &LockToken,
        ttl: Duration,
    ) -> Result<()> {
        let secs = ttl_secs(ttl)?;
        let (id, _) = self.grant(secs, Operation::Extend).await?;
        let txn = Txn::new()
            .when([Compare::value(
                entry.clone(),
                CompareOp::Equal,
                token.expose(),
            )])
            .and_then([TxnOp::put(
                entry,
                token.expose(),
                Some(PutOptions::new().with_lease(id)),
            )]);
        // No reply (`?`): the entry may ride on the new lease, so it is not revoked (it
        // expires on its own); the caller holds no validity to lower.
        let resp = self.txn(Operation::Extend, true, txn).await?;
        if resp.succeeded() {
            Ok(())
        } else {
            self.revoke_in_background(id);
            Err(Error::NotHeld {
                key: name.to_string(),
            })
        }
    }
}
