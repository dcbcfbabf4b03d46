//! etcd's JSON gateway to the gRPC API (`/v3/...`, keys and values base64 in JSON): a
//! member's status and health, keys put and read, and authentication turned on through it.

use std::io;
use std::time::Duration;

use base64::Engine;

use crate::HarnessError;

use super::http::http;
use super::member::Etcd;

/// Socket timeout of [`Etcd::put`], [`Etcd::get`] and [`Etcd::status`].
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// What one member reports about itself (`POST /v3/maintenance/status`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EtcdStatus {
    /// The member's own id.
    pub member_id: u64,
    /// The id of the member it takes for the leader; `None` while it knows no leader.
    pub leader: Option<u64>,
    /// The raft term it is in.
    pub raft_term: u64,
    /// The server version, e.g. `3.4.23`.
    pub version: String,
}

impl EtcdStatus {
    /// Whether the member takes itself for the leader.
    pub fn is_leader(&self) -> bool {
        self.leader == Some(self.member_id)
    }
}

impl Etcd {
    /// The member's status (`POST /v3/maintenance/status`): its id, the leader it knows of,
    /// its raft term and version. Waits at most 10 s.
    pub fn status(&self) -> Result<EtcdStatus, HarnessError> {
        self.status_timeout(REQUEST_TIMEOUT)
    }

    pub(super) fn status_timeout(&self, timeout: Duration) -> Result<EtcdStatus, HarnessError> {
        let reply = self.call("/v3/maintenance/status", "{}", timeout)?;
        let id = |value: Option<&Json>| value.and_then(json_u64);
        let member_id = id(reply.get("header").and_then(|h| h.get("member_id")))
            .ok_or_else(|| malformed(&self.endpoint(), "status without header.member_id"))?;
        Ok(EtcdStatus {
            member_id,
            // The gateway leaves out zero values: no `leader` means none (raft's 0).
            leader: id(reply.get("leader")).filter(|&l| l != 0),
            raft_term: id(reply.get("raftTerm")).unwrap_or(0),
            version: reply
                .get("version")
                .and_then(Json::as_str)
                .unwrap_or_default()
                .to_owned(),
        })
    }

    /// Whether `GET /health` says `{"health":"true"}` (the member has a leader and can
    /// commit). Waits at most 10 s.
    pub fn health(&self) -> Result<bool, HarnessError> {
        self.health_timeout(REQUEST_TIMEOUT)
    }

    pub(super) fn health_timeout(&self, timeout: Duration) -> Result<bool, HarnessError> {
        if !self.process.is_started() {
            return Err(HarnessError::NotRunning);
        }
        // 503 with {"health":"false"} when unhealthy; any answer is parsed the same way.
        let (_, body) = http(self.client_port, "GET", "/health", None, timeout)?;
        let reply = parse_json(&body).map_err(|e| malformed(&self.endpoint(), &e))?;
        Ok(reply.get("health").and_then(Json::as_str) == Some("true"))
    }

    /// Writes `key = value` (`POST /v3/kv/put`). Waits at most 10 s.
    pub fn put(&self, key: impl AsRef<[u8]>, value: impl AsRef<[u8]>) -> Result<(), HarnessError> {
        let body = format!(
            r#"{{"key":"{}","value":"{}"}}"#,
            base64_encode(key.as_ref()),
            base64_encode(value.as_ref())
        );
        self.call("/v3/kv/put", &body, REQUEST_TIMEOUT).map(drop)
    }

    /// The value of `key`, `None` if there is none (`POST /v3/kv/range`, a linearizable read:
    /// it sees every write committed before it, through whichever member). Waits at most
    /// 10 s.
    pub fn get(&self, key: impl AsRef<[u8]>) -> Result<Option<Vec<u8>>, HarnessError> {
        let body = format!(r#"{{"key":"{}"}}"#, base64_encode(key.as_ref()));
        let reply = self.call("/v3/kv/range", &body, REQUEST_TIMEOUT)?;
        let Some(kv) = reply
            .get("kvs")
            .and_then(Json::as_array)
            .and_then(|kvs| kvs.first())
        else {
            return Ok(None);
        };
        // The gateway leaves out empty values.
        let value = kv.get("value").and_then(Json::as_str).unwrap_or("");
        base64_decode(value)
            .map(Some)
            .ok_or_else(|| malformed(&self.endpoint(), "value is not base64"))
    }

    /// Turns authentication on: the user `root` (role `root`) with `password`, then
    /// `auth enable`. Afterwards every request needs credentials, including this harness's own
    /// [`Etcd::put`] and [`Etcd::get`], which then fail.
    ///
    /// # Errors
    /// [`HarnessError::Server`] if etcd refuses a step.
    pub fn enable_auth(&self, password: &str) -> Result<(), HarnessError> {
        let user = serde_json::json!({ "name": "root", "password": password }).to_string();
        self.call("/v3/auth/user/add", &user, REQUEST_TIMEOUT)?;
        self.call(
            "/v3/auth/user/grant",
            r#"{"user":"root","role":"root"}"#,
            REQUEST_TIMEOUT,
        )?;
        self.call("/v3/auth/enable", "{}", REQUEST_TIMEOUT)
            .map(drop)
    }

    /// One JSON gateway call: POSTs `body` to `path`, returns the parsed reply of a `200`;
    /// any other status is a [`HarnessError::Server`] with etcd's message.
    fn call(&self, path: &str, body: &str, timeout: Duration) -> Result<Json, HarnessError> {
        if !self.process.is_started() {
            return Err(HarnessError::NotRunning);
        }
        let (status, text) = http(self.client_port, "POST", path, Some(body), timeout)?;
        let reply = parse_json(&text).map_err(|e| malformed(&self.endpoint(), &e))?;
        if status == 200 {
            return Ok(reply);
        }
        let message = reply
            .get("message")
            .or_else(|| reply.get("error"))
            .and_then(Json::as_str)
            .unwrap_or(text.trim());
        Err(HarnessError::Server(format!(
            "etcd at {}: POST {path}: HTTP {status}: {message}",
            self.endpoint()
        )))
    }
}

fn malformed(endpoint: &str, what: &str) -> HarnessError {
    HarnessError::Io(io::Error::new(
        io::ErrorKind::InvalidData,
        format!("etcd at {endpoint}: unexpected reply: {what}"),
    ))
}

/// A reply of the gateway (`uint64` fields come as strings of digits).
pub(super) type Json = serde_json::Value;

pub(super) fn parse_json(text: &str) -> Result<Json, String> {
    serde_json::from_str(text).map_err(|e| e.to_string())
}

/// A `uint64` field: a string of digits (the gateway's encoding) or a plain number.
fn json_u64(value: &Json) -> Option<u64> {
    value
        .as_str()
        .and_then(|s| s.parse().ok())
        .or_else(|| value.as_u64())
}

fn base64_encode(data: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(data)
}

fn base64_decode(text: &str) -> Option<Vec<u8>> {
    base64::engine::general_purpose::STANDARD.decode(text).ok()
}
