//! Where a [`RedisClient`](crate::redis::RedisClient) connects (see [`Endpoint`]).

use crate::core::error::{Error, Result};
use crate::core::url::{parse_hosts, percent_decode, redact, split_multi_host};

/// Where a [`RedisClient`](crate::redis::RedisClient) connects: one server, a Redis Cluster, or the
/// primary of a Sentinel-monitored set, and the URL forms that name each.
///
/// | form | meaning |
/// |---|---|
/// | `redis://[user:password@]host:port[/db]`, `valkey://…` | one server (`rediss://`, `valkeys://`: TLS) |
/// | `redis-cluster://[user:password@]host:port[,host:port…]` | a cluster, from one or more seed nodes (`rediss-cluster://`: TLS) |
/// | `redis-sentinel://[user:password@]host:port[,host:port…][/db]#master` | the primary named `master` by these sentinels (`rediss-sentinel://`: TLS to the data nodes) |
///
/// The Sentinel form is the one Lettuce (the Java client) established; the cluster form follows
/// it. Credentials in a cluster URL apply to every node; in a Sentinel URL, to the primary and
/// replicas (sentinels are asked without credentials). Ports default to 6379 (26379 for
/// sentinels). `valkey-cluster://` and `valkey-sentinel://` are accepted as synonyms.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Endpoint {
    /// One server, by its `redis://` / `rediss://` URL.
    Standalone(String),
    /// A Redis Cluster, by the URLs of one or more seed nodes (`redis://host:port/`).
    Cluster(Vec<String>),
    /// The primary that these sentinels name `master`.
    Sentinel {
        /// The sentinels' URLs (`redis://host:port/`).
        sentinels: Vec<String>,
        /// The master name the sentinels monitor.
        master: String,
        /// Database number on the data nodes.
        db: i64,
        /// ACL user name for the data nodes.
        username: Option<String>,
        /// Password for the data nodes.
        password: Option<String>,
        /// TLS to the data nodes.
        tls: bool,
    },
}

impl Endpoint {
    /// Parses any of the URL forms in the table above.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for an unknown scheme, an empty host list, a bad port, or a
    /// Sentinel URL without `#master`.
    pub fn parse(url: &str) -> Result<Endpoint> {
        let bad = |reason: String| Error::invalid("url", reason);
        // Quoted with its password masked: errors are printed and logged.
        let shown = redact(url);
        let Some((scheme, rest)) = url.split_once("://") else {
            return Err(bad(format!(
                "{shown:?} has no scheme (expected redis://, rediss://, redis-cluster://, redis-sentinel://)"
            )));
        };
        let scheme = scheme.to_ascii_lowercase();
        match scheme.as_str() {
            "redis" | "rediss" | "valkey" | "valkeys" | "redis+unix" | "unix" => {
                Ok(Endpoint::Standalone(url.to_string()))
            }
            "redis-cluster" | "rediss-cluster" | "valkey-cluster" | "valkeys-cluster" => {
                let tls = scheme.starts_with("rediss") || scheme.starts_with("valkeys");
                let (auth, hosts, _db, fragment) = split_multi_host(rest);
                if fragment.is_some() {
                    return Err(bad(format!("{shown:?}: a cluster URL takes no #fragment")));
                }
                let hosts = parse_hosts(hosts, 6379).map_err(|r| bad(format!("{shown:?}: {r}")))?;
                let scheme = if tls { "rediss" } else { "redis" };
                let auth = auth.map(|a| format!("{a}@")).unwrap_or_default();
                Ok(Endpoint::Cluster(
                    hosts
                        .iter()
                        .map(|h| format!("{scheme}://{auth}{h}/"))
                        .collect(),
                ))
            }
            "redis-sentinel" | "rediss-sentinel" | "valkey-sentinel" | "valkeys-sentinel" => {
                let tls = scheme.starts_with("rediss") || scheme.starts_with("valkeys");
                let (auth, hosts, db, fragment) = split_multi_host(rest);
                let master = match fragment {
                    Some(m) if !m.is_empty() => percent_decode(m),
                    _ => {
                        return Err(bad(format!(
                            "{shown:?}: a Sentinel URL names the master after '#' (redis-sentinel://host:26379#mymaster)"
                        )));
                    }
                };
                let hosts =
                    parse_hosts(hosts, 26379).map_err(|r| bad(format!("{shown:?}: {r}")))?;
                let db = match db {
                    None | Some("") => 0,
                    // Digits only: `i64::from_str` takes a sign, and SELECT refuses -1 only later.
                    Some(d) => Some(d)
                        .filter(|d| d.bytes().all(|b| b.is_ascii_digit()))
                        .and_then(|d| d.parse().ok())
                        .ok_or_else(|| bad(format!("{shown:?}: {d:?} is not a database number")))?,
                };
                // An empty user name is no user name, with a password (`:pw@`) or without (`@`).
                let user = |u: &str| (!u.is_empty()).then(|| percent_decode(u));
                let (username, password) = match auth {
                    None => (None, None),
                    Some(a) => match a.split_once(':') {
                        Some((u, p)) => (user(u), Some(percent_decode(p))),
                        None => (user(a), None),
                    },
                };
                Ok(Endpoint::Sentinel {
                    sentinels: hosts.iter().map(|h| format!("redis://{h}/")).collect(),
                    master,
                    db,
                    username,
                    password,
                    tls,
                })
            }
            other => Err(bad(format!(
                "unknown scheme {other:?} in {shown:?} (expected redis, rediss, valkey, valkeys, \
                 redis-cluster, rediss-cluster, redis-sentinel or rediss-sentinel; other \
                 backends, through leasehold::Locker: redlock, etcd, postgres)"
            ))),
        }
    }

    /// A cluster from seed node URLs (`redis://host:port/`).
    pub fn cluster<S: Into<String>>(seeds: impl IntoIterator<Item = S>) -> Endpoint {
        Endpoint::Cluster(seeds.into_iter().map(Into::into).collect())
    }

    /// The primary named `master` by these sentinels (URLs `redis://host:port/`), database 0,
    /// no credentials, no TLS.
    pub fn sentinel<S: Into<String>>(
        sentinels: impl IntoIterator<Item = S>,
        master: impl Into<String>,
    ) -> Endpoint {
        Endpoint::Sentinel {
            sentinels: sentinels.into_iter().map(Into::into).collect(),
            master: master.into(),
            db: 0,
            username: None,
            password: None,
            tls: false,
        }
    }

    /// Whether this endpoint uses TLS to the data nodes.
    pub fn uses_tls(&self) -> bool {
        match self {
            Endpoint::Standalone(u) => {
                let u = u.to_ascii_lowercase();
                u.starts_with("rediss://") || u.starts_with("valkeys://")
            }
            Endpoint::Cluster(seeds) => seeds.iter().any(|s| s.starts_with("rediss://")),
            Endpoint::Sentinel { tls, .. } => *tls,
        }
    }
}

impl std::str::FromStr for Endpoint {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        Endpoint::parse(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn standalone_urls_pass_through() {
        for u in ["redis://127.0.0.1:6379/", "rediss://h:1/2", "valkey://h/"] {
            assert_eq!(Endpoint::parse(u).unwrap(), Endpoint::Standalone(u.into()));
        }
    }

    #[test]
    fn cluster_urls_become_seed_lists() {
        assert_eq!(
            Endpoint::parse("redis-cluster://u:p@127.0.0.1:7000,127.0.0.1:7001,[::1]").unwrap(),
            Endpoint::Cluster(vec![
                "redis://u:p@127.0.0.1:7000/".into(),
                "redis://u:p@127.0.0.1:7001/".into(),
                "redis://u:p@[::1]:6379/".into(),
            ])
        );
        assert!(Endpoint::parse("rediss-cluster://h:1").unwrap().uses_tls());
        assert!(Endpoint::parse("redis-cluster://").is_err());
        assert!(Endpoint::parse("redis-cluster://h:0").is_err());
        assert!(Endpoint::parse("redis-cluster://h:99999").is_err());
        assert!(Endpoint::parse("redis-cluster://h:1#x").is_err());
    }

    #[test]
    fn sentinel_urls_name_the_master() {
        assert_eq!(
            Endpoint::parse("redis-sentinel://:s%40cret@h1:26380,h2/3#my%20master").unwrap(),
            Endpoint::Sentinel {
                sentinels: vec!["redis://h1:26380/".into(), "redis://h2:26379/".into()],
                master: "my master".into(),
                db: 3,
                username: None,
                password: Some("s@cret".into()),
                tls: false,
            }
        );
        assert!(Endpoint::parse("redis-sentinel://h1:26379").is_err());
        assert!(Endpoint::parse("redis-sentinel://h1:26379#").is_err());
        assert!(Endpoint::parse("redis-sentinel://h1:26379/x#m").is_err());
    }

    // Found by the property tests (tests/properties/urls.rs): `@` before the hosts gave the
    // user name Some(""), where `:pw@` gave None.
    #[test]
    fn an_empty_sentinel_user_name_is_none() {
        for url in ["redis-sentinel://@h#m", "redis-sentinel://%@h#m"] {
            let Endpoint::Sentinel { username, .. } = Endpoint::parse(url).unwrap() else {
                panic!("{url}: not a Sentinel endpoint");
            };
            let expected = url.contains('%').then(|| "%".to_string());
            assert_eq!(username, expected, "{url}");
        }
    }

    // Found by the property tests (tests/properties/urls.rs, refusals_never_show_the_password;
    // minimal input mysql://:AAAAAAAAAAAA@127.0.0.1:0): the messages quoted the whole URL,
    // password and all, and the CLI prints them on stderr.
    #[test]
    fn refusals_do_not_show_the_password() {
        for url in [
            "mysql://u:hunter2@127.0.0.1/",
            "u:hunter2@127.0.0.1:6379",
            "redis-cluster://u:hunter2@127.0.0.1:0",
            "rediss-cluster://u:hunter2@127.0.0.1:1#x",
            "redis-sentinel://u:hunter2@127.0.0.1:1",
            "redis-sentinel://u:hunter2@127.0.0.1:1/x#m",
        ] {
            let err = Endpoint::parse(url).unwrap_err();
            let shown = format!("{err} {err:?}");
            assert!(!shown.contains("hunter2"), "{shown}");
            assert!(shown.contains("u:***@127.0.0.1"), "{shown}");
        }
    }

    // Found by sentinel_databases_are_digits (tests/properties/urls.rs; minimal input "-0"): a
    // signed database number was accepted.
    #[test]
    fn a_sentinel_database_is_digits_only() {
        for db in ["-1", "-0", "+3", " 1"] {
            let url = format!("redis-sentinel://h/{db}#m");
            assert!(Endpoint::parse(&url).is_err(), "{url}");
        }
        let Endpoint::Sentinel { db, .. } = Endpoint::parse("redis-sentinel://h/007#m").unwrap()
        else {
            panic!("not a Sentinel endpoint");
        };
        assert_eq!(db, 7);
    }

    #[test]
    fn unknown_schemes_are_refused_by_name() {
        let e = Endpoint::parse("etcd://h:2379").unwrap_err().to_string();
        assert!(e.contains("unknown scheme \"etcd\""), "{e}");
        assert!(Endpoint::parse("localhost:6379").is_err());
    }
}
