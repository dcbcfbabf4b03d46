//! Starting, restarting, stopping, pausing and replicating a [`Server`], and what it tells
//! about itself.

use std::fs;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::thread;
use std::time::{Duration, Instant};

use super::commands::master_link_up;
use super::launch::{LaunchError, launch};
use super::logs::log_tail;
use super::options::ServerOptions;
use super::ports::Ports;
use super::{
    LOG_TAIL_LINES, Mode, NODES_CONF, REPLICATION_TIMEOUT, SENTINEL_CONF, SERVER_LOG,
    START_ATTEMPTS, STDIO_LOG, STOP_GRACE, Server,
};
use crate::process::Process;
use crate::{HarnessError, ServerBinary};

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
}
