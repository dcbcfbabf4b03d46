//! `leasehold inspect`: who holds a lock, for how long, and its fencing counter (Redlock: on
//! each node, and whether a majority agrees).

use leasehold::redlock::Redlock;
use leasehold::{HistoryEvent, LockState, NodeOutcome};
use serde::Serialize;

use crate::cli::InspectArgs;
use crate::exit::NoMajority;
use crate::output::{emit, human, millis};
use crate::target::Servers;

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
    /// The holder's owner record (`null` when free or taken without one).
    owner: Option<crate::ls::OwnerJson>,
    /// `--history`: the newest events, newest first.
    #[serde(skip_serializing_if = "Option::is_none")]
    history: Option<Vec<Event<'a>>>,
}

impl<'a> Inspected<'a> {
    fn of(state: &'a LockState) -> Self {
        Inspected {
            key: &state.key,
            held: state.holder.is_some(),
            token: state.holder.as_deref(),
            fencing_token: state.fencing_counter,
            ttl_ms: state.ttl.map(millis),
            owner: state.owner.as_ref().map(crate::ls::OwnerJson::of),
            history: None,
        }
    }
}

/// `inspect` over a Redlock set.
#[derive(Serialize)]
struct InspectedNodes<'a> {
    key: &'a str,
    /// A majority of all the nodes hold the same token.
    held: bool,
    /// That token.
    token: Option<&'a str>,
    nodes: Vec<NodeState<'a>>,
}

/// One node's state (the single-server fields), or why it has none.
#[derive(Serialize)]
struct NodeState<'a> {
    node: &'a str,
    #[serde(flatten)]
    state: Option<Inspected<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
}

pub(crate) async fn run(servers: &Servers, args: InspectArgs) -> anyhow::Result<()> {
    let locker = servers.connect().await?;
    match locker.as_redlock() {
        Some(redlock) if args.history.is_none() => nodes(redlock, args).await,
        _ => {
            let history = match args.history {
                Some(limit) => Some(locker.history(&args.key, limit).await?),
                None => None,
            };
            single(locker.inspect(&args.key).await?, history, args)
        }
    }
}

fn single(
    state: LockState,
    history: Option<Vec<HistoryEvent>>,
    args: InspectArgs,
) -> anyhow::Result<()> {
    let mut result = Inspected::of(&state);
    let mut text = format!("key: {}\n{}", state.key, describe(&state, "\n"));
    if let Some(events) = &history {
        result.history = Some(events.iter().map(Event::of).collect());
        text.push_str(&history_table(events));
    }
    emit(args.output.json, &result, &text)
}

/// One history event, as `inspect --history --json` prints it.
#[derive(Serialize)]
struct Event<'a> {
    /// Milliseconds since the Unix epoch.
    at_ms: u64,
    event: &'static str,
    fencing_token: Option<u64>,
    holder: Option<&'a str>,
    owner: Option<&'a str>,
    detail: Option<&'a str>,
}

impl<'a> Event<'a> {
    fn of(e: &'a HistoryEvent) -> Self {
        Event {
            at_ms: e.at.duration_since(std::time::UNIX_EPOCH).map_or(0, millis),
            event: e.kind.as_str(),
            fencing_token: e.fencing,
            holder: e.holder.as_deref(),
            owner: e.owner.as_deref(),
            detail: e.detail.as_deref(),
        }
    }
}

/// The history as a table, newest first (a line saying so when there is none).
fn history_table(events: &[HistoryEvent]) -> String {
    if events.is_empty() {
        return "\nhistory: (none recorded: LEASEHOLD_HISTORY=1 records it)".into();
    }
    let mut text = format!(
        "\nhistory (newest first):\n  {:<24}  {:<11}  {:>8}  {:<9}  {}",
        "AT (UTC)", "EVENT", "FENCING", "HOLDER", "OWNER / DETAIL"
    );
    for e in events {
        let fencing = e.fencing.map_or_else(|| "-".into(), |n| n.to_string());
        let note = [e.owner.as_deref(), e.detail.as_deref()]
            .into_iter()
            .flatten()
            .collect::<Vec<_>>()
            .join(" / ");
        let line = format!(
            "\n  {:<24}  {:<11}  {:>8}  {:<9}  {note}",
            humantime::format_rfc3339_millis(e.at).to_string(),
            e.kind.as_str(),
            fencing,
            e.holder.as_deref().unwrap_or("-"),
        );
        text.push_str(line.trim_end());
    }
    text
}

async fn nodes(redlock: &Redlock, args: InspectArgs) -> anyhow::Result<()> {
    let key = args.key.as_str();
    let states: Vec<(String, Result<LockState, String>)> = redlock
        .inspect_nodes(key)
        .await
        .into_iter()
        .map(|(node, state)| (node, state.map_err(node_error)))
        .collect();
    let (total, quorum) = (states.len(), redlock.quorum());
    let answered = states.iter().filter(|(_, s)| s.is_ok()).count();
    if answered < quorum {
        return Err(NoMajority {
            what: format!("read lock {key:?} from"),
            needed: quorum,
            total,
            nodes: states
                .into_iter()
                .map(|(node, state)| (node, state.map_or_else(|e| e, |_| "answered".into())))
                .collect(),
        }
        .into());
    }
    // The token a majority of all the nodes hold, if there is one.
    let holders: Vec<&str> = states
        .iter()
        .filter_map(|(_, s)| s.as_ref().ok()?.holder.as_deref())
        .collect();
    let majority = holders
        .iter()
        .find(|t| holders.iter().filter(|u| u == t).count() >= quorum)
        .copied();
    let on = majority.map_or(0, |t| holders.iter().filter(|u| **u == t).count());

    let result = InspectedNodes {
        key,
        held: majority.is_some(),
        token: majority,
        nodes: states
            .iter()
            .map(|(node, state)| NodeState {
                node,
                state: state.as_ref().ok().map(Inspected::of),
                error: state.as_ref().err().cloned(),
            })
            .collect(),
    };
    let mut text = format!("key: {key}\n");
    match majority {
        Some(token) => text.push_str(&format!(
            "holder: {token} (on {on} of {total} nodes; a majority is {quorum})"
        )),
        None => text.push_str(&format!(
            "holder: (none: no token is held by a majority ({quorum}) of the {total} nodes)"
        )),
    }
    for (node, state) in &states {
        match state {
            Ok(state) => text.push_str(&format!("\n{node}: {}", describe(state, ", "))),
            Err(e) => text.push_str(&format!("\n{node}: error: {e}")),
        }
    }
    emit(args.output.json, &result, &text)
}

/// `holder: ...`, `ttl: ...`, `fencing counter: ...`, joined with `sep`.
fn describe(state: &LockState, sep: &str) -> String {
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
    let owner = match (&state.holder, &state.owner) {
        (_, Some(owner)) => format!("{sep}owner: {owner}"),
        (Some(_), None) => format!("{sep}owner: (no owner record)"),
        (None, None) => String::new(),
    };
    // The owner last: the lines before it keep their shape for scripts that read them.
    format!("holder: {holder}{sep}ttl: {ttl}{sep}fencing counter: {fencing}{owner}")
}

/// A node's error, as one phrase. (A node that did not answer within the per-node timeout comes
/// back as a one-node `NoQuorum`: its outcome says it all.)
fn node_error(err: leasehold::Error) -> String {
    match &err {
        leasehold::Error::NoQuorum { nodes, .. } if nodes.0.len() == 1 => {
            match &nodes.0[0].outcome {
                NodeOutcome::Failed(e) => e.clone(),
                outcome => outcome.to_string(),
            }
        }
        _ => err.to_string(),
    }
}
