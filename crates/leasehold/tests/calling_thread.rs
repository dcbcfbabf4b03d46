//! `leasehold::blocking_call`: a thread that blocks on its calls does their round trips on a
//! socket of its own (`src/redis/calling_thread.rs`).

use std::time::Duration;

use crate::common;

use leasehold::redis::RedisClient;
use leasehold::{ClientOptions, Error, LockOptions, Locker, TryAcquire};
use leasehold_harness::{Server, ServerOptions};

const LONG: Duration = Duration::from_secs(60);

/// The server's client connections, seen through one connection of the test's own, kept open
/// for the whole test and left out of what it reports. A connection opened and dropped for
/// each look would linger in `CLIENT LIST` until the server has read its close, and be counted
/// as new by the next look.
struct Probe {
    conn: std::sync::Mutex<redis::Connection>,
    me: i64,
}

impl Probe {
    fn new(url: &str) -> Self {
        let mut conn = redis::Client::open(url).unwrap().get_connection().unwrap();
        let me: i64 = redis::cmd("CLIENT").arg("ID").query(&mut conn).unwrap();
        Probe {
            conn: std::sync::Mutex::new(conn),
            me,
        }
    }

    /// The ids of the server's client connections, but for the probe's.
    fn ids(&self) -> std::collections::BTreeSet<i64> {
        let list: String = redis::cmd("CLIENT")
            .arg("LIST")
            .query(&mut *self.conn.lock().unwrap())
            .unwrap();
        list.lines()
            .filter_map(|l| l.strip_prefix("id=")?.split(' ').next()?.parse().ok())
            .filter(|id| *id != self.me)
            .collect()
    }

    /// The connections listed now that `before` did not list.
    fn new_since(&self, before: &std::collections::BTreeSet<i64>) -> Vec<i64> {
        self.ids().difference(before).copied().collect()
    }

    /// Sends `args` on the probe's connection (so that no connection of its own lingers).
    fn command(&self, args: &[&str]) {
        let mut cmd = redis::cmd(args[0]);
        for a in &args[1..] {
            cmd.arg(*a);
        }
        let _: redis::Value = cmd.query(&mut *self.conn.lock().unwrap()).unwrap();
    }
}

/// Runs `call` as a synchronous binding does: on a thread outside the runtime, polling the
/// call's future itself (`Handle::block_on`) inside `blocking_call`.
async fn on_a_blocking_thread<T: Send + 'static>(
    call: impl FnOnce(&tokio::runtime::Handle) -> T + Send + 'static,
) -> T {
    let handle = tokio::runtime::Handle::current();
    let thread = std::thread::spawn(move || leasehold::blocking_call(|| call(&handle)));
    tokio::task::spawn_blocking(move || thread.join().expect("the thread ends"))
        .await
        .unwrap()
}

// The claim: inside `blocking_call`, a standalone client's commands go on one socket of the
// calling thread's (one new connection, kept for the thread's next calls, closed when the
// thread ends), and the lock they take is the same lock every other connection sees.
leasehold_harness::server_test!(async fn a_blocking_calls_round_trips_go_on_its_threads_own_socket(bin) {
    let server = Server::start(&bin, &ServerOptions::new()).unwrap();
    let locks = Locker::connect(&server.url()).await.unwrap();
    let probe = std::sync::Arc::new(Probe::new(&server.url()));
    let before = probe.ids();

    let (l, p) = (locks.clone(), probe.clone());
    let (held, during) = on_a_blocking_thread(move |rt| {
        let first = rt.block_on(l.try_acquire("k", &LockOptions::new(LONG))).unwrap();
        let g = first.acquired().expect("k is free");
        let busy = rt.block_on(l.try_acquire("k", &LockOptions::new(LONG))).unwrap();
        assert!(!busy.is_acquired(), "the same lock, whichever socket asks");
        rt.block_on(g.release()).unwrap();
        let again = rt.block_on(l.try_acquire("k", &LockOptions::new(LONG))).unwrap();
        (again.acquired().expect("k was released"), p.ids())
    })
    .await;
    let opened: Vec<i64> = during.difference(&before).copied().collect();
    assert_eq!(opened.len(), 1, "one socket for the thread, reused by its calls: {opened:?}");
    // The lease taken on that socket is the lock the shared connection sees, and releases.
    assert!(!locks.try_acquire("k", &LockOptions::new(LONG)).await.unwrap().is_acquired());
    held.release().await.unwrap();
    assert_eq!(common::get(&server, "k"), None);
    common::until("the ended thread's socket is closed", || {
        !probe.ids().contains(&opened[0])
    })
    .await;
});

// The claim: a round trip on the thread's socket that lost its reply (here: the response
// timeout, while the server holds writes back) is an ambiguous error, and that reply, when it
// comes, answers nothing else: the thread's next attempt on a lock someone else holds is busy,
// not granted by the late "OK" of the attempt before.
leasehold_harness::server_test!(async fn a_reply_lost_on_the_threads_socket_answers_no_later_command(bin) {
    let server = Server::start(&bin, &ServerOptions::new()).unwrap();
    let options = ClientOptions::new().response_timeout(Duration::from_millis(500));
    let locks = Locker::from(RedisClient::connect_with(&server.url(), options).await.unwrap());
    let probe = Probe::new(&server.url());
    probe.command(&["SET", "held", "someone-else", "PX", "60000"]);
    let ids_before = probe.ids();
    // The thread tells the test where it is; the test tells the thread to go on.
    let (at, mut reached) = tokio::sync::mpsc::unbounded_channel::<&str>();
    let (go, mut go_on) = tokio::sync::mpsc::unbounded_channel::<()>();
    let l = locks.clone();
    let thread = tokio::spawn(on_a_blocking_thread(move |rt| {
        let g = rt.block_on(l.try_acquire("first", &LockOptions::new(LONG))).unwrap();
        rt.block_on(g.acquired().unwrap().release()).unwrap();
        at.send("socket open").unwrap();
        go_on.blocking_recv().unwrap();
        let lost = rt.block_on(l.try_acquire("lost", &LockOptions::new(LONG)));
        at.send("reply given up").unwrap();
        go_on.blocking_recv().unwrap();
        let after = rt.block_on(l.try_acquire("held", &LockOptions::new(LONG)));
        at.send("done").unwrap();
        go_on.blocking_recv().unwrap(); // alive (its sockets open) until the test has looked
        (lost, after)
    }));
    assert_eq!(reached.recv().await, Some("socket open"));
    let opened = probe.new_since(&ids_before);
    assert_eq!(opened.len(), 1, "the thread's socket: {opened:?}");
    probe.command(&["CLIENT", "PAUSE", "600000", "WRITE"]);
    go.send(()).unwrap();
    assert_eq!(reached.recv().await, Some("reply given up"));
    probe.command(&["CLIENT", "UNPAUSE"]);
    go.send(()).unwrap();
    assert_eq!(reached.recv().await, Some("done"));
    // Our own rule, beside the redis crate's skipping of late replies: the socket that lost a
    // reply is closed, and the thread's next call opened another.
    let lost_socket = opened[0];
    common::until("the socket that lost a reply is closed", || {
        !probe.ids().contains(&lost_socket)
    })
    .await;
    assert_eq!(probe.new_since(&ids_before).len(), 1, "one new socket for the thread");
    go.send(()).unwrap();
    let (lost, after) = thread.await.unwrap();
    match lost {
        Err(e @ Error::Connection { .. }) => assert!(e.is_ambiguous(), "{e}"),
        other => panic!("expected an ambiguous connection error, got {other:?}"),
    }
    match after {
        Ok(TryAcquire::Busy { .. }) => {}
        other => panic!("`held` is someone else's: expected busy, got {other:?}"),
    }
    assert_eq!(common::get(&server, "held").as_deref(), Some("someone-else"));
});

// The claim, over TLS (`rediss://`): the thread's socket is a TLS connection of its own (not a
// silent fall back to the shared connection), trusting the CA the client was given.
leasehold_harness::server_test!(async fn a_blocking_call_over_tls_takes_a_socket_of_its_own(bin) {
    let files = leasehold_harness::TlsFiles::temporary().expect("certificates are generated");
    let server = Server::start(&bin, &ServerOptions::new().tls(&files)).expect("TLS server starts");
    let options = ClientOptions::new().tls_ca_file(files.ca_cert());
    let locks = Locker::connect_with(&server.tls_url().unwrap(), options).await.unwrap();
    let probe = Probe::new(&server.url()); // it looks through the plain port
    let before = probe.ids();
    let opened = on_a_blocking_thread(move |rt| {
        let g = rt.block_on(locks.try_acquire("tls", &LockOptions::new(LONG))).unwrap();
        rt.block_on(g.acquired().expect("free").release()).unwrap();
        probe.new_since(&before)
    })
    .await;
    assert_eq!(opened.len(), 1, "the thread's own TLS socket: {opened:?}");
});

// The claim: a command is written when the call hands it over and read at the call's next
// poll; a call dropped in between (here: polled once, then dropped) closes the thread's socket,
// whose unread reply would otherwise answer the thread's next command. The next call opens
// another socket and gets its own answer (busy, on a lock someone else holds).
leasehold_harness::server_test!(async fn a_call_dropped_between_write_and_read_closes_the_socket(bin) {
    use futures_util::FutureExt;
    let server = Server::start(&bin, &ServerOptions::new()).unwrap();
    let locks = Locker::connect(&server.url()).await.unwrap();
    let probe = Probe::new(&server.url());
    probe.command(&["SET", "held", "someone-else", "PX", "60000"]);
    let after = on_a_blocking_thread(move |rt| {
        let before = probe.ids();
        let g = rt.block_on(locks.try_acquire("first", &LockOptions::new(LONG))).unwrap();
        rt.block_on(g.acquired().unwrap().release()).unwrap();
        let opened = probe.new_since(&before);
        assert_eq!(opened.len(), 1, "the thread's socket: {opened:?}");
        {
            let _runtime = rt.enter(); // the abandoned attempt's give-back is spawned there
            let once = locks.try_acquire("abandoned", &LockOptions::new(LONG)).now_or_never();
            assert!(once.is_none(), "written, its reply not read yet");
        }
        let start = std::time::Instant::now();
        while probe.ids().contains(&opened[0]) {
            assert!(start.elapsed() < Duration::from_secs(60), "the socket was kept");
            std::thread::sleep(Duration::from_millis(10));
        }
        rt.block_on(locks.try_acquire("held", &LockOptions::new(LONG)))
    })
    .await;
    match after {
        Ok(TryAcquire::Busy { .. }) => {}
        other => panic!("`held` is someone else's: expected busy, got {other:?}"),
    }
});
