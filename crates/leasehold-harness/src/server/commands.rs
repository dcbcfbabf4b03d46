//! Commands sent to a [`Server`], each over a fresh connection.

use std::io::{BufReader, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use super::{COMMAND_TIMEOUT, Server};
use crate::{HarnessError, RespValue};

impl Server {
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

pub(super) fn connect(port: u16, timeout: Duration) -> std::io::Result<TcpStream> {
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
