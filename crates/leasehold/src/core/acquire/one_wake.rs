//! One waiter of a client woken per release: a lock can be taken by one waiter only, so waking
//! every waiter of the client at each release (a herd) makes all but one of them attempt for
//! nothing, one after another on the client's connection and under the server's row or key.

use std::sync::{Arc, Mutex};

use tokio::sync::Notify;

/// The wake-up that a client's lock waiters of one name share (Redis: `Notifier::subscribe_one`;
/// PostgreSQL lease rows: the lock's waiters of a name): a release the server ran, as the client
/// sees it (a notification, a key found gone), calls [`NameWakeup::released`]; the client's own
/// release, as it goes on the connection, [`NameWakeup::releasing`]. Each waiter holds a
/// [`OneWake`] on it.
///
/// **No release is left without a local attempt after it**, for any number of waiters:
/// * a release seen while none of the waiters' attempts is out wakes the waiter asleep
///   longest ([`OneWake::released`]), which attempts next;
/// * a release seen while none is out and none asleep leaves a permit (one, however many
///   releases came): the next waiter to sleep returns at once and attempts, unless an attempt
///   that went out after the release already covers it ([`OneWake::mark_seen`], called before
///   every attempt, uses the permit up);
/// * a release the server ran, seen while an attempt is out (from [`OneWake::mark_seen`] to its
///   [`OneWake::answered`]), wakes nobody: it is left to the attempts out. An attempt answered
///   busy after it, with none other still out, hands it on as a release seen then (it wakes the
///   waiter asleep longest, or leaves the permit for its own pause). An attempt answered
///   *taken* ends it: a lock has one holder, so the released holder's term ended before the
///   grant ran (nobody else could release between the grant and its reply), and the grant
///   covers the release. This is what spares the second waiter that a release's `NOTIFY`
///   would wake when the waiter woken by the client's own release is already attempting;
/// * the client's own release is not left to the attempts out ([`NameWakeup::releasing`]):
///   they went out before it, on the connection it follows, so they run before it and lose;
///   the waiter it wakes attempts right behind it;
/// * a waiter woken that leaves before it attempts (its deadline, a cancelled wait) hands the
///   wake-up on to the next one (on drop), and so does a woken pause dropped before it ran
///   (tokio's `Notified` forwards a `notify_one` it did not consume); a waiter that leaves with
///   its attempt out is answered busy.
///
/// Whoever then takes the lock wakes the next waiter with its own release; a waiter that lost
/// the race to another client was woken by a release it attempted after, and the winner's
/// release is announced as any other. The waiters' pauses stay bounded by their backoff and
/// the holder's remaining lease: a wake-up is only ever a hint to attempt early. The Stateright
/// model `leasehold-model/src/mark.rs` checks this (docs/model-checking.md).
#[derive(Default)]
pub(crate) struct NameWakeup {
    notify: Notify,
    out: Mutex<Out>,
}

/// The attempts out, and whether a release was seen while they were.
#[derive(Default)]
struct Out {
    attempts: usize,
    released: bool,
}

impl NameWakeup {
    fn out(&self) -> std::sync::MutexGuard<'_, Out> {
        self.out.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A release of the name that the server ran was seen: left to the attempts out, if any;
    /// else the waiter asleep longest is woken, or the permit left.
    pub(crate) fn released(&self) {
        let mut out = self.out();
        if out.attempts > 0 {
            out.released = true;
        } else {
            self.notify.notify_one();
        }
    }

    /// The client's own release of the name is on its connection (the server has not run it):
    /// the waiter asleep longest is woken, or the permit left, whatever attempts are out.
    pub(crate) fn releasing(&self) {
        self.notify.notify_one();
    }
}

/// A lock waiter's share of its name's one-per-release wake-up ([`NameWakeup`], whose docs say
/// why no release is left without an attempt after it).
pub(crate) struct OneWake {
    name: Arc<NameWakeup>,
    /// Woken, and not attempted since: leaving now hands the wake-up on.
    woken: bool,
    /// An attempt of this waiter is out (counted in [`NameWakeup`]'s attempts).
    out: bool,
}

impl OneWake {
    /// A waiter of the name whose releases reach `name` ([`NameWakeup::released`],
    /// [`NameWakeup::releasing`]).
    pub(crate) fn new(name: Arc<NameWakeup>) -> Self {
        OneWake {
            name,
            woken: false,
            out: false,
        }
    }

    /// Before an attempt: the attempt about to go out covers every release so far, so a permit
    /// one of them left is used up by it, and a wake-up this waiter got is answered by it; a
    /// release seen from now until [`OneWake::answered`] is left to it.
    pub(crate) fn mark_seen(&mut self) {
        use futures_util::FutureExt;
        let mut out = self.name.out();
        let _ = self.name.notify.notified().now_or_never();
        out.released = false;
        if !std::mem::replace(&mut self.out, true) {
            out.attempts += 1;
        }
        self.woken = false;
    }

    /// The attempt since [`OneWake::mark_seen`] was answered: `taken`, or busy (see
    /// [`NameWakeup`]).
    pub(crate) fn answered(&mut self, taken: bool) {
        if !std::mem::take(&mut self.out) {
            return;
        }
        let mut out = self.name.out();
        out.attempts -= 1;
        if taken {
            out.released = false;
        } else if out.attempts == 0 && std::mem::take(&mut out.released) {
            self.name.notify.notify_one();
        }
    }

    /// Resolves at the next release that picks this waiter (or at once, on a permit left by a
    /// release since [`OneWake::mark_seen`]). Cancel-safe: a pick it did not see is forwarded.
    /// An attempt not yet answered is answered busy first.
    pub(crate) async fn released(&mut self) {
        self.answered(false);
        self.name.notify.notified().await;
        self.woken = true;
    }
}

impl Drop for OneWake {
    fn drop(&mut self) {
        // Leaving with an attempt out: whatever it got is given back, so it did not cover a
        // release seen meanwhile.
        self.answered(false);
        if self.woken {
            // Woken, but leaving without the attempt: the release is another waiter's now.
            self.name.notify.notify_one();
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

    use super::{NameWakeup, OneWake};

    fn ready(f: std::pin::Pin<&mut impl Future<Output = ()>>) -> bool {
        f.poll(&mut Context::from_waker(noop_waker_ref())) == Poll::Ready(())
    }

    #[test]
    fn a_release_wakes_one_of_three_waiters_and_a_leaver_hands_it_on() {
        let name = Arc::new(NameWakeup::default());
        let (mut a, mut b, mut c) = (
            OneWake::new(name.clone()),
            OneWake::new(name.clone()),
            OneWake::new(name.clone()),
        );
        let mut fa = Box::pin(a.released());
        let (mut fb, mut fc) = (pin!(b.released()), pin!(c.released()));
        assert!(!ready(fa.as_mut()) && !ready(fb.as_mut()) && !ready(fc.as_mut()));
        name.released();
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
        let name = Arc::new(NameWakeup::default());
        let mut w = OneWake::new(name.clone());
        name.released();
        name.released();
        // Released while nobody attempted or slept: the pause returns at once.
        assert!(
            ready(pin!(w.released())),
            "a release while nobody slept was lost"
        );
        // One permit however many releases: the next pause sleeps.
        w.mark_seen();
        assert!(!ready(pin!(w.released())));
        // A permit left before an attempt is covered by that attempt.
        name.released();
        w.mark_seen();
        assert!(
            !ready(pin!(w.released())),
            "an attempt did not use the permit up"
        );
        // An attempt answers its wake-up: leaving after it hands nothing on.
        let other = OneWake::new(name.clone());
        drop(other);
        name.released();
        assert!(ready(pin!(w.released())));
        w.mark_seen();
        w.answered(false);
        drop(w);
        assert!(
            !ready(pin!(OneWake::new(name).released())),
            "a waiter that had attempted handed a wake-up on"
        );
    }

    /// A release seen while an attempt is out wakes no sleeper: the attempt answered taken ends
    /// it, one answered busy hands it on (to the sleeper, or to its own pause).
    #[test]
    fn a_release_seen_while_an_attempt_is_out_is_left_to_it() {
        let name = Arc::new(NameWakeup::default());
        let (mut out, mut asleep) = (OneWake::new(name.clone()), OneWake::new(name.clone()));
        let mut sleeping = Box::pin(asleep.released());
        assert!(!ready(sleeping.as_mut()));
        // Taken: the release was covered by the grant, and nobody else wakes.
        out.mark_seen();
        name.released();
        assert!(
            !ready(sleeping.as_mut()),
            "a release woke a sleeper while an attempt was out"
        );
        out.answered(true);
        assert!(
            !ready(sleeping.as_mut()),
            "a release covered by a grant woke a sleeper"
        );
        // Busy: the release is handed on to the sleeper.
        out.mark_seen();
        name.released();
        assert!(!ready(sleeping.as_mut()));
        out.answered(false);
        assert!(
            ready(sleeping.as_mut()),
            "a release seen while a losing attempt was out was lost"
        );
        drop(sleeping);
        // Busy, nobody asleep: its own pause returns at once.
        asleep.mark_seen();
        asleep.answered(false);
        out.mark_seen();
        name.released();
        assert!(
            ready(pin!(out.released())),
            "a release seen while the attempt was out did not end its pause"
        );
        // Two out: the first answered busy leaves it to the other; that one answered busy too
        // hands it on.
        let (mut a, mut b) = (OneWake::new(name.clone()), OneWake::new(name.clone()));
        a.mark_seen();
        b.mark_seen();
        name.released();
        let mut a_sleeps = Box::pin(a.released());
        assert!(
            !ready(a_sleeps.as_mut()),
            "handed on while another attempt was out"
        );
        b.answered(false);
        assert!(
            ready(a_sleeps.as_mut()),
            "the last busy answer did not hand it on"
        );
        // Leaving with an attempt out hands it on.
        drop(a_sleeps);
        let mut c = OneWake::new(name.clone());
        let mut c_sleeps = Box::pin(c.released());
        assert!(!ready(c_sleeps.as_mut()));
        b.mark_seen();
        name.released();
        drop(b);
        assert!(
            ready(c_sleeps.as_mut()),
            "a waiter that left with its attempt out kept the release"
        );
    }

    /// The client's own release, going out behind the attempts out (which run before it and
    /// lose), wakes the waiter asleep longest at once.
    #[test]
    fn the_clients_own_release_wakes_a_sleeper_whatever_attempts_are_out() {
        let name = Arc::new(NameWakeup::default());
        let (mut out, mut asleep) = (OneWake::new(name.clone()), OneWake::new(name.clone()));
        let mut sleeping = pin!(asleep.released());
        assert!(!ready(sleeping.as_mut()));
        out.mark_seen();
        name.releasing();
        assert!(
            ready(sleeping.as_mut()),
            "the client's own release was left to an attempt that went out before it"
        );
        out.answered(false);
    }
}
