//! # haul's transfer sessions, with no I/O
//!
//! One connection's protocol, both roles, as state machines in the manner of
//! `quinn-proto`: no tokio, no sockets, no clock, no file system. A driver
//! (`haul-node` over real transports, `haul-netsim` over simulated links)
//! feeds a session what arrived and what its I/O did, and does what the
//! session asks:
//!
//! ```text
//!            messages, chunk headers           I/O results
//!  peer ───────────────────────────▶ ┌─────────┐ ◀──────────── driver's files
//!                                     │ Session │                (sources, sinks,
//!  peer ◀─────────────────────────── └─────────┘ ────────────▶  commits)
//!            poll_transmit()            │   │      poll_io()
//!                                  poll_event() poll_timeout() / handle_timeout(now)
//! ```
//!
//! - [`Sender`] offers entries (from a pushing client's jobs, or a fetching
//!   peer's `Want`s), asks the driver to read and hash chunks, sends them, and
//!   commits each file with its whole-file BLAKE3.
//! - [`Receiver`] answers offers (after the driver prepared the file: quick
//!   check, resume state), tells the driver where each arriving chunk goes
//!   (its expected digest, so the sink verifies before it writes), and asks
//!   for commits. A pulling client's receiver also sends `Want`s.
//!
//! ## Goals
//! - Every rule of the protocol (windows, bad-chunk resend, split ranges,
//!   keepalives, refusals, resume, goodbye) exists once, here, unit-tested in
//!   simulated time.
//! - Independent of cross-file and cross-chunk order: chunks of a file may
//!   arrive in any order and after their `RangeEnd` (which carries how many
//!   chunks were sent), so a transport may put each chunk on its own stream.
//! - Drivers decide only how: threads or inline, `sendfile` or bytes, when to
//!   group commits. What happens next is decided here.
//!
//! ## Non-goals
//! - Bytes: framing is `haul-proto`'s, payloads are the driver's. A session
//!   sees chunk headers, never payloads, and never holds file data.
//! - Paths on disk: the session checks every path a peer names against the
//!   protocol's rules (so it never asks for a path outside the root), and the
//!   driver's file system code resolves it beneath its root.
//!
//! ## Time
//! Sessions take `now` in every call. [`Sender::poll_timeout`] and
//! [`Receiver::poll_timeout`] say when to call `handle_timeout`: a keepalive
//! is due while the session waits on its own I/O and has sent nothing for a
//! third of the idle limit; the peer has timed out when it was silent for
//! the idle limit while the session expected something from it (and had no
//! I/O of its own outstanding).

mod core;
pub mod groups;
pub mod peer_text;
pub mod receiver;
pub mod seals;
pub mod sender;

#[cfg(test)]
mod tests;

use std::time::Duration;

pub use groups::{FetchGroup, FetchJob, Job, RangeGroup, SendJob};
pub use haul_proto::{ChunkHeader, Digest, ErrorCode, Message};
pub use haul_run::{DryRunAction, Event, FailKind, Observer};
pub use receiver::{ChunkAction, ChunkOutcome, Prepared, Receiver, ReceiverIo, Refusal};
pub use seals::{OriginCheck, OriginPublic, Sealer};
pub use sender::{Sender, SenderIo};

/// A file's id on one connection (the wire's `id`).
pub type FileId = u32;

/// What a session asks its driver to send, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Transmit {
    /// A control message.
    Message(Message),
    /// A chunk header, followed by the payload the driver holds for
    /// (`header.id`, `header.index`) from the read it performed.
    Chunk(ChunkHeader),
}

/// Why a session ended early. The connection is closed; other connections go on.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SessionError {
    /// The peer broke the protocol.
    #[error("protocol violation by peer: {0}")]
    Protocol(String),
    /// The peer refused the connection.
    #[error("the server refused: {message}")]
    Refused {
        /// Reason class.
        code: ErrorCode,
        /// Its words.
        message: String,
    },
    /// The peer was silent for longer than the idle limit.
    #[error("timed out after {secs}s waiting for {what} (the peer stopped answering; retry, or raise --timeout)")]
    Timeout {
        /// What was awaited.
        what: &'static str,
        /// The limit.
        secs: u64,
    },
    /// A fan-out's receiver: a newer session from another upstream carries
    /// what this one did (the client routed around this one's sender), and
    /// this one's sender stayed silent.
    #[error("the upstream sender was silent for {millis} ms and a newer upstream took over")]
    Superseded {
        /// The sender's silence when the session ended.
        millis: u64,
    },
}

/// Settings shared by both roles.
#[derive(Debug, Clone)]
pub struct SessionConfig {
    /// Files in flight at most (offers, or wants, ahead of their answers).
    pub window: usize,
    /// The longest silence of a peer that is expected to speak.
    pub idle: Duration,
    /// Resends of a failing range before its file fails (sender).
    pub max_retries: u32,
    /// Chunk reads outstanding at once per connection (sender): one being
    /// sent while the next is read and hashed.
    pub reads_ahead: usize,
    /// Texts sent to the peer show paths under this prefix relative to it
    /// (a serving node never names its root).
    pub hide: Option<String>,
    /// Times a pushed file that changed while it was read is sent again
    /// from scratch before it fails (sender).
    pub changed_retries: u32,
    /// How long a file that changed is left to settle before it is sent
    /// again; the n-th time, n times this (sender).
    pub settle: Duration,
    /// A fan-out's relayed session: kept alive every beat, and the peer's
    /// silence told as it grows (`None`: keepalives only while busy, and
    /// silence only fails the session at `idle`).
    pub heartbeat: Option<Heartbeat>,
}

/// How a fan-out's relayed session watches its path: each side says
/// something at least every [`Heartbeat::every`], busy or not, so when a
/// side that expects more hears nothing for [`Heartbeat::quiet`] the path
/// itself is gone (a link cut, the peer frozen) — long before `idle`. A
/// receiver tells its observer ([`haul_run::Event::PeerQuiet`],
/// [`Receiver::tell_quiet`]) once the silence reached `quiet` and again
/// every quarter of it while it lasts; the session goes on (the node's
/// coordinator decides what the silence means).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Heartbeat {
    /// A keepalive goes out when nothing else did for this long.
    pub every: Duration,
    /// The peer's silence that is told.
    pub quiet: Duration,
}

impl Default for SessionConfig {
    fn default() -> Self {
        Self {
            window: DEFAULT_WINDOW,
            idle: Duration::from_secs(60),
            max_retries: 5,
            reads_ahead: 2,
            hide: None,
            changed_retries: 5,
            settle: Duration::from_secs(1),
            heartbeat: None,
        }
    }
}

/// What a driver feeding a session from a shared queue sees of it: a
/// pushing client's [`Sender`], a pulling client's [`Receiver`].
pub trait Windowed {
    /// True while it takes jobs (not closing).
    fn is_taking(&self) -> bool;
    /// Jobs it may take now (the window's free room).
    fn room(&self) -> usize;
    /// Groups (split files) with a range here: it never takes two of one.
    fn busy_groups(&self) -> Vec<usize>;
    /// Files open or asked for now.
    fn in_flight(&self) -> usize;
    /// No more jobs: goodbye once everything in flight is done.
    fn close_when_done(&mut self);
}

impl<S> Windowed for Sender<S> {
    fn is_taking(&self) -> bool {
        Sender::is_taking(self)
    }
    fn room(&self) -> usize {
        Sender::room(self)
    }
    fn busy_groups(&self) -> Vec<usize> {
        Sender::busy_groups(self)
    }
    fn in_flight(&self) -> usize {
        Sender::in_flight(self)
    }
    fn close_when_done(&mut self) {
        Sender::close_when_done(self)
    }
}

impl Windowed for Receiver {
    fn is_taking(&self) -> bool {
        Receiver::is_taking(self)
    }
    fn room(&self) -> usize {
        Receiver::room(self)
    }
    fn busy_groups(&self) -> Vec<usize> {
        Receiver::busy_groups(self)
    }
    fn in_flight(&self) -> usize {
        Receiver::in_flight(self)
    }
    fn close_when_done(&mut self) {
        Receiver::close_when_done(self)
    }
}

/// Files in flight per connection by default.
pub const DEFAULT_WINDOW: usize = 64;

/// Offers open at once on one receiving connection, at most.
pub const MAX_OPEN: usize = 4096;

/// How often a busy session sends a keepalive for an idle limit.
pub fn keepalive_interval(idle: Duration) -> Duration {
    (idle / 3).max(Duration::from_millis(100))
}
