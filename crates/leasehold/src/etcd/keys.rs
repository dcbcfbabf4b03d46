//! Lock keys, TTLs in whole seconds, and the queue entries (`K\0token`) they name.

use std::time::Duration;

use crate::core::error::{Error, Result};
use crate::core::options::ttl_millis;
use crate::core::token::{LockToken, validate_key};

/// `validate_key`, and no NUL (the separator between the key and the token).
pub(super) fn check_key(key: &str) -> Result<()> {
    validate_key(key)?;
    if key.contains('\0') {
        return Err(Error::invalid(
            "key",
            "an etcd lock key cannot contain a NUL byte (it separates the key from the token)",
        ));
    }
    Ok(())
}

/// The TTL in whole seconds (rounded up), after the library's bounds check.
pub(super) fn ttl_secs(ttl: Duration) -> Result<i64> {
    let ms = ttl_millis(ttl)?;
    Ok(ms.div_ceil(1000).max(1) as i64)
}

/// `K\0`: the prefix of lock `K`'s entries.
pub(super) fn queue_prefix(key: &str) -> Vec<u8> {
    let mut p = Vec::with_capacity(key.len() + 1);
    p.extend_from_slice(key.as_bytes());
    p.push(0);
    p
}

/// `K\0token`: one holder's or waiter's entry.
pub(super) fn entry_key(key: &str, token: &LockToken) -> Vec<u8> {
    let mut e = queue_prefix(key);
    e.extend_from_slice(token.expose().as_bytes());
    e
}
