//! The command line of a server process, and a sentinel's configuration file.

use std::fs::{self, OpenOptions};
use std::path::Path;
use std::process::{Child, Command, Stdio};

use super::options::ServerOptions;
use super::ports::Ports;
use super::{Mode, NODES_CONF, SENTINEL_CONF, SERVER_LOG, STDIO_LOG};
use crate::{HarnessError, ServerBinary};

pub(super) fn spawn(
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
    if let Some(clock) = &opts.fake_clock {
        cmd.envs(clock.env());
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
