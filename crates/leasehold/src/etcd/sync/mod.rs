//! Semaphores, read-write locks and elections on etcd, after etcd's own recipes
//! (`concurrency.Mutex` / `Election`, `recipes.RWMutex`): each is a [`Queue`] of entries, one
//! per holder or waiter, each storing its token on a lease, ordered by create revision. They
//! wait, hold, renew and report loss exactly as the plain lock does (the same sessions, the
//! same keep-alive stream, the same guard: see the [etcd module docs](super)).
//!
//! # Key layout
//!
//! | primitive | entry |
//! |---|---|
//! | plain lock `K` | `K \0 token` |
//! | semaphore `K` of `N` permits | `\0semaphore\0 K \0 token \0 N` |
//! | read-write lock `K`, a reader | `\0rwlock\0 K \0read\0 token` |
//! | read-write lock `K`, a writer | `\0rwlock\0 K \0write\0 token` |
//! | election `K`, candidate `id` | `\0election\0 K \0 token \0 id` |
//!
//! Names cannot contain NUL (refused before any round trip), so no two of these prefixes
//! overlap: a plain lock's entries start with its (non-empty, NUL-free) name, every other
//! primitive's with a NUL, then its kind, then the name up to a NUL. Every entry's value is
//! its token (what token-checked release and extend compare); what else an entry says (the
//! number of permits, the candidate id) is in its key, so a lease move (a put of the token)
//! keeps it.
//!
//! # Guarantees, and why they hold
//!
//! Each rests on the plain lock's guarantee 1 (a linearizable read at revision `R` showing
//! our entry with fewer than `allowed` blockers ahead holds while our entry lives, since
//! every later entry has a higher create revision) and on its lease handling (validity,
//! auto-extension, loss), under the same assumptions (nobody else writes under these
//! prefixes; the etcd leader's clock runs at most 1% fast).
//!
//! * **Semaphore** of `N`: holders are the `N` entries with the lowest create revisions, so
//!   while leases are valid at most `N` hold. A waiter with `k >= N` entries ahead watches the
//!   prefix from its read and counts the deletions of those `k` entries (any of them: holders
//!   release in any order), reading again only once `k - N + 1` are gone, so a release wakes
//!   only the waiters whose turn may have come (no herd of reads). `N` is in every entry's
//!   key; an acquisition reads the first entry with its own enqueueing write and refuses
//!   another `N` with [`Error::Conflict`] (giving its entry back). Release and extend are
//!   token-checked (the entry with the token, and this `N`). No fencing number (N holders
//!   share the name), no fair mode (it is FIFO anyway), no `replica_ack`:
//!   [`Error::Unsupported`].
//! * **Read-write lock**: a reader waits for the writers ahead of it only, a writer for every
//!   entry ahead of it. So a writer holds alone, readers share, and a reader arriving after a
//!   waiting writer queues behind it (writers are not starved). A writer's fencing number is
//!   its entry's create revision, strictly increasing from writer to writer (each writer's
//!   entry is later than every earlier writer's, which it waited for). Readers get no fencing
//!   number ([`Error::Unsupported`]).
//! * **Election**: a campaign is a writer-like entry (waits for every earlier entry); the
//!   leader is the first entry, its term the entry's create revision (its guard's fencing
//!   number), strictly increasing from leader to leader. Leadership is auto-extended on the
//!   session; a crashed leader's lease expires after its TTL and the next candidate leads.
//!   [`Election::watch`](crate::Election::watch) hears of changes through an etcd watch on the
//!   election's prefix.
//!
//! Release by token from another process (the CLI's `release --permits N`, `--read`,
//! `--write`) works as for the plain lock: one token-checked transaction.

mod election;
mod rwlock;
mod semaphore;

use crate::core::driver::Primitives;
use crate::core::error::Result;
use crate::core::kind::Backend;
use crate::core::sync::{Election, RwLock, Semaphore};

use super::client::EtcdClient;
use super::keys::check_key;

#[cfg(doc)]
use super::acquire::Queue;

use election::EtcdElection;
use rwlock::EtcdRwLock;
use semaphore::EtcdSemaphore;

/// `\0kind\0name\0`: the prefix of a primitive's entries.
fn prefix(kind: &str, name: &str) -> Vec<u8> {
    let mut p = Vec::with_capacity(kind.len() + name.len() + 3);
    p.push(0);
    p.extend_from_slice(kind.as_bytes());
    p.push(0);
    p.extend_from_slice(name.as_bytes());
    p.push(0);
    p
}

impl Primitives for EtcdClient {
    fn check_name(&self, name: &str) -> Result<()> {
        check_key(name)
    }

    /// A counting semaphore of `permits` on `name`: etcd entries
    /// `\0semaphore\0name\0token\0permits`, of which the `permits` with the lowest create
    /// revisions hold. While leases are valid at most `permits` hold; waiters are served in
    /// arrival order and woken by etcd watches (no polling); another number of permits while
    /// the semaphore is held or awaited is [`Error::Conflict`]; release and extend are
    /// token-checked and work from any process with the token. No fencing number, no fair
    /// mode, no `replica_ack` ([`Error::Unsupported`]). Assumes nobody else writes under the
    /// prefix, as for locks.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for an empty, over-long or NUL-containing name, or
    /// `permits` outside 1 ..= [`MAX_PERMITS`](crate::MAX_PERMITS).
    fn semaphore(&self, name: &str, permits: u32) -> Result<Semaphore> {
        Ok(Semaphore::new(
            Backend::Etcd,
            name,
            permits,
            EtcdSemaphore::new(self, name, permits),
        ))
    }

    /// A read-write lock on `name`, after etcd's `RWMutex` recipe: entries
    /// `\0rwlock\0name\0read\0token` and `...\0write\0token`; a reader waits for the
    /// writers that came before it, a writer for everyone who came before it. So while leases
    /// are valid a writer holds alone, readers share, and a reader arriving after a waiting
    /// writer queues behind it (writers are not starved). A writer's fencing number is its
    /// entry's create revision (strictly increasing from writer to writer); readers have none.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for an empty, over-long or NUL-containing name.
    fn rwlock(&self, name: &str) -> Result<RwLock> {
        let provider = EtcdRwLock::new(self, name);
        Ok(RwLock::new(Backend::Etcd, name, provider))
    }

    /// An election on `name`, after etcd's `concurrency.Election`: a campaign is an entry
    /// `\0election\0name\0token\0id` that waits for every earlier entry; the first entry
    /// leads, and its create revision is the term (the guard's fencing number, strictly
    /// increasing from leader to leader). Leadership is auto-extended on the client's session;
    /// a crashed leader's lease expires after its TTL and the next candidate leads.
    /// [`Election::watch`] hears of changes through an etcd watch on the prefix.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for an empty, over-long or NUL-containing name.
    fn election(&self, name: &str) -> Result<Election> {
        let provider = EtcdElection::new(self, name);
        Ok(Election::new(Backend::Etcd, name, provider))
    }
}
