//! The backend-neutral core: errors, tokens, options, the lease and its guard, outcomes, the
//! contract every backend meets, and metrics. It imports nothing else of the crate.

pub(crate) mod acquire;
pub(crate) mod calling_thread;
pub(crate) mod driver;
pub(crate) mod error;
pub(crate) mod fence;
pub(crate) mod guard;
pub(crate) mod history;
pub(crate) mod kind;
pub(crate) mod listing;
pub mod metrics;
pub(crate) mod options;
pub(crate) mod outcome;
pub(crate) mod owner;
pub(crate) mod queued;
pub(crate) mod renew;
pub(crate) mod report;
pub(crate) mod sync;
#[cfg(test)]
pub(crate) mod testing;
pub(crate) mod throttle;
pub(crate) mod tls;
pub(crate) mod token;
pub(crate) mod trace;
pub(crate) mod url;
