//! Issue 24: TTLs too short to be a lease are usage errors (64) before anything is sent, on
//! every backend and for every primitive; a warning that repeats is rate-limited.

use crate::support;

use leasehold_harness::{Server, ServerOptions, SlowLink};
use support::{closed_port, leasehold_at};

// Before, `run KEY --ttl 2ms -- true` spun on the server for ever (Redis) or overflowed its stack
// (PostgreSQL), `acquire --ttl 1ms` exited 70, and fair, permits and elect with such a TTL hung.
// Now the TTL is checked as the command line is read: 64, naming the limit, without connecting
// (the servers here are closed ports, so any connection attempt would be 69).
#[test]
fn ttls_too_short_for_a_lease_are_refused_before_connecting_on_every_backend() {
    let closed = closed_port();
    let port = closed.port();
    let urls = [
        format!("redis://127.0.0.1:{port}/"),
        format!("redlock://127.0.0.1:{port},127.0.0.1:{port},127.0.0.1:{port}/"),
        format!("etcd://127.0.0.1:{port}"),
        format!("postgres://leasehold@127.0.0.1:{port}/leasehold"),
        format!("postgres://leasehold@127.0.0.1:{port}/leasehold?lock=lease"),
    ];
    let token = "0123456789abcdef0123456789abcdef";
    let mut refused: Vec<Vec<&str>> = vec![
        vec!["acquire", "k", "--ttl", "1ms"],
        vec!["acquire", "k", "--ttl", "9ms", "--wait", "1s"],
        vec!["acquire", "k", "--ttl", "8d"],
        vec!["extend", "k", "--token", token, "--ttl", "1ms"],
        vec!["run", "k", "--ttl", "2ms", "--", "true"],
        // Renewed while the command runs: at least MIN_RENEWED_TTL (50 ms).
        vec!["run", "k", "--ttl", "49ms", "--", "true"],
        vec!["run", "k", "--ttl", "2ms", "--fair", "--", "true"],
        vec!["run", "k", "--ttl", "2ms", "--permits", "2", "--", "true"],
        vec!["run", "k", "--ttl", "2ms", "--read", "--", "true"],
        vec!["elect", "k", "--ttl", "20ms", "--", "true"],
    ];
    refused.push(vec!["acquire", "k", "--ttl", "0s"]);
    for url in &urls {
        for args in &refused {
            let out = leasehold_at(url, args).expect(64);
            assert!(
                out.stderr.contains("minimum") || out.stderr.contains("maximum"),
                "{url} {args:?}: {}",
                out.stderr
            );
        }
    }
}

// A warning that repeats is rate-limited: every reply is held back past the validity of a 10 ms
// lease, so every grant of a 2 s wait arrives too late and is given back (a dozen or more,
// spaced by the backoff); "lock granted after its validity ended" is logged once, not once each.
leasehold_harness::server_test!(async fn a_warning_that_repeats_is_logged_once(bin) {
    let server = Server::start(&bin, &ServerOptions::new()).unwrap();
    let link = SlowLink::start(server.addr()).unwrap();
    link.set_reply_delay(std::time::Duration::from_millis(25));
    let url = link.url();
    let out = tokio::task::spawn_blocking(move || {
        leasehold_at(&url, &["acquire", "late", "--ttl", "10ms", "--wait", "2s"])
    })
    .await
    .unwrap()
    .expect(75);
    let late = "lock granted after its validity ended";
    // One attempt whose grant came too late: given back, and 75 (try again), not 70.
    let url = link.url();
    tokio::task::spawn_blocking(move || leasehold_at(&url, &["acquire", "once", "--ttl", "10ms"]))
        .await
        .unwrap()
        .expect(75);
    assert_eq!(out.stderr.matches(late).count(), 1, "{}", out.stderr);
    // More than one grant came late: the others went to debug. The server's own counts of the
    // commands that take the lock (`SET NX PX`, or the acquire script) say how many attempts
    // there were: each was granted, the key being free.
    let stats = server.info("commandstats").unwrap();
    let calls = |cmd: &str| -> u64 {
        stats
            .lines()
            .find_map(|l| l.strip_prefix(&format!("cmdstat_{cmd}:calls="))?.split(',').next()?.parse().ok())
            .unwrap_or(0)
    };
    let attempts = calls("set") + calls("evalsha") + calls("fcall");
    assert!(attempts >= 3, "only {attempts} attempts: {stats}");
    assert_eq!(
        server.command(&["EXISTS", "late"]).unwrap().as_integer(),
        Some(0),
        "a late grant was kept"
    );
});
