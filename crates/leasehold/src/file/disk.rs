//! The blocking file operations of the file backend: a key's lock file (`<stem>.lock`, held
//! with `flock` for the whole lease, never deleted nor replaced by leasehold), its record (the
//! holder's token and expiry, for `inspect` and for the token checks), and its fencing counter
//! (`<stem>.fence`, replaced atomically under the folder's counter lock).

use std::fs::{File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::PathBuf;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use nix::errno::Errno;
use nix::fcntl::{Flock, FlockArg};

use super::names::stem;
use crate::core::token::LockToken;

/// The file every counter update holds (`flock`, for microseconds) in the folder.
pub(super) const COUNTER_LOCK: &str = ".leasehold-fence.lock";

/// The file whose modification time, set by the kernel on a write, is the folder's clock for
/// [`min_hold`](crate::LockOptions::min_hold) (see [`Folder::hold_left`]).
const CLOCK: &str = ".leasehold-clock";

/// The record's size: always written whole, in one `pwrite`, so a reader never sees half of
/// one. A page: room for a token with the longest owner record (about 2.4 kB escaped).
const RECORD: usize = 4096;

/// The file system magic number of the folder at `path` (`statfs`'s `f_type`), on Linux;
/// `None` elsewhere (not checked).
pub(super) fn fs_magic(path: &std::path::Path) -> io::Result<Option<u32>> {
    #[cfg(target_os = "linux")]
    {
        let fs = nix::sys::statfs::statfs(path).map_err(errno)?;
        // Every magic number is 32 bits; `f_type`'s width varies with the C library.
        Ok(Some(fs.filesystem_type().0 as u32))
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = path;
        Ok(None)
    }
}

/// The network or FUSE file system a `statfs` magic number names, if it is one whose `flock`
/// is not one kernel's lock: NFS (`NFS_SUPER_MAGIC`), SMB (`SMB_SUPER_MAGIC`), SMB2
/// (`SMB2_MAGIC_NUMBER`, the kernel's `smb3` client), CIFS (`CIFS_MAGIC_NUMBER`) and FUSE
/// (`FUSE_SUPER_MAGIC`: sshfs, GlusterFS, s3fs, virtiofs, ...).
pub(super) fn remote_fs(magic: u32) -> Option<&'static str> {
    match magic {
        0x6969 => Some("NFS"),
        0x517b => Some("SMB"),
        0xfe53_4d42 => Some("SMB2"),
        0xff53_4d42 => Some("CIFS"),
        0x6573_5546 => Some("FUSE"),
        _ => None,
    }
}

/// A lock folder.
#[derive(Debug, Clone)]
pub(super) struct Folder {
    pub(super) path: PathBuf,
}

/// What a key's record says: its holder's token, the lease's end (wall clock), and the id of
/// the process that wrote it (`None` in a record of an older version, and for a minimum hold).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Record {
    pub(super) token: String,
    pub(super) expires_ms: u64,
    pub(super) pid: Option<u32>,
}

impl Record {
    /// A record written now by this process.
    pub(super) fn ours(token: &LockToken, expires_ms: u64) -> Record {
        Record {
            token: token.expose().to_string(),
            expires_ms,
            pid: Some(std::process::id()),
        }
    }

    /// The recorded process id, if that process is gone (exited, or a zombie): the lock is
    /// then held through a descriptor it passed on, to a child forked without `exec`. An
    /// operator's hint, not a proof: the id is the one in the holder's PID namespace, and a
    /// reused id looks alive.
    pub(super) fn gone_pid(&self) -> Option<u32> {
        self.pid.filter(|&pid| process_gone(pid))
    }

    /// How much of the lease is left by the wall clock (zero once over).
    pub(super) fn remaining(&self) -> Duration {
        Duration::from_millis(self.expires_ms.saturating_sub(unix_ms(SystemTime::now())))
    }
}

/// Whether no process `pid` runs: none exists (`kill(pid, 0)` is `ESRCH`), or, on Linux, it is
/// a zombie (it has exited, and its descriptors are closed; its parent has not reaped it).
fn process_gone(pid: u32) -> bool {
    let Ok(raw) = i32::try_from(pid) else {
        return false;
    };
    #[cfg(target_os = "linux")]
    if let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // `pid (comm) S ...`: the state follows the last `)` (comm may hold one).
        let state = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.trim_start().chars().next());
        return matches!(state, Some('Z' | 'X'));
    }
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(raw), None) == Err(Errno::ESRCH)
}

pub(super) fn unix_ms(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

fn errno(e: Errno) -> io::Error {
    io::Error::from(e)
}

impl Folder {
    /// Checks that `path` is a folder leasehold can create files in.
    pub(super) fn open(path: PathBuf) -> io::Result<Folder> {
        let meta = std::fs::metadata(&path).map_err(|e| {
            io::Error::new(e.kind(), format!("lock folder {}: {e}", path.display()))
        })?;
        if !meta.is_dir() {
            return Err(io::Error::new(
                io::ErrorKind::NotADirectory,
                format!("lock folder {} is not a directory", path.display()),
            ));
        }
        // A file made and removed: the folder takes new files (the lock files and the
        // counters' replacements), which neither its mode bits (root ignores them) nor an
        // existing file's openness tells.
        let probe = path.join(format!(".leasehold-probe-{}", LockToken::random().expose()));
        let made = OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&probe)
            .and_then(|_| std::fs::remove_file(&probe));
        made.map_err(|e| {
            io::Error::new(
                e.kind(),
                format!("lock folder {} is not writable: {e}", path.display()),
            )
        })?;
        Ok(Folder { path })
    }

    pub(super) fn lock_path(&self, key: &str) -> PathBuf {
        self.path.join(format!("{}.lock", stem(key)))
    }

    fn hold_path(&self, key: &str) -> PathBuf {
        self.path.join(format!("{}.hold", stem(key)))
    }

    /// Starts `key`'s minimum hold (under its `flock`, right after taking it): the hold file
    /// `<stem>.hold`, holding the token and `min_hold`, written whole; the kernel sets its
    /// modification time, which is when the hold began.
    pub(super) fn write_hold(
        &self,
        key: &str,
        token: &LockToken,
        min_hold: Duration,
    ) -> io::Result<()> {
        let text = format!(
            "leasehold-hold {} {}\n",
            token.expose(),
            min_hold.as_millis()
        );
        File::create(self.hold_path(key))?.write_all(text.as_bytes())
    }

    /// Removes `key`'s minimum hold if `token` started it (under the key's `flock`, which every
    /// hold is written under: nobody writes another meanwhile).
    pub(super) fn clear_hold(&self, key: &str, token: &LockToken) -> io::Result<()> {
        let path = self.hold_path(key);
        let text = match std::fs::read_to_string(&path) {
            Ok(text) => text,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(e),
        };
        if text.split_whitespace().nth(1) != Some(token.expose()) {
            return Ok(());
        }
        match std::fs::remove_file(&path) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        }
    }

    /// The token and the time left of `key`'s minimum hold, if one is still running: the hold
    /// file's modification time plus its `min_hold`, against the folder's clock.
    ///
    /// **Why file times.** Both instants are the kernel's (its real-time clock, stamped on a
    /// write), read back with `stat`: no process clock is involved, so a holder and a
    /// competitor whose clocks are shifted by `faketime` (or that run on a machine whose time
    /// is being stepped by hand) still agree on when the hold ends, as clients of a server do.
    /// The folder's clock is the modification time of `.leasehold-clock` after writing a byte
    /// to it: another process writing it meanwhile can only make it later by microseconds.
    pub(super) fn hold_left(&self, key: &str) -> io::Result<Option<(String, Duration)>> {
        let mut text = String::new();
        let modified = match File::open(self.hold_path(key)) {
            Ok(mut f) => {
                f.read_to_string(&mut text)?;
                f.metadata()?.modified()?
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e),
        };
        let mut words = text.split_whitespace();
        let (token, min_hold) = match (words.next(), words.next(), words.next()) {
            (Some("leasehold-hold"), Some(token), Some(ms)) => match ms.parse() {
                Ok(ms) => (token.to_string(), Duration::from_millis(ms)),
                Err(_) => return Ok(None),
            },
            _ => return Ok(None),
        };
        let clock = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(false)
            .open(self.path.join(CLOCK))?;
        clock.write_all_at(b"\n", 0)?;
        let now = clock.metadata()?.modified()?;
        let left = (modified + min_hold)
            .duration_since(now)
            .unwrap_or(Duration::ZERO);
        Ok((!left.is_zero()).then_some((token, left)))
    }

    fn fence_path(&self, key: &str) -> PathBuf {
        self.path.join(format!("{}.fence", stem(key)))
    }

    /// Opens (creating) `key`'s lock file.
    pub(super) fn open_lock_file(&self, key: &str) -> io::Result<File> {
        OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(self.lock_path(key))
    }

    /// One `flock(LOCK_EX | LOCK_NB)` on `file`, `key`'s lock file: the lock if granted and the
    /// file still is the one the path names (an outsider may have deleted or replaced it, and a
    /// lock on a file nobody else opens excludes nobody); otherwise the file back, for the next
    /// attempt (`None`: it is stale, open the path again).
    pub(super) fn try_lock(
        &self,
        key: &str,
        file: File,
    ) -> io::Result<Result<Flock<File>, Option<File>>> {
        let locked = match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
            Ok(locked) => locked,
            Err((file, Errno::EWOULDBLOCK)) => {
                let stale = !self.names(key, &file)?;
                return Ok(Err((!stale).then_some(file)));
            }
            Err((_, e)) => return Err(errno(e)),
        };
        if self.names(key, &locked)? {
            Ok(Ok(locked))
        } else {
            Ok(Err(None))
        }
    }

    /// Whether `key`'s path names `file` (same device and inode).
    pub(super) fn names(&self, key: &str, file: &File) -> io::Result<bool> {
        let ours = file.metadata()?;
        match std::fs::metadata(self.lock_path(key)) {
            Ok(now) => Ok(now.dev() == ours.dev() && now.ino() == ours.ino()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Whether `file`, locked by us, is still `key`'s lock file and its record still carries
    /// `token` (an outsider deleting the file, or writing another record, takes the lock away).
    pub(super) fn still_ours(&self, key: &str, file: &File, token: &LockToken) -> io::Result<bool> {
        Ok(self.names(key, file)? && read_record(file)?.is_some_and(|r| r.token == token.expose()))
    }

    /// The holder's record and the fencing counter of `key`, with whether the lock is held at all:
    /// a shared `flock` taken for an instant is refused while someone holds it. (At that instant
    /// an acquisition's exclusive `flock` is refused too: a `try_acquire` racing an `inspect` can
    /// find the key busy.)
    pub(super) fn inspect(&self, key: &str) -> io::Result<(Option<Record>, Option<u64>)> {
        let fence = self.read_fence(key)?;
        let file = match File::open(self.lock_path(key)) {
            Ok(file) => file,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok((None, fence)),
            Err(e) => return Err(e),
        };
        match Flock::lock(file, FlockArg::LockSharedNonblock) {
            // Free, unless a minimum hold still runs: shown as held by its token until then.
            Ok(_free) => Ok((
                self.hold_left(key)?.map(|(token, left)| Record {
                    token,
                    expires_ms: unix_ms(SystemTime::now() + left),
                    pid: None,
                }),
                fence,
            )),
            Err((file, Errno::EWOULDBLOCK)) => Ok((read_record(&file)?, fence)),
            Err((_, e)) => Err(errno(e)),
        }
    }

    /// The last fencing number issued for `key` (`None`: none yet).
    fn read_fence(&self, key: &str) -> io::Result<Option<u64>> {
        let mut text = String::new();
        match File::open(self.fence_path(key)) {
            Ok(mut f) => f.read_to_string(&mut text)?,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e),
        };
        // A counter that cannot be read is an error, never a reset to zero.
        text.trim().parse().map(Some).map_err(|_| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "fencing counter {} holds {text:?}",
                    self.fence_path(key).display()
                ),
            )
        })
    }

    /// Sets `key`'s counter to `f(current)` under the folder's counter lock, durably (written
    /// to a temporary file, synced, renamed over the counter, the folder synced) before it
    /// returns the new value: a number handed out is never handed out again, across crashes
    /// and power loss.
    pub(super) fn update_fence(
        &self,
        key: &str,
        f: impl FnOnce(u64) -> io::Result<u64>,
    ) -> io::Result<u64> {
        let lock = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(self.path.join(COUNTER_LOCK))?;
        let _held = Flock::lock(lock, FlockArg::LockExclusive).map_err(|(_, e)| errno(e))?;
        let current = self.read_fence(key)?.unwrap_or(0);
        let next = f(current)?;
        if next != current {
            let path = self.fence_path(key);
            let tmp = path.with_extension("fence.tmp");
            let mut out = File::create(&tmp)?;
            out.write_all(format!("{next}\n").as_bytes())?;
            out.sync_all()?;
            std::fs::rename(&tmp, &path)?;
            File::open(&self.path)?.sync_all()?;
        }
        Ok(next)
    }
}

/// Writes `record` (or an empty one) into a lock file we hold.
pub(super) fn write_record(file: &File, record: Option<&Record>) -> io::Result<()> {
    let mut buf = [b' '; RECORD];
    if let Some(r) = record {
        // Older versions read the first three words and ignore the rest.
        let text = match r.pid {
            Some(pid) => format!("leasehold {} {} {pid}\n", r.token, r.expires_ms),
            None => format!("leasehold {} {}\n", r.token, r.expires_ms),
        };
        let n = text.len().min(RECORD);
        buf[..n].copy_from_slice(&text.as_bytes()[..n]);
    }
    file.write_all_at(&buf, 0)
}

pub(super) fn read_record(file: &File) -> io::Result<Option<Record>> {
    let mut buf = [0u8; RECORD];
    let n = file.read_at(&mut buf, 0)?;
    let text = String::from_utf8_lossy(&buf[..n]);
    let mut words = text.split_whitespace();
    Ok(match (words.next(), words.next(), words.next()) {
        (Some("leasehold"), Some(token), Some(ms)) => ms.parse().ok().map(|expires_ms| Record {
            token: token.to_string(),
            expires_ms,
            pid: words.next().and_then(|pid| pid.parse().ok()),
        }),
        _ => None,
    })
}
