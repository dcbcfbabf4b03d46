//! Running the built binary from the tests: `leasehold`, or `leasehold-lab` in that crate's
//! suite (which includes this file); each suite names its binary as `crate::BIN`.

#![allow(dead_code)]

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

/// No single invocation may take longer than this (the demo takes about two seconds).
const BOUND: Duration = Duration::from_secs(120);

/// What one run of the binary did.
#[derive(Debug)]
pub struct Run {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl Run {
    /// Panics, showing everything, unless the exit status is `code`.
    #[track_caller]
    pub fn expect(self, code: i32) -> Run {
        assert_eq!(
            self.code, code,
            "expected exit status {code}\n--- stdout ---\n{}\n--- stderr ---\n{}",
            self.stdout, self.stderr
        );
        self
    }

    /// stdout parsed as one JSON object.
    #[track_caller]
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(self.stdout.trim())
            .unwrap_or_else(|e| panic!("stdout is not JSON ({e}): {:?}", self.stdout))
    }
}

/// Runs `leasehold args...` with the URL variables cleared, and waits for it (bounded: a run
/// that hangs is killed and fails the test).
pub fn leasehold(args: &[&str]) -> Run {
    leasehold_env(args, &[])
}

/// Runs `leasehold --url URL args...` (as [`leasehold`]).
pub fn leasehold_at(url: &str, args: &[&str]) -> Run {
    let mut all = vec!["--url", url];
    all.extend(args);
    leasehold(&all)
}

/// As [`leasehold`], with extra environment variables.
pub fn leasehold_env(args: &[&str], env: &[(&str, &str)]) -> Run {
    let mut cmd = Command::new(crate::BIN);
    cmd.args(args)
        .env_remove("LEASEHOLD_URL")
        .env_remove("REDIS_URL")
        .env_remove("LEASEHOLD_TOKEN")
        .env_remove("RUST_LOG")
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().expect("spawn leasehold");
    let mut stdout = child.stdout.take().expect("stdout");
    let mut stderr = child.stderr.take().expect("stderr");
    let out = thread::spawn(move || {
        let mut s = String::new();
        let _ = stdout.read_to_string(&mut s);
        s
    });
    let err = thread::spawn(move || {
        let mut s = String::new();
        let _ = stderr.read_to_string(&mut s);
        s
    });
    let deadline = Instant::now() + BOUND;
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait for leasehold") {
            break status;
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "`leasehold {}` did not finish within {BOUND:?}\n--- stdout ---\n{}",
                args.join(" "),
                out.join().unwrap_or_default()
            );
        }
        thread::sleep(Duration::from_millis(10));
    };
    Run {
        code: status.code().expect("leasehold was killed by a signal"),
        stdout: out.join().expect("stdout reader"),
        stderr: err.join().expect("stderr reader"),
    }
}

/// Asserts that each of `expected` is a whole line of `text`, in this order.
#[track_caller]
pub fn assert_lines_in_order(text: &str, expected: &[&str]) {
    let mut lines = text.lines();
    for want in expected {
        assert!(
            lines.any(|l| l == *want),
            "line {want:?} missing (or out of order) in:\n{text}"
        );
    }
}

/// A background `leasehold <global args> run <args>` in `dir`; stdout is discarded, stderr kept
/// in a file of its own (several may run at once in one directory). Killed on drop.
pub struct Running {
    child: Child,
    stderr: PathBuf,
}

impl Running {
    pub fn start<S: AsRef<std::ffi::OsStr>>(global: &[S], dir: &Path, args: &[&str]) -> Running {
        Self::start_subcommand(global, dir, "run", args)
    }

    /// A background `leasehold <global args> <subcommand> <args>` (`run`, `elect`).
    pub fn start_subcommand<S: AsRef<std::ffi::OsStr>>(
        global: &[S],
        dir: &Path,
        subcommand: &str,
        args: &[&str],
    ) -> Running {
        Self::start_with(global, dir, subcommand, args, |_| {})
    }

    /// As [`Running::start_subcommand`], with `configure` applied to the command last (to
    /// change its stdio, say). A stdout or stderr made `Stdio::piped()` has its reading end
    /// closed at once: writes to it fail with EPIPE.
    pub fn start_with<S: AsRef<std::ffi::OsStr>>(
        global: &[S],
        dir: &Path,
        subcommand: &str,
        args: &[&str],
        configure: impl FnOnce(&mut Command),
    ) -> Running {
        use std::sync::atomic::{AtomicU32, Ordering};
        static N: AtomicU32 = AtomicU32::new(0);
        let stderr = dir.join(format!(
            "leasehold-{}.err",
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let mut command = Command::new(crate::BIN);
        command
            .args(global)
            .arg(subcommand)
            .args(args)
            .env_remove("LEASEHOLD_URL")
            .env_remove("REDIS_URL")
            .env_remove("LEASEHOLD_TOKEN")
            .current_dir(dir)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&stderr).expect("stderr file"));
        configure(&mut command);
        let mut child = command.spawn().expect("spawn leasehold");
        drop(child.stdout.take());
        drop(child.stderr.take());
        Running { child, stderr }
    }

    /// What leasehold wrote on stderr so far (empty when it went elsewhere).
    pub fn stderr(&self) -> String {
        std::fs::read_to_string(&self.stderr).unwrap_or_default()
    }

    /// Waits until leasehold's stderr contains `text` (bounded).
    pub fn wait_for_stderr(&self, text: &str) {
        let start = Instant::now();
        while !self.stderr().contains(text) {
            assert!(
                start.elapsed() < BOUND,
                "{text:?} never appeared on stderr:\n{}",
                self.stderr()
            );
            thread::sleep(Duration::from_millis(10));
        }
    }

    /// Where `--metrics-addr 127.0.0.1:0` ended up: the address leasehold printed once it
    /// listened (bounded wait). A port picked by the test and bound later by the child could
    /// be taken meanwhile by any other process's server (CI's stop run 37 lost a test so).
    pub fn metrics_addr(&self) -> String {
        const AT: &str = "metrics on http://";
        self.wait_for_stderr(AT);
        let stderr = self.stderr();
        let rest = &stderr[stderr.find(AT).unwrap() + AT.len()..];
        let end = rest
            .find("/metrics")
            .expect("the metrics line names its path");
        rest[..end].to_string()
    }

    /// The leasehold process's pid.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Waits for leasehold to exit (bounded); returns its status code and stderr.
    pub fn wait(self) -> (i32, String) {
        let (status, stderr) = self.wait_status();
        (status.code().expect("leasehold killed by a signal"), stderr)
    }

    /// Waits for leasehold to exit (bounded); returns its exit status and stderr.
    pub fn wait_status(mut self) -> (std::process::ExitStatus, String) {
        let start = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().expect("wait for leasehold") {
                return (status, self.stderr());
            }
            assert!(
                start.elapsed() < BOUND,
                "leasehold did not finish:\n{}",
                self.stderr()
            );
            thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Waits until the child has written `path` (a whole line) and returns it.
pub fn wait_for_file(path: &Path) -> String {
    let start = Instant::now();
    loop {
        if let Ok(s) = std::fs::read_to_string(path)
            && s.ends_with('\n')
        {
            return s;
        }
        assert!(start.elapsed() < BOUND, "{} never appeared", path.display());
        thread::sleep(Duration::from_millis(10));
    }
}

/// One scrape of the metrics endpoint at `addr`: the body, or `None` if nothing answers yet.
pub fn scrape(addr: &str) -> Option<String> {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(addr).ok()?;
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .ok()?;
    stream
        .write_all(b"GET /metrics HTTP/1.1\r\nHost: leasehold\r\n\r\n")
        .ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).ok()?;
    let (head, body) = response.split_once("\r\n\r\n")?;
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    Some(body.to_string())
}

/// The value of the sample of `metric` whose labels include every one of `labels`.
pub fn sample(body: &str, metric: &str, labels: &[&str]) -> Option<f64> {
    body.lines()
        .filter(|l| l.starts_with(metric) && labels.iter().all(|want| l.contains(want)))
        .find_map(|l| l.rsplit(' ').next()?.parse().ok())
}

/// A loopback port nobody listens on, kept so while the value lives (see
/// [`leasehold_harness::ClosedPort`]): a command that tried to connect to it would fail to.
pub fn closed_port() -> leasehold_harness::ClosedPort {
    leasehold_harness::ClosedPort::new()
}
