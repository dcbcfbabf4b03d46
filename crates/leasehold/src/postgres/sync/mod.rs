//! Semaphores, read-write locks and elections on PostgreSQL: on session advisory locks
//! ([`PostgresClient`](super::PostgresClient): all three) and on lease rows
//! ([`PostgresLeaseClient`](super::PostgresLeaseClient), `?lock=lease`: semaphore and
//! election; no read-write lock).
//!
//! # On session advisory locks
//! Each reader, writer, permit or leader is held, as a plain session lock is, by a server
//! session of its own: the same idle limit as TTL, the same renewal, the same pooler checks,
//! and the same loss report the moment the session ends (terminated, restarted, cut off).
//! Fencing numbers come from the plain locks' counter table `leasehold_locks`.
//!
//! * **Read-write lock.** Readers take `pg_advisory_lock_shared` on the key of `name` (the
//!   plain lock's key, `hashtextextended(name, 0)`), the writer `pg_advisory_lock` on the same
//!   key and the next fencing number of `name`, in one statement. So a writer holds alone and
//!   readers share; a plain lock of `name` counts as a writer. **Writers are not starved:**
//!   PostgreSQL's lock manager makes a new request wait when it conflicts with a request
//!   *already waiting* (`LockAcquireExtended` in `src/backend/storage/lmgr/lock.c`: "If lock
//!   requested conflicts with locks requested by waiters, must join wait queue"; the wait
//!   queue is kept in arrival order, `src/backend/storage/lmgr/README`), so once a writer
//!   waits, a new reader queues behind it (and `try_read` is refused) while the current
//!   readers drain. Tested by `postgres_primitives::a_waiting_writer_blocks_new_readers`.
//!   Fair mode is accepted: the server's queue is in arrival order anyway
//!   ([`Fairness::Always`](crate::Fairness::Always)).
//! * **Semaphore.** `permits` advisory locks, the slots, with keys `hashtextextended(name, i)`
//!   for `i` in `1 ..= permits` (seed 0 is the plain lock's, so no slot is a plain lock's
//!   key; two names whose 64-bit hashes collide share slots: a liveness cost, never a safety
//!   one). An attempt tries the slots in one statement and keeps the first one granted, so at
//!   most `permits` sessions hold a slot at once. **Waiting**: while every slot is held, the
//!   waiter blocks in the server's queue of one slot (a different one each round) for one
//!   backoff delay (`lock_timeout`), then tries every slot again: the release of the slot it
//!   queues on grants it that slot at once; a release of another slot is found at the next
//!   round, at most one backoff delay (200 ms by default) later. No fairness between waiters
//!   (fair mode is refused). The number of permits is not recorded: a client of the same name
//!   with a larger number admits more holders (every client must use the same number; this
//!   backend cannot tell). Fencing is refused (several holders at once).
//! * **Election.** The leader holds the exclusive advisory lock of `name`, as a plain lock;
//!   the statement that wins it draws the next fencing number of `name` (the term) and writes
//!   it with the leader's id to the term row (`leasehold_terms (key, term, leader_id)`),
//!   committed together. [`Election::leader`](crate::Election::leader) reads whether a
//!   session holds the lock (`pg_locks`), the counter and the term row: a held lock whose
//!   counter equals the term is that leader's (no TTL: a session lock has none); a term row
//!   left by a leader whose session ended is stale (no lock held: nobody leads); a held lock
//!   whose counter moved past the term is a plain lock or a writer ([`Error::Conflict`]).
//!   Terms strictly increase because the counter does. A crashed leader's session ends at
//!   once (process crash) or after the TTL (a vanished machine: the idle limit), and the next
//!   candidate in the server's queue takes over. During the winning statement itself, before
//!   it commits, `leader()` may still name the previous term's leader.
//! * **Release by token from another process** is refused as for the plain session lock: only
//!   the holding session can release. A holding session carries a mark in its
//!   `application_name` (`~` and 32 hex digits of the token's SHA-256, never the token, then
//!   its name), so a release or extend with a token held by another process's session says
//!   [`Error::Unsupported`], and one with a token nobody holds [`Error::NotHeld`].
//!
//! # On lease rows
//! * **Semaphore.** The table `leasehold_permits (key, slot, token, expires_at, permits)`:
//!   a permit is a slot row with our token and an unexpired `expires_at` (by the server's
//!   `clock_timestamp()`). An attempt picks, at random, a slot that looked free and takes it
//!   in the same statement with the lease rows' upsert, whose `WHERE` (free or expired) is
//!   evaluated on the row's latest version under its row lock: two attempts never both hold a
//!   slot, so at most `permits` tokens hold one while their leases are valid. An attempt that
//!   lost its slot to another looks again (a free permit is not reported busy). Release and
//!   extend are token-checked `UPDATE`s (from any process); a release notifies waiters on the
//!   lease rows' channel (`LISTEN`), who otherwise retry after their backoff, never later than
//!   the first held permit expires. A live holder that asked for another number of permits
//!   makes an attempt fail with [`Error::Conflict`] (checked against the rows the statement
//!   sees: two first attempts with different numbers at the same instant are not caught).
//! * **Election.** The lease row of `name` in `leasehold_leases` (a plain lease lock's row),
//!   taken with its next fencing number (the term), and the term row
//!   (`leasehold_lease_terms`) in the same statement; renewed as an auto-extended lease row; a
//!   crashed leader's row expires after its TTL, and a waiting candidate takes over. The winning
//!   statement and a resignation notify the lease rows' channel, so
//!   [`Election::watch`](crate::Election::watch) hears each change at once (other candidates
//!   waiting for the name wake too, and try once more).
//! * **No read-write lock.** Readers as rows with a shared mode need a writer that waits
//!   without holding, and readers that see it, across rows: not one statement under one row
//!   lock. [`Backend::has`](crate::Backend::has) says so and
//!   [`Locker::rwlock`](crate::Locker::rwlock) refuses with [`Error::Unsupported`]; use session
//!   locks (the URL without `?lock=lease`).
//!
//! Assumptions: those of the plain locks of each kind (see [`crate::postgres`]).

mod advisory;
mod rows;
mod session;

pub(super) use advisory::{AdvisoryLock, Ask as AdvisoryAsk, acquiring_reply};

#[cfg(doc)]
use crate::core::error::Error;
