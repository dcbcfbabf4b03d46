//! What the workers' logs say: holds, overlaps, stale writes, lost increments, gaps.

use std::collections::BTreeMap;
use std::path::Path;

use serde::Serialize;
use serde_json::Value;

/// A critical section as its worker saw it: from the acquisition's reply to the release
/// request (for a worker killed inside it: to the kill; stopped: to the end of the run).
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Hold {
    pub(crate) worker: u64,
    pub(crate) start: f64,
    pub(crate) end: f64,
    pub(crate) fence: u64,
    /// The end of the lease's validity as the library computed it (from when the successful
    /// attempt was sent, minus the drift allowance): the server keeps the key at least that
    /// long, unless it loses it (a restart without persistence, a failover).
    pub(crate) valid_until: f64,
    /// A reader of a read-write lock (readers may overlap each other, never a writer).
    pub(crate) reader: bool,
}

/// A write at the register.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Write {
    pub(crate) worker: u64,
    pub(crate) t: f64,
    /// The value written (what the worker read, plus one).
    pub(crate) value: u64,
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
    /// The role of the etcd member an etcd fault hit (`leader`, `follower`); absent for the
    /// other faults.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) role: Option<String>,
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
    /// Every operation the workers completed or saw fail.
    pub(crate) operations: u64,
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
    /// Of those, the ones the library refused because the lock could not be kept safely
    /// there (session locks through a transaction pooler).
    pub(crate) lock_refusals: u64,
    pub(crate) stale_writes_attempted: u64,
    pub(crate) stale_writes_accepted: u64,
    /// Writes whose result the worker never saw (killed meanwhile, or an error reply).
    pub(crate) writes_in_doubt: u64,
    /// Of those, the ones the register's value shows were applied.
    pub(crate) writes_in_doubt_applied: u64,
    /// Acknowledged writes (plus in-doubt writes that were applied) minus the register's final
    /// value: increments that a stale write overwrote. Negative would mean the register moved
    /// more than the writes explain.
    pub(crate) lost_increments: i64,
    pub(crate) max_gap_ms: f64,
    /// The most critical sections open at one instant.
    pub(crate) max_holders: u64,
    /// The most critical sections open at one instant while their leases were all valid: what
    /// the lock server admitted (at most 1 for a lock, N for a semaphore of N permits, unless
    /// the server lost its state).
    pub(crate) max_valid_holders: u64,
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

/// The most intervals `[start, end)` open at one instant (an interval ending when another
/// starts does not overlap it).
fn max_concurrent(intervals: impl Iterator<Item = (f64, f64)>) -> u64 {
    let mut events: Vec<(f64, i64)> = intervals
        .filter(|(s, e)| e > s)
        .flat_map(|(s, e)| [(s, 1), (e, -1)])
        .collect();
    // At equal times, ends before starts.
    events.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
    let (mut open, mut max) = (0i64, 0i64);
    for (_, d) in events {
        open += d;
        max = max.max(open);
    }
    max as u64
}

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
    // Operations that completed (or failed): acquisitions, reads, writes, releases, errors;
    // not the `writing` / `releasing` marks logged before a request.
    let operations = events
        .iter()
        .filter(|e| {
            matches!(
                e["ev"].as_str(),
                Some("acquired" | "read" | "write" | "released" | "error")
            )
        })
        .count() as u64;
    events.sort_by(|a, b| t(a).total_cmp(&t(b)));

    let mut open: BTreeMap<u64, Hold> = BTreeMap::new();
    let mut holds = Vec::new();
    let mut acquisitions_at: Vec<(f64, u64)> = Vec::new();
    let mut writes = Vec::new();
    let mut highest: Option<(u64, u64)> = None;
    let mut stale_reads_rejected = 0;
    // Writes started and never answered (the worker was killed) or answered by an error.
    let mut pending: BTreeMap<u64, (u64, bool)> = BTreeMap::new();
    let mut in_doubt: Vec<u64> = Vec::new();
    let mut lock_errors = 0;
    let mut lock_refusals = 0;
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
                        valid_until: e["valid_until"].as_f64().unwrap_or(t(e)),
                        reader: e["side"] == "read",
                    },
                );
            }
            Some("writing") => {
                // Stale: a holder with a higher number (or the same number, another worker)
                // had already been at the register, by a read or a write, before this write
                // was sent: this writer was superseded, and fencing must refuse it. (Events
                // are logged after their replies, so "already" errs on the side of not stale.)
                let fence = e["fence"].as_u64().unwrap_or(0);
                let stale = highest.is_some_and(|(n, by)| fence < n || (fence == n && by != w));
                pending.insert(w, (e["value"].as_u64().unwrap_or(0), stale));
            }
            Some("write") => {
                let value = e["value"].as_u64().unwrap_or(0);
                let stale = pending.remove(&w).is_some_and(|(_, stale)| stale);
                if e["in_doubt"].as_bool() == Some(true) {
                    in_doubt.push(value);
                    continue;
                }
                let fence = e["fence"].as_u64().unwrap_or(0);
                let accepted = e["accepted"].as_bool().unwrap_or(false);
                if accepted && highest.is_none_or(|(n, _)| fence >= n) {
                    highest = Some((fence, w));
                }
                writes.push(Write {
                    worker: w,
                    t: t(e),
                    value,
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
            Some("error") if e["op"] != "read" => {
                lock_errors += 1;
                if e["refused"] == true {
                    lock_refusals += 1;
                }
            }
            // The critical section ends when the worker asks for the release (the server may
            // free the lock before the worker logs the reply).
            Some("releasing") | Some("released") => {
                if let Some(h) = open.remove(&w) {
                    holds.push(Hold { end: t(e), ..h });
                }
            }
            _ => {}
        }
    }
    // Killed or still stopped inside its critical section: a killed one's section ended when
    // it was killed, a stopped one's lasts until the end of the run.
    for (_, h) in open {
        let end = faults
            .iter()
            .find(|f| f.kind == "kill" && f.worker == Some(h.worker) && f.end >= h.start)
            .map_or(end_of_run, |f| f.start.max(h.start));
        holds.push(Hold { end, ..h });
    }
    holds.sort_by(|a, b| a.start.total_cmp(&b.start));

    let mut overlaps = Vec::new();
    for (i, a) in holds.iter().enumerate() {
        for b in &holds[i + 1..] {
            if b.start >= a.end {
                break;
            }
            // Readers share the lock: only a pair with a writer (or a plain holder) counts.
            if a.worker != b.worker && !(a.reader && b.reader) {
                let end = a.end.min(b.end);
                let valid_until = a.valid_until.min(b.valid_until).min(end);
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
    in_doubt.extend(pending.into_values().map(|(value, _)| value));
    let acknowledged = writes.iter().filter(|w| w.accepted).count() as u64;
    // An in-doubt write was applied if the register went through its value and no
    // acknowledged write wrote that value (each applied write moves the register up by one).
    let acknowledged_values: std::collections::BTreeSet<u64> = writes
        .iter()
        .filter(|w| w.accepted)
        .map(|w| w.value)
        .collect();
    let mut applied_in_doubt: Vec<u64> = in_doubt
        .iter()
        .copied()
        .filter(|v| *v <= final_value && !acknowledged_values.contains(v))
        .collect();
    applied_in_doubt.sort_unstable();
    applied_in_doubt.dedup();
    Ok(Analysis {
        operations,
        acquisitions: acquisitions_at.len() as u64,
        writes_acknowledged: acknowledged,
        overlaps: overlaps.len() as u64,
        overlaps_within_ttl: overlaps.iter().filter(|o| o.within_ttl).count() as u64,
        stale_reads_rejected,
        lock_errors,
        lock_refusals,
        stale_writes_attempted: writes.iter().filter(|w| w.stale).count() as u64,
        stale_writes_accepted: writes.iter().filter(|w| w.stale && w.accepted).count() as u64,
        writes_in_doubt: in_doubt.len() as u64,
        writes_in_doubt_applied: applied_in_doubt.len() as u64,
        lost_increments: (acknowledged + applied_in_doubt.len() as u64) as i64 - final_value as i64,
        max_gap_ms: max_gap,
        max_holders: max_concurrent(holds.iter().map(|h| (h.start, h.end))),
        max_valid_holders: max_concurrent(
            holds
                .iter()
                .map(|h| (h.start, h.end.min(h.valid_until) - CLOCK_ALLOWANCE_MS)),
        ),
        per_fault,
        holds,
        writes,
        overlap_spans: overlaps.iter().map(|o| (o.start, o.end)).collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Writes `events` (each with its worker `w`) as worker logs and analyses them.
    fn run(events: &[Value], final_value: u64, faults: &[Fault]) -> Analysis {
        let dir = tempfile::tempdir().unwrap();
        let mut by_worker: BTreeMap<u64, String> = BTreeMap::new();
        for e in events {
            let line = by_worker.entry(e["w"].as_u64().unwrap()).or_default();
            line.push_str(&format!("{e}\n"));
        }
        for (w, text) in by_worker {
            std::fs::write(dir.path().join(format!("worker-{w}.log")), text).unwrap();
        }
        analyze(dir.path(), final_value, faults, 300.0, 10_000.0).unwrap()
    }

    fn acquired(w: u64, t: f64, valid_until: f64, fence: u64) -> Value {
        json!({"ev": "acquired", "w": w, "t": t, "asked": t, "valid_until": valid_until, "fence": fence})
    }
    fn read(w: u64, t: f64, value: u64, fence: u64) -> Value {
        json!({"ev": "read", "w": w, "t": t, "value": value, "fence": fence})
    }
    fn writing(w: u64, t: f64, value: u64, fence: u64) -> Value {
        json!({"ev": "writing", "w": w, "t": t, "value": value, "fence": fence})
    }
    fn write(w: u64, t: f64, value: u64, fence: u64, accepted: bool) -> Value {
        json!({"ev": "write", "w": w, "t": t, "value": value, "fence": fence, "accepted": accepted})
    }
    fn releasing(w: u64, t: f64) -> Value {
        json!({"ev": "releasing", "w": w, "t": t})
    }

    #[test]
    fn sequential_holders_are_clean() {
        let a = run(
            &[
                acquired(0, 0.0, 290.0, 1),
                read(0, 1.0, 0, 1),
                writing(0, 2.0, 1, 1),
                write(0, 3.0, 1, 1, true),
                releasing(0, 4.0),
                acquired(1, 5.0, 295.0, 2),
                read(1, 6.0, 1, 2),
                writing(1, 7.0, 2, 2),
                write(1, 8.0, 2, 2, true),
                releasing(1, 9.0),
            ],
            2,
            &[],
        );
        assert_eq!(
            (a.acquisitions, a.overlaps, a.stale_writes_attempted),
            (2, 0, 0)
        );
        assert_eq!((a.writes_acknowledged, a.lost_increments), (2, 0));
    }

    #[test]
    fn readers_overlap_each_other_but_not_a_writer() {
        let read = |w: u64, t: f64| json!({"ev": "acquired", "w": w, "t": t, "asked": t, "valid_until": t + 290.0, "fence": 0, "side": "read"});
        let a = run(
            &[
                read(0, 0.0),
                read(1, 10.0),
                releasing(0, 50.0),
                releasing(1, 60.0),
                // A writer that came in while a reader's lease was still valid.
                read(2, 100.0),
                acquired(3, 120.0, 400.0, 1),
                releasing(2, 130.0),
                releasing(3, 140.0),
            ],
            0,
            &[],
        );
        assert_eq!((a.overlaps, a.overlaps_within_ttl), (1, 1));
        assert_eq!(a.max_valid_holders, 2);
    }

    #[test]
    fn holders_at_once_count_only_valid_permits_for_the_bound() {
        // Three holders at once, but the first one's lease ran out at 50 before the third
        // came in at 60: two valid at once, three open at once.
        let a = run(
            &[
                acquired(0, 0.0, 50.0, 0),
                acquired(1, 10.0, 300.0, 0),
                acquired(2, 60.0, 300.0, 0),
                releasing(0, 100.0),
                releasing(1, 110.0),
                releasing(2, 120.0),
                // Back to back: one ends as the next starts.
                acquired(0, 200.0, 400.0, 0),
                releasing(0, 210.0),
                acquired(1, 210.0, 400.0, 0),
                releasing(1, 220.0),
            ],
            0,
            &[],
        );
        assert_eq!((a.max_holders, a.max_valid_holders), (3, 2));
    }

    #[test]
    fn a_paused_holder_overlaps_its_successor_and_its_refused_write_is_stale() {
        let a = run(
            &[
                acquired(0, 0.0, 290.0, 1),
                read(0, 1.0, 0, 1),
                // 0 is frozen past its validity; 1 gets the lock after it expired.
                acquired(1, 301.0, 590.0, 2),
                read(1, 302.0, 0, 2),
                writing(1, 303.0, 1, 2),
                write(1, 304.0, 1, 2, true),
                writing(0, 600.0, 1, 1),
                write(0, 601.0, 1, 1, false),
                releasing(0, 602.0),
                releasing(1, 603.0),
            ],
            1,
            &[],
        );
        assert_eq!(a.overlaps, 1);
        assert_eq!(
            a.overlaps_within_ttl, 0,
            "0's lease had ended when 1 got in"
        );
        assert_eq!((a.stale_writes_attempted, a.stale_writes_accepted), (1, 0));
        assert_eq!(a.lost_increments, 0);
    }

    #[test]
    fn two_valid_leases_at_once_and_an_accepted_stale_write_are_seen() {
        let a = run(
            &[
                acquired(0, 0.0, 290.0, 1),
                read(0, 1.0, 0, 1),
                acquired(1, 10.0, 300.0, 2),
                read(1, 11.0, 0, 2),
                writing(1, 12.0, 1, 2),
                write(1, 13.0, 1, 2, true),
                // A register without fencing takes 0's late write: 1's increment is lost.
                writing(0, 20.0, 1, 1),
                write(0, 21.0, 1, 1, true),
                releasing(0, 22.0),
                releasing(1, 23.0),
            ],
            1,
            &[],
        );
        assert_eq!((a.overlaps, a.overlaps_within_ttl), (1, 1));
        assert_eq!((a.stale_writes_attempted, a.stale_writes_accepted), (1, 1));
        assert_eq!(a.lost_increments, 1);
    }

    #[test]
    fn a_write_in_doubt_counts_if_the_register_shows_it() {
        let events = [
            acquired(0, 0.0, 290.0, 1),
            read(0, 1.0, 0, 1),
            writing(0, 2.0, 1, 1),
            // killed here: no result
        ];
        let kill = Fault {
            kind: "kill".into(),
            worker: Some(0),
            nodes: vec![],
            role: None,
            start: 3.0,
            end: 4.0,
        };
        let applied = run(&events, 1, std::slice::from_ref(&kill));
        assert_eq!(
            (applied.writes_in_doubt, applied.writes_in_doubt_applied),
            (1, 1)
        );
        assert_eq!(applied.lost_increments, 0);
        let not_applied = run(&events, 0, std::slice::from_ref(&kill));
        assert_eq!(not_applied.writes_in_doubt_applied, 0);
        assert_eq!(not_applied.lost_increments, 0);
        // The killed worker's section ends at the kill.
        assert_eq!(applied.holds[0].end, 3.0);
    }

    #[test]
    fn large_gapped_fencing_numbers_like_etcd_revisions_are_fine() {
        // etcd's numbers are revisions: large, increasing, never consecutive per key.
        let (a, b, c) = (1_000_017, 1_000_042, 1_000_043);
        let r = run(
            &[
                acquired(0, 0.0, 290.0, a),
                read(0, 1.0, 0, a),
                writing(0, 2.0, 1, a),
                write(0, 3.0, 1, a, true),
                releasing(0, 4.0),
                acquired(1, 5.0, 295.0, b),
                read(1, 6.0, 1, b),
                // 1 is frozen past its validity; 2 gets in with the next revision.
                acquired(2, 301.0, 590.0, c),
                read(2, 302.0, 1, c),
                writing(2, 303.0, 2, c),
                write(2, 304.0, 2, c, true),
                releasing(2, 305.0),
                // 1 resumes: its write carries a number below the register's.
                writing(1, 400.0, 2, b),
                write(1, 401.0, 2, b, false),
                releasing(1, 402.0),
            ],
            2,
            &[],
        );
        assert_eq!(r.acquisitions, 3);
        assert_eq!((r.overlaps, r.overlaps_within_ttl), (1, 0));
        assert_eq!((r.stale_writes_attempted, r.stale_writes_accepted), (1, 0));
        assert_eq!((r.writes_acknowledged, r.lost_increments), (2, 0));
    }

    #[test]
    fn a_write_sent_before_a_later_read_is_not_called_stale() {
        // 0's write reaches the register first, but its reply is logged after 1's read.
        let a = run(
            &[
                acquired(0, 0.0, 290.0, 1),
                read(0, 1.0, 0, 1),
                writing(0, 2.0, 1, 1),
                releasing(0, 2.5),
                acquired(1, 3.0, 290.0, 2),
                read(1, 4.0, 1, 2),
                write(0, 5.0, 1, 1, true),
                writing(1, 6.0, 2, 2),
                write(1, 7.0, 2, 2, true),
                releasing(1, 8.0),
            ],
            2,
            &[],
        );
        assert_eq!(a.stale_writes_attempted, 0);
        assert_eq!(a.lost_increments, 0);
    }
}
