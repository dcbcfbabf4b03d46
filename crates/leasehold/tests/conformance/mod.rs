//! One conformance suite for every backend: the guarantees of `leasehold::backend` (the contract
//! of docs/guarantees.md §9), checked through the one public API, [`Locker`], connected by URL to
//! each subject, as DistributedLock (.NET) does with its abstract test cases.
//!
//! A [`Subject`] is a backend on real servers (started once per test function by the file of
//! its group: `redis.rs`, `etcd.rs`, `postgres.rs`), or one that needs none (`memory.rs`,
//! `file.rs`); [`conforms`] runs every check on it in
//! sequence, each on keys of its own. Where a backend documents a stronger or a different form
//! ([`Form`]: its fencing numbers, release by token from another process, its key limit), the
//! checks assert that form, not a weaker common one.
//!
//! Nothing here sleeps and hopes: events are ordered by observing state (a waiter seen refused in
//! the server, a `lost()` future, a returned error); every timeout is only a hang guard.

use std::future::Future;
use std::time::{Duration, Instant};

use futures_util::FutureExt;
use leasehold::{
    Error, LockGuard, LockOptions, LockToken, Locker, LossReason, MAX_KEY_LEN, TryAcquire,
};

mod min_hold;
mod primitives;
pub(crate) mod redis;

#[cfg(unix)]
mod file;
pub(crate) mod memory;

#[cfg(feature = "etcd")]
pub(crate) mod etcd;

#[cfg(feature = "postgres")]
pub(crate) mod postgres;

/// Only keeps a broken build from hanging: every event it bounds takes milliseconds to seconds.
pub const GENEROUS: Duration = Duration::from_secs(30);

/// The TTL of locks that must not expire during a check: a lock found free again was freed by a
/// release, never by its expiry.
const LONG: Duration = Duration::from_secs(60);

/// The TTL of auto-extended leases whose loss is checked: renewed every third of it (etcd's TTLs
/// are whole seconds, at least about 2 s).
const RENEWED: Duration = Duration::from_secs(3);

/// The wait of acquisitions that must time out.
const SHORT_WAIT: Duration = Duration::from_millis(300);

/// How a backend's fencing numbers go (docs/guarantees.md §9, "fencing number").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fencing {
    /// A counter per key, incremented by each acquisition of that key (Redis, Redlock,
    /// PostgreSQL): consecutive numbers per key, untouched by other keys;
    /// `raise_fencing_counter` raises it (never lowers it) and the next acquisition draws the
    /// raised value + 1.
    PerKeyCounter,
    /// The entry's revision (etcd): strictly increasing across every acquisition of every key
    /// (cluster-wide); `raise_fencing_counter` is `Unsupported`.
    Revision,
}

/// What the backend documents where backends differ.
#[derive(Debug, Clone)]
pub struct Form {
    /// What [`Locker::backend`] says.
    pub backend: &'static str,
    pub fencing: Fencing,
    /// Whether another client (another process, the CLI) may extend and release a lock with its
    /// token. PostgreSQL session locks: no, `Error::Unsupported` (the lock ends with its session).
    pub release_elsewhere: bool,
    /// The longest key accepted (`leasehold::MAX_KEY_LEN`, or the backend's own lower limit).
    pub max_key_len: usize,
    /// Keys refused besides the empty one and the over-long ones (etcd and PostgreSQL: a NUL).
    pub more_bad_keys: Vec<String>,
    /// Whether a lock is granted by a majority of independent nodes (Redlock): clients racing
    /// for a free key can split the nodes' votes, so that none of them wins.
    pub majority: bool,
    /// Whether a semaphore records its number of permits, so that another number is
    /// `Error::Conflict` while permits are held. PostgreSQL session locks: no (the permits are
    /// `N` advisory locks; the backend cannot tell, as its docs say).
    pub permits_recorded: bool,
    /// Whether an election is the plain lock of its name (a plain lock on the name blocks it,
    /// and `leader()` is `Error::Conflict`). etcd: no, an election's entries have a key space
    /// of their own (`\0election\0K\0`), which no plain lock's overlaps.
    pub election_is_the_plain_lock: bool,
    /// Whether the backend announces elections and resignations, so that `Election::watch`
    /// hears them before any poll (Redis' release channel, etcd's watch, lease rows' `NOTIFY`);
    /// otherwise the watch polls.
    pub announces_leaders: bool,
}

impl Form {
    /// The form of a backend with a per-key counter, release from anywhere and `MAX_KEY_LEN`.
    pub fn counter(backend: &'static str) -> Form {
        Form {
            backend,
            fencing: Fencing::PerKeyCounter,
            release_elsewhere: true,
            max_key_len: MAX_KEY_LEN,
            more_bad_keys: Vec::new(),
            majority: backend == "redlock",
            permits_recorded: true,
            election_is_the_plain_lock: true,
            announces_leaders: backend == "redis",
        }
    }
}

/// A backend on real servers, as the checks need it.
pub trait Subject {
    /// Says which subject this is, in messages (`redis8 cluster`, `etcd (3 members)`, ...).
    fn name(&self) -> String;

    /// The URL a [`Locker`] connects to.
    fn url(&self) -> String;

    /// What the backend documents where backends differ.
    fn form(&self) -> Form;

    /// Makes the lock `key` stop being its holder's behind the client's back: the key deleted on
    /// every Redis node, the etcd entry deleted, the PostgreSQL session terminated or the lease row
    /// emptied (its token cleared). Returns once the servers did it.
    fn take_away(&self, key: &str) -> impl Future<Output = ()>;

    /// Makes the leader of the election `key` stop leading behind its client's back, as
    /// [`Subject::take_away`] does to a lock: by default that very thing (an election is the
    /// plain lock of its name); etcd deletes the leader's entry (the first under
    /// `\0election\0key\0`).
    fn take_away_leader(&self, key: &str) -> impl Future<Output = ()> {
        self.take_away(key)
    }

    /// A mark to pass to [`Subject::waiter_refused_since`], taken while `key` is held, before
    /// the waiter's locker is made.
    fn waiters_mark(&self, key: &str) -> impl Future<Output = Vec<u64>>;

    /// Whether the servers show that a waiting acquisition of `key` (by a locker made after
    /// `mark` was taken) reached them and found the lock held: its attempt refused, or its
    /// entry queued behind the holder's.
    fn waiter_refused_since(&self, key: &str, mark: &[u64]) -> impl Future<Output = bool>;

    /// A new [`Locker`] (its own connections) on the subject: [`connect`] by default.
    fn locker(&self) -> impl Future<Output = Locker> {
        connect(self)
    }
}

/// A [`Locker`] connected to `subject`'s URL, with the default options.
pub async fn connect<S: Subject + ?Sized>(subject: &S) -> Locker {
    let url = subject.url();
    let locker = Locker::connect(&url)
        .await
        .unwrap_or_else(|e| panic!("{}: connecting to {url}: {e}", subject.name()));
    assert_eq!(
        locker.backend(),
        subject.form().backend,
        "{}",
        subject.name()
    );
    locker
}

/// Runs every check on `subject`, in sequence, each on keys of its own.
pub async fn conforms<S: Subject>(subject: &S) {
    let began = Instant::now();
    let step = |what: &str| eprintln!("{}: {what} ({:?})", subject.name(), began.elapsed());
    step("bad keys are refused before any round trip");
    bad_keys_are_refused_before_any_round_trip(subject).await;
    step("TTLs outside the limits are refused before any round trip");
    bad_ttls_are_refused_before_any_round_trip(subject).await;
    step("exclusion");
    one_holder_at_a_time(subject).await;
    step("token-checked release and extend");
    release_and_extend_check_the_token(subject).await;
    step("loss reported");
    a_lock_taken_away_is_reported_lost(subject).await;
    step("fencing numbers");
    fencing_numbers_increase(subject).await;
    step("waiting");
    a_waiter_gets_the_lock_when_it_is_released(subject).await;
    step("with_lock");
    with_lock_always_releases(subject).await;
    step("min_hold");
    min_hold::a_released_lock_is_kept_until_min_hold(subject).await;
    step("semaphores, read-write locks and elections (or their refusal)");
    primitives::primitives_conform(subject).await;
    step("done");
}

/// `key` for messages: the long ones cut short.
fn shown(key: &str) -> String {
    match key.char_indices().nth(24) {
        Some((cut, _)) => format!("{:?}... ({} bytes)", &key[..cut], key.len()),
        None => format!("{key:?}"),
    }
}

fn key(check: &str) -> String {
    format!("conformance:{check}")
}

/// Options of a lock that stays held for the whole check.
fn held() -> LockOptions {
    LockOptions::new(LONG).fencing(true)
}

/// Options of an auto-extended lease whose loss is awaited.
fn renewed() -> LockOptions {
    LockOptions::new(RENEWED).auto_extend(true).fencing(true)
}

async fn take(
    subject: &impl Subject,
    locker: &Locker,
    key: &str,
    options: &LockOptions,
) -> LockGuard {
    match locker.try_acquire(key, options).await {
        Ok(TryAcquire::Acquired(guard)) => guard,
        Ok(TryAcquire::Busy { .. }) => {
            panic!("{}: {} busy, expected free", subject.name(), shown(key))
        }
        Err(e) => panic!("{}: try_acquire {}: {e}", subject.name(), shown(key)),
    }
}

async fn assert_busy(subject: &impl Subject, locker: &Locker, key: &str) {
    match locker.try_acquire(key, &held()).await {
        Ok(TryAcquire::Busy { .. }) => {}
        Ok(TryAcquire::Acquired(g)) => {
            panic!(
                "{}: {} acquired a second time (token {})",
                subject.name(),
                shown(key),
                g.token()
            )
        }
        Err(e) => panic!("{}: try_acquire {}: {e}", subject.name(), shown(key)),
    }
}

/// `guard` holds its key: the servers say so (holder and fencing number), and it is busy for
/// `other`.
async fn assert_holds(subject: &impl Subject, guard: &LockGuard, other: &Locker) {
    let name = subject.name();
    assert!(
        guard.is_held(),
        "{name}: {} no longer held",
        shown(guard.key())
    );
    let state = other
        .inspect(guard.key())
        .await
        .unwrap_or_else(|e| panic!("{name}: inspect: {e}"));
    assert_eq!(
        state.holder.as_deref(),
        Some(guard.token().expose()),
        "{name}: holder of {}",
        shown(guard.key())
    );
    if let Some(n) = guard.fencing_token() {
        assert_eq!(
            state.fencing_counter,
            Some(n),
            "{name}: fencing counter of {}",
            shown(guard.key())
        );
    }
    assert_busy(subject, other, guard.key()).await;
}

#[track_caller]
fn assert_not_held<T: std::fmt::Debug>(
    subject: &impl Subject,
    what: &str,
    result: leasehold::Result<T>,
) {
    match result {
        Err(Error::NotHeld { .. }) => {}
        other => panic!(
            "{}: {what}: expected NotHeld, got {other:?}",
            subject.name()
        ),
    }
}

/// A release and an extend of `key` with `token`, through each of `lockers`, are `NotHeld`.
async fn token_refused(
    subject: &impl Subject,
    lockers: &[&Locker],
    key: &str,
    token: &LockToken,
    what: &str,
) {
    for (i, locker) in lockers.iter().enumerate() {
        let with = format!("with {what} (client {i})");
        assert_not_held(
            subject,
            &format!("release {with}"),
            locker.release(key, token).await,
        );
        assert_not_held(
            subject,
            &format!("extend {with}"),
            locker.extend(key, token, LONG).await,
        );
    }
}

#[track_caller]
fn assert_unsupported<T: std::fmt::Debug>(
    subject: &impl Subject,
    what: &str,
    result: leasehold::Result<T>,
) {
    match result {
        Err(Error::Unsupported { backend, .. })
            if backend == subject.form().backend.split('-').next().unwrap() => {}
        other => panic!(
            "{}: {what}: expected Unsupported, got {other:?}",
            subject.name()
        ),
    }
}

/// Guarantee 5 (docs/guarantees.md §9): an empty key, a key longer than the backend's limit, and
/// the backend's other bad keys are `InvalidArgument` on every operation, **before any round
/// trip**: the future is ready at its first poll, so it never waited for a reply (or for
/// anything else). A key of exactly the limit is a lock like any other.
/// Issue 24: a TTL that leaves no real validity after the drift allowance (below
/// `leasehold::MIN_TTL`; below `MIN_RENEWED_TTL` for a renewed lease), one above `MAX_TTL`, and
/// a backoff that does not pause are refused with `InvalidArgument` before anything is sent.
/// (Before, `leasehold run KEY --ttl 2ms` spun on the server, and over PostgreSQL overflowed
/// its stack: every grant expired on arrival and was tried again.)
async fn bad_ttls_are_refused_before_any_round_trip(subject: &impl Subject) {
    use leasehold::{Backoff, MAX_TTL, MIN_RENEWED_TTL, MIN_TTL};
    let name = subject.name();
    let locker = subject.locker().await;
    let key = key("bad-ttl");
    let token = LockToken::random();
    let ms = Duration::from_millis;
    let bad: Vec<(LockOptions, &str)> = vec![
        (LockOptions::new(Duration::ZERO), "ttl"),
        (LockOptions::new(ms(1)), "ttl"),
        (LockOptions::new(ms(2)), "ttl"),
        (LockOptions::new(MIN_TTL - Duration::from_micros(1)), "ttl"),
        (LockOptions::new(MAX_TTL + ms(1)), "ttl"),
        (
            LockOptions::new(MIN_RENEWED_TTL - ms(1)).auto_extend(true),
            "ttl",
        ),
        (held().backoff(Backoff::constant(Duration::ZERO)), "backoff"),
    ];
    for (options, limit) in &bad {
        let waiting = options.clone().wait(GENEROUS);
        let ran = std::cell::Cell::new(false);
        let outcomes = [
            (
                "try_acquire",
                locker
                    .try_acquire(&key, options)
                    .map(|r| r.map(drop))
                    .now_or_never(),
            ),
            (
                "acquire",
                locker
                    .acquire(&key, &waiting)
                    .map(|r| r.map(drop))
                    .now_or_never(),
            ),
            (
                "with_lock",
                locker
                    .with_lock(&key, &waiting, |_| async { ran.set(true) })
                    .now_or_never(),
            ),
        ];
        for (op, outcome) in outcomes {
            match outcome {
                Some(Err(Error::InvalidArgument { what, .. })) if what == *limit => {}
                Some(other) => panic!(
                    "{name}: {op} with {options:?}: expected InvalidArgument ({limit}), got \
                     {other:?}"
                ),
                None => panic!("{name}: {op} with {options:?}: not refused at once"),
            }
        }
        assert!(
            !ran.get(),
            "{name}: with_lock ran its work with {options:?}"
        );
    }
    for ttl in [ms(1), MIN_TTL - Duration::from_micros(1), MAX_TTL + ms(1)] {
        match locker.extend(&key, &token, ttl).now_or_never() {
            Some(Err(Error::InvalidArgument { what: "ttl", .. })) => {}
            other => panic!("{name}: extend to {ttl:?}: expected InvalidArgument, got {other:?}"),
        }
    }
    // The limits themselves are accepted: a grant, or one that came too late for so short a
    // lease on a loaded machine (given back), never a refusal of the options.
    for options in [
        LockOptions::new(MIN_TTL),
        LockOptions::new(MIN_RENEWED_TTL).auto_extend(true),
    ] {
        match locker.try_acquire(&key, &options).await {
            Ok(TryAcquire::Acquired(g)) => match g.release().await {
                Ok(()) | Err(Error::NotHeld { .. }) => {}
                Err(e) => panic!("{name}: release of a lock with {options:?}: {e}"),
            },
            Err(Error::ExpiredOnArrival { .. }) => {}
            other => panic!("{name}: try_acquire with {options:?}: {other:?}"),
        }
    }
}

async fn bad_keys_are_refused_before_any_round_trip(subject: &impl Subject) {
    let name = subject.name();
    let form = subject.form();
    let locker = subject.locker().await;
    let mut bad = vec![
        String::new(),
        "k".repeat(MAX_KEY_LEN + 1),
        "k".repeat(form.max_key_len + 1),
    ];
    bad.extend(form.more_bad_keys.iter().cloned());
    let token = LockToken::random();
    let waiting = held().wait(GENEROUS);
    for key in &bad {
        let what = shown(key);
        let ran = std::cell::Cell::new(false);
        let outcomes = [
            (
                "try_acquire",
                locker
                    .try_acquire(key, &held())
                    .map(|r| r.map(drop))
                    .now_or_never(),
            ),
            (
                "acquire",
                locker
                    .acquire(key, &waiting)
                    .map(|r| r.map(drop))
                    .now_or_never(),
            ),
            ("release", locker.release(key, &token).now_or_never()),
            ("extend", locker.extend(key, &token, LONG).now_or_never()),
            (
                "inspect",
                locker.inspect(key).map(|r| r.map(drop)).now_or_never(),
            ),
            (
                "with_lock",
                locker
                    .with_lock(key, &waiting, |_| async { ran.set(true) })
                    .now_or_never(),
            ),
        ];
        for (op, outcome) in outcomes {
            match outcome {
                Some(Err(Error::InvalidArgument { what: "key", .. })) => {}
                Some(other) => {
                    panic!("{name}: {op} {what}: expected InvalidArgument, got {other:?}")
                }
                None => {
                    panic!("{name}: {op} {what}: not refused at once (it waited for something)")
                }
            }
        }
        assert!(!ran.get(), "{name}: with_lock ran its work on {what}");
    }
    // The limit itself is a key like any other.
    let longest = "k".repeat(form.max_key_len);
    let g = take(subject, &locker, &longest, &held()).await;
    assert_holds(subject, &g, &subject.locker().await).await;
    g.release()
        .await
        .unwrap_or_else(|e| panic!("{name}: release of the longest key: {e}"));
}

/// Guarantee 1: while A holds a key, B's `try_acquire` is busy and B's waiting `acquire` ends
/// with `NotAcquired` after its deadline, never with a second guard; of clients racing for a
/// free key exactly one wins (at most one on Redlock, whose nodes' votes can split).
async fn one_holder_at_a_time(subject: &impl Subject) {
    let name = subject.name();
    let k = key("exclusion");
    let (a, b, c) = (
        subject.locker().await,
        subject.locker().await,
        subject.locker().await,
    );
    let g = take(subject, &a, &k, &held()).await;
    assert_busy(subject, &b, &k).await;

    let t0 = Instant::now();
    match b.acquire(&k, &held().wait(SHORT_WAIT)).await {
        Err(Error::NotAcquired { .. }) => {}
        Ok(second) => panic!("{name}: a second guard for {k} (token {})", second.token()),
        Err(e) => panic!("{name}: waiting for {k}: expected NotAcquired, got {e}"),
    }
    // After the deadline (PostgreSQL's lock_timeout counts whole milliseconds).
    assert!(
        t0.elapsed() + Duration::from_millis(2) >= SHORT_WAIT,
        "{name}: NotAcquired after {:?}, before the deadline",
        t0.elapsed()
    );
    assert_holds(subject, &g, &c).await;
    g.release()
        .await
        .unwrap_or_else(|e| panic!("{name}: release: {e}"));
    let g = take(subject, &b, &k, &held()).await;
    g.release()
        .await
        .unwrap_or_else(|e| panic!("{name}: release: {e}"));

    // Clients racing for a free key: one guard (at most one where a majority decides: the
    // nodes' votes can split, and then the losers give their grants back).
    let raced = format!("{k}:race");
    let lockers = [a, b, c, subject.locker().await];
    let plain = LockOptions::new(LONG);
    let outcomes =
        futures_util::future::join_all(lockers.iter().map(|l| l.try_acquire(&raced, &plain))).await;
    let mut winners: Vec<LockGuard> = outcomes
        .into_iter()
        .filter_map(|o| {
            o.unwrap_or_else(|e| panic!("{name}: racing: {e}"))
                .acquired()
        })
        .collect();
    let n = winners.len();
    assert!(n <= 1, "{name}: {n} winners of one lock");
    assert!(n == 1 || subject.form().majority, "{name}: no winner");
    let winner = match winners.pop() {
        Some(winner) => winner,
        None => take(subject, &lockers[1], &raced, &plain).await,
    };
    assert_holds(subject, &winner, &lockers[0]).await;
    winner
        .release()
        .await
        .unwrap_or_else(|e| panic!("{name}: release: {e}"));
}

/// Guarantee 2: a release or extend with a token that does not hold the lock (a stranger's, or
/// a holder's after it let go) is `NotHeld` and leaves the holder's lock as it was; with the
/// holder's token it works, from another client too where the backend allows it
/// (`Unsupported`, and nothing changes, where it does not).
async fn release_and_extend_check_the_token(subject: &impl Subject) {
    let name = subject.name();
    let form = subject.form();
    let k = key("tokens");
    let (a, b, c) = (
        subject.locker().await,
        subject.locker().await,
        subject.locker().await,
    );
    let g = take(subject, &a, &k, &held()).await;
    let n = g.fencing_token().expect("fencing on");

    let stranger = LockToken::random();
    token_refused(subject, &[&a, &b], &k, &stranger, "a stranger's token").await;
    assert_holds(subject, &g, &c).await;

    // The holder's token works through the holder's client, and by the guard; the number stays.
    a.extend(&k, g.token(), LONG)
        .await
        .unwrap_or_else(|e| panic!("{name}: extend by token: {e}"));
    g.extend(LONG)
        .await
        .unwrap_or_else(|e| panic!("{name}: guard extend: {e}"));
    assert_holds(subject, &g, &c).await;
    assert_eq!(g.fencing_token(), Some(n));

    let old = g.token().clone();
    let h = if form.release_elsewhere {
        // Another process extends and releases with the token alone; the guard then finds its
        // lock gone, and a later holder's lock is out of its reach.
        b.extend(&k, &old, LONG)
            .await
            .unwrap_or_else(|e| panic!("{name}: extend from elsewhere: {e}"));
        assert_holds(subject, &g, &c).await;
        // The guard's own extend still finds its lock (another's extend kept it ours).
        g.extend(LONG)
            .await
            .unwrap_or_else(|e| panic!("{name}: guard extend after another's: {e}"));
        b.release(&k, &old)
            .await
            .unwrap_or_else(|e| panic!("{name}: release from elsewhere: {e}"));
        assert_eq!(
            c.inspect(&k).await.unwrap().holder,
            None,
            "{name}: released from elsewhere"
        );
        let h = take(subject, &c, &k, &held()).await;
        assert_not_held(
            subject,
            "the guard's extend after a release from elsewhere",
            g.extend(LONG).await,
        );
        assert!(
            !g.is_held(),
            "{name}: a guard refused NotHeld still says held"
        );
        assert_not_held(
            subject,
            "the guard's release after a release from elsewhere",
            g.release().await,
        );
        h
    } else {
        // Only the holding session can: refused, and the lock stays.
        assert_unsupported(
            subject,
            "extend from elsewhere",
            b.extend(&k, &old, LONG).await,
        );
        assert_unsupported(subject, "release from elsewhere", b.release(&k, &old).await);
        assert_holds(subject, &g, &c).await;
        // The client that holds it releases it by key and token, without the guard.
        drop(g.detach());
        a.release(&k, &old).await.unwrap_or_else(|e| {
            panic!("{name}: release by token through the holder's client: {e}")
        });
        take(subject, &c, &k, &held()).await
    };
    assert!(h.fencing_token().unwrap() > n, "{name}: numbers increase");
    // The old token, wherever it is used, does nothing to the new holder's lock.
    token_refused(subject, &[&a, &b, &c], &k, &old, "the old token").await;
    assert_holds(subject, &h, &b).await;
    let newer = h.token().clone();
    h.release()
        .await
        .unwrap_or_else(|e| panic!("{name}: release: {e}"));
    token_refused(subject, &[&c], &k, &newer, "a released token").await;
}

/// Guarantee 3, and 2 after a loss: an auto-extended lease whose lock is taken away behind its
/// back fires `lost()` (`NotHeld`), other leases of the same client keep going, and a guard
/// that lost its lock can neither extend nor release the next holder's. `with_lock` drops the
/// work of a lease lost under it and says so (`LockLost`).
async fn a_lock_taken_away_is_reported_lost(subject: &impl Subject) {
    let name = subject.name();
    let k = key("loss");
    let kept = format!("{k}:kept");
    let (a, b, c) = (
        subject.locker().await,
        subject.locker().await,
        subject.locker().await,
    );
    let g = a
        .acquire(&k, &renewed())
        .await
        .unwrap_or_else(|e| panic!("{name}: acquire: {e}"));
    let keep = a
        .acquire(&kept, &renewed())
        .await
        .unwrap_or_else(|e| panic!("{name}: acquire: {e}"));
    assert_holds(subject, &g, &c).await;

    subject.take_away(&k).await;
    tokio::time::timeout(GENEROUS, g.lost())
        .await
        .unwrap_or_else(|_| panic!("{name}: the loss of {k} was not reported"));
    assert_eq!(g.loss_reason(), Some(LossReason::NotHeld), "{name}");
    assert!(!g.is_held(), "{name}: lost but held");
    assert!(
        g.lost_token().is_cancelled(),
        "{name}: lost but its token not cancelled"
    );
    assert!(
        keep.is_held() && keep.loss_reason().is_none(),
        "{name}: the other lease went too"
    );

    // The next holder (waiting, as above), and what the old guard can do to it: nothing.
    let h = b
        .acquire(&k, &held().wait(GENEROUS))
        .await
        .unwrap_or_else(|e| panic!("{name}: acquire after the loss: {e}"));
    assert!(
        h.fencing_token() > g.fencing_token(),
        "{name}: numbers increase"
    );
    assert_not_held(subject, "the lost guard's extend", g.extend(RENEWED).await);
    token_refused(subject, &[&a, &b], &k, g.token(), "the lost token").await;
    assert_not_held(subject, "the lost guard's release", g.release().await);
    assert_holds(subject, &h, &c).await;
    assert_holds(subject, &keep, &c).await;
    h.release()
        .await
        .unwrap_or_else(|e| panic!("{name}: release: {e}"));
    keep.release()
        .await
        .unwrap_or_else(|e| panic!("{name}: release: {e}"));

    // with_lock: the work is dropped when its lease is lost, and the loss is the result.
    let k = format!("{k}:with_lock");
    let work = endless_work(subject, &a, &k, &renewed().wait(GENEROUS)).await;
    subject.take_away(&k).await;
    let outcome = tokio::time::timeout(GENEROUS, work)
        .await
        .unwrap_or_else(|_| panic!("{name}: with_lock went on after its lease was lost"))
        .unwrap();
    assert!(
        matches!(
            outcome,
            Err(Error::LockLost {
                reason: LossReason::NotHeld,
                ..
            })
        ),
        "{name}: with_lock under a lost lease: {outcome:?}"
    );
    // Free again (a waiting acquisition: a terminated PostgreSQL session tells its client
    // before its process exits and frees its locks).
    let g = b
        .acquire(&k, &held().wait(GENEROUS))
        .await
        .unwrap_or_else(|e| panic!("{name}: acquire after the loss: {e}"));
    g.release().await.unwrap();
}

/// Guarantee 4, in the backend's form: numbers strictly increase over acquisitions by clients
/// taking turns. A per-key counter: consecutive per key, each key its own, raised (never lowered)
/// by `raise_fencing_counter`. A revision: every number above every earlier one, of any key.
/// Without fencing, no number.
async fn fencing_numbers_increase(subject: &impl Subject) {
    let name = subject.name();
    let form = subject.form();
    let keys = [key("fencing:a"), key("fencing:b")];
    let lockers = [
        subject.locker().await,
        subject.locker().await,
        subject.locker().await,
    ];
    let mut last: [Option<u64>; 2] = [None, None];
    let mut highest = 0;
    for round in 0..6 {
        for (i, k) in keys.iter().enumerate() {
            let locker = &lockers[(round + i) % lockers.len()];
            let g = take(subject, locker, k, &held()).await;
            let n = g.fencing_token().expect("fencing on");
            assert_holds(subject, &g, &lockers[(round + i + 1) % lockers.len()]).await;
            match (form.fencing, last[i]) {
                (Fencing::PerKeyCounter, Some(prev)) => {
                    assert_eq!(
                        n,
                        prev + 1,
                        "{name}: {k}: not the next number of its own counter"
                    )
                }
                (Fencing::Revision, _) => {
                    assert!(n > highest, "{name}: {k}: revision {n} not above {highest}")
                }
                (Fencing::PerKeyCounter, None) => {}
            }
            last[i] = Some(n);
            highest = highest.max(n);
            g.release()
                .await
                .unwrap_or_else(|e| panic!("{name}: release: {e}"));
        }
    }

    let k = &keys[0];
    let prev = last[0].unwrap();
    match form.fencing {
        Fencing::PerKeyCounter => {
            let raised = lockers[0].raise_fencing_counter(k, prev + 10).await;
            assert_eq!(raised.ok(), Some(prev + 10), "{name}: raised");
            let kept = lockers[1].raise_fencing_counter(k, 1).await;
            assert_eq!(kept.ok(), Some(prev + 10), "{name}: a raise never lowers");
            let g = take(subject, &lockers[2], k, &held()).await;
            assert_eq!(
                g.fencing_token(),
                Some(prev + 11),
                "{name}: drawn past the raise"
            );
            g.release().await.unwrap();
        }
        Fencing::Revision => {
            assert_unsupported(
                subject,
                "raise_fencing_counter",
                lockers[0].raise_fencing_counter(k, prev + 10).await,
            );
        }
    }
    let g = take(subject, &lockers[0], k, &LockOptions::new(LONG)).await;
    assert_eq!(g.fencing_token(), None, "{name}: a number without fencing");
    g.release().await.unwrap();
}

/// Waiting: a waiter that the servers saw refused gets the lock once the holder releases it,
/// before its deadline; another one whose deadline passes meanwhile gets `NotAcquired`.
async fn a_waiter_gets_the_lock_when_it_is_released(subject: &impl Subject) {
    let name = subject.name();
    let k = key("waiting");
    let a = subject.locker().await;
    let g = take(subject, &a, &k, &held()).await;
    let mark = subject.waiters_mark(&k).await;
    let w = subject.locker().await;
    let waiter = {
        let k = k.clone();
        tokio::spawn(async move { w.acquire(&k, &held().wait(LONG)).await })
    };
    let seen = tokio::time::timeout(GENEROUS, async {
        while !subject.waiter_refused_since(&k, &mark).await {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    assert!(seen.is_ok(), "{name}: the waiter was never seen refused");

    let x = subject.locker().await;
    let t0 = Instant::now();
    match x.acquire(&k, &held().wait(SHORT_WAIT)).await {
        Err(Error::NotAcquired { .. }) => {}
        other => panic!(
            "{name}: a second waiter past its deadline: {:?}",
            other.map(|g| g.token().clone())
        ),
    }
    assert!(
        t0.elapsed() + Duration::from_millis(2) >= SHORT_WAIT,
        "{name}: before the deadline"
    );
    assert!(
        !waiter.is_finished(),
        "{name}: the waiter ended while the lock was held"
    );
    assert_holds(subject, &g, &x).await;

    let n = g.fencing_token().unwrap();
    g.release()
        .await
        .unwrap_or_else(|e| panic!("{name}: release: {e}"));
    let h = tokio::time::timeout(GENEROUS, waiter)
        .await
        .unwrap_or_else(|_| panic!("{name}: the waiter did not get the released lock"))
        .unwrap()
        .unwrap_or_else(|e| panic!("{name}: the waiter: {e}"));
    assert!(h.fencing_token().unwrap() > n, "{name}: numbers increase");
    assert_holds(subject, &h, &x).await;
    h.release().await.unwrap();
}

/// `with_lock` releases the lock whatever the work does: returns a value, returns an error,
/// panics (the panic goes on after the release), or is dropped mid-work. Each time another
/// client takes the lock at once (the TTL is a minute: it is not the expiry that frees it).
async fn with_lock_always_releases(subject: &impl Subject) {
    let name = subject.name();
    let k = key("with_lock");
    let (a, b) = (subject.locker().await, subject.locker().await);
    let options = held().wait(GENEROUS);
    let free_at_once = |what: &'static str| free_at_once(subject, &b, &k, what);

    let value = a
        .with_lock(&k, &options, |lease| async move {
            assert!(lease.is_held());
            lease.fencing_token()
        })
        .await
        .unwrap_or_else(|e| panic!("{name}: with_lock: {e}"));
    assert!(value.is_some(), "{name}: the work saw no number");
    free_at_once("the work returned").await;

    let failed = a
        .with_lock(&k, &options, |_| async { Err::<(), _>("the work failed") })
        .await
        .unwrap_or_else(|e| panic!("{name}: with_lock: {e}"));
    assert_eq!(failed, Err("the work failed"));
    free_at_once("the work returned an error").await;

    let panicked = std::panic::AssertUnwindSafe(a.with_lock(&k, &options, |_| async {
        panic!("the work panicked");
    }))
    .catch_unwind()
    .await;
    let payload = panicked
        .err()
        .unwrap_or_else(|| panic!("{name}: the panic was swallowed"));
    assert_eq!(payload.downcast_ref::<&str>(), Some(&"the work panicked"));
    free_at_once("the work panicked").await;

    // Dropped mid-work: the guard releases in the background; another client waiting for the
    // lock gets it long before its TTL.
    let work = endless_work(subject, &a, &k, &options).await;
    assert_busy(subject, &b, &k).await;
    work.abort();
    assert!(work.await.unwrap_err().is_cancelled());
    let g = b
        .acquire(&k, &held().wait(GENEROUS))
        .await
        .unwrap_or_else(|e| panic!("{name}: after with_lock was dropped: {e}"));
    g.release().await.unwrap();
}

/// A task running `with_lock` on `key` whose work never ends, once the work has begun.
async fn endless_work(
    subject: &impl Subject,
    locker: &Locker,
    key: &str,
    options: &LockOptions,
) -> tokio::task::JoinHandle<leasehold::Result<()>> {
    let (started_tx, started) = tokio::sync::oneshot::channel();
    let work = {
        let (locker, key, options) = (locker.clone(), key.to_string(), options.clone());
        tokio::spawn(async move {
            locker
                .with_lock(&key, &options, |_lease| async move {
                    started_tx.send(()).unwrap();
                    std::future::pending::<()>().await
                })
                .await
        })
    };
    let began = started.await;
    assert!(
        began.is_ok(),
        "{}: with_lock did not run its work",
        subject.name()
    );
    work
}

/// `key` is free for `locker` at once (then released again).
async fn free_at_once(subject: &impl Subject, locker: &Locker, key: &str, after: &str) {
    match locker.try_acquire(key, &held()).await {
        Ok(TryAcquire::Acquired(g)) => g.release().await.unwrap(),
        Ok(TryAcquire::Busy { .. }) => {
            panic!("{}: {key} still held after {after}", subject.name())
        }
        Err(e) => panic!("{}: try_acquire {key} after {after}: {e}", subject.name()),
    }
}
