//! The origin of a striped fan-out vouches for each striped file's root.
//!
//! In a striped plan no sender reads a large file whole: the client's send
//! of each stripe reads its own chunk range, and each node puts the file
//! together from the stripes that reach it over several sessions. Chunk
//! seals alone would let a node commit a read torn at the origin (a stripe
//! read before a writer changed the file, another after). So the client's
//! stripe sends share one [`StripeVouchers`]: it is their [`Sealer`] (it
//! seals with the transfer's key and notes every chunk digest it seals),
//! and each stripe's source ([`StripeSource`]) confirms its range through
//! it: a stripe confirmed unchanged waits ([`Confirmation::Pending`]) until
//! every stripe of the file was confirmed at the same identity (device,
//! inode, size, mtime, ctime: no change between the first open and the last
//! check), then each stripe's sender sends `Vouched` for the root the
//! digests give (merged up BLAKE3's tree, as a whole file's). A stripe that
//! changed, or one opened at another identity, drops the version: every
//! stripe's confirmation fails and nothing of it is assembled anywhere. The
//! wait is bounded by each sending session's deadline (the idle limit).
//! The root vouched for, and the digests it is made of, become the file's
//! content-hash record (`haul_engine::hash_cache::fill_later`) when the
//! vouchers are dropped — every stripe send over, so the ctime the record
//! moves can fail no stripe's confirmation —, as a read of the whole file
//! would keep it: no stripe's send reads it whole.

use rustc_hash::FxHashMap as HashMap;
use std::fs::File;
use std::io;
use std::sync::{Arc, Mutex};

use haul_engine::chunks::LocalFile;
use haul_engine::{ChunkSource, Confirmation};
use haul_proto::digest::root_from_digests;
use haul_proto::seal::{entry_hash, Origin};
use haul_proto::{Digest, Entry, Seal};
use haul_root::FileIdentity;
use haul_session::Sealer;

/// Wakes a stripe's sender waiting for the other stripes.
type Waker = Arc<dyn Fn() + Send + Sync>;

/// What the origin knows of one striped file (one version: its entry hash).
#[derive(Default)]
struct Pooled {
    hash: Digest,
    /// By chunk index: the digest sealed.
    digests: Vec<Option<Digest>>,
    /// Ranges confirmed unchanged, at `identity`.
    confirmed: Vec<(u32, u32)>,
    identity: Option<FileIdentity>,
    /// The version changed while a stripe was read: never vouched for.
    dropped: bool,
    wakers: Vec<Waker>,
    /// The file (a descriptor of it) and its root once every stripe was
    /// confirmed: kept as its content-hash record when the transfer's
    /// sends are over (see [`StripeVouchers`]'s `Drop`).
    record: Option<(File, FileIdentity, Digest, u32)>,
}

impl Pooled {
    /// Every chunk confirmed by a stripe, and its digest sealed.
    fn root(&self, entry: &Entry) -> Option<Digest> {
        let count = entry.chunk_count();
        let covered = (0..count).all(|i| self.confirmed.iter().any(|(a, b)| (*a..*b).contains(&i)));
        if self.dropped || !covered {
            return None;
        }
        let all: Option<Vec<Digest>> = (0..count as usize)
            .map(|i| self.digests.get(i).copied().flatten())
            .collect();
        root_from_digests(&all?, entry.chunk_size, entry.size)
    }
}

/// The client's seals in a striped fan-out, shared by its stripe sends (see
/// the module docs).
pub struct StripeVouchers {
    origin: Arc<Origin>,
    files: Mutex<HashMap<String, Pooled>>,
}

impl std::fmt::Debug for StripeVouchers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StripeVouchers").finish_non_exhaustive()
    }
}

impl StripeVouchers {
    /// Seals with `origin`, the transfer's key.
    pub fn new(origin: Arc<Origin>) -> Arc<Self> {
        Arc::new(Self {
            origin,
            files: Mutex::default(),
        })
    }

    /// Runs `f` on the pool of `entry`'s file, then wakes the stripes
    /// waiting on it if `f` says so. Stripes that describe two versions
    /// (the file changed between the walks of two stripe sends) drop it:
    /// neither is vouched for.
    fn with<T>(&self, entry: &Entry, f: impl FnOnce(&mut Pooled) -> (T, bool)) -> Option<T> {
        let hash = entry_hash(entry);
        let (out, wakers) = {
            let mut files = self.files.lock().ok()?;
            let pooled = files.entry(entry.path.clone()).or_insert_with(|| Pooled {
                hash,
                ..Pooled::default()
            });
            let conflict = pooled.hash != hash && !pooled.dropped;
            if pooled.hash != hash {
                pooled.dropped = true;
            }
            let (out, wake) = f(pooled);
            let wakers = if wake || conflict {
                pooled.wakers.clone()
            } else {
                Vec::new()
            };
            (out, wakers)
        };
        for w in wakers {
            w();
        }
        Some(out)
    }

    /// Stripe `first..end` of `entry` was confirmed unchanged since it was
    /// opened at `identity`: unchanged once every stripe of the file was, at
    /// that identity; pending until then; changed if the file did.
    fn confirmed(
        &self,
        entry: &Entry,
        first: u32,
        end: u32,
        identity: FileIdentity,
        file: Option<&File>,
    ) -> Confirmation {
        // Stripes opened on either side of a content-hash record being set
        // on the file differ in their ctime alone, and are one version.
        let same = |a: FileIdentity, b: FileIdentity| {
            a == b
                || file.is_some_and(|f| {
                    haul_engine::hash_cache::explains(f, &a, &b)
                        || haul_engine::hash_cache::explains(f, &b, &a)
                })
        };
        let answer = self.with(entry, |p| {
            if p.dropped {
                return (Err(()), false);
            }
            if p.identity.is_some_and(|i| !same(i, identity)) {
                p.dropped = true;
                return (Err(()), true);
            }
            p.identity = Some(identity);
            if !p.confirmed.contains(&(first, end)) {
                p.confirmed.push((first, end));
            }
            let root = p.root(entry);
            if let (Some(root), None, Some(file)) = (root, &p.record, file) {
                // One version, every chunk of it verified by the node it
                // went to against these digests: the file's record, as a
                // whole file's read would keep it — once no stripe is left
                // to confirm (setting it moves the file's ctime).
                if let Ok(file) = file.try_clone() {
                    p.record = Some((file, identity, root, entry.chunk_size));
                }
            }
            let done = root.is_some();
            (Ok(done), done)
        });
        match answer {
            Some(Ok(true)) => Confirmation::Unchanged,
            Some(Ok(false)) => Confirmation::Pending,
            Some(Err(())) | None => Confirmation::Changed(
                "it changed while its stripes were read (the stripes are not one version)".into(),
            ),
        }
    }

    /// A stripe of `entry` changed while it was read: no stripe of that
    /// version is vouched for.
    fn dropped(&self, entry: &Entry) {
        self.with(entry, |p| {
            p.dropped = true;
            ((), true)
        });
    }

    /// Calls `wake` when the stripes of `entry` are all in, or dropped.
    fn on_settled(&self, entry: &Entry, wake: Waker) {
        self.with(entry, |p| {
            p.wakers.push(wake);
            ((), false)
        });
    }
}

/// When every stripe send of the transfer is over (each held an `Arc`):
/// the files vouched for keep their records.
impl Drop for StripeVouchers {
    fn drop(&mut self) {
        let Ok(files) = self.files.get_mut() else {
            return;
        };
        for (_, p) in files.drain() {
            if p.dropped {
                continue;
            }
            if let Some((file, identity, root, chunk_size)) = p.record {
                let digests: Vec<Digest> = p.digests.into_iter().flatten().collect();
                haul_engine::hash_cache::fill_later(&file, &identity, chunk_size, root, digests);
            }
        }
    }
}

impl Sealer for StripeVouchers {
    fn entry(&self, entry: &Entry) -> Result<Seal, String> {
        Ok(self.origin.seal_entry(entry))
    }

    /// Seals, and notes the digest: the root is made of them.
    fn chunk(&self, entry: &Entry, index: u32, digest: &Digest) -> Result<Seal, String> {
        if entry.chunk_count() > 1 {
            self.with(entry, |p| {
                let i = index as usize;
                if i < entry.chunk_count() as usize {
                    if p.digests.len() <= i {
                        p.digests.resize(i + 1, None);
                    }
                    p.digests[i] = Some(*digest);
                }
                // A stripe moved: the others waiting for it count their
                // deadline again (a large file's stripes may end minutes
                // apart on uneven links).
                ((), true)
            });
        }
        Ok(self.origin.seal_chunk(&entry_hash(entry), index, digest))
    }

    fn root(&self, entry: &Entry, root: &Digest) -> Result<Seal, String> {
        Ok(self.origin.seal_root(&entry_hash(entry), root))
    }

    fn stripe_root(&self, entry: &Entry) -> Result<(Digest, Seal), String> {
        let root = self
            .with(entry, |p| (p.root(entry), false))
            .flatten()
            .ok_or_else(|| {
                format!(
                    "{}: its stripes were not all read as one version: not vouched for",
                    entry.path
                )
            })?;
        Ok((root, self.origin.seal_root(&entry_hash(entry), &root)))
    }
}

/// A stripe of a local file sent by the client of a striped fan-out: its
/// confirmation waits for the file's other stripes ([`StripeVouchers`]).
#[derive(Debug)]
pub struct StripeSource {
    file: LocalFile,
    vouchers: Arc<StripeVouchers>,
    entry: Entry,
    first: u32,
    end: u32,
}

impl StripeSource {
    /// Chunks `first..end` of `entry`, read from `file`.
    pub fn new(
        file: LocalFile,
        vouchers: Arc<StripeVouchers>,
        entry: Entry,
        first: u32,
        end: u32,
    ) -> Self {
        Self {
            file,
            vouchers,
            entry,
            first,
            end,
        }
    }
}

impl ChunkSource for StripeSource {
    fn read_chunk(
        &self,
        entry: &Entry,
        index: u32,
        buf: &mut Vec<u8>,
        keep: bool,
    ) -> io::Result<haul_engine::ChunkRead> {
        self.file.read_chunk(entry, index, buf, keep)
    }

    fn hash_chunk(&self, entry: &Entry, index: u32, buf: &mut Vec<u8>) -> io::Result<Digest> {
        self.file.hash_chunk(entry, index, buf)
    }

    fn file(&self) -> Option<&File> {
        self.file.file()
    }

    fn on_ready(&self, wake: Arc<dyn Fn() + Send + Sync>) {
        self.vouchers.on_settled(&self.entry, wake);
    }

    fn confirm(&self) -> Confirmation {
        match self.file.confirm() {
            Confirmation::Unchanged => self.vouchers.confirmed(
                &self.entry,
                self.first,
                self.end,
                *self.file.identity(),
                self.file.file(),
            ),
            other => {
                self.vouchers.dropped(&self.entry);
                other
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::seal_book::tests::four_chunks;
    use haul_proto::seal::root_sealed;

    fn identity(ctime: i64) -> FileIdentity {
        FileIdentity {
            dev: 1,
            ino: 2,
            size: 4096,
            mtime: (1, 0),
            ctime: (ctime, 0),
        }
    }

    /// Two stripes of four chunks: each stripe's chunks sealed, then its
    /// range confirmed at `ids[s]`; what each confirmation answered.
    fn two_stripes(v: &StripeVouchers, ids: [FileIdentity; 2]) -> Vec<Confirmation> {
        let e = four_chunks();
        let mut answers = Vec::new();
        for (s, (first, end)) in [(0u32, 2u32), (2, 4)].into_iter().enumerate() {
            for i in first..end {
                Sealer::chunk(v, &e, i, &[i as u8; 32]).unwrap();
            }
            answers.push(v.confirmed(&e, first, end, ids[s], None));
        }
        answers
    }

    #[test]
    fn the_origin_vouches_for_a_striped_file_only_once_every_stripe_held_still_as_one_version() {
        let origin = Arc::new(Origin::generate().unwrap());
        let key = origin.public();
        let e = four_chunks();
        let hash = entry_hash(&e);
        let digests: Vec<Digest> = (0..4).map(|i| [i as u8; 32]).collect();
        let root = root_from_digests(&digests, 1024, 4096).unwrap();

        // One version: the first stripe waits for the second, then both may
        // vouch for the root of all four digests.
        let v = StripeVouchers::new(origin.clone());
        let woken = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let w = woken.clone();
        v.on_settled(
            &e,
            Arc::new(move || w.store(true, std::sync::atomic::Ordering::SeqCst)),
        );
        assert!(v.stripe_root(&e).is_err(), "nothing confirmed yet");
        let answers = two_stripes(&v, [identity(5), identity(5)]);
        assert_eq!(answers, [Confirmation::Pending, Confirmation::Unchanged]);
        assert!(woken.load(std::sync::atomic::Ordering::SeqCst));
        assert_eq!(
            v.confirmed(&e, 0, 2, identity(5), None),
            Confirmation::Unchanged
        );
        let (r, seal) = v.stripe_root(&e).unwrap();
        assert_eq!(r, root);
        assert!(root_sealed(&key, &hash, &root, &seal));

        // Each stripe held still, but not the same version (the file changed
        // between the two reads): never vouched for.
        let v = StripeVouchers::new(origin.clone());
        let answers = two_stripes(&v, [identity(5), identity(6)]);
        assert_eq!(answers[0], Confirmation::Pending);
        assert!(matches!(answers[1], Confirmation::Changed(_)));
        assert!(matches!(
            v.confirmed(&e, 0, 2, identity(5), None),
            Confirmation::Changed(_)
        ));
        assert!(v.stripe_root(&e).is_err());

        // A stripe that changed while read drops the version for all.
        let v = StripeVouchers::new(origin.clone());
        for i in 0..4 {
            Sealer::chunk(&*v, &e, i, &[i as u8; 32]).unwrap();
        }
        assert_eq!(
            v.confirmed(&e, 0, 2, identity(5), None),
            Confirmation::Pending
        );
        v.dropped(&e);
        assert!(matches!(
            v.confirmed(&e, 2, 4, identity(5), None),
            Confirmation::Changed(_)
        ));
        assert!(v.stripe_root(&e).is_err());

        // Two walks that saw two versions of the entry: neither is vouched for.
        let v = StripeVouchers::new(origin);
        let newer = Entry {
            mtime_sec: 2,
            ..e.clone()
        };
        assert_eq!(
            v.confirmed(&e, 0, 2, identity(5), None),
            Confirmation::Pending
        );
        assert!(matches!(
            v.confirmed(&newer, 2, 4, identity(5), None),
            Confirmation::Changed(_)
        ));
        assert!(v.stripe_root(&newer).is_err());
    }
}
