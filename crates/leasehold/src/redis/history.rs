//! The history log on Redis and Valkey: a stream per lock key, `{slot}:history` (see
//! [`history_key`]), in the key's hash slot, so it works the same on a standalone server, a
//! cluster (on the key's master) and a Sentinel-monitored primary.
//!
//! **Append** is one pipeline, one round trip: `XADD … MAXLEN cap *` with the event's fields,
//! `XTRIM … MINID ~ (now - retention)` and `PEXPIRE retention`. **Read** is `XREVRANGE … COUNT`.
//!
//! **Riding in the lock's own scripts.** A plain lock's acquisition and release by a client that
//! records history (not one taken with `min_hold`) append their event in the script that takes
//! or deletes the lock (`acquire_recorded.lua`, `release_recorded.lua`, with the same three
//! commands, the release leaving the retention's trim to the next acquisition): no round trip
//! of its own, and atomic with the operation, so the stream holds an
//! `acquired` event exactly when that acquisition was granted, and a `released` event exactly
//! when that release deleted the lock. A refused append (an ACL without `XADD`, a key of
//! another type in the stream's place) is returned beside the lock's reply and logged
//! (throttled), never raised: the lock operation has already written, and scripts do not roll
//! back. Losses, forced releases and fair or `min_hold` locks are appended by the client, as
//! below.
//!
//! **Guarantees.** After each append the stream holds at most `cap` events: the trim is exact
//! (`=`), not `~`, because `~` trims whole stream nodes of `stream-node-max-entries` (100 by
//! default) and so would keep up to `cap + 100` events; dropping one entry per append from the
//! oldest node is cheap. Events older than the retention (by the stream ids, which are the
//! server's clock, against this client's clock) go at the next append, a node at a time (`~`),
//! and the whole stream expires one retention after its last append. An event's time is the
//! server's: the millisecond part of its stream id.

use std::time::SystemTime;

use redis::Value;

use crate::core::error::{Error, Operation, Result};
use crate::core::history::{
    HistoryEvent, HistoryKind, HistoryOptions, from_unix_millis, unix_millis,
};
use crate::redis::slot::slot_name;

/// The stream that holds lock `key`'s history: [`slot_name`]`(key) + ":history"`.
pub fn history_key(key: &str) -> String {
    format!("{}:history", slot_name(key))
}

/// The fields of `event` that the stream stores: all but `at`, since the stream id is the
/// server's time.
pub(crate) fn stored_fields(event: &HistoryEvent) -> impl Iterator<Item = (&'static str, String)> {
    event.fields().into_iter().filter(|(n, _)| *n != "at")
}

/// The oldest stream id (ms) the retention keeps, by this client's clock.
pub(crate) fn oldest_kept(options: &HistoryOptions) -> u64 {
    SystemTime::now()
        .checked_sub(options.retention_period())
        .map_or(0, unix_millis)
}

/// The `ARGV` of a recorded script's append (`history_record.lua`): cap, oldest id kept,
/// retention ms, then `event`'s stored fields, as [`RedisHistory`] appends them. Without
/// `trim`, the oldest id is `''`: the retention's trim is left to the next acquisition's append
/// (a release follows its acquisition's, which trimmed the stream moments before).
pub(crate) fn record_args(
    options: &HistoryOptions,
    event: &HistoryEvent,
    trim: bool,
) -> Vec<String> {
    let oldest = match trim {
        true => oldest_kept(options).to_string(),
        false => String::new(),
    };
    let mut args = vec![
        options.events_per_key().to_string(),
        oldest,
        (options.retention_period().as_millis() as u64).to_string(),
    ];
    for (name, value) in stored_fields(event) {
        args.push(name.to_string());
        args.push(value);
    }
    args
}

/// A recorded script's reply with the append's refusal taken off (the last element of an array
/// of `with_refusal` elements that starts with `1`: the lock operation succeeded) and logged,
/// throttled, as a failed client-side append is: recording never turns a lock operation's
/// success into an error. `{1, x}` is left as `1`.
pub(crate) fn without_refusal(
    key: &str,
    kind: HistoryKind,
    reply: Value,
    with_refusal: usize,
) -> Value {
    match reply {
        Value::Array(mut items)
            if items.len() == with_refusal && matches!(items.first(), Some(Value::Int(1))) =>
        {
            let refusal = items.pop();
            crate::core::throttle::warn_throttled!(
                key,
                kind = kind.as_str(),
                error = ?refusal,
                "could not record a lock history event"
            );
            match items.len() {
                1 => Value::Int(1),
                _ => Value::Array(items),
            }
        }
        other => other,
    }
}

/// One `XREVRANGE` entry: `[id, [field, value, …]]`.
pub(crate) fn event_of(entry: &Value) -> Result<HistoryEvent> {
    let text = |v: &Value| match v {
        Value::BulkString(b) => Ok(String::from_utf8_lossy(b).into_owned()),
        Value::SimpleString(s) => Ok(s.clone()),
        other => Err(bad_reply(other)),
    };
    let Value::Array(parts) = entry else {
        return Err(bad_reply(entry));
    };
    let [id, Value::Array(fields)] = parts.as_slice() else {
        return Err(bad_reply(entry));
    };
    let id = text(id)?;
    let millis = id
        .split_once('-')
        .and_then(|(ms, _)| ms.parse().ok())
        .ok_or_else(|| bad_reply(entry))?;
    let fields = fields.iter().map(text).collect::<Result<Vec<_>>>()?;
    let pairs = fields.chunks(2).filter_map(|pair| match pair {
        [name, value] => Some((name.as_str(), value.as_str())),
        _ => None,
    });
    let mut event = HistoryEvent::from_fields(pairs)?;
    event.at = from_unix_millis(millis);
    Ok(event)
}

pub(crate) fn bad_reply(reply: &Value) -> Error {
    Error::UnexpectedReply {
        op: Operation::History,
        detail: format!("not a history stream entry: {reply:?}"),
    }
}
