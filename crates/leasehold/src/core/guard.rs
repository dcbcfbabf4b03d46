//! The holder's side of a lock: [`LockGuard`] (owns the release) and [`Lease`] (a shareable view
//! of the key, token, fencing token and validity).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use futures_util::future::BoxFuture;
use tokio_util::sync::CancellationToken;

use crate::core::error::{Error, LossReason, Result};
use crate::core::fence::Fence;
use crate::core::history::{HistoryEvent, HistoryKind, HistoryLog};
use crate::core::token::LockToken;

/// Safety margin for the holder's local view of its lease: the server's clock may run slightly
/// faster than ours, and expiry has millisecond precision, so we count the lease as over a little
/// early (`ttl / 100 + 2 ms`, the Redlock paper's drift allowance).
pub fn clock_drift(ttl: Duration) -> Duration {
    ttl / 100 + Duration::from_millis(2)
}

/// A view of a held lock that can be cloned into the work it protects.
///
/// `valid_until` is computed from a monotonic instant taken *before* the acquiring (or
/// extending) command was sent, minus [`clock_drift`]; the server's expiry is later than that,
/// so while `is_held()` says true the key has not yet expired on the server (assuming its clock
/// does not run more than 1% fast). It is a local belief: it cannot see the key being deleted or
/// overwritten from outside, or lost in a failover; fencing is what protects against that.
#[derive(Clone, Debug)]
pub struct Lease {
    state: Arc<LeaseState>,
}

#[derive(Debug)]
struct LeaseState {
    key: String,
    token: LockToken,
    fencing: Option<u64>,
    validity: Mutex<Validity>,
    /// Released (or handed off): no longer ours by our own choice.
    ended: AtomicBool,
    /// Fired when the lease is lost (never on a normal release).
    lost: CancellationToken,
    reason: OnceLock<LossReason>,
}

/// The holder's belief about its lease, and the extends whose outcome can still change the key.
///
/// **Rule (every backend).** An extend is recorded when it is *sent*, with its bound
/// `sent + life` (`life = ttl - drift`): the server sets the new TTL no earlier than `sent`, so
/// if the extend is applied at all, the key lives at least until that bound. Until its outcome
/// is known the command may be applied at any moment (also late, after a timeout or a lost
/// reply), so on sending, the validity drops to `min(valid_until, bound)`: a shortening extend
/// with an unknown outcome never leaves a longer belief standing, and nothing but a success
/// reply raises the validity.
///
/// A success reply for extend `c` raises the validity to its bound, but no higher than
/// `max(sent_s, sent_c) + life_s` for every other extend `s` still pending (`life = ttl -
/// drift`): `s` may be applied after `c` (sent after it, or an older send *re-sent* by the
/// client: the `idempotent` retry after a dropped connection, redis-rs Cluster re-sending a
/// timed-out request), and then it is applied no earlier than `c` was sent and no earlier than
/// itself was sent, so the key lives at least that long. Sends are ordered by a sequence
/// number, not by clock readings that can be equal. A success for an extend older than the
/// newest confirmed one raises nothing.
///
/// Every extend, a confirmed one too, stays pending until the call that sent it has returned
/// (a re-send may still come) **and** its own bound has passed (a copy may still be applied
/// until then). When one is forgotten, what it says is folded into the `cap` of every extend
/// whose call still runs, so their success is still bounded by it. (Both are the model
/// checker's counterexamples to rules that forgot an extend at its answer, or at its bound:
/// `docs/model-checking.md`.) Settled extends beyond [`MAX_PENDING`] are merged, conservatively.
///
/// **Assumption:** once the call that sent an extend has returned, no copy of it is applied
/// after its own bound (`ttl` after it was sent): a copy held up longer than that (a server
/// paused with the command in its input buffer for longer than the TTL) is beyond any
/// client-side rule.
///
/// Tested by the unit tests below, by `redis/client/release.rs::a_resent_extend_applied_after_a_renewal_caps_validity`
/// and `renewal.rs::an_extend_with_an_unknown_outcome_never_raises_validity`, and by the
/// extend model in `crates/leasehold-model`.
#[derive(Debug)]
struct Validity {
    until: Instant,
    /// Extends whose outcome can still change the key (see the rule above).
    pending: Vec<PendingExtend>,
    /// The sequence number of the last extend sent.
    sent: u64,
    /// The sequence number of the newest extend confirmed (0: none).
    confirmed: u64,
}

/// How many extends [`Validity::pending`] keeps before it merges the oldest settled ones (a
/// renewer with a tiny `renew_every` sends many within one TTL).
const MAX_PENDING: usize = 32;

/// One extend in [`Validity::pending`].
#[derive(Debug, Clone, Copy)]
struct PendingExtend {
    seq: u64,
    /// When it was recorded (before it left).
    sent: Instant,
    /// Its bound minus `sent`: how long the key lives at least once it is applied.
    life: Duration,
    /// The call that sent it has returned (with a success or not): no re-send comes any more.
    settled: bool,
    /// Kept until then once settled: its bound (or the latest bound of those merged into it).
    keep_until: Instant,
    /// What extends forgotten while this one's call ran say about the key, if applied after
    /// this one (see [`Validity`]).
    cap: Option<Instant>,
}

impl PendingExtend {
    /// The least the key lives if `self` is applied after an extend sent at `sent`.
    fn cap_after(&self, sent: Instant) -> Instant {
        self.sent.max(sent) + self.life
    }
}

impl Validity {
    /// Forgets settled extends past their bound (by the assumption above, no copy of them is
    /// applied any more), folding what each says into the caps of the extends still running.
    fn prune(&mut self, now: Instant) {
        while let Some(at) = self
            .pending
            .iter()
            .position(|p| p.settled && p.keep_until <= now)
        {
            let gone = self.pending.swap_remove(at);
            for c in self.pending.iter_mut().filter(|c| !c.settled) {
                let cap = gone.cap_after(c.sent);
                c.cap = Some(c.cap.map_or(cap, |old| old.min(cap)));
            }
        }
    }

    /// Merges settled extends while there are more than [`MAX_PENDING`]: the earlier send and
    /// the shorter life bound every cap either gave, kept until the later of their bounds. Two
    /// of the same life (a renewer's) merge first, which costs nothing; else the two oldest.
    fn compact(&mut self) {
        while self.pending.len() > MAX_PENDING {
            let mut settled: Vec<usize> = (0..self.pending.len())
                .filter(|&i| self.pending[i].settled)
                .collect();
            if settled.len() < 2 {
                return;
            }
            settled.sort_by_key(|&i| self.pending[i].seq);
            let same_life = settled.iter().enumerate().find_map(|(n, &i)| {
                settled[n + 1..]
                    .iter()
                    .find(|&&j| self.pending[j].life == self.pending[i].life)
                    .map(|&j| (i, j))
            });
            let (a, b) = same_life.unwrap_or((settled[0], settled[1]));
            let other = self.pending[b];
            let kept = &mut self.pending[a];
            kept.sent = kept.sent.min(other.sent);
            kept.life = kept.life.min(other.life);
            kept.keep_until = kept.keep_until.max(other.keep_until);
            self.pending.swap_remove(b);
        }
    }
}

/// An extend recorded as sent ([`Lease::extend_sent`]). [`SentExtend::confirm`] it with the
/// bound its success reply gives; drop it when the call returned without a success (an unknown
/// outcome or a refusal): it then stays pending until its own bound has passed (see
/// [`Validity`]), and a dropped future settles it too.
#[derive(Debug)]
#[must_use = "confirm it on success; dropping it says the call returned without one"]
pub(crate) struct SentExtend {
    lease: Lease,
    seq: u64,
    confirmed: bool,
}

impl SentExtend {
    /// The extend succeeded: the key lives until at least `bound` (its bound from
    /// [`Lease::extend_sent`], or a lower one the backend computed).
    pub(crate) fn confirm(mut self, bound: Instant) {
        self.confirmed = true;
        self.lease.extend_confirmed(self.seq, bound);
    }
}

impl Drop for SentExtend {
    fn drop(&mut self) {
        if !self.confirmed {
            self.lease.extend_settled(self.seq);
        }
    }
}

impl Lease {
    pub(crate) fn new(
        key: &str,
        token: LockToken,
        fencing: Option<u64>,
        started: Instant,
        ttl: Duration,
    ) -> Self {
        Self::until(
            key,
            token,
            fencing,
            started + ttl.saturating_sub(clock_drift(ttl)),
        )
    }

    /// A lease valid until `valid_until` (already net of the clock drift).
    pub(crate) fn until(
        key: &str,
        token: LockToken,
        fencing: Option<u64>,
        valid_until: Instant,
    ) -> Self {
        Lease {
            state: Arc::new(LeaseState {
                key: key.to_string(),
                token,
                fencing,
                validity: Mutex::new(Validity {
                    until: valid_until,
                    pending: Vec::new(),
                    sent: 0,
                    confirmed: 0,
                }),
                ended: AtomicBool::new(false),
                lost: CancellationToken::new(),
                reason: OnceLock::new(),
            }),
        }
    }

    /// The lock key.
    pub fn key(&self) -> &str {
        &self.state.key
    }

    /// The token stored in the key (a capability: see [`LockToken`]).
    pub fn token(&self) -> &LockToken {
        &self.state.token
    }

    /// The fencing number issued with this acquisition, if fencing was on.
    pub fn fencing_token(&self) -> Option<u64> {
        self.state.fencing
    }

    /// What to present to a fenced resource: the fencing number and our token, if fencing was
    /// on.
    pub fn fence(&self) -> Option<Fence> {
        self.state
            .fencing
            .map(|n| Fence::new(n, self.state.token.clone()))
    }

    /// Until when the lock is certainly still ours, unless something outside deleted it.
    pub fn valid_until(&self) -> Instant {
        self.validity().until
    }

    fn validity(&self) -> std::sync::MutexGuard<'_, Validity> {
        self.state
            .validity
            .lock()
            .unwrap_or_else(|p| p.into_inner())
    }

    /// How much of the validity is left (zero once it is over).
    pub fn remaining(&self) -> Duration {
        self.valid_until().saturating_duration_since(Instant::now())
    }

    /// True until the lock is released, found lost, or its validity runs out.
    pub fn is_held(&self) -> bool {
        !self.is_ended() && !self.state.lost.is_cancelled() && Instant::now() < self.valid_until()
    }

    /// Resolves when the lease is lost: a renewal (or an explicit extend) found the key gone or
    /// taken over, or the validity deadline passed without a successful renewal. Never resolves
    /// after a normal release. Cancel-safe; any number of tasks may wait on it.
    pub async fn lost(&self) {
        loop {
            let until = self.valid_until();
            tokio::select! {
                _ = self.state.lost.cancelled() => return,
                _ = tokio::time::sleep_until(until.into()) => {
                    if self.is_ended() {
                        return std::future::pending().await;
                    }
                    // The deadline may have moved meanwhile (a renewal landed): wait again.
                    if Instant::now() >= self.valid_until() {
                        self.mark_lost(LossReason::Expired);
                        return;
                    }
                }
            }
        }
    }

    /// A token cancelled when the lease is lost, for code that composes with `tokio_util`.
    /// It is cancelled by the renewer of an auto-extended lease, by an extend or release that
    /// finds the lock gone, and by [`Lease::lost`] noticing the validity ran out.
    pub fn lost_token(&self) -> CancellationToken {
        self.state.lost.clone()
    }

    /// Why the lease was lost, if it was.
    pub fn loss_reason(&self) -> Option<LossReason> {
        self.state.reason.get().copied()
    }

    /// Declares the lease lost (first reason wins). Returns true the first time. Ignored after a
    /// normal release.
    pub(crate) fn mark_lost(&self, reason: LossReason) -> bool {
        if self.is_ended() || self.state.reason.set(reason).is_err() {
            return false;
        }
        tracing::warn!(key = self.key(), %reason, "lock lost");
        crate::core::metrics::lost(reason);
        self.state.lost.cancel();
        true
    }

    pub(crate) fn is_ended(&self) -> bool {
        self.state.ended.load(Ordering::Acquire)
    }

    /// Records an extend about to be sent whose success would make the key live at least
    /// until `bound` (`sent + ttl - drift`, `sent` taken before the command leaves), lowering
    /// the validity to that bound (see [`Validity`]). Confirm the returned [`SentExtend`] on
    /// success; drop it otherwise.
    pub(crate) fn extend_sent(&self, sent: Instant, bound: Instant) -> SentExtend {
        let mut v = self.validity();
        v.prune(Instant::now());
        v.sent += 1;
        let seq = v.sent;
        v.pending.push(PendingExtend {
            seq,
            sent,
            life: bound.saturating_duration_since(sent),
            settled: false,
            keep_until: bound,
            cap: None,
        });
        v.compact();
        v.until = v.until.min(bound);
        SentExtend {
            lease: self.clone(),
            seq,
            confirmed: false,
        }
    }

    /// The extend `seq` succeeded with `bound`: the validity rises to the lowest of `bound`,
    /// its cap and every other pending extend's cap after it (see [`Validity`]), never falls.
    fn extend_confirmed(&self, seq: u64, bound: Instant) {
        let mut v = self.validity();
        v.prune(Instant::now());
        let Some(at) = v.pending.iter().position(|p| p.seq == seq) else {
            return;
        };
        v.pending[at].settled = true;
        if seq < v.confirmed {
            // A later extend was confirmed already: this one can raise nothing more.
            return;
        }
        let this = v.pending[at];
        let cap = v
            .pending
            .iter()
            .filter(|s| s.seq != seq)
            .map(|s| s.cap_after(this.sent))
            .chain(this.cap)
            .fold(bound, Instant::min);
        if cap > v.until {
            v.until = cap;
        }
        v.confirmed = seq;
    }

    /// The call that sent extend `seq` returned without a success: it is kept until its bound
    /// has passed (see [`Validity`]).
    fn extend_settled(&self, seq: u64) {
        let mut v = self.validity();
        if let Some(p) = v.pending.iter_mut().find(|p| p.seq == seq) {
            p.settled = true;
        }
        v.prune(Instant::now());
    }

    /// A keep-alive sent at `sent` with `ttl` succeeded, for a renewer that always sends the
    /// same TTL and reports its replies in the order it sent them (etcd's session).
    #[cfg_attr(not(feature = "etcd"), allow(dead_code))]
    pub(crate) fn renewed(&self, sent: Instant, ttl: Duration) {
        let bound = sent + ttl.saturating_sub(clock_drift(ttl));
        self.extend_sent(sent, bound).confirm(bound);
    }

    /// Moves the validity to `until` if that is later (a handoff's reply confirmed a lease
    /// given early).
    pub(crate) fn raise_valid_until(&self, until: Instant) {
        let mut v = self.validity();
        if until > v.until {
            v.until = until;
        }
    }

    /// Lowers the validity to `until` if that is sooner, never raising it (etcd: while a lock's
    /// entry may ride on either of two leases, it is believed no longer than the sooner keeps it).
    #[cfg_attr(not(feature = "etcd"), allow(dead_code))]
    pub(crate) fn lower_valid_until(&self, until: Instant) {
        let mut v = self.validity();
        v.until = v.until.min(until);
    }

    /// Sets the validity to that of the keep-alive the lease now rides on (etcd: a session's
    /// lease, when a lock joins it).
    #[cfg_attr(not(feature = "etcd"), allow(dead_code))]
    pub(crate) fn set_valid_until(&self, until: Instant) {
        self.validity().until = until;
    }

    pub(crate) fn end(&self) {
        self.state.ended.store(true, Ordering::Release);
    }
}

/// A held lock. Release it with [`LockGuard::release`]; a guard dropped unreleased releases the
/// lock in the background (and logs a warning), so a forgotten guard costs a round trip, not a
/// whole TTL of blocked waiters.
#[derive(Debug)]
#[must_use = "dropping the guard releases the lock"]
pub struct LockGuard {
    held: Arc<dyn HeldLock>,
    lease: Lease,
    done: bool,
    /// When the guard was made, for the hold-time metric (`None` without the feature).
    since: Option<Instant>,
    /// Where its release and loss are recorded, when the locker records history.
    history: Option<Recording>,
}

impl LockGuard {
    pub(crate) fn new(held: Arc<dyn HeldLock>, lease: Lease) -> Self {
        LockGuard {
            held,
            lease,
            done: false,
            since: crate::core::metrics::start(),
            history: None,
        }
    }

    /// The shareable view of this lock.
    pub fn lease(&self) -> &Lease {
        &self.lease
    }

    /// The lock key.
    pub fn key(&self) -> &str {
        self.lease.key()
    }

    /// The token stored in the key.
    pub fn token(&self) -> &LockToken {
        self.lease.token()
    }

    /// The fencing number issued with this acquisition, if fencing was on.
    pub fn fencing_token(&self) -> Option<u64> {
        self.lease.fencing_token()
    }

    /// See [`Lease::fence`].
    pub fn fence(&self) -> Option<Fence> {
        self.lease.fence()
    }

    /// See [`Lease::valid_until`].
    pub fn valid_until(&self) -> Instant {
        self.lease.valid_until()
    }

    /// See [`Lease::is_held`].
    pub fn is_held(&self) -> bool {
        self.lease.is_held()
    }

    /// See [`Lease::lost`].
    pub async fn lost(&self) {
        self.lease.lost().await
    }

    /// See [`Lease::lost_token`].
    pub fn lost_token(&self) -> CancellationToken {
        self.lease.lost_token()
    }

    /// See [`Lease::loss_reason`].
    pub fn loss_reason(&self) -> Option<LossReason> {
        self.lease.loss_reason()
    }

    /// Resets the lock's TTL to `ttl` from now, if the key still holds our token (atomically:
    /// see `src/redis/strategy`). The validity moves to `ttl` after the moment the command was
    /// sent. If the outcome is unknown (a timeout, a dropped connection, a server error), the
    /// validity is left at the sooner of what it was and `ttl` after the send: the command may
    /// still be applied, so a shortening extend is believed even when its reply is lost. (On
    /// etcd an auto-extended lock's extend moves it to another session's lease; a move whose
    /// reply is lost is sent again until etcd answers, so the call may take up to the lease's
    /// validity rather than one response timeout.)
    ///
    /// # Errors
    /// [`Error::NotHeld`] if the lock was lost (the guard then counts as not held);
    /// [`Error::Connection`], [`Error::Server`], [`Error::InvalidArgument`] for a bad TTL.
    pub async fn extend(&self, ttl: Duration) -> Result<()> {
        // Recorded before the command leaves: whatever happens to it, the validity is at most
        // its bound from now on (see `Validity`); only a success raises it again.
        let sent = Instant::now();
        let bound = sent + ttl.saturating_sub(self.held.drift(ttl));
        let sent_extend = self.lease.extend_sent(sent, bound);
        let span = crate::core::trace::span("leasehold.extend", None, self.key());
        match crate::core::trace::traced(span, self.held.extend(&self.lease, ttl)).await {
            Ok(valid_until) => {
                sent_extend.confirm(valid_until.min(bound));
                Ok(())
            }
            Err(e @ Error::NotHeld { .. }) => {
                self.lease.mark_lost(LossReason::NotHeld);
                Err(e)
            }
            Err(e) => Err(e),
        }
    }

    /// Gives up the guard's duty to release: the lock stays held until its TTL runs out or
    /// someone releases it with the token (another process, the CLI's `release`). Returns the
    /// lease, whose token is what that release needs.
    pub fn detach(mut self) -> Lease {
        self.done = true;
        self.lease.clone()
    }

    /// Releases the lock if it is still ours.
    ///
    /// # Errors
    /// [`Error::NotHeld`] if the key no longer held our token (it expired, or was deleted or
    /// taken over): the lock had already stopped protecting whatever ran under it.
    pub async fn release(mut self) -> Result<()> {
        self.done = true;
        self.lease.end();
        crate::core::metrics::held(self.since);
        let span = crate::core::trace::span("leasehold.release", None, self.key());
        let Some(recording) = self.history.take() else {
            return crate::core::trace::traced(span, self.held.release(&self.lease)).await;
        };
        let handed_over =
            crate::core::trace::traced(span, self.held.release_handing_over(&self.lease)).await?;
        recording.released(&self.lease, handed_over).await;
        Ok(())
    }
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        self.lease.end();
        crate::core::metrics::held(self.since);
        let key = self.lease.key().to_string();
        let Ok(handle) = tokio::runtime::Handle::try_current() else {
            tracing::warn!(
                key,
                "lock guard dropped outside a tokio runtime; the lock expires with its TTL"
            );
            return;
        };
        crate::core::throttle::warn_throttled!(
            key,
            "lock guard dropped without release(); releasing in the background"
        );
        let held = self.held.clone();
        let lease = self.lease.clone();
        let history = self.history.take();
        handle.spawn(async move {
            match held.release_handing_over(&lease).await {
                Err(e) => {
                    tracing::warn!(key, error = %e, "background release of a dropped guard failed")
                }
                Ok(handed_over) => {
                    if let Some(recording) = history {
                        recording.released(&lease, handed_over).await;
                    }
                }
            }
        });
    }
}

/// A guard's link to the history log: records its release, and (a watcher task, stopped when
/// this is dropped) its loss. Best effort: see [`crate::core::history`].
#[derive(Debug)]
struct Recording {
    log: Arc<dyn HistoryLog>,
    /// Turns true once the acquisition's event is appended (or given up on).
    acquired: tokio::sync::watch::Receiver<bool>,
    _stop_watching: tokio_util::sync::DropGuard,
}

impl Recording {
    /// Records the release (`handed_over`: to a waiter, in the same step), after the
    /// acquisition's event, so that the log keeps their order.
    async fn released(mut self, lease: &Lease, handed_over: bool) {
        let _ = self.acquired.wait_for(|done| *done).await;
        let kind = match handed_over {
            true => HistoryKind::HandedOver,
            false => HistoryKind::Released,
        };
        let event = lease_event(lease, kind);
        crate::core::history::record(&*self.log, lease.key(), event).await;
    }
}

/// An event of `kind` about `lease`'s acquisition.
pub(crate) fn lease_event(lease: &Lease, kind: HistoryKind) -> HistoryEvent {
    HistoryEvent {
        fencing: lease.fencing_token(),
        ..HistoryEvent::of_holder(kind, lease.token())
    }
}

impl LockGuard {
    /// Records this guard's acquisition, release and loss in `log`. The acquisition and the
    /// loss are appended by a spawned task, in that order: the holder never waits longer for
    /// a history write than [`LockGuard::acquisition_recorded`] allows, rather than for a
    /// response timeout out of a short lease (finding M10 of the 2026-12-02 review). The loss is appended when the lease's lost
    /// token fires, the first time only, and never after a release; it logs a failure at
    /// debug (the server may be unreachable, which may be why the lease was lost). The release
    /// is appended after the acquisition.
    pub(crate) fn record_history(&mut self, log: Arc<dyn HistoryLog>) {
        let stop = CancellationToken::new();
        let lost = self.lease.lost_token();
        let (lease, watcher_log, watch_stop) = (self.lease.clone(), log.clone(), stop.clone());
        let (acquired_tx, acquired) = tokio::sync::watch::channel(false);
        if let Ok(handle) = tokio::runtime::Handle::try_current() {
            handle.spawn(async move {
                let event = lease_event(&lease, HistoryKind::Acquired);
                crate::core::history::record(&*watcher_log, lease.key(), event).await;
                let _ = acquired_tx.send(true);
                tokio::select! {
                    // A loss that fired before the release is still recorded.
                    biased;
                    _ = lost.cancelled() => {
                        let mut event = lease_event(&lease, HistoryKind::Lost);
                        event.detail = lease.loss_reason().map(|r| r.to_string());
                        if let Err(e) = watcher_log.append(lease.key(), &event).await {
                            tracing::debug!(key = lease.key(), error = %e, "could not record a lock's loss");
                        }
                    }
                    _ = watch_stop.cancelled() => {}
                }
            });
        }
        self.history = Some(Recording {
            log,
            acquired,
            _stop_watching: stop.drop_guard(),
        });
    }

    /// Waits until the acquisition's history event is appended, for at most a tenth of the
    /// lease's remaining validity: in the common case the log keeps the order of what the
    /// holder does next (a release by token, a forced release), and a slow history write
    /// costs the holder at most that tenth (M10); the append then finishes in the background.
    pub(crate) async fn acquisition_recorded(&self) {
        let Some(recording) = &self.history else {
            return;
        };
        let mut acquired = recording.acquired.clone();
        let bound = self.lease.remaining() / 10;
        let _ = tokio::time::timeout(bound, acquired.wait_for(|done| *done)).await;
    }
}

/// The body of `with_lock` for any backend: run `work` against the loss signal, release whatever
/// happens, and say what happened.
pub(crate) async fn run_with_lock<T, F, Fut>(
    guard: LockGuard,
    options: &crate::LockOptions,
    work: F,
) -> Result<T>
where
    F: FnOnce(Lease) -> Fut,
    Fut: std::future::Future<Output = T>,
{
    use futures_util::FutureExt;
    let lease = guard.lease().clone();
    let work = std::panic::AssertUnwindSafe(work(lease.clone())).catch_unwind();
    let outcome = match options.loss_policy() {
        crate::OnLoss::Cancel => tokio::select! {
            out = work => Some(out),
            _ = lease.lost() => None,
        },
        _ => Some(work.await),
    };
    let released = guard.release().await;
    let lost = || Error::LockLost {
        key: lease.key().to_string(),
        reason: lease.loss_reason().unwrap_or(LossReason::Expired),
    };
    match outcome {
        Some(Err(panic)) => std::panic::resume_unwind(panic),
        None => Err(lost()),
        Some(Ok(_)) if lease.loss_reason().is_some() => Err(lost()),
        Some(Ok(value)) => released.map(|()| value),
    }
}

/// One held lock, as its [`LockGuard`] sees it: release it, or extend it. Cheap to clone
/// (a guard dropped unreleased moves a clone into a background release).
pub(crate) trait HeldLock: Send + Sync + std::fmt::Debug + 'static {
    /// Releases the lock if it is still ours ([`Error::NotHeld`](crate::Error::NotHeld)
    /// otherwise).
    fn release<'a>(&'a self, lease: &'a Lease) -> BoxFuture<'a, Result<()>>;

    /// [`HeldLock::release`], saying whether the lock went to a waiter in the same step (a
    /// fair lock's handover) rather than being freed: for the lock history.
    fn release_handing_over<'a>(&'a self, lease: &'a Lease) -> BoxFuture<'a, Result<bool>> {
        Box::pin(async move { self.release(lease).await.map(|()| false) })
    }

    /// Extends the lock to `ttl` from now if it is still ours, and returns the new validity
    /// deadline (counted from before the request was sent, minus the drift allowance).
    fn extend<'a>(&'a self, lease: &'a Lease, ttl: Duration) -> BoxFuture<'a, Result<Instant>>;

    /// The drift allowance this backend subtracts from a lease of `ttl`
    /// ([`clock_drift`](crate::clock_drift) unless it allows more).
    fn drift(&self, ttl: Duration) -> Duration {
        clock_drift(ttl)
    }
}

impl crate::core::trace::Traced for LockGuard {
    fn outcome(&self) -> (&'static str, Option<u64>) {
        ("acquired", self.fencing_token())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lease(until: Instant) -> Lease {
        Lease::until("k", LockToken::random(), None, until)
    }

    // The model checker's counterexamples to a rule that capped a success by the newest extend
    // alone, or ordered extends by clock readings.
    #[test]
    fn a_success_is_capped_by_every_extend_still_pending() {
        let t0 = Instant::now();
        let s = Duration::from_secs(1);
        let l = lease(t0 + 3 * s);
        let e0 = l.extend_sent(t0, t0 + 3 * s);
        let e1 = l.extend_sent(t0, t0 + s); // shortening, outcome unknown
        let e2 = l.extend_sent(t0, t0 + 3 * s);
        assert_eq!(l.valid_until(), t0 + s, "lowered on sending");
        e0.confirm(t0 + 3 * s);
        assert_eq!(l.valid_until(), t0 + s, "e1 may be applied after e0");
        e2.confirm(t0 + 3 * s);
        assert_eq!(l.valid_until(), t0 + s, "e1 may be re-sent after e2");
        e1.confirm(t0 + s);
        assert_eq!(l.valid_until(), t0 + s, "an older success raises nothing");
        let e3 = l.extend_sent(t0, t0 + 3 * s);
        e3.confirm(t0 + 3 * s);
        assert_eq!(
            l.valid_until(),
            t0 + s,
            "a copy of e1 may still be applied until its bound"
        );
    }

    // The model checker's counterexample to forgetting an extend at its bound while another
    // call runs: e1 (3 s) and e2 (1 s) applied in that order, e2 settled after its bound, then
    // e1's success believed 3 s over a key that expired at 1 s.
    #[test]
    fn an_extend_forgotten_at_its_bound_still_caps_a_call_that_ran_meanwhile() {
        let s = Duration::from_secs(1);
        let past = Instant::now() - 2 * s;
        let l = lease(past + 3 * s);
        let e1 = l.extend_sent(past, past + 3 * s);
        let e2 = l.extend_sent(past, past + s);
        drop(e2);
        e1.confirm(past + 3 * s);
        assert_eq!(l.valid_until(), past + s);
        assert!(!l.is_held(), "the key expired at e2's bound");
    }

    // The model checker's counterexample to forgetting an extend at its success: e1 (1 s) is
    // re-sent and applied after e2 (3 s); e1's success came first, then e2's raised to 3 s.
    #[test]
    fn a_confirmed_extend_still_caps_a_later_success_until_its_bound() {
        let t0 = Instant::now();
        let s = Duration::from_secs(1);
        let l = lease(t0 + s);
        let e1 = l.extend_sent(t0, t0 + s);
        let e2 = l.extend_sent(t0, t0 + 3 * s);
        e1.confirm(t0 + s);
        e2.confirm(t0 + 3 * s);
        assert_eq!(l.valid_until(), t0 + s);
    }

    #[test]
    fn many_settled_extends_are_merged_without_raising_any_cap() {
        let t0 = Instant::now();
        let s = Duration::from_secs(1);
        let l = lease(t0 + 30 * s);
        let short = l.extend_sent(t0, t0 + 2 * s);
        drop(short);
        for i in 0..200u32 {
            let sent = t0 + Duration::from_millis(u64::from(i));
            l.extend_sent(sent, sent + 30 * s).confirm(sent + 30 * s);
        }
        assert!(l.validity().pending.len() <= MAX_PENDING);
        let sent = t0 + s;
        l.extend_sent(sent, sent + 30 * s).confirm(sent + 30 * s);
        assert_eq!(l.valid_until(), sent + 2 * s, "the short one still caps");
    }

    // Finding U1 of the 2026-12-02 review: the client itself re-sends an older extend (the
    // `idempotent` retry after a dropped connection; redis-rs Cluster re-sending a timed-out
    // request) and it is applied after a later one was confirmed. The old rule forgot every
    // extend older than the confirmed one and believed the renewal's 30 s.
    #[test]
    fn a_resent_older_extend_caps_a_later_success() {
        let t0 = Instant::now();
        let s = Duration::from_secs(1);
        let l = lease(t0 + 30 * s);
        let short = l.extend_sent(t0, t0 + 2 * s); // its reply lost; re-sent later
        let renewal_sent = t0 + s / 2;
        let renewal = l.extend_sent(renewal_sent, renewal_sent + 30 * s);
        renewal.confirm(renewal_sent + 30 * s);
        assert_eq!(
            l.valid_until(),
            renewal_sent + 2 * s,
            "the re-send may be applied after the renewal"
        );
        drop(short); // returned without an answer: pending until its bound
        let next_sent = t0 + s;
        l.extend_sent(next_sent, next_sent + 30 * s)
            .confirm(next_sent + 30 * s);
        assert_eq!(l.valid_until(), next_sent + 2 * s, "still within its bound");
    }

    #[test]
    fn a_settled_extend_is_forgotten_once_its_bound_passed_but_one_in_flight_is_not() {
        let t0 = Instant::now();
        let s = Duration::from_secs(1);
        let past = t0 - 10 * s;
        let l = lease(t0 + s);
        let settled = l.extend_sent(past, past + 2 * s);
        drop(settled);
        l.extend_sent(t0, t0 + 30 * s).confirm(t0 + 30 * s);
        assert_eq!(
            l.valid_until(),
            t0 + 30 * s,
            "a settled extend past its bound"
        );
        let in_flight = l.extend_sent(past, past + 2 * s);
        assert_eq!(l.valid_until(), past + 2 * s, "lowered on sending");
        l.extend_sent(t0, t0 + 30 * s).confirm(t0 + 30 * s);
        assert_eq!(
            l.valid_until(),
            t0 + 2 * s,
            "a call still running may re-send it at any moment"
        );
        drop(in_flight);
        l.extend_sent(t0, t0 + 30 * s).confirm(t0 + 30 * s);
        assert_eq!(l.valid_until(), t0 + 30 * s);
    }

    #[test]
    fn extends_sent_at_the_same_instant_are_still_ordered() {
        let t0 = Instant::now();
        let s = Duration::from_secs(1);
        let l = lease(t0 + 3 * s);
        let long = l.extend_sent(t0, t0 + 3 * s);
        let short = l.extend_sent(t0, t0 + s);
        long.confirm(t0 + 3 * s);
        assert_eq!(l.valid_until(), t0 + s);
        short.confirm(t0 + s);
        assert_eq!(l.valid_until(), t0 + s);
    }

    #[test]
    fn an_unanswered_extend_never_raises_validity() {
        let t0 = Instant::now();
        let s = Duration::from_secs(1);
        let l = lease(t0 + s);
        let _lost = l.extend_sent(t0, t0 + 10 * s);
        assert_eq!(l.valid_until(), t0 + s);
        let shorter = l.extend_sent(t0, t0 + s / 2);
        assert_eq!(l.valid_until(), t0 + s / 2);
        shorter.confirm(t0 + s / 2);
        assert_eq!(l.valid_until(), t0 + s / 2);
    }
}
