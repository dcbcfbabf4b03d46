//! TLS (`rediss://`): every flavor started with a throwaway CA and server certificate made at
//! test time; the client trusts that CA through `ClientOptions::tls_ca_file`.

use std::time::Duration;

use leasehold::{Backoff, ClientOptions, Error, LockClient, LockOptions};
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
    let holder = LockClient::connect_with(&url, options.clone()).await.expect("connects over TLS");
    let waiter = LockClient::connect_with(&url, options).await.unwrap();
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
    let stats = holder.renewal_stats();
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
    let err = LockClient::connect_with(&server.tls_url().unwrap(), options).await.unwrap_err();
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
        let err = tokio::time::timeout(HANG_GUARD, LockClient::connect_with(&url, options.clone()))
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
    let err = LockClient::connect_with(&url, ClientOptions::new().tls_ca_file(&missing)).await.unwrap_err();
    assert!(matches!(err, Error::InvalidArgument { what: "TLS CA file", .. }), "{err:?}");
    let garbage = files.dir().join("garbage.pem");
    std::fs::write(&garbage, "this is not a certificate\n").unwrap();
    let err = LockClient::connect_with(&url, ClientOptions::new().tls_ca_file(&garbage)).await.unwrap_err();
    assert!(matches!(err, Error::InvalidArgument { what: "TLS CA file", .. }), "{err:?}");
    assert!(err.to_string().contains("no PEM certificate"), "{err}");
    // The server key is PEM, but not a certificate.
    let err = LockClient::connect_with(&url, ClientOptions::new().tls_ca_file(files.server_key())).await.unwrap_err();
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
    let client = LockClient::connect_with(&url, ClientOptions::new().tls_ca_file(files.ca_cert())).await.expect("connects over TLS");
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
