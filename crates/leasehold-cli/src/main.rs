//! The `leasehold` command. Everything lives in the `leasehold_cli` library; this only parses the
//! arguments, sets up logging and the runtime, and turns the outcome into an exit status.

#![forbid(unsafe_code)]

use std::process::ExitCode;

use leasehold_cli::Cli;

fn main() -> ExitCode {
    match leasehold_cli::start::<Cli>(|_| false) {
        Ok((cli, runtime)) => runtime.block_on(leasehold_cli::run(cli)),
        Err(code) => code,
    }
}
