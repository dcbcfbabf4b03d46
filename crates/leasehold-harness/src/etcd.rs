//! Real etcd servers from the system's (Debian's `etcd-server`) package: one [`Etcd`]
//! member, or an [`EtcdCluster`] of several.
//!
//! Every member gets its own temporary directory (the data dir `data/` and the log
//! `etcd.log`), a free loopback client port, a free loopback peer port and its own `etcd`
//! process, a child of the test process. The harness talks to etcd through its JSON gateway
//! to the gRPC API (etcd 3.4 serves it under `/v3/`; keys and values are base64 in JSON),
//! with a minimal HTTP/1.1 client on `std::net`, so it needs no gRPC or HTTP dependency.

use std::fmt;
use std::fs::{self, OpenOptions};
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use base64::Engine;

use tempfile::TempDir;

use crate::HarnessError;
use crate::process::Process;
use crate::server::{free_port, release_port};

/// The number of members [`etcd_cluster_for_test`] callers usually ask for, and the smallest
/// cluster that survives the loss of one member.
pub const DEFAULT_ETCD_MEMBERS: usize = 3;

/// How long one member may take to serve clients after being spawned.
const READY_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a whole cluster may take to serve clients (members elect a leader first).
const CLUSTER_READY_TIMEOUT: Duration = Duration::from_secs(60);
/// Bound of [`EtcdCluster::wait_until_healthy`].
const HEALTHY_TIMEOUT: Duration = Duration::from_secs(30);
/// Sleep between readiness probes.
const POLL_INTERVAL: Duration = Duration::from_millis(20);
/// How long [`Etcd::stop`] waits after SIGTERM before it sends SIGKILL.
const STOP_GRACE: Duration = Duration::from_secs(5);
/// Socket timeout of [`Etcd::put`], [`Etcd::get`] and [`Etcd::status`].
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// Socket timeout of one readiness or leadership probe.
const PROBE_TIMEOUT: Duration = Duration::from_millis(1000);
/// Attempts (each on fresh ports) before a start gives up.
const START_ATTEMPTS: usize = 5;
/// Lines of log included in errors.
const LOG_TAIL_LINES: usize = 30;

const DATA_DIR: &str = "data";
const ETCD_LOG: &str = "etcd.log";
/// Where Debian's package installs the server, if it is not on `PATH`.
const SYSTEM_ETCD: &str = "/usr/bin/etcd";

/// Makes every cluster token of this process unique.
static TOKEN_COUNTER: AtomicU64 = AtomicU64::new(0);

/// The `etcd` server binary, if installed: the first `etcd` on `PATH`, else `/usr/bin/etcd`.
pub fn find_etcd() -> Option<PathBuf> {
    std::env::var_os("PATH")
        .into_iter()
        .flat_map(|path| std::env::split_paths(&path).collect::<Vec<_>>())
        .filter(|dir| dir.is_absolute())
        .map(|dir| dir.join("etcd"))
        .chain([PathBuf::from(SYSTEM_ETCD)])
        .find(|path| is_executable(path))
}

/// An [`Etcd`] for a test, or `None` (after printing `skipping: ...`) if etcd is not
/// installed.
///
/// # Panics
/// If etcd is not installed and [`require_full_matrix`](crate::require_full_matrix) is true
/// (`LEASEHOLD_REQUIRE_MATRIX=1` or `CI`), or if it is installed but does not start.
#[track_caller]
pub fn etcd_for_test() -> Option<Etcd> {
    if !etcd_installed_for_test() {
        return None;
    }
    match Etcd::start() {
        Ok(etcd) => Some(etcd),
        Err(e) => panic!("cannot start etcd: {e}"),
    }
}

/// An [`EtcdCluster`] of `members` members for a test, or `None` (after printing
/// `skipping: ...`) if etcd is not installed.
///
/// # Panics
/// Like [`etcd_for_test`].
#[track_caller]
pub fn etcd_cluster_for_test(members: usize) -> Option<EtcdCluster> {
    if !etcd_installed_for_test() {
        return None;
    }
    match EtcdCluster::start(members) {
        Ok(cluster) => Some(cluster),
        Err(e) => panic!("cannot start an etcd cluster of {members}: {e}"),
    }
}

#[track_caller]
fn etcd_installed_for_test() -> bool {
    if find_etcd().is_some() {
        return true;
    }
    if crate::require_full_matrix() {
        panic!(
            "no etcd server found, and LEASEHOLD_REQUIRE_MATRIX/CI demands the full matrix \
             (run scripts/install-servers)"
        );
    }
    eprintln!("skipping: no etcd server found (run scripts/install-servers)");
    false
}

/// What one member reports about itself (`POST /v3/maintenance/status`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EtcdStatus {
    /// The member's own id.
    pub member_id: u64,
    /// The id of the member it takes for the leader; `None` while it knows no leader.
    pub leader: Option<u64>,
    /// The raft term it is in.
    pub raft_term: u64,
    /// The server version, e.g. `3.4.23`.
    pub version: String,
}

impl EtcdStatus {
    /// Whether the member takes itself for the leader.
    pub fn is_leader(&self) -> bool {
        self.leader == Some(self.member_id)
    }
}

/// One running etcd member on `127.0.0.1`, with its own temporary directory: on its own an
/// etcd of one member ([`Etcd::start`]), or one member of an [`EtcdCluster`].
///
/// Dropping it sends SIGKILL and reaps the process (this also happens when a test panics);
/// the directory, with the data dir, is removed afterwards.
pub struct Etcd {
    binary: PathBuf,
    name: String,
    client_port: u16,
    peer_port: u16,
    /// `--initial-cluster`: every member's `name=peer URL`.
    initial_cluster: String,
    /// `--initial-cluster-token`, unique per cluster.
    token: String,
    dir: TempDir,
    process: Process,
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
struct LaunchError {
    error: HarnessError,
    retry_on_other_ports: bool,
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
        let binary = require_etcd()?;
        let mut last = None;
        for _ in 0..START_ATTEMPTS {
            let mut members = new_members(&binary, 1)?;
            let mut etcd = members.pop().expect("one member");
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

    /// The member's status (`POST /v3/maintenance/status`): its id, the leader it knows of,
    /// its raft term and version. Waits at most 10 s.
    pub fn status(&self) -> Result<EtcdStatus, HarnessError> {
        self.status_timeout(REQUEST_TIMEOUT)
    }

    fn status_timeout(&self, timeout: Duration) -> Result<EtcdStatus, HarnessError> {
        let reply = self.call("/v3/maintenance/status", "{}", timeout)?;
        let id = |value: Option<&Json>| value.and_then(json_u64);
        let member_id = id(reply.get("header").and_then(|h| h.get("member_id")))
            .ok_or_else(|| malformed(&self.endpoint(), "status without header.member_id"))?;
        Ok(EtcdStatus {
            member_id,
            // The gateway leaves out zero values: no `leader` means none (raft's 0).
            leader: id(reply.get("leader")).filter(|&l| l != 0),
            raft_term: id(reply.get("raftTerm")).unwrap_or(0),
            version: reply
                .get("version")
                .and_then(Json::as_str)
                .unwrap_or_default()
                .to_owned(),
        })
    }

    /// Whether `GET /health` says `{"health":"true"}` (the member has a leader and can
    /// commit). Waits at most 10 s.
    pub fn health(&self) -> Result<bool, HarnessError> {
        self.health_timeout(REQUEST_TIMEOUT)
    }

    fn health_timeout(&self, timeout: Duration) -> Result<bool, HarnessError> {
        if !self.process.is_started() {
            return Err(HarnessError::NotRunning);
        }
        // 503 with {"health":"false"} when unhealthy; any answer is parsed the same way.
        let (_, body) = http(self.client_port, "GET", "/health", None, timeout)?;
        let reply = parse_json(&body).map_err(|e| malformed(&self.endpoint(), &e))?;
        Ok(reply.get("health").and_then(Json::as_str) == Some("true"))
    }

    /// Writes `key = value` (`POST /v3/kv/put`). Waits at most 10 s.
    pub fn put(&self, key: impl AsRef<[u8]>, value: impl AsRef<[u8]>) -> Result<(), HarnessError> {
        let body = format!(
            r#"{{"key":"{}","value":"{}"}}"#,
            base64_encode(key.as_ref()),
            base64_encode(value.as_ref())
        );
        self.call("/v3/kv/put", &body, REQUEST_TIMEOUT).map(drop)
    }

    /// The value of `key`, `None` if there is none (`POST /v3/kv/range`, a linearizable read:
    /// it sees every write committed before it, through whichever member). Waits at most
    /// 10 s.
    pub fn get(&self, key: impl AsRef<[u8]>) -> Result<Option<Vec<u8>>, HarnessError> {
        let body = format!(r#"{{"key":"{}"}}"#, base64_encode(key.as_ref()));
        let reply = self.call("/v3/kv/range", &body, REQUEST_TIMEOUT)?;
        let Some(kv) = reply
            .get("kvs")
            .and_then(Json::as_array)
            .and_then(|kvs| kvs.first())
        else {
            return Ok(None);
        };
        // The gateway leaves out empty values.
        let value = kv.get("value").and_then(Json::as_str).unwrap_or("");
        base64_decode(value)
            .map(Some)
            .ok_or_else(|| malformed(&self.endpoint(), "value is not base64"))
    }

    /// Turns authentication on: the user `root` (role `root`) with `password`, then
    /// `auth enable`. Afterwards every request needs credentials, including this harness's own
    /// [`Etcd::put`] and [`Etcd::get`], which then fail.
    ///
    /// # Errors
    /// [`HarnessError::Server`] if etcd refuses a step.
    pub fn enable_auth(&self, password: &str) -> Result<(), HarnessError> {
        let user = serde_json::json!({ "name": "root", "password": password }).to_string();
        self.call("/v3/auth/user/add", &user, REQUEST_TIMEOUT)?;
        self.call(
            "/v3/auth/user/grant",
            r#"{"user":"root","role":"root"}"#,
            REQUEST_TIMEOUT,
        )?;
        self.call("/v3/auth/enable", "{}", REQUEST_TIMEOUT)
            .map(drop)
    }

    /// One JSON gateway call: POSTs `body` to `path`, returns the parsed reply of a `200`;
    /// any other status is a [`HarnessError::Server`] with etcd's message.
    fn call(&self, path: &str, body: &str, timeout: Duration) -> Result<Json, HarnessError> {
        if !self.process.is_started() {
            return Err(HarnessError::NotRunning);
        }
        let (status, text) = http(self.client_port, "POST", path, Some(body), timeout)?;
        let reply = parse_json(&text).map_err(|e| malformed(&self.endpoint(), &e))?;
        if status == 200 {
            return Ok(reply);
        }
        let message = reply
            .get("message")
            .or_else(|| reply.get("error"))
            .and_then(Json::as_str)
            .unwrap_or(text.trim());
        Err(HarnessError::Server(format!(
            "etcd at {}: POST {path}: HTTP {status}: {message}",
            self.endpoint()
        )))
    }

    /// Spawns the process (appending to the log); does not wait.
    fn spawn(&mut self) -> Result<(), HarnessError> {
        let log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log_path())?;
        let client = self.endpoint();
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
            .arg("stderr")
            .current_dir(self.dir.path())
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
    fn poll_ready(&mut self) -> Result<bool, LaunchError> {
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
    fn failed(&mut self, reason: String, retry: bool) -> LaunchError {
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
        // `dir` (a TempDir, with the data dir) is removed after this, as its field is dropped.
    }
}

/// An etcd cluster on `127.0.0.1`: `members` [`Etcd`] members `n0`, `n1`, ..., each with its
/// own directory, client port and peer port, bootstrapped together with a static
/// `--initial-cluster` and a token of their own.
///
/// Member indices are fixed at start. Kill, stop, pause, resume or restart a member through
/// [`EtcdCluster::member_mut`] / [`EtcdCluster::member`]; a restarted member keeps its data
/// dir, and so its identity, and rejoins. Dropping the cluster kills every member.
pub struct EtcdCluster {
    members: Vec<Etcd>,
}

impl fmt::Debug for EtcdCluster {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(&self.members).finish()
    }
}

impl EtcdCluster {
    /// Starts `members` members (1 to 15; [`DEFAULT_ETCD_MEMBERS`] is the usual choice) on
    /// free loopback ports, all at once, and waits (at most 60 s) until every one serves
    /// clients (see [`Etcd::start`] for the flags and readiness). If a member exits during
    /// start-up (e.g. another process took a port), the whole cluster is started again on
    /// new ports, up to 5 times.
    ///
    /// # Errors
    /// [`HarnessError::InvalidArgument`] for a size out of range,
    /// [`HarnessError::NotInstalled`] without etcd, [`HarnessError::StartFailed`] if a member
    /// does not come up.
    pub fn start(members: usize) -> Result<EtcdCluster, HarnessError> {
        if !(1..=15).contains(&members) {
            return Err(HarnessError::InvalidArgument(format!(
                "an etcd cluster needs 1 to 15 members, not {members}"
            )));
        }
        let binary = require_etcd()?;
        let mut last = None;
        'attempts: for _ in 0..START_ATTEMPTS {
            let mut cluster = EtcdCluster {
                members: new_members(&binary, members)?,
            };
            for member in &mut cluster.members {
                member.spawn()?;
            }
            let deadline = Instant::now() + CLUSTER_READY_TIMEOUT;
            let mut ready = vec![false; members];
            while ready.contains(&false) {
                for (i, member) in cluster.members.iter_mut().enumerate() {
                    if ready[i] {
                        continue;
                    }
                    match member.poll_ready() {
                        Ok(r) => ready[i] = r,
                        Err(LaunchError {
                            error,
                            retry_on_other_ports: true,
                        }) => {
                            last = Some(error);
                            continue 'attempts;
                        }
                        Err(LaunchError { error, .. }) => return Err(error),
                    }
                }
                if !ready.contains(&false) {
                    break;
                }
                if Instant::now() >= deadline {
                    let i = ready
                        .iter()
                        .position(|r| !r)
                        .expect("a member is not ready");
                    let reason = format!(
                        "not serving clients (GET /health) within {CLUSTER_READY_TIMEOUT:?}; \
                         the cluster:\n{}",
                        cluster.describe()
                    );
                    return Err(cluster.members[i].failed(reason, false).error);
                }
                thread::sleep(POLL_INTERVAL);
            }
            return Ok(cluster);
        }
        Err(last.unwrap_or_else(|| HarnessError::Timeout("no start attempt was made".into())))
    }

    /// All members, by index.
    pub fn members(&self) -> &[Etcd] {
        &self.members
    }

    /// The number of members.
    pub fn len(&self) -> usize {
        self.members.len()
    }

    /// Always false: a cluster has at least one member.
    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    /// Member `i`.
    pub fn member(&self, i: usize) -> Result<&Etcd, HarnessError> {
        let len = self.members.len();
        self.members.get(i).ok_or_else(|| bad_index(i, len))
    }

    /// Member `i`, mutable (to kill, stop or restart it).
    pub fn member_mut(&mut self, i: usize) -> Result<&mut Etcd, HarnessError> {
        let len = self.members.len();
        self.members.get_mut(i).ok_or_else(|| bad_index(i, len))
    }

    /// Every member's client URL (`http://127.0.0.1:PORT`), by index, also of members that
    /// are not running.
    pub fn endpoints(&self) -> Vec<String> {
        self.members.iter().map(Etcd::endpoint).collect()
    }

    /// The index of the leader, if the live members (started, not paused) agree on one: a
    /// member that reports itself as leader and is reported as leader by every live member
    /// that answers, which must be a majority of all members. `None` otherwise (during an
    /// election, without quorum, or while a member that was cut off still takes itself for
    /// the leader).
    pub fn leader_index(&self) -> Option<usize> {
        let statuses: Vec<(usize, EtcdStatus)> = self
            .members
            .iter()
            .enumerate()
            .filter(|(_, m)| m.is_live())
            .filter_map(|(i, m)| m.status_timeout(PROBE_TIMEOUT).ok().map(|s| (i, s)))
            .collect();
        let mut claims = statuses.iter().filter(|(_, s)| s.is_leader());
        let (leader, status) = claims.next()?;
        if claims.next().is_some() {
            return None;
        }
        let agree = statuses
            .iter()
            .filter(|(_, s)| s.leader == Some(status.member_id))
            .count();
        (agree == statuses.len() && agree > self.members.len() / 2).then_some(*leader)
    }

    /// Waits (at most 30 s) until every live member (started, not paused) says `GET
    /// /health` is true and [`EtcdCluster::leader_index`] names a leader; returns the
    /// leader's index. The timeout error shows every member's status and log tail.
    pub fn wait_until_healthy(&self) -> Result<usize, HarnessError> {
        let deadline = Instant::now() + HEALTHY_TIMEOUT;
        loop {
            let healthy = self
                .members
                .iter()
                .filter(|m| m.is_live())
                .all(|m| m.health_timeout(PROBE_TIMEOUT).unwrap_or(false));
            if healthy && let Some(leader) = self.leader_index() {
                return Ok(leader);
            }
            if Instant::now() >= deadline {
                return Err(HarnessError::Timeout(format!(
                    "the etcd cluster did not become healthy with one leader within \
                     {HEALTHY_TIMEOUT:?}:\n{}",
                    self.describe()
                )));
            }
            thread::sleep(POLL_INTERVAL);
        }
    }

    /// One paragraph per member: endpoint, process state, health, status and log tail; for
    /// error messages.
    pub fn describe(&self) -> String {
        let mut out = String::new();
        for (i, m) in self.members.iter().enumerate() {
            let state = match (m.pid(), m.is_paused()) {
                (None, _) => "not running".to_owned(),
                (Some(pid), true) => format!("pid {pid}, paused"),
                (Some(pid), false) => format!("pid {pid}"),
            };
            out.push_str(&format!(
                "--- member {i} ({}, {}): {state}\n",
                m.name,
                m.endpoint()
            ));
            if m.is_live() {
                match m.health_timeout(PROBE_TIMEOUT) {
                    Ok(h) => out.push_str(&format!("health: {h}\n")),
                    Err(e) => out.push_str(&format!("health: {e}\n")),
                }
                match m.status_timeout(PROBE_TIMEOUT) {
                    Ok(s) => out.push_str(&format!("{s:?}\n")),
                    Err(e) => out.push_str(&format!("status: {e}\n")),
                }
            }
            out.push_str(&m.log_tail(8));
        }
        out
    }
}

fn require_etcd() -> Result<PathBuf, HarnessError> {
    find_etcd().ok_or_else(|| {
        HarnessError::NotInstalled(format!(
            "no etcd server binary found on PATH or at {SYSTEM_ETCD}"
        ))
    })
}

/// `count` members `n0..` of a new cluster, on fresh ports, each in a fresh directory; not
/// spawned yet.
fn new_members(binary: &Path, count: usize) -> Result<Vec<Etcd>, HarnessError> {
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
        });
    }
    Ok(members)
}

fn bad_index(i: usize, len: usize) -> HarnessError {
    HarnessError::InvalidArgument(format!(
        "member index {i} out of range (the cluster has {len})"
    ))
}

fn malformed(endpoint: &str, what: &str) -> HarnessError {
    HarnessError::Io(io::Error::new(
        io::ErrorKind::InvalidData,
        format!("etcd at {endpoint}: unexpected reply: {what}"),
    ))
}

fn is_executable(path: &Path) -> bool {
    fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// One HTTP/1.1 request to `127.0.0.1:port` on a fresh connection (`Connection: close`);
/// returns the status code and the body (chunked transfer decoded).
fn http(
    port: u16,
    method: &str,
    path: &str,
    body: Option<&str>,
    timeout: Duration,
) -> Result<(u16, String), HarnessError> {
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let what = format!("{method} http://{addr}{path}");
    let mut stream = TcpStream::connect_timeout(&addr, timeout)
        .map_err(|e| HarnessError::from_io(e, &format!("connecting for {what}")))?;
    stream.set_read_timeout(Some(timeout))?;
    stream.set_write_timeout(Some(timeout))?;
    let mut request = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nAccept: application/json\r\n"
    );
    if let Some(body) = body {
        request.push_str(&format!(
            "Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        ));
    } else {
        request.push_str("\r\n");
    }
    stream
        .write_all(request.as_bytes())
        .map_err(|e| HarnessError::from_io(e, &format!("sending {what}")))?;
    let mut raw = Vec::new();
    stream
        .read_to_end(&mut raw)
        .map_err(|e| HarnessError::from_io(e, &format!("reading the reply to {what}")))?;
    parse_http_response(&raw).map_err(|e| {
        HarnessError::Io(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{what}: malformed HTTP reply: {e}"),
        ))
    })
}

/// Splits a complete HTTP/1.1 response (read until the server closed) into status and body.
fn parse_http_response(raw: &[u8]) -> Result<(u16, String), String> {
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or("no end of headers")?;
    let head = String::from_utf8_lossy(&raw[..split]);
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap_or_default();
    let status = status_line
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse::<u16>().ok())
        .filter(|_| status_line.starts_with("HTTP/1."))
        .ok_or_else(|| format!("bad status line {status_line:?}"))?;
    let chunked = lines.any(|line| {
        line.split_once(':').is_some_and(|(name, value)| {
            name.trim().eq_ignore_ascii_case("transfer-encoding")
                && value.to_ascii_lowercase().contains("chunked")
        })
    });
    let mut body = &raw[split + 4..];
    let decoded;
    if chunked {
        let mut out = Vec::new();
        loop {
            let eol = body
                .windows(2)
                .position(|w| w == b"\r\n")
                .ok_or("truncated chunk size")?;
            let size_text = String::from_utf8_lossy(&body[..eol]);
            let size_text = size_text.split(';').next().unwrap_or_default().trim();
            let size = usize::from_str_radix(size_text, 16)
                .map_err(|_| format!("bad chunk size {size_text:?}"))?;
            body = &body[eol + 2..];
            if size == 0 {
                break;
            }
            if body.len() < size + 2 {
                return Err("truncated chunk".to_owned());
            }
            out.extend_from_slice(&body[..size]);
            body = &body[size + 2..];
        }
        decoded = out;
        body = &decoded;
    }
    Ok((status, String::from_utf8_lossy(body).into_owned()))
}

/// A reply of the gateway (`uint64` fields come as strings of digits).
type Json = serde_json::Value;

fn parse_json(text: &str) -> Result<Json, String> {
    serde_json::from_str(text).map_err(|e| e.to_string())
}

/// A `uint64` field: a string of digits (the gateway's encoding) or a plain number.
fn json_u64(value: &Json) -> Option<u64> {
    value
        .as_str()
        .and_then(|s| s.parse().ok())
        .or_else(|| value.as_u64())
}

fn base64_encode(data: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(data)
}

fn base64_decode(text: &str) -> Option<Vec<u8>> {
    base64::engine::general_purpose::STANDARD.decode(text).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn etcd_is_send_and_sync() {
        fn is<T: Send + Sync>() {}
        is::<Etcd>();
        is::<EtcdCluster>();
    }

    #[test]
    fn parses_http_responses() {
        let plain =
            b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}";
        assert_eq!(parse_http_response(plain).unwrap(), (200, "{}".to_owned()));
        let chunked = b"HTTP/1.1 503 Service Unavailable\r\nTransfer-Encoding: chunked\r\n\r\n5\r\n{\"a\":\r\n4;x=y\r\n\"b\"}\r\n0\r\n\r\n";
        assert_eq!(
            parse_http_response(chunked).unwrap(),
            (503, r#"{"a":"b"}"#.to_owned())
        );
        assert!(parse_http_response(b"HTTP/1.1 200 OK\r\n").is_err());
        assert!(parse_http_response(b"SSH-2.0-x\r\n\r\n").is_err());
    }

    #[test]
    fn status_leader() {
        let status = EtcdStatus {
            member_id: 7,
            leader: Some(7),
            raft_term: 2,
            version: "3.4.23".into(),
        };
        assert!(status.is_leader());
        assert!(
            !EtcdStatus {
                leader: None,
                ..status
            }
            .is_leader()
        );
    }
}
