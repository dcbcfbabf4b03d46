//! `clock-jump` on Redlock (`--nodes 3` or more): the scenario of the Redlock debate
//! (Kleppmann, "How to do distributed locking", 2016). Every lock node runs on its own
//! [`FakeClock`]; the fault
//!
//! 1. crashes a minority of the nodes (SIGKILL: the holder to come cannot reach them, as "D
//!    and E cannot be reached" in the debate),
//! 2. waits until a worker acquires a fresh lock on every other node: a bare majority,
//! 3. restarts the crashed nodes (empty: they were down since before that lock, so they never
//!    had it, and the lock before it is over: released, or expired on the majority that held
//!    it; Redlock's delayed-restart rule, about a node that granted a lock, is kept),
//! 4. moves the wall clock of one node of that bare majority forward by 2 TTLs: its copy of
//!    the lock expires at once. With the restarted nodes it makes a majority where the lock is
//!    free, and a waiter is granted it while the first holder still believes it holds (its
//!    validity runs on its own clock, which did not jump).
//!
//! Redlock assumes the nodes' clocks run at the same rate; a jump breaks that assumption, and
//! two valid holders overlap. Only fencing (the register refusing the older number) keeps the
//! data right.
//!
//! A node frozen (SIGSTOP) instead of crashed would not do: the holder's request waits in its
//! socket and is granted when the node resumes.

use std::path::Path;
use std::time::Duration;

use leasehold_harness::{FakeClock, Server};

use super::faults::Rng;
use super::hazard::token_on;
use super::worker::now_ms;

/// The clock of lock node `i`, its offset in a file of `dir`.
pub(crate) fn node_clock(dir: &Path, i: usize) -> anyhow::Result<FakeClock> {
    Ok(FakeClock::new(dir.join(format!("clock-{i}")))?)
}

/// Injects `clock-jump` on Redlock `nodes` (whose clocks are `clocks`); returns the nodes it
/// hit: the jumped node first, then the crashed minority.
pub(crate) async fn clock_jump(
    nodes: &mut [Server],
    clocks: &mut [FakeClock],
    ttl: Duration,
    rng: &mut Rng,
) -> anyhow::Result<Vec<usize>> {
    let n = nodes.len();
    let mut cut: Vec<usize> = Vec::new();
    while cut.len() < (n - 1) / 2 {
        let i = rng.below(n);
        if !cut.contains(&i) {
            cut.push(i);
        }
    }
    cut.sort_unstable();
    let live: Vec<usize> = (0..n).filter(|i| !cut.contains(i)).collect();
    let before = token_on(&nodes[live[0]]);
    for &i in &cut {
        nodes[i].kill();
    }
    // A lock acquired after the crash, held by exactly the live nodes (at most 4 TTLs: the
    // current holder releases, or its lease runs out, and a waiter gets a bare majority).
    let deadline = now_ms() + 4.0 * ttl.as_secs_f64() * 1000.0;
    while now_ms() < deadline {
        let tokens: Vec<Option<String>> = live.iter().map(|&i| token_on(&nodes[i])).collect();
        if tokens[0].is_some() && tokens[0] != before && tokens.iter().all(|t| *t == tokens[0]) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    for &i in &cut {
        nodes[i].restart()?;
    }
    let jumped = live[rng.below(live.len())];
    clocks[jumped].jump(ttl * 2)?;
    let mut hit = vec![jumped];
    hit.extend(cut);
    Ok(hit)
}
