//! The `leasehold` command line, as a library: [`Cli`] is the parsed command line and [`run`]
//! carries it out; the binary only adds the runtime.
//!
//! ```text
//! leasehold acquire KEY --ttl 30s [--wait 5s] [--fencing] [--json]   # prints the token
//! leasehold extend  KEY --token T --ttl 30s [--json]
//! leasehold release KEY --token T [--json]
//! leasehold inspect KEY [--json]
//! leasehold run KEY [--ttl 30s] [--wait 5s | --no-wait] [--fencing] -- CMD [ARGS...]
//! leasehold demo [--server redis7|redis8|valkey9]
//! leasehold --url URL1 --url URL2 --url URL3 [--node-timeout 50ms] acquire ...   # Redlock
//! ```
//!
//! The server comes from `--url`, else `$LEASEHOLD_URL`, else `$REDIS_URL`, else
//! `redis://127.0.0.1:6379/`. Errors print one line on stderr, `leasehold: ...`, and the exit
//! status says what happened (see [`Exit`]).
//!
//! # Redlock
//!
//! `--url` given two or more times (or `$LEASEHOLD_URL` listing several URLs separated by
//! commas; a comma splits only where a `scheme://` follows, so passwords may contain commas)
//! means Redlock over those servers, for `acquire`, `release`, `extend`, `inspect` and `run`,
//! through [`leasehold::Redlock`]: a lock is taken when a majority of the nodes grant it (with
//! `--fencing`, a number strictly increasing across all holders), extended when a majority
//! confirm, released on every node, and `run` keeps it alive and stops the command when a
//! majority is lost. `--node-timeout` (default 50 ms) bounds each node's answer. Connecting
//! needs a majority of the nodes; the same `host:port` given twice is a usage error. When
//! fewer than a majority answer, `leasehold` exits 69 and the stderr line lists each node's
//! outcome (`127.0.0.1:7001: granted; 127.0.0.1:7002: failed: ...`). `inspect` shows each
//! node's holder, TTL and fencing counter, and whether a majority holds one token. One URL
//! (or none) is a plain lock on that one server, as before; `demo` takes only one. `--url` and
//! `--node-timeout` may come before or after the subcommand: every `--url` counts.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod acquire;
mod bench;
mod check;
mod cli;
mod demo;
mod exit;
mod extend;
mod inspect;
mod locks;
mod metrics;
mod output;
mod primitive;
mod release;
mod run;
mod target;

use std::process::ExitCode;

pub use cli::{
    AcquireArgs, BenchArgs, BenchWorkerArgs, CheckArgs, CheckWorkerArgs, Cli, Command, DemoArgs,
    ExtendArgs, InspectArgs, OutputArgs, ReleaseArgs, RunArgs, ServerArgs,
};
pub use exit::Exit;

use exit::Usage;
use target::Servers;

/// Carries out `cli` and returns the exit status. Failures are reported on stderr as one line,
/// `leasehold: <what went wrong>`.
pub async fn run(cli: Cli) -> ExitCode {
    match dispatch(cli).await {
        Ok(code) => code,
        Err(err) => {
            eprintln!("leasehold: {}", exit::render(&err));
            Exit::of(&err).into()
        }
    }
}

async fn dispatch(cli: Cli) -> anyhow::Result<ExitCode> {
    let given = cli.servers();
    let given_urls = given.url.clone();
    let servers = Servers::resolve(given.url, given.node_timeout).topology(
        given.cluster,
        given.sentinel_master,
        given.tls_ca_file,
    )?;
    match cli.command {
        Command::Demo(args) => {
            let Some(target) = servers.single() else {
                return Err(Usage(
                    "the demo talks to one server: give at most one --url (or one URL in \
                     $LEASEHOLD_URL), without --cluster or --sentinel-master"
                        .into(),
                )
                .into());
            };
            demo::run(&target, args).await
        }
        Command::Acquire(args) => acquire::run(&servers, args).await,
        Command::Release(args) => release::run(&servers, args).await,
        Command::Extend(args) => extend::run(&servers, args).await,
        Command::Inspect(args) => inspect::run(&servers, args).await,
        Command::Run(args) => return run::run(&servers, args).await,
        Command::Elect(args) => return run::elect(&servers, args).await,
        Command::Bench(args) => {
            if !given_urls.is_empty() {
                return Err(
                    Usage("bench starts its own servers: --url does not apply".into()).into(),
                );
            }
            bench::run(args).await
        }
        Command::Check(args) => {
            if !given_urls.is_empty() {
                return Err(
                    Usage("check starts its own servers: --url does not apply".into()).into(),
                );
            }
            return check::run(args).await;
        }
        Command::CheckWorker(args) => check::worker::run(args).await,
        Command::BenchWorker(args) => bench::worker(args).await,
    }
    .map(|()| Exit::Success.into())
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
