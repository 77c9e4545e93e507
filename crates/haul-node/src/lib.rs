//! haul's nodes: everything that runs the protocol over connections.
//!
//! - [`sender`] and [`receiver`]: the two halves of a file transfer on one
//!   connection, independent of who connected to whom (a pushing client and a
//!   serving node are senders; a pulling client and a node receiving a push are
//!   receivers).
//! - [`server`]: `haul serve`: handshake, authentication, dispatch.
//! - [`client`]: `haul push` / `haul pull` / local copies, with a pool of
//!   connections (`-j`, `--streams`, `auto`) and retries.
//! - [`jobs`]: the work queues those pools share.

pub mod buffers;
mod chunk_work;
pub mod client;
pub mod error;
pub mod jobs;
mod keepalive;
mod peer_text;
mod pool;
pub mod receiver;
pub mod remote;
pub mod sender;
pub mod server;
pub mod summary;

pub use buffers::ChunkBuffers;
pub use chunk_work::ChunkWork;
pub use client::{copy_local, pull, push, ClientOptions, Concurrency, DEFAULT_WINDOW};
pub use error::NodeError;
pub use remote::Remote;
pub use server::{ServeOptions, Server};
pub use summary::Summary;
