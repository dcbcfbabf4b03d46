//! A child process the harness owns: crash (SIGKILL), graceful stop, pause and resume
//! (SIGSTOP/SIGCONT), and whether it still runs. Shared by every kind of server.

use std::process::Child;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use nix::sys::signal::{self, Signal};
use nix::unistd::Pid;

use crate::HarnessError;

/// Sleep between checks of whether a stopped process has exited.
const EXIT_POLL: Duration = Duration::from_millis(20);

/// How long a SIGSTOP may take to show in `/proc` (it takes microseconds; a loaded machine
/// may delay it, never this long).
const STOP_BOUND: Duration = Duration::from_secs(10);

/// Sleep between looks at a pausing process's state.
const STOP_POLL: Duration = Duration::from_millis(1);

/// The process's state letter in `/proc/PID/stat` (`R`, `S`, `D`, `T` stopped, `Z`...), or
/// `None` if it is gone.
fn process_state(pid: u32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // "PID (COMM) STATE ...": COMM may hold spaces and parentheses, so look after the last ')'.
    stat.rsplit_once(')')?.1.trim_start().chars().next()
}

/// One spawned process (or none: killed, stopped, not started yet) and whether it is paused.
#[derive(Debug, Default)]
pub(crate) struct Process {
    child: Option<Child>,
    paused: AtomicBool,
}

impl Process {
    /// A process that was just spawned (not paused).
    pub(crate) fn new(child: Child) -> Self {
        Process {
            child: Some(child),
            paused: AtomicBool::new(false),
        }
    }

    /// Takes over a newly spawned process (after a restart).
    pub(crate) fn set(&mut self, child: Child) {
        self.child = Some(child);
        self.paused.store(false, Ordering::SeqCst);
    }

    /// The spawned process, if any.
    pub(crate) fn child_mut(&mut self) -> Option<&mut Child> {
        self.child.as_mut()
    }

    pub(crate) fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Whether a process was spawned and not killed or stopped since.
    pub(crate) fn is_started(&self) -> bool {
        self.child.is_some()
    }

    /// Whether the process is alive (a paused one counts); reaps it if it exited on its own.
    pub(crate) fn is_running(&mut self) -> bool {
        match self.child.as_mut().map(Child::try_wait) {
            Some(Ok(None)) => true,
            Some(_) => {
                self.kill();
                false
            }
            None => false,
        }
    }

    /// SIGKILL (a crash), then reaps. No-op if not running.
    pub(crate) fn kill(&mut self) {
        self.paused.store(false, Ordering::SeqCst);
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// SIGTERM (and SIGCONT, in case it is paused), up to `grace` to exit, then SIGKILL; reaped
    /// either way. No-op if not running.
    pub(crate) fn stop(&mut self, grace: Duration) {
        self.stop_with(Signal::SIGTERM, grace);
    }

    /// As [`Process::stop`], with another shutdown signal.
    pub(crate) fn stop_with(&mut self, sig: Signal, grace: Duration) {
        self.paused.store(false, Ordering::SeqCst);
        let Some(mut child) = self.child.take() else {
            return;
        };
        if let Ok(None) = child.try_wait() {
            let pid = nix_pid(&child);
            let _ = signal::kill(pid, sig);
            let _ = signal::kill(pid, Signal::SIGCONT);
            let deadline = Instant::now() + grace;
            while let Ok(None) = child.try_wait() {
                if Instant::now() >= deadline {
                    let _ = child.kill();
                    break;
                }
                thread::sleep(EXIT_POLL);
            }
        }
        let _ = child.wait();
    }

    /// SIGSTOP: the kernel still accepts connections, nothing is answered until resumed.
    /// Returns once the kernel reports the process stopped (`/proc/PID/stat` state `T`), so a
    /// test's next request is sent to a process that cannot answer it: `kill` only queues the
    /// stop.
    ///
    /// # Errors
    /// [`HarnessError::NotRunning`] for a process that has exited; a stop not seen within
    /// 10 s.
    pub(crate) fn pause(&self) -> Result<(), HarnessError> {
        self.signal(Signal::SIGSTOP)?;
        self.paused.store(true, Ordering::SeqCst);
        let pid = self.pid().ok_or(HarnessError::NotRunning)?;
        let deadline = Instant::now() + STOP_BOUND;
        loop {
            match process_state(pid) {
                Some('T' | 't') => return Ok(()),
                None | Some('Z' | 'X') => return Err(HarnessError::NotRunning),
                Some(_) if Instant::now() >= deadline => {
                    return Err(HarnessError::Io(std::io::Error::other(format!(
                        "process {pid} not stopped {STOP_BOUND:?} after SIGSTOP"
                    ))));
                }
                Some(_) => thread::sleep(STOP_POLL),
            }
        }
    }

    /// SIGCONT.
    pub(crate) fn resume(&self) -> Result<(), HarnessError> {
        self.signal(Signal::SIGCONT)?;
        self.paused.store(false, Ordering::SeqCst);
        Ok(())
    }

    pub(crate) fn is_paused(&self) -> bool {
        self.paused.load(Ordering::SeqCst)
    }

    /// Started and not paused.
    pub(crate) fn is_live(&self) -> bool {
        self.is_started() && !self.is_paused()
    }

    /// Sends `sig` to the process, only while it is our unreaped child: once reaped, its pid
    /// may already be another process's (pids wrap), which must never get our signal.
    pub(crate) fn signal(&self, sig: Signal) -> Result<(), HarnessError> {
        use nix::sys::wait::{Id, WaitPidFlag, WaitStatus, waitid};
        let child = self.child.as_ref().ok_or(HarnessError::NotRunning)?;
        let pid = nix_pid(child);
        // Peeks (WNOWAIT) without reaping: alive, exited but unreaped (a zombie keeps its
        // pid), or not our child any more (reaped: ECHILD).
        let peek = WaitPidFlag::WEXITED | WaitPidFlag::WNOHANG | WaitPidFlag::WNOWAIT;
        match waitid(Id::Pid(pid), peek) {
            Ok(WaitStatus::StillAlive) => {
                signal::kill(pid, sig).map_err(|e| HarnessError::Io(e.into()))
            }
            Ok(_) | Err(_) => Err(HarnessError::NotRunning),
        }
    }
}

pub(crate) fn nix_pid(child: &Child) -> Pid {
    // Linux pids are at most 2^22; i32::MAX is never a live process.
    Pid::from_raw(i32::try_from(child.id()).unwrap_or(i32::MAX))
}

/// Waits until a just-spawned server `child` is ready (`ready(pid)`, polled every `poll`, at
/// most `timeout`). On failure the child is killed and reaped, and the error is a
/// [`HarnessError::StartFailed`] for `binary` on `port` with `log_tail()`; the flag says
/// whether another port might help (the process exited during start-up, e.g. the port was
/// taken).
pub(crate) fn await_ready(
    mut child: Child,
    binary: &str,
    port: u16,
    (timeout, poll): (Duration, Duration),
    mut ready: impl FnMut(u32) -> bool,
    log_tail: impl Fn() -> String,
) -> Result<Child, (HarnessError, bool)> {
    let deadline = Instant::now() + timeout;
    let (reason, retry) = loop {
        match child.try_wait() {
            Ok(Some(status)) => {
                break (format!("{binary} exited during start-up ({status})"), true);
            }
            Ok(None) => {}
            Err(e) => break (format!("cannot check the process: {e}"), false),
        }
        if ready(child.id()) {
            return Ok(child);
        }
        if Instant::now() >= deadline {
            break (
                format!("not accepting connections within {timeout:?}"),
                false,
            );
        }
        thread::sleep(poll);
    };
    let _ = child.kill();
    let _ = child.wait();
    let error = HarnessError::StartFailed {
        binary: binary.to_owned(),
        port,
        reason,
        log_tail: log_tail(),
    };
    Err((error, retry))
}
