//! The one seam through which haul hashes a whole file's content:
//! `--checksum` on both sides, `haul check`, a node's listing with sums,
//! a destination's file compared with its source.
//!
//! A hash is of one version that existed: the file is hashed as it was
//! opened ([`LocalFile`] keeps its identity) and a file that changed while
//! it was read has no hash ([`ContentError::Changed`]). A file whose
//! content-hash record describes the version opened is not read at all
//! ([`crate::hash_cache`]); any other is read whole, chunk by chunk on
//! BLAKE3's tree ([`ReadEveryByte`], the same hash), and its record kept.

use std::io;

use haul_proto::digest::{chunk_size_for, root_from_digests};
use haul_proto::{Entry, EntryKind};

use crate::chunks::{ChunkSource, Confirmation, LocalFile};

/// Why a file has no hash.
#[derive(Debug, thiserror::Error)]
pub enum ContentError {
    /// It could not be read.
    #[error(transparent)]
    Io(#[from] io::Error),
    /// It changed while it was read (how).
    #[error("changed while it was being read ({0})")]
    Changed(String),
}

/// Hashes whole files.
pub trait ContentHasher: Send + Sync {
    /// The BLAKE3 of `file`'s content, of the version it was opened at.
    fn whole_file(&self, file: &LocalFile) -> Result<blake3::Hash, ContentError>;
}

/// Reads and hashes every byte (chunk by chunk, so the chunk digests can be
/// kept as the file's record), then checks the file held still.
#[derive(Debug, Clone, Copy, Default)]
pub struct ReadEveryByte;

impl ContentHasher for ReadEveryByte {
    fn whole_file(&self, file: &LocalFile) -> Result<blake3::Hash, ContentError> {
        let size = file.identity().size;
        let entry = Entry {
            attrs: None,
            path: String::new(),
            kind: EntryKind::File,
            size,
            mode: 0,
            mtime_sec: 0,
            mtime_nsec: 0,
            chunk_size: chunk_size_for(size),
        };
        let mut buf = Vec::new();
        let digests = (0..entry.chunk_count())
            .map(|i| file.hash_chunk(&entry, i, &mut buf))
            .collect::<Result<Vec<_>, _>>()?;
        let root = root_from_digests(&digests, entry.chunk_size, size)
            .ok_or_else(|| io::Error::other("chunk digests do not cover the file"))?;
        match file.confirm() {
            Confirmation::Changed(change) => Err(ContentError::Changed(change)),
            // Gone from the source: vanished (rsync's 24), as a file that
            // was not there at all.
            Confirmation::Gone(how) => Err(ContentError::Io(io::Error::new(
                io::ErrorKind::NotFound,
                format!("{how} while it was being read"),
            ))),
            _ => Ok(root.into()),
        }
    }
}

/// Answers from the file's content-hash record when one describes the
/// version opened, else reads every byte ([`ReadEveryByte`]).
#[derive(Debug, Clone, Copy, Default)]
pub struct Cached;

impl ContentHasher for Cached {
    fn whole_file(&self, file: &LocalFile) -> Result<blake3::Hash, ContentError> {
        match file.cached_root() {
            Some(root) => Ok(root.into()),
            None => ReadEveryByte.whole_file(file),
        }
    }
}

/// The BLAKE3 of `file`, through the hasher haul uses.
pub fn whole_file(file: &LocalFile) -> Result<blake3::Hash, ContentError> {
    Cached.whole_file(file)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_is_hashed_as_one_version() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("f");
        std::fs::write(&path, vec![7u8; 100_000]).unwrap();
        let file = LocalFile::open(std::fs::File::open(&path).unwrap()).unwrap();
        assert_eq!(
            whole_file(&file).unwrap(),
            blake3::hash(&vec![7u8; 100_000])
        );
        // Written after it was opened: no hash of a mix.
        std::fs::write(&path, vec![8u8; 100_001]).unwrap();
        assert!(matches!(whole_file(&file), Err(ContentError::Changed(_))));
    }
}
