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
    pub(crate) worker: Option<u64>,
    pub(crate) start: f64,
    pub(crate) end: f64,
}

#[derive(Debug, Default, Serialize, Clone)]
pub(crate) struct Counts {
    pub(crate) acquisitions: u64,
    pub(crate) overlaps: u64,
    pub(crate) stale_writes_attempted: u64,
    pub(crate) stale_writes_accepted: u64,
}

#[derive(Debug, Serialize)]
pub(crate) struct Analysis {
    pub(crate) acquisitions: u64,
    pub(crate) writes_acknowledged: u64,
    pub(crate) overlaps: u64,
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
                    },
                );
            }
            Some("write") => {
                // Stale: the register had already taken a write with a higher number, or with
                // the same number from another worker (what fencing must refuse).
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

    let mut overlap_spans = Vec::new();
    for (i, a) in holds.iter().enumerate() {
        for b in &holds[i + 1..] {
            if b.start >= a.end {
                break;
            }
            if a.worker != b.worker {
                overlap_spans.push((b.start, a.end.min(b.end)));
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
    for (start, _) in &overlap_spans {
        per_fault
            .entry(in_fault(*start).unwrap_or("none").into())
            .or_default()
            .overlaps += 1;
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
        overlaps: overlap_spans.len() as u64,
        stale_writes_attempted: writes.iter().filter(|w| w.stale).count() as u64,
        stale_writes_accepted: writes.iter().filter(|w| w.stale && w.accepted).count() as u64,
        lost_increments: acknowledged as i64 - final_value as i64,
        max_gap_ms: max_gap,
        per_fault,
        holds,
        writes,
        overlap_spans,
    })
}
