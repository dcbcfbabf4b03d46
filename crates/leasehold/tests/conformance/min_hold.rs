//! [`LockOptions::min_hold`] (docs/guarantees.md §18), on every subject: a lock
//! released before `min_hold` after its acquisition stays busy until then, by the server's
//! clock, and then frees itself; a release after it frees at once; a kept lock is still
//! token-checked; a `min_hold` over the TTL is refused before any round trip, and so is
//! `min_hold` itself on the one backend that cannot keep a lock after its release
//! (PostgreSQL session locks: an advisory lock ends with its unlock).

use std::time::{Duration, Instant};

use futures_util::FutureExt;
use leasehold::{Error, LockOptions, LockToken, TryAcquire, clock_drift};

use super::{GENEROUS, LONG, Subject, assert_busy, assert_not_held, held, key, take};

/// The minimum hold of the lock whose release is checked: whole seconds, so that etcd's lease
/// (whole seconds, at least its minimum TTL of about 2 s) is not longer than it.
const MIN_HOLD: Duration = Duration::from_secs(2);

/// The minimum hold of the lock released after it is over.
const SHORT_HOLD: Duration = Duration::from_secs(1);

/// Whether the subject's backend keeps a released lock for `min_hold` (every backend but
/// PostgreSQL session locks, which refuse the option).
fn supported(subject: &impl Subject) -> bool {
    subject.form().backend != "postgres"
}

pub async fn a_released_lock_is_kept_until_min_hold(subject: &impl Subject) {
    let name = subject.name();
    let locker = subject.locker().await;
    let other = subject.locker().await;
    let k = key("min-hold");

    // Bad input, before any round trip: the future is ready at its first poll.
    let too_long = LockOptions::new(Duration::from_secs(1)).min_hold(Duration::from_millis(1001));
    for (op, outcome) in [
        (
            "try_acquire",
            locker
                .try_acquire(&k, &too_long)
                .map(|r| r.map(drop))
                .now_or_never(),
        ),
        (
            "acquire",
            locker
                .acquire(&k, &too_long.clone().wait(GENEROUS))
                .map(|r| r.map(drop))
                .now_or_never(),
        ),
    ] {
        match outcome {
            Some(Err(Error::InvalidArgument {
                what: "min_hold", ..
            })) => {}
            other => panic!("{name}: {op} with min_hold > ttl: {other:?}"),
        }
    }

    let options = held().min_hold(MIN_HOLD);
    if !supported(subject) {
        match locker.try_acquire(&k, &options).now_or_never() {
            Some(Err(e @ Error::Unsupported { backend, .. })) => {
                assert_eq!(backend, subject.form().backend, "{name}");
                assert!(e.to_string().contains("?lock=lease"), "{name}: {e}");
            }
            other => panic!("{name}: min_hold: expected Unsupported at once, got {other:?}"),
        }
        return;
    }

    // Released at once, kept until MIN_HOLD after the grant (which came after `sent`).
    let sent = Instant::now();
    let guard = take(subject, &locker, &k, &options).await;
    let token = guard.token().clone();
    guard
        .release()
        .await
        .unwrap_or_else(|e| panic!("{name}: release: {e}"));
    assert_busy(subject, &other, &k).await;
    let state = other.inspect(&k).await.expect("inspect");
    assert_eq!(
        state.holder.as_deref(),
        Some(token.expose()),
        "{name}: a kept lock shows its holder"
    );
    let ttl = state.ttl.expect("a kept lock has a TTL");
    assert!(
        ttl <= MIN_HOLD,
        "{name}: kept for {ttl:?}, over {MIN_HOLD:?}"
    );
    // Still token-checked while kept.
    assert_not_held(
        subject,
        "release of a kept lock with another token",
        other.release(&k, &LockToken::random()).await,
    );
    // No longer its holder's to extend (finding L2 of the 2026-12-02 review): a renewal sent
    // before the release and applied after it re-extended the kept lock to a full TTL.
    // (Where only the holding handle may extend, a by-token extend is refused outright.)
    match locker.extend(&k, &token, LONG).await {
        Err(Error::Unsupported { .. }) if !subject.form().release_elsewhere => {}
        late => assert_not_held(subject, "a renewal of a kept lock with its token", late),
    }
    let ttl = other.inspect(&k).await.expect("inspect").ttl;
    assert!(
        ttl.is_none_or(|ttl| ttl <= MIN_HOLD),
        "{name}: a late renewal kept the lock for {ttl:?}, over {MIN_HOLD:?}"
    );
    // Gone by itself, as the servers say, and not before MIN_HOLD after the grant.
    loop {
        let state = other.inspect(&k).await.expect("inspect");
        if state.holder.is_none() {
            break;
        }
        assert!(
            sent.elapsed() < GENEROUS,
            "{name}: still kept after {GENEROUS:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let freed = sent.elapsed();
    assert!(
        freed >= MIN_HOLD - clock_drift(MIN_HOLD),
        "{name}: free {freed:?} after the request, before min_hold {MIN_HOLD:?}"
    );
    take(subject, &other, &k, &held())
        .await
        .release()
        .await
        .expect("release");

    // A release after the minimum hold frees at once. The pause only makes sure the hold is
    // over (a longer one proves the same): etcd's lease is rounded up to its minimum TTL and
    // revoked by its lessor within half a second after.
    let sent = Instant::now();
    let guard = take(subject, &locker, &k, &held().min_hold(SHORT_HOLD)).await;
    tokio::time::sleep_until((sent + SHORT_HOLD + Duration::from_secs(3)).into()).await;
    guard.release().await.expect("release");
    match other.try_acquire(&k, &held()).await {
        Ok(TryAcquire::Acquired(g)) => g.release().await.expect("release"),
        other => panic!("{name}: a release after min_hold did not free the lock: {other:?}"),
    }

    // Without min_hold, a release frees at once.
    let guard = take(subject, &locker, &k, &held()).await;
    guard.release().await.expect("release");
    take(subject, &other, &k, &held())
        .await
        .release()
        .await
        .expect("release");
}
