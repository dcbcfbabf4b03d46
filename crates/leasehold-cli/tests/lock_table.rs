//! `leasehold ls`, `leasehold force-release` and the owner flags of `acquire` and `run`, against
//! real servers.

use crate::support;

use leasehold_harness::{Cluster, ClusterOptions, Server, ServerOptions, server_test};

server_test!(async fn acquire_records_an_owner_that_inspect_and_ls_show(bin) {
    let server = Server::start(&bin, &ServerOptions::new()).unwrap();
    let url = server.url();
    let lh = |args: &[&str]| support::leasehold_at(&url, args);

    let token = lh(&["acquire", "t:owned", "--ttl", "1m", "--fencing", "--owner-label", "nightly report", "--json"])
        .expect(0)
        .json()["token"]
        .as_str()
        .unwrap()
        .to_string();
    let state = lh(&["inspect", "t:owned", "--json"]).expect(0).json();
    assert_eq!(state["owner"]["label"], "nightly report");
    assert_eq!(state["owner"]["program"], "leasehold");
    assert!(state["owner"]["pid"].as_u64().is_some());
    let text = lh(&["inspect", "t:owned"]).expect(0).stdout;
    assert!(text.contains("owner: leasehold["), "{text}");
    assert!(text.contains("\"nightly report\""), "{text}");

    // --no-owner: the bare token, no owner shown.
    lh(&["acquire", "t:bare", "--ttl", "1m", "--no-owner"]).expect(0);
    assert!(lh(&["inspect", "t:bare", "--json"]).expect(0).json()["owner"].is_null());
    // A label with a control character is a usage error, before any round trip.
    lh(&["acquire", "t:bad", "--ttl", "1m", "--owner-label", "a\u{1b}[31m"]).expect(64);

    // ls --json: one array, stable fields, the token never shown (its redacted name is).
    let listed = lh(&["ls", "--json"]).expect(0).json();
    let listed = listed.as_array().expect("an array");
    assert_eq!(listed.len(), 2, "{listed:?}");
    assert_eq!(listed[0]["key"], "t:bare");
    assert!(listed[0]["holders"][0]["owner"].is_null());
    let owned = &listed[1];
    assert_eq!(owned["key"], "t:owned");
    assert_eq!(owned["kind"], "lock");
    assert_eq!(owned["fencing_counter"], 1);
    assert!(owned["ttl_ms"].as_u64().is_some_and(|t| t > 0 && t <= 60_000));
    assert_eq!(owned["holders"][0]["owner"]["label"], "nightly report");
    let holder = owned["holders"][0]["holder"].as_str().unwrap();
    assert!(holder.starts_with('#') && !token.contains(&holder[1..]), "{holder}");
    assert!(!lh(&["ls", "--json"]).stdout.contains(&token[..32]));
    // The table, and the pattern.
    let table = lh(&["ls", "t:own*"]).expect(0).stdout;
    let lines: Vec<&str> = table.lines().collect();
    assert_eq!(lines.len(), 2, "{table}");
    assert!(lines[0].starts_with("KEY"), "{table}");
    assert!(lines[1].starts_with("t:owned") && lines[1].contains("nightly report"), "{table}");
});

server_test!(async fn run_fills_the_owner_by_default(bin) {
    let server = Server::start(&bin, &ServerOptions::new()).unwrap();
    let url = server.url();
    // The command itself reads the lock's owner through `inspect` while it holds it.
    let out = support::leasehold_at(
        &url,
        &["run", "t:run", "--", crate::BIN, "--url", &url, "inspect", "t:run", "--json"],
    )
    .expect(0);
    let state: serde_json::Value = serde_json::from_str(out.stdout.trim()).unwrap();
    assert_eq!(state["held"], true);
    assert_eq!(state["owner"]["label"], "leasehold");
    assert_eq!(state["owner"]["program"], "leasehold");
});

server_test!(async fn ls_on_a_cluster_lists_every_master(bin) {
    let cluster = Cluster::start(&bin, &ClusterOptions::new()).unwrap();
    let url = format!("redis-cluster://{}", cluster.nodes()[0].addr());
    let lh = |args: &[&str]| support::leasehold_at(&url, args);
    let keys: Vec<String> = (0..8).map(|i| format!("c:{i}")).collect();
    let masters: std::collections::BTreeSet<usize> =
        keys.iter().map(|k| cluster.master_index_for_key(k).unwrap()).collect();
    assert!(masters.len() >= 2, "{masters:?}");
    for key in &keys {
        lh(&["acquire", key, "--ttl", "1m"]).expect(0);
    }
    let listed = lh(&["ls", "c:*", "--json"]).expect(0).json();
    let got: Vec<&str> = listed.as_array().unwrap().iter().map(|e| e["key"].as_str().unwrap()).collect();
    assert_eq!(got, keys.iter().map(String::as_str).collect::<Vec<_>>());
});

server_test!(async fn ls_without_scan_rights_exits_77(bin) {
    let server = Server::start(&bin, &ServerOptions::new()).unwrap();
    server
        .acl_setuser("lister", &["on", ">pw", "~*", "&*", "+@all", "-scan"])
        .unwrap();
    let url = format!("redis://lister:pw@127.0.0.1:{}/", server.port());
    let out = support::leasehold_at(&url, &["ls"]).expect(77);
    assert!(out.stderr.contains("permission denied"), "{}", out.stderr);
    assert!(out.stdout.is_empty());
    server.acl_setuser("lister", &["+scan"]).unwrap();
    support::leasehold_at(&url, &["ls"]).expect(0);
});

server_test!(async fn force_release_removes_a_stuck_lock_and_refuses_other_keys(bin) {
    let server = Server::start(&bin, &ServerOptions::new()).unwrap();
    let url = server.url();
    let lh = |args: &[&str]| support::leasehold_at(&url, args);
    let acquired = lh(&["acquire", "t:stuck", "--ttl", "1m", "--fencing", "--json"]).expect(0).json();
    let token = acquired["token"].as_str().unwrap().to_string();
    let number = acquired["fencing_token"].as_u64().unwrap();

    let forced = lh(&["force-release", "t:stuck", "--reason", "stuck since the deploy", "--json"])
        .expect(0);
    assert!(forced.stderr.contains("force-released"), "{}", forced.stderr);
    let forced = forced.json();
    assert_eq!(forced["fencing_counter"], number + 1);
    assert_eq!(forced["reason"], "stuck since the deploy");
    assert_eq!(forced["previous_owner"]["program"], "leasehold");
    // The old holder is told it no longer holds the lock; the next one draws a higher number.
    lh(&["extend", "t:stuck", "--token", &token, "--ttl", "1m"]).expect(1);
    lh(&["release", "t:stuck", "--token", &token]).expect(1);
    let next = lh(&["acquire", "t:stuck", "--ttl", "1m", "--fencing", "--json"]).expect(0).json();
    assert_eq!(next["fencing_token"], number + 2);

    // Nobody holds it: 1. Not a lock: 64, and the key is left as it was.
    lh(&["force-release", "t:free", "--reason", "x"]).expect(1);
    server.command(&["HSET", "t:hash", "f", "v"]).unwrap();
    server.command(&["SET", "t:string", "hello"]).unwrap();
    let out = lh(&["force-release", "t:hash", "--reason", "x"]).expect(64);
    assert!(out.stderr.contains("not a leasehold lock"), "{}", out.stderr);
    lh(&["force-release", "t:string", "--reason", "x"]).expect(64);
    assert_eq!(
        server.command(&["HGET", "t:hash", "f"]).unwrap().as_bytes(),
        Some(&b"v"[..])
    );
    let string = server.command(&["GET", "t:string"]).unwrap();
    assert_eq!(string.as_bytes(), Some(&b"hello"[..]));
    let counter = server.command(&["EXISTS", &leasehold::redis::fence_key("t:string")]).unwrap();
    assert_eq!(counter.as_integer(), Some(0), "no counter written");
    // A reason is required.
    lh(&["force-release", "t:stuck"]).expect(64);
    lh(&["force-release", "t:stuck", "--reason", ""]).expect(64);
});

#[tokio::test]
async fn ls_on_a_backend_without_a_lock_table_is_a_usage_error() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("file://{}", dir.path().display());
    let out = support::leasehold_at(&url, &["ls"]).expect(64);
    assert!(out.stderr.contains("file"), "{}", out.stderr);
}
