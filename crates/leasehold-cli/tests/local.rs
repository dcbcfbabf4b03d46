//! The backends that need no server, from the shell: `file://` (locks on one machine, held by
//! the `leasehold` process) and `memory://` (refused: one process's memory).

use crate::support;

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use support::{Running, leasehold_at, wait_for_file};

/// A lock folder, a working folder for the commands' marker files, and the folder's URL.
struct Folder {
    locks: tempfile::TempDir,
    work: tempfile::TempDir,
    url: String,
}

impl Folder {
    fn new() -> Folder {
        let locks = tempfile::tempdir().unwrap();
        let url = format!("file://{}", locks.path().display());
        Folder {
            locks,
            work: tempfile::tempdir().unwrap(),
            url,
        }
    }

    /// A background `leasehold --url <folder> run <args>` in the working folder.
    fn run(&self, args: &[&str]) -> Running {
        Running::start(&["--url", self.url.as_str()], self.work.path(), args)
    }

    /// A file of the working folder.
    fn marker(&self, name: &str) -> std::path::PathBuf {
        self.work.path().join(name)
    }
}

/// While one `leasehold run` holds a key, another one with --no-wait finds it busy (75), and
/// one with --wait runs its command only after the first command finished: the second
/// command sees the first one's end marker.
#[test]
fn two_runs_on_one_folder_exclude_each_other() {
    let f = Folder::new();
    let url = &f.url;
    let first = f.run(&[
        "job",
        "--",
        "sh",
        "-c",
        "echo started > a.started; while [ ! -e go ]; do sleep 0.02; done; touch a.done",
    ]);
    wait_for_file(&f.marker("a.started"));
    leasehold_at(url, &["run", "job", "--no-wait", "--", "true"]).expect(75);
    let second = f.run(&[
        "job",
        "--wait",
        "60s",
        "--",
        "sh",
        "-c",
        "if [ -e a.done ]; then echo after > b.txt; else echo overlap > b.txt; fi",
    ]);
    // The second is waiting (it has the lock file open) while the first holds the lock.
    second_waits_on(&second, f.locks.path());
    assert!(
        !f.marker("b.txt").exists(),
        "the second ran while the first held the lock"
    );
    std::fs::write(f.marker("go"), "").unwrap();
    let (status, stderr) = first.wait();
    assert_eq!(status, 0, "{stderr}");
    let (status, stderr) = second.wait();
    assert_eq!(status, 0, "{stderr}");
    assert_eq!(wait_for_file(&f.marker("b.txt")), "after\n");
}

/// Waits until `run` (a `leasehold run --wait`) has the key's lock file open: it keeps it open
/// between the attempts the holder's flock refuses.
fn second_waits_on(run: &Running, locks: &std::path::Path) {
    let fds = format!("/proc/{}/fd", run.pid());
    let lock = leasehold::internal::file::lock_path(locks, "job");
    let start = std::time::Instant::now();
    loop {
        let open = std::fs::read_dir(&fds)
            .map(|d| {
                d.filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
                    .any(|t| t == lock)
            })
            .unwrap_or(false);
        if open {
            return;
        }
        assert!(
            start.elapsed() < std::time::Duration::from_secs(60),
            "never waited:\n{}",
            run.stderr()
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

/// `kill -9` of the holding `leasehold` frees the lock at once: the kernel drops the flock with
/// the process. The TTL is an hour, so nothing else could have freed it.
#[test]
fn a_killed_holder_frees_the_lock_at_once() {
    let f = Folder::new();
    let url = &f.url;
    let holder = f.run(&[
        "job",
        "--ttl",
        "1h",
        "--",
        "sh",
        "-c",
        "echo $$ > child.pid; exec sleep 600",
    ]);
    let child: i32 = wait_for_file(&f.marker("child.pid"))
        .trim()
        .parse()
        .unwrap();
    leasehold_at(url, &["run", "job", "--no-wait", "--", "true"]).expect(75);
    kill(Pid::from_raw(holder.pid() as i32), Signal::SIGKILL).unwrap();
    let (status, _) = holder.wait_status();
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&status),
        Some(9)
    );
    // The orphaned command does not hold the lock: leasehold's descriptors close on exec.
    leasehold_at(url, &["run", "job", "--no-wait", "--", "true"]).expect(0);
    let _ = kill(Pid::from_raw(child), Signal::SIGKILL);
}

/// Fencing numbers go on from process to process (the counter file), and `inspect` shows the
/// last one.
#[test]
fn fencing_numbers_increase_across_processes() {
    let f = Folder::new();
    let url = &f.url;
    let numbers = f.marker("numbers");
    let script = format!("echo $LEASEHOLD_FENCING_TOKEN >> {}", numbers.display());
    for _ in 0..3 {
        leasehold_at(url, &["run", "job", "--fencing", "--", "sh", "-c", &script]).expect(0);
    }
    assert_eq!(std::fs::read_to_string(&numbers).unwrap(), "1\n2\n3\n");
    let state = leasehold_at(url, &["inspect", "job", "--json"])
        .expect(0)
        .json();
    assert_eq!(state["fencing_token"], 3, "{state}");
    assert_eq!(state["held"], false, "{state}");
}

/// `memory://` is refused with 64 and the reason (one process's memory), before anything runs.
#[test]
fn memory_urls_are_refused() {
    let f = Folder::new();
    let marker = f.marker("ran");
    for args in [
        vec!["run", "job", "--", "touch", marker.to_str().unwrap()],
        vec!["acquire", "job", "--ttl", "30s"],
        vec!["inspect", "job"],
    ] {
        for url in ["memory://", "memory://tests"] {
            let run = leasehold_at(url, &args).expect(64);
            assert!(
                run.stderr.contains("memory of one process"),
                "{args:?}: {}",
                run.stderr
            );
        }
    }
    assert!(!marker.exists(), "the command ran");
}

/// A folder that does not exist, is not a directory, or takes no new files: 69, saying which.
#[test]
fn a_folder_that_cannot_be_used_is_unavailable() {
    let f = Folder::new();
    let file = f.marker("plain");
    std::fs::write(&file, "").unwrap();
    for (path, says) in [
        (f.marker("missing"), "No such file or directory"),
        (file, "is not a directory"),
        // /proc takes no new files, not even from root.
        ("/proc".into(), "is not writable"),
    ] {
        let url = format!("file://{}", path.display());
        let run = leasehold_at(&url, &["run", "job", "--", "true"]).expect(69);
        assert!(run.stderr.contains(says), "{url}: {}", run.stderr);
        assert!(
            run.stderr.contains(&path.display().to_string()),
            "{url}: {}",
            run.stderr
        );
    }
}

/// `acquire` is refused (64): the lock would end with this command; `release` with a token of a
/// lock another process holds is refused too (only the holder can drop a flock), and the lock
/// stays.
#[test]
fn locks_that_would_outlive_their_process_are_refused() {
    let f = Folder::new();
    let url = &f.url;
    let run = leasehold_at(url, &["acquire", "job", "--ttl", "30s"]).expect(64);
    assert!(run.stderr.contains("leasehold run"), "{}", run.stderr);
    let holder = f.run(&[
        "job",
        "--",
        "sh",
        "-c",
        "echo $LEASEHOLD_TOKEN > token; while [ ! -e go ]; do sleep 0.02; done",
    ]);
    let token = wait_for_file(&f.marker("token"));
    let run = leasehold_at(url, &["release", "job", "--token", token.trim()]).expect(64);
    assert!(run.stderr.contains("not supported"), "{}", run.stderr);
    leasehold_at(url, &["release", "job", "--token", "not-the-token"]).expect(1);
    leasehold_at(url, &["run", "job", "--no-wait", "--", "true"]).expect(75);
    std::fs::write(f.marker("go"), "").unwrap();
    assert_eq!(holder.wait().0, 0);
}
