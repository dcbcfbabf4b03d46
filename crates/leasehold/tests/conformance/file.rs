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
