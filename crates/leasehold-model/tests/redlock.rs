//! The Redlock model: with nodes that keep their data both properties hold; a node that
//! restarts without its counter breaks fencing (the documented limit).

use leasehold_model::redlock::RedlockModel;
use leasehold_model::{assert_violated, check};

const TWO_HOLDERS: &str = "never two holders with valid leases";
const FENCING: &str = "fencing numbers strictly increase across holders";

#[test]
fn redlock_with_restarts_that_keep_data_is_safe_and_fenced() {
    let report = check(RedlockModel::with_data());
    eprintln!(
        "redlock (restarts keep data): {} states, depth {}, {:?}",
        report.states, report.depth, report.elapsed
    );
    for property in [TWO_HOLDERS, FENCING] {
        assert!(
            report.discovery(property).is_none(),
            "{property} violated:\n{}",
            report.trace(property)
        );
    }
    assert!(
        report
            .discovery("a later holder gets a higher number")
            .is_some(),
        "never reached a second holder"
    );
    assert!(report.states > 10_000, "only {} states", report.states);
}

#[test]
fn a_node_restarting_without_its_counter_breaks_fencing() {
    let model = RedlockModel {
        restart_loses_data: true,
        ..RedlockModel::with_data()
    };
    assert_violated(model, FENCING, "redlock (restart loses data)");
}
