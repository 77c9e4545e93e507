//! In-memory files for simulated transfers: a source tree the sender reads,
//! and a destination with the receiving side's rules (verified chunks only,
//! resume state, quick check, a file under its final name only once its
//! whole-file BLAKE3 matched).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use haul_proto::digest::{chunk_digest, chunk_size_for, root_from_digests};
use haul_proto::{Digest, Entry, EntryKind};

/// A source tree: entries with their bytes.
#[derive(Debug, Clone, Default)]
pub struct MemTree {
    /// Entries by path, parents before children (sorted).
    pub entries: BTreeMap<String, (Entry, Arc<[u8]>)>,
}

/// Deterministic bytes for tests: `len` bytes from `seed`.
pub fn bytes(len: usize, seed: u64) -> Vec<u8> {
    let mut out = Vec::with_capacity(len);
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    while out.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        out.extend_from_slice(&x.to_le_bytes());
    }
    out.truncate(len);
    out
}

impl MemTree {
    /// An empty tree.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a file with `data` (4 MiB chunks, as haul cuts files, unless
    /// `chunk_size` says otherwise).
    pub fn file(&mut self, path: &str, data: Vec<u8>, chunk_size: Option<u32>) -> &mut Self {
        let entry = Entry {
            attrs: None,
            path: path.into(),
            kind: EntryKind::File,
            size: data.len() as u64,
            mode: 0o644,
            mtime_sec: 1_700_000_000,
            mtime_nsec: 0,
            chunk_size: chunk_size.unwrap_or_else(|| chunk_size_for(data.len() as u64)),
        };
        self.entries.insert(path.into(), (entry, data.into()));
        self
    }

    /// Adds a directory.
    pub fn dir(&mut self, path: &str) -> &mut Self {
        let entry = Entry {
            attrs: None,
            path: path.into(),
            kind: EntryKind::Dir,
            size: 0,
            mode: 0o755,
            mtime_sec: 1_700_000_000,
            mtime_nsec: 0,
            chunk_size: chunk_size_for(0),
        };
        self.entries
            .insert(path.into(), (entry, Arc::from(Vec::new())));
        self
    }

    /// The entry and bytes at `path`.
    pub fn get(&self, path: &str) -> Option<&(Entry, Arc<[u8]>)> {
        self.entries.get(path)
    }

    /// Chunk `index` of `path`'s bytes (as cut by `entry`).
    pub fn chunk(&self, entry: &Entry, data: &[u8], index: u32) -> Option<(Vec<u8>, Digest)> {
        let start = usize::try_from(u64::from(index) * u64::from(entry.chunk_size)).ok()?;
        let len = entry.chunk_len(index) as usize;
        let bytes = data.get(start..start + len)?.to_vec();
        let digest = chunk_digest(&bytes, index, entry.chunk_size, entry.size);
        Some((bytes, digest))
    }
}

/// A file being received: verified chunks only.
#[derive(Debug, Clone)]
pub struct Staged {
    /// The entry being received.
    pub entry: Entry,
    /// Bytes of verified chunks (unverified bytes are never here).
    pub data: Vec<u8>,
    /// Digests of verified chunks.
    pub digests: Vec<Option<Digest>>,
}

/// The receiving side's files.
#[derive(Debug, Default)]
pub struct MemDest {
    /// Files under their final names.
    pub files: HashMap<String, (Entry, Vec<u8>)>,
    /// Directories made.
    pub dirs: Vec<String>,
    /// Staging (resume state) by path.
    pub staged: HashMap<String, Staged>,
    /// Chunks written (verified), in the order they came.
    pub writes: Vec<(String, u32)>,
    /// Chunks whose payload did not match its digest (never written).
    pub refused: Vec<(String, u32)>,
}

impl MemDest {
    /// An empty destination.
    pub fn new() -> Self {
        Self::default()
    }

    /// Whether the file at `entry.path` is the same (size and mtime).
    pub fn up_to_date(&self, entry: &Entry) -> bool {
        self.files.get(&entry.path).is_some_and(|(e, _)| {
            e.size == entry.size
                && (e.mtime_sec, e.mtime_nsec) == (entry.mtime_sec, entry.mtime_nsec)
        })
    }

    /// Opens (or reopens) the staging of `entry`; the chunks of
    /// `first..end` it holds verified.
    pub fn prepare(&mut self, entry: &Entry, first: u32, end: u32) -> Vec<(u32, Digest)> {
        let count = entry.chunk_count() as usize;
        let fresh = || Staged {
            entry: entry.clone(),
            data: vec![0; entry.size as usize],
            digests: vec![None; count],
        };
        let staged = self.staged.entry(entry.path.clone()).or_insert_with(fresh);
        if staged.entry != *entry {
            *staged = fresh();
        }
        (first..end)
            .filter_map(|i| {
                staged
                    .digests
                    .get(i as usize)
                    .copied()
                    .flatten()
                    .map(|d| (i, d))
            })
            .collect()
    }

    /// Verifies `payload` as chunk `index` against `digest`; writes it only
    /// if it matches. True when written.
    pub fn write(&mut self, path: &str, index: u32, payload: &[u8], digest: &Digest) -> bool {
        let Some(staged) = self.staged.get_mut(path) else {
            return false;
        };
        let e = &staged.entry;
        let ok = payload.len() == e.chunk_len(index) as usize
            && chunk_digest(payload, index, e.chunk_size, e.size) == *digest;
        if !ok {
            self.refused.push((path.to_owned(), index));
            return false;
        }
        let start = (u64::from(index) * u64::from(e.chunk_size)) as usize;
        staged.data[start..start + payload.len()].copy_from_slice(payload);
        staged.digests[index as usize] = Some(*digest);
        self.writes.push((path.to_owned(), index));
        true
    }

    /// A fan-out stripe of `path` is in: once every chunk is verified, the
    /// file goes under its final name with the hash its digests give
    /// (`Some`); `None` while other stripes are still to come.
    pub fn assemble(&mut self, path: &str) -> Result<Option<Digest>, String> {
        let Some(staged) = self.staged.get(path) else {
            // Put in place already by the stripe that completed it.
            return Ok(None);
        };
        let e = &staged.entry;
        let all: Option<Vec<Digest>> = staged.digests.iter().copied().collect();
        match all.and_then(|d| root_from_digests(&d, e.chunk_size, e.size)) {
            Some(root) => self.commit(path, &root).map(Some),
            None => Ok(None),
        }
    }

    /// Checks the whole file against `root` and puts it under its final name.
    pub fn commit(&mut self, path: &str, root: &Digest) -> Result<Digest, String> {
        let Some(staged) = self.staged.get(path) else {
            return Err(format!("{path}: nothing staged"));
        };
        let e = &staged.entry;
        let all: Option<Vec<Digest>> = staged.digests.iter().copied().collect();
        let Some(mine) = all.and_then(|d| root_from_digests(&d, e.chunk_size, e.size)) else {
            return Err(format!("{path}: commit before every chunk was verified"));
        };
        if mine != *root {
            self.staged.remove(path);
            return Err(format!(
                "{path}: whole-file BLAKE3 differs from the sender's"
            ));
        }
        if let Some(staged) = self.staged.remove(path) {
            self.files
                .insert(path.to_owned(), (staged.entry, staged.data));
        }
        Ok(mine)
    }
}
