//! [`EtcdClient`]: locks on etcd v3 (`etcd://` URLs, cargo feature `etcd`).
//!
//! # Design
//!
//! **Queue of entries.** Lock `K` is a queue of etcd keys `K + "\0" + token`, one per holder or
//! waiter, each storing its token. The *holder* is the entry under the prefix `K\0` with the
//! lowest `create_revision` (the recipe of etcd's own `concurrency.Mutex`). Keys containing a
//! NUL byte are refused, so the prefixes of two lock names never overlap.
//!
//! * [`EtcdClient::try_acquire`] is one transaction: `If(no key under K\0) Then(Put(entry))`.
//!   It writes nothing when the lock is busy (no cleanup round trip, and it cannot jump the
//!   queue: a non-empty prefix always has a holder, its first entry).
//! * A waiting [`EtcdClient::acquire`] puts its entry (`If(CreateRevision(entry) == 0)`, so an
//!   ambiguous attempt can be repeated), then reads, in one transaction at revision `R`, its own
//!   entry and the entry just ahead of it (greatest `create_revision` below its own). If there
//!   is none, it holds the lock. Otherwise it watches *that one key* for deletion, from
//!   revision `R + 1` (a deletion after the read has a higher revision, so it cannot be
//!   missed), and reads again. No polling; each release wakes exactly the next waiter (FIFO,
//!   no thundering herd). At the deadline, or when the future is dropped, its entry is deleted
//!   (token-checked); if that delete fails, the entry dies with its lease.
//! * **Fencing number** = the entry's `create_revision`: issued atomically with the write that
//!   enqueues it, and strictly increasing across successive holders of a key (see below).
//! * [`EtcdClient::release`] / [`EtcdClient::extend`] are token-checked transactions
//!   (`If(Value(entry) == token)`, or `CreateRevision(entry) == fencing` for a guard, which
//!   knows it); they need no in-memory state, so another process (the CLI) can call them with
//!   the key and the token. `extend` grants a new lease and moves the entry onto it with a
//!   guarded put (a put keeps `create_revision`, so the fencing number and the queue position
//!   stay). [`EtcdClient::inspect`] reads the first entry and its lease's remaining TTL.
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
//! If keep-alives fail until the session's validity is over, every lock on it is declared lost
//! ([`LossReason::Expired`]; [`LossReason::NotHeld`] when etcd answers that the lease is gone),
//! the session ends (its lease is revoked, best effort) and later acquisitions open a new one.
//! An idle session (no lock, no waiter for one interval) revokes its lease and ends.
//! A lock acquired without [`auto_extend`](LockOptions::auto_extend) gets a lease of its own
//! (no keep-alive), so it expires one TTL after it was granted unless extended; a waiting
//! acquisition enqueues on the session and moves its entry onto its own lease once it holds
//! the lock. At [`max_hold`](LockOptions::max_hold) an auto-extended lock is moved onto a
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
//!    cannot stay held, kept alive, with nobody believing they hold it. *Tests:*
//!    `loss_is_reported_when_the_entry_is_deleted`, `loss_is_reported_when_etcd_stalls_past_the_ttl`
//!    (which also takes the lock again once etcd is back), and the unit test
//!    `lost_entries_are_deleted_by_revision_and_lease`.
//! 4. **Fencing numbers strictly increase**, cluster-wide (etcd revisions), with each
//!    acquisition of a key: holders follow `create_revision` order (the holder is always the
//!    lowest entry, and entries are only added with higher revisions), so each holder's number
//!    exceeds its predecessor's. *Tests:* `acquire_busy_release_fencing_and_token_checks`,
//!    `waiting_is_fifo_and_wakes_only_the_head`.
//! 5. **Bad keys are refused before any round trip** (empty, longer than
//!    [`MAX_KEY_LEN`](crate::MAX_KEY_LEN), or containing NUL). *Test:* `bad_input_and_connection_errors`.
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
//! * Plain `http` to the members: no TLS (etcd-client is built without its TLS features).
//! * The gRPC channel balances over every member of the URL and keeps a dead one in its set;
//!   a request refused by it (never sent) is sent again, a few times, to reach a live one.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::{Duration, Instant};

use ec::{
    Compare, CompareOp, EventType, GetOptions, PutOptions, SortOrder, SortTarget, Txn, TxnOp,
    TxnOpResponse, WatchFilterType, WatchOptions,
};
use etcd_client as ec;
use futures_util::future::BoxFuture;
use tokio_util::sync::CancellationToken;

use crate::backend::HeldLock;
use crate::client::{LockState, TryAcquire};
use crate::error::{Error, Operation, Result};
use crate::guard::{Lease, LockGuard, LossReason, clock_drift};
use crate::options::{ClientOptions, LockOptions, ttl_millis};
use crate::token::{LockToken, validate_key};

/// etcd's client port, when the URL names none.
const DEFAULT_PORT: u16 = 2379;
/// Locks checked per transaction: two compares each, within etcd's default `--max-txn-ops`
/// of 128.
const CHECK_BATCH: usize = 64;
/// The shortest renewal interval a session uses, whatever the options ask.
const MIN_INTERVAL: Duration = Duration::from_millis(100);
/// HTTP/2 keep-alive pings on busy connections (etcd refuses pings more often than every 5 s).
const H2_PING_INTERVAL: Duration = Duration::from_secs(10);
/// Tries of a background delete of an abandoned entry before it is left to its lease.
const CLEANUP_TRIES: u32 = 5;

/// A lock client on an etcd v3 cluster.
///
/// Cheap to clone (clones share the gRPC connections and the lease sessions). See the
/// [module docs](self) for the design and what it guarantees.
#[derive(Clone)]
pub struct EtcdClient {
    inner: Arc<Inner>,
}

struct Inner {
    etcd: ec::Client,
    endpoints: Vec<String>,
    user: Option<String>,
    response_timeout: Duration,
    sessions: Arc<Sessions>,
    /// The one keep-alive stream of the client (all clones, all sessions).
    keep_alives: Arc<KeepAlives>,
}

/// The client's sessions by TTL in whole seconds. An async mutex: creating a session (a lease
/// grant) happens under it, so two acquisitions never open two sessions of one TTL.
type Sessions = tokio::sync::Mutex<HashMap<i64, Arc<Session>>>;

impl std::fmt::Debug for EtcdClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdClient")
            .field("endpoints", &self.inner.endpoints)
            .field("user", &self.inner.user)
            .field("response_timeout", &self.inner.response_timeout)
            .finish_non_exhaustive()
    }
}

/// A parsed `etcd://` URL.
#[derive(Debug, PartialEq, Eq)]
struct EtcdUrl {
    endpoints: Vec<String>,
    user: Option<(String, String)>,
}

fn parse_url(url: &str) -> Result<EtcdUrl> {
    let bad = |why: String| {
        Error::invalid(
            "url",
            format!("{why} (expected etcd://[user:password@]host:port[,host:port...])"),
        )
    };
    let Some((scheme, rest)) = url.split_once("://") else {
        return Err(bad("no scheme".into()));
    };
    if !scheme.eq_ignore_ascii_case("etcd") {
        return Err(bad(format!("scheme {scheme:?} is not etcd")));
    }
    let (auth, hosts, path, fragment) = crate::endpoint::split_multi_host(rest);
    if path.is_some_and(|p| !p.is_empty()) || fragment.is_some() {
        return Err(bad("an etcd URL has no path or fragment".into()));
    }
    let hosts = crate::endpoint::parse_hosts(hosts, DEFAULT_PORT).map_err(bad)?;
    let user = match auth {
        None => None,
        Some(auth) => {
            let (name, password) = auth.split_once(':').unwrap_or((auth, ""));
            let name = crate::endpoint::percent_decode(name);
            if name.is_empty() {
                return Err(bad("empty user name".into()));
            }
            Some((name, crate::endpoint::percent_decode(password)))
        }
    };
    Ok(EtcdUrl {
        endpoints: hosts.into_iter().map(|h| format!("http://{h}")).collect(),
        user,
    })
}

/// `validate_key`, and no NUL (the separator between the key and the token).
fn check_key(key: &str) -> Result<()> {
    validate_key(key)?;
    if key.contains('\0') {
        return Err(Error::invalid(
            "key",
            "an etcd lock key cannot contain a NUL byte (it separates the key from the token)",
        ));
    }
    Ok(())
}

/// The TTL in whole seconds (rounded up), after the library's bounds check.
fn ttl_secs(ttl: Duration) -> Result<i64> {
    let ms = ttl_millis(ttl)?;
    Ok(ms.div_ceil(1000).max(1) as i64)
}

/// `K\0`: the prefix of lock `K`'s entries.
fn queue_prefix(key: &str) -> Vec<u8> {
    let mut p = Vec::with_capacity(key.len() + 1);
    p.extend_from_slice(key.as_bytes());
    p.push(0);
    p
}

/// `K\0token`: one holder's or waiter's entry.
fn entry_key(key: &str, token: &LockToken) -> Vec<u8> {
    let mut e = queue_prefix(key);
    e.extend_from_slice(token.expose().as_bytes());
    e
}

fn header_revision(resp: &ec::TxnResponse) -> Result<i64> {
    resp.header()
        .map(|h| h.revision())
        .ok_or_else(|| Error::UnexpectedReply {
            op: Operation::Acquire,
            detail: "transaction reply without a header".into(),
        })
}

/// The key-values of the `index`-th operation of a transaction reply, if it was a get.
fn txn_get(resp: &ec::TxnResponse, index: usize) -> Vec<ec::KeyValue> {
    match resp.op_responses().into_iter().nth(index) {
        Some(TxnOpResponse::Get(mut g)) => g.take_kvs(),
        _ => Vec::new(),
    }
}

// ----------------------------------------------------------------------------------------
// Errors

fn timeout_error(op: Operation, ambiguous: bool) -> Error {
    Error::Connection {
        op,
        ambiguous,
        source: std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            "no reply from etcd within the timeout",
        )
        .into(),
    }
}

fn session_lost(op: Operation) -> Error {
    Error::Connection {
        op,
        ambiguous: false,
        source: "the etcd lease session ended (keep-alives failed) while acquiring".into(),
    }
}

/// Whether the error text says the request never left (the connection could not be made).
fn never_sent(err: &(dyn std::error::Error + 'static)) -> bool {
    let mut cur = Some(err);
    while let Some(e) = cur {
        let text = e.to_string().to_ascii_lowercase();
        if text.contains("connection refused")
            || text.contains("tcp connect error")
            || text.contains("error trying to connect")
        {
            return true;
        }
        cur = e.source();
    }
    false
}

fn is_auth_failure(message: &str) -> bool {
    [
        "authentication failed",
        "invalid auth token",
        "user name is empty",
        "authentication is not enabled",
        "invalid user ID or password",
    ]
    .iter()
    .any(|m| message.contains(m))
}

/// Classifies an etcd client error. `write`: whether the request may have changed something
/// (then a lost reply is ambiguous).
/// etcd refused a write naming a lease that no longer exists.
fn lease_gone(e: &Error) -> bool {
    matches!(e, Error::Server { source, .. } if source.to_string().contains("requested lease not found"))
}

fn from_etcd(op: Operation, write: bool, err: ec::Error) -> Error {
    const CANCELLED: i32 = 1;
    const UNKNOWN: i32 = 2;
    const INVALID_ARGUMENT: i32 = 3;
    const DEADLINE_EXCEEDED: i32 = 4;
    const PERMISSION_DENIED: i32 = 7;
    const FAILED_PRECONDITION: i32 = 9;
    const UNAVAILABLE: i32 = 14;
    const UNAUTHENTICATED: i32 = 16;
    let ambiguous = write && op != Operation::Connect && !never_sent(&err);
    match &err {
        ec::Error::GRpcStatus(status) => {
            let code = i32::from(status.code());
            let message = status.message();
            if code == UNAUTHENTICATED
                || (matches!(code, INVALID_ARGUMENT | FAILED_PRECONDITION)
                    && is_auth_failure(message))
            {
                return Error::Authentication { source: err.into() };
            }
            if code == PERMISSION_DENIED {
                return Error::PermissionDenied {
                    op,
                    source: err.into(),
                };
            }
            // tonic reports a connection reset or broken pipe mid-call (a member killed) as
            // Unknown "transport error": a broken connection, not a server's answer.
            if matches!(code, UNAVAILABLE | DEADLINE_EXCEEDED | CANCELLED)
                || (code == UNKNOWN && message.contains("transport error"))
            {
                return Error::Connection {
                    op,
                    ambiguous,
                    source: err.into(),
                };
            }
            Error::Server {
                op,
                source: err.into(),
            }
        }
        ec::Error::TransportError(_)
        | ec::Error::IoError(_)
        | ec::Error::LeaseKeepAliveError(_)
        | ec::Error::WatchError(_)
        | ec::Error::EndpointError(_) => Error::Connection {
            op,
            ambiguous,
            source: err.into(),
        },
        ec::Error::InvalidArgs(_) | ec::Error::InvalidUri(_) => {
            Error::invalid("url", err.to_string())
        }
        _ => Error::Server {
            op,
            source: err.into(),
        },
    }
}

/// Whether a waiting acquisition rides the error out (until its deadline).
fn transient(e: &Error) -> bool {
    matches!(e, Error::Connection { .. })
}

/// How many times a request that never left is sent: the channel balances over the members
/// and keeps a dead one in its set, so a request can land on it; a few more tries reach a live
/// one (with one endpoint, a refused connection fails fast).
fn retries_for(endpoints: usize) -> usize {
    2 * endpoints + 2
}

/// Sends a request; if it failed before leaving (the connection was refused), sends it again,
/// up to `tries` times in all: safe for writes too, since nothing reached a server. `None` when
/// `timeout` passed.
async fn send_unsent_again<T, F, Fut>(
    timeout: Duration,
    tries: usize,
    mut send: F,
) -> Option<std::result::Result<T, ec::Error>>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = std::result::Result<T, ec::Error>>,
{
    let deadline = Instant::now() + timeout;
    let mut tried = 0;
    loop {
        tried += 1;
        let result = tokio::time::timeout_at(deadline.into(), send())
            .await
            .ok()?;
        match result {
            Err(e) if never_sent(&e) && tried < tries => {
                tracing::debug!(error = %e, "etcd request not sent (connection refused); again");
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            other => return Some(other),
        }
    }
}

// ----------------------------------------------------------------------------------------
// Sessions

/// One etcd lease, shared by the client's auto-extended locks and waiting entries of one TTL,
/// and kept alive by its own task through the client's one keep-alive stream
/// ([`KeepAlives`]).
struct Session {
    /// The TTL asked for, in seconds (the key in [`Sessions`]).
    secs: i64,
    /// The etcd lease.
    id: i64,
    /// Waiting acquisitions using it (changed under the [`Sessions`] lock when raised).
    waiters: AtomicUsize,
    state: Mutex<SessionState>,
    /// Cancelled when the session ended (lost, or retired when idle).
    dead: CancellationToken,
}

struct SessionState {
    /// When the grant, or the keep-alive whose reply was applied last, was *sent*.
    renewed_at: Instant,
    /// The TTL etcd granted.
    granted: Duration,
    interval: Duration,
    /// Held, auto-extended locks by their entry's create revision.
    locks: HashMap<i64, Tracked>,
}

/// An auto-extended lock on a session.
struct Tracked {
    entry: Vec<u8>,
    lease: Lease,
    secs: i64,
    stop_at: Option<Instant>,
    /// A bound on the validity renewals may give: set when a `max_hold` move onto a lease of
    /// its own got no answer, so the entry may ride on that lease, which is not kept alive.
    /// *Test:* `a_ceiling_bounds_the_renewals_of_a_lock`.
    ceiling: Option<Instant>,
    attach: Arc<Mutex<Attach>>,
}

/// The lease a held lock's entry lives on.
#[derive(Clone, Debug)]
enum Attach {
    /// A session's shared lease (auto-extended).
    Session(Weak<Session>),
    /// A lease of its own, which only this entry uses.
    Dedicated(i64),
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Session {
    fn state(&self) -> MutexGuard<'_, SessionState> {
        lock(&self.state)
    }

    fn valid_until(&self) -> Instant {
        let st = self.state();
        st.renewed_at + st.granted.saturating_sub(clock_drift(st.granted))
    }

    fn interval(&self) -> Duration {
        self.state().interval
    }

    fn is_idle(&self) -> bool {
        self.waiters.load(Ordering::SeqCst) == 0 && self.state().locks.is_empty()
    }

    /// Registers a held lock and sets its validity from the session's; `None` if the session
    /// has ended (then the entry is not kept alive).
    fn register(&self, rev: i64, tracked: Tracked) -> Option<Instant> {
        let mut st = self.state();
        if self.dead.is_cancelled() {
            return None;
        }
        let until = st.renewed_at + st.granted.saturating_sub(clock_drift(st.granted));
        tracked.lease.set_valid_until(until);
        st.locks.insert(rev, tracked);
        Some(until)
    }

    fn unregister(&self, rev: i64) -> Option<Tracked> {
        self.state().locks.remove(&rev)
    }

    /// A keep-alive of this session's lease sent at `sent` was answered with `ttl`: every
    /// lock's validity moves to `sent + ttl - drift` (only forward: a reply to an older
    /// request than the last one applied changes nothing). Returns the locks it dropped
    /// because their lease was declared lost meanwhile (by [`Lease::lost`] seeing its validity
    /// run out while a keep-alive was in flight): their entries are still on the lease, which
    /// is kept alive, so they must be deleted. `None` if the session's validity had already
    /// run out when the request was sent (or the session ended): it is not revived.
    fn renewed(&self, sent: Instant, ttl: Duration) -> Option<Vec<(i64, Vec<u8>)>> {
        let mut st = self.state();
        let until = st.renewed_at + st.granted.saturating_sub(clock_drift(st.granted));
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
                    let bound = (sent + ttl.saturating_sub(clock_drift(ttl))).min(ceiling);
                    let seq = t.lease.extend_sent(bound);
                    t.lease.extend_confirmed(seq, bound);
                }
            }
        }
        Some(lost)
    }

    /// Ends the session and declares every lock on it lost.
    fn die(&self, reason: LossReason) {
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
struct SessionRef(Arc<Session>);

impl SessionRef {
    /// Keeps a live `session` from retiring while the returned reference lives. Raised
    /// outside the [`Sessions`] lock: safe while the caller has a lock registered on it (then
    /// it is not idle, so not retiring).
    fn pin(session: &Arc<Session>) -> SessionRef {
        session.waiters.fetch_add(1, Ordering::SeqCst);
        SessionRef(session.clone())
    }
}

impl Drop for SessionRef {
    fn drop(&mut self) {
        self.0.waiters.fetch_sub(1, Ordering::SeqCst);
    }
}

// ----------------------------------------------------------------------------------------
// The keep-alive stream

/// The client's one keep-alive stream: the keep-alives of every session (every TTL) go out on
/// it, and each reply is routed back to the request it answers by its lease id. Opened on
/// first use (by the first keep-alive) and again, once, after it broke or got stuck.
struct KeepAlives {
    etcd: ec::Client,
    /// The current stream. An async mutex: a stream is opened under it, so sessions that find
    /// none at the same time open one, not one each.
    current: tokio::sync::Mutex<Option<Arc<Generation>>>,
    /// Streams opened so far (the number of the current one).
    opened: AtomicU64,
}

/// One opened keep-alive stream. Its replies answer only requests sent on it: a reply never
/// moves a validity with the send time of a request sent on an earlier stream.
struct Generation {
    number: u64,
    state: Mutex<GenerationState>,
    /// Stops the task reading the replies.
    stop: CancellationToken,
}

struct GenerationState {
    /// The stream's request side (each request goes out through a keeper made for its lease
    /// id, sharing this one's sender); `None` once the stream is closed (it ended, got stuck,
    /// or the client is gone), which also ends the request side.
    keeper: Option<ec::LeaseKeeper>,
    /// Requests sent and not answered yet, by lease, oldest first: etcd answers a stream's
    /// requests one at a time, in order (or ends the stream), so a reply for lease `L` answers
    /// the oldest request for `L` still waiting. A request whose sender stopped waiting stays
    /// queued until its (late) reply arrives, which is then dropped, so the replies after it
    /// still meet their own requests.
    waiting: HashMap<i64, VecDeque<Waiting>>,
    /// When the last reply arrived.
    last_reply: Option<Instant>,
}

/// A request sent on a stream: when, and where its reply goes.
struct Waiting {
    sent: Instant,
    reply: tokio::sync::oneshot::Sender<Answer>,
}

/// A reply to one keep-alive request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Answer {
    /// When the request it answers was sent.
    sent: Instant,
    /// The lease's new TTL in seconds; 0 (or less): the lease is gone.
    ttl: i64,
}

enum KeepAliveOutcome {
    /// The request sent at `sent` renewed the lease, to `ttl` (`None`: the TTL it was granted
    /// with, when the reply was read by the stream's opening).
    Renewed {
        sent: Instant,
        ttl: Option<Duration>,
    },
    /// etcd says the lease does not exist (expired or revoked).
    Gone,
    Failed,
}

impl Generation {
    fn new(number: u64, keeper: ec::LeaseKeeper) -> Self {
        Generation {
            number,
            state: Mutex::new(GenerationState {
                keeper: Some(keeper),
                waiting: HashMap::new(),
                last_reply: None,
            }),
            stop: CancellationToken::new(),
        }
    }

    fn is_open(&self) -> bool {
        lock(&self.state).keeper.is_some()
    }

    /// Queues a request for `lease` as sent now: a keeper that sends it on this stream, the
    /// send time, and where its reply will come. `None` if the stream is closed.
    fn enqueue(
        &self,
        lease: i64,
    ) -> Option<(
        ec::LeaseKeeper,
        Instant,
        tokio::sync::oneshot::Receiver<Answer>,
    )> {
        let mut st = lock(&self.state);
        let sender = st.keeper.as_ref()?.sender.clone();
        let (reply, answer) = tokio::sync::oneshot::channel();
        let sent = Instant::now();
        st.waiting
            .entry(lease)
            .or_default()
            .push_back(Waiting { sent, reply });
        Some((ec::LeaseKeeper { id: lease, sender }, sent, answer))
    }

    /// A reply for `lease` arrived: it answers the oldest request for `lease` still waiting.
    fn answer(&self, lease: i64, ttl: i64) {
        let waiting = {
            let mut st = lock(&self.state);
            st.last_reply = Some(Instant::now());
            let queue = st.waiting.get_mut(&lease);
            let first = queue.and_then(|q| q.pop_front());
            if st.waiting.get(&lease).is_some_and(|q| q.is_empty()) {
                st.waiting.remove(&lease);
            }
            first
        };
        match waiting {
            // The sender may have stopped waiting (a late reply): then it is dropped.
            Some(w) => drop(w.reply.send(Answer { sent: w.sent, ttl })),
            None => tracing::debug!(
                lease,
                stream = self.number,
                "unexpected etcd keep-alive reply"
            ),
        }
    }

    /// Whether no reply arrived on the stream since `t`.
    fn silent_since(&self, t: Instant) -> bool {
        lock(&self.state).last_reply.is_none_or(|r| r < t)
    }

    /// Closes the stream: no more requests on it, and every request still waiting fails.
    fn close(&self) {
        let waiting = {
            let mut st = lock(&self.state);
            st.keeper = None;
            std::mem::take(&mut st.waiting)
        };
        drop(waiting);
        self.stop.cancel();
    }
}

impl KeepAlives {
    fn new(etcd: ec::Client) -> Self {
        KeepAlives {
            etcd,
            current: tokio::sync::Mutex::new(None),
            opened: AtomicU64::new(0),
        }
    }

    /// Sends one keep-alive for `lease` and waits (at most `wait`) for its reply, on the
    /// current stream, or on a new one if there is none open.
    async fn keep_alive(&self, lease: i64, wait: Duration) -> KeepAliveOutcome {
        let deadline = tokio::time::Instant::now() + wait;
        let generation = {
            let Ok(mut current) = tokio::time::timeout_at(deadline, self.current.lock()).await
            else {
                return KeepAliveOutcome::Failed;
            };
            match current.as_ref() {
                Some(g) if g.is_open() => g.clone(),
                _ => {
                    *current = None;
                    // Opening the stream sends the first keep-alive (this one) and reads its
                    // reply.
                    let sent = Instant::now();
                    let mut leases = self.etcd.lease_client();
                    return match tokio::time::timeout_at(deadline, leases.keep_alive(lease)).await {
                        Ok(Ok((keeper, replies))) => {
                            let number = self.opened.fetch_add(1, Ordering::SeqCst) + 1;
                            let generation = Arc::new(Generation::new(number, keeper));
                            tokio::spawn(read_replies(generation.clone(), replies));
                            *current = Some(generation);
                            tracing::debug!(stream = number, "etcd keep-alive stream opened");
                            KeepAliveOutcome::Renewed { sent, ttl: None }
                        }
                        Ok(Err(ec::Error::LeaseKeepAliveError(e))) if e.contains("not found") => {
                            KeepAliveOutcome::Gone
                        }
                        Ok(Err(e)) => {
                            tracing::debug!(lease, error = %e, "etcd keep-alive stream failed to open");
                            KeepAliveOutcome::Failed
                        }
                        Err(_) => KeepAliveOutcome::Failed,
                    };
                }
            }
        };
        let Some((mut keeper, sent, answer)) = generation.enqueue(lease) else {
            return KeepAliveOutcome::Failed;
        };
        if !matches!(
            tokio::time::timeout_at(deadline, keeper.keep_alive()).await,
            Ok(Ok(()))
        ) {
            // The request half is gone (the stream ended) or stuck.
            generation.close();
            return KeepAliveOutcome::Failed;
        }
        match tokio::time::timeout_at(deadline, answer).await {
            Ok(Ok(a)) if a.ttl > 0 => KeepAliveOutcome::Renewed {
                sent: a.sent,
                ttl: Some(Duration::from_secs(a.ttl as u64)),
            },
            Ok(Ok(_)) => KeepAliveOutcome::Gone,
            // The stream ended (or was closed) before answering.
            Ok(Err(_)) => KeepAliveOutcome::Failed,
            Err(_) => {
                // Nothing at all came back since the request left: the stream is stuck (a
                // frozen member, a lost connection); the next keep-alive opens another. If
                // other replies did come, it is only slow: the reply, when it comes, is dropped.
                if generation.silent_since(sent) {
                    tracing::debug!(
                        stream = generation.number,
                        "etcd keep-alive stream silent; replacing it"
                    );
                    generation.close();
                }
                KeepAliveOutcome::Failed
            }
        }
    }
}

impl Drop for KeepAlives {
    fn drop(&mut self) {
        if let Some(g) = self.current.get_mut().take() {
            g.close();
        }
    }
}

/// Reads a stream's replies and routes each to its request, until the stream ends or is
/// closed.
async fn read_replies(generation: Arc<Generation>, mut replies: ec::LeaseKeepAliveStream) {
    loop {
        let message = tokio::select! {
            m = replies.message() => m,
            _ = generation.stop.cancelled() => break,
        };
        match message {
            Ok(Some(reply)) => generation.answer(reply.id(), reply.ttl()),
            Ok(None) => {
                tracing::debug!(stream = generation.number, "etcd keep-alive stream ended");
                break;
            }
            Err(e) => {
                tracing::debug!(stream = generation.number, error = %e, "etcd keep-alive stream failed");
                break;
            }
        }
    }
    generation.close();
}

/// One session's keep-alive task (its keep-alives go out on the client's one stream). Runs
/// until the session is lost or retired.
async fn run_session(
    etcd: ec::Client,
    keep_alives: Arc<KeepAlives>,
    session: Arc<Session>,
    sessions: Arc<Sessions>,
    response_timeout: Duration,
) {
    // The validity lapsed before a keep-alive that could renew it was sent: the locks may have
    // been lost meanwhile (and their guards may have said so). Not revived: the session ends.
    let lapsed = || async {
        tracing::warn!(
            lease = session.id,
            "no etcd keep-alive succeeded within the lease's TTL; its locks are lost"
        );
        end_session(&sessions, &session, LossReason::Expired).await;
        revoke_in_background(&etcd, session.id, response_timeout);
    };
    let mut next = {
        let st = session.state();
        st.renewed_at + st.interval
    };
    let mut idle_since: Option<Instant> = None;
    loop {
        tokio::select! {
            _ = tokio::time::sleep_until(next.into()) => {}
            _ = session.dead.cancelled() => return,
        }
        let interval = session.interval();
        let now = Instant::now();
        if session.is_idle() {
            let since = *idle_since.get_or_insert(now);
            if now.duration_since(since) >= interval && retire(&sessions, &session).await {
                revoke_in_background(&etcd, session.id, response_timeout);
                return;
            }
        } else {
            idle_since = None;
        }
        if Instant::now() >= session.valid_until() {
            lapsed().await;
            return;
        }
        let wait = response_timeout.min(interval.max(Duration::from_millis(250)));
        match keep_alives.keep_alive(session.id, wait).await {
            KeepAliveOutcome::Renewed { sent, ttl } => {
                let ttl = ttl.unwrap_or_else(|| session.state().granted);
                let Some(lost) = session.renewed(sent, ttl) else {
                    lapsed().await;
                    return;
                };
                if !lost.is_empty() {
                    delete_entries(&etcd, session.id, &lost, response_timeout).await;
                }
                next = sent + interval;
            }
            KeepAliveOutcome::Gone => {
                tracing::warn!(lease = session.id, "etcd lease gone; its locks are lost");
                end_session(&sessions, &session, LossReason::NotHeld).await;
                return;
            }
            KeepAliveOutcome::Failed => {
                let now = Instant::now();
                if now >= session.valid_until() {
                    lapsed().await;
                    return;
                }
                next = now + (interval / 8).max(Duration::from_millis(20));
                continue;
            }
        }
        check_entries(&etcd, &session, response_timeout).await;
        cap_holds(&etcd, &session, response_timeout).await;
    }
}

/// Deletes entries of `lease` whose locks were declared lost (guarded by their revision and
/// lease, so nothing else is touched). Best effort: what stays dies with the session.
async fn delete_entries(
    etcd: &ec::Client,
    lease: i64,
    entries: &[(i64, Vec<u8>)],
    timeout: Duration,
) {
    for chunk in entries.chunks(CHECK_BATCH) {
        let ops: Vec<TxnOp> = chunk
            .iter()
            .map(|(rev, entry)| {
                TxnOp::txn(
                    Txn::new()
                        .when([
                            Compare::create_revision(entry.clone(), CompareOp::Equal, *rev),
                            Compare::lease(entry.clone(), CompareOp::Equal, lease),
                        ])
                        .and_then([TxnOp::delete(entry.clone(), None)]),
                )
            })
            .collect();
        let mut kv = etcd.kv_client();
        let _ = tokio::time::timeout(timeout, kv.txn(Txn::new().and_then(ops))).await;
    }
}

/// Retires an idle session (under the sessions lock, so no acquisition picks it meanwhile).
async fn retire(sessions: &Sessions, session: &Arc<Session>) -> bool {
    let mut map = sessions.lock().await;
    if !session.is_idle() {
        return false;
    }
    if map
        .get(&session.secs)
        .is_some_and(|s| Arc::ptr_eq(s, session))
    {
        map.remove(&session.secs);
    }
    session.dead.cancel();
    true
}

async fn end_session(sessions: &Sessions, session: &Arc<Session>, reason: LossReason) {
    session.die(reason);
    let mut map = sessions.lock().await;
    if map
        .get(&session.secs)
        .is_some_and(|s| Arc::ptr_eq(s, session))
    {
        map.remove(&session.secs);
    }
}

fn revoke_in_background(etcd: &ec::Client, id: i64, timeout: Duration) {
    let Ok(handle) = tokio::runtime::Handle::try_current() else {
        return;
    };
    let mut leases = etcd.lease_client();
    handle.spawn(async move {
        let _ = tokio::time::timeout(timeout, leases.revoke(id)).await;
    });
}

/// The tick's check: every registered entry must still exist, with its create revision, on
/// this session's lease. The ones that do not are declared lost.
async fn check_entries(etcd: &ec::Client, session: &Session, timeout: Duration) {
    let snapshot: Vec<(i64, Vec<u8>)> = session
        .state()
        .locks
        .iter()
        .map(|(rev, t)| (*rev, t.entry.clone()))
        .collect();
    let mut gone = Vec::new();
    for chunk in snapshot.chunks(CHECK_BATCH) {
        let compares: Vec<Compare> = chunk
            .iter()
            .flat_map(|(rev, entry)| {
                [
                    Compare::create_revision(entry.clone(), CompareOp::Equal, *rev),
                    Compare::lease(entry.clone(), CompareOp::Equal, session.id),
                ]
            })
            .collect();
        let gets: Vec<TxnOp> = chunk
            .iter()
            .map(|(_, entry)| TxnOp::get(entry.clone(), None))
            .collect();
        let txn = Txn::new().when(compares).or_else(gets);
        let mut kv = etcd.kv_client();
        let resp = match tokio::time::timeout(timeout, kv.txn(txn)).await {
            Ok(Ok(resp)) => resp,
            // Not an answer about the entries: the next tick checks again, and the validity
            // bounds how long that can go on.
            _ => continue,
        };
        if resp.succeeded() {
            continue;
        }
        for (i, (rev, _)) in chunk.iter().enumerate() {
            let kvs = txn_get(&resp, i);
            let ours = kvs
                .first()
                .is_some_and(|kv| kv.create_revision() == *rev && kv.lease() == session.id);
            if !ours {
                gone.push(*rev);
            }
        }
    }
    for rev in gone {
        // Unregistered meanwhile (released, or being moved by an extend): not ours to judge.
        if let Some(t) = session.unregister(rev) {
            t.lease.mark_lost(LossReason::NotHeld);
        }
    }
}

/// Moves the locks that reached their `max_hold` cap onto a lease of their own, which is not
/// kept alive: they expire one TTL later.
async fn cap_holds(etcd: &ec::Client, session: &Session, timeout: Duration) {
    let now = Instant::now();
    let due: Vec<i64> = session
        .state()
        .locks
        .iter()
        .filter(|(_, t)| t.stop_at.is_some_and(|s| now >= s))
        .map(|(rev, _)| *rev)
        .collect();
    for rev in due {
        let Some(t) = session.unregister(rev) else {
            continue;
        };
        let mut leases = etcd.lease_client();
        let started = Instant::now();
        let granted = match tokio::time::timeout(timeout, leases.grant(t.secs, None)).await {
            Ok(Ok(g)) if g.ttl() > 0 => g,
            _ => {
                // Try again at the next tick.
                session.state().locks.insert(rev, t);
                continue;
            }
        };
        let txn = Txn::new()
            .when([
                Compare::create_revision(t.entry.clone(), CompareOp::Equal, rev),
                Compare::lease(t.entry.clone(), CompareOp::Equal, session.id),
            ])
            .and_then([TxnOp::put(
                t.entry.clone(),
                t.lease.token().expose(),
                Some(PutOptions::new().with_lease(granted.id())),
            )]);
        let mut kv = etcd.kv_client();
        match tokio::time::timeout(timeout, kv.txn(txn)).await {
            Ok(Ok(resp)) if resp.succeeded() => {
                let ttl = Duration::from_secs(granted.ttl() as u64);
                t.lease.renewed(started, ttl);
                *lock(&t.attach) = Attach::Dedicated(granted.id());
                tracing::info!(
                    key = t.lease.key(),
                    "lock reached its max_hold cap; no longer renewed"
                );
            }
            Ok(Ok(_)) => {
                revoke_in_background(etcd, granted.id(), timeout);
                t.lease.mark_lost(LossReason::NotHeld);
            }
            Ok(Err(_)) | Err(_) => {
                // Maybe applied (no answer): the entry may now ride on the new lease, which
                // nobody keeps alive (and is not revoked here), so no renewal of the session
                // may carry the validity past that lease's. The next check finds the entry
                // moved (lost) or not (the move is tried again at the next tick).
                let ceiling = started
                    + Duration::from_secs(granted.ttl() as u64)
                        .saturating_sub(clock_drift(Duration::from_secs(granted.ttl() as u64)));
                let mut t = t;
                t.ceiling = Some(t.ceiling.map_or(ceiling, |c| c.min(ceiling)));
                t.lease.lower_valid_until(ceiling);
                session.state().locks.insert(rev, t);
            }
        }
    }
}

// ----------------------------------------------------------------------------------------
// Held locks

/// One lock held through an [`EtcdClient`], as its guard sees it.
struct EtcdHeld {
    client: EtcdClient,
    entry: Vec<u8>,
    /// The entry's create revision (its fencing number).
    rev: i64,
    attach: Arc<Mutex<Attach>>,
}

impl std::fmt::Debug for EtcdHeld {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Not the entry: it contains the token.
        f.debug_struct("EtcdHeld")
            .field("revision", &self.rev)
            .field("attach", &*lock(&self.attach))
            .finish()
    }
}

impl HeldLock for EtcdHeld {
    fn release<'a>(&'a self, lease: &'a Lease) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move {
            let attach = lock(&self.attach).clone();
            if let Attach::Session(session) = &attach
                && let Some(session) = session.upgrade()
            {
                session.unregister(self.rev);
            }
            let dedicated = match attach {
                Attach::Dedicated(id) => Some(id),
                Attach::Session(_) => None,
            };
            let txn = Txn::new()
                .when([Compare::create_revision(
                    self.entry.clone(),
                    CompareOp::Equal,
                    self.rev,
                )])
                .and_then([TxnOp::delete(self.entry.clone(), None)]);
            match self.client.txn(Operation::Release, true, txn).await {
                Ok(resp) => {
                    if let Some(id) = dedicated {
                        self.client.revoke_in_background(id);
                    }
                    if resp.succeeded() {
                        Ok(())
                    } else {
                        Err(Error::NotHeld {
                            key: lease.key().to_string(),
                        })
                    }
                }
                Err(e) => {
                    // Not renewed any more; make sure it goes (or dies with its lease).
                    self.client.remove_in_background(
                        self.entry.clone(),
                        lease.token().clone(),
                        dedicated,
                    );
                    Err(e)
                }
            }
        })
    }

    /// Moves the entry onto the lease of `ttl` (see the [module docs](self)).
    ///
    /// **An ambiguous move** (no reply: etcd may have applied it, or may still) is resolved by
    /// sending the same transaction again until etcd answers, while the lock's validity lasts.
    /// The move is idempotent (`If(CreateRevision(entry) == rev) Then(Put(entry, lease))`
    /// keeps the revision, so applying it twice, or late, leaves the entry on the same lease):
    /// a success says the entry is on the new lease, a failed compare that the entry is gone.
    /// Guarantee, assuming nothing but this guard moves the entry and a move etcd never
    /// answered is not applied after a later move of the same entry was: **the lock is never
    /// believed held while its entry is on a lease that nobody keeps alive or that is
    /// revoked.** While
    /// unresolved, the entry rides on the old lease or the new one, we do not know which, so:
    /// * auto-extended: the lock is registered on neither session (no keep-alive raises its
    ///   validity), its validity drops to the sooner of both sessions' validities (and of the
    ///   extend's bound, which the guard set), and both sessions are pinned (neither retires
    ///   and revokes its lease while the entry may ride on it). If etcd does not answer within
    ///   the validity, or the future is dropped before the outcome is known, the lock is
    ///   declared lost and its entry deleted (token-checked, in the background);
    /// * a lease of its own: both leases expire on their own (neither is kept alive or revoked
    ///   while unresolved), and the guard's validity is at most the extend's bound, which is
    ///   within either; the move is repeated for one more response timeout at most, and if
    ///   still unresolved, the error is returned and nothing else changes.
    ///
    /// Before, an ambiguous move of an auto-extended lock put it back on the old session: if
    /// the move had been applied, the entry rode on the new session's lease, which had no lock
    /// and was revoked when that session went idle, while the old session's keep-alives kept
    /// the guard believing it held the lock (issue 22, finding 2). *Tests:* `etcd_backend.rs`:
    /// `an_ambiguous_move_never_leaves_a_deleted_lock_believed_held`,
    /// `an_unanswered_shortening_move_is_believed_no_longer_than_its_ttl`,
    /// `a_dropped_move_leaves_no_lock_believed_held`.
    fn extend<'a>(&'a self, lease: &'a Lease, ttl: Duration) -> BoxFuture<'a, Result<Instant>> {
        Box::pin(async move {
            let secs = ttl_secs(ttl)?;
            let not_held = || Error::NotHeld {
                key: lease.key().to_string(),
            };
            let attach = lock(&self.attach).clone();
            match attach {
                Attach::Session(old) => {
                    // Auto-extended: the lock moves to the session of the new TTL. A lock its
                    // session gave up (or that was found gone) is not revived.
                    let Some(old) = old.upgrade().filter(|o| !o.dead.is_cancelled()) else {
                        return Err(not_held());
                    };
                    if lease.loss_reason().is_some() {
                        return Err(not_held());
                    }
                    let target = self.client.checkout(secs, ttl / 3).await?;
                    if Arc::ptr_eq(&old, &target.0) {
                        let txn = Txn::new().when([
                            Compare::create_revision(
                                self.entry.clone(),
                                CompareOp::Equal,
                                self.rev,
                            ),
                            Compare::lease(self.entry.clone(), CompareOp::Equal, old.id),
                        ]);
                        let resp = self.client.txn(Operation::Extend, false, txn).await?;
                        return if resp.succeeded() {
                            Ok(old.valid_until())
                        } else {
                            Err(not_held())
                        };
                    }
                    // Pinned (before the lock leaves it, so it is never idle meanwhile) until
                    // the move is settled: the entry may ride on its lease until then.
                    let _old_pin = SessionRef::pin(&old);
                    let tracked = old.unregister(self.rev);
                    if tracked.is_none() && lease.loss_reason().is_some() {
                        // Declared lost by a check meanwhile: nothing to move.
                        return Err(not_held());
                    }
                    let stop_at = tracked.as_ref().and_then(|t| t.stop_at);
                    let txn = Txn::new()
                        .when([Compare::create_revision(
                            self.entry.clone(),
                            CompareOp::Equal,
                            self.rev,
                        )])
                        .and_then([TxnOp::put(
                            self.entry.clone(),
                            lease.token().expose(),
                            Some(PutOptions::new().with_lease(target.0.id)),
                        )]);
                    // Registered on no session from here until settled: if this future is
                    // dropped meanwhile, the lock is declared lost and its entry deleted.
                    let mut unsettled = Unsettled {
                        held: self,
                        lease,
                        armed: true,
                    };
                    let moved = match self.client.txn(Operation::Extend, true, txn.clone()).await {
                        Ok(resp) => resp.succeeded(),
                        Err(e) if e.is_ambiguous() => {
                            lease.lower_valid_until(old.valid_until().min(target.0.valid_until()));
                            match self.repeat_move(lease, Some(&target.0), None, &txn).await {
                                Some(moved) => moved,
                                None => {
                                    // `unsettled` declares it lost and deletes the entry.
                                    tracing::warn!(
                                        key = lease.key(),
                                        "an extend's lease move got no answer within the \
                                         lock's validity; the lock is lost"
                                    );
                                    return Err(e);
                                }
                            }
                        }
                        Err(e) => {
                            // Never applied: the entry is still on the old session's lease.
                            unsettled.armed = false;
                            if let Some(t) = tracked {
                                old.register(self.rev, t);
                            }
                            return Err(e);
                        }
                    };
                    unsettled.armed = false;
                    if !moved {
                        return Err(not_held());
                    }
                    *lock(&self.attach) = Attach::Session(Arc::downgrade(&target.0));
                    let t = Tracked {
                        entry: self.entry.clone(),
                        lease: lease.clone(),
                        secs,
                        stop_at,
                        ceiling: None,
                        attach: self.attach.clone(),
                    };
                    match target.0.register(self.rev, t) {
                        Some(until) => Ok(until),
                        None => {
                            // The target session ended (its keep-alives failed): its lease,
                            // and the entry with it, may be gone already.
                            lease.mark_lost(LossReason::Expired);
                            Err(session_lost(Operation::Extend))
                        }
                    }
                }
                Attach::Dedicated(old_id) => {
                    let started = Instant::now();
                    let (id, granted) = self.client.grant(secs, Operation::Extend).await?;
                    let txn = Txn::new()
                        .when([Compare::create_revision(
                            self.entry.clone(),
                            CompareOp::Equal,
                            self.rev,
                        )])
                        .and_then([TxnOp::put(
                            self.entry.clone(),
                            lease.token().expose(),
                            Some(PutOptions::new().with_lease(id)),
                        )]);
                    let moved = match self.client.txn(Operation::Extend, true, txn.clone()).await {
                        Ok(resp) => resp.succeeded(),
                        // Neither lease is revoked while the entry may ride on it.
                        Err(e) if e.is_ambiguous() => {
                            // Nothing needs settling here, so the call does not wait
                            // longer than for one more reply.
                            let give_up = Instant::now() + self.client.inner.response_timeout;
                            match self.repeat_move(lease, None, Some(give_up), &txn).await {
                                Some(moved) => moved,
                                None => return Err(e),
                            }
                        }
                        Err(e) => {
                            self.client.revoke_in_background(id);
                            return Err(e);
                        }
                    };
                    if !moved {
                        self.client.revoke_in_background(id);
                        return Err(not_held());
                    }
                    *lock(&self.attach) = Attach::Dedicated(id);
                    self.client.revoke_in_background(old_id);
                    Ok(started + granted.saturating_sub(clock_drift(granted)))
                }
            }
        })
    }
}

/// Pause between the repeats of an ambiguous lease move.
const REPEAT_PAUSE: Duration = Duration::from_millis(100);

impl EtcdHeld {
    /// Sends `txn` (an idempotent lease move, see [`HeldLock::extend`]) again until etcd
    /// answers: `Some(true)` moved, `Some(false)` the entry is not ours any more. `None` if
    /// the lock's validity ran out (or `give_up` passed, or `target`, the session the entry
    /// moves to, ended, or etcd refused the request) first: the outcome is still unknown.
    async fn repeat_move(
        &self,
        lease: &Lease,
        target: Option<&Session>,
        give_up: Option<Instant>,
        txn: &Txn,
    ) -> Option<bool> {
        loop {
            let now = Instant::now();
            if now >= lease.valid_until()
                || give_up.is_some_and(|g| now >= g)
                || target.is_some_and(|t| t.dead.is_cancelled())
            {
                return None;
            }
            match self.client.txn(Operation::Extend, true, txn.clone()).await {
                Ok(resp) => return Some(resp.succeeded()),
                Err(e) if transient(&e) => {
                    tracing::debug!(error = %e, "repeating an ambiguous etcd lease move");
                    tokio::time::sleep(REPEAT_PAUSE).await;
                }
                // E.g. the target lease is gone: then the entry went with it if the first
                // move was applied, and is on the old lease if not.
                Err(_) => return None,
            }
        }
    }
}

/// An auto-extended lock being moved between sessions, registered on neither: unless
/// disarmed (the move settled), dropping it declares the lock lost and deletes its entry
/// (token-checked, in the background), since neither session keeps it alive any more.
struct Unsettled<'a> {
    held: &'a EtcdHeld,
    lease: &'a Lease,
    armed: bool,
}

impl Drop for Unsettled<'_> {
    fn drop(&mut self) {
        if self.armed {
            self.lease.mark_lost(LossReason::Expired);
            self.held.client.remove_in_background(
                self.held.entry.clone(),
                self.lease.token().clone(),
                None,
            );
        }
    }
}

/// Deletes the entry of an acquisition whose outcome is unknown or abandoned (the future was
/// dropped, the reply was lost, the deadline passed), token-checked, in the background.
struct Cleanup {
    client: EtcdClient,
    entry: Vec<u8>,
    token: LockToken,
    /// A lease of the entry's own, revoked too.
    lease: Option<i64>,
    armed: bool,
}

impl Cleanup {
    fn new(client: &EtcdClient, entry: &[u8], token: &LockToken, lease: Option<i64>) -> Self {
        Cleanup {
            client: client.clone(),
            entry: entry.to_vec(),
            token: token.clone(),
            lease,
            armed: true,
        }
    }

    fn disarm(&mut self) {
        self.armed = false;
    }

    /// Deletes the entry now (falling back to the background on failure).
    async fn run(&mut self) {
        self.armed = false;
        let txn = Txn::new()
            .when([Compare::value(
                self.entry.clone(),
                CompareOp::Equal,
                self.token.expose(),
            )])
            .and_then([TxnOp::delete(self.entry.clone(), None)]);
        match self.client.txn(Operation::Release, true, txn).await {
            Ok(_) => {
                if let Some(id) = self.lease {
                    self.client.revoke_in_background(id);
                }
            }
            Err(_) => {
                self.client
                    .remove_in_background(self.entry.clone(), self.token.clone(), self.lease)
            }
        }
    }
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        if self.armed {
            self.client.remove_in_background(
                std::mem::take(&mut self.entry),
                self.token.clone(),
                self.lease,
            );
        }
    }
}

/// Where the entry of a new acquisition lives, and so how its validity is computed.
enum Basis {
    /// On a session's lease (auto-extended).
    Session(SessionRef),
    /// On its own lease, granted with `granted` by a request sent at `started`.
    Dedicated {
        id: i64,
        started: Instant,
        granted: Duration,
    },
}

enum Watched {
    /// The watched entry was deleted (or the watch ended): look again.
    Again,
    SessionEnded,
    Deadline,
}

// ----------------------------------------------------------------------------------------
// The client

impl EtcdClient {
    /// Connects to `url` with default [`ClientOptions`]:
    /// `etcd://[user:password@]host:port[,host:port...]` (port 2379 by default; user and
    /// password percent-decoded; with them, etcd authentication is used).
    ///
    /// # Errors
    /// As [`EtcdClient::connect_with`].
    pub async fn connect(url: &str) -> Result<Self> {
        Self::connect_with(url, ClientOptions::default()).await
    }

    /// Connects to `url` and checks, within the connect timeout, that a member answers (and,
    /// with credentials, that they are accepted). Every later request is bounded by the
    /// response timeout.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a malformed URL; [`Error::Authentication`] for refused
    /// credentials; [`Error::Connection`] (`op: Connect`, not ambiguous) if no member answers
    /// in time.
    pub async fn connect_with(url: &str, options: ClientOptions) -> Result<Self> {
        let parsed = parse_url(url)?;
        let connect_timeout = options.connect_timeout;
        let response_timeout = options.response_timeout;
        let mut connect = ec::ConnectOptions::new()
            .with_connect_timeout(connect_timeout)
            .with_keep_alive(
                H2_PING_INTERVAL,
                response_timeout.max(Duration::from_secs(1)),
            )
            .with_keep_alive_while_idle(false)
            // A member cut off from the leader refuses (and ends streams) instead of hanging.
            .with_require_leader(true);
        if let Some((name, password)) = &parsed.user {
            connect = connect
                .with_user(name.clone(), password.clone())
                .with_auto_token_refresh(true);
        }
        let endpoints = parsed.endpoints.clone();
        let tries = retries_for(endpoints.len());
        let probe = async move {
            let mut tried = 0;
            loop {
                tried += 1;
                // With credentials, this authenticates (a round trip); without, it connects
                // lazily. Then a status request must reach a member.
                let result = async {
                    let etcd = ec::Client::connect(&endpoints, Some(connect.clone())).await?;
                    etcd.maintenance_client().status().await?;
                    Ok::<_, ec::Error>(etcd)
                }
                .await;
                match result {
                    Ok(etcd) => return Ok(etcd),
                    // Refused by one member: another may answer.
                    Err(e) if never_sent(&e) && tried < tries => {
                        tokio::time::sleep(Duration::from_millis(10)).await;
                    }
                    Err(e) => return Err(from_etcd(Operation::Connect, false, e)),
                }
            }
        };
        let etcd = tokio::time::timeout(connect_timeout, probe)
            .await
            .map_err(|_| timeout_error(Operation::Connect, false))??;
        tracing::debug!(endpoints = ?parsed.endpoints, "leasehold connected to etcd");
        Ok(EtcdClient {
            inner: Arc::new(Inner {
                endpoints: parsed.endpoints,
                user: parsed.user.map(|(name, _)| name),
                response_timeout,
                sessions: Arc::new(tokio::sync::Mutex::new(HashMap::new())),
                keep_alives: Arc::new(KeepAlives::new(etcd.clone())),
                etcd,
            }),
        })
    }

    /// The member URLs (`http://host:port`) this client talks to.
    pub fn endpoints(&self) -> &[String] {
        &self.inner.endpoints
    }

    /// One attempt to take `key`, without waiting: one transaction that writes our entry only
    /// if the lock has no holder and no waiter (so nothing is written, and nothing needs
    /// cleaning up, when it is busy). Plus a lease grant first, unless the lock is
    /// auto-extended (then it uses the session lease of its TTL).
    ///
    /// **Cancellation.** If the future is dropped, or the reply is lost, after the request was
    /// sent, the entry (if it was written) is deleted in the background, token-checked; if
    /// that fails it dies with its lease.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a bad key or TTL (before any round trip);
    /// [`Error::Unsupported`] with [`LockOptions::replica_ack`]; [`Error::ExpiredOnArrival`];
    /// [`Error::Connection`] (ambiguous once the transaction was sent),
    /// [`Error::PermissionDenied`], [`Error::Authentication`], [`Error::Server`].
    pub async fn try_acquire(&self, key: &str, options: &LockOptions) -> Result<TryAcquire> {
        let secs = self.check_request(key, options)?;
        let token = LockToken::random();
        let entry = entry_key(key, &token);
        let basis = if options.auto_extend_enabled() {
            Basis::Session(self.checkout(secs, options.renew_interval()).await?)
        } else {
            let started = Instant::now();
            let (id, granted) = self.grant(secs, Operation::Acquire).await?;
            Basis::Dedicated {
                id,
                started,
                granted,
            }
        };
        let lease_id = match &basis {
            Basis::Session(s) => s.0.id,
            Basis::Dedicated { id, .. } => *id,
        };
        let mut cleanup = Cleanup::new(
            self,
            &entry,
            &token,
            matches!(basis, Basis::Dedicated { .. }).then_some(lease_id),
        );
        let txn = Txn::new()
            .when([Compare::create_revision(queue_prefix(key), CompareOp::Equal, 0).with_prefix()])
            .and_then([TxnOp::put(
                entry.clone(),
                token.expose(),
                Some(PutOptions::new().with_lease(lease_id)),
            )]);
        let resp = self.txn(Operation::Acquire, true, txn).await?;
        if !resp.succeeded() {
            // Nothing was written: only a lease of our own needs giving back.
            cleanup.disarm();
            if let Basis::Dedicated { id, .. } = basis {
                self.revoke_in_background(id);
            }
            return Ok(TryAcquire::Busy { remaining: None });
        }
        let rev = header_revision(&resp)?;
        let guard = self.finish(key, token, entry, rev, basis, options)?;
        cleanup.disarm();
        Ok(TryAcquire::Acquired(guard))
    }

    /// Takes `key`, waiting until `options.wait_bound()` (one attempt, like
    /// [`EtcdClient::try_acquire`], if none was set or it is zero).
    ///
    /// Waiting is a queue (see the [module docs](self)): our entry is written once, and we
    /// watch only the entry just ahead of ours, so locks are granted in arrival order and a
    /// release wakes one waiter. Connection errors are ridden out (with the backoff of the
    /// options) until the deadline. If the session's lease is lost while we wait, our place is
    /// lost with it and we queue again.
    ///
    /// **Cancellation.** Dropping the future deletes our entry in the background
    /// (token-checked); if that fails, the entry dies with the session's lease.
    ///
    /// # Errors
    /// [`Error::NotAcquired`] at the deadline; otherwise as [`EtcdClient::try_acquire`].
    pub async fn acquire(&self, key: &str, options: &LockOptions) -> Result<LockGuard> {
        let secs = self.check_request(key, options)?;
        let Some(wait) = options.wait_bound().filter(|w| !w.is_zero()) else {
            let begun = Instant::now();
            return match self.try_acquire(key, options).await? {
                TryAcquire::Acquired(guard) => Ok(guard),
                TryAcquire::Busy { .. } => Err(Error::NotAcquired {
                    key: key.to_string(),
                    waited: begun.elapsed(),
                    attempts: 1,
                }),
            };
        };
        self.acquire_queued(key, options, secs, wait).await
    }

    /// Waits for `key` (as [`EtcdClient::acquire`]), runs `work`, and releases the lock
    /// whatever happens (see [`LockClient::with_lock`](crate::LockClient::with_lock)).
    ///
    /// # Errors
    /// As [`EtcdClient::acquire`]; [`Error::LockLost`] if the lease was lost during `work`;
    /// [`Error::NotHeld`] if the release found the lock gone.
    pub async fn with_lock<T, F, Fut>(&self, key: &str, options: &LockOptions, work: F) -> Result<T>
    where
        F: FnOnce(Lease) -> Fut,
        Fut: std::future::Future<Output = T>,
    {
        let guard = self.acquire(key, options).await?;
        crate::guard::run_with_lock(guard, options, work).await
    }

    /// The same as [`release`](Self::release): etcd's queue and the waiters' watches already hand the lock to the
    /// longest waiter, so a fair lock needs nothing more.
    ///
    /// # Errors
    /// As [`release`](Self::release).
    pub async fn release_fair(&self, key: &str, token: &LockToken) -> Result<()> {
        self.release(key, token).await
    }

    /// Releases `key` if `token` holds it (or waits for it): one transaction,
    /// `If(Value(entry) == token) Then(Delete(entry))`. Needs no state from the acquiring
    /// process.
    ///
    /// # Errors
    /// [`Error::NotHeld`] if there is no such entry; connection and server errors.
    pub async fn release(&self, key: &str, token: &LockToken) -> Result<()> {
        check_key(key)?;
        let entry = entry_key(key, token);
        let txn = Txn::new()
            .when([Compare::value(
                entry.clone(),
                CompareOp::Equal,
                token.expose(),
            )])
            .and_then([TxnOp::delete(entry, None)]);
        let resp = self.txn(Operation::Release, true, txn).await?;
        if resp.succeeded() {
            Ok(())
        } else {
            Err(Error::NotHeld {
                key: key.to_string(),
            })
        }
    }

    /// Gives `key`'s entry for `token` a fresh lease of `ttl` (rounded up to whole seconds):
    /// a lease grant, then `If(Value(entry) == token) Then(Put(entry, lease))`. The entry keeps
    /// its revision (fencing number and place). The old lease is left to expire (it may be a
    /// session lease other locks share). Needs no state from the acquiring process.
    ///
    /// # Errors
    /// [`Error::NotHeld`] if there is no such entry; [`Error::InvalidArgument`] for a bad TTL;
    /// connection and server errors.
    pub async fn extend(&self, key: &str, token: &LockToken, ttl: Duration) -> Result<()> {
        check_key(key)?;
        let secs = ttl_secs(ttl)?;
        let entry = entry_key(key, token);
        let (id, _) = self.grant(secs, Operation::Extend).await?;
        let txn = Txn::new()
            .when([Compare::value(
                entry.clone(),
                CompareOp::Equal,
                token.expose(),
            )])
            .and_then([TxnOp::put(
                entry,
                token.expose(),
                Some(PutOptions::new().with_lease(id)),
            )]);
        // No reply (`?`): the entry may ride on the new lease, so it is not revoked (it
        // expires on its own); the caller holds no validity to lower.
        let resp = self.txn(Operation::Extend, true, txn).await?;
        if resp.succeeded() {
            Ok(())
        } else {
            self.revoke_in_background(id);
            Err(Error::NotHeld {
                key: key.to_string(),
            })
        }
    }

    /// Who holds `key` (the token of its first entry), the remaining TTL of that entry's lease
    /// (whole seconds, as etcd reports it) and its fencing number (the entry's create
    /// revision); all `None` when the lock is free. Two round trips (the entry, then its
    /// lease).
    ///
    /// # Errors
    /// Connection and server errors.
    pub async fn inspect(&self, key: &str) -> Result<LockState> {
        check_key(key)?;
        let options = GetOptions::new()
            .with_prefix()
            .with_sort(SortTarget::Create, SortOrder::Ascend)
            .with_limit(1);
        let prefix = queue_prefix(key);
        let mut resp = self
            .request(Operation::Inspect, false, || {
                let mut kv = self.inner.etcd.kv_client();
                let (prefix, options) = (prefix.clone(), options.clone());
                async move { kv.get(prefix, Some(options)).await }
            })
            .await?;
        let Some(first) = resp.take_kvs().into_iter().next() else {
            return Ok(LockState {
                key: key.to_string(),
                holder: None,
                ttl: None,
                fencing_counter: None,
            });
        };
        let ttl = if first.lease() != 0 {
            let id = first.lease();
            let lease = self
                .request(Operation::Inspect, false, || {
                    let mut leases = self.inner.etcd.lease_client();
                    async move { leases.time_to_live(id, None).await }
                })
                .await?;
            (lease.ttl() >= 0).then(|| Duration::from_secs(lease.ttl() as u64))
        } else {
            None
        };
        Ok(LockState {
            key: key.to_string(),
            holder: Some(String::from_utf8_lossy(first.value()).into_owned()),
            ttl,
            fencing_counter: Some(first.create_revision() as u64),
        })
    }

    /// Always [`Error::Unsupported`]: etcd's fencing numbers are its revisions, which only move
    /// up and cannot be raised on request.
    ///
    /// # Errors
    /// [`Error::Unsupported`]; [`Error::InvalidArgument`] for a bad key.
    pub async fn raise_fencing_counter(&self, key: &str, _at_least: u64) -> Result<u64> {
        check_key(key)?;
        Err(Error::Unsupported {
            backend: "etcd",
            what: "raising a fencing counter (etcd's fencing numbers are its revisions)".into(),
        })
    }

    // ------------------------------------------------------------------------------------

    fn check_request(&self, key: &str, options: &LockOptions) -> Result<i64> {
        check_key(key)?;
        let secs = ttl_secs(options.ttl())?;
        if options.replica_ack_required().is_some() {
            return Err(Error::Unsupported {
                backend: "etcd",
                what: "replica acknowledgement (etcd commits every write to a majority)".into(),
            });
        }
        Ok(secs)
    }

    async fn acquire_queued(
        &self,
        key: &str,
        options: &LockOptions,
        secs: i64,
        wait: Duration,
    ) -> Result<LockGuard> {
        let begun = Instant::now();
        let deadline = begun + wait;
        let prefix = queue_prefix(key);
        let mut attempts: u32 = 0;
        let mut failures: u32 = 0;
        let not_acquired = |attempts: u32| Error::NotAcquired {
            key: key.to_string(),
            waited: begun.elapsed(),
            attempts,
        };
        // Rides out a transient error: sleeps the backoff (never past the deadline) and says
        // whether to go on.
        let backoff = |failures: &mut u32| {
            let delay = options.backoff_policy().delay(*failures);
            *failures += 1;
            let until = (Instant::now() + delay).min(deadline);
            async move {
                tokio::time::sleep_until(until.into()).await;
                Instant::now() < deadline
            }
        };
        'session: loop {
            if Instant::now() >= deadline {
                return Err(not_acquired(attempts));
            }
            let session = match self.checkout(secs, options.renew_interval()).await {
                Ok(s) => s,
                Err(e) if transient(&e) => {
                    if backoff(&mut failures).await {
                        continue 'session;
                    }
                    return Err(e);
                }
                Err(e) => return Err(e),
            };
            let token = LockToken::random();
            let entry = entry_key(key, &token);
            let mut cleanup = Cleanup::new(self, &entry, &token, None);
            // Enqueue. Repeatable: a retry after an ambiguous failure finds the entry.
            let rev = loop {
                let txn = Txn::new()
                    .when([Compare::create_revision(entry.clone(), CompareOp::Equal, 0)])
                    .and_then([
                        TxnOp::put(
                            entry.clone(),
                            token.expose(),
                            Some(PutOptions::new().with_lease(session.0.id)),
                        ),
                        TxnOp::get(entry.clone(), None),
                    ])
                    .or_else([TxnOp::get(entry.clone(), None)]);
                match self.txn(Operation::Acquire, true, txn).await {
                    Ok(resp) => {
                        let index = if resp.succeeded() { 1 } else { 0 };
                        match txn_get(&resp, index).first() {
                            Some(kv) => break kv.create_revision(),
                            None => continue 'session,
                        }
                    }
                    // The session's lease died (etcd: "requested lease not found") before its
                    // keep-alive said so: nothing was written; queue again on a live session.
                    Err(e) if lease_gone(&e) => {
                        if backoff(&mut failures).await {
                            continue 'session;
                        }
                        return Err(e);
                    }
                    Err(e) if transient(&e) => {
                        if session.0.dead.is_cancelled() {
                            continue 'session;
                        }
                        if !backoff(&mut failures).await {
                            cleanup.run().await;
                            return Err(e);
                        }
                    }
                    Err(e) => return Err(e),
                }
            };
            // Wait until no entry is ahead of ours.
            loop {
                attempts += 1;
                let ahead = GetOptions::new()
                    .with_prefix()
                    .with_sort(SortTarget::Create, SortOrder::Descend)
                    .with_max_create_revision(rev - 1)
                    .with_limit(1)
                    .with_keys_only();
                let txn = Txn::new().and_then([
                    TxnOp::get(entry.clone(), None),
                    TxnOp::get(prefix.clone(), Some(ahead)),
                ]);
                let resp = match self.txn(Operation::Acquire, false, txn).await {
                    Ok(resp) => resp,
                    Err(e) if transient(&e) => {
                        if session.0.dead.is_cancelled() {
                            continue 'session;
                        }
                        if !backoff(&mut failures).await {
                            cleanup.run().await;
                            return Err(e);
                        }
                        continue;
                    }
                    Err(e) => return Err(e),
                };
                let read_at = header_revision(&resp)?;
                let ours = txn_get(&resp, 0)
                    .first()
                    .is_some_and(|kv| kv.create_revision() == rev);
                if !ours {
                    // Our entry is gone (its lease expired, or someone deleted it): queue again.
                    tracing::debug!(
                        key,
                        "our queue entry vanished while waiting; queueing again"
                    );
                    continue 'session;
                }
                let Some(ahead) = txn_get(&resp, 1).into_iter().next() else {
                    break;
                };
                match self
                    .watch_deletion(ahead.key(), read_at + 1, &session.0.dead, deadline)
                    .await
                {
                    Watched::Again => {}
                    Watched::SessionEnded => continue 'session,
                    Watched::Deadline => {
                        cleanup.run().await;
                        return Err(not_acquired(attempts));
                    }
                }
            }
            // Ours. An auto-extended lock stays on the session; any other moves onto a lease
            // of its own, guarded by our create revision (a put keeps it).
            let basis = if options.auto_extend_enabled() {
                Basis::Session(session)
            } else {
                let started = Instant::now();
                let (id, granted) = match self.grant(secs, Operation::Acquire).await {
                    Ok(g) => g,
                    Err(e) if transient(&e) => {
                        if backoff(&mut failures).await {
                            cleanup.run().await;
                            continue 'session;
                        }
                        cleanup.run().await;
                        return Err(e);
                    }
                    Err(e) => return Err(e),
                };
                cleanup.lease = Some(id);
                let txn = Txn::new()
                    .when([Compare::create_revision(
                        entry.clone(),
                        CompareOp::Equal,
                        rev,
                    )])
                    .and_then([TxnOp::put(
                        entry.clone(),
                        token.expose(),
                        Some(PutOptions::new().with_lease(id)),
                    )]);
                match self.txn(Operation::Acquire, true, txn).await {
                    Ok(resp) if resp.succeeded() => Basis::Dedicated {
                        id,
                        started,
                        granted,
                    },
                    Ok(_) => continue 'session,
                    Err(e) if transient(&e) => {
                        cleanup.run().await;
                        if backoff(&mut failures).await {
                            continue 'session;
                        }
                        return Err(e);
                    }
                    Err(e) => return Err(e),
                }
            };
            match self.finish(key, token, entry, rev, basis, options) {
                Ok(guard) => {
                    cleanup.disarm();
                    return Ok(guard);
                }
                Err(Error::ExpiredOnArrival { .. }) => {
                    cleanup.run().await;
                    continue 'session;
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Waits until `key` is deleted at or after `from` (a revision), the session ends, or the
    /// deadline passes.
    async fn watch_deletion(
        &self,
        key: &[u8],
        from: i64,
        session_dead: &CancellationToken,
        deadline: Instant,
    ) -> Watched {
        let mut watcher = self.inner.etcd.watch_client();
        let options = WatchOptions::new()
            .with_start_revision(from)
            .with_filters([WatchFilterType::NoPut]);
        let opened = tokio::select! {
            r = tokio::time::timeout(self.inner.response_timeout, watcher.watch(key.to_vec(), Some(options))) => r,
            _ = session_dead.cancelled() => return Watched::SessionEnded,
            _ = tokio::time::sleep_until(deadline.into()) => return Watched::Deadline,
        };
        let mut stream = match opened {
            Ok(Ok(stream)) => stream,
            _ => {
                // Look again after a pause (the read that follows bounds a broken etcd).
                tokio::time::sleep(Duration::from_millis(50)).await;
                return Watched::Again;
            }
        };
        loop {
            tokio::select! {
                message = stream.message() => match message {
                    Ok(Some(resp)) => {
                        if resp.canceled()
                            || resp.events().iter().any(|e| e.event_type() == EventType::Delete)
                        {
                            return Watched::Again;
                        }
                    }
                    _ => {
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        return Watched::Again;
                    }
                },
                _ = session_dead.cancelled() => return Watched::SessionEnded,
                _ = tokio::time::sleep_until(deadline.into()) => return Watched::Deadline,
            }
        }
    }

    /// The guard of an acquisition whose entry is first, at revision `rev`.
    fn finish(
        &self,
        key: &str,
        token: LockToken,
        entry: Vec<u8>,
        rev: i64,
        basis: Basis,
        options: &LockOptions,
    ) -> Result<LockGuard> {
        let fencing = options.fencing_enabled().then_some(rev as u64);
        // What the validity is counted from: the grant, or the session's last renewal.
        let since = match &basis {
            Basis::Session(session) => session.0.state().renewed_at,
            Basis::Dedicated { started, .. } => *started,
        };
        let (lease, attach) = match basis {
            Basis::Session(session) => {
                let lease = Lease::new(key, token, fencing, Instant::now(), options.ttl());
                let attach = Arc::new(Mutex::new(Attach::Session(Arc::downgrade(&session.0))));
                let tracked = Tracked {
                    entry: entry.clone(),
                    lease: lease.clone(),
                    secs: ttl_secs(options.ttl())?,
                    stop_at: options.max_hold_bound().map(|cap| Instant::now() + cap),
                    ceiling: None,
                    attach: attach.clone(),
                };
                if session.0.register(rev, tracked).is_none() {
                    return Err(session_lost(Operation::Acquire));
                }
                (lease, attach)
            }
            Basis::Dedicated {
                id,
                started,
                granted,
            } => (
                Lease::new(key, token, fencing, started, granted),
                Arc::new(Mutex::new(Attach::Dedicated(id))),
            ),
        };
        if Instant::now() >= lease.valid_until() {
            if let Attach::Session(session) = &*lock(&attach)
                && let Some(session) = session.upgrade()
            {
                session.unregister(rev);
            }
            tracing::warn!(key, "lock granted after its validity ended; releasing");
            return Err(Error::ExpiredOnArrival {
                key: key.to_string(),
                elapsed: since.elapsed(),
                ttl: options.ttl(),
            });
        }
        let held = EtcdHeld {
            client: self.clone(),
            entry,
            rev,
            attach,
        };
        Ok(LockGuard::new(Arc::new(held), lease))
    }

    /// The live session of `secs`, opened if there is none (a lease grant).
    async fn checkout(&self, secs: i64, interval: Duration) -> Result<SessionRef> {
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

    /// Grants a lease of `secs` seconds; returns its id and the TTL etcd granted.
    async fn grant(&self, secs: i64, op: Operation) -> Result<(i64, Duration)> {
        let resp = self
            .request(op, false, || {
                let mut leases = self.inner.etcd.lease_client();
                async move { leases.grant(secs, None).await }
            })
            .await?;
        if resp.ttl() <= 0 || !resp.error().is_empty() {
            return Err(Error::UnexpectedReply {
                op,
                detail: format!(
                    "lease grant refused: ttl {}, {:?}",
                    resp.ttl(),
                    resp.error()
                ),
            });
        }
        Ok((resp.id(), Duration::from_secs(resp.ttl() as u64)))
    }

    async fn txn(&self, op: Operation, write: bool, txn: Txn) -> Result<ec::TxnResponse> {
        self.request(op, write, || {
            let mut kv = self.inner.etcd.kv_client();
            let txn = txn.clone();
            async move { kv.txn(txn).await }
        })
        .await
    }

    /// Sends a request (again while it provably never left: see [`send_unsent_again`]),
    /// bounded by the response timeout.
    async fn request<T, F, Fut>(&self, op: Operation, write: bool, send: F) -> Result<T>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = std::result::Result<T, ec::Error>>,
    {
        let tries = retries_for(self.inner.endpoints.len());
        match send_unsent_again(self.inner.response_timeout, tries, send).await {
            Some(Ok(v)) => Ok(v),
            Some(Err(e)) => Err(from_etcd(op, write, e)),
            None => Err(timeout_error(op, write)),
        }
    }

    fn revoke_in_background(&self, id: i64) {
        revoke_in_background(&self.inner.etcd, id, self.inner.response_timeout);
    }

    /// Deletes `entry` if it still holds `token` (and revokes `lease`, the entry's own), in the
    /// background, retrying connection errors a few times; what it cannot delete dies with its
    /// lease.
    fn remove_in_background(&self, entry: Vec<u8>, token: LockToken, lease: Option<i64>) {
        let Ok(handle) = tokio::runtime::Handle::try_current() else {
            tracing::warn!(
                "etcd entry abandoned outside a tokio runtime; it expires with its lease"
            );
            return;
        };
        let client = self.clone();
        handle.spawn(async move {
            for attempt in 0..CLEANUP_TRIES {
                let txn = Txn::new()
                    .when([Compare::value(
                        entry.clone(),
                        CompareOp::Equal,
                        token.expose(),
                    )])
                    .and_then([TxnOp::delete(entry.clone(), None)]);
                match client.txn(Operation::Release, true, txn).await {
                    Err(e) if transient(&e) && attempt + 1 < CLEANUP_TRIES => {
                        tokio::time::sleep(Duration::from_millis(100 << attempt)).await;
                    }
                    _ => break,
                }
            }
            if let Some(id) = lease {
                let _ = client
                    .request(Operation::Release, true, || {
                        let mut leases = client.inner.etcd.lease_client();
                        async move { leases.revoke(id).await }
                    })
                    .await;
            }
        });
    }
}

crate::backend::impl_lock_backend!(EtcdClient, "etcd");

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls() {
        assert_eq!(
            parse_url("etcd://127.0.0.1:2380,h2,[::1]:7").unwrap(),
            EtcdUrl {
                endpoints: vec![
                    "http://127.0.0.1:2380".into(),
                    "http://h2:2379".into(),
                    "http://[::1]:7".into()
                ],
                user: None,
            }
        );
        assert_eq!(
            parse_url("ETCD://u%40x:p%3Aw@h:1/").unwrap().user,
            Some(("u@x".into(), "p:w".into()))
        );
        for bad in [
            "etcd://",
            "redis://h:1",
            "etcd://h:1/db",
            "etcd://:pw@h:1",
            "etcd://h:0",
        ] {
            assert!(
                matches!(
                    parse_url(bad),
                    Err(Error::InvalidArgument { what: "url", .. })
                ),
                "{bad}"
            );
        }
    }

    #[test]
    fn keys_and_ttls() {
        assert!(check_key("a\0b").is_err());
        assert!(check_key("").is_err());
        assert!(check_key("a/b").is_ok());
        assert_eq!(ttl_secs(Duration::from_millis(1)).unwrap(), 1);
        assert_eq!(ttl_secs(Duration::from_millis(1001)).unwrap(), 2);
        assert_eq!(ttl_secs(Duration::from_secs(5)).unwrap(), 5);
        assert!(ttl_secs(Duration::ZERO).is_err());
        let t = LockToken::new("tok").unwrap();
        assert_eq!(entry_key("k", &t), b"k\0tok");
    }

    /// Replies on one stream meet their own requests: by lease, oldest first, each with the
    /// send time of the request it answers, however the sessions' requests interleave. A
    /// late reply (its sender stopped waiting) is dropped without shifting the later ones.
    /// Closing fails every request still waiting and sends nothing more.
    #[tokio::test]
    async fn keep_alive_replies_meet_their_own_requests() {
        let (sender, mut on_the_wire) = tokio::sync::mpsc::channel(8);
        let generation = Generation::new(1, ec::LeaseKeeper { id: 0, sender });
        let (mut k1, _, a1) = generation.enqueue(10).unwrap();
        let (mut k2, b_sent, b) = generation.enqueue(20).unwrap();
        let (mut k3, a2_sent, a2) = generation.enqueue(10).unwrap();
        for k in [&mut k1, &mut k2, &mut k3] {
            k.keep_alive().await.unwrap();
        }
        let ids: Vec<i64> = (0..3).map(|_| on_the_wire.try_recv().unwrap().id).collect();
        assert_eq!(ids, [10, 20, 10]);
        assert!(generation.silent_since(a2_sent));
        generation.answer(20, 5);
        assert_eq!(
            b.await.unwrap(),
            Answer {
                sent: b_sent,
                ttl: 5
            }
        );
        assert!(!generation.silent_since(a2_sent));
        // Lease 10's first request was given up: its late reply is dropped, and the next reply
        // answers the second request, with the second request's send time.
        drop(a1);
        generation.answer(10, 3);
        assert_eq!(lock(&generation.state).waiting[&10].len(), 1);
        generation.answer(10, 0);
        assert_eq!(
            a2.await.unwrap(),
            Answer {
                sent: a2_sent,
                ttl: 0
            }
        );
        assert!(lock(&generation.state).waiting.is_empty());
        // A reply nobody asked for changes nothing.
        generation.answer(30, 3);
        let (_, _, c) = generation.enqueue(10).unwrap();
        generation.close();
        assert!(c.await.is_err(), "a closed stream answers nothing");
        assert!(generation.enqueue(10).is_none() && !generation.is_open());
        assert!(generation.stop.is_cancelled());
    }

    /// A session of lease 1, granted `granted` by a request sent at `t0`, with no lock.
    fn test_session(t0: Instant, granted: Duration) -> Session {
        Session {
            secs: granted.as_secs() as i64,
            id: 1,
            waiters: AtomicUsize::new(0),
            state: Mutex::new(SessionState {
                renewed_at: t0,
                granted,
                interval: granted / 4,
                locks: HashMap::new(),
            }),
            dead: CancellationToken::new(),
        }
    }

    /// A session's validity only moves forward, and never once it has run out.
    #[test]
    fn a_session_is_renewed_only_forward_and_not_revived() {
        let t0 = Instant::now();
        let granted = Duration::from_secs(2);
        let session = test_session(t0, granted);
        let until = |at: Instant| at + granted - clock_drift(granted);
        assert_eq!(session.valid_until(), until(t0));
        let t1 = t0 + Duration::from_secs(1);
        assert_eq!(session.renewed(t1, granted), Some(Vec::new()));
        assert_eq!(session.valid_until(), until(t1));
        // A reply to a request sent before the last one applied: nothing moves.
        assert_eq!(session.renewed(t0, granted), Some(Vec::new()));
        assert_eq!(session.valid_until(), until(t1));
        // Sent after the validity ran out: not revived.
        assert_eq!(session.renewed(until(t1), granted), None);
        assert_eq!(session.valid_until(), until(t1));
        session.dead.cancel();
        assert_eq!(
            session.renewed(t1 + Duration::from_millis(1), granted),
            None
        );
    }

    /// A lock whose `max_hold` move got no answer (its entry may ride on a lease nobody keeps
    /// alive) is never carried past that lease's bound by the session's renewals; the other
    /// locks of the session are renewed as usual.
    #[test]
    fn a_ceiling_bounds_the_renewals_of_a_lock() {
        let t0 = Instant::now();
        let granted = Duration::from_secs(10);
        let session = test_session(t0, granted);
        let ceiling = t0 + Duration::from_secs(4);
        let tracked = |key: &str, ceiling: Option<Instant>| {
            let token = LockToken::new("tok").unwrap();
            let lease = Lease::new(key, token, None, t0, granted);
            let t = Tracked {
                entry: entry_key(key, lease.token()),
                lease: lease.clone(),
                secs: 10,
                stop_at: None,
                ceiling,
                attach: Arc::new(Mutex::new(Attach::Dedicated(2))),
            };
            (lease, t)
        };
        let (capped, t) = tracked("capped", Some(ceiling));
        session.state().locks.insert(1, t);
        let (plain, t) = tracked("plain", None);
        session.state().locks.insert(2, t);
        capped.lower_valid_until(ceiling);
        let t1 = t0 + Duration::from_secs(3);
        assert_eq!(session.renewed(t1, granted), Some(Vec::new()));
        assert_eq!(capped.valid_until(), ceiling);
        assert_eq!(plain.valid_until(), t1 + granted - clock_drift(granted));
    }

    /// The cleanup of entries whose locks were declared lost while their session lives on
    /// deletes exactly those entries: same revision, same lease; nothing else.
    #[tokio::test]
    async fn lost_entries_are_deleted_by_revision_and_lease() {
        let Some(etcd) = leasehold_harness::etcd_for_test() else {
            return;
        };
        let raw = ec::Client::connect([etcd.endpoint()], None).await.unwrap();
        let mut leases = raw.lease_client();
        let session = leases.grant(10, None).await.unwrap().id();
        let other = leases.grant(10, None).await.unwrap().id();
        let mut kv = raw.kv_client();
        let put = |key: &'static str, lease: i64| {
            let mut kv = kv.clone();
            async move {
                let options = PutOptions::new().with_lease(lease);
                let resp = kv.put(key, "t", Some(options)).await.unwrap();
                resp.header().unwrap().revision()
            }
        };
        let lost = put("a\0lost", session).await;
        let stale = put("a\0stale", session).await;
        let moved = put("a\0moved", other).await;
        let entries = [
            (lost, b"a\0lost".to_vec()),
            (stale + 100, b"a\0stale".to_vec()),
            (moved, b"a\0moved".to_vec()),
        ];
        delete_entries(&raw, session, &entries, Duration::from_secs(5)).await;
        let left = kv
            .get("a\0", Some(GetOptions::new().with_prefix()))
            .await
            .unwrap();
        let left: Vec<&[u8]> = left.kvs().iter().map(|kv| kv.key()).collect();
        assert_eq!(left, [b"a\0moved".as_slice(), b"a\0stale".as_slice()]);
    }
}
