//! One real server process per [`Server`].

use std::fmt;
use std::fs::{self, OpenOptions};
use std::io::{BufReader, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use std::thread;
use std::time::{Duration, Instant};

use tempfile::TempDir;

use crate::process::Process;
use crate::{HarnessError, RespValue, ServerBinary, TlsFiles};

/// How long a server may take to answer after being spawned.
const READY_TIMEOUT: Duration = Duration::from_secs(15);
/// How long a replica may take to report `master_link_status:up`.
const REPLICATION_TIMEOUT: Duration = Duration::from_secs(15);
/// Sleep between readiness probes.
const POLL_INTERVAL: Duration = Duration::from_millis(10);
/// How long [`Server::stop`] waits after SIGTERM before it sends SIGKILL.
const STOP_GRACE: Duration = Duration::from_secs(5);
/// Socket timeout of [`Server::command`].
const COMMAND_TIMEOUT: Duration = Duration::from_secs(10);
/// Socket timeout of one readiness probe.
const PROBE_TIMEOUT: Duration = Duration::from_millis(500);
/// Attempts (each on a fresh port) before [`Server::start`] gives up.
const START_ATTEMPTS: usize = 5;
/// Lines of log included in start errors.
const LOG_TAIL_LINES: usize = 30;

const SERVER_LOG: &str = "server.log";
const STDIO_LOG: &str = "stdio.log";
/// The configuration file of a sentinel, in its directory.
const SENTINEL_CONF: &str = "sentinel.conf";
/// The cluster state file of a cluster node, in its directory.
const NODES_CONF: &str = "nodes.conf";

/// How to configure a [`Server`]. Builder style:
/// `ServerOptions::new().aof(true).requirepass("secret")`.
#[derive(Debug, Clone, Default)]
pub struct ServerOptions {
    aof: bool,
    requirepass: Option<String>,
    tls: Option<TlsFiles>,
    args: Vec<String>,
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

/// What kind of process a [`Server`] is; decides the extra ports and arguments.
#[derive(Clone, PartialEq, Eq)]
pub(crate) enum Mode {
    /// A plain data server.
    Standalone,
    /// A cluster node: `--cluster-enabled yes --cluster-config-file <dir>/nodes.conf
    /// --cluster-port <bus port>` (the bus port is a second free port).
    ClusterNode,
    /// A sentinel: `<dir>/sentinel.conf --sentinel`. The file is written from the port,
    /// the directory and these lines (the `sentinel ...` directives) on a fresh start, and
    /// kept on restart (sentinel rewrites it with its state). With [`ServerOptions::tls`]
    /// the sentinel also listens with TLS and speaks TLS to the instances it monitors (data
    /// nodes and other sentinels): `tls-port`, the certificate files and
    /// `tls-replication yes`; clients still reach it on the plain port.
    Sentinel {
        /// Configuration lines after the harness' own (`port`, `bind`, `dir`, `logfile`).
        config: String,
    },
}

/// Without the sentinel configuration, which may contain a password.
impl fmt::Debug for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Mode::Standalone => "Standalone",
            Mode::ClusterNode => "ClusterNode",
            Mode::Sentinel { .. } => "Sentinel",
        })
    }
}

/// The ports of one server: the main one, and the optional TLS and cluster-bus ports.
#[derive(Debug, Clone, Copy)]
struct Ports {
    port: u16,
    tls: Option<u16>,
    bus: Option<u16>,
}

impl Ports {
    /// Reserves the ports a server of `mode` with `opts` needs.
    fn reserve(mode: &Mode, opts: &ServerOptions) -> Result<Ports, HarnessError> {
        let mut ports = Ports {
            port: free_port()?,
            tls: None,
            bus: None,
        };
        if opts.tls.is_some() {
            match free_port() {
                Ok(p) => ports.tls = Some(p),
                Err(e) => {
                    ports.release();
                    return Err(e);
                }
            }
        }
        if mode == &Mode::ClusterNode {
            match free_port() {
                Ok(p) => ports.bus = Some(p),
                Err(e) => {
                    ports.release();
                    return Err(e);
                }
            }
        }
        Ok(ports)
    }

    fn release(self) {
        release_port(self.port);
        for port in [self.tls, self.bus].into_iter().flatten() {
            release_port(port);
        }
    }
}

/// A running redis/valkey server process on `127.0.0.1`, with its own temporary directory.
///
/// Dropping it sends SIGKILL and reaps the process (this also happens when a test panics);
/// the directory is removed afterwards.
pub struct Server {
    binary: ServerBinary,
    options: ServerOptions,
    /// Arguments the harness adds on top of `options` (replication), kept for restarts.
    extra_args: Vec<String>,
    mode: Mode,
    ports: Ports,
    dir: TempDir,
    process: Process,
}

impl fmt::Debug for Server {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Server")
            .field("binary", &self.binary.label())
            .field("port", &self.ports.port)
            .field("tls_port", &self.ports.tls)
            .field("mode", &self.mode)
            .field("pid", &self.pid())
            .field("dir", &self.dir.path())
            .finish()
    }
}

/// Why a launch attempt failed, and whether a new port might help.
struct LaunchError {
    error: HarnessError,
    retry_on_other_port: bool,
}

enum Probe {
    Ready,
    NotYet,
    /// Something else answers on the port (another test's server won a port race).
    Foreign(String),
}

impl Server {
    /// Starts `bin` on a free loopback port with a fresh temporary directory, and waits until
    /// it answers.
    ///
    /// Arguments: `--port P --bind 127.0.0.1 --dir D --save "" --appendonly no|yes
    /// --daemonize no --logfile D/server.log --protected-mode no --repl-diskless-sync-delay 0
    /// --repl-diskless-load on-empty-db`, plus `--enable-debug-command yes` where supported,
    /// the options' password, the TLS arguments of [`ServerOptions::tls`] and raw args (raw
    /// args come last, so they can override the harness' choices).
    /// If the process dies during start-up (e.g. another process took the port), it is
    /// retried on a new port, up to 5 times.
    pub fn start(bin: &ServerBinary, opts: &ServerOptions) -> Result<Server, HarnessError> {
        Self::start_with(bin, opts, Vec::new(), Mode::Standalone)
    }

    /// Starts a process of `mode` with `extra_args` (added before the options' raw args and
    /// kept for restarts); see [`Server::start`].
    pub(crate) fn start_with(
        bin: &ServerBinary,
        opts: &ServerOptions,
        extra_args: Vec<String>,
        mode: Mode,
    ) -> Result<Server, HarnessError> {
        if opts.tls.is_some() && !bin.supports_tls() {
            return Err(HarnessError::Unsupported {
                binary: bin.to_string(),
                reason: "built without TLS support (no OpenSSL linked in); rebuild it with \
                         BUILD_TLS=yes (scripts/install-servers does)"
                    .to_owned(),
            });
        }
        let dir = tempfile::Builder::new()
            .prefix(match mode {
                Mode::Standalone => "leasehold-server-",
                Mode::ClusterNode => "leasehold-cluster-node-",
                Mode::Sentinel { .. } => "leasehold-sentinel-",
            })
            .tempdir()?;
        let mut last = None;
        for _ in 0..START_ATTEMPTS {
            let ports = Ports::reserve(&mode, opts)?;
            // Fresh files per attempt, so an error shows this attempt's output only.
            for name in [SERVER_LOG, STDIO_LOG, SENTINEL_CONF, NODES_CONF] {
                let _ = fs::remove_file(dir.path().join(name));
            }
            match launch(bin, opts, &extra_args, &mode, ports, dir.path()) {
                Ok(child) => {
                    return Ok(Server {
                        binary: bin.clone(),
                        options: opts.clone(),
                        extra_args,
                        mode,
                        ports,
                        dir,
                        process: Process::new(child),
                    });
                }
                Err(LaunchError {
                    error,
                    retry_on_other_port: true,
                }) => {
                    ports.release();
                    last = Some(error)
                }
                Err(LaunchError { error, .. }) => {
                    ports.release();
                    return Err(error);
                }
            }
        }
        Err(last.unwrap_or_else(|| HarnessError::Timeout("no start attempt was made".into())))
    }

    /// `redis://127.0.0.1:PORT/` (never contains the password).
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.ports.port)
    }

    /// The TCP port; stays the same across [`Server::restart`].
    pub fn port(&self) -> u16 {
        self.ports.port
    }

    /// `127.0.0.1:PORT`.
    pub fn addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.ports.port))
    }

    /// The TLS port, if started with [`ServerOptions::tls`]; stays the same across
    /// [`Server::restart`].
    pub fn tls_port(&self) -> Option<u16> {
        self.ports.tls
    }

    /// `rediss://127.0.0.1:TLS_PORT/`, if started with [`ServerOptions::tls`] (never
    /// contains the password). The certificate is valid for `127.0.0.1` and `localhost`.
    pub fn tls_url(&self) -> Option<String> {
        self.ports
            .tls
            .map(|port| format!("rediss://127.0.0.1:{port}/"))
    }

    /// The cluster bus port (`--cluster-port`) of a cluster node.
    pub(crate) fn bus_port(&self) -> Option<u16> {
        self.ports.bus
    }

    /// The binary this server runs.
    pub fn binary(&self) -> &ServerBinary {
        &self.binary
    }

    /// The options it was started with.
    pub fn options(&self) -> &ServerOptions {
        &self.options
    }

    /// The server's working directory (`--dir`): AOF/RDB files and `server.log`.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The server's log file.
    pub fn log_path(&self) -> PathBuf {
        self.dir.path().join(SERVER_LOG)
    }

    /// The last `lines` lines of the server's log and of its stdout/stderr.
    pub fn log_tail(&self, lines: usize) -> String {
        log_tail(self.dir.path(), lines)
    }

    /// The process id; `None` after [`Server::kill`] / [`Server::stop`].
    pub fn pid(&self) -> Option<u32> {
        self.process.pid()
    }

    /// Whether the process is alive (it may have exited on its own, e.g. after `SHUTDOWN`;
    /// a paused process counts as alive).
    pub fn is_running(&mut self) -> bool {
        self.process.is_running()
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
    /// nothing is answered until [`Server::resume`].
    pub fn pause(&self) -> Result<(), HarnessError> {
        self.process.pause()
    }

    /// Continues a paused process (SIGCONT).
    pub fn resume(&self) -> Result<(), HarnessError> {
        self.process.resume()
    }

    /// Whether the process was paused with [`Server::pause`] and not resumed since.
    pub fn is_paused(&self) -> bool {
        self.process.is_paused()
    }

    /// Whether the process is started and not paused (it may still have exited on its own;
    /// see [`Server::is_running`]). Cluster and sentinel helpers only talk to live servers.
    pub fn is_live(&self) -> bool {
        self.process.is_live()
    }

    /// Crash-restarts the server: SIGKILL if it is running, then starts the same binary again
    /// on the same port, with the same directory and options (so an AOF written with
    /// [`ServerOptions::aof`] is replayed), and waits until it answers.
    pub fn restart(&mut self) -> Result<(), HarnessError> {
        self.kill();
        let mut last = None;
        for attempt in 0..START_ATTEMPTS {
            if attempt > 0 {
                thread::sleep(Duration::from_millis(100));
            }
            match launch(
                &self.binary,
                &self.options,
                &self.extra_args,
                &self.mode,
                self.ports,
                self.dir.path(),
            ) {
                Ok(child) => {
                    self.process.set(child);
                    return Ok(());
                }
                Err(LaunchError {
                    error,
                    retry_on_other_port: true,
                }) => last = Some(error),
                Err(LaunchError { error, .. }) => return Err(error),
            }
        }
        Err(last.unwrap_or_else(|| HarnessError::Timeout("no restart attempt was made".into())))
    }

    /// Starts a replica of this server (same binary, `--replicaof 127.0.0.1 <port>`, plus
    /// `--masterauth` if this server has a password) and waits until it reports
    /// `master_link_status:up`.
    pub fn start_replica(&self, opts: &ServerOptions) -> Result<Server, HarnessError> {
        if self.mode != Mode::Standalone {
            return Err(HarnessError::InvalidArgument(format!(
                "start_replica needs a standalone server, not a {:?} process",
                self.mode
            )));
        }
        let mut extra = vec![
            "--replicaof".to_owned(),
            "127.0.0.1".to_owned(),
            self.ports.port.to_string(),
        ];
        if let Some(pass) = self.options.password() {
            extra.push("--masterauth".to_owned());
            extra.push(pass.to_owned());
        }
        let replica = Server::start_with(&self.binary, opts, extra, Mode::Standalone)?;
        replica.wait_for_master_link(REPLICATION_TIMEOUT)?;
        Ok(replica)
    }

    /// Waits until `INFO replication` reports `master_link_status:up`.
    pub(crate) fn wait_for_master_link(&self, timeout: Duration) -> Result<(), HarnessError> {
        let replica = self;
        let deadline = Instant::now() + timeout;
        loop {
            let info = replica.info("replication")?;
            if master_link_up(&info) {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(HarnessError::Timeout(format!(
                    "replica on port {} did not link to its master within {:?}\n\
                     --- replica INFO replication ---\n{}\n--- replica log ---\n{}",
                    replica.ports.port,
                    timeout,
                    info.trim(),
                    replica.log_tail(LOG_TAIL_LINES)
                )));
            }
            thread::sleep(Duration::from_millis(20));
        }
    }

    /// Makes this server a master (`REPLICAOF NO ONE`).
    pub fn promote(&self) -> Result<(), HarnessError> {
        match self.command(&["REPLICAOF", "NO", "ONE"])? {
            reply if reply.is_ok() => Ok(()),
            reply => Err(HarnessError::Server(format!("REPLICAOF NO ONE: {reply}"))),
        }
    }

    /// Sends one command over a fresh connection (authenticating first if the server has a
    /// password) and returns the reply; error replies are `Ok(RespValue::Error(_))`.
    /// Waits at most 10 s; see [`Server::command_timeout`].
    pub fn command(&self, args: &[&str]) -> Result<RespValue, HarnessError> {
        self.command_timeout(args, COMMAND_TIMEOUT)
    }

    /// Like [`Server::command`], with `timeout` for connecting and for each socket read and
    /// write. A server that does not answer in time gives [`HarnessError::Timeout`].
    pub fn command_timeout(
        &self,
        args: &[&str],
        timeout: Duration,
    ) -> Result<RespValue, HarnessError> {
        if !self.process.is_started() {
            return Err(HarnessError::NotRunning);
        }
        let mut replies = self.commands_timeout(&[args], timeout)?;
        Ok(replies.pop().expect("one reply per command"))
    }

    /// Sends several commands, pipelined on **one** fresh connection (authenticating first
    /// if needed), and returns their replies in order. Useful where the connection matters,
    /// e.g. `[["SET", "k", "v"], ["WAIT", "1", "5000"]]` (`WAIT` only waits for the writes
    /// of its own connection). Waits at most 10 s per socket operation.
    pub fn commands(&self, commands: &[&[&str]]) -> Result<Vec<RespValue>, HarnessError> {
        self.commands_timeout(commands, COMMAND_TIMEOUT)
    }

    /// Like [`Server::commands`], with `timeout` for connecting and for each socket read
    /// and write.
    pub fn commands_timeout(
        &self,
        commands: &[&[&str]],
        timeout: Duration,
    ) -> Result<Vec<RespValue>, HarnessError> {
        if !self.process.is_started() {
            return Err(HarnessError::NotRunning);
        }
        let stream = connect(self.ports.port, timeout)
            .map_err(|e| HarnessError::from_io(e, "connecting"))?;
        send_commands(stream, self.options.password(), commands)
    }

    /// `INFO <section>` as text.
    pub fn info(&self, section: &str) -> Result<String, HarnessError> {
        self.info_timeout(section, COMMAND_TIMEOUT)
    }

    /// `INFO <section>` as text, waiting at most `timeout` per socket operation.
    pub(crate) fn info_timeout(
        &self,
        section: &str,
        timeout: Duration,
    ) -> Result<String, HarnessError> {
        match self.command_timeout(&["INFO", section], timeout)? {
            RespValue::Bulk(Some(bytes)) => Ok(String::from_utf8_lossy(&bytes).into_owned()),
            other => Err(HarnessError::Server(format!("INFO {section}: {other}"))),
        }
    }

    /// Sends one command whose arguments are raw bytes (e.g. keys that are not UTF-8) over a
    /// fresh connection; like [`Server::command`] otherwise.
    pub fn command_bytes(&self, args: &[&[u8]]) -> Result<RespValue, HarnessError> {
        if !self.process.is_started() {
            return Err(HarnessError::NotRunning);
        }
        let stream = connect(self.ports.port, COMMAND_TIMEOUT)
            .map_err(|e| HarnessError::from_io(e, "connecting"))?;
        let mut replies = send_commands(stream, self.options.password(), &[args])?;
        replies
            .pop()
            .ok_or_else(|| HarnessError::Protocol("no reply".into()))
    }

    /// Creates or changes an ACL user: `ACL SETUSER <user> <rules...>`, e.g.
    /// `server.acl_setuser("locker", &["on", ">pw", "~lock:*", "+@all"])`.
    pub fn acl_setuser(&self, user: &str, rules: &[&str]) -> Result<(), HarnessError> {
        let mut args = vec!["ACL", "SETUSER", user];
        args.extend_from_slice(rules);
        match self.command(&args)? {
            reply if reply.is_ok() => Ok(()),
            reply => Err(HarnessError::Server(format!("ACL SETUSER {user}: {reply}"))),
        }
    }
}

/// Whether `INFO replication` text says the link to the master is up (`master_link_status`,
/// or valkey's `primary_link_status`).
pub(crate) fn master_link_up(info: &str) -> bool {
    info.lines()
        .any(|l| matches!(l.trim(), "master_link_status:up" | "primary_link_status:up"))
}

/// The `role:` of `INFO replication` text (`master` or `slave`).
pub(crate) fn info_role(info: &str) -> Option<&str> {
    info.lines().find_map(|l| l.trim().strip_prefix("role:"))
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill();
        self.ports.release();
    }
}

/// Ports owned by a live `Server` of this process, also while that server is killed or stopped:
/// a test that kills a node must not find another test's server answering on its port.
static RESERVED: std::sync::Mutex<std::collections::BTreeSet<u16>> =
    std::sync::Mutex::new(std::collections::BTreeSet::new());

/// A port that was free a moment ago and that no live `Server` of this process owns; it stays
/// reserved until [`release_port`].
pub(crate) fn free_port() -> Result<u16, HarnessError> {
    // Kept bound while we pick, so the kernel hands out different ports meanwhile.
    let mut held = Vec::new();
    loop {
        let listener = TcpListener::bind(("127.0.0.1", 0))?;
        let port = listener.local_addr()?.port();
        let mut reserved = RESERVED.lock().unwrap_or_else(|p| p.into_inner());
        if reserved.insert(port) {
            return Ok(port);
        }
        drop(reserved);
        held.push(listener);
    }
}

/// Gives back a port from [`free_port`].
pub(crate) fn release_port(port: u16) {
    RESERVED
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .remove(&port);
}

fn connect(port: u16, timeout: Duration) -> std::io::Result<TcpStream> {
    let stream = TcpStream::connect_timeout(&SocketAddr::from(([127, 0, 0, 1], port)), timeout)?;
    stream.set_read_timeout(Some(timeout))?;
    stream.set_write_timeout(Some(timeout))?;
    stream.set_nodelay(true)?;
    Ok(stream)
}

/// Writes `[AUTH password] commands...` in one go and returns the replies to `commands`.
fn send_commands<A: AsRef<[u8]>>(
    mut stream: TcpStream,
    password: Option<&str>,
    commands: &[&[A]],
) -> Result<Vec<RespValue>, HarnessError> {
    let mut out = Vec::new();
    if let Some(pass) = password {
        out.extend(RespValue::encode_command(&["AUTH", pass]));
    }
    for args in commands {
        out.extend(RespValue::encode_command(args));
    }
    stream
        .write_all(&out)
        .map_err(|e| HarnessError::from_io(e, "sending a command"))?;
    let mut reader = BufReader::new(stream);
    if password.is_some() {
        let auth = RespValue::read(&mut reader)?;
        if !auth.is_ok() {
            return Err(HarnessError::Server(format!("AUTH: {auth}")));
        }
    }
    commands
        .iter()
        .map(|_| RespValue::read(&mut reader))
        .collect()
}

fn spawn(
    bin: &ServerBinary,
    opts: &ServerOptions,
    extra_args: &[String],
    mode: &Mode,
    ports: Ports,
    dir: &Path,
) -> Result<Child, HarnessError> {
    let stdio = OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join(STDIO_LOG))?;
    let mut cmd = Command::new(&bin.server);
    if let Mode::Sentinel { config } = mode {
        let conf = dir.join(SENTINEL_CONF);
        // A restart keeps the file: sentinel rewrote it with its identity and state.
        if !conf.exists() {
            fs::write(&conf, sentinel_config(opts, ports, dir, config))?;
        }
        cmd.arg(&conf).arg("--sentinel");
    } else {
        cmd.arg("--port")
            .arg(ports.port.to_string())
            .arg("--bind")
            .arg("127.0.0.1")
            .arg("--dir")
            .arg(dir)
            .arg("--save")
            .arg("")
            .arg("--appendonly")
            .arg(if opts.aof { "yes" } else { "no" });
        if opts.aof {
            cmd.arg("--appendfsync").arg("always");
        }
        cmd.arg("--daemonize")
            .arg("no")
            .arg("--logfile")
            .arg(dir.join(SERVER_LOG))
            .arg("--protected-mode")
            .arg("no")
            // Replicas sync at once instead of waiting 5 s for more replicas to join.
            .arg("--repl-diskless-sync-delay")
            .arg("0")
            // An empty replica loads the initial sync from the socket: valkey 9 otherwise
            // notices a finished RDB download only in its once-a-second replication cron.
            .arg("--repl-diskless-load")
            .arg("on-empty-db");
        if bin.supports_debug_command() {
            cmd.arg("--enable-debug-command").arg("yes");
        }
        if let Some(pass) = &opts.requirepass {
            cmd.arg("--requirepass").arg(pass);
        }
        if let (Some(tls_port), Some(tls)) = (ports.tls, &opts.tls) {
            cmd.arg("--tls-port")
                .arg(tls_port.to_string())
                .arg("--tls-cert-file")
                .arg(tls.server_cert())
                .arg("--tls-key-file")
                .arg(tls.server_key())
                .arg("--tls-ca-cert-file")
                .arg(tls.ca_cert())
                .arg("--tls-auth-clients")
                .arg("no");
        }
        if let (Mode::ClusterNode, Some(bus)) = (mode, ports.bus) {
            cmd.arg("--cluster-enabled")
                .arg("yes")
                .arg("--cluster-config-file")
                .arg(dir.join(NODES_CONF))
                .arg("--cluster-port")
                .arg(bus.to_string());
            if opts.tls.is_some() {
                // TLS on the bus and for replication too; then the topology a client reads
                // over a TLS connection (CLUSTER SLOTS, MOVED) names the nodes' TLS ports.
                cmd.arg("--tls-cluster")
                    .arg("yes")
                    .arg("--tls-replication")
                    .arg("yes");
            }
        }
    }
    cmd.args(extra_args)
        .args(&opts.args)
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(stdio.try_clone()?)
        .stderr(stdio);
    cmd.spawn().map_err(|e| HarnessError::StartFailed {
        binary: bin.label(),
        port: ports.port,
        reason: format!("cannot spawn {}: {e}", bin.server.display()),
        log_tail: String::new(),
    })
}

/// The initial `sentinel.conf`: the harness' settings (with TLS ones if `opts` has TLS
/// files), then `lines` (the `sentinel ...` directives).
fn sentinel_config(opts: &ServerOptions, ports: Ports, dir: &Path, lines: &str) -> String {
    let mut conf = format!(
        "port {}\n\
         bind 127.0.0.1\n\
         protected-mode no\n\
         daemonize no\n\
         dir {}\n\
         logfile {}\n",
        ports.port,
        conf_quote(&dir.to_string_lossy()),
        conf_quote(&dir.join(SERVER_LOG).to_string_lossy()),
    );
    if let Some(pass) = &opts.requirepass {
        conf.push_str(&format!("requirepass {}\n", conf_quote(pass)));
    }
    if let (Some(tls_port), Some(tls)) = (ports.tls, &opts.tls) {
        // Sentinel connects to every instance it monitors (data nodes, other sentinels) with
        // TLS when tls-replication is on, and announces its TLS port to the other sentinels.
        conf.push_str(&format!(
            "tls-port {tls_port}\n\
             tls-cert-file {}\n\
             tls-key-file {}\n\
             tls-ca-cert-file {}\n\
             tls-auth-clients no\n\
             tls-replication yes\n",
            conf_quote(&tls.server_cert().to_string_lossy()),
            conf_quote(&tls.server_key().to_string_lossy()),
            conf_quote(&tls.ca_cert().to_string_lossy()),
        ));
    }
    conf.push_str(lines);
    if !conf.ends_with('\n') {
        conf.push('\n');
    }
    conf
}

/// Quotes one argument of a redis configuration file line (a double-quoted string with the
/// escapes `sdssplitargs` understands).
pub(crate) fn conf_quote(arg: &str) -> String {
    let mut out = String::with_capacity(arg.len() + 2);
    out.push('"');
    for byte in arg.bytes() {
        match byte {
            b'"' => out.push_str("\\\""),
            b'\\' => out.push_str("\\\\"),
            b'\n' => out.push_str("\\n"),
            b'\r' => out.push_str("\\r"),
            b'\t' => out.push_str("\\t"),
            0x20..=0x7e => out.push(char::from(byte)),
            _ => out.push_str(&format!("\\x{byte:02x}")),
        }
    }
    out.push('"');
    out
}

/// Spawns the server and waits until it answers; on failure the process is killed and reaped.
fn launch(
    bin: &ServerBinary,
    opts: &ServerOptions,
    extra_args: &[String],
    mode: &Mode,
    ports: Ports,
    dir: &Path,
) -> Result<Child, LaunchError> {
    let port = ports.port;
    let mut child =
        spawn(bin, opts, extra_args, mode, ports, dir).map_err(|error| LaunchError {
            error,
            retry_on_other_port: false,
        })?;
    let failed = |child: &mut Child, reason: String, retry: bool| {
        let _ = child.kill();
        let _ = child.wait();
        LaunchError {
            error: HarnessError::StartFailed {
                binary: bin.label(),
                port,
                reason,
                log_tail: log_tail(dir, LOG_TAIL_LINES),
            },
            retry_on_other_port: retry,
        }
    };
    let deadline = Instant::now() + READY_TIMEOUT;
    loop {
        match child.try_wait() {
            Ok(Some(status)) => {
                return Err(failed(
                    &mut child,
                    format!("the server exited during start-up ({status})"),
                    true,
                ));
            }
            Ok(None) => {}
            Err(e) => {
                return Err(failed(
                    &mut child,
                    format!("cannot check the process: {e}"),
                    false,
                ));
            }
        }
        match probe(port, opts.password(), child.id()) {
            Probe::Ready => return Ok(child),
            Probe::NotYet => {}
            Probe::Foreign(what) => {
                return Err(failed(
                    &mut child,
                    format!("another process answers on the port ({what})"),
                    true,
                ));
            }
        }
        if Instant::now() >= deadline {
            return Err(failed(
                &mut child,
                format!("no answer to PING within {READY_TIMEOUT:?}"),
                false,
            ));
        }
        thread::sleep(POLL_INTERVAL);
    }
}

/// One readiness probe: `[AUTH] INFO server` + `PING`. Ready when INFO names our pid (so a
/// server of another test that won a port race is not mistaken for ours) and PING answers
/// `+PONG` (not `-LOADING`), or when the server demands a password we do not know.
fn probe(port: u16, password: Option<&str>, pid: u32) -> Probe {
    let Ok(mut stream) = connect(port, PROBE_TIMEOUT) else {
        return Probe::NotYet;
    };
    let mut out = Vec::new();
    if let Some(pass) = password {
        out.extend(RespValue::encode_command(&["AUTH", pass]));
    }
    out.extend(RespValue::encode_command(&["INFO", "server"]));
    out.extend(RespValue::encode_command(&["PING"]));
    if stream.write_all(&out).is_err() {
        return Probe::NotYet;
    }
    let mut reader = BufReader::new(stream);
    if password.is_some() {
        match RespValue::read(&mut reader) {
            Ok(reply) if reply.is_ok() => {}
            Ok(RespValue::Error(e)) if e.starts_with("LOADING") => return Probe::NotYet,
            Ok(other) => return Probe::Foreign(format!("AUTH: {other}")),
            Err(_) => return Probe::NotYet,
        }
    }
    let info = match RespValue::read(&mut reader) {
        Ok(info) => info,
        Err(_) => return Probe::NotYet,
    };
    let ping = match RespValue::read(&mut reader) {
        Ok(ping) => ping,
        Err(_) => return Probe::NotYet,
    };
    match (&info, &ping) {
        (RespValue::Bulk(Some(text)), RespValue::Simple(pong)) if pong == "PONG" => {
            let text = String::from_utf8_lossy(text);
            let theirs = text
                .lines()
                .find_map(|l| l.trim().strip_prefix("process_id:"));
            match theirs {
                Some(p) if p == pid.to_string() => Probe::Ready,
                Some(p) => Probe::Foreign(format!("process_id {p}, ours is {pid}")),
                None => Probe::Ready,
            }
        }
        (_, RespValue::Error(e)) if e.starts_with("NOAUTH") => Probe::Ready,
        _ => Probe::NotYet,
    }
}

fn log_tail(dir: &Path, lines: usize) -> String {
    log_files_tail(dir, &[SERVER_LOG, STDIO_LOG], lines)
}

/// The last `lines` lines of each of the files `names` in `dir`, each under a `[name]` header.
pub(crate) fn log_files_tail(dir: &Path, names: &[&str], lines: usize) -> String {
    let mut out = String::new();
    for name in names {
        let Ok(text) = fs::read_to_string(dir.join(name)) else {
            continue;
        };
        let all: Vec<&str> = text.lines().collect();
        if all.is_empty() {
            continue;
        }
        out.push_str(&format!("[{name}]\n"));
        for line in &all[all.len().saturating_sub(lines)..] {
            out.push_str(line);
            out.push('\n');
        }
    }
    if out.is_empty() {
        out.push_str("(no log output)\n");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_is_send_and_sync() {
        fn is<T: Send + Sync>() {}
        is::<Server>();
    }

    #[test]
    fn quotes_config_arguments() {
        assert_eq!(conf_quote("plain"), r#""plain""#);
        assert_eq!(conf_quote("a b\"c\\d\n\u{1}"), r#""a b\"c\\d\n\x01""#);
        assert_eq!(conf_quote("ü"), r#""\xc3\xbc""#);
    }

    #[test]
    fn options_builder() {
        let o = ServerOptions::new()
            .aof(true)
            .requirepass("pw")
            .arg("--a")
            .args(["b", "c"]);
        assert!(o.is_aof());
        assert_eq!(o.password(), Some("pw"));
        assert_eq!(o.args, ["--a", "b", "c"]);
    }
}
