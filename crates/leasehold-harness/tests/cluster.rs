//! Tests of `Cluster` against every server of the matrix.

use std::path::Path;
use std::time::{Duration, Instant};

use leasehold_harness::{
    CLUSTER_SLOTS, Cluster, ClusterOptions, HarnessError, RespValue, Server, ServerOptions,
    TlsFiles,
};

fn bulk(s: &str) -> RespValue {
    RespValue::Bulk(Some(s.as_bytes().to_vec()))
}

fn proc_exists(pid: u32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
}

fn cluster_info(node: &Server) -> String {
    node.command(&["CLUSTER", "INFO"])
        .unwrap()
        .as_str()
        .unwrap()
        .to_owned()
}

/// The error text of a reply that must be an error.
fn error_text(reply: RespValue) -> String {
    match reply {
        RespValue::Error(e) => e,
        other => panic!("expected an error reply, got {other}"),
    }
}

/// Writes `key` on its master and waits until one replica has it (WAIT on the same
/// connection).
fn set_replicated(cluster: &Cluster, key: &str, value: &str) {
    let master = cluster.master_for_key(key).unwrap();
    let replies = master
        .commands(&[&["SET", key, value], &["WAIT", "1", "10000"]])
        .unwrap();
    assert_eq!(
        replies,
        [RespValue::Simple("OK".into()), RespValue::Integer(1)]
    );
}

leasehold_harness::server_test!(async fn cluster_starts_and_serves(bin) {
    let started = Instant::now();
    let cluster = Cluster::start(&bin, &ClusterOptions::new()).unwrap();
    eprintln!("{}: 3+3 cluster started in {:?}", bin.label(), started.elapsed());

    assert_eq!(cluster.len(), 6);
    assert_eq!(cluster.master_indices().unwrap(), [0, 1, 2]);
    assert_eq!(cluster.masters().unwrap().len(), 3);
    for m in 0..3 {
        assert_eq!(cluster.replicas_of(m).unwrap(), [3 + m]);
        assert!(cluster.is_master(m).unwrap());
        assert!(!cluster.is_master(3 + m).unwrap());
    }
    let urls = cluster.urls();
    assert_eq!(urls.len(), 3);
    assert_eq!(cluster.url(), urls[0]);
    assert_eq!(urls[1], format!("redis://127.0.0.1:{}/", cluster.node(1).unwrap().port()));

    for node in cluster.nodes() {
        let info = cluster_info(node);
        assert!(info.contains("cluster_state:ok"), "{info}");
        assert!(info.contains("cluster_slots_assigned:16384"), "{info}");
        assert!(info.contains("cluster_known_nodes:6"), "{info}");
        let timeout = node.command(&["CONFIG", "GET", "cluster-node-timeout"]).unwrap();
        assert_eq!(timeout, RespValue::Array(Some(vec![bulk("cluster-node-timeout"), bulk("2000")])));
    }

    // The server's own hash function; "foo" is the example of the cluster specification.
    assert_eq!(cluster.keyslot("foo").unwrap(), 12182);
    assert_eq!(cluster.keyslot("{user1000}.following").unwrap(), cluster.keyslot("user1000").unwrap());
    // Even split: 16384 / 3.
    assert_eq!(cluster.master_index_for_slot(0).unwrap(), 0);
    assert_eq!(cluster.master_index_for_slot(5461).unwrap(), 1);
    assert_eq!(cluster.master_index_for_slot(CLUSTER_SLOTS - 1).unwrap(), 2);
    assert_eq!(cluster.master_index_for_key("foo").unwrap(), 2);

    // The owner accepts the key, another master redirects, the replica has it.
    set_replicated(&cluster, "foo", "bar");
    let owner = cluster.master_for_key("foo").unwrap();
    assert_eq!(owner.command(&["GET", "foo"]).unwrap(), bulk("bar"));
    let moved = error_text(cluster.node(0).unwrap().command(&["GET", "foo"]).unwrap());
    assert_eq!(moved, format!("MOVED 12182 127.0.0.1:{}", owner.port()));
    let replica = cluster.node(5).unwrap();
    let replies = replica.commands(&[&["READONLY"], &["GET", "foo"]]).unwrap();
    assert_eq!(replies[1], bulk("bar"));

    // A paused node is not live: the rest is still stable, and after resuming, all of it.
    cluster.node(4).unwrap().pause().unwrap();
    assert!(cluster.node(4).unwrap().is_paused());
    cluster.wait_until_stable().unwrap();
    assert_eq!(cluster.replicas_of(1).unwrap(), Vec::<usize>::new());
    cluster.node(4).unwrap().resume().unwrap();
    cluster.wait_until_stable().unwrap();
    assert_eq!(cluster.replicas_of(1).unwrap(), [4]);

    // Bad input is an error, not a panic.
    assert!(matches!(cluster.node(6), Err(HarnessError::InvalidArgument(_))));
    assert!(matches!(cluster.master_index_for_slot(CLUSTER_SLOTS), Err(HarnessError::InvalidArgument(_))));
    assert!(matches!(cluster.replicas_of(99), Err(HarnessError::InvalidArgument(_))));
    assert!(matches!(cluster.begin_migration(0, 0, 0), Err(HarnessError::InvalidArgument(_))));
    assert!(matches!(cluster.begin_migration(0, 1, 2), Err(HarnessError::InvalidArgument(_))), "node 1 does not own slot 0");
    assert!(matches!(cluster.begin_migration(0, 0, 3), Err(HarnessError::InvalidArgument(_))), "node 3 is a replica");
    let pids: Vec<u32> = cluster.nodes().iter().map(|n| n.pid().unwrap()).collect();
    drop(cluster);
    for pid in pids {
        assert!(!proc_exists(pid), "dropping the cluster kills node pid {pid}");
    }
});

leasehold_harness::server_test!(async fn kill_master_and_promote(bin) {
    let mut cluster = Cluster::start(&bin, &ClusterOptions::new()).unwrap();
    set_replicated(&cluster, "foo", "survives");
    let old = cluster.master_index_for_key("foo").unwrap();
    let replica = cluster.replicas_of(old).unwrap()[0];

    // Not a master: refused before anything is killed.
    assert!(matches!(cluster.kill_master_and_promote(replica), Err(HarnessError::InvalidArgument(_))));

    let new = cluster.kill_master_and_promote(old).unwrap();
    assert_eq!(new, replica);
    assert_eq!(cluster.node(old).unwrap().pid(), None);
    assert_eq!(cluster.master_index_for_key("foo").unwrap(), new);
    let masters = cluster.master_indices().unwrap();
    assert!(masters.contains(&new) && !masters.contains(&old), "{masters:?}");
    assert!(cluster.is_master(new).unwrap());
    assert_eq!(cluster.node(new).unwrap().command(&["GET", "foo"]).unwrap(), bulk("survives"));
    for node in cluster.nodes().iter().filter(|n| n.pid().is_some()) {
        assert!(cluster_info(node).contains("cluster_state:ok"));
    }
    // The seeds skip the killed node.
    assert!(!cluster.urls().contains(&cluster.node(old).unwrap().url()));

    // The old master comes back as a replica of the new one.
    cluster.node_mut(old).unwrap().restart().unwrap();
    cluster.wait_until_stable().unwrap();
    assert_eq!(cluster.replicas_of(new).unwrap(), [old]);
    assert!(!cluster.is_master(old).unwrap());
});

leasehold_harness::server_test!(async fn graceful_failover(bin) {
    let mut cluster = Cluster::start(&bin, &ClusterOptions::new()).unwrap();
    set_replicated(&cluster, "foo", "kept");
    let master = cluster.master_index_for_key("foo").unwrap();
    let replica = cluster.replicas_of(master).unwrap()[0];

    assert!(matches!(cluster.failover(master), Err(HarnessError::InvalidArgument(_))), "not a replica");
    assert_eq!(cluster.failover(replica).unwrap(), master);
    assert_eq!(cluster.master_index_for_key("foo").unwrap(), replica);
    assert_eq!(cluster.replicas_of(replica).unwrap(), [master]);
    assert!(cluster.is_master(replica).unwrap());
    assert!(!cluster.is_master(master).unwrap());
    assert_eq!(cluster.node(replica).unwrap().command(&["GET", "foo"]).unwrap(), bulk("kept"));
});

leasehold_harness::server_test!(async fn slot_migration_in_steps(bin) {
    let cluster = Cluster::start(&bin, &ClusterOptions::new()).unwrap();
    let slot = cluster.keyslot("{mig}").unwrap();
    let from = cluster.master_index_for_slot(slot).unwrap();
    let to = (from + 1) % 3;
    let (src, dst) = (cluster.node(from).unwrap(), cluster.node(to).unwrap());
    for key in ["{mig}a", "{mig}b", "{mig}c"] {
        assert!(src.command(&["SET", key, key]).unwrap().is_ok());
    }
    assert!(src.command(&["SET", "{mig}ttl", "x", "PX", "600000"]).unwrap().is_ok());

    cluster.begin_migration(slot, from, to).unwrap();
    // Keys still on the source are served there; missing ones are redirected with ASK.
    assert_eq!(src.command(&["GET", "{mig}a"]).unwrap(), bulk("{mig}a"));
    let ask = error_text(src.command(&["GET", "{mig}missing"]).unwrap());
    assert_eq!(ask, format!("ASK {slot} 127.0.0.1:{}", dst.port()));

    assert_eq!(cluster.migrate_keys(slot, from, to).unwrap(), 4);
    assert_eq!(cluster.migrate_keys(slot, from, to).unwrap(), 0, "nothing left");
    let ask = error_text(src.command(&["GET", "{mig}a"]).unwrap());
    assert!(ask.starts_with("ASK "), "{ask}");
    let replies = dst.commands(&[&["ASKING"], &["GET", "{mig}a"]]).unwrap();
    assert_eq!(replies[1], bulk("{mig}a"));
    // The TTL moved along.
    let replies = dst.commands(&[&["ASKING"], &["PTTL", "{mig}ttl"]]).unwrap();
    assert!(replies[1].as_integer().unwrap() > 0, "{}", replies[1]);
    // The target does not own the slot yet.
    let moved = error_text(dst.command(&["GET", "{mig}a"]).unwrap());
    assert!(moved.starts_with("MOVED "), "{moved}");

    cluster.finish_migration(slot, to).unwrap();
    assert_eq!(cluster.master_index_for_slot(slot).unwrap(), to);
    assert_eq!(dst.command(&["GET", "{mig}b"]).unwrap(), bulk("{mig}b"));
    let moved = error_text(src.command(&["GET", "{mig}b"]).unwrap());
    assert_eq!(moved, format!("MOVED {slot} 127.0.0.1:{}", dst.port()));
    for node in cluster.nodes() {
        let reply = node.command(&["CLUSTER", "NODES"]).unwrap();
        assert!(!reply.as_str().unwrap().contains('['), "no open slots: {reply}");
    }

    // The one-call variant moves it back.
    assert_eq!(cluster.migrate_slot(slot, to, from).unwrap(), 4);
    assert_eq!(cluster.master_index_for_slot(slot).unwrap(), from);
    assert_eq!(src.command(&["GET", "{mig}c"]).unwrap(), bulk("{mig}c"));

    // finish_migration refuses to abandon keys.
    cluster.begin_migration(slot, from, to).unwrap();
    assert!(matches!(cluster.finish_migration(slot, to), Err(HarnessError::InvalidArgument(_))));
    assert_eq!(cluster.master_index_for_slot(slot).unwrap(), from);
});

leasehold_harness::server_test!(async fn password_protected_cluster(bin) {
    let tls = TlsFiles::temporary().unwrap();
    let options = ClusterOptions::new()
        .masters(3)
        .replicas_per_master(1)
        .node_timeout(Duration::from_millis(3000))
        .server(ServerOptions::new().requirepass("cluster pass").tls(&tls));
    let mut cluster = Cluster::start(&bin, &options).unwrap();
    // Every node also listens with TLS.
    for node in cluster.nodes() {
        let port = node.tls_port().unwrap();
        assert_eq!(node.tls_url(), Some(format!("rediss://127.0.0.1:{port}/")));
    }
    let timeout = cluster.node(0).unwrap().command(&["CONFIG", "GET", "cluster-node-timeout"]).unwrap();
    assert_eq!(timeout, RespValue::Array(Some(vec![bulk("cluster-node-timeout"), bulk("3000")])));
    // Replicas authenticated to their masters (wait_until_stable checked the links).
    set_replicated(&cluster, "{pw}k", "v");

    // MIGRATE authenticates to the target.
    let slot = cluster.keyslot("{pw}k").unwrap();
    let from = cluster.master_index_for_slot(slot).unwrap();
    let to = (from + 1) % 3;
    assert_eq!(cluster.migrate_slot(slot, from, to).unwrap(), 1);
    assert_eq!(cluster.node(to).unwrap().command(&["GET", "{pw}k"]).unwrap(), bulk("v"));

    // A promoted replica needs --masterauth too once the old master returns as its replica.
    let new = cluster.kill_master_and_promote(to).unwrap();
    cluster.node_mut(to).unwrap().restart().unwrap();
    cluster.wait_until_stable().unwrap();
    assert_eq!(cluster.replicas_of(new).unwrap(), [to]);
});

leasehold_harness::server_test!(async fn small_clusters_and_bad_options(bin) {
    let err = Cluster::start(&bin, &ClusterOptions::new().masters(0)).unwrap_err();
    assert!(matches!(err, HarnessError::InvalidArgument(_)), "{err}");

    let cluster = Cluster::start(&bin, &ClusterOptions::new().masters(1).replicas_per_master(0)).unwrap();
    assert_eq!(cluster.len(), 1);
    assert_eq!(cluster.master_index_for_slot(CLUSTER_SLOTS - 1).unwrap(), 0);
    assert_eq!(cluster.replicas_of(0).unwrap(), Vec::<usize>::new());
    let mut cluster = cluster;
    let err = cluster.kill_master_and_promote(0).unwrap_err();
    assert!(matches!(err, HarnessError::InvalidArgument(_)), "{err}");
    assert!(cluster.node_mut(0).unwrap().is_running(), "refused before killing");

    let cluster = Cluster::start(&bin, &ClusterOptions::new().masters(2).replicas_per_master(2)).unwrap();
    assert_eq!(cluster.len(), 6);
    assert_eq!(cluster.replicas_of(0).unwrap(), [2, 3]);
    assert_eq!(cluster.replicas_of(1).unwrap(), [4, 5]);
    assert_eq!(cluster.master_index_for_slot(8191).unwrap(), 0);
    assert_eq!(cluster.master_index_for_slot(8192).unwrap(), 1);
});
