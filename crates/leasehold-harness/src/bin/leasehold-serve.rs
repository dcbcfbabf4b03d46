//! Starts one server through the harness for tests in other languages (the Python package's
//! pytest suite), prints its URL on stdout, and stops it when stdin closes (so a test runner
//! that dies takes its servers with it).
//!
//! ```text
//! leasehold-serve redis7|redis8|valkey9|etcd|postgres
//! ```
//!
//! Exit status 3 if that server is not installed (`scripts/install-servers` installs it), 1 if
//! it failed to start, 2 for a usage error.

#![forbid(unsafe_code)]

use std::io::{Read, Write};
use std::process::ExitCode;

use leasehold_harness::{
    Etcd, Flavor, Postgres, Server, ServerOptions, find, find_etcd, find_postgres,
};

/// A started server; dropping it stops it.
enum Running {
    Redis(Server),
    Etcd(Etcd),
    Postgres(Postgres),
}

impl Running {
    fn url(&self) -> String {
        match self {
            Running::Redis(s) => s.url(),
            Running::Etcd(e) => format!("etcd://127.0.0.1:{}", e.port()),
            Running::Postgres(p) => p.url(),
        }
    }
}

fn start(name: &str) -> Result<Running, (u8, String)> {
    let failed = |e: leasehold_harness::HarnessError| (1, format!("cannot start {name}: {e}"));
    let missing = || {
        (
            3,
            format!("{name} is not installed (run scripts/install-servers)"),
        )
    };
    match name {
        "etcd" => {
            find_etcd().ok_or_else(missing)?;
            Etcd::start().map(Running::Etcd).map_err(failed)
        }
        "postgres" => {
            find_postgres().ok_or_else(missing)?;
            Postgres::start().map(Running::Postgres).map_err(failed)
        }
        _ => {
            let flavor: Flavor = name.parse().map_err(|_| {
                (
                    2,
                    format!("unknown server {name:?}: redis7, redis8, valkey9, etcd or postgres"),
                )
            })?;
            let bin = find(flavor).ok_or_else(missing)?;
            Server::start(&bin, &ServerOptions::new())
                .map(Running::Redis)
                .map_err(failed)
        }
    }
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [name] = args.as_slice() else {
        eprintln!("usage: leasehold-serve redis7|redis8|valkey9|etcd|postgres");
        return ExitCode::from(2);
    };
    let running = match start(name) {
        Ok(r) => r,
        Err((code, message)) => {
            eprintln!("leasehold-serve: {message}");
            return ExitCode::from(code);
        }
    };
    let mut out = std::io::stdout();
    if writeln!(out, "{}", running.url())
        .and_then(|_| out.flush())
        .is_err()
    {
        return ExitCode::FAILURE;
    }
    // Until stdin closes (EOF or error): the caller is done, or gone.
    let mut sink = [0u8; 64];
    while matches!(std::io::stdin().read(&mut sink), Ok(n) if n > 0) {}
    drop(running);
    ExitCode::SUCCESS
}
