//! The `leasehold` command. Everything lives in the `leasehold_cli` library; this only parses the
//! arguments, sets up logging and the runtime, and turns the outcome into an exit status.

#![forbid(unsafe_code)]

use std::process::ExitCode;

use clap::Parser;
use leasehold_cli::{Cli, Exit};

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(err) => return leasehold_cli::clap_exit(&err),
    };
    leasehold_cli::init_tracing();
    // A bench worker is one of hundreds of client processes on a 2-core machine: one thread.
    let mut builder = if matches!(cli.command, leasehold_cli::Command::BenchWorker(_)) {
        tokio::runtime::Builder::new_current_thread()
    } else {
        tokio::runtime::Builder::new_multi_thread()
    };
    let runtime = match builder.enable_all().build() {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("leasehold: cannot start the async runtime: {err}");
            return Exit::Software.into();
        }
    };
    runtime.block_on(leasehold_cli::run(cli))
}
