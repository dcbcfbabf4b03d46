//! One round trip per operation, proven by the server's own command counters: acquire is one
//! command (one script with fencing), release one, extend one, and capability detection happens
//! once per connection, never per call.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::*;
use leasehold::{ExtendStrategy, LockOptions, ReleaseStrategy};
use leasehold_harness::Server;

const CYCLES: u64 = 1000;

/// calls per command from `INFO commandstats`, leaving out our own INFO/CONFIG.
fn command_calls(server: &Server) -> BTreeMap<String, u64> {
    let text = server.info("commandstats").unwrap();
    text.lines()
        .filter_map(|l| {
            let (name, rest) = l.strip_prefix("cmdstat_")?.split_once(':')?;
            let calls = rest
                .split(',')
                .find_map(|f| f.strip_prefix("calls="))?
                .parse()
                .ok()?;
            Some((name.to_string(), calls))
        })
        .filter(|(name, _)| !name.starts_with("info") && !name.starts_with("config"))
        .collect()
}

leasehold_harness::server_test!(async fn one_command_per_operation(bin) {
    let (server, client) = start(&bin).await;
    for fencing in [false, true] {
        let opts = LockOptions::new(Duration::from_secs(30)).fencing(fencing);
        // Warm-up: loads the scripts once, so NOSCRIPT reloads are not counted below.
        let g = client.try_acquire("warm", &opts).await.unwrap().acquired().unwrap();
        g.extend(Duration::from_secs(30)).await.unwrap();
        g.release().await.unwrap();

        server.command(&["CONFIG", "RESETSTAT"]).unwrap();
        for i in 0..CYCLES {
            let g = client.try_acquire(&format!("k{i}"), &opts).await.unwrap().acquired().unwrap();
            g.extend(Duration::from_secs(30)).await.unwrap();
            g.release().await.unwrap();
        }
        let calls = command_calls(&server);

        // What the client sends: exactly one command per operation. Commands that a script runs
        // inside the server are counted by commandstats too; they are listed separately.
        let (acquire, acquire_inner): (&str, &[&str]) =
            if fencing { ("evalsha", &["set", "incr"]) } else { ("set", &[]) };
        let (extend, extend_inner): (&str, &[&str]) = match client.extend_strategy() {
            ExtendStrategy::SetIfEq => ("set", &[]),
            _ => ("evalsha", &["get", "pexpire"]),
        };
        let (release, release_inner): (&str, &[&str]) = match client.release_strategy() {
            ReleaseStrategy::DelEx => ("delex", &[]),
            ReleaseStrategy::DelIfEq => ("delifeq", &[]),
            _ => ("evalsha", &["get", "del"]),
        };
        let mut expected = BTreeMap::new();
        let mut inner_total = 0;
        for name in [acquire, extend, release] {
            *expected.entry(name.to_string()).or_insert(0) += CYCLES;
        }
        for name in [acquire_inner, extend_inner, release_inner].concat() {
            *expected.entry(name.to_string()).or_insert(0) += CYCLES;
            inner_total += CYCLES;
        }
        let total: u64 = calls.values().sum();
        assert_eq!(total - inner_total, 3 * CYCLES, "fencing={fencing}: {calls:?}");
        assert_eq!(calls, expected, "fencing={fencing} on {}", bin.label());
    }
});
