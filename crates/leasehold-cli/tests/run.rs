//! `leasehold run`: real child processes under a real lock, on every server of the matrix.

use crate::support;

use std::path::Path;
use std::time::{Duration, Instant};

use leasehold_harness::{Server, ServerOptions, server_test};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use support::{Running, leasehold, sample, scrape, wait_for_file};

/// Only guards against a hang: every wait below ends on an observed event.
const HANG_GUARD: Duration = Duration::from_secs(90);

fn exists(server: &Server, key: &str) -> bool {
    server.command(&["EXISTS", key]).unwrap().as_integer() == Some(1)
}

fn get(server: &Server, key: &str) -> Option<String> {
    server
        .command(&["GET", key])
        .unwrap()
        .as_bytes()
        .map(|b| String::from_utf8_lossy(b).into_owned())
}

fn setup(bin: &leasehold_harness::ServerBinary) -> (Server, tempfile::TempDir) {
    (
        Server::start(bin, &ServerOptions::new()).unwrap(),
        tempfile::tempdir().unwrap(),
    )
}

server_test!(async fn exit_status_passes_through_and_the_lock_is_released(bin) {
    let (server, dir) = setup(&bin);
    let url = server.url();
    for (script, code) in [("exit 0", 0), ("exit 7", 7), ("kill -USR1 $$", 128 + 10)] {
        let run = Running::start(&["--url", url.as_str()], dir.path(), &["job", "--", "sh", "-c", script]);
        let (status, stderr) = run.wait();
        assert_eq!(status, code, "{script}: {stderr}");
        assert!(!exists(&server, "job"), "lock left behind after {script}");
    }
});

// The child sees its key, token and fencing number; the token is the one in the key.
server_test!(async fn the_child_gets_key_token_and_fencing_number(bin) {
    let (server, dir) = setup(&bin);
    let script = "echo \"$LEASEHOLD_KEY $LEASEHOLD_TOKEN ${LEASEHOLD_FENCING_TOKEN:-none}\" > env.txt; \
                  while [ ! -e go ]; do sleep 0.02; done";
    for (fencing, number) in [(true, "1"), (false, "none")] {
        let mut args = vec!["jobs:env", "--ttl", "30s"];
        if fencing {
            args.push("--fencing");
        }
        args.extend(["--", "sh", "-c", script]);
        let run = Running::start(&["--url", server.url().as_str()], dir.path(), &args);
        let env = wait_for_file(&dir.path().join("env.txt"));
        let fields: Vec<&str> = env.split_whitespace().collect();
        assert_eq!(fields[0], "jobs:env");
        assert_eq!(Some(fields[1].to_string()), get(&server, "jobs:env"), "LEASEHOLD_TOKEN is not the key's value");
        assert_eq!(fields[2], number);
        std::fs::write(dir.path().join("go"), "").unwrap();
        assert_eq!(run.wait().0, 0);
        assert!(!exists(&server, "jobs:env"));
        std::fs::remove_file(dir.path().join("env.txt")).unwrap();
        std::fs::remove_file(dir.path().join("go")).unwrap();
    }
});

server_test!(async fn child_killed_with_sigkill_releases_the_lock(bin) {
    let (server, dir) = setup(&bin);
    let run = Running::start(&["--url", server.url().as_str()], dir.path(), &["job", "--", "sh", "-c", "echo $$ > pid; exec sleep 600"]);
    let pid: i32 = wait_for_file(&dir.path().join("pid")).trim().parse().unwrap();
    assert!(exists(&server, "job"));
    kill(Pid::from_raw(pid), Signal::SIGKILL).unwrap();
    let (status, _) = run.wait();
    assert_eq!(status, 128 + 9);
    assert!(!exists(&server, "job"), "lock left behind");
});

// SIGTERM to leasehold is forwarded to the child; when it has ended, the lock is released.
server_test!(async fn sigterm_to_leasehold_is_forwarded_then_the_lock_released(bin) {
    let (server, dir) = setup(&bin);
    for (signal, code) in [(Signal::SIGTERM, 143), (Signal::SIGINT, 130), (Signal::SIGHUP, 129)] {
        let _ = std::fs::remove_file(dir.path().join("started"));
        let run = Running::start(&["--url", server.url().as_str()], dir.path(), &["job", "--", "sh", "-c", "echo up > started; exec sleep 600"]);
        wait_for_file(&dir.path().join("started"));
        kill(Pid::from_raw(run.pid() as i32), signal).unwrap();
        let (status, stderr) = run.wait();
        assert_eq!(status, code, "{signal}: {stderr}");
        assert!(!exists(&server, "job"), "lock left behind after {signal}");
    }
});

// The key deleted, or overwritten, from outside while the command runs: the renewal notices,
// the command is terminated, and leasehold exits 76 saying why.
server_test!(async fn losing_the_lock_terminates_the_command(bin) {
    let (server, dir) = setup(&bin);
    for tamper in [&["DEL", "job"][..], &["SET", "job", "someone-else"][..]] {
        let _ = std::fs::remove_file(dir.path().join("pid"));
        let run = Running::start(&["--url", server.url().as_str()], dir.path(), &["job", "--ttl", "1s", "--", "sh", "-c", "echo $$ > pid; exec sleep 600"]);
        let pid: i32 = wait_for_file(&dir.path().join("pid")).trim().parse().unwrap();
        server.command(tamper).unwrap();
        let (status, stderr) = run.wait();
        assert_eq!(status, 76, "{stderr}");
        assert!(stderr.contains("lost") && stderr.contains("SIGTERM"), "{stderr}");
        assert!(!Path::new(&format!("/proc/{pid}")).exists(), "the command survived the loss");
        server.command(&["DEL", "job"]).unwrap();
    }
});

// A command that ignores SIGTERM gets SIGKILL after the grace period.
server_test!(async fn a_command_ignoring_sigterm_is_killed_after_the_grace(bin) {
    let (server, dir) = setup(&bin);
    let script = "trap '' TERM; echo $$ > pid; while :; do sleep 0.05; done";
    let run = Running::start(&["--url", server.url().as_str()], dir.path(), &["job", "--ttl", "1s", "--kill-grace", "200ms", "--", "sh", "-c", script]);
    let pid: i32 = wait_for_file(&dir.path().join("pid")).trim().parse().unwrap();
    server.command(&["DEL", "job"]).unwrap();
    let (status, stderr) = run.wait();
    assert_eq!(status, 76, "{stderr}");
    assert!(stderr.contains("SIGKILL"), "{stderr}");
    assert!(!Path::new(&format!("/proc/{pid}")).exists());
});

// Two `run --wait` on one key serialize: the second command starts only after the first ended.
server_test!(async fn two_waiting_runs_serialize(bin) {
    let (server, dir) = setup(&bin);
    let first = Running::start(&["--url", server.url().as_str()], dir.path(), &["job", "--wait", "60s", "--", "sh", "-c",
        "echo 'A start' >> order; while [ ! -e release-a ]; do sleep 0.02; done; echo 'A end' >> order"]);
    wait_for_file(&dir.path().join("order"));
    // The second run subscribes to the key's release channel before its first attempt: once it
    // is subscribed and A still holds the lock, B is waiting.
    let second = Running::start(&["--url", server.url().as_str()], dir.path(), &["job", "--wait", "60s", "--", "sh", "-c",
        "echo 'B start' >> order; echo 'B end' >> order"]);
    let channel = leasehold::redis::release_channel("job");
    let start = Instant::now();
    while server.command(&["PUBSUB", "NUMSUB", &channel]).unwrap().as_array().and_then(|a| a[1].as_integer()) != Some(1) {
        assert!(start.elapsed() < HANG_GUARD, "the second run never waited");
        std::thread::sleep(Duration::from_millis(10));
    }
    std::fs::write(dir.path().join("release-a"), "").unwrap();
    assert_eq!(first.wait().0, 0);
    assert_eq!(second.wait().0, 0);
    let order = std::fs::read_to_string(dir.path().join("order")).unwrap();
    assert_eq!(order, "A start\nA end\nB start\nB end\n");
    assert!(!exists(&server, "job"));
});

server_test!(async fn busy_lock_exits_75_or_the_conflict_code(bin) {
    let (server, _dir) = setup(&bin);
    server.command(&["SET", "job", "holder", "PX", "60000"]).unwrap();
    let url = server.url();
    let run = |extra: &[&str]| {
        let mut args = vec!["--url", url.as_str(), "run", "job"];
        args.extend(extra);
        args.extend(["--", "sh", "-c", "echo ran > /dev/stderr"]);
        leasehold(&args)
    };
    let busy = run(&["--no-wait"]).expect(75);
    assert!(!busy.stderr.contains("ran"), "the command ran without the lock");
    run(&["--no-wait", "--conflict-exit-code", "3"]).expect(3);
    run(&["--wait", "100ms"]).expect(75);
    assert_eq!(get(&server, "job").as_deref(), Some("holder"));
});

server_test!(async fn command_not_found_exits_127_and_releases(bin) {
    let (server, _dir) = setup(&bin);
    let r = leasehold(&["--url", &server.url(), "run", "job", "--", "/no/such/command-leasehold"]).expect(127);
    assert!(r.stderr.contains("no/such/command-leasehold"), "{}", r.stderr);
    assert!(!exists(&server, "job"));
});

#[test]
fn unreachable_server_exits_69() {
    let closed = support::closed_port();
    let url = closed.redis_url();
    let r = leasehold(&["--url", &url, "run", "job", "--", "true"]).expect(69);
    assert!(!r.stderr.is_empty());
}

// --fair: the commands run in the order they queued, each handed the lock by the previous one.
server_test!(async fn fair_runs_go_in_arrival_order(bin) {
    let (server, dir) = setup(&bin);
    let url = server.url();
    let queue = leasehold::redis::fair_queue_key("jobs:fair");
    let queued = || server.command(&["ZCARD", &queue]).unwrap().as_integer().unwrap();
    let first = Running::start(
        &["--url", url.as_str()],
        dir.path(),
        &["jobs:fair", "--fair", "--", "sh", "-c", "echo first >> order; while [ ! -e go ]; do sleep 0.02; done"],
    );
    wait_for_file(&dir.path().join("order"));
    let mut later = Vec::new();
    for (i, name) in ["second", "third", "fourth"].into_iter().enumerate() {
        let script = format!("echo {name} >> order");
        later.push(Running::start(
            &["--url", url.as_str()],
            dir.path(),
            &["jobs:fair", "--fair", "--", "sh", "-c", &script],
        ));
        let start = Instant::now();
        while queued() != i as i64 + 1 {
            assert!(start.elapsed() < HANG_GUARD, "{name} never queued");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
    std::fs::write(dir.path().join("go"), "").unwrap();
    assert_eq!(first.wait().0, 0);
    for run in later {
        assert_eq!(run.wait().0, 0);
    }
    let order = std::fs::read_to_string(dir.path().join("order")).unwrap();
    assert_eq!(order, "first\nsecond\nthird\nfourth\n");
    assert!(!exists(&server, "jobs:fair"));
    assert_eq!(queued(), 0);
});

// --permits N: at most N commands at once under one name; the N+1st is busy until one ends.
server_test!(async fn permits_admit_n_commands_at_once(bin) {
    let (server, dir) = setup(&bin);
    let url = server.url();
    let mut inside = Vec::new();
    for name in ["a", "b"] {
        let script = format!("echo in > {name}-in; while [ ! -e go ]; do sleep 0.02; done");
        inside.push(Running::start(
            &["--url", url.as_str()],
            dir.path(),
            &["jobs:pool", "--permits", "2", "--", "sh", "-c", &script],
        ));
        wait_for_file(&dir.path().join(format!("{name}-in")));
    }
    let third = leasehold(&[
        "--url", url.as_str(), "run", "jobs:pool", "--permits", "2", "--no-wait", "--", "true",
    ]);
    assert_eq!(third.code, 75, "a third holder of two permits: {third:?}");
    let other_n = leasehold(&[
        "--url", url.as_str(), "run", "jobs:pool", "--permits", "3", "--no-wait", "--", "true",
    ]);
    assert_eq!(other_n.code, 64, "another number of permits while held: {other_n:?}");
    std::fs::write(dir.path().join("go"), "").unwrap();
    for run in inside {
        assert_eq!(run.wait().0, 0);
    }
    let again = leasehold(&[
        "--url", url.as_str(), "run", "jobs:pool", "--permits", "2", "--no-wait", "--", "true",
    ]);
    assert_eq!(again.code, 0, "{again:?}");
    let zero = leasehold(&["--url", url.as_str(), "run", "jobs:pool", "--permits", "0", "--", "true"]);
    assert_eq!(zero.code, 64, "{zero:?}");
});

// --read / --write: readers run side by side, the writer alone.
server_test!(async fn readers_run_together_and_the_writer_alone(bin) {
    let (server, dir) = setup(&bin);
    let url = server.url();
    let mut readers = Vec::new();
    for name in ["r1", "r2"] {
        let script = format!("echo in > {name}-in; while [ ! -e go ]; do sleep 0.02; done");
        readers.push(Running::start(
            &["--url", url.as_str()],
            dir.path(),
            &["jobs:rw", "--read", "--", "sh", "-c", &script],
        ));
        wait_for_file(&dir.path().join(format!("{name}-in")));
    }
    let writer = leasehold(&[
        "--url", url.as_str(), "run", "jobs:rw", "--write", "--no-wait", "--", "true",
    ]);
    assert_eq!(writer.code, 75, "a writer beside two readers: {writer:?}");
    std::fs::write(dir.path().join("go"), "").unwrap();
    for run in readers {
        assert_eq!(run.wait().0, 0);
    }
    let writer = leasehold(&[
        "--url", url.as_str(), "run", "jobs:rw", "--write", "--fencing", "--no-wait", "--", "sh", "-c",
        "test -n \"$LEASEHOLD_FENCING_TOKEN\"",
    ]);
    assert_eq!(writer.code, 0, "{writer:?}");
    let both = leasehold(&["--url", url.as_str(), "run", "jobs:rw", "--read", "--write", "--", "true"]);
    assert_ne!(both.code, 0, "--read with --write: {both:?}");
});

// `leasehold elect`: the command runs only while leader; when the leader's leasehold is killed
// with -9, the waiting candidate takes over in a later term.
server_test!(async fn elect_runs_the_command_only_while_leader(bin) {
    let (server, dir) = setup(&bin);
    let url = server.url();
    let first = Running::start_subcommand(
        &["--url", url.as_str()],
        dir.path(),
        "elect",
        &["svc", "--ttl", "1s", "--id", "first", "--", "sh", "-c", "echo $LEASEHOLD_TERM $$ > first; exec sleep 600"],
    );
    let line = wait_for_file(&dir.path().join("first"));
    let mut fields = line.split_whitespace();
    let term: u64 = fields.next().unwrap().parse().unwrap();
    let child: i32 = fields.next().unwrap().parse().unwrap();
    let second = Running::start_subcommand(
        &["--url", url.as_str()],
        dir.path(),
        "elect",
        &["svc", "--ttl", "1s", "--id", "second", "--", "sh", "-c", "echo $LEASEHOLD_LEADER_ID $LEASEHOLD_TERM > second"],
    );
    // While the first leads, the second only waits.
    let record = leasehold::internal::election_leader_key("svc");
    // `term id`, then the winner's token on its own line (Election::leader checks it).
    let recorded = get(&server, &record).expect("a leader record");
    assert_eq!(recorded.lines().next(), Some(format!("{term} first").as_str()));
    assert!(!dir.path().join("second").exists(), "a follower ran its command");
    kill(Pid::from_raw(first.pid() as i32), Signal::SIGKILL).unwrap();
    let _ = kill(Pid::from_raw(child), Signal::SIGKILL);
    let line = wait_for_file(&dir.path().join("second"));
    let mut fields = line.split_whitespace();
    assert_eq!(fields.next(), Some("second"));
    let next: u64 = fields.next().unwrap().parse().unwrap();
    assert!(next > term, "terms strictly increase: {term} then {next}");
    assert_eq!(second.wait().0, 0);
    assert!(!exists(&server, "svc"), "the second resigned when its command ended");
    drop(first);
});

// --metrics-addr: while the command runs, a scrape shows its acquisition, its wait, the round
// trips and the renewals that keep its lease; no token appears in it.
server_test!(async fn metrics_are_served_to_prometheus_while_the_command_runs(bin) {
    let (server, dir) = setup(&bin);
    let run = Running::start(
        &["--url", server.url().as_str()],
        dir.path(),
        &["jobs:metrics", "--ttl", "1s", "--metrics-addr", "127.0.0.1:0", "--",
          "sh", "-c", "while [ ! -e go ]; do sleep 0.02; done"],
    );
    let addr = run.metrics_addr();
    let start = Instant::now();
    // Renewed every third of the 1 s TTL: wait until the scrape has seen two renewals.
    let body = loop {
        assert!(start.elapsed() < HANG_GUARD, "no renewals in the metrics");
        if let Some(body) = scrape(&addr)
            && sample(&body, "leasehold_renewals_total", &[]).unwrap_or(0.0) >= 2.0
        {
            break body;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let acquired = ["outcome=\"acquired\"", "mode=\"plain\"", "backend=\"redis\""];
    assert_eq!(sample(&body, "leasehold_acquisitions_total", &acquired), Some(1.0), "{body}");
    assert!(sample(&body, "leasehold_wait_seconds_count", &["mode=\"plain\""]) == Some(1.0), "{body}");
    // At least the acquisition and the two renewals went to the server.
    assert!(sample(&body, "leasehold_round_trips_total", &[]).unwrap() >= 3.0, "{body}");
    assert_eq!(sample(&body, "leasehold_leases_lost_total", &[]), None, "{body}");
    let token = get(&server, "jobs:metrics").expect("held");
    assert!(!body.contains(&token), "the token leaked into the metrics");
    std::fs::write(dir.path().join("go"), "").unwrap();
    assert_eq!(run.wait().0, 0);
    assert!(!exists(&server, "jobs:metrics"));
});
