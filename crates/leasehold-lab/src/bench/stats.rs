//! Latency recording and the summary every workload reports.

use std::time::Duration;

use hdrhistogram::Histogram;
use serde::Serialize;

/// Latencies in microseconds (1 us .. 60 s, 3 significant digits).
pub(crate) struct Latencies(Histogram<u64>);

impl Latencies {
    pub(crate) fn new() -> Self {
        Latencies(Histogram::new_with_bounds(1, 60_000_000, 3).expect("valid histogram bounds"))
    }

    pub(crate) fn record(&mut self, d: Duration) {
        let us = u64::try_from(d.as_micros())
            .unwrap_or(u64::MAX)
            .clamp(1, 60_000_000);
        // In bounds by the clamp above.
        let _ = self.0.record(us);
    }

    /// `count` latencies of `us` microseconds each (merging another process's histogram).
    pub(crate) fn record_n(&mut self, us: u64, count: u64) {
        let _ = self.0.record_n(us.clamp(1, 60_000_000), count);
    }

    /// Every recorded value with its count, `[us, count]`: enough to merge exactly.
    pub(crate) fn recorded(&self) -> Vec<[u64; 2]> {
        self.0
            .iter_recorded()
            .map(|v| [v.value_iterated_to(), v.count_at_value()])
            .collect()
    }

    /// How many latencies were recorded.
    pub(crate) fn len(&self) -> u64 {
        self.0.len()
    }

    pub(crate) fn quantile(&self, q: f64) -> u64 {
        self.0.value_at_quantile(q)
    }

    /// The CDF as (latency us, fraction) points, for plots.
    pub(crate) fn cdf(&self) -> Vec<(f64, f64)> {
        let total = self.0.len().max(1) as f64;
        let mut seen = 0u64;
        self.0
            .iter_recorded()
            .map(|v| {
                seen += v.count_since_last_iteration();
                (v.value_iterated_to() as f64, seen as f64 / total)
            })
            .collect()
    }
}

/// The numbers a workload reports for one system.
#[derive(Debug, Clone, Serialize, serde::Deserialize, Default)]
pub(crate) struct Summary {
    pub(crate) ops_per_s: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) p50_us: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) p99_us: Option<u64>,
    /// Workload-specific extras (W3's handoff figures, W5's renewal figures, settings).
    #[serde(flatten)]
    pub(crate) extra: serde_json::Map<String, serde_json::Value>,
}

impl Summary {
    pub(crate) fn from_latencies(ops: u64, elapsed: Duration, lat: &Latencies) -> Self {
        Summary {
            ops_per_s: ops as f64 / elapsed.as_secs_f64().max(1e-9),
            p50_us: Some(lat.quantile(0.50)),
            p99_us: Some(lat.quantile(0.99)),
            extra: Default::default(),
        }
    }

    pub(crate) fn with(mut self, key: &str, value: impl Into<serde_json::Value>) -> Self {
        self.extra.insert(key.to_string(), value.into());
        self
    }
}

/// The median of `values` (the middle one; the lower middle for an even count).
pub(crate) fn median(values: &mut [f64]) -> f64 {
    values.sort_by(|a, b| a.total_cmp(b));
    values
        .get((values.len().max(1) - 1) / 2)
        .copied()
        .unwrap_or(0.0)
}
