//! The holder's side of a lock: [`LockGuard`] (owns the release) and [`Lease`] (a shareable view
//! of the key, token, fencing token and validity).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

use crate::backend::HeldLock;
use crate::error::{Error, Result};
use crate::fencing::Fence;
use crate::token::LockToken;

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

/// The holder's belief about its lease, and the newest extend it has sent.
///
/// **Rule (every backend).** An extend is recorded when it is *sent*, with its bound
/// `sent + ttl - drift`: the server sets the new TTL no earlier than `sent`, so if the extend is
/// applied at all, the key lives at least until that bound. Until its outcome is known the
/// command may be applied at any moment (it may be applied late, after a timeout or a lost
/// reply), so on sending, the validity drops to `min(valid_until, bound)`: a shortening extend
/// with an unknown outcome never leaves a longer belief standing, and nothing but a success
/// reply raises the validity. A success reply for the extend sent at `s` raises the validity to
/// its bound, but no higher than the bound of any extend sent after `s` (that one may be
/// applied after it and shorten the key again). Tested by
/// `renewal.rs::an_extend_with_an_unknown_outcome_never_raises_validity` and the model in
/// `crates/leasehold-model`.
#[derive(Debug, Clone, Copy)]
struct Validity {
    until: Instant,
    /// The send instant and bound of the newest extend sent, if any.
    newest: Option<(Instant, Instant)>,
}

/// Why a lease was lost.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum LossReason {
    /// The key was gone or held another holder's token (expired, deleted or overwritten from
    /// outside, or lost by the server).
    NotHeld,
    /// The validity deadline passed without a successful renewal (server unreachable or too
    /// slow, or renewal was not enabled or had stopped at its cap).
    Expired,
}

impl std::fmt::Display for LossReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            LossReason::NotHeld => "the key no longer holds our token",
            LossReason::Expired => "the lease ran out before a renewal succeeded",
        })
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
                    newest: None,
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
        crate::metrics::lost(reason);
        self.state.lost.cancel();
        true
    }

    pub(crate) fn is_ended(&self) -> bool {
        self.state.ended.load(Ordering::Acquire)
    }

    /// Records an extend sent at `sent` (taken before the command left) whose success would make
    /// the key live at least until `bound` (`sent + ttl - drift`), lowering the validity to
    /// that bound (see [`Validity`]).
    pub(crate) fn extend_sent(&self, sent: Instant, bound: Instant) {
        let mut v = self.validity();
        if v.newest.is_none_or(|(s, _)| sent >= s) {
            v.newest = Some((sent, bound));
        }
        v.until = v.until.min(bound);
    }

    /// The extend sent at `sent` succeeded: the key lives until at least `bound` (its bound from
    /// [`Lease::extend_sent`], or a lower one the backend computed), unless an extend sent later
    /// is applied after it; the validity rises to that, never falls.
    pub(crate) fn extend_confirmed(&self, sent: Instant, bound: Instant) {
        let mut v = self.validity();
        let bound = match v.newest {
            Some((newest, newest_bound)) if newest > sent => bound.min(newest_bound),
            _ => bound,
        };
        if bound > v.until {
            v.until = bound;
        }
    }

    /// An extend to `ttl` sent at `sent` succeeded, for a renewer that always sends the same TTL
    /// (so its bounds only grow) and records the send when the reply is in.
    pub(crate) fn renewed(&self, sent: Instant, ttl: Duration) {
        let bound = sent + ttl.saturating_sub(clock_drift(ttl));
        {
            let mut v = self.validity();
            if v.newest.is_none_or(|(s, _)| sent >= s) {
                v.newest = Some((sent, bound));
            }
        }
        self.extend_confirmed(sent, bound);
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
    pub(crate) fn lower_valid_until(&self, until: Instant) {
        let mut v = self.validity();
        v.until = v.until.min(until);
    }

    /// Sets the validity to that of the keep-alive the lease now rides on (etcd: a session's
    /// lease, when a lock joins it).
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
}

impl LockGuard {
    pub(crate) fn new(held: Arc<dyn HeldLock>, lease: Lease) -> Self {
        LockGuard {
            held,
            lease,
            done: false,
            since: crate::metrics::start(),
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
    /// see [`crate::strategy`]). The validity moves to `ttl` after the moment the command was
    /// sent. If the outcome is unknown (a timeout, a dropped connection, a server error), the
    /// validity is left at the sooner of what it was and `ttl` after the send: the command may
    /// still be applied, so a shortening extend is believed even when its reply is lost.
    ///
    /// # Errors
    /// [`Error::NotHeld`] if the lock was lost (the guard then counts as not held);
    /// [`Error::Connection`], [`Error::Server`], [`Error::InvalidArgument`] for a bad TTL.
    pub async fn extend(&self, ttl: Duration) -> Result<()> {
        // Recorded before the command leaves: whatever happens to it, the validity is at most
        // its bound from now on (see `Validity`); only a success raises it again.
        let sent = Instant::now();
        let bound = sent + ttl.saturating_sub(self.held.drift(ttl));
        self.lease.extend_sent(sent, bound);
        match self.held.extend(&self.lease, ttl).await {
            Ok(valid_until) => {
                self.lease.extend_confirmed(sent, valid_until.min(bound));
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
        crate::metrics::held(self.since);
        self.held.release(&self.lease).await
    }
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        self.lease.end();
        crate::metrics::held(self.since);
        let key = self.lease.key().to_string();
        let Ok(handle) = tokio::runtime::Handle::try_current() else {
            tracing::warn!(
                key,
                "lock guard dropped outside a tokio runtime; the lock expires with its TTL"
            );
            return;
        };
        tracing::warn!(
            key,
            "lock guard dropped without release(); releasing in the background"
        );
        let held = self.held.clone();
        let lease = self.lease.clone();
        handle.spawn(async move {
            if let Err(e) = held.release(&lease).await {
                tracing::warn!(key, error = %e, "background release of a dropped guard failed");
            }
        });
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
