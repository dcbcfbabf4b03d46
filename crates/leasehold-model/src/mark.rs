//! The waiters' mark (issue 32, session 26): on PostgreSQL lease rows a release sends its
//! `NOTIFY` only if a waiter marked the row (`wait_until`). Safety does not depend on it (a
//! waiter's pause always ends at its backoff or the holder's remaining lease); what is checked
//! is that the timers are never *needed* for a release: the property "no missed release".
//!
//! Mirrors `postgres::lease::marking` and its users: the lock's waiting upsert (`ACQUIRE_WAITING`:
//! the row taken if free, else marked, under the row lock, in one step), the semaphore's waiting
//! attempt (`PERMIT_ACQUIRE_WAITING`: slots picked by the statement's snapshot, then a slot taken
//! under its row lock, or, when none looked free, every slot marked at its latest version and
//! `free` returned for one freed since; `RowSemaphore::attempt` looks again then, and after
//! `permits + 1` looks answers the shortest pause), the releases (`RELEASE`, `PERMIT_RELEASE`:
//! `NOTIFY` iff the row's mark is ahead), and the engine's loop (`core/acquire.rs`: the first
//! attempt, the subscription (`LISTEN`), the attempt right after it, `mark_seen` before each
//! attempt, the pause).
//!
//! **Actors.** Two waiters of client W (one `LISTEN` connection), and another client X that
//! takes free slots, releases them, or lets them expire (a budget of [`MarkModel::x_steps`]
//! steps). A notification of the name reaches every permit waiter that listens, but only *one*
//! of a lock's waiters (`NameWakeup`, `postgres::lease::Listening`): the first registered one
//! asleep, or, with none asleep, a permit that the next one to pause uses (and the next one to
//! attempt uses up); it goes with the name's last registered waiter. While a registered lock
//! waiter's attempt is out (from `mark_seen` to its answer), a notification wakes nobody: it is
//! left to the attempts out; the last of them answered busy hands it on (as a release seen
//! then), and one answered taken ends it (a win's answer is a step of its own). A lock's
//! release by one of W's waiters wakes one of W's lock waiters as soon as it is on the
//! connection, before the server runs it (`released_here`, whatever attempts are out), and
//! still sends its `NOTIFY` when it runs. A waiter that wins holds, then releases like any
//! holder. **Time** is not modelled: a mark lasts past its
//! waiter's next attempt (`marking_ms`: twice the backoff's largest pause and a second); the
//! model lets it lapse as that attempt begins, and when the waiter wins (the earliest it may).
//! A waiter's bit stands for "the row's `wait_until` lasts past this waiter's next attempt",
//! whoever wrote it: a lock's attempt that finds the row's mark lasting (at least half of its
//! own ahead, `Remark::UnlessLasting`) leaves the row alone, and is modelled as the mark it would
//! have written, which is what the row's mark then does for it. An expiry frees a slot without
//! a notification, which the waiter's pause covers (it never runs past the holder's remaining
//! lease).
//!
//! **The property.** When W is quiet (no notification in flight, no waiter attempting or about
//! to), every sleeping waiter is covered: each slot is held and marked (its release will be
//! announced), or free by an expiry (the waiter's pause ends with the lease it saw). Otherwise a
//! release already happened, or will, that wakes nobody.
//!
//! **Bug flags.** `no_mark`: a waiting attempt marks nothing (every release not announced).
//! `no_second_look`: a permit's attempt ignores a slot its mark found freed since its snapshot.
//! `no_shortest_pause`: after `permits + 1` lost looks the waiter sleeps its backoff.
//! `no_permit`: a lock's notification that finds none of its waiters asleep is dropped.
//! `no_notify_after_local_wake`: a lock's release by W that woke one of W's waiters at once
//! (`released_here`, before the server runs the release) sends no `NOTIFY`: the woken waiter may
//! attempt before the release runs, and then nobody is woken by it. `no_hand_on`: a lock's
//! attempt answered busy drops a release that was left to it.

use stateright::{Model, Property};

/// Who holds a slot (a lock has one).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Holder {
    /// Nobody (`free_by_expiry` says how it came free).
    Free,
    /// The other client.
    X,
    /// W's waiter `i`.
    W(u8),
}

/// A slot's row.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Slot {
    /// Its holder at the row's latest version.
    pub holder: Holder,
    /// The waiters whose mark on the row is in force, a bit each: a release notifies while
    /// any is. A waiter's mark lasts until it begins its next attempt (see the module docs).
    pub marked_by: u8,
    /// Free because its lease expired (no release, no notification).
    pub free_by_expiry: bool,
}

/// What one of W's waiters is doing.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Waiter {
    /// Before its first attempt.
    Start,
    /// An attempt is under way (a permit's: `looked` is the slots free in its snapshot, a
    /// bit each, and `looks` how many looks it made).
    Attempting {
        /// Its first attempt (before it listens).
        first: bool,
        /// The permit attempt's snapshot taken (`looked` valid).
        snapshot: bool,
        /// Slots free in the snapshot, a bit each.
        looked: u8,
        /// Looks made in this attempt.
        looks: u8,
    },
    /// Its attempt was refused on the server (the row marked): the answer is on its way, and
    /// then the waiter pauses (or, after its first attempt, listens). A release may be
    /// announced in between.
    Answered {
        /// Its first attempt (before it listens).
        first: bool,
    },
    /// Busy at its first attempt: about to listen (`LISTEN`), then attempt again.
    Subscribing,
    /// About to attempt (`mark_seen`, then the statement).
    Ready,
    /// Paused until woken.
    Asleep,
    /// A lock's attempt took the row (slot 0): the answer is on its way, and the waiter's
    /// attempt is still out (a release seen now is left to it).
    Granted,
    /// Holds the slot it names.
    Holding(u8),
    /// A lock's holder whose release is on its connection: one of W's lock waiters was woken
    /// at once (`released_here`), and the server has not run the release yet.
    Releasing(u8),
    /// Released.
    Done,
}

/// The whole system.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct MarkState {
    /// The rows.
    pub slots: Vec<Slot>,
    /// W's waiters.
    pub waiters: Vec<Waiter>,
    /// Which waiters listen (their receiver exists).
    pub listening: Vec<bool>,
    /// A notification each waiter received since its `mark_seen` (a permit's waiters: each
    /// sees every release).
    pub heard: Vec<bool>,
    /// The lock waiters' one-per-release wake-up's stored permit (`OneWake`: a release that
    /// found none of them asleep), shared by the registered waiters.
    pub permit: bool,
    /// A release seen while some registered lock waiter's attempt was out (`NameWakeup`): left
    /// to those attempts, it wakes nobody until the last of them is answered busy.
    pub absorbed: bool,
    /// Notifications committed and not yet delivered to W's listening connection.
    pub in_flight: u8,
    /// Steps X has left.
    pub x_steps: u8,
    /// A waiter looked again because its mark found a slot freed since its snapshot (an
    /// example property).
    pub second_look: bool,
    /// A waiter was woken by a notification (an example property).
    pub woken: bool,
    /// A waiter woken by its client's release found the row still held by that release's
    /// holder: its attempt ran before the release (an example property).
    pub early_busy: bool,
    /// A release seen while a waiter's attempt was out woke nobody, and that attempt took the
    /// lock (an example property: the wake-up it spared).
    pub absorbed_taken: bool,
}

/// A step.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MarkAction {
    /// X takes free slot `s` (a one-try attempt: it marks nothing).
    XTake(u8),
    /// X releases slot `s` (`NOTIFY` iff marked).
    XRelease(u8),
    /// Slot `s`'s lease expires.
    Expire(u8),
    /// Waiter `i` starts an attempt (`mark_seen` first, except at its first).
    Begin(u8),
    /// A lock's attempt (one row): taken if free, else marked, in one step.
    LockStep(u8),
    /// A permit attempt takes its snapshot.
    Snapshot(u8),
    /// A permit attempt tries slot `s`, which looked free (taken if still free, else a lost race).
    Try(u8, u8),
    /// A permit attempt, none looking free, marks every slot.
    Mark(u8),
    /// Waiter `i` has its attempt's busy answer: it listens (its first) or pauses.
    Pause(u8),
    /// Waiter `i` listens (`LISTEN`), then is ready to attempt.
    Listen(u8),
    /// A notification reaches W: for a lock, one registered waiter asleep wakes (or the permit
    /// is left); for permits, every listening waiter hears it, and sleepers wake.
    Deliver,
    /// Waiter `i` releases its slot (`NOTIFY` iff marked); a lock's holder puts its release on
    /// its connection and wakes one of W's lock waiters at once (`released_here`).
    Release(u8),
    /// The server runs waiter `i`'s release (a lock's): `NOTIFY` iff marked.
    RunRelease(u8),
}

/// The model.
#[derive(Clone, Debug)]
pub struct MarkModel {
    /// Slots: 1 is a lock (its upsert marks under the row lock), more a semaphore's permits.
    pub slots: u8,
    /// X's step budget.
    pub x_steps: u8,
    /// Bug flag: a waiting attempt marks nothing.
    pub no_mark: bool,
    /// Bug flag: a slot freed since the snapshot is not looked at again.
    pub no_second_look: bool,
    /// Bug flag: after `permits + 1` lost looks the waiter sleeps.
    pub no_shortest_pause: bool,
    /// Bug flag: a lock's notification that finds none of its waiters asleep is dropped
    /// (`Notify::notify_waiters`' semantics) instead of left as a permit.
    pub no_permit: bool,
    /// Bug flag: a lock's release by W that woke one of W's waiters at once sends no `NOTIFY`.
    pub no_notify_after_local_wake: bool,
    /// Bug flag: a lock's attempt answered busy does not hand on a release seen while it was
    /// out (`NameWakeup`: the release is dropped instead).
    pub no_hand_on: bool,
}

impl MarkModel {
    /// The lock as built.
    pub fn lock() -> Self {
        MarkModel {
            slots: 1,
            x_steps: 4,
            no_mark: false,
            no_second_look: false,
            no_shortest_pause: false,
            no_permit: false,
            no_notify_after_local_wake: false,
            no_hand_on: false,
        }
    }

    /// A semaphore of two permits as built.
    pub fn permits() -> Self {
        MarkModel {
            slots: 2,
            ..MarkModel::lock()
        }
    }
}

const WAITERS: u8 = 2;

impl MarkState {
    /// A holder's release: the slot is free, announced iff a waiter marked it.
    fn release(&mut self, s: u8) {
        let slot = &mut self.slots[s as usize];
        slot.holder = Holder::Free;
        slot.free_by_expiry = false;
        if slot.marked_by != 0 {
            self.in_flight += 1;
        }
    }

    fn take(&mut self, s: u8, holder: Holder) {
        let slot = &mut self.slots[s as usize];
        slot.holder = holder;
        slot.free_by_expiry = false;
        if let Holder::W(i) = holder {
            self.lapse(i);
            if self.slots.len() == 1 {
                // The answer is on its way ([`MarkAction::Pause`] ends the wait).
                self.waiters[i as usize] = Waiter::Granted;
            } else {
                self.waiters[i as usize] = Waiter::Holding(s);
                self.leave();
            }
        }
    }

    /// A waiter's wait ended: the last registered waiter of the name takes the name's wake-up,
    /// and its permit, with it.
    fn leave(&mut self) {
        if !(0..WAITERS).any(|j| self.registered(j)) {
            self.permit = false;
            self.absorbed = false;
        }
    }

    /// A lock waiter `i`'s attempt is out: registered, from `mark_seen` to its answer.
    fn out(&self, i: u8) -> bool {
        self.registered(i)
            && matches!(
                self.waiters[i as usize],
                Waiter::Attempting { .. } | Waiter::Answered { .. } | Waiter::Granted
            )
    }

    /// Lock waiter `i`'s attempt is answered busy (`OneWake::answered(false)`): a release seen
    /// while it was out, with no other attempt out, is handed on as a release seen now.
    fn answered_busy(&mut self, i: u8, model: &MarkModel) {
        if !self.out(i) || (0..WAITERS).any(|j| j != i && self.out(j)) {
            return;
        }
        if std::mem::take(&mut self.absorbed) && !model.no_hand_on {
            self.wake_one(model);
        }
    }

    /// Waiter `i` is registered for the name's releases: it listens and still waits.
    fn registered(&self, i: u8) -> bool {
        self.listening[i as usize]
            && !matches!(
                self.waiters[i as usize],
                Waiter::Holding(_) | Waiter::Releasing(_) | Waiter::Done
            )
    }

    /// Waiter `i`'s marks lapse (the earliest they may: see the module docs).
    fn lapse(&mut self, i: u8) {
        for slot in self.slots.iter_mut() {
            slot.marked_by &= !(1 << i);
        }
    }

    /// Waiter `i` marks slot `s` (unless the model's `no_mark`).
    fn mark(&mut self, i: u8, s: u8, model: &MarkModel) {
        if !model.no_mark {
            self.slots[s as usize].marked_by |= 1 << i;
        }
    }

    /// A waiting attempt found nothing: after its first, it listens; else it sleeps unless it
    /// heard a release since `mark_seen` (a lock's waiter: unless a permit was left).
    fn busy(&mut self, i: u8, first: bool) {
        let i = i as usize;
        let released = if self.slots.len() == 1 {
            // A first attempt has no share of the wake-up yet.
            !first && std::mem::take(&mut self.permit)
        } else {
            std::mem::take(&mut self.heard[i])
        };
        self.waiters[i] = if first {
            Waiter::Subscribing
        } else if released {
            Waiter::Ready
        } else {
            Waiter::Asleep
        };
    }

    /// A release the server ran is seen by a lock's waiters (`NameWakeup::released`: a
    /// notification): left to the attempts out, if any; else as [`MarkState::wake_one`].
    fn release_seen(&mut self, model: &MarkModel) {
        if (0..WAITERS).any(|i| self.out(i)) {
            self.absorbed = true;
        } else {
            self.wake_one(model);
        }
    }

    /// `Notify::notify_one` on a lock's waiters' wake-up: the first registered one asleep
    /// wakes, or, with none asleep, a permit is left for the registered ones.
    fn wake_one(&mut self, model: &MarkModel) {
        let asleep = (0..WAITERS)
            .find(|&i| self.registered(i) && self.waiters[i as usize] == Waiter::Asleep);
        match asleep {
            Some(i) => {
                self.waiters[i as usize] = Waiter::Ready;
                self.woken = true;
            }
            None if !model.no_permit && (0..WAITERS).any(|i| self.registered(i)) => {
                self.permit = true;
            }
            None => {}
        }
    }

    /// W is quiet: nothing in flight that could still wake a sleeper by itself.
    fn quiet(&self) -> bool {
        self.in_flight == 0
            && self.waiters.iter().all(|w| {
                matches!(
                    w,
                    Waiter::Start | Waiter::Asleep | Waiter::Holding(_) | Waiter::Done
                )
            })
    }
}

impl Model for MarkModel {
    type State = MarkState;
    type Action = MarkAction;

    fn init_states(&self) -> Vec<MarkState> {
        let held = Slot {
            holder: Holder::X,
            marked_by: 0,
            free_by_expiry: false,
        };
        vec![MarkState {
            slots: vec![held; self.slots as usize],
            waiters: vec![Waiter::Start; WAITERS as usize],
            listening: vec![false; WAITERS as usize],
            heard: vec![false; WAITERS as usize],
            permit: false,
            absorbed: false,
            in_flight: 0,
            x_steps: self.x_steps,
            second_look: false,
            woken: false,
            early_busy: false,
            absorbed_taken: false,
        }]
    }

    fn actions(&self, st: &MarkState, actions: &mut Vec<MarkAction>) {
        for s in 0..self.slots {
            let slot = st.slots[s as usize];
            if st.x_steps > 0 {
                match slot.holder {
                    Holder::Free => actions.push(MarkAction::XTake(s)),
                    Holder::X => actions.push(MarkAction::XRelease(s)),
                    Holder::W(_) => {}
                }
                if slot.holder != Holder::Free {
                    actions.push(MarkAction::Expire(s));
                }
            }
        }
        for i in 0..WAITERS {
            match st.waiters[i as usize] {
                Waiter::Start | Waiter::Ready => actions.push(MarkAction::Begin(i)),
                Waiter::Attempting { .. } if self.slots == 1 => {
                    actions.push(MarkAction::LockStep(i))
                }
                Waiter::Attempting {
                    snapshot: false, ..
                } => actions.push(MarkAction::Snapshot(i)),
                Waiter::Attempting { looked: 0, .. } => actions.push(MarkAction::Mark(i)),
                Waiter::Attempting { looked, .. } => {
                    for s in 0..self.slots {
                        if looked & (1 << s) != 0 {
                            actions.push(MarkAction::Try(i, s));
                        }
                    }
                }
                Waiter::Answered { .. } | Waiter::Granted => actions.push(MarkAction::Pause(i)),
                Waiter::Subscribing => actions.push(MarkAction::Listen(i)),
                Waiter::Holding(_) => actions.push(MarkAction::Release(i)),
                Waiter::Releasing(_) => actions.push(MarkAction::RunRelease(i)),
                Waiter::Asleep | Waiter::Done => {}
            }
        }
        if st.in_flight > 0 {
            actions.push(MarkAction::Deliver);
        }
    }

    fn next_state(&self, last: &MarkState, action: MarkAction) -> Option<MarkState> {
        let mut st = last.clone();
        match action {
            MarkAction::XTake(s) => {
                st.x_steps -= 1;
                st.take(s, Holder::X);
            }
            MarkAction::XRelease(s) => {
                st.x_steps -= 1;
                st.release(s);
            }
            MarkAction::Expire(s) => {
                st.x_steps -= 1;
                let slot = &mut st.slots[s as usize];
                let holder = std::mem::replace(&mut slot.holder, Holder::Free);
                slot.free_by_expiry = true;
                if let Holder::W(h) = holder {
                    // The holder's lease ran out: it gives up (nothing to release). A grant
                    // whose answer had not come is given back as busy.
                    if st.waiters[h as usize] == Waiter::Granted {
                        st.answered_busy(h, self);
                    }
                    st.waiters[h as usize] = Waiter::Done;
                    st.leave();
                }
            }
            MarkAction::Begin(i) => {
                let first = st.waiters[i as usize] == Waiter::Start;
                if !first {
                    // `mark_seen`: the attempt covers every release so far.
                    st.heard[i as usize] = false;
                    st.permit = false;
                    st.absorbed = false;
                }
                st.lapse(i);
                st.waiters[i as usize] = Waiter::Attempting {
                    first,
                    snapshot: false,
                    looked: 0,
                    looks: 0,
                };
            }
            MarkAction::LockStep(i) => {
                let Waiter::Attempting { first, .. } = st.waiters[i as usize] else {
                    return None;
                };
                if st.slots[0].holder == Holder::Free {
                    st.take(0, Holder::W(i));
                } else {
                    if let Holder::W(h) = st.slots[0].holder
                        && matches!(st.waiters[h as usize], Waiter::Releasing(_))
                    {
                        st.early_busy = true;
                    }
                    st.mark(i, 0, self);
                    st.waiters[i as usize] = Waiter::Answered { first };
                }
            }
            MarkAction::Snapshot(i) => {
                let Waiter::Attempting { first, looks, .. } = st.waiters[i as usize] else {
                    return None;
                };
                let mut looked = 0;
                for s in 0..self.slots {
                    if st.slots[s as usize].holder == Holder::Free {
                        looked |= 1 << s;
                    }
                }
                st.waiters[i as usize] = Waiter::Attempting {
                    first,
                    snapshot: true,
                    looked,
                    looks,
                };
            }
            MarkAction::Try(i, s) => {
                let Waiter::Attempting { first, looks, .. } = st.waiters[i as usize] else {
                    return None;
                };
                if st.slots[s as usize].holder == Holder::Free {
                    st.take(s, Holder::W(i));
                } else {
                    st.look_again(i, first, looks + 1, self);
                }
            }
            MarkAction::Mark(i) => {
                let Waiter::Attempting { first, looks, .. } = st.waiters[i as usize] else {
                    return None;
                };
                let mut freed = false;
                for s in 0..self.slots {
                    st.mark(i, s, self);
                    freed |= st.slots[s as usize].holder == Holder::Free;
                }
                if freed && !self.no_second_look {
                    st.second_look = true;
                    st.look_again(i, first, looks + 1, self);
                } else {
                    st.waiters[i as usize] = Waiter::Answered { first };
                }
            }
            MarkAction::Pause(i) => match st.waiters[i as usize] {
                Waiter::Granted => {
                    // Taken (`OneWake::answered(true)`): a release seen while it was out is
                    // covered by the grant.
                    if st.out(i) && std::mem::take(&mut st.absorbed) {
                        st.absorbed_taken = true;
                    }
                    st.waiters[i as usize] = Waiter::Holding(0);
                    st.leave();
                }
                Waiter::Answered { first } => {
                    st.answered_busy(i, self);
                    st.busy(i, first);
                }
                _ => return None,
            },
            MarkAction::Listen(i) => {
                st.listening[i as usize] = true;
                st.waiters[i as usize] = Waiter::Ready;
            }
            MarkAction::Deliver if self.slots == 1 => {
                st.in_flight -= 1;
                st.release_seen(self);
            }
            MarkAction::Deliver => {
                st.in_flight -= 1;
                for i in 0..WAITERS as usize {
                    if !st.listening[i] {
                        continue;
                    }
                    if st.waiters[i] == Waiter::Asleep {
                        st.waiters[i] = Waiter::Ready;
                        st.woken = true;
                    } else {
                        st.heard[i] = true;
                    }
                }
            }
            MarkAction::Release(i) if self.slots == 1 => {
                let Waiter::Holding(s) = st.waiters[i as usize] else {
                    return None;
                };
                st.waiters[i as usize] = Waiter::Releasing(s);
                // `NameWakeup::releasing`: not left to the attempts out, which went out before
                // the release on its connection.
                st.wake_one(self);
            }
            MarkAction::Release(i) => {
                let Waiter::Holding(s) = st.waiters[i as usize] else {
                    return None;
                };
                st.waiters[i as usize] = Waiter::Done;
                st.release(s);
            }
            MarkAction::RunRelease(i) => {
                let Waiter::Releasing(s) = st.waiters[i as usize] else {
                    return None;
                };
                st.waiters[i as usize] = Waiter::Done;
                let in_flight = st.in_flight;
                st.release(s);
                if self.no_notify_after_local_wake {
                    st.in_flight = in_flight;
                }
            }
        }
        Some(st)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always("no missed release", |_: &MarkModel, st: &MarkState| {
                !st.quiet()
                    || !st.waiters.contains(&Waiter::Asleep)
                    || st.slots.iter().all(|slot| {
                        (slot.holder != Holder::Free && slot.marked_by != 0)
                            || (slot.holder == Holder::Free && slot.free_by_expiry)
                    })
            }),
            Property::sometimes("a sleeper is woken by a release", |_, st: &MarkState| {
                st.woken
            }),
            Property::sometimes("both waiters win", |_, st: &MarkState| {
                st.waiters.iter().all(|w| *w == Waiter::Done)
            }),
            Property::sometimes(
                "a waiter woken by its client's release attempts before the release runs",
                |_, st: &MarkState| st.early_busy,
            ),
            Property::sometimes(
                "a release seen while an attempt is out wakes nobody, and that attempt takes the lock",
                |_, st: &MarkState| st.absorbed_taken,
            ),
            Property::sometimes(
                "a waiter looks again at a slot freed since its snapshot",
                |_, st: &MarkState| st.second_look,
            ),
        ]
    }
}

impl MarkState {
    /// A permit attempt looks again (a new snapshot) after a lost race or a slot freed since;
    /// after `permits + 1` looks it answers the shortest pause: the waiter attempts again soon,
    /// as if woken (with `no_shortest_pause`, it sleeps its backoff).
    fn look_again(&mut self, i: u8, first: bool, looks: u8, model: &MarkModel) {
        if looks <= model.slots {
            self.waiters[i as usize] = Waiter::Attempting {
                first,
                snapshot: false,
                looked: 0,
                looks,
            };
        } else if model.no_shortest_pause {
            self.waiters[i as usize] = Waiter::Answered { first };
        } else if first {
            self.waiters[i as usize] = Waiter::Subscribing;
        } else {
            self.waiters[i as usize] = Waiter::Ready;
        }
    }
}
