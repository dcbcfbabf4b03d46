//! Parsing `etcd://` and `etcds://` (TLS) URLs.

use crate::core::error::{Error, Result};

/// etcd's client port, when the URL names none.
const DEFAULT_PORT: u16 = 2379;

/// A parsed `etcd://` or `etcds://` URL.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct EtcdUrl {
    /// `http://host:port`, or `https://host:port` for `etcds://`.
    pub(super) endpoints: Vec<String>,
    pub(super) user: Option<(String, String)>,
    /// `etcds://`: TLS to every member.
    pub(super) tls: bool,
}

pub(super) fn parse_url(url: &str) -> Result<EtcdUrl> {
    let bad = |why: String| {
        Error::invalid(
            "url",
            format!(
                "{why} (expected etcd://[user:password@]host:port[,host:port...], or etcds:// for TLS)"
            ),
        )
    };
    let Some((scheme, rest)) = url.split_once("://") else {
        return Err(bad("no scheme".into()));
    };
    let tls = match scheme.to_ascii_lowercase().as_str() {
        "etcd" => false,
        "etcds" => true,
        _ => return Err(bad(format!("scheme {scheme:?} is not etcd or etcds"))),
    };
    let (auth, hosts, path, fragment) = crate::core::url::split_multi_host(rest);
    if path.is_some_and(|p| !p.is_empty()) || fragment.is_some() {
        return Err(bad("an etcd URL has no path or fragment".into()));
    }
    let hosts = crate::core::url::parse_hosts(hosts, DEFAULT_PORT).map_err(bad)?;
    let user = match auth {
        None => None,
        Some(auth) => {
            let (name, password) = auth.split_once(':').unwrap_or((auth, ""));
            let name = crate::core::url::percent_decode(name);
            if name.is_empty() {
                return Err(bad("empty user name".into()));
            }
            Some((name, crate::core::url::percent_decode(password)))
        }
    };
    let http = if tls { "https" } else { "http" };
    Ok(EtcdUrl {
        endpoints: hosts.into_iter().map(|h| format!("{http}://{h}")).collect(),
        user,
        tls,
    })
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::core::url::testing::{config, encode, host};

    proptest! {
        #![proptest_config(config(512))]

        // Any text: a parsed URL or InvalidArgument(url), never a panic.
        #[test]
        fn any_text_parses_or_is_refused(tail in ".*", scheme in "(?i:etcd)|[a-z]{0,5}") {
            for url in [format!("{scheme}://{tail}"), tail.clone()] {
                if let Err(e) = parse_url(&url) {
                    prop_assert!(matches!(e, Error::InvalidArgument { what: "url", .. }), "{e:?}");
                }
            }
        }

        // A well-formed URL gives exactly its endpoints and its decoded user and password; an
        // empty user name, a path or a fragment is refused.
        #[test]
        fn urls_round_trip(
            user in proptest::option::of((".*", proptest::option::of(".*"))),
            hosts in proptest::collection::vec((host(), proptest::option::of(1u16..)), 1..4),
            slash in any::<bool>(),
        ) {
            let auth = match &user {
                None => String::new(),
                Some((u, None)) => format!("{}@", encode(u)),
                Some((u, Some(p))) => format!("{}:{}@", encode(u), encode(p)),
            };
            let list: Vec<String> = hosts
                .iter()
                .map(|(h, p)| p.map_or(h.clone(), |p| format!("{h}:{p}")))
                .collect();
            let url = format!("etcd://{auth}{}{}", list.join(","), if slash { "/" } else { "" });
            let parsed = parse_url(&url);
            if user.as_ref().is_some_and(|(u, _)| u.is_empty()) {
                prop_assert!(parsed.is_err(), "{url:?}: {parsed:?}");
                return Ok(());
            }
            let endpoints: Vec<String> = hosts
                .iter()
                .map(|(h, p)| format!("http://{h}:{}", p.unwrap_or(DEFAULT_PORT)))
                .collect();
            let user = user.map(|(u, p)| (u, p.unwrap_or_default()));
            let secure: Vec<String> =
                endpoints.iter().map(|e| e.replacen("http://", "https://", 1)).collect();
            prop_assert_eq!(
                parse_url(&url.replacen("etcd://", "etcds://", 1)).unwrap(),
                EtcdUrl { endpoints: secure, user: user.clone(), tls: true }
            );
            prop_assert_eq!(parsed.unwrap(), EtcdUrl { endpoints, user, tls: false });
            for suffix in ["/db", "#f", "/@x:1"] {
                prop_assert!(parse_url(&format!("{url}{suffix}")).is_err(), "{url:?}{suffix}");
            }
        }
    }
}
