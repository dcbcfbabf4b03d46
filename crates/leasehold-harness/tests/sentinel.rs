//! Tests of `SentinelSet` against every server of the matrix.

use std::path::Path;
use std::time::{Duration, Instant};

use leasehold_harness::{
    DEFAULT_MASTER_NAME, HarnessError, RespValue, SentinelOptions, SentinelSet, Server,
    ServerOptions,
};

fn bulk(s: &str) -> RespValue {
    RespValue::Bulk(Some(s.as_bytes().to_vec()))
}

fn proc_exists(pid: u32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
}

fn role(node: &Server) -> String {
    let info = node.info("replication").unwrap();
    info.lines()
        .find_map(|l| l.trim().strip_prefix("role:"))
        .unwrap()
        .to_owned()
}

/// One field of `SENTINEL MASTER <name>` on `sentinel`.
fn master_field(sentinel: &Server, name: &str, field: &str) -> String {
    let reply = sentinel.command(&["SENTINEL", "MASTER", name]).unwrap();
    let items = reply.as_array().unwrap();
    items
        .chunks(2)
        .find(|kv| kv[0].as_str() == Some(field))
        .and_then(|kv| kv[1].as_str())
        .unwrap_or_else(|| panic!("no {field} in {reply}"))
        .to_owned()
}

/// SET on the primary, acknowledged by `replicas` replicas (WAIT on the same connection).
fn set_replicated(primary: &Server, key: &str, value: &str, replicas: usize) {
    let n = replicas.to_string();
    let replies = primary
        .commands(&[&["SET", key, value], &["WAIT", &n, "10000"]])
        .unwrap();
    assert_eq!(
        replies,
        [
            RespValue::Simple("OK".into()),
            RespValue::Integer(replicas as i64)
        ]
    );
}

leasehold_harness::server_test!(async fn sentinel_set_starts(bin) {
    let started = Instant::now();
    let set = SentinelSet::start(&bin, &SentinelOptions::new()).unwrap();
    eprintln!("{}: 1+1 data nodes with 3 sentinels started in {:?}", bin.label(), started.elapsed());

    assert_eq!(set.master_name(), DEFAULT_MASTER_NAME);
    assert_eq!(set.data_nodes().len(), 2);
    assert_eq!(set.sentinels().len(), 3);
    let urls = set.sentinel_urls();
    let addrs = set.sentinel_addrs();
    assert_eq!(urls.len(), 3);
    for (i, (url, addr)) in urls.iter().zip(&addrs).enumerate() {
        let sentinel = set.sentinel(i).unwrap();
        assert_eq!(url, &format!("redis://127.0.0.1:{}/", addr.port()));
        assert_eq!(url, &sentinel.url());
        let info = sentinel.info("server").unwrap();
        assert!(info.contains("redis_mode:sentinel") || info.contains("server_mode:sentinel"), "{info}");
        assert_eq!(master_field(sentinel, "leasehold", "num-other-sentinels"), "2");
        assert_eq!(master_field(sentinel, "leasehold", "num-slaves"), "1");
        assert_eq!(master_field(sentinel, "leasehold", "quorum"), "2");
        assert_eq!(master_field(sentinel, "leasehold", "down-after-milliseconds"), "1000");
        // Sentinel rewrote its own configuration file.
        let conf = std::fs::read_to_string(sentinel.dir().join("sentinel.conf")).unwrap();
        assert!(conf.contains("sentinel myid"), "{conf}");
    }
    let primary = set.primary().unwrap();
    assert_eq!(primary.port(), set.data_nodes()[0].port());
    assert_eq!(set.primary_addr().unwrap(), primary.addr());
    assert_eq!(set.primary_index().unwrap(), 0);
    assert_eq!(role(primary), "master");
    assert_eq!(role(&set.data_nodes()[1]), "slave");

    assert!(matches!(set.sentinel(3), Err(HarnessError::InvalidArgument(_))));
    assert!(matches!(set.data_node(2), Err(HarnessError::InvalidArgument(_))));

    let pids: Vec<u32> = set
        .sentinels()
        .iter()
        .chain(set.data_nodes())
        .map(|s| s.pid().unwrap())
        .collect();
    drop(set);
    for pid in pids {
        assert!(!proc_exists(pid), "dropping the set kills pid {pid}");
    }
});

leasehold_harness::server_test!(async fn forced_failover_and_back(bin) {
    let set = SentinelSet::start(&bin, &SentinelOptions::new()).unwrap();
    set_replicated(set.primary().unwrap(), "k", "before", 1);

    let started = Instant::now();
    let new = set.failover().unwrap();
    eprintln!("{}: SENTINEL FAILOVER completed in {:?}", bin.label(), started.elapsed());
    assert_eq!(new, set.data_nodes()[1].addr());
    assert_eq!(set.primary_addr().unwrap(), new);
    for i in 0..3 {
        let reply = set.sentinel(i).unwrap().command(&["SENTINEL", "GET-MASTER-ADDR-BY-NAME", "leasehold"]).unwrap();
        assert_eq!(reply, RespValue::Array(Some(vec![bulk("127.0.0.1"), bulk(&new.port().to_string())])));
    }
    let primary = set.primary().unwrap();
    assert_eq!(role(primary), "master");
    assert_eq!(primary.command(&["GET", "k"]).unwrap(), bulk("before"));
    // The old primary was demoted and follows the new one.
    let old = &set.data_nodes()[0];
    assert_eq!(role(old), "slave");
    assert!(old.command(&["SET", "x", "1"]).unwrap().is_error(), "read-only replica");
    set_replicated(primary, "k", "after", 1);
    assert_eq!(old.command(&["GET", "k"]).unwrap(), bulk("after"));

    // And back again.
    set.wait_until_ready().unwrap();
    assert_eq!(set.failover().unwrap(), set.data_nodes()[0].addr());
    assert_eq!(set.primary_index().unwrap(), 0);
});

leasehold_harness::server_test!(async fn kill_primary_and_wait(bin) {
    let mut set = SentinelSet::start(&bin, &SentinelOptions::new()).unwrap();
    set_replicated(set.primary().unwrap(), "k", "v", 1);
    let old_pid = set.primary().unwrap().pid().unwrap();

    let started = Instant::now();
    let new = set.kill_primary_and_wait().unwrap();
    eprintln!("{}: automatic failover after SIGKILL took {:?}", bin.label(), started.elapsed());
    assert!(!proc_exists(old_pid));
    assert_eq!(new, set.data_nodes()[1].addr());
    assert_eq!(set.primary_index().unwrap(), 1);
    assert_eq!(role(set.primary().unwrap()), "master");
    assert_eq!(set.primary().unwrap().command(&["GET", "k"]).unwrap(), bulk("v"));

    // No replica left to promote.
    assert!(matches!(set.kill_primary_and_wait(), Err(HarnessError::InvalidArgument(_))));
    assert!(matches!(set.failover(), Err(HarnessError::InvalidArgument(_))));

    // The old primary comes back and the sentinels make it a replica of the new one.
    set.data_node_mut(0).unwrap().restart().unwrap();
    set.wait_until_ready().unwrap();
    assert_eq!(role(&set.data_nodes()[0]), "slave");
    assert_eq!(set.primary_index().unwrap(), 1);
});

leasehold_harness::server_test!(async fn password_more_replicas_and_a_paused_sentinel(bin) {
    let options = SentinelOptions::new()
        .master_name("custom-name")
        .replicas(2)
        .sentinels(3)
        .quorum(2)
        .down_after(Duration::from_millis(800))
        .failover_timeout(Duration::from_secs(4))
        .server(ServerOptions::new().requirepass("sentinel pass"));
    let mut set = SentinelSet::start(&bin, &options).unwrap();
    assert_eq!(set.master_name(), "custom-name");
    assert_eq!(set.data_nodes().len(), 3);
    let s0 = set.sentinel(0).unwrap();
    assert_eq!(master_field(s0, "custom-name", "num-slaves"), "2");
    assert_eq!(master_field(s0, "custom-name", "failover-timeout"), "4000");
    set_replicated(set.primary().unwrap(), "k", "v", 2);

    // Two of three sentinels are enough to elect a leader and fail over.
    set.sentinel(2).unwrap().pause().unwrap();
    let new = set.kill_primary_and_wait().unwrap();
    assert_ne!(new, set.data_nodes()[0].addr());
    let primary = set.primary().unwrap();
    assert_eq!(primary.command(&["GET", "k"]).unwrap(), bulk("v"));
    // The remaining replica follows the new primary (it needs --masterauth for that).
    let replicas: Vec<&Server> = set.data_nodes().iter().filter(|n| n.pid().is_some() && n.addr() != new).collect();
    assert_eq!(replicas.len(), 1);
    assert_eq!(role(replicas[0]), "slave");
    set_replicated(primary, "k2", "v2", 1);

    // The paused sentinel catches up once resumed.
    set.sentinel(2).unwrap().resume().unwrap();
    set.wait_until_ready().unwrap();

    // A killed sentinel is skipped; restarted, it knows its peers again.
    set.sentinel_mut(0).unwrap().kill();
    assert_eq!(set.primary_addr().unwrap(), new);
    set.restart_sentinel(0).unwrap();
    set.wait_until_ready().unwrap();
    assert_eq!(set.primary_addr().unwrap(), new);
});

leasehold_harness::server_test!(async fn bad_sentinel_options(bin) {
    for options in [
        SentinelOptions::new().sentinels(0),
        SentinelOptions::new().quorum(4),
        SentinelOptions::new().master_name("two words"),
    ] {
        let err = SentinelSet::start(&bin, &options).unwrap_err();
        assert!(matches!(err, HarnessError::InvalidArgument(_)), "{err}");
    }
});
