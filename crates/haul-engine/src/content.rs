//! The one seam through which haul hashes a whole file's content:
//! `--checksum` on both sides, `haul check`, a node's listing with sums,
//! a destination's file compared with its source.
//!
//! A hash is of one version that existed: the file is hashed as it was
//! opened ([`LocalFile`] keeps its identity) and a file that changed while
//! it was read has no hash ([`ContentError::Changed`]). Today every byte is
//! read ([`ReadEveryByte`]); a content-hash cache keyed by the file's
//! identity is another [`ContentHasher`].

use std::io;

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

/// Reads and hashes every byte, then checks the file held still.
#[derive(Debug, Clone, Copy, Default)]
pub struct ReadEveryByte;

impl ContentHasher for ReadEveryByte {
    fn whole_file(&self, file: &LocalFile) -> Result<blake3::Hash, ContentError> {
        let mut hasher = blake3::Hasher::new();
        if let Some(f) = file.file() {
            hasher.update_reader(f)?;
        }
        match file.confirm() {
            Confirmation::Changed(change) => Err(ContentError::Changed(change)),
            _ => Ok(hasher.finalize()),
        }
    }
}

/// The BLAKE3 of `file`, through the hasher haul uses.
pub fn whole_file(file: &LocalFile) -> Result<blake3::Hash, ContentError> {
    ReadEveryByte.whole_file(file)
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
