//! A file lock held by this process: its locked file, the lease's end, and the timer that lets
//! the lock go when the lease ends unextended.

use std::fs::File;
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant, SystemTime};

use futures_util::future::BoxFuture;
use nix::fcntl::Flock;

use super::disk::{Folder, Record, unix_ms, write_record};
use super::{FileClient, Inner, io_error};
use crate::core::error::{Error, Operation, Result};
use crate::core::guard::{HeldLock, Lease};
use crate::core::token::LockToken;

/// One held lock. Its release, extend and expiry are a few system calls on a local file (a
/// `stat`, a `pread`, a `pwrite`; no `fsync`), done in place under its mutex.
#[derive(Debug)]
pub(super) struct FileHeld {
    /// Where the lock file is (kept here: the lock may outlive its client).
    folder: Folder,
    /// The client's table of held locks, to leave it when the lock ends.
    client: Weak<Inner>,
    key: String,
    token: LockToken,
    state: Mutex<State>,
    /// Wakes the expiry timer when the lease's end moves or the lock ends.
    changed: tokio::sync::Notify,
}

#[derive(Debug)]
struct State {
    /// `None` once released or expired: the `flock` is gone with the file's descriptor.
    lock: Option<Flock<File>>,
    /// The lease's end: the lock is let go at this instant unless extended.
    expires: Instant,
}

impl FileHeld {
    pub(super) fn new(
        client: &FileClient,
        key: &str,
        token: &LockToken,
        lock: Flock<File>,
        expires: Instant,
    ) -> Arc<FileHeld> {
        let held = Arc::new(FileHeld {
            folder: client.inner.folder.clone(),
            client: Arc::downgrade(&client.inner),
            key: key.to_string(),
            token: token.clone(),
            state: Mutex::new(State {
                lock: Some(lock),
                expires,
            }),
            changed: tokio::sync::Notify::new(),
        });
        client
            .inner
            .held
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert((key.to_string(), token.clone()), held.clone());
        expire_at_the_end(&held);
        held
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn not_held(&self) -> Error {
        Error::NotHeld {
            key: self.key.clone(),
        }
    }

    fn forget(&self) {
        if let Some(inner) = self.client.upgrade() {
            inner
                .held
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .remove(&(self.key.clone(), self.token.clone()));
        }
    }

    /// The lock, if it is still ours: held, in its lease, and not taken away by an outsider
    /// (the file deleted or replaced, or another record written into it).
    fn check(&self, state: &mut State, op: Operation) -> Result<()> {
        if Instant::now() >= state.expires {
            self.let_go(state);
        }
        let lock = state.lock.as_ref().ok_or_else(|| self.not_held())?;
        let ours = self
            .folder
            .still_ours(&self.key, lock, &self.token)
            .map_err(|e| io_error(op, e))?;
        if !ours {
            self.let_go(state);
            return Err(self.not_held());
        }
        Ok(())
    }

    fn let_go(&self, state: &mut State) {
        state.lock = None;
        self.changed.notify_one();
        self.forget();
    }

    /// Releases the lock if it is still ours.
    pub(super) fn release_now(&self) -> Result<()> {
        let mut state = self.state();
        self.check(&mut state, Operation::Release)?;
        // The record emptied, then the descriptor closed (which drops the flock).
        let cleared = write_record(state.lock.as_ref().expect("checked"), None);
        self.let_go(&mut state);
        cleared.map_err(|e| io_error(Operation::Release, e))
    }

    /// Moves the lease's end to `ttl` from now if the lock is still ours; returns it.
    pub(super) fn extend_now(&self, ttl: Duration) -> Result<Instant> {
        let mut state = self.state();
        self.check(&mut state, Operation::Extend)?;
        // Read together, the wall clock first: the record's end is the lease's, or earlier.
        let (wall, now) = (SystemTime::now(), Instant::now());
        let record = Record::ours(&self.token, unix_ms(wall + ttl));
        write_record(state.lock.as_ref().expect("checked"), Some(&record))
            .map_err(|e| io_error(Operation::Extend, e))?;
        state.expires = now + ttl;
        // A shorter lease ends sooner than the timer was set for.
        self.changed.notify_one();
        Ok(state.expires)
    }

    /// When the lease ends, if the lock is still held.
    fn expiry(&self) -> Option<Instant> {
        let state = self.state();
        state.lock.as_ref().map(|_| state.expires)
    }

    /// Lets the lock go if its lease is over; true once it is gone.
    fn expire_if_due(&self) -> bool {
        let mut state = self.state();
        if state.lock.is_some() && Instant::now() >= state.expires {
            self.let_go(&mut state);
        }
        state.lock.is_none()
    }
}

/// Lets the lock go when its lease ends unextended, as a server would expire it: the lock is
/// held no longer than the lease's validity says, while this process runs.
fn expire_at_the_end(held: &Arc<FileHeld>) {
    let held = held.clone();
    tokio::spawn(async move {
        while let Some(until) = held.expiry() {
            tokio::select! {
                _ = tokio::time::sleep_until(until.into()) => {
                    if held.expire_if_due() {
                        return;
                    }
                }
                _ = held.changed.notified() => {}
            }
        }
    });
}

impl HeldLock for FileHeld {
    fn release<'a>(&'a self, _lease: &'a Lease) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move { self.release_now() })
    }

    fn extend<'a>(&'a self, _lease: &'a Lease, ttl: Duration) -> BoxFuture<'a, Result<Instant>> {
        Box::pin(async move {
            crate::core::options::ttl_millis(ttl)?;
            self.extend_now(ttl)
        })
    }

    /// One clock: the lock is let go by this process's own timer, at the lease's end or later.
    fn drift(&self, _ttl: Duration) -> Duration {
        Duration::ZERO
    }
}
