//! TLS (`rediss://`, `rediss-cluster://`, `rediss-sentinel://`): every flavor started with a
//! throwaway CA and server certificate made at test time; the client trusts that CA through
//! `ClientOptions::tls_ca_file`.

use crate::common;

use std::time::Duration;

use common::get;
use leasehold::redis::RedisClient;
use leasehold::{Backoff, ClientOptions, Error, LockOptions, Locker};
use leasehold_harness::{Server, ServerOptions, TlsFiles};

const LONG: Duration = Duration::from_secs(60);
const HANG_GUARD: Duration = Duration::from_secs(60);

fn tls_server(bin: &leasehold_harness::ServerBinary) -> (Server, TlsFiles) {
    let files = TlsFiles::temporary().expect("certificates are generated");
    let server = Server::start(bin, &ServerOptions::new().tls(&files)).expect("TLS server starts");
    (server, files)
}

// Every lock operation over TLS, including a waiter woken by the release notification (its
// subscriber connection is TLS too) and an auto-extended lease.
leasehold_harness::server_test!(async fn locks_work_over_tls(bin) {
    let (server, files) = tls_server(&bin);
    let url = server.tls_url().expect("a TLS port");
    assert!(url.starts_with("rediss://"));
    let options = ClientOptions::new().tls_ca_file(files.ca_cert());
    let holder = Locker::connect_with(&url, options.clone()).await.expect("connects over TLS");
    let waiter = Locker::connect_with(&url, options).await.unwrap();
    let g = holder
        .try_acquire("tls:lock", &LockOptions::new(Duration::from_secs(2)).fencing(true).auto_extend(true))
        .await
        .unwrap()
        .acquired()
        .unwrap();
    assert_eq!(g.fencing_token(), Some(1));
    let task = tokio::spawn(async move {
        let opts = LockOptions::new(LONG)
            .wait(Duration::from_secs(30))
            .backoff(Backoff::constant(Duration::from_secs(40)));
        waiter.acquire("tls:lock", &opts).await.map(|g| g.detach())
    });
    // Kept alive past its TTL by renewals over TLS.
    let stats = holder.as_redis().unwrap().renewal_stats();
    tokio::time::timeout(HANG_GUARD, async {
        while stats.renewals() < 4 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("renewals over TLS");
    assert!(g.is_held());
    let state = holder.inspect("tls:lock").await.unwrap();
    assert_eq!(state.holder.as_deref(), Some(g.token().expose()));
    assert!(!task.is_finished(), "the waiter got a held lock");
    g.release().await.unwrap();
    // A 40 s backoff with a 30 s wait: only the notification can wake the waiter in time.
    let lease = tokio::time::timeout(HANG_GUARD, task).await.expect("hung").unwrap().expect("woken");
    assert_eq!(holder.inspect("tls:lock").await.unwrap().holder.as_deref(), Some(lease.token().expose()));
});

// The system's roots do not know the throwaway CA: refused, with a certificate error.
leasehold_harness::server_test!(async fn an_unknown_ca_is_refused(bin) {
    let (server, _files) = tls_server(&bin);
    let options = ClientOptions::new().connect_timeout(Duration::from_secs(3));
    let err = RedisClient::connect_with(&server.tls_url().unwrap(), options).await.unwrap_err();
    assert!(matches!(err, Error::Connection { .. }), "{err:?}");
    assert!(err.to_string().to_lowercase().contains("certificate"), "{err}");
});

// TLS to a plain port and plain text to a TLS port fail within the connect timeout, never hang.
leasehold_harness::server_test!(async fn wrong_protocol_fails_within_the_connect_timeout(bin) {
    let (server, files) = tls_server(&bin);
    let bound = Duration::from_secs(2);
    let options = ClientOptions::new().connect_timeout(bound).response_timeout(bound).tls_ca_file(files.ca_cert());
    let tls_to_plain = format!("rediss://127.0.0.1:{}/", server.port());
    let plain_to_tls = format!("redis://127.0.0.1:{}/", server.tls_port().unwrap());
    for url in [tls_to_plain, plain_to_tls] {
        let started = std::time::Instant::now();
        let err = tokio::time::timeout(HANG_GUARD, RedisClient::connect_with(&url, options.clone()))
            .await
            .unwrap_or_else(|_| panic!("{url}: hung"))
            .unwrap_err();
        assert!(matches!(err, Error::Connection { .. }), "{url}: {err:?}");
        // Bounded by the connect timeout (plus scheduling slack on a loaded machine), not hung.
        assert!(started.elapsed() < HANG_GUARD, "{url}");
    }
});

// A CA file that does not exist, or is not a certificate: refused before any connection.
leasehold_harness::server_test!(async fn bad_ca_files_are_invalid_arguments(bin) {
    let (server, files) = tls_server(&bin);
    let url = server.tls_url().unwrap();
    let missing = files.dir().join("no-such-ca.pem");
    let err = RedisClient::connect_with(&url, ClientOptions::new().tls_ca_file(&missing)).await.unwrap_err();
    assert!(matches!(err, Error::InvalidArgument { what: "TLS CA file", .. }), "{err:?}");
    let garbage = files.dir().join("garbage.pem");
    std::fs::write(&garbage, "this is not a certificate\n").unwrap();
    let err = RedisClient::connect_with(&url, ClientOptions::new().tls_ca_file(&garbage)).await.unwrap_err();
    assert!(matches!(err, Error::InvalidArgument { what: "TLS CA file", .. }), "{err:?}");
    assert!(err.to_string().contains("no PEM certificate"), "{err}");
    // The server key is PEM, but not a certificate.
    let err = RedisClient::connect_with(&url, ClientOptions::new().tls_ca_file(files.server_key())).await.unwrap_err();
    assert!(matches!(err, Error::InvalidArgument { .. }), "{err:?}");
});

// A cluster whose nodes speak TLS (bus and replication too): `rediss-cluster://` with the
// private CA reaches every master through the TLS ports the topology names.
leasehold_harness::server_test!(async fn a_cluster_over_tls(bin) {
    use leasehold_harness::{Cluster, ClusterOptions};
    let files = TlsFiles::temporary().expect("certificates are generated");
    let cluster = Cluster::start(&bin, &ClusterOptions::new().server(ServerOptions::new().tls(&files))).expect("TLS cluster starts");
    let ports: Vec<String> = cluster
        .masters()
        .unwrap()
        .iter()
        .map(|m| format!("127.0.0.1:{}", m.tls_port().expect("a TLS port")))
        .collect();
    let url = format!("rediss-cluster://{}", ports.join(","));
    let client = Locker::connect_with(&url, ClientOptions::new().tls_ca_file(files.ca_cert())).await.expect("connects over TLS");
    let mut masters = std::collections::HashSet::new();
    for i in 0..30 {
        let key = format!("tls:{i}");
        masters.insert(cluster.master_index_for_key(&key).unwrap());
        let g = client.try_acquire(&key, &LockOptions::new(LONG).fencing(true)).await.unwrap().acquired().unwrap();
        let owner = cluster.master_for_key(&key).unwrap();
        let stored = owner.command(&["GET", &key]).unwrap();
        assert_eq!(stored.as_bytes(), Some(g.token().expose().as_bytes()));
        g.release().await.unwrap();
    }
    assert_eq!(masters.len(), 3);
});

/// A Sentinel set whose data nodes speak TLS (and replicate over it); the sentinels monitor the
/// TLS ports and answer clients in plain text.
fn tls_sentinel_set(
    bin: &leasehold_harness::ServerBinary,
) -> (leasehold_harness::SentinelSet, TlsFiles) {
    use leasehold_harness::{SentinelOptions, SentinelSet};
    let files = TlsFiles::temporary().expect("certificates are generated");
    let options = SentinelOptions::new().server(ServerOptions::new().tls(&files));
    let set = SentinelSet::start(bin, &options).expect("a Sentinel set with TLS data nodes starts");
    (set, files)
}

// `rediss-sentinel://`: plain text to the sentinels, TLS with the private CA to the primary
// they name (its TLS port). Acquire with fencing, extend and release land on the primary; after
// a forced failover a waiting acquisition through the same client lands on the new primary.
leasehold_harness::server_test!(async fn sentinel_over_tls(bin) {
    let (set, files) = tls_sentinel_set(&bin);
    let primary = set.primary().unwrap();
    let tls_port = primary.tls_port().expect("a TLS port");
    // The sentinels name the primary's TLS port, not its plain one.
    let named = set.sentinel(0).unwrap().command(&["SENTINEL", "GET-MASTER-ADDR-BY-NAME", set.master_name()]).unwrap();
    let named_port = named.as_array().and_then(|a| a.get(1)).and_then(|p| p.as_str()).map(str::to_owned);
    assert_eq!(named_port, Some(tls_port.to_string()), "{named}");

    let url = set.lock_url("rediss-sentinel");
    let client = Locker::connect_with(&url, ClientOptions::new().tls_ca_file(files.ca_cert()))
        .await
        .expect("connects through the sentinels, TLS to the primary");
    let key = "tls:sentinel";
    let g = client.try_acquire(key, &LockOptions::new(LONG).fencing(true)).await.unwrap().acquired().unwrap();
    assert_eq!(g.fencing_token(), Some(1));
    assert_eq!(get(primary, key).as_deref(), Some(g.token().expose()), "the key is on the primary");
    g.extend(Duration::from_secs(300)).await.expect("extended over TLS");
    let pttl = primary.command(&["PTTL", key]).unwrap().as_integer().unwrap();
    assert!(pttl > LONG.as_millis() as i64, "extend reached the primary: PTTL {pttl}");
    g.release().await.expect("released over TLS");
    assert_eq!(get(primary, key), None);

    // The fencing counter must be on the replica before it is promoted, or the next number
    // would start over (replication is asynchronous; this observes it, bounded).
    let before = set.primary_addr().unwrap();
    let replica = set.data_nodes().iter().find(|n| n.addr() != before).expect("a replica");
    let start = std::time::Instant::now();
    while get(replica, &leasehold::redis::fence_key(key)).as_deref() != Some("1") {
        assert!(start.elapsed() < HANG_GUARD, "the fencing counter did not reach the replica");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }

    let after = set.failover().expect("failover over TLS replication");
    assert_ne!(before, after);
    let new_primary = set.primary().unwrap();
    assert_eq!(new_primary.addr(), after);
    let opts = LockOptions::new(LONG).fencing(true).wait(Duration::from_secs(30));
    let h = tokio::time::timeout(HANG_GUARD, client.acquire(key, &opts))
        .await
        .expect("hung")
        .expect("acquired on the new primary through the same client");
    assert_eq!(h.fencing_token(), Some(2));
    assert_eq!(get(new_primary, key).as_deref(), Some(h.token().expose()), "the key is on the new primary");
    h.release().await.unwrap();
    assert_eq!(get(new_primary, key), None);
});

// Plain `redis-sentinel://` to the same set: the sentinels answer, but name a TLS port, and
// plain text to it fails (an error within the connect timeout, not a hang).
leasehold_harness::server_test!(async fn plain_sentinel_url_to_tls_data_nodes_fails(bin) {
    let (set, files) = tls_sentinel_set(&bin);
    let bound = Duration::from_secs(2);
    let options = ClientOptions::new().connect_timeout(bound).response_timeout(bound).tls_ca_file(files.ca_cert());
    let url = set.lock_url("redis-sentinel");
    let started = std::time::Instant::now();
    let err = tokio::time::timeout(HANG_GUARD, RedisClient::connect_with(&url, options))
        .await
        .expect("hung")
        .expect_err("plain text to a TLS port");
    eprintln!("plain redis-sentinel:// to TLS data nodes: {err} (after {:?})", started.elapsed());
    assert!(matches!(err, Error::Connection { .. }), "{err:?}");
    // Bounded by the connect and response timeouts (plus slack on a loaded machine).
    assert!(started.elapsed() < bound * 5, "took {:?}", started.elapsed());
    // Nothing was written: the harness sees an empty primary.
    let primary = set.primary().unwrap();
    assert_eq!(primary.command(&["DBSIZE"]).unwrap().as_integer(), Some(0));
});
