//! Warnings that can repeat, rate-limited per call site.
//!
//! A condition met in a loop (every grant of a wait arriving too late, every renewal round
//! refused) would otherwise log at the loop's pace. [`warn_throttled!`] logs the first
//! occurrence at once, then at most one per [`INTERVAL`] per call site, each carrying how many
//! were held back since the last (`suppressed`); the held-back ones go to `debug`.

use std::sync::LazyLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// The shortest time between two warnings of one call site.
pub(crate) const INTERVAL: Duration = Duration::from_secs(10);

static EPOCH: LazyLock<Instant> = LazyLock::new(Instant::now);

/// The state of one call site: when its next warning may be logged, and how many were held
/// back since the last.
pub(crate) struct Throttle {
    /// Milliseconds since [`EPOCH`] plus one (0: nothing logged yet).
    next_at: AtomicU64,
    suppressed: AtomicU64,
}

impl Throttle {
    pub(crate) const fn new() -> Self {
        Throttle {
            next_at: AtomicU64::new(0),
            suppressed: AtomicU64::new(0),
        }
    }

    /// Whether a warning may be logged now; if so, how many were held back before it.
    pub(crate) fn admit(&self) -> Option<u64> {
        self.admit_at(EPOCH.elapsed().as_millis() as u64 + 1)
    }

    fn admit_at(&self, now: u64) -> Option<u64> {
        let next = self.next_at.load(Ordering::Relaxed);
        let due = next == 0 || now >= next;
        if due
            && self
                .next_at
                .compare_exchange(
                    next,
                    now + INTERVAL.as_millis() as u64,
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                )
                .is_ok()
        {
            return Some(self.suppressed.swap(0, Ordering::Relaxed));
        }
        self.suppressed.fetch_add(1, Ordering::Relaxed);
        None
    }
}

/// `tracing::warn!` at most once per [`INTERVAL`] per call site (with a `suppressed` count),
/// `tracing::debug!` otherwise. Same arguments as `tracing::warn!`: fields, then the message.
macro_rules! warn_throttled {
    ($($arg:tt)+) => {{
        static THROTTLE: $crate::core::throttle::Throttle = $crate::core::throttle::Throttle::new();
        match THROTTLE.admit() {
            Some(suppressed) => ::tracing::warn!(suppressed, $($arg)+),
            None => ::tracing::debug!($($arg)+),
        }
    }};
}
pub(crate) use warn_throttled;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_warning_per_interval_with_the_count_held_back() {
        let t = Throttle::new();
        let step = INTERVAL.as_millis() as u64;
        assert_eq!(t.admit_at(1), Some(0), "the first is logged at once");
        for now in 2..1_000 {
            assert_eq!(t.admit_at(now), None, "a burst is held back");
        }
        assert_eq!(t.admit_at(step), None, "not before the interval");
        assert_eq!(t.admit_at(step + 1), Some(999), "then one, with the count");
        assert_eq!(t.admit_at(step + 2), None);
        assert_eq!(t.admit_at(10 * step), Some(1));
    }
}
