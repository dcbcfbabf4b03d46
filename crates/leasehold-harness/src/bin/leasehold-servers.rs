//! Prints the servers the test harness would use, one per line:
//! `flavor<TAB>label<TAB>path`, e.g. `redis8`, `redis 8.6.3`, `/root/.cache/.../redis-server`.
//!
//! * no arguments: one line per matrix flavor; a missing flavor prints `-` as label and path
//!   and makes the exit status 1;
//! * `--all`: every discovered binary, newest first; `-` as flavor if it fills no slot.

#![forbid(unsafe_code)]

use std::process::ExitCode;

use leasehold_harness::{Flavor, discover, find};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args
        .iter()
        .map(String::as_str)
        .collect::<Vec<_>>()
        .as_slice()
    {
        [] => {
            let mut status = ExitCode::SUCCESS;
            for flavor in Flavor::all() {
                match find(flavor) {
                    Some(bin) => println!("{flavor}\t{}\t{}", bin.label(), bin.server.display()),
                    None => {
                        println!("{flavor}\t-\t-");
                        status = ExitCode::FAILURE;
                    }
                }
            }
            status
        }
        ["--all"] => {
            for bin in discover() {
                let flavor = bin.flavor().map_or("-", |f| f.name());
                println!("{flavor}\t{}\t{}", bin.label(), bin.server.display());
            }
            ExitCode::SUCCESS
        }
        _ => {
            eprintln!("usage: leasehold-servers [--all]");
            ExitCode::from(2)
        }
    }
}
