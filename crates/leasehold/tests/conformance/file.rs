//! The file subject (`file:///folder`): a temporary folder, tampered with as an outsider would
//! (its lock file deleted).

use super::{Fencing, Form, Subject, conforms};

use leasehold::MAX_KEY_LEN;
use leasehold::internal::file as hooks;

struct Folder {
    dir: tempfile::TempDir,
}

impl Folder {
    /// This process's open descriptors on `key`'s lock file (a waiter keeps one open while it
    /// retries its `flock`).
    fn descriptors(&self, key: &str) -> u64 {
        let path = hooks::lock_path(self.dir.path(), key);
        let fds = std::fs::read_dir("/proc/self/fd").expect("/proc/self/fd");
        fds.filter_map(|fd| std::fs::read_link(fd.ok()?.path()).ok())
            .filter(|target| *target == path)
            .count() as u64
    }
}

impl Subject for Folder {
    fn name(&self) -> String {
        format!("file://{}", self.dir.path().display())
    }

    fn url(&self) -> String {
        format!("file://{}", self.dir.path().display())
    }

    fn form(&self) -> Form {
        Form {
            backend: "file",
            fencing: Fencing::PerKeyCounter,
            // Only the descriptor holding a flock can drop it.
            release_elsewhere: false,
            max_key_len: MAX_KEY_LEN,
            more_bad_keys: Vec::new(),
            majority: false,
            // No primitives (`Backend::has`).
            permits_recorded: false,
            election_is_the_plain_lock: false,
            announces_leaders: false,
        }
    }

    /// The lock file deleted (the counter file stays): the holder's descriptor now locks a file
    /// no path names, and the next acquisition makes a new one.
    async fn take_away(&self, key: &str) {
        std::fs::remove_file(hooks::lock_path(self.dir.path(), key))
            .unwrap_or_else(|e| panic!("{}: deleting the lock file of {key}: {e}", self.name()));
    }

    /// The descriptors open on the key's lock file (the holder's).
    async fn waiters_mark(&self, key: &str) -> Vec<u64> {
        vec![self.descriptors(key)]
    }

    /// One more descriptor on the lock file: a waiter opened it, and keeps it between the
    /// attempts the holder's flock refuses. (Linux's /proc; elsewhere the check cannot be made.)
    async fn waiter_refused_since(&self, key: &str, mark: &[u64]) -> bool {
        self.descriptors(key) > mark[0]
    }
}

#[cfg(target_os = "linux")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn file() {
    let dir = tempfile::tempdir().expect("a temporary folder");
    conforms(&Folder { dir }).await;
}

/// Set in the helper process of
/// [`a_lock_kept_by_a_forked_child_outlives_its_killed_holder`]: the folder's URL.
const FORKED_HOLDER: &str = "LEASEHOLD_TEST_FORKED_HOLDER";

/// The key the forked holder takes.
const FORKED_KEY: &str = "forked";

/// A `flock` belongs to the open file description, which a child forked without `exec` shares
/// (review L4): the holder takes the lock and forks, and is killed; the lock stays held while
/// the child lives, `inspect` names the dead holder's pid, and the lock is free once the child
/// is gone too. The holder is this test binary run again with `FORKED_HOLDER` set: it runs
/// this same test, which then takes the lock and forks instead.
#[cfg(target_os = "linux")]
#[test]
fn a_lock_kept_by_a_forked_child_outlives_its_killed_holder() {
    use std::io::BufRead;
    use std::time::Duration;

    use leasehold::{LockOptions, Locker, file::FileClient};
    use nix::sys::signal::{Signal, kill};
    use nix::unistd::Pid;

    if let Ok(url) = std::env::var(FORKED_HOLDER) {
        hold_and_fork(&url);
    }
    /// Kills the forked child if the test ends early (it has no parent to kill it).
    struct KillOnDrop(Pid);
    impl Drop for KillOnDrop {
        fn drop(&mut self) {
            let _ = kill(self.0, Signal::SIGKILL);
        }
    }

    let dir = tempfile::tempdir().expect("a temporary folder");
    let url = format!("file://{}", dir.path().display());
    let test = module_path!()
        .split_once("::")
        .map(|(_, path)| {
            format!("{path}::a_lock_kept_by_a_forked_child_outlives_its_killed_holder")
        })
        .expect("a module path");
    let mut holder = std::process::Command::new(std::env::current_exe().expect("this binary"))
        .args([test.as_str(), "--exact", "--nocapture", "--test-threads=1"])
        .env(FORKED_HOLDER, &url)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::inherit())
        .spawn()
        .expect("the holder process");
    // A hang guard: a holder that has not forked within a minute is killed (its stdout ends).
    let (forked, watch) = std::sync::mpsc::channel::<()>();
    let holder_pid = Pid::from_raw(holder.id() as i32);
    std::thread::spawn(move || {
        if watch.recv_timeout(Duration::from_secs(60)).is_err() {
            let _ = kill(holder_pid, Signal::SIGKILL);
        }
    });
    let mut lines = std::io::BufReader::new(holder.stdout.take().expect("its stdout")).lines();
    let (pid, child) = loop {
        let line = lines
            .next()
            .expect("the holder ended before it forked")
            .expect("the holder's stdout");
        // libtest may have written `test <name> ... ` before it on the same line.
        if let Some((_, pids)) = line.split_once("forked-holder ") {
            let (pid, child) = pids.split_once(' ').expect("two pids");
            break (pid.parse::<u32>().unwrap(), child.parse::<i32>().unwrap());
        }
    };
    let _ = forked.send(());
    assert_eq!(pid, holder.id());
    let child = KillOnDrop(Pid::from_raw(child));

    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let client = Locker::from(FileClient::connect(&url).unwrap());
    let options = LockOptions::new(Duration::from_secs(60));
    let busy = || {
        !rt.block_on(client.try_acquire(FORKED_KEY, &options))
            .unwrap()
            .is_acquired()
    };
    assert!(busy(), "the holder does not hold the lock");
    let state = rt.block_on(client.inspect(FORKED_KEY)).unwrap();
    assert!(state.holder.is_some() && state.owner.is_none(), "{state:?}");

    holder.kill().unwrap();
    holder.wait().unwrap();
    assert!(
        busy(),
        "the lock went with its holder, although its child lives"
    );
    let state = rt.block_on(client.inspect(FORKED_KEY)).unwrap();
    assert!(state.holder.is_some(), "{state:?}");
    let owner = state.owner.expect("inspect names the dead holder");
    assert_eq!(owner.pid(), pid);
    let label = owner.user_label().unwrap_or_default();
    assert!(label.contains(&format!("process {pid} is gone")), "{label}");

    drop(child);
    // The child's descriptors close as it dies: then the lock is free.
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while busy() {
        assert!(
            std::time::Instant::now() < deadline,
            "the lock outlived the forked child"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The helper: takes [`FORKED_KEY`], forks a child that only waits to be killed, prints both
/// pids, and waits to be killed itself.
#[cfg(target_os = "linux")]
fn hold_and_fork(url: &str) -> ! {
    use std::io::Write;
    use std::time::Duration;

    use leasehold::{LockOptions, Locker, file::FileClient};
    use nix::unistd::{ForkResult, fork, pause};

    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let client = Locker::from(FileClient::connect(url).unwrap());
    let _guard = rt
        .block_on(client.try_acquire(FORKED_KEY, &LockOptions::new(Duration::from_secs(3600))))
        .unwrap()
        .acquired()
        .expect("the key is free");
    // SAFETY: the child of this multi-threaded process calls only pause(2), which is
    // async-signal-safe, until it is killed.
    match unsafe { fork() }.expect("fork") {
        ForkResult::Child => loop {
            pause();
        },
        ForkResult::Parent { child } => {
            let mut out = std::io::stdout().lock();
            writeln!(out, "forked-holder {} {child}", std::process::id()).unwrap();
            out.flush().unwrap();
            drop(out);
            loop {
                std::thread::park();
            }
        }
    }
}
