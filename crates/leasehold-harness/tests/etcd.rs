//! Tests of [`Etcd`] and [`EtcdCluster`]: real etcd members from the system's packages.
//!
//! Without etcd installed they skip (printing `skipping: ...`), unless
//! `LEASEHOLD_REQUIRE_MATRIX=1` (or `CI`) is set: then they fail.

use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::thread;
use std::time::{Duration, Instant};

use leasehold_harness::{
    DEFAULT_ETCD_MEMBERS, EtcdCluster, HarnessError, etcd_cluster_for_test, etcd_for_test,
};

/// Bound of the polls below (elections take about a second; 2-core machines are slow).
const WAIT: Duration = Duration::from_secs(30);

fn port_is_closed(port: u16) -> bool {
    TcpStream::connect_timeout(
        &SocketAddr::from(([127, 0, 0, 1], port)),
        Duration::from_secs(2),
    )
    .is_err()
}

fn proc_exists(pid: u32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
}

/// Polls `f` every 20 ms until it gives `Some`, at most [`WAIT`].
fn wait_for<T>(what: &str, cluster: &EtcdCluster, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + WAIT;
    loop {
        if let Some(value) = f() {
            return value;
        }
        assert!(
            Instant::now() < deadline,
            "{what}: not within {WAIT:?}\n{}",
            cluster.describe()
        );
        thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn single_member_starts_serves_and_cleans_up() {
    let started = Instant::now();
    let Some(mut etcd) = etcd_for_test() else {
        return;
    };
    eprintln!("one member serving after {:?}", started.elapsed());
    let port = etcd.port();
    let peer_port = etcd.peer_port();
    let dir = etcd.dir().to_path_buf();
    assert_eq!(etcd.endpoint(), format!("http://127.0.0.1:{port}"));
    assert_ne!(port, peer_port);
    assert!(etcd.is_running());
    assert!(etcd.is_live());
    assert!(etcd.data_dir().join("member").is_dir());
    assert!(etcd.health().unwrap());

    let status = etcd.status().unwrap();
    assert!(
        status.is_leader(),
        "a single member leads itself: {status:?}"
    );
    assert!(status.version.starts_with("3."), "{status:?}");
    eprintln!("etcd version {}", status.version);

    assert_eq!(etcd.get("missing").unwrap(), None);
    etcd.put("lock/a", "token-1").unwrap();
    assert_eq!(
        etcd.get("lock/a").unwrap().as_deref(),
        Some(&b"token-1"[..])
    );
    etcd.put("lock/a", "token-2").unwrap();
    assert_eq!(
        etcd.get("lock/a").unwrap().as_deref(),
        Some(&b"token-2"[..])
    );
    // Arbitrary bytes, and the empty value (which the gateway leaves out of its JSON).
    let key = [0u8, 0xff, b'/', 0x80];
    let value: Vec<u8> = (0..=255).collect();
    etcd.put(key, &value).unwrap();
    assert_eq!(etcd.get(key).unwrap(), Some(value));
    etcd.put("empty", "").unwrap();
    assert_eq!(etcd.get("empty").unwrap(), Some(Vec::new()));

    // The process is our child.
    let pid = etcd.pid().expect("running");
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let ppid = status
        .lines()
        .find_map(|l| l.strip_prefix("PPid:"))
        .unwrap();
    assert_eq!(ppid.trim(), std::process::id().to_string(), "not our child");

    drop(etcd);
    assert!(port_is_closed(port), "client port {port} open after drop");
    assert!(
        port_is_closed(peer_port),
        "peer port {peer_port} open after drop"
    );
    assert!(!proc_exists(pid), "etcd {pid} still there after drop");
    assert!(!dir.exists(), "{} still exists after drop", dir.display());
}

#[test]
fn kill_and_stop_then_restart_keep_the_data() {
    let Some(mut etcd) = etcd_for_test() else {
        return;
    };
    let port = etcd.port();
    let endpoint = etcd.endpoint();
    let id = etcd.status().unwrap().member_id;
    etcd.put("k", "before the crash").unwrap();

    let pid = etcd.pid().expect("running");
    etcd.kill();
    assert!(!etcd.is_running());
    assert_eq!(etcd.pid(), None);
    assert!(!proc_exists(pid), "etcd {pid} still there after kill");
    assert!(port_is_closed(port));
    assert!(matches!(etcd.get("k"), Err(HarnessError::NotRunning)));
    assert!(matches!(etcd.pause(), Err(HarnessError::NotRunning)));
    etcd.kill(); // idempotent

    let started = Instant::now();
    etcd.restart().unwrap();
    eprintln!("restarted after a crash in {:?}", started.elapsed());
    assert_eq!(etcd.port(), port);
    assert_eq!(etcd.endpoint(), endpoint);
    assert_ne!(etcd.pid(), Some(pid));
    assert_eq!(
        etcd.status().unwrap().member_id,
        id,
        "same data dir, same member"
    );
    assert_eq!(
        etcd.get("k").unwrap().as_deref(),
        Some(&b"before the crash"[..])
    );

    etcd.put("k2", "before the stop").unwrap();
    etcd.stop();
    assert!(!etcd.is_running());
    assert!(
        etcd.log_tail(200).contains("closed etcd server"),
        "graceful stop: {}",
        etcd.log_tail(20)
    );
    etcd.restart().unwrap();
    assert_eq!(
        etcd.get("k2").unwrap().as_deref(),
        Some(&b"before the stop"[..])
    );
}

#[test]
fn pause_and_resume_a_single_member() {
    let Some(etcd) = etcd_for_test() else {
        return;
    };
    etcd.put("k", "v").unwrap();
    etcd.pause().unwrap();
    assert!(etcd.is_paused());
    assert!(!etcd.is_live());
    // The process stops (state T; SIGSTOP is delivered asynchronously, so poll a moment).
    let pid = etcd.pid().unwrap();
    let state = || {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
        let after_name = stat.rsplit_once(')').unwrap().1.to_owned();
        after_name.split_whitespace().next().unwrap().to_owned()
    };
    let deadline = Instant::now() + Duration::from_secs(5);
    while state() != "T" {
        assert!(Instant::now() < deadline, "not stopped: state {}", state());
        thread::sleep(Duration::from_millis(10));
    }
    etcd.resume().unwrap();
    assert!(!etcd.is_paused());
    assert_eq!(etcd.get("k").unwrap().as_deref(), Some(&b"v"[..]));
}

#[test]
fn cluster_starts_with_one_leader_and_replicates() {
    let started = Instant::now();
    let Some(cluster) = etcd_cluster_for_test(DEFAULT_ETCD_MEMBERS) else {
        return;
    };
    eprintln!(
        "{DEFAULT_ETCD_MEMBERS}-member cluster serving after {:?}",
        started.elapsed()
    );
    assert_eq!(cluster.len(), 3);
    let endpoints = cluster.endpoints();
    assert_eq!(endpoints.len(), 3);
    for (i, e) in endpoints.iter().enumerate() {
        assert_eq!(e, &cluster.member(i).unwrap().endpoint());
        assert_eq!(cluster.member(i).unwrap().name(), format!("n{i}"));
    }
    let mut sorted = endpoints.clone();
    sorted.sort();
    sorted.dedup();
    assert_eq!(sorted.len(), 3, "distinct endpoints: {endpoints:?}");
    assert!(matches!(
        cluster.member(3),
        Err(HarnessError::InvalidArgument(_))
    ));

    let leader = cluster.wait_until_healthy().unwrap();
    assert_eq!(cluster.leader_index(), Some(leader));
    // Exactly one member takes itself for the leader, and all name the same one; all have
    // distinct ids.
    let statuses: Vec<_> = cluster
        .members()
        .iter()
        .map(|m| m.status().unwrap())
        .collect();
    assert_eq!(
        statuses.iter().filter(|s| s.is_leader()).count(),
        1,
        "{statuses:?}"
    );
    assert!(statuses[leader].is_leader());
    let leader_id = statuses[leader].member_id;
    assert!(
        statuses.iter().all(|s| s.leader == Some(leader_id)),
        "{statuses:?}"
    );
    let mut ids: Vec<u64> = statuses.iter().map(|s| s.member_id).collect();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), 3);

    // Written through one member, read (linearizably) through each other.
    let writer = (leader + 1) % 3;
    cluster
        .member(writer)
        .unwrap()
        .put("lock/x", "owner-1")
        .unwrap();
    for i in 0..3 {
        assert_eq!(
            cluster.member(i).unwrap().get("lock/x").unwrap().as_deref(),
            Some(&b"owner-1"[..]),
            "member {i}"
        );
    }
}

#[test]
fn killing_the_leader_elects_another() {
    let Some(mut cluster) = etcd_cluster_for_test(DEFAULT_ETCD_MEMBERS) else {
        return;
    };
    let old = cluster.wait_until_healthy().unwrap();
    cluster.member(old).unwrap().put("k", "v1").unwrap();

    let killed = Instant::now();
    cluster.member_mut(old).unwrap().kill();
    let new = wait_for("a new leader", &cluster, || cluster.leader_index());
    eprintln!("new leader {new} (was {old}) after {:?}", killed.elapsed());
    assert_ne!(new, old);
    assert!(!cluster.member_mut(old).unwrap().is_running());

    // The two survivors are a quorum: writes go on, and the old data is there.
    let other = (0..3).find(|&i| i != old && i != new).unwrap();
    assert_eq!(
        cluster.member(other).unwrap().get("k").unwrap().as_deref(),
        Some(&b"v1"[..])
    );
    cluster.member(other).unwrap().put("k", "v2").unwrap();

    // The old leader comes back as a follower with its data dir and catches up.
    let restarted = Instant::now();
    cluster.member_mut(old).unwrap().restart().unwrap();
    eprintln!("old leader rejoined in {:?}", restarted.elapsed());
    let leader = cluster.wait_until_healthy().unwrap();
    assert_eq!(
        cluster.member(old).unwrap().get("k").unwrap().as_deref(),
        Some(&b"v2"[..])
    );
    assert!(
        cluster
            .member(leader)
            .unwrap()
            .status()
            .unwrap()
            .is_leader()
    );
}

#[test]
fn pausing_members_of_a_cluster() {
    let Some(cluster) = etcd_cluster_for_test(DEFAULT_ETCD_MEMBERS) else {
        return;
    };
    let leader = cluster.wait_until_healthy().unwrap();

    // A paused follower: the other two are a quorum, nothing changes for them.
    let follower = (leader + 1) % 3;
    cluster.member(follower).unwrap().pause().unwrap();
    assert!(cluster.member(follower).unwrap().is_paused());
    cluster
        .member(leader)
        .unwrap()
        .put("k", "while paused")
        .unwrap();
    assert_eq!(cluster.leader_index(), Some(leader));
    cluster.member(follower).unwrap().resume().unwrap();
    // After resuming it catches up (a linearizable read through it sees the write).
    assert_eq!(
        cluster
            .member(follower)
            .unwrap()
            .get("k")
            .unwrap()
            .as_deref(),
        Some(&b"while paused"[..])
    );

    // A paused leader: the others elect a new one (leader_index skips paused members).
    let paused = Instant::now();
    cluster.member(leader).unwrap().pause().unwrap();
    let new = wait_for("a leader other than the paused one", &cluster, || {
        cluster.leader_index()
    });
    eprintln!(
        "new leader {new} (leader {leader} paused) after {:?}",
        paused.elapsed()
    );
    assert_ne!(new, leader);
    cluster.member(new).unwrap().put("k", "new leader").unwrap();

    // Resumed, the old leader learns the newer term and follows; one leader again.
    cluster.member(leader).unwrap().resume().unwrap();
    let now = cluster.wait_until_healthy().unwrap();
    let statuses: Vec<_> = cluster
        .members()
        .iter()
        .map(|m| m.status().unwrap())
        .collect();
    assert_eq!(
        statuses.iter().filter(|s| s.is_leader()).count(),
        1,
        "{statuses:?}"
    );
    assert!(statuses[now].is_leader());
    assert_eq!(
        cluster.member(leader).unwrap().get("k").unwrap().as_deref(),
        Some(&b"new leader"[..])
    );
}

#[test]
fn cluster_size_is_checked() {
    if leasehold_harness::find_etcd().is_none() {
        return;
    }
    assert!(matches!(
        EtcdCluster::start(0),
        Err(HarnessError::InvalidArgument(_))
    ));
}
