//! Unit tests of the extend rule (`validity.rs`).

use super::validity::MAX_PENDING;
use super::*;

fn lease(until: Instant) -> Lease {
    Lease::until("k", LockToken::random(), None, until)
}

// The model checker's counterexamples to a rule that capped a success by the newest extend
// alone, or ordered extends by clock readings.
#[test]
fn a_success_is_capped_by_every_extend_still_pending() {
    let t0 = Instant::now();
    let s = Duration::from_secs(1);
    let l = lease(t0 + 3 * s);
    let e0 = l.extend_sent(t0, t0 + 3 * s);
    let e1 = l.extend_sent(t0, t0 + s); // shortening, outcome unknown
    let e2 = l.extend_sent(t0, t0 + 3 * s);
    assert_eq!(l.valid_until(), t0 + s, "lowered on sending");
    e0.confirm(t0 + 3 * s);
    assert_eq!(l.valid_until(), t0 + s, "e1 may be applied after e0");
    e2.confirm(t0 + 3 * s);
    assert_eq!(l.valid_until(), t0 + s, "e1 may be re-sent after e2");
    e1.confirm(t0 + s);
    assert_eq!(l.valid_until(), t0 + s, "an older success raises nothing");
    let e3 = l.extend_sent(t0, t0 + 3 * s);
    e3.confirm(t0 + 3 * s);
    assert_eq!(
        l.valid_until(),
        t0 + s,
        "a copy of e1 may still be applied until its bound"
    );
}

// The model checker's counterexample to forgetting an extend at its bound while another
// call runs: e1 (3 s) and e2 (1 s) applied in that order, e2 settled after its bound, then
// e1's success believed 3 s over a key that expired at 1 s.
#[test]
fn an_extend_forgotten_at_its_bound_still_caps_a_call_that_ran_meanwhile() {
    let s = Duration::from_secs(1);
    let past = Instant::now() - 2 * s;
    let l = lease(past + 3 * s);
    let e1 = l.extend_sent(past, past + 3 * s);
    let e2 = l.extend_sent(past, past + s);
    drop(e2);
    e1.confirm(past + 3 * s);
    assert_eq!(l.valid_until(), past + s);
    assert!(!l.is_held(), "the key expired at e2's bound");
}

// The model checker's counterexample to forgetting an extend at its success: e1 (1 s) is
// re-sent and applied after e2 (3 s); e1's success came first, then e2's raised to 3 s.
#[test]
fn a_confirmed_extend_still_caps_a_later_success_until_its_bound() {
    let t0 = Instant::now();
    let s = Duration::from_secs(1);
    let l = lease(t0 + s);
    let e1 = l.extend_sent(t0, t0 + s);
    let e2 = l.extend_sent(t0, t0 + 3 * s);
    e1.confirm(t0 + s);
    e2.confirm(t0 + 3 * s);
    assert_eq!(l.valid_until(), t0 + s);
}

#[test]
fn many_settled_extends_are_merged_without_raising_any_cap() {
    let t0 = Instant::now();
    let s = Duration::from_secs(1);
    let l = lease(t0 + 30 * s);
    let short = l.extend_sent(t0, t0 + 2 * s);
    drop(short);
    for i in 0..200u32 {
        let sent = t0 + Duration::from_millis(u64::from(i));
        l.extend_sent(sent, sent + 30 * s).confirm(sent + 30 * s);
    }
    assert!(l.validity().pending_len() <= MAX_PENDING);
    let sent = t0 + s;
    l.extend_sent(sent, sent + 30 * s).confirm(sent + 30 * s);
    assert_eq!(l.valid_until(), sent + 2 * s, "the short one still caps");
}

// Finding U1 of the 2026-12-02 review: the client itself re-sends an older extend (the
// `idempotent` retry after a dropped connection; redis-rs Cluster re-sending a timed-out
// request) and it is applied after a later one was confirmed. The old rule forgot every
// extend older than the confirmed one and believed the renewal's 30 s.
#[test]
fn a_resent_older_extend_caps_a_later_success() {
    let t0 = Instant::now();
    let s = Duration::from_secs(1);
    let l = lease(t0 + 30 * s);
    let short = l.extend_sent(t0, t0 + 2 * s); // its reply lost; re-sent later
    let renewal_sent = t0 + s / 2;
    let renewal = l.extend_sent(renewal_sent, renewal_sent + 30 * s);
    renewal.confirm(renewal_sent + 30 * s);
    assert_eq!(
        l.valid_until(),
        renewal_sent + 2 * s,
        "the re-send may be applied after the renewal"
    );
    drop(short); // returned without an answer: pending until its bound
    let next_sent = t0 + s;
    l.extend_sent(next_sent, next_sent + 30 * s)
        .confirm(next_sent + 30 * s);
    assert_eq!(l.valid_until(), next_sent + 2 * s, "still within its bound");
}

#[test]
fn a_settled_extend_is_forgotten_once_its_bound_passed_but_one_in_flight_is_not() {
    let t0 = Instant::now();
    let s = Duration::from_secs(1);
    let past = t0 - 10 * s;
    let l = lease(t0 + s);
    let settled = l.extend_sent(past, past + 2 * s);
    drop(settled);
    l.extend_sent(t0, t0 + 30 * s).confirm(t0 + 30 * s);
    assert_eq!(
        l.valid_until(),
        t0 + 30 * s,
        "a settled extend past its bound"
    );
    let in_flight = l.extend_sent(past, past + 2 * s);
    assert_eq!(l.valid_until(), past + 2 * s, "lowered on sending");
    l.extend_sent(t0, t0 + 30 * s).confirm(t0 + 30 * s);
    assert_eq!(
        l.valid_until(),
        t0 + 2 * s,
        "a call still running may re-send it at any moment"
    );
    drop(in_flight);
    l.extend_sent(t0, t0 + 30 * s).confirm(t0 + 30 * s);
    assert_eq!(l.valid_until(), t0 + 30 * s);
}

#[test]
fn extends_sent_at_the_same_instant_are_still_ordered() {
    let t0 = Instant::now();
    let s = Duration::from_secs(1);
    let l = lease(t0 + 3 * s);
    let long = l.extend_sent(t0, t0 + 3 * s);
    let short = l.extend_sent(t0, t0 + s);
    long.confirm(t0 + 3 * s);
    assert_eq!(l.valid_until(), t0 + s);
    short.confirm(t0 + s);
    assert_eq!(l.valid_until(), t0 + s);
}

#[test]
fn an_unanswered_extend_never_raises_validity() {
    let t0 = Instant::now();
    let s = Duration::from_secs(1);
    let l = lease(t0 + s);
    let _lost = l.extend_sent(t0, t0 + 10 * s);
    assert_eq!(l.valid_until(), t0 + s);
    let shorter = l.extend_sent(t0, t0 + s / 2);
    assert_eq!(l.valid_until(), t0 + s / 2);
    shorter.confirm(t0 + s / 2);
    assert_eq!(l.valid_until(), t0 + s / 2);
}

#[test]
fn loss_now_tells_a_validity_that_ran_out_unless_released() {
    let past = Instant::now() - Duration::from_millis(1);
    // Over and not released: counts as expired, though nothing marked it.
    let over = lease(past);
    assert_eq!(over.loss_reason(), None);
    assert_eq!(over.loss_now(), Some(LossReason::Expired));
    // Still valid: not lost.
    let valid = lease(Instant::now() + Duration::from_secs(60));
    assert_eq!(valid.loss_now(), None);
    // Released before its validity ran out: a normal end, never a loss.
    let released = lease(past);
    released.end();
    assert_eq!(released.loss_now(), None);
    // A recorded reason wins.
    let marked = lease(Instant::now() + Duration::from_secs(60));
    assert!(marked.mark_lost(LossReason::NotHeld));
    assert_eq!(marked.loss_now(), Some(LossReason::NotHeld));
}
