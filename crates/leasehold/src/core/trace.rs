//! Tracing spans for lock operations, named and attributed after OpenTelemetry's semantic
//! conventions where they apply, so a `tracing-opentelemetry` layer exports them as they are
//! (see `examples/otel_spans.rs`).
//!
//! Every span is at `INFO`, target `leasehold`, named `leasehold.<operation>` (`acquire`,
//! `try_acquire`, `release`, `extend`, `inspect`, `raise_fencing_counter`, and the primitives'
//! `semaphore.acquire`, `rwlock.read`, `rwlock.write`, `election.campaign`, ...), with:
//!
//! | field | meaning |
//! |---|---|
//! | `otel.kind` | `client` (OpenTelemetry's span kind for a call to a remote service) |
//! | `otel.status_code` | `ERROR` when the operation failed (not for a busy lock, nor a wait that reached its deadline) |
//! | `error.type` | the [`Error`] variant (`NotHeld`, `Connection`, ...: [`Error::variant_name`]) |
//! | `db.system.name` | `redis`, `etcd` or `postgresql` (absent for `memory` and `file`) |
//! | `leasehold.backend` | [`Backend::name`] |
//! | `leasehold.key` | the key, as [`KeyInSpans`] says (plain by default) |
//! | `leasehold.outcome` | `acquired`, `busy`, `not_acquired`, `released`, `extended`, `not_held`, `error`, ... |
//! | `leasehold.fencing_token` | the fencing number issued, when there is one |
//! | `leasehold.attempts` | attempts made by a wait that ended without the lock |
//!
//! Spans are made by [`Locker`](crate::Locker), the primitives' handles
//! ([`Semaphore`](crate::Semaphore), [`RwLock`](crate::RwLock), [`Election`](crate::Election))
//! and [`LockGuard`](crate::LockGuard)'s `release` and `extend`; a backend client used
//! directly ([`RedisClient`](crate::redis::RedisClient)) makes the guard's spans only. Tokens never
//! appear in spans.

use std::future::Future;
use std::hash::BuildHasher;
use std::sync::LazyLock;
use std::sync::atomic::{AtomicU8, Ordering};

use tracing::Instrument;
use tracing::field::Empty;

use crate::core::error::{Error, Result};
use crate::core::kind::Backend;

/// How a lock key appears in spans: keys can name customers, files or jobs that a trace
/// collector should not see.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum KeyInSpans {
    /// As it is (the default).
    #[default]
    Plain,
    /// As `#` and 16 hex digits of a hash keyed per process: the same key has the same
    /// name within a process, and the name cannot be reversed by trying likely keys from
    /// outside it.
    Hashed,
    /// Not at all.
    Omitted,
}

static KEY_IN_SPANS: AtomicU8 = AtomicU8::new(0);

/// Sets how every span of this process shows lock keys (see [`KeyInSpans`]).
pub fn set_key_in_spans(policy: KeyInSpans) {
    let n = match policy {
        KeyInSpans::Plain => 0,
        KeyInSpans::Hashed => 1,
        KeyInSpans::Omitted => 2,
    };
    KEY_IN_SPANS.store(n, Ordering::Relaxed);
}

/// The key as the current policy shows it (`None`: omitted).
pub(crate) fn shown_key(key: &str) -> Option<String> {
    static HASHER: LazyLock<std::hash::RandomState> = LazyLock::new(Default::default);
    match KEY_IN_SPANS.load(Ordering::Relaxed) {
        0 => Some(key.to_string()),
        1 => Some(format!("#{:016x}", HASHER.hash_one(key))),
        _ => None,
    }
}

/// OpenTelemetry's `db.system.name` for `backend`, where one applies.
fn db_system(backend: Option<Backend>) -> Option<&'static str> {
    match backend? {
        Backend::Redis | Backend::Redlock => Some("redis"),
        Backend::Etcd => Some("etcd"),
        Backend::Postgres | Backend::PostgresLease => Some("postgresql"),
        Backend::Memory | Backend::File => None,
    }
}

/// The span of `operation` on `key` (`backend`: `None` where the caller does not know it, as a
/// guard does not).
pub(crate) fn span(operation: &'static str, backend: Option<Backend>, key: &str) -> tracing::Span {
    tracing::info_span!(
        target: "leasehold",
        "leasehold",
        otel.name = operation,
        otel.kind = "client",
        otel.status_code = Empty,
        error.type = Empty,
        db.system.name = db_system(backend),
        leasehold.backend = backend.map(Backend::name),
        leasehold.key = shown_key(key),
        leasehold.outcome = Empty,
        leasehold.fencing_token = Empty,
        leasehold.attempts = Empty,
    )
}

/// What a finished operation records in its span (implemented beside each result type, so
/// that this module imports none of them).
pub(crate) trait Traced {
    /// The outcome's name and the fencing number it issued, if any.
    fn outcome(&self) -> (&'static str, Option<u64>);
}

impl Traced for () {
    fn outcome(&self) -> (&'static str, Option<u64>) {
        ("done", None)
    }
}

/// A release that says whether it handed the lock to a waiter (a fair release).
impl Traced for bool {
    fn outcome(&self) -> (&'static str, Option<u64>) {
        match self {
            true => ("handed_over", None),
            false => ("done", None),
        }
    }
}

impl Traced for u32 {
    fn outcome(&self) -> (&'static str, Option<u64>) {
        ("counted", None)
    }
}

/// An extension's new validity.
impl Traced for std::time::Instant {
    fn outcome(&self) -> (&'static str, Option<u64>) {
        ("extended", None)
    }
}

/// A fencing counter's value.
impl Traced for u64 {
    fn outcome(&self) -> (&'static str, Option<u64>) {
        ("raised", Some(*self))
    }
}

impl<T: Traced> Traced for Option<T> {
    fn outcome(&self) -> (&'static str, Option<u64>) {
        self.as_ref().map_or(("none", None), Traced::outcome)
    }
}

/// Runs `work` in `span` and records how it ended.
///
/// A combinator rather than an `async fn`: an `async fn` keeps its `work` argument and the
/// instrumented future it moves it into side by side in its state, so every traced operation's
/// future was twice the size of its work (a fair release's 4 KB instead of 2).
pub(crate) fn traced<T: Traced>(
    span: tracing::Span,
    work: impl Future<Output = Result<T>>,
) -> impl Future<Output = Result<T>> {
    use futures_util::FutureExt;
    work.instrument(span.clone()).map(move |result| {
        record_outcome(&span, &result);
        result
    })
}

/// Records in `span` how its operation ended.
fn record_outcome<T: Traced>(span: &tracing::Span, result: &Result<T>) {
    match result {
        Ok(value) => {
            let (outcome, fencing) = value.outcome();
            span.record("leasehold.outcome", outcome);
            // As a signed integer where it fits (every backend's numbers do): exporters turn
            // an unsigned one into a string.
            if let Some(n) = fencing {
                match i64::try_from(n) {
                    Ok(signed) => span.record("leasehold.fencing_token", signed),
                    Err(_) => span.record("leasehold.fencing_token", n),
                };
            }
        }
        Err(e) => {
            let outcome = match e {
                Error::NotAcquired { attempts, .. } => {
                    span.record("leasehold.attempts", attempts);
                    "not_acquired"
                }
                Error::NotHeld { .. } => "not_held",
                _ => "error",
            };
            span.record("leasehold.outcome", outcome);
            span.record("error.type", e.variant_name());
            // A wait that ended without the lock is an outcome the caller asked for (a
            // deadline), not a failure of the call.
            if !matches!(e, Error::NotAcquired { .. }) {
                span.record("otel.status_code", "ERROR");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::traced;
    use crate::core::error::Result;

    /// Traced, a future holds its work once (plus the span and the recording): as an `async fn`,
    /// `traced` held it twice (the argument, and the instrumented future it was moved into).
    #[test]
    fn a_traced_future_holds_its_work_once() {
        let work = async {
            let state = [7u8; 4096];
            std::future::ready(()).await;
            Result::Ok(state.iter().map(|&b| u64::from(b)).sum::<u64>())
        };
        let work_size = std::mem::size_of_val(&work);
        assert!(
            work_size >= 4096,
            "the work holds its state across the await"
        );
        let traced = traced(tracing::Span::none(), work);
        let traced_size = std::mem::size_of_val(&traced);
        assert!(
            traced_size < work_size + 256,
            "traced: {traced_size} bytes for work of {work_size}"
        );
    }
}
