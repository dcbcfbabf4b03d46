//! Failover of a single lock server to a replica that had not received the lock.
//!
//! Redis and Valkey replicate asynchronously: a master acknowledges `SET NX` (and the fencing
//! counter's `INCR`) before any replica has them. If the master dies then and a replica is
//! promoted, the lock and the counter's last increment are gone, and a second client gets the
//! same lock, with the same fencing number. These tests make that happen with real servers and
//! show what still protects the data (the fenced write's tie-break) and what prevents it
//! (`LockOptions::replica_ack`).
//!
//! Holding replication back: `SIGSTOP` on the replica alone is not enough. The master keeps
//! writing the replication stream into the replica's socket, the kernel buffers it (on loopback
//! at once), and the resumed replica applies the lock from its receive buffer before it notices
//! that the master is gone: on all three servers the promoted replica then *has* the key. So
//! the replica is stopped and its link is cut on the master (`CLIENT KILL TYPE replica`, a
//! partition between the two): the stopped replica cannot reconnect, nothing more reaches it,
//! and the master goes on accepting writes (no `min-replicas-to-write`).

use crate::common;

use std::time::Duration;

use common::get;
use leasehold::redis::{FencedStore, fence_key};
use leasehold::{Error, FencedWrite, LockOptions, Locker, TryAcquire};
use leasehold_harness::{Server, ServerBinary, ServerOptions};

const LONG: Duration = Duration::from_secs(60);
const KEY: &str = "lock:failover";
const RESOURCE: &str = "resource:failover";
/// A key written and acknowledged before replication is held back: the promoted replica has it,
/// which shows it was a working replica that missed only what came later.
const BEFORE: &str = "written-before-the-partition";

/// A master and a replica that has everything the master has so far (`BEFORE` included, as the
/// replica's own acknowledgement says).
fn master_and_synced_replica(bin: &ServerBinary) -> (Server, Server) {
    let master = Server::start(bin, &ServerOptions::new()).expect("master starts");
    let replica = master
        .start_replica(&ServerOptions::new())
        .expect("replica starts and links");
    let replies = master
        .commands(&[&["SET", BEFORE, "1"], &["WAIT", "1", "10000"]])
        .expect("SET + WAIT");
    assert!(replies[0].is_ok(), "{replies:?}");
    assert_eq!(
        replies[1].as_integer(),
        Some(1),
        "the replica did not acknowledge: {replies:?}"
    );
    (master, replica)
}

/// Freezes the replica and cuts its link on the master; returns once the master reports no
/// connected replica, so whatever the master accepts from now on reaches no replica.
fn hold_back_replication(master: &Server, replica: &Server) {
    replica.pause().expect("SIGSTOP the replica");
    let killed = master
        .command(&["CLIENT", "KILL", "TYPE", "replica"])
        .expect("CLIENT KILL");
    assert_eq!(
        killed.as_integer(),
        Some(1),
        "replication links cut: {killed:?}"
    );
    let info = master.info("replication").expect("INFO replication");
    assert!(
        info.lines().any(|l| l.trim() == "connected_slaves:0"),
        "the master still has a replica:\n{info}"
    );
}

/// The master crashes; the replica resumes and is made the master.
fn fail_over(master: &mut Server, replica: &Server) {
    master.kill();
    replica.resume().expect("SIGCONT the replica");
    replica.promote().expect("REPLICAOF NO ONE");
    let info = replica.info("replication").expect("INFO replication");
    assert!(info.lines().any(|l| l.trim() == "role:master"), "{info}");
}

// The hazard, end to end: A holds the lock on the master; the failover loses it (and the
// counter's INCR); B acquires on the new master and gets A's number. Both hold the lock at once.
// At the resource (a third server, untouched by the failover) B writes first, and A's write with
// the equal number is refused only because it comes with another token: the `n < highest` rule
// alone would have let it through.
leasehold_harness::server_test!(async fn failover_loses_the_lock_and_the_fenced_write_keeps_the_stale_holder_out(bin) {
    let (mut master, replica) = master_and_synced_replica(&bin);
    let resource = Server::start(&bin, &ServerOptions::new()).expect("resource server starts");
    let store = FencedStore::connect(&resource.url()).await.expect("resource connects");
    let fenced = LockOptions::new(LONG).fencing(true);

    let locks_a = Locker::connect(&master.url()).await.expect("A connects");
    hold_back_replication(&master, &replica);
    let a = locks_a.try_acquire(KEY, &fenced).await.unwrap().acquired().expect("A acquires");
    let a_number = a.fencing_token().expect("fencing on");
    assert_eq!(a_number, 1);
    assert_eq!(get(&master, KEY).as_deref(), Some(a.token().expose()));
    assert_eq!(get(&master, &fence_key(KEY)).as_deref(), Some("1"));

    fail_over(&mut master, &replica);
    // The observed hazard: the new master has what came before the partition, but neither A's
    // lock nor the counter's increment.
    assert_eq!(get(&replica, BEFORE).as_deref(), Some("1"), "the replica never synced");
    assert_eq!(get(&replica, KEY), None, "the replica received A's lock after all");
    assert_eq!(get(&replica, &fence_key(KEY)), None, "the replica received the INCR after all");

    let locks_b = Locker::connect(&replica.url()).await.expect("B connects to the new master");
    let b = locks_b.try_acquire(KEY, &fenced).await.unwrap().acquired().expect("B acquires");
    // Two holders at once: A's lease is still valid (60 s, and A cannot know), and the lock
    // server now holds B's token.
    assert!(a.is_held() && b.is_held());
    assert_eq!(get(&replica, KEY).as_deref(), Some(b.token().expose()));
    assert_ne!(a.token(), b.token());
    // The counter lost its last INCR in the same failover: B is issued A's number again.
    assert_eq!(b.fencing_token(), Some(a_number));

    let fence_a = a.fence().unwrap();
    let fence_b = b.fence().unwrap();
    assert_eq!(store.write(RESOURCE, &fence_b, "B").await.unwrap(), FencedWrite::Accepted);
    assert_eq!(
        store.write(RESOURCE, &fence_a, "A (stale)").await.unwrap(),
        FencedWrite::Rejected { highest: a_number },
        "equal number, other token: the tie-break must refuse A"
    );
    // B, the owner of that number at the resource, may go on writing.
    assert!(store.write(RESOURCE, &fence_b, "B again").await.unwrap().is_accepted());
    let stored = store.read(RESOURCE).await.unwrap().expect("resource written");
    assert_eq!((stored.value.as_slice(), stored.fence), (&b"B again"[..], a_number));

    b.release().await.expect("B releases on the new master");
    // A's server is dead: nothing to release there.
    let _ = a.detach();
});

// With a replica acknowledgement required, the same partition makes A's acquisition fail: the
// WAIT times out with 0 replicas, the lock is given back on the master, and A never starts work,
// so the failover cannot produce a second holder. (The counter's INCR stays on the master: a
// number is spent, not reused.)
leasehold_harness::server_test!(async fn replica_ack_refuses_a_lock_the_replica_did_not_receive(bin) {
    let (mut master, replica) = master_and_synced_replica(&bin);
    let locks_a = Locker::connect(&master.url()).await.expect("A connects");
    hold_back_replication(&master, &replica);

    let acked = LockOptions::new(LONG)
        .fencing(true)
        .replica_ack(1, Duration::from_millis(500));
    let err = locks_a.try_acquire(KEY, &acked).await.expect_err("A must not get the lock");
    match &err {
        Error::NotReplicated { key, acked, wanted } => {
            assert_eq!((key.as_str(), *acked, *wanted), (KEY, 0, 1), "{err}");
        }
        other => panic!("expected NotReplicated, got {other:?}"),
    }
    // Given back on the master (not left to block everyone for a TTL); the number was spent.
    assert_eq!(get(&master, KEY), None, "the unacknowledged lock was not released");
    assert_eq!(get(&master, &fence_key(KEY)).as_deref(), Some("1"));
    // The waiting acquisition goes through the same check.
    let err = locks_a
        .acquire(KEY, &acked.clone().wait(Duration::from_secs(5)))
        .await
        .expect_err("A must not get the lock by waiting either");
    assert!(matches!(err, Error::NotReplicated { acked: 0, wanted: 1, .. }), "{err:?}");
    assert_eq!(get(&master, KEY), None);

    fail_over(&mut master, &replica);
    let locks_b = Locker::connect(&replica.url()).await.expect("B connects to the new master");
    let b = locks_b
        .try_acquire(KEY, &LockOptions::new(LONG).fencing(true))
        .await
        .unwrap()
        .acquired()
        .expect("B acquires on the new master");
    assert_eq!(get(&replica, KEY).as_deref(), Some(b.token().expose()));
    b.release().await.expect("B releases");
});

// With a healthy replica the acknowledgement comes, the acquisition succeeds, and a failover to
// that replica keeps both the lock and the counter: B finds the lock busy. (On loopback a running
// replica would usually have the key without the WAIT too; what the acknowledgement adds is
// knowing it before A starts work. The failing case is the test above.)
leasehold_harness::server_test!(async fn replica_acknowledged_lock_survives_failover(bin) {
    let (mut master, replica) = master_and_synced_replica(&bin);
    let locks_a = Locker::connect(&master.url()).await.expect("A connects");
    let acked = LockOptions::new(LONG)
        .fencing(true)
        .replica_ack(1, Duration::from_secs(10));
    let a = locks_a.try_acquire(KEY, &acked).await.expect("acknowledged").acquired().expect("A acquires");
    assert_eq!(a.fencing_token(), Some(1));

    fail_over(&mut master, &replica);
    assert_eq!(get(&replica, KEY).as_deref(), Some(a.token().expose()));
    assert_eq!(get(&replica, &fence_key(KEY)).as_deref(), Some("1"));
    let locks_b = Locker::connect(&replica.url()).await.expect("B connects to the new master");
    let b = locks_b.try_acquire(KEY, &LockOptions::new(LONG).fencing(true)).await.unwrap();
    assert!(matches!(b, TryAcquire::Busy { remaining: Some(_) }), "{b:?}");
    // A can still release its lock on the new master with its token.
    locks_b.release(KEY, a.token()).await.expect("A's token releases on the new master");
    let _ = a.detach();
    let b = locks_b.try_acquire(KEY, &LockOptions::new(LONG).fencing(true)).await.unwrap().acquired().expect("B acquires");
    assert_eq!(b.fencing_token(), Some(2), "the counter survived the failover");
    b.release().await.expect("B releases");
});
