//! The batching connection against real servers: replies reach their own commands, a lost or
//! silent socket fails what waited on it and the next command connects again, and the URL's
//! user, password and database hold on every socket.

use std::time::Duration;

use leasehold_harness::{RespValue, Server, ServerOptions};
use redis::Value;

use super::BatchingConnection;

const LONG: Duration = Duration::from_secs(30);

async fn connect(url: &str, response_timeout: Duration) -> redis::RedisResult<BatchingConnection> {
    let info = redis::Client::open(url)?.get_connection_info().clone();
    BatchingConnection::connect(&info, LONG, response_timeout).await
}

async fn send(conn: &BatchingConnection, args: &[&str]) -> redis::RedisResult<Value> {
    let mut cmd = redis::cmd(args[0]);
    for a in &args[1..] {
        cmd.arg(*a);
    }
    conn.send_packed_command(&cmd).await
}

fn client_id(value: Value) -> i64 {
    match value {
        Value::Int(id) => id,
        other => panic!("CLIENT ID answered {other:?}"),
    }
}

// Many tasks on clones of one connection, their commands batched into shared writes: each
// gets its own command's reply (a reply handed to the wrong command would show here as a
// value of another task's key, or a counter value seen twice).
leasehold_harness::server_test!(async fn concurrent_commands_each_get_their_own_reply(bin) {
    let server = Server::start(&bin, &ServerOptions::new()).unwrap();
    let conn = connect(&server.url(), LONG).await.unwrap();
    let (tasks, rounds) = (32, 40);
    let mut handles = Vec::new();
    for t in 0..tasks {
        let conn = conn.clone();
        handles.push(tokio::spawn(async move {
            let mut counted = Vec::new();
            for r in 0..rounds {
                let (key, value) = (format!("k{t}"), format!("v{t}-{r}"));
                assert_eq!(send(&conn, &["SET", &key, &value]).await.unwrap(), Value::Okay);
                let got = send(&conn, &["GET", &key]).await.unwrap();
                assert_eq!(got, Value::BulkString(value.into_bytes()));
                match send(&conn, &["INCR", "counter"]).await.unwrap() {
                    Value::Int(n) => counted.push(n),
                    other => panic!("INCR answered {other:?}"),
                }
            }
            counted
        }));
    }
    let mut seen = Vec::new();
    for h in handles {
        seen.extend(h.await.unwrap());
    }
    seen.sort_unstable();
    assert_eq!(seen, (1..=(tasks * rounds) as i64).collect::<Vec<_>>());
});

// A pipeline's replies as the crate's connections give them: the first `offset` skipped, a
// server error in its place among the rest.
leasehold_harness::server_test!(async fn a_pipeline_returns_its_replies_past_the_offset(bin) {
    let server = Server::start(&bin, &ServerOptions::new()).unwrap();
    let conn = connect(&server.url(), LONG).await.unwrap();
    let mut pipe = redis::pipe();
    pipe.cmd("SET").arg("p").arg("1");
    pipe.cmd("INCR").arg("p");
    pipe.cmd("HGET").arg("p").arg("field");
    pipe.cmd("GET").arg("p");
    let replies = conn.send_packed_commands(&pipe, 1, 3).await.unwrap();
    assert_eq!(replies.len(), 3, "{replies:?}");
    assert_eq!(replies[0], Value::Int(2));
    assert!(matches!(&replies[1], Value::ServerError(e) if e.code() == "WRONGTYPE"), "{replies:?}");
    assert_eq!(replies[2], Value::BulkString(b"2".to_vec()));
    // The connection is still in step: the next command gets its own reply.
    assert_eq!(send(&conn, &["GET", "p"]).await.unwrap(), Value::BulkString(b"2".to_vec()));
});

// A lone command is written by its own task, as much as the socket takes at once: one larger
// than that (32 MB, past the kernel's largest send buffer, `tcp_wmem`) leaves the rest to the
// writer task, and a command queued behind it must follow it whole. Were the rest written
// after the next command, or lost, the server would read a broken command or an `APPEND`
// before its `SET`.
leasehold_harness::server_test!(async fn a_lone_command_too_big_for_one_write_goes_out_whole_and_first(bin) {
    let server = Server::start(&bin, &ServerOptions::new()).unwrap();
    let conn = connect(&server.url(), LONG).await.unwrap();
    let value = "x".repeat(32 << 20);
    let mut set = redis::cmd("SET");
    set.arg("big").arg(&value);
    let (set, append) = tokio::join!(
        conn.send_packed_command(&set),
        send(&conn, &["APPEND", "big", "!"])
    );
    assert_eq!(set.unwrap(), Value::Okay);
    assert_eq!(append.unwrap(), Value::Int(value.len() as i64 + 1));
    let got = send(&conn, &["GETRANGE", "big", "-2", "-1"]).await.unwrap();
    assert_eq!(got, Value::BulkString(b"x!".to_vec()));
});

// A command behind one other in flight is written by its own task, not left to the writer
// task: the handoff inside one client (a release's delete on the wire, then the attempt of the
// waiter it woke) waits for no wake-up of the writer. On a current-thread runtime (of its own,
// on a thread of its own) the writer task cannot run before the test yields, so what the queue
// holds right after the command's first poll shows who wrote it: the writer would leave it in
// `out`, marked `writing`.
leasehold_harness::server_test!(async fn a_command_behind_one_in_flight_is_written_by_its_own_task(bin) {
    use std::future::Future;
    use std::task::Poll;

    let server = Server::start(&bin, &ServerOptions::new()).unwrap();
    let url = server.url();
    let (blocked, behind) = std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        runtime.block_on(async {
            let conn = connect(&url, LONG).await.unwrap();
            // In flight until another connection pushes to the list.
            let mut blocked = std::pin::pin!(send(&conn, &["BLPOP", "behind", "0"]));
            let mut behind = std::pin::pin!(send(&conn, &["PING"]));
            for mut call in [blocked.as_mut(), behind.as_mut()] {
                let first = std::future::poll_fn(|cx| Poll::Ready(call.as_mut().poll(cx))).await;
                assert!(first.is_pending(), "answered at once: {first:?}");
            }
            {
                let wire = conn.current().expect("the socket is up");
                let queue = crate::redis::batching::lock(&wire.queue);
                assert_eq!(queue.waiting.len(), 2);
                assert!(!queue.writing && queue.out.is_empty(), "the command was left to the writer task");
            }
            let mut push = redis::Client::open(url.as_str()).unwrap().get_multiplexed_async_connection().await.unwrap();
            let _: i64 = redis::cmd("RPUSH").arg("behind").arg("x").query_async(&mut push).await.unwrap();
            (blocked.await.unwrap(), behind.await.unwrap())
        })
    })
    .join()
    .expect("the current-thread runtime's thread");
    let popped = Value::Array(vec![
        Value::BulkString(b"behind".to_vec()),
        Value::BulkString(b"x".to_vec()),
    ]);
    assert_eq!(blocked, popped);
    assert_eq!(behind, Value::SimpleString("PONG".into()));
});

// The server closes the socket (`CLIENT KILL`): at most the command that found it closed
// fails, with an I/O error, and the next one goes out on a new socket.
leasehold_harness::server_test!(async fn after_the_server_closes_the_socket_the_next_command_connects_again(bin) {
    let server = Server::start(&bin, &ServerOptions::new()).unwrap();
    let conn = connect(&server.url(), LONG).await.unwrap();
    let first = client_id(send(&conn, &["CLIENT", "ID"]).await.unwrap());
    let killed = server.command(&["CLIENT", "KILL", "ID", &first.to_string()]).unwrap();
    assert_eq!(killed, RespValue::Integer(1));
    match send(&conn, &["CLIENT", "ID"]).await {
        Ok(v) => assert_ne!(client_id(v), first, "answered on the killed socket"),
        Err(e) => assert!(e.is_io_error(), "{e:?}"),
    }
    let again = client_id(send(&conn, &["CLIENT", "ID"]).await.unwrap());
    assert_ne!(again, first);
});

// A server that stops answering (SIGSTOP) fails the waiting command with a timeout at the
// response timeout, not never; once it answers again, the next command is served.
leasehold_harness::server_test!(async fn a_silent_server_fails_the_command_at_the_response_timeout(bin) {
    let server = Server::start(&bin, &ServerOptions::new()).unwrap();
    let conn = connect(&server.url(), Duration::from_millis(300)).await.unwrap();
    assert_eq!(send(&conn, &["PING"]).await.unwrap(), Value::SimpleString("PONG".into()));
    server.pause().unwrap();
    let silent = send(&conn, &["PING"]).await;
    server.resume().unwrap();
    let e = silent.expect_err("a paused server answered");
    assert!(e.is_timeout(), "{e:?}");
    assert_eq!(send(&conn, &["PING"]).await.unwrap(), Value::SimpleString("PONG".into()));
});

// The URL's user, password and database are sent on the first socket and on every new one; a
// wrong password is the server's refusal, not a connection.
leasehold_harness::server_test!(async fn the_urls_user_password_and_database_hold_on_every_socket(bin) {
    let server = Server::start(&bin, &ServerOptions::new()).unwrap();
    let created = server
        .command(&["ACL", "SETUSER", "locker", "on", ">secret", "~*", "+@all"])
        .unwrap();
    assert_eq!(created, RespValue::Simple("OK".into()));
    let url = format!("redis://locker:secret@127.0.0.1:{}/3", server.port());
    let conn = connect(&url, LONG).await.unwrap();
    assert_eq!(conn.get_db(), 3);
    let whoami = send(&conn, &["ACL", "WHOAMI"]).await.unwrap();
    assert_eq!(whoami, Value::BulkString(b"locker".to_vec()));
    assert_eq!(send(&conn, &["SET", "in-three", "x"]).await.unwrap(), Value::Okay);
    let in_three = server.commands(&[&["SELECT", "3"], &["GET", "in-three"]]).unwrap();
    assert_eq!(in_three[1], RespValue::Bulk(Some(b"x".to_vec())));
    // On a new socket: the same user and database.
    let id = client_id(send(&conn, &["CLIENT", "ID"]).await.unwrap());
    let killed = server.command(&["CLIENT", "KILL", "ID", &id.to_string()]).unwrap();
    assert_eq!(killed, RespValue::Integer(1));
    let _ = send(&conn, &["PING"]).await;
    let whoami = send(&conn, &["ACL", "WHOAMI"]).await.unwrap();
    assert_eq!(whoami, Value::BulkString(b"locker".to_vec()));
    assert_eq!(send(&conn, &["GET", "in-three"]).await.unwrap(), Value::BulkString(b"x".to_vec()));

    let wrong = format!("redis://locker:wrong@127.0.0.1:{}/", server.port());
    let refused = connect(&wrong, LONG).await.expect_err("a wrong password connected");
    assert_eq!(refused.code(), Some("WRONGPASS"), "{refused:?}");
});

// The last handle's drop closes the socket: the server sees the client go.
leasehold_harness::server_test!(async fn dropping_the_last_handle_closes_the_socket(bin) {
    let server = Server::start(&bin, &ServerOptions::new()).unwrap();
    let conn = connect(&server.url(), LONG).await.unwrap();
    let id = client_id(send(&conn, &["CLIENT", "ID"]).await.unwrap());
    let listed = |server: &Server| match server.command(&["CLIENT", "LIST", "ID", &id.to_string()]) {
        Ok(RespValue::Bulk(Some(text))) => !text.is_empty(),
        other => panic!("CLIENT LIST answered {other:?}"),
    };
    assert!(listed(&server));
    let other = conn.clone();
    drop(conn);
    assert!(listed(&server), "a clone still holds the connection");
    drop(other);
    crate::core::testing::until("the socket to close after its last handle", || {
        !listed(&server)
    })
    .await;
});
