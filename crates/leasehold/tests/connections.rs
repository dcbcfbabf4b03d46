//! Bringing your own connection, and what the library logs.

mod common;

use std::io::Write;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use leasehold::redis::{RedisClient, RedisOptions};
use leasehold::{LockOptions, LockToken, Locker};
use leasehold_harness::{Server, ServerOptions};

const LONG: Duration = Duration::from_secs(60);

leasehold_harness::server_test!(async fn wraps_a_users_connection_manager_and_multiplexed_connection(bin) {
    let server = Server::start(&bin, &ServerOptions::new()).unwrap();
    let redis_client = redis::Client::open(server.url()).unwrap();
    let manager = redis_client.get_connection_manager().await.unwrap();
    let multiplexed = redis_client.get_multiplexed_async_connection().await.unwrap();
    for client in [
        Locker::from(RedisClient::from_connection(manager).await.unwrap()),
        Locker::from(RedisClient::from_connection(multiplexed).await.unwrap()),
    ] {
        assert_eq!(client.as_redis().unwrap().server().version, bin.version.to_string());
        let g = client.try_acquire("own", &LockOptions::new(LONG)).await.unwrap().acquired().unwrap();
        assert!(!client.try_acquire("own", &LockOptions::new(LONG)).await.unwrap().is_acquired());
        g.release().await.unwrap();
    }
});

// `RedisOptions::batch_commands(false)` (public, and what a Redlock's nodes use): a
// standalone URL then gets the crate's `ConnectionManager` instead of the library's batching
// connection, and a client on it does what any client does: a plain lock taken, refused,
// extended, waited for and released; a fair lock handed from one such client to another's
// queued waiter.
leasehold_harness::server_test!(async fn without_batching_a_client_is_on_the_crates_connection_and_locks_as_usual(bin) {
    let server = Server::start(&bin, &ServerOptions::new()).unwrap();
    let url = server.url();
    let default = RedisClient::connect(&url).await.unwrap();
    assert_eq!(format!("{:?}", default.connection()), "ClientConnection::Batching");
    let options = RedisOptions::new().batch_commands(false);
    let a = RedisClient::connect_with(&url, options.clone()).await.unwrap();
    assert_eq!(format!("{:?}", a.connection()), "ClientConnection::Manager");
    let (a, b) = (
        Locker::from(a),
        Locker::from(RedisClient::connect_with(&url, options).await.unwrap()),
    );

    let plain = LockOptions::new(LONG);
    let g = a.try_acquire("unbatched", &plain).await.unwrap().acquired().unwrap();
    assert!(!b.try_acquire("unbatched", &plain).await.unwrap().is_acquired());
    g.extend(LONG).await.unwrap();
    let waiter = {
        let b = b.clone();
        tokio::spawn(async move { b.acquire("unbatched", &LockOptions::new(LONG).wait(LONG)).await })
    };
    g.release().await.unwrap();
    waiter.await.unwrap().unwrap().release().await.unwrap();

    let fair = LockOptions::new(LONG).fair(true).wait(LONG);
    let key = "unbatched:fair";
    let g = a.try_acquire(key, &fair).await.unwrap().acquired().unwrap();
    let waiter = {
        let (b, fair) = (b.clone(), fair.clone());
        tokio::spawn(async move { b.acquire(key, &fair).await })
    };
    let queue = leasehold::redis::fair_queue_key(key);
    common::until("the other client's waiter queued", || {
        server.command(&["ZCARD", &queue]).unwrap().as_integer() == Some(1)
    })
    .await;
    g.release().await.unwrap();
    let handed = waiter.await.unwrap().unwrap();
    assert_eq!(
        server.command(&["GET", key]).unwrap().as_str(),
        Some(handed.token().expose()),
        "the lock is the waiter's"
    );
    handed.release().await.unwrap();
    assert_eq!(server.command(&["EXISTS", key]).unwrap().as_integer(), Some(0));
});

#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// One process-wide capturing subscriber: tracing caches per-callsite interest globally, so
/// thread-scoped subscribers miss events when tests run in parallel.
fn captured_log() -> &'static Captured {
    static LOG: OnceLock<Captured> = OnceLock::new();
    LOG.get_or_init(|| {
        let sink = Captured::default();
        let writer = sink.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_max_level(tracing::Level::TRACE)
            .with_writer(move || writer.clone())
            .with_ansi(false)
            .with_span_events(tracing_subscriber::fmt::format::FmtSpan::CLOSE)
            .finish();
        tracing::subscriber::set_global_default(subscriber).expect("no other global subscriber");
        sink
    })
}

// Spans for acquire, release and extend carry the key and outcome; the token, a capability,
// never appears, not even a prefix of it: only its keyed hash (LockToken::redacted), which
// correlates the lines of one lease.
leasehold_harness::server_test!(async fn tracing_names_the_key_and_never_the_whole_token(bin) {
    let captured = captured_log();
    let server = Server::start(&bin, &ServerOptions::new()).unwrap();
    let key = format!("traced-key-{}", bin.flavor().unwrap().name());
    let client = Locker::connect(&server.url()).await.unwrap();
    let opts = LockOptions::new(LONG).fencing(true);
    let g = client.try_acquire(&key, &opts).await.unwrap().acquired().unwrap();
    g.extend(LONG).await.unwrap();
    let first = g.token().clone();
    g.release().await.unwrap();
    let dropped = client.try_acquire(&key, &opts).await.unwrap().acquired().unwrap();
    let second = dropped.token().clone();
    drop(dropped);
    common::until_absent(&server, &key, common::GENEROUS).await; // the background release ran
    let _ = client.release(&key, &LockToken::new("wrong-token-value").unwrap()).await;

    let log = String::from_utf8(captured.0.lock().unwrap().clone()).unwrap();
    let ours: Vec<&str> = log.lines().filter(|l| l.contains(&key)).collect();
    for needle in ["leasehold.acquire", "leasehold.extend", "leasehold.release", "outcome", "dropped without release"] {
        assert!(ours.iter().any(|l| l.contains(needle)), "{needle} missing from:\n{}", ours.join("\n"));
    }
    for t in [first.expose(), second.expose(), "wrong-token-value"] {
        assert!(!log.contains(&t[..6]), "a prefix of token {t} logged:\n{log}");
    }
    for (t, op) in [(&first, "leasehold.extend"), (&first, "leasehold.release")] {
        assert!(
            ours.iter().any(|l| l.contains(op) && l.contains(&t.redacted())),
            "{op} does not name the token's hash {}:\n{}", t.redacted(), ours.join("\n")
        );
    }
});
