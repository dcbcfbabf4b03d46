//! Read-write locks (docs/guarantees.md §4): bad input refused, writers alone and readers
//! together, a waiting writer not starved, token-checked release and extend by side.

use super::*;

/// §4, each side on its own: a reader's token releases and extends no write lease, and the
/// writer's token no read lease (`NotHeld`, and the holder keeps its lease), through the
/// holder's client and, where the backend takes tokens from anywhere, another one, as
/// `RwLock::release_write` documents ("`NotHeld` if it does not hold it") and etcd and
/// PostgreSQL check.
///
/// It failed on `memory://`, whose sides were one release/extend of the name: a
/// `release_write` with a reader's token released the reader.
pub(super) async fn rwlock_tokens_are_checked_by_side(subject: &impl Subject) {
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

/// §4, bad input: a TTL outside the limits is `InvalidArgument` ("ttl") on both sides
/// (`try_read`, `read`, `with_read`, `try_write`, `write`, `with_write`, `extend_read`,
/// `extend_write`), before any round trip, and the `with_*` work does not run. Nothing was
/// taken: a writer gets in at once afterwards. (Fencing on the read side:
/// [`fencing_refused_where_it_fences_nothing`].)
pub(super) async fn rwlock_bad_input_refused(subject: &impl Subject) {
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
pub(super) async fn rwlock_excludes_and_does_not_starve_writers(subject: &impl Subject) {
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

/// Release and extend of `side` with `token`, which holds nothing there, through each of `rws`:
/// `NotHeld` every time.
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
        let side_of = if write {
            rw.write_side()
        } else {
            rw.read_side()
        };
        let released = side_of.release(token).await;
        let extended = side_of.extend(token, LONG).await;
        assert_not_held(subject, &format!("release_{side} {with}"), released);
        assert_not_held(subject, &format!("extend_{side} {with}"), extended);
    }
}

/// One side's token checks: a lease taken through `holder`, which `keeps` (what the lease must
/// keep true, checked after each step) while `refused` tokens release and extend nothing
/// through `holder` and `other`; extended by token and by its guard; then extended and released
/// from `other` where the backend takes tokens from anywhere (its guard's then `NotHeld`), or
/// refused there and released by the holder's client; afterwards its token holds nothing
/// through any of `all`. Returns that token.
#[allow(clippy::too_many_arguments)]
async fn side_checks<Fut: std::future::Future<Output = ()>>(
    subject: &impl Subject,
    write: bool,
    holder: &RwLock,
    other: &RwLock,
    all: &[&RwLock],
    refused: &[(&LockToken, &str)],
    keeps: impl Fn(&'static str) -> Fut,
) -> LockToken {
    let name = subject.name();
    let (side, who) = if write {
        ("write", "writer")
    } else {
        ("read", "reader")
    };
    let side_of = |rw: &RwLock| {
        if write {
            rw.write_side()
        } else {
            rw.read_side()
        }
    };
    let (mine, theirs) = (side_of(holder), side_of(other));
    let opts = LockOptions::new(LONG);
    let g = try_take(subject, &format!("a {who}"), mine.try_acquire(&opts))
        .await
        .unwrap_or_else(|| panic!("{name}: the {who} was refused"));
    for (token, what) in refused {
        side_token_refused(subject, &[holder, other], write, token, what).await;
    }
    keeps("after refused tokens").await;
    mine.extend(g.token(), LONG)
        .await
        .unwrap_or_else(|e| panic!("{name}: extend_{side} by token: {e}"));
    g.extend(LONG)
        .await
        .unwrap_or_else(|e| panic!("{name}: {who} guard extend: {e}"));
    keeps(if write {
        "after the writer's extends"
    } else {
        "after the reader's extends"
    })
    .await;
    let old = g.token().clone();
    if subject.form().release_elsewhere {
        theirs
            .extend(&old, LONG)
            .await
            .unwrap_or_else(|e| panic!("{name}: extend_{side} from elsewhere: {e}"));
        keeps("after an extend from elsewhere").await;
        theirs
            .release(&old)
            .await
            .unwrap_or_else(|e| panic!("{name}: release_{side} from elsewhere: {e}"));
        assert_not_held(
            subject,
            &format!("the {who} guard's extend"),
            g.extend(LONG).await,
        );
        assert_not_held(
            subject,
            &format!("the {who} guard's release"),
            g.release().await,
        );
    } else {
        let what = format!("extend_{side}");
        assert_refused_elsewhere(subject, &what, theirs.extend(&old, LONG).await);
        let what = format!("release_{side}");
        assert_refused_elsewhere(subject, &what, theirs.release(&old).await);
        keeps("after a release from elsewhere was refused").await;
        drop(g.detach());
        mine.release(&old)
            .await
            .unwrap_or_else(|e| panic!("{name}: release_{side} through the holder's client: {e}"));
    }
    let what = format!("a released {who}'s token");
    side_token_refused(subject, all, write, &old, &what).await;
    old
}

/// §4, token-checked: a release or extend with a token that holds nothing (a stranger's, a
/// released reader's or writer's, on either side) is `NotHeld` and leaves the lock as it was; with the holder's
/// token both work, by the guard and by token, and from another client too where the backend
/// allows it (`Unsupported`, and nothing changes, where only the holding session can).
pub(super) async fn rwlock_release_and_extend_check_the_token(subject: &impl Subject) {
    let name = subject.name();
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
    let all = [&ra, &rb, &rc];

    // The read side: taken through a, tried from b; c sees one reader and no writer.
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
    let refused = [(&stranger, "a stranger's token")];
    let reader = side_checks(subject, false, &ra, &rb, &all, &refused, reading).await;
    assert_eq!(
        rc.readers().await.unwrap(),
        0,
        "{name}: readers after the release"
    );

    // The write side: taken through c, tried from a; no reader and no second writer get in.
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
    let refused = [
        (&stranger, "a stranger's token"),
        (&reader, "a released reader's token"),
    ];
    let writer = side_checks(subject, true, &rc, &ra, &all, &refused, writing).await;

    // Free again: a reader gets in at once, out of reach of every old token.
    let r = try_take(subject, "a reader after the writer", rb.try_read(&opts))
        .await
        .unwrap_or_else(|| panic!("{name}: the released writer kept readers out"));
    side_token_refused(subject, &[&rb], true, &writer, "a released writer's token").await;
    assert_eq!(ra.readers().await.unwrap(), 1, "{name}: readers");
    r.release().await.unwrap();
    assert_eq!(ra.readers().await.unwrap(), 0, "{name}: readers at the end");
}
