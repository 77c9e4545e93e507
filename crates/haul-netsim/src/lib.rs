//! Simulated networks, with no root and no clock.
//!
//! - [`link`]: the sans-IO link model (packets in with a timestamp, out at
//!   later times, impaired as a [`Profile`] says: rate, delay, jitter, loss,
//!   burst loss, corruption, reordering, duplication). The lab runs it over
//!   real namespaces; tests run it in simulated time.
//! - [`profile`]: netem-like profiles and their names.
//! - [`stream`]: a reliable byte stream (what TCP gives a session) with a
//!   profile's one-way delay and rate.
//! - [`pair`]: a sender and a receiver session over two such streams, with
//!   in-memory files, driven in simulated time (as `quinn-proto`'s test
//!   `Pair`): a 1 s delay costs nothing but arithmetic.
//! - [`quic`]: real QUIC (quinn-proto, haul's TLS identity, the
//!   loss-tolerant controller) over simulated links in simulated time.
//! - [`fanout`]: a relay plan (chain, tree or striped trees) at piece
//!   level, nodes dying, the client's re-routing (`haul_plan::Routing`):
//!   1,000 nodes in well under a second.

#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

pub mod fanout;
pub mod heartbeat;
pub mod link;
pub mod memfs;
pub mod packet;
pub mod pair;
pub mod profile;
pub mod quic;
pub mod rng;
pub mod stats;
pub mod stream;

pub use link::Link;
pub use profile::Profile;
pub use stats::LinkStats;
