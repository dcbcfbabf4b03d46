//! One waiter of a client woken per release: a lock can be taken by one waiter only, so waking
//! every waiter of the client at each release (a herd) makes all but one of them attempt for
//! nothing, one after another on the client's connection and under the server's row or key.

use std::sync::Arc;

use tokio::sync::Notify;

/// A lock waiter's share of its name's one-per-release wake-up, for a client whose waiters of
/// one name share one [`Notify`] (Redis: `Notifier::subscribe_one`; PostgreSQL lease rows:
/// the lock's waiters of a name). A release calls [`Notify::notify_one`] on it.
///
/// **No release is left without a local attempt after it**, for any number of waiters:
/// * a release wakes the waiter asleep longest in [`OneWake::released`], which attempts next;
/// * a release that finds none asleep leaves a permit (one, however many releases came), and
///   the next waiter to sleep returns at once and attempts, unless an attempt that went out
///   after the release already covers it: [`OneWake::mark_seen`], called before every attempt,
///   uses the permit up;
/// * a waiter woken that leaves before it attempts (its deadline, a cancelled wait) hands the
///   wake-up on to the next one (on drop), and so does a woken pause dropped before it ran
///   (tokio's `Notified` forwards a `notify_one` it did not consume).
///
/// Whoever then takes the lock wakes the next waiter with its own release; a waiter that lost
/// the race to another client was woken by a release it attempted after, and the winner's
/// release is announced as any other. The waiters' pauses stay bounded by their backoff and
/// the holder's remaining lease: a wake-up is only ever a hint to attempt early.
pub(crate) struct OneWake {
    notify: Arc<Notify>,
    /// Woken, and not attempted since: leaving now hands the wake-up on.
    woken: bool,
}

impl OneWake {
    /// A waiter of the name whose releases `notify_one` `notify`.
    pub(crate) fn new(notify: Arc<Notify>) -> Self {
        OneWake {
            notify,
            woken: false,
        }
    }

    /// Before an attempt: the attempt about to go out covers every release so far, so a permit
    /// one of them left is used up by it, and a wake-up this waiter got is answered by it.
    pub(crate) fn mark_seen(&mut self) {
        use futures_util::FutureExt;
        let _ = self.notify.notified().now_or_never();
        self.woken = false;
    }

    /// Resolves at the next release that picks this waiter (or at once, on a permit left by a
    /// release since [`OneWake::mark_seen`]). Cancel-safe: a pick it did not see is forwarded.
    pub(crate) async fn released(&mut self) {
        self.notify.notified().await;
        self.woken = true;
    }
}

impl Drop for OneWake {
    fn drop(&mut self) {
        if self.woken {
            // Woken, but leaving without the attempt: the release is another waiter's now.
            self.notify.notify_one();
        }
    }
}

#[cfg(test)]
mod tests {
    use std::future::Future;
    use std::pin::pin;
    use std::sync::Arc;
    use std::task::{Context, Poll};

    use futures_util::task::noop_waker_ref;
    use tokio::sync::Notify;

    use super::OneWake;

    fn ready(f: std::pin::Pin<&mut impl Future<Output = ()>>) -> bool {
        f.poll(&mut Context::from_waker(noop_waker_ref())) == Poll::Ready(())
    }

    #[test]
    fn a_release_wakes_one_of_three_waiters_and_a_leaver_hands_it_on() {
        let notify = Arc::new(Notify::new());
        let (mut a, mut b, mut c) = (
            OneWake::new(notify.clone()),
            OneWake::new(notify.clone()),
            OneWake::new(notify.clone()),
        );
        let mut fa = Box::pin(a.released());
        let (mut fb, mut fc) = (pin!(b.released()), pin!(c.released()));
        assert!(!ready(fa.as_mut()) && !ready(fb.as_mut()) && !ready(fc.as_mut()));
        notify.notify_one();
        // The longest asleep (the first to poll) is picked, and only it.
        assert!(ready(fa.as_mut()), "the first asleep was not woken");
        assert!(
            !ready(fb.as_mut()) && !ready(fc.as_mut()),
            "a release woke a herd"
        );
        drop(fa);
        drop(a); // woken, it leaves without attempting
        let woken = [ready(fb.as_mut()), ready(fc.as_mut())];
        assert_eq!(
            woken,
            [true, false],
            "the wake-up of a waiter that left was not handed on to the next asleep alone"
        );
    }

    #[test]
    fn a_release_while_nobody_sleeps_leaves_one_permit_that_an_attempt_uses_up() {
        let notify = Arc::new(Notify::new());
        let mut w = OneWake::new(notify.clone());
        notify.notify_one();
        notify.notify_one();
        // Released while attempting: the pause after it returns at once.
        assert!(
            ready(pin!(w.released())),
            "a release while attempting was lost"
        );
        // One permit however many releases: the next pause sleeps.
        w.mark_seen();
        assert!(!ready(pin!(w.released())));
        // A permit left before an attempt is covered by that attempt.
        notify.notify_one();
        w.mark_seen();
        assert!(
            !ready(pin!(w.released())),
            "an attempt did not use the permit up"
        );
        // An attempt answers its wake-up: leaving after it hands nothing on.
        let other = OneWake::new(notify.clone());
        drop(other);
        notify.notify_one();
        assert!(ready(pin!(w.released())));
        w.mark_seen();
        drop(w);
        assert!(
            !ready(pin!(OneWake::new(notify).released())),
            "a waiter that had attempted handed a wake-up on"
        );
    }
}
