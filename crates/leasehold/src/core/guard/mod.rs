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

/// The end of the validity of a lease of `ttl` whose request was sent at `sent`: the one
/// validity formula, `sent + ttl - clock_drift(ttl)`. The server's expiry is later, because its
/// clock started after `sent`.
pub(crate) fn valid_until(sent: Instant, ttl: Duration) -> Instant {
    sent + ttl.saturating_sub(clock_drift(ttl))
}

/// A [`HeldLock::extend`] that sets the lease to `ttl` from the moment its request is sent: the
/// instant is taken before `extend` is first polled (so before anything is sent), and the
/// validity counted from it.
pub(crate) async fn extended_by(
    ttl: Duration,
    extend: impl Future<Output = Result<()>>,
) -> Result<Instant> {
    let sent = Instant::now();
    extend.await?;
    Ok(valid_until(sent, ttl))
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
    /// Run once when the lease is lost (the history's loss event), without a task waiting for it.
    on_loss: OnceLock<LossHook>,
}

/// What [`Lease::on_loss`] runs.
struct LossHook(Box<dyn Fn(&Lease) + Send + Sync>);

impl std::fmt::Debug for LossHook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("LossHook")
    }
}

#[cfg(test)]
mod tests;
mod validity;

pub(crate) use validity::SentExtend;
use validity::Validity;

impl Lease {
    pub(crate) fn new(
        key: &str,
        token: LockToken,
        fencing: Option<u64>,
        started: Instant,
        ttl: Duration,
    ) -> Self {
        Self::until(key, token, fencing, valid_until(started, ttl))
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
                validity: Mutex::new(Validity::new(valid_until)),
                ended: AtomicBool::new(false),
                lost: CancellationToken::new(),
                reason: OnceLock::new(),
                on_loss: OnceLock::new(),
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

    /// Why the lease counts as lost now: the recorded reason ([`Lease::loss_reason`]), or
    /// [`LossReason::Expired`] once its validity is over while it is neither released nor
    /// marked. The library marks an expiry only where a task waits for one ([`Lease::lost`]:
    /// the renewer of an auto-extended lease, a watch); this reading tells it without one, for
    /// code that polls (the bindings' `lost` and `held`).
    pub fn loss_now(&self) -> Option<LossReason> {
        self.loss_reason().or_else(|| {
            (!self.is_ended() && Instant::now() >= self.valid_until())
                .then_some(LossReason::Expired)
        })
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
        if let Some(hook) = self.state.on_loss.get() {
            (hook.0)(self);
        }
        true
    }

    /// Runs `hook` when the lease is lost (from [`Lease::mark_lost`], the first time only; never
    /// after a release); the first hook set wins. It must not block: it runs where the loss was
    /// found.
    fn on_loss(&self, hook: impl Fn(&Lease) + Send + Sync + 'static) {
        let _ = self.state.on_loss.set(LossHook(Box::new(hook)));
    }

    pub(crate) fn is_ended(&self) -> bool {
        self.state.ended.load(Ordering::Acquire)
    }

    /// A keep-alive sent at `sent` with `ttl` succeeded, for a renewer that always sends the
    /// same TTL and reports its replies in the order it sent them (etcd's session).
    #[cfg_attr(not(feature = "etcd"), allow(dead_code))]
    pub(crate) fn renewed(&self, sent: Instant, ttl: Duration) {
        let bound = valid_until(sent, ttl);
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

#[cfg(test)]
impl LockGuard {
    /// The size of the future its release boxes (for the tests that keep it within the
    /// allocator's per-thread cache: `redis::client::release`'s `boxed_sizes`).
    pub(crate) fn boxed_release_size(&self) -> usize {
        std::mem::size_of_val(&*self.held.release(&self.lease))
    }
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

/// A guard's link to the history log: records its release (its loss is the lease's hook).
/// Best effort: see [`crate::core::history`].
#[derive(Debug)]
struct Recording {
    /// Where the release is appended; `None` when the lock's release appends it itself.
    log: Option<Arc<dyn HistoryLog>>,
    /// Turns true once the acquisition's event is appended (or given up on).
    acquired: tokio::sync::watch::Receiver<bool>,
}

impl Recording {
    /// Records the release (`handed_over`: to a waiter, in the same step), after the
    /// acquisition's event, so that the log keeps their order.
    async fn released(mut self, lease: &Lease, handed_over: bool) {
        let Some(log) = self.log.take() else {
            return;
        };
        let _ = self.acquired.wait_for(|done| *done).await;
        let kind = match handed_over {
            true => HistoryKind::HandedOver,
            false => HistoryKind::Released,
        };
        let event = lease_event(lease, kind);
        crate::core::history::record(&*log, lease.key(), event).await;
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
    /// loss are appended by spawned tasks, in that order: the holder never waits longer for
    /// a history write than [`LockGuard::acquisition_recorded`] allows, rather than for a
    /// response timeout out of a short lease (finding M10 of the 2026-12-02 review). The loss
    /// is appended when the lease is declared lost ([`Lease::mark_lost`]), the first time only,
    /// and never after a release; it logs a failure at debug (the server may be unreachable,
    /// which may be why the lease was lost). The release is appended after the acquisition.
    ///
    /// When the lock records its own acquisition and release ([`HeldLock::records_history`]),
    /// only the loss is appended here.
    pub(crate) fn record_history(&mut self, log: Arc<dyn HistoryLog>) {
        let itself = self.held.records_history();
        let (acquired_tx, acquired) = tokio::sync::watch::channel(itself);
        if !itself && let Ok(handle) = tokio::runtime::Handle::try_current() {
            let (lease, log) = (self.lease.clone(), log.clone());
            handle.spawn(async move {
                let event = lease_event(&lease, HistoryKind::Acquired);
                crate::core::history::record(&*log, lease.key(), event).await;
                let _ = acquired_tx.send(true);
            });
        }
        // The loss: no task waits for it; the lease spawns one when it is lost.
        let (loss_log, loss_acquired) = (log.clone(), acquired.clone());
        self.lease.on_loss(move |lease| {
            let Ok(handle) = tokio::runtime::Handle::try_current() else {
                return;
            };
            let (lease, log) = (lease.clone(), loss_log.clone());
            let mut acquired = loss_acquired.clone();
            handle.spawn(async move {
                // After the acquisition's event, so that the log keeps their order.
                let _ = acquired.wait_for(|done| *done).await;
                let mut event = lease_event(&lease, HistoryKind::Lost);
                event.detail = lease.loss_reason().map(|r| r.to_string());
                if let Err(e) = log.append(lease.key(), &event).await {
                    tracing::debug!(key = lease.key(), error = %e, "could not record a lock's loss");
                }
            });
        });
        self.history = Some(Recording {
            log: (!itself).then_some(log),
            acquired,
        });
    }

    /// Waits until the acquisition's history event is appended, for at most a tenth of the
    /// lease's remaining validity: in the common case the log keeps the order of what the
    /// holder does next (a release by token, a forced release), and a slow history write
    /// costs the holder at most that tenth (M10); the append then finishes in the background.
    pub(crate) async fn acquisition_recorded(&self) {
        // Nothing to wait for where the lock's own acquisition appended it.
        let Some(recording) = self.history.as_ref().filter(|r| r.log.is_some()) else {
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

    /// Whether this lock's acquisition and release append their own history events, in the
    /// same step on the server (a plain lock of a Redis, etcd or PostgreSQL client that records
    /// history: see `core::history`); the guard then appends only a loss.
    fn records_history(&self) -> bool {
        false
    }

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
