//! What a release etcd did not answer leaves behind, and what a forced release reports (issue
//! 30, findings L1, F3 and M1(b)), against a real single-member etcd that is stopped and
//! started again with its data dir, or frozen.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use leasehold::etcd::EtcdClient;
use leasehold::{ClientOptions, LockOptions, Locker, TryAcquire};
use leasehold_harness::etcd_for_test;

use super::{GENEROUS, client, entries, entry_count_is, entry_lease, raw, until, url};

/// Finding L1: a lock whose release etcd refused (etcd down), and whose background cleanup
/// gave up, used to ride on its session's lease for as long as the client held anything else
/// of that TTL: held by nobody, for ever. Now the cleanup is kept by the session as an orphan
/// and deleted (token-checked) at its next keep-alive once etcd answers: `k`'s entry goes
/// while `other`, on the same session lease, is still held (so the lease did not expire: the
/// entry was deleted), and another client takes `k` at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_etcd_refused_is_cleaned_up_while_the_session_lives() {
    let Some(mut etcd) = etcd_for_test() else {
        return;
    };
    let c = client(&etcd).await;
    // One session (TTL 30 s) for both, renewed every 500 ms.
    let opts = LockOptions::new(Duration::from_secs(30))
        .auto_extend(true)
        .renew_every(Duration::from_millis(500));
    let other = c.acquire("l1-other", &opts).await.unwrap();
    let k = c.acquire("l1-k", &opts).await.unwrap();
    {
        let raw = raw(&[etcd.endpoint()]).await;
        assert_eq!(
            entry_lease(&raw, "l1-k").await,
            entry_lease(&raw, "l1-other").await,
            "one session lease"
        );
    }
    tokio::task::block_in_place(|| etcd.stop());
    k.release().await.expect_err("etcd is down");
    // The fault: etcd stays down for longer than the background cleanup's tries (five, about
    // 1.5 s of refused connections), then comes back with its data (its leases kept).
    tokio::time::sleep(Duration::from_secs(3)).await;
    tokio::task::block_in_place(|| etcd.restart()).unwrap();
    let raw = raw(&[etcd.endpoint()]).await;
    // Far below the 30 s TTL: the session renews every 500 ms once etcd answers.
    entry_count_is(&raw, "l1-k", 0).await;
    assert_eq!(entries(&raw, "l1-other").await.len(), 1, "other's entry");
    assert_eq!(other.loss_reason(), None);
    let c2 = client(&etcd).await;
    match c2
        .try_acquire("l1-k", &LockOptions::new(Duration::from_secs(5)))
        .await
        .unwrap()
    {
        TryAcquire::Acquired(g) => g.release().await.unwrap(),
        TryAcquire::Busy { .. } => panic!("l1-k is still held"),
    }
    other.release().await.unwrap();
}

/// Finding F3: a guard release with `min_hold` whose move onto the hold's lease got no answer
/// (etcd frozen past the response timeout) used to delete the entry in the background, freeing
/// the key at once. Now the move is repeated, never replaced by a delete: the entry moves onto
/// the hold's lease, stays there (checked at every poll) until the hold is nearly over, and
/// the key is free once the hold has ended. For a lock on a lease of its own and for an
/// auto-extended one (on its session's lease, which must not retire meanwhile).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_min_hold_release_etcd_did_not_answer_keeps_the_hold() {
    let Some(etcd) = etcd_for_test() else {
        return;
    };
    let raw = raw(&[etcd.endpoint()]).await;
    let c = Locker::from(
        EtcdClient::connect_with(
            &url(&etcd),
            ClientOptions::new().response_timeout(Duration::from_secs(1)),
        )
        .await
        .unwrap(),
    );
    let plain = LockOptions::new(Duration::from_secs(30)).min_hold(Duration::from_secs(6));
    let auto = plain.clone().auto_extend(true);
    for (key, options) in [("f3-auto", auto), ("f3-plain", plain)] {
        let g = c.acquire(key, &options).await.unwrap();
        let own = entry_lease(&raw, key).await.unwrap();
        etcd.pause().unwrap();
        let released = g.release().await;
        etcd.resume().unwrap();
        released.expect_err("etcd was frozen");
        // Another client is refused at the first look after the move.
        let checked_busy = AtomicBool::new(false);
        let checked_busy = &checked_busy;
        until("the hold is nearly over", GENEROUS, || {
            let raw = raw.clone();
            let c = c.clone();
            async move {
                let lease = entry_lease(&raw, key)
                    .await
                    .unwrap_or_else(|| panic!("{key}: the entry was deleted during the hold"));
                if lease == own {
                    // Not moved yet.
                    return false;
                }
                if !checked_busy.swap(true, Ordering::SeqCst) {
                    let busy = c
                        .try_acquire(key, &LockOptions::new(Duration::from_secs(5)))
                        .await
                        .unwrap();
                    assert!(
                        matches!(busy, TryAcquire::Busy { .. }),
                        "{key} taken in the hold"
                    );
                }
                let left = raw.lease_client().time_to_live(lease, None).await.unwrap();
                left.ttl() <= 1
            }
        })
        .await;
        let next = c
            .acquire(
                key,
                &LockOptions::new(Duration::from_secs(5)).wait(GENEROUS),
            )
            .await
            .expect("free once the hold is over");
        next.release().await.unwrap();
    }
}

/// Finding M1(b): a forced release on etcd reported the deletion's revision as the counter,
/// above the number of the waiter that takes the lock next (its entry's create revision, from
/// before the force): a resource raised to that counter refused every queued waiter. The
/// counter is now the removed entry's number + 1: above every number of the removed holder,
/// and at most every number issued after it, the queued waiter's included.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forced_counter_is_at_most_the_queued_waiters_number() {
    let Some(etcd) = etcd_for_test() else {
        return;
    };
    let raw = raw(&[etcd.endpoint()]).await;
    let c = client(&etcd).await;
    let options = LockOptions::new(Duration::from_secs(30)).fencing(true);
    let holder = c.acquire("m1", &options).await.unwrap();
    let waiter = {
        let c = client(&etcd).await;
        let options = options.clone().wait(GENEROUS);
        tokio::spawn(async move { c.acquire("m1", &options).await })
    };
    entry_count_is(&raw, "m1", 2).await;
    let forced = c.force_release("m1", "test of M1(b)").await.unwrap();
    let counter = forced.fencing_counter.expect("a counter");
    let next = waiter.await.unwrap().expect("the waiter takes the lock");
    let (old, new) = (
        holder.fencing_token().unwrap(),
        next.fencing_token().unwrap(),
    );
    assert!(
        old < counter,
        "removed holder's {old} below the counter {counter}"
    );
    assert!(
        new >= counter,
        "next holder's {new} at least the counter {counter}"
    );
    next.release().await.unwrap();
    drop(holder);
}
