//! Reading source data for the sender: chunk hashing (inline or on a
//! blocking thread) and the jobs a fetching peer's `Want`s name.

use std::os::unix::fs::FileExt;
use std::path::Path;

use haul_engine::hash::{chunk_digest, chunk_size_for};
use haul_engine::{resolve_existing, SourceEntry};
use haul_proto::{Digest, EntryKind, ErrorCode};

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
        .as_ref()
        .ok_or_else(|| format!("{} is not a file", e.path))?
        .try_clone()
        .map_err(|err| format!("cannot read {}: {err}", local.display()))?;
    Ok(move || {
        let mut buf = Vec::new();
        indices
            .into_iter()
            .map(|i| {
                buf.resize(e.chunk_len(i) as usize, 0);
                let offset = u64::from(i) * u64::from(e.chunk_size);
                file.read_exact_at(&mut buf, offset)
                    .map_err(|err| format!("cannot read {} at {offset}: {err}", local.display()))?;
                Ok((i, chunk_digest(&buf, i, e.chunk_size, e.size)))
            })
            .collect()
    })
}

/// Reads chunk `index` into `buf` and returns its digest.
pub(super) fn read_and_hash(
    f: &mut Flight,
    index: u32,
    buf: &mut Vec<u8>,
) -> Result<Digest, String> {
    let e = &f.job.src.entry;
    let Some(file) = f.file.as_ref() else {
        return Err(format!("{} is not a file", e.path));
    };
    let len = e.chunk_len(index) as usize;
    buf.resize(len, 0);
    let offset = u64::from(index) * u64::from(e.chunk_size);
    file.read_exact_at(buf, offset).map_err(|err| {
        format!(
            "cannot read {} at {offset}: {err} (did it shrink while sending?)",
            f.job.src.local.display()
        )
    })?;
    Ok(chunk_digest(buf, index, e.chunk_size, e.size))
}

/// Builds the job a `Want` asks for, checking the path stays inside `root`.
pub(super) fn want_job(
    root: &Path,
    path: &str,
    dest: &str,
    first: u32,
    end: u32,
) -> Result<SendJob, (ErrorCode, String)> {
    let local = resolve_existing(root, path).map_err(|e| (ErrorCode::BadPath, e.to_string()))?;
    haul_proto::validate_rel_path(dest).map_err(|e| (ErrorCode::BadPath, e.to_string()))?;
    let meta =
        std::fs::metadata(&local).map_err(|e| (ErrorCode::NotFound, format!("{path}: {e}")))?;
    if !meta.is_file() {
        return Err((ErrorCode::BadPath, format!("{path} is not a regular file")));
    }
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let entry = haul_proto::Entry {
        path: dest.to_owned(),
        kind: EntryKind::File,
        size: meta.len(),
        mode: meta.permissions().mode() & 0o7777,
        mtime_sec: meta.mtime(),
        mtime_nsec: meta.mtime_nsec().clamp(0, 999_999_999) as u32,
        chunk_size: chunk_size_for(meta.len()),
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
        src: SourceEntry { entry, local },
        first,
        end,
        group: None,
    })
}
