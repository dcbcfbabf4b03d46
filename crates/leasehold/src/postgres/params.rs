//! Statement parameters: keys checked against PostgreSQL's limits, durations as text.

use std::time::Duration;

use crate::core::error::{Error, Result};
use crate::core::token::validate_key;

/// Longest key the PostgreSQL backend accepts, in bytes: the key is the table's primary key,
/// and a B-tree entry must fit in a third of a page (about 2.7 kB).
pub const MAX_PG_KEY_LEN: usize = 2048;

pub(crate) fn validate_pg_key(key: &str) -> Result<()> {
    validate_key(key)?;
    if key.len() > MAX_PG_KEY_LEN {
        return Err(Error::invalid(
            "key",
            format!(
                "{} bytes is longer than PostgreSQL's limit of {MAX_PG_KEY_LEN} (the key is a \
                 primary key)",
                key.len()
            ),
        ));
    }
    if key.contains('\0') {
        return Err(Error::invalid(
            "key",
            "PostgreSQL text cannot hold a NUL byte",
        ));
    }
    Ok(())
}

/// The number a raise of `key`'s fencing counter sends (`key` checked first).
///
/// # Errors
/// [`Error::InvalidArgument`](crate::Error::InvalidArgument) for a bad key, or a number above
/// `i64::MAX` (PostgreSQL's bigint).
pub(crate) fn raised_fencing_number(key: &str, at_least: u64) -> Result<i64> {
    validate_pg_key(key)?;
    i64::try_from(at_least)
        .map_err(|_| Error::invalid("fencing number", "above PostgreSQL's bigint"))
}

pub(crate) fn millis_text(d: Duration) -> String {
    // 0 would mean "no limit" to PostgreSQL: never below 1 ms.
    d.as_millis().clamp(1, i32::MAX as u128).to_string()
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    proptest! {
        #![proptest_config(crate::core::url::testing::config(512))]

        // Accepted iff 1 ..= MAX_PG_KEY_LEN bytes without a NUL; refused as InvalidArgument(key).
        #[test]
        fn pg_keys_are_accepted_iff_documented(
            stem in ".{0,6}",
            len in proptest::sample::select(vec![0, 1, MAX_PG_KEY_LEN - 1, MAX_PG_KEY_LEN, MAX_PG_KEY_LEN + 1]),
        ) {
            let mut key = stem;
            while key.len() < len {
                key.push('é');
            }
            let ok = !key.is_empty() && key.len() <= MAX_PG_KEY_LEN && !key.contains('\0');
            match validate_pg_key(&key) {
                Ok(()) => prop_assert!(ok, "{key:?} accepted"),
                Err(Error::InvalidArgument { what: "key", .. }) => prop_assert!(!ok, "{key:?} refused"),
                Err(e) => prop_assert!(false, "{e:?}"),
            }
        }

        // Milliseconds as text: 1 ..= i32::MAX, never 0 (PostgreSQL's "no limit").
        #[test]
        fn millis_text_is_within_postgres_bounds(nanos in any::<u64>(), secs in any::<u64>()) {
            for d in [Duration::from_nanos(nanos), Duration::new(secs, 0)] {
                let ms: u64 = millis_text(d).parse().unwrap();
                prop_assert!((1..=i32::MAX as u64).contains(&ms), "{d:?}: {ms}");
                if (1..=i32::MAX as u128).contains(&d.as_millis()) {
                    prop_assert_eq!(u128::from(ms), d.as_millis());
                }
            }
        }
    }
}
