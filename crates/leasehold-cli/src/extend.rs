//! `leasehold extend`: reset a lock's TTL if the token still holds it.

use leasehold::LockToken;
use serde::Serialize;

use crate::cli::ExtendArgs;
use crate::output::{emit, human, millis};
use crate::target::Target;

#[derive(Serialize)]
struct Extended<'a> {
    key: &'a str,
    token: &'a str,
    ttl_ms: u64,
}

pub(crate) async fn run(target: &Target, args: ExtendArgs) -> anyhow::Result<()> {
    let token = LockToken::new(args.token)?;
    let client = target.connect().await?;
    client.extend(&args.key, &token, args.ttl).await?;
    let result = Extended {
        key: &args.key,
        token: token.expose(),
        ttl_ms: millis(args.ttl),
    };
    let text = format!("extended {:?}: expires in {}", args.key, human(args.ttl));
    emit(args.output.json, &result, &text)
}
