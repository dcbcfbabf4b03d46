//! Multi-resource locks: all keys or none, no deadlock between opposite orders, one guard
//! releases all, auto-extension with loss reporting, bad input; and on a cluster, keys in
//! several hash slots.

use crate::common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use common::until;
use leasehold::redis::RedisClient;
use leasehold::{Backoff, Error, LockOptions, Locker, LossReason};
use leasehold_harness::{Cluster, ClusterOptions, Server, ServerOptions};

const LONG: Duration = Duration::from_secs(60);
const HANG_GUARD: Duration = Duration::from_secs(90);

fn get(server: &Server, key: &str) -> Option<String> {
    common::get(server, key)
}

leasehold_harness::server_test!(async fn all_keys_or_none(bin) {
    let server = Server::start(&bin, &ServerOptions::new()).unwrap();
    let client = Locker::connect(&server.url()).await.unwrap();
    let b = client.try_acquire("m:b", &LockOptions::new(LONG)).await.unwrap().acquired().unwrap();
    let both = client.as_redis().unwrap().multi_lock(&["m:b", "m:a"]).unwrap();
    assert_eq!(both.keys(), ["m:a", "m:b"]);
    match both.try_acquire(&LockOptions::new(LONG)).await.unwrap() {
        leasehold::TryAcquire::Busy { remaining } => assert!(remaining.is_some()),
        leasehold::TryAcquire::Acquired(_) => panic!("took a held key"),
    }
    assert_eq!(get(&server, "m:a"), None, "a failed attempt left a key behind");
    b.release().await.unwrap();
    let g = both.try_acquire(&LockOptions::new(LONG)).await.unwrap().acquired().unwrap();
    for k in ["m:a", "m:b"] {
        assert_eq!(get(&server, k).as_deref(), Some(g.token().expose()), "{k}");
    }
    // Each key is a plain lock now: nobody else takes either.
    assert!(!client.try_acquire("m:a", &LockOptions::new(LONG)).await.unwrap().is_acquired());
    g.release().await.unwrap();
    assert_eq!((get(&server, "m:a"), get(&server, "m:b")), (None, None));
});

/// Two callers, {a, b} and {b, a}, each taking its set 15 times: both finish (no deadlock), and
/// never both hold b.
async fn opposite_orders(client: &Locker, a: &str, b: &str) {
    let inside_b = Arc::new(AtomicUsize::new(0));
    let max = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for keys in [[a, b], [b, a]] {
        let lock = client.as_redis().unwrap().multi_lock(&keys).unwrap();
        let (inside_b, max) = (inside_b.clone(), max.clone());
        tasks.push(tokio::spawn(async move {
            let opts = LockOptions::new(LONG).wait(LONG).backoff(Backoff::new(
                Duration::from_millis(1),
                Duration::from_millis(20),
            ));
            for _ in 0..15 {
                lock.with_lock(&opts, |_| async {
                    let now = inside_b.fetch_add(1, Ordering::SeqCst) + 1;
                    max.fetch_max(now, Ordering::SeqCst);
                    tokio::time::sleep(Duration::from_millis(1)).await;
                    inside_b.fetch_sub(1, Ordering::SeqCst);
                })
                .await
                .unwrap();
            }
        }));
    }
    for t in tasks {
        tokio::time::timeout(HANG_GUARD, t)
            .await
            .expect("deadlocked")
            .unwrap();
    }
    assert_eq!(max.load(Ordering::SeqCst), 1, "both held b at once");
}

leasehold_harness::server_test!(async fn opposite_orders_never_deadlock_nor_share_a_key(bin) {
    let server = Server::start(&bin, &ServerOptions::new()).unwrap();
    let client = Locker::connect(&server.url()).await.unwrap();
    opposite_orders(&client, "m:x", "m:y").await;
});

leasehold_harness::server_test!(async fn an_auto_extended_multi_lock_is_kept_and_its_loss_reported(bin) {
    let server = Server::start(&bin, &ServerOptions::new()).unwrap();
    let client = Locker::connect(&server.url()).await.unwrap();
    let lock = client.as_redis().unwrap().multi_lock(&["m:r1", "m:r2", "m:r3"]).unwrap();
    let g = lock
        .try_acquire(&LockOptions::new(Duration::from_secs(1)).auto_extend(true))
        .await
        .unwrap()
        .acquired()
        .unwrap();
    let stats = client.as_redis().unwrap().renewal_stats();
    until("renewed past three TTLs", || stats.renewals() >= 4).await;
    assert!(g.is_held());
    for k in ["m:r1", "m:r2", "m:r3"] {
        assert_eq!(get(&server, k).as_deref(), Some(g.token().expose()));
    }
    // One key taken away: the whole lease is lost, and the release says so.
    server.command(&["DEL", "m:r2"]).unwrap();
    tokio::time::timeout(HANG_GUARD, g.lost()).await.expect("loss reported");
    assert_eq!(g.loss_reason(), Some(LossReason::NotHeld));
    assert!(matches!(g.release().await, Err(Error::NotHeld { .. })));
    assert_eq!((get(&server, "m:r1"), get(&server, "m:r3")), (None, None), "the rest released");
});

leasehold_harness::server_test!(async fn bad_input_is_refused(bin) {
    let server = Server::start(&bin, &ServerOptions::new()).unwrap();
    let client = Locker::connect(&server.url()).await.unwrap();
    let redis = client.as_redis().expect("a Redis client");
    let none: [&str; 0] = [];
    assert!(matches!(redis.multi_lock(&none), Err(Error::InvalidArgument { .. })));
    assert!(matches!(redis.multi_lock(&["a", "a"]), Err(Error::InvalidArgument { .. })));
    assert!(matches!(redis.multi_lock(&["a", ""]), Err(Error::InvalidArgument { .. })));
    let lock = redis.multi_lock(&["a", "b"]).unwrap();
    for opts in [
        LockOptions::new(LONG).fencing(true),
        LockOptions::new(LONG).fair(true),
        LockOptions::new(LONG).replica_ack(1, Duration::from_millis(10)),
    ] {
        assert!(matches!(lock.try_acquire(&opts).await, Err(Error::Unsupported { .. })));
    }
});

// On a cluster: keys of several slots are taken group by group in one global order with
// rollback (no deadlock, never shared); keys under one hash tag are one atomic group and may
// be auto-extended; several slots with auto-extension are refused.
leasehold_harness::server_test!(async fn on_a_cluster_across_slots_and_within_one(bin) {
    let cluster = Cluster::start(&bin, &ClusterOptions::new()).unwrap();
    let client = RedisClient::connect_cluster(&cluster.urls(), leasehold::ClientOptions::new())
        .await
        .map(Locker::from)
        .unwrap();
    let (a, b) = ("m:across:a", "m:across:b");
    assert_ne!(leasehold::redis::key_slot(a), leasehold::redis::key_slot(b));
    opposite_orders(&client, a, b).await;
    let across = client.as_redis().unwrap().multi_lock(&[a, b]).unwrap();
    let held_b = client.try_acquire(b, &LockOptions::new(LONG)).await.unwrap().acquired().unwrap();
    assert!(!across.try_acquire(&LockOptions::new(LONG)).await.unwrap().is_acquired());
    assert_eq!(get(cluster.master_for_key(a).unwrap(), a), None, "rolled back");
    held_b.release().await.unwrap();
    assert!(matches!(
        across.try_acquire(&LockOptions::new(LONG).auto_extend(true)).await,
        Err(Error::Unsupported { .. })
    ));
    let tagged = client.as_redis().unwrap().multi_lock(&["{acct}:1", "{acct}:2"]).unwrap();
    let g = tagged
        .try_acquire(&LockOptions::new(Duration::from_secs(1)).auto_extend(true))
        .await
        .unwrap()
        .acquired()
        .unwrap();
    let stats = client.as_redis().unwrap().renewal_stats();
    until("renewed", || stats.renewals() >= 3).await;
    g.release().await.unwrap();
});
