//! The command line's parsing: what is refused as it is read, and what is accepted.

use super::*;
use clap::CommandFactory;

#[test]
fn the_command_line_is_consistent() {
    Cli::command().debug_assert();
}

#[test]
fn durations() {
    assert_eq!(parse_duration("200ms"), Ok(Duration::from_millis(200)));
    assert_eq!(parse_duration("1m30s"), Ok(Duration::from_secs(90)));
    assert!(parse_duration("banana").is_err());
    assert!(parse_positive_duration("0s").is_err());
    assert_eq!(
        parse_positive_duration("50ms"),
        Ok(Duration::from_millis(50))
    );
}

// Found by the property test acquire_waits_through_the_command_line (tests/properties.rs;
// minimal input --wait 18446744073709551615.999999999s): the deadline now + wait overflowed
// the clock and `leasehold acquire` panicked (exit 101).
#[test]
fn waits_beyond_a_century_are_a_century() {
    for flag in [
        &["acquire", "k", "--ttl", "1s", "--wait"][..],
        &["run", "k", "--wait"][..],
    ] {
        let mut argv = vec!["leasehold"];
        argv.extend(flag);
        argv.push("18446744073709551615s");
        if argv[1] == "run" {
            argv.extend(["--", "true"]);
        }
        let wait = match Cli::try_parse_from(&argv).unwrap().command {
            Command::Acquire(a) => a.wait,
            Command::Run(r) => r.wait,
            _ => unreachable!(),
        };
        assert_eq!(wait, Some(leasehold::FOREVER), "{argv:?}");
    }
    assert_eq!(parse_wait("5s"), Ok(Duration::from_secs(5)));
}

// Found by the property test any_key_and_token_to_release_or_extend (tests/properties.rs;
// minimal input `extend --ttl 10s --token -0 -- " "`): a token that begins with `-` was
// taken for a flag, so a release or extend with it was a usage error (64).
#[test]
fn a_token_may_begin_with_a_hyphen() {
    for command in ["release", "extend"] {
        let mut argv = vec!["leasehold", command, "--token", "-0"];
        if command == "extend" {
            argv.extend(["--ttl", "10s"]);
        }
        argv.extend(["--", "k"]);
        let parsed = Cli::try_parse_from(&argv);
        assert!(parsed.is_ok(), "{argv:?}: {:?}", parsed.err());
    }
}

// Found by the property test bad_arguments_are_usage_errors_before_connecting
// (tests/properties.rs; minimal input `acquire --ttl 10s -- ""` at a closed port): an
// empty or over-long key, or --permits 0, was refused only after connecting, so an
// unreachable server made it 69 instead of 64.
#[test]
fn bad_keys_and_permits_are_refused_as_the_command_line_is_read() {
    let long = "k".repeat(leasehold::MAX_KEY_LEN + 1);
    for args in [
        &["acquire", "--ttl", "1s", "--", ""][..],
        &["acquire", "--ttl", "1s", "--", &long][..],
        &["acquire", "k", "--ttl", "1s", "--permits", "0"][..],
        &["acquire", "k", "--ttl", "1s", "--permits", "1000001"][..],
        &["release", "--token", "t", "--", ""][..],
        &["extend", "--token", "t", "--ttl", "1s", "--", ""][..],
        &["inspect", "--", ""][..],
        &["run", "--", "", "true"][..],
        &["run", "k", "--permits", "0", "--", "true"][..],
        &["elect", "--", "", "true"][..],
    ] {
        let argv = std::iter::once("leasehold").chain(args.iter().copied());
        let err = Cli::try_parse_from(argv).unwrap_err();
        assert_eq!(
            err.kind(),
            clap::error::ErrorKind::ValueValidation,
            "{args:?}"
        );
    }
    let max = "k".repeat(leasehold::MAX_KEY_LEN);
    Cli::try_parse_from(["leasehold", "inspect", &max]).unwrap();
    Cli::try_parse_from([
        "leasehold",
        "acquire",
        "k",
        "--ttl",
        "1s",
        "--permits",
        "1000000",
    ])
    .unwrap();
}

#[test]
fn urls_before_and_after_the_subcommand_add_up() {
    let cli = Cli::try_parse_from([
        "leasehold",
        "--url",
        "redis://a:1/",
        "--url",
        "redis://b:2/",
        "inspect",
        "k",
        "--url",
        "redis://c:3/",
    ])
    .unwrap();
    let servers = cli.servers();
    assert_eq!(
        servers.url,
        ["redis://a:1/", "redis://b:2/", "redis://c:3/"]
    );
    assert_eq!(servers.node_timeout, None);
    // The last --node-timeout counts; CMD's own arguments are CMD's.
    let cli = Cli::try_parse_from([
        "leasehold",
        "--node-timeout",
        "1s",
        "run",
        "k",
        "--node-timeout",
        "20ms",
        "--",
        "cmd",
        "--url",
        "x",
    ])
    .unwrap();
    let servers = cli.servers();
    assert!(servers.url.is_empty());
    assert_eq!(servers.node_timeout, Some(Duration::from_millis(20)));
}
