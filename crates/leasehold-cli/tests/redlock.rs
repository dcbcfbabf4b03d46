//! `--url` given several times: Redlock over those servers, for every lock subcommand, against
//! three real servers of each flavor of the matrix.

use crate::support;

use std::net::TcpListener;
use std::path::Path;

use leasehold_harness::{Server, ServerBinary, ServerOptions, server_test};
use support::{Run, Running, leasehold, leasehold_env, wait_for_file};

/// `--node-timeout` for every run: a node's answer counts (and the command waits for the
/// stragglers before it exits) within this bound, generous so that a loaded test machine does
/// not turn a slow answer into a missing one. (The 50 ms default is the library's.)
const NODE_TIMEOUT: &str = "5s";

fn three(bin: &ServerBinary) -> Vec<Server> {
    (0..3)
        .map(|_| Server::start(bin, &ServerOptions::new()).unwrap())
        .collect()
}

fn urls_of(servers: &[Server]) -> Vec<String> {
    servers.iter().map(Server::url).collect()
}

/// `leasehold --url A SUBCOMMAND --url B --url C args...`: the `--url`s before and after the
/// subcommand add up.
fn lh(urls: &[String], args: &[&str]) -> Run {
    let mut all: Vec<&str> = vec![
        "--url",
        urls[0].as_str(),
        "--node-timeout",
        NODE_TIMEOUT,
        args[0],
    ];
    for url in &urls[1..] {
        all.extend(["--url", url.as_str()]);
    }
    all.extend(&args[1..]);
    leasehold(&all)
}

fn get(server: &Server, key: &str) -> Option<String> {
    server
        .command(&["GET", key])
        .unwrap()
        .as_bytes()
        .map(|b| String::from_utf8_lossy(b).into_owned())
}

fn pttl(server: &Server, key: &str) -> i64 {
    server
        .command(&["PTTL", key])
        .unwrap()
        .as_integer()
        .unwrap()
}

fn node(server: &Server) -> String {
    format!("127.0.0.1:{}", server.port())
}

server_test!(async fn acquire_inspect_extend_release_on_three_nodes(bin) {
    let servers = three(&bin);
    let urls = urls_of(&servers);
    let acquired = lh(&urls, &["acquire", "jobs:ledger", "--ttl", "30s", "--json"]).expect(0).json();
    assert_eq!(acquired["key"], "jobs:ledger");
    assert_eq!(acquired["ttl_ms"], 30_000);
    assert!(acquired.get("fencing_token").is_none(), "{acquired}");
    let token = acquired["token"].as_str().expect("token").to_string();
    for s in &servers {
        assert_eq!(get(s, "jobs:ledger").as_deref(), Some(token.as_str()), "node {}", node(s));
    }

    let state = lh(&urls, &["inspect", "jobs:ledger", "--json"]).expect(0).json();
    assert_eq!(state["key"], "jobs:ledger");
    assert_eq!(state["held"], true);
    assert_eq!(state["token"], token.as_str());
    let nodes = state["nodes"].as_array().expect("nodes");
    assert_eq!(nodes.len(), 3, "{state}");
    for (n, s) in nodes.iter().zip(&servers) {
        assert_eq!(n["node"], node(s).as_str());
        assert_eq!(n["held"], true);
        assert_eq!(n["token"], token.as_str());
        let ttl = n["ttl_ms"].as_u64().expect("ttl_ms");
        assert!(ttl > 0 && ttl <= 30_000, "{ttl}");
        assert!(n.get("error").is_none(), "{n}");
    }
    // The same as text: the majority's holder, then one line per node.
    let text = lh(&urls, &["inspect", "jobs:ledger"]).expect(0).stdout;
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 5, "{text}");
    assert_eq!(lines[1], format!("holder: {token} (on 3 of 3 nodes; a majority is 2)"));
    for (line, s) in lines[2..].iter().zip(&servers) {
        assert!(line.starts_with(&format!("{}: holder: {token}, ttl: ", node(s))), "{text}");
    }

    // Extended past the first TTL on every node.
    let extended = lh(&urls, &["extend", "jobs:ledger", "--token", &token, "--ttl", "1m", "--json"]).expect(0).json();
    assert_eq!(extended["ttl_ms"], 60_000);
    for s in &servers {
        let ttl = pttl(s, "jobs:ledger");
        assert!(ttl > 30_000 && ttl <= 60_000, "node {}: {ttl}", node(s));
    }

    let released = lh(&urls, &["release", "jobs:ledger", "--token", &token, "--json"]).expect(0).json();
    assert_eq!(released["released"], true);
    for s in &servers {
        assert_eq!(get(s, "jobs:ledger"), None, "lock left on node {}", node(s));
    }
    let state = lh(&urls, &["inspect", "jobs:ledger", "--json"]).expect(0).json();
    assert_eq!(state["held"], false);
    assert!(state["token"].is_null());

    lh(&urls, &["release", "jobs:ledger", "--token", &token]).expect(1);
    lh(&urls, &["extend", "jobs:ledger", "--token", &token, "--ttl", "1m"]).expect(1);
});

// Each acquisition is granted by a majority; the numbers still increase.
server_test!(async fn fencing_numbers_increase_across_acquisitions(bin) {
    let servers = three(&bin);
    let urls = urls_of(&servers);
    for expected in [1, 2] {
        let acquired = lh(&urls, &["acquire", "k", "--ttl", "30s", "--fencing", "--json"]).expect(0).json();
        assert_eq!(acquired["fencing_token"], expected);
        let token = acquired["token"].as_str().unwrap().to_string();
        let state = lh(&urls, &["inspect", "k", "--json"]).expect(0).json();
        let counters: Vec<&serde_json::Value> = state["nodes"].as_array().unwrap().iter().map(|n| &n["fencing_token"]).collect();
        assert!(counters.iter().filter(|c| **c == expected).count() >= 2, "{state}");
        lh(&urls, &["release", "k", "--token", &token]).expect(0);
    }
});

// The list can come from $LEASEHOLD_URL, separated by commas; a busy lock is 75 there too.
server_test!(async fn leasehold_url_may_list_the_nodes(bin) {
    let servers = three(&bin);
    let urls = urls_of(&servers);
    let list = servers.iter().map(Server::url).collect::<Vec<_>>().join(",");
    let token = leasehold_env(&["acquire", "k", "--ttl", "30s", "--node-timeout", NODE_TIMEOUT], &[("LEASEHOLD_URL", &list)]).expect(0).stdout;
    for s in &servers {
        assert_eq!(get(s, "k").as_deref(), Some(token.trim()));
    }
    let busy = lh(&urls, &["acquire", "k", "--ttl", "30s"]).expect(75);
    assert!(busy.stderr.contains("busy"), "{}", busy.stderr);
    // The holder's lock is untouched by the failed attempt.
    for s in &servers {
        assert_eq!(get(s, "k").as_deref(), Some(token.trim()));
    }
});

/// A node that is down: a loopback port where every connection is closed as soon as it is
/// accepted. (Not a killed server: its port may be taken at once by another test's server
/// running in parallel; this one stays held until the test ends.)
struct DeadNode {
    port: u16,
}

impl DeadNode {
    fn new() -> DeadNode {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        // Lives as long as the test process: hangs up on everyone.
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                drop(stream);
            }
        });
        DeadNode { port }
    }

    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    fn node(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }
}

// One node down: a majority still takes, extends and releases the lock, and inspect shows
// the dead node's error.
server_test!(async fn one_node_down_is_a_minority(bin) {
    let servers: Vec<Server> = (0..2).map(|_| Server::start(&bin, &ServerOptions::new()).unwrap()).collect();
    let dead = DeadNode::new();
    let mut urls = urls_of(&servers);
    urls.push(dead.url());
    let token = lh(&urls, &["acquire", "k", "--ttl", "30s"]).expect(0).stdout.trim().to_string();
    for s in &servers {
        assert_eq!(get(s, "k").as_deref(), Some(token.as_str()));
    }
    let state = lh(&urls, &["inspect", "k", "--json"]).expect(0).json();
    assert_eq!(state["held"], true);
    assert_eq!(state["token"], token.as_str());
    let down = &state["nodes"][2];
    assert_eq!(down["node"], dead.node().as_str());
    assert!(down["error"].is_string(), "{state}");
    assert!(down.get("token").is_none(), "{state}");
    lh(&urls, &["extend", "k", "--token", &token, "--ttl", "1m"]).expect(0);
    lh(&urls, &["release", "k", "--token", &token]).expect(0);
    for s in &servers {
        assert_eq!(get(s, "k"), None);
    }
});

// A majority of the nodes down: 69, and the one stderr line names every node.
server_test!(async fn a_majority_down_is_69_naming_each_node(bin) {
    let server = Server::start(&bin, &ServerOptions::new()).unwrap();
    let dead = [DeadNode::new(), DeadNode::new()];
    let urls = vec![dead[0].url(), server.url(), dead[1].url()];
    for args in [
        &["acquire", "k", "--ttl", "30s"][..],
        &["release", "k", "--token", "t"][..],
        &["extend", "k", "--token", "t", "--ttl", "1s"][..],
        &["inspect", "k"][..],
        &["run", "k", "--", "true"][..],
    ] {
        let out = lh(&urls, args).expect(69);
        assert!(out.stdout.is_empty(), "{args:?}: {}", out.stdout);
        assert!(out.stderr.starts_with("leasehold: "), "{args:?}: {}", out.stderr);
        assert_eq!(out.stderr.lines().count(), 1, "{args:?}: {}", out.stderr);
        for d in &dead {
            assert!(out.stderr.contains(&format!("{}: failed: ", d.node())), "{args:?}: {}", out.stderr);
        }
        assert!(out.stderr.contains(&format!("{}: connected", node(&server))), "{}", out.stderr);
    }
    assert_eq!(get(&server, "k"), None);
});

// All nodes reachable, but two refuse writes (out of memory): the acquisition itself finds no
// quorum; the library's error lists each node's outcome, and nothing is left behind.
server_test!(async fn no_quorum_while_acquiring_is_69_naming_each_node(bin) {
    let servers = three(&bin);
    let urls = urls_of(&servers);
    for s in &servers[1..] {
        s.command(&["CONFIG", "SET", "maxmemory-policy", "noeviction"]).unwrap();
        s.command(&["CONFIG", "SET", "maxmemory", "1"]).unwrap();
    }
    let out = lh(&urls, &["acquire", "k", "--ttl", "30s"]).expect(69);
    assert!(out.stdout.is_empty(), "{}", out.stdout);
    assert_eq!(out.stderr.lines().count(), 1, "{}", out.stderr);
    assert!(out.stderr.contains("no quorum"), "{}", out.stderr);
    for s in &servers[1..] {
        assert!(out.stderr.contains(&format!("{}: failed: ", node(s))), "{}", out.stderr);
    }
    // The node that granted is named too (it may have answered before or after the decision).
    assert!(out.stderr.contains(&format!("{}: ", node(&servers[0]))), "{}", out.stderr);
    // Its grant was given back.
    assert_eq!(get(&servers[0], "k"), None);
});

#[test]
fn the_same_server_twice_is_a_usage_error() {
    let url = "redis://127.0.0.1:9/";
    let out = leasehold(&[
        "--url",
        url,
        "--url",
        "redis://127.0.0.1:9/1",
        "inspect",
        "k",
    ])
    .expect(64);
    assert!(out.stderr.contains("127.0.0.1:9"), "{}", out.stderr);
    leasehold(&["--node-timeout", "0s", "inspect", "k"]).expect(64);
}

server_test!(async fn run_passes_the_exit_status_and_releases_on_every_node(bin) {
    let servers = three(&bin);
    let dir = tempfile::tempdir().unwrap();
    for (script, code) in [("exit 0", 0), ("exit 7", 7)] {
        let (status, stderr) = Running::start(&run_args(&servers), dir.path(), &["job", "--", "sh", "-c", script]).wait();
        assert_eq!(status, code, "{script}: {stderr}");
        for s in &servers {
            assert_eq!(get(s, "job"), None, "lock left on node {} after {script}", node(s));
        }
    }
    // By the time the command starts, every node holds the token it was given.
    let script = "echo \"$LEASEHOLD_TOKEN ${LEASEHOLD_FENCING_TOKEN:-none}\" > env.txt; while [ ! -e go ]; do sleep 0.02; done";
    let run = Running::start(&run_args(&servers), dir.path(), &["job", "--fencing", "--", "sh", "-c", script]);
    let env = wait_for_file(&dir.path().join("env.txt"));
    let fields: Vec<&str> = env.split_whitespace().collect();
    assert_eq!(fields[1], "1");
    for s in &servers {
        assert_eq!(get(s, "job").as_deref(), Some(fields[0]), "node {}", node(s));
    }
    std::fs::write(dir.path().join("go"), "").unwrap();
    assert_eq!(run.wait().0, 0);
    for s in &servers {
        assert_eq!(get(s, "job"), None, "lock left on node {}", node(s));
    }
});

// The key deleted on two of the three nodes while the command runs: the next renewal finds no
// majority, the command is terminated, and leasehold exits 76.
server_test!(async fn losing_the_majority_during_run_is_76(bin) {
    let servers = three(&bin);
    let dir = tempfile::tempdir().unwrap();
    let script = "echo \"$$ $LEASEHOLD_TOKEN\" > pid; exec sleep 600";
    let run = Running::start(&run_args(&servers), dir.path(), &["job", "--ttl", "1s", "--", "sh", "-c", script]);
    let started = wait_for_file(&dir.path().join("pid"));
    let (pid, token) = started.trim().split_once(' ').unwrap();
    let pid: i32 = pid.parse().unwrap();
    // All three nodes hold it (so two deletions leave one copy: a minority).
    for s in &servers {
        assert_eq!(get(s, "job").as_deref(), Some(token), "node {}", node(s));
    }
    for s in &servers[..2] {
        s.command(&["DEL", "job"]).unwrap();
    }
    let (status, stderr) = run.wait();
    assert_eq!(status, 76, "{stderr}");
    assert!(stderr.contains("lost") && stderr.contains("SIGTERM"), "{stderr}");
    assert!(!Path::new(&format!("/proc/{pid}")).exists(), "the command survived the loss");
    // The remaining node's copy was released on the way out.
    assert_eq!(get(&servers[2], "job"), None);
});

// --metrics-addr with Redlock: the scrape counts the acquisition under backend="redlock" (the
// CLI holds a Redlock itself, not through a Locker), and nothing under "redis".
server_test!(async fn redlock_acquisitions_are_counted_in_the_metrics(bin) {
    let servers = three(&bin);
    let dir = tempfile::tempdir().unwrap();
    let run = Running::start(
        &run_args(&servers),
        dir.path(),
        &["job", "--metrics-addr", "127.0.0.1:0", "--", "sh", "-c", "echo started > started; while [ ! -e go ]; do sleep 0.02; done"],
    );
    wait_for_file(&dir.path().join("started"));
    let body = support::scrape(&run.metrics_addr()).expect("metrics served");
    let acquired = ["outcome=\"acquired\"", "mode=\"plain\"", "backend=\"redlock\""];
    assert_eq!(support::sample(&body, "leasehold_acquisitions_total", &acquired), Some(1.0), "{body}");
    assert_eq!(support::sample(&body, "leasehold_acquisitions_total", &["backend=\"redis\""]), None, "{body}");
    std::fs::write(dir.path().join("go"), "").unwrap();
    assert_eq!(run.wait().0, 0);
});

/// `--url` for each node and the node timeout, before `run`.
fn run_args(servers: &[Server]) -> Vec<String> {
    let mut args: Vec<String> = servers
        .iter()
        .flat_map(|s| ["--url".to_string(), s.url()])
        .collect();
    args.extend(["--node-timeout".to_string(), NODE_TIMEOUT.to_string()]);
    args
}
