//! `leasehold release`: delete a lock if the token still holds it.

use leasehold::LockToken;
use serde::Serialize;

use crate::cli::ReleaseArgs;
use crate::output::emit;
use crate::primitive::Primitive;
use crate::settle::{Outcome, settle};
use crate::target::Servers;

#[derive(Serialize)]
struct Released<'a> {
    key: &'a str,
    token: &'a str,
    released: bool,
}

pub(crate) async fn run(servers: &Servers, args: ReleaseArgs) -> anyhow::Result<()> {
    let token = LockToken::new(args.token)?;
    let locker = servers.connect().await?;
    let primitive = Primitive::of(&locker, &args.key, &args.primitive)?;
    let released = primitive.release(&token, args.fair).await;
    // Also when not held: a minority of Redlock nodes may still have held the token.
    settle(&locker, servers, &args.key, &token, Outcome::Released).await;
    released?;
    let result = Released {
        key: &args.key,
        token: token.expose(),
        released: true,
    };
    emit(
        args.output.json,
        &result,
        &format!("released {:?}", args.key),
    )
}
