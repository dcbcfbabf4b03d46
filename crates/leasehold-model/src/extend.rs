//! Extend and renewal with ambiguous outcomes (`crates/leasehold/src/guard.rs`,
//! `renewal.rs`): replies lost, commands applied late, replies and (optionally) commands
//! reordered; another client takes the key once it expires.
//!
//! **Time.** `now` ticks by one up to `horizon`. A lifetime `l` stands for `ttl - drift`: the
//! server keeps the key `l` ticks after it applied the command (its clock running fast by the
//! most the drift allowance covers) and the client counts `l` ticks from the instant it *sent*
//! it (`sent + ttl - clock_drift(ttl)`). A command is applied at any step after it was sent
//! (or never); its reply comes back at any later step (or never); the client may give up
//! waiting at any step (a timeout: an ambiguous outcome).
//!
//! **The rule checked** (`Validity` in `guard.rs`): an extend is recorded when it is sent, and
//! the validity drops to `min(valid_until, bound)`; a success reply raises the validity to
//! `min(bound, bound of the newest extend if that was sent later)`; `NotHeld` marks the lease
//! lost; anything else leaves it. The renewer (`Lease::renewed`) records its send when the
//! reply is in. The bug flag restores the old rule: a reply overwrites the validity in arrival
//! order, an error keeps it.

use stateright::{Model, Property};

/// One extend or renewal sent by the holder A.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Op {
    /// When it was sent.
    pub sent: u8,
    /// Its lifetime (`ttl - drift`).
    pub life: u8,
    /// Sent by the renewer rather than `LockGuard::extend`.
    pub renewal: bool,
    /// Not yet applied by the server (and not lost).
    pub in_flight: bool,
    /// Its reply on the way back: `Some(true)` extended, `Some(false)` not held.
    pub reply: Option<bool>,
    /// The client still waits for its outcome.
    pub waiting: bool,
}

/// The whole system.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ExtendState {
    /// Model time.
    pub now: u8,
    /// The key: `true` if it holds A's token (else B's), and its expiry.
    pub key: Option<(bool, u8)>,
    /// A's `Validity::until`.
    pub until: u8,
    /// A's `Validity::newest`: send order (index in `ops`), send instant and bound of the
    /// newest extend sent.
    pub newest: Option<(u8, u8, u8)>,
    /// A's lease was reported lost.
    pub lost: bool,
    /// Extends and renewals sent so far, oldest first.
    pub ops: Vec<Op>,
    /// B's validity (B holds while `now < b_until`).
    pub b_until: u8,
}

/// One step.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum ExtendAction {
    /// Time passes one tick; an expired key vanishes.
    Tick,
    /// A sends an extend with this lifetime: mirrors `LockGuard::extend` (`Lease::extend_sent`
    /// before `HeldLock::extend` sends `EXTEND_LUA`).
    Extend(u8),
    /// A's renewer sends a renewal (one in flight at a time): mirrors the renewer's pipeline of
    /// `EXTEND_LUA` in `renewal.rs::run`.
    Renew,
    /// The server runs an op's `EXTEND_LUA` (token-checked `PEXPIRE`), possibly long after the
    /// client gave up.
    Apply(usize),
    /// An op's command is lost (never applied).
    LoseCommand(usize),
    /// An op's reply reaches the client: mirrors the `Ok` / `NotHeld` arms of
    /// `LockGuard::extend` (`Lease::extend_confirmed`, `Lease::mark_lost`) or of the
    /// renewer (`Lease::renewed`).
    Reply(usize),
    /// The client stops waiting for an op (timeout, lost reply, connection error): the
    /// `Err(e)` arm (nothing changes) of `LockGuard::extend`, `Outcome::Retry` of the renewer.
    GiveUp(usize),
    /// Another client takes the free key: mirrors `ACQUIRE_LUA` (`SET NX PX`) via
    /// `LockClient::acquire`; its lease counts from this instant.
    OtherAcquires,
}

/// The extend model.
#[derive(Clone, Debug)]
pub struct ExtendModel {
    /// The old rule (finding 2): an ambiguous outcome keeps the old validity and success
    /// replies overwrite it in arrival order.
    pub ambiguous_keeps_validity: bool,
    /// The server may apply commands in any order (they crossed connections: a timed-out
    /// command on a dropped connection applied after a later one on a new connection). When
    /// false, commands are applied in the order they were sent (one connection), though late.
    pub any_order: bool,
    /// Lifetimes `LockGuard::extend` may ask for.
    pub extend_lives: Vec<u8>,
    /// The renewer's lifetime (`None`: no renewer).
    pub renewal_life: Option<u8>,
    /// Order extends by their send instants, as `guard.rs` does (`newest > sent`), where two
    /// extends can be sent at the same instant (one tick here); when false, by the order they
    /// were sent (the rule as stated: "an extend sent after it").
    pub order_by_instant: bool,
    /// Cap a success by every extend sent after it (the rule as the issue states it), not
    /// only by the newest one (`Validity::newest` in `guard.rs`).
    pub cap_by_every_later: bool,
    /// How many extends and renewals A sends at most.
    pub max_ops: usize,
    /// A's initial lifetime and B's.
    pub life: u8,
    /// Last tick.
    pub horizon: u8,
}

impl ExtendModel {
    /// The fixed rule, one connection: extends of lifetime 1 (shortening) or 3, a renewer of
    /// lifetime 3 (the registered TTL is at least any extend's), three ops, horizon 5.
    pub fn fixed() -> Self {
        ExtendModel {
            ambiguous_keeps_validity: false,
            any_order: false,
            extend_lives: vec![1, 3],
            renewal_life: Some(3),
            order_by_instant: false,
            cap_by_every_later: true,
            max_ops: 3,
            life: 3,
            horizon: 5,
        }
    }

    /// [`ExtendModel::fixed`] with the old rule (finding 2).
    pub fn old_rule() -> Self {
        ExtendModel {
            ambiguous_keeps_validity: true,
            ..Self::fixed()
        }
    }

    fn bound(sent: u8, life: u8) -> u8 {
        sent + life
    }

    /// Whether an extend `(seq, sent)` comes after `newest`'s: `sent >= newest` in
    /// `Lease::extend_sent` and `Lease::renewed`.
    fn later_or_same(&self, seq: u8, sent: u8, newest: (u8, u8, u8)) -> bool {
        if self.order_by_instant {
            sent >= newest.1
        } else {
            seq >= newest.0
        }
    }

    /// `Lease::extend_confirmed` for the op `seq` sent at `sent`: raise to its bound, capped
    /// by the bound of the newest extend if that was sent after it (`newest > sent`), or with
    /// `cap_by_every_later` by the bound of every extend sent after it.
    fn confirm(&self, s: &mut ExtendState, seq: u8, sent: u8, bound: u8) {
        let after = |i: usize, o: &Op| {
            if self.order_by_instant {
                o.sent > sent
            } else {
                i > seq as usize
            }
        };
        let bound = if self.cap_by_every_later {
            s.ops
                .iter()
                .enumerate()
                .filter(|(i, o)| !o.renewal && after(*i, o))
                .map(|(_, o)| Self::bound(o.sent, o.life))
                .fold(bound, u8::min)
        } else {
            match s.newest {
                Some(n) if self.order_by_instant && n.1 > sent => bound.min(n.2),
                Some(n) if !self.order_by_instant && n.0 > seq => bound.min(n.2),
                _ => bound,
            }
        };
        s.until = s.until.max(bound);
    }
}

fn a_valid(s: &ExtendState) -> bool {
    !s.lost && s.now < s.until
}

impl Model for ExtendModel {
    type State = ExtendState;
    type Action = ExtendAction;

    fn init_states(&self) -> Vec<ExtendState> {
        vec![ExtendState {
            now: 0,
            key: Some((true, self.life)),
            until: self.life,
            newest: None,
            lost: false,
            ops: vec![],
            b_until: 0,
        }]
    }

    fn actions(&self, s: &ExtendState, actions: &mut Vec<ExtendAction>) {
        if s.now < self.horizon {
            actions.push(ExtendAction::Tick);
        }
        if a_valid(s) && s.ops.len() < self.max_ops {
            for &l in &self.extend_lives {
                actions.push(ExtendAction::Extend(l));
            }
            if self.renewal_life.is_some() && !s.ops.iter().any(|o| o.renewal && o.waiting) {
                actions.push(ExtendAction::Renew);
            }
        }
        let first_in_flight = s.ops.iter().position(|o| o.in_flight);
        for (i, o) in s.ops.iter().enumerate() {
            if o.in_flight {
                if self.any_order || first_in_flight == Some(i) {
                    actions.push(ExtendAction::Apply(i));
                }
                actions.push(ExtendAction::LoseCommand(i));
            }
            if o.waiting {
                if o.reply.is_some() {
                    actions.push(ExtendAction::Reply(i));
                }
                actions.push(ExtendAction::GiveUp(i));
            }
        }
        if s.key.is_none() && s.b_until == 0 {
            actions.push(ExtendAction::OtherAcquires);
        }
    }

    fn next_state(&self, last: &ExtendState, action: ExtendAction) -> Option<ExtendState> {
        let mut s = last.clone();
        let now = s.now;
        match action {
            ExtendAction::Tick => {
                s.now += 1;
                if s.key.is_some_and(|(_, e)| e <= s.now) {
                    s.key = None;
                }
            }
            ExtendAction::Extend(_) | ExtendAction::Renew => {
                let (life, renewal) = match action {
                    ExtendAction::Extend(l) => (l, false),
                    _ => (self.renewal_life?, true),
                };
                let seq = s.ops.len() as u8;
                if !self.ambiguous_keeps_validity && !renewal {
                    // Lease::extend_sent.
                    let bound = Self::bound(now, life);
                    if s.newest.is_none_or(|n| self.later_or_same(seq, now, n)) {
                        s.newest = Some((seq, now, bound));
                    }
                    s.until = s.until.min(bound);
                }
                s.ops.push(Op {
                    sent: now,
                    life,
                    renewal,
                    in_flight: true,
                    reply: None,
                    waiting: true,
                });
            }
            ExtendAction::Apply(i) => {
                let o = &mut s.ops[i];
                o.in_flight = false;
                let held = s.key.is_some_and(|(a, e)| a && now < e);
                if held {
                    s.key = Some((true, now + o.life));
                }
                if o.waiting {
                    o.reply = Some(held);
                }
            }
            ExtendAction::LoseCommand(i) => s.ops[i].in_flight = false,
            ExtendAction::Reply(i) => {
                let o = &mut s.ops[i];
                o.waiting = false;
                let (ok, sent, life, renewal) = (o.reply.take()?, o.sent, o.life, o.renewal);
                if !ok {
                    s.lost = true;
                } else if self.ambiguous_keeps_validity {
                    s.until = Self::bound(sent, life);
                } else {
                    let bound = Self::bound(sent, life);
                    let seq = i as u8;
                    if renewal && s.newest.is_none_or(|n| self.later_or_same(seq, sent, n)) {
                        // Lease::renewed records the send when the reply is in.
                        s.newest = Some((seq, sent, bound));
                    }
                    self.confirm(&mut s, seq, sent, bound);
                }
            }
            ExtendAction::GiveUp(i) => {
                let o = &mut s.ops[i];
                o.waiting = false;
                o.reply = None;
            }
            ExtendAction::OtherAcquires => {
                s.key = Some((false, now + self.life));
                s.b_until = now + self.life;
            }
        }
        Some(s)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always(
                "never two holders with valid leases",
                |_, s: &ExtendState| !(a_valid(s) && s.now < s.b_until),
            ),
            Property::sometimes("the other client takes the key", |_, s: &ExtendState| {
                s.b_until > 0
            }),
            Property::sometimes(
                "a shortening extend is applied after a longer one",
                |_, s: &ExtendState| {
                    s.ops.len() >= 2
                        && s.ops[1].life < s.ops[0].life
                        && !s.ops[0].in_flight
                        && !s.ops[1].in_flight
                        && s.key.is_some_and(|(a, _)| a)
                },
            ),
        ]
    }
}
