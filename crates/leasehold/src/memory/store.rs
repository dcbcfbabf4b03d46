//! The process-wide tables of memory locks: one per namespace, each one mutex over its keys.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use tokio::sync::Notify;
use tokio::sync::futures::OwnedNotified;

use crate::core::error::{Error, Operation, Result};
use crate::core::guard::Lease;
use crate::core::listing::{LockEntry, LockHolder, LockKind};
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
    /// The lock history (kept only by lockers that record it).
    pub(super) history: super::history::Histories,
}

#[derive(Debug, Default)]
struct Entry {
    /// The live and not yet pruned holders: one exclusive holder, or shared holders (readers),
    /// or up to `limit` permits of a semaphore.
    holders: Vec<Holder>,
    /// A semaphore's number of permits, while permits are held: another number is refused.
    limit: Option<u32>,
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
    hold: Hold,
    /// An election's leader id.
    leader: Option<String>,
    /// Acquisition + [`LockOptions::min_hold`]: a release before it keeps the lock until then.
    hold_until: Option<Instant>,
    /// Released, and kept only for the minimum hold: no longer its holder's to extend or
    /// release (a renewal sent before the release and applied after it must not re-extend it).
    kept: bool,
}

/// How a holder holds its key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Hold {
    /// Alone: a lock, a writer, a leader.
    Exclusive,
    /// With other readers.
    Shared,
    /// One of a semaphore's permits.
    Permit,
}

/// What an attempt asks for.
#[derive(Debug, Clone, Copy)]
pub(super) enum Want<'a> {
    /// The key alone (a plain lock, a read-write lock's writer).
    Exclusive,
    /// A read lease: shared with readers, never with an exclusive holder.
    Shared,
    /// One of `n` permits.
    Permit(u32),
    /// The key alone, recording the leader id (an election).
    Leader(&'a str),
}

impl Want<'_> {
    fn hold(self) -> Hold {
        match self {
            Want::Exclusive | Want::Leader(_) => Hold::Exclusive,
            Want::Shared => Hold::Shared,
            Want::Permit(_) => Hold::Permit,
        }
    }
}

impl Entry {
    /// Forgets the holders whose lease ran out at `now` (their hold ended then).
    fn prune_expired(&mut self, now: Instant) {
        self.holders.retain(|h| h.expires > now);
        if !self.holders.iter().any(|h| h.hold == Hold::Permit) {
            self.limit = None;
        }
    }

    /// The exclusive holder at `now`, if there is one.
    fn live_holder(&mut self, now: Instant) -> Option<&Holder> {
        self.prune_expired(now);
        self.holders.iter().find(|h| h.hold == Hold::Exclusive)
    }

    /// The lease `token` holds at `now`, if any.
    /// The live holder with `token`, if it holds as `side` says (any way for `None`).
    fn held_by(
        &mut self,
        token: &LockToken,
        side: Option<Want<'_>>,
        now: Instant,
    ) -> Option<&mut Holder> {
        self.prune_expired(now);
        let hold = side.map(Want::hold);
        self.holders
            .iter_mut()
            .find(|h| h.token == *token && !h.kept && hold.is_none_or(|hold| h.hold == hold))
    }

    /// Whether `want` may join the live holders: `Ok(None)` if it may, `Ok(Some(end))` if not
    /// (the first end of a holder in the way), or `Conflict` for another number of permits.
    fn blocked(&self, key: &str, want: Want<'_>) -> Result<Option<Instant>> {
        if let (Want::Permit(n), Some(limit)) = (want, self.limit)
            && n != limit
        {
            return Err(Error::Conflict {
                key: key.to_string(),
                detail: format!("its permits are held as {limit}, not {n}"),
            });
        }
        let in_the_way = |h: &&Holder| match want.hold() {
            Hold::Exclusive => true,
            Hold::Shared => h.hold != Hold::Shared,
            Hold::Permit => h.hold != Hold::Permit,
        };
        let first_end = self
            .holders
            .iter()
            .filter(in_the_way)
            .map(|h| h.expires)
            .min();
        let full = match want {
            Want::Permit(n) => first_end.is_some() || self.holders.len() >= n as usize,
            _ => first_end.is_some(),
        };
        let first_end = first_end.or_else(|| self.holders.iter().map(|h| h.expires).min());
        // Full means some holder is there, so `first_end` is `Some`.
        Ok(full.then_some(first_end).flatten())
    }

    /// Nothing worth keeping: no holder, no waiter, no fencing number issued.
    fn is_idle(&self) -> bool {
        self.holders.is_empty() && self.queue.is_empty() && self.fence == 0
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

    /// Takes `key` as `want` asks if nothing holding it is in the way and nobody waits ahead
    /// of `ticket` (without one: nobody waits).
    pub(super) fn attempt(
        &self,
        key: &str,
        options: &LockOptions,
        ticket: Option<&Ticket>,
        want: Want<'_>,
    ) -> Result<Attempt> {
        let mut keys = self.keys();
        let now = Instant::now();
        let e = keys.entry(key.to_string()).or_default();
        let first = match ticket {
            Some(t) => e.queue.front() == Some(&t.id),
            None => e.queue.is_empty(),
        };
        e.prune_expired(now);
        let blocked = e.blocked(key, want);
        if let Ok(None) = blocked
            && first
        {
            let fencing = match options.fencing_enabled() || matches!(want, Want::Leader(_)) {
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
            if let Want::Permit(n) = want {
                e.limit = Some(n);
            }
            let token = options.new_token();
            let expires = now + options.ttl();
            e.holders.push(Holder {
                token: token.clone(),
                expires,
                hold: want.hold(),
                leader: match want {
                    Want::Leader(id) => Some(id.to_string()),
                    _ => None,
                },
                hold_until: options.min_hold_bound().map(|m| now + m),
                kept: false,
            });
            if want.hold() != Hold::Exclusive {
                // The next waiter may hold beside us: let it look.
                e.woken.notify_waiters();
            }
            return Ok(Attempt::Taken(Lease::until(key, token, fencing, expires)));
        }
        let end = match blocked {
            Err(err) => {
                prune(&mut keys, key);
                return Err(err);
            }
            Ok(end) => end,
        };
        e.refusals += 1;
        let remaining = end.map(|end| end - now);
        let woken = e.woken.clone().notified_owned();
        prune(&mut keys, key);
        Ok(Attempt::Busy { woken, remaining })
    }

    /// Releases what `token` holds of `key`; with `side`, only if it holds it that way (a
    /// read-write lock's side: a reader's token does not release the writer's side).
    pub(super) fn release(
        &self,
        key: &str,
        token: &LockToken,
        side: Option<Want<'_>>,
    ) -> Result<()> {
        let mut keys = self.keys();
        let now = Instant::now();
        let e = keys.get_mut(key).ok_or_else(|| not_held(key))?;
        let holder = e.held_by(token, side, now).ok_or_else(|| not_held(key))?;
        match holder.hold_until.filter(|until| *until > now) {
            // Kept until the minimum hold ends, then free by itself (see `LockOptions::min_hold`).
            Some(until) => {
                holder.expires = until;
                holder.kept = true;
            }
            None => e.holders.retain(|h| h.token != *token),
        }
        // Woken either way: waiters sleep until the old end, and a kept lock may end sooner.
        e.woken.notify_waiters();
        prune(&mut keys, key);
        Ok(())
    }

    /// Moves the expiry to `ttl` from now; returns it (the lease's new validity, exactly).
    /// `side` as for [`Namespace::release`].
    pub(super) fn extend(
        &self,
        key: &str,
        token: &LockToken,
        side: Option<Want<'_>>,
        ttl: Duration,
    ) -> Result<Instant> {
        let mut keys = self.keys();
        let now = Instant::now();
        let e = keys.get_mut(key).ok_or_else(|| not_held(key))?;
        let holder = e.held_by(token, side, now).ok_or_else(|| not_held(key))?;
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
                // Only an exclusive holder is the lock's holder: readers and permits are not.
                let held = holder.map(|h| (h.token.expose().to_string(), h.expires - now));
                (held.clone().map(|h| h.0), held.map(|h| h.1), e.fence)
            }
            None => (None, None, 0),
        };
        LockState::new(key.to_string(), holder, ttl, (fence > 0).then_some(fence))
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
        let had = !e.holders.is_empty();
        e.holders.clear();
        e.limit = None;
        e.woken.notify_waiters();
        prune(&mut keys, key);
        had
    }

    /// How many hold `key` as `hold` asks (readers, permits) now.
    pub(super) fn count(&self, key: &str, want: Want<'_>) -> u32 {
        let mut keys = self.keys();
        let Some(e) = keys.get_mut(key) else {
            return 0;
        };
        e.prune_expired(Instant::now());
        let n = e.holders.iter().filter(|h| h.hold == want.hold()).count();
        prune(&mut keys, key);
        u32::try_from(n).unwrap_or(u32::MAX)
    }

    /// The election's leader: its id, term and remaining lease, or a conflict if `key` is held
    /// by a plain lock.
    pub(super) fn leader(&self, key: &str) -> Result<Option<(String, u64, Duration)>> {
        let mut keys = self.keys();
        let now = Instant::now();
        let Some(e) = keys.get_mut(key) else {
            return Ok(None);
        };
        let fence = e.fence;
        let found = match e.live_holder(now) {
            None => Ok(None),
            Some(Holder {
                leader: Some(id),
                expires,
                ..
            }) => Ok(Some((id.clone(), fence, *expires - now))),
            Some(_) => Err(Error::Conflict {
                key: key.to_string(),
                detail: "the election's lock is held, but not by a campaign (a plain lock?)".into(),
            }),
        };
        prune(&mut keys, key);
        found
    }

    pub(super) fn refusals(&self, key: &str) -> u64 {
        self.keys().get(key).map_or(0, |e| e.refusals)
    }

    /// The held locks whose keys match `pattern`, read under the table's mutex: an atomic
    /// snapshot.
    pub(super) fn list(&self, pattern: &str) -> Vec<LockEntry> {
        let mut keys = self.keys();
        let now = Instant::now();
        let mut entries = Vec::new();
        for (key, e) in keys.iter_mut() {
            if !crate::core::listing::glob_match(pattern, key) {
                continue;
            }
            e.prune_expired(now);
            let Some(first) = e.holders.first() else {
                continue;
            };
            let kind = match (first.hold, &first.leader) {
                (Hold::Exclusive, Some(_)) => LockKind::Election,
                (Hold::Exclusive, None) => LockKind::Lock,
                (Hold::Shared, _) => LockKind::Read,
                (Hold::Permit, _) => LockKind::Permits,
            };
            let mut holders: Vec<&Holder> = e.holders.iter().collect();
            holders.sort_by_key(|h| h.expires);
            let holders = holders
                .into_iter()
                .filter_map(|h| LockHolder::from_value(h.token.expose(), Some(h.expires - now)))
                .collect();
            let mut entry = LockEntry::new(key.clone(), kind, holders);
            entry.fencing_counter = (e.fence > 0).then_some(e.fence);
            entry.waiters = Some(e.queue.len() as u64);
            entries.push(entry);
        }
        entries
    }

    /// Takes `key`'s holder away and bumps its fencing counter, in one step under the mutex:
    /// the holder taken and the counter afterwards, or `None` if nobody held it.
    pub(super) fn force_release(&self, key: &str) -> Result<Option<(LockToken, u64)>> {
        let mut keys = self.keys();
        let Some(e) = keys.get_mut(key) else {
            return Ok(None);
        };
        let Some(exclusive) = e.live_holder(Instant::now()) else {
            return Ok(None);
        };
        let token = exclusive.token.clone();
        let fence = e.fence.checked_add(1).ok_or(Error::FencingExhausted {
            op: Operation::Release,
        })?;
        e.holders.retain(|h| h.token != token);
        let holder = Some(token);
        e.fence = fence;
        e.woken.notify_waiters();
        Ok(holder.map(|t| (t, fence)))
    }
}
