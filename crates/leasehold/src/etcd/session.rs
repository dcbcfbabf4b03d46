//! Sessions: one etcd lease per TTL, shared by the auto-extended locks and the waiting
//! entries of that TTL, and kept alive by its own task ([`run_session`]).

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

use crate::core::error::LossReason;
use crate::core::error::{Operation, Result};
use crate::core::guard::{Lease, valid_until};
use crate::core::token::LockToken;

use super::client::EtcdClient;
#[cfg(doc)]
use super::keep_alive::KeepAlives;
use super::lock;
use super::renewal::run_session;

/// The shortest renewal interval a session uses, whatever the options ask.
const MIN_INTERVAL: Duration = Duration::from_millis(100);

/// The client's sessions by TTL in whole seconds. An async mutex: creating a session (a lease
/// grant) happens under it, so two acquisitions never open two sessions of one TTL.
pub(super) type Sessions = tokio::sync::Mutex<HashMap<i64, Arc<Session>>>;

/// One etcd lease, shared by the client's auto-extended locks and waiting entries of one TTL,
/// and kept alive by its own task through the client's one keep-alive stream
/// ([`KeepAlives`]).
pub(super) struct Session {
    /// The TTL asked for, in seconds (the key in [`Sessions`]).
    pub(super) secs: i64,
    /// The etcd lease.
    pub(super) id: i64,
    /// Waiting acquisitions using it (changed under the [`Sessions`] lock when raised).
    pub(super) waiters: AtomicUsize,
    pub(super) state: Mutex<SessionState>,
    /// Cancelled when the session ended (lost, or retired when idle).
    pub(super) dead: CancellationToken,
}

pub(super) struct SessionState {
    /// When the grant, or the keep-alive whose reply was applied last, was *sent*.
    pub(super) renewed_at: Instant,
    /// The TTL etcd granted.
    pub(super) granted: Duration,
    pub(super) interval: Duration,
    /// Held, auto-extended locks by their entry's create revision.
    pub(super) locks: HashMap<i64, Tracked>,
    /// Entries that may ride on this lease and must go, whose deletion etcd has not confirmed
    /// yet: deleted at each renewal etcd answers until it does (see [`Orphan`]).
    pub(super) orphans: Vec<Orphan>,
}

/// An entry left on a session's lease that nobody holds: its deletion failed (etcd refused,
/// or did not answer). The session keeps its lease alive for its other locks, so the entry
/// would stay there, held by nobody, for as long as the client holds anything of that TTL
/// (issue 30, finding L1). So the session keeps it and, after each keep-alive etcd answers,
/// deletes it (guarded as below) until etcd confirms the delete (applied, or the guard failed:
/// the entry is gone or is not this one any more). A session does not wait for its orphans to
/// retire: its lease is then revoked, which deletes them. *Test:* `etcd_backend.rs`:
/// `a_release_etcd_refused_is_cleaned_up_while_the_session_lives`.
#[derive(Debug, Clone)]
pub(super) enum Orphan {
    /// An abandoned entry (a release, a waiter's or an attempt's cleanup): deleted if it
    /// still stores `token` (tokens are unique, so no other entry matches).
    Abandoned { entry: Vec<u8>, token: LockToken },
    /// The entry of a lock declared lost while its session lives on: deleted if it still has
    /// the create revision `rev` and rides on this session's lease (moved elsewhere, it is
    /// not this session's to delete).
    Lost { entry: Vec<u8>, rev: i64 },
}

/// An auto-extended lock on a session.
pub(super) struct Tracked {
    pub(super) entry: Vec<u8>,
    pub(super) lease: Lease,
    pub(super) secs: i64,
    pub(super) stop_at: Option<Instant>,
    /// A bound on the validity renewals may give: set when a `max_hold` move onto a lease of
    /// its own got no answer, so the entry may ride on that lease, which is not kept alive.
    /// *Test:* `a_ceiling_bounds_the_renewals_of_a_lock`.
    pub(super) ceiling: Option<Instant>,
    pub(super) attach: Arc<Mutex<Attach>>,
}

impl Orphan {
    /// The entry's key.
    pub(super) fn entry(&self) -> &[u8] {
        match self {
            Orphan::Abandoned { entry, .. } | Orphan::Lost { entry, .. } => entry,
        }
    }
}

/// The lease a held lock's entry lives on.
#[derive(Clone, Debug)]
pub(super) enum Attach {
    /// A session's shared lease (auto-extended).
    Session(Weak<Session>),
    /// A lease of its own, which only this entry uses.
    Dedicated(i64),
}

impl Attach {
    /// The session whose lease the entry rides on, if any (for [`Orphan`]s).
    pub(super) fn sessions(&self) -> Vec<Weak<Session>> {
        match self {
            Attach::Session(session) => vec![session.clone()],
            Attach::Dedicated(_) => Vec::new(),
        }
    }
}

impl Session {
    pub(super) fn state(&self) -> MutexGuard<'_, SessionState> {
        lock(&self.state)
    }

    pub(super) fn valid_until(&self) -> Instant {
        let st = self.state();
        valid_until(st.renewed_at, st.granted)
    }

    pub(super) fn interval(&self) -> Duration {
        self.state().interval
    }

    pub(super) fn is_idle(&self) -> bool {
        self.waiters.load(Ordering::SeqCst) == 0 && self.state().locks.is_empty()
    }

    /// Registers a held lock and sets its validity from the session's; `None` if the session
    /// has ended (then the entry is not kept alive).
    pub(super) fn register(&self, rev: i64, tracked: Tracked) -> Option<Instant> {
        let mut st = self.state();
        if self.dead.is_cancelled() {
            return None;
        }
        let until = valid_until(st.renewed_at, st.granted);
        tracked.lease.set_valid_until(until);
        st.locks.insert(rev, tracked);
        Some(until)
    }

    pub(super) fn unregister(&self, rev: i64) -> Option<Tracked> {
        self.state().locks.remove(&rev)
    }

    /// Keeps `orphans`, entries that may ride on this session's lease, for deletion at the
    /// next renewals (see [`Orphan`]). Nothing to keep once the session ended: its lease is
    /// revoked or no longer kept alive, and the entries go with it.
    /// An entry kept already is not kept twice (one transaction must not name a key twice).
    pub(super) fn adopt(&self, orphans: impl IntoIterator<Item = Orphan>) {
        let mut st = self.state();
        if self.dead.is_cancelled() {
            return;
        }
        for orphan in orphans {
            if !st.orphans.iter().any(|o| o.entry() == orphan.entry()) {
                st.orphans.push(orphan);
            }
        }
    }

    /// A keep-alive of this session's lease sent at `sent` was answered with `ttl`: every
    /// lock's validity moves to `sent + ttl - drift` (only forward: a reply to an older
    /// request than the last one applied changes nothing). Returns the locks it dropped
    /// because their lease was declared lost meanwhile (by [`Lease::lost`] seeing its validity
    /// run out while a keep-alive was in flight): their entries are still on the lease, which
    /// is kept alive, so they must be deleted. `None` if the session's validity had already
    /// run out when the request was sent (or the session ended): it is not revived.
    pub(super) fn renewed(&self, sent: Instant, ttl: Duration) -> Option<Vec<(i64, Vec<u8>)>> {
        let mut st = self.state();
        let until = valid_until(st.renewed_at, st.granted);
        if self.dead.is_cancelled() || sent >= until {
            return None;
        }
        if sent <= st.renewed_at {
            return Some(Vec::new());
        }
        st.renewed_at = sent;
        st.granted = ttl;
        let mut lost = Vec::new();
        st.locks.retain(|rev, t| {
            if t.lease.is_ended() {
                return false;
            }
            if t.lease.loss_reason().is_some() {
                lost.push((*rev, std::mem::take(&mut t.entry)));
                return false;
            }
            true
        });
        for t in st.locks.values() {
            match t.ceiling {
                None => t.lease.renewed(sent, ttl),
                Some(ceiling) => {
                    let bound = valid_until(sent, ttl).min(ceiling);
                    t.lease.extend_sent(sent, bound).confirm(bound);
                }
            }
        }
        Some(lost)
    }

    /// Ends the session and declares every lock on it lost.
    pub(super) fn die(&self, reason: LossReason) {
        let locks = {
            let mut st = self.state();
            self.dead.cancel();
            std::mem::take(&mut st.locks)
        };
        for t in locks.into_values() {
            t.lease.mark_lost(reason);
        }
    }
}

/// A waiting acquisition's hold on a session: keeps it from retiring.
pub(super) struct SessionRef(pub(super) Arc<Session>);

impl SessionRef {
    /// Keeps a live `session` from retiring while the returned reference lives. Raised
    /// outside the [`Sessions`] lock: safe while the caller has a lock registered on it (then
    /// it is not idle, so not retiring).
    pub(super) fn pin(session: &Arc<Session>) -> SessionRef {
        session.waiters.fetch_add(1, Ordering::SeqCst);
        SessionRef(session.clone())
    }
}

impl Drop for SessionRef {
    fn drop(&mut self) {
        self.0.waiters.fetch_sub(1, Ordering::SeqCst);
    }
}

impl EtcdClient {
    /// The live session of `secs`, opened if there is none (a lease grant).
    pub(super) async fn checkout(&self, secs: i64, interval: Duration) -> Result<SessionRef> {
        let mut map = self.inner.sessions.lock().await;
        if let Some(s) = map.get(&secs)
            && !s.dead.is_cancelled()
        {
            s.waiters.fetch_add(1, Ordering::SeqCst);
            let mut st = s.state();
            st.interval = st.interval.min(interval.max(MIN_INTERVAL));
            drop(st);
            return Ok(SessionRef(s.clone()));
        }
        let started = Instant::now();
        let (id, granted) = self.grant(secs, Operation::Acquire).await?;
        let session = Arc::new(Session {
            secs,
            id,
            waiters: AtomicUsize::new(1),
            state: Mutex::new(SessionState {
                renewed_at: started,
                granted,
                interval: interval.min(granted / 2).max(MIN_INTERVAL),
                locks: HashMap::new(),
                orphans: Vec::new(),
            }),
            dead: CancellationToken::new(),
        });
        map.insert(secs, session.clone());
        tokio::spawn(run_session(
            self.inner.etcd.clone(),
            self.inner.keep_alives.clone(),
            session.clone(),
            self.inner.sessions.clone(),
            self.inner.response_timeout,
        ));
        Ok(SessionRef(session))
    }
}
