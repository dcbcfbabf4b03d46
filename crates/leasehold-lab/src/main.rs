//! `leasehold-lab`: leasehold's demo (`demo`), fault-injection safety checker (`check`) and
//! benchmarks (`bench`), with the worker processes the last two spawn (`check-worker`,
//! `bench-worker`: this binary again, through [`std::env::current_exe`]).
//!
//! They start throwaway servers through `leasehold-harness`, which is why they are not part of
//! the shipped `leasehold` command (crate `leasehold-cli`): that one links no harness. This
//! binary builds on the `leasehold_cli` library for the rest (targets, exit statuses, metrics).

#![forbid(unsafe_code)]

mod bench;
mod check;
mod cli;
mod demo;

use std::process::ExitCode;

use leasehold_cli::Exit;
// The modules of the `leasehold` command this one builds on, under the names they had when
// both were one binary.
use leasehold_cli::{exit, metrics, target};

use cli::{Cli, Command};
use exit::Usage;

fn main() -> ExitCode {
    // A bench worker is one of hundreds of client processes on a 2-core machine: one thread.
    match leasehold_cli::start::<Cli>(|cli| matches!(cli.command, Command::BenchWorker(_))) {
        Ok((cli, runtime)) => leasehold_cli::report(runtime.block_on(dispatch(cli)), exit_of),
        Err(code) => code,
    }
}

/// [`Exit::of`], and 69 (unavailable) for a server the harness could not start.
fn exit_of(err: &anyhow::Error) -> Exit {
    err.chain()
        .find_map(|cause| {
            if cause.is::<leasehold_harness::HarnessError>() {
                Some(Exit::Unavailable)
            } else {
                exit::classify(cause)
            }
        })
        .unwrap_or(Exit::Software)
}

async fn dispatch(cli: Cli) -> anyhow::Result<ExitCode> {
    let given = cli.servers();
    let given_urls = given.url.clone();
    let servers = given.resolve()?;
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
