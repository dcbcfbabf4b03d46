//! One real PgBouncer (Debian's `pgbouncer` package) per [`PgBouncer`], in front of a harness
//! [`Postgres`]: a connection pooler, by default in `pool_mode = transaction` (what many
//! managed PostgreSQL offerings put in front of their servers).
//!
//! Each [`PgBouncer`] gets its own temporary directory (its configuration, user list, log and
//! pid file) and a free loopback port, and runs as a child of the test process. PgBouncer
//! refuses to run as root, so when the tests run as root it runs as the `postgres` system user,
//! like the harness's PostgreSQL.

use std::fs::{self, File};
use std::net::{SocketAddr, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use nix::unistd::{Gid, Uid};
use tempfile::TempDir;

use crate::HarnessError;
// Probing, start attempts and log tails as for the PostgreSQL it fronts.
use crate::postgres::{
    LOG_TAIL_LINES, POLL_INTERVAL, POSTGRES_USER, PROBE_TIMEOUT, Postgres, START_ATTEMPTS,
    is_executable, system_user_if_root, temp_parent,
};
use crate::process::Process;
use crate::server::{free_port, release_port};

/// How long PgBouncer may take to accept connections after being spawned.
const READY_TIMEOUT: Duration = Duration::from_secs(20);
/// How long [`PgBouncer::stop`] waits after SIGTERM before it sends SIGKILL.
const STOP_GRACE: Duration = Duration::from_secs(5);

const CONFIG: &str = "pgbouncer.ini";
const USERLIST: &str = "userlist.txt";
const LOG: &str = "pgbouncer.log";
const OUTPUT: &str = "pgbouncer.out";

/// The `pgbouncer` binary, if installed: `pgbouncer` on `PATH`, else Debian's
/// `/usr/sbin/pgbouncer`.
pub fn find_pgbouncer() -> Option<PathBuf> {
    let on_path = std::env::var_os("PATH").and_then(|path| {
        std::env::split_paths(&path)
            .map(|dir| dir.join("pgbouncer"))
            .find(|p| is_executable(p))
    });
    on_path.or_else(|| {
        let debian = PathBuf::from("/usr/sbin/pgbouncer");
        is_executable(&debian).then_some(debian)
    })
}

/// PgBouncer's `pool_mode`: when a server session goes back to the pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PoolMode {
    /// After each transaction: one client's session state (advisory locks, `SET`, prepared
    /// statements) is seen by the next client of that server session.
    #[default]
    Transaction,
    /// When the client disconnects (after `server_reset_query`).
    Session,
}

impl PoolMode {
    fn as_str(self) -> &'static str {
        match self {
            PoolMode::Transaction => "transaction",
            PoolMode::Session => "session",
        }
    }
}

/// How to configure a [`PgBouncer`].
#[derive(Debug, Clone)]
pub struct PgBouncerOptions {
    pool_mode: PoolMode,
    server_reset_query: Option<String>,
    users: Vec<String>,
    /// More `[pgbouncer]` settings, `(name, value)`, written after the defaults.
    settings: Vec<(String, String)>,
}

impl Default for PgBouncerOptions {
    fn default() -> Self {
        PgBouncerOptions {
            pool_mode: PoolMode::Transaction,
            server_reset_query: None,
            users: vec![POSTGRES_USER.to_owned()],
            settings: Vec::new(),
        }
    }
}

impl PgBouncerOptions {
    /// Transaction pooling, PgBouncer's default `server_reset_query` (`DISCARD ALL`, used in
    /// session mode only), and the harness's user [`POSTGRES_USER`].
    pub fn new() -> Self {
        Self::default()
    }

    /// The pool mode.
    pub fn pool_mode(mut self, mode: PoolMode) -> Self {
        self.pool_mode = mode;
        self
    }

    /// `server_reset_query` (`""`: none, so a server session goes back to the pool with its
    /// session state, advisory locks included).
    pub fn server_reset_query(mut self, query: impl Into<String>) -> Self {
        self.server_reset_query = Some(query.into());
        self
    }

    /// Any other `[pgbouncer]` setting (`server_lifetime`, `server_idle_timeout`,
    /// `client_idle_timeout`, ...; `default_pool_size` replaces the default of 20), written
    /// as `name = value`. Not checked: PgBouncer refuses to start on a bad one.
    pub fn setting(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.settings.push((name.into(), value.into()));
        self
    }

    /// One more user that may log in (authentication is `trust`; PgBouncer still wants every
    /// user name in its user list).
    pub fn user(mut self, name: impl Into<String>) -> Self {
        self.users.push(name.into());
        self
    }
}

/// A running PgBouncer on `127.0.0.1` in front of a [`Postgres`], with its own temporary
/// directory. Every database name is passed through to that server (`* = host=… port=…`).
///
/// Dropping it stops the process (also when a test panics) and removes the directory. It must
/// not outlive the [`Postgres`] in any useful way: it only relays to it.
#[derive(Debug)]
pub struct PgBouncer {
    binary: PathBuf,
    run_as: Option<(Uid, Gid)>,
    port: u16,
    dir: TempDir,
    process: Process,
}

impl PgBouncer {
    /// Writes a configuration for `postgres` (auth `trust`, the options' pool mode and reset
    /// query, `max_client_conn = 200`, `default_pool_size = 20`, then
    /// [`PgBouncerOptions::setting`]s), starts `pgbouncer` on a free
    /// loopback port and waits (at most 20 s) until it accepts connections; retried on a new
    /// port if the process exits during start-up, up to 5 times.
    ///
    /// # Errors
    /// [`HarnessError::NotInstalled`] without PgBouncer; [`HarnessError::Setup`] if the system
    /// user is missing (as root); [`HarnessError::StartFailed`] if it does not come up.
    pub fn start(postgres: &Postgres, options: &PgBouncerOptions) -> Result<Self, HarnessError> {
        let binary = find_pgbouncer()
            .ok_or_else(|| HarnessError::NotInstalled("no pgbouncer binary found".to_owned()))?;
        let run_as = system_user_if_root("PgBouncer")?;
        let dir = tempfile::Builder::new()
            .prefix("leasehold-pgbouncer-")
            .tempdir_in(temp_parent(run_as.is_some())?)?;
        let userlist: String = options
            .users
            .iter()
            .map(|u| format!("\"{}\" \"\"\n", u.replace('"', "\"\"")))
            .collect();
        fs::write(dir.path().join(USERLIST), userlist)?;
        if let Some((uid, gid)) = run_as {
            for path in [dir.path().to_path_buf(), dir.path().join(USERLIST)] {
                std::os::unix::fs::chown(&path, Some(uid.as_raw()), Some(gid.as_raw()))?;
            }
        }
        let mut bouncer = PgBouncer {
            binary,
            run_as,
            port: 0,
            dir,
            process: Process::default(),
        };
        let mut last = None;
        for _ in 0..START_ATTEMPTS {
            let port = free_port()?;
            bouncer.write_config(postgres, options, port)?;
            match bouncer.launch(port) {
                Ok(child) => {
                    bouncer.port = port;
                    bouncer.process.set(child);
                    return Ok(bouncer);
                }
                Err((error, retry)) => {
                    release_port(port);
                    if !retry {
                        return Err(error);
                    }
                    last = Some(error);
                }
            }
        }
        Err(last.expect("at least one start attempt"))
    }

    /// `postgres://leasehold@127.0.0.1:PORT/postgres`: the harness's database through the
    /// pooler.
    pub fn url(&self) -> String {
        self.url_for(POSTGRES_USER)
    }

    /// As [`PgBouncer::url`], for another user (added with [`PgBouncerOptions::user`]).
    pub fn url_for(&self, user: &str) -> String {
        format!(
            "postgres://{user}@127.0.0.1:{}/{}",
            self.port,
            crate::POSTGRES_DATABASE
        )
    }

    /// `postgres://leasehold@127.0.0.1:PORT/pgbouncer`: PgBouncer's admin console.
    pub fn admin_url(&self) -> String {
        format!(
            "postgres://{POSTGRES_USER}@127.0.0.1:{}/pgbouncer",
            self.port
        )
    }

    /// The TCP port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The temporary directory: configuration, user list, log.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The last `lines` lines of PgBouncer's log and output.
    pub fn log_tail(&self, lines: usize) -> String {
        crate::server::log_files_tail(self.dir.path(), &[LOG, OUTPUT], lines)
    }

    /// Whether the process is alive.
    pub fn is_running(&mut self) -> bool {
        self.process.is_running()
    }

    /// SIGTERM (PgBouncer's immediate shutdown: every client and server connection is closed),
    /// SIGKILL after 5 s; reaped either way. No-op if not running.
    pub fn stop(&mut self) {
        self.process
            .stop_with(nix::sys::signal::Signal::SIGTERM, STOP_GRACE);
    }

    fn write_config(
        &self,
        postgres: &Postgres,
        options: &PgBouncerOptions,
        port: u16,
    ) -> Result<(), HarnessError> {
        let dir = self.dir.path();
        let reset = options
            .server_reset_query
            .as_deref()
            .map(|q| format!("server_reset_query = {q}\n"))
            .unwrap_or_default();
        let pool_size = options
            .settings
            .iter()
            .rev()
            .find(|(name, _)| name == "default_pool_size")
            .map_or("20", |(_, value)| value.as_str());
        let extra: String = options
            .settings
            .iter()
            .filter(|(name, _)| name != "default_pool_size")
            .map(|(name, value)| format!("{name} = {value}\n"))
            .collect();
        let config = format!(
            "[databases]\n\
             * = host=127.0.0.1 port={pg_port}\n\
             [pgbouncer]\n\
             listen_addr = 127.0.0.1\n\
             listen_port = {port}\n\
             unix_socket_dir =\n\
             auth_type = trust\n\
             auth_file = {userlist}\n\
             admin_users = {admin}\n\
             pool_mode = {mode}\n\
             {reset}\
             max_client_conn = 200\n\
             default_pool_size = {pool_size}\n\
             ignore_startup_parameters = extra_float_digits,options\n\
             {extra}\
             logfile = {log}\n\
             pidfile = {pid}\n",
            pg_port = postgres.port(),
            userlist = dir.join(USERLIST).display(),
            admin = POSTGRES_USER,
            mode = options.pool_mode.as_str(),
            log = dir.join(LOG).display(),
            pid = dir.join("pgbouncer.pid").display(),
        );
        let path = dir.join(CONFIG);
        fs::write(&path, config)?;
        if let Some((uid, gid)) = self.run_as {
            std::os::unix::fs::chown(&path, Some(uid.as_raw()), Some(gid.as_raw()))?;
        }
        Ok(())
    }

    /// Spawns PgBouncer (in the foreground) and waits until its port takes connections. On
    /// failure the process is killed and reaped; the flag says whether another port might help.
    fn launch(&self, port: u16) -> Result<Child, (HarnessError, bool)> {
        let output = File::create(self.dir.path().join(OUTPUT)).map_err(|e| (e.into(), false))?;
        let stderr = output.try_clone().map_err(|e| (e.into(), false))?;
        let mut cmd = Command::new(&self.binary);
        if let Some((uid, gid)) = self.run_as {
            cmd.uid(uid.as_raw()).gid(gid.as_raw());
        }
        let child = cmd
            .arg(self.dir.path().join(CONFIG))
            .current_dir(self.dir.path())
            .stdin(Stdio::null())
            .stdout(output)
            .stderr(stderr)
            .spawn()
            .map_err(|e| {
                let error = HarnessError::StartFailed {
                    binary: format!("pgbouncer ({})", self.binary.display()),
                    port,
                    reason: format!("cannot spawn: {e}"),
                    log_tail: String::new(),
                };
                (error, false)
            })?;
        // Only our child can hold the port we reserved: the port taking a connection while
        // the child runs means it listens.
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        crate::process::await_ready(
            child,
            &format!("pgbouncer ({})", self.binary.display()),
            port,
            (READY_TIMEOUT, POLL_INTERVAL),
            |_| TcpStream::connect_timeout(&addr, PROBE_TIMEOUT).is_ok(),
            || self.log_tail(LOG_TAIL_LINES),
        )
    }
}

impl Drop for PgBouncer {
    fn drop(&mut self) {
        self.stop();
        if self.port != 0 {
            release_port(self.port);
        }
    }
}

/// A [`PgBouncer`] in front of `postgres` for a test, or `None` (after printing `skipping:
/// ...`) if PgBouncer is not installed.
///
/// # Panics
/// If PgBouncer is not installed and [`require_full_matrix`](crate::require_full_matrix) is
/// true (`LEASEHOLD_REQUIRE_MATRIX=1` or `CI`), or if it is installed but does not start.
#[track_caller]
pub fn pgbouncer_for_test(postgres: &Postgres, options: &PgBouncerOptions) -> Option<PgBouncer> {
    if find_pgbouncer().is_none() {
        if crate::require_full_matrix() {
            panic!(
                "no pgbouncer found, and LEASEHOLD_REQUIRE_MATRIX/CI demands the full matrix \
                 (run scripts/install-servers)"
            );
        }
        eprintln!("skipping: no pgbouncer found (run scripts/install-servers)");
        return None;
    }
    match PgBouncer::start(postgres, options) {
        Ok(b) => Some(b),
        Err(e) => panic!("cannot start PgBouncer: {e}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pgbouncer_is_send_and_sync() {
        fn is<T: Send + Sync>() {}
        is::<PgBouncer>();
    }

    #[test]
    fn the_default_is_transaction_pooling() {
        assert_eq!(PgBouncerOptions::new().pool_mode, PoolMode::Transaction);
    }
}
