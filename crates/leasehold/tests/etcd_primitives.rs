#![cfg(feature = "etcd")]
//! Semaphores, read-write locks and elections on etcd (`leasehold::etcd`'s `sync` module),
//! through [`Locker`] as users reach them, against real etcd members started by the harness:
//! one member, and a cluster of three where the claim depends on the cluster. Only what is
//! etcd's own is here: the entries etcd holds, which waiter a release wakes, the etcd lease of a
//! permit, revoked leases. Each primitive's contract (exactly N permits, writers alone, rising
//! terms, token-checked release and extend, options refused, another number of permits,
//! `watch` hearing each change) is checked on every backend, etcd's two subjects included, by
//! `conformance::primitives`. Nothing sleeps and hopes: every wait observes state (the entries
//! etcd holds, a loss signal) and is bounded only to keep a broken build from hanging.

use std::time::Duration;

use leasehold::{Error, LockGuard, LockOptions, Locker, TryAcquire};
use leasehold_harness::{etcd_cluster_for_test, etcd_for_test};

use crate::etcd_backend::{GENEROUS, cluster_url, grpc_calls, until, url};

async fn locker(url: &str) -> Locker {
    Locker::connect(url).await.expect("connect")
}

/// A plain etcd client, for looking at (and tampering with) the entries from outside.
async fn raw(url: &str) -> etcd_client::Client {
    let endpoints: Vec<String> = url
        .trim_start_matches("etcd://")
        .split(',')
        .map(|h| format!("http://{h}"))
        .collect();
    etcd_client::Client::connect(&endpoints, None)
        .await
        .expect("raw etcd client")
}

/// `\0kind\0name\0` (the layout of the module docs).
fn prefix(kind: &str, name: &str) -> Vec<u8> {
    format!("\0{kind}\0{name}\0").into_bytes()
}

/// The entries under `prefix`, oldest first: (key, create revision, lease).
async fn entries(raw: &etcd_client::Client, prefix: &[u8]) -> Vec<(Vec<u8>, i64, i64)> {
    let options = etcd_client::GetOptions::new().with_prefix().with_sort(
        etcd_client::SortTarget::Create,
        etcd_client::SortOrder::Ascend,
    );
    let resp = raw
        .kv_client()
        .get(prefix.to_vec(), Some(options))
        .await
        .expect("get");
    resp.kvs()
        .iter()
        .map(|kv| {
            let token = std::str::from_utf8(kv.value()).unwrap();
            let key = kv.key();
            assert!(
                key.windows(token.len()).any(|w| w == token.as_bytes()),
                "an entry's key holds the token its value stores"
            );
            (key.to_vec(), kv.create_revision(), kv.lease())
        })
        .collect()
}

async fn entry_count_is(raw: &etcd_client::Client, prefix: &[u8], n: usize) {
    until(&format!("{n} entries"), GENEROUS, || async {
        entries(raw, prefix).await.len() == n
    })
    .await;
}

/// Revokes, from outside, the lease of the entry that stores `guard`'s token: what a crashed
/// holder's session comes to once etcd expires it.
async fn revoke_lease_of(raw: &etcd_client::Client, prefix: &[u8], guard: &LockGuard) {
    let token = guard.token().expose().as_bytes();
    let all = entries(raw, prefix).await;
    let (_, _, lease) = all
        .iter()
        .find(|(key, _, _)| key.windows(token.len()).any(|w| w == token))
        .expect("the holder's entry");
    raw.lease_client().revoke(*lease).await.expect("revoke");
}

fn acquired(outcome: TryAcquire) -> LockGuard {
    outcome.acquired().expect("acquired")
}

fn is_busy(outcome: &TryAcquire) -> bool {
    matches!(outcome, TryAcquire::Busy { .. })
}

fn waiting() -> LockOptions {
    LockOptions::new(Duration::from_secs(10)).wait(GENEROUS)
}

/// Semaphore of 2: a waiter queues as a third entry (an attempt that finds every permit held
/// leaves none), and is woken by the release of *either* holder: here the later one, which the
/// waiter would miss if it watched only the entry `N` places ahead of it (the first holder).
/// Every entry is gone at the end. (Exactly N holders, and a waiter served by a release:
/// `conformance::primitives::semaphore_admits_n`.)
async fn the_release_of_either_holder_wakes_the_waiter(url: &str) {
    let raw = raw(url).await;
    let name = "sem-n";
    let p = prefix("semaphore", name);
    let sems: Vec<_> = futures_util::future::join_all((0..3).map(|_| locker(url)))
        .await
        .into_iter()
        .map(|l| l.semaphore(name, 2).unwrap())
        .collect();
    // Longer than the hang guard: no permit expires while the test runs.
    let opts = LockOptions::new(Duration::from_secs(60));
    let mut held = vec![
        acquired(sems[0].try_acquire(&opts).await.unwrap()),
        acquired(sems[1].try_acquire(&opts).await.unwrap()),
    ];
    // A busy attempt leaves nothing behind.
    assert!(is_busy(&sems[2].try_acquire(&opts).await.unwrap()));
    entry_count_is(&raw, &p, 2).await;

    let sem = sems[2].clone();
    let waiter = tokio::spawn(async move { sem.acquire(&waiting()).await });
    entry_count_is(&raw, &p, 3).await;

    // Release the later holder (the higher create revision).
    let order = entries(&raw, &p).await;
    let later = held
        .iter()
        .position(|g| {
            let token = g.token().expose().as_bytes();
            order[1].0.windows(token.len()).any(|w| w == token)
        })
        .expect("the second entry is a holder");
    held.remove(later).release().await.unwrap();
    let third = tokio::time::timeout(GENEROUS, waiter)
        .await
        .expect("the waiter is woken")
        .unwrap()
        .unwrap();
    entry_count_is(&raw, &p, 2).await;
    third.release().await.unwrap();
    held.pop().unwrap().release().await.unwrap();
    entry_count_is(&raw, &p, 0).await;
}

#[tokio::test]
async fn the_release_of_either_holder_wakes_the_waiter_on_one_member() {
    let Some(etcd) = etcd_for_test() else { return };
    the_release_of_either_holder_wakes_the_waiter(&url(&etcd)).await;
}

#[tokio::test]
async fn the_release_of_either_holder_wakes_the_waiter_on_a_cluster() {
    let Some(cluster) = etcd_cluster_for_test(3) else {
        return;
    };
    the_release_of_either_holder_wakes_the_waiter(&cluster_url(&cluster)).await;
}

/// Semaphore, no herd: with 2 permits held and four waiters, a release wakes only the waiter
/// whose turn came. Counted by etcd itself (its `Txn` calls): handing two permits on, one after
/// the other, costs the release, the woken waiter's read and its move onto a lease of its own,
/// twice (6); waiters that re-read on every release ahead of them would add five reads (each
/// waiter behind re-reading on each release ahead of it). A little slack for a read repeated
/// after a broken watch.
#[tokio::test]
async fn a_released_permit_wakes_only_the_waiter_whose_turn_came() {
    let Some(etcd) = etcd_for_test() else { return };
    let url = url(&etcd);
    let raw = raw(&url).await;
    let name = "sem-herd";
    let p = prefix("semaphore", name);
    let locker = locker(&url).await;
    let sem = locker.semaphore(name, 2).unwrap();
    let opts = LockOptions::new(Duration::from_secs(60));
    let first = acquired(sem.try_acquire(&opts).await.unwrap());
    let second = acquired(sem.try_acquire(&opts).await.unwrap());
    let (tx, mut woken) = tokio::sync::mpsc::unbounded_channel();
    for i in 0..4 {
        let (sem, tx, opts) = (sem.clone(), tx.clone(), opts.clone().wait(GENEROUS * 2));
        tokio::spawn(async move {
            let _ = tx.send((i, sem.acquire(&opts).await));
        });
        // One at a time, so that their order is known.
        entry_count_is(&raw, &p, 3 + i).await;
    }
    let before = grpc_calls(&etcd, "Txn").await.ended;
    second.release().await.unwrap();
    let (i, w0) = tokio::time::timeout(GENEROUS, woken.recv())
        .await
        .expect("a waiter is woken")
        .unwrap();
    assert_eq!(i, 0, "the first waiter is served first");
    let w0 = w0.unwrap();
    w0.release().await.unwrap();
    let (i, w1) = tokio::time::timeout(GENEROUS, woken.recv())
        .await
        .expect("a waiter is woken")
        .unwrap();
    assert_eq!(i, 1, "then the second");
    let txns = grpc_calls(&etcd, "Txn").await.ended - before;
    eprintln!("Txn calls for two handovers among four waiters: {txns}");
    assert!(
        txns <= 8,
        "{txns} transactions: waiters read when it was not their turn"
    );
    w1.unwrap().release().await.unwrap();
    first.release().await.unwrap();
    for _ in 0..2 {
        let (_, w) = woken.recv().await.unwrap();
        w.unwrap().release().await.unwrap();
    }
    entry_count_is(&raw, &p, 0).await;
}

/// Semaphore, its entries: an attempt refused for another number of permits (`Conflict`,
/// waiting or not) gives its entry back; an extend from another process (a `Locker` that did
/// not acquire) reaches the permit's etcd lease, and its release removes the entry. (The
/// conflict itself, once no permit is held another number taken, token checks, fair mode and
/// `replica_ack` refused: `conformance::primitives`.)
#[tokio::test]
async fn semaphore_entries_are_given_back_and_reached_from_elsewhere() {
    let Some(etcd) = etcd_for_test() else { return };
    let url = url(&etcd);
    let raw = raw(&url).await;
    let (a, b) = (locker(&url).await, locker(&url).await);
    let name = "sem-check";
    let p = prefix("semaphore", name);
    let opts = LockOptions::new(Duration::from_secs(10));
    let held = acquired(
        a.semaphore(name, 2)
            .unwrap()
            .try_acquire(&opts)
            .await
            .unwrap(),
    );

    let three = b.semaphore(name, 3).unwrap();
    assert!(matches!(
        three.try_acquire(&opts).await,
        Err(Error::Conflict { .. })
    ));
    assert!(matches!(
        three.acquire(&waiting()).await,
        Err(Error::Conflict { .. })
    ));
    entry_count_is(&raw, &p, 1).await;

    let two = b.semaphore(name, 2).unwrap();
    // Extended and released from elsewhere, by token.
    two.extend(held.token(), Duration::from_secs(30))
        .await
        .unwrap();
    let lease = entries(&raw, &p).await[0].2;
    let ttl = raw
        .lease_client()
        .time_to_live(lease, None)
        .await
        .unwrap()
        .ttl();
    assert!(ttl > 20, "extended to 30 s: {ttl}");
    two.release(held.token()).await.unwrap();
    entry_count_is(&raw, &p, 0).await;
}

/// Semaphore: an auto-extended permit whose lease is revoked from outside (its holder's
/// session gone, as after a crash) is reported lost, and the waiter takes the permit.
#[tokio::test]
async fn a_revoked_permit_is_lost_and_taken_by_the_waiter() {
    let Some(etcd) = etcd_for_test() else { return };
    let url = url(&etcd);
    let raw = raw(&url).await;
    let name = "sem-lost";
    let p = prefix("semaphore", name);
    let opts = LockOptions::new(Duration::from_secs(10)).auto_extend(true);
    // Separate clients: each has its own session lease.
    let victim = locker(&url).await.semaphore(name, 1).unwrap();
    let next = locker(&url).await.semaphore(name, 1).unwrap();
    let held = acquired(victim.try_acquire(&opts).await.unwrap());
    let wait_opts = opts.clone().wait(GENEROUS);
    let waiter = tokio::spawn(async move { next.acquire(&wait_opts).await });
    entry_count_is(&raw, &p, 2).await;
    revoke_lease_of(&raw, &p, &held).await;
    tokio::time::timeout(GENEROUS, held.lost())
        .await
        .expect("the holder is told");
    let taken = tokio::time::timeout(GENEROUS, waiter)
        .await
        .expect("the waiter is woken")
        .unwrap()
        .unwrap();
    assert!(taken.is_held());
    taken.release().await.unwrap();
}

/// Read-write lock, its queue of entries: a waiting writer is an entry behind the reader's; a
/// reader arriving after it queues behind it as an entry too, and reads only after the writer
/// (still waiting while the writer holds); every entry is gone at the end. (Readers share, the
/// writer alone, new readers kept out while a writer waits, writers' numbers increasing, token
/// checks, fair mode refused: `conformance::primitives`.)
async fn a_reader_after_a_waiting_writer_queues_behind_it(url: &str) {
    let raw = raw(url).await;
    let name = "rw";
    let p = prefix("rwlock", name);
    let (a, b, c) = (locker(url).await, locker(url).await, locker(url).await);
    let (la, lb, lc) = (
        a.rwlock(name).unwrap(),
        b.rwlock(name).unwrap(),
        c.rwlock(name).unwrap(),
    );
    let opts = LockOptions::new(Duration::from_secs(10));
    let r1 = acquired(la.try_read(&opts).await.unwrap());
    let r2 = acquired(lb.try_read(&opts).await.unwrap());
    entry_count_is(&raw, &p, 2).await;

    let writer = {
        let lc = lc.clone();
        tokio::spawn(async move { lc.write(&waiting()).await })
    };
    entry_count_is(&raw, &p, 3).await;
    let late_reader = {
        let la = la.clone();
        tokio::spawn(async move { la.read(&waiting()).await })
    };
    entry_count_is(&raw, &p, 4).await;

    r1.release().await.unwrap();
    r2.release().await.unwrap();
    let w1 = tokio::time::timeout(GENEROUS, writer)
        .await
        .expect("the writer gets the lock")
        .unwrap()
        .unwrap();
    assert!(
        !late_reader.is_finished(),
        "the late reader passed the writer"
    );
    entry_count_is(&raw, &p, 2).await;
    w1.release().await.unwrap();
    let r3 = tokio::time::timeout(GENEROUS, late_reader)
        .await
        .expect("the late reader reads after the writer")
        .unwrap()
        .unwrap();
    entry_count_is(&raw, &p, 1).await;
    r3.release().await.unwrap();
    entry_count_is(&raw, &p, 0).await;
}

#[tokio::test]
async fn a_reader_after_a_waiting_writer_queues_behind_it_on_one_member() {
    let Some(etcd) = etcd_for_test() else { return };
    a_reader_after_a_waiting_writer_queues_behind_it(&url(&etcd)).await;
}

#[tokio::test]
async fn a_reader_after_a_waiting_writer_queues_behind_it_on_a_cluster() {
    let Some(cluster) = etcd_cluster_for_test(3) else {
        return;
    };
    a_reader_after_a_waiting_writer_queues_behind_it(&cluster_url(&cluster)).await;
}

/// Election, its entries and leases: `leader()` shows the leader's etcd lease TTL; a candidate
/// queues as a second entry; a leader whose lease is revoked (its session gone) is told, and
/// the candidate leads in a higher term, which `leader()` names; every entry is gone after the
/// last resignation. (One leader, rising terms on resignation, `leader()`, `watch` hearing each
/// change through the etcd watch, a plain lock of the name, fair mode refused:
/// `conformance::primitives`.)
async fn a_revoked_leader_is_told_and_replaced(url: &str) {
    let raw = raw(url).await;
    let name = "elect";
    let p = prefix("election", name);
    let (a, b) = (locker(url).await, locker(url).await);
    let (ea, eb) = (a.election(name).unwrap(), b.election(name).unwrap());
    // Longer than GENEROUS: no lease runs out during the test.
    let opts = LockOptions::new(Duration::from_secs(30));
    let lead_a = ea.campaign("a", &opts).await.unwrap();
    let term_a = lead_a.fencing_token().unwrap();
    let seen = eb.leader().await.unwrap().expect("a leader");
    assert_eq!((seen.id.as_str(), seen.term), ("a", term_a));
    assert!(seen.ttl.is_some_and(|t| t > Duration::ZERO));
    entry_count_is(&raw, &p, 1).await;

    let candidate_b = {
        let (eb, opts) = (eb.clone(), opts.clone());
        tokio::spawn(async move { eb.campaign("b", &opts).await })
    };
    entry_count_is(&raw, &p, 2).await;
    revoke_lease_of(&raw, &p, &lead_a).await;
    tokio::time::timeout(GENEROUS, lead_a.lost())
        .await
        .expect("the deposed leader is told");
    let lead_b = tokio::time::timeout(GENEROUS, candidate_b)
        .await
        .expect("b takes over")
        .unwrap()
        .unwrap();
    assert!(lead_b.fencing_token().unwrap() > term_a);
    let seen = ea.leader().await.unwrap().unwrap();
    assert_eq!(
        (seen.id.as_str(), Some(seen.term)),
        ("b", lead_b.fencing_token())
    );
    lead_b.release().await.unwrap();
    entry_count_is(&raw, &p, 0).await;
}

#[tokio::test]
async fn a_revoked_leader_is_told_and_replaced_on_one_member() {
    let Some(etcd) = etcd_for_test() else { return };
    a_revoked_leader_is_told_and_replaced(&url(&etcd)).await;
}

#[tokio::test]
async fn a_revoked_leader_is_told_and_replaced_on_a_cluster() {
    let Some(cluster) = etcd_cluster_for_test(3) else {
        return;
    };
    a_revoked_leader_is_told_and_replaced(&cluster_url(&cluster)).await;
}
