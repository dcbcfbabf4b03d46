//! `leasehold-lab demo` against every server of the matrix.

use crate::support;

use leasehold_harness::{Flavor, Server, ServerOptions, server_test};
use support::{assert_lines_in_order, leasehold, leasehold_env};

/// What `src/patterns-locks.ts` printed in the seed, verbatim.
const SEED_OUTPUT: [&str; 11] = [
    "A acquires: true | B acquires while A holds it: null",
    "release with wrong token -> 0 | with A token -> 1 | key now: null",
    "plain DEL release:",
    "  A releases with plain DEL -> deleted B's lock",
    "  C acquires while B is still inside its critical section: true | B still holds it: false",
    "token-checked release:",
    "  A releases with token check -> 0",
    "  C acquires while B is still inside its critical section: false | B still holds it: true",
    "Lua release wrong -> 0 | right -> 1",
    "fencing: B writes with 2 -> true | A wakes up and writes with 1 -> false | value = B",
    "5 workers through withLock: max inside the critical section at once = 1",
];

const LUA_RELEASE: &str =
    "if redis.call('get',KEYS[1])==ARGV[1] then return redis.call('del',KEYS[1]) end return 0";

server_test!(async fn demo_prints_the_seed_output_and_the_transcript(bin) {
    let server = Server::start(&bin, &ServerOptions::new()).unwrap();
    let out = leasehold(&["demo", "--url", &server.url()]).expect(0);
    let text = out.stdout.as_str();

    assert_lines_in_order(text, &SEED_OUTPUT);

    // The AI-written helper fails the same way, after the seed's lines.
    assert_lines_in_order(text, &[
        SEED_OUTPUT[10],
        "AI-written helper:",
        "  C got in while B was still inside its critical section: true \
         (A's DEL deleted B's lock: the value '1' cannot say whose lock it is)",
    ]);

    // The transcript, with the server's real replies, after the helper.
    let cmd = |c: &str| format!("127.0.0.1:{}> {c}", server.port());
    let (note, wrong, right) = match bin.flavor().unwrap() {
        Flavor::Redis8 => (
            None,
            cmd(r#"DELEX lock:payment IFEQ "wrong-token""#),
            cmd(r#"DELEX lock:payment IFEQ "token-uuid-abc""#),
        ),
        Flavor::Valkey9 => (
            Some("# this server has no DELEX (Redis 8.4+); Valkey's DELIFEQ does the same \
                  compare-and-delete (so does the Lua EVAL further down). \
                  Instead of: DELEX lock:payment IFEQ \"wrong-token\""),
            cmd(r#"DELIFEQ lock:payment "wrong-token""#),
            cmd(r#"DELIFEQ lock:payment "token-uuid-abc""#),
        ),
        Flavor::Redis7 => (
            Some("# this server has no DELEX (Redis 8.4+); the Lua equivalent of: \
                  DELEX lock:payment IFEQ \"wrong-token\""),
            cmd(&format!(r#"EVAL "{LUA_RELEASE}" 1 lock:payment "wrong-token""#)),
            cmd(&format!(r#"EVAL "{LUA_RELEASE}" 1 lock:payment "token-uuid-abc""#)),
        ),
    };
    let first = cmd(r#"SET lock:payment "token-uuid-abc" NX PX 30000"#);
    let second = cmd(r#"SET lock:payment "token-uuid-xyz" NX PX 30000"#);
    let get = cmd("GET lock:payment");
    let lua_right = cmd(&format!(r#"EVAL "{LUA_RELEASE}" 1 lock:payment "token-uuid-abc""#));
    let mut expected = vec!["AI-written helper:", &first, "OK", &second, "(nil)"];
    expected.extend(note);
    expected.extend([wrong.as_str(), "(integer) 0", &get, "\"token-uuid-abc\""]);
    expected.extend([right.as_str(), "(integer) 1", &get, "(nil)", &first, "OK"]);
    expected.extend([lua_right.as_str(), "(integer) 1", &get, "(nil)"]);
    assert_lines_in_order(text, &expected);
    if bin.flavor() == Some(Flavor::Redis7) {
        assert!(text.contains("# this server has no SET ... IFEQ"), "{text}");
    }

    // It said which server and strategies it used, and left nothing behind.
    assert!(text.contains(&format!("# server: {} at redis://127.0.0.1:{}/ (from --url)", bin.label(), server.port())), "{text}");
    assert!(text.contains("# release strategy: "), "{text}");
    assert_eq!(server.command(&["DBSIZE"]).unwrap().as_integer(), Some(0));
});

server_test!(async fn demo_starts_the_server_it_is_asked_for(bin) {
    let flavor = bin.flavor().unwrap();
    let out = leasehold(&["demo", "--server", flavor.name()]).expect(0);
    let text = out.stdout.as_str();
    assert_lines_in_order(text, &SEED_OUTPUT);
    assert!(
        text.contains(&format!("# server: {}, a throwaway server started for this demo", bin.label())),
        "{text}"
    );
    assert!(text.contains("# stopped the throwaway server"), "{text}");
});

server_test!([redis8] async fn demo_without_a_url_prefers_a_server_with_delex(bin) {
    let out = leasehold(&["demo"]).expect(0);
    let text = out.stdout.as_str();
    assert!(text.contains(&format!("# server: {}, a throwaway server", bin.label())), "{text}");
    assert!(
        text.contains("# release strategy: DELEX key IFEQ token | extend strategy: SET key token PX ttl IFEQ token"),
        "{text}"
    );
    assert_lines_in_order(text, &SEED_OUTPUT);
});

server_test!([redis8] async fn demo_leaves_existing_keys_alone(bin) {
    let server = Server::start(&bin, &ServerOptions::new()).unwrap();
    assert!(server.command(&["SET", "lock:payment", "mine"]).unwrap().is_ok());
    let out = leasehold(&["demo", "--url", &server.url()]).expect(64);
    assert!(out.stderr.starts_with("leasehold: "), "{}", out.stderr);
    assert!(out.stderr.contains("lock:payment already exists"), "{}", out.stderr);
    assert_eq!(server.command(&["GET", "lock:payment"]).unwrap().as_str(), Some("mine"));
    assert_eq!(server.command(&["DBSIZE"]).unwrap().as_integer(), Some(1));
});

#[test]
fn demo_rejects_server_with_url() {
    let out = leasehold(&[
        "demo",
        "--server",
        "redis8",
        "--url",
        "redis://127.0.0.1:1/",
    ])
    .expect(64);
    assert!(out.stderr.starts_with("leasehold: "), "{}", out.stderr);
}

/// The outcome lines of `demo --scenario failover`, in order: the hazard (two holders, the same
/// fencing number), the fenced write keeping A out, then the acknowledged acquisition failing.
const FAILOVER_OUTCOMES: [&str; 12] = [
    "A acquires b3:lock:payment on the master: true | fencing number: 1",
    "the new master: GET b3:lock:payment -> (nil) | GET {b3:lock:payment}:fence -> (nil)",
    "B acquires b3:lock:payment on the new master: true | fencing number: 1",
    "A holds a valid lease: true | the new master holds B's token: true | two holders at once: true",
    "B writes to the resource with fencing number 1 -> accepted",
    "A (stale) writes to the resource with fencing number 1 -> rejected (the resource's highest number: 1)",
    "resource value = B (written with fencing number 1)",
    "A acquires b3:lock:payment on the master: false | NotReplicated: 0 of 1 replicas \
     acknowledged within 500 ms; the library released the lock again",
    "the master: GET b3:lock:payment -> (nil) | GET {b3:lock:payment}:fence -> \"1\"",
    "# the master crashes (SIGKILL); the replica resumes and is promoted: REPLICAOF NO ONE -> OK",
    "B acquires b3:lock:payment on the new master: true | fencing number: 1",
    "A holds a valid lease: false | the new master holds B's token: true | two holders at once: false",
];

server_test!(async fn demo_failover_shows_two_holders_and_what_keeps_them_apart(bin) {
    let flavor = bin.flavor().unwrap();
    let out = leasehold(&["demo", "--scenario", "failover", "--server", flavor.name()]).expect(0);
    let text = out.stdout.as_str();
    assert!(
        text.contains(&format!("# servers: {}, throwaway processes started for this demo (--server {flavor})", bin.label())),
        "{text}"
    );
    assert_lines_in_order(text, &["# 1) without replica acknowledgement (the default)"]);
    assert_lines_in_order(text, &FAILOVER_OUTCOMES);
    // Each part cut the replication link and saw the master report no replica.
    let cut = "# the replica is frozen (SIGSTOP) and its link cut on the master: CLIENT KILL TYPE \
               replica -> (integer) 1; the master's INFO now says connected_slaves:0";
    assert_eq!(text.lines().filter(|l| *l == cut).count(), 2, "{text}");
    let last = text.lines().last().unwrap_or_default();
    assert!(last.starts_with(&format!("# stopped the throwaway servers ({} on 127.0.0.1 ports ", bin.label())), "{text}");
});

// A URL in the environment does not redirect the failover scenario: it never touches a server it
// did not start (it kills and promotes them), and says the variable is not used.
server_test!([redis8] async fn demo_failover_ignores_a_url_in_the_environment(bin) {
    let out = leasehold_env(
        &["demo", "--scenario", "failover"],
        &[("LEASEHOLD_URL", "redis://127.0.0.1:1/")],
    )
    .expect(0);
    let text = out.stdout.as_str();
    assert!(text.contains(&format!("# servers: {}, throwaway processes", bin.label())), "{text}");
    assert!(text.contains("; $LEASEHOLD_URL is not used)"), "{text}");
    assert_lines_in_order(text, &FAILOVER_OUTCOMES);
});

#[test]
fn demo_failover_refuses_a_url() {
    let out = leasehold(&[
        "demo",
        "--scenario",
        "failover",
        "--url",
        "redis://127.0.0.1:1/",
    ])
    .expect(64);
    assert!(
        out.stderr.starts_with("leasehold: --scenario failover"),
        "{}",
        out.stderr
    );
    assert!(out.stdout.is_empty(), "{}", out.stdout);
    let out = leasehold(&["demo", "--scenario", "nonsense"]).expect(64);
    assert!(out.stderr.contains("walkthrough"), "{}", out.stderr);
}

/// Every `127.0.0.1:PORT` in `line`, in order.
fn addrs(line: &str) -> Vec<String> {
    line.match_indices("127.0.0.1:")
        .map(|(i, p)| {
            let digits: String = line[i + p.len()..]
                .chars()
                .take_while(char::is_ascii_digit)
                .collect();
            format!("{p}{digits}")
        })
        .collect()
}

/// The line of `text` that starts with `prefix`, or a failure showing the whole output.
#[track_caller]
fn line_starting<'a>(text: &'a str, prefix: &str) -> &'a str {
    text.lines()
        .find(|l| l.starts_with(prefix))
        .unwrap_or_else(|| panic!("no line starting with {prefix:?} in:\n{text}"))
}

// The Sentinel variant: real sentinels promote the replica that missed the lock; the clients,
// connected through them and never rebuilt, follow; B gets A's number; the fenced write keeps A
// out; A's auto-extension reports the loss; replica_ack refuses the acquisition instead.
server_test!(async fn demo_failover_sentinel_follows_the_sentinels_and_shows_the_mitigations(bin) {
    let flavor = bin.flavor().unwrap();
    let out = leasehold(&["demo", "--scenario", "failover-sentinel", "--server", flavor.name()]).expect(0);
    let text = out.stdout.as_str();
    let servers = line_starting(text, "# servers: ");
    assert!(
        servers.starts_with(&format!("# servers: {}, throwaway processes started for this demo (--server {flavor})", bin.label())),
        "{text}"
    );
    let [primary, replica] = <[String; 2]>::try_from(addrs(servers)[..2].to_vec()).unwrap();
    let second = line_starting(text, "# 2) the same with replica_ack(1, 500 ms)");
    let [primary2, replica2] = <[String; 2]>::try_from(addrs(second)[..2].to_vec()).unwrap();

    // The clients connect through the sentinels, which name the primary.
    let connects: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("# A and B connect through the sentinels, a client each: redis-sentinel://127.0.0.1:"))
        .collect();
    assert_eq!(connects.len(), 2, "{text}");
    for (line, p) in connects.iter().zip([&primary, &primary2]) {
        let port = p.rsplit(':').next().unwrap();
        assert!(line.contains(&format!("#leasehold; a sentinel answers SENTINEL GET-MASTER-ADDR-BY-NAME leasehold -> [\"127.0.0.1\", \"{port}\"]")), "{text}");
        assert!(line.ends_with(&format!("A's client talks to {p}, B's to {p}")), "{text}");
    }
    let cut = "# the replica is frozen (SIGSTOP) and its link cut on the primary: CLIENT KILL TYPE \
               replica -> (integer) 1; the primary's INFO now says connected_slaves:0";
    assert_eq!(text.lines().filter(|l| *l == cut).count(), 2, "{text}");

    // The sentinels promoted the replica each time, and B's client followed them.
    let promoted: Vec<&str> = text.lines().filter(|l| l.starts_with("# promoted ")).collect();
    assert_eq!(promoted.len(), 2, "{text}");
    for (line, r) in promoted.iter().zip([&replica, &replica2]) {
        let port = r.rsplit(':').next().unwrap();
        assert!(line.ends_with(&format!("leasehold -> [\"127.0.0.1\", \"{port}\"]; the replica's INFO says role:master")), "{text}");
    }
    let followed: Vec<&str> = text.lines().filter(|l| l.starts_with("# B's client (the same one, not rebuilt) had talked to ")).collect();
    assert_eq!(followed.len(), 2, "{text}");
    for (line, (p, r)) in followed.iter().zip([(&primary, &replica), (&primary2, &replica2)]) {
        assert!(line.contains(&format!("had talked to {p}")), "{text}");
        assert!(line.ends_with(&format!("now talks to {r}")), "{text}");
    }

    let lost = format!(
        "A's lease reported lost: true | reason: the key no longer holds our token | A's client \
         now talks to {replica} | A holds a valid lease: false"
    );
    assert_lines_in_order(text, &[
        "# 1) without replica acknowledgement (the default)",
        "A acquires b3:lock:payment on the primary: true | fencing number: 1 | auto-extended: TTL 30 s, renewed every 15 s",
        "the new primary: GET b3:lock:payment -> (nil) | GET {b3:lock:payment}:fence -> (nil)",
        "B acquires b3:lock:payment on the new primary: true | fencing number: 1",
        "A holds a valid lease: true | the new primary holds B's token: true | two holders at once: true",
        "B writes to the resource with fencing number 1 -> accepted",
        "A (stale) writes to the resource with fencing number 1 -> rejected (the resource's highest number: 1)",
        "resource value = B (written with fencing number 1)",
        &lost,
        "A releases: NotHeld (lock \"b3:lock:payment\" is not held by this token (expired, released, \
         or taken by another holder)) | the new primary still holds B's token: true",
        "A acquires b3:lock:payment on the primary: false | NotReplicated: 0 of 1 replicas \
         acknowledged within 500 ms; the library released the lock again",
        "the primary: GET b3:lock:payment -> (nil) | GET {b3:lock:payment}:fence -> \"1\"",
        "B acquires b3:lock:payment on the new primary: true | fencing number: 1",
        "A holds a valid lease: false | the new primary holds B's token: true | two holders at once: false",
    ]);
    let last = text.lines().last().unwrap_or_default();
    assert!(last.starts_with(&format!("# stopped the throwaway servers ({} on 127.0.0.1 ports ", bin.label())), "{text}");
});

#[test]
fn demo_failover_sentinel_refuses_a_url() {
    let out = leasehold(&[
        "demo",
        "--scenario",
        "failover-sentinel",
        "--url",
        "redis://127.0.0.1:1/",
    ])
    .expect(64);
    assert!(
        out.stderr
            .starts_with("leasehold: --scenario failover-sentinel"),
        "{}",
        out.stderr
    );
    assert!(out.stdout.is_empty(), "{}", out.stdout);
}

// Moved from the `leasehold` command's suite with the demo: a server outside the matrix, and
// more than one server, are usage errors.
#[test]
fn demo_takes_one_server_of_the_matrix() {
    leasehold(&["demo", "--server", "redis6"]).expect(64);
    // The demo talks to one server.
    leasehold(&[
        "--url",
        "redis://127.0.0.1:9/",
        "--url",
        "redis://127.0.0.1:10/",
        "demo",
    ])
    .expect(64);
}
