//! The fair lock (`crates/leasehold/src/fair.rs`): queue, handoff by message, by reply and
//! early within a client, entry expiry, (optionally) queue expiry, lost / duplicated / delayed
//! messages and replies, waiters that leave or crash, a release retried.
//!
//! **Time.** `now` ticks by one up to `horizon`. Every lifetime is the same `life` ticks: the
//! TTL, the handoff window and the entry lifetime (`handoff_window(ttl) = queue_entry_ttl(ttl)
//! = ttl` for a TTL within 1 s..=10 s). The drift allowance is folded in: the server keeps a
//! key `life` ticks after it set it (its clock running fast by the most the allowance covers)
//! and the client counts `life` ticks from the instant it *sent* the command.
//!
//! **Simplifications.** An acquisition attempt and a renewal are applied in the tick they are
//! sent (their send-to-apply delay is the extend model's subject); the release and leave
//! scripts are sent and applied in separate steps, and may be applied late, twice (retried)
//! or never. Each process acquires at most once.
//!
//! **Fencing** (`fencing`, finding U2): a counter raised at every grant (a free take, a claim
//! without a valid `granted n` entry, a handoff); the handoff writes `granted n` in the
//! waiter's entry for `2 * life` and names `n` in its message and reply; an attempt's script
//! may run twice (`Attempt(p, true)`: redis-rs re-sending a script whose reply timed out, or
//! `fair_acquire` repeating an attempt after a connection error), the client taking the second
//! reply. With fencing there is no early handoff (`fair_acquire` offers none).

use stateright::{Model, Property};

/// A process: one waiter / holder of the fair lock, on a client (`FairModel::clients`).
pub type Proc = u8;

/// What a process is doing.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Phase {
    /// Has not attempted yet.
    Idle,
    /// In `fair_acquire`'s loop. `offer`: the early-handoff terms it offers its client
    /// (`EarlyTerms::entry_alive_until`), from its last attempt that found the lock busy.
    Waiting {
        /// `entry_alive_until` of its last busy attempt.
        offer: Option<u8>,
    },
    /// Holds a lease (a `LockGuard`).
    Holding {
        /// The lease's local validity (`Lease::valid_until`).
        until: u8,
        /// Its tenure's next in line (`Tenure::next`).
        next: Option<Proc>,
        /// Reported lost (`Lease::mark_lost`).
        lost: bool,
        /// Its fencing number (0 without fencing).
        fence: u8,
    },
    /// Released, left, or crashed.
    Done,
}

/// What a release or leave script replied (`PassOn`).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Outcome {
    /// `PassOn::NotHeld` (reply 0).
    NotHeld,
    /// `PassOn::Deleted` (reply 1).
    Deleted,
    /// `PassOn::HandedOff`: to `to`, whose entry was written by an attempt sent at `sent`;
    /// `next` is the queue's head after the pop.
    HandedOff {
        /// The new holder.
        to: Proc,
        /// Send instant of the attempt whose entry the script read.
        sent: u8,
        /// The next in line.
        next: Option<Proc>,
        /// The fencing number issued (0 without fencing).
        n: u8,
    },
}

/// A release (or leave) sent by a client and not yet settled (`run_pass_on`).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Pending {
    /// The releasing (or leaving) process: its token is the one checked.
    pub by: Proc,
    /// A leave (`FAIR_LEAVE_LUA`) rather than a release (`FAIR_RELEASE_LUA`).
    pub leave: bool,
    /// When the script was sent.
    pub sent: u8,
    /// The waiter handed the lock early, if any (`GivenEarly`).
    pub early: Option<Proc>,
    /// Copies of the command not yet applied (2 once retried).
    pub unapplied: u8,
    /// Already retried once.
    pub retried: bool,
    /// Replies on their way back.
    pub replies: Vec<Outcome>,
}

/// A handoff message on the waiter's client's channel (`handoff:<ticket>:<attempt>:<fencing>`).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Msg {
    /// The waiter it is for.
    pub to: Proc,
    /// Send instant of the attempt it names.
    pub sent: u8,
    /// The fencing number it names (0 without fencing).
    pub n: u8,
}

/// The whole system.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct FairState {
    /// Model time.
    pub now: u8,
    /// The lock key: holder's token and expiry.
    pub key: Option<(Proc, u8)>,
    /// `{K}:queue`, head first.
    pub queue: Vec<Proc>,
    /// When the queue key expires (only with `queue_expires`).
    pub queue_expiry: u8,
    /// `{K}:waiter:<ticket>` per process: expiry and the send instant of the attempt that
    /// wrote it.
    pub entries: Vec<Option<(u8, u8)>>,
    /// The same key holding `granted n` (written by a fenced handoff): expiry and `n`.
    pub granted: Vec<Option<(u8, u8)>>,
    /// `{K}:fencing`: the last number issued.
    pub counter: u8,
    /// The highest fencing number a holder has taken so far, and who took it.
    pub top: (u8, Proc),
    /// A holder took a number not above one taken before by another holder.
    pub backwards: bool,
    /// Each process.
    pub procs: Vec<Phase>,
    /// Handoff messages in flight.
    pub msgs: Vec<Msg>,
    /// Releases and leaves in flight.
    pub pending: Vec<Pending>,
}

/// One step.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum FairAction {
    /// Time passes one tick; expired keys vanish (Redis expiry).
    Tick,
    /// A waiter's attempt: mirrors `FAIR_ACQUIRE_LUA` via `Waiter::attempt` in
    /// `RedisClient::fair_acquire` (take a free lock if first, claim a lock handed to us, or
    /// queue and refresh the entry; an attempt that finds the lock busy offers early terms,
    /// `Notifier::offer_early`). `bool`: the script runs twice (redis-rs re-sending it after
    /// a timed-out reply, or `fair_acquire` repeating the attempt after a connection error,
    /// with the same token and ticket) and the client takes the second reply.
    Attempt(Proc, bool),
    /// A waiter gives up (deadline, dropped future): mirrors `FAIR_LEAVE_LUA` +
    /// `FAIR_PASS_ON_LUA` via `leave` / `LeaveOnDrop` (the offer is withdrawn first,
    /// `withdraw_early`).
    Leave(Proc),
    /// A waiter crashes: it stops refreshing its entry (which then expires) and never leaves.
    Crash(Proc),
    /// A holder's renewal: mirrors `EXTEND_LUA` via the renewer (`renewal.rs`) or
    /// `FairHeld::extend`; a key not holding its token reports the lease lost.
    Renew(Proc),
    /// A holder releases: mirrors `RedisClient::release_held` (`EarlyHandoff::for_release`,
    /// then `run_pass_on`, which queues `FAIR_RELEASE_LUA` and calls `EarlyHandoff::give`
    /// before the script runs; on a calling thread's socket `give` comes just before the
    /// write). The model lets the new holder's renewal and release be applied before the script
    /// (`Renew`, `Release` are enabled before `Apply`), which the client now prevents for its
    /// release and own extends (`Tenure::settled`): an over-approximation.
    Release(Proc),
    /// The server runs a pending release / leave: mirrors `FAIR_RELEASE_LUA` /
    /// `FAIR_LEAVE_LUA` followed by `FAIR_PASS_ON_LUA` (pop dead heads, hand to the first live
    /// one with `SET PX window`, publish unless its owner is the releasing client).
    Apply(usize),
    /// The client re-sends a pending release (`RedisClient::idempotent` retry after a
    /// connection error): the script may then run twice.
    Retry(usize),
    /// A pending script is lost for good (connection dropped before it was read).
    LoseCommand(usize),
    /// The reply of a pending script reaches the client: mirrors the end of `run_pass_on`
    /// (`GivenEarly::confirm` / `GivenEarly::contradicted`, `Notifier::hand_off_locally`).
    Reply(usize),
    /// A reply is lost: the client gives up waiting (an early lease keeps its early bound).
    LoseReply(usize),
    /// A handoff message reaches its waiter: mirrors the `Wake::HandedOff` branch of
    /// `fair_acquire` (lease from the named attempt's send instant if at least half the TTL is
    /// left, else claim at the next attempt). `bool`: the message is duplicated (stays in flight).
    Deliver(usize, bool),
    /// A handoff message is lost.
    LoseMsg(usize),
}

/// The fair lock model.
#[derive(Clone, Debug)]
pub struct FairModel {
    /// The old behaviour (finding 1): the queue key expires `2 * life` after the last attempt
    /// that queued (`keep_alive(KEYS[2], 2 * entry_ttl)`), and only then.
    pub queue_expires: bool,
    /// Each process's client (a handoff to a waiter of the releasing client goes by the reply;
    /// an early handoff only within one client).
    pub clients: Vec<u8>,
    /// TTL = handoff window = entry lifetime, in ticks.
    pub life: u8,
    /// Also start from P0 holding after taking a free lock (nobody queued).
    pub both_starts: bool,
    /// Fencing numbers (and no early handoff).
    pub fencing: bool,
    /// An attempt's script may run twice, the client taking the second reply.
    pub resent_attempts: bool,
    /// The old scripts (finding U2): the free-lock take deletes the waiter's entry only if it
    /// was first in a non-empty queue, and the claim path trusts any `granted n`. Fixed: the
    /// take deletes it always, and a claim accepts `granted n` only if `n` is the counter.
    pub stale_grant: bool,
    /// Last tick.
    pub horizon: u8,
}

impl FairModel {
    /// The fixed protocol (queue without TTL): 3 processes, P0 and P1 on one client, P2 on
    /// another; lifetime 2, horizon 4.
    pub fn fixed() -> Self {
        FairModel {
            queue_expires: false,
            clients: vec![0, 0, 1],
            life: 2,
            both_starts: false,
            fencing: false,
            resent_attempts: false,
            stale_grant: false,
            horizon: 4,
        }
    }

    /// The fixed protocol with fencing and attempts run twice: P0 and P1 on one client (a
    /// handoff by reply), P2 on another (by message); lifetime 2, horizon 2 (the first lease's
    /// end: a wider horizon passes 3 million states).
    pub fn fenced() -> Self {
        FairModel {
            fencing: true,
            resent_attempts: true,
            horizon: 2,
            ..Self::fixed()
        }
    }

    /// [`FairModel::fenced`] with the old scripts (finding U2).
    pub fn with_stale_grant() -> Self {
        FairModel {
            stale_grant: true,
            ..Self::fenced()
        }
    }

    /// [`FairModel::fixed`] with the old queue expiry (finding 1).
    pub fn with_queue_expiry() -> Self {
        FairModel {
            queue_expires: true,
            ..Self::fixed()
        }
    }

    fn n(&self) -> usize {
        self.clients.len()
    }

    /// Expired keys vanish.
    fn expire(&self, s: &mut FairState) {
        let now = s.now;
        if s.key.is_some_and(|(_, e)| e <= now) {
            s.key = None;
        }
        for e in s.entries.iter_mut().chain(&mut s.granted) {
            if e.is_some_and(|(x, _)| x <= now) {
                *e = None;
            }
        }
        if self.queue_expires && s.queue_expiry <= now {
            s.queue.clear();
        }
    }

    /// `FAIR_PASS_ON_LUA`: the lock is the releaser's; hand it to the first live waiter.
    fn pass_on(&self, s: &mut FairState, releaser: Proc) -> Outcome {
        while !s.queue.is_empty() {
            let head = s.queue.remove(0);
            if let Some((_, sent)) = s.entries[head as usize] {
                s.key = Some((head, s.now + self.life));
                s.entries[head as usize] = None;
                let n = self.incr(s);
                if self.fencing {
                    // Kept for a claim (the waiter's next attempt, if the message is lost).
                    s.granted[head as usize] = Some((s.now + 2 * self.life, n));
                }
                if self.clients[head as usize] != self.clients[releaser as usize] {
                    s.msgs.push(Msg { to: head, sent, n });
                    s.msgs.sort();
                }
                return Outcome::HandedOff {
                    to: head,
                    sent,
                    next: s.queue.first().copied(),
                    n,
                };
            }
        }
        s.key = None;
        Outcome::Deleted
    }

    /// A waiter told it was handed the lock (message or reply), as `fair_acquire` handles
    /// `Wake::HandedOff`.
    fn handed(&self, s: &mut FairState, to: Proc, sent: u8, next: Option<Proc>, n: u8) {
        if let Phase::Waiting { .. } = s.procs[to as usize] {
            let until = sent + self.life;
            // `lease.remaining() >= ttl / 2`, else claim at the next attempt.
            if until >= s.now + self.life.div_ceil(2) {
                s.procs[to as usize] = Phase::Holding {
                    until,
                    next,
                    lost: false,
                    fence: n,
                };
                Self::took(s, to, n);
            }
        }
    }

    /// `INCR {K}:fencing` (0 without fencing).
    fn incr(&self, s: &mut FairState) -> u8 {
        if self.fencing {
            s.counter += 1;
            s.counter
        } else {
            0
        }
    }

    /// Process `p` holds with fencing number `n`: it must be above every number another
    /// holder took before.
    fn took(s: &mut FairState, p: Proc, n: u8) {
        let (top, by) = s.top;
        if n < top || (n == top && by != p) {
            s.backwards = true;
        }
        if n > top {
            s.top = (n, p);
        }
    }

    /// `FAIR_ACQUIRE_LUA` run once for `p`: `Some(n)` if it granted the lock (`n`: the fencing
    /// number, 0 without fencing), `None` if `p` is (still) queued.
    fn attempt_script(&self, s: &mut FairState, p: Proc) -> Option<u8> {
        let i = p as usize;
        let (now, life) = (s.now, self.life);
        if Self::held_by(s, p) {
            // Handed to us (or taken by an earlier run of this attempt): claim with a full TTL.
            s.key = Some((p, now + life));
            s.queue.retain(|&q| q != p);
            let n = match s.granted[i] {
                Some((_, n)) if self.stale_grant || n == s.counter => n,
                _ => self.incr(s),
            };
            s.entries[i] = None;
            s.granted[i] = None;
            return Some(n);
        }
        if s.key.is_none() {
            // Dead heads dropped; take it if first (or nobody is queued).
            while let Some(&h) = s.queue.first() {
                if s.entries[h as usize].is_some() {
                    break;
                }
                s.queue.remove(0);
            }
            let first = s.queue.first().copied();
            if first.is_none() || first == Some(p) {
                s.key = Some((p, now + life));
                s.queue.retain(|&q| q != p);
                if first.is_some() || !self.stale_grant {
                    s.entries[i] = None;
                    s.granted[i] = None;
                }
                return Some(self.incr(s));
            }
        }
        if !s.queue.contains(&p) {
            s.queue.push(p);
        }
        s.entries[i] = Some((now + life, now));
        s.granted[i] = None;
        if self.queue_expires {
            s.queue_expiry = s.queue_expiry.max(now + 2 * life);
        }
        None
    }

    fn held_by(s: &FairState, p: Proc) -> bool {
        s.key.is_some_and(|(h, _)| h == p)
    }
}

/// Processes that believe they hold the lock at `now`.
pub fn valid_holders(s: &FairState) -> usize {
    s.procs
        .iter()
        .filter(|p| matches!(p, Phase::Holding { until, lost: false, .. } if s.now < *until))
        .count()
}

impl Model for FairModel {
    type State = FairState;
    type Action = FairAction;

    fn init_states(&self) -> Vec<FairState> {
        // P0 holds, handed the lock by a release of its own client that named P1 (queued,
        // entry alive, early terms offered) as next in line; the others are idle. Also: P0
        // holds after taking a free lock, nobody queued.
        let n = self.n();
        let life = self.life;
        let mut handed = FairState {
            now: 0,
            key: Some((0, life)),
            queue: vec![1],
            queue_expiry: 2 * life,
            entries: vec![None; n],
            granted: vec![None; n],
            counter: u8::from(self.fencing),
            top: (u8::from(self.fencing), 0),
            backwards: false,
            procs: vec![Phase::Idle; n],
            msgs: vec![],
            pending: vec![],
        };
        handed.entries[1] = Some((life, 0));
        handed.procs[0] = Phase::Holding {
            until: life,
            next: Some(1),
            lost: false,
            fence: u8::from(self.fencing),
        };
        handed.procs[1] = Phase::Waiting { offer: Some(life) };
        let mut plain = FairState {
            queue: vec![],
            entries: vec![None; n],
            procs: vec![Phase::Idle; n],
            ..handed.clone()
        };
        plain.procs[0] = Phase::Holding {
            until: life,
            next: None,
            lost: false,
            fence: u8::from(self.fencing),
        };
        if self.both_starts {
            vec![handed, plain]
        } else {
            vec![handed]
        }
    }

    fn actions(&self, s: &FairState, actions: &mut Vec<FairAction>) {
        if s.now < self.horizon {
            actions.push(FairAction::Tick);
        }
        for p in 0..self.n() as Proc {
            match s.procs[p as usize] {
                Phase::Idle => {
                    actions.push(FairAction::Attempt(p, false));
                    if self.resent_attempts {
                        actions.push(FairAction::Attempt(p, true));
                    }
                }
                Phase::Waiting { .. } => {
                    actions.push(FairAction::Attempt(p, false));
                    if self.resent_attempts {
                        actions.push(FairAction::Attempt(p, true));
                    }
                    actions.push(FairAction::Leave(p));
                    actions.push(FairAction::Crash(p));
                }
                Phase::Holding { lost, .. } => {
                    if !lost {
                        actions.push(FairAction::Renew(p));
                    }
                    actions.push(FairAction::Release(p));
                }
                Phase::Done => {}
            }
        }
        for (i, r) in s.pending.iter().enumerate() {
            if r.unapplied > 0 {
                actions.push(FairAction::Apply(i));
                actions.push(FairAction::LoseCommand(i));
                if !r.retried {
                    actions.push(FairAction::Retry(i));
                }
            }
            if !r.replies.is_empty() {
                actions.push(FairAction::Reply(i));
                actions.push(FairAction::LoseReply(i));
            }
        }
        for i in 0..s.msgs.len() {
            actions.push(FairAction::Deliver(i, false));
            actions.push(FairAction::Deliver(i, true));
            actions.push(FairAction::LoseMsg(i));
        }
    }

    fn next_state(&self, last: &FairState, action: FairAction) -> Option<FairState> {
        let mut s = last.clone();
        let life = self.life;
        let now = s.now;
        match action {
            FairAction::Tick => {
                s.now += 1;
                self.expire(&mut s);
            }
            FairAction::Attempt(p, twice) => {
                let mut got = self.attempt_script(&mut s, p);
                if twice {
                    got = self.attempt_script(&mut s, p);
                }
                s.procs[p as usize] = match got {
                    Some(n) => {
                        Self::took(&mut s, p, n);
                        Phase::Holding {
                            until: now + life,
                            next: None,
                            lost: false,
                            fence: n,
                        }
                    }
                    None => Phase::Waiting {
                        offer: Some(now + life),
                    },
                };
            }
            FairAction::Leave(p) => {
                s.procs[p as usize] = Phase::Done;
                s.pending.push(Pending {
                    by: p,
                    leave: true,
                    sent: now,
                    early: None,
                    unapplied: 1,
                    retried: false,
                    replies: vec![],
                });
            }
            FairAction::Crash(p) => s.procs[p as usize] = Phase::Done,
            FairAction::Renew(p) => {
                let Phase::Holding { until, lost, .. } = &mut s.procs[p as usize] else {
                    return None;
                };
                if s.key.is_some_and(|(h, _)| h == p) {
                    s.key = Some((p, now + life));
                    *until = now + life;
                } else {
                    *lost = true;
                }
            }
            FairAction::Release(p) => {
                let Phase::Holding {
                    until, next, lost, ..
                } = s.procs[p as usize].clone()
                else {
                    return None;
                };
                s.procs[p as usize] = Phase::Done;
                // EarlyHandoff::for_release: next in line of this client, still waiting with
                // terms, and at least half the TTL left.
                let mut early = None;
                if let Some(q) = next.filter(|_| !lost && !self.fencing)
                    && self.clients[q as usize] == self.clients[p as usize]
                    && let Phase::Waiting { offer: Some(alive) } = s.procs[q as usize]
                {
                    let v = until.min(alive);
                    if v >= now + life.div_ceil(2) {
                        s.procs[q as usize] = Phase::Holding {
                            until: v,
                            next: None,
                            lost: false,
                            fence: 0,
                        };
                        early = Some(q);
                    }
                }
                s.pending.push(Pending {
                    by: p,
                    leave: false,
                    sent: now,
                    early,
                    unapplied: 1,
                    retried: false,
                    replies: vec![],
                });
            }
            FairAction::Apply(i) => {
                let r = &s.pending[i];
                let (by, leave) = (r.by, r.leave);
                if leave {
                    s.queue.retain(|&q| q != by);
                    s.entries[by as usize] = None;
                    s.granted[by as usize] = None;
                }
                let outcome = if Self::held_by(&s, by) {
                    self.pass_on(&mut s, by)
                } else {
                    Outcome::NotHeld
                };
                let r = &mut s.pending[i];
                r.unapplied -= 1;
                r.replies.push(outcome);
                r.replies.sort();
            }
            FairAction::Retry(i) => {
                let r = &mut s.pending[i];
                r.unapplied += 1;
                r.retried = true;
            }
            FairAction::LoseCommand(i) => s.pending[i].unapplied -= 1,
            FairAction::Reply(i) => {
                let r = s.pending[i].clone();
                let outcome = r.replies[0].clone();
                // The client takes the first reply and stops waiting: later copies are dropped.
                s.pending.remove(i);
                if r.unapplied > 0 {
                    // A copy still on its way may yet run; keep it, answered by nobody.
                    s.pending.push(Pending {
                        early: None,
                        replies: vec![],
                        retried: true,
                        ..r.clone()
                    });
                }
                if let Some(q) = r.early {
                    match outcome {
                        Outcome::HandedOff { to, next, .. } if to == q => {
                            // GivenEarly::confirm: raise to sent + window - drift.
                            if let Phase::Holding { until, next: n, .. } = &mut s.procs[q as usize]
                            {
                                *until = (*until).max(r.sent + life);
                                *n = next;
                            }
                            return Some(Self::normalize(s));
                        }
                        _ => {
                            if let Phase::Holding { lost, .. } = &mut s.procs[q as usize] {
                                *lost = true;
                            }
                        }
                    }
                }
                if let Outcome::HandedOff { to, sent, next, n } = outcome
                    && self.clients[to as usize] == self.clients[r.by as usize]
                {
                    self.handed(&mut s, to, sent, next, n);
                }
            }
            FairAction::LoseReply(i) => {
                let r = &mut s.pending[i];
                r.replies.remove(0);
                if r.unapplied == 0 && r.replies.is_empty() {
                    s.pending.remove(i);
                }
            }
            FairAction::Deliver(i, dup) => {
                let m = s.msgs[i].clone();
                if !dup {
                    s.msgs.remove(i);
                }
                self.handed(&mut s, m.to, m.sent, None, m.n);
            }
            FairAction::LoseMsg(i) => {
                s.msgs.remove(i);
            }
        }
        Some(Self::normalize(s))
    }

    fn properties(&self) -> Vec<Property<Self>> {
        let mut properties = vec![
            Property::always("never two holders with valid leases", |_, s| {
                valid_holders(s) <= 1
            }),
            Property::sometimes(
                "a waiter of another client holds by message",
                |m: &FairModel, s: &FairState| {
                    m.clients
                        .iter()
                        .zip(&s.procs)
                        .any(|(c, p)| *c != m.clients[0] && matches!(p, Phase::Holding { .. }))
                },
            ),
        ];
        if self.fencing {
            properties.extend([
                Property::always(
                    "fencing numbers strictly increase across holders",
                    |_, s: &FairState| !s.backwards,
                ),
                Property::sometimes("a holder takes the fourth number", |_, s: &FairState| {
                    s.top.0 >= 4
                }),
                Property::sometimes(
                    "a granted entry outlives its handoff's lock",
                    |_, s: &FairState| {
                        s.granted
                            .iter()
                            .enumerate()
                            .any(|(p, g)| g.is_some() && !Self::held_by(s, p as Proc))
                    },
                ),
            ]);
        } else {
            properties.push(Property::sometimes(
                "a waiter holds an early lease",
                |_, s: &FairState| {
                    s.pending.iter().any(|r| {
                        r.early.is_some_and(|q| {
                            matches!(s.procs[q as usize], Phase::Holding { lost: false, .. })
                        })
                    })
                },
            ));
        }
        properties
    }

    fn within_boundary(&self, s: &FairState) -> bool {
        s.pending.len() <= 2
    }
}

impl FairModel {
    /// Drop answered pendings that can no longer matter; keep the state canonical.
    fn normalize(mut s: FairState) -> FairState {
        s.pending
            .retain(|r| r.unapplied > 0 || !r.replies.is_empty());
        s.pending.sort();
        if s.queue.is_empty() {
            s.queue_expiry = 0;
        }
        s
    }
}
