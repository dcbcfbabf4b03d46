//! Fair locks: arrival order with direct handoff ([`LockOptions::fair`]).
//!
//! A plain lock is taken by whoever's `SET NX` reaches the server first after a release, which
//! is often the releaser itself (it is already running); a release wakes one waiter in every
//! client that waits for the key, and they race for it.
//! A fair lock keeps its waiters in a queue on the server, and the release hands the lock over:
//!
//! - **Queue.** A waiting acquisition picks a random *ticket* and a token for its whole wait.
//!   Its attempt (one script) takes the lock only if the lock is free *and* no live waiter is
//!   ahead of it; otherwise it queues the ticket ([`fair_queue_key`]: a sorted set in arrival
//!   order, without an expiry: dead members are dropped by the scripts; a queue whose waiters
//!   all crashed on a key nobody uses again stays until its next acquisition) with an entry ([`fair_entry_key`]: token, handoff window, fencing flag, owner
//!   (its client, when that client can hand it the lock by a reply), attempt number; a key
//!   that expires after [`queue_entry_ttl`]) and returns the holder's PTTL. Each
//!   later attempt refreshes the entry.
//! - **Handoff.** The release script, if the lock still holds the releaser's token, pops the
//!   queue's head until it finds a waiter whose entry is alive, sets the lock key to that
//!   waiter's token (`SET key token PX window`), issues its fencing number if it asked for one,
//!   and publishes `handoff:<ticket>:<attempt>:<fencing>` on the channel of that waiter's client
//!   for the key ([`handoff_channel`](crate::redis::handoff_channel), named by the entry's
//!   owner): that client alone reads it, and its subscriber wakes that waiter alone
//!   (`src/redis/waiting`). With no live waiter it deletes
//!   the key. A waiter of the releasing client gets no message: the reply carries the same
//!   three fields, and the client hands it to the waiter, then yields once so that the new
//!   holder runs first.
//! - **Claim.** The woken waiter holds the lock from the message on (below); a waiter whose
//!   message was lost finds the key holding its token at its next attempt, which resets the
//!   TTL and returns its fencing number.
//! - **Vanished waiters.** A waiter that gives up (deadline, dropped future) removes its entry,
//!   and passes the lock on if it had just been handed it. A waiter that leaves and queues
//!   again (its claim came back too late to be a lease) ignores any handoff made to its
//!   earlier attempts: the leave gave it back. A waiter that crashed stops
//!   refreshing its entry, which expires after [`queue_entry_ttl`] and is then skipped. The
//!   handoff window is at most that long too, so a lock handed to a waiter that crashed
//!   between its last refresh and the handoff comes back after one window at most.
//!
//! **Safety claim.** (1) Mutual exclusion and token-checked release/extend are those of a
//! plain lock: the lock key holds one token, the release script acts only while it holds the
//! releaser's token, and extend is the plain token-checked extend. (2) A waiter's local
//! validity never outlasts the key: the handoff message (or the release's reply) names the
//! attempt whose entry the release read, so the release ran after that attempt was *sent*; the
//! key expires `window`
//! after the release, so `sent + window - drift` (the lease's validity) is before the expiry.
//! A claim by a later attempt resets the TTL from when it was sent, like any extend. (3)
//! Fencing numbers are drawn from the lock's ordinary counter by the script that hands over
//! (or takes) the lock, so they increase with every holder, fair or not.
//!
//! **Fairness claim.** While waiters keep their entries alive, the lock goes to them in the
//! order their first attempts reached the server: a free lock is only taken by the head of the
//! queue (or anyone when it is empty), and a release passes it to the head. Assumption: every
//! client of the key uses fair mode (a plain `SET NX` does not look at the queue).
//!
//! **Early handoff (within one client).** The release's reply also names the ticket that is
//! first in the queue once the new holder is popped: the *next* in line. When that holder
//! releases, and its next in line is a waiter of the same client (without fencing) that is
//! still waiting, the client hands it the lock *before the release script runs*: it queues the
//! script on the connection, hands the waiter a lease, and only then awaits the reply. No round
//! trip is on the handoff's path. On the releasing thread's own socket (`redis::calling_thread`)
//! putting the script out is a write, a system call: there the waiter is handed its lease just
//! before it, so its thread wakes meanwhile, and its acquisition returns once the write is done
//! (`Tenure::written`). That wait is for the processor, not for order: on 2 cores the woken
//! thread often took the releaser's core and kept it for its whole hold, so the script went out
//! only when the new holder came to release, and that release waited for the script's reply.
//!
//! - **Why the script's outcome is known.** The queue only grows at its tail (a waiter joins
//!   behind the last one, or keeps its place), and a member is only removed by a release of the
//!   lock (which pops the head), by its own claim or leave, or, while the lock is *free*, as a
//!   dead head by an acquisition attempt. The queue key itself never expires (no script gives
//!   it a TTL, and a waiter's attempt removes one an older version set): when it had a lifetime
//!   of its own, refreshed only by waiters' attempts, a slot migration held open (every fair
//!   script refused with `TRYAGAIN` while the holder's single-key renewals went on) let it
//!   expire, arrival order restarted, and the next in line was no longer the head. Assumption:
//!   the server does not evict keys (`maxmemory-policy noeviction`, which a lock needs anyway:
//!   an evicted lock key is a lock given away). The holder's tenure began with the run of the script
//!   that named the next in line as the head; the lock has been held by it ever since (its
//!   lease is still valid), so no release, claim of another, or attempt on a free lock ran in
//!   between, and the next in line, which has not left, is still the head. Its entry key is
//!   alive on the server until at least its last refresh's send instant plus the entry's
//!   lifetime (minus the drift allowance); the release script hands the lock to the head if
//!   its entry is alive, so, if it runs before then, it hands it to that waiter.
//! - **The early lease** is valid until the sooner of the releaser's validity and that entry
//!   bound, and is only given if that leaves at least half the TTL. Until then nobody else can
//!   take the lock: the key holds the releaser's token until the script runs or it expires
//!   (not before the releaser's validity); the script, if it runs before the entry bound, hands
//!   it to this waiter, and otherwise only after the early lease is over; after an expiry only
//!   the queue's first live waiter can take the lock, this one until its entry expires (and a
//!   plain `SET NX`, which the fairness assumption excludes anyway, only after the releaser's
//!   validity).
//! - **The reply settles it.** If it confirms the handoff to this waiter, the lease moves to
//!   the handoff window from the instant before the script was sent (the script set the key's
//!   TTL after that), like a handoff by message. If it says anything else (an assumption above
//!   broken, say an outsider edited the queue), the lease is reported lost at once. If no reply
//!   comes (connection lost), the lease keeps its early bound; a renewal then finds out which.
//! - **Order.** The new holder sends nothing for its lock (release, extend) before the release
//!   that handed it over has its reply (`Tenure::settled`, set when `GivenEarly` is dropped):
//!   by then the script has run on the server, so the new holder's commands follow it on any
//!   connection. Sent earlier, a release could reach the server first (from the new holder's
//!   own socket, which the server may read before the releaser's; or before the releaser's
//!   write at all), find the releaser's token, fail as not held, and leave the lock to expire
//!   with the new holder's token: seen with threads that hold for no time, where a write
//!   merely in time before it was not enough. Safety does not depend on it: an extend that
//!   overtook the script anyway (the renewer's, on the shared connection) would find the
//!   releaser's token and report the lease lost. The test
//!   `a_lock_handed_over_early_is_released_only_after_the_release_that_handed_it` holds the
//!   releasing thread between its handoff and its write and sees the new holder's release
//!   wait.
//!
//! The test `the_next_waiter_of_the_same_client_is_handed_the_lock_before_the_release_runs`
//! pauses the server's writes: the waiter holds the lock while the key still holds the
//! releaser's token, its validity is within both server-side bounds (the key's PTTL and its
//! entry's), and the reply then moves it to the window; `an_early_handoff_the_release_contradicts_is_reported_lost`
//! removes the waiter from the queue behind the client's back and sees the lease reported lost.
//!
//! Without a subscriber connection (notifications off, or a client built from a connection) a
//! waiter finds the handoff at its next attempt, every third of the window.
//!
//! [`LockOptions::fair`]: crate::LockOptions::fair
//! [`fair_queue_key`]: crate::redis::fair_queue_key
//! [`fair_entry_key`]: crate::redis::fair_entry_key

// By part: `waiter` (one waiter's attempts and its leaving the queue), `acquire` (the fair
// try_acquire, and the wait as a provider of the acquisition engine), `pass_on` (running the
// release and leave scripts) and `reply` (what they did), `early` (early handoff), `held` (a
// held fair lock's release).
mod acquire;
mod early;
mod held;
mod pass_on;
mod reply;
mod waiter;

use std::time::Duration;

pub use crate::redis::scripts::fair_scripts;

/// How long a waiter's queue entry lives without a refresh: the TTL, within 1 s ..= 10 s. A
/// waiter refreshes it every third of the handoff window, so only a waiter
/// that stopped (crashed, or paused that long) loses its place.
pub fn queue_entry_ttl(ttl: Duration) -> Duration {
    ttl.clamp(Duration::from_secs(1), Duration::from_secs(10))
}

/// How long a handed-off lock waits for its new holder before it expires: the TTL, at most
/// the [entry lifetime](queue_entry_ttl). A live waiter takes it within milliseconds (from the
/// message, or at its next attempt); a crashed one costs at most this.
pub fn handoff_window(ttl: Duration) -> Duration {
    ttl.min(queue_entry_ttl(ttl))
}
