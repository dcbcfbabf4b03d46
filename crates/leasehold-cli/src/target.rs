//! Which server (or servers, for Redlock) to talk to, and connecting to them.

use std::time::Duration;

use anyhow::Context;
use leasehold::redis::{RedisClient, RedisOptions};
use leasehold::redlock::{Redlock, RedlockOptions};
use leasehold::{ClientOptions, Locker, NodeOutcome};

use crate::exit::{NoMajority, Usage};

/// Where the server URLs came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// `--url`.
    Flag,
    /// `$LEASEHOLD_URL` or `$REDIS_URL` (the variable's name).
    Env(&'static str),
    /// Nothing was given: the default local server.
    Default,
}

/// The server URL and where it came from.
#[derive(Debug, Clone)]
pub struct Target {
    pub url: String,
    pub source: Source,
    /// `--tls-ca-file`, `--tls-cert-file`, `--tls-key-file`.
    pub tls: TlsPaths,
}

/// `--tls-ca-file`, `--tls-cert-file` and `--tls-key-file`.
#[derive(Debug, Clone, Default)]
pub struct TlsPaths {
    pub ca: Option<std::path::PathBuf>,
    pub cert: Option<std::path::PathBuf>,
    pub key: Option<std::path::PathBuf>,
}

impl TlsPaths {
    /// `options` with these files.
    pub fn apply(&self, mut options: ClientOptions) -> ClientOptions {
        if let Some(path) = &self.ca {
            options = options.tls_ca_file(path);
        }
        if let Some(path) = &self.cert {
            options = options.tls_cert_file(path);
        }
        if let Some(path) = &self.key {
            options = options.tls_key_file(path);
        }
        options
    }
}

/// What the URLs name together.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Topology {
    /// One server per URL: one URL is a plain lock, several are a Redlock set.
    PerUrl,
    /// `--cluster`: seeds of one Redis Cluster.
    Cluster,
    /// `--sentinel-master NAME`: sentinels of the primary NAME.
    Sentinel(String),
}

/// `$LEASEHOLD_HISTORY`: `1` (or `on`, `true`, `yes`) records each lock's history with the
/// library's defaults (100 events per key, kept 7 days); unset, empty, `0` (`off`, `false`,
/// `no`): not recorded.
///
/// # Errors
/// [`Usage`] for any other value.
pub fn history_from_env() -> Result<Option<leasehold::HistoryOptions>, Usage> {
    let value = std::env::var("LEASEHOLD_HISTORY").unwrap_or_default();
    match value.trim().to_ascii_lowercase().as_str() {
        "" | "0" | "off" | "false" | "no" => Ok(None),
        "1" | "on" | "true" | "yes" => Ok(Some(leasehold::HistoryOptions::new())),
        other => Err(Usage(format!(
            "LEASEHOLD_HISTORY={other:?}: expected 1 (record lock history) or 0"
        ))),
    }
}

/// The URL when neither `--url` nor the environment names one.
pub const DEFAULT_URL: &str = "redis://127.0.0.1:6379/";

/// The servers the lock commands talk to: one (a plain lock), or several (Redlock over them).
#[derive(Debug, Clone)]
pub struct Servers {
    pub urls: Vec<String>,
    pub source: Source,
    /// `--node-timeout` (Redlock only; the library's default when absent).
    pub node_timeout: Option<Duration>,
    /// What the URLs name.
    pub topology: Topology,
    /// `--tls-ca-file`, `--tls-cert-file`, `--tls-key-file`.
    pub tls: TlsPaths,
}

impl Servers {
    /// Every `--url`, else the URLs listed in `$LEASEHOLD_URL` (separated by commas), else
    /// `$REDIS_URL` (one URL), else [`DEFAULT_URL`]. Empty variables count as unset.
    pub fn resolve(flags: Vec<String>, node_timeout: Option<Duration>) -> Servers {
        let (urls, source) = if !flags.is_empty() {
            (flags, Source::Flag)
        } else if let Some(list) = env("LEASEHOLD_URL") {
            (split_urls(&list), Source::Env("LEASEHOLD_URL"))
        } else if let Some(url) = env("REDIS_URL") {
            (vec![url], Source::Env("REDIS_URL"))
        } else {
            (vec![DEFAULT_URL.to_string()], Source::Default)
        };
        Servers {
            urls,
            source,
            node_timeout,
            topology: Topology::PerUrl,
            tls: TlsPaths::default(),
        }
    }

    /// `--cluster`, `--sentinel-master` and the `--tls-*` files.
    ///
    /// # Errors
    /// [`Usage`] for both `--cluster` and `--sentinel-master`, or for a master name without
    /// sentinels to ask.
    pub fn topology(
        mut self,
        cluster: bool,
        sentinel_master: Option<String>,
        tls: TlsPaths,
    ) -> Result<Servers, Usage> {
        self.topology = match (cluster, sentinel_master) {
            (true, Some(_)) => {
                return Err(Usage(
                    "--cluster and --sentinel-master exclude each other".into(),
                ));
            }
            (true, None) => Topology::Cluster,
            (false, Some(name)) if name.trim().is_empty() => {
                return Err(Usage("--sentinel-master needs a master name".into()));
            }
            (false, Some(name)) => Topology::Sentinel(name),
            (false, None) => Topology::PerUrl,
        };
        self.tls = tls;
        Ok(self)
    }

    /// The one server, unless several were given (or the URLs name a cluster or sentinels).
    pub fn single(&self) -> Option<Target> {
        match (self.urls.as_slice(), &self.topology) {
            ([url], Topology::PerUrl) => Some(Target {
                url: url.clone(),
                source: self.source,
                tls: self.tls.clone(),
            }),
            _ => None,
        }
    }

    /// The client options every connection of this command starts from.
    pub fn client_options(&self) -> ClientOptions {
        self.tls.apply(ClientOptions::new())
    }

    /// Connects: a [`RedisClient`] for one server, a cluster or a Sentinel-monitored primary, a
    /// [`Redlock`] over several servers (or one `redlock://` URL), or the backend an `etcd://` or
    /// `postgres://` URL names; all as a [`Locker`].
    ///
    /// With `LEASEHOLD_HISTORY=1`, the locker records each lock's history (see
    /// [`history_from_env`]).
    pub async fn connect(&self) -> anyhow::Result<Locker> {
        let locker = self.connect_backend().await?;
        match history_from_env()? {
            Some(history) => Ok(locker.with_history(history)?),
            None => Ok(locker),
        }
    }

    async fn connect_backend(&self) -> anyhow::Result<Locker> {
        if self.urls.iter().any(|u| backend_of(u) == Some("memory")) {
            return Err(Usage(
                "a memory:// lock lives in the memory of one process, and each leasehold \
                 command is a process of its own: use file:///path/to/folder for locks on \
                 this machine"
                    .into(),
            )
            .into());
        }
        if let Some(other) = self.other_backend()? {
            return Locker::connect_with(&other, self.client_options())
                .await
                .with_context(|| match backend_of(&other) {
                    Some("file") => format!("cannot use the lock folder {other}"),
                    _ => format!("cannot use the server at {}", redact(&other)),
                });
        }
        if let [url] = self.urls.as_slice()
            && backend_of(url) == Some("redlock")
        {
            let nodes = leasehold::internal::node_urls(url)?;
            let expanded = Servers {
                urls: nodes,
                ..self.clone()
            };
            return Box::pin(expanded.connect()).await;
        }
        let shown = || {
            self.urls
                .iter()
                .map(|u| redact(u))
                .collect::<Vec<_>>()
                .join(", ")
        };
        match &self.topology {
            Topology::Cluster => {
                return RedisClient::connect_cluster(&self.urls, self.client_options())
                    .await
                    .map(Locker::from)
                    .with_context(|| format!("cannot use the cluster at {}", shown()));
            }
            Topology::Sentinel(master) => {
                return RedisClient::connect_sentinel(&self.urls, master, self.client_options())
                    .await
                    .map(Locker::from)
                    .with_context(|| {
                        format!(
                            "cannot use the primary {master:?} of the sentinels {}",
                            shown()
                        )
                    });
            }
            Topology::PerUrl => {}
        }
        if let Some(target) = self.single() {
            return Ok(target.connect().await?.into());
        }
        if let Some(twice) = same_server_twice(&self.urls) {
            return Err(Usage(format!(
                "the server {twice} is given twice: Redlock needs independent servers"
            ))
            .into());
        }
        let mut options = RedlockOptions::new();
        if let Some(timeout) = self.node_timeout {
            options = options.node_timeout(timeout);
        }
        let urls: Vec<&str> = self.urls.iter().map(String::as_str).collect();
        match Redlock::connect(&urls, options.clone()).await {
            Ok(redlock) => Ok(redlock.into()),
            // Nothing to lock yet: say who could not be reached, in this command's words.
            Err(leasehold::Error::NoQuorum { needed, nodes, .. }) => Err(NoMajority {
                what: "connect to".into(),
                needed,
                total: nodes.0.len(),
                nodes: nodes
                    .0
                    .into_iter()
                    .map(|r| {
                        let outcome = match r.outcome {
                            NodeOutcome::Granted => "connected".to_string(),
                            other => other.to_string(),
                        };
                        (r.node, outcome)
                    })
                    .collect(),
            }
            .into()),
            Err(e) => Err(anyhow::Error::new(e).context(format!(
                "cannot use the Redlock nodes {}",
                self.urls
                    .iter()
                    .map(|u| redact(u))
                    .collect::<Vec<_>>()
                    .join(", ")
            ))),
        }
    }
}

/// The backend `url`'s scheme names ([`Locker::backend_of`]), if any.
fn backend_of(url: &str) -> Option<&'static str> {
    Locker::backend_of(url).ok()
}

impl Servers {
    /// The one `etcd://` or `postgres://` URL, if that is what was given.
    ///
    /// # Errors
    /// [`Usage`] for such a URL beside others, or with `--cluster` / `--sentinel-master`.
    fn other_backend(&self) -> Result<Option<String>, Usage> {
        let others: Vec<&String> = self
            .urls
            .iter()
            .filter(|u| matches!(backend_of(u), Some("etcd" | "postgres" | "file")))
            .collect();
        match (others.as_slice(), self.urls.len(), &self.topology) {
            ([], _, _) => Ok(None),
            ([url], 1, Topology::PerUrl) => Ok(Some((*url).clone())),
            ([url], 1, _) => Err(Usage(format!(
                "{} is not a Redis server: --cluster and --sentinel-master do not apply",
                redact(url)
            ))),
            _ => Err(Usage(
                "an etcd://, postgres:// or file:// URL names the whole backend: give it alone \
                 (one --url)"
                    .into(),
            )),
        }
    }
}

/// A variable's value, unless unset or blank.
fn env(var: &str) -> Option<String> {
    std::env::var(var).ok().filter(|v| !v.trim().is_empty())
}

/// `url1,url2,...` -> the URLs. A comma splits only where a URL scheme (`redis://`) follows, so
/// a comma inside a password stays part of it; blanks and stray commas around the URLs are
/// dropped.
pub fn split_urls(list: &str) -> Vec<String> {
    let mut urls: Vec<String> = Vec::new();
    for part in list.split(',') {
        match urls.last_mut() {
            Some(last) if !has_scheme(part.trim_start()) => {
                last.push(',');
                last.push_str(part);
            }
            _ => urls.push(part.to_string()),
        }
    }
    urls.into_iter()
        .map(|u| {
            u.trim_matches(|c: char| c == ',' || c.is_whitespace())
                .to_string()
        })
        .filter(|u| !u.is_empty())
        .collect()
}

/// Starts with `scheme://`.
fn has_scheme(s: &str) -> bool {
    s.split_once("://").is_some_and(|(scheme, _)| {
        scheme.starts_with(|c: char| c.is_ascii_alphabetic())
            && scheme
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
    })
}

/// The first `host:port` (or socket path) that two of `urls` share, if any.
fn same_server_twice(urls: &[String]) -> Option<String> {
    let mut seen = std::collections::HashSet::new();
    urls.iter()
        .map(|u| server_of(u))
        .find(|s| !seen.insert(s.clone()))
}

/// A URL's server: its authority without credentials (lower-cased), or its path for a socket.
fn server_of(url: &str) -> String {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let authority = &rest[..end];
    let host = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    if host.is_empty() {
        rest.split(['?', '#']).next().unwrap_or(rest).to_string()
    } else {
        host.to_ascii_lowercase()
    }
}

impl Target {
    /// The URL with its password masked, for messages.
    pub fn shown(&self) -> String {
        redact(&self.url)
    }

    /// Connects with the default options.
    pub async fn connect(&self) -> anyhow::Result<RedisClient> {
        self.connect_with(ClientOptions::new()).await
    }

    /// Connects with `options` (and the `--tls-*` files).
    pub async fn connect_with(
        &self,
        options: impl Into<RedisOptions>,
    ) -> anyhow::Result<RedisClient> {
        let mut options: RedisOptions = options.into();
        if let Some(path) = &self.tls.ca {
            options = options.tls_ca_file(path);
        }
        if let Some(path) = &self.tls.cert {
            options = options.tls_cert_file(path);
        }
        if let Some(path) = &self.tls.key {
            options = options.tls_key_file(path);
        }
        RedisClient::connect_with(&self.url, options)
            .await
            .with_context(|| format!("cannot use the server at {}", self.shown()))
    }
}

/// `scheme://user:password@host/...` -> `scheme://user:***@host/...`; anything else unchanged.
pub fn redact(url: &str) -> String {
    let Some(scheme_end) = url.find("://").map(|i| i + 3) else {
        return url.to_string();
    };
    let rest = &url[scheme_end..];
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let Some(at) = rest[..authority_end].rfind('@') else {
        return url.to_string();
    };
    match rest[..at].find(':') {
        Some(colon) => format!(
            "{}{}:***{}",
            &url[..scheme_end],
            &rest[..colon],
            &rest[at..]
        ),
        None => url.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_are_masked() {
        assert_eq!(
            redact("redis://:s3cret@127.0.0.1:6379/"),
            "redis://:***@127.0.0.1:6379/"
        );
        assert_eq!(redact("redis://bob:pw@h/0"), "redis://bob:***@h/0");
        assert_eq!(redact("redis://bob@h/0"), "redis://bob@h/0");
        assert_eq!(redact("redis://127.0.0.1:6379/"), "redis://127.0.0.1:6379/");
        assert_eq!(redact("not a url"), "not a url");
    }

    #[test]
    fn url_lists_split_before_each_scheme() {
        assert_eq!(
            split_urls("redis://a:1/, valkey://b:2/0,redis://:p,w@c:3/"),
            ["redis://a:1/", "valkey://b:2/0", "redis://:p,w@c:3/"]
        );
        assert_eq!(split_urls("redis://a:1/"), ["redis://a:1/"]);
        assert_eq!(split_urls("redis://a:1/,"), ["redis://a:1/"]);
        assert_eq!(
            split_urls(", redis://a:1/ ,, rediss://b:2 "),
            ["redis://a:1/", "rediss://b:2"]
        );
    }

    mod properties {
        use proptest::prelude::*;

        use super::super::*;

        fn config() -> ProptestConfig {
            let cases = std::env::var("PROPTEST_CASES")
                .ok()
                .and_then(|c| c.parse().ok())
                .unwrap_or(512);
            ProptestConfig {
                cases,
                failure_persistence: None,
                ..ProptestConfig::default()
            }
        }

        /// `[user[:password]@]`; passwords may hold commas and '@'.
        fn auth() -> impl Strategy<Value = String> {
            proptest::option::of(("[a-z]{0,4}", proptest::option::of("[a-zA-Z0-9,@!]{0,8}")))
                .prop_map(|auth| match auth {
                    None => String::new(),
                    Some((u, None)) => format!("{u}@"),
                    Some((u, Some(p))) => format!("{u}:{p}@"),
                })
        }

        fn host() -> impl Strategy<Value = String> {
            "[a-z][a-z0-9.]{0,6}|\\[::1\\]"
        }

        /// `scheme://[user[:password]@]host:port[/db]`.
        fn url() -> impl Strategy<Value = String> {
            (
                "(redis|rediss|valkey|redis\\+unix|etcd|postgres)",
                auth(),
                host(),
                1u16..,
                "(/[0-9]{0,2})?",
            )
                .prop_map(|(scheme, auth, host, port, db)| {
                    format!("{scheme}://{auth}{host}:{port}{db}")
                })
        }

        proptest! {
            #![proptest_config(config())]

            // A list joined with commas (and blanks, and stray commas) splits back into its URLs,
            // commas inside passwords included.
            #[test]
            fn url_lists_split_back(
                urls in proptest::collection::vec(url(), 1..5),
                seps in proptest::collection::vec("[ ,]{0,2},[ ,]{0,2}", 4),
                around in ("[ ,]{0,3}", "[ ,]{0,3}"),
            ) {
                let mut list = around.0.clone();
                for (i, u) in urls.iter().enumerate() {
                    if i > 0 {
                        list.push_str(&seps[i - 1]);
                    }
                    list.push_str(u);
                }
                list.push_str(&around.1);
                prop_assert_eq!(split_urls(&list), urls);
            }

            // Redaction: no panic on any text; a password is masked, the rest kept; masking twice
            // changes nothing more.
            #[test]
            fn redaction_masks_the_password(url in url(), raw in any::<String>()) {
                let _ = redact(&raw);
                let shown = redact(&url);
                prop_assert_eq!(redact(&shown), shown.clone());
                let rest = url.split_once("://").unwrap().1;
                let authority = rest.split(['/', '?', '#']).next().unwrap();
                match authority.rsplit_once('@').and_then(|(a, _)| a.split_once(':')) {
                    Some((user, _)) => {
                        let host = authority.rsplit_once('@').unwrap().1;
                        prop_assert!(shown.contains(&format!("{user}:***@{host}")), "{shown}");
                    }
                    None => prop_assert_eq!(shown, url),
                }
            }

            // The same host and port twice, whatever the credentials, database, scheme or letter
            // case, is noticed; another port is not.
            #[test]
            fn the_same_server_twice_is_noticed_whatever_else_differs(
                host in host(),
                port in 1u16..u16::MAX,
                (a, b) in (auth(), auth()),
                db in "(/[0-9]{0,2})?",
                upper in any::<bool>(),
            ) {
                let one = format!("redis://{a}{host}:{port}/0");
                let shouted = if upper { host.to_ascii_uppercase() } else { host.clone() };
                let two = format!("rediss://{b}{shouted}:{port}{db}");
                prop_assert_eq!(same_server_twice(&[one.clone(), two]), Some(format!("{host}:{port}")));
                let next = format!("redis://{a}{host}:{}/0", port + 1);
                prop_assert_eq!(same_server_twice(&[one, next]), None);
            }
        }
    }

    #[test]
    fn the_same_server_twice_is_noticed() {
        let urls = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            same_server_twice(&urls(&["redis://a:1/0", "redis://:pw@A:1/1"])),
            Some("a:1".into())
        );
        assert_eq!(
            same_server_twice(&urls(&["redis://a:1/", "redis://a:2/"])),
            None
        );
        assert_eq!(
            same_server_twice(&urls(&[
                "redis+unix:///s.sock",
                "redis+unix:///s.sock?db=1"
            ])),
            Some("/s.sock".into())
        );
    }
}
