//! `leasehold run`: run a command under a lock, kept alive while it runs, released when it
//! ends, and the command stopped if the lock is lost.
//!
//! What it promises, and under which assumption: while the child runs, the lock is renewed
//! every TTL/3 with the token-checked extend; if a renewal finds the key gone or taken over, or
//! none succeeds before the lease's validity ends, the child's process group gets SIGTERM at
//! once (SIGKILL after `--kill-grace`) and `leasehold` exits 76. So the child can only outlive
//! its lock by the grace period plus the time it takes to notice (at most one renewal
//! interval), unless `leasehold` itself is paused or killed with -9 (then the TTL frees the lock
//! and nothing stops the child: fencing is the answer to that, `--fencing` exports the number).
//!
//! # Signals, and what is left behind
//!
//! SIGINT, SIGTERM and SIGHUP are caught from the start (`docs/cli-signals.md` has the table):
//!
//! - **Before the command starts** (connecting, waiting for the lock, campaigning): the wait is
//!   abandoned (the library gives back an attempt in flight and leaves a fair queue; this waits
//!   for that), the command never runs, and `leasehold` exits 128+N.
//! - **While it runs**: the signal is forwarded to the command's process group; if the command
//!   is still running `--kill-grace` later, the group gets SIGKILL. The exit status is the
//!   command's (128+N if a signal killed it). The lock is released after the command is gone.
//! - **After it ended** (its leftovers being stopped, the release): the release is finished,
//!   then `leasehold` exits 128+N (76 if the lock had been lost). A second signal gives up on
//!   the release: `leasehold` exits 128+N at once and the lock expires with its TTL.
//!
//! SIGTSTP (Ctrl-Z) is ignored once the lock is held: it would stop leasehold, not the command.
//!
//! The command runs in a process group of its own. When it exits, whatever is left in that
//! group (a background child it forked) gets SIGTERM, and SIGKILL after `--kill-grace`, before
//! the lock is released: no protected work runs unprotected, and no process is left behind.
//! On Linux `leasehold` is a child subreaper, so those orphans are its own to reap. A process
//! that left the group (`setsid`, a daemon) is out of reach.

use std::future::Future;
use std::process::{ExitCode, ExitStatus};
use std::time::Duration;

use leasehold::{Error, LockGuard, LockOptions, TryAcquire};
use nix::errno::Errno;
use nix::sys::signal::{Signal, killpg};
use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
use nix::unistd::Pid;
use tokio::signal::unix::{SignalKind, signal};
use tokio::time::Instant;

use crate::cli::{ElectArgs, RunArgs};
use crate::exit::{Busy, Exit};
use crate::output::say;
use crate::primitive::Primitive;
use crate::settle::{Outcome, settle};
use crate::target::Servers;

/// Exit status when the lock is lost while the command runs.
pub const LOST_EXIT: u8 = 76;
/// Exit status when the command cannot be found (as a shell reports it).
pub const NOT_FOUND_EXIT: u8 = 127;
/// Exit status when the command is found but cannot be executed.
pub const NOT_EXECUTABLE_EXIT: u8 = 126;

/// At most this long for the library's background clean-up of an abandoned wait (one round
/// trip: the client's response timeout).
const CLEANUP_BOUND: Duration = Duration::from_secs(5);

/// How often a process group is looked at while waiting for it to empty.
const GROUP_POLL: Duration = Duration::from_millis(10);

pub(crate) async fn run(servers: &Servers, args: RunArgs) -> anyhow::Result<ExitCode> {
    let mut signals = Signals::install()?;
    if let Some(addr) = args.metrics_addr {
        crate::metrics::serve(addr).await?;
    }
    let program = args.command.first().map(|c| {
        std::path::Path::new(c)
            .file_name()
            .map_or_else(|| c.clone(), |n| n.to_string_lossy().into_owned())
    });
    let mut options = args.owner.apply(
        LockOptions::new(args.ttl)
            .fencing(args.fencing)
            .fair(args.fair)
            .auto_extend(true),
        program.as_deref(),
    );
    if let Some(min_hold) = args.min_hold {
        options = options.min_hold(min_hold);
    }
    if let Some(cap) = args.max_hold {
        options = options.max_hold(cap);
    }
    // Refused before connecting (exit 64): a --min-hold longer than --ttl.
    options.validate()?;
    let locker = match signals.until(servers.connect()).await {
        Ok(locker) => locker?,
        Err(sig) => return Ok(signalled(sig, "while connecting")),
    };
    let primitive = Primitive::of(&locker, &args.key, &args.primitive)?;
    let acquiring = async {
        if args.no_wait {
            match primitive.try_acquire(&options).await? {
                TryAcquire::Acquired(guard) => Ok(guard),
                TryAcquire::Busy { remaining } => Err(anyhow::Error::new(Busy {
                    key: args.key.clone(),
                    remaining,
                })),
            }
        } else {
            let options = options
                .clone()
                .wait(args.wait.unwrap_or(leasehold::FOREVER));
            primitive
                .acquire(&options)
                .await
                .map_err(anyhow::Error::new)
        }
    };
    let acquired = match signals.until(acquiring).await {
        Ok(acquired) => acquired,
        Err(sig) => return Ok(signalled(sig, "while waiting for the lock")),
    };
    let guard = match acquired {
        Ok(guard) => guard,
        Err(err) if Exit::of(&err) == Exit::NotAcquired => {
            say(format_args!("leasehold: {}", crate::exit::render(&err)));
            let code = args.conflict_exit_code.unwrap_or(Exit::NotAcquired.code());
            return Ok(ExitCode::from(code));
        }
        Err(err) => return Err(err),
    };
    // Redlock: the nodes outside the granting majority get their copy first, so that the
    // release at the end cannot find a node still empty and then see the acquisition land.
    settle(
        &locker,
        servers,
        guard.key(),
        guard.token(),
        Outcome::Acquired,
    )
    .await;
    let (key, token) = (guard.key().to_string(), guard.token().clone());
    let (code, late) = supervise(&guard, &args.command, args.kill_grace, &[], &mut signals).await;
    let (released, late) = match finish(&mut signals, late, guard.release()).await {
        Ok(finished) => finished,
        Err(sig) => return Ok(gave_up(sig, "the release")),
    };
    settle(&locker, servers, &key, &token, Outcome::Released).await;
    match released {
        Ok(()) => {}
        // Lost at the very end, or already reported as lost: nothing left to release.
        Err(Error::NotHeld { .. }) if code == LOST_EXIT => {}
        Err(Error::NotHeld { key }) => {
            say(format_args!(
                "leasehold: warning: lock {key:?} had expired when the command ended"
            ));
        }
        Err(e) => say(format_args!(
            "leasehold: warning: could not release the lock: {e}"
        )),
    }
    Ok(exit_after(code, late))
}

/// `leasehold elect`: campaign for `args.name`, run the command while leader, resign after.
pub(crate) async fn elect(servers: &Servers, args: ElectArgs) -> anyhow::Result<ExitCode> {
    let mut signals = Signals::install()?;
    let locker = match signals.until(servers.connect()).await {
        Ok(locker) => locker?,
        Err(sig) => return Ok(signalled(sig, "while connecting")),
    };
    let election = crate::primitive::usage(locker.election(&args.name), "elect")?;
    let id = args
        .id
        .clone()
        .unwrap_or_else(|| format!("pid-{}", std::process::id()));
    let options = LockOptions::new(args.ttl);
    let leadership = match signals.until(election.campaign(&id, &options)).await {
        Ok(leadership) => leadership?,
        Err(sig) => return Ok(signalled(sig, "while campaigning")),
    };
    let term = leadership.fencing_token().unwrap_or(0);
    say(format_args!(
        "leasehold: {id:?} leads {:?}, term {term}",
        args.name
    ));
    let env = [
        ("LEASEHOLD_LEADER_ID", id.clone()),
        ("LEASEHOLD_TERM", term.to_string()),
    ];
    let (code, late) = supervise(
        &leadership,
        &args.command,
        args.kill_grace,
        &env,
        &mut signals,
    )
    .await;
    let (resigned, late) = match finish(&mut signals, late, leadership.release()).await {
        Ok(finished) => finished,
        Err(sig) => return Ok(gave_up(sig, "resigning")),
    };
    match resigned {
        Ok(()) => {}
        Err(Error::NotHeld { .. }) if code == LOST_EXIT => {}
        Err(e) => say(format_args!("leasehold: warning: could not resign: {e}")),
    }
    Ok(exit_after(code, late))
}

/// SIGINT, SIGTERM and SIGHUP, caught for the whole of `run` and `elect`: none of them may end
/// leasehold with the command running or the lock held without a word.
struct Signals {
    int: tokio::signal::unix::Signal,
    term: tokio::signal::unix::Signal,
    hup: tokio::signal::unix::Signal,
}

impl Signals {
    fn install() -> anyhow::Result<Signals> {
        use anyhow::Context;
        let install = |kind| signal(kind).context("cannot install signal handlers");
        Ok(Signals {
            int: install(SignalKind::interrupt())?,
            term: install(SignalKind::terminate())?,
            hup: install(SignalKind::hangup())?,
        })
    }

    /// The next of the three to arrive.
    async fn recv(&mut self) -> Signal {
        tokio::select! {
            Some(()) = self.int.recv() => Signal::SIGINT,
            Some(()) = self.term.recv() => Signal::SIGTERM,
            Some(()) = self.hup.recv() => Signal::SIGHUP,
            else => std::future::pending().await,
        }
    }

    /// A signal that arrived while nobody listened (between the acquisition and now), if any.
    async fn pending(&mut self) -> Option<Signal> {
        tokio::select! {
            biased;
            sig = self.recv() => Some(sig),
            () = std::future::ready(()) => None,
        }
    }

    /// `work`, unless a signal comes first: then `work` is dropped, and the library's
    /// background clean-up of what it abandoned (an attempt in flight that may have taken the
    /// lock, a place in a fair queue) is given the time to reach the server before leasehold
    /// exits, which would cancel it.
    async fn until<F: Future>(&mut self, work: F) -> Result<F::Output, Signal> {
        let mut work = Box::pin(work);
        let sig = tokio::select! {
            out = &mut work => return Ok(out),
            sig = self.recv() => sig,
        };
        // Dropping it spawns the clean-ups, which the library counts until they end.
        drop(work);
        leasehold::cleanups_settled(CLEANUP_BOUND).await;
        Err(sig)
    }
}

/// The exit status for `sig` (128+N, as a shell reports a process it killed), after saying
/// what it interrupted.
fn signalled(sig: Signal, when: &str) -> ExitCode {
    say(format_args!(
        "leasehold: {sig} {when}; the command was not run"
    ));
    ExitCode::from(128 + sig as u8)
}

/// A second signal while `what` is under way: leasehold stops waiting for it.
fn gave_up(sig: Signal, what: &str) -> ExitCode {
    say(format_args!(
        "leasehold: {sig} again: giving up on {what}; the lock expires with its TTL"
    ));
    ExitCode::from(128 + sig as u8)
}

/// The command's status `code`, unless a signal arrived after the command ended: then 128+N
/// (but 76 stays: a lost lock is the news).
fn exit_after(code: u8, late: Option<Signal>) -> ExitCode {
    match late {
        Some(sig) if code != LOST_EXIT => ExitCode::from(128 + sig as u8),
        _ => ExitCode::from(code),
    }
}

/// Awaits the release (or the resignation) `release`. The first signal after the command ended
/// (`late`, or one arriving now) does not interrupt it: the request is on its way, and it is
/// what frees the lock for the others soonest. A second one gives up: `Err` with it. Returns
/// the outcome and the first signal after the command ended.
async fn finish<T>(
    signals: &mut Signals,
    mut late: Option<Signal>,
    release: impl Future<Output = T>,
) -> Result<(T, Option<Signal>), Signal> {
    let mut release = Box::pin(release);
    loop {
        tokio::select! {
            out = &mut release => return Ok((out, late)),
            sig = signals.recv() => {
                if late.is_some() {
                    return Err(sig);
                }
                say(format_args!(
                    "leasehold: {sig} while releasing the lock; finishing the release first \
                     (signal again to give up)"
                ));
                late = Some(sig);
            }
        }
    }
}

/// Starts the command and waits for it, forwarding signals and watching the lease, then ends
/// what it left in its process group. Returns the exit status `leasehold` should end with, and
/// the first signal that arrived after the command ended (while its group was being emptied).
async fn supervise(
    guard: &LockGuard,
    argv: &[String],
    kill_grace: Duration,
    env: &[(&str, String)],
    signals: &mut Signals,
) -> (u8, Option<Signal>) {
    let program = &argv[0];
    // Linux: the command's orphans (a background child it forked, then exited) become ours,
    // not init's, so that leasehold can reap them after stopping them; a container's init may
    // never do it, and a zombie still counts as a member of the group.
    #[cfg(target_os = "linux")]
    if let Err(e) = nix::sys::prctl::set_child_subreaper(true) {
        tracing::warn!(error = %e, "cannot become a child subreaper");
    }
    ignore_suspension();
    let mut command = tokio::process::Command::new(program);
    command
        .args(&argv[1..])
        .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
        .env("LEASEHOLD_KEY", guard.key())
        .env("LEASEHOLD_TOKEN", guard.token().expose())
        // Its own process group, so that a lost lock stops the command's children too.
        .process_group(0);
    match guard.fencing_token() {
        Some(n) => command.env("LEASEHOLD_FENCING_TOKEN", n.to_string()),
        None => command.env_remove("LEASEHOLD_FENCING_TOKEN"),
    };
    // Stopped before it started: not started at all (the lock is released, 128+N).
    if let Some(sig) = signals.pending().await {
        say(format_args!(
            "leasehold: {sig} before {program:?} started; not running it"
        ));
        return (128 + sig as u8, None);
    }
    let mut child = match command.spawn() {
        Ok(child) => child,
        Err(e) => {
            say(format_args!("leasehold: cannot run {program:?}: {e}"));
            let code = match e.kind() {
                std::io::ErrorKind::NotFound => NOT_FOUND_EXIT,
                _ => NOT_EXECUTABLE_EXIT,
            };
            return (code, None);
        }
    };
    // The child leads its own group, whose id is its pid. (Never 0: killpg(0) would signal
    // leasehold's own group.)
    let Some(group) = child.id().map(|id| Pid::from_raw(id as i32)) else {
        return (Exit::Software.code(), None);
    };
    // The group may be gone already (the child just exited): nothing to send it to.
    let send = |sig: Signal| {
        let _ = killpg(group, sig);
    };
    let mut lost = false;
    // Set by the first SIGTERM sent or signal forwarded: when the group gets SIGKILL.
    let mut kill_at: Option<Instant> = None;
    let status = loop {
        let grace_over = async {
            match kill_at {
                Some(at) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            status = child.wait() => break status,
            _ = guard.lost(), if !lost => {
                // The lock is gone: whatever the command does from now on is unprotected.
                lost = true;
                let reason = guard
                    .loss_reason()
                    .map_or_else(|| "lost".to_string(), |r| r.to_string());
                say(format_args!(
                    "leasehold: lock {:?} lost while {program:?} was running ({reason}); \
                     sending SIGTERM to its process group",
                    guard.key()
                ));
                send(Signal::SIGTERM);
                kill_at.get_or_insert(Instant::now() + kill_grace);
            }
            sig = signals.recv() => {
                send(sig);
                kill_at.get_or_insert(Instant::now() + kill_grace);
            }
            () = grace_over => {
                say(format_args!(
                    "leasehold: {program:?} still running {} after being told to stop; \
                     sending SIGKILL to its process group",
                    humantime::format_duration(kill_grace)
                ));
                send(Signal::SIGKILL);
                kill_at = None;
            }
        }
    };
    let late = stop_leftovers(group, program, kill_grace, signals).await;
    let code = if lost {
        LOST_EXIT
    } else {
        status.map_or(Exit::Software.code(), exit_code)
    };
    (code, late)
}

/// Ctrl-Z (SIGTSTP) would stop leasehold and not the command, in a process group of its own:
/// the lock would expire under a command still running. So from here on it is ignored, with a
/// word. (SIGSTOP cannot be: a frozen leasehold is the `kill -9` case, see above.)
fn ignore_suspension() {
    let Ok(mut tstp) = signal(SignalKind::from_raw(Signal::SIGTSTP as i32)) else {
        return;
    };
    tokio::spawn(async move {
        while tstp.recv().await.is_some() {
            say(format_args!(
                "leasehold: SIGTSTP ignored: a stopped leasehold cannot renew the lock"
            ));
        }
    });
}

/// The command has exited: ends whatever is left of its process group (a background child it
/// forked), SIGTERM then SIGKILL after `grace`, so that nothing of it outlives the lock.
/// Returns the first signal that arrived meanwhile.
async fn stop_leftovers(
    group: Pid,
    program: &str,
    grace: Duration,
    signals: &mut Signals,
) -> Option<Signal> {
    let mut late = None;
    if group_is_empty(group) {
        return None;
    }
    say(format_args!(
        "leasehold: {program:?} exited, leaving processes in its group; sending them SIGTERM"
    ));
    let _ = killpg(group, Signal::SIGTERM);
    for last in [Some(Signal::SIGKILL), None] {
        let deadline = Instant::now() + grace;
        while !group_is_empty(group) && Instant::now() < deadline {
            tokio::select! {
                () = tokio::time::sleep(GROUP_POLL) => {}
                sig = signals.recv() => { late.get_or_insert(sig); }
            }
        }
        match last {
            Some(sig) if !group_is_empty(group) => {
                say(format_args!(
                    "leasehold: {program:?}'s leftovers still running {} after SIGTERM; \
                     sending SIGKILL",
                    humantime::format_duration(grace)
                ));
                let _ = killpg(group, sig);
            }
            // Killed, or in uninterruptible sleep past a second grace: SIGKILL is pending.
            _ => break,
        }
    }
    late
}

/// Whether no process is left in `group`, after reaping those of its members that are ours
/// (orphans handed to leasehold as a subreaper). Only called once the group's leader, the
/// command, was reaped: `waitpid` must not take its status from under `Child::wait`.
fn group_is_empty(group: Pid) -> bool {
    while let Ok(status) = waitpid(Pid::from_raw(-group.as_raw()), Some(WaitPidFlag::WNOHANG)) {
        if status == WaitStatus::StillAlive {
            break;
        }
    }
    // EPERM: a member we may not signal (setuid) still exists.
    killpg(group, None) == Err(Errno::ESRCH)
}

/// The child's exit code, or 128 + N when signal N killed it (as a shell reports it).
fn exit_code(status: ExitStatus) -> u8 {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => code as u8,
        (None, Some(sig)) => (128 + sig) as u8,
        (None, None) => Exit::Software.code(),
    }
}
