//! The memory backend's own claims (module docs): FIFO waiting without polling, exact validity,
//! separate namespaces. The common contract is the conformance suite's
//! (`tests/conformance/memory.rs`).

use std::time::{Duration, Instant};

use futures_util::FutureExt;

use super::*;
use crate::core::driver::testing::{long, take};

/// Only a hang guard: every wait below ends on an observed event.
const HANG_GUARD: Duration = Duration::from_secs(60);

fn client(name: &str) -> MemoryClient {
    MemoryClient::connect(&format!("memory://unit-{name}")).unwrap()
}

/// Starts a waiter on `key` and returns once the table shows its attempt refused.
async fn waiter(
    c: &MemoryClient,
    ns: &str,
    key: &str,
    tx: tokio::sync::mpsc::UnboundedSender<usize>,
    i: usize,
) -> tokio::task::JoinHandle<()> {
    let before = hooks::refusals(&format!("unit-{ns}"), key);
    let (c2, k) = (c.clone(), key.to_string());
    let task = tokio::spawn(async move {
        let g = c2.acquire(&k, &long().wait(HANG_GUARD)).await.unwrap();
        tx.send(i).unwrap();
        g.release().await.unwrap();
    });
    let refused = tokio::time::timeout(HANG_GUARD, async {
        while hooks::refusals(&format!("unit-{ns}"), key) == before {
            tokio::task::yield_now().await;
        }
    });
    refused.await.expect("the waiter was never refused");
    task
}

#[tokio::test]
async fn waiters_are_served_in_arrival_order_and_nobody_barges_in() {
    let c = client("fifo");
    let g = take(&c, "k", &long()).await;
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let mut tasks = Vec::new();
    for i in 0..4 {
        tasks.push(waiter(&c, "fifo", "k", tx.clone(), i).await);
    }
    g.release().await.unwrap();
    // Freed, but the first waiter has not run yet (one thread): a newcomer finds it busy.
    let barging = c.try_acquire("k", &long()).now_or_never().unwrap().unwrap();
    assert!(
        !barging.is_acquired(),
        "a try_acquire took the lock from the queue"
    );
    for want in 0..4 {
        let got = tokio::time::timeout(HANG_GUARD, rx.recv()).await.unwrap();
        assert_eq!(got, Some(want));
    }
    for t in tasks {
        t.await.unwrap();
    }
}

#[tokio::test]
async fn a_waiter_that_leaves_hands_its_turn_to_the_next() {
    let c = client("leave");
    let g = take(&c, "k", &long()).await;
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let first = waiter(&c, "leave", "k", tx.clone(), 0).await;
    let second = waiter(&c, "leave", "k", tx, 1).await;
    first.abort();
    assert!(first.await.unwrap_err().is_cancelled());
    g.release().await.unwrap();
    assert_eq!(
        tokio::time::timeout(HANG_GUARD, rx.recv()).await.unwrap(),
        Some(1)
    );
    second.await.unwrap();
}

/// One clock: whenever another client gets the lock, the first lease's validity is over (no
/// overlap), and a waiter is woken by the expiry itself (no release, no polling: the backoff is
/// ten minutes).
#[tokio::test]
async fn a_lock_is_free_exactly_when_its_lease_ends() {
    let (a, b) = (client("expiry"), client("expiry"));
    let ttl = Duration::from_millis(50);
    let g = take(&a, "k", &LockOptions::new(ttl)).await;
    let slow = crate::Backoff::constant(Duration::from_secs(600));
    let h = tokio::time::timeout(
        HANG_GUARD,
        b.acquire("k", &LockOptions::new(ttl).wait(HANG_GUARD).backoff(slow)),
    )
    .await
    .unwrap()
    .unwrap();
    assert!(g.valid_until() <= Instant::now(), "validities overlap");
    assert!(!g.is_held());
    assert!(h.is_held() || h.valid_until() <= Instant::now());
    assert!(matches!(g.release().await, Err(Error::NotHeld { .. })));
    // Attempts racing an expiry: a grant never comes while the holder's lease is valid.
    for _ in 0..20 {
        let g = a
            .acquire("k", &LockOptions::new(ttl).wait(HANG_GUARD))
            .await
            .unwrap();
        let freed = tokio::time::timeout(HANG_GUARD, async {
            while let TryAcquire::Busy { .. } =
                b.try_acquire("k", &LockOptions::new(ttl)).await.unwrap()
            {
                tokio::task::yield_now().await;
            }
        });
        freed.await.expect("the lock never expired");
        assert!(g.valid_until() <= Instant::now(), "validities overlap");
    }
}

/// A waiter sleeping until the holder's lease ends is woken when an extend shortens it (its
/// wait is a minute; the lease was ten).
#[tokio::test]
async fn a_shortening_extend_wakes_the_waiters() {
    let c = client("shorten");
    let g = take(&c, "k", &long()).await;
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let w = waiter(&c, "shorten", "k", tx, 0).await;
    g.extend(Duration::from_millis(50)).await.unwrap();
    assert_eq!(
        tokio::time::timeout(HANG_GUARD, rx.recv()).await.unwrap(),
        Some(0)
    );
    assert!(g.valid_until() <= Instant::now(), "validities overlap");
    w.await.unwrap();
}

#[tokio::test]
async fn namespaces_are_separate_and_urls_are_checked() {
    let (a, a2, b) = (client("ns-a"), client("ns-a"), client("ns-b"));
    let g = take(&a, "k", &long()).await;
    assert!(!a2.try_acquire("k", &long()).await.unwrap().is_acquired());
    let h = take(&b, "k", &long()).await;
    assert_eq!(g.fencing_token(), Some(1));
    assert_eq!(
        h.fencing_token(),
        Some(1),
        "each namespace has its own counters"
    );
    for url in ["memory://a/b", "memory://a?x", "memory://#x", "file:///tmp"] {
        assert!(
            matches!(
                MemoryClient::connect(url),
                Err(Error::InvalidArgument { .. })
            ),
            "{url}"
        );
    }
    assert!(MemoryClient::connect("memory://").is_ok());
    assert!(MemoryClient::connect("MEMORY://x").is_ok());
}
