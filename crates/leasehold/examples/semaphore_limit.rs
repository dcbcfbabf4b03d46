//! A counting semaphore: at most N of many workers at once, across every process.
//!
//! Eight workers (tasks here; they could as well be processes on different machines) each
//! want to do one upload; the semaphore lets at most three hold a permit at the same time.
//! Each permit is a lease of its own, auto-extended while its worker runs and released when
//! it ends; a waiting worker gets a permit as soon as one is released.
//!
//! Against a local Redis or Valkey (any URL [`leasehold::Locker`] knows whose backend has
//! semaphores works, e.g. `etcd://` or `postgres://` with those features):
//!
//! ```sh
//! cargo run -p leasehold --example semaphore_limit -- redis://127.0.0.1:6379/
//! ```
//!
//! Each line says how many permits the server counted when a worker got its permit (never
//! more than three). Exit status 0 when every worker ran, 1 on an error (e.g. no server at
//! the URL).

use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use leasehold::{LockOptions, Locker};

const PERMITS: u32 = 3;
const WORKERS: u32 = 8;

#[tokio::main]
async fn main() -> ExitCode {
    let url = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "redis://127.0.0.1:6379/".to_string());
    match run(&url).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("semaphore_limit: {url}: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn run(url: &str) -> Result<(), leasehold::Error> {
    let locks = Locker::connect(url).await?;
    println!("connected to {url} ({} backend)", locks.backend());
    // Every client of "examples:uploads" must use the same number of permits.
    let uploads = locks.semaphore("examples:uploads", PERMITS)?;
    let options = LockOptions::new(Duration::from_secs(10))
        .auto_extend(true)
        .wait(Duration::from_secs(60));
    let most_at_once = Arc::new(AtomicU32::new(0));

    let mut workers = Vec::new();
    for worker in 0..WORKERS {
        let uploads = uploads.clone();
        let counter = uploads.clone();
        let options = options.clone();
        let most_at_once = Arc::clone(&most_at_once);
        workers.push(tokio::spawn(async move {
            uploads
                .with_permit(&options, |permit| async move {
                    let held = counter.holders().await?; // counted by the server
                    most_at_once.fetch_max(held, Ordering::Relaxed);
                    println!("worker {worker}: permit acquired, {held} of {PERMITS} held now");
                    tokio::time::sleep(Duration::from_millis(500)).await; // the upload
                    if !permit.is_held() {
                        println!("worker {worker}: the permit was lost during the upload");
                    }
                    Ok::<_, leasehold::Error>(())
                })
                .await?
        }));
    }
    for worker in workers {
        worker.await.expect("a worker panicked")?;
    }
    println!(
        "all {WORKERS} workers done; at most {} of {PERMITS} permits held at once",
        most_at_once.load(Ordering::Relaxed)
    );
    Ok(())
}
