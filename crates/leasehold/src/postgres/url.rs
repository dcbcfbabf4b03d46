//! leasehold's own `lock=…` parameter of `postgres://` URLs.

#[cfg(doc)]
use super::{PostgresClient, PostgresLeaseClient};
use crate::core::error::{Error, Result};

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
