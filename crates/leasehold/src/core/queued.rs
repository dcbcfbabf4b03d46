//! A request's order on its connection, used to start what should follow it there.

use std::future::Future;
use std::pin::Pin;
use std::task::Poll;

/// `call` run until its first poll, which puts its request on the connection, then `then`, then
/// the rest of `call`: both answers.
///
/// **What `then` may rely on.** The library's Redis batching connection, the `redis` crate's
/// multiplexed connection and `tokio_postgres`'s client queue a request in order at its first
/// poll (while the connection is up), and a calling thread's Redis socket writes it then
/// (`redis::calling_thread`), so a request another task sends over the same connection after
/// `then` ran reaches the server after it, and the server runs them in that order. The order
/// is a hint, not a guarantee: the first poll may not get as far (the task's budget used up
/// by the runtime), and a request sent over another connection (a reconnection, another
/// thread's own socket) has no order with it. So `then` may only start what costs nothing
/// but time when the order is lost: an early handoff its release's reply confirms
/// (`redis::fair`), a waiter woken to attempt again (`RedisClient::release_raw`, a lease row's
/// release).
///
/// `call` comes pinned by the caller: taken by value, it would be held twice in this future
/// (as the argument and as the pinned local it is polled from), doubling the size of every
/// release's future, which a guard's release boxes on each call.
pub(crate) async fn queued_then<F: Future, T>(
    mut call: Pin<&mut F>,
    then: impl FnOnce() -> T,
) -> (F::Output, T) {
    let first = std::future::poll_fn(|cx| Poll::Ready(call.as_mut().poll(cx))).await;
    let then = then();
    let output = match first {
        Poll::Ready(output) => output,
        Poll::Pending => call.await,
    };
    (output, then)
}
