//! One real PostgreSQL server per [`Postgres`], from the system's (Debian's) packages.
//!
//! Each [`Postgres`] gets its own temporary directory (a fresh `initdb` cluster with
//! `trust` authentication for the user `leasehold`), a free loopback port and its own
//! postmaster process, which is a child of the test process. PostgreSQL refuses to run as
//! root, so when the tests run as root the cluster is created and run as the `postgres`
//! system user that Debian's package creates.

use std::fs::{self, File};
use std::net::{SocketAddr, TcpStream};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use nix::sys::signal::{self, Signal};
use nix::unistd::{Gid, Pid, Uid, User};
use tempfile::TempDir;

use crate::HarnessError;
use crate::server::{free_port, release_port};

/// The database user `initdb` creates (a superuser; authentication is `trust`).
pub const POSTGRES_USER: &str = "leasehold";
/// The database [`Postgres::url`] names (created by `initdb`).
pub const POSTGRES_DATABASE: &str = "postgres";

/// How long the server may take to accept connections after being spawned.
const READY_TIMEOUT: Duration = Duration::from_secs(30);
/// How long [`Postgres::stop`] waits after SIGQUIT before it sends SIGKILL.
const STOP_GRACE: Duration = Duration::from_secs(5);
/// Sleep between readiness probes.
pub(crate) const POLL_INTERVAL: Duration = Duration::from_millis(20);
/// Timeout of one TCP readiness probe.
pub(crate) const PROBE_TIMEOUT: Duration = Duration::from_millis(500);
/// Attempts (each on a fresh port) before [`Postgres::start`] gives up.
pub(crate) const START_ATTEMPTS: usize = 5;
/// Lines of log included in errors.
pub(crate) const LOG_TAIL_LINES: usize = 30;
/// The system user the server runs as when the tests run as root.
const SYSTEM_USER: &str = "postgres";

const DATA_DIR: &str = "data";
const SERVER_LOG: &str = "postgres.log";
const INITDB_LOG: &str = "initdb.log";

/// The directory of PostgreSQL's server binaries (`initdb`, `postgres`), if installed.
///
/// `pg_config --bindir` if that directory has both; otherwise the newest
/// `/usr/lib/postgresql/<version>/bin` that has both (Debian's layout; `pg_config` may
/// belong to `libpq-dev` alone, without a server).
pub fn find_postgres() -> Option<PathBuf> {
    let has_server =
        |dir: &Path| is_executable(&dir.join("initdb")) && is_executable(&dir.join("postgres"));
    if let Ok(out) = Command::new("pg_config")
        .arg("--bindir")
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
        && out.status.success()
    {
        let dir = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
        if has_server(&dir) {
            return Some(dir);
        }
    }
    let mut candidates: Vec<(Vec<u32>, PathBuf)> = fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .filter_map(Result::ok)
        .filter_map(|entry| {
            let version = entry
                .file_name()
                .to_str()?
                .split('.')
                .map(|part| part.parse::<u32>().ok())
                .collect::<Option<Vec<u32>>>()?;
            let bin = entry.path().join("bin");
            has_server(&bin).then_some((version, bin))
        })
        .collect();
    candidates.sort();
    candidates.pop().map(|(_, bin)| bin)
}

/// A [`Postgres`] for a test, or `None` (after printing `skipping: ...`) if PostgreSQL is not
/// installed.
///
/// # Panics
/// If PostgreSQL is not installed and [`require_full_matrix`](crate::require_full_matrix) is
/// true (`LEASEHOLD_REQUIRE_MATRIX=1` or `CI`), or if it is installed but does not start.
#[track_caller]
pub fn postgres_for_test() -> Option<Postgres> {
    if !installed_for_test() {
        return None;
    }
    match Postgres::start() {
        Ok(pg) => Some(pg),
        Err(e) => panic!("cannot start PostgreSQL: {e}"),
    }
}

/// Like [`postgres_for_test`], a server that takes TLS only on TCP (see
/// [`Postgres::start_tls`]).
///
/// # Panics
/// As [`postgres_for_test`].
#[track_caller]
pub fn postgres_tls_for_test(files: &crate::TlsFiles, client_certs: bool) -> Option<Postgres> {
    if !installed_for_test() {
        return None;
    }
    match Postgres::start_tls(files, client_certs) {
        Ok(pg) => Some(pg),
        Err(e) => panic!("cannot start PostgreSQL with TLS: {e}"),
    }
}

/// Whether PostgreSQL is installed; if not, prints `skipping: ...`, or panics when the full
/// matrix is required.
#[track_caller]
fn installed_for_test() -> bool {
    if find_postgres().is_some() {
        return true;
    }
    if crate::require_full_matrix() {
        panic!(
            "no PostgreSQL server found, and LEASEHOLD_REQUIRE_MATRIX/CI demands the full \
             matrix (run scripts/install-servers)"
        );
    }
    eprintln!("skipping: no PostgreSQL server found (run scripts/install-servers)");
    false
}

/// A running PostgreSQL server on `127.0.0.1`, with its own temporary directory.
///
/// Dropping it stops the server like [`Postgres::stop`] (also when a test panics) and removes
/// the directory.
#[derive(Debug)]
pub struct Postgres {
    bin_dir: PathBuf,
    /// `Some((uid, gid))` of the `postgres` system user when we run as root.
    run_as: Option<(Uid, Gid)>,
    port: u16,
    dir: TempDir,
    child: Option<Child>,
}

impl Postgres {
    /// Creates a cluster in a fresh temporary directory (`initdb -A trust -U leasehold
    /// --no-sync -E UTF8 --no-locale`), starts `postgres` on a free loopback port and waits
    /// (at most 30 s) until it accepts connections.
    ///
    /// When the process runs as root, `initdb` and `postgres` run as the `postgres` system
    /// user, which then owns the directory. If the server exits during start-up (e.g. another
    /// process took the port), it is retried on a new port, up to 5 times.
    ///
    /// # Errors
    /// [`HarnessError::NotInstalled`] without PostgreSQL; [`HarnessError::Setup`] if the
    /// system user is missing or `initdb` fails; [`HarnessError::StartFailed`] if the server
    /// does not come up.
    pub fn start() -> Result<Postgres, HarnessError> {
        Self::start_with(None)
    }

    /// Like [`Postgres::start`], with TLS: `ssl=on` with `files`' server certificate and key,
    /// its CA as `ssl_ca_file`, and `pg_hba.conf` lines that take TCP connections over TLS
    /// only (`hostssl … trust`, then `hostnossl … reject`); with `client_certs`, the `hostssl`
    /// line asks for a client certificate signed by the CA (`clientcert=verify-ca`). The Unix
    /// socket stays plain text.
    ///
    /// # Errors
    /// As [`Postgres::start`]; [`HarnessError::Io`] if the files cannot be copied.
    pub fn start_tls(
        files: &crate::TlsFiles,
        client_certs: bool,
    ) -> Result<Postgres, HarnessError> {
        Self::start_with(Some((files, client_certs)))
    }

    fn start_with(tls: Option<(&crate::TlsFiles, bool)>) -> Result<Postgres, HarnessError> {
        let bin_dir = find_postgres().ok_or_else(|| {
            HarnessError::NotInstalled("no PostgreSQL server binaries found".to_owned())
        })?;
        let run_as = system_user_if_root("PostgreSQL")?;
        let parent = temp_parent(run_as.is_some())?;
        let dir = tempfile::Builder::new()
            .prefix("leasehold-postgres-")
            .tempdir_in(&parent)?;
        if let Some((uid, gid)) = run_as {
            std::os::unix::fs::chown(dir.path(), Some(uid.as_raw()), Some(gid.as_raw()))?;
        }
        let mut pg = Postgres {
            bin_dir,
            run_as,
            port: 0,
            dir,
            child: None,
        };
        pg.initdb()?;
        if let Some((files, client_certs)) = tls {
            pg.configure_tls(files, client_certs)?;
        }

        let mut last = None;
        for _ in 0..START_ATTEMPTS {
            let port = free_port()?;
            match pg.launch(port) {
                Ok(child) => {
                    pg.port = port;
                    pg.child = Some(child);
                    return Ok(pg);
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

    /// `postgres://leasehold@127.0.0.1:PORT/postgres`, for `tokio-postgres` or `psql`.
    pub fn url(&self) -> String {
        format!(
            "postgres://{POSTGRES_USER}@127.0.0.1:{}/{POSTGRES_DATABASE}",
            self.port
        )
    }

    /// The TCP port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `127.0.0.1:PORT`.
    pub fn addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.port))
    }

    /// The temporary directory: the cluster (`data/`), the Unix socket and the logs.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The directory of the binaries it runs (see [`find_postgres`]).
    pub fn bin_dir(&self) -> &Path {
        &self.bin_dir
    }

    /// The server's log file (its stdout and stderr).
    pub fn log_path(&self) -> PathBuf {
        self.dir.path().join(SERVER_LOG)
    }

    /// The postmaster's process id; `None` after [`Postgres::stop`].
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Whether the postmaster is alive.
    pub fn is_running(&mut self) -> bool {
        match self.child.as_mut().map(Child::try_wait) {
            Some(Ok(None)) => true,
            Some(_) => {
                self.stop();
                false
            }
            None => false,
        }
    }

    /// Immediate shutdown (what `pg_ctl stop -m immediate` does): SIGQUIT to the postmaster,
    /// which ends its backends and exits; SIGKILL if it is still there after 5 s. The process
    /// is reaped either way. The directory stays until the value is dropped. No-op if not
    /// running.
    pub fn stop(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        if let Ok(None) = child.try_wait() {
            if let Ok(pid) = i32::try_from(child.id()) {
                let _ = signal::kill(Pid::from_raw(pid), Signal::SIGQUIT);
            }
            let deadline = Instant::now() + STOP_GRACE;
            while let Ok(None) = child.try_wait() {
                if Instant::now() >= deadline {
                    let _ = child.kill();
                    break;
                }
                thread::sleep(POLL_INTERVAL);
            }
        }
        let _ = child.wait();
    }

    /// Stops the server (immediately, like [`Postgres::stop`]: every session ends) and starts
    /// it again on the same port and data directory; waits until it accepts connections.
    ///
    /// # Errors
    /// [`HarnessError::StartFailed`] if it does not come back.
    pub fn restart(&mut self) -> Result<(), HarnessError> {
        self.stop();
        let child = self.launch(self.port).map_err(|(e, _)| e)?;
        self.child = Some(child);
        Ok(())
    }

    /// Makes TCP logins of `user` require a password (`scram-sha-256`) instead of `trust`: a
    /// line at the top of `pg_hba.conf`, then a reload (SIGHUP). The role and its password are
    /// the caller's to create (`CREATE ROLE … LOGIN PASSWORD …`). The reload takes effect
    /// shortly after this returns: observe it (a login with a wrong password fails).
    ///
    /// # Errors
    /// [`HarnessError::Io`] if the file cannot be written; [`HarnessError::Setup`] if the
    /// server is not running.
    pub fn require_password_for(&self, user: &str) -> Result<(), HarnessError> {
        let hba = self.dir.path().join(DATA_DIR).join("pg_hba.conf");
        let old = fs::read_to_string(&hba)?;
        fs::write(
            &hba,
            format!("host all \"{user}\" 127.0.0.1/32 scram-sha-256\n{old}"),
        )?;
        let pid = self
            .pid()
            .and_then(|p| i32::try_from(p).ok())
            .ok_or_else(|| setup_error(&self.what(), "the server is not running".into(), ""))?;
        signal::kill(Pid::from_raw(pid), Signal::SIGHUP)
            .map_err(|e| setup_error(&self.what(), format!("SIGHUP: {e}"), ""))?;
        Ok(())
    }

    /// Copies the certificates into the data directory (the key must belong to the server's
    /// user, mode 0600) and turns TLS on (see [`Postgres::start_tls`]).
    fn configure_tls(
        &self,
        files: &crate::TlsFiles,
        client_certs: bool,
    ) -> Result<(), HarnessError> {
        let data = self.dir.path().join(DATA_DIR);
        for (from, to) in [
            (files.server_cert(), "server.crt"),
            (files.server_key(), "server.key"),
            (files.ca_cert(), "root.crt"),
        ] {
            let to = data.join(to);
            fs::copy(&from, &to)?;
            fs::set_permissions(&to, fs::Permissions::from_mode(0o600))?;
            if let Some((uid, gid)) = self.run_as {
                std::os::unix::fs::chown(&to, Some(uid.as_raw()), Some(gid.as_raw()))?;
            }
        }
        let conf = data.join("postgresql.conf");
        let mut text = fs::read_to_string(&conf)?;
        text.push_str(
            "\nssl = on\nssl_cert_file = 'server.crt'\nssl_key_file = 'server.key'\n\
             ssl_ca_file = 'root.crt'\n",
        );
        fs::write(&conf, text)?;
        let hba = data.join("pg_hba.conf");
        let old = fs::read_to_string(&hba)?;
        let clientcert = if client_certs {
            " clientcert=verify-ca"
        } else {
            ""
        };
        fs::write(
            &hba,
            format!(
                "hostssl all all 127.0.0.1/32 trust{clientcert}\n\
                 hostnossl all all 127.0.0.1/32 reject\n{old}"
            ),
        )?;
        Ok(())
    }

    /// The last `lines` lines of the server's log and of `initdb`'s output.
    pub fn log_tail(&self, lines: usize) -> String {
        crate::server::log_files_tail(self.dir.path(), &[SERVER_LOG, INITDB_LOG], lines)
    }

    fn what(&self) -> String {
        format!("PostgreSQL in {}", self.dir.path().display())
    }

    /// A command for one of the server binaries, as the right user, in the directory.
    fn command(&self, program: &str) -> Command {
        let mut cmd = Command::new(self.bin_dir.join(program));
        if let Some((uid, gid)) = self.run_as {
            // std also drops the supplementary groups (setgroups(0)) before setuid.
            cmd.uid(uid.as_raw()).gid(gid.as_raw());
        }
        cmd.current_dir(self.dir.path()).stdin(Stdio::null());
        cmd
    }

    fn initdb(&self) -> Result<(), HarnessError> {
        let log = File::create(self.dir.path().join(INITDB_LOG))?;
        let status = self
            .command("initdb")
            .arg("-D")
            .arg(self.dir.path().join(DATA_DIR))
            .args([
                "-A",
                "trust",
                "-U",
                POSTGRES_USER,
                "--no-sync",
                "-E",
                "UTF8",
            ])
            // The C locale: the machine's LANG may name a locale that is not generated.
            .arg("--no-locale")
            .stdout(log.try_clone()?)
            .stderr(log)
            .status()
            .map_err(|e| {
                setup_error(
                    &self.what(),
                    format!("cannot run {}: {e}", self.bin_dir.join("initdb").display()),
                    "",
                )
            })?;
        if status.success() {
            Ok(())
        } else {
            Err(setup_error(
                &self.what(),
                format!("initdb failed ({status})"),
                &crate::server::log_files_tail(self.dir.path(), &[INITDB_LOG], LOG_TAIL_LINES),
            ))
        }
    }

    /// Spawns the postmaster on `port` and waits until it accepts connections. On failure the
    /// process is killed and reaped; the flag says whether another port might help.
    fn launch(&self, port: u16) -> Result<Child, (HarnessError, bool)> {
        // A fresh log per attempt, so an error shows this attempt's output only.
        let log = File::create(self.log_path()).map_err(|e| (e.into(), false))?;
        let stderr = log.try_clone().map_err(|e| (e.into(), false))?;
        let child = self
            .command("postgres")
            .arg("-D")
            .arg(self.dir.path().join(DATA_DIR))
            .arg("-p")
            .arg(port.to_string())
            .arg("-k")
            .arg(self.dir.path())
            .args(["-c", "listen_addresses=127.0.0.1"])
            // Only for speed: a test cluster is thrown away, it never needs crash safety.
            .args(["-c", "fsync=off"])
            .stdout(log)
            .stderr(stderr)
            .spawn()
            .map_err(|e| {
                let postgres = self.bin_dir.join("postgres");
                let error = HarnessError::StartFailed {
                    binary: format!("postgres from {}", self.bin_dir.display()),
                    port,
                    reason: format!("cannot spawn {}: {e}", postgres.display()),
                    log_tail: String::new(),
                };
                (error, false)
            })?;
        crate::process::await_ready(
            child,
            &format!("postgres from {}", self.bin_dir.display()),
            port,
            (READY_TIMEOUT, POLL_INTERVAL),
            |pid| self.is_ready(pid, port),
            || self.log_tail(LOG_TAIL_LINES),
        )
    }

    /// Ready when `postmaster.pid` names our process and says `ready` (PostgreSQL >= 10
    /// writes the status on its 8th line), and the port takes a TCP connection. Checking the
    /// pid file first means a server of someone else on the same port is never taken for ours.
    fn is_ready(&self, pid: u32, port: u16) -> bool {
        let Ok(text) = fs::read_to_string(self.dir.path().join(DATA_DIR).join("postmaster.pid"))
        else {
            return false;
        };
        let lines: Vec<&str> = text.lines().collect();
        let ours = lines.first().map(|l| l.trim()) == Some(pid.to_string().as_str());
        let ready = lines.get(7).is_some_and(|l| l.trim() == "ready");
        ours && ready
            && TcpStream::connect_timeout(&SocketAddr::from(([127, 0, 0, 1], port)), PROBE_TIMEOUT)
                .is_ok()
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        self.stop();
        if self.port != 0 {
            release_port(self.port);
        }
        // `dir` (a TempDir) is removed after this, as its field is dropped.
    }
}

/// `Some((uid, gid))` of the `postgres` system user (Debian's packages create it) when this
/// process runs as root, for servers that refuse to run as root (PostgreSQL, PgBouncer);
/// `None` otherwise. `what` names the server in errors.
pub(crate) fn system_user_if_root(what: &str) -> Result<Option<(Uid, Gid)>, HarnessError> {
    if !nix::unistd::geteuid().is_root() {
        return Ok(None);
    }
    let user = User::from_name(SYSTEM_USER)
        .map_err(|e| setup_error(what, format!("looking up user {SYSTEM_USER:?}: {e}"), ""))?
        .ok_or_else(|| {
            setup_error(
                what,
                format!(
                    "running as root, and there is no {SYSTEM_USER:?} system user to run \
                     {what} as ({what} refuses to run as root)"
                ),
                "",
            )
        })?;
    Ok(Some((user.uid, user.gid)))
}

pub(crate) fn setup_error(what: &str, reason: String, log_tail: &str) -> HarnessError {
    HarnessError::Setup {
        what: what.to_owned(),
        reason,
        log_tail: if log_tail.is_empty() {
            "(no log output)\n".to_owned()
        } else {
            log_tail.to_owned()
        },
    }
}

/// Where to create the temporary directory: [`std::env::temp_dir`], or `/tmp` if the server
/// runs as another user (root's case) who could not reach a directory under it.
pub(crate) fn temp_parent(other_user: bool) -> Result<PathBuf, HarnessError> {
    let preferred = std::env::temp_dir();
    if !other_user {
        return Ok(preferred);
    }
    for candidate in [preferred, PathBuf::from("/tmp")] {
        if traversable_by_others(&candidate) {
            return Ok(candidate);
        }
    }
    Err(setup_error(
        "PostgreSQL",
        format!(
            "neither {} nor /tmp can be traversed by the {SYSTEM_USER:?} user (every directory \
             on the path needs the x bit for others)",
            std::env::temp_dir().display()
        ),
        "",
    ))
}

/// Whether every directory from `/` down to `dir` has the execute bit for others.
fn traversable_by_others(dir: &Path) -> bool {
    let Ok(dir) = dir.canonicalize() else {
        return false;
    };
    dir.ancestors()
        .all(|d| fs::metadata(d).is_ok_and(|m| m.is_dir() && m.permissions().mode() & 0o001 != 0))
}

pub(crate) fn is_executable(path: &Path) -> bool {
    fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn postgres_is_send_and_sync() {
        fn is<T: Send + Sync>() {}
        is::<Postgres>();
    }

    #[test]
    fn tmp_is_traversable() {
        assert!(traversable_by_others(Path::new("/tmp")));
    }
}
