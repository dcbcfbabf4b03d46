//! The primitives beyond the plain lock, through [`Locker`]: on a backend that has one
//! ([`leasehold::Backend::has`]) its guarantees (docs/guarantees.md §3-§6), on one that does not
//! an `Unsupported` naming the backend, before any round trip. What `has` says and what the
//! locker does must agree: a backend cannot claim a primitive it refuses, nor offer one it
//! does not declare.

use std::time::Duration;

use futures_util::FutureExt;
use leasehold::{Error, LockGuard, LockOptions, Locker, Primitive, TryAcquire};

use super::{GENEROUS, LONG, Subject, key};

/// Runs the primitives' checks, or the refusals, as the backend declares.
pub async fn primitives_conform(subject: &impl Subject) {
    let locker = subject.locker().await;
    let kind = locker.kind();
    for primitive in [Primitive::Semaphore, Primitive::RwLock, Primitive::Election] {
        if kind.has(primitive) {
            min_hold_refused(subject, &locker, primitive).await;
            match primitive {
                Primitive::Semaphore => semaphore_admits_n(subject).await,
                Primitive::RwLock => rwlock_excludes_and_does_not_starve_writers(subject).await,
                Primitive::Election => election_has_one_leader_and_rising_terms(subject).await,
                _ => unreachable!(),
            }
        } else {
            refused(subject, &locker, primitive);
        }
    }
}

/// `min_hold` on a primitive: `Unsupported` naming the backend, at once, on every backend
/// (finding M4 of the 2026-12-02 review: it was refused on Redis, ignored on PostgreSQL and
/// applied on etcd and memory).
async fn min_hold_refused(subject: &impl Subject, locker: &Locker, primitive: Primitive) {
    let name = subject.name();
    let k = key("min-hold-primitive");
    let options = LockOptions::new(LONG).min_hold(Duration::from_secs(1));
    let refused = match primitive {
        Primitive::Semaphore => {
            let s = locker.semaphore(&k, 2).unwrap();
            vec![ready(subject, "semaphore", s.try_acquire(&options)).map(drop)]
        }
        Primitive::RwLock => {
            let rw = locker.rwlock(&k).unwrap();
            vec![
                ready(subject, "read", rw.try_read(&options)).map(drop),
                ready(subject, "write", rw.try_write(&options)).map(drop),
            ]
        }
        Primitive::Election => {
            let e = locker.election(&k).unwrap();
            let waiting = options.clone().wait(GENEROUS);
            vec![ready(subject, "campaign", e.campaign("me", &waiting)).map(drop)]
        }
        _ => unreachable!(),
    };
    for outcome in refused {
        match outcome {
            Err(Error::Unsupported { backend, what }) => {
                assert_eq!(backend, locker.backend(), "{name}: {primitive:?}");
                assert!(what.contains("min_hold"), "{name}: {what}");
            }
            other => panic!("{name}: {primitive:?} with min_hold: {other:?}"),
        }
    }
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

/// §3: with 2 permits, two holders and no third; a release makes room, and wakes a waiter; a
/// release or extend with a token that holds nothing is `NotHeld`; bad arguments are refused
/// before any round trip.
async fn semaphore_admits_n(subject: &impl Subject) {
    let name = subject.name();
    let k = key("semaphore");
    let (a, b) = (subject.locker().await, subject.locker().await);
    for bad in [0, leasehold::MAX_PERMITS + 1] {
        assert!(
            matches!(a.semaphore(&k, bad), Err(Error::InvalidArgument { .. })),
            "{name}: {bad} permits"
        );
    }
    let sa = a.semaphore(&k, 2).unwrap();
    let sb = b.semaphore(&k, 2).unwrap();
    let opts = LockOptions::new(LONG);
    let bad_ttl = LockOptions::new(Duration::ZERO);
    assert!(
        matches!(
            ready(subject, "a zero TTL", sa.try_acquire(&bad_ttl)),
            Err(Error::InvalidArgument { .. })
        ),
        "{name}: a zero TTL"
    );

    let first = try_take(subject, "first permit", sa.try_acquire(&opts))
        .await
        .unwrap_or_else(|| panic!("{name}: the first permit was busy"));
    let second = try_take(subject, "second permit", sb.try_acquire(&opts))
        .await
        .unwrap_or_else(|| panic!("{name}: the second permit was busy"));
    assert!(
        try_take(subject, "third permit", sb.try_acquire(&opts))
            .await
            .is_none(),
        "{name}: a third holder of 2 permits"
    );
    assert_eq!(sb.holders().await.unwrap(), 2, "{name}: holders");

    // A waiter gets the permit a release frees.
    let waiter = {
        let sb = sb.clone();
        tokio::spawn(async move { sb.acquire(&LockOptions::new(LONG).wait(LONG)).await })
    };
    let token = first.token().clone();
    first.release().await.unwrap();
    let third = tokio::time::timeout(GENEROUS, waiter)
        .await
        .unwrap_or_else(|_| panic!("{name}: the waiter never got the freed permit"))
        .unwrap()
        .unwrap_or_else(|e| panic!("{name}: the waiter: {e}"));
    assert!(
        try_take(
            subject,
            "a permit of a full semaphore",
            sa.try_acquire(&opts)
        )
        .await
        .is_none(),
        "{name}: a third holder after the handover"
    );
    // The released token holds nothing any more.
    assert!(
        matches!(sa.release(&token).await, Err(Error::NotHeld { .. })),
        "{name}: release of a released permit"
    );
    assert!(
        matches!(sa.extend(&token, LONG).await, Err(Error::NotHeld { .. })),
        "{name}: extend of a released permit"
    );
    second.release().await.unwrap();
    third.release().await.unwrap();
    assert_eq!(sa.holders().await.unwrap(), 0, "{name}: holders at the end");
}

/// §4: readers share, a writer holds alone, and once a writer waits no new reader gets in
/// (a stream of readers cannot starve it); the writer's fencing numbers increase.
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

/// §6: one leader at a time, seen by `leader()`; a second candidate waits (for ever without a
/// wait); when the leader resigns it takes over with a higher term.
async fn election_has_one_leader_and_rising_terms(subject: &impl Subject) {
    let name = subject.name();
    let k = key("election");
    let (a, b) = (subject.locker().await, subject.locker().await);
    let (ea, eb) = (a.election(&k).unwrap(), b.election(&k).unwrap());
    let opts = LockOptions::new(Duration::from_secs(10));
    assert!(
        matches!(
            ready(subject, "an empty id", ea.campaign("", &opts)),
            Err(Error::InvalidArgument { .. })
        ),
        "{name}: an empty id"
    );
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
}
