//! Semaphores (docs/guarantees.md §3): bad input refused, exactly N holders, token-checked
//! release and extend, one number of permits per name.

use super::*;

/// §3, bad input: a number of permits of 0 or above `MAX_PERMITS` is `InvalidArgument`
/// ("permits") from the constructor (`MAX_PERMITS` itself is taken); a TTL outside the limits
/// is `InvalidArgument` ("ttl") from `try_acquire`, `acquire`, `with_permit` (which does not
/// run its work) and `extend`, before any round trip (ready at its first poll). Nothing was
/// taken. (Fencing: [`fencing_refused_where_it_fences_nothing`].)
pub(super) async fn semaphore_bad_input_refused(subject: &impl Subject) {
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
pub(super) async fn semaphore_admits_n(subject: &impl Subject) {
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
pub(super) async fn semaphore_release_and_extend_check_the_token(subject: &impl Subject) {
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
pub(super) async fn semaphore_refuses_another_number_of_permits(subject: &impl Subject) {
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
