//! Tracing spans (`leasehold::KeyInSpans`, src/core/trace.rs): each operation through a
//! `Locker`, a primitive's handle or a guard makes one span with OpenTelemetry's attributes
//! and its outcome; keys are shown as the policy says; tokens never appear.

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use leasehold::{Error, KeyInSpans, LockOptions, LockToken, Locker, set_key_in_spans};
use leasehold_harness::{Server, ServerOptions, server_test};
use tracing::Metadata;
use tracing::span::{Attributes, Id, Record};
use tracing::subscriber::Interest;
use tracing_subscriber::layer::{Context, SubscriberExt};

/// A closed span: its name (`otel.name`) and every field recorded on it.
type Fields = HashMap<String, String>;

/// The spans of one thread that asked for them ([`Spans::capture`]).
#[derive(Clone, Default)]
struct Spans {
    closed: Arc<Mutex<Vec<Fields>>>,
}

struct Visitor<'a>(&'a mut Fields);

impl tracing::field::Visit for Visitor<'_> {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        self.0.insert(
            field.name().to_string(),
            format!("{value:?}").trim_matches('"').into(),
        );
    }

    fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
        self.0.insert(field.name().to_string(), value.to_string());
    }
}

thread_local! {
    /// Where this thread's spans go, while a test captures them.
    static CAPTURE: RefCell<Option<Spans>> = const { RefCell::new(None) };
}

/// The one process-wide layer: a span opened on a capturing thread is recorded for that
/// thread's [`Spans`]. Not a thread-scoped subscriber per test: tracing caches each callsite's
/// interest process-wide, and a callsite first reached on another test's thread while a
/// thread-scoped subscriber was being set could stay cached as of no interest to it (the test
/// then saw no span at all).
#[derive(Default)]
struct Router {
    open: Mutex<HashMap<u64, (Spans, Fields)>>,
}

impl<S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>>
    tracing_subscriber::Layer<S> for Router
{
    /// The library's operation spans only (target `leasehold`): every other span and event of
    /// every test in this binary stays disabled where it is written, as without a subscriber.
    fn register_callsite(&self, metadata: &'static Metadata<'static>) -> Interest {
        match metadata.is_span() && metadata.target() == "leasehold" {
            true => Interest::always(),
            false => Interest::never(),
        }
    }

    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, _: Context<'_, S>) {
        let Some(spans) = CAPTURE.with(|c| c.borrow().clone()) else {
            return;
        };
        let mut fields = Fields::new();
        attrs.record(&mut Visitor(&mut fields));
        self.open
            .lock()
            .unwrap()
            .insert(id.into_u64(), (spans, fields));
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, _: Context<'_, S>) {
        if let Some((_, fields)) = self.open.lock().unwrap().get_mut(&id.into_u64()) {
            values.record(&mut Visitor(fields));
        }
    }

    fn on_close(&self, id: Id, _: Context<'_, S>) {
        if let Some((spans, fields)) = self.open.lock().unwrap().remove(&id.into_u64()) {
            spans.closed.lock().unwrap().push(fields);
        }
    }
}

/// Ends this thread's capture when dropped.
struct Capturing;

impl Drop for Capturing {
    fn drop(&mut self) {
        CAPTURE.with(|c| c.borrow_mut().take());
    }
}

impl Spans {
    /// Collects the spans of this thread while the guard lives.
    fn capture() -> (Spans, Capturing) {
        static INSTALLED: OnceLock<()> = OnceLock::new();
        INSTALLED.get_or_init(|| {
            let subscriber = tracing_subscriber::registry().with(Router::default());
            tracing::subscriber::set_global_default(subscriber)
                .expect("no other global subscriber in this test binary");
        });
        let spans = Spans::default();
        CAPTURE.with(|c| *c.borrow_mut() = Some(spans.clone()));
        (spans, Capturing)
    }

    /// Takes the spans of this module closed so far, oldest first (the Redis client's own
    /// inner spans, which carry no `otel.name`, are left out).
    fn take(&self) -> Vec<Fields> {
        let all = std::mem::take(&mut *self.closed.lock().unwrap());
        all.into_iter()
            .filter(|s| s.contains_key("otel.name"))
            .collect()
    }

    /// The one span closed since the last take, named `name`.
    #[track_caller]
    fn one(&self, name: &str) -> Fields {
        let mut spans = self.take();
        assert_eq!(spans.len(), 1, "{name}: {spans:?}");
        let span = spans.remove(0);
        assert_eq!(
            span.get("otel.name").map(String::as_str),
            Some(name),
            "{span:?}"
        );
        assert_eq!(span["otel.kind"], "client", "{span:?}");
        span
    }
}

/// Runs `test` on a current-thread runtime with this thread's spans captured, so that every
/// span it makes is seen (a worker thread's would not be).
fn on_this_thread<F: std::future::Future<Output = ()>>(test: impl FnOnce(Spans) -> F) {
    let (spans, _guard) = Spans::capture();
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(test(spans));
}

fn long() -> LockOptions {
    LockOptions::new(Duration::from_secs(60)).fencing(true)
}

/// The spans of one round of operations on `key`, and no token in any of them.
async fn operations_are_spanned(locker: &Locker, spans: &Spans, key: &str, db: Option<&str>) {
    let backend = locker.backend();
    let guard = locker.acquire(key, &long()).await.unwrap();
    let token = guard.token().expose().to_string();
    let acquired = spans.one("leasehold.acquire");
    assert_eq!(acquired["leasehold.outcome"], "acquired");
    assert_eq!(
        acquired["leasehold.fencing_token"],
        guard.fencing_token().unwrap().to_string()
    );
    assert_eq!(acquired["leasehold.backend"], backend);
    assert_eq!(acquired.get("db.system.name").map(String::as_str), db);
    assert!(!acquired.contains_key("otel.status_code"), "{acquired:?}");

    let busy = locker.try_acquire(key, &long()).await.unwrap();
    assert!(busy.acquired().is_none());
    let span = spans.one("leasehold.try_acquire");
    assert_eq!(span["leasehold.outcome"], "busy");

    // A wait that reaches its deadline: an outcome, not an error of the call.
    let waited = locker
        .acquire(key, &long().wait(Duration::from_millis(50)))
        .await;
    assert!(
        matches!(waited, Err(Error::NotAcquired { .. })),
        "{waited:?}"
    );
    let span = spans.one("leasehold.acquire");
    assert_eq!(span["leasehold.outcome"], "not_acquired");
    assert_eq!(span["error.type"], "NotAcquired");
    assert!(span["leasehold.attempts"].parse::<u32>().unwrap() >= 1);
    assert!(!span.contains_key("otel.status_code"), "{span:?}");

    // A release with a token that holds nothing: an error.
    let stranger = LockToken::new("not-the-holder").unwrap();
    assert!(locker.release(key, &stranger).await.is_err());
    let span = spans.one("leasehold.release");
    assert_eq!(span["leasehold.outcome"], "not_held");
    assert_eq!(span["otel.status_code"], "ERROR");
    assert_eq!(span["error.type"], "NotHeld");

    guard.extend(Duration::from_secs(60)).await.unwrap();
    assert_eq!(
        spans.one("leasehold.extend")["leasehold.outcome"],
        "extended"
    );
    guard.release().await.unwrap();
    assert_eq!(spans.one("leasehold.release")["leasehold.outcome"], "done");

    let state = locker.inspect(key).await.unwrap();
    assert!(state.holder.is_none());
    assert_eq!(spans.one("leasehold.inspect")["leasehold.outcome"], "free");
    for span in spans.take() {
        assert!(!format!("{span:?}").contains(&token), "a token in {span:?}");
    }
}

/// The key policy: plain, hashed (the same name for the same key, not the key), omitted. The
/// only test that sets it (it is process-wide); the others do not look at keys.
#[test]
fn keys_are_shown_hashed_or_omitted_as_asked() {
    on_this_thread(|spans| async move {
        let locker = Locker::connect("memory://tracing-keys").await.unwrap();
        let key = "customer:4242:invoice";
        let inspect = |spans: &Spans| spans.one("leasehold.inspect");
        locker.inspect(key).await.unwrap();
        assert_eq!(inspect(&spans)["leasehold.key"], key);

        set_key_in_spans(KeyInSpans::Hashed);
        locker.inspect(key).await.unwrap();
        let hashed = inspect(&spans)["leasehold.key"].clone();
        locker.inspect(key).await.unwrap();
        let again = inspect(&spans)["leasehold.key"].clone();
        locker.inspect("another").await.unwrap();
        let other = inspect(&spans)["leasehold.key"].clone();
        set_key_in_spans(KeyInSpans::Omitted);
        locker.inspect(key).await.unwrap();
        let omitted = inspect(&spans);
        set_key_in_spans(KeyInSpans::Plain);

        assert!(hashed.starts_with('#') && hashed.len() == 17, "{hashed}");
        assert!(!hashed.contains("4242"), "{hashed}");
        assert_eq!(hashed, again, "the same key, the same name");
        assert_ne!(hashed, other);
        assert!(!omitted.contains_key("leasehold.key"), "{omitted:?}");
    });
}

#[test]
fn memory_operations_are_spanned() {
    on_this_thread(|spans| async move {
        let locker = Locker::connect("memory://tracing").await.unwrap();
        operations_are_spanned(&locker, &spans, "tracing:memory", None).await;
        // A primitive's handle names its operation and its backend.
        let permits = locker.semaphore("tracing:permits", 2).unwrap();
        let permit = permits
            .acquire(&LockOptions::new(Duration::from_secs(60)))
            .await
            .unwrap();
        let span = spans.one("leasehold.semaphore.acquire");
        assert_eq!(span["leasehold.backend"], "memory");
        assert_eq!(span["leasehold.outcome"], "acquired");
        permit.release().await.unwrap();
        spans.take();
    });
}

server_test!(async fn redis_operations_are_spanned(bin) {
    let server = Server::start(&bin, &ServerOptions::new()).unwrap();
    // On this test's own thread: a current-thread runtime, so every span is seen here.
    let url = server.url();
    std::thread::spawn(move || {
        on_this_thread(|spans| async move {
            let locker = Locker::connect(&url).await.unwrap();
            spans.take();
            operations_are_spanned(&locker, &spans, "tracing:redis", Some("redis")).await;
        });
    })
    .join()
    .unwrap();
});
