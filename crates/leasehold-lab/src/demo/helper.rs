//! The seed's exercise: an "AI-written" lock helper that stores the constant `'1'` and releases
//! with a plain `DEL` in `finally`, run through the same expiry as the walkthrough.
//!
//! ```ts
//! async function withLock(name: string, work: () => Promise<void>) {
//!   const ok = await redis.set(`lock:${name}`, '1', 'PX', 10_000, 'NX');
//!   if (!ok) throw new Error('busy');
//!   try { await work(); } finally { await redis.del(`lock:${name}`); }
//! }
//! ```

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use leasehold::redis::{ClientConnection, RedisClient};
use tokio::sync::oneshot;

use super::{HELPER_KEY, STALL, TTL_LONG, TTL_SHORT, del};

/// The helper, with raw commands, printing each command and the server's reply. Returns the
/// reply to the `DEL` in `finally`, or `None` when the `SET` found the lock busy (where the seed
/// throws `busy`).
async fn with_lock<F, Fut>(
    mut conn: ClientConnection,
    who: &'static str,
    ttl_ms: u128,
    work: F,
) -> anyhow::Result<Option<i64>>
where
    F: FnOnce() -> Fut,
    Fut: Future<Output = ()>,
{
    let ok: Option<String> = redis::cmd("SET")
        .arg(HELPER_KEY)
        .arg("1")
        .arg("PX")
        .arg(ttl_ms as u64)
        .arg("NX")
        .query_async(&mut conn)
        .await?;
    let Some(ok) = ok else {
        say!("  {who}: SET {HELPER_KEY} 1 PX {ttl_ms} NX -> (nil): busy");
        return Ok(None);
    };
    say!("  {who}: SET {HELPER_KEY} 1 PX {ttl_ms} NX -> {ok}");
    work().await;
    let deleted: i64 = redis::cmd("DEL")
        .arg(HELPER_KEY)
        .query_async(&mut conn)
        .await?;
    say!("  {who}'s finally: DEL {HELPER_KEY} -> (integer) {deleted}");
    Ok(Some(deleted))
}

pub(super) async fn run(client: &RedisClient) -> anyhow::Result<()> {
    say!(
        "# The chapter's \"AI-written helper\": SET lock:<name> '1' PX ttl NX, work, DEL in finally."
    );
    say!(
        "# Same expiry: A's 200 ms lock runs out while A works 300 ms; B comes in; A's finally \
         runs while B works; then C arrives."
    );
    say!("AI-written helper:");
    let conn = client.connection();
    del(&mut conn.clone(), &[HELPER_KEY]).await?;

    let (a_stalled, a_stalled_rx) = oneshot::channel::<()>();
    let (b_inside, b_inside_rx) = oneshot::channel::<()>();
    let (c_done, c_done_rx) = oneshot::channel::<()>();
    let b_working = Arc::new(AtomicBool::new(false));

    // A: a 200 ms lock, 300 ms of work; it finishes only once B is inside.
    let a = tokio::spawn(with_lock(
        conn.clone(),
        "A",
        TTL_SHORT.as_millis(),
        move || async move {
            tokio::time::sleep(STALL).await;
            let _ = a_stalled.send(());
            let _ = b_inside_rx.await;
        },
    ));
    let _ = a_stalled_rx.await;

    // B: takes the (expired) lock and works until C has come and gone.
    let b_flag = Arc::clone(&b_working);
    let b = tokio::spawn(with_lock(
        conn.clone(),
        "B",
        TTL_LONG.as_millis(),
        move || async move {
            b_flag.store(true, Ordering::SeqCst);
            let _ = b_inside.send(());
            let _ = c_done_rx.await;
            b_flag.store(false, Ordering::SeqCst);
        },
    ));

    // A's work ends; its finally deletes whatever is at the key.
    let a_deleted = a.await??;

    // C arrives while B is still working.
    let c_saw_b = Arc::new(AtomicBool::new(false));
    let c_flag = Arc::clone(&c_saw_b);
    let b_flag = Arc::clone(&b_working);
    let c = with_lock(
        conn.clone(),
        "C",
        TTL_LONG.as_millis(),
        move || async move {
            c_flag.store(b_flag.load(Ordering::SeqCst), Ordering::SeqCst);
        },
    )
    .await?;
    let _ = c_done.send(());
    let b_acquired = b.await??.is_some();

    let overlap = c.is_some() && c_saw_b.load(Ordering::SeqCst);
    let cause = if overlap && b_acquired && a_deleted == Some(1) {
        " (A's DEL deleted B's lock: the value '1' cannot say whose lock it is)"
    } else {
        ""
    };
    say!("  C got in while B was still inside its critical section: {overlap}{cause}");
    if overlap {
        say!("# two holders at once: the helper fails exactly like the plain DEL release above");
    }
    del(&mut conn.clone(), &[HELPER_KEY]).await
}
