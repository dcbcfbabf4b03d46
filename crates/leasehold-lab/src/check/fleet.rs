//! The coordinator's side of the worker processes: spawning them, finding the one that holds
//! the lock, replacing a killed one, and stopping them all at the end.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use super::faults::Rng;

/// The running workers, and how to start another.
pub(crate) struct Fleet {
    exe: PathBuf,
    /// Every argument of `check-worker` but `--id`, `--log` and their per-worker files.
    args: Vec<OsString>,
    logs: PathBuf,
    children: Vec<(u64, Child)>,
    next_id: u64,
}

impl Fleet {
    /// An empty fleet whose workers run `exe check-worker args...`, logging into `logs`.
    pub(crate) fn new(exe: PathBuf, args: Vec<OsString>, logs: &Path) -> Fleet {
        Fleet {
            exe,
            args,
            logs: logs.to_path_buf(),
            children: Vec::new(),
            next_id: 0,
        }
    }

    /// Starts one more worker, with the next id.
    pub(crate) fn spawn(&mut self) -> anyhow::Result<()> {
        let id = self.next_id;
        let child = Command::new(&self.exe)
            .arg("check-worker")
            .args(&self.args)
            .args(["--id", &id.to_string()])
            .arg("--log")
            .arg(self.logs.join(format!("worker-{id}.log")))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(self.err_file(id))?)
            .spawn()?;
        self.children.push((id, child));
        self.next_id += 1;
        Ok(())
    }

    fn err_file(&self, id: u64) -> PathBuf {
        self.logs.join(format!("worker-{id}.err"))
    }

    /// Kills worker `id` with SIGKILL (a crash), reaps it, and starts a new worker instead.
    pub(crate) fn replace(&mut self, id: u64, pid: Pid) -> anyhow::Result<()> {
        let _ = kill(pid, Signal::SIGKILL);
        if let Some(pos) = self.children.iter().position(|(w, _)| *w == id) {
            let (_, mut child) = self.children.remove(pos);
            let _ = child.wait();
        }
        self.spawn()
    }

    /// The holder right now (`token`: the lock key's token where the lock lives, from
    /// `LockServers::holder_token`, looked up in the holders file the workers append to), or
    /// a random live worker when nobody holds it.
    pub(crate) fn holder(
        &self,
        token: Option<String>,
        holders: &Path,
        rng: &mut Rng,
    ) -> Option<(u64, Pid)> {
        if let Some(found) = token.and_then(|t| self.with_token(&t, holders)) {
            return Some(found);
        }
        if self.children.is_empty() {
            return None;
        }
        let (id, child) = &self.children[rng.below(self.children.len())];
        Some((*id, Pid::from_raw(child.id() as i32)))
    }

    /// The live worker that logged `token` in the holders file, if any.
    pub(crate) fn with_token(&self, token: &str, holders: &Path) -> Option<(u64, Pid)> {
        let table = std::fs::read_to_string(holders).unwrap_or_default();
        let (id, pid) = table.lines().rev().find_map(|l| {
            let mut f = l.split_whitespace();
            (f.next()? == token)
                .then(|| Some((f.next()?.parse().ok()?, f.next()?.parse().ok()?)))?
        })?;
        self.children
            .iter()
            .any(|(w, _)| *w == id)
            .then(|| (id, Pid::from_raw(pid)))
    }

    /// After the stop file was written: continues any stopped worker and waits for each to
    /// exit (30 s plus `grace` at most, then SIGKILL). Returns what went wrong: workers that
    /// failed (with their stderr) or had to be killed.
    pub(crate) async fn stop(&mut self, grace: Duration) -> anyhow::Result<Vec<String>> {
        let mut errors = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(30) + grace;
        for (id, child) in &mut self.children {
            let _ = kill(Pid::from_raw(child.id() as i32), Signal::SIGCONT);
            loop {
                if let Some(status) = child.try_wait()? {
                    if !status.success() {
                        let err =
                            std::fs::read_to_string(self.logs.join(format!("worker-{id}.err")))
                                .unwrap_or_default();
                        errors.push(format!("worker {id}: {status}: {}", err.trim()));
                    }
                    break;
                }
                if Instant::now() > deadline {
                    let _ = child.kill();
                    let _ = child.wait();
                    errors.push(format!("worker {id} did not stop within 30 s"));
                    break;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
        self.children.clear();
        Ok(errors)
    }
}

impl Drop for Fleet {
    /// A run that failed before [`Fleet::stop`] (a fault that could not be injected, say) does
    /// not leave its workers behind: whatever is still running is killed and reaped.
    fn drop(&mut self) {
        for (_, child) in &mut self.children {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}
