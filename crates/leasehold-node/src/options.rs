//! The options objects JavaScript passes (durations in milliseconds), checked and converted to
//! the library's. `index.js` checks the types first and throws `TypeError` / `RangeError`;
//! these checks are the addon's own line, for a caller of the native module itself.

use std::time::Duration;

use napi_derive::napi;

use leasehold::{ClientOptions, HistoryOptions, LockOptions, Owner};

use crate::errors::{IntoJs, invalid};

/// How to connect (`Locker.connect(url, options)`).
#[napi(object)]
#[derive(Default)]
pub struct ConnectOptions {
    /// How long to wait for each connection, in ms.
    pub connect_timeout: Option<f64>,
    /// How long to wait for each reply, in ms.
    pub response_timeout: Option<f64>,
    /// The CA certificate(s) to trust (PEM file).
    pub tls_ca_file: Option<String>,
    /// This client's certificate (PEM file), for mutual TLS.
    pub tls_cert_file: Option<String>,
    /// This client's private key (PEM file).
    pub tls_key_file: Option<String>,
    /// Record each lock's history (acquired, released, lost, forced).
    pub history: Option<bool>,
}

/// What a request takes and how (built by `index.js` from `lock(key, options)` and the like).
#[napi(object)]
pub struct Request {
    /// `lock`, `semaphore` (with `permits`), `read`, `write`, `multi` (with `keys`) or
    /// `campaign` (with `id`).
    pub kind: String,
    /// The key, or the primitive's name.
    pub key: String,
    /// How long the lock lives unless extended, in ms.
    pub ttl: f64,
    /// How long to wait for it, in ms (none: one attempt).
    pub wait: Option<f64>,
    /// Issue a fencing number.
    pub fencing: Option<bool>,
    /// Keep it alive while held.
    pub auto_extend: Option<bool>,
    /// Take it in arrival order.
    pub fair: Option<bool>,
    /// A semaphore's permits.
    pub permits: Option<u32>,
    /// A multi-lock's keys.
    pub keys: Option<Vec<String>>,
    /// A campaign's candidate id.
    pub id: Option<String>,
    /// Stop auto-extending after this long, in ms.
    pub max_hold: Option<f64>,
    /// Keep the lock at least this long after taking it, in ms.
    pub min_hold: Option<f64>,
    /// Renew this often, in ms.
    pub renew_every: Option<f64>,
    /// A label for the owner record.
    pub owner_label: Option<String>,
    /// Store the owner record (host, pid, program) with the lock (default true).
    pub owner: Option<bool>,
}

/// `ms` as a duration: finite and not negative (positive if `positive`).
pub fn millis(what: &str, ms: f64, positive: bool) -> napi::Result<Duration> {
    if !ms.is_finite() || ms < 0.0 || (positive && ms == 0.0) {
        let want = if positive { "above 0" } else { "0 or more" };
        return Err(invalid(format!(
            "{what} must be a finite number of milliseconds {want}, not {ms}"
        )));
    }
    Duration::try_from_secs_f64(ms / 1000.0)
        .map_err(|_| invalid(format!("{what} is too large: {ms} ms")))
}

fn opt_millis(what: &str, ms: Option<f64>) -> napi::Result<Option<Duration>> {
    ms.map(|ms| millis(what, ms, false)).transpose()
}

impl ConnectOptions {
    /// The library's client options.
    pub fn client(self) -> napi::Result<ClientOptions> {
        let mut options = ClientOptions::new();
        if let Some(t) = self.connect_timeout {
            options = options.connect_timeout(millis("connectTimeout", t, true)?);
        }
        if let Some(t) = self.response_timeout {
            options = options.response_timeout(millis("responseTimeout", t, true)?);
        }
        if let Some(p) = self.tls_ca_file {
            options = options.tls_ca_file(p);
        }
        if let Some(p) = self.tls_cert_file {
            options = options.tls_cert_file(p);
        }
        if let Some(p) = self.tls_key_file {
            options = options.tls_key_file(p);
        }
        if self.history == Some(true) {
            options = options.history(HistoryOptions::default());
        }
        Ok(options)
    }
}

impl Request {
    /// The library's lock options, `record` as the owner unless `owner: false`.
    pub fn options(&self, record: &Owner) -> napi::Result<LockOptions> {
        let mut options = LockOptions::new(millis("ttl", self.ttl, true)?)
            .fencing(self.fencing.unwrap_or(false))
            .auto_extend(self.auto_extend.unwrap_or(false))
            .fair(self.fair.unwrap_or(false));
        if let Some(w) = opt_millis("wait", self.wait)? {
            options = options.wait(w);
        }
        if let Some(d) = opt_millis("maxHold", self.max_hold)? {
            options = options.max_hold(d);
        }
        if let Some(d) = opt_millis("minHold", self.min_hold)? {
            options = options.min_hold(d);
        }
        if let Some(d) = opt_millis("renewEvery", self.renew_every)? {
            options = options.renew_every(d);
        }
        if self.owner.unwrap_or(true) || self.owner_label.is_some() {
            let mut record = record.clone();
            if let Some(label) = &self.owner_label {
                record = record.label(label.clone()).js()?;
            }
            options = options.owner(record);
        }
        options.validate().js()?;
        Ok(options)
    }
}
