//! The lock history from the shell: `LEASEHOLD_HISTORY=1` records, `inspect --history` shows.

use crate::support::{leasehold_at, leasehold_env};
use leasehold_harness::{Server, ServerOptions, server_test};

/// `leasehold --url URL args...` with history recorded.
fn recording(url: &str, args: &[&str]) -> crate::support::Run {
    let mut all = vec!["--url", url];
    all.extend(args);
    leasehold_env(&all, &[("LEASEHOLD_HISTORY", "1")])
}

server_test!(async fn run_records_and_inspect_shows_the_history(bin) {
    let server = Server::start(&bin, &ServerOptions::new()).expect("server starts");
    let url = server.url();
    let key = "jobs:history";

    // Off by default: nothing recorded.
    leasehold_at(&url, &["run", key, "--", "true"]).expect(0);
    let state = leasehold_at(&url, &["inspect", key, "--history", "--json"])
        .expect(0)
        .json();
    assert_eq!(state["history"], serde_json::json!([]), "{state}");

    // On: `run` records its acquisition and its release, with the fencing number.
    let out = recording(
        &url,
        &["run", key, "--fencing", "--", "sh", "-c", "echo $LEASEHOLD_FENCING_TOKEN"],
    )
    .expect(0);
    let fencing: u64 = out.stdout.trim().parse().expect("a fencing number");
    let state = leasehold_at(&url, &["inspect", key, "--history", "--json"])
        .expect(0)
        .json();
    let events = state["history"].as_array().expect("history").clone();
    let kinds: Vec<(&str, Option<u64>)> = events
        .iter()
        .map(|e| (e["event"].as_str().unwrap(), e["fencing_token"].as_u64()))
        .collect();
    assert_eq!(
        kinds,
        vec![("released", Some(fencing)), ("acquired", Some(fencing))],
        "{state}"
    );
    assert!(events[0]["at_ms"].as_u64().unwrap() > 0, "{state}");
    assert!(events[0]["holder"].as_str().unwrap().starts_with('#'), "{state}");

    // `acquire` and `release` by token record too; `--history=1` keeps the newest.
    let token = recording(&url, &["acquire", key, "--ttl", "1m"]).expect(0).stdout;
    let token = token.lines().next().expect("a token").to_string();
    recording(&url, &["release", key, "--token", &token]).expect(0);
    let state = leasehold_at(&url, &["inspect", key, "--history=1", "--json"])
        .expect(0)
        .json();
    let events = state["history"].as_array().expect("history");
    assert_eq!(events.len(), 1, "{state}");
    assert_eq!(events[0]["event"], "released", "{state}");

    // The table for people, newest first.
    let text = leasehold_at(&url, &["inspect", key, "--history"]).expect(0).stdout;
    let released = text.find("released").expect("a released line");
    let acquired = text.find("acquired").expect("an acquired line");
    assert!(released < acquired, "{text}");
    assert!(text.contains(&fencing.to_string()), "{text}");
});

#[test]
fn history_is_refused_where_there_is_none_and_a_bad_setting_is_a_usage_error() {
    let dir = tempfile::tempdir().expect("a folder");
    let url = format!("file://{}", dir.path().display());
    let out = recording(&url, &["run", "k", "--", "true"]).expect(64);
    assert!(out.stderr.contains("history"), "{}", out.stderr);
    let out = leasehold_at(&url, &["inspect", "k", "--history"]).expect(64);
    assert!(out.stderr.contains("file"), "{}", out.stderr);
    let out = leasehold_env(
        &["--url", &url, "run", "k", "--", "true"],
        &[("LEASEHOLD_HISTORY", "maybe")],
    )
    .expect(64);
    assert!(out.stderr.contains("LEASEHOLD_HISTORY"), "{}", out.stderr);
}
