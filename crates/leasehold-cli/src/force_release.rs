//! `leasehold force-release`: removes a stuck lock, bumps its fencing counter, says who and why.

use serde::Serialize;

use crate::cli::ForceReleaseArgs;
use crate::ls::OwnerJson;
use crate::output::{emit, say};
use crate::target::Servers;

#[derive(Serialize)]
struct Forced<'a> {
    key: &'a str,
    /// The removed holder's token, redacted.
    previous_holder: String,
    previous_owner: Option<OwnerJson>,
    /// The counter after the bump: every later fencing number is above it.
    fencing_counter: Option<u64>,
    forced_by: OwnerJson,
    reason: &'a str,
}

pub(crate) async fn run(servers: &Servers, args: ForceReleaseArgs) -> anyhow::Result<()> {
    let locker = servers.connect().await?;
    let forced = locker.force_release(&args.key, &args.reason).await?;
    let previous_owner = forced
        .previous
        .owner
        .as_ref()
        .map_or_else(|| "(no owner record)".to_string(), ToString::to_string);
    // On stderr whatever the format: an operator's action leaves a trace where logs go.
    say(format_args!(
        "leasehold: force-released {:?} (holder {} {previous_owner}) by {}: {}",
        forced.key, forced.previous.token, forced.forced_by, forced.reason
    ));
    let counter = forced
        .fencing_counter
        .map_or_else(|| "(not a per-key counter)".to_string(), |n| n.to_string());
    let text = format!(
        "released: {}\nprevious holder: {} {previous_owner}\nfencing counter: {counter}\nforced by: {}\nreason: {}",
        forced.key, forced.previous.token, forced.forced_by, forced.reason
    );
    let result = Forced {
        key: &forced.key,
        previous_holder: forced.previous.token.redacted(),
        previous_owner: forced.previous.owner.as_ref().map(OwnerJson::of),
        fencing_counter: forced.fencing_counter,
        forced_by: OwnerJson::of(&forced.forced_by),
        reason: &forced.reason,
    };
    emit(args.output.json, &result, &text)
}
