//! `leasehold run --permits/--read/--write` and `leasehold elect` with an `etcd://` URL: real
//! child processes under a semaphore, a read-write lock and an election on a real etcd member.
//! Every wait ends on an observed event (a file a command wrote, a holder count, the leader
//! etcd shows); the bounds only guard against a hang.

use crate::support;

use std::time::{Duration, Instant};

use leasehold::Locker;
use leasehold_harness::{Etcd, etcd_for_test};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use support::{Running, leasehold, wait_for_file};

const HANG_GUARD: Duration = Duration::from_secs(90);

/// A test's etcd member, its folder, and a runtime for the library's side of it (the tests are
/// synchronous: they drive processes), kept for the whole test: a client's connections live
/// on it.
struct Setup {
    _etcd: Etcd,
    rt: tokio::runtime::Runtime,
    url: String,
    dir: tempfile::TempDir,
}

impl Setup {
    fn new() -> Option<Setup> {
        let etcd = etcd_for_test()?;
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        Some(Setup {
            url: format!("etcd://{}", etcd.addr()),
            _etcd: etcd,
            rt,
            dir: tempfile::tempdir().unwrap(),
        })
    }

    /// A `Locker` on the member, as another process would see it.
    fn locker(&self) -> Locker {
        self.rt
            .block_on(Locker::connect(&self.url))
            .expect("connect")
    }
}

/// Polls `check` (against the library, as another process sees etcd) until it is true.
fn until(what: &str, mut check: impl FnMut() -> bool) {
    let start = Instant::now();
    while !check() {
        assert!(
            start.elapsed() < HANG_GUARD,
            "timed out waiting until {what}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// `leasehold --url URL run ARGS --no-wait -- true`: one attempt, no command to speak of.
fn run_no_wait(url: &str, args: &[&str]) -> support::Run {
    let mut all = vec!["--url", url, "run"];
    all.extend_from_slice(args);
    all.extend_from_slice(&["--no-wait", "--", "true"]);
    leasehold(&all)
}

/// A command that says it is in (`NAME-in`), then waits for `go-NAME`.
fn held_until_go(name: &str) -> String {
    format!("echo in > {name}-in; while [ ! -e go-{name} ]; do sleep 0.02; done")
}

/// Two `run --permits 2` hold at once; a third is busy (75) or, waiting, runs only after one of
/// the two has ended (it checks the first's mark), while the second still holds.
#[test]
fn two_permits_admit_two_commands_and_the_third_waits() {
    let Some(t) = Setup::new() else { return };
    let (rt, url, dir) = (&t.rt, t.url.as_str(), &t.dir);
    let global = ["--url", url];
    let mut inside = Vec::new();
    for name in ["a", "b"] {
        let script = format!("{}; touch {name}-done", held_until_go(name));
        inside.push(Running::start(
            &global,
            dir.path(),
            &["jobs:pool", "--permits", "2", "--", "sh", "-c", &script],
        ));
        wait_for_file(&dir.path().join(format!("{name}-in")));
    }
    let busy = run_no_wait(url, &["jobs:pool", "--permits", "2"]);
    assert_eq!(busy.code, 75, "a third holder of two permits: {busy:?}");
    let other_n = run_no_wait(url, &["jobs:pool", "--permits", "3"]);
    assert_eq!(
        other_n.code, 64,
        "another number of permits while held: {other_n:?}"
    );

    let third = Running::start(
        &global,
        dir.path(),
        &[
            "jobs:pool",
            "--permits",
            "2",
            "--",
            "sh",
            "-c",
            "if [ -e a-done ] && [ ! -e b-done ]; then echo after-a > c-in; else echo early > c-in; fi",
        ],
    );
    let semaphore = t.locker().semaphore("jobs:pool", 2).unwrap();
    assert_eq!(rt.block_on(semaphore.holders()).unwrap(), 2);
    std::fs::write(dir.path().join("go-a"), "").unwrap();
    assert_eq!(
        wait_for_file(&dir.path().join("c-in")).trim(),
        "after-a",
        "the third ran while only b held"
    );
    assert_eq!(third.wait().0, 0);
    std::fs::write(dir.path().join("go-b"), "").unwrap();
    for run in inside {
        assert_eq!(run.wait().0, 0);
    }
    until("every permit is given back", || {
        rt.block_on(semaphore.holders()).unwrap() == 0
    });
}

/// `run --read` commands share; `run --write` is busy beside them; a waiting writer keeps a
/// new reader out (75) and runs once the readers are gone, alone.
#[test]
fn write_excludes_read_and_a_waiting_writer_keeps_readers_out() {
    let Some(t) = Setup::new() else { return };
    let (rt, url, dir) = (&t.rt, t.url.as_str(), &t.dir);
    let global = ["--url", url];
    let reader = Running::start(
        &global,
        dir.path(),
        &[
            "jobs:rw",
            "--read",
            "--",
            "sh",
            "-c",
            &format!("{}; touch r-done", held_until_go("r")),
        ],
    );
    wait_for_file(&dir.path().join("r-in"));
    let beside = run_no_wait(url, &["jobs:rw", "--read"]);
    assert_eq!(beside.code, 0, "readers share: {beside:?}");
    let busy = run_no_wait(url, &["jobs:rw", "--write"]);
    assert_eq!(busy.code, 75, "a writer beside a reader: {busy:?}");

    let writer = Running::start(
        &global,
        dir.path(),
        &[
            "jobs:rw",
            "--write",
            "--fencing",
            "--",
            "sh",
            "-c",
            "if [ -e r-done ] && [ -n \"$LEASEHOLD_FENCING_TOKEN\" ]; then echo alone > w-in; else echo early > w-in; fi",
        ],
    );
    // Once the writer waits, a new reader is kept out.
    let rwlock = t.locker().rwlock("jobs:rw").unwrap();
    let options = leasehold::LockOptions::new(Duration::from_secs(10));
    until("the waiting writer keeps a reader out", || {
        match rt.block_on(rwlock.try_read(&options)).unwrap() {
            leasehold::TryAcquire::Busy { .. } => true,
            leasehold::TryAcquire::Acquired(guard) => {
                rt.block_on(guard.release()).unwrap();
                false
            }
        }
    });
    let kept_out = run_no_wait(url, &["jobs:rw", "--read"]);
    assert_eq!(
        kept_out.code, 75,
        "a reader behind a waiting writer: {kept_out:?}"
    );
    std::fs::write(dir.path().join("go-r"), "").unwrap();
    assert_eq!(reader.wait().0, 0);
    assert_eq!(wait_for_file(&dir.path().join("w-in")).trim(), "alone");
    assert_eq!(writer.wait().0, 0);
}

/// `leasehold elect` with two candidates: the first leads (etcd shows it, with its term), the
/// second waits; when the first's leasehold is killed with -9, its lease expires and the
/// second runs its command in a later term, then resigns.
#[test]
fn elect_the_second_candidate_takes_over_when_the_first_dies() {
    let Some(t) = Setup::new() else { return };
    let (rt, url, dir) = (&t.rt, t.url.as_str(), &t.dir);
    let global = ["--url", url];
    let first = Running::start_subcommand(
        &global,
        dir.path(),
        "elect",
        &[
            "svc",
            "--ttl",
            "2s",
            "--id",
            "first",
            "--",
            "sh",
            "-c",
            "echo $LEASEHOLD_TERM $$ > first; exec sleep 600",
        ],
    );
    let line = wait_for_file(&dir.path().join("first"));
    let mut fields = line.split_whitespace();
    let term: u64 = fields.next().unwrap().parse().unwrap();
    let child: i32 = fields.next().unwrap().parse().unwrap();
    let second = Running::start_subcommand(
        &global,
        dir.path(),
        "elect",
        &[
            "svc",
            "--ttl",
            "2s",
            "--id",
            "second",
            "--",
            "sh",
            "-c",
            "echo $LEASEHOLD_LEADER_ID $LEASEHOLD_TERM > second",
        ],
    );
    let election = t.locker().election("svc").unwrap();
    let leader = rt.block_on(election.leader()).unwrap().expect("a leader");
    assert_eq!((leader.id.as_str(), leader.term), ("first", term));
    kill(Pid::from_raw(first.pid() as i32), Signal::SIGKILL).unwrap();
    let killed_at = Instant::now();
    let _ = kill(Pid::from_raw(child), Signal::SIGKILL);
    let line = wait_for_file(&dir.path().join("second"));
    eprintln!(
        "takeover {:?} after the leader's kill -9 (TTL 2 s)",
        killed_at.elapsed()
    );
    let mut fields = line.split_whitespace();
    assert_eq!(fields.next(), Some("second"));
    let next: u64 = fields.next().unwrap().parse().unwrap();
    assert!(next > term, "terms strictly increase: {term} then {next}");
    assert_eq!(second.wait().0, 0);
    assert_eq!(
        rt.block_on(election.leader()).unwrap(),
        None,
        "the second resigned when its command ended"
    );
    drop(first);
}
