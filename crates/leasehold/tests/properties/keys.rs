//! Keys and their hash slots: every name derived from a lock key lands in the key's Redis
//! Cluster slot, for keys of any shape (hash tags, stray braces, any UTF-8, any length).

use leasehold::MAX_KEY_LEN;
use leasehold::internal::{
    election_leader_key, rwlock_readers_key, rwlock_writer_waiting_key, semaphore_permits_key,
    slot_name,
};
use leasehold::redis::{fair_entry_key, fair_queue_key, fence_key, key_slot, release_channel};
use proptest::prelude::*;

use crate::config;

/// A piece of a key: braces alone and in pairs, short words, control characters, multi-byte
/// characters, or any character.
fn key_piece() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("{".to_string()),
        Just("}".to_string()),
        Just("{}".to_string()),
        Just("}{".to_string()),
        "[a-z0-9:]{1,4}",
        Just("\0".to_string()),
        Just("\r\n".to_string()),
        Just(" ".to_string()),
        Just("ключ".to_string()),
        Just("é".to_string()),
        any::<char>().prop_map(String::from),
    ]
}

/// Keys of hash-tag shapes: `{}`, `{a}b`, `a{b}{c}`, `{`, `}{`, nested braces, ...
pub fn shaped_key() -> impl Strategy<Value = String> {
    proptest::collection::vec(key_piece(), 0..10).prop_map(|v| v.concat())
}

/// `stem` cut or padded (with two-byte characters, so that bytes and characters differ) to
/// exactly `len` bytes.
fn sized(stem: &str, len: usize) -> String {
    let mut key: String = stem
        .char_indices()
        .take_while(|(i, c)| i + c.len_utf8() <= len)
        .map(|(_, c)| c)
        .collect();
    while key.len() + 2 <= len {
        key.push('é');
    }
    while key.len() < len {
        key.push('x');
    }
    key
}

/// Any key: hash-tag shapes, arbitrary strings, and lengths at the limits (0, 1,
/// MAX_KEY_LEN - 1, MAX_KEY_LEN, MAX_KEY_LEN + 1 bytes).
pub fn any_key() -> impl Strategy<Value = String> {
    let lengths = vec![0, 1, 2, MAX_KEY_LEN - 1, MAX_KEY_LEN, MAX_KEY_LEN + 1];
    prop_oneof![
        4 => shaped_key(),
        2 => any::<String>(),
        1 => (proptest::sample::select(lengths), shaped_key())
            .prop_map(|(len, stem)| sized(&stem, len)),
    ]
}

/// Text without braces, to put around a slot name.
fn brace_free() -> impl Strategy<Value = String> {
    "[^{}]{0,8}"
}

/// The key names derived from `key` that a lock operation may touch in one script, and their
/// descriptions.
fn derived(key: &str) -> Vec<(&'static str, String)> {
    vec![
        ("fence key", fence_key(key)),
        ("release channel", release_channel(key)),
        ("fair queue", fair_queue_key(key)),
        ("fair entry", fair_entry_key(key, "1-abc")),
        ("fair entry prefix", fair_entry_key(key, "")),
        ("semaphore permits", semaphore_permits_key(key)),
        ("rwlock readers", rwlock_readers_key(key)),
        ("rwlock writer waiting", rwlock_writer_waiting_key(key)),
        ("election leader", election_leader_key(key)),
    ]
}

/// CRC16/XMODEM, written out from the Redis Cluster specification (independently of the
/// library's), and the slot rule: the hash tag if there is a non-empty one, else the whole key.
fn spec_slot(key: &[u8]) -> u16 {
    let tagged = key.iter().position(|&b| b == b'{').and_then(|open| {
        let close = key[open + 1..].iter().position(|&b| b == b'}')? + open + 1;
        (close > open + 1).then(|| &key[open + 1..close])
    });
    let mut crc: u16 = 0;
    for &b in tagged.unwrap_or(key) {
        crc ^= u16::from(b) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc % 16384
}

/// Every derived name hashes to `key`'s slot, contains the key, and so does any brace-free
/// text around the slot name.
pub fn check_derived_names(key: &str, p: &str, s: &str) -> Result<(), TestCaseError> {
    let slot = key_slot(key);
    for (what, name) in derived(key) {
        prop_assert_eq!(key_slot(&name), slot, "{} of {:?}: {:?}", what, key, name);
        prop_assert!(name.contains(key), "{} of {:?}: {:?}", what, key, name);
    }
    let wrapped = format!("{p}{}{s}", slot_name(key));
    prop_assert_eq!(
        key_slot(&wrapped),
        slot,
        "{:?} around the slot name of {:?}",
        wrapped,
        key
    );
    Ok(())
}

proptest! {
    #![proptest_config(config::cases(1024))]

    // The library's slot is the cluster spec's, for any bytes of UTF-8.
    #[test]
    fn key_slot_follows_the_cluster_spec(key in any_key()) {
        prop_assert_eq!(key_slot(&key), spec_slot(key.as_bytes()));
    }

    // The module's guarantee (redis/slot.rs): for every key k and brace-free p and s,
    // slot(p + slot_name(k) + s) == slot(k); and every derived key and channel is in k's slot.
    #[test]
    fn derived_names_stay_in_the_key_slot(key in any_key(), p in brace_free(), s in brace_free()) {
        check_derived_names(&key, &p, &s)?;
    }
}

#[test]
fn sized_keys_have_their_length() {
    for len in [0, 1, 2, 3, MAX_KEY_LEN + 1] {
        assert_eq!(sized("{ключ}", len).len(), len);
    }
}
