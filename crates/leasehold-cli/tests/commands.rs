//! `acquire`, `extend`, `release`, `inspect` and the exit statuses, against real servers.

use crate::support;

use leasehold_harness::{Server, ServerOptions, server_test};
use support::leasehold;

server_test!(async fn acquire_inspect_extend_release_round_trip(bin) {
    let server = Server::start(&bin, &ServerOptions::new()).unwrap();
    let url = server.url();
    let lh = |args: &[&str]| support::leasehold_at(&url, args);

    let acquired = lh(&["acquire", "jobs:nightly", "--ttl", "30s", "--fencing", "--json"]).expect(0).json();
    assert_eq!(acquired["key"], "jobs:nightly");
    assert_eq!(acquired["fencing_token"], 1);
    assert_eq!(acquired["ttl_ms"], 30_000);
    let token = acquired["token"].as_str().expect("token").to_string();
    assert!(!token.is_empty());

    // The lock outlived the command that took it.
    let state = lh(&["inspect", "jobs:nightly", "--json"]).expect(0).json();
    assert_eq!(state["key"], "jobs:nightly");
    assert_eq!(state["held"], true);
    assert_eq!(state["token"], token.as_str());
    assert_eq!(state["fencing_token"], 1);
    let ttl = state["ttl_ms"].as_u64().expect("ttl_ms");
    assert!(ttl > 0 && ttl <= 30_000, "{ttl}");

    let extended = lh(&["extend", "jobs:nightly", "--token", &token, "--ttl", "1m", "--json"]).expect(0).json();
    assert_eq!(extended["key"], "jobs:nightly");
    assert_eq!(extended["token"], token.as_str());
    assert_eq!(extended["ttl_ms"], 60_000);
    let ttl = lh(&["inspect", "jobs:nightly", "--json"]).expect(0).json()["ttl_ms"].as_u64().unwrap();
    assert!(ttl > 0 && ttl <= 60_000, "{ttl}");

    let released = lh(&["release", "jobs:nightly", "--token", &token, "--json"]).expect(0).json();
    assert_eq!(released["key"], "jobs:nightly");
    assert_eq!(released["released"], true);

    let state = lh(&["inspect", "jobs:nightly", "--json"]).expect(0).json();
    assert_eq!(state["held"], false);
    assert!(state["token"].is_null());
    assert!(state["ttl_ms"].is_null());
    assert_eq!(state["fencing_token"], 1);

    // Released twice, or extended after release: the token no longer holds the key.
    lh(&["release", "jobs:nightly", "--token", &token]).expect(1);
    lh(&["extend", "jobs:nightly", "--token", &token, "--ttl", "1m"]).expect(1);

    // Text output: the token, then the fencing number; the token also works from the env.
    let text = lh(&["acquire", "jobs:nightly", "--ttl", "30s", "--fencing"]).expect(0).stdout;
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 2, "{text}");
    assert_eq!(lines[1], "2");
    let out = support::leasehold_env(
        &["--url", &url, "release", "jobs:nightly"],
        &[("LEASEHOLD_TOKEN", lines[0])],
    )
    .expect(0);
    assert_eq!(out.stdout.trim(), "released \"jobs:nightly\"");
});

server_test!(async fn a_busy_lock_is_75(bin) {
    let server = Server::start(&bin, &ServerOptions::new()).unwrap();
    let url = server.url();
    leasehold(&["--url", &url, "acquire", "k", "--ttl", "30s"]).expect(0);
    let busy = leasehold(&["--url", &url, "acquire", "k", "--ttl", "30s"]).expect(75);
    assert!(busy.stdout.is_empty(), "{}", busy.stdout);
    assert!(busy.stderr.starts_with("leasehold: "), "{}", busy.stderr);
    assert_eq!(busy.stderr.lines().count(), 1, "{}", busy.stderr);
    leasehold(&["--url", &url, "acquire", "k", "--ttl", "30s", "--wait", "100ms", "--json"]).expect(75);
});

server_test!(async fn a_wrong_token_is_1(bin) {
    let server = Server::start(&bin, &ServerOptions::new()).unwrap();
    let url = server.url();
    let token = leasehold(&["--url", &url, "acquire", "k", "--ttl", "30s"]).expect(0).stdout;
    let out = leasehold(&["--url", &url, "release", "k", "--token", "not-my-token"]).expect(1);
    assert!(out.stderr.starts_with("leasehold: "), "{}", out.stderr);
    leasehold(&["--url", &url, "extend", "k", "--token", "not-my-token", "--ttl", "1m"]).expect(1);
    // The holder's lock is untouched.
    let state = leasehold(&["--url", &url, "inspect", "k", "--json"]).expect(0).json();
    assert_eq!(state["token"], token.trim());
});

server_test!(async fn refused_authentication_is_77(bin) {
    let server = Server::start(&bin, &ServerOptions::new().requirepass("s3cret")).unwrap();
    let port = server.port();
    let wrong = format!("redis://:wrong@127.0.0.1:{port}/");
    let out = leasehold(&["--url", &wrong, "inspect", "k"]).expect(77);
    assert!(out.stderr.starts_with("leasehold: "), "{}", out.stderr);
    assert!(!out.stderr.contains("wrong@"), "the password leaked: {}", out.stderr);
    // No password at all is refused too; the right one works.
    leasehold(&["--url", &server.url(), "acquire", "k", "--ttl", "1s"]).expect(77);
    let right = format!("redis://:s3cret@127.0.0.1:{port}/");
    leasehold(&["--url", &right, "inspect", "k"]).expect(0);
});

#[test]
fn an_unreachable_server_is_69() {
    // A loopback port nobody listens on.
    let closed = support::closed_port();
    let url = closed.redis_url();
    let out = leasehold(&["--url", &url, "inspect", "k"]).expect(69);
    assert!(out.stderr.starts_with("leasehold: "), "{}", out.stderr);
    assert_eq!(out.stderr.lines().count(), 1, "{}", out.stderr);
    leasehold(&["--url", &url, "acquire", "k", "--ttl", "1s"]).expect(69);
    // The URL can also come from the environment.
    support::leasehold_env(&["release", "k", "--token", "t"], &[("REDIS_URL", &url)]).expect(69);
}

#[test]
fn usage_errors_are_64() {
    let out = leasehold(&["acquire", "k", "--ttl", "banana"]).expect(64);
    assert!(out.stderr.contains("banana"), "{}", out.stderr);
    leasehold(&["acquire", "k", "--ttl", "30s", "--wait", "soon"]).expect(64);
    leasehold(&["extend", "k", "--token", "t", "--ttl", "banana"]).expect(64);
    leasehold(&["acquire", "k"]).expect(64);
    leasehold(&["release", "k"]).expect(64);
    leasehold(&["frobnicate"]).expect(64);
    leasehold(&[]).expect(64);
    // The lab's subcommands are `leasehold-lab`'s, not the shipped command's.
    for lab in ["demo", "check", "bench", "check-worker", "bench-worker"] {
        leasehold(&[lab]).expect(64);
    }
    let out = leasehold(&["--url", "not a url", "inspect", "k"]).expect(64);
    assert!(out.stderr.starts_with("leasehold: "), "{}", out.stderr);
    leasehold(&["--url", "http://127.0.0.1:1/", "inspect", "k"]).expect(64);
}

#[test]
fn help_and_version_are_0() {
    let help = leasehold(&["--help"]).expect(0);
    assert!(help.stdout.contains("Exit status:"), "{}", help.stdout);
    // Every kind of server, in the help of the command and of --url; the product, not where
    // it came from.
    let url_help = leasehold(&["acquire", "--help"]).expect(0);
    for form in [
        "redis://",
        "redis-cluster://",
        "redis-sentinel://",
        "redlock://",
        "etcd://",
        "postgres://",
        "?lock=lease",
    ] {
        assert!(
            help.stdout.contains(form),
            "{form} missing from --help:\n{}",
            help.stdout
        );
        assert!(
            url_help.stdout.contains(form),
            "{form} missing from --url's help:\n{}",
            url_help.stdout
        );
    }
    for text in [&help.stdout, &url_help.stdout] {
        for word in ["chapter", "course", "seed's", "walkthrough"] {
            assert!(!text.contains(word), "{word:?} in --help:\n{text}");
        }
    }
    let version = leasehold(&["--version"]).expect(0);
    assert!(
        version.stdout.starts_with("leasehold "),
        "{}",
        version.stdout
    );
}

// Semaphores and read-write locks from the shell: `acquire --permits N | --read | --write`
// prints a token that `extend` and `release` with the same flag take.
server_test!(async fn permits_and_read_write_leases_outlive_the_command(bin) {
    let server = Server::start(&bin, &ServerOptions::new()).unwrap();
    let url = server.url();
    let lh = |args: &[&str]| support::leasehold_at(&url, args);
    let token = |run: support::Run| run.json()["token"].as_str().expect("token").to_string();

    // Two permits: two holders, the third is busy until one is released.
    let first = token(lh(&["acquire", "pool", "--permits", "2", "--ttl", "30s", "--json"]).expect(0));
    let second = token(lh(&["acquire", "pool", "--permits", "2", "--ttl", "30s", "--json"]).expect(0));
    assert_ne!(first, second);
    lh(&["acquire", "pool", "--permits", "2", "--ttl", "30s"]).expect(75);
    lh(&["extend", "pool", "--permits", "2", "--token", &first, "--ttl", "1m"]).expect(0);
    lh(&["release", "pool", "--permits", "2", "--token", &first]).expect(0);
    // Its permit is gone: releasing or extending it again is refused.
    lh(&["release", "pool", "--permits", "2", "--token", &first]).expect(1);
    lh(&["extend", "pool", "--permits", "2", "--token", &first, "--ttl", "1m"]).expect(1);
    let third = token(lh(&["acquire", "pool", "--permits", "2", "--ttl", "30s", "--json"]).expect(0));
    // A plain release does not know the permit: the semaphore still counts it.
    lh(&["release", "pool", "--token", &third]).expect(1);
    lh(&["acquire", "pool", "--permits", "2", "--ttl", "30s"]).expect(75);
    for t in [&second, &third] {
        lh(&["release", "pool", "--permits", "2", "--token", t]).expect(0);
    }
    // Zero permits is refused as a usage error before anything is written.
    lh(&["acquire", "pool0", "--permits", "0", "--ttl", "30s"]).expect(64);

    // Readers share; the writer waits for them; each side's token goes with its own flag.
    let r1 = token(lh(&["acquire", "doc", "--read", "--ttl", "30s", "--json"]).expect(0));
    let r2 = token(lh(&["acquire", "doc", "--read", "--ttl", "30s", "--json"]).expect(0));
    lh(&["acquire", "doc", "--write", "--ttl", "30s"]).expect(75);
    lh(&["extend", "doc", "--read", "--token", &r1, "--ttl", "1m"]).expect(0);
    lh(&["release", "doc", "--write", "--token", &r1]).expect(1);
    for t in [&r1, &r2] {
        lh(&["release", "doc", "--read", "--token", t]).expect(0);
    }
    let written = lh(&["acquire", "doc", "--write", "--fencing", "--ttl", "30s", "--json"]).expect(0).json();
    assert!(written["fencing_token"].as_u64().is_some(), "{written}");
    let w = written["token"].as_str().unwrap().to_string();
    lh(&["acquire", "doc", "--read", "--ttl", "30s"]).expect(75);
    lh(&["extend", "doc", "--write", "--token", &w, "--ttl", "1m"]).expect(0);
    lh(&["release", "doc", "--read", "--token", &w]).expect(1);
    lh(&["release", "doc", "--write", "--token", &w]).expect(0);
    token(lh(&["acquire", "doc", "--read", "--ttl", "30s", "--json"]).expect(0));

    // Flags that do not go together are refused by the parser (a usage error).
    lh(&["acquire", "doc", "--read", "--write", "--ttl", "30s"]).expect(64);
    lh(&["acquire", "pool", "--permits", "2", "--fencing", "--ttl", "30s"]).expect(64);
});
