use std::time::{Duration, Instant};

use super::lifetime::{lease_lifetime, silence_bound, validity_from};
use super::sql::{try_acquire_sql, wait_acquire_sql};

#[test]
fn the_silence_bound_is_the_earlier_of_keepalive_and_user_timeout() {
    let s = Duration::from_secs;
    // Unset (0): Linux's defaults, 7200 + 75 x 9 s.
    assert_eq!(silence_bound(0, 0, 0, 0), s(7875));
    assert_eq!(silence_bound(3, 1, 2, 0), s(5));
    assert_eq!(silence_bound(3, 1, 2, 4000), s(4));
    assert_eq!(silence_bound(3, 1, 2, 60_000), s(5));
    assert_eq!(silence_bound(-1, 10, 0, -5), s(7200 + 90));
    assert_eq!(lease_lifetime(s(60), s(5)), s(5));
    assert_eq!(lease_lifetime(s(2), s(5)), s(2));
    let now = Instant::now();
    assert!(validity_from(now, s(60), s(5)) <= now + s(5));
}

#[test]
fn the_acquiring_statements_check_before_they_lock() {
    for sql in [try_acquire_sql(), wait_acquire_sql()] {
        let check = sql.find("AS mine").unwrap();
        let lock = sql.find("advisory_lock(").unwrap();
        assert!(check < lock, "{sql}");
        assert!(sql.contains("WHEN c.moved OR c.mine THEN false"));
    }
}
