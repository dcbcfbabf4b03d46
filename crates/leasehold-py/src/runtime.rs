//! The one tokio runtime behind every call, the blocking bridge for the synchronous API, and
//! the fork check.
//!
//! **Blocking calls release the GIL and stay interruptible.** The future runs on the runtime;
//! the calling thread waits for it with the GIL released, waking every [`SIGNAL_POLL`] to let
//! Python run its signal handlers. If one raises (Ctrl-C's `KeyboardInterrupt`), the future is
//! cancelled, and whatever it produced meanwhile is dropped inside the runtime: a lock granted
//! at the last moment is released in the background, and a wait that was cancelled removes its
//! queue entry (the library's cancellation contract). So an interrupted wait never leaves the
//! lock held.

use std::future::Future;
use std::sync::OnceLock;
use std::sync::mpsc::{RecvTimeoutError, channel};
use std::time::Duration;

use pyo3::prelude::*;
use tokio_util::sync::CancellationToken;

use crate::errors;

/// How often a blocked call lets Python check for signals.
const SIGNAL_POLL: Duration = Duration::from_millis(50);

/// The process that first used the runtime.
static OWNER_PID: OnceLock<u32> = OnceLock::new();

/// Refuses use from a forked child of a process that had started the runtime: its worker
/// threads were not copied by `fork`, so nothing spawned on it would ever run.
pub(crate) fn check_fork(py: Python<'_>) -> PyResult<()> {
    let pid = std::process::id();
    if *OWNER_PID.get_or_init(|| pid) != pid {
        return Err(errors::raise(
            py,
            "ForkedProcess",
            "leasehold was already in use when this process was forked; its background threads \
             did not survive the fork. Create Lockers only in the child (use leasehold there \
             first), or start children with multiprocessing's 'spawn' or 'forkserver' method"
                .into(),
            &[],
        ));
    }
    Ok(())
}

/// True in a forked child of the process that started the runtime.
pub(crate) fn forked() -> bool {
    OWNER_PID.get().is_some_and(|p| *p != std::process::id())
}

/// The runtime (started on first use).
pub(crate) fn runtime() -> &'static tokio::runtime::Runtime {
    pyo3_async_runtimes::tokio::get_runtime()
}

/// Runs `fut` on the runtime and waits for it with the GIL released (see the module docs).
pub(crate) fn block_on<T, F>(py: Python<'_>, fut: F) -> PyResult<T>
where
    F: Future<Output = leasehold::Result<T>> + Send + 'static,
    T: Send + 'static,
{
    check_fork(py)?;
    let cancel = CancellationToken::new();
    let (tx, rx) = channel();
    let stop = cancel.clone();
    runtime().spawn(async move {
        let out = tokio::select! {
            biased;
            r = fut => Some(r),
            _ = stop.cancelled() => None,
        };
        let _ = tx.send(out);
    });
    let rx = std::sync::Mutex::new(rx);
    let recv = |wait: Option<Duration>| {
        let rx = rx.lock().unwrap_or_else(|p| p.into_inner());
        match wait {
            Some(w) => rx.recv_timeout(w),
            None => rx.recv().map_err(|_| RecvTimeoutError::Disconnected),
        }
    };
    loop {
        match py.detach(|| recv(Some(SIGNAL_POLL))) {
            Ok(Some(result)) => return result.map_err(|e| errors::to_py(py, e)),
            Ok(None) | Err(RecvTimeoutError::Disconnected) => {
                return Err(pyo3::exceptions::PyRuntimeError::new_err(
                    "leasehold's runtime stopped the call",
                ));
            }
            Err(RecvTimeoutError::Timeout) => {
                if let Err(interrupt) = py.check_signals() {
                    cancel.cancel();
                    // The task ends at once: the future finished meanwhile or is dropped.
                    if let Ok(Some(Ok(value))) = py.detach(|| recv(None)) {
                        drop_in_runtime(value);
                    }
                    return Err(interrupt);
                }
            }
        }
    }
}

/// Drops `value` inside the runtime, so a lock guard among it releases in the background.
pub(crate) fn drop_in_runtime<T>(value: T) {
    let _entered = runtime().enter();
    drop(value);
}

/// Runs `fut` on the runtime as an asyncio awaitable of the running loop. Cancelling the
/// awaitable drops the future (and a result that arrives too late is dropped in the runtime,
/// releasing a lock it holds).
pub(crate) fn awaitable<'py, T, F>(py: Python<'py>, fut: F) -> PyResult<Bound<'py, PyAny>>
where
    F: Future<Output = leasehold::Result<T>> + Send + 'static,
    T: for<'a> IntoPyObject<'a> + Send + 'static,
{
    check_fork(py)?;
    pyo3_async_runtimes::tokio::future_into_py(py, async move {
        let out = fut.await;
        out.map_err(|e| Python::attach(|py| errors::to_py(py, e)))
    })
}

/// Seconds from a Python duration: a non-negative `int`/`float` of seconds or a
/// `datetime.timedelta`. `what` names the argument in errors.
pub(crate) fn duration(py: Python<'_>, what: &str, value: &Bound<'_, PyAny>) -> PyResult<Duration> {
    let secs: f64 = if value.is_instance_of::<pyo3::types::PyBool>() {
        return Err(pyo3::exceptions::PyTypeError::new_err(format!(
            "{what} must be seconds (int or float) or a datetime.timedelta, not bool"
        )));
    } else if let Ok(s) = value.extract::<f64>() {
        s
    } else if value
        .is_instance(&py.import("datetime")?.getattr("timedelta")?)
        .unwrap_or(false)
    {
        value.call_method0("total_seconds")?.extract()?
    } else {
        return Err(pyo3::exceptions::PyTypeError::new_err(format!(
            "{what} must be seconds (int or float) or a datetime.timedelta, not {}",
            value.get_type().name()?
        )));
    };
    if !secs.is_finite() || secs < 0.0 {
        return Err(errors::invalid(
            py,
            format!("invalid {what}: {secs} s (must be a finite number of seconds, >= 0)"),
        ));
    }
    Duration::try_from_secs_f64(secs)
        .map_err(|_| errors::invalid(py, format!("invalid {what}: {secs} s is too long")))
}
