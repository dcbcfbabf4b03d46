//! `leasehold acquire`: take a lock that outlives the command.

use leasehold::{Backend, LockOptions, Locker, TryAcquire};
use serde::Serialize;

use crate::cli::AcquireArgs;
use crate::exit::{Busy, Usage};
use crate::output::{emit, millis};
use crate::primitive::Primitive;
use crate::settle::{Outcome, settle};
use crate::target::Servers;

#[derive(Serialize)]
struct Acquired<'a> {
    key: &'a str,
    token: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    fencing_token: Option<u64>,
    ttl_ms: u64,
}

pub(crate) async fn run(servers: &Servers, args: AcquireArgs) -> anyhow::Result<()> {
    let locker = servers.connect().await?;
    acquire(&locker, servers, args).await
}

async fn acquire(locker: &Locker, servers: &Servers, args: AcquireArgs) -> anyhow::Result<()> {
    if locker.kind() == Backend::Postgres {
        // A session lock ends with its session, which ends with this process.
        return Err(Usage(
            "a PostgreSQL lock lives as long as its session, so it cannot outlive this command: \
             use `leasehold run` to hold it while a command runs"
                .into(),
        )
        .into());
    }
    if locker.kind() == Backend::File {
        // Only the process holding a flock can drop it, and it ends when that process does.
        return Err(Usage(
            "a file:// lock is held by the process that took it and ends when it exits, so it \
             cannot outlive this command: use `leasehold run` to hold it while a command runs"
                .into(),
        )
        .into());
    }
    let options = args.owner.apply(
        LockOptions::new(args.ttl)
            .fencing(args.fencing)
            .fair(args.fair),
        None,
    );
    let primitive = Primitive::of(locker, &args.key, &args.primitive)?;
    let guard = match args.wait {
        Some(wait) => primitive.acquire(&options.wait(wait)).await?,
        None => match primitive.try_acquire(&options).await? {
            TryAcquire::Acquired(guard) => guard,
            TryAcquire::Busy { remaining } => {
                return Err(Busy {
                    key: args.key,
                    remaining,
                }
                .into());
            }
        },
    };
    let token = guard.token().expose().to_string();
    let mut text = token.clone();
    if let Some(n) = guard.fencing_token() {
        text.push_str(&format!("\n{n}"));
    }
    let result = Acquired {
        key: &args.key,
        token: &token,
        fencing_token: guard.fencing_token(),
        ttl_ms: millis(args.ttl),
    };
    if let Err(err) = emit(args.output.json, &result, &text) {
        // Nobody learned the token: give the lock back instead of blocking others for a TTL.
        let _ = guard.release().await;
        return Err(err);
    }
    // The lock must outlive this process: whoever has the token releases it (or the TTL does).
    let lease = guard.detach();
    settle(
        locker,
        servers,
        lease.key(),
        lease.token(),
        Outcome::Acquired,
    )
    .await;
    Ok(())
}
