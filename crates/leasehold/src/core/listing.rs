//! The lock table, backend-neutral: what [`Locker::list`](crate::Locker::list) returns
//! ([`LockEntry`]), what [`Locker::force_release`](crate::Locker::force_release) did
//! ([`ForceReleased`]), and the checks both share (patterns, reasons, what a lock's value looks
//! like).

use std::time::Duration;

use crate::core::error::{Error, Result};
use crate::core::owner::Owner;
use crate::core::token::LockToken;

/// What kind of lock an entry of the lock table is, as far as the stored layout tells.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum LockKind {
    /// A plain lock (on Redis also a read-write lock's write side, which is stored the same
    /// way).
    Lock,
    /// A fair lock with its queue of waiters.
    Fair,
    /// A semaphore: up to `permits` holders.
    Permits,
    /// A read-write lock held by readers.
    Read,
    /// An election's leadership.
    Election,
}

impl LockKind {
    /// The kind's name, as `leasehold ls` prints it (and its `--json` `kind` field):
    /// `lock`, `fair`, `permits`, `read`, `election`.
    pub fn name(self) -> &'static str {
        match self {
            LockKind::Lock => "lock",
            LockKind::Fair => "fair",
            LockKind::Permits => "permits",
            LockKind::Read => "read",
            LockKind::Election => "election",
        }
    }
}

/// One holder of a listed lock.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LockHolder {
    /// The holder's token: its `Display` is the redacted name, [`LockToken::expose`] the value.
    pub token: LockToken,
    /// The owner record the holder stored, if any.
    pub owner: Option<Owner>,
    /// How long this holder's lease still runs, if the backend says.
    pub ttl: Option<Duration>,
}

impl LockHolder {
    /// A holder from its token.
    pub(crate) fn of_token(token: LockToken, ttl: Option<Duration>) -> Self {
        LockHolder {
            owner: token.owner(),
            token,
            ttl,
        }
    }

    /// A holder from the value the lock stores.
    pub(crate) fn from_value(value: &str, ttl: Option<Duration>) -> Option<Self> {
        let value = held_value(value);
        Some(LockHolder {
            token: LockToken::new(value).ok()?,
            owner: Owner::from_stored_value(value),
            ttl,
        })
    }
}

/// One held lock, as [`Locker::list`](crate::Locker::list) sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LockEntry {
    /// The lock's name (the key given to acquire it).
    pub key: String,
    /// What kind of lock.
    pub kind: LockKind,
    /// Who holds it (several for a semaphore or readers), oldest expiry first.
    pub holders: Vec<LockHolder>,
    /// The lock's remaining TTL (the longest of its holders').
    pub ttl: Option<Duration>,
    /// The last fencing number issued for the key, if fencing was ever used on it.
    pub fencing_counter: Option<u64>,
    /// How many wait in line, where the backend keeps a line (fair queues, a writer waiting).
    pub waiters: Option<u64>,
    /// A semaphore's number of permits.
    pub permits: Option<u64>,
}

impl LockEntry {
    /// An entry of `kind` for `key` with `holders`; its TTL is the longest holder's.
    pub(crate) fn new(key: impl Into<String>, kind: LockKind, holders: Vec<LockHolder>) -> Self {
        LockEntry {
            key: key.into(),
            kind,
            ttl: holders.iter().filter_map(|h| h.ttl).max(),
            holders,
            fencing_counter: None,
            waiters: None,
            permits: None,
        }
    }
}

/// What [`Locker::force_release`](crate::Locker::force_release) did.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ForceReleased {
    /// The lock's key.
    pub key: String,
    /// The holder that was removed: its token (shown redacted) and owner record.
    pub previous: LockHolder,
    /// The key's fencing counter after the bump: every number issued to the removed holder is
    /// below it, and every number issued later is at least it (above it where the backend
    /// keeps a per-key counter it bumps; on etcd, whose numbers are revisions, it is the
    /// removed entry's number + 1, which a waiter queued right after it may have). `None`
    /// where the backend's fencing numbers are not a per-key counter it can bump (see each
    /// backend).
    pub fencing_counter: Option<u64>,
    /// Who forced it (this process).
    pub forced_by: Owner,
    /// Why, as given.
    pub reason: String,
}

/// Longest reason accepted by `force_release`, in bytes.
pub const MAX_REASON_LEN: usize = 1024;

/// How long the record of a forced release is kept where it is stored (Redis: a
/// `{key}:forced` hash): a week.
pub const FORCED_RECORD_TTL: Duration = Duration::from_secs(7 * 24 * 3600);

/// Checks a force-release reason: 1 ..= [`MAX_REASON_LEN`] bytes, no control characters.
pub(crate) fn check_reason(reason: &str) -> Result<()> {
    if reason.trim().is_empty() {
        return Err(Error::invalid(
            "reason",
            "a forced release needs a reason (who asked, and why)",
        ));
    }
    crate::core::owner::check_text("reason", "reason", reason, MAX_REASON_LEN)
}

/// What a lock's stored value starts with once a release has kept it for its
/// [`min_hold`](crate::LockOptions::min_hold) (Redis, Valkey): the holder's value after it no
/// longer matches any token-checked extend or release, so a renewal sent before the release and
/// applied after it cannot re-extend the kept lock (finding L2 of the 2026-12-02 review).
/// Written by `min_hold_release.lua`.
pub(crate) const KEPT_PREFIX: &str = "kept:";

/// The value a holder stored: `value` without a kept lock's [`KEPT_PREFIX`].
pub(crate) fn held_value(value: &str) -> &str {
    value.strip_prefix(KEPT_PREFIX).unwrap_or(value)
}

/// Whether `value` is what a leasehold lock stores: a random token (32 lowercase hex digits)
/// alone or followed by `|` and an owner record (or that, kept for its minimum hold). Tokens chosen by hand
/// ([`LockToken::new`]) are not recognised: the lock table lists, and force-release removes,
/// only what leasehold itself wrote.
pub fn is_lock_value(value: &str) -> bool {
    let value = held_value(value);
    let token = value.split('|').next().unwrap_or_default();
    token.len() == 32
        && token
            .bytes()
            .all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
        && (value.len() == 32 || Owner::from_stored_value(value).is_some())
}

/// Whether `name` matches the glob `pattern`, as Redis's `MATCH` reads one: `*` any run of
/// characters, `?` one character, `\` takes the next character literally (character classes
/// are not supported: `[` is literal). Hand-written: a dozen lines, where a crate would bring
/// path semantics (`/`) that lock names do not have.
pub fn glob_match(pattern: &str, name: &str) -> bool {
    let (p, n): (Vec<char>, Vec<char>) = (pattern.chars().collect(), name.chars().collect());
    // Iterative matching with one backtrack point (the last `*`): linear in practice.
    let (mut pi, mut ni, mut star, mut mark) = (0, 0, None, 0);
    while ni < n.len() {
        match p.get(pi) {
            Some('*') => {
                star = Some(pi);
                mark = ni;
                pi += 1;
            }
            Some('?') => (pi, ni) = (pi + 1, ni + 1),
            Some('\\') if p.get(pi + 1) == Some(&n[ni]) => (pi, ni) = (pi + 2, ni + 1),
            Some(&c) if c != '\\' && c == n[ni] => (pi, ni) = (pi + 1, ni + 1),
            _ => match star {
                Some(s) => {
                    pi = s + 1;
                    mark += 1;
                    ni = mark;
                }
                None => return false,
            },
        }
    }
    p[pi..].iter().all(|&c| c == '*')
}

/// The error of a backend without a lock table.
pub(crate) fn unsupported(backend: &'static str, what: &str) -> Error {
    Error::Unsupported {
        backend,
        what: what.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs_match_like_redis_match() {
        for (p, n, m) in [
            ("*", "", true),
            ("*", "anything", true),
            ("job:*", "job:1", true),
            ("job:*", "jobs", false),
            ("j?b", "job", true),
            ("j?b", "jb", false),
            ("*:1", "a:b:1", true),
            ("a*b*c", "axxbyyc", true),
            ("a*b*c", "axxbyy", false),
            ("\\*", "*", true),
            ("\\*", "a", false),
            ("[a]", "[a]", true),
            ("", "", true),
            ("", "a", false),
        ] {
            assert_eq!(glob_match(p, n), m, "{p:?} {n:?}");
        }
    }

    #[test]
    fn lock_values_are_recognised() {
        let token = LockToken::random();
        assert!(is_lock_value(token.expose()));
        let owner = Owner::new("h", 1, "p").unwrap();
        assert!(is_lock_value(LockToken::for_owner(Some(&owner)).expose()));
        for other in [
            "",
            "hello",
            &token.expose()[..31],
            &format!("{}x", token.expose()),
            &token.expose().to_uppercase(),
            &format!("{}|not an owner", token.expose()),
        ] {
            assert!(!is_lock_value(other), "{other:?}");
        }
    }

    #[test]
    fn reasons_are_checked() {
        assert!(check_reason("stuck since the deploy").is_ok());
        for bad in ["", "  ", "a\nb", &"x".repeat(MAX_REASON_LEN + 1)] {
            assert!(
                matches!(
                    check_reason(bad),
                    Err(Error::InvalidArgument { what: "reason", .. })
                ),
                "{bad:?}"
            );
        }
    }
}
