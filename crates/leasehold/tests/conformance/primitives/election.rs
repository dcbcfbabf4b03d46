//! Elections (docs/guarantees.md §6): bad input refused, one leader with rising terms, a
//! plain lock of the name, the watch, a leader taken away.

use super::*;

/// §6, bad input: an empty id or one longer than `MAX_ELECTION_ID_LEN` bytes is
/// `InvalidArgument` ("id"), and a TTL a renewed lease cannot keep (below `MIN_RENEWED_TTL`,
/// above `MAX_TTL`) is `InvalidArgument` ("ttl"), before any round trip; nobody leads after
/// them. An id of exactly `MAX_ELECTION_ID_LEN` bytes leads like any other, and `leader()`
/// gives it back whole.
pub(super) async fn election_bad_input_refused(subject: &impl Subject) {
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
pub(super) async fn election_has_one_leader_and_rising_terms(subject: &impl Subject) {
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
pub(super) async fn election_and_a_plain_lock_of_its_name(subject: &impl Subject) {
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
pub(super) async fn election_watch_follows_each_change(subject: &impl Subject) {
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
pub(super) async fn a_leader_taken_away_is_told_and_replaced(subject: &impl Subject) {
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
