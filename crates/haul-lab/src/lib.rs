//! haul lab: a userspace network emulator (netem without the kernel module)
//! for reproducible link experiments.
//!
//! A lab is K hosts, each a network namespace with one TUN interface
//! (`eth0`, 198.18.0.i/24), joined by a userspace switch that applies a
//! link [`Profile`] per host and per direction: rate,
//! delay with jitter, random and burst loss, corruption, reordering and
//! duplication, with netem's meaning and a seeded generator.
//!
//! * [`link`] is the sans-IO impairment model (no sockets, no clocks) and
//!   [`profile`] parses netem-like profiles and names: both from `haul-netsim`;
//! * [`Lab`] is the Rust API for tests (a guard that tears down on drop);
//! * [`cli`] is `haul lab up|exec|set|link|stats|down`.

#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

pub mod cli;
mod control;
mod engine;
mod error;
pub mod lab;
mod netns;
mod state;
pub mod stats;
mod sys;

/// The sans-IO link model, profiles and generator live in `haul-netsim`
/// (no root needed), shared with the simulated-time tests.
pub use haul_netsim::{link, packet, profile, rng};

pub use error::LabError;
pub use lab::{Dir, Host, Lab, LabBuilder};
pub use link::Link;
pub use profile::Profile;
pub use stats::{HostStats, LabStats, LinkStats};
