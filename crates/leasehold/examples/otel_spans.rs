//! Exports leasehold's tracing spans through OpenTelemetry: a `tracing-opentelemetry` layer
//! turns each span (`leasehold.acquire`, `leasehold.release`, ...) into an OpenTelemetry span
//! with its attributes (`db.system.name`, `leasehold.key`, `leasehold.outcome`,
//! `leasehold.fencing_token`, `error.type`, ...; see `leasehold::KeyInSpans`). This example
//! prints them with the stdout exporter; a real service would use an OTLP exporter
//! (`opentelemetry-otlp`) towards its collector instead, with the same layer.
//!
//! ```text
//! cargo run -p leasehold --example otel_spans -- redis://127.0.0.1:6379/
//! cargo run -p leasehold --example otel_spans            # memory://, no server needed
//! ```

use std::time::Duration;

use leasehold::{KeyInSpans, LockOptions, Locker, set_key_in_spans};
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing_subscriber::layer::SubscriberExt;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "memory://".into());
    let provider = SdkTracerProvider::builder()
        .with_simple_exporter(opentelemetry_stdout::SpanExporter::default())
        .build();
    let layer = tracing_opentelemetry::layer().with_tracer(provider.tracer("leasehold-example"));
    tracing::subscriber::set_global_default(tracing_subscriber::registry().with(layer))?;
    // Keys may name customers or files: hash them in what leaves the process.
    set_key_in_spans(KeyInSpans::Hashed);

    let locks = Locker::connect(&url).await?;
    let options = LockOptions::new(Duration::from_secs(10)).fencing(true);
    let fence = locks
        .with_lock("reports:daily", &options, |lease| async move {
            lease.fencing_token()
        })
        .await?;
    println!("held with fencing number {fence:?}; the spans follow");
    provider.shutdown()?;
    Ok(())
}
