//! Redis Cluster: every lock operation on a real cluster (3 masters, 1 replica each) of every
//! flavor, keys of every odd shape, sharded release notifications, renewals batched per master,
//! a slot migrated under a held lock, and a master failover.
//!
//! Each test starts its own cluster; the tests that only lock share one cluster per test
//! function (a run of sub-cases), so a flavor costs four cluster starts.

use crate::common;

use std::collections::HashSet;
use std::time::{Duration, Instant};

use leasehold::redis::{
    ExtendStrategy, FencedStore, RedisClient, RedisOptions, ReleaseStrategy, fair_entry_key,
    fair_queue_key, fence_key, key_slot, release_channel,
};
use leasehold::{Backoff, ClientOptions, Error, FencedWrite, LockOptions, Locker, TryAcquire};
use leasehold_harness::{Cluster, ClusterOptions, Server};

const LONG: Duration = Duration::from_secs(60);
const HANG_GUARD: Duration = Duration::from_secs(60);

/// Key shapes that trip up slot-naive code: no tag, tags, empty tags, braces in odd places.
const ODD_KEYS: &[&str] = &[
    "lock:plain",
    "a{user:1}b",
    "{user:1}",
    "a{}b",
    "}{x",
    "{}",
    "{}{x}",
    "a}b",
    "{a{b}c}",
    "{{a}}",
    "a{b",
    "x{}}y{z}",
    "ключ{é}",
];

fn start_cluster(bin: &leasehold_harness::ServerBinary) -> Cluster {
    Cluster::start(bin, &ClusterOptions::new()).expect("cluster starts")
}

async fn connect(cluster: &Cluster, options: impl Into<RedisOptions>) -> Locker {
    RedisClient::connect_cluster(&cluster.urls(), options)
        .await
        .map(Locker::from)
        .expect("client connects to the cluster")
}

/// How many commands `server` refused with `TRYAGAIN` so far (`INFO errorstats`).
fn tryagain_count(server: &Server) -> u64 {
    let stats = server.info("errorstats").unwrap();
    stats
        .lines()
        .find_map(|l| l.strip_prefix("errorstat_TRYAGAIN:count="))
        .map_or(0, |n| n.trim().parse::<u64>().unwrap())
}

fn get(server: &Server, key: &str) -> Option<String> {
    common::get(server, key)
}

/// Polls `cond` (observing state, never a fixed sleep) until it holds; `bound` keeps a broken
/// test from hanging.
async fn until(what: &str, bound: Duration, mut cond: impl FnMut() -> bool) {
    let start = Instant::now();
    while !cond() {
        assert!(start.elapsed() < bound, "{what}: not after {bound:?}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

// Every key shape: the library's slot computation agrees with the server's CLUSTER KEYSLOT, the
// fence key and the release channel share the key's slot, and every operation (each of which is
// one command or one script over the lock key and its fence key, plus a sharded publish) runs
// without CROSSSLOT, with the native and the Lua strategies alike.
leasehold_harness::server_test!(async fn every_operation_on_every_key_shape(bin) {
    let cluster = start_cluster(&bin);
    let native = connect(&cluster, ClientOptions::new()).await;
    let lua = connect(
        &cluster,
        RedisOptions::new().release_strategy(ReleaseStrategy::Lua).extend_strategy(ExtendStrategy::Lua),
    )
    .await;
    assert!(native.as_redis().unwrap().server().cluster_enabled);
    let mut masters = HashSet::new();
    for key in ODD_KEYS {
        let slot = cluster.keyslot(key).unwrap();
        assert_eq!(key_slot(key), slot, "slot of {key:?}");
        assert_eq!(cluster.keyslot(&fence_key(key)).unwrap(), slot, "fence key of {key:?}");
        assert_eq!(cluster.keyslot(&release_channel(key)).unwrap(), slot, "channel of {key:?}");
        assert_eq!(cluster.keyslot(&fair_queue_key(key)).unwrap(), slot, "queue of {key:?}");
        masters.insert(cluster.master_index_for_key(key).unwrap());
        let owner = cluster.master_for_key(key).unwrap();

        for (name, client) in [("native", &native), ("lua", &lua)] {
            // Fencing: SET NX PX + INCR of the fence key in one script.
            let opts = LockOptions::new(LONG).fencing(true);
            let g = client.try_acquire(key, &opts).await.unwrap().acquired()
                .unwrap_or_else(|| panic!("{name}: {key:?} not acquired"));
            let number = g.fencing_token().unwrap();
            assert_eq!(get(owner, key).as_deref(), Some(g.token().expose()), "{name} {key:?}");
            assert_eq!(get(owner, &fence_key(key)), Some(number.to_string()), "{name} {key:?}");
            // Busy, with the holder's PTTL (the waiting script).
            match client.try_acquire(key, &LockOptions::new(LONG).fencing(true)).await.unwrap() {
                TryAcquire::Busy { remaining } => assert!(remaining.is_some(), "{name} {key:?}"),
                TryAcquire::Acquired(_) => panic!("{name}: {key:?} acquired twice"),
            }
            g.extend(LONG).await.unwrap_or_else(|e| panic!("{name} extend {key:?}: {e}"));
            let state = client.inspect(key).await.unwrap();
            assert_eq!(state.holder.as_deref(), Some(g.token().expose()));
            assert_eq!(state.fencing_counter, Some(number));
            let raised = client.raise_fencing_counter(key, number + 10).await.unwrap();
            assert_eq!(raised, number + 10, "{name} {key:?}");
            g.release().await.unwrap_or_else(|e| panic!("{name} release {key:?}: {e}"));
            assert_eq!(get(owner, key), None, "{name}: {key:?} still there");
            // A waiting acquisition (the acquire script with the PTTL reply) and with_lock.
            let waited = client
                .with_lock(key, &LockOptions::new(LONG).wait(Duration::from_secs(5)).fencing(true), |lease| async move {
                    lease.fencing_token()
                })
                .await
                .unwrap_or_else(|e| panic!("{name} with_lock {key:?}: {e}"));
            assert_eq!(waited, Some(number + 11), "the raised counter was used");
            assert_eq!(get(owner, key), None);
            // Fair mode: a waiter queued on the key's shard is handed the lock by the release
            // (the handoff message travels by SPUBLISH in the key's slot).
            let fair = LockOptions::new(Duration::from_secs(10)).fair(true).wait(LONG);
            let g = client.try_acquire(key, &fair).await.unwrap().acquired()
                .unwrap_or_else(|| panic!("{name}: fair {key:?} not acquired"));
            let waiter = {
                let (client, key, fair) = (client.clone(), key.to_string(), fair.clone());
                tokio::spawn(async move { client.acquire(&key, &fair).await })
            };
            let queue = fair_queue_key(key);
            until("fair waiter queued", HANG_GUARD, || {
                owner.command(&["ZCARD", &queue]).unwrap().as_integer() == Some(1)
            })
            .await;
            g.release().await.unwrap_or_else(|e| panic!("{name} fair release {key:?}: {e}"));
            let w = tokio::time::timeout(HANG_GUARD, waiter).await.unwrap().unwrap()
                .unwrap_or_else(|e| panic!("{name} fair waiter {key:?}: {e}"));
            assert_eq!(get(owner, key).as_deref(), Some(w.token().expose()), "{name} {key:?}");
            w.release().await.unwrap();
            assert_eq!(get(owner, key), None);
            // A semaphore named by the key: its keys in the key's slot, on the key's master.
            let sem = client.semaphore(key, 1).unwrap();
            let p = sem.try_acquire(&LockOptions::new(LONG)).await.unwrap().acquired()
                .unwrap_or_else(|| panic!("{name}: permit of {key:?} not acquired"));
            assert!(!sem.try_acquire(&LockOptions::new(LONG)).await.unwrap().is_acquired());
            let permits = leasehold::internal::semaphore_permits_key(key);
            assert_eq!(cluster.keyslot(&permits).unwrap(), key_slot(key), "{key:?}");
            assert_eq!(owner.command(&["ZCARD", &permits]).unwrap().as_integer(), Some(1));
            p.release().await.unwrap_or_else(|e| panic!("{name} permit release {key:?}: {e}"));
            assert_eq!(sem.holders().await.unwrap(), 0);
            // A read-write lock named by the key: readers, then the writer, on the key's master.
            let rw = client.rwlock(key).unwrap();
            let r = rw.try_read(&LockOptions::new(LONG)).await.unwrap().acquired()
                .unwrap_or_else(|| panic!("{name}: read {key:?}"));
            assert!(!rw.try_write(&LockOptions::new(LONG)).await.unwrap().is_acquired());
            r.release().await.unwrap();
            let w = rw.try_write(&LockOptions::new(LONG)).await.unwrap().acquired()
                .unwrap_or_else(|| panic!("{name}: write {key:?}"));
            assert_eq!(get(owner, key).as_deref(), Some(w.token().expose()));
            w.release().await.unwrap();
            // An election named by the key: its term and record in the key's slot.
            let election = client.election(key).unwrap();
            let lead = election.campaign(name, &LockOptions::new(LONG)).await
                .unwrap_or_else(|e| panic!("{name}: campaign {key:?}: {e}"));
            let leader = election.leader().await.unwrap().expect("a leader");
            assert_eq!((leader.id.as_str(), Some(leader.term)), (name, lead.fencing_token()));
            lead.release().await.unwrap();
            assert_eq!(election.leader().await.unwrap(), None);
        }
    }
    assert!(masters.len() >= 2, "the keys should spread over masters: {masters:?}");

    // The same as an ACL user with the cluster rule of docs/acl.md, set on every node.
    let mut rule = vec![
        "on", ">s3cret", "resetkeys", "resetchannels", "-@all", "+get", "+set", "+pttl",
        "+evalsha", "+script|load", "+info", "+ping", "+wait", "+publish", "+subscribe",
        "+unsubscribe", "+del", "+pexpire", "+incr", "+cluster|slots", "+spublish",
        "+ssubscribe", "+sunsubscribe", "+hello", "~lock:*", "~{lock:*}:fence",
        "~leasehold:probe:*", "&leasehold:released:*",
    ];
    let owner = cluster.master_for_key("lock:plain").unwrap();
    for native in ["delex", "delifeq"] {
        let reply = owner.command(&["COMMAND", "INFO", native]).unwrap();
        if reply.as_array().and_then(|a| a.first()).is_some_and(|c| !c.is_nil()) {
            rule.push(if native == "delex" { "+delex" } else { "+delifeq" });
        }
    }
    for node in cluster.nodes() {
        node.acl_setuser("locker", &rule).unwrap();
    }
    let seeds: Vec<String> = cluster.urls().iter().map(|u| u.replace("redis://", "redis://locker:s3cret@")).collect();
    let user = RedisClient::connect_cluster(&seeds, ClientOptions::new()).await.map(Locker::from).expect("the ACL user connects");
    assert!(user.as_redis().unwrap().server().can_publish, "SPUBLISH refused to the documented rule");
    assert_eq!(user.as_redis().unwrap().release_strategy(), native.as_redis().unwrap().release_strategy());
    let g = user.try_acquire("lock:plain", &LockOptions::new(Duration::from_secs(2)).fencing(true).auto_extend(true)).await.unwrap().acquired().unwrap();
    g.extend(Duration::from_secs(2)).await.unwrap();
    assert!(user.inspect("lock:plain").await.unwrap().fencing_counter.is_some());
    let stats = user.as_redis().unwrap().renewal_stats();
    until("renewals as the ACL user", HANG_GUARD, || stats.renewals() >= 2).await;
    let waiter = {
        let user = user.clone();
        tokio::spawn(async move {
            let opts = LockOptions::new(LONG).wait(Duration::from_secs(30)).backoff(Backoff::constant(Duration::from_secs(40)));
            user.acquire("lock:plain", &opts).await.map(|g| g.detach())
        })
    };
    let channel = release_channel("lock:plain");
    until("the ACL user's waiter subscribes", HANG_GUARD, || {
        let reply = owner.command(&["PUBSUB", "SHARDNUMSUB", &channel]).unwrap();
        reply.as_array().and_then(|a| a.get(1)).and_then(|v| v.as_integer()) == Some(1)
    })
    .await;
    g.release().await.unwrap();
    let lease = tokio::time::timeout(HANG_GUARD, waiter).await.expect("hung").unwrap().expect("woken");
    user.release("lock:plain", lease.token()).await.unwrap();

    // The fenced resource through the cluster connection.
    let store = FencedStore::new(native.as_redis().unwrap().connection());
    let g = native.try_acquire("res-lock", &LockOptions::new(LONG).fencing(true)).await.unwrap().acquired().unwrap();
    assert_eq!(store.write("resource:{res}", &g.fence().unwrap(), "v").await.unwrap(), FencedWrite::Accepted);
    let stale = leasehold::Fence::new(0, g.token().clone());
    assert!(matches!(store.write("resource:{res}", &stale, "old").await.unwrap(), FencedWrite::Rejected { .. }));
    // A resource store of its own, by the cluster URL form.
    let hosts: Vec<String> = cluster.urls().iter().map(|u| u.trim_start_matches("redis://").trim_end_matches('/').to_string()).collect();
    let own = FencedStore::connect(&format!("redis-cluster://{}", hosts.join(","))).await.unwrap();
    assert_eq!(own.read("resource:{res}").await.unwrap().unwrap().value, b"v");
    g.release().await.unwrap();
});

// A waiter subscribed with SSUBSCRIBE on the key's shard is woken by the release's SPUBLISH:
// its 10 s backoff and 5 s deadline leave only the notification to get it the lock.
leasehold_harness::server_test!(async fn sharded_release_notification_wakes_the_waiter(bin) {
    let cluster = start_cluster(&bin);
    for key in ["lock:wake", "a{}b"] {
        let owner = cluster.master_for_key(key).unwrap();
        let holder = connect(&cluster, ClientOptions::new()).await;
        let waiter = connect(&cluster, ClientOptions::new()).await;
        let g = holder.try_acquire(key, &LockOptions::new(LONG)).await.unwrap().acquired().unwrap();
        let task = tokio::spawn({
            let key = key.to_string();
            async move {
                let opts = LockOptions::new(LONG)
                    .wait(Duration::from_secs(5))
                    .backoff(Backoff::constant(Duration::from_secs(10)));
                waiter.acquire(&key, &opts).await.map(|g| g.detach())
            }
        });
        // The waiter's subscription is on the key's own shard.
        let channel = release_channel(key);
        until("the waiter subscribes on the key's shard", HANG_GUARD, || {
            let reply = owner.command(&["PUBSUB", "SHARDNUMSUB", &channel]).unwrap();
            reply.as_array().and_then(|a| a.get(1)).and_then(|v| v.as_integer()) == Some(1)
        })
        .await;
        g.release().await.unwrap();
        let lease = tokio::time::timeout(HANG_GUARD, task)
            .await
            .expect("hung")
            .unwrap()
            .unwrap_or_else(|e| panic!("{key:?}: not woken by the sharded notification: {e}"));
        assert_eq!(get(owner, key).as_deref(), Some(lease.token().expose()));
    }
});

// Auto-extension over a cluster: one pipeline per master per tick, not one per lease. 300
// leases spread over the three masters, renewed three times each, cost a few round trips per
// tick (at most one per master), far below one per lease.
leasehold_harness::server_test!(async fn renewals_are_batched_per_master(bin) {
    let cluster = start_cluster(&bin);
    let client = connect(&cluster, ClientOptions::new()).await;
    let opts = LockOptions::new(Duration::from_secs(3)).auto_extend(true);
    let mut guards = Vec::new();
    let mut masters = HashSet::new();
    for i in 0..300 {
        let key = format!("lease:{i}");
        masters.insert(cluster.master_index_for_key(&key).unwrap());
        guards.push(client.try_acquire(&key, &opts).await.unwrap().acquired().unwrap());
    }
    assert_eq!(masters.len(), 3, "the leases cover every master");
    let stats = client.as_redis().unwrap().renewal_stats();
    tokio::time::timeout(HANG_GUARD, async {
        while stats.renewals() < 900 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("900 renewals");
    assert_eq!(stats.lost(), 0);
    assert!(guards.iter().all(|g| g.is_held()));
    // 900 renewals in >= 3 ticks: batched per master they take about 3 round trips per tick.
    assert!(
        stats.rounds() * 30 <= stats.renewals(),
        "{} round trips for {} renewals: not batched",
        stats.rounds(),
        stats.renewals()
    );
    for g in guards {
        g.release().await.unwrap();
    }
});

// Resharding under a held, auto-extended lock while a waiter waits: the slot is migrated
// (IMPORTING/MIGRATING, MIGRATE of the keys, SETSLOT NODE) and the client follows ASK and MOVED.
// The lease survives (the key moved with its TTL) and keeps renewing on the new master, the
// waiter never gets the lock while the lease is held, and release works afterwards, after
// which the waiter gets it.
leasehold_harness::server_test!(async fn a_slot_migrates_under_a_held_lock(bin) {
    let cluster = start_cluster(&bin);
    let key = "lock:{moving}";
    let slot = cluster.keyslot(key).unwrap();
    let from = cluster.master_index_for_slot(slot).unwrap();
    let to = cluster.master_indices().unwrap().into_iter().find(|m| *m != from).unwrap();
    let holder = connect(&cluster, ClientOptions::new()).await;
    let waiter = connect(&cluster, ClientOptions::new()).await;
    let g = holder
        .try_acquire(key, &LockOptions::new(Duration::from_secs(6)).auto_extend(true).fencing(true))
        .await
        .unwrap()
        .acquired()
        .unwrap();
    let task = tokio::spawn(async move {
        let opts = LockOptions::new(LONG).wait(Duration::from_secs(120)).backoff(Backoff::new(
            Duration::from_millis(50),
            Duration::from_millis(200),
        ));
        waiter.acquire(key, &opts).await.map(|g| (Instant::now(), g))
    });
    let stats = holder.as_redis().unwrap().renewal_stats();
    let renewed = |n: u64| {
        let stats = stats.clone();
        async move {
            tokio::time::timeout(HANG_GUARD, async {
                while stats.renewals() < n {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            })
            .await
            .expect("renewals go on")
        }
    };
    renewed(1).await;
    cluster.begin_migration(slot, from, to).unwrap();
    // Half-way: the key is on the target, the slot still owned by the source (ASK).
    let moved = cluster.migrate_keys(slot, from, to).unwrap();
    assert_eq!(moved, 2, "the lock key and its fence key");
    let during = stats.renewals();
    renewed(during + 2).await;
    assert!(g.is_held(), "the lease was lost during the migration");
    cluster.finish_migration(slot, to).unwrap();
    let after = stats.renewals();
    renewed(after + 2).await;
    assert!(g.is_held(), "the lease was lost after the migration");
    assert_eq!(stats.lost(), 0);
    assert_eq!(get(cluster.node(to).unwrap(), key).as_deref(), Some(g.token().expose()));
    assert!(!task.is_finished(), "the waiter got the lock while it was held");
    let released_at = Instant::now();
    g.release().await.expect("release after the migration");
    let (acquired_at, g2) = tokio::time::timeout(HANG_GUARD, task).await.expect("hung").unwrap().unwrap();
    assert!(acquired_at >= released_at, "two valid holders");
    assert!(g2.fencing_token().is_none());
    g2.release().await.unwrap();
});

// A waiter rides out TRYAGAIN. Half-way through a migration, with the lock key already on the
// target and its fence key still on the source, a fencing acquisition (a script over both keys)
// is refused with TRYAGAIN for as long as the keys are split. The waiter keeps waiting (the
// source counts its refusals) instead of failing after the cluster client's few retries, and
// takes the lock, with the next fencing number, once the migration is over and the lock released.
leasehold_harness::server_test!(async fn a_waiter_rides_out_a_split_migration(bin) {
    let cluster = start_cluster(&bin);
    let key = "lock:{split}";
    let slot = cluster.keyslot(key).unwrap();
    let from = cluster.master_index_for_slot(slot).unwrap();
    let to = cluster.master_indices().unwrap().into_iter().find(|m| *m != from).unwrap();
    let holder = connect(&cluster, ClientOptions::new()).await;
    let waiter = connect(&cluster, ClientOptions::new()).await;
    let fenced = LockOptions::new(LONG).fencing(true);
    let g = holder.try_acquire(key, &fenced).await.unwrap().acquired().unwrap();
    let first = g.fencing_token().unwrap();

    cluster.begin_migration(slot, from, to).unwrap();
    let source = cluster.node(from).unwrap();
    let target = cluster.node(to).unwrap();
    let port = target.tls_port().unwrap_or_else(|| target.port()).to_string();
    let mut migrate = vec!["MIGRATE", "127.0.0.1", port.as_str(), key, "0", "10000"];
    if let Some(pw) = source.options().password() {
        migrate.extend(["AUTH", pw]);
    }
    let reply = source.command(&migrate).unwrap();
    assert!(reply.is_ok(), "MIGRATE of the lock key alone: {reply:?}");
    let tryagain = || tryagain_count(source);
    let before = tryagain();

    let task = tokio::spawn(async move {
        let opts = LockOptions::new(LONG).fencing(true).wait(Duration::from_secs(120)).backoff(
            Backoff::new(Duration::from_millis(20), Duration::from_millis(100)),
        );
        waiter.acquire(key, &opts).await
    });
    // Many more refusals than the cluster client's own retries (2) would absorb.
    until("the waiter is refused with TRYAGAIN again and again", HANG_GUARD, || {
        tryagain() >= before + 10
    })
    .await;
    assert!(!task.is_finished(), "the waiter gave up during the migration: {:?}", task.await);

    let rest = cluster.migrate_keys(slot, from, to).unwrap();
    assert_eq!(rest, 1, "the fence key");
    cluster.finish_migration(slot, to).unwrap();
    assert!(g.is_held());
    g.release().await.expect("release after the migration");
    let g2 = tokio::time::timeout(HANG_GUARD, task).await.expect("hung").unwrap().expect("the waiter acquired");
    assert!(g2.fencing_token().unwrap() > first, "fencing numbers went back across the migration");
    assert_eq!(get(cluster.node(to).unwrap(), key).as_deref(), Some(g2.token().expose()));
    g2.release().await.unwrap();
});

// A master that holds a lock's slot is killed and its replica promoted. A lease whose key had
// reached the replica keeps renewing on the new master; a lease whose key had not (the replica
// was frozen and its link cut before the acquisition) is reported lost, not silently kept; the
// same client then acquires on the new master without being rebuilt.
leasehold_harness::server_test!(async fn failover_inside_the_cluster(bin) {
    let mut cluster = start_cluster(&bin);
    // Two keys on the same master.
    let kept_key = "lock:{failover}:kept";
    let lost_key = "lock:{failover}:lost";
    let master = cluster.master_index_for_key(kept_key).unwrap();
    let replica = cluster.replicas_of(master).unwrap()[0];
    let client = connect(&cluster, ClientOptions::new()).await;
    // TTLs that outlast the failover on a loaded machine: only a missing key may lose a lease.
    let opts = LockOptions::new(Duration::from_secs(10)).auto_extend(true);
    let kept = client.try_acquire(kept_key, &opts).await.unwrap().acquired().unwrap();
    // The replica has it: WAIT for its acknowledgement, through the harness.
    let ack = cluster.node(master).unwrap().commands(&[&["WAIT", "1", "10000"]]).unwrap();
    assert_eq!(ack[0].as_integer(), Some(1), "{ack:?}");
    until("the replica has the kept lease", HANG_GUARD, || {
        cluster.node(replica).unwrap().commands(&[&["READONLY"], &["GET", kept_key]]).unwrap()[1].as_bytes().is_some()
    })
    .await;

    // Hold replication back: freeze the replica and cut its link on the master.
    cluster.node(replica).unwrap().pause().unwrap();
    let killed = cluster.node(master).unwrap().command(&["CLIENT", "KILL", "TYPE", "replica"]).unwrap();
    assert_eq!(killed.as_integer(), Some(1), "{killed:?}");
    let lost = client.try_acquire(lost_key, &opts).await.unwrap().acquired().unwrap();
    assert_eq!(get(cluster.node(master).unwrap(), lost_key).as_deref(), Some(lost.token().expose()));

    // The master dies first; only then does the replica wake (were the master alive, the replica
    // would reconnect and fetch the key), and it takes the slots over at once.
    cluster.node_mut(master).unwrap().kill();
    cluster.node(replica).unwrap().resume().unwrap();
    let took = cluster.node(replica).unwrap().command(&["CLUSTER", "FAILOVER", "TAKEOVER"]).unwrap();
    assert!(took.is_ok(), "{took:?}");
    let slot = cluster.keyslot(kept_key).unwrap();
    until("the replica owns the slot on every live node", HANG_GUARD, || {
        cluster.master_index_for_slot(slot).ok() == Some(replica)
    })
    .await;
    cluster.wait_until_stable().unwrap();
    let new_master = replica;
    assert_eq!(get(cluster.node(new_master).unwrap(), lost_key), None, "the replica got the lost key after all");

    // The lost lease is reported lost (NotHeld on the new master, or its validity ran out).
    tokio::time::timeout(HANG_GUARD, lost.lost()).await.expect("the lost lease was not reported");
    assert!(!lost.is_held());
    // The kept lease renews on the new master.
    let stats = client.as_redis().unwrap().renewal_stats();
    let base = stats.renewals();
    tokio::time::timeout(HANG_GUARD, async {
        while stats.renewals() < base + 2 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .expect("renewals resume on the new master");
    assert!(kept.is_held(), "the replicated lease was lost: {:?}", kept.loss_reason());
    // The same client acquires on the new master.
    let again = tokio::time::timeout(
        HANG_GUARD,
        client.acquire(lost_key, &LockOptions::new(LONG).wait(Duration::from_secs(30))),
    )
    .await
    .expect("hung")
    .expect("acquired on the new master");
    assert_eq!(get(cluster.node(new_master).unwrap(), lost_key).as_deref(), Some(again.token().expose()));
    again.release().await.unwrap();
    kept.release().await.unwrap();
});

// replica_ack: WAIT counts the writes of the connection it arrives on, so it must never be
// answered apart from its acquisition. The replica is frozen (WAIT blocks), then the client's
// connection is killed on the master while WAIT waits. The cluster client reconnects and
// retries; sent on its own, the retried WAIT found a fresh connection without writes and
// "acknowledged" at once a lock no replica had. Sent in one pipeline with the acquisition, the
// retry repeats both: the key is already there, so the attempt is busy, never granted.
leasehold_harness::server_test!(async fn replica_ack_is_never_answered_by_another_connection(bin) {
    let cluster = start_cluster(&bin);
    let key = "lock:{replica-ack}";
    let master = cluster.master_index_for_key(key).unwrap();
    let replica = cluster.replicas_of(master).unwrap()[0];
    let client = connect(&cluster, ClientOptions::new()).await;
    cluster.node(replica).unwrap().pause().unwrap();
    let attempt = tokio::spawn({
        let client = client.clone();
        async move {
            client
                .try_acquire(key, &LockOptions::new(LONG).replica_ack(1, Duration::from_secs(40)))
                .await
        }
    });
    let master_node = cluster.node(master).unwrap();
    // The client whose command is a blocked WAIT (observed, not slept for).
    let mut waiting_id = None;
    until("the acquisition blocks in WAIT", HANG_GUARD, || {
        let list = master_node.command(&["CLIENT", "LIST"]).unwrap();
        let text = String::from_utf8_lossy(list.as_bytes().unwrap_or_default()).to_string();
        waiting_id = text
            .lines()
            .find(|l| l.contains(" cmd=wait"))
            .and_then(|l| l.split(' ').find_map(|f| f.strip_prefix("id=")))
            .map(str::to_string);
        waiting_id.is_some()
    })
    .await;
    let id = waiting_id.unwrap();
    let killed = master_node.command(&["CLIENT", "KILL", "ID", &id]).unwrap();
    assert_eq!(killed.as_integer(), Some(1), "{killed:?}");
    let outcome = tokio::time::timeout(HANG_GUARD, attempt).await.expect("hung").unwrap();
    cluster.node(replica).unwrap().resume().unwrap();
    match outcome {
        Ok(TryAcquire::Acquired(guard)) => panic!(
            "granted without a replica's acknowledgement of its write (token {})",
            guard.token().expose()
        ),
        Ok(TryAcquire::Busy { .. }) | Err(_) => {}
    }
});

// Bad input: a cluster URL to a server without cluster support, and a plain URL to a cluster
// node, are refused with a Topology error that says what to do; an odd key is never a
// CROSSSLOT (covered above).
leasehold_harness::server_test!(async fn topology_mismatches_are_clear_errors(bin) {
    let plain = Server::start(&bin, &leasehold_harness::ServerOptions::new()).unwrap();
    let err = RedisClient::connect(&format!("redis-cluster://127.0.0.1:{}", plain.port())).await.unwrap_err();
    assert!(matches!(err, Error::Topology { .. }), "{err:?}");
    assert!(err.to_string().contains("not a Redis Cluster node"), "{err}");

    let cluster = start_cluster(&bin);
    let err = RedisClient::connect(&cluster.url()).await.unwrap_err();
    assert!(matches!(err, Error::Topology { .. }), "{err:?}");
    assert!(err.to_string().contains("redis-cluster://"), "{err}");
    // The URL form works.
    let hosts: Vec<String> = cluster.urls().iter().map(|u| u.trim_start_matches("redis://").trim_end_matches('/').to_string()).collect();
    let client = Locker::connect(&format!("redis-cluster://{}", hosts.join(","))).await.unwrap();
    let g = client.try_acquire("k", &LockOptions::new(LONG)).await.unwrap().acquired().unwrap();
    g.release().await.unwrap();
});

// Issue 22, finding 1: the fair queue outlives a migration held open, and fair releases ride it
// out. The holder H of a fair lock was handed it by its own client's release, whose reply named
// W1 as next in line (W1 may then get an early handoff). A migration of the slot is held open:
// every fair script is refused with TRYAGAIN (W1's refreshes too) while H's single-key renewals
// go on. When the queue was a key with its own expiry (twice the entry lifetime from W1's last
// refresh), it vanished meanwhile; arrival order restarted after the migration, and H's client
// could hand W1 an early lease while the release script handed the key to whoever queued first:
// two holders. Now the queue has no expiry: after well past that lifetime (W1's refreshes, a
// third of a second apart, refused ten times) it is still there, W1 keeps its place, a waiter of
// another client queues behind it, and the lock goes H -> W1 -> W2 with one holder at a time.
// A fair release sent during the migration is retried until it is over (it used to fail).
leasehold_harness::server_test!(async fn the_fair_queue_outlives_a_migration_held_open(bin) {
    let cluster = start_cluster(&bin);
    let key = "lock:{fairmig}";
    let other = "lock:{fairmig}:other";
    let queue = fair_queue_key(key);
    let slot = cluster.keyslot(key).unwrap();
    let from = cluster.master_index_for_slot(slot).unwrap();
    let to = cluster.master_indices().unwrap().into_iter().find(|m| *m != from).unwrap();
    let a = connect(&cluster, ClientOptions::new()).await;
    let b = connect(&cluster, ClientOptions::new()).await;
    // One second: entries live 1 s, and the old queue lived 2 s past W1's last refresh.
    let ttl = Duration::from_secs(1);
    let fair = LockOptions::new(ttl).fair(true).auto_extend(true).wait(LONG);

    let g_other = a.acquire(other, &LockOptions::new(LONG).fair(true)).await.unwrap();
    let g = a.acquire(key, &fair).await.unwrap();
    let zcard = |node: usize| {
        cluster.node(node).unwrap().command(&["ZCARD", &queue]).unwrap().as_integer().unwrap()
    };
    let spawn = |client: &Locker| {
        let (client, fair) = (client.clone(), fair.clone());
        tokio::spawn(async move { client.acquire(key, &fair).await })
    };
    let h = spawn(&a);
    until("H queued", HANG_GUARD, || zcard(from) == 1).await;
    let w1 = spawn(&a);
    until("W1 queued behind H", HANG_GUARD, || zcard(from) == 2).await;
    g.release().await.unwrap();
    let h = tokio::time::timeout(HANG_GUARD, h).await.expect("hung").unwrap().expect("H acquired");
    assert_eq!(zcard(from), 1, "W1 is next in line");
    let head = cluster.node(from).unwrap().command(&["ZRANGE", &queue, "0", "0"]).unwrap();
    let w1_ticket = head.as_array().and_then(|a| a.first()).and_then(|t| t.as_str()).unwrap().to_string();
    let w1_entry = fair_entry_key(key, &w1_ticket);

    let source = cluster.node(from).unwrap();
    let tryagain = || tryagain_count(source);
    let before = tryagain();
    cluster.begin_migration(slot, from, to).unwrap();
    // W1's attempts are refused (at least a third of a second apart): ten take > 3 s, well past
    // the old queue lifetime.
    until("W1 refused ten times", HANG_GUARD, || tryagain() >= before + 10).await;
    assert!(h.is_held(), "H's renewals go on during the migration");
    assert_eq!(
        source.command(&["PTTL", &queue]).unwrap().as_integer(),
        Some(-1),
        "the queue must still exist, without an expiry, past its old lifetime"
    );
    assert_eq!(zcard(from), 1, "W1 keeps its place");

    // A waiter of another client, and a fair release, both during the migration.
    let w2 = spawn(&b);
    let release_other = tokio::spawn(async move { g_other.release().await });
    // Held open well past the cluster client's own retries (2, at most 0.5 s apart).
    let refused = tryagain();
    until("more refusals", HANG_GUARD, || tryagain() >= refused + 40).await;
    assert!(common::get(source, other).is_some(), "nothing was released during the migration");
    cluster.migrate_keys(slot, from, to).unwrap();
    cluster.finish_migration(slot, to).unwrap();
    tokio::time::timeout(HANG_GUARD, release_other).await.expect("hung").unwrap()
        .expect("a fair release during a migration is retried until it is over");

    // W1's entry (1 s) expired while its refreshes were refused; until its next attempt
    // writes it again, a release would rightly skip W1 as dead. Wait for that attempt.
    until("W2 queued behind W1, and W1's entry alive again", HANG_GUARD, || {
        zcard(to) == 2 && cluster.node(to).unwrap().command(&["EXISTS", &w1_entry]).unwrap().as_integer() == Some(1)
    })
    .await;
    assert!(!w1.is_finished() && !w2.is_finished());
    h.release().await.unwrap();
    let w1 = tokio::time::timeout(HANG_GUARD, w1).await.expect("hung").unwrap().expect("W1 acquired");
    assert!(w1.is_held());
    assert_eq!(get(cluster.node(to).unwrap(), key).as_deref(), Some(w1.token().expose()));
    assert!(!w2.is_finished(), "two holders: W2 got the lock while W1 holds it");
    w1.release().await.unwrap();
    let w2 = tokio::time::timeout(HANG_GUARD, w2).await.expect("hung").unwrap().expect("W2 acquired");
    assert_eq!(get(cluster.node(to).unwrap(), key).as_deref(), Some(w2.token().expose()));
    w2.release().await.unwrap();
});
