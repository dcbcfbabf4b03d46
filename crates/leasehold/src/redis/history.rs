//! The history log on Redis and Valkey: a stream per lock key, `{slot}:history` (see
//! [`history_key`]), in the key's hash slot, so it works the same on a standalone server, a
//! cluster (on the key's master) and a Sentinel-monitored primary.
//!
//! **Append** is one pipeline, one round trip: `XADD … MAXLEN cap *` with the event's fields,
//! `XTRIM … MINID ~ (now - retention)` and `PEXPIRE retention`. **Read** is `XREVRANGE … COUNT`.
//!
//! **Guarantees.** After each append the stream holds at most `cap` events: the trim is exact
//! (`=`), not `~`, because `~` trims whole stream nodes of `stream-node-max-entries` (100 by
//! default) and so would keep up to `cap + 100` events; dropping one entry per append from the
//! oldest node is cheap. Events older than the retention (by the stream ids, which are the
//! server's clock, against this client's clock) go at the next append, a node at a time (`~`),
//! and the whole stream expires one retention after its last append. An event's time is the
//! server's: the millisecond part of its stream id.

use std::sync::Arc;
use std::time::SystemTime;

use futures_util::future::BoxFuture;
use redis::Value;

use crate::core::error::{Error, Operation, Result};
use crate::core::history::{
    HistoryEvent, HistoryLog, HistoryOptions, from_unix_millis, unix_millis,
};
use crate::redis::client::RedisClient;
use crate::redis::slot::slot_name;
use crate::redis::slot::validate_name;

/// The stream that holds lock `key`'s history: [`slot_name`]`(key) + ":history"`.
pub fn history_key(key: &str) -> String {
    format!("{}:history", slot_name(key))
}

impl RedisClient {
    /// The history log of this client's server (streams, see the module docs).
    pub(crate) fn history_streams(&self, options: &HistoryOptions) -> Arc<dyn HistoryLog> {
        Arc::new(RedisHistory {
            client: self.clone(),
            options: *options,
        })
    }
}

#[derive(Debug)]
struct RedisHistory {
    client: RedisClient,
    options: HistoryOptions,
}

impl RedisHistory {
    async fn append(&self, key: &str, event: &HistoryEvent) -> Result<()> {
        validate_name(key)?;
        let stream = history_key(key);
        let retention = self.options.retention_period();
        let cutoff = SystemTime::now()
            .checked_sub(retention)
            .map_or(0, unix_millis);
        let mut xadd = redis::cmd("XADD");
        xadd.arg(&stream)
            .arg("MAXLEN")
            .arg("=")
            .arg(self.options.events_per_key())
            .arg("*");
        // The stream id is the server's time: the client's `at` is not stored.
        for (name, value) in event.fields().into_iter().filter(|(n, _)| *n != "at") {
            xadd.arg(name).arg(value);
        }
        let mut pipe = redis::pipe();
        pipe.add_command(xadd)
            .ignore()
            .cmd("XTRIM")
            .arg(&stream)
            .arg("MINID")
            .arg("~")
            .arg(cutoff)
            .ignore()
            .cmd("PEXPIRE")
            .arg(&stream)
            .arg(retention.as_millis() as u64)
            .ignore();
        // Sent once: a repeated XADD would store the event twice.
        self.client
            .connection()
            .pipeline_on_key_master(&stream, pipe)
            .await
            .map_err(|e| Error::from_redis(Operation::History, e))?;
        Ok(())
    }

    async fn read(&self, key: &str, limit: usize) -> Result<Vec<HistoryEvent>> {
        validate_name(key)?;
        let stream = history_key(key);
        let reply: Value = self
            .client
            .idempotent(Operation::History, |mut conn| {
                let cmd = redis::cmd("XREVRANGE")
                    .arg(&stream)
                    .arg("+")
                    .arg("-")
                    .arg("COUNT")
                    .arg(limit.max(1))
                    .clone();
                async move { cmd.query_async(&mut conn).await }
            })
            .await?;
        let Value::Array(entries) = reply else {
            return Err(bad_reply(&reply));
        };
        entries.iter().take(limit).map(event_of).collect()
    }
}

/// One `XREVRANGE` entry: `[id, [field, value, …]]`.
fn event_of(entry: &Value) -> Result<HistoryEvent> {
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

fn bad_reply(reply: &Value) -> Error {
    Error::UnexpectedReply {
        op: Operation::History,
        detail: format!("not a history stream entry: {reply:?}"),
    }
}

impl HistoryLog for RedisHistory {
    fn append<'a>(&'a self, key: &'a str, event: &'a HistoryEvent) -> BoxFuture<'a, Result<()>> {
        Box::pin(RedisHistory::append(self, key, event))
    }

    fn read<'a>(&'a self, key: &'a str, limit: usize) -> BoxFuture<'a, Result<Vec<HistoryEvent>>> {
        Box::pin(RedisHistory::read(self, key, limit))
    }
}
