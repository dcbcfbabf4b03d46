//! `Lease`: a held lock (or permit, read or write hold, leadership) as JavaScript sees it.

use std::sync::Arc;

use napi::bindgen_prelude::Function;
use napi::threadsafe_function::ThreadsafeFunctionCallMode;
use napi_derive::napi;
use tokio::sync::RwLock;
use tokio_util::sync::CancellationToken;

use leasehold::{LockGuard, LossReason};

use crate::errors::{IntoJs, reason_name, released};
use crate::options::millis;

/// A held lease. `index.js` wraps it: the wrapper's `signal` (made when first read) aborts
/// when [`Lease::on_lost`] reports a loss, and its `[Symbol.asyncDispose]` releases it. A lease
/// collected unreleased is released in the background.
#[napi]
pub struct Lease {
    /// The guard, shared with extends in flight (`extend` takes `&LockGuard`; an extend in
    /// flight must not drop it); `None` once released.
    guard: Arc<RwLock<Option<LockGuard>>>,
    lease: leasehold::Lease,
    /// Cancelled at release or collection: ends the wait for a loss.
    done: CancellationToken,
    /// The addon's runtime, where a lease collected unreleased is released.
    runtime: tokio::runtime::Handle,
}

impl Lease {
    /// The lease of `guard`; called on the addon's runtime.
    pub(crate) fn new(guard: LockGuard) -> Self {
        Lease {
            runtime: tokio::runtime::Handle::current(),
            lease: guard.lease().clone(),
            guard: Arc::new(RwLock::new(Some(guard))),
            done: CancellationToken::new(),
        }
    }

    /// Why the lease counts as lost, if it does ([`leasehold::Lease::loss_now`]).
    fn loss(&self) -> Option<LossReason> {
        self.lease.loss_now()
    }
}

#[napi]
impl Lease {
    /// The lock's key (or the primitive's name).
    #[napi(getter)]
    pub fn key(&self) -> String {
        self.lease.key().to_string()
    }

    /// The fencing number issued with this acquisition (null unless `fencing: true`).
    #[napi(getter)]
    pub fn fence(&self) -> Option<f64> {
        self.lease.fencing_token().map(|n| n as f64)
    }

    /// The token stored in the lock: a secret capability (whoever has it can release or extend
    /// the lock), for handing the lock to another process or language.
    #[napi(getter)]
    pub fn token(&self) -> String {
        self.lease.token().expose().to_string()
    }

    /// True until the lease is released, found lost, or its validity runs out.
    #[napi(getter)]
    pub fn held(&self) -> bool {
        self.lease.is_held() && self.loss().is_none()
    }

    /// Why it was lost: `expired` or `not_held`; null while not lost.
    #[napi(getter)]
    pub fn loss_reason(&self) -> Option<&'static str> {
        self.loss().map(reason_name)
    }

    /// Milliseconds of validity left (0 once over or lost).
    #[napi(getter)]
    pub fn remaining(&self) -> f64 {
        match self.loss() {
            Some(_) => 0.0,
            None => self.lease.remaining().as_secs_f64() * 1000.0,
        }
    }

    /// Calls `callback(reason)` once if the lease is lost while held (never after a release
    /// or once the lease is collected). `index.js` aborts the lease's `signal` from it, asking
    /// only when the signal is first read. Until the lease is released or lost, this keeps
    /// Node's event loop alive, as an open socket does: work waiting for the signal is not cut
    /// short by the process ending. A process that exits (or is killed) while it holds a lease
    /// leaves the lock to its TTL.
    #[napi(ts_args_type = "callback: (reason: string) => void")]
    pub fn on_lost(&self, callback: Function<String, ()>) -> napi::Result<()> {
        let callback = callback
            .build_threadsafe_function::<String>()
            .weak::<false>()
            .callee_handled::<false>()
            .build()?;
        let (lease, done) = (self.lease.clone(), self.done.clone());
        self.runtime.spawn(async move {
            tokio::select! {
                _ = lease.lost() => {
                    let reason = lease.loss_reason().map_or("lost", reason_name);
                    callback.call(reason.to_string(), ThreadsafeFunctionCallMode::NonBlocking);
                }
                _ = done.cancelled() => {}
            }
        });
        Ok(())
    }

    /// Releases the lock (an extend in flight is waited for). Rejects with `NotHeld` if it was
    /// not ours any more, or was already released.
    #[napi]
    pub async fn release(&self) -> napi::Result<()> {
        let Some(g) = self.guard.clone().write_owned().await.take() else {
            return Err(released(self.lease.key()));
        };
        self.done.cancel();
        g.release().await.js()
    }

    /// Sets the lease's validity to `ttl` ms from now, if it is still ours (else `NotHeld`,
    /// and the lease counts as lost).
    #[napi]
    pub async fn extend(&self, ttl: f64) -> napi::Result<()> {
        let ttl = millis("ttl", ttl, true)?;
        let held = self.guard.clone().read_owned().await;
        match held.as_ref() {
            Some(g) => g.extend(ttl).await.js(),
            None => Err(released(self.lease.key())),
        }
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        self.done.cancel();
        // Collected unreleased: the guard's drop releases it in the background, on the
        // runtime (once Node is exiting and the runtime is shut down, that release is dropped
        // and the lock ends with its TTL). If an extend is in flight, it holds the guard and
        // drops it there.
        let guard = self.guard.try_write().ok().and_then(|mut g| g.take());
        let _entered = self.runtime.enter();
        drop(guard);
    }
}
