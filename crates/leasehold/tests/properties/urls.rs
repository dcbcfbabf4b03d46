//! URL parsing for every scheme `Locker` and `RedisClient` accept, through the public parsers
//! (`Endpoint::parse`, the Redlock node list): arbitrary text gives a typed `InvalidArgument`
//! or a value, never a panic; generated well-formed URLs parse to exactly their parts. Only
//! parsing runs here (and `Locker::connect` where it refuses before connecting): nothing
//! connects anywhere. The crate-private parsers (etcd, PostgreSQL, the shared host list) have
//! their properties in their modules' unit tests.

use leasehold::internal::node_urls;
use leasehold::redis::Endpoint;
use leasehold::{Error, Locker};
use proptest::prelude::*;

use crate::config;

/// Every scheme the library knows.
pub const SCHEMES: &[&str] = &[
    "redis",
    "rediss",
    "valkey",
    "valkeys",
    "redis+unix",
    "unix",
    "redis-cluster",
    "rediss-cluster",
    "valkey-cluster",
    "valkeys-cluster",
    "redis-sentinel",
    "rediss-sentinel",
    "valkey-sentinel",
    "valkeys-sentinel",
    "redlock",
    "rediss-redlock",
    "etcd",
    "postgres",
    "postgresql",
];

/// `s` with every byte outside the URL's unreserved characters as `%XX` (upper or lower case
/// hex digits, as `upper` says).
pub fn percent_encode(s: &str, upper: bool) -> String {
    s.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
                (b as char).to_string()
            } else if upper {
                format!("%{b:02X}")
            } else {
                format!("%{b:02x}")
            }
        })
        .collect()
}

/// `s` with each ASCII letter's case picked by the bits of `mask`.
fn mixed_case(s: &str, mask: u64) -> String {
    s.chars()
        .enumerate()
        .map(|(i, c)| {
            if mask >> (i % 64) & 1 == 1 {
                c.to_ascii_uppercase()
            } else {
                c
            }
        })
        .collect()
}

/// A host as it appears in a URL: a name, an IPv4 address or a bracketed IPv6 address.
pub fn host() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-z][a-z0-9-]{0,8}(\\.[a-z][a-z0-9-]{0,5}){0,2}",
        (any::<u8>(), any::<u8>(), any::<u8>(), any::<u8>())
            .prop_map(|(a, b, c, d)| format!("{a}.{b}.{c}.{d}")),
        Just("[::1]".to_string()),
        (any::<u16>(), any::<u16>()).prop_map(|(a, b)| format!("[fe80::{a:x}:{b:x}]")),
    ]
}

/// A port as written: none, 0 ..= 65535, or beyond.
pub fn port() -> impl Strategy<Value = Option<u32>> {
    prop_oneof![
        Just(None),
        (0u32..=65535).prop_map(Some),
        Just(Some(0)),
        Just(Some(65535)),
        (65536u32..1_000_000).prop_map(Some),
    ]
}

/// `host[:port]` and the `host:port` it means (None: an invalid port).
pub fn host_port(default: u16) -> impl Strategy<Value = (String, Option<String>)> {
    (host(), port()).prop_map(move |(h, p)| match p {
        None => (h.clone(), Some(format!("{h}:{default}"))),
        Some(p) => {
            let valid = (1..=65535).contains(&p);
            (format!("{h}:{p}"), valid.then(|| format!("{h}:{p}")))
        }
    })
}

/// Optional credentials: (user, password), any UTF-8, percent-encoded in the URL.
pub fn credentials() -> impl Strategy<Value = Option<(String, Option<String>)>> {
    proptest::option::of((any::<String>(), proptest::option::of(any::<String>())))
}

/// The `user[:password]@` part of a URL for `credentials`.
pub fn auth_text(creds: &Option<(String, Option<String>)>, upper: bool) -> String {
    match creds {
        None => String::new(),
        Some((u, None)) => format!("{}@", percent_encode(u, upper)),
        Some((u, Some(p))) => format!("{}:{}@", percent_encode(u, upper), percent_encode(p, upper)),
    }
}

/// Only `InvalidArgument { what: "url" }` is an acceptable refusal.
fn refused_as_url(err: &Error) -> Result<(), TestCaseError> {
    prop_assert!(
        matches!(err, Error::InvalidArgument { what: "url", .. }),
        "not an InvalidArgument(url): {err:?}"
    );
    Ok(())
}

/// Text after `scheme://`: anything, or URL-ish pieces in any order.
fn tail() -> impl Strategy<Value = String> {
    let piece = prop_oneof![
        Just("@".to_string()),
        Just(":".to_string()),
        Just("/".to_string()),
        Just(",".to_string()),
        Just("#".to_string()),
        Just("?".to_string()),
        Just("[".to_string()),
        Just("]".to_string()),
        Just("%".to_string()),
        Just("%4".to_string()),
        Just("%e2%82".to_string()),
        Just("é".to_string()),
        "[0-9]{1,6}",
        "[a-z]{1,4}",
        any::<char>().prop_map(String::from),
    ];
    prop_oneof![
        any::<String>(),
        proptest::collection::vec(piece, 0..12).prop_map(|v| v.concat()),
    ]
}

proptest! {
    #![proptest_config(config::cases(1024))]

    // Any text, after any known scheme or none: a value or InvalidArgument(url), no panic.
    #[test]
    fn endpoint_parse_never_panics(
        scheme in proptest::sample::select(SCHEMES),
        case in any::<u64>(),
        tail in tail(),
        raw in any::<String>(),
    ) {
        for url in [format!("{}://{tail}", mixed_case(scheme, case)), raw] {
            match Endpoint::parse(&url) {
                Ok(Endpoint::Standalone(u)) => prop_assert_eq!(&u, &url),
                Ok(Endpoint::Cluster(seeds)) => prop_assert!(!seeds.is_empty()),
                Ok(Endpoint::Sentinel { sentinels, master, .. }) => {
                    prop_assert!(!sentinels.is_empty() && !master.is_empty());
                }
                Ok(other) => prop_assert!(false, "unexpected {other:?}"),
                Err(e) => refused_as_url(&e)?,
            }
            match node_urls(&url) {
                Ok(nodes) => prop_assert!(!nodes.is_empty()),
                Err(e) => refused_as_url(&e)?,
            }
        }
    }

    // A cluster URL is its seed list: every host with its port (6379 by default), the
    // credentials as written, TLS by scheme; a port of 0 or beyond 65535 is refused.
    #[test]
    fn cluster_urls_round_trip(
        tls in any::<bool>(),
        valkey in any::<bool>(),
        case in any::<u64>(),
        creds in credentials(),
        upper in any::<bool>(),
        hosts in proptest::collection::vec(host_port(6379), 1..4),
    ) {
        let scheme = format!(
            "{}{}-cluster",
            if valkey { "valkey" } else { "redis" },
            if tls { "s" } else { "" }
        );
        let auth = auth_text(&creds, upper);
        let list: Vec<&str> = hosts.iter().map(|(h, _)| h.as_str()).collect();
        let url = format!("{}://{auth}{}", mixed_case(&scheme, case), list.join(","));
        let expected: Option<Vec<String>> = hosts
            .iter()
            .map(|(_, hp)| {
                hp.as_ref().map(|hp| format!("{}://{auth}{hp}/", if tls { "rediss" } else { "redis" }))
            })
            .collect();
        match (Endpoint::parse(&url), expected) {
            (Ok(endpoint), Some(seeds)) => {
                prop_assert_eq!(endpoint.uses_tls(), tls);
                prop_assert_eq!(endpoint, Endpoint::Cluster(seeds));
            }
            (Err(e), None) => refused_as_url(&e)?,
            (got, expected) => prop_assert!(false, "{url:?}: {got:?}, expected {expected:?}"),
        }
    }

    // A Sentinel URL: the sentinels (port 26379 by default), the data nodes' credentials and
    // database, and the master name, each decoded exactly.
    #[test]
    fn sentinel_urls_round_trip(
        tls in any::<bool>(),
        creds in credentials(),
        upper in any::<bool>(),
        hosts in proptest::collection::vec(host_port(26379), 1..4),
        db in proptest::option::of(0i64..100),
        master in ".+",
    ) {
        let scheme = if tls { "rediss-sentinel" } else { "redis-sentinel" };
        let list: Vec<&str> = hosts.iter().map(|(h, _)| h.as_str()).collect();
        let url = format!(
            "{scheme}://{}{}{}#{}",
            auth_text(&creds, upper),
            list.join(","),
            db.map(|d| format!("/{d}")).unwrap_or_default(),
            percent_encode(&master, upper),
        );
        let sentinels: Option<Vec<String>> = hosts
            .iter()
            .map(|(_, hp)| hp.as_ref().map(|hp| format!("redis://{hp}/")))
            .collect();
        let (username, password) = match &creds {
            None => (None, None),
            Some((u, p)) => ((!u.is_empty()).then(|| u.clone()), p.clone()),
        };
        match (Endpoint::parse(&url), sentinels) {
            (Ok(endpoint), Some(sentinels)) => prop_assert_eq!(
                endpoint,
                Endpoint::Sentinel { sentinels, master, db: db.unwrap_or(0), username, password, tls }
            ),
            (Err(e), None) => refused_as_url(&e)?,
            (got, expected) => prop_assert!(false, "{url:?}: {got:?}, expected {expected:?}"),
        }
    }

    // A redlock URL is its node list: one `redis://auth@host:port/db` per host.
    #[test]
    fn redlock_urls_round_trip(
        tls in any::<bool>(),
        case in any::<u64>(),
        creds in credentials(),
        upper in any::<bool>(),
        hosts in proptest::collection::vec(host_port(6379), 1..6),
        db in proptest::option::of(0u32..16),
    ) {
        let scheme = if tls { "rediss-redlock" } else { "redlock" };
        let auth = auth_text(&creds, upper);
        let list: Vec<&str> = hosts.iter().map(|(h, _)| h.as_str()).collect();
        let url = format!(
            "{}://{auth}{}{}",
            mixed_case(scheme, case),
            list.join(","),
            db.map(|d| format!("/{d}")).unwrap_or_default()
        );
        let expected: Option<Vec<String>> = hosts
            .iter()
            .map(|(_, hp)| {
                hp.as_ref().map(|hp| {
                    format!("{}://{auth}{hp}/{}", if tls { "rediss" } else { "redis" }, db.unwrap_or(0))
                })
            })
            .collect();
        match (node_urls(&url), expected) {
            (Ok(nodes), Some(expected)) => prop_assert_eq!(nodes, expected),
            (Err(e), None) => refused_as_url(&e)?,
            (got, expected) => prop_assert!(false, "{url:?}: {got:?}, expected {expected:?}"),
        }
    }
}

/// A scheme `Locker` does not know (or no scheme at all).
fn foreign_url() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<String>().prop_filter("no scheme", |s| !s.contains("://")),
        ("[a-z][a-z0-9+.-]{0,12}", tail())
            .prop_filter("an unknown scheme", |(s, _)| !SCHEMES.contains(&s.as_str()))
            .prop_map(|(s, t)| format!("{s}://{t}")),
    ]
}

proptest! {
    #![proptest_config(config::cases(256))]

    // An unknown or missing scheme, and a redlock URL whose host list is malformed, are refused
    // as InvalidArgument(url) before any connection (no server exists here to connect to).
    #[test]
    fn locker_refuses_bad_urls_before_connecting(url in foreign_url(), bad_hosts in ",*:[0-9]{0,7}") {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        runtime.block_on(async {
            let err = Locker::connect(&url).await.unwrap_err();
            refused_as_url(&err)?;
            let redlock = format!("redlock://{bad_hosts}");
            if node_urls(&redlock).is_err() {
                refused_as_url(&Locker::connect(&redlock).await.unwrap_err())?;
            }
            Ok::<(), TestCaseError>(())
        })?;
    }
}

/// A URL of `scheme` with `user:password@` before `hosts`, made invalid by `defect`.
fn defective_url(scheme: &str, auth: &str, defect: usize) -> String {
    let (hosts, suffix) = match defect % 5 {
        0 => ("127.0.0.1:0", ""),
        1 => ("127.0.0.1:99999", "#m"),
        2 => ("127.0.0.1:1", "#"),
        3 => ("127.0.0.1:1", "/x#m"),
        _ => ("", "#m"),
    };
    format!("{scheme}://{auth}{hosts}{suffix}")
}

proptest! {
    #![proptest_config(config::cases(256))]

    // A refused URL's error never shows its password (the CLI prints errors on stderr, and
    // logs keep them), in any scheme.
    #[test]
    fn refusals_never_show_the_password(
        scheme in proptest::sample::select(SCHEMES).prop_filter("parsed by Endpoint", |s| {
            !matches!(*s, "etcd" | "postgres" | "postgresql" | "redlock" | "rediss-redlock")
        }),
        user in "[a-z]{0,4}",
        password in "[A-Z]{12}",
        defect in any::<usize>(),
        unknown in any::<bool>(),
    ) {
        let scheme = if unknown { "mysql" } else { scheme };
        let url = defective_url(scheme, &format!("{user}:{password}@"), defect);
        let shown = |e: &Error| format!("{e} {e:?}");
        if let Err(e) = Endpoint::parse(&url) {
            prop_assert!(!shown(&e).contains(&password), "{}", shown(&e));
        }
        if let Err(e) = node_urls(&url.replacen(scheme, "redlock", 1)) {
            prop_assert!(!shown(&e).contains(&password), "{}", shown(&e));
        }
    }
}

proptest! {
    #![proptest_config(config::cases(256))]

    // A Sentinel URL's database is a number written in digits: accepted iff it is one (a
    // sign would only fail later, at SELECT), refused as InvalidArgument(url) otherwise.
    #[test]
    fn sentinel_databases_are_digits(db in "[+-]?[0-9]{0,20}|[0-9a-z ]{1,3}") {
        let url = format!("redis-sentinel://127.0.0.1/{db}#m");
        let expected: Option<i64> = if db.is_empty() {
            Some(0)
        } else if db.bytes().all(|b| b.is_ascii_digit()) {
            db.parse().ok()
        } else {
            None
        };
        match (Endpoint::parse(&url), expected) {
            (Ok(Endpoint::Sentinel { db: got, .. }), Some(n)) => prop_assert_eq!(got, n),
            (Err(e), None) => refused_as_url(&e)?,
            (got, _) => prop_assert!(false, "{url:?}: {got:?}"),
        }
    }
}

proptest! {
    #![proptest_config(config::cases(64))]

    // Locker::connect's own refusals (no scheme, unknown scheme) never show the password. It
    // found that they quoted the whole URL, password and all.
    #[test]
    fn locker_refusals_never_show_the_password(
        scheme in proptest::option::of("[a-z]{2,6}".prop_filter("unknown", |s| !SCHEMES.contains(&s.as_str()))),
        password in "[A-Z]{12}",
    ) {
        let url = match &scheme {
            Some(s) => format!("{s}://u:{password}@127.0.0.1:1/"),
            None => format!("u:{password}@127.0.0.1:1"),
        };
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let err = runtime.block_on(Locker::connect(&url)).unwrap_err();
        refused_as_url(&err)?;
        prop_assert!(!format!("{err} {err:?}").contains(&password), "{err}");
    }
}

/// Text for the parts of a URL after its authority, and for credentials: URL punctuation,
/// escapes (valid, cut short, not UTF-8), and any characters.
fn url_text() -> impl Strategy<Value = String> {
    let piece = prop_oneof![
        proptest::sample::select(
            &[
                "%", "%4", "%zz", "%ff", "%2F", "%00", "?", "&", "=", "#", "/", "@", ":", " ", "+"
            ][..]
        )
        .prop_map(String::from),
        "[a-z0-9]{1,4}",
        any::<char>().prop_map(String::from),
    ];
    proptest::collection::vec(piece, 0..8).prop_map(|v| v.concat())
}

proptest! {
    #![proptest_config(config::cases(64))]

    // Connecting with any credentials, path, query and fragment to 127.0.0.1:1 (where nothing
    // listens), by every scheme: a typed error (InvalidArgument for the URL, Connection for the
    // refused connection), never a panic, never a hang; no other host is ever named.
    #[test]
    fn connecting_to_nothing_fails_typed(
        scheme in proptest::sample::select(SCHEMES).prop_filter("TCP", |s| !s.contains("unix")),
        user in url_text(),
        password in proptest::option::of(url_text()),
        after in url_text(),
    ) {
        // Credentials cannot hold '/', '?', '#' or '@' (they would end them, or name a host).
        let clean = |s: &str| s.replace(['/', '?', '#', '@'], "");
        let auth = match &password {
            Some(p) => format!("{}:{}@", clean(&user).replace(':', ""), clean(p)),
            None => format!("{}@", clean(&user).replace(':', "")),
        };
        let after = if after.starts_with(['/', '?', '#']) { after } else { format!("/{after}") };
        let url = format!("{scheme}://{auth}127.0.0.1:1{after}");
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let options = leasehold::ClientOptions::new()
            .connect_timeout(std::time::Duration::from_secs(5))
            .response_timeout(std::time::Duration::from_secs(5));
        let result = runtime.block_on(async {
            tokio::time::timeout(
                std::time::Duration::from_secs(60),
                Locker::connect_with(&url, options),
            )
            .await
        });
        match result {
            Err(_) => prop_assert!(false, "{url:?}: connecting hangs"),
            Ok(Ok(_)) => prop_assert!(false, "{url:?}: connected to nothing"),
            Ok(Err(
                Error::InvalidArgument { .. }
                | Error::Connection { .. }
                | Error::NoQuorum { .. }
                | Error::BackendNotCompiled { .. },
            )) => {}
            Ok(Err(e)) => prop_assert!(false, "{url:?}: {e:?}"),
        }
    }
}

// The regression of core::url::tests::an_at_sign_in_the_path_is_no_userinfo, seen from the
// Redlock node list: `h1,h2/0@x:3` named the one node x:3 (user "h1"); it keeps both hosts (the
// path is left to the database check at connect).
#[test]
fn an_at_sign_in_the_path_keeps_the_redlock_hosts() {
    let nodes = node_urls("redlock://h1:1,h2:2/0@x:3").unwrap();
    assert_eq!(nodes.len(), 2, "{nodes:?}");
    assert!(nodes[0].starts_with("redis://h1:1/") && nodes[1].starts_with("redis://h2:2/"));
}
