//! Library errors as they cross into JavaScript.
//!
//! N-API rejects a promise with a plain `Error` whose `code` is a status, so the error's kind
//! and fields travel in its message as JSON after [`MARK`]; the package's `index.js` turns
//! such an error into the matching `LeaseholdError` subclass (`errors.js`), whose `code` and
//! fields are these.

use napi::Status;
use serde_json::{Map, Value, json};

use leasehold::{Error, LossReason};

/// What starts the message of an error made here (never the start of any other message).
pub const MARK: &str = "\u{1}leasehold:";

/// The name of a loss reason, as JavaScript sees it.
pub fn reason_name(reason: LossReason) -> &'static str {
    match reason {
        LossReason::NotHeld => "not_held",
        LossReason::Expired => "expired",
        _ => "lost",
    }
}

/// The error `kind` (a name of `errors.js`) with `message` and `fields`.
pub fn error(kind: &str, message: String, mut fields: Map<String, Value>) -> napi::Error {
    fields.insert("kind".into(), kind.into());
    fields.insert("message".into(), message.into());
    napi::Error::new(
        Status::GenericFailure,
        format!("{MARK}{}", Value::Object(fields)),
    )
}

/// A library error, its variant's fields included (`key`, `ambiguous`, `waitedMs`,
/// `attempts`, `reason`, `backend`).
pub fn to_js(e: Error) -> napi::Error {
    let mut fields = Map::new();
    let mut put = |name: &str, value: Value| {
        fields.insert(name.to_string(), value);
    };
    match &e {
        Error::Connection { ambiguous, .. } => put("ambiguous", json!(ambiguous)),
        Error::NotHeld { key }
        | Error::ExpiredOnArrival { key, .. }
        | Error::NotReplicated { key, .. }
        | Error::NoQuorum { key, .. }
        | Error::Conflict { key, .. } => put("key", json!(key)),
        Error::NotAcquired {
            key,
            waited,
            attempts,
        } => {
            put("key", json!(key));
            put("waitedMs", json!(waited.as_secs_f64() * 1000.0));
            put("attempts", json!(attempts));
        }
        Error::LockLost { key, reason } => {
            put("key", json!(key));
            put("reason", json!(reason_name(*reason)));
        }
        Error::Unsupported { backend, .. } => put("backend", json!(backend)),
        _ => {}
    }
    error(e.variant_name(), e.to_string(), fields)
}

/// An argument refused here, before anything was sent.
pub fn invalid(message: impl Into<String>) -> napi::Error {
    error("InvalidArgument", message.into(), Map::new())
}

/// The error `kind` about `key`.
fn keyed(kind: &str, key: &str, message: String) -> napi::Error {
    let mut fields = Map::new();
    fields.insert("key".into(), json!(key));
    error(kind, message, fields)
}

/// The wait was given up through its `AbortSignal`.
pub fn aborted(key: &str) -> napi::Error {
    let message = format!("lock {key:?}: the wait was aborted; nothing is held");
    keyed("Aborted", key, message)
}

/// A leader watch of the election `name` given up through its `AbortSignal` (the async
/// iterator ends on it; nobody sees it unless they call `changed` themselves).
pub fn watch_aborted(name: &str) -> napi::Error {
    let message = format!("election {name:?}: the leader watch was aborted");
    keyed("Aborted", name, message)
}

/// A release or extend of a lease released already.
pub fn released(key: &str) -> napi::Error {
    let message = format!("lock {key:?}: this lease was already released");
    keyed("NotHeld", key, message)
}

/// The `Result` of a library call, as napi's.
pub trait IntoJs<T> {
    /// Converts the error (if any) with [`to_js`].
    fn js(self) -> napi::Result<T>;
}

impl<T> IntoJs<T> for leasehold::Result<T> {
    fn js(self) -> napi::Result<T> {
        self.map_err(to_js)
    }
}
