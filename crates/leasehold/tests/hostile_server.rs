//! The client against a hostile RESP server (`leasehold_harness::HostileServer`): malformed,
//! truncated, oversized, wrongly typed and slow replies, chosen by a seed, to every command.
//!
//! For a bounded time (`LEASEHOLD_FUZZ_SECONDS`, default 18 s; the seeds under way finish) it
//! loops over seeds; each seed starts a server, connects a client and runs lock operations.
//! Whatever the server says, the client must not panic, must not hang past its timeouts, must
//! fail with a typed error (ambiguous once the command reached the server and no answer came
//! back), and must never report a lock, a release or an extension the server did not grant.
//!
//! A failure names its seed; `LEASEHOLD_FUZZ_SEED=<seed>` replays that seed alone.
//! See `fuzz/README.md` for longer runs.

mod hostile;

use std::time::{Duration, Instant};

use hostile::{HANG_GUARD, Stats, TTL, about, guarded};
use leasehold::{ClientOptions, Error, LockOptions, LockToken, Locker};
use leasehold_harness::{Exchange, HostileOptions, HostileServer};

/// The client's connect and response timeouts: short, so a seed takes about a second.
const TIMEOUT: Duration = Duration::from_millis(200);
/// Seeds run side by side (they mostly wait for timeouts, not for the CPU).
const WORKERS: u64 = 4;

// Replies that once broke the client, one by one (each failed without its fix).

/// A server answering every command honestly, but `fixed` ones as given.
fn server_answering(fixed: &[(&str, &[u8])]) -> HostileServer {
    let mut options = HostileOptions::new(0).honest_percent(100);
    for (name, reply) in fixed {
        options = options.answer(name, reply);
    }
    HostileServer::start(options).unwrap()
}

async fn connect(server: &HostileServer) -> Locker {
    let options = ClientOptions::new()
        .connect_timeout(TIMEOUT * 5)
        .response_timeout(TIMEOUT * 5);
    Locker::connect_with(&server.url(), options)
        .await
        .expect("connects through honest replies")
}

/// Waits until the server has received a command naming `key` whose name is one of `names`.
async fn until_received(server: &HostileServer, key: &str, names: &[&str]) -> Exchange {
    let begun = Instant::now();
    loop {
        let log = server.log();
        if let Some(e) = about(&log, key).find(|e| names.contains(&e.name().as_str())) {
            return e.clone();
        }
        assert!(
            begun.elapsed() < HANG_GUARD,
            "no {names:?} of {key:?} in {log:#?}"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

// The redis crate checks `SCRIPT LOAD`'s reply with a `debug_assert_eq!` against the script's
// hash: a server answering another hash made the client panic (in debug builds).
#[tokio::test]
async fn a_wrong_hash_from_script_load_is_an_error_not_a_panic() {
    let server = server_answering(&[
        ("EVALSHA", b"-NOSCRIPT No matching script\r\n"),
        (
            "SCRIPT LOAD",
            b"$40\r\n0000000000000000000000000000000000000000\r\n",
        ),
    ]);
    let client = connect(&server).await;
    let fenced = LockOptions::new(TTL).fencing(true);
    let result = guarded("fenced acquire", async move {
        client.try_acquire("k", &fenced).await
    })
    .await
    .unwrap();
    let err = result.map(|_| ()).unwrap_err();
    assert!(matches!(err, Error::UnexpectedReply { .. }), "{err:?}");
}

// `SET NX` was read as `Option<String>`: any bulk string (a 3 MB one, "OK" as a bulk, an
// integer) counted as a grant, and the script's `{ok, n}` was read from anything that converts
// to two integers, with a negative fencing number wrapping to a huge one. Now only `+OK`/nil
// and `[1|0, n]` count, and an unreadable reply leaves the cleanup armed: the server may have
// taken the lock, so its token is released.
#[tokio::test]
async fn only_a_real_grant_is_a_lock() {
    let cases: [(&str, &[u8], bool); 6] = [
        ("SET k", b"$2\r\nOK\r\n", false),
        ("SET k", b"$5\r\nhello\r\n", false),
        ("SET k", b":1\r\n", false),
        ("EVALSHA", b"*2\r\n:1\r\n:-5\r\n", true),
        ("EVALSHA", b"*2\r\n$1\r\n1\r\n:5\r\n", true),
        ("EVALSHA", b"*2\r\n:1\r\n:9007199254740993\r\n", true),
    ];
    for (name, reply, fencing) in cases {
        // DELEX accepted by the probe: the cleanup's release is a DELEX.
        let server = server_answering(&[(name, reply), ("DELEX", b":1\r\n")]);
        let client = connect(&server).await;
        let opts = LockOptions::new(TTL).fencing(fencing);
        let c = client.clone();
        let result = guarded("acquire", async move { c.try_acquire("k", &opts).await })
            .await
            .unwrap();
        let shown = String::from_utf8_lossy(reply);
        match result {
            Err(Error::UnexpectedReply { .. }) => {}
            other => panic!("{shown:?}: {:?}", other.map(|o| o.is_acquired())),
        }
        until_received(&server, "k", &["DELEX"]).await;
    }
}

// Bytes that are not RESP came out of the redis crate as a parse error, which the library
// reported as an unambiguous `UnexpectedReply`: "not applied", though the command had reached
// the server. It is an ambiguous connection error now (the connection is dropped), and the
// acquisition's cleanup releases the token.
#[tokio::test]
async fn an_unreadable_reply_is_ambiguous() {
    for reply in [&b"^1\r\n"[..], b":12a\r\n", b"$abc\r\n"] {
        let server = server_answering(&[("SET k", reply), ("DELEX", b":1\r\n")]);
        let client = connect(&server).await;
        let c = client.clone();
        let result = guarded("acquire", async move {
            c.try_acquire("k", &LockOptions::new(TTL)).await
        })
        .await
        .unwrap();
        let err = result.map(|_| ()).unwrap_err();
        assert!(err.is_ambiguous(), "{reply:?}: {err:?}");
        until_received(&server, "k", &["DELEX"]).await;
    }
}

// A release read its reply as any i64 (a bulk "1" meant "released"), and an extend by
// `SET ... IFEQ` read any reply but `+OK` as "not held". Both now take only the replies the
// server gives (`:1`/`:0`, `+OK`/nil), and anything else is an error, not a verdict.
#[tokio::test]
async fn release_and_extend_take_only_their_replies() {
    let server = server_answering(&[("DELEX", b"$1\r\n1\r\n"), ("SET k", b"$5\r\nhello\r\n")]);
    let client = connect(&server).await;
    let token = LockToken::random();
    let (c, t) = (client.clone(), token.clone());
    let released = guarded("release", async move { c.release("k", &t).await })
        .await
        .unwrap();
    assert!(
        matches!(released, Err(Error::UnexpectedReply { .. })),
        "{released:?}"
    );
    let extended = guarded(
        "extend",
        async move { client.extend("k", &token, TTL).await },
    )
    .await
    .unwrap();
    assert!(
        matches!(extended, Err(Error::UnexpectedReply { .. })),
        "{extended:?}"
    );
}

// A release is sent again after a dropped connection; the first may have been applied. When
// the repeat failed with an error of its own (a refusal), that error alone came back, not
// ambiguous: "not released", though the first one may have released the lock.
#[tokio::test]
async fn a_repeated_release_that_fails_is_ambiguous() {
    // DELEX: accepted by the probe, then closed without a reply, then refused.
    let server = server_answering(&[
        ("DELEX", b":0\r\n"),
        ("DELEX", b""),
        (
            "DELEX",
            b"-LOADING Redis is loading the dataset in memory\r\n",
        ),
    ]);
    let client = connect(&server).await;
    let token = LockToken::random();
    let released = guarded("release", async move { client.release("k", &token).await })
        .await
        .unwrap();
    let sent = about(&server.log(), "k")
        .filter(|e| e.name() == "DELEX")
        .count();
    assert_eq!(sent, 2, "{:#?}", server.log());
    let err = released.unwrap_err();
    assert!(err.is_ambiguous(), "{err:?}");
}

/// Asserts that `result` is the error for a reply that is not its command's.
fn not_read<T: std::fmt::Debug>(what: &str, result: Result<T, Error>) {
    assert!(
        matches!(result, Err(Error::UnexpectedReply { .. })),
        "{what}: {result:?}"
    );
}

// The semaphore's and the read-write lock's acquire scripts had their `{ok, n}` read as
// `(i64, i64)`, from anything that converts: a bulk "1" in first place took a permit or a
// lock. Only an array of two integers counts now.
#[tokio::test]
async fn a_permit_or_a_read_write_lock_needs_a_real_grant() {
    for reply in [&b"*2\r\n$1\r\n1\r\n:5\r\n"[..], b"*2\r\n:1\r\n$1\r\n5\r\n"] {
        let server = server_answering(&[("EVALSHA", reply)]);
        let client = connect(&server).await;
        let shown = String::from_utf8_lossy(reply).into_owned();
        let opts = LockOptions::new(TTL);
        let (c, o) = (client.clone(), opts.clone());
        let permit = guarded("permit", async move {
            c.semaphore("s", 2).unwrap().try_acquire(&o).await
        })
        .await
        .unwrap();
        not_read(
            &format!("{shown:?}: permit"),
            permit.map(|p| p.is_acquired()),
        );
        for write in [false, true] {
            let (c, o) = (client.clone(), opts.clone());
            let lock = guarded("rwlock", async move {
                let rw = c.rwlock("rw").unwrap();
                if write {
                    rw.try_write(&o).await
                } else {
                    rw.try_read(&o).await
                }
            })
            .await
            .unwrap();
            not_read(
                &format!("{shown:?}: write {write}"),
                lock.map(|p| p.is_acquired()),
            );
        }
    }
}

// A multi-resource lock's and an election's scripts had their replies read as tuples of
// integers, from anything that converts: a bulk "1" in first place took the keys, or the lead.
#[tokio::test]
async fn a_multi_lock_or_a_lead_needs_a_real_grant() {
    let server = server_answering(&[
        ("EVALSHA", b"*3\r\n$1\r\n1\r\n:0\r\n:0\r\n"),
        ("EVALSHA", b"*2\r\n$1\r\n1\r\n:5\r\n"),
    ]);
    let client = connect(&server).await;
    let opts = LockOptions::new(TTL);
    let (c, o) = (client.clone(), opts.clone());
    let multi = guarded("multi", async move {
        c.as_redis()
            .unwrap()
            .multi_lock(&["a", "b"])
            .unwrap()
            .try_acquire(&o)
            .await
    })
    .await
    .unwrap();
    not_read("multi", multi.map(|p| p.is_acquired()));
    let lead = guarded("campaign", async move {
        client.election("e").unwrap().campaign("me", &opts).await
    })
    .await
    .unwrap();
    not_read("lead", lead.map(|g| g.fencing_token()));
}

// The fair lock's acquire script had its `{ok, n}` read as `(i64, i64)` too: a bulk "1" in
// first place took the lock; and a fencing number out of 1..=2^53 was taken as given.
#[tokio::test]
async fn a_fair_lock_needs_a_real_grant() {
    for (reply, fencing) in [
        (&b"*2\r\n$1\r\n1\r\n:5\r\n"[..], false),
        (b"*2\r\n:1\r\n$1\r\n5\r\n", false),
        (b"*2\r\n:1\r\n:-3\r\n", true),
        (b"*2\r\n:1\r\n:0\r\n", true),
    ] {
        let server = server_answering(&[("EVALSHA", reply)]);
        let client = connect(&server).await;
        let shown = String::from_utf8_lossy(reply).into_owned();
        let opts = LockOptions::new(TTL).fair(true).fencing(fencing);
        let lock = guarded("fair", async move { client.try_acquire("f", &opts).await })
            .await
            .unwrap();
        not_read(&format!("{shown:?}: fair"), lock.map(|l| l.is_acquired()));
    }
}

// A reply to a write that is not the command's own (here a bulk string to `SET NX`) says the
// server received the command, not what it did: ambiguous, like a lost reply; to a read it is
// not (nothing to be ambiguous about).
#[tokio::test]
async fn a_wrongly_typed_reply_to_a_write_is_ambiguous() {
    let server = server_answering(&[("SET", b"$2\r\nOK\r\n")]);
    let client = connect(&server).await;
    let opts = LockOptions::new(TTL);
    let result = guarded("try", async move { client.try_acquire("w", &opts).await })
        .await
        .unwrap();
    match result {
        Err(e @ Error::UnexpectedReply { .. }) => assert!(e.is_ambiguous(), "{e:?}"),
        other => panic!("expected an ambiguous UnexpectedReply, got {other:?}"),
    }
}

// The fuzzing loop.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_replies_never_break_the_client() {
    let budget = Duration::from_secs(env_u64("LEASEHOLD_FUZZ_SECONDS").unwrap_or(18));
    let replay = env_u64("LEASEHOLD_FUZZ_SEED");
    let base = replay.unwrap_or_else(rand::random::<u64>);
    let begun = Instant::now();
    let mut workers = tokio::task::JoinSet::new();
    for w in 0..if replay.is_some() { 1 } else { WORKERS } {
        workers.spawn(async move {
            let mut stats = Stats::default();
            let mut seed = base.wrapping_add(w);
            loop {
                if let Err(failure) = run_seed(seed, &mut stats).await {
                    return Err(format!(
                        "seed {seed}: {failure}\n(replay: LEASEHOLD_FUZZ_SEED={seed} cargo test \
                         -p leasehold --test hostile_server)"
                    ));
                }
                seed = seed.wrapping_add(WORKERS);
                if replay.is_some() || begun.elapsed() >= budget {
                    return Ok(stats);
                }
            }
        });
    }
    let mut total = Stats::default();
    while let Some(done) = workers.join_next().await {
        match done.expect("a worker panicked outside an operation") {
            Ok(stats) => total.add(&stats),
            Err(failure) => panic!("{failure}"),
        }
    }
    eprintln!(
        "hostile server: {} seeds from {base} in {:?}: {} connected, {} operations, {} granted",
        total.seeds,
        begun.elapsed(),
        total.connected,
        total.operations,
        total.granted
    );
}

fn env_u64(name: &str) -> Option<u64> {
    let v = std::env::var(name).ok()?;
    Some(
        v.parse()
            .unwrap_or_else(|_| panic!("{name}={v:?} is not a number")),
    )
}

/// One seed: a server, a client, a round of operations.
async fn run_seed(seed: u64, stats: &mut Stats) -> Result<(), String> {
    stats.seeds += 1;
    // From mostly hostile to mostly honest: the handshake needs a run of usable replies.
    let honest = [60, 85, 93, 97][(seed % 4) as usize];
    let options = HostileOptions::new(seed)
        .honest_percent(honest)
        .slow(TIMEOUT + TIMEOUT / 2);
    let server = HostileServer::start(options).map_err(|e| e.to_string())?;
    // Every third seed over RESP3.
    let result = hostile::drive(&server, TIMEOUT, 3, seed.is_multiple_of(3), stats).await;
    let log = if result.is_err() {
        let lines: Vec<String> = server.log().iter().map(|e| format!("  {e}")).collect();
        lines.join("\n")
    } else {
        String::new()
    };
    // Closing the server joins its threads: not on the runtime's.
    tokio::task::spawn_blocking(move || drop(server))
        .await
        .map_err(|e| e.to_string())?;
    result.map_err(|f| format!("{f}\nthe server's log:\n{log}"))
}
