//! The sentinels and data nodes of a [`SentinelSet`], and which one is the primary.

use std::net::{IpAddr, SocketAddr};

use super::options::SentinelOptions;
use super::{Fields, QUERY_TIMEOUT, SentinelSet};
use crate::server::conf_quote;
use crate::{HarnessError, RespValue, Server};

impl SentinelSet {
    /// The name the sentinels monitor (default `leasehold`).
    pub fn master_name(&self) -> &str {
        &self.options.master_name
    }

    /// The options the set was started with.
    pub fn options(&self) -> &SentinelOptions {
        &self.options
    }

    /// `redis://127.0.0.1:PORT/` of every sentinel, in index order (also of killed ones).
    pub fn sentinel_urls(&self) -> Vec<String> {
        self.sentinels.iter().map(Server::url).collect()
    }

    /// The URL leasehold connects with: `<scheme>://127.0.0.1:S1,127.0.0.1:S2,…#<master>`,
    /// naming every sentinel (their plain ports) and the master (`scheme`: `redis-sentinel`, or
    /// `rediss-sentinel` for TLS to the data nodes).
    pub fn lock_url(&self, scheme: &str) -> String {
        let hosts: Vec<String> = self
            .sentinels
            .iter()
            .map(|s| s.addr().to_string())
            .collect();
        format!("{scheme}://{}#{}", hosts.join(","), self.master_name())
    }

    /// `127.0.0.1:PORT` of every sentinel, in index order (also of killed ones).
    pub fn sentinel_addrs(&self) -> Vec<SocketAddr> {
        self.sentinels.iter().map(Server::addr).collect()
    }

    /// All sentinels, by index.
    pub fn sentinels(&self) -> &[Server] {
        &self.sentinels
    }

    /// Sentinel `i` (to pause, resume or query it).
    pub fn sentinel(&self, i: usize) -> Result<&Server, HarnessError> {
        let len = self.sentinels.len();
        self.sentinels
            .get(i)
            .ok_or_else(|| bad_index("sentinel", i, len))
    }

    /// Sentinel `i`, mutable (to kill or stop it; see [`SentinelSet::restart_sentinel`]).
    pub fn sentinel_mut(&mut self, i: usize) -> Result<&mut Server, HarnessError> {
        let len = self.sentinels.len();
        self.sentinels
            .get_mut(i)
            .ok_or_else(|| bad_index("sentinel", i, len))
    }

    /// Restarts sentinel `i` on its port with its rewritten configuration (it keeps its
    /// identity and what it learned) and applies the harness' timer settings again.
    ///
    /// Sentinel writes `sentinel auth-pass` back into its file without quoting, so a
    /// password with spaces or quotes would make the restart fail; the harness quotes that
    /// line again before restarting.
    pub fn restart_sentinel(&mut self, i: usize) -> Result<(), HarnessError> {
        let name = self.options.master_name.clone();
        let password = self.options.server.password().map(str::to_owned);
        let sentinel = self.sentinel_mut(i)?;
        sentinel.kill();
        if let Some(pass) = password {
            let path = sentinel.dir().join("sentinel.conf");
            let text = std::fs::read_to_string(&path)?;
            let prefix = format!("sentinel auth-pass {name} ");
            let fixed: Vec<String> = text
                .lines()
                .map(|line| match line.starts_with(&prefix) {
                    true => format!("{prefix}{}", conf_quote(&pass)),
                    false => line.to_owned(),
                })
                .collect();
            std::fs::write(&path, fixed.join("\n") + "\n")?;
        }
        sentinel.restart()?;
        self.tune(i);
        Ok(())
    }

    /// All data nodes: index 0 was started as the primary, the others as its replicas.
    pub fn data_nodes(&self) -> &[Server] {
        &self.data
    }

    /// Data node `i`.
    pub fn data_node(&self, i: usize) -> Result<&Server, HarnessError> {
        let len = self.data.len();
        self.data
            .get(i)
            .ok_or_else(|| bad_index("data node", i, len))
    }

    /// Data node `i`, mutable (to kill, stop or restart it; a restarted former primary is
    /// turned into a replica by the sentinels).
    pub fn data_node_mut(&mut self, i: usize) -> Result<&mut Server, HarnessError> {
        let len = self.data.len();
        self.data
            .get_mut(i)
            .ok_or_else(|| bad_index("data node", i, len))
    }

    /// The primary's address according to the first live sentinel that answers
    /// `SENTINEL GET-MASTER-ADDR-BY-NAME`, as the data node's plain address
    /// ([`Server::addr`]): with TLS data nodes the sentinels name the TLS port, which is
    /// mapped back to its node (its TLS address is `primary()?.tls_port()`).
    pub fn primary_addr(&self) -> Result<SocketAddr, HarnessError> {
        let mut last = None;
        for (_, sentinel) in self.live_sentinels() {
            match self.addr_from(sentinel) {
                Ok(addr) => return Ok(addr),
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| {
            HarnessError::InvalidArgument("no sentinel is live (all killed or paused)".into())
        }))
    }

    /// The index of the current primary among [`SentinelSet::data_nodes`].
    pub fn primary_index(&self) -> Result<usize, HarnessError> {
        let addr = self.primary_addr()?;
        self.data_index(addr)
    }

    /// The current primary, according to the sentinels.
    pub fn primary(&self) -> Result<&Server, HarnessError> {
        Ok(&self.data[self.primary_index()?])
    }

    pub(super) fn live_sentinels(&self) -> impl Iterator<Item = (usize, &Server)> {
        self.sentinels
            .iter()
            .enumerate()
            .filter(|(_, s)| s.is_live())
    }

    /// The data node at `addr`: its plain address, or its TLS port on the same host.
    pub(super) fn data_index(&self, addr: SocketAddr) -> Result<usize, HarnessError> {
        self.data
            .iter()
            .position(|n| {
                n.addr() == addr
                    || (n.addr().ip() == addr.ip() && n.tls_port() == Some(addr.port()))
            })
            .ok_or_else(|| {
                HarnessError::Server(format!(
                    "the sentinels name {addr}, which is none of the data nodes"
                ))
            })
    }

    /// `SENTINEL GET-MASTER-ADDR-BY-NAME <name>` on `sentinel`, with a data node's TLS port
    /// mapped to its plain address (an address of no data node is returned as is).
    pub(super) fn addr_from(&self, sentinel: &Server) -> Result<SocketAddr, HarnessError> {
        let name = &self.options.master_name;
        let reply = sentinel.command_timeout(
            &["SENTINEL", "GET-MASTER-ADDR-BY-NAME", name],
            QUERY_TIMEOUT,
        )?;
        let parsed = reply.as_array().and_then(|parts| match parts {
            [ip, port] => {
                let ip: IpAddr = ip.as_str()?.parse().ok()?;
                let port: u16 = port.as_str()?.parse().ok()?;
                Some(SocketAddr::new(ip, port))
            }
            _ => None,
        });
        let addr = parsed.ok_or_else(|| {
            HarnessError::Server(format!("SENTINEL GET-MASTER-ADDR-BY-NAME {name}: {reply}"))
        })?;
        Ok(match self.data_index(addr) {
            Ok(i) => self.data[i].addr(),
            Err(_) => addr,
        })
    }

    /// `SENTINEL MASTER <name>` (one entry) or `SENTINEL REPLICAS <name>` (one per replica)
    /// on `sentinel`, as field maps.
    pub(super) fn sentinel_fields(
        &self,
        sentinel: &Server,
        what: &str,
    ) -> Result<Vec<Fields>, HarnessError> {
        let name = &self.options.master_name;
        let reply = sentinel.command_timeout(&["SENTINEL", what, name], QUERY_TIMEOUT)?;
        let bad = || HarnessError::Protocol(format!("SENTINEL {what} {name}: {reply}"));
        let entries: Vec<&[RespValue]> = match (what, reply.as_array()) {
            ("MASTER", Some(items)) => vec![items],
            (_, Some(items)) => items
                .iter()
                .map(|e| e.as_array().ok_or_else(bad))
                .collect::<Result<_, _>>()?,
            (_, None) => return Err(bad()),
        };
        entries
            .into_iter()
            .map(|items| {
                items
                    .chunks(2)
                    .map(|kv| match kv {
                        [k, v] => Some((k.as_str()?.to_owned(), v.as_str()?.to_owned())),
                        _ => None,
                    })
                    .collect::<Option<Fields>>()
                    .ok_or_else(bad)
            })
            .collect()
    }
}

fn bad_index(what: &str, i: usize, len: usize) -> HarnessError {
    HarnessError::InvalidArgument(format!("no {what} {i}: there are {len}"))
}
