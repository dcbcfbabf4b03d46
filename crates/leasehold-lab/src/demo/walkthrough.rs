//! `src/patterns-locks.ts`, re-created with the library. The ten result lines are the seed's,
//! word for word; every value in them is what the server answered.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use anyhow::{Context, bail};
use leasehold::redis::FencedStore;
use leasehold::{LockGuard, LockOptions, LockToken, Locker, TryAcquire};

use super::{LATE, LOCK_KEY, RESOURCE_KEY, STALL, TTL_LONG, TTL_SHORT, del, get, redis_of};

/// How many workers go through `with_lock` at once.
const WORKERS: usize = 5;
/// How long each worker stays inside.
const WORK: Duration = Duration::from_millis(30);

pub(super) async fn run(client: &Locker, lua: &Locker) -> anyhow::Result<()> {
    basics(client).await?;
    say!(
        "# 2) the expiry bug: A's 200 ms lock expires while A works 300 ms; B takes the lock; \
         100 ms later A releases"
    );
    say!("plain DEL release:");
    expiry(client, Release::PlainDel).await?;
    say!("token-checked release:");
    expiry(client, Release::TokenChecked).await?;
    lua_release(lua).await?;
    fencing(client).await?;
    workers(client).await
}

/// 0 if the lock was not ours (the seed's scripts return 0), 1 if released.
fn zero_one(result: leasehold::Result<()>) -> anyhow::Result<u8> {
    match result {
        Ok(()) => Ok(1),
        Err(leasehold::Error::NotHeld { .. }) => Ok(0),
        Err(e) => Err(e.into()),
    }
}

/// Releases what a guard still holds; a lock that was already lost is fine here.
async fn finish(guard: Option<LockGuard>) -> anyhow::Result<()> {
    match guard {
        Some(g) => zero_one(g.release().await).map(drop),
        None => Ok(()),
    }
}

fn needed(attempt: TryAcquire, who: &str) -> anyhow::Result<LockGuard> {
    match attempt {
        TryAcquire::Acquired(g) => Ok(g),
        TryAcquire::Busy { .. } => {
            bail!("{who} could not take {LOCK_KEY:?}, which the demo had just deleted")
        }
    }
}

/// 1) One winner, the loser gets null, a wrong token cannot release, the right one can.
async fn basics(client: &Locker) -> anyhow::Result<()> {
    let mut conn = redis_of(client)?.connection();
    say!("# 1) one winner; a wrong token cannot release the lock, the holder's can");
    del(&mut conn, &[LOCK_KEY]).await?;
    let long = LockOptions::new(TTL_LONG);
    let a = client.try_acquire(LOCK_KEY, &long).await?;
    let b = client.try_acquire(LOCK_KEY, &long).await?;
    let b_shown = match &b {
        TryAcquire::Acquired(g) => g.token().expose().to_string(),
        TryAcquire::Busy { .. } => "null".to_string(),
    };
    say!(
        "A acquires: {} | B acquires while A holds it: {b_shown}",
        a.is_acquired()
    );
    finish(b.acquired()).await?;
    let a = needed(a, "A")?;
    let wrong = zero_one(
        client
            .release(LOCK_KEY, &LockToken::new("not-my-token")?)
            .await,
    )?;
    let right = zero_one(a.release().await)?;
    let now = get(&mut conn, LOCK_KEY).await?;
    say!(
        "release with wrong token -> {wrong} | with A token -> {right} | key now: {}",
        now.as_deref().unwrap_or("null")
    );
    Ok(())
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Release {
    PlainDel,
    TokenChecked,
}

/// 2) A's 200 ms lock expires while A works 300 ms; B takes it; 100 ms later A releases.
async fn expiry(client: &Locker, how: Release) -> anyhow::Result<()> {
    let mut conn = redis_of(client)?.connection();
    del(&mut conn, &[LOCK_KEY]).await?;
    let a = needed(
        client
            .try_acquire(LOCK_KEY, &LockOptions::new(TTL_SHORT))
            .await?,
        "A",
    )?;
    tokio::time::sleep(STALL).await; // A is slow; its lock has expired
    let b = client
        .try_acquire(LOCK_KEY, &LockOptions::new(TTL_LONG))
        .await?
        .acquired(); // B legitimately acquires
    tokio::time::sleep(LATE).await; // A finishes and releases
    match how {
        Release::PlainDel => {
            // A plain DEL, with a GET in the same transaction only to see whose lock it hit.
            let (was, deleted): (Option<String>, i64) = redis::pipe()
                .atomic()
                .get(LOCK_KEY)
                .del(LOCK_KEY)
                .query_async(&mut conn)
                .await?;
            let a_token = a.token().clone();
            // A bypassed the library, so its guard has nothing left to do.
            let _ = a.detach();
            let b_token = b.as_ref().map(|g| g.token().expose());
            let what = match was.as_deref() {
                _ if deleted == 0 => "deleted nothing".to_string(),
                Some(v) if Some(v) == b_token => "deleted B's lock".to_string(),
                Some(v) if v == a_token.expose() => "deleted its own lock".to_string(),
                _ => "deleted someone else's lock".to_string(),
            };
            say!("  A releases with plain DEL -> {what}");
        }
        Release::TokenChecked => {
            let released = zero_one(a.release().await)?;
            say!("  A releases with token check -> {released}");
        }
    }
    let c = client
        .try_acquire(LOCK_KEY, &LockOptions::new(TTL_LONG))
        .await?
        .acquired(); // C arrives while B is still working
    let b_holds = match &b {
        Some(g) => get(&mut conn, LOCK_KEY).await?.as_deref() == Some(g.token().expose()),
        None => false,
    };
    say!(
        "  C acquires while B is still inside its critical section: {} | B still holds it: {b_holds}",
        c.is_some()
    );
    // C first: B's release is token-checked, so it cannot touch C's lock either way.
    finish(c).await?;
    finish(b).await
}

/// 3) The Lua release (the pre-8.4 path) behaves the same.
async fn lua_release(lua: &Locker) -> anyhow::Result<()> {
    say!(
        "# 3) a second client forced to the Lua release: {}",
        redis_of(lua)?.release_strategy()
    );
    del(&mut redis_of(lua)?.connection(), &[LOCK_KEY]).await?;
    let t = needed(
        lua.try_acquire(LOCK_KEY, &LockOptions::new(TTL_LONG))
            .await?,
        "the Lua client",
    )?;
    let wrong = zero_one(lua.release(LOCK_KEY, &LockToken::new("nope")?).await)?;
    let right = zero_one(t.release().await)?;
    say!("Lua release wrong -> {wrong} | right -> {right}");
    Ok(())
}

/// 4) Fencing: the lock issues increasing numbers, the resource rejects stale ones.
async fn fencing(client: &Locker) -> anyhow::Result<()> {
    let mut conn = redis_of(client)?.connection();
    say!(
        "# 4) fencing: A (200 ms lock) stalls 300 ms; B takes the lock; the resource refuses A's \
         stale number"
    );
    del(
        &mut conn,
        &[
            LOCK_KEY.to_string(),
            leasehold::redis::fence_key(LOCK_KEY),
            RESOURCE_KEY.to_string(),
        ],
    )
    .await?;
    let a = needed(
        client
            .try_acquire(LOCK_KEY, &LockOptions::new(TTL_SHORT).fencing(true))
            .await?,
        "A",
    )?;
    let fence_a = a.fence().context("no fencing token for A")?;
    tokio::time::sleep(STALL).await; // A stalls (GC pause, slow network); its lock expires
    let b = needed(
        client
            .try_acquire(LOCK_KEY, &LockOptions::new(TTL_LONG).fencing(true))
            .await?,
        "B",
    )?;
    let fence_b = b.fence().context("no fencing token for B")?;
    let store = FencedStore::new(conn.clone());
    let b_wrote = store
        .write(RESOURCE_KEY, &fence_b, "B")
        .await?
        .is_accepted();
    let a_wrote = store
        .write(RESOURCE_KEY, &fence_a, "A")
        .await?
        .is_accepted();
    let value = store
        .read(RESOURCE_KEY)
        .await?
        .map(|v| String::from_utf8_lossy(&v.value).into_owned())
        .unwrap_or_default();
    say!(
        "fencing: B writes with {} -> {b_wrote} | A wakes up and writes with {} -> {a_wrote} | value = {value}",
        fence_b.number(),
        fence_a.number()
    );
    finish(Some(b)).await?;
    finish(Some(a)).await
}

/// 5) Five workers through `with_lock` never overlap.
async fn workers(client: &Locker) -> anyhow::Result<()> {
    say!(
        "# 5) {WORKERS} concurrent workers through with_lock (wait for the lock, work {} ms, \
         always release)",
        WORK.as_millis()
    );
    del(&mut redis_of(client)?.connection(), &[LOCK_KEY]).await?;
    let inside = Arc::new(AtomicUsize::new(0));
    let max_inside = Arc::new(AtomicUsize::new(0));
    let mut set = tokio::task::JoinSet::new();
    for _ in 0..WORKERS {
        let client = client.clone();
        let inside = Arc::clone(&inside);
        let max_inside = Arc::clone(&max_inside);
        set.spawn(async move {
            let options = LockOptions::new(Duration::from_secs(5)).wait(Duration::from_secs(5));
            client
                .with_lock(LOCK_KEY, &options, |_lease| async move {
                    let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                    max_inside.fetch_max(now, Ordering::SeqCst);
                    tokio::time::sleep(WORK).await;
                    inside.fetch_sub(1, Ordering::SeqCst);
                })
                .await
        });
    }
    let mut through = 0;
    while let Some(joined) = set.join_next().await {
        match joined.context("a worker panicked")? {
            Ok(()) => through += 1,
            // The seed's helper returns null when its deadline passes; count it, go on.
            Err(leasehold::Error::NotAcquired { .. }) => {}
            Err(e) => return Err(e.into()),
        }
    }
    say!(
        "{WORKERS} workers through withLock: max inside the critical section at once = {}",
        max_inside.load(Ordering::SeqCst)
    );
    say!("# {through} of {WORKERS} workers got the lock");
    Ok(())
}
