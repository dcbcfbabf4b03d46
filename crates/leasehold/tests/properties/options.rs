//! The option builders: `Backoff` and `LockOptions` over any durations and attempts.

use std::time::Duration;

use leasehold::redlock::RedlockOptions;
use leasehold::{
    Backoff, Error, LockOptions, MAX_TTL, MIN_BACKOFF, MIN_RENEWED_TTL, MIN_TTL, OnLoss,
    clock_drift,
};
use proptest::prelude::*;

use crate::config;

/// Any duration, weighted towards the interesting ones: zero, sub-millisecond, milliseconds,
/// around the TTL bounds, and the largest.
pub fn any_duration() -> impl Strategy<Value = Duration> {
    prop_oneof![
        Just(Duration::ZERO),
        Just(Duration::MAX),
        (0u64..2_000_000).prop_map(Duration::from_nanos),
        (0u64..100_000).prop_map(Duration::from_millis),
        (0u64..=8 * 24 * 3600).prop_map(Duration::from_secs),
        (any::<u64>(), 0u32..1_000_000_000).prop_map(|(s, n)| Duration::new(s, n)),
    ]
}

/// Durations a program could mean: up to about 584 years (a `u64` of nanoseconds).
fn sane_duration() -> impl Strategy<Value = Duration> {
    prop_oneof![
        Just(Duration::ZERO),
        (0u64..2_000_000).prop_map(Duration::from_nanos),
        (0u64..100_000).prop_map(Duration::from_millis),
        any::<u64>().prop_map(Duration::from_nanos),
    ]
}

fn any_attempt() -> impl Strategy<Value = u32> {
    prop_oneof![0u32..64, Just(u32::MAX), any::<u32>()]
}

/// The documented base of attempt `n`: `min(max, initial * 2^n)`, without overflow.
fn documented_base(b: &Backoff, attempt: u32) -> Duration {
    if b.initial().is_zero() {
        return Duration::ZERO;
    }
    let mut base = b.initial();
    for _ in 0..attempt.min(200) {
        if base >= b.max() {
            break;
        }
        base = base.saturating_mul(2);
    }
    base.min(b.max())
}

fn check_delay(b: &Backoff, attempt: u32) -> Result<(), TestCaseError> {
    let base = documented_base(b, attempt);
    let d = b.delay(attempt);
    prop_assert!(
        d >= base / 2 && d <= base,
        "{b:?} attempt {attempt}: {d:?} not in [{:?}, {base:?}]",
        base / 2
    );
    Ok(())
}

proptest! {
    #![proptest_config(config::cases(512))]

    // `new` keeps `initial` and never lets `max` fall below it; `constant` is `new(d, d)`.
    #[test]
    fn backoff_builders_keep_their_bounds(initial in any_duration(), max in any_duration()) {
        let b = Backoff::new(initial, max);
        prop_assert_eq!(b.initial(), initial);
        prop_assert_eq!(b.max(), max.max(initial));
        prop_assert_eq!(Backoff::constant(initial), Backoff::new(initial, initial));
    }

    // The jittered delay lies in [base/2, base], base = min(max, initial * 2^n), for any
    // attempt up to u32::MAX, with durations up to ~584 years (every duration: below).
    #[test]
    fn backoff_delay_stays_in_its_documented_band(
        initial in sane_duration(),
        max in sane_duration(),
        attempt in any_attempt(),
    ) {
        check_delay(&Backoff::new(initial, max), attempt)?;
    }

    // Every builder and getter, with any values: no panic, and each getter returns what its
    // builder set.
    #[test]
    fn lock_options_builders_round_trip(
        ttl in any_duration(),
        wait in proptest::option::of(any_duration()),
        backoff in (any_duration(), any_duration()),
        fencing in any::<bool>(),
        auto_extend in any::<bool>(),
        renew_every in proptest::option::of(any_duration()),
        max_hold in proptest::option::of(any_duration()),
        replica_ack in proptest::option::of((any::<u32>(), any_duration())),
        fair in any::<bool>(),
        notify in any::<bool>(),
    ) {
        let backoff = Backoff::new(backoff.0, backoff.1);
        let mut o = LockOptions::new(ttl)
            .backoff(backoff)
            .fencing(fencing)
            .auto_extend(auto_extend)
            .fair(fair)
            .on_loss(if notify { OnLoss::Notify } else { OnLoss::Cancel });
        if let Some(w) = wait { o = o.wait(w); }
        if let Some(r) = renew_every { o = o.renew_every(r); }
        if let Some(m) = max_hold { o = o.max_hold(m); }
        if let Some((n, t)) = replica_ack { o = o.replica_ack(n, t); }
        prop_assert_eq!(o.ttl(), ttl);
        // Over a century is taken as a century (a deadline must fit an Instant).
        let century = Duration::from_secs(100 * 365 * 24 * 3600);
        prop_assert_eq!(o.wait_bound(), wait.map(|w| w.min(century)));
        prop_assert_eq!(o.clone().no_wait().wait_bound(), None);
        prop_assert_eq!(o.backoff_policy(), backoff);
        prop_assert_eq!(o.fencing_enabled(), fencing);
        prop_assert_eq!(o.auto_extend_enabled(), auto_extend);
        prop_assert_eq!(o.fair_enabled(), fair);
        prop_assert_eq!(o.max_hold_bound(), max_hold.map(|m| m.min(century)));
        prop_assert_eq!(o.replica_ack_required(), replica_ack);
        prop_assert_eq!(o.loss_policy() == OnLoss::Notify, notify);
        prop_assert_eq!(o.clone().with_ttl(Duration::from_secs(1)).ttl(), Duration::from_secs(1));
        let _ = o.renew_interval();
    }

    // The renewal interval of every auto-extended lease that validates is positive and at most
    // TTL/2 (one failed round leaves time for another), for any requested interval.
    #[test]
    fn renew_interval_is_within_half_the_ttl(
        ttl in ttl_around_the_limits(),
        renew_every in proptest::option::of(any_duration()),
    ) {
        let mut o = LockOptions::new(ttl).auto_extend(true);
        if let Some(r) = renew_every { o = o.renew_every(r); }
        prop_assume!(o.validate().is_ok());
        let every = o.renew_interval();
        prop_assert!(!every.is_zero() && every <= ttl / 2, "ttl {ttl:?}: {every:?}");
        if renew_every.is_none() {
            prop_assert_eq!(every, ttl / 3);
        }
    }

    // The TTL contract: `validate` refuses (InvalidArgument) exactly a TTL outside
    // MIN_TTL ..= MAX_TTL, an auto-extended one below MIN_RENEWED_TTL, and a backoff whose first
    // delay is below MIN_BACKOFF; whatever else the options say.
    #[test]
    fn validate_refuses_exactly_the_documented_options(
        ttl in ttl_around_the_limits(),
        auto_extend in any::<bool>(),
        initial in prop_oneof![Just(MIN_BACKOFF), Just(MIN_BACKOFF - Duration::from_nanos(1)), any_duration()],
        max in any_duration(),
        fencing in any::<bool>(),
        fair in any::<bool>(),
        wait in proptest::option::of(any_duration()),
        renew_every in proptest::option::of(any_duration()),
    ) {
        let mut o = LockOptions::new(ttl)
            .auto_extend(auto_extend)
            .backoff(Backoff::new(initial, max))
            .fencing(fencing)
            .fair(fair);
        if let Some(w) = wait { o = o.wait(w); }
        if let Some(r) = renew_every { o = o.renew_every(r); }
        let ttl_bad = ttl < MIN_TTL || ttl > MAX_TTL || (auto_extend && ttl < MIN_RENEWED_TTL);
        let backoff_bad = initial < MIN_BACKOFF;
        match o.validate() {
            Ok(()) => prop_assert!(!ttl_bad && !backoff_bad, "{o:?} validated"),
            Err(Error::InvalidArgument { what, .. }) => {
                prop_assert!(ttl_bad || backoff_bad, "{o:?} refused");
                prop_assert!(
                    (what == "ttl" && ttl_bad) || (what == "backoff" && backoff_bad),
                    "{o:?} refused as {what}"
                );
            }
            Err(e) => prop_assert!(false, "{o:?}: {e:?}"),
        }
    }

    // Every TTL the contract accepts leaves a lease: more than the drift allowance, so a grant
    // that arrives in time is valid for a while (below, every acquisition expired on arrival).
    #[test]
    fn accepted_ttls_outlast_the_drift_allowance(ttl in ttl_around_the_limits()) {
        prop_assume!(LockOptions::new(ttl).validate().is_ok());
        prop_assert!(ttl > clock_drift(ttl), "{ttl:?}: drift {:?}", clock_drift(ttl));
    }
}

/// TTLs around the contract's limits (MIN_TTL, MIN_RENEWED_TTL, MAX_TTL), and any.
fn ttl_around_the_limits() -> impl Strategy<Value = Duration> {
    let ns = Duration::from_nanos(1);
    prop_oneof![
        proptest::sample::select(vec![
            Duration::ZERO,
            Duration::from_millis(1),
            Duration::from_millis(2),
            MIN_TTL - ns,
            MIN_TTL,
            MIN_RENEWED_TTL - ns,
            MIN_RENEWED_TTL,
            MAX_TTL,
            MAX_TTL + ns,
        ]),
        (0u64..200_000_000).prop_map(Duration::from_nanos),
        any_duration(),
    ]
}

proptest! {
    #![proptest_config(config::cases(512))]

    // The documented band for every duration, up to Duration::MAX. It found that the delay
    // converted nanoseconds to u64, which truncated beyond ~584 years (Backoff::constant(
    // Duration::MAX).delay(0) panicked with an empty range), and capped the exponent at 2^20
    // (Backoff::new(1ns, 1h).delay(30) was at most ~1 ms, not ~1 s).
    #[test]
    fn backoff_delay_band_for_every_duration(
        initial in any_duration(),
        max in any_duration(),
        attempt in any_attempt(),
    ) {
        check_delay(&Backoff::new(initial, max), attempt)?;
    }
}

/// Any float: NaN, infinities, negatives, subnormals, and ordinary factors.
fn any_factor() -> impl Strategy<Value = f64> {
    prop_oneof![
        Just(f64::NAN),
        Just(f64::INFINITY),
        Just(f64::NEG_INFINITY),
        Just(-0.0),
        0.0f64..1.0,
        any::<f64>(),
    ]
}

proptest! {
    #![proptest_config(config::cases(512))]

    // The Redlock drift allowance, for any factor and floor and TTL: no panic, at least the
    // floor, at most half the TTL plus the floor (the factor is clamped to 0 ..= 0.5).
    #[test]
    fn redlock_drift_is_bounded(
        factor in any_factor(),
        floor in any_duration(),
        ttl in any_duration(),
        timeout in any_duration(),
    ) {
        let o = RedlockOptions::new().node_timeout(timeout).drift(factor, floor);
        prop_assert_eq!(o.node_timeout_bound(), timeout);
        let drift = o.drift_for(ttl);
        prop_assert!(drift >= floor, "{drift:?} < {floor:?}");
        // In floating point: `mul_f64` rounds (to the nanosecond, and beyond at Duration::MAX).
        let bound = ttl.as_secs_f64() * 0.5 + floor.as_secs_f64();
        prop_assert!(drift.as_secs_f64() <= bound * (1.0 + 1e-12) + 1e-9, "{drift:?} for {ttl:?}");
    }
}
