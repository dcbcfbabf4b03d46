//! A key's file names: the key escaped so that no key names a path outside the directory (`/`,
//! `..`, NUL and every other byte outside `[A-Za-z0-9_.-]` become `%XX`), behind the prefix
//! `k-`, and, for a key whose escaped form is long, a prefix of it and a 128-bit hash of the
//! whole key (a file name has at most 255 bytes).

/// Escaped keys up to this length are the file name whole (one key, one name, no hash).
const WHOLE: usize = 160;

/// How much of a long key's escaped form goes before its hash, for a human reading the folder.
const PREFIX: usize = 64;

/// The stem of `key`'s files: `k-<escaped key>`, or `k-<escaped prefix>~<hash>` when long.
/// Injective for keys whose escaped form fits in [`WHOLE`] bytes (`%` is escaped too, and `~`
/// never appears in an escaped key); longer keys share a stem only if their FNV-1a 128 hashes
/// collide, which makes the two keys one lock (a liveness cost, never a safety one: they
/// exclude each other and share one increasing fencing counter).
pub(super) fn stem(key: &str) -> String {
    let mut escaped = String::with_capacity(key.len() + 2);
    for b in key.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-') {
            escaped.push(b as char);
        } else {
            escaped.push_str(&format!("%{b:02X}"));
        }
        if escaped.len() > WHOLE {
            break;
        }
    }
    if escaped.len() <= WHOLE {
        return format!("k-{escaped}");
    }
    // Cut on an escape's boundary (every byte of `escaped` is ASCII).
    let mut cut = PREFIX;
    while escaped.as_bytes()[..cut]
        .iter()
        .rev()
        .take(2)
        .any(|b| *b == b'%')
    {
        cut -= 1;
    }
    format!("k-{}~{:032x}", &escaped[..cut], fnv1a_128(key.as_bytes()))
}

/// FNV-1a, 128 bits: stable across processes, versions and platforms (std's hashers are not).
fn fnv1a_128(bytes: &[u8]) -> u128 {
    const OFFSET: u128 = 0x6c62272e07bb014262b821756295c58d;
    const PRIME: u128 = 0x0000000001000000000000000000013B;
    bytes
        .iter()
        .fold(OFFSET, |h, b| (h ^ u128::from(*b)).wrapping_mul(PRIME))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_key_names_a_path_outside_the_folder() {
        for key in [
            "../x",
            "/etc/passwd",
            "a/../../b",
            "..",
            ".",
            "a\0b",
            "~x",
            "%2F",
        ] {
            let s = stem(key);
            assert!(s.starts_with("k-"), "{s}");
            assert!(!s.contains('/') && !s.contains('\0'), "{key:?} -> {s}");
            assert!(s.bytes().all(|b| b.is_ascii_graphic()), "{key:?} -> {s}");
        }
    }

    #[test]
    fn distinct_keys_have_distinct_stems() {
        let keys = [
            "a", "A", "a/b", "a%2Fb", "a.b", "a_b", "a-b", "é", "%C3%A9", "a b", "a+b",
        ];
        let stems: std::collections::HashSet<String> = keys.iter().map(|k| stem(k)).collect();
        assert_eq!(stems.len(), keys.len(), "{stems:?}");
        let long = |c: &str| format!("{}{c}", "x".repeat(300));
        assert_ne!(stem(&long("a")), stem(&long("b")));
        assert_ne!(stem(&"/".repeat(100)), stem(&"/".repeat(101)));
    }

    #[test]
    fn long_keys_fit_in_a_file_name() {
        for key in ["k".repeat(64 * 1024), "/".repeat(5000), "é".repeat(3000)] {
            let s = stem(&key);
            assert!(s.len() + ".fence.tmp".len() <= 255, "{} bytes", s.len());
            assert!(s.contains('~'));
        }
        let at_limit = "k".repeat(WHOLE);
        assert_eq!(stem(&at_limit), format!("k-{at_limit}"));
    }

    #[test]
    fn the_hash_is_the_published_fnv1a_128() {
        // The FNV specification's value for the empty input is the offset basis, and "a"'s.
        assert_eq!(fnv1a_128(b""), 0x6c62272e07bb014262b821756295c58d);
        assert_eq!(fnv1a_128(b"a"), 0xd228cb696f1a8caf78912b704e4a8964);
    }
}
