//! Reading source data for the sender: chunk hashing (inline or on a
//! blocking thread) and the jobs a fetching peer's `Want`s name.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::sync::Arc;

use haul_engine::hash::{chunk_size_for, ChunkHasher};
use haul_engine::haul_root::{ResolveError, Root};
use haul_engine::SourceEntry;
use haul_proto::{Digest, Entry, EntryKind, ErrorCode};

use super::Flight;
use crate::jobs::SendJob;

/// Chunk digests by index, or why the file could not be read.
pub(super) type Hashed = Result<Vec<(u32, Digest)>, String>;

/// A blocking job hashing chunks `indices` of a flight's file (a duplicate
/// descriptor, so it can run on another thread).
pub(super) fn hash_job(
    f: &Flight,
    indices: Vec<u32>,
) -> Result<impl FnOnce() -> Hashed + Send + 'static, String> {
    let e = f.job.src.entry.clone();
    let local = f.job.src.local.clone();
    let file = f
        .file
        .clone()
        .ok_or_else(|| format!("{} is not a file", e.path))?;
    Ok(move || {
        let mut buf = Vec::new();
        indices
            .into_iter()
            .map(|i| {
                let digest = read_chunk(&file, &e, i, &mut buf, false).map_err(|err| {
                    let offset = u64::from(i) * u64::from(e.chunk_size);
                    format!("cannot read {} at {offset}: {err}", local.display())
                })?;
                Ok((i, digest))
            })
            .collect()
    })
}

/// Chunks are read and hashed in pieces of this size: a piece is still in
/// the CPU's cache when it is hashed (and when its bytes are not kept, the
/// one piece-sized buffer stays in cache too).
pub(super) const HASH_PIECE: usize = 256 << 10;

/// Reads chunk `index` of `e` from `file` and returns its digest. With
/// `keep`, `buf` then holds the chunk's bytes (to send them from memory);
/// without, the chunk passes through a piece-sized `buf` (its bytes go out
/// straight from the file).
///
/// Hashing from a memory map of the source instead (no copy) was measured
/// slower: BLAKE3 then reads cold pages and pays a fault per 64 KiB, where a
/// `pread` of a piece leaves it in cache for the hash.
pub(super) fn read_chunk(
    file: &File,
    e: &Entry,
    index: u32,
    buf: &mut Vec<u8>,
    keep: bool,
) -> io::Result<Digest> {
    let len = e.chunk_len(index) as usize;
    let offset = u64::from(index) * u64::from(e.chunk_size);
    let mut hasher = ChunkHasher::new(index, e.chunk_size, e.size);
    buf.resize(if keep { len } else { len.min(HASH_PIECE) }, 0);
    let mut done = 0;
    while done < len {
        let n = (len - done).min(HASH_PIECE);
        let piece = if keep {
            &mut buf[done..done + n]
        } else {
            &mut buf[..n]
        };
        file.read_exact_at(piece, offset + done as u64)?;
        hasher.update(piece);
        done += n;
    }
    Ok(hasher.finalize())
}

/// Reads chunk `index` through `buf` (holding its bytes afterwards if
/// `keep`) and returns its digest.
pub(super) fn read_and_hash(
    f: &mut Flight,
    index: u32,
    buf: &mut Vec<u8>,
    keep: bool,
) -> Result<Digest, String> {
    let e = &f.job.src.entry;
    let Some(file) = f.file.as_ref() else {
        return Err(format!("{} is not a file", e.path));
    };
    read_chunk(file, e, index, buf, keep).map_err(|err| {
        let offset = u64::from(index) * u64::from(e.chunk_size);
        format!(
            "cannot read {} at {offset}: {err} (did it shrink while sending?)",
            f.job.src.local.display()
        )
    })
}

/// Builds the job a `Want` asks for: the file is opened beneath the held
/// `root` (no symlink followed on the way or at the end, nothing but a
/// regular file), and described from the opened file itself.
pub(super) fn want_job(
    root: &Root,
    path: &str,
    dest: &str,
    first: u32,
    end: u32,
) -> Result<SendJob, (ErrorCode, String)> {
    let bad = |e: String| (ErrorCode::BadPath, e);
    let comps = haul_proto::validate_entry_path(path).map_err(|e| bad(e.to_string()))?;
    haul_proto::validate_entry_path(dest).map_err(|e| bad(e.to_string()))?;
    let (last, parents) = comps.split_last().ok_or_else(|| bad("empty path".into()))?;
    let dir = root.open_dir(parents).map_err(|e| match e {
        ResolveError::NotFound(_) => (ErrorCode::NotFound, format!("{path}: no such file")),
        e => bad(e.to_string()),
    })?;
    let (file, meta) = dir.open_regular(last).map_err(|e| match e.raw_os_error() {
        Some(libc::ENOENT) => (ErrorCode::NotFound, format!("{path}: no such file")),
        Some(libc::ELOOP) => bad(format!(
            "{path} is a symlink: a node never reads through a symlink"
        )),
        _ if e.kind() == io::ErrorKind::InvalidInput => {
            bad(format!("{path} is not a regular file"))
        }
        _ => (ErrorCode::Io, format!("cannot read {path}: {e}")),
    })?;
    let entry = haul_proto::Entry {
        path: dest.to_owned(),
        kind: EntryKind::File,
        size: meta.size,
        mode: meta.permissions(),
        mtime_sec: meta.mtime,
        mtime_nsec: meta.mtime_nsec,
        chunk_size: chunk_size_for(meta.size),
    };
    let count = entry.chunk_count();
    let end = end.min(count);
    if first > end {
        return Err((
            ErrorCode::Protocol,
            format!("range {first}..{end} is empty"),
        ));
    }
    Ok(SendJob {
        src: SourceEntry {
            entry,
            local: root.path().join(path),
        },
        opened: Some(Arc::new(file)),
        first,
        end,
        group: None,
    })
}
