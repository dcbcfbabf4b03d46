//! The file backend's own claims (module docs): the TTL kept by the holder's process and no
//! outside expiry, outsiders' tampering seen, durable counters never reset, URLs and folders
//! checked. The common contract is the conformance suite's (`tests/conformance/file.rs`);
//! crashes and several processes, the CLI's `tests/local.rs`.

use std::time::Duration;

use super::*;
use crate::core::driver::testing::{long, take};

/// Only a hang guard: every wait below ends on an observed event.
const HANG_GUARD: Duration = Duration::from_secs(60);

fn folder() -> (tempfile::TempDir, FileClient, FileClient) {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("file://{}", dir.path().display());
    let (a, b) = (
        FileClient::connect(&url).unwrap(),
        FileClient::connect(&url).unwrap(),
    );
    (dir, a, b)
}

#[test]
fn urls_name_an_absolute_folder() {
    for (url, path) in [
        ("file:///tmp/locks", "/tmp/locks"),
        ("FILE:///tmp", "/tmp"),
        ("file://localhost/var/lock", "/var/lock"),
        ("file:///a%20b/c%2", "/a b/c%2"),
    ] {
        assert_eq!(
            folder_of(url).unwrap(),
            (PathBuf::from(path), false),
            "{url}"
        );
    }
    for (query, allowed) in [
        ("allow_remote_fs=true", true),
        ("allow_remote_fs=false", false),
    ] {
        let url = format!("file:///tmp/locks?{query}");
        assert_eq!(folder_of(&url).unwrap(), ("/tmp/locks".into(), allowed));
    }
    for url in [
        "file://relative/x",
        "file://host/x",
        "file:///x?y",
        "file:///x?allow_remote_fs=yes",
        "file:///x?allow_remote_fs=true&y=1",
        "file:///x#y",
        "file:///x?allow_remote_fs=true#y",
        "memory://",
    ] {
        assert!(
            matches!(folder_of(url), Err(Error::InvalidArgument { .. })),
            "{url}"
        );
    }
}

#[test]
fn unusable_folders_are_refused_when_connecting() {
    let dir = tempfile::tempdir().unwrap();
    let plain = dir.path().join("plain");
    std::fs::write(&plain, "").unwrap();
    // /proc takes no new file, not even from root.
    for path in [dir.path().join("missing"), plain, "/proc".into()] {
        match FileClient::connect(&format!("file://{}", path.display())) {
            Err(e @ Error::Connection { .. }) => {
                assert!(e.to_string().contains(&path.display().to_string()), "{e}")
            }
            other => panic!("{}: {other:?}", path.display()),
        }
    }
}

/// A lease neither extended nor released is let go at its end by the holder's own process: a
/// waiter gets it then, and not before (the validities never overlap); the old guard's release
/// is `NotHeld`.
#[tokio::test]
async fn a_lease_not_extended_ends_at_its_ttl() {
    let (_dir, a, b) = folder();
    let ttl = Duration::from_millis(100);
    let g = take(&a, "k", &LockOptions::new(ttl)).await;
    let h = tokio::time::timeout(
        HANG_GUARD,
        b.acquire("k", &LockOptions::new(ttl).wait(HANG_GUARD)),
    )
    .await
    .unwrap()
    .unwrap();
    assert!(g.valid_until() <= Instant::now(), "validities overlap");
    assert!(matches!(g.release().await, Err(Error::NotHeld { .. })));
    drop(h);
}

/// An extend to a shorter TTL moves the lock's end sooner too (the timer was set for ten
/// minutes; the waiter's hang guard is one).
#[tokio::test]
async fn a_shortening_extend_ends_the_lock_sooner() {
    let (_dir, a, b) = folder();
    let g = take(&a, "k", &long()).await;
    g.extend(Duration::from_millis(100)).await.unwrap();
    let h = tokio::time::timeout(HANG_GUARD, b.acquire("k", &long().wait(HANG_GUARD)))
        .await
        .expect("the lock outlived its shortened lease")
        .unwrap();
    assert!(g.valid_until() <= Instant::now(), "validities overlap");
    h.release().await.unwrap();
}

/// No outside expiry: a holder whose runtime does not run (here: its thread blocked) keeps the
/// lock past its TTL, and `inspect` shows it held with no time left.
#[tokio::test]
async fn a_stalled_holder_keeps_its_lock_past_its_ttl() {
    let (_dir, a, b) = folder();
    let ttl = Duration::from_millis(50);
    let (held_tx, held_rx) = std::sync::mpsc::channel();
    let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
    let stalled = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let g = rt.block_on(take(&a, "k", &LockOptions::new(ttl)));
        held_tx.send(g.valid_until()).unwrap();
        // Blocked: the runtime's timer cannot let the lock go.
        go_rx.recv().unwrap();
        drop(g);
    });
    let until = held_rx.recv().unwrap();
    while Instant::now() < until {
        tokio::time::sleep(until - Instant::now()).await;
    }
    assert!(
        !b.try_acquire("k", &LockOptions::new(ttl))
            .await
            .unwrap()
            .is_acquired()
    );
    let state = b.inspect("k").await.unwrap();
    assert!(state.holder.is_some());
    assert_eq!(state.ttl, Some(Duration::ZERO));
    go_tx.send(()).unwrap();
    stalled.join().unwrap();
}

/// An outsider writing another record into the lock file takes the lock away: the holder's
/// extend and release are `NotHeld` (deleting the file: the conformance suite).
#[tokio::test]
async fn a_rewritten_record_takes_the_lock_away() {
    let (dir, a, _b) = folder();
    let g = take(&a, "k", &long()).await;
    let path = hooks::lock_path(dir.path(), "k");
    std::fs::write(&path, "leasehold someone-else 99999999999999\n").unwrap();
    assert!(matches!(
        g.extend(Duration::from_secs(60)).await,
        Err(Error::NotHeld { .. })
    ));
    assert!(!g.is_held());
    assert!(matches!(g.release().await, Err(Error::NotHeld { .. })));
}

/// The counter goes on in a new client (a restarted process), a raise is durable, and a
/// counter that cannot be read fails the acquisition (the lock let go) instead of starting over.
#[tokio::test]
async fn counters_survive_clients_and_are_never_reset() {
    let (dir, a, _b) = folder();
    take(&a, "k", &long()).await.release().await.unwrap();
    drop(a);
    let a = FileClient::connect(&format!("file://{}", dir.path().display())).unwrap();
    let g = take(&a, "k", &long()).await;
    assert_eq!(g.fencing_token(), Some(2));
    g.release().await.unwrap();
    assert_eq!(a.raise_fencing_counter("k", 40).await.unwrap(), 40);
    assert_eq!(a.raise_fencing_counter("k", 3).await.unwrap(), 40);
    let fence = dir.path().join(format!("{}.fence", names::stem("k")));
    assert_eq!(std::fs::read_to_string(&fence).unwrap(), "40\n");
    std::fs::write(&fence, "garbage").unwrap();
    match a.try_acquire("k", &long()).await {
        Err(e @ Error::Connection { .. }) => assert!(e.to_string().contains("garbage"), "{e}"),
        other => panic!("{other:?}"),
    }
    // The failed attempt let the key go: without fencing it is free.
    take(&a, "k", &LockOptions::new(Duration::from_secs(60)))
        .await
        .release()
        .await
        .unwrap();
}

#[tokio::test]
async fn the_fair_option_is_refused() {
    let (_dir, a, _b) = folder();
    let fair = long().fair(true);
    assert!(matches!(
        a.try_acquire("k", &fair).await,
        Err(Error::Unsupported {
            backend: "file",
            ..
        })
    ));
    assert_eq!(
        crate::Backend::File.fairness(),
        crate::Fairness::Unsupported
    );
}

/// This process's descriptors on `path` (the path as it is now, not a deleted file's).
fn descriptors(path: &std::path::Path) -> usize {
    std::fs::read_dir("/proc/self/fd")
        .unwrap()
        .filter_map(|fd| std::fs::read_link(fd.ok()?.path()).ok())
        .filter(|target| target == path)
        .count()
}

/// Returns once `path` is open twice in this process (a holder and a waiter), or fails.
async fn two_descriptors(path: &std::path::Path) {
    let seen = tokio::time::timeout(HANG_GUARD, async {
        while descriptors(path) < 2 {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    });
    seen.await
        .expect("a holder and a waiter never had the lock file open");
}

/// A waiter whose open lock file an outsider deleted does not take the lock when that file's
/// `flock` is let go: a new file holds the key now, and the waiter waits for that one.
#[tokio::test]
async fn a_waiter_on_a_deleted_lock_file_waits_for_the_new_one() {
    let (dir, a, b) = folder();
    let c = FileClient::connect(&format!("file://{}", dir.path().display())).unwrap();
    let path = hooks::lock_path(dir.path(), "k");
    let g = take(&a, "k", &long()).await;
    let waiter = {
        let b = b.clone();
        tokio::spawn(async move { b.acquire("k", &long().wait(HANG_GUARD)).await })
    };
    two_descriptors(&path).await;
    std::fs::remove_file(&path).unwrap();
    let h = take(&c, "k", &long()).await;
    assert!(matches!(g.release().await, Err(Error::NotHeld { .. })));
    // The waiter has found its old file stale and opened the new one, which `h` holds.
    two_descriptors(&path).await;
    assert!(
        !waiter.is_finished(),
        "the waiter took a lock someone holds"
    );
    let n = h.fencing_token().unwrap();
    h.release().await.unwrap();
    let w = tokio::time::timeout(HANG_GUARD, waiter)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert!(w.fencing_token().unwrap() > n);
}

/// The check under the previous test, without timing: a `flock` granted on a file the path no
/// longer names is not a lock.
#[test]
fn a_flock_on_a_file_no_path_names_is_not_taken() {
    let dir = tempfile::tempdir().unwrap();
    let folder = Folder::open(dir.path().to_path_buf()).unwrap();
    let old = folder.open_lock_file("k").unwrap();
    std::fs::remove_file(folder.lock_path("k")).unwrap();
    let new = folder.open_lock_file("k").unwrap();
    let held = folder.try_lock("k", new).unwrap();
    assert!(held.is_ok(), "the new file is free");
    assert!(
        matches!(folder.try_lock("k", old), Ok(Err(None))),
        "a stale file was locked"
    );
}

/// A grant that comes back after its TTL is given back whole, with the minimum hold its attempt
/// started: the key is free at once (review F2). The attempt is held up past its TTL by the
/// folder's counter lock, held here, between taking the key's `flock` and writing the hold.
#[tokio::test]
async fn a_grant_given_back_keeps_no_minimum_hold() {
    let (dir, a, b) = folder();
    let ttl = Duration::from_secs(1);
    let counter = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(dir.path().join(disk::COUNTER_LOCK))
        .unwrap();
    let counter = Flock::lock(counter, nix::fcntl::FlockArg::LockExclusive).unwrap();
    let options = LockOptions::new(ttl).fencing(true).min_hold(ttl);
    let attempt = tokio::spawn(async move { a.try_acquire("k", &options).await });
    // The attempt has the key's flock (and waits for the counter lock).
    let folder = Folder::open(dir.path().to_path_buf()).unwrap();
    tokio::time::timeout(HANG_GUARD, async {
        loop {
            let file = folder.open_lock_file("k").unwrap();
            if Flock::lock(file, nix::fcntl::FlockArg::LockSharedNonblock).is_err() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    })
    .await
    .expect("the attempt never took the key's flock");
    // The attempt began before that: a TTL from now, it is past its TTL.
    tokio::time::sleep(ttl).await;
    drop(counter);
    match attempt.await.unwrap() {
        Err(Error::ExpiredOnArrival { .. }) => {}
        other => panic!("expected ExpiredOnArrival, got {other:?}"),
    }
    assert_eq!(folder.hold_left("k").unwrap(), None, "the hold was kept");
    let state = b.inspect("k").await.unwrap();
    assert_eq!(state.holder, None, "{state:?}");
    take(&b, "k", &LockOptions::new(ttl))
        .await
        .release()
        .await
        .unwrap();
}

/// Folders on NFS, SMB, SMB2, CIFS and FUSE are refused (by `statfs`'s magic number), unless
/// the URL allows them; local file systems are not (review M7).
#[test]
fn network_and_fuse_file_systems_are_refused() {
    for (magic, kind) in [
        (0x6969, "NFS"),
        (0x517b, "SMB"),
        (0xfe53_4d42, "SMB2"),
        (0xff53_4d42, "CIFS"),
        (0x6573_5546, "FUSE"),
    ] {
        assert_eq!(disk::remote_fs(magic), Some(kind));
        match refuse_remote_fs(std::path::Path::new("/mnt/x"), Some(magic)) {
            Err(
                e @ Error::Unsupported {
                    backend: "file", ..
                },
            ) => {
                let text = e.to_string();
                assert!(text.contains(kind) && text.contains("/mnt/x"), "{text}");
                assert!(text.contains("?allow_remote_fs=true"), "{text}");
            }
            other => panic!("{kind}: {other:?}"),
        }
    }
    // ext4, xfs, btrfs, tmpfs, overlayfs, zfs.
    for magic in [
        0xef53,
        0x5846_5342,
        0x9123_683e,
        0x0102_1994,
        0x794c_7630,
        0x2fc1_2fc1,
    ] {
        assert_eq!(disk::remote_fs(magic), None, "{magic:#x}");
    }
    assert!(refuse_remote_fs(std::path::Path::new("/x"), None).is_ok());
}

/// A temporary folder is on a local file system: `statfs` reads it, and connecting accepts
/// it, with or without the override.
#[cfg(target_os = "linux")]
#[test]
fn a_local_folder_is_accepted() {
    let dir = tempfile::tempdir().unwrap();
    let magic = disk::fs_magic(dir.path())
        .unwrap()
        .expect("statfs on Linux");
    assert_eq!(disk::remote_fs(magic), None, "{magic:#x}");
    for query in ["", "?allow_remote_fs=true", "?allow_remote_fs=false"] {
        FileClient::connect(&format!("file://{}{query}", dir.path().display())).unwrap();
    }
}

/// A waiter on a lock whose record names a process that is gone (here: a lock file held by
/// this test's own descriptor, with a record naming an exited process) warns once that a
/// forked child holds it, and `inspect` names that process (review L4; the real fork is
/// `tests/conformance/file.rs`).
#[tokio::test]
async fn a_waiter_is_told_that_the_holder_is_gone() {
    #[derive(Clone, Default)]
    struct Capture(Arc<Mutex<Vec<u8>>>);
    impl io::Write for Capture {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }
    let (dir, _a, b) = folder();
    let mut exited = std::process::Command::new("true").spawn().unwrap();
    exited.wait().unwrap();
    let pid = exited.id();
    let folder = Folder::open(dir.path().to_path_buf()).unwrap();
    let file = folder.open_lock_file("k").unwrap();
    let lock = Flock::lock(file, nix::fcntl::FlockArg::LockExclusiveNonblock).unwrap();
    let record = Record {
        token: "someone".into(),
        expires_ms: 0,
        pid: Some(pid),
    };
    write_record(&lock, Some(&record)).unwrap();

    let capture = Capture::default();
    let logs = capture.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || capture.clone())
        .with_ansi(false)
        .finish();
    let _default = tracing::subscriber::set_default(subscriber);
    let wait = LockOptions::new(Duration::from_secs(60)).wait(Duration::from_millis(100));
    assert!(matches!(
        b.acquire("k", &wait).await,
        Err(Error::NotAcquired { .. })
    ));
    let logs = String::from_utf8(logs.0.lock().unwrap().clone()).unwrap();
    let warning = format!("the process that took it ({pid}) is gone");
    assert_eq!(logs.matches(&warning).count(), 1, "{logs}");

    let state = b.inspect("k").await.unwrap();
    assert_eq!(state.holder.as_deref(), Some("someone"));
    let owner = state.owner.expect("the gone holder is named");
    assert_eq!(owner.pid(), pid);
    assert!(
        owner
            .user_label()
            .is_some_and(|l| l.contains(&format!("process {pid} is gone"))),
        "{owner}"
    );
    drop(lock);
}
