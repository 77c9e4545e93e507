//! A relay's book of the origin's seals: every entry and chunk digest the
//! origin sealed that reached this node, checked on the way in
//! ([`OriginCheck`]) and passed on to the forwards ([`Sealer`]).
//!
//! The book is also what makes a relay check its own bytes against the
//! origin before it forwards them: a forward reads a chunk (from staging,
//! or from the file in place), hashes it, and gets a seal only if that
//! digest is the one the origin sealed. A copy damaged on this node (or a
//! file here that merely looks the same by size and mtime) is never relayed.
//!
//! And it is what makes a relay commit downstream only what the origin
//! vouched for: a forward's confirmation of a file waits until the
//! origin's seal of the file's root arrived ([`SealBook::vouched`]), and a
//! version the origin dropped instead (it changed there while read) is
//! forgotten here, so its forwards drop it too.
//!
//! Memory: about 100 bytes per chunk of the transfer (1 MiB chunks: 100
//! bytes per MiB), freed when the transfer ends.

use std::sync::{Arc, Mutex};

use rustc_hash::FxHashMap as HashMap;

use haul_proto::seal::{chunk_sealed, entry_hash, entry_sealed, root_sealed};
use haul_proto::{Digest, Entry, OriginKey, Seal};
use haul_session::{OriginCheck, Sealer};

/// What the origin sealed of one file.
struct FileSeals {
    /// The hash of the entry as the origin offered it.
    hash: Digest,
    entry: Seal,
    /// By chunk index: the origin's digest and its seal.
    chunks: Vec<Option<(Digest, Seal)>>,
    /// The root the origin vouched for, and its seal.
    root: Option<(Digest, Seal)>,
}

/// Whether the origin vouched for a version of a file ([`SealBook::vouched`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Vouch {
    /// Its root seal is here.
    Yes,
    /// Not yet: its seals are here, its root seal is still to come.
    NotYet,
    /// Never will be: the origin dropped that version (it changed there
    /// while read), sent a newer one, or the transfer ended.
    Gone,
}

/// Wakes a reader waiting for a seal.
pub type Waker = Arc<dyn Fn() + Send + Sync>;

/// The origin's seals of one fan-out transfer, by path under its destination.
pub struct SealBook {
    origin: OriginKey,
    files: Mutex<HashMap<String, FileSeals>>,
    /// Readers of a file waiting for seals of its chunks.
    waiting: Mutex<HashMap<String, Vec<Waker>>>,
    /// Files whose bytes here turned out to differ from the origin's.
    damaged: Mutex<std::collections::BTreeSet<String>>,
}

impl std::fmt::Debug for SealBook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SealBook").finish_non_exhaustive()
    }
}

impl SealBook {
    /// An empty book for the transfer whose origin key is `origin`.
    pub fn new(origin: OriginKey) -> Self {
        Self {
            origin,
            files: Mutex::default(),
            waiting: Mutex::default(),
            damaged: Mutex::default(),
        }
    }

    /// Paths whose copy here differs from the origin's (found when they
    /// were to be relayed).
    pub fn damaged(&self) -> Vec<String> {
        self.damaged
            .lock()
            .map(|d| d.iter().cloned().collect())
            .unwrap_or_default()
    }

    /// Forgets everything (the transfer ended); readers waiting on it
    /// are woken to find their files gone.
    pub fn clear(&self) {
        if let Ok(mut files) = self.files.lock() {
            files.clear();
        }
        let waiting = self
            .waiting
            .lock()
            .map(|mut w| std::mem::take(&mut *w))
            .unwrap_or_default();
        for wake in waiting.into_values().flatten() {
            wake();
        }
    }

    /// Whether the origin vouched for the version of `path` whose entry
    /// hash is `hash`.
    pub fn vouched(&self, path: &str, hash: &Digest) -> Vouch {
        let Ok(files) = self.files.lock() else {
            return Vouch::Gone;
        };
        match files.get(path).filter(|f| f.hash == *hash) {
            Some(f) if f.root.is_some() => Vouch::Yes,
            Some(_) => Vouch::NotYet,
            None => Vouch::Gone,
        }
    }

    /// The root the origin vouched for as the whole of the version of
    /// `path` whose entry hash is `hash`, if its seal is here.
    pub fn vouched_root(&self, path: &str, hash: &Digest) -> Option<Digest> {
        let files = self.files.lock().ok()?;
        files
            .get(path)
            .filter(|f| f.hash == *hash)
            .and_then(|f| f.root)
            .map(|(root, _)| root)
    }

    /// True if the origin's seal of chunk `index` of the entry at `path`
    /// (whose hash is `hash`) is here: only then may it be relayed.
    pub fn has(&self, path: &str, hash: &Digest, index: u32) -> bool {
        let Ok(files) = self.files.lock() else {
            return false;
        };
        files
            .get(path)
            .filter(|f| f.hash == *hash)
            .and_then(|f| f.chunks.get(index as usize))
            .is_some_and(Option::is_some)
    }

    /// Calls `wake` whenever a seal of a chunk of `path` arrives.
    pub fn on_sealed(&self, path: &str, wake: Waker) {
        if let Ok(mut waiting) = self.waiting.lock() {
            waiting.entry(path.to_owned()).or_default().push(wake);
        }
    }

    fn wake(&self, path: &str) {
        let wakers = self
            .waiting
            .lock()
            .ok()
            .and_then(|w| w.get(path).cloned())
            .unwrap_or_default();
        for wake in wakers {
            wake();
        }
    }
}

impl OriginCheck for SealBook {
    fn entry(&self, entry: &Entry, hash: &Digest, seal: Option<&Seal>) -> bool {
        let Some(seal) = seal.filter(|s| entry_sealed(&self.origin, hash, s)) else {
            return false;
        };
        let mut replaced = false;
        if let Ok(mut files) = self.files.lock() {
            let same = files.get(&entry.path).is_some_and(|f| f.hash == *hash);
            if !same {
                replaced = files.contains_key(&entry.path);
                files.insert(
                    entry.path.clone(),
                    FileSeals {
                        hash: *hash,
                        entry: *seal,
                        chunks: Vec::new(),
                        root: None,
                    },
                );
            }
        }
        if replaced {
            // Forwards of the older version find it gone.
            self.wake(&entry.path);
        }
        true
    }

    fn chunk(
        &self,
        entry: &Entry,
        hash: &Digest,
        index: u32,
        digest: &Digest,
        seal: Option<&Seal>,
    ) -> bool {
        let Some(seal) = seal.filter(|s| chunk_sealed(&self.origin, hash, index, digest, s)) else {
            return false;
        };
        if let Ok(mut files) = self.files.lock() {
            if let Some(f) = files.get_mut(&entry.path).filter(|f| f.hash == *hash) {
                // The session checked `index` against the entry's chunk count.
                let i = index as usize;
                if f.chunks.len() <= i {
                    f.chunks.resize(i + 1, None);
                }
                f.chunks[i] = Some((*digest, *seal));
            }
        }
        self.wake(&entry.path);
        true
    }

    fn root(&self, entry: &Entry, hash: &Digest, root: &Digest, seal: &Seal) -> bool {
        if !root_sealed(&self.origin, hash, root, seal) {
            return false;
        }
        if let Ok(mut files) = self.files.lock() {
            if let Some(f) = files.get_mut(&entry.path).filter(|f| f.hash == *hash) {
                f.root = Some((*root, *seal));
            }
        }
        self.wake(&entry.path);
        true
    }

    /// The version's seals go (a torn read's chunk seals must not vouch
    /// for anything later), and forwards waiting on it find it gone.
    fn dropped(&self, entry: &Entry, hash: &Digest) {
        if let Ok(mut files) = self.files.lock() {
            if files.get(&entry.path).is_some_and(|f| f.hash == *hash) {
                files.remove(&entry.path);
            }
        }
        self.wake(&entry.path);
    }
}

impl Sealer for SealBook {
    fn entry(&self, entry: &Entry) -> Result<Seal, String> {
        let hash = entry_hash(entry);
        let files = self.files.lock().map_err(|_| "seal book poisoned")?;
        match files.get(&entry.path) {
            Some(f) if f.hash == hash => Ok(f.entry),
            _ => Err(format!(
                "{}: no seal of the origin for this entry here",
                entry.path
            )),
        }
    }

    fn chunk(&self, entry: &Entry, index: u32, digest: &Digest) -> Result<Seal, String> {
        let hash = entry_hash(entry);
        let files = self.files.lock().map_err(|_| "seal book poisoned")?;
        let held = files
            .get(&entry.path)
            .filter(|f| f.hash == hash)
            .and_then(|f| f.chunks.get(index as usize).copied().flatten());
        match held {
            Some((d, seal)) if d == *digest => Ok(seal),
            Some(_) => {
                if let Ok(mut damaged) = self.damaged.lock() {
                    damaged.insert(entry.path.clone());
                }
                Err(format!(
                    "chunk {index} of {} on this node differs from what the origin sent \
                 (damaged here, or changed since it was received): not relayed",
                    entry.path
                ))
            }
            None => Err(format!(
                "chunk {index} of {}: no seal of the origin here, so it is not relayed",
                entry.path
            )),
        }
    }

    fn root(&self, entry: &Entry, root: &Digest) -> Result<Seal, String> {
        let hash = entry_hash(entry);
        let files = self.files.lock().map_err(|_| "seal book poisoned")?;
        match files
            .get(&entry.path)
            .filter(|f| f.hash == hash)
            .and_then(|f| f.root)
        {
            Some((r, seal)) if r == *root => Ok(seal),
            Some(_) => Err(format!(
                "{}: the chunks relayed make another file than the one the origin vouched for: \
                 not committed",
                entry.path
            )),
            None => Err(format!(
                "{}: the origin did not vouch for this version (it changed there while it was \
                 read): not committed",
                entry.path
            )),
        }
    }

    /// A stripe relayed: the root the origin vouched for, passed on (the
    /// node that puts the file together checks its chunks make it).
    fn stripe_root(&self, entry: &Entry) -> Result<(Digest, Seal), String> {
        let hash = entry_hash(entry);
        let files = self.files.lock().map_err(|_| "seal book poisoned")?;
        files
            .get(&entry.path)
            .filter(|f| f.hash == hash)
            .and_then(|f| f.root)
            .ok_or_else(|| {
                format!(
                    "{}: the origin did not vouch for this version (it changed there while it \
                     was read): not assembled downstream",
                    entry.path
                )
            })
    }
}

#[cfg(test)]
pub(crate) mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use haul_proto::seal::Origin;
    use haul_proto::EntryKind;

    /// A file of four 1 KiB chunks.
    pub(crate) fn four_chunks() -> Entry {
        Entry {
            attrs: None,
            path: "f".into(),
            kind: EntryKind::File,
            size: 4096,
            mode: 0o644,
            mtime_sec: 1,
            mtime_nsec: 0,
            chunk_size: 1024,
        }
    }

    #[test]
    fn a_book_relays_only_what_the_origin_sealed() {
        let origin = Origin::generate().unwrap();
        let book = SealBook::new(origin.public());
        let e = four_chunks();
        let h = entry_hash(&e);
        let (d, other) = ([1u8; 32], [2u8; 32]);
        let forged = Origin::generate().unwrap();
        assert!(!OriginCheck::entry(
            &book,
            &e,
            &h,
            Some(&forged.seal_entry(&e))
        ));
        assert!(Sealer::entry(&book, &e).is_err());
        assert!(OriginCheck::entry(
            &book,
            &e,
            &h,
            Some(&origin.seal_entry(&e))
        ));
        assert_eq!(Sealer::entry(&book, &e).unwrap(), origin.seal_entry(&e));
        let s = origin.seal_chunk(&h, 2, &d);
        assert!(!OriginCheck::chunk(&book, &e, &h, 2, &other, Some(&s)));
        assert!(!OriginCheck::chunk(&book, &e, &h, 2, &d, None));
        assert!(Sealer::chunk(&book, &e, 2, &d).is_err(), "not recorded");
        assert!(OriginCheck::chunk(&book, &e, &h, 2, &d, Some(&s)));
        assert_eq!(Sealer::chunk(&book, &e, 2, &d).unwrap(), s);
        // Bytes here that hash to anything else are not relayed.
        let err = Sealer::chunk(&book, &e, 2, &other).unwrap_err();
        assert!(err.contains("differs from what the origin sent"), "{err}");
        // A newer version of the file replaces the old seals.
        let newer = Entry {
            mtime_sec: 2,
            ..e.clone()
        };
        let nh = entry_hash(&newer);
        assert!(OriginCheck::entry(
            &book,
            &newer,
            &nh,
            Some(&origin.seal_entry(&newer))
        ));
        assert!(Sealer::chunk(&book, &newer, 2, &d).is_err());
        assert!(Sealer::chunk(&book, &e, 2, &d).is_err());
    }

    #[test]
    fn a_book_vouches_only_for_the_root_the_origin_sealed() {
        let origin = Origin::generate().unwrap();
        let book = SealBook::new(origin.public());
        let e = four_chunks();
        let h = entry_hash(&e);
        let (root, other) = ([3u8; 32], [4u8; 32]);
        assert_eq!(book.vouched("f", &h), Vouch::Gone, "never offered");
        assert!(OriginCheck::entry(
            &book,
            &e,
            &h,
            Some(&origin.seal_entry(&e))
        ));
        assert_eq!(book.vouched("f", &h), Vouch::NotYet);
        assert!(Sealer::root(&book, &e, &root).is_err(), "not vouched yet");
        let forged = Origin::generate().unwrap().seal_root(&h, &root);
        assert!(!OriginCheck::root(&book, &e, &h, &root, &forged));
        assert!(!OriginCheck::root(
            &book,
            &e,
            &h,
            &root,
            &origin.seal_chunk(&h, 0, &root)
        ));
        assert_eq!(book.vouched("f", &h), Vouch::NotYet);
        let seal = origin.seal_root(&h, &root);
        assert!(OriginCheck::root(&book, &e, &h, &root, &seal));
        assert_eq!(book.vouched("f", &h), Vouch::Yes);
        assert_eq!(Sealer::root(&book, &e, &root).unwrap(), seal);
        let err = Sealer::root(&book, &e, &other).unwrap_err();
        assert!(err.contains("another file"), "{err}");
        // The origin dropped the version: gone, and its seals with it.
        OriginCheck::dropped(&book, &e, &h);
        assert_eq!(book.vouched("f", &h), Vouch::Gone);
        assert!(Sealer::root(&book, &e, &root).is_err());
        assert!(Sealer::entry(&book, &e).is_err());
    }
}
