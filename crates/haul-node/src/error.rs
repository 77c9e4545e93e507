//! Errors of a node.

use haul_proto::ErrorCode;
use haul_transport::TransportError;

/// What stops a connection or a whole transfer.
#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    /// Below the protocol.
    #[error(transparent)]
    Transport(#[from] TransportError),
    /// The peer refused us.
    #[error("the server refused: {message}")]
    Refused {
        /// Reason class.
        code: ErrorCode,
        /// Its words.
        message: String,
    },
    /// The peer broke the protocol.
    #[error("protocol violation by peer: {0}")]
    Protocol(String),
    /// A fan-out's receiving session ended because a newer upstream took
    /// over from its silent sender ([`haul_session::SessionError::Superseded`]).
    #[error("{0}")]
    Superseded(String),
    /// A task of this process ended abnormally (cancelled at shutdown, or
    /// panicked): not the peer's doing.
    #[error("{0}")]
    Internal(String),
    /// A URL or path given by the user is wrong.
    #[error("{0}")]
    Usage(String),
    /// Local filesystem trouble outside any single file.
    #[error(transparent)]
    Receive(#[from] haul_engine::ReceiveError),
}

impl From<haul_session::SessionError> for NodeError {
    fn from(e: haul_session::SessionError) -> Self {
        match e {
            haul_session::SessionError::Protocol(text) => Self::Protocol(text),
            haul_session::SessionError::Refused { code, message } => {
                Self::Refused { code, message }
            }
            haul_session::SessionError::Timeout { what, secs } => {
                Self::Transport(TransportError::Timeout { what, secs })
            }
            e @ haul_session::SessionError::Superseded { .. } => Self::Superseded(e.to_string()),
        }
    }
}

impl NodeError {
    /// What kind of failure it is for the entries it stopped: the node
    /// stopped answering, or could not be reached at all.
    pub fn fail_kind(&self) -> haul_run::FailKind {
        match self {
            Self::Transport(t) if t.is_timeout() => haul_run::FailKind::Timeout,
            Self::Transport(
                TransportError::Connect { .. }
                | TransportError::Resolve { .. }
                | TransportError::Unanswered { .. },
            ) => haul_run::FailKind::Unreachable,
            _ => haul_run::FailKind::Error,
        }
    }

    /// The connection ended because `--transport auto` chose the other
    /// transport (its work given back): dial again, over that one.
    pub fn is_other_transport(&self) -> bool {
        matches!(self, Self::Transport(TransportError::Superseded))
    }

    /// True when retrying cannot help (wrong token, changed key, bad usage).
    pub fn is_permanent(&self) -> bool {
        matches!(
            self,
            Self::Refused { .. }
                | Self::Usage(_)
                | Self::Transport(TransportError::KeyChanged { .. })
                | Self::Transport(TransportError::Tls { .. })
        )
    }
}
