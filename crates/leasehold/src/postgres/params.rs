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

pub(crate) fn millis_text(d: Duration) -> String {
    // 0 would mean "no limit" to PostgreSQL: never below 1 ms.
    d.as_millis().clamp(1, i32::MAX as u128).to_string()
}
