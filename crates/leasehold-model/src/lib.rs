//! Stateright models of leasehold's protocols (issue 22, section 2), checked exhaustively
//! within small bounds by this crate's tests (`cargo test -p leasehold-model`).
//!
//! - [`fair`]: the fair lock's queue and its three handoffs (by message, by reply, early within
//!   a client), with entry expiry, lost / duplicated / delayed messages and replies, waiters
//!   that leave or crash, a release retried; `queue_expires` restores finding 1. With
//!   fencing, attempts whose script runs twice; `stale_grant` restores finding U2.
//! - [`extend`]: extend and renewal with ambiguous outcomes (replies lost, commands applied
//!   late, re-sent by the client, overtaken within their bound); `Rule::ForgetOlder`
//!   restores finding U1, `ambiguous_keeps_validity` finding 2.
//! - [`redlock`]: Redlock with fencing over majorities that differ, nodes restarting with and
//!   without their data.
//! - [`acquire`]: the acquisition every primitive shares (plain lock, semaphore, read-write
//!   lock, election), with renewals racing a release and `min_hold`; `kept_token` restores
//!   finding L2.
//! - [`wake`]: the tracking wake-up (waiters woken by the key's invalidation, no release
//!   message), with replies and invalidations seen in either order; `no_reread` and
//!   `no_attempt_after_register` each leave a release that wakes nobody.
//! - [`mark`]: the waiters' mark on PostgreSQL lease rows (a release notifies only a row a
//!   waiter marked), for a lock and for a semaphore's permits picked by snapshot; `no_mark`,
//!   `no_second_look` and `no_shortest_pause` each leave a release that wakes nobody.
//!
//! Every action names the Lua script or Rust function it mirrors. The properties: never two
//! holders with valid leases (model time, drift folded into the lifetimes; for the extend
//! model, the key holds our token whenever we believe we hold it), never more holders than
//! the slots allow, fencing numbers and election terms strictly increase across holders, and
//! a min-hold release frees the key by `t + hold`. Bounds, results and what is not modelled:
//! `docs/model-checking.md`.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod acquire;
pub mod extend;
pub mod fair;
pub mod mark;
pub mod redlock;
pub mod wake;

use stateright::{Checker, HasDiscoveries, Model};

/// What a full check found.
#[derive(Debug)]
pub struct Report {
    /// Unique states visited.
    pub states: usize,
    /// Deepest path explored.
    pub depth: usize,
    /// How long the check took.
    pub elapsed: std::time::Duration,
    /// Each property's discovery (a counterexample for an `always` property, an example for a
    /// `sometimes` one), as its actions one per line and then the last state.
    pub discoveries: Vec<(&'static str, String)>,
}

/// Checks `model` breadth first on one thread (shortest counterexamples), to completion.
pub fn check<M>(model: M) -> Report
where
    M: Model + Send + Sync + 'static,
    M::State: Clone + std::fmt::Debug + std::hash::Hash + PartialEq + Send + Sync + 'static,
    M::Action: Clone + std::fmt::Debug + PartialEq + Send + Sync + 'static,
{
    run(model, HasDiscoveries::All)
}

/// Checks `model` as [`check`] does, but stops at the first violated `always` property (a
/// bug flag's run: the shortest counterexample, without exploring the rest).
pub fn find<M>(model: M) -> Report
where
    M: Model + Send + Sync + 'static,
    M::State: Clone + std::fmt::Debug + std::hash::Hash + PartialEq + Send + Sync + 'static,
    M::Action: Clone + std::fmt::Debug + PartialEq + Send + Sync + 'static,
{
    run(model, HasDiscoveries::AnyFailures)
}

fn run<M>(model: M, until: HasDiscoveries) -> Report
where
    M: Model + Send + Sync + 'static,
    M::State: Clone + std::fmt::Debug + std::hash::Hash + PartialEq + Send + Sync + 'static,
    M::Action: Clone + std::fmt::Debug + PartialEq + Send + Sync + 'static,
{
    let started = std::time::Instant::now();
    let checker = model
        .checker()
        .finish_when(until)
        .threads(1)
        .spawn_bfs()
        .join();
    let mut discoveries: Vec<_> = checker
        .discoveries()
        .into_iter()
        .map(|(name, path)| {
            let mut trace = String::new();
            for (state, action) in path.into_vec() {
                match action {
                    Some(a) => trace.push_str(&format!("  {a:?}\n")),
                    None => trace.push_str(&format!("  => {state:?}\n")),
                }
            }
            (name, trace)
        })
        .collect();
    discoveries.sort_by_key(|(name, _)| *name);
    Report {
        states: checker.unique_state_count(),
        depth: checker.max_depth(),
        elapsed: started.elapsed(),
        discoveries,
    }
}

/// Checks a bug flag's `model` as [`find`] does, until its `always` property `property` fails:
/// prints the counterexample (with `--nocapture`), labelled `what`, and panics if there is none.
/// The report, for further checks.
pub fn assert_violated<M>(model: M, property: &str, what: &str) -> Report
where
    M: Model + Send + Sync + 'static,
    M::State: Clone + std::fmt::Debug + std::hash::Hash + PartialEq + Send + Sync + 'static,
    M::Action: Clone + std::fmt::Debug + PartialEq + Send + Sync + 'static,
{
    let report = find(model);
    eprintln!(
        "{what}: {} states, {:?}\n{}",
        report.states,
        report.elapsed,
        report.trace(property)
    );
    assert!(
        report.discovery(property).is_some(),
        "{what}: {property:?} never violated in {} states",
        report.states
    );
    report
}

impl Report {
    /// The discovery for `property`, if any.
    pub fn discovery(&self, property: &str) -> Option<&str> {
        self.discoveries
            .iter()
            .find(|(name, _)| *name == property)
            .map(|(_, t)| t.as_str())
    }

    /// The discovery for `property` for an assertion message.
    pub fn trace(&self, property: &str) -> String {
        self.discovery(property)
            .map_or_else(|| format!("no discovery for {property:?}"), str::to_string)
    }
}
