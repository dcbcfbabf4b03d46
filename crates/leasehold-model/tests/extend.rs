//! The extend model: the sequence-numbered rule of `guard.rs` is safe when a lease's extends
//! are applied in send order; the rule before finding 2 and the intermediate rule (the newest
//! extend only, ordered by send instants) give two holders, and so does out-of-order
//! application, which is outside the rule's assumption.

use leasehold_model::extend::ExtendModel;
use leasehold_model::{check, find};

const TWO_HOLDERS: &str = "never two holders with valid leases";

#[test]
fn extends_ordered_by_sequence_number_never_outlast_the_key() {
    let report = check(ExtendModel::fixed());
    eprintln!(
        "extend (fixed): {} states, depth {}, {:?}",
        report.states, report.depth, report.elapsed
    );
    assert!(
        report.discovery(TWO_HOLDERS).is_none(),
        "two holders:\n{}",
        report.trace(TWO_HOLDERS)
    );
    for example in [
        "the other client takes the key",
        "a shortening extend is applied after a longer one",
        "a success confirmed with two later extends pending",
        "a success raises the validity past the first lifetime",
    ] {
        assert!(
            report.discovery(example).is_some(),
            "never reached: {example}"
        );
    }
    assert!(report.states > 400_000, "only {} states", report.states);
}

/// Each of these variants of the rule has a counterexample (printed with `--nocapture`).
fn assert_found(name: &str, model: ExtendModel) {
    let report = find(model);
    eprintln!(
        "extend ({name}): {} states, {:?}\n{}",
        report.states,
        report.elapsed,
        report.trace(TWO_HOLDERS)
    );
    assert!(
        report.discovery(TWO_HOLDERS).is_some(),
        "{name}: no counterexample in {} states",
        report.states
    );
}

#[test]
fn finding_2_an_ambiguous_extend_keeping_its_validity_gives_two_holders() {
    assert_found("old rule, finding 2", ExtendModel::old_rule());
}

#[test]
fn the_intermediate_rule_newest_extend_by_send_instant_gives_two_holders() {
    assert_found("intermediate rule", ExtendModel::intermediate_rule());
}

#[test]
fn capping_by_the_newest_extend_only_is_not_enough() {
    // One `newest` record, even ordered by sequence number: with three in flight, a short
    // middle one is forgotten.
    let model = ExtendModel {
        newest_only: true,
        ..ExtendModel::fixed()
    };
    assert_found("newest only", model);
}

#[test]
fn extends_sent_at_the_same_instant_are_not_ordered_by_instants() {
    // The pending list and watermark, but ordered by send instants: two extends sent at the
    // same instant are not "later" than each other.
    let model = ExtendModel {
        order_by_instant: true,
        ..ExtendModel::fixed()
    };
    assert_found("ordered by instant", model);
}

#[test]
fn a_command_applied_after_a_later_one_is_outside_the_assumption() {
    // Extends applied out of send order (across connections): no client-side rule can know.
    let model = ExtendModel {
        any_order: true,
        ..ExtendModel::fixed()
    };
    assert_found("any order", model);
}

/// [`ExtendModel::fixed`] with extends also sent after the validity ran out (about 1.5 million
/// states, 7-12 s here).
#[test]
fn extends_after_expiry_never_outlast_the_key() {
    let report = check(ExtendModel {
        extend_after_expiry: true,
        ..ExtendModel::fixed()
    });
    eprintln!(
        "extend (after expiry): {} states, depth {}, {:?}",
        report.states, report.depth, report.elapsed
    );
    assert!(
        report.discovery(TWO_HOLDERS).is_none(),
        "two holders:\n{}",
        report.trace(TWO_HOLDERS)
    );
    assert!(report.states > 1_000_000, "only {} states", report.states);
}
