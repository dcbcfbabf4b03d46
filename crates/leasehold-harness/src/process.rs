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
    pub(crate) fn pause(&self) -> Result<(), HarnessError> {
        self.signal(Signal::SIGSTOP)?;
        self.paused.store(true, Ordering::SeqCst);
        Ok(())
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

    pub(crate) fn signal(&self, sig: Signal) -> Result<(), HarnessError> {
        let child = self.child.as_ref().ok_or(HarnessError::NotRunning)?;
        signal::kill(nix_pid(child), sig).map_err(|e| HarnessError::Io(e.into()))
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
