//! URL pieces every backend's URL parser shares: multi-host lists, credentials.

/// Splits `[auth@]hosts[/db][?query][#fragment]` (the query is ignored).
pub(crate) fn split_multi_host(rest: &str) -> (Option<&str>, &str, Option<&str>, Option<&str>) {
    let (rest, fragment) = match rest.split_once('#') {
        Some((r, f)) => (r, Some(f)),
        None => (rest, None),
    };
    let rest = rest.split_once('?').map_or(rest, |(r, _)| r);
    // The authority ends at the first '/': an '@' after it is part of the path, not the end of
    // a user name (else `h1,h2/0@x` would name the host x alone).
    let (authority, db) = match rest.split_once('/') {
        Some((a, d)) => (a, Some(d)),
        None => (rest, None),
    };
    let (auth, hosts) = match authority.rsplit_once('@') {
        Some((a, h)) => (Some(a), h),
        None => (None, authority),
    };
    (auth, hosts, db, fragment)
}

/// `h1:p1,h2,[::1]:p3` -> `["h1:p1", "h2:6379", "[::1]:p3"]`.
pub(crate) fn parse_hosts(
    hosts: &str,
    default_port: u16,
) -> std::result::Result<Vec<String>, String> {
    let mut out = Vec::new();
    for h in hosts.split(',') {
        let h = h.trim();
        if h.is_empty() {
            continue;
        }
        let (host, port) = if let Some(v6) = h.strip_prefix('[') {
            let (addr, after) = v6
                .split_once(']')
                .ok_or_else(|| format!("unterminated IPv6 address in {h:?}"))?;
            let port = match after.strip_prefix(':') {
                Some(p) => Some(p),
                None if after.is_empty() => None,
                None => return Err(format!("bad host {h:?}")),
            };
            (format!("[{addr}]"), port)
        } else {
            match h.rsplit_once(':') {
                Some((host, port)) => (host.to_string(), Some(port)),
                None => (h.to_string(), None),
            }
        };
        if host.is_empty() || host == "[]" {
            return Err(format!("empty host in {h:?}"));
        }
        // `h::1` would be host `h:`, port 1; `::1` host `:`: an IPv6 address needs brackets.
        if !host.starts_with('[') && host.contains(':') {
            return Err(format!(
                "bad host {h:?} (an IPv6 address goes in brackets: [::1]:6379)"
            ));
        }
        let port: u16 = match port {
            None => default_port,
            // Digits only: `u16::from_str` would also take a sign (`+80`).
            Some(p) => Some(p)
                .filter(|p| p.bytes().all(|b| b.is_ascii_digit()))
                .and_then(|p| p.parse().ok())
                .filter(|p| *p != 0)
                .ok_or_else(|| format!("bad port {p:?}"))?,
        };
        out.push(format!("{host}:{port}"));
    }
    if out.is_empty() {
        return Err("no host".to_string());
    }
    Ok(out)
}

/// `url` with the password of its credentials masked (`redis://u:***@h/`), to quote in messages:
/// errors end up on terminals and in logs. Text without a scheme is taken as starting with the
/// credentials (`u:pw@h`); anything without a password is returned as it is.
pub(crate) fn redact(url: &str) -> String {
    let start = url.find("://").map_or(0, |i| i + 3);
    let rest = &url[start..];
    let authority = &rest[..rest.find(['/', '?', '#']).unwrap_or(rest.len())];
    match authority.rfind('@') {
        Some(at) => match authority[..at].find(':') {
            Some(colon) => format!("{}:***{}", &url[..start + colon], &rest[at..]),
            None => url.to_string(),
        },
        None => url.to_string(),
    }
}

/// `%XX` escapes decoded (invalid UTF-8 replaced).
pub(crate) fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        // Bytes, not a str slice: a '%' before a multi-byte character must not split it.
        let hex = |b: u8| (b as char).to_digit(16);
        if bytes[i] == b'%'
            && i + 2 < bytes.len()
            && let (Some(h), Some(l)) = (hex(bytes[i + 1]), hex(bytes[i + 2]))
        {
            out.push((h * 16 + l) as u8);
            i += 3;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// What the URL parsers' property tests share.
#[cfg(test)]
pub(crate) mod testing {
    use proptest::prelude::*;

    /// `default_cases` cases (or `$PROPTEST_CASES`), no failure files written.
    pub(crate) fn config(default_cases: u32) -> ProptestConfig {
        let cases = std::env::var("PROPTEST_CASES")
            .ok()
            .and_then(|c| c.parse().ok())
            .unwrap_or(default_cases);
        ProptestConfig {
            cases,
            failure_persistence: None,
            ..ProptestConfig::default()
        }
    }

    /// Every byte but the unreserved ones as `%XX`.
    pub(crate) fn encode(s: &str) -> String {
        s.bytes()
            .map(|b| match b {
                b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                    (b as char).to_string()
                }
                _ => format!("%{b:02X}"),
            })
            .collect()
    }

    /// A host name, or a bracketed IPv6 address.
    pub(crate) fn host() -> impl Strategy<Value = String> {
        prop_oneof![
            "[a-z][a-z0-9.-]{0,10}",
            Just("[::1]".to_string()),
            (any::<u16>()).prop_map(|a| format!("[fe80::{a:x}]")),
        ]
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::testing::{config, encode, host};
    use super::*;

    // Found by multi_host_urls_split_into_their_parts: an '@' in the path was taken for the end
    // of the credentials, so the hosts before it were dropped for the text after it.
    #[test]
    fn an_at_sign_in_the_path_is_no_userinfo() {
        assert_eq!(
            split_multi_host("h1:1,h2:2/0@x:3"),
            (None, "h1:1,h2:2", Some("0@x:3"), None)
        );
        assert_eq!(
            split_multi_host("u:p@h1/@x#m@y"),
            (Some("u:p"), "h1", Some("@x"), Some("m@y"))
        );
    }

    #[test]
    fn passwords_are_masked() {
        assert_eq!(redact("redis://u:pw@h:1/0"), "redis://u:***@h:1/0");
        assert_eq!(
            redact("redis-sentinel://:p@w@h1,h2#m"),
            "redis-sentinel://:***@h1,h2#m"
        );
        assert_eq!(redact("u:pw@h"), "u:***@h");
        assert_eq!(redact("redis://u@h/:x@y"), "redis://u@h/:x@y");
        assert_eq!(redact("no url at all"), "no url at all");
    }

    // Found by ports_are_digits_in_range: a sign before the port was accepted.
    #[test]
    fn a_port_is_digits_only() {
        for port in ["+1", "+6379", "-0", " 1"] {
            assert!(parse_hosts(&format!("h:{port}"), 1).is_err(), "{port:?}");
        }
        assert_eq!(parse_hosts("h:0080", 1), Ok(vec!["h:80".to_string()]));
    }

    // Found by ports_are_digits_in_range (CI, 2026-12-08: port "1,"): a comma separates hosts
    // and an empty entry is skipped; an entry's surrounding whitespace is trimmed.
    #[test]
    fn lists_skip_empty_entries_and_trim_whitespace() {
        assert_eq!(parse_hosts("h:1,", 1), Ok(vec!["h:1".to_string()]));
        assert_eq!(
            parse_hosts(" h:1 , g ", 2),
            Ok(vec!["h:1".to_string(), "g:2".to_string()])
        );
        assert!(parse_hosts(",", 1).is_err());
    }

    // Found by ports_are_digits_in_range (with PROPTEST_CASES=5000; minimal input ":1"): `h::1`
    // was accepted as host `h:`, and `::1` as host `:`, both with port 1.
    #[test]
    fn a_colon_in_a_host_needs_brackets() {
        for hosts in ["h::1", "::1", "fe80::1:6379", "a:b:c"] {
            assert!(parse_hosts(hosts, 1).is_err(), "{hosts:?}");
        }
        assert_eq!(
            parse_hosts("[::1]:2,[fe80::1]", 1),
            Ok(vec!["[::1]:2".to_string(), "[fe80::1]:1".to_string()])
        );
    }

    proptest! {
        #![proptest_config(config(512))]

        // Any text decodes without a panic; encoded text decodes to exactly itself.
        #[test]
        fn percent_decoding_inverts_encoding(s in any::<String>(), raw in any::<String>()) {
            let _ = percent_decode(&raw);
            prop_assert_eq!(percent_decode(&encode(&s)), s);
            if !raw.contains('%') {
                prop_assert_eq!(percent_decode(&raw), raw);
            }
        }

        // Redaction masks exactly the password: any text is left whole but for it.
        #[test]
        fn redaction_masks_only_the_password(
            scheme in proptest::option::of("[a-z+-]{1,8}"),
            user in "[^:@/?#]{0,6}",
            password in proptest::option::of("[^/?#]{0,8}"),
            rest in "(:[0-9]{1,5})?[^@:]{0,12}",
            raw in any::<String>(),
        ) {
            let _ = redact(&raw);
            let prefix = scheme.map(|s| format!("{s}://")).unwrap_or_default();
            let url = match &password {
                Some(p) => format!("{prefix}{user}:{p}@h{rest}"),
                None => format!("{prefix}{user}@h{rest}"),
            };
            let expected = match &password {
                Some(_) => format!("{prefix}{user}:***@h{rest}"),
                None => url.clone(),
            };
            prop_assert_eq!(redact(&url), expected);
        }

        // A port is accepted iff it is written in decimal digits only and is 1 ..= 65535. The
        // text is one entry's port: a comma would start the next host, and an entry's trailing
        // whitespace is trimmed (both in `lists_skip_empty_entries_and_trim_whitespace`).
        #[test]
        fn ports_are_digits_in_range(
            port in prop_oneof![
                "[0-9]{1,7}",
                "[+ -]?[0-9]{0,6}",
                any::<String>().prop_filter("one entry's port", |p| {
                    !p.contains(',') && p.trim_end() == p
                }),
            ],
        ) {
            let valid = !port.is_empty()
                && port.bytes().all(|b| b.is_ascii_digit())
                && port.parse::<u32>().is_ok_and(|p| (1..=65535).contains(&p));
            let parsed = parse_hosts(&format!("h:{port}"), 1);
            match &parsed {
                Ok(hosts) if valid => {
                    prop_assert_eq!(hosts, &vec![format!("h:{}", port.parse::<u16>().unwrap())]);
                }
                Err(_) if !valid => {}
                other => prop_assert!(false, "port {port:?}: {other:?}"),
            }
        }

        // `[auth@]hosts[/path][?query][#fragment]` splits into exactly those parts, whatever the
        // path, query and fragment hold (an `@` there is no userinfo).
        #[test]
        fn multi_host_urls_split_into_their_parts(
            auth in proptest::option::of((any::<String>(), any::<String>())),
            hosts in proptest::collection::vec((host(), proptest::option::of(1u16..)), 1..4),
            path in proptest::option::of("[^?#]*"),
            query in proptest::option::of("[^#]*"),
            fragment in proptest::option::of(".*"),
        ) {
            let auth = auth.map(|(u, p)| format!("{}:{}", encode(&u), encode(&p)));
            let list: Vec<String> = hosts
                .iter()
                .map(|(h, p)| p.map_or(h.clone(), |p| format!("{h}:{p}")))
                .collect();
            let list = list.join(",");
            let mut url = auth.as_ref().map(|a| format!("{a}@")).unwrap_or_default();
            url.push_str(&list);
            for (sep, part) in [('/', &path), ('?', &query), ('#', &fragment)] {
                if let Some(part) = part {
                    url.push(sep);
                    url.push_str(part);
                }
            }
            let (a, h, p, f) = split_multi_host(&url);
            prop_assert_eq!(a, auth.as_deref(), "{:?}", url);
            prop_assert_eq!(h, list.as_str(), "{:?}", url);
            prop_assert_eq!(p, path.as_deref(), "{:?}", url);
            prop_assert_eq!(f, fragment.as_deref(), "{:?}", url);
            let expected: Vec<String> = hosts
                .iter()
                .map(|(h, p)| format!("{h}:{}", p.unwrap_or(7)))
                .collect();
            prop_assert_eq!(parse_hosts(h, 7), Ok(expected));
        }
    }
}
