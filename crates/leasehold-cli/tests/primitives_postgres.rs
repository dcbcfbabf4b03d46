//! `leasehold run --permits/--read/--write` and `leasehold elect` on PostgreSQL, with both URL
//! forms: session advisory locks (`postgres://…`) and lease rows (`postgres://…?lock=lease`).
//! Every wait observes a file a command wrote or a process's exit.

use crate::support::{Running, leasehold, wait_for_file};

use leasehold_harness::postgres_for_test;

/// The two URLs of one server, with a name for the files of each.
fn urls(pg: &leasehold_harness::Postgres) -> [(&'static str, String); 2] {
    [
        ("session", pg.url()),
        ("lease", format!("{}?lock=lease", pg.url())),
    ]
}

/// A background `leasehold elect NAME --ttl 1s --id ID -- sh -c SCRIPT` on `url`.
fn candidate(url: &str, dir: &std::path::Path, name: &str, id: &str, script: &str) -> Running {
    Running::start_subcommand(
        &["--url", url],
        dir,
        "elect",
        &[name, "--ttl", "1s", "--id", id, "--", "sh", "-c", script],
    )
}

/// The second candidate wrote `second TERM` to `file`, in a term after `term`, and exited 0.
fn took_over(file: &std::path::Path, term: u64, second: Running, kind: &str) {
    let line = wait_for_file(file);
    let mut fields = line.split_whitespace();
    assert_eq!(fields.next(), Some("second"), "{kind}");
    let next: u64 = fields.next().unwrap().parse().unwrap();
    assert!(
        next > term,
        "{kind}: terms strictly increase: {term} then {next}"
    );
    assert_eq!(second.wait().0, 0, "{kind}");
}

/// A command that says it is in (`<name>-in`) and holds on until `go-<kind>` exists.
fn hold(name: &str, kind: &str) -> String {
    format!("echo in > {name}-in; while [ ! -e go-{kind} ]; do sleep 0.02; done")
}

// --permits 2: two commands at once; a third is busy (75 with --no-wait), and one that waits
// runs once a holder's command ends.
#[test]
fn two_permits_admit_two_commands_and_a_third_waits() {
    let Some(pg) = postgres_for_test() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    for (kind, url) in urls(&pg) {
        let key = format!("pool-{kind}");
        let mut inside = Vec::new();
        for name in ["a", "b"] {
            let name = format!("{name}-{kind}");
            let script = hold(&name, kind);
            inside.push(Running::start(
                &["--url", url.as_str()],
                dir.path(),
                &[&key, "--permits", "2", "--", "sh", "-c", &script],
            ));
            wait_for_file(&dir.path().join(format!("{name}-in")));
        }
        let third = leasehold(&[
            "--url",
            &url,
            "run",
            &key,
            "--permits",
            "2",
            "--no-wait",
            "--",
            "true",
        ]);
        assert_eq!(
            third.code, 75,
            "{kind}: a third holder of two permits: {third:?}"
        );
        let waiter_file = format!("c-{kind}-in");
        let waiter = Running::start(
            &["--url", url.as_str()],
            dir.path(),
            &[
                &key,
                "--permits",
                "2",
                "--",
                "sh",
                "-c",
                &format!("echo in > {waiter_file}"),
            ],
        );
        std::fs::write(dir.path().join(format!("go-{kind}")), "").unwrap();
        for run in inside {
            assert_eq!(run.wait().0, 0, "{kind}");
        }
        assert_eq!(waiter.wait().0, 0, "{kind}");
        wait_for_file(&dir.path().join(&waiter_file));
        let again = leasehold(&[
            "--url",
            &url,
            "run",
            &key,
            "--permits",
            "2",
            "--no-wait",
            "--",
            "true",
        ]);
        assert_eq!(again.code, 0, "{kind}: {again:?}");
    }
}

// --read / --write on session locks: readers run side by side, the writer alone, with a
// fencing number. Lease rows have no read-write lock: a usage error naming the backend.
#[test]
fn readers_run_together_and_the_writer_alone() {
    let Some(pg) = postgres_for_test() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let [(kind, url), (_, lease_url)] = urls(&pg);
    let mut readers = Vec::new();
    for name in ["r1", "r2"] {
        let script = hold(name, kind);
        readers.push(Running::start(
            &["--url", url.as_str()],
            dir.path(),
            &["jobs:rw", "--read", "--", "sh", "-c", &script],
        ));
        wait_for_file(&dir.path().join(format!("{name}-in")));
    }
    let writer = leasehold(&[
        "--url",
        &url,
        "run",
        "jobs:rw",
        "--write",
        "--no-wait",
        "--",
        "true",
    ]);
    assert_eq!(writer.code, 75, "a writer beside two readers: {writer:?}");
    std::fs::write(dir.path().join(format!("go-{kind}")), "").unwrap();
    for run in readers {
        assert_eq!(run.wait().0, 0);
    }
    let script = hold("w", "writer");
    let writer = Running::start(
        &["--url", url.as_str()],
        dir.path(),
        &[
            "jobs:rw",
            "--write",
            "--fencing",
            "--",
            "sh",
            "-c",
            &format!("echo $LEASEHOLD_FENCING_TOKEN > n; {script}"),
        ],
    );
    wait_for_file(&dir.path().join("w-in"));
    let n: u64 = std::fs::read_to_string(dir.path().join("n"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(n > 0);
    let reader = leasehold(&[
        "--url",
        &url,
        "run",
        "jobs:rw",
        "--read",
        "--no-wait",
        "--",
        "true",
    ]);
    assert_eq!(reader.code, 75, "a reader beside the writer: {reader:?}");
    std::fs::write(dir.path().join("go-writer"), "").unwrap();
    assert_eq!(writer.wait().0, 0);

    let refused = leasehold(&[
        "--url", &lease_url, "run", "jobs:rw", "--read", "--", "true",
    ]);
    assert_eq!(refused.code, 64, "{refused:?}");
    assert!(
        refused.stderr.contains("postgres-lease"),
        "{}",
        refused.stderr
    );
}

// `leasehold elect`: two candidates; the second runs its command only once the first's
// command ended (and it resigned), in a higher term.
#[test]
fn the_second_candidate_takes_over_when_the_first_exits() {
    let Some(pg) = postgres_for_test() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    for (kind, url) in urls(&pg) {
        let svc = format!("svc-{kind}");
        let first_file = format!("first-{kind}");
        let second_file = format!("second-{kind}");
        let first = candidate(
            &url,
            dir.path(),
            &svc,
            "first",
            &format!(
                "echo $LEASEHOLD_TERM > {first_file}; while [ ! -e go-{kind} ]; do sleep 0.02; done"
            ),
        );
        let term: u64 = wait_for_file(&dir.path().join(&first_file))
            .trim()
            .parse()
            .unwrap();
        let second = candidate(
            &url,
            dir.path(),
            &svc,
            "second",
            &format!("echo $LEASEHOLD_LEADER_ID $LEASEHOLD_TERM > {second_file}"),
        );
        std::fs::write(dir.path().join(format!("go-{kind}")), "").unwrap();
        assert_eq!(first.wait().0, 0, "{kind}");
        took_over(&dir.path().join(&second_file), term, second, kind);
    }
}

// `leasehold elect` on both URLs: the leader's `leasehold` killed with -9 (no resignation) is
// replaced, in a higher term: on session locks when the server sees its connection close, on
// lease rows when its row expires (the 1 s TTL).
#[test]
fn a_killed_leader_is_replaced() {
    use nix::sys::signal::{Signal, kill};
    use nix::unistd::Pid;
    let Some(pg) = postgres_for_test() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    for (kind, url) in urls(&pg) {
        let svc = format!("crash-{kind}");
        let (first_file, second_file) = (format!("k1-{kind}"), format!("k2-{kind}"));
        let first = candidate(
            &url,
            dir.path(),
            &svc,
            "first",
            &format!("echo $LEASEHOLD_TERM $$ > {first_file}; exec sleep 600"),
        );
        let line = wait_for_file(&dir.path().join(&first_file));
        let mut fields = line.split_whitespace();
        let term: u64 = fields.next().unwrap().parse().unwrap();
        let child: i32 = fields.next().unwrap().parse().unwrap();
        let second = candidate(
            &url,
            dir.path(),
            &svc,
            "second",
            &format!("echo $LEASEHOLD_LEADER_ID $LEASEHOLD_TERM > {second_file}"),
        );
        assert!(
            !dir.path().join(&second_file).exists(),
            "{kind}: a follower ran its command"
        );
        kill(Pid::from_raw(first.pid() as i32), Signal::SIGKILL).unwrap();
        let _ = kill(Pid::from_raw(child), Signal::SIGKILL);
        took_over(&dir.path().join(&second_file), term, second, kind);
        drop(first);
    }
}
