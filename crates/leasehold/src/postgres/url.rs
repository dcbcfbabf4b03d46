//! leasehold's own `lock=…` parameter of `postgres://` URLs, and the connection settings a
//! URL names.

use std::str::FromStr;

use super::tls::{PgTls, connector, take_tls_params};
#[cfg(doc)]
use super::{PostgresClient, PostgresLeaseClient};
use crate::core::error::{Error, Result};
use crate::core::options::ClientOptions;

/// The connection settings `url` names (without its `lock=` parameter) and the TLS connector
/// its `sslmode` asks for, with `options`' connect timeout and the application name
/// `leasehold` unless the URL names one.
///
/// # Errors
/// [`Error::InvalidArgument`] for a malformed URL or unreadable TLS files.
pub(super) fn config(
    url: &str,
    options: &ClientOptions,
) -> Result<(tokio_postgres::Config, PgTls)> {
    let (url, tls_params) = take_tls_params(&without_lock_param(url))?;
    let mut config = tokio_postgres::Config::from_str(&url)
        .map_err(|e| Error::invalid("url", format!("{e} in a PostgreSQL URL")))?;
    let (ssl_mode, tls) = connector(&tls_params, options)?;
    config.ssl_mode(ssl_mode);
    config.connect_timeout(options.connect_timeout);
    if config.get_application_name().is_none() {
        config.application_name("leasehold");
    }
    Ok((config, tls))
}

/// `config`'s hosts, ports, user and database, as the `Debug` of the client `name`.
pub(super) fn debug_config(
    f: &mut std::fmt::Formatter<'_>,
    name: &str,
    config: &tokio_postgres::Config,
) -> std::fmt::Result {
    f.debug_struct(name)
        .field("hosts", &config.get_hosts())
        .field("ports", &config.get_ports())
        .field("user", &config.get_user())
        .field("dbname", &config.get_dbname())
        .finish_non_exhaustive()
}

/// `url` without its `lock=…` query parameter (leasehold's, not PostgreSQL's: `lock=lease`
/// picks [`PostgresLeaseClient`], `lock=session` the default [`PostgresClient`]).
pub(crate) fn without_lock_param(url: &str) -> String {
    let Some((base, query)) = url.split_once('?') else {
        return url.to_string();
    };
    let rest: Vec<&str> = query
        .split('&')
        .filter(|p| !p.is_empty() && p.split('=').next() != Some("lock"))
        .collect();
    if rest.is_empty() {
        base.to_string()
    } else {
        format!("{base}?{}", rest.join("&"))
    }
}

/// Whether a `postgres://` URL asks for lease rows (`lock=lease`), or for session locks.
///
/// # Errors
/// [`Error::InvalidArgument`] for another `lock=` value.
pub(crate) fn wants_lease_rows(url: &str) -> Result<bool> {
    let query = url.split_once('?').map_or("", |(_, q)| q);
    match query.split('&').find_map(|p| p.strip_prefix("lock=")) {
        None | Some("session") => Ok(false),
        Some("lease") => Ok(true),
        Some(other) => Err(Error::invalid(
            "url",
            format!("lock={other:?}: use lock=session (the default) or lock=lease"),
        )),
    }
}

#[cfg(test)]
mod tests {
    use std::str::FromStr;

    use proptest::prelude::*;

    use super::*;
    use crate::core::url::testing::{config, encode, host};

    /// A PostgreSQL connection parameter of the query string, and its value.
    fn param() -> impl Strategy<Value = (&'static str, String)> {
        prop_oneof![
            "[a-z0-9]{1,6}".prop_map(|v| ("application_name", v)),
            "[1-9][0-9]{0,2}".prop_map(|v| ("connect_timeout", v)),
            "[a-z]{1,6}".prop_map(|v| ("options", v)),
        ]
    }

    proptest! {
        #![proptest_config(config(512))]

        // Any text: no panic; the lock parameter is gone from what PostgreSQL is given.
        #[test]
        fn any_text_is_handled(url in ".*") {
            let _ = wants_lease_rows(&url);
            let rest = without_lock_param(&url);
            let query = rest.split_once('?').map_or("", |(_, q)| q);
            prop_assert!(query.split('&').all(|p| p.split('=').next() != Some("lock")), "{rest:?}");
        }

        // A generated URL with `lock=` anywhere among its parameters: lease rows iff
        // `lock=lease`, another value refused, and PostgreSQL's parser sees exactly the
        // host, port, user, password, database and other parameters of the URL.
        #[test]
        fn lock_param_is_taken_out_and_the_rest_kept(
            user in "[^\\x00]{1,12}",
            password in proptest::option::of("[^\\x00]{0,12}"),
            host in host(),
            port in proptest::option::of(1u16..),
            db in "[a-z][a-z0-9_]{0,8}",
            params in proptest::collection::vec(param(), 0..3),
            lock in proptest::option::of(prop_oneof![
                Just("lease".to_string()), Just("session".to_string()), "[a-z]{0,6}"
            ]),
            at in any::<prop::sample::Index>(),
        ) {
            let mut query: Vec<String> = params.iter().map(|(k, v)| format!("{k}={v}")).collect();
            if let Some(lock) = &lock {
                query.insert(at.index(query.len() + 1), format!("lock={lock}"));
            }
            let auth = match &password {
                None => format!("{}@", encode(&user)),
                Some(p) => format!("{}:{}@", encode(&user), encode(p)),
            };
            let port_text = port.map(|p| format!(":{p}")).unwrap_or_default();
            let mut url = format!("postgres://{auth}{host}{port_text}/{db}");
            if !query.is_empty() {
                url = format!("{url}?{}", query.join("&"));
            }
            match lock.as_deref() {
                None | Some("session") => prop_assert_eq!(wants_lease_rows(&url).unwrap(), false),
                Some("lease") => prop_assert_eq!(wants_lease_rows(&url).unwrap(), true),
                Some(_) => prop_assert!(wants_lease_rows(&url).is_err()),
            }
            let config = tokio_postgres::Config::from_str(&without_lock_param(&url))
                .map_err(|e| TestCaseError::fail(format!("{url:?}: {e}")))?;
            let bare = host.trim_start_matches('[').trim_end_matches(']');
            prop_assert_eq!(config.get_hosts(), &[tokio_postgres::config::Host::Tcp(bare.to_string())]);
            prop_assert_eq!(config.get_ports(), &[port.unwrap_or(5432)]);
            prop_assert_eq!(config.get_user(), Some(user.as_str()));
            prop_assert_eq!(config.get_password(), password.as_deref().map(str::as_bytes));
            prop_assert_eq!(config.get_dbname(), Some(db.as_str()));
            for (k, v) in &params {
                match *k {
                    "application_name" => {
                        let last = params.iter().rev().find(|(k, _)| *k == "application_name");
                        prop_assert_eq!(config.get_application_name(), last.map(|(_, v)| v.as_str()));
                    }
                    "options" => prop_assert!(config.get_options().is_some(), "{v}"),
                    _ => {}
                }
            }
        }
    }
}
