//! `leasehold release`: delete a lock if the token still holds it.

use leasehold::LockToken;
use serde::Serialize;

use crate::cli::ReleaseArgs;
use crate::output::emit;
use crate::target::Target;

#[derive(Serialize)]
struct Released<'a> {
    key: &'a str,
    token: &'a str,
    released: bool,
}

pub(crate) async fn run(target: &Target, args: ReleaseArgs) -> anyhow::Result<()> {
    let token = LockToken::new(args.token)?;
    let client = target.connect().await?;
    client.release(&args.key, &token).await?;
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
