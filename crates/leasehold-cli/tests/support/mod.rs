//! Running the built `leasehold` binary from the tests.

#![allow(dead_code)]

use std::io::Read;
use std::process::{Command, Stdio};
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

/// As [`leasehold`], with extra environment variables.
pub fn leasehold_env(args: &[&str], env: &[(&str, &str)]) -> Run {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_leasehold"));
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
