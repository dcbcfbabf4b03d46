//! The acquisition every primitive shares: holders take one of `N` slots with a TTL, renew it
//! (auto-extension: a renewal decided while the lease is held and delivered at any later
//! step, also after the release), release it, or release it with `min_hold` (the lock kept
//! until `t + hold`, `t` the acquisition instant). One model for the plain lock (1 slot), the
//! semaphore (`N` permits), the read-write lock (one writer excludes every reader) and the
//! election (1 slot, a term counter raised at every win).
//!
//! Mirrors: the Redis scripts `acquire.lua` / `permit_acquire.lua` / `write_acquire.lua` /
//! `read_acquire.lua` / `campaign.lua` (admission), `extend.lua` (the renewer's token-checked
//! extend, `redis/renewal.rs`), `release.lua` and `min_hold_release.lua`; PostgreSQL lease rows
//! (`postgres/lease/sql.rs`: `ACQUIRE`, `EXTEND`, `RELEASE`) and the memory store
//! (`memory/store.rs`) follow the same steps.
//!
//! **Time.** `now` ticks by one up to `horizon`; an acquisition is applied in the tick it is
//! sent (its delay is the extend model's subject), and a holder counts its lease `life` ticks
//! from then; a renewal sent at `s` and confirmed raises the holder's validity to `s + life`.
//!
//! **Bug flag.** `kept_token` (finding L2): the min-hold release keeps the key *with the
//! holder's token*, so a renewal decided before the release and applied after it re-extends
//! the kept lock to a full TTL. Fixed: the release stores a value the extend refuses (a "kept"
//! marker: Redis `held:<token>`, PostgreSQL `token = NULL`, memory a released flag).

use stateright::{Model, Property};

/// A process (a holder).
pub type Proc = u8;

/// Which primitive.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kind {
    /// A plain lock: one slot.
    Mutex,
    /// A semaphore with this many permits.
    Semaphore(u8),
    /// A read-write lock: P0 writes, the others read; the writer needs no live entry at all,
    /// a reader no live writer entry.
    ReadWrite,
    /// An election: one slot, and each win takes the next term of a counter.
    Election,
}

/// What a slot's entry holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Value {
    /// The holder's token: a token-checked extend or release matches it.
    Token,
    /// Kept by a min-hold release: counts as held, but no extend matches it.
    Kept,
}

/// What a process is doing.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Phase {
    /// Has not acquired yet.
    Idle,
    /// Holds a lease.
    Holding {
        /// Its local validity.
        until: u8,
        /// Reported lost (a renewal found the entry gone).
        lost: bool,
        /// Its election term (0 for other kinds).
        term: u8,
    },
    /// Released.
    Done,
}

/// A renewal sent by the renewer and not yet settled.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Renewal {
    /// When it was sent.
    pub sent: u8,
    /// Its reply, once the server applied it: `true` extended, `false` not held.
    pub reply: Option<bool>,
}

/// The whole system.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct AcquireState {
    /// Model time.
    pub now: u8,
    /// Each process's entry on the server (its slot): value and expiry.
    pub entries: Vec<Option<(Value, u8)>>,
    /// Each process.
    pub procs: Vec<Phase>,
    /// When each process acquired.
    pub acquired: Vec<u8>,
    /// Each process's renewal in flight.
    pub renewals: Vec<Option<Renewal>>,
    /// `t + hold` of each process's min-hold release, if it released so (and the hold was not
    /// over yet).
    pub hold_end: Vec<Option<u8>>,
    /// The election's term counter.
    pub terms: u8,
    /// A win took a term not above an earlier one.
    pub term_backwards: bool,
}

/// One step.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum AcquireAction {
    /// Time passes one tick; expired entries vanish.
    Tick,
    /// An idle process acquires a free slot: the kind's acquisition script (`SET NX PX`, a
    /// permit, a write or read side, a campaign raising the term).
    Acquire(Proc),
    /// The holder's renewer decides a renewal (`renewal.rs`: the scan passed `is_ended`) and
    /// sends it; it may be applied at any later step, also after the release.
    Renew(Proc),
    /// The server runs a renewal: `extend.lua` (token-checked: only `Value::Token` of this
    /// holder, live, is extended to a full TTL).
    ApplyRenewal(Proc),
    /// A renewal's reply reaches the renewer: success raises the validity to `sent + life`,
    /// not held marks the lease lost; ignored once released (`is_ended`).
    ReplyRenewal(Proc),
    /// A renewal is lost (never applied), or its reply is.
    LoseRenewal(Proc),
    /// The holder releases: `release.lua` (token-checked delete).
    Release(Proc),
    /// The holder releases with `min_hold`: `min_hold_release.lua` keeps the entry until
    /// `t + hold` (the kept marker, or with `kept_token` the token), or deletes it if the hold
    /// is over.
    ReleaseHold(Proc),
}

/// The acquisition model.
#[derive(Clone, Debug)]
pub struct AcquireModel {
    /// Which primitive.
    pub kind: Kind,
    /// How many processes.
    pub procs: u8,
    /// TTL (net of drift), in ticks.
    pub life: u8,
    /// `min_hold`, in ticks.
    pub hold: u8,
    /// The old min-hold release (finding L2): the kept entry holds the token.
    pub kept_token: bool,
    /// Last tick.
    pub horizon: u8,
}

impl AcquireModel {
    /// The fixed protocol for `kind`: 3 processes, lifetime 3, hold 2, horizon 3 (2 for a
    /// semaphore: at 3 it passes a million states).
    pub fn fixed(kind: Kind) -> Self {
        AcquireModel {
            kind,
            procs: 3,
            life: 3,
            hold: 2,
            kept_token: false,
            horizon: if matches!(kind, Kind::Semaphore(_)) {
                2
            } else {
                3
            },
        }
    }

    /// [`AcquireModel::fixed`] with the old min-hold release (finding L2).
    pub fn with_kept_token(kind: Kind) -> Self {
        AcquireModel {
            kept_token: true,
            ..Self::fixed(kind)
        }
    }

    /// Whether `p` may take a slot now (the kind's admission rule over the live entries).
    fn admitted(&self, s: &AcquireState, p: Proc) -> bool {
        let live = s.entries.iter().filter(|e| e.is_some()).count();
        match self.kind {
            Kind::Mutex | Kind::Election => live == 0,
            Kind::Semaphore(n) => live < n as usize,
            Kind::ReadWrite => {
                if p == 0 {
                    live == 0
                } else {
                    s.entries[0].is_none()
                }
            }
        }
    }
}

impl AcquireModel {
    /// A process done with nothing of it left on the server nor on the wire can change nothing
    /// more: its acquisition instant and hold are forgotten, which merges equivalent states.
    fn canonical(mut s: AcquireState) -> AcquireState {
        for i in 0..s.procs.len() {
            if s.procs[i] == Phase::Done && s.entries[i].is_none() && s.renewals[i].is_none() {
                s.acquired[i] = 0;
                s.hold_end[i] = None;
            }
        }
        s
    }
}

/// The processes that believe they hold at `now`.
fn believers(s: &AcquireState) -> impl Iterator<Item = (usize, u8)> + '_ {
    s.procs.iter().enumerate().filter_map(|(p, ph)| match ph {
        Phase::Holding {
            until,
            lost: false,
            term,
        } if s.now < *until => Some((p, *term)),
        _ => None,
    })
}

impl Model for AcquireModel {
    type State = AcquireState;
    type Action = AcquireAction;

    fn init_states(&self) -> Vec<AcquireState> {
        let n = self.procs as usize;
        vec![AcquireState {
            now: 0,
            entries: vec![None; n],
            procs: vec![Phase::Idle; n],
            acquired: vec![0; n],
            renewals: vec![None; n],
            hold_end: vec![None; n],
            terms: 0,
            term_backwards: false,
        }]
    }

    fn actions(&self, s: &AcquireState, actions: &mut Vec<AcquireAction>) {
        if s.now < self.horizon {
            actions.push(AcquireAction::Tick);
        }
        for p in 0..self.procs {
            let i = p as usize;
            match s.procs[i] {
                Phase::Idle if self.admitted(s, p) => actions.push(AcquireAction::Acquire(p)),
                Phase::Holding { until, lost, .. } => {
                    if !lost && s.now < until && s.renewals[i].is_none() {
                        actions.push(AcquireAction::Renew(p));
                    }
                    actions.push(AcquireAction::Release(p));
                    actions.push(AcquireAction::ReleaseHold(p));
                }
                _ => {}
            }
            if let Some(r) = &s.renewals[i] {
                if r.reply.is_none() {
                    actions.push(AcquireAction::ApplyRenewal(p));
                } else {
                    actions.push(AcquireAction::ReplyRenewal(p));
                }
                actions.push(AcquireAction::LoseRenewal(p));
            }
        }
    }

    fn next_state(&self, last: &AcquireState, action: AcquireAction) -> Option<AcquireState> {
        let mut s = last.clone();
        let now = s.now;
        match action {
            AcquireAction::Tick => {
                s.now += 1;
                let now = s.now;
                for e in &mut s.entries {
                    if e.is_some_and(|(_, x)| x <= now) {
                        *e = None;
                    }
                }
            }
            AcquireAction::Acquire(p) => {
                let i = p as usize;
                let term = if self.kind == Kind::Election {
                    s.terms += 1;
                    let term = s.terms;
                    if s.procs
                        .iter()
                        .any(|ph| matches!(ph, Phase::Holding { term: t, .. } if *t >= term))
                    {
                        s.term_backwards = true;
                    }
                    term
                } else {
                    0
                };
                s.entries[i] = Some((Value::Token, now + self.life));
                s.acquired[i] = now;
                s.procs[i] = Phase::Holding {
                    until: now + self.life,
                    lost: false,
                    term,
                };
            }
            AcquireAction::Renew(p) => {
                s.renewals[p as usize] = Some(Renewal {
                    sent: now,
                    reply: None,
                });
            }
            AcquireAction::ApplyRenewal(p) => {
                let i = p as usize;
                let held = s.entries[i].is_some_and(|(v, _)| v == Value::Token);
                if held {
                    s.entries[i] = Some((Value::Token, now + self.life));
                }
                s.renewals[i].as_mut()?.reply = Some(held);
            }
            AcquireAction::ReplyRenewal(p) => {
                let i = p as usize;
                let r = s.renewals[i].take()?;
                if let Phase::Holding { until, lost, .. } = &mut s.procs[i] {
                    if r.reply? {
                        *until = (*until).max(r.sent + self.life);
                    } else {
                        *lost = true;
                    }
                }
            }
            AcquireAction::LoseRenewal(p) => s.renewals[p as usize] = None,
            AcquireAction::Release(p) => {
                let i = p as usize;
                s.procs[i] = Phase::Done;
                if s.entries[i].is_some_and(|(v, _)| v == Value::Token) {
                    s.entries[i] = None;
                }
            }
            AcquireAction::ReleaseHold(p) => {
                let i = p as usize;
                s.procs[i] = Phase::Done;
                let end = s.acquired[i] + self.hold;
                if s.entries[i].is_some_and(|(v, _)| v == Value::Token) {
                    if now < end {
                        let kept = if self.kept_token {
                            Value::Token
                        } else {
                            Value::Kept
                        };
                        s.entries[i] = Some((kept, end));
                        s.hold_end[i] = Some(end);
                    } else {
                        s.entries[i] = None;
                    }
                }
            }
        }
        Some(Self::canonical(s))
    }

    fn properties(&self) -> Vec<Property<Self>> {
        let mut properties = vec![
            Property::always(
                "never more holders than the slots allow",
                |m: &AcquireModel, s: &AcquireState| {
                    let holders: Vec<usize> = believers(s).map(|(p, _)| p).collect();
                    match m.kind {
                        Kind::Mutex | Kind::Election => holders.len() <= 1,
                        Kind::Semaphore(n) => holders.len() <= n as usize,
                        Kind::ReadWrite => !holders.contains(&0) || holders.len() == 1,
                    }
                },
            ),
            Property::always(
                "a min-hold release frees the key by t + hold",
                |_, s: &AcquireState| {
                    s.hold_end
                        .iter()
                        .zip(&s.entries)
                        .all(|(end, e)| end.is_none_or(|end| s.now < end || e.is_none()))
                },
            ),
            Property::sometimes(
                "a renewal is on its way to a kept lock",
                |_, s: &AcquireState| {
                    s.renewals.iter().zip(&s.hold_end).any(|(r, end)| {
                        r.as_ref().is_some_and(|r| r.reply.is_none()) && end.is_some()
                    })
                },
            ),
            Property::sometimes(
                "another process holds after a min-hold release",
                |_, s: &AcquireState| {
                    s.hold_end.iter().enumerate().any(|(p, end)| {
                        end.is_some_and(|end| {
                            believers(s).any(|(q, _)| q != p && s.acquired[q] >= end)
                        })
                    })
                },
            ),
            Property::sometimes(
                "a renewal raises a holder's validity",
                |m: &AcquireModel, s: &AcquireState| {
                    s.procs.iter().zip(&s.acquired).any(
                        |(ph, t)| matches!(ph, Phase::Holding { until, .. } if *until > t + m.life),
                    )
                },
            ),
        ];
        match self.kind {
            Kind::Election => properties.extend([
                Property::always(
                    "each win takes a term above every earlier one",
                    |_, s: &AcquireState| !s.term_backwards,
                ),
                Property::sometimes("a third term is won", |_, s: &AcquireState| s.terms >= 3),
            ]),
            Kind::Semaphore(_) => properties.push(Property::sometimes(
                "every permit is held",
                |m: &AcquireModel, s: &AcquireState| {
                    matches!(m.kind, Kind::Semaphore(n) if believers(s).count() == n as usize)
                },
            )),
            Kind::ReadWrite => properties.push(Property::sometimes(
                "two readers hold together",
                |_, s: &AcquireState| believers(s).filter(|(p, _)| *p != 0).count() == 2,
            )),
            Kind::Mutex => {}
        }
        properties
    }
}
