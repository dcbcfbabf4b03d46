//! The lock commands over the other backends (etcd, PostgreSQL), chosen by the URL's scheme,
//! and their exit statuses.

use crate::support;

use leasehold_harness::{Server, ServerOptions, etcd_for_test, postgres_for_test, server_test};
use support::{closed_port, leasehold};

#[test]
fn etcd_acquire_inspect_extend_release_and_run() {
    let Some(etcd) = etcd_for_test() else { return };
    let url = format!("etcd://{}", etcd.addr());
    let lh = |args: &[&str]| support::leasehold_at(&url, args);
    let acquired = lh(&[
        "acquire",
        "jobs:etcd",
        "--ttl",
        "30s",
        "--fencing",
        "--json",
    ])
    .expect(0)
    .json();
    let token = acquired["token"].as_str().unwrap().to_string();
    let fence = acquired["fencing_token"].as_u64().unwrap();
    assert!(fence > 0);

    // The lock outlived the command; another acquisition is busy (75).
    let state = lh(&["inspect", "jobs:etcd", "--json"]).expect(0).json();
    assert_eq!(state["held"], true);
    assert_eq!(state["token"], token.as_str());
    assert_eq!(state["fencing_token"], fence);
    lh(&["acquire", "jobs:etcd", "--ttl", "30s"]).expect(75);

    lh(&["extend", "jobs:etcd", "--token", &token, "--ttl", "1m"]).expect(0);
    lh(&["release", "jobs:etcd", "--token", &token]).expect(0);
    assert_eq!(
        lh(&["inspect", "jobs:etcd", "--json"]).expect(0).json()["held"],
        false
    );
    lh(&["release", "jobs:etcd", "--token", &token]).expect(1);
    lh(&["extend", "jobs:etcd", "--token", &token, "--ttl", "1m"]).expect(1);

    // run: the child gets the fencing number (etcd's revision, higher than before); the lock
    // is free afterwards and the child's status passes through.
    let out = lh(&[
        "run",
        "jobs:etcd",
        "--fencing",
        "--",
        "sh",
        "-c",
        "echo $LEASEHOLD_FENCING_TOKEN; exit 3",
    ])
    .expect(3);
    let n: u64 = out.stdout.trim().parse().expect("a fencing number");
    assert!(n > fence, "{n} after {fence}");
    assert_eq!(
        lh(&["inspect", "jobs:etcd", "--json"]).expect(0).json()["held"],
        false
    );
}

#[test]
fn postgres_runs_a_command_under_a_session_lock() {
    let Some(pg) = postgres_for_test() else {
        return;
    };
    let url = pg.url();
    let lh = |args: &[&str]| support::leasehold_at(&url, args);
    let out = lh(&[
        "run",
        "jobs:pg",
        "--fencing",
        "--",
        "sh",
        "-c",
        "echo $LEASEHOLD_FENCING_TOKEN; exit 4",
    ])
    .expect(4);
    assert_eq!(out.stdout.trim(), "1");
    let state = lh(&["inspect", "jobs:pg", "--json"]).expect(0).json();
    assert_eq!(state["held"], false);
    assert_eq!(state["fencing_token"], 1);

    // A session lock cannot outlive the command: acquire says so (usage, 64) and takes nothing.
    let refused = lh(&["acquire", "jobs:pg", "--ttl", "30s"]).expect(64);
    assert!(
        refused.stderr.contains("leasehold run"),
        "{}",
        refused.stderr
    );
    assert_eq!(
        lh(&["inspect", "jobs:pg", "--json"]).expect(0).json()["held"],
        false
    );
}

#[test]
fn unreachable_backends_are_69_and_unknown_schemes_64() {
    let closed = closed_port();
    let port = closed.port();
    for url in [
        format!("etcd://127.0.0.1:{port}"),
        format!("postgres://leasehold@127.0.0.1:{port}/postgres"),
    ] {
        let out = leasehold(&["--url", &url, "inspect", "k"]).expect(69);
        assert!(out.stderr.starts_with("leasehold: "), "{}", out.stderr);
    }
    let out = leasehold(&["--url", "zookeeper://127.0.0.1:2181", "inspect", "k"]).expect(64);
    assert!(
        out.stderr.contains("etcd") && out.stderr.contains("postgres"),
        "the message lists the schemes: {}",
        out.stderr
    );
    // A backend URL beside others, or with a Redis topology flag: usage.
    let etcd = format!("etcd://127.0.0.1:{port}");
    leasehold(&[
        "--url",
        &etcd,
        "--url",
        "redis://127.0.0.1:1/",
        "inspect",
        "k",
    ])
    .expect(64);
    leasehold(&["--url", &etcd, "--cluster", "inspect", "k"]).expect(64);
}

#[test]
fn a_wrong_postgres_password_is_77() {
    let Some(pg) = postgres_for_test() else {
        return;
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let (client, conn) = tokio_postgres::connect(&pg.url(), tokio_postgres::NoTls)
            .await
            .unwrap();
        tokio::spawn(conn);
        client
            .batch_execute("CREATE ROLE clerk LOGIN PASSWORD 'right'")
            .await
            .unwrap();
    });
    pg.require_password_for("clerk").unwrap();
    let url = format!("postgres://clerk:wrong@127.0.0.1:{}/postgres", pg.port());
    // The reload is asynchronous: observe it (trust lets anyone in until then).
    let start = std::time::Instant::now();
    loop {
        let out = leasehold(&["--url", &url, "inspect", "k"]);
        if out.code == 77 {
            assert!(
                !out.stderr.contains("wrong"),
                "the password is not shown: {}",
                out.stderr
            );
            break;
        }
        assert!(
            start.elapsed() < std::time::Duration::from_secs(30),
            "never refused: {out:?}"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

#[test]
fn a_wrong_etcd_password_is_77() {
    let Some(etcd) = etcd_for_test() else { return };
    etcd.enable_auth("rootpw").unwrap();
    let url = |password: &str| format!("etcd://root:{password}@{}", etcd.addr());
    let out = leasehold(&["--url", &url("wrong"), "inspect", "k"]).expect(77);
    assert!(
        !out.stderr.contains("wrong"),
        "the password is not shown: {}",
        out.stderr
    );
    // The right one gets in, and the lock commands work as that user.
    let acquired = leasehold(&[
        "--url",
        &url("rootpw"),
        "acquire",
        "k",
        "--ttl",
        "30s",
        "--json",
    ])
    .expect(0)
    .json();
    let token = acquired["token"].as_str().unwrap().to_string();
    leasehold(&["--url", &url("rootpw"), "release", "k", "--token", &token]).expect(0);
}

#[test]
fn postgres_lease_rows_outlive_the_command() {
    let Some(pg) = postgres_for_test() else {
        return;
    };
    let url = format!("{}?lock=lease", pg.url());
    let lh = |args: &[&str]| support::leasehold_at(&url, args);
    let acquired = lh(&["acquire", "jobs:row", "--ttl", "30s", "--fencing", "--json"])
        .expect(0)
        .json();
    let token = acquired["token"].as_str().unwrap().to_string();
    assert_eq!(acquired["fencing_token"], 1);
    let state = lh(&["inspect", "jobs:row", "--json"]).expect(0).json();
    assert_eq!(state["held"], true);
    assert_eq!(state["token"], token.as_str());
    assert!(state["ttl_ms"].as_u64().unwrap() <= 30_000);
    lh(&["acquire", "jobs:row", "--ttl", "30s"]).expect(75);
    lh(&["extend", "jobs:row", "--token", &token, "--ttl", "1m"]).expect(0);
    lh(&["release", "jobs:row", "--token", &token]).expect(0);
    lh(&["release", "jobs:row", "--token", &token]).expect(1);
    let bad = format!("{}?lock=forever", pg.url());
    leasehold(&["--url", &bad, "inspect", "k"]).expect(64);
}

// Capabilities: a primitive the URL's backend lacks (`Backend::has`; Redlock has only the
// plain lock) is a usage error (64) naming the flag, the backend and the backends that have it,
// before anything is taken; and nothing is left held behind.
server_test!(async fn primitives_a_backend_lacks_are_usage_errors(bin) {
    let nodes: Vec<Server> = (0..3)
        .map(|_| Server::start(&bin, &ServerOptions::new()).unwrap())
        .collect();
    let url = format!(
        "redlock://{}",
        nodes.iter().map(|n| n.addr().to_string()).collect::<Vec<_>>().join(",")
    );
    let lh = |args: &[&str]| support::leasehold_at(&url, args);
    for (args, flag) in [
        (&["run", "jobs:caps", "--permits", "2", "--", "true"][..], "--permits"),
        (&["run", "jobs:caps", "--read", "--", "true"][..], "--read"),
        (&["run", "jobs:caps", "--write", "--", "true"][..], "--write"),
        (&["elect", "jobs:caps", "--", "true"][..], "elect"),
    ] {
        let out = lh(args).expect(64);
        assert!(
            out.stderr.contains(flag)
                && out.stderr.contains("redlock")
                && out.stderr.contains("have it: redis"),
            "{args:?}: {}",
            out.stderr
        );
    }
    // Nothing was written on any node.
    for node in &nodes {
        assert_eq!(node.command(&["DBSIZE"]).unwrap().as_integer(), Some(0));
    }
});
