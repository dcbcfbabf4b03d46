//! The targets, checked against the results, and the lines that show them on the
//! plots (one set of bounds for both).

use std::collections::BTreeMap;

use serde_json::{Value, json};

mod verdict;

use super::Results;
use super::plot::Mark;

/// Latency over its floor or reference (W1, W1T, W1B): p50 at most this many times.
const P50_OVER_FLOOR: f64 = 1.15;
/// W2: cycles/s at least this share of the floor's.
const W2_OF_FLOOR: f64 = 0.9;
/// W3: a handoff's p50, at most (us).
const HANDOFF_P50_US: f64 = 150.0;
/// W3, default mode: acquisitions/s at least this share of the best peer's.
const W3_OF_BEST_PEER: f64 = 0.95;
/// W3 fair with a client per worker: acquisitions/s at least this many times the best peer's.
const CROSS_CLIENT_OF_BEST_PEER: f64 = 1.2;
/// W3 fair: the longest wait, at most (ms).
const MAX_WAIT_MS: f64 = 60.0;
/// W4: Redlock p50 at N=5 at most this many times N=1.
const REDLOCK_N5_OVER_N1: f64 = 1.5;
/// W6: commands per handoff at the most waiters at most this many times at the fewest.
const HERD_GROWTH: f64 = 1.1;
/// History on against off, W1 cycles/s (issue 32, target 3).
const HISTORY_ON_OF_OFF: f64 = 0.85;

/// The best of the peers' `field` in workload `w` (each peer, and its tuned run where asked).
fn best_peer(r: &Results, w: &str, field: &str, tuned: bool) -> Option<f64> {
    let systems: Vec<String> = ["rslock", "redis-py", "python-redis-lock", "node-redlock"]
        .iter()
        .flat_map(|p| [p.to_string(), format!("{p}_tuned")])
        .filter(|p| tuned || !p.ends_with("_tuned"))
        .collect();
    best_of(r, w, &systems, field)
}

/// The highest `field` in workload `w` among `systems` (those measured).
fn best_of<S: AsRef<str>>(r: &Results, w: &str, systems: &[S], field: &str) -> Option<f64> {
    systems
        .iter()
        .filter_map(|p| r.get(w, p.as_ref(), field))
        .fold(None, |m: Option<f64>, v| Some(m.map_or(v, |m| m.max(v))))
}

/// W6's (waiters, commands per handoff) of one mode, by waiters.
fn herd(r: &Results, mode: &str) -> Vec<(f64, f64)> {
    let Some(systems) = r.workloads.get("W6") else {
        return Vec::new();
    };
    let per = |s: &Value| {
        Some((
            s.get("waiters")?.as_f64()?,
            s.get("commands_per_handoff")?.as_f64()?,
        ))
    };
    let mut pts: Vec<(f64, f64)> = systems
        .iter()
        .filter(|(n, _)| n.starts_with(&format!("leasehold_{mode}_")))
        .filter_map(|(_, s)| per(s))
        .collect();
    pts.sort_by(|a, b| a.0.total_cmp(&b.0));
    pts
}

/// The target lines of the plots, by plot file: each at the value the measured figure must
/// stay under or reach, on the plot's own axis (a latency on a CDF, acquisitions/s on a bar
/// chart), from the same bounds as [`targets`].
pub(super) fn marks(r: &Results) -> BTreeMap<&'static str, Vec<Mark>> {
    let mut marks: BTreeMap<&'static str, Vec<Mark>> = BTreeMap::new();
    let mut mark = |file: &'static str, label: String, value: Option<f64>| {
        if let Some(v) = value {
            marks.entry(file).or_default().push((label, v));
        }
    };
    mark(
        "w1_latency_cdf.svg",
        format!("target: p50 <= {P50_OVER_FLOOR} x the floor's"),
        r.get("W1", "floor", "p50_us").map(|f| f * P50_OVER_FLOOR),
    );
    mark(
        "w1t_latency_cdf.svg",
        format!("target: p50 <= {P50_OVER_FLOOR} x standalone's"),
        r.get("W1T", "leasehold_standalone", "p50_us")
            .map(|f| f * P50_OVER_FLOOR),
    );
    for floor in ["etcd_floor", "postgres_floor", "postgres_lease_rows_floor"] {
        mark(
            "w1b_latency_cdf.svg",
            format!("target: p50 <= {P50_OVER_FLOOR} x {floor}'s"),
            r.get("W1B", floor, "p50_us").map(|f| f * P50_OVER_FLOOR),
        );
    }
    mark(
        "w3_handoff_cdf.svg",
        format!("target: handoff p50 <= {HANDOFF_P50_US} us"),
        r.workloads.contains_key("W3").then_some(HANDOFF_P50_US),
    );
    mark(
        "w2_throughput.svg",
        format!("target: >= {W2_OF_FLOOR} x the floor"),
        r.get("W2", "floor", "ops_per_s").map(|f| f * W2_OF_FLOOR),
    );
    let best_w3 = best_peer(r, "W3", "ops_per_s", true);
    mark(
        "w3_throughput.svg",
        format!("target: >= {W3_OF_BEST_PEER} x the best peer (default mode)"),
        best_w3.map(|b| b * W3_OF_BEST_PEER),
    );
    mark(
        "w3_throughput.svg",
        "target: >= the best peer (fair)".into(),
        best_w3,
    );
    mark(
        "w3_throughput.svg",
        format!("target: >= {CROSS_CLIENT_OF_BEST_PEER} x the best peer (fair, a client each)"),
        best_w3.map(|b| b * CROSS_CLIENT_OF_BEST_PEER),
    );
    mark(
        "w3_throughput.svg",
        "ceiling: one hold after another (1 / the mean hold)".into(),
        r.get("W3", "leasehold_fair", "hold_us_mean")
            .map(|h| 1e6 / h),
    );
    let w4_one = r
        .workloads
        .get("W4")
        .and_then(|s| s.get("leasehold")?.get("n1")?.get("p50_us")?.as_f64());
    mark(
        "w4_redlock_latency.svg",
        format!("target: N=5 <= {REDLOCK_N5_OVER_N1} x leasehold at N=1"),
        w4_one.map(|one| one * REDLOCK_N5_OVER_N1),
    );
    mark(
        "w6_herd.svg",
        format!("target: fair <= {HERD_GROWTH} x its figure at the fewest waiters"),
        herd(r, "fair").first().map(|p| p.1 * HERD_GROWTH),
    );
    marks
}

/// The targets, each with the measured ratio and whether it is met; and, marked
/// `reference`, the rows that hold a floor (or a mode the target is not about) to the same
/// bound, to show what the machine allows: a run need not meet those.
pub(super) fn targets(r: &Results) -> Value {
    let out = std::cell::RefCell::new(Vec::new());
    let row = |name: &str, value: Option<f64>, bound: f64, at_most: bool, what: &str, reference| {
        let met = value.map(|v| if at_most { v <= bound } else { v >= bound });
        out.borrow_mut().push(json!({ "target": name, "measured": value, "bound": bound, "at_most": at_most, "met": met, "what": what, "reference": reference }));
    };
    let check = |name: &str, value: Option<f64>, bound: f64, at_most: bool, what: &str| {
        row(name, value, bound, at_most, what, false)
    };
    let reference = |name: &str, value: Option<f64>, bound: f64, at_most: bool, what: &str| {
        row(name, value, bound, at_most, what, true)
    };
    let ratio = |a: Option<f64>, b: Option<f64>| match (a, b) {
        (Some(a), Some(b)) if b > 0.0 => Some(a / b),
        _ => None,
    };
    check(
        "W1 p50 / floor p50 (multi_thread)",
        ratio(
            r.get("W1", "leasehold", "p50_us"),
            r.get("W1", "floor", "p50_us"),
        ),
        P50_OVER_FLOOR,
        true,
        "leasehold p50 <= 1.15 x the in-process floor",
    );
    check(
        "W1 p50 / floor p50 (current_thread)",
        ratio(
            r.get("W1", "leasehold_current_thread", "p50_us"),
            r.get("W1", "floor_current_thread", "p50_us"),
        ),
        P50_OVER_FLOOR,
        true,
        "same, current_thread runtime",
    );
    check(
        "W1 cycles/s / best peer",
        ratio(
            r.get("W1", "leasehold", "ops_per_s"),
            best_peer(r, "W1", "ops_per_s", false),
        ),
        0.97,
        false,
        "cycles/s >= 0.97 x the best peer",
    );
    check(
        "W1 cycles/s history on / off",
        ratio(
            r.get("W1", "leasehold_history", "ops_per_s"),
            r.get("W1", "leasehold", "ops_per_s"),
        ),
        HISTORY_ON_OF_OFF,
        false,
        "recording the lock history costs W1 at most 15 % of its cycles/s",
    );
    reference(
        "W1 floor cycles/s history on / off",
        ratio(
            r.get("W1", "floor_history", "ops_per_s"),
            r.get("W1", "floor", "ops_per_s"),
        ),
        HISTORY_ON_OF_OFF,
        false,
        "the events' commands with no lock logic and no script (SET NX PX + XADD + PEXPIRE, \
         DEL + XADD, pipelined) against the floor: what the machine itself allows",
    );
    reference(
        "W1 scripted floor cycles/s history on / off",
        ratio(
            r.get("W1", "floor_history_scripted", "ops_per_s"),
            r.get("W1", "floor", "ops_per_s"),
        ),
        HISTORY_ON_OF_OFF,
        false,
        "the same commands with each event made atomic with its command in a script, as the \
         target asks (SET NX PX, then XADD + PEXPIRE only if it set; DEL, then XADD only if it \
         deleted), with no lock logic, against the floor: what the machine allows the events \
         riding in the scripts",
    );
    reference(
        "W1 p50 history on / the scripted floor's",
        ratio(
            r.get("W1", "leasehold_history", "p50_us"),
            r.get("W1", "floor_history_scripted", "p50_us"),
        ),
        P50_OVER_FLOOR,
        true,
        "leasehold recording its history against the scripted floor above: what the lock's own \
         logic and the rest of its scripts (the retention's trim, a refused append caught) add \
         to a recorded cycle",
    );
    check(
        "W1 p50 cluster / standalone",
        ratio(
            r.get("W1T", "leasehold_cluster", "p50_us"),
            r.get("W1T", "leasehold_standalone", "p50_us"),
        ),
        P50_OVER_FLOOR,
        true,
        "W1T: leasehold on a cluster, 3 masters + 1 replica each, p50 <= 1.15 x standalone",
    );
    check(
        "W1 p50 sentinel / standalone",
        ratio(
            r.get("W1T", "leasehold_sentinel", "p50_us"),
            r.get("W1T", "leasehold_standalone", "p50_us"),
        ),
        P50_OVER_FLOOR,
        true,
        "W1T: leasehold through Sentinel, primary + replica, p50 <= 1.15 x standalone",
    );
    check(
        "W2 cycles/s / floor",
        ratio(
            r.get("W2", "leasehold", "ops_per_s"),
            r.get("W2", "floor", "ops_per_s"),
        ),
        W2_OF_FLOOR,
        false,
        ">= 0.9 x the in-process floor",
    );
    check(
        "W2 cycles/s / best peer",
        ratio(
            r.get("W2", "leasehold", "ops_per_s"),
            best_peer(r, "W2", "ops_per_s", false),
        ),
        1.0,
        false,
        ">= the best peer",
    );
    let best_w3 = best_peer(r, "W3", "ops_per_s", true);
    check(
        "W3 acquisitions/s / best peer",
        ratio(r.get("W3", "leasehold", "ops_per_s"), best_w3),
        W3_OF_BEST_PEER,
        false,
        ">= 0.95 x the best peer",
    );
    check(
        "W3 cross-worker handoff p50 (us)",
        r.get("W3", "leasehold", "handoff_p50_us"),
        HANDOFF_P50_US,
        true,
        "<= 150 us",
    );
    check(
        "W3 fair acquisitions/s / best peer",
        ratio(r.get("W3", "leasehold_fair", "ops_per_s"), best_w3),
        1.0,
        false,
        "fair mode: >= the best peer",
    );
    check(
        "W3 fair max wait (ms)",
        r.get("W3", "leasehold_fair", "max_wait_ms"),
        MAX_WAIT_MS,
        true,
        "fair mode: <= 60 ms",
    );
    check(
        "W3 fair same-worker rate",
        r.get("W3", "leasehold_fair", "same_worker_rate"),
        1.0 / 16.0,
        true,
        "fair mode: <= 1/16 (no re-taking by the releaser)",
    );
    check(
        "W3 fair cross-worker handoff p50 (us)",
        r.get("W3", "leasehold_fair", "handoff_p50_us"),
        HANDOFF_P50_US,
        true,
        "fair mode: <= 150 us",
    );
    // Issue 32, target 1: the same across clients (a client per worker: every handoff is a
    // message from one client to another, as between processes on different machines).
    let each = "leasehold_fair_client_each";
    check(
        "W3 fair, a client each: handoff p50 (us)",
        r.get("W3", each, "handoff_p50_us"),
        HANDOFF_P50_US,
        true,
        "fair mode across clients: <= 150 us",
    );
    reference(
        "W3 floor, a client each: handoff p50 (us)",
        r.get("W3", "floor_client_each", "handoff_p50_us"),
        HANDOFF_P50_US,
        true,
        "a turn passed round the same workers by one PUBLISH from one client's connection to \
         the next one's subscriber connection, with no lock (no queue, no token, no script): \
         what the machine itself allows a cross-client handoff",
    );
    reference(
        "W3 scripted floor, a client each: handoff p50 (us)",
        r.get("W3", "floor_scripted_client_each", "handoff_p50_us"),
        HANDOFF_P50_US,
        true,
        "the same turn passed by the script a fair release runs (the key checked and handed to \
         the queue's head, its entry read and deleted, the PUBLISH to that waiter's channel, the \
         next head read), each worker queueing again by a second script after its turn, with \
         no library: what the machine itself allows the handoff the target prescribes",
    );
    check(
        "W3 fair, a client each: acquisitions/s / best peer",
        ratio(r.get("W3", each, "ops_per_s"), best_w3),
        CROSS_CLIENT_OF_BEST_PEER,
        false,
        "fair mode across clients: >= 1.2 x the best peer (the 1 ms hold caps any library at \
         1 / hold: see the W3 throughput plot's ceiling)",
    );
    reference(
        "W3 the hold's ceiling / best peer",
        ratio(
            r.get("W3", each, "hold_us_mean").map(|us| 1e6 / us),
            best_w3,
        ),
        CROSS_CLIENT_OF_BEST_PEER,
        false,
        "1 / the mean hold (the most acquisitions a second any lock allows W3) against the best \
         peer: what the machine itself allows the ratio above",
    );
    check(
        "W3 fair, a client each: max wait (ms)",
        r.get("W3", each, "max_wait_ms"),
        MAX_WAIT_MS,
        true,
        "fair mode across clients: <= 60 ms",
    );
    // leasehold-py (the Python package on this library) beside the Python peers.
    let python_peers = [
        "redis-py",
        "python-redis-lock",
        "redis-py_tuned",
        "python-redis-lock_tuned",
    ];
    let best_python_w3 = best_of(r, "W3", &python_peers, "ops_per_s");
    // A cycle's cost is the time it takes, 1 / (cycles/s): Python's over Rust's is what the
    // binding adds to each acquire + release.
    let cycle_us = |system: &str| r.get("W1", system, "ops_per_s").map(|v| 1e6 / v);
    check(
        "W1 leasehold-py cycle cost over the Rust library (us)",
        cycle_us("leasehold-py")
            .zip(cycle_us("leasehold"))
            .map(|(py, rust)| py - rust),
        25.0,
        true,
        "Python: <= 25 us per acquire + release over Rust",
    );
    check(
        "W1 leasehold-py cycles/s / redis-py",
        ratio(
            r.get("W1", "leasehold-py", "ops_per_s"),
            r.get("W1", "redis-py", "ops_per_s"),
        ),
        1.5,
        false,
        "Python: >= 1.5 x redis-py's Lock",
    );
    check(
        "W3 leasehold-py (fair) acquisitions/s / the Rust library's",
        ratio(
            r.get("W3", "leasehold-py", "ops_per_s"),
            r.get("W3", "leasehold_fair", "ops_per_s"),
        ),
        0.9,
        false,
        "Python, fair: >= 0.9 x the Rust library's (one client, fair)",
    );
    check(
        "W3 leasehold-py (fair) acquisitions/s / best Python peer",
        ratio(r.get("W3", "leasehold-py", "ops_per_s"), best_python_w3),
        1.0,
        false,
        "Python, fair: >= the best Python peer's throughput",
    );
    check(
        "W3 leasehold-py (fair) max wait (ms)",
        r.get("W3", "leasehold-py", "max_wait_ms"),
        MAX_WAIT_MS,
        true,
        "Python, fair: <= 60 ms",
    );
    // leasehold-node (the Node.js package on this library) beside node-redlock (issue 33).
    let redlock_w3 = best_of(
        r,
        "W3",
        &["node-redlock", "node-redlock_tuned"],
        "ops_per_s",
    );
    check(
        "W1 leasehold-node cycles/s / node-redlock",
        ratio(
            r.get("W1", "leasehold-node", "ops_per_s"),
            r.get("W1", "node-redlock", "ops_per_s"),
        ),
        1.3,
        false,
        "Node.js: >= 1.3 x node-redlock",
    );
    reference(
        "W1 node_floor cycles/s / node-redlock",
        ratio(
            r.get("W1", "node_floor", "ops_per_s"),
            r.get("W1", "node-redlock", "ops_per_s"),
        ),
        1.3,
        false,
        "the same commands on one bare socket on Node's event loop (no library, no lock logic, \
         no thread handoff) against node-redlock: what this machine allows any Node library",
    );
    check(
        "W3 leasehold-node (fair) acquisitions/s / node-redlock",
        ratio(r.get("W3", "leasehold-node", "ops_per_s"), redlock_w3),
        2.0,
        false,
        "Node.js, fair: >= 2 x node-redlock's throughput (its better run, default or tuned; the \
         1 ms hold caps any library at 1 / hold)",
    );
    check(
        "W3 leasehold-node (fair) max wait (ms)",
        r.get("W3", "leasehold-node", "max_wait_ms"),
        MAX_WAIT_MS,
        true,
        "Node.js, fair: <= 60 ms",
    );
    let w4 = |system: &str, n: &str| {
        r.workloads
            .get("W4")?
            .get(system)?
            .get(n)?
            .get("p50_us")?
            .as_f64()
    };
    check(
        "W4 p50 N=5 / N=1",
        ratio(w4("leasehold", "n5"), w4("leasehold", "n1")),
        REDLOCK_N5_OVER_N1,
        true,
        "concurrent fan-out",
    );
    reference(
        "W4 floor p50 N=5 / N=1",
        ratio(w4("floor", "n5"), w4("floor", "n1")),
        REDLOCK_N5_OVER_N1,
        true,
        "the same round trips with no lock logic (SET NX PX, then DEL, on every node at once, \
         on at the quorum): what the machine itself allows",
    );
    // The herd: commands per handoff at the most waiters measured against the fewest.
    let w6 = |mode: &str| {
        let pts = herd(r, mode);
        ratio(pts.last().map(|p| p.1), pts.first().map(|p| p.1))
    };
    check(
        "W6 fair commands per handoff, most / fewest waiters",
        w6("fair"),
        HERD_GROWTH,
        true,
        "constant as waiters grow (fair mode: one waiter woken per release)",
    );
    reference(
        "W6 default commands per handoff, most / fewest waiters",
        w6("default"),
        HERD_GROWTH,
        true,
        "default mode: one waiter of the client woken per release, the others poll at their backoff (shown, not a target of this mode)",
    );
    for (name, s) in r.workloads.get("W7").into_iter().flatten() {
        check(
            &format!("W7 leases lost ({name})"),
            s.get("leases_lost").and_then(Value::as_f64),
            0.0,
            true,
            "0 lost",
        );
    }
    for (name, s) in r.workloads.get("W8").into_iter().flatten() {
        check(
            &format!("W8 errors ({name})"),
            s.get("errors").and_then(Value::as_f64),
            0.0,
            true,
            "errors 0 (acquisitions that timed out count separately)",
        );
    }
    // Issue 32, target 3 on etcd and PostgreSQL: history on against off (WB's W1), for
    // leasehold's lockers and their floors alike (`{system}_history` beside `{system}`).
    let on_off = |system: &str| {
        ratio(
            r.get("W1B", &format!("{system}_history"), "ops_per_s"),
            r.get("W1B", system, "ops_per_s"),
        )
    };
    for system in ["etcd", "postgres", "postgres_lease_rows"] {
        check(
            &format!("W1B cycles/s {system} history on / off"),
            on_off(system),
            HISTORY_ON_OF_OFF,
            false,
            "recording the lock history costs W1 at most 15 % of its cycles/s (the events ride in \
             the lock's own transaction or statement)",
        );
    }
    reference(
        "W1B floor cycles/s postgres fenced history on / off",
        on_off("postgres_fenced_floor"),
        HISTORY_ON_OF_OFF,
        false,
        "the fenced floor's statements each inserting their event and trimming the key's, with \
         no lock logic, against the fenced floor: what the machine allows an event riding in a \
         fenced advisory lock's statements",
    );
    for (system, floor, what) in [
        (
            "postgres",
            "postgres_statements_floor",
            "leasehold's own session lock statements, sent raw,",
        ),
        (
            "postgres_lease_rows",
            "postgres_lease_rows_floor",
            "the lease-row floor's statements",
        ),
    ] {
        reference(
            &format!("W1B floor cycles/s {system} history on / off"),
            on_off(floor),
            HISTORY_ON_OF_OFF,
            false,
            &format!(
                "{what} each appending its event and trimming the key's, with no lock logic, \
                 against the same without: what the machine allows {system}'s history"
            ),
        );
        reference(
            &format!("W1B p50 {system} history / its floor's"),
            ratio(
                r.get("W1B", &format!("{system}_history"), "p50_us"),
                r.get("W1B", &format!("{floor}_history"), "p50_us"),
            ),
            P50_OVER_FLOOR,
            true,
            "leasehold recording its history against the history floor above",
        );
    }
    // Issue 32, target 7: each backend against its own floor (WB's W1).
    for (system, floor, what) in [
        ("etcd", "etcd_floor", "a lease of its own per lock, reused"),
        (
            "etcd_session",
            "etcd_floor",
            "auto-extended: on the session lease",
        ),
        ("postgres", "postgres_floor", "session advisory locks"),
        (
            "postgres_lease_rows",
            "postgres_lease_rows_floor",
            "lease rows",
        ),
    ] {
        check(
            &format!("W1B p50 {system} / its floor"),
            ratio(
                r.get("W1B", system, "p50_us"),
                r.get("W1B", floor, "p50_us"),
            ),
            P50_OVER_FLOOR,
            true,
            &format!("leasehold on {system} ({what}) p50 <= 1.15 x the raw client's same requests"),
        );
    }
    reference(
        "W1B p50 postgres fenced floor / postgres floor",
        ratio(
            r.get("W1B", "postgres_fenced_floor", "p50_us"),
            r.get("W1B", "postgres_floor", "p50_us"),
        ),
        P50_OVER_FLOOR,
        true,
        "the raw client's advisory lock drawing a fencing number in the granting statement (the \
         counter row's upsert, a durable write) against the bare advisory lock: what fencing alone \
         costs a session lock, with no lock logic",
    );
    reference(
        "W1B p50 postgres statements floor / postgres floor",
        ratio(
            r.get("W1B", "postgres_statements_floor", "p50_us"),
            r.get("W1B", "postgres_floor", "p50_us"),
        ),
        P50_OVER_FLOOR,
        true,
        "leasehold's own session lock statements sent raw (the fence, the checks against a \
         pooler, the idle limit, the keepalive reads), with no client logic, against the bare \
         advisory lock: what the server charges for a fenced session lease",
    );
    reference(
        "W1B p50 postgres / the statements floor",
        ratio(
            r.get("W1B", "postgres", "p50_us"),
            r.get("W1B", "postgres_statements_floor", "p50_us"),
        ),
        P50_OVER_FLOOR,
        true,
        "leasehold's session locks against their own statements sent raw: the library's share",
    );
    reference(
        "W1B p50 postgres / the fenced floor",
        ratio(
            r.get("W1B", "postgres", "p50_us"),
            r.get("W1B", "postgres_fenced_floor", "p50_us"),
        ),
        P50_OVER_FLOOR,
        true,
        "leasehold's session locks against the fenced floor: the rest of their statement (the \
         pooler checks, the idle limit, the keepalive reads) and the library",
    );
    check(
        "W5 leases lost",
        r.get("W5", "leasehold", "leases_lost"),
        0.0,
        true,
        "0 lost",
    );
    check(
        "W5 renewal round trips per renewal",
        ratio(
            r.get("W5", "leasehold", "renewal_round_trips_per_s"),
            r.get("W5", "leasehold", "ops_per_s"),
        ),
        1.0 / 50.0,
        true,
        "<= renewals/s / 50 (batched)",
    );
    let mut rows = out.into_inner();
    verdict::judge(&mut rows, &verdict::BESIDE_FLOORS);
    Value::Array(rows)
}
