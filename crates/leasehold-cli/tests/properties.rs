//! Property tests (proptest) of the command line: durations, argument parsing of every
//! subcommand, and the exit status each rejection maps to, in-process through the library's
//! entry points (`Cli::try_parse_from`, `ServerArgs::resolve`, `run`), plus a few cases through
//! the real binary for the process's exit code. Nothing connects outside this machine: URLs are
//! only parsed, or name 127.0.0.1.
//!
//! Modest case counts keep the binary within seconds; `PROPTEST_CASES=N` overrides them.
//! Failures are not persisted (no files in the source tree): a failure prints its minimal
//! input, which then becomes a named regression test.

#[path = "support/mod.rs"]
mod support;

use std::ffi::OsString;
use std::time::Duration;

use clap::Parser;
use leasehold_cli::{Cli, Exit, parse_duration, parse_positive_duration};
use proptest::prelude::*;
use proptest::test_runner::Config;

/// The binary under test.
const BIN: &str = env!("CARGO_BIN_EXE_leasehold");

/// `default_cases` cases (or `$PROPTEST_CASES`), nothing persisted.
fn cases(default_cases: u32) -> Config {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|c| c.parse().ok())
        .unwrap_or(default_cases);
    Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    }
}

/// Duration text: humantime's units with numbers of any size, combinations, signs, blanks,
/// and arbitrary text.
fn duration_text() -> impl Strategy<Value = String> {
    let unit = proptest::sample::select(
        &[
            "", "ns", "nsec", "us", "usec", "µs", "ms", "msec", "s", "sec", "secs", "second", "m",
            "min", "mins", "minute", "h", "hr", "hour", "hours", "d", "day", "days", "w", "week",
            "M", "month", "y", "year", "years", "x", "S", "MS",
        ][..],
    );
    let number = prop_oneof![
        "[0-9]{1,3}",
        "[0-9]{15,25}",
        Just("18446744073709551615".to_string()),
        Just("18446744073709551616".to_string()),
        "-[0-9]{1,3}",
        "\\+[0-9]{1,3}",
        "[0-9]\\.[0-9]",
    ];
    let part = (number, unit).prop_map(|(n, u)| format!("{n}{u}"));
    prop_oneof![
        3 => proptest::collection::vec(part, 1..4).prop_map(|v| v.join(" ")),
        1 => proptest::collection::vec("[0-9]{1,4}[a-z]{0,3}", 1..4).prop_map(|v| v.concat()),
        1 => any::<String>(),
        1 => Just(String::new()),
    ]
}

/// The exit status a parse error gets from the binary (see `leasehold_cli::clap_exit`), without
/// printing it: 0 for help and version, 64 otherwise.
fn parse_error_exit(err: &clap::Error) -> Exit {
    if err.use_stderr() {
        Exit::Usage
    } else {
        Exit::Success
    }
}

proptest! {
    #![proptest_config(cases(1024))]

    // Any text: no panic; an accepted duration prints and parses back to itself, and the
    // positive parser is the same but for zero.
    #[test]
    fn durations_parse_or_are_refused(text in duration_text()) {
        match parse_duration(&text) {
            Ok(d) => {
                let shown = humantime::format_duration(d).to_string();
                prop_assert_eq!(parse_duration(&shown), Ok(d), "{:?} -> {:?}", text, shown);
                prop_assert_eq!(parse_positive_duration(&text).is_ok(), !d.is_zero());
            }
            Err(e) => {
                prop_assert!(!e.is_empty());
                prop_assert!(parse_positive_duration(&text).is_err());
            }
        }
    }

    // Any duration that humantime can print parses back to itself.
    #[test]
    fn printed_durations_round_trip(secs in any::<u64>(), nanos in 0u32..1_000_000_000) {
        let d = Duration::new(secs, nanos);
        let shown = humantime::format_duration(d).to_string();
        prop_assert_eq!(parse_duration(&shown), Ok(d), "{}", shown);
    }

    // Through the command line: a duration flag takes exactly what the parser accepts (for a
    // TTL, also within the library's limits: `LockOptions::validate`, auto-extended for `run`),
    // and a refused one is a usage error (64).
    #[test]
    fn duration_flags_take_what_the_parser_accepts(
        text in duration_text(),
        case in 0..5usize,
    ) {
        let (flag, sub): (&str, &[&str]) = match case {
            0 => ("--ttl", &["acquire", "k"]),
            1 => ("--ttl", &["run", "k"]),
            2 => ("--wait", &["acquire", "k", "--ttl", "1s"]),
            3 => ("--node-timeout", &["acquire", "k", "--ttl", "1s"]),
            _ => ("--kill-grace", &["run", "k", "--ttl", "1s"]),
        };
        let mut argv: Vec<&str> = vec!["leasehold"];
        argv.extend(sub);
        let with_value = format!("{flag}={text}");
        argv.push(&with_value);
        if sub[0] == "run" {
            argv.extend(["--", "true"]);
        }
        let ttl_ok = |d: Duration| {
            let options = leasehold::LockOptions::new(d).auto_extend(case == 1);
            options.validate().map(|()| d).map_err(|e| e.to_string())
        };
        let expected = match case {
            0 | 1 => parse_duration(&text).and_then(ttl_ok),
            3 => parse_positive_duration(&text),
            _ => parse_duration(&text),
        };
        match (Cli::try_parse_from(&argv), expected) {
            (Ok(_), Ok(_)) => {}
            (Err(e), Err(_)) => {
                prop_assert_eq!(e.kind(), clap::error::ErrorKind::ValueValidation);
                prop_assert_eq!(parse_error_exit(&e), Exit::Usage);
            }
            (got, expected) => prop_assert!(false, "{argv:?}: {got:?} vs {expected:?}"),
        }
    }
}

/// One argument of a command line: a flag any subcommand knows, a value, or anything.
fn arg() -> impl Strategy<Value = OsString> {
    let flag = proptest::sample::select(
        &[
            "--ttl",
            "--wait",
            "--no-wait",
            "--fencing",
            "--fair",
            "--permits",
            "--read",
            "--write",
            "--json",
            "--token",
            "--url",
            "--node-timeout",
            "--cluster",
            "--sentinel-master",
            "--tls-ca-file",
            "--kill-grace",
            "--conflict-exit-code",
            "--metrics-addr",
            "--id",
            "--",
            "-h",
            "--help",
            "-V",
            "--version",
            "-",
            "--ttl=",
            "--url=",
        ][..],
    );
    let url = prop_oneof![
        "(redis|rediss|valkey|redis-cluster|redis-sentinel|redlock|etcd|postgres|mysql)://[a-z0-9.:,@#/]{0,20}",
        Just("redis://127.0.0.1:1/".to_string()),
        Just("etcd://127.0.0.1:1".to_string()),
    ];
    prop_oneof![
        4 => flag.prop_map(OsString::from),
        2 => duration_text().prop_map(OsString::from),
        2 => url.prop_map(OsString::from),
        1 => "[0-9]{1,6}".prop_map(OsString::from),
        1 => any::<String>().prop_map(OsString::from),
        1 => proptest::collection::vec(any::<u8>(), 0..6).prop_map(|b| {
            use std::os::unix::ffi::OsStringExt;
            OsString::from_vec(b) // possibly not UTF-8
        }),
    ]
}

/// A command line: the program, maybe global flags, a subcommand (or anything), arguments.
fn argv() -> impl Strategy<Value = Vec<OsString>> {
    let sub = prop_oneof![
        4 => proptest::sample::select(&["acquire", "release", "extend", "inspect", "run", "elect"][..])
            .prop_map(OsString::from),
        1 => arg(),
    ];
    (
        proptest::collection::vec(arg(), 0..3),
        sub,
        proptest::collection::vec(arg(), 0..8),
    )
        .prop_map(|(global, sub, rest)| {
            let mut argv = vec![OsString::from("leasehold")];
            argv.extend(global);
            argv.push(sub);
            argv.extend(rest);
            argv
        })
}

proptest! {
    #![proptest_config(cases(1024))]

    // Any command line: no panic; a rejection is a usage error (64), or help/version (0); an
    // accepted one either names its servers or is refused as a usage error too, before any
    // connection (all of this is what `main` and `run` do before connecting).
    #[test]
    fn any_command_line_parses_or_is_a_usage_error(argv in argv()) {
        match Cli::try_parse_from(&argv) {
            Err(e) => {
                let exit = parse_error_exit(&e);
                if exit == Exit::Success {
                    prop_assert!(
                        matches!(e.kind(), clap::error::ErrorKind::DisplayHelp | clap::error::ErrorKind::DisplayVersion),
                        "{:?} exits 0", e.kind()
                    );
                }
                let _ = e.render();
            }
            Ok(cli) => {
                if let Err(usage) = cli.servers().resolve() {
                    prop_assert_eq!(Exit::of(&anyhow::Error::new(usage)), Exit::Usage);
                }
            }
        }
    }
}

// Through the real binary, a few cases: the process's exit status for bad durations (64),
// help and version (0), and bad URLs, refused before connecting (64).
#[test]
fn the_binary_exits_64_on_bad_arguments() {
    let mut runner = proptest::test_runner::TestRunner::new(cases(8));
    let bad = duration_text().prop_filter("refused", |t| parse_duration(t).is_err());
    runner
        .run(&bad, |text| {
            let ttl = format!("--ttl={text}");
            let run = support::leasehold(&["--url", "redis://127.0.0.1:1/", "acquire", "k", &ttl]);
            prop_assert_eq!(run.code, 64, "{:?}: {}", text, run.stderr);
            Ok(())
        })
        .unwrap();
    for (args, code) in [
        (&["--help"][..], 0),
        (&["acquire", "--help"][..], 0),
        (&["--version"][..], 0),
        (&[][..], 64),
        (&["frobnicate"][..], 64),
        (&["acquire", "k"][..], 64),
        (
            &["--url", "redis-cluster://127.0.0.1:99999", "inspect", "k"][..],
            64,
        ),
        (
            &["--url", "redis-cluster://127.0.0.1:+1", "inspect", "k"][..],
            64,
        ),
        (
            &["--url", "redlock://127.0.0.1:1,127.0.0.1:0", "inspect", "k"][..],
            64,
        ),
        (&["--url", "mysql://127.0.0.1:1/", "inspect", "k"][..], 64),
        (
            &["--cluster", "--sentinel-master", "m", "inspect", "k"][..],
            64,
        ),
        (
            &[
                "--url",
                "etcd://127.0.0.1:1",
                "--url",
                "redis://127.0.0.1:1/",
                "inspect",
                "k",
            ][..],
            64,
        ),
    ] {
        let run = support::leasehold(args);
        assert_eq!(run.code, code, "leasehold {args:?}: {}", run.stderr);
    }
}

/// A TTL as `leasehold acquire --ttl` takes it: around the bounds, or anywhere between.
fn ttl() -> impl Strategy<Value = Duration> {
    use leasehold::{MAX_TTL, MIN_TTL};
    prop_oneof![
        (0u64..=60).prop_map(Duration::from_millis),
        Just(MIN_TTL),
        Just(MIN_TTL - Duration::from_nanos(1)),
        (1u64..=MAX_TTL.as_secs()).prop_map(Duration::from_secs),
        Just(MAX_TTL),
        Just(MAX_TTL + Duration::from_millis(1)),
    ]
}

/// The exit status of `argv`, in-process as the binary does it: a parse error's status, or
/// what `leasehold_cli::run` returns (on the current runtime).
fn exit_of(argv: &[&str]) -> std::process::ExitCode {
    match Cli::try_parse_from(argv) {
        Err(e) => parse_error_exit(&e).into(),
        Ok(cli) => block_on(tokio::time::timeout(
            Duration::from_secs(60),
            leasehold_cli::run(cli),
        ))
        .expect("leasehold hangs"),
    }
}

/// Runs the async `future` on the current (multi-threaded) runtime from proptest's runner.
fn block_on<F: std::future::Future>(future: F) -> F::Output {
    tokio::task::block_in_place(|| tokio::runtime::Handle::current().block_on(future))
}

// `acquire --ttl T` on a real server, through the binary (what succeeds prints a token, on a
// stdout the test harness would not capture in-process): a TTL outside MIN_TTL ..= MAX_TTL is
// a usage error (64) and takes nothing; one of a second or more is acquired (0). In between, a
// grant can still arrive after its validity (a loaded machine, TTLs of milliseconds): 75, the
// grant given back, try again (it was 70, "unexpected failure").
leasehold_harness::server_test!(async fn acquire_ttls_through_the_command_line(bin) {
    use leasehold_harness::{Server, ServerOptions};
    let server = Server::start(&bin, &ServerOptions::new()).expect("server starts");
    let url = server.url();
    let mut runner = proptest::test_runner::TestRunner::new(cases(32));
    let n = std::sync::atomic::AtomicUsize::new(0);
    let result = runner.run(&ttl(), |ttl| {
        // A fresh key per case (and per shrinking step): a held one would answer 75.
        let key = format!("ttl:{}", n.fetch_add(1, std::sync::atomic::Ordering::Relaxed));
        let text = humantime::format_duration(ttl).to_string();
        let run = support::leasehold(&["--url", &url, "acquire", &key, "--ttl", &text]);
        let in_range = (leasehold::MIN_TTL..=leasehold::MAX_TTL).contains(&ttl);
        if !in_range {
            prop_assert_eq!(run.code, 64, "--ttl {}: {}", text, run.stderr);
            let held = server.command(&["EXISTS", &key]).unwrap().as_integer();
            prop_assert_eq!(held, Some(0), "--ttl {}: refused, yet the key was set", text);
        } else if ttl >= Duration::from_secs(1) {
            prop_assert_eq!(run.code, 0, "--ttl {}: {}", text, run.stderr);
        } else {
            prop_assert!(run.code == 0 || run.code == 75, "--ttl {text}: {run:?}");
        }
        Ok(())
    });
    if let Err(e) = result {
        panic!("{e}");
    }
});

/// Any duration humantime prints, weighted towards the largest.
fn any_duration() -> impl Strategy<Value = Duration> {
    prop_oneof![
        Just(Duration::MAX),
        (0u64..=u64::MAX / 2).prop_map(Duration::from_secs),
        (any::<u64>(), 0u32..1_000_000_000).prop_map(|(s, n)| Duration::new(s, n)),
        (0u64..10_000).prop_map(Duration::from_millis),
    ]
}

// `acquire --wait W` of a free lock, through the binary, for any W that parses (up to
// Duration::MAX): acquired (0), never a panic (101).
leasehold_harness::server_test!(async fn acquire_waits_through_the_command_line(bin) {
    use leasehold_harness::{Server, ServerOptions};
    let server = Server::start(&bin, &ServerOptions::new()).expect("server starts");
    let url = server.url();
    let mut runner = proptest::test_runner::TestRunner::new(cases(16));
    let n = std::sync::atomic::AtomicUsize::new(0);
    let result = runner.run(&(any_duration(), any::<bool>()), |(wait, fair)| {
        let key = format!("wait:{}", n.fetch_add(1, std::sync::atomic::Ordering::Relaxed));
        let text = humantime::format_duration(wait).to_string();
        let mut args = vec!["--url", &url, "acquire", &key, "--ttl", "10s", "--wait", &text];
        if fair {
            args.push("--fair");
        }
        let run = support::leasehold(&args);
        prop_assert_eq!(run.code, 0, "--wait {}: {}", text, run.stderr);
        Ok(())
    });
    if let Err(e) = result {
        panic!("{e}");
    }
});

/// A `--permits` value: out of range (0, above MAX_PERMITS) or within.
fn permits() -> impl Strategy<Value = u32> {
    prop_oneof![
        Just(0),
        Just(leasehold::MAX_PERMITS),
        Just(leasehold::MAX_PERMITS + 1),
        Just(u32::MAX),
        1..=leasehold::MAX_PERMITS,
    ]
}

// A bad argument is a usage error (64) whatever the server: an empty or over-long key (or
// election name) and a permit count outside 1 ..= MAX_PERMITS are refused before connecting
// (the server here is a closed port of 127.0.0.1: connecting would be 69).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_arguments_are_usage_errors_before_connecting() {
    let closed = support::closed_port();
    let url = closed.redis_url();
    let mut runner = proptest::test_runner::TestRunner::new(cases(32));
    let inputs = (0..6usize, text(), proptest::option::of(permits()));
    let result = runner.run(&inputs, |(command, key, permits)| {
        let permits_text = permits.map(|p| p.to_string());
        let mut argv: Vec<&str> = vec!["leasehold", "--url", &url];
        argv.extend(match command {
            0 => &["acquire", "--ttl", "10s"][..],
            1 => &["release", "--token", "t"][..],
            2 => &["extend", "--token", "t", "--ttl", "10s"][..],
            3 => &["inspect"][..],
            4 => &["run"][..],
            _ => &["elect"][..],
        });
        let takes_permits = matches!(command, 0 | 1 | 2 | 4);
        if let (true, Some(p)) = (takes_permits, &permits_text) {
            argv.extend(["--permits", p]);
        }
        argv.extend(["--", &key]);
        if command >= 4 {
            argv.push("true");
        }
        let key_ok = !key.is_empty() && key.len() <= leasehold::MAX_KEY_LEN;
        let permits_ok =
            !takes_permits || permits.is_none_or(|p| (1..=leasehold::MAX_PERMITS).contains(&p));
        let code = exit_of(&argv);
        let expected = if key_ok && permits_ok {
            Exit::Unavailable
        } else {
            Exit::Usage
        };
        prop_assert_eq!(code, expected.into(), "{:?}", &argv[3..]);
        Ok(())
    });
    if let Err(e) = result {
        panic!("{e}");
    }
}

/// Schemes of every backend the command line reaches (and one it does not know).
const SCHEMES: &[&str] = &[
    "redis",
    "rediss",
    "valkey",
    "redis-cluster",
    "rediss-cluster",
    "redis-sentinel",
    "redlock",
    "rediss-redlock",
    "etcd",
    "postgres",
    "postgresql",
    "mysql",
];

// Whatever goes wrong with a URL that carries a password (malformed, or nothing listening at
// 127.0.0.1:1), the error `leasehold` prints does not show the password.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errors_never_show_the_password() {
    let mut runner = proptest::test_runner::TestRunner::new(cases(24));
    let inputs = (
        proptest::sample::select(SCHEMES),
        proptest::sample::select(
            &[
                ":1",
                ":0",
                ":99999",
                ":1#",
                ":1/x#m",
                ":1/0#m",
                ":1,127.0.0.1:2",
            ][..],
        ),
        "[a-z]{0,3}",
        "[A-Z]{12}",
    );
    let result = runner.run(&inputs, |(scheme, tail, user, password)| {
        let url = format!("{scheme}://{user}:{password}@127.0.0.1{tail}");
        let servers = leasehold_cli::ServerArgs {
            url: vec![url.clone()],
            ..Default::default()
        };
        let err = match servers.resolve() {
            Err(usage) => anyhow::Error::new(usage),
            Ok(servers) => match block_on(tokio::time::timeout(
                Duration::from_secs(60),
                servers.connect(),
            )) {
                Ok(Err(e)) => e,
                Ok(Ok(_)) => {
                    return Err(TestCaseError::fail(format!("{url}: connected to nothing")));
                }
                Err(_) => return Err(TestCaseError::fail(format!("{url}: connecting hangs"))),
            },
        };
        let shown = format!("{}\n{err:?}", leasehold_cli::exit::render(&err));
        prop_assert!(!shown.contains(&password), "{}: {}", url, shown);
        Ok(())
    });
    if let Err(e) = result {
        panic!("{e}");
    }
}

/// Keys and tokens as a shell could pass them, and then some: empty, blanks, braces,
/// control characters, any text, and lengths around the key limit.
fn text() -> impl Strategy<Value = String> {
    let max = leasehold::MAX_KEY_LEN;
    prop_oneof![
        4 => "[a-z{}: ]{0,8}",
        2 => any::<String>(),
        1 => Just(String::new()),
        1 => proptest::sample::select(vec![max, max + 1]).prop_map(|n| "k".repeat(n)),
    ]
}

// `release` and `extend` with any key and token on a real server, in-process: a key outside
// 1 ..= MAX_KEY_LEN bytes or an empty token is a usage error (64); otherwise a token that holds
// nothing is "not held" (1). Nothing else (no 70). (Not `inspect`: what succeeds prints on the
// process's stdout, which the test harness does not capture.)
leasehold_harness::server_test!(async fn any_key_and_token_to_release_or_extend(bin) {
    use leasehold_harness::{Server, ServerOptions};
    let server = Server::start(&bin, &ServerOptions::new()).expect("server starts");
    let url = server.url();
    let mut runner = proptest::test_runner::TestRunner::new(cases(32));
    let result = runner.run(&(text(), text(), any::<bool>()), |(key, token, release)| {
        let argv: Vec<&str> = if release {
            vec!["leasehold", "--url", &url, "release", "--token", &token, "--", &key]
        } else {
            vec!["leasehold", "--url", &url, "extend", "--ttl", "10s", "--token", &token, "--", &key]
        };
        let code = exit_of(&argv);
        let key_ok = !key.is_empty() && key.len() <= leasehold::MAX_KEY_LEN;
        let expected = if !key_ok || token.is_empty() { Exit::Usage } else { Exit::NotHeld };
        prop_assert_eq!(code, expected.into(), "{:?}", &argv[3..argv.len() - 1]);
        Ok(())
    });
    if let Err(e) = result {
        panic!("{e}");
    }
});
