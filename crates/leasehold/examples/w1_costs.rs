//! What owner records and the lock history cost in W1 (one client, an uncontended
//! try_acquire + release loop on distinct keys): plain, with an owner record, and with history
//! on, side by side on one server.
//!
//! Starts its own Redis 8 from the server matrix (`scripts/install-servers`), or uses the URL
//! given; the variants take turns, round by round (the order rotates), so that a slower phase
//! of a shared machine weighs on each:
//!
//! ```sh
//! cargo run --release -p leasehold --example w1_costs -- [URL] [ROUNDS] [CYCLES]
//! ```
//!
//! Prints each round's ops/s, then each variant's median and its ratio to plain.

use std::time::{Duration, Instant};

use leasehold::{ClientOptions, HistoryOptions, LockOptions, Locker, Owner};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let url = args.next().filter(|a| a.contains("://"));
    let rounds: usize = args.next().map_or(Ok(6), |a| a.parse())?;
    let cycles: u64 = args.next().map_or(Ok(5_000), |a| a.parse())?;
    // The server lives until the end of `main`.
    let (url, _server) = match url {
        Some(url) => (url, None),
        None => {
            let bin = leasehold_harness::find(leasehold_harness::Flavor::Redis8)
                .ok_or("no redis8: run scripts/install-servers")?;
            let server =
                leasehold_harness::Server::start(&bin, &leasehold_harness::ServerOptions::new())?;
            (server.url(), Some(server))
        }
    };
    let plain = Locker::connect(&url).await?;
    let recording =
        Locker::connect_with(&url, ClientOptions::new().history(HistoryOptions::new())).await?;
    let owner = Owner::this_process().label("w1")?;
    let variants = [
        ("plain", &plain, LockOptions::new(Duration::from_secs(10))),
        (
            "owner",
            &plain,
            LockOptions::new(Duration::from_secs(10)).owner(owner),
        ),
        (
            "history",
            &recording,
            LockOptions::new(Duration::from_secs(10)),
        ),
    ];
    let mut rates = vec![Vec::new(); variants.len()];
    for round in 0..rounds {
        for turn in 0..variants.len() {
            let v = (round + turn) % variants.len();
            let (name, locker, options) = &variants[v];
            let rate = w1(locker, options, cycles, &format!("w1:{round}:{name}")).await?;
            println!("round {round} {name:<8} {rate:.0} ops/s");
            rates[v].push(rate);
        }
    }
    let plain_median = median(&mut rates[0]);
    for (v, (name, _, _)) in variants.iter().enumerate() {
        let m = median(&mut rates[v]);
        println!(
            "W1 median over {rounds} rounds of {cycles} cycles: {name:<8} {m:.0} ops/s, \
             {name}/plain = {:.2}",
            m / plain_median
        );
    }
    Ok(())
}

/// `cycles` try_acquire + release on distinct keys (after 200 warm-up cycles), in ops/s.
async fn w1(
    locker: &Locker,
    options: &LockOptions,
    cycles: u64,
    prefix: &str,
) -> leasehold::Result<f64> {
    for i in 0..200 {
        cycle(locker, options, &format!("{prefix}:warm:{i}")).await?;
    }
    let began = Instant::now();
    for i in 0..cycles {
        cycle(locker, options, &format!("{prefix}:{i}")).await?;
    }
    Ok(cycles as f64 / began.elapsed().as_secs_f64())
}

/// One try_acquire + release of the free `key`.
async fn cycle(locker: &Locker, options: &LockOptions, key: &str) -> leasehold::Result<()> {
    let guard = locker.try_acquire(key, options).await?;
    guard
        .acquired()
        .expect("a distinct key is free")
        .release()
        .await
}

fn median(rates: &mut [f64]) -> f64 {
    rates.sort_by(f64::total_cmp);
    let n = rates.len();
    if n % 2 == 1 {
        rates[n / 2]
    } else {
        (rates[n / 2 - 1] + rates[n / 2]) / 2.0
    }
}
