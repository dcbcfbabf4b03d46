//! `leasehold run --min-hold` with clocks that disagree: the same cron entry on three machines
//! whose clocks are apart by seconds (libfaketime: `+7s`, `-5s`, and the true time), against
//! Redis (every server of the matrix), etcd, PostgreSQL lease rows and `file://`. The job runs
//! once per period: the first run's lock, kept for `--min-hold` after it was taken (by the
//! server's clock, or the kernel's file times for `file://`), turns away the runs that fire
//! later by their own clocks, however fast the job was.
//!
//! Nothing is timed: each period's end is observed (`leasehold inspect` says the key is free),
//! and the runs that must be turned away are checked to have met the kept lock (it is still
//! held after they exited, so it was during their attempt).

use crate::support;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use leasehold_harness::{etcd_for_test, postgres_for_test, require_full_matrix, server_test};

/// Long enough for the turned-away runs to start and finish on a loaded machine while the lock
/// is kept (each is one process start and one round trip; checked after they ran).
const MIN_HOLD: &str = "10s";

/// Only guards against a hang: a period ends when the servers say the key is free.
const HANG_GUARD: Duration = Duration::from_secs(90);

/// The machines' clocks, in the order their cron fires in the sequential periods: one 5 s
/// behind first (a hold it measured by its own clock would end 12 s early for the last), the
/// true time, one 7 s ahead.
const SKEWS: [Option<&str>; 3] = [Some("-5s"), None, Some("+7s")];

/// libfaketime (Debian's faketime package, installed by scripts/install-servers): required
/// under LEASEHOLD_REQUIRE_MATRIX=1 / CI, else a missing one skips the test. Preloaded directly
/// (`LD_PRELOAD`, `FAKETIME=SKEW`) rather than through the `faketime` wrapper: the wrapper keeps
/// a named semaphore per wrapper pid in /dev/shm, left behind when a wrapper dies, and a later
/// wrapper given the same pid (pids wrap at 32 768 here) then fails with "sem_open: File
/// exists" (seen once in CI).
fn faketime() -> Option<PathBuf> {
    match leasehold_harness::find_libfaketime() {
        Some(path) => Some(path),
        None if require_full_matrix() => {
            panic!(
                "no libfaketime found, and LEASEHOLD_REQUIRE_MATRIX/CI demands it (run scripts/install-servers)"
            )
        }
        None => {
            eprintln!("skipping: no libfaketime (run scripts/install-servers)");
            None
        }
    }
}

/// `program` with its clock shifted by `skew` (libfaketime's relative format, `-5s`).
fn shifted(libfaketime: &Path, skew: &str, program: &str) -> Command {
    let mut c = Command::new(program);
    c.env("LD_PRELOAD", libfaketime).env("FAKETIME", skew);
    c
}

/// One machine's cron firing: `leasehold --url URL run --no-wait --min-hold ... KEY -- job`,
/// with its clock shifted by SKEW when given. The job appends a line to `runs`. Returns the exit
/// status and stderr.
fn fire(faketime: &Path, url: &str, skew: Option<&str>, runs: &Path) -> (i32, String) {
    let job = format!("echo ran >> '{}'", runs.display());
    let leasehold = [
        crate::BIN,
        "--url",
        url,
        "run",
        "--no-wait",
        "--ttl",
        "30s",
        "--min-hold",
        MIN_HOLD,
        "--max-hold",
        "1m",
        "jobs:hourly",
        "--",
        "sh",
        "-c",
        &job,
    ];
    let mut cmd = match skew {
        Some(skew) => {
            let mut c = shifted(faketime, skew, leasehold[0]);
            c.args(&leasehold[1..]);
            c
        }
        None => {
            let mut c = Command::new(leasehold[0]);
            c.args(&leasehold[1..]);
            c
        }
    };
    let out = cmd
        .env_remove("LEASEHOLD_URL")
        .env_remove("REDIS_URL")
        .stdin(Stdio::null())
        .output()
        .expect("run leasehold");
    (
        out.status.code().expect("exited"),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Whether the key is held, as `leasehold inspect` (the servers) says.
fn held(url: &str) -> bool {
    let state = support::leasehold_at(url, &["inspect", "jobs:hourly", "--json"])
        .expect(0)
        .json();
    state["held"].as_bool().expect("held")
}

fn lines(runs: &Path) -> usize {
    std::fs::read_to_string(runs).map_or(0, |s| s.lines().count())
}

/// Three periods on `url`: in the first two, the machines fire one after another (each after
/// the job of the one before ended, as their clocks make them); in the third, all at once. Each period's job runs exactly once.
fn once_per_period(url: &str) {
    let Some(faketime) = faketime() else { return };
    let dir = tempfile::tempdir().unwrap();
    let runs = dir.path().join("runs");
    // The preloaded library shifts the clock of a program and of its children.
    let shifted = shifted(&faketime, "+7s", "sh")
        .args(["-c", "date +%s"])
        .output()
        .expect("sh runs");
    let shifted: u64 = String::from_utf8_lossy(&shifted.stdout)
        .trim()
        .parse()
        .expect("seconds");
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    assert!(
        shifted >= now + 6,
        "faketime does not shift the clock: {shifted} vs {now}"
    );

    for period in 1..=3 {
        if period < 3 {
            for (i, skew) in SKEWS.iter().enumerate() {
                let (code, stderr) = fire(&faketime, url, *skew, &runs);
                let want = if i == 0 { 0 } else { 75 };
                assert_eq!(
                    code, want,
                    "{url}, period {period}, clock {skew:?}: {stderr}"
                );
                assert_eq!(lines(&runs), period, "{url}, period {period}");
            }
        } else {
            let firing: Vec<_> = SKEWS
                .iter()
                .map(|skew| {
                    let (faketime, url, runs) = (faketime.clone(), url.to_string(), runs.clone());
                    std::thread::spawn(move || fire(&faketime, &url, *skew, &runs))
                })
                .collect();
            let mut codes: Vec<i32> = firing.into_iter().map(|t| t.join().unwrap().0).collect();
            codes.sort();
            assert_eq!(
                codes,
                [0, 75, 75],
                "{url}, period {period}: one run, two turned away"
            );
        }
        // The turned-away runs met the kept lock: it is still held now.
        assert!(
            held(url),
            "{url}, period {period}: the hold ended before the runs it must turn away (machine too slow for {MIN_HOLD}?)"
        );
        assert_eq!(
            lines(&runs),
            period,
            "{url}, period {period}: the job ran once"
        );
        // The period ends when the servers free the key by themselves.
        let begun = Instant::now();
        while held(url) {
            assert!(
                begun.elapsed() < HANG_GUARD,
                "{url}: still held after {HANG_GUARD:?}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    assert_eq!(lines(&runs), 3, "{url}: once per period");
}

server_test!(async fn redis_runs_the_job_once_per_period_across_skewed_clocks(bin) {
    let server = leasehold_harness::Server::start(&bin, &leasehold_harness::ServerOptions::new()).unwrap();
    let url = server.url();
    tokio::task::spawn_blocking(move || once_per_period(&url)).await.unwrap();
});

#[test]
fn etcd_runs_the_job_once_per_period_across_skewed_clocks() {
    let Some(etcd) = etcd_for_test() else { return };
    once_per_period(&format!("etcd://{}", etcd.addr()));
}

#[test]
fn postgres_lease_rows_run_the_job_once_per_period_across_skewed_clocks() {
    let Some(pg) = postgres_for_test() else {
        return;
    };
    once_per_period(&format!("{}?lock=lease", pg.url()));
}

#[test]
fn file_locks_run_the_job_once_per_period_across_skewed_clocks() {
    let folder = tempfile::tempdir().unwrap();
    once_per_period(&format!("file://{}", folder.path().display()));
}

#[test]
fn a_min_hold_longer_than_the_ttl_is_refused_before_connecting() {
    let closed = support::closed_port();
    let port = closed.port();
    let out = support::leasehold(&[
        "--url",
        &format!("redis://127.0.0.1:{port}"),
        "run",
        "--ttl",
        "10s",
        "--min-hold",
        "11s",
        "k",
        "--",
        "true",
    ])
    .expect(64);
    assert!(out.stderr.contains("min_hold"), "{}", out.stderr);
    // PostgreSQL session locks cannot keep a lock after its release: a usage error naming the
    // alternative.
    if let Some(pg) = postgres_for_test() {
        let out = support::leasehold_at(&pg.url(), &["run", "--min-hold", "1s", "k", "--", "true"])
            .expect(64);
        assert!(out.stderr.contains("?lock=lease"), "{}", out.stderr);
    }
}
