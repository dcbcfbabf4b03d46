//! `LeaderWatch`: the changes of an election's leadership, blocking or awaitable.

use std::sync::Arc;
use std::time::Duration;

use pyo3::prelude::*;

use crate::runtime::{Process, awaitable, block_on, runtime};

/// Follows an election's leadership (made by `Locker.watch_leader`): each change of term, or
/// the election left without a leader.
#[pyclass(module = "leasehold._native", frozen)]
pub struct LeaderWatch {
    watch: Arc<tokio::sync::Mutex<leasehold::LeaderWatch>>,
    owner: Process,
}

impl LeaderWatch {
    /// Starts following `election` (its task runs on the runtime), checking at least `every`.
    pub(crate) fn start(election: &leasehold::Election, every: Duration) -> Self {
        let _entered = runtime().enter();
        LeaderWatch {
            watch: Arc::new(tokio::sync::Mutex::new(election.watch(every))),
            owner: Process::this(),
        }
    }

    fn next(
        &self,
    ) -> impl std::future::Future<Output = leasehold::Result<Option<(String, u64)>>> + Send + 'static
    {
        let watch = self.watch.clone();
        async move {
            let leader = watch.lock().await.changed().await?;
            Ok(leader.map(|l| (l.id, l.term)))
        }
    }
}

#[pymethods]
impl LeaderWatch {
    /// The leader as last seen: `(id, term)`, or None (nobody, or not read yet).
    #[getter]
    fn current(&self) -> Option<(String, u64)> {
        self.watch
            .try_lock()
            .ok()
            .and_then(|w| w.current())
            .map(|l| (l.id, l.term))
    }

    /// Waits (GIL released; Ctrl-C cancels) for the next change and returns the new leader,
    /// or None when nobody leads.
    fn changed(&self, py: Python<'_>) -> PyResult<Option<(String, u64)>> {
        self.owner.check(py, "leader watch")?;
        block_on(py, self.next())
    }

    /// `changed()` as an awaitable.
    fn changed_async<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        self.owner.check(py, "leader watch")?;
        awaitable(py, self.next())
    }
}
