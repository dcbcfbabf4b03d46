//! The process's tokio runtime behind every call, the blocking bridge for the synchronous API,
//! and what a fork leaves behind.
//!
//! **Blocking calls release the GIL and stay interruptible.** The calling thread runs the call's
//! future itself (`Runtime::block_on`) with the GIL released, so the reply wakes it directly.
//! (Spawning the future on a runtime thread and waiting for its result on a channel added a
//! thread wake-up each way to every call: about 30-40 us a lock cycle on a 2-core machine; see
//! `bench/results/issue32-target6-python.md`.) Inside `leasehold::blocking_call`, so on one
//! Redis or Valkey server the call's round trips go on a socket the thread owns and reads
//! itself, blocking: no runtime thread is woken at all. The shared connections and background
//! tasks (renewals, the subscriber, the Redis connection's reader) stay on the runtime's
//! threads. A round trip on the thread's socket finishes (or reaches the response timeout)
//! before a signal is seen. The wait wakes every [`SIGNAL_POLL`] to let Python run its signal handlers. If one
//! raises (Ctrl-C's `KeyboardInterrupt`), the future is dropped inside the runtime: a lock
//! granted at the last moment is released in the background, and a wait that was cancelled
//! removes its queue entry (the library's cancellation contract). So an interrupted wait never
//! leaves the lock held.
//!
//! **One runtime per process.** `fork` copies none of the runtime's threads, so a child that
//! used the parent's runtime would wait for ever. The runtime is made per process id: a forked
//! child gets its own on first use (the parent's copy is leaked, never dropped: dropping it
//! would wait for threads that do not exist). Objects made before the fork (a `Locker`, a
//! `Lease`) hold the parent's connections and runtime, so they refuse use in the child
//! ([`Process::check`]) and a lease dropped there leaves the parent's lock alone.

use std::future::Future;
use std::pin::Pin;
use std::sync::Mutex;
use std::time::Duration;

use pyo3::prelude::*;
use pyo3_async_runtimes::TaskLocals;

use crate::errors;

/// How often a blocked call lets Python check for signals.
const SIGNAL_POLL: Duration = Duration::from_millis(50);

/// The current process's runtime, by process id (leaked: it lives as long as the process).
/// Locked only by threads that hold the GIL (see [`drop_in_runtime`]), so no thread holds it
/// while another forks (`os.fork` holds the GIL too).
static CURRENT: Mutex<Option<(u32, &'static tokio::runtime::Runtime)>> = Mutex::new(None);

/// The runtime of this process, made on first use (and again in a forked child).
pub(crate) fn runtime() -> &'static tokio::runtime::Runtime {
    let pid = std::process::id();
    let mut current = CURRENT.lock().unwrap_or_else(|p| p.into_inner());
    match *current {
        Some((owner, runtime)) if owner == pid => runtime,
        _ => {
            let runtime = Box::leak(Box::new(
                tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(2)
                    .thread_name("leasehold")
                    .enable_all()
                    .build()
                    .expect("a tokio runtime"),
            ));
            *current = Some((pid, runtime));
            runtime
        }
    }
}

/// The process an object was made in (a forked child must not use it).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Process {
    pid: u32,
}

impl Process {
    /// This process.
    pub(crate) fn this() -> Self {
        Process {
            pid: std::process::id(),
        }
    }

    /// The owner's process id.
    pub(crate) fn pid(self) -> u32 {
        self.pid
    }

    /// True in a forked child of the owner.
    pub(crate) fn forked(self) -> bool {
        self.pid != std::process::id()
    }

    /// Refuses use from a forked child: the object holds the parent's connections.
    pub(crate) fn check(self, py: Python<'_>, what: &str) -> PyResult<()> {
        if !self.forked() {
            return Ok(());
        }
        Err(errors::raise(
            py,
            "ForkedProcess",
            format!(
                "this {what} was made in process {} before a fork, and holds that process's \
                 connections; make a new Locker in this process",
                self.pid
            ),
            &[],
        ))
    }
}

/// An error a call's future ends with, made into its Python exception (with the GIL).
pub(crate) trait IntoPyErr: Send + 'static {
    fn into_py_err(self, py: Python<'_>) -> PyErr;
}

impl IntoPyErr for leasehold::Error {
    fn into_py_err(self, py: Python<'_>) -> PyErr {
        errors::to_py(py, self)
    }
}

/// Runs `fut` on the calling thread with the GIL released (see the module docs).
pub(crate) fn block_on<T, E, F>(py: Python<'_>, fut: F) -> PyResult<T>
where
    F: Future<Output = Result<T, E>> + Send + 'static,
    T: Send + 'static,
    E: IntoPyErr,
{
    let runtime = runtime();
    // A thread inside a runtime cannot `block_on`. On a multi-thread runtime's thread (ours: a
    // callback such as `on_lost` calling back in) it first hands its queued tasks to another
    // thread (`block_in_place`): blocking with them still queued here would leave them, and the
    // call itself if it spawns one, waiting for ever. Inside any other runtime (Python embedded
    // in a program on a current-thread runtime), the wait runs on a thread of its own.
    let inside = tokio::runtime::Handle::try_current()
        .ok()
        .map(|h| h.runtime_flavor());
    let mut fut = Box::pin(fut);
    loop {
        let polled = py.detach(|| {
            let wait =
                || runtime.block_on(async { tokio::time::timeout(SIGNAL_POLL, &mut fut).await });
            match inside {
                // The calling thread blocks on the call anyway: its round trips may go on a
                // socket it reads itself (no runtime thread woken either way).
                None => leasehold::blocking_call(wait),
                Some(tokio::runtime::RuntimeFlavor::MultiThread) => {
                    tokio::task::block_in_place(wait)
                }
                Some(_) => std::thread::scope(|s| {
                    s.spawn(wait)
                        .join()
                        .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
                }),
            }
        });
        match polled {
            Ok(result) => return result.map_err(|e| e.into_py_err(py)),
            Err(_elapsed) => {
                if let Err(interrupt) = py.check_signals() {
                    drop_in_runtime(fut);
                    return Err(interrupt);
                }
            }
        }
    }
}

/// Drops `value` inside the runtime, so a lock guard among it releases in the background.
/// On one of the runtime's own threads it is dropped there, without [`runtime`]'s lock.
pub(crate) fn drop_in_runtime<T>(value: T) {
    if tokio::runtime::Handle::try_current().is_ok() {
        drop(value);
        return;
    }
    let _entered = runtime().enter();
    drop(value);
}

/// Runs `fut` on the runtime as an asyncio awaitable of the running loop. Cancelling the
/// awaitable drops the future (and a result that arrives too late is dropped in the runtime,
/// releasing a lock it holds).
pub(crate) fn awaitable<'py, T, E, F>(py: Python<'py>, fut: F) -> PyResult<Bound<'py, PyAny>>
where
    F: Future<Output = Result<T, E>> + Send + 'static,
    T: for<'a> IntoPyObject<'a> + Send + 'static,
    E: IntoPyErr,
{
    pyo3_async_runtimes::generic::future_into_py::<ProcessTokio, _, T>(py, async move {
        let out = fut.await;
        out.map_err(|e| Python::attach(|py| e.into_py_err(py)))
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

/// [`runtime`] for pyo3-async-runtimes (its own tokio runtime is one per library, not per
/// process). Task locals as its tokio module keeps them.
struct ProcessTokio;

tokio::task_local! {
    static TASK_LOCALS: std::cell::OnceCell<TaskLocals>;
}

impl pyo3_async_runtimes::generic::Runtime for ProcessTokio {
    type JoinError = tokio::task::JoinError;
    type JoinHandle = tokio::task::JoinHandle<()>;

    fn spawn<F>(fut: F) -> Self::JoinHandle
    where
        F: Future<Output = ()> + Send + 'static,
    {
        runtime().spawn(fut)
    }

    fn spawn_blocking<F>(f: F) -> Self::JoinHandle
    where
        F: FnOnce() + Send + 'static,
    {
        runtime().spawn_blocking(f)
    }
}

impl pyo3_async_runtimes::generic::ContextExt for ProcessTokio {
    fn scope<F, R>(locals: TaskLocals, fut: F) -> Pin<Box<dyn Future<Output = R> + Send>>
    where
        F: Future<Output = R> + Send + 'static,
    {
        let cell = std::cell::OnceCell::new();
        let _ = cell.set(locals);
        Box::pin(TASK_LOCALS.scope(cell, fut))
    }

    fn get_task_locals() -> Option<TaskLocals> {
        TASK_LOCALS
            .try_with(|c| c.get().cloned())
            .unwrap_or_default()
    }
}
