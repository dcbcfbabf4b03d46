//! Sentinel: a client connected through real sentinels (a primary, a replica, three sentinels)
//! follows failovers without being rebuilt; a lease whose key the new primary lacks is reported
//! lost; `replica_ack` composes with it; bad input is a clear error.

use crate::common;

use common::until;

use std::time::Duration;

use common::get;
use leasehold::redis::RedisClient;
use leasehold::{ClientOptions, Error, LockOptions, Locker};
use leasehold_harness::{SentinelOptions, SentinelSet};

const LONG: Duration = Duration::from_secs(60);
const HANG_GUARD: Duration = Duration::from_secs(60);

async fn renewals_reach(client: &Locker, n: u64) {
    let stats = client.as_redis().unwrap().renewal_stats();
    until("renewals", || stats.renewals() >= n).await;
}

// A graceful failover (SENTINEL FAILOVER): the old primary becomes a replica (READONLY), the
// client asks the sentinels again and moves to the new primary; the replicated lease keeps
// renewing there, and new locks are taken there.
leasehold_harness::server_test!(async fn the_client_follows_a_sentinel_failover(bin) {
    let set = SentinelSet::start(&bin, &SentinelOptions::new()).expect("sentinel set starts");
    let client = Locker::connect(&set.lock_url("redis-sentinel")).await.expect("connects through the sentinels");
    let before = set.primary_addr().unwrap();
    // replica_ack composes: WAIT on the primary the sentinels named. The TTL outlasts the
    // failover (seconds on a loaded machine: writes are paused on the old primary meanwhile, so
    // no renewal gets through); a shorter one is lost, and reported so.
    let opts = LockOptions::new(Duration::from_secs(15)).auto_extend(true).fencing(true).replica_ack(1, Duration::from_secs(5));
    let g = client.try_acquire("lock:follow", &opts).await.unwrap().acquired().unwrap();
    renewals_reach(&client, 1).await;
    let after = set.failover().expect("failover");
    assert_ne!(before, after);
    let primary = set.primary().unwrap();
    assert_eq!(get(primary, "lock:follow").as_deref(), Some(g.token().expose()), "replicated");
    let base = client.as_redis().unwrap().renewal_stats().renewals();
    renewals_reach(&client, base + 2).await;
    assert!(g.is_held(), "lost in a graceful failover: {:?}", g.loss_reason());
    // A new lock lands on the new primary, through the same client.
    let h = tokio::time::timeout(HANG_GUARD, client.acquire("lock:after", &LockOptions::new(LONG).wait(Duration::from_secs(30))))
        .await
        .expect("hung")
        .expect("acquired after the failover");
    assert_eq!(get(primary, "lock:after").as_deref(), Some(h.token().expose()));
    h.release().await.unwrap();
    g.release().await.unwrap();
    assert_eq!(get(primary, "lock:follow"), None);
});

// The hazard: replication is held back (the replica frozen and its link cut, so it cannot fetch
// the key later), a lease is taken on the primary, the primary dies and the sentinels promote
// the replica. The lease whose key the new primary lacks is reported lost; the one acquired
// before the cut keeps renewing; a replica-acknowledged acquisition during the cut is refused.
leasehold_harness::server_test!(async fn a_lease_lost_in_a_failover_is_reported(bin) {
    let mut set = SentinelSet::start(&bin, &SentinelOptions::new()).expect("sentinel set starts");
    let client = Locker::connect(&set.lock_url("redis-sentinel")).await.unwrap();
    // TTLs that outlast the failover on a loaded machine: only a missing key may lose a lease.
    let opts = LockOptions::new(Duration::from_secs(10)).auto_extend(true);
    let kept = client
        .try_acquire("lock:kept", &opts.clone().replica_ack(1, Duration::from_secs(5)))
        .await
        .unwrap()
        .acquired()
        .expect("acknowledged by the replica");
    let primary = set.primary_index().unwrap();
    let replica = (0..set.data_nodes().len()).find(|i| *i != primary).unwrap();
    set.data_node(replica).unwrap().pause().unwrap();
    let killed = set.data_node(primary).unwrap().command(&["CLIENT", "KILL", "TYPE", "replica"]).unwrap();
    assert_eq!(killed.as_integer(), Some(1), "{killed:?}");
    let lost = client.try_acquire("lock:lost", &opts).await.unwrap().acquired().unwrap();
    // The mitigation: no replica acknowledges, so the lock is refused (and given back).
    let refused = client
        .try_acquire("lock:acked", &LockOptions::new(LONG).replica_ack(1, Duration::from_millis(200)))
        .await
        .unwrap_err();
    assert!(matches!(refused, Error::NotReplicated { acked: 0, wanted: 1, .. }), "{refused:?}");
    assert_eq!(get(set.data_node(primary).unwrap(), "lock:acked"), None);

    // The primary dies first, then the replica wakes (it cannot reach a dead primary to fetch
    // the key) and the sentinels promote it.
    // A client that stays idle through the failover: its first request after it meets the
    // dead primary's connection.
    let idle = Locker::connect(&set.lock_url("redis-sentinel")).await.expect("connects through the sentinels");
    let old = set.primary_addr().unwrap();
    set.data_node_mut(primary).unwrap().kill();
    set.data_node(replica).unwrap().resume().unwrap();
    let new = set.data_node(replica).unwrap().addr();
    until("the sentinels promote the replica", || {
        set.primary_addr().ok() == Some(new)
            && set.data_node(replica).unwrap().info("replication").is_ok_and(|i| i.lines().any(|l| l.trim() == "role:master"))
    })
    .await;
    assert_ne!(old, new);
    let promoted = set.data_node(replica).unwrap();
    assert_eq!(get(promoted, "lock:lost"), None, "the replica got the key after all");
    // A waiting acquisition rides out the broken connection and lands on the new primary.
    let first = tokio::time::timeout(HANG_GUARD, idle.acquire("lock:idle", &LockOptions::new(LONG).wait(Duration::from_secs(30))))
        .await
        .expect("hung")
        .expect("the idle client's first acquisition after the failover");
    assert_eq!(get(promoted, "lock:idle").as_deref(), Some(first.token().expose()));
    first.release().await.unwrap();

    tokio::time::timeout(HANG_GUARD, lost.lost()).await.expect("the lost lease was not reported");
    assert!(!lost.is_held());
    let base = client.as_redis().unwrap().renewal_stats().renewals();
    renewals_reach(&client, base + 2).await;
    assert!(kept.is_held(), "the replicated lease was lost: {:?}", kept.loss_reason());
    let again = tokio::time::timeout(HANG_GUARD, client.acquire("lock:lost", &LockOptions::new(LONG).wait(Duration::from_secs(30))))
        .await
        .expect("hung")
        .expect("acquired on the new primary");
    assert_eq!(get(promoted, "lock:lost").as_deref(), Some(again.token().expose()));
    again.release().await.unwrap();
    kept.release().await.unwrap();
});

// Bad input: a master name no sentinel knows is a Topology error; all sentinels down is a
// connection error within the connect timeout, not a hang.
leasehold_harness::server_test!(async fn unknown_master_and_no_sentinels_are_clear_errors(bin) {
    let mut set = SentinelSet::start(&bin, &SentinelOptions::new()).expect("sentinel set starts");
    let err = RedisClient::connect_sentinel(&set.sentinel_urls(), "no-such-master", ClientOptions::new()).await.unwrap_err();
    assert!(matches!(err, Error::Topology { .. }), "{err:?}");
    assert!(err.to_string().contains("no-such-master"), "{err}");
    for i in 0..set.sentinels().len() {
        set.sentinel_mut(i).unwrap().kill();
    }
    let options = ClientOptions::new().connect_timeout(Duration::from_secs(2));
    let err = tokio::time::timeout(HANG_GUARD, RedisClient::connect_sentinel(&set.sentinel_urls(), set.master_name(), options))
        .await
        .expect("hung")
        .unwrap_err();
    assert!(matches!(err, Error::Connection { .. }), "{err:?}");
});
