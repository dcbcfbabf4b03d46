//! `leasehold demo` against every server of the matrix.

mod support;

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
