//! Transport errors, each saying what to do next.

use std::io;

/// What can go wrong below the protocol.
#[derive(Debug, thiserror::Error)]
pub enum TransportError {
    /// Could not reach the peer in time.
    #[error(
        "cannot connect to {addr}: {source} (is `haul serve` running there, and the port open?)"
    )]
    Connect {
        /// Address tried.
        addr: String,
        /// Underlying error.
        source: io::Error,
    },
    /// The host name did not resolve.
    #[error("cannot resolve {addr}: {source} (check the host name)")]
    Resolve {
        /// host:port given.
        addr: String,
        /// Underlying error.
        source: io::Error,
    },
    /// Nothing answered a connection attempt at all within the connect
    /// timeout: no retry mends that (the host is down, the address wrong,
    /// or a firewall drops the packets).
    #[error("no answer from {addr} within {secs}s to {what}: {hint}")]
    Unanswered {
        /// Address tried.
        addr: String,
        /// What went unanswered.
        what: &'static str,
        /// The limit (`--connect-timeout`).
        secs: u64,
        /// What to check.
        hint: &'static str,
    },
    /// A wait ran past its limit.
    #[error("timed out after {secs}s waiting for {what} (the peer stopped answering; retry, or raise --timeout)")]
    Timeout {
        /// What was awaited.
        what: &'static str,
        /// The limit.
        secs: u64,
    },
    /// The server presented a key other than the pinned one.
    #[error("the server at {host} presented key {got}, but {expected} is pinned for it{hint}. This may be an attack. If the server's key was replaced on purpose, {}pass --fingerprint {got}", if file.is_empty() { String::new() } else { format!("remove its line from {file} or ") })]
    KeyChanged {
        /// host:port.
        host: String,
        /// Fingerprint seen.
        got: String,
        /// Fingerprint expected.
        expected: String,
        /// Where the pin came from.
        hint: String,
        /// The known-hosts file holding the pin (empty when the pin came
        /// from `--fingerprint`).
        file: String,
    },
    /// TLS failed for another reason.
    #[error("TLS handshake with {host} failed: {source} (does the server run with --plaintext? then pass --plaintext too)")]
    Tls {
        /// host:port.
        host: String,
        /// Underlying error.
        source: io::Error,
    },
    /// The peer sent bytes that are not the protocol.
    #[error("protocol error from peer: {0}")]
    Decode(#[from] haul_proto::DecodeError),
    /// QUIC was asked for with `--plaintext`.
    #[error("--plaintext has no QUIC form (QUIC always encrypts, with TLS 1.3 inside): drop --plaintext, or use --transport tcp")]
    NoPlaintextQuic,
    /// The peer closed the connection.
    #[error("the peer closed the connection")]
    Closed,
    /// `--transport auto` chose the other transport: this connection gives
    /// its work back ([`crate::choice`]).
    #[error("the connection ended: --transport auto chose the other transport")]
    Superseded,
    /// A chunk payload longer than allowed.
    #[error("peer announced a {0}-byte chunk, above the limit")]
    ChunkTooLarge(u32),
    /// Identity or config files could not be read or written.
    #[error("{what} {path}: {source}")]
    File {
        /// What was being done.
        what: &'static str,
        /// Path concerned.
        path: String,
        /// Underlying error.
        source: io::Error,
    },
    /// The node could not listen on its address.
    #[error(
        "cannot listen on {addr}: {source} (is another program using it? pick another --listen)"
    )]
    Listen {
        /// Address asked for.
        addr: String,
        /// Underlying error.
        source: io::Error,
    },
    /// Nothing came from the peer for the QUIC connection's idle limit:
    /// the smaller of both sides' `--timeout`, which this side cannot see.
    #[error("no packet from the peer within the QUIC idle limit (the smaller of both sides' --timeout; {secs}s here): the node stopped, or the path went down (retry, or raise --timeout on both sides)")]
    QuicIdle {
        /// This side's idle limit.
        secs: u64,
    },
    /// The QUIC connection ended under the transfer; the text says how.
    #[error("the QUIC connection was lost: {0}")]
    Lost(String),
    /// Any other I/O error on the connection.
    #[error("connection error: {0}")]
    Io(#[source] io::Error),
}

impl TransportError {
    /// The peer stopped answering: a wait ran past its limit, or QUIC's
    /// idle timer did.
    pub fn is_timeout(&self) -> bool {
        matches!(self, Self::Timeout { .. } | Self::QuicIdle { .. })
    }
}

impl From<io::Error> for TransportError {
    /// An I/O error, or a transport error that travelled inside one (the
    /// QUIC control stream's, `quic::lost`) taken out again.
    fn from(e: io::Error) -> Self {
        if !e
            .get_ref()
            .is_some_and(|inner| inner.is::<TransportError>())
        {
            return Self::Io(e);
        }
        let kind = e.kind();
        match e
            .into_inner()
            .map(|inner| inner.downcast::<TransportError>())
        {
            Some(Ok(carried)) => *carried,
            Some(Err(other)) => Self::Io(io::Error::new(kind, other)),
            None => Self::Io(kind.into()),
        }
    }
}
