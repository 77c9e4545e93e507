//! haul's transport: TCP sockets, TLS 1.3 with a pinned server identity, and
//! the framed connection the protocol runs over (with `sendfile(2)` for
//! chunk payloads on plaintext connections).
//!
//! A QUIC or relay transport later provides the same [`FrameReader`] /
//! [`FrameWriter`] pair; nothing above this crate knows about sockets.

pub mod conn;
pub mod error;
pub mod identity;
pub mod known_hosts;
pub mod socket;
pub mod tls;

pub use conn::{memory_pair, FrameReader, FrameWriter, Timeouts};
pub use error::TransportError;
pub use identity::{fingerprint_of, ServerIdentity};
pub use known_hosts::{KnownHosts, TrustDecision};
pub use socket::{accept_stream, connect, Listener, PeerKey, Security};

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
