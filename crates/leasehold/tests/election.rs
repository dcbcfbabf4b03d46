//! Leader election on Redis: a stalled leader replaced (and told), observers following every
//! change by the release channel, what only Redis refuses. One leader at a time, rising terms,
//! `leader()`, resigning and bad input are checked on every backend by
//! `conformance::primitives`.

use crate::common;

use std::time::{Duration, Instant};

use leasehold::{Error, LockOptions, Locker, LossReason};
use leasehold_harness::{Server, ServerOptions, SlowLink};

const HANG_GUARD: Duration = Duration::from_secs(60);

fn opts(ttl: Duration) -> LockOptions {
    LockOptions::new(ttl)
}

leasehold_harness::server_test!(async fn a_stalled_leader_is_replaced_and_told(bin) {
    let server = Server::start(&bin, &ServerOptions::new()).unwrap();
    let link = SlowLink::start(server.addr()).unwrap();
    let stalled = Locker::connect(&link.url()).await.unwrap().election("svc").unwrap();
    let follower = Locker::connect(&server.url()).await.unwrap().election("svc").unwrap();
    let ttl = Duration::from_secs(1);
    let leader = stalled.campaign("stalled", &opts(ttl)).await.unwrap();
    let term = leader.fencing_token().unwrap();
    let waiting = tokio::spawn(async move { follower.campaign("follower", &opts(ttl)).await });
    // The leader's renewals now take 5 s each way: its lease runs out on the server.
    link.set_reply_delay(Duration::from_secs(5));
    let stalled_at = Instant::now();
    let next = tokio::time::timeout(HANG_GUARD, waiting).await.unwrap().unwrap().unwrap();
    eprintln!("takeover {:?} after the leader stalled (TTL {ttl:?})", stalled_at.elapsed());
    assert!(next.fencing_token().unwrap() > term, "terms strictly increase");
    // The stalled leader is told its term is over (its validity passed without a renewal).
    tokio::time::timeout(HANG_GUARD, leader.lost()).await.expect("the deposed leader is told");
    assert_eq!(leader.loss_reason(), Some(LossReason::Expired));
    assert_eq!(common::get(&server, "svc").as_deref(), Some(next.token().expose()));
    link.set_reply_delay(Duration::ZERO);
    next.release().await.unwrap();
});

/// The next leader the watch reports (skipping "nobody").
async fn next_leader(watch: &mut leasehold::LeaderWatch) -> leasehold::Leader {
    loop {
        if let Some(l) = tokio::time::timeout(HANG_GUARD, watch.changed())
            .await
            .unwrap()
            .unwrap()
        {
            return l;
        }
    }
}

leasehold_harness::server_test!(async fn observers_follow_every_change(bin) {
    let server = Server::start(&bin, &ServerOptions::new()).unwrap();
    let client = Locker::connect(&server.url()).await.unwrap();
    let election = client.election("svc").unwrap();
    // A long poll interval: the changes below are seen by their announcements.
    let mut watch = election.watch(Duration::from_secs(30));
    let first = election.campaign("first", &opts(Duration::from_secs(10))).await.unwrap();
    let seen = next_leader(&mut watch).await;
    assert_eq!((seen.id.as_str(), Some(seen.term)), ("first", first.fencing_token()));
    first.release().await.unwrap();
    let second = election.campaign("second", &opts(Duration::from_secs(10))).await.unwrap();
    let seen = next_leader(&mut watch).await;
    assert_eq!((seen.id.as_str(), Some(seen.term)), ("second", second.fencing_token()));
    second.release().await.unwrap();
});

leasehold_harness::server_test!(async fn bad_input_and_conflicts(bin) {
    let server = Server::start(&bin, &ServerOptions::new()).unwrap();
    let client = Locker::connect(&server.url()).await.unwrap();
    // Bad names, ids and TTLs: conformance::primitives::election_bad_input_refused.
    let election = client.election("svc").unwrap();
    let o = opts(Duration::from_secs(10));
    assert!(matches!(election.campaign("a", &o.clone().fair(true)).await, Err(Error::Unsupported { .. })));
    // The election's lock taken as a plain lock: the leader cannot be named.
    let plain = client.try_acquire("svc", &o).await.unwrap().acquired().unwrap();
    assert!(matches!(election.leader().await, Err(Error::Conflict { .. })));
    let short = o.clone().wait(Duration::from_millis(200));
    assert!(matches!(election.campaign("a", &short).await, Err(Error::NotAcquired { .. })));
    plain.release().await.unwrap();
    // After a term, a plain lock without fencing leaves the counter at that term: leader()
    // named the resigned leader (finding M5 of the 2026-12-02 review).
    election.campaign("a", &o).await.unwrap().release().await.unwrap();
    assert!(election.leader().await.unwrap().is_none());
    let plain = client.try_acquire("svc", &o).await.unwrap().acquired().unwrap();
    match election.leader().await {
        Err(Error::Conflict { .. }) => {}
        other => panic!("a plain lock on the name reported as a leader: {other:?}"),
    }
    plain.release().await.unwrap();
});
