//! The engine against a scripted provider. Orders are observed (what was attempted, asked and
//! subscribed, in which order); the only durations are bounds the engine must respect.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_util::future::BoxFuture;
use tokio::sync::Notify;

use super::{Ask, Attempts, NameWakeup, OneWake, Wakeup, wait};
use crate::core::error::{Error, Result};
use crate::core::guard::{HeldLock, Lease, LockGuard};
use crate::core::options::{Backoff, FOREVER, LockOptions};
use crate::core::outcome::TryAcquire;
use crate::core::token::LockToken;

#[derive(Debug)]
struct Nothing;

impl HeldLock for Nothing {
    fn release<'a>(&'a self, _: &'a Lease) -> BoxFuture<'a, Result<()>> {
        Box::pin(async { Ok(()) })
    }
    fn extend<'a>(&'a self, _: &'a Lease, ttl: Duration) -> BoxFuture<'a, Result<Instant>> {
        Box::pin(async move { Ok(Instant::now() + ttl) })
    }
}

/// A grant of "k" for `options`' TTL, from now.
fn granted(options: &LockOptions) -> TryAcquire {
    let lease = Lease::new(
        "k",
        LockToken::random(),
        None,
        Instant::now(),
        options.ttl(),
    );
    TryAcquire::Acquired(LockGuard::new(Arc::new(Nothing), lease))
}

/// What the scripted provider answers, in order (then busy for ever).
#[derive(Clone, Copy, Debug)]
enum Answer {
    Busy(Option<Duration>),
    Granted,
    Late,
    Moving,
    Refused,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Event {
    Attempt,
    Subscribe,
}

#[derive(Default)]
struct Log {
    events: Vec<Event>,
    /// What each attempt was asked.
    asks: Vec<Ask>,
}

struct Script {
    answers: Mutex<VecDeque<Answer>>,
    log: Arc<Mutex<Log>>,
    /// `Some`: the provider has a wake-up source, which this wakes.
    releases: Option<Arc<Notify>>,
}

impl Script {
    fn new(answers: &[Answer], releases: Option<Arc<Notify>>) -> Script {
        Script {
            answers: Mutex::new(answers.iter().copied().collect()),
            log: Arc::default(),
            releases,
        }
    }
    fn asks(&self) -> Vec<Ask> {
        self.log.lock().unwrap().asks.clone()
    }
    fn events(&self) -> Vec<Event> {
        self.log.lock().unwrap().events.clone()
    }
}

struct Released(Arc<Notify>);

impl Wakeup for Released {
    fn mark_seen(&mut self) {}
    fn released(&mut self) -> BoxFuture<'_, ()> {
        Box::pin(self.0.notified())
    }
}

impl Attempts for Script {
    fn name(&self) -> &str {
        "k"
    }
    async fn attempt(&self, options: &LockOptions, ask: Ask) -> Result<TryAcquire> {
        let mut log = self.log.lock().unwrap();
        log.events.push(Event::Attempt);
        log.asks.push(ask);
        drop(log);
        let answer = self
            .answers
            .lock()
            .unwrap()
            .pop_front()
            .unwrap_or(Answer::Busy(None));
        match answer {
            Answer::Busy(remaining) => Ok(TryAcquire::Busy { remaining }),
            Answer::Granted => Ok(granted(options)),
            Answer::Late => Err(Error::ExpiredOnArrival {
                key: "k".into(),
                elapsed: options.ttl(),
                ttl: options.ttl(),
            }),
            Answer::Moving => Err(Error::Topology {
                reason: "moving".into(),
            }),
            Answer::Refused => Err(Error::invalid("ttl", "refused")),
        }
    }
    fn wakes(&self) -> bool {
        self.releases.is_some()
    }
    async fn wakeups(&self) -> Option<Box<dyn Wakeup>> {
        self.log.lock().unwrap().events.push(Event::Subscribe);
        self.releases
            .clone()
            .map(|n| Box::new(Released(n)) as Box<dyn Wakeup>)
    }
    fn retries(&self, e: &Error) -> bool {
        matches!(e, Error::Topology { .. })
    }
}

/// Options whose backoff is `pause` every time (jittered within `[pause/2, pause]`).
fn options(pause: Duration) -> LockOptions {
    LockOptions::new(Duration::from_secs(10)).backoff(Backoff::constant(pause))
}

const HOUR: Duration = Duration::from_secs(3600);

#[tokio::test]
async fn without_a_wait_there_is_one_attempt() {
    let script = Script::new(&[Answer::Busy(Some(Duration::from_secs(3)))], None);
    let err = wait(&script, &options(HOUR), None).await.unwrap_err();
    assert!(
        matches!(err, Error::NotAcquired { attempts: 1, .. }),
        "{err}"
    );
    assert_eq!(script.asks(), vec![Ask::ONCE]);
    assert_eq!(
        script.events(),
        vec![Event::Attempt],
        "no subscription for one try"
    );
    // A late grant without a wait is the caller's to see.
    let script = Script::new(&[Answer::Late], None);
    let err = wait(&script, &options(HOUR), None).await.unwrap_err();
    assert!(matches!(err, Error::ExpiredOnArrival { .. }), "{err}");
}

#[tokio::test]
async fn a_busy_name_is_retried_until_the_deadline() {
    let script = Script::new(&[], None);
    let bound = Duration::from_millis(300);
    let err = wait(&script, &options(Duration::from_millis(20)), Some(bound))
        .await
        .unwrap_err();
    let asks = script.asks();
    let Error::NotAcquired { attempts, .. } = err else {
        panic!("{err}");
    };
    assert_eq!(attempts as usize, asks.len());
    assert!(asks.len() >= 2, "{asks:?}");
    // Each attempt may wait on the server only for the time left, less and less.
    for pair in asks.windows(2) {
        assert!(
            pair[0].wait.unwrap() <= bound && pair[1].wait < pair[0].wait,
            "{asks:?}"
        );
    }
    // Without a wake-up source every attempt asks for the holder's remaining lease (it bounds
    // the pause), and none subscribes.
    assert!(asks.iter().all(|a| a.remaining), "{asks:?}");
    assert!(!script.events().contains(&Event::Subscribe));
}

#[tokio::test]
async fn a_waiter_subscribes_only_once_busy_and_attempts_again_at_once() {
    let releases = Arc::new(Notify::new());
    let script = Arc::new(Script::new(
        &[Answer::Busy(None), Answer::Busy(None), Answer::Granted],
        Some(releases.clone()),
    ));
    // A backoff of an hour: only a release wakes this waiter within the test.
    let task = {
        let script = script.clone();
        tokio::spawn(async move { wait(&*script, &options(HOUR), Some(HOUR)).await })
    };
    while script.events().len() < 3 {
        tokio::task::yield_now().await;
    }
    // Attempted (not asking for the holder's remaining lease), found busy, subscribed,
    // attempted again at once (no pause: the backoff is an hour) asking for it, and now sleeps.
    assert_eq!(
        script.events(),
        vec![Event::Attempt, Event::Subscribe, Event::Attempt]
    );
    let asks = script.asks();
    assert!(!asks[0].remaining && asks[1].remaining, "{asks:?}");
    releases.notify_one();
    let guard = task.await.unwrap().unwrap();
    assert!(guard.is_held());
    let asks = script.asks();
    assert_eq!(asks.len(), 3, "woken by the release");
    // Woken by a release: the cheaper request, not asking for the holder's remaining lease.
    assert!(!asks[2].remaining, "{asks:?}");
}

// Time paused: it moves only when every task waits, so the release below ends the second
// pause (the test task is busy yielding meanwhile), and the timers end the others.
#[tokio::test(start_paused = true)]
async fn an_attempt_after_a_release_asks_no_lease_and_one_after_a_timed_pause_does() {
    let releases = Arc::new(Notify::new());
    // Busy at first and after subscribing; then busy again once woken (another waiter took
    // it), and after the pause that follows (its backoff ends it, no release); then granted.
    let script = Arc::new(Script::new(
        &[
            Answer::Busy(None),
            Answer::Busy(None),
            Answer::Busy(None),
            Answer::Busy(None),
            Answer::Granted,
        ],
        Some(releases.clone()),
    ));
    let task = {
        let script = script.clone();
        let opts = options(Duration::from_millis(20));
        tokio::spawn(async move { wait(&*script, &opts, Some(HOUR)).await })
    };
    while script.asks().len() < 2 {
        tokio::task::yield_now().await;
    }
    releases.notify_one();
    let guard = task.await.unwrap().unwrap();
    assert!(guard.is_held());
    let asks: Vec<bool> = script.asks().iter().map(|a| a.remaining).collect();
    // The first attempt, the one after subscribing, the one after the release, then the ones
    // after timed pauses (the notification was spent on the third).
    assert_eq!(asks, vec![false, true, false, true, true], "{asks:?}");
}

#[tokio::test]
async fn a_grant_given_back_is_not_woken_by_its_own_release() {
    let releases = Arc::new(Notify::new());
    // A release is pending: a waiter woken by it would attempt again at once, and be granted.
    releases.notify_one();
    let script = Script::new(&[Answer::Late, Answer::Granted], Some(releases.clone()));
    let bound = Duration::from_millis(200);
    let err = wait(&script, &options(HOUR), Some(bound))
        .await
        .unwrap_err();
    assert!(
        matches!(err, Error::NotAcquired { attempts: 1, .. }),
        "{err}"
    );
}

#[tokio::test]
async fn errors_ridden_out_end_as_the_last_failure_and_others_at_once() {
    let pause = options(Duration::from_millis(20));
    let bound = Some(Duration::from_millis(200));
    let script = Script::new(&[Answer::Moving; 1000], None);
    let err = wait(&script, &pause, bound).await.unwrap_err();
    assert!(matches!(err, Error::Topology { .. }), "{err}");
    assert!(script.asks().len() > 1);
    let script = Script::new(&[Answer::Moving, Answer::Granted], None);
    assert!(wait(&script, &pause, bound).await.is_ok());
    let script = Script::new(&[Answer::Refused, Answer::Granted], None);
    let err = wait(&script, &pause, bound).await.unwrap_err();
    assert!(matches!(err, Error::InvalidArgument { .. }), "{err}");
    assert_eq!(script.asks().len(), 1);
}

#[tokio::test]
async fn waiting_for_ever_is_a_century_and_does_not_overflow() {
    let script = Script::new(&[Answer::Busy(None), Answer::Granted], None);
    let guard = wait(
        &script,
        &options(Duration::from_millis(10)),
        Some(Duration::MAX),
    )
    .await
    .unwrap();
    assert!(guard.is_held());
    let first = script.asks()[0].wait.unwrap();
    assert!(first <= FOREVER && first > FOREVER - HOUR, "{first:?}");
}

#[tokio::test]
async fn cleanups_settled_waits_for_a_running_cleanup_and_no_longer_than_its_bound() {
    let (done, finished) = tokio::sync::oneshot::channel::<()>();
    let abandoned = super::OnAbandon::new("test", move || async move {
        let _ = finished.await;
    });
    drop(abandoned); // the clean-up now runs in the background, until `done` fires
    // Still running: not settled within a bound (the bound is what ends this call).
    assert!(!super::cleanups_settled(Duration::from_millis(20)).await);
    done.send(()).unwrap();
    // Other tests' clean-ups may run meanwhile; they end too.
    assert!(super::cleanups_settled(Duration::from_secs(60)).await);
}

/// A lock waiter's share of [`NameWakeup`], as the Redis and lease-row providers hand it to the
/// engine; `asleep`: its pause is waiting for a release.
struct Share(OneWake, Arc<AtomicBool>);

impl Wakeup for Share {
    fn mark_seen(&mut self) {
        self.1.store(false, Ordering::SeqCst);
        self.0.mark_seen();
    }
    fn released(&mut self) -> BoxFuture<'_, ()> {
        self.1.store(true, Ordering::SeqCst);
        Box::pin(self.0.released())
    }
    fn answered(&mut self, taken: bool) {
        self.0.answered(taken);
    }
}

/// Busy twice (the first attempt, the one after subscribing), then an attempt that stays out
/// until `gate` lets it answer `last`.
struct Gated {
    name: Arc<NameWakeup>,
    asleep: Arc<AtomicBool>,
    attempts: AtomicUsize,
    gate: tokio::sync::Semaphore,
    last: Answer,
}

impl Attempts for Gated {
    fn name(&self) -> &str {
        "k"
    }
    async fn attempt(&self, options: &LockOptions, _: Ask) -> Result<TryAcquire> {
        if self.attempts.fetch_add(1, Ordering::SeqCst) < 2 {
            return Ok(TryAcquire::Busy { remaining: None });
        }
        self.gate.acquire().await.unwrap().forget();
        match self.last {
            Answer::Granted => Ok(granted(options)),
            _ => Ok(TryAcquire::Busy { remaining: None }),
        }
    }
    fn wakes(&self) -> bool {
        true
    }
    async fn wakeups(&self) -> Option<Box<dyn Wakeup>> {
        let share = Share(OneWake::new(self.name.clone()), self.asleep.clone());
        Some(Box::new(share) as Box<dyn Wakeup>)
    }
}

/// The engine tells a one-per-release wake-up how each attempt was answered: a release seen
/// while the woken waiter's attempt is out (the release's notification, after the client's own
/// release woke it) wakes no other waiter, and stays spared once that attempt takes the lock;
/// answered busy, it wakes the other waiter.
#[tokio::test]
async fn a_release_seen_while_the_woken_attempt_is_out_wakes_another_waiter_only_if_it_lost() {
    for last in [Answer::Granted, Answer::Busy(None)] {
        let name = Arc::new(NameWakeup::default());
        let gated = Arc::new(Gated {
            name: name.clone(),
            asleep: Arc::default(),
            attempts: AtomicUsize::new(0),
            gate: tokio::sync::Semaphore::new(0),
            last,
        });
        // A backoff of an hour: only releases wake the waiters within the test.
        let task = {
            let gated = gated.clone();
            tokio::spawn(async move { wait(&*gated, &options(HOUR), Some(HOUR)).await })
        };
        while !gated.asleep.load(Ordering::SeqCst) {
            tokio::task::yield_now().await;
        }
        // Another waiter of the name, asleep after the engine's waiter.
        let mut other = OneWake::new(name.clone());
        other.mark_seen();
        other.answered(false);
        let mut other_woken = Box::pin(other.released());
        let mut woken = || futures_util::FutureExt::now_or_never(other_woken.as_mut()).is_some();
        assert!(!woken());
        // A release wakes the waiter asleep longest, whose attempt goes out and stays out.
        name.released();
        while gated.attempts.load(Ordering::SeqCst) < 3 {
            tokio::task::yield_now().await;
        }
        assert!(!woken(), "a release woke two waiters");
        // The release seen again (its notification) while that attempt is out.
        name.released();
        assert!(
            !woken(),
            "a release seen while an attempt was out woke a sleeper"
        );
        gated.gate.add_permits(1);
        match last {
            Answer::Granted => {
                assert!(task.await.unwrap().unwrap().is_held());
                assert!(
                    !woken(),
                    "a release covered by the woken waiter's grant woke another"
                );
            }
            _ => {
                while gated.attempts.load(Ordering::SeqCst) < 3
                    || !gated.asleep.load(Ordering::SeqCst)
                {
                    tokio::task::yield_now().await;
                }
                assert!(
                    woken(),
                    "a release seen while a losing attempt was out was lost"
                );
                task.abort();
            }
        }
    }
}
