//! The fair lock model: the fixed queue (no TTL) is safe; the old queue expiry is finding 1.

use leasehold_model::fair::FairModel;
use leasehold_model::{assert_violated, check};

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
    assert_violated(
        FairModel::with_queue_expiry(),
        TWO_HOLDERS,
        "fair (queue expires: finding 1)",
    );
}

const FENCING: &str = "fencing numbers strictly increase across holders";

#[test]
fn the_fenced_fair_lock_issues_increasing_numbers() {
    let report = check(FairModel::fenced());
    eprintln!(
        "fair (fenced): {} states, depth {}, {:?}",
        report.states, report.depth, report.elapsed
    );
    for property in [TWO_HOLDERS, FENCING] {
        assert!(
            report.discovery(property).is_none(),
            "{property} violated:\n{}",
            report.trace(property)
        );
    }
    for example in [
        "a waiter of another client holds by message",
        "a holder takes the fourth number",
        "a granted entry outlives its handoff's lock",
    ] {
        assert!(
            report.discovery(example).is_some(),
            "never reached: {example}"
        );
    }
    assert!(report.states > 10_000, "only {} states", report.states);
}

#[test]
fn finding_u2_a_stale_granted_entry_makes_fencing_go_backwards() {
    assert_violated(
        FairModel::with_stale_grant(),
        FENCING,
        "fair (stale granted entry: finding U2)",
    );
}
