//! The process-wide tables of memory locks: one per namespace, each one mutex over its keys.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use tokio::sync::Notify;
use tokio::sync::futures::OwnedNotified;

use crate::core::error::{Error, Operation, Result};
use crate::core::guard::Lease;
use crate::core::options::LockOptions;
use crate::core::outcome::LockState;
use crate::core::token::LockToken;

/// Every namespace of the process, by name; never dropped (a lock outlives its clients).
static NAMESPACES: LazyLock<Mutex<HashMap<String, Arc<Namespace>>>> =
    LazyLock::new(Default::default);

/// The namespace `name` (`""`: the unnamed one), made on first use.
pub(super) fn namespace(name: &str) -> Arc<Namespace> {
    let mut all = NAMESPACES.lock().unwrap_or_else(|p| p.into_inner());
    all.entry(name.to_string()).or_default().clone()
}

/// One namespace's locks.
#[derive(Debug, Default)]
pub(super) struct Namespace {
    keys: Mutex<HashMap<String, Entry>>,
    next_ticket: AtomicU64,
}

#[derive(Debug, Default)]
struct Entry {
    holder: Option<Holder>,
    /// The last fencing number issued (0: none yet). Never lowered.
    fence: u64,
    /// Waiting acquisitions, in arrival order: only the first may take the lock.
    queue: VecDeque<u64>,
    /// Wakes the waiters when the lock may have become theirs.
    woken: Arc<Notify>,
    /// Attempts that found the lock busy (a test hook reads it).
    refusals: u64,
}

#[derive(Debug)]
struct Holder {
    token: LockToken,
    expires: Instant,
    /// Acquisition + [`LockOptions::min_hold`]: a release before it keeps the lock until then.
    hold_until: Option<Instant>,
}

impl Entry {
    /// The holder, unless its lease ran out at `now` (then the lock is free).
    fn live_holder(&mut self, now: Instant) -> Option<&Holder> {
        if self.holder.as_ref().is_some_and(|h| h.expires <= now) {
            self.holder = None;
        }
        self.holder.as_ref()
    }

    /// The holder's lease, if `token` holds the lock at `now`.
    fn held_by(&mut self, token: &LockToken, now: Instant) -> Option<&mut Holder> {
        self.live_holder(now);
        self.holder.as_mut().filter(|h| h.token == *token)
    }

    /// Nothing worth keeping: no holder, no waiter, no fencing number issued.
    fn is_idle(&self) -> bool {
        self.holder.is_none() && self.queue.is_empty() && self.fence == 0
    }
}

/// What one attempt found.
pub(super) enum Attempt {
    Taken(Lease),
    Busy {
        /// Resolves when a release or a waiter leaving may have made the lock ours.
        woken: OwnedNotified,
        /// The holder's remaining lease (`None`: free, but a waiter ahead of us takes it).
        remaining: Option<Duration>,
    },
}

/// A waiter's place in a key's queue; leaving it (dropped: acquired, timed out, cancelled)
/// wakes the others, one of which may now be first.
pub(super) struct Ticket {
    ns: Arc<Namespace>,
    key: String,
    id: u64,
}

impl Drop for Ticket {
    fn drop(&mut self) {
        let mut keys = self.ns.keys();
        if let Some(e) = keys.get_mut(&self.key) {
            e.queue.retain(|id| *id != self.id);
            e.woken.notify_waiters();
        }
        prune(&mut keys, &self.key);
    }
}

fn prune(keys: &mut HashMap<String, Entry>, key: &str) {
    if keys.get(key).is_some_and(Entry::is_idle) {
        keys.remove(key);
    }
}

fn not_held(key: &str) -> Error {
    Error::NotHeld {
        key: key.to_string(),
    }
}

impl Namespace {
    fn keys(&self) -> MutexGuard<'_, HashMap<String, Entry>> {
        // Every change is one assignment: a panic elsewhere leaves no half-made state.
        self.keys.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Joins the queue of `key`.
    pub(super) fn ticket(self: &Arc<Self>, key: &str) -> Ticket {
        let id = self.next_ticket.fetch_add(1, Ordering::Relaxed);
        self.keys()
            .entry(key.to_string())
            .or_default()
            .queue
            .push_back(id);
        Ticket {
            ns: self.clone(),
            key: key.to_string(),
            id,
        }
    }

    /// Takes `key` if it is free and nobody waits ahead of `ticket` (without one: nobody waits).
    pub(super) fn attempt(
        &self,
        key: &str,
        options: &LockOptions,
        ticket: Option<&Ticket>,
    ) -> Result<Attempt> {
        let mut keys = self.keys();
        let now = Instant::now();
        let e = keys.entry(key.to_string()).or_default();
        let first = match ticket {
            Some(t) => e.queue.front() == Some(&t.id),
            None => e.queue.is_empty(),
        };
        if e.live_holder(now).is_none() && first {
            let fencing = match options.fencing_enabled() {
                true => {
                    let n = e.fence.checked_add(1).ok_or(Error::FencingExhausted {
                        op: Operation::Acquire,
                    })?;
                    e.fence = n;
                    Some(n)
                }
                false => None,
            };
            if ticket.is_some() {
                e.queue.pop_front();
            }
            let token = LockToken::random();
            let expires = now + options.ttl();
            e.holder = Some(Holder {
                token: token.clone(),
                expires,
                hold_until: options.min_hold_bound().map(|m| now + m),
            });
            return Ok(Attempt::Taken(Lease::until(key, token, fencing, expires)));
        }
        e.refusals += 1;
        let remaining = e.holder.as_ref().map(|h| h.expires - now);
        let woken = e.woken.clone().notified_owned();
        prune(&mut keys, key);
        Ok(Attempt::Busy { woken, remaining })
    }

    pub(super) fn release(&self, key: &str, token: &LockToken) -> Result<()> {
        let mut keys = self.keys();
        let now = Instant::now();
        let e = keys.get_mut(key).ok_or_else(|| not_held(key))?;
        let holder = e.held_by(token, now).ok_or_else(|| not_held(key))?;
        match holder.hold_until.filter(|until| *until > now) {
            // Kept until the minimum hold ends, then free by itself (see `LockOptions::min_hold`).
            Some(until) => holder.expires = until,
            None => e.holder = None,
        }
        // Woken either way: waiters sleep until the old end, and a kept lock may end sooner.
        e.woken.notify_waiters();
        prune(&mut keys, key);
        Ok(())
    }

    /// Moves the expiry to `ttl` from now; returns it (the lease's new validity, exactly).
    pub(super) fn extend(&self, key: &str, token: &LockToken, ttl: Duration) -> Result<Instant> {
        let mut keys = self.keys();
        let now = Instant::now();
        let e = keys.get_mut(key).ok_or_else(|| not_held(key))?;
        let holder = e.held_by(token, now).ok_or_else(|| not_held(key))?;
        holder.expires = now + ttl;
        let expires = holder.expires;
        // Waiters sleep until the old end: a shorter lease ends sooner.
        e.woken.notify_waiters();
        Ok(expires)
    }

    pub(super) fn inspect(&self, key: &str) -> LockState {
        let mut keys = self.keys();
        let now = Instant::now();
        let (holder, ttl, fence) = match keys.get_mut(key) {
            Some(e) => {
                let holder = e.live_holder(now);
                let held = holder.map(|h| (h.token.expose().to_string(), h.expires - now));
                (held.clone().map(|h| h.0), held.map(|h| h.1), e.fence)
            }
            None => (None, None, 0),
        };
        LockState {
            key: key.to_string(),
            holder,
            ttl,
            fencing_counter: (fence > 0).then_some(fence),
        }
    }

    pub(super) fn raise(&self, key: &str, at_least: u64) -> u64 {
        let mut keys = self.keys();
        let e = keys.entry(key.to_string()).or_default();
        e.fence = e.fence.max(at_least);
        let fence = e.fence;
        prune(&mut keys, key);
        fence
    }

    pub(super) fn take_away(&self, key: &str) -> bool {
        let mut keys = self.keys();
        let Some(e) = keys.get_mut(key) else {
            return false;
        };
        let had = e.holder.take().is_some();
        e.woken.notify_waiters();
        prune(&mut keys, key);
        had
    }

    pub(super) fn refusals(&self, key: &str) -> u64 {
        self.keys().get(key).map_or(0, |e| e.refusals)
    }
}
