//! The waiters' mark on PostgreSQL lease rows: when the waiting client is quiet, every sleeping
//! waiter is covered (each slot held and marked, or free by an expiry its pause covers), for a
//! lock and for a semaphore's permits; without the mark, without the second look at a slot freed
//! since the snapshot, or without the shortest pause after every look lost, a release wakes
//! nobody.

use leasehold_model::mark::MarkModel;
use leasehold_model::{assert_violated, check};

const MISSED: &str = "no missed release";

/// Checks `model` in full: no missed release, and each example reached.
fn assert_covered(model: MarkModel, what: &str, examples: &[&str]) {
    let report = check(model);
    eprintln!(
        "mark ({what}): {} states, depth {}, {:?}",
        report.states, report.depth, report.elapsed
    );
    assert!(
        report.discovery(MISSED).is_none(),
        "{what}: {MISSED} violated:\n{}",
        report.trace(MISSED)
    );
    for example in examples {
        assert!(
            report.discovery(example).is_some(),
            "{what}: never reached: {example}"
        );
    }
    assert!(
        report.states > 1_000,
        "{what}: only {} states",
        report.states
    );
}

#[test]
fn no_release_is_missed_by_a_locks_waiters() {
    assert_covered(
        MarkModel::lock(),
        "lock",
        &[
            "a sleeper is woken by a release",
            "both waiters win",
            "a waiter woken by its client's release attempts before the release runs",
            "a release seen while an attempt is out wakes nobody, and that attempt takes the lock",
        ],
    );
}

#[test]
fn no_release_is_missed_by_a_semaphores_waiters() {
    assert_covered(
        MarkModel::permits(),
        "permits",
        &[
            "a sleeper is woken by a release",
            "both waiters win",
            "a waiter looks again at a slot freed since its snapshot",
        ],
    );
}

#[test]
fn without_the_mark_a_release_is_missed() {
    let model = MarkModel {
        no_mark: true,
        ..MarkModel::lock()
    };
    assert_violated(model, MISSED, "mark (no mark)");
}

#[test]
fn without_the_second_look_a_permits_release_is_missed() {
    let model = MarkModel {
        no_second_look: true,
        ..MarkModel::permits()
    };
    assert_violated(model, MISSED, "mark (no second look)");
}

#[test]
fn without_the_shortest_pause_a_permits_release_is_missed() {
    let model = MarkModel {
        no_shortest_pause: true,
        ..MarkModel::permits()
    };
    assert_violated(model, MISSED, "mark (no shortest pause)");
}

#[test]
fn without_the_permit_a_locks_release_is_missed() {
    let model = MarkModel {
        no_permit: true,
        ..MarkModel::lock()
    };
    assert_violated(model, MISSED, "mark (no permit)");
}

#[test]
fn without_the_notify_after_a_local_wake_a_locks_release_is_missed() {
    let model = MarkModel {
        no_notify_after_local_wake: true,
        ..MarkModel::lock()
    };
    assert_violated(model, MISSED, "mark (no notify after a local wake)");
}

#[test]
fn without_the_hand_on_a_release_left_to_a_losing_attempt_is_missed() {
    let model = MarkModel {
        no_hand_on: true,
        ..MarkModel::lock()
    };
    assert_violated(model, MISSED, "mark (no hand-on)");
}
