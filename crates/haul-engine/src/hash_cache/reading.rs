//! What one open file's reads use of the cache and learn for it: the
//! digests a record gives (derived for the chunk size asked), which chunks
//! were answered from it, and the digests read from disk — kept, when the
//! whole file was read and confirmed as one version, as the file's record.
//!
//! Only a chunk that is sent is answered from the record (a receiver then
//! verifies its bytes against that digest), or sealed for a node that
//! relays its own copy ([`crate::ChunkSource::seal_digest`]); a chunk
//! hashed to check a receiver's resume claim, or a whole file's root, is
//! read from disk ([`crate::ChunkSource::hash_chunk`]), since no one would
//! check those.
//! A chunk answered from the record and asked for again was refused
//! downstream (or lost on the wire): it is read and hashed from disk, and
//! if that differs from the record, the record is stale — the file changed
//! without its stat data changing —, the sender says so, every later chunk
//! of this file is read from disk, and once the file is done it is hashed
//! from disk whole and its record written again.

use std::fs::File;
use std::path::PathBuf;
use std::sync::Mutex;

use haul_proto::digest::root_from_digests;
use haul_proto::{Digest, Entry};
use haul_root::FileIdentity;

use super::Record;

/// What the record says of a chunk about to be sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    /// Its digest, for the chunk's first send.
    Cached(Digest),
    /// Its digest, but the chunk was sent with it before: read it from
    /// disk and compare.
    Again(Digest),
    /// Nothing: read and hash it.
    Read,
}

/// The cache's part in reading one open file.
#[derive(Debug)]
pub struct Reading {
    record: Option<Record>,
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    /// The chunk size the vectors below are for (0: none yet).
    chunk_size: u32,
    /// The piece size what is learned is kept at ([`super::piece_for`]).
    piece: u32,
    /// The record's digests for that chunk size.
    cached: Option<Vec<Digest>>,
    /// The record's digests at the piece size, when it has them.
    cached_pieces: Option<Vec<Digest>>,
    /// The piece digests known of each chunk for this version: answered
    /// from the record or read.
    known: Vec<Option<Vec<Digest>>>,
    /// Chunks answered from the record.
    served: Vec<bool>,
    /// The record was refused once: read everything from disk.
    distrusted: bool,
    /// The reads were confirmed as one version.
    confirmed: bool,
}

impl Reading {
    /// Reading a file whose trusted record (if any) is `record`.
    pub fn new(record: Option<Record>) -> Self {
        Self {
            record,
            state: Mutex::new(State::default()),
        }
    }

    /// The record this file was opened with.
    pub fn record(&self) -> Option<&Record> {
        self.record.as_ref()
    }

    fn with<T>(&self, entry: &Entry, f: impl FnOnce(&mut State) -> T) -> Option<T> {
        let mut s = self.state.lock().ok()?;
        if s.chunk_size != entry.chunk_size {
            let n = entry.chunk_count() as usize;
            let piece = super::piece_for(entry.size, entry.chunk_size);
            let record = self
                .record
                .as_ref()
                .filter(|r| r.identity.size == entry.size);
            *s = State {
                chunk_size: entry.chunk_size,
                piece,
                cached: record.and_then(|r| r.digests_for(entry.chunk_size)),
                cached_pieces: record.and_then(|r| r.digests_for(piece)),
                known: vec![None; n],
                served: vec![false; n],
                ..State::default()
            };
        }
        Some(f(&mut s))
    }

    /// The piece size chunks of `entry` are hashed in for the record.
    pub fn piece(&self, entry: &Entry) -> u32 {
        self.with(entry, |s| s.piece).unwrap_or(entry.chunk_size)
    }

    /// What the record says of chunk `index` about to be sent (see the
    /// module's docs).
    pub fn cached(&self, entry: &Entry, index: u32) -> Answer {
        self.with(entry, |s| {
            if s.distrusted {
                return Answer::Read;
            }
            let i = index as usize;
            let Some(d) = s.cached.as_ref().and_then(|c| c.get(i)).copied() else {
                return Answer::Read;
            };
            if s.served.get(i).copied().unwrap_or(true) {
                return Answer::Again(d);
            }
            s.served[i] = true;
            let per_chunk = (s.chunk_size / s.piece.max(1)) as usize;
            s.known[i] = s.cached_pieces.as_ref().and_then(|p| {
                p.get(i * per_chunk..((i + 1) * per_chunk).min(p.len()))
                    .map(<[Digest]>::to_vec)
            });
            Answer::Cached(d)
        })
        .unwrap_or(Answer::Read)
    }

    /// Chunk `index` was read from disk; `pieces` are its pieces'
    /// digests ([`Reading::piece`]).
    pub fn learned(&self, entry: &Entry, index: u32, pieces: Vec<Digest>) {
        self.with(entry, |s| {
            if let Some(slot) = s.known.get_mut(index as usize) {
                *slot = Some(pieces);
            }
        });
    }

    /// Chunk `index`, answered from the record before, read from disk
    /// hashes to `digest`, not what the record says: the record is stale
    /// (said once, naming the file as `shown`).
    pub fn stale(&self, entry: &Entry, index: u32, pieces: Vec<Digest>, shown: &Option<PathBuf>) {
        let first = self
            .with(entry, |s| {
                let first = !s.distrusted;
                s.distrusted = true;
                // What was answered from it is not known to be right.
                for (known, served) in s.known.iter_mut().zip(&s.served) {
                    if *served {
                        *known = None;
                    }
                }
                if let Some(slot) = s.known.get_mut(index as usize) {
                    *slot = Some(pieces);
                }
                first
            })
            .unwrap_or(false);
        if first {
            let name = shown
                .as_ref()
                .map_or_else(|| "a file".to_owned(), |p| p.display().to_string());
            tracing::warn!(
                "{name}: its cached hash was stale (its content changed but its size and times did not); sending what it holds and hashing it again"
            );
        }
    }

    /// The reads so far were confirmed as one version of the file.
    pub fn confirmed(&self) {
        if let Ok(mut s) = self.state.lock() {
            s.confirmed = true;
        }
    }

    /// What to keep once the file is closed: the record learned, if the
    /// whole file was read (or answered) and confirmed and it would say
    /// more than the one it was opened with; after a stale record, the
    /// file hashed from disk whole.
    pub fn finish(&self, identity: &FileIdentity) -> Option<Finish> {
        let s = self.state.lock().ok()?;
        if s.chunk_size == 0 || identity.size < super::MIN_SIZE {
            return None;
        }
        if s.distrusted {
            return Some(Finish::Rehash(s.piece));
        }
        if !s.confirmed {
            return None;
        }
        if self
            .record
            .as_ref()
            .is_some_and(|r| r.chunk_size <= s.piece)
        {
            return None;
        }
        let mut digests = Vec::new();
        for pieces in &s.known {
            digests.extend_from_slice(pieces.as_deref()?);
        }
        let root = root_from_digests(&digests, s.piece, identity.size)?;
        Some(Finish::Keep {
            chunk_size: s.piece,
            root,
            digests,
        })
    }
}

/// What a closed file leaves the cache to do.
#[derive(Debug)]
pub enum Finish {
    /// Keep this record.
    Keep {
        /// Its chunk size.
        chunk_size: u32,
        /// The whole file's BLAKE3.
        root: Digest,
        /// Every chunk's digest.
        digests: Vec<Digest>,
    },
    /// Its record was stale: hash the file from disk in chunks of this
    /// size and keep that.
    Rehash(u32),
}

impl Finish {
    /// Does it, for `file` opened at `identity` (on the cache's own
    /// thread: it may read the whole file).
    pub fn run(self, file: &File, identity: &FileIdentity) {
        match self {
            Self::Keep {
                chunk_size,
                root,
                digests,
            } => super::fill(file, identity, chunk_size, root, digests),
            Self::Rehash(chunk_size) => {
                let entry = Entry {
                    attrs: None,
                    path: String::new(),
                    kind: haul_proto::EntryKind::File,
                    size: identity.size,
                    mode: 0,
                    mtime_sec: 0,
                    mtime_nsec: 0,
                    chunk_size,
                };
                let mut buf = Vec::new();
                let digests = (0..entry.chunk_count())
                    .map(|i| crate::chunks::read_file_chunk(file, &entry, i, &mut buf, false))
                    .collect::<Result<Vec<_>, _>>();
                let unchanged = FileIdentity::of(file).is_ok_and(|now| now == *identity);
                if let (Ok(digests), true) = (digests, unchanged) {
                    if let Some(root) = root_from_digests(&digests, chunk_size, identity.size) {
                        super::fill(file, identity, chunk_size, root, digests);
                    }
                }
            }
        }
    }
}
