//! W1's floors on Redis: the same round trips as leasehold's, through the `redis` crate with no
//! lock logic (`floor`), and with the lock history's commands beside them (`floor_history`) or
//! in scripts (`floor_history_scripted`).
//! W2's floors share their acquisition ([`floor_set`]). W3's cross-client handoff has its own
//! ([`w3_floor_handoff`]: a bare `PUBLISH`, or the script a fair release runs).

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::stats::Summary;
use super::workloads::{Turns, measure_cycles};

/// The floors' acquisition: `SET key value NX PX 10000`, which must find `key` free (the
/// workloads use distinct keys).
pub(crate) async fn floor_set(
    conn: &mut redis::aio::ConnectionManager,
    key: &str,
    value: &str,
) -> anyhow::Result<()> {
    let ok: Option<String> = redis::cmd("SET")
        .arg(key)
        .arg(value)
        .arg("NX")
        .arg("PX")
        .arg(10_000)
        .query_async(conn)
        .await?;
    anyhow::ensure!(ok.is_some(), "distinct key busy");
    Ok(())
}

/// W1 floor: the same two round trips with no lock logic (`SET NX PX`, `DEL`).
pub(crate) async fn w1_floor(
    url: String,
    cycles: u64,
    prefix: String,
) -> anyhow::Result<(Summary, Vec<(f64, f64)>)> {
    let conn = redis::Client::open(url)?.get_connection_manager().await?;
    let (summary, cdf) = measure_cycles(cycles, 200, &prefix, |key| {
        let mut conn = conn.clone();
        async move {
            floor_set(&mut conn, &key, "v").await?;
            let _: i64 = redis::cmd("DEL").arg(&key).query_async(&mut conn).await?;
            anyhow::Ok(())
        }
    })
    .await?;
    Ok((summary.with("commands", "SET NX PX + DEL"), cdf))
}

/// How a W1 history floor sends its events ([`w1_floor_history`]).
#[derive(Clone, Copy, Debug)]
pub(crate) enum HistoryFloor {
    /// Beside the lock's commands, pipelined: the server's own cost of the events, with no
    /// script and no tie between an event and its command.
    Pipelined,
    /// The same commands, each event made atomic with its command the way the issue asks (the
    /// event rides in the script that grants or releases): [`ACQUIRE_EVENT_LUA`] and
    /// [`RELEASE_EVENT_LUA`], with no lock logic.
    Scripted,
}

/// [`HistoryFloor::Scripted`]'s acquisition: `KEYS` the key and its history stream; `ARGV` the
/// value, the TTL (ms), the cap, the retention (ms) and the holder. The event only if it set.
const ACQUIRE_EVENT_LUA: &str = r"
if not redis.call('set', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return 0 end
redis.call('xadd', KEYS[2], 'MAXLEN', '=', ARGV[3], '*', 'kind', 'acquired', 'holder', ARGV[5])
redis.call('pexpire', KEYS[2], ARGV[4])
return 1
";

/// [`HistoryFloor::Scripted`]'s release: `KEYS` as [`ACQUIRE_EVENT_LUA`]'s; `ARGV` the cap and
/// the holder. The event only if it deleted.
const RELEASE_EVENT_LUA: &str = r"
if redis.call('del', KEYS[1]) ~= 1 then return 0 end
redis.call('xadd', KEYS[2], 'MAXLEN', '=', ARGV[1], '*', 'kind', 'released', 'holder', ARGV[2])
return 1
";

/// W1 history floors: what a recorded cycle makes the server do at the least, with no lock
/// logic: `SET NX PX` with the `acquired` event's `XADD` (capped as leasehold caps it) and the
/// stream's `PEXPIRE`, then `DEL` with the `released` event's `XADD`, on the stream leasehold
/// would append to ([`leasehold::redis::history_key`]), beside [`w1_floor`] (what the machine
/// itself allows for target 3).
///
/// [`HistoryFloor::Pipelined`] is not a lock that records its history safely (nothing ties an
/// event to its grant): it is the server's own cost of an event on a stream per key.
/// [`HistoryFloor::Scripted`] runs the same commands in two scripts, each event only if its
/// command wrote: what the mechanism the issue prescribes allows, before any lock logic.
pub(crate) async fn w1_floor_history(
    url: String,
    cycles: u64,
    prefix: String,
    how: HistoryFloor,
) -> anyhow::Result<(Summary, Vec<(f64, f64)>)> {
    let options = leasehold::HistoryOptions::default();
    let cap = options.events_per_key();
    let retention = options.retention_period().as_millis() as u64;
    let holder = "0123456789ab…";
    let conn = redis::Client::open(url)?.get_connection_manager().await?;
    let scripts = Arc::new((
        redis::Script::new(ACQUIRE_EVENT_LUA),
        redis::Script::new(RELEASE_EVENT_LUA),
    ));
    let (summary, cdf) = measure_cycles(cycles, 200, &prefix, |key| {
        let (mut conn, scripts) = (conn.clone(), scripts.clone());
        async move {
            let stream = leasehold::redis::history_key(&key);
            match how {
                HistoryFloor::Pipelined => {
                    let event = |kind: &str| {
                        let mut xadd = redis::cmd("XADD");
                        xadd.arg(&stream).arg("MAXLEN").arg("=").arg(cap).arg("*");
                        xadd.arg("kind").arg(kind).arg("holder").arg(holder);
                        xadd
                    };
                    let mut acquire = redis::pipe();
                    acquire
                        .cmd("SET")
                        .arg(&key)
                        .arg("v")
                        .arg("NX")
                        .arg("PX")
                        .arg(10_000);
                    acquire.add_command(event("acquired")).ignore();
                    acquire.cmd("PEXPIRE").arg(&stream).arg(retention).ignore();
                    let (ok,): (Option<String>,) = acquire.query_async(&mut conn).await?;
                    anyhow::ensure!(ok.is_some(), "distinct key busy");
                    let mut release = redis::pipe();
                    release.cmd("DEL").arg(&key);
                    release.add_command(event("released")).ignore();
                    let (_deleted,): (i64,) = release.query_async(&mut conn).await?;
                }
                HistoryFloor::Scripted => {
                    let (acquire, release) = &*scripts;
                    let set: i64 = acquire
                        .key(&key)
                        .key(&stream)
                        .arg("v")
                        .arg(10_000)
                        .arg(cap)
                        .arg(retention)
                        .arg(holder)
                        .invoke_async(&mut conn)
                        .await?;
                    anyhow::ensure!(set == 1, "distinct key busy");
                    let deleted: i64 = release
                        .key(&key)
                        .key(&stream)
                        .arg(cap)
                        .arg(holder)
                        .invoke_async(&mut conn)
                        .await?;
                    anyhow::ensure!(deleted == 1, "the key was not there to delete");
                }
            }
            anyhow::Ok(())
        }
    })
    .await?;
    let commands = match how {
        HistoryFloor::Pipelined => "SET NX PX + XADD + PEXPIRE, DEL + XADD (pipelined)",
        HistoryFloor::Scripted => {
            "SET NX PX, then XADD + PEXPIRE if set; DEL, then XADD if deleted (two scripts)"
        }
    };
    Ok((summary.with("commands", commands), cdf))
}

/// How a W3 floor's holder passes its turn to the next worker ([`w3_floor_handoff`]).
#[derive(Clone, Copy, Debug)]
pub(crate) enum FloorPass {
    /// One `PUBLISH` to the next worker's channel: no queue, no token, no script.
    Publish,
    /// The issue's mechanism with no library: a script that checks the holder's value, pops
    /// the queue's head, reads its entry, sets the key to it, deletes the entry, `PUBLISH`es to
    /// the channel the entry names and peeks at the new head ([`PASS_LUA`]: the seven calls of
    /// a fair release's handoff, without fencing as W3 runs it). The holder then queues again
    /// by a second script ([`QUEUE_LUA`]: a fair waiter's queueing calls), as leasehold's
    /// worker does by its next acquisition.
    Script,
}

/// [`FloorPass::Script`]'s handoff: `KEYS` the key, the queue, the entries' prefix; `ARGV` the
/// holder's ticket. 1 if handed over, 0 if the queue was empty (the key stays the holder's),
/// -1 if the key is not the holder's.
const PASS_LUA: &str = r"
if redis.call('get', KEYS[1]) ~= ARGV[1] then return -1 end
local ticket = redis.call('zpopmin', KEYS[2])[1]
if not ticket then return 0 end
local channel = redis.call('get', KEYS[3] .. ticket)
redis.call('set', KEYS[1], ticket, 'PX', 10000)
redis.call('del', KEYS[3] .. ticket)
redis.call('publish', channel, 'turn')
redis.call('zrange', KEYS[2], 0, 0)
return 1
";

/// [`FloorPass::Script`]'s queueing: `KEYS` as [`PASS_LUA`]'s; `ARGV` the worker's ticket and
/// channel. Appends the ticket behind the queue's last (once) with its entry naming the channel.
const QUEUE_LUA: &str = r"
redis.call('get', KEYS[1])
if not redis.call('zscore', KEYS[2], ARGV[1]) then
  local last = redis.call('zrange', KEYS[2], -1, -1, 'WITHSCORES')[2]
  redis.call('zadd', KEYS[2], (tonumber(last) or 0) + 1, ARGV[1])
end
redis.call('set', KEYS[3] .. ARGV[1], ARGV[2], 'PX', 60000)
redis.call('persist', KEYS[2])
return redis.call('pttl', KEYS[1])
";

/// W3's cross-client handoff floors (issue 32, target 1): the least a handoff from one client
/// to another costs here, with no lock logic. `workers` each have a connection and a
/// subscriber connection of their own (as leasehold's clients do), and pass a turn round in a
/// fixed order: the holder spins for `hold`, then passes the turn ([`FloorPass`]) and waits for
/// that command's reply (as a fair release does), and the next worker holds once the message
/// reaches it. [`FloorPass::Publish`]: one message from one client to another per handoff, and
/// nothing else (what the machine allows any cross-client handoff). [`FloorPass::Script`]: the
/// same message sent by the server's script that hands the key over, with the holder queueing
/// again after it (what the machine allows the handoff the issue prescribes, before any client
/// code). Reported as W3's figures ([`Turns`]), so their handoff p50s stand beside
/// `leasehold_fair_client_each`'s.
pub(crate) async fn w3_floor_handoff(
    url: String,
    workers: usize,
    hold: Duration,
    duration: Duration,
    prefix: String,
    pass: FloorPass,
) -> anyhow::Result<(Summary, Vec<(f64, f64)>)> {
    use futures_util::StreamExt;
    let channel = |w: usize| format!("{prefix}:turn:{}", w % workers);
    let queue = Arc::new(ScriptedQueue::new(&prefix));
    let mut ends = Vec::new();
    for w in 0..workers {
        let client = redis::Client::open(url.as_str())?;
        let mut conn = client.get_multiplexed_async_connection().await?;
        let mut subscriber = client.get_async_pubsub().await?;
        subscriber.subscribe(channel(w)).await?;
        if let FloorPass::Script = pass {
            // Queued in worker order, so the turn goes round as the plain floor's does.
            queue.join(&mut conn, w, &channel(w)).await?;
        }
        ends.push((conn, subscriber));
    }
    let turns = Turns::default();
    let deadline = Instant::now() + duration;
    let mut handles = Vec::new();
    for (w, (mut conn, subscriber)) in ends.into_iter().enumerate() {
        let (turns, next, mine, queue) = (turns.clone(), channel(w + 1), channel(w), queue.clone());
        handles.push(tokio::spawn(async move {
            let mut messages = subscriber.into_on_message();
            let mut asked = Instant::now();
            while messages.next().await.is_some() {
                let acquired = Instant::now();
                // Past the deadline a turn is passed on unheld by a bare PUBLISH round the
                // workers' fixed order, so every worker sees one and ends.
                let over = acquired >= deadline;
                let released = if over {
                    acquired
                } else {
                    turns.hold(asked, acquired, hold)
                };
                match pass {
                    FloorPass::Script if !over => {
                        queue.hand_over(&mut conn, w, &mine).await?;
                    }
                    _ => {
                        let _: i64 = redis::cmd("PUBLISH")
                            .arg(&next)
                            .arg("turn")
                            .query_async(&mut conn)
                            .await?;
                    }
                }
                if over {
                    break;
                }
                turns.done(w, acquired, released);
                asked = Instant::now();
                if let FloorPass::Script = pass {
                    queue.join(&mut conn, w, &mine).await?;
                }
            }
            anyhow::Ok(())
        }));
    }
    let start = Instant::now();
    let mut first = redis::Client::open(url.as_str())?
        .get_multiplexed_async_connection()
        .await?;
    match pass {
        FloorPass::Publish => {
            let _: i64 = redis::cmd("PUBLISH")
                .arg(channel(0))
                .arg("turn")
                .query_async(&mut first)
                .await?;
        }
        // The key starts as a starter's, whose handoff goes to the queue's head (worker 0).
        FloorPass::Script => queue.start(&mut first).await?,
    }
    for h in handles {
        h.await??;
    }
    let (summary, cdf) = turns.summary(workers, start.elapsed());
    let commands = match pass {
        FloorPass::Publish => {
            "PUBLISH to the next worker's channel, read by its own subscriber connection"
        }
        FloorPass::Script => {
            "EVALSHA of the handoff (GET, ZPOPMIN, GET, SET PX, DEL, PUBLISH, ZRANGE), \
             then EVALSHA of the queueing (GET, ZSCORE, ZRANGE, ZADD, SET PX, PERSIST, PTTL)"
        }
    };
    Ok((summary.with("commands", commands), cdf))
}

/// [`FloorPass::Script`]'s key, queue and entries (a worker's ticket is its index), and its
/// two scripts.
struct ScriptedQueue {
    keys: [String; 3],
    pass: redis::Script,
    queue: redis::Script,
}

/// The starter's ticket (no worker's).
const STARTER: &str = "start";

impl ScriptedQueue {
    fn new(prefix: &str) -> Self {
        ScriptedQueue {
            keys: [
                format!("{prefix}:key"),
                format!("{prefix}:queue"),
                format!("{prefix}:entry:"),
            ],
            pass: redis::Script::new(PASS_LUA),
            queue: redis::Script::new(QUEUE_LUA),
        }
    }

    /// Runs `script` on the key, the queue and the entries' prefix, with `args`.
    async fn run(
        &self,
        script: &redis::Script,
        conn: &mut redis::aio::MultiplexedConnection,
        args: &[&str],
    ) -> anyhow::Result<i64> {
        let mut call = script.key(&self.keys[0]);
        call.key(&self.keys[1]).key(&self.keys[2]);
        for arg in args {
            call.arg(*arg);
        }
        Ok(call.invoke_async(conn).await?)
    }

    /// Queues worker `w`, woken on `channel`.
    async fn join(
        &self,
        conn: &mut redis::aio::MultiplexedConnection,
        w: usize,
        channel: &str,
    ) -> anyhow::Result<()> {
        self.run(&self.queue, conn, &[&w.to_string(), channel])
            .await?;
        Ok(())
    }

    /// One handoff from `ticket`: 1 if handed over, 0 if the queue was empty.
    async fn pass(
        &self,
        conn: &mut redis::aio::MultiplexedConnection,
        ticket: &str,
    ) -> anyhow::Result<i64> {
        let handed = self.run(&self.pass, conn, &[ticket]).await?;
        anyhow::ensure!(handed >= 0, "scripted floor: the key is not {ticket}'s");
        Ok(handed)
    }

    /// Worker `w`'s handoff; when the queue is empty (one worker, or the others not queued
    /// again yet), `w` queues itself and hands over again, to whoever is first by then.
    async fn hand_over(
        &self,
        conn: &mut redis::aio::MultiplexedConnection,
        w: usize,
        channel: &str,
    ) -> anyhow::Result<()> {
        let ticket = w.to_string();
        while self.pass(conn, &ticket).await? == 0 {
            self.join(conn, w, channel).await?;
        }
        Ok(())
    }

    /// Gives the key to the starter and hands it to the queue's head.
    async fn start(&self, conn: &mut redis::aio::MultiplexedConnection) -> anyhow::Result<()> {
        let _: () = redis::cmd("SET")
            .arg(&self.keys[0])
            .arg(STARTER)
            .query_async(&mut *conn)
            .await?;
        anyhow::ensure!(
            self.pass(conn, STARTER).await? == 1,
            "scripted floor: nobody queued"
        );
        Ok(())
    }
}
