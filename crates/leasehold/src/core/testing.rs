//! What the library's own tests share (compiled for them only).

use std::time::{Duration, Instant};

/// Waits until `cond` holds (observed state, polled every 5 ms), or fails after a minute: the
/// bound only ends a test that would otherwise hang, it times nothing.
pub(crate) async fn until(what: &str, mut cond: impl FnMut() -> bool) {
    let start = Instant::now();
    while !cond() {
        assert!(start.elapsed() < Duration::from_secs(60), "never: {what}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}
