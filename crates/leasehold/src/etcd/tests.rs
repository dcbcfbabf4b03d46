//! Unit tests: URLs, keys and TTLs, the keep-alive stream's routing of replies, a session's
//! renewals, and the deletion of lost entries.

use std::collections::HashMap;
use std::sync::atomic::AtomicUsize;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ec::{GetOptions, PutOptions};
use etcd_client as ec;
use tokio_util::sync::CancellationToken;

use crate::core::error::Error;
use crate::core::guard::{Lease, clock_drift};
use crate::core::token::LockToken;

use super::keep_alive::{Answer, Generation};
use super::keys::{check_key, entry_key, ttl_secs};
use super::lock;
use super::renewal::delete_orphans;
use super::session::{Attach, Orphan, Session, SessionState, Tracked};
use super::url::{EtcdUrl, parse_url};

#[test]
fn urls() {
    assert_eq!(
        parse_url("etcd://127.0.0.1:2380,h2,[::1]:7").unwrap(),
        EtcdUrl {
            endpoints: vec![
                "http://127.0.0.1:2380".into(),
                "http://h2:2379".into(),
                "http://[::1]:7".into()
            ],
            user: None,
            tls: false,
        }
    );
    let tls = parse_url("etcds://h:1,h2").unwrap();
    assert!(tls.tls);
    assert_eq!(tls.endpoints, ["https://h:1", "https://h2:2379"]);
    assert_eq!(
        parse_url("ETCD://u%40x:p%3Aw@h:1/").unwrap().user,
        Some(("u@x".into(), "p:w".into()))
    );
    for bad in [
        "etcd://",
        "redis://h:1",
        "etcd://h:1/db",
        "etcd://:pw@h:1",
        "etcd://h:0",
    ] {
        assert!(
            matches!(
                parse_url(bad),
                Err(Error::InvalidArgument { what: "url", .. })
            ),
            "{bad}"
        );
    }
}

#[test]
fn keys_and_ttls() {
    assert!(check_key("a\0b").is_err());
    assert!(check_key("").is_err());
    assert!(check_key("a/b").is_ok());
    assert_eq!(ttl_secs(Duration::from_millis(10)).unwrap(), 1);
    assert_eq!(ttl_secs(Duration::from_millis(1001)).unwrap(), 2);
    assert_eq!(ttl_secs(Duration::from_secs(5)).unwrap(), 5);
    assert!(ttl_secs(Duration::ZERO).is_err());
    let t = LockToken::new("tok").unwrap();
    assert_eq!(entry_key("k", &t), b"k\0tok");
}

/// Replies on one stream meet their own requests: by lease, oldest first, each with the
/// send time of the request it answers, however the sessions' requests interleave. A
/// late reply (its sender stopped waiting) is dropped without shifting the later ones.
/// Closing fails every request still waiting and sends nothing more.
#[tokio::test]
async fn keep_alive_replies_meet_their_own_requests() {
    let (sender, mut on_the_wire) = tokio::sync::mpsc::channel(8);
    let generation = Generation::new(1, ec::LeaseKeeper { id: 0, sender });
    let (mut k1, _, a1) = generation.enqueue(10).unwrap();
    let (mut k2, b_sent, b) = generation.enqueue(20).unwrap();
    let (mut k3, a2_sent, a2) = generation.enqueue(10).unwrap();
    for k in [&mut k1, &mut k2, &mut k3] {
        k.keep_alive().await.unwrap();
    }
    let ids: Vec<i64> = (0..3).map(|_| on_the_wire.try_recv().unwrap().id).collect();
    assert_eq!(ids, [10, 20, 10]);
    assert!(generation.silent_since(a2_sent));
    generation.answer(20, 5);
    let answer = |sent, ttl| Answer { sent, ttl };
    assert_eq!(b.await.unwrap(), answer(b_sent, 5));
    assert!(!generation.silent_since(a2_sent));
    // Lease 10's first request was given up: its late reply is dropped, and the next reply
    // answers the second request, with the second request's send time.
    drop(a1);
    generation.answer(10, 3);
    assert_eq!(lock(&generation.state).waiting[&10].len(), 1);
    generation.answer(10, 0);
    assert_eq!(a2.await.unwrap(), answer(a2_sent, 0));
    assert!(lock(&generation.state).waiting.is_empty());
    // A reply nobody asked for changes nothing.
    generation.answer(30, 3);
    let (_, _, c) = generation.enqueue(10).unwrap();
    generation.close();
    assert!(c.await.is_err(), "a closed stream answers nothing");
    assert!(generation.enqueue(10).is_none() && !generation.is_open());
    assert!(generation.stop.is_cancelled());
}

/// A session of lease 1, granted `granted` by a request sent at `t0`, with no lock.
fn test_session(t0: Instant, granted: Duration) -> Session {
    Session {
        secs: granted.as_secs() as i64,
        id: 1,
        waiters: AtomicUsize::new(0),
        state: Mutex::new(SessionState {
            renewed_at: t0,
            granted,
            interval: granted / 4,
            locks: HashMap::new(),
            orphans: Vec::new(),
        }),
        dead: CancellationToken::new(),
    }
}

/// A session keeps each orphan's entry once (a transaction must not name a key twice), and
/// none once it has ended (its lease goes, and the entries with it).
#[test]
fn a_session_keeps_each_orphan_once_and_none_once_ended() {
    let session = test_session(Instant::now(), Duration::from_secs(2));
    let token = LockToken::new("tok").unwrap();
    let abandoned = |key: &[u8]| Orphan::Abandoned {
        entry: key.to_vec(),
        token: token.clone(),
    };
    session.adopt([abandoned(b"k\0a"), abandoned(b"k\0b")]);
    session.adopt([
        Orphan::Lost {
            entry: b"k\0a".to_vec(),
            rev: 7,
        },
        abandoned(b"k\0b"),
    ]);
    {
        let st = session.state();
        let kept: Vec<&[u8]> = st.orphans.iter().map(Orphan::entry).collect();
        assert_eq!(kept, [b"k\0a".as_slice(), b"k\0b".as_slice()]);
    }
    session.die(crate::core::error::LossReason::Expired);
    session.adopt([abandoned(b"k\0c")]);
    assert_eq!(session.state().orphans.len(), 2);
}

/// A session's validity only moves forward, and never once it has run out.
#[test]
fn a_session_is_renewed_only_forward_and_not_revived() {
    let t0 = Instant::now();
    let granted = Duration::from_secs(2);
    let session = test_session(t0, granted);
    let until = |at: Instant| at + granted - clock_drift(granted);
    assert_eq!(session.valid_until(), until(t0));
    let t1 = t0 + Duration::from_secs(1);
    assert_eq!(session.renewed(t1, granted), Some(Vec::new()));
    assert_eq!(session.valid_until(), until(t1));
    // A reply to a request sent before the last one applied: nothing moves.
    assert_eq!(session.renewed(t0, granted), Some(Vec::new()));
    assert_eq!(session.valid_until(), until(t1));
    // Sent after the validity ran out: not revived.
    assert_eq!(session.renewed(until(t1), granted), None);
    assert_eq!(session.valid_until(), until(t1));
    session.dead.cancel();
    assert_eq!(
        session.renewed(t1 + Duration::from_millis(1), granted),
        None
    );
}

/// A lock whose `max_hold` move got no answer (its entry may ride on a lease nobody keeps
/// alive) is never carried past that lease's bound by the session's renewals; the other
/// locks of the session are renewed as usual.
#[test]
fn a_ceiling_bounds_the_renewals_of_a_lock() {
    let t0 = Instant::now();
    let granted = Duration::from_secs(10);
    let session = test_session(t0, granted);
    let ceiling = t0 + Duration::from_secs(4);
    let tracked = |key: &str, ceiling: Option<Instant>| {
        let token = LockToken::new("tok").unwrap();
        let lease = Lease::new(key, token, None, t0, granted);
        let t = Tracked {
            entry: entry_key(key, lease.token()),
            lease: lease.clone(),
            secs: 10,
            stop_at: None,
            ceiling,
            attach: Arc::new(Mutex::new(Attach::Dedicated(2))),
        };
        (lease, t)
    };
    let (capped, t) = tracked("capped", Some(ceiling));
    session.state().locks.insert(1, t);
    let (plain, t) = tracked("plain", None);
    session.state().locks.insert(2, t);
    capped.lower_valid_until(ceiling);
    let t1 = t0 + Duration::from_secs(3);
    assert_eq!(session.renewed(t1, granted), Some(Vec::new()));
    assert_eq!(capped.valid_until(), ceiling);
    assert_eq!(plain.valid_until(), t1 + granted - clock_drift(granted));
}

/// The deletion of a session's orphans deletes exactly those entries: a lost lock's with the
/// same revision on the same lease, an abandoned one that still stores its token; nothing
/// else. etcd answered, so none is left for the next renewal.
#[tokio::test]
async fn orphans_are_deleted_by_revision_and_lease_or_by_token() {
    let Some(etcd) = leasehold_harness::etcd_for_test() else {
        return;
    };
    let raw = ec::Client::connect([etcd.endpoint()], None).await.unwrap();
    let mut leases = raw.lease_client();
    let session = leases.grant(10, None).await.unwrap().id();
    let other = leases.grant(10, None).await.unwrap().id();
    let mut kv = raw.kv_client();
    let put = |key: &'static str, value: &'static str, lease: i64| {
        let mut kv = kv.clone();
        async move {
            let options = PutOptions::new().with_lease(lease);
            let resp = kv.put(key, value, Some(options)).await.unwrap();
            resp.header().unwrap().revision()
        }
    };
    let lost = put("a\0lost", "t", session).await;
    let stale = put("a\0stale", "t", session).await;
    let moved = put("a\0moved", "t", other).await;
    put("a\0abandoned", "mine", session).await;
    put("a\0taken", "theirs", session).await;
    let token = |t: &str| LockToken::new(t).unwrap();
    let orphans = vec![
        Orphan::Lost {
            entry: b"a\0lost".to_vec(),
            rev: lost,
        },
        Orphan::Lost {
            entry: b"a\0stale".to_vec(),
            rev: stale + 100,
        },
        Orphan::Lost {
            entry: b"a\0moved".to_vec(),
            rev: moved,
        },
        Orphan::Abandoned {
            entry: b"a\0abandoned".to_vec(),
            token: token("mine"),
        },
        Orphan::Abandoned {
            entry: b"a\0taken".to_vec(),
            token: token("mine"),
        },
    ];
    let left = delete_orphans(&raw, session, orphans, Duration::from_secs(5)).await;
    assert!(left.is_empty(), "{left:?}");
    let left = kv
        .get("a\0", Some(GetOptions::new().with_prefix()))
        .await
        .unwrap();
    let left: Vec<&[u8]> = left.kvs().iter().map(|kv| kv.key()).collect();
    assert_eq!(
        left,
        [
            b"a\0moved".as_slice(),
            b"a\0stale".as_slice(),
            b"a\0taken".as_slice()
        ]
    );
}
