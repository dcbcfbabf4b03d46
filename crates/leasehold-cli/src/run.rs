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

use std::process::{ExitCode, ExitStatus};
use std::time::Duration;

use leasehold::{Error, LockGuard, LockOptions, TryAcquire};
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use tokio::signal::unix::{SignalKind, signal};

use crate::cli::{ElectArgs, RunArgs};
use crate::exit::{Busy, Exit};
use crate::primitive::Primitive;
use crate::settle::{Outcome, settle};
use crate::target::Servers;

/// Exit status when the lock is lost while the command runs.
pub const LOST_EXIT: u8 = 76;
/// Exit status when the command cannot be found (as a shell reports it).
pub const NOT_FOUND_EXIT: u8 = 127;
/// Exit status when the command is found but cannot be executed.
pub const NOT_EXECUTABLE_EXIT: u8 = 126;

/// How long "no --wait" waits: for ever, in practice.
const FOREVER: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

pub(crate) async fn run(servers: &Servers, args: RunArgs) -> anyhow::Result<ExitCode> {
    if let Some(addr) = args.metrics_addr {
        crate::metrics::serve(addr).await?;
    }
    let locker = servers.connect().await?;
    let options = LockOptions::new(args.ttl)
        .fencing(args.fencing)
        .fair(args.fair)
        .auto_extend(true);
    let primitive = Primitive::of(&locker, &args.key, &args.primitive)?;
    let acquired = if args.no_wait {
        match primitive.try_acquire(&locker, &args.key, &options).await? {
            TryAcquire::Acquired(guard) => Ok(guard),
            TryAcquire::Busy { remaining } => Err(anyhow::Error::new(Busy {
                key: args.key.clone(),
                remaining,
            })),
        }
    } else {
        let options = options.wait(args.wait.unwrap_or(FOREVER));
        primitive
            .acquire(&locker, &args.key, &options)
            .await
            .map_err(anyhow::Error::new)
    };
    let guard = match acquired {
        Ok(guard) => guard,
        Err(err) if Exit::of(&err) == Exit::NotAcquired => {
            eprintln!("leasehold: {}", crate::exit::render(&err));
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
    let code = supervise(&guard, &args.command, args.kill_grace, &[]).await;
    let (key, token) = (guard.key().to_string(), guard.token().clone());
    let released = guard.release().await;
    settle(&locker, servers, &key, &token, Outcome::Released).await;
    match released {
        Ok(()) => {}
        // Lost at the very end, or already reported as lost: nothing left to release.
        Err(Error::NotHeld { .. }) if code == LOST_EXIT => {}
        Err(Error::NotHeld { key }) => {
            eprintln!("leasehold: warning: lock {key:?} had expired when the command ended");
        }
        Err(e) => eprintln!("leasehold: warning: could not release the lock: {e}"),
    }
    Ok(ExitCode::from(code))
}

/// `leasehold elect`: campaign for `args.name`, run the command while leader, resign after.
pub(crate) async fn elect(servers: &Servers, args: ElectArgs) -> anyhow::Result<ExitCode> {
    let locker = servers.connect().await?;
    let election =
        crate::primitive::redis(&locker, "an election (leasehold elect)")?.election(&args.name)?;
    let id = args
        .id
        .clone()
        .unwrap_or_else(|| format!("pid-{}", std::process::id()));
    let options = LockOptions::new(args.ttl);
    let leadership = election.campaign(&id, &options).await?;
    let term = leadership.fencing_token().unwrap_or(0);
    eprintln!("leasehold: {id:?} leads {:?}, term {term}", args.name);
    let env = [
        ("LEASEHOLD_LEADER_ID", id.clone()),
        ("LEASEHOLD_TERM", term.to_string()),
    ];
    let code = supervise(&leadership, &args.command, args.kill_grace, &env).await;
    match leadership.release().await {
        Ok(()) => {}
        Err(Error::NotHeld { .. }) if code == LOST_EXIT => {}
        Err(e) => eprintln!("leasehold: warning: could not resign: {e}"),
    }
    Ok(ExitCode::from(code))
}

/// Starts the command and waits for it, forwarding signals and watching the lease. Returns the
/// exit status `leasehold` should end with.
async fn supervise(
    guard: &LockGuard,
    argv: &[String],
    kill_grace: Duration,
    env: &[(&str, String)],
) -> u8 {
    let program = &argv[0];
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
    // Handlers first: a signal that arrives once the command runs must be forwarded, not kill
    // leasehold with the lock still held.
    let (Ok(mut int), Ok(mut term), Ok(mut hup)) = (
        signal(SignalKind::interrupt()),
        signal(SignalKind::terminate()),
        signal(SignalKind::hangup()),
    ) else {
        eprintln!("leasehold: cannot install signal handlers; not running {program:?}");
        return Exit::Software.code();
    };
    let mut child = match command.spawn() {
        Ok(child) => child,
        Err(e) => {
            eprintln!("leasehold: cannot run {program:?}: {e}");
            return match e.kind() {
                std::io::ErrorKind::NotFound => NOT_FOUND_EXIT,
                _ => NOT_EXECUTABLE_EXIT,
            };
        }
    };
    // The child leads its own group, whose id is its pid. (Never 0: killpg(0) would signal
    // leasehold's own group.)
    let group = child.id().map(|id| Pid::from_raw(id as i32));
    let forward = |sig: Signal| {
        // The group may be gone already (the child just exited): nothing to forward to.
        if let Some(group) = group {
            let _ = killpg(group, sig);
        }
    };
    loop {
        tokio::select! {
            status = child.wait() => return status.map_or(Exit::Software.code(), exit_code),
            _ = guard.lost() => break,
            Some(()) = int.recv() => forward(Signal::SIGINT),
            Some(()) = term.recv() => forward(Signal::SIGTERM),
            Some(()) = hup.recv() => forward(Signal::SIGHUP),
        }
    }

    // The lock is gone: whatever the command does from now on is unprotected. Stop it.
    let reason = guard
        .loss_reason()
        .map_or_else(|| "lost".to_string(), |r| r.to_string());
    eprintln!(
        "leasehold: lock {:?} lost while {program:?} was running ({reason}); sending SIGTERM to its process group",
        guard.key()
    );
    forward(Signal::SIGTERM);
    if tokio::time::timeout(kill_grace, child.wait())
        .await
        .is_err()
    {
        eprintln!(
            "leasehold: {program:?} still running {} after SIGTERM; sending SIGKILL",
            humantime::format_duration(kill_grace)
        );
        forward(Signal::SIGKILL);
        let _ = child.wait().await;
    }
    LOST_EXIT
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
