//! The settings of a [`Redlock`](super::Redlock): per-node timeout, clock drift allowance.

use std::time::Duration;

/// Settings of a [`Redlock`](super::Redlock).
#[derive(Debug, Clone, PartialEq)]
pub struct RedlockOptions {
    pub(super) node_timeout: Duration,
    drift_factor: f64,
    drift_floor: Duration,
}

impl Default for RedlockOptions {
    /// A 50 ms per-node timeout, drift `ttl * 0.01 + 2 ms`.
    fn default() -> Self {
        RedlockOptions {
            node_timeout: Duration::from_millis(50),
            drift_factor: 0.01,
            drift_floor: Duration::from_millis(2),
        }
    }
}

impl RedlockOptions {
    /// The defaults.
    pub fn new() -> Self {
        Self::default()
    }

    /// Bound on each node's answer (and on connecting to a node). Keep it far below the TTL: a
    /// slow node then costs the attempt this much validity at most.
    pub fn node_timeout(mut self, timeout: Duration) -> Self {
        self.node_timeout = timeout;
        self
    }

    /// Clock drift allowance: `ttl * factor + floor`, the factor clamped to `0.0 ..= 0.5` (NaN
    /// keeps the default, 0.01).
    pub fn drift(mut self, factor: f64, floor: Duration) -> Self {
        // `clamp` passes NaN through, and `drift_for` would panic on it.
        self.drift_factor = if factor.is_nan() {
            RedlockOptions::default().drift_factor
        } else {
            factor.clamp(0.0, 0.5)
        };
        self.drift_floor = floor;
        self
    }

    /// The per-node timeout.
    pub fn node_timeout_bound(&self) -> Duration {
        self.node_timeout
    }

    /// The drift allowed for a lock of `ttl`.
    pub fn drift_for(&self, ttl: Duration) -> Duration {
        ttl.mul_f64(self.drift_factor)
            .saturating_add(self.drift_floor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Found by the property tests (tests/properties/options.rs, redlock_drift_is_bounded;
    // minimal input factor = NaN): `drift_for` panicked converting NaN seconds; and a floor
    // near Duration::MAX overflowed the sum.
    #[test]
    fn a_nan_factor_or_a_huge_floor_does_not_panic() {
        let o = RedlockOptions::new().drift(f64::NAN, Duration::from_millis(2));
        assert_eq!(
            o.drift_for(Duration::from_secs(10)),
            Duration::from_millis(102)
        );
        let o = RedlockOptions::new().drift(0.5, Duration::MAX);
        assert_eq!(o.drift_for(Duration::from_secs(10)), Duration::MAX);
    }
}
