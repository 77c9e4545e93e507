//! Fan-out seals: what lets every node check relayed data against the
//! origin, not just against the relay it came from.
//!
//! The client of a fan-out makes one Ed25519 key pair per transfer and
//! gives each node the public half ([`crate::Request::Admit`], over the
//! node's own authenticated control connection). It signs every entry it
//! offers and every chunk digest it sends; relays pass the seals on
//! unchanged. A node accepts a relayed entry only with a valid entry seal
//! and writes a relayed chunk only if its digest carries a valid chunk seal
//! (and its bytes hash to that digest), so a relay that alters, invents or
//! swaps data is refused by the next hop, and a chunk is never forwarded
//! before it was checked against the origin's digest.
//!
//! What is signed:
//! - entry: `"haul entry seal v1\0" ‖ blake3(entry as encoded on the wire)`;
//! - chunk: `"haul chunk seal v1\0" ‖ blake3(entry) ‖ index (u32 BE) ‖ digest`;
//! - root: `"haul root seal v1\0" ‖ blake3(entry) ‖ root`, the whole file's
//!   BLAKE3, given only after the origin confirmed that the file held still
//!   while it was read ([`crate::Message::Vouched`]). Chunk seals alone say
//!   each chunk is one the origin read; only the root seal says the chunks
//!   are one version that existed (a read torn by a writer gets none).
//!
//! The entry's wire form holds its path (relative to the transfer's
//! destination), kind, symlink target, size, mode, mtime and chunk size, so
//! a seal cannot move to another file, another version of it, or another
//! chunk; the key lives for one transfer, so seals cannot be replayed into
//! a later one.

use ring::rand::SystemRandom;
use ring::signature::{Ed25519KeyPair, KeyPair, UnparsedPublicKey, ED25519};

use crate::frame::encode_entry;
use crate::{Digest, Entry, OriginKey, Seal};

const ENTRY_DOMAIN: &[u8] = b"haul entry seal v1\0";
const CHUNK_DOMAIN: &[u8] = b"haul chunk seal v1\0";
const ROOT_DOMAIN: &[u8] = b"haul root seal v1\0";

/// The hash of an entry's wire form: what chunk seals bind to.
pub fn entry_hash(entry: &Entry) -> Digest {
    let mut bytes = Vec::with_capacity(64 + entry.path.len());
    encode_entry(entry, &mut bytes);
    *blake3::hash(&bytes).as_bytes()
}

fn entry_message(hash: &Digest) -> Vec<u8> {
    [ENTRY_DOMAIN, hash].concat()
}

fn chunk_message(hash: &Digest, index: u32, digest: &Digest) -> Vec<u8> {
    [CHUNK_DOMAIN, hash, &index.to_be_bytes(), digest].concat()
}

fn root_message(hash: &Digest, root: &Digest) -> Vec<u8> {
    [ROOT_DOMAIN, hash, root].concat()
}

/// The origin's signing key for one transfer.
pub struct Origin {
    key: Ed25519KeyPair,
}

impl std::fmt::Debug for Origin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Origin")
            .field("public", &self.public())
            .finish()
    }
}

/// The OS gave no randomness for a key.
#[derive(Debug, thiserror::Error)]
#[error("cannot make a signing key for this transfer (no randomness from the OS)")]
pub struct KeyError;

impl Origin {
    /// A fresh key pair from the OS's randomness.
    pub fn generate() -> Result<Self, KeyError> {
        let rng = SystemRandom::new();
        let pkcs8 = Ed25519KeyPair::generate_pkcs8(&rng).map_err(|_| KeyError)?;
        let key = Ed25519KeyPair::from_pkcs8(pkcs8.as_ref()).map_err(|_| KeyError)?;
        Ok(Self { key })
    }

    /// The public half, which every node of the transfer is given.
    pub fn public(&self) -> OriginKey {
        let mut k = [0u8; 32];
        k.copy_from_slice(self.key.public_key().as_ref());
        k
    }

    /// Seals `entry` (as it goes on the wire).
    pub fn seal_entry(&self, entry: &Entry) -> Seal {
        self.sign(&entry_message(&entry_hash(entry)))
    }

    /// Seals chunk `index` of `entry`, whose digest is `digest`.
    pub fn seal_chunk(&self, entry_hash: &Digest, index: u32, digest: &Digest) -> Seal {
        self.sign(&chunk_message(entry_hash, index, digest))
    }

    /// Seals the whole-file `root` of the entry whose hash is
    /// `entry_hash`: only once the file was confirmed unchanged since it
    /// was opened.
    pub fn seal_root(&self, entry_hash: &Digest, root: &Digest) -> Seal {
        self.sign(&root_message(entry_hash, root))
    }

    fn sign(&self, msg: &[u8]) -> Seal {
        let mut s = [0u8; 64];
        s.copy_from_slice(self.key.sign(msg).as_ref());
        s
    }
}

/// True if `seal` is the origin's seal of the entry whose hash is `hash`.
pub fn entry_sealed(origin: &OriginKey, hash: &Digest, seal: &Seal) -> bool {
    verify(origin, &entry_message(hash), seal)
}

/// True if `seal` is the origin's seal of chunk `index` with `digest` of
/// the entry whose hash is `hash`.
pub fn chunk_sealed(
    origin: &OriginKey,
    hash: &Digest,
    index: u32,
    digest: &Digest,
    seal: &Seal,
) -> bool {
    verify(origin, &chunk_message(hash, index, digest), seal)
}

/// True if `seal` is the origin's seal of `root` as the whole-file hash of
/// the entry whose hash is `hash`.
pub fn root_sealed(origin: &OriginKey, hash: &Digest, root: &Digest, seal: &Seal) -> bool {
    verify(origin, &root_message(hash, root), seal)
}

fn verify(origin: &OriginKey, msg: &[u8], seal: &Seal) -> bool {
    UnparsedPublicKey::new(&ED25519, origin)
        .verify(msg, seal)
        .is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::EntryKind;

    fn entry(path: &str) -> Entry {
        Entry {
            attrs: None,
            path: path.into(),
            kind: EntryKind::File,
            size: 3 << 20,
            mode: 0o644,
            mtime_sec: 1_700_000_000,
            mtime_nsec: 5,
            chunk_size: 1 << 20,
        }
    }

    #[test]
    fn seals_verify_only_what_was_sealed() {
        let origin = Origin::generate().unwrap();
        let key = origin.public();
        let e = entry("a/b");
        let h = entry_hash(&e);
        let s = origin.seal_entry(&e);
        assert!(entry_sealed(&key, &h, &s));
        // Any field of the entry changes the hash the seal covers.
        for other in [
            Entry {
                path: "a/c".into(),
                ..e.clone()
            },
            Entry {
                size: e.size + 1,
                ..e.clone()
            },
            Entry {
                mode: 0o755,
                ..e.clone()
            },
            Entry {
                mtime_nsec: 6,
                ..e.clone()
            },
            Entry {
                kind: EntryKind::Symlink { target: "x".into() },
                ..e.clone()
            },
        ] {
            assert!(!entry_sealed(&key, &entry_hash(&other), &s));
        }
        let d = [7u8; 32];
        let c = origin.seal_chunk(&h, 1, &d);
        assert!(chunk_sealed(&key, &h, 1, &d, &c));
        assert!(!chunk_sealed(&key, &h, 2, &d, &c), "another index");
        assert!(!chunk_sealed(&key, &h, 1, &[8u8; 32], &c), "another digest");
        assert!(
            !chunk_sealed(&key, &entry_hash(&entry("x")), 1, &d, &c),
            "another file"
        );
        // An entry seal is not a chunk seal, and another transfer's key fails.
        assert!(!entry_sealed(&key, &h, &c));
        let later = Origin::generate().unwrap();
        assert!(!chunk_sealed(&later.public(), &h, 1, &d, &c));
        // A root seal covers one root of one entry, and is no chunk seal.
        let r = origin.seal_root(&h, &d);
        assert!(root_sealed(&key, &h, &d, &r));
        assert!(!root_sealed(&key, &h, &[8u8; 32], &r), "another root");
        assert!(!root_sealed(&key, &entry_hash(&entry("x")), &d, &r));
        assert!(!root_sealed(&key, &h, &d, &c));
        assert!(!chunk_sealed(&key, &h, 1, &d, &r));
        let mut bent = c;
        bent[10] ^= 1;
        assert!(!chunk_sealed(&key, &h, 1, &d, &bent));
    }
}
