//! What a receiving session tells the relay it feeds. A node receiving a
//! fan-out's entries hands each to its relay (`crate::relay::Transfer`,
//! which forwards them downstream); the receive driver knows only this
//! hook, so the drivers sit below the relays and a test can stand in for
//! one.

use std::sync::Arc;

use haul_engine::PartialFile;
use haul_proto::{Digest, Entry};

use crate::seal_book::SealBook;

/// Whether a received file can be committed now ([`RelayHook::assemble`]).
#[derive(Debug)]
pub enum Assembly {
    /// Every chunk is here and sealed: commit with this whole-file hash.
    Complete(Digest),
    /// Chunks are still to come, or another session commits it.
    Later,
    /// A chunk here differs from what the origin sealed.
    Damaged(String),
}

/// The relay side of a receiving session in a fan-out.
pub trait RelayHook: Send + Sync {
    /// The origin's seals: only what they cover is taken (and relayed).
    fn seals(&self) -> Arc<SealBook>;

    /// `entry` was made here, or is being received into `staging`: it can
    /// be forwarded from now on.
    fn offered(&self, entry: &Entry, staging: Option<&Arc<PartialFile>>);

    /// Whether the file staged in `part` is complete and sealed here (one
    /// session of a striped transfer is told to commit it).
    fn assemble(&self, part: &Arc<PartialFile>) -> Assembly;

    /// A striped transfer: a session's unfinished files are kept for the
    /// other stripes.
    fn is_striped(&self) -> bool;

    /// Changes whenever another upstream session of the transfer starts
    /// (then ask [`Self::superseded`]); `None`: never.
    fn newer_upstreams(&self) -> Option<tokio::sync::watch::Receiver<u64>> {
        None
    }

    /// A newer upstream session carries what this one does: the client
    /// routed around this one's sender, and this session ends as soon as
    /// that sender is silent ([`SUPERSEDED_QUIET`]).
    fn superseded(&self) -> bool {
        false
    }
}

/// How long the sender of a superseded session may stay silent before the
/// session ends (a live sender keeps alive well within it; a silent one
/// would hold its files' staging from the newer session).
pub const SUPERSEDED_QUIET: std::time::Duration = std::time::Duration::from_secs(2);
