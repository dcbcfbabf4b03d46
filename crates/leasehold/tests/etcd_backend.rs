#![cfg(feature = "etcd")]
//! The etcd backend ([`leasehold::etcd::EtcdClient`]) against real etcd members started by the
//! harness: one member, or a cluster of three. Each test checks a claim of the module docs of
//! `leasehold::etcd`; nothing here sleeps and hopes: every wait observes state (an entry's
//! presence or absence, the holder `inspect` reports, a loss signal) and is bounded only to keep
//! a broken build from hanging.

use std::future::Future;
use std::time::{Duration, Instant};

use leasehold::etcd::EtcdClient;
use leasehold::{
    ClientOptions, Error, LockGuard, LockOptions, Locker, LossReason, Operation, TryAcquire,
    clock_drift,
};
use leasehold_harness::{Etcd, EtcdCluster, SlowLink, etcd_cluster_for_test, etcd_for_test};

mod cleanup;

/// Bound of every wait that should end much sooner.
pub(crate) const GENEROUS: Duration = Duration::from_secs(20);
const POLL: Duration = Duration::from_millis(20);

pub(crate) fn url(etcd: &Etcd) -> String {
    format!("etcd://{}", etcd.addr())
}

pub(crate) fn cluster_url(cluster: &EtcdCluster) -> String {
    let hosts: Vec<String> = cluster
        .members()
        .iter()
        .map(|m| m.addr().to_string())
        .collect();
    format!("etcd://{}", hosts.join(","))
}

async fn client(etcd: &Etcd) -> Locker {
    EtcdClient::connect(&url(etcd))
        .await
        .expect("connect")
        .into()
}

/// A plain etcd client, for looking at (and tampering with) the keys from outside.
async fn raw(endpoints: &[String]) -> etcd_client::Client {
    etcd_client::Client::connect(endpoints, None)
        .await
        .expect("raw etcd client")
}

/// The tokens of `key`'s queue entries (holder first) and their create revisions.
async fn entries(raw: &etcd_client::Client, key: &str) -> Vec<(String, i64)> {
    let mut prefix = key.as_bytes().to_vec();
    prefix.push(0);
    let options = etcd_client::GetOptions::new().with_prefix().with_sort(
        etcd_client::SortTarget::Create,
        etcd_client::SortOrder::Ascend,
    );
    let resp = raw
        .kv_client()
        .get(prefix.clone(), Some(options))
        .await
        .expect("get");
    resp.kvs()
        .iter()
        .map(|kv| {
            let token = String::from_utf8(kv.key()[prefix.len()..].to_vec()).unwrap();
            assert_eq!(kv.value(), token.as_bytes(), "an entry stores its token");
            (token, kv.create_revision())
        })
        .collect()
}

/// Guarantee 1's premise: the validity a holder believes in (read *before* `inspect`) never
/// ends after etcd's expiry of the lease (`reported`: etcd's remaining TTL, truncated to whole
/// seconds, read after it; the expiry only moves later in between).
fn assert_valid_within_server_lease(believed: Instant, reported: Duration) {
    let server_expiry_bound = Instant::now() + reported + Duration::from_secs(1);
    assert!(
        believed <= server_expiry_bound,
        "validity {:?} beyond etcd's lease ({reported:?} left)",
        believed.saturating_duration_since(Instant::now())
    );
}

/// Polls `check` until it is true; panics after `bound`.
pub(crate) async fn until<F, Fut>(what: &str, bound: Duration, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = Instant::now() + bound;
    while !check().await {
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        tokio::time::sleep(POLL).await;
    }
}

async fn entry_count_is(raw: &etcd_client::Client, key: &str, n: usize) {
    until(&format!("{key} has {n} entries"), GENEROUS, || async {
        entries(raw, key).await.len() == n
    })
    .await;
}

/// `f`, retried while it fails with a connection error (a member just killed), for looking at
/// a cluster from the test's side.
async fn retrying<T, F, Fut>(mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = leasehold::Result<T>>,
{
    let deadline = Instant::now() + GENEROUS;
    loop {
        match f().await {
            Ok(v) => return v,
            Err(e @ Error::Connection { .. }) if Instant::now() < deadline => {
                eprintln!("retrying after: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => panic!("{e}"),
        }
    }
}

/// What etcd itself shows of a lock (the guarantees every backend makes, exclusion, token
/// checks, fencing and release from another client among them, are checked through `Locker` by
/// `conformance::etcd`): a busy attempt writes nothing; the holder's entry stores its token, and
/// its `create_revision` is the fencing number, which an extend (a put) keeps; the validity the
/// holder believes in never ends after etcd's expiry of the lease; an extend from another
/// client grants a new lease; after the release no entry is left, and `inspect` shows no holder,
/// no TTL and no number; a TTL below etcd's minimum is raised to it.
#[tokio::test]
async fn acquire_busy_release_fencing_and_token_checks() {
    let Some(etcd) = etcd_for_test() else { return };
    let raw = raw(&[etcd.endpoint()]).await;
    let a = client(&etcd).await;
    let b = client(&etcd).await;
    let opts = LockOptions::new(Duration::from_secs(10)).fencing(true);

    let g1 = a
        .try_acquire("k", &opts)
        .await
        .unwrap()
        .acquired()
        .expect("A acquires");
    let f1 = g1.fencing_token().expect("fencing on");
    let busy = b.try_acquire("k", &opts).await.unwrap();
    assert!(matches!(busy, TryAcquire::Busy { .. }), "B must be refused");
    // A busy attempt writes nothing: the only entry is A's, and its revision is the number.
    assert_eq!(
        entries(&raw, "k").await,
        [(g1.token().expose().to_string(), f1 as i64)]
    );

    let believed = g1.valid_until();
    let state = b.inspect("k").await.unwrap();
    assert_valid_within_server_lease(believed, state.ttl.unwrap());
    let ttl = state.ttl.expect("the entry has a lease");
    assert!(
        ttl <= Duration::from_secs(10) && ttl >= Duration::from_secs(5),
        "{ttl:?}"
    );

    // Extend from "another process" (no state, only the token): a new lease, same entry.
    b.extend("k", g1.token(), Duration::from_secs(30))
        .await
        .unwrap();
    let state = b.inspect("k").await.unwrap();
    assert!(state.ttl.unwrap() > Duration::from_secs(20), "{state:?}");
    assert_eq!(state.fencing_counter, Some(f1), "a put keeps the revision");
    assert_eq!(entries(&raw, "k").await.len(), 1);

    g1.release().await.unwrap();
    assert!(entries(&raw, "k").await.is_empty());
    let state = b.inspect("k").await.unwrap();
    assert_eq!(
        (state.holder, state.ttl, state.fencing_counter),
        (None, None, None)
    );

    // A TTL below etcd's minimum is raised to it.
    let g4 = a
        .try_acquire("k", &LockOptions::new(Duration::from_millis(300)))
        .await
        .unwrap()
        .acquired()
        .unwrap();
    let ttl = a.inspect("k").await.unwrap().ttl.unwrap();
    assert!(ttl <= Duration::from_secs(2), "{ttl:?}");
    g4.release().await.unwrap();
}

#[tokio::test]
async fn waiting_is_fifo_and_wakes_only_the_head() {
    let Some(etcd) = etcd_for_test() else { return };
    let raw = raw(&[etcd.endpoint()]).await;
    let holder = client(&etcd).await;
    let opts = LockOptions::new(Duration::from_secs(10)).fencing(true);
    let first = holder
        .try_acquire("q", &opts)
        .await
        .unwrap()
        .acquired()
        .unwrap();

    let (acquired_tx, mut acquired) = tokio::sync::mpsc::unbounded_channel();
    let mut release = Vec::new();
    let mut tasks = Vec::new();
    for i in 0..3 {
        let c = client(&etcd).await;
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        release.push(Some(tx));
        let acquired_tx = acquired_tx.clone();
        let opts = opts.clone().wait(GENEROUS);
        tasks.push(tokio::spawn(async move {
            let guard = c.acquire("q", &opts).await.expect("waiter acquires");
            acquired_tx
                .send((i, guard.fencing_token().unwrap()))
                .unwrap();
            let _ = rx.await;
            guard.release().await.expect("waiter releases");
        }));
        // Enqueued, in this order, before the next one starts.
        entry_count_is(&raw, "q", i + 2).await;
    }
    let queue = entries(&raw, "q").await;
    assert!(queue.windows(2).all(|w| w[0].1 < w[1].1));

    let mut last = first.fencing_token().unwrap();
    first.release().await.unwrap();
    for expected in 0..3 {
        let (who, fencing) = tokio::time::timeout(GENEROUS, acquired.recv())
            .await
            .expect("the next waiter acquires")
            .unwrap();
        assert_eq!(who, expected, "granted out of order");
        assert!(
            fencing > last,
            "fencing numbers increase: {fencing} > {last}"
        );
        assert_eq!(
            fencing as i64,
            queue[expected + 1].1,
            "the number is the entry's revision"
        );
        last = fencing;
        // Only the head was woken: the others are still queued, none acquired.
        assert!(acquired.try_recv().is_err());
        assert_eq!(entries(&raw, "q").await.len(), 3 - expected);
        release[expected].take().unwrap().send(()).unwrap();
        entry_count_is(&raw, "q", 2 - expected).await;
    }
    for t in tasks {
        t.await.unwrap();
    }
    assert!(entries(&raw, "q").await.is_empty());
}

#[tokio::test]
async fn a_cancelled_waiter_leaves_nothing_behind() {
    let Some(etcd) = etcd_for_test() else { return };
    let raw = raw(&[etcd.endpoint()]).await;
    let holder = client(&etcd).await;
    let waiter = client(&etcd).await;
    let opts = LockOptions::new(Duration::from_secs(10));
    let first = holder
        .try_acquire("c", &opts)
        .await
        .unwrap()
        .acquired()
        .unwrap();

    // W1 waits, then is dropped mid-wait.
    let w1 = {
        let waiter = waiter.clone();
        let opts = opts.clone().wait(GENEROUS);
        tokio::spawn(async move { waiter.acquire("c", &opts).await })
    };
    entry_count_is(&raw, "c", 2).await;
    let w1_token = entries(&raw, "c").await[1].0.clone();
    // W2 queues behind W1.
    let w2 = {
        let waiter = waiter.clone();
        let opts = opts.clone().wait(GENEROUS);
        tokio::spawn(async move { waiter.acquire("c", &opts).await })
    };
    entry_count_is(&raw, "c", 3).await;
    w1.abort();
    assert!(w1.await.unwrap_err().is_cancelled());
    entry_count_is(&raw, "c", 2).await;
    assert!(
        entries(&raw, "c").await.iter().all(|(t, _)| *t != w1_token),
        "W1's entry is gone"
    );

    // A waiter whose deadline passes removes its entry too.
    let t0 = Instant::now();
    let err = waiter
        .acquire("c", &opts.clone().wait(Duration::from_millis(300)))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::NotAcquired { .. }), "{err}");
    assert!(t0.elapsed() < Duration::from_secs(5));
    assert_eq!(entries(&raw, "c").await.len(), 2);

    // The queue is not stalled: W2 gets the lock as soon as the holder releases.
    first.release().await.unwrap();
    let g2 = tokio::time::timeout(GENEROUS, w2)
        .await
        .expect("W2 acquires")
        .unwrap()
        .unwrap();
    assert_eq!(entries(&raw, "c").await.len(), 1);
    g2.release().await.unwrap();
    assert!(entries(&raw, "c").await.is_empty());
}

#[tokio::test]
async fn auto_extend_outlives_the_ttl_and_plain_locks_expire() {
    let Some(etcd) = etcd_for_test() else { return };
    let raw = raw(&[etcd.endpoint()]).await;
    let c = client(&etcd).await;
    let other = client(&etcd).await;

    // Auto-extended: TTL 3 s, renewed every 1.5 s. etcd reports the remaining TTL in whole
    // seconds (truncated), so each renewal shows as a rise from 1 to 2.
    let ttl = Duration::from_secs(3);
    let opts = LockOptions::new(ttl)
        .auto_extend(true)
        .renew_every(Duration::from_millis(1500));
    let g = c.acquire("auto", &opts).await.unwrap();
    let began = Instant::now();
    let mut rises = 0;
    let mut last = c.inspect("auto").await.unwrap().ttl.unwrap();
    let deadline = began + GENEROUS;
    while rises < 3 || began.elapsed() <= ttl {
        assert!(
            Instant::now() < deadline,
            "the lease was not renewed three times"
        );
        tokio::time::sleep(POLL).await;
        let believed = g.valid_until();
        let state = c.inspect("auto").await.unwrap();
        assert_eq!(
            state.holder.as_deref(),
            Some(g.token().expose()),
            "holder changed"
        );
        let now = state.ttl.expect("a lease");
        assert_valid_within_server_lease(believed, now);
        if now > last {
            rises += 1;
        }
        last = now;
    }
    assert!(g.is_held(), "an auto-extended lock stays held");
    assert_eq!(g.loss_reason(), None);
    assert!(
        other
            .try_acquire("auto", &opts)
            .await
            .unwrap()
            .acquired()
            .is_none()
    );
    // Extending an auto-extended lock moves it onto the session of the new TTL: same entry,
    // a longer lease, still renewed.
    let revision = entries(&raw, "auto").await[0].1;
    g.extend(Duration::from_secs(8)).await.unwrap();
    let state = c.inspect("auto").await.unwrap();
    assert!(state.ttl.unwrap() >= Duration::from_secs(6), "{state:?}");
    assert_eq!(state.fencing_counter, Some(revision as u64));
    assert!(g.is_held() && g.lease().remaining() > Duration::from_secs(5));
    g.release().await.unwrap();
    assert!(entries(&raw, "auto").await.is_empty());

    // Not auto-extended: gone after its TTL (etcd's minimum, 2 s), and the guard says so.
    let plain = c
        .try_acquire("plain", &LockOptions::new(Duration::from_secs(2)))
        .await
        .unwrap()
        .acquired()
        .unwrap();
    entry_count_is(&raw, "plain", 0).await;
    tokio::time::timeout(GENEROUS, plain.lost())
        .await
        .expect("plain lock reports its expiry");
    assert_eq!(plain.loss_reason(), Some(LossReason::Expired));
    assert!(plain.release().await.unwrap_err().is_not_held());

    // Auto-extended with a hold cap: renewed until the cap, then it expires and says so.
    let capped = c
        .acquire(
            "capped",
            &LockOptions::new(Duration::from_secs(2))
                .auto_extend(true)
                .max_hold(Duration::from_millis(500)),
        )
        .await
        .unwrap();
    entry_count_is(&raw, "capped", 0).await;
    tokio::time::timeout(GENEROUS, capped.lost())
        .await
        .expect("capped lock reports its expiry");
    assert_eq!(capped.loss_reason(), Some(LossReason::Expired));
}

#[tokio::test]
async fn loss_is_reported_when_etcd_stalls_past_the_ttl() {
    let Some(etcd) = etcd_for_test() else { return };
    let c = Locker::from(
        EtcdClient::connect_with(
            &url(&etcd),
            ClientOptions::new().response_timeout(Duration::from_secs(1)),
        )
        .await
        .unwrap(),
    );
    let opts = LockOptions::new(Duration::from_secs(2))
        .auto_extend(true)
        .fencing(true);
    let g = c.acquire("stall", &opts).await.unwrap();
    let f1 = g.fencing_token().unwrap();
    etcd.pause().unwrap();
    let lost = tokio::time::timeout(GENEROUS, g.lost()).await;
    etcd.resume().unwrap();
    lost.expect("loss reported while etcd is frozen");
    assert_eq!(g.loss_reason(), Some(LossReason::Expired));
    // Once etcd runs again the old entry goes with its lease, and the lock is free again.
    let g2 = c
        .acquire("stall", &opts.clone().wait(GENEROUS))
        .await
        .unwrap();
    assert!(g2.fencing_token().unwrap() > f1);
    g2.release().await.unwrap();
    drop(g);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_keeps_leases_through_leader_loss_and_expires_a_stalled_holder() {
    let Some(mut cluster) = etcd_cluster_for_test(3) else {
        return;
    };
    let options = ClientOptions::new().response_timeout(Duration::from_secs(1));
    let c = Locker::from(
        EtcdClient::connect_with(&cluster_url(&cluster), options.clone())
            .await
            .unwrap(),
    );
    // Long enough to ride out an election (1-2 s with etcd's defaults) on a loaded machine.
    let ttl = Duration::from_secs(6);
    let opts = LockOptions::new(ttl).auto_extend(true).fencing(true);
    let g = c.acquire("ha", &opts).await.unwrap();
    let fencing = g.fencing_token().unwrap();
    // "A renewal sent after `t` succeeded": the validity is counted from the send.
    let renewed_after = |t: Instant| g.valid_until() > t + ttl - clock_drift(ttl);

    // A follower frozen: renewals go on through the others.
    let leader = tokio::task::block_in_place(|| cluster.wait_until_healthy()).unwrap();
    let follower = (leader + 1) % 3;
    cluster.member(follower).unwrap().pause().unwrap();
    let paused_at = Instant::now();
    until("a renewal after the follower froze", GENEROUS, || async {
        assert!(g.is_held(), "lost while a follower was frozen");
        renewed_after(paused_at)
    })
    .await;
    cluster.member(follower).unwrap().resume().unwrap();
    tokio::task::block_in_place(|| cluster.wait_until_healthy()).unwrap();

    // A follower killed: no effect either. Then it comes back.
    let leader = tokio::task::block_in_place(|| cluster.wait_until_healthy()).unwrap();
    let follower = (leader + 2) % 3;
    cluster.member_mut(follower).unwrap().kill();
    let killed_at = Instant::now();
    until(
        "a renewal after a follower was killed",
        GENEROUS,
        || async {
            assert!(g.is_held(), "lost while a follower was down");
            renewed_after(killed_at)
        },
    )
    .await;
    tokio::task::block_in_place(|| cluster.member_mut(follower).unwrap().restart()).unwrap();

    // The leader killed: a new one is elected, and the lease (etcd's and ours) survives.
    let leader = tokio::task::block_in_place(|| cluster.wait_until_healthy()).unwrap();
    cluster.member_mut(leader).unwrap().kill();
    let new_leader = tokio::task::block_in_place(|| cluster.wait_until_healthy()).unwrap();
    assert_ne!(new_leader, leader);
    let elected = Instant::now();
    until("a renewal under the new leader", GENEROUS, || async {
        assert!(
            g.is_held(),
            "lost across the leader change: {:?}",
            g.loss_reason()
        );
        renewed_after(elected)
    })
    .await;
    let state = retrying(|| c.inspect("ha")).await;
    assert_eq!(state.holder.as_deref(), Some(g.token().expose()));
    assert_eq!(state.fencing_counter, Some(fencing));
    assert_eq!(g.loss_reason(), None);
    retrying(|| async { g.extend(ttl).await }).await;
    g.release().await.unwrap();

    // A holder that stops renewing (a lock without auto-extension) loses the lock after its
    // TTL; another client gets it then, with a higher number, and not before.
    // The killed leader is still in the URL: like every request here, connecting may meet the
    // cluster still settling (CI saw a connection error once) and is tried again.
    let url = cluster_url(&cluster);
    let other = Locker::from(retrying(|| EtcdClient::connect_with(&url, options.clone())).await);
    let plain = LockOptions::new(Duration::from_secs(2)).fencing(true);
    let stalled = retrying(|| async {
        match c.try_acquire("stall", &plain).await? {
            TryAcquire::Acquired(g) => Ok(g),
            TryAcquire::Busy { .. } => panic!("nobody else holds it"),
        }
    })
    .await;
    let next = other
        .acquire("stall", &plain.clone().wait(GENEROUS))
        .await
        .unwrap();
    let acquired_at = Instant::now();
    assert!(
        stalled.valid_until() <= acquired_at,
        "granted while the first was still valid"
    );
    assert!(next.fencing_token().unwrap() > stalled.fencing_token().unwrap());
    assert!(stalled.release().await.unwrap_err().is_not_held());
    next.release().await.unwrap();
}

/// etcd's own count of the calls of one gRPC method (`LeaseKeepAlive` streams, `Txn`
/// requests): its gRPC metrics, served on the client port.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct GrpcCalls {
    /// Calls (streams) opened (`grpc_server_started_total`).
    pub(crate) started: u64,
    /// Calls ended, whatever their status (`grpc_server_handled_total`, all codes).
    pub(crate) ended: u64,
    /// Requests received, on all streams (`grpc_server_msg_received_total`).
    requests: u64,
}

impl GrpcCalls {
    fn open(&self) -> u64 {
        self.started - self.ended
    }
}

/// A lock that is not auto-extended rides on a lease of its own; once its release is confirmed,
/// that lease carries the next such lock while it is fresh (`etcd::spare`), and the next lock's
/// validity still counts from that lease's grant: it is exactly the first lock's, never later
/// than etcd's expiry of the lease. Without reuse each lock would cost a `LeaseGrant` (counted
/// by etcd); without the count from the grant, the later validity would be later. A spare
/// lease revoked from outside is not a failure: the next lock comes on a new lease.
#[tokio::test]
async fn a_released_lock_leaves_its_lease_to_the_next() {
    let Some(etcd) = etcd_for_test() else { return };
    let raw = raw(&[etcd.endpoint()]).await;
    let locker = client(&etcd).await;
    let opts = LockOptions::new(Duration::from_secs(30)).fencing(true);
    let lease_of = |key: &'static str| {
        let mut kv = raw.kv_client();
        async move {
            let options = etcd_client::GetOptions::new().with_prefix();
            let resp = kv
                .get(format!("{key}\0"), Some(options))
                .await
                .expect("get");
            resp.kvs().first().expect("the holder's entry").lease()
        }
    };
    let grants = grpc_calls(&etcd, "LeaseGrant").await.ended;
    let began = Instant::now();
    let first = locker.acquire("spare-1", &opts).await.expect("acquires");
    let (lease, valid_until) = (lease_of("spare-1").await, first.valid_until());
    first.release().await.expect("releases");
    // The lease was granted after `began`: until half of `FRESH_FOR` (1 s) later, it is fresh.
    let fresh = began.elapsed() < Duration::from_millis(500);
    let second = locker.acquire("spare-2", &opts).await.expect("acquires");
    if fresh {
        assert_eq!(
            lease_of("spare-2").await,
            lease,
            "the released lock's lease"
        );
        assert_eq!(
            grpc_calls(&etcd, "LeaseGrant").await.ended,
            grants + 1,
            "one grant for the two locks"
        );
    }
    if lease_of("spare-2").await == lease {
        assert_eq!(second.valid_until(), valid_until, "counted from the grant");
    }
    let believed = second.valid_until();
    assert_valid_within_server_lease(
        believed,
        locker.inspect("spare-2").await.unwrap().ttl.unwrap(),
    );
    let reused = lease_of("spare-2").await;
    second.release().await.expect("releases");
    let mut leases = raw.lease_client();
    leases
        .revoke(reused)
        .await
        .expect("revokes the spare lease");
    let third = locker
        .acquire("spare-3", &opts)
        .await
        .expect("acquires with its spare lease revoked");
    assert_ne!(lease_of("spare-3").await, reused, "a new lease");
    third.release().await.expect("releases");
}

/// The `LeaseKeepAlive` streams etcd counts.
async fn keep_alive_streams(etcd: &Etcd) -> GrpcCalls {
    grpc_calls(etcd, "LeaseKeepAlive").await
}

/// Reads `GET /metrics` (HTTP/1.0, over a plain TCP connection) from `etcd` and sums the
/// `method` series of the three counters. Panics if etcd does not expose them.
pub(crate) async fn grpc_calls(etcd: &Etcd, method: &str) -> GrpcCalls {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let fetch = async {
        let mut conn = tokio::net::TcpStream::connect(etcd.addr()).await?;
        conn.write_all(b"GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
            .await?;
        let mut text = String::new();
        conn.read_to_string(&mut text).await?;
        Ok::<_, std::io::Error>(text)
    };
    let text = tokio::time::timeout(GENEROUS, fetch)
        .await
        .expect("metrics in time")
        .expect("GET /metrics");
    assert!(text.starts_with("HTTP/1.0 200"), "{:.200}", text);
    let sum = |counter: &str| -> u64 {
        let series: Vec<u64> = text
            .lines()
            .filter(|l| {
                l.starts_with(&format!("{counter}{{"))
                    && l.contains(&format!("grpc_method=\"{method}\""))
            })
            .map(|l| {
                let value = l.rsplit(' ').next().unwrap();
                value.parse::<f64>().unwrap_or_else(|_| panic!("{l}")) as u64
            })
            .collect();
        assert!(!series.is_empty(), "etcd exposes no {counter} for {method}");
        series.iter().sum()
    };
    GrpcCalls {
        started: sum("grpc_server_started_total"),
        ended: sum("grpc_server_handled_total"),
        requests: sum("grpc_server_msg_received_total"),
    }
}

/// Waits until the validity of every guard moved forward `n` times: each move is the reply to
/// a keep-alive of that guard's lease. Fails if a guard is lost meanwhile.
async fn renewed_times(guards: &[&LockGuard], n: usize) {
    let mut last: Vec<Instant> = guards.iter().map(|g| g.valid_until()).collect();
    let mut seen = vec![0; guards.len()];
    let deadline = Instant::now() + GENEROUS;
    while seen.iter().any(|&s| s < n) {
        assert!(Instant::now() < deadline, "renewals seen: {seen:?}");
        for (i, g) in guards.iter().enumerate() {
            assert!(g.is_held(), "{} lost: {:?}", g.key(), g.loss_reason());
            let until = g.valid_until();
            if until > last[i] {
                seen[i] += 1;
                last[i] = until;
            }
        }
        tokio::time::sleep(POLL).await;
    }
}

/// The sessions of two TTLs (two etcd leases) of one client are kept alive over ONE
/// `LeaseKeepAlive` stream, as etcd itself counts them; when the member restarts (the stream
/// breaks), ONE new stream carries both again, and neither lock is lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_keep_alive_stream_carries_every_ttl() {
    let Some(mut etcd) = etcd_for_test() else {
        return;
    };
    let raw = raw(&[etcd.endpoint()]).await;
    let c = client(&etcd).await;
    let before = keep_alive_streams(&etcd).await;
    assert_eq!((before.started, before.requests), (0, 0), "{before:?}");

    // Renewed every 500 ms, so both renew several times within a second or two; TTLs long
    // enough to ride out the restart below (1.3-1.9 s seen) with a margin.
    let every = Duration::from_millis(500);
    let (short_ttl, long_ttl) = (Duration::from_secs(4), Duration::from_secs(6));
    let short = c
        .acquire(
            "ka-short",
            &LockOptions::new(short_ttl)
                .auto_extend(true)
                .renew_every(every),
        )
        .await
        .unwrap();
    let long = c
        .acquire(
            "ka-long",
            &LockOptions::new(long_ttl)
                .auto_extend(true)
                .renew_every(every),
        )
        .await
        .unwrap();
    let acquired = Instant::now();
    // Two TTLs: two sessions, two etcd leases.
    let lease_of = |key: &'static str| {
        let mut kv = raw.kv_client();
        async move {
            let mut prefix = key.as_bytes().to_vec();
            prefix.push(0);
            let options = etcd_client::GetOptions::new().with_prefix();
            let resp = kv.get(prefix, Some(options)).await.unwrap();
            assert_eq!(resp.kvs().len(), 1, "{key}");
            resp.kvs()[0].lease()
        }
    };
    let (short_lease, long_lease) = (lease_of("ka-short").await, lease_of("ka-long").await);
    assert_ne!(short_lease, long_lease, "one session per TTL");

    renewed_times(&[&short, &long], 3).await;
    // etcd saw the renewals too: 2.2 s after the grants, a lease never renewed would have
    // less than TTL - 2 s left (etcd truncates to whole seconds); a renewed one has more.
    tokio::time::sleep_until((acquired + Duration::from_millis(2200)).into()).await;
    for (key, ttl) in [("ka-short", short_ttl), ("ka-long", long_ttl)] {
        let left = c.inspect(key).await.unwrap().ttl.unwrap();
        assert!(left + Duration::from_secs(2) >= ttl, "{key}: {left:?} left");
    }
    let seen = keep_alive_streams(&etcd).await;
    eprintln!("before the restart: {seen:?}");
    assert!(seen.requests >= 6, "keep-alives received by etcd: {seen:?}");
    assert_eq!(
        (seen.started, seen.ended),
        (1, 0),
        "one keep-alive stream for both TTLs"
    );

    // The stream breaks: the member is killed and restarted (its counters start afresh).
    // Opening attempts that etcd, still starting, leaves unanswered for a keep-alive wait are
    // abandoned (etcd counts them as started, then ended); one stream is open in the end.
    let t0 = Instant::now();
    tokio::task::block_in_place(|| etcd.restart()).unwrap();
    eprintln!("etcd restarted in {:?}", t0.elapsed());
    renewed_times(&[&short, &long], 3).await;
    until("one keep-alive stream open", GENEROUS, || async {
        keep_alive_streams(&etcd).await.open() == 1
    })
    .await;
    let seen = keep_alive_streams(&etcd).await;
    eprintln!("after the restart: {seen:?}");
    assert_eq!(seen.open(), 1, "{seen:?}");
    assert!(seen.requests >= 6, "{seen:?}");
    assert_eq!((short.loss_reason(), long.loss_reason()), (None, None));
    short.release().await.unwrap();
    long.release().await.unwrap();
}

#[tokio::test]
async fn bad_input_and_connection_errors() {
    let Some(etcd) = etcd_for_test() else { return };
    let c = client(&etcd).await;
    // Frozen: any request would hang until the 5 s response timeout, so an answer that is
    // not a connection error proves none was sent. (Bad keys, refused before any round trip:
    // `conformance::etcd`.)
    etcd.pause().unwrap();
    let e = c
        .try_acquire("k", &LockOptions::new(Duration::ZERO))
        .await
        .map(drop)
        .unwrap_err();
    assert!(
        matches!(e, Error::InvalidArgument { what: "ttl", .. }),
        "{e}"
    );
    let e = c
        .try_acquire(
            "k",
            &LockOptions::new(Duration::from_secs(1)).replica_ack(1, Duration::from_secs(1)),
        )
        .await
        .map(drop)
        .unwrap_err();
    assert!(
        matches!(
            e,
            Error::Unsupported {
                backend: "etcd",
                ..
            }
        ),
        "{e}"
    );
    etcd.resume().unwrap();

    // A closed port: a prompt, unambiguous connection error.
    let closed = leasehold_harness::ClosedPort::new();
    let port = closed.port();
    let t0 = Instant::now();
    let e = EtcdClient::connect_with(
        &format!("etcd://127.0.0.1:{port}"),
        ClientOptions::new().connect_timeout(Duration::from_secs(2)),
    )
    .await
    .unwrap_err();
    assert!(
        matches!(
            e,
            Error::Connection {
                op: Operation::Connect,
                ambiguous: false,
                ..
            }
        ),
        "{e}"
    );
    assert!(t0.elapsed() < Duration::from_secs(4), "{:?}", t0.elapsed());
    for bad in ["etcd://", "etcd://h:1/path", "etcd://:pw@h:1"] {
        let e = EtcdClient::connect(bad).await.unwrap_err();
        assert!(
            matches!(e, Error::InvalidArgument { what: "url", .. }),
            "{bad}: {e}"
        );
    }

    // Authentication: root with a password, a user without rights, then auth on.
    let raw = raw(&[etcd.endpoint()]).await;
    let mut auth = raw.auth_client();
    auth.user_add("root", "rootpw", None).await.unwrap();
    auth.user_grant_role("root", "root").await.unwrap();
    auth.role_add("nothing").await.unwrap();
    auth.user_add("nobody", "pw", None).await.unwrap();
    auth.user_grant_role("nobody", "nothing").await.unwrap();
    auth.auth_enable().await.unwrap();
    let addr = etcd.addr();
    let e = EtcdClient::connect(&format!("etcd://root:wrong@{addr}"))
        .await
        .unwrap_err();
    assert!(matches!(e, Error::Authentication { .. }), "{e}");
    let e = EtcdClient::connect(&format!("etcd://ghost:pw@{addr}"))
        .await
        .unwrap_err();
    assert!(matches!(e, Error::Authentication { .. }), "{e}");
    let root = Locker::from(
        EtcdClient::connect(&format!("etcd://root:rootpw@{addr}"))
            .await
            .unwrap(),
    );
    assert!(!format!("{root:?}").contains("rootpw"), "{root:?}");
    let g = root
        .try_acquire("k", &LockOptions::new(Duration::from_secs(5)))
        .await
        .unwrap();
    g.acquired().unwrap().release().await.unwrap();
    let nobody = Locker::from(
        EtcdClient::connect(&format!("etcd://nobody:pw@{addr}"))
            .await
            .unwrap(),
    );
    let e = nobody
        .try_acquire("k", &LockOptions::new(Duration::from_secs(5)))
        .await
        .map(drop)
        .unwrap_err();
    assert!(matches!(e, Error::PermissionDenied { .. }), "{e}");
}

/// The lease an entry of `key` rides on (`None`: no entry). Asserts at most one entry.
async fn entry_lease(raw: &etcd_client::Client, key: &str) -> Option<i64> {
    let mut prefix = key.as_bytes().to_vec();
    prefix.push(0);
    let options = etcd_client::GetOptions::new().with_prefix();
    let resp = raw
        .kv_client()
        .get(prefix, Some(options))
        .await
        .expect("get");
    assert!(resp.kvs().len() <= 1, "{key}: {} entries", resp.kvs().len());
    resp.kvs().first().map(|kv| kv.lease())
}

/// A client whose every reply passes through `link` (which can hold them back), with a 1 s
/// response timeout.
async fn slow_client(link: &SlowLink) -> Locker {
    EtcdClient::connect_with(
        &format!("etcd://{}", link.addr()),
        ClientOptions::new().response_timeout(Duration::from_secs(1)),
    )
    .await
    .expect("connect through the relay")
    .into()
}

/// What the lease-move tests start from: etcd, a raw client on it, a relay in front of it
/// ([`slow_client`] through it), `g` holding `key` auto-extended for 60 s (its session renews
/// every 20 s, so its own check of the entry does not come during a test), and `pin` holding
/// another key with `pin_options`: the session the move goes to, so the move needs no grant.
struct MoveSetup {
    etcd: Etcd,
    raw: etcd_client::Client,
    link: SlowLink,
    c: Locker,
    g: LockGuard,
    pin: LockGuard,
    /// The lease `pin`'s entry rides on (the one the move goes to), not `g`'s.
    new_lease: i64,
}

/// `pin` options whose session (of 20 s) is renewed every second, so it retires within ~2 s
/// once idle.
fn retiring_pin() -> LockOptions {
    LockOptions::new(Duration::from_secs(20))
        .auto_extend(true)
        .renew_every(Duration::from_secs(1))
}

async fn move_setup(key: &str, pin_options: &LockOptions) -> Option<MoveSetup> {
    let etcd = etcd_for_test()?;
    let raw = raw(&[etcd.endpoint()]).await;
    let link = SlowLink::start(etcd.addr()).unwrap();
    let c = slow_client(&link).await;
    let g = c
        .acquire(
            key,
            &LockOptions::new(Duration::from_secs(60)).auto_extend(true),
        )
        .await
        .unwrap();
    let pin = c.acquire("pin", pin_options).await.unwrap();
    let old_lease = entry_lease(&raw, key).await.unwrap();
    let new_lease = entry_lease(&raw, "pin").await.unwrap();
    assert_ne!(old_lease, new_lease, "one session per TTL");
    Some(MoveSetup {
        etcd,
        raw,
        link,
        c,
        g,
        pin,
        new_lease,
    })
}

/// Releases `pin` (after a round trip, so that no reply is still held back) and watches `g`'s
/// entry until it is gone or the guard's validity has moved forward three times (renewals of
/// the session carrying it): whenever the entry is gone (read first), the guard must not say
/// held.
async fn unpin_and_watch(raw: &etcd_client::Client, c: &Locker, pin: LockGuard, g: &LockGuard) {
    retrying(|| c.inspect("pin")).await;
    pin.release().await.unwrap();
    let mut renewals = 0;
    let mut last = g.valid_until();
    let deadline = Instant::now() + GENEROUS;
    while renewals < 3 {
        assert!(Instant::now() < deadline, "renewals seen: {renewals}");
        let on = entry_lease(raw, g.key()).await;
        let held = g.is_held();
        if on.is_none() {
            assert!(!held, "the entry is gone and the guard says held");
            return;
        }
        let until = g.valid_until();
        if until > last {
            renewals += 1;
            last = until;
        }
        tokio::time::sleep(POLL).await;
    }
}

/// Issue 22, finding 2, etcd's lease move: a guard's `extend` moves an auto-extended lock onto
/// the session of the new TTL; here etcd applies the move but its reply is held back past the
/// client's response timeout (a relay between the client and etcd), so the outcome is unknown
/// to the client. Before the fix the lock was put back on its old session: the entry rode on
/// the new session's lease, that session (no lock registered) went idle and revoked it,
/// deleting the entry, while the old session kept `is_held()` true. Checked: whenever the
/// entry is gone, the guard does not say held; and the move is resolved (etcd answers again
/// within the validity): the lock rides on, and is renewed by, the new session.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ambiguous_move_never_leaves_a_deleted_lock_believed_held() {
    let Some(MoveSetup {
        etcd: _etcd,
        raw,
        link,
        c,
        g,
        pin,
        new_lease,
        ..
    }) = move_setup("moving", &retiring_pin()).await
    else {
        return;
    };

    // Replies held back 2 s (requests pass at once): the move reaches etcd and is applied,
    // its reply comes after the client stopped waiting (1 s). Once etcd shows it applied,
    // later replies pass again.
    link.set_reply_delay(Duration::from_secs(2));
    let sent = Instant::now();
    let (result, ()) = tokio::join!(g.extend(Duration::from_secs(20)), async {
        until("the move is applied", GENEROUS, || async {
            entry_lease(&raw, "moving").await == Some(new_lease)
        })
        .await;
        link.set_reply_delay(Duration::ZERO);
    });
    eprintln!("extend: {result:?} after {:?}", sent.elapsed());
    let believed = g.valid_until();
    if let Some(ttl) = c.inspect("moving").await.unwrap().ttl {
        assert_valid_within_server_lease(believed, ttl);
    }

    // The new session's other lock goes: if ours were not registered on it, it would be idle,
    // retire and revoke its lease (the entry with it).
    unpin_and_watch(&raw, &c, pin, &g).await;
    // The move was resolved: applied, so the lock now rides on the new session.
    result.expect("the ambiguous move is resolved once etcd answers");
    assert!(g.is_held() && g.loss_reason().is_none());
    assert_eq!(entry_lease(&raw, "moving").await, Some(new_lease));
    g.release().await.unwrap();
    assert_eq!(entry_lease(&raw, "moving").await, None);
}

/// The generic rule (guard.rs `Validity`) through etcd's lease move: a shortening extend
/// (60 s to 3 s) of an auto-extended lock whose move gets no answer at all (every reply held
/// back past the timeout) leaves the validity at most 3 s after the send, during and after the
/// call: the move stays unresolved, so the lock is declared lost when that runs out, and its
/// entry is deleted. Before the fix the lock was put back on its old session, with that
/// session's validity (about 60 s).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unanswered_shortening_move_is_believed_no_longer_than_its_ttl() {
    let short = Duration::from_secs(3);
    let pin_options = LockOptions::new(short).auto_extend(true);
    let Some(MoveSetup {
        etcd: _etcd,
        raw,
        link,
        g,
        pin,
        ..
    }) = move_setup("shortened", &pin_options).await
    else {
        return;
    };
    assert!(g.lease().remaining() > Duration::from_secs(50));

    link.set_reply_delay(Duration::from_secs(2));
    let sent = Instant::now();
    let bound = sent + short;
    let watch = async {
        // While the call runs: never believed past the bound.
        loop {
            assert!(g.valid_until() <= bound, "validity past the extend's bound");
            tokio::time::sleep(POLL).await;
        }
    };
    let result = tokio::select! {
        // The extend first: its first poll records the send, and lowers the validity.
        biased;
        r = g.extend(short) => r,
        () = watch => unreachable!(),
    };
    eprintln!("extend: {result:?} after {:?}", sent.elapsed());
    assert!(result.is_err(), "no reply came: {result:?}");
    assert!(g.valid_until() <= bound, "validity past the extend's bound");
    tokio::time::timeout(GENEROUS, g.lost())
        .await
        .expect("the lock is declared lost when its validity runs out");
    assert!(!g.is_held());
    assert!(g.valid_until() <= bound, "validity past the extend's bound");

    // Replies pass again: the entry (on whichever lease) is deleted, and nothing revives it.
    link.set_reply_delay(Duration::ZERO);
    until("the entry is deleted", GENEROUS, || async {
        entry_lease(&raw, "shortened").await.is_none()
    })
    .await;
    assert!(!g.is_held() && g.valid_until() <= bound);
    drop(pin);
    assert!(g.release().await.unwrap_err().is_not_held());
}

/// An extend dropped while its move has no answer (here etcd applied it): the lock is on
/// neither session, so neither keeps its entry alive for sure. It is declared lost at once and
/// its entry deleted; before, it stayed believed held (until the extend's bound) while the new
/// session, idle, revoked the lease its entry rode on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_move_leaves_no_lock_believed_held() {
    let Some(s) = move_setup("dropped", &retiring_pin()).await else {
        return;
    };
    let (raw, link, g, new_lease) = (&s.raw, &s.link, &s.g, s.new_lease);
    link.set_reply_delay(Duration::from_secs(2));
    tokio::select! {
        biased;
        r = g.extend(Duration::from_secs(20)) => panic!("answered through the delay: {r:?}"),
        () = until("the move is applied", GENEROUS, || async {
            entry_lease(raw, "dropped").await == Some(new_lease)
        }) => {}
    }
    link.set_reply_delay(Duration::ZERO);
    unpin_and_watch(raw, &s.c, s.pin, g).await;
    assert!(!g.is_held(), "a dropped move is not believed");
    assert_eq!(g.loss_reason(), Some(LossReason::Expired));
    until("the entry is deleted", GENEROUS, || async {
        entry_lease(raw, "dropped").await.is_none()
    })
    .await;
}
