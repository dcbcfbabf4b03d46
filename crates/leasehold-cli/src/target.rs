//! Which server to talk to, and connecting to it.

use anyhow::Context;
use leasehold::{ClientOptions, LockClient};

/// Where the server URL came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Source {
    /// `--url`.
    Flag,
    /// `$LEASEHOLD_URL` or `$REDIS_URL` (the variable's name).
    Env(&'static str),
    /// Nothing was given: the default local server.
    Default,
}

/// The server URL and where it came from.
#[derive(Debug, Clone)]
pub(crate) struct Target {
    pub(crate) url: String,
    pub(crate) source: Source,
}

/// The URL when neither `--url` nor the environment names one.
pub(crate) const DEFAULT_URL: &str = "redis://127.0.0.1:6379/";

impl Target {
    /// `--url`, else `$LEASEHOLD_URL`, else `$REDIS_URL` (empty variables count as unset), else
    /// [`DEFAULT_URL`].
    pub(crate) fn resolve(flag: Option<String>) -> Target {
        if let Some(url) = flag {
            return Target {
                url,
                source: Source::Flag,
            };
        }
        for var in ["LEASEHOLD_URL", "REDIS_URL"] {
            if let Ok(url) = std::env::var(var)
                && !url.trim().is_empty()
            {
                return Target {
                    url,
                    source: Source::Env(var),
                };
            }
        }
        Target {
            url: DEFAULT_URL.to_string(),
            source: Source::Default,
        }
    }

    /// The URL with its password masked, for messages.
    pub(crate) fn shown(&self) -> String {
        redact(&self.url)
    }

    /// Connects with the default options.
    pub(crate) async fn connect(&self) -> anyhow::Result<LockClient> {
        self.connect_with(ClientOptions::new()).await
    }

    /// Connects with `options`.
    pub(crate) async fn connect_with(&self, options: ClientOptions) -> anyhow::Result<LockClient> {
        LockClient::connect_with(&self.url, options)
            .await
            .with_context(|| format!("cannot use the server at {}", self.shown()))
    }
}

/// `scheme://user:password@host/...` -> `scheme://user:***@host/...`; anything else unchanged.
pub(crate) fn redact(url: &str) -> String {
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
}
