//! Every integration test of this crate in one binary: one link instead of one per file, and
//! one pool of test threads, so that a file's slowest tests overlap the next file's instead
//! of running after them (each file was its own binary, run one after another).

mod backends;
mod commands;
mod history;
mod local;
mod lock_table;
mod min_hold;
mod misuse;
mod primitives_etcd;
mod primitives_postgres;
mod redlock;
mod run;
mod short_ttl;
mod support;
mod tls_backends;
mod topologies;

/// The binary under test.
const BIN: &str = env!("CARGO_BIN_EXE_leasehold");
