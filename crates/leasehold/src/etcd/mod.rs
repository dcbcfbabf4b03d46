//! [`EtcdClient`]: locks on etcd v3 (`etcd://` and `etcds://` URLs, cargo feature `etcd`).
//!
//! # Design
//!
//! **Queue of entries.** Lock `K` is a queue of etcd keys `K + "\0" + token`, one per holder or
//! waiter, each storing its token. The *holder* is the entry under the prefix `K\0` with the
//! lowest `create_revision` (the recipe of etcd's own `concurrency.Mutex`). Keys containing a
//! NUL byte are refused, so the prefixes of two lock names never overlap. Semaphores,
//! read-write locks and elections are queues too, under prefixes that start with a NUL (so
//! they never overlap a lock's): their layout, recipes and guarantees are in the `sync`
//! submodule's docs (`src/etcd/sync/mod.rs`); they wait, renew and report loss as locks do.
//!
//! * [`Locker::try_acquire`](crate::Locker::try_acquire) is one transaction: `If(no key under K\0) Then(Put(entry))`.
//!   It writes nothing when the lock is busy (no cleanup round trip, and it cannot jump the
//!   queue: a non-empty prefix always has a holder, its first entry).
//! * A waiting [`Locker::acquire`](crate::Locker::acquire) puts its entry (`If(CreateRevision(entry) == 0)`, so an
//!   ambiguous attempt can be repeated), then reads, in one transaction at revision `R`, its own
//!   entry and the entry just ahead of it (greatest `create_revision` below its own). If there
//!   is none, it holds the lock. Otherwise it watches *that one key* for deletion, from
//!   revision `R + 1` (a deletion after the read has a higher revision, so it cannot be
//!   missed), and reads again. No polling; each release wakes exactly the next waiter (FIFO,
//!   no thundering herd). At the deadline, or when the future is dropped, its entry is deleted
//!   (token-checked); if etcd does not confirm that delete, the session deletes the entry at
//!   its next renewals (see *Orphans* below).
//! * **Fencing number** = the entry's `create_revision`: issued atomically with the write that
//!   enqueues it, and strictly increasing across successive holders of a key (see below).
//! * [`Locker::release`](crate::Locker::release) / [`Locker::extend`](crate::Locker::extend) are token-checked transactions
//!   (`If(Value(entry) == token)`, or `CreateRevision(entry) == fencing` for a guard, which
//!   knows it); they need no in-memory state, so another process (the CLI) can call them with
//!   the key and the token. `extend` grants a new lease and moves the entry onto it with a
//!   guarded put (a put keeps `create_revision`, so the fencing number and the queue position
//!   stay). [`Locker::inspect`](crate::Locker::inspect) reads the first entry and its lease's remaining TTL.
//!
//! **[`min_hold`](LockOptions::min_hold).** A lock taken with it also gets a lease of
//! `min_hold` (whole seconds, rounded up), granted once the lock is ours, so it ends no sooner
//! than `min_hold` after the grant by etcd's clock; the guard's release moves the entry onto
//! it (guarded by the create revision) instead of deleting it, unless etcd says the lease is
//! gone (the hold is over). A move that gets no answer (or another error) is repeated in the
//! background, never replaced by a delete, until etcd answers or the hold is over by the
//! client's clock; the entry stays on its lease meanwhile (a session's is kept from retiring).
//! Before, that release deleted the entry, dropping the hold (issue 30, finding F3; *test:*
//! `a_min_hold_release_etcd_did_not_answer_keeps_the_hold`). A release by token deletes at
//! once (docs/guarantees.md §18).
//!
//! **Leases and sessions.** Every entry is attached to an etcd lease, so a crashed client's
//! entries disappear after its TTL. The client keeps one *session* per TTL in whole seconds
//! (rounded up; etcd raises it to its minimum, about 2 s with default election settings, and
//! the TTL etcd returns is the one used): one etcd lease, created lazily and shared by every
//! auto-extended lock and every waiting entry of that TTL. So 10 000 auto-extended locks of one
//! TTL cost one keep-alive per renewal interval, not 10 000.
//! Each tick (every TTL/3, or the smallest [`LockOptions::renew_every`] of its locks) the
//! session
//! 1. sends a keep-alive; the reply moves the validity of every lock on the session to
//!    `send time + granted TTL - clock_drift`, the send time being that of the request the
//!    reply answers;
//! 2. checks, in one transaction per 64 locks, that every entry still exists with its
//!    `create_revision` *and on this lease* (`Else` gets the entries, which says which ones
//!    failed); those leases are declared lost ([`LossReason::NotHeld`]).
//!
//! **One keep-alive stream per client.** The keep-alives of every session, whatever its TTL,
//! go out on *one* gRPC `LeaseKeepAlive` stream per client (shared by its clones), opened by
//! the first keep-alive and kept until the client and its sessions are gone. etcd answers a
//! stream's requests one at a time, in order, each reply naming its lease; so each request is
//! queued, with its send time, under its lease id, and a reply answers the oldest request of
//! its lease still queued *on that stream*: two sessions' ticks can interleave freely, and a
//! session's validity only moves on a reply to a request it sent, from that request's send
//! time (and only forward). When the stream ends (a member killed, a leader change, a
//! `require_leader` refusal), or stays silent for a whole keep-alive wait, it is closed: every
//! request still waiting on it fails (its session retries, every interval/8), and the next
//! keep-alive opens *one* new stream (a mutex makes opening exclusive), on whichever member the
//! channel picks. Replies on the new stream answer only requests sent on it, so nothing sent
//! on the old one is ever counted again. A request whose session stopped waiting while the
//! stream lived on (it was slow, not silent) stays queued until its late reply arrives, which
//! is dropped: the replies after it still meet their own requests.
//!
//! **Orphans.** An entry that must go (a guard's release, a waiter that gave up, an attempt
//! that found the lock busy, a lock declared lost) is deleted at once, and a few times more in
//! the background if etcd refuses. If etcd still has not confirmed the delete and the entry
//! may ride on a session's lease, the session keeps it (its key, and its token or its
//! revision) and deletes it after each keep-alive etcd answers, until etcd confirms; retiring
//! revokes the lease, which deletes what is left. Before, such an entry rode on the session's
//! lease, kept alive for the client's other locks of that TTL: held by nobody, for as long as
//! the client held anything else of that TTL (issue 30, finding L1; *tests:*
//! `a_release_etcd_refused_is_cleaned_up_while_the_session_lives`, a single member stopped
//! during a release and started again with its data, and the unit test
//! `orphans_are_deleted_by_revision_and_lease_or_by_token`). An entry on a lease of its own
//! dies with that lease (nobody keeps it alive).
//!
//! If keep-alives fail until the session's validity is over, every lock on it is declared lost
//! ([`LossReason::Expired`]; [`LossReason::NotHeld`] when etcd answers that the lease is gone),
//! the session ends (its lease is revoked, best effort) and later acquisitions open a new one.
//! An idle session (no lock, no waiter for one interval) revokes its lease and ends.
//! A lock acquired without [`auto_extend`](LockOptions::auto_extend) gets a lease of its own
//! (no keep-alive), so it expires one TTL after it was granted unless extended; a waiting
//! acquisition enqueues on the session and moves its entry onto its own lease once it holds
//! the lock. Once its release is confirmed, that lease carries the next such lock of the same
//! TTL while it is fresh (under a second, and under a twentieth of its TTL, since its grant),
//! the next lock's validity counted from the same grant (the `spare` submodule: a lock costs
//! no grant of its own). At [`max_hold`](LockOptions::max_hold) an auto-extended lock is moved onto a
//! lease of its own too, which then expires (the guard reports the loss). A guard's
//! [`extend(ttl)`](LockGuard::extend) moves an auto-extended lock onto the session of `ttl` (it
//! stays auto-extended, with that TTL), and gives any other lock a fresh lease of `ttl`,
//! revoking its old one (its own).
//!
//! **A move with an unknown outcome** (no reply: etcd may have applied it) is sent again until
//! etcd answers, while the lock's validity lasts; the move is idempotent (a put guarded by the
//! entry's `create_revision`, which a put keeps), so the answer settles where the entry is.
//! Until then the lock is believed no longer than the sooner of the two leases keeps it, no
//! keep-alive raises that, and neither lease is revoked (an auto-extended lock's two sessions
//! are kept from retiring); unsettled when the validity runs out (or the call is dropped), an
//! auto-extended lock is declared lost and its entry deleted. A `max_hold` move with an
//! unknown outcome caps the lock's validity at the new lease's until the next tick settles it.
//! *Tests:* `an_ambiguous_move_never_leaves_a_deleted_lock_believed_held` (issue 22, finding
//! 2: the lock used to go back to its old session while its entry rode on the new session's
//! lease, which was revoked when that session went idle),
//! `an_unanswered_shortening_move_is_believed_no_longer_than_its_ttl`,
//! `a_dropped_move_leaves_no_lock_believed_held`, and the unit test
//! `a_ceiling_bounds_the_renewals_of_a_lock` (the `max_hold` case).
//!
//! # Guarantees, and why they hold
//!
//! 1. **Mutual exclusion while valid.** A lock is granted only when a linearizable read (a
//!    transaction) at revision `R` shows our entry first under `K\0`. Revisions only grow, so
//!    every entry written later has a higher `create_revision` and sorts after ours: while our
//!    entry exists, nobody else is first. Our entry exists until it is deleted (our release,
//!    an outsider) or its lease expires. The lease's validity is counted from an instant taken
//!    *before* the grant (or the keep-alive) was sent: etcd's leader sets the expiry to its
//!    receipt time plus the TTL, which is later, and a new leader only pushes expiries further
//!    (when elected it restarts every lease from its full TTL, or from a checkpointed remaining
//!    TTL, plus an election's worth; never earlier). A lock on a session gets the session's
//!    validity (from its last keep-alive), not one counted from its own acquisition. On the
//!    shared keep-alive stream a reply is matched to the very request it answers (same lease,
//!    same stream, oldest first: etcd answers in order), so the instant is that request's send
//!    time, never another session's or an older stream's. So until `valid_until` the entry is
//!    there unless something outside deleted it, assuming the leader's clock does not run more
//!    than 1% fast ([`clock_drift`]). *Tests:* `etcd_backend.rs`:
//!    `acquire_busy_release_fencing_and_token_checks` (a second client is refused; the validity
//!    never ends after etcd's expiry), `auto_extend_outlives_the_ttl_and_plain_locks_expire`
//!    (the same, at every renewal), `cluster_keeps_leases_through_leader_loss_and_expires_a_stalled_holder`
//!    (another client gets the lock only once the stalled holder's validity is over, with a
//!    higher number); the unit tests `keep_alive_replies_meet_their_own_requests` (routing by
//!    lease, interleaved requests, a late reply) and `a_session_is_renewed_only_forward_and_not_revived`.
//! 2. **Token-checked release and extend.** Both are transactions guarded by the entry's value
//!    (our token) or its `create_revision`; a later holder's entry has another name and
//!    another revision, so it is never touched. *Test:* `acquire_busy_release_fencing_and_token_checks`.
//! 3. **Loss is reported.** An auto-extended lock whose entry vanished (or moved off the
//!    session lease) is declared lost at the next tick's check; one whose keep-alives fail is
//!    declared lost when its validity runs out. A loss is final: a session whose validity
//!    lapsed ends even if etcd answers again (its locks are not revived: a reply to a request
//!    sent after the validity ran out ends the session too), and the entry of a
//!    lock declared lost while its session lives on is deleted (by revision and lease), so it
//!    cannot stay held, kept alive, with nobody believing they hold it (retried after each
//!    renewal until etcd confirms: an orphan). *Tests:*
//!    the conformance suite's loss check (`tests/conformance`, entry deleted), `loss_is_reported_when_etcd_stalls_past_the_ttl`
//!    (which also takes the lock again once etcd is back), and the unit test
//!    `orphans_are_deleted_by_revision_and_lease_or_by_token`.
//! 4. **Fencing numbers strictly increase**, cluster-wide (etcd revisions), with each
//!    acquisition of a key: holders follow `create_revision` order (the holder is always the
//!    lowest entry, and entries are only added with higher revisions), so each holder's number
//!    exceeds its predecessor's. *Tests:* `acquire_busy_release_fencing_and_token_checks`,
//!    `waiting_is_fifo_and_wakes_only_the_head`.
//! 5. **Bad keys are refused before any round trip** (empty, longer than
//!    [`MAX_KEY_LEN`](crate::MAX_KEY_LEN), or containing NUL). *Test:* the conformance suite's bad-key check.
//!
//! FIFO fairness and cancellation are checked by `waiting_is_fifo_and_wakes_only_the_head` and
//! `a_cancelled_waiter_leaves_nothing_behind`; auto-extension and expiry by
//! `auto_extend_outlives_the_ttl_and_plain_locks_expire`; the one keep-alive stream by
//! `one_keep_alive_stream_carries_every_ttl` (two TTLs, two leases, and etcd's own metrics
//! count one `LeaseKeepAlive` stream; after a member restart, one open stream again and no
//! loss).
//!
//! # Assumptions and limits
//!
//! * Nobody but leasehold writes keys under `K\0`. An outsider deleting an entry is detected
//!   (guarantee 3) but, as on every backend, cannot be prevented.
//! * A paused *holder* process cannot notice anything; fencing is what protects the resource.
//! * Lease TTLs are whole seconds; the validity uses the TTL etcd granted, not the one asked
//!   for. [`LockOptions::replica_ack`] is refused ([`Error::Unsupported`]): every etcd write is
//!   already committed by a majority before it is acknowledged.
//! * `extend` from another process (no in-memory state) moves the entry onto a fresh lease
//!   and leaves the old lease to expire on its own (it may be a session lease shared with
//!   other locks, so it is never revoked); an auto-extended guard of that lock then reports
//!   the lock lost, since its session no longer keeps it alive.
//! * Each waiting acquisition opens its own watch stream while it waits. A waiter whose
//!   session is lost queues again, at the back.
//! * The keep-alive stream is shared, so its trouble is shared: while it is stuck, every
//!   session's keep-alives fail, until the first session whose keep-alive wait (its interval,
//!   at least 250 ms, at most the response timeout) passes in silence replaces it; a request
//!   still waiting on the old stream then fails and is retried on the new one. etcd serves a
//!   stream's requests one after another, so one slow renewal (a follower forwarding to a
//!   leader) delays the others on it. An opening that gets no answer within the opener's wait
//!   is abandoned (etcd then counts it as started and ended); at most one stream is open at a
//!   time. The stream stays open while the client or any of its sessions lives, even with no
//!   lock (as etcd's own Go client does).
//! * `etcd://` is plain `http` to the members; `etcds://` is TLS (rustls, ring) to every member,
//!   with [`ClientOptions::tls_ca_file`](crate::ClientOptions::tls_ca_file) (else the system's
//!   roots) and, for mutual TLS, `tls_cert_file` and `tls_key_file`.
//! * The gRPC channel balances over every member of the URL and keeps a dead one in its set;
//!   a request refused by it (never sent) is sent again, a few times, to reach a live one.

mod acquire;
mod client;
mod error;
mod held;
mod history;
mod keep_alive;
mod keys;
mod renewal;
mod request;
mod session;
mod spare;
mod sync;
mod table;
#[cfg(test)]
mod tests;
mod url;

pub use client::EtcdClient;

use std::sync::{Mutex, MutexGuard};

// Named by the links of the module docs above.
#[cfg(doc)]
use crate::core::error::{Error, LossReason};
#[cfg(doc)]
use crate::core::guard::{LockGuard, clock_drift};
#[cfg(doc)]
use crate::core::options::LockOptions;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}
