//! What each node answered, for outcomes and error messages.

use std::time::Duration;

/// What one node answered.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum NodeOutcome {
    /// It granted (or, for extend and release, confirmed) the operation.
    Granted,
    /// The key held another token (or, for extend and release, not ours any more).
    Busy {
        /// The holder's remaining TTL, when known.
        remaining: Option<Duration>,
    },
    /// No answer within the per-node timeout.
    TimedOut,
    /// Not awaited: the outcome was decided before this node answered (its operation goes on
    /// in the background).
    Pending,
    /// An error: unreachable, refused, a server error.
    Failed(String),
}

impl std::fmt::Display for NodeOutcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NodeOutcome::Granted => f.write_str("granted"),
            NodeOutcome::Busy { remaining: Some(r) } => {
                write!(f, "busy (holder's lease ends in {} ms)", r.as_millis())
            }
            NodeOutcome::Busy { remaining: None } => f.write_str("busy"),
            NodeOutcome::TimedOut => f.write_str("timed out"),
            NodeOutcome::Pending => f.write_str("no answer yet"),
            NodeOutcome::Failed(e) => write!(f, "failed: {e}"),
        }
    }
}

/// One node's outcome, named.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeReport {
    /// The node (`host:port`, credentials left out).
    pub node: String,
    /// What it answered.
    pub outcome: NodeOutcome,
}

/// The per-node outcomes of one Redlock operation, for error messages.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeReports(pub Vec<NodeReport>);

impl std::fmt::Display for NodeReports {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (i, r) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str("; ")?;
            }
            write!(f, "{}: {}", r.node, r.outcome)?;
        }
        Ok(())
    }
}
