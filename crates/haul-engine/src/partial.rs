//! A file being received: verified chunks, resume log, commit.

use std::fs::{self, File};
use std::io::{Read, Write};
use std::os::unix::fs::{FileExt, PermissionsExt};
use std::path::PathBuf;
use std::sync::Mutex;

use haul_proto::{Digest, Entry};

use crate::destination::{entry_mtime, open_rw, ReceiveError};
use crate::hash::{chunk_digest, root_from_digests, valid_chunk_size, MAX_CHUNKS};

const MAGIC: &[u8; 8] = b"HAULPRT1";
const HEADER_LEN: usize = 8 + 8 + 4 + 8 + 4 + 32;
const RECORD_LEN: usize = 36;

/// What happened to one received chunk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChunkVerdict {
    /// Digest matched; written and logged.
    Good,
    /// Digest did not match; nothing was written. Ask for it again.
    Bad,
}

#[derive(Debug)]
struct State {
    log: File,
    digests: Vec<Option<Digest>>,
}

/// A file being received into its staging name.
#[derive(Debug)]
pub struct PartialFile {
    entry: Entry,
    final_path: PathBuf,
    part_path: PathBuf,
    state_path: PathBuf,
    part: File,
    state: Mutex<State>,
    resumed_bytes: u64,
}

impl PartialFile {
    pub(crate) fn open(
        entry: Entry,
        final_path: PathBuf,
        part_path: PathBuf,
        state_path: PathBuf,
    ) -> Result<Self, ReceiveError> {
        if !valid_chunk_size(entry.chunk_size) {
            return Err(ReceiveError::BadOffer(format!(
                "chunk size {} is not a power of two between 1 KiB and 64 MiB",
                entry.chunk_size
            )));
        }
        let count = entry.chunk_count() as usize;
        if entry.size.div_ceil(u64::from(entry.chunk_size)) > MAX_CHUNKS * 16 {
            return Err(ReceiveError::BadOffer(format!(
                "{} bytes in {}-byte chunks is too many chunks",
                entry.size, entry.chunk_size
            )));
        }
        let header = header_bytes(&entry);
        let part = open_rw(&part_path)?;
        let mut log = open_rw(&state_path)?;
        let mut digests = vec![None; count];
        let mut existing = Vec::new();
        log.read_to_end(&mut existing)
            .map_err(|e| ReceiveError::io("read", &state_path, e))?;
        let mut resumed_bytes = 0;
        if existing.len() >= HEADER_LEN && existing[..HEADER_LEN] == header[..] {
            // Same file as before: keep the chunks that still verify.
            let mut buf = Vec::new();
            for rec in existing[HEADER_LEN..].chunks_exact(RECORD_LEN) {
                let index = u32::from_be_bytes([rec[0], rec[1], rec[2], rec[3]]);
                let Some(slot) = digests.get(index as usize) else {
                    continue;
                };
                if slot.is_some() {
                    continue;
                }
                let mut digest = [0u8; 32];
                digest.copy_from_slice(&rec[4..]);
                let len = entry.chunk_len(index) as usize;
                buf.resize(len, 0);
                let offset = u64::from(index) * u64::from(entry.chunk_size);
                if part.read_exact_at(&mut buf, offset).is_ok()
                    && chunk_digest(&buf, index, entry.chunk_size, entry.size) == digest
                {
                    digests[index as usize] = Some(digest);
                    resumed_bytes += len as u64;
                }
            }
        }
        // Rewrite the log compactly with only what verified.
        log.set_len(0)
            .map_err(|e| ReceiveError::io("truncate", &state_path, e))?;
        let mut fresh = header.to_vec();
        for (i, d) in digests.iter().enumerate() {
            if let Some(d) = d {
                fresh.extend_from_slice(&(i as u32).to_be_bytes());
                fresh.extend_from_slice(d);
            }
        }
        log.write_all_at(&fresh, 0)
            .map_err(|e| ReceiveError::io("write", &state_path, e))?;
        if resumed_bytes == 0 {
            part.set_len(0)
                .map_err(|e| ReceiveError::io("truncate", &part_path, e))?;
        }
        let log = fs::OpenOptions::new()
            .append(true)
            .open(&state_path)
            .map_err(|e| ReceiveError::io("open", &state_path, e))?;
        Ok(Self {
            entry,
            final_path,
            part_path,
            state_path,
            part,
            state: Mutex::new(State { log, digests }),
            resumed_bytes,
        })
    }

    /// The entry being received.
    pub fn entry(&self) -> &Entry {
        &self.entry
    }

    /// Bytes that were already verified when this file was (re)opened.
    pub fn resumed_bytes(&self) -> u64 {
        self.resumed_bytes
    }

    /// Verified chunks within `first..end`, with their digests.
    pub fn have(&self, first: u32, end: u32) -> Vec<(u32, Digest)> {
        let Ok(state) = self.state.lock() else {
            return Vec::new();
        };
        (first..end)
            .filter_map(|i| {
                state
                    .digests
                    .get(i as usize)
                    .copied()
                    .flatten()
                    .map(|d| (i, d))
            })
            .collect()
    }

    /// Verifies `data` as chunk `index` against `digest`; writes it only if good.
    pub fn write_chunk(
        &self,
        index: u32,
        data: &[u8],
        digest: &Digest,
    ) -> Result<ChunkVerdict, ReceiveError> {
        if index >= self.entry.chunk_count() || data.len() != self.entry.chunk_len(index) as usize {
            return Err(ReceiveError::BadOffer(format!(
                "chunk {index} of {} has the wrong index or length",
                self.entry.path
            )));
        }
        let actual = chunk_digest(data, index, self.entry.chunk_size, self.entry.size);
        if actual != *digest {
            return Ok(ChunkVerdict::Bad);
        }
        let offset = u64::from(index) * u64::from(self.entry.chunk_size);
        self.part
            .write_all_at(data, offset)
            .map_err(|e| ReceiveError::io("write", &self.part_path, e))?;
        let mut state = self
            .state
            .lock()
            .map_err(|_| ReceiveError::BadOffer("internal lock poisoned".into()))?;
        let mut rec = [0u8; RECORD_LEN];
        rec[..4].copy_from_slice(&index.to_be_bytes());
        rec[4..].copy_from_slice(&actual);
        state
            .log
            .write_all(&rec)
            .map_err(|e| ReceiveError::io("write", &self.state_path, e))?;
        state.digests[index as usize] = Some(actual);
        Ok(ChunkVerdict::Good)
    }

    /// Checks the whole-file hash against `sender_root`, then fsyncs, sets
    /// mode and mtime, and renames into place. Returns the file's BLAKE3.
    pub fn commit(&self, sender_root: &Digest) -> Result<Digest, ReceiveError> {
        let state = self
            .state
            .lock()
            .map_err(|_| ReceiveError::BadOffer("internal lock poisoned".into()))?;
        let digests: Option<Vec<Digest>> = state.digests.iter().copied().collect();
        let Some(digests) = digests else {
            return Err(ReceiveError::Incomplete(self.entry.path.clone()));
        };
        let root = root_from_digests(&digests, self.entry.chunk_size, self.entry.size)
            .ok_or_else(|| ReceiveError::Incomplete(self.entry.path.clone()))?;
        if root != *sender_root {
            let _ = fs::remove_file(&self.state_path);
            let _ = fs::remove_file(&self.part_path);
            return Err(ReceiveError::RootMismatch(self.entry.path.clone()));
        }
        let p = &self.part_path;
        self.part
            .set_len(self.entry.size)
            .map_err(|e| ReceiveError::io("truncate", p, e))?;
        self.part
            .set_permissions(fs::Permissions::from_mode(self.entry.mode & 0o1777))
            .map_err(|e| ReceiveError::io("chmod", p, e))?;
        self.part
            .set_modified(entry_mtime(&self.entry))
            .map_err(|e| ReceiveError::io("set mtime", p, e))?;
        self.part
            .sync_all()
            .map_err(|e| ReceiveError::io("fsync", p, e))?;
        fs::rename(p, &self.final_path)
            .map_err(|e| ReceiveError::io("rename", &self.final_path, e))?;
        if let Some(parent) = self.final_path.parent() {
            if let Ok(dir) = File::open(parent) {
                let _ = dir.sync_all();
            }
        }
        let _ = fs::remove_file(&self.state_path);
        Ok(root)
    }
}

fn header_bytes(entry: &Entry) -> [u8; HEADER_LEN] {
    let mut h = [0u8; HEADER_LEN];
    h[..8].copy_from_slice(MAGIC);
    h[8..16].copy_from_slice(&entry.size.to_be_bytes());
    h[16..20].copy_from_slice(&entry.chunk_size.to_be_bytes());
    h[20..28].copy_from_slice(&entry.mtime_sec.to_be_bytes());
    h[28..32].copy_from_slice(&entry.mtime_nsec.to_be_bytes());
    h[32..].copy_from_slice(blake3::hash(entry.path.as_bytes()).as_bytes());
    h
}
