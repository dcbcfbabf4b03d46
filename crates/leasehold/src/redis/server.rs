//! What the server is and what it offers, detected once per connection.

use redis::Value;

use crate::core::error::{Error, Operation, Result};
use crate::redis::connection::ClientConnection;
use crate::redis::strategy::{ExtendStrategy, ReleaseStrategy};

/// Which server implementation answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ServerKind {
    /// Redis.
    Redis,
    /// Valkey (which also reports a `redis_version` for compatibility).
    Valkey,
    /// `INFO` was not available (an ACL may forbid it).
    Unknown,
}

impl std::fmt::Display for ServerKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            ServerKind::Redis => "redis",
            ServerKind::Valkey => "valkey",
            ServerKind::Unknown => "unknown server",
        })
    }
}

/// The server's identity and the conditional commands it really accepts.
///
/// Versions are reported, but capabilities are *probed*: each conditional command is sent once
/// against a random key that does not exist, and counts as present only if the server accepts
/// it. A build with a command renamed or forbidden by ACL therefore falls back to Lua.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerInfo {
    /// Redis or Valkey.
    pub kind: ServerKind,
    /// The product's own version (`valkey_version` on Valkey, `redis_version` on Redis).
    pub version: String,
    /// `DELEX key IFEQ value` is accepted.
    pub has_delex: bool,
    /// `DELIFEQ key value` is accepted.
    pub has_delifeq: bool,
    /// `SET key value PX ms IFEQ value` is accepted.
    pub has_set_ifeq: bool,
    /// `PUBLISH` (`SPUBLISH` on a cluster) on leasehold's release channels is allowed (an ACL
    /// user may lack channel permissions; release notifications are then off).
    pub can_publish: bool,
    /// A subscriber connection may speak RESP3 and turn on `CLIENT TRACKING` (probed on one
    /// server, on a connection the client opened itself; `false` on a cluster): waiters of a
    /// plain lock are then woken by the key's invalidation and its releases publish nothing.
    pub can_track: bool,
    /// The server runs in cluster mode (`cluster_enabled:1`).
    pub cluster_enabled: bool,
}

impl std::fmt::Display for ServerInfo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}", self.kind, self.version)
    }
}

impl ServerInfo {
    /// Probes the server in one round trip: `INFO server`, the three conditional commands,
    /// whether we may publish release notifications, `INFO cluster`, and with `probe_tracking`
    /// on one server whether we may speak RESP3 and track keys (`HELLO` without arguments
    /// changes nothing; `CLIENT TRACKING OFF` is what a connection opened by leasehold already
    /// is, which is why a caller's own connection is not probed). On a cluster every probe is
    /// in one slot, so the pipeline goes to one master (capabilities are assumed to be the same
    /// on every node of a cluster).
    pub(crate) async fn detect(
        conn: &mut ClientConnection,
        probe_tracking: bool,
    ) -> Result<ServerInfo> {
        let probe_tracking = probe_tracking && !conn.is_cluster();
        let probe = format!("leasehold:probe:{}", uuid::Uuid::new_v4().simple());
        let publish = if conn.is_cluster() {
            "SPUBLISH"
        } else {
            "PUBLISH"
        };
        let mut pipe = redis::pipe();
        pipe.ignore_errors()
            .cmd("INFO")
            .arg("server")
            .cmd("DELEX")
            .arg(&probe)
            .arg("IFEQ")
            .arg("x")
            .cmd("DELIFEQ")
            .arg(&probe)
            .arg("x")
            .cmd("SET")
            .arg(&probe)
            .arg("x")
            .arg("PX")
            .arg(1)
            .arg("IFEQ")
            .arg("x")
            .cmd(publish)
            .arg(crate::redis::slot::release_channel(&probe))
            .arg("")
            .cmd("INFO")
            .arg("cluster");
        if probe_tracking {
            pipe.cmd("HELLO").cmd("CLIENT").arg("TRACKING").arg("OFF");
        }
        let probes = if probe_tracking { 8 } else { 6 };
        let replies: Vec<Value> = pipe
            .query_async(conn)
            .await
            .map_err(|e| Error::from_redis(Operation::Connect, e))?;
        if replies.len() != probes {
            return Err(Error::UnexpectedReply {
                op: Operation::Connect,
                detail: format!("{} replies to {probes} probes", replies.len()),
            });
        }
        // Authentication failures surface on the first command; report them as such.
        if let Value::ServerError(e) = &replies[0]
            && matches!(e.code(), "NOAUTH" | "WRONGPASS")
        {
            return Err(Error::from_redis(Operation::Connect, e.clone().into()));
        }
        let text = |v: &Value| match v {
            Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
            Value::VerbatimString { text, .. } => text.clone(),
            _ => String::new(),
        };
        let info = text(&replies[0]);
        let cluster_enabled = text(&replies[5])
            .lines()
            .any(|l| l.trim() == "cluster_enabled:1");
        let field = |name: &str| {
            info.lines()
                .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
                .map(|v| v.trim().to_string())
        };
        let (kind, version) = if let Some(v) = field("valkey_version") {
            (ServerKind::Valkey, v)
        } else if field("server_name").as_deref() == Some("valkey") {
            (
                ServerKind::Valkey,
                field("redis_version").unwrap_or_default(),
            )
        } else if let Some(v) = field("redis_version") {
            (ServerKind::Redis, v)
        } else {
            (ServerKind::Unknown, String::from("?"))
        };
        // An ACL refusal is not a missing feature: say so once, at connect time, so a slower
        // fallback (Lua instead of DELEX) or an unknown server is never silent.
        for (reply, what, consequence) in [
            (
                &replies[0],
                "INFO",
                "the server's kind and version are unknown",
            ),
            (&replies[1], "DELEX", "releases use the Lua script"),
            (&replies[2], "DELIFEQ", "releases use the Lua script"),
            (&replies[3], "SET ... IFEQ", "extends use the Lua script"),
            (
                &replies[5],
                "INFO cluster",
                "cluster mode cannot be detected",
            ),
        ] {
            if let Value::ServerError(e) = reply
                && e.code() == "NOPERM"
            {
                tracing::info!(command = what, "refused by the server's ACL: {consequence}");
            }
        }
        let accepted = |v: &Value| !matches!(v, Value::ServerError(_));
        Ok(ServerInfo {
            kind,
            version,
            has_delex: accepted(&replies[1]),
            has_delifeq: accepted(&replies[2]),
            has_set_ifeq: accepted(&replies[3]),
            can_publish: accepted(&replies[4]),
            can_track: probe_tracking && replies[6..].iter().all(accepted),
            cluster_enabled,
        })
    }

    /// The release strategy to use: the requested one if the server offers it, or the fastest.
    pub(crate) fn release_strategy(&self, wanted: ReleaseStrategy) -> Result<ReleaseStrategy> {
        let offered = |s| match s {
            ReleaseStrategy::DelEx => self.has_delex,
            ReleaseStrategy::DelIfEq => self.has_delifeq,
            _ => true,
        };
        match wanted {
            ReleaseStrategy::Auto => Ok([ReleaseStrategy::DelEx, ReleaseStrategy::DelIfEq]
                .into_iter()
                .find(|s| offered(*s))
                .unwrap_or(ReleaseStrategy::Lua)),
            s if offered(s) => Ok(s),
            s => Err(Error::invalid(
                "release strategy",
                format!("{self} does not accept {s}"),
            )),
        }
    }

    /// The extend strategy to use: the requested one if the server offers it, or the fastest.
    pub(crate) fn extend_strategy(&self, wanted: ExtendStrategy) -> Result<ExtendStrategy> {
        match wanted {
            ExtendStrategy::Auto if self.has_set_ifeq => Ok(ExtendStrategy::SetIfEq),
            ExtendStrategy::Auto => Ok(ExtendStrategy::Lua),
            ExtendStrategy::SetIfEq if !self.has_set_ifeq => Err(Error::invalid(
                "extend strategy",
                format!("{self} does not accept {wanted}"),
            )),
            s => Ok(s),
        }
    }
}
