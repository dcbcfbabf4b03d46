//! Leader election on Redis: a stalled leader (its link slowed, not its key taken) replaced, and
//! told. One leader at a time, rising terms, `leader()`, resigning, bad input, the options an
//! election lacks, a plain lock of the name (`Conflict`, also after a term: finding M5) and
//! `watch` hearing each change by the release channel are checked on every backend by
//! `conformance::primitives`.

use crate::common;

use std::time::{Duration, Instant};

use leasehold::{LockOptions, Locker, LossReason};
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
