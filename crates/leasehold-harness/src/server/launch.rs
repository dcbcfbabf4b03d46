//! Launching a server process and waiting until it answers.

use std::io::{BufReader, Write};
use std::path::Path;
use std::process::Child;
use std::thread;
use std::time::Instant;

use super::commands::connect;
use super::logs::log_tail;
use super::options::ServerOptions;
use super::ports::Ports;
use super::spawn::spawn;
use super::{LOG_TAIL_LINES, Mode, POLL_INTERVAL, PROBE_TIMEOUT, READY_TIMEOUT};
use crate::{HarnessError, RespValue, ServerBinary};

/// Why a launch attempt failed, and whether a new port might help.
pub(super) struct LaunchError {
    pub(super) error: HarnessError,
    pub(super) retry_on_other_port: bool,
}

enum Probe {
    Ready,
    NotYet,
    /// Something else answers on the port (another test's server won a port race).
    Foreign(String),
}

/// Spawns the server and waits until it answers; on failure the process is killed and reaped.
pub(super) fn launch(
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
