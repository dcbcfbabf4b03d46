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
