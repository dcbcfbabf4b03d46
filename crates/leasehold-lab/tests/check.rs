//! `leasehold-lab check` against real servers of every flavor: the CI smoke check (pause + kill on
//! one node: nothing stale accepted with fencing; a plain-DEL release lets two holders in at
//! once; a Redis Cluster and a Sentinel set with their failovers and, on the cluster, a slot
//! migration), and one short run of every other fault (restart with and without AOF, stall,
//! failover, Redlock node faults) and of the PostgreSQL register; and the Redlock debate's clock
//! jump, with and without fencing.
//!
//! The assertions are about safety (stale writes accepted, lost increments, overlaps while
//! both leases were valid) and about the checker having seen what it claims (faults injected,
//! acquisitions made), never about timing.

use crate::support;

use std::path::Path;

use leasehold_harness::{ServerBinary, server_test};
use serde_json::Value;
use support::{Running, leasehold, sample, scrape};

/// Runs `leasehold-lab check --server <flavor> args... --out <dir>` and returns its report; panics
/// with the output unless it exits with `code`.
fn check(bin: &ServerBinary, dir: &Path, args: &[&str], code: i32) -> Value {
    let flavor = bin.flavor().expect("a matrix flavor").name();
    let out = dir.to_str().unwrap();
    let mut all = vec!["check", "--server", flavor, "--out", out, "--workers", "4"];
    all.extend(args);
    let run = leasehold(&all).expect(code);
    let report = std::fs::read_to_string(dir.join("report.json")).expect("report.json");
    assert!(dir.join("timeline.svg").exists(), "no timeline.svg");
    let report: Value = serde_json::from_str(&report).expect("report.json is JSON");
    eprintln!("{}", run.stdout);
    report
}

fn n(report: &Value, field: &str) -> i64 {
    report[field]
        .as_i64()
        .unwrap_or_else(|| panic!("{field} missing from {report:#}"))
}

/// The faults the run really injected, by kind.
fn injected(report: &Value, kind: &str) -> usize {
    report["faults"]
        .as_array()
        .expect("faults")
        .iter()
        .filter(|f| f["kind"] == kind)
        .count()
}

/// Fencing on: whatever happened to the lock, the register took no stale write and lost no
/// increment, and no worker failed.
#[track_caller]
fn assert_safe(report: &Value) {
    assert_eq!(n(report, "stale_writes_accepted"), 0, "{report:#}");
    assert_eq!(n(report, "lost_increments"), 0, "{report:#}");
    assert!(n(report, "acquisitions") > 0, "{report:#}");
    assert!(n(report, "writes_acknowledged") > 0, "{report:#}");
    assert_eq!(report["worker_errors"], serde_json::json!([]), "{report:#}");
}

server_test!(async fn smoke_pause_kill_with_fencing(bin) {
    let dir = tempfile::tempdir().unwrap();
    let report = check(
        &bin,
        dir.path(),
        &["--duration", "6s", "--ttl", "200ms", "--work", "30ms", "--faults", "pause,kill", "--seed", "7"],
        0,
    );
    assert_safe(&report);
    assert!(injected(&report, "pause") >= 1 && injected(&report, "kill") >= 1, "{report:#}");
    // A token-checked lock on a server that never lost its data never let two holders in while
    // both leases were valid; every overlap is a frozen holder running past its TTL.
    assert_eq!(n(&report, "overlaps_within_ttl"), 0, "{report:#}");
});

server_test!(async fn smoke_fair_pause_kill_with_fencing(bin) {
    let dir = tempfile::tempdir().unwrap();
    // Fair mode: the lock is handed from holder to waiter by the release script; a paused or
    // killed server and frozen holders must not let a stale write in, nor two valid holders.
    let report = check(
        &bin,
        dir.path(),
        &["--fair", "--duration", "6s", "--ttl", "200ms", "--work", "30ms", "--faults", "pause,kill", "--seed", "7"],
        0,
    );
    assert_safe(&report);
    assert_eq!(report["settings"]["fair"], true);
    assert!(injected(&report, "pause") >= 1 && injected(&report, "kill") >= 1, "{report:#}");
    assert_eq!(n(&report, "overlaps_within_ttl"), 0, "{report:#}");
});

server_test!(async fn smoke_semaphore_pause_kill_never_more_than_n_valid_holders(bin) {
    let dir = tempfile::tempdir().unwrap();
    // 4 workers on a semaphore of 2 permits, holders paused and killed, the server paused and
    // killed: never more than 2 valid permits at once (the checker exits 1 otherwise).
    let report = check(
        &bin,
        dir.path(),
        &[
            "--permits", "2", "--duration", "6s", "--ttl", "200ms", "--work",
            "30ms", "--faults", "pause,kill", "--seed", "7",
        ],
        0,
    );
    assert_eq!(report["settings"]["permits"], 2);
    assert!(n(&report, "acquisitions") > 0, "{report:#}");
    assert!(n(&report, "max_valid_holders") <= 2, "{report:#}");
    // With 4 workers on 2 permits both were in use at some point.
    assert_eq!(n(&report, "max_valid_holders"), 2, "{report:#}");
    assert!(injected(&report, "pause") >= 1 && injected(&report, "kill") >= 1, "{report:#}");
    assert_eq!(report["worker_errors"], serde_json::json!([]), "{report:#}");
});

server_test!(async fn smoke_rwlock_pause_kill_no_writer_overlaps_a_valid_holder(bin) {
    let dir = tempfile::tempdir().unwrap();
    // Readers and writers on one read-write lock, holders paused and killed, the server paused
    // and killed: no writer overlaps a valid reader or writer (the run fails otherwise), and
    // the writers' fenced increments are exact.
    let report = check(
        &bin,
        dir.path(),
        &["--rw", "--duration", "6s", "--ttl", "200ms", "--work", "30ms", "--faults", "pause,kill", "--seed", "7"],
        0,
    );
    assert_eq!(report["settings"]["rw"], true);
    assert_safe(&report);
    assert_eq!(n(&report, "overlaps_within_ttl"), 0, "{report:#}");
    // Readers did share the lock at some point.
    assert!(n(&report, "max_valid_holders") >= 2, "{report:#}");
    assert!(injected(&report, "pause") >= 1 && injected(&report, "kill") >= 1, "{report:#}");
});

server_test!(async fn smoke_multi_and_elect_pause_kill(bin) {
    // Multi-locks over two keys taken in opposite orders: no deadlock (acquisitions go on), no
    // overlap within the TTL. Elections: the leader's writes fenced by its term stay exact.
    let dir = tempfile::tempdir().unwrap();
    let report = check(
        &bin,
        dir.path(),
        &["--multi", "--duration", "5s", "--ttl", "200ms", "--work", "30ms", "--faults", "pause,kill", "--seed", "7"],
        0,
    );
    assert_eq!(report["settings"]["multi"], true);
    assert!(n(&report, "acquisitions") > 20, "{report:#}");
    assert_eq!(n(&report, "overlaps_within_ttl"), 0, "{report:#}");
    assert_eq!(report["worker_errors"], serde_json::json!([]), "{report:#}");
    let dir = tempfile::tempdir().unwrap();
    let report = check(
        &bin,
        dir.path(),
        &["--elect", "--duration", "5s", "--ttl", "200ms", "--work", "30ms", "--faults", "pause,kill", "--seed", "7"],
        0,
    );
    assert_eq!(report["settings"]["elect"], true);
    assert_safe(&report);
    assert_eq!(n(&report, "overlaps_within_ttl"), 0, "{report:#}");
});

server_test!(async fn smoke_release_with_del_lets_two_holders_in(bin) {
    let dir = tempfile::tempdir().unwrap();
    // No faults: work times around the TTL (0.5x..1.5x) are enough for the seed's bug.
    let report = check(
        &bin,
        dir.path(),
        &["--duration", "5s", "--ttl", "200ms", "--work", "200ms", "--release", "del", "--seed", "7"],
        0,
    );
    assert_eq!(report["faults"], serde_json::json!([]), "{report:#}");
    assert!(n(&report, "overlaps_within_ttl") >= 1, "{report:#}");
    // Fencing still keeps the data right.
    assert_safe(&report);
});

server_test!(async fn smoke_cluster_pause_kill_failover_migrate(bin) {
    let dir = tempfile::tempdir().unwrap();
    // 3 masters with a replica each; the lock's master is killed while it holds a lock its
    // replica never got, and the lock's slot moves to another master.
    let report = check(
        &bin,
        dir.path(),
        &[
            "--topology", "cluster", "--duration", "10s", "--ttl", "300ms", "--work", "30ms",
            "--faults", "pause,kill,failover,migrate", "--seed", "7",
        ],
        0,
    );
    assert_safe(&report);
    assert_eq!(report["settings"]["topology"], "cluster");
    for kind in ["pause", "kill", "failover", "migrate"] {
        assert!(injected(&report, kind) >= 1, "no {kind} in {report:#}");
    }
    // Each failover and migration moved the slot from one node to another.
    for f in report["faults"].as_array().unwrap() {
        if f["kind"] == "failover" || f["kind"] == "migrate" {
            let nodes = f["nodes"].as_array().unwrap();
            assert!(nodes.len() == 2 && nodes[0] != nodes[1], "{f}");
        }
    }
});

server_test!(async fn smoke_cluster_fair_migrate_held(bin) {
    let dir = tempfile::tempdir().unwrap();
    // Fair workers on a cluster whose lock slot stays MIGRATING/IMPORTING for twice the fair
    // queue's entry lifetime plus a TTL: every fair script is refused (TRYAGAIN) while the
    // holder's lease and the waiters' queue entries run out; then the migration finishes.
    let report = check(
        &bin,
        dir.path(),
        &[
            "--topology", "cluster", "--fair", "--duration", "3s", "--ttl", "300ms", "--work",
            "30ms", "--faults", "migrate-held", "--seed", "7",
        ],
        0,
    );
    assert_safe(&report);
    assert_eq!(report["settings"]["topology"], "cluster");
    assert_eq!(report["settings"]["fair"], true);
    assert_eq!(n(&report, "overlaps_within_ttl"), 0, "{report:#}");
    assert!(injected(&report, "migrate-held") >= 1, "{report:#}");
    for f in report["faults"].as_array().unwrap() {
        let nodes = f["nodes"].as_array().unwrap();
        assert!(nodes.len() == 2 && nodes[0] != nodes[1], "{f}");
    }
});

server_test!(async fn smoke_slow_link_ambiguous_extends(bin) {
    let dir = tempfile::tempdir().unwrap();
    // The workers reach the lock server through a relay that holds its replies back a TTL,
    // twice their response timeout, for a while: renewals (the work outlasts the TTL, so the
    // leases are auto-extended), releases and acquisitions end in doubt. The fencing register
    // refuses whatever a holder that lost its lease writes.
    let report = check(
        &bin,
        dir.path(),
        &[
            "--duration", "4s", "--ttl", "300ms", "--work", "400ms", "--faults", "slow-link",
            "--seed", "7",
        ],
        0,
    );
    assert_safe(&report);
    assert_eq!(report["settings"]["auto_extend"], true);
    assert_eq!(n(&report, "overlaps_within_ttl"), 0, "{report:#}");
    assert!(injected(&report, "slow-link") >= 1, "{report:#}");
    // The late replies were seen: some operation timed out.
    assert!(n(&report, "lock_errors") > 0, "{report:#}");
});

server_test!(async fn smoke_sentinel_pause_kill_failover_kill_primary(bin) {
    let dir = tempfile::tempdir().unwrap();
    // A primary, its replica and 3 sentinels: a graceful SENTINEL FAILOVER, and the primary
    // killed while it holds a lock its replica never got (the sentinels promote the replica).
    let report = check(
        &bin,
        dir.path(),
        &[
            "--topology", "sentinel", "--duration", "12s", "--ttl", "300ms", "--work", "30ms",
            "--faults", "pause,kill,failover,kill-primary", "--seed", "7",
        ],
        0,
    );
    assert_safe(&report);
    assert_eq!(report["settings"]["topology"], "sentinel");
    for kind in ["pause", "kill", "failover", "kill-primary"] {
        assert!(injected(&report, kind) >= 1, "no {kind} in {report:#}");
    }
});

server_test!(async fn server_faults_restart_stall_failover(bin) {
    let dir = tempfile::tempdir().unwrap();
    let report = check(
        &bin,
        dir.path(),
        &[
            "--duration", "15s", "--ttl", "500ms", "--work", "100ms",
            "--faults", "restart,stall,failover,restart", "--seed", "3",
        ],
        0,
    );
    assert_safe(&report);
    for kind in ["restart-aof", "restart-noaof", "stall", "failover"] {
        assert!(injected(&report, kind) >= 1, "no {kind} in {report:#}");
    }
});

server_test!(async fn redlock_minority_faults(bin) {
    let dir = tempfile::tempdir().unwrap();
    let report = check(
        &bin,
        dir.path(),
        &[
            "--nodes", "5", "--duration", "8s", "--ttl", "300ms", "--work", "30ms",
            "--faults", "restart,stall,pause", "--seed", "5",
        ],
        0,
    );
    assert_safe(&report);
    for kind in ["restart", "stall", "pause"] {
        assert!(injected(&report, kind) >= 1, "no {kind} in {report:#}");
    }
    // Each node fault hit a minority (2 of 5).
    for f in report["faults"].as_array().unwrap() {
        if f["kind"] != "pause" {
            assert_eq!(f["nodes"].as_array().unwrap().len(), 2, "{f}");
        }
    }
    // A minority's faults never let a second holder in while the first lease was valid.
    assert_eq!(n(&report, "overlaps_within_ttl"), 0, "{report:#}");
});

server_test!(async fn postgres_register_refuses_stale_writers(bin) {
    let dir = tempfile::tempdir().unwrap();
    if leasehold_harness::find_postgres().is_none() {
        assert!(
            !leasehold_harness::require_full_matrix(),
            "no PostgreSQL server found, and the full matrix is required (run scripts/install-servers)"
        );
        eprintln!("skipping: no PostgreSQL server found (run scripts/install-servers)");
        return;
    }
    let report = check(
        &bin,
        dir.path(),
        &[
            "--register", "postgres", "--duration", "6s", "--ttl", "200ms", "--work", "30ms",
            "--faults", "pause,kill,restart-noaof", "--seed", "11",
        ],
        0,
    );
    assert_safe(&report);
    assert_eq!(report["settings"]["register"], "postgres");
    assert!(injected(&report, "pause") >= 1, "{report:#}");
});

// Without fencing, a paused holder's late write goes through: the checker sees it.
server_test!([redis8] async fn no_fencing_with_pauses_loses_increments(bin) {
    let dir = tempfile::tempdir().unwrap();
    let report = check(
        &bin,
        dir.path(),
        &["--duration", "8s", "--ttl", "200ms", "--work", "20ms", "--faults", "pause", "--no-fencing", "--seed", "7"],
        0,
    );
    assert!(injected(&report, "pause") >= 1, "{report:#}");
    assert!(n(&report, "stale_writes_accepted") >= 1, "{report:#}");
    assert!(n(&report, "lost_increments") >= 1, "{report:#}");
});

// `clock-jump`, the scenario of the Redlock debate: a minority of 3 Redlock nodes is down
// while a worker acquires on the other two, then one of those two has its clock jump 2 TTLs
// forward (libfaketime) and the crashed node is back: a waiter gets a majority while the
// first holder's lease is still valid. The work (0.5..1.5 x 600 ms) stays inside the 1 s TTL,
// so every overlap is the fault's. Redis 8 and Valkey 9 only: Debian's Redis 7 package hangs
// under libfaketime.
fn clock_jump(bin: &ServerBinary, dir: &Path, fencing: bool) -> Option<Value> {
    if skip_without(
        "libfaketime",
        leasehold_harness::find_libfaketime().is_some(),
    ) {
        return None;
    }
    let mut args = vec![
        "--nodes",
        "3",
        "--duration",
        "8s",
        "--ttl",
        "1s",
        "--work",
        "600ms",
        "--faults",
        "clock-jump",
        "--seed",
        "7",
    ];
    if !fencing {
        args.push("--no-fencing");
    }
    let report = check(bin, dir, &args, 0);
    assert!(injected(&report, "clock-jump") >= 2, "{report:#}");
    for f in report["faults"].as_array().unwrap() {
        // The jumped node, then the crashed one: two different nodes of the three.
        let nodes = f["nodes"].as_array().unwrap();
        assert!(nodes.len() == 2 && nodes[0] != nodes[1], "{f}");
    }
    // Two holders whose leases were both valid, each time during a clock jump, never outside.
    let jumps = &report["per_fault"]["clock-jump"];
    assert!(
        jumps["overlaps_within_ttl"].as_i64().unwrap() >= 1,
        "{report:#}"
    );
    assert_eq!(
        n(&report, "overlaps_within_ttl"),
        jumps["overlaps_within_ttl"].as_i64().unwrap(),
        "{report:#}"
    );
    assert_eq!(report["worker_errors"], serde_json::json!([]), "{report:#}");
    Some(report)
}

server_test!([redis8, valkey9] async fn smoke_redlock_clock_jump_without_fencing_overlaps(bin) {
    let dir = tempfile::tempdir().unwrap();
    let Some(report) = clock_jump(&bin, dir.path(), false) else { return };
    // Without fencing the first holder's late write goes through.
    assert_eq!(report["settings"]["fencing"], false);
    assert!(n(&report, "stale_writes_accepted") >= 1, "{report:#}");
});

server_test!([redis8, valkey9] async fn smoke_redlock_clock_jump_with_fencing(bin) {
    let dir = tempfile::tempdir().unwrap();
    let Some(report) = clock_jump(&bin, dir.path(), true) else { return };
    // The same overlaps; the register refuses the older number.
    assert_safe(&report);
    assert!(n(&report, "stale_writes_attempted") >= 1, "{report:#}");
});

#[test]
fn bad_options_are_usage_errors() {
    for args in [
        &["check", "--faults", "meteor"][..],
        &["check", "--nodes", "4"],
        &["check", "--nodes", "0"],
        &["check", "--nodes", "3", "--faults", "failover"],
        &["check", "--workers", "0"],
        &["check", "--register", "sqlite"],
        &["check", "--replica-ack", "2"],
        &["check", "--nodes", "3", "--replica-ack", "1"],
        &["check", "--topology", "mesh"],
        &["check", "--topology", "cluster", "--nodes", "3"],
        &["check", "--topology", "sentinel", "--nodes", "5"],
        &["check", "--topology", "cluster", "--faults", "restart"],
        &["check", "--topology", "cluster", "--faults", "kill-primary"],
        &[
            "check",
            "--topology",
            "sentinel",
            "--faults",
            "migrate,pause",
        ],
        &["check", "--topology", "sentinel", "--faults", "stall"],
        &["check", "--faults", "migrate"],
        &["check", "--faults", "pause,kill-primary"],
        &["check", "--topology", "cluster", "--release", "del"],
        &["check", "--topology", "sentinel", "--replica-ack", "2"],
        &["check", "--fair", "--nodes", "3"],
        &["check", "--fair", "--replica-ack", "1"],
        &["check", "--fair", "--backend", "etcd"],
        &["check", "--permits", "0"],
        &["check", "--rw", "--nodes", "3"],
        &["check", "--rw", "--backend", "etcd"],
        &["check", "--rw", "--permits", "2"],
        &["check", "--multi", "--nodes", "3"],
        &["check", "--elect", "--backend", "etcd"],
        // --topology is the redis backend's, even when it names the default.
        &["check", "--backend", "etcd", "--topology", "standalone"],
        &["check", "--backend", "postgres", "--topology", "standalone"],
        &["check", "--elect", "--rw"],
        &["check", "--permits", "2", "--nodes", "3"],
        &["check", "--permits", "2", "--fair"],
        &["check", "--permits", "2", "--backend", "postgres"],
        // A pooler goes in front of PostgreSQL only.
        &["check", "--pooler", "pgbouncer"],
        &["check", "--backend", "etcd", "--pooler", "pgbouncer"],
        &["check", "--backend", "postgres", "--pool-mode", "session"],
        &["check", "--pg-lock", "lease"],
        &["check", "--backend", "postgres", "--pg-lock", "advisory"],
        &["check", "--nodes", "3", "--faults", "slow-link"],
        &["check", "--faults", "slow-link,failover"],
        &["check", "--topology", "cluster", "--faults", "slow-link"],
        &["check", "--faults", "migrate-held"],
        // A clock jump on one of Redlock's nodes: one server is not Redlock.
        &["check", "--faults", "clock-jump"],
        &["check", "--topology", "cluster", "--faults", "clock-jump"],
    ] {
        let run = leasehold(args);
        assert_eq!(run.code, 64, "{args:?}: {run:?}");
    }
}

/// Whether `what` (etcd, PostgreSQL) is missing, so the test skips; panics instead when the
/// full matrix is required.
fn skip_without(what: &str, found: bool) -> bool {
    if found {
        return false;
    }
    assert!(
        !leasehold_harness::require_full_matrix(),
        "no {what} server found, and the full matrix is required (run scripts/install-servers)"
    );
    eprintln!("skipping: no {what} server found (run scripts/install-servers)");
    true
}

// `--backend etcd`: the lock on a 3-member etcd cluster (the register on redis8), with a
// holder paused and killed, a follower killed, a member frozen and the leader killed. The
// fencing numbers are etcd revisions (not 1, 2, 3...): the analysis must not mind.
server_test!([redis8] async fn backend_etcd_pause_kill_member_faults(bin) {
    if skip_without("etcd", leasehold_harness::find_etcd().is_some()) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let report = check(
        &bin,
        dir.path(),
        &[
            "--backend", "etcd", "--duration", "20s", "--ttl", "1s", "--work", "30ms",
            "--faults", "pause,kill,member-kill,member-pause,leader-kill", "--seed", "7",
        ],
        0,
    );
    assert_safe(&report);
    assert_eq!(report["settings"]["backend"], "etcd");
    // Workers cannot raise etcd's counter (its revisions): they are not asked to.
    assert_eq!(report["settings"]["raise_counter"], false);
    for kind in ["pause", "kill", "member-kill", "member-pause", "leader-kill"] {
        assert!(injected(&report, kind) >= 1, "no {kind} in {report:#}");
    }
    for f in report["faults"].as_array().unwrap() {
        if f["kind"] != "pause" && f["kind"] != "kill" {
            let nodes = f["nodes"].as_array().unwrap();
            assert!(nodes.len() == 1 && nodes[0].as_u64().unwrap() < 3, "{f}");
        }
    }
    eprintln!("lock errors: {}", n(&report, "lock_errors"));
});

// `--backend postgres`: the lock on a PostgreSQL server of its own (session advisory locks),
// with a holder paused and killed and the server restarted (every lock ends at once).
server_test!([redis8] async fn backend_postgres_pause_kill_restart(bin) {
    if skip_without("PostgreSQL", leasehold_harness::find_postgres().is_some()) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let report = check(
        &bin,
        dir.path(),
        &[
            "--backend", "postgres", "--duration", "10s", "--ttl", "1s", "--work", "30ms",
            "--faults", "pause,kill,restart", "--seed", "7",
        ],
        0,
    );
    assert_safe(&report);
    assert_eq!(report["settings"]["backend"], "postgres");
    assert_eq!(report["settings"]["raise_counter"], true);
    for kind in ["pause", "kill", "restart"] {
        assert!(injected(&report, kind) >= 1, "no {kind} in {report:#}");
    }
    eprintln!("lock errors: {}", n(&report, "lock_errors"));
});

// `--backend etcd --faults restart`: every member of the 3-member cluster killed while a
// worker holds the lock (its release, 15 to 45 ms later, meets a dead cluster), all restarted
// with their data dirs 2 s later. Nothing stale is accepted, and once the workers have
// stopped (each released its last lock; none stuck waiting behind an entry nobody holds, or
// it would not stop) the lock is free: no entry left behind.
server_test!([redis8] async fn smoke_etcd_restart_during_releases(bin) {
    if skip_without("etcd", leasehold_harness::find_etcd().is_some()) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let report = check(
        &bin,
        dir.path(),
        &[
            "--backend", "etcd", "--duration", "7s", "--ttl", "1s", "--work", "30ms",
            "--faults", "restart", "--seed", "3",
        ],
        0,
    );
    assert_safe(&report);
    assert!(injected(&report, "restart") >= 1, "{report:#}");
    for f in report["faults"].as_array().unwrap() {
        assert_eq!(f["nodes"], serde_json::json!([0, 1, 2]), "{f}");
    }
    // Acquisitions went on after the last restart (the workers' logs and the faults share
    // CLOCK_MONOTONIC).
    let back = report["faults"].as_array().unwrap().iter().map(|f| f["end"].as_f64().unwrap()).fold(0.0, f64::max);
    let after = std::fs::read_dir(dir.path().join("logs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "log"))
        .flat_map(|p| std::fs::read_to_string(p).unwrap().lines().map(String::from).collect::<Vec<_>>())
        .filter_map(|l| serde_json::from_str::<Value>(&l).ok())
        .filter(|e| e["ev"] == "acquired" && e["t"].as_f64().unwrap() > back)
        .count();
    assert!(after >= 1, "no acquisition after the last restart: {report:#}");
    assert_eq!(report["lock_free_at_end"], true, "{report:#}");
});

#[test]
fn backend_options_are_usage_errors() {
    for args in [
        &["check", "--backend", "etcd", "--topology", "cluster"][..],
        &["check", "--backend", "etcd", "--topology", "sentinel"],
        &["check", "--backend", "postgres", "--faults", "failover"],
        &[
            "check",
            "--backend",
            "postgres",
            "--faults",
            "pause,member-kill",
        ],
        &["check", "--backend", "etcd", "--faults", "stall"],
        &["check", "--backend", "etcd", "--nodes", "3"],
        &["check", "--backend", "postgres", "--release", "del"],
        &["check", "--backend", "etcd", "--replica-ack", "1"],
        &["check", "--backend", "zookeeper"],
        &["check", "--faults", "leader-kill"],
        &["check", "--topology", "cluster", "--faults", "member-pause"],
    ] {
        let run = leasehold(args);
        assert_eq!(run.code, 64, "{args:?}: {run:?}");
    }
    // An unknown fault for the backend is listed with the ones it takes.
    let run = leasehold(&["check", "--backend", "postgres", "--faults", "failover"]);
    assert!(
        run.stderr.contains("pause, kill, restart"),
        "{}",
        run.stderr
    );
    let run = leasehold(&["check", "--backend", "etcd", "--faults", "stall"]);
    assert!(
        run.stderr
            .contains("pause, kill, member-kill, member-pause, leader-kill, restart"),
        "{}",
        run.stderr
    );
}

// --metrics-addr: while the check runs, one scrape shows every worker's acquisitions, each
// labelled with its worker; the check's verdict is unchanged.
server_test!(async fn check_serves_the_workers_metrics(bin) {
    let dir = tempfile::tempdir().unwrap();
    let flavor = bin.flavor().expect("a matrix flavor").name();
    let out = dir.path().join("out");
    let run = Running::start_subcommand::<&str>(
        &[],
        dir.path(),
        "check",
        &["--server", flavor, "--out", out.to_str().unwrap(), "--workers", "2", "--duration", "5s",
          "--ttl", "300ms", "--work", "20ms", "--faults", "pause", "--seed", "3",
          "--metrics-addr", "127.0.0.1:0"],
    );
    let addr = run.metrics_addr();
    let acquired = |body: &str, worker: &str| {
        sample(body, "leasehold_acquisitions_total", &["outcome=\"acquired\"", worker]).unwrap_or(0.0)
    };
    let start = std::time::Instant::now();
    loop {
        assert!(start.elapsed() < std::time::Duration::from_secs(90), "no worker metrics");
        if let Some(body) = scrape(&addr)
            && acquired(&body, "worker=\"0\"") >= 1.0
            && acquired(&body, "worker=\"1\"") >= 1.0
        {
            assert!(sample(&body, "leasehold_round_trips_total", &["worker=\"0\""]).unwrap() >= 1.0, "{body}");
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let (code, stderr) = run.wait();
    assert_eq!(code, 0, "{stderr}");
});

// `--backend postgres --pooler pgbouncer`: the lock as lease rows through PgBouncer in
// transaction mode (issue 22), with holders paused and killed and the server behind the pooler
// restarted.
server_test!([redis8] async fn backend_postgres_through_pgbouncer(bin) {
    if skip_without("PostgreSQL", leasehold_harness::find_postgres().is_some())
        || skip_without("PgBouncer", leasehold_harness::find_pgbouncer().is_some())
    {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let report = check(
        &bin,
        dir.path(),
        &[
            "--backend", "postgres", "--pooler", "pgbouncer", "--duration", "10s", "--ttl", "1s",
            "--work", "30ms", "--faults", "pause,kill,restart", "--seed", "7",
        ],
        0,
    );
    assert_safe(&report);
    assert_eq!(report["settings"]["backend"], "postgres");
    assert_eq!(report["settings"]["pooler"], "pgbouncer");
    for kind in ["pause", "kill", "restart"] {
        assert!(injected(&report, kind) >= 1, "no {kind} in {report:#}");
    }
    eprintln!("lock errors: {}", n(&report, "lock_errors"));
});

/// `--backend postgres --pooler pgbouncer` with `--pool-mode mode` and `--pg-lock lock`, a
/// holder paused and the server behind the pooler restarted (8 s); `None` without PostgreSQL
/// or PgBouncer. PgBouncer's `server_lifetime` is 1 s: server connections come and go.
fn through_pgbouncer(bin: &ServerBinary, dir: &Path, mode: &str, lock: &str) -> Option<Value> {
    if skip_without("PostgreSQL", leasehold_harness::find_postgres().is_some())
        || skip_without("PgBouncer", leasehold_harness::find_pgbouncer().is_some())
    {
        return None;
    }
    let report = check(
        bin,
        dir,
        &[
            "--backend",
            "postgres",
            "--pooler",
            "pgbouncer",
            "--pool-mode",
            mode,
            "--pg-lock",
            lock,
            "--duration",
            "8s",
            "--ttl",
            "1s",
            "--work",
            "30ms",
            "--faults",
            "pause,restart",
            "--seed",
            "7",
        ],
        0,
    );
    assert_eq!(report["settings"]["pool_mode"], mode, "{report:#}");
    assert!(injected(&report, "restart") >= 1, "{report:#}");
    Some(report)
}

// Lease rows through a transaction pool and through a session pool: holders paused past
// their TTL, PostgreSQL restarted, server connections recycled every second: nothing stale
// accepted, no increment lost.
server_test!([redis8] async fn smoke_pgbouncer_transaction_pool_lease_rows(bin) {
    let dir = tempfile::tempdir().unwrap();
    let Some(report) = through_pgbouncer(&bin, dir.path(), "transaction", "lease") else {
        return;
    };
    assert_eq!(report["settings"]["pg_lock"], "lease rows");
    assert_safe(&report);
    assert_eq!(n(&report, "lock_refusals"), 0, "{report:#}");
});

server_test!([redis8] async fn smoke_pgbouncer_session_pool_lease_rows(bin) {
    let dir = tempfile::tempdir().unwrap();
    let Some(report) = through_pgbouncer(&bin, dir.path(), "session", "lease") else {
        return;
    };
    assert_eq!(report["settings"]["pg_lock"], "lease rows");
    assert_safe(&report);
    assert_eq!(n(&report, "lock_refusals"), 0, "{report:#}");
});

// Session locks through a pooler (finding U3 of the 2026-12-02 review: granted on a busy
// transaction pool, then lost with the pooled server session; a run in CI before the
// BackendKeyData check was granted 1 of 1 198 right after a PostgreSQL restart): every
// acquisition is refused, in either pool mode, none is granted, and no two holders overlap.
fn assert_session_locks_refused(report: &Value) {
    assert_eq!(report["settings"]["pg_lock"], "session locks");
    assert_eq!(n(report, "acquisitions"), 0, "{report:#}");
    assert_eq!(n(report, "overlaps"), 0, "{report:#}");
    assert!(n(report, "lock_refusals") >= 1, "{report:#}");
    assert_eq!(report["worker_errors"], serde_json::json!([]), "{report:#}");
}

server_test!([redis8] async fn smoke_pgbouncer_transaction_pool_refuses_session_locks(bin) {
    let dir = tempfile::tempdir().unwrap();
    let Some(report) = through_pgbouncer(&bin, dir.path(), "transaction", "session") else {
        return;
    };
    assert_session_locks_refused(&report);
});

server_test!([redis8] async fn smoke_pgbouncer_session_pool_refuses_session_locks(bin) {
    let dir = tempfile::tempdir().unwrap();
    let Some(report) = through_pgbouncer(&bin, dir.path(), "session", "session") else {
        return;
    };
    assert_session_locks_refused(&report);
});
