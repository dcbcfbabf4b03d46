//! The scale workloads: W7, many auto-extended leases on one client, and W8, many client
//! processes on many keys (`leasehold-lab bench-worker` is one of those processes).

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::Context;
use leasehold::{Error, LockOptions, Locker};
use rand::Rng;
use serde_json::json;

use super::stats::{Latencies, Summary};
use super::workloads::{cpu_time, resident_bytes};
use crate::cli::BenchWorkerArgs;

/// W7: `leases` auto-extended leases on one client for `duration`: renewals and their round
/// trips per second, the client's CPU, its resident memory per lease, and the leases lost.
///
/// The leases are taken `concurrency` at a time (taking 100 000 one after another would be a
/// benchmark of its own); the memory counted is what the process grew by from before the first
/// acquisition to when all of them are held, so it includes the renewer's bookkeeping.
pub(crate) async fn w7_leasehold(
    url: String,
    leases: usize,
    ttl: Duration,
    duration: Duration,
) -> anyhow::Result<Summary> {
    const CONCURRENCY: usize = 64;
    let client = Locker::connect(&url).await?;
    let stats = client
        .as_redis()
        .context("W7 reads the Redis client's renewal counters: it needs a Redis URL")?
        .renewal_stats();
    let opts = LockOptions::new(ttl).auto_extend(true);
    let before = resident_bytes();
    let taking = Instant::now();
    let mut guards = Vec::with_capacity(leases);
    let mut next = 0;
    while next < leases {
        let end = (next + CONCURRENCY).min(leases);
        let batch = (next..end).map(|i| {
            let (client, opts) = (client.clone(), opts.clone());
            tokio::spawn(async move {
                let key = format!("w7:{i}");
                client
                    .try_acquire(&key, &opts)
                    .await?
                    .acquired()
                    .with_context(|| format!("lease key {key} busy"))
            })
        });
        for handle in batch.collect::<Vec<_>>() {
            guards.push(handle.await??);
        }
        next = end;
    }
    let take_s = taking.elapsed().as_secs_f64();
    let per_lease = resident_bytes().saturating_sub(before) as f64 / leases as f64;
    let (rounds0, renewals0) = (stats.rounds(), stats.renewals());
    let cpu0 = cpu_time();
    let start = Instant::now();
    tokio::time::sleep(duration).await;
    let secs = start.elapsed().as_secs_f64();
    let cpu = cpu_time().saturating_sub(cpu0).as_secs_f64();
    let (rounds, renewals) = (stats.rounds() - rounds0, stats.renewals() - renewals0);
    let held = guards.iter().filter(|g| g.is_held()).count();
    for g in guards {
        let _ = g.release().await;
    }
    Ok(Summary {
        ops_per_s: renewals as f64 / secs,
        ..Default::default()
    }
    .with("renewal_round_trips_per_s", rounds as f64 / secs)
    .with(
        "leases_per_round_trip",
        if rounds > 0 {
            renewals as f64 / rounds as f64
        } else {
            0.0
        },
    )
    .with("client_cpu_percent", 100.0 * cpu / secs)
    .with("client_bytes_per_lease", per_lease)
    .with("leases", leases as u64)
    .with("leases_lost", (leases - held) as u64)
    .with("ttl_ms", ttl.as_millis() as u64)
    .with("acquire_s", take_s))
}

/// Milliseconds since the Unix epoch: the workers of W8 start together at one such instant.
pub(crate) fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// One W8 client process: from `--start-at-ms` for `--secs`, takes a random one of `--keys`
/// keys (waiting up to `--wait-ms`), holds it `--hold-us`, releases it; then prints one JSON
/// line: acquisitions, errors (with the first one's text), and the waits as a histogram of
/// `[microseconds, count]` pairs, which the coordinator merges exactly.
pub(crate) async fn worker(args: BenchWorkerArgs) -> anyhow::Result<()> {
    let client = Locker::connect(&args.lock_url).await?;
    let opts = LockOptions::new(Duration::from_secs(10)).wait(Duration::from_millis(args.wait_ms));
    let mut waits = Latencies::new();
    let (mut acquisitions, mut errors, mut timed_out) = (0u64, 0u64, 0u64);
    let mut first_error: Option<String> = None;
    let now = unix_ms();
    if args.start_at_ms > now {
        tokio::time::sleep(Duration::from_millis(args.start_at_ms - now)).await;
    }
    let end = Instant::now() + Duration::from_secs_f64(args.secs);
    let hold = Duration::from_micros(args.hold_us);
    while Instant::now() < end {
        let key = format!("w8:{}", rand::rng().random_range(0..args.keys));
        let asked = Instant::now();
        match client.acquire(&key, &opts).await {
            Ok(guard) => {
                waits.record(asked.elapsed());
                acquisitions += 1;
                if !hold.is_zero() {
                    tokio::time::sleep(hold).await;
                }
                if let Err(e) = guard.release().await {
                    errors += 1;
                    first_error.get_or_insert_with(|| e.to_string());
                }
            }
            Err(Error::NotAcquired { .. }) => timed_out += 1,
            Err(e) => {
                errors += 1;
                first_error.get_or_insert_with(|| e.to_string());
            }
        }
    }
    println!(
        "{}",
        json!({
            "acquisitions": acquisitions,
            "errors": errors,
            "timed_out": timed_out,
            "first_error": first_error,
            "waits_us": waits.recorded(),
        })
    );
    Ok(())
}

/// What one W8 run of `processes` workers measured.
pub(crate) struct ManyClients {
    pub acquisitions: u64,
    pub errors: u64,
    pub timed_out: u64,
    pub first_error: Option<String>,
    pub waits: Latencies,
    pub failed_processes: usize,
}

/// W8: `processes` worker processes of this very binary on `keys` keys for `secs`, started
/// together; their reports merged.
pub(crate) async fn w8(
    url: &str,
    processes: usize,
    keys: u64,
    secs: f64,
    hold_us: u64,
) -> anyhow::Result<ManyClients> {
    let exe = std::env::current_exe().context("the leasehold binary")?;
    // Long enough for every process to start and connect on a loaded 2-core machine.
    let start_at = unix_ms() + 3_000 + 20 * processes as u64;
    let mut children = Vec::with_capacity(processes);
    for _ in 0..processes {
        children.push(
            tokio::process::Command::new(&exe)
                .arg("bench-worker")
                .args(["--lock-url", url])
                .args(["--keys", &keys.to_string()])
                .args(["--secs", &secs.to_string()])
                .args(["--start-at-ms", &start_at.to_string()])
                .args(["--hold-us", &hold_us.to_string()])
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .kill_on_drop(true)
                .spawn()
                .context("cannot start a bench worker")?,
        );
    }
    let mut out = ManyClients {
        acquisitions: 0,
        errors: 0,
        timed_out: 0,
        first_error: None,
        waits: Latencies::new(),
        failed_processes: 0,
    };
    for child in children {
        let output = child.wait_with_output().await?;
        let report = String::from_utf8_lossy(&output.stdout);
        let parsed: Option<serde_json::Value> = output
            .status
            .success()
            .then(|| serde_json::from_str(report.trim()).ok())
            .flatten();
        let Some(r) = parsed else {
            out.failed_processes += 1;
            out.first_error.get_or_insert_with(|| {
                format!(
                    "a worker failed ({}): {}",
                    output.status,
                    String::from_utf8_lossy(&output.stderr).trim()
                )
            });
            continue;
        };
        let n = |f: &str| r[f].as_u64().unwrap_or(0);
        out.acquisitions += n("acquisitions");
        out.errors += n("errors");
        out.timed_out += n("timed_out");
        if let Some(e) = r["first_error"].as_str() {
            out.first_error.get_or_insert_with(|| e.to_string());
        }
        for pair in r["waits_us"].as_array().into_iter().flatten() {
            if let (Some(v), Some(c)) = (pair[0].as_u64(), pair[1].as_u64()) {
                out.waits.record_n(v, c);
            }
        }
    }
    Ok(out)
}
