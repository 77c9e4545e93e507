//! Why a QUIC connection ended, in the words an operator needs.
//!
//! quinn's stream errors say only "connection lost"; the cause sits one
//! level down ([`quinn::ConnectionError`]) and is gone once the error is
//! turned into text. Every place the QUIC transport meets a quinn error
//! maps it here, so a node that stopped answering is a timeout (exit code
//! 30, as TCP's idle limit), an orderly close is [`TransportError::Closed`]
//! (as TCP's end of stream), and anything else says what the peer or quinn
//! said.
//!
//! The control stream is read and written through tokio's `AsyncRead` /
//! `AsyncWrite`, whose errors are `io::Error`: there the mapped error
//! travels inside the `io::Error` ([`into_io`]) and comes out again in
//! `From<io::Error> for TransportError`.

use std::io;
use std::time::Duration;

use crate::TransportError;

/// What a lost connection means for the transfer.
pub(super) fn connection(e: &quinn::ConnectionError, idle: Duration) -> TransportError {
    use quinn::ConnectionError as C;
    let why = match e {
        // The peer's end of the session (`Bye`, then a close with code 0,
        // or its connection dropped) or this side's own close.
        C::LocallyClosed => return TransportError::Closed,
        C::ApplicationClosed(c) if c.error_code == quinn::VarInt::from_u32(0) => {
            return TransportError::Closed
        }
        C::TimedOut => {
            return TransportError::Timeout {
                what: "any packet from the peer",
                secs: idle.as_secs(),
            }
        }
        C::ApplicationClosed(c) => format!("the peer closed it: {}", one_line(c)),
        C::ConnectionClosed(c) => format!("the peer's QUIC stack ended it: {}", one_line(c)),
        C::Reset => "the peer no longer knows it (did the node restart?)".into(),
        C::TransportError(t) => format!("QUIC error: {}", one_line(t)),
        C::VersionMismatch => "the peer speaks no QUIC version this haul does".into(),
        C::CidsExhausted => "no connection IDs were left".into(),
    };
    TransportError::Lost(why)
}

/// A close reason as one short line: the peer chose its bytes.
fn one_line(reason: &impl std::fmt::Display) -> String {
    let text = reason.to_string();
    let mut line: String = text.chars().filter(|c| !c.is_control()).take(200).collect();
    if line.len() < text.len() && text.chars().count() > 200 {
        line.push('…');
    }
    line
}

/// A chunk or control stream's read failing.
pub(super) fn read(e: &quinn::ReadError, idle: Duration) -> TransportError {
    match e {
        quinn::ReadError::ConnectionLost(c) => connection(c, idle),
        quinn::ReadError::Reset(code) => {
            TransportError::Lost(format!("the peer abandoned a stream (code {code})"))
        }
        // The stream's own state, not the peer: it is over.
        quinn::ReadError::ClosedStream
        | quinn::ReadError::IllegalOrderedRead
        | quinn::ReadError::ZeroRttRejected => TransportError::Closed,
    }
}

/// A chunk or control stream's write failing.
pub(super) fn write(e: &quinn::WriteError, idle: Duration) -> TransportError {
    match e {
        quinn::WriteError::ConnectionLost(c) => connection(c, idle),
        quinn::WriteError::Stopped(code) => {
            TransportError::Lost(format!("the peer stopped reading a stream (code {code})"))
        }
        quinn::WriteError::ClosedStream | quinn::WriteError::ZeroRttRejected => {
            TransportError::Closed
        }
    }
}

/// An `io::Error` from a quinn stream, with quinn's cause mapped and
/// carried inside; any other error unchanged.
pub(super) fn into_io(e: io::Error, idle: Duration) -> io::Error {
    let mapped = match e.get_ref() {
        Some(inner) => match (
            inner.downcast_ref::<quinn::ReadError>(),
            inner.downcast_ref::<quinn::WriteError>(),
        ) {
            (Some(r), _) => read(r, idle),
            (None, Some(w)) => write(w, idle),
            (None, None) => return e,
        },
        None => return e,
    };
    io::Error::new(e.kind(), mapped)
}
