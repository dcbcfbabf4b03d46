//! Every integration test of `leasehold-lab` in one binary (as leasehold-cli's suite): the
//! demo, the safety checker and the benchmark's worker, which moved here from the `leasehold`
//! command's suite with the subcommands.

mod bench;
mod check;
mod demo;
// The same helpers as the `leasehold` command's tests, running this crate's binary.
#[path = "../../leasehold-cli/tests/support/mod.rs"]
mod support;

/// The binary under test.
const BIN: &str = env!("CARGO_BIN_EXE_leasehold-lab");
