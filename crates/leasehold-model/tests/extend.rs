//! The extend model: the send-time rule is safe on one connection; the old rule is finding 2.

use leasehold_model::extend::ExtendModel;
use leasehold_model::{check, find};

const TWO_HOLDERS: &str = "never two holders with valid leases";

#[test]
fn extends_recorded_when_sent_never_outlast_the_key() {
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
    ] {
        assert!(
            report.discovery(example).is_some(),
            "never reached: {example}"
        );
    }
    assert!(report.states > 10_000, "only {} states", report.states);
}

#[test]
fn finding_2_an_ambiguous_extend_keeping_its_validity_gives_two_holders() {
    let report = find(ExtendModel::old_rule());
    eprintln!(
        "extend (old rule): {} states\n{}",
        report.states,
        report.trace(TWO_HOLDERS)
    );
    assert!(
        report.discovery(TWO_HOLDERS).is_some(),
        "finding 2 not found in {} states",
        report.states
    );
}

/// Each of these variants of the fixed rule has a counterexample: they are what
/// `docs/model-checking.md` reports as new findings about `guard.rs` as it stands.
fn assert_found(name: &str, model: ExtendModel) {
    let report = find(model);
    eprintln!(
        "extend ({name}): {} states\n{}",
        report.states,
        report.trace(TWO_HOLDERS)
    );
    assert!(
        report.discovery(TWO_HOLDERS).is_some(),
        "{name}: no counterexample in {} states",
        report.states
    );
}

#[test]
fn capping_by_the_newest_extend_only_is_not_enough() {
    // guard.rs keeps one `newest`: with three in flight, a short middle one is forgotten.
    let model = ExtendModel {
        cap_by_every_later: false,
        ..ExtendModel::fixed()
    };
    assert_found("newest only", model);
}

#[test]
fn extends_sent_at_the_same_instant_are_not_ordered() {
    let model = ExtendModel {
        order_by_instant: true,
        ..ExtendModel::fixed()
    };
    assert_found("ordered by instant", model);
}

#[test]
fn a_command_applied_after_a_later_one_breaks_the_rule() {
    let model = ExtendModel {
        any_order: true,
        ..ExtendModel::fixed()
    };
    assert_found("any order", model);
}

#[test]
fn a_renewer_with_a_shorter_ttl_than_an_extend_breaks_the_rule() {
    let model = ExtendModel {
        renewal_life: Some(2),
        ..ExtendModel::fixed()
    };
    assert_found("renewer shorter", model);
}
