//! The fair lock model: the fixed queue (no TTL) is safe; the old queue expiry is finding 1.

use leasehold_model::fair::FairModel;
use leasehold_model::{check, find};

const TWO_HOLDERS: &str = "never two holders with valid leases";

#[test]
fn the_fair_queue_without_a_ttl_never_has_two_holders() {
    let started = std::time::Instant::now();
    let report = check(FairModel::fixed());
    eprintln!(
        "fair (fixed): {} states, depth {}, {:?}",
        report.states,
        report.depth,
        started.elapsed()
    );
    assert!(
        report.discovery(TWO_HOLDERS).is_none(),
        "two holders:\n{}",
        report.trace(TWO_HOLDERS)
    );
    for example in [
        "a waiter holds an early lease",
        "a waiter of another client holds by message",
    ] {
        assert!(
            report.discovery(example).is_some(),
            "never reached: {example}"
        );
    }
    assert!(report.states > 10_000, "only {} states", report.states);
}

#[test]
fn finding_1_an_expiring_queue_gives_two_holders() {
    let report = find(FairModel::with_queue_expiry());
    eprintln!(
        "fair (queue expires): {} states\n{}",
        report.states,
        report.trace(TWO_HOLDERS)
    );
    assert!(
        report.discovery(TWO_HOLDERS).is_some(),
        "finding 1 not found in {} states",
        report.states
    );
}
