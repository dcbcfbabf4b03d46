//! The history log on Redis and Valkey as the [`Locker`](crate::Locker) appends and reads it
//! (the stream's format, and the appends that ride in the plain lock's scripts:
//! `redis::history`).

use std::sync::Arc;

use futures_util::future::BoxFuture;
use redis::Value;

use crate::core::error::{Error, Operation, Result};
use crate::core::history::{HistoryEvent, HistoryLog, HistoryOptions};
use crate::redis::history::{bad_reply, event_of, history_key, oldest_kept, stored_fields};
use crate::redis::slot::validate_name;

use super::RedisClient;

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
        let mut xadd = redis::cmd("XADD");
        xadd.arg(&stream)
            .arg("MAXLEN")
            .arg("=")
            .arg(self.options.events_per_key())
            .arg("*");
        for (name, value) in stored_fields(event) {
            xadd.arg(name).arg(value);
        }
        let mut pipe = redis::pipe();
        pipe.add_command(xadd)
            .ignore()
            .cmd("XTRIM")
            .arg(&stream)
            .arg("MINID")
            .arg("~")
            .arg(oldest_kept(&self.options))
            .ignore()
            .cmd("PEXPIRE")
            .arg(&stream)
            .arg(retention.as_millis() as u64)
            .ignore();
        // Sent once: a repeated XADD would store the event twice.
        self.client
            .conn()
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

impl HistoryLog for RedisHistory {
    fn append<'a>(&'a self, key: &'a str, event: &'a HistoryEvent) -> BoxFuture<'a, Result<()>> {
        Box::pin(RedisHistory::append(self, key, event))
    }

    fn read<'a>(&'a self, key: &'a str, limit: usize) -> BoxFuture<'a, Result<Vec<HistoryEvent>>> {
        Box::pin(RedisHistory::read(self, key, limit))
    }
}
