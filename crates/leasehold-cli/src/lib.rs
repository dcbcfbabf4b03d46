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
//! ```
//!
//! The server comes from `--url`, else `$LEASEHOLD_URL`, else `$REDIS_URL`, else
//! `redis://127.0.0.1:6379/`. Errors print one line on stderr, `leasehold: ...`, and the exit
//! status says what happened (see [`Exit`]).

#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod acquire;
mod cli;
mod demo;
mod exit;
mod extend;
mod inspect;
mod output;
mod release;
mod run;
mod target;

use std::process::ExitCode;

pub use cli::{
    AcquireArgs, Cli, Command, DemoArgs, ExtendArgs, InspectArgs, OutputArgs, ReleaseArgs, RunArgs,
};
pub use exit::Exit;

use target::Target;

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
    let target = Target::resolve(cli.url);
    match cli.command {
        Command::Demo(args) => demo::run(&target, args).await,
        Command::Acquire(args) => acquire::run(&target, args).await,
        Command::Release(args) => release::run(&target, args).await,
        Command::Extend(args) => extend::run(&target, args).await,
        Command::Inspect(args) => inspect::run(&target, args).await,
        Command::Run(args) => return run::run(&target, args).await,
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
