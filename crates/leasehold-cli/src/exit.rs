//! Exit statuses, and how an error maps to one.
//!
//! `run` and `elect` add their own: the command's status passed through (128+N if signal N
//! killed it), 126 and 127 when it cannot be executed or found, and 128+N when signal N
//! (SIGINT 130, SIGTERM 143, SIGHUP 129) stopped `leasehold` before the command started or
//! after it ended (`docs/cli-signals.md` has every stage).

use std::fmt;
use std::process::ExitCode;
use std::time::Duration;

/// The exit statuses of `leasehold` (from `sysexits.h` where one fits).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Exit {
    /// 0: success.
    Success,
    /// 1: the token no longer holds the key (expired, released, or taken over).
    NotHeld,
    /// 64 (`EX_USAGE`): bad arguments, a malformed URL, an out-of-range TTL.
    Usage,
    /// 69 (`EX_UNAVAILABLE`): the server cannot be reached (Redlock: fewer than a majority of
    /// the nodes answered, or a replica-acknowledged lock was not acknowledged), no server
    /// could be started, or a `file://` lock folder does not exist or takes no files.
    Unavailable,
    /// 70 (`EX_SOFTWARE`): anything else (an unexpected server error or reply, a bug).
    Software,
    /// 75 (`EX_TEMPFAIL`): the lock is busy, or `--wait` elapsed, or the grant came too late
    /// to be a lease (given back): try again later.
    NotAcquired,
    /// 76: `run` lost its lock while the command ran, and stopped the command.
    LockLost,
    /// 77 (`EX_NOPERM`): authentication refused, or an ACL forbids the command.
    NoPermission,
    /// 130 (128 + SIGINT): interrupted by Ctrl-C. (`run` and `elect` exit 128+N for each of
    /// SIGINT, SIGTERM and SIGHUP, as a shell reports a process that signal N ended.)
    Interrupted,
}

impl Exit {
    /// The numeric status.
    pub fn code(self) -> u8 {
        match self {
            Exit::Success => 0,
            Exit::NotHeld => 1,
            Exit::Usage => 64,
            Exit::Unavailable => 69,
            Exit::Software => 70,
            Exit::NotAcquired => 75,
            Exit::LockLost => 76,
            Exit::NoPermission => 77,
            Exit::Interrupted => 130,
        }
    }

    /// The status an error calls for: the first cause in its chain that says something decides.
    pub fn of(err: &anyhow::Error) -> Exit {
        err.chain().find_map(classify).unwrap_or(Exit::Software)
    }
}

impl From<Exit> for ExitCode {
    fn from(exit: Exit) -> Self {
        ExitCode::from(exit.code())
    }
}

/// The status one cause calls for, if it says anything (`None`: look further down the chain).
pub fn classify(cause: &(dyn std::error::Error + 'static)) -> Option<Exit> {
    if let Some(e) = cause.downcast_ref::<leasehold::Error>() {
        return Some(match e {
            leasehold::Error::InvalidArgument { .. } => Exit::Usage,
            leasehold::Error::Connection { .. } => Exit::Unavailable,
            leasehold::Error::Authentication { .. } => Exit::NoPermission,
            leasehold::Error::PermissionDenied { .. } => Exit::NoPermission,
            // The URL names another topology than the server has: the invocation is wrong.
            leasehold::Error::Topology { .. } => Exit::Usage,
            leasehold::Error::NotHeld { .. } => Exit::NotHeld,
            leasehold::Error::NotAcquired { .. } => Exit::NotAcquired,
            // The grant came after its lease's validity (a slow server or link, a short TTL):
            // given back; trying again later may well succeed.
            leasehold::Error::ExpiredOnArrival { .. } => Exit::NotAcquired,
            leasehold::Error::Server { .. } => {
                leasehold::redis::server_error(e).map_or(Exit::Software, server_reply)
            }
            leasehold::Error::UnexpectedReply { .. } => Exit::Software,
            leasehold::Error::LockLost { .. } => Exit::LockLost,
            leasehold::Error::NoQuorum { .. } => Exit::Unavailable,
            leasehold::Error::NotReplicated { .. } => Exit::Unavailable,
            // Asked of a backend that cannot do it, or a backend not compiled in: the
            // invocation is wrong for this build or this URL.
            leasehold::Error::Unsupported { .. } => Exit::Usage,
            leasehold::Error::BackendNotCompiled { .. } => Exit::Usage,
            // The name is used with other settings: the invocation does not fit the data.
            leasehold::Error::Conflict { .. } => Exit::Usage,
            _ => Exit::Software,
        });
    }
    if let Some(e) = cause.downcast_ref::<redis::RedisError>() {
        return Some(redis_error(e));
    }
    if cause.is::<Busy>() {
        return Some(Exit::NotAcquired);
    }
    if cause.is::<Usage>() {
        return Some(Exit::Usage);
    }
    if cause.is::<Interrupted>() {
        return Some(Exit::Interrupted);
    }
    if cause.is::<NoServer>() || cause.is::<NoMajority>() {
        return Some(Exit::Unavailable);
    }
    None
}

/// An error reply from the server: an ACL refusal is a permission problem, a replica or a
/// loading server is unavailable for locking, the rest is unexpected.
fn server_reply(e: &redis::RedisError) -> Exit {
    match e.code() {
        Some("NOPERM" | "NOAUTH" | "WRONGPASS") => Exit::NoPermission,
        Some("READONLY" | "LOADING" | "MASTERDOWN") => Exit::Unavailable,
        _ => Exit::Software,
    }
}

/// A raw client error (`leasehold-lab demo` sends commands of its own).
fn redis_error(e: &redis::RedisError) -> Exit {
    if e.kind() == redis::ErrorKind::AuthenticationFailed {
        Exit::NoPermission
    } else if e.is_io_error() || e.is_timeout() || e.is_connection_dropped() {
        Exit::Unavailable
    } else {
        server_reply(e)
    }
}

/// The error line: the chain of causes joined with `: `, leaving out a cause whose text an
/// earlier message already contains (the library's messages quote their sources), on one line.
pub fn render(err: &anyhow::Error) -> String {
    let mut out = String::new();
    for cause in err.chain() {
        let msg = cause.to_string();
        if msg.is_empty() || out.contains(&msg) {
            continue;
        }
        if !out.is_empty() {
            out.push_str(": ");
        }
        out.push_str(&msg);
    }
    out.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// A single acquisition attempt found the lock held by someone else.
#[derive(Debug)]
pub struct Busy {
    pub key: String,
    pub remaining: Option<Duration>,
}

impl fmt::Display for Busy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "lock {:?} is busy: another holder has it", self.key)?;
        if let Some(r) = self.remaining {
            let ms = Duration::from_millis(r.as_millis() as u64);
            write!(f, " for another {}", humantime::format_duration(ms))?;
        }
        f.write_str(" (retry, or pass --wait)")
    }
}

impl std::error::Error for Busy {}

/// The arguments make no sense together, or ask for something unsafe.
#[derive(Debug)]
pub struct Usage(pub String);

impl fmt::Display for Usage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Usage {}

/// Ctrl-C arrived.
#[derive(Debug)]
pub struct Interrupted;

impl fmt::Display for Interrupted {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("interrupted")
    }
}

impl std::error::Error for Interrupted {}

/// No server binary is installed for `leasehold-lab demo` to start.
#[derive(Debug)]
pub struct NoServer(pub String);

impl fmt::Display for NoServer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for NoServer {}

/// Fewer than a majority of the Redlock nodes answered (connecting, or inspecting).
#[derive(Debug)]
pub struct NoMajority {
    /// What could not be done, completing "cannot ... a majority of the Redlock nodes".
    pub what: String,
    pub needed: usize,
    pub total: usize,
    /// Each node (`host:port`) and what it answered.
    pub nodes: Vec<(String, String)>,
}

impl fmt::Display for NoMajority {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "cannot {} a majority of the Redlock nodes ({} of {} needed)",
            self.what, self.needed, self.total
        )?;
        for (i, (node, outcome)) in self.nodes.iter().enumerate() {
            f.write_str(if i == 0 { ": " } else { "; " })?;
            write!(f, "{node}: {outcome}")?;
        }
        Ok(())
    }
}

impl std::error::Error for NoMajority {}

#[cfg(test)]
mod tests {
    use super::*;
    use anyhow::Context;

    #[test]
    fn the_deepest_meaningful_cause_decides() {
        let err =
            anyhow::Error::new(leasehold::Error::NotHeld { key: "k".into() }).context("releasing");
        assert_eq!(Exit::of(&err), Exit::NotHeld);
        let err = Err::<(), _>(Busy {
            key: "k".into(),
            remaining: None,
        })
        .context("acquiring")
        .unwrap_err();
        assert_eq!(Exit::of(&err), Exit::NotAcquired);
        assert_eq!(Exit::of(&anyhow::anyhow!("boom")), Exit::Software);
    }

    #[test]
    fn no_quorum_and_no_replication_are_69() {
        let nodes = leasehold::NodeReports(vec![
            leasehold::NodeReport {
                node: "127.0.0.1:7001".into(),
                outcome: leasehold::NodeOutcome::Granted,
            },
            leasehold::NodeReport {
                node: "127.0.0.1:7002".into(),
                outcome: leasehold::NodeOutcome::TimedOut,
            },
        ]);
        let err = anyhow::Error::new(leasehold::Error::NoQuorum {
            key: "k".into(),
            needed: 2,
            nodes,
        });
        assert_eq!(Exit::of(&err), Exit::Unavailable);
        let line = render(&err);
        assert!(
            line.contains("127.0.0.1:7001: granted") && line.contains("127.0.0.1:7002: timed out"),
            "{line}"
        );
        let err = anyhow::Error::new(leasehold::Error::NotReplicated {
            key: "k".into(),
            acked: 0,
            wanted: 1,
        });
        assert_eq!(Exit::of(&err), Exit::Unavailable);
        let err = anyhow::Error::new(NoMajority {
            what: "connect to".into(),
            needed: 2,
            total: 3,
            nodes: vec![
                ("a:1".into(), "connected".into()),
                ("b:2".into(), "timed out".into()),
            ],
        });
        assert_eq!(Exit::of(&err), Exit::Unavailable);
        assert_eq!(
            render(&err),
            "cannot connect to a majority of the Redlock nodes (2 of 3 needed): a:1: connected; b:2: timed out"
        );
    }

    #[test]
    fn rendering_drops_repeated_causes() {
        #[derive(Debug)]
        struct Outer(std::io::Error);
        impl fmt::Display for Outer {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "outer: {}", self.0)
            }
        }
        impl std::error::Error for Outer {
            fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
                Some(&self.0)
            }
        }
        let err =
            anyhow::Error::new(Outer(std::io::Error::other("inner\ndetail"))).context("doing it");
        assert_eq!(render(&err), "doing it: outer: inner detail");
    }
}
