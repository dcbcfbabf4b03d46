//! The CLI on a Redis Cluster (`--cluster` and `redis-cluster://`), over TLS (`--tls-ca-file`),
//! as an ACL user missing a right (exit 77), and on topology mismatches (exit 64).

use crate::support;

use leasehold_harness::{Cluster, ClusterOptions, Server, ServerOptions, TlsFiles, server_test};
use support::leasehold;

server_test!(async fn cluster_acquire_run_inspect_release(bin) {
    let cluster = Cluster::start(&bin, &ClusterOptions::new()).unwrap();
    let urls = cluster.urls();
    // --cluster with two seeds; the key's master may be the third node.
    let lh = |args: &[&str]| {
        let mut all = vec!["--cluster", "--url", urls[0].as_str(), "--url", urls[1].as_str()];
        all.extend(args);
        leasehold(&all)
    };
    let mut keys = Vec::new();
    for key in ["jobs:a", "a{}b", "}{x", "jobs:{z}"] {
        let acquired = lh(&["acquire", key, "--ttl", "30s", "--fencing", "--json"]).expect(0).json();
        assert_eq!(acquired["fencing_token"], 1, "{key}");
        let token = acquired["token"].as_str().unwrap().to_string();
        let owner = cluster.master_for_key(key).unwrap();
        let stored = owner.command(&["GET", key]).unwrap();
        assert_eq!(stored.as_bytes(), Some(token.as_bytes()), "{key}");
        let state = lh(&["inspect", key, "--json"]).expect(0).json();
        assert_eq!(state["token"], token.as_str());
        lh(&["extend", key, "--token", &token, "--ttl", "1m"]).expect(0);
        lh(&["release", key, "--token", &token]).expect(0);
        lh(&["release", key, "--token", &token]).expect(1);
        keys.push(key);
    }
    // `run` under a cluster lock, in the URL form; the command sees its key and fencing number.
    let hosts: Vec<String> = urls.iter().map(|u| u.trim_start_matches("redis://").trim_end_matches('/').to_string()).collect();
    let url = format!("redis-cluster://{}", hosts.join(","));
    let run = leasehold(&["--url", &url, "run", "jobs:run", "--fencing", "--", "sh", "-c", "echo $LEASEHOLD_KEY $LEASEHOLD_FENCING_TOKEN"]).expect(0);
    assert_eq!(run.stdout.trim(), "jobs:run 1");
    let state = leasehold(&["--url", &url, "inspect", "jobs:run", "--json"]).expect(0).json();
    assert_eq!(state["held"], false, "released after the command");
});

server_test!(async fn topology_mismatch_is_a_usage_error(bin) {
    let plain = Server::start(&bin, &ServerOptions::new()).unwrap();
    let run = leasehold(&["--cluster", "--url", &plain.url(), "acquire", "k", "--ttl", "30s"]).expect(64);
    assert!(run.stderr.contains("not a Redis Cluster node"), "{}", run.stderr);
    let cluster = Cluster::start(&bin, &ClusterOptions::new()).unwrap();
    let run = leasehold(&["--url", &cluster.url(), "acquire", "k", "--ttl", "30s"]).expect(64);
    assert!(run.stderr.contains("--cluster"), "{}", run.stderr);
    leasehold(&["--cluster", "--sentinel-master", "m", "acquire", "k", "--ttl", "30s"]).expect(64);
    let run = leasehold(&["--url", "zookeeper://127.0.0.1:2181", "acquire", "k", "--ttl", "30s"]).expect(64);
    assert!(run.stderr.contains("unknown scheme"), "{}", run.stderr);
});

server_test!(async fn tls_with_a_private_ca(bin) {
    let files = TlsFiles::temporary().unwrap();
    let server = Server::start(&bin, &ServerOptions::new().tls(&files)).unwrap();
    let url = server.tls_url().unwrap();
    let ca = files.ca_cert();
    let ca = ca.to_str().unwrap();
    let token = leasehold(&["--url", &url, "--tls-ca-file", ca, "acquire", "tls:k", "--ttl", "30s"]).expect(0).stdout;
    leasehold(&["--url", &url, "release", "tls:k", "--token", token.trim(), "--tls-ca-file", ca]).expect(0);
    // The system roots do not know the CA: unavailable (69), with the reason.
    let run = leasehold(&["--url", &url, "acquire", "tls:k", "--ttl", "30s"]).expect(69);
    assert!(run.stderr.to_lowercase().contains("certificate"), "{}", run.stderr);
    // A CA file that does not exist: usage (64).
    let run = leasehold(&["--url", &url, "--tls-ca-file", "/nonexistent/ca.pem", "acquire", "tls:k", "--ttl", "30s"]).expect(64);
    assert!(run.stderr.contains("TLS CA file"), "{}", run.stderr);
});

server_test!(async fn an_acl_user_missing_a_right_exits_77(bin) {
    let server = Server::start(&bin, &ServerOptions::new()).unwrap();
    server.acl_setuser("nosets", &["on", ">pw", "~*", "&*", "+@all", "-set"]).unwrap();
    let url = format!("redis://nosets:pw@127.0.0.1:{}/", server.port());
    let run = leasehold(&["--url", &url, "acquire", "k", "--ttl", "30s"]).expect(77);
    assert!(run.stderr.contains("permission denied"), "{}", run.stderr);
    let wrong = format!("redis://nosets:wrong@127.0.0.1:{}/", server.port());
    leasehold(&["--url", &wrong, "acquire", "k", "--ttl", "30s"]).expect(77);
});
