//! One etcd member: its process, ports and directory; starting, stopping, pausing and
//! restarting it, and telling when it serves clients.

use std::fmt;
use std::fs::OpenOptions;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use tempfile::TempDir;

use crate::HarnessError;
use crate::process::Process;
use crate::server::{free_port, release_port};

#[cfg(doc)]
use super::cluster::EtcdCluster;
#[cfg(doc)]
use super::find::find_etcd;
use super::find::require_etcd;
use super::gateway::{Json, parse_json};
use super::http::http;

/// How long one member may take to serve clients after being spawned.
const READY_TIMEOUT: Duration = Duration::from_secs(30);
/// Sleep between readiness probes.
pub(super) const POLL_INTERVAL: Duration = Duration::from_millis(20);
/// How long [`Etcd::stop`] waits after SIGTERM before it sends SIGKILL.
const STOP_GRACE: Duration = Duration::from_secs(5);
/// Socket timeout of one readiness or leadership probe.
pub(super) const PROBE_TIMEOUT: Duration = Duration::from_millis(1000);
/// Attempts (each on fresh ports) before a start gives up.
pub(super) const START_ATTEMPTS: usize = 5;
/// Lines of log included in errors.
const LOG_TAIL_LINES: usize = 30;

const DATA_DIR: &str = "data";
const ETCD_LOG: &str = "etcd.log";

/// Makes every cluster token of this process unique.
static TOKEN_COUNTER: AtomicU64 = AtomicU64::new(0);

/// One running etcd member on `127.0.0.1`, with its own temporary directory: on its own an
/// etcd of one member ([`Etcd::start`]), or one member of an [`EtcdCluster`].
///
/// Dropping it sends SIGKILL and reaps the process (this also happens when a test panics);
/// the directory, with the data dir, is removed afterwards.
pub struct Etcd {
    binary: PathBuf,
    pub(super) name: String,
    pub(super) client_port: u16,
    peer_port: u16,
    /// `--initial-cluster`: every member's `name=peer URL`.
    initial_cluster: String,
    /// `--initial-cluster-token`, unique per cluster.
    token: String,
    dir: TempDir,
    pub(super) process: Process,
    /// [`Etcd::start_tls`]: the certificates and the TLS client port.
    tls: Option<(crate::TlsFiles, u16)>,
}

impl fmt::Debug for Etcd {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Etcd")
            .field("name", &self.name)
            .field("port", &self.client_port)
            .field("peer_port", &self.peer_port)
            .field("pid", &self.pid())
            .field("paused", &self.is_paused())
            .field("dir", &self.dir.path())
            .finish()
    }
}

/// Why a launch attempt failed, and whether new ports might help.
pub(super) struct LaunchError {
    pub(super) error: HarnessError,
    pub(super) retry_on_other_ports: bool,
}

enum Probe {
    Ready,
    NotYet,
    /// Something else answers on the client port (another test's server won a port race).
    Foreign(String),
}

impl Etcd {
    /// Starts an etcd of one member (`n0`) on free loopback ports, with a fresh data dir, and
    /// waits (at most 30 s) until it serves clients: `GET /health` says `{"health":"true"}`
    /// and the member list names this member with its client URL.
    ///
    /// Arguments: `--name n0 --data-dir <dir>/data --listen-client-urls http://127.0.0.1:P
    /// --advertise-client-urls http://127.0.0.1:P --listen-peer-urls http://127.0.0.1:Q
    /// --initial-advertise-peer-urls http://127.0.0.1:Q --initial-cluster
    /// n0=http://127.0.0.1:Q --initial-cluster-state new --initial-cluster-token <unique>
    /// --logger zap --log-outputs stderr`; stdout and stderr go to `<dir>/etcd.log`.
    /// `ETCD_*` variables of the environment are not passed on (etcd reads its flags from
    /// them too). If the process exits during start-up (e.g. another process took a port),
    /// it is retried on new ports, up to 5 times.
    ///
    /// # Errors
    /// [`HarnessError::NotInstalled`] without etcd; [`HarnessError::StartFailed`] if it does
    /// not come up.
    pub fn start() -> Result<Etcd, HarnessError> {
        Self::start_with(None)
    }

    /// Like [`Etcd::start`], plus a second client port that takes TLS only, with `files`'
    /// server certificate, and asks for a client certificate signed by their CA
    /// (`--cert-file --key-file --trusted-ca-file --client-cert-auth`, and
    /// `https://127.0.0.1:T` added to the listen and advertise client URLs): see
    /// [`Etcd::tls_endpoint`]. The plain client port stays (the harness's own probes use it).
    ///
    /// # Errors
    /// As [`Etcd::start`].
    pub fn start_tls(files: &crate::TlsFiles) -> Result<Etcd, HarnessError> {
        Self::start_with(Some(files))
    }

    fn start_with(tls: Option<&crate::TlsFiles>) -> Result<Etcd, HarnessError> {
        let binary = require_etcd()?;
        let mut last = None;
        for _ in 0..START_ATTEMPTS {
            let mut members = new_members(&binary, 1)?;
            let mut etcd = members.pop().expect("one member");
            if let Some(files) = tls {
                etcd.tls = Some((files.clone(), free_port()?));
            }
            etcd.spawn()?;
            match etcd.wait_ready(READY_TIMEOUT) {
                Ok(()) => return Ok(etcd),
                Err(LaunchError {
                    error,
                    retry_on_other_ports: true,
                }) => last = Some(error),
                Err(LaunchError { error, .. }) => return Err(error),
            }
        }
        Err(last.unwrap_or_else(|| HarnessError::Timeout("no start attempt was made".into())))
    }

    /// `http://127.0.0.1:PORT`, the client URL (for an etcd client, or the JSON gateway).
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.client_port)
    }

    /// `https://127.0.0.1:PORT`, the TLS client URL of a member started with
    /// [`Etcd::start_tls`]; `None` otherwise.
    pub fn tls_endpoint(&self) -> Option<String> {
        self.tls
            .as_ref()
            .map(|(_, port)| format!("https://127.0.0.1:{port}"))
    }

    /// The TLS client port of a member started with [`Etcd::start_tls`].
    pub fn tls_port(&self) -> Option<u16> {
        self.tls.as_ref().map(|(_, port)| *port)
    }

    /// The client port; stays the same across [`Etcd::restart`].
    pub fn port(&self) -> u16 {
        self.client_port
    }

    /// `127.0.0.1:PORT` of the client port.
    pub fn addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.client_port))
    }

    /// The peer port (raft traffic between members); stays the same across restarts.
    pub fn peer_port(&self) -> u16 {
        self.peer_port
    }

    /// `http://127.0.0.1:PEER_PORT`.
    pub fn peer_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.peer_port)
    }

    /// The member name (`--name`): `n0`, `n1`, ... by index in the cluster.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The path of the `etcd` binary it runs (see [`find_etcd`]).
    pub fn binary(&self) -> &Path {
        &self.binary
    }

    /// The temporary directory: the data dir and the log.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The data dir (`--data-dir`); kept across [`Etcd::restart`].
    pub fn data_dir(&self) -> PathBuf {
        self.dir.path().join(DATA_DIR)
    }

    /// The log file (the process' stdout and stderr, across restarts).
    pub fn log_path(&self) -> PathBuf {
        self.dir.path().join(ETCD_LOG)
    }

    /// The last `lines` lines of the log.
    pub fn log_tail(&self, lines: usize) -> String {
        crate::server::log_files_tail(self.dir.path(), &[ETCD_LOG], lines)
    }

    /// The process id; `None` after [`Etcd::kill`] / [`Etcd::stop`].
    pub fn pid(&self) -> Option<u32> {
        self.process.pid()
    }

    /// Whether the process is alive (it may have exited on its own; a paused process counts
    /// as alive).
    pub fn is_running(&mut self) -> bool {
        self.process.is_running()
    }

    /// Whether the process was paused with [`Etcd::pause`] and not resumed since.
    pub fn is_paused(&self) -> bool {
        self.process.is_paused()
    }

    /// Whether the process is started and not paused (it may still have exited on its own;
    /// see [`Etcd::is_running`]). [`EtcdCluster`]'s helpers only ask live members.
    pub fn is_live(&self) -> bool {
        self.process.is_live()
    }

    /// Kills the process with SIGKILL (a crash) and reaps it. No-op if not running.
    pub fn kill(&mut self) {
        self.process.kill();
    }

    /// Graceful shutdown: SIGTERM (and SIGCONT, in case it is paused), up to 5 s to exit,
    /// then SIGKILL. The process is reaped either way. No-op if not running.
    pub fn stop(&mut self) {
        self.process.stop(STOP_GRACE);
    }

    /// Freezes the process (SIGSTOP): connections are still accepted by the kernel, but
    /// nothing is answered, and the member sends no raft messages, until [`Etcd::resume`].
    pub fn pause(&self) -> Result<(), HarnessError> {
        self.process.pause()
    }

    /// Continues a paused process (SIGCONT).
    pub fn resume(&self) -> Result<(), HarnessError> {
        self.process.resume()
    }

    /// Crash-restarts the member: SIGKILL if it is running, then starts it again with the
    /// same data dir, ports and flags (etcd ignores the `--initial-*` flags once the data
    /// dir has a member), and waits (at most 30 s) until it serves clients. A member of a
    /// cluster serves only with a leader, i.e. while a majority of the members runs.
    pub fn restart(&mut self) -> Result<(), HarnessError> {
        self.kill();
        let mut last = None;
        for attempt in 0..START_ATTEMPTS {
            if attempt > 0 {
                thread::sleep(Duration::from_millis(100));
            }
            self.spawn()?;
            match self.wait_ready(READY_TIMEOUT) {
                Ok(()) => return Ok(()),
                Err(LaunchError {
                    error,
                    retry_on_other_ports: true,
                }) => last = Some(error),
                Err(LaunchError { error, .. }) => return Err(error),
            }
        }
        Err(last.unwrap_or_else(|| HarnessError::Timeout("no restart attempt was made".into())))
    }

    /// Spawns the process (appending to the log); does not wait.
    pub(super) fn spawn(&mut self) -> Result<(), HarnessError> {
        let log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log_path())?;
        let plain = self.endpoint();
        let client = match self.tls_endpoint() {
            Some(tls) => format!("{plain},{tls}"),
            None => plain,
        };
        let peer = self.peer_url();
        let mut cmd = Command::new(&self.binary);
        for (name, _) in std::env::vars_os() {
            if name.to_string_lossy().starts_with("ETCD_") {
                cmd.env_remove(name);
            }
        }
        cmd.arg("--name")
            .arg(&self.name)
            .arg("--data-dir")
            .arg(self.data_dir())
            .arg("--listen-client-urls")
            .arg(&client)
            .arg("--advertise-client-urls")
            .arg(&client)
            .arg("--listen-peer-urls")
            .arg(&peer)
            .arg("--initial-advertise-peer-urls")
            .arg(&peer)
            .arg("--initial-cluster")
            .arg(&self.initial_cluster)
            .arg("--initial-cluster-state")
            .arg("new")
            .arg("--initial-cluster-token")
            .arg(&self.token)
            // zap instead of the deprecated capnslog (3.4's default, which warns about it).
            .arg("--logger")
            .arg("zap")
            .arg("--log-outputs")
            .arg("stderr");
        if let Some((files, _)) = &self.tls {
            cmd.arg("--cert-file")
                .arg(files.server_cert())
                .arg("--key-file")
                .arg(files.server_key())
                .arg("--trusted-ca-file")
                .arg(files.ca_cert())
                .arg("--client-cert-auth");
        }
        cmd.current_dir(self.dir.path())
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log);
        let child = cmd.spawn().map_err(|e| HarnessError::StartFailed {
            binary: self.label(),
            port: self.client_port,
            reason: format!("cannot spawn {}: {e}", self.binary.display()),
            log_tail: String::new(),
        })?;
        self.process.set(child);
        Ok(())
    }

    /// Waits until the spawned process serves clients; on failure it is killed and reaped.
    fn wait_ready(&mut self, timeout: Duration) -> Result<(), LaunchError> {
        let deadline = Instant::now() + timeout;
        loop {
            match self.poll_ready() {
                Ok(true) => return Ok(()),
                Ok(false) => {}
                Err(e) => return Err(e),
            }
            if Instant::now() >= deadline {
                let reason = format!("not serving clients (GET /health) within {timeout:?}");
                return Err(self.failed(reason, false));
            }
            thread::sleep(POLL_INTERVAL);
        }
    }

    /// One look at a starting process: `Ok(true)` once it serves clients.
    pub(super) fn poll_ready(&mut self) -> Result<bool, LaunchError> {
        let Some(child) = self.process.child_mut() else {
            return Err(self.failed("the process is gone".to_owned(), false));
        };
        match child.try_wait() {
            Ok(Some(status)) => {
                let reason = format!("etcd exited during start-up ({status})");
                return Err(self.failed(reason, true));
            }
            Ok(None) => {}
            Err(e) => return Err(self.failed(format!("cannot check the process: {e}"), false)),
        }
        match self.probe() {
            Probe::Ready => Ok(true),
            Probe::NotYet => Ok(false),
            Probe::Foreign(what) => {
                let reason = format!("another process answers on the client port ({what})");
                Err(self.failed(reason, true))
            }
        }
    }

    /// Ready when the member list (served locally, without a leader) names a member with our
    /// peer URL and our client URL (the member has published itself, through raft), and
    /// `GET /health` is true. A member list without our peer URL is someone else's etcd.
    fn probe(&self) -> Probe {
        let Ok((200, text)) = http(
            self.client_port,
            "POST",
            "/v3/cluster/member/list",
            Some("{}"),
            PROBE_TIMEOUT,
        ) else {
            return Probe::NotYet;
        };
        let Ok(list) = parse_json(&text) else {
            return Probe::Foreign(format!("member list is not JSON: {text}"));
        };
        let members = list
            .get("members")
            .and_then(Json::as_array)
            .map(Vec::as_slice)
            .unwrap_or(&[]);
        let urls = |member: &Json, field: &str| -> Vec<String> {
            member
                .get(field)
                .and_then(Json::as_array)
                .map(Vec::as_slice)
                .unwrap_or(&[])
                .iter()
                .filter_map(|u| u.as_str().map(str::to_owned))
                .collect()
        };
        let peer = self.peer_url();
        let Some(us) = members.iter().find(|m| urls(m, "peerURLs").contains(&peer)) else {
            return Probe::Foreign(format!("no member with peer URL {peer}: {text}"));
        };
        if !urls(us, "clientURLs").contains(&self.endpoint()) {
            return Probe::NotYet;
        }
        match self.health_timeout(PROBE_TIMEOUT) {
            Ok(true) => Probe::Ready,
            _ => Probe::NotYet,
        }
    }

    /// Kills and reaps the process and describes why the start failed.
    pub(super) fn failed(&mut self, reason: String, retry: bool) -> LaunchError {
        self.kill();
        LaunchError {
            error: HarnessError::StartFailed {
                binary: self.label(),
                port: self.client_port,
                reason,
                log_tail: self.log_tail(LOG_TAIL_LINES),
            },
            retry_on_other_ports: retry,
        }
    }

    fn label(&self) -> String {
        format!("etcd member {} ({})", self.name, self.binary.display())
    }
}

impl Drop for Etcd {
    fn drop(&mut self) {
        self.kill();
        release_port(self.client_port);
        release_port(self.peer_port);
        if let Some((_, port)) = self.tls {
            release_port(port);
        }
        // `dir` (a TempDir, with the data dir) is removed after this, as its field is dropped.
    }
}

/// `count` members `n0..` of a new cluster, on fresh ports, each in a fresh directory; not
/// spawned yet.
pub(super) fn new_members(binary: &Path, count: usize) -> Result<Vec<Etcd>, HarnessError> {
    let token = format!(
        "leasehold-{}-{}",
        std::process::id(),
        TOKEN_COUNTER.fetch_add(1, Ordering::Relaxed)
    );
    let mut ports = Vec::with_capacity(count);
    for _ in 0..count {
        let reserve = free_port().and_then(|client| match free_port() {
            Ok(peer) => Ok((client, peer)),
            Err(e) => {
                release_port(client);
                Err(e)
            }
        });
        match reserve {
            Ok(pair) => ports.push(pair),
            Err(e) => {
                for (client, peer) in ports {
                    release_port(client);
                    release_port(peer);
                }
                return Err(e);
            }
        }
    }
    let initial_cluster = ports
        .iter()
        .enumerate()
        .map(|(i, (_, peer))| format!("n{i}=http://127.0.0.1:{peer}"))
        .collect::<Vec<_>>()
        .join(",");
    let mut members = Vec::with_capacity(count);
    let mut ports = ports.into_iter().enumerate();
    while let Some((i, (client_port, peer_port))) = ports.next() {
        let dir = match tempfile::Builder::new().prefix("leasehold-etcd-").tempdir() {
            Ok(dir) => dir,
            Err(e) => {
                // Members made so far give their ports back when dropped; these never got one.
                release_port(client_port);
                release_port(peer_port);
                for (_, (client, peer)) in ports {
                    release_port(client);
                    release_port(peer);
                }
                return Err(e.into());
            }
        };
        members.push(Etcd {
            binary: binary.to_path_buf(),
            name: format!("n{i}"),
            client_port,
            peer_port,
            initial_cluster: initial_cluster.clone(),
            token: token.clone(),
            dir,
            process: Process::default(),
            tls: None,
        });
    }
    Ok(members)
}
