//! Extend and renewal with ambiguous outcomes (`crates/leasehold/src/guard.rs`,
//! `renewal.rs`): replies lost, commands applied late (in send order unless `any_order`),
//! replies reordered; another client takes the key once it expires.
//!
//! **Time.** `now` ticks by one up to `horizon`. A lifetime `l` stands for `ttl - drift`: the
//! server keeps the key `l` ticks after it applied the command (its clock running fast by the
//! most the drift allowance covers) and the client counts `l` ticks from the instant it *sent*
//! it (`sent + ttl - clock_drift(ttl)`). A command is applied at any step after it was sent
//! (or never); its reply comes back at any later step (or never); the client may give up
//! waiting at any step (a timeout: an ambiguous outcome). Several extends may be sent at the
//! same instant (the same tick).
//!
//! **The rule checked** (`Validity` in `guard.rs`): every extend or renewal gets the next
//! sequence number when it is sent and joins `pending` with its bound `sent + l`; the validity
//! drops to `min(until, bound)` (`Lease::extend_sent`). A success reply for `seq` is ignored if
//! `seq <= confirmed`; otherwise the validity rises to the lowest of its bound and the bounds
//! of *every* pending extend with a larger sequence number, never falls; then
//! `confirmed = seq` and the pending entries up to `seq` are dropped
//! (`Lease::extend_confirmed`). `NotHeld` marks the lease lost; anything else leaves it. The
//! renewer (`renewal.rs`) follows the same rule: `extend_sent` when its pipeline is built,
//! `extend_confirmed` with the entry's sequence number when `Renewed` comes back.
//!
//! **Bug flags.** `ambiguous_keeps_validity` restores the rule before finding 2 (nothing
//! recorded on send, a success overwrites the validity in arrival order, an error keeps it);
//! `newest_only` with `order_by_instant` restores the intermediate rule (one `newest` record,
//! ordered by send instants); `any_order` breaks the assumption that a lease's extends are
//! applied in send order.

use stateright::{Model, Property};

/// One extend or renewal sent by the holder A. Its sequence number is its index in
/// [`ExtendState::ops`] plus one.
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
    /// A's `Validity::pending`: order (sequence number, or `sent + 1` with
    /// `order_by_instant`) and bound of each extend sent after the newest one confirmed.
    /// At most `max_ops` entries.
    pub pending: Vec<(u8, u8)>,
    /// A's `Validity::confirmed`: the order of the newest extend confirmed (0: none).
    pub confirmed: u8,
    /// With `newest_only` (the intermediate rule), its `Validity::newest`: order and bound of
    /// the newest extend sent. `pending` and `confirmed` are then unused.
    pub newest: Option<(u8, u8)>,
    /// A's lease was reported lost.
    pub lost: bool,
    /// Extends and renewals sent so far, oldest first (at most `max_ops`).
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
    /// before `HeldLock::extend` sends `EXTEND_LUA`). While A's lease is valid, or with
    /// `extend_after_expiry` until it is reported lost.
    Extend(u8),
    /// A's renewer sends a renewal (one in flight at a time, only while the lease is valid):
    /// mirrors the scan of `renewal.rs::run` (`Lease::extend_sent`, the entry's `seq`, then
    /// `EXTEND_LUA` in the pipeline).
    Renew,
    /// The server runs an op's `EXTEND_LUA` (token-checked `PEXPIRE`), possibly long after the
    /// client gave up.
    Apply(usize),
    /// An op's command is lost (never applied).
    LoseCommand(usize),
    /// An op's reply reaches the client: mirrors the `Ok` / `NotHeld` arms of
    /// `LockGuard::extend` (`Lease::extend_confirmed(seq, ..)`, `Lease::mark_lost`) or the
    /// renewer's `Outcome::Renewed` (`extend_confirmed(e.seq, bound)`) / `Outcome::NotHeld`.
    Reply(usize),
    /// The client stops waiting for an op (timeout, lost reply, connection error): the
    /// `Err(e)` arm (nothing changes) of `LockGuard::extend`, `Outcome::Retry` of the renewer
    /// (which may then send again).
    GiveUp(usize),
    /// Another client takes the free key: mirrors `ACQUIRE_LUA` (`SET NX PX`) via
    /// `LockClient::acquire`; its lease counts from this instant.
    OtherAcquires,
}

/// The extend model.
#[derive(Clone, Debug)]
pub struct ExtendModel {
    /// The rule before finding 2: nothing is recorded on send, an ambiguous outcome keeps the
    /// old validity and success replies overwrite it in arrival order.
    pub ambiguous_keeps_validity: bool,
    /// The intermediate rule (`guard.rs` at 0f1d60d..8ffd7dc): one `Validity::newest` record
    /// (the newest extend sent) instead of `pending` and `confirmed`; a success is capped by
    /// the newest extend's bound only if that one is later, and never ignored.
    pub newest_only: bool,
    /// Order extends by their send instants (`>=` to record the newest, `>` to cap or keep
    /// pending, as the intermediate rule did), where two extends can be sent at the same
    /// instant (one tick here), instead of by sequence number.
    pub order_by_instant: bool,
    /// The server may apply commands in any order (they crossed connections: a timed-out
    /// command on a dropped connection applied after a later one on a new connection), which
    /// is outside `guard.rs`'s assumption. When false, commands are applied in the order they
    /// were sent (one connection), though late.
    pub any_order: bool,
    /// `LockGuard::extend` may be called after the validity ran out (it does not look at it)
    /// until the lease is reported lost, and a success raises the validity again. Triples the
    /// states; off in [`ExtendModel::fixed`].
    pub extend_after_expiry: bool,
    /// Lifetimes `LockGuard::extend` may ask for.
    pub extend_lives: Vec<u8>,
    /// The renewer's lifetime (`None`: no renewer).
    pub renewal_life: Option<u8>,
    /// How many extends and renewals A sends at most.
    pub max_ops: usize,
    /// A's initial lifetime and B's.
    pub life: u8,
    /// Last tick.
    pub horizon: u8,
}

impl ExtendModel {
    /// The rule in `guard.rs`, one connection: extends of lifetime 1 (shortening) or 3, a
    /// renewer of lifetime 2, three ops, horizon 5.
    pub fn fixed() -> Self {
        ExtendModel {
            ambiguous_keeps_validity: false,
            newest_only: false,
            order_by_instant: false,
            any_order: false,
            extend_after_expiry: false,
            extend_lives: vec![1, 3],
            renewal_life: Some(2),
            max_ops: 3,
            life: 3,
            horizon: 5,
        }
    }

    /// [`ExtendModel::fixed`] with the rule before finding 2.
    pub fn old_rule() -> Self {
        ExtendModel {
            ambiguous_keeps_validity: true,
            ..Self::fixed()
        }
    }

    /// [`ExtendModel::fixed`] with the intermediate rule: the newest extend only, ordered by
    /// send instants.
    pub fn intermediate_rule() -> Self {
        ExtendModel {
            newest_only: true,
            order_by_instant: true,
            ..Self::fixed()
        }
    }

    /// The order of op `i` sent at `sent`: its sequence number (`Validity::sent` after the
    /// increment), or with `order_by_instant` its send instant (plus one: 0 stays "none").
    fn order(&self, i: usize, sent: u8) -> u8 {
        if self.order_by_instant {
            sent + 1
        } else {
            i as u8 + 1
        }
    }

    /// `Lease::extend_sent`: record the extend `(order, bound)`, lower the validity.
    fn extend_sent(&self, s: &mut ExtendState, order: u8, bound: u8) {
        if self.newest_only {
            if s.newest.is_none_or(|(n, _)| order >= n) {
                s.newest = Some((order, bound));
            }
        } else {
            s.pending.push((order, bound));
        }
        s.until = s.until.min(bound);
    }

    /// `Lease::extend_confirmed(seq, bound)`.
    fn extend_confirmed(&self, s: &mut ExtendState, seq: u8, bound: u8) {
        let cap = if self.newest_only {
            match s.newest {
                Some((n, b)) if n > seq => bound.min(b),
                _ => bound,
            }
        } else {
            if seq <= s.confirmed {
                return;
            }
            let cap = s
                .pending
                .iter()
                .filter(|(o, _)| *o > seq)
                .map(|(_, b)| *b)
                .fold(bound, u8::min);
            s.confirmed = seq;
            s.pending.retain(|(o, _)| *o > seq);
            cap
        };
        s.until = s.until.max(cap);
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
            pending: vec![],
            confirmed: 0,
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
        if !s.lost && (self.extend_after_expiry || a_valid(s)) && s.ops.len() < self.max_ops {
            for &l in &self.extend_lives {
                actions.push(ExtendAction::Extend(l));
            }
            if a_valid(s)
                && self.renewal_life.is_some()
                && !s.ops.iter().any(|o| o.renewal && o.waiting)
            {
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
                if !self.ambiguous_keeps_validity {
                    let order = self.order(s.ops.len(), now);
                    self.extend_sent(&mut s, order, now + life);
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
                let (ok, sent, life) = (o.reply.take()?, o.sent, o.life);
                if !ok {
                    s.lost = true;
                } else if self.ambiguous_keeps_validity {
                    s.until = sent + life;
                } else {
                    let seq = self.order(i, sent);
                    self.extend_confirmed(&mut s, seq, sent + life);
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
            Property::sometimes(
                "a success confirmed with two later extends pending",
                |_, s: &ExtendState| s.confirmed > 0 && s.pending.len() >= 2,
            ),
            Property::sometimes(
                "a success raises the validity past the first lifetime",
                |m: &ExtendModel, s: &ExtendState| a_valid(s) && s.until > m.life,
            ),
        ]
    }
}
