//! Starting a [`SentinelSet`] and waiting until its sentinels know each other and the replicas.

use std::thread;
use std::time::Instant;

use super::options::SentinelOptions;
use super::{Fields, QUERY_TIMEOUT, REPLICATION_TIMEOUT, SentinelSet, announced_port};
use crate::server::Mode;
use crate::{HarnessError, Server, ServerBinary, ServerOptions};

/// Timer settings applied to every sentinel with `SENTINEL DEBUG` (redis >= 7, valkey), so
/// tests do not wait for production intervals: sentinels find each other within a fraction
/// of a second (hello messages every 250 ms instead of 2 s), see role changes within a
/// second (`INFO` every second instead of 10 s) and leave TILT mode (entered e.g. after a
/// long SIGSTOP) after 5 s instead of 30 s. The ping period is set separately, see
/// [`ping_period_ms`].
const SENTINEL_DEBUG: [(&str, &str); 3] = [
    ("publish-period", "250"),
    ("info-period", "1000"),
    ("tilt-period", "5000"),
];

/// The `SENTINEL DEBUG ping-period`: a quarter of down-after, between 50 ms and the default
/// 1000 ms.
///
/// Sentinel pings an instance every `min(down-after, ping-period)`, and a fresh link (e.g.
/// to a just-promoted primary after `+switch-master`) sends its first PING only one period
/// after it was created, while the down-after clock starts at creation. With down-after at
/// or below the 1 s default period, the new primary can thus be flagged `+sdown` for a
/// moment, and two sentinels doing that at once start a second, spurious failover. Pinging
/// well within down-after avoids that.
pub(super) fn ping_period_ms(down_after_ms: u128) -> u128 {
    (down_after_ms / 4).clamp(50, 1000)
}

impl SentinelSet {
    /// Starts the primary, its replicas (waiting until they are linked) and the sentinels,
    /// then waits until every sentinel knows all other sentinels (`num-other-sentinels`)
    /// and all replicas (`SENTINEL REPLICAS`, each with `master-link-status:ok`), so that a
    /// failover can succeed right away.
    pub fn start(
        bin: &ServerBinary,
        options: &SentinelOptions,
    ) -> Result<SentinelSet, HarnessError> {
        options.validate()?;
        // The primary may become a replica after a failover: it needs masterauth too.
        let mut extra = Vec::new();
        if let Some(pass) = options.server.password() {
            extra.push("--masterauth".to_owned());
            extra.push(pass.to_owned());
        }
        let tls = options.server.tls_files();
        if tls.is_some() {
            // Replicas (and the primary, once the sentinels demote it) replicate over TLS.
            extra.push("--tls-replication".to_owned());
            extra.push("yes".to_owned());
        }
        let primary = Server::start_with(bin, &options.server, extra.clone(), Mode::Standalone)?;
        let mut data = vec![primary];
        for _ in 0..options.replicas {
            let replica = match data[0].tls_port() {
                None => data[0].start_replica(&options.server)?,
                Some(tls_port) => {
                    let mut args = vec![
                        "--replicaof".to_owned(),
                        "127.0.0.1".to_owned(),
                        tls_port.to_string(),
                    ];
                    args.extend(extra.iter().cloned());
                    let replica = Server::start_with(bin, &options.server, args, Mode::Standalone)?;
                    replica.wait_for_master_link(REPLICATION_TIMEOUT)?;
                    replica
                }
            };
            data.push(replica);
        }

        let config = options.sentinel_config(announced_port(&data[0]));
        // With TLS data nodes the sentinels get the certificate files too (see
        // `SentinelOptions::server`); never the data nodes' password or raw arguments.
        let sentinel_options = match tls {
            Some(files) => ServerOptions::new().tls(files),
            None => ServerOptions::new(),
        };
        let results: Vec<Result<Server, HarnessError>> = thread::scope(|scope| {
            let handles: Vec<_> = (0..options.sentinels)
                .map(|_| {
                    let mode = Mode::Sentinel {
                        config: config.clone(),
                    };
                    let sentinel_options = &sentinel_options;
                    scope.spawn(move || Server::start_with(bin, sentinel_options, Vec::new(), mode))
                })
                .collect();
            handles
                .into_iter()
                .map(|h| {
                    h.join().unwrap_or_else(|_| {
                        Err(HarnessError::Protocol(
                            "a sentinel's start thread panicked".into(),
                        ))
                    })
                })
                .collect()
        });
        let sentinels = results.into_iter().collect::<Result<Vec<Server>, _>>()?;
        let set = SentinelSet {
            data,
            sentinels,
            options: options.clone(),
        };
        for i in 0..set.sentinels.len() {
            set.tune(i);
        }
        set.wait_until_ready()?;
        Ok(set)
    }

    /// Applies [`SENTINEL_DEBUG`] and [`ping_period_ms`] to sentinel `i`, best effort (older
    /// servers lack `SENTINEL DEBUG`).
    pub(super) fn tune(&self, i: usize) {
        let ping = ping_period_ms(self.options.down_after_ms()).to_string();
        // One command per setting: a server that lacks one still takes the others.
        let mut commands = vec![["SENTINEL", "DEBUG", "ping-period", ping.as_str()]];
        commands.extend(
            SENTINEL_DEBUG
                .iter()
                .map(|(key, value)| ["SENTINEL", "DEBUG", *key, *value]),
        );
        let commands: Vec<&[&str]> = commands.iter().map(|c| &c[..]).collect();
        let _ = self.sentinels[i].commands_timeout(&commands, QUERY_TIMEOUT);
    }

    /// Waits until every live sentinel sees the current primary as up, knows every other
    /// sentinel, and knows every live replica as up with `master-link-status:ok`.
    pub fn wait_until_ready(&self) -> Result<(), HarnessError> {
        let deadline = Instant::now() + self.failover_bound();
        let want_sentinels = self.sentinels.len() - 1;
        self.wait_for(
            "the sentinels to know each other and the replicas",
            deadline,
            |s| {
                let primary = s.primary_addr()?;
                let primary_port = announced_port(&s.data[s.data_index(primary)?]);
                let want_replicas: Vec<u16> = s
                    .data
                    .iter()
                    .filter(|n| n.is_live() && n.port() != primary.port())
                    .map(announced_port)
                    .collect();
                for (i, sentinel) in s.live_sentinels() {
                    let master = s.sentinel_fields(sentinel, "MASTER")?;
                    let master = master.first().ok_or_else(|| {
                        HarnessError::Protocol("SENTINEL MASTER: empty reply".into())
                    })?;
                    let flags = field(master, "flags");
                    if flags != "master" {
                        return Ok(Some(format!("sentinel {i}: master flags {flags:?}")));
                    }
                    if field(master, "port") != primary_port.to_string() {
                        return Ok(Some(format!(
                            "sentinel {i} monitors port {}, the primary is {primary}",
                            field(master, "port")
                        )));
                    }
                    let others = field(master, "num-other-sentinels");
                    if others != want_sentinels.to_string() {
                        return Ok(Some(format!(
                            "sentinel {i} knows {others} of {want_sentinels} other sentinels"
                        )));
                    }
                    let replicas = s.sentinel_fields(sentinel, "REPLICAS")?;
                    for port in &want_replicas {
                        let port_s = port.to_string();
                        let Some(r) = replicas.iter().find(|r| field(r, "port") == port_s) else {
                            return Ok(Some(format!("sentinel {i} does not know replica :{port}")));
                        };
                        let (flags, link) = (field(r, "flags"), field(r, "master-link-status"));
                        if flags != "slave" || link != "ok" {
                            return Ok(Some(format!(
                                "sentinel {i}: replica :{port} has flags {flags:?}, \
                             master-link-status {link:?}"
                            )));
                        }
                    }
                }
                Ok(None)
            },
        )
    }
}

fn field<'a>(fields: &'a Fields, name: &str) -> &'a str {
    fields.get(name).map(String::as_str).unwrap_or("")
}
