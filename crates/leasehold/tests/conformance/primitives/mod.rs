//! The primitives beyond the plain lock, through [`Locker`]: on a backend that has one
//! ([`leasehold::Backend::has`]) its guarantees (docs/guarantees.md §3-§6), on one that does not
//! an `Unsupported` naming the backend, before any round trip. What `has` says and what the
//! locker does must agree: a backend cannot claim a primitive it refuses, nor offer one it
//! does not declare.
//!
//! Each primitive's contract is checked here once for every backend that has it: bad input
//! refused before any round trip, exactly N permits, writers alone and readers together, one
//! leader with rising terms, token-checked release and extend, waiters served by a release.
//! The per-backend test files keep only what is backend-specific (representations, wake-ups
//! of one waiter, server-side queues, failure modes).

use std::cell::Cell;
use std::time::Duration;

use futures_util::FutureExt;
use leasehold::{
    Election, Error, LeaderWatch, LockGuard, LockOptions, LockToken, Lockable, Locker, LossReason,
    MAX_ELECTION_ID_LEN, MAX_KEY_LEN, MAX_PERMITS, MAX_TTL, MIN_RENEWED_TTL, MIN_TTL, Primitive,
    RwLock, Semaphore, TryAcquire,
};

mod election;
mod rwlock;
mod semaphore;

use election::*;
use rwlock::*;
use semaphore::*;

use super::{GENEROUS, LONG, RENEWED, SHORT_WAIT, Subject, key, shown};

/// Runs the primitives' checks, or the refusals, as the backend declares.
pub async fn primitives_conform(subject: &impl Subject) {
    let locker = subject.locker().await;
    let kind = locker.kind();
    for primitive in [Primitive::Semaphore, Primitive::RwLock, Primitive::Election] {
        if kind.has(primitive) {
            options_the_primitive_lacks_refused(subject, &locker, primitive).await;
            bad_names_refused(subject, &locker, primitive);
            match primitive {
                Primitive::Semaphore => {
                    semaphore_bad_input_refused(subject).await;
                    semaphore_admits_n(subject).await;
                    semaphore_release_and_extend_check_the_token(subject).await;
                    semaphore_refuses_another_number_of_permits(subject).await;
                }
                Primitive::RwLock => {
                    rwlock_bad_input_refused(subject).await;
                    rwlock_excludes_and_does_not_starve_writers(subject).await;
                    rwlock_release_and_extend_check_the_token(subject).await;
                }
                Primitive::Election => {
                    election_bad_input_refused(subject).await;
                    election_has_one_leader_and_rising_terms(subject).await;
                    election_and_a_plain_lock_of_its_name(subject).await;
                    election_watch_follows_each_change(subject).await;
                    a_leader_taken_away_is_told_and_replaced(subject).await;
                }
                _ => unreachable!(),
            }
        } else {
            refused(subject, &locker, primitive);
        }
    }
    fencing_refused_where_it_fences_nothing(subject, &locker).await;
    every_lockable_dispatches_alike(subject, &locker).await;
    if kind.has(Primitive::RwLock) {
        rwlock_tokens_are_checked_by_side(subject).await;
    }
}

/// §3-§4: fencing is `Unsupported`, at once, for a semaphore's permit (several holders at once:
/// one number would fence none of them) and for a reader (readers share; only the writer gets
/// a number), as Redis, etcd and PostgreSQL document (`refuse("fencing (a semaphore admits
/// several holders at once)")`, `refuse("fencing for readers ...")`); nothing is taken.
///
/// It failed on `memory://`, which granted a fenced permit and a fenced read, each with a
/// number, before the option table (`Backend::refuses`) decided this for every backend.
async fn fencing_refused_where_it_fences_nothing(subject: &impl Subject, locker: &Locker) {
    let name = subject.name();
    let kind = locker.kind();
    let fenced = LockOptions::new(LONG).fencing(true);
    let k = key("fencing-primitive");
    if kind.has(Primitive::Semaphore) {
        let sem = locker.semaphore(&k, 2).unwrap();
        assert_unsupported_at_once(
            subject,
            "fencing",
            "semaphore try_acquire with fencing",
            sem.try_acquire(&fenced).map(|r| r.map(drop)).now_or_never(),
        );
        assert_unsupported_at_once(
            subject,
            "fencing",
            "semaphore acquire with fencing",
            sem.acquire(&fenced.clone().wait(GENEROUS))
                .map(|r| r.map(drop))
                .now_or_never(),
        );
        assert_eq!(
            sem.holders().await.unwrap(),
            0,
            "{name}: a refused fenced attempt took a permit"
        );
    }
    if kind.has(Primitive::RwLock) {
        let rw = locker.rwlock(&k).unwrap();
        assert_unsupported_at_once(
            subject,
            "fencing",
            "try_read with fencing",
            rw.try_read(&fenced).map(|r| r.map(drop)).now_or_never(),
        );
        assert_unsupported_at_once(
            subject,
            "fencing",
            "read with fencing",
            rw.read(&fenced.clone().wait(GENEROUS))
                .map(|r| r.map(drop))
                .now_or_never(),
        );
        assert_eq!(
            rw.readers().await.unwrap(),
            0,
            "{name}: a refused fenced read was taken"
        );
    }
}

/// §3-§6, the option table (`Backend::refuses`): fair mode, `replica_ack` and `min_hold` are
/// options of the plain lock only. On a primitive each is `Unsupported` naming the backend and
/// the option, at once (before any round trip), from every acquisition (`try_acquire` and
/// `acquire` of a permit, both sides' `try_*` and waiting forms, `campaign`), and nothing is
/// taken. Finding M4 of the 2026-12-02 review: `min_hold` was refused on Redis, ignored on
/// PostgreSQL and applied on etcd and memory.
async fn options_the_primitive_lacks_refused(
    subject: &impl Subject,
    locker: &Locker,
    primitive: Primitive,
) {
    let name = subject.name();
    let k = key("options-primitive");
    let plain = LockOptions::new(LONG);
    let lacking = [
        ("fair mode", plain.clone().fair(true)),
        (
            "replica_ack",
            plain.clone().replica_ack(1, Duration::from_secs(1)),
        ),
        ("min_hold", plain.clone().min_hold(Duration::from_secs(1))),
    ];
    for (option, options) in &lacking {
        let waiting = options.clone().wait(GENEROUS);
        let refused = match primitive {
            Primitive::Semaphore => {
                let s = locker.semaphore(&k, 2).unwrap();
                vec![
                    (
                        "try_acquire",
                        ready(subject, "try_acquire", s.try_acquire(options)).map(drop),
                    ),
                    (
                        "acquire",
                        ready(subject, "acquire", s.acquire(&waiting)).map(drop),
                    ),
                ]
            }
            Primitive::RwLock => {
                let rw = locker.rwlock(&k).unwrap();
                vec![
                    (
                        "try_read",
                        ready(subject, "try_read", rw.try_read(options)).map(drop),
                    ),
                    ("read", ready(subject, "read", rw.read(&waiting)).map(drop)),
                    (
                        "try_write",
                        ready(subject, "try_write", rw.try_write(options)).map(drop),
                    ),
                    (
                        "write",
                        ready(subject, "write", rw.write(&waiting)).map(drop),
                    ),
                ]
            }
            Primitive::Election => {
                let e = locker.election(&k).unwrap();
                vec![
                    (
                        "campaign",
                        ready(subject, "campaign", e.campaign("me", options)).map(drop),
                    ),
                    (
                        "bounded campaign",
                        ready(subject, "campaign", e.campaign("me", &waiting)).map(drop),
                    ),
                ]
            }
            _ => unreachable!(),
        };
        for (op, outcome) in refused {
            match outcome {
                Err(Error::Unsupported { backend, what }) => {
                    assert_eq!(backend, locker.backend(), "{name}: {primitive:?} {op}");
                    assert!(what.contains(option), "{name}: {primitive:?} {op}: {what}");
                }
                other => panic!("{name}: {primitive:?} {op} with {option}: {other:?}"),
            }
        }
    }
    let nothing_taken = match primitive {
        Primitive::Semaphore => locker.semaphore(&k, 2).unwrap().holders().await.unwrap() == 0,
        Primitive::RwLock => {
            let rw = locker.rwlock(&k).unwrap();
            let free = try_take(subject, "a writer after refusals", rw.try_write(&plain)).await;
            match free {
                Some(w) => {
                    w.release().await.unwrap();
                    true
                }
                None => false,
            }
        }
        Primitive::Election => locker
            .election(&k)
            .unwrap()
            .leader()
            .await
            .unwrap()
            .is_none(),
        _ => unreachable!(),
    };
    assert!(
        nothing_taken,
        "{name}: a refused {primitive:?} took something"
    );
}

/// A primitive the backend lacks: `Unsupported` naming the backend, at once.
fn refused(subject: &impl Subject, locker: &Locker, primitive: Primitive) {
    let name = subject.name();
    let k = key("missing");
    let made = match primitive {
        Primitive::Semaphore => locker.semaphore(&k, 2).map(drop),
        Primitive::RwLock => locker.rwlock(&k).map(drop),
        Primitive::Election => locker.election(&k).map(drop),
        _ => unreachable!(),
    };
    match made {
        Err(Error::Unsupported { backend, what }) => {
            assert_eq!(backend, locker.backend(), "{name}: {primitive:?}");
            assert!(what.contains("redis"), "{name}: {what}");
        }
        other => panic!("{name}: {primitive:?} is not declared, yet the locker gave {other:?}"),
    }
}

fn ready<T>(subject: &impl Subject, what: &str, f: impl std::future::Future<Output = T>) -> T {
    f.now_or_never().unwrap_or_else(|| {
        panic!(
            "{}: {what} waited for something (a round trip?)",
            subject.name()
        )
    })
}

async fn try_take(
    subject: &impl Subject,
    what: &str,
    attempt: impl std::future::Future<Output = leasehold::Result<TryAcquire>>,
) -> Option<LockGuard> {
    match attempt.await {
        Ok(TryAcquire::Acquired(g)) => Some(g),
        Ok(TryAcquire::Busy { .. }) => None,
        Err(e) => panic!("{}: {what}: {e}", subject.name()),
    }
}

/// `outcome` (a future polled once) is `InvalidArgument` about `arg`: refused at once, before
/// any round trip.
#[track_caller]
fn assert_invalid<T: std::fmt::Debug>(
    subject: &impl Subject,
    arg: &str,
    op: &str,
    outcome: Option<leasehold::Result<T>>,
) {
    let name = subject.name();
    match outcome {
        Some(Err(Error::InvalidArgument { what, .. })) if what == arg => {}
        Some(other) => panic!("{name}: {op}: expected InvalidArgument ({arg}), got {other:?}"),
        None => panic!("{name}: {op}: not refused at once (it waited for something)"),
    }
}

/// `outcome` (a future polled once) is `Unsupported` about `about`, at once.
#[track_caller]
fn assert_unsupported_at_once<T: std::fmt::Debug>(
    subject: &impl Subject,
    about: &str,
    op: &str,
    outcome: Option<leasehold::Result<T>>,
) {
    let name = subject.name();
    match outcome {
        Some(Err(Error::Unsupported { what, .. })) if what.contains(about) => {}
        Some(other) => panic!("{name}: {op}: expected Unsupported ({about}), got {other:?}"),
        None => panic!("{name}: {op}: not refused at once (it waited for something)"),
    }
}

#[track_caller]
fn assert_not_held(subject: &impl Subject, what: &str, result: leasehold::Result<()>) {
    match result {
        Err(Error::NotHeld { .. }) => {}
        other => panic!(
            "{}: {what}: expected NotHeld, got {other:?}",
            subject.name()
        ),
    }
}

#[track_caller]
fn assert_refused_elsewhere(subject: &impl Subject, what: &str, result: leasehold::Result<()>) {
    match result {
        Err(Error::Unsupported { .. }) => {}
        other => panic!(
            "{}: {what} from another client: expected Unsupported (only the holding session \
             can), got {other:?}",
            subject.name()
        ),
    }
}

/// TTLs no primitive takes (`InvalidArgument`, "ttl"): none left after the drift allowance
/// (below `MIN_TTL`; below `MIN_RENEWED_TTL` for a renewed lease), or above `MAX_TTL`.
fn bad_ttls() -> Vec<LockOptions> {
    let ms = Duration::from_millis;
    vec![
        LockOptions::new(Duration::ZERO),
        LockOptions::new(ms(1)),
        LockOptions::new(MIN_TTL - Duration::from_micros(1)),
        LockOptions::new(MAX_TTL + ms(1)),
        LockOptions::new(MIN_RENEWED_TTL - ms(1)).auto_extend(true),
    ]
}

/// TTLs no extend takes.
fn bad_extend_ttls() -> [Duration; 3] {
    [
        Duration::ZERO,
        MIN_TTL - Duration::from_micros(1),
        MAX_TTL + Duration::from_millis(1),
    ]
}

/// The names the backend refuses for a lock (empty, over `MAX_KEY_LEN` or its own lower
/// limit, its other bad keys) are refused for the primitive too: `InvalidArgument` from the
/// constructor, which makes no round trip.
fn bad_names_refused(subject: &impl Subject, locker: &Locker, primitive: Primitive) {
    let name = subject.name();
    let form = subject.form();
    let mut bad = vec![
        String::new(),
        "k".repeat(MAX_KEY_LEN + 1),
        "k".repeat(form.max_key_len + 1),
    ];
    bad.extend(form.more_bad_keys.iter().cloned());
    for bad in &bad {
        let made = match primitive {
            Primitive::Semaphore => locker.semaphore(bad, 2).map(drop),
            Primitive::RwLock => locker.rwlock(bad).map(drop),
            Primitive::Election => locker.election(bad).map(drop),
            _ => unreachable!(),
        };
        match made {
            Err(Error::InvalidArgument { .. }) => {}
            other => panic!(
                "{name}: {primitive:?} named {}: expected InvalidArgument, got {other:?}",
                shown(bad)
            ),
        }
    }
}

/// The one dispatch (`Lockable`): a plain lock (`Locker::lock`), a semaphore of one permit and
/// both sides of a read-write lock, each held as a `Box<dyn Lockable>` as the CLI, the Python
/// binding and the lab hold them, behave as their own handles do: taken once and then busy,
/// a stranger's token refused for release and extend, and free again after a release by the
/// holder's token (not its guard).
async fn every_lockable_dispatches_alike(subject: &impl Subject, locker: &Locker) {
    let name = subject.name();
    let kind = locker.kind();
    let opts = LockOptions::new(LONG);
    let mut taken: Vec<(&str, Box<dyn Lockable>)> =
        vec![("a lock", Box::new(locker.lock(&key("lockable:lock"))))];
    if kind.has(Primitive::Semaphore) {
        let sem = locker.semaphore(&key("lockable:permit"), 1).unwrap();
        taken.push(("a permit", Box::new(sem)));
    }
    if kind.has(Primitive::RwLock) {
        let rw = locker.rwlock(&key("lockable:rw")).unwrap();
        assert!(!rw.read_side().is_write() && rw.write_side().is_write());
        taken.push(("a write side", Box::new(rw.write_side())));
    }
    let stranger = LockToken::new("not-the-holders-token").unwrap();
    for (what, lockable) in &taken {
        let guard = try_take(subject, what, lockable.try_acquire(&opts))
            .await
            .unwrap_or_else(|| panic!("{name}: {what} was refused"));
        assert!(
            matches!(
                lockable.try_acquire(&opts).await,
                Ok(TryAcquire::Busy { .. })
            ),
            "{name}: {what} taken twice through Lockable"
        );
        assert!(
            matches!(
                lockable.release(&stranger).await,
                Err(Error::NotHeld { .. })
            ),
            "{name}: {what} released with a stranger's token"
        );
        assert!(
            matches!(
                lockable.extend(&stranger, LONG).await,
                Err(Error::NotHeld { .. })
            ),
            "{name}: {what} extended with a stranger's token"
        );
        let token = guard.token().clone();
        lockable
            .extend(&token, LONG)
            .await
            .unwrap_or_else(|e| panic!("{name}: {what}: the holder's extend: {e}"));
        lockable
            .release(&token)
            .await
            .unwrap_or_else(|e| panic!("{name}: {what}: the holder's release: {e}"));
        let again = try_take(subject, what, lockable.try_acquire(&opts))
            .await
            .unwrap_or_else(|| panic!("{name}: {what} not free after its release by token"));
        drop(guard);
        again.release().await.unwrap();
    }
}
