//! `Lease`: a held lock (or permit, read or write hold, leadership) as Python sees it.

use std::sync::{Arc, OnceLock};

use tokio::sync::RwLock;

use pyo3::prelude::*;
use tokio_util::sync::CancellationToken;

use leasehold::{LockGuard, LossReason};

use crate::runtime::{IntoPyErr, Process, awaitable, block_on, drop_in_runtime, duration};

/// The name of a loss reason, as Python sees it.
pub(crate) fn reason_name(reason: LossReason) -> &'static str {
    match reason {
        LossReason::NotHeld => "not_held",
        LossReason::Expired => "expired",
        _ => "lost",
    }
}

/// A held lease. Released by `release()` (or at the end of its `with` block); a lease dropped
/// unreleased is released in the background.
#[pyclass(module = "leasehold._native", frozen)]
pub struct Lease {
    /// The guard, shared with extends in flight (`extend` takes `&LockGuard`; a cancelled
    /// extend must not drop it); `None` once released.
    guard: Arc<RwLock<Option<LockGuard>>>,
    lease: leasehold::Lease,
    /// Cancelled at release or drop: ends the task that waits for a loss.
    done: CancellationToken,
    /// The loss as this object reported it, first reason kept (see [`observe_loss`]).
    seen: Arc<OnceLock<LossReason>>,
    /// The process that took it (a forked child must not touch it).
    owner: Process,
}

impl Lease {
    pub(crate) fn new(guard: LockGuard) -> Self {
        Lease {
            lease: guard.lease().clone(),
            guard: Arc::new(RwLock::new(Some(guard))),
            done: CancellationToken::new(),
            seen: Arc::new(OnceLock::new()),
            owner: Process::this(),
        }
    }

    /// Takes the guard out without waiting (for a drop); `None` if it was released, or an
    /// extend or a release is in flight (which then drops or releases it).
    fn take(&self) -> Option<LockGuard> {
        self.guard.try_write().ok().and_then(|mut g| g.take())
    }

    /// Why the lease counts as lost, if it does (see [`observe_loss`]).
    fn loss(&self) -> Option<LossReason> {
        observe_loss(&self.lease, self.done.is_cancelled(), &self.seen)
    }

    fn released(&self, py: Python<'_>) -> PyErr {
        Released(self.lease.key().to_string()).into_py_err(py)
    }

    /// The release: waits for the extends in flight (each holds a read lock on the guard for
    /// its round trip), then takes the guard out and releases the lock. Waiting, rather than
    /// refusing while an extend is in flight, is what makes a release from one thread end the
    /// lease although another thread extends it: a refused release would leave the guard
    /// here, renewed for as long as the object lives. An extend that comes after the guard was
    /// taken is refused as released.
    fn release_future(
        &self,
    ) -> impl std::future::Future<Output = Result<(), ReleaseError>> + Send + 'static {
        let guard = self.guard.clone();
        let done = self.done.clone();
        let (lease, seen) = (self.lease.clone(), self.seen.clone());
        async move {
            let Some(g) = guard.write_owned().await.take() else {
                return Err(ReleaseError::Released(Released(lease.key().to_string())));
            };
            // A validity that ran out before the release counts as lost (seen here, while the
            // lease is still ours), as a reading of `lost` would have found it.
            observe_loss(&lease, false, &seen);
            done.cancel();
            g.release().await.map_err(ReleaseError::Library)
        }
    }

    /// The extend future, if the lease is still ours to extend.
    fn extend_future(
        &self,
        py: Python<'_>,
        ttl: &Bound<'_, PyAny>,
    ) -> PyResult<impl std::future::Future<Output = leasehold::Result<()>> + Send + 'static> {
        self.owner.check(py, "lease")?;
        let ttl = duration(py, "ttl", ttl)?;
        let Ok(held) = self.guard.clone().try_read_owned() else {
            return Err(self.released(py));
        };
        if held.is_none() {
            return Err(self.released(py));
        }
        let key = self.lease.key().to_string();
        Ok(async move {
            match held.as_ref() {
                Some(g) => g.extend(ttl).await,
                None => Err(leasehold::Error::NotHeld { key }),
            }
        })
    }
}

#[pymethods]
impl Lease {
    /// The lock's key (or the primitive's name).
    #[getter]
    fn key(&self) -> &str {
        self.lease.key()
    }

    // The state below is the holder's: in a forked child (which holds nothing) every reading
    // of it refuses with `ForkedProcess`, so the child can neither believe it holds the
    // parent's lock nor present the parent's fence number and token (a fenced resource would
    // accept both processes' writes: same number, same writer).

    /// The fencing number issued with this acquisition (`None` unless `fencing=True`). Pass it
    /// to the protected resource, which refuses any number lower than one it has seen.
    #[getter]
    fn fence(&self, py: Python<'_>) -> PyResult<Option<u64>> {
        self.owner.check(py, "lease")?;
        Ok(self.lease.fencing_token())
    }

    /// The token stored in the lock: a secret capability (whoever has it can release or extend
    /// the lock). For handing the lock to another process or language.
    #[getter]
    fn token(&self, py: Python<'_>) -> PyResult<String> {
        self.owner.check(py, "lease")?;
        Ok(self.lease.token().expose().to_string())
    }

    /// True until the lease is released, found lost, or its validity runs out.
    #[getter]
    fn held(&self, py: Python<'_>) -> PyResult<bool> {
        self.owner.check(py, "lease")?;
        Ok(self.lease.is_held() && self.loss().is_none())
    }

    /// True once the lease was found lost: a renewal or extend found it gone, or its validity
    /// ran out while it was not released (noticed by whatever looks first: the renewer, a
    /// watch, this reading, or the release). Never set by a normal release in time; once
    /// true, it stays true.
    #[getter]
    fn lost(&self, py: Python<'_>) -> PyResult<bool> {
        self.owner.check(py, "lease")?;
        Ok(self.loss().is_some())
    }

    /// Why it was lost: `"expired"` or `"not_held"`; `None` while not lost.
    #[getter]
    fn loss_reason(&self, py: Python<'_>) -> PyResult<Option<&'static str>> {
        self.owner.check(py, "lease")?;
        Ok(self.loss().map(reason_name))
    }

    /// Seconds of validity left (0.0 once over or lost): how long the lock is certainly still
    /// ours.
    #[getter]
    fn remaining(&self, py: Python<'_>) -> PyResult<f64> {
        self.owner.check(py, "lease")?;
        if self.loss().is_some() {
            return Ok(0.0);
        }
        Ok(self.lease.remaining().as_secs_f64())
    }

    /// Releases the lock (GIL released meanwhile; an extend in flight from another thread or
    /// task is waited for). Raises `NotHeld` if it was not ours any more, or was already
    /// released.
    fn release(&self, py: Python<'_>) -> PyResult<()> {
        self.owner.check(py, "lease")?;
        block_on(py, self.release_future())
    }

    /// `release()` as an awaitable.
    fn release_async<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        // Without a running loop nothing can await it: refuse before the guard is taken.
        self.owner.check(py, "lease")?;
        py.import("asyncio")?.call_method0("get_running_loop")?;
        awaitable(py, self.release_future())
    }

    /// Sets the lease's validity to `ttl` from now, if it is still ours (else `NotHeld`, and
    /// the lease counts as lost).
    fn extend(&self, py: Python<'_>, ttl: &Bound<'_, PyAny>) -> PyResult<()> {
        let fut = self.extend_future(py, ttl)?;
        block_on(py, fut)
    }

    /// `extend(ttl)` as an awaitable.
    fn extend_async<'py>(
        &self,
        py: Python<'py>,
        ttl: &Bound<'_, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let fut = self.extend_future(py, ttl)?;
        awaitable(py, fut)
    }

    /// Calls `callback()` (no arguments, on a background thread) once if the lease is lost
    /// while held. Not called after a normal release. Exceptions it raises are reported as
    /// unraisable.
    fn on_lost(&self, py: Python<'_>, callback: Py<PyAny>) -> PyResult<()> {
        self.owner.check(py, "lease")?;
        let lease = self.lease.clone();
        let done = self.done.clone();
        crate::runtime::runtime().spawn(async move {
            tokio::select! {
                _ = lease.lost() => {}
                _ = done.cancelled() => return,
            }
            Python::attach(|py| {
                if let Err(e) = callback.call0(py) {
                    e.write_unraisable(py, None);
                }
            });
        });
        Ok(())
    }

    fn __repr__(&self) -> String {
        if self.owner.forked() {
            return format!(
                "<Lease {:?} of process {} (inherited through fork)>",
                self.lease.key(),
                self.owner.pid()
            );
        }
        let state = if self.loss().is_some() {
            "lost"
        } else if self.lease.is_held() {
            "held"
        } else {
            "ended"
        };
        match self.lease.fencing_token() {
            Some(f) => format!("<Lease {:?} {state} fence={f}>", self.lease.key()),
            None => format!("<Lease {:?} {state}>", self.lease.key()),
        }
    }
}

/// The loss of `lease` as its holder reports it, the first reason seen kept (`seen`): the
/// library's reading ([`leasehold::Lease::loss_now`]: its recorded reason, or `Expired` once
/// the validity is over while the lease is not released), unless `released` here. Kept once
/// seen: an extend that lands later does not make a lease reported lost held again (as in the
/// library, where a lease marked lost stays lost).
fn observe_loss(
    lease: &leasehold::Lease,
    released: bool,
    seen: &OnceLock<LossReason>,
) -> Option<LossReason> {
    if let Some(reason) = seen.get() {
        return Some(*reason);
    }
    let reason = match lease.loss_reason() {
        Some(reason) => reason,
        None if released => return None,
        None => lease.loss_now()?,
    };
    Some(*seen.get_or_init(|| reason))
}

/// A release or extend of a lease that was released already.
struct Released(String);

impl IntoPyErr for Released {
    fn into_py_err(self, py: Python<'_>) -> PyErr {
        let message = format!(
            "lock {:?}: this lease was already released (at the end of its with block, or by \
             release())",
            self.0
        );
        let key = self
            .0
            .into_pyobject(py)
            .map(|k| k.into_any())
            .expect("a str");
        crate::errors::raise(py, "NotHeld", message, &[("key", key)])
    }
}

/// How a release fails: released already, or the library's error.
enum ReleaseError {
    Released(Released),
    Library(leasehold::Error),
}

impl IntoPyErr for ReleaseError {
    fn into_py_err(self, py: Python<'_>) -> PyErr {
        match self {
            ReleaseError::Released(r) => r.into_py_err(py),
            ReleaseError::Library(e) => e.into_py_err(py),
        }
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        if self.owner.forked() {
            // A copy inherited through fork: the lock is the parent's; leave it alone (and
            // touch nothing the parent's runtime threads shared).
            std::mem::forget(self.take());
            return;
        }
        self.done.cancel();
        // If an extend is in flight, it holds the guard and drops it, inside the runtime.
        drop_in_runtime(self.take());
    }
}
