//! Fencing tokens: issued atomically with the acquisition, strictly increasing, and enforced by
//! the fenced write at the resource.

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use common::*;
use leasehold::redis::FencedStore;
use leasehold::{Fence, FencedRead, FencedWrite, LockOptions, LockToken, Locker};
use leasehold_harness::{Server, ServerOptions};

const LONG: Duration = Duration::from_secs(60);

// 1000 acquisitions over 8 tasks: each holder appends its number while it holds the lock, so
// the list is in acquisition order; the numbers must strictly increase (hence no duplicates).
leasehold_harness::server_test!(async fn fencing_numbers_strictly_increase_under_concurrency(bin) {
    let (_server, client) = start(&bin).await;
    let seen = Arc::new(tokio::sync::Mutex::new(Vec::with_capacity(1000)));
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let (client, seen) = (client.clone(), seen.clone());
        tasks.push(tokio::spawn(async move {
            let opts = LockOptions::new(LONG).fencing(true).wait(Duration::from_secs(300));
            for _ in 0..125 {
                let g = client.acquire("fenced", &opts).await.expect("acquire");
                seen.lock().await.push(g.fencing_token().expect("fencing on"));
                g.release().await.expect("release");
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let seen = seen.lock().await;
    assert_eq!(seen.len(), 1000);
    for w in seen.windows(2) {
        assert!(w[0] < w[1], "fencing numbers not strictly increasing: {} then {}", w[0], w[1]);
    }
    assert_eq!((seen[0], seen[999]), (1, 1000));
});

// The counter lives in the lock key's hash slot: `{key}:fence`, or the key's own tag.
leasehold_harness::server_test!(async fn fence_counter_key_follows_the_hash_tag(bin) {
    let (server, client) = start(&bin).await;
    for (key, counter) in [("plain", "{plain}:fence"), ("a{t}b", "a{t}b:fence")] {
        let g = client.try_acquire(key, &LockOptions::new(LONG).fencing(true)).await.unwrap().acquired().unwrap();
        assert_eq!(g.fencing_token(), Some(1));
        assert_eq!(get(&server, counter).as_deref(), Some("1"), "counter of {key}");
        g.release().await.unwrap();
    }
});

// The seed's fencing scenario with real leases: A's lease expires while it stalls; B gets a
// greater number and writes; A wakes up and its write is refused.
leasehold_harness::server_test!(async fn stale_holder_is_rejected_by_the_resource(bin) {
    let (server, client) = start(&bin).await;
    let store = FencedStore::new(client.as_redis().unwrap().connection());
    let a = client
        .try_acquire("res-lock", &LockOptions::new(Duration::from_millis(50)).fencing(true))
        .await
        .unwrap()
        .acquired()
        .unwrap();
    until_absent(&server, "res-lock", GENEROUS).await; // A stalls past its TTL
    let b = client.try_acquire("res-lock", &LockOptions::new(LONG).fencing(true)).await.unwrap().acquired().unwrap();
    assert!(b.fencing_token() > a.fencing_token());
    assert_eq!(store.write("res", &b.fence().unwrap(), "B").await.unwrap(), FencedWrite::Accepted);
    assert_eq!(
        store.write("res", &a.fence().unwrap(), "A").await.unwrap(),
        FencedWrite::Rejected { highest: b.fencing_token().unwrap() }
    );
    let v = store.read("res").await.unwrap().unwrap();
    assert_eq!((v.value.as_slice(), v.fence), (&b"B"[..], 2));
    b.release().await.unwrap();
    let _ = a.detach();
});

// Equal numbers (a counter that lost its last INCR in a failover) are told apart by the token:
// the first writer owns the number; the other is refused; the owner may write again.
leasehold_harness::server_test!(async fn equal_number_from_another_token_is_rejected(bin) {
    let (server, client) = start(&bin).await;
    let store = FencedStore::new(client.as_redis().unwrap().connection());
    let t1 = LockToken::new("holder-one").unwrap();
    let t2 = LockToken::new("holder-two").unwrap();
    assert!(store.write("r", &Fence::new(7, t1.clone()), "one").await.unwrap().is_accepted());
    assert_eq!(store.write("r", &Fence::new(7, t2.clone()), "two").await.unwrap(), FencedWrite::Rejected { highest: 7 });
    assert!(store.write("r", &Fence::new(7, t1.clone()), "one again").await.unwrap().is_accepted());
    assert_eq!(store.write("r", &Fence::new(6, t1), "older").await.unwrap(), FencedWrite::Rejected { highest: 7 });
    assert!(store.write("r", &Fence::new(8, t2), "newer").await.unwrap().is_accepted());
    assert_eq!(store.read("r").await.unwrap().unwrap().value, b"newer");
    // The resource keeps a digest of the writer's token, never the capability itself.
    let raw = server.command(&["HGETALL", "r"]).unwrap();
    assert!(!format!("{raw:?}").contains("holder-two"));
    // A resource key of the wrong type is a server error, not a silent overwrite.
    server.command(&["SET", "str", "x"]).unwrap();
    let err = store.write("str", &Fence::new(1, LockToken::random()), "v").await.unwrap_err();
    assert!(matches!(err, leasehold::Error::Server { .. }), "{err:?}");
});

// The lost update a write check alone allows, and the fenced read that prevents it: A (1) reads,
// B (2) reads, A writes. Without the claim on read, A's write is accepted and B's increment then
// overwrites it; with read_fenced, A's write is refused once B has read.
leasehold_harness::server_test!(async fn fenced_read_claims_the_number(bin) {
    let (_server, client) = start(&bin).await;
    let store = FencedStore::new(client.as_redis().unwrap().connection());
    let a = Fence::new(1, LockToken::new("holder-a").unwrap());
    let b = Fence::new(2, LockToken::new("holder-b").unwrap());

    // Plain reads: the lost update happens.
    assert!(store.write("plain", &Fence::new(0, LockToken::new("init").unwrap()), 10).await.unwrap().is_accepted());
    let _ = store.read("plain").await.unwrap();
    let _ = store.read("plain").await.unwrap();
    assert!(store.write("plain", &a, 11).await.unwrap().is_accepted(), "A's write passes the write check");
    assert!(store.write("plain", &b, 11).await.unwrap().is_accepted());
    assert_eq!(store.read("plain").await.unwrap().unwrap().value, b"11", "two increments, one survives");

    // Fenced reads: A's write is refused after B has read.
    assert!(store.write("fenced", &Fence::new(0, LockToken::new("init").unwrap()), 10).await.unwrap().is_accepted());
    assert_eq!(store.read_fenced("fenced", &a).await.unwrap(), FencedRead::Accepted(Some(b"10".to_vec())));
    assert_eq!(store.read_fenced("fenced", &b).await.unwrap(), FencedRead::Accepted(Some(b"10".to_vec())));
    assert_eq!(store.write("fenced", &a, 11).await.unwrap(), FencedWrite::Rejected { highest: 2 });
    assert!(store.write("fenced", &b, 11).await.unwrap().is_accepted());
    // A stale reader is refused too, and an equal number from another token.
    assert_eq!(store.read_fenced("fenced", &a).await.unwrap(), FencedRead::Rejected { highest: 2 });
    let other = Fence::new(2, LockToken::new("holder-c").unwrap());
    assert_eq!(store.read_fenced("fenced", &other).await.unwrap(), FencedRead::Rejected { highest: 2 });
    // A register never written reads as None.
    assert_eq!(store.read_fenced("empty", &a).await.unwrap(), FencedRead::Accepted(None));
});

// The counter only moves up, and the next acquisition draws the raised number + 1.
leasehold_harness::server_test!(async fn raising_the_counter_never_lowers_it(bin) {
    let (server, client) = start(&bin).await;
    let opts = LockOptions::new(LONG).fencing(true);
    let g = client.try_acquire("raised", &opts).await.unwrap().acquired().unwrap();
    assert_eq!(g.fencing_token(), Some(1));
    g.release().await.unwrap();
    assert_eq!(client.raise_fencing_counter("raised", 100).await.unwrap(), 100);
    let g = client.try_acquire("raised", &opts).await.unwrap().acquired().unwrap();
    assert_eq!(g.fencing_token(), Some(101));
    g.release().await.unwrap();
    assert_eq!(client.raise_fencing_counter("raised", 50).await.unwrap(), 101, "never lowered");
    assert_eq!(get(&server, "{raised}:fence").as_deref(), Some("101"));
    // A counter that does not exist yet is created at the value.
    assert_eq!(client.raise_fencing_counter("fresh", 7).await.unwrap(), 7);
    assert!(client.raise_fencing_counter("", 1).await.is_err(), "empty key refused");
});

// A restart without persistence sends the counter back to 0: the resource refuses the new
// holder (it has seen a higher number), and stays refusing until the counter passes it. Raising
// the counter to the number the resource reported lets the next holder in at once.
leasehold_harness::server_test!(async fn a_counter_lost_in_a_restart_is_raised_past_the_resource(bin) {
    let (mut server, client) = start(&bin).await;
    let register = Server::start(&bin, &ServerOptions::new()).unwrap();
    let store = FencedStore::new(
        redis::Client::open(register.url()).unwrap().get_connection_manager().await.unwrap(),
    );
    let opts = LockOptions::new(LONG).fencing(true);
    for _ in 0..5 {
        let g = client.try_acquire("job", &opts).await.unwrap().acquired().unwrap();
        assert!(store.write("res", &g.fence().unwrap(), "v").await.unwrap().is_accepted());
        g.release().await.unwrap();
    }
    server.restart().unwrap();
    let client = Locker::connect(&server.url()).await.unwrap();
    let g = client.try_acquire("job", &opts).await.unwrap().acquired().unwrap();
    assert_eq!(g.fencing_token(), Some(1), "the counter was lost");
    let FencedRead::Rejected { highest } = store.read_fenced("res", &g.fence().unwrap()).await.unwrap() else {
        panic!("a number below the resource's highest must be refused");
    };
    assert_eq!(highest, 5);
    assert_eq!(client.raise_fencing_counter("job", highest).await.unwrap(), 5);
    g.release().await.unwrap();
    let g = client.try_acquire("job", &opts).await.unwrap().acquired().unwrap();
    assert_eq!(g.fencing_token(), Some(6));
    assert!(matches!(store.read_fenced("res", &g.fence().unwrap()).await.unwrap(), FencedRead::Accepted(_)));
    g.release().await.unwrap();
});
