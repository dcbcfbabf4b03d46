//! The hidden `check-worker` subcommand: one worker process of `leasehold check`. It loops
//! acquire -> read the register -> work -> write register+1 (fenced) -> release, and logs every
//! step as a JSON line stamped with the machine-wide monotonic clock (so the coordinator can
//! order the events of all processes).

use std::io::Write;
use std::time::Duration;

use anyhow::Context;
use leasehold::{Fence, FencedRead, FencedStore, LockClient, LockOptions};
use serde_json::json;

use crate::cli::CheckWorkerArgs;

/// Milliseconds on CLOCK_MONOTONIC, shared by every process of the machine.
pub(crate) fn now_ms() -> f64 {
    use nix::time::{ClockId, clock_gettime};
    clock_gettime(ClockId::CLOCK_MONOTONIC)
        .map(|t| t.tv_sec() as f64 * 1000.0 + t.tv_nsec() as f64 / 1e6)
        .unwrap_or(0.0)
}

struct Log(std::fs::File);

impl Log {
    fn event(&mut self, value: serde_json::Value) -> anyhow::Result<()> {
        // One write per line, unbuffered: a worker killed with -9 leaves a whole log behind.
        let line = format!("{value}\n");
        self.0
            .write_all(line.as_bytes())
            .context("cannot write the worker log")
    }
}

pub(crate) async fn run(args: CheckWorkerArgs) -> anyhow::Result<()> {
    let client = LockClient::connect(&args.lock_url).await?;
    let register = redis::Client::open(args.register_url.as_str())?
        .get_connection_manager()
        .await?;
    let store = FencedStore::new(register.clone());
    let mut log = Log(std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&args.log)
        .context("cannot open the worker log")?);
    let w = args.id;
    let opts = LockOptions::new(args.ttl)
        .fencing(true)
        .wait(Duration::from_secs(3600));
    while !args.stop_file.exists() {
        let asked = now_ms();
        let guard = client.acquire(&args.key, &opts).await?;
        let fence = guard.fencing_token().unwrap_or(0);
        log.event(
            json!({"ev": "acquired", "w": w, "t": now_ms(), "asked": asked, "fence": fence}),
        )?;
        // Who holds which token, for the coordinator's fault injection.
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&args.holders)?
            .write_all(
                format!("{} {w} {}\n", guard.token().expose(), std::process::id()).as_bytes(),
            )?;

        let parse = |b: &[u8]| String::from_utf8_lossy(b).parse::<u64>().unwrap_or(0);
        let fence_of_guard = Fence::new(fence, guard.token().clone());
        let value = if args.no_fencing {
            store
                .read(&args.register_key)
                .await?
                .map_or(0, |v| parse(&v.value))
        } else {
            // Claim the number at first contact, so a superseded holder's write is refused.
            match store
                .read_fenced(&args.register_key, &fence_of_guard)
                .await?
            {
                FencedRead::Accepted(v) => v.as_deref().map_or(0, parse),
                FencedRead::Rejected { highest } => {
                    log.event(json!({"ev": "read", "w": w, "t": now_ms(), "rejected": true, "highest": highest}))?;
                    let held = guard.release().await.is_ok();
                    log.event(json!({"ev": "released", "w": w, "t": now_ms(), "held": held}))?;
                    continue;
                }
            }
        };
        log.event(json!({"ev": "read", "w": w, "t": now_ms(), "value": value}))?;
        tokio::time::sleep(args.work).await;

        let accepted = if args.no_fencing {
            let mut conn = register.clone();
            let _: i64 = redis::cmd("HSET")
                .arg(&args.register_key)
                .arg("value")
                .arg(value + 1)
                .query_async(&mut conn)
                .await?;
            true
        } else {
            store
                .write(&args.register_key, &fence_of_guard, value + 1)
                .await?
                .is_accepted()
        };
        log.event(json!({"ev": "write", "w": w, "t": now_ms(), "value": value + 1, "fence": fence, "accepted": accepted}))?;

        let held = if args.release_del {
            // The seed's bug, on purpose: a plain DEL, whoever holds the key now.
            let mut conn = client.connection();
            let _: i64 = redis::cmd("DEL")
                .arg(&args.key)
                .query_async(&mut conn)
                .await?;
            let _ = guard.detach();
            true
        } else {
            guard.release().await.is_ok()
        };
        log.event(json!({"ev": "released", "w": w, "t": now_ms(), "held": held}))?;
    }
    Ok(())
}
