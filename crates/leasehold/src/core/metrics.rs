//! Counters and histograms through the [`metrics`](https://docs.rs/metrics) facade.
//!
//! Off by default, at no cost: without the cargo feature `metrics` every function here is an
//! empty inline function (no clock read, no atomic). With it, each event goes to whatever
//! recorder the application installed (`metrics-exporter-prometheus`, say, as `leasehold run
//! --metrics-addr` does); with no recorder installed the facade drops it.
//!
//! | name | kind | labels | what |
//! |---|---|---|---|
//! | `leasehold_acquisitions_total` | counter | `outcome`: `acquired`, `busy`, `timed_out`, `error`; `mode`: `plain`, `fair`; `backend`: `redis`, `redlock`, `etcd`, `postgres`, `postgres-lease`, `memory`, `file` | calls of `try_acquire` / `acquire` on a [`RedisClient`](crate::redis::RedisClient) or a [`Locker`](crate::Locker), by how they ended |
//! | `leasehold_wait_seconds` | histogram | `mode`, `backend` | from the call to holding the lock, for acquisitions that got it |
//! | `leasehold_hold_seconds` | histogram | | from the acquisition to the release (or the guard's drop), any backend |
//! | `leasehold_renewals_total` | counter | | leases extended by the renewer |
//! | `leasehold_leases_lost_total` | counter | `reason`: `not_held`, `expired` | leases declared lost |
//! | `leasehold_handoffs_total` | counter | | fair releases that handed the lock to a waiter |
//! | `leasehold_round_trips_total` | counter | | requests sent to a Redis or Valkey server (a pipeline counts once) |
//!
//! No label carries a key or a token: keys are unbounded (a label per key would grow the
//! recorder without limit) and tokens are secrets.

use std::time::Instant;

use crate::core::error::LossReason;
use crate::core::kind::Backend;

/// The metric names, for dashboards and tests.
pub mod names {
    /// Counter: acquisitions by `outcome` and `mode`.
    pub const ACQUISITIONS: &str = "leasehold_acquisitions_total";
    /// Histogram (seconds): waiting time of acquisitions that got the lock, by `mode`.
    pub const WAIT_SECONDS: &str = "leasehold_wait_seconds";
    /// Histogram (seconds): how long locks were held.
    pub const HOLD_SECONDS: &str = "leasehold_hold_seconds";
    /// Counter: successful renewals.
    pub const RENEWALS: &str = "leasehold_renewals_total";
    /// Counter: leases declared lost, by `reason`.
    pub const LEASES_LOST: &str = "leasehold_leases_lost_total";
    /// Counter: fair releases that handed the lock over.
    pub const HANDOFFS: &str = "leasehold_handoffs_total";
    /// Counter: requests sent to a server.
    pub const ROUND_TRIPS: &str = "leasehold_round_trips_total";
}

/// How an acquisition ended.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Outcome {
    Acquired,
    Busy,
    TimedOut,
    Error,
}

/// The start of something timed: `Some` only when metrics are compiled in, so that without
/// the feature not even the clock is read.
#[inline]
pub(crate) fn start() -> Option<Instant> {
    #[cfg(feature = "metrics")]
    {
        Some(Instant::now())
    }
    #[cfg(not(feature = "metrics"))]
    {
        None
    }
}

/// An acquisition started at `begun` ended with `outcome`.
#[inline]
pub(crate) fn acquisition(backend: Backend, fair: bool, outcome: Outcome, begun: Option<Instant>) {
    #[cfg(feature = "metrics")]
    {
        let mode = if fair { "fair" } else { "plain" };
        let label = match outcome {
            Outcome::Acquired => "acquired",
            Outcome::Busy => "busy",
            Outcome::TimedOut => "timed_out",
            Outcome::Error => "error",
        };
        metrics::counter!(
            names::ACQUISITIONS,
            "outcome" => label, "mode" => mode, "backend" => backend.name()
        )
        .increment(1);
        if let (Outcome::Acquired, Some(begun)) = (outcome, begun) {
            metrics::histogram!(names::WAIT_SECONDS, "mode" => mode, "backend" => backend.name())
                .record(begun.elapsed());
        }
    }
    #[cfg(not(feature = "metrics"))]
    let _ = (backend, fair, outcome, begun);
}

/// A lock acquired at `since` was released (or its guard dropped).
#[inline]
pub(crate) fn held(since: Option<Instant>) {
    #[cfg(feature = "metrics")]
    if let Some(since) = since {
        metrics::histogram!(names::HOLD_SECONDS).record(since.elapsed());
    }
    #[cfg(not(feature = "metrics"))]
    let _ = since;
}

/// The renewer extended a lease.
#[inline]
pub(crate) fn renewed() {
    #[cfg(feature = "metrics")]
    metrics::counter!(names::RENEWALS).increment(1);
}

/// A lease was declared lost.
#[inline]
pub(crate) fn lost(reason: LossReason) {
    #[cfg(feature = "metrics")]
    {
        let label = match reason {
            LossReason::NotHeld => "not_held",
            LossReason::Expired => "expired",
        };
        metrics::counter!(names::LEASES_LOST, "reason" => label).increment(1);
    }
    #[cfg(not(feature = "metrics"))]
    let _ = reason;
}

/// A fair release handed the lock to a waiter.
#[inline]
pub(crate) fn handoff() {
    #[cfg(feature = "metrics")]
    metrics::counter!(names::HANDOFFS).increment(1);
}

/// A request went to a server.
#[inline]
pub(crate) fn round_trip() {
    #[cfg(feature = "metrics")]
    metrics::counter!(names::ROUND_TRIPS).increment(1);
}
