//! Hash slots: every key and shard channel a lock operation touches lives in the lock key's
//! Redis Cluster hash slot, whatever the key looks like.
//!
//! Redis Cluster hashes a key by its *hash tag* (the bytes between the first `{` and the first
//! `}` after it, when that span is not empty) or, without one, by the whole key. A script may only
//! touch keys of one slot, and a script's `SPUBLISH` must stay in that slot too, so the fencing
//! counter and the release channel of a lock are named from [`slot_name`]:
//!
//! - a key with a hash tag keeps it: `a{user:1}b` -> `a{user:1}b` (anything without braces
//!   added before or after leaves the tag, and so the slot, unchanged);
//! - a non-empty key without a tag and without `}` is wrapped: `lock:a` -> `{lock:a}`, whose tag
//!   is the whole key, so it hashes exactly like the key;
//! - any other key (no valid tag, but a `}` that would cut a wrapper short: `a{}b`, `}{x`, `{}`,
//!   `a}b`; or the empty key, whose wrapper `{}` would be an empty tag) is prefixed with a short
//!   tag of our own chosen to hash to the key's slot: `{T}:a{}b`, where
//!   `CRC16(T) mod 16384 == slot(key)`.
//!
//! **Guarantee.** For every key `k` and every brace-free `p` and `s`,
//! `slot(p + slot_name(k) + s) == slot(k)`. The unit tests check it on the odd shapes, the
//! cluster tests against a real server's `CLUSTER KEYSLOT`.

use std::borrow::Cow;
use std::sync::OnceLock;

use crate::core::token::validate_key;

/// Number of hash slots in Redis Cluster.
pub const SLOTS: u16 = 16384;

/// CRC16/XMODEM (polynomial 0x1021, initial value 0), the checksum Redis Cluster hashes with.
fn crc16(bytes: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &b in bytes {
        crc ^= (b as u16) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc
}

/// The hash tag of `key`, if it has one: the bytes between the first `{` and the first `}`
/// after it, when that span is not empty.
pub(crate) fn hash_tag(key: &str) -> Option<&str> {
    let open = key.find('{')?;
    let close = key[open + 1..].find('}')? + open + 1;
    (close > open + 1).then(|| &key[open + 1..close])
}

/// The Redis Cluster hash slot of `key` (what `CLUSTER KEYSLOT key` answers).
pub fn key_slot(key: &str) -> u16 {
    crc16(hash_tag(key).unwrap_or(key).as_bytes()) % SLOTS
}

/// For each slot, a short brace-free string that hashes to it (computed once, on first need:
/// only keys of the odd shapes need it).
fn slot_tags() -> &'static [String] {
    static TAGS: OnceLock<Vec<String>> = OnceLock::new();
    TAGS.get_or_init(|| {
        const ALPHABET: &[u8] = b"0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ";
        let mut tags: Vec<Option<String>> = vec![None; SLOTS as usize];
        let mut missing = SLOTS as usize;
        // Strings of 1, 2, 3, ... characters in order; 3 characters (238 328 strings) already
        // cover every slot, so this ends after a few milliseconds at most.
        let base = ALPHABET.len();
        let mut len: u32 = 1;
        while missing > 0 {
            for mut n in 0..base.pow(len) {
                let mut s = String::with_capacity(len as usize);
                for _ in 0..len {
                    s.push(ALPHABET[n % base] as char);
                    n /= base;
                }
                let slot = (crc16(s.as_bytes()) % SLOTS) as usize;
                if tags[slot].is_none() {
                    tags[slot] = Some(s);
                    missing -= 1;
                }
            }
            len += 1;
        }
        tags.into_iter().map(|t| t.unwrap_or_default()).collect()
    })
}

/// Whether `{key}` hashes like `key`: it has no tag of its own, no `}` to end the wrapper early,
/// and is not empty (`{}` is no tag: it would hash as the two braces, not as the empty key).
fn wraps_as_tag(key: &str) -> bool {
    !key.is_empty() && !key.contains('}') && hash_tag(key).is_none()
}

/// A name that contains `key` and hashes to `key`'s slot, to which brace-free text may be added
/// on either side without changing the slot (see the module docs).
pub fn slot_name(key: &str) -> Cow<'_, str> {
    if hash_tag(key).is_some() {
        Cow::Borrowed(key)
    } else if wraps_as_tag(key) {
        let mut name = String::with_capacity(key.len() + 2);
        name.push('{');
        name.push_str(key);
        name.push('}');
        Cow::Owned(name)
    } else {
        let tag = &slot_tags()[key_slot(key) as usize];
        Cow::Owned(format!("{{{tag}}}:{key}"))
    }
}

/// The suffixes of the keys derived from a name: [`slot_name`]`(name)` + suffix (the fencing
/// counter, the fair queue, the semaphore's permits and limit, the read-write lock's readers
/// and waiting writer, the election's leader record, the forced-release record, the `min_hold`
/// companion, the history stream). A fair waiter's entry is `slot_name(name) + ":waiter:" +
/// ticket`.
pub(crate) const DERIVED_SUFFIXES: [&str; 10] = [
    ":fence",
    ":queue",
    ":permits",
    ":limit",
    ":readers",
    ":writer-waiting",
    ":leader",
    ":forced",
    ":minhold",
    ":history",
];

/// The infix of a fair waiter's entry key ([`fair_entry_key`]).
pub(crate) const WAITER_INFIX: &str = ":waiter:";

/// The name whose [`slot_name`] is `stem`, if there is one.
pub(crate) fn name_of_stem(stem: &str) -> Option<String> {
    let wrapped = stem
        .strip_prefix('{')
        .and_then(|s| s.strip_suffix('}'))
        .filter(|inner| !inner.contains('}'));
    let tagged = stem
        .strip_prefix('{')
        .and_then(|s| s.split_once("}:"))
        .map(|(_, rest)| rest);
    [wrapped, tagged, Some(stem)]
        .into_iter()
        .flatten()
        .find(|name| !name.is_empty() && slot_name(name) == stem)
        .map(str::to_string)
}

/// The name `key` is derived from, if some primitive derives `key` from another name (its
/// [`slot_name`] followed by one of [`DERIVED_SUFFIXES`], or a fair waiter's entry).
pub(crate) fn derived_from(key: &str) -> Option<String> {
    // Every derived key holds its name's slot_name, which always has a `{`: a key without one
    // (most keys) is answered by one byte scan instead of a substring search and ten
    // suffix comparisons on every acquisition.
    if !key.contains('{') {
        return None;
    }
    if let Some(name) = key
        .rsplit_once(WAITER_INFIX)
        .and_then(|(stem, _)| name_of_stem(stem))
    {
        return Some(name);
    }
    DERIVED_SUFFIXES
        .iter()
        .find_map(|suffix| key.strip_suffix(suffix).and_then(name_of_stem))
}

/// Checks a name the caller gives (a lock key, a semaphore, read-write lock or election name,
/// a fenced resource): [`validate_key`], and not a key that leasehold derives from another name.
///
/// **Guarantee (U4 of the 2026-12-02 review).** Every key a primitive writes besides the name
/// itself is `slot_name(y) + suffix` for a name `y`; such a key always contains a hash tag, so
/// a name refused here is exactly one that could be overwritten or deleted by another
/// primitive's scripts (`{jobs}:leader` by an election named `jobs`, `{x}:minhold` by a
/// `min_hold` lock named `x`). Names without braces are never refused: `jobs:leader` is a name
/// like any other, and its own derived keys are `{jobs:leader}:fence` and so on.
pub(crate) fn validate_name(key: &str) -> crate::core::error::Result<()> {
    validate_key(key)?;
    match derived_from(key) {
        None => Ok(()),
        Some(name) => Err(crate::core::error::Error::invalid(
            "key",
            format!(
                "{key:?} is a key leasehold derives from the name {name:?} (reserved: \
                 a hash-tagged name followed by one of {}, or :waiter:); choose another name",
                DERIVED_SUFFIXES.join(" ")
            ),
        )),
    }
}

/// The key of the fencing counter that belongs to lock `key`: [`slot_name`]`(key) + ":fence"`,
/// so it lives in the lock key's slot and one script can touch both.
///
/// `lock:a` -> `{lock:a}:fence`; `a{user:1}b` -> `a{user:1}b:fence`; `a{}b` -> `{T}:a{}b:fence`
/// with a tag `T` of the same slot.
pub fn fence_key(key: &str) -> String {
    format!("{}:fence", slot_name(key))
}

/// The companion of a lock taken with [`min_hold`](crate::LockOptions::min_hold): it holds the
/// holder's token and expires `min_hold` after the acquisition, by the server's clock:
/// [`slot_name`]`(key) + ":minhold"`, in the lock key's slot (`lock:a` -> `{lock:a}:minhold`).
pub fn min_hold_key(key: &str) -> String {
    format!("{}:minhold", slot_name(key))
}

/// The queue of a fair lock's waiters (a sorted set of tickets in arrival
/// order): [`slot_name`]`(key) + ":queue"`, in the lock key's slot.
pub fn fair_queue_key(key: &str) -> String {
    format!("{}:queue", slot_name(key))
}

/// The entry of the fair waiter `ticket` of lock `key` (the waiter's token,
/// handoff window, fencing flag, owner and last attempt, expiring unless the waiter refreshes it):
/// [`slot_name`]`(key) + ":waiter:" + ticket`, in the lock key's slot. With an empty ticket,
/// the prefix of every entry of the lock (`lock:a` -> `{lock:a}:waiter:`).
pub fn fair_entry_key(key: &str, ticket: &str) -> String {
    format!("{}:waiter:{ticket}", slot_name(key))
}

/// The channel on which a release of `key` is announced to waiters:
/// `leasehold:released:` + [`slot_name`]`(key)` (`leasehold:released:{lock:a}`). It hashes to
/// the key's slot, so on a cluster the release script can `SPUBLISH` it on the key's shard.
pub fn release_channel(key: &str) -> String {
    // One allocation: this is built on every release that notifies.
    const PREFIX: &str = "leasehold:released:";
    let mut channel = String::with_capacity(PREFIX.len() + key.len() + 2);
    channel.push_str(PREFIX);
    if wraps_as_tag(key) {
        // slot_name's common case, written in place.
        channel.push('{');
        channel.push_str(key);
        channel.push('}');
    } else {
        channel.push_str(&slot_name(key));
    }
    channel
}

/// The channel on which a fair release of `key` hands the lock to a waiter of the client
/// named `owner` (the id of its subscriber, in the waiter's queue entry):
/// [`release_channel`]`(key) + ":" + owner`. One per client and key, so a handoff message
/// reaches the one client whose waiter it names, not every client waiting for the key; it
/// hashes to the key's slot as the release channel does.
pub fn handoff_channel(key: &str, owner: &str) -> String {
    let mut channel = release_channel(key);
    channel.push(':');
    channel.push_str(owner);
    channel
}

/// The limit key that goes with a permits key (`…:permits` -> `…:limit`; any other set, such
/// as a read-write lock's readers, gets `…:limit` appended: a key that never exists).
pub(crate) fn permits_limit_key(permits_key: &str) -> String {
    let stem = permits_key.strip_suffix(":permits").unwrap_or(permits_key);
    format!("{stem}:limit")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Keys of every shape the cluster docs warn about, and then some.
    const ODD_KEYS: &[&str] = &[
        "lock:a",
        "a{user:1}b",
        "{user:1}",
        "a{}b",
        "}{x",
        "{}",
        "{}{x}",
        "a}b",
        "{a{b}c}",
        "{{a}}",
        "a{b",
        "}",
        "{",
        "x{}}y{z}",
        "ключ{é}",
        "{{}}",
    ];

    #[test]
    fn crc16_matches_the_cluster_spec() {
        // The reference value from the Redis Cluster specification.
        assert_eq!(crc16(b"123456789"), 0x31C3);
        // Values `CLUSTER KEYSLOT` gives.
        assert_eq!(key_slot("foo"), 12182);
        assert_eq!(key_slot("{user1000}.following"), key_slot("user1000"));
        assert_eq!(key_slot("foo{}{bar}"), crc16(b"foo{}{bar}") % SLOTS);
        assert_eq!(key_slot("foo{{bar}}zap"), key_slot("{bar"));
    }

    #[test]
    fn every_derived_name_stays_in_the_key_slot() {
        for key in ODD_KEYS {
            let slot = key_slot(key);
            assert_eq!(key_slot(&fence_key(key)), slot, "fence key of {key:?}");
            assert_eq!(key_slot(&release_channel(key)), slot, "channel of {key:?}");
            assert_eq!(
                key_slot(&handoff_channel(key, "0123abcd")),
                slot,
                "handoff channel of {key:?}"
            );
            assert_eq!(key_slot(&fair_queue_key(key)), slot, "queue of {key:?}");
            assert_eq!(key_slot(&min_hold_key(key)), slot, "min_hold of {key:?}");
            assert_eq!(
                key_slot(&fair_entry_key(key, "t")),
                slot,
                "entry of {key:?}"
            );
            assert!(fence_key(key).contains(key), "{key:?}");
            assert!(release_channel(key).contains(key), "{key:?}");
        }
    }

    #[test]
    fn plain_and_tagged_keys_keep_their_names() {
        assert_eq!(fence_key("lock:a"), "{lock:a}:fence");
        assert_eq!(fence_key("a{user:1}b"), "a{user:1}b:fence");
        assert_eq!(release_channel("lock:a"), "leasehold:released:{lock:a}");
        assert_eq!(
            handoff_channel("lock:a", "c1"),
            "leasehold:released:{lock:a}:c1"
        );
        assert_eq!(hash_tag("a{}b"), None);
        assert!(fence_key("a{}b").ends_with(":a{}b:fence"));
    }

    // Found by the property tests (tests/properties/keys.rs): the empty key was wrapped as `{}`,
    // which is no hash tag, so `{}:fence` hashed as itself instead of to slot 0.
    #[test]
    fn the_empty_key_has_names_in_its_slot() {
        assert_eq!(key_slot(""), 0);
        assert_eq!(key_slot(&fence_key("")), 0, "{}", fence_key(""));
        assert_eq!(key_slot(&release_channel("")), 0, "{}", release_channel(""));
        assert_eq!(key_slot(&handoff_channel("", "c1")), 0);
        assert_eq!(key_slot(&fair_queue_key("")), 0);
        assert_eq!(key_slot(&format!("x{}y", slot_name(""))), 0);
    }

    #[test]
    fn every_slot_has_a_tag() {
        let tags = slot_tags();
        assert_eq!(tags.len(), SLOTS as usize);
        for (slot, tag) in tags.iter().enumerate() {
            assert!(!tag.is_empty() && !tag.contains(['{', '}']));
            assert_eq!(key_slot(tag) as usize, slot);
        }
    }
}
