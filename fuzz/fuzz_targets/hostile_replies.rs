//! libFuzzer drives the hostile RESP server: its input is the script of the server's choices
//! (the first byte: how many replies are honest, and with its high bit, RESP3; each further
//! byte picks one reply, or one detail of it), and the client must come through as in `tests/hostile_server.rs`, whose
//! checks this target shares (`crates/leasehold/tests/hostile/mod.rs`).
#![no_main]

use std::sync::LazyLock;
use std::time::Duration;

use leasehold_harness::{HostileOptions, HostileServer};
use libfuzzer_sys::fuzz_target;

#[path = "../../crates/leasehold/tests/hostile/mod.rs"]
mod hostile;

/// The client's timeouts: shorter than the test suite's, for more inputs a second.
const TIMEOUT: Duration = Duration::from_millis(50);

static RUNTIME: LazyLock<tokio::runtime::Runtime> = LazyLock::new(|| {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime")
});

fuzz_target!(|data: &[u8]| {
    let Some((&honest, script)) = data.split_first() else {
        return;
    };
    let options = HostileOptions::new(0)
        .honest_percent(u32::from(honest) % 101)
        .slow(TIMEOUT * 3 / 2)
        .script(script);
    let server = HostileServer::start(options).expect("a free loopback port");
    let mut stats = hostile::Stats::default();
    // The first byte's high bit: over RESP3.
    let resp3 = honest & 0x80 != 0;
    let session = hostile::drive(&server, TIMEOUT, 1, resp3, &mut stats);
    if let Err(failure) = RUNTIME.block_on(session) {
        let log: Vec<String> = server.log().iter().map(|e| format!("  {e}")).collect();
        panic!("{failure}\nthe server's log:\n{}", log.join("\n"));
    }
});
