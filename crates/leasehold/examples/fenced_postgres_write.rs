//! A PostgreSQL lock with fencing, and a fenced write to a row of your own table.
//!
//! The lock is a PostgreSQL session advisory lock (`postgres://` URL); its fencing number
//! comes from a per-key row, incremented in the statement that takes the lock. The protected
//! data is a row of an ordinary table with two extra columns (`fence`, `holder`):
//! [`leasehold::postgres::FencedRows`] applies an `UPDATE` only if the writer's number is not
//! below the one the row has seen. So a holder that stalled past its lease, and whose lock
//! went to someone else meanwhile, has its late write refused: the example shows one write
//! accepted, then a newer holder's, then the stale holder's refused.
//!
//! Needs the `postgres` feature, and a PostgreSQL server where the user may create a table:
//!
//! ```sh
//! cargo run -p leasehold --features postgres --example fenced_postgres_write -- \
//!     postgres://postgres@127.0.0.1/postgres
//! ```
//!
//! It creates (if missing) the table `leasehold_example_accounts`. Exit status 0 when the
//! fenced writes behaved as described, 1 on an error (e.g. no server at the URL).

use std::process::ExitCode;
use std::time::Duration;

use leasehold::postgres::FencedRows;
use leasehold::{Fence, FencedWrite, LockOptions, Locker};
use tokio_postgres::types::ToSql;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

const TABLE: &str = "leasehold_example_accounts";

#[tokio::main]
async fn main() -> ExitCode {
    let url = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "postgres://postgres@127.0.0.1/postgres".to_string());
    match run(&url).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("fenced_postgres_write: {url}: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn run(url: &str) -> Result<(), BoxError> {
    // The lock.
    let locks = Locker::connect(url).await?;
    println!("connected to {url} ({} backend)", locks.backend());

    // The protected data: a table of our own, on a connection of our own.
    let (pg, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls).await?;
    tokio::spawn(async move {
        if let Err(e) = connection.await {
            eprintln!("fenced_postgres_write: the data connection ended: {e}");
        }
    });
    let accounts = FencedRows::new(TABLE, "id");
    pg.batch_execute(&format!(
        "CREATE TABLE IF NOT EXISTS {TABLE} (id text PRIMARY KEY, balance bigint NOT NULL); \
         {}; \
         INSERT INTO {TABLE} (id, balance) VALUES ('alice', 0) ON CONFLICT (id) DO NOTHING",
        accounts.add_columns_sql()
    ))
    .await?;

    let options = LockOptions::new(Duration::from_secs(10))
        .fencing(true)
        .wait(Duration::from_secs(5));

    // One fenced write: add `amount` to alice's balance, unless a newer holder wrote first.
    let deposit = |fence: Fence, amount: i64| {
        let (pg, accounts) = (&pg, &accounts);
        async move {
            let params: [&(dyn ToSql + Sync); 2] = [&amount, &"alice"];
            accounts
                .update(pg, &fence, "balance = balance + $3", &params)
                .await
        }
    };

    // A first holder writes with its fence, and releases.
    let first = locks.acquire("accounts:alice", &options).await?;
    let stale = first.fence().expect("acquired with fencing on");
    println!("first holder: fencing number {}", stale.number());
    println!("  its write: {:?}", deposit(stale.clone(), 10).await?);
    first.release().await?;

    // A second holder gets a higher number, and writes.
    let second = locks.acquire("accounts:alice", &options).await?;
    let fence = second.fence().expect("acquired with fencing on");
    println!("second holder: fencing number {}", fence.number());
    println!("  its write: {:?}", deposit(fence.clone(), 10).await?);

    // The first holder, as if it had stalled past its lease and woken up now: refused.
    let late = deposit(stale, 1000).await?;
    println!("the first holder's late write: {late:?}");
    second.release().await?;

    let balance: i64 = pg
        .query_one(
            &format!("SELECT balance FROM {TABLE} WHERE id = 'alice'"),
            &[],
        )
        .await?
        .get(0);
    println!("alice's balance now: {balance}");
    match late {
        FencedWrite::Rejected { highest } if highest == fence.number() => Ok(()),
        other => Err(format!("expected the stale write to be refused, got {other:?}").into()),
    }
}
