//! [`SentinelOptions`]: how to build a [`SentinelSet`].

use std::time::Duration;

use super::DEFAULT_MASTER_NAME;
#[cfg(doc)]
use super::SentinelSet;
use crate::server::conf_quote;
use crate::{HarnessError, ServerOptions};

/// How to build a [`SentinelSet`]. Builder style:
/// `SentinelOptions::new().replicas(1).sentinels(3).quorum(2)`.
#[derive(Debug, Clone)]
pub struct SentinelOptions {
    pub(super) master_name: String,
    pub(super) replicas: usize,
    pub(super) sentinels: usize,
    pub(super) quorum: usize,
    pub(super) down_after: Duration,
    pub(super) failover_timeout: Duration,
    pub(super) server: ServerOptions,
}

impl Default for SentinelOptions {
    fn default() -> Self {
        SentinelOptions {
            master_name: DEFAULT_MASTER_NAME.to_owned(),
            replicas: 1,
            sentinels: 3,
            quorum: 2,
            down_after: Duration::from_millis(1000),
            failover_timeout: Duration::from_millis(5000),
            server: ServerOptions::new(),
        }
    }
}

impl SentinelOptions {
    /// Defaults: master name `leasehold`, 1 replica, 3 sentinels, quorum 2,
    /// `down-after-milliseconds` 1000, `failover-timeout` 5000, default [`ServerOptions`].
    pub fn new() -> Self {
        Self::default()
    }

    /// The name the sentinels monitor the primary under (letters, digits, `.`, `_`, `-`).
    pub fn master_name(mut self, name: impl Into<String>) -> Self {
        self.master_name = name.into();
        self
    }

    /// The number of replicas of the primary (0 is allowed, but then nothing can be
    /// promoted).
    pub fn replicas(mut self, replicas: usize) -> Self {
        self.replicas = replicas;
        self
    }

    /// The number of sentinels (at least 1).
    pub fn sentinels(mut self, sentinels: usize) -> Self {
        self.sentinels = sentinels;
        self
    }

    /// How many sentinels must agree that the primary is down (1 to the number of
    /// sentinels).
    pub fn quorum(mut self, quorum: usize) -> Self {
        self.quorum = quorum;
        self
    }

    /// `sentinel down-after-milliseconds` (rounded to whole milliseconds, at least 1).
    pub fn down_after(mut self, down_after: Duration) -> Self {
        self.down_after = down_after;
        self
    }

    /// `sentinel failover-timeout` (rounded to whole milliseconds, at least 1).
    pub fn failover_timeout(mut self, timeout: Duration) -> Self {
        self.failover_timeout = timeout;
        self
    }

    /// The options of the data nodes (primary and replicas). A password becomes the
    /// replicas' and the primary's `--masterauth` and the sentinels' `sentinel auth-pass`.
    ///
    /// With TLS files ([`ServerOptions::tls`]) the data nodes replicate over TLS: every data
    /// node runs with `--tls-replication yes` and the replicas follow the primary's TLS port
    /// (so each replica announces its TLS port to its primary). The sentinels monitor the
    /// TLS ports and speak TLS to the data nodes and to each other (each sentinel gets a TLS
    /// port too, with `tls-replication yes` and the same certificate files); clients still
    /// ask the sentinels on their plain ports ([`SentinelSet::sentinel_addrs`]), and
    /// `SENTINEL GET-MASTER-ADDR-BY-NAME` names the primary's TLS port. The harness' own
    /// commands keep using every data node's plain port.
    pub fn server(mut self, options: ServerOptions) -> Self {
        self.server = options;
        self
    }

    /// The monitored master name.
    pub fn name(&self) -> &str {
        &self.master_name
    }

    /// The number of replicas.
    pub fn replica_count(&self) -> usize {
        self.replicas
    }

    /// The number of sentinels.
    pub fn sentinel_count(&self) -> usize {
        self.sentinels
    }

    /// The quorum.
    pub fn quorum_value(&self) -> usize {
        self.quorum
    }

    /// The down-after time.
    pub fn down_after_value(&self) -> Duration {
        self.down_after
    }

    /// The failover timeout.
    pub fn failover_timeout_value(&self) -> Duration {
        self.failover_timeout
    }

    /// The options of the data nodes.
    pub fn server_options(&self) -> &ServerOptions {
        &self.server
    }

    pub(super) fn down_after_ms(&self) -> u128 {
        self.down_after.as_millis().max(1)
    }

    fn failover_timeout_ms(&self) -> u128 {
        self.failover_timeout.as_millis().max(1)
    }

    pub(super) fn validate(&self) -> Result<(), HarnessError> {
        let name_ok = !self.master_name.is_empty()
            && self
                .master_name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
        if !name_ok {
            return Err(HarnessError::InvalidArgument(format!(
                "master name {:?}: use letters, digits, '.', '_' and '-'",
                self.master_name
            )));
        }
        if self.sentinels == 0 || self.sentinels > 100 {
            return Err(HarnessError::InvalidArgument(format!(
                "{} sentinels: use 1 to 100",
                self.sentinels
            )));
        }
        if self.quorum == 0 || self.quorum > self.sentinels {
            return Err(HarnessError::InvalidArgument(format!(
                "quorum {} with {} sentinels: use 1 to {}",
                self.quorum, self.sentinels, self.sentinels
            )));
        }
        if self.replicas > 100 {
            return Err(HarnessError::InvalidArgument(format!(
                "{} replicas: use at most 100",
                self.replicas
            )));
        }
        Ok(())
    }

    /// The `sentinel ...` lines of every sentinel's configuration file.
    pub(super) fn sentinel_config(&self, primary_port: u16) -> String {
        let name = &self.master_name;
        let mut conf = format!(
            "sentinel monitor {name} 127.0.0.1 {primary_port} {quorum}\n\
             sentinel down-after-milliseconds {name} {down}\n\
             sentinel failover-timeout {name} {failover}\n\
             sentinel parallel-syncs {name} 1\n",
            quorum = self.quorum,
            down = self.down_after_ms(),
            failover = self.failover_timeout_ms(),
        );
        if let Some(pass) = self.server.password() {
            conf.push_str(&format!("sentinel auth-pass {name} {}\n", conf_quote(pass)));
        }
        conf
    }
}
