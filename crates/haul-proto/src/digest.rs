//! Chunk digests and whole-file hashes on BLAKE3's tree.
//!
//! A chunk's digest is the BLAKE3 chaining value of its bytes at their offset
//! in the file, so the whole-file hash (plain `blake3(file)`, what `b3sum`
//! prints) is computed by merging chunk digests, without reading the file twice.

use crate::{Digest, MAX_CHUNK_LEN};
use blake3::hazmat::{
    left_subtree_len, merge_subtrees_non_root, merge_subtrees_root, HasherExt, Mode,
};

/// Default chunk size: 4 MiB.
pub const DEFAULT_CHUNK_SIZE: u32 = 4 << 20;
/// Files are cut into at most this many chunks; larger files get larger chunks.
pub const MAX_CHUNKS: u64 = 1 << 16;

/// The chunk size used for a file of `size` bytes: 4 MiB, doubled until the
/// file has at most [`MAX_CHUNKS`] chunks (capped at [`MAX_CHUNK_LEN`]).
pub fn chunk_size_for(size: u64) -> u32 {
    let mut cs = DEFAULT_CHUNK_SIZE;
    while size.div_ceil(u64::from(cs)) > MAX_CHUNKS && cs < MAX_CHUNK_LEN {
        cs *= 2;
    }
    cs
}

/// Whether a chunk size is acceptable from a peer: a power of two in 1 KiB..=64 MiB.
pub fn valid_chunk_size(cs: u32) -> bool {
    cs.is_power_of_two() && (crate::MIN_CHUNK_SIZE..=MAX_CHUNK_LEN).contains(&cs)
}

/// Digest of chunk `index` of a file of `file_size` bytes cut in `chunk_size` chunks.
pub fn chunk_digest(data: &[u8], index: u32, chunk_size: u32, file_size: u64) -> Digest {
    if file_size <= u64::from(chunk_size) {
        return *blake3::hash(data).as_bytes();
    }
    let mut hasher = blake3::Hasher::new();
    hasher.set_input_offset(u64::from(index) * u64::from(chunk_size));
    hasher.update(data);
    hasher.finalize_non_root()
}

/// [`chunk_digest`] computed piece by piece, as the bytes of a chunk arrive
/// (no buffer holds the chunk).
pub struct ChunkHasher {
    hasher: blake3::Hasher,
    whole_file: bool,
}

impl ChunkHasher {
    /// Starts chunk `index` of a file of `file_size` bytes in `chunk_size` chunks.
    pub fn new(index: u32, chunk_size: u32, file_size: u64) -> Self {
        let mut hasher = blake3::Hasher::new();
        let whole_file = file_size <= u64::from(chunk_size);
        if !whole_file {
            hasher.set_input_offset(u64::from(index) * u64::from(chunk_size));
        }
        Self { hasher, whole_file }
    }

    /// Adds the next bytes of the chunk.
    pub fn update(&mut self, data: &[u8]) {
        self.hasher.update(data);
    }

    /// The chunk's digest (equal to [`chunk_digest`] of all the bytes given).
    pub fn finalize(&self) -> Digest {
        if self.whole_file {
            *self.hasher.finalize().as_bytes()
        } else {
            self.hasher.finalize_non_root()
        }
    }
}

/// The whole-file BLAKE3 hash from every chunk digest, in order.
///
/// `digests.len()` must equal the file's chunk count (checked; `None` if not).
pub fn root_from_digests(digests: &[Digest], chunk_size: u32, file_size: u64) -> Option<Digest> {
    let cs = u64::from(chunk_size);
    let expected = file_size.div_ceil(cs);
    if digests.len() as u64 != expected {
        return None;
    }
    if file_size == 0 {
        return Some(*blake3::hash(b"").as_bytes());
    }
    if file_size <= cs {
        return Some(digests[0]);
    }
    let left = left_subtree_len(file_size);
    let l = subtree(digests, cs, 0, left);
    let r = subtree(digests, cs, left, file_size - left);
    Some(*merge_subtrees_root(&l, &r, Mode::Hash).as_bytes())
}

/// The chaining value of bytes `offset..offset+len` of a file from the
/// digests of its `cs`-byte chunks: `offset` a multiple of `cs`, and the
/// range a valid BLAKE3 subtree that is not the whole file — such as a
/// larger power-of-two chunk (the digest of chunk `offset / len` of the file
/// cut in `len`-byte chunks). A record of 1 MiB chunks so gives 4 MiB ones.
/// `None` when the range is not within the digests given.
pub fn subtree_digest(digests: &[Digest], cs: u64, offset: u64, len: u64) -> Option<Digest> {
    let fits = cs > 0
        && len > 0
        && offset.is_multiple_of(cs)
        && offset
            .checked_add(len)
            .is_some_and(|end| end.div_ceil(cs) <= digests.len() as u64);
    fits.then(|| subtree(digests, cs, offset, len))
}

/// Chaining value of the bytes `offset..offset+len` (a valid BLAKE3 subtree).
fn subtree(digests: &[Digest], cs: u64, offset: u64, len: u64) -> Digest {
    if len <= cs {
        return digests[(offset / cs) as usize];
    }
    let left = left_subtree_len(len);
    let l = subtree(digests, cs, offset, left);
    let r = subtree(digests, cs, offset + left, len - left);
    merge_subtrees_non_root(&l, &r, Mode::Hash)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(size: usize, cs: u32) {
        let data: Vec<u8> = (0..size).map(|i| (i * 31 % 251) as u8).collect();
        let digests: Vec<Digest> = data
            .chunks(cs as usize)
            .enumerate()
            .map(|(i, c)| chunk_digest(c, i as u32, cs, size as u64))
            .collect();
        let root = root_from_digests(&digests, cs, size as u64).unwrap();
        assert_eq!(
            root,
            *blake3::hash(&data).as_bytes(),
            "size {size} chunk {cs}"
        );
    }

    #[test]
    fn root_matches_plain_blake3() {
        for cs in [1024u32, 4096, 65536] {
            for size in [
                0,
                1,
                1023,
                1024,
                1025,
                4096,
                5000,
                65536,
                65537,
                200_000,
                1 << 20,
                3 * 65536 + 7,
            ] {
                check(size, cs);
            }
        }
    }

    #[test]
    fn chunk_hasher_matches_chunk_digest_in_any_pieces() {
        let data: Vec<u8> = (0..10_000u32).map(|i| (i * 31 % 251) as u8).collect();
        for (size, cs) in [(10_000u64, 4096u32), (3000, 4096), (0, 4096)] {
            let file = &data[..size as usize];
            for (i, chunk) in file.chunks(cs as usize).enumerate() {
                for piece in [1usize, 7, 1000, 4096] {
                    let mut h = ChunkHasher::new(i as u32, cs, size);
                    for p in chunk.chunks(piece) {
                        h.update(p);
                    }
                    assert_eq!(h.finalize(), chunk_digest(chunk, i as u32, cs, size));
                }
            }
        }
    }

    #[test]
    fn wrong_count_is_refused() {
        assert!(root_from_digests(&[[0; 32]], 1024, 5000).is_none());
    }

    #[test]
    fn chunk_sizes() {
        assert_eq!(chunk_size_for(0), DEFAULT_CHUNK_SIZE);
        assert_eq!(chunk_size_for(256 << 30), 4 << 20);
        assert_eq!(chunk_size_for(1 << 40), 16 << 20);
        assert!(valid_chunk_size(1024) && !valid_chunk_size(1000) && !valid_chunk_size(128 << 20));
    }
}
