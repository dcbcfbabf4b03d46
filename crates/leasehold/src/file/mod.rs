//! Locks on one machine without a server (`file:///path/to/folder`): one `flock`ed file per key
//! in a folder, and a fencing counter file beside it. The zero-setup choice for keeping a cron
//! job from running twice at once on one host. Unix only; always compiled (it needs `nix`'s
//! `fs` feature, nothing more).
//!
//! # How a lock is held
//! A key has a lock file, `<stem>.lock` (the stem is the key escaped, `%XX` for every byte
//! outside `[A-Za-z0-9_.-]`, so no key names a path outside the folder; long keys end in a
//! 128-bit hash of the whole key). Acquiring opens it and takes `flock(LOCK_EX | LOCK_NB)` on
//! it; the open descriptor holds the lock for the whole lease, and the file records the holder's
//! token and the lease's end (what `inspect` and other processes read). leasehold never deletes
//! nor replaces a lock file (a waiter holding the old one would then exclude nobody); after
//! taking the `flock` it checks that the path still names the file it locked, so an outsider
//! deleting or replacing the file cannot make two holders either.
//!
//! # Guarantees, and their limits
//! * **One machine only.** `flock` excludes processes on one kernel. A folder on a network file
//!   system (NFS, SMB, a shared volume seen by several hosts) may give each host its own locks
//!   (`local_lock` NFS mounts, FUSE file systems), or lose them behind the holder's back (NFSv4
//!   locks lapse with the client's lease when it cannot renew it, and the process is not
//!   told). So, on Linux, connecting refuses a folder that `statfs` says is on NFS, SMB, SMB2,
//!   CIFS or FUSE with [`Error::Unsupported`]; `?allow_remote_fs=true` in the URL lifts the
//!   refusal for a mount known to be used by one machine only. Other shared file systems
//!   (a cluster file system, a block device mounted by two hosts) are not recognised: do not
//!   use one.
//! * **A crashed holder frees the lock at once**, unless it forked. The kernel drops the
//!   `flock` when the process ends, however it ends (`kill -9` too): stronger than a TTL,
//!   nobody waits for an expiry. **But a `flock` belongs to the open file description, which a
//!   child forked without `exec` shares** (a pre-fork server, Python's `fork` start method):
//!   while the holder lives, its release or expiry unlocks for the child too (`LOCK_UN` on the
//!   shared description); once the holder is killed, or exits without releasing, the lock
//!   stays held until every such child has exited, and no TTL ends it (nothing runs the
//!   holder's timer). The record names the process that took the lock, and `inspect` reports
//!   it when it is gone (the lock's [`owner`](crate::LockState::owner) gets that process id,
//!   labelled "process N is gone: ..."), and so does a waiter (a warning, once per
//!   `acquire`): the operator then looks for its children. `exec`
//!   closes the descriptor (Rust opens it with `O_CLOEXEC`), so `leasehold run`'s command
//!   never inherits it.
//! * **The TTL is kept by the holder's own process.** A lease that is neither extended nor
//!   released is let go at its end by a timer in the holder's process, so the lock ends with its
//!   lease as on a server, and [`Lease::valid_until`](crate::Lease::valid_until) is exact (the
//!   same clock lets it go: no drift allowance). **There is no outside expiry**: a holder that
//!   is stopped (`SIGSTOP`) or whose async runtime is blocked keeps the lock until it runs again
//!   or exits; `inspect` then shows a remaining TTL of zero. Nobody can take a lock from a live
//!   process.
//! * **Token-checked release and extend, by the holding client only.** Only the descriptor that
//!   holds a `flock` can drop it: a release or extend through another client or process with the
//!   holder's token is refused with [`Error::Unsupported`] (the lock ends with its holder, or at
//!   its TTL); with any other token, [`Error::NotHeld`]. So `leasehold acquire` (take now,
//!   release from another process later) has no meaning here; `leasehold run` does.
//! * **Loss is reported**: an auto-extended lease whose file was deleted or rewritten by an
//!   outsider fires [`Lease::lost`](crate::Lease::lost) at its next renewal.
//! * **Fencing numbers strictly increase per key, across processes and restarts**: the counter
//!   file `<stem>.fence` is read, incremented and replaced (written to a temporary file,
//!   `fsync`ed, renamed over the counter, the folder `fsync`ed) under a `flock` on the folder's
//!   `.leasehold-fence.lock`, while the key's lock is held, before the number is handed out. A
//!   counter file that cannot be read is an error, never a reset. Deleting the counter file
//!   resets it, as deleting a Redis counter key would.
//! * **Waiting polls** with the backoff (`flock` has no notification), waking when the holder's
//!   recorded lease ends; there is no queue, so the fair option is refused
//!   ([`Fairness::Unsupported`](crate::Fairness::Unsupported)).
//! * **Bad folders are refused when connecting**: a folder that does not exist, is not a
//!   directory, or does not take new files is [`Error::Connection`] (the CLI exits 69).
//!
//! * **[`min_hold`](LockOptions::min_hold) is measured by the kernel's file times**, not by
//!   any process's clock (which `faketime` shifts per process): the hold file `<stem>.hold`,
//!   written under the `flock` right after it is taken, dates the acquisition; an acquisition
//!   that gets the `flock` while the hold runs (against the time the kernel stamps on
//!   `.leasehold-clock`) lets it go and reports busy. Both are stamps of the kernel's
//!   real-time clock: a step of the system clock while a hold runs shifts its end by the step.
//!   A grant given back as expired on arrival removes the hold its attempt wrote. See
//!   `Folder::hold_left` (`disk.rs`) and docs/guarantees.md §18.
//!
//! `inspect` takes a shared `flock` for an instant to learn whether the key is held; at that
//! instant a `try_acquire` of the key finds it busy.

mod disk;
mod held;
mod names;

use std::collections::HashMap;
use std::fs::File;
use std::io;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use nix::fcntl::Flock;

use crate::core::acquire::{Ask, Attempts};
use crate::core::driver::{Driver, Kind, LockTable, Primitives, not_held_here};
use crate::core::error::{Error, Operation, Result};
use crate::core::guard::{Lease, LockGuard};
use crate::core::kind::{Backend, Taking};
use crate::core::options::{LockOptions, ttl_millis};
use crate::core::outcome::{LockState, TryAcquire};
use crate::core::owner::Owner;
use crate::core::token::{LockToken, validate_key};

use disk::{Folder, Record, unix_ms, write_record};
use held::FileHeld;

/// A client for file locks in one folder (see the [module docs](self)). Cheap to clone.
#[derive(Clone, Debug)]
pub struct FileClient {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    folder: Folder,
    /// Locks held through this client, by (key, token): what `release`/`extend` by token find.
    held: Mutex<HashMap<(String, LockToken), Arc<FileHeld>>>,
}

/// The counter is at `u64::MAX`: no number can be issued.
#[derive(Debug)]
struct Exhausted;

impl std::fmt::Display for Exhausted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the fencing counter is at its maximum")
    }
}

impl std::error::Error for Exhausted {}

fn io_error(op: Operation, e: io::Error) -> Error {
    if e.get_ref().is_some_and(|inner| inner.is::<Exhausted>()) {
        return Error::FencingExhausted { op };
    }
    if e.kind() == io::ErrorKind::PermissionDenied && op != Operation::Connect {
        return Error::PermissionDenied {
            op,
            source: Box::new(e),
        };
    }
    Error::Connection {
        op,
        ambiguous: false,
        source: Box::new(e),
    }
}

/// Runs blocking file work (opening, `fsync`) off the async threads.
async fn blocking<T: Send + 'static>(
    op: Operation,
    work: impl FnOnce() -> io::Result<T> + Send + 'static,
) -> Result<T> {
    match tokio::task::spawn_blocking(work).await {
        Ok(result) => result.map_err(|e| io_error(op, e)),
        Err(e) => Err(io_error(op, io::Error::other(e))),
    }
}

/// One key's attempts, for the acquisition engine (flock keeps no queue: waiters poll).
struct FileAttempts<'a> {
    client: &'a FileClient,
    key: &'a str,
    /// The key's file, kept open between attempts: a waiter is one open descriptor, not one
    /// per attempt.
    file: Mutex<Option<File>>,
    /// Whether the waiter already warned that the holder's process is gone.
    warned: std::sync::atomic::AtomicBool,
}

impl<'a> FileAttempts<'a> {
    fn new(client: &'a FileClient, key: &'a str) -> Self {
        FileAttempts {
            client,
            key,
            file: Mutex::new(None),
            warned: std::sync::atomic::AtomicBool::new(false),
        }
    }
}

impl Attempts for FileAttempts<'_> {
    fn name(&self) -> &str {
        self.key
    }

    /// One attempt; a file found stale (deleted or replaced by an outsider) is opened again at
    /// once, up to three times. A waiter warns once when the busy record names a process that
    /// is gone.
    async fn attempt(&self, options: &LockOptions, ask: Ask) -> Result<TryAcquire> {
        let key = self.key;
        for _ in 0..3 {
            let file = self.file.lock().unwrap_or_else(|p| p.into_inner()).take();
            let busy = match self.client.attempt(key, options, file).await? {
                Ok(guard) => return Ok(TryAcquire::Acquired(guard)),
                Err(busy) => busy,
            };
            if let Some(pid) = busy.gone
                && ask.wait.is_some()
                && !self.warned.swap(true, std::sync::atomic::Ordering::Relaxed)
            {
                tracing::warn!(
                    key,
                    pid,
                    "file lock held while the process that took it ({pid}) is gone: a \
                     process it forked without exec holds the lock until it exits"
                );
            }
            if busy.file.is_some() {
                *self.file.lock().unwrap_or_else(|p| p.into_inner()) = busy.file;
                return Ok(TryAcquire::Busy {
                    remaining: busy.remaining,
                });
            }
        }
        Ok(TryAcquire::Busy { remaining: None })
    }
}

/// What one attempt found.
enum Attempt {
    Taken(Flock<File>, Option<u64>),
    Busy(Busy),
}

/// An attempt that found the key busy.
struct Busy {
    /// The key's file, kept open for the next attempt (`None`: open the path again).
    file: Option<File>,
    /// The holder's remaining lease (or minimum hold), as its record says.
    remaining: Option<Duration>,
    /// The id of the process that took the lock, if its record names one that is gone.
    gone: Option<u32>,
}

impl FileClient {
    /// A client of the folder `url` names: `file:///absolute/path` (or
    /// `file://localhost/absolute/path`; `%XX` escapes are decoded).
    ///
    /// The one query parameter, `?allow_remote_fs=true`, lifts the refusal of folders on
    /// network and FUSE file systems (see the [module docs](self)).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for another scheme, a host, a relative path, a fragment, or
    /// another query; [`Error::Connection`] for a folder that does not exist, is not a
    /// directory or does not take new files; [`Error::Unsupported`] for a folder on NFS,
    /// SMB/SMB2, CIFS or FUSE (Linux: told by `statfs`), without `?allow_remote_fs=true`.
    pub fn connect(url: &str) -> Result<Self> {
        let (path, allow_remote_fs) = folder_of(url)?;
        let folder = Folder::open(path).map_err(|e| io_error(Operation::Connect, e))?;
        if !allow_remote_fs {
            let magic =
                disk::fs_magic(&folder.path).map_err(|e| io_error(Operation::Connect, e))?;
            refuse_remote_fs(&folder.path, magic)?;
        }
        Ok(FileClient {
            inner: Arc::new(Inner {
                folder,
                held: Mutex::new(HashMap::new()),
            }),
        })
    }

    fn check(key: &str, options: &LockOptions) -> Result<()> {
        validate_key(key)?;
        options.check_for(Backend::File, Taking::Lock).map(drop)
    }

    /// One attempt: the guard, or what the busy key's record says.
    async fn attempt(
        &self,
        key: &str,
        options: &LockOptions,
        file: Option<File>,
    ) -> Result<std::result::Result<LockGuard, Busy>> {
        let token = options.new_token();
        let ttl = options.ttl();
        // Read together, the wall clock first: the record's end is the lease's, or earlier.
        let expires_ms = unix_ms(SystemTime::now() + ttl);
        let started = Instant::now();
        let attempt = {
            let (folder, key, token) = (self.inner.folder.clone(), key.to_string(), token.clone());
            let (fencing, min_hold) = (options.fencing_enabled(), options.min_hold_bound());
            move || take(&folder, &key, &token, expires_ms, (fencing, min_hold), file)
        };
        let (lock, fencing) = match blocking(Operation::Acquire, attempt).await? {
            Attempt::Taken(lock, fencing) => (lock, fencing),
            Attempt::Busy(busy) => return Ok(Err(busy)),
        };
        let expires = started + ttl;
        if Instant::now() >= expires {
            // Granted too late to be a lease (a slow fsync): given back at once, whole.
            give_back(&self.inner.folder, key, &token, lock);
            return Err(Error::ExpiredOnArrival {
                key: key.to_string(),
                elapsed: started.elapsed(),
                ttl,
            });
        }
        let held = FileHeld::new(self, key, &token, lock, expires);
        let lease = Lease::until(key, token, fencing, expires);
        if options.auto_extend_enabled() {
            crate::core::renew::keep_alive(held.clone(), lease.clone(), options);
        }
        Ok(Ok(LockGuard::new(held, lease)))
    }

    fn find_held(&self, key: &str, token: &LockToken) -> Option<Arc<FileHeld>> {
        let held = self.inner.held.lock().unwrap_or_else(|p| p.into_inner());
        held.get(&(key.to_string(), token.clone())).cloned()
    }

    async fn not_ours(&self, key: &str, token: &LockToken, what: &str) -> Error {
        let what = format!(
            "{what} a file lock held by another client or process (only its holder can; it \
             ends with that process, or at its TTL)"
        );
        not_held_here("file", what, key, token, self.inspect(key).await)
    }
}

/// The owner `inspect` shows for a lock held while the process that took it (`pid`, from the
/// record) is gone: the lock's descriptor lives on in a process it forked without `exec` (see
/// the module docs). The holder's own owner record, if its token carries one, with a label
/// saying so (its own label first, if both fit); else an owner record of `pid` on this host.
fn gone_holder(owner: Option<Owner>, pid: u32) -> Owner {
    let note = format!(
        "process {pid} is gone: a process it forked without exec holds the lock until it exits"
    );
    let owner = match owner {
        Some(owner) => owner,
        None => match Owner::new(Owner::this_process().host(), pid, "") {
            Ok(owner) => owner,
            Err(_) => Owner::new("", pid, "").expect("an empty host and program are valid"),
        },
    };
    let labelled = owner
        .user_label()
        .map(|label| format!("{label}; {note}"))
        .and_then(|both| owner.clone().label(both).ok());
    labelled.unwrap_or_else(|| {
        owner
            .label(note)
            .expect("the note is valid and shorter than the label limit")
    })
}

/// One attempt, blocking: the `flock`, then the fencing number and the record under it.
fn take(
    folder: &Folder,
    key: &str,
    token: &LockToken,
    expires_ms: u64,
    (fencing, min_hold): (bool, Option<Duration>),
    file: Option<File>,
) -> io::Result<Attempt> {
    let file = match file {
        Some(file) => file,
        None => folder.open_lock_file(key)?,
    };
    let lock = match folder.try_lock(key, file)? {
        Ok(lock) => lock,
        Err(file) => {
            let record = match &file {
                Some(f) => disk::read_record(f)?,
                None => None,
            };
            return Ok(Attempt::Busy(Busy {
                file,
                remaining: record.as_ref().map(Record::remaining),
                gone: record.as_ref().and_then(Record::gone_pid),
            }));
        }
    };
    // A minimum hold still running keeps the key busy (its holder is gone or released).
    if let Some((_, left)) = folder.hold_left(key)? {
        let file = lock.unlock().map_err(|(_, e)| io::Error::from(e))?;
        return Ok(Attempt::Busy(Busy {
            file: Some(file),
            remaining: Some(left),
            gone: None,
        }));
    }
    // Dropping `lock` on an error below lets the key go again.
    let fence = match fencing {
        true => Some(folder.update_fence(key, |n| {
            n.checked_add(1).ok_or_else(|| io::Error::other(Exhausted))
        })?),
        false => None,
    };
    let record = Record::ours(token, expires_ms);
    write_record(&lock, Some(&record))?;
    if let Some(min_hold) = min_hold {
        folder.write_hold(key, token, min_hold)?;
    }
    Ok(Attempt::Taken(lock, fence))
}

/// Gives back a lock just taken that cannot be a lease (granted after its TTL), as if the
/// attempt had never taken it: under its `flock`, the record emptied and the minimum hold the
/// attempt started removed, then the `flock` let go. A hold left behind would keep the key
/// busy for `min_hold` with nobody holding it (review F2). Best effort: a failure to clear is
/// logged, and the `flock` is let go anyway.
fn give_back(folder: &Folder, key: &str, token: &LockToken, lock: Flock<File>) {
    let cleared = write_record(&lock, None).and_then(|()| folder.clear_hold(key, token));
    if let Err(e) = cleared {
        tracing::warn!(key, error = %e, "file lock given back: its record or minimum hold could not be cleared");
    }
    drop(lock);
}

/// Refuses a folder on a file system whose `flock` is not one kernel's lock (the magic number
/// `statfs` gives, see `disk::remote_fs`), with an [`Error::Unsupported`] that names it and
/// the override.
fn refuse_remote_fs(path: &std::path::Path, magic: Option<u32>) -> Result<()> {
    match magic.and_then(disk::remote_fs) {
        None => Ok(()),
        Some(kind) => Err(Error::Unsupported {
            backend: "file",
            what: format!(
                "a lock folder on {kind} ({}): flock there is not one machine's lock (NFS \
                 locks lapse with the NFSv4 lease unknown to the holder; local_lock mounts, \
                 SMB/CIFS and FUSE file systems may give each host, or each client, its own \
                 locks); use a local folder, or add ?allow_remote_fs=true to the URL if this \
                 mount is known to be used by one machine only",
                path.display()
            ),
        }),
    }
}

/// The folder of a `file://` URL, and whether it may be on a network or FUSE file system
/// (`?allow_remote_fs=true`).
fn folder_of(url: &str) -> Result<(PathBuf, bool)> {
    let bad = |why: &str| Error::invalid("url", format!("{url:?}: {why}"));
    let rest = url
        .split_once("://")
        .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("file"))
        .map(|(_, rest)| rest)
        .ok_or_else(|| bad("not a file:// URL"))?;
    if rest.contains('#') {
        return Err(bad("a file:// URL takes no fragment"));
    }
    let (rest, query) = rest.split_once('?').unwrap_or((rest, ""));
    let allow_remote_fs = match query {
        "" => false,
        "allow_remote_fs=true" => true,
        "allow_remote_fs=false" => false,
        _ => {
            return Err(bad(
                "a file:// URL takes one query parameter, allow_remote_fs=true or =false",
            ));
        }
    };
    let path = rest.strip_prefix("localhost").unwrap_or(rest);
    if !path.starts_with('/') {
        return Err(bad(
            "expected file:///absolute/path/to/a/folder (three slashes: no host, an absolute path)",
        ));
    }
    let bytes = path.as_bytes();
    let mut decoded = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok());
        match (bytes[i], hex.and_then(|h| u8::from_str_radix(h, 16).ok())) {
            (b'%', Some(b)) => {
                decoded.push(b);
                i += 3;
            }
            (b, _) => {
                decoded.push(b);
                i += 1;
            }
        }
    }
    use std::os::unix::ffi::OsStringExt;
    let path = PathBuf::from(std::ffi::OsString::from_vec(decoded));
    Ok((path, allow_remote_fs))
}

impl Kind for FileClient {
    fn kind(&self) -> Backend {
        Backend::File
    }
}

/// No semaphores, read-write locks or elections on files ([`Backend::has`]).
impl Primitives for FileClient {}

/// No lock table on files: a lock file says nothing of who waits, and nothing outlives it.
impl LockTable for FileClient {}

#[async_trait::async_trait]
impl Driver for FileClient {
    /// One attempt to take `key`, without waiting.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a bad key or TTL; [`Error::Unsupported`] for the fair
    /// option; [`Error::Connection`] when the files cannot be read or written.
    async fn try_acquire(&self, key: &str, options: &LockOptions) -> Result<TryAcquire> {
        Self::check(key, options)?;
        FileAttempts::new(self, key)
            .attempt(options, Ask::ONCE)
            .await
    }

    /// Takes `key` through the acquisition engine, trying again after each backoff delay (and
    /// when the holder's lease ends) until `options.wait_bound()`; a grant that came too late
    /// (a slow fsync) is given back and tried again, as on every backend.
    ///
    /// # Errors
    /// [`Error::NotAcquired`] at the deadline; as [`Locker::try_acquire`](crate::Locker::try_acquire).
    async fn acquire(&self, key: &str, options: &LockOptions) -> Result<LockGuard> {
        Self::check(key, options)?;
        let attempts = FileAttempts::new(self, key);
        crate::core::acquire::wait(&attempts, options, options.wait_bound()).await
    }

    /// Releases `key` if this client holds it with `token`.
    ///
    /// # Errors
    /// [`Error::NotHeld`] if it does not; [`Error::Unsupported`] if another client or process
    /// holds it with that token (only its holder can drop a `flock`).
    async fn release(&self, key: &str, token: &LockToken) -> Result<()> {
        validate_key(key)?;
        match self.find_held(key, token) {
            Some(held) => held.release_now(),
            None => Err(self.not_ours(key, token, "releasing").await),
        }
    }

    /// Extends `key` to `ttl` from now if this client holds it with `token`.
    ///
    /// # Errors
    /// As [`Locker::release`](crate::Locker::release).
    async fn extend(&self, key: &str, token: &LockToken, ttl: Duration) -> Result<()> {
        validate_key(key)?;
        ttl_millis(ttl)?;
        match self.find_held(key, token) {
            Some(held) => held.extend_now(ttl).map(drop),
            None => Err(self.not_ours(key, token, "extending").await),
        }
    }

    /// Who holds `key` (the token in its record), the lease's remaining time by the record (zero
    /// if its holder is past it but has not let go: stopped or blocked), and the fencing counter.
    /// A lock held while the process that took it is gone (its id is in the record) has an
    /// [`owner`](LockState::owner) naming that process id, labelled "process N is gone: a
    /// process it forked without exec holds the lock until it exits" (see the module docs).
    ///
    /// # Errors
    /// [`Error::Connection`] when the files cannot be read.
    async fn inspect(&self, key: &str) -> Result<LockState> {
        validate_key(key)?;
        let (folder, k) = (self.inner.folder.clone(), key.to_string());
        let (record, fence, gone) = blocking(Operation::Inspect, move || {
            let (record, fence) = folder.inspect(&k)?;
            // Only a held lock has a record with a pid (a minimum hold's has none).
            let gone = record.as_ref().and_then(Record::gone_pid);
            Ok((record, fence, gone))
        })
        .await?;
        let mut state = LockState::new(
            key.to_string(),
            record.as_ref().map(|r| r.token.clone()),
            record.as_ref().map(Record::remaining),
            fence,
        );
        if let Some(pid) = gone {
            state.owner = Some(gone_holder(state.owner.take(), pid));
        }
        Ok(state)
    }

    /// Raises `key`'s fencing counter to at least `at_least` (never lowers it) and returns it.
    ///
    /// # Errors
    /// [`Error::Connection`] when the counter cannot be read or written.
    async fn raise_fencing_counter(&self, key: &str, at_least: u64) -> Result<u64> {
        validate_key(key)?;
        let (folder, k) = (self.inner.folder.clone(), key.to_string());
        blocking(Operation::RaiseFencingCounter, move || {
            folder.update_fence(&k, |n| Ok(n.max(at_least)))
        })
        .await
    }
}

/// Test hooks (`leasehold::internal`).
#[doc(hidden)]
pub mod hooks {
    /// The lock file of `key` in `folder` (what an outsider would delete, and what a waiter
    /// keeps open).
    pub fn lock_path(folder: &std::path::Path, key: &str) -> std::path::PathBuf {
        super::Folder {
            path: folder.to_path_buf(),
        }
        .lock_path(key)
    }
}

#[cfg(test)]
mod tests;
