//! The shared acquisition model: for each primitive, never more holders than its slots allow
//! (elections: each win a higher term), and a min-hold release frees the key by `t + hold`;
//! with the old min-hold release (the token kept), a late renewal re-extends it (finding L2).

use leasehold_model::acquire::{AcquireModel, Kind};
use leasehold_model::{assert_violated, check};

const SLOTS: &str = "never more holders than the slots allow";
const HOLD: &str = "a min-hold release frees the key by t + hold";
const TERMS: &str = "each win takes a term above every earlier one";

fn assert_safe(kind: Kind, examples: &[&str]) {
    let report = check(AcquireModel::fixed(kind));
    eprintln!(
        "acquire ({kind:?}): {} states, depth {}, {:?}",
        report.states, report.depth, report.elapsed
    );
    for property in [SLOTS, HOLD, TERMS] {
        assert!(
            report.discovery(property).is_none(),
            "{kind:?}: {property} violated:\n{}",
            report.trace(property)
        );
    }
    for example in [
        "a renewal is on its way to a kept lock",
        "another process holds after a min-hold release",
        "a renewal raises a holder's validity",
    ]
    .iter()
    .chain(examples)
    {
        assert!(
            report.discovery(example).is_some(),
            "{kind:?}: never reached: {example}"
        );
    }
    assert!(
        report.states > 10_000,
        "{kind:?}: only {} states",
        report.states
    );
}

#[test]
fn a_plain_lock_has_one_holder_and_its_min_hold_ends() {
    assert_safe(Kind::Mutex, &[]);
}

#[test]
fn a_semaphore_has_at_most_its_permits_held() {
    assert_safe(Kind::Semaphore(2), &["every permit is held"]);
}

#[test]
fn a_writer_excludes_every_reader() {
    assert_safe(Kind::ReadWrite, &["two readers hold together"]);
}

#[test]
fn an_election_has_one_leader_and_terms_increase() {
    assert_safe(Kind::Election, &["a third term is won"]);
}

#[test]
fn finding_l2_a_renewal_after_a_min_hold_release_keeps_the_lock() {
    for kind in [
        Kind::Mutex,
        Kind::Semaphore(2),
        Kind::ReadWrite,
        Kind::Election,
    ] {
        let what = format!("acquire ({kind:?}, token kept: finding L2)");
        assert_violated(AcquireModel::with_kept_token(kind), HOLD, &what);
    }
}
