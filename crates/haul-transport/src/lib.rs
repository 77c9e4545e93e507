//! haul's transport: the message-level interface sessions are driven over
//! ([`MessageReader`], [`MessageWriter`]), and its implementations: TCP
//! sockets with TLS 1.3 and a pinned server identity, framed by
//! [`FrameReader`] / [`FrameWriter`] (with `sendfile(2)` for chunk payloads
//! on plaintext connections), and an in-memory pair.
//!
//! Nothing above this crate names a socket type (a CI check holds it so):
//! a QUIC transport implements the same interface.

pub mod activity;
pub mod choice;
pub mod conn;
pub mod error;
pub mod fault;
pub mod frames;
pub mod identity;
pub mod known_hosts;
pub mod message;
pub mod pace;
pub mod packing;
pub mod path;
pub mod quic;
pub mod socket;
mod tcp_info;
pub mod tls;

pub use activity::Activity;
pub use choice::{Choice, Decision, Meter};
pub use conn::{
    memory_pair, memory_pair_paced, stream_connection, FrameReader, FrameWriter, Timeouts,
};
pub use error::TransportError;
pub use fault::{faulty_memory_pair, Breakage, Direction, Fault, FaultPlan};
pub use frames::FrameCache;
pub use identity::{fingerprint_of, ServerIdentity};
pub use known_hosts::{KnownHosts, TrustDecision};
pub use message::{Connection, MessageReader, MessageWriter, Payload};
pub use pace::RateLimit;
pub use packing::{Packing, Unpacking};
pub use path::{Flow, PathHint, PathLearning, PathSeen};
pub use quic::{connect_quic, QuicAccepted, QuicListener};
pub use socket::{
    connect, connect_bytes, connect_through, Accepted, ByteStream, Listener, PeerKey, Security,
    Transport, Tuning,
};

/// The directory haul keeps its configuration in: `$HAUL_CONFIG_DIR`, else
/// `$XDG_CONFIG_HOME/haul` (usually `~/.config/haul`).
pub fn config_dir() -> std::path::PathBuf {
    if let Some(dir) = std::env::var_os("HAUL_CONFIG_DIR") {
        return dir.into();
    }
    dirs::config_dir()
        .unwrap_or_else(|| std::path::PathBuf::from("."))
        .join("haul")
}
