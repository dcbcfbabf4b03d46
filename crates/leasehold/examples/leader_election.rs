//! Leader election: campaign, observe the leader, resign.
//!
//! Every process campaigns on the same election name; one leads at a time. Leadership is a
//! lock kept alive automatically, and its fencing number is the term (strictly increasing from
//! leader to leader), so a resource that refuses lower terms refuses a deposed leader. Any
//! process can watch who leads without campaigning.
//!
//! Against a local Redis or Valkey (any URL [`leasehold::Locker`] knows whose backend has
//! elections works, e.g. `etcd://` or `postgres://` with those features):
//!
//! ```sh
//! cargo run -p leasehold --example leader_election -- redis://127.0.0.1:6379/ [ID] [SECONDS]
//! ```
//!
//! Start it in two terminals: the first leads for SECONDS (default 10) and resigns, and the
//! second, which waited meanwhile, takes over in the next term. Exit status 0 after resigning,
//! 1 on an error (e.g. no server at the URL) or when leadership was lost.

use std::process::ExitCode;
use std::time::Duration;

use leasehold::{LockOptions, Locker};

#[tokio::main]
async fn main() -> ExitCode {
    let mut args = std::env::args().skip(1);
    let url = args
        .next()
        .unwrap_or_else(|| "redis://127.0.0.1:6379/".to_string());
    let id = args
        .next()
        .unwrap_or_else(|| format!("pid-{}", std::process::id()));
    let lead_for = args
        .next()
        .and_then(|s| s.parse().ok())
        .map_or(Duration::from_secs(10), Duration::from_secs);
    match run(&url, &id, lead_for).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("leader_election: {url}: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn run(url: &str, id: &str, lead_for: Duration) -> Result<(), Box<dyn std::error::Error>> {
    let locks = Locker::connect(url).await?;
    println!("connected to {url} ({} backend)", locks.backend());
    let election = locks.election("examples:scheduler")?;

    // Observe: who leads now, then every change of leader, in the background.
    println!("current leader: {:?}", election.leader().await?);
    let mut watch = election.watch(Duration::from_secs(1));
    let observer = tokio::spawn(async move {
        while let Ok(leader) = watch.changed().await {
            match leader {
                Some(l) => println!("  [watch] {} leads in term {}", l.id, l.term),
                None => println!("  [watch] nobody leads"),
            }
        }
    });

    // Campaign: waits until this process leads, for as long as it takes.
    println!("{id} campaigns");
    let leadership = election
        .campaign(id, &LockOptions::new(Duration::from_secs(5)))
        .await?;
    let term = leadership.fencing_token().expect("every term has a number");
    println!(
        "{id} leads in term {term}; the server says {:?}",
        election.leader().await?
    );

    // Lead until the time is up, unless deposed first (stalled past the lease, key taken).
    tokio::select! {
        _ = leadership.lost() => {
            observer.abort();
            let reason = leadership.loss_reason().map(|r| r.to_string());
            return Err(format!("deposed during term {term}: {}", reason.unwrap_or_default()).into());
        }
        _ = tokio::time::sleep(lead_for) => {}
    }

    // Resign: release the leadership so that another candidate takes over at once.
    leadership.release().await?;
    println!("{id} resigned after term {term}");
    tokio::time::sleep(Duration::from_millis(500)).await; // let the watch report the change
    observer.abort();
    Ok(())
}
