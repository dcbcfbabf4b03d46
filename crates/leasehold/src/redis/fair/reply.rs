//! What a release or leave script did, read from its reply.

use crate::core::error::{Error, Operation, Result};
use crate::redis::waiting::Handoff;

/// What a release or leave script did.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum PassOn {
    /// The lock did not hold the token: nothing changed (a leave still left the queue).
    NotHeld,
    /// Nobody live was waiting: the lock is deleted.
    Deleted,
    /// Handed to the waiter `ticket`, with what its handoff message says, and no message
    /// published: the waiter is this client's (delivered by it), or not subscribed (its next
    /// attempt claims the lock), or notifications are off.
    HandedOff { ticket: String, handoff: Handoff },
    /// Handed to a waiter of another client, whose handoff message the script published.
    Published,
}

impl PassOn {
    pub(super) fn parse(reply: redis::Value, op: Operation) -> Result<PassOn> {
        use redis::Value::{Array, BulkString, Int};
        match reply {
            Int(0) => Ok(PassOn::NotHeld),
            Int(1) => Ok(PassOn::Deleted),
            Int(2) => Ok(PassOn::Published),
            Array(items) => match items.as_slice() {
                [
                    Int(2),
                    BulkString(ticket),
                    Int(attempt),
                    Int(fencing),
                    next @ ..,
                ] if next.len() <= 1 => {
                    let next = match next {
                        [BulkString(n)] => Some(String::from_utf8_lossy(n).into_owned()),
                        [] => None,
                        other => return Err(unexpected(op, &other)),
                    };
                    Ok(PassOn::HandedOff {
                        ticket: String::from_utf8_lossy(ticket).into_owned(),
                        handoff: Handoff {
                            attempt: *attempt as u64,
                            fencing: *fencing as u64,
                            next,
                        },
                    })
                }
                other => Err(unexpected(op, &other)),
            },
            other => Err(unexpected(op, &other)),
        }
    }
}

fn unexpected(op: Operation, reply: &dyn std::fmt::Debug) -> Error {
    Error::UnexpectedReply {
        op,
        detail: format!("{reply:?}"),
    }
}
