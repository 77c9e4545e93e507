//! Fan-out seals in the sessions (the scheme is `haul_proto::seal`'s).
//!
//! A fan-out's sender seals what it offers and sends ([`Sealer`]): the
//! client signs with the transfer's key, a relay passes on the seals it
//! received. A fan-out's receiver checks them ([`OriginCheck`]) before it
//! prepares an entry or writes a chunk; a relay's check also remembers them,
//! to pass them on.

use haul_proto::seal::{chunk_sealed, entry_hash, entry_sealed, root_sealed, Origin};
use haul_proto::{Digest, Entry, OriginKey, Seal};

/// In a `Sealed` message, the seal of a chunk the sender could not seal
/// (its copy differs from the origin's): never checked, never relayed.
pub const NO_SEAL: Seal = [0; 64];

/// Seals what a sender offers and sends.
pub trait Sealer: Send + Sync + std::fmt::Debug {
    /// The seal of `entry`, as offered.
    fn entry(&self, entry: &Entry) -> Result<Seal, String>;
    /// The seal of chunk `index` of `entry`, whose bytes read here hash to
    /// `digest`. An error (a relay's copy that differs from the origin's)
    /// fails the file on this connection: it is never sent unsealed.
    fn chunk(&self, entry: &Entry, index: u32, digest: &Digest) -> Result<Seal, String>;
    /// The origin's seal of `root` as the whole-file hash of `entry`, asked
    /// only once the source confirmed what was read is one version (for a
    /// relay: the origin's own seal of that root reached it). An error (no
    /// such seal, or one of another root) fails the file on this
    /// connection: it is never committed downstream unvouched.
    fn root(&self, entry: &Entry, root: &Digest) -> Result<Seal, String>;
    /// Striped fan-out: the root of the whole of `entry`, of which this
    /// sender sent one stripe, and the origin's seal of it. Asked once the
    /// source confirmed the stripe (for the origin: once every stripe of
    /// the file was confirmed as one version; for a relay: once the
    /// origin's seal of that root reached it). An error fails the stripe on
    /// this connection: the receiver never assembles the file unvouched.
    fn stripe_root(&self, entry: &Entry) -> Result<(Digest, Seal), String> {
        Err(format!(
            "{}: nothing here vouches for the whole of a striped file",
            entry.path
        ))
    }
}

impl Sealer for Origin {
    fn entry(&self, entry: &Entry) -> Result<Seal, String> {
        Ok(self.seal_entry(entry))
    }

    fn chunk(&self, entry: &Entry, index: u32, digest: &Digest) -> Result<Seal, String> {
        Ok(self.seal_chunk(&entry_hash(entry), index, digest))
    }

    fn root(&self, entry: &Entry, root: &Digest) -> Result<Seal, String> {
        Ok(self.seal_root(&entry_hash(entry), root))
    }
}

/// Checks seals against a transfer's origin.
pub trait OriginCheck: Send + Sync + std::fmt::Debug {
    /// True if `seal` is the origin's seal of `entry` (its wire form, whose
    /// hash is `hash`).
    fn entry(&self, entry: &Entry, hash: &Digest, seal: Option<&Seal>) -> bool;
    /// True if `seal` is the origin's seal of chunk `index` of that entry
    /// with `digest`.
    fn chunk(
        &self,
        entry: &Entry,
        hash: &Digest,
        index: u32,
        digest: &Digest,
        seal: Option<&Seal>,
    ) -> bool;
    /// True if `seal` is the origin's seal of `root` as the whole-file hash
    /// of that entry (a relay's check also remembers it: its forwards
    /// commit downstream only then).
    fn root(&self, entry: &Entry, hash: &Digest, root: &Digest, seal: &Seal) -> bool;
    /// The sender dropped that version of the entry on this connection
    /// (it changed at the origin while read, or failed upstream): a relay
    /// forgets its seals, and its forwards fail it downstream.
    fn dropped(&self, _entry: &Entry, _hash: &Digest) {}
}

/// The plain check: the origin's public key, remembering nothing.
#[derive(Debug, Clone, Copy)]
pub struct OriginPublic(pub OriginKey);

impl OriginCheck for OriginPublic {
    fn entry(&self, _entry: &Entry, hash: &Digest, seal: Option<&Seal>) -> bool {
        seal.is_some_and(|s| entry_sealed(&self.0, hash, s))
    }

    fn chunk(
        &self,
        _entry: &Entry,
        hash: &Digest,
        index: u32,
        digest: &Digest,
        seal: Option<&Seal>,
    ) -> bool {
        seal.is_some_and(|s| chunk_sealed(&self.0, hash, index, digest, s))
    }

    fn root(&self, _entry: &Entry, hash: &Digest, root: &Digest, seal: &Seal) -> bool {
        root_sealed(&self.0, hash, root, seal)
    }
}
