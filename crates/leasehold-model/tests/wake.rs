//! The tracking wake-up: when the tracking client is quiet, every sleeping waiter is covered
//! (the wake-up permit is set, or the key is held and tracked); without the read after an
//! invalidation, or without the attempt after registering, a release wakes nobody.

use leasehold_model::wake::WakeModel;
use leasehold_model::{assert_violated, check};

const MISSED: &str = "no missed release";

#[test]
fn no_release_is_missed_by_tracking_waiters() {
    let report = check(WakeModel::fixed());
    eprintln!(
        "wake: {} states, depth {}, {:?}",
        report.states, report.depth, report.elapsed
    );
    assert!(
        report.discovery(MISSED).is_none(),
        "{MISSED} violated:\n{}",
        report.trace(MISSED)
    );
    for example in [
        "a sleeper is woken by a read",
        "both waiters win",
        "a waiter registers on an armed key",
        "a waiter woken early attempts before the delete",
    ] {
        assert!(
            report.discovery(example).is_some(),
            "never reached: {example}"
        );
    }
    assert!(report.states > 10_000, "only {} states", report.states);
}

#[test]
fn without_the_read_after_an_invalidation_a_release_is_missed() {
    let model = WakeModel {
        no_reread: true,
        ..WakeModel::fixed()
    };
    assert_violated(model, MISSED, "wake (no re-read)");
}

#[test]
fn without_the_attempt_after_registering_a_release_is_missed() {
    let model = WakeModel {
        no_attempt_after_register: true,
        ..WakeModel::fixed()
    };
    assert_violated(model, MISSED, "wake (no attempt after registering)");
}
