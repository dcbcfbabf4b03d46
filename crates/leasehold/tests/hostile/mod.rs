//! The checks of the hostile-server fuzzing, shared by `tests/hostile_server.rs` (a seeded
//! loop) and the `cargo fuzz` target in `fuzz/` (which includes this file by its path).
#![allow(dead_code)]

use std::future::Future;
use std::time::Duration;

use leasehold::{ClientOptions, Error, LockGuard, LockOptions, LockToken, Locker, TryAcquire};
use leasehold_harness::{Exchange, Grant, HostileServer, ReplyKind};

/// Only guards against a hang: every operation is bounded by a few response timeouts.
pub const HANG_GUARD: Duration = Duration::from_secs(10);
pub const TTL: Duration = Duration::from_secs(30);

/// Runs `op` in its own task: a panic comes back as a failure, and so does a hang.
pub async fn guarded<T: Send + 'static>(
    op: &str,
    work: impl Future<Output = T> + Send + 'static,
) -> Result<T, String> {
    let task = tokio::spawn(work);
    match tokio::time::timeout(HANG_GUARD, task).await {
        Err(_) => Err(format!("{op}: still running after {HANG_GUARD:?} (hung)")),
        Ok(Err(join)) if join.is_panic() => Err(format!("{op}: panicked: {join}")),
        Ok(Err(join)) => Err(format!("{op}: task failed: {join}")),
        Ok(Ok(v)) => Ok(v),
    }
}

/// The exchanges that carried a command about `key`.
pub fn about<'a>(window: &'a [Exchange], key: &'a str) -> impl Iterator<Item = &'a Exchange> + 'a {
    window
        .iter()
        .filter(move |e| e.command.iter().skip(1).any(|a| a == key.as_bytes()))
}

#[derive(Default)]
pub struct Stats {
    pub seeds: u64,
    pub connected: u64,
    pub operations: u64,
    pub granted: u64,
}

impl Stats {
    pub fn add(&mut self, o: &Stats) {
        self.seeds += o.seeds;
        self.connected += o.connected;
        self.operations += o.operations;
        self.granted += o.granted;
    }
}

/// Connects a client with `timeout` as its connect and response timeouts (over RESP3 if
/// `resp3`, which starts with `HELLO 3`), and runs `rounds` of lock operations, checking each
/// outcome against what the server said.
pub async fn drive(
    server: &HostileServer,
    timeout: Duration,
    rounds: u32,
    resp3: bool,
    stats: &mut Stats,
) -> Result<(), String> {
    let url = if resp3 {
        format!("{}?protocol=resp3", server.url())
    } else {
        server.url()
    };
    let options = ClientOptions::new()
        .connect_timeout(timeout)
        .response_timeout(timeout);
    let connect = async move { Locker::connect_with(&url, options).await };
    let client = match guarded("connect", connect).await? {
        Ok(c) => c,
        Err(e) => return expect_typed("connect", &e),
    };
    stats.connected += 1;
    for round in 0..rounds {
        let key = |op: &str| format!("{op}:{round}");
        let plain = LockOptions::new(TTL);
        let fenced = LockOptions::new(TTL).fencing(true);
        let waiting = LockOptions::new(TTL).wait(timeout);
        for (name, opts) in [("try", &plain), ("fenced", &fenced)] {
            let k = key(name);
            let mark = server.log_len();
            let c = client.clone();
            let o = opts.clone();
            let kk = k.clone();
            let result = guarded(name, async move { c.try_acquire(&kk, &o).await }).await?;
            stats.operations += 1;
            let window = server.log_since(mark);
            match result {
                Ok(TryAcquire::Acquired(g)) => {
                    stats.granted += 1;
                    check_grant(name, &g, &window)?;
                    use_guard(server, g, stats).await?;
                }
                Ok(_) => {}
                Err(e) => check_error(name, &k, &e, &window)?,
            }
        }
        let k = key("wait");
        let mark = server.log_len();
        let (c, kk, o) = (client.clone(), k.clone(), waiting.clone());
        let result = guarded("acquire", async move { c.acquire(&kk, &o).await }).await?;
        stats.operations += 1;
        let window = server.log_since(mark);
        match result {
            Ok(g) => {
                stats.granted += 1;
                check_grant("acquire", &g, &window)?;
                use_guard(server, g, stats).await?;
            }
            Err(e) => check_error("acquire", &k, &e, &window)?,
        }
        // A release and an extend of a token never granted: only the server's word for it.
        let token = LockToken::random();
        for op in ["release", "extend"] {
            let k = key(op);
            let mark = server.log_len();
            let (c, kk, t) = (client.clone(), k.clone(), token.clone());
            let result = guarded(op, async move {
                if op == "release" {
                    c.release(&kk, &t).await
                } else {
                    c.extend(&kk, &t, TTL).await
                }
            })
            .await?;
            stats.operations += 1;
            let window = server.log_since(mark);
            match result {
                Ok(()) => check_confirmed(op, &k, &window)?,
                Err(e) => check_error(op, &k, &e, &window)?,
            }
        }
        let k = key("inspect");
        let mark = server.log_len();
        let (c, kk) = (client.clone(), k.clone());
        let result = guarded("inspect", async move { c.inspect(&kk).await }).await?;
        stats.operations += 1;
        if let Err(e) = result {
            check_error("inspect", &k, &e, &server.log_since(mark))?;
        }
        for primitive in ["fair", "permit", "read", "write"] {
            let name = key(primitive);
            let mark = server.log_len();
            let (c, n, o) = (client.clone(), name.clone(), plain.clone());
            let result = guarded(primitive, async move {
                match primitive {
                    "fair" => c.try_acquire(&n, &o.fair(true)).await,
                    "permit" => c.semaphore(&n, 2)?.try_acquire(&o).await,
                    "read" => c.rwlock(&n)?.try_read(&o).await,
                    _ => c.rwlock(&n)?.try_write(&o).await,
                }
            })
            .await?;
            stats.operations += 1;
            match result {
                Ok(TryAcquire::Acquired(g)) => {
                    stats.granted += 1;
                    // Their scripts name derived keys: any grant of this operation will do.
                    if !server.log_since(mark).iter().any(|e| e.grant.is_some()) {
                        return Err(format!("{primitive}: held, but the server granted nothing"));
                    }
                    if let Err(e) = guarded("release", g.release()).await? {
                        expect_typed(primitive, &e)?;
                    }
                }
                Ok(_) => {}
                Err(e) => expect_typed(primitive, &e)?,
            }
        }
    }
    Ok(())
}

/// Extends and releases a granted lock, checking each outcome against the server's word.
async fn use_guard(
    server: &HostileServer,
    guard: LockGuard,
    stats: &mut Stats,
) -> Result<(), String> {
    let key = guard.key().to_string();
    let mark = server.log_len();
    let (guard, result) = guarded("guard extend", async move {
        let r = guard.extend(TTL).await;
        (guard, r)
    })
    .await?;
    stats.operations += 1;
    let window = server.log_since(mark);
    match result {
        Ok(()) => check_confirmed("extend", &key, &window)?,
        Err(e) => check_error("extend", &key, &e, &window)?,
    }
    let mark = server.log_len();
    let result = guarded("guard release", guard.release()).await?;
    stats.operations += 1;
    let window = server.log_since(mark);
    match result {
        Ok(()) => check_confirmed("release", &key, &window),
        Err(e) => check_error("release", &key, &e, &window),
    }
}

/// A lock is only ever handed out on a grant the server really sent for its key, with the
/// fencing number the server issued.
fn check_grant(op: &str, guard: &LockGuard, window: &[Exchange]) -> Result<(), String> {
    let grants: Vec<Grant> = about(window, guard.key()).filter_map(|e| e.grant).collect();
    let fencing = guard.fencing_token();
    let backed = grants.iter().any(|g| match (g, fencing) {
        (Grant::Set, None) => true,
        (Grant::Script { number }, Some(f)) => {
            *number >= 1 && *number as u64 == f && f < leasehold::MAX_FENCING_NUMBER
        }
        (Grant::Script { .. }, None) => true,
        _ => false,
    });
    if backed {
        Ok(())
    } else {
        Err(format!(
            "{op}: the client holds {:?} (fencing {fencing:?}) but the server granted {grants:?}",
            guard.key()
        ))
    }
}

/// A release or extend reports success only if the server said so: `:1` from a script or
/// `DELEX`/`DELIFEQ`, `+OK` from `SET ... IFEQ`.
fn check_confirmed(op: &str, key: &str, window: &[Exchange]) -> Result<(), String> {
    let said_yes = about(window, key).any(|e| {
        e.reply_len == e.reply.len()
            && !matches!(e.kind, ReplyKind::TruncatedClose | ReplyKind::TruncatedHang)
            && (e.reply == b":1\r\n" || (e.name() == "SET" && e.reply == b"+OK\r\n"))
    });
    if said_yes {
        Ok(())
    } else {
        Err(format!(
            "{op} of {key:?} succeeded, but the server never confirmed it"
        ))
    }
}

/// Errors are typed; a connection error after the server received the command is ambiguous.
fn check_error(op: &str, key: &str, e: &Error, window: &[Exchange]) -> Result<(), String> {
    expect_typed(op, e)?;
    if op == "inspect" {
        return Ok(()); // a read: nothing to be ambiguous about
    }
    let own: Vec<&Exchange> = about(window, key).collect();
    // No readable answer to the first command that can change the key decides an acquisition
    // (nothing is retried after it; a later command about the key is the cleanup): the server
    // may have applied it. Reads before it (a waiter's subscriber reading the key's PTTL
    // before its attempt was sent) cannot grant anything.
    let Some(first) = own.iter().find(|x| !reads_only(x)) else {
        return Ok(()); // no write reached the server: either verdict is true
    };
    let acquisition = op.contains("acquire") || op == "try" || op == "fenced";
    if acquisition && !first.answered && !e.is_ambiguous() {
        return Err(format!(
            "{op}: no readable answer to {first}, but the error is not ambiguous: {e:?}"
        ));
    }
    // A release or extend is repeated once after a dropped connection: if any of its commands
    // got no readable answer, that one may have been applied, whatever the next one says
    // (but "not held", which is true by then).
    let unanswered = own.iter().find(|x| !x.answered);
    if let Some(lost) = unanswered
        && !acquisition
        && !e.is_ambiguous()
        && !e.is_not_held()
    {
        return Err(format!(
            "{op}: no readable answer to {lost}, but the error is not ambiguous: {e:?}"
        ));
    }
    Ok(())
}

/// Whether `x` only reads (or subscribes): it cannot take, release or extend a lock.
fn reads_only(x: &Exchange) -> bool {
    matches!(
        x.name().as_str(),
        "GET"
            | "PTTL"
            | "PEXPIRETIME"
            | "EXISTS"
            | "ZRANGE"
            | "ZSCORE"
            | "SUBSCRIBE"
            | "SSUBSCRIBE"
    )
}

fn expect_typed(op: &str, e: &Error) -> Result<(), String> {
    match e {
        Error::Connection { .. }
        | Error::Server { .. }
        | Error::UnexpectedReply { .. }
        | Error::NotHeld { .. }
        | Error::NotAcquired { .. }
        | Error::ExpiredOnArrival { .. } => Ok(()),
        other => Err(format!("{op}: an error of an unexpected kind: {other:?}")),
    }
}
