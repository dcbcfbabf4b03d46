//! The holder's belief about its lease under extends whose outcome is unknown: the rule every
//! backend's extend and renewal go through ([`Validity`]).

use std::time::{Duration, Instant};

use super::Lease;

/// The holder's belief about its lease, and the extends whose outcome can still change the key.
///
/// **Rule (every backend).** An extend is recorded when it is *sent*, with its bound
/// `sent + life` (`life = ttl - drift`): the server sets the new TTL no earlier than `sent`, so
/// if the extend is applied at all, the key lives at least until that bound. Until its outcome
/// is known the command may be applied at any moment (also late, after a timeout or a lost
/// reply), so on sending, the validity drops to `min(valid_until, bound)`: a shortening extend
/// with an unknown outcome never leaves a longer belief standing, and nothing but a success
/// reply raises the validity.
///
/// A success reply for extend `c` raises the validity to its bound, but no higher than
/// `max(sent_s, sent_c) + life_s` for every other extend `s` still pending (`life = ttl -
/// drift`): `s` may be applied after `c` (sent after it, or an older send *re-sent* by the
/// client: the `idempotent` retry after a dropped connection, redis-rs Cluster re-sending a
/// timed-out request), and then it is applied no earlier than `c` was sent and no earlier than
/// itself was sent, so the key lives at least that long. Sends are ordered by a sequence
/// number, not by clock readings that can be equal. A success for an extend older than the
/// newest confirmed one raises nothing.
///
/// Every extend, a confirmed one too, stays pending until the call that sent it has returned
/// (a re-send may still come) **and** its own bound has passed (a copy may still be applied
/// until then). When one is forgotten, what it says is folded into the `cap` of every extend
/// whose call still runs, so their success is still bounded by it. (Both are the model
/// checker's counterexamples to rules that forgot an extend at its answer, or at its bound:
/// `docs/model-checking.md`.) Settled extends beyond [`MAX_PENDING`] are merged, conservatively.
///
/// **Assumption:** once the call that sent an extend has returned, no copy of it is applied
/// after its own bound (`ttl` after it was sent): a copy held up longer than that (a server
/// paused with the command in its input buffer for longer than the TTL) is beyond any
/// client-side rule.
///
/// Tested by the unit tests in `guard/tests.rs`, by `redis/client/release.rs::a_resent_extend_applied_after_a_renewal_caps_validity`
/// and `renewal.rs::an_extend_with_an_unknown_outcome_never_raises_validity`, and by the
/// extend model in `crates/leasehold-model`.
#[derive(Debug)]
pub(super) struct Validity {
    pub(super) until: Instant,
    /// Extends whose outcome can still change the key (see the rule above).
    pending: Vec<PendingExtend>,
    /// The sequence number of the last extend sent.
    sent: u64,
    /// The sequence number of the newest extend confirmed (0: none).
    confirmed: u64,
}

/// How many extends [`Validity::pending`] keeps before it merges the oldest settled ones (a
/// renewer with a tiny `renew_every` sends many within one TTL).
pub(super) const MAX_PENDING: usize = 32;

/// One extend in [`Validity::pending`].
#[derive(Debug, Clone, Copy)]
struct PendingExtend {
    seq: u64,
    /// When it was recorded (before it left).
    sent: Instant,
    /// Its bound minus `sent`: how long the key lives at least once it is applied.
    life: Duration,
    /// The call that sent it has returned (with a success or not): no re-send comes any more.
    settled: bool,
    /// Kept until then once settled: its bound (or the latest bound of those merged into it).
    keep_until: Instant,
    /// What extends forgotten while this one's call ran say about the key, if applied after
    /// this one (see [`Validity`]).
    cap: Option<Instant>,
}

impl PendingExtend {
    /// The least the key lives if `self` is applied after an extend sent at `sent`.
    fn cap_after(&self, sent: Instant) -> Instant {
        self.sent.max(sent) + self.life
    }
}

impl Validity {
    /// A belief until `until`, with no extend sent yet.
    pub(super) fn new(until: Instant) -> Validity {
        Validity {
            until,
            pending: Vec::new(),
            sent: 0,
            confirmed: 0,
        }
    }

    /// How many extends are pending (for the tests).
    #[cfg(test)]
    pub(super) fn pending_len(&self) -> usize {
        self.pending.len()
    }

    /// Forgets settled extends past their bound (by the assumption above, no copy of them is
    /// applied any more), folding what each says into the caps of the extends still running.
    fn prune(&mut self, now: Instant) {
        while let Some(at) = self
            .pending
            .iter()
            .position(|p| p.settled && p.keep_until <= now)
        {
            let gone = self.pending.swap_remove(at);
            for c in self.pending.iter_mut().filter(|c| !c.settled) {
                let cap = gone.cap_after(c.sent);
                c.cap = Some(c.cap.map_or(cap, |old| old.min(cap)));
            }
        }
    }

    /// Merges settled extends while there are more than [`MAX_PENDING`]: the earlier send and
    /// the shorter life bound every cap either gave, kept until the later of their bounds. Two
    /// of the same life (a renewer's) merge first, which costs nothing; else the two oldest.
    fn compact(&mut self) {
        while self.pending.len() > MAX_PENDING {
            let mut settled: Vec<usize> = (0..self.pending.len())
                .filter(|&i| self.pending[i].settled)
                .collect();
            if settled.len() < 2 {
                return;
            }
            settled.sort_by_key(|&i| self.pending[i].seq);
            let same_life = settled.iter().enumerate().find_map(|(n, &i)| {
                settled[n + 1..]
                    .iter()
                    .find(|&&j| self.pending[j].life == self.pending[i].life)
                    .map(|&j| (i, j))
            });
            let (a, b) = same_life.unwrap_or((settled[0], settled[1]));
            let other = self.pending[b];
            let kept = &mut self.pending[a];
            kept.sent = kept.sent.min(other.sent);
            kept.life = kept.life.min(other.life);
            kept.keep_until = kept.keep_until.max(other.keep_until);
            self.pending.swap_remove(b);
        }
    }
}

/// An extend recorded as sent ([`Lease::extend_sent`]). [`SentExtend::confirm`] it with the
/// bound its success reply gives; drop it when the call returned without a success (an unknown
/// outcome or a refusal): it then stays pending until its own bound has passed (see
/// [`Validity`]), and a dropped future settles it too.
#[derive(Debug)]
#[must_use = "confirm it on success; dropping it says the call returned without one"]
pub(crate) struct SentExtend {
    lease: Lease,
    seq: u64,
    confirmed: bool,
}

impl SentExtend {
    /// The extend succeeded: the key lives until at least `bound` (its bound from
    /// [`Lease::extend_sent`], or a lower one the backend computed).
    pub(crate) fn confirm(mut self, bound: Instant) {
        self.confirmed = true;
        self.lease.extend_confirmed(self.seq, bound);
    }
}

impl Drop for SentExtend {
    fn drop(&mut self) {
        if !self.confirmed {
            self.lease.extend_settled(self.seq);
        }
    }
}

impl Lease {
    /// Records an extend about to be sent whose success would make the key live at least
    /// until `bound` (`sent + ttl - drift`, `sent` taken before the command leaves), lowering
    /// the validity to that bound (see [`Validity`]). Confirm the returned [`SentExtend`] on
    /// success; drop it otherwise.
    pub(crate) fn extend_sent(&self, sent: Instant, bound: Instant) -> SentExtend {
        let mut v = self.validity();
        v.prune(Instant::now());
        v.sent += 1;
        let seq = v.sent;
        v.pending.push(PendingExtend {
            seq,
            sent,
            life: bound.saturating_duration_since(sent),
            settled: false,
            keep_until: bound,
            cap: None,
        });
        v.compact();
        v.until = v.until.min(bound);
        SentExtend {
            lease: self.clone(),
            seq,
            confirmed: false,
        }
    }

    /// The extend `seq` succeeded with `bound`: the validity rises to the lowest of `bound`,
    /// its cap and every other pending extend's cap after it (see [`Validity`]), never falls.
    fn extend_confirmed(&self, seq: u64, bound: Instant) {
        let mut v = self.validity();
        v.prune(Instant::now());
        let Some(at) = v.pending.iter().position(|p| p.seq == seq) else {
            return;
        };
        v.pending[at].settled = true;
        if seq < v.confirmed {
            // A later extend was confirmed already: this one can raise nothing more.
            return;
        }
        let this = v.pending[at];
        let cap = v
            .pending
            .iter()
            .filter(|s| s.seq != seq)
            .map(|s| s.cap_after(this.sent))
            .chain(this.cap)
            .fold(bound, Instant::min);
        if cap > v.until {
            v.until = cap;
        }
        v.confirmed = seq;
    }

    /// The call that sent extend `seq` returned without a success: it is kept until its bound
    /// has passed (see [`Validity`]).
    fn extend_settled(&self, seq: u64) {
        let mut v = self.validity();
        if let Some(p) = v.pending.iter_mut().find(|p| p.seq == seq) {
            p.settled = true;
        }
        v.prune(Instant::now());
    }
}
