//! Extend and renewal with ambiguous outcomes and re-sent commands
//! (`crates/leasehold/src/core/guard.rs`, `redis/renewal.rs`, `redis/client/release.rs`):
//! replies lost, commands applied late, re-sent by the client while its call runs (the
//! `idempotent` retry after a dropped connection, redis-rs Cluster re-sending a timed-out
//! request), replies reordered. Another client could take the key once it expires, so the
//! property is that the key holds A's token whenever A believes it holds.
//!
//! **Time.** `now` ticks by one up to `horizon`. A lifetime `l` stands for `ttl - drift`: the
//! server keeps the key `l` ticks after it applied the command (its clock running fast by the
//! most the drift allowance covers) and the client counts `l` ticks from the instant it *sent*
//! it (`sent + ttl - clock_drift(ttl)`). A command is applied at any step after it was sent
//! (or never); its reply comes back at any later step (or never); the client may give up
//! waiting at any step (a timeout: an ambiguous outcome). Several extends may be sent at the
//! same instant (the same tick).
//!
//! **The wire.** Every send (a first send or a re-send of an extend whose call still runs)
//! joins one queue of commands; the server applies them in that order (one connection, or a
//! re-send on a new connection once the old one's commands were applied or dropped), late or
//! never. With `reorder_within_bound`, a command may also be applied ahead of older ones (a
//! command stuck on a dropped connection, applied after later ones on a new connection), but an
//! overtaken command of a call that has returned is applied before its own bound or never
//! (the assumption in `Validity`'s doc). With `any_order`, without that bound. The call waits
//! for its newest copy's reply: a re-send loses the reply of the copies before it.
//!
//! **The rules** ([`Rule`], `Validity` in `guard.rs`): every extend or renewal gets the next
//! sequence number when it is *first* sent (a re-send is invisible to `Validity`: redis-rs
//! re-sends by itself) and joins `pending` with its bound `sent + l`; the validity drops to
//! `min(until, bound)` (`Lease::extend_sent`). The rules differ in how a success raises the
//! validity and when an extend leaves `pending`.
//!
//! **Bug flags.** [`Rule::ForgetOlder`] is the rule at ea1f4f2 (finding U1 when re-sends
//! happen); [`Rule::DropAtAnswer`] is a first fix that forgets an extend too early;
//! `ambiguous_keeps_validity` restores the rule before finding 2 (nothing recorded on send, a
//! success overwrites the validity in arrival order, an error keeps it); `newest_only` with
//! `order_by_instant` restores the intermediate rule (one `newest` record, ordered by send
//! instants); `any_order` breaks the assumption on how late a command can be applied.

use stateright::{Model, Property};

/// How a success reply raises the validity, and when an extend leaves `pending`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Rule {
    /// The rule at ea1f4f2 (finding U1): a success for `seq` is ignored if `seq <= confirmed`,
    /// otherwise capped by the bounds of the pending extends with a larger sequence number;
    /// then every pending extend up to `seq` is forgotten. Right only if no command is re-sent
    /// and commands are applied in send order.
    ForgetOlder,
    /// A first fix for U1: an extend is pending while its call runs; a success removes it at
    /// once; a call that returned without a success keeps it until its own bound has passed. A
    /// success for `c` is capped by `max(sent_s, sent_c) + life_s` for every other pending
    /// `s`; a success older than the newest confirmed one raises nothing. Wrong: an extend
    /// confirmed by a re-send that was applied after a later extend no longer caps that later
    /// extend's success, and an extend forgotten at its bound no longer caps the success of one
    /// sent before it was forgotten.
    DropAtAnswer,
    /// [`Rule::DropAtAnswer`] without forgetting at the bound (an extend that returned without
    /// a success stays pending for good): a confirmed extend still leaves at once, and is
    /// still wrong.
    DropConfirmed,
    /// The fix: every extend stays pending until its call has returned (with or without a
    /// success) *and* its own bound has passed; when it leaves, its cap
    /// `max(sent_s, sent_c) + life_s` on each extend `c` whose call still runs is folded into
    /// `c`'s own cap. A success for `c` is capped by its bound, its own cap and the cap of
    /// every other pending extend; a success older than the newest confirmed one raises
    /// nothing.
    KeepUntilBound,
}

/// One extend or renewal sent by the holder A. Its sequence number is its index in
/// [`ExtendState::ops`] plus one.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Op {
    /// When it was first sent.
    pub sent: u8,
    /// Its lifetime (`ttl - drift`).
    pub life: u8,
    /// Sent by the renewer rather than `LockGuard::extend`.
    pub renewal: bool,
    /// The reply of its newest copy, on the way back: `Some(true)` extended, `Some(false)`
    /// not held.
    pub reply: Option<bool>,
    /// Its call still runs (waits for its outcome, and may re-send).
    pub waiting: bool,
}

/// One copy of a command on the wire, not yet applied.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Copy {
    /// Index of its op in [`ExtendState::ops`].
    pub op: u8,
    /// The newest copy of its op: the one whose reply the call waits for.
    pub latest: bool,
    /// A command sent after it was applied before it.
    pub overtaken: bool,
}

/// One entry of A's `Validity::pending`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Pend {
    /// Sequence number (index of its op plus one).
    pub seq: u8,
    /// Order used by [`Rule::ForgetOlder`]: the sequence number, or with `order_by_instant`
    /// the send instant plus one.
    pub order: u8,
    /// When it was sent.
    pub sent: u8,
    /// Its lifetime: its bound is `sent + life`.
    pub life: u8,
    /// Its call still runs.
    pub open: bool,
    /// [`Rule::KeepUntilBound`]: the lowest cap folded in by extends that left `pending`
    /// (`u8::MAX`: none).
    pub cap: u8,
}

/// The whole system.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ExtendState {
    /// Model time.
    pub now: u8,
    /// The key's expiry while it holds A's token (`None`: gone, and anybody may take it).
    pub key: Option<u8>,
    /// A's `Validity::until`.
    pub until: u8,
    /// A's `Validity::pending`.
    pub pending: Vec<Pend>,
    /// A's `Validity::confirmed`: the order of the newest extend confirmed (0: none).
    pub confirmed: u8,
    /// With `newest_only` (the intermediate rule), its `Validity::newest`: order and bound of
    /// the newest extend sent. `pending` and `confirmed` are then unused.
    pub newest: Option<(u8, u8)>,
    /// A's lease was reported lost.
    pub lost: bool,
    /// Extends and renewals sent so far, oldest first (at most `max_ops`).
    pub ops: Vec<Op>,
    /// Commands sent and not yet applied (nor lost), in send order.
    pub wire: Vec<Copy>,
    /// Re-sends so far (at most `max_resends`).
    pub resends: u8,
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
    /// mirrors the scan of `renewal.rs::run` (`Lease::extend_sent`, then `EXTEND_LUA` in the
    /// pipeline).
    Renew,
    /// The server runs the copy at this index of the wire (`EXTEND_LUA`, token-checked
    /// `PEXPIRE`), possibly long after the client gave up.
    Apply(usize),
    /// A copy on the wire is lost (never applied).
    LoseCommand(usize),
    /// The client sends op `i`'s command again while its call still runs: the `idempotent`
    /// retry of `extend_raw` after a dropped connection (`redis/client/release.rs`), or
    /// redis-rs Cluster re-sending a request whose reply timed out. `Validity` does not see it.
    Resend(usize),
    /// Op `i`'s reply reaches the client: mirrors the `Ok` / `NotHeld` arms of
    /// `LockGuard::extend` (`SentExtend::confirm`, `Lease::mark_lost`) or the renewer's
    /// `Outcome::Renewed` / `Outcome::NotHeld`. Its call returns.
    Reply(usize),
    /// The client stops waiting for op `i` (timeout, lost reply, connection error): the
    /// `Err(e)` arm of `LockGuard::extend` (the `SentExtend` dropped), `Outcome::Retry` of the
    /// renewer (which may then send again). Its call returns.
    GiveUp(usize),
}

/// The extend model.
#[derive(Clone, Debug)]
pub struct ExtendModel {
    /// The rule for successes and for forgetting extends.
    pub rule: Rule,
    /// The rule before finding 2: nothing is recorded on send, an ambiguous outcome keeps the
    /// old validity and success replies overwrite it in arrival order.
    pub ambiguous_keeps_validity: bool,
    /// The intermediate rule (`guard.rs` at 0f1d60d..8ffd7dc): one `Validity::newest` record
    /// (the newest extend sent) instead of `pending` and `confirmed`; a success is capped by
    /// the newest extend's bound only if that one is later, and never ignored.
    pub newest_only: bool,
    /// Order extends by their send instants (`>=` to record the newest, `>` to cap or keep
    /// pending, as the intermediate rule did), where two extends can be sent at the same
    /// instant (one tick here), instead of by sequence number. With [`Rule::ForgetOlder`].
    pub order_by_instant: bool,
    /// A command may be applied ahead of older ones, each overtaken one then applied before
    /// its own bound once its call has returned, or never (the assumption of `Validity`).
    pub reorder_within_bound: bool,
    /// The server may apply commands in any order at any time (a command stuck on a dropped
    /// connection applied long after its bound), beyond the assumption.
    pub any_order: bool,
    /// How many re-sends (of any ops) at most.
    pub max_resends: u8,
    /// `LockGuard::extend` may be called after the validity ran out (it does not look at it)
    /// until the lease is reported lost, and a success raises the validity again.
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
    /// The fixed rule ([`Rule::KeepUntilBound`]) under re-sends and commands overtaken within
    /// their bound: extends of lifetime 1 (shortening) or 3, a renewer of lifetime 2, three
    /// ops, one re-send, horizon 5.
    pub fn fixed() -> Self {
        ExtendModel {
            rule: Rule::KeepUntilBound,
            ambiguous_keeps_validity: false,
            newest_only: false,
            order_by_instant: false,
            reorder_within_bound: true,
            any_order: false,
            max_resends: 1,
            extend_after_expiry: false,
            extend_lives: vec![1, 3],
            renewal_life: Some(2),
            max_ops: 3,
            life: 3,
            horizon: 5,
        }
    }

    /// The rule at ea1f4f2 ([`Rule::ForgetOlder`]) under its own assumption: commands applied
    /// in send order, never re-sent.
    pub fn in_send_order() -> Self {
        ExtendModel {
            rule: Rule::ForgetOlder,
            reorder_within_bound: false,
            max_resends: 0,
            ..Self::fixed()
        }
    }

    /// Finding U1: the rule at ea1f4f2 with re-sends (still applied in send order).
    pub fn forget_older_with_resends() -> Self {
        ExtendModel {
            max_resends: 1,
            ..Self::in_send_order()
        }
    }

    /// [`Rule::DropAtAnswer`] under re-sends, in send order.
    pub fn drop_at_answer() -> Self {
        ExtendModel {
            rule: Rule::DropAtAnswer,
            reorder_within_bound: false,
            ..Self::fixed()
        }
    }

    /// [`ExtendModel::in_send_order`] with the rule before finding 2.
    pub fn old_rule() -> Self {
        ExtendModel {
            ambiguous_keeps_validity: true,
            ..Self::in_send_order()
        }
    }

    /// [`ExtendModel::in_send_order`] with the intermediate rule: the newest extend only,
    /// ordered by send instants.
    pub fn intermediate_rule() -> Self {
        ExtendModel {
            newest_only: true,
            order_by_instant: true,
            ..Self::in_send_order()
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

    /// `Lease::extend_sent`: record the extend, lower the validity.
    fn extend_sent(&self, s: &mut ExtendState, i: usize, sent: u8, life: u8) {
        let order = self.order(i, sent);
        let bound = sent + life;
        if self.newest_only {
            if s.newest.is_none_or(|(n, _)| order >= n) {
                s.newest = Some((order, bound));
            }
        } else {
            s.pending.push(Pend {
                seq: i as u8 + 1,
                order,
                sent,
                life,
                open: true,
                cap: u8::MAX,
            });
        }
        s.until = s.until.min(bound);
    }

    /// `SentExtend::confirm` (`Lease::extend_confirmed`) for op `i`.
    fn extend_confirmed(&self, s: &mut ExtendState, i: usize, sent: u8, life: u8) {
        let seq = i as u8 + 1;
        let bound = sent + life;
        let cap = |others: &mut dyn Iterator<Item = &Pend>| {
            others
                .map(|p| p.sent.max(sent) + p.life)
                .fold(bound, u8::min)
        };
        let raise = if self.newest_only {
            let order = self.order(i, sent);
            match s.newest {
                Some((n, b)) if n > order => Some(bound.min(b)),
                _ => Some(bound),
            }
        } else {
            match self.rule {
                Rule::ForgetOlder => {
                    let order = self.order(i, sent);
                    if order <= s.confirmed {
                        return;
                    }
                    let cap = s
                        .pending
                        .iter()
                        .filter(|p| p.order > order)
                        .map(|p| p.sent + p.life)
                        .fold(bound, u8::min);
                    s.confirmed = order;
                    s.pending.retain(|p| p.order > order);
                    Some(cap)
                }
                Rule::DropAtAnswer | Rule::DropConfirmed => {
                    let Some(at) = s.pending.iter().position(|p| p.seq == seq) else {
                        return;
                    };
                    s.pending.remove(at);
                    if seq < s.confirmed {
                        return;
                    }
                    s.confirmed = seq;
                    Some(cap(&mut s.pending.iter()))
                }
                Rule::KeepUntilBound => {
                    let Some(at) = s.pending.iter().position(|p| p.seq == seq) else {
                        return;
                    };
                    let own = s.pending[at].cap;
                    s.pending[at].open = false;
                    let c = cap(&mut s.pending.iter().filter(|p| p.seq != seq)).min(own);
                    self.prune(s);
                    if seq < s.confirmed {
                        return;
                    }
                    s.confirmed = seq;
                    Some(c)
                }
            }
        };
        if let Some(c) = raise {
            s.until = s.until.max(c);
        }
    }

    /// Op `i`'s call returned without a success (`SentExtend` dropped).
    fn extend_settled(&self, s: &mut ExtendState, i: usize) {
        let seq = i as u8 + 1;
        if let Some(p) = s.pending.iter_mut().find(|p| p.seq == seq) {
            p.open = false;
        }
        self.prune(s);
    }

    /// `Validity::prune`: forget extends whose call returned and whose bound has passed; with
    /// [`Rule::KeepUntilBound`], fold each one's cap into the extends whose call still runs.
    fn prune(&self, s: &mut ExtendState) {
        if matches!(self.rule, Rule::ForgetOlder | Rule::DropConfirmed) || self.newest_only {
            return;
        }
        let now = s.now;
        while let Some(at) = s
            .pending
            .iter()
            .position(|p| !p.open && p.sent + p.life <= now)
        {
            let gone = s.pending.remove(at);
            if self.rule == Rule::KeepUntilBound {
                for p in s.pending.iter_mut().filter(|p| p.open) {
                    p.cap = p.cap.min(gone.sent.max(p.sent) + gone.life);
                }
            }
        }
    }

    /// Overtaken copies of calls that returned are applied before their bound or never.
    fn drop_overdue(s: &mut ExtendState) {
        let now = s.now;
        let ops = &s.ops;
        s.wire.retain(|c| {
            let o = &ops[c.op as usize];
            !c.overtaken || o.waiting || now < o.sent + o.life
        });
    }

    /// The call of op `i` returns.
    fn returned(&self, s: &mut ExtendState, i: usize) {
        let o = &mut s.ops[i];
        o.waiting = false;
        o.reply = None;
        for c in s.wire.iter_mut().filter(|c| c.op as usize == i) {
            c.latest = false;
        }
        Self::drop_overdue(s);
    }
}

impl ExtendModel {
    /// Merges states that differ in nothing that can matter: an op whose call has returned and
    /// which has no copy on the wire (its pending entry keeps what `Validity` knows) is
    /// blanked; a validity already past is `now` (only a raise above `now` can matter); a
    /// folded cap at or above its extend's own bound is none.
    fn canonical(mut s: ExtendState) -> ExtendState {
        s.until = s.until.max(s.now);
        for p in &mut s.pending {
            if p.cap >= p.sent + p.life {
                p.cap = u8::MAX;
            }
        }
        for (i, o) in s.ops.iter_mut().enumerate() {
            if !o.waiting && !s.wire.iter().any(|c| c.op as usize == i) {
                *o = Op {
                    sent: 0,
                    life: 0,
                    renewal: false,
                    reply: None,
                    waiting: false,
                };
            }
        }
        s
    }
}

fn a_valid(s: &ExtendState) -> bool {
    !s.lost && s.now < s.until
}

fn a_key(s: &ExtendState) -> bool {
    s.key.is_some()
}

impl Model for ExtendModel {
    type State = ExtendState;
    type Action = ExtendAction;

    fn init_states(&self) -> Vec<ExtendState> {
        vec![ExtendState {
            now: 0,
            key: Some(self.life),
            until: self.life,
            pending: vec![],
            confirmed: 0,
            newest: None,
            lost: false,
            ops: vec![],
            wire: vec![],
            resends: 0,
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
        for k in 0..s.wire.len() {
            if k == 0 || self.any_order || self.reorder_within_bound {
                actions.push(ExtendAction::Apply(k));
            }
            actions.push(ExtendAction::LoseCommand(k));
        }
        for (i, o) in s.ops.iter().enumerate() {
            if o.waiting {
                if o.reply.is_some() {
                    actions.push(ExtendAction::Reply(i));
                }
                if s.resends < self.max_resends {
                    actions.push(ExtendAction::Resend(i));
                }
                actions.push(ExtendAction::GiveUp(i));
            }
        }
    }

    fn next_state(&self, last: &ExtendState, action: ExtendAction) -> Option<ExtendState> {
        let mut s = last.clone();
        let now = s.now;
        match action {
            ExtendAction::Tick => {
                s.now += 1;
                if s.key.is_some_and(|e| e <= s.now) {
                    s.key = None;
                }
                Self::drop_overdue(&mut s);
                self.prune(&mut s);
            }
            ExtendAction::Extend(_) | ExtendAction::Renew => {
                let (life, renewal) = match action {
                    ExtendAction::Extend(l) => (l, false),
                    _ => (self.renewal_life?, true),
                };
                let i = s.ops.len();
                if !self.ambiguous_keeps_validity {
                    self.extend_sent(&mut s, i, now, life);
                }
                s.ops.push(Op {
                    sent: now,
                    life,
                    renewal,
                    reply: None,
                    waiting: true,
                });
                s.wire.push(Copy {
                    op: i as u8,
                    latest: true,
                    overtaken: false,
                });
            }
            ExtendAction::Apply(k) => {
                let c = s.wire.remove(k);
                if !self.any_order {
                    for older in &mut s.wire[..k] {
                        older.overtaken = true;
                    }
                    Self::drop_overdue(&mut s);
                }
                let o = &mut s.ops[c.op as usize];
                let held = s.key.is_some_and(|e| now < e);
                if held {
                    s.key = Some(now + o.life);
                }
                if c.latest && o.waiting {
                    o.reply = Some(held);
                }
            }
            ExtendAction::LoseCommand(k) => {
                s.wire.remove(k);
            }
            ExtendAction::Resend(i) => {
                s.resends += 1;
                for c in s.wire.iter_mut().filter(|c| c.op as usize == i) {
                    c.latest = false;
                }
                s.ops[i].reply = None;
                s.wire.push(Copy {
                    op: i as u8,
                    latest: true,
                    overtaken: false,
                });
            }
            ExtendAction::Reply(i) => {
                let o = &s.ops[i];
                let (ok, sent, life) = (o.reply?, o.sent, o.life);
                self.returned(&mut s, i);
                if !ok {
                    s.lost = true;
                    self.extend_settled(&mut s, i);
                } else if self.ambiguous_keeps_validity {
                    s.until = sent + life;
                } else {
                    self.extend_confirmed(&mut s, i, sent, life);
                }
            }
            ExtendAction::GiveUp(i) => {
                self.returned(&mut s, i);
                self.extend_settled(&mut s, i);
            }
        }
        Some(Self::canonical(s))
    }

    fn within_boundary(&self, s: &ExtendState) -> bool {
        // A lost lease never becomes valid again: nothing after it matters.
        !s.lost
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always(
                "the key is ours while we believe we hold it",
                |_, s: &ExtendState| !a_valid(s) || a_key(s),
            ),
            Property::sometimes(
                "the key expires before a confirmed extend's bound",
                |_, s: &ExtendState| {
                    s.key.is_some_and(|e| {
                        s.pending
                            .iter()
                            .any(|p| p.seq <= s.confirmed && e < p.sent + p.life)
                    })
                },
            ),
            Property::sometimes("the key expires while A holds", |_, s: &ExtendState| {
                s.key.is_none() && !s.lost
            }),
            Property::sometimes(
                "an older extend is on the wire after a later one was confirmed",
                |_, s: &ExtendState| s.wire.iter().any(|c| c.op + 1 < s.confirmed),
            ),
            Property::sometimes(
                "a success raises the validity past the first lifetime",
                |m: &ExtendModel, s: &ExtendState| a_valid(s) && s.until > m.life,
            ),
        ]
    }
}
