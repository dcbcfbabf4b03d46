//! The extend model: the fixed rule (every extend pending until its call returned and its
//! bound passed, caps folded when it leaves) is safe under re-sends and commands overtaken
//! within their bound; the rule at ea1f4f2 is safe only without re-sends (finding U1), and a
//! first fix that forgets extends at their answer is not; the rules before finding 2 and the
//! intermediate rule give two holders, and so does application beyond the bound.

use leasehold_model::extend::{ExtendModel, Rule};
use leasehold_model::{Report, assert_violated, check};

const OURS: &str = "the key is ours while we believe we hold it";

fn assert_safe(name: &str, report: &Report, min_states: usize) {
    eprintln!(
        "extend ({name}): {} states, depth {}, {:?}",
        report.states, report.depth, report.elapsed
    );
    assert!(
        report.discovery(OURS).is_none(),
        "{name}: {OURS} violated:\n{}",
        report.trace(OURS)
    );
    assert!(
        report.states > min_states,
        "{name}: only {} states",
        report.states
    );
}

#[test]
fn extends_kept_until_their_bound_never_outlast_the_key_under_resends() {
    let report = check(ExtendModel::fixed());
    assert_safe("fixed", &report, 1_000_000);
    for example in [
        "the key expires while A holds",
        "the key expires before a confirmed extend's bound",
        "an older extend is on the wire after a later one was confirmed",
        "a success raises the validity past the first lifetime",
    ] {
        assert!(
            report.discovery(example).is_some(),
            "never reached: {example}"
        );
    }
}

/// The rule at ea1f4f2 is right under its own assumption (no re-send, send order).
#[test]
fn the_sequence_rule_is_safe_without_resends() {
    let report = check(ExtendModel::in_send_order());
    assert_safe("ea1f4f2, no re-sends", &report, 10_000);
}

/// Each of these rules has a counterexample (printed with `--nocapture`).
fn assert_found(name: &str, model: ExtendModel) -> Report {
    assert_violated(model, OURS, &format!("extend ({name})"))
}

#[test]
fn finding_u1_a_resent_older_extend_outlasts_a_forgetting_rule() {
    assert_found(
        "ea1f4f2 with re-sends, U1",
        ExtendModel::forget_older_with_resends(),
    );
}

#[test]
fn forgetting_an_extend_at_its_answer_is_not_enough() {
    assert_found("drop at answer", ExtendModel::drop_at_answer());
}

/// Even without forgetting unanswered extends at their bound: an extend confirmed by a re-send
/// applied after a later extend leaves at once, and the later one's success is uncapped.
#[test]
fn forgetting_a_confirmed_extend_at_once_is_not_enough() {
    assert_found(
        "drop confirmed",
        ExtendModel {
            rule: Rule::DropConfirmed,
            ..ExtendModel::drop_at_answer()
        },
    );
}

#[test]
fn finding_2_an_ambiguous_extend_keeping_its_validity_is_unsafe() {
    assert_found("old rule, finding 2", ExtendModel::old_rule());
}

#[test]
fn the_intermediate_rule_newest_extend_by_send_instant_is_unsafe() {
    assert_found("intermediate rule", ExtendModel::intermediate_rule());
}

#[test]
fn capping_by_the_newest_extend_only_is_not_enough() {
    assert_found(
        "newest only",
        ExtendModel {
            newest_only: true,
            ..ExtendModel::in_send_order()
        },
    );
}

#[test]
fn extends_sent_at_the_same_instant_are_not_ordered_by_instants() {
    assert_found(
        "ordered by instant",
        ExtendModel {
            order_by_instant: true,
            ..ExtendModel::in_send_order()
        },
    );
}

/// A command overtaken and applied after its own bound, its call returned: beyond the
/// assumption (without re-sends, which this counterexample does not need).
#[test]
fn a_command_applied_after_its_bound_is_outside_the_assumption() {
    assert_found(
        "any order",
        ExtendModel {
            any_order: true,
            reorder_within_bound: false,
            max_resends: 0,
            ..ExtendModel::fixed()
        },
    );
}

#[test]
fn the_sequence_rule_fails_when_commands_overtake_each_other() {
    assert_found(
        "ea1f4f2, overtaken within bound",
        ExtendModel {
            reorder_within_bound: true,
            ..ExtendModel::in_send_order()
        },
    );
}

/// The fixed rule with `LockGuard::extend` also called after the validity ran out (a success
/// raising it again), without the renewer and with horizon 3 to keep it short (the full
/// bounds: about 5 million states, no counterexample either).
#[test]
fn extends_after_expiry_never_outlast_the_key() {
    let model = ExtendModel {
        extend_after_expiry: true,
        renewal_life: None,
        horizon: 3,
        ..ExtendModel::fixed()
    };
    assert_eq!(model.rule, Rule::KeepUntilBound);
    assert_safe("fixed, extends after expiry", &check(model), 10_000);
}
