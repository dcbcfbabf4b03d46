//! The tracking wake-up (issue 32): waiters of one client woken by the server's invalidation of
//! the key they wait for, with no message from the releaser. Safety does not depend on it (a
//! waiter's pause always ends at the holder's remaining lease or its backoff); what is checked
//! is that those timers are never *needed*: the property "no missed release".
//!
//! Mirrors `src/redis/waiting` (`Notifier::subscribe_as`, `Router::invalidated`, `track`,
//! `Notifier::released_here`, the `one` wake-up, a `tokio::sync::Notify`) and the engine's
//! loop (`core/acquire.rs`: the first attempt, the registration, the attempt right after it,
//! `mark_seen` before each attempt, the pause).
//!
//! **Actors.** Two waiters of the tracking client W, and another client X that acquires,
//! extends and releases the key, or lets it expire (a budget of [`WakeModel::x_steps`] steps).
//! A waiter that wins holds and then releases, or its key expires under it. Its release wakes
//! the client's waiters as soon as its delete is on the wire (`released_here`, through
//! `queued_then`), before the server runs it: their attempts are meant to follow the delete on
//! the connection, but the model lets them run before it too (the order is only a hint). The server: the key, and whether it tracks the key for W's subscriber
//! connection (one-shot: a change of the key sends one invalidation and stops tracking).
//!
//! **Connections.** W's tracking reads go to the server in order; their replies and the
//! invalidations come back on two queues whose relative order is *not* kept (the router handles
//! invalidations inside the connection's task, while a read's reply is handled by the task that
//! sent it, so either may be seen first): an over-approximation of the real connection.
//!
//! **The property.** When W is quiet (no read in flight, no reply or invalidation unhandled, no
//! waiter attempting or about to), every waiter asleep is covered: the one-shot wake-up permit
//! is set, or the key is held and the server tracks it (its release or expiry will be
//! reported). Otherwise a release already happened, or will happen, that wakes nobody: the
//! sleepers would wait for their timers.
//!
//! **Bug flags.** `no_reread`: an invalidation wakes nothing and reads nothing (tracking is
//! one-shot, so the next release goes unreported). `no_attempt_after_register`: a waiter sleeps
//! right after registering, without the attempt that closes the gap since its first attempt.

use stateright::{Model, Property};

/// Who holds the key.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Holder {
    /// Nobody.
    Free,
    /// The other client.
    X,
    /// W's waiter `i`.
    W(u8),
}

/// What one of W's waiters is doing.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Waiter {
    /// Before its first attempt.
    Start,
    /// Its first attempt (before it registers) is on its way.
    First,
    /// Registered; its registration's read is in flight (it waits for the reply).
    Registering,
    /// Registered and read (or the key was armed): about to attempt (`mark_seen`, then send).
    Ready,
    /// An attempt after registering is on its way.
    Attempting,
    /// Paused until woken.
    Asleep,
    /// Holds the lock.
    Holding,
    /// Its token-checked delete is on the wire (its client's waiters already woken).
    Releasing,
    /// Released, or gave its lease up.
    Done,
}

/// A tracking read sent on W's subscriber connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Read {
    /// The channel's generation when it was sent (`Channel::generation`).
    pub generation: u8,
    /// Sent after an invalidation: wake a waiter if the key is gone.
    pub wake_if_gone: bool,
    /// The waiter whose registration sent it (it waits for the reply).
    pub registering: Option<u8>,
}

/// A read's reply.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Reply {
    /// The read that was answered.
    pub read: Read,
    /// The key was gone (`PTTL` answered -2).
    pub gone: bool,
}

/// The whole system.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct WakeState {
    /// The server's key.
    pub key: Holder,
    /// The server tracks the key for W's subscriber connection.
    pub tracked: bool,
    /// Reads sent and not yet run by the server, in order.
    pub reads: Vec<Read>,
    /// Replies not yet handled.
    pub replies: Vec<Reply>,
    /// Invalidations not yet handled.
    pub invalidations: u8,
    /// W's waiters.
    pub waiters: Vec<Waiter>,
    /// The channel's registered waiters (`Channel::refs`).
    pub refs: u8,
    /// `Channel::armed`.
    pub armed: bool,
    /// `Channel::generation` (counts the invalidations handled).
    pub generation: u8,
    /// The one-shot wake-up's stored permit (`Notify::notify_one` with nobody asleep).
    pub permit: bool,
    /// Steps X has left.
    pub x_steps: u8,
    /// Some waiter was woken by a read after an invalidation (an example property).
    pub woken_by_read: bool,
    /// A waiter found the key held by a waiter whose delete was on the wire (woken early, it
    /// attempted before the delete ran: an example property).
    pub early_attempt_busy: bool,
}

/// A step.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum WakeAction {
    /// X: `SET NX PX` on a free key.
    XAcquire,
    /// X: extends its lock (`SET ... IFEQ` / `PEXPIRE`): the key changes.
    XExtend,
    /// X: its token-checked delete.
    XRelease,
    /// The key expires (whoever held it).
    Expire,
    /// Waiter `i` sends an attempt (its first, or after `mark_seen`).
    Send(u8),
    /// The server runs waiter `i`'s attempt (`SET NX PX` / the acquire script) and it answers.
    Apply(u8),
    /// The server runs the first read in flight.
    RunRead,
    /// W handles a reply (`track`).
    HandleReply(usize),
    /// W handles an invalidation (`Router::invalidated`).
    HandleInvalidation,
    /// Waiter `i` puts its token-checked delete on the wire, and `released_here` wakes its
    /// client's waiters.
    Release(u8),
    /// The server runs waiter `i`'s delete.
    Delete(u8),
}

/// The model.
#[derive(Clone, Debug)]
pub struct WakeModel {
    /// X's step budget.
    pub x_steps: u8,
    /// Bug flag: an invalidation is not followed by a read.
    pub no_reread: bool,
    /// Bug flag: no attempt right after registering.
    pub no_attempt_after_register: bool,
}

impl WakeModel {
    /// The protocol as built.
    pub fn fixed() -> Self {
        WakeModel {
            x_steps: 4,
            no_reread: false,
            no_attempt_after_register: false,
        }
    }
}

const WAITERS: u8 = 2;

impl WakeState {
    /// The server changed the key: one invalidation if it tracked it, and it stops tracking.
    fn changed(&mut self) {
        if std::mem::take(&mut self.tracked) {
            self.invalidations += 1;
        }
    }

    /// `notify_one`: wakes the first sleeper (it will attempt), or stores the permit.
    fn wake_one(&mut self) {
        match self.waiters.iter().position(|w| *w == Waiter::Asleep) {
            Some(i) => self.waiters[i] = Waiter::Ready,
            None => self.permit = true,
        }
    }

    /// W is quiet: nothing in flight that could still wake a sleeper by itself.
    fn quiet(&self) -> bool {
        self.reads.is_empty()
            && self.replies.is_empty()
            && self.invalidations == 0
            && self.waiters.iter().all(|w| {
                matches!(
                    w,
                    Waiter::Start | Waiter::Asleep | Waiter::Holding | Waiter::Done
                )
            })
    }
}

impl Model for WakeModel {
    type State = WakeState;
    type Action = WakeAction;

    fn init_states(&self) -> Vec<WakeState> {
        vec![WakeState {
            key: Holder::X,
            tracked: false,
            reads: Vec::new(),
            replies: Vec::new(),
            invalidations: 0,
            waiters: vec![Waiter::Start; WAITERS as usize],
            refs: 0,
            armed: false,
            generation: 0,
            permit: false,
            x_steps: self.x_steps,
            woken_by_read: false,
            early_attempt_busy: false,
        }]
    }

    fn actions(&self, s: &WakeState, actions: &mut Vec<WakeAction>) {
        if s.x_steps > 0 {
            match s.key {
                Holder::Free => actions.push(WakeAction::XAcquire),
                Holder::X => {
                    actions.push(WakeAction::XExtend);
                    actions.push(WakeAction::XRelease);
                }
                Holder::W(_) => {}
            }
            if s.key != Holder::Free {
                actions.push(WakeAction::Expire);
            }
        }
        for i in 0..WAITERS {
            match s.waiters[i as usize] {
                Waiter::Start | Waiter::Ready => actions.push(WakeAction::Send(i)),
                Waiter::First | Waiter::Attempting => actions.push(WakeAction::Apply(i)),
                Waiter::Holding => actions.push(WakeAction::Release(i)),
                Waiter::Releasing => actions.push(WakeAction::Delete(i)),
                _ => {}
            }
        }
        if !s.reads.is_empty() {
            actions.push(WakeAction::RunRead);
        }
        for r in 0..s.replies.len() {
            actions.push(WakeAction::HandleReply(r));
        }
        if s.invalidations > 0 {
            actions.push(WakeAction::HandleInvalidation);
        }
    }

    fn next_state(&self, last: &WakeState, action: WakeAction) -> Option<WakeState> {
        let mut s = last.clone();
        match action {
            WakeAction::XAcquire => {
                s.x_steps -= 1;
                s.key = Holder::X;
                s.changed();
            }
            WakeAction::XExtend => {
                s.x_steps -= 1;
                s.changed();
            }
            WakeAction::XRelease | WakeAction::Expire => {
                s.x_steps -= 1;
                s.key = Holder::Free;
                s.changed();
            }
            WakeAction::Send(i) => {
                let w = &mut s.waiters[i as usize];
                *w = match *w {
                    Waiter::Start => Waiter::First,
                    // `mark_seen`: the attempt about to go out covers every release so far.
                    _ => {
                        s.permit = false;
                        Waiter::Attempting
                    }
                };
            }
            WakeAction::Apply(i) => {
                let first = s.waiters[i as usize] == Waiter::First;
                if let Holder::W(h) = s.key
                    && s.waiters[h as usize] == Waiter::Releasing
                {
                    s.early_attempt_busy = true;
                }
                if s.key == Holder::Free {
                    s.key = Holder::W(i);
                    s.changed();
                    if !first {
                        s.refs -= 1; // the subscription is dropped with the wait
                    }
                    s.waiters[i as usize] = Waiter::Holding;
                } else if first {
                    // Busy: register (`subscribe_as`), reading the key unless it is armed.
                    s.refs += 1;
                    if s.armed {
                        s.waiters[i as usize] = if self.no_attempt_after_register {
                            Waiter::Asleep
                        } else {
                            Waiter::Ready
                        };
                    } else {
                        s.reads.push(Read {
                            generation: s.generation,
                            wake_if_gone: false,
                            registering: Some(i),
                        });
                        s.waiters[i as usize] = Waiter::Registering;
                    }
                } else if std::mem::take(&mut s.permit) {
                    // The pause returns at once: a release came since `mark_seen`.
                    s.waiters[i as usize] = Waiter::Ready;
                } else {
                    s.waiters[i as usize] = Waiter::Asleep;
                }
            }
            WakeAction::RunRead => {
                let read = s.reads.remove(0);
                s.tracked = true;
                s.replies.push(Reply {
                    read,
                    gone: s.key == Holder::Free,
                });
            }
            WakeAction::HandleReply(r) => {
                let Reply { read, gone } = s.replies.remove(r);
                if read.generation == s.generation {
                    s.armed = true;
                }
                if read.wake_if_gone && gone {
                    s.woken_by_read = s.woken_by_read || s.waiters.contains(&Waiter::Asleep);
                    s.wake_one();
                }
                if let Some(i) = read.registering {
                    s.waiters[i as usize] = if self.no_attempt_after_register {
                        if std::mem::take(&mut s.permit) {
                            Waiter::Ready
                        } else {
                            Waiter::Asleep
                        }
                    } else {
                        Waiter::Ready
                    };
                }
            }
            WakeAction::HandleInvalidation => {
                s.invalidations -= 1;
                s.armed = false;
                s.generation += 1;
                if s.refs > 0 && !self.no_reread {
                    s.reads.push(Read {
                        generation: s.generation,
                        wake_if_gone: true,
                        registering: None,
                    });
                }
            }
            WakeAction::Release(i) => {
                s.waiters[i as usize] = Waiter::Releasing;
                // `released_here`, before the delete runs (and whether or not it will delete):
                // only for a channel with waiters.
                if s.refs > 0 {
                    s.wake_one();
                }
            }
            WakeAction::Delete(i) => {
                s.waiters[i as usize] = Waiter::Done;
                if s.key == Holder::W(i) {
                    s.key = Holder::Free;
                    s.changed();
                }
            }
        }
        Some(s)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always("no missed release", |_: &WakeModel, s: &WakeState| {
                !s.quiet()
                    || !s.waiters.contains(&Waiter::Asleep)
                    || s.permit
                    || (s.key != Holder::Free && s.tracked)
            }),
            Property::sometimes("a sleeper is woken by a read", |_, s: &WakeState| {
                s.woken_by_read
            }),
            Property::sometimes("both waiters win", |_, s: &WakeState| {
                s.waiters.iter().all(|w| *w == Waiter::Done)
            }),
            Property::sometimes("a waiter registers on an armed key", |_, s: &WakeState| {
                s.armed && s.refs == 2 && s.waiters.contains(&Waiter::Ready)
            }),
            Property::sometimes(
                "a waiter woken early attempts before the delete",
                |_, s: &WakeState| s.early_attempt_busy,
            ),
        ]
    }
}
