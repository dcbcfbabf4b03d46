//! The `leasehold` command line, as a library: [`Cli`] is the parsed command line and [`run`]
//! carries it out; the binary only adds the runtime.
//!
//! ```text
//! leasehold acquire KEY --ttl 30s [--wait 5s] [--fencing] [--json]   # prints the token
//! leasehold extend  KEY --token T --ttl 30s [--json]
//! leasehold release KEY --token T [--json]
//! leasehold inspect KEY [--json]
//! leasehold run KEY [--ttl 30s] [--wait 5s | --no-wait] [--fencing] -- CMD [ARGS...]
//! leasehold elect NAME [--ttl 10s] -- CMD [ARGS...]
//! leasehold --url URL1 --url URL2 --url URL3 [--node-timeout 50ms] acquire ...   # Redlock
//! ```
//!
//! The server comes from `--url`, else `$LEASEHOLD_URL`, else `$REDIS_URL`, else
//! `redis://127.0.0.1:6379/`: `redis://`, `valkey://`, `rediss://` (TLS), `redis-cluster://`,
//! `redis-sentinel://...#master`, `redlock://`, `etcd://`, or `postgres://` (with `?lock=lease`
//! for lease rows). Errors print one line on stderr, `leasehold: ...`, and the exit
//! status says what happened (see [`Exit`]).
//!
//! # Redlock
//!
//! `--url` given two or more times (or `$LEASEHOLD_URL` listing several URLs separated by
//! commas; a comma splits only where a `scheme://` follows, so passwords may contain commas)
//! means Redlock over those servers, for `acquire`, `release`, `extend`, `inspect` and `run`,
//! through [`leasehold::redlock::Redlock`]: a lock is taken when a majority of the nodes grant it (with
//! `--fencing`, a number strictly increasing across all holders), extended when a majority
//! confirm, released on every node, and `run` keeps it alive and stops the command when a
//! majority is lost. `--node-timeout` (default 50 ms) bounds each node's answer. Connecting
//! needs a majority of the nodes; the same `host:port` given twice is a usage error. When
//! fewer than a majority answer, `leasehold` exits 69 and the stderr line lists each node's
//! outcome (`127.0.0.1:7001: granted; 127.0.0.1:7002: failed: ...`). `inspect` shows each
//! node's holder, TTL and fencing counter, and whether a majority holds one token. One URL
//! (or none) is a plain lock on that one server, as before. `--url` and `--node-timeout` may
//! come before or after the subcommand: every `--url` counts.
//!
//! The demo, the safety checker and the benchmarks are not part of this command: they are the
//! `leasehold-lab` binary (crate `leasehold-lab`), which builds on the modules this library
//! exposes as hidden (`exit`, `metrics`, `settle`, `target`).

#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod acquire;
mod cli;
#[doc(hidden)]
pub mod exit;
mod extend;
mod force_release;
mod inspect;
mod ls;
#[doc(hidden)]
pub mod metrics;
mod output;
mod primitive;
mod release;
mod run;
#[doc(hidden)]
pub mod settle;
#[doc(hidden)]
pub mod target;

use std::process::ExitCode;

pub use cli::{
    AcquireArgs, Cli, Command, ExtendArgs, InspectArgs, OutputArgs, ReleaseArgs, RunArgs,
    ServerArgs, parse_duration, parse_positive_duration, parse_renewed_ttl, parse_ttl,
};
pub use exit::Exit;

/// Carries out `cli` and returns the exit status. Failures are reported on stderr as one line,
/// `leasehold: <what went wrong>`.
pub async fn run(cli: Cli) -> ExitCode {
    report(dispatch(cli).await, Exit::of)
}

/// The exit status of `outcome`; a failure is reported on stderr as one line,
/// `leasehold: <what went wrong>`, and `exit_of` picks its status (usually [`Exit::of`]).
pub fn report(
    outcome: anyhow::Result<ExitCode>,
    exit_of: impl FnOnce(&anyhow::Error) -> Exit,
) -> ExitCode {
    match outcome {
        Ok(code) => code,
        Err(err) => {
            output::say(format_args!("leasehold: {}", exit::render(&err)));
            exit_of(&err).into()
        }
    }
}

async fn dispatch(cli: Cli) -> anyhow::Result<ExitCode> {
    let servers = cli.servers().resolve()?;
    match cli.command {
        Command::Acquire(args) => acquire::run(&servers, args).await,
        Command::Release(args) => release::run(&servers, args).await,
        Command::Extend(args) => extend::run(&servers, args).await,
        Command::Inspect(args) => inspect::run(&servers, args).await,
        Command::Run(args) => return run::run(&servers, args).await,
        Command::Elect(args) => return run::elect(&servers, args).await,
        Command::Ls(args) => ls::run(&servers, args).await,
        Command::ForceRelease(args) => force_release::run(&servers, args).await,
    }
    .map(|()| Exit::Success.into())
}

/// What every binary of this crate and of `leasehold-lab` does first: parses the command line as
/// `C` (a parsing error, `--help` or `--version`: `Err` with the exit status, see
/// [`clap_exit`]), sets up logging ([`init_tracing`]), and builds the async runtime, on one
/// thread when `one_thread` says so for the parsed command line.
pub fn start<C: clap::Parser>(
    one_thread: impl FnOnce(&C) -> bool,
) -> Result<(C, tokio::runtime::Runtime), ExitCode> {
    let cli = C::try_parse().map_err(|err| clap_exit(&err))?;
    init_tracing();
    let mut builder = if one_thread(&cli) {
        tokio::runtime::Builder::new_current_thread()
    } else {
        tokio::runtime::Builder::new_multi_thread()
    };
    match builder.enable_all().build() {
        Ok(runtime) => Ok((cli, runtime)),
        Err(err) => {
            output::say(format_args!(
                "leasehold: cannot start the async runtime: {err}"
            ));
            Err(Exit::Software.into())
        }
    }
}

/// Reports a command-line parsing error (or prints `--help`/`--version`) and returns the exit
/// status: 0 for `--help` and `--version`, 64 (usage) for everything else, instead of clap's 2.
pub fn clap_exit(err: &clap::Error) -> ExitCode {
    // Nothing useful is left to do if the terminal is gone.
    let _ = err.print();
    if err.use_stderr() {
        Exit::Usage.into()
    } else {
        Exit::Success.into()
    }
}

/// Logs to stderr, filtered by `$RUST_LOG` (default: warnings and errors).
pub fn init_tracing() {
    use std::io::IsTerminal;
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_target(false)
        .with_ansi(std::io::stderr().is_terminal())
        .try_init();
}
