//! `run` and `elect` under misuse (issue 24): signals at every stage, closed or broken stdout
//! and stderr, a command that ignores SIGTERM, a command that forks and exits. After each: the
//! lock is released (or, where the release cannot be sent, expires), the exit status is the
//! documented one (`docs/cli-signals.md`), and no process of the command is left. Signal
//! handling does not depend on the server, so one server kind is enough.
//!
//! Every stage is reached by observing state (a marker file the command writes, the release
//! channel's subscribers, a fair queue's length, a client blocked by `CLIENT PAUSE`), never by
//! sleeping.

use crate::support;

use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::Path;
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use leasehold_harness::{Server, ServerOptions, SilentServer, server_test};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use support::{Running, wait_for_file};

/// Only guards against a hang: every wait below ends on an observed event.
const HANG_GUARD: Duration = Duration::from_secs(90);

const SIGNALS: [Signal; 3] = [Signal::SIGINT, Signal::SIGTERM, Signal::SIGHUP];

/// The pids the commands wrote: killed on drop, so that a failing test leaves none behind.
#[derive(Default)]
struct Pids(Vec<i32>);

impl Pids {
    /// Reads the whitespace-separated pids in `path` (once written) and keeps them.
    fn read(&mut self, path: &Path) -> Vec<i32> {
        let pids: Vec<i32> = wait_for_file(path)
            .split_whitespace()
            .map(|p| p.parse().unwrap())
            .collect();
        self.0.extend(&pids);
        pids
    }
}

impl Drop for Pids {
    fn drop(&mut self) {
        for &pid in &self.0 {
            let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
        }
    }
}

/// Whether `pid` is gone (not even a zombie).
fn gone(pid: i32) -> bool {
    !Path::new(&format!("/proc/{pid}")).exists()
}

fn exists(server: &Server, key: &str) -> bool {
    server.command(&["EXISTS", key]).unwrap().as_integer() == Some(1)
}

fn setup(bin: &leasehold_harness::ServerBinary) -> (Server, tempfile::TempDir) {
    (
        Server::start(bin, &ServerOptions::new()).unwrap(),
        tempfile::tempdir().unwrap(),
    )
}

fn send(run: &Running, sig: Signal) {
    kill(Pid::from_raw(run.pid() as i32), sig).unwrap();
}

/// Asserts that leasehold exited (not died of a signal) with `code`.
#[track_caller]
fn assert_exit(status: ExitStatus, code: i32, what: &str, stderr: &str) {
    assert_eq!(
        (status.code(), status.signal()),
        (Some(code), None),
        "{what}: expected exit status {code}\n--- stderr ---\n{stderr}"
    );
}

/// Waits until `done()` (bounded).
fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(start.elapsed() < HANG_GUARD, "never happened: {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn subscribers(server: &Server, channel: &str) -> i64 {
    server
        .command(&["PUBSUB", "NUMSUB", channel])
        .unwrap()
        .as_array()
        .unwrap()[1]
        .as_integer()
        .unwrap()
}

// Before the lock: a server that accepts and never answers. The connection is under way when
// the signal comes; leasehold exits 128+N at once (not 69 after the connect timeout, not dying
// of the signal), and the command never runs.
#[test]
fn a_signal_while_connecting_exits_128_plus_n() {
    let silent = SilentServer::start().unwrap();
    let dir = tempfile::tempdir().unwrap();
    for sig in SIGNALS {
        let accepted = silent.accepted();
        let run = Running::start(
            &["--url", &silent.url()],
            dir.path(),
            &["job", "--", "touch", "ran"],
        );
        wait_until("leasehold connected", || silent.accepted() > accepted);
        send(&run, sig);
        let (status, stderr) = run.wait_status();
        assert_exit(
            status,
            128 + sig as i32,
            &format!("{sig} while connecting"),
            &stderr,
        );
        assert!(stderr.contains(sig.as_str()), "{stderr}");
    }
    assert!(
        !dir.path().join("ran").exists(),
        "the command ran without the lock"
    );
}

// Before the lock: waiting for a lock another holder has, plain (subscribed to the release
// channel) and fair (queued). leasehold exits 128+N, the command never runs, the holder keeps
// the lock, and a fair waiter leaves the queue before leasehold exits.
server_test!(async fn a_signal_while_waiting_for_the_lock_exits_128_plus_n(bin) {
    let (server, dir) = setup(&bin);
    let url = server.url();
    let channel = leasehold::redis::release_channel("job");
    let queue = leasehold::redis::fair_queue_key("job");
    server.command(&["SET", "job", "holder", "PX", "600000"]).unwrap();
    for (sig, fair) in SIGNALS.into_iter().flat_map(|s| [(s, false), (s, true)]) {
        let mut args = vec!["job"];
        if fair {
            args.push("--fair");
        }
        args.extend(["--", "touch", "ran"]);
        let run = Running::start(&["--url", url.as_str()], dir.path(), &args);
        if fair {
            wait_until("leasehold queued", || server.command(&["ZCARD", &queue]).unwrap().as_integer() == Some(1));
        } else {
            wait_until("leasehold waited", || subscribers(&server, &channel) == 1);
        }
        send(&run, sig);
        let (status, stderr) = run.wait_status();
        let what = format!("{sig} while waiting (fair: {fair})");
        assert_exit(status, 128 + sig as i32, &what, &stderr);
        assert_eq!(server.command(&["ZCARD", &queue]).unwrap().as_integer(), Some(0), "{what}: still queued");
        // Its subscription ends with its connection, which the server may close later; else
        // the next waiter could be taken for subscribed before it is.
        wait_until("the subscription ended", || subscribers(&server, &channel) == 0);
    }
    assert!(!dir.path().join("ran").exists(), "the command ran without the lock");
    let holder = server.command(&["GET", "job"]).unwrap();
    assert_eq!(holder.as_bytes(), Some(&b"holder"[..]));
});

// Before leadership: campaigning while another holds the election's lock.
server_test!(async fn a_signal_while_campaigning_exits_128_plus_n(bin) {
    let (server, dir) = setup(&bin);
    let url = server.url();
    let channel = leasehold::redis::release_channel("svc");
    server.command(&["SET", "svc", "holder", "PX", "600000"]).unwrap();
    for sig in SIGNALS {
        let run = Running::start_subcommand(&["--url", url.as_str()], dir.path(), "elect", &["svc", "--", "touch", "ran"]);
        wait_until("leasehold campaigned", || subscribers(&server, &channel) == 1);
        send(&run, sig);
        let (status, stderr) = run.wait_status();
        assert_exit(status, 128 + sig as i32, &format!("{sig} while campaigning"), &stderr);
        // Else the next candidate could be taken for subscribed before it is.
        wait_until("the subscription ended", || subscribers(&server, &channel) == 0);
    }
    assert!(!dir.path().join("ran").exists(), "a candidate ran its command without leading");
});

// While the command runs: it ignores the signal leasehold forwards (its shell and the
// background child it started ignore INT, TERM and HUP). After --kill-grace the group gets
// SIGKILL; leasehold exits with the command's status (137) and only then releases: the key is
// gone and so are both processes. For `run` and `elect` alike.
server_test!(async fn a_command_ignoring_the_signal_is_killed_after_the_grace(bin) {
    let (server, dir) = setup(&bin);
    let url = server.url();
    let script = "trap '' INT TERM HUP; sleep 1000 & echo $$ $! > pids; \
                  while :; do sleep 0.05; done";
    let mut pids = Pids::default();
    for (subcommand, sig) in [("run", Signal::SIGTERM), ("elect", Signal::SIGINT), ("run", Signal::SIGHUP)] {
        let _ = std::fs::remove_file(dir.path().join("pids"));
        let args = ["job", "--kill-grace", "100ms", "--", "sh", "-c", script];
        let run = Running::start_subcommand(&["--url", url.as_str()], dir.path(), subcommand, &args);
        let started = pids.read(&dir.path().join("pids"));
        assert!(exists(&server, "job"));
        send(&run, sig);
        let (status, stderr) = run.wait_status();
        let what = format!("{subcommand}, {sig}");
        assert_exit(status, 128 + 9, &what, &stderr);
        assert!(stderr.contains("SIGKILL"), "{what}: {stderr}");
        assert!(!exists(&server, "job"), "{what}: lock left behind");
        for pid in started {
            assert!(gone(pid), "{what}: process {pid} left behind");
        }
    }
});

// A command that starts a background child and exits: the child is in the command's process
// group, and is stopped (SIGTERM, or SIGKILL after --kill-grace if it ignores that) before the
// lock is released: it must not go on unprotected, nor be left behind. The command's status
// is leasehold's.
server_test!(async fn a_command_that_forks_and_exits_leaves_nothing_behind(bin) {
    let (server, dir) = setup(&bin);
    let url = server.url();
    let mut pids = Pids::default();
    for (subcommand, script, signal) in [
        ("run", "sleep 1000 & echo $! > pids; exit 3", "SIGTERM"),
        ("elect", "trap '' TERM; sleep 1000 & echo $! > pids; exit 3", "SIGKILL"),
    ] {
        let _ = std::fs::remove_file(dir.path().join("pids"));
        let args = ["job", "--kill-grace", "100ms", "--", "sh", "-c", script];
        let run = Running::start_subcommand(&["--url", url.as_str()], dir.path(), subcommand, &args);
        let (status, stderr) = run.wait_status();
        let left = pids.read(&dir.path().join("pids"));
        assert_exit(status, 3, subcommand, &stderr);
        assert!(stderr.contains("leaving processes") && stderr.contains(signal), "{subcommand}: {stderr}");
        assert!(gone(left[0]), "{subcommand}: the background child was left behind");
        assert!(!exists(&server, "job"), "{subcommand}: lock left behind");
    }
});

// The order: while a leftover of the command lives (it ignores SIGTERM, and the grace is long),
// the lock is still held; once it is gone (killed here), the lock is released.
server_test!(async fn the_lock_is_held_until_the_leftovers_are_gone(bin) {
    let (server, dir) = setup(&bin);
    let mut pids = Pids::default();
    let script = "trap '' TERM; sleep 1000 & echo $! > pids";
    let args = ["job", "--kill-grace", "10m", "--", "sh", "-c", script];
    let run = Running::start(&["--url", server.url().as_str()], dir.path(), &args);
    let left = pids.read(&dir.path().join("pids"))[0];
    run.wait_for_stderr("leaving processes");
    assert!(exists(&server, "job"), "released while a leftover still ran");
    assert!(!gone(left));
    kill(Pid::from_raw(left), Signal::SIGKILL).unwrap();
    let (status, stderr) = run.wait_status();
    assert_exit(status, 0, "leftover killed", &stderr);
    assert!(!exists(&server, "job"), "lock left behind");
    assert!(gone(left), "the leftover was not reaped");
});

// Ctrl-Z while the command runs: it would stop leasehold (not the command, in its own process
// group), and the lock would expire under the running command. It is ignored.
server_test!(async fn ctrl_z_is_ignored_while_the_lock_is_held(bin) {
    let (server, dir) = setup(&bin);
    let mut pids = Pids::default();
    let script = "echo $$ > pids; while [ ! -e go ]; do sleep 0.02; done";
    let run = Running::start(&["--url", server.url().as_str()], dir.path(), &["job", "--", "sh", "-c", script]);
    pids.read(&dir.path().join("pids"));
    send(&run, Signal::SIGTSTP);
    run.wait_for_stderr("SIGTSTP ignored");
    std::fs::write(dir.path().join("go"), "").unwrap();
    let (status, stderr) = run.wait_status();
    assert_exit(status, 0, "after SIGTSTP", &stderr);
    assert!(!exists(&server, "job"), "lock left behind");
});

// During the release (or resignation): the server holds it back (`CLIENT PAUSE ... WRITE`), and
// the signal arrives while it is blocked. The release is not abandoned: once the server
// answers, the lock is gone, and leasehold exits 128+N. (The client's 5 s response timeout
// must not run out between the release being held back and the UNPAUSE: a few steps.) A second signal gives up at once
// (128+N while the server still holds the release back); the lock then expires.
server_test!(async fn a_signal_during_the_release_lets_it_finish(bin) {
    let (server, dir) = setup(&bin);
    let url = server.url();
    let blocked = || {
        let clients = server.command(&["CLIENT", "LIST"]).unwrap();
        String::from_utf8_lossy(clients.as_bytes().unwrap()).contains("flags=b ")
    };
    for (subcommand, sig, twice) in [
        ("run", Signal::SIGTERM, false),
        ("elect", Signal::SIGINT, false),
        ("run", Signal::SIGHUP, true),
    ] {
        let what = format!("{subcommand}, {sig}, twice: {twice}");
        for file in ["up", "go"] {
            let _ = std::fs::remove_file(dir.path().join(file));
        }
        // A long TTL: no renewal is due while the server is paused.
        let args = ["job", "--ttl", "600s", "--", "sh", "-c", "echo > up; while [ ! -e go ]; do sleep 0.02; done"];
        let run = Running::start_subcommand(&["--url", url.as_str()], dir.path(), subcommand, &args);
        wait_for_file(&dir.path().join("up"));
        server.command(&["CLIENT", "PAUSE", "600000", "WRITE"]).unwrap();
        std::fs::write(dir.path().join("go"), "").unwrap();
        wait_until("the release was held back", blocked);
        send(&run, sig);
        run.wait_for_stderr("finishing the release first");
        if twice {
            send(&run, sig);
            let (status, stderr) = run.wait_status();
            assert_exit(status, 128 + sig as i32, &what, &stderr);
            server.command(&["CLIENT", "UNPAUSE"]).unwrap();
            let pttl = server.command(&["PTTL", "job"]).unwrap().as_integer().unwrap();
            assert!(pttl > 0, "{what}: the abandoned lock does not expire (PTTL {pttl})");
            server.command(&["DEL", "job"]).unwrap();
        } else {
            server.command(&["CLIENT", "UNPAUSE"]).unwrap();
            let (status, stderr) = run.wait_status();
            assert_exit(status, 128 + sig as i32, &what, &stderr);
            assert!(!exists(&server, "job"), "{what}: the release was abandoned");
        }
    }
});

/// How a test spoils leasehold's stdout and stderr.
#[derive(Debug, Clone, Copy)]
enum Spoiled {
    /// fd 1 and 2 closed before leasehold starts.
    Closed,
    /// Pipes whose reading end is closed: every write fails with EPIPE.
    Broken,
}

fn spoil(how: Spoiled) -> impl FnOnce(&mut Command) {
    move |command| match how {
        Spoiled::Closed => unsafe {
            command.pre_exec(|| {
                nix::unistd::close(1)?;
                nix::unistd::close(2)?;
                Ok(())
            });
        },
        Spoiled::Broken => {
            command.stdout(Stdio::piped()).stderr(Stdio::piped());
        }
    }
}

// Closed, or broken (EPIPE), stdout and stderr: leasehold writes its lines to stderr (the
// leader's term; a lost lock) and must not panic on them: the elected command runs and the
// leadership is given back; a lost lock still stops the command and exits 76.
server_test!(async fn closed_or_broken_stdout_and_stderr_change_nothing(bin) {
    let (server, dir) = setup(&bin);
    let url = server.url();
    let mut pids = Pids::default();
    for how in [Spoiled::Closed, Spoiled::Broken] {
        let _ = std::fs::remove_file(dir.path().join("ran"));
        let run = Running::start_with(&["--url", url.as_str()], dir.path(), "elect", &["svc", "--", "touch", "ran"], spoil(how));
        let (status, stderr) = run.wait_status();
        assert_exit(status, 0, &format!("elect, {how:?}"), &stderr);
        assert!(dir.path().join("ran").exists(), "{how:?}: the leader's command did not run");
        assert!(!exists(&server, "svc"), "{how:?}: leadership left behind");

        let _ = std::fs::remove_file(dir.path().join("pid"));
        let args = ["job", "--ttl", "1s", "--", "sh", "-c", "echo $$ > pid; exec sleep 1000"];
        let run = Running::start_with(&["--url", url.as_str()], dir.path(), "run", &args, spoil(how));
        let pid = pids.read(&dir.path().join("pid"))[0];
        server.command(&["DEL", "job"]).unwrap();
        let (status, stderr) = run.wait_status();
        assert_exit(status, 76, &format!("lost lock, {how:?}"), &stderr);
        assert!(gone(pid), "{how:?}: the command outlived its lock");
    }
});

// The statuses above are the documented ones.
#[test]
fn the_help_documents_the_signal_statuses() {
    for subcommand in ["run", "elect"] {
        let help = support::leasehold(&[subcommand, "--help"]).expect(0);
        for text in [
            "128+N",
            "--kill-grace",
            "process group",
            "docs/cli-signals.md",
        ] {
            assert!(
                help.stdout.contains(text),
                "{text:?} missing from {subcommand} --help:\n{}",
                help.stdout
            );
        }
    }
}
