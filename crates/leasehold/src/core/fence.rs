//! What fencing hands between the lock and the protected resource, for every backend: the
//! holder's [`Fence`] and the outcomes of fenced writes and reads (Redis's `FencedStore`,
//! PostgreSQL's `postgres::FencedRows`).

use crate::core::token::LockToken;

/// What a holder presents to a fenced resource: its fencing number and its lock token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fence {
    number: u64,
    token: LockToken,
}

impl Fence {
    /// A fence from a number and the token it was issued to.
    pub fn new(number: u64, token: LockToken) -> Self {
        Fence { number, token }
    }

    /// The fencing number.
    pub fn number(&self) -> u64 {
        self.number
    }

    /// The lock token it was issued with.
    pub fn token(&self) -> &LockToken {
        &self.token
    }
}

/// The outcome of a fenced write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FencedWrite {
    /// Written; the resource now remembers this number and writer.
    Accepted,
    /// Refused: the resource has seen `highest` (greater, or equal from another holder).
    Rejected {
        /// The highest number the resource has accepted.
        highest: u64,
    },
}

impl FencedWrite {
    /// True if the write was accepted.
    pub fn is_accepted(&self) -> bool {
        matches!(self, FencedWrite::Accepted)
    }
}

/// The value a fenced resource holds and the number it was written with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FencedValue {
    /// The value.
    pub value: Vec<u8>,
    /// The fencing number of the write that stored it.
    pub fence: u64,
}

/// The outcome of a fenced read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FencedRead {
    /// The number is now the register's highest; here is the value (None if never written).
    Accepted(Option<Vec<u8>>),
    /// Refused: the register has seen `highest` (greater, or equal from another holder).
    Rejected {
        /// The highest number the register has seen.
        highest: u64,
    },
}
