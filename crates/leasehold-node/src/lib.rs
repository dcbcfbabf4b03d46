//! The native addon of the `leasehold` npm package: Node.js bindings over the Rust library, so
//! that Node, Rust, Python and the CLI speak the same protocol (same keys, scripts, queues and
//! fencing counters). The package's JavaScript (`index.js`) adds the idioms on top: checked
//! arguments, `AbortSignal`s, `await using`, `withLock`, error classes, async iterators; see
//! its README section.
//!
//! Every wait and round trip runs on the addon's tokio runtime (two worker threads); nothing
//! blocks Node's event loop.

#![warn(missing_docs)]
// Under `cfg(test)` (clippy's --all-targets) napi-derive registers no exports, so nothing
// reaches the module's functions.
#![cfg_attr(test, allow(dead_code))]

mod errors;
mod lease;
mod locker;
mod options;
mod watch;

/// The addon's runtime, made when Node loads it: two workers, as leasehold's other bindings
/// use (the library's waits are I/O, not CPU).
#[napi_derive::module_init]
fn init() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("leasehold")
        .enable_all()
        .build()
        .expect("a tokio runtime");
    napi::bindgen_prelude::create_custom_tokio_runtime(runtime);
}
