//! Chunk sources and sinks: where a sender reads chunks, and what a
//! receiver hands each verified chunk to.
//!
//! - A [`ChunkSource`] is a complete local file ([`LocalFile`]), bytes in
//!   memory ([`MemorySource`]), or a staging file still being received
//!   ([`crate::PartialFile`]: only its verified chunks are ready, and it
//!   wakes its readers as more verify) — what a relay sends on while it
//!   receives.
//! - A [`ChunkSink`] takes a [`VerifiedChunk`], which only
//!   [`VerifiedChunk::check`] makes: a sink cannot be handed bytes that did
//!   not match their digest. A receiver's chain writes the staging file (and
//!   later forwards downstream).

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::Arc;

use haul_proto::digest::{chunk_digest, ChunkHasher, PieceHasher};
use haul_proto::{Digest, Entry};

use crate::hash_cache::{self, Answer, Reading};
use crate::receive_error::ReceiveError;
use haul_root::FileIdentity;

/// Chunks are read and hashed in pieces of this size: a piece is still in
/// the CPU's cache when it is hashed (and when its bytes are not kept, the
/// one piece-sized buffer stays in cache too).
pub const HASH_PIECE: usize = 256 << 10;

/// A chunk [`ChunkSource::read_chunk`] read: its digest, and how the
/// source came by it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChunkRead {
    /// BLAKE3 chaining value of the chunk at its offset.
    pub digest: Digest,
    /// The digest came from the file's hash-cache record: the source hashed
    /// nothing (and, without `keep`, read nothing). A sender says so on the
    /// wire ([`haul_proto::ChunkHeader::from_record`]).
    pub from_record: bool,
}

impl ChunkRead {
    /// A digest the source hashed from the chunk's bytes.
    pub fn hashed(digest: Digest) -> Self {
        Self {
            digest,
            from_record: false,
        }
    }
}

/// Where a sender reads chunks.
pub trait ChunkSource: Send + Sync + std::fmt::Debug {
    /// Reads chunk `index` of `entry` and returns its digest. With `keep`,
    /// `buf` then holds the chunk's bytes (to send them from memory);
    /// without, the chunk passes through `buf` piece by piece (its bytes go
    /// out from [`ChunkSource::file`]).
    fn read_chunk(
        &self,
        entry: &Entry,
        index: u32,
        buf: &mut Vec<u8>,
        keep: bool,
    ) -> io::Result<ChunkRead>;

    /// Reads and hashes chunk `index` of `entry` to check a digest no
    /// receiver will verify (a resume claim, a whole file's root): never
    /// answered from a cache.
    fn hash_chunk(&self, entry: &Entry, index: u32, buf: &mut Vec<u8>) -> io::Result<Digest> {
        self.read_chunk(entry, index, buf, false).map(|r| r.digest)
    }

    /// The digest a fan-out's origin seals chunk `index` with when a node
    /// already holds the file and relays its own copy (a skip): hashed
    /// from disk ([`ChunkSource::hash_chunk`]) unless a source knows better
    /// ([`LocalFile`]).
    fn seal_digest(&self, entry: &Entry, index: u32, buf: &mut Vec<u8>) -> io::Result<Digest> {
        self.hash_chunk(entry, index, buf)
    }

    /// The open file, when chunks can be sent straight from it.
    fn file(&self) -> Option<&File>;

    /// Whether chunk `index` can be read now (always, but for a file still
    /// being received).
    fn ready(&self, _index: u32) -> bool {
        true
    }

    /// Calls `wake` whenever more chunks become ready (never, for a source
    /// whose chunks all are).
    fn on_ready(&self, _wake: Arc<dyn Fn() + Send + Sync>) {}

    /// True if chunks not ready now never will be (a staging file its
    /// session let go): readers stop waiting.
    fn abandoned(&self) -> bool {
        false
    }

    /// Asked after the last chunk was read and before the file's hash is
    /// announced: whether what was read is one version that exists whole
    /// (see [`Confirmation`]). Bytes in memory always are.
    fn confirm(&self) -> Confirmation {
        Confirmation::Unchanged
    }
}

/// Whether the chunks a source gave are one version of the file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Confirmation {
    /// The version read exists whole: its hash may be announced.
    Unchanged,
    /// It changed (how), or never will be whole: the file must not be
    /// committed anywhere.
    Changed(String),
    /// It was deleted while it was read (how): its name is gone from the
    /// source, so it is not committed and counts as vanished (rsync's
    /// exit 24), not as changed.
    Gone(String),
    /// Not known yet: [`ChunkSource::on_ready`] wakes the reader when it
    /// is. A relay's source answers this until the origin's seal of the
    /// file's root reached it (`haul_node::relay`); the sending session's
    /// deadline bounds the wait.
    Pending,
}

/// Reads chunk `index` of `entry` from `file` through `buf` (see
/// [`ChunkSource::read_chunk`]).
///
/// Hashing from a memory map of the source instead (no copy) was measured
/// slower: BLAKE3 then reads cold pages and pays a fault per 64 KiB, where a
/// `pread` of a piece leaves it in cache for the hash.
pub fn read_file_chunk(
    file: &File,
    entry: &Entry,
    index: u32,
    buf: &mut Vec<u8>,
    keep: bool,
) -> io::Result<Digest> {
    let mut hasher = ChunkHasher::new(index, entry.chunk_size, entry.size);
    read_in_pieces(file, entry, index, buf, keep, |p| hasher.update(p))?;
    Ok(hasher.finalize())
}

/// [`read_file_chunk`], also giving the digests of the chunk's `piece`-byte
/// pieces (with no more hashing: see [`PieceHasher`]).
pub fn read_file_chunk_pieces(
    file: &File,
    entry: &Entry,
    index: u32,
    buf: &mut Vec<u8>,
    keep: bool,
    piece: u32,
) -> io::Result<(Digest, Vec<Digest>)> {
    let mut hasher = PieceHasher::new(index, entry.chunk_size, entry.size, piece);
    read_in_pieces(file, entry, index, buf, keep, |p| hasher.update(p))?;
    Ok(hasher.finalize())
}

/// Reads chunk `index` of `entry` [`HASH_PIECE`] bytes at a time, handing
/// each piece to `hash` while it is still in the CPU's cache; with `keep`,
/// `buf` ends up holding the whole chunk.
fn read_in_pieces(
    file: &File,
    entry: &Entry,
    index: u32,
    buf: &mut Vec<u8>,
    keep: bool,
    mut hash: impl FnMut(&[u8]),
) -> io::Result<()> {
    let len = entry.chunk_len(index) as usize;
    let offset = u64::from(index) * u64::from(entry.chunk_size);
    buf.resize(if keep { len } else { len.min(HASH_PIECE) }, 0);
    let mut done = 0;
    while done < len {
        let n = (len - done).min(HASH_PIECE);
        let piece = if keep {
            &mut buf[done..done + n]
        } else {
            &mut buf[..n]
        };
        read_at(file, entry, piece, offset + done as u64)?;
        hash(piece);
        done += n;
    }
    Ok(())
}

/// Reads `buf.len()` bytes of `entry`'s file at `offset`: a sparse file's
/// (`-S`) holes zero-filled, not read ([`haul_root::read_sparse_at`]).
pub(crate) fn read_at(file: &File, entry: &Entry, buf: &mut [u8], offset: u64) -> io::Result<()> {
    if entry.attrs.as_ref().is_some_and(|a| a.sparse) {
        haul_root::read_sparse_at(file, buf, offset).map(drop)
    } else {
        file.read_exact_at(buf, offset)
    }
}

/// A complete local file, and the version of it that is sent: its identity
/// when it was opened ([`FileIdentity::settled`]), checked again by
/// [`ChunkSource::confirm`] after the last read.
///
/// Its chunk digests come from the content-hash cache where a record
/// describes this version ([`crate::hash_cache`]): a chunk sent from the
/// file (`keep` false) is then not read at all, one kept in memory is read
/// but not hashed. What it reads and hashes whole and confirms becomes the
/// file's record when it is dropped.
#[derive(Debug)]
pub struct LocalFile {
    file: File,
    identity: FileIdentity,
    cache: Reading,
    /// Large enough to cache, with the cache on: what is read is kept.
    cacheable: bool,
    shown: Option<PathBuf>,
    /// Its path beneath a held root (a node's files), to tell a file
    /// deleted while it was read from one replaced; else `shown` is.
    named: Option<(haul_root::Root, String)>,
}

impl LocalFile {
    /// The file `file` reads, as it is now (waiting out a timestamp tick if
    /// it was written a moment ago, so no later write goes unseen — unless
    /// the last change was haul's own record being set on it: a write in
    /// that tick would have moved its mtime).
    pub fn open(file: File) -> io::Result<Self> {
        let quick = FileIdentity::of(&file)?;
        let record = hash_cache::look_up(&file, &quick);
        let identity = match &record {
            Some(r) if r.stamped_at(quick.ctime) => quick,
            _ => FileIdentity::settled(&file)?,
        };
        let record = if identity == quick {
            record
        } else {
            hash_cache::look_up(&file, &identity)
        };
        let cacheable = identity.size >= hash_cache::MIN_SIZE && hash_cache::settings().enabled;
        Ok(Self {
            file,
            identity,
            cache: Reading::new(record),
            cacheable,
            shown: None,
            named: None,
        })
    }

    /// Where it is: `path` (checked, relative) beneath `root` (`shown` then
    /// need not be a path on this host).
    pub fn named(mut self, root: &haul_root::Root, path: &str) -> Self {
        self.named = Some((root.clone(), path.to_owned()));
        self
    }

    /// Names the file in what its reads report (a stale cached hash).
    pub fn shown_as(mut self, path: impl Into<PathBuf>) -> Self {
        self.shown = Some(path.into());
        self
    }

    /// The identity it is sent at.
    pub fn identity(&self) -> &FileIdentity {
        &self.identity
    }

    /// The whole file's BLAKE3 from its cached record, if one describes it.
    pub fn cached_root(&self) -> Option<Digest> {
        self.cache.record().map(|r| r.root)
    }

    /// Reads and hashes chunk `index` from disk, and notes its digest.
    fn hash_chunk_keeping(
        &self,
        entry: &Entry,
        index: u32,
        buf: &mut Vec<u8>,
        keep: bool,
    ) -> io::Result<Digest> {
        if !self.cacheable {
            return read_file_chunk(&self.file, entry, index, buf, keep);
        }
        let piece = self.cache.piece(entry);
        let (digest, pieces) = read_file_chunk_pieces(&self.file, entry, index, buf, keep, piece)?;
        self.cache.learned(entry, index, pieces);
        Ok(digest)
    }
}

impl Drop for LocalFile {
    fn drop(&mut self) {
        let Some(finish) = self.cache.finish(&self.identity) else {
            return;
        };
        let Ok(file) = self.file.try_clone() else {
            return;
        };
        let identity = self.identity;
        hash_cache::later(Box::new(move || finish.run(&file, &identity)));
    }
}

impl ChunkSource for LocalFile {
    fn read_chunk(
        &self,
        entry: &Entry,
        index: u32,
        buf: &mut Vec<u8>,
        keep: bool,
    ) -> io::Result<ChunkRead> {
        match self.cache.cached(entry, index) {
            Answer::Cached(digest) => {
                if keep {
                    let len = entry.chunk_len(index) as usize;
                    buf.resize(len, 0);
                    let offset = u64::from(index) * u64::from(entry.chunk_size);
                    read_at(&self.file, entry, buf, offset)?;
                }
                Ok(ChunkRead {
                    digest,
                    from_record: true,
                })
            }
            Answer::Again(cached) => {
                let piece = self.cache.piece(entry);
                let (digest, pieces) =
                    read_file_chunk_pieces(&self.file, entry, index, buf, keep, piece)?;
                if digest == cached {
                    // Lost on the way, not stale.
                    self.cache.learned(entry, index, pieces);
                } else {
                    self.cache.stale(entry, index, pieces, &self.shown);
                }
                Ok(ChunkRead::hashed(digest))
            }
            Answer::Read => self
                .hash_chunk_keeping(entry, index, buf, keep)
                .map(ChunkRead::hashed),
        }
    }

    fn hash_chunk(&self, entry: &Entry, index: u32, buf: &mut Vec<u8>) -> io::Result<Digest> {
        self.hash_chunk_keeping(entry, index, buf, false)
    }

    /// From the file's record when it has one: every node downstream
    /// verifies the relayed bytes against these seals, and a record
    /// describes one whole version, so a stale one lets through only that
    /// old version whole (a version that existed, as far as a record is
    /// ever trusted: `check`, `-c`) or fails the file, never a mix. Not
    /// under `--ignore-ctime`, where a stale record is no rarity: then from
    /// disk. (A striped file's stripes are separate sources that do not
    /// override this: a stale record sealing one stripe while another is
    /// found stale and sent from disk would vouch for a mix.)
    fn seal_digest(&self, entry: &Entry, index: u32, buf: &mut Vec<u8>) -> io::Result<Digest> {
        if hash_cache::settings().ignore_ctime {
            return self.hash_chunk(entry, index, buf);
        }
        self.read_chunk(entry, index, buf, false).map(|r| r.digest)
    }

    fn file(&self) -> Option<&File> {
        Some(&self.file)
    }

    fn confirm(&self) -> Confirmation {
        match FileIdentity::of(&self.file) {
            Err(e) => Confirmation::Changed(format!("cannot stat it: {e}")),
            Ok(now) => match self.identity.change_to(&now) {
                None => {
                    self.cache.confirmed();
                    Confirmation::Unchanged
                }
                // A record set on it meanwhile (another reader hashed the
                // same version): not a change of its bytes.
                Some(_) if hash_cache::explains(&self.file, &self.identity, &now) => {
                    Confirmation::Unchanged
                }
                Some(_) if self.deleted() => Confirmation::Gone("deleted".into()),
                Some(change) => Confirmation::Changed(change.to_string()),
            },
        }
    }
}

impl LocalFile {
    /// Whether the file read was deleted since it was opened: it has no
    /// name left, and nothing is under its name (a file replaced by a
    /// rename has a new version there, which a retry sends). The name is
    /// looked at only to say which failure it is; nothing is read there.
    fn deleted(&self) -> bool {
        use std::os::unix::fs::MetadataExt;
        if !self.file.metadata().is_ok_and(|m| m.nlink() == 0) {
            return false;
        }
        match (&self.named, &self.shown) {
            (Some((root, path)), _) => {
                let Ok(comps) = haul_proto::validate_entry_path(path) else {
                    return false;
                };
                let Some((last, parents)) = comps.split_last() else {
                    return false;
                };
                match root.open_dir(parents) {
                    Ok(dir) => matches!(dir.stat(last), Ok(None)),
                    Err(e) => matches!(e, haul_root::ResolveError::NotFound(_)),
                }
            }
            (None, Some(path)) => {
                std::fs::symlink_metadata(path).is_err_and(|e| e.kind() == io::ErrorKind::NotFound)
            }
            (None, None) => false,
        }
    }
}

/// Bytes in memory.
#[derive(Debug, Clone)]
pub struct MemorySource(pub Arc<[u8]>);

impl ChunkSource for MemorySource {
    fn read_chunk(
        &self,
        entry: &Entry,
        index: u32,
        buf: &mut Vec<u8>,
        _keep: bool,
    ) -> io::Result<ChunkRead> {
        let start = usize::try_from(u64::from(index) * u64::from(entry.chunk_size))
            .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
        let bytes = self
            .0
            .get(start..start + entry.chunk_len(index) as usize)
            .ok_or_else(|| {
                io::Error::new(io::ErrorKind::UnexpectedEof, "past the end of the bytes")
            })?;
        buf.clear();
        buf.extend_from_slice(bytes);
        Ok(ChunkRead::hashed(chunk_digest(
            bytes,
            index,
            entry.chunk_size,
            entry.size,
        )))
    }

    fn file(&self) -> Option<&File> {
        None
    }
}

/// A chunk whose bytes matched their digest. Only [`VerifiedChunk::check`]
/// makes one.
#[derive(Debug, Clone, Copy)]
pub struct VerifiedChunk<'a> {
    index: u32,
    data: &'a [u8],
    digest: Digest,
}

impl<'a> VerifiedChunk<'a> {
    /// Checks `data` as chunk `index` of `entry` against `digest`: `None`
    /// when it has the wrong length or does not match.
    pub fn check(entry: &Entry, index: u32, data: &'a [u8], digest: &Digest) -> Option<Self> {
        if index >= entry.chunk_count() || data.len() != entry.chunk_len(index) as usize {
            return None;
        }
        (chunk_digest(data, index, entry.chunk_size, entry.size) == *digest).then_some(Self {
            index,
            data,
            digest: *digest,
        })
    }

    /// [`VerifiedChunk::check`], also putting the digests of the chunk's
    /// `piece`-byte pieces in `pieces` (no more hashing: [`PieceHasher`]),
    /// which a content-hash record keeps.
    pub fn check_keeping(
        entry: &Entry,
        index: u32,
        data: &'a [u8],
        digest: &Digest,
        piece: u32,
        pieces: &mut Vec<Digest>,
    ) -> Option<Self> {
        if index >= entry.chunk_count() || data.len() != entry.chunk_len(index) as usize {
            return None;
        }
        let mut h = PieceHasher::new(index, entry.chunk_size, entry.size, piece);
        h.update(data);
        let (actual, kept) = h.finalize();
        (actual == *digest).then(|| {
            *pieces = kept;
            Self {
                index,
                data,
                digest: *digest,
            }
        })
    }

    /// Makes one from bytes whose digest was computed from them (a source
    /// that sends no digests: what arrived is what is kept).
    pub fn computed(entry: &Entry, index: u32, data: &'a [u8]) -> Self {
        Self {
            index,
            data,
            digest: chunk_digest(data, index, entry.chunk_size, entry.size),
        }
    }

    /// The chunk's index.
    pub fn index(&self) -> u32 {
        self.index
    }

    /// Its bytes.
    pub fn data(&self) -> &'a [u8] {
        self.data
    }

    /// Its digest.
    pub fn digest(&self) -> Digest {
        self.digest
    }
}

/// Takes verified chunks: a staging file, a forwarder to a downstream node.
pub trait ChunkSink: Send + Sync {
    /// Takes a verified chunk.
    fn put(&self, chunk: &VerifiedChunk<'_>) -> Result<(), ReceiveError>;
}

#[cfg(test)]
mod tests {
    use super::*;
    use haul_proto::EntryKind;

    fn entry(size: u64) -> Entry {
        Entry {
            attrs: None,
            path: "f".into(),
            kind: EntryKind::File,
            size,
            mode: 0o644,
            mtime_sec: 0,
            mtime_nsec: 0,
            chunk_size: 1024,
        }
    }

    #[test]
    fn sources_agree_on_digests_and_only_matching_bytes_verify() {
        let data: Vec<u8> = (0..3000u32).map(|i| (i % 251) as u8).collect();
        let e = entry(data.len() as u64);
        let mem = MemorySource(data.clone().into());
        let tmp = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(tmp.path(), &data).unwrap();
        let file = LocalFile::open(File::open(tmp.path()).unwrap()).unwrap();
        for i in 0..3 {
            let (mut a, mut b, mut c) = (Vec::new(), Vec::new(), Vec::new());
            let d = mem.read_chunk(&e, i, &mut a, true).unwrap();
            assert!(!d.from_record);
            let d = d.digest;
            assert_eq!(file.read_chunk(&e, i, &mut b, true).unwrap().digest, d);
            assert_eq!(file.read_chunk(&e, i, &mut c, false).unwrap().digest, d);
            assert_eq!(a, b);
            assert!(VerifiedChunk::check(&e, i, &a, &d).is_some());
            let mut bad = a.clone();
            bad[0] ^= 1;
            assert!(VerifiedChunk::check(&e, i, &bad, &d).is_none());
            assert!(VerifiedChunk::check(&e, i, &a[1..], &d).is_none());
        }
        assert!(mem.read_chunk(&e, 3, &mut Vec::new(), true).is_err());
    }

    /// Bytes this thread has read through `read` and `pread` so far.
    fn read_by_this_thread() -> Option<u64> {
        let io = std::fs::read_to_string("/proc/thread-self/io").ok()?;
        io.lines()
            .find_map(|l| l.strip_prefix("rchar: "))
            .and_then(|n| n.trim().parse().ok())
    }

    #[test]
    fn a_sparse_files_holes_are_hashed_as_zeros_without_being_read() {
        use std::os::unix::fs::FileExt as _;
        let mib = 1u64 << 20;
        let tmp = tempfile::NamedTempFile::new().unwrap();
        let f = tmp.as_file();
        f.set_len(16 * mib).unwrap();
        f.write_all_at(&[5u8; 4096], 8 * mib).unwrap();
        f.sync_all().unwrap();
        let mut plain = entry(16 * mib);
        plain.chunk_size = 4 << 20;
        let mut sparse = plain.clone();
        sparse.attrs = Some(Box::new(haul_proto::Attrs {
            sparse: true,
            ..Default::default()
        }));
        let file = LocalFile::open(File::open(tmp.path()).unwrap()).unwrap();
        let mut read = [0u64; 2];
        for (e, read) in [&plain, &sparse].into_iter().zip(&mut read) {
            for keep in [true, false] {
                for i in 0..4 {
                    let mut want = vec![0u8; 4 << 20];
                    f.read_exact_at(&mut want, u64::from(i) * 4 * mib).unwrap();
                    let want = chunk_digest(&want, i, e.chunk_size, e.size);
                    let before = read_by_this_thread();
                    let got = file.hash_chunk(e, i, &mut Vec::new()).unwrap();
                    let mut buf = Vec::new();
                    let r = file.read_chunk(e, i, &mut buf, keep).unwrap();
                    *read += read_by_this_thread().unwrap_or(0) - before.unwrap_or(0);
                    assert_eq!(got, want, "chunk {i}");
                    assert_eq!(r.digest, want, "chunk {i}");
                }
            }
        }
        // Where the kernel counts reads and the filesystem reports holes,
        // the sparse reads read the 256 KiB step holding the one block of
        // data (four times: each chunk is read four ways) and the plain
        // ones everything, four times.
        let mut whole = vec![0u8; 16 << 20];
        let reports = haul_root::read_sparse_at(f, &mut whole, 0).unwrap() >= 15 * mib;
        if read_by_this_thread().is_some() && reports {
            assert!(read[0] >= 64 * mib, "plain: {}", read[0]);
            assert!(read[1] < 2 * mib, "sparse: {}", read[1]);
        }
    }
}
