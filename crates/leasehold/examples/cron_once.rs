//! A scheduled job that must not run twice at once, on any number of machines.
//!
//! Each run makes one attempt at the job's lock, with a TTL well beyond the job's longest run
//! (the lock must outlast the job, or a second run could start while the first still works).
//! A run that finds the lock held is skipped: busy is an outcome, not an error. The lock is
//! released when the job ends, so the next scheduled run finds it free.
//!
//! Against a local Redis or Valkey (any URL [`leasehold::Locker`] knows works, e.g. `etcd://`
//! or `postgres://` with those features):
//!
//! ```sh
//! cargo run -p leasehold --example cron_once -- redis://127.0.0.1:6379/
//! ```
//!
//! Start it twice within three seconds: the second run says it skipped. Exit status 0 when
//! the job ran or was skipped, 1 on an error (e.g. no server at the URL).

use std::process::ExitCode;
use std::time::Duration;

use leasehold::{LockOptions, Locker, TryAcquire};

/// How long the job takes (a stand-in for the real work).
const JOB: Duration = Duration::from_secs(3);
/// The lock's TTL: well beyond the job's longest run.
const TTL: Duration = Duration::from_secs(60);

#[tokio::main]
async fn main() -> ExitCode {
    let url = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "redis://127.0.0.1:6379/".to_string());
    match run(&url).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("cron_once: {url}: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn run(url: &str) -> Result<(), leasehold::Error> {
    let locks = Locker::connect(url).await?;
    println!("connected to {url} ({} backend)", locks.backend());
    let options = LockOptions::new(TTL).fencing(true);
    match locks.try_acquire("jobs:nightly-report", &options).await? {
        TryAcquire::Busy { remaining } => {
            println!("skipped: another run holds the lock (its lease ends in {remaining:?})");
        }
        TryAcquire::Acquired(guard) => {
            println!(
                "acquired {} (fencing number {:?}, lease valid for {:?}); running the job",
                guard.key(),
                guard.fencing_token(),
                guard.lease().remaining(),
            );
            tokio::time::sleep(JOB).await; // the job
            guard.release().await?; // Err(NotHeld) had the lease run out meanwhile
            println!("job done, lock released");
        }
    }
    Ok(())
}
