//! [`ServerOptions`]: how to configure a [`Server`].

use crate::{FakeClock, TlsFiles};
#[cfg(doc)]
use crate::{HarnessError, Server};

/// How to configure a [`Server`]. Builder style:
/// `ServerOptions::new().aof(true).requirepass("secret")`.
#[derive(Debug, Clone, Default)]
pub struct ServerOptions {
    pub(super) aof: bool,
    pub(super) requirepass: Option<String>,
    pub(super) tls: Option<TlsFiles>,
    pub(super) args: Vec<String>,
    pub(super) fake_clock: Option<FakeClock>,
}

impl ServerOptions {
    /// Defaults: no persistence, no password, no extra arguments.
    pub fn new() -> Self {
        Self::default()
    }

    /// Enables the append-only file (`--appendonly yes --appendfsync always`), so data
    /// written before a crash survives [`Server::restart`].
    pub fn aof(mut self, enabled: bool) -> Self {
        self.aof = enabled;
        self
    }

    /// Requires this password (`--requirepass`). [`Server::command`] authenticates with it;
    /// [`Server::url`] does not contain it.
    pub fn requirepass(mut self, password: impl Into<String>) -> Self {
        self.requirepass = Some(password.into());
        self
    }

    /// Also listens with TLS, on a second free port ([`Server::tls_port`]), with the
    /// certificate and key of `files`: `--tls-port Q --tls-cert-file --tls-key-file
    /// --tls-ca-cert-file --tls-auth-clients no`. The plain port stays open (the harness'
    /// own connections use it). Starting fails with [`HarnessError::Unsupported`] if the
    /// binary was built without TLS.
    pub fn tls(mut self, files: &TlsFiles) -> Self {
        self.tls = Some(files.clone());
        self
    }

    /// Runs the server on `clock` (libfaketime preloaded, its offset read from the clock's file
    /// on every call), also after [`Server::restart`]: [`FakeClock::jump`] moves the server's
    /// wall clock while it runs, and its keys expire early.
    pub fn fake_clock(mut self, clock: &FakeClock) -> Self {
        self.fake_clock = Some(clock.clone());
        self
    }

    /// Appends one raw command-line argument, e.g. `.arg("--maxmemory").arg("10mb")`.
    pub fn arg(mut self, arg: impl Into<String>) -> Self {
        self.args.push(arg.into());
        self
    }

    /// Appends several raw command-line arguments.
    pub fn args<I, S>(mut self, args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.args.extend(args.into_iter().map(Into::into));
        self
    }

    /// Whether the append-only file is enabled.
    pub fn is_aof(&self) -> bool {
        self.aof
    }

    /// The password set with [`ServerOptions::requirepass`].
    pub fn password(&self) -> Option<&str> {
        self.requirepass.as_deref()
    }

    /// The certificate files set with [`ServerOptions::tls`].
    pub fn tls_files(&self) -> Option<&TlsFiles> {
        self.tls.as_ref()
    }
}
