//! Lock tokens, key validation and the fencing counter's key.

use std::fmt;
use std::sync::Arc;

use crate::error::{Error, Result};

/// The random value a holder stores in the lock key.
///
/// Whoever knows a token can release or extend the lock it names, so a token is a capability:
/// its `Debug` and `Display` show only a short prefix, and tracing never records it whole. Use
/// [`LockToken::expose`] where the full value is really needed (handing it to another process).
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct LockToken(Arc<str>);

impl LockToken {
    /// A fresh token: a UUID v4 (122 random bits) in its 32-hex-digit form.
    ///
    /// The bits come from `rand`'s thread-local generator, a cryptographically secure one (ChaCha)
    /// seeded and periodically reseeded from the operating system: unpredictable like the OS
    /// generator, without a system call per token (acquisitions are on the hot path).
    pub fn random() -> Self {
        use rand::Rng;
        let uuid = uuid::Builder::from_random_bytes(rand::rng().random()).into_uuid();
        let mut hex = [0u8; uuid::fmt::Simple::LENGTH];
        LockToken(Arc::from(&*uuid.simple().encode_lower(&mut hex)))
    }

    /// Wraps a token received from elsewhere (another process, the CLI).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] if the token is empty.
    pub fn new(token: impl Into<String>) -> Result<Self> {
        let token = token.into();
        if token.is_empty() {
            return Err(Error::invalid("token", "a lock token cannot be empty"));
        }
        Ok(LockToken(token.into()))
    }

    /// The full token. Treat it like a password.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// A prefix safe to log: enough to correlate log lines, too little to release the lock.
    pub fn redacted(&self) -> String {
        let prefix: String = self.0.chars().take(6).collect();
        format!("{prefix}…")
    }
}

impl fmt::Debug for LockToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "LockToken({})", self.redacted())
    }
}

impl fmt::Display for LockToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.redacted())
    }
}

/// Longest lock key accepted. Redis allows 512 MB keys; a lock name that long is a bug.
pub const MAX_KEY_LEN: usize = 64 * 1024;

pub(crate) fn validate_key(key: &str) -> Result<()> {
    if key.is_empty() {
        return Err(Error::invalid("key", "a lock key cannot be empty"));
    }
    if key.len() > MAX_KEY_LEN {
        return Err(Error::invalid(
            "key",
            format!(
                "{} bytes is longer than the limit of {MAX_KEY_LEN}",
                key.len()
            ),
        ));
    }
    Ok(())
}

/// The Redis Cluster hash tag of `key`, if it has one: the bytes between the first `{` and the
/// first `}` after it, when that span is not empty.
fn hash_tag(key: &str) -> Option<&str> {
    let open = key.find('{')?;
    let close = key[open + 1..].find('}')? + open + 1;
    (close > open + 1).then(|| &key[open + 1..close])
}

/// The key of the fencing counter that belongs to lock `key`.
///
/// It must live in the same Redis Cluster hash slot as the lock key so that one script can touch
/// both atomically:
/// - a key with a hash tag keeps it: `a{user:1}b` -> `a{user:1}b:fence`;
/// - a key without one is wrapped, `{key}:fence`, whose tag is the whole key and so hashes
///   exactly like `key` itself.
///
/// A key with no valid tag that contains `}` cannot be wrapped (its tag would end early); it
/// gets `key:fence`, which is correct on a single node and on a Redlock set (each node is a
/// single node) but would be a cross-slot pair in Redis Cluster.
pub fn fence_key(key: &str) -> String {
    if hash_tag(key).is_some() || key.contains('}') {
        format!("{key}:fence")
    } else {
        format!("{{{key}}}:fence")
    }
}

/// The channel on which a release of `key` may be announced (used by waiters).
pub fn release_channel(key: &str) -> String {
    format!("leasehold:released:{key}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fence_key_keeps_the_slot() {
        assert_eq!(fence_key("lock:a"), "{lock:a}:fence");
        assert_eq!(hash_tag(&fence_key("lock:a")), Some("lock:a"));
        assert_eq!(fence_key("a{user:1}b"), "a{user:1}b:fence");
        assert_eq!(hash_tag(&fence_key("a{user:1}b")), Some("user:1"));
        // `{}` is not a tag, so the whole key is hashed; wrapping it would cut the tag short.
        assert_eq!(hash_tag("a{}b"), None);
        assert_eq!(fence_key("a{}b"), "a{}b:fence");
    }

    #[test]
    fn tokens_are_random_and_redacted() {
        let a = LockToken::random();
        let b = LockToken::random();
        assert_ne!(a, b);
        assert_eq!(a.expose().len(), 32);
        assert!(!format!("{a:?}").contains(a.expose()));
        assert!(!a.to_string().contains(a.expose()));
        assert!(LockToken::new("").is_err());
    }

    #[test]
    fn tokens_are_version_4_uuids_and_do_not_repeat() {
        let mut seen = std::collections::HashSet::new();
        for _ in 0..10_000 {
            let t = LockToken::random();
            let hex = t.expose();
            assert!(
                hex.bytes()
                    .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)),
                "{hex}"
            );
            let uuid = uuid::Uuid::parse_str(hex).expect("a UUID");
            assert_eq!(uuid.get_version_num(), 4, "{hex}");
            assert_eq!(uuid.get_variant(), uuid::Variant::RFC4122, "{hex}");
            assert!(seen.insert(hex.to_string()), "repeated token {hex}");
        }
        // Different threads draw different tokens (each has its own generator, seeded apart).
        let other = std::thread::spawn(|| LockToken::random().expose().to_string())
            .join()
            .unwrap();
        assert!(!seen.contains(&other));
    }

    #[test]
    fn keys_are_validated() {
        assert!(validate_key("").is_err());
        assert!(validate_key("k").is_ok());
        assert!(validate_key(&"x".repeat(MAX_KEY_LEN + 1)).is_err());
    }
}
