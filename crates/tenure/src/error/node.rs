//! What each node of a quorum answered: the per-node report carried by
//! [`Error::QuorumUnavailable`](crate::Error::QuorumUnavailable) and re-exported by
//! [`quorum`](crate::quorum).

use std::fmt;
use std::time::Duration;

use super::Error;

/// One node's answer to a quorum operation.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum NodeOutcome {
    /// The node granted (acquire), extended (extend), released (release) or
    /// answered (status).
    Granted,
    /// Another holder has the lease on this node.
    Held {
        /// That holder's remaining TTL on this node.
        ttl_left: Option<Duration>,
    },
    /// The key does not hold our token on this node (extend, release).
    NotHeld,
    /// No answer within the per-node time budget.
    TimedOut {
        /// How long tenure waited.
        after: Duration,
    },
    /// The node could not be reached (refused, reset, closed).
    Unreachable {
        /// The underlying cause.
        cause: String,
    },
    /// A key on this node holds data tenure cannot use.
    WrongType {
        /// What the node said.
        detail: String,
    },
    /// Any other error.
    Failed {
        /// What went wrong.
        cause: String,
    },
    /// The outcome was decided before this node answered; it was not waited for.
    Undecided,
}

impl NodeOutcome {
    #[cfg_attr(not(feature = "quorum"), allow(dead_code))]
    pub(crate) fn from_error(e: &Error) -> Self {
        match e {
            Error::Timeout { after, .. } => NodeOutcome::TimedOut { after: *after },
            Error::Unreachable { cause, .. } => NodeOutcome::Unreachable {
                cause: cause.to_string(),
            },
            Error::WrongType { detail, .. } => NodeOutcome::WrongType {
                detail: detail.clone(),
            },
            other => NodeOutcome::Failed {
                cause: other.to_string(),
            },
        }
    }

    /// Whether the node answered (as opposed to an error or no answer).
    pub fn answered(&self) -> bool {
        matches!(
            self,
            NodeOutcome::Granted | NodeOutcome::Held { .. } | NodeOutcome::NotHeld
        )
    }
}

impl fmt::Display for NodeOutcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NodeOutcome::Granted => f.write_str("granted"),
            NodeOutcome::Held { ttl_left: Some(t) } => {
                write!(f, "held by another holder for {t:?}")
            }
            NodeOutcome::Held { ttl_left: None } => f.write_str("held by another holder"),
            NodeOutcome::NotHeld => f.write_str("not held by us"),
            NodeOutcome::TimedOut { after } => write!(f, "timed out after {after:?}"),
            NodeOutcome::Unreachable { cause } => write!(f, "unreachable ({cause})"),
            NodeOutcome::WrongType { detail } => write!(f, "wrong type ({detail})"),
            NodeOutcome::Failed { cause } => write!(f, "failed ({cause})"),
            NodeOutcome::Undecided => f.write_str("not waited for"),
        }
    }
}

/// A node and its answer.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct NodeVote {
    /// The node, as its URL without credentials.
    pub node: String,
    /// What it answered.
    pub outcome: NodeOutcome,
}

impl NodeVote {
    #[cfg_attr(not(feature = "quorum"), allow(dead_code))]
    pub(crate) fn new(node: String, outcome: NodeOutcome) -> Self {
        NodeVote { node, outcome }
    }
}

impl fmt::Display for NodeVote {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.node, self.outcome)
    }
}

/// `a: granted, b: timed out after 100ms, …` for error messages.
pub(crate) fn list_votes(votes: &[NodeVote]) -> String {
    votes
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}
