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
            return TransportError::QuicIdle {
                secs: idle.as_secs(),
            }
        }
        C::ApplicationClosed(c) => match one_line(&c.reason) {
            r if r.is_empty() => format!("the peer closed it (code {})", c.error_code),
            r => format!("the peer closed it: {r} (code {})", c.error_code),
        },
        C::ConnectionClosed(c) => match one_line(&c.reason) {
            r if r.is_empty() => format!("the peer's QUIC stack ended it: {}", c.error_code),
            r => format!("the peer's QUIC stack ended it: {}: {r}", c.error_code),
        },
        C::Reset => "the peer no longer knows it (did the node restart?)".into(),
        C::TransportError(t) => format!("QUIC error: {t}"),
        C::VersionMismatch => "the peer speaks no QUIC version this haul does".into(),
        C::CidsExhausted => "no connection IDs were left".into(),
    };
    TransportError::Lost(why)
}

/// A close reason as one short line of text: the peer chose its bytes, so
/// control and formatting characters (line breaks, bidirectional
/// overrides, zero-width ones) become spaces, and it is cut at 200
/// characters.
fn one_line(reason: &[u8]) -> String {
    let text = String::from_utf8_lossy(reason);
    let mut chars = text.chars().map(|c| {
        let hidden = matches!(c, '\u{200B}'..='\u{200F}' | '\u{2028}'..='\u{202E}' | '\u{2060}'..='\u{206F}' | '\u{FEFF}');
        if c.is_control() || hidden {
            ' '
        } else {
            c
        }
    });
    let mut line: String = chars.by_ref().take(200).collect();
    if chars.next().is_some() {
        line.push('…');
    }
    line
}

/// A chunk or control stream's read failing.
pub(super) fn read(e: &quinn::ReadError, idle: Duration) -> TransportError {
    match e {
        quinn::ReadError::ConnectionLost(c) => connection(c, idle),
        // Code 0: the peer dropped the stream, as it does when it is done.
        quinn::ReadError::Reset(code) if *code == quinn::VarInt::from_u32(0) => {
            TransportError::Closed
        }
        quinn::ReadError::Reset(code) => {
            TransportError::Lost(format!("the peer abandoned a stream (code {code})"))
        }
        quinn::ReadError::ClosedStream => TransportError::Closed,
        // This side's own use of the stream, not the peer.
        e @ (quinn::ReadError::IllegalOrderedRead | quinn::ReadError::ZeroRttRejected) => {
            TransportError::Io(io::Error::other(e.clone()))
        }
    }
}

/// A chunk or control stream's write failing.
pub(super) fn write(e: &quinn::WriteError, idle: Duration) -> TransportError {
    match e {
        quinn::WriteError::ConnectionLost(c) => connection(c, idle),
        // Code 0: the peer dropped the stream unread, as it does when it
        // is done.
        quinn::WriteError::Stopped(code) if *code == quinn::VarInt::from_u32(0) => {
            TransportError::Closed
        }
        quinn::WriteError::Stopped(code) => {
            TransportError::Lost(format!("the peer stopped a stream (code {code})"))
        }
        quinn::WriteError::ClosedStream => TransportError::Closed,
        e @ quinn::WriteError::ZeroRttRejected => TransportError::Io(io::Error::other(e.clone())),
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

#[cfg(test)]
mod tests {
    use super::one_line;

    #[test]
    fn a_close_reason_is_one_short_line() {
        assert_eq!(one_line(b"going away\nfor now"), "going away for now");
        assert_eq!(one_line("a\u{202E}b\u{200B}c".as_bytes()), "a b c");
        let long = "x".repeat(150) + &"\u{7}".repeat(60);
        assert_eq!(
            one_line(long.as_bytes()),
            "x".repeat(150) + &" ".repeat(50) + "…"
        );
        assert_eq!(one_line(&[b'a'; 200]), "a".repeat(200));
        assert_eq!(one_line(b"ok\xff"), "ok\u{FFFD}");
    }
}
