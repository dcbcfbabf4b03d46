//! Redlock with fencing over three nodes (`crates/leasehold/src/redlock.rs`,
//! `docs/guarantees.md` sections 4-5): two clients whose majorities differ, replies lost,
//! grants that land without their reply, nodes that restart with their data (AOF) or without
//! it (keys and counter gone).
//!
//! **Time.** `now` ticks by one up to `horizon`. A lease's validity is `t0 + life` (`t0`: when
//! the attempt started, `life` = `ttl - drift`); a node keeps a key `life` ticks after it set
//! it (the drift folded in as in the other models). Each node step (a script run and its
//! reply) is one action; a step whose reply is lost is another.

use stateright::{Model, Property};

/// Number of nodes.
pub const NODES: usize = 3;
/// A majority of them.
pub const QUORUM: u32 = 2;

/// One Redis master.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Node {
    /// The lock key: holder (client) and expiry.
    pub key: Option<(u8, u8)>,
    /// The fencing counter (`fence_key`).
    pub counter: u8,
}

/// What a client is doing.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Phase {
    /// Not started (or starting over).
    Idle,
    /// Phase 1 of `Redlock::attempt`.
    Phase1 {
        /// When the attempt started.
        t0: u8,
        /// Nodes asked (bitmask).
        asked: u8,
        /// Nodes whose grant the client received (bitmask).
        granted: u8,
        /// The largest counter they returned.
        max: u8,
    },
    /// Phase 2: raising the granting nodes' counters to `number`.
    Phase2 {
        /// When the attempt started.
        t0: u8,
        /// The fencing number, `max + 1`.
        number: u8,
        /// Nodes asked.
        asked: u8,
        /// Nodes that confirmed the raise.
        raised: u8,
    },
    /// Holds the lock.
    Holding {
        /// Its validity.
        until: u8,
        /// Its fencing number.
        number: u8,
    },
    /// Finished.
    Done,
}

/// The whole system.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct RedlockState {
    /// Model time.
    pub now: u8,
    /// The nodes.
    pub nodes: [Node; NODES],
    /// The clients.
    pub clients: Vec<Phase>,
    /// Attempts each client may still start.
    pub attempts_left: Vec<u8>,
    /// Restarts left.
    pub restarts_left: u8,
    /// The number of the last holder (in the order they became holders).
    pub last_number: u8,
    /// Some holder's number was not above its predecessor's.
    pub fencing_broken: bool,
}

/// One step.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum RedlockAction {
    /// Time passes one tick; expired keys vanish.
    Tick,
    /// A client starts an attempt (`Redlock::attempt`: `t0`, a fresh token).
    Start(u8),
    /// Phase 1 on a node: mirrors `REDLOCK_ACQUIRE_LUA` (`SET NX PX`, and the counter if it
    /// was set). `bool`: the reply is lost (a grant lands unseen: a straggler).
    Acquire(u8, usize, bool),
    /// The client decides phase 1 (`granted.len() >= quorum`): on to phase 2 with
    /// `max + 1`, or gives the token back on every node (`release_raw` via `fan_out_after`).
    Decide(u8),
    /// Phase 2 on a node: mirrors `RAISE_FENCE_LUA` (raise the counter while the key holds
    /// our token). `bool`: the reply is lost (not explored: a raise not counted is the
    /// same as a node not asked).
    Raise(u8, usize, bool),
    /// The client decides phase 2: acquired if a majority confirmed within the validity,
    /// else releases everywhere.
    Finish(u8),
    /// A holder releases on every node: mirrors `Redlock::release` (`release_raw`, the
    /// token-checked delete).
    Release(u8),
    /// A node restarts. `true`: with its data (AOF, `appendfsync always`); `false`: without
    /// it (keys and fencing counter lost: the documented limit).
    Restart(usize, bool),
}

/// The Redlock model.
#[derive(Clone, Debug)]
pub struct RedlockModel {
    /// Nodes may restart without their data.
    pub restart_loses_data: bool,
    /// Phase 1 grants may land without their reply reaching the client.
    pub stragglers: bool,
    /// Restarts allowed in a run.
    pub restarts: u8,
    /// Attempts per client.
    pub attempts: u8,
    /// `ttl - drift`, in ticks.
    pub life: u8,
    /// Last tick.
    pub horizon: u8,
}

impl RedlockModel {
    /// Nodes restart with their data: 2 clients, 1 attempt each, one restart, lifetime 2,
    /// horizon 2.
    pub fn with_data() -> Self {
        RedlockModel {
            restart_loses_data: false,
            stragglers: true,
            restarts: 1,
            attempts: 1,
            life: 2,
            horizon: 2,
        }
    }

    /// A node may restart without its data.
    pub fn without_data() -> Self {
        RedlockModel {
            restart_loses_data: true,
            ..Self::with_data()
        }
    }

    /// Token-checked delete on every node (`release_raw`).
    fn release_all(s: &mut RedlockState, c: u8) {
        for n in &mut s.nodes {
            if n.key.is_some_and(|(h, _)| h == c) {
                n.key = None;
            }
        }
    }

    fn give_up(&self, s: &mut RedlockState, c: u8) {
        Self::release_all(s, c);
        s.clients[c as usize] = if s.attempts_left[c as usize] > 0 {
            Phase::Idle
        } else {
            Phase::Done
        };
    }
}

fn holders(s: &RedlockState) -> usize {
    s.clients
        .iter()
        .filter(|p| matches!(p, Phase::Holding { until, .. } if s.now < *until))
        .count()
}

impl Model for RedlockModel {
    type State = RedlockState;
    type Action = RedlockAction;

    fn init_states(&self) -> Vec<RedlockState> {
        let node = Node {
            key: None,
            counter: 0,
        };
        vec![RedlockState {
            now: 0,
            nodes: [node.clone(), node.clone(), node],
            clients: vec![Phase::Idle; 2],
            attempts_left: vec![self.attempts; 2],
            restarts_left: self.restarts,
            last_number: 0,
            fencing_broken: false,
        }]
    }

    fn actions(&self, s: &RedlockState, actions: &mut Vec<RedlockAction>) {
        if s.now < self.horizon {
            actions.push(RedlockAction::Tick);
        }
        if s.restarts_left > 0 {
            for n in 0..NODES {
                actions.push(RedlockAction::Restart(n, true));
                if self.restart_loses_data {
                    actions.push(RedlockAction::Restart(n, false));
                }
            }
        }
        for (c, p) in s.clients.iter().enumerate() {
            let c = c as u8;
            match p {
                Phase::Idle if s.attempts_left[c as usize] > 0 => {
                    actions.push(RedlockAction::Start(c))
                }
                Phase::Phase1 { asked, .. } => {
                    for n in 0..NODES {
                        if asked & (1 << n) == 0 {
                            actions.push(RedlockAction::Acquire(c, n, false));
                            if self.stragglers {
                                actions.push(RedlockAction::Acquire(c, n, true));
                            }
                        }
                    }
                    actions.push(RedlockAction::Decide(c));
                }
                Phase::Phase2 { asked, .. } => {
                    for n in 0..NODES {
                        if asked & (1 << n) == 0 {
                            actions.push(RedlockAction::Raise(c, n, false));
                        }
                    }
                    actions.push(RedlockAction::Finish(c));
                }
                Phase::Holding { .. } => actions.push(RedlockAction::Release(c)),
                _ => {}
            }
        }
    }

    fn next_state(&self, last: &RedlockState, action: RedlockAction) -> Option<RedlockState> {
        let mut s = last.clone();
        let now = s.now;
        match action {
            RedlockAction::Tick => {
                s.now += 1;
                for n in &mut s.nodes {
                    if n.key.is_some_and(|(_, e)| e <= s.now) {
                        n.key = None;
                    }
                }
            }
            RedlockAction::Restart(n, keep) => {
                s.restarts_left -= 1;
                if !keep {
                    s.nodes[n] = Node {
                        key: None,
                        counter: 0,
                    };
                }
            }
            RedlockAction::Start(c) => {
                s.attempts_left[c as usize] -= 1;
                s.clients[c as usize] = Phase::Phase1 {
                    t0: now,
                    asked: 0,
                    granted: 0,
                    max: 0,
                };
            }
            RedlockAction::Acquire(c, n, lost) => {
                let node = &mut s.nodes[n];
                let set = node.key.is_none();
                if set {
                    node.key = Some((c, now + self.life));
                }
                let counter = node.counter;
                let Phase::Phase1 {
                    asked,
                    granted,
                    max,
                    ..
                } = &mut s.clients[c as usize]
                else {
                    return None;
                };
                *asked |= 1 << n;
                if set && !lost {
                    *granted |= 1 << n;
                    *max = (*max).max(counter);
                }
            }
            RedlockAction::Decide(c) => {
                let Phase::Phase1 {
                    t0, granted, max, ..
                } = s.clients[c as usize]
                else {
                    return None;
                };
                if granted.count_ones() >= QUORUM {
                    s.clients[c as usize] = Phase::Phase2 {
                        t0,
                        number: max + 1,
                        asked: 0,
                        raised: 0,
                    };
                } else {
                    self.give_up(&mut s, c);
                }
            }
            RedlockAction::Raise(c, n, lost) => {
                let Phase::Phase2 { number, .. } = s.clients[c as usize] else {
                    return None;
                };
                let node = &mut s.nodes[n];
                let held = node.key.is_some_and(|(h, _)| h == c);
                if held {
                    node.counter = node.counter.max(number);
                }
                let Phase::Phase2 { asked, raised, .. } = &mut s.clients[c as usize] else {
                    return None;
                };
                *asked |= 1 << n;
                if held && !lost {
                    *raised |= 1 << n;
                }
            }
            RedlockAction::Finish(c) => {
                let Phase::Phase2 {
                    t0, number, raised, ..
                } = s.clients[c as usize]
                else {
                    return None;
                };
                let until = t0 + self.life;
                if raised.count_ones() >= QUORUM && now < until {
                    if number <= s.last_number {
                        s.fencing_broken = true;
                    }
                    s.last_number = number;
                    s.clients[c as usize] = Phase::Holding { until, number };
                } else {
                    self.give_up(&mut s, c);
                }
            }
            RedlockAction::Release(c) => self.give_up(&mut s, c),
        }
        Some(s)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always(
                "never two holders with valid leases",
                |_, s: &RedlockState| holders(s) <= 1,
            ),
            Property::always(
                "fencing numbers strictly increase across holders",
                |_, s: &RedlockState| !s.fencing_broken,
            ),
            Property::sometimes(
                "a later holder gets a higher number",
                |_, s: &RedlockState| s.last_number >= 2,
            ),
        ]
    }
}
