//! The native addon of the `leasehold` npm package: Node.js bindings over the Rust library, so
//! that Node, Rust, Python and the CLI speak the same protocol (same keys, scripts, queues and
//! fencing counters). The package's JavaScript (`index.js`) adds the idioms on top: checked
//! arguments, `AbortSignal`s, `await using`, `withLock`, error classes, async iterators; see
//! its README section.
//!
//! Every wait and round trip runs on the addon's tokio runtime (one worker thread unless
//! `LEASEHOLD_NODE_WORKER_THREADS` says otherwise); nothing blocks Node's event loop.

#![warn(missing_docs)]
// Under `cfg(test)` (clippy's --all-targets) napi-derive registers no exports, so nothing
// reaches the module's functions.
#![cfg_attr(test, allow(dead_code))]

mod errors;
mod lease;
mod locker;
mod options;
mod watch;

/// Waits until no background clean-up of an abandoned wait is running in this process, at most
/// `timeout` ms ([`leasehold::cleanups_settled`]); whether they settled. What an aborted wait
/// took (a place in a fair queue, a lock granted as it was given up) is given back by then. A
/// process about to exit awaits it first; otherwise what a clean-up did not finish waits out
/// its TTL.
#[napi_derive::napi]
pub async fn cleanups_settled(timeout: f64) -> napi::Result<bool> {
    let timeout = options::millis("timeout", timeout, false)?;
    Ok(leasehold::cleanups_settled(timeout).await)
}

/// The environment variable that sets the runtime's worker threads (default 1).
const WORKER_THREADS: &str = "LEASEHOLD_NODE_WORKER_THREADS";

/// The addon's runtime, made when Node loads it. One worker thread by default: every call
/// comes from the one JavaScript thread, and each is a handoff to the runtime and back, which
/// costs least when one thread does all the Rust side (no wake-up of a second worker in
/// between). Measured on this project's 2-core machine against one worker: W1 188 against
/// 158 us a cycle with two workers, the fair W3 handoff 180 against 67 us; W2 (64 concurrent
/// tasks) does more with two (25 000 against 15 700 cycles/s), so
/// `LEASEHOLD_NODE_WORKER_THREADS` sets another number.
#[napi_derive::module_init]
fn init() {
    let workers = std::env::var(WORKER_THREADS)
        .ok()
        .and_then(|v| v.trim().parse::<usize>().ok())
        .filter(|n| (1..=64).contains(n))
        .unwrap_or(1);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers)
        .thread_name("leasehold")
        .enable_all()
        .build()
        .expect("a tokio runtime");
    napi::bindgen_prelude::create_custom_tokio_runtime(runtime);
}
