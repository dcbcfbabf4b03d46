//! The native module of the `leasehold` Python package (`leasehold._native`): Python bindings
//! over the Rust library, so that Python and Rust processes speak the same protocol (same keys,
//! scripts and fencing counters). The Python package (`python/leasehold/`) adds the context
//! managers, the loss policies and the typing on top; see its docstrings and the README's
//! Python section.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

use pyo3::prelude::*;

mod errors;
mod lease;
mod locker;
mod runtime;
mod watch;

/// The module `leasehold._native`.
#[pymodule]
fn _native(module: &Bound<'_, PyModule>) -> PyResult<()> {
    errors::register(module)?;
    module.add_class::<locker::Locker>()?;
    module.add_class::<locker::Request>()?;
    module.add_class::<lease::Lease>()?;
    module.add_class::<watch::LeaderWatch>()?;
    module.add_function(wrap_pyfunction!(locker::connect_async, module)?)?;
    module.add_function(wrap_pyfunction!(cleanups_settled, module)?)?;
    module.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}

/// Waits, with the GIL released, until no background clean-up of an abandoned wait is running
/// in this process ([`leasehold::cleanups_settled`]), at most `timeout`; whether they settled.
#[pyfunction]
fn cleanups_settled(py: Python<'_>, timeout: &Bound<'_, PyAny>) -> PyResult<bool> {
    let timeout = runtime::duration(py, "timeout", timeout)?;
    runtime::block_on(py, async move {
        Ok::<_, leasehold::Error>(leasehold::cleanups_settled(timeout).await)
    })
}
