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
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
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
        keys::counter(keys::acquisitions(backend, fair, outcome)).increment(1);
        if let (Outcome::Acquired, Some(begun)) = (outcome, begun) {
            keys::histogram(keys::waits(backend, fair)).record(begun.elapsed());
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
        keys::histogram(&keys::HOLD).record(since.elapsed());
    }
    #[cfg(not(feature = "metrics"))]
    let _ = since;
}

/// The renewer extended a lease.
#[inline]
pub(crate) fn renewed() {
    #[cfg(feature = "metrics")]
    keys::counter(&keys::RENEWALS).increment(1);
}

/// A lease was declared lost.
#[inline]
pub(crate) fn lost(reason: LossReason) {
    #[cfg(feature = "metrics")]
    keys::counter(match reason {
        LossReason::NotHeld => &keys::LOST_NOT_HELD,
        LossReason::Expired => &keys::LOST_EXPIRED,
    })
    .increment(1);
    #[cfg(not(feature = "metrics"))]
    let _ = reason;
}

/// A fair release handed the lock to a waiter.
#[inline]
pub(crate) fn handoff() {
    #[cfg(feature = "metrics")]
    keys::counter(&keys::HANDOFFS).increment(1);
}

/// A request went to a server.
#[inline]
pub(crate) fn round_trip() {
    #[cfg(feature = "metrics")]
    keys::counter(&keys::ROUND_TRIPS).increment(1);
}

/// Every metric's keys (name and labels), built once. The `metrics` macros build a key at
/// each event unless its name and labels are literals: a vector of labels (an allocation) and
/// a hash, even with no recorder installed. The events here happen on every acquisition,
/// release and request, so each takes its key from these tables and hands it to the recorder
/// (which, with none installed, drops the event).
#[cfg(feature = "metrics")]
mod keys {
    use std::sync::LazyLock;

    use metrics::{Counter, Histogram, Key, Label, Level, Metadata};

    use super::{Outcome, names};
    use crate::core::kind::Backend;

    /// As the macros describe an event of this module.
    static METADATA: Metadata<'static> =
        Metadata::new(module_path!(), Level::INFO, Some(module_path!()));

    /// The current recorder's counter for `key`.
    pub(super) fn counter(key: &Key) -> Counter {
        metrics::with_recorder(|r| r.register_counter(key, &METADATA))
    }

    /// The current recorder's histogram for `key`.
    pub(super) fn histogram(key: &Key) -> Histogram {
        metrics::with_recorder(|r| r.register_histogram(key, &METADATA))
    }

    pub(super) static HOLD: Key = Key::from_static_name(names::HOLD_SECONDS);
    pub(super) static RENEWALS: Key = Key::from_static_name(names::RENEWALS);
    pub(super) static HANDOFFS: Key = Key::from_static_name(names::HANDOFFS);
    pub(super) static ROUND_TRIPS: Key = Key::from_static_name(names::ROUND_TRIPS);
    static NOT_HELD: [Label; 1] = [Label::from_static_parts("reason", "not_held")];
    static EXPIRED: [Label; 1] = [Label::from_static_parts("reason", "expired")];
    pub(super) static LOST_NOT_HELD: Key = Key::from_static_parts(names::LEASES_LOST, &NOT_HELD);
    pub(super) static LOST_EXPIRED: Key = Key::from_static_parts(names::LEASES_LOST, &EXPIRED);

    const OUTCOMES: [Outcome; 4] = [
        Outcome::Acquired,
        Outcome::Busy,
        Outcome::TimedOut,
        Outcome::Error,
    ];

    fn outcome_label(outcome: Outcome) -> &'static str {
        match outcome {
            Outcome::Acquired => "acquired",
            Outcome::Busy => "busy",
            Outcome::TimedOut => "timed_out",
            Outcome::Error => "error",
        }
    }

    fn mode(fair: bool) -> &'static str {
        if fair { "fair" } else { "plain" }
    }

    /// `(backend, fair)`'s place in the tables: backends in [`Backend::ALL`]'s order, plain
    /// then fair.
    fn index(backend: Backend, fair: bool) -> usize {
        let b = Backend::ALL.iter().position(|x| *x == backend);
        // Every backend is in `ALL`; were one not, its events would count under the first.
        b.unwrap_or(0) * 2 + usize::from(fair)
    }

    static ACQUISITIONS: LazyLock<Vec<Key>> = LazyLock::new(|| {
        OUTCOMES
            .iter()
            .flat_map(|&outcome| {
                Backend::ALL.iter().flat_map(move |&backend| {
                    [false, true].map(|fair| {
                        let labels = vec![
                            Label::from_static_parts("outcome", outcome_label(outcome)),
                            Label::from_static_parts("mode", mode(fair)),
                            Label::from_static_parts("backend", backend.name()),
                        ];
                        Key::from_parts(names::ACQUISITIONS, labels)
                    })
                })
            })
            .collect()
    });

    static WAITS: LazyLock<Vec<Key>> = LazyLock::new(|| {
        Backend::ALL
            .iter()
            .flat_map(|&backend| {
                [false, true].map(|fair| {
                    let labels = vec![
                        Label::from_static_parts("mode", mode(fair)),
                        Label::from_static_parts("backend", backend.name()),
                    ];
                    Key::from_parts(names::WAIT_SECONDS, labels)
                })
            })
            .collect()
    });

    /// The key of an acquisition's counter.
    pub(super) fn acquisitions(backend: Backend, fair: bool, outcome: Outcome) -> &'static Key {
        let o = OUTCOMES.iter().position(|x| *x == outcome).unwrap_or(0);
        &ACQUISITIONS[o * Backend::ALL.len() * 2 + index(backend, fair)]
    }

    /// The key of an acquisition's waiting time.
    pub(super) fn waits(backend: Backend, fair: bool) -> &'static Key {
        &WAITS[index(backend, fair)]
    }
}

#[cfg(all(test, feature = "metrics"))]
mod tests {
    use std::sync::{Arc, Mutex};

    use metrics::{
        Counter, Gauge, Histogram, Key, KeyName, Metadata, Recorder, SharedString, Unit,
    };

    use super::*;

    /// Keeps the key of every metric registered.
    #[derive(Default)]
    struct Keys(Arc<Mutex<Vec<Key>>>);

    impl Recorder for Keys {
        fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
        fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
        fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
        fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
            self.0.lock().unwrap().push(key.clone());
            Counter::noop()
        }
        fn register_gauge(&self, key: &Key, _: &Metadata<'_>) -> Gauge {
            self.0.lock().unwrap().push(key.clone());
            Gauge::noop()
        }
        fn register_histogram(&self, key: &Key, _: &Metadata<'_>) -> Histogram {
            self.0.lock().unwrap().push(key.clone());
            Histogram::noop()
        }
    }

    /// `(name, labels)` of each key `f` registered, labels as `k=v`.
    fn registered(f: impl FnOnce()) -> Vec<(String, Vec<String>)> {
        let keys = Keys::default();
        metrics::with_local_recorder(&keys, f);
        let list = keys.0.lock().unwrap();
        list.iter()
            .map(|k| {
                let labels = k.labels().map(|l| format!("{}={}", l.key(), l.value()));
                (k.name().to_string(), labels.collect())
            })
            .collect()
    }

    /// Each event is counted under its own name and labels: every combination of the
    /// acquisition's tables (which are indexed, so a wrong index would label another
    /// backend, mode or outcome), and the events without labels or with one.
    #[test]
    fn every_event_is_registered_under_its_name_and_labels() {
        let outcomes = [
            (Outcome::Acquired, "acquired"),
            (Outcome::Busy, "busy"),
            (Outcome::TimedOut, "timed_out"),
            (Outcome::Error, "error"),
        ];
        for backend in Backend::ALL {
            for (fair, mode) in [(false, "plain"), (true, "fair")] {
                for (outcome, label) in outcomes {
                    let got =
                        registered(|| acquisition(backend, fair, outcome, Some(Instant::now())));
                    let mut want = vec![(
                        names::ACQUISITIONS.to_string(),
                        vec![
                            format!("outcome={label}"),
                            format!("mode={mode}"),
                            format!("backend={}", backend.name()),
                        ],
                    )];
                    if outcome == Outcome::Acquired {
                        want.push((
                            names::WAIT_SECONDS.to_string(),
                            vec![
                                format!("mode={mode}"),
                                format!("backend={}", backend.name()),
                            ],
                        ));
                    }
                    assert_eq!(got, want);
                }
            }
        }
        let plain = |name: &str| vec![(name.to_string(), Vec::<String>::new())];
        assert_eq!(
            registered(|| held(Some(Instant::now()))),
            plain(names::HOLD_SECONDS)
        );
        assert_eq!(registered(renewed), plain(names::RENEWALS));
        assert_eq!(registered(handoff), plain(names::HANDOFFS));
        assert_eq!(registered(round_trip), plain(names::ROUND_TRIPS));
        for (reason, label) in [
            (LossReason::NotHeld, "not_held"),
            (LossReason::Expired, "expired"),
        ] {
            let got = registered(|| lost(reason));
            let want = vec![(
                names::LEASES_LOST.to_string(),
                vec![format!("reason={label}")],
            )];
            assert_eq!(got, want);
        }
    }
}
