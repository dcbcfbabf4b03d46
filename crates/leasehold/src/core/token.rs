//! Lock tokens and key validation.

use std::fmt;
use std::sync::Arc;

use crate::core::error::{Error, Result};
use crate::core::owner::Owner;

/// The random value a holder stores in the lock key.
///
/// Whoever knows a token can release or extend the lock it names, so a token is a capability:
/// its `Debug` and `Display` show only a short keyed hash of it ([`LockToken::redacted`]), and
/// tracing records nothing else of it. Use [`LockToken::expose`] where the full value is really
/// needed (handing it to another process).
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

    /// A fresh token for an acquisition by `owner`: [`LockToken::random`], followed by the
    /// owner record when there is one (see [`Owner`] for the encoding). The whole value is the
    /// token: it is what the lock stores and what release and extend compare.
    pub fn for_owner(owner: Option<&Owner>) -> Self {
        let random = Self::random();
        match owner {
            Some(owner) => LockToken(owner.stored_value(random.expose()).into()),
            None => random,
        }
    }

    /// The owner record carried by this token, if it has one.
    pub fn owner(&self) -> Option<Owner> {
        Owner::from_stored_value(&self.0)
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

    /// A name safe to log: `#` and 8 hex digits of a hash of the token, keyed with a random
    /// key drawn once per process. Enough to correlate one process's log lines; nothing of the
    /// token itself (a prefix would give away part of it, or all of a short token chosen by a
    /// user), and not comparable across processes, so a short token cannot be found by hashing
    /// guesses either.
    pub fn redacted(&self) -> String {
        use std::hash::BuildHasher;
        static KEY: std::sync::LazyLock<std::hash::RandomState> =
            std::sync::LazyLock::new(std::hash::RandomState::new);
        format!("#{:08x}", KEY.hash_one(&*self.0) >> 32)
    }
}

impl fmt::Debug for LockToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The owner part is public (anyone who reads the key sees it); the hash covers the
        // whole value, so nothing of the random part shows.
        match self.owner() {
            Some(owner) => write!(f, "LockToken({}, {owner})", self.redacted()),
            None => write!(f, "LockToken({})", self.redacted()),
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_random_and_redacted() {
        let a = LockToken::random();
        let b = LockToken::random();
        assert_ne!(a, b);
        assert_eq!(a.expose().len(), 32);
        // The shown name is `#` and 8 hex digits, and those digits are not a piece of the token
        // (a chance match of 8 digits is about 25 in 2^32; a 4-digit prefix, checked before, was
        // found by chance in about 1 run in 13 000).
        let shown = a.to_string();
        assert!(shown.starts_with('#') && shown[1..].bytes().all(|b| b.is_ascii_hexdigit()));
        assert!(!a.expose().contains(&shown[1..]));
        assert_eq!(format!("{a:?}"), format!("LockToken({shown})"));
        // The same token, the same name; another token, another name.
        assert_eq!(a.redacted(), LockToken::new(a.expose()).unwrap().redacted());
        assert_ne!(a.redacted(), b.redacted());
        assert_eq!(a.redacted().len(), 9);
        // A short token chosen by a user is not given away either. (Not a hex word: "abc" was
        // found by chance in the hex digits of its own hash about 1 run in 700.)
        let user = LockToken::new("pw!").unwrap();
        assert!(!user.to_string().contains("pw!"));
        assert!(!format!("{user:?}").contains("pw!"));
        assert!(LockToken::new("").is_err());
    }

    #[test]
    fn owner_tokens_keep_the_random_part_redacted_and_show_the_owner() {
        let owner = Owner::new("web-1", 7, "cron")
            .unwrap()
            .label("job")
            .unwrap();
        let token = LockToken::for_owner(Some(&owner));
        let random = token.expose().split('|').next().unwrap();
        assert_eq!(random.len(), 32);
        assert_eq!(token.owner(), Some(owner));
        let shown = format!("{token:?} {token}");
        assert!(!shown.contains(random), "{shown}");
        assert!(shown.contains("cron[7]@web-1"), "{shown}");
        assert_eq!(LockToken::for_owner(None).owner(), None);
        assert_eq!(LockToken::for_owner(None).expose().len(), 32);
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

    proptest::proptest! {
        #![proptest_config(crate::core::url::testing::config(512))]

        // Accepted iff 1 ..= MAX_KEY_LEN bytes (not characters), whatever the bytes; a refusal
        // is InvalidArgument(key).
        #[test]
        fn keys_are_accepted_iff_their_length_is_in_bounds(
            stem in ".{0,4}",
            len in proptest::sample::select(vec![0, 1, 2, MAX_KEY_LEN - 1, MAX_KEY_LEN, MAX_KEY_LEN + 1]),
        ) {
            let mut key = stem;
            while key.len() < len {
                key.push(if key.len() + 2 <= len { 'é' } else { '\0' });
            }
            let ok = !key.is_empty() && key.len() <= MAX_KEY_LEN;
            match validate_key(&key) {
                Ok(()) => proptest::prop_assert!(ok, "{} bytes accepted", key.len()),
                Err(Error::InvalidArgument { what: "key", .. }) => {
                    proptest::prop_assert!(!ok, "{} bytes refused", key.len())
                }
                Err(e) => proptest::prop_assert!(false, "{e:?}"),
            }
        }

        // Tokens: any non-empty text is one, kept exactly; the empty one is refused.
        #[test]
        fn tokens_wrap_any_text(text in ".*") {
            match LockToken::new(text.clone()) {
                Ok(t) => proptest::prop_assert_eq!(t.expose(), text.as_str()),
                Err(_) => proptest::prop_assert!(text.is_empty()),
            }
        }
    }

    #[test]
    fn keys_are_validated() {
        assert!(validate_key("").is_err());
        assert!(validate_key("k").is_ok());
        assert!(validate_key(&"x".repeat(MAX_KEY_LEN + 1)).is_err());
    }
}
