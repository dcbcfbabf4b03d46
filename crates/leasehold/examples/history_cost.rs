//! What recording the lock history costs in W1 (one client, an uncontended try_acquire +
//! release loop on distinct keys), history off against on, side by side on one server.
//!
//! Starts its own Redis 8 from the server matrix (`scripts/install-servers`), or uses the URL
//! given; the two variants take turns, round by round (the order alternates), so that a
//! slower phase of a shared machine weighs on both:
//!
//! ```sh
//! cargo run --release -p leasehold --example history_cost -- [URL] [ROUNDS] [CYCLES]
//! ```
//!
//! Prints each round's ops/s, then the medians and their ratio (on / off).

use std::time::{Duration, Instant};

use leasehold::{ClientOptions, HistoryOptions, LockOptions, Locker};

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
    let off = Locker::connect(&url).await?;
    let on =
        Locker::connect_with(&url, ClientOptions::new().history(HistoryOptions::new())).await?;
    let (mut off_rates, mut on_rates) = (Vec::new(), Vec::new());
    for round in 0..rounds {
        let order = if round % 2 == 0 {
            [false, true]
        } else {
            [true, false]
        };
        for recording in order {
            let locker = if recording { &on } else { &off };
            let rate = w1(locker, cycles, &format!("hc:{round}:{recording}")).await?;
            println!(
                "round {round} history {}: {rate:.0} ops/s",
                if recording { "on " } else { "off" }
            );
            if recording {
                on_rates.push(rate)
            } else {
                off_rates.push(rate)
            }
        }
    }
    let (off_median, on_median) = (median(&mut off_rates), median(&mut on_rates));
    println!(
        "W1 median over {rounds} rounds of {cycles} cycles: off {off_median:.0} ops/s, on \
         {on_median:.0} ops/s, on/off = {:.2}",
        on_median / off_median
    );
    Ok(())
}

/// `cycles` try_acquire + release on distinct keys (after 200 warm-up cycles), in ops/s.
async fn w1(locker: &Locker, cycles: u64, prefix: &str) -> leasehold::Result<f64> {
    for i in 0..200 {
        cycle(locker, &format!("{prefix}:warm:{i}")).await?;
    }
    let began = Instant::now();
    for i in 0..cycles {
        cycle(locker, &format!("{prefix}:{i}")).await?;
    }
    Ok(cycles as f64 / began.elapsed().as_secs_f64())
}

/// One try_acquire + release of the free `key`.
async fn cycle(locker: &Locker, key: &str) -> leasehold::Result<()> {
    let options = LockOptions::new(Duration::from_secs(10));
    let guard = locker.try_acquire(key, &options).await?;
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
