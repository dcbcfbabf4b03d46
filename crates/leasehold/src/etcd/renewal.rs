//! A session's task: its keep-alives, the check of its locks' entries at each tick, the
//! end of a session that lapsed or went idle, and the move of locks that reached their
//! `max_hold` cap onto leases of their own.

use std::sync::Arc;
use std::time::{Duration, Instant};

use ec::{Compare, CompareOp, PutOptions, Txn, TxnOp};
use etcd_client as ec;

use crate::core::error::LossReason;
use crate::core::guard::valid_until;

use super::keep_alive::{KeepAliveOutcome, KeepAlives};
use super::lock;
use super::request::{revoke_in_background, txn_get};
use super::session::{Attach, Orphan, Session, Sessions};

/// Locks checked per transaction: two compares each, within etcd's default `--max-txn-ops`
/// of 128.
const CHECK_BATCH: usize = 64;

/// One session's keep-alive task (its keep-alives go out on the client's one stream). Runs
/// until the session is lost or retired.
pub(super) async fn run_session(
    etcd: ec::Client,
    keep_alives: Arc<KeepAlives>,
    session: Arc<Session>,
    sessions: Arc<Sessions>,
    response_timeout: Duration,
) {
    // The validity lapsed before a keep-alive that could renew it was sent: the locks may have
    // been lost meanwhile (and their guards may have said so). Not revived: the session ends.
    let lapsed = || async {
        tracing::warn!(
            lease = session.id,
            "no etcd keep-alive succeeded within the lease's TTL; its locks are lost"
        );
        end_session(&sessions, &session, LossReason::Expired).await;
        revoke_in_background(&etcd, session.id, response_timeout);
    };
    let mut next = {
        let st = session.state();
        st.renewed_at + st.interval
    };
    let mut idle_since: Option<Instant> = None;
    loop {
        tokio::select! {
            _ = tokio::time::sleep_until(next.into()) => {}
            _ = session.dead.cancelled() => return,
        }
        let interval = session.interval();
        let now = Instant::now();
        if session.is_idle() {
            let since = *idle_since.get_or_insert(now);
            if now.duration_since(since) >= interval && retire(&sessions, &session).await {
                revoke_in_background(&etcd, session.id, response_timeout);
                return;
            }
        } else {
            idle_since = None;
        }
        if Instant::now() >= session.valid_until() {
            lapsed().await;
            return;
        }
        let wait = response_timeout.min(interval.max(Duration::from_millis(250)));
        match keep_alives.keep_alive(session.id, wait).await {
            KeepAliveOutcome::Renewed { sent, ttl } => {
                let ttl = ttl.unwrap_or_else(|| session.state().granted);
                let Some(lost) = session.renewed(sent, ttl) else {
                    lapsed().await;
                    return;
                };
                session.adopt(
                    lost.into_iter()
                        .map(|(rev, entry)| Orphan::Lost { entry, rev }),
                );
                delete_orphans_of(&etcd, &session, response_timeout).await;
                next = sent + interval;
            }
            KeepAliveOutcome::Gone => {
                tracing::warn!(lease = session.id, "etcd lease gone; its locks are lost");
                end_session(&sessions, &session, LossReason::NotHeld).await;
                return;
            }
            KeepAliveOutcome::Failed => {
                let now = Instant::now();
                if now >= session.valid_until() {
                    lapsed().await;
                    return;
                }
                next = now + (interval / 8).max(Duration::from_millis(20));
                continue;
            }
        }
        check_entries(&etcd, &session, response_timeout).await;
        cap_holds(&etcd, &session, response_timeout).await;
    }
}

/// Deletes the session's orphans (see [`Orphan`]); the ones etcd did not confirm stay for
/// the next renewal.
async fn delete_orphans_of(etcd: &ec::Client, session: &Session, timeout: Duration) {
    let orphans = std::mem::take(&mut session.state().orphans);
    if orphans.is_empty() {
        return;
    }
    let left = delete_orphans(etcd, session.id, orphans, timeout).await;
    session.adopt(left);
}

/// Deletes `orphans` of `lease`, each guarded as its kind says (its token; or its revision
/// and this lease), so nothing else is touched: one transaction per [`CHECK_BATCH`] of them,
/// each a nested transaction. Returns the ones whose deletion etcd did not confirm (no
/// reply, or an error): a reply confirms every one of its batch, deleted or found gone.
pub(super) async fn delete_orphans(
    etcd: &ec::Client,
    lease: i64,
    orphans: Vec<Orphan>,
    timeout: Duration,
) -> Vec<Orphan> {
    let mut left = Vec::new();
    for chunk in orphans.chunks(CHECK_BATCH) {
        let ops: Vec<TxnOp> = chunk
            .iter()
            .map(|orphan| {
                let (entry, guard) = match orphan {
                    Orphan::Abandoned { entry, token } => (
                        entry,
                        vec![Compare::value(
                            entry.clone(),
                            CompareOp::Equal,
                            token.expose(),
                        )],
                    ),
                    Orphan::Lost { entry, rev } => (
                        entry,
                        vec![
                            Compare::create_revision(entry.clone(), CompareOp::Equal, *rev),
                            Compare::lease(entry.clone(), CompareOp::Equal, lease),
                        ],
                    ),
                };
                TxnOp::txn(
                    Txn::new()
                        .when(guard)
                        .and_then([TxnOp::delete(entry.clone(), None)]),
                )
            })
            .collect();
        let mut kv = etcd.kv_client();
        match tokio::time::timeout(timeout, kv.txn(Txn::new().and_then(ops))).await {
            Ok(Ok(_)) => {}
            _ => left.extend_from_slice(chunk),
        }
    }
    left
}

/// Retires an idle session (under the sessions lock, so no acquisition picks it meanwhile).
async fn retire(sessions: &Sessions, session: &Arc<Session>) -> bool {
    let mut map = sessions.lock().await;
    if !session.is_idle() {
        return false;
    }
    if map
        .get(&session.secs)
        .is_some_and(|s| Arc::ptr_eq(s, session))
    {
        map.remove(&session.secs);
    }
    session.dead.cancel();
    true
}

async fn end_session(sessions: &Sessions, session: &Arc<Session>, reason: LossReason) {
    session.die(reason);
    let mut map = sessions.lock().await;
    if map
        .get(&session.secs)
        .is_some_and(|s| Arc::ptr_eq(s, session))
    {
        map.remove(&session.secs);
    }
}

/// The tick's check: every registered entry must still exist, with its create revision, on
/// this session's lease. The ones that do not are declared lost.
async fn check_entries(etcd: &ec::Client, session: &Session, timeout: Duration) {
    let snapshot: Vec<(i64, Vec<u8>)> = session
        .state()
        .locks
        .iter()
        .map(|(rev, t)| (*rev, t.entry.clone()))
        .collect();
    let mut gone = Vec::new();
    for chunk in snapshot.chunks(CHECK_BATCH) {
        let compares: Vec<Compare> = chunk
            .iter()
            .flat_map(|(rev, entry)| {
                [
                    Compare::create_revision(entry.clone(), CompareOp::Equal, *rev),
                    Compare::lease(entry.clone(), CompareOp::Equal, session.id),
                ]
            })
            .collect();
        let gets: Vec<TxnOp> = chunk
            .iter()
            .map(|(_, entry)| TxnOp::get(entry.clone(), None))
            .collect();
        let txn = Txn::new().when(compares).or_else(gets);
        let mut kv = etcd.kv_client();
        let resp = match tokio::time::timeout(timeout, kv.txn(txn)).await {
            Ok(Ok(resp)) => resp,
            // Not an answer about the entries: the next tick checks again, and the validity
            // bounds how long that can go on.
            _ => continue,
        };
        if resp.succeeded() {
            continue;
        }
        for (i, (rev, _)) in chunk.iter().enumerate() {
            let kvs = txn_get(&resp, i);
            let ours = kvs
                .first()
                .is_some_and(|kv| kv.create_revision() == *rev && kv.lease() == session.id);
            if !ours {
                gone.push(*rev);
            }
        }
    }
    for rev in gone {
        // Unregistered meanwhile (released, or being moved by an extend): not ours to judge.
        if let Some(t) = session.unregister(rev) {
            t.lease.mark_lost(LossReason::NotHeld);
        }
    }
}

/// Moves the locks that reached their `max_hold` cap onto a lease of their own, which is not
/// kept alive: they expire one TTL later.
async fn cap_holds(etcd: &ec::Client, session: &Session, timeout: Duration) {
    let now = Instant::now();
    let due: Vec<i64> = session
        .state()
        .locks
        .iter()
        .filter(|(_, t)| t.stop_at.is_some_and(|s| now >= s))
        .map(|(rev, _)| *rev)
        .collect();
    for rev in due {
        let Some(t) = session.unregister(rev) else {
            continue;
        };
        let mut leases = etcd.lease_client();
        let started = Instant::now();
        let granted = match tokio::time::timeout(timeout, leases.grant(t.secs, None)).await {
            Ok(Ok(g)) if g.ttl() > 0 => g,
            _ => {
                // Try again at the next tick.
                session.state().locks.insert(rev, t);
                continue;
            }
        };
        let txn = Txn::new()
            .when([
                Compare::create_revision(t.entry.clone(), CompareOp::Equal, rev),
                Compare::lease(t.entry.clone(), CompareOp::Equal, session.id),
            ])
            .and_then([TxnOp::put(
                t.entry.clone(),
                t.lease.token().expose(),
                Some(PutOptions::new().with_lease(granted.id())),
            )]);
        let mut kv = etcd.kv_client();
        match tokio::time::timeout(timeout, kv.txn(txn)).await {
            Ok(Ok(resp)) if resp.succeeded() => {
                let ttl = Duration::from_secs(granted.ttl() as u64);
                t.lease.renewed(started, ttl);
                *lock(&t.attach) = Attach::Dedicated(granted.id());
                tracing::info!(
                    key = t.lease.key(),
                    "lock reached its max_hold cap; no longer renewed"
                );
            }
            Ok(Ok(_)) => {
                revoke_in_background(etcd, granted.id(), timeout);
                t.lease.mark_lost(LossReason::NotHeld);
            }
            Ok(Err(_)) | Err(_) => {
                // Maybe applied (no answer): the entry may now ride on the new lease, which
                // nobody keeps alive (and is not revoked here), so no renewal of the session
                // may carry the validity past that lease's. The next check finds the entry
                // moved (lost) or not (the move is tried again at the next tick).
                let ceiling = valid_until(started, Duration::from_secs(granted.ttl() as u64));
                let mut t = t;
                t.ceiling = Some(t.ceiling.map_or(ceiling, |c| c.min(ceiling)));
                t.lease.lower_valid_until(ceiling);
                session.state().locks.insert(rev, t);
            }
        }
    }
}
