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

/// §4, each side on its own: a reader's token releases and extends no write lease, and the
/// writer's token no read lease (`NotHeld`, and the holder keeps its lease), through the
/// holder's client and, where the backend takes tokens from anywhere, another one, as
/// `RwLock::release_write` documents ("`NotHeld` if it does not hold it") and etcd and
/// PostgreSQL check.
///
/// It failed on `memory://`, whose sides were one release/extend of the name: a
/// `release_write` with a reader's token released the reader.
async fn rwlock_tokens_are_checked_by_side(subject: &impl Subject) {
    let name = subject.name();
    let k = key("rwlock:sides");
    let (a, b) = (subject.locker().await, subject.locker().await);
    let (ra, rb) = (a.rwlock(&k).unwrap(), b.rwlock(&k).unwrap());
    let opts = LockOptions::new(LONG);
    // Through the holder's client, and another one where tokens reach that far.
    let clients: &[&RwLock] = if subject.form().release_elsewhere {
        &[&ra, &rb]
    } else {
        &[&ra]
    };
    let r = try_take(subject, "a reader", ra.try_read(&opts))
        .await
        .unwrap_or_else(|| panic!("{name}: the reader was refused"));
    side_token_refused(subject, clients, true, r.token(), "a reader's token").await;
    assert!(r.is_held(), "{name}");
    assert_eq!(
        rb.readers().await.unwrap(),
        1,
        "{name}: the reader was released"
    );
    r.release().await.unwrap();
    let w = try_take(subject, "a writer", ra.try_write(&opts))
        .await
        .unwrap_or_else(|| panic!("{name}: the writer was refused"));
    side_token_refused(subject, clients, false, w.token(), "the writer's token").await;
    assert!(w.is_held(), "{name}");
    assert!(
        try_take(subject, "a reader beside the writer", rb.try_read(&opts))
            .await
            .is_none(),
        "{name}: the writer was released by a read-side release"
    );
    w.release()
        .await
        .unwrap_or_else(|e| panic!("{name}: the writer's release: {e}"));
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

/// §3, bad input: a number of permits of 0 or above `MAX_PERMITS` is `InvalidArgument`
/// ("permits") from the constructor (`MAX_PERMITS` itself is taken); a TTL outside the limits
/// is `InvalidArgument` ("ttl") from `try_acquire`, `acquire`, `with_permit` (which does not
/// run its work) and `extend`, before any round trip (ready at its first poll). Nothing was
/// taken. (Fencing: [`fencing_refused_where_it_fences_nothing`].)
async fn semaphore_bad_input_refused(subject: &impl Subject) {
    let name = subject.name();
    let locker = subject.locker().await;
    let k = key("semaphore:bad");
    for bad in [0, MAX_PERMITS + 1, u32::MAX] {
        match locker.semaphore(&k, bad) {
            Err(Error::InvalidArgument {
                what: "permits", ..
            }) => {}
            other => panic!("{name}: {bad} permits: expected InvalidArgument, got {other:?}"),
        }
    }
    let most = locker
        .semaphore(&k, MAX_PERMITS)
        .unwrap_or_else(|e| panic!("{name}: MAX_PERMITS permits: {e}"));
    assert_eq!(most.permits(), MAX_PERMITS, "{name}");
    let sem = locker.semaphore(&k, 2).unwrap();
    for options in bad_ttls() {
        let waiting = options.clone().wait(GENEROUS);
        let ran = Cell::new(false);
        let op = |op: &str| format!("semaphore {op} with {options:?}");
        assert_invalid(
            subject,
            "ttl",
            &op("try_acquire"),
            sem.try_acquire(&options)
                .map(|r| r.map(drop))
                .now_or_never(),
        );
        assert_invalid(
            subject,
            "ttl",
            &op("acquire"),
            sem.acquire(&waiting).map(|r| r.map(drop)).now_or_never(),
        );
        assert_invalid(
            subject,
            "ttl",
            &op("with_permit"),
            sem.with_permit(&waiting, |_| async { ran.set(true) })
                .now_or_never(),
        );
        assert!(
            !ran.get(),
            "{name}: with_permit ran its work with {options:?}"
        );
    }
    let token = LockToken::random();
    for ttl in bad_extend_ttls() {
        assert_invalid(
            subject,
            "ttl",
            &format!("semaphore extend to {ttl:?}"),
            sem.extend(&token, ttl).now_or_never(),
        );
    }
    assert_eq!(
        sem.holders().await.unwrap(),
        0,
        "{name}: a refused attempt took a permit"
    );
}

/// §3: of three clients racing for 2 free permits exactly two win (with distinct tokens), and
/// `holders()` counts them; while both are held, a third `try_acquire` is busy and a bounded
/// `acquire` ends with `NotAcquired` at its deadline; a waiter seen still waiting meanwhile
/// gets the permit a release frees, after which the semaphore is full again; each release
/// brings `holders()` down by one.
async fn semaphore_admits_n(subject: &impl Subject) {
    let name = subject.name();
    let k = key("semaphore");
    let lockers = [
        subject.locker().await,
        subject.locker().await,
        subject.locker().await,
    ];
    let sems: Vec<Semaphore> = lockers
        .iter()
        .map(|l| l.semaphore(&k, 2).unwrap())
        .collect();
    let opts = LockOptions::new(LONG);
    let outcomes = futures_util::future::join_all(sems.iter().map(|s| s.try_acquire(&opts))).await;
    let mut held: Vec<LockGuard> = outcomes
        .into_iter()
        .filter_map(|o| {
            o.unwrap_or_else(|e| panic!("{name}: racing for a permit: {e}"))
                .acquired()
        })
        .collect();
    assert_eq!(held.len(), 2, "{name}: winners of 2 permits among 3 racing");
    assert_ne!(
        held[0].token().expose(),
        held[1].token().expose(),
        "{name}: two permits, one token"
    );
    assert_eq!(sems[0].holders().await.unwrap(), 2, "{name}: holders");
    for s in &sems {
        assert!(
            try_take(
                subject,
                "a permit of a full semaphore",
                s.try_acquire(&opts)
            )
            .await
            .is_none(),
            "{name}: a third holder of 2 permits"
        );
    }
    match sems[2].acquire(&opts.clone().wait(SHORT_WAIT)).await {
        Err(Error::NotAcquired { .. }) => {}
        other => panic!(
            "{name}: a bounded wait on a full semaphore: {:?}",
            other.map(|g| g.token().clone())
        ),
    }

    // A waiter gets the permit a release frees.
    let waiter = {
        let s = sems[2].clone();
        tokio::spawn(async move { s.acquire(&LockOptions::new(LONG).wait(LONG)).await })
    };
    match sems[1].acquire(&opts.clone().wait(SHORT_WAIT)).await {
        Err(Error::NotAcquired { .. }) => {}
        other => panic!(
            "{name}: a second waiter past its deadline: {:?}",
            other.map(|g| g.token().clone())
        ),
    }
    assert!(
        !waiter.is_finished(),
        "{name}: the waiter ended while every permit was held"
    );
    assert_eq!(sems[0].holders().await.unwrap(), 2, "{name}: holders");
    held.remove(0).release().await.unwrap();
    let third = tokio::time::timeout(GENEROUS, waiter)
        .await
        .unwrap_or_else(|_| panic!("{name}: the waiter never got the freed permit"))
        .unwrap()
        .unwrap_or_else(|e| panic!("{name}: the waiter: {e}"));
    assert!(third.is_held(), "{name}");
    assert_eq!(sems[1].holders().await.unwrap(), 2, "{name}: holders");
    assert!(
        try_take(
            subject,
            "a permit after the handover",
            sems[0].try_acquire(&opts)
        )
        .await
        .is_none(),
        "{name}: a third holder after the handover"
    );
    third.release().await.unwrap();
    assert_eq!(sems[0].holders().await.unwrap(), 1, "{name}: holders");
    held.remove(0).release().await.unwrap();
    assert_eq!(
        sems[0].holders().await.unwrap(),
        0,
        "{name}: holders at the end"
    );
}

/// A release and an extend of a permit with `token`, through each of `sems`, are `NotHeld`.
async fn permit_token_refused(
    subject: &impl Subject,
    sems: &[&Semaphore],
    token: &LockToken,
    what: &str,
) {
    for (i, s) in sems.iter().enumerate() {
        let with = format!("with {what} (client {i})");
        assert_not_held(
            subject,
            &format!("semaphore release {with}"),
            s.release(token).await,
        );
        assert_not_held(
            subject,
            &format!("semaphore extend {with}"),
            s.extend(token, LONG).await,
        );
    }
}

/// §3, token-checked: a release or extend with a token that holds no permit (a stranger's, a
/// released permit's, also once another client holds the freed permit) is `NotHeld` and leaves
/// the permits as they were; with the holder's token both work, by the guard and by token, and
/// from another client too where the backend allows it (`Unsupported`, and nothing changes,
/// where only the holding session can: PostgreSQL session locks).
async fn semaphore_release_and_extend_check_the_token(subject: &impl Subject) {
    let name = subject.name();
    let form = subject.form();
    let k = key("semaphore:tokens");
    let (a, b, c) = (
        subject.locker().await,
        subject.locker().await,
        subject.locker().await,
    );
    let (sa, sb, sc) = (
        a.semaphore(&k, 1).unwrap(),
        b.semaphore(&k, 1).unwrap(),
        c.semaphore(&k, 1).unwrap(),
    );
    let opts = LockOptions::new(LONG);
    let full = |what: &'static str| {
        let sc = sc.clone();
        let name = name.clone();
        let opts = opts.clone();
        async move {
            assert!(
                try_take(subject, what, sc.try_acquire(&opts))
                    .await
                    .is_none(),
                "{name}: {what}: the permit was free"
            );
            assert_eq!(sc.holders().await.unwrap(), 1, "{name}: {what}: holders");
        }
    };
    let g = try_take(subject, "the permit", sa.try_acquire(&opts))
        .await
        .unwrap_or_else(|| panic!("{name}: the permit was busy"));

    let stranger = LockToken::random();
    permit_token_refused(subject, &[&sa, &sb], &stranger, "a stranger's token").await;
    full("after a stranger's release").await;

    sa.extend(g.token(), LONG)
        .await
        .unwrap_or_else(|e| panic!("{name}: semaphore extend by token: {e}"));
    g.extend(LONG)
        .await
        .unwrap_or_else(|e| panic!("{name}: permit guard extend: {e}"));
    full("after the holder's extends").await;

    let old = g.token().clone();
    if form.release_elsewhere {
        sb.extend(&old, LONG)
            .await
            .unwrap_or_else(|e| panic!("{name}: semaphore extend from elsewhere: {e}"));
        full("after an extend from elsewhere").await;
        sb.release(&old)
            .await
            .unwrap_or_else(|e| panic!("{name}: semaphore release from elsewhere: {e}"));
        assert_eq!(
            sb.holders().await.unwrap(),
            0,
            "{name}: released from elsewhere"
        );
        assert_not_held(
            subject,
            "the permit guard's extend after a release from elsewhere",
            g.extend(LONG).await,
        );
        assert_not_held(
            subject,
            "the permit guard's release after a release from elsewhere",
            g.release().await,
        );
    } else {
        assert_refused_elsewhere(subject, "semaphore extend", sb.extend(&old, LONG).await);
        assert_refused_elsewhere(subject, "semaphore release", sb.release(&old).await);
        full("after a release from elsewhere was refused").await;
        drop(g.detach());
        sa.release(&old).await.unwrap_or_else(|e| {
            panic!("{name}: semaphore release by token through the holder's client: {e}")
        });
    }
    let h = try_take(subject, "the freed permit", sc.try_acquire(&opts))
        .await
        .unwrap_or_else(|| panic!("{name}: the released permit stayed busy"));
    permit_token_refused(
        subject,
        &[&sa, &sb, &sc],
        &old,
        "the released permit's token",
    )
    .await;
    assert!(h.is_held(), "{name}");
    assert!(
        try_take(
            subject,
            "a second holder of 1 permit",
            sa.try_acquire(&opts)
        )
        .await
        .is_none(),
        "{name}: the old token freed the new holder's permit"
    );
    let newer = h.token().clone();
    h.release().await.unwrap();
    permit_token_refused(subject, &[&sc], &newer, "a released token").await;
    assert_eq!(sa.holders().await.unwrap(), 0, "{name}: holders at the end");
}

/// §3: while permits are held, the same name with another number of permits is
/// `Error::Conflict` naming both numbers, waiting or not (it does not wait for the holders),
/// from another client too, and takes nothing; once no permit is held the other number is
/// taken. Where the backend documents that it cannot tell (PostgreSQL session locks: the
/// permits are `N` advisory locks, nothing records `N`), nothing is asserted.
async fn semaphore_refuses_another_number_of_permits(subject: &impl Subject) {
    if !subject.form().permits_recorded {
        return;
    }
    let name = subject.name();
    let k = key("semaphore:permits");
    let (a, b) = (subject.locker().await, subject.locker().await);
    let two = a.semaphore(&k, 2).unwrap();
    let opts = LockOptions::new(LONG);
    let g = try_take(subject, "a permit of 2", two.try_acquire(&opts))
        .await
        .unwrap_or_else(|| panic!("{name}: a free permit was busy"));
    for (i, locker) in [&a, &b].into_iter().enumerate() {
        let five = locker.semaphore(&k, 5).unwrap();
        let outcomes = [
            ("try_acquire", five.try_acquire(&opts).await.map(drop)),
            (
                "acquire",
                tokio::time::timeout(GENEROUS, five.acquire(&opts.clone().wait(LONG)))
                    .await
                    .unwrap_or_else(|_| panic!("{name}: acquire of 5 permits waited"))
                    .map(drop),
            ),
        ];
        for (op, outcome) in outcomes {
            match outcome {
                Err(Error::Conflict { detail, .. }) => assert!(
                    detail.contains('2') && detail.contains('5'),
                    "{name}: {op} (client {i}): the conflict names both numbers: {detail}"
                ),
                other => panic!(
                    "{name}: {op} of 5 permits (client {i}) while 2 are used: expected \
                     Conflict, got {other:?}"
                ),
            }
        }
    }
    assert_eq!(
        two.holders().await.unwrap(),
        1,
        "{name}: holders after the conflicts"
    );
    assert!(g.is_held(), "{name}");
    g.release().await.unwrap();
    let five = b.semaphore(&k, 5).unwrap();
    let g = try_take(
        subject,
        "5 permits once none is held",
        five.try_acquire(&opts),
    )
    .await
    .unwrap_or_else(|| panic!("{name}: another number refused once no permit was held"));
    g.release().await.unwrap();
    assert_eq!(
        two.holders().await.unwrap(),
        0,
        "{name}: holders at the end"
    );
}

/// §4, bad input: a TTL outside the limits is `InvalidArgument` ("ttl") on both sides
/// (`try_read`, `read`, `with_read`, `try_write`, `write`, `with_write`, `extend_read`,
/// `extend_write`), before any round trip, and the `with_*` work does not run. Nothing was
/// taken: a writer gets in at once afterwards. (Fencing on the read side:
/// [`fencing_refused_where_it_fences_nothing`].)
async fn rwlock_bad_input_refused(subject: &impl Subject) {
    let name = subject.name();
    let locker = subject.locker().await;
    let k = key("rwlock:bad");
    let rw = locker.rwlock(&k).unwrap();
    for options in bad_ttls() {
        let waiting = options.clone().wait(GENEROUS);
        let ran = Cell::new(false);
        let op = |op: &str| format!("rwlock {op} with {options:?}");
        let outcomes = [
            (
                "try_read",
                rw.try_read(&options).map(|r| r.map(drop)).now_or_never(),
            ),
            (
                "read",
                rw.read(&waiting).map(|r| r.map(drop)).now_or_never(),
            ),
            (
                "with_read",
                rw.with_read(&waiting, |_| async { ran.set(true) })
                    .now_or_never(),
            ),
            (
                "try_write",
                rw.try_write(&options).map(|r| r.map(drop)).now_or_never(),
            ),
            (
                "write",
                rw.write(&waiting).map(|r| r.map(drop)).now_or_never(),
            ),
            (
                "with_write",
                rw.with_write(&waiting, |_| async { ran.set(true) })
                    .now_or_never(),
            ),
        ];
        for (what, outcome) in outcomes {
            assert_invalid(subject, "ttl", &op(what), outcome);
        }
        assert!(
            !ran.get(),
            "{name}: with_read/with_write ran its work with {options:?}"
        );
    }
    let token = LockToken::random();
    for ttl in bad_extend_ttls() {
        assert_invalid(
            subject,
            "ttl",
            &format!("rwlock extend_read to {ttl:?}"),
            rw.extend_read(&token, ttl).now_or_never(),
        );
        assert_invalid(
            subject,
            "ttl",
            &format!("rwlock extend_write to {ttl:?}"),
            rw.extend_write(&token, ttl).now_or_never(),
        );
    }
    assert_eq!(
        rw.readers().await.unwrap(),
        0,
        "{name}: a refused read was taken"
    );
    let w = try_take(
        subject,
        "a writer after refusals",
        rw.try_write(&LockOptions::new(LONG)),
    )
    .await
    .unwrap_or_else(|| panic!("{name}: a refused attempt left the lock busy"));
    w.release().await.unwrap();
}
/// §4: readers share (`readers()` counts them) and keep writers out; once a writer waits no new
/// reader gets in (a stream of readers cannot starve it); the writer holds alone: no reader, no
/// second writer, by `try_*` or by a bounded wait (`NotAcquired` at its deadline); writers'
/// fencing numbers increase.
async fn rwlock_excludes_and_does_not_starve_writers(subject: &impl Subject) {
    let name = subject.name();
    let k = key("rwlock");
    let (a, b, c) = (
        subject.locker().await,
        subject.locker().await,
        subject.locker().await,
    );
    let (ra, rb, rc) = (
        a.rwlock(&k).unwrap(),
        b.rwlock(&k).unwrap(),
        c.rwlock(&k).unwrap(),
    );
    let opts = LockOptions::new(LONG);
    let reader1 = try_take(subject, "first reader", ra.try_read(&opts))
        .await
        .unwrap_or_else(|| panic!("{name}: the first reader was refused"));
    let reader2 = try_take(subject, "second reader", rb.try_read(&opts))
        .await
        .unwrap_or_else(|| panic!("{name}: a second reader was refused"));
    assert_eq!(ra.readers().await.unwrap(), 2, "{name}: readers");
    assert!(
        try_take(subject, "a writer among readers", rc.try_write(&opts))
            .await
            .is_none(),
        "{name}: a writer got in among readers"
    );
    reader2.release().await.unwrap();

    // A writer waits behind reader1; readers arriving after it are kept out. Each read
    // attempt that still gets in (the writer's wait not on the server yet) is given back.
    let writer = {
        let rc = rc.clone();
        tokio::spawn(async move {
            rc.write(&LockOptions::new(LONG).wait(LONG).fencing(true))
                .await
        })
    };
    let kept_out = tokio::time::timeout(GENEROUS, async {
        loop {
            match try_take(
                subject,
                "a reader after a waiting writer",
                rb.try_read(&opts),
            )
            .await
            {
                Some(g) => g.release().await.unwrap(),
                None => break,
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    assert!(
        kept_out.is_ok(),
        "{name}: readers kept getting in while a writer waited (writer starvation)"
    );
    assert!(
        !writer.is_finished(),
        "{name}: the writer got in beside a reader"
    );
    reader1.release().await.unwrap();
    let w = tokio::time::timeout(GENEROUS, writer)
        .await
        .unwrap_or_else(|_| panic!("{name}: the writer never got the lock"))
        .unwrap()
        .unwrap_or_else(|e| panic!("{name}: the writer: {e}"));
    let n = w.fencing_token().expect("a fenced writer has a number");
    assert!(
        try_take(subject, "a reader beside the writer", ra.try_read(&opts))
            .await
            .is_none(),
        "{name}: a reader got in beside the writer"
    );
    assert!(
        try_take(subject, "a second writer", rb.try_write(&opts))
            .await
            .is_none(),
        "{name}: a second writer"
    );
    for (what, outcome) in [
        (
            "a bounded read",
            rb.read(&opts.clone().wait(SHORT_WAIT)).await,
        ),
        (
            "a bounded write",
            rb.write(&opts.clone().wait(SHORT_WAIT)).await,
        ),
    ] {
        match outcome {
            Err(Error::NotAcquired { .. }) => {}
            other => panic!(
                "{name}: {what} beside the writer: {:?}",
                other.map(|g| g.token().clone())
            ),
        }
    }
    assert_eq!(
        ra.readers().await.unwrap(),
        0,
        "{name}: readers beside the writer"
    );
    w.release().await.unwrap();
    let w2 = try_take(
        subject,
        "the next writer",
        rb.try_write(&opts.clone().fencing(true)),
    )
    .await
    .unwrap_or_else(|| panic!("{name}: the lock stayed busy after the writer left"));
    assert!(
        w2.fencing_token().unwrap() > n,
        "{name}: writers' numbers increase"
    );
    w2.release().await.unwrap();
}

/// A release and an extend of `token` on the read side (`write`: the write side), through each
/// of `rws`, are `NotHeld`.
async fn side_token_refused(
    subject: &impl Subject,
    rws: &[&RwLock],
    write: bool,
    token: &LockToken,
    what: &str,
) {
    let side = if write { "write" } else { "read" };
    for (i, rw) in rws.iter().enumerate() {
        let with = format!("with {what} (client {i})");
        let (released, extended) = if write {
            (
                rw.release_write(token).await,
                rw.extend_write(token, LONG).await,
            )
        } else {
            (
                rw.release_read(token).await,
                rw.extend_read(token, LONG).await,
            )
        };
        assert_not_held(subject, &format!("release_{side} {with}"), released);
        assert_not_held(subject, &format!("extend_{side} {with}"), extended);
    }
}

/// §4, token-checked: a release or extend with a token that holds nothing (a stranger's, a
/// released reader's or writer's, on either side) is `NotHeld` and leaves the lock as it was; with the holder's
/// token both work, by the guard and by token, and from another client too where the backend
/// allows it (`Unsupported`, and nothing changes, where only the holding session can).
async fn rwlock_release_and_extend_check_the_token(subject: &impl Subject) {
    let name = subject.name();
    let elsewhere = subject.form().release_elsewhere;
    let k = key("rwlock:tokens");
    let (a, b, c) = (
        subject.locker().await,
        subject.locker().await,
        subject.locker().await,
    );
    let (ra, rb, rc) = (
        a.rwlock(&k).unwrap(),
        b.rwlock(&k).unwrap(),
        c.rwlock(&k).unwrap(),
    );
    let opts = LockOptions::new(LONG);
    let stranger = LockToken::random();

    // The read side.
    let r = try_take(subject, "a reader", ra.try_read(&opts))
        .await
        .unwrap_or_else(|| panic!("{name}: the reader was refused"));
    let reading = |what: &'static str| {
        let rc = rc.clone();
        let name = name.clone();
        let opts = opts.clone();
        async move {
            assert_eq!(rc.readers().await.unwrap(), 1, "{name}: {what}: readers");
            assert!(
                try_take(subject, what, rc.try_write(&opts)).await.is_none(),
                "{name}: {what}: a writer got in beside the reader"
            );
        }
    };
    side_token_refused(subject, &[&ra, &rb], false, &stranger, "a stranger's token").await;
    reading("after refused tokens").await;
    ra.extend_read(r.token(), LONG)
        .await
        .unwrap_or_else(|e| panic!("{name}: extend_read by token: {e}"));
    r.extend(LONG)
        .await
        .unwrap_or_else(|e| panic!("{name}: reader guard extend: {e}"));
    reading("after the reader's extends").await;
    let old = r.token().clone();
    if elsewhere {
        rb.extend_read(&old, LONG)
            .await
            .unwrap_or_else(|e| panic!("{name}: extend_read from elsewhere: {e}"));
        reading("after an extend_read from elsewhere").await;
        rb.release_read(&old)
            .await
            .unwrap_or_else(|e| panic!("{name}: release_read from elsewhere: {e}"));
        assert_not_held(subject, "the reader guard's extend", r.extend(LONG).await);
        assert_not_held(subject, "the reader guard's release", r.release().await);
    } else {
        assert_refused_elsewhere(subject, "extend_read", rb.extend_read(&old, LONG).await);
        assert_refused_elsewhere(subject, "release_read", rb.release_read(&old).await);
        reading("after a release_read from elsewhere was refused").await;
        drop(r.detach());
        ra.release_read(&old)
            .await
            .unwrap_or_else(|e| panic!("{name}: release_read through the holder's client: {e}"));
    }
    assert_eq!(
        rc.readers().await.unwrap(),
        0,
        "{name}: readers after the release"
    );
    side_token_refused(
        subject,
        &[&ra, &rb, &rc],
        false,
        &old,
        "a released reader's token",
    )
    .await;

    // The write side.
    let w = try_take(subject, "a writer", rc.try_write(&opts))
        .await
        .unwrap_or_else(|| panic!("{name}: the released reader kept the writer out"));
    let writing = |what: &'static str| {
        let (ra, rb) = (ra.clone(), rb.clone());
        let name = name.clone();
        let opts = opts.clone();
        async move {
            assert!(
                try_take(subject, what, ra.try_read(&opts)).await.is_none(),
                "{name}: {what}: a reader got in beside the writer"
            );
            assert!(
                try_take(subject, what, rb.try_write(&opts)).await.is_none(),
                "{name}: {what}: a second writer"
            );
        }
    };
    side_token_refused(subject, &[&rc, &ra], true, &stranger, "a stranger's token").await;
    side_token_refused(
        subject,
        &[&rc, &ra],
        true,
        &old,
        "a released reader's token",
    )
    .await;
    writing("after refused tokens").await;
    rc.extend_write(w.token(), LONG)
        .await
        .unwrap_or_else(|e| panic!("{name}: extend_write by token: {e}"));
    w.extend(LONG)
        .await
        .unwrap_or_else(|e| panic!("{name}: writer guard extend: {e}"));
    writing("after the writer's extends").await;
    let old = w.token().clone();
    if elsewhere {
        ra.extend_write(&old, LONG)
            .await
            .unwrap_or_else(|e| panic!("{name}: extend_write from elsewhere: {e}"));
        writing("after an extend_write from elsewhere").await;
        ra.release_write(&old)
            .await
            .unwrap_or_else(|e| panic!("{name}: release_write from elsewhere: {e}"));
        assert_not_held(subject, "the writer guard's extend", w.extend(LONG).await);
        assert_not_held(subject, "the writer guard's release", w.release().await);
    } else {
        assert_refused_elsewhere(subject, "extend_write", ra.extend_write(&old, LONG).await);
        assert_refused_elsewhere(subject, "release_write", ra.release_write(&old).await);
        writing("after a release_write from elsewhere was refused").await;
        drop(w.detach());
        rc.release_write(&old)
            .await
            .unwrap_or_else(|e| panic!("{name}: release_write through the holder's client: {e}"));
    }
    side_token_refused(
        subject,
        &[&ra, &rb, &rc],
        true,
        &old,
        "a released writer's token",
    )
    .await;

    // Free again: a reader gets in at once, out of reach of every old token.
    let r = try_take(subject, "a reader after the writer", rb.try_read(&opts))
        .await
        .unwrap_or_else(|| panic!("{name}: the released writer kept readers out"));
    side_token_refused(subject, &[&rb], true, &old, "a released writer's token").await;
    assert_eq!(ra.readers().await.unwrap(), 1, "{name}: readers");
    r.release().await.unwrap();
    assert_eq!(ra.readers().await.unwrap(), 0, "{name}: readers at the end");
}

/// §6, bad input: an empty id or one longer than `MAX_ELECTION_ID_LEN` bytes is
/// `InvalidArgument` ("id"), and a TTL a renewed lease cannot keep (below `MIN_RENEWED_TTL`,
/// above `MAX_TTL`) is `InvalidArgument` ("ttl"), before any round trip; nobody leads after
/// them. An id of exactly `MAX_ELECTION_ID_LEN` bytes leads like any other, and `leader()`
/// gives it back whole.
async fn election_bad_input_refused(subject: &impl Subject) {
    let name = subject.name();
    let locker = subject.locker().await;
    let k = key("election:bad");
    let e = locker.election(&k).unwrap();
    let opts = LockOptions::new(Duration::from_secs(10));
    for id in [String::new(), "i".repeat(MAX_ELECTION_ID_LEN + 1)] {
        for options in [opts.clone(), opts.clone().wait(GENEROUS)] {
            assert_invalid(
                subject,
                "id",
                &format!("campaign as {}", shown(&id)),
                e.campaign(&id, &options)
                    .map(|r| r.map(drop))
                    .now_or_never(),
            );
        }
    }
    for options in [
        LockOptions::new(Duration::ZERO),
        LockOptions::new(MIN_RENEWED_TTL - Duration::from_millis(1)),
        LockOptions::new(MAX_TTL + Duration::from_millis(1)),
    ] {
        assert_invalid(
            subject,
            "ttl",
            &format!("campaign with {options:?}"),
            e.campaign("me", &options)
                .map(|r| r.map(drop))
                .now_or_never(),
        );
    }
    assert_eq!(
        e.leader().await.unwrap(),
        None,
        "{name}: a leader after refusals"
    );
    let longest = "i".repeat(MAX_ELECTION_ID_LEN);
    let g = tokio::time::timeout(GENEROUS, e.campaign(&longest, &opts))
        .await
        .unwrap_or_else(|_| panic!("{name}: a campaign for a free election hung"))
        .unwrap_or_else(|e| panic!("{name}: campaign with the longest id: {e}"));
    let seen = e.leader().await.unwrap().expect("a leader");
    assert_eq!(
        (seen.id.as_str(), Some(seen.term)),
        (longest.as_str(), g.fencing_token()),
        "{name}: the longest id"
    );
    g.release().await.unwrap();
    assert_eq!(
        e.leader().await.unwrap(),
        None,
        "{name}: a leader after resigning"
    );
}

/// §6: one leader at a time, named with its term by `leader()` (nobody before the first
/// campaign); a second candidate without a wait campaigns until it wins: it is still waiting
/// when a bounded candidate gives up (`NotAcquired`), and it leads once the leader resigns
/// (releases its guard), in a higher term, which `leader()` then names; after the last
/// resignation nobody leads, and the next leader's term is higher still.
async fn election_has_one_leader_and_rising_terms(subject: &impl Subject) {
    let name = subject.name();
    let k = key("election");
    let (a, b) = (subject.locker().await, subject.locker().await);
    let (ea, eb) = (a.election(&k).unwrap(), b.election(&k).unwrap());
    let opts = LockOptions::new(Duration::from_secs(10));
    assert_eq!(
        eb.leader().await.unwrap(),
        None,
        "{name}: a leader before any campaign"
    );
    let first = ea.campaign("first", &opts).await.unwrap();
    let term = first.fencing_token().expect("a term");
    let seen = eb.leader().await.unwrap().expect("a leader");
    assert_eq!((seen.id.as_str(), seen.term), ("first", term), "{name}");

    // Without a wait, a campaign lasts until it wins (documented on `Election::campaign`).
    let second = {
        let eb = eb.clone();
        let opts = opts.clone();
        tokio::spawn(async move { eb.campaign("second", &opts).await })
    };
    match eb
        .campaign("third", &opts.clone().wait(Duration::from_millis(300)))
        .await
    {
        Err(Error::NotAcquired { .. }) => {}
        other => panic!(
            "{name}: a candidate led beside the leader: {:?}",
            other.map(|g| g.fencing_token())
        ),
    }
    assert!(!second.is_finished(), "{name}: two leaders");
    first.release().await.unwrap();
    let second = tokio::time::timeout(GENEROUS, second)
        .await
        .unwrap_or_else(|_| panic!("{name}: the second candidate never took over"))
        .unwrap()
        .unwrap_or_else(|e| panic!("{name}: the second candidate: {e}"));
    let next = second.fencing_token().expect("a term");
    assert!(next > term, "{name}: term {next} after {term}");
    let seen = ea.leader().await.unwrap().expect("a leader");
    assert_eq!((seen.id.as_str(), seen.term), ("second", next), "{name}");
    second.release().await.unwrap();
    assert_eq!(
        eb.leader().await.unwrap(),
        None,
        "{name}: a leader after the last resignation"
    );
    let fourth = tokio::time::timeout(GENEROUS, ea.campaign("fourth", &opts))
        .await
        .unwrap_or_else(|_| panic!("{name}: a campaign for a free election hung"))
        .unwrap_or_else(|e| panic!("{name}: the fourth candidate: {e}"));
    let last = fourth.fencing_token().expect("a term");
    assert!(last > next, "{name}: term {last} after {next}");
    let seen = eb.leader().await.unwrap().expect("a leader");
    assert_eq!((seen.id.as_str(), seen.term), ("fourth", last), "{name}");
    fourth.release().await.unwrap();
}

/// `election.leader()` is `Conflict`: something else than a campaign holds the name.
async fn assert_no_leader_but_a_conflict(subject: &impl Subject, e: &Election, what: &str) {
    match e.leader().await {
        Err(Error::Conflict { .. }) => {}
        other => panic!(
            "{}: leader() {what}: expected Conflict, got {other:?}",
            subject.name()
        ),
    }
}

/// §6: every candidate must campaign through the election. Where the election is the plain
/// lock of its name, a plain lock on the name blocks it: `leader()` is `Conflict` (not a
/// leader), a bounded campaign ends with `NotAcquired`, and so after a term too, when a plain
/// lock without fencing holds the name (finding M5 of the 2026-12-02 review: the counter
/// still showed the term, and Redis' `leader()` named the resigned leader); once the plain
/// lock is released nobody leads. On etcd, whose elections have a key space of their own, a
/// plain lock of the name is nothing to the election: nobody leads beside it, and a campaign
/// wins at once.
async fn election_and_a_plain_lock_of_its_name(subject: &impl Subject) {
    let name = subject.name();
    let k = key("election:plain");
    let (a, b) = (subject.locker().await, subject.locker().await);
    let e = b.election(&k).unwrap();
    let opts = LockOptions::new(LONG);
    let plain_lock = |what: &'static str| {
        let (a, k, opts) = (a.clone(), k.clone(), opts.clone());
        async move {
            try_take(subject, what, a.try_acquire(&k, &opts))
                .await
                .unwrap_or_else(|| panic!("{}: {what}: the name was busy", subject.name()))
        }
    };
    let campaign = |id: &'static str| {
        let (e, opts) = (e.clone(), opts.clone());
        async move {
            tokio::time::timeout(GENEROUS, e.campaign(id, &opts))
                .await
                .unwrap_or_else(|_| {
                    panic!("{}: a campaign for a free election hung", subject.name())
                })
                .unwrap_or_else(|err| panic!("{}: campaign as {id}: {err}", subject.name()))
        }
    };
    if !subject.form().election_is_the_plain_lock {
        let plain = plain_lock("a plain lock of the name").await;
        assert_eq!(e.leader().await.unwrap(), None, "{name}: a plain lock led");
        let g = campaign("beside").await;
        let seen = e.leader().await.unwrap().expect("a leader");
        assert_eq!(seen.id, "beside", "{name}");
        g.release().await.unwrap();
        plain.release().await.unwrap();
        return;
    }
    let plain = plain_lock("a plain lock of the name").await;
    assert_no_leader_but_a_conflict(subject, &e, "while a plain lock holds the name").await;
    match e.campaign("blocked", &opts.clone().wait(SHORT_WAIT)).await {
        Err(Error::NotAcquired { .. }) => {}
        other => panic!(
            "{name}: a bounded campaign beside a plain lock: {:?}",
            other.map(|g| g.fencing_token())
        ),
    }
    plain.release().await.unwrap();
    assert_eq!(
        e.leader().await.unwrap(),
        None,
        "{name}: a leader after the plain lock"
    );

    // After a term: the counter still shows it while the unfenced plain lock holds the name.
    campaign("resigned").await.release().await.unwrap();
    assert_eq!(
        e.leader().await.unwrap(),
        None,
        "{name}: a leader after resigning"
    );
    let plain = plain_lock("a plain lock after a term").await;
    assert_no_leader_but_a_conflict(subject, &e, "after a term, beside a plain lock").await;
    plain.release().await.unwrap();
    assert_eq!(
        e.leader().await.unwrap(),
        None,
        "{name}: a leader at the end"
    );
}

/// The watch's next publications until it shows `expected` (a leader's id and term, or
/// nobody), bounded by [`GENEROUS`].
async fn heard(subject: &impl Subject, watch: &mut LeaderWatch, expected: Option<(&str, u64)>) {
    let outcome = tokio::time::timeout(GENEROUS, async {
        loop {
            let now = watch.changed().await.unwrap();
            if now.as_ref().map(|l| (l.id.as_str(), l.term)) == expected {
                return;
            }
        }
    })
    .await;
    assert!(
        outcome.is_ok(),
        "{}: the watch never showed {expected:?}",
        subject.name()
    );
}

/// §6, `Election::watch`: another client's watch publishes each change of leadership, each
/// leader with its id and term, and nobody after a resignation. Where the backend announces
/// elections and resignations (Redis' release channel, etcd's watch, lease rows' `NOTIFY`)
/// it hears them before any poll: the watch polls once an hour and the leases run a minute,
/// longer than the hang guard, so that only the announcements can tell it in time; elsewhere
/// the watch polls every 20 ms.
async fn election_watch_follows_each_change(subject: &impl Subject) {
    let name = subject.name();
    let k = key("election:watch");
    let (a, b, c) = (
        subject.locker().await,
        subject.locker().await,
        subject.locker().await,
    );
    let every = if subject.form().announces_leaders {
        Duration::from_secs(3600)
    } else {
        Duration::from_millis(20)
    };
    let mut watch = c.election(&k).unwrap().watch(every);
    let opts = LockOptions::new(LONG);
    for (i, (locker, id)) in [(&a, "first"), (&b, "second")].into_iter().enumerate() {
        let g = tokio::time::timeout(GENEROUS, locker.election(&k).unwrap().campaign(id, &opts))
            .await
            .unwrap_or_else(|_| panic!("{name}: a campaign for a free election hung"))
            .unwrap_or_else(|e| panic!("{name}: campaign {i}: {e}"));
        let term = g.fencing_token().expect("a term");
        heard(subject, &mut watch, Some((id, term))).await;
        g.release().await.unwrap();
        heard(subject, &mut watch, None).await;
    }
}

/// §6: a leader whose leadership is taken away behind its back (its key deleted, its session
/// terminated, its lease row emptied, its etcd entry deleted: [`Subject::take_away_leader`]) is
/// told (`lost()`, `NotHeld`), and the other candidate, campaigning without a wait, leads in a
/// higher term, which `leader()` names; the deposed leader's resignation is `NotHeld` and leaves
/// the new leader leading.
async fn a_leader_taken_away_is_told_and_replaced(subject: &impl Subject) {
    let name = subject.name();
    let k = key("election:taken");
    let (a, b, c) = (
        subject.locker().await,
        subject.locker().await,
        subject.locker().await,
    );
    let opts = LockOptions::new(RENEWED);
    let first = tokio::time::timeout(GENEROUS, a.election(&k).unwrap().campaign("first", &opts))
        .await
        .unwrap_or_else(|_| panic!("{name}: a campaign for a free election hung"))
        .unwrap_or_else(|e| panic!("{name}: the first candidate: {e}"));
    let term = first.fencing_token().expect("a term");
    let candidate = {
        let (e, opts) = (b.election(&k).unwrap(), opts.clone());
        tokio::spawn(async move { e.campaign("second", &opts).await })
    };
    subject.take_away_leader(&k).await;
    tokio::time::timeout(GENEROUS, first.lost())
        .await
        .unwrap_or_else(|_| panic!("{name}: the deposed leader was not told"));
    assert_eq!(first.loss_reason(), Some(LossReason::NotHeld), "{name}");
    let second = tokio::time::timeout(GENEROUS, candidate)
        .await
        .unwrap_or_else(|_| panic!("{name}: the candidate never took over"))
        .unwrap()
        .unwrap_or_else(|e| panic!("{name}: the candidate: {e}"));
    let next = second.fencing_token().expect("a term");
    assert!(next > term, "{name}: term {next} after {term}");
    let e = c.election(&k).unwrap();
    let seen = e.leader().await.unwrap().expect("a leader");
    assert_eq!((seen.id.as_str(), seen.term), ("second", next), "{name}");
    assert_not_held(
        subject,
        "the deposed leader's resignation",
        first.release().await,
    );
    let seen = e.leader().await.unwrap().expect("a leader");
    assert_eq!((seen.id.as_str(), seen.term), ("second", next), "{name}");
    second.release().await.unwrap();
    assert_eq!(
        e.leader().await.unwrap(),
        None,
        "{name}: a leader at the end"
    );
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
