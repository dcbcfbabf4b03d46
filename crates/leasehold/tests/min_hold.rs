//! `LockOptions::min_hold` on Redis and Valkey, every server of the matrix, observed on the
//! server: the companion key `{key}:minhold` is set with the lock (token, `PX min_hold`), a
//! release before it is over leaves the lock with the companion's expiry instead of deleting
//! it, and plain locks keep their fast path (no companion, deleted at once). The conformance
//! suite (`conformance/min_hold.rs`) checks the same behaviour through `Locker` on every
//! backend and topology; the CLI's `tests/min_hold.rs` with clocks that disagree.

use crate::common;

use std::time::Duration;

use common::*;
use futures_util::FutureExt;
use leasehold::redis::min_hold_key;
use leasehold::{Error, LockOptions, LockToken, TryAcquire};

const LONG: Duration = Duration::from_secs(60);
const MIN_HOLD: Duration = Duration::from_secs(2);

fn min_hold_ms() -> i64 {
    MIN_HOLD.as_millis() as i64
}

leasehold_harness::server_test!(async fn a_released_lock_keeps_the_companions_expiry(bin) {
    let (server, client) = start(&bin).await;
    let k = "job:nightly";
    let companion = min_hold_key(k);
    assert_eq!(companion, "{job:nightly}:minhold");
    let guard = client
        .try_acquire(k, &LockOptions::new(LONG).min_hold(MIN_HOLD))
        .await
        .unwrap()
        .acquired()
        .expect("acquired");
    let token = guard.token().clone();
    // Set with the lock, in the same script: the hold is counted by the server from the grant.
    assert_eq!(get(&server, &companion).as_deref(), Some(token.expose()));
    let hold = pttl(&server, &companion);
    assert!(0 < hold && hold <= min_hold_ms(), "companion PTTL {hold}");
    assert!(pttl(&server, k) > min_hold_ms(), "the lock has its own TTL until released");

    guard.release().await.expect("the release returns Ok at once");
    // Kept, under a value no extend of ours matches, and now ends with the companion (never
    // later than min_hold).
    let kept_value = format!("kept:{}", token.expose());
    assert_eq!(get(&server, k), Some(kept_value.clone()), "deleted by the release");
    let (kept, hold) = (pttl(&server, k), pttl(&server, &companion));
    assert!(0 < kept && kept <= hold.max(0) + 5 && kept <= min_hold_ms(), "lock {kept}, companion {hold}");
    match client.try_acquire(k, &LockOptions::new(LONG)).await.unwrap() {
        TryAcquire::Busy { .. } => {}
        TryAcquire::Acquired(g) => panic!("acquired while kept: {}", g.token()),
    }
    // Token-checked while kept, and no longer ours to extend: a renewal sent before the
    // release and applied after it re-extended the kept lock to a full TTL (L2).
    assert!(client.release(k, &LockToken::random()).await.unwrap_err().is_not_held());
    assert!(client.extend(k, &token, LONG).await.unwrap_err().is_not_held());
    assert!(pttl(&server, k) <= min_hold_ms(), "re-extended: PTTL {}", pttl(&server, k));
    assert_eq!(get(&server, k), Some(kept_value));
    assert_eq!(
        client.inspect(k).await.unwrap().holder.as_deref(),
        Some(token.expose()),
        "inspect shows the holder that released it"
    );
    // Gone by itself: the server expires it.
    until_absent(&server, k, GENEROUS).await;
    client
        .try_acquire(k, &LockOptions::new(LONG))
        .await
        .unwrap()
        .acquired()
        .expect("free once the hold is over")
        .release()
        .await
        .unwrap();
});

leasehold_harness::server_test!(async fn a_release_after_the_hold_frees_at_once(bin) {
    let (server, client) = start(&bin).await;
    let k = "job:late";
    let guard = client
        .try_acquire(k, &LockOptions::new(LONG).min_hold(Duration::from_millis(200)))
        .await
        .unwrap()
        .acquired()
        .expect("acquired");
    // The server says the hold is over: its companion expired.
    until_absent(&server, &min_hold_key(k), GENEROUS).await;
    guard.release().await.unwrap();
    assert_eq!(get(&server, k), None, "a release after min_hold deletes the lock");
});

leasehold_harness::server_test!(async fn plain_locks_keep_their_fast_path(bin) {
    let (server, client) = start(&bin).await;
    let k = "job:plain";
    let guard = client.try_acquire(k, &LockOptions::new(LONG)).await.unwrap().acquired().unwrap();
    assert_eq!(calls(&server, "evalsha") + calls(&server, "eval"), 0, "SET NX PX, no script");
    assert_eq!(get(&server, &min_hold_key(k)), None, "no companion");
    guard.release().await.unwrap();
    assert_eq!(get(&server, k), None, "released at once");
});

leasehold_harness::server_test!(async fn min_hold_goes_with_replica_acknowledgement(bin) {
    let (server, client) = start(&bin).await;
    let k = "job:acked";
    // No replica to wait for: the acquisition and WAIT 0 in one pipeline.
    let options = LockOptions::new(LONG)
        .min_hold(MIN_HOLD)
        .fencing(true)
        .replica_ack(0, Duration::from_millis(100));
    let guard = client.try_acquire(k, &options).await.unwrap().acquired().expect("acquired");
    assert_eq!(guard.fencing_token(), Some(1));
    assert_eq!(get(&server, &min_hold_key(k)).as_deref(), Some(guard.token().expose()));
    guard.release().await.unwrap();
    assert!(get(&server, k).is_some(), "kept");
});

leasehold_harness::server_test!(async fn primitives_without_min_hold_refuse_it_before_any_round_trip(bin) {
    let (_server, client) = start(&bin).await;
    let options = LockOptions::new(LONG).min_hold(MIN_HOLD);
    let unsupported = |what: &str, r: Option<leasehold::Result<()>>| match r {
        Some(Err(Error::Unsupported { backend: "redis", what: w })) => {
            assert!(w.contains("min_hold"), "{what}: {w}")
        }
        other => panic!("{what}: expected Unsupported at once, got {other:?}"),
    };
    unsupported(
        "fair",
        client.try_acquire("f", &options.clone().fair(true)).map(|r| r.map(drop)).now_or_never(),
    );
    let semaphore = client.semaphore("s", 2).unwrap();
    unsupported("semaphore", semaphore.try_acquire(&options).map(|r| r.map(drop)).now_or_never());
    let rwlock = client.rwlock("rw").unwrap();
    unsupported("read", rwlock.try_read(&options).map(|r| r.map(drop)).now_or_never());
    unsupported("write", rwlock.try_write(&options).map(|r| r.map(drop)).now_or_never());
    let multi = client.as_redis().unwrap().multi_lock(&["a", "b"]).unwrap();
    unsupported("multi", multi.try_acquire(&options).map(|r| r.map(drop)).now_or_never());
    let election = client.election("e").unwrap();
    unsupported("election", election.campaign("me", &options).map(|r| r.map(drop)).now_or_never());
    // Longer than the TTL: refused by every primitive's validation, before anything is sent.
    let too_long = LockOptions::new(Duration::from_secs(1)).min_hold(Duration::from_secs(2));
    match client.try_acquire("k", &too_long).now_or_never() {
        Some(Err(Error::InvalidArgument { what: "min_hold", .. })) => {}
        other => panic!("min_hold > ttl: {other:?}"),
    }
});
