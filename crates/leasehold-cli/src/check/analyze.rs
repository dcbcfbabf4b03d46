//! What the workers' logs say: holds, overlaps, stale writes, lost increments, gaps.

use std::collections::BTreeMap;
use std::path::Path;

use serde::Serialize;
use serde_json::Value;

/// A critical section as its worker saw it: from acquisition to its release (or to the end of
/// the log, for a worker killed or stopped inside it).
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Hold {
    pub(crate) worker: u64,
    pub(crate) start: f64,
    pub(crate) end: f64,
    pub(crate) fence: u64,
    /// When the worker asked for the lock: the lease cannot outlive `asked + ttl` (the server
    /// set its TTL after that), so this bounds the lease's validity.
    pub(crate) asked: f64,
}

/// A write at the register.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Write {
    pub(crate) worker: u64,
    pub(crate) t: f64,
    pub(crate) accepted: bool,
    /// A number lower than one the register had already accepted (or equal, from another
    /// worker): a write from a holder that had been superseded.
    pub(crate) stale: bool,
}

/// A fault and when it was active.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Fault {
    pub(crate) kind: String,
    /// The worker a `pause` or `kill` hit.
    pub(crate) worker: Option<u64>,
    /// The lock nodes a server fault hit (indexes).
    pub(crate) nodes: Vec<usize>,
    pub(crate) start: f64,
    pub(crate) end: f64,
}

#[derive(Debug, Default, Serialize, Clone)]
pub(crate) struct Counts {
    pub(crate) acquisitions: u64,
    pub(crate) overlaps: u64,
    pub(crate) overlaps_within_ttl: u64,
    pub(crate) stale_writes_attempted: u64,
    pub(crate) stale_writes_accepted: u64,
}

#[derive(Debug, Serialize)]
pub(crate) struct Analysis {
    pub(crate) acquisitions: u64,
    pub(crate) writes_acknowledged: u64,
    pub(crate) overlaps: u64,
    /// Overlaps while both leases were still within their TTL: two holders the lock server
    /// itself let in at once. Impossible with a token-checked release unless the server lost
    /// the lock (a restart without persistence, a failover).
    pub(crate) overlaps_within_ttl: u64,
    /// Reads refused by the register (a later holder had claimed a higher number first).
    pub(crate) stale_reads_rejected: u64,
    /// Lock operations that failed (server down, stalled, moved).
    pub(crate) lock_errors: u64,
    pub(crate) stale_writes_attempted: u64,
    pub(crate) stale_writes_accepted: u64,
    pub(crate) lost_increments: i64,
    pub(crate) max_gap_ms: f64,
    pub(crate) per_fault: BTreeMap<String, Counts>,
    #[serde(skip)]
    pub(crate) holds: Vec<Hold>,
    #[serde(skip)]
    pub(crate) writes: Vec<Write>,
    #[serde(skip)]
    pub(crate) overlap_spans: Vec<(f64, f64)>,
}

/// See where it is used.
const CLOCK_ALLOWANCE_MS: f64 = 1.0;

/// One pair of overlapping critical sections.
struct Overlap {
    start: f64,
    end: f64,
    within_ttl: bool,
}

/// Reads every `*.log` in `dir` and analyses them against the register's final value.
pub(crate) fn analyze(
    dir: &Path,
    final_value: u64,
    faults: &[Fault],
    ttl_ms: f64,
    end_of_run: f64,
) -> anyhow::Result<Analysis> {
    let mut events: Vec<Value> = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path.extension().and_then(|e| e.to_str()) == Some("log") {
            for line in std::fs::read_to_string(&path)?.lines() {
                if let Ok(v) = serde_json::from_str::<Value>(line) {
                    events.push(v);
                }
            }
        }
    }
    let t = |v: &Value| v["t"].as_f64().unwrap_or(0.0);
    events.sort_by(|a, b| t(a).total_cmp(&t(b)));

    let mut open: BTreeMap<u64, Hold> = BTreeMap::new();
    let mut holds = Vec::new();
    let mut acquisitions_at: Vec<(f64, u64)> = Vec::new();
    let mut writes = Vec::new();
    let mut highest: Option<(u64, u64)> = None;
    let mut stale_reads_rejected = 0;
    let mut lock_errors = 0;
    for e in &events {
        let w = e["w"].as_u64().unwrap_or(0);
        match e["ev"].as_str() {
            Some("acquired") => {
                acquisitions_at.push((t(e), w));
                if let Some(h) = open.remove(&w) {
                    holds.push(Hold { end: t(e), ..h });
                }
                open.insert(
                    w,
                    Hold {
                        worker: w,
                        start: t(e),
                        end: t(e),
                        fence: e["fence"].as_u64().unwrap_or(0),
                        asked: e["asked"].as_f64().unwrap_or(t(e)),
                    },
                );
            }
            Some("write") => {
                // Stale: a holder with a higher number (or the same number, another worker)
                // had already been at the register, by a read or a write: this writer was
                // superseded, and fencing must refuse it.
                let fence = e["fence"].as_u64().unwrap_or(0);
                let stale = highest.is_some_and(|(n, by)| fence < n || (fence == n && by != w));
                let accepted = e["accepted"].as_bool().unwrap_or(false);
                if accepted && highest.is_none_or(|(n, _)| fence >= n) {
                    highest = Some((fence, w));
                }
                writes.push(Write {
                    worker: w,
                    t: t(e),
                    accepted,
                    stale,
                });
            }
            Some("read") if e["rejected"].as_bool() == Some(true) => stale_reads_rejected += 1,
            Some("read") => {
                // A read that went through (fenced or not) is this holder's first contact
                // with the register: from then on, lower numbers are superseded.
                if let Some(fence) = e["fence"].as_u64()
                    && highest.is_none_or(|(n, _)| fence > n)
                {
                    highest = Some((fence, w));
                }
            }
            Some("error") => lock_errors += 1,
            Some("released") => {
                if let Some(h) = open.remove(&w) {
                    holds.push(Hold { end: t(e), ..h });
                }
            }
            _ => {}
        }
    }
    // Killed or still stopped inside its critical section: it lasted until the end of the run
    // (a killed one only until its lease ran out, but then it wrote nothing either).
    for (_, h) in open {
        let end = if faults
            .iter()
            .any(|f| f.kind == "kill" && f.worker == Some(h.worker))
        {
            (h.start + ttl_ms).min(end_of_run)
        } else {
            end_of_run
        };
        holds.push(Hold { end, ..h });
    }
    holds.sort_by(|a, b| a.start.total_cmp(&b.start));

    let mut overlaps = Vec::new();
    for (i, a) in holds.iter().enumerate() {
        for b in &holds[i + 1..] {
            if b.start >= a.end {
                break;
            }
            if a.worker != b.worker {
                let end = a.end.min(b.end);
                let valid_until = (a.asked + ttl_ms).min(b.asked + ttl_ms).min(end);
                overlaps.push(Overlap {
                    start: b.start,
                    end,
                    // 1 ms of allowance: the server expires keys by its own clock, the logs
                    // use CLOCK_MONOTONIC, and the two may run at slightly different rates.
                    within_ttl: b.start < valid_until - CLOCK_ALLOWANCE_MS,
                });
            }
        }
    }
    // Longest stretch with nobody inside a critical section.
    let mut max_gap: f64 = 0.0;
    let mut covered_until = holds.first().map_or(0.0, |h| h.end);
    for h in holds.iter().skip(1) {
        if h.start > covered_until {
            max_gap = max_gap.max(h.start - covered_until);
        }
        covered_until = covered_until.max(h.end);
    }

    let in_fault = |at: f64| -> Option<&str> {
        faults
            .iter()
            .find(|f| at >= f.start && at <= f.end + 2.0 * ttl_ms)
            .map(|f| f.kind.as_str())
    };
    let mut per_fault: BTreeMap<String, Counts> = BTreeMap::new();
    for f in faults {
        per_fault.entry(f.kind.clone()).or_default();
    }
    per_fault.entry("none".into()).or_default();
    for (at, _) in &acquisitions_at {
        per_fault
            .entry(in_fault(*at).unwrap_or("none").into())
            .or_default()
            .acquisitions += 1;
    }
    for o in &overlaps {
        let c = per_fault
            .entry(in_fault(o.start).unwrap_or("none").into())
            .or_default();
        c.overlaps += 1;
        if o.within_ttl {
            c.overlaps_within_ttl += 1;
        }
    }
    for w in writes.iter().filter(|w| w.stale) {
        let c = per_fault
            .entry(in_fault(w.t).unwrap_or("none").into())
            .or_default();
        c.stale_writes_attempted += 1;
        if w.accepted {
            c.stale_writes_accepted += 1;
        }
    }
    let acknowledged = writes.iter().filter(|w| w.accepted).count() as u64;
    Ok(Analysis {
        acquisitions: acquisitions_at.len() as u64,
        writes_acknowledged: acknowledged,
        overlaps: overlaps.len() as u64,
        overlaps_within_ttl: overlaps.iter().filter(|o| o.within_ttl).count() as u64,
        stale_reads_rejected,
        lock_errors,
        stale_writes_attempted: writes.iter().filter(|w| w.stale).count() as u64,
        stale_writes_accepted: writes.iter().filter(|w| w.stale && w.accepted).count() as u64,
        lost_increments: acknowledged as i64 - final_value as i64,
        max_gap_ms: max_gap,
        per_fault,
        holds,
        writes,
        overlap_spans: overlaps.iter().map(|o| (o.start, o.end)).collect(),
    })
}
