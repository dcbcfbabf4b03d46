//! `leasehold inspect`: who holds a lock, for how long, and its fencing counter.

use serde::Serialize;

use crate::cli::InspectArgs;
use crate::output::{emit, human, millis};
use crate::target::Target;

#[derive(Serialize)]
struct Inspected<'a> {
    key: &'a str,
    held: bool,
    /// The holder's token (`null` when the lock is free).
    token: Option<&'a str>,
    /// The last fencing number issued for the key, if fencing was ever used on it.
    #[serde(skip_serializing_if = "Option::is_none")]
    fencing_token: Option<u64>,
    /// The remaining TTL (`null` when the key is absent or never expires).
    ttl_ms: Option<u64>,
}

pub(crate) async fn run(target: &Target, args: InspectArgs) -> anyhow::Result<()> {
    let client = target.connect().await?;
    let state = client.inspect(&args.key).await?;
    let result = Inspected {
        key: &state.key,
        held: state.holder.is_some(),
        token: state.holder.as_deref(),
        fencing_token: state.fencing_counter,
        ttl_ms: state.ttl.map(millis),
    };
    let holder = state
        .holder
        .as_deref()
        .unwrap_or("(none: the lock is free)");
    let ttl = match (&state.holder, state.ttl) {
        (_, Some(ttl)) => human(ttl),
        (Some(_), None) => "(none: the key never expires; it was not set by a lock)".into(),
        (None, None) => "-".into(),
    };
    let fencing = state
        .fencing_counter
        .map_or_else(|| "(never used)".to_string(), |n| n.to_string());
    let text = format!(
        "key: {}\nholder: {holder}\nttl: {ttl}\nfencing counter: {fencing}",
        state.key
    );
    emit(args.output.json, &result, &text)
}
