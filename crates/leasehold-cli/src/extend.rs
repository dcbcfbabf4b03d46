//! `leasehold extend`: reset a lock's TTL if the token still holds it.

use std::time::Instant;

use leasehold::LockToken;
use serde::Serialize;

use crate::cli::ExtendArgs;
use crate::output::{emit, human, millis};
use crate::primitive::Primitive;
use crate::settle::{Outcome, settle};
use crate::target::Servers;

#[derive(Serialize)]
struct Extended<'a> {
    key: &'a str,
    token: &'a str,
    ttl_ms: u64,
}

pub(crate) async fn run(servers: &Servers, args: ExtendArgs) -> anyhow::Result<()> {
    let token = LockToken::new(args.token)?;
    let locker = servers.connect().await?;
    let sent = Instant::now();
    Primitive::of(&locker, &args.key, &args.primitive)?
        .extend(&token, args.ttl)
        .await?;
    let outcome = Outcome::Extended {
        ttl: args.ttl,
        sent,
    };
    settle(&locker, servers, &args.key, &token, outcome).await;
    let result = Extended {
        key: &args.key,
        token: token.expose(),
        ttl_ms: millis(args.ttl),
    };
    let text = format!("extended {:?}: expires in {}", args.key, human(args.ttl));
    emit(args.output.json, &result, &text)
}
