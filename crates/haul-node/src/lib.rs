//! haul's nodes: the drivers that run [`haul_session`] sessions over
//! connections, and the programs built from them.
//!
//! - [`drive`]: runs a sender or receiver session over a connection and
//!   does its I/O: chunk reads and hashes, verified writes into the
//!   destination, group commits, timers. The protocol's rules are the
//!   session's; a driver decides only how.
//! - [`server`]: `haul serve`: handshake, authentication, dispatch.
//! - [`dial`]: reaching a node: a [`Dialer`] per node (network, or a
//!   [`Server`] in process), the handshake every way shares; [`jump`]: a
//!   node reached through another (`haul serve --jump-to`).
//! - [`client`]: what every client command shares ([`ClientOptions`], how
//!   a command ends); the commands: [`push`], [`pull`], [`local_copy`],
//!   `--checksum` in [`checksum`]. A pool of connections (`-j`, `--streams`,
//!   `auto`) with retries works each command's queue (`pool`).
//! - [`jobs`]: the work queues those pools share.
//! - [`buffers`]: chunk buffers under one memory budget per process.
//! - [`relay`]: fan-out on a node: tickets, the entries of a transfer, the
//!   forwards that relay them downstream.
//! - [`counters`] and [`status_routes`]: what a node counts, and the pages
//!   `haul serve --status` serves from it (`/metrics`, `/status`, `/healthz`).

mod auto_dial;
pub mod buffers;
pub mod check;
pub mod checksum;
mod chunk_work;
pub mod client;
mod console;
pub mod counters;
pub mod cutting;
pub mod dataset;
pub mod dial;
pub mod drive;
pub mod dry_run;
pub mod error;
pub mod fanout;
pub mod forging;
mod hard_links;
pub mod jobs;
pub mod jump;
mod listing;
mod listing_resume;
pub mod local_copy;
pub mod ls;
pub mod mirror;
pub mod node_at;
pub mod node_url;
pub mod path_memory;
mod pool;
pub mod pull;
mod pull_gate;
pub mod push;
pub mod relay;
mod seal_book;
pub mod server;
pub mod ssh;
pub mod status_routes;
pub mod stripe_vouch;
pub mod transfer_log;
mod walk_count;
mod welcome;

pub use buffers::ChunkBuffers;
pub use check::{check, check_local, CheckReport, CheckSide};
pub use chunk_work::ChunkWork;
pub use client::{ClientOptions, DEFAULT_WINDOW};
pub use dial::{ByAddress, Channelled, Dial, Dialer, NodePath, OverNetwork, Reach, MAX_JUMPS};
pub use dry_run::{dry_run_local, dry_run_pull, dry_run_push};
pub use error::NodeError;
pub use fanout::{push_fanout, FanoutOptions, FanoutSummary, NodeReport};
pub use haul_run::concurrency::Concurrency;
pub use haul_run::summary::DryRunReport;
pub use haul_run::summary::{self, Summary};
pub use listing::ListCursor;
pub use local_copy::copy_local;
pub use ls::{ls_local, ls_node, Listing};
pub use node_at::NodeAt;
pub use node_url::NodeUrl;
pub use pull::pull;
pub use push::push;
pub use server::{ServeOptions, Server};
pub use status_routes::NodeRoutes;
pub use transfer_log::{LogFormat, TransferLog};
