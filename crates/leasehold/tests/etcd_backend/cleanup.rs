//! What a release etcd did not answer leaves behind, and what a forced release reports (issue
//! 30, findings L1, F3 and M1(b)), against a real single-member etcd that is stopped and
//! started again with its data dir, or frozen.

use std::time::Duration;

use leasehold::LockOptions;
use leasehold_harness::etcd_for_test;

use super::{GENEROUS, client, entry_count_is, raw};

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
